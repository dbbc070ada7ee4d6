/*
 * The pairwise order of an einsum, and the lowering of each pair to one
 * OP_CONTRACT descriptor.
 *
 * The search sees each operand as the set of its distinct labels (a repeated
 * label is one diagonal, a broadcast size-1 axis is nothing) and each
 * intermediate as the labels it must keep: those of its operands that the
 * output or an operand not yet contracted still needs. A label nobody else
 * needs is therefore summed in the first step that touches it, and the
 * intermediate of a set of operands is the same whatever order made it.
 *
 * Cost model: a pairwise step loops once over every combination of the
 * labels of both inputs and does one multiply and one add there; a multiply
 * is 1 flop and an add 1 in a real dtype, 6 and 2 in a complex one, so a
 * step costs 2 (real) or 8 (complex) times the product of its labels' sizes.
 * The unary step of a one-operand expression does one add per combination.
 * The naive count is numpy's: one loop nest over every label of the
 * expression with n - 1 multiplies and one add per combination. The size of
 * a result is the product of its labels' sizes.
 *
 * Three orders: greedy (opt_einsum's idea: of the pairs that share a label,
 * the one whose result removes the most elements, i.e. the least
 * result - inputs, then the fewest flops; when no pair shares a label, the
 * smallest outer product), optimal (every binary contraction tree, by
 * dynamic programming over subsets of operands: fewest flops, then the
 * smallest largest intermediate) and left-to-right. Pairs whose result the
 * daemon could not hold (rank above TF_MAX_RANK, more than 2^40 elements)
 * are never chosen.
 */
#include <stdio.h>
#include <string.h>

#include "client/einsum-path.h"

/* An expression as the search sees it. */
typedef struct problem {
    int n;
    uint64_t in[TF__EINSUM_MAX_OPERANDS]; /* each operand's distinct labels */
    uint64_t out;
    const int64_t *size;
    double mul, add; /* flops of one multiply and one add */
} problem;

static int is_complex(tf_dtype d) { return d == TF_C64 || d == TF_C128; }

/* Elements of a tensor with each label of m once. */
static double mask_size(const problem *pb, uint64_t m) {
    double s = 1;
    for (; m; m &= m - 1) s *= (double)pb->size[__builtin_ctzll(m)];
    return s;
}

/* 1 when a result with labels m is a tensor the daemon may hold. */
static int holdable(const problem *pb, uint64_t m) {
    return __builtin_popcountll(m) <= TF_MAX_RANK && mask_size(pb, m) <= (double)TF__MAX_ELEMENTS;
}

static void problem_of(const tf__einsum *e, problem *pb) {
    memset(pb, 0, sizeof *pb);
    pb->n = e->n_operands;
    for (int i = 0; i < e->n_operands; i++)
        for (int a = 0; a < e->in[i].rank; a++)
            if (e->in[i].labels[a] != TF__EINSUM_BROADCAST)
                pb->in[i] |= (uint64_t)1 << e->in[i].labels[a];
    for (int a = 0; a < e->out.rank; a++) pb->out |= (uint64_t)1 << e->out.labels[a];
    pb->size = e->size;
    pb->mul = is_complex(e->dtype) ? 6 : 1;
    pb->add = is_complex(e->dtype) ? 2 : 1;
}

/* Appends a step contracting a (labels la) with b (labels lb, b = -1: none) into labels kept. */
static void record(const problem *pb, tf__einsum_path *p, int a, int b, uint64_t la, uint64_t lb,
                   uint64_t kept) {
    tf__einsum_step *s = &p->step[p->n_steps++];
    s->a = a;
    s->b = b;
    s->labels = kept;
    s->loops = la | lb;
    s->flops = mask_size(pb, s->loops) * (b < 0 ? pb->add : pb->mul + pb->add);
    s->elements = (int64_t)mask_size(pb, kept);
}

