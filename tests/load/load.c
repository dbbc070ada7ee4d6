/*
 * The load test of tenferrod. It starts its own daemon on a private socket
 * (through the integration harness), records the daemon's baseline (live
 * device bytes and allocations, connected clients), then keeps N client
 * processes running for S seconds, each with its own seed, doing a random mix
 * of: scoped sessions of 1-20 operations; held sessions (open, callbacks,
 * submit or synchronize, close, release or a disconnect while holding);
 * uploads and downloads of up to a few MB (blocking, inline or staged, and in
 * a third of them also through pinned buffers and pending transfers, which
 * a kill may catch in flight); deliberate bad calls whose typed
 * error is expected, through the client library and as raw frames the daemon
 * itself must refuse; disconnects and reconnects; and per-connection checks
 * that the daemon holds exactly the tensors the client believes it holds.
 * About one child in ten kills itself with SIGKILL at a random moment: from a
 * timer (anywhere, even in the middle of a frame), while holding a session
 * with work queued or in flight, or with a pending transfer submitted and not
 * waited for; the parent starts a replacement for every child that ends
 * before the time is up. --hostile N adds N hostile children (hostile.c).
 *
 * Results are verified by value, not by status: every operation is also
 * computed here in double precision together with a bound on the rounding
 * error it may carry (running error analysis: magnitudes and error units), and
 * a downloaded result outside that bound is "lost" (a wrong, stale or other
 * client's tensor is far outside it). Contention (TF_ERR_CONTENDED under the
 * reject policy, TF_ERR_TIMEOUT under wait) and the typed errors of the
 * deliberate bad calls are expected outcomes; any other status is an
 * unexpected error, the first few of each child printed on stderr.
 *
 * After the time is up and every child has ended, the daemon's live device
 * bytes and allocations and its live pinned bytes must return to the baseline
 * within about 10 s, and the daemon must stop cleanly on SIGTERM. Output: '#'
 * lines with details, then
 *   LOAD clients=.. sessions=.. ops=.. errors_unexpected=.. lost=.. leaked_bytes=.. leaked_tensors=.. leaked_pinned=..
 * and exit status 0 only when errors_unexpected, lost and every leak are 0
 * and the daemon exited with status 0.
 *
 * --soak turns the run into a soak (docs/soak.md): resident clients
 * (resident.c) stay connected throughout, the load runs in rounds of
 * --sample-seconds (10), one child in three is a killer and a quarter of the
 * children are hostile, and at the end of every round the load stops, the
 * residents go idle and the daemon is sampled at that quiet point (soak.c):
 * one line per sample, and at the end the leak rule over every sample, then
 *   SOAK samples=.. interval_s=.. verdict=pass|FAIL failed_rules=..
 * A failed rule fails the run. --leak-mib M makes resident 0 keep one more
 * M MiB tensor every round, a client-side leak the rule must flag.
 *
 * Usage: load [--clients N] [--seconds S] [--seed X] [--daemon PATH] [--device DEV]
 *             [--hostile N] [--soak] [--sample-seconds S] [--residents N] [--leak-mib M]
 * (the policy, reject or wait with a 200 ms deadline, is picked from the seed).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "tests/integration/harness.h"
#include "tests/load/load.h"

/* Deadline of a queued opener under the wait policy. */
#define WAIT_DEADLINE_MS "200"
/* One child in KILL_ONE_IN kills itself. */
#define KILL_ONE_IN 10
/* How long after the end a child may still run before it counts as hung. */
#define HANG_GRACE_MS 30000
/* How long the daemon's statistics may take to return to the baseline. */
#define SETTLE_MS 10000
/* Unexpected errors a child prints in full; later ones are only counted. */
#define PRINT_ERRORS 3
/* Small tensors a child keeps live between sessions. */
#define POOL_MAX 10
/* Values one session may hold (inputs and outputs). */
#define SESSION_MAX 48
/* Largest dimension of the small tensors sessions work on. */
#define DIM_MAX 6
/* Largest upload of the transfer action. */
#define TRANSFER_MAX_BYTES (4u << 20)
/* Timeout of a raw-frame read. */
#define RAW_TIMEOUT_MS 30000

static const char *const counter_names[N_COUNTERS] = {
#define NAME_(n) #n,
    COUNTER_LIST(NAME_)
#undef NAME_
};

/* ---- values: a tensor's handle with its reference ---- */

/*
 * A tensor the child knows, with the reference of its value in double
 * precision (re, im), each element's magnitude bound (mag: the value of the
 * same computation on absolute values) and the error units it may carry: the
 * device result may differ from re/im by at most about units * eps * mag.
 */
typedef struct value {
    tf_tensor h;
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    size_t n;
    double *re, *im, *mag;
    double units;
    int pending; /* produced by a held session's operation not yet submitted */
} value;

static double dtype_eps(tf_dtype dt) { return (dt == TF_F32 || dt == TF_C64) ? 0x1p-23 : 0x1p-52; }

/* A value of the given dtype and shape with a zeroed reference (no handle yet). */
static value *value_new(tf_dtype dt, int rank, const int64_t *shape) {
    value *v = calloc(1, sizeof *v);
    if (!v) abort();
    v->dt = dt;
    v->rank = rank;
    v->n = 1;
    for (int i = 0; i < rank; i++) {
        v->shape[i] = shape[i];
        v->n *= (size_t)shape[i];
    }
    v->re = calloc(3 * v->n, sizeof(double));
    if (!v->re) abort();
    v->im = v->re + v->n;
    v->mag = v->im + v->n;
    return v;
}

static void value_free(value *v) {
    if (!v) return;
    free(v->re);
    free(v);
}

static size_t value_bytes(const value *v) { return v->n * tf_dtype_size(v->dt); }

