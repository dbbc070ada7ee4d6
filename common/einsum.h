/*
 * einsum subscripts in numpy's notation, parsed against the operands they
 * describe. The client library parses with it before it chooses a pairwise
 * order (client/einsum-path.c); it lives in common/ so that the daemon or a
 * fuzz target can use the same rules. docs/einsum.md has the notation and
 * every error.
 *
 * A parsed expression names every axis of every operand, and of the output,
 * by a label: the letters A-Z are 0..25 and a-z are 26..51 (so label order is
 * ASCII order, the order of numpy's implicit output), and dimension p of the
 * ellipsis (counted from the left of the broadcast dimensions, which are
 * right-aligned across operands) is TF__EINSUM_ELLIPSIS_LABEL + p. An operand
 * axis of size 1 that broadcasts against a larger ellipsis dimension carries
 * TF__EINSUM_BROADCAST instead: it has no partner and is summed away (a sum
 * over one element), which is what broadcasting it means.
 */
#ifndef TENFERRO_COMMON_EINSUM_H
#define TENFERRO_COMMON_EINSUM_H

#include <stddef.h>
#include <stdint.h>

#include "common/ops.h"

/* Operands one expression may have. */
#define TF__EINSUM_MAX_OPERANDS 32
/* Labels of the letters: A-Z then a-z. */
#define TF__EINSUM_LETTERS 52
/* Label of the ellipsis's leftmost dimension; dimension p is this + p. */
#define TF__EINSUM_ELLIPSIS_LABEL TF__EINSUM_LETTERS
/* Labels an expression may use: the letters and up to TF_MAX_RANK ellipsis dimensions. */
#define TF__EINSUM_N_LABELS (TF__EINSUM_LETTERS + TF_MAX_RANK)
/* The label of a size-1 axis that broadcasts against a larger ellipsis dimension. */
#define TF__EINSUM_BROADCAST 0xffu

/* The labels of one operand's axes, or of the output's, in axis order. */
typedef struct tf__einsum_term {
    int rank;
    uint8_t labels[TF_MAX_RANK];
} tf__einsum_term;

/* A parsed expression with every label bound to its size. */
typedef struct tf__einsum {
    int n_operands;
    tf_dtype dtype;
    int n_ellipsis; /* dimensions the ellipsis stands for (0 when it is absent or empty) */
    tf__einsum_term in[TF__EINSUM_MAX_OPERANDS];
    tf__einsum_term out;
    int64_t size[TF__EINSUM_N_LABELS]; /* each label's size; 0 for a label not used */
} tf__einsum;

/*
 * Parses `len` bytes of subscripts (NUL is an unknown character like any
 * other) for n_operands operands of the given dtypes and shapes, into *e.
 * Failures: TF_ERR_INVALID_ARGUMENT for the notation (unknown character,
 * malformed '...' or '->', two '->', '...' twice in a term, a label twice in
 * the output, an output label in no input, no '...' in an explicit output
 * while the ellipsis stands for dimensions, a term count other than
 * n_operands, n_operands outside 1..TF__EINSUM_MAX_OPERANDS), TF_ERR_DTYPE
 * for operands of different dtypes (no promotion), TF_ERR_SHAPE for a term
 * naming more axes than its operand has (or fewer without '...') and for a
 * label or an ellipsis dimension bound to two sizes, TF_ERR_BAD_SHAPE for an
 * output of rank above TF_MAX_RANK. msg names the position (from 0) and the
 * character, the label or the operand at fault.
 */
tf_status tf__einsum_parse(const char *subscripts, size_t len, int n_operands,
                           const tf__meta *operands, tf__einsum *e, char *msg, size_t msg_len);

/*
 * The character a label prints as: its letter, the digit p for ellipsis
 * dimension p, '_' for TF__EINSUM_BROADCAST, '?' for anything else.
 */
char tf__einsum_label_char(unsigned label);

#endif
