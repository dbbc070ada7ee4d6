/*
 * What the daemon reports about itself (tf_daemon_status): its device,
 * limits, clients, reservations, counters and caches, the report
 * `tenferroctl status` prints. Every string and array belongs to the
 * report and lives until tf_daemon_status_free; the library allocates the
 * report, so later versions may append fields at the end of each struct
 * (docs/abi.md).
 */
#ifndef TENFERRO_DAEMON_STATUS_H
#define TENFERRO_DAEMON_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A quota: the most one client (or one uid) may hold; 0 = unlimited. */
typedef struct tf_quota_limits {
    uint64_t device_bytes, pinned_bytes, live_tensors, queued_ops;
} tf_quota_limits;

/* One connected client. */
typedef struct tf_client_info {
    uint64_t client_id;
    int32_t pid;
    uint32_t uid, gid;
    const char *name;              /* as the client named itself, made printable by the daemon */
    uint64_t live_tensors, live_bytes;
    uint64_t session_id;           /* its held session, 0 if none */
    int scoped_active;             /* inside a scoped burst */
    uint64_t queued_items;         /* work on its stream not yet executed */
    int32_t priority;              /* stream priority class (lower runs first) */
    uint64_t pinned_bytes;
    uint64_t receive_buffer_bytes; /* input buffered for its unfinished frames */
    uint32_t charged_uid;          /* the uid [limits] max_clients_per_uid counts it for: its
                                      own, or for another daemon's connection fetching a copy,
                                      the uid of the client that asked for the copy */
    uint32_t takes;                /* copies from another daemon in progress (0 or 1) */
    uint64_t reply_bytes;          /* replies queued for it and not yet read, Download replies
                                      reserved ([limits] client_reply_bytes) */
    uint64_t decode_bytes;         /* decode budget of its large frame being decoded, else 0 */
    uint64_t pinned_buffers;       /* its pinned buffers ([limits] max_buffers_per_client) */
    uint64_t mappings;             /* the daemon's mappings of its memory: buffers, completion page */
    uint64_t descriptors;          /* descriptors the daemon holds for it: socket, memfds not Mapped */
    uint64_t prepared;             /* prepared graphs it holds ([limits] max_prepared) */
    uint32_t queued_requests;      /* its requests waiting for the execution domain (0 or 1) */
} tf_client_info;

/* The execution domain's reservation. */
typedef struct tf_reservation_info {
    uint32_t domain;
    uint64_t holder_client_id;     /* 0 when free */
    int32_t holder_pid;
    uint64_t session_id;
    uint64_t age_ms;               /* how long it has been held */
    size_t n_queued_client_ids;    /* openers waiting for it, first first */
    const uint64_t *queued_client_ids;
} tf_reservation_info;

/* One daemon-wide counter (docs/operations.md lists them). */
typedef struct tf_counter_info {
    const char *name;
    uint64_t value;
} tf_counter_info;

/* One daemon-wide cache (fft_plans, contraction_plans, prepared_graphs, ...). */
typedef struct tf_cache_info {
    const char *name;
    uint64_t entries, capacity, hits, misses, evictions, bytes;
} tf_cache_info;

typedef struct tf_daemon_status {
    const char *device;            /* "cuda:0 (NVIDIA H200, ...)" */
    const char *daemon_version;
    uint64_t uptime_ms;
    const char *policy;            /* "wait" or "reject" */
    const char *device_error;      /* why the device was declared lost; "" while healthy */
    int draining;                  /* refusing new connections, exiting when the last leaves */
    uint32_t max_clients;          /* 0 = unlimited */
    tf_quota_limits client_quota, uid_quota;
    size_t n_clients;
    const tf_client_info *clients;
    size_t n_reservations;
    const tf_reservation_info *reservations;
    size_t n_counters;
    const tf_counter_info *counters;
    size_t n_caches;
    const tf_cache_info *caches;
} tf_daemon_status;

/* Asks the daemon for its report (one round trip); *out until tf_daemon_status_free. */
TF_EXTERN tf_status tf_daemon_status_get(tf_client *c, tf_daemon_status **out);

/* Frees a report (NULL is ignored). */
TF_EXTERN void tf_daemon_status_free(tf_daemon_status *s);

/* The value of counter `name` in the report, or 0 when it has none of that name. */
TF_EXTERN uint64_t tf_daemon_status_counter(const tf_daemon_status *s, const char *name);

/* The cache named `name` in the report, or NULL. */
TF_EXTERN const tf_cache_info *tf_daemon_status_cache(const tf_daemon_status *s, const char *name);

#ifdef __cplusplus
}
#endif

#endif
