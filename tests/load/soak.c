/*
 * The soak's samples and its leak rule (docs/soak.md).
 *
 * A sample is taken at a quiet point: the round's load has ended, every
 * ordinary and hostile child has exited, and the residents are idle. The
 * daemon is then given time to finish reclaiming what the last clients
 * left (a killed client's stream drains, its tensors and buffers are freed)
 * until its gauges stand still, and is sampled: from /proc/PID/status its
 * resident memory (VmRSS, and VmHWM, the peak so far) and thread count,
 * from /proc/PID/fd its open descriptors, and from its status report the
 * gauges (live tensors, device allocations and bytes, pinned bytes and
 * buffers, clients, sessions, queued openers), as tests/integration/harness.c
 * reads counters.
 *
 * The rule, applied once at the end to every sample:
 *   - gauges are exact: at a quiet point only the residents hold anything,
 *     and what they hold does not change, so every gauge must read the same
 *     at every sample as at the first. One tensor, byte, buffer, client or
 *     session more is a leak; nothing is averaged or tolerated.
 *   - resident memory, descriptors and threads may grow while the daemon
 *     warms up (allocator arenas, item and block pools, the libuv thread
 *     pool started by the first pinned buffer) and may wobble with what the
 *     allocator keeps, so they are compared by their floors: past a warm-up
 *     (the first fifth of the samples, at least two), the smallest value of
 *     the last third must not exceed the largest value of the first third by
 *     more than a tolerance (RSS: 8 MiB or 10%, whichever is larger;
 *     descriptors and threads: none). A transient peak cannot fail it; a
 *     leak raises every later sample, so it can.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/load/load.h"

/* Gauge polls while settling, and how many identical polls in a row count as still. */
#define POLL_MS 100
#define STILL_POLLS 3

/* RSS, its peak and the thread count of pid (/proc/PID/status); 0 on success. */
static int read_status(pid_t pid, soak_sample *s) {
    s->rss_kb = th_proc_status_value(pid, "VmRSS");
    s->hwm_kb = th_proc_status_value(pid, "VmHWM");
    long threads = th_proc_status_value(pid, "Threads");
    s->threads = (int)threads;
    return s->rss_kb < 0 || s->hwm_kb < 0 || threads < 0 ? -1 : 0;
}

/* Fills the gauges of s from one status report; 0 on success. */
static int read_gauges(const th_daemon *d, soak_sample *s) {
    Tenferro__Frame *f = th_status_report(d);
    if (!f) return -1;
    const Tenferro__StatusReply *r = f->status_reply;
    s->tensors = 0;
    s->sessions = 0;
    s->queued = 0;
    for (size_t i = 0; i < r->n_clients; i++) {
        s->tensors += r->clients[i]->live_tensors;
        s->sessions += r->clients[i]->scoped_active ? 1 : 0;
    }
    for (size_t i = 0; i < r->n_reservations; i++) {
        s->sessions += r->reservations[i]->holder_client_id ? 1 : 0;
        s->queued += (int)r->reservations[i]->n_queued_client_ids;
    }
    /* The report lists the connection that asked for it. */
    s->clients = (int)r->n_clients - 1;
    s->allocations = th_report_counter(r, "device_allocations_live");
    s->device_bytes = th_report_counter(r, "device_bytes_live");
    s->pinned_bytes = th_report_counter(r, "pinned_bytes_live");
    s->pinned_buffers = th_report_counter(r, "pinned_buffers_live");
    tf__frame_free(f);
    return 0;
}

/* 1 when two samples' gauges are the same. */
static int same_gauges(const soak_sample *a, const soak_sample *b) {
    return a->tensors == b->tensors && a->allocations == b->allocations &&
           a->device_bytes == b->device_bytes && a->pinned_bytes == b->pinned_bytes &&
           a->pinned_buffers == b->pinned_buffers && a->clients == b->clients &&
           a->sessions == b->sessions && a->queued == b->queued;
}

int soak_quiet_sample(const th_daemon *d, int want_clients, int settle_ms, soak_sample *s) {
    memset(s, 0, sizeof *s);
    soak_sample prev;
    memset(&prev, 0, sizeof prev);
    int still = 0;
    uint64_t t0 = now_ms();
    for (;;) {
        if (read_gauges(d, s) != 0) return -1;
        int quiet = s->clients == want_clients && s->sessions == 0 && s->queued == 0;
        still = quiet && (still == 0 || same_gauges(s, &prev)) ? still + 1 : 0;
        prev = *s;
        if (still >= STILL_POLLS) {
            s->settled = 1;
            break;
        }
        if (now_ms() - t0 >= (uint64_t)settle_ms) break;
        th_sleep_ms(POLL_MS);
    }
    s->settle_ms = (int)(now_ms() - t0);
    /*
     * The status requests' own connections close a moment after their reply: the
     * descriptors are counted once two counts POLL_MS apart agree (at most 2 s).
     */
    th_sleep_ms(2 * POLL_MS);
    s->fds = th_proc_entries(d->pid, "fd");
    for (int i = 0; i < 20 && s->fds >= 0; i++) {
        th_sleep_ms(POLL_MS);
        int again = th_proc_entries(d->pid, "fd");
        if (again == s->fds) break;
        s->fds = again;
    }
    if (s->fds < 0 || read_status(d->pid, s) != 0) return -1;
    return 0;
}

