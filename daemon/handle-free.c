/*
 * Free: releases tensors outside any batch. The device memory is freed on the
 * stream, after every item queued before it, so work still in flight keeps
 * reading valid memory. No reply: a handle that is not live is only counted,
 * and a tensor in a pending transfer is kept and logged (the client refuses
 * that first; to be rid of it, wait for the transfer or release it),
 * as is one the daemon has no memory to queue the free of (it goes with the
 * connection).
 */
#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"

void tfd_handle_free(tfd_conn *c, Tenferro__Frame *frame) {
    Tenferro__Free *fr = frame->free;
    for (size_t i = 0; i < fr->n_tensors; i++) {
        tfd_tensor *t = tfd_tensor_table_find(&c->tensors, fr->tensors[i]);
        if (t && t->in_flight) {
            tfd_log(TFD_LOG_INFO, "client %llu freed tensor %llu while a transfer uses it: kept",
                    (unsigned long long)c->client_id, (unsigned long long)fr->tensors[i]);
            continue;
        }
        if (!t) {
            tfd_log(TFD_LOG_DEBUG, "client %llu freed tensor %llu, which is not live",
                    (unsigned long long)c->client_id, (unsigned long long)fr->tensors[i]);
            continue;
        }
        if (tfd_tensor_drop(c, t) != TF_OK)
            tfd_log(TFD_LOG_ERROR,
                    "client %llu: out of memory freeing tensor %llu: kept until the connection "
                    "closes",
                    (unsigned long long)c->client_id, (unsigned long long)fr->tensors[i]);
    }
    tf__frame_free(frame);
}
