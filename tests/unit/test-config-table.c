/*
 * Unit tests of the settings table (daemon/config.c) against everything that
 * describes it outside the code. The table is the one place a default is
 * written; these tests fail when a copy of it disagrees:
 *
 *  - tfd_options_defaults is each setting's default text run through its own
 *    setter: setting a default again changes no byte, every default text is
 *    accepted, and the constants other modules start from (the client's frame
 *    maximum, the contraction cache's first bound) are the table's values;
 *  - tenferrod --help (tfd_config_usage) prints each flag's default;
 *  - etc/tenferrod.conf.example describes every setting once, under its
 *    [section], with the table's default (uncommented, as the file's style
 *    is) or commented out when the default is unset or depends on the
 *    machine, with a "# reload: yes|no" note that agrees with the table, and
 *    names no key the table does not know; loading it gives the defaults;
 *  - every table of docs/NAME.md with a "default" column: a row that names a
 *    setting as `[section] key` names one the table knows, once per row,
 *    with the table's default (and its flag and reload, where the table has
 *    those columns); docs/operations.md has such a row for every setting.
 *
 * The files are read relative to the repository root, where the tests run;
 * TENFERRO_CONF_EXAMPLE and TENFERRO_DOCS_DIR name others.
 */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/backend/contract-cache.h"
#include "daemon/config.h"

/* The doc whose settings table lists every setting (the others list some). */
#define SETTINGS_DOC "operations.md"

#define MAX_SETTINGS 128
#define MAX_LINE 4096

static tfd_setting_info table[MAX_SETTINGS];
static size_t n_table;

static void load_table(void) {
    n_table = 0;
    while (n_table < MAX_SETTINGS && tfd_config_setting(n_table, &table[n_table]) == 0) n_table++;
    ck_assert_msg(n_table > 0 && n_table < MAX_SETTINGS, "%zu settings", n_table);
}

static const char *path_from(const char *env, const char *fallback) {
    const char *v = getenv(env);
    return v && v[0] ? v : fallback;
}

/* The index of [section] key in the table, or -1. */
static int find_setting(const char *section, const char *key) {
    for (size_t i = 0; i < n_table; i++)
        if (strcmp(table[i].section, section) == 0 && strcmp(table[i].key, key) == 0) return (int)i;
    return -1;
}

/* 1 when a setting's line in the example is commented out: no default a file could spell. */
static int shown_commented(const tfd_setting_info *s) {
    return s->by_machine || !s->def[0];
}

/* ---- the table and tfd_options_defaults ---- */

START_TEST(test_table_well_formed) {
    load_table();
    for (size_t i = 0; i < n_table; i++) {
        const tfd_setting_info *s = &table[i];
        ck_assert_ptr_nonnull(s->def);
        ck_assert_msg(s->help && s->help[0], "[%s] %s has no help", s->section, s->key);
        ck_assert_msg(!s->by_machine || s->def[0], "[%s] %s: a machine default says how", s->section,
                      s->key);
        ck_assert_msg(find_setting(s->section, s->key) == (int)i, "[%s] %s is in the table twice",
                      s->section, s->key);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(!s->flag || !table[j].flag || strcmp(s->flag, table[j].flag) != 0,
                          "--%s names two settings", s->flag);
    }
}
END_TEST

/*
 * Setting a default again over the defaults changes no byte: what
 * tfd_options_defaults gives is the table's text, read by the setter a file's
 * line would go through.
 */
START_TEST(test_defaults_are_the_table) {
    load_table();
    tfd_options def, again;
    tfd_options_defaults(&def);
    for (size_t i = 0; i < n_table; i++) {
        const tfd_setting_info *s = &table[i];
        if (s->by_machine) continue; /* def says how, not what */
        char err[512];
        memcpy(&again, &def, sizeof def);
        ck_assert_msg(tfd_config_set(&again, s->section, s->key, s->def, err, sizeof err) == 0,
                      "the default of [%s] %s is refused: %s", s->section, s->key, err);
        ck_assert_msg(memcmp(&again, &def, sizeof def) == 0,
                      "[%s] %s = %s is not what tfd_options_defaults set", s->section, s->key, s->def);
    }
    /* Two calls agree (nothing read from the environment besides the machine's sizes). */
    tfd_options_defaults(&again);
    ck_assert(memcmp(&again, &def, sizeof def) == 0);
    /* The machine's defaults, within what config.c promises. */
    ck_assert_int_ge(def.max_buffers, 64);
    ck_assert_int_le(def.max_buffers, 32768);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        ck_assert_uint_eq(def.max_pinned_bytes, (uint64_t)pages * (uint64_t)page / 2);
}
END_TEST

