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

void tf__frame_free(Tenferro__Frame *frame) {
    if (frame) tenferro__frame__free_unpacked(frame, NULL);
}
