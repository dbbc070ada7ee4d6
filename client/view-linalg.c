/*
 * The linear-algebra operations of a session view (include/tenferro/linalg.h,
 * docs/linalg.md), and the strided slice that trims their results.
 *
 * Each call builds the shared descriptor (tf__linalg) from the caller's
 * arguments, runs the daemon's own rules on it (tf__infer_linalg), so what
 * the daemon would refuse fails here with the same typed status, takes one
 * fresh handle per result and queues one operation naming its tensors in
 * run_io (inputs, then outputs) like a prepared graph's run. On a recording
 * view the same record becomes a graph node (graph.c), its results symbolic
 * values of the graph; a report nobody asked for is still one of the node's
 * outputs (the daemon gives it arena space), only its handle is dropped.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

_Static_assert((int)TF_ABSORB_BOTH == (int)TF__ABSORB_BOTH, "public and shared absorb agree");

/* The descriptor's split from the caller's (NULL: the matrix form of [..., m, n]). */
static tf_status take_split(tf_client *c, tf__op_kind kind, const tf__meta *in,
                            const tf_split *split, tf__linalg *l) {
    if (!split) {
        if (in->rank < 2)
            return tf__fail(c, TF_ERR_SHAPE, "%s: a matrix [..., m, n] expected, got rank %d",
                            tf__op_name(kind), in->rank);
        l->n_batch = in->rank - 2;
        l->n_rows = 1;
        return TF_OK;
    }
    l->n_batch = split->n_batch;
    l->n_rows = split->n_rows;
    if (split->perm) {
        l->has_perm = 1;
        for (int i = 0; i < in->rank; i++) l->perm[i] = split->perm[i];
    }
    return TF_OK;
}

/*
 * Checks and queues one linear-algebra operation of n_inputs inputs; its
 * results' handles go to outs[0 .. n) in the kind's order (the rules decide
 * n, which the caller's outs must match).
 */
static tf_status queue_linalg(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                              tf__linalg *l, int n_outs, tf_tensor *const *outs) {
    tf__meta in[2], out_meta[TF__LINALG_MAX_OUTPUTS];
    tf_tensor probe = 0;
    tf_status st = tf__view_inputs(v, kind, n_inputs, inputs, &probe, in);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    for (int o = 0; o < n_outs; o++)
        if (!outs[o]) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "%s: a result pointer is NULL",
                                      tf__op_name(kind));
    st = tf__infer_linalg(kind, l, in, n_inputs, out_meta, c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    if (l->n_outputs != n_outs)
        return tf__fail(c, TF_ERR_INTERNAL, "%s: %d results made, %d expected", tf__op_name(kind),
                        l->n_outputs, n_outs);
    uint64_t *io = malloc(sizeof *io * (size_t)(n_inputs + n_outs));
    tf__linalg_rec *rec = calloc(1, sizeof *rec);
    tf__queued_op *q = tf__view_slot(v);
    if (!io || !rec || !q) {
        free(io);
        free(rec);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing %s", tf__op_name(kind));
    }
    tf__id_table *handles = tf__view_handles(v);
    int made = 0;
    for (; made < n_outs; made++) {
        tf__handle h = {.meta = out_meta[made], .pending = 1};
        h.id = tf__view_next_id(v);
        if (tf__id_table_insert(handles, &h) != 0) break;
        io[n_inputs + made] = h.id;
    }
    if (made < n_outs) {
        for (int o = 0; o < made; o++) tf__id_table_remove(handles, io[n_inputs + o], NULL);
        free(io);
        free(rec);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing %s", tf__op_name(kind));
    }
    for (int i = 0; i < n_inputs; i++) io[i] = inputs[i];
    rec->desc = *l;
    rec->rank = in[0].rank;
    memset(q, 0, sizeof *q);
    q->kind = kind;
    q->n_run_inputs = n_inputs;
    q->n_run_outputs = n_outs;
    q->run_io = io;
    q->linalg = rec;
    tf__view_commit(v);
    for (int o = 0; o < n_outs; o++) *outs[o] = io[n_inputs + o];
    return tf__ok(c);
}

