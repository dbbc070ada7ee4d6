/*
 * Pinned buffers as numpy arrays with no copy, DLPack, and pending
 * transfers as futures.
 *
 * A tenferro.PinnedBuffer maps the pages of the library's tf_pinned_buffer a
 * second time (mremap with old size 0 duplicates a shared mapping), so the
 * arrays handed out point at a mapping this object owns: freeing the buffer,
 * a released transfer or the client's close unmap only the library's
 * mapping, and every array still alive keeps valid memory (the same pages,
 * no longer shared with the daemon). Where that duplication is refused, the
 * arrays use the library's mapping, free() refuses while views are alive,
 * and a close replaces the pages with private ones so no view can fault.
 *
 * Views are counted (buffer-protocol exports and DLPack tensors). While a
 * pending transfer holds the buffer, .array, the buffer protocol and
 * __dlpack__ raise BusyError, and a transfer is refused while views are
 * alive: no array is ever reachable while the daemon may be writing it.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "_tenferro.h"

PyTypeObject *tfp_PinnedType, *tfp_PendingType;

/* ---- DLPack (the ABI of dlpack.h, v1.0 layout) ---- */

typedef enum { kDLCPU = 1, kDLCUDAHost = 3 } DLDeviceType;
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* One exported DLPack tensor, with its shape and strides. */
typedef struct dlpack_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;
    int versioned;
    int64_t shape[TF_MAX_RANK], strides[TF_MAX_RANK];
    tfp_pinned *owner;
} dlpack_export;

static void dlpack_done(dlpack_export *e) {
    PyGILState_STATE g = PyGILState_Ensure();
    e->owner->exports--;
    Py_DECREF((PyObject *)e->owner);
    free(e);
    PyGILState_Release(g);
}
static void dl_deleter(DLManagedTensor *m) { dlpack_done((dlpack_export *)m); }
static void dl_deleter_v(DLManagedTensorVersioned *m) { dlpack_done((dlpack_export *)m); }

static void capsule_destructor(PyObject *cap) {
    TFP_DEALLOC_BEGIN;
    /* A capsule nobody consumed still owns its tensor. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter) m->deleter(m);
    }
    PyErr_Clear();
    TFP_DEALLOC_END;
}

/* ---- buffers ---- */

/* -1 with an exception unless the buffer's bytes may be handed out now. */
static int check_reachable(tfp_pinned *b) {
    if (b->transfer) {
        tfp_raise(TF_ERR_BUSY,
                  "the pinned buffer is held by a pending transfer: its bytes are unreachable "
                  "until result() hands it back",
                  -1);
        return -1;
    }
    if (b->gone) {
        tfp_raise(TF_ERR_UNKNOWN_HANDLE, b->gone, -1);
        return -1;
    }
    return 0;
}

static void link_buffer(tfp_pinned *b) {
    tfp_client *c = b->client;
    b->prev = NULL;
    b->next = c->pinned;
    if (c->pinned) c->pinned->prev = b;
    c->pinned = b;
}

static void unlink_buffer(tfp_pinned *b) {
    tfp_client *c = b->client;
    if (b->prev)
        b->prev->next = b->next;
    else if (c->pinned == b)
        c->pinned = b->next;
    if (b->next) b->next->prev = b->prev;
    b->prev = b->next = NULL;
}

static PyObject *pinned_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *client, *shape_o, *dtype_o = Py_None;
    if (!PyArg_ParseTuple(args, "O!O|O:PinnedBuffer", tfp_ClientType, &client, &shape_o, &dtype_o))
        return NULL;
    tfp_client *c = (tfp_client *)client;
    int rank;
    int64_t shape[TF_MAX_RANK];
    if (tfp_parse_shape(shape_o, &rank, shape) < 0) return NULL;
    tf_dtype dt = dtype_o == Py_None ? TF_F64 : tfp_dtype_from_object(dtype_o);
    if (!dt) return NULL;
    size_t n = tf_dtype_size(dt);
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) return tfp_raise(TF_ERR_BAD_SHAPE, "every dimension must be at least 1", -1);
        n *= (size_t)shape[i];
    }
    if (tfp_lock(c) < 0) return NULL;
    tf_pinned_buffer *buf = NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_pinned_buffer_new(c->c, n, &buf);
    Py_END_ALLOW_THREADS
    if (st != TF_OK) {
        tfp_raise_client(c, st, 0);
        tfp_unlock(c);
        return NULL;
    }
    tfp_pinned *b = (tfp_pinned *)PyType_GenericAlloc(type, 0);
    if (!b) {
        tf_pinned_buffer_free(buf);
        tfp_unlock(c);
        return NULL;
    }
    b->client = (tfp_client *)TFP_REF(c);
    b->buf = buf;
    b->nbytes = n;
    b->dtype = dt;
    b->rank = rank;
    size_t stride = tf_dtype_size(dt);
    for (int i = rank - 1; i >= 0; i--) {
        b->shape[i] = shape[i];
        b->py_shape[i] = (Py_ssize_t)shape[i];
        b->py_strides[i] = (Py_ssize_t)stride;
        stride *= (size_t)shape[i];
    }
    long page = sysconf(_SC_PAGESIZE);
    b->map_bytes = (n + (size_t)page - 1) / (size_t)page * (size_t)page;
    uint8_t *lib = tf_pinned_buffer_data(buf);
    void *own = mremap(lib, 0, b->map_bytes, MREMAP_MAYMOVE);
    if (own != MAP_FAILED) {
        b->map = own;
        b->own_map = 1;
    } else {
        b->map = lib;
        b->own_map = 0;
    }
    link_buffer(b);
    tfp_unlock(c);
    return (PyObject *)b;
}

