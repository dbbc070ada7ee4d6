/*
 * Prepared graphs: tenferro._Graph records operations on symbolic tensors
 * (tf_graph and its recording view; ops.c sends a symbolic operand's
 * operations there), and tenferro.Prepared is the daemon's prepared graph,
 * called like a function inside a session (tf_view_run_prepared).
 * tenferro.prepare(fn, *specs) in __init__.py drives both.
 */
#include <string.h>

#include "_tenferro.h"

PyTypeObject *tfp_GraphType, *tfp_PreparedType;

static void tp_free_self(PyObject *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ---- recording ---- */

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *client;
    if (!PyArg_ParseTuple(args, "O!", tfp_ClientType, &client)) return NULL;
    tfp_client *c = (tfp_client *)client;
    if (tfp_lock(c) < 0) return NULL;
    tf_graph *g = NULL;
    tf_status st = tf_graph_new(c->c, &g);
    if (st != TF_OK) {
        tfp_raise_client(c, st, 0);
        tfp_unlock(c);
        return NULL;
    }
    tfp_unlock(c);
    tfp_graph *obj = (tfp_graph *)PyType_GenericAlloc(type, 0);
    if (!obj) {
        tf_graph_free(g);
        return NULL;
    }
    obj->client = (tfp_client *)TFP_REF(c);
    obj->g = g;
    return (PyObject *)obj;
}

static int graph_check(tfp_graph *self) {
    if (!self->g) {
        tfp_raise(TF_ERR_INVALID_ARGUMENT, "this graph was already prepared or abandoned", -1);
        return -1;
    }
    return tfp_lock(self->client);
}

static PyObject *graph_input(tfp_graph *self, PyObject *args) {
    PyObject *shape_o, *dtype_o = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:input", &shape_o, &dtype_o)) return NULL;
    int rank;
    int64_t shape[TF_MAX_RANK];
    if (tfp_parse_shape(shape_o, &rank, shape) < 0) return NULL;
    tf_dtype dt = dtype_o == Py_None ? TF_F64 : tfp_dtype_from_object(dtype_o);
    if (!dt) return NULL;
    if (graph_check(self) < 0) return NULL;
    tf_tensor t = 0;
    tf_status st = tf_graph_input(self->g, dt, rank, shape, &t);
    PyObject *r = st == TF_OK ? tfp_tensor_new(self->client, self, t, dt, rank, shape)
                              : tfp_raise_client(self->client, st, 0);
    tfp_unlock(self->client);
    return r;
}

static PyObject *graph_output(tfp_graph *self, PyObject *t) {
    if (!tfp_is_tensor(t) || ((tfp_tensor *)t)->graph != self) {
        PyErr_SetString(PyExc_TypeError,
                        "a graph's outputs are its symbolic tensors (the function's inputs or "
                        "results of operations on them)");
        return NULL;
    }
    if (graph_check(self) < 0) return NULL;
    tf_status st = tf_graph_output(self->g, ((tfp_tensor *)t)->id);
    PyObject *r = st == TF_OK ? TFP_REF(Py_None) : tfp_raise_client(self->client, st, 0);
    tfp_unlock(self->client);
    return r;
}

static void link_prepared(tfp_prepared *p) {
    tfp_client *c = p->client;
    p->prev = NULL;
    p->next = c->prepared;
    if (c->prepared) c->prepared->prev = p;
    c->prepared = p;
}

