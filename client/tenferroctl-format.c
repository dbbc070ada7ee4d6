/*
 * Renderings of the daemon's report (tf_daemon_status) for tenferroctl: readable sections for an
 * operator, one JSON object for scripts, and the Prometheus text exposition
 * format (version 0.0.4) for a scraper. All three print the same report; only
 * the form differs. `status --all` prints a table of one row per daemon, or
 * a JSON array of the same objects with the daemon's instance, socket and
 * state added. Strings that come from clients (their names) are escaped
 * for each format: JSON gets \u escapes and U+FFFD for bytes that are not
 * UTF-8 (a name cut at the daemon's 63-byte limit can end mid-character),
 * Prometheus label values get \\, \" and \n, and the text form shows every
 * byte that is not printable ASCII as \xHH (no escape sequence reaches the
 * operator's terminal, whatever the daemon sent).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client/tenferroctl.h"
#include "common/sanitize.h"

/* ---- text ---- */

/* Prints a duration in ms as the most readable unit. */
static void print_age(FILE *out, uint64_t ms) {
    if (ms < 10000)
        fprintf(out, "%" PRIu64 "ms", ms);
    else
        fprintf(out, "%.1fs", (double)ms / 1000.0);
}

/* Prints one quota line ("per client: device bytes unlimited, ..."); 0 means unlimited. */
static void print_quota(FILE *out, const char *who, const tf_quota_limits *q) {
    if (!q) return;
    const char *names[4] = {"device bytes", "pinned bytes", "tensors", "queued ops"};
    uint64_t limits[4] = {q->device_bytes, q->pinned_bytes, q->live_tensors, q->queued_ops};
    fprintf(out, "  %-11s", who);
    for (int i = 0; i < 4; i++) {
        fprintf(out, "%s %s ", i ? "," : "", names[i]);
        if (limits[i])
            fprintf(out, "%" PRIu64, limits[i]);
        else
            fputs("unlimited", out);
    }
    fputc('\n', out);
}

/*
 * A string from the report made safe for a terminal: shown as it is when
 * printable (the daemon sends names so), else with its bytes escaped, so no
 * escape sequence reaches the operator's terminal.
 */
static const char *shown(const char *in, char *buf, size_t len) {
    if (!in) return "";
    if (tf__is_printable(in)) return in;
    tf__sanitize_name(in, buf, len);
    return buf;
}

