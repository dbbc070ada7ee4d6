/*
 * The planner of contractions (contract-plan.h): pure arithmetic on labels,
 * sizes and element strides, shared by both backends.
 *
 * Every input is first seen as a strided view over its distinct labels:
 * size-1 axes are dropped (they change no address) and a label repeated in
 * one input becomes one axis whose stride is the sum of its axes' strides,
 * which is its diagonal, read in place. Labels then fall into groups: batch
 * (both inputs and the output), M (input 0 and the output), N (input 1 and
 * the output), K (both inputs, not the output) and summed (one input only,
 * not the output). A GEMM reads a group directly when its labels are
 * adjacent in memory in one shared order (the group is then one index with
 * one stride), and a matrix directly when one of its two groups is the unit
 * stride and the other's stride is a valid leading dimension. The planner
 * tries, for every group, the label orders its carriers use (each input's
 * and the output's), both orientations of the column-major GEMM (C, or C^T
 * with the inputs swapped), and for each operand its possible unit-stride
 * group; it picks the combination that copies the fewest elements: an input
 * whose layout does not fit (or that has labels to sum out, or that must be
 * conjugated without being transposed) goes through a pass into scratch in
 * the layout the GEMM wants, and an output that does not fit is written as a
 * temporary and permuted. Conjugation folds into a transposed read (op C).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/backend/contract-plan.h"

/* Label groups and the two inputs and output that carry them. */
enum { GB, GM, GN, GK, NG };
enum { OA, OB, OC };

/* Which groups each of input 0, input 1 and the output carries. */
static const int carries[3][NG] = {{1, 1, 0, 1}, {1, 0, 1, 1}, {1, 1, 1, 0}};

/* What the planner knows of one label (labels of size 1 are left out). */
typedef struct label_info {
    int64_t dim;
    int64_t stride[3]; /* element stride in input 0, input 1, output; summed over repeats */
    int count[3];      /* axes carrying it */
} label_info;

/* Candidate label orders of one group: one per carrier, duplicates removed. */
typedef struct group_orders {
    int n_labels;
    int n_cand;
    uint8_t cand[3][TF_MAX_RANK];
} group_orders;

/* The planner's working state for one contraction. */
typedef struct planner {
    label_info lab[TF__MAX_LABELS];
    int conj[2];
    int n_sum[2];
    uint8_t sum[2][TF_MAX_RANK]; /* labels summed out of input i */
    int n_keep_unary;
    uint8_t keep_unary[TF_MAX_RANK];
    group_orders g[NG];
    int64_t ext[NG]; /* product of the group's sizes */
} planner;

/* One operand or the output as the GEMM would read it under chosen group orders. */
typedef struct side {
    int fused;       /* every group it carries is one stride */
    int64_t str[NG]; /* the group's stride (its innermost label's); 0 for an empty group */
} side;

/* A candidate: orders, orientation, and what must be copied. */
typedef struct choice {
    int idx[NG];  /* the candidate order of each group */
    int swapped;  /* 0: C's unit stride is M (X = input 0); 1: it is N (X = input 1) */
    int pass[2];  /* input i goes through scratch */
    int to_temp;  /* the output is written as a temporary and permuted */
    int unit[2];  /* the unit-stride group of input i when read in place */
    int64_t cost; /* elements copied */
} choice;

/* Row-major element strides of a shape. */
static void row_major(int rank, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int ax = rank - 1; ax >= 0; ax--) {
        stride[ax] = s;
        s *= shape[ax];
    }
}

/* Sorts labels by decreasing stride in carrier x (outermost first); insertion sort, stable. */
static void sort_by_stride(const planner *p, int x, uint8_t *labels, int n) {
    for (int i = 1; i < n; i++) {
        uint8_t v = labels[i];
        int j = i - 1;
        while (j >= 0 && p->lab[labels[j]].stride[x] < p->lab[v].stride[x]) {
            labels[j + 1] = labels[j];
            j--;
        }
        labels[j + 1] = v;
    }
}

