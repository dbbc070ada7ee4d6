/*
 * tenferro.Tensor: a handle to a tensor of one client (or a symbolic value of
 * a graph being recorded), with its dtype and shape kept here so reading them
 * needs no call; downloads into new or given arrays, and the numpy-style
 * operators, which queue operations through ops.c.
 */
#include <string.h>

#include "_tenferro.h"

PyTypeObject *tfp_TensorType;

int tfp_is_tensor(PyObject *o) { return Py_IS_TYPE(o, tfp_TensorType); }

PyObject *tfp_tensor_new(tfp_client *c, tfp_graph *g, tf_tensor id, tf_dtype dtype, int rank,
                         const int64_t *shape) {
    tfp_tensor *t = PyObject_New(tfp_tensor, tfp_TensorType);
    if (!t) return NULL;
    t->client = (tfp_client *)TFP_REF(c);
    t->graph = g ? (tfp_graph *)TFP_REF(g) : NULL;
    t->id = id;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->transfer = NULL;
    return (PyObject *)t;
}

PyObject *tfp_tensor_wrap(tfp_client *c, tfp_graph *g, tf_tensor id) {
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    tf_status st = g ? tf_graph_tensor_info(g->g, id, &dt, &rank, shape)
                     : tf_tensor_info(c->c, id, &dt, &rank, shape);
    if (st != TF_OK) return tfp_raise_client(c, st, 0);
    return tfp_tensor_new(c, g, id, dt, rank, shape);
}

static void tensor_dealloc(tfp_tensor *self) {
    TFP_DEALLOC_BEGIN;
    if (self->id && !self->graph && self->client) tfp_free_later(self->client, self->id);
    Py_XDECREF((PyObject *)self->client);
    Py_XDECREF((PyObject *)self->graph);
    TFP_DEALLOC_END;
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* -1 with an exception unless the tensor can be read: a live tensor of an open client. */
static int check_readable(tfp_tensor *t) {
    if (t->graph) {
        tfp_raise(TF_ERR_INVALID_ARGUMENT,
                  "this is a symbolic tensor of a graph being recorded: it has no value to read",
                  -1);
        return -1;
    }
    if (!t->client->c) {
        tfp_raise_closed();
        return -1;
    }
    if (!t->id) {
        tfp_raise(TF_ERR_UNKNOWN_HANDLE, "this tensor was freed", -1);
        return -1;
    }
    return 0;
}

static size_t tensor_nbytes(const tfp_tensor *t) {
    size_t n = tf_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) n *= (size_t)t->shape[i];
    return n;
}

/* Downloads t into the writable C-contiguous buffer of `into` (its bytes must match). */
static int download_into(tfp_tensor *t, PyObject *into) {
    Py_buffer view;
    if (PyObject_GetBuffer(into, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        tfp_raise(TF_ERR_INVALID_ARGUMENT,
                  "into= must be a writable C-contiguous buffer (an ndarray of the tensor's shape "
                  "and dtype)",
                  -1);
        return -1;
    }
    size_t n = tensor_nbytes(t);
    int rc = -1;
    tf_dtype fmt = tfp_dtype_from_format(view.format);
    if ((size_t)view.len != n) {
        char msg[200];
        snprintf(msg, sizeof msg, "into= has %zd bytes but the tensor has %zu", view.len, n);
        tfp_raise(TF_ERR_SHAPE, msg, -1);
    } else if (fmt && fmt != t->dtype) {
        char msg[200];
        snprintf(msg, sizeof msg, "into= holds %s but the tensor is %s", tfp_dtype_name(fmt),
                 tfp_dtype_name(t->dtype));
        tfp_raise(TF_ERR_DTYPE, msg, -1);
    } else if (tfp_lock(t->client) == 0) {
        void *buf = view.buf;
        size_t cap = n;
        tf_status st;
        /* capacity == size: the library writes into buf and never reallocates it. */
        Py_BEGIN_ALLOW_THREADS
        st = tf_download_into(t->client->c, t->id, &buf, &cap);
        Py_END_ALLOW_THREADS
        if (st != TF_OK)
            tfp_raise_client(t->client, st, 1);
        else
            rc = 0;
        tfp_unlock(t->client);
    }
    PyBuffer_Release(&view);
    return rc;
}

static PyObject *tensor_download(tfp_tensor *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"into", NULL};
    PyObject *into = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:download", kwlist, &into)) return NULL;
    if (check_readable(self) < 0) return NULL;
    if (into == Py_None) {
        PyObject *np = tfp_numpy();
        if (!np) return NULL;
        PyObject *shape = tfp_shape_tuple(self->rank, self->shape);
        PyObject *dt = shape ? tfp_numpy_dtype(self->dtype) : NULL;
        into = dt ? PyObject_CallMethod(np, "empty", "OO", shape, dt) : NULL;
        Py_XDECREF(shape);
        Py_XDECREF(dt);
        if (!into) return NULL;
        if (download_into(self, into) < 0) {
            Py_DECREF(into);
            return NULL;
        }
        return into;
    }
    if (download_into(self, into) < 0) return NULL;
    return TFP_REF(into);
}