void tfctl_print_status_text(FILE *out, const tf_daemon_status *s) {
    char safe[1024];
    fprintf(out, "device:   %s\n", shown(s->device, safe, sizeof safe));
    fprintf(out, "version:  tenferrod %s, up ", s->daemon_version);
    print_age(out, s->uptime_ms);
    fprintf(out, ", reservation policy %s\n", s->policy);
    if (s->device_error && s->device_error[0])
        fprintf(out, "DEVICE LOST: %s (tenferrod is exiting for its service manager to restart it)\n",
                shown(s->device_error, safe, sizeof safe));
    if (s->draining)
        fprintf(out, "DRAINING: new connections are refused; tenferrod exits when its last client "
                     "leaves\n");

    fprintf(out, "\nlimits:\n  max clients %u%s\n", s->max_clients,
            s->max_clients ? "" : " (unlimited)");
    print_quota(out, "per client:", &s->client_quota);
    print_quota(out, "per uid:", &s->uid_quota);

    fprintf(out, "\nclients (%zu):\n", s->n_clients);
    fprintf(out, "  %-6s %-8s %-6s %-7s %-20s %8s %12s %8s %7s %5s %4s %5s %12s %12s %s\n", "id",
            "pid", "uid", "charged", "name", "tensors", "bytes", "queued", "buffers", "maps", "fds",
            "takes", "replies", "decoding", "session");
    for (size_t i = 0; i < s->n_clients; i++) {
        const tf_client_info *ci = &s->clients[i];
        char session[32] = "-";
        if (ci->session_id)
            snprintf(session, sizeof session, "held %" PRIu64, ci->session_id);
        else if (ci->scoped_active)
            snprintf(session, sizeof session, "scoped");
        fprintf(out,
                "  %-6" PRIu64 " %-8d %-6u %-7u %-20s %8" PRIu64 " %12" PRIu64 " %8" PRIu64
                " %7" PRIu64 " %5" PRIu64 " %4" PRIu64 " %5u %12" PRIu64 " %12" PRIu64 " %s\n",
                ci->client_id, ci->pid, ci->uid, ci->charged_uid, shown(ci->name, safe, sizeof safe),
                ci->live_tensors, ci->live_bytes, ci->queued_items, ci->pinned_buffers,
                ci->mappings, ci->descriptors, ci->takes, ci->reply_bytes, ci->decode_bytes,
                session);
    }

    fprintf(out, "\nreservations:\n");
    for (size_t i = 0; i < s->n_reservations; i++) {
        const tf_reservation_info *r = &s->reservations[i];
        fprintf(out, "  domain %u: ", r->domain);
        if (r->holder_client_id) {
            fprintf(out, "held by client %" PRIu64 " (pid %d), session %" PRIu64 ", for ",
                    r->holder_client_id, r->holder_pid, r->session_id);
            print_age(out, r->age_ms);
        } else {
            fprintf(out, "free");
        }
        fprintf(out, "; queued openers: %zu", r->n_queued_client_ids);
        for (size_t j = 0; j < r->n_queued_client_ids; j++)
            fprintf(out, "%s%" PRIu64, j ? ", " : " [", r->queued_client_ids[j]);
        fprintf(out, "%s\n", r->n_queued_client_ids ? "]" : "");
    }

    fprintf(out, "\ncounters:\n");
    for (size_t i = 0; i < s->n_counters; i++)
        fprintf(out, "  %-26s %" PRIu64 "\n", s->counters[i].name, s->counters[i].value);

    fprintf(out, "\ncaches:\n");
    if (s->n_caches == 0) fprintf(out, "  (none)\n");
    else
        fprintf(out, "  %-20s %8s %9s %12s %10s %10s %12s\n", "name", "entries", "capacity", "hits",
                "misses", "evictions", "bytes");
    for (size_t i = 0; i < s->n_caches; i++) {
        const tf_cache_info *ci = &s->caches[i];
        char cap[24] = "unbounded";
        if (ci->capacity) snprintf(cap, sizeof cap, "%" PRIu64, ci->capacity);
        fprintf(out, "  %-20s %8" PRIu64 " %9s %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %12" PRIu64 "\n",
                shown(ci->name, safe, sizeof safe), ci->entries, cap, ci->hits, ci->misses,
                ci->evictions, ci->bytes);
    }
}

/* ---- quoting ---- */