static void unlink_prepared(tfp_prepared *p) {
    tfp_client *c = p->client;
    if (p->prev)
        p->prev->next = p->next;
    else if (c->prepared == p)
        c->prepared = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

/* prepare(single) -> Prepared: sends the graph (one round trip, the GIL released) and ends the recording. */
static PyObject *graph_prepare(tfp_graph *self, PyObject *args) {
    int single = 0;
    if (!PyArg_ParseTuple(args, "|p:prepare", &single)) return NULL;
    if (graph_check(self) < 0) return NULL;
    tfp_client *c = self->client;
    tf_prepared p = 0;
    tf_status st;
    tf_graph *g = self->g;
    Py_BEGIN_ALLOW_THREADS
    st = tf_prepare(c->c, g, &p);
    Py_END_ALLOW_THREADS
    if (st != TF_OK) {
        tfp_raise_client(c, st, 1);
        tfp_unlock(c);
        return NULL;
    }
    tf_graph_free(self->g);
    self->g = NULL;
    tfp_prepared *obj = (tfp_prepared *)PyType_GenericAlloc(tfp_PreparedType, 0);
    if (!obj) {
        tf_prepared_free(c->c, p);
        tfp_unlock(c);
        return NULL;
    }
    obj->client = (tfp_client *)TFP_REF(c);
    obj->p = p;
    obj->single = single;
    tf_prepared_info(c->c, p, &obj->n_inputs, &obj->n_outputs);
    link_prepared(obj);
    tfp_unlock(c);
    return (PyObject *)obj;
}

static PyObject *graph_nodes(tfp_graph *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->g ? tf_graph_node_count(self->g) : 0);
}

static void graph_dealloc(tfp_graph *self) {
    TFP_DEALLOC_BEGIN;
    /* Symbolic tensors hold a reference to their graph, so none is left here. */
    tf_graph_free(self->g);
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    tp_free_self((PyObject *)self);
}

static PyMethodDef graph_methods[] = {
    {"input", (PyCFunction)graph_input, METH_VARARGS, "input(shape, dtype) -> Tensor: the next symbolic input."},
    {"output", (PyCFunction)graph_output, METH_O, "output(t) -> None: marks t as the next output."},
    {"prepare", (PyCFunction)graph_prepare, METH_VARARGS,
     "prepare(single=False) -> Prepared: sends the graph to the daemon (a refusal names the node "
     "in failed_index)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"nodes", (getter)graph_nodes, NULL, "Nodes recorded so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- prepared graphs ---- */

static PyObject *prepared_call(tfp_prepared *self, PyObject *args, PyObject *kw) {
    if (kw && PyDict_Size(kw) > 0) {
        PyErr_SetString(PyExc_TypeError, "a prepared graph takes its inputs by position");
        return NULL;
    }
    if (!self->p) return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "this prepared graph was freed", -1);
    Py_ssize_t n = PyTuple_Size(args);
    if (n != self->n_inputs) {
        char msg[120];
        snprintf(msg, sizeof msg, "the prepared graph takes %d inputs, not %zd", self->n_inputs, n);
        return tfp_raise(TF_ERR_INVALID_ARGUMENT, msg, -1);
    }
    if (n < 1 || n > TFP_MAX_IO)
        return tfp_raise(TF_ERR_UNSUPPORTED, "a prepared graph without inputs cannot be run from Python", -1);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GetItem(args, i);
        if (tfp_is_tensor(t) && ((tfp_tensor *)t)->client != self->client)
            return tfp_raise(TF_ERR_UNKNOWN_HANDLE,
                             "an input is a tensor of another client than the prepared graph's", -1);
    }
    tfp_op op;
    op.kind = TFP_RUN_PREPARED;
    op.prepared = self->p;
    op.n_in = (int)n;
    op.n_out = self->n_outputs;
    PyObject *items[TFP_MAX_IO];
    for (Py_ssize_t i = 0; i < n; i++) items[i] = PyTuple_GetItem(args, i);
    return tfp_run(&op, items, (int)n, !self->single);
}

static PyObject *prepared_free(tfp_prepared *self, PyObject *u) {
    (void)u;
    if (!self->p) Py_RETURN_NONE;
    if (tfp_lock(self->client) < 0) return NULL;
    tf_status st;
    tf_client *c = self->client->c;
    tf_prepared p = self->p;
    Py_BEGIN_ALLOW_THREADS
    st = tf_prepared_free(c, p);
    Py_END_ALLOW_THREADS
    PyObject *r = NULL;
    if (st == TF_OK) {
        self->p = 0;
        unlink_prepared(self);
        r = TFP_REF(Py_None);
    } else {
        tfp_raise_client(self->client, st, 0);
    }
    tfp_unlock(self->client);
    return r;
}

