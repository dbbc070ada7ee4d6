/*
 * libFuzzer target: the configuration parser (daemon/config.c), a file
 * through tfd_startup_options and tfd_config_load (the input is written to a
 * memfd and read back through its /proc/self/fd path, so no file is left on
 * disk), and flags and settings through tfd_config_flag, tfd_config_set and
 * tfd_config_runtime as tenferrod's main applies them (layout in
 * fuzz-input.h). Besides crashes and sanitizer reports it checks what the
 * rest of the daemon relies on: every limit in its documented range, every
 * string terminated, every list within its array, a refusal that says why,
 * and that a user or group given as a number names exactly that id.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "tests/fuzz/fuzz-input.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char memfd_path[64];

/* Aborts with a message: a finding. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz-config: FINDING: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tfd_log_set_level(TFD_LOG_ERROR);
    memfd = memfd_create("fuzz-config", MFD_CLOEXEC);
    if (memfd < 0) fail("memfd_create: %s", strerror(errno));
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    return 0;
}

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

/* What the daemon assumes of any options config.c hands it. */
static void check_options(const tfd_options *o) {
    if (!terminated(o->socket_path, sizeof o->socket_path) ||
        !terminated(o->socket_group, sizeof o->socket_group) ||
        !terminated(o->device, sizeof o->device))
        fail("a string option is not terminated");
    if (strcmp(o->device, "auto") != 0 && strcmp(o->device, "cpu") != 0 &&
        strncmp(o->device, "cuda:", 5) != 0)
        fail("device \"%s\" is not auto, cpu or cuda:N", o->device);
    if (o->socket_mode > 0777) fail("socket_mode %o", o->socket_mode);
    if (o->workers < 0 || o->workers > 1000000) fail("workers %d", o->workers);
    if (o->max_clients < 0 || o->max_clients > 1000000) fail("max_clients %d", o->max_clients);
    if (o->busy_poll_us < -1 || o->busy_poll_us > 1000000) fail("busy_poll_us %d", o->busy_poll_us);
    if (o->max_frame_bytes < TF__MIN_MAX_FRAME_BYTES || o->max_frame_bytes > UINT32_MAX)
        fail("max_frame_bytes %llu", (unsigned long long)o->max_frame_bytes);
    if (o->log_level < TFD_LOG_ERROR || o->log_level > TFD_LOG_DEBUG)
        fail("log_level %d", o->log_level);
    if (o->policy != TFD_POLICY_REJECT && o->policy != TFD_POLICY_WAIT) fail("policy %d", o->policy);
    if (o->n_allowed < 0 || o->n_allowed > TFD_MAX_IDS || o->n_admins < 0 ||
        o->n_admins > TFD_MAX_IDS || o->n_priorities < 0 || o->n_priorities > TFD_MAX_IDS)
        fail("a list holds %d/%d/%d entries", o->n_allowed, o->n_admins, o->n_priorities);
    for (int i = 0; i < o->n_priorities; i++)
        if (o->priorities[i].priority != -1 && o->priorities[i].priority != 1)
            fail("priority class %d", o->priorities[i].priority);
}

static void check_refusal(int rc, const char *err, size_t cap) {
    if (rc == 0) return;
    if (rc != -1) fail("a refusal returned %d", rc);
    if (!terminated(err, cap) || !err[0]) fail("a refusal does not say why");
}

/* 1 when `s` is a plain decimal number (what a principal list reads as an id). */
static int is_number(const char *s) { return s[0] && strspn(s, "0123456789") == strlen(s); }

/*
 * A principal list that was accepted: every token that is a number (after an
 * optional '@') must be in the list as exactly that id, whatever else the
 * list holds (names resolve to any id).
 */
static void check_numbers(const char *value, const tfd_principal *list, int n) {
    char buf[1024];
    if (strlen(value) >= sizeof buf) return;
    strcpy(buf, value);
    char *save;
    for (char *tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        const char *num = tok[0] == '@' ? tok + 1 : tok;
        if (!is_number(num)) continue;
        unsigned long long want = strtoull(num, NULL, 10); /* ULLONG_MAX when it overflows */
        int found = 0;
        for (int i = 0; i < n && !found; i++) found = list[i].id == want;
        if (!found) fail("\"%s\" was accepted in a list but no entry has id %s", tok, num);
    }
}