/* Constants other modules start from before (or without) the configuration. */
START_TEST(test_defaults_match_shared_constants) {
    tfd_options def;
    tfd_options_defaults(&def);
    /* The client library's default frame maximum (common/frame.h) is the daemon's. */
    ck_assert_uint_eq(def.max_frame_bytes, TF__DEFAULT_MAX_FRAME_BYTES);
    /* The contraction cache's bound until the configuration reaches it (contract-cache.c). */
    ck_assert_uint_eq(def.contraction_plans, TFD_CONTRACT_PLANS_DEFAULT);
}
END_TEST

/* Every flag's line of --help ends with the table's default, or says none when unset. */
START_TEST(test_help_prints_defaults) {
    load_table();
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(out);
    tfd_config_usage(out);
    fclose(out);
    for (size_t i = 0; i < n_table; i++) {
        const tfd_setting_info *s = &table[i];
        if (!s->flag) continue;
        char head[160];
        snprintf(head, sizeof head, "  --%-22s [%s] %s: ", s->flag, s->section, s->key);
        const char *line = strstr(text, head);
        ck_assert_msg(line != NULL, "--help has no line for --%s", s->flag);
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        char want[256];
        snprintf(want, sizeof want, "; default %s", s->def);
        size_t wl = strlen(want), ll = (size_t)(end - line);
        if (s->def[0])
            ck_assert_msg(ll >= wl && memcmp(end - wl, want, wl) == 0,
                          "--help for --%s does not end with \"%s\": %.*s", s->flag, want, (int)ll, line);
        else
            ck_assert_msg(!memmem(line, ll, "; default", 9), "--%s is unset by default: %.*s", s->flag,
                          (int)ll, line);
    }
    free(text);
}
END_TEST

/* ---- etc/tenferrod.conf.example ---- */

START_TEST(test_example_matches_table) {
    load_table();
    const char *path = path_from("TENFERRO_CONF_EXAMPLE", "etc/tenferrod.conf.example");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s (run from the repository root)", path);
    int seen[MAX_SETTINGS] = {0};
    char section[64] = "", reload[8] = "", line[MAX_LINE];
    int n = 0, problems = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '[') {
            char *close = strchr(line, ']');
            ck_assert_msg(close && close[1] == '\0', "%s:%d: a bad section header", path, n);
            snprintf(section, sizeof section, "%.*s", (int)(close - line - 1), line + 1);
            reload[0] = '\0'; /* a reload note belongs to its section */
            continue;
        }
        if (sscanf(line, "# reload: %7s", reload) == 1) continue;
        /* A setting's line: "key = value", or "#key = value" commented out (as test-install reads it). */
        int commented = line[0] == '#';
        const char *p = line + commented;
        size_t key_len = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
        if (key_len == 0 || strncmp(p + key_len, " = ", 3) != 0) continue;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)key_len, p);
        const char *value = p + key_len + 3;
        int i = find_setting(section, key);
        if (i < 0) {
            fprintf(stderr, "%s:%d: [%s] %s is no setting of the table\n", path, n, section, key);
            problems++;
            continue;
        }
        const tfd_setting_info *s = &table[i];
        if (seen[i]++) {
            fprintf(stderr, "%s:%d: [%s] %s is described twice\n", path, n, section, key);
            problems++;
        }
        if (shown_commented(s) && !commented) {
            fprintf(stderr, "%s:%d: [%s] %s has no default a file could spell (%s): comment it out\n",
                    path, n, section, key, s->def[0] ? s->def : "unset");
            problems++;
        }
        if (!shown_commented(s) && (commented || strcmp(value, s->def) != 0)) {
            fprintf(stderr, "%s:%d: want \"%s = %s\", the table's default, not \"%s\"\n", path, n, key,
                    s->def, line);
            problems++;
        }
        if (strcmp(reload, s->runtime ? "yes" : "no") != 0) {
            fprintf(stderr, "%s:%d: [%s] %s wants \"# reload: %s\" above it in its section, not \"%s\"\n",
                    path, n, section, key, s->runtime ? "yes" : "no", reload[0] ? reload : "none");
            problems++;
        }
    }
    fclose(f);
    for (size_t i = 0; i < n_table; i++) {
        if (seen[i]) continue;
        fprintf(stderr, "%s: [%s] %s is missing (want \"%s%s = %s\" under [%s])\n", path,
                table[i].section, table[i].key, shown_commented(&table[i]) ? "#" : "", table[i].key,
                table[i].by_machine ? "VALUE" : table[i].def, table[i].section);
        problems++;
    }
    ck_assert_msg(problems == 0, "%s disagrees with the settings table in %d places (listed above)", path,
                  problems);

    /* Its uncommented lines are the defaults themselves, so loading it changes nothing. */
    tfd_options def, loaded;
    tfd_options_defaults(&def);
    tfd_options_defaults(&loaded);
    char err[512];
    ck_assert_msg(tfd_config_load(path, &loaded, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(&def, &loaded, sizeof def) == 0, "loading %s changes the defaults", path);
}
END_TEST