static PyObject *tensor_numpy(tfp_tensor *self, PyObject *unused) {
    (void)unused;
    PyObject *args = PyTuple_New(0);
    if (!args) return NULL;
    PyObject *r = tensor_download(self, args, NULL);
    Py_DECREF(args);
    return r;
}

static PyObject *tensor_array(tfp_tensor *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", kwlist, &dtype, &copy)) return NULL;
    if (copy == Py_False) {
        PyErr_SetString(PyExc_ValueError,
                        "a Tensor lives on the daemon's device: numpy gets it by a download, a copy");
        return NULL;
    }
    PyObject *arr = tensor_numpy(self, NULL);
    if (!arr || dtype == Py_None) return arr;
    PyObject *r = PyObject_CallMethod(arr, "astype", "O", dtype);
    Py_DECREF(arr);
    return r;
}

static PyObject *tensor_free(tfp_tensor *self, PyObject *unused) {
    (void)unused;
    if (self->graph || !self->id) Py_RETURN_NONE;
    if (tfp_lock(self->client) < 0) return NULL;
    tf_status st = tf_tensor_free(self->client->c, self->id);
    PyObject *r = NULL;
    if (st == TF_OK) {
        self->id = 0;
        r = TFP_REF(Py_None);
    } else {
        tfp_raise_client(self->client, st, 0);
    }
    tfp_unlock(self->client);
    return r;
}

/* ---- attributes ---- */

static PyObject *get_shape(tfp_tensor *self, void *c) {
    (void)c;
    return tfp_shape_tuple(self->rank, self->shape);
}
static PyObject *get_dtype(tfp_tensor *self, void *c) {
    (void)c;
    return tfp_numpy_dtype(self->dtype);
}
static PyObject *get_ndim(tfp_tensor *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->rank);
}
static PyObject *get_size(tfp_tensor *self, void *c) {
    (void)c;
    long long n = 1;
    for (int i = 0; i < self->rank; i++) n *= self->shape[i];
    return PyLong_FromLongLong(n);
}
static PyObject *get_nbytes(tfp_tensor *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(tensor_nbytes(self));
}
static PyObject *get_client(tfp_tensor *self, void *c) {
    (void)c;
    return TFP_REF(self->client);
}
static PyObject *get_symbolic(tfp_tensor *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->graph != NULL);
}
static PyObject *get_handle(tfp_tensor *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->id);
}
static PyObject *get_freed(tfp_tensor *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->id == 0);
}
static PyObject *get_T(tfp_tensor *self, void *c) {
    (void)c;
    return tfp_transpose((PyObject *)self, Py_None);
}

static PyObject *tensor_repr(tfp_tensor *self) {
    char shape[160];
    int k = 0;
    k += snprintf(shape + k, sizeof shape - (size_t)k, "(");
    for (int i = 0; i < self->rank; i++)
        k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld", i ? ", " : "",
                      (long long)self->shape[i]);
    snprintf(shape + k, sizeof shape - (size_t)k, self->rank == 1 ? ",)" : ")");
    if (self->graph)
        return PyUnicode_FromFormat("<tenferro.Tensor symbolic shape=%s dtype=%s>", shape,
                                    tfp_dtype_name(self->dtype));
    if (!self->id)
        return PyUnicode_FromFormat("<tenferro.Tensor freed shape=%s dtype=%s>", shape,
                                    tfp_dtype_name(self->dtype));
    return PyUnicode_FromFormat("<tenferro.Tensor shape=%s dtype=%s client=%llu id=%llu%s>", shape,
                                tfp_dtype_name(self->dtype), (unsigned long long)self->client->id,
                                (unsigned long long)self->id,
                                self->transfer ? " in a pending transfer" : "");
}