void tf__encode_linalg(tf__queued_op *q, Tenferro__Op *op) {
    tf__linalg_rec *r = q->linalg;
    const tf__linalg *l = &r->desc;
    Tenferro__Linalg *w = &r->wire;
    Tenferro__Truncation *t = &r->wire_trunc;
    tenferro__linalg__init(w);
    tenferro__truncation__init(t);
    if (l->has_perm) {
        for (int i = 0; i < r->rank; i++) r->perm[i] = l->perm[i];
        w->n_perm = (size_t)r->rank;
        w->perm = r->perm;
    }
    w->n_batch = (uint32_t)l->n_batch;
    w->n_rows = (uint32_t)l->n_rows;
    w->full = l->full != 0;
    w->compute_uv = l->compute_uv != 0;
    w->upper = l->upper != 0;
    w->truncate = l->truncate != 0;
    if (l->truncate) {
        t->max_rank = l->trunc.max_rank;
        t->min_rank = l->trunc.min_rank;
        t->cutoff = l->trunc.cutoff;
        t->rel_cutoff = l->trunc.rel_cutoff;
        t->discarded_weight = l->trunc.discarded_weight;
        t->rel_discarded_weight = l->trunc.rel_discarded_weight;
        t->keep_degenerate = l->trunc.keep_degenerate != 0;
        t->absorb = (Tenferro__Absorb)l->trunc.absorb;
        t->renormalize = l->trunc.renormalize != 0;
        w->truncation = t;
    }
    w->norm_kind = (Tenferro__NormKind)l->norm_kind;
    w->norm_p = l->norm_p;
    w->keepdims = l->keepdims != 0;
    w->offset = l->offset;
    op->linalg = w;
}

/* The input's metadata, for the calls whose descriptor depends on its rank. */
static tf_status input_meta(tf_view *v, tf__op_kind kind, tf_tensor a, tf__meta *m) {
    tf_tensor probe = 0;
    return tf__view_inputs(v, kind, 1, &a, &probe, m);
}

/* The truncation's options into the descriptor. */
static void take_truncation(tf__linalg *l, const tf_truncation *t) {
    l->truncate = 1;
    if (!t) return;
    l->trunc.max_rank = t->max_rank;
    l->trunc.min_rank = t->min_rank;
    l->trunc.cutoff = t->cutoff;
    l->trunc.rel_cutoff = t->rel_cutoff;
    l->trunc.discarded_weight = t->discarded_weight;
    l->trunc.rel_discarded_weight = t->rel_discarded_weight;
    l->trunc.keep_degenerate = t->keep_degenerate != 0;
    l->trunc.absorb = (tf__absorb)t->absorb;
    l->trunc.renormalize = t->renormalize != 0;
}

/* svd and its truncated form: U, S, Vh (or S alone), then the report when truncating. */
static tf_status queue_svd(tf_view *v, tf_tensor a, const tf_split *split, int full,
                           const tf_truncation *t, int truncate, tf_tensor *u, tf_tensor *s,
                           tf_tensor *vh, tf_tensor *report) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_SVD, a, &m);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    tf__linalg l;
    memset(&l, 0, sizeof l);
    if ((st = take_split(c, TF__OP_SVD, &m, split, &l)) != TF_OK) return st;
    if ((u == NULL) != (vh == NULL))
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "svd: u and vh are both given or both NULL");
    l.full = full != 0;
    l.compute_uv = u != NULL;
    if (truncate) take_truncation(&l, t);
    tf_tensor dummy = 0;
    tf_tensor *outs[4];
    int n = 0;
    if (u) outs[n++] = u;
    outs[n++] = s;
    if (vh) outs[n++] = vh;
    if (truncate) outs[n++] = report ? report : &dummy;
    st = queue_linalg(v, TF__OP_SVD, 1, &a, &l, n, outs);
    /* A report nobody asked for is dropped after the operation (it still reads nothing). */
    if (st == TF_OK && truncate && !report) st = tf__view_drop(v, dummy);
    return st;
}

