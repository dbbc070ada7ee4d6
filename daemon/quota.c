/*
 * Quotas (see quota.h): usage of a connection, or of all connections of one
 * uid, held against the configured limits, one resource at a time, with a
 * refusal that says which limit, how much is used and how much was asked.
 */
#include <stdio.h>
#include <string.h>

#include "daemon/quota.h"

/* The resources a quota limits, in the order of the arrays below. */
enum { R_DEVICE_BYTES, R_PINNED_BYTES, R_LIVE_TENSORS, R_QUEUED_OPS, N_RESOURCES };

static const char *const resource_names[N_RESOURCES] = {"device_bytes", "pinned_bytes",
                                                        "live_tensors", "queued_ops"};
/* What a refused client can do about each resource, besides asking for a higher limit. */
static const char *const remedies[N_RESOURCES] = {
    "free tensors", "free pinned buffers", "free tensors",
    "synchronize so queued work can finish, or submit smaller batches"};

/* 1 when q sets any limit. */
static int any_limit(const tfd_quota *q) {
    return (q->device_bytes | q->pinned_bytes | q->live_tensors | q->queued_ops) != 0;
}

/* Adds what connection c holds to used[]. */
static void add_usage(const tfd_conn *c, uint64_t used[N_RESOURCES]) {
    used[R_DEVICE_BYTES] += c->tensors.bytes + c->prepared_bytes;
    used[R_PINNED_BYTES] += c->buffers.bytes;
    used[R_LIVE_TENSORS] += c->tensors.count;
    used[R_QUEUED_OPS] += c->stream ? tfd_stream_queued(c->stream) : 0;
}

/*
 * Holds a request against quota q (of `who`, configured in [section]): on the
 * first resource whose limit it would exceed, writes the refusal into msg and
 * returns 1. Only what the request asks for is checked: a request that adds
 * nothing of a resource is not refused for it, even above a limit lowered by
 * a reload. `over` qualifies the usage (" over 2 connections", or "").
 */
static int refuses(const tfd_quota *q, const char *who, const char *section, const char *over,
                   const uint64_t used[N_RESOURCES], const uint64_t ask[N_RESOURCES], char *msg,
                   size_t len) {
    const uint64_t limit[N_RESOURCES] = {q->device_bytes, q->pinned_bytes, q->live_tensors,
                                         q->queued_ops};
    for (int r = 0; r < N_RESOURCES; r++) {
        if (!limit[r] || !ask[r] || (ask[r] <= limit[r] && used[r] <= limit[r] - ask[r])) continue;
        snprintf(msg, len,
                 "%s quota: %s %llu would be exceeded (using %llu%s, asking %llu); raise [%s] %s "
                 "or %s",
                 who, resource_names[r], (unsigned long long)limit[r], (unsigned long long)used[r],
                 over, (unsigned long long)ask[r], section, resource_names[r], remedies[r]);
        return 1;
    }
    return 0;
}

/*
 * What the other connections of a uid use, as last summed: a batch is checked
 * once per operation, and while one connection's batch is validated nobody
 * else's request is handled, so the sum over the others is taken once per
 * batch rather than once per operation. Whatever lets another request in
 * (a frame read, a ring or mailbox request, a slice's yield, a connection
 * closing) moves the epoch and the sum is taken again. Meanwhile the others'
 * usage can only fall (their queued work executes), so the cache errs on the
 * side of the limit. Loop thread only.
 */
static struct {
    const tfd_conn *conn;
    uint64_t epoch;
    uint64_t others[N_RESOURCES];
    int n;
} uid_cache;

/* Moves whenever a request of any connection may have been handled since the last look. */
static uint64_t request_epoch(const tfd_server *srv) {
    const tfd_counters *k = &srv->counters;
    return k->frames_received + k->ring_requests + k->mailbox_requests + k->loop_yields +
           k->connections_closed + k->connections_accepted;
}

/* Sums the usage of every live connection of c's uid into used[]; returns how many there are. */
static int uid_usage(const tfd_conn *c, uint64_t used[N_RESOURCES]) {
    const uint64_t epoch = request_epoch(c->srv);
    if (uid_cache.conn != c || uid_cache.epoch != epoch) {
        memset(&uid_cache, 0, sizeof uid_cache);
        uid_cache.conn = c;
        uid_cache.epoch = epoch;
        uid_cache.n = 1;
        for (const tfd_conn *o = c->srv->conns; o; o = o->next) {
            if (o == c || o->uid != c->uid || o->closing) continue;
            add_usage(o, uid_cache.others);
            uid_cache.n++;
        }
    }
    for (int r = 0; r < N_RESOURCES; r++) used[r] += uid_cache.others[r];
    add_usage(c, used);
    return uid_cache.n;
}

/* Holds what a request asks for (ask[], per resource) against the client and the uid quota. */
static tf_status check(tfd_conn *c, const uint64_t ask[N_RESOURCES], char *msg, size_t len) {
    const tfd_options *opt = &c->srv->opt;
    int per_client = any_limit(&opt->client_quota), per_uid = any_limit(&opt->uid_quota);
    if (!per_client && !per_uid) return TF_OK;
    if (per_client) {
        uint64_t used[N_RESOURCES] = {0};
        add_usage(c, used);
        if (refuses(&opt->client_quota, "client", "quota.client", "", used, ask, msg, len))
            goto refused;
    }
    if (per_uid) {
        uint64_t used[N_RESOURCES] = {0};
        int n = uid_usage(c, used);
        char who[32], over[48];
        snprintf(who, sizeof who, "uid %u", (unsigned)c->uid);
        snprintf(over, sizeof over, " over %d connection%s", n, n == 1 ? "" : "s");
        if (refuses(&opt->uid_quota, who, "quota.uid", over, used, ask, msg, len)) goto refused;
    }
    return TF_OK;
refused:
    c->srv->counters.quota_refusals++;
    return TF_ERR_QUOTA;
}

tf_status tfd_quota_check(tfd_conn *c, uint64_t more_bytes, uint64_t more_tensors,
                          uint64_t more_queued, char *msg, size_t len) {
    const uint64_t ask[N_RESOURCES] = {more_bytes, 0, more_tensors, more_queued};
    return check(c, ask, msg, len);
}

tf_status tfd_quota_check_pinned(tfd_conn *c, uint64_t more_pinned, char *msg, size_t len) {
    const uint64_t ask[N_RESOURCES] = {0, more_pinned, 0, 0};
    return check(c, ask, msg, len);
}
