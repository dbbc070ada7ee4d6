/*
 * The linear algebra under tenferro.linalg (include/tenferro/linalg.h):
 * decompositions, solvers, norms, traces, diagonals, the strided slice that
 * trims truncated factors, and the reading of truncation reports.
 *
 * Each operation fills a la_args and runs through tfp_run (ops.c) as a
 * TFP_VIEW_FN, so it is queued where every operation is: the client's open
 * held session, its active scoped session, or a scoped session of its own
 * (one round trip), or a graph being recorded (tenferro.prepare: a node of
 * the graph, docs/linalg.md "Prepared graphs"). The library checks the arguments at
 * the call with the daemon's rules, so every refusal is typed and immediate;
 * numerical failures (NonFiniteError, SingularMatrixError, ...) come with the
 * boundary that reports the operation's result.
 *
 * The functions here are the private _svd, _qr, ... of the extension; their
 * numpy-style front ends are in linalg.py.
 */
#include <string.h>

#include "_tenferro.h"

/* Which call of linalg.h an operation is. */
typedef enum la_fn {
    LA_SVD,
    LA_SVD_TRUNCATED,
    LA_QR,
    LA_EIGH,
    LA_EIGH_TRUNCATED,
    LA_CHOLESKY,
    LA_SOLVE,
    LA_INV,
    LA_DET,
    LA_SLOGDET,
    LA_VECTOR_NORM,
    LA_MATRIX_NORM,
    LA_TRACE,
    LA_DIAGONAL,
    LA_SLICE,
} la_fn;

/* One operation's arguments, as la_view passes them to the library. */
typedef struct la_args {
    la_fn fn;
    int has_split; /* split below, else NULL (the matrix form) */
    tf_split split;
    int perm[TF_MAX_RANK]; /* split.perm points here when given */
    tf_truncation trunc;
    int full, compute_uv, upper;
    tf_qr_mode mode;
    double p;
    tf_matrix_norm ord;
    int n_axes, has_axes, keepdims;
    int axes[TF_MAX_RANK];
    int64_t offset;
    int64_t start[TF_MAX_RANK], step[TF_MAX_RANK], length[TF_MAX_RANK];
} la_args;

static tf_status la_view(tf_view *v, tfp_op *op) {
    const la_args *a = op->args;
    const tf_split *split = a->has_split ? &a->split : NULL;
    tf_tensor *in = op->in, *out = op->out;
    switch (a->fn) {
    case LA_SVD:
        return a->compute_uv ? tf_view_svd(v, in[0], split, a->full, &out[0], &out[1], &out[2])
                             : tf_view_svd(v, in[0], split, a->full, NULL, &out[0], NULL);
    case LA_SVD_TRUNCATED:
        return a->compute_uv ? tf_view_svd_truncated(v, in[0], split, &a->trunc, &out[0], &out[1],
                                                     &out[2], &out[3])
                             : tf_view_svd_truncated(v, in[0], split, &a->trunc, NULL, &out[0],
                                                     NULL, &out[1]);
    case LA_QR:
        return a->mode == TF_QR_R ? tf_view_qr(v, in[0], split, a->mode, NULL, &out[0])
                                  : tf_view_qr(v, in[0], split, a->mode, &out[0], &out[1]);
    case LA_EIGH:
        return tf_view_eigh(v, in[0], split, a->upper, &out[0], a->compute_uv ? &out[1] : NULL);
    case LA_EIGH_TRUNCATED:
        return a->compute_uv ? tf_view_eigh_truncated(v, in[0], split, a->upper, &a->trunc,
                                                      &out[0], &out[1], &out[2])
                             : tf_view_eigh_truncated(v, in[0], split, a->upper, &a->trunc,
                                                      &out[0], NULL, &out[1]);
    case LA_CHOLESKY: return tf_view_cholesky(v, in[0], a->upper, &out[0]);
    case LA_SOLVE: return tf_view_solve(v, in[0], in[1], &out[0]);
    case LA_INV: return tf_view_inv(v, in[0], &out[0]);
    case LA_DET: return tf_view_det(v, in[0], &out[0]);
    case LA_SLOGDET: return tf_view_slogdet(v, in[0], &out[0], &out[1]);
    case LA_VECTOR_NORM:
        return tf_view_vector_norm(v, in[0], a->p, a->n_axes, a->axes, a->keepdims, &out[0]);
    case LA_MATRIX_NORM:
        return tf_view_matrix_norm(v, in[0], a->ord, a->has_axes ? a->axes : NULL, a->keepdims,
                                   &out[0]);
    case LA_TRACE: return tf_view_trace(v, in[0], a->offset, &out[0]);
    case LA_DIAGONAL: return tf_view_diagonal(v, in[0], a->offset, &out[0]);
    case LA_SLICE: return tf_view_slice(v, in[0], a->start, a->step, a->length, &out[0]);
    }
    return TF_ERR_INTERNAL;
}

