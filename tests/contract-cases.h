/*
 * Contraction cases for the tests of OP_CONTRACT (unit: test-cpu-contract.c,
 * test-cuda-contract.c, test-contract-plan.c; integration:
 * test-contract-raw.c): descriptors written as "ij,jk->ik" (letters only,
 * one letter per axis, a letter repeated in one input for a diagonal),
 * random contractions within a bounded amount of reference work, and an
 * independent reference that walks every assignment of every label in long
 * double complex arithmetic and also sums the magnitudes of the terms, so a
 * rounding bound can be set per element. Everything is static inline: each
 * test uses what it needs.
 */
#ifndef TENFERRO_TESTS_CONTRACT_CASES_H
#define TENFERRO_TESTS_CONTRACT_CASES_H

#include <complex.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/ops.h"

typedef long double complex cc_lcx;

/* One contraction to run: its descriptor, its inputs' metadata and how to name it. */
typedef struct cc_case {
    tf__contraction c;
    tf__meta in[2];
    tf__meta out;
    char text[160];
} cc_case;

/* The label of a letter: spread over 0..63 so high labels are exercised too. */
static inline uint8_t cc_label_of(char ch) { return (uint8_t)((ch - 'a') * 2 + 11); }

static inline char cc_letter_of(uint8_t label) {
    return label >= 11 && (label - 11) % 2 == 0 && (label - 11) / 2 < 26 ? (char)('a' + (label - 11) / 2)
                                                                           : '?';
}

/* Writes "ij[3,4],jk[4,5]->ik f64 conj(a)" for messages. */
static inline void cc_describe(cc_case *k) {
    size_t n = 0;
    const size_t cap = sizeof k->text;
    for (int i = 0; i < k->c.n_inputs && n < cap; i++) {
        if (i) n += (size_t)snprintf(k->text + n, cap - n, ",");
        for (int ax = 0; ax < k->c.rank[i] && n < cap; ax++)
            n += (size_t)snprintf(k->text + n, cap - n, "%c", cc_letter_of(k->c.labels[i][ax]));
        if (n < cap) n += (size_t)snprintf(k->text + n, cap - n, "[");
        for (int ax = 0; ax < k->in[i].rank && n < cap; ax++)
            n += (size_t)snprintf(k->text + n, cap - n, "%s%lld", ax ? "," : "",
                                  (long long)k->in[i].shape[ax]);
        if (n < cap) n += (size_t)snprintf(k->text + n, cap - n, "]");
    }
    if (n < cap) n += (size_t)snprintf(k->text + n, cap - n, "->");
    for (int j = 0; j < k->c.out_rank && n < cap; j++)
        n += (size_t)snprintf(k->text + n, cap - n, "%c", cc_letter_of(k->c.out[j]));
    if (n < cap)
        n += (size_t)snprintf(k->text + n, cap - n, " %s%s%s", tf_dtype_name(k->in[0].dtype),
                              k->c.conj[0] ? " conj(a)" : "", k->c.conj[1] ? " conj(b)" : "");
}

/*
 * Builds a case from "ij,jk->ik" with size[letter - 'a'] per label, and
 * runs the shape rules on it; returns their status (TF_OK for a valid case).
 */
static inline tf_status cc_from_spec(const char *spec, const int64_t size[26], tf_dtype dt,
                                     int conj_a, int conj_b, cc_case *k) {
    memset(k, 0, sizeof *k);
    int i = 0;
    const char *p = spec;
    for (; *p && !(p[0] == '-' && p[1] == '>'); p++) {
        if (*p == ',') {
            i++;
            continue;
        }
        k->c.labels[i][k->c.rank[i]] = cc_label_of(*p);
        k->in[i].shape[k->c.rank[i]] = size[*p - 'a'];
        k->c.rank[i]++;
    }
    k->c.n_inputs = i + 1;
    if (*p) p += 2;
    for (; *p; p++) k->c.out[k->c.out_rank++] = cc_label_of(*p);
    for (int j = 0; j < k->c.n_inputs; j++) {
        k->in[j].dtype = dt;
        k->in[j].rank = k->c.rank[j];
    }
    k->c.conj[0] = conj_a;
    k->c.conj[1] = k->c.n_inputs == 2 && conj_b;
    cc_describe(k);
    char why[256];
    return tf__infer_contract(&k->c, k->in, &k->out, why, sizeof why);
}

/* Multiplies out the sizes of every distinct label: the reference's work. */
static inline int64_t cc_work(const int64_t size[26], const int used[26]) {
    int64_t w = 1;
    for (int l = 0; l < 26; l++)
        if (used[l]) w *= size[l];
    return w;
}

/*
 * A random contraction: `binary` picks one or two inputs, ranks 0..6, labels
 * from a pool of 1..8 letters (so shared, repeated and lone labels all
 * occur), every label in the output with probability 1/2 in a random order,
 * sizes 1..7 shrunk at random until the reference's work is at most
 * max_work. rng returns uniform 64-bit numbers.
 */
