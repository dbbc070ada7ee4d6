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

Tenferro__Frame *tf__frame_decode(const uint8_t *body, size_t len) {
    return tenferro__frame__unpack(NULL, len, body);
}

/* What a bounded decode has allocated so far. */
typedef struct decode_budget {
    uint64_t left;
    int exceeded;
} decode_budget;

static void *budget_alloc(void *data, size_t size) {
    decode_budget *b = data;
    if (size > b->left) {
        b->exceeded = 1;
        return NULL;
    }
    b->left -= size;
    return malloc(size);
}

/* Decoded frames are freed with the default allocator later: the memory is plain malloc's. */
static void budget_free(void *data, void *ptr) {
    (void)data;
    free(ptr);
}

Tenferro__Frame *tf__frame_decode_bounded(const uint8_t *body, size_t len, uint64_t budget,
                                          int *over_budget) {
    decode_budget b = {.left = budget};
    ProtobufCAllocator a = {.alloc = budget_alloc, .free = budget_free, .allocator_data = &b};
    Tenferro__Frame *f = tenferro__frame__unpack(&a, len, body);
    *over_budget = b.exceeded;
    return f;
}

void tf__frame_free(Tenferro__Frame *frame) {
    if (frame) tenferro__frame__free_unpacked(frame, NULL);
}
