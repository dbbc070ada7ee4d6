/*
 * The einsum parser: numpy's subscripts notation, checked against the
 * operands it describes. It works in three passes, so that errors come in a
 * predictable order: lexing finds every error of the notation itself, in
 * the order of the characters; binding then matches each term to its
 * operand (term count, dtypes, ranks, the ellipsis's dimensions, one size per
 * label); last comes the output, numpy's implicit one or the explicit term
 * after '->'. Whitespace is ignored everywhere, as if it had been removed
 * first (so ". . ." is an ellipsis); positions in messages count bytes of
 * the string as given, from 0.
 */
#include <stdio.h>
#include <string.h>

#include "common/einsum.h"

/* Letters a term keeps (an output, whose letters are distinct, never has more); more are counted. */
#define TERM_CAP (TF__EINSUM_LETTERS + 1)

/* One term as written: its letters and where its '...' sits among them. */
typedef struct raw_term {
    size_t pos, end;  /* its bytes: [pos, end) */
    int n;            /* letters it names; only the first TERM_CAP are kept */
    uint8_t label[TERM_CAP];
    size_t label_pos[TERM_CAP];
    int ellipsis_at;  /* letters before its '...', -1 without one */
    size_t ellipsis_pos;
} raw_term;

/* The terms of a whole expression as written. */
typedef struct lexed {
    int n_terms;      /* input terms (may exceed TF__EINSUM_MAX_OPERANDS; those are not kept) */
    raw_term in[TF__EINSUM_MAX_OPERANDS];
    raw_term spare;   /* where input terms beyond the maximum are lexed */
    int explicit_out; /* an '->' was written */
    raw_term out;
} lexed;

