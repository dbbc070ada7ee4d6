/*
 * Device-level contracts, run against the suite's device (TENFERRO_TEST_DEVICE;
 * cuda:0 on the GPU machine, cpu in CI):
 *
 *  - parity: every operation and dtype gives the same result on the suite's
 *    device as on a second daemon running the CPU backend, on the same fresh
 *    random inputs (on the CPU build this compares the CPU backend with itself
 *    across two processes; on the GPU machine it is the GPU-vs-CPU parity check);
 *  - out of device memory is TF_ERR_NO_MEMORY for that operation only: the batch
 *    stops there, earlier results stay valid, and the daemon keeps serving;
 *  - two client processes running scoped sessions at the same time on their
 *    own streams both get correct results.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tests/integration/harness.h"

static const tf_dtype dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* One operation of the parity table: kind, input shapes, parameters. */
typedef struct parity_case {
    const char *name;
    tf__op_kind kind;
    int n_inputs;
    int rank;
    int64_t shape[2][4];
    int n_params;
    int64_t params[4];
    int positive; /* log and sqrt take positive inputs */
    int real_only;
} parity_case;

static const parity_case cases[] = {
    {"add", TF__OP_ADD, 2, 2, {{37, 29}, {37, 29}}, 0, {0}, 0, 0},
    {"sub", TF__OP_SUB, 2, 2, {{37, 29}, {37, 29}}, 0, {0}, 0, 0},
    {"mul", TF__OP_MUL, 2, 2, {{37, 29}, {37, 29}}, 0, {0}, 0, 0},
    {"div", TF__OP_DIV, 2, 2, {{37, 29}, {37, 29}}, 0, {0}, 0, 0},
    {"neg", TF__OP_NEG, 1, 2, {{37, 29}}, 0, {0}, 0, 0},
    {"conj", TF__OP_CONJ, 1, 2, {{37, 29}}, 0, {0}, 0, 0},
    {"abs", TF__OP_ABS, 1, 2, {{37, 29}}, 0, {0}, 0, 0},
    {"exp", TF__OP_EXP, 1, 2, {{37, 29}}, 0, {0}, 0, 0},
    {"log", TF__OP_LOG, 1, 2, {{37, 29}}, 0, {0}, 1, 0},
    {"sqrt", TF__OP_SQRT, 1, 2, {{37, 29}}, 0, {0}, 1, 0},
    {"scale", TF__OP_SCALE, 1, 2, {{37, 29}}, 0, {0}, 0, 0},
    {"axpby", TF__OP_AXPBY, 2, 2, {{37, 29}, {37, 29}}, 0, {0}, 0, 0},
    {"permute", TF__OP_PERMUTE, 1, 3, {{7, 9, 11}}, 3, {2, 0, 1}, 0, 0},
    {"reshape", TF__OP_RESHAPE, 1, 3, {{7, 9, 11}}, 2, {63, 11}, 0, 0},
    {"copy", TF__OP_COPY, 1, 3, {{7, 9, 11}}, 0, {0}, 0, 0},
    {"sum axis 1", TF__OP_REDUCE_SUM, 1, 3, {{7, 9, 11}}, 1, {1}, 0, 0},
    {"sum all", TF__OP_REDUCE_SUM, 1, 3, {{7, 9, 11}}, 0, {0}, 0, 0},
    {"max axis 0", TF__OP_REDUCE_MAX, 1, 3, {{7, 9, 11}}, 1, {0}, 0, 1},
    {"min axes 0,2", TF__OP_REDUCE_MIN, 1, 3, {{7, 9, 11}}, 2, {0, 2}, 0, 1},
    {"matmul", TF__OP_MATMUL, 2, 2, {{33, 47}, {47, 21}}, 0, {0}, 0, 0},
    {"batched matmul", TF__OP_MATMUL, 2, 3, {{5, 12, 9}, {5, 9, 14}}, 0, {0}, 0, 0},
};

/* Arguments of one parity run, shared by the callback. */
typedef struct parity_run {
    const parity_case *pc;
    tf_tensor in[2];
    tf_tensor out;
} parity_run;

