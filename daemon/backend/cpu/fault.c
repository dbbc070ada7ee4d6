/*
 * Fault injection and device health of the CPU backend.
 *
 * Host memory cannot fault the way a GPU does, so the fault-injection
 * operation (OP_TEST_FAULT, served only when the daemon runs with
 * --test-fault-injection) declares the device lost instead: from then on
 * health() reports TF_ERR_DEVICE with the reason, exactly as the CUDA
 * backend does once a kernel fault has poisoned its context, and the daemon
 * takes the same path (every client told, exit 1 for the service manager to
 * restart it). That is what lets the end-to-end test of a lost device run on
 * machines without a GPU. Like a CUDA context, the state is the process's:
 * a lost device stays lost until the daemon restarts. (The daemon logs the
 * loss; this file logs nothing, so the in-process benchmark baselines that
 * link the CPU backend alone need no logger.)
 */
#include <stdatomic.h>
#include <stdio.h>

#include "daemon/backend/cpu/kernels.h"

static atomic_int lost_claimed;
static atomic_int lost;
static char lost_reason[256];

tf_status tfd_cpu_inject_fault(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                               size_t msg_len) {
    (void)be;
    (void)stream;
    (void)op;
    int expected = 0;
    if (atomic_compare_exchange_strong(&lost_claimed, &expected, 1)) {
        snprintf(lost_reason, sizeof lost_reason,
                 "cpu: injected device fault (test_fault, --test-fault-injection); the cpu backend "
                 "reports its device lost as a CUDA context poisoned by a kernel fault would");
        atomic_store(&lost, 1);
    }
    snprintf(msg, msg_len, "%s", lost_reason);
    return TF_ERR_DEVICE;
}

tf_status tfd_cpu_health(tfd_backend *be, char *msg, size_t msg_len) {
    (void)be;
    if (!atomic_load(&lost)) return TF_OK;
    snprintf(msg, msg_len, "%s", lost_reason);
    return TF_ERR_DEVICE;
}
