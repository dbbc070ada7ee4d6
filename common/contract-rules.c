/*
 * The shape rules of a contraction (OP_CONTRACT, proto Contraction).
 *
 * Both sides run them: the client library when it queues a contraction, the
 * daemon again on every one it receives, so a label list that does not fit
 * its tensor, a label bound to two sizes or an output label that no input
 * carries is refused with a typed status before anything is planned or
 * allocated. Like the other shape rules they are pure functions of metadata.
 * Descriptor mistakes (input count, label values, the output's label list)
 * are TF_ERR_INVALID_ARGUMENT; a descriptor that disagrees with the tensors'
 * shapes is TF_ERR_SHAPE; mixed dtypes are TF_ERR_DTYPE (no promotion).
 */
#include <stdio.h>
#include <string.h>

#include "common/ops.h"

/* Checks one input's labels against its tensor and binds each label to its size. */
static tf_status bind_input(const tf__contraction *c, int i, const tf__meta *in,
                            int64_t size_of[TF__MAX_LABELS], int where[TF__MAX_LABELS][2],
                            char *msg, size_t msg_len) {
    tf_status st = tf__check_new_meta(in->dtype, in->rank, in->shape, msg, msg_len);
    if (st != TF_OK) return st;
    if (c->rank[i] != in->rank) {
        snprintf(msg, msg_len, "contract: input %d has rank %d but its descriptor gives %d labels",
                 i, in->rank, c->rank[i]);
        return TF_ERR_SHAPE;
    }
    for (int ax = 0; ax < in->rank; ax++) {
        const unsigned label = c->labels[i][ax];
        if (label >= TF__MAX_LABELS) {
            snprintf(msg, msg_len, "contract: label %u of input %d axis %d: labels are 0..%d",
                     label, i, ax, TF__MAX_LABELS - 1);
            return TF_ERR_INVALID_ARGUMENT;
        }
        if (size_of[label] == 0) {
            size_of[label] = in->shape[ax];
            where[label][0] = i;
            where[label][1] = ax;
        } else if (size_of[label] != in->shape[ax]) {
            snprintf(msg, msg_len,
                     "contract: label %u has size %lld at input %d axis %d but %lld at input %d "
                     "axis %d",
                     label, (long long)size_of[label], where[label][0], where[label][1],
                     (long long)in->shape[ax], i, ax);
            return TF_ERR_SHAPE;
        }
    }
    return TF_OK;
}

tf_status tf__infer_contract(const tf__contraction *c, const tf__meta *in, tf__meta *out,
                             char *msg, size_t msg_len) {
    if (c == NULL || in == NULL || out == NULL) {
        snprintf(msg, msg_len, "contract: no descriptor, inputs or output given");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (c->n_inputs != 1 && c->n_inputs != 2) {
        snprintf(msg, msg_len, "contract takes 1 or 2 inputs, got %d", c->n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    int64_t size_of[TF__MAX_LABELS] = {0}; /* 0: the label is on no axis (sizes are >= 1) */
    int where[TF__MAX_LABELS][2] = {{0}};
    for (int i = 0; i < c->n_inputs; i++) {
        tf_status st = bind_input(c, i, &in[i], size_of, where, msg, msg_len);
        if (st != TF_OK) return st;
    }
    if (c->n_inputs == 2 && in[0].dtype != in[1].dtype) {
        snprintf(msg, msg_len, "contract: dtypes differ (%s and %s); convert one first",
                 tf_dtype_name(in[0].dtype), tf_dtype_name(in[1].dtype));
        return TF_ERR_DTYPE;
    }
    if (c->out_rank < 0 || c->out_rank > TF_MAX_RANK) {
        snprintf(msg, msg_len, "contract: the output has %d labels, at most %d are allowed",
                 c->out_rank, TF_MAX_RANK);
        return TF_ERR_INVALID_ARGUMENT;
    }
    uint64_t seen = 0;
    for (int j = 0; j < c->out_rank; j++) {
        const unsigned label = c->out[j];
        if (label >= TF__MAX_LABELS) {
            snprintf(msg, msg_len, "contract: output label %u (axis %d): labels are 0..%d", label,
                     j, TF__MAX_LABELS - 1);
            return TF_ERR_INVALID_ARGUMENT;
        }
        if (size_of[label] == 0) {
            snprintf(msg, msg_len, "contract: output label %u (axis %d) is on no input axis",
                     label, j);
            return TF_ERR_INVALID_ARGUMENT;
        }
        if (seen & ((uint64_t)1 << label)) {
            snprintf(msg, msg_len, "contract: output label %u appears twice in the output", label);
            return TF_ERR_INVALID_ARGUMENT;
        }
        seen |= (uint64_t)1 << label;
    }
    tf__meta o;
    memset(&o, 0, sizeof o);
    o.dtype = in[0].dtype;
    o.rank = c->out_rank;
    for (int j = 0; j < c->out_rank; j++) o.shape[j] = size_of[c->out[j]];
    char why[200];
    tf_status st = tf__check_new_meta(o.dtype, o.rank, o.shape, why, sizeof why);
    if (st != TF_OK) {
        snprintf(msg, msg_len, "contract: the output would be too large: %s", why);
        return st;
    }
    *out = o;
    return TF_OK;
}
