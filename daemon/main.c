/*
 * tenferrod's entry point: defaults, then the configuration file, then the
 * command-line flags (which override the file), then the server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/options.h"
#include "daemon/server.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: tenferrod [--config PATH] [--FLAG VALUE ...]\n"
            "  --config PATH            INI configuration (default %s, if present)\n"
            "  --version, --help\n"
            "Every setting of the file can be given as a flag, overriding the file:\n",
            TFD_DEFAULT_CONFIG_PATH);
    /* Each setting's line carries its default, from the settings table (config.c). */
    tfd_config_usage(out);
}

/*
 * Each client costs the daemon a few descriptors (its socket, memfds it has
 * not yet Mapped, a copy's link to another daemon): the soft limit is raised
 * to the hard one, so the per-client and per-uid bounds, not a soft default
 * of 1024, decide when a client is refused, and accept never fails for all.
 */
static void raise_descriptor_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char **argv) {
    tfd_startup startup;
    memset(&startup, 0, sizeof startup);
    const char *config_path = NULL;

    /* First pass: collect flags (checked against scratch options so a bad one fails at once). */
    tfd_options scratch;
    tfd_options_defaults(&scratch);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("tenferrod %s (protocol %d)\n", TFD_VERSION_STRING,
                   TENFERRO__PROTOCOL__PROTOCOL_VERSION);
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "tenferrod: unexpected argument \"%s\" (see --help)\n", arg);
            return 2;
        }
        char name[64];
        const char *value = strchr(arg, '=');
        size_t name_len = value ? (size_t)(value - arg - 2) : strlen(arg + 2);
        if (name_len >= sizeof name) name_len = sizeof name - 1;
        memcpy(name, arg + 2, name_len);
        name[name_len] = '\0';
        const char *section = NULL, *key = NULL;
        int is_config = strcmp(name, "config") == 0;
        if (!is_config && tfd_config_flag(name, &section, &key) != 0) {
            fprintf(stderr, "tenferrod: unknown flag --%s (see --help)\n", name);
            return 2;
        }
        /* A switch stands alone (--test-fault-injection); --flag=false turns one off. */
        if (value)
            value++;
        else if (!is_config && tfd_config_switch(section, key))
            value = "true";
        else if (i + 1 < argc)
            value = argv[++i];
        else {
            fprintf(stderr, "tenferrod: --%s needs a value\n", name);
            return 2;
        }
        if (is_config) {
            config_path = value;
            continue;
        }
        char err[512];
        if (tfd_config_set(&scratch, section, key, value, err, sizeof err) != 0) {
            fprintf(stderr, "tenferrod: --%s: %s\n", name, err);
            return 2;
        }
        if (startup.n_flags == TFD_MAX_FLAGS) {
            fprintf(stderr, "tenferrod: more than %d flags\n", TFD_MAX_FLAGS);
            return 2;
        }
        startup.flags[startup.n_flags++] = (tfd_flag){section, key, value};
    }

    if (config_path) {
        snprintf(startup.config_path, sizeof startup.config_path, "%s", config_path);
    } else if (access(TFD_DEFAULT_CONFIG_PATH, F_OK) == 0) {
        snprintf(startup.config_path, sizeof startup.config_path, "%s", TFD_DEFAULT_CONFIG_PATH);
    }
    tfd_options opt;
    char err[512];
    if (tfd_startup_options(&startup, &opt, err, sizeof err) != 0) {
        fprintf(stderr, "tenferrod: refusing to start: %s\n", err);
        return 2;
    }
    tfd_log_set_level((tfd_log_level)opt.log_level);
    raise_descriptor_limit();
    return tfd_server_run(&opt, &startup);
}
