/*
 * The operation table: every operation kind, once.
 *
 * One row per kind, X(KIND, name, number, arity, shape, dtype, family):
 *   KIND    the enum constant's suffix (TF__OP_KIND), and the proto OpKind's
 *           (OP_KIND): common/op-table.c asserts at build time that every
 *           row's number is the proto's;
 *   name    the short name in messages, status and docs/operations-reference.md
 *           (a unit test checks that the reference lists every named kind);
 *   number  the wire number (proto/tenferro.proto, OpKind);
 *   arity   tensor inputs on the wire: -1 for a variable count (FREE), 0
 *           where the kind's descriptor decides (CONTRACT: one or two;
 *           RUN_PREPARED: its graph's);
 *   shape   the shape rule (tf__shape_rule): ELEMENTWISE (the inputs' shape,
 *           all inputs alike), PERMUTE, RESHAPE, REDUCE, MATMUL, or a rule of
 *           the kind's own descriptor (CONTRACT, FFT, LINALG: several outputs,
 *           common/linalg.h), SLICE (params: start, step, length per axis),
 *           or NONE (no output);
 *   dtype   the dtype rule (tf__dtype_rule): SAME (every dtype, the output's
 *           is the input's), TO_REAL (every dtype, the output real of the
 *           input's precision), REAL_ONLY (f32 and f64 only), NONE (decided
 *           by the kind's descriptor rules);
 *   family  the backend vtable entry that runs it (daemon/backend/backend.h),
 *           or none for a kind no backend entry serves (the executor runs a
 *           prepared graph's nodes itself; FREE frees).
 *
 * Adding an operation is a row here, its proto number, its kernels in each
 * backend's family entry, and its public entry point; the enum, the names,
 * arities, shape and dtype rules and the backend's dispatch follow from the
 * row. Numbers are never reused: they travel on the wire.
 */
#ifndef TENFERRO_COMMON_OP_TABLE_H
#define TENFERRO_COMMON_OP_TABLE_H

/* clang-format off */
#define TF__OP_LIST(X)                                                              \
    X(NONE,         "none",         0,  0, NONE,        NONE,      none)          \
    X(ADD,          "add",          1,  2, ELEMENTWISE, SAME,      binary)        \
    X(SUB,          "sub",          2,  2, ELEMENTWISE, SAME,      binary)        \
    X(MUL,          "mul",          3,  2, ELEMENTWISE, SAME,      binary)        \
    X(DIV,          "div",          4,  2, ELEMENTWISE, SAME,      binary)        \
    X(NEG,          "neg",          5,  1, ELEMENTWISE, SAME,      unary)         \
    X(CONJ,         "conj",         6,  1, ELEMENTWISE, SAME,      unary)         \
    X(ABS,          "abs",          7,  1, ELEMENTWISE, TO_REAL,   unary)         \
    X(EXP,          "exp",          8,  1, ELEMENTWISE, SAME,      unary)         \
    X(LOG,          "log",          9,  1, ELEMENTWISE, SAME,      unary)         \
    X(SQRT,         "sqrt",         10, 1, ELEMENTWISE, SAME,      unary)         \
    X(SCALE,        "scale",        11, 1, ELEMENTWISE, SAME,      axpby)         \
    X(AXPBY,        "axpby",        12, 2, ELEMENTWISE, SAME,      axpby)         \
    X(PERMUTE,      "permute",      13, 1, PERMUTE,     SAME,      permute)       \
    X(RESHAPE,      "reshape",      14, 1, RESHAPE,     SAME,      permute)       \
    X(COPY,         "copy",         15, 1, ELEMENTWISE, SAME,      permute)       \
    X(REDUCE_SUM,   "sum",          16, 1, REDUCE,      SAME,      reduce)        \
    X(REDUCE_MAX,   "max",          17, 1, REDUCE,      REAL_ONLY, reduce)        \
    X(REDUCE_MIN,   "min",          18, 1, REDUCE,      REAL_ONLY, reduce)        \
    X(MATMUL,       "matmul",       19, 2, MATMUL,      SAME,      matmul)        \
    X(FREE,         "free",         20, -1, NONE,       NONE,      none)          \
    X(TEST_FAULT,   "test_fault",   21, 1, ELEMENTWISE, SAME,      inject_fault)  \
    X(CONTRACT,     "contract",     22, 0, CONTRACT,    SAME,      contract)      \
    X(FFT,          "fft",          23, 1, FFT,         NONE,      fft)           \
    X(RUN_PREPARED, "run_prepared", 24, 0, NONE,        NONE,      none)          \
    X(SQUARE,       "square",       25, 1, ELEMENTWISE, SAME,      unary)         \
    X(SLICE,        "slice",        26, 1, SLICE,       SAME,      permute)       \
    X(SVD,          "svd",          27, 1, LINALG,      NONE,      linalg)        \
    X(QR,           "qr",           28, 1, LINALG,      NONE,      linalg)        \
    X(EIGH,         "eigh",         29, 1, LINALG,      NONE,      linalg)        \
    X(CHOLESKY,     "cholesky",     30, 1, LINALG,      NONE,      linalg)        \
    X(SOLVE,        "solve",        31, 2, LINALG,      NONE,      linalg)        \
    X(INV,          "inv",          32, 1, LINALG,      NONE,      linalg)        \
    X(DET,          "det",          33, 1, LINALG,      NONE,      linalg)        \
    X(SLOGDET,      "slogdet",      34, 1, LINALG,      NONE,      linalg)        \
    X(NORM,         "norm",         35, 1, LINALG,      NONE,      linalg)        \
    X(TRACE,        "trace",        36, 1, LINALG,      NONE,      linalg)        \
    X(DIAGONAL,     "diagonal",     37, 1, LINALG,      NONE,      linalg)
/* clang-format on */

#endif
