/*
 * demo-report: the table at the end of `make demo` (docs/demo.md).
 *
 *   demo-report BEFORE.json AFTER.json SAMPLES.jsonl --client NAME STATUS FILE ...
 *
 * Reads the daemon's status report (`tenferroctl status --json`) from before
 * the clients started and after they left, the reports sampled while they
 * ran (one per line), and each client's result line (the DEMO line of
 * demo-common.h, in FILE; STATUS is the client's exit status). Prints one row
 * per client and what the daemon saw: sessions and admission waits, the
 * reservation as sampled, the plan caches, and the memory in use before,
 * at its sampled peak, and after.
 *
 * Exits 1 when a client failed (its exit status, a missing line, or a check
 * that is not OK), when a client is still connected after, or when the
 * daemon's memory in use is not back where it was before; else 0. It only
 * reads files: no connection to the daemon.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo-common.h"

#define MAX_CLIENTS 32

/* ---- a small JSON reader: enough to walk the status report ---- */

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* Returns the position just after the JSON value at p (or p's end on malformed input). */
static const char *skip_value(const char *p) {
    p = skip_ws(p);
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1]) p++;
        return *p ? p + 1 : p;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1);
        while (*p && *p != close) {
            if (close == '}') {
                p = skip_ws(skip_value(p)); /* the key */
                if (*p != ':') return p;
                p++;
            }
            p = skip_ws(skip_value(p));
            if (*p == ',') p = skip_ws(p + 1);
            else if (*p != close) return p;
        }
        return *p ? p + 1 : p;
    }
    while (*p && !strchr(",}] \t\r\n", *p)) p++;
    return p;
}

/* The value of member `key` of the object at obj (top level only), or NULL. */
static const char *member(const char *obj, const char *key) {
    if (!obj) return NULL;
    obj = skip_ws(obj);
    if (*obj != '{') return NULL;
    const char *p = skip_ws(obj + 1);
    size_t klen = strlen(key);
    while (*p == '"') {
        const char *name = p + 1;
        const char *after = skip_value(p);
        int match = (size_t)(after - name - 1) == klen && strncmp(name, key, klen) == 0;
        p = skip_ws(after);
        if (*p != ':') return NULL;
        p = skip_ws(p + 1);
        if (match) return p;
        p = skip_ws(skip_value(p));
        if (*p != ',') return NULL;
        p = skip_ws(p + 1);
    }
    return NULL;
}

/* Element i of the array at arr, or NULL. */
static const char *element(const char *arr, int i) {
    if (!arr) return NULL;
    arr = skip_ws(arr);
    if (*arr != '[') return NULL;
    const char *p = skip_ws(arr + 1);
    for (int k = 0; *p && *p != ']'; k++) {
        if (k == i) return p;
        p = skip_ws(skip_value(p));
        if (*p == ',') p = skip_ws(p + 1);
    }
    return NULL;
}

/* The number at p, or `fallback` for NULL, null or anything that is not a number. */
static double number(const char *p, double fallback) {
    if (!p) return fallback;
    char *end = NULL;
    double v = strtod(p, &end);
    return end == p ? fallback : v;
}

/* Copies the string at p into out (escapes other than \" and \\ shown as '?'). */
static void string(const char *p, char *out, size_t n) {
    size_t k = 0;
    if (p && *p == '"') {
        for (p++; *p && *p != '"' && k + 1 < n; p++) {
            if (*p == '\\') {
                p++;
                out[k++] = *p == '"' || *p == '\\' ? *p : '?';
                if (*p == 'u')
                    for (int i = 0; i < 4 && p[1]; i++) p++;
                if (!*p) break;
            } else {
                out[k++] = *p;
            }
        }
    }
    out[k] = 0;
}

/* A counter of the report (counters.NAME), or 0. */
static double counter(const char *report, const char *name) {
    return number(member(member(report, "counters"), name), 0);
}

/* The name of client `id` in the report's client list, or "?". */
static void client_name(const char *report, double id, char *out, size_t n) {
    const char *c;
    for (int i = 0; (c = element(member(report, "clients"), i)); i++)
        if (number(member(c, "id"), -1) == id) {
            string(member(c, "name"), out, n);
            return;
        }
    snprintf(out, n, "client %.0f", id);
}

