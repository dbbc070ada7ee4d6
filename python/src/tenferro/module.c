/*
 * tenferro._tenferro: the module, its exceptions (one class per tf_status,
 * generated from TF_STATUS_MAP so none can be missing) and the mapping
 * between tf_dtype and numpy's dtypes.
 *
 * The statuses only linear algebra reports (a solver that did not converge,
 * a singular or non-positive-definite matrix, nan or inf in the input) derive
 * from LinAlgError, itself a TenferroError and, once numpy is imported, a
 * numpy.linalg.LinAlgError (so `except numpy.linalg.LinAlgError` catches
 * them). numpy stays a lazy import: the class starts out a ValueError (as
 * numpy's is) and takes numpy's class as its base the first time this module
 * imports numpy, which it does before raising any of them (see
 * adopt_numpy_linalg_error).
 */
#include <string.h>

#include "_tenferro.h"

/* ---- exceptions ---- */

#define TFP_N_STATUS 64
static PyObject *error_base;                /* TenferroError */
static PyObject *error_class[TFP_N_STATUS]; /* by status number */
static PyObject *linalg_error;              /* LinAlgError: the base of the linear-algebra statuses */

/* 1 for the statuses of linear algebra's numerical failures (LinAlgError's subclasses). */
static int is_linalg_status(int st) {
    return st == TF_ERR_NOT_CONVERGED || st == TF_ERR_SINGULAR ||
           st == TF_ERR_NOT_POSITIVE_DEFINITE || st == TF_ERR_NOT_FINITE;
}

/* The class names numpy's users expect where the status's own name reads badly. */
static const char *class_name_override(int st) {
    switch (st) {
    case TF_ERR_SINGULAR: return "SingularMatrixError";
    case TF_ERR_NOT_FINITE: return "NonFiniteError";
    default: return NULL;
    }
}

/* The Python class name of a status: TF_ERR_INVALID_ARGUMENT -> InvalidArgumentError. */
static void class_name(const char *status_name, char *out, size_t n) {
    const char *p = status_name + strlen("TF_ERR_");
    size_t k = 0;
    int upper = 1;
    for (; *p && k + 6 < n; p++) {
        if (*p == '_') {
            upper = 1;
            continue;
        }
        out[k++] = upper ? *p : (char)(*p - 'A' + 'a');
        upper = 0;
    }
    memcpy(out + k, "Error", 6);
}

/* The builtin class a status's exception also derives from, so `except ValueError` works. */
static PyObject *builtin_base(tf_status st) {
    switch (st) {
    case TF_ERR_INVALID_ARGUMENT:
    case TF_ERR_SHAPE:
    case TF_ERR_BAD_SHAPE:
    case TF_ERR_AXIS: return PyExc_ValueError;
    case TF_ERR_DTYPE: return PyExc_TypeError;
    case TF_ERR_TIMEOUT: return PyExc_TimeoutError;
    case TF_ERR_NO_MEMORY: return PyExc_MemoryError;
    case TF_ERR_PERMISSION: return PyExc_PermissionError;
    case TF_ERR_DISCONNECTED: return PyExc_ConnectionError;
    case TF_ERR_UNSUPPORTED: return PyExc_NotImplementedError;
    case TF_ERR_IO: return PyExc_OSError;
    default: return NULL;
    }
}

/*
 * Makes LinAlgError derive from (TenferroError, numpy.linalg.LinAlgError)
 * instead of (TenferroError, ValueError): numpy's class is a ValueError, so
 * the change only adds a base. Called once numpy is imported; a numpy
 * without numpy.linalg.LinAlgError leaves the class as it is.
 */
static void adopt_numpy_linalg_error(PyObject *np) {
    static int done;
    if (done || !linalg_error || !np) return;
    done = 1;
    PyObject *la = PyObject_GetAttrString(np, "linalg");
    PyObject *base = la ? PyObject_GetAttrString(la, "LinAlgError") : NULL;
    Py_XDECREF(la);
    PyObject *bases = base ? PyTuple_Pack(2, error_base, base) : NULL;
    Py_XDECREF(base);
    if (!bases || PyObject_SetAttrString(linalg_error, "__bases__", bases) < 0) PyErr_Clear();
    Py_XDECREF(bases);
}

