/*
 * Integration tests of quotas (DESIGN.md §8, docs/admission.md): a limit that
 * refuses work does so with TF_ERR_QUOTA at the operation (or upload) that
 * would exceed it, and nothing already accepted is lost.
 *
 *  - several client processes under one per-client limit: the one that goes
 *    over is stopped at that operation (earlier results valid and correct,
 *    later outputs unknown) while the others finish with correct results;
 *  - a per-uid limit is shared by every connection of the uid;
 *  - live_tensors (per client and per uid) and queued_ops refuse typed;
 *  - an upload over the limit allocates nothing; after a free the same
 *    request is accepted.
 *
 * Every test starts its own tenferrod on a private socket with the limits it
 * needs and asserts a clean SIGTERM shutdown. Tensors are f64 vectors of
 * VLEN elements (128 KiB), so limits read as whole tensors.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Elements of each f64 test vector: 16384 * 8 bytes = 128 KiB. */
#define VLEN 16384
#define VBYTES ((uint64_t)VLEN * sizeof(double))
/* The byte limit the tests set: exactly eight vectors. */
#define LIMIT_BYTES (8 * VBYTES)
/* Longest chain of additions one burst queues. */
#define MAX_CHAIN 16
/* How long the test waits for a counter or a state it polls for. */
#define WAIT_MS 30000

/* ---- daemons ---- */

/* The number of items still queued on the stream of client `id`, or UINT64_MAX when not listed. */
static uint64_t client_queued(const th_daemon *d, uint64_t id) {
    Tenferro__Frame *r = th_status_report(d);
    uint64_t queued = UINT64_MAX;
    for (size_t i = 0; r && i < r->status_reply->n_clients; i++)
        if (r->status_reply->clients[i]->client_id == id)
            queued = r->status_reply->clients[i]->queued_items;
    tf__frame_free(r);
    return queued;
}