/* The labels a contraction of operands i and j of the live list must keep. */
static uint64_t kept_of(const problem *pb, const uint64_t *mask, int live, int i, int j) {
    uint64_t others = pb->out;
    for (int x = 0; x < live; x++)
        if (x != i && x != j) others |= mask[x];
    return (mask[i] | mask[j]) & others;
}

/*
 * Greedy: contracts, among the holdable pairs, the one with the best key
 * (shares a label; least elements added, result minus inputs, or for an
 * outer product the smallest result; fewest flops), the result joining the
 * end of the list. Returns 0 when only pairs it may not take are left.
 */
static int greedy(const problem *pb, tf__einsum_path *p) {
    int id[TF__EINSUM_MAX_OPERANDS], live = pb->n;
    uint64_t mask[TF__EINSUM_MAX_OPERANDS];
    for (int i = 0; i < live; i++) {
        id[i] = i;
        mask[i] = pb->in[i];
    }
    p->n_steps = 0;
    while (live > 1) {
        int bi = -1, bj = -1, best_apart = 0;
        double best_grow = 0, best_loops = 0;
        uint64_t best_kept = 0;
        for (int i = 0; i < live; i++)
            for (int j = i + 1; j < live; j++) {
                uint64_t kept = kept_of(pb, mask, live, i, j);
                if (!holdable(pb, kept)) continue;
                int apart = (mask[i] & mask[j]) == 0;
                double grow = mask_size(pb, kept);
                if (!apart) grow -= mask_size(pb, mask[i]) + mask_size(pb, mask[j]);
                double loops = mask_size(pb, mask[i] | mask[j]);
                if (bi >= 0 && (apart > best_apart ||
                                (apart == best_apart &&
                                 (grow > best_grow || (grow == best_grow && loops >= best_loops)))))
                    continue;
                bi = i, bj = j, best_apart = apart, best_grow = grow, best_loops = loops;
                best_kept = kept;
            }
        if (bi < 0) return 0;
        record(pb, p, id[bi], id[bj], mask[bi], mask[bj], best_kept);
        memmove(&id[bj], &id[bj + 1], sizeof *id * (size_t)(live - bj - 1));
        memmove(&mask[bj], &mask[bj + 1], sizeof *mask * (size_t)(live - bj - 1));
        memmove(&id[bi], &id[bi + 1], sizeof *id * (size_t)(live - bi - 2));
        memmove(&mask[bi], &mask[bi + 1], sizeof *mask * (size_t)(live - bi - 2));
        live -= 2;
        id[live] = pb->n + p->n_steps - 1;
        mask[live] = best_kept;
        live++;
    }
    return 1;
}

/* Left to right: operand 0 with 1, that with 2, ...; returns the failing step + 1, or 0. */
static int left_to_right(const problem *pb, tf__einsum_path *p) {
    uint64_t cur = pb->in[0];
    int cur_id = 0;
    p->n_steps = 0;
    for (int j = 1; j < pb->n; j++) {
        uint64_t others = pb->out;
        for (int x = j + 1; x < pb->n; x++) others |= pb->in[x];
        uint64_t kept = (cur | pb->in[j]) & others;
        if (!holdable(pb, kept)) return j;
        record(pb, p, cur_id, j, cur, pb->in[j], kept);
        cur = kept;
        cur_id = pb->n + j - 1;
    }
    return 0;
}

/* The search over subsets: for each subset, its result's labels and its cheapest tree. */
typedef struct subsets {
    uint64_t labels[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS]; /* of its result (an operand's own) */
    double cost[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS];
    double largest[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS];
    unsigned split[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS]; /* the part holding its lowest operand */
    unsigned char ok[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS]; /* some holdable tree makes it */
} subsets;

/* Appends the steps of subset s's tree, children first; returns the id of its result. */
static int emit(const problem *pb, const subsets *t, unsigned s, tf__einsum_path *p) {
    if ((s & (s - 1)) == 0) return __builtin_ctz(s);
    unsigned l = t->split[s], r = s ^ l;
    int a = emit(pb, t, l, p), b = emit(pb, t, r, p);
    record(pb, p, a, b, t->labels[l], t->labels[r], t->labels[s]);
    return pb->n + p->n_steps - 1;
}