/* ---- the docs' settings tables ---- */

#define MAX_CELLS 16

/* Trims blanks at both ends, in place. */
static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Splits a Markdown table line into trimmed cells; a | inside `code` or escaped is text. */
static int split_cells(char *line, char **cells) {
    int n = 0, code = 0;
    char *p = strchr(line, '|');
    if (!p) return 0;
    char *start = ++p;
    for (; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '`') {
            code = !code;
        } else if (*p == '|' && !code) {
            *p = '\0';
            if (n < MAX_CELLS) cells[n++] = trim(start);
            start = p + 1;
        }
    }
    return n;
}

/* Copies a cell without its backticks: `64M` and 64M say the same. */
static void plain(const char *cell, char *out, size_t cap) {
    size_t n = 0;
    for (; *cell && n + 1 < cap; cell++)
        if (*cell != '`') out[n++] = *cell;
    out[n] = '\0';
}

/*
 * 1 when a docs default cell states the table's default: it starts with the
 * default as the file writes it ("empty" for an unset one, the table's words
 * for one the machine decides), then ends or goes on after a blank or
 * punctuation ("0 (unlimited)", "auto: 500 on a GPU").
 */
static int states_default(const tfd_setting_info *s, const char *cell) {
    char text[512];
    plain(cell, text, sizeof text);
    const char *want = s->def[0] ? s->def : "empty";
    size_t n = strlen(want);
    if (strncmp(text, want, n) != 0) return 0;
    return text[n] == '\0' || strchr(" ,;:(", text[n]) != NULL;
}

/* Finds a column by its header's name; -1 when the table has none. */
static int column(char **header, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcasecmp(header[i], name) == 0) return i;
    return -1;
}

/*
 * Checks every settings row of every table with a "default" column in one doc;
 * marks in listed the settings it has a row for. Returns the problems found.
 */
