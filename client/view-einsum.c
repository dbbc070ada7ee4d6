/*
 * einsum on a session view, and its path report (include/tenferro/einsum.h).
 *
 * A call parses the subscripts against the operands' metadata
 * (common/einsum-parse.c), chooses the pairwise order (einsum-path.c) and
 * only then queues anything: one OP_CONTRACT per step, each intermediate
 * freed by an OP_FREE queued right after the one step that reads it. So every
 * error of the notation, the shapes, the dtypes or the order comes back at
 * the call with nothing queued; the only failure left while queueing is
 * memory, and then what the call had queued is taken back.
 */
#include <stdlib.h>
#include <string.h>

#include "client/einsum-path.h"
#include "client/internal.h"

_Static_assert(TF_EINSUM_MAX_OPERANDS == TF__EINSUM_MAX_OPERANDS,
               "the public and the shared operand limits differ");

/*
 * Parses and orders an expression on this client's tensors (with a view v,
 * the tensors its operations may read: idle ones, or a recording graph's
 * values): the checks of the arguments, then the parser's and the path's,
 * their messages left in the client's last error.
 */
static tf_status plan(tf_client *c, tf_view *v, const char *subscripts, int n_operands,
                      const tf_tensor *operands, const tf_einsum_options *opt, tf__einsum *e,
                      tf__einsum_path *p) {
    if (!subscripts) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "einsum: subscripts is NULL");
    if (n_operands < 1 || n_operands > TF_EINSUM_MAX_OPERANDS)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "einsum: %d operands given: between 1 and %d are allowed", n_operands,
                        TF_EINSUM_MAX_OPERANDS);
    if (!operands) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "einsum: operands is NULL");
    uint64_t conj = opt ? opt->conj : 0;
    if (conj >> n_operands)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "einsum: the conj mask 0x%llx names operands beyond the %d given",
                        (unsigned long long)conj, n_operands);
    tf__meta metas[TF_EINSUM_MAX_OPERANDS];
    for (int i = 0; i < n_operands; i++) {
        tf__handle *h = NULL;
        tf_status st = v ? tf__view_lookup(v, operands[i], &h) : tf__lookup(c, operands[i], &h);
        if (st != TF_OK) return st;
        metas[i] = h->meta;
    }
    tf_status st = tf__einsum_parse(subscripts, strlen(subscripts), n_operands, metas, e,
                                    c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    return tf__einsum_path_find(e, opt ? opt->optimize : TF_EINSUM_GREEDY, p, c->last_error,
                                sizeof c->last_error);
}

tf_status tf_view_einsum_opt(tf_view *v, const char *subscripts, int n_operands,
                             const tf_tensor *operands, const tf_einsum_options *opt,
                             tf_tensor *out) {
    tf_status st = tf__view_check(v);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    if (!out) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "einsum: out is NULL");
    tf__einsum e;
    tf__einsum_path p;
    st = plan(c, v, subscripts, n_operands, operands, opt, &e, &p);
    if (st != TF_OK) return st;
    size_t start;
    (void)tf__view_ops(v, &start);
    tf_tensor made[TF__EINSUM_MAX_OPERANDS]; /* the result of each step */
    for (int k = 0; k < p.n_steps && st == TF_OK; k++) {
        tf__contraction kc;
        tf__meta meta;
        tf__einsum_step_contraction(&e, &p, k, opt ? opt->conj : 0, &kc, &meta);
        int ids[2] = {p.step[k].a, p.step[k].b};
        tf_tensor in[2] = {0, 0};
        for (int x = 0; x < kc.n_inputs; x++)
            in[x] = ids[x] < n_operands ? operands[ids[x]] : made[ids[x] - n_operands];
        st = tf__queue_contract(v, &kc, in, &meta, &made[k]);
        for (int x = 0; x < kc.n_inputs && st == TF_OK; x++)
            if (ids[x] >= n_operands) st = tf__view_drop(v, in[x]);
    }
    if (st != TF_OK) {
        tf__view_truncate(v, start);
        return st;
    }
    *out = made[p.n_steps - 1];
    return tf__ok(c);
}

tf_status tf_view_einsum(tf_view *v, const char *subscripts, int n_operands,
                         const tf_tensor *operands, tf_tensor *out) {
    return tf_view_einsum_opt(v, subscripts, n_operands, operands, NULL, out);
}

tf_status tf_einsum_path(tf_client *c, const char *subscripts, int n_operands,
                         const tf_tensor *operands, const tf_einsum_options *opt,
                         tf_einsum_path_info **info) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    if (!info) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "einsum path: info is NULL");
    *info = NULL;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    tf__einsum e;
    tf__einsum_path p;
    tf_status st = plan(c, NULL, subscripts, n_operands, operands, opt, &e, &p);
    if (st != TF_OK) return st;
    *info = tf__einsum_report(&e, &p);
    if (!*info) return tf__fail(c, TF_ERR_NO_MEMORY, "einsum path: out of memory for the report");
    return tf__ok(c);
}

void tf_einsum_path_free(tf_einsum_path_info *info) {
    if (!info) return;
    free((char *)info->report);
    free(info);
}
