/*
 * Device-to-device copies between daemons: one tenferrod per GPU on a host
 * (tenferrod@0, tenferrod@1, ...), and a tensor moved from one daemon's
 * device to another's without a trip through this process (docs/multi-gpu.md).
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
 * Copies tensor `source` of client `from` into a new tensor of the same dtype
 * and shape owned by client `to`, on the device of `to`'s daemon, and returns
 * once the bytes are there (*out is then the new tensor's handle on `to`).
 * The two clients are connections to two daemons of this host (two GPUs, or
 * two daemons of one GPU). The copy runs after the work `from` queued before
 * it (a held session's submitted operations included) and before anything
 * `to` sends after it; `source` stays readable, and cannot be freed, written
 * or transferred until the copy is over. Both connections must belong to the
 * same uid unless both daemons allow otherwise ([peers] allow_cross_uid),
 * and both daemons must listen in one runtime directory under their
 * tenferrod-NAME.sock names (as the tenferrod@ instances do).
 * Errors: TF_ERR_PEER when the other daemon refused the copy, failed or went
 * away, or no tenferrod answered at `from`'s socket (`to`'s last error says
 * which); TF_ERR_TIMEOUT past [peers] copy_timeout_ms; TF_ERR_PERMISSION
 * across uids; TF_ERR_INVALID_ARGUMENT when `from`'s socket is not in `to`'s
 * daemon's runtime directory; TF_ERR_TOO_MANY_CLIENTS past `to`'s daemon's
 * [limits] max_takes_per_uid, or when `from`'s daemon counts the copy's
 * connection past the uid's [limits] max_clients_per_uid; TF_ERR_UNSUPPORTED
 * when the two devices cannot share memory (a GPU daemon's tensor into a CPU
 * daemon); the usual handle, busy and quota errors of either side. On any
 * error nothing is created on `to`.
 */
TF_EXTERN tf_status tf_copy_to(tf_client *from, tf_tensor source, tf_client *to, tf_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