/* Frees the library's buffer (lock held); the caller reports st. */
static tf_status free_library_buffer(tfp_pinned *b) {
    tf_status st = tf_pinned_buffer_free(b->buf);
    if (st == TF_OK) {
        b->buf = NULL;
        b->gone = "this pinned buffer was freed";
    }
    return st;
}

static PyObject *pinned_free(tfp_pinned *self, PyObject *u) {
    (void)u;
    if (self->transfer)
        return tfp_raise(TF_ERR_BUSY, "the pinned buffer is held by a pending transfer: wait first", -1);
    if (!self->buf) Py_RETURN_NONE;
    if (!self->own_map && self->exports > 0)
        return tfp_raise(TF_ERR_BUSY,
                         "views of this buffer's array are alive and share the library's mapping: "
                         "delete them first",
                         -1);
    if (tfp_lock(self->client) < 0) return NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = free_library_buffer(self);
    Py_END_ALLOW_THREADS
    PyObject *r = st == TF_OK ? TFP_REF(Py_None) : tfp_raise_client(self->client, st, 0);
    tfp_unlock(self->client);
    return r;
}

static void pinned_dealloc(tfp_pinned *self) {
    TFP_DEALLOC_BEGIN;
    if (self->buf && self->client->c && PyThread_acquire_lock(self->client->lock, NOWAIT_LOCK)) {
        tf_pinned_buffer_free(self->buf);
        PyThread_release_lock(self->client->lock);
        self->buf = NULL;
    }
    if (self->client) unlink_buffer(self);
    if (self->own_map && self->map) munmap(self->map, self->map_bytes);
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static int pinned_getbuffer(tfp_pinned *self, Py_buffer *view, int flags) {
    if (self->transfer || self->gone) {
        PyErr_SetString(PyExc_BufferError,
                        self->transfer ? "the pinned buffer is held by a pending transfer"
                                       : self->gone);
        view->obj = NULL;
        return -1;
    }
    view->buf = self->map;
    view->obj = TFP_REF(self);
    view->len = (Py_ssize_t)self->nbytes;
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)tf_dtype_size(self->dtype);
    view->format = (flags & PyBUF_FORMAT) ? (char *)tfp_format(self->dtype) : NULL;
    view->ndim = self->rank;
    view->shape = (flags & PyBUF_ND) ? self->py_shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->py_strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    if (!(flags & PyBUF_ND)) view->ndim = 1;
    self->exports++;
    return 0;
}

static void pinned_releasebuffer(tfp_pinned *self, Py_buffer *view) {
    (void)view;
    self->exports--;
}

