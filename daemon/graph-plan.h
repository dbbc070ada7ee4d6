/*
 * The plan of a prepared graph (graph-plan.c): a Prepare frame checked once
 * against the shape rules and turned into values and nodes the executor can
 * run without looking at the wire again, plus the graph's canonical form, the
 * key under which equal graphs from any client are recognised.
 *
 * Values are numbered: the graph's inputs first (0 .. n_inputs-1), then the
 * output of node n at n_inputs + n. A node reads values of lower number only,
 * so the node order is a topological order and a cycle cannot be expressed.
 * Nothing here allocates device memory or touches the backend.
 */
#ifndef TENFERRO_DAEMON_GRAPH_PLAN_H
#define TENFERRO_DAEMON_GRAPH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/frame.h"
#include "daemon/backend/backend.h"

/* Most inputs and most outputs one graph may have. */
#define TFD_GRAPH_MAX_INPUTS 64
#define TFD_GRAPH_MAX_OUTPUTS 64

/* One value of the graph: an input or a node's output. */
typedef struct tfd_graph_value {
    tf__meta meta;
    size_t bytes;
    int node; /* the node writing it, -1 for a graph input */
} tfd_graph_value;

/* One node: its operation (metadata filled, no data pointers) and the values it reads and writes. */
typedef struct tfd_graph_node {
    tfd_op op;
    int in_value[2];
    int out_value;
} tfd_graph_node;

typedef struct tfd_graph_plan {
    int n_inputs, n_nodes, n_outputs, n_values;
    tfd_graph_value *values;
    tfd_graph_node *nodes;
    int *outputs;            /* the value each output hands back, in order */
    size_t node_bytes;       /* the nodes' outputs together */
    uint8_t *key;            /* canonical form: equal for graphs that compute the same thing */
    size_t key_len;
    uint64_t key_hash[2];    /* two independent hashes of key */
} tfd_graph_plan;

/*
 * Checks a Prepare: inputs (valid dtype and shape, distinct nonzero ids),
 * nodes (each a decodable operation reading only graph inputs and earlier
 * nodes' outputs, whose shape rules hold, with a fresh output id; FREE and
 * RUN_PREPARED are not nodes), outputs (known ids), and the sizes against
 * max_nodes. On success *out is the plan. On refusal the status is typed,
 * msg says why, and *failed_node is the index of the node at fault, or -1
 * when the refusal is about the graph as a whole.
 */
tf_status tfd_graph_plan_build(const Tenferro__Prepare *p, int max_nodes, int test_fault_allowed,
                               tfd_graph_plan **out, int *failed_node, char *msg, size_t len);

void tfd_graph_plan_free(tfd_graph_plan *p);

/* 1 when two plans compute the same thing (equal canonical forms). */
int tfd_graph_plan_same(const tfd_graph_plan *a, const tfd_graph_plan *b);

#endif