static tf_status run_case(tf_view *v, void *arg) {
    parity_run *r = arg;
    const parity_case *pc = r->pc;
    tf_scalar alpha = {0.7, -1.3}, beta = {-0.4, 0.9};
    int axes[4];
    for (int i = 0; i < pc->n_params; i++) axes[i] = (int)pc->params[i];
    switch (pc->kind) {
    case TF__OP_ADD: return tf_view_add(v, r->in[0], r->in[1], &r->out);
    case TF__OP_SUB: return tf_view_sub(v, r->in[0], r->in[1], &r->out);
    case TF__OP_MUL: return tf_view_mul(v, r->in[0], r->in[1], &r->out);
    case TF__OP_DIV: return tf_view_div(v, r->in[0], r->in[1], &r->out);
    case TF__OP_NEG: return tf_view_neg(v, r->in[0], &r->out);
    case TF__OP_CONJ: return tf_view_conj(v, r->in[0], &r->out);
    case TF__OP_ABS: return tf_view_abs(v, r->in[0], &r->out);
    case TF__OP_EXP: return tf_view_exp(v, r->in[0], &r->out);
    case TF__OP_LOG: return tf_view_log(v, r->in[0], &r->out);
    case TF__OP_SQRT: return tf_view_sqrt(v, r->in[0], &r->out);
    case TF__OP_SCALE: return tf_view_scale(v, alpha, r->in[0], &r->out);
    case TF__OP_AXPBY: return tf_view_axpby(v, alpha, r->in[0], beta, r->in[1], &r->out);
    case TF__OP_PERMUTE: return tf_view_permute(v, r->in[0], pc->n_params, axes, &r->out);
    case TF__OP_RESHAPE: return tf_view_reshape(v, r->in[0], pc->n_params, pc->params, &r->out);
    case TF__OP_COPY: return tf_view_copy(v, r->in[0], &r->out);
    case TF__OP_REDUCE_SUM: return tf_view_sum(v, r->in[0], pc->n_params, axes, &r->out);
    case TF__OP_REDUCE_MAX: return tf_view_max(v, r->in[0], pc->n_params, axes, &r->out);
    case TF__OP_REDUCE_MIN: return tf_view_min(v, r->in[0], pc->n_params, axes, &r->out);
    case TF__OP_MATMUL: return tf_view_matmul(v, r->in[0], r->in[1], &r->out);
    default: return TF_ERR_UNSUPPORTED;
    }
}

/* Uploads the case's inputs to client c, runs it in a scoped session and downloads the result. */
static void *run_on(tf_client *c, const parity_case *pc, tf_dtype dt, void *const host[2],
                    tf_dtype *out_dtype, size_t *out_bytes) {
    parity_run r = {.pc = pc};
    for (int i = 0; i < pc->n_inputs; i++) {
        tf_status st = tf_upload(c, dt, pc->rank, pc->shape[i], host[i], &r.in[i]);
        ck_assert_msg(st == TF_OK, "%s upload: %s", pc->name, tf_client_last_error(c));
    }
    tf_status st = tf_with_session(c, run_case, &r);
    ck_assert_msg(st == TF_OK, "%s %s: %s: %s", pc->name, tf_dtype_name(dt), tf_status_name(st),
                  tf_client_last_error(c));
    void *data = NULL;
    st = tf_download(c, r.out, &data, out_bytes);
    ck_assert_msg(st == TF_OK, "%s download: %s", pc->name, tf_client_last_error(c));
    ck_assert_int_eq(tf_tensor_info(c, r.out, out_dtype, NULL, NULL), TF_OK);
    for (int i = 0; i < pc->n_inputs; i++) tf_tensor_free(c, r.in[i]);
    tf_tensor_free(c, r.out);
    return data;
}

/* Every operation and dtype: the suite's device agrees with the CPU backend. */
START_TEST(test_parity_with_cpu_backend) {
    th_daemon dev, cpu;
    ck_assert_int_eq(th_daemon_start(&dev, NULL), 0);
    ck_assert_int_eq(th_daemon_start(&cpu, "--device", "cpu", NULL), 0);
    tf_client *a = th_connect(&dev), *b = th_connect(&cpu);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const parity_case *pc = &cases[k];
        for (int d = 0; d < 4; d++) {
            tf_dtype dt = dtypes[d];
            if (pc->real_only && (dt == TF_C64 || dt == TF_C128)) continue;
            void *host[2] = {NULL, NULL};
            for (int i = 0; i < pc->n_inputs; i++) {
                tf__meta m = {.dtype = dt, .rank = pc->rank};
                memcpy(m.shape, pc->shape[i], sizeof pc->shape[i]);
                host[i] = malloc(tf__meta_bytes(&m));
                if (pc->positive)
                    th_fill_positive(dt, (size_t)tf__meta_numel(&m), host[i]);
                else
                    th_fill_random(dt, (size_t)tf__meta_numel(&m), host[i]);
            }
            tf_dtype da, db;
            size_t na, nb;
            void *ra = run_on(a, pc, dt, host, &da, &na);
            void *rb = run_on(b, pc, dt, host, &db, &nb);
            ck_assert_int_eq(da, db);
            ck_assert_uint_eq(na, nb);
            /* Sums and products round once per term: allow k roundings. */
            double terms = pc->kind == TF__OP_MATMUL ? 47.0 : pc->kind == TF__OP_REDUCE_SUM ? 693.0 : 4.0;
            size_t n = na / tf_dtype_size(da);
            double diff = th_max_rel_diff(da, n, ra, rb, 1.0);
            ck_assert_msg(diff <= terms * th_tolerance(da),
                          "%s %s: %s differs from cpu by %g (seed %u)", pc->name,
                          tf_dtype_name(dt), th_device(), diff, th_seed());
            free(ra);
            free(rb);
            free(host[0]);
            free(host[1]);
        }
    }
    tf_disconnect(a);
    tf_disconnect(b);
    ck_assert_int_eq(th_daemon_stop(&cpu), 0);
    ck_assert_int_eq(th_daemon_stop(&dev), 0);
}
END_TEST