static inline void cc_random(uint64_t (*rng)(void), int binary, tf_dtype dt, int64_t max_work,
                             cc_case *k) {
    char spec[64];
    int64_t size[26];
    for (;;) {
        int n = 0, used[26] = {0};
        const int pool = 1 + (int)(rng() % 8);
        char letters[8];
        for (int l = 0; l < pool; l++) letters[l] = (char)('a' + (rng() % 26));
        const int n_in = binary ? 2 : 1;
        for (int i = 0; i < n_in; i++) {
            if (i) spec[n++] = ',';
            const int rank = (int)(rng() % 7);
            for (int ax = 0; ax < rank; ax++) {
                spec[n] = letters[rng() % (uint64_t)pool];
                used[spec[n] - 'a'] = 1;
                n++;
            }
        }
        spec[n++] = '-';
        spec[n++] = '>';
        char present[26];
        int n_present = 0;
        for (int l = 0; l < 26; l++)
            if (used[l] && (rng() & 1)) present[n_present++] = (char)('a' + l);
        for (int j = n_present - 1; j > 0; j--) { /* Fisher-Yates */
            const int r = (int)(rng() % (uint64_t)(j + 1));
            char t = present[j];
            present[j] = present[r];
            present[r] = t;
        }
        if (n_present > TF_MAX_RANK) n_present = TF_MAX_RANK;
        for (int j = 0; j < n_present; j++) spec[n++] = present[j];
        spec[n] = '\0';
        for (int l = 0; l < 26; l++) size[l] = 1 + (int64_t)(rng() % 7);
        while (cc_work(size, used) > max_work) {
            const int l = (int)(rng() % 26);
            if (used[l] && size[l] > 1) size[l]--;
        }
        if (cc_from_spec(spec, size, dt, (int)(rng() & 1), (int)(rng() & 1), k) == TF_OK) return;
    }
}

/* Element i of a host buffer of dtype dt, widened. */
static inline cc_lcx cc_get(const void *p, tf_dtype dt, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return CMPLXL(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    case TF_C128: return CMPLXL(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    }
    return 0;
}

static inline void cc_set(void *p, tf_dtype dt, int64_t i, cc_lcx v) {
    switch (dt) {
    case TF_F32: ((float *)p)[i] = (float)creall(v); break;
    case TF_F64: ((double *)p)[i] = (double)creall(v); break;
    case TF_C64:
        ((float *)p)[2 * i] = (float)creall(v);
        ((float *)p)[2 * i + 1] = (float)cimagl(v);
        break;
    case TF_C128:
        ((double *)p)[2 * i] = (double)creall(v);
        ((double *)p)[2 * i + 1] = (double)cimagl(v);
        break;
    }
}

/* Terms summed into each output element: the sizes of the labels the output drops. */
static inline int64_t cc_terms(const cc_case *k) {
    uint64_t in_out = 0, seen = 0;
    int64_t terms = 1;
    for (int j = 0; j < k->c.out_rank; j++) in_out |= (uint64_t)1 << k->c.out[j];
    for (int i = 0; i < k->c.n_inputs; i++)
        for (int ax = 0; ax < k->c.rank[i]; ax++) {
            const uint64_t bit = (uint64_t)1 << k->c.labels[i][ax];
            if (!(in_out & bit) && !(seen & bit)) terms *= k->in[i].shape[ax];
            seen |= bit;
        }
    return terms;
}

/*
 * The reference: for every assignment of every label, adds (conj) a * (conj) b
 * into its output element, and |a| |b| into scale[]; out and scale hold
 * tf__meta_numel(&k->out) elements.
 */
static inline void cc_reference(const cc_case *k, const void *a, const void *b, cc_lcx *out,
                                long double *scale) {
    uint8_t labels[2 * TF_MAX_RANK];
    int64_t dims[2 * TF_MAX_RANK];
    int n = 0;
    uint64_t seen = 0;
    int64_t size_of[TF__MAX_LABELS] = {0};
    for (int i = 0; i < k->c.n_inputs; i++)
        for (int ax = 0; ax < k->c.rank[i]; ax++) {
            const uint8_t L = k->c.labels[i][ax];
            size_of[L] = k->in[i].shape[ax];
            if (seen & ((uint64_t)1 << L)) continue;
            seen |= (uint64_t)1 << L;
            labels[n] = L;
            dims[n++] = k->in[i].shape[ax];
        }
    const int64_t n_out = tf__meta_numel(&k->out);
    for (int64_t e = 0; e < n_out; e++) {
        out[e] = 0;
        scale[e] = 0;
    }
    int64_t value[TF__MAX_LABELS] = {0};
    int64_t idx[2 * TF_MAX_RANK] = {0};
    const void *src[2] = {a, b};
    for (;;) {
        for (int j = 0; j < n; j++) value[labels[j]] = idx[j];
        cc_lcx term = 1;
        long double mag = 1;
        for (int i = 0; i < k->c.n_inputs; i++) {
            int64_t off = 0;
            for (int ax = 0; ax < k->c.rank[i]; ax++)
                off = off * k->in[i].shape[ax] + value[k->c.labels[i][ax]];
            cc_lcx v = cc_get(src[i], k->in[0].dtype, off);
            if (k->c.conj[i]) v = conjl(v);
            term *= v;
            mag *= cabsl(v);
        }
        int64_t o = 0;
        for (int j = 0; j < k->c.out_rank; j++) o = o * size_of[k->c.out[j]] + value[k->c.out[j]];
        out[o] += term;
        scale[o] += mag;
        int j = n - 1;
        for (; j >= 0; j--) {
            if (++idx[j] < dims[j]) break;
            idx[j] = 0;
        }
        if (j < 0) break;
    }
}

/*
 * The rounding bound relative to the summed magnitudes: a few units of the
 * dtype's precision per summed term, enough for any summation order.
 */
static inline long double cc_tolerance(const cc_case *k) {
    const tf_dtype dt = k->in[0].dtype;
    const long double u = (dt == TF_F32 || dt == TF_C64) ? 0x1p-24L : 0x1p-53L;
    return 8.0L * (long double)(cc_terms(k) + 2) * u;
}

#endif
