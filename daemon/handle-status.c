/*
 * StatusRequest: what tenferroctl status shows. Read-only, answered from the
 * loop's own bookkeeping, so it never waits on a session or on the device.
 */
#include <stdlib.h>

#include "daemon/connection.h"
#include "daemon/counters.h"
#include "daemon/handle-buffer.h"
#include "daemon/limits.h"
#include "daemon/options.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/* Caches a status reply lists at most (the backend's plan caches). */
#define MAX_CACHES 8

/*
 * The daemon-wide caches (the backend's plan caches, then the prepared
 * graphs) as CacheInfo messages into info[] and ptrs[]; returns how many.
 */
static size_t fill_caches(tfd_server *srv, tfd_cache_stats *stats, Tenferro__CacheInfo *info,
                          Tenferro__CacheInfo **ptrs) {
    tfd_backend *be = &srv->backend;
    int n = be->vt->caches ? be->vt->caches(be, stats, MAX_CACHES - 1) : 0;
    if (n < 0) n = 0;
    if (n > MAX_CACHES - 1) n = MAX_CACHES - 1;
    tfd_prepared_cache_stats(&srv->prepared, &stats[n++]);
    for (int i = 0; i < n; i++) {
        tenferro__cache_info__init(&info[i]);
        info[i].name = (char *)stats[i].name;
        info[i].entries = stats[i].entries;
        info[i].capacity = stats[i].capacity;
        info[i].hits = stats[i].hits;
        info[i].misses = stats[i].misses;
        info[i].evictions = stats[i].evictions;
        info[i].bytes = stats[i].bytes;
        ptrs[i] = &info[i];
    }
    return (size_t)n;
}

