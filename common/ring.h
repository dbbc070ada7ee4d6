/*
 * The submission ring's areas (include/tenferro/wire.h), as both sides walk
 * them: an entry's span (header and frame, padded to 8 bytes), and copies
 * into and out of an area that wraps around its end, where positions are
 * byte counts since the connection began.
 */
#ifndef TENFERRO_COMMON_RING_H
#define TENFERRO_COMMON_RING_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tenferro/wire.h"

/* The bytes an entry of a `bytes`-byte frame takes in its area. */
static inline uint64_t tf__ring_span(uint64_t bytes) {
    return (sizeof(tf_ring_entry) + bytes + 7) & ~(uint64_t)7;
}

/* Copies len bytes into position pos of a wrapping area of `area` bytes. */
static inline void tf__ring_put(uint8_t *base, uint64_t area, uint64_t pos, const void *src,
                                size_t len) {
    uint64_t at = pos % area, first = area - at < len ? area - at : len;
    memcpy(base + at, src, (size_t)first);
    if (first < len) memcpy(base, (const uint8_t *)src + first, len - (size_t)first);
}

/* Copies len bytes from position pos of a wrapping area of `area` bytes. */
static inline void tf__ring_get(void *dst, const uint8_t *base, uint64_t area, uint64_t pos,
                                size_t len) {
    uint64_t at = pos % area, first = area - at < len ? area - at : len;
    memcpy(dst, base + at, (size_t)first);
    if (first < len) memcpy((uint8_t *)dst + first, base, len - (size_t)first);
}

#endif
