/*
 * tenferro.Client: one connection to one tenferrod (tf_client), its lock,
 * blocking uploads, and the factories of sessions, pinned buffers and
 * pending transfers. Closing it ends its sessions, detaches its buffers and
 * transfers (their Python objects stay safe to touch) and disconnects.
 */
#include <stdlib.h>
#include <string.h>

#include "_tenferro.h"

PyTypeObject *tfp_ClientType;

/* The process's open clients, for tfp_default_client. */
static tfp_client *open_clients;
static int n_open_clients;

/* Takes the lock (GIL held on entry and exit); recursive for the thread that holds it. */
static void lock_raw(tfp_client *c) {
    unsigned long me = PyThread_get_thread_ident();
    if (c->depth > 0 && c->owner == me) {
        c->depth++;
        return;
    }
    if (!PyThread_acquire_lock(c->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(c->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    c->owner = me;
    c->depth = 1;
}

void tfp_unlock(tfp_client *c) {
    if (--c->depth > 0) return;
    c->owner = 0;
    PyThread_release_lock(c->lock);
}

int tfp_lock(tfp_client *c) {
    if (!c->c) {
        tfp_raise_closed();
        return -1;
    }
    lock_raw(c);
    if (!c->c) {
        tfp_unlock(c);
        tfp_raise_closed();
        return -1;
    }
    if (c->n_deferred && c->depth == 1) tfp_drain_deferred(c);
    return 0;
}

void tfp_drain_deferred(tfp_client *c) {
    while (c->n_deferred > 0) {
        tf_tensor t = c->deferred[--c->n_deferred];
        if (c->c) tf_tensor_free(c->c, t);
    }
}

void tfp_free_later(tfp_client *c, tf_tensor t) {
    if (!c->c || !t) return;
    if (c->depth == 0) {
        if (PyThread_acquire_lock(c->lock, NOWAIT_LOCK)) {
            tf_tensor_free(c->c, t); /* errors are moot: the handle is gone either way */
            PyThread_release_lock(c->lock);
            return;
        }
    }
    /* Another thread holds the lock, or this one is inside a call: free at the next call. */
    if (c->n_deferred == c->cap_deferred) {
        size_t cap = c->cap_deferred ? c->cap_deferred * 2 : 64;
        tf_tensor *d = realloc(c->deferred, cap * sizeof *d);
        if (!d) return; /* the daemon frees it with the connection */
        c->deferred = d;
        c->cap_deferred = cap;
    }
    c->deferred[c->n_deferred++] = t;
}

tfp_client *tfp_default_client(void) {
    if (n_open_clients == 1) return open_clients;
    if (n_open_clients == 0)
        PyErr_SetString(PyExc_ValueError, "no client is open: call tenferro.connect() first");
    else
        PyErr_Format(PyExc_ValueError,
                     "%d clients are open: say which one with client=", n_open_clients);
    return NULL;
}

/* ---- connect and close ---- */

static PyObject *client_connect(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"socket", "name", NULL};
    PyObject *socket = Py_None, *name = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:connect", kwlist, &socket, &name)) return NULL;
    const char *path = NULL, *cname = NULL;
    PyObject *socket_bytes = NULL;
    if (socket != Py_None) {
        if (!PyUnicode_FSConverter(socket, &socket_bytes)) return NULL;
        path = PyBytes_AsString(socket_bytes);
    }
    if (name != Py_None) {
        cname = PyUnicode_AsUTF8AndSize(name, NULL);
        if (!cname) {
            Py_XDECREF(socket_bytes);
            return NULL;
        }
    }
    tfp_client *obj = PyObject_New(tfp_client, tfp_ClientType);
    if (!obj) {
        Py_XDECREF(socket_bytes);
        return NULL;
    }
    memset((char *)obj + sizeof(PyObject), 0, sizeof *obj - sizeof(PyObject));
    obj->lock = PyThread_allocate_lock();
    obj->socket = TFP_REF(socket);
    if (!obj->lock) {
        Py_XDECREF(socket_bytes);
        Py_DECREF((PyObject *)obj);
        return PyErr_NoMemory();
    }
    /* The library takes the client's name from the environment ($TENFERRO_CLIENT_NAME). */
    char *old_name = NULL;
    int had_name = 0;
    if (cname) {
        const char *old = getenv("TENFERRO_CLIENT_NAME");
        had_name = old != NULL;
        old_name = old ? strdup(old) : NULL;
        setenv("TENFERRO_CLIENT_NAME", cname, 1);
    }
    tf_client *c = NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_connect(path, &c);
    Py_END_ALLOW_THREADS
    if (cname) {
        if (had_name && old_name)
            setenv("TENFERRO_CLIENT_NAME", old_name, 1);
        else
            unsetenv("TENFERRO_CLIENT_NAME");
        free(old_name);
    }
    Py_XDECREF(socket_bytes);
    if (st != TF_OK) {
        tfp_raise(st, c ? tf_client_last_error(c) : NULL, -1);
        tf_disconnect(c);
        Py_DECREF((PyObject *)obj);
        return NULL;
    }
    obj->c = c;
    obj->id = tf_client_id(c);
    const char *dev = tf_client_device(c);
    obj->device = PyUnicode_FromString(dev ? dev : "");
    obj->cuda = dev && (strncmp(dev, "cuda", 4) == 0 || strstr(dev, "GPU") || strstr(dev, "NVIDIA"));
    if (!obj->device) {
        Py_DECREF((PyObject *)obj);
        return NULL;
    }
    obj->next_open = open_clients;
    if (open_clients) open_clients->prev_open = obj;
    open_clients = obj;
    n_open_clients++;
    return (PyObject *)obj;
}

/* Ends everything of the client and disconnects; safe to call twice. */
static void close_impl(tfp_client *self) {
    if (!self->c) return;
    lock_raw(self);
    tfp_drain_deferred(self);
    tfp_sessions_end(self);
    tfp_pinned_detach_all(self);
    tfp_prepared_detach_all(self);
    tf_client *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    tf_disconnect(c);
    Py_END_ALLOW_THREADS
    tfp_pinned_after_disconnect(self);
    if (self->prev_open)
        self->prev_open->next_open = self->next_open;
    else
        open_clients = self->next_open;
    if (self->next_open) self->next_open->prev_open = self->prev_open;
    self->prev_open = self->next_open = NULL;
    n_open_clients--;
    tfp_unlock(self);
}

static PyObject *client_close(tfp_client *self, PyObject *unused) {
    (void)unused;
    close_impl(self);
    Py_RETURN_NONE;
}

static PyObject *client_enter(tfp_client *self, PyObject *unused) {
    (void)unused;
    if (!self->c) return tfp_raise_closed();
    return TFP_REF(self);
}

static PyObject *client_exit(tfp_client *self, PyObject *args) {
    (void)args;
    close_impl(self);
    Py_RETURN_FALSE;
}

static void client_dealloc(tfp_client *self) {
    TFP_DEALLOC_BEGIN;
    close_impl(self);
    Py_XDECREF((PyObject *)self->device);
    Py_XDECREF((PyObject *)self->socket);
    free(self->deferred);
    if (self->lock) PyThread_free_lock(self->lock);
    TFP_DEALLOC_END;
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ---- uploads ---- */

/*
 * Gets a C-contiguous buffer of a served dtype from o, copying once through
 * numpy.ascontiguousarray when o is not one (or when dtype asks for a
 * conversion). *holder keeps the copy alive until PyBuffer_Release.
 */
static int get_upload_buffer(PyObject *o, PyObject *dtype, Py_buffer *view, PyObject **holder) {
    *holder = NULL;
    if (tfp_is_tensor(o)) {
        PyErr_SetString(PyExc_TypeError,
                        "client.tensor() takes host data (an ndarray or a buffer); this is already "
                        "a Tensor: use tenferro.copy(t) for a copy on the device");
        return -1;
    }
    if (dtype == Py_None && PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0)
        return 0;
    PyErr_Clear();
    PyObject *np = tfp_numpy();
    if (!np) return -1;
    PyObject *arr = dtype == Py_None ? PyObject_CallMethod(np, "ascontiguousarray", "O", o)
                                     : PyObject_CallMethod(np, "ascontiguousarray", "OO", o, dtype);
    if (!arr) return -1;
    if (PyObject_GetBuffer(arr, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        Py_DECREF(arr);
        return -1;
    }
    *holder = arr;
    return 0;
}

static PyObject *client_tensor(tfp_client *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"data", "dtype", NULL};
    PyObject *data, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:tensor", kwlist, &data, &dtype)) return NULL;
    if (!self->c) return tfp_raise_closed();
    Py_buffer view;
    PyObject *holder;
    if (get_upload_buffer(data, dtype, &view, &holder) < 0) return NULL;
    tf_dtype dt = tfp_dtype_from_format(view.format);
    PyObject *result = NULL;
    if (!dt) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the data's element format '%s' is not served by tenferrod (object, integer, "
                 "bool and byte-swapped arrays are not): use float32, float64, complex64 or "
                 "complex128 (arr.astype(np.float64))",
                 view.format ? view.format : "B");
        tfp_raise(TF_ERR_DTYPE, msg, -1);
        goto out;
    }
    if (view.ndim > TF_MAX_RANK) {
        char msg[128];
        snprintf(msg, sizeof msg, "rank %d is above the most tenferrod serves (%d)", view.ndim,
                 TF_MAX_RANK);
        tfp_raise(TF_ERR_BAD_SHAPE, msg, -1);
        goto out;
    }
    int64_t shape[TF_MAX_RANK];
    for (int i = 0; i < view.ndim; i++) shape[i] = view.shape[i];
    if (view.ndim == 1 && !view.shape) shape[0] = view.len / (Py_ssize_t)tf_dtype_size(dt);
    if (tfp_lock(self) < 0) goto out;
    tf_tensor t = 0;
    tf_status st;
    int rank = view.ndim;
    Py_BEGIN_ALLOW_THREADS
    st = tf_upload(self->c, dt, rank, shape, view.buf, &t);
    Py_END_ALLOW_THREADS
    if (st != TF_OK)
        tfp_raise_client(self, st, 0);
    else
        result = tfp_tensor_new(self, NULL, t, dt, rank, shape);
    if (!result && st == TF_OK) tf_tensor_free(self->c, t);
    tfp_unlock(self);
out:
    PyBuffer_Release(&view);
    Py_XDECREF(holder);
    return result;
}

static PyObject *client_zeros(tfp_client *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"shape", "dtype", NULL};
    PyObject *shape_o, *dtype_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:zeros", kwlist, &shape_o, &dtype_o)) return NULL;
    int rank;
    int64_t shape[TF_MAX_RANK];
    if (tfp_parse_shape(shape_o, &rank, shape) < 0) return NULL;
    tf_dtype dt = dtype_o ? tfp_dtype_from_object(dtype_o) : TF_F64;
    if (!dt) return NULL;
    if (tfp_lock(self) < 0) return NULL;
    tf_tensor t = 0;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_zeros(self->c, dt, rank, shape, &t);
    Py_END_ALLOW_THREADS
    PyObject *r = st == TF_OK ? tfp_tensor_new(self, NULL, t, dt, rank, shape)
                              : tfp_raise_client(self, st, 0);
    tfp_unlock(self);
    return r;
}

