/*
 * Integration tests of einsum (tf_view_einsum, tf_view_einsum_opt,
 * tf_einsum_path) through a real tenferrod.
 *
 * The reference is written here, independently of the client's parser and
 * of its pairwise decomposition: an expression is held as the labels of
 * every axis, and evaluated as one loop nest over all its labels in double
 * complex arithmetic, an axis of size 1 always read at index 0 (numpy's
 * broadcasting of the ellipsis), conjugated operands conjugated. The
 * subscripts string is written from that description, numpy's implicit
 * output order computed here too.
 *
 * Random expressions (240 per run, in four daemons, fresh inputs from
 * th_fill_random): 1..6 operands of rank 0..6 over up to 8 distinct labels
 * of sizes 1..7 (the loop space kept below 20000), labels repeated inside
 * an operand (diagonals) and shared by several (batch and contracted
 * labels), sometimes an ellipsis of one or two broadcast dimensions placed
 * anywhere in a term with size-1 broadcasting, implicit or explicit output,
 * blanks, a random conjugation mask, every dtype, each of the three orders,
 * scoped and held sessions alternating. Tolerance: th_tolerance(dtype) x
 * (operands + 2) x sqrt(terms summed per output element), relative with a
 * floor of 1.
 *
 * Named cases, on every dtype and with every order: ij,jk->ik, ii->,
 * ii->i, iij,jk->ik, bij,bjk->bik, abcd,cdef->aebf, acbd,dcef->abef, a
 * 16-matrix chain, and an MPS/MPO sandwich: the expectation value
 * <psi|W|psi> of one site between its environments,
 *   L(a,b,c) A(c,s,d) W(b,s,t,e) conj(A')(a,t,f) R(f,e,d):
 *   "abc,csd,bste,atf,fed->" with bond 5, MPO bond 3, physical 2, conj on
 * operand 3, and the environment update "abc,csd,bste,atf->fed" that sweeps
 * L one site on. Besides: an einsum's output used by the next operation of
 * the same callback (no round trip), intermediates freed as soon as they
 * are read (the daemon's live allocations after a 5-operand einsum are its
 * inputs and output), the rank limit (left-to-right refused where greedy
 * finds an order, an impossible expression refused by all), tf_einsum_path's
 * costs and report, and bad input: every parse error and a dtype mix typed
 * at the call, nothing queued by a refused call, the connection usable after.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
#define MAX_OPS 16
/* Labels of the reference: letters as their characters, ellipsis dimension p as ELL + p. */
#define ELL 128
#define N_REF_LABELS (ELL + TF_MAX_RANK)

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};
static const tf_einsum_optimize all_methods[3] = {TF_EINSUM_GREEDY, TF_EINSUM_OPTIMAL,
                                                  TF_EINSUM_LEFT_TO_RIGHT};

/* ---- the per-test fixture: one daemon, one client, everything to release ---- */

#define MAX_KEPT 4096

static struct {
    th_daemon d;
    tf_client *c;
    tf_tensor tensors[MAX_KEPT];
    int n_tensors;
    void *host[MAX_KEPT];
    int n_host;
} F;

#define EXPECT_OK(call)                                                                        \
    do {                                                                                       \
        tf_status st_ = (call);                                                                \
        ck_assert_msg(st_ == TF_OK, "%s: %s: %s (seed %u)", #call, tf_status_name(st_),        \
                      tf_client_last_error(F.c), th_seed());                                   \
    } while (0)

static void start(void) {
    memset(&F, 0, sizeof F);
    ck_assert_msg(th_daemon_start(&F.d, NULL) == 0, "tenferrod did not start");
    F.c = th_connect(&F.d);
}

static tf_tensor keep(tf_tensor t) {
    ck_assert_int_lt(F.n_tensors, MAX_KEPT);
    F.tensors[F.n_tensors++] = t;
    return t;
}

static void *keep_host(void *p) {
    ck_assert_ptr_nonnull(p);
    ck_assert_int_lt(F.n_host, MAX_KEPT);
    F.host[F.n_host++] = p;
    return p;
}

static void *scratch(size_t bytes) { return keep_host(calloc(bytes ? bytes : 1, 1)); }

/* Frees the kept tensors, waits for the daemon's device memory to drain to zero. */
static void free_kept(void) {
    for (int i = 0; i < F.n_tensors; i++) EXPECT_OK(tf_tensor_free(F.c, F.tensors[i]));
    F.n_tensors = 0;
    ck_assert_msg(th_wait_counter(&F.d, "device_allocations_live", 0, 5000),
                  "device_allocations_live is %llu after every tensor was freed: an "
                  "intermediate was not",
                  (unsigned long long)th_counter(&F.d, "device_allocations_live"));
    for (int i = 0; i < F.n_host; i++) free(F.host[i]);
    F.n_host = 0;
}