static int is_blank(unsigned char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* The label of a letter (A-Z 0..25, a-z 26..51), -1 for any other byte. */
static int letter_label(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
    return -1;
}

char tf__einsum_label_char(unsigned label) {
    if (label < 26) return (char)('A' + label);
    if (label < TF__EINSUM_LETTERS) return (char)('a' + (label - 26));
    if (label < TF__EINSUM_N_LABELS) return (char)('0' + (label - TF__EINSUM_ELLIPSIS_LABEL));
    if (label == TF__EINSUM_BROADCAST) return '_';
    return '?';
}

/* The first non-blank byte at or after i, or len. */
static size_t skip_blank(const char *s, size_t len, size_t i) {
    while (i < len && is_blank((unsigned char)s[i])) i++;
    return i;
}

/* A byte as a message shows it: 'x' when printable, else "byte 0x07". */
static void describe(unsigned char ch, char *buf, size_t n) {
    if (ch >= 0x20 && ch < 0x7f && ch != '\'')
        snprintf(buf, n, "'%c'", ch);
    else
        snprintf(buf, n, "byte 0x%02x", ch);
}

static void term_start(raw_term *t, size_t pos) {
    memset(t, 0, sizeof *t);
    t->pos = t->end = pos;
    t->ellipsis_at = -1;
}

/* Adds a letter to the term being lexed; in the output, a letter twice is an error. */
static tf_status add_letter(raw_term *t, int is_output, int label, size_t pos, char *msg,
                            size_t msg_len) {
    if (is_output)
        for (int k = 0; k < t->n; k++)
            if (t->label[k] == label) {
                snprintf(msg, msg_len,
                         "einsum: label '%c' is in the output twice (positions %zu and %zu): "
                         "output labels must be distinct",
                         tf__einsum_label_char((unsigned)label), t->label_pos[k], pos);
                return TF_ERR_INVALID_ARGUMENT;
            }
    if (t->n < TERM_CAP) {
        t->label[t->n] = (uint8_t)label;
        t->label_pos[t->n] = pos;
    }
    t->n++;
    return TF_OK;
}

/* Splits the subscripts into terms, refusing every error of the notation in position order. */
static tf_status lex(const char *s, size_t len, lexed *lx, char *msg, size_t msg_len) {
    lx->n_terms = 1;
    lx->explicit_out = 0;
    raw_term *t = &lx->in[0];
    term_start(t, 0);
    int in_output = 0;
    char what[16];
    for (size_t i = skip_blank(s, len, 0); i < len; i = skip_blank(s, len, i)) {
        unsigned char ch = (unsigned char)s[i];
        int label = letter_label(ch);
        if (label >= 0) {
            tf_status st = add_letter(t, in_output, label, i, msg, msg_len);
            if (st != TF_OK) return st;
            t->end = ++i;
        } else if (ch == ',') {
            if (in_output) {
                snprintf(msg, msg_len,
                         "einsum: ',' at position %zu is after '->': the output is one term", i);
                return TF_ERR_INVALID_ARGUMENT;
            }
            t = ++lx->n_terms <= TF__EINSUM_MAX_OPERANDS ? &lx->in[lx->n_terms - 1] : &lx->spare;
            term_start(t, ++i);
        } else if (ch == '-') {
            size_t j = skip_blank(s, len, i + 1);
            if (j >= len || s[j] != '>') {
                snprintf(msg, msg_len, "einsum: '-' at position %zu is not followed by '>'", i);
                return TF_ERR_INVALID_ARGUMENT;
            }
            if (in_output) {
                snprintf(msg, msg_len,
                         "einsum: a second '->' at position %zu: only one output is allowed", i);
                return TF_ERR_INVALID_ARGUMENT;
            }
            in_output = lx->explicit_out = 1;
            t = &lx->out;
            term_start(t, j + 1);
            i = j + 1;
        } else if (ch == '.') {
            size_t j = skip_blank(s, len, i + 1);
            size_t k = j < len ? skip_blank(s, len, j + 1) : len;
            if (j >= len || s[j] != '.' || k >= len || s[k] != '.') {
                snprintf(msg, msg_len,
                         "einsum: '.' at position %zu does not begin an ellipsis '...'", i);
                return TF_ERR_INVALID_ARGUMENT;
            }
            if (t->ellipsis_at >= 0) {
                snprintf(msg, msg_len,
                         "einsum: '...' twice in one term (positions %zu and %zu): a term has at "
                         "most one ellipsis",
                         t->ellipsis_pos, i);
                return TF_ERR_INVALID_ARGUMENT;
            }
            t->ellipsis_at = t->n;
            t->ellipsis_pos = i;
            t->end = i = k + 1;
        } else {
            describe(ch, what, sizeof what);
            snprintf(msg, msg_len,
                     "einsum: unknown character %s at position %zu: subscripts are letters, ',', "
                     "'->', '...' and blanks",
                     what, i);
            return TF_ERR_INVALID_ARGUMENT;
        }
    }
    return TF_OK;
}

/* Writes "term 1 'ij' (position 3)" for messages about an input term. */
static void term_name(const char *s, const raw_term *t, int i, char *buf, size_t n) {
    int shown = (int)(t->end - t->pos);
    if (shown > 24) shown = 24;
    snprintf(buf, n, "term %d '%.*s%s' (position %zu)", i, shown, s + t->pos,
             t->end - t->pos > 24 ? "..." : "", t->pos);
}

/* Term count, dtypes and each operand's metadata: what binding relies on. */
static tf_status check_operands(const lexed *lx, int n_operands, const tf__meta *ops, char *msg,
                                size_t msg_len) {
    if (lx->n_terms != n_operands) {
        snprintf(msg, msg_len,
                 "einsum: the subscripts have %d input term%s (',' separates them) but %d "
                 "operand%s given",
                 lx->n_terms, lx->n_terms == 1 ? "" : "s", n_operands,
                 n_operands == 1 ? " was" : "s were");
        return TF_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < n_operands; i++) {
        if (i > 0 && ops[i].dtype != ops[0].dtype) {
            snprintf(msg, msg_len,
                     "einsum: operand %d is %s but operand 0 is %s: einsum takes operands of one "
                     "dtype (no promotion)",
                     i, tf_dtype_name(ops[i].dtype), tf_dtype_name(ops[0].dtype));
            return TF_ERR_DTYPE;
        }
        char why[128];
        tf_status st = tf__check_new_meta(ops[i].dtype, ops[i].rank, ops[i].shape, why, sizeof why);
        if (st != TF_OK) {
            snprintf(msg, msg_len, "einsum: operand %d: %s", i, why);
            return st;
        }
    }
    return TF_OK;
}

/* How many dimensions each term's ellipsis stands for; refuses ranks the terms do not fit. */
static tf_status term_ranks(const char *s, const lexed *lx, const tf__meta *ops, int *ell_dims,
                            int *n_ellipsis, char *msg, size_t msg_len) {
    char name[64];
    *n_ellipsis = 0;
    for (int i = 0; i < lx->n_terms; i++) {
        const raw_term *t = &lx->in[i];
        int r = ops[i].rank;
        if (t->ellipsis_at < 0 ? t->n != r : t->n > r) {
            term_name(s, t, i, name, sizeof name);
            snprintf(msg, msg_len, "einsum: %s names %d ax%s%s but operand %d has rank %d", name,
                     t->n, t->n == 1 ? "is" : "es", t->ellipsis_at < 0 ? "" : " besides '...'", i,
                     r);
            return TF_ERR_SHAPE;
        }
        ell_dims[i] = t->ellipsis_at < 0 ? 0 : r - t->n;
        if (ell_dims[i] > *n_ellipsis) *n_ellipsis = ell_dims[i];
    }
    return TF_OK;
}

/* Label of axis `axis` of term t whose ellipsis stands for k of n_ell dimensions (broadcast aside). */
static unsigned axis_label(const raw_term *t, int axis, int k, int n_ell) {
    int before = t->ellipsis_at < 0 ? t->n : t->ellipsis_at;
    if (axis < before) return t->label[axis];
    if (axis < before + k) return TF__EINSUM_ELLIPSIS_LABEL + (unsigned)(n_ell - k + axis - before);
    return t->label[axis - k];
}

/*
 * Labels every operand axis and binds each label to one size: a letter to
 * exactly one size, an ellipsis dimension to the one size other than 1 its
 * operands have (numpy's broadcasting), its size-1 axes against a larger
 * size becoming TF__EINSUM_BROADCAST.
 */
static tf_status bind_sizes(const lexed *lx, const tf__meta *ops, const int *ell_dims,
                            tf__einsum *e, char *msg, size_t msg_len) {
    int where_op[TF__EINSUM_N_LABELS], where_axis[TF__EINSUM_N_LABELS];
    int64_t *size = e->size;
    memset(size, 0, sizeof e->size);
    for (int i = 0; i < lx->n_terms; i++) {
        tf__einsum_term *term = &e->in[i];
        term->rank = ops[i].rank;
        for (int a = 0; a < term->rank; a++) {
            unsigned l = axis_label(&lx->in[i], a, ell_dims[i], e->n_ellipsis);
            int64_t d = ops[i].shape[a];
            term->labels[a] = (uint8_t)l;
            int is_ellipsis = l >= TF__EINSUM_ELLIPSIS_LABEL;
            if (is_ellipsis && d == 1) {
                if (size[l] == 0) size[l] = 1;
                continue;
            }
            if (size[l] == 0 || (is_ellipsis && size[l] == 1)) {
                size[l] = d;
                where_op[l] = i;
                where_axis[l] = a;
            } else if (size[l] != d) {
                if (is_ellipsis)
                    snprintf(msg, msg_len,
                             "einsum: ellipsis dimension %u (counted from the left of the "
                             "broadcast dimensions) is %lld in operand %d (axis %d) and %lld in "
                             "operand %d (axis %d): broadcasting needs equal sizes or 1",
                             l - TF__EINSUM_ELLIPSIS_LABEL, (long long)size[l], where_op[l],
                             where_axis[l], (long long)d, i, a);
                else
                    snprintf(msg, msg_len,
                             "einsum: label '%c' is bound to %lld (operand %d, axis %d) and to "
                             "%lld (operand %d, axis %d)",
                             tf__einsum_label_char(l), (long long)size[l], where_op[l],
                             where_axis[l], (long long)d, i, a);
                return TF_ERR_SHAPE;
            }
        }
    }
    for (int i = 0; i < lx->n_terms; i++)
        for (int a = 0; a < e->in[i].rank; a++) {
            unsigned l = e->in[i].labels[a];
            if (l >= TF__EINSUM_ELLIPSIS_LABEL && ops[i].shape[a] == 1 && size[l] > 1)
                e->in[i].labels[a] = (uint8_t)TF__EINSUM_BROADCAST;
        }
    return TF_OK;
}

/* numpy's implicit output: the ellipsis's dimensions, then the letters used once, in ASCII order. */
static tf_status implicit_output(tf__einsum *e, char *msg, size_t msg_len) {
    int count[TF__EINSUM_LETTERS] = {0};
    for (int i = 0; i < e->n_operands; i++)
        for (int a = 0; a < e->in[i].rank; a++)
            if (e->in[i].labels[a] < TF__EINSUM_LETTERS) count[e->in[i].labels[a]]++;
    int rank = e->n_ellipsis;
    for (int l = 0; l < TF__EINSUM_LETTERS; l++) rank += count[l] == 1;
    if (rank > TF_MAX_RANK) {
        snprintf(msg, msg_len,
                 "einsum: the implicit output has %d axes, more than %d: name fewer labels once "
                 "or write the output after '->'",
                 rank, TF_MAX_RANK);
        return TF_ERR_BAD_SHAPE;
    }
    tf__einsum_term *out = &e->out;
    out->rank = 0;
    for (int p = 0; p < e->n_ellipsis; p++)
        out->labels[out->rank++] = (uint8_t)(TF__EINSUM_ELLIPSIS_LABEL + p);
    for (int l = 0; l < TF__EINSUM_LETTERS; l++)
        if (count[l] == 1) out->labels[out->rank++] = (uint8_t)l;
    return TF_OK;
}

/* The output after '->': letters present in an input, '...' where the ellipsis has dimensions. */
static tf_status explicit_output(const lexed *lx, tf__einsum *e, char *msg, size_t msg_len) {
    const raw_term *t = &lx->out;
    for (int k = 0; k < t->n; k++)
        if (e->size[t->label[k]] == 0) {
            snprintf(msg, msg_len, "einsum: output label '%c' at position %zu is in no input term",
                     tf__einsum_label_char(t->label[k]), t->label_pos[k]);
            return TF_ERR_INVALID_ARGUMENT;
        }
    if (t->ellipsis_at < 0 && e->n_ellipsis > 0) {
        snprintf(msg, msg_len,
                 "einsum: the output (position %zu) has no '...' but the inputs' ellipsis stands "
                 "for %d dimension%s: write '...' in the output (numpy's rule)",
                 t->pos, e->n_ellipsis, e->n_ellipsis == 1 ? "" : "s");
        return TF_ERR_INVALID_ARGUMENT;
    }
    int k_ell = t->ellipsis_at < 0 ? 0 : e->n_ellipsis, rank = t->n + k_ell;
    if (rank > TF_MAX_RANK) {
        snprintf(msg, msg_len, "einsum: the output (position %zu) has %d axes, more than %d",
                 t->pos, rank, TF_MAX_RANK);
        return TF_ERR_BAD_SHAPE;
    }
    e->out.rank = rank;
    for (int a = 0; a < rank; a++) e->out.labels[a] = (uint8_t)axis_label(t, a, k_ell, k_ell);
    return TF_OK;
}

tf_status tf__einsum_parse(const char *subscripts, size_t len, int n_operands,
                           const tf__meta *operands, tf__einsum *e, char *msg, size_t msg_len) {
    if (!subscripts || !e || (n_operands > 0 && !operands)) {
        snprintf(msg, msg_len, "einsum: subscripts, operands and the result must not be NULL");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (n_operands < 1 || n_operands > TF__EINSUM_MAX_OPERANDS) {
        snprintf(msg, msg_len, "einsum: %d operands given: between 1 and %d are allowed",
                 n_operands, TF__EINSUM_MAX_OPERANDS);
        return TF_ERR_INVALID_ARGUMENT;
    }
    lexed lx;
    int ell_dims[TF__EINSUM_MAX_OPERANDS];
    tf_status st = lex(subscripts, len, &lx, msg, msg_len);
    if (st == TF_OK) st = check_operands(&lx, n_operands, operands, msg, msg_len);
    if (st == TF_OK)
        st = term_ranks(subscripts, &lx, operands, ell_dims, &e->n_ellipsis, msg, msg_len);
    if (st != TF_OK) return st;
    e->n_operands = n_operands;
    e->dtype = operands[0].dtype;
    st = bind_sizes(&lx, operands, ell_dims, e, msg, msg_len);
    if (st != TF_OK) return st;
    return lx.explicit_out ? explicit_output(&lx, e, msg, msg_len)
                           : implicit_output(e, msg, msg_len);
}