/* Reads a whole file into a malloc'd string, or NULL (saying why). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "demo-report: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                s = NULL;
            } else {
                s = t;
            }
        }
    }
    fclose(f);
    if (s) s[len] = 0;
    return s;
}

/* ---- the clients' result lines ---- */

/* One client: what the script says of it and what its DEMO line says. */
typedef struct client_row {
    const char *name, *file;
    int exit_status;
    int has_line;
    char pid[16], unit[32], check[16], note[512];
    double work, flops, bytes, daemon_ms, inproc_ms, waits, wait_ms;
} client_row;

/* Fills a row from the first DEMO line of its file: key=value tokens, then "-- note". */
static void read_client(client_row *c) {
    FILE *f = fopen(c->file, "r");
    if (!f) return;
    char line[2048];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "DEMO ", 5) == 0) {
            c->has_line = 1;
            break;
        }
    fclose(f);
    if (!c->has_line) return;
    line[strcspn(line, "\n")] = 0;
    char *note = strstr(line, " -- ");
    if (note) {
        snprintf(c->note, sizeof c->note, "%s", note + 4);
        *note = 0;
    }
    char *save = NULL;
    for (char *tok = strtok_r(line + 5, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (!strcmp(k, "pid")) snprintf(c->pid, sizeof c->pid, "%s", v);
        else if (!strcmp(k, "unit")) snprintf(c->unit, sizeof c->unit, "%s", v);
        else if (!strcmp(k, "check")) snprintf(c->check, sizeof c->check, "%s", v);
        else if (!strcmp(k, "work")) c->work = strtod(v, NULL);
        else if (!strcmp(k, "flops")) c->flops = strtod(v, NULL);
        else if (!strcmp(k, "bytes")) c->bytes = strtod(v, NULL);
        else if (!strcmp(k, "daemon_ms")) c->daemon_ms = strtod(v, NULL);
        else if (!strcmp(k, "inproc_ms")) c->inproc_ms = strtod(v, NULL);
        else if (!strcmp(k, "waits")) c->waits = strtod(v, NULL);
        else if (!strcmp(k, "wait_ms")) c->wait_ms = strtod(v, NULL);
    }
}

/* Prints the clients' table; returns how many failed. */
static int print_clients(client_row *rows, int n) {
    int failed = 0;
    printf("%-13s %7s  %-18s %7s %9s %10s %14s %6s %10s  %s\n", "client", "pid", "work", "GFLOP",
           "MB moved", "daemon ms", "in-process ms", "waits", "waited ms", "check");
    for (int i = 0; i < n; i++) {
        client_row *c = &rows[i];
        char work[40];
        if (!c->has_line) {
            printf("%-13s %7s  %-18s %7s %9s %10s %14s %6s %10s  FAILED (exit %d, no result line)\n",
                   c->name, "-", "-", "-", "-", "-", "-", "-", "-", c->exit_status);
            failed++;
            continue;
        }
        snprintf(work, sizeof work, "%.0f %s", c->work, c->unit);
        int ok = c->exit_status == 0 && strcmp(c->check, "OK") == 0;
        failed += !ok;
        printf("%-13s %7s  %-18s %7.2f %9.1f %10.1f %14.1f %6.0f %10.1f  %s", c->name, c->pid, work,
               c->flops / 1e9, c->bytes / 1e6, c->daemon_ms, c->inproc_ms, c->waits, c->wait_ms,
               ok ? "OK" : "FAILED");
        if (!ok && c->exit_status != 0) printf(" (exit %d)", c->exit_status);
        printf("\n");
    }
    return failed;
}

/* ---- what the daemon saw ---- */

/* What the samples taken while the clients ran say about the reservation and memory. */
typedef struct sampled {
    int samples, held;
    int most_queued;
    double peak_bytes;
    char holders[256], queued_names[512];
} sampled;

