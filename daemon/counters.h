/*
 * Daemon-wide counters kept by the loop thread, as one X-macro list that
 * the status reply, tenferroctl and the metrics output all walk.
 */
#ifndef TENFERRO_DAEMON_COUNTERS_H
#define TENFERRO_DAEMON_COUNTERS_H

#include <stdint.h>

/* Never attributed to a session. */
#define TFD_COUNTER_LIST(X)   \
    X(connections_accepted)   \
    X(connections_refused)    \
    X(handshake_timeouts)     \
    X(connections_closed)     \
    X(protocol_errors)        \
    X(requests_unsupported)   \
    X(frames_received)        \
    X(frames_sent)            \
    X(batches)                \
    X(loop_yields)            \
    X(ops_accepted)           \
    X(ops_rejected)           \
    X(quota_refusals)         \
    X(sessions_opened)        \
    X(sessions_closed)        \
    X(sessions_released)      \
    X(sessions_reclaimed)     \
    X(scoped_roots)           \
    X(admissions_contended)   \
    X(admissions_reentered)   \
    X(admissions_queued)      \
    X(admissions_timed_out)   \
    X(tensors_created)        \
    X(tensors_freed)          \
    X(bytes_uploaded)         \
    X(bytes_downloaded)       \
    X(clients_terminated)     \
    X(pinned_buffers_created) \
    X(pinned_buffers_live)    \
    X(pinned_bytes_live)      \
    X(transfers_accepted)     \
    X(transfers_refused)      \
    X(transfers_completed)    \
    X(transfers_failed)       \
    X(transfers_detached)     \
    X(mailbox_requests)       \
    X(pinned_buffers_huge)    \
    X(shared_seals_refused)   \
    X(limit_refusals)         \
    X(ring_requests)          \
    X(graphs_prepared)        \
    X(graphs_refused)         \
    X(graphs_freed)           \
    X(prepared_runs)          \
    X(peer_copies_out)        \
    X(peer_copies_in)         \
    X(peer_copies_failed)     \
    X(reply_stall_closes)

typedef struct tfd_counters {
#define TFD_COUNTER_FIELD_(name) uint64_t name;
    TFD_COUNTER_LIST(TFD_COUNTER_FIELD_)
#undef TFD_COUNTER_FIELD_
} tfd_counters;

#endif
