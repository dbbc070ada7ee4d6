/*
 * demo-tn-sweep: a tensor-network client of the demo (docs/demo.md).
 *
 *   demo-tn-sweep [SOCKET] [--sweeps 6] [--sites 16] [--chi 64] [--phys 2] [--mpo-bond 4]
 *
 * Each sweep makes a fresh random matrix product state |psi> (complex, bond
 * chi, physical dimension phys, `sites` tensors A(c,s,d)) and the MPO of a
 * random nearest-neighbour Hamiltonian H (tensors W(b,s,t,e), every block
 * Hermitian in (s,t), so <psi|H|psi> is real).
 * It computes <psi|H|psi> and <psi|psi> by sweeping left to right through
 * tenferrod: every site is one einsum call that updates the left environment,
 *
 *   L'(f,e,d) = L(a,b,c) A(c,s,d) W(b,s,t,e) conj(A(a,t,f))   "abc,csd,bste,atf->fed"
 *   N'(f,d)   = N(a,c) A(c,s,d) conj(A(a,s,f))                "ac,csd,asf->fd"
 *
 * with the bra as the conjugated operand (tf_einsum_options.conj), and the
 * last site closes the sandwich with the right boundary (five and four
 * operands). One sweep is one scoped burst: the client queues every einsum of
 * the sweep locally and the daemon runs them in order.
 *
 * The check is independent of the client library's einsum: the same
 * environments computed here with cblas_zgemm and explicit permutations, in
 * an order of our own, on the same inputs. That computation is also the
 * in-process timing. Both values must agree to 1e-10 (relative) and be real
 * to the same tolerance.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "demo-common.h"

#define TOLERANCE 1e-10

static const char *const ENV_H = "abc,csd,bste,atf->fed";
static const char *const FINAL_H = "abc,csd,bste,atf,fed->";
static const char *const ENV_N = "ac,csd,asf->fd";
static const char *const FINAL_N = "ac,csd,asf,fd->";

/* Sizes of one run. */
typedef struct tn_size {
    int sites, chi, phys, mpo;
} tn_size;

/* One sweep's inputs on the host and on the device. */
typedef struct tn_state {
    tn_size n;
    double complex **a, **w;        /* a[i]: chi*phys*chi (c,s,d); w[i]: mpo*phys*phys*mpo */
    double complex *l0, *r, *rn;    /* boundaries: L0(a,b,c), R(f,e,d), Rn(f,d) */
    tf_tensor *ta, *tw, tl0, tn0, tr, trn;
    tf_tensor energy, norm;         /* the sweep's results (rank 0) */
} tn_state;

/* Elements of the environment L(a,b,c) and of the norm environment N(a,c). */
static size_t env_elems(const tn_size *n) { return (size_t)n->chi * n->mpo * n->chi; }
static size_t nenv_elems(const tn_size *n) { return (size_t)n->chi * n->chi; }
static size_t site_elems(const tn_size *n) { return (size_t)n->chi * n->phys * n->chi; }
static size_t mpo_elems(const tn_size *n) { return (size_t)n->mpo * n->phys * n->phys * n->mpo; }

/* Random complex entries with real and imaginary parts uniform in [-scale, scale). */
static void fill_complex(demo_rng *g, double complex *x, size_t n, double scale) {
    demo_fill(g, (double *)x, 2 * n, scale);
}

/* Fills the d x d block (b,e) of W(b,s,t,e) with a random Hermitian matrix (unit = identity). */
static void mpo_block(const tn_size *n, double complex *w, int b, int e, demo_rng *g, int unit) {
    for (int s = 0; s < n->phys; s++)
        for (int t = s; t < n->phys; t++) {
            double complex h = unit ? (s == t) : demo_uniform(g);
            if (!unit && s != t) h += I * demo_uniform(g);
            w[(((size_t)b * n->phys + s) * n->phys + t) * n->mpo + e] = h;
            w[(((size_t)b * n->phys + t) * n->phys + s) * n->mpo + e] = conj(h);
        }
}