/* An ndarray over the mapping (no copy), through a memoryview of self. */
static PyObject *pinned_array(tfp_pinned *self, void *c) {
    (void)c;
    if (check_reachable(self) < 0) return NULL;
    PyObject *np = tfp_numpy();
    if (!np) return NULL;
    PyObject *mv = PyMemoryView_FromObject((PyObject *)self);
    if (!mv) return NULL;
    PyObject *arr = PyObject_CallMethod(np, "asarray", "O", mv);
    Py_DECREF(mv);
    return arr;
}

static PyObject *pinned_array_method(tfp_pinned *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", kwlist, &dtype, &copy)) return NULL;
    PyObject *arr = pinned_array(self, NULL);
    if (!arr) return NULL;
    if (dtype != Py_None || copy == Py_True) {
        PyObject *r = dtype != Py_None ? PyObject_CallMethod(arr, "astype", "O", dtype)
                                       : PyObject_CallMethod(arr, "copy", NULL);
        Py_DECREF(arr);
        return r;
    }
    return arr;
}

static PyObject *pinned_dlpack_device(tfp_pinned *self, PyObject *u) {
    (void)u;
    return Py_BuildValue("(ii)", self->client->cuda ? kDLCUDAHost : kDLCPU, 0);
}

static PyObject *pinned_dlpack(tfp_pinned *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (check_reachable(self) < 0) return NULL;
    int dev = self->client->cuda ? kDLCUDAHost : kDLCPU;
    if (dl_device != Py_None) {
        int t = -1, id = -1;
        if (!PyArg_ParseTuple(dl_device, "ii", &t, &id)) return NULL;
        if (t != dev || id != 0) {
            PyErr_SetString(PyExc_BufferError, "the pinned buffer lives in host memory only");
            return NULL;
        }
    }
    if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
        PyErr_SetString(PyExc_BufferError, "host memory takes no stream (stream=None)");
        return NULL;
    }
    if (copy == Py_True) {
        /* A copy is numpy's own array, exported by numpy. */
        PyObject *arr = pinned_array_method(self, NULL, NULL);
        if (!arr) return NULL;
        PyObject *cp = PyObject_CallMethod(arr, "copy", NULL);
        Py_DECREF(arr);
        if (!cp) return NULL;
        PyObject *m = PyObject_GetAttrString(cp, "__dlpack__");
        Py_DECREF(cp);
        if (!m) return NULL;
        PyObject *r = PyObject_Call(m, args, kw);
        Py_DECREF(m);
        return r;
    }
    int versioned = 0;
    if (max_version != Py_None) {
        int major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "ii", &major, &minor)) return NULL;
        versioned = major >= 1;
    }
    dlpack_export *e = calloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    e->versioned = versioned;
    e->owner = (tfp_pinned *)TFP_REF(self);
    for (int i = 0; i < self->rank; i++) {
        e->shape[i] = self->shape[i];
        e->strides[i] = self->py_strides[i] / (Py_ssize_t)tf_dtype_size(self->dtype);
    }
    DLTensor *t = versioned ? &e->m.versioned.dl_tensor : &e->m.legacy.dl_tensor;
    t->data = self->map;
    t->device.device_type = dev;
    t->device.device_id = 0;
    t->ndim = self->rank;
    int complex = self->dtype == TF_C64 || self->dtype == TF_C128;
    t->dtype.code = complex ? 5 /* kDLComplex */ : 2 /* kDLFloat */;
    t->dtype.bits = (uint8_t)(tf_dtype_size(self->dtype) * 8);
    t->dtype.lanes = 1;
    t->shape = e->shape;
    t->strides = e->strides;
    t->byte_offset = 0;
    PyObject *cap;
    if (versioned) {
        e->m.versioned.version.major = 1;
        e->m.versioned.version.minor = 0;
        e->m.versioned.manager_ctx = e;
        e->m.versioned.deleter = dl_deleter_v;
        e->m.versioned.flags = 0;
        cap = PyCapsule_New(&e->m.versioned, "dltensor_versioned", capsule_destructor);
    } else {
        e->m.legacy.manager_ctx = e;
        e->m.legacy.deleter = dl_deleter;
        cap = PyCapsule_New(&e->m.legacy, "dltensor", capsule_destructor);
    }
    if (!cap) {
        Py_DECREF((PyObject *)self);
        free(e);
        return NULL;
    }
    self->exports++;
    return cap;
}

