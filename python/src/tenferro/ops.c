/*
 * The operations: their argument parsing, and where they are queued. An
 * operation goes to its operands' context, in this order: the graph being
 * recorded (symbolic operands), the client's open held session (one
 * tf_session_with per operation, no round trip), its active scoped session
 * (queued on the burst's view), or else a scoped session of its own
 * (tf_with_session: one round trip, the GIL released). The library checks
 * shapes and dtypes at the call, so every refusal is typed and immediate.
 */
#include <math.h>
#include <string.h>

#include "_tenferro.h"

/* ---- running an operation on a view ---- */

static tf_status run_view(tf_view *v, tfp_op *op) {
    tf_tensor *in = op->in, *out = op->out;
    switch (op->kind) {
    case TFP_ADD: return tf_view_add(v, in[0], in[1], out);
    case TFP_SUB: return tf_view_sub(v, in[0], in[1], out);
    case TFP_MUL: return tf_view_mul(v, in[0], in[1], out);
    case TFP_DIV: return tf_view_div(v, in[0], in[1], out);
    case TFP_NEG: return tf_view_neg(v, in[0], out);
    case TFP_CONJ: return tf_view_conj(v, in[0], out);
    case TFP_ABS: return tf_view_abs(v, in[0], out);
    case TFP_EXP: return tf_view_exp(v, in[0], out);
    case TFP_LOG: return tf_view_log(v, in[0], out);
    case TFP_SQRT: return tf_view_sqrt(v, in[0], out);
    case TFP_SQUARE: return tf_view_square(v, in[0], out);
    case TFP_COPY: return tf_view_copy(v, in[0], out);
    case TFP_SCALE: return tf_view_scale(v, op->alpha, in[0], out);
    case TFP_AXPBY: return tf_view_axpby(v, op->alpha, in[0], op->beta, in[1], out);
    case TFP_PERMUTE: return tf_view_permute(v, in[0], op->n_axes, op->axes, out);
    case TFP_RESHAPE: return tf_view_reshape(v, in[0], op->rank, op->shape, out);
    case TFP_REDUCE:
        return tf_view_reduce(v, op->reduce, in[0], op->n_axes, op->axes, op->keepdims, out);
    case TFP_MATMUL: return tf_view_matmul(v, in[0], in[1], out);
    case TFP_EINSUM: return tf_view_einsum_opt(v, op->subscripts, op->n_in, in, &op->einsum, out);
    case TFP_FFT: return tf_view_fft(v, in[0], op->n_axes, op->axes, op->norm, out);
    case TFP_IFFT: return tf_view_ifft(v, in[0], op->n_axes, op->axes, op->norm, out);
    case TFP_RFFT: return tf_view_rfft(v, in[0], op->n_axes, op->axes, op->norm, out);
    case TFP_IRFFT:
        return tf_view_irfft(v, in[0], op->n_axes, op->axes, op->last_length, op->norm, out);
    case TFP_RUN_PREPARED:
        return tf_view_run_prepared(v, op->prepared, op->n_in, in, op->n_out, out);
    case TFP_VIEW_FN: return op->view_fn(v, op);
    }
    return TF_ERR_INTERNAL;
}

static tf_status run_cb(tf_view *v, void *arg) { return run_view(v, arg); }