/* What the out-of-memory callback queues: a valid add, a product too big for any device, another add. */
typedef struct oom_run {
    tf_tensor x, tall, wide;
    tf_tensor before, huge, after;
} oom_run;

static tf_status queue_oom(tf_view *v, void *arg) {
    oom_run *r = arg;
    tf_status st = tf_view_add(v, r->x, r->x, &r->before);
    if (st == TF_OK) st = tf_view_matmul(v, r->tall, r->wide, &r->huge);
    if (st == TF_OK) st = tf_view_add(v, r->x, r->x, &r->after);
    return st;
}

/*
 * Out of memory on a huge allocation: TF_ERR_NO_MEMORY at that operation only,
 * the earlier result is valid, the later one was never created, and the daemon
 * serves on (the same client and another one).
 */
START_TEST(test_out_of_memory_is_local) {
    th_daemon d;
    ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
    tf_client *c = th_connect(&d);
    enum { N = 1 << 17 };
    /* [2^17,1] x [1,2^17] in c128 is a 256 GiB product: more than the H200 or this host holds. */
    double *col = malloc(sizeof(double) * 2 * N);
    th_fill_random(TF_C128, N, col);
    double x[2 * 64];
    th_fill_random(TF_F64, 64, x);
    oom_run r;
    ck_assert_int_eq(tf_upload(c, TF_F64, 1, (int64_t[]){64}, x, &r.x), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_C128, 2, (int64_t[]){N, 1}, col, &r.tall), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_C128, 2, (int64_t[]){1, N}, col, &r.wide), TF_OK);
    uint64_t live_before = th_counter(&d, "device_allocations_live");

    tf_session *s;
    ck_assert_int_eq(tf_session_open(c, &s), TF_OK);
    ck_assert_int_eq(tf_session_with(s, queue_oom, &r), TF_OK);
    tf_status st = tf_session_synchronize(s);
    ck_assert_msg(st == TF_ERR_NO_MEMORY, "expected TF_ERR_NO_MEMORY, got %s: %s",
                  tf_status_name(st), tf_client_last_error(c));
    ck_assert_int_eq(tf_client_failed_index(c), 1);
    ck_assert_int_eq(tf_session_close(s, NULL), TF_OK);

    /* The add before the failure is there and right; nothing after it exists. */
    void *out = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(tf_download(c, r.before, &out, &bytes), TF_OK);
    for (int i = 0; i < 64; i++) ck_assert(((double *)out)[i] == 2 * x[i]);
    free(out);
    ck_assert_int_eq(tf_download(c, r.after, &out, &bytes), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_int_eq(tf_download(c, r.huge, &out, &bytes), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), live_before + 1);

    /* Normal service afterwards, for this client and a new one. */
    tf_client *other = th_connect(&d);
    tf_tensor y;
    ck_assert_int_eq(tf_upload(other, TF_F64, 1, (int64_t[]){64}, x, &y), TF_OK);
    ck_assert_int_eq(tf_download(other, y, &out, &bytes), TF_OK);
    ck_assert(memcmp(out, x, sizeof(double) * 64) == 0);
    free(out);
    tf_disconnect(other);
    tf_disconnect(c);
    free(col);
    ck_assert_int_eq(th_daemon_stop(&d), 0);
}
END_TEST

/* A chain of scoped matmuls that one client process runs and checks. */
static int scoped_worker(void *arg) {
    const th_daemon *d = arg;
    tf_client *c = th_connect(d);
    enum { M = 96 };
    static double a[M * M], ref[M * M];
    th_fill_random(TF_F64, M * M, a);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            double acc = 0;
            for (int k = 0; k < M; k++) acc += a[i * M + k] * a[k * M + j];
            ref[i * M + j] = acc;
        }
    parity_case pc = {"matmul", TF__OP_MATMUL, 2, 2, {{M, M}, {M, M}}, 0, {0}, 0, 0};
    void *host[2] = {a, a};
    for (int round = 0; round < 40; round++) {
        tf_dtype dt;
        size_t n;
        void *out = run_on(c, &pc, TF_F64, host, &dt, &n);
        if (th_max_rel_diff(TF_F64, M * M, out, ref, 1.0) > M * 1e-12) return 1;
        free(out);
    }
    tf_disconnect(c);
    return 0;
}

/* Two client processes run scoped sessions at the same time, each on its own stream. */
START_TEST(test_concurrent_scoped_clients) {
    th_daemon d;
    ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
    pid_t p1 = th_spawn(scoped_worker, &d), p2 = th_spawn(scoped_worker, &d);
    ck_assert_int_eq(th_wait(p1), 0);
    ck_assert_int_eq(th_wait(p2), 0);
    ck_assert_uint_eq(th_counter(&d, "admissions_contended"), 0);
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), 80);
    ck_assert_int_eq(th_daemon_stop(&d), 0);
}
END_TEST

int main(void) {
    th_seed();
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_parity_with_cpu_backend);
    tcase_add_test(tc, test_out_of_memory_is_local);
    tcase_add_test(tc, test_concurrent_scoped_clients);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
