/* The frame codec shared by the daemon and the client (see frame.h). */
#include <stdlib.h>

#include "common/frame.h"

tf_status tf__frame_encode(const Tenferro__Frame *frame, uint64_t max_bytes, uint8_t **out,
                           size_t *out_len) {
    size_t body = tenferro__frame__get_packed_size(frame);
    if (body > max_bytes || body > UINT32_MAX) return TF_ERR_PROTOCOL;
    uint8_t *buf = malloc(TF__FRAME_HEADER_BYTES + body);
    if (!buf) return TF_ERR_NO_MEMORY;
    tf__frame_put_length(buf, (uint32_t)body);
    tenferro__frame__pack(frame, buf + TF__FRAME_HEADER_BYTES);
    *out = buf;
    *out_len = TF__FRAME_HEADER_BYTES + body;
    return TF_OK;
}

/*
 * protobuf-c allocates a decoded frame through these rather than its own
 * malloc, so the caller's allocations include the frame's (the failure
 * injection build wraps them, docs/testing.md), a decode that ran out of
 * memory can be told from a malformed body, and a bounded decode stops at
 * its budget. allocator_data, when set, is the decode's state.
 */
typedef struct decode_state {
    uint64_t left; /* bytes the decode may still take; UINT64_MAX unbounded */
    int out_of_memory, over_budget;
} decode_state;

static void *frame_alloc(void *data, size_t size) {
    decode_state *d = data;
    if (d && size > d->left) {
        d->over_budget = 1;
        return NULL;
    }
    void *p = malloc(size);
    if (!p && d) d->out_of_memory = 1;
    if (p && d) d->left -= size;
    return p;
}

static void frame_release(void *data, void *p) {
    (void)data;
    free(p);
}

Tenferro__Frame *tf__frame_decode(const uint8_t *body, size_t len) {
    Tenferro__Frame *frame;
    return tf__frame_decode_status(body, len, 0, &frame) == TF_OK ? frame : NULL;
}

tf_status tf__frame_decode_status(const uint8_t *body, size_t len, uint64_t budget,
                                  Tenferro__Frame **frame) {
    decode_state d = {.left = budget ? budget : UINT64_MAX};
    ProtobufCAllocator allocator = {frame_alloc, frame_release, &d};
    *frame = tenferro__frame__unpack(&allocator, len, body);
    if (*frame) return TF_OK;
    if (d.out_of_memory) return TF_ERR_NO_MEMORY;
    return d.over_budget ? TF_ERR_QUOTA : TF_ERR_PROTOCOL;
}

void tf__frame_free(Tenferro__Frame *frame) {
    ProtobufCAllocator allocator = {frame_alloc, frame_release, NULL};
    if (frame) tenferro__frame__free_unpacked(frame, &allocator);
}
