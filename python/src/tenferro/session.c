/*
 * Sessions as context managers.
 *
 * tenferro.Session is a held session (tf_session_open ... tf_session_close):
 * every operation on the client's tensors inside it is one tf_session_with,
 * queued locally; submit(), synchronize() and the end of the block are the
 * boundaries. Leaving the block normally closes (submits what is left and
 * keeps the counters); leaving it by an exception releases (the drop path:
 * nothing more is submitted).
 *
 * tenferro.ScopedSession is tf_with_session, whose callback cannot return to
 * Python while the burst is open. So __enter__ runs tf_with_session on a
 * stack of its own (ucontext) until its callback starts, and the callback
 * switches back at once, leaving the library inside the burst with its view;
 * the block's operations are queued on that view from the caller's stack;
 * __exit__ switches back into the callback, which returns, and
 * tf_with_session submits the burst and waits for it, as in C. No Python
 * code ever runs on the second stack.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "_tenferro.h"

PyTypeObject *tfp_HeldType, *tfp_ScopedType, *tfp_CountersType;

static PyStructSequence_Field counter_fields[] = {
    {"held_operations", "operations queued in the session (one tf_session_with each)"},
    {"explicit_submits", "submit() calls"},
    {"close_submits", "submissions made by close (the end of the block)"},
    {"failed_submits", "submissions (submit or close) that failed"},
    {"explicit_synchronizes", "synchronize() calls"},
    {"failed_synchronizes", "synchronize() calls that failed"},
    {"queued_ops", "operations carried to the daemon by the session's boundaries (frees included)"},
    {"host_waits", "times this client waited for the device's results while the session was open: "
                   "its synchronizes, blocking downloads and truncation report reads "
                   "(tf_session_host_waits)"},
    {NULL, NULL},
};

static PyStructSequence_Desc counters_desc = {
    "tenferro.SessionCounters",
    "Counters of one held session as the session observed them (tf_session_counters).",
    counter_fields,
    8,
};

static PyObject *counters_object(const tf_session_counters *k, uint64_t host_waits) {
    PyObject *o = PyStructSequence_New(tfp_CountersType);
    if (!o) return NULL;
    const uint64_t v[8] = {k->held_operations, k->explicit_submits, k->close_submits,
                           k->failed_submits, k->explicit_synchronizes, k->failed_synchronizes,
                           k->queued_ops, host_waits};
    for (int i = 0; i < 8; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (!x) {
            Py_DECREF(o);
            return NULL;
        }
        PyStructSequence_SetItem(o, i, x);
    }
    return o;
}

static PyObject *call_tp_free(PyObject *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
    return NULL;
}

static tfp_client *client_arg(PyObject *args) {
    PyObject *c;
    if (!PyArg_ParseTuple(args, "O!", tfp_ClientType, &c)) return NULL;
    return (tfp_client *)c;
}

/* ---- held sessions ---- */

static PyObject *held_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)kw;
    tfp_client *c = client_arg(args);
    if (!c) return NULL;
    tfp_held *h = (tfp_held *)PyType_GenericAlloc(type, 0);
    if (!h) return NULL;
    h->client = (tfp_client *)TFP_REF(c);
    return (PyObject *)h;
}

static PyObject *held_open(tfp_held *self, PyObject *unused) {
    (void)unused;
    if (self->state != 0)
        return tfp_raise(TF_ERR_SESSION_CLOSED,
                         self->state == 1 ? "this session is already open"
                                          : "this session was closed: make a new one with "
                                            "client.session()",
                         -1);
    tfp_client *c = self->client;
    if (tfp_lock(c) < 0) return NULL;
    tf_session *s = NULL;
    tf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tf_session_open(c->c, &s);
    Py_END_ALLOW_THREADS
    if (st != TF_OK) {
        tfp_raise_client(c, st, 0);
        tfp_unlock(c);
        return NULL;
    }
    self->s = s;
    self->state = 1;
    c->held = self;
    tfp_unlock(c);
    Py_RETURN_NONE;
}

static PyObject *held_enter(tfp_held *self, PyObject *unused) {
    PyObject *r = held_open(self, unused);
    if (!r) return NULL;
    Py_DECREF(r);
    return TFP_REF(self);
}

/* -1 with an exception unless the session is open on an open client. */
static int held_check(tfp_held *self) {
    if (self->state != 1) {
        tfp_raise(TF_ERR_SESSION_CLOSED,
                  self->state == 0 ? "this session is not open: use `with client.session() as s:`"
                                   : "this session is closed",
                  -1);
        return -1;
    }
    return tfp_lock(self->client);
}