/*
 * Makes a sweep's random inputs. Site tensors are scaled so the norm
 * environments stay of order one. The MPO is the usual triangular one
 * of a nearest-neighbour Hamiltonian, H = sum_i h_i + sum_i sum_k A_k(i) B_k(i+1),
 * with random Hermitian h, A_k, B_k (k = 1 .. mpo-2): blocks (0,0) and
 * (mpo-1,mpo-1) are the identity, (0,mpo-1) is h, (0,k) is A_k, (k,mpo-1) is
 * B_k. The boundaries pick MPO bond 0 on the left and mpo-1 on the right, and
 * are the identity on the MPS bond.
 */
static void make_inputs(tn_state *st, demo_rng *g) {
    const tn_size *n = &st->n;
    double site_scale = sqrt(1.5 / (n->chi * n->phys));
    int last = n->mpo - 1;
    for (int i = 0; i < n->sites; i++) {
        fill_complex(g, st->a[i], site_elems(n), site_scale);
        double complex *w = st->w[i];
        memset(w, 0, mpo_elems(n) * sizeof *w);
        mpo_block(n, w, 0, 0, g, 1);
        mpo_block(n, w, last, last, g, 1);
        mpo_block(n, w, 0, last, g, 0);
        for (int k = 1; k < last; k++) {
            mpo_block(n, w, 0, k, g, 0);
            mpo_block(n, w, k, last, g, 0);
        }
    }
    memset(st->l0, 0, env_elems(n) * sizeof *st->l0);
    memset(st->r, 0, env_elems(n) * sizeof *st->r);
    memset(st->rn, 0, nenv_elems(n) * sizeof *st->rn);
    for (int a = 0; a < n->chi; a++) {
        st->l0[((size_t)a * n->mpo + 0) * n->chi + a] = 1.0;
        st->r[((size_t)a * n->mpo + last) * n->chi + a] = 1.0;
        st->rn[(size_t)a * n->chi + a] = 1.0;
    }
}

/* Uploads a sweep's inputs (N0, the identity, is the same as Rn). */
static void upload_inputs(demo_run *r, tn_state *st) {
    const tn_size *n = &st->n;
    const int64_t site[3] = {n->chi, n->phys, n->chi};
    const int64_t mpo[4] = {n->mpo, n->phys, n->phys, n->mpo};
    const int64_t env[3] = {n->chi, n->mpo, n->chi};
    const int64_t nenv[2] = {n->chi, n->chi};
    for (int i = 0; i < n->sites; i++) {
        st->ta[i] = demo_upload(r, TF_C128, 3, site, st->a[i]);
        st->tw[i] = demo_upload(r, TF_C128, 4, mpo, st->w[i]);
    }
    st->tl0 = demo_upload(r, TF_C128, 3, env, st->l0);
    st->tr = demo_upload(r, TF_C128, 3, env, st->r);
    st->trn = demo_upload(r, TF_C128, 2, nenv, st->rn);
    st->tn0 = demo_upload(r, TF_C128, 2, nenv, st->rn);
}

/* Frees a sweep's tensors on the device. */
static void free_inputs(demo_run *r, tn_state *st) {
    for (int i = 0; i < st->n.sites; i++) {
        demo_check(r, tf_tensor_free(r->client, st->ta[i]), "tf_tensor_free");
        demo_check(r, tf_tensor_free(r->client, st->tw[i]), "tf_tensor_free");
    }
    const tf_tensor rest[] = {st->tl0, st->tr, st->trn, st->tn0, st->energy, st->norm};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        demo_check(r, tf_tensor_free(r->client, rest[i]), "tf_tensor_free");
}

/* Queues one einsum with the operand `conj_operand` conjugated (the bra). */
static tf_status einsum_bra(tf_view *v, const char *subscripts, int n, const tf_tensor *ops,
                            int conj_operand, tf_tensor *out) {
    tf_einsum_options opt = {TF_EINSUM_GREEDY, 1u << conj_operand};
    return tf_view_einsum_opt(v, subscripts, n, ops, &opt, out);
}

/*
 * The sweep as one burst: the two left-to-right environment chains, each
 * environment freed once the next one is queued, and the two closing
 * sandwiches that leave <psi|H|psi> and <psi|psi> as rank-0 tensors.
 */