/* Adds the order carrier x gives group g's labels, unless an equal one is listed. */
static void add_candidate(planner *p, int g, int x, const uint8_t *members) {
    group_orders *go = &p->g[g];
    uint8_t ord[TF_MAX_RANK];
    memcpy(ord, members, (size_t)go->n_labels);
    sort_by_stride(p, x, ord, go->n_labels);
    for (int c = 0; c < go->n_cand; c++)
        if (memcmp(go->cand[c], ord, (size_t)go->n_labels) == 0) return;
    memcpy(go->cand[go->n_cand++], ord, (size_t)go->n_labels);
}

/* Reads operand x's groups under the orders of choice ch. */
static void side_of(const planner *p, int x, const choice *ch, side *s) {
    s->fused = 1;
    for (int g = 0; g < NG; g++) {
        s->str[g] = 0;
        if (!carries[x][g]) continue;
        const group_orders *go = &p->g[g];
        const uint8_t *ord = go->cand[ch->idx[g]];
        for (int j = 0; j + 1 < go->n_labels; j++) {
            const label_info *outer = &p->lab[ord[j]], *inner = &p->lab[ord[j + 1]];
            if (outer->stride[x] != inner->stride[x] * inner->dim) s->fused = 0;
        }
        if (go->n_labels > 0) s->str[g] = p->lab[ord[go->n_labels - 1]].stride[x];
    }
}

/* Whether group u can be a matrix's unit stride with `other` giving a valid leading dimension. */
static int unit_ok(const planner *p, const side *s, int u, int other) {
    if (p->ext[u] > 1 && s->str[u] != 1) return 0;
    if (p->ext[other] > 1 && s->str[other] < p->ext[u]) return 0;
    return 1;
}

/* The free group of input i (M for input 0, N for input 1). */
static int free_group(int i) { return i == 0 ? GM : GN; }

/* Whether input i is the GEMM's X (rows x depth) under an orientation. */
static int is_x(int i, int swapped) { return (i == 0) == (swapped == 0); }

/*
 * Reading input i with unit-stride group u: X is stored rows x depth (N)
 * when its unit is the rows group, Y depth x cols (N) when its unit is K;
 * anything else is a transposed read.
 */
static tfd_gemm_op op_for(int i, int swapped, int u) {
    if (is_x(i, swapped)) return u == free_group(i) ? TFD_GEMM_N : TFD_GEMM_T;
    return u == GK ? TFD_GEMM_N : TFD_GEMM_T;
}

/*
 * The unit-stride group input i can be read in place with, or -1: a
 * conjugated input needs a transposed read (folded as op C), any other
 * prefers the plain one.
 */
static int pick_unit(const planner *p, const side *s, int i, int swapped) {
    const int mat[2] = {free_group(i), GK};
    int best = -1;
    for (int k = 0; k < 2; k++) {
        const int u = mat[k], other = mat[1 - k];
        if (!unit_ok(p, s, u, other)) continue;
        const tfd_gemm_op op = op_for(i, swapped, u);
        if (p->conj[i] && op != TFD_GEMM_T) continue;
        if (best < 0 || op == TFD_GEMM_N) best = u;
    }
    return best;
}

/* Elements of input i as the GEMM reads it (its summed labels gone). */
static int64_t operand_numel(const planner *p, int i) {
    return p->ext[GB] * p->ext[free_group(i)] * p->ext[GK];
}

/* Fills the copy decisions and cost of one candidate. */
static void evaluate(const planner *p, choice *ch) {
    side s[3];
    for (int x = 0; x < 3; x++) side_of(p, x, ch, &s[x]);
    const int cu = ch->swapped ? GN : GM, cv = ch->swapped ? GM : GN;
    ch->to_temp = !(s[OC].fused && unit_ok(p, &s[OC], cu, cv));
    ch->cost = ch->to_temp ? 2 * p->ext[GB] * p->ext[GM] * p->ext[GN] : 0;
    for (int i = 0; i < 2; i++) {
        ch->unit[i] = -1;
        if (p->n_sum[i] == 0 && s[i].fused) ch->unit[i] = pick_unit(p, &s[i], i, ch->swapped);
        ch->pass[i] = ch->unit[i] < 0;
        if (ch->pass[i]) ch->cost += operand_numel(p, i);
    }
}

