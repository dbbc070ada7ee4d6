/*
 * Rules of the wire a client written from proto/tenferro.proto relies on
 * (docs/protocol.md): TensorInfo answers a tensor's dtype, shape and size,
 * and only for the asking connection's tensors; sequence number 0 is the
 * daemon's, and a request carrying it ends the connection with a last word;
 * tensor data is little-endian, row-major, complex as interleaved pairs.
 */
#include <check.h>
#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static uint64_t g_seq = 1; /* the Hello was 1 */

/* Sends an Upload creating tensor id of dtype and shape with the given bytes; asserts OK. */
static void upload_raw(int fd, uint64_t id, tf_dtype dtype, int rank, int64_t *shape,
                       const void *data, size_t bytes) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 1, dtype, rank, shape, 0, data, bytes);
    f.seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    CK_EXPECT_RESULT(th_raw_recv(fd, 10000), TF_OK, NULL);
}

/* Asks TensorInfo of tensor id; returns the reply (caller frees). */
static Tenferro__Frame *info_raw(int fd, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__TensorInfo ti = TENFERRO__TENSOR_INFO__INIT;
    ti.tensor = id;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_TENSOR_INFO;
    f.tensor_info = &ti;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, 10000);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY);
    ck_assert_uint_eq(r->seq, f.seq);
    return r;
}

START_TEST(test_tensor_info) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    int fd = th_raw_connect(&d), other = th_raw_connect(&d);
    tf__frame_free(th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION));
    tf__frame_free(th_raw_hello(other, TENFERRO__PROTOCOL__PROTOCOL_VERSION));
    int64_t shape[3] = {2, 3, 5};
    static double complex z[30];
    th_fill_random(TF_C128, 30, z);
    upload_raw(fd, 41, TF_C128, 3, shape, z, sizeof z);
    Tenferro__Frame *r = info_raw(fd, 41);
    Tenferro__TensorInfoReply *ti = r->tensor_info_reply;
    ck_assert_int_eq(ti->result->status, TF_OK);
    ck_assert_uint_eq(ti->dtype, TENFERRO__DTYPE__TF_C128);
    ck_assert_uint_eq(ti->n_shape, 3);
    for (int a = 0; a < 3; a++) ck_assert_int_eq(ti->shape[a], shape[a]);
    ck_assert_uint_eq(ti->bytes, sizeof z);
    ck_assert_int_eq(ti->in_transfer, 0);
    tf__frame_free(r);
    /* Another connection does not see it; an unknown id is typed the same. */
    g_seq = 1;
    r = info_raw(other, 41);
    ck_assert_int_eq(r->tensor_info_reply->result->status, TF_ERR_UNKNOWN_HANDLE);
    tf__frame_free(r);
    g_seq = 3;
    r = info_raw(fd, 999);
    ck_assert_int_eq(r->tensor_info_reply->result->status, TF_ERR_UNKNOWN_HANDLE);
    tf__frame_free(r);
    close(fd);
    close(other);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* The layout of tensor data: row-major, little-endian, complex as {re, im}. */
START_TEST(test_data_layout) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    tf_client *c = th_connect(&d);
    int fd = th_raw_connect(&d);
    tf__frame_free(th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION));
    g_seq = 1;
    /* [[1+2i, 3+4i], [5+6i, 7+8i]] as the wire carries it, transposed by the daemon. */
    const double bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t shape[2] = {2, 2};
    upload_raw(fd, 7, TF_C128, 2, shape, bytes, sizeof bytes);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    th_raw_build_download(&f, &dl, 7, sizeof(double) * 2, sizeof(double) * 2);
    f.seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, 10000);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    ck_assert_uint_eq(r->download_reply->data.len, 16);
    double got[2];
    memcpy(got, r->download_reply->data.data, 16);
    /* Element [0][1]: the second pair, re then im. */
    ck_assert(got[0] == 3.0 && got[1] == 4.0);
    tf__frame_free(r);
    close(fd);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* A request with sequence number 0 ends its connection with a typed last word; others go on. */
START_TEST(test_sequence_zero_refused) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    tf_client *bystander = th_connect(&d);
    int fd = th_raw_connect(&d);
    tf__frame_free(th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION));
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    f.seq = 0;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &sr;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, 10000);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->seq, 0);
    CK_EXPECT_RESULT(r, TF_ERR_PROTOCOL, "sequence number 0");
    ck_assert(th_raw_closed(fd, 5000));
    close(fd);
    tf_daemon_status *s = NULL;
    CK_STATUS(bystander, tf_daemon_status_get(bystander, &s), TF_OK);
    tf_daemon_status_free(s);
    tf_disconnect(bystander);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tensor_info);
    tcase_add_test(tc, test_data_layout);
    tcase_add_test(tc, test_sequence_zero_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
