/*
 * Prepare and PreparedFree: a connection's prepared graphs (docs/prepared.md).
 *
 * Prepare checks the graph on the loop (graph-plan.c) and looks for an idle
 * instance of an equal graph in the daemon-wide cache; with one, it answers
 * at once. Otherwise the instance is built on a worker, in the connection's
 * stream order (allocating and capturing may wait for the device), and the
 * answer follows a marker after it; the connection's later requests wait
 * meanwhile, as they would behind a request answered at once. The instance's
 * device memory counts against the connection's device_bytes quota for as
 * long as the connection holds it; a refusal keeps nothing.
 *
 * PreparedFree takes the handle out of the table at once (later runs naming
 * it are refused) and gives the instance back to the cache after a marker,
 * that is, after every run queued before it has completed on the device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/connection.h"
#include "daemon/handle-prepare.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/quota.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/*
 * Lets go of an instance no run uses any more: back to the cache, idle, for
 * the next equal prepare; or, while a device_bytes quota is configured,
 * destroyed, since an idle instance's memory is charged to nobody and a
 * client could otherwise leave instance after instance of its quota's size
 * behind it.
 */
static void let_go(tfd_server *srv, tfd_plan_entry *entry) {
    if (srv->opt.client_quota.device_bytes || srv->opt.uid_quota.device_bytes)
        tfd_prepared_discard(&srv->prepared, entry);
    else
        tfd_prepared_give_back(&srv->prepared, entry);
}

/* A Prepare whose instance is built on a worker. */
typedef struct prepare_job {
    tfd_conn *conn;
    uint64_t seq, id;
    tfd_graph_plan *plan; /* handed to the build */
    tfd_plan_entry *entry;
    tf_status status;
    char message[512];
} prepare_job;

/* Answers a Prepare with a status, naming the failing node when there is one. */
static void reply_prepare(tfd_conn *c, uint64_t seq, tf_status st, int failed_node,
                          const char *message) {
    Tenferro__Result r = TENFERRO__RESULT__INIT;
    r.status = (uint32_t)st;
    r.message = (char *)message;
    if (failed_node >= 0) {
        r.has_failed_index = 1;
        r.failed_index = (uint32_t)failed_node;
    }
    tfd_conn_send_result(c, seq, &r, -1);
}

/*
 * Charges the instance to the connection and records the handle. On refusal
 * an instance taken idle from the cache goes back to it; one just built for
 * this client (fresh) is discarded, so what a refused prepare made is never
 * kept at nobody's charge.
 */
static void adopt(tfd_conn *c, uint64_t seq, uint64_t id, tfd_plan_entry *entry, int fresh) {
    tfd_server *srv = c->srv;
    const uint64_t bytes = tfd_prepared_bytes(tfd_prepared_exec_of(entry));
    char msg[512];
    tf_status st = tfd_quota_check(c, bytes, 0, 0, msg, sizeof msg);
    tfd_prepared_ref ref = {.id = id, .entry = entry, .bytes = bytes};
    if (st == TF_OK && tf__id_table_insert(&c->prepared, &ref) != 0) {
        snprintf(msg, sizeof msg, "out of host memory recording a prepared graph");
        st = TF_ERR_NO_MEMORY;
    }
    if (st != TF_OK) {
        if (fresh)
            tfd_prepared_discard(&srv->prepared, entry);
        else
            tfd_prepared_give_back(&srv->prepared, entry); /* never ran: idle at once */
        reply_prepare(c, seq, st, -1, msg);
        return;
    }
    c->prepared_bytes += bytes;
    srv->counters.graphs_prepared++;
    reply_prepare(c, seq, TF_OK, -1, "");
}

/* Worker: builds the instance, in the connection's stream order. */
static void build_on_worker(tfd_stream *s, void *arg) {
    (void)s;
    prepare_job *job = arg;
    job->status = tfd_prepared_build(&job->conn->srv->prepared, job->plan, &job->entry,
                                     job->message, sizeof job->message);
    job->plan = NULL; /* the build took it */
}

/* Loop: the build is done; the connection's input goes on after the answer. */
static void on_built(tfd_item *it) {
    prepare_job *job = it->done_arg;
    tfd_conn *c = job->conn;
    tfd_item_free(it);
    if (c->closing) {
        if (job->entry) let_go(c->srv, job->entry);
    } else if (job->status != TF_OK) {
        reply_prepare(c, job->seq, job->status, -1, job->message);
    } else {
        adopt(c, job->seq, job->id, job->entry, 1);
    }
    free(job);
    tfd_conn_resume(c);
}

/* Queues the build of an instance and its answer behind the connection's earlier work. */
static void build_later(tfd_conn *c, uint64_t seq, uint64_t id, tfd_graph_plan *plan) {
    prepare_job *job = calloc(1, sizeof *job);
    if (job) {
        job->conn = c;
        job->seq = seq;
        job->id = id;
        job->plan = plan;
    }
    tfd_conn_pause(c);
    if (!job || tfd_stream_enqueue_call(c->stream, build_on_worker, job, on_built, job) != TF_OK) {
        free(job);
        tfd_graph_plan_free(plan);
        reply_prepare(c, seq, TF_ERR_NO_MEMORY, -1, "out of host memory preparing a graph");
        tfd_conn_resume(c);
    }
}

