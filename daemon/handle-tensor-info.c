/*
 * TensorInfo: a tensor's dtype, shape and size as the daemon holds them, for
 * clients that keep no metadata of their own (docs/protocol.md). Only this
 * connection's tensors are found.
 */
#include <stdio.h>

#include "daemon/connection.h"
#include "daemon/requests.h"
#include "daemon/server.h"

void tfd_handle_tensor_info(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t seq = frame->seq, id = frame->tensor_info->tensor;
    tf__frame_free(frame);
    Tenferro__TensorInfoReply info = TENFERRO__TENSOR_INFO_REPLY__INIT;
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    char message[96] = "";
    const tfd_tensor *t = tfd_tensor_table_find(&c->tensors, id);
    int64_t shape[TF_MAX_RANK];
    if (!t) {
        result.status = TF_ERR_UNKNOWN_HANDLE;
        snprintf(message, sizeof message, "tensor %llu is not live on this connection",
                 (unsigned long long)id);
    } else {
        info.dtype = (uint32_t)t->meta.dtype;
        for (int a = 0; a < t->meta.rank; a++) shape[a] = t->meta.shape[a];
        info.n_shape = (size_t)t->meta.rank;
        info.shape = shape;
        info.bytes = t->bytes;
        info.in_transfer = t->in_flight != 0;
    }
    result.message = message;
    info.result = &result;
    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY;
    out.tensor_info_reply = &info;
    tfd_conn_send(c, &out);
}
