/*
 * The CPU backend: device life cycle, memory and completion for host memory.
 *
 * "Device memory" is ordinary 64-byte aligned host memory, so copies are
 * memcpy and every kernel runs synchronously in the executor worker that
 * calls it. Because work is complete when a call returns, events carry no
 * state (event_record yields NULL). The kernels themselves live in the
 * cpu-*.c files, one family per file; this file only ties them into the
 * vtable the executor sees, and makes (at open) and ends (at close) the
 * backend's one piece of state, the daemon-wide FFTW plan cache.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "daemon/backend/contract-cache.h"
#include "daemon/backend/cpu/blocks.h"
#include "daemon/backend/cpu/fft.h"
#include "daemon/backend/cpu/kernels.h"
#include "daemon/backend/cpu/peer.h"

/* Alignment and granularity of allocations: one cache line, enough for any SIMD load. */
#define CPU_ALIGN ((size_t)64)

/*
 * Bytes of physical memory, read at open. A larger allocation could never be
 * backed: it is refused typed rather than left to overcommit (and the OOM
 * killer) or to a sanitizer's allocation limit, which would abort the daemon.
 */
static size_t physical_bytes = SIZE_MAX;

/*
 * The cpu device's memory: tensors of all clients together may hold half the
 * physical memory (pinned buffers have the other half, [daemon]
 * max_pinned_bytes). Past it an allocation is TF_ERR_NO_MEMORY for the client
 * that asked, where the kernel's overcommit would let the OOM killer end the
 * daemon and every client with it.
 */
static _Atomic size_t live_bytes;

/*
 * A logical stream: CPU work needs no queue, but the executor expects a
 * distinct handle. It keeps the workspace of the kernels run on it
 * (tfd_cpu_scratch_take): one worker serves a stream at a time, and `busy`
 * sends a second taker, should there ever be one, to an allocation of its own.
 */
typedef struct cpu_stream {
    tfd_backend *be;
    void *scratch;
    size_t scratch_bytes;
    atomic_int busy;
} cpu_stream;

/* Extracts "0.3.21" from "OpenBLAS 0.3.21 NO_LAPACKE ..." so the description stays short. */
static void openblas_version(char *buf, size_t len) {
    const char *config = openblas_get_config();
    const char *prefix = "OpenBLAS ";
    if (config == NULL || strncmp(config, prefix, strlen(prefix)) != 0) {
        snprintf(buf, len, "unknown");
        return;
    }
    const char *v = config + strlen(prefix);
    size_t n = strcspn(v, " ");
    snprintf(buf, len, "%.*s", (int)n, v);
}

/* There is exactly one host "device", so any ordinal but 0 is a caller mistake. */
static tf_status cpu_open(tfd_backend *be, int ordinal, char *msg, size_t msg_len) {
    if (ordinal != 0) {
        snprintf(msg, msg_len, "cpu backend has only device 0, got ordinal %d", ordinal);
        return TF_ERR_INVALID_ARGUMENT;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0 && (size_t)pages <= SIZE_MAX / (size_t)page_size)
        physical_bytes = (size_t)pages * (size_t)page_size;
    char version[64];
    openblas_version(version, sizeof version);
    tfd_cpu_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL) {
        snprintf(msg, msg_len, "cpu: out of host memory opening the backend");
        return TF_ERR_NO_MEMORY;
    }
    tf_status st = tfd_fftw_cache_open(&be->caches, &impl->fftw, msg, msg_len);
    if (st != TF_OK) {
        free(impl);
        return st;
    }
    be->ordinal = 0;
    be->impl = impl;
    snprintf(be->description, sizeof be->description, "cpu (%ld core%s, OpenBLAS %s)", cores,
             cores == 1 ? "" : "s", version);
    return TF_OK;
}

/* Lets go of the FFTW plans, writing the wisdom back first (cpu/fft-cache.c). */
static void cpu_close(tfd_backend *be) {
    tfd_cpu_blocks_drain();
    tfd_cpu_impl *impl = be->impl;
    if (impl) tfd_fftw_cache_close(impl->fftw);
    free(impl);
    be->impl = NULL;
}