/* Runs the operation of a on its operands: a Tensor when n_out is 1, else a tuple of them. */
static PyObject *la_run(la_args *a, PyObject *const *operands, int n_in, int n_out) {
    tfp_op op;
    op.kind = TFP_VIEW_FN;
    op.n_in = n_in;
    op.n_out = n_out;
    op.view_fn = la_view;
    op.args = a;
    return tfp_run(&op, operands, n_in, 0);
}

static tfp_tensor *la_tensor(PyObject *o, const char *what) {
    if (!tfp_is_tensor(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a tenferro.Tensor, not %S: upload host data with client.tensor() "
                     "first",
                     what, (PyObject *)Py_TYPE(o));
        return NULL;
    }
    return (tfp_tensor *)o;
}

static la_args *la_init(la_args *a, la_fn fn) {
    memset(a, 0, sizeof *a);
    a->fn = fn;
    return a;
}

/*
 * The split: None (the matrix form) or (perm, n_batch, n_rows), perm None or
 * a permutation of every axis (negative axes count from the end).
 */
static int parse_split(PyObject *o, const tfp_tensor *t, la_args *a) {
    if (o == Py_None) return 0;
    PyObject *perm;
    int nb, nr;
    if (!PyTuple_Check(o) || !PyArg_ParseTuple(o, "Oii", &perm, &nb, &nr)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a split is None or (perm, n_batch, n_rows)");
        return -1;
    }
    a->has_split = 1;
    a->split.n_batch = nb;
    a->split.n_rows = nr;
    a->split.perm = NULL;
    if (perm != Py_None) {
        int n;
        if (tfp_parse_axes(perm, t->rank, &n, a->perm, 0) < 0) return -1;
        if (n != t->rank) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "split: the axes name %d of the %d axes (rows, then columns: every axis once)",
                     n, t->rank);
            tfp_raise(TF_ERR_AXIS, msg, -1);
            return -1;
        }
        a->split.perm = a->perm;
    }
    return 0;
}

/*
 * The truncation: (max_rank, min_rank, cutoff, rel_cutoff, discarded_weight,
 * rel_discarded_weight, keep_degenerate, absorb, renormalize), zeros unused.
 */
static int parse_truncation(PyObject *o, tf_truncation *t) {
    long long max_rank, min_rank;
    int keep, absorb, renorm;
    if (!PyTuple_Check(o) ||
        !PyArg_ParseTuple(o, "LLddddiii", &max_rank, &min_rank, &t->cutoff, &t->rel_cutoff,
                          &t->discarded_weight, &t->rel_discarded_weight, &keep, &absorb, &renorm)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "a truncation is (max_rank, min_rank, cutoff, rel_cutoff, "
                        "discarded_weight, rel_discarded_weight, keep_degenerate, absorb, "
                        "renormalize)");
        return -1;
    }
    t->max_rank = max_rank;
    t->min_rank = min_rank;
    t->keep_degenerate = keep;
    t->absorb = (tf_absorb)absorb;
    t->renormalize = renorm;
    return 0;
}