static PyObject *pinned_get_shape(tfp_pinned *self, void *c) {
    (void)c;
    return tfp_shape_tuple(self->rank, self->shape);
}
static PyObject *pinned_get_dtype(tfp_pinned *self, void *c) {
    (void)c;
    return tfp_numpy_dtype(self->dtype);
}
static PyObject *pinned_get_nbytes(tfp_pinned *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->nbytes);
}
static PyObject *pinned_get_busy(tfp_pinned *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->transfer != NULL);
}
static PyObject *pinned_get_freed(tfp_pinned *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->gone != NULL);
}
static PyObject *pinned_get_views(tfp_pinned *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->exports);
}
static PyObject *pinned_get_address(tfp_pinned *self, void *c) {
    (void)c;
    return PyLong_FromVoidPtr(self->map);
}

static PyObject *pinned_repr(tfp_pinned *self) {
    PyObject *shape = tfp_shape_tuple(self->rank, self->shape);
    if (!shape) return NULL;
    PyObject *r = PyUnicode_FromFormat("<tenferro.PinnedBuffer shape=%R dtype=%s nbytes=%zu%s>", shape,
                                       tfp_dtype_name(self->dtype), self->nbytes,
                                       self->transfer ? " in a pending transfer"
                                       : self->gone   ? " freed"
                                                      : "");
    Py_DECREF(shape);
    return r;
}