PyObject *tfp_run(tfp_op *op, PyObject *const *operands, int n, int tuple_out) {
    if (n < 1 || n > TFP_MAX_IO) {
        PyErr_SetString(PyExc_ValueError, "wrong number of operands");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!tfp_is_tensor(operands[i])) {
            PyErr_Format(PyExc_TypeError,
                         "operand %d is %S, not a tenferro.Tensor: upload host data with "
                         "client.tensor() first",
                         i, (PyObject *)Py_TYPE(operands[i]));
            return NULL;
        }
    tfp_tensor *t0 = (tfp_tensor *)operands[0];
    tfp_client *c = t0->client;
    tfp_graph *g = t0->graph;
    for (int i = 0; i < n; i++) {
        tfp_tensor *t = (tfp_tensor *)operands[i];
        if (t->client != c) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "operand %d is a tensor of another client (client %llu, not %llu): tensors "
                     "live on the connection that made them",
                     i, (unsigned long long)t->client->id, (unsigned long long)c->id);
            return tfp_raise(TF_ERR_UNKNOWN_HANDLE, msg, -1);
        }
        if (t->graph != g)
            return tfp_raise(TF_ERR_INVALID_ARGUMENT,
                             g || t->graph
                                 ? "an operation mixes symbolic tensors of a graph being recorded "
                                   "with other tensors: pass real tensors to the prepared graph "
                                   "instead"
                                 : "operands of two graphs",
                             -1);
        if (!t->id) {
            char msg[100];
            snprintf(msg, sizeof msg, "operand %d was freed", i);
            return tfp_raise(TF_ERR_UNKNOWN_HANDLE, msg, -1);
        }
        op->in[i] = t->id;
    }
    if (g && !g->g)
        return tfp_raise(TF_ERR_INVALID_ARGUMENT,
                         "this graph was already prepared: its symbolic tensors take no more "
                         "operations",
                         -1);
    int n_out = op->kind == TFP_RUN_PREPARED || op->kind == TFP_VIEW_FN ? op->n_out : 1;
    memset(op->out, 0, sizeof(tf_tensor) * (size_t)n_out);
    if (tfp_lock(c) < 0) return NULL;
    tf_status st;
    int with_index = 0;
    if (g) {
        st = run_view(tf_graph_view(g->g), op);
    } else if (c->held) {
        st = tf_session_with(c->held->s, run_cb, op);
    } else if (c->scoped) {
        st = run_view(c->scoped->view, op);
    } else {
        tf_client *cc = c->c;
        Py_BEGIN_ALLOW_THREADS
        st = tf_with_session(cc, run_cb, op);
        Py_END_ALLOW_THREADS
        with_index = 1;
    }
    PyObject *result = NULL;
    if (st != TF_OK) {
        tfp_raise_client(c, st, with_index);
        /*
         * A burst of its own that ran and failed (a device failure: the
         * outputs exist, zero-filled) leaves results nobody will see: free
         * them. Handles the library did not keep are refused harmlessly, after
         * the exception took its message.
         */
        for (int k = 0; with_index && k < n_out; k++)
            if (op->out[k]) tf_tensor_free(c->c, op->out[k]);
        tfp_unlock(c);
        return NULL;
    }
    if (n_out == 1 && !tuple_out) {
        result = tfp_tensor_wrap(c, g, op->out[0]);
        if (!result && !g) tf_tensor_free(c->c, op->out[0]);
    } else {
        result = PyTuple_New(n_out);
        for (int k = 0; result && k < n_out; k++) {
            PyObject *t = tfp_tensor_wrap(c, g, op->out[k]);
            if (!t) {
                Py_CLEAR(result);
                for (int j = k; j < n_out && !g; j++) tf_tensor_free(c->c, op->out[j]);
                break;
            }
            PyTuple_SetItem(result, k, t);
        }
    }
    tfp_unlock(c);
    return result;
}

/* ---- argument helpers ---- */

