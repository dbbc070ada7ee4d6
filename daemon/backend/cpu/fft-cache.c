/*
 * The CPU backend's daemon-wide FFTW plan cache (see cpu/fft.h).
 *
 * A plan is made once per key (transform kind and sign, dtype, shape, axes,
 * alignment classes of the two arrays) through FFTW's guru64 interface, which
 * describes any set of axes of a row-major tensor, leading, trailing,
 * interleaved with batch axes or not, as transform dims and "howmany" (batch)
 * dims with their strides, so no axis is ever transposed. Every client's
 * transforms of that key then run the one plan on their own arrays with the
 * new-array execute functions, which FFTW allows from many threads at once.
 *
 * FFTW's planner (plan creation and destruction, wisdom) is not thread-safe
 * and is one per process, so every planner call holds one process-wide
 * mutex, never held by the cache's own lookups: a worker measuring a new plan
 * does not stall the hits of the others. Plans are made on scratch arrays of
 * the same sizes and alignments, because FFTW_MEASURE and FFTW_PATIENT
 * overwrite what they plan on and a client's input must never change
 * (FFTW_ESTIMATE touches nothing, and its scratch pages are never written).
 * A plan the cache lets go of while another thread holds the planner is left
 * to the cache's drain, which the next holder runs, so a trim from the event
 * loop never waits for a measurement.
 *
 * Wisdom (what measure and patient learned) is read at open from the
 * configured file and written back, both precisions in one file (the double
 * part first), after every new plan made with measure or patient and at
 * close, through a temporary file renamed into place. A file or directory
 * that is missing or not writable is noted at level info, never a failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fftw3.h>

#include "common/ops.h"
#include "daemon/backend/cpu/fft.h"
#include "daemon/log.h"

/* FFTW's planner is one per process: every planner call, of either precision, holds this. */
static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

/* Bytes of wisdom read at most (real files hold kilobytes). */
#define MAX_WISDOM_BYTES ((size_t)16 << 20)

/* A cached plan: FFTW's handle and which library made it. */
typedef struct plan_value {
    void *plan; /* fftw_plan or fftwf_plan */
    int single; /* made by fftwf_ (f32 / c64) */
} plan_value;

struct tfd_fftw_cache {
    tfd_plan_cache cache;
    unsigned planner_flags; /* FFTW_ESTIMATE, FFTW_MEASURE or FFTW_PATIENT */
    char wisdom[256];       /* the wisdom file, "" for none */
};

static int is_single(tf_dtype d) { return d == TF_F32 || d == TF_C64; }

/* Destroys a plan; the caller holds the planner. */
static void destroy_value(plan_value *p) {
    if (p->single)
        fftwf_destroy_plan(p->plan);
    else
        fftw_destroy_plan(p->plan);
    free(p);
}

/*
 * The plan cache's destroy callback: at once when the planner is free,
 * else declined, for the next holder's drain. With must set the caller is
 * that holder (tfd_plan_cache_drain runs only under the planner here).
 */
static int destroy_plan(void *value, void *arg, int must) {
    tfd_fftw_cache *fc = arg;
    if (must) {
        destroy_value(value);
        return 1;
    }
    if (pthread_mutex_trylock(&planner_lock) != 0) return 0;
    destroy_value(value);
    tfd_plan_cache_drain(&fc->cache);
    pthread_mutex_unlock(&planner_lock);
    return 1;
}

/* ---- wisdom ---- */

/* Reads the wisdom file into both planners (an absent or unreadable file is only noted). */
static void wisdom_import(const char *path) {
    if (!path[0]) return;
    FILE *f = fopen(path, "r");
    if (!f) {
        tfd_log(TFD_LOG_INFO, "fftw: no wisdom read from %s (%s); plans are made afresh", path,
                strerror(errno));
        return;
    }
    char *text = malloc(MAX_WISDOM_BYTES + 1);
    size_t n = text ? fread(text, 1, MAX_WISDOM_BYTES, f) : 0;
    fclose(f);
    if (!text) return;
    text[n] = '\0';
    /* The file holds the double planner's wisdom, then the single one's; each import reads its own. */
    const char *single = strstr(text, "fftwf_wisdom");
    while (single && single > text && *single != '(') single--;
    pthread_mutex_lock(&planner_lock);
    int got_double = fftw_import_wisdom_from_string(text);
    int got_single = single && *single == '(' ? fftwf_import_wisdom_from_string(single) : 0;
    pthread_mutex_unlock(&planner_lock);
    tfd_log(TFD_LOG_INFO, "fftw: wisdom read from %s (%zu bytes; double %s, single %s)", path, n,
            got_double ? "imported" : "none", got_single ? "imported" : "none");
    free(text);
}

