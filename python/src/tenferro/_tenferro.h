/*
 * The CPython extension tenferro._tenferro over libtenferro-client: the
 * objects every file of the extension shares, and the helpers between them.
 *
 * Built against the stable ABI (Py_LIMITED_API 3.11): one build serves
 * CPython 3.11 and later. numpy is imported lazily (first dtype, first
 * download into a new array), so `import tenferro` costs no numpy import.
 *
 * Locking: a tf_client is not thread-safe, so every call into the library
 * holds the client's lock (tfp_lock). The lock is taken with the GIL held
 * when it is free, else after letting the GIL go; a call that can block
 * (waits, round trips, transfers) lets the GIL go while it runs and keeps the
 * lock. A tensor freed by the garbage collector while another thread holds
 * the lock is queued on the client and freed by the next call (never waits
 * under the GIL).
 *
 * Files: module.c (init, errors, dtypes), client.c (Client), tensor.c
 * (Tensor and its operators), ops.c (the operations and where they are
 * queued), linalg.c (the linear algebra of tenferro.linalg and its truncation
 * reports), session.c (held and scoped sessions), pinned.c (pinned buffers,
 * DLPack, pending transfers), graph.c (recording and prepared graphs).
 */
#ifndef TENFERRO_PY_EXT_H
#define TENFERRO_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <stdio.h>
#include <ucontext.h>

#include "tenferro/tenferro.h"

/* A new reference to any object pointer (the stable ABI's Py_NewRef takes PyObject * only). */
#define TFP_REF(o) Py_NewRef((PyObject *)(o))

/* A deallocation may run while an exception is being raised: it keeps that exception. */
#define TFP_DEALLOC_BEGIN PyObject *err_t_, *err_v_, *err_tb_; PyErr_Fetch(&err_t_, &err_v_, &err_tb_)
#define TFP_DEALLOC_END PyErr_Restore(err_t_, err_v_, err_tb_)

typedef struct tfp_client tfp_client;
typedef struct tfp_tensor tfp_tensor;
typedef struct tfp_held tfp_held;
typedef struct tfp_scoped tfp_scoped;
typedef struct tfp_graph tfp_graph;
typedef struct tfp_prepared tfp_prepared;
typedef struct tfp_pinned tfp_pinned;
typedef struct tfp_pending tfp_pending;

/* A connection (tenferro.Client). */
struct tfp_client {
    PyObject_HEAD
    tf_client *c;             /* NULL once closed */
    PyThread_type_lock lock;  /* serializes every library call on c */
    unsigned long owner;      /* the thread holding lock (0: none) and how deeply; both only */
    int depth;                /* read and written with the GIL held */
    tfp_held *held;           /* the open held session (borrowed; it holds a reference to us) */
    tfp_scoped *scoped;       /* the active scoped session (borrowed, likewise) */
    int cuda;                 /* the daemon's device is a GPU */
    uint64_t id;
    PyObject *device;         /* str */
    PyObject *socket;         /* str or None, as given */
    tf_tensor *deferred;      /* tensors to free at the next call (freed while the lock was taken) */
    size_t n_deferred, cap_deferred;
    tfp_pinned *pinned;       /* every live pinned buffer of this client (borrowed) */
    tfp_pending *pendings;    /* every pending transfer not yet finished (borrowed) */
    tfp_prepared *prepared;   /* every prepared graph not yet freed (borrowed) */
    tfp_client *prev_open, *next_open; /* the process's open clients */
};

/* A tensor handle (tenferro.Tensor): a real tensor of a client, or a symbolic value of a graph. */
struct tfp_tensor {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    tfp_graph *graph;     /* strong; non-NULL for a symbolic tensor being recorded */
    tf_tensor id;         /* 0 once freed (or given away with a released transfer) */
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    tfp_pending *transfer; /* the pending transfer holding it (borrowed), or NULL */
};

/* A held session (tenferro.Session). */
struct tfp_held {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    tf_session *s;        /* non-NULL while open */
    int state;            /* 0 not opened, 1 open, 2 closed or released */
    tf_session_counters final; /* after close */
    uint64_t final_host_waits;  /* tf_session_host_waits at close or release */
};

/* A scoped session (tenferro.ScopedSession): tf_with_session on its own stack, suspended in its callback. */
struct tfp_scoped {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    int state;            /* 0 not entered, 1 active, 2 done */
    tf_view *view;        /* the callback's view while active */
    ucontext_t caller, coroutine;
    void *stack;
    size_t stack_bytes;
    int fn_called, finished;
    tf_status result;
};