/*
 * Optimal: the cheapest tree of every subset from the cheapest trees of its
 * two parts (every split is tried once, the part with the lowest operand on
 * the left). Returns 0 when no tree keeps every intermediate holdable.
 */
static int optimal(const problem *pb, tf__einsum_path *p) {
    subsets t;
    memset(&t, 0, sizeof t);
    unsigned full = (1u << pb->n) - 1;
    uint64_t uni[1u << TF_EINSUM_OPTIMAL_MAX_OPERANDS];
    uni[0] = 0;
    for (unsigned s = 1; s <= full; s++) uni[s] = uni[s & (s - 1)] | pb->in[__builtin_ctz(s)];
    for (unsigned s = 1; s <= full; s++) {
        unsigned low = s & (~s + 1);
        if (s == low) {
            t.labels[s] = pb->in[__builtin_ctz(s)];
            t.ok[s] = 1;
            continue;
        }
        uint64_t kept = s == full ? pb->out : uni[s] & (pb->out | uni[full ^ s]);
        t.labels[s] = kept;
        if (!holdable(pb, kept)) continue;
        double size = mask_size(pb, kept);
        for (unsigned l = (s - 1) & s; l; l = (l - 1) & s) {
            unsigned r = s ^ l;
            if (!(l & low) || !t.ok[l] || !t.ok[r]) continue;
            double cost = t.cost[l] + t.cost[r] +
                          mask_size(pb, t.labels[l] | t.labels[r]) * (pb->mul + pb->add);
            double largest = size;
            if (t.largest[l] > largest) largest = t.largest[l];
            if (t.largest[r] > largest) largest = t.largest[r];
            if (t.ok[s] && (cost > t.cost[s] || (cost == t.cost[s] && largest >= t.largest[s])))
                continue;
            t.ok[s] = 1;
            t.cost[s] = cost;
            t.largest[s] = largest;
            t.split[s] = l;
        }
    }
    if (!t.ok[full]) return 0;
    p->n_steps = 0;
    emit(pb, &t, full, p);
    return 1;
}

/* Totals of a complete path: flops, the naive count, the largest result. */
static void summarize(const problem *pb, tf__einsum_path *p) {
    uint64_t all = pb->out;
    for (int i = 0; i < pb->n; i++) all |= pb->in[i];
    p->flops = 0;
    p->largest = 0;
    for (int k = 0; k < p->n_steps; k++) {
        p->flops += p->step[k].flops;
        if (p->step[k].elements > p->largest) p->largest = p->step[k].elements;
    }
    p->naive_flops = mask_size(pb, all) * ((pb->n - 1) * pb->mul + pb->add);
}