/* The documentation of each class: its status's default message. */
static int make_errors(PyObject *m) {
    error_base = PyErr_NewExceptionWithDoc(
        "tenferro.TenferroError",
        "Base class of every error tenferro raises. Attributes: status (the tf_status number), "
        "status_name ('TF_ERR_CONTENDED'), message (the daemon's or the library's message) and "
        "failed_index (the index of the failing operation in the last submission, or None).",
        PyExc_Exception, NULL);
    if (!error_base || PyModule_AddObjectRef(m, "TenferroError", error_base) < 0) return -1;
    PyObject *la_bases = PyTuple_Pack(2, error_base, PyExc_ValueError);
    if (!la_bases) return -1;
    linalg_error = PyErr_NewExceptionWithDoc(
        "tenferro.linalg.LinAlgError",
        "Base class of the numerical failures of linear algebra (NotConvergedError, "
        "SingularMatrixError, NotPositiveDefiniteError, NonFiniteError): a TenferroError and a "
        "numpy.linalg.LinAlgError (from the first use of numpy by tenferro; before that a "
        "ValueError, as numpy's class is). The message names the operation and the failing matrix "
        "of the batch.",
        la_bases, NULL);
    Py_DECREF(la_bases);
    if (!linalg_error || PyModule_AddObjectRef(m, "LinAlgError", linalg_error) < 0) return -1;
    PyObject *names = PyDict_New();
    if (!names) return -1;
#define TFP_ERR_(name, num, msg)                                                                  \
    if (num != 0) {                                                                               \
        char cls[64], qual[80];                                                                   \
        class_name(#name, cls, sizeof cls);                                                       \
        if (class_name_override(num)) snprintf(cls, sizeof cls, "%s", class_name_override(num));  \
        snprintf(qual, sizeof qual, "tenferro.%s%s", is_linalg_status(num) ? "linalg." : "", cls); \
        PyObject *extra = builtin_base((tf_status)num);                                           \
        PyObject *base = is_linalg_status(num) ? linalg_error : error_base;                       \
        PyObject *bases = extra ? PyTuple_Pack(2, base, extra) : PyTuple_Pack(1, base);           \
        if (!bases) return -1;                                                                    \
        PyObject *e = PyErr_NewExceptionWithDoc(qual, #name ": " msg ".", bases, NULL);           \
        Py_DECREF(bases);                                                                         \
        if (!e || PyModule_AddObjectRef(m, cls, e) < 0) return -1;                                \
        error_class[num] = e;                                                                     \
        PyObject *k = PyLong_FromLong(num);                                                       \
        if (!k || PyDict_SetItem(names, k, e) < 0) return -1;                                     \
        Py_DECREF(k);                                                                             \
    }
    TF_STATUS_MAP(TFP_ERR_)
#undef TFP_ERR_
    int rc = PyModule_AddObjectRef(m, "errors_by_status", names);
    Py_DECREF(names);
    return rc;
}

PyObject *tfp_raise(tf_status st, const char *message, int64_t failed_index) {
    /* numpy.linalg.LinAlgError becomes a base before any linear-algebra error is seen. */
    if (is_linalg_status((int)st) && !tfp_numpy()) PyErr_Clear();
    PyObject *cls = ((int)st > 0 && (int)st < TFP_N_STATUS && error_class[st]) ? error_class[st]
                                                                              : error_base;
    const char *msg = message && message[0] ? message : tf_strerror(st);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc) return NULL;
    PyObject *v;
    if ((v = PyLong_FromLong((long)st))) {
        PyObject_SetAttrString(exc, "status", v);
        Py_DECREF(v);
    }
    if ((v = PyUnicode_FromString(tf_status_name(st)))) {
        PyObject_SetAttrString(exc, "status_name", v);
        Py_DECREF(v);
    }
    if ((v = PyUnicode_FromString(msg))) {
        PyObject_SetAttrString(exc, "message", v);
        Py_DECREF(v);
    }
    if (failed_index >= 0) {
        if ((v = PyLong_FromLongLong(failed_index))) {
            PyObject_SetAttrString(exc, "failed_index", v);
            Py_DECREF(v);
        }
    } else {
        PyObject_SetAttrString(exc, "failed_index", Py_None);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *tfp_raise_client(tfp_client *c, tf_status st, int with_index) {
    int64_t idx = with_index && c->c ? tf_client_failed_index(c->c) : -1;
    return tfp_raise(st, c->c ? tf_client_last_error(c->c) : NULL, idx);
}

PyObject *tfp_raise_closed(void) {
    return tfp_raise(TF_ERR_DISCONNECTED, "this client is closed: connect again", -1);
}

/* ---- dtypes ---- */

static PyObject *numpy_module;
static PyObject *numpy_dtypes[5];

PyObject *tfp_numpy(void) {
    if (!numpy_module) {
        numpy_module = PyImport_ImportModule("numpy");
        adopt_numpy_linalg_error(numpy_module);
    }
    return numpy_module;
}

const char *tfp_dtype_name(tf_dtype d) {
    switch (d) {
    case TF_F32: return "float32";
    case TF_F64: return "float64";
    case TF_C64: return "complex64";
    case TF_C128: return "complex128";
    }
    return "unknown";
}

const char *tfp_format(tf_dtype d) {
    switch (d) {
    case TF_F32: return "f";
    case TF_F64: return "d";
    case TF_C64: return "Zf";
    case TF_C128: return "Zd";
    }
    return "B";
}

PyObject *tfp_numpy_dtype(tf_dtype d) {
    if ((int)d < 1 || (int)d > 4) return tfp_raise(TF_ERR_DTYPE, "unknown dtype", -1);
    if (!numpy_dtypes[d]) {
        PyObject *np = tfp_numpy();
        if (!np) return NULL;
        numpy_dtypes[d] = PyObject_CallMethod(np, "dtype", "s", tfp_dtype_name(d));
        if (!numpy_dtypes[d]) return NULL;
    }
    return TFP_REF(numpy_dtypes[d]);
}

tf_dtype tfp_dtype_from_format(const char *fmt) {
    if (!fmt) return (tf_dtype)0; /* unformatted bytes: not a dtype we serve */
    /* Native or little-endian (this is x86-64 or another little-endian host) byte order only. */
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    if (!strcmp(fmt, "f")) return TF_F32;
    if (!strcmp(fmt, "d")) return TF_F64;
    if (!strcmp(fmt, "Zf")) return TF_C64;
    if (!strcmp(fmt, "Zd")) return TF_C128;
    return (tf_dtype)0;
}

tf_dtype tfp_dtype_from_object(PyObject *o) {
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
        if (!s) return 0;
        static const struct { const char *name; tf_dtype d; } names[] = {
            {"float32", TF_F32}, {"f32", TF_F32}, {"f4", TF_F32}, {"f", TF_F32},
            {"float64", TF_F64}, {"f64", TF_F64}, {"f8", TF_F64}, {"d", TF_F64}, {"float", TF_F64},
            {"complex64", TF_C64}, {"c64", TF_C64}, {"c8", TF_C64}, {"F", TF_C64},
            {"complex128", TF_C128}, {"c128", TF_C128}, {"c16", TF_C128}, {"D", TF_C128},
            {"complex", TF_C128},
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(s, names[i].name)) return names[i].d;
    }
    /* Anything numpy understands as a dtype: compare with the four we serve. */
    PyObject *np = tfp_numpy();
    if (!np) return 0;
    PyObject *dt = PyObject_CallMethod(np, "dtype", "O", o);
    if (!dt) {
        PyErr_Clear();
        PyObject *r = PyObject_Repr(o);
        tfp_raise(TF_ERR_DTYPE, "not a dtype", -1);
        Py_XDECREF(r);
        return 0;
    }
    tf_dtype found = 0;
    for (int d = 1; d <= 4 && !found; d++) {
        PyObject *want = tfp_numpy_dtype((tf_dtype)d);
        if (!want) {
            Py_DECREF(dt);
            return 0;
        }
        int eq = PyObject_RichCompareBool(dt, want, Py_EQ);
        Py_DECREF(want);
        if (eq < 0) {
            Py_DECREF(dt);
            return 0;
        }
        if (eq) found = (tf_dtype)d;
    }
    if (!found) {
        PyObject *r = PyObject_Str(dt);
        const char *rs = r ? PyUnicode_AsUTF8AndSize(r, NULL) : NULL;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "dtype %s is not served by tenferrod: use float32, float64, complex64 or "
                 "complex128 (convert with astype)",
                 rs ? rs : "?");
        Py_XDECREF(r);
        PyErr_Clear();
        tfp_raise(TF_ERR_DTYPE, msg, -1);
    }
    Py_DECREF(dt);
    return found;
}

PyObject *tfp_shape_tuple(int rank, const int64_t *shape) {
    PyObject *t = PyTuple_New(rank);
    if (!t) return NULL;
    for (int i = 0; i < rank; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, v);
    }
    return t;
}