static tf_status cpu_stream_create(tfd_backend *be, int priority, void **stream) {
    (void)priority;
    cpu_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return TF_ERR_NO_MEMORY;
    s->be = be;
    atomic_init(&s->busy, 0);
    *stream = s;
    return TF_OK;
}

static void cpu_stream_destroy(tfd_backend *be, void *stream) {
    (void)be;
    cpu_stream *s = stream;
    if (s) free(s->scratch);
    free(stream);
}

/* Rounds up to whole cache lines so kernels may always touch full aligned vectors. */
/* Up to this size an allocation uses plain malloc. */
#define CPU_SMALL_BYTES 4096

/* What an allocation of `bytes` takes, and counts against the device's memory: whole cache lines, at least one. */
static size_t cpu_rounded(size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    return rounded < CPU_ALIGN ? CPU_ALIGN : rounded;
}

static tf_status cpu_alloc(tfd_backend *be, void *stream, size_t bytes, void **ptr) {
    (void)be;
    (void)stream;
    *ptr = NULL;
    if (bytes > physical_bytes || bytes > SIZE_MAX - (CPU_ALIGN - 1)) return TF_ERR_NO_MEMORY;
    size_t rounded = cpu_rounded(bytes);
    size_t before = atomic_fetch_add_explicit(&live_bytes, rounded, memory_order_relaxed);
    if (before + rounded > physical_bytes / 2) {
        atomic_fetch_sub_explicit(&live_bytes, rounded, memory_order_relaxed);
        return TF_ERR_NO_MEMORY;
    }
    /*
     * Small tensors take a kept block (cpu/blocks.h) or malloc's fast path
     * (16-byte aligned, enough for every dtype); aligned_alloc costs a third
     * of a small operation's daemon time. Large ones take a kept block of
     * their size when there is one, its pages already mapped.
     */
    void *p = NULL;
    if (rounded <= CPU_SMALL_BYTES) {
        p = tfd_cpu_block_take(rounded);
        if (!p) p = malloc(rounded);
    } else {
        p = tfd_cpu_large_take(rounded);
        if (!p) p = aligned_alloc(CPU_ALIGN, rounded);
    }
    if (p == NULL) {
        atomic_fetch_sub_explicit(&live_bytes, rounded, memory_order_relaxed);
        return TF_ERR_NO_MEMORY;
    }
    *ptr = p;
    return TF_OK;
}

static void cpu_free(tfd_backend *be, void *stream, void *ptr, size_t bytes) {
    (void)be;
    (void)stream;
    if (!ptr) return;
    atomic_fetch_sub_explicit(&live_bytes, cpu_rounded(bytes), memory_order_relaxed);
    if (bytes > CPU_SMALL_BYTES ? !tfd_cpu_large_give(ptr) : !tfd_cpu_block_give(ptr)) free(ptr);
}

/*
 * The stream's workspace when it is free and the request fits what a stream
 * keeps: grown (never shrunk) to the largest request so far, so the pages a
 * factorization's workspace spans are touched once, not faulted in afresh at
 * every call as a new allocation of megabytes would be. Anything else is an
 * allocation of its own, freed when given back.
 */
void *tfd_cpu_scratch_take(void *stream, size_t bytes, int *kept) {
    cpu_stream *s = stream;
    *kept = 0;
    if (bytes > SIZE_MAX - CPU_ALIGN) return NULL;
    const size_t rounded = cpu_rounded(bytes);
    if (!s || rounded > TFD_CPU_SCRATCH_KEPT || atomic_exchange(&s->busy, 1))
        return aligned_alloc(CPU_ALIGN, rounded);
    if (s->scratch_bytes < rounded) {
        free(s->scratch);
        s->scratch = aligned_alloc(CPU_ALIGN, rounded);
        s->scratch_bytes = s->scratch ? rounded : 0;
    }
    if (s->scratch) *kept = 1;
    else atomic_store(&s->busy, 0);
    return s->scratch;
}