/* _svd(a, full_matrices, compute_uv) -> (U, S, Vh) or S */
static PyObject *f_svd(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x;
    la_args a;
    la_init(&a, LA_SVD);
    if (!PyArg_ParseTuple(args, "Opp:_svd", &x, &a.full, &a.compute_uv)) return NULL;
    return la_run(&a, &x, 1, a.compute_uv ? 3 : 1);
}

/* _svd_truncated(a, split, truncation, compute_uv) -> (U, S, Vh, report) or (S, report) */
static PyObject *f_svd_truncated(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *split, *trunc;
    la_args a;
    la_init(&a, LA_SVD_TRUNCATED);
    if (!PyArg_ParseTuple(args, "OOOp:_svd_truncated", &x, &split, &trunc, &a.compute_uv))
        return NULL;
    tfp_tensor *t = la_tensor(x, "a");
    if (!t || parse_split(split, t, &a) < 0 || parse_truncation(trunc, &a.trunc) < 0) return NULL;
    return la_run(&a, &x, 1, a.compute_uv ? 4 : 2);
}

/* _qr(a, mode) -> (Q, R), or R for mode 2 */
static PyObject *f_qr(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x;
    int mode;
    la_args a;
    la_init(&a, LA_QR);
    if (!PyArg_ParseTuple(args, "Oi:_qr", &x, &mode)) return NULL;
    if (mode < TF_QR_REDUCED || mode > TF_QR_R) {
        PyErr_SetString(PyExc_ValueError, "qr: unknown mode");
        return NULL;
    }
    a.mode = (tf_qr_mode)mode;
    return la_run(&a, &x, 1, a.mode == TF_QR_R ? 1 : 2);
}

/* _eigh(a, upper, compute_v) -> (W, V) or W */
static PyObject *f_eigh(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x;
    la_args a;
    la_init(&a, LA_EIGH);
    if (!PyArg_ParseTuple(args, "Opp:_eigh", &x, &a.upper, &a.compute_uv)) return NULL;
    return la_run(&a, &x, 1, a.compute_uv ? 2 : 1);
}

/* _eigh_truncated(a, split, upper, truncation, compute_v) -> (W, V, report) or (W, report) */
static PyObject *f_eigh_truncated(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *split, *trunc;
    la_args a;
    la_init(&a, LA_EIGH_TRUNCATED);
    if (!PyArg_ParseTuple(args, "OOpOp:_eigh_truncated", &x, &split, &a.upper, &trunc,
                          &a.compute_uv))
        return NULL;
    tfp_tensor *t = la_tensor(x, "a");
    if (!t || parse_split(split, t, &a) < 0 || parse_truncation(trunc, &a.trunc) < 0) return NULL;
    return la_run(&a, &x, 1, a.compute_uv ? 3 : 2);
}

/* _cholesky(a, upper) */
static PyObject *f_cholesky(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x;
    la_args a;
    la_init(&a, LA_CHOLESKY);
    if (!PyArg_ParseTuple(args, "Op:_cholesky", &x, &a.upper)) return NULL;
    return la_run(&a, &x, 1, 1);
}

/* _solve(a, b) */
static PyObject *f_solve(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ab[2];
    la_args a;
    la_init(&a, LA_SOLVE);
    if (!PyArg_ParseTuple(args, "OO:_solve", &ab[0], &ab[1])) return NULL;
    return la_run(&a, ab, 2, 1);
}

#define LA_UNARY(fname, fn, n_out)                                                                \
    static PyObject *f_##fname(PyObject *self, PyObject *x) {                                     \
        (void)self;                                                                               \
        la_args a;                                                                                \
        return la_run(la_init(&a, fn), &x, 1, n_out);                                             \
    }
LA_UNARY(inv, LA_INV, 1)
LA_UNARY(det, LA_DET, 1)
LA_UNARY(slogdet, LA_SLOGDET, 2)

