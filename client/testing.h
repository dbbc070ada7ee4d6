/*
 * Test-only entry points of libtenferro-client. This header is not
 * installed and the functions are not exported from the shared library (no
 * TF_EXTERN): only programs built from this source tree that link the static
 * library (the integration tests) can call them. They are no part of the
 * public API, and tenferrod serves what they send only when it was started
 * for tests.
 */
#ifndef TENFERRO_CLIENT_TESTING_H
#define TENFERRO_CLIENT_TESTING_H

#include "tenferro/tenferro.h"

/*
 * Queues the fault-injection operation (OP_TEST_FAULT) on `input` in the
 * view's session, like any operation: *out is its output's handle. A daemon
 * started with --test-fault-injection ([testing] fault_injection = true)
 * makes its device fault when it runs it, and then declares the device lost
 * (docs/cuda.md); any other daemon refuses it at the submission with
 * TF_ERR_UNSUPPORTED, naming the flag.
 */
tf_status tf__test_inject_fault(tf_view *view, tf_tensor input, tf_tensor *out);

#endif