/* Length of the well-formed UTF-8 sequence starting at s, or 0 when none starts there. */
static size_t utf8_length(const unsigned char *s) {
    size_t n;
    uint32_t cp, min;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2, cp = s[0] & 0x1f, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3, cp = s[0] & 0x0f, min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4, cp = s[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

/*
 * Writes str between double quotes, escaped for JSON (json = 1: \", \\, \n, \t and
 * \u00XX for other control characters) or for a Prometheus label value (json = 0:
 * \", \\ and \n). Bytes that are not UTF-8 become U+FFFD in both.
 */
static void write_quoted(FILE *out, const char *str, int json) {
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    fputc('"', out);
    while (*s) {
        size_t n = utf8_length(s);
        if (n != 1) {
            if (n == 0)
                fputs(json ? "\\ufffd" : "\xef\xbf\xbd", out);
            else
                fwrite(s, 1, n, out);
            s += n ? n : 1;
            continue;
        }
        unsigned char ch = *s++;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", out);
        else if (json && ch == '\t')
            fputs("\\t", out);
        else if (json && (ch < 0x20 || ch == 0x7f))
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

/* Writes str as a JSON string. */
static void json_string(FILE *out, const char *str) { write_quoted(out, str, 1); }

/* ---- JSON ---- */

/* Writes a quota object, or null when the daemon sent none. */
static void json_quota(FILE *out, const tf_quota_limits *q) {
    if (!q) {
        fputs("null", out);
        return;
    }
    fprintf(out,
            "{\"device_bytes\":%" PRIu64 ",\"pinned_bytes\":%" PRIu64 ",\"live_tensors\":%" PRIu64
            ",\"queued_ops\":%" PRIu64 "}",
            q->device_bytes, q->pinned_bytes, q->live_tensors, q->queued_ops);
}

/* Writes one client; "session" is null, {"kind":"held","id":N} or {"kind":"scoped"}. */
static void json_client(FILE *out, const tf_client_info *ci) {
    fprintf(out,
            "{\"id\":%" PRIu64 ",\"pid\":%d,\"uid\":%u,\"gid\":%u,\"charged_uid\":%u,\"name\":",
            ci->client_id, ci->pid, ci->uid, ci->gid, ci->charged_uid);
    json_string(out, ci->name);
    fprintf(out,
            ",\"live_tensors\":%" PRIu64 ",\"live_bytes\":%" PRIu64 ",\"pinned_bytes\":%" PRIu64
            ",\"receive_buffer_bytes\":%" PRIu64 ",\"queued_items\":%" PRIu64
            ",\"priority\":%d,\"takes\":%u,\"reply_bytes\":%" PRIu64 ",\"decode_bytes\":%" PRIu64
            ",\"pinned_buffers\":%" PRIu64 ",\"mappings\":%" PRIu64 ",\"descriptors\":%" PRIu64
            ",\"prepared\":%" PRIu64 ",\"queued_requests\":%u,\"session\":",
            ci->live_tensors, ci->live_bytes, ci->pinned_bytes, ci->receive_buffer_bytes,
            ci->queued_items, ci->priority, ci->takes, ci->reply_bytes, ci->decode_bytes,
            ci->pinned_buffers, ci->mappings, ci->descriptors, ci->prepared, ci->queued_requests);
    if (ci->session_id)
        fprintf(out, "{\"kind\":\"held\",\"id\":%" PRIu64 "}}", ci->session_id);
    else
        fputs(ci->scoped_active ? "{\"kind\":\"scoped\"}}" : "null}", out);
}

/* Writes one reservation; the holder's fields are null while the domain is free. */
static void json_reservation(FILE *out, const tf_reservation_info *r) {
    fprintf(out, "{\"domain\":%u,", r->domain);
    if (r->holder_client_id)
        fprintf(out,
                "\"holder_client_id\":%" PRIu64 ",\"holder_pid\":%d,\"session_id\":%" PRIu64
                ",\"age_ms\":%" PRIu64 ",",
                r->holder_client_id, r->holder_pid, r->session_id, r->age_ms);
    else
        fputs("\"holder_client_id\":null,\"holder_pid\":null,\"session_id\":null,\"age_ms\":null,",
              out);
    fputs("\"queued\":[", out);
    for (size_t j = 0; j < r->n_queued_client_ids; j++)
        fprintf(out, "%s%" PRIu64, j ? "," : "", r->queued_client_ids[j]);
    fputs("]}", out);
}

/* Writes the report's members, "device" to "caches", without the braces of their object. */
static void json_status_members(FILE *out, const tf_daemon_status *s) {
    fputs("\"device\":", out);
    json_string(out, s->device);
    fputs(",\"version\":", out);
    json_string(out, s->daemon_version);
    fprintf(out, ",\"uptime_ms\":%" PRIu64 ",\"policy\":", s->uptime_ms);
    json_string(out, s->policy);
    fprintf(out, ",\"draining\":%s,\"device_error\":", s->draining ? "true" : "false");
    if (s->device_error && s->device_error[0])
        json_string(out, s->device_error);
    else
        fputs("null", out);
    fprintf(out, ",\"max_clients\":%u,\"quotas\":{\"client\":", s->max_clients);
    json_quota(out, &s->client_quota);
    fputs(",\"uid\":", out);
    json_quota(out, &s->uid_quota);
    fputs("},\"clients\":[", out);
    for (size_t i = 0; i < s->n_clients; i++) {
        if (i) fputc(',', out);
        json_client(out, &s->clients[i]);
    }
    fputs("],\"reservations\":[", out);
    for (size_t i = 0; i < s->n_reservations; i++) {
        if (i) fputc(',', out);
        json_reservation(out, &s->reservations[i]);
    }
    fputs("],\"counters\":{", out);
    for (size_t i = 0; i < s->n_counters; i++) {
        if (i) fputc(',', out);
        json_string(out, s->counters[i].name);
        fprintf(out, ":%" PRIu64, s->counters[i].value);
    }
    fputs("},\"caches\":[", out);
    for (size_t i = 0; i < s->n_caches; i++) {
        const tf_cache_info *ci = &s->caches[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        json_string(out, ci->name);
        fprintf(out,
                ",\"entries\":%" PRIu64 ",\"capacity\":%" PRIu64 ",\"hits\":%" PRIu64
                ",\"misses\":%" PRIu64 ",\"evictions\":%" PRIu64 ",\"bytes\":%" PRIu64 "}",
                ci->entries, ci->capacity, ci->hits, ci->misses, ci->evictions, ci->bytes);
    }
    fputc(']', out);
}

void tfctl_print_status_json(FILE *out, const tf_daemon_status *s) {
    fputc('{', out);
    json_status_members(out, s);
    fputs("}\n", out);
}

/* ---- status --all ---- */

/* Bytes in the largest binary unit that leaves a number of at least 1 ("512 B", "1.5 GiB"). */
static void format_bytes(uint64_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = (double)bytes;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof *units) {
        value /= 1024.0;
        unit++;
    }
    if (unit == 0)
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, len, "%.1f %s", value, units[unit]);
}

/* Clients a report lists, tenferroctl's own connection not counted. */
static size_t other_clients(const tf_daemon_status *s, uint64_t own_client_id) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_clients; i++)
        if (s->clients[i].client_id != own_client_id) n++;
    return n;
}

/* Execution domains a held session has reserved. */
static size_t held_reservations(const tf_daemon_status *s) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_reservations; i++)
        if (s->reservations[i].holder_client_id) n++;
    return n;
}