int tfp_scalar_from(PyObject *o, tf_scalar *s, int *is_complex) {
    *is_complex = 0;
    if (PyFloat_Check(o) || PyLong_Check(o)) {
        s->re = PyFloat_AsDouble(o);
        s->im = 0;
        if (s->re == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        return 0;
    }
    if (PyUnicode_Check(o) || PyBytes_Check(o) || tfp_is_tensor(o)) return -1;
    if (PyComplex_Check(o) || PyObject_HasAttrString(o, "__complex__")) {
        PyObject *z = PyComplex_Check(o) ? TFP_REF(o)
                                         : PyObject_CallFunctionObjArgs((PyObject *)&PyComplex_Type, o, NULL);
        if (!z) {
            PyErr_Clear();
            return -1;
        }
        s->re = PyComplex_RealAsDouble(z);
        s->im = PyComplex_ImagAsDouble(z);
        Py_DECREF(z);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        *is_complex = PyComplex_Check(o) || s->im != 0.0;
        return 0;
    }
    if (PyObject_HasAttrString(o, "__float__")) {
        s->re = PyFloat_AsDouble(o);
        s->im = 0;
        if (s->re == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        return 0;
    }
    return -1;
}

int tfp_parse_axes(PyObject *o, int rank, int *n_axes, int axes[TF_MAX_RANK], int allow_none) {
    *n_axes = 0;
    if (o == Py_None) {
        if (allow_none) return 0;
        PyErr_SetString(PyExc_TypeError, "axes are required");
        return -1;
    }
    PyObject *seq;
    if (PyLong_Check(o) || PyIndex_Check(o)) {
        seq = PyTuple_Pack(1, o);
    } else {
        seq = PySequence_Tuple(o);
    }
    if (!seq) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "an axis is an int; axes are a sequence of ints");
        return -1;
    }
    Py_ssize_t n = PyTuple_Size(seq);
    if (n > TF_MAX_RANK) {
        Py_DECREF(seq);
        tfp_raise(TF_ERR_AXIS, "more axes than the rank", -1);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *idx = PyNumber_Index(PyTuple_GetItem(seq, i));
        if (!idx) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "an axis is an int; axes are a sequence of ints");
            return -1;
        }
        long a = PyLong_AsLong(idx);
        Py_DECREF(idx);
        if (a == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (a < -rank || a >= rank) {
            Py_DECREF(seq);
            char msg[160];
            snprintf(msg, sizeof msg, "axis %ld is out of range for a tensor of rank %d", a, rank);
            tfp_raise(TF_ERR_AXIS, msg, -1);
            return -1;
        }
        axes[i] = (int)(a < 0 ? a + rank : a);
    }
    Py_DECREF(seq);
    *n_axes = (int)n;
    return 0;
}

static tfp_tensor *as_tensor(PyObject *o, const char *what) {
    if (!tfp_is_tensor(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tenferro.Tensor, not %S", what,
                     (PyObject *)Py_TYPE(o));
        return NULL;
    }
    return (tfp_tensor *)o;
}

/* ---- the operations ---- */

PyObject *tfp_binary(int kind, PyObject *a, PyObject *b) {
    tfp_op op;
    if (tfp_is_tensor(a) && tfp_is_tensor(b)) {
        op.kind = kind;
        op.n_in = 2;
        PyObject *ab[2] = {a, b};
        return tfp_run(&op, ab, 2, 0);
    }
    /* A tensor times or over a scalar is a scale. */
    tf_scalar s;
    int is_complex;
    PyObject *t = NULL, *scalar = NULL;
    if (kind == TFP_MUL) {
        t = tfp_is_tensor(a) ? a : b;
        scalar = t == a ? b : a;
    } else if (kind == TFP_DIV && tfp_is_tensor(a)) {
        t = a;
        scalar = b;
    }
    if (!t || tfp_scalar_from(scalar, &s, &is_complex) < 0) Py_RETURN_NOTIMPLEMENTED;
    if (kind == TFP_DIV) {
        double d = s.re * s.re + s.im * s.im;
        if (d == 0.0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "tensor divided by zero");
            return NULL;
        }
        s.re = s.re / d;
        s.im = -s.im / d;
    }
    return tfp_scale(t, s);
}

PyObject *tfp_scale(PyObject *t, tf_scalar alpha) {
    tfp_tensor *tt = (tfp_tensor *)t;
    if ((tt->dtype == TF_F32 || tt->dtype == TF_F64) && alpha.im != 0.0)
        return tfp_raise(TF_ERR_DTYPE,
                         "a complex scalar times a real tensor: tenferrod does not promote dtypes "
                         "(make the tensor complex first)",
                         -1);
    tfp_op op;
    op.kind = TFP_SCALE;
    op.n_in = 1;
    op.alpha = alpha;
    return tfp_run(&op, &t, 1, 0);
}

