/*
 * Dispatch of one operation to a backend's family entry.
 *
 * Every backend groups its kernels into six families (binary, unary, axpby,
 * permute, reduce, matmul) so that a vtable stays small and a new operation
 * kind usually only touches one kernel file; fault injection (tests only)
 * has an entry of its own. This file is the single place that maps an
 * operation kind to its family, shared by every backend, and the one place
 * that stops every operation once the device is lost.
 */
#include <stdio.h>

#include "daemon/backend/backend.h"

/* The common signature of the six family entries. */
typedef tf_status (*family_fn)(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                               size_t msg_len);

/* Keeps the kind-to-family table in one switch, so a backend only ever sees its own families. */
static family_fn family_of(const tfd_backend_vtable *vt, tf__op_kind kind) {
    switch (kind) {
    case TF__OP_ADD:
    case TF__OP_SUB:
    case TF__OP_MUL:
    case TF__OP_DIV:
        return vt->binary;
    case TF__OP_NEG:
    case TF__OP_CONJ:
    case TF__OP_ABS:
    case TF__OP_EXP:
    case TF__OP_LOG:
    case TF__OP_SQRT:
        return vt->unary;
    case TF__OP_SCALE:
    case TF__OP_AXPBY:
        return vt->axpby;
    case TF__OP_PERMUTE:
    case TF__OP_RESHAPE:
    case TF__OP_COPY:
        return vt->permute;
    case TF__OP_REDUCE_SUM:
    case TF__OP_REDUCE_MAX:
    case TF__OP_REDUCE_MIN:
        return vt->reduce;
    case TF__OP_MATMUL:
        return vt->matmul;
    case TF__OP_TEST_FAULT:
        return vt->inject_fault;
    case TF__OP_CONTRACT:
        return vt->contract;
    case TF__OP_FFT:
        return vt->fft;
    case TF__OP_NONE:
    case TF__OP_FREE:
    case TF__OP_RUN_PREPARED: /* the executor runs a prepared graph's nodes itself */
    case TF__OP_KIND_COUNT:
        break;
    }
    return NULL;
}

/* A kind no family serves is refused with a message instead of reaching a kernel. */
tf_status tfd_backend_run_op(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len) {
    if (be == NULL || be->vt == NULL || op == NULL) {
        snprintf(msg, msg_len, "run_op: no backend or no operation given");
        return TF_ERR_INTERNAL;
    }
    /* A lost device computes nothing more: no result after the fault could be trusted. */
    char why[192];
    if (be->vt->health && be->vt->health(be, why, sizeof why) != TF_OK) {
        snprintf(msg, msg_len, "%s: the device was lost earlier and runs nothing more: %s",
                 be->vt->name ? be->vt->name : "?", why);
        return TF_ERR_DEVICE;
    }
    family_fn fn = family_of(be->vt, op->kind);
    if (fn == NULL) {
        snprintf(msg, msg_len, "%s backend does not run operation kind %d (%s)",
                 be->vt->name ? be->vt->name : "?", (int)op->kind, tf__op_name(op->kind));
        return TF_ERR_UNSUPPORTED;
    }
    return fn(be, stream, op, msg, msg_len);
}