/* The columns of one `status --all` row, each a printable string. */
enum {
    ALL_INSTANCE, ALL_SOCKET, ALL_DEVICE, ALL_CLIENTS, ALL_HELD, ALL_MEMORY, ALL_STATE,
    ALL_COLUMNS
};
#define ALL_CELL_BYTES 1024
typedef struct all_row {
    char cell[ALL_COLUMNS][ALL_CELL_BYTES];
} all_row;

/* Fills a row's cells from an entry; "-" where an unreachable daemon said nothing. */
static void all_row_of(const tfctl_daemon_entry *e, all_row *row) {
    char safe[ALL_CELL_BYTES];
    snprintf(row->cell[ALL_INSTANCE], ALL_CELL_BYTES, "%s", shown(e->instance, safe, sizeof safe));
    snprintf(row->cell[ALL_SOCKET], ALL_CELL_BYTES, "%s", shown(e->socket, safe, sizeof safe));
    const tf_daemon_status *s = e->status;
    if (!s) {
        for (int col = ALL_DEVICE; col < ALL_STATE; col++)
            snprintf(row->cell[col], ALL_CELL_BYTES, "-");
        char reason[ALL_CELL_BYTES - sizeof "unreachable: "];
        snprintf(row->cell[ALL_STATE], ALL_CELL_BYTES, "unreachable: %s",
                 shown(e->unreachable, reason, sizeof reason));
        return;
    }
    snprintf(row->cell[ALL_DEVICE], ALL_CELL_BYTES, "%s", shown(s->device, safe, sizeof safe));
    snprintf(row->cell[ALL_CLIENTS], ALL_CELL_BYTES, "%zu", other_clients(s, e->own_client_id));
    snprintf(row->cell[ALL_HELD], ALL_CELL_BYTES, "%zu", held_reservations(s));
    format_bytes(tf_daemon_status_counter(s, "device_bytes_live"), row->cell[ALL_MEMORY],
                 ALL_CELL_BYTES);
    snprintf(row->cell[ALL_STATE], ALL_CELL_BYTES, "up");
}

