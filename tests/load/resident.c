/*
 * Resident clients of the soak: long-lived connections like a service that
 * stays attached to the daemon for hours. A resident uploads a fixed set of
 * tensors and makes one pinned buffer when it starts, keeps them for the
 * whole soak, and while the load runs it works on them: scoped sessions and
 * held sessions that double a tensor (x + x, 2 * x: exact in floating point,
 * so the result is compared bit for bit), pending transfers through its
 * buffer, and downloads that check the fixed set still holds what was
 * uploaded (another client's work, a kill or a hostile peer must never
 * change it). At every quiet point it finishes what it is doing and sends
 * nothing until the load resumes, so the daemon's gauges at that point are
 * exactly what the residents hold, the same at every sample.
 *
 * With leak_mib > 0 the resident leaks on the client side: in every round it
 * uploads one more tensor of that many MiB and never frees it. The daemon
 * is right to keep those (the client owns them), and the soak's rule must
 * see them grow: that run is the proof that the rule can fail.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/load/load.h"

/* Tensors of the fixed set (f64 elements each); the pinned buffer matches the third. */
static const size_t fixed_elems[] = {64, 4096, 65536, 131072};
#define N_FIXED (sizeof fixed_elems / sizeof fixed_elems[0])
#define BUFFER_TENSOR 2
#define PRINT_ERRORS 3

typedef struct fixed {
    tf_tensor t;
    double *data;
    size_t n;
} fixed;

typedef struct resident {
    uint64_t rng;
    int index;
    soak_ctl *ctl;
    report *rep;
    int printed;
    tf_client *c;
    fixed set[N_FIXED];
    tf_pinned_buffer *buf;
    void *dl;
    size_t dl_cap;
} resident;

static uint64_t rnd(resident *r) { return th_splitmix(&r->rng); }

/* Counts an outcome that breaks the contract and prints the first few. */
static void unexpected(resident *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unexpected(resident *r, const char *fmt, ...) {
    r->rep->c[C_unexpected]++;
    if (r->printed++ >= PRINT_ERRORS) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "load: resident %d (pid %d): unexpected: %s: %s\n", r->index, (int)getpid(), msg,
            r->c ? tf_client_last_error(r->c) : "");
}

/* OK: 0. Contention (either policy's refusal): 1, counted as expected. Anything else: -1. */
static int outcome(resident *r, tf_status st, const char *what) {
    if (st == TF_OK) return 0;
    if (st == TF_ERR_CONTENDED || st == TF_ERR_TIMEOUT) {
        report_expected(r->rep, st);
        return 1;
    }
    unexpected(r, "%s returned %s", what, tf_status_name(st));
    return -1;
}

/* Downloads t and compares it with want (n doubles, times `factor`) bit for bit. */
static void check_tensor(resident *r, tf_tensor t, const fixed *want, double factor, const char *what) {
    tf_status st = tf_download_into(r->c, t, &r->dl, &r->dl_cap);
    if (outcome(r, st, what) != 0) return;
    r->rep->c[C_downloads]++;
    r->rep->c[C_checked]++;
    const double *got = r->dl;
    for (size_t i = 0; i < want->n; i++)
        if (got[i] != factor * want->data[i]) {
            r->rep->c[C_lost]++;
            fprintf(stderr, "load: resident %d: LOST: %s: element %zu is %.17g, expected %.17g\n",
                    r->index, what, i, got[i], factor * want->data[i]);
            return;
        }
}

typedef struct doubling {
    tf_tensor in, out;
    int scale; /* 2 * x instead of x + x */
} doubling;

/* The session callback: out = x + x, or 2 * x. */
static tf_status double_fn(tf_view *v, void *arg) {
    doubling *dbl = arg;
    if (dbl->scale) return tf_view_scale(v, (tf_scalar){2.0, 0.0}, dbl->in, &dbl->out);
    return tf_view_add(v, dbl->in, dbl->in, &dbl->out);
}

/* A scoped session doubling one fixed tensor; the result is checked and freed. */
static void scoped_double(resident *r, const fixed *f) {
    doubling dbl = {.in = f->t};
    int rc = outcome(r, tf_with_session(r->c, double_fn, &dbl), "tf_with_session");
    if (rc != 0) return;
    r->rep->c[C_scoped_ok]++;
    r->rep->c[C_ops]++;
    check_tensor(r, dbl.out, f, 2.0, "a doubled tensor (scoped)");
    outcome(r, tf_tensor_free(r->c, dbl.out), "tf_tensor_free");
}

/* A held session: open, queue 2 * x, synchronize, close; the result is checked and freed. */
static void held_double(resident *r, const fixed *f) {
    tf_session *s = NULL;
    if (outcome(r, tf_session_open(r->c, &s), "tf_session_open") != 0) return;
    r->rep->c[C_held_opened]++;
    doubling dbl = {.in = f->t, .scale = 1};
    tf_status st = tf_session_with(s, double_fn, &dbl);
    if (st == TF_OK) st = tf_session_synchronize(s);
    tf_session_counters k;
    tf_status cst = tf_session_close(s, &k);
    if (outcome(r, st, "tf_session_with/synchronize") != 0 || outcome(r, cst, "tf_session_close") != 0)
        return;
    r->rep->c[C_ops]++;
    check_tensor(r, dbl.out, f, 2.0, "a doubled tensor (held)");
    outcome(r, tf_tensor_free(r->c, dbl.out), "tf_tensor_free");
}

