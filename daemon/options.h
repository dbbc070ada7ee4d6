/*
 * The daemon's configuration as the loop uses it: limits, quotas, access
 * lists, priority classes, and where the configuration came from (file and
 * flags). config.c fills it; everything else reads it.
 */
#ifndef TENFERRO_DAEMON_OPTIONS_H
#define TENFERRO_DAEMON_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/backend.h"
#include "daemon/reservation.h"

/* Limits on what one client (or all clients of one uid) may hold; 0 means unlimited. */
typedef struct tfd_quota {
    uint64_t device_bytes;
    uint64_t pinned_bytes;
    uint64_t live_tensors;
    uint64_t queued_ops; /* operations accepted and not yet executed */
} tfd_quota;

#define TFD_MAX_IDS 64

/* A user or group named in the configuration, resolved to its id. */
typedef struct tfd_principal {
    int is_group;
    uint32_t id;
} tfd_principal;

/* A stream priority class: whom it applies to and the priority (lower number = more urgent). */
typedef struct tfd_priority_rule {
    tfd_principal who;
    int priority;
} tfd_priority_rule;

/* The daemon's configuration: built from defaults, the INI file, then the command line. */
typedef struct tfd_options {
    char socket_path[108];
    unsigned socket_mode;     /* permission bits of the socket file (default 0660) */
    char socket_group[64];    /* group owning the socket, "" to leave it */
    char device[32];          /* "auto", "cpu", "cuda:N" */
    int workers;              /* executor worker threads; 0 = one per core (at most 16) */
    uint64_t max_frame_bytes;
    uint64_t max_pinned_bytes; /* pinned buffers of every client together; 0 = unlimited */
    int max_buffers;            /* pinned buffers of every client together (mappings); 0 = unlimited */
    int max_buffers_per_client; /* pinned buffers of one client; 0 = unlimited */
    int max_buffers_per_uid;    /* pinned buffers of all clients of one uid; 0 = unlimited */
    int max_prepared_per_uid;   /* prepared graphs of all clients of one uid; 0 = unlimited */
    tfd_policy policy;
    uint64_t wait_deadline_ms; /* how long a queued opener waits under the wait policy */
    int max_clients;          /* clients past their Hello, all uids together */
    int max_clients_per_uid;  /* clients past their Hello of one uid (limits.c); 0 = unlimited */
    int max_handshakes_per_uid; /* connections of one uid still before their Hello */
    int max_takes_per_uid;      /* copies from other daemons in progress for one uid; 0 = unlimited */
    uint64_t hello_timeout_ms;  /* a connection that has not said Hello by then is closed */
    uint64_t uid_receive_bytes; /* unfinished input buffered for one uid, and its decodes' budgets; 0 = unlimited */
    uint64_t loop_slice_us;     /* how long one connection's input may hold the loop at a time */
    uint64_t client_reply_bytes; /* replies queued for one connection before its input waits (memory-limits.c) */
    uint64_t uid_reply_bytes;    /* the same for all connections of one uid; 0 = unlimited */
    uint64_t reply_stall_ms;     /* a waiting connection whose replies do not move this long is closed; 0 = never */
    int log_level;
    int busy_poll_us;         /* polling after activity before sleeping; -1 = by backend */
    int ring_spin_us;         /* the loop polls submission rings this long after a ring reply; 0 = off */
    int idle_poll_max_us;     /* the loop polls across request gaps up to this long; -1 = by backend */
    uint64_t contraction_plans; /* [caches]: contraction plans kept (LRU); 0 = unbounded */
    uint64_t prepared_graphs;   /* [caches]: prepared-graph instances kept (LRU); 0 = unbounded */
    int max_graph_nodes;        /* [limits]: nodes one prepared graph may have */
    int max_prepared;           /* [limits]: prepared graphs one connection may hold; 0 = unlimited */
    tfd_quota client_quota;   /* per connection */
    tfd_quota uid_quota;      /* summed over the connections of one uid */
    tfd_principal allowed[TFD_MAX_IDS]; /* who may connect; none listed = everyone */
    int n_allowed;
    tfd_principal admins[TFD_MAX_IDS];  /* who may use admin requests, besides root */
    int n_admins;
    tfd_priority_rule priorities[TFD_MAX_IDS]; /* first match wins; default priority 0 */
    int n_priorities;
    int test_fault_injection; /* [testing] fault_injection: serve OP_TEST_FAULT (tests only) */
    /* [peers]: device-to-device copies between daemons (docs/multi-gpu.md). */
    int peers_allow_cross_uid;   /* a copy may go between clients of two uids */
    uint64_t peers_copy_timeout_ms; /* how long a take waits for the other daemon */
    tfd_cache_config caches; /* [caches]: plan caches of the backend (restart to change) */
} tfd_options;

/* A setting given on the command line, re-applied over the file at every reload. */
typedef struct tfd_flag {
    const char *section;
    const char *key;
    const char *value;
} tfd_flag;

#define TFD_MAX_FLAGS 64

/* Where the configuration comes from: the file (if any) and the flags that override it. */
typedef struct tfd_startup {
    char config_path[256]; /* "" when no file is read */
    tfd_flag flags[TFD_MAX_FLAGS];
    int n_flags;
} tfd_startup;

/* Builds options from defaults, the file, then the flags; -1 with the reason in err. */
int tfd_startup_options(const tfd_startup *startup, tfd_options *opt, char *err, size_t err_len);

#endif