/* free_kept, then a clean stop. */
static void finish(void) {
    free_kept();
    ck_assert_msg(th_wait_counter(&F.d, "device_bytes_live", 0, 5000), "device bytes remain");
    tf_disconnect(F.c);
    F.c = NULL;
    ck_assert_msg(th_daemon_stop(&F.d) == 0, "tenferrod did not exit cleanly; log %s",
                  F.d.log_path);
}

/* ---- host data ---- */


/* Widens n elements of dt to double complex. */
static double complex *widen(tf_dtype dt, size_t n, const void *buf) {
    double complex *z = scratch(n * sizeof *z);
    th_widen(dt, n, buf, z);
    return z;
}

/* Rounds n double complex values to dt's layout. */
static void *narrow(tf_dtype dt, size_t n, const double complex *z) {
    void *buf = scratch(n * tf_dtype_size(dt));
    th_narrow(dt, n, z, buf);
    return buf;
}

/* Uploads fresh random values; *values gets them widened. */
static tf_tensor upload_fresh(tf_dtype dt, int rank, const int64_t *shape, double complex **values) {
    size_t n = th_numel(rank, shape);
    void *buf = scratch(n * tf_dtype_size(dt));
    th_fill_random(dt, n, buf);
    tf_tensor t = 0;
    EXPECT_OK(tf_upload(F.c, dt, rank, shape, buf, &t));
    if (values) *values = widen(dt, n, buf);
    return keep(t);
}