PyObject *tfp_unary(int kind, PyObject *a) {
    if (!tfp_is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
    tfp_op op;
    op.kind = kind;
    op.n_in = 1;
    return tfp_run(&op, &a, 1, 0);
}

PyObject *tfp_reduce(PyObject *t, tf_reduce_kind kind, PyObject *axis, int keepdims) {
    tfp_tensor *tt = as_tensor(t, "the operand");
    if (!tt) return NULL;
    tfp_op op;
    op.kind = TFP_REDUCE;
    op.n_in = 1;
    op.reduce = kind;
    op.keepdims = keepdims;
    if (tfp_parse_axes(axis, tt->rank, &op.n_axes, op.axes, 1) < 0) return NULL;
    /* numpy's axis=() reduces nothing; the library's 0 axes mean all of them. */
    if (axis != Py_None && op.n_axes == 0) return tfp_unary(TFP_COPY, t);
    return tfp_run(&op, &t, 1, 0);
}

PyObject *tfp_transpose(PyObject *t, PyObject *axes) {
    tfp_tensor *tt = as_tensor(t, "the operand");
    if (!tt) return NULL;
    tfp_op op;
    op.kind = TFP_PERMUTE;
    op.n_in = 1;
    if (axes == Py_None) {
        op.n_axes = tt->rank;
        for (int i = 0; i < tt->rank; i++) op.axes[i] = tt->rank - 1 - i;
    } else if (tfp_parse_axes(axes, tt->rank, &op.n_axes, op.axes, 0) < 0) {
        return NULL;
    }
    return tfp_run(&op, &t, 1, 0);
}

PyObject *tfp_reshape(PyObject *t, PyObject *shape) {
    tfp_tensor *tt = as_tensor(t, "the operand");
    if (!tt) return NULL;
    tfp_op op;
    op.kind = TFP_RESHAPE;
    op.n_in = 1;
    if (tfp_parse_shape(shape, &op.rank, op.shape) < 0) return NULL;
    /* One -1 takes what the others leave, as numpy. */
    int64_t total = 1, known = 1;
    int infer = -1;
    for (int i = 0; i < tt->rank; i++) total *= tt->shape[i];
    for (int i = 0; i < op.rank; i++) {
        if (op.shape[i] == -1) {
            if (infer >= 0) return tfp_raise(TF_ERR_SHAPE, "reshape: only one -1 is allowed", -1);
            infer = i;
        } else {
            known *= op.shape[i];
        }
    }
    if (infer >= 0) {
        if (known <= 0 || total % known != 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "reshape: %lld elements do not fill the shape with -1",
                     (long long)total);
            return tfp_raise(TF_ERR_SHAPE, msg, -1);
        }
        op.shape[infer] = total / known;
    }
    return tfp_run(&op, &t, 1, 0);
}

/* ---- module functions ---- */

static PyObject *f_binary(int kind, PyObject *const *args, Py_ssize_t n, const char *name) {
    if (n != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes 2 arguments", name);
        return NULL;
    }
    PyObject *r = tfp_binary(kind, args[0], args[1]);
    if (r == Py_NotImplemented) {
        Py_DECREF(r);
        PyErr_Format(PyExc_TypeError,
                     "%s takes two tenferro.Tensor operands%s (got %S and %S)", name,
                     kind == TFP_MUL || kind == TFP_DIV ? ", or a tensor and a scalar" : "",
                     (PyObject *)Py_TYPE(args[0]), (PyObject *)Py_TYPE(args[1]));
        return NULL;
    }
    return r;
}

#define BINARY_FN(fname, kind)                                                                    \
    static PyObject *f_##fname(PyObject *self, PyObject *const *args, Py_ssize_t n) {             \
        (void)self;                                                                               \
        return f_binary(kind, args, n, #fname);                                                   \
    }
BINARY_FN(add, TFP_ADD)
BINARY_FN(subtract, TFP_SUB)
BINARY_FN(multiply, TFP_MUL)
BINARY_FN(divide, TFP_DIV)
BINARY_FN(matmul, TFP_MATMUL)

#define UNARY_FN(fname, kind)                                                                     \
    static PyObject *f_##fname(PyObject *self, PyObject *a) {                                     \
        (void)self;                                                                               \
        if (!as_tensor(a, "the operand")) return NULL;                                            \
        return tfp_unary(kind, a);                                                                \
    }
