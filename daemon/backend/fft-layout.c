/*
 * FFT geometry shared by the backends (see fft-layout.h).
 *
 * The split into steps works on the sorted transformed axes. Axes of length
 * 1 need no transform (a 1-point DFT is the identity) and are dropped, except
 * the halved axis of R2C and C2R, whose step also changes the dtype. Each
 * way of cutting the sorted axes into consecutive groups of at most three is
 * a candidate (for R2C and C2R the halved axis must be the innermost of its
 * group, since the plan halves its innermost dim); for each group, the other
 * axes of length above 1 fall into runs of adjacent axes (an axis of length
 * 1 joins its neighbours, its index being always 0), the longest run is the
 * plan's batch and the others are loops. A candidate costs a pass over the
 * data per step (weighed by its size against the cost of one execution) plus
 * an execution per loop index; the cheapest wins. So leading, trailing and
 * all-axes transforms, and any group with its batch axes on one side or
 * between its axes, are one step of one execution; a group with batch axes
 * on both sides runs once per index of the shorter side.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/backend/fft-layout.h"

/* Bytes of the working array per unit of the per-execution cost: a pass over 16 MiB ~ 1 launch. */
#define PASS_BYTES_PER_LAUNCH ((double)(16 << 20))

double tfd_fft_scale(const tf__fft *f, const tf__meta *in) {
    double n = 1;
    for (int i = 0; i < f->n_axes; i++)
        n *= (double)(f->kind == TF__FFT_C2R && i == f->n_axes - 1 ? f->last_length
                                                                     : in->shape[f->axes[i]]);
    const int inverse = f->kind == TF__FFT_C2R || (f->kind == TF__FFT_C2C && f->inverse);
    switch (f->norm) {
    case TF__FFT_NORM_ORTHO: return 1.0 / sqrt(n);
    case TF__FFT_NORM_FORWARD: return inverse ? 1.0 : 1.0 / n;
    case TF__FFT_NORM_BACKWARD: break;
    }
    return inverse ? 1.0 / n : 1.0;
}

tf_status tfd_fft_check_op(const tfd_op *op, tf__meta *in, char *msg, size_t msg_len) {
    const tfd_tensor_view *v = &op->in[0], *out = &op->out;
    in->dtype = v->dtype;
    in->rank = v->rank;
    memcpy(in->shape, v->shape, sizeof in->shape);
    tf__meta want;
    tf_status st = tf__infer_fft(&op->fft, in, &want, msg, msg_len);
    if (st != TF_OK) return st;
    if (op->n_inputs != 1 || want.dtype != out->dtype || want.rank != out->rank ||
        memcmp(want.shape, out->shape, sizeof want.shape[0] * (size_t)want.rank) != 0 ||
        !v->data || !out->data) {
        snprintf(msg, msg_len, "fft descriptor does not match its input and output");
        return TF_ERR_INTERNAL;
    }
    return TF_OK;
}

int tfd_fft_canonical_axes(const tf__fft *f, int rank, int32_t *axes) {
    const int keep_last = f->kind != TF__FFT_C2C;
    const int halved = f->axes[f->n_axes - 1];
    unsigned set = 0;
    int n = 0;
    for (int i = 0; i < f->n_axes; i++) set |= 1u << f->axes[i];
    for (int a = 0; a < rank; a++)
        if ((set & (1u << a)) && !(keep_last && a == halved)) axes[n++] = a;
    if (keep_last) axes[n++] = halved;
    return n;
}

/* Row-major strides of a tensor, in elements. */
static void strides_of(const tf__meta *m, int64_t *stride) {
    int64_t s = 1;
    for (int a = m->rank - 1; a >= 0; a--) {
        stride[a] = s;
        s *= m->shape[a];
    }
}

/*
 * Fills step s for the group g[0..k) (ascending axes) reading array src and
 * writing array dst (each contiguous row-major), with the transformed
 * lengths len[]; returns its executions.
 */
static int64_t make_step(tfd_fft_step *s, const int *g, int k, const int64_t *len,
                         const tf__meta *src, const tf__meta *dst) {
    int64_t ss[TF_MAX_RANK], ds[TF_MAX_RANK];
    strides_of(src, ss);
    strides_of(dst, ds);
    s->rank = k;
    unsigned in_group = 0;
    for (int j = 0; j < k; j++) {
        const int a = g[j];
        in_group |= 1u << a;
        s->n[j] = len[a];
        s->inembed[j] = j == 0 ? src->shape[a] : ss[g[j - 1]] / ss[a];
        s->onembed[j] = j == 0 ? dst->shape[a] : ds[g[j - 1]] / ds[a];
    }
    s->istride = ss[g[k - 1]];
    s->ostride = ds[g[k - 1]];
    /* The other axes as runs of adjacent axes; length-1 axes are transparent. */
    int64_t run_n[TF_MAX_RANK], run_in[TF_MAX_RANK], run_out[TF_MAX_RANK];
    int n_runs = 0, open = 0;
    for (int a = 0; a < src->rank; a++) {
        if (src->shape[a] == 1 && dst->shape[a] == 1) continue;
        if (in_group & (1u << a)) {
            open = 0;
            continue;
        }
        if (!open) {
            run_n[n_runs] = 1;
            n_runs++;
            open = 1;
        }
        run_n[n_runs - 1] *= src->shape[a];
        run_in[n_runs - 1] = ss[a];
        run_out[n_runs - 1] = ds[a];
    }
    int batch = -1;
    for (int r = 0; r < n_runs; r++)
        if (batch < 0 || run_n[r] > run_n[batch]) batch = r;
    if (batch < 0) {
        s->batch = 1;
        s->idist = tf__meta_numel(src);
        s->odist = tf__meta_numel(dst);
    } else {
        s->batch = run_n[batch];
        s->idist = run_in[batch];
        s->odist = run_out[batch];
    }
    int64_t launches = 1;
    s->n_loops = 0;
    for (int r = 0; r < n_runs; r++) {
        if (r == batch) continue;
        s->loop_n[s->n_loops] = run_n[r];
        s->loop_in[s->n_loops] = run_in[r];
        s->loop_out[s->n_loops] = run_out[r];
        s->n_loops++;
        launches *= run_n[r];
    }
    return launches;
}

