/*
 * A wire operation (Tenferro__Op) turned into the daemon's tfd_op, in two
 * steps shared by batches (batch.c) and prepared graphs (graph-plan.c):
 * decode checks what needs no tensors (kind, arity, parameters, the
 * descriptors' own limits), infer runs the shape rules against the inputs'
 * metadata and gives the output's. Neither touches tensors or memory.
 */
#ifndef TENFERRO_DAEMON_OP_DECODE_H
#define TENFERRO_DAEMON_OP_DECODE_H

#include <stddef.h>

#include "common/frame.h"
#include "common/linalg.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"

/*
 * Fills d, which the caller hands over zeroed (a new executor item's, a
 * calloc'd plan node's: clearing it again here would write its 488 bytes
 * twice for every operation of a batch), with op's kind, input count,
 * parameters, flags, scalars and contraction labels. Refused: an unknown kind, FREE and
 * RUN_PREPARED (which the callers handle themselves), the wrong number of
 * inputs, too many parameters, a contraction descriptor out of its limits,
 * and TEST_FAULT unless test_fault_allowed.
 */
tf_status tfd_op_decode(const Tenferro__Op *op, int test_fault_allowed, tfd_op *d, char *msg,
                        size_t len);

/*
 * With the metadata of d's inputs: runs the operation's shape rules, fills
 * the FFT descriptor from op, and writes the output's metadata. `memo`
 * (tf__infer_memo, may be NULL) keeps the last inference of the common rules
 * for the next operation that asks the same.
 */
tf_status tfd_op_infer(const Tenferro__Op *op, tfd_op *d, tf__infer_memo *memo, const tf__meta *in,
                       tf__meta *out, char *msg, size_t len);

/*
 * A linear-algebra operation's descriptor (Op.linalg) into *l, with what
 * tf__linalg cannot hold refused (a missing descriptor, more axes than a
 * tensor has, the wrong number of inputs); tf__infer_linalg checks the rest
 * against the inputs.
 */
tf_status tfd_linalg_decode(const Tenferro__Op *op, tf__linalg *l, char *msg, size_t len);

/*
 * 1 when the descriptor's permutation of a rank-`rank` input moves an axis,
 * so the operation reads a copy in the split's order; an identity (or no
 * permutation) needs none.
 */
int tfd_linalg_permutes(const tf__linalg *l, int rank);

/*
 * The PERMUTE that makes that copy of input `in` (its data pointer kept; the
 * output's left NULL for the caller's memory, of in's bytes): the operation
 * then reads d->out.
 */
void tfd_linalg_permute_op(const tf__linalg *l, const tfd_tensor_view *in, tfd_op *d);

#endif
