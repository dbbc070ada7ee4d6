/*
 * Test-only entry points of libtenferro-client (client/testing.h): the
 * operations a test needs and a user never should, queued like any other.
 */
#include "client/internal.h"
#include "client/testing.h"

tf_status tf__test_inject_fault(tf_view *v, tf_tensor input, tf_tensor *out) {
    const tf_scalar zero = {0, 0};
    return tf__queue_op(v, TF__OP_TEST_FAULT, 1, &input, 0, NULL, 0, zero, zero, out);
}