void tfd_cpu_scratch_give(void *stream, void *p, int kept) {
    cpu_stream *s = stream;
    if (kept) atomic_store(&s->busy, 0);
    else free(p);
}

/* Both directions are host memory; skipping empty or self copies avoids memcpy's overlap rule. */
static tf_status cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return TF_OK;
    if (dst == NULL || src == NULL) return TF_ERR_INVALID_ARGUMENT;
    memcpy(dst, src, bytes);
    return TF_OK;
}

static tf_status cpu_copy_to_device(tfd_backend *be, void *stream, void *dst, const void *src,
                                    size_t bytes) {
    (void)be;
    (void)stream;
    return cpu_copy(dst, src, bytes);
}

static tf_status cpu_copy_to_host(tfd_backend *be, void *stream, void *dst, const void *src,
                                  size_t bytes) {
    (void)be;
    (void)stream;
    return cpu_copy(dst, src, bytes);
}

static tf_status cpu_fill_zero(tfd_backend *be, void *stream, void *ptr, size_t bytes) {
    (void)be;
    (void)stream;
    if (bytes == 0) return TF_OK;
    if (ptr == NULL) return TF_ERR_INVALID_ARGUMENT;
    memset(ptr, 0, bytes);
    return TF_OK;
}

/* Work already finished in the calling worker, so there is nothing left to wait for. */
static tf_status cpu_event_record(tfd_backend *be, void *stream, void **event, char *msg,
                                  size_t msg_len) {
    (void)be;
    (void)stream;
    (void)msg;
    (void)msg_len;
    *event = NULL;
    return TF_OK;
}

static tf_status cpu_event_wait(tfd_backend *be, void *event, char *msg, size_t msg_len) {
    (void)be;
    (void)event;
    (void)msg;
    (void)msg_len;
    return TF_OK;
}

static void cpu_event_destroy(tfd_backend *be, void *event) {
    (void)be;
    (void)event;
}

/* Host memory is never cached; what trim can give back is the daemon's contraction plans. */
/* The daemon-wide caches of this backend: the FFTW plans, then the contraction plans. */
static int cpu_caches(tfd_backend *be, tfd_cache_stats *out, int max) {
    int n = tfd_cpu_caches(be, out, max);
    return n + tfd_contract_plans_caches(be, out + n, max - n);
}

/* tenferroctl trim: the CPU backend keeps no device memory; its plan caches are emptied. */
static tf_status cpu_trim(tfd_backend *be, char *msg, size_t msg_len) {
    char fft[256];
    tfd_cpu_blocks_drain();
    tfd_cpu_trim(be, fft, sizeof fft);
    const uint64_t plans = tfd_contract_cache_clear(tfd_contract_plans());
    snprintf(msg, msg_len, "%s; %llu contraction plan%s dropped", fft, (unsigned long long)plans,
             plans == 1 ? "" : "s");
    return TF_OK;
}

const tfd_backend_vtable tfd_cpu_backend = {
    .name = "cpu",
    .finishes_in_call = 1,
    .open = cpu_open,
    .close = cpu_close,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_device = cpu_copy_to_device,
    .copy_to_host = cpu_copy_to_host,
    .fill_zero = cpu_fill_zero,
    .binary = tfd_cpu_binary,
    .unary = tfd_cpu_unary,
    .axpby = tfd_cpu_axpby,
    .permute = tfd_cpu_permute,
    .reduce = tfd_cpu_reduce,
    .matmul = tfd_cpu_matmul,
    .inject_fault = tfd_cpu_inject_fault,
    .contract = tfd_cpu_contract,
    .fft = tfd_cpu_fft,
    .linalg = tfd_cpu_linalg,
    .caches = cpu_caches,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .event_destroy = cpu_event_destroy,
    .health = tfd_cpu_health,
    .trim = cpu_trim,
    .peer_export = tfd_cpu_peer_export,
    .peer_import_copy = tfd_cpu_peer_import_copy,
};
