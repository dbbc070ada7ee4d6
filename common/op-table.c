/*
 * The operation table's columns as lookups (names, arities, rules), and the
 * build-time checks that tie the table to the wire: every row's number is
 * the proto OpKind of the same name, and the numbers are 0..count-1.
 */
#include "common/frame.h"
#include "common/ops.h"

/* A row's number is the proto's constant of the same name, and inside the table's range. */
#define TF__OP_CHECK(KIND, name, number, arity, shape, dtype, family)                         \
    _Static_assert((int)TF__OP_##KIND == (int)TENFERRO__OP_KIND__OP_##KIND,                    \
                   "op-table.h: " #KIND " has another number in proto/tenferro.proto");        \
    _Static_assert((int)TF__OP_##KIND < (int)TF__OP_KIND_COUNT,                                \
                   "op-table.h: " #KIND "'s number leaves a gap: kinds are numbered densely");
TF__OP_LIST(TF__OP_CHECK)
#undef TF__OP_CHECK

/* One entry per kind; a number given twice would overwrite an entry (-Woverride-init fails it). */
typedef struct op_row {
    const char *name;
    int arity;
    tf__shape_rule shape;
    tf__dtype_rule dtype;
} op_row;

static const op_row rows[TF__OP_KIND_COUNT] = {
#define TF__OP_ROW(KIND, name, number, arity, shape, dtype, family) \
    [number] = {name, arity, TF__SHAPE_##shape, TF__DTYPE_##dtype},
    TF__OP_LIST(TF__OP_ROW)
#undef TF__OP_ROW
};

/* The row of a kind, or NULL for a number outside the table (a client may send any). */
static const op_row *row_of(tf__op_kind kind) {
    if ((int)kind < 0 || (int)kind >= TF__OP_KIND_COUNT) return NULL;
    return &rows[kind];
}

const char *tf__op_name(tf__op_kind kind) {
    const op_row *r = row_of(kind);
    return r ? r->name : "unknown";
}

int tf__op_arity(tf__op_kind kind) {
    const op_row *r = row_of(kind);
    return r ? r->arity : 0;
}

tf__shape_rule tf__op_shape_rule(tf__op_kind kind) {
    const op_row *r = row_of(kind);
    return r ? r->shape : TF__SHAPE_NONE;
}

tf__dtype_rule tf__op_dtype_rule(tf__op_kind kind) {
    const op_row *r = row_of(kind);
    return r ? r->dtype : TF__DTYPE_NONE;
}

tf_dtype tf__op_out_dtype(tf__op_kind kind, tf_dtype in) {
    if (tf__op_dtype_rule(kind) != TF__DTYPE_TO_REAL) return in;
    if (in == TF_C64) return TF_F32;
    if (in == TF_C128) return TF_F64;
    return in;
}