int tfp_parse_shape(PyObject *o, int *rank, int64_t shape[TF_MAX_RANK]) {
    if (PyLong_Check(o)) {
        long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred()) return -1;
        *rank = 1;
        shape[0] = v;
        return 0;
    }
    PyObject *seq = PySequence_Tuple(o);
    if (!seq) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a shape is an int or a sequence of ints");
        return -1;
    }
    Py_ssize_t n = PyTuple_Size(seq);
    if (n > TF_MAX_RANK) {
        Py_DECREF(seq);
        char msg[128];
        snprintf(msg, sizeof msg, "rank %zd is above the most tenferrod serves (%d)", n,
                 TF_MAX_RANK);
        tfp_raise(TF_ERR_BAD_SHAPE, msg, -1);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(seq, i);
        PyObject *idx = item ? PyNumber_Index(item) : NULL;
        if (!idx) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "a shape is an int or a sequence of ints");
            return -1;
        }
        shape[i] = PyLong_AsLongLong(idx);
        Py_DECREF(idx);
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    *rank = (int)n;
    Py_DECREF(seq);
    return 0;
}

/* ---- module functions ---- */

static PyObject *mod_version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(tf_version());
}

static PyObject *mod_protocol_version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromUnsignedLong(tf_protocol_version());
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg) {
    (void)self;
    long st = PyLong_AsLong(arg);
    if (st == -1 && PyErr_Occurred()) return NULL;
    return Py_BuildValue("(ss)", tf_status_name((tf_status)st), tf_strerror((tf_status)st));
}

