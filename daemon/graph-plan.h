/*
 * The plan of a prepared graph (graph-plan.c): a Prepare frame checked once
 * against the shape rules and turned into values and nodes the executor can
 * run without looking at the wire again, plus the graph's canonical form, the
 * key under which equal graphs from any client are recognised.
 *
 * Values are numbered: the graph's inputs first (0 .. n_inputs-1), then each
 * node's outputs in node order (one for most kinds, up to
 * TF__LINALG_MAX_OUTPUTS for a linear-algebra kind), then that node's
 * scratch value if it has one. A node reads values of lower number only, so
 * the node order is a topological order and a cycle cannot be expressed.
 * Nothing here allocates device memory or touches the backend.
 *
 * A linear-algebra node whose split permutes its input (docs/linalg.md, "The
 * tensor form") gets a scratch value: the input copied into the split's
 * order, which a batch makes in temporary stream memory followed by a FREE.
 * In a graph it is a value of the arena like any intermediate, written by
 * the node's own PERMUTE just before the operation and read only by it, so
 * its slot is free again for the nodes after it; it costs no allocation per
 * run and is charged with the arena at prepare.
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

/* Most values one node writes: a truncated SVD's U, S, Vh and report. */
#define TFD_GRAPH_NODE_OUTPUTS TF__LINALG_MAX_OUTPUTS

/* One value of the graph: an input, a node's output, or a node's scratch. */
typedef struct tfd_graph_value {
    tf__meta meta;
    size_t bytes;
    int node;    /* the node writing it, -1 for a graph input */
    int scratch; /* 1: its node's own temporary, which no id names and only that node reads */
} tfd_graph_value;

/*
 * A linear-algebra node's operation: the descriptor with the sizes the rules
 * filled in and its tensors' metadata (no data pointers), and, when the
 * split moves axes, the PERMUTE that writes the scratch value it reads.
 */
typedef struct tfd_graph_linalg {
    tfd_linalg_op op;
    tfd_op permute;
} tfd_graph_linalg;

/*
 * One node: its operation (metadata filled, no data pointers) and the values
 * it reads and writes. op.kind and op.n_inputs hold for every kind; for a
 * linear-algebra kind the rest of the operation is in *linalg.
 */
typedef struct tfd_graph_node {
    tfd_op op;
    tfd_graph_linalg *linalg; /* the linear-algebra kinds' (malloc'd), else NULL */
    int in_value[2];
    int n_out;
    int out_value[TFD_GRAPH_NODE_OUTPUTS];
    int scratch_value; /* the permuted copy of input 0, or -1 */
} tfd_graph_node;

typedef struct tfd_graph_plan {
    int n_inputs, n_nodes, n_outputs, n_values;
    tfd_graph_value *values;
    tfd_graph_node *nodes;
    int *outputs;            /* the value each output hands back, in order */
    size_t node_bytes;       /* the nodes' outputs and scratch values together */
    int n_linalg;            /* nodes of a linear-algebra kind (a device graph does not hold them) */
    uint8_t *key;            /* canonical form: equal for graphs that compute the same thing */
    size_t key_len;
    uint64_t key_hash[2];    /* two independent hashes of key */
} tfd_graph_plan;

/*
 * Checks a Prepare: inputs (valid dtype and shape, distinct nonzero ids),
 * nodes (each a decodable operation reading only graph inputs and earlier
 * nodes' outputs, whose shape rules hold, with a fresh output id, or for a
 * linear-algebra kind as many fresh ids in Op.outputs as its options make;
 * FREE and RUN_PREPARED are not nodes), outputs (known ids), and the sizes against
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