/* A pending download of the buffer's tensor into the buffer, then a pending upload back. */
static void pending_round_trip(resident *r) {
    fixed *f = &r->set[BUFFER_TENSOR];
    tf_pending *p = NULL;
    tf_tensor t = f->t;
    tf_status st = tf_download_pending(r->c, t, r->buf, &p);
    if (st == TF_OK) st = tf_pending_wait(p, &t, &r->buf);
    if (outcome(r, st, "pending download") != 0) return;
    r->rep->c[C_pinned]++;
    r->rep->c[C_checked]++;
    if (memcmp(tf_pinned_buffer_data(r->buf), f->data, f->n * sizeof(double)) != 0) {
        r->rep->c[C_lost]++;
        fprintf(stderr, "load: resident %d: LOST: a pending download came back different\n", r->index);
        return;
    }
    st = tf_upload_pending(r->c, r->buf, t, &p);
    if (st == TF_OK) st = tf_pending_wait(p, &t, &r->buf);
    if (outcome(r, st, "pending upload") == 0) r->rep->c[C_pinned]++;
}

/* Uploads the fixed set (random finite values) and makes the pinned buffer; 0 on success. */
static int set_up(resident *r) {
    for (size_t i = 0; i < N_FIXED; i++) {
        fixed *f = &r->set[i];
        f->n = fixed_elems[i];
        f->data = malloc(f->n * sizeof(double));
        if (!f->data) abort();
        for (size_t k = 0; k < f->n; k++)
            f->data[k] = (double)(int64_t)(rnd(r) % 2000001) / 1024.0 - 976.5;
        int64_t shape[1] = {(int64_t)f->n};
        if (outcome(r, tf_upload(r->c, TF_F64, 1, shape, f->data, &f->t), "tf_upload(fixed)") != 0)
            return -1;
        r->rep->c[C_uploads]++;
    }
    return outcome(r, tf_pinned_buffer_new(r->c, r->set[BUFFER_TENSOR].n * sizeof(double), &r->buf),
                   "tf_pinned_buffer_new");
}

/* The client-side leak: one more tensor of leak_mib MiB, never freed (the disconnect frees it). */
static void leak_one(resident *r, int leak_mib) {
    int64_t shape[1] = {(int64_t)leak_mib << 17}; /* f64 elements of leak_mib MiB */
    double *zeros = calloc((size_t)shape[0], sizeof(double));
    if (!zeros) abort();
    tf_tensor t;
    if (outcome(r, tf_upload(r->c, TF_F64, 1, shape, zeros, &t), "tf_upload(leak)") == 0)
        r->rep->c[C_resident_leaked]++;
    free(zeros);
}

void resident_main(const th_daemon *d, uint64_t seed, int index, soak_ctl *ctl, int leak_mib,
                   report *rep) {
    resident r = {.rng = seed, .index = index, .ctl = ctl, .rep = rep};
    /* One that cannot set up stays through the soak idle: the parent sees one failure, not a dead resident. */
    int ready = outcome(&r, tf_connect(d->socket, &r.c), "tf_connect") == 0 && set_up(&r) == 0;
    unsigned acked_epoch = 0, leaked_round = 0;
    while (!atomic_load(&ctl->stop)) {
        if (atomic_load(&ctl->quiet)) {
            unsigned e = atomic_load(&ctl->epoch);
            if (e != acked_epoch) {
                acked_epoch = e;
                atomic_fetch_add(&ctl->acks, 1);
            }
            th_sleep_ms(10);
            continue;
        }
        if (!ready) {
            th_sleep_ms(10);
            continue;
        }
        unsigned round = atomic_load(&ctl->round);
        if (leak_mib > 0 && round != leaked_round) {
            leaked_round = round;
            leak_one(&r, leak_mib);
        }
        const fixed *f = &r.set[rnd(&r) % N_FIXED];
        switch (rnd(&r) % 4) {
        case 0: scoped_double(&r, f); break;
        case 1: held_double(&r, f); break;
        case 2: pending_round_trip(&r); break;
        default: check_tensor(&r, f->t, f, 1.0, "a fixed tensor"); break;
        }
        rep->c[C_resident_actions]++;
        th_sleep_ms(5 + (int)(rnd(&r) % 20));
    }
    /* The end: the fixed set is still intact, then everything is let go. */
    for (size_t i = 0; ready && i < N_FIXED; i++) {
        check_tensor(&r, r.set[i].t, &r.set[i], 1.0, "a fixed tensor at the end");
        outcome(&r, tf_tensor_free(r.c, r.set[i].t), "tf_tensor_free(fixed)");
        free(r.set[i].data);
    }
    if (ready) outcome(&r, tf_pinned_buffer_free(r.buf), "tf_pinned_buffer_free");
    tf_disconnect(r.c);
    free(r.dl);
}