/* A graph being recorded (tenferro._Graph). */
struct tfp_graph {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    tf_graph *g;          /* NULL once prepared or abandoned */
};

/* A prepared graph (tenferro.Prepared). */
struct tfp_prepared {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    tf_prepared p;        /* 0 once freed */
    int n_inputs, n_outputs;
    int single;           /* the recorded function returned one tensor, not a tuple */
    tfp_prepared *prev, *next;
};

/* A pinned buffer (tenferro.PinnedBuffer). */
struct tfp_pinned {
    PyObject_HEAD
    tfp_client *client;    /* strong */
    tf_pinned_buffer *buf; /* the library's buffer; NULL once freed, released or disconnected */
    uint8_t *map;          /* this object's own mapping of the same pages (views point here) */
    size_t map_bytes;      /* length of that mapping */
    int own_map;           /* map is ours (unmapped at dealloc), else the library's */
    size_t nbytes;
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    Py_ssize_t py_shape[TF_MAX_RANK], py_strides[TF_MAX_RANK];
    Py_ssize_t exports;    /* live views: buffer-protocol exports and DLPack tensors */
    tfp_pending *transfer; /* the pending transfer holding it, or NULL */
    const char *gone;      /* why it is unusable (freed, released, disconnected), or NULL */
    tfp_pinned *prev, *next;
};

/* A pending transfer (tenferro.PendingTransfer). */
struct tfp_pending {
    PyObject_HEAD
    tfp_client *client;   /* strong */
    tf_pending *p;        /* NULL once waited for or released */
    tfp_tensor *tensor;   /* strong */
    tfp_pinned *buffer;   /* strong */
    int upload;
    int finished;         /* waited for: status and message below */
    tf_status status;
    PyObject *error;      /* the exception result() raises again, or NULL */
    tfp_pending *prev, *next;
};

/* ---- types (each file's) ---- */
extern PyTypeObject *tfp_ClientType, *tfp_TensorType, *tfp_HeldType, *tfp_ScopedType,
    *tfp_GraphType, *tfp_PreparedType, *tfp_PinnedType, *tfp_PendingType;
extern PyTypeObject *tfp_CountersType;

int tfp_client_init_type(PyObject *m);
int tfp_tensor_init_type(PyObject *m);
int tfp_session_init_types(PyObject *m);
int tfp_graph_init_types(PyObject *m);
int tfp_pinned_init_types(PyObject *m);
int tfp_ops_init(PyObject *m);
int tfp_linalg_init(PyObject *m);

/* ---- module.c: errors and dtypes ---- */

/* Raises the exception class of `st` with `message`; failed_index < 0 means none. Returns NULL. */
PyObject *tfp_raise(tf_status st, const char *message, int64_t failed_index);
/* tfp_raise with the client's last error (the lock must be held). */
PyObject *tfp_raise_client(tfp_client *c, tf_status st, int with_index);
/* Raises DisconnectedError for a closed client. */
PyObject *tfp_raise_closed(void);

/* The numpy dtype object of a tf_dtype (new reference; imports numpy on first use). */
PyObject *tfp_numpy_dtype(tf_dtype d);
/* numpy itself (borrowed; imported on first use), or NULL with an exception. */
PyObject *tfp_numpy(void);
/* The tf_dtype of a numpy dtype, a dtype name or a type (np.float64); 0 with an exception. */
tf_dtype tfp_dtype_from_object(PyObject *o);
/* The tf_dtype of a buffer-protocol format ("d", "<Zf"), or 0. */
tf_dtype tfp_dtype_from_format(const char *fmt);
/* The buffer-protocol format of a dtype ("d", "Zd"). */
const char *tfp_format(tf_dtype d);
/* numpy's name of a dtype ("float64"). */
const char *tfp_dtype_name(tf_dtype d);

/* A shape as a tuple of ints. */
PyObject *tfp_shape_tuple(int rank, const int64_t *shape);
/* Parses a shape (an int or a sequence of ints) into rank/shape; -1 with an exception. */
int tfp_parse_shape(PyObject *o, int *rank, int64_t shape[TF_MAX_RANK]);

/* ---- client.c ---- */

/* Takes the client's lock (see above); -1 with DisconnectedError when it is closed. */
int tfp_lock(tfp_client *c);
void tfp_unlock(tfp_client *c);
/* Frees the tensors queued by deallocations that found the lock taken (lock held). */
void tfp_drain_deferred(tfp_client *c);
/* Frees a tensor of c from a deallocation: now if the lock is free, else at the next call. */
void tfp_free_later(tfp_client *c, tf_tensor t);
/* The process's only open client, or NULL with an exception saying why none can be chosen. */
tfp_client *tfp_default_client(void);

