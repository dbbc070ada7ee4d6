/*
 * libFuzzer target: the checks of a prepared graph (daemon/graph-plan.c).
 *
 * The input is a packed Prepare message, as a client would send inside a
 * frame; bytes that do not unpack are skipped (the frame target covers the
 * decoder). tfd_graph_plan_build must not crash or overrun anything (ASan
 * and UBSan watch); a refusal must be typed, with a message, and name a node
 * inside the graph or none; a success must be a plan the executor can trust:
 * every node reads only graph inputs and earlier nodes' outputs, writes its
 * own values (several for linear algebra, and a scratch value no other node
 * or output reaches), every value's size is its metadata's, every output
 * names a value, and the canonical form of a plan built twice is the same. A
 * violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/linalg.h"
#include "daemon/graph-plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The node limit the target runs with: small, so the limit itself is reached too. */
#define FUZZ_MAX_NODES 64

/* Reports a broken promise of the checks and aborts, so libFuzzer keeps the input. */
static void fail(const char *what) {
    fprintf(stderr, "fuzz-graph: %s\n", what);
    abort();
}

/* Checks a plan the checks accepted. */
static void check_plan(const tfd_graph_plan *g, const Tenferro__Prepare *p) {
    if (g->n_inputs != (int)p->n_inputs || g->n_nodes != (int)p->n_nodes ||
        g->n_outputs != (int)p->n_outputs || g->n_values < g->n_inputs + g->n_nodes)
        fail("counts differ from the message");
    if (g->n_nodes < 1 || g->n_nodes > FUZZ_MAX_NODES) fail("node count outside the limit");
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].bytes != tf__meta_bytes(&g->values[v].meta)) fail("value size");
    int next = g->n_inputs; /* values are numbered in node order: outputs, then scratch */
    for (int n = 0; n < g->n_nodes; n++) {
        const tfd_graph_node *node = &g->nodes[n];
        if (node->n_out < 1 || node->n_out > TFD_GRAPH_NODE_OUTPUTS) fail("node output count");
        if ((node->linalg != NULL) != tf__is_linalg(node->op.kind) ||
            (!node->linalg && (node->n_out != 1 || node->scratch_value >= 0)))
            fail("a node's outputs do not fit its kind");
        for (int o = 0; o < node->n_out; o++)
            if (node->out_value[o] != next++ || g->values[node->out_value[o]].node != n)
                fail("a node writes another's value");
        if (node->scratch_value >= 0 &&
            (node->scratch_value != next++ || !g->values[node->scratch_value].scratch))
            fail("a scratch value out of place");
        if (node->op.n_inputs < 1 || node->op.n_inputs > 2) fail("node arity");
        for (int i = 0; i < node->op.n_inputs; i++)
            if (node->in_value[i] < 0 || node->in_value[i] >= node->out_value[0] ||
                g->values[node->in_value[i]].scratch)
                fail("a node reads a value not made before it");
        if (node->op.kind == TF__OP_FREE || node->op.kind == TF__OP_RUN_PREPARED)
            fail("free or run_prepared accepted as a node");
    }
    if (next != g->n_values) fail("values no node made");
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] < 0 || g->outputs[o] >= g->n_values || g->values[g->outputs[o]].scratch)
            fail("an output names no value");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tenferro__Prepare *p = tenferro__prepare__unpack(NULL, size, data);
    if (!p) return 0;
    tfd_graph_plan *g = NULL;
    int failed = -2;
    char msg[512];
    msg[0] = '\0';
    tf_status st = tfd_graph_plan_build(p, FUZZ_MAX_NODES, 0, &g, &failed, msg, sizeof msg);
    if (st == TF_OK) {
        if (!g || failed != -1) fail("success without a plan, or naming a node");
        check_plan(g, p);
        tfd_graph_plan *again = NULL;
        int failed2;
        if (tfd_graph_plan_build(p, FUZZ_MAX_NODES, 0, &again, &failed2, msg, sizeof msg) != TF_OK ||
            !tfd_graph_plan_same(g, again))
            fail("the same graph planned twice differs");
        tfd_graph_plan_free(again);
        tfd_graph_plan_free(g);
    } else {
        if (g) fail("a refusal left a plan");
        if ((int)st <= 0 || st == TF_ERR_INTERNAL || !strcmp(tf_status_name(st), "unknown"))
            fail("an untyped or internal status");
        if (!msg[0] || !memchr(msg, '\0', sizeof msg)) fail("a refusal without a message");
        if (failed < -1 || failed >= (int)p->n_nodes) fail("the failing node is outside the graph");
    }
    tenferro__prepare__free_unpacked(p, NULL);
    return 0;
}