tf_status tf_view_svd(tf_view *v, tf_tensor a, const tf_split *split, int full_matrices,
                      tf_tensor *u, tf_tensor *s, tf_tensor *vh) {
    return queue_svd(v, a, split, full_matrices, NULL, 0, u, s, vh, NULL);
}

tf_status tf_view_svd_truncated(tf_view *v, tf_tensor a, const tf_split *split,
                                const tf_truncation *t, tf_tensor *u, tf_tensor *s, tf_tensor *vh,
                                tf_tensor *report) {
    return queue_svd(v, a, split, 0, t, 1, u, s, vh, report);
}

tf_status tf_view_qr(tf_view *v, tf_tensor a, const tf_split *split, tf_qr_mode mode, tf_tensor *q,
                     tf_tensor *r) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_QR, a, &m);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    if ((unsigned)mode > TF_QR_R)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "qr: mode %d is none of reduced, complete, r",
                        (int)mode);
    tf__linalg l;
    memset(&l, 0, sizeof l);
    if ((st = take_split(c, TF__OP_QR, &m, split, &l)) != TF_OK) return st;
    l.full = mode == TF_QR_COMPLETE;
    l.compute_uv = mode != TF_QR_R;
    tf_tensor *outs[2] = {q, r};
    return mode == TF_QR_R ? queue_linalg(v, TF__OP_QR, 1, &a, &l, 1, &outs[1])
                           : queue_linalg(v, TF__OP_QR, 1, &a, &l, 2, outs);
}

/* eigh and its truncated form: W, V (when vecs), then the report when truncating. */
static tf_status queue_eigh(tf_view *v, tf_tensor a, const tf_split *split, int upper,
                            const tf_truncation *t, int truncate, tf_tensor *w, tf_tensor *vecs,
                            tf_tensor *report) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_EIGH, a, &m);
    if (st != TF_OK) return st;
    tf__linalg l;
    memset(&l, 0, sizeof l);
    if ((st = take_split(v->client, TF__OP_EIGH, &m, split, &l)) != TF_OK) return st;
    l.upper = upper != 0;
    l.compute_uv = vecs != NULL;
    if (truncate) take_truncation(&l, t);
    tf_tensor dummy = 0;
    tf_tensor *outs[3];
    int n = 0;
    outs[n++] = w;
    if (vecs) outs[n++] = vecs;
    if (truncate) outs[n++] = report ? report : &dummy;
    st = queue_linalg(v, TF__OP_EIGH, 1, &a, &l, n, outs);
    if (st == TF_OK && truncate && !report) st = tf__view_drop(v, dummy);
    return st;
}

tf_status tf_view_eigh(tf_view *v, tf_tensor a, const tf_split *split, int upper, tf_tensor *w,
                       tf_tensor *vecs) {
    return queue_eigh(v, a, split, upper, NULL, 0, w, vecs, NULL);
}

tf_status tf_view_eigh_truncated(tf_view *v, tf_tensor a, const tf_split *split, int upper,
                                 const tf_truncation *t, tf_tensor *w, tf_tensor *vecs,
                                 tf_tensor *report) {
    return queue_eigh(v, a, split, upper, t, 1, w, vecs, report);
}

/*
 * The kinds on the last two axes of a batch of matrices (cholesky, inv, det,
 * slogdet, solve, trace, diagonal): the matrix form, with the descriptor's
 * remaining options set by the caller.
 */
static tf_status queue_matrix(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                              tf__linalg *l, int n_outs, tf_tensor *const *outs) {
    tf__meta m;
    tf_status st = input_meta(v, kind, inputs[0], &m);
    if (st != TF_OK) return st;
    if ((st = take_split(v->client, kind, &m, NULL, l)) != TF_OK) return st;
    return queue_linalg(v, kind, n_inputs, inputs, l, n_outs, outs);
}