tf_status tf__einsum_path_find(const tf__einsum *e, tf_einsum_optimize how, tf__einsum_path *p,
                               char *msg, size_t msg_len) {
    problem pb;
    problem_of(e, &pb);
    memset(p, 0, sizeof *p);
    if (how != TF_EINSUM_GREEDY && how != TF_EINSUM_OPTIMAL && how != TF_EINSUM_LEFT_TO_RIGHT) {
        snprintf(msg, msg_len,
                 "einsum: unknown optimize %d: use TF_EINSUM_GREEDY, TF_EINSUM_OPTIMAL or "
                 "TF_EINSUM_LEFT_TO_RIGHT",
                 (int)how);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (!holdable(&pb, pb.out)) {
        snprintf(msg, msg_len, "einsum: the output would hold %.4g elements, more than 2^40",
                 mask_size(&pb, pb.out));
        return TF_ERR_BAD_SHAPE;
    }
    p->method = how;
    int found = 1;
    if (pb.n == 1) {
        record(&pb, p, 0, -1, pb.in[0], 0, pb.out);
    } else if (how == TF_EINSUM_LEFT_TO_RIGHT) {
        int stuck = left_to_right(&pb, p);
        if (stuck) {
            snprintf(msg, msg_len,
                     "einsum: the left-to-right order's step %d (with operand %d) would make an "
                     "intermediate above rank %d or 2^40 elements; TF_EINSUM_GREEDY and "
                     "TF_EINSUM_OPTIMAL avoid it where another order exists",
                     stuck - 1, stuck, TF_MAX_RANK);
            return TF_ERR_BAD_SHAPE;
        }
    } else if (how == TF_EINSUM_OPTIMAL && pb.n <= TF_EINSUM_OPTIMAL_MAX_OPERANDS) {
        found = optimal(&pb, p);
    } else {
        p->method = TF_EINSUM_GREEDY;
        found = greedy(&pb, p);
        if (!found && pb.n <= TF_EINSUM_OPTIMAL_MAX_OPERANDS) {
            p->method = TF_EINSUM_OPTIMAL;
            found = optimal(&pb, p);
        }
    }
    if (!found) {
        snprintf(msg, msg_len,
                 pb.n <= TF_EINSUM_OPTIMAL_MAX_OPERANDS
                     ? "einsum: every pairwise order needs an intermediate above rank %d or 2^40 "
                       "elements: split the expression"
                     : "einsum: the greedy order needs an intermediate above rank %d or 2^40 "
                       "elements (more operands than an exhaustive search takes): split the "
                       "expression",
                 TF_MAX_RANK);
        return TF_ERR_BAD_SHAPE;
    }
    summarize(&pb, p);
    return TF_OK;
}

/* The labels of a mask in ascending order; returns how many. */
static int mask_labels(uint64_t m, unsigned *labels) {
    int n = 0;
    for (; m; m &= m - 1) labels[n++] = (unsigned)__builtin_ctzll(m);
    return n;
}

int tf__einsum_axes(const tf__einsum *e, const tf__einsum_path *p, int id,
                    unsigned labels[TF_MAX_RANK]) {
    const tf__einsum_term *t;
    if (id < e->n_operands)
        t = &e->in[id];
    else if (id == e->n_operands + p->n_steps - 1)
        t = &e->out;
    else
        return mask_labels(p->step[id - e->n_operands].labels, labels);
    for (int a = 0; a < t->rank; a++) labels[a] = t->labels[a];
    return t->rank;
}

void tf__einsum_step_contraction(const tf__einsum *e, const tf__einsum_path *p, int k,
                                 uint64_t conj, tf__contraction *c, tf__meta *out) {
    const tf__einsum_step *s = &p->step[k];
    int wire[TF__EINSUM_N_LABELS];
    for (int l = 0; l < TF__EINSUM_N_LABELS; l++) wire[l] = -1;
    int next = 0, ids[2] = {s->a, s->b};
    unsigned lab[TF_MAX_RANK];
    memset(c, 0, sizeof *c);
    c->n_inputs = s->b < 0 ? 1 : 2;
    for (int x = 0; x < c->n_inputs; x++) {
        c->rank[x] = tf__einsum_axes(e, p, ids[x], lab);
        for (int a = 0; a < c->rank[x]; a++) {
            if (lab[a] == TF__EINSUM_BROADCAST) {
                c->labels[x][a] = (uint8_t)next++;
                continue;
            }
            if (wire[lab[a]] < 0) wire[lab[a]] = next++;
            c->labels[x][a] = (uint8_t)wire[lab[a]];
        }
        c->conj[x] = ids[x] < e->n_operands && ((conj >> ids[x]) & 1) && is_complex(e->dtype);
    }
    int rank = tf__einsum_axes(e, p, e->n_operands + k, lab);
    memset(out, 0, sizeof *out);
    out->dtype = e->dtype;
    out->rank = c->out_rank = rank;
    for (int a = 0; a < rank; a++) {
        c->out[a] = (uint8_t)wire[lab[a]];
        out->shape[a] = e->size[lab[a]];
    }
}