/* ---- methods that are operations ---- */

static PyObject *tensor_transpose(tfp_tensor *self, PyObject *args) {
    Py_ssize_t n = PyTuple_Size(args);
    if (n == 0) return tfp_transpose((PyObject *)self, Py_None);
    if (n == 1 && !PyLong_Check(PyTuple_GetItem(args, 0)))
        return tfp_transpose((PyObject *)self, PyTuple_GetItem(args, 0));
    return tfp_transpose((PyObject *)self, args);
}

static PyObject *tensor_reshape(tfp_tensor *self, PyObject *args) {
    Py_ssize_t n = PyTuple_Size(args);
    if (n == 1) return tfp_reshape((PyObject *)self, PyTuple_GetItem(args, 0));
    return tfp_reshape((PyObject *)self, args);
}

static PyObject *reduce_method(tfp_tensor *self, PyObject *args, PyObject *kw, tf_reduce_kind k) {
    static char *kwlist[] = {"axis", "keepdims", NULL};
    PyObject *axis = Py_None;
    int keepdims = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op", kwlist, &axis, &keepdims)) return NULL;
    return tfp_reduce((PyObject *)self, k, axis, keepdims);
}
static PyObject *tensor_sum(tfp_tensor *s, PyObject *a, PyObject *k) { return reduce_method(s, a, k, TF_REDUCE_SUM); }
static PyObject *tensor_max(tfp_tensor *s, PyObject *a, PyObject *k) { return reduce_method(s, a, k, TF_REDUCE_MAX); }
static PyObject *tensor_min(tfp_tensor *s, PyObject *a, PyObject *k) { return reduce_method(s, a, k, TF_REDUCE_MIN); }
static PyObject *tensor_conj(tfp_tensor *s, PyObject *u) {
    (void)u;
    return tfp_unary(TFP_CONJ, (PyObject *)s);
}
/*
 * copy_to(client): this tensor copied onto the device of another client's
 * daemon (tf_copy_to, docs/multi-gpu.md). Both clients' locks are taken in
 * address order, so two threads copying opposite ways cannot deadlock.
 */
static PyObject *tensor_copy_to(tfp_tensor *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, tfp_ClientType)) {
        PyErr_SetString(PyExc_TypeError, "copy_to(client): client is a tenferro.Client");
        return NULL;
    }
    if (check_readable(self) < 0) return NULL;
    tfp_client *from = self->client, *to = (tfp_client *)arg;
    tfp_client *first = from < to ? from : to, *second = from < to ? to : from;
    if (tfp_lock(first) < 0) return NULL;
    if (second != first && tfp_lock(second) < 0) {
        tfp_unlock(first);
        return NULL;
    }
    tf_tensor made = 0;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_copy_to(from->c, self->id, to->c, &made);
    Py_END_ALLOW_THREADS
    PyObject *r = st == TF_OK ? tfp_tensor_new(to, NULL, made, self->dtype, self->rank, self->shape)
                              : tfp_raise_client(to, st, 0);
    if (second != first) tfp_unlock(second);
    tfp_unlock(first);
    return r;
}

static PyObject *tensor_copy(tfp_tensor *s, PyObject *u) {
    (void)u;
    return tfp_unary(TFP_COPY, (PyObject *)s);
}

/* ---- number slots ---- */

static PyObject *nb_add(PyObject *a, PyObject *b) { return tfp_binary(TFP_ADD, a, b); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return tfp_binary(TFP_SUB, a, b); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return tfp_binary(TFP_MUL, a, b); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return tfp_binary(TFP_DIV, a, b); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) { return tfp_binary(TFP_MATMUL, a, b); }
static PyObject *nb_neg(PyObject *a) { return tfp_unary(TFP_NEG, a); }
static PyObject *nb_abs(PyObject *a) { return tfp_unary(TFP_ABS, a); }
static PyObject *nb_pos(PyObject *a) { return TFP_REF(a); }