/* Prints one line of the table: every cell padded to its column's width but the last. */
static void all_print_line(FILE *out, const char *const cells[ALL_COLUMNS],
                           const int width[ALL_COLUMNS]) {
    for (int col = 0; col + 1 < ALL_COLUMNS; col++) fprintf(out, "%-*s  ", width[col], cells[col]);
    fprintf(out, "%s\n", cells[ALL_COLUMNS - 1]);
}

void tfctl_print_all_text(FILE *out, const tfctl_daemon_entry *entries, size_t n) {
    static const char *const headings[ALL_COLUMNS] = {"instance", "socket", "device", "clients",
                                                      "held",     "memory", "state"};
    all_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "tenferroctl: out of memory for the table\n");
        return;
    }
    int width[ALL_COLUMNS];
    for (int col = 0; col < ALL_COLUMNS; col++) width[col] = (int)strlen(headings[col]);
    for (size_t i = 0; i < n; i++) {
        all_row_of(&entries[i], &rows[i]);
        for (int col = 0; col < ALL_COLUMNS; col++) {
            int w = (int)strlen(rows[i].cell[col]);
            if (w > width[col]) width[col] = w;
        }
    }
    all_print_line(out, headings, width);
    for (size_t i = 0; i < n; i++) {
        const char *cells[ALL_COLUMNS];
        for (int col = 0; col < ALL_COLUMNS; col++) cells[col] = rows[i].cell[col];
        all_print_line(out, cells, width);
    }
    free(rows);
}

void tfctl_print_all_json(FILE *out, const tfctl_daemon_entry *entries, size_t n) {
    fputc('[', out);
    for (size_t i = 0; i < n; i++) {
        const tfctl_daemon_entry *e = &entries[i];
        fputs(i ? ",{\"instance\":" : "{\"instance\":", out);
        json_string(out, e->instance);
        fputs(",\"socket\":", out);
        json_string(out, e->socket);
        fputs(",\"state\":", out);
        if (e->status) {
            json_string(out, "up");
            fputc(',', out);
            json_status_members(out, e->status);
        } else {
            char state[sizeof e->unreachable + 32];
            snprintf(state, sizeof state, "unreachable: %s", e->unreachable);
            json_string(out, state);
        }
        fputc('}', out);
    }
    fputs("]\n", out);
}

/* ---- Prometheus ---- */

/* Writes a metric family's HELP and TYPE lines. */
static void prom_family(FILE *out, const char *name, const char *type, const char *help) {
    fprintf(out, "# HELP tenferrod_%s %s\n# TYPE tenferrod_%s %s\n", name, help, name, type);
}

/* Writes a label value with Prometheus escapes. */
static void prom_label_value(FILE *out, const char *v) { write_quoted(out, v, 0); }

/* A family of one unlabelled sample. */
static void prom_gauge(FILE *out, const char *name, const char *help, double value) {
    prom_family(out, name, "gauge", help);
    fprintf(out, "tenferrod_%s %.15g\n", name, value);
}