/* Writes both planners' wisdom to the file through a renamed temporary; the caller holds the planner. */
static void wisdom_export(const tfd_fftw_cache *fc) {
    if (!fc->wisdom[0]) return;
    char tmp[sizeof fc->wisdom + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", fc->wisdom, (int)getpid());
    char *d = fftw_export_wisdom_to_string();
    char *s = fftwf_export_wisdom_to_string();
    FILE *f = d && s ? fopen(tmp, "w") : NULL;
    int ok = f != NULL;
    if (f) {
        ok = fputs(d, f) >= 0 && fputc('\n', f) != EOF && fputs(s, f) >= 0;
        ok = fclose(f) == 0 && ok;
        ok = ok && rename(tmp, fc->wisdom) == 0;
        if (!ok) unlink(tmp);
    }
    if (!ok)
        tfd_log(TFD_LOG_INFO, "fftw: wisdom not written to %s (%s); the next start plans afresh",
                fc->wisdom, strerror(errno));
    free(d);
    free(s);
}

/* ---- plans ---- */

void tfd_fftw_geometry_of(const tfd_fftw_key *key, tfd_fftw_geometry *g) {
    memset(g, 0, sizeof *g);
    const int last = key->axes[key->n_axes - 1];
    for (int a = 0; a < key->rank; a++)
        g->in_shape[a] = g->out_shape[a] = g->length[a] = key->shape[a];
    if (key->kind == TF__FFT_R2C) {
        g->out_shape[last] = key->shape[last] / 2 + 1;
    } else if (key->kind == TF__FFT_C2R) {
        g->out_shape[last] = key->last_length;
        g->length[last] = key->last_length;
    }
    g->in_numel = g->out_numel = 1;
    for (int a = key->rank - 1; a >= 0; a--) {
        g->in_stride[a] = g->in_numel;
        g->out_stride[a] = g->out_numel;
        g->in_numel *= g->in_shape[a];
        g->out_numel *= g->out_shape[a];
    }
}

/* Bytes of one element of the input (real for R2C) and the output (real for C2R) of key. */
static void element_sizes(const tfd_fftw_key *key, size_t *in, size_t *out) {
    const size_t real = is_single((tf_dtype)key->dtype) ? sizeof(float) : sizeof(double);
    *in = key->kind == TF__FFT_R2C ? real : 2 * real;
    *out = key->kind == TF__FFT_C2R ? real : 2 * real;
}

/*
 * Makes the plan of key on scratch arrays of its sizes and alignment
 * classes into *out; the caller holds the planner.
 */
static tf_status make_plan(const tfd_fftw_cache *fc, const tfd_fftw_key *key, plan_value **made,
                           char *msg, size_t msg_len) {
    tfd_fftw_geometry g;
    tfd_fftw_geometry_of(key, &g);
    fftw_iodim64 dims[TF_MAX_RANK], howmany[TF_MAX_RANK];
    unsigned transformed = 0;
    for (int i = 0; i < key->n_axes; i++) {
        const int a = key->axes[i];
        dims[i] = (fftw_iodim64){g.length[a], g.in_stride[a], g.out_stride[a]};
        transformed |= 1u << a;
    }
    int n_howmany = 0;
    for (int a = 0; a < key->rank; a++)
        if (!(transformed & (1u << a)))
            howmany[n_howmany++] = (fftw_iodim64){g.in_shape[a], g.in_stride[a], g.out_stride[a]};
    size_t in_elem, out_elem;
    element_sizes(key, &in_elem, &out_elem);
    /* 64 bytes more than needed, so each array can start at its key's alignment class. */
    char *in_base = fftw_malloc((size_t)g.in_numel * in_elem + 64);
    char *out_base = fftw_malloc((size_t)g.out_numel * out_elem + 64);
    plan_value *p = calloc(1, sizeof *p);
    if (!in_base || !out_base || !p) {
        fftw_free(in_base);
        fftw_free(out_base);
        free(p);
        snprintf(msg, msg_len, "cpu: out of host memory planning an FFT");
        return TF_ERR_NO_MEMORY;
    }
    void *in = in_base + key->align_in, *out = out_base + key->align_out;
    const int rank = key->n_axes;
    const int sign = key->inverse ? FFTW_BACKWARD : FFTW_FORWARD;
    /* C2C and R2C keep their input by default; C2R runs on a scratch copy, which it may destroy. */
    const unsigned flags = fc->planner_flags | (key->kind == TF__FFT_C2R ? FFTW_DESTROY_INPUT : 0u);
    p->single = is_single((tf_dtype)key->dtype);
    if (p->single) {
        switch (key->kind) {
        case TF__FFT_C2C:
            p->plan = fftwf_plan_guru64_dft(rank, dims, n_howmany, howmany, in, out, sign, flags);
            break;
        case TF__FFT_R2C:
            p->plan = fftwf_plan_guru64_dft_r2c(rank, dims, n_howmany, howmany, in, out, flags);
            break;
        case TF__FFT_C2R:
            p->plan = fftwf_plan_guru64_dft_c2r(rank, dims, n_howmany, howmany, in, out, flags);
            break;
        }
    } else {
        switch (key->kind) {
        case TF__FFT_C2C:
            p->plan = fftw_plan_guru64_dft(rank, dims, n_howmany, howmany, in, out, sign, flags);
            break;
        case TF__FFT_R2C:
            p->plan = fftw_plan_guru64_dft_r2c(rank, dims, n_howmany, howmany, in, out, flags);
            break;
        case TF__FFT_C2R:
            p->plan = fftw_plan_guru64_dft_c2r(rank, dims, n_howmany, howmany, in, out, flags);
            break;
        }
    }
    fftw_free(in_base);
    fftw_free(out_base);
    if (!p->plan) {
        free(p);
        snprintf(msg, msg_len, "cpu: FFTW could not plan this transform (%d axes of a rank-%d %s)",
                 key->n_axes, key->rank, tf_dtype_name((tf_dtype)key->dtype));
        return TF_ERR_UNSUPPORTED;
    }
    *made = p;
    return TF_OK;
}

tf_status tfd_fftw_cache_acquire(tfd_fftw_cache *fc, const tfd_fftw_key *key,
                                 tfd_plan_entry **entry, char *msg, size_t msg_len) {
    *entry = tfd_plan_cache_acquire(&fc->cache, key);
    if (*entry) return TF_OK;
    tf_status st = TF_OK;
    pthread_mutex_lock(&planner_lock);
    /* Another worker may have made it while this one waited for the planner. */
    *entry = tfd_plan_cache_acquire(&fc->cache, key);
    plan_value *p = NULL;
    if (!*entry && (st = make_plan(fc, key, &p, msg, msg_len)) == TF_OK) {
        if (fc->planner_flags != FFTW_ESTIMATE) wisdom_export(fc);
        /* Inserted under the planner, so no twin is planned meanwhile; an evicted plan waits for the drain. */
        *entry = tfd_plan_cache_insert(&fc->cache, key, p, 0);
        if (!*entry) {
            destroy_value(p);
            snprintf(msg, msg_len, "cpu: out of host memory caching an FFT plan");
            st = TF_ERR_NO_MEMORY;
        }
    }
    tfd_plan_cache_drain(&fc->cache);
    pthread_mutex_unlock(&planner_lock);
    return st;
}

void *tfd_fftw_entry_plan(const tfd_plan_entry *entry) {
    return ((const plan_value *)tfd_plan_entry_value(entry))->plan;
}

void tfd_fftw_cache_release(tfd_fftw_cache *fc, tfd_plan_entry *entry) {
    tfd_plan_cache_release(&fc->cache, entry);
    /* Plans a trim let go of while the planner was busy go with whoever finds it free. */
    if (tfd_plan_cache_declined(&fc->cache) > 0 && pthread_mutex_trylock(&planner_lock) == 0) {
        tfd_plan_cache_drain(&fc->cache);
        pthread_mutex_unlock(&planner_lock);
    }
}

uint64_t tfd_fftw_cache_clear(tfd_fftw_cache *fc) { return tfd_plan_cache_clear(&fc->cache); }

void tfd_fftw_cache_stats(tfd_fftw_cache *fc, tfd_cache_stats *out) {
    tfd_plan_cache_stats(&fc->cache, out);
}

tf_status tfd_fftw_cache_open(const tfd_cache_config *config, tfd_fftw_cache **out, char *msg,
                              size_t msg_len) {
    tfd_fftw_cache *fc = calloc(1, sizeof *fc);
    if (!fc || tfd_plan_cache_init(&fc->cache, "fftw_plans", sizeof(tfd_fftw_key),
                                   config->fft_plans, 0, destroy_plan, fc) != 0) {
        free(fc);
        snprintf(msg, msg_len, "cpu: out of host memory making the FFTW plan cache");
        return TF_ERR_NO_MEMORY;
    }
    switch (config->fftw_planner) {
    case TFD_FFTW_MEASURE: fc->planner_flags = FFTW_MEASURE; break;
    case TFD_FFTW_PATIENT: fc->planner_flags = FFTW_PATIENT; break;
    default: fc->planner_flags = FFTW_ESTIMATE; break;
    }
    snprintf(fc->wisdom, sizeof fc->wisdom, "%s", config->fftw_wisdom);
    wisdom_import(fc->wisdom);
    *out = fc;
    return TF_OK;
}

void tfd_fftw_cache_close(tfd_fftw_cache *fc) {
    if (!fc) return;
    pthread_mutex_lock(&planner_lock);
    tfd_plan_cache_destroy(&fc->cache);
    if (fc->planner_flags != FFTW_ESTIMATE) wisdom_export(fc);
    pthread_mutex_unlock(&planner_lock);
    free(fc);
}