/* What one way of cutting the axes into groups comes to. */
typedef struct candidate {
    tfd_fft_layout layout;
    double cost;
} candidate;

/*
 * Builds the layout of the cut `cuts` (bit i: a group ends after t[i]) of
 * the sorted axes t[0..k), the halved axis at t[p] (p = -1 for C2C); returns
 * 0, or -1 when a group has more than TFD_FFT_PLAN_RANK axes.
 */
static int build(const tf__fft *f, const tf__meta *in, const tf__meta *out, const int64_t *len,
                 const int *t, int k, int p, unsigned cuts, candidate *c) {
    int start[TF_MAX_RANK], size[TF_MAX_RANK], n_groups = 0, real_group = -1;
    for (int i = 0, from = 0; i < k; i++) {
        if (i == k - 1 || (cuts & (1u << i))) {
            if (i - from + 1 > TFD_FFT_PLAN_RANK) return -1;
            start[n_groups] = from;
            size[n_groups] = i - from + 1;
            if (p >= from && p <= i) real_group = n_groups;
            n_groups++;
            from = i + 1;
        }
    }
    tfd_fft_layout *L = &c->layout;
    memset(L, 0, sizeof *L);
    const tf__meta *scratch = in; /* C2R's scratch: complex, of the input's shape */
    /* Execution order: R2C's real group first, C2R's last, the C2C groups in between. */
    int order[TF_MAX_RANK], n = 0;
    if (f->kind == TF__FFT_R2C) order[n++] = real_group;
    for (int gi = 0; gi < n_groups; gi++)
        if (gi != real_group) order[n++] = gi;
    if (f->kind == TF__FFT_C2R) order[n++] = real_group;
    double pass = 1.0 + (double)tf__meta_bytes(out) / PASS_BYTES_PER_LAUNCH;
    c->cost = 0;
    for (int i = 0; i < n; i++) {
        const int gi = order[i];
        tfd_fft_step *s = &L->steps[L->n_steps++];
        s->inverse = f->kind == TF__FFT_C2C ? f->inverse : f->kind == TF__FFT_C2R;
        const tf__meta *src, *dst;
        if (f->kind == TF__FFT_C2C) {
            s->kind = TF__FFT_C2C;
            s->src = i == 0 ? TFD_FFT_INPUT : TFD_FFT_OUTPUT;
            s->dst = TFD_FFT_OUTPUT;
            src = i == 0 ? in : out;
            dst = out;
        } else if (f->kind == TF__FFT_R2C) {
            s->kind = gi == real_group ? TF__FFT_R2C : TF__FFT_C2C;
            s->src = i == 0 ? TFD_FFT_INPUT : TFD_FFT_OUTPUT;
            s->dst = TFD_FFT_OUTPUT;
            src = i == 0 ? in : out;
            dst = out;
        } else {
            L->scratch = 1;
            if (gi == real_group) {
                s->kind = TF__FFT_C2R;
                s->src = TFD_FFT_SCRATCH;
                s->dst = TFD_FFT_OUTPUT;
                src = scratch;
                dst = out;
                if (i == 0) L->copy_input = 1;
            } else {
                s->kind = TF__FFT_C2C;
                s->src = i == 0 ? TFD_FFT_INPUT : TFD_FFT_SCRATCH;
                s->dst = TFD_FFT_SCRATCH;
                src = i == 0 ? in : scratch;
                dst = scratch;
            }
        }
        int64_t launches = make_step(s, &t[start[gi]], size[gi], len, src, dst);
        L->launches += launches;
        c->cost += pass + (double)launches;
    }
    return 0;
}

void tfd_fft_layout_of(const tf__fft *f, const tf__meta *in, tfd_fft_layout *out) {
    memset(out, 0, sizeof *out);
    tf__meta om;
    char msg[8];
    if (tf__infer_fft(f, in, &om, msg, sizeof msg) != TF_OK) return; /* callers pass valid ones */
    const int halved = f->kind == TF__FFT_C2C ? -1 : f->axes[f->n_axes - 1];
    int64_t len[TF_MAX_RANK];
    for (int a = 0; a < in->rank; a++) len[a] = in->shape[a];
    if (f->kind == TF__FFT_C2R) len[halved] = f->last_length;
    /* The transformed axes in ascending order, length-1 ones dropped (the halved one kept). */
    unsigned set = 0;
    for (int i = 0; i < f->n_axes; i++)
        if (len[f->axes[i]] > 1 || f->axes[i] == halved) set |= 1u << f->axes[i];
    int t[TF_MAX_RANK], k = 0, p = -1;
    for (int a = 0; a < in->rank; a++) {
        if (!(set & (1u << a))) continue;
        if (a == halved) p = k;
        t[k++] = a;
    }
    if (k == 0) return; /* a C2C over length-1 axes only: the output is the input */
    candidate best, c;
    best.cost = -1;
    for (unsigned cuts = 0; cuts < (1u << (k - 1)); cuts++) {
        if (p >= 0 && p < k - 1 && !(cuts & (1u << p))) continue; /* the halved axis ends its group */
        if (build(f, in, &om, len, t, k, p, cuts, &c) != 0) continue;
        if (best.cost < 0 || c.cost < best.cost) best = c;
    }
    *out = best.layout;
}