/* Appends `name` to the comma-separated list `list` unless it is there. */
static void add_name(char *list, size_t n, const char *name) {
    size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += len)
        if ((p == list || (p - list >= 2 && p[-2] == ',')) && (p[len] == ',' || p[len] == 0)) return;
    size_t used = strlen(list);
    snprintf(list + used, n - used, "%s%s", used ? ", " : "", name);
}

/* Walks the sampled reports (one JSON object per line). */
static void read_samples(const char *path, sampled *s) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] != '{') continue;
        s->samples++;
        double live = counter(line, "device_bytes_live");
        if (live > s->peak_bytes) s->peak_bytes = live;
        const char *res = element(member(line, "reservations"), 0);
        double holder = number(member(res, "holder_client_id"), -1);
        char name[80];
        if (holder >= 0) {
            s->held++;
            client_name(line, holder, name, sizeof name);
            add_name(s->holders, sizeof s->holders, name);
        }
        const char *queued = member(res, "queued"), *q;
        int count = 0;
        for (int i = 0; (q = element(queued, i)); i++, count++) {
            client_name(line, number(q, -1), name, sizeof name);
            add_name(s->queued_names, sizeof s->queued_names, name);
        }
        if (count > s->most_queued) s->most_queued = count;
    }
    free(line);
    fclose(f);
}

/* Bytes as "12.3 MB" (decimal units, as the table's MB column). */
static const char *bytes_text(double b, char *out, size_t n) {
    if (b < 1e3) snprintf(out, n, "%.0f B", b);
    else if (b < 1e6) snprintf(out, n, "%.1f kB", b / 1e3);
    else snprintf(out, n, "%.1f MB", b / 1e6);
    return out;
}

/* Prints the caches of the report after, with what the run added to their counters. */
static void print_caches(const char *before, const char *after) {
    const char *c;
    for (int i = 0; (c = element(member(after, "caches"), i)); i++) {
        char name[64], prev_name[64];
        string(member(c, "name"), name, sizeof name);
        double hits0 = 0, misses0 = 0;
        const char *b;
        for (int k = 0; (b = element(member(before, "caches"), k)); k++) {
            string(member(b, "name"), prev_name, sizeof prev_name);
            if (!strcmp(name, prev_name)) {
                hits0 = number(member(b, "hits"), 0);
                misses0 = number(member(b, "misses"), 0);
            }
        }
        char bytes[32];
        printf("  %-12s %-18s %4.0f entries (bound %.0f), %6.0f hits, %4.0f misses, %.0f evictions, %s held\n",
               i == 0 ? "caches" : "", name, number(member(c, "entries"), 0),
               number(member(c, "capacity"), 0), number(member(c, "hits"), 0) - hits0,
               number(member(c, "misses"), 0) - misses0, number(member(c, "evictions"), 0),
               bytes_text(number(member(c, "bytes"), 0), bytes, sizeof bytes));
    }
}

/* Prints memory in use before, at the sampled peak and after; returns 0 when back to baseline. */
static int print_memory(const char *before, const char *after, const sampled *s) {
    static const char *const gauges[] = {"device_bytes_live", "device_allocations_live",
                                         "pinned_bytes_live", "pinned_buffers_live"};
    int back = 1;
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
        back &= counter(before, gauges[i]) == counter(after, gauges[i]);
    char b0[32], peak[32], b1[32], p0[32], p1[32];
    printf("  %-12s device %s in %.0f allocations before, %s at the sampled peak, %s in %.0f after; "
           "pinned %s before, %s after: %s\n",
           "memory", bytes_text(counter(before, "device_bytes_live"), b0, sizeof b0),
           counter(before, "device_allocations_live"), bytes_text(s->peak_bytes, peak, sizeof peak),
           bytes_text(counter(after, "device_bytes_live"), b1, sizeof b1),
           counter(after, "device_allocations_live"),
           bytes_text(counter(before, "pinned_bytes_live"), p0, sizeof p0),
           bytes_text(counter(after, "pinned_bytes_live"), p1, sizeof p1),
           back ? "back to baseline" : "NOT back to baseline");
    return back ? 0 : 1;
}