static tf_status queue_sweep(tf_view *v, void *arg) {
    tn_state *st = arg;
    tf_client *c = tf_view_client(v);
    int last = st->n.sites - 1;
    tf_tensor l = st->tl0, nn = st->tn0;
    tf_status s = TF_OK;
    for (int i = 0; i < last && s == TF_OK; i++) {
        tf_tensor l2, n2;
        s = einsum_bra(v, ENV_H, 4, (tf_tensor[]){l, st->ta[i], st->tw[i], st->ta[i]}, 3, &l2);
        if (s == TF_OK)
            s = einsum_bra(v, ENV_N, 3, (tf_tensor[]){nn, st->ta[i], st->ta[i]}, 2, &n2);
        if (s != TF_OK) break;
        /* The boundaries are freed with the other inputs after the sweep. */
        if (l != st->tl0) s = tf_tensor_free(c, l);
        if (s == TF_OK && nn != st->tn0) s = tf_tensor_free(c, nn);
        l = l2;
        nn = n2;
    }
    if (s == TF_OK)
        s = einsum_bra(v, FINAL_H, 5,
                       (tf_tensor[]){l, st->ta[last], st->tw[last], st->ta[last], st->tr}, 3,
                       &st->energy);
    if (s == TF_OK)
        s = einsum_bra(v, FINAL_N, 4, (tf_tensor[]){nn, st->ta[last], st->ta[last], st->trn}, 2,
                       &st->norm);
    if (s == TF_OK && l != st->tl0) s = tf_tensor_free(c, l);
    if (s == TF_OK && nn != st->tn0) s = tf_tensor_free(c, nn);
    return s;
}

/* out[o][q][p][i] = in[o][p][q][i]: the permutations the reference needs. */
static void swap_middle(const double complex *in, double complex *out, size_t outer, size_t p,
                        size_t q, size_t inner) {
    for (size_t o = 0; o < outer; o++)
        for (size_t x = 0; x < p; x++)
            for (size_t y = 0; y < q; y++)
                memcpy(out + ((o * q + y) * p + x) * inner, in + ((o * p + x) * q + y) * inner,
                       inner * sizeof *in);
}

/* Scratch of the reference computation. */
typedef struct ref_work {
    double complex *t1, *t2, *env, *env2, *nenv, *nenv2;
} ref_work;

/*
 * The reference environment update L'(f,e,d), computed with three zgemm
 * calls and two explicit permutations:
 *   T1[(a,b),(s,d)] = L[(a,b),c] A[c,(s,d)]
 *   T2[(a,d),(t,e)] = T1 permuted to [(a,d),(b,s)] times W[(b,s),(t,e)]
 *   L'[f,(e,d)]     = conj(A)[(a,t),f]^T times T2 permuted to [(a,t),(e,d)]
 */
static void ref_env_update(const tn_size *n, const double complex *l, const double complex *a,
                           const double complex *w, double complex *out, ref_work *wk) {
    const double complex one = 1, zero = 0;
    size_t chi = (size_t)n->chi, phys = (size_t)n->phys, mpo = (size_t)n->mpo;
    /* T1(a,b,s,d) */
    cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(chi * mpo), (int)(phys * chi),
                (int)chi, &one, l, (int)chi, a, (int)(phys * chi), &zero, wk->t1, (int)(phys * chi));
    /* (a,b,s,d) -> (a,d,b,s): swap (b,s) with d */
    swap_middle(wk->t1, wk->t2, chi, mpo * phys, chi, 1);
    /* T2(a,d,t,e) into t1 */
    cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(chi * chi), (int)(phys * mpo),
                (int)(mpo * phys), &one, wk->t2, (int)(mpo * phys), w, (int)(phys * mpo), &zero,
                wk->t1, (int)(phys * mpo));
    /* (a,d,t,e) -> (a,t,e,d): swap d with (t,e) */
    swap_middle(wk->t1, wk->t2, chi, chi, phys * mpo, 1);
    cblas_zgemm(CblasRowMajor, CblasConjTrans, CblasNoTrans, (int)chi, (int)(mpo * chi),
                (int)(chi * phys), &one, a, (int)chi, wk->t2, (int)(mpo * chi), &zero, out,
                (int)(mpo * chi));
}

/*
 * The reference norm environment N'(f,d) with two zgemm calls:
 *   U[a,(s,d)] = N[a,c] A[c,(s,d)],  N'[f,d] = conj(A)[(a,s),f]^T U[(a,s),d]
 */