static PyObject *mod_use_numpy(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (!tfp_numpy()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"library_version", mod_version, METH_NOARGS,
     "library_version() -> str\n\nThe version of the libtenferro-client this extension was built with."},
    {"protocol_version", mod_protocol_version, METH_NOARGS,
     "protocol_version() -> int\n\nThe wire-protocol version the client library speaks."},
    {"status_info", mod_strerror, METH_O,
     "status_info(status) -> (name, message)\n\nThe symbolic name and default message of a status number."},
    {"_use_numpy", mod_use_numpy, METH_NOARGS,
     "Imports numpy for the extension now (tenferro.linalg does, so LinAlgError derives from "
     "numpy.linalg.LinAlgError from then on)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "tenferro._tenferro",
    "The C extension of tenferro over libtenferro-client; use the tenferro package.",
    -1,
    module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tenferro(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (make_errors(m) < 0 || tfp_client_init_type(m) < 0 || tfp_tensor_init_type(m) < 0 ||
        tfp_session_init_types(m) < 0 || tfp_graph_init_types(m) < 0 ||
        tfp_pinned_init_types(m) < 0 || tfp_ops_init(m) < 0 || tfp_linalg_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_RANK", TF_MAX_RANK) < 0 ||
        PyModule_AddIntConstant(m, "EINSUM_MAX_OPERANDS", TF_EINSUM_MAX_OPERANDS) < 0 ||
        PyModule_AddIntConstant(m, "VERSION_HEX", TF_VERSION_HEX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* numpy imported before tenferro costs nothing more to take up now. */
    PyObject *modules = PyImport_GetModuleDict();
    if (modules && PyDict_GetItemString(modules, "numpy") && !tfp_numpy()) PyErr_Clear();
    return m;
}