/* Counts the clients of the report after other than tenferroctl's own connection. */
static int clients_left(const char *after) {
    const char *c;
    int n = 0;
    for (int i = 0; (c = element(member(after, "clients"), i)); i++) {
        char name[80];
        string(member(c, "name"), name, sizeof name);
        n += strcmp(name, "tenferroctl") != 0;
    }
    return n;
}

/* The daemon's part of the table; returns the number of problems it found. */
static int print_daemon(const char *before, const char *after, const sampled *s,
                        const client_row *rows, int n) {
    char device[160], policy[16];
    string(member(after, "device"), device, sizeof device);
    string(member(after, "policy"), policy, sizeof policy);
    printf("\ntenferrod: %s, policy %s\n", device, policy);
#define DELTA(name) (counter(after, name) - counter(before, name))
    double counted = 0;
    for (int i = 0; i < n; i++) counted += rows[i].waits;
    printf("  %-12s %.0f held, %.0f scoped (each scoped burst of a client is two: its admission "
           "probe and its work); %.0f operations run\n",
           "sessions", DELTA("sessions_opened"), DELTA("scoped_roots"), DELTA("ops_executed"));
    printf("  %-12s %.0f session entries queued behind a held session, %.0f timed out; the clients "
           "counted %.0f entries slower than %.0f ms\n",
           "admission", DELTA("admissions_queued"), DELTA("admissions_timed_out"), counted,
           DEMO_WAIT_THRESHOLD_S * 1e3);
    if (s->held)
        printf("  %-12s held in %d of %d samples (by %s); up to %d entries queued at once (%s)\n",
               "reservation", s->held, s->samples, s->holders, s->most_queued,
               s->queued_names[0] ? s->queued_names : "none seen");
    else
        printf("  %-12s never seen held in %d samples\n", "reservation", s->samples);
    char up[32], down[32];
    printf("  %-12s %s uploaded, %s downloaded\n", "transfers",
           bytes_text(DELTA("bytes_uploaded"), up, sizeof up),
           bytes_text(DELTA("bytes_downloaded"), down, sizeof down));
#undef DELTA
    print_caches(before, after);
    int problems = print_memory(before, after, s);
    int left = clients_left(after);
    if (left) {
        printf("  %-12s %d client(s) still connected after the run\n", "clients", left);
        problems++;
    }
    if (strncmp(device, "cpu", 3) == 0)
        printf("  %-12s each client's own OpenBLAS/FFTW, on the same CPU as the daemon\n", "in-process");
    else
        printf("  %-12s NOTE: the daemon ran on %s, but the in-process column is each client's "
               "CPU libraries (OpenBLAS/FFTW), not cuBLAS/cuFFT\n",
               "in-process", device);
    return problems;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: demo-report BEFORE.json AFTER.json SAMPLES.jsonl "
                        "--client NAME STATUS FILE ...\n");
        return 2;
    }
    client_row rows[MAX_CLIENTS];
    int n = 0;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--client") != 0 || i + 3 >= argc || n == MAX_CLIENTS) {
            fprintf(stderr, "demo-report: expected --client NAME STATUS FILE at '%s'\n", argv[i]);
            return 2;
        }
        memset(&rows[n], 0, sizeof rows[n]);
        rows[n].name = argv[i + 1];
        rows[n].exit_status = atoi(argv[i + 2]);
        rows[n].file = argv[i + 3];
        read_client(&rows[n]);
        n++;
        i += 3;
    }
    char *before = slurp(argv[1]), *after = slurp(argv[2]);
    if (!before || !after || !member(before, "counters") || !member(after, "counters")) {
        fprintf(stderr, "demo-report: the status reports are missing or unreadable\n");
        free(before);
        free(after);
        return 1;
    }
    sampled s;
    read_samples(argv[3], &s);
    int failed = print_clients(rows, n);
    int problems = print_daemon(before, after, &s, rows, n);
    free(before);
    free(after);
    if (failed || problems) {
        printf("\ndemo: FAILED (%d client(s) failed, %d problem(s) seen on the daemon)\n", failed,
               problems);
        return 1;
    }
    printf("\ndemo: every check OK\n");
    return 0;
}