/* Waits until nothing is queued on client c's stream, so a queue count starts from zero. */
static void wait_stream_idle(const th_daemon *d, tf_client *c) {
    for (int waited = 0; waited < WAIT_MS; waited += 5) {
        if (client_queued(d, tf_client_id(c)) == 0) return;
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
    ck_abort_msg("client %llu's stream did not drain", (unsigned long long)tf_client_id(c));
}

/* ---- data and work ---- */

/* Uploads an f64 vector of VLEN elements. */
static tf_status upload_vec(tf_client *c, const double *data, tf_tensor *out) {
    int64_t shape[1] = {VLEN};
    return tf_upload(c, TF_F64, 1, shape, data, out);
}

/* Uploads `n` f64 vectors of VLEN elements from `data` into t[]; returns the first failure. */
static tf_status upload_many(tf_client *c, const double *data, int n, tf_tensor *t) {
    for (int i = 0; i < n; i++) {
        tf_status st = upload_vec(c, data, &t[i]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* A chain of additions: out[0] = a + b, out[k] = out[k-1] + b. */
typedef struct chain {
    tf_tensor a, b;
    int n;
    tf_tensor out[MAX_CHAIN];
} chain;

/* Session callback: queues the chain. */
static tf_status queue_chain(tf_view *v, void *arg) {
    chain *ch = arg;
    for (int k = 0; k < ch->n; k++) {
        tf_status st = tf_view_add(v, k ? ch->out[k - 1] : ch->a, ch->b, &ch->out[k]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* Runs an n-long chain from a and b as one scoped burst. */
static tf_status run_chain(tf_client *c, chain *ch, tf_tensor a, tf_tensor b, int n) {
    ch->a = a;
    ch->b = b;
    ch->n = n;
    return tf_with_session(c, queue_chain, ch);
}

/*
 * 1 when out[from .. n) of the chain hold a + (k+1) b, computed here in the
 * same order (so the sums round the same way), within the f64 tolerance.
 */
static int chain_correct(tf_client *c, const chain *ch, int from, int n, const double *a,
                         const double *b) {
    double *ref = malloc(VBYTES);
    void *got = NULL;
    size_t cap = 0;
    int ok = ref != NULL;
    if (ok) memcpy(ref, a, VBYTES);
    for (int k = 0; ok && k < n; k++) {
        for (size_t i = 0; i < VLEN; i++) ref[i] += b[i];
        if (k < from) continue;
        ok = tf_download_into(c, ch->out[k], &got, &cap) == TF_OK &&
             th_max_rel_diff(TF_F64, VLEN, got, ref, 1e-3) <= th_tolerance(TF_F64);
        if (!ok)
            fprintf(stderr, "chain output %d is wrong or unreadable: %s\n", k,
                    tf_client_last_error(c));
    }
    free(ref);
    free(got);
    return ok;
}

/* 1 when out[from .. to) of the chain are unknown handles (never created). */
static int chain_unknown(tf_client *c, const chain *ch, int from, int to) {
    for (int k = from; k < to; k++) {
        void *data = NULL;
        size_t bytes = 0;
        if (tf_download(c, ch->out[k], &data, &bytes) != TF_ERR_UNKNOWN_HANDLE) {
            free(data);
            fprintf(stderr, "chain output %d exists although its operation was refused\n", k);
            return 0;
        }
    }
    return 1;
}

/* 1 when the client's last error contains `needle` (reported on stderr otherwise). */
static int error_says(tf_client *c, const char *needle) {
    if (strstr(tf_client_last_error(c), needle)) return 1;
    fprintf(stderr, "error \"%s\" does not say \"%s\"\n", tf_client_last_error(c), needle);
    return 0;
}

/* Two random input vectors, shared by parent and children (made before forking). */
static double *in_a, *in_b;

static void make_inputs(void) {
    in_a = malloc(VBYTES);
    in_b = malloc(VBYTES);
    ck_assert(in_a && in_b);
    th_fill_random(TF_F64, VLEN, in_a);
    th_fill_random(TF_F64, VLEN, in_b);
}

static void free_inputs(void) {
    free(in_a);
    free(in_b);
}

/* ---- several clients under a per-client limit ---- */

/* What a client process of the first test does. */
typedef struct worker {
    const th_daemon *d;
    int go;    /* read end of a pipe whose write end the parent closes: "start" */
    int go_wr; /* its write end, closed at once in the child */
    int chain; /* operations the client runs */
} worker;

/*
 * A client process: uploads a and b, waits for the start, runs its chain as
 * one scoped burst. Within its limit (2 + chain <= 8 vectors) every result
 * must be correct; over it, the burst stops with TF_ERR_QUOTA at the first
 * operation that does not fit, whose index and later outputs are checked, and
 * after freeing two results the next operation fits again.
 */
static int client_process(void *arg) {
    worker *w = arg;
    th_die_with_parent();
    close(w->go_wr);
    tf_client *c = th_connect(w->d);
    tf_tensor a, b;
    CHILD_STATUS(c, upload_vec(c, in_a, &a), TF_OK);
    CHILD_STATUS(c, upload_vec(c, in_b, &b), TF_OK);
    char byte;
    CHILD_CHECK(read(w->go, &byte, 1) == 0); /* EOF: the parent let everyone go */
    chain ch;
    int fits = (int)(LIMIT_BYTES / VBYTES) - 2;
    if (w->chain <= fits) {
        CHILD_STATUS(c, run_chain(c, &ch, a, b, w->chain), TF_OK);
        CHILD_CHECK(chain_correct(c, &ch, 0, w->chain, in_a, in_b));
    } else {
        CHILD_STATUS(c, run_chain(c, &ch, a, b, w->chain), TF_ERR_QUOTA);
        CHILD_CHECK(tf_client_failed_index(c) == fits);
        CHILD_CHECK(error_says(c, "client quota: device_bytes 1048576 would be exceeded"));
        CHILD_CHECK(error_says(c, "(using 1048576, asking 131072)"));
        CHILD_CHECK(chain_correct(c, &ch, 0, fits, in_a, in_b));
        CHILD_CHECK(chain_unknown(c, &ch, fits, w->chain));
        /* Freeing gives the room back: the refused operation now fits, and only it. */
        CHILD_STATUS(c, tf_tensor_free(c, ch.out[0]), TF_OK);
        chain more;
        CHILD_STATUS(c, run_chain(c, &more, ch.out[fits - 1], b, 2), TF_ERR_QUOTA);
        CHILD_CHECK(tf_client_failed_index(c) == 1);
        ch.out[fits] = more.out[0];
        CHILD_CHECK(chain_correct(c, &ch, 1, fits + 1, in_a, in_b));
    }
    tf_disconnect(c);
    return 0;
}

START_TEST(test_client_quota_stops_only_the_greedy_client) {
    th_daemon d;
    CK_DAEMON_START(&d, "--client-device-bytes", "1M");
    make_inputs();
    int go[2];
    ck_assert(pipe(go) == 0);
    /* Two clients within the limit (4 and 6 results), one asking for 10. */
    worker w[3] = {{&d, go[0], go[1], 4}, {&d, go[0], go[1], 10}, {&d, go[0], go[1], 6}};
    pid_t pid[3];
    for (int i = 0; i < 3; i++) pid[i] = th_spawn(client_process, &w[i]);
    /* Everyone holds its inputs (6 vectors, 768 KiB together) before anyone computes. */
    CK_COUNTER(&d, "tensors_created", 6, WAIT_MS);
    close(go[1]);
    for (int i = 0; i < 3; i++) {
        int rc = th_wait(pid[i]);
        ck_assert_msg(rc == 0, "client %d (chain of %d) exited with %d (see above)", i,
                      w[i].chain, rc);
    }
    close(go[0]);
    ck_assert_uint_eq(th_counter(&d, "quota_refusals"), 2);
    CK_COUNTER(&d, "device_bytes_live", 0, WAIT_MS);
    free_inputs();
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- per uid ---- */

START_TEST(test_uid_quota_spans_connections) {
    th_daemon d;
    CK_DAEMON_START(&d, "--uid-device-bytes", "1M");
    make_inputs();
    tf_client *c1 = th_connect(&d), *c2 = th_connect(&d);
    tf_tensor t1[5], t2[4];
    /* Five vectors on one connection and three on the other: exactly the uid's limit. */
    CK_STATUS(c1, upload_many(c1, in_a, 5, t1), TF_OK);
    CK_STATUS(c2, upload_many(c2, in_b, 3, t2), TF_OK);
    /* Neither connection is near a limit of its own, but the uid is full. */
    CK_STATUS(c2, upload_vec(c2, in_a, &t2[3]), TF_ERR_QUOTA);
    char want[128];
    snprintf(want, sizeof want, "uid %u quota: device_bytes 1048576 would be exceeded",
             (unsigned)getuid());
    ck_assert_msg(error_says(c2, want), "refusal does not name the uid limit");
    ck_assert(error_says(c2, "using 1048576 over 2 connections, asking 131072"));
    chain ch;
    CK_STATUS(c2, run_chain(c2, &ch, t2[0], t2[1], 1), TF_ERR_QUOTA);
    ck_assert_int_eq(tf_client_failed_index(c2), 0);
    /* The other connection of the uid frees a vector: the second connection's request now fits. */
    uint64_t freed = th_counter(&d, "tensors_freed");
    CK_STATUS(c1, tf_tensor_free(c1, t1[4]), TF_OK);
    CK_COUNTER(&d, "tensors_freed", freed + 1, WAIT_MS);
    CK_STATUS(c2, run_chain(c2, &ch, t2[0], t2[1], 1), TF_OK);
    ck_assert(chain_correct(c2, &ch, 0, 1, in_b, in_b));
    tf_disconnect(c1);
    tf_disconnect(c2);
    free_inputs();
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- live tensors, per client (_i = 0) and per uid (_i = 1) ---- */

START_TEST(test_live_tensors_quota) {
    th_daemon d;
    const char *flag = _i == 0 ? "--client-live-tensors" : "--uid-live-tensors";
    CK_DAEMON_START(&d, flag, "4");
    make_inputs();
    tf_client *c = th_connect(&d);
    tf_tensor a, b;
    CK_STATUS(c, upload_vec(c, in_a, &a), TF_OK);
    CK_STATUS(c, upload_vec(c, in_b, &b), TF_OK);
    chain ch;
    CK_STATUS(c, run_chain(c, &ch, a, b, 3), TF_ERR_QUOTA);
    ck_assert_int_eq(tf_client_failed_index(c), 2);
    char want[128];
    if (_i == 0)
        snprintf(want, sizeof want,
                 "client quota: live_tensors 4 would be exceeded (using 4, asking 1)");
    else
        snprintf(want, sizeof want,
                 "uid %u quota: live_tensors 4 would be exceeded (using 4 over 1 connection, "
                 "asking 1)",
                 (unsigned)getuid());
    ck_assert(error_says(c, want));
    ck_assert(chain_correct(c, &ch, 0, 2, in_a, in_b));
    ck_assert(chain_unknown(c, &ch, 2, 3));
    /* An upload is a live tensor too. */
    tf_tensor extra;
    CK_STATUS(c, upload_vec(c, in_a, &extra), TF_ERR_QUOTA);
    CK_STATUS(c, tf_tensor_free(c, ch.out[0]), TF_OK);
    CK_STATUS(c, upload_vec(c, in_a, &extra), TF_OK);
    tf_disconnect(c);
    free_inputs();
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- queued operations ---- */

START_TEST(test_queued_ops_quota) {
    th_daemon d;
    CK_DAEMON_START(&d, "--client-queued-ops", "8");
    make_inputs();
    tf_client *c = th_connect(&d);
    tf_tensor a, b;
    CK_STATUS(c, upload_vec(c, in_a, &a), TF_OK);
    CK_STATUS(c, upload_vec(c, in_b, &b), TF_OK);
    wait_stream_idle(&d, c);
    /* Nothing is queued: a burst of 12 may carry 8 operations, the 9th would exceed the limit. */
    chain ch;
    CK_STATUS(c, run_chain(c, &ch, a, b, 12), TF_ERR_QUOTA);
    ck_assert_int_eq(tf_client_failed_index(c), 8);
    ck_assert(error_says(c, "client quota: queued_ops 8 would be exceeded (using 0, asking 9)"));
    ck_assert(chain_correct(c, &ch, 0, 8, in_a, in_b));
    ck_assert(chain_unknown(c, &ch, 8, 12));
    /* Once the queue has run, the next burst of 8 fits again. */
    wait_stream_idle(&d, c);
    chain more;
    CK_STATUS(c, run_chain(c, &more, a, b, 8), TF_OK);
    ck_assert(chain_correct(c, &more, 0, 8, in_a, in_b));
    tf_disconnect(c);
    free_inputs();
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- uploads ---- */

START_TEST(test_upload_over_quota_allocates_nothing) {
    th_daemon d;
    CK_DAEMON_START(&d, "--client-device-bytes", "1M");
    tf_client *c = th_connect(&d);
    /* 768 KiB, then 512 KiB more would make 1.25 MiB. */
    int64_t big_shape[1] = {6 * VLEN}, half_shape[1] = {4 * VLEN};
    double *big = calloc(6 * VLEN, sizeof *big), *half = malloc(4 * VBYTES);
    ck_assert(big && half);
    th_fill_random(TF_F64, 4 * VLEN, half);
    tf_tensor t_big, t_half;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, big_shape, big, &t_big), TF_OK);
    uint64_t created = th_counter(&d, "tensors_created");
    uint64_t live = th_counter(&d, "device_bytes_live");
    uint64_t allocations = th_counter(&d, "device_allocations_live");
    CK_STATUS(c, tf_upload(c, TF_F64, 1, half_shape, half, &t_half), TF_ERR_QUOTA);
    ck_assert(error_says(c, "client quota: device_bytes 1048576 would be exceeded (using 786432, "
                            "asking 524288); raise [quota.client] device_bytes or free tensors"));
    /* Nothing was allocated or created for the refused upload. */
    ck_assert_uint_eq(th_counter(&d, "tensors_created"), created);
    ck_assert_uint_eq(th_counter(&d, "device_bytes_live"), live);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations);
    size_t bytes;
    CK_STATUS(c, tf_tensor_bytes(c, t_half, &bytes), TF_ERR_UNKNOWN_HANDLE);
    /* After freeing the first tensor the same upload is accepted, with its data. */
    CK_STATUS(c, tf_tensor_free(c, t_big), TF_OK);
    CK_STATUS(c, tf_upload(c, TF_F64, 1, half_shape, half, &t_half), TF_OK);
    void *got = NULL;
    CK_STATUS(c, tf_download(c, t_half, &got, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, 4 * VBYTES);
    ck_assert(memcmp(got, half, bytes) == 0);
    free(got);
    free(big);
    free(half);
    tf_disconnect(c);
    CK_COUNTER(&d, "device_bytes_live", 0, WAIT_MS);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * The bounds in force with no configuration at all are finite where each
 * object costs the daemon host memory (tensors, queued operations), and on
 * the CPU backend the device's memory (the host's) is half the physical
 * memory: tensors past it are refused TF_ERR_NO_MEMORY for the client that
 * asks, where overcommit would let the OOM killer end the daemon. The 1 GiB
 * tensors are created empty (tf_zeros fills them only when read), so the
 * test takes address space, not memory.
 */
START_TEST(test_default_bounds) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    Tenferro__Frame *r = th_status_report(&d);
    ck_assert_ptr_nonnull(r);
    const Tenferro__Quota *cq = r->status_reply->client_quota, *uq = r->status_reply->uid_quota;
    ck_assert_ptr_nonnull(cq);
    ck_assert_ptr_nonnull(uq);
    ck_assert_uint_eq(cq->live_tensors, 262144);
    ck_assert_uint_eq(cq->queued_ops, 131072);
    ck_assert_uint_eq(uq->live_tensors, 1048576);
    ck_assert_uint_eq(uq->queued_ops, 262144);
    tf__frame_free(r);
    if (strncmp(th_device(), "cpu", 3) != 0) {
        CK_DAEMON_STOP(&d);
        return;
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const uint64_t half = (uint64_t)pages * (uint64_t)page / 2, gib = (uint64_t)1 << 30;
    tf_client *c = th_connect(&d);
    enum { MAX_BIG = 4096 };
    static tf_tensor big[MAX_BIG];
    int n = 0;
    tf_status st = TF_OK;
    const int64_t shape[1] = {(int64_t)(gib / sizeof(double))};
    while (n < MAX_BIG && (st = tf_zeros(c, TF_F64, 1, shape, &big[n])) == TF_OK) n++;
    ck_assert_msg(st == TF_ERR_NO_MEMORY, "tensor %d of 1 GiB: %s (%s)", n, tf_status_name(st),
                  tf_client_last_error(c));
    ck_assert_msg((uint64_t)n * gib <= half && (uint64_t)(n + 2) * gib > half,
                  "%d tensors of 1 GiB were accepted against half the memory, %llu bytes", n,
                  (unsigned long long)half);
    /* Refused to this client only, and nothing is lost: a small tensor fits, and reads back. */
    make_inputs();
    tf_client *other = th_connect(&d);
    tf_tensor small;
    CK_STATUS(other, upload_vec(other, in_a, &small), TF_OK);
    void *back = NULL;
    size_t got = 0;
    CK_STATUS(other, tf_download(other, small, &back, &got), TF_OK);
    ck_assert_int_eq(memcmp(back, in_a, VBYTES), 0);
    free(back);
    tf_disconnect(other);
    free_inputs();
    for (int i = 0; i < n; i++) CK_STATUS(c, tf_tensor_free(c, big[i]), TF_OK);
    tf_disconnect(c);
    CK_COUNTER(&d, "device_bytes_live", 0, WAIT_MS);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *quotas_suite(void) {
    Suite *s = suite_create("quotas");
    TCase *tc = tcase_create("quotas");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_client_quota_stops_only_the_greedy_client);
    tcase_add_test(tc, test_uid_quota_spans_connections);
    tcase_add_loop_test(tc, test_live_tensors_quota, 0, 2);
    tcase_add_test(tc, test_queued_ops_quota);
    tcase_add_test(tc, test_upload_over_quota_allocates_nothing);
    tcase_add_test(tc, test_default_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    th_seed();
    SRunner *sr = srunner_create(quotas_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
