/*
 * The daemon's report through the library (include/tenferro/daemon-status.h):
 * one StatusRequest, and the StatusReply copied into a report the caller owns,
 * so nobody outside the library decodes the wire form (tenferroctl included).
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

/* A report and everything it points to, freed together. */
typedef struct report {
    tf_daemon_status pub; /* first: the caller's pointer is this */
    char **strings;       /* every copied string */
    size_t n_strings, cap_strings;
    int failed;
} report;

/* A copy of s owned by the report ("" for NULL); NULL once out of memory. */
static const char *keep(report *r, const char *s) {
    if (r->failed) return "";
    if (r->n_strings == r->cap_strings) {
        size_t cap = r->cap_strings ? r->cap_strings * 2 : 32;
        char **p = realloc(r->strings, cap * sizeof *p);
        if (!p) {
            r->failed = 1;
            return "";
        }
        r->strings = p;
        r->cap_strings = cap;
    }
    char *copy = strdup(s ? s : "");
    if (!copy) {
        r->failed = 1;
        return "";
    }
    r->strings[r->n_strings++] = copy;
    return copy;
}

static tf_quota_limits quota_of(const Tenferro__Quota *q) {
    tf_quota_limits l = {0, 0, 0, 0};
    if (q) {
        l.device_bytes = q->device_bytes;
        l.pinned_bytes = q->pinned_bytes;
        l.live_tensors = q->live_tensors;
        l.queued_ops = q->queued_ops;
    }
    return l;
}

/* An array of n elements of size `size` (an empty report gets NULL); marks failure. */
static void *array_of(report *r, size_t n, size_t size) {
    if (n == 0 || r->failed) return NULL;
    void *p = calloc(n, size);
    if (!p) r->failed = 1;
    return p;
}

/* Copies the clients of a reply. */
static void copy_clients(report *r, const Tenferro__StatusReply *s) {
    tf_client_info *out = array_of(r, s->n_clients, sizeof *out);
    if (!out) return;
    for (size_t i = 0; i < s->n_clients; i++) {
        const Tenferro__ClientInfo *ci = s->clients[i];
        out[i] = (tf_client_info){
            .client_id = ci->client_id,
            .pid = ci->pid,
            .uid = ci->uid,
            .gid = ci->gid,
            .name = keep(r, ci->name),
            .live_tensors = ci->live_tensors,
            .live_bytes = ci->live_bytes,
            .session_id = ci->session_id,
            .scoped_active = ci->scoped_active,
            .queued_items = ci->queued_items,
            .priority = ci->priority,
            .pinned_bytes = ci->pinned_bytes,
            .receive_buffer_bytes = ci->receive_buffer_bytes,
            .charged_uid = ci->charged_uid,
            .takes = ci->takes,
            .reply_bytes = ci->reply_bytes,
            .decode_bytes = ci->decode_bytes,
            .pinned_buffers = ci->pinned_buffers,
            .mappings = ci->mappings,
            .descriptors = ci->descriptors,
            .prepared = ci->prepared,
            .queued_requests = ci->queued_requests,
        };
    }
    r->pub.clients = out;
    r->pub.n_clients = s->n_clients;
}

/* Copies the reservations of a reply, with their queues. */
static void copy_reservations(report *r, const Tenferro__StatusReply *s) {
    tf_reservation_info *out = array_of(r, s->n_reservations, sizeof *out);
    if (!out) return;
    r->pub.reservations = out;
    r->pub.n_reservations = s->n_reservations;
    for (size_t i = 0; i < s->n_reservations; i++) {
        const Tenferro__ReservationInfo *ri = s->reservations[i];
        uint64_t *queued = array_of(r, ri->n_queued_client_ids, sizeof *queued);
        if (queued) memcpy(queued, ri->queued_client_ids, ri->n_queued_client_ids * sizeof *queued);
        out[i] = (tf_reservation_info){
            .domain = ri->domain,
            .holder_client_id = ri->holder_client_id,
            .holder_pid = ri->holder_pid,
            .session_id = ri->session_id,
            .age_ms = ri->age_ms,
            .n_queued_client_ids = queued ? ri->n_queued_client_ids : 0,
            .queued_client_ids = queued,
        };
    }
}