static PyMethodDef pinned_methods[] = {
    {"free", (PyCFunction)pinned_free, METH_NOARGS,
     "free() -> None\n\nFrees the buffer on the daemon now (BusyError while a transfer holds it). "
     "Arrays still alive keep their memory: they stop being shared with the daemon."},
    {"__array__", (PyCFunction)(void (*)(void))pinned_array_method, METH_VARARGS | METH_KEYWORDS,
     "numpy.asarray(buf) is buf.array (no copy)."},
    {"__dlpack__", (PyCFunction)(void (*)(void))pinned_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n\nA DLPack capsule "
     "over the buffer's pages (no copy; versioned when max_version >= (1, 0))."},
    {"__dlpack_device__", (PyCFunction)pinned_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (device_type, 0): kDLCUDAHost (3) against a GPU daemon, whose "
     "pages it registered with cudaHostRegister; kDLCPU (1) against the CPU daemon, whose shared "
     "pages are not page-locked."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pinned_getset[] = {
    {"array", (getter)pinned_array, NULL,
     "An ndarray over the buffer's pages, shared with the daemon (no copy). BusyError while a "
     "pending transfer holds the buffer.", NULL},
    {"shape", (getter)pinned_get_shape, NULL, "The shape of the buffer's array.", NULL},
    {"dtype", (getter)pinned_get_dtype, NULL, "The dtype of the buffer's array.", NULL},
    {"nbytes", (getter)pinned_get_nbytes, NULL, "The buffer's size in bytes.", NULL},
    {"busy", (getter)pinned_get_busy, NULL, "True while a pending transfer holds the buffer.", NULL},
    {"freed", (getter)pinned_get_freed, NULL, "True once freed, released or its client closed.", NULL},
    {"views", (getter)pinned_get_views, NULL, "Live views of the buffer (arrays, memoryviews, DLPack).", NULL},
    {"address", (getter)pinned_get_address, NULL, "The address the arrays point at.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- pending transfers ---- */

static void link_pending(tfp_pending *p) {
    tfp_client *c = p->client;
    p->prev = NULL;
    p->next = c->pendings;
    if (c->pendings) c->pendings->prev = p;
    c->pendings = p;
}

static void unlink_pending(tfp_pending *p) {
    tfp_client *c = p->client;
    if (p->prev)
        p->prev->next = p->next;
    else if (c->pendings == p)
        c->pendings = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

/* Starts a transfer between buffer and tensor; upload: buffer -> tensor. */
static PyObject *start_transfer(tfp_client *c, PyObject *buffer_o, PyObject *tensor_o, int upload) {
    if (!PyObject_TypeCheck(buffer_o, tfp_PinnedType)) {
        PyErr_SetString(PyExc_TypeError, "the buffer must be a tenferro.PinnedBuffer (client.pinned)");
        return NULL;
    }
    if (!tfp_is_tensor(tensor_o)) {
        PyErr_SetString(PyExc_TypeError, "the tensor must be a tenferro.Tensor");
        return NULL;
    }
    tfp_pinned *b = (tfp_pinned *)buffer_o;
    tfp_tensor *t = (tfp_tensor *)tensor_o;
    if (b->client != c || t->client != c)
        return tfp_raise(TF_ERR_UNKNOWN_HANDLE,
                         "the buffer and the tensor must belong to this client", -1);
    if (t->graph) return tfp_raise(TF_ERR_INVALID_ARGUMENT, "a symbolic tensor has no data", -1);
    if (!t->id) return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "the tensor was freed", -1);
    if (check_reachable(b) < 0) return NULL;
    if (b->exports > 0) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "%zd view(s) of the pinned buffer are alive (arrays, memoryviews or DLPack "
                 "tensors): delete them before a transfer, so nothing reads or writes the pages "
                 "while the daemon copies them (take buf.array again after result())",
                 b->exports);
        return tfp_raise(TF_ERR_BUSY, msg, -1);
    }
    if (tfp_lock(c) < 0) return NULL;
    tf_pending *p = NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = upload ? tf_upload_pending(c->c, b->buf, t->id, &p)
                : tf_download_pending(c->c, t->id, b->buf, &p);
    Py_END_ALLOW_THREADS
    if (st != TF_OK) {
        tfp_raise_client(c, st, 0);
        tfp_unlock(c);
        return NULL;
    }
    tfp_pending *pe = (tfp_pending *)PyType_GenericAlloc(tfp_PendingType, 0);
    if (!pe) {
        tf_tensor back;
        tf_pinned_buffer *bb;
        Py_BEGIN_ALLOW_THREADS
        tf_pending_wait(p, &back, &bb);
        Py_END_ALLOW_THREADS
        tfp_unlock(c);
        return NULL;
    }
    pe->client = (tfp_client *)TFP_REF(c);
    pe->p = p;
    pe->tensor = (tfp_tensor *)TFP_REF(t);
    pe->buffer = (tfp_pinned *)TFP_REF(b);
    pe->upload = upload;
    b->transfer = pe;
    t->transfer = pe;
    link_pending(pe);
    tfp_unlock(c);
    return (PyObject *)pe;
}

PyObject *tfp_upload_pending(tfp_client *c, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"buffer", "tensor", NULL};
    PyObject *b, *t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:upload_pending", kwlist, &b, &t)) return NULL;
    return start_transfer(c, b, t, 1);
}

PyObject *tfp_download_pending(tfp_client *c, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"tensor", "buffer", NULL};
    PyObject *b, *t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:download_pending", kwlist, &t, &b)) return NULL;
    return start_transfer(c, b, t, 0);
}

/* Marks a transfer finished with st and gives the tensor and buffer back to their objects. */
static void finish(tfp_pending *p, tf_status st, const char *message) {
    p->p = NULL;
    p->finished = 1;
    p->status = st;
    p->tensor->transfer = NULL;
    p->buffer->transfer = NULL;
    unlink_pending(p);
    if (st != TF_OK) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        tfp_raise(st, message, -1);
        PyObject *t2, *v2, *tb2;
        PyErr_Fetch(&t2, &v2, &tb2);
        PyErr_NormalizeException(&t2, &v2, &tb2);
        p->error = v2;
        Py_XDECREF(t2);
        Py_XDECREF(tb2);
        PyErr_Restore(et, ev, tb);
    }
}

static PyObject *pending_done(tfp_pending *self, PyObject *u) {
    (void)u;
    if (self->finished || !self->p) return TFP_REF(Py_True);
    /* One atomic load of the completion page: never blocks, no system call. */
    return PyBool_FromLong(tf_pending_is_ready(self->p));
}