static int same_shape(const value *a, const value *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* Packs the reference into the dtype's host layout (exact for inputs, whose reference is the data). */
static void *value_pack(const value *v) {
    void *buf = malloc(value_bytes(v) ? value_bytes(v) : 1);
    if (!buf) abort();
    for (size_t i = 0; i < v->n; i++) {
        switch (v->dt) {
        case TF_F32: ((float *)buf)[i] = (float)v->re[i]; break;
        case TF_F64: ((double *)buf)[i] = v->re[i]; break;
        case TF_C64: ((float *)buf)[2 * i] = (float)v->re[i]; ((float *)buf)[2 * i + 1] = (float)v->im[i]; break;
        case TF_C128: ((double *)buf)[2 * i] = v->re[i]; ((double *)buf)[2 * i + 1] = v->im[i]; break;
        }
    }
    return buf;
}

/* ---- the child ---- */

/*
 * How a child dies by SIGKILL, if it does: from a timer (anywhere), while
 * holding a session with work queued or in flight, or with a pending
 * transfer submitted and not waited for.
 */
typedef enum kill_mode { KILL_NONE, KILL_TIMER, KILL_IN_SESSION, KILL_IN_TRANSFER } kill_mode;

/* What a child process is: an ordinary client, a hostile one, or a resident of the soak. */
typedef enum child_kind { CHILD_LOAD, CHILD_HOSTILE, CHILD_RESIDENT } child_kind;

typedef struct child_args {
    int index;
    child_kind kind;
    uint64_t seed;
    int report_fd, other_fd;
    uint64_t deadline_ms;
    kill_mode kill;
    uint64_t kill_at_ms;
    int wait_policy;
    th_daemon daemon;
    soak_ctl *ctl;   /* residents only */
    int leak_mib;    /* residents only: the deliberate client-side leak per round */
} child_args;

typedef struct child {
    const child_args *args;
    uint64_t rng;
    tf_client *c;
    int resync;           /* bookkeeping may be off after an unexpected error: reconnect */
    value *pool[POOL_MAX];
    int npool;
    tf_tensor bulk;       /* a large transfer kept live for a while */
    size_t bulk_bytes;
    void *dl_buf;         /* reused by tf_download_into */
    size_t dl_cap;
    int printed;
    report rep;
} child;

static uint64_t rnd(child *ch) { return th_splitmix(&ch->rng); }
/* Uniform in [0, n). */
static int rnd_below(child *ch, int n) { return n <= 1 ? 0 : (int)(rnd(ch) % (uint64_t)n); }
/* 1 with probability pct percent. */
static int chance(child *ch, int pct) { return rnd_below(ch, 100) < pct; }
/* Uniform in [0, 1). */
static double rnd_unit(child *ch) { return (double)(rnd(ch) >> 11) * 0x1p-53; }

/* Counts and (for the first few) prints an unexpected outcome; asks for a reconnect. */
static void unexpected(child *ch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unexpected(child *ch, const char *fmt, ...) {
    ch->rep.c[C_unexpected]++;
    ch->resync = 1;
    if (ch->printed++ >= PRINT_ERRORS) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "load: child %d (pid %d, seed %" PRIu64 "): unexpected: %s\n", ch->args->index,
            (int)getpid(), ch->args->seed, msg);
}

/* Counts a lost (wrong) result and prints the first few. */
static void lost(child *ch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lost(child *ch, const char *fmt, ...) {
    ch->rep.c[C_lost]++;
    if (ch->printed++ >= PRINT_ERRORS) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "load: child %d (pid %d, seed %" PRIu64 "): LOST: %s\n", ch->args->index,
            (int)getpid(), ch->args->seed, msg);
}

/* Checks a call's status: OK is fine, `exp1`/`exp2` are expected (counted), anything else unexpected. */
static int check_status(child *ch, tf_status st, tf_status exp1, tf_status exp2, const char *what) {
    if (st == TF_OK) return 0;
    if ((exp1 != TF_OK && st == exp1) || (exp2 != TF_OK && st == exp2)) {
        ch->rep.c[C_expected]++;
        ch->rep.expected_by_status[(unsigned)st % N_STATUS]++;
        return 1;
    }
    unexpected(ch, "%s returned %s: %s", what, tf_status_name(st),
               ch->c ? tf_client_last_error(ch->c) : "");
    return -1;
}

/* A deliberate bad call must fail with exactly `want`. */
static void expect_error(child *ch, tf_status st, tf_status want, const char *what) {
    if (st == want) {
        ch->rep.c[C_expected]++;
        ch->rep.expected_by_status[(unsigned)st % N_STATUS]++;
        return;
    }
    unexpected(ch, "bad call %s returned %s, expected %s: %s", what, tf_status_name(st),
               tf_status_name(want), tf_client_last_error(ch->c));
}

/* The contention outcomes of the run's policy. */
static tf_status refusal(const child *ch) { return ch->args->wait_policy ? TF_ERR_TIMEOUT : TF_ERR_CONTENDED; }

/*
 * A killer of kind `where` dies here once its time has come: in a held
 * session (work queued or in flight), or with a pending transfer in flight.
 */
static void maybe_die(child *ch, kill_mode where) {
    if (ch->args->kill == where && now_ms() >= ch->args->kill_at_ms) kill(getpid(), SIGKILL);
}

/* SIGALRM of the timer killer: die wherever the child happens to be. */
static void on_alarm(int sig) {
    (void)sig;
    kill(getpid(), SIGKILL);
}

/* ---- references ---- */

/* Random data of an input: magnitudes in [0.1, 1], either sign, rounded to the dtype. */
static value *random_input(child *ch, tf_dtype dt, int rank, const int64_t *shape) {
    value *v = value_new(dt, rank, shape);
    for (size_t i = 0; i < v->n; i++) {
        double re = (0.1 + 0.9 * rnd_unit(ch)) * (chance(ch, 50) ? 1 : -1);
        double im = th_is_complex(dt) ? (0.1 + 0.9 * rnd_unit(ch)) * (chance(ch, 50) ? 1 : -1) : 0;
        if (dt == TF_F32 || dt == TF_C64) {
            re = (float)re;
            im = (float)im;
        }
        v->re[i] = re;
        v->im[i] = im;
        v->mag[i] = hypot(re, im);
    }
    return v;
}

/* Row-major strides of a shape. */
static void strides_of(int rank, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

/* Elementwise add/sub/mul of equal shapes. */
static value *ref_binary(tf__op_kind kind, const value *a, const value *b) {
    value *o = value_new(a->dt, a->rank, a->shape);
    for (size_t i = 0; i < o->n; i++) {
        double ar = a->re[i], ai = a->im[i], br = b->re[i], bi = b->im[i];
        switch (kind) {
        case TF__OP_ADD: o->re[i] = ar + br; o->im[i] = ai + bi; o->mag[i] = a->mag[i] + b->mag[i]; break;
        case TF__OP_SUB: o->re[i] = ar - br; o->im[i] = ai - bi; o->mag[i] = a->mag[i] + b->mag[i]; break;
        default:
            o->re[i] = ar * br - ai * bi;
            o->im[i] = ar * bi + ai * br;
            o->mag[i] = a->mag[i] * b->mag[i];
            break;
        }
    }
    o->units = kind == TF__OP_MUL ? a->units + b->units + 4 : fmax(a->units, b->units) + 1;
    return o;
}

/* alpha * x + beta * y (y NULL: alpha * x). */
static value *ref_axpby(tf_scalar alpha, const value *x, tf_scalar beta, const value *y) {
    value *o = value_new(x->dt, x->rank, x->shape);
    double am = hypot(alpha.re, alpha.im), bm = hypot(beta.re, beta.im);
    for (size_t i = 0; i < o->n; i++) {
        o->re[i] = alpha.re * x->re[i] - alpha.im * x->im[i];
        o->im[i] = alpha.re * x->im[i] + alpha.im * x->re[i];
        o->mag[i] = am * x->mag[i];
        if (y) {
            o->re[i] += beta.re * y->re[i] - beta.im * y->im[i];
            o->im[i] += beta.re * y->im[i] + beta.im * y->re[i];
            o->mag[i] += bm * y->mag[i];
        }
    }
    o->units = (y ? fmax(x->units, y->units) : x->units) + 6;
    return o;
}

/* -a (exact). */
static value *ref_neg(const value *a) {
    value *o = value_new(a->dt, a->rank, a->shape);
    for (size_t i = 0; i < o->n; i++) {
        o->re[i] = -a->re[i];
        o->im[i] = -a->im[i];
        o->mag[i] = a->mag[i];
    }
    o->units = a->units;
    return o;
}

/* out.shape[i] = a.shape[perm[i]]. */
static value *ref_permute(const value *a, const int *perm) {
    int64_t shape[TF_MAX_RANK] = {0}, in_strides[TF_MAX_RANK], idx[TF_MAX_RANK] = {0};
    for (int i = 0; i < a->rank; i++) shape[i] = a->shape[perm[i]];
    value *o = value_new(a->dt, a->rank, shape);
    strides_of(a->rank, a->shape, in_strides);
    for (size_t k = 0; k < o->n; k++) {
        int64_t src = 0;
        for (int i = 0; i < a->rank; i++) src += idx[i] * in_strides[perm[i]];
        o->re[k] = a->re[src];
        o->im[k] = a->im[src];
        o->mag[k] = a->mag[src];
        for (int i = a->rank - 1; i >= 0; i--) {
            if (++idx[i] < shape[i]) break;
            idx[i] = 0;
        }
    }
    o->units = a->units;
    return o;
}

/* [m,k] x [k,n]. */
static value *ref_matmul(const value *a, const value *b) {
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    value *o = value_new(a->dt, 2, (int64_t[]){m, n});
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double re = 0, im = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                size_t x = (size_t)(i * k + p), y = (size_t)(p * n + j);
                re += a->re[x] * b->re[y] - a->im[x] * b->im[y];
                im += a->re[x] * b->im[y] + a->im[x] * b->re[y];
                mag += a->mag[x] * b->mag[y];
            }
            o->re[i * n + j] = re;
            o->im[i * n + j] = im;
            o->mag[i * n + j] = mag;
        }
    o->units = a->units + b->units + (double)k + 6;
    return o;
}

/* Reduction over the axes in `mask` (bit i: axis i), keeping them as size 1 when keepdims. */
static value *ref_reduce(tf__op_kind kind, const value *a, unsigned mask, int keepdims) {
    int64_t shape[TF_MAX_RANK], full[TF_MAX_RANK], strides[TF_MAX_RANK], idx[TF_MAX_RANK] = {0};
    int rank = 0;
    int64_t group = 1;
    for (int i = 0; i < a->rank; i++) {
        full[i] = (mask >> i & 1) ? 1 : a->shape[i];
        if (mask >> i & 1) group *= a->shape[i];
        if (!(mask >> i & 1)) shape[rank++] = a->shape[i];
        else if (keepdims) shape[rank++] = 1;
    }
    value *o = value_new(a->dt, rank, shape);
    strides_of(a->rank, full, strides);
    char *seen = calloc(o->n, 1);
    if (!seen) abort();
    for (size_t k = 0; k < a->n; k++) {
        size_t d = 0;
        for (int i = 0; i < a->rank; i++)
            if (!(mask >> i & 1)) d += (size_t)(idx[i] * strides[i]);
        if (kind == TF__OP_REDUCE_SUM) {
            o->re[d] += a->re[k];
            o->im[d] += a->im[k];
            o->mag[d] += a->mag[k];
        } else if (!seen[d] || (kind == TF__OP_REDUCE_MAX ? a->re[k] > o->re[d] : a->re[k] < o->re[d])) {
            o->re[d] = a->re[k];
        }
        if (kind != TF__OP_REDUCE_SUM && (!seen[d] || a->mag[k] > o->mag[d])) o->mag[d] = a->mag[k];
        seen[d] = 1;
        for (int i = a->rank - 1; i >= 0; i--) {
            if (++idx[i] < a->shape[i]) break;
            idx[i] = 0;
        }
    }
    free(seen);
    o->units = kind == TF__OP_REDUCE_SUM ? a->units + (double)group + 2 : a->units;
    return o;
}

/* Keeps references in a range where the error bound is meaningful (no overflow, no subnormals). */
static int value_tame(const value *v) {
    for (size_t i = 0; i < v->n; i++)
        if (!(v->mag[i] <= 1e12) || (v->mag[i] != 0 && v->mag[i] < 1e-12)) return 0;
    return 1;
}

/*
 * Compares downloaded data with a value's reference; returns 1 when every
 * element is inside the bound, else prints the first bad element (as lost).
 */
static int compare(child *ch, const value *v, const void *data, size_t bytes, const char *where) {
    ch->rep.c[C_checked]++;
    if (bytes != value_bytes(v)) {
        lost(ch, "%s: downloaded %zu bytes, expected %zu", where, bytes, value_bytes(v));
        return 0;
    }
    double eps = dtype_eps(v->dt);
    for (size_t i = 0; i < v->n; i++) {
        double re, im = 0;
        switch (v->dt) {
        case TF_F32: re = ((const float *)data)[i]; break;
        case TF_F64: re = ((const double *)data)[i]; break;
        case TF_C64: re = ((const float *)data)[2 * i]; im = ((const float *)data)[2 * i + 1]; break;
        default: re = ((const double *)data)[2 * i]; im = ((const double *)data)[2 * i + 1]; break;
        }
        double diff = hypot(re - v->re[i], im - v->im[i]);
        double bound = (4 * v->units + 4) * eps * v->mag[i] + 1e-300;
        if (!(diff <= bound)) {
            lost(ch, "%s: tensor %" PRIu64 " (%s, %zu elements) element %zu is (%.17g, %.17g), "
                     "expected (%.17g, %.17g) within %.3g",
                 where, v->h, tf_dtype_name(v->dt), v->n, i, re, im, v->re[i], v->im[i], bound);
            return 0;
        }
    }
    return 1;
}

/* Downloads a value (either way of downloading) and compares it; returns the status. */
static tf_status download_check(child *ch, const value *v, const char *where) {
    tf_status st;
    size_t bytes;
    if (chance(ch, 50)) {
        void *data = NULL;
        st = tf_download(ch->c, v->h, &data, &bytes);
        if (st == TF_OK) compare(ch, v, data, bytes, where);
        free(data);
    } else {
        st = tf_download_into(ch->c, v->h, &ch->dl_buf, &ch->dl_cap);
        if (st == TF_OK) compare(ch, v, ch->dl_buf, value_bytes(v), where);
    }
    if (st == TF_OK) {
        ch->rep.c[C_downloads]++;
        ch->rep.c[C_bytes_down] += value_bytes(v);
    }
    return st;
}

/* ---- the pool of small live tensors ---- */

/* Frees a tensor the child owns; returns the status (OK expected). */
static tf_status free_tensor(child *ch, tf_tensor h) {
    tf_status st = tf_tensor_free(ch->c, h);
    if (st == TF_OK) ch->rep.c[C_frees]++;
    return st;
}

/* Removes pool entry i and frees its tensor. */
static void pool_drop(child *ch, int i) {
    value *v = ch->pool[i];
    ch->pool[i] = ch->pool[--ch->npool];
    check_status(ch, free_tensor(ch, v->h), TF_OK, TF_OK, "tf_tensor_free(pool)");
    value_free(v);
}

