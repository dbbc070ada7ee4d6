/*
 * The report of an einsum path (tf_einsum_path's answer): the steps with
 * their cost, the totals, and the same as printable text. Labels print as
 * tf__einsum_label_char shows them, so the text names each step the way the
 * expression would be written with the ellipsis spelled out.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/einsum-path.h"

/* A growing string; `failed` once an allocation failed. */
typedef struct text {
    char *buf;
    size_t len, cap;
    int failed;
} text;

/* Appends printf-style output, growing the buffer as needed. */
static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    while (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
        } else if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        } else {
            size_t cap = 2 * t->cap + (size_t)n;
            char *b = realloc(t->buf, cap);
            if (!b)
                t->failed = 1;
            else
                t->buf = b, t->cap = cap;
        }
    }
}

/* Writes the labels of operand or result `id` as characters into buf (9 bytes at least). */
static void term_text(const tf__einsum *e, const tf__einsum_path *p, int id, char *buf) {
    unsigned labels[TF_MAX_RANK];
    int rank = tf__einsum_axes(e, p, id, labels);
    for (int a = 0; a < rank; a++) buf[a] = tf__einsum_label_char(labels[a]);
    buf[rank] = '\0';
}

/* Writes step k as "ab,bc->ac" into buf (sizeof tf_einsum_step.subscripts). */
static void step_text(const tf__einsum *e, const tf__einsum_path *p, int k, char *buf, size_t n) {
    const tf__einsum_step *s = &p->step[k];
    char a[TF_MAX_RANK + 1], b[TF_MAX_RANK + 1] = "", out[TF_MAX_RANK + 1];
    term_text(e, p, s->a, a);
    if (s->b >= 0) term_text(e, p, s->b, b);
    term_text(e, p, e->n_operands + k, out);
    snprintf(buf, n, "%s%s%s->%s", a, s->b >= 0 ? "," : "", b, out);
}

static const char *method_name(tf_einsum_optimize m) {
    switch (m) {
    case TF_EINSUM_GREEDY: return "greedy";
    case TF_EINSUM_OPTIMAL: return "optimal";
    case TF_EINSUM_LEFT_TO_RIGHT: return "left-to-right";
    }
    return "unknown";
}

/* The text of the report: the expression, the totals, one line per step. */
static void report_text(const tf__einsum *e, const tf__einsum_path *p, const tf_einsum_step *steps,
                        text *t) {
    put(t, "einsum path: %s, %d operand%s of %s\n", method_name(p->method), e->n_operands,
        e->n_operands == 1 ? "" : "s", tf_dtype_name(e->dtype));
    put(t, "  expression:           ");
    for (int i = 0; i < e->n_operands; i++) {
        char term[TF_MAX_RANK + 1];
        term_text(e, p, i, term);
        put(t, "%s%s", i ? "," : "", term);
    }
    char out[TF_MAX_RANK + 1];
    term_text(e, p, e->n_operands + p->n_steps - 1, out);
    put(t, "->%s\n", out);
    put(t, "  flops:                %.4g\n", p->flops);
    put(t, "  naive flops:          %.4g (%.4g times the path's)\n", p->naive_flops,
        p->flops > 0 ? p->naive_flops / p->flops : 1.0);
    put(t, "  largest intermediate: %lld elements\n", (long long)p->largest);
    put(t, "  step  contracts  scaling       flops      elements  subscripts\n");
    for (int k = 0; k < p->n_steps; k++) {
        const tf_einsum_step *s = &steps[k];
        char pair[24];
        if (s->b < 0)
            snprintf(pair, sizeof pair, "%d", s->a);
        else
            snprintf(pair, sizeof pair, "%d,%d", s->a, s->b);
        put(t, "  %4d  %9s  %7d  %10.4g  %12lld  %s\n", k, pair, s->scaling, s->flops,
            (long long)s->elements, s->subscripts);
    }
}

tf_einsum_path_info *tf__einsum_report(const tf__einsum *e, const tf__einsum_path *p) {
    tf_einsum_path_info *info = malloc(sizeof *info + sizeof(tf_einsum_step) * (size_t)p->n_steps);
    text t = {malloc(1024), 0, 1024, 0};
    if (!info || !t.buf) {
        free(info);
        free(t.buf);
        return NULL;
    }
    tf_einsum_step *steps = (tf_einsum_step *)(info + 1);
    for (int k = 0; k < p->n_steps; k++) {
        const tf__einsum_step *s = &p->step[k];
        steps[k].a = s->a;
        steps[k].b = s->b;
        steps[k].flops = s->flops;
        steps[k].elements = s->elements;
        steps[k].scaling = __builtin_popcountll(s->loops);
        step_text(e, p, k, steps[k].subscripts, sizeof steps[k].subscripts);
    }
    report_text(e, p, steps, &t);
    if (t.failed) {
        free(info);
        free(t.buf);
        return NULL;
    }
    info->optimize = p->method;
    info->n_operands = e->n_operands;
    info->n_steps = p->n_steps;
    info->steps = steps;
    info->flops = p->flops;
    info->naive_flops = p->naive_flops;
    info->largest_intermediate = p->largest;
    info->report = t.buf;
    return info;
}
