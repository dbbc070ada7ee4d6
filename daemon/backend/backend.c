/*
 * Dispatch of one operation to a backend's family entry.
 *
 * Every backend groups its kernels into families (binary, unary, axpby,
 * permute, reduce, matmul, contract, fft) so that a vtable stays small and a
 * new operation kind only touches its family's kernel files; fault injection
 * (tests only) has an entry of its own. The kind-to-family map is the
 * operation table's family column (common/op-table.h), read here for every
 * backend; this is also the one place that stops every operation once the
 * device is lost.
 */
#include <stdio.h>

#include "daemon/backend/backend.h"

/* The common signature of the family entries. */
typedef tf_status (*family_fn)(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                               size_t msg_len);

/* The family entry of each kind, from the operation table's family column (common/op-table.h). */
#define FAMILY_none(vt) NULL
#define FAMILY_binary(vt) (vt)->binary
#define FAMILY_unary(vt) (vt)->unary
#define FAMILY_axpby(vt) (vt)->axpby
#define FAMILY_permute(vt) (vt)->permute
#define FAMILY_reduce(vt) (vt)->reduce
#define FAMILY_matmul(vt) (vt)->matmul
#define FAMILY_inject_fault(vt) (vt)->inject_fault
#define FAMILY_contract(vt) (vt)->contract
#define FAMILY_fft(vt) (vt)->fft
/* Linear algebra has several outputs and its own entry (tfd_backend_run_linalg). */
#define FAMILY_linalg(vt) NULL

/* Keeps the kind-to-family map in the table, so a backend only ever sees its own families. */
static family_fn family_of(const tfd_backend_vtable *vt, tf__op_kind kind) {
    switch ((int)kind) {
#define FAMILY_CASE(KIND, name, number, arity, shape, dtype, family) \
    case TF__OP_##KIND:                                              \
        return FAMILY_##family(vt);
        TF__OP_LIST(FAMILY_CASE)
#undef FAMILY_CASE
    }
    return NULL;
}

/* A lost device computes nothing more: no result after the fault could be trusted. */
static tf_status check_health(tfd_backend *be, char *msg, size_t msg_len) {
    char why[192];
    if (be->vt->health && be->vt->health(be, why, sizeof why) != TF_OK) {
        snprintf(msg, msg_len, "%s: the device was lost earlier and runs nothing more: %s",
                 be->vt->name ? be->vt->name : "?", why);
        return TF_ERR_DEVICE;
    }
    return TF_OK;
}

/* A kind no family serves is refused with a message instead of reaching a kernel. */
tf_status tfd_backend_run_op(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len) {
    if (be == NULL || be->vt == NULL || op == NULL) {
        snprintf(msg, msg_len, "run_op: no backend or no operation given");
        return TF_ERR_INTERNAL;
    }
    tf_status st = check_health(be, msg, msg_len);
    if (st != TF_OK) return st;
    family_fn fn = family_of(be->vt, op->kind);
    if (fn == NULL) {
        snprintf(msg, msg_len, "%s backend does not run operation kind %d (%s)",
                 be->vt->name ? be->vt->name : "?", (int)op->kind, tf__op_name(op->kind));
        return TF_ERR_UNSUPPORTED;
    }
    return fn(be, stream, op, msg, msg_len);
}

tf_status tfd_backend_run_linalg(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                                 size_t msg_len) {
    if (be == NULL || be->vt == NULL || op == NULL) {
        snprintf(msg, msg_len, "run_linalg: no backend or no operation given");
        return TF_ERR_INTERNAL;
    }
    tf_status st = check_health(be, msg, msg_len);
    if (st != TF_OK) return st;
    if (!be->vt->linalg) {
        snprintf(msg, msg_len, "%s backend does not run linear algebra (%s)",
                 be->vt->name ? be->vt->name : "?", tf__op_name(op->kind));
        return TF_ERR_UNSUPPORTED;
    }
    return be->vt->linalg(be, stream, op, msg, msg_len);
}
