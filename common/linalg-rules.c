/* The rules of the linear-algebra kinds (common/linalg.h, docs/linalg.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/linalg.h"

int tf__is_linalg(tf__op_kind kind) { return tf__op_shape_rule(kind) == TF__SHAPE_LINALG; }

static tf_dtype real_of(tf_dtype d) {
    return d == TF_C64 ? TF_F32 : d == TF_C128 ? TF_F64 : d;
}

/* A tensor of `dtype` whose axes are the n given (shape entries in order). */
static void meta_of(tf__meta *m, tf_dtype dtype, int n, const int64_t *shape) {
    memset(m, 0, sizeof *m);
    m->dtype = dtype;
    m->rank = n;
    for (int i = 0; i < n; i++) m->shape[i] = shape[i];
}

/* Appends dims to a shape under construction. */
static void push(int64_t *shape, int *n, const int64_t *dims, int count) {
    for (int i = 0; i < count; i++) shape[(*n)++] = dims[i];
}

/* The input's shape in the descriptor's order; refuses a permutation that is not one. */
static tf_status split_shape(tf__op_kind kind, const tf__linalg *l, const tf__meta *in,
                             int64_t *shape, char *msg, size_t len) {
    if (!l->has_perm) {
        memcpy(shape, in->shape, sizeof(int64_t) * (size_t)in->rank);
        return TF_OK;
    }
    int seen[TF_MAX_RANK] = {0};
    for (int i = 0; i < in->rank; i++) {
        const int a = l->perm[i];
        if (a < 0 || a >= in->rank || seen[a]) {
            snprintf(msg, len, "%s: perm is not a permutation of the input's %d axes (entry %d is "
                     "%d)", tf__op_name(kind), in->rank, i, a);
            return TF_ERR_AXIS;
        }
        seen[a] = 1;
        shape[i] = in->shape[a];
    }
    return TF_OK;
}

static int64_t product(const int64_t *d, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= d[i];
    return p;
}

