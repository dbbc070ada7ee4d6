/*
 * Small blocks of the CPU backend kept for reuse (cpu/blocks.c): the outputs
 * of a held session's small operations are allocated on the loop thread and
 * freed on a worker, so through malloc each output costs the loop a trip
 * through malloc's bins (its cache of freed chunks is the worker's), often
 * fresh heap pages, and the worker a locked free. Freed blocks of at most
 * TFD_CPU_BLOCK_MAX bytes go onto lock-free stacks instead, one per size
 * class, which the allocating thread takes whole (as the executor's item
 * pool does). At most TFD_CPU_BLOCKS_MAX_BYTES wait there; beyond that, and
 * under AddressSanitizer (which must see every use after a free), blocks go
 * back to malloc. A few large blocks are kept as well (below). Private to
 * daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CPU_BLOCKS_H
#define TENFERRO_DAEMON_CPU_BLOCKS_H

#include <stddef.h>

/* The largest block kept, and the granularity of the classes. */
#define TFD_CPU_BLOCK_MAX ((size_t)4096)
#define TFD_CPU_BLOCK_STEP ((size_t)64)
/* Bytes the stacks hold at most in all. */
#define TFD_CPU_BLOCKS_MAX_BYTES ((size_t)64 << 20)

/*
 * A kept block of `rounded` bytes (a multiple of TFD_CPU_BLOCK_STEP, at most
 * TFD_CPU_BLOCK_MAX), or NULL when none is kept: the caller then mallocs.
 */
void *tfd_cpu_block_take(size_t rounded);

/*
 * Keeps block p (from malloc or aligned_alloc) for reuse, in the class its
 * usable size fills: returns 1, or 0 when it is not kept and the caller must
 * free it. Any thread.
 */
int tfd_cpu_block_give(void *p);

/*
 * Large blocks, from TFD_CPU_LARGE_MIN to TFD_CPU_LARGE_MAX bytes, are kept
 * too, a few of them (TFD_CPU_LARGE_SLOTS, TFD_CPU_LARGE_MAX_BYTES in all, the
 * least recently freed let go first): each fresh allocation of megabytes is
 * pages the kernel maps and zeroes at their first touch, milliseconds per
 * tensor, where a held session freeing its results and making the same
 * sizes again would otherwise pay that at every operation.
 */
#define TFD_CPU_LARGE_MIN ((size_t)1 << 20)
#define TFD_CPU_LARGE_MAX ((size_t)32 << 20)
#define TFD_CPU_LARGE_SLOTS 8
#define TFD_CPU_LARGE_MAX_BYTES ((size_t)64 << 20)

/*
 * A kept large block of at least `rounded` bytes and at most an eighth more,
 * or NULL: the caller then allocates. Any thread.
 */
void *tfd_cpu_large_take(size_t rounded);

/* Keeps large block p (from aligned_alloc) for reuse: 1, or 0 when the caller must free it. */
int tfd_cpu_large_give(void *p);

/* Frees every block the stacks, the calling thread and the large slots hold (trim, close). */
void tfd_cpu_blocks_drain(void);

#endif
