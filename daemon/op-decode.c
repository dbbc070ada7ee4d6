/* Wire operations into tfd_op: decoding and the shape rules (see op-decode.h). */
#include <stdio.h>
#include <string.h>

#include "daemon/op-decode.h"

/* The kinds' numbers are checked against the proto's in common/op-table.c. */

/*
 * OP_CONTRACT's descriptor (Op.contraction) taken into *c, with what
 * tf__contraction cannot hold refused first (a label that does not fit its
 * byte, more labels than axes a tensor can have); the rules proper run
 * against the tensors later (tf__infer_contract).
 */
static tf_status take_contraction(const Tenferro__Op *op, tf__contraction *c, char *msg,
                                  size_t len) {
    const Tenferro__Contraction *d = op->contraction;
    if (!d) {
        snprintf(msg, len, "contract: the operation carries no descriptor (Op.contraction)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if ((op->n_inputs != 1 && op->n_inputs != 2) || (op->n_inputs == 1 && d->n_labels_b)) {
        snprintf(msg, len, "contract takes 1 or 2 inputs (labels_b empty with one), got %zu inputs",
                 op->n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    static const char *const names[3] = {"labels_a", "labels_b", "labels_out"};
    const size_t count[3] = {d->n_labels_a, d->n_labels_b, d->n_labels_out};
    const uint32_t *labels[3] = {d->labels_a, d->labels_b, d->labels_out};
    uint8_t *dst[3] = {c->labels[0], c->labels[1], c->out};
    memset(c, 0, sizeof *c);
    for (int k = 0; k < 3; k++) {
        if (count[k] > TF_MAX_RANK) {
            snprintf(msg, len, "contract: %s has %zu labels, more than a tensor's %d axes",
                     names[k], count[k], TF_MAX_RANK);
            return k < 2 ? TF_ERR_SHAPE : TF_ERR_INVALID_ARGUMENT;
        }
        for (size_t j = 0; j < count[k]; j++) {
            if (labels[k][j] >= TF__MAX_LABELS) {
                snprintf(msg, len, "contract: %s[%zu] is %u: labels are 0..%d", names[k], j,
                         labels[k][j], TF__MAX_LABELS - 1);
                return TF_ERR_INVALID_ARGUMENT;
            }
            dst[k][j] = (uint8_t)labels[k][j];
        }
    }
    c->n_inputs = (int)op->n_inputs;
    c->rank[0] = (int)count[0];
    c->rank[1] = (int)count[1];
    c->out_rank = (int)count[2];
    c->conj[0] = d->conj_a;
    c->conj[1] = d->conj_b;
    return TF_OK;
}

_Static_assert((int)TF__FFT_C2R == TENFERRO__FFT_KIND__FFT_C2R, "fft kinds match the proto");
_Static_assert((int)TF__FFT_NORM_FORWARD == TENFERRO__FFT_NORM__FFT_NORM_FORWARD,
               "fft norms match the proto");

/*
 * Decodes an OP_FFT's descriptor (Op.fft) into f and checks it against the
 * input with the shared rules; a missing descriptor, or more axes than any
 * rank has, is refused before anything is copied.
 */
static tf_status prepare_fft(const Tenferro__Op *op, const tf__meta *in, tf__fft *f,
                             tf__meta *out, char *msg, size_t len) {
    const Tenferro__Fft *w = op->fft;
    if (!w) {
        snprintf(msg, len, "fft: the operation carries no Fft descriptor (Op.fft)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (w->n_axes > TF_MAX_RANK) {
        snprintf(msg, len, "fft: %zu axes given: at most %d expected", w->n_axes, TF_MAX_RANK);
        return TF_ERR_AXIS;
    }
    memset(f, 0, sizeof *f);
    f->kind = (tf__fft_kind)w->kind;
    f->inverse = w->inverse != 0;
    f->norm = (tf__fft_norm)w->norm;
    f->n_axes = (int)w->n_axes;
    for (size_t i = 0; i < w->n_axes; i++) f->axes[i] = w->axes[i];
    f->last_length = w->last_length;
    return tf__infer_fft(f, in, out, msg, len);
}


tf_status tfd_op_decode(const Tenferro__Op *op, int test_fault_allowed, tfd_op *d, char *msg,
                        size_t len) {
    const tf__op_kind kind = (tf__op_kind)op->kind;
    int arity = tf__op_arity(kind);
    if (kind == TF__OP_CONTRACT) {
        tf_status st = take_contraction(op, &d->contract, msg, len);
        if (st != TF_OK) return st;
        arity = (int)op->n_inputs;
    }
    if (op->kind >= TF__OP_KIND_COUNT || arity <= 0) {
        snprintf(msg, len, "unknown operation kind %u", op->kind);
        return TF_ERR_UNSUPPORTED;
    }
    /* Linear algebra decodes through tfd_linalg_decode (batch.c, graph-plan.c), never here. */
    if (tf__is_linalg(kind)) {
        snprintf(msg, len, "%s: a linear-algebra kind is decoded through its Linalg descriptor",
                 tf__op_name(kind));
        return TF_ERR_UNSUPPORTED;
    }
    if ((int)op->n_inputs != arity) {
        snprintf(msg, len, "%s takes %d inputs, got %zu", tf__op_name(kind), arity, op->n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    const size_t max_params = kind == TF__OP_SLICE ? TF__MAX_PARAMS : TF_MAX_RANK;
    if (op->n_params > max_params) {
        snprintf(msg, len, "%s: %zu parameters, at most %zu allowed", tf__op_name(kind), op->n_params,
                 max_params);
        return TF_ERR_AXIS;
    }
    /* Fault injection exists only for a daemon started for tests (docs/cuda.md). */
    if (kind == TF__OP_TEST_FAULT && !test_fault_allowed) {
        snprintf(msg, len, "test_fault makes the device fault and is served only by a tenferrod "
                           "started with --test-fault-injection ([testing] fault_injection = true)");
        return TF_ERR_UNSUPPORTED;
    }
    d->kind = kind;
    d->n_inputs = arity;
    d->n_params = (int)op->n_params;
    for (size_t i = 0; i < op->n_params; i++) d->params[i] = op->params[i];
    d->flags = op->flags;
    d->alpha.re = op->alpha_re;
    d->alpha.im = op->alpha_im;
    d->beta.re = op->beta_re;
    d->beta.im = op->beta_im;
    return TF_OK;
}

tf_status tfd_op_infer(const Tenferro__Op *op, tfd_op *d, tf__infer_memo *memo, const tf__meta *in,
                       tf__meta *out, char *msg, size_t len) {
    switch (d->kind) {
    case TF__OP_CONTRACT: return tf__infer_contract(&d->contract, in, out, msg, len);
    case TF__OP_FFT: return prepare_fft(op, &in[0], &d->fft, out, msg, len);
    default:
        if (memo)
            return tf__infer_output_memo(memo, d->kind, in, d->n_inputs, d->params, d->n_params,
                                         d->flags, out, msg, len);
        return tf__infer_output(d->kind, in, d->n_inputs, d->params, d->n_params, d->flags, out,
                                msg, len);
    }
}

_Static_assert((int)TF__ABSORB_BOTH == TENFERRO__ABSORB__ABSORB_BOTH, "absorb matches the proto");
_Static_assert((int)TF__NORM_MATRIX == TENFERRO__NORM_KIND__NORM_MATRIX, "norms match the proto");

tf_status tfd_linalg_decode(const Tenferro__Op *op, tf__linalg *l, char *msg, size_t len) {
    const tf__op_kind kind = (tf__op_kind)op->kind;
    const Tenferro__Linalg *w = op->linalg;
    const char *name = tf__op_name(kind);
    memset(l, 0, sizeof *l);
    if (!w) {
        snprintf(msg, len, "%s: the operation carries no Linalg descriptor (Op.linalg)", name);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if ((int)op->n_inputs != tf__op_arity(kind)) {
        snprintf(msg, len, "%s takes %d inputs, got %zu", name, tf__op_arity(kind), op->n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (w->n_perm > TF_MAX_RANK || w->n_batch > TF_MAX_RANK || w->n_rows > TF_MAX_RANK) {
        snprintf(msg, len, "%s: the split names more axes than a tensor has (%d)", name, TF_MAX_RANK);
        return TF_ERR_AXIS;
    }
    l->has_perm = w->n_perm > 0;
    for (size_t i = 0; i < w->n_perm; i++) l->perm[i] = w->perm[i];
    l->n_batch = (int)w->n_batch;
    l->n_rows = (int)w->n_rows;
    l->full = w->full;
    l->compute_uv = w->compute_uv;
    l->upper = w->upper;
    l->truncate = w->truncate;
    if (w->truncation) {
        const Tenferro__Truncation *t = w->truncation;
        l->trunc.max_rank = t->max_rank;
        l->trunc.min_rank = t->min_rank;
        l->trunc.cutoff = t->cutoff;
        l->trunc.rel_cutoff = t->rel_cutoff;
        l->trunc.discarded_weight = t->discarded_weight;
        l->trunc.rel_discarded_weight = t->rel_discarded_weight;
        l->trunc.keep_degenerate = t->keep_degenerate;
        l->trunc.absorb = (tf__absorb)t->absorb;
        l->trunc.renormalize = t->renormalize;
    }
    l->norm_kind = (tf__norm_kind)w->norm_kind;
    l->norm_p = w->norm_p;
    l->keepdims = w->keepdims;
    l->offset = w->offset;
    return TF_OK;
}

int tfd_linalg_permutes(const tf__linalg *l, int rank) {
    if (!l->has_perm) return 0;
    for (int i = 0; i < rank; i++)
        if (l->perm[i] != i) return 1;
    return 0;
}

void tfd_linalg_permute_op(const tf__linalg *l, const tfd_tensor_view *in, tfd_op *d) {
    memset(d, 0, sizeof *d);
    d->kind = TF__OP_PERMUTE;
    d->n_inputs = 1;
    d->in[0] = *in;
    d->n_params = in->rank;
    d->out = *in;
    d->out.data = NULL;
    for (int i = 0; i < in->rank; i++) {
        d->params[i] = l->perm[i];
        d->out.shape[i] = in->shape[l->perm[i]];
    }
}