/* Whether candidate a is better than b: fewer copies, then an output in place, then fewer passes. */
static int better(const choice *a, const choice *b) {
    if (a->cost != b->cost) return a->cost < b->cost;
    if (a->to_temp != b->to_temp) return !a->to_temp;
    return a->pass[0] + a->pass[1] < b->pass[0] + b->pass[1];
}

/* Appends one label as a kept axis of a pass, reading it with the given source stride. */
static void keep_axis(tfd_contract_pass *ps, int64_t dim, int64_t stride) {
    ps->keep_dim[ps->n_keep] = dim;
    ps->keep_stride[ps->n_keep] = stride;
    ps->n_keep++;
}

/* Appends one label as a reduced axis of a pass. */
static void red_axis(tfd_contract_pass *ps, int64_t dim, int64_t stride) {
    ps->red_dim[ps->n_red] = dim;
    ps->red_stride[ps->n_red] = stride;
    ps->n_red++;
}

/*
 * Merges adjacent kept axes that are adjacent in the source too, orders and
 * merges the reduced axes, counts elements, and recognises a pass that only
 * permutes a dense source (so a backend can use its permute kernel).
 */
static void finish_pass(tfd_contract_pass *ps) {
    int n = 0;
    for (int j = 0; j < ps->n_keep; j++) {
        if (n > 0 && ps->keep_stride[n - 1] == ps->keep_stride[j] * ps->keep_dim[j]) {
            ps->keep_dim[n - 1] *= ps->keep_dim[j];
            ps->keep_stride[n - 1] = ps->keep_stride[j];
        } else {
            ps->keep_dim[n] = ps->keep_dim[j];
            ps->keep_stride[n] = ps->keep_stride[j];
            n++;
        }
    }
    ps->n_keep = n;
    for (int i = 1; i < ps->n_red; i++) /* outermost first, so merging sees neighbours */
        for (int j = i; j > 0 && ps->red_stride[j - 1] < ps->red_stride[j]; j--) {
            int64_t d = ps->red_dim[j], s = ps->red_stride[j];
            ps->red_dim[j] = ps->red_dim[j - 1];
            ps->red_stride[j] = ps->red_stride[j - 1];
            ps->red_dim[j - 1] = d;
            ps->red_stride[j - 1] = s;
        }
    n = 0;
    for (int j = 0; j < ps->n_red; j++) {
        if (n > 0 && ps->red_stride[n - 1] == ps->red_stride[j] * ps->red_dim[j]) {
            ps->red_dim[n - 1] *= ps->red_dim[j];
            ps->red_stride[n - 1] = ps->red_stride[j];
        } else {
            ps->red_dim[n] = ps->red_dim[j];
            ps->red_stride[n] = ps->red_stride[j];
            n++;
        }
    }
    ps->n_red = n;
    ps->numel = 1;
    for (int j = 0; j < ps->n_keep; j++) ps->numel *= ps->keep_dim[j];
    ps->terms = 1;
    for (int j = 0; j < ps->n_red; j++) ps->terms *= ps->red_dim[j];

    /* A dense source: its axes, outermost first, have strides 1, d, d*d', ... */
    ps->is_permutation = ps->n_red == 0 && !ps->conj;
    int order[TF_MAX_RANK];
    for (int j = 0; j < ps->n_keep; j++) order[j] = j;
    for (int i = 1; i < ps->n_keep; i++)
        for (int j = i; j > 0 && ps->keep_stride[order[j - 1]] < ps->keep_stride[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t want = 1;
    for (int j = ps->n_keep - 1; j >= 0 && ps->is_permutation; j--) {
        if (ps->keep_stride[order[j]] != want) ps->is_permutation = 0;
        want *= ps->keep_dim[order[j]];
    }
    ps->is_identity = 0;
    ps->perm_rank = 0;
    if (!ps->is_permutation) return;
    ps->perm_rank = ps->n_keep;
    ps->is_identity = 1;
    for (int j = 0; j < ps->n_keep; j++) {
        ps->perm_shape[j] = ps->keep_dim[order[j]];
        if (order[j] != j) ps->is_identity = 0;
    }
    /* Output axis j is kept axis j; order[pos] is the kept axis at source position pos. */
    for (int pos = 0; pos < ps->n_keep; pos++) ps->perm[order[pos]] = pos;
}

/* Sets a group's strides for a dense layout of groups listed outermost first. */
static void dense_side(const planner *p, const int *layout, int n, side *s) {
    int64_t stride = 1;
    s->fused = 1;
    for (int g = 0; g < NG; g++) s->str[g] = 0;
    for (int j = n - 1; j >= 0; j--) {
        s->str[layout[j]] = stride;
        stride *= p->ext[layout[j]];
    }
}

/* Appends group g's labels, in the chosen order, as kept axes of a pass over source x. */
static void keep_group(const planner *p, const choice *ch, int g, int x, tfd_contract_pass *ps) {
    const group_orders *go = &p->g[g];
    const uint8_t *ord = go->cand[ch->idx[g]];
    for (int j = 0; j < go->n_labels; j++)
        keep_axis(ps, p->lab[ord[j]].dim, p->lab[ord[j]].stride[x]);
}

/* Plans a unary contraction: one pass, summing what the output drops. */
static void plan_unary(planner *p, const tf__contraction *c, tfd_contract_plan *plan) {
    tfd_contract_pass *ps = &plan->post;
    ps->active = 1;
    ps->src = TFD_PASS_INPUT0;
    ps->conj = p->conj[0];
    for (int j = 0; j < c->out_rank; j++) {
        const label_info *l = &p->lab[c->out[j]];
        if (l->dim > 1) keep_axis(ps, l->dim, l->stride[OA]);
    }
    for (int q = 0; q < p->n_sum[0]; q++) {
        const label_info *l = &p->lab[p->sum[0][q]];
        red_axis(ps, l->dim, l->stride[OA]);
    }
    finish_pass(ps);
}

/* The leading dimension of a stored matrix whose unit group is u and other group v. */
static int64_t lead(const planner *p, const side *s, int u, int v) {
    if (p->ext[v] > 1) return s->str[v];
    return p->ext[u] > 1 ? p->ext[u] : 1;
}

/* Turns the chosen candidate into the plan's passes and GEMM. */
static void build_binary(planner *p, const tf__contraction *c, const choice *ch,
                         tfd_contract_plan *plan) {
    side s[3];
    int unit[2];
    for (int i = 0; i < 2; i++) {
        tfd_contract_pass *ps = &plan->pre[i];
        if (!ch->pass[i]) {
            side_of(p, i, ch, &s[i]);
            unit[i] = ch->unit[i];
            continue;
        }
        /* Laid out as the GEMM reads it untransposed: X [B][K][free], Y [B][free][K]. */
        const int f = free_group(i);
        int layout[3] = {GB, GK, f};
        if (!is_x(i, ch->swapped)) {
            layout[1] = f;
            layout[2] = GK;
        }
        ps->active = 1;
        ps->src = i == 0 ? TFD_PASS_INPUT0 : TFD_PASS_INPUT1;
        ps->conj = p->conj[i];
        for (int j = 0; j < 3; j++) keep_group(p, ch, layout[j], i, ps);
        for (int q = 0; q < p->n_sum[i]; q++) {
            const label_info *l = &p->lab[p->sum[i][q]];
            red_axis(ps, l->dim, l->stride[i]);
        }
        finish_pass(ps);
        dense_side(p, layout, 3, &s[i]);
        unit[i] = is_x(i, ch->swapped) ? f : GK;
    }

    const int cu = ch->swapped ? GN : GM, cv = ch->swapped ? GM : GN;
    if (!ch->to_temp) {
        side_of(p, OC, ch, &s[OC]);
    } else {
        /* The temporary is column-major C: [B][cols][rows]; post reads it in output order. */
        const int layout[3] = {GB, cv, cu};
        dense_side(p, layout, 3, &s[OC]);
        int64_t label_stride[TF__MAX_LABELS] = {0};
        for (int g = 0; g < 3; g++) {
            const group_orders *go = &p->g[layout[g]];
            const uint8_t *ord = go->cand[ch->idx[layout[g]]];
            int64_t st = s[OC].str[layout[g]];
            for (int j = go->n_labels - 1; j >= 0; j--) {
                label_stride[ord[j]] = st;
                st *= p->lab[ord[j]].dim;
            }
        }
        tfd_contract_pass *ps = &plan->post;
        ps->active = 1;
        ps->src = TFD_PASS_TEMP;
        for (int j = 0; j < c->out_rank; j++) {
            const label_info *l = &p->lab[c->out[j]];
            if (l->dim > 1) keep_axis(ps, l->dim, label_stride[c->out[j]]);
        }
        finish_pass(ps);
        plan->to_temp = 1;
        plan->temp_numel = p->ext[GB] * p->ext[GM] * p->ext[GN];
    }

    tfd_contract_gemm *g = &plan->gemm;
    g->x = ch->swapped ? 1 : 0;
    g->y = 1 - g->x;
    g->rows = p->ext[cu];
    g->cols = p->ext[cv];
    g->depth = p->ext[GK];
    g->batch = p->ext[GB];
    for (int i = 0; i < 2; i++) {
        const int f = free_group(i);
        tfd_gemm_op op = ch->pass[i] ? TFD_GEMM_N : op_for(i, ch->swapped, unit[i]);
        if (op == TFD_GEMM_T && p->conj[i] && !ch->pass[i]) op = TFD_GEMM_C;
        const int other = unit[i] == f ? GK : f;
        const int64_t ld = lead(p, &s[i], unit[i], other);
        const int64_t bs = p->ext[GB] > 1 ? s[i].str[GB] : 0;
        if (i == g->x) {
            g->op_x = op;
            g->ldx = ld;
            g->stride_x = bs;
        } else {
            g->op_y = op;
            g->ldy = ld;
            g->stride_y = bs;
        }
    }
    g->ldc = lead(p, &s[OC], cu, cv);
    g->stride_c = p->ext[GB] > 1 ? s[OC].str[GB] : 0;
    plan->copied = (plan->pre[0].active ? plan->pre[0].numel : 0) +
                   (plan->pre[1].active ? plan->pre[1].numel : 0) +
                   (plan->to_temp ? plan->post.numel : 0);
}

/*
 * Whether the GEMM is one that BLAS accepts: every leading dimension at least
 * the rows of the matrix as stored (cuBLAS and OpenBLAS refuse less).
 */
static int gemm_valid(const tfd_contract_gemm *g) {
    const int64_t x_rows = g->op_x == TFD_GEMM_N ? g->rows : g->depth;
    const int64_t y_rows = g->op_y == TFD_GEMM_N ? g->depth : g->cols;
    return g->ldx >= (x_rows > 1 ? x_rows : 1) && g->ldy >= (y_rows > 1 ? y_rows : 1) &&
           g->ldc >= (g->rows > 1 ? g->rows : 1);
}

/* Sorts the labels into groups and lists the candidate orders of each group. */
static void classify(planner *p, const tf__contraction *c) {
    uint64_t listed = 0;
    uint8_t members[NG][TF_MAX_RANK];
    for (int i = 0; i < c->n_inputs; i++)
        for (int ax = 0; ax < c->rank[i]; ax++) {
            const uint8_t L = c->labels[i][ax];
            const label_info *l = &p->lab[L];
            if (l->dim == 1 || (listed & ((uint64_t)1 << L))) continue;
            listed |= (uint64_t)1 << L;
            const int in_a = l->count[OA] > 0, in_b = l->count[OB] > 0, in_out = l->count[OC] > 0;
            int g = -1;
            if (c->n_inputs == 1) {
                if (!in_out) p->sum[0][p->n_sum[0]++] = L;
                continue;
            }
            if (in_a && in_b)
                g = in_out ? GB : GK;
            else if (in_out)
                g = in_a ? GM : GN;
            else if (in_a)
                p->sum[0][p->n_sum[0]++] = L;
            else
                p->sum[1][p->n_sum[1]++] = L;
            if (g >= 0) members[g][p->g[g].n_labels++] = L;
        }
    for (int g = 0; g < NG; g++) {
        p->ext[g] = 1;
        for (int j = 0; j < p->g[g].n_labels; j++) p->ext[g] *= p->lab[members[g][j]].dim;
        if (c->n_inputs == 1) continue;
        /* The output's order first: ties keep the output in place. */
        const int order_of[3] = {OC, OA, OB};
        for (int k = 0; k < 3; k++)
            if (carries[order_of[k]][g]) add_candidate(p, g, order_of[k], members[g]);
    }
}

tf_status tfd_contract_plan_build(const tf__contraction *c, const tf__meta *in,
                                  tfd_contract_plan *plan, char *msg, size_t msg_len) {
    tf__meta out;
    tf_status st = tf__infer_contract(c, in, &out, msg, msg_len);
    if (st != TF_OK) return st;
    memset(plan, 0, sizeof *plan);
    plan->n_inputs = c->n_inputs;
    plan->out_numel = tf__meta_numel(&out);

    planner p;
    memset(&p, 0, sizeof p);
    const int complex_dtype = in[0].dtype == TF_C64 || in[0].dtype == TF_C128;
    for (int i = 0; i < c->n_inputs; i++) {
        p.conj[i] = complex_dtype && c->conj[i];
        int64_t stride[TF_MAX_RANK];
        row_major(in[i].rank, in[i].shape, stride);
        for (int ax = 0; ax < in[i].rank; ax++) {
            label_info *l = &p.lab[c->labels[i][ax]];
            l->dim = in[i].shape[ax];
            l->stride[i] += stride[ax];
            l->count[i]++;
        }
    }
    int64_t ostride[TF_MAX_RANK];
    row_major(out.rank, out.shape, ostride);
    for (int j = 0; j < out.rank; j++) {
        label_info *l = &p.lab[c->out[j]];
        l->stride[OC] = ostride[j];
        l->count[OC]++;
    }
    classify(&p, c);
    if (c->n_inputs == 1) {
        plan_unary(&p, c, plan);
        return TF_OK;
    }

    choice best, ch;
    memset(&best, 0, sizeof best);
    memset(&ch, 0, sizeof ch);
    int have = 0;
    for (ch.idx[GB] = 0; ch.idx[GB] < p.g[GB].n_cand; ch.idx[GB]++)
        for (ch.idx[GM] = 0; ch.idx[GM] < p.g[GM].n_cand; ch.idx[GM]++)
            for (ch.idx[GN] = 0; ch.idx[GN] < p.g[GN].n_cand; ch.idx[GN]++)
                for (ch.idx[GK] = 0; ch.idx[GK] < p.g[GK].n_cand; ch.idx[GK]++)
                    for (int sw = 1; sw >= 0; sw--) {
                        ch.swapped = sw;
                        evaluate(&p, &ch);
                        if (!have || better(&ch, &best)) best = ch;
                        have = 1;
                    }
    if (!have) {
        snprintf(msg, msg_len, "contract: the planner found no candidate (cannot happen)");
        return TF_ERR_INTERNAL;
    }
    build_binary(&p, c, &best, plan);
    if (!gemm_valid(&plan->gemm)) {
        snprintf(msg, msg_len,
                 "contract: the planner made an invalid GEMM (ld %lld, %lld, %lld for %lld x %lld "
                 "x %lld)",
                 (long long)plan->gemm.ldx, (long long)plan->gemm.ldy, (long long)plan->gemm.ldc,
                 (long long)plan->gemm.rows, (long long)plan->gemm.cols,
                 (long long)plan->gemm.depth);
        return TF_ERR_INTERNAL;
    }
    return TF_OK;
}

int64_t tfd_contract_plan_scratch(const tfd_contract_plan *plan) {
    int64_t n = plan->to_temp ? plan->temp_numel : 0;
    for (int i = 0; i < 2; i++)
        if (plan->pre[i].active) n += plan->pre[i].numel;
    return n;
}