UNARY_FN(negative, TFP_NEG)
UNARY_FN(conj, TFP_CONJ)
UNARY_FN(absolute, TFP_ABS)
UNARY_FN(exp, TFP_EXP)
UNARY_FN(log, TFP_LOG)
UNARY_FN(sqrt, TFP_SQRT)
UNARY_FN(square, TFP_SQUARE)
UNARY_FN(copy, TFP_COPY)

static PyObject *f_axpby(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *a, *x, *b, *y;
    if (!PyArg_ParseTuple(args, "OOOO:axpby", &a, &x, &b, &y)) return NULL;
    tfp_op op;
    int ca, cb;
    if (tfp_scalar_from(a, &op.alpha, &ca) < 0 || tfp_scalar_from(b, &op.beta, &cb) < 0) {
        PyErr_SetString(PyExc_TypeError, "axpby(alpha, x, beta, y): alpha and beta are scalars");
        return NULL;
    }
    if (!as_tensor(x, "x") || !as_tensor(y, "y")) return NULL;
    tf_dtype d = ((tfp_tensor *)x)->dtype;
    if ((d == TF_F32 || d == TF_F64) && (op.alpha.im != 0 || op.beta.im != 0))
        return tfp_raise(TF_ERR_DTYPE, "complex coefficients for real tensors: no promotion", -1);
    op.kind = TFP_AXPBY;
    op.n_in = 2;
    PyObject *xy[2] = {x, y};
    return tfp_run(&op, xy, 2, 0);
}

static PyObject *f_transpose(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"a", "axes", NULL};
    PyObject *a, *axes = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:transpose", kwlist, &a, &axes)) return NULL;
    return tfp_transpose(a, axes);
}

static PyObject *f_reshape(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"a", "shape", NULL};
    PyObject *a, *shape;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:reshape", kwlist, &a, &shape)) return NULL;
    return tfp_reshape(a, shape);
}

static PyObject *f_reduce(PyObject *args, PyObject *kw, tf_reduce_kind k, const char *fmt) {
    static char *kwlist[] = {"a", "axis", "keepdims", NULL};
    PyObject *a, *axis = Py_None;
    int keepdims = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &a, &axis, &keepdims)) return NULL;
    return tfp_reduce(a, k, axis, keepdims);
}
static PyObject *f_sum(PyObject *s, PyObject *a, PyObject *k) {
    (void)s;
    return f_reduce(a, k, TF_REDUCE_SUM, "O|Op:sum");
}
static PyObject *f_max(PyObject *s, PyObject *a, PyObject *k) {
    (void)s;
    return f_reduce(a, k, TF_REDUCE_MAX, "O|Op:max");
}
static PyObject *f_min(PyObject *s, PyObject *a, PyObject *k) {
    (void)s;
    return f_reduce(a, k, TF_REDUCE_MIN, "O|Op:min");
}

/* _einsum(subscripts, operands, optimize, conj) */
static PyObject *f_einsum(PyObject *self, PyObject *args) {
    (void)self;
    const char *subs;
    PyObject *operands;
    int optimize;
    unsigned long long conj;
    if (!PyArg_ParseTuple(args, "sO!iK:_einsum", &subs, &PyTuple_Type, &operands, &optimize, &conj))
        return NULL;
    Py_ssize_t n = PyTuple_Size(operands);
    if (n < 1 || n > TF_EINSUM_MAX_OPERANDS) {
        char msg[120];
        snprintf(msg, sizeof msg, "einsum takes 1 to %d operands, not %zd", TF_EINSUM_MAX_OPERANDS, n);
        return tfp_raise(TF_ERR_INVALID_ARGUMENT, msg, -1);
    }
    tfp_op op;
    op.kind = TFP_EINSUM;
    op.n_in = (int)n;
    op.subscripts = subs;
    op.einsum.optimize = (tf_einsum_optimize)optimize;
    op.einsum.conj = conj;
    PyObject *items[TF_EINSUM_MAX_OPERANDS];
    for (Py_ssize_t i = 0; i < n; i++) items[i] = PyTuple_GetItem(operands, i);
    return tfp_run(&op, items, (int)n, 0);
}