/* ---- tensor.c ---- */

/* A new Tensor object for id (metadata read from the client or graph; lock held). NULL on failure. */
PyObject *tfp_tensor_wrap(tfp_client *c, tfp_graph *g, tf_tensor id);
/* A new Tensor with known metadata. */
PyObject *tfp_tensor_new(tfp_client *c, tfp_graph *g, tf_tensor id, tf_dtype dtype, int rank,
                         const int64_t *shape);
int tfp_is_tensor(PyObject *o);

/* ---- ops.c ---- */

/* Operation kinds the extension queues. */
enum tfp_kind {
    TFP_ADD = 1, TFP_SUB, TFP_MUL, TFP_DIV,
    TFP_NEG, TFP_CONJ, TFP_ABS, TFP_EXP, TFP_LOG, TFP_SQRT, TFP_COPY,
    TFP_SCALE, TFP_AXPBY, TFP_PERMUTE, TFP_RESHAPE, TFP_REDUCE, TFP_MATMUL,
    TFP_EINSUM, TFP_FFT, TFP_IFFT, TFP_RFFT, TFP_IRFFT, TFP_RUN_PREPARED, TFP_SQUARE,
    TFP_VIEW_FN, /* op->view_fn queues it (linalg.c): n_out results */
};

#define TFP_MAX_IO 64

/* One operation with its arguments, as ops.c runs it on a view. */
typedef struct tfp_op tfp_op;
struct tfp_op {
    int kind;
    int n_in, n_out;
    tf_tensor in[TFP_MAX_IO];
    tf_tensor out[TFP_MAX_IO];
    tf_scalar alpha, beta;
    int n_axes;
    int axes[TF_MAX_RANK];
    int keepdims;
    tf_reduce_kind reduce;
    int rank;
    int64_t shape[TF_MAX_RANK];
    tf_fft_norm norm;
    int64_t last_length;
    const char *subscripts;
    tf_einsum_options einsum;
    tf_prepared prepared;
    /* TFP_VIEW_FN: the call that queues it on a view, writing out[0 .. n_out), and its arguments. */
    tf_status (*view_fn)(tf_view *v, tfp_op *op);
    const void *args;
};

/*
 * Runs op on its operands' session: the held session of their client, its
 * scoped session, a graph being recorded (symbolic operands), or else a
 * scoped session of its own (one round trip). Returns the output Tensor (a
 * tuple of them for a prepared run or a TFP_VIEW_FN with several outputs, or
 * whenever tuple_out).
 */
PyObject *tfp_run(tfp_op *op, PyObject *const *operands, int n, int tuple_out);

/* The scalar of a Python number (int, float, complex, numpy scalar); 0 on success, -1 when not one. */
int tfp_scalar_from(PyObject *o, tf_scalar *s, int *is_complex);
/* Parses axis= (None, an int or a sequence) against rank; -1 with an exception. */
int tfp_parse_axes(PyObject *o, int rank, int *n_axes, int axes[TF_MAX_RANK], int allow_none);

/* Binary operators of Tensor (tensor.c's number slots). */
PyObject *tfp_binary(int kind, PyObject *a, PyObject *b);
PyObject *tfp_unary(int kind, PyObject *a);
PyObject *tfp_scale(PyObject *t, tf_scalar alpha);
PyObject *tfp_reduce(PyObject *t, tf_reduce_kind kind, PyObject *axis, int keepdims);
PyObject *tfp_transpose(PyObject *t, PyObject *axes);
PyObject *tfp_reshape(PyObject *t, PyObject *shape);

/* ---- session.c ---- */

/* Ends the client's active sessions before it closes (held: released; scoped: finished). */
void tfp_sessions_end(tfp_client *c);
/* Runs the scoped coroutine to its end (lock held, GIL held); the status of the burst. */
tf_status tfp_scoped_finish(tfp_scoped *sc);

/* ---- pinned.c ---- */

/* Detaches every pinned buffer and pending transfer of a client that is closing (lock held). */
void tfp_pinned_detach_all(tfp_client *c);
/* After tf_disconnect: keeps views of buffers that shared the library's mapping valid. */
void tfp_pinned_after_disconnect(tfp_client *c);
/* Client.upload_pending(buffer, tensor) and Client.download_pending(tensor, buffer). */
PyObject *tfp_upload_pending(tfp_client *c, PyObject *args, PyObject *kw);
PyObject *tfp_download_pending(tfp_client *c, PyObject *args, PyObject *kw);

/* ---- graph.c ---- */
void tfp_prepared_detach_all(tfp_client *c);

#endif