/* ---- factories ---- */

static PyObject *client_session(tfp_client *self, PyObject *unused) {
    (void)unused;
    if (!self->c) return tfp_raise_closed();
    return PyObject_CallFunctionObjArgs((PyObject *)tfp_HeldType, (PyObject *)self, NULL);
}

static PyObject *client_scoped(tfp_client *self, PyObject *unused) {
    (void)unused;
    if (!self->c) return tfp_raise_closed();
    return PyObject_CallFunctionObjArgs((PyObject *)tfp_ScopedType, (PyObject *)self, NULL);
}

static PyObject *client_graph(tfp_client *self, PyObject *unused) {
    (void)unused;
    if (!self->c) return tfp_raise_closed();
    return PyObject_CallFunctionObjArgs((PyObject *)tfp_GraphType, (PyObject *)self, NULL);
}

static PyObject *client_pinned(tfp_client *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"shape", "dtype", NULL};
    PyObject *shape, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:pinned", kwlist, &shape, &dtype)) return NULL;
    if (!self->c) return tfp_raise_closed();
    return PyObject_CallFunctionObjArgs((PyObject *)tfp_PinnedType, (PyObject *)self, shape, dtype,
                                        NULL);
}

/* ---- attributes ---- */

static PyObject *client_get_device(tfp_client *self, void *closure) {
    (void)closure;
    return TFP_REF(self->device ? self->device : Py_None);
}
static PyObject *client_get_id(tfp_client *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->id);
}
static PyObject *client_get_closed(tfp_client *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->c == NULL);
}
static PyObject *client_get_cuda(tfp_client *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->cuda);
}
static PyObject *client_get_socket(tfp_client *self, void *closure) {
    (void)closure;
    return TFP_REF(self->socket ? self->socket : Py_None);
}
static PyObject *client_get_session(tfp_client *self, void *closure) {
    (void)closure;
    if (self->held) return TFP_REF(self->held);
    if (self->scoped) return TFP_REF(self->scoped);
    Py_RETURN_NONE;
}