/* _einsum_path(subscripts, operands, optimize, conj) -> dict */
static PyObject *f_einsum_path(PyObject *self, PyObject *args) {
    (void)self;
    const char *subs;
    PyObject *operands;
    int optimize;
    unsigned long long conj;
    if (!PyArg_ParseTuple(args, "sO!iK:_einsum_path", &subs, &PyTuple_Type, &operands, &optimize,
                          &conj))
        return NULL;
    Py_ssize_t n = PyTuple_Size(operands);
    if (n < 1 || n > TF_EINSUM_MAX_OPERANDS)
        return tfp_raise(TF_ERR_INVALID_ARGUMENT, "einsum_path takes 1 to 32 operands", -1);
    tf_tensor ids[TF_EINSUM_MAX_OPERANDS];
    tfp_client *c = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        tfp_tensor *t = as_tensor(PyTuple_GetItem(operands, i), "an einsum_path operand");
        if (!t) return NULL;
        if (t->graph)
            return tfp_raise(TF_ERR_INVALID_ARGUMENT,
                             "einsum_path reads real tensors' metadata, not symbolic ones", -1);
        if (c && t->client != c)
            return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "operands of two clients", -1);
        if (!t->id) return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "an operand was freed", -1);
        c = t->client;
        ids[i] = t->id;
    }
    if (tfp_lock(c) < 0) return NULL;
    tf_einsum_options opt = {(tf_einsum_optimize)optimize, conj};
    tf_einsum_path_info *info = NULL;
    tf_status st = tf_einsum_path(c->c, subs, (int)n, ids, &opt, &info);
    if (st != TF_OK) {
        tfp_raise_client(c, st, 0);
        tfp_unlock(c);
        return NULL;
    }
    tfp_unlock(c);
    PyObject *steps = PyList_New(info->n_steps);
    for (int k = 0; steps && k < info->n_steps; k++) {
        const tf_einsum_step *s = &info->steps[k];
        PyObject *item = Py_BuildValue("{s:i,s:i,s:d,s:L,s:i,s:s}", "a", s->a, "b", s->b, "flops",
                                       s->flops, "elements", (long long)s->elements, "scaling",
                                       s->scaling, "subscripts", s->subscripts);
        if (!item) {
            Py_CLEAR(steps);
            break;
        }
        PyList_SetItem(steps, k, item);
    }
    PyObject *r = steps ? Py_BuildValue("{s:i,s:i,s:N,s:d,s:d,s:L,s:s}", "optimize", (int)info->optimize,
                                        "n_operands", info->n_operands, "steps", steps, "flops",
                                        info->flops, "naive_flops", info->naive_flops,
                                        "largest_intermediate", (long long)info->largest_intermediate,
                                        "report", info->report)
                        : NULL;
    tf_einsum_path_free(info);
    return r;
}

static int parse_norm(PyObject *o, tf_fft_norm *norm) {
    if (o == Py_None) {
        *norm = TF_FFT_NORM_BACKWARD;
        return 0;
    }
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
    if (s && !strcmp(s, "backward")) *norm = TF_FFT_NORM_BACKWARD;
    else if (s && !strcmp(s, "ortho")) *norm = TF_FFT_NORM_ORTHO;
    else if (s && !strcmp(s, "forward")) *norm = TF_FFT_NORM_FORWARD;
    else {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "norm must be None, \"backward\", \"ortho\" or \"forward\" (as numpy.fft)");
        return -1;
    }
    return 0;
}

/* _fft(kind, a, axes, norm, last_length): kind 0 fft, 1 ifft, 2 rfft, 3 irfft. */
static PyObject *f_fft(PyObject *self, PyObject *args) {
    (void)self;
    int kind;
    PyObject *a, *axes, *norm;
    long long last_length;
    if (!PyArg_ParseTuple(args, "iOOOL:_fft", &kind, &a, &axes, &norm, &last_length)) return NULL;
    tfp_tensor *t = as_tensor(a, "the operand");
    if (!t) return NULL;
    tfp_op op;
    static const int kinds[] = {TFP_FFT, TFP_IFFT, TFP_RFFT, TFP_IRFFT};
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "unknown transform");
        return NULL;
    }
    op.kind = kinds[kind];
    op.n_in = 1;
    op.last_length = last_length;
    if (parse_norm(norm, &op.norm) < 0) return NULL;
    if (tfp_parse_axes(axes, t->rank, &op.n_axes, op.axes, 1) < 0) return NULL;
    return tfp_run(&op, &a, 1, 0);
}