static PyObject *result_tuple(tfp_pending *self) {
    if (self->error) {
        PyErr_SetObject((PyObject *)Py_TYPE(self->error), self->error);
        return NULL;
    }
    if (!self->tensor->id || self->buffer->gone)
        return tfp_raise(TF_ERR_INVALID_ARGUMENT,
                         "this transfer was released: its tensor and buffer are gone", -1);
    return PyTuple_Pack(2, (PyObject *)self->tensor, (PyObject *)self->buffer);
}

/* Waits (lock held, GIL released inside) and finishes the transfer. */
static void wait_locked(tfp_pending *self) {
    tf_pending *p = self->p;
    tf_tensor t = 0;
    tf_pinned_buffer *b = NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_pending_wait(p, &t, &b);
    Py_END_ALLOW_THREADS
    finish(self, st, self->client->c ? tf_client_last_error(self->client->c) : NULL);
}

static PyObject *pending_result(tfp_pending *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:result", kwlist, &timeout)) return NULL;
    if (self->finished) return result_tuple(self);
    if (timeout != Py_None) {
        double limit = PyFloat_AsDouble(timeout);
        if (limit == -1.0 && PyErr_Occurred()) return NULL;
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
            if (self->finished || !self->p) break;
            if (tf_pending_is_ready(self->p)) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double spent = (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9;
            if (spent >= limit) {
                PyErr_SetString(PyExc_TimeoutError, "the transfer has not completed yet");
                return NULL;
            }
            Py_BEGIN_ALLOW_THREADS
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
            Py_END_ALLOW_THREADS
        }
        if (self->finished) return result_tuple(self);
    }
    if (tfp_lock(self->client) < 0) {
        if (self->finished) {
            PyErr_Clear();
            return result_tuple(self);
        }
        return NULL;
    }
    if (!self->finished) wait_locked(self);
    tfp_unlock(self->client);
    return result_tuple(self);
}

static PyObject *pending_release(tfp_pending *self, PyObject *u) {
    (void)u;
    if (self->finished) Py_RETURN_NONE;
    if (tfp_lock(self->client) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!self->finished) {
        tf_pending_release(self->p);
        /* The library freed the tensor's handle and the buffer's mapping with it. */
        self->tensor->id = 0;
        self->buffer->buf = NULL;
        self->buffer->gone = "this pinned buffer was released with its pending transfer";
        finish(self, TF_OK, NULL);
    }
    tfp_unlock(self->client);
    Py_RETURN_NONE;
}