void soak_print_header(FILE *out) {
    fprintf(out, "# %6s %7s %9s %9s %4s %4s %7s %7s %12s %12s %4s %4s %4s %4s %7s %8s %6s\n",
            "sample", "t_s", "rss_kB", "hwm_kB", "fds", "thr", "tensors", "allocs", "device_B",
            "pinned_B", "bufs", "cli", "sess", "qd", "settle", "children", "killed");
}

void soak_print_sample(FILE *out, const soak_sample *s) {
    fprintf(out,
            "sample %6d %7.1f %9ld %9ld %4d %4d %7" PRIu64 " %7" PRIu64 " %12" PRIu64 " %12" PRIu64
            " %4" PRIu64 " %4d %4d %4d %6d%s %8" PRIu64 " %6" PRIu64 "\n",
            s->index, s->t_s, s->rss_kb, s->hwm_kb, s->fds, s->threads, s->tensors, s->allocations,
            s->device_bytes, s->pinned_bytes, s->pinned_buffers, s->clients, s->sessions, s->queued,
            s->settle_ms, s->settled ? " " : "!", s->children, s->killed);
}

/* A metric's value in a sample, as a double (every metric fits). */
typedef double (*metric_fn)(const soak_sample *s);

static double m_tensors(const soak_sample *s) { return (double)s->tensors; }
static double m_allocations(const soak_sample *s) { return (double)s->allocations; }
static double m_device_bytes(const soak_sample *s) { return (double)s->device_bytes; }
static double m_pinned_bytes(const soak_sample *s) { return (double)s->pinned_bytes; }
static double m_pinned_buffers(const soak_sample *s) { return (double)s->pinned_buffers; }
static double m_clients(const soak_sample *s) { return s->clients; }
static double m_sessions(const soak_sample *s) { return s->sessions; }
static double m_queued(const soak_sample *s) { return s->queued; }
static double m_rss(const soak_sample *s) { return (double)s->rss_kb; }
static double m_fds(const soak_sample *s) { return s->fds; }
static double m_threads(const soak_sample *s) { return s->threads; }

/* Exact gauges: every sample equals the first. Returns 1 when the gauge moved. */
static int judge_exact(FILE *out, const char *name, metric_fn m, const soak_sample *s, int n) {
    double first = m(&s[0]), lo = first, hi = first;
    int moved_at = 0;
    for (int i = 1; i < n; i++) {
        double v = m(&s[i]);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        if (v != first && !moved_at) moved_at = i + 1;
    }
    if (!moved_at)
        fprintf(out, "# rule %-15s exact: %.0f at every sample: ok\n", name, first);
    else
        fprintf(out, "# rule %-15s exact: %.0f at sample 1, %.0f at sample %d (min %.0f, max %.0f, last %.0f): FAIL\n",
                name, first, m(&s[moved_at - 1]), moved_at, lo, hi, m(&s[n - 1]));
    return moved_at != 0;
}

/*
 * Floors: past `warm` samples, the minimum of the last `w` may not exceed
 * the maximum of the first `w` by more than the tolerance (an absolute
 * floor `abs_tol`, or `rel_tol` of that maximum). Returns 1 on failure.
 */
static int judge_floor(FILE *out, const char *name, metric_fn m, const soak_sample *s, int n,
                       int warm, int w, double abs_tol, double rel_tol) {
    double early_max = m(&s[warm]), late_min = m(&s[n - 1]);
    for (int i = warm; i < warm + w; i++)
        if (m(&s[i]) > early_max) early_max = m(&s[i]);
    for (int i = n - w; i < n; i++)
        if (m(&s[i]) < late_min) late_min = m(&s[i]);
    double tol = early_max * rel_tol > abs_tol ? early_max * rel_tol : abs_tol;
    int fail = late_min > early_max + tol;
    fprintf(out,
            "# rule %-15s floors: max of samples %d-%d is %.0f, min of samples %d-%d is %.0f, "
            "tolerance %.0f: %s\n",
            name, warm + 1, warm + w, early_max, n - w + 1, n, late_min, tol, fail ? "FAIL" : "ok");
    return fail;
}

int soak_judge(FILE *out, const soak_sample *s, int n) {
    if (n < 4) {
        fprintf(out, "# rule: %d sample%s, at least 4 are needed to judge\n", n, n == 1 ? "" : "s");
        return -1;
    }
    int failed = 0;
    static const struct {
        const char *name;
        metric_fn m;
    } exact[] = {{"tensors", m_tensors},         {"allocations", m_allocations},
                 {"device_bytes", m_device_bytes}, {"pinned_bytes", m_pinned_bytes},
                 {"pinned_buffers", m_pinned_buffers}, {"clients", m_clients},
                 {"sessions", m_sessions},       {"queued_openers", m_queued}};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        failed += judge_exact(out, exact[i].name, exact[i].m, s, n);
    int warm = n / 5 > 2 ? n / 5 : 2;
    int w = (n - warm) / 3 > 1 ? (n - warm) / 3 : 1;
    failed += judge_floor(out, "rss_kB", m_rss, s, n, warm, w, 8192, 0.10);
    failed += judge_floor(out, "fds", m_fds, s, n, warm, w, 0, 0);
    failed += judge_floor(out, "threads", m_threads, s, n, warm, w, 0, 0);
    return failed;
}