/* Copies the counters and caches of a reply. */
static void copy_counters_caches(report *r, const Tenferro__StatusReply *s) {
    tf_counter_info *k = array_of(r, s->n_counters, sizeof *k);
    for (size_t i = 0; k && i < s->n_counters; i++)
        k[i] = (tf_counter_info){keep(r, s->counters[i]->name), s->counters[i]->value};
    r->pub.counters = k;
    r->pub.n_counters = k ? s->n_counters : 0;
    tf_cache_info *c = array_of(r, s->n_caches, sizeof *c);
    for (size_t i = 0; c && i < s->n_caches; i++) {
        const Tenferro__CacheInfo *ci = s->caches[i];
        c[i] = (tf_cache_info){keep(r, ci->name), ci->entries,  ci->capacity, ci->hits,
                               ci->misses,        ci->evictions, ci->bytes};
    }
    r->pub.caches = c;
    r->pub.n_caches = c ? s->n_caches : 0;
}

tf_status tf_daemon_status_get(tf_client *c, tf_daemon_status **out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    req.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    req.status_request = &body;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    if (st != TF_OK) return st;
    if (reply->body_case == TENFERRO__FRAME__BODY_RESULT) {
        st = tf__result_status(c, reply->result);
        tf__frame_free(reply);
        return st == TF_OK ? tf__fail(c, TF_ERR_PROTOCOL, "status answered without a report") : st;
    }
    if (reply->body_case != TENFERRO__FRAME__BODY_STATUS_REPLY) {
        tf__frame_free(reply);
        return tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to StatusRequest");
    }
    const Tenferro__StatusReply *s = reply->status_reply;
    report *r = calloc(1, sizeof *r);
    if (!r) {
        tf__frame_free(reply);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for the daemon's report");
    }
    r->pub.device = keep(r, s->device);
    r->pub.daemon_version = keep(r, s->daemon_version);
    r->pub.uptime_ms = s->uptime_ms;
    r->pub.policy = keep(r, s->policy);
    r->pub.device_error = keep(r, s->device_error);
    r->pub.draining = s->draining;
    r->pub.max_clients = s->max_clients;
    r->pub.client_quota = quota_of(s->client_quota);
    r->pub.uid_quota = quota_of(s->uid_quota);
    copy_clients(r, s);
    copy_reservations(r, s);
    copy_counters_caches(r, s);
    tf__frame_free(reply);
    if (r->failed) {
        tf_daemon_status_free(&r->pub);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for the daemon's report");
    }
    *out = &r->pub;
    return tf__ok(c);
}

void tf_daemon_status_free(tf_daemon_status *s) {
    if (!s) return;
    report *r = (report *)s;
    for (size_t i = 0; i < r->n_strings; i++) free(r->strings[i]);
    free(r->strings);
    for (size_t i = 0; i < s->n_reservations; i++) free((void *)s->reservations[i].queued_client_ids);
    free((void *)s->clients);
    free((void *)s->reservations);
    free((void *)s->counters);
    free((void *)s->caches);
    free(r);
}

uint64_t tf_daemon_status_counter(const tf_daemon_status *s, const char *name) {
    for (size_t i = 0; s && name && i < s->n_counters; i++)
        if (strcmp(s->counters[i].name, name) == 0) return s->counters[i].value;
    return 0;
}

const tf_cache_info *tf_daemon_status_cache(const tf_daemon_status *s, const char *name) {
    for (size_t i = 0; s && name && i < s->n_caches; i++)
        if (strcmp(s->caches[i].name, name) == 0) return &s->caches[i];
    return NULL;
}