static PyMethodDef tensor_methods[] = {
    {"numpy", (PyCFunction)tensor_numpy, METH_NOARGS,
     "numpy() -> numpy.ndarray\n\nDownloads the value into a new array (blocking, the GIL released; "
     "ordered after the work submitted before it)."},
    {"download", (PyCFunction)(void (*)(void))tensor_download, METH_VARARGS | METH_KEYWORDS,
     "download(*, into=None) -> numpy.ndarray\n\nDownloads the value into `into` (a writable "
     "C-contiguous array or buffer of exactly the tensor's bytes and, when it has one, its dtype) "
     "and returns it; without into, into a new array."},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS,
     "numpy.asarray(t) downloads the tensor."},
    {"free", (PyCFunction)tensor_free, METH_NOARGS,
     "free() -> None\n\nFrees the tensor now (after queued work that uses it) instead of when the "
     "object is collected. The handle is unusable afterwards."},
    {"transpose", (PyCFunction)tensor_transpose, METH_VARARGS,
     "transpose(*axes) -> Tensor\n\nThe axes permuted (reversed without arguments), as numpy."},
    {"reshape", (PyCFunction)tensor_reshape, METH_VARARGS,
     "reshape(*shape) -> Tensor\n\nThe same elements under a new shape (one -1 is inferred)."},
    {"sum", (PyCFunction)(void (*)(void))tensor_sum, METH_VARARGS | METH_KEYWORDS,
     "sum(axis=None, keepdims=False) -> Tensor"},
    {"max", (PyCFunction)(void (*)(void))tensor_max, METH_VARARGS | METH_KEYWORDS,
     "max(axis=None, keepdims=False) -> Tensor (real dtypes)"},
    {"min", (PyCFunction)(void (*)(void))tensor_min, METH_VARARGS | METH_KEYWORDS,
     "min(axis=None, keepdims=False) -> Tensor (real dtypes)"},
    {"conj", (PyCFunction)tensor_conj, METH_NOARGS, "conj() -> Tensor: the complex conjugate."},
    {"copy", (PyCFunction)tensor_copy, METH_NOARGS, "copy() -> Tensor: a copy on the device."},
    {"copy_to", (PyCFunction)tensor_copy_to, METH_O,
     "copy_to(client) -> Tensor: a copy on the device of another client's daemon (another GPU of "
     "this host, or another daemon of the same one), made without a trip through this process."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "The shape, a tuple of ints.", NULL},
    {"dtype", (getter)get_dtype, NULL, "The numpy dtype (float32, float64, complex64, complex128).", NULL},
    {"ndim", (getter)get_ndim, NULL, "The rank.", NULL},
    {"size", (getter)get_size, NULL, "The number of elements.", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "The bytes of the data.", NULL},
    {"client", (getter)get_client, NULL, "The client the tensor belongs to.", NULL},
    {"symbolic", (getter)get_symbolic, NULL, "True for a value of a graph being recorded.", NULL},
    {"handle", (getter)get_handle, NULL, "The library's tensor id (0 once freed).", NULL},
    {"freed", (getter)get_freed, NULL, "True once freed or given away.", NULL},
    {"T", (getter)get_T, NULL, "The transpose (axes reversed).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int tfp_tensor_init_type(PyObject *m) {
    PyType_Slot slots[] = {
        {Py_tp_dealloc, tensor_dealloc},
        {Py_tp_repr, tensor_repr},
        {Py_tp_methods, tensor_methods},
        {Py_tp_getset, tensor_getset},
        {Py_nb_add, nb_add},
        {Py_nb_subtract, nb_sub},
        {Py_nb_multiply, nb_mul},
        {Py_nb_true_divide, nb_div},
        {Py_nb_matrix_multiply, nb_matmul},
        {Py_nb_negative, nb_neg},
        {Py_nb_absolute, nb_abs},
        {Py_nb_positive, nb_pos},
        {Py_tp_doc, "A tensor on the daemon's device (made by Client.tensor, Client.zeros or an "
                    "operation). Operators: + - * / @ (tensors of one dtype and shape; * and / "
                    "also by a scalar), unary -, abs(). No broadcasting and no dtype promotion: "
                    "tenferrod refuses mismatches with ShapeError or DtypeError."},
        {0, NULL},
    };
    PyType_Spec spec = {"tenferro.Tensor", sizeof(tfp_tensor), 0,
                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
    tfp_TensorType = (PyTypeObject *)PyType_FromSpec(&spec);
    if (!tfp_TensorType) return -1;
    /* numpy defers to our reflected operators instead of downloading us (NEP 13). */
    if (PyObject_SetAttrString((PyObject *)tfp_TensorType, "__array_ufunc__", Py_None) < 0) return -1;
    return PyModule_AddObjectRef(m, "Tensor", (PyObject *)tfp_TensorType);
}