/* 1 for the settings whose value is a size or a count (config.c's parse_size). */
static int is_size(const char *section, const char *key) {
    static const char *const keys[] = {"workers", "max_frame_bytes", "max_pinned_bytes",
                                       "max_clients", "busy_poll_us", "wait_deadline_ms"};
    if (strncmp(section, "quota.", 6) == 0) return 1;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

/* After a setting was accepted, the setting-specific promises. */
static void check_setting(const tfd_options *o, const char *section, const char *key,
                          const char *value) {
    /* No size or count is negative: a minus sign must be refused, not wrapped around. */
    if (is_size(section, key) && strchr(value, '-'))
        fail("[%s] %s accepted the negative \"%s\"", section, key, value);
    if (strcmp(section, "access") == 0 && strcmp(key, "admin_users") == 0)
        check_numbers(value, o->admins, o->n_admins);
    if (strcmp(section, "access") == 0 &&
        (strcmp(key, "allowed_users") == 0 || strcmp(key, "allowed_groups") == 0))
        check_numbers(value, o->allowed, o->n_allowed);
}

/*
 * Applies one setting and checks the outcome. A refused setting may leave
 * the options half changed (every caller then drops them, as main and a
 * reload do), so they go back to what they were before the next one.
 */
static void apply(tfd_options *opt, const char *section, const char *key, const char *value) {
    tfd_options before = *opt;
    char err[512];
    memset(err, 0x55, sizeof err);
    int rc = tfd_config_set(opt, section, key, value, err, sizeof err);
    check_refusal(rc, err, sizeof err);
    if (rc != 0) {
        *opt = before;
        return;
    }
    check_setting(opt, section, key, value);
    check_options(opt);
}

/* Splits the input at NUL and newline characters into at most `cap` strings (in place). */
static int split(char *text, size_t len, char **out, int cap) {
    int n = 0;
    char *start = text;
    for (size_t i = 0; i <= len && n < cap; i++) {
        if (i == len || text[i] == '\0' || text[i] == '\n') {
            text[i] = '\0';
            out[n++] = start;
            start = text + i + 1;
        }
    }
    return n;
}

static void fuzz_file(const uint8_t *data, size_t size) {
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        fail("cannot write the memfd: %s", strerror(errno));
    tfd_startup startup;
    memset(&startup, 0, sizeof startup);
    snprintf(startup.config_path, sizeof startup.config_path, "%s", memfd_path);
    tfd_options opt;
    char err[512];
    memset(err, 0x55, sizeof err);
    int rc = tfd_startup_options(&startup, &opt, err, sizeof err);
    check_refusal(rc, err, sizeof err);
    if (rc == 0) check_options(&opt);
}

static void fuzz_flags(char **tok, int n) {
    tfd_options opt;
    tfd_options_defaults(&opt);
    for (int i = 0; i + 1 < n; i += 2) {
        const char *section, *key;
        if (tfd_config_flag(tok[i], &section, &key) != 0) continue;
        apply(&opt, section, key, tok[i + 1]);
    }
}

static void fuzz_settings(char **tok, int n) {
    tfd_options opt;
    tfd_options_defaults(&opt);
    for (int i = 0; i + 2 < n; i += 3) {
        apply(&opt, tok[i], tok[i + 1], tok[i + 2]);
        int runtime = tfd_config_runtime(tok[i], tok[i + 1]);
        if (runtime != 0 && runtime != 1) fail("tfd_config_runtime returned %d", runtime);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int mode = data[0] % 3;
    if (mode == FZ_CONFIG_FILE) {
        fuzz_file(data + 1, size - 1);
        return 0;
    }
    char *text = malloc(size);
    char *tok[192];
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    int n = split(text, size - 1, tok, (int)(sizeof tok / sizeof *tok));
    if (mode == FZ_CONFIG_FLAGS)
        fuzz_flags(tok, n);
    else
        fuzz_settings(tok, n);
    free(text);
    return 0;
}