/* Downloads t after checking its metadata. */
static void *fetch(tf_tensor t, tf_dtype dt, int rank, const int64_t *shape) {
    tf_dtype got_dt;
    int got_rank;
    int64_t got_shape[TF_MAX_RANK];
    EXPECT_OK(tf_tensor_info(F.c, t, &got_dt, &got_rank, got_shape));
    ck_assert_int_eq(got_dt, dt);
    ck_assert_int_eq(got_rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(got_shape[i], shape[i]);
    void *data = NULL;
    size_t bytes = 0;
    EXPECT_OK(tf_download(F.c, t, &data, &bytes));
    keep_host(data);
    ck_assert_uint_eq(bytes, th_numel(rank, shape) * tf_dtype_size(dt));
    return data;
}

/* ---- expressions and the reference ---- */

/* An expression as the reference sees it: the label of every axis. */
typedef struct expr {
    char sub[256];
    int n;
    tf_dtype dt;
    uint64_t conj;
    tf_einsum_optimize how;
    int rank[MAX_OPS];
    int label[MAX_OPS][TF_MAX_RANK];
    int64_t shape[MAX_OPS][TF_MAX_RANK];
    int out_rank;
    int out_label[TF_MAX_RANK];
    int64_t out_shape[TF_MAX_RANK];
    int64_t size[N_REF_LABELS]; /* each label's size (the largest of its axes) */
} expr;

/* Sizes of every label from the axes, and the output's shape. */
static void bind_expr(expr *x) {
    memset(x->size, 0, sizeof x->size);
    for (int i = 0; i < x->n; i++)
        for (int a = 0; a < x->rank[i]; a++)
            if (x->shape[i][a] > x->size[x->label[i][a]]) x->size[x->label[i][a]] = x->shape[i][a];
    for (int a = 0; a < x->out_rank; a++) x->out_shape[a] = x->size[x->out_label[a]];
}

/* Terms summed into each output element: the loop space over the output's size. */
static double terms_per_element(const expr *x) {
    double space = 1;
    for (int l = 0; l < N_REF_LABELS; l++)
        if (x->size[l]) space *= (double)x->size[l];
    return space / (double)th_numel(x->out_rank, x->out_shape);
}

/*
 * The reference: one loop over every combination of the labels' values;
 * each operand read at its labels' values (index 0 on an axis of size 1),
 * the product added into the output at its labels' values.
 */
static double complex *reference(const expr *x, double complex *const *in) {
    int labels[N_REF_LABELS], n = 0;
    for (int l = 0; l < N_REF_LABELS; l++)
        if (x->size[l]) labels[n++] = l;
    int64_t stride[MAX_OPS][TF_MAX_RANK], ostride[TF_MAX_RANK];
    for (int i = 0; i < x->n; i++)
        for (int a = x->rank[i] - 1, s = 1; a >= 0; s *= (int)x->shape[i][a], a--)
            stride[i][a] = x->shape[i][a] == 1 ? 0 : s;
    for (int a = x->out_rank - 1, s = 1; a >= 0; s *= (int)x->out_shape[a], a--) ostride[a] = s;
    double complex *out = scratch(th_numel(x->out_rank, x->out_shape) * sizeof *out);
    int64_t idx[N_REF_LABELS] = {0};
    for (;;) {
        double complex term = 1;
        for (int i = 0; i < x->n; i++) {
            int64_t off = 0;
            for (int a = 0; a < x->rank[i]; a++) off += idx[x->label[i][a]] * stride[i][a];
            term *= (x->conj >> i) & 1 && th_is_complex(x->dt) ? conj(in[i][off]) : in[i][off];
        }
        int64_t off = 0;
        for (int a = 0; a < x->out_rank; a++) off += idx[x->out_label[a]] * ostride[a];
        out[off] += term;
        int d = n - 1;
        while (d >= 0 && ++idx[labels[d]] == x->size[labels[d]]) idx[labels[d--]] = 0;
        if (d < 0) break;
    }
    return out;
}

/* Reads an explicit letter-only expression ("ij,jk->ik") with its operands' shapes. */
static void expr_of(expr *x, const char *sub, tf_dtype dt, const int64_t (*shapes)[TF_MAX_RANK]) {
    memset(x, 0, sizeof *x);
    snprintf(x->sub, sizeof x->sub, "%s", sub);
    x->dt = dt;
    const char *p = sub;
    x->n = 1;
    for (; *p != '-'; p++) {
        if (*p == ',') {
            x->n++;
            continue;
        }
        int i = x->n - 1, a = x->rank[i]++;
        x->label[i][a] = (unsigned char)*p;
        x->shape[i][a] = shapes[i][a];
    }
    for (p += 2; *p; p++) x->out_label[x->out_rank++] = (unsigned char)*p;
    bind_expr(x);
}

/* ---- running an expression ---- */

typedef struct einsum_job {
    const expr *x;
    tf_tensor in[MAX_OPS];
    tf_tensor out;
    tf_tensor follow; /* when set: the output permuted by a second einsum in the same callback */
    int chain;
} einsum_job;

/* Session callback: queues the expression (and, for `chain`, a transpose of its output). */
static tf_status run_einsum(tf_view *v, void *arg) {
    einsum_job *j = arg;
    tf_einsum_options opt = {j->x->how, j->x->conj};
    tf_status st = tf_view_einsum_opt(v, j->x->sub, j->x->n, j->in, &opt, &j->out);
    if (st != TF_OK || !j->chain) return st;
    return tf_view_einsum(v, "ij->ji", 1, &j->out, &j->follow);
}

/* Runs an expression in a scoped burst or a held session and returns its output's data. */
static const void *run_fetch(int held, einsum_job *j, int64_t rank, const int64_t *shape) {
    if (!held) {
        EXPECT_OK(tf_with_session(F.c, run_einsum, j));
    } else {
        tf_session *s = NULL;
        EXPECT_OK(tf_session_open(F.c, &s));
        EXPECT_OK(tf_session_with(s, run_einsum, j));
        EXPECT_OK(tf_session_synchronize(s));
        EXPECT_OK(tf_session_close(s, NULL));
    }
    keep(j->out);
    if (j->chain) keep(j->follow);
    return fetch(j->out, j->x->dt, (int)rank, shape);
}

/* Uploads fresh operands for x, runs it, and compares with the reference. */
static void check_expr(const expr *x, int held, const char *what) {
    einsum_job job = {.x = x};
    double complex *values[MAX_OPS];
    for (int i = 0; i < x->n; i++) job.in[i] = upload_fresh(x->dt, x->rank[i], x->shape[i], &values[i]);
    const void *got = run_fetch(held, &job, x->out_rank, x->out_shape);
    const double complex *want = reference(x, values);
    size_t n = th_numel(x->out_rank, x->out_shape);
    double tol = th_tolerance(x->dt) * (x->n + 2) * sqrt(terms_per_element(x));
    double diff = th_max_rel_diff(x->dt, n, got, narrow(x->dt, n, want), 1.0);
    ck_assert_msg(diff <= tol,
                  "%s: '%s' on %s (order %d, conj 0x%llx, %s session): relative difference %g "
                  "above %g (seed %u)",
                  what, x->sub, tf_dtype_name(x->dt), (int)x->how, (unsigned long long)x->conj,
                  held ? "held" : "scoped", diff, tol, th_seed());
}

/* ---- random expressions ---- */

static uint64_t rng;

static unsigned rnd(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Appends a blank now and then. */
static void maybe_blank(char *s, size_t *k) {
    if (rnd(6) == 0) s[(*k)++] = ' ';
}

/*
 * numpy's implicit output: the ellipsis's dimensions (labels ELL + lo ..
 * ELL + hi - 1), then the letters used exactly once, in ASCII order.
 */
static void implicit_output(expr *x, int lo, int hi) {
    int count[ELL] = {0};
    for (int i = 0; i < x->n; i++)
        for (int a = 0; a < x->rank[i]; a++)
            if (x->label[i][a] < ELL) count[x->label[i][a]]++;
    x->out_rank = 0;
    for (int p = lo; p < hi; p++) x->out_label[x->out_rank++] = ELL + p;
    for (int ch = 0; ch < ELL; ch++)
        if (count[ch] == 1) x->out_label[x->out_rank++] = ch;
}

/*
 * A random expression (see the file's comment), with its subscripts string.
 * Distinct labels stay at most 8, so that every intermediate fits rank 8
 * whatever the order.
 */
static void draw(expr *x) {
    static const char pool[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    memset(x, 0, sizeof *x);
    x->dt = all_dtypes[rnd(4)];
    x->how = all_methods[rnd(3)];
    x->n = 1 + (int)rnd(6);
    x->conj = rnd(1u << x->n);
    int n_ell = rnd(3) == 0 ? 1 + (int)rnd(2) : 0;
    int64_t ell_size[2] = {1 + rnd(4), 1 + rnd(4)};
    int n_letters = 1 + (int)rnd((unsigned)(8 - n_ell));
    int letter[8];
    int64_t letter_size[8];
    for (int l = 0; l < n_letters; l++) {
        int ch, dup;
        do {
            ch = pool[rnd(52)];
            dup = 0;
            for (int m = 0; m < l; m++) dup |= letter[m] == ch;
        } while (dup);
        letter[l] = ch;
        letter_size[l] = 1 + rnd(7);
    }
    /* Terms: letters with repeats, an ellipsis of the last k broadcast dimensions anywhere. */
    int term_letters[MAX_OPS][TF_MAX_RANK], n_term[MAX_OPS], ell_at[MAX_OPS], k_ell[MAX_OPS];
    for (int i = 0; i < x->n; i++) {
        /* Mostly an ellipsis that stands for dimensions; now and then one that stands for none. */
        k_ell[i] = n_ell && rnd(3) ? (rnd(5) ? 1 + (int)rnd((unsigned)n_ell) : 0) : -1;
        int room = 6 - (k_ell[i] > 0 ? k_ell[i] : 0);
        n_term[i] = (int)rnd((unsigned)room + 1);
        /* A letter already in the term (a diagonal) about one time in four. */
        for (int a = 0; a < n_term[i]; a++) {
            int l = (int)rnd((unsigned)n_letters);
            for (int tries = 0, again = 1; again && tries < 3; tries++) {
                again = 0;
                for (int b = 0; b < a; b++) again |= term_letters[i][b] == l;
                if (again && rnd(4)) l = (int)rnd((unsigned)n_letters);
                else again = 0;
            }
            term_letters[i][a] = l;
        }
        ell_at[i] = k_ell[i] >= 0 ? (int)rnd((unsigned)n_term[i] + 1) : -1;
    }
    /* Keep the reference's loop space small: shrink the largest letters. */
    for (;;) {
        double space = 1;
        int used[8] = {0}, big = -1;
        for (int i = 0; i < x->n; i++)
            for (int a = 0; a < n_term[i]; a++) used[term_letters[i][a]] = 1;
        for (int l = 0; l < n_letters; l++)
            if (used[l]) {
                space *= (double)letter_size[l];
                if (big < 0 || letter_size[l] > letter_size[big]) big = l;
            }
        for (int p = 0; p < n_ell; p++) space *= (double)ell_size[p];
        if (space <= 20000 || big < 0) break;
        letter_size[big]--;
    }
    size_t k = 0;
    for (int i = 0; i < x->n; i++) {
        if (i) x->sub[k++] = ',';
        maybe_blank(x->sub, &k);
        for (int a = 0; a <= n_term[i]; a++) {
            if (a == ell_at[i]) {
                k += (size_t)sprintf(x->sub + k, "...");
                for (int d = 0; d < k_ell[i]; d++) {
                    int p = n_ell - k_ell[i] + d, r = x->rank[i]++;
                    x->label[i][r] = ELL + p;
                    x->shape[i][r] = rnd(4) == 0 ? 1 : ell_size[p];
                }
            }
            if (a == n_term[i]) break;
            int l = term_letters[i][a], r = x->rank[i]++;
            x->sub[k++] = (char)letter[l];
            x->label[i][r] = letter[l];
            x->shape[i][r] = letter_size[l];
            maybe_blank(x->sub, &k);
        }
    }
    /* The ellipsis stands for as many dimensions as the longest operand's: the last m. */
    int m = 0;
    for (int i = 0; i < x->n; i++)
        if (k_ell[i] > m) m = k_ell[i];
    if (rnd(3) == 0) {
        implicit_output(x, n_ell - m, n_ell);
    } else {
        k += (size_t)sprintf(x->sub + k, "->");
        int used[8] = {0};
        for (int i = 0; i < x->n; i++)
            for (int a = 0; a < n_term[i]; a++) used[term_letters[i][a]] = 1;
        int with_ell = m > 0 || rnd(3) == 0, ell_pos = -1, n_out = 0, order[8];
        for (int l = 0; l < n_letters; l++)
            if (used[l] && rnd(2)) order[n_out++] = l;
        for (int a = n_out - 1; a > 0; a--) { /* shuffle */
            int b = (int)rnd((unsigned)a + 1), t = order[a];
            order[a] = order[b];
            order[b] = t;
        }
        if (with_ell) ell_pos = (int)rnd((unsigned)n_out + 1);
        for (int a = 0; a <= n_out; a++) {
            if (a == ell_pos) {
                k += (size_t)sprintf(x->sub + k, "...");
                for (int p = n_ell - m; p < n_ell; p++) x->out_label[x->out_rank++] = ELL + p;
            }
            if (a == n_out) break;
            x->sub[k++] = (char)letter[order[a]];
            x->out_label[x->out_rank++] = letter[order[a]];
            maybe_blank(x->sub, &k);
        }
    }
    x->sub[k] = '\0';
    bind_expr(x);
}

/* 60 random expressions on one daemon; four runs make 240. */
START_TEST(test_random) {
    srand(th_seed() + 7919u * (unsigned)_i);
    rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)th_seed() << 8) ^ (uint64_t)(_i + 1);
    start();
    for (int t = 0; t < 60; t++) {
        expr x;
        draw(&x);
        char what[32];
        snprintf(what, sizeof what, "random %d.%d", _i, t);
        check_expr(&x, t % 2, what);
        if (F.n_tensors > MAX_KEPT - 32 || F.n_host > MAX_KEPT - 64) free_kept();
    }
    finish();
}
END_TEST

/* ---- named cases ---- */

typedef struct named_case {
    const char *sub;
    uint64_t conj;
    int64_t shapes[MAX_OPS][TF_MAX_RANK];
} named_case;

static const named_case named_cases[] = {
    {"ij,jk->ik", 0, {{3, 4}, {4, 5}}},
    {"ii->", 0, {{4, 4}}},
    {"ii->i", 1, {{4, 4}}},
    {"iij,jk->ik", 2, {{3, 3, 4}, {4, 5}}},
    {"bij,bjk->bik", 1, {{2, 3, 4}, {2, 4, 5}}},
    {"abcd,cdef->aebf", 0, {{2, 3, 4, 5}, {4, 5, 3, 2}}},
    {"acbd,dcef->abef", 3, {{2, 3, 4, 5}, {5, 3, 2, 3}}},
    /* The MPS/MPO sandwich <psi|W|psi>: L, A, W, conj(A'), R (file comment). */
    {"abc,csd,bste,atf,fed->", 1u << 3, {{5, 3, 5}, {5, 2, 5}, {3, 2, 2, 3}, {5, 2, 5}, {5, 3, 5}}},
    /* Its left-environment update: L, A, W, conj(A') -> L'. */
    {"abc,csd,bste,atf->fed", 1u << 3, {{5, 3, 5}, {5, 2, 5}, {3, 2, 2, 3}, {5, 2, 5}}},
    /* Sixteen matrices in a chain. */
    {"ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm,mn,no,op,pq->aq", 0,
     {{2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2},
      {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}}},
};

/* Every named case on one dtype, with every order, alternating session kinds. */
START_TEST(test_named) {
    const tf_dtype dt = all_dtypes[_i];
    start();
    for (int k = 0; k < N_OF(named_cases); k++)
        for (int m = 0; m < 3; m++) {
            expr x;
            expr_of(&x, named_cases[k].sub, dt, named_cases[k].shapes);
            x.conj = named_cases[k].conj;
            x.how = all_methods[m];
            check_expr(&x, (k + m) % 2, "named");
        }
    finish();
}
END_TEST

/* An einsum's output feeds the next einsum of the same callback: nothing waits. */
START_TEST(test_output_usable_at_once) {
    start();
    expr x;
    const int64_t shapes[2][TF_MAX_RANK] = {{3, 4}, {4, 5}};
    expr_of(&x, "ij,jk->ik", TF_C128, shapes);
    einsum_job job = {.x = &x, .chain = 1};
    double complex *values[2];
    for (int i = 0; i < 2; i++) job.in[i] = upload_fresh(x.dt, 2, x.shape[i], &values[i]);
    EXPECT_OK(tf_with_session(F.c, run_einsum, &job));
    keep(job.out);
    keep(job.follow);
    const int64_t tshape[2] = {5, 3};
    const void *got = fetch(job.follow, x.dt, 2, tshape);
    const double complex *want = reference(&x, values);
    double complex *wt = scratch(15 * sizeof *wt);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) wt[k * 3 + i] = want[i * 5 + k];
    ck_assert(th_max_rel_diff(x.dt, 15, got, narrow(x.dt, 15, wt), 1.0) <= 4 * th_tolerance(x.dt));
    finish();
}
END_TEST

