/*
 * The frame codec: a 4-byte little-endian length, then one encoded
 * tenferro.Frame. Both the daemon and the client use it, so the rules for what
 * a well-formed frame is live in one place.
 */
#ifndef TENFERRO_COMMON_FRAME_H
#define TENFERRO_COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto/tenferro.pb-c.h"
#include "tenferro/status.h"

#define TF__FRAME_HEADER_BYTES 4
/* Default and smallest allowed maximum frame size. */
#define TF__DEFAULT_MAX_FRAME_BYTES ((uint64_t)64 << 20)
#define TF__MIN_MAX_FRAME_BYTES ((uint64_t)64 << 10)
/*
 * Bytes a data-carrying frame keeps free for its other fields: an upload
 * chunk or a download's length is at most the frame maximum less this, so
 * the frame that carries it stays within the maximum.
 */
#define TF__FRAME_HEADROOM ((uint64_t)4096)
/* Operations one Submit may carry; the client splits longer queues. */
#define TF__MAX_OPS_PER_SUBMIT 65536
/*
 * Decoded bytes a frame of `len` bytes may take: its data twice over and
 * room for a full Submit. A frame that would decode into more (millions of
 * tiny messages) is refused instead of inflating the daemon's memory.
 */
#define TF__DECODE_BUDGET(len) (2 * (uint64_t)(len) + ((uint64_t)32 << 20))

/* Reads the body length of the frame whose header starts at p. */
static inline uint32_t tf__frame_peek_length(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Writes the header for a body of `length` bytes at p. */
static inline void tf__frame_put_length(uint8_t *p, uint32_t length) {
    p[0] = (uint8_t)length;
    p[1] = (uint8_t)(length >> 8);
    p[2] = (uint8_t)(length >> 16);
    p[3] = (uint8_t)(length >> 24);
}

/*
 * Encodes a frame with its header into a new malloc'd buffer. Fails with
 * TF_ERR_PROTOCOL when the encoding would exceed max_bytes, and with
 * TF_ERR_NO_MEMORY when the buffer cannot be allocated.
 */
tf_status tf__frame_encode(const Tenferro__Frame *frame, uint64_t max_bytes, uint8_t **out,
                           size_t *out_len);

/* Decodes a frame body; NULL when it does not decode. Free with tf__frame_free. */
Tenferro__Frame *tf__frame_decode(const uint8_t *body, size_t len);

/*
 * Decodes a frame body into *frame: TF_OK; TF_ERR_PROTOCOL when the body is
 * malformed; TF_ERR_NO_MEMORY when an allocation failed (the body may be
 * fine); TF_ERR_QUOTA when its decoded messages would take more than
 * `budget` bytes (0: no bound). *frame is NULL unless TF_OK. Thread-safe:
 * the daemon decodes large frames off its loop.
 */
tf_status tf__frame_decode_status(const uint8_t *body, size_t len, uint64_t budget,
                                  Tenferro__Frame **frame);

void tf__frame_free(Tenferro__Frame *frame);

#endif