tf_status tf_view_cholesky(tf_view *v, tf_tensor a, int upper, tf_tensor *out) {
    tf__linalg l = {.upper = upper != 0};
    return queue_matrix(v, TF__OP_CHOLESKY, 1, &a, &l, 1, &out);
}

tf_status tf_view_solve(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *x) {
    tf__linalg l = {0};
    const tf_tensor in[2] = {a, b};
    return queue_matrix(v, TF__OP_SOLVE, 2, in, &l, 1, &x);
}

tf_status tf_view_inv(tf_view *v, tf_tensor a, tf_tensor *out) {
    tf__linalg l = {0};
    return queue_matrix(v, TF__OP_INV, 1, &a, &l, 1, &out);
}

tf_status tf_view_det(tf_view *v, tf_tensor a, tf_tensor *out) {
    tf__linalg l = {0};
    return queue_matrix(v, TF__OP_DET, 1, &a, &l, 1, &out);
}

tf_status tf_view_slogdet(tf_view *v, tf_tensor a, tf_tensor *sign, tf_tensor *logabsdet) {
    tf__linalg l = {0};
    tf_tensor *outs[2] = {sign, logabsdet};
    return queue_matrix(v, TF__OP_SLOGDET, 1, &a, &l, 2, outs);
}

tf_status tf_view_trace(tf_view *v, tf_tensor a, int64_t offset, tf_tensor *out) {
    tf__linalg l = {.offset = offset};
    return queue_matrix(v, TF__OP_TRACE, 1, &a, &l, 1, &out);
}

tf_status tf_view_diagonal(tf_view *v, tf_tensor a, int64_t offset, tf_tensor *out) {
    tf__linalg l = {.offset = offset};
    return queue_matrix(v, TF__OP_DIAGONAL, 1, &a, &l, 1, &out);
}

/*
 * The norm's split: the kept axes first in their order, then the reduced
 * ones (in the caller's order: a matrix norm's row axis, then its column
 * axis). Axes may be negative; a repeated or out-of-range axis is refused.
 */
static tf_status norm_split(tf_client *c, const tf__meta *m, int n_axes, const int *axes,
                            tf__linalg *l) {
    int reduced[TF_MAX_RANK], is_reduced[TF_MAX_RANK] = {0};
    if (n_axes < 0 || n_axes > m->rank || (n_axes > 0 && !axes))
        return tf__fail(c, TF_ERR_AXIS, "norm: %d axes given for rank %d", n_axes, m->rank);
    for (int i = 0; i < n_axes; i++) {
        const int a = axes[i] < 0 ? axes[i] + m->rank : axes[i];
        if (axes[i] < -m->rank || axes[i] >= m->rank || is_reduced[a])
            return tf__fail(c, TF_ERR_AXIS, "norm: axis %d is out of range for rank %d or repeated",
                            axes[i], m->rank);
        is_reduced[a] = 1;
        reduced[i] = a;
    }
    int n = 0;
    for (int a = 0; a < m->rank; a++)
        if (!is_reduced[a]) l->perm[n++] = a;
    l->n_batch = n;
    for (int i = 0; i < n_axes; i++) l->perm[n++] = reduced[i];
    l->has_perm = 1;
    return TF_OK;
}

tf_status tf_view_vector_norm(tf_view *v, tf_tensor a, double p, int n_axes, const int *axes,
                              int keepdims, tf_tensor *out) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_NORM, a, &m);
    if (st != TF_OK) return st;
    tf__linalg l = {.norm_kind = TF__NORM_VECTOR, .norm_p = p, .keepdims = keepdims != 0};
    int all[TF_MAX_RANK];
    if (n_axes == 0) {
        for (int i = 0; i < m.rank; i++) all[i] = i;
        axes = all;
        n_axes = m.rank;
    }
    if ((st = norm_split(v->client, &m, n_axes, axes, &l)) != TF_OK) return st;
    l.n_rows = 0;
    return queue_linalg(v, TF__OP_NORM, 1, &a, &l, 1, &out);
}

