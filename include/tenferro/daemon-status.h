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