/* After a 5-operand einsum has run, the daemon holds its inputs and output, no intermediate. */
START_TEST(test_intermediates_freed) {
    start();
    expr x;
    expr_of(&x, "abc,csd,bste,atf,fed->", TF_F64, named_cases[7].shapes);
    einsum_job job = {.x = &x};
    for (int i = 0; i < 5; i++) job.in[i] = upload_fresh(x.dt, x.rank[i], x.shape[i], NULL);
    const uint64_t ops = th_counter(&F.d, "ops_accepted");
    tf_session *s = NULL;
    EXPECT_OK(tf_session_open(F.c, &s));
    EXPECT_OK(tf_session_with(s, run_einsum, &job));
    EXPECT_OK(tf_session_synchronize(s));
    EXPECT_OK(tf_session_close(s, NULL));
    keep(job.out);
    /* Four contractions and three frees of intermediates. */
    ck_assert_uint_eq(th_counter(&F.d, "ops_accepted") - ops, 7);
    ck_assert_msg(th_wait_counter(&F.d, "device_allocations_live", 6, 5000),
                  "%llu device allocations live, expected the 5 inputs and the output",
                  (unsigned long long)th_counter(&F.d, "device_allocations_live"));
    finish();
}
END_TEST

/* ---- the rank limit ---- */