static PyObject *client_repr(tfp_client *self) {
    if (!self->c) return PyUnicode_FromFormat("<tenferro.Client id=%llu closed>", (unsigned long long)self->id);
    return PyUnicode_FromFormat("<tenferro.Client id=%llu device=%R>", (unsigned long long)self->id,
                                self->device);
}

static PyMethodDef client_methods[] = {
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "close() -> None\n\nEnds the client's sessions (a held session is released, an active scoped "
     "session submitted), detaches its pinned buffers and pending transfers and disconnects; the "
     "daemon frees every tensor the client owned. Safe to call twice."},
    {"__enter__", (PyCFunction)client_enter, METH_NOARGS, "Returns the client."},
    {"__exit__", (PyCFunction)client_exit, METH_VARARGS, "Closes the client."},
    {"tensor", (PyCFunction)(void (*)(void))client_tensor, METH_VARARGS | METH_KEYWORDS,
     "tensor(data, dtype=None) -> Tensor\n\nUploads host data (an ndarray, or anything numpy.asarray "
     "takes) as a new tensor; blocking, the GIL released. Data that is not C-contiguous is copied "
     "once (numpy.ascontiguousarray); dtype= converts first. Only float32, float64, complex64 and "
     "complex128 are served: other dtypes (objects, integers, booleans, byte-swapped) raise "
     "DtypeError."},
    {"zeros", (PyCFunction)(void (*)(void))client_zeros, METH_VARARGS | METH_KEYWORDS,
     "zeros(shape, dtype=float64) -> Tensor\n\nA tensor of zeros made on the device (no data sent)."},
    {"session", (PyCFunction)client_session, METH_NOARGS,
     "session() -> Session\n\nA held session, opened by `with` (or open()): reserves the device's "
     "execution domain; operations inside queue locally until submit(), synchronize() or the end "
     "of the block."},
    {"scoped", (PyCFunction)client_scoped, METH_NOARGS,
     "scoped() -> ScopedSession\n\nA scoped session for `with`: the block's operations travel as "
     "one burst when it ends, which waits for them."},
    {"pinned", (PyCFunction)(void (*)(void))client_pinned, METH_VARARGS | METH_KEYWORDS,
     "pinned(shape, dtype=float64) -> PinnedBuffer\n\nA pinned buffer shared with the daemon, "
     "viewed as an array of that shape and dtype (.array: no copy)."},
    {"upload_pending", (PyCFunction)(void (*)(void))tfp_upload_pending, METH_VARARGS | METH_KEYWORDS,
     "upload_pending(buffer, tensor) -> PendingTransfer\n\nStarts copying the pinned buffer into the "
     "existing tensor (equal sizes in bytes) and returns at once; the transfer holds both until "
     "result(). BusyError while views of the buffer's array are alive."},
    {"download_pending", (PyCFunction)(void (*)(void))tfp_download_pending, METH_VARARGS | METH_KEYWORDS,
     "download_pending(tensor, buffer) -> PendingTransfer\n\nStarts copying the tensor into the "
     "pinned buffer; the same rules as upload_pending. After result(), buffer.array holds the "
     "tensor's bytes, written by the daemon into the shared pages."},
    {"_graph", (PyCFunction)client_graph, METH_NOARGS, "A graph being recorded (see tenferro.prepare)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"device", (getter)client_get_device, NULL, "The daemon's description of its device.", NULL},
    {"id", (getter)client_get_id, NULL, "The id the daemon gave this connection.", NULL},
    {"closed", (getter)client_get_closed, NULL, "True once close() ran.", NULL},
    {"is_cuda", (getter)client_get_cuda, NULL, "True when the daemon's device is a GPU.", NULL},
    {"socket", (getter)client_get_socket, NULL, "The socket given to connect() (None: the default).", NULL},
    {"active_session", (getter)client_get_session, NULL,
     "The open held session or active scoped session, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *default_client(PyObject *self, PyObject *u) {
    (void)self;
    (void)u;
    tfp_client *c = tfp_default_client();
    return c ? TFP_REF(c) : NULL;
}

static PyMethodDef default_client_def = {
    "_default_client", default_client, METH_NOARGS,
    "The only open client (ValueError when none or several are open)."};

static PyMethodDef connect_def = {
    "connect", (PyCFunction)(void (*)(void))client_connect, METH_VARARGS | METH_KEYWORDS,
    "connect(socket=None, name=None) -> Client\n\nConnects to the tenferrod listening on `socket` and "
    "performs the handshake (blocking, the GIL released). None means $TENFERRO_SOCKET, else the "
    "first of /run/tenferro/tenferrod-0.sock and /run/tenferro/tenferrod-cpu.sock that exists (the "
    "rules of tf_connect). `name` is the client's name in `tenferroctl status` (default: "
    "$TENFERRO_CLIENT_NAME, else the program's name). The client is a context manager that closes "
    "it. Raises DisconnectedError when no daemon answers, VersionError on a protocol mismatch."};

int tfp_client_init_type(PyObject *m) {
    PyType_Slot slots[] = {
        {Py_tp_dealloc, client_dealloc},
        {Py_tp_repr, client_repr},
        {Py_tp_methods, client_methods},
        {Py_tp_getset, client_getset},
        {Py_tp_doc, "A connection to one tenferrod (made by tenferro.connect). Not meant to be "
                    "shared between threads for speed, but safe: calls on one client are "
                    "serialized."},
        {0, NULL},
    };
    PyType_Spec spec = {"tenferro.Client", sizeof(tfp_client), 0, Py_TPFLAGS_DEFAULT, slots};
    tfp_ClientType = (PyTypeObject *)PyType_FromSpec(&spec);
    if (!tfp_ClientType || PyModule_AddObjectRef(m, "Client", (PyObject *)tfp_ClientType) < 0)
        return -1;
    PyObject *f = PyCFunction_New(&connect_def, NULL);
    if (!f) return -1;
    int rc = PyModule_AddObjectRef(m, "connect", f);
    Py_DECREF(f);
    if (rc < 0) return -1;
    f = PyCFunction_New(&default_client_def, NULL);
    if (!f) return -1;
    rc = PyModule_AddObjectRef(m, "_default_client", f);
    Py_DECREF(f);
    return rc;
}