/* Checks the options of a truncation against the kind; max_rank then bounds the outputs. */
static tf_status check_truncation(tf__op_kind kind, tf__linalg *l, char *msg, size_t len) {
    const tf__truncation *t = &l->trunc;
    const char *name = tf__op_name(kind);
    if (!l->truncate) {
        l->value_rank = 0;
        return TF_OK;
    }
    if (t->max_rank < 0 || t->min_rank < 0) {
        snprintf(msg, len, "%s: max_rank %lld and min_rank %lld: 0 (none) or positive expected",
                 name, (long long)t->max_rank, (long long)t->min_rank);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (t->max_rank && t->min_rank > t->max_rank) {
        snprintf(msg, len, "%s: min_rank %lld is above max_rank %lld", name,
                 (long long)t->min_rank, (long long)t->max_rank);
        return TF_ERR_INVALID_ARGUMENT;
    }
    const double v[4] = {t->cutoff, t->rel_cutoff, t->discarded_weight, t->rel_discarded_weight};
    static const char *const what[4] = {"cutoff", "rel_cutoff", "discarded_weight",
                                        "rel_discarded_weight"};
    for (int i = 0; i < 4; i++)
        if (!(v[i] >= 0) || isinf(v[i])) {
            snprintf(msg, len, "%s: %s is %g: a finite value of at least 0 expected", name, what[i],
                     v[i]);
            return TF_ERR_INVALID_ARGUMENT;
        }
    if ((unsigned)t->absorb > TF__ABSORB_BOTH) {
        snprintf(msg, len, "%s: absorb %d is none of none, left, right, both", name,
                 (int)t->absorb);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (kind == TF__OP_EIGH && (t->absorb != TF__ABSORB_NONE || t->renormalize)) {
        snprintf(msg, len, "eigh: absorb and renormalize belong to a truncated svd");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (kind == TF__OP_SVD && t->absorb != TF__ABSORB_NONE && !l->compute_uv) {
        snprintf(msg, len, "svd: absorb needs U and Vh (compute_uv)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (l->full) {
        snprintf(msg, len, "svd: a truncated svd is reduced (full_matrices is refused)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    l->value_rank = t->cutoff > 0 || t->rel_cutoff > 0 || t->discarded_weight > 0 ||
                    t->rel_discarded_weight > 0 || t->keep_degenerate;
    return TF_OK;
}

/* The report of a truncation: f64 [batch..., 3]. */
static void report_meta(tf__meta *m, const int64_t *batch, int n_batch) {
    int64_t shape[TF_MAX_RANK + 1];
    int n = 0;
    push(shape, &n, batch, n_batch);
    shape[n++] = TF__REPORT_ENTRIES;
    meta_of(m, TF_F64, n, shape);
}

/* svd, qr, eigh in matrix or tensor form. */
static tf_status infer_factor(tf__op_kind kind, tf__linalg *l, const tf__meta *in,
                              const int64_t *s, tf__meta *out, char *msg, size_t len) {
    const int nb = l->n_batch, nr = l->n_rows, nc = in->rank - nb - nr;
    const int64_t *batch = s, *rows = s + nb, *cols = s + nb + nr;
    if (nr < 1 || nc < 1) {
        snprintf(msg, len, "%s: the split (%d batch, %d row axes of a rank-%d input) leaves %s "
                 "axes", tf__op_name(kind), nb, nr, in->rank, nr < 1 ? "no row" : "no column");
        return TF_ERR_AXIS;
    }
    /* The left factor has the batch, row and one new axis; the right one batch, new and columns. */
    if (nb + nr + 1 > TF_MAX_RANK || nb + nc + 1 > TF_MAX_RANK) {
        snprintf(msg, len, "%s: a factor would have more than %d axes", tf__op_name(kind),
                 TF_MAX_RANK);
        return TF_ERR_AXIS;
    }
    if (kind == TF__OP_EIGH && l->m != l->n) {
        snprintf(msg, len, "eigh: the matrix is %lld x %lld: a square one expected",
                 (long long)l->m, (long long)l->n);
        return TF_ERR_SHAPE;
    }
    tf_status st = check_truncation(kind, l, msg, len);
    if (st != TF_OK) return st;
    if (kind == TF__OP_QR && l->truncate) {
        snprintf(msg, len, "qr: truncation belongs to svd and eigh");
        return TF_ERR_INVALID_ARGUMENT;
    }
    const tf_dtype dt = in->dtype, rt = real_of(dt);
    const int64_t k = kind == TF__OP_EIGH ? l->n : l->k;
    l->rank = k;
    if (l->truncate && l->trunc.max_rank && l->trunc.max_rank < k) l->rank = l->trunc.max_rank;
    const int64_t r = l->rank;
    int64_t shape[2 * TF_MAX_RANK];
    int n = 0, o = 0;
    if (kind == TF__OP_SVD) {
        const int64_t ur = l->full ? l->m : r, vr = l->full ? l->n : r;
        if (l->compute_uv) {
            n = 0;
            push(shape, &n, batch, nb);
            push(shape, &n, rows, nr);
            shape[n++] = ur;
            meta_of(&out[o++], dt, n, shape);
        }
        n = 0;
        push(shape, &n, batch, nb);
        shape[n++] = r;
        meta_of(&out[o++], rt, n, shape);
        if (l->compute_uv) {
            n = 0;
            push(shape, &n, batch, nb);
            shape[n++] = vr;
            push(shape, &n, cols, nc);
            meta_of(&out[o++], dt, n, shape);
        }
    } else if (kind == TF__OP_QR) {
        const int64_t qr = l->full ? l->m : l->k;
        if (l->compute_uv) {
            n = 0;
            push(shape, &n, batch, nb);
            push(shape, &n, rows, nr);
            shape[n++] = qr;
            meta_of(&out[o++], dt, n, shape);
        }
        n = 0;
        push(shape, &n, batch, nb);
        shape[n++] = qr;
        push(shape, &n, cols, nc);
        meta_of(&out[o++], dt, n, shape);
    } else { /* eigh */
        n = 0;
        push(shape, &n, batch, nb);
        shape[n++] = r;
        meta_of(&out[o++], rt, n, shape);
        if (l->compute_uv) {
            n = 0;
            push(shape, &n, batch, nb);
            push(shape, &n, rows, nr);
            shape[n++] = r;
            meta_of(&out[o++], dt, n, shape);
        }
    }
    if (l->truncate) report_meta(&out[o++], batch, nb);
    l->n_outputs = o;
    return TF_OK;
}

/* The square-matrix kinds in matrix form: cholesky, inv, det, slogdet, and solve's A. */
static tf_status need_square(tf__op_kind kind, const tf__linalg *l, char *msg, size_t len) {
    if (l->n_rows != 1 || l->m != l->n || l->has_perm) {
        snprintf(msg, len, "%s: a batch of square matrices [..., n, n] expected (%lld x %lld%s)",
                 tf__op_name(kind), (long long)l->m, (long long)l->n,
                 l->has_perm || l->n_rows != 1 ? ", in matrix form" : "");
        return l->has_perm || l->n_rows != 1 ? TF_ERR_AXIS : TF_ERR_SHAPE;
    }
    return TF_OK;
}

/* The p of a norm: vector p any (0, +-inf included), matrix p one of +-1, +-2, +-inf. */
static tf_status check_norm(tf__linalg *l, int n_cols, char *msg, size_t len) {
    const double p = l->norm_p;
    switch (l->norm_kind) {
    case TF__NORM_VECTOR:
        if (isnan(p)) {
            snprintf(msg, len, "norm: the vector norm's p is nan");
            return TF_ERR_INVALID_ARGUMENT;
        }
        return TF_OK;
    case TF__NORM_FRO:
    case TF__NORM_NUC:
    case TF__NORM_MATRIX:
        if (l->n_rows != 1 || n_cols != 1) {
            snprintf(msg, len, "norm: a matrix norm takes two axes (one row, one column axis)");
            return TF_ERR_AXIS;
        }
        if (l->norm_kind == TF__NORM_MATRIX && !(fabs(p) == 1 || fabs(p) == 2 || isinf(p))) {
            snprintf(msg, len, "norm: the matrix norm's p is %g: 1, -1, 2, -2, inf or -inf expected", p);
            return TF_ERR_INVALID_ARGUMENT;
        }
        return TF_OK;
    }
    snprintf(msg, len, "norm: norm kind %d is unknown", (int)l->norm_kind);
    return TF_ERR_INVALID_ARGUMENT;
}

tf_status tf__infer_linalg(tf__op_kind kind, tf__linalg *l, const tf__meta *in, int n_inputs,
                           tf__meta *out, char *msg, size_t len) {
    const char *name = tf__op_name(kind);
    if (!tf__is_linalg(kind)) {
        snprintf(msg, len, "operation kind %d is not a linear-algebra kind", (int)kind);
        return TF_ERR_UNSUPPORTED;
    }
    const int want_inputs = tf__op_arity(kind);
    if (n_inputs != want_inputs) {
        snprintf(msg, len, "%s takes %d inputs, got %d", name, want_inputs, n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < n_inputs; i++) {
        tf_status st = tf__check_new_meta(in[i].dtype, in[i].rank, in[i].shape, msg, len);
        if (st != TF_OK) return st;
    }
    if (n_inputs == 2 && in[1].dtype != in[0].dtype) {
        snprintf(msg, len, "%s: A and B have different dtypes", name);
        return TF_ERR_DTYPE;
    }
    const tf__meta *a = &in[0];
    if (l->n_batch < 0 || l->n_rows < 0 || l->n_batch + l->n_rows > a->rank) {
        snprintf(msg, len, "%s: the split (%d batch, %d row axes) does not fit a rank-%d input",
                 name, l->n_batch, l->n_rows, a->rank);
        return TF_ERR_AXIS;
    }
    int64_t s[TF_MAX_RANK];
    tf_status st = split_shape(kind, l, a, s, msg, len);
    if (st != TF_OK) return st;
    const int nb = l->n_batch, nr = l->n_rows, nc = a->rank - nb - nr;
    l->b = product(s, nb);
    l->m = product(s + nb, nr);
    l->n = product(s + nb + nr, nc);
    l->k = l->m < l->n ? l->m : l->n;
    l->rank = l->k;
    l->nrhs = 0;
    l->value_rank = 0;
    l->n_outputs = 1;
    /* Options of other kinds are refused rather than ignored: a client asking them meant something. */
    if (l->truncate && kind != TF__OP_SVD && kind != TF__OP_EIGH) {
        snprintf(msg, len, "%s: truncation belongs to svd and eigh", name);
        return TF_ERR_INVALID_ARGUMENT;
    }
    const tf_dtype dt = a->dtype, rt = real_of(dt);
    switch (kind) {
    case TF__OP_SVD:
    case TF__OP_QR:
    case TF__OP_EIGH:
        return infer_factor(kind, l, a, s, out, msg, len);
    case TF__OP_CHOLESKY:
    case TF__OP_INV:
        if ((st = need_square(kind, l, msg, len)) != TF_OK) return st;
        meta_of(&out[0], dt, a->rank, s);
        return TF_OK;
    case TF__OP_DET:
        if ((st = need_square(kind, l, msg, len)) != TF_OK) return st;
        meta_of(&out[0], dt, nb, s);
        return TF_OK;
    case TF__OP_SLOGDET:
        if ((st = need_square(kind, l, msg, len)) != TF_OK) return st;
        meta_of(&out[0], dt, nb, s);
        meta_of(&out[1], rt, nb, s);
        l->n_outputs = 2;
        return TF_OK;
    case TF__OP_SOLVE: {
        if ((st = need_square(kind, l, msg, len)) != TF_OK) return st;
        const tf__meta *bm = &in[1];
        /* B is [..., n] (a vector per matrix) or [..., n, nrhs], with A's batch axes. */
        const int vector = bm->rank == nb + 1;
        if (!vector && bm->rank != nb + 2) {
            snprintf(msg, len, "solve: B has rank %d: A's batch axes then [n] or [n, k] expected "
                     "(rank %d or %d)", bm->rank, nb + 1, nb + 2);
            return TF_ERR_SHAPE;
        }
        for (int i = 0; i < nb; i++)
            if (bm->shape[i] != s[i]) {
                snprintf(msg, len, "solve: batch axis %d is %lld in A and %lld in B", i,
                         (long long)s[i], (long long)bm->shape[i]);
                return TF_ERR_SHAPE;
            }
        if (bm->shape[nb] != l->n) {
            snprintf(msg, len, "solve: A is %lld x %lld, B has %lld rows", (long long)l->n,
                     (long long)l->n, (long long)bm->shape[nb]);
            return TF_ERR_SHAPE;
        }
        l->nrhs = vector ? 1 : bm->shape[nb + 1];
        out[0] = *bm;
        return TF_OK;
    }
    case TF__OP_NORM: {
        /* A rank-0 input is a vector of one element (numpy and the array API flatten it). */
        const int scalar_vector = l->norm_kind == TF__NORM_VECTOR && a->rank == 0;
        if (nr + nc < 1 && !scalar_vector) {
            snprintf(msg, len, "norm: no axis is left to reduce after %d batch axes", nb);
            return TF_ERR_AXIS;
        }
        if ((st = check_norm(l, nc, msg, len)) != TF_OK) return st;
        /*
         * The reduced axes are the rows and columns; keepdims leaves them as
         * size 1 where they were in the input, so the kept ones must stay in
         * the input's order (the output's bytes are the same either way).
         */
        int64_t shape[TF_MAX_RANK];
        int n = 0;
        if (l->keepdims) {
            for (int i = 1; i < nb; i++)
                if (l->has_perm && l->perm[i] < l->perm[i - 1]) {
                    snprintf(msg, len, "norm: with keepdims the kept axes stay in order (perm)");
                    return TF_ERR_AXIS;
                }
            for (int i = 0; i < a->rank; i++) shape[i] = a->shape[i];
            for (int i = nb; i < a->rank; i++) shape[l->has_perm ? l->perm[i] : i] = 1;
            n = a->rank;
        } else {
            push(shape, &n, s, nb);
        }
        meta_of(&out[0], rt, n, shape);
        if (l->norm_kind == TF__NORM_VECTOR) {
            l->n = l->m * l->n;
            l->m = 1;
            l->k = 1;
        }
        return TF_OK;
    }
    case TF__OP_TRACE:
    case TF__OP_DIAGONAL: {
        if (nr != 1 || nc != 1) {
            snprintf(msg, len, "%s: a batch of matrices [..., n, m] expected (one row and one "
                     "column axis)", name);
            return TF_ERR_AXIS;
        }
        const int64_t off = l->offset;
        /* Refused first: past this check -off cannot overflow (an offset of INT64_MIN). */
        if (off <= -l->m || off >= l->n) {
            snprintf(msg, len, "%s: offset %lld leaves no diagonal of a %lld x %lld matrix", name,
                     (long long)off, (long long)l->m, (long long)l->n);
            return TF_ERR_INVALID_ARGUMENT;
        }
        /* The diagonal's length (at least 1): rows from max(0, -off), columns from max(0, off). */
        const int64_t rows = l->m - (off < 0 ? -off : 0), cols = l->n - (off > 0 ? off : 0);
        const int64_t d = rows < cols ? rows : cols;
        l->k = d;
        int64_t shape[TF_MAX_RANK];
        int n = 0;
        push(shape, &n, s, nb);
        if (kind == TF__OP_DIAGONAL) shape[n++] = d;
        meta_of(&out[0], dt, n, shape);
        return TF_OK;
    }
    default: break;
    }
    snprintf(msg, len, "%s: not a linear-algebra kind", name);
    return TF_ERR_UNSUPPORTED;
}
