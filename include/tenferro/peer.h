/*
 * Copies between daemons: a tensor held through one connection copied to the device of
 * another daemon, owned by a connection to that daemon (one daemon per GPU of a host).
 */
#ifndef TENFERRO_PEER_H
#define TENFERRO_PEER_H

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Copies tensor `source`, held by client `from`, into a new tensor of the same dtype and shape
 * owned by client `to`, on the device of `to`'s daemon; returns when the bytes are there.
 * *out is the new tensor's handle on `to` (free it with tf_tensor_free(to, ...)).
 */
TF_EXTERN tf_status tf_copy_to(tf_client *from, tf_tensor source, tf_client *to, tf_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