/* Forgets the pool without talking to the daemon (after a disconnect). */
static void pool_forget(child *ch) {
    for (int i = 0; i < ch->npool; i++) value_free(ch->pool[i]);
    ch->npool = 0;
    ch->bulk = 0;
    ch->bulk_bytes = 0;
}

/* Uploads a fresh random input into the pool; returns it, or NULL after an unexpected failure. */
static value *pool_upload(child *ch, tf_dtype dt, int rank, const int64_t *shape) {
    if (ch->npool == POOL_MAX) pool_drop(ch, rnd_below(ch, ch->npool));
    value *v = random_input(ch, dt, rank, shape);
    void *data = value_pack(v);
    tf_status st = tf_upload(ch->c, dt, rank, shape, data, &v->h);
    free(data);
    if (check_status(ch, st, TF_OK, TF_OK, "tf_upload") != 0) {
        value_free(v);
        return NULL;
    }
    ch->rep.c[C_uploads]++;
    ch->rep.c[C_bytes_up] += value_bytes(v);
    ch->pool[ch->npool++] = v;
    return v;
}

/* ---- connection ---- */

/* Connects, retrying a little; every failed attempt is unexpected. Returns 0 when connected. */
static int connect_child(child *ch) {
    for (int attempt = 0; attempt < 50; attempt++) {
        tf_client *c = NULL;
        tf_status st = tf_connect(ch->args->daemon.socket, &c);
        if (st == TF_OK) {
            ch->c = c;
            return 0;
        }
        unexpected(ch, "tf_connect returned %s: %s", tf_status_name(st), c ? tf_client_last_error(c) : "");
        tf_disconnect(c);
        th_sleep_ms(20);
    }
    return -1;
}

/* Drops the connection (the daemon frees everything it owned) and connects again. */
static int reconnect(child *ch) {
    tf_disconnect(ch->c);
    ch->c = NULL;
    pool_forget(ch);
    ch->rep.c[C_reconnects]++;
    ch->resync = 0;
    return connect_child(ch);
}

/* ---- status reports on a raw connection ---- */

/* The daemon's status report, or NULL. */
static Tenferro__Frame *status_snapshot(const th_daemon *d) {
    int fd = th_raw_connect(d);
    if (fd < 0) return NULL;
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    int ok = hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY;
    tf__frame_free(hello);
    Tenferro__Frame *reply = NULL;
    if (ok) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
        f.seq = 2;
        f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
        f.status_request = &body;
        reply = th_raw_send(fd, &f) == 0 ? th_raw_recv(fd, RAW_TIMEOUT_MS) : NULL;
    }
    close(fd);
    if (reply && reply->body_case != TENFERRO__FRAME__BODY_STATUS_REPLY) {
        tf__frame_free(reply);
        return NULL;
    }
    return reply;
}

/*
 * Checks that the daemon holds exactly the tensors this connection believes
 * it holds (count and bytes). An upload's reply orders the check after every
 * earlier frame of the connection, frees included.
 */
static void checkpoint(child *ch) {
    value *probe = pool_upload(ch, TF_F64, 1, (int64_t[]){1});
    if (!probe) return;
    uint64_t want_n = (uint64_t)ch->npool + (ch->bulk ? 1 : 0), want_bytes = ch->bulk_bytes;
    for (int i = 0; i < ch->npool; i++) want_bytes += value_bytes(ch->pool[i]);
    Tenferro__Frame *r = status_snapshot(&ch->args->daemon);
    if (!r) {
        unexpected(ch, "no status report for the checkpoint");
        return;
    }
    uint64_t id = tf_client_id(ch->c);
    int found = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++) {
        const Tenferro__ClientInfo *ci = r->status_reply->clients[i];
        if (ci->client_id != id) continue;
        found = 1;
        if (ci->live_tensors != want_n || ci->live_bytes != want_bytes)
            unexpected(ch, "checkpoint: the daemon holds %" PRIu64 " tensors (%" PRIu64
                           " bytes) for client %" PRIu64 ", the client holds %" PRIu64 " (%" PRIu64 " bytes)",
                       ci->live_tensors, ci->live_bytes, id, want_n, want_bytes);
    }
    tf__frame_free(r);
    if (!found) unexpected(ch, "checkpoint: client %" PRIu64 " is not in the status report", id);
    ch->rep.c[C_checkpoints]++;
    for (int i = 0; i < ch->npool; i++)
        if (ch->pool[i] == probe) {
            pool_drop(ch, i);
            break;
        }
}

/* ---- sessions ---- */

/* A session's working set: inputs from the pool (not owned) and the outputs it produced (owned). */
typedef struct sess {
    child *ch;
    tf_dtype dt;
    value *vals[SESSION_MAX];
    int owned[SESSION_MAX];
    int nv;
    int ops_target;       /* operations the next callback queues */
    int queued;           /* queue entries (operations and frees) since the last boundary */
    int carried;          /* queue entries carried so far (held: compared with queued_ops) */
    int flush_download;   /* scoped: download a result inside the callback */
    int free_input;       /* free a pool input inside the callback, after queueing work */
    int bad;              /* scoped: end the callback with a bad call of this kind (1..4) */
    int bad_done;         /* the bad call was made: bad_got is its status, bad_want the expected one */
    tf_status bad_want, bad_got;
    int op_failed;        /* a valid operation was refused (already counted as unexpected) */
    tf_status cb_status;
} sess;

/* Picks a value of s, or -1. */
static int pick(sess *s) { return s->nv ? rnd_below(s->ch, s->nv) : -1; }

/* Picks a value satisfying pred relative to a, or -1. */
static int pick_where(sess *s, const value *a, int (*pred)(const value *a, const value *b)) {
    int cand[SESSION_MAX], n = 0;
    for (int i = 0; i < s->nv; i++)
        if (pred(a, s->vals[i])) cand[n++] = i;
    return n ? cand[rnd_below(s->ch, n)] : -1;
}

/* b can be the right operand of a matmul with a. */
static int matmul_rhs(const value *a, const value *b) {
    return a->rank == 2 && b->rank == 2 && b->shape[0] == a->shape[1];
}

/* A dyadic scalar (exact in every dtype) of magnitude at most 2. */
static tf_scalar rnd_scalar(child *ch, tf_dtype dt) {
    tf_scalar x = {(rnd_below(ch, 16) - 8) / 4.0, 0};
    if (x.re == 0) x.re = 0.75;
    if (th_is_complex(dt)) x.im = (rnd_below(ch, 16) - 8) / 4.0;
    return x;
}

/* Adds an output value to the session (owned). */
static void sess_add(sess *s, value *v) {
    s->vals[s->nv] = v;
    s->owned[s->nv] = 1;
    s->nv++;
}

/*
 * Queues one random valid operation on values of the session, computing its
 * reference first; returns its status (an unexpected failure is recorded).
 */