static PyMethodDef ops_methods[] = {
    {"add", (PyCFunction)(void (*)(void))f_add, METH_FASTCALL, "add(a, b) -> Tensor: a + b elementwise (equal dtypes and shapes)."},
    {"subtract", (PyCFunction)(void (*)(void))f_subtract, METH_FASTCALL, "subtract(a, b) -> Tensor: a - b elementwise."},
    {"multiply", (PyCFunction)(void (*)(void))f_multiply, METH_FASTCALL, "multiply(a, b) -> Tensor: a * b elementwise, or a tensor times a scalar."},
    {"divide", (PyCFunction)(void (*)(void))f_divide, METH_FASTCALL, "divide(a, b) -> Tensor: a / b elementwise, or a tensor over a scalar."},
    {"matmul", (PyCFunction)(void (*)(void))f_matmul, METH_FASTCALL, "matmul(a, b) -> Tensor: [m,k] @ [k,n]; rank > 2 multiplies batches with identical leading dimensions."},
    {"negative", f_negative, METH_O, "negative(a) -> Tensor: -a."},
    {"conj", f_conj, METH_O, "conj(a) -> Tensor: the complex conjugate (a copy for real dtypes)."},
    {"absolute", f_absolute, METH_O, "absolute(a) -> Tensor: |a|; complex c64/c128 give real f32/f64."},
    {"exp", f_exp, METH_O, "exp(a) -> Tensor"},
    {"log", f_log, METH_O, "log(a) -> Tensor"},
    {"sqrt", f_sqrt, METH_O, "sqrt(a) -> Tensor"},
    {"square", f_square, METH_O, "square(a) -> Tensor: a * a elementwise"},
    {"copy", f_copy, METH_O, "copy(a) -> Tensor: a contiguous copy on the device."},
    {"axpby", f_axpby, METH_VARARGS, "axpby(alpha, x, beta, y) -> Tensor: alpha * x + beta * y in one operation."},
    {"transpose", (PyCFunction)(void (*)(void))f_transpose, METH_VARARGS | METH_KEYWORDS,
     "transpose(a, axes=None) -> Tensor: out.shape[i] = a.shape[axes[i]]; axes reversed by default."},
    {"reshape", (PyCFunction)(void (*)(void))f_reshape, METH_VARARGS | METH_KEYWORDS,
     "reshape(a, shape) -> Tensor: the same elements under a new shape (one -1 is inferred)."},
    {"sum", (PyCFunction)(void (*)(void))f_sum, METH_VARARGS | METH_KEYWORDS,
     "sum(a, axis=None, keepdims=False) -> Tensor: the sum over axis (an int, a tuple, or None for all)."},
    {"max", (PyCFunction)(void (*)(void))f_max, METH_VARARGS | METH_KEYWORDS,
     "max(a, axis=None, keepdims=False) -> Tensor: the maximum (real dtypes)."},
    {"min", (PyCFunction)(void (*)(void))f_min, METH_VARARGS | METH_KEYWORDS,
     "min(a, axis=None, keepdims=False) -> Tensor: the minimum (real dtypes)."},
    {"_einsum", f_einsum, METH_VARARGS, "Queues an einsum (use tenferro.einsum)."},
    {"_einsum_path", f_einsum_path, METH_VARARGS, "Reports an einsum's path (use tenferro.einsum_path)."},
    {"_fft", f_fft, METH_VARARGS, "Queues a transform (use tenferro.fft)."},
    {NULL, NULL, 0, NULL},
};

int tfp_ops_init(PyObject *m) { return PyModule_AddFunctions(m, ops_methods); }