/* A boundary: submit (0) or synchronize (1), the GIL released. */
static PyObject *held_boundary(tfp_held *self, int sync) {
    if (held_check(self) < 0) return NULL;
    tf_status st;
    tf_session *s = self->s;
    Py_BEGIN_ALLOW_THREADS
    st = sync ? tf_session_synchronize(s) : tf_session_submit(s);
    Py_END_ALLOW_THREADS
    PyObject *r = st == TF_OK ? TFP_REF(Py_None) : tfp_raise_client(self->client, st, 1);
    tfp_unlock(self->client);
    return r;
}

static PyObject *held_submit(tfp_held *self, PyObject *u) {
    (void)u;
    return held_boundary(self, 0);
}
static PyObject *held_synchronize(tfp_held *self, PyObject *u) {
    (void)u;
    return held_boundary(self, 1);
}

static PyObject *held_close(tfp_held *self, PyObject *u) {
    (void)u;
    if (self->state == 2) Py_RETURN_NONE;
    if (held_check(self) < 0) return NULL;
    tfp_client *c = self->client;
    tf_status st;
    tf_session *s = self->s;
    tf_session_counters k;
    memset(&k, 0, sizeof k);
    self->final_host_waits = tf_session_host_waits(s);
    Py_BEGIN_ALLOW_THREADS
    st = tf_session_close(s, &k);
    Py_END_ALLOW_THREADS
    self->final = k;
    self->s = NULL;
    self->state = 2;
    c->held = NULL;
    PyObject *r = st == TF_OK ? TFP_REF(Py_None) : tfp_raise_client(c, st, 1);
    tfp_unlock(c);
    return r;
}

/* The drop path (lock held): releases the reservation, cannot fail. */
static void held_release_locked(tfp_held *self) {
    if (self->state != 1) return;
    tf_session_stats(self->s, &self->final);
    self->final_host_waits = tf_session_host_waits(self->s);
    tf_session_release(self->s);
    self->s = NULL;
    self->state = 2;
    self->client->held = NULL;
}