static tf_status queue_random_op(sess *s, tf_view *v) {
    child *ch = s->ch;
    if (s->nv >= SESSION_MAX || s->nv == 0) return TF_OK;
    for (int attempt = 0; attempt < 12; attempt++) {
        value *a = s->vals[pick(s)], *o = NULL;
        tf_tensor out = 0;
        tf_status st = TF_OK;
        int kind = rnd_below(ch, 9);
        if (kind <= 2) { /* add, sub, mul */
            value *b = s->vals[pick_where(s, a, same_shape)];
            tf__op_kind k = kind == 0 ? TF__OP_ADD : kind == 1 ? TF__OP_SUB : TF__OP_MUL;
            o = ref_binary(k, a, b);
            if (!value_tame(o)) goto retry;
            st = k == TF__OP_ADD ? tf_view_add(v, a->h, b->h, &out)
                 : k == TF__OP_SUB ? tf_view_sub(v, a->h, b->h, &out)
                                   : tf_view_mul(v, a->h, b->h, &out);
        } else if (kind == 3) { /* scale */
            tf_scalar alpha = rnd_scalar(ch, a->dt);
            o = ref_axpby(alpha, a, (tf_scalar){0, 0}, NULL);
            if (!value_tame(o)) goto retry;
            st = tf_view_scale(v, alpha, a->h, &out);
        } else if (kind == 4) { /* axpby */
            value *b = s->vals[pick_where(s, a, same_shape)];
            tf_scalar alpha = rnd_scalar(ch, a->dt), beta = rnd_scalar(ch, a->dt);
            o = ref_axpby(alpha, a, beta, b);
            if (!value_tame(o)) goto retry;
            st = tf_view_axpby(v, alpha, a->h, beta, b->h, &out);
        } else if (kind == 5) { /* matmul */
            int j = pick_where(s, a, matmul_rhs);
            if (j < 0) goto retry;
            o = ref_matmul(a, s->vals[j]);
            if (!value_tame(o)) goto retry;
            st = tf_view_matmul(v, a->h, s->vals[j]->h, &out);
        } else if (kind == 6) { /* permute */
            if (a->rank < 1) goto retry;
            int perm[TF_MAX_RANK];
            for (int i = 0; i < a->rank; i++) perm[i] = i;
            for (int i = a->rank - 1; i > 0; i--) {
                int j = rnd_below(ch, i + 1), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            o = ref_permute(a, perm);
            st = tf_view_permute(v, a->h, a->rank, perm, &out);
        } else if (kind == 7) { /* reduction */
            if (a->rank < 1) goto retry;
            tf__op_kind k = TF__OP_REDUCE_SUM;
            if (!th_is_complex(a->dt) && chance(ch, 50)) k = chance(ch, 50) ? TF__OP_REDUCE_MAX : TF__OP_REDUCE_MIN;
            unsigned mask = 0;
            int axes[TF_MAX_RANK], n_axes = 0;
            if (!chance(ch, 25))
                for (int i = 0; i < a->rank; i++)
                    if (chance(ch, 50)) {
                        mask |= 1u << i;
                        axes[n_axes++] = i;
                    }
            if (n_axes == 0) mask = (1u << a->rank) - 1; /* 0 axes: all of them */
            int keep = chance(ch, 30);
            o = ref_reduce(k, a, mask, keep);
            if (!value_tame(o)) goto retry;
            tf_reduce_kind rk = k == TF__OP_REDUCE_SUM ? TF_REDUCE_SUM : k == TF__OP_REDUCE_MAX ? TF_REDUCE_MAX : TF_REDUCE_MIN;
            st = tf_view_reduce(v, rk, a->h, n_axes, axes, keep, &out);
        } else { /* neg */
            o = ref_neg(a);
            st = tf_view_neg(v, a->h, &out);
        }
        if (st != TF_OK) {
            value_free(o);
            unexpected(ch, "a valid operation was refused with %s: %s", tf_status_name(st),
                       tf_client_last_error(ch->c));
            s->op_failed = 1;
            return st;
        }
        o->h = out;
        o->pending = 1;
        sess_add(s, o);
        s->queued++;
        return TF_OK;
    retry:
        value_free(o);
    }
    return TF_OK;
}

/* The result of a queued operation that travelled: downloads it here and compares (inside the callback). */
static tf_status flush_and_check(sess *s, tf_view *v) {
    child *ch = s->ch;
    value *last = s->vals[s->nv - 1];
    void *data = NULL;
    size_t bytes = 0;
    tf_status st = tf_download(tf_view_client(v), last->h, &data, &bytes);
    if (st == TF_OK) {
        ch->rep.c[C_downloads]++;
        ch->rep.c[C_bytes_down] += bytes;
        compare(ch, last, data, bytes, "download inside a scoped callback");
        /* The flush carried everything queued so far. */
        for (int i = 0; i < s->nv; i++) s->vals[i]->pending = 0;
        s->carried += s->queued;
        s->queued = 0;
    }
    free(data);
    return st;
}

/* Frees an input of the session from inside a callback (queued behind the work that reads it). */
static void free_input_inside(sess *s) {
    child *ch = s->ch;
    for (int i = 0; i < s->nv; i++) {
        if (s->owned[i]) continue;
        value *in = s->vals[i];
        if (check_status(ch, free_tensor(ch, in->h), TF_OK, TF_OK, "tf_tensor_free(inside a session)") != 0)
            return;
        s->queued++; /* the queue has work, so the free is queued behind it */
        for (int p = 0; p < ch->npool; p++)
            if (ch->pool[p] == in) ch->pool[p] = ch->pool[--ch->npool];
        /* Later operations of the session must not name it; the reference dies with it. */
        s->vals[i] = s->vals[--s->nv];
        s->owned[i] = s->owned[s->nv];
        value_free(in);
        return;
    }
}

/* A value that does not fit `a` as an elementwise partner, or NULL. */
static value *mismatched(sess *s, const value *a) {
    for (int i = 0; i < s->nv; i++)
        if (!same_shape(a, s->vals[i])) return s->vals[i];
    return NULL;
}

/*
 * The deliberate bad call that ends a scoped callback (shape, matmul shape,
 * unknown handle, axis): records what it got and what it should get, and
 * returns its status; TF_OK without a call when the session has no operands for it.
 */
static tf_status bad_in_view(sess *s, tf_view *v) {
    if (s->nv == 0) return TF_OK;
    value *a = s->vals[pick(s)], *b = mismatched(s, a);
    tf_tensor out;
    tf_status st;
    switch (s->bad) {
    case 1:
        if (!b) return TF_OK;
        s->bad_want = TF_ERR_SHAPE;
        st = tf_view_add(v, a->h, b->h, &out);
        break;
    case 2: {
        int j = -1;
        for (int i = 0; i < s->nv && j < 0; i++)
            if (a->rank == 2 && s->vals[i]->rank == 2 && s->vals[i]->shape[0] != a->shape[1]) j = i;
        if (j < 0) return TF_OK;
        s->bad_want = TF_ERR_SHAPE;
        st = tf_view_matmul(v, a->h, s->vals[j]->h, &out);
        break;
    }
    case 3:
        s->bad_want = TF_ERR_UNKNOWN_HANDLE;
        st = tf_view_neg(v, (tf_tensor)0x7ffffff0u + (tf_tensor)rnd_below(s->ch, 1000), &out);
        break;
    default: {
        int axis = a->rank + rnd_below(s->ch, 3);
        s->bad_want = TF_ERR_AXIS;
        st = tf_view_sum(v, a->h, 1, &axis, &out);
        break;
    }
    }
    s->bad_done = 1;
    s->bad_got = st;
    return st;
}

/* The scoped callback: 1-20 operations, maybe a download inside, maybe a free, maybe a bad call. */
static tf_status scoped_fn(tf_view *v, void *arg) {
    sess *s = arg;
    int flush_at = s->flush_download ? rnd_below(s->ch, s->ops_target) : -1;
    for (int i = 0; i < s->ops_target; i++) {
        tf_status st = queue_random_op(s, v);
        if (st != TF_OK) return s->cb_status = st;
        if (i == flush_at && s->nv > 0 && s->vals[s->nv - 1]->pending) {
            st = flush_and_check(s, v);
            if (st != TF_OK) return s->cb_status = st; /* refused (expected) or unexpected */
        }
    }
    if (s->free_input && s->queued > 0) free_input_inside(s);
    if (s->bad) return s->cb_status = bad_in_view(s, v);
    return TF_OK;
}

/* The held callback: a few operations. */
static tf_status held_fn(tf_view *v, void *arg) {
    sess *s = arg;
    for (int i = 0; i < s->ops_target; i++) {
        tf_status st = queue_random_op(s, v);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* An empty callback. */
static tf_status noop_fn(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

/* Uploads the session's fresh inputs (shapes chosen so matmuls and elementwise pairs exist). */
static int sess_prepare(child *ch, sess *s) {
    memset(s, 0, sizeof *s);
    s->ch = ch;
    static const tf_dtype dts[4] = {TF_F32, TF_F64, TF_C64, TF_C128};
    s->dt = dts[rnd_below(ch, 4)];
    int64_t m = 1 + rnd_below(ch, DIM_MAX), k = 1 + rnd_below(ch, DIM_MAX), n = 1 + rnd_below(ch, DIM_MAX);
    int64_t shapes[6][3] = {{m, k}, {k, n}, {m, n}, {m, k}, {k}, {m, k, n}};
    int ranks[6] = {2, 2, 2, 2, 1, 3};
    int fresh = 2 + rnd_below(ch, 3);
    for (int i = 0; i < fresh; i++) {
        int j = i < 2 ? i : rnd_below(ch, 6);
        if (!pool_upload(ch, s->dt, ranks[j], shapes[j])) return -1;
    }
    for (int i = 0; i < ch->npool && s->nv < 8; i++)
        if (ch->pool[i]->dt == s->dt) {
            s->vals[s->nv] = ch->pool[i];
            s->owned[s->nv] = 0;
            s->nv++;
        }
    return 0;
}

/*
 * After a session: outputs the daemon has are verified (a random subset),
 * a few kept in the pool, the rest freed; outputs it never got are dropped.
 * live(v) says whether the daemon has output v.
 */
static void sess_settle(sess *s, int (*live)(sess *s, const value *v), const char *where) {
    child *ch = s->ch;
    for (int i = 0; i < s->nv; i++) {
        if (!s->owned[i]) continue;
        value *v = s->vals[i];
        int is_live = live(s, v);
        tf_status info = ch->c ? tf_tensor_info(ch->c, v->h, NULL, NULL, NULL) : TF_ERR_DISCONNECTED;
        if (ch->c && is_live != (info == TF_OK)) {
            unexpected(ch, "%s: output %" PRIu64 " is %s on the client, expected %s", where, v->h,
                       info == TF_OK ? "live" : "unknown", is_live ? "live" : "unknown");
            is_live = info == TF_OK;
        }
        if (is_live && !ch->resync) {
            if (chance(ch, 35) || i == s->nv - 1)
                check_status(ch, download_check(ch, v, where), TF_OK, TF_OK, "tf_download(result)");
            if (ch->npool < POOL_MAX - 2 && chance(ch, 20)) {
                v->pending = 0;
                ch->pool[ch->npool++] = v;
                continue;
            }
            check_status(ch, free_tensor(ch, v->h), TF_OK, TF_OK, "tf_tensor_free(result)");
        }
        value_free(v);
    }
    s->nv = 0;
}

static int live_scoped_ok(sess *s, const value *v) { (void)s; (void)v; return 1; }
static int live_none(sess *s, const value *v) { (void)s; (void)v; return 0; }
static int live_submitted(sess *s, const value *v) { (void)s; return !v->pending; }
/* After a callback failure: whatever the client says (the refusal case cannot be told apart). */
static int live_per_client(sess *s, const value *v) {
    return s->ch->c && tf_tensor_info(s->ch->c, v->h, NULL, NULL, NULL) == TF_OK;
}

/* One scoped session of 1-20 operations. */
static void scoped_session(child *ch) {
    sess s;
    if (sess_prepare(ch, &s) != 0) return;
    s.ops_target = 1 + rnd_below(ch, 20);
    s.flush_download = chance(ch, 10);
    s.free_input = chance(ch, 10);
    s.bad = chance(ch, 8) ? 1 + rnd_below(ch, 4) : 0;
    tf_status st = tf_with_session(ch->c, scoped_fn, &s);
    if (s.bad_done) {
        /*
         * The bad call's status is what the caller gets; the operations before
         * it ran unless the burst was refused, which the status cannot tell.
         */
        expect_error(ch, s.bad_got, s.bad_want, "in a scoped callback");
        if (st != s.bad_got)
            unexpected(ch, "tf_with_session returned %s, not its callback's %s", tf_status_name(st),
                       tf_status_name(s.bad_got));
        sess_settle(&s, live_per_client, "scoped session ended by a bad call");
        return;
    }
    if (s.op_failed) {
        sess_settle(&s, live_per_client, "scoped session with a refused operation");
        return;
    }
    if (st == TF_OK) {
        ch->rep.c[C_scoped_ok]++;
        ch->rep.c[C_ops] += (uint64_t)(s.carried + s.queued);
        sess_settle(&s, live_scoped_ok, "scoped session");
        return;
    }
    if (check_status(ch, st, refusal(ch), TF_OK, "tf_with_session") == 1) {
        ch->rep.c[C_scoped_refused]++;
        /* Refused: nothing ran unless a download inside the callback had already been admitted. */
        sess_settle(&s, s.carried ? live_submitted : live_none, "refused scoped session");
        return;
    }
    sess_settle(&s, live_per_client, "failed scoped session");
}

/* One held session: open, callbacks and boundaries, then close, release or a disconnect. */
static void held_session(child *ch) {
    sess s;
    if (sess_prepare(ch, &s) != 0) return;
    tf_session *hs = NULL;
    tf_status st = tf_session_open(ch->c, &hs);
    int rc = check_status(ch, st, refusal(ch), TF_OK, "tf_session_open");
    if (rc != 0) {
        if (rc == 1) ch->rep.c[C_held_refused]++;
        return;
    }
    ch->rep.c[C_held_opened]++;
    int n_with = 1 + rnd_below(ch, 4), n_submits = 0, n_syncs = 0, freed_inside = 0;
    for (int w = 0; w < n_with; w++) {
        s.ops_target = 1 + rnd_below(ch, 6);
        st = tf_session_with(hs, held_fn, &s);
        ch->rep.c[C_held_callbacks]++;
        if (check_status(ch, st, TF_OK, TF_OK, "tf_session_with") != 0) break;
        if (chance(ch, 5)) expect_error(ch, tf_with_session(ch->c, noop_fn, NULL), TF_ERR_REENTERED, "tf_with_session while holding");
        if (chance(ch, 5)) {
            tf_session *again = NULL;
            expect_error(ch, tf_session_open(ch->c, &again), TF_ERR_REENTERED, "second tf_session_open");
        }
        if (chance(ch, 10) && s.nv > 0 && s.vals[s.nv - 1]->pending) {
            void *data = NULL;
            size_t bytes;
            expect_error(ch, tf_download(ch->c, s.vals[s.nv - 1]->h, &data, &bytes), TF_ERR_BUSY,
                         "download of an unsubmitted result");
            free(data);
        }
        if (!freed_inside && s.queued > 0 && chance(ch, 8)) {
            free_input_inside(&s); /* outside the callback, the queue still has work: queued free */
            freed_inside = 1;
        }
        int boundary = rnd_below(ch, 10);
        if (boundary < 4 || boundary == 9) {
            int sync = boundary == 9;
            st = sync ? tf_session_synchronize(hs) : tf_session_submit(hs);
            if (sync) n_syncs++;
            else n_submits++;
            ch->rep.c[sync ? C_synchronizes : C_submits]++;
            if (check_status(ch, st, TF_OK, TF_OK, sync ? "tf_session_synchronize" : "tf_session_submit") != 0) break;
            for (int i = 0; i < s.nv; i++) s.vals[i]->pending = 0;
            s.carried += s.queued;
            s.queued = 0;
            if (chance(ch, 25) && s.nv > 0)
                check_status(ch, download_check(ch, s.vals[rnd_below(ch, s.nv)], "download inside a held session"),
                             TF_OK, TF_OK, "tf_download(held)");
        }
        maybe_die(ch, KILL_IN_SESSION);
        if (chance(ch, 30)) th_sleep_ms(rnd_below(ch, 4));
    }
    /* Now and then hold the domain past the wait deadline, so queued openers time out. */
    if (chance(ch, 1)) th_sleep_ms(100 + rnd_below(ch, 200));
    maybe_die(ch, KILL_IN_SESSION);
    int end = rnd_below(ch, 100);
    if (ch->resync) end = 70; /* after an unexpected failure: just let go */
    if (end < 60) {
        tf_session_counters k;
        st = tf_session_close(hs, &k);
        ch->rep.c[C_closes]++;
        if (check_status(ch, st, TF_OK, TF_OK, "tf_session_close") == 0) {
            s.carried += s.queued;
            ch->rep.c[C_ops] += (uint64_t)s.carried;
            if (k.held_operations != (uint64_t)n_with || k.explicit_submits != (uint64_t)n_submits ||
                k.explicit_synchronizes != (uint64_t)n_syncs || k.close_submits != 1 ||
                k.failed_submits != 0 || k.failed_synchronizes != 0 || k.queued_ops != (uint64_t)s.carried)
                unexpected(ch, "session counters: held_operations %" PRIu64 " (want %d), submits %" PRIu64
                               " (%d), synchronizes %" PRIu64 " (%d), close_submits %" PRIu64
                               ", queued_ops %" PRIu64 " (want %d)",
                           k.held_operations, n_with, k.explicit_submits, n_submits,
                           k.explicit_synchronizes, n_syncs, k.close_submits, k.queued_ops, s.carried);
            for (int i = 0; i < s.nv; i++) s.vals[i]->pending = 0;
        }
        sess_settle(&s, ch->resync ? live_per_client : live_submitted, "closed held session");
    } else if (end < 92) {
        tf_session_release(hs);
        ch->rep.c[C_releases]++;
        ch->rep.c[C_ops] += (uint64_t)s.carried;
        sess_settle(&s, live_submitted, "released held session");
    } else {
        /* Walk away while holding, work possibly queued or in flight: the daemon reclaims it. */
        ch->rep.c[C_abandons]++;
        ch->rep.c[C_ops] += (uint64_t)s.carried;
        for (int i = 0; i < s.nv; i++)
            if (s.owned[i]) value_free(s.vals[i]);
        s.nv = 0;
        reconnect(ch);
    }
}

/* ---- transfers ---- */

/* Runs one pending transfer of `b` and tensor t to its wait; returns check_status's verdict. */
static int pending_round(child *ch, int upload, tf_pinned_buffer *b, tf_tensor t) {
    tf_pending *p = NULL;
    tf_status st = upload ? tf_upload_pending(ch->c, b, t, &p) : tf_download_pending(ch->c, t, b, &p);
    if (st == TF_OK) maybe_die(ch, KILL_IN_TRANSFER);
    if (st == TF_OK) st = tf_pending_wait(p, &t, &b);
    return check_status(ch, st, TF_OK, TF_OK, upload ? "pending upload" : "pending download");
}

/*
 * Sends `data` through the pending routes too: a pending upload of it from a
 * pinned buffer into t (which already holds it), then a pending download into
 * a second buffer, compared byte for byte.
 */
static void pinned_round_trip(child *ch, tf_tensor t, const uint8_t *data, size_t bytes) {
    tf_pinned_buffer *up = NULL, *down = NULL;
    tf_status st = tf_pinned_buffer_new(ch->c, bytes, &up);
    if (st == TF_OK) st = tf_pinned_buffer_new(ch->c, bytes, &down);
    if (check_status(ch, st, TF_OK, TF_OK, "tf_pinned_buffer_new") == 0) {
        memcpy(tf_pinned_buffer_data(up), data, bytes);
        if (pending_round(ch, 1, up, t) == 0 && pending_round(ch, 0, down, t) == 0) {
            ch->rep.c[C_pinned]++;
            ch->rep.c[C_checked]++;
            if (memcmp(tf_pinned_buffer_data(down), data, bytes) != 0)
                lost(ch, "pending round trip of %zu bytes came back different", bytes);
        }
    }
    if (up) check_status(ch, tf_pinned_buffer_free(up), TF_OK, TF_OK, "tf_pinned_buffer_free");
    if (down) check_status(ch, tf_pinned_buffer_free(down), TF_OK, TF_OK, "tf_pinned_buffer_free");
}

/* Uploads a tensor of random size (up to a few MB), downloads it and compares bytes. */
static void transfer(child *ch) {
    static const tf_dtype dts[4] = {TF_F32, TF_F64, TF_C64, TF_C128};
    tf_dtype dt = dts[rnd_below(ch, 4)];
    size_t es = tf_dtype_size(dt);
    /* Log-uniform size between one element and TRANSFER_MAX_BYTES. */
    double lg = rnd_unit(ch) * log2((double)TRANSFER_MAX_BYTES / (double)es);
    int64_t n = (int64_t)exp2(lg);
    if (n < 1) n = 1;
    int64_t shape[2] = {n, 1};
    int rank = 1;
    if (n % 4 == 0 && chance(ch, 50)) {
        shape[0] = n / 4;
        shape[1] = 4;
        rank = 2;
    }
    size_t bytes = (size_t)n * es;
    uint8_t *data = malloc(bytes);
    if (!data) abort();
    /* Random finite numbers in [1, 2): random mantissas. */
    if (dt == TF_F32 || dt == TF_C64) {
        for (size_t i = 0; i < bytes / 4; i++) {
            uint32_t x = 0x3f800000u | (uint32_t)(rnd(ch) & 0x7fffffu);
            memcpy(data + 4 * i, &x, 4);
        }
    } else {
        for (size_t i = 0; i < bytes / 8; i++) {
            uint64_t x = 0x3ff0000000000000ull | (rnd(ch) & 0xfffffffffffffull);
            memcpy(data + 8 * i, &x, 8);
        }
    }
    tf_tensor t = 0;
    tf_status st = tf_upload(ch->c, dt, rank, shape, data, &t);
    if (check_status(ch, st, TF_OK, TF_OK, "tf_upload(transfer)") != 0) {
        free(data);
        return;
    }
    ch->rep.c[C_uploads]++;
    ch->rep.c[C_bytes_up] += bytes;
    if (chance(ch, 33)) pinned_round_trip(ch, t, data, bytes);
    void *back = NULL;
    size_t got = 0;
    if (chance(ch, 50)) {
        st = tf_download(ch->c, t, &back, &got);
    } else {
        st = tf_download_into(ch->c, t, &ch->dl_buf, &ch->dl_cap);
        got = bytes;
    }
    if (check_status(ch, st, TF_OK, TF_OK, "tf_download(transfer)") == 0) {
        ch->rep.c[C_downloads]++;
        ch->rep.c[C_bytes_down] += got;
        ch->rep.c[C_checked]++;
        const void *cmp = back ? back : ch->dl_buf;
        if (got != bytes || memcmp(cmp, data, bytes) != 0)
            lost(ch, "transfer of %zu bytes (%s) came back different (%zu bytes)", bytes, tf_dtype_name(dt), got);
    }
    free(back);
    free(data);
    /* Keep the latest large tensor live for a while (a kill or disconnect must free it). */
    if (ch->bulk) {
        check_status(ch, free_tensor(ch, ch->bulk), TF_OK, TF_OK, "tf_tensor_free(bulk)");
        ch->bulk = 0;
        ch->bulk_bytes = 0;
    }
    if (chance(ch, 50)) {
        ch->bulk = t;
        ch->bulk_bytes = bytes;
    } else {
        check_status(ch, free_tensor(ch, t), TF_OK, TF_OK, "tf_tensor_free(transfer)");
    }
}

/* ---- deliberate bad calls through the library ---- */

typedef struct pair {
    tf_tensor a, b;
} pair;

/* Queues a + b (meant to be refused: the burst stays empty). */
static tf_status add_pair_fn(tf_view *v, void *arg) {
    pair *p = arg;
    tf_tensor out;
    return tf_view_add(v, p->a, p->b, &out);
}

/* One deliberate bad call through the client library; its typed error is expected. */
static void bad_calls(child *ch) {
    switch (rnd_below(ch, 4)) {
    case 0: { /* download of a handle never created */
        void *data = NULL;
        size_t bytes;
        expect_error(ch, tf_download(ch->c, (tf_tensor)0x7fff0000u + (tf_tensor)rnd_below(ch, 1000), &data, &bytes),
                     TF_ERR_UNKNOWN_HANDLE, "download of an unknown handle");
        free(data);
        break;
    }
    case 1: { /* free twice */
        value *v = pool_upload(ch, TF_F64, 1, (int64_t[]){3});
        if (!v) return;
        tf_tensor h = v->h;
        pool_drop(ch, ch->npool - 1);
        expect_error(ch, tf_tensor_free(ch->c, h), TF_ERR_UNKNOWN_HANDLE, "second free");
        break;
    }
    case 2: { /* a scoped session with a shape mismatch only */
        sess s;
        if (sess_prepare(ch, &s) != 0) return;
        s.ops_target = 0;
        s.bad = 1 + rnd_below(ch, 4);
        tf_status st = tf_with_session(ch->c, scoped_fn, &s);
        if (s.bad_done) expect_error(ch, st, s.bad_want, "bad operation in a scoped session");
        else check_status(ch, st, refusal(ch), TF_OK, "tf_with_session(empty)");
        sess_settle(&s, live_none, "scoped session with a bad call only");
        break;
    }
    default: { /* dtype mismatch, and a freed handle */
        tf_dtype dt = chance(ch, 50) ? TF_F64 : TF_C64, other = dt == TF_F64 ? TF_F32 : TF_C128;
        int64_t shape[2] = {1 + rnd_below(ch, DIM_MAX), 1 + rnd_below(ch, DIM_MAX)};
        while (ch->npool > POOL_MAX - 2) pool_drop(ch, rnd_below(ch, ch->npool)); /* b must not evict a */
        value *a = pool_upload(ch, dt, 2, shape);
        value *b = a ? pool_upload(ch, other, 2, shape) : NULL;
        if (!b) return;
        pair p = {a->h, b->h};
        expect_error(ch, tf_with_session(ch->c, add_pair_fn, &p), TF_ERR_DTYPE, "add of two dtypes");
        p.b = a->h;
        for (int i = 0; i < ch->npool; i++)
            if (ch->pool[i] == a) pool_drop(ch, i);
        expect_error(ch, tf_with_session(ch->c, add_pair_fn, &p), TF_ERR_UNKNOWN_HANDLE, "add of a freed tensor");
        break;
    }
    }
}

/* ---- deliberate bad input the daemon itself must refuse (raw frames) ---- */

/* Sends one frame and reads its reply; NULL on a transport failure. */
static Tenferro__Frame *raw_call(int fd, Tenferro__Frame *f) {
    if (th_raw_send(fd, f) != 0) return NULL;
    return th_raw_recv(fd, RAW_TIMEOUT_MS);
}

/* The status of a Result or DownloadReply frame, or -1. */
static int raw_status(const Tenferro__Frame *r) {
    if (!r) return -1;
    if (r->body_case == TENFERRO__FRAME__BODY_RESULT) return (int)r->result->status;
    if (r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY && r->download_reply->result)
        return (int)r->download_reply->result->status;
    return -1;
}

/* Checks a raw reply's status against want (contention also allowed where `admitted` is 0). */
static void raw_expect(child *ch, Tenferro__Frame *r, tf_status want, int may_be_refused, const char *what) {
    int st = raw_status(r);
    tf__frame_free(r);
    if (st == (int)want || (may_be_refused && st == (int)refusal(ch))) {
        ch->rep.c[C_expected]++;
        ch->rep.expected_by_status[(unsigned)st % N_STATUS]++;
        return;
    }
    unexpected(ch, "raw %s: status %d (%s), expected %s", what, st,
               st >= 0 ? tf_status_name((tf_status)st) : "no reply", tf_status_name(want));
}

/*
 * A raw connection that asks for an unknown tensor, uploads two tensors and
 * submits one operation the daemon's own validation must refuse.
 */
static void raw_bad(child *ch) {
    int fd = th_raw_connect(&ch->args->daemon);
    if (fd < 0) {
        unexpected(ch, "raw connect failed");
        return;
    }
    ch->rep.c[C_raw_bad]++;
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    int ok = hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY;
    tf__frame_free(hello);
    if (!ok) {
        unexpected(ch, "raw hello failed");
        close(fd);
        return;
    }
    uint64_t seq = 2;
    /* A download of a tensor the connection never created. */
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    dl.tensor = 4242;
    dl.length = 8;
    f.seq = seq++;
    f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    f.download = &dl;
    raw_expect(ch, raw_call(fd, &f), TF_ERR_UNKNOWN_HANDLE, 0, "download of an unknown tensor");

    /* Two tensors of shapes [2,3] and [3,2], then operations the daemon must refuse. */
    double data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shapes[2][2] = {{2, 3}, {3, 2}};
    for (int i = 0; i < 2; i++) {
        Tenferro__Frame u = TENFERRO__FRAME__INIT;
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = 1 + (uint64_t)i;
        up.create = 1;
        up.dtype = TF_F64;
        up.n_shape = 2;
        up.shape = shapes[i];
        up.data.data = (uint8_t *)data;
        up.data.len = sizeof data;
        u.seq = seq++;
        u.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        u.upload = &up;
        Tenferro__Frame *r = raw_call(fd, &u);
        if (raw_status(r) != TF_OK) {
            unexpected(ch, "raw upload: status %d", raw_status(r));
            tf__frame_free(r);
            close(fd);
            return;
        }
        tf__frame_free(r);
    }
    struct {
        uint32_t kind;
        uint64_t in[2];
        int64_t params[2];
        int n_params;
        tf_status want;
        const char *what;
    } cases[] = {
        {TF__OP_ADD, {1, 2}, {0}, 0, TF_ERR_SHAPE, "add of [2,3] and [3,2]"},
        {TF__OP_MATMUL, {1, 1}, {0}, 0, TF_ERR_SHAPE, "matmul of [2,3] and [2,3]"},
        {TF__OP_ADD, {1, 99}, {0}, 0, TF_ERR_UNKNOWN_HANDLE, "add of an unknown tensor"},
        {TF__OP_REDUCE_SUM, {1, 0}, {5}, 1, TF_ERR_AXIS, "sum over axis 5 of a rank-2 tensor"},
        {TF__OP_ADD, {1, 1}, {0}, 0, TF_ERR_INVALID_ARGUMENT, "output handle 1 (in use)"},
    };
    int c = rnd_below(ch, (int)(sizeof cases / sizeof cases[0]));
    Tenferro__Op op = TENFERRO__OP__INIT;
    Tenferro__Op *ops[1] = {&op};
    op.kind = cases[c].kind;
    op.n_inputs = cases[c].kind == TF__OP_REDUCE_SUM ? 1 : 2;
    op.inputs = cases[c].in;
    op.output = c == 4 ? 1 : 10;
    op.n_params = (size_t)cases[c].n_params;
    op.params = cases[c].params;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.n_ops = 1;
    sub.ops = ops;
    Tenferro__Frame sf = TENFERRO__FRAME__INIT;
    sf.seq = seq++;
    sf.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    sf.submit = &sub;
    Tenferro__Frame *r = raw_call(fd, &sf);
    if (c == 4) {
        /* Whatever the daemon calls a reused output handle, it must refuse it with a typed error. */
        int st = raw_status(r);
        tf__frame_free(r);
        if (st > 0 && st != TF_ERR_INTERNAL && st != TF_ERR_PROTOCOL) {
            ch->rep.c[C_expected]++;
            ch->rep.expected_by_status[(unsigned)st % N_STATUS]++;
        } else {
            unexpected(ch, "raw %s: status %d", cases[c].what, st);
        }
    } else {
        raw_expect(ch, r, cases[c].want, 1, cases[c].what);
    }
    close(fd); /* the daemon frees both tensors */
}

/* ---- the child's loop ---- */

/* A hostile or resident child: its own loop (hostile.c, resident.c), then its report. */
static int special_child_main(const child_args *a) {
    report rep;
    memset(&rep, 0, sizeof rep);
    rep.magic = REPORT_MAGIC;
    char name[64];
    snprintf(name, sizeof name, "%s-%d", a->kind == CHILD_HOSTILE ? "hostile" : "resident", a->index);
    setenv("TENFERRO_CLIENT_NAME", name, 1);
    if (a->kind == CHILD_HOSTILE)
        hostile_main(&a->daemon, a->seed, a->deadline_ms, &rep);
    else
        resident_main(&a->daemon, a->seed, a->index, a->ctl, a->leak_mib, &rep);
    ssize_t w = write(a->report_fd, &rep, sizeof rep);
    close(a->report_fd);
    return w == (ssize_t)sizeof rep ? 0 : 3;
}

/* A client process: random actions until the deadline, then a last checkpoint and its report. */
static int child_main(void *arg) {
    const child_args *a = arg;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(a->other_fd);
    if (a->kind != CHILD_LOAD) return special_child_main(a);
    child ch;
    memset(&ch, 0, sizeof ch);
    ch.args = a;
    ch.rng = a->seed;
    ch.rep.magic = REPORT_MAGIC;
    if (a->kill == KILL_TIMER) {
        signal(SIGALRM, on_alarm);
        uint64_t now = now_ms(), in = a->kill_at_ms > now ? a->kill_at_ms - now : 1;
        struct itimerval it = {{0, 0}, {(time_t)(in / 1000), (suseconds_t)(in % 1000) * 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    char name[64];
    snprintf(name, sizeof name, "load-%d", a->index);
    setenv("TENFERRO_CLIENT_NAME", name, 1);
    if (connect_child(&ch) != 0) goto out;
    while (now_ms() < a->deadline_ms) {
        if (ch.resync && reconnect(&ch) != 0) goto out;
        int r = rnd_below(&ch, 100);
        if (r < 38) scoped_session(&ch);
        else if (r < 52) held_session(&ch);
        else if (r < 68) transfer(&ch);
        else if (r < 80) bad_calls(&ch);
        else if (r < 84) raw_bad(&ch);
        else if (r < 88) {
            if (chance(&ch, 50)) checkpoint(&ch);
            if (reconnect(&ch) != 0) goto out;
        } else if (r < 94) checkpoint(&ch);
        else if (ch.npool > 0) pool_drop(&ch, rnd_below(&ch, ch.npool));
        if (ch.c == NULL && connect_child(&ch) != 0) goto out;
        /* A killer that found no session or transfer to die in dies anyway, tensors held. */
        if ((a->kill == KILL_IN_SESSION || a->kill == KILL_IN_TRANSFER) &&
            now_ms() >= a->kill_at_ms + 2000)
            kill(getpid(), SIGKILL);
    }
    if (!ch.resync) checkpoint(&ch);
    while (!ch.resync && ch.npool > 0) pool_drop(&ch, ch.npool - 1);
    if (!ch.resync && ch.bulk) check_status(&ch, free_tensor(&ch, ch.bulk), TF_OK, TF_OK, "tf_tensor_free(bulk)");
    pool_forget(&ch);
    tf_disconnect(ch.c);
out:
    if (a->kill == KILL_TIMER) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
    }
    free(ch.dl_buf);
    ssize_t w = write(a->report_fd, &ch.rep, sizeof ch.rep);
    close(a->report_fd);
    return w == (ssize_t)sizeof ch.rep ? 0 : 3;
}

/* ---- the parent ---- */

typedef struct slot {
    pid_t pid;
    int fd;
    kill_mode kill;
    child_kind kind;
} slot;

typedef struct totals {
    report rep;
    uint64_t run, killed, killed_timer, killed_in_session, killed_in_transfer, hung, crashed;
    uint64_t hostile_run;
} totals;

/* The parent's state: the daemon, the arguments children are started with, the totals. */
typedef struct driver {
    th_daemon d;
    int daemon_ok;
    child_args args;  /* the template every child is started from */
    totals t;
    uint64_t rng;
    int kill_one_in;  /* one ordinary child in this many kills itself */
} driver;

/* Collects an ended child: its report, or the reason it sent none. */
static void collect(totals *t, slot *s, int status) {
    report rep;
    ssize_t n = read(s->fd, &rep, sizeof rep);
    close(s->fd);
    int got = n == (ssize_t)sizeof rep && rep.magic == REPORT_MAGIC;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && s->kill != KILL_NONE && !got) {
        t->killed++;
        if (s->kill == KILL_TIMER) t->killed_timer++;
        else if (s->kill == KILL_IN_SESSION) t->killed_in_session++;
        else t->killed_in_transfer++;
    } else if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        t->crashed++;
        t->rep.c[C_unexpected]++;
        fprintf(stderr, "load: child pid %d ended without a report (%s %d)\n", (int)s->pid,
                WIFSIGNALED(status) ? "signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    if (got) {
        for (int i = 0; i < N_COUNTERS; i++) t->rep.c[i] += rep.c[i];
        for (int i = 0; i < N_STATUS; i++) t->rep.expected_by_status[i] += rep.expected_by_status[i];
    }
    s->pid = 0;
}

/* Starts a child of `kind` in slot s that runs until `deadline`; ordinary ones may be killers. */
static int spawn(driver *dr, slot *s, child_kind kind, uint64_t deadline) {
    int p[2];
    if (pipe(p) != 0) return -1;
    child_args *a = &dr->args;
    totals *t = &dr->t;
    a->index = (int)t->run;
    a->kind = kind;
    a->seed = th_splitmix(&dr->rng);
    a->report_fd = p[1];
    a->other_fd = p[0];
    a->deadline_ms = deadline;
    a->kill = KILL_NONE;
    uint64_t now = now_ms();
    if (kind == CHILD_LOAD && th_splitmix(&dr->rng) % (uint64_t)dr->kill_one_in == 0 &&
        deadline > now + 100) {
        static const kill_mode modes[3] = {KILL_TIMER, KILL_IN_SESSION, KILL_IN_TRANSFER};
        a->kill = modes[th_splitmix(&dr->rng) % 3];
        a->kill_at_ms = now + th_splitmix(&dr->rng) % (deadline - now);
    }
    /* The child works on its copy of *a, taken at the fork. */
    pid_t pid = th_spawn(child_main, a);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    s->pid = pid;
    s->fd = p[0];
    s->kill = a->kill;
    s->kind = kind;
    t->run++;
    if (kind == CHILD_HOSTILE) t->hostile_run++;
    return 0;
}

/* Is the daemon still running (reaping it when it is not)? */
static int daemon_alive(th_daemon *d) {
    int status;
    if (d->pid <= 0) return 0;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
        fprintf(stderr, "load: tenferrod died (%s %d); log %s\n", WIFSIGNALED(status) ? "signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), d->log_path);
        d->pid = 0;
        return 0;
    }
    return 1;
}

/*
 * Reaps the children of `slots` that ended, starting a replacement of the
 * same kind while `respawn_until` is ahead, and kills those still running
 * HANG_GRACE_MS past `deadline`. Returns how many still run.
 */
static int reap(driver *dr, slot *slots, int n, uint64_t deadline, uint64_t respawn_until) {
    int running = 0;
    uint64_t now = now_ms();
    for (int i = 0; i < n; i++) {
        slot *s = &slots[i];
        if (s->pid <= 0) continue;
        int status;
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid) {
            child_kind kind = s->kind;
            collect(&dr->t, s, status);
            /* A hostile child stops 1.5 s before its deadline: none is started in that time. */
            uint64_t lead = kind == CHILD_HOSTILE ? 2000 : 0;
            if (now + lead < respawn_until && dr->daemon_ok && spawn(dr, s, kind, deadline) != 0)
                dr->t.rep.c[C_unexpected]++;
        } else if (now > deadline + HANG_GRACE_MS) {
            fprintf(stderr, "load: child pid %d still runs %d ms after the end: killing it\n",
                    (int)s->pid, HANG_GRACE_MS);
            kill(s->pid, SIGKILL);
            th_wait(s->pid);
            close(s->fd);
            s->pid = 0;
            dr->t.hung++;
            dr->t.rep.c[C_unexpected]++;
        }
        if (s->pid > 0) running++;
    }
    if (dr->daemon_ok && !daemon_alive(&dr->d)) {
        dr->daemon_ok = 0;
        dr->t.rep.c[C_unexpected]++;
    }
    return running;
}

/* How many of the residents still run. */
static int residents_alive(const slot *residents, int n) {
    int alive = 0;
    for (int i = 0; i < n; i++) alive += residents[i].pid > 0;
    return alive;
}

/*
 * One phase of load: n slots (the first n_hostile hostile, the others
 * ordinary) kept busy until `deadline`, then waited for. Residents, which
 * live through every phase, are watched too: one that ends early is a failure.
 */
static void run_phase(driver *dr, slot *slots, int n, int n_hostile, uint64_t deadline,
                      slot *residents, int n_residents) {
    for (int i = 0; i < n; i++)
        if (spawn(dr, &slots[i], i < n_hostile ? CHILD_HOSTILE : CHILD_LOAD, deadline) != 0) {
            fprintf(stderr, "load: cannot start a child: %s\n", strerror(errno));
            dr->t.rep.c[C_unexpected]++;
        }
    int alive = residents_alive(residents, n_residents);
    for (;;) {
        int running = reap(dr, slots, n, deadline, deadline);
        int residents_left = reap(dr, residents, n_residents, UINT64_MAX - HANG_GRACE_MS, 0);
        if (residents_left < alive) {
            fprintf(stderr, "load: a resident client ended before the soak did\n");
            dr->t.rep.c[C_unexpected]++;
            alive = residents_left;
        }
        if (running == 0) return;
        th_sleep_ms(5);
    }
}

/* ---- the soak ---- */

/* Soak parameters. */
typedef struct soak_opts {
    int enabled;
    int interval_s;  /* seconds between samples */
    int residents;
    int leak_mib;    /* the deliberate client-side leak of resident 0, per round */
} soak_opts;

/* How long the residents may take to go idle, and the gauges to stand still, at a quiet point. */
#define QUIET_ACK_MS 30000
#define QUIET_SETTLE_MS 15000
/* Time kept for the quiet point at the end of each interval. */
#define QUIET_BUDGET_MS 1000
/* Most samples a soak keeps (a day at 10 s). */
#define SOAK_MAX_SAMPLES 8640

/*
 * Asks the residents to go idle and waits until they have; returns 0, or
 * -1 when one did not within QUIET_ACK_MS.
 */
static int quiet_begin(soak_ctl *ctl, int n_residents) {
    atomic_store(&ctl->acks, 0);
    atomic_fetch_add(&ctl->epoch, 1);
    atomic_store(&ctl->quiet, 1);
    uint64_t t0 = now_ms();
    while ((int)atomic_load(&ctl->acks) < n_residents) {
        if (now_ms() - t0 > QUIET_ACK_MS) return -1;
        th_sleep_ms(5);
    }
    return 0;
}

/*
 * The soak: residents for the whole run, and rounds of load (ordinary,
 * killed and hostile children) of interval_s each, with a quiet point at
 * the end of every round where the load has stopped, the residents are idle
 * and the daemon is sampled. Returns the number of failed rules (0: no leak
 * seen), or -1 when the soak could not run.
 */
static int run_soak(driver *dr, const soak_opts *so, int clients, int n_hostile, int seconds) {
    soak_ctl *ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    soak_sample *samples = calloc(SOAK_MAX_SAMPLES, sizeof *samples);
    slot *slots = calloc((size_t)clients + (size_t)n_hostile, sizeof *slots);
    slot *residents = calloc((size_t)so->residents + 1, sizeof *residents);
    if (ctl == MAP_FAILED || !samples || !slots || !residents) return -1;
    memset(ctl, 0, sizeof *ctl);
    dr->args.ctl = ctl;
    for (int i = 0; i < so->residents; i++) {
        dr->args.leak_mib = i == 0 ? so->leak_mib : 0;
        if (spawn(dr, &residents[i], CHILD_RESIDENT, UINT64_MAX - HANG_GRACE_MS) != 0) return -1;
    }
    printf("# soak: %d s, a sample every %d s at a quiet point; %d ordinary clients (one in %d "
           "SIGKILLed), %d hostile, %d resident%s%s\n",
           seconds, so->interval_s, clients, dr->kill_one_in, n_hostile, so->residents,
           so->residents == 1 ? "" : "s",
           so->leak_mib ? " (resident 0 leaks on purpose: the rule must fail)" : "");
    if (so->leak_mib)
        printf("# leak demo: resident 0 uploads a %d MiB tensor every round and never frees it\n",
               so->leak_mib);
    soak_print_header(stdout);
    fflush(stdout);
    uint64_t t0 = now_ms(), end = t0 + (uint64_t)seconds * 1000u;
    int n = 0;
    for (int round = 1; dr->daemon_ok && n < SOAK_MAX_SAMPLES; round++) {
        uint64_t due = t0 + (uint64_t)round * (uint64_t)so->interval_s * 1000u;
        if (due > end + (uint64_t)so->interval_s * 500u) break;
        atomic_store(&ctl->round, (unsigned)round);
        uint64_t load_until = due > QUIET_BUDGET_MS ? due - QUIET_BUDGET_MS : due;
        if (load_until < now_ms() + 500) load_until = now_ms() + 500;
        run_phase(dr, slots, clients + n_hostile, n_hostile, load_until, residents, so->residents);
        if (!dr->daemon_ok) break;
        int alive = residents_alive(residents, so->residents);
        if (quiet_begin(ctl, alive) != 0) {
            fprintf(stderr, "load: the residents did not go idle within %d ms\n", QUIET_ACK_MS);
            dr->t.rep.c[C_unexpected]++;
        }
        soak_sample *s = &samples[n];
        if (soak_quiet_sample(&dr->d, alive, QUIET_SETTLE_MS, s) != 0) {
            fprintf(stderr, "load: cannot sample the daemon\n");
            dr->t.rep.c[C_unexpected]++;
            break;
        }
        s->index = ++n;
        s->t_s = (double)(now_ms() - t0) / 1000.0;
        s->children = dr->t.run - dr->t.hostile_run - (uint64_t)so->residents;
        s->killed = dr->t.killed;
        soak_print_sample(stdout, s);
        fflush(stdout);
        atomic_store(&ctl->quiet, 0);
    }
    /* The residents let go of everything and report. */
    atomic_store(&ctl->stop, 1);
    atomic_store(&ctl->quiet, 0);
    uint64_t stop_at = now_ms();
    while (reap(dr, residents, so->residents, stop_at, 0) > 0) th_sleep_ms(5);
    int failed = soak_judge(stdout, samples, n);
    int peak_i = 0;
    for (int i = 1; i < n; i++)
        if (samples[i].hwm_kb > samples[peak_i].hwm_kb) peak_i = i;
    if (n > 0)
        printf("# soak: first sample rss_kb=%ld fds=%d threads=%d; last rss_kb=%ld fds=%d threads=%d; "
               "peak (VmHWM) %ld kB\n",
               samples[0].rss_kb, samples[0].fds, samples[0].threads, samples[n - 1].rss_kb,
               samples[n - 1].fds, samples[n - 1].threads, samples[n - 1].hwm_kb);
    printf("SOAK samples=%d interval_s=%d verdict=%s failed_rules=%d\n", n, so->interval_s,
           failed == 0 ? "pass" : "FAIL", failed < 0 ? 0 : failed);
    fflush(stdout);
    free(samples);
    free(slots);
    free(residents);
    munmap(ctl, sizeof *ctl);
    return failed == 0 ? 0 : failed < 0 ? -1 : failed;
}

static void usage(void) {
    fprintf(stderr,
            "usage: load [--clients N] [--seconds S] [--seed X] [--daemon PATH] [--device DEV]\n"
            "            [--hostile N] [--soak] [--sample-seconds S] [--residents N] [--leak-mib M]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int clients = 32, seconds = 20, n_hostile = -1;
    soak_opts so = {0, 10, 2, 0};
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--soak") == 0) {
            so.enabled = 1;
            continue;
        }
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--clients") == 0) clients = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0) seconds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0) seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--daemon") == 0) setenv("TENFERRO_DAEMON", argv[++i], 1);
        else if (strcmp(argv[i], "--device") == 0) setenv("TENFERRO_TEST_DEVICE", argv[++i], 1);
        else if (strcmp(argv[i], "--hostile") == 0) n_hostile = atoi(argv[++i]);
        else if (strcmp(argv[i], "--sample-seconds") == 0) so.interval_s = atoi(argv[++i]);
        else if (strcmp(argv[i], "--residents") == 0) so.residents = atoi(argv[++i]);
        else if (strcmp(argv[i], "--leak-mib") == 0) so.leak_mib = atoi(argv[++i]);
        else usage();
    }
    if (n_hostile < 0) n_hostile = so.enabled ? (clients / 4 > 2 ? clients / 4 : 2) : 0;
    if (clients < 1 || seconds < 1 || so.interval_s < 2 || so.residents < 1 || so.leak_mib < 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    driver dr;
    memset(&dr, 0, sizeof dr);
    dr.rng = seed;
    dr.kill_one_in = so.enabled ? 3 : KILL_ONE_IN;
    int wait_policy = (int)(th_splitmix(&dr.rng) & 1);
    const char *policy = wait_policy ? "wait" : "reject";
    const char *daemon_bin = getenv("TENFERRO_DAEMON") ? getenv("TENFERRO_DAEMON") : "build/tenferrod";
    printf("# load: seed=%" PRIu64 " policy=%s wait_deadline_ms=%s clients=%d hostile=%d seconds=%d device=%s daemon=%s\n",
           seed, policy, WAIT_DEADLINE_MS, clients, n_hostile, seconds, th_device(), daemon_bin);
    fflush(stdout);

    th_daemon *d = &dr.d;
    if (th_daemon_start(d, "--reservation-policy", policy, "--wait-deadline-ms", WAIT_DEADLINE_MS,
                        "--log-level", "info", (char *)NULL) != 0) {
        fprintf(stderr, "load: tenferrod did not start (log %s)\n", d->log_path);
        return 1;
    }
    dr.daemon_ok = 1;
    uint64_t base_bytes = th_counter(d, "device_bytes_live");
    uint64_t base_allocs = th_counter(d, "device_allocations_live");
    uint64_t base_pinned = th_counter(d, "pinned_bytes_live");
    int base_clients = th_client_count(d);
    printf("# baseline: device_bytes_live=%" PRIu64 " device_allocations_live=%" PRIu64 " clients=%d\n",
           base_bytes, base_allocs, base_clients);

    dr.args.wait_policy = wait_policy;
    dr.args.daemon = *d;
    int soak_failed = 0;
    if (so.enabled) {
        soak_failed = run_soak(&dr, &so, clients, n_hostile, seconds);
        if (soak_failed < 0) {
            fprintf(stderr, "load: the soak could not run\n");
            dr.t.rep.c[C_unexpected]++;
        }
    } else {
        slot *slots = calloc((size_t)clients + (size_t)n_hostile, sizeof *slots);
        if (!slots) return 1;
        run_phase(&dr, slots, clients + n_hostile, n_hostile, now_ms() + (uint64_t)seconds * 1000u,
                  NULL, 0);
        free(slots);
    }

    /* Back to the baseline? */
    uint64_t bytes = base_bytes, allocs = base_allocs, pinned = base_pinned;
    int nclients = base_clients, settled = 0;
    uint64_t t0 = now_ms();
    while (dr.daemon_ok && daemon_alive(d)) {
        bytes = th_counter(d, "device_bytes_live");
        allocs = th_counter(d, "device_allocations_live");
        pinned = th_counter(d, "pinned_bytes_live");
        nclients = th_client_count(d);
        if (bytes == base_bytes && allocs == base_allocs && pinned == base_pinned &&
            nclients == base_clients) {
            settled = 1;
            break;
        }
        if (now_ms() - t0 > SETTLE_MS) break;
        th_sleep_ms(50);
    }
    int daemon_ok = dr.daemon_ok && d->pid > 0;
    const totals *t = &dr.t;
    const report *r = &t->rep;
    printf("# children: run=%" PRIu64 " killed=%" PRIu64 " (timer %" PRIu64 ", in a held session %" PRIu64
           ", with a pending transfer %" PRIu64 ") crashed=%" PRIu64 " hung=%" PRIu64 "\n",
           t->run, t->killed, t->killed_timer, t->killed_in_session, t->killed_in_transfer, t->crashed,
           t->hung);
    if (t->hostile_run)
        printf("# hostile: children=%" PRIu64 " garbage=%" PRIu64 " before_hello=%" PRIu64
               " truncated=%" PRIu64 " huge_length=%" PRIu64 " big_partial=%" PRIu64
               " wrong_handles=%" PRIu64 " bad_version=%" PRIu64 " vanished=%" PRIu64
               " never_hello=%" PRIu64 " (closed by the daemon: %" PRIu64 ")\n",
               t->hostile_run, r->c[C_hostile_garbage], r->c[C_hostile_before_hello],
               r->c[C_hostile_truncated], r->c[C_hostile_huge], r->c[C_hostile_partial],
               r->c[C_hostile_wrong_handles], r->c[C_hostile_bad_version], r->c[C_hostile_vanish],
               r->c[C_hostile_no_hello], r->c[C_hostile_no_hello_closed]);
    printf("# totals:");
    for (int i = 0; i < N_COUNTERS; i++) printf(" %s=%" PRIu64, counter_names[i], r->c[i]);
    printf("\n# expected errors:");
    for (int i = 0; i < N_STATUS; i++)
        if (r->expected_by_status[i]) printf(" %s=%" PRIu64, tf_status_name((tf_status)i), r->expected_by_status[i]);
    printf("\n");
    if (daemon_ok) {
        static const char *const names[] = {"sessions_opened", "sessions_closed", "sessions_released",
                                            "sessions_reclaimed", "scoped_roots", "admissions_contended",
                                            "admissions_queued", "admissions_timed_out", "ops_accepted",
                                            "ops_rejected", "tensors_created", "tensors_freed",
                                            "protocol_errors", "execution_errors",
                                            "connections_accepted", "connections_closed"};
        printf("# daemon:");
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            printf(" %s=%" PRIu64, names[i], th_counter(d, names[i]));
        printf("\n# settled=%s after %" PRIu64 " ms: device_bytes_live=%" PRIu64
               " device_allocations_live=%" PRIu64 " pinned_bytes_live=%" PRIu64
               " clients=%d (baseline %d)\n",
               settled ? "yes" : "no", now_ms() - t0, bytes, allocs, pinned, nclients, base_clients);
    }
    uint64_t unexpected_n = r->c[C_unexpected] + (daemon_ok && nclients != base_clients ? 1 : 0);
    int64_t leaked_bytes = (int64_t)(bytes - base_bytes), leaked_tensors = (int64_t)(allocs - base_allocs);
    int64_t leaked_pinned = (int64_t)(pinned - base_pinned);
    printf("LOAD clients=%" PRIu64 " sessions=%" PRIu64 " ops=%" PRIu64 " errors_unexpected=%" PRIu64
           " lost=%" PRIu64 " leaked_bytes=%" PRId64 " leaked_tensors=%" PRId64
           " leaked_pinned=%" PRId64 "\n",
           t->run, r->c[C_scoped_ok] + r->c[C_held_opened], r->c[C_ops], unexpected_n, r->c[C_lost],
           leaked_bytes, leaked_tensors, leaked_pinned);
    fflush(stdout);

    int stop_rc = -1;
    char log[sizeof d->log_path];
    memcpy(log, d->log_path, sizeof log);
    if (daemon_ok) stop_rc = th_daemon_stop(d);
    printf("# tenferrod stopped on SIGTERM with status %d%s%s\n", stop_rc, stop_rc ? "; log " : "",
           stop_rc ? log : "");
    int ok = unexpected_n == 0 && r->c[C_lost] == 0 && leaked_bytes == 0 && leaked_tensors == 0 &&
             leaked_pinned == 0 && stop_rc == 0 && soak_failed == 0;
    return ok ? 0 : 1;
}
