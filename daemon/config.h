/*
 * Configuration: defaults, the INI file (/etc/tenferro/tenferrod.conf, read
 * with libinih) and command-line flags, all through one table of settings so a
 * key means the same thing and is checked the same way wherever it is given.
 * Command-line flags override the file; SIGHUP re-reads the file (and
 * re-applies the flags) without dropping clients.
 */
#ifndef TENFERRO_DAEMON_CONFIG_H
#define TENFERRO_DAEMON_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "daemon/options.h"

#define TFD_DEFAULT_CONFIG_PATH "/etc/tenferro/tenferrod.conf"

/* Fills every option with its default: each setting's setter run on the table's default text. */
void tfd_options_defaults(tfd_options *opt);

/*
 * Applies one setting, named by its INI section and key ("admission",
 * "policy"). Returns 0, or -1 with the reason in err.
 */
int tfd_config_set(tfd_options *opt, const char *section, const char *key, const char *value,
                   char *err, size_t err_len);

/*
 * Maps a command-line flag ("reservation-policy") to its section and key.
 * Returns 0, or -1 when the flag names no setting.
 */
int tfd_config_flag(const char *flag, const char **section, const char **key);

/* Reads an INI file into opt. Returns 0, or -1 with "path:line: reason" in err. */
int tfd_config_load(const char *path, tfd_options *opt, char *err, size_t err_len);

/* Writes one line per flag with its meaning and its default, for --help. */
void tfd_config_usage(FILE *out);

/*
 * One setting of the table as the outside describes it: --help, the example
 * configuration and the docs' settings tables, which tests/unit/
 * test-config-table.c checks against it.
 */
typedef struct tfd_setting_info {
    const char *section;
    const char *key;
    const char *flag; /* NULL when file-only */
    /*
     * The default as the file writes it ("64M", "auto"; "" when unset). With
     * by_machine it is computed at start instead, and def says how ("half the
     * physical memory").
     */
    const char *def;
    int by_machine;
    int runtime;   /* can change on SIGHUP */
    const char *help;
} tfd_setting_info;

/* Describes the i-th setting of the table into info; 0, or -1 past the last. */
int tfd_config_setting(size_t i, tfd_setting_info *info);

/* 1 when a setting is a switch (true/false): its flag may stand alone, meaning true. */
int tfd_config_switch(const char *section, const char *key);

/* 1 when a setting can change on SIGHUP; 0 when it needs a restart. */
int tfd_config_runtime(const char *section, const char *key);

/*
 * A reload: copies into cur every setting the table marks reloadable from
 * next (a configuration read again), and only those; the caller applies
 * their side effects (log level, polling, cache capacities).
 */
void tfd_config_apply_runtime(tfd_options *cur, const tfd_options *next);

#endif