/* _vector_norm(a, p, axes, keepdims): axes None reduces every axis. */
static PyObject *f_vector_norm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *axes;
    la_args a;
    la_init(&a, LA_VECTOR_NORM);
    if (!PyArg_ParseTuple(args, "OdOp:_vector_norm", &x, &a.p, &axes, &a.keepdims)) return NULL;
    tfp_tensor *t = la_tensor(x, "x");
    if (!t || tfp_parse_axes(axes, t->rank, &a.n_axes, a.axes, 1) < 0) return NULL;
    if (axes != Py_None && a.n_axes == 0)
        return tfp_raise(TF_ERR_AXIS, "norm: axis=() names no axis to reduce", -1);
    return la_run(&a, &x, 1, 1);
}

/* _matrix_norm(a, ord, axes, keepdims): ord a tf_matrix_norm, axes None (the last two) or two. */
static PyObject *f_matrix_norm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *axes;
    int ord;
    la_args a;
    la_init(&a, LA_MATRIX_NORM);
    if (!PyArg_ParseTuple(args, "OiOp:_matrix_norm", &x, &ord, &axes, &a.keepdims)) return NULL;
    a.ord = (tf_matrix_norm)ord;
    tfp_tensor *t = la_tensor(x, "x");
    if (!t || tfp_parse_axes(axes, t->rank, &a.n_axes, a.axes, 1) < 0) return NULL;
    if (axes != Py_None) {
        if (a.n_axes != 2)
            return tfp_raise(TF_ERR_AXIS, "norm: a matrix norm takes two axes (rows, columns)", -1);
        a.has_axes = 1;
    }
    return la_run(&a, &x, 1, 1);
}

/* _trace(a, offset) and _diagonal(a, offset) */
static PyObject *f_offset(PyObject *args, la_fn fn, const char *fmt) {
    PyObject *x;
    long long offset;
    la_args a;
    la_init(&a, fn);
    if (!PyArg_ParseTuple(args, fmt, &x, &offset)) return NULL;
    a.offset = offset;
    return la_run(&a, &x, 1, 1);
}
static PyObject *f_trace(PyObject *self, PyObject *args) {
    (void)self;
    return f_offset(args, LA_TRACE, "OL:_trace");
}
static PyObject *f_diagonal(PyObject *self, PyObject *args) {
    (void)self;
    return f_offset(args, LA_DIAGONAL, "OL:_diagonal");
}