/* Per-client gauges: each family has one sample per client. */
enum {
    CLIENT_LIVE_BYTES,
    CLIENT_LIVE_TENSORS,
    CLIENT_PINNED_BYTES,
    CLIENT_RECEIVE_BUFFER_BYTES,
    CLIENT_QUEUED_ITEMS,
    CLIENT_TAKES,
    CLIENT_CHARGED_UID,
    CLIENT_REPLY_BYTES,
    CLIENT_DECODE_BYTES,
    CLIENT_PINNED_BUFFERS,
    CLIENT_MAPPINGS,
    CLIENT_DESCRIPTORS,
    CLIENT_PREPARED,
    CLIENT_QUEUED_REQUESTS
};
static const struct {
    const char *name, *help;
} client_gauges[] = {
    [CLIENT_LIVE_BYTES] = {"client_live_bytes", "Device bytes of a client's live tensors."},
    [CLIENT_LIVE_TENSORS] = {"client_live_tensors", "Live tensors of a client."},
    [CLIENT_PINNED_BYTES] = {"client_pinned_bytes", "Pinned host bytes of a client's buffers."},
    [CLIENT_RECEIVE_BUFFER_BYTES] = {"client_receive_buffer_bytes",
                                     "Bytes buffered for a client's unfinished frames."},
    [CLIENT_QUEUED_ITEMS] = {"client_queued_items", "Stream items of a client not yet executed."},
    [CLIENT_TAKES] = {"client_takes", "Copies from another daemon a client has in progress."},
    [CLIENT_CHARGED_UID] = {"client_charged_uid",
                            "The uid max_clients_per_uid counts a connection for (another "
                            "daemon's: the uid of the client that asked for the copy)."},
    [CLIENT_REPLY_BYTES] = {"client_reply_bytes",
                            "Reply bytes queued for a client and not yet read, reserved ones included."},
    [CLIENT_DECODE_BYTES] = {"client_decode_bytes",
                             "Decode budget of a client's large frame being decoded."},
    [CLIENT_PINNED_BUFFERS] = {"client_pinned_buffers", "Pinned buffers of a client."},
    [CLIENT_MAPPINGS] = {"client_mappings",
                         "Mappings the daemon holds of a client's memory (buffers, completion page)."},
    [CLIENT_DESCRIPTORS] = {"client_descriptors",
                            "Descriptors the daemon holds for a client (socket, memfds awaiting Mapped)."},
    [CLIENT_PREPARED] = {"client_prepared", "Prepared graphs a client holds."},
    [CLIENT_QUEUED_REQUESTS] = {"client_queued_requests",
                                "Requests of a client waiting for the execution domain."},
};

/* The value of per-client gauge `which` for one client. */
static uint64_t client_value(const tf_client_info *ci, int which) {
    switch (which) {
    case CLIENT_LIVE_BYTES: return ci->live_bytes;
    case CLIENT_LIVE_TENSORS: return ci->live_tensors;
    case CLIENT_PINNED_BYTES: return ci->pinned_bytes;
    case CLIENT_RECEIVE_BUFFER_BYTES: return ci->receive_buffer_bytes;
    case CLIENT_TAKES: return ci->takes;
    case CLIENT_CHARGED_UID: return ci->charged_uid;
    case CLIENT_REPLY_BYTES: return ci->reply_bytes;
    case CLIENT_DECODE_BYTES: return ci->decode_bytes;
    case CLIENT_PINNED_BUFFERS: return ci->pinned_buffers;
    case CLIENT_MAPPINGS: return ci->mappings;
    case CLIENT_DESCRIPTORS: return ci->descriptors;
    case CLIENT_PREPARED: return ci->prepared;
    case CLIENT_QUEUED_REQUESTS: return ci->queued_requests;
    default: return ci->queued_items;
    }
}

/* Writes the per-client families, labelled client, pid, uid and name. */
static void prom_clients(FILE *out, const tf_daemon_status *s) {
    for (int m = 0; m < (int)(sizeof client_gauges / sizeof *client_gauges); m++) {
        prom_family(out, client_gauges[m].name, "gauge", client_gauges[m].help);
        for (size_t i = 0; i < s->n_clients; i++) {
            const tf_client_info *ci = &s->clients[i];
            fprintf(out, "tenferrod_%s{client=\"%" PRIu64 "\",pid=\"%d\",uid=\"%u\",name=",
                    client_gauges[m].name, ci->client_id, ci->pid, ci->uid);
            prom_label_value(out, ci->name);
            fprintf(out, "} %" PRIu64 "\n", client_value(ci, m));
        }
    }
}

/* Writes the reservation families, labelled by execution domain. */
static void prom_reservations(FILE *out, const tf_daemon_status *s) {
    static const char *const names[2] = {"reservation_held", "reservation_queued"};
    static const char *const helps[2] = {
        "1 while a held session has the execution domain reserved.",
        "Openers queued for the execution domain (policy wait)."};
    for (int m = 0; m < 2; m++) {
        prom_family(out, names[m], "gauge", helps[m]);
        for (size_t i = 0; i < s->n_reservations; i++) {
            const tf_reservation_info *r = &s->reservations[i];
            uint64_t v = m == 0 ? (r->holder_client_id != 0) : r->n_queued_client_ids;
            fprintf(out, "tenferrod_%s{domain=\"%u\"} %" PRIu64 "\n", names[m], r->domain, v);
        }
    }
}