void tfd_handle_prepare(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    const uint64_t seq = frame->seq;
    const Tenferro__Prepare *p = frame->prepare;
    const uint64_t id = p->id;
    char msg[512];
    if (id == 0 || tf__id_table_find(&c->prepared, id)) {
        tf__frame_free(frame);
        reply_prepare(c, seq, TF_ERR_INVALID_ARGUMENT, -1,
                      "a prepared graph's id must be nonzero and not in use on the connection");
        return;
    }
    if (srv->opt.max_prepared > 0 && c->prepared.count >= (size_t)srv->opt.max_prepared) {
        tf__frame_free(frame);
        snprintf(msg, sizeof msg,
                 "this client holds %zu prepared graphs, the most one client may ([limits] "
                 "max_prepared = %d): free one first",
                 c->prepared.count, srv->opt.max_prepared);
        reply_prepare(c, seq, TF_ERR_QUOTA, -1, msg);
        return;
    }
    if (srv->opt.max_prepared_per_uid > 0) {
        size_t held = 0;
        for (const tfd_conn *o = srv->conns; o; o = o->next)
            if (o->uid == c->uid) held += o->prepared.count;
        if (held >= (size_t)srv->opt.max_prepared_per_uid) {
            tf__frame_free(frame);
            srv->counters.limit_refusals++;
            snprintf(msg, sizeof msg,
                     "uid %u holds %zu prepared graphs, the most one uid may ([limits] "
                     "max_prepared_per_uid = %d): free one first",
                     (unsigned)c->uid, held, srv->opt.max_prepared_per_uid);
            reply_prepare(c, seq, TF_ERR_QUOTA, -1, msg);
            return;
        }
    }
    tfd_graph_plan *plan = NULL;
    int failed_node = -1;
    tf_status st = tfd_graph_plan_build(p, srv->opt.max_graph_nodes, srv->opt.test_fault_injection,
                                        &plan, &failed_node, msg, sizeof msg);
    tf__frame_free(frame);
    if (st != TF_OK) {
        srv->counters.graphs_refused++;
        reply_prepare(c, seq, st, failed_node, msg);
        return;
    }
    /*
     * A graph that cannot fit the device_bytes quota is refused before
     * anything is built or taken: the arena its instance is built with must
     * fit. adopt checks the instance actually made (its device graph's own
     * memory too), and discards it when that does not fit.
     */
    if (srv->opt.client_quota.device_bytes || srv->opt.uid_quota.device_bytes) {
        st = tfd_quota_check(c, tfd_prepared_arena_bytes(&srv->prepared, plan), 0, 0, msg,
                             sizeof msg);
        if (st != TF_OK) {
            tfd_graph_plan_free(plan);
            reply_prepare(c, seq, st, -1, msg);
            return;
        }
    }
    tfd_plan_entry *entry = tfd_prepared_take(&srv->prepared, plan);
    if (entry) {
        tfd_graph_plan_free(plan);
        adopt(c, seq, id, entry, 0);
        return;
    }
    build_later(c, seq, id, plan);
}

/* An instance to give back once the runs before its free have completed. */
typedef struct give_back {
    tfd_server *srv;
    tfd_plan_entry *entry;
} give_back;

/* Loop: the runs queued before the free have completed; the instance is let go of. */
static void on_freed(tfd_item *it) {
    give_back *g = it->done_arg;
    tfd_item_free(it);
    let_go(g->srv, g->entry);
    free(g);
}

void tfd_handle_prepared_free(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t id = frame->prepared_free->id;
    tf__frame_free(frame);
    tfd_prepared_ref *ref = tf__id_table_find(&c->prepared, id);
    if (!ref || ref->freed) {
        tfd_log(TFD_LOG_DEBUG, "client %llu freed prepared graph %llu, which is not live",
                (unsigned long long)c->client_id, (unsigned long long)id);
        return;
    }
    tfd_item *marker = tfd_item_new(TFD_ITEM_MARKER);
    give_back *g = malloc(sizeof *g);
    c->prepared_bytes -= ref->bytes;
    c->srv->counters.graphs_freed++;
    if (!marker || !g) {
        /* Kept out of use and given back with the connection, when its stream is drained. */
        tfd_item_free(marker);
        free(g);
        ref->freed = 1;
        ref->bytes = 0;
        return;
    }
    g->srv = c->srv;
    g->entry = ref->entry;
    marker->keeps_failure = 1;
    marker->done = on_freed;
    marker->done_arg = g;
    tf__id_table_remove(&c->prepared, id, NULL);
    tfd_stream_enqueue(c->stream, marker, marker, 1);
}

/* One handle let go of at the connection's end. */
static void give_back_ref(void *record, void *arg) {
    tfd_prepared_ref *ref = record;
    let_go(arg, ref->entry);
}

void tfd_conn_prepared_release(tfd_conn *c) {
    tf__id_table_each(&c->prepared, give_back_ref, c->srv);
    tf__id_table_free(&c->prepared);
    c->prepared_bytes = 0;
}