static void ref_nenv_update(const tn_size *n, const double complex *nn, const double complex *a,
                            double complex *out, ref_work *wk) {
    const double complex one = 1, zero = 0;
    int chi = n->chi, phys = n->phys;
    cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, chi, phys * chi, chi, &one, nn, chi, a,
                phys * chi, &zero, wk->t1, phys * chi);
    cblas_zgemm(CblasRowMajor, CblasConjTrans, CblasNoTrans, chi, chi, chi * phys, &one, a, chi,
                wk->t1, chi, &zero, out, chi);
}

/* <psi|H|psi> and <psi|psi> of the sweep's inputs, computed in this process. */
static void reference_sweep(const tn_state *st, ref_work *wk, double complex *energy,
                            double complex *norm) {
    const tn_size *n = &st->n;
    memcpy(wk->env, st->l0, env_elems(n) * sizeof *wk->env);
    memcpy(wk->nenv, st->rn, nenv_elems(n) * sizeof *wk->nenv);
    for (int i = 0; i < n->sites; i++) {
        ref_env_update(n, wk->env, st->a[i], st->w[i], wk->env2, wk);
        ref_nenv_update(n, wk->nenv, st->a[i], wk->nenv2, wk);
        double complex *t = wk->env;
        wk->env = wk->env2;
        wk->env2 = t;
        t = wk->nenv;
        wk->nenv = wk->nenv2;
        wk->nenv2 = t;
    }
    cblas_zdotu_sub((int)env_elems(n), wk->env, 1, st->r, 1, energy);
    double complex tr = 0;
    for (int f = 0; f < n->chi; f++) tr += wk->nenv[(size_t)f * n->chi + f];
    *norm = tr;
}

/* Flops of one einsum on a sweep's operands, as the client library's path reports them. */
static double einsum_flops(demo_run *r, const char *subscripts, int n, const tf_tensor *ops,
                           int conj_operand) {
    tf_einsum_options opt = {TF_EINSUM_GREEDY, 1u << conj_operand};
    tf_einsum_path_info *info = NULL;
    demo_check(r, tf_einsum_path(r->client, subscripts, n, ops, &opt, &info), "tf_einsum_path");
    double flops = info->flops;
    tf_einsum_path_free(info);
    return flops;
}

/* Pairwise contractions one sweep queues: an einsum of n operands is n - 1 of them. */
static int contractions_per_sweep(const tn_size *n) {
    return (n->sites - 1) * (3 + 2) + 4 + 3;
}

/* Relative distance of two complex numbers (to the larger magnitude). */
static double rel_diff(double complex x, double complex y) {
    double m = fmax(cabs(x), cabs(y));
    return m > 0 ? cabs(x - y) / m : 0;
}

static void *xmalloc(const demo_run *r, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) demo_die(r, "out of memory (%zu bytes)", bytes);
    return p;
}