static PyObject *held_release(tfp_held *self, PyObject *u) {
    (void)u;
    if (self->state != 1) Py_RETURN_NONE;
    if (tfp_lock(self->client) < 0) {
        /* A closed client has no session left to release. */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    held_release_locked(self);
    tfp_unlock(self->client);
    Py_RETURN_NONE;
}

static PyObject *held_exit(tfp_held *self, PyObject *args) {
    PyObject *et = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None;
    PyObject *r = et == Py_None ? held_close(self, NULL) : held_release(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *held_counters(tfp_held *self, void *c) {
    (void)c;
    tf_session_counters k;
    memset(&k, 0, sizeof k);
    uint64_t waits = 0;
    if (self->state == 1) {
        tf_session_stats(self->s, &k);
        waits = tf_session_host_waits(self->s);
    } else if (self->state == 2) {
        k = self->final;
        waits = self->final_host_waits;
    }
    return counters_object(&k, waits);
}

static PyObject *held_is_open(tfp_held *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->state == 1);
}

static PyObject *held_get_client(tfp_held *self, void *c) {
    (void)c;
    return TFP_REF(self->client);
}

static PyObject *held_repr(tfp_held *self) {
    static const char *states[] = {"not opened", "open", "closed"};
    return PyUnicode_FromFormat("<tenferro.Session %s client=%llu>", states[self->state],
                                (unsigned long long)self->client->id);
}

static void held_dealloc(tfp_held *self) {
    TFP_DEALLOC_BEGIN;
    if (self->state == 1 && self->client->c) {
        PyObject *r = held_release(self, NULL);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    call_tp_free((PyObject *)self);
}

static PyMethodDef held_methods[] = {
    {"open", (PyCFunction)held_open, METH_NOARGS,
     "open() -> None\n\nReserves the execution domain (what `with` does). ContendedError when "
     "another client holds it (or TimeoutError under the daemon's wait policy), ReenteredError "
     "when this client already holds one or is inside a scoped session."},
    {"submit", (PyCFunction)held_submit, METH_NOARGS,
     "submit() -> None\n\nHands the queued operations to the daemon without waiting for the "
     "device (a round trip, the GIL released). A refused operation raises with failed_index."},
    {"synchronize", (PyCFunction)held_synchronize, METH_NOARGS,
     "synchronize() -> None\n\nsubmit() plus a wait for the device (the GIL released); reports "
     "device failures."},
    {"close", (PyCFunction)held_close, METH_NOARGS,
     "close() -> None\n\nSubmits what is queued, releases the reservation and keeps the final "
     "counters (the end of a `with` block). A submission failure raises; the reservation is "
     "released anyway."},
    {"release", (PyCFunction)held_release, METH_NOARGS,
     "release() -> None\n\nThe drop path: releases the reservation without submitting (queued "
     "operations are discarded; their results are unknown handles). Cannot fail."},
    {"__enter__", (PyCFunction)held_enter, METH_NOARGS, "Opens the session and returns it."},
    {"__exit__", (PyCFunction)held_exit, METH_VARARGS,
     "Closes the session, or releases it when the block raised."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef held_getset[] = {
    {"counters", (getter)held_counters, NULL,
     "The session's counters (SessionCounters): so far while open, final after close.", NULL},
    {"is_open", (getter)held_is_open, NULL, "True between open and close/release.", NULL},
    {"client", (getter)held_get_client, NULL, "The client of the session.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- scoped sessions ---- */

#define SCOPED_STACK_BYTES (512 * 1024)

static tf_status scoped_callback(tf_view *v, void *arg) {
    tfp_scoped *sc = arg;
    sc->view = v;
    sc->fn_called = 1;
    /* Back to __enter__; __exit__ resumes here and the burst is submitted. */
    swapcontext(&sc->coroutine, &sc->caller);
    return TF_OK;
}

/* The coroutine's body: the scoped session itself, on the second stack. */
static void scoped_main(unsigned hi, unsigned lo) {
    tfp_scoped *sc = (tfp_scoped *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    sc->result = tf_with_session(sc->client->c, scoped_callback, sc);
    sc->finished = 1;
    /* Returning follows uc_link back to whoever resumed us last. */
}

static void scoped_free_stack(tfp_scoped *sc) {
    if (sc->stack) munmap(sc->stack, sc->stack_bytes);
    sc->stack = NULL;
}

static PyObject *scoped_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)kw;
    tfp_client *c = client_arg(args);
    if (!c) return NULL;
    tfp_scoped *sc = (tfp_scoped *)PyType_GenericAlloc(type, 0);
    if (!sc) return NULL;
    sc->client = (tfp_client *)TFP_REF(c);
    return (PyObject *)sc;
}

static PyObject *scoped_enter(tfp_scoped *self, PyObject *u) {
    (void)u;
    if (self->state != 0)
        return tfp_raise(TF_ERR_SESSION_CLOSED,
                         "a scoped session is entered once: make a new one with client.scoped()",
                         -1);
    tfp_client *c = self->client;
    if (tfp_lock(c) < 0) return NULL;
    long page = sysconf(_SC_PAGESIZE);
    self->stack_bytes = SCOPED_STACK_BYTES + (size_t)page;
    self->stack = mmap(NULL, self->stack_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (self->stack == MAP_FAILED) {
        self->stack = NULL;
        tfp_unlock(c);
        return PyErr_NoMemory();
    }
    mprotect(self->stack, (size_t)page, PROT_NONE); /* a guard page below the stack */
    getcontext(&self->coroutine);
    self->coroutine.uc_stack.ss_sp = (char *)self->stack;
    self->coroutine.uc_stack.ss_size = self->stack_bytes;
    self->coroutine.uc_link = &self->caller;
    uintptr_t p = (uintptr_t)self;
    makecontext(&self->coroutine, (void (*)(void))scoped_main, 2, (unsigned)(p >> 32),
                (unsigned)(p & 0xffffffffu));
    self->state = 1;
    swapcontext(&self->caller, &self->coroutine);
    if (self->finished) {
        /* tf_with_session refused before running the callback (re-entered, disconnected). */
        self->state = 2;
        scoped_free_stack(self);
        PyObject *r = tfp_raise_client(c, self->result, 0);
        tfp_unlock(c);
        return r;
    }
    c->scoped = self;
    tfp_unlock(c);
    return TFP_REF(self);
}

tf_status tfp_scoped_finish(tfp_scoped *sc) {
    if (sc->state != 1) return sc->result;
    tfp_client *c = sc->client;
    c->scoped = NULL;
    Py_BEGIN_ALLOW_THREADS
    swapcontext(&sc->caller, &sc->coroutine);
    Py_END_ALLOW_THREADS
    sc->state = 2;
    scoped_free_stack(sc);
    return sc->result;
}

static PyObject *scoped_exit(tfp_scoped *self, PyObject *args) {
    PyObject *et = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None;
    if (self->state != 1) Py_RETURN_FALSE;
    tfp_client *c = self->client;
    /* The client is open: an active scoped session is finished before any close. */
    if (tfp_lock(c) < 0) return NULL;
    tf_status st = tfp_scoped_finish(self);
    PyObject *r = NULL;
    if (st != TF_OK && et == Py_None)
        tfp_raise_client(c, st, 1);
    else
        r = TFP_REF(Py_False); /* an exception of the block goes on unchanged */
    tfp_unlock(c);
    return r;
}

static void scoped_dealloc(tfp_scoped *self) {
    TFP_DEALLOC_BEGIN;
    if (self->state == 1 && self->client->c && tfp_lock(self->client) == 0) {
        tfp_scoped_finish(self);
        tfp_unlock(self->client);
    }
    scoped_free_stack(self);
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    call_tp_free((PyObject *)self);
}

static PyObject *scoped_is_active(tfp_scoped *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->state == 1);
}

static PyObject *scoped_repr(tfp_scoped *self) {
    static const char *states[] = {"not entered", "active", "done"};
    return PyUnicode_FromFormat("<tenferro.ScopedSession %s client=%llu>", states[self->state],
                                (unsigned long long)self->client->id);
}

static PyMethodDef scoped_methods[] = {
    {"__enter__", (PyCFunction)scoped_enter, METH_NOARGS,
     "Enters the burst (ReenteredError inside a held session or another scoped session)."},
    {"__exit__", (PyCFunction)scoped_exit, METH_VARARGS,
     "Submits the burst and waits for it (the GIL released). A refusal (ContendedError, a failed "
     "operation with failed_index) raises, unless the block itself raised: then the block's "
     "exception goes on, and what the block queued before it still runs, as tf_with_session "
     "does."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef scoped_getset[] = {
    {"is_active", (getter)scoped_is_active, NULL, "True inside the `with` block.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

void tfp_sessions_end(tfp_client *c) {
    if (c->scoped) tfp_scoped_finish(c->scoped);
    if (c->held) held_release_locked(c->held);
}

int tfp_session_init_types(PyObject *m) {
    PyType_Slot held_slots[] = {
        {Py_tp_new, held_new},
        {Py_tp_dealloc, held_dealloc},
        {Py_tp_repr, held_repr},
        {Py_tp_methods, held_methods},
        {Py_tp_getset, held_getset},
        {Py_tp_doc, "A held session (client.session()): `with client.session() as s:` reserves the "
                    "device's execution domain for the block. Operations on the client's tensors "
                    "inside are queued locally (no round trip each); s.submit() hands them over "
                    "without waiting, s.synchronize() also waits; the block's end closes (or, on "
                    "an exception, releases) the session. s.counters reports the counters."},
        {0, NULL},
    };
    PyType_Spec held_spec = {"tenferro.Session", sizeof(tfp_held), 0, Py_TPFLAGS_DEFAULT, held_slots};
    tfp_HeldType = (PyTypeObject *)PyType_FromSpec(&held_spec);
    if (!tfp_HeldType || PyModule_AddObjectRef(m, "Session", (PyObject *)tfp_HeldType) < 0) return -1;
    PyType_Slot scoped_slots[] = {
        {Py_tp_new, scoped_new},
        {Py_tp_dealloc, scoped_dealloc},
        {Py_tp_repr, scoped_repr},
        {Py_tp_methods, scoped_methods},
        {Py_tp_getset, scoped_getset},
        {Py_tp_doc, "A scoped session (client.scoped()): `with client.scoped():` runs the block's "
                    "operations as one burst, submitted and waited for at the block's end (one "
                    "round trip). A download inside the block sends what is queued first."},
        {0, NULL},
    };
    PyType_Spec scoped_spec = {"tenferro.ScopedSession", sizeof(tfp_scoped), 0, Py_TPFLAGS_DEFAULT,
                               scoped_slots};
    tfp_ScopedType = (PyTypeObject *)PyType_FromSpec(&scoped_spec);
    if (!tfp_ScopedType || PyModule_AddObjectRef(m, "ScopedSession", (PyObject *)tfp_ScopedType) < 0)
        return -1;
    tfp_CountersType = PyStructSequence_NewType(&counters_desc);
    if (!tfp_CountersType ||
        PyModule_AddObjectRef(m, "SessionCounters", (PyObject *)tfp_CountersType) < 0)
        return -1;
    return 0;
}