typedef struct call_job {
    const char *sub;
    int n;
    const tf_tensor *in;
    tf_einsum_options opt;
    tf_status expect;
    const char *needle;
    tf_tensor out;
    char message[512];
    tf_status got;
} call_job;

/* Session callback: one einsum whose status is recorded (the callback itself succeeds). */
static tf_status call_einsum(tf_view *v, void *arg) {
    call_job *j = arg;
    j->out = 0;
    j->got = tf_view_einsum_opt(v, j->sub, j->n, j->in, &j->opt, &j->out);
    snprintf(j->message, sizeof j->message, "%s", tf_client_last_error(tf_view_client(v)));
    return TF_OK;
}

/*
 * Left-to-right would make a rank-10 outer product of the first two operands; greedy
 * pairs each with its twin. Refused at the call for left-to-right, computed for greedy.
 */
START_TEST(test_rank_limit) {
    start();
    expr x;
    const int64_t shapes[4][TF_MAX_RANK] = {
        {2, 1, 2, 1, 2}, {1, 2, 1, 2, 1}, {2, 1, 2, 1, 2}, {1, 2, 1, 2, 1}};
    expr_of(&x, "abcde,fghij,abcde,fghij->", TF_F64, shapes);
    tf_tensor in[4];
    for (int i = 0; i < 4; i++) in[i] = upload_fresh(x.dt, 5, x.shape[i], NULL);
    call_job j = {x.sub, 4, in, {TF_EINSUM_LEFT_TO_RIGHT, 0}, TF_ERR_BAD_SHAPE, NULL, 0, "", 0};
    EXPECT_OK(tf_with_session(F.c, call_einsum, &j));
    ck_assert_msg(j.got == TF_ERR_BAD_SHAPE, "left-to-right: %s: %s", tf_status_name(j.got),
                  j.message);
    ck_assert_ptr_nonnull(strstr(j.message, "left-to-right"));
    tf_einsum_path_info *info = NULL;
    tf_einsum_options greedy = {TF_EINSUM_GREEDY, 0};
    EXPECT_OK(tf_einsum_path(F.c, x.sub, 4, in, &greedy, &info));
    ck_assert_int_eq(info->n_steps, 3);
    tf_einsum_path_free(info);
    /* An expression no order serves: five operands each sharing two labels with every other. */
    const char *impossible = "abcdefgh,abijklmn,cdijopqr,efklopst,ghmnqrst->";
    tf_tensor big[5];
    const int64_t shape8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    for (int i = 0; i < 5; i++) big[i] = upload_fresh(TF_F32, 8, shape8, NULL);
    for (int m = 0; m < 3; m++) {
        call_job k = {impossible, 5, big, {all_methods[m], 0}, TF_ERR_BAD_SHAPE, NULL, 0, "", 0};
        EXPECT_OK(tf_with_session(F.c, call_einsum, &k));
        ck_assert_msg(k.got == TF_ERR_BAD_SHAPE, "order %d: %s: %s", m, tf_status_name(k.got),
                      k.message);
    }
    finish();
}
END_TEST