int main(int argc, char **argv) {
    demo_run r;
    demo_start(&r, "tn-sweep", argc, argv);
    tn_state st;
    memset(&st, 0, sizeof st);
    st.n.sites = demo_option(&r, argc, argv, "--sites", 16);
    st.n.chi = demo_option(&r, argc, argv, "--chi", 64);
    st.n.phys = demo_option(&r, argc, argv, "--phys", 2);
    st.n.mpo = demo_option(&r, argc, argv, "--mpo-bond", 4);
    int sweeps = demo_option(&r, argc, argv, "--sweeps", 6);
    if (st.n.sites < 2) demo_die(&r, "--sites must be at least 2");
    if (st.n.mpo < 2) demo_die(&r, "--mpo-bond must be at least 2");
    const tn_size *n = &st.n;

    st.a = xmalloc(&r, n->sites * sizeof *st.a);
    st.w = xmalloc(&r, n->sites * sizeof *st.w);
    st.ta = xmalloc(&r, n->sites * sizeof *st.ta);
    st.tw = xmalloc(&r, n->sites * sizeof *st.tw);
    for (int i = 0; i < n->sites; i++) {
        st.a[i] = xmalloc(&r, site_elems(n) * sizeof(double complex));
        st.w[i] = xmalloc(&r, mpo_elems(n) * sizeof(double complex));
    }
    st.l0 = xmalloc(&r, env_elems(n) * sizeof(double complex));
    st.r = xmalloc(&r, env_elems(n) * sizeof(double complex));
    st.rn = xmalloc(&r, nenv_elems(n) * sizeof(double complex));
    size_t big = site_elems(n) * (size_t)n->mpo; /* T1, T2: chi*mpo*phys*chi elements */
    ref_work wk = {xmalloc(&r, big * sizeof(double complex)), xmalloc(&r, big * sizeof(double complex)),
                   xmalloc(&r, env_elems(n) * sizeof(double complex)),
                   xmalloc(&r, env_elems(n) * sizeof(double complex)),
                   xmalloc(&r, nenv_elems(n) * sizeof(double complex)),
                   xmalloc(&r, nenv_elems(n) * sizeof(double complex))};

    demo_rng g;
    demo_rng_init(&g, r.seed);
    double flops = 0, worst = 0, worst_imag = 0;
    double complex last_energy = 0, last_norm = 1;
    void *buf = NULL;
    size_t cap = 0;
    for (int k = 0; k < sweeps; k++) {
        make_inputs(&st, &g);
        upload_inputs(&r, &st);
        if (k == 0) {
            /* Every site has the same shapes: the path cost of one site counts for all. */
            double env = einsum_flops(&r, ENV_H, 4, (tf_tensor[]){st.tl0, st.ta[0], st.tw[0], st.ta[0]}, 3);
            double nenv = einsum_flops(&r, ENV_N, 3, (tf_tensor[]){st.tn0, st.ta[0], st.ta[0]}, 2);
            double fin = einsum_flops(&r, FINAL_H, 5,
                                      (tf_tensor[]){st.tl0, st.ta[0], st.tw[0], st.ta[0], st.tr}, 3);
            double nfin = einsum_flops(&r, FINAL_N, 4, (tf_tensor[]){st.tn0, st.ta[0], st.ta[0], st.trn}, 2);
            flops = (n->sites - 1) * (env + nenv) + fin + nfin;
        }
        demo_burst(&r, queue_sweep, &st, "tf_with_session (sweep)");
        double complex energy, norm;
        demo_download(&r, st.energy, &buf, &cap);
        memcpy(&energy, buf, sizeof energy);
        demo_download(&r, st.norm, &buf, &cap);
        memcpy(&norm, buf, sizeof norm);
        free_inputs(&r, &st);

        double t0 = demo_now();
        double complex ref_energy, ref_norm;
        reference_sweep(&st, &wk, &ref_energy, &ref_norm);
        r.inproc_s += demo_now() - t0;

        worst = fmax(worst, fmax(rel_diff(energy, ref_energy), rel_diff(norm, ref_norm)));
        worst_imag = fmax(worst_imag, fmax(fabs(cimag(energy)) / fmax(cabs(energy), 1e-300),
                                           fabs(cimag(norm)) / fmax(cabs(norm), 1e-300)));
        last_energy = energy;
        last_norm = norm;
    }
    free(buf);
    int ok = worst <= TOLERANCE && worst_imag <= TOLERANCE;
    int status = demo_finish(&r, ok, (double)sweeps * contractions_per_sweep(n), "contractions",
                             flops * sweeps,
                             "%d sweeps x %d sites, chi %d, phys %d, MPO bond %d, c128: "
                             "<psi|H|psi>/<psi|psi> = %.4g (last sweep); vs zgemm here: max rel err %.1e, "
                             "imag/abs %.1e (tol %.0e)",
                             sweeps, n->sites, n->chi, n->phys, n->mpo,
                             creal(last_energy) / creal(last_norm), worst, worst_imag, TOLERANCE);
    for (int i = 0; i < n->sites; i++) {
        free(st.a[i]);
        free(st.w[i]);
    }
    free(st.a);
    free(st.w);
    free(st.ta);
    free(st.tw);
    free(st.l0);
    free(st.r);
    free(st.rn);
    free(wk.t1);
    free(wk.t2);
    free(wk.env);
    free(wk.env2);
    free(wk.nenv);
    free(wk.nenv2);
    return status;
}