tf_status tf_view_matrix_norm(tf_view *v, tf_tensor a, tf_matrix_norm ord, const int *axes,
                              int keepdims, tf_tensor *out) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_NORM, a, &m);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    static const struct {
        tf__norm_kind kind;
        double p;
    } ords[] = {
        [TF_NORM_FRO] = {TF__NORM_FRO, 0},        [TF_NORM_NUC] = {TF__NORM_NUC, 0},
        [TF_NORM_1] = {TF__NORM_MATRIX, 1},       [TF_NORM_NEG_1] = {TF__NORM_MATRIX, -1},
        [TF_NORM_2] = {TF__NORM_MATRIX, 2},       [TF_NORM_NEG_2] = {TF__NORM_MATRIX, -2},
        [TF_NORM_INF] = {TF__NORM_MATRIX, INFINITY}, [TF_NORM_NEG_INF] = {TF__NORM_MATRIX, -INFINITY},
    };
    if ((unsigned)ord > TF_NORM_NEG_INF)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "norm: matrix norm %d is unknown", (int)ord);
    if (m.rank < 2)
        return tf__fail(c, TF_ERR_SHAPE, "norm: a matrix norm needs rank 2 or more, got %d", m.rank);
    tf__linalg l = {.norm_kind = ords[ord].kind, .norm_p = ords[ord].p, .keepdims = keepdims != 0};
    const int last[2] = {m.rank - 2, m.rank - 1};
    if ((st = norm_split(c, &m, 2, axes ? axes : last, &l)) != TF_OK) return st;
    l.n_rows = 1;
    return queue_linalg(v, TF__OP_NORM, 1, &a, &l, 1, &out);
}

tf_status tf_view_slice(tf_view *v, tf_tensor a, const int64_t *start, const int64_t *step,
                        const int64_t *length, tf_tensor *out) {
    tf__meta m;
    tf_status st = input_meta(v, TF__OP_SLICE, a, &m);
    if (st != TF_OK) return st;
    if (m.rank > 0 && (!start || !step || !length))
        return tf__fail(v->client, TF_ERR_INVALID_ARGUMENT, "slice: start, step or length is NULL");
    int64_t params[TF__MAX_PARAMS];
    for (int i = 0; i < m.rank; i++) {
        params[3 * i] = start[i];
        params[3 * i + 1] = step[i];
        params[3 * i + 2] = length[i];
    }
    const tf_scalar zero = {0, 0};
    return tf__queue_op(v, TF__OP_SLICE, 1, &a, 3 * m.rank, params, 0, zero, zero, out);
}

tf_status tf_truncation_report_read(tf_client *c, tf_tensor report, tf_truncation_report *out,
                                    size_t n) {
    if (!c || (!out && n)) return TF_ERR_INVALID_ARGUMENT;
    tf__handle *h = NULL;
    tf_status st = tf__lookup(c, report, &h);
    if (st != TF_OK) return st;
    const tf__meta m = h->meta;
    if (m.dtype != TF_F64 || m.rank < 1 || m.shape[m.rank - 1] != TF__REPORT_ENTRIES)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "tensor %llu is not a truncation report (f64 [..., %d])",
                        (unsigned long long)report, TF__REPORT_ENTRIES);
    /* A report a held session's queue has not carried yet goes with that queue first. */
    if (h->pending && c->held && !c->in_callback && (st = tf_session_submit(c->held)) != TF_OK)
        return st;
    void *data = NULL;
    size_t bytes = 0;
    if ((st = tf_download(c, report, &data, &bytes)) != TF_OK) return st;
    const double *d = data;
    const size_t have = bytes / (sizeof(double) * TF__REPORT_ENTRIES);
    for (size_t i = 0; i < n && i < have; i++) {
        out[i].rank = (int64_t)d[3 * i];
        out[i].discarded_weight = d[3 * i + 1];
        out[i].truncation_error = d[3 * i + 2];
    }
    free(data);
    return tf__ok(c);
}