static void pending_dealloc(tfp_pending *self) {
    TFP_DEALLOC_BEGIN;
    /* Nobody can wait for it any more: wait now, so its tensor and buffer come back usable. */
    if (!self->finished && self->p && self->client->c && tfp_lock(self->client) == 0) {
        if (!self->finished) wait_locked(self);
        tfp_unlock(self->client);
    }
    PyErr_Clear();
    if (!self->finished && self->tensor) {
        self->tensor->transfer = NULL;
        self->buffer->transfer = NULL;
    }
    Py_XDECREF((PyObject *)self->error);
    Py_XDECREF((PyObject *)self->tensor);
    Py_XDECREF((PyObject *)self->buffer);
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *pending_repr(tfp_pending *self) {
    return PyUnicode_FromFormat("<tenferro.PendingTransfer %s %s>", self->upload ? "upload" : "download",
                                self->finished ? (self->status == TF_OK ? "finished" : "failed")
                                               : "in flight");
}

static PyObject *pending_get_tensor(tfp_pending *self, void *c) {
    (void)c;
    return TFP_REF(self->tensor);
}
static PyObject *pending_get_buffer(tfp_pending *self, void *c) {
    (void)c;
    return TFP_REF(self->buffer);
}

static PyMethodDef pending_methods[] = {
    {"done", (PyCFunction)pending_done, METH_NOARGS,
     "done() -> bool\n\nTrue once the copy has completed (result() will not sleep). Never blocks: "
     "one atomic load of the completion page the daemon writes."},
    {"result", (PyCFunction)(void (*)(void))pending_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None) -> (Tensor, PinnedBuffer)\n\nWaits for the transfer (the GIL released) "
     "and hands back the tensor and the buffer, usable again. The transfer's failure raises "
     "(DisconnectedError when the daemon went away; the tensor and buffer come back all the "
     "same). With timeout (seconds), TimeoutError when it has not completed by then."},
    {"release", (PyCFunction)pending_release, METH_NOARGS,
     "release() -> None\n\nDetaches a transfer nobody will wait for: its tensor and buffer are "
     "freed (by the daemon once the copy completes) and unusable here."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pending_getset[] = {
    {"tensor", (getter)pending_get_tensor, NULL, "The transfer's tensor (unusable until result()).", NULL},
    {"buffer", (getter)pending_get_buffer, NULL, "The transfer's buffer (unreachable until result()).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

void tfp_pinned_detach_all(tfp_client *c) {
    /* tf_disconnect frees the pending transfers: give their tensors and buffers back first. */
    while (c->pendings) {
        tfp_pending *p = c->pendings;
        p->tensor->id = 0;
        p->buffer->buf = NULL;
        p->buffer->gone = "this pinned buffer's client was closed";
        finish(p, TF_ERR_DISCONNECTED, "the client was closed while the transfer was pending");
    }
    for (tfp_pinned *b = c->pinned; b; b = b->next) {
        b->buf = NULL;
        if (!b->gone) b->gone = "this pinned buffer's client was closed";
    }
}

void tfp_pinned_after_disconnect(tfp_client *c) {
    while (c->pinned) {
        tfp_pinned *b = c->pinned;
        if (!b->own_map && b->exports > 0) {
            /* Views point into the library's mapping, now gone: give them private pages. */
            void *p = mmap(b->map, b->map_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (p != MAP_FAILED) b->own_map = 1;
        } else if (!b->own_map) {
            b->map = NULL;
        }
        unlink_buffer(b);
    }
}

int tfp_pinned_init_types(PyObject *m) {
    PyType_Slot pinned_slots[] = {
        {Py_tp_new, pinned_new},
        {Py_tp_dealloc, pinned_dealloc},
        {Py_tp_repr, pinned_repr},
        {Py_tp_methods, pinned_methods},
        {Py_tp_getset, pinned_getset},
        {Py_bf_getbuffer, pinned_getbuffer},
        {Py_bf_releasebuffer, pinned_releasebuffer},
        {Py_tp_doc, "A pinned buffer (client.pinned(shape, dtype)): host pages shared with the "
                    "daemon, seen as a numpy array with no copy (.array, numpy.asarray(buf), "
                    "memoryview(buf), numpy.from_dlpack(buf)). Reuse one buffer for every "
                    "transfer of its size: creating it is the expensive step."},
        {0, NULL},
    };
    PyType_Spec pinned_spec = {"tenferro.PinnedBuffer", sizeof(tfp_pinned), 0, Py_TPFLAGS_DEFAULT,
                               pinned_slots};
    tfp_PinnedType = (PyTypeObject *)PyType_FromSpec(&pinned_spec);
    if (!tfp_PinnedType || PyModule_AddObjectRef(m, "PinnedBuffer", (PyObject *)tfp_PinnedType) < 0)
        return -1;
    PyType_Slot pending_slots[] = {
        {Py_tp_dealloc, pending_dealloc},
        {Py_tp_repr, pending_repr},
        {Py_tp_methods, pending_methods},
        {Py_tp_getset, pending_getset},
        {Py_tp_doc, "A pending transfer (client.upload_pending, client.download_pending), a future: "
                    "done() polls, result() waits and hands back (tensor, buffer), release() "
                    "detaches. Dropping an unfinished one waits for it."},
        {0, NULL},
    };
    PyType_Spec pending_spec = {"tenferro.PendingTransfer", sizeof(tfp_pending), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, pending_slots};
    tfp_PendingType = (PyTypeObject *)PyType_FromSpec(&pending_spec);
    if (!tfp_PendingType ||
        PyModule_AddObjectRef(m, "PendingTransfer", (PyObject *)tfp_PendingType) < 0)
        return -1;
    return 0;
}
