/*
 * libFuzzer target: the einsum subscripts parser (common/einsum-parse.c).
 *
 * The input is the operands' metadata and then the subscripts:
 *
 *   byte 0        number of operands, modulo TF__EINSUM_MAX_OPERANDS + 2 (0 and one too
 *                 many are refusals to reach too)
 *   byte 1        dtype of the operands: bits 0-1 pick f32, f64, c64, c128; bit 2 gives
 *                 the last operand another dtype (the refusal of a mix)
 *   bytes 2..n+1  one per operand: bits 0-3 its rank modulo TF_MAX_RANK + 1, bits 4-7
 *                 which of its axes are 1 and which are 2 (so labels bind, or do not)
 *   the rest      the subscripts, any bytes (NUL included), as long as they are
 *
 * Missing bytes read as 0. The parser must not crash or overrun anything
 * (ASan and UBSan watch), every refusal must carry one of the statuses the
 * parser documents and a message that says "einsum:" and fits its buffer,
 * and every success must describe the operands it was given: each term as
 * long as its operand's rank, each letter bound to that axis's size, an
 * ellipsis dimension of one size other than 1 with broadcast size-1 axes,
 * an output of distinct labels within rank TF_MAX_RANK. A violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/einsum.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reports a broken promise of the parser and aborts, so libFuzzer keeps the input. */
static void fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz-einsum: %s: %s\n", what, detail);
    abort();
}

static const tf_dtype dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* The operands an input describes; returns where the subscripts start. */
static size_t operands_of(const uint8_t *data, size_t size, int *n, tf__meta *ops) {
    *n = size > 0 ? data[0] % (TF__EINSUM_MAX_OPERANDS + 2) : 0;
    uint8_t kind = size > 1 ? data[1] : 0;
    for (int i = 0; i < *n; i++) {
        uint8_t b = (size_t)i + 2 < size ? data[i + 2] : 0;
        memset(&ops[i], 0, sizeof ops[i]);
        ops[i].dtype = dtypes[kind & 3];
        if ((kind & 4) && i == *n - 1 && *n > 1) ops[i].dtype = dtypes[(kind + 1) & 3];
        ops[i].rank = (b & 15) % (TF_MAX_RANK + 1);
        for (int a = 0; a < ops[i].rank; a++) ops[i].shape[a] = 1 + ((b >> (4 + a % 4)) & 1);
    }
    size_t start = 2 + (size_t)*n;
    return start < size ? start : size;
}

/* Checks what a successful parse says against the operands it was given. */
static void check_parse(const tf__einsum *e, int n, const tf__meta *ops) {
    if (e->n_operands != n) fail("success", "operand count differs");
    if (e->n_ellipsis < 0 || e->n_ellipsis > TF_MAX_RANK) fail("success", "ellipsis dimensions");
    for (int i = 0; i < n; i++) {
        if (e->in[i].rank != ops[i].rank) fail("success", "a term's rank differs from its operand's");
        for (int a = 0; a < ops[i].rank; a++) {
            unsigned l = e->in[i].labels[a];
            int64_t d = ops[i].shape[a];
            if (l == TF__EINSUM_BROADCAST) {
                if (d != 1) fail("success", "a broadcast axis is not of size 1");
                continue;
            }
            if (l >= TF__EINSUM_ELLIPSIS_LABEL + (unsigned)e->n_ellipsis)
                fail("success", "a label beyond the letters and the ellipsis");
            if (e->size[l] != d) fail("success", "a label not bound to its axis's size");
        }
    }
    if (e->out.rank < 0 || e->out.rank > TF_MAX_RANK) fail("success", "output rank");
    uint64_t seen = 0;
    for (int a = 0; a < e->out.rank; a++) {
        unsigned l = e->out.labels[a];
        if (l >= TF__EINSUM_N_LABELS || e->size[l] < 1) fail("success", "an output label unbound");
        if (seen >> l & 1) fail("success", "an output label twice");
        seen |= (uint64_t)1 << l;
    }
    if (e->dtype != ops[0].dtype) fail("success", "dtype");
    for (int i = 1; i < n; i++)
        if (ops[i].dtype != ops[0].dtype) fail("success", "mixed dtypes accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tf__meta ops[TF__EINSUM_MAX_OPERANDS + 2];
    int n;
    size_t start = operands_of(data, size, &n, ops);
    /* The subscripts in a buffer of their own, so ASan sees a read past their end. */
    size_t len = size - start;
    char *sub = malloc(len ? len : 1);
    if (!sub) return 0;
    if (len) memcpy(sub, data + start, len);
    tf__einsum e;
    char msg[96];
    memset(msg, 0x55, sizeof msg);
    tf_status st = tf__einsum_parse(sub, len, n, ops, &e, msg, sizeof msg);
    if (st == TF_OK) {
        check_parse(&e, n, ops);
    } else {
        if (st != TF_ERR_INVALID_ARGUMENT && st != TF_ERR_SHAPE && st != TF_ERR_DTYPE &&
            st != TF_ERR_BAD_SHAPE)
            fail("refusal", tf_status_name(st));
        if (!memchr(msg, '\0', sizeof msg)) fail("refusal", "message not terminated");
        if (strncmp(msg, "einsum: ", 8) != 0 || strlen(msg) < 20) fail("refusal", msg);
    }
    free(sub);
    return 0;
}