static PyObject *prepared_outputs(tfp_prepared *self, void *c) {
    (void)c;
    if (!self->p) return tfp_raise(TF_ERR_UNKNOWN_HANDLE, "this prepared graph was freed", -1);
    if (tfp_lock(self->client) < 0) return NULL;
    PyObject *list = PyList_New(self->n_outputs);
    for (int i = 0; list && i < self->n_outputs; i++) {
        tf_dtype dt;
        int rank;
        int64_t shape[TF_MAX_RANK];
        tf_prepared_output(self->client->c, self->p, i, &dt, &rank, shape);
        PyObject *sh = tfp_shape_tuple(rank, shape);
        PyObject *d = sh ? tfp_numpy_dtype(dt) : NULL;
        PyObject *item = d ? PyTuple_Pack(2, sh, d) : NULL;
        Py_XDECREF(sh);
        Py_XDECREF(d);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, i, item);
    }
    tfp_unlock(self->client);
    return list;
}

static PyObject *prepared_n_inputs(tfp_prepared *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->n_inputs);
}

static PyObject *prepared_repr(tfp_prepared *self) {
    return PyUnicode_FromFormat("<tenferro.Prepared inputs=%d outputs=%d%s>", self->n_inputs,
                                self->n_outputs, self->p ? "" : " freed");
}

static void prepared_dealloc(tfp_prepared *self) {
    TFP_DEALLOC_BEGIN;
    if (self->p && self->client->c && PyThread_acquire_lock(self->client->lock, NOWAIT_LOCK)) {
        tf_prepared_free(self->client->c, self->p);
        PyThread_release_lock(self->client->lock);
    }
    if (self->p) unlink_prepared(self);
    Py_XDECREF((PyObject *)self->client);
    TFP_DEALLOC_END;
    tp_free_self((PyObject *)self);
}

void tfp_prepared_detach_all(tfp_client *c) {
    while (c->prepared) {
        c->prepared->p = 0;
        unlink_prepared(c->prepared);
    }
}

static PyMethodDef prepared_methods[] = {
    {"free", (PyCFunction)prepared_free, METH_NOARGS,
     "free() -> None\n\nForgets the prepared graph (runs already submitted finish first)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef prepared_getset[] = {
    {"outputs", (getter)prepared_outputs, NULL, "[(shape, dtype)] of each output.", NULL},
    {"n_inputs", (getter)prepared_n_inputs, NULL, "How many inputs a run takes.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int tfp_graph_init_types(PyObject *m) {
    PyType_Slot gslots[] = {
        {Py_tp_new, graph_new},
        {Py_tp_dealloc, graph_dealloc},
        {Py_tp_methods, graph_methods},
        {Py_tp_getset, graph_getset},
        {Py_tp_doc, "A graph being recorded (used by tenferro.prepare)."},
        {0, NULL},
    };
    PyType_Spec gspec = {"tenferro._Graph", sizeof(tfp_graph), 0, Py_TPFLAGS_DEFAULT, gslots};
    tfp_GraphType = (PyTypeObject *)PyType_FromSpec(&gspec);
    if (!tfp_GraphType || PyModule_AddObjectRef(m, "_Graph", (PyObject *)tfp_GraphType) < 0) return -1;
    PyType_Slot pslots[] = {
        {Py_tp_dealloc, prepared_dealloc},
        {Py_tp_repr, prepared_repr},
        {Py_tp_call, prepared_call},
        {Py_tp_methods, prepared_methods},
        {Py_tp_getset, prepared_getset},
        {Py_tp_doc, "A prepared graph (tenferro.prepare): call it with real tensors of the recorded "
                    "dtypes and shapes, inside a session or not, like any operation; it returns "
                    "the output tensor (a tuple when the function returned several)."},
        {0, NULL},
    };
    PyType_Spec pspec = {"tenferro.Prepared", sizeof(tfp_prepared), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, pslots};
    tfp_PreparedType = (PyTypeObject *)PyType_FromSpec(&pspec);
    if (!tfp_PreparedType || PyModule_AddObjectRef(m, "Prepared", (PyObject *)tfp_PreparedType) < 0)
        return -1;
    return 0;
}