/* Reads one int per axis of a sequence into out; -1 with an exception. */
static int int64_list(PyObject *o, int rank, int64_t *out, const char *what) {
    PyObject *seq = PySequence_Tuple(o);
    if (!seq) return -1;
    if (PyTuple_Size(seq) != rank) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "slice: %s has %zd entries for a tensor of rank %d", what,
                     PyTuple_Size(seq), rank);
        return -1;
    }
    for (int i = 0; i < rank; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GetItem(seq, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* _slice(a, start, step, length): per axis, length elements from start in steps of step. */
static PyObject *f_slice(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *start, *step, *length;
    la_args a;
    la_init(&a, LA_SLICE);
    if (!PyArg_ParseTuple(args, "OOOO:_slice", &x, &start, &step, &length)) return NULL;
    tfp_tensor *t = la_tensor(x, "a");
    if (!t || int64_list(start, t->rank, a.start, "start") < 0 ||
        int64_list(step, t->rank, a.step, "step") < 0 ||
        int64_list(length, t->rank, a.length, "length") < 0)
        return NULL;
    return la_run(&a, &x, 1, 1);
}

/*
 * _read_report(report) -> [(rank, discarded_weight, truncation_error), ...],
 * one per matrix of the batch: tf_truncation_report_read, one wait (the GIL
 * released). Inside a held session a report of unsubmitted work is submitted
 * first (a submit does not wait), so the read is the only wait.
 */
static PyObject *f_read_report(PyObject *self, PyObject *x) {
    (void)self;
    tfp_tensor *t = la_tensor(x, "report");
    if (!t) return NULL;
    if (t->graph)
        return tfp_raise(TF_ERR_INVALID_ARGUMENT, "a symbolic tensor has no report to read", -1);
    if (!t->id) return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "the report was freed", -1);
    if (t->rank < 1 || t->dtype != TF_F64)
        return tfp_raise(TF_ERR_INVALID_ARGUMENT, "not a truncation report (f64 [..., 3])", -1);
    Py_ssize_t n = 1;
    for (int i = 0; i < t->rank - 1; i++) n *= (Py_ssize_t)t->shape[i];
    tf_truncation_report *r = PyMem_Calloc((size_t)n, sizeof *r);
    if (!r) return PyErr_NoMemory();
    tfp_client *c = t->client;
    if (tfp_lock(c) < 0) {
        PyMem_Free(r);
        return NULL;
    }
    tf_client *cc = c->c;
    const tf_tensor id = t->id;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_truncation_report_read(cc, id, r, (size_t)n);
    Py_END_ALLOW_THREADS
    if (st == TF_ERR_BUSY && c->held) {
        /* The report's operation is still queued here: hand it over, then read. */
        tf_session *s = c->held->s;
        Py_BEGIN_ALLOW_THREADS
        st = tf_session_submit(s);
        if (st == TF_OK) st = tf_truncation_report_read(cc, id, r, (size_t)n);
        Py_END_ALLOW_THREADS
    }
    PyObject *out = NULL;
    if (st != TF_OK) {
        tfp_raise_client(c, st, 1);
    } else {
        out = PyList_New(n);
        for (Py_ssize_t i = 0; out && i < n; i++) {
            PyObject *item = Py_BuildValue("(Ldd)", (long long)r[i].rank, r[i].discarded_weight,
                                           r[i].truncation_error);
            if (!item) {
                Py_CLEAR(out);
                break;
            }
            PyList_SetItem(out, i, item);
        }
    }
    tfp_unlock(c);
    PyMem_Free(r);
    return out;
}

static PyMethodDef linalg_methods[] = {
    {"_svd", f_svd, METH_VARARGS, "Queues an SVD (use tenferro.linalg.svd)."},
    {"_svd_truncated", f_svd_truncated, METH_VARARGS,
     "Queues a truncated SVD (use tenferro.linalg.svd_truncated)."},
    {"_qr", f_qr, METH_VARARGS, "Queues a QR decomposition (use tenferro.linalg.qr)."},
    {"_eigh", f_eigh, METH_VARARGS, "Queues a Hermitian eigendecomposition (use tenferro.linalg.eigh)."},
    {"_eigh_truncated", f_eigh_truncated, METH_VARARGS,
     "Queues a truncated eigh (use tenferro.linalg.eigh_truncated)."},
    {"_cholesky", f_cholesky, METH_VARARGS, "Queues a Cholesky factorization (use tenferro.linalg.cholesky)."},
    {"_solve", f_solve, METH_VARARGS, "Queues a linear solve (use tenferro.linalg.solve)."},
    {"_inv", f_inv, METH_O, "Queues an inverse (use tenferro.linalg.inv)."},
    {"_det", f_det, METH_O, "Queues a determinant (use tenferro.linalg.det)."},
    {"_slogdet", f_slogdet, METH_O, "Queues a sign and log-determinant (use tenferro.linalg.slogdet)."},
    {"_vector_norm", f_vector_norm, METH_VARARGS, "Queues a vector norm (use tenferro.linalg.norm)."},
    {"_matrix_norm", f_matrix_norm, METH_VARARGS, "Queues a matrix norm (use tenferro.linalg.norm)."},
    {"_trace", f_trace, METH_VARARGS, "Queues a trace (use tenferro.linalg.trace)."},
    {"_diagonal", f_diagonal, METH_VARARGS, "Queues a diagonal (use tenferro.linalg.diagonal)."},
    {"_slice", f_slice, METH_VARARGS,
     "_slice(a, start, step, length) -> Tensor: a strided slice as a contiguous copy "
     "(tf_view_slice)."},
    {"_read_report", f_read_report, METH_O,
     "Reads a truncation report, one (rank, discarded_weight, truncation_error) per matrix "
     "(use the report of tenferro.linalg.svd_truncated)."},
    {NULL, NULL, 0, NULL},
};

int tfp_linalg_init(PyObject *m) { return PyModule_AddFunctions(m, linalg_methods); }