/*
 * Writes one daemon counter: a name ending in _live is a live value (a gauge),
 * every other one a running total (a counter, named with _total). A character
 * a metric name cannot hold becomes '_'.
 */
static void prom_counter(FILE *out, const tf_counter_info *k) {
    char metric[128];
    size_t n = 0;
    for (const char *p = k->name; *p && n + sizeof "_total" < sizeof metric; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        metric[n++] = ok ? ch : '_';
    }
    metric[n] = '\0';
    int gauge = n >= 5 && strcmp(metric + n - 5, "_live") == 0;
    if (!gauge) strcat(metric, "_total");
    prom_family(out, metric, gauge ? "gauge" : "counter",
                gauge ? "Live value reported by tenferrod." : "Running total kept by tenferrod.");
    fprintf(out, "tenferrod_%s %" PRIu64 "\n", metric, k->value);
}

/* Writes the cache families, one sample per daemon-wide cache, labelled cache. */
static void prom_caches(FILE *out, const tf_daemon_status *s) {
    static const struct {
        const char *name, *type, *help;
    } families[] = {
        {"cache_entries", "gauge", "Entries a daemon-wide cache holds."},
        {"cache_capacity", "gauge", "The LRU bound of a daemon-wide cache (0 = unbounded)."},
        {"cache_hits_total", "counter", "Lookups a daemon-wide cache answered."},
        {"cache_misses_total", "counter", "Entries a daemon-wide cache had to make."},
        {"cache_evictions_total", "counter", "Entries the LRU bound pushed out."},
        {"cache_bytes", "gauge", "Memory a daemon-wide cache's entries hold, as far as known."},
    };
    for (int m = 0; m < (int)(sizeof families / sizeof *families); m++) {
        prom_family(out, families[m].name, families[m].type, families[m].help);
        for (size_t i = 0; i < s->n_caches; i++) {
            const tf_cache_info *ci = &s->caches[i];
            const uint64_t v[] = {ci->entries, ci->capacity, ci->hits, ci->misses, ci->evictions,
                                  ci->bytes};
            fprintf(out, "tenferrod_%s{cache=", families[m].name);
            prom_label_value(out, ci->name);
            fprintf(out, "} %" PRIu64 "\n", v[m]);
        }
    }
}

void tfctl_print_metrics(FILE *out, const tf_daemon_status *s) {
    prom_gauge(out, "up", "1 when tenferrod answered the status request.", 1);
    prom_family(out, "info", "gauge", "The daemon's device, version and reservation policy.");
    fputs("tenferrod_info{device=", out);
    prom_label_value(out, s->device);
    fputs(",version=", out);
    prom_label_value(out, s->daemon_version);
    fputs(",policy=", out);
    prom_label_value(out, s->policy);
    fputs("} 1\n", out);
    prom_gauge(out, "uptime_seconds", "Seconds since tenferrod started.",
               (double)s->uptime_ms / 1000.0);
    prom_gauge(out, "clients", "Clients connected past the handshake.", (double)s->n_clients);
    prom_gauge(out, "max_clients", "Connections served at once (0 = unlimited).",
               (double)s->max_clients);
    prom_gauge(out, "draining", "1 while an admin drain refuses new connections.", s->draining);
    prom_gauge(out, "device_lost", "1 once the device was declared lost (tenferrod exits).",
               s->device_error && s->device_error[0]);
    prom_reservations(out, s);
    for (size_t i = 0; i < s->n_counters; i++) prom_counter(out, &s->counters[i]);
    prom_caches(out, s);
    prom_clients(out, s);
}

void tfctl_print_metrics_down(FILE *out) {
    prom_gauge(out, "up", "1 when tenferrod answered the status request.", 0);
}