void tfd_handle_status(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    uint64_t seq = frame->seq;
    tf__frame_free(frame);
    uint64_t now = tfd_now_ms();

    size_t n = (size_t)srv->n_conns;
    Tenferro__ClientInfo *infos = calloc(n ? n : 1, sizeof *infos);
    Tenferro__ClientInfo **info_ptrs = calloc(n ? n : 1, sizeof *info_ptrs);
    uint64_t *queued_ids = calloc(srv->res.n_queued + 1, sizeof *queued_ids);
#define COUNT_(name) +1
    enum { n_counters = 0 TFD_COUNTER_LIST(COUNT_) + 6 };
#undef COUNT_
    Tenferro__Counter counters[n_counters];
    Tenferro__Counter *counter_ptrs[n_counters];
    if (!infos || !info_ptrs || !queued_ids) {
        free(infos);
        free(info_ptrs);
        free(queued_ids);
        tfd_conn_reply(c, seq, TF_ERR_NO_MEMORY, "out of host memory building the status");
        return;
    }
    size_t k = 0;
    for (tfd_conn *o = srv->conns; o; o = o->next) {
        if (!o->hello_done || o->closing) continue;
        Tenferro__ClientInfo *ci = &infos[k];
        tenferro__client_info__init(ci);
        ci->client_id = o->client_id;
        ci->pid = o->pid;
        ci->uid = o->uid;
        ci->gid = o->gid;
        ci->name = o->name;
        ci->live_tensors = o->tensors.count;
        ci->live_bytes = o->tensors.bytes;
        ci->session_id = o->session_id;
        ci->scoped_active = o->scoped_active;
        ci->queued_items = o->stream ? tfd_stream_queued(o->stream) : 0;
        ci->priority = o->priority;
        ci->pinned_bytes = o->buffers.bytes;
        ci->receive_buffer_bytes = o->rcap;
        ci->reply_bytes = o->mem.reply_bytes;
        ci->decode_bytes = o->mem.decode_bytes;
        ci->charged_uid = (uint32_t)tfd_limits_charged_uid(o);
        ci->takes = o->take ? 1 : 0;
        ci->pinned_buffers = o->buffers.count;
        ci->mappings = tfd_conn_mappings(o);
        ci->descriptors = tfd_conn_descriptors(o);
        ci->prepared = o->prepared.count;
        ci->queued_requests = o->queued ? 1 : 0;
        info_ptrs[k++] = ci;
    }

    Tenferro__ReservationInfo res = TENFERRO__RESERVATION_INFO__INIT;
    Tenferro__ReservationInfo *res_ptr = &res;
    res.domain = srv->res.domain;
    tfd_conn *holder = srv->res.holder;
    if (holder) {
        res.holder_client_id = holder->client_id;
        res.holder_pid = holder->pid;
        res.session_id = srv->res.session_id;
        res.age_ms = now - srv->res.since_ms;
    }
    size_t q = 0;
    for (tfd_waiter *w = srv->res.head; w; w = w->next) queued_ids[q++] = ((tfd_conn *)w->owner)->client_id;
    res.n_queued_client_ids = q;
    res.queued_client_ids = queued_ids;

    size_t m = 0;
#define COUNTER_(field)                                          \
    tenferro__counter__init(&counters[m]);                       \
    counters[m].name = #field;                                   \
    counters[m].value = srv->counters.field;                     \
    counter_ptrs[m] = &counters[m];                              \
    m++;
    TFD_COUNTER_LIST(COUNTER_)
#undef COUNTER_
    tfd_executor_counters *xc = tfd_executor_counters_of(srv->ex);
    /* Connections not yet past their Hello are no client row: the gauge counts them. */
    uint64_t before_hello = 0;
    for (const tfd_conn *o = srv->conns; o; o = o->next) before_hello += !o->hello_done && !o->closing;
    const char *names[6] = {"ops_executed",      "items_executed",          "execution_errors",
                            "device_bytes_live", "device_allocations_live", "handshakes_live"};
    uint64_t values[6] = {atomic_load(&xc->ops_executed), atomic_load(&xc->items_executed),
                          atomic_load(&xc->execution_errors), atomic_load(&xc->device_bytes_live),
                          atomic_load(&xc->device_allocations_live), before_hello};
    for (int i = 0; i < 6; i++, m++) {
        tenferro__counter__init(&counters[m]);
        counters[m].name = (char *)names[i];
        counters[m].value = values[i];
        counter_ptrs[m] = &counters[m];
    }

    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.message = "";
    Tenferro__StatusReply reply = TENFERRO__STATUS_REPLY__INIT;
    reply.result = &result;
    reply.device = srv->backend.description;
    reply.daemon_version = TFD_VERSION_STRING;
    reply.uptime_ms = now - srv->start_ms;
    reply.n_clients = k;
    reply.clients = info_ptrs;
    reply.n_reservations = 1;
    reply.reservations = &res_ptr;
    reply.n_counters = m;
    reply.counters = counter_ptrs;
    reply.policy = srv->opt.policy == TFD_POLICY_WAIT ? "wait" : "reject";
    reply.device_error = srv->device_error;
    Tenferro__Quota quotas[2] = {TENFERRO__QUOTA__INIT, TENFERRO__QUOTA__INIT};
    const tfd_quota *src[2] = {&srv->opt.client_quota, &srv->opt.uid_quota};
    for (int i = 0; i < 2; i++) {
        quotas[i].device_bytes = src[i]->device_bytes;
        quotas[i].pinned_bytes = src[i]->pinned_bytes;
        quotas[i].live_tensors = src[i]->live_tensors;
        quotas[i].queued_ops = src[i]->queued_ops;
    }
    reply.client_quota = &quotas[0];
    reply.uid_quota = &quotas[1];
    reply.draining = srv->draining;
    reply.max_clients = (uint32_t)srv->opt.max_clients;
    tfd_cache_stats cache_stats[MAX_CACHES];
    Tenferro__CacheInfo cache_infos[MAX_CACHES], *cache_ptrs[MAX_CACHES];
    reply.n_caches = fill_caches(srv, cache_stats, cache_infos, cache_ptrs);
    reply.caches = cache_ptrs;

    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_STATUS_REPLY;
    out.status_reply = &reply;
    tfd_conn_send(c, &out);
    free(infos);
    free(info_ptrs);
    free(queued_ids);
}