/* Greedy's computed result for the twins case needs the daemon's contractions. */
START_TEST(test_rank_limit_result) {
    start();
    expr x;
    const int64_t shapes[4][TF_MAX_RANK] = {
        {2, 1, 2, 1, 2}, {1, 2, 1, 2, 1}, {2, 1, 2, 1, 2}, {1, 2, 1, 2, 1}};
    expr_of(&x, "abcde,fghij,abcde,fghij->", TF_C64, shapes);
    x.how = TF_EINSUM_GREEDY;
    check_expr(&x, 0, "rank limit");
    x.how = TF_EINSUM_OPTIMAL;
    check_expr(&x, 1, "rank limit");
    finish();
}
END_TEST

/* ---- the path report ---- */

START_TEST(test_path_report) {
    start();
    const int64_t m[2] = {100, 100}, v[1] = {100};
    tf_tensor in[3] = {upload_fresh(TF_F64, 2, m, NULL), upload_fresh(TF_F64, 2, m, NULL),
                       upload_fresh(TF_F64, 1, v, NULL)};
    /* Matrix, matrix, vector: 4e4 flops by greedy and optimal, 2.02e6 left to right. */
    const double want[3] = {40000, 40000, 2020000};
    for (int k = 0; k < 3; k++) {
        tf_einsum_options opt = {all_methods[k], 0};
        tf_einsum_path_info *info = NULL;
        EXPECT_OK(tf_einsum_path(F.c, "ij,jk,k->i", 3, in, &opt, &info));
        ck_assert_int_eq(info->optimize, all_methods[k]);
        ck_assert_int_eq(info->n_operands, 3);
        ck_assert_int_eq(info->n_steps, 2);
        ck_assert_msg(info->flops == want[k], "order %d: %g flops", k, info->flops);
        ck_assert(info->naive_flops == 3e6);
        ck_assert_int_eq(info->largest_intermediate, k == 2 ? 10000 : 100);
        ck_assert_ptr_nonnull(strstr(info->report, "ij,jk,k->i"));
        ck_assert_ptr_nonnull(strstr(info->report, info->steps[0].subscripts));
        tf_einsum_path_free(info);
    }
    tf_einsum_path_free(NULL);
    /* A path needs no session, and its errors are the call's. */
    tf_einsum_path_info *info = (tf_einsum_path_info *)1;
    CK_STATUS(F.c, tf_einsum_path(F.c, "ij,jk->ik$", 2, in, NULL, &info), TF_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(info);
    CK_STATUS(F.c, tf_einsum_path(F.c, "ij,j->i", 2, in, NULL, NULL), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf_einsum_path(NULL, "i", 1, in, NULL, &info), TF_ERR_INVALID_ARGUMENT);
    finish();
}
END_TEST

/* ---- bad input ---- */

typedef struct bad_case {
    const char *sub;
    int n;
    int which[3];     /* operands: 0 = m (3x4 f64), 1 = v (4 f64), 2 = f (4 f32) */
    tf_einsum_optimize how;
    uint64_t conj;
    tf_status expect;
    const char *needle;
} bad_case;

static const bad_case bad_cases[] = {
    {"ij,j->i$", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "unknown character '$' at position 7"},
    {"ij,j->i->j", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "second '->' at position 7"},
    {"ij,j-i", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "'-' at position 4"},
    {"ij,j->ii", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "label 'i' is in the output twice"},
    {"ij,j->k", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "output label 'k' at position 6"},
    {"ijk,j->i", 2, {0, 1}, 0, 0, TF_ERR_SHAPE, "names 3 axes but operand 0 has rank 2"},
    {"i,j->i", 2, {0, 1}, 0, 0, TF_ERR_SHAPE, "names 1 axis but operand 0 has rank 2"},
    {"...ij...,j->i", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "'...' twice in one term"},
    {"i.j,j->i", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "'.' at position 1"},
    {"ij,j,k->i", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "3 input terms"},
    {"ij->i", 2, {0, 1}, 0, 0, TF_ERR_INVALID_ARGUMENT, "but 2 operands were given"},
    {"ij,i->j", 2, {0, 1}, 0, 0, TF_ERR_SHAPE, "label 'i' is bound to 3 (operand 0, axis 0) and to 4"},
    {"...j,...->...", 2, {0, 0}, 0, 0, TF_ERR_SHAPE, "ellipsis dimension 1"},
    {"...j->j", 1, {0}, 0, 0, TF_ERR_INVALID_ARGUMENT, "has no '...'"},
    {"ij,j->i", 2, {0, 2}, 0, 0, TF_ERR_DTYPE, "operand 1 is f32 but operand 0 is f64"},
    {"i,i,i->", 3, {1, 1, 2}, 0, 0, TF_ERR_DTYPE, "no promotion"},
    {"ij,j->i", 2, {0, 1}, (tf_einsum_optimize)9, 0, TF_ERR_INVALID_ARGUMENT, "unknown optimize 9"},
    {"ij,j->i", 2, {0, 1}, 0, 0x4, TF_ERR_INVALID_ARGUMENT, "conj mask 0x4"},
    {"ij,j->i", 0, {0}, 0, 0, TF_ERR_INVALID_ARGUMENT, "0 operands given"},
    {"ij,j->i", 33, {0}, 0, 0, TF_ERR_INVALID_ARGUMENT, "33 operands given"},
};

/* Session callback: every bad case in turn, then one valid add to show the burst still runs. */
typedef struct bad_job {
    tf_tensor t[3];
    tf_tensor sum;
    int failures;
    char why[1024];
} bad_job;

static tf_status run_bad(tf_view *v, void *arg) {
    bad_job *j = arg;
    tf_client *c = tf_view_client(v);
    for (int k = 0; k < N_OF(bad_cases); k++) {
        const bad_case *b = &bad_cases[k];
        tf_tensor in[TF_EINSUM_MAX_OPERANDS + 1];
        for (int i = 0; i < TF_EINSUM_MAX_OPERANDS + 1; i++) in[i] = j->t[b->which[i < 3 ? i : 0]];
        tf_einsum_options opt = {b->how, b->conj};
        tf_tensor out = 12345;
        tf_status st = tf_view_einsum_opt(v, b->sub, b->n, in, &opt, &out);
        const char *msg = tf_client_last_error(c);
        if (st != b->expect || !strstr(msg, b->needle) || out != 12345) {
            j->failures++;
            snprintf(j->why, sizeof j->why, "'%s': %s (%s), expected %s with \"%s\"", b->sub,
                     tf_status_name(st), msg, tf_status_name(b->expect), b->needle);
        }
    }
    /* NULLs and an unknown handle. */
    tf_tensor out;
    if (tf_view_einsum(v, NULL, 1, j->t, &out) != TF_ERR_INVALID_ARGUMENT) j->failures++;
    if (tf_view_einsum(v, "ij", 1, NULL, &out) != TF_ERR_INVALID_ARGUMENT) j->failures++;
    if (tf_view_einsum(v, "ij", 1, j->t, NULL) != TF_ERR_INVALID_ARGUMENT) j->failures++;
    tf_tensor unknown = 999999;
    if (tf_view_einsum(v, "ij", 1, &unknown, &out) != TF_ERR_UNKNOWN_HANDLE) j->failures++;
    if (tf_view_einsum(NULL, "ij", 1, j->t, &out) != TF_ERR_INVALID_ARGUMENT) j->failures++;
    return tf_view_add(v, j->t[1], j->t[1], &j->sum);
}

static tf_view *saved_view;

static tf_status save_view(tf_view *v, void *arg) {
    (void)arg;
    saved_view = v;
    return TF_OK;
}

/*
 * Every parse error, a dtype mix and the argument errors refused typed at the call,
 * with nothing queued (the burst carries only the add), the connection usable after.
 */
START_TEST(test_bad_input) {
    start();
    const int64_t ms[2] = {3, 4}, vs[1] = {4};
    bad_job j = {{0}, 0, 0, ""};
    double complex *v;
    j.t[0] = upload_fresh(TF_F64, 2, ms, NULL);
    j.t[1] = upload_fresh(TF_F64, 1, vs, &v);
    j.t[2] = upload_fresh(TF_F32, 1, vs, NULL);
    const uint64_t ops = th_counter(&F.d, "ops_accepted");
    const uint64_t rejected = th_counter(&F.d, "ops_rejected");
    EXPECT_OK(tf_with_session(F.c, run_bad, &j));
    ck_assert_msg(j.failures == 0, "%d bad cases not refused as expected; last: %s", j.failures,
                  j.why);
    keep(j.sum);
    ck_assert_uint_eq(th_counter(&F.d, "ops_accepted") - ops, 1);
    ck_assert_uint_eq(th_counter(&F.d, "ops_rejected"), rejected);
    const double *sum = fetch(j.sum, TF_F64, 1, vs);
    for (int i = 0; i < 4; i++) ck_assert(fabs(sum[i] - 2 * creal(v[i])) < 1e-12);
    /* Outside its callback a view is refused. */
    EXPECT_OK(tf_with_session(F.c, save_view, NULL));
    tf_tensor out;
    CK_STATUS(F.c, tf_view_einsum(saved_view, "i->i", 1, &j.t[1], &out), TF_ERR_SESSION_CLOSED);
    /* An operand in a pending transfer (a download reading it) may be read: the sum is computed. */
    tf_pinned_buffer *buf = NULL;
    if (tf_pinned_buffer_new(F.c, 32, &buf) == TF_OK) {
        tf_pending *pd = NULL;
        EXPECT_OK(tf_download_pending(F.c, j.t[1], buf, &pd));
        call_job k = {"i->", 1, &j.t[1], {0, 0}, TF_OK, NULL, 0, "", 0};
        EXPECT_OK(tf_with_session(F.c, call_einsum, &k));
        ck_assert_msg(k.got == TF_OK, "%s: %s", tf_status_name(k.got), k.message);
        EXPECT_OK(tf_pending_wait(pd, &j.t[1], &buf));
        EXPECT_OK(tf_pinned_buffer_free(buf));
        const double *total = fetch(keep(k.out), TF_F64, 0, NULL);
        double want = 0;
        for (int i = 0; i < 4; i++) want += creal(v[i]);
        ck_assert_msg(fabs(*total - want) < 1e-12, "einsum i-> of an operand in flight: %g, not %g",
                      *total, want);
    }
    ck_assert_int_eq(th_client_count(&F.d), 1);
    finish();
}
END_TEST

/* One suite; Check forks every test, and each starts its own daemon. */
int main(void) {
    th_seed();
    Suite *suite = suite_create("einsum");
    TCase *tc = tcase_create("einsum");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_random, 0, 4);
    tcase_add_loop_test(tc, test_named, 0, 4);
    tcase_add_test(tc, test_output_usable_at_once);
    tcase_add_test(tc, test_intermediates_freed);
    tcase_add_test(tc, test_rank_limit);
    tcase_add_test(tc, test_rank_limit_result);
    tcase_add_test(tc, test_path_report);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