static int check_doc(const char *path, int *listed) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    char line[MAX_LINE], header_line[MAX_LINE];
    char *header[MAX_CELLS], *cells[MAX_CELLS];
    int n = 0, problems = 0, fence = 0, in_table = 0, n_header = 0;
    int col_default = -1, col_flag = -1, col_reload = -1;
    while (fgets(line, sizeof line, f)) {
        n++;
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(trim(line), "```", 3) == 0) fence = !fence;
        if (fence || line[0] != '|') {
            in_table = 0;
            continue;
        }
        if (!in_table) { /* a header; the separator line follows */
            memcpy(header_line, line, sizeof line);
            n_header = split_cells(header_line, header);
            col_default = column(header, n_header, "default");
            col_flag = column(header, n_header, "flag");
            col_reload = column(header, n_header, "reload");
            in_table = 1;
            continue;
        }
        int n_cells = split_cells(line, cells);
        if (col_default < 0 || n_cells == 0 || !strstr(cells[0], "`[")) continue;
        /* A settings row: one `[section] key`, and nothing else, in its first cell. */
        char section[64] = "", key[64] = "", again[160];
        (void)sscanf(cells[0], "`[%63[^]]] %63[a-z_]", section, key);
        snprintf(again, sizeof again, "`[%s] %s`", section, key);
        if (strcmp(cells[0], again) != 0) {
            fprintf(stderr, "%s:%d: name one setting per row as `[section] key`, not %s\n", path, n,
                    cells[0]);
            problems++;
            continue;
        }
        int i = find_setting(section, key);
        if (i < 0) {
            fprintf(stderr, "%s:%d: [%s] %s is no setting of the table\n", path, n, section, key);
            problems++;
            continue;
        }
        const tfd_setting_info *s = &table[i];
        listed[i] = 1;
        if (col_default >= n_cells || !states_default(s, cells[col_default])) {
            fprintf(stderr, "%s:%d: the default of [%s] %s is %s, not \"%s\"\n", path, n, section, key,
                    s->def[0] ? s->def : "empty", col_default < n_cells ? cells[col_default] : "");
            problems++;
        }
        if (col_flag >= 0) {
            char want[80], got[256];
            snprintf(want, sizeof want, "--%s", s->flag ? s->flag : "");
            plain(col_flag < n_cells ? cells[col_flag] : "", got, sizeof got);
            if (strcmp(got, s->flag ? want : "-") != 0) {
                fprintf(stderr, "%s:%d: the flag of [%s] %s is %s, not \"%s\"\n", path, n, section, key,
                        s->flag ? want : "-", got);
                problems++;
            }
        }
        if (col_reload >= 0) {
            const char *want = s->runtime ? "yes" : "no";
            const char *got = col_reload < n_cells ? cells[col_reload] : "";
            if (strncmp(got, want, strlen(want)) != 0 || isalpha((unsigned char)got[strlen(want)])) {
                fprintf(stderr, "%s:%d: [%s] %s %s on reload, not \"%s\"\n", path, n, section, key,
                        s->runtime ? "changes" : "does not change", got);
                problems++;
            }
        }
    }
    fclose(f);
    return problems;
}

START_TEST(test_docs_match_table) {
    load_table();
    const char *dir = path_from("TENFERRO_DOCS_DIR", "docs");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s (run from the repository root)", dir);
    int problems = 0, docs = 0, found_settings_doc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".md") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int listed[MAX_SETTINGS] = {0};
        problems += check_doc(path, listed);
        docs++;
        if (strcmp(e->d_name, SETTINGS_DOC) != 0) continue;
        found_settings_doc = 1;
        /* The settings doc's table lists every setting; the others may list some. */
        for (size_t i = 0; i < n_table; i++) {
            if (listed[i]) continue;
            const tfd_setting_info *s = &table[i];
            fprintf(stderr, "%s: no row for [%s] %s (want \"| `[%s] %s` | `--%s` | %s | %s | ... |\")\n",
                    path, s->section, s->key, s->section, s->key, s->flag ? s->flag : "-",
                    s->by_machine ? s->def : s->def[0] ? s->def : "empty", s->runtime ? "yes" : "no");
            problems++;
        }
    }
    closedir(d);
    ck_assert_msg(docs > 0, "no docs in %s", dir);
    ck_assert_msg(found_settings_doc, "%s/%s is missing", dir, SETTINGS_DOC);
    ck_assert_msg(problems == 0, "the docs disagree with the settings table in %d places (listed above)",
                  problems);
}
END_TEST

static Suite *config_table_suite(void) {
    Suite *s = suite_create("config-table");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_table_well_formed);
    tcase_add_test(tc, test_defaults_are_the_table);
    tcase_add_test(tc, test_defaults_match_shared_constants);
    tcase_add_test(tc, test_help_prints_defaults);
    tcase_add_test(tc, test_example_matches_table);
    tcase_add_test(tc, test_docs_match_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(config_table_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
