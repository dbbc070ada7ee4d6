/*
 * Prepared graphs (docs/prepared.md): work described once, checked and
 * planned once by the daemon, then run many times inside sessions.
 *
 *   tf_graph *g;
 *   tf_graph_new(client, &g);
 *   tf_tensor x, y, t;
 *   tf_graph_input(g, TF_F32, 1, (int64_t[]){4096}, &x);   // symbolic: dtype and shape fixed
 *   tf_view *rec = tf_graph_view(g);                         // records instead of queueing
 *   tf_view_mul(rec, x, x, &t);
 *   tf_view_exp(rec, t, &y);
 *   tf_graph_output(g, y);
 *   tf_prepared p;
 *   tf_prepare(client, g, &p);                               // one round trip
 *   tf_graph_free(g);
 *   ... inside tf_with_session or tf_session_with:
 *   tf_view_run_prepared(view, p, 1, &real_x, 1, &real_y);   // queued like any operation
 *   ...
 *   tf_prepared_free(client, p);
 *
 * Every tf_view_* operation (elementwise, permute, reshape, reductions,
 * matmul, einsum, FFT) works on the recording view, with the same rules and
 * errors as in a session; its outputs are symbolic tensors of the graph, used
 * only as inputs of later recorded operations or as graph outputs. Recording
 * needs no session and sends nothing; tf_prepare sends the graph once.
 */
#ifndef TENFERRO_GRAPH_H
#define TENFERRO_GRAPH_H

#include <stdint.h>

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/session.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A graph being recorded, owned by the caller until tf_graph_free. */
typedef struct tf_graph tf_graph;

/* A prepared graph of one client (0 is never a valid one). */
typedef uint64_t tf_prepared;

/* Most inputs and most outputs a graph may have. */
#define TF_GRAPH_MAX_INPUTS 64
#define TF_GRAPH_MAX_OUTPUTS 64

/* Starts an empty graph for client c (the graph may only be prepared by c). */
TF_EXTERN tf_status tf_graph_new(tf_client *c, tf_graph **out);

/* Adds the next input (inputs are numbered in the order added): a symbolic tensor of that dtype and shape. */
TF_EXTERN tf_status tf_graph_input(tf_graph *g, tf_dtype dtype, int rank, const int64_t *shape,
                                   tf_tensor *out);

/* The recording view: tf_view_* calls on it add nodes to g. Valid until tf_graph_free. */
TF_EXTERN tf_view *tf_graph_view(tf_graph *g);

/* Marks t (an input or a recorded result) as the next output; a value may be marked twice. */
TF_EXTERN tf_status tf_graph_output(tf_graph *g, tf_tensor t);

/* Nodes recorded so far. */
TF_EXTERN int tf_graph_node_count(const tf_graph *g);

/*
 * Metadata of a value of g (an input or a recorded result): dtype, rank and
 * shape (shape may be NULL). TF_ERR_UNKNOWN_HANDLE for anything else.
 */
TF_EXTERN tf_status tf_graph_tensor_info(const tf_graph *g, tf_tensor t, tf_dtype *dtype,
                                         int *rank, int64_t shape[TF_MAX_RANK]);

/* Frees the recording (a prepared graph made from it stays). NULL is ignored. */
TF_EXTERN void tf_graph_free(tf_graph *g);

/*
 * Sends g to the daemon, which checks every node (a refusal names the node:
 * tf_client_failed_index), plans its memory and, on a GPU, captures it as a
 * device graph. A daemon that prepared an equal graph before (this process
 * or another) hands over its instance at once. The device memory it holds
 * counts against the client's device_bytes quota until tf_prepared_free; a
 * graph whose values cannot fit the quota is refused (TF_ERR_QUOTA) before
 * anything is built for it.
 */
TF_EXTERN tf_status tf_prepare(tf_client *c, const tf_graph *g, tf_prepared *out);

/* Inputs and outputs a prepared graph takes and gives, and output i's dtype and shape. */
TF_EXTERN tf_status tf_prepared_info(tf_client *c, tf_prepared p, int *n_inputs, int *n_outputs);
TF_EXTERN tf_status tf_prepared_output(tf_client *c, tf_prepared p, int i, tf_dtype *dtype,
                                       int *rank, int64_t *shape);

/*
 * Forgets a prepared graph; runs already submitted finish first. A run of it
 * still queued in the open session and not submitted makes this TF_ERR_BUSY.
 */
TF_EXTERN tf_status tf_prepared_free(tf_client *c, tf_prepared p);

/*
 * Queues one run of p in the session of view v (scoped or held): inputs
 * [0, n_inputs) are this client's tensors of the dtypes and shapes the graph
 * was recorded with, and outputs[0, n_outputs) receive new tensors at once,
 * as any operation's output. Checked here and again by the daemon before
 * anything runs: a graph of another connection or freed, the wrong number of
 * inputs or outputs, an input of the wrong dtype or shape (named). A refused
 * run queues nothing. An input in a pending transfer is read after its copy.
 */
TF_EXTERN tf_status tf_view_run_prepared(tf_view *v, tf_prepared p, int n_inputs,
                                         const tf_tensor *inputs, int n_outputs,
                                         tf_tensor *outputs);

#ifdef __cplusplus
}
#endif

#endif
