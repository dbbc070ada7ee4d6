/*
 * Admission: the reservation table applied to connections. Turns a table
 * answer into a reply (re-entry, contention), parks a request under the wait
 * policy with a deadline timer, and replays parked requests in FIFO order when
 * the holder closes, releases or goes away.
 */
#include <stdlib.h>

#include "daemon/admission.h"
#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"

static void on_queued_timer_closed(uv_handle_t *h) {
    tfd_queued_request *q = (tfd_queued_request *)h;
    tf__frame_free(q->frame);
    free(q);
}

/* Detaches the parked request from its connection and frees it once libuv lets go of the timer. */
static void drop_queued(tfd_conn *c, int keep_frame) {
    tfd_queued_request *q = c->queued;
    if (!q) return;
    c->queued = NULL;
    tfd_reservation_cancel(&c->srv->res, &q->waiter);
    uv_timer_stop(&q->timer);
    if (keep_frame) q->frame = NULL;
    uv_close((uv_handle_t *)&q->timer, on_queued_timer_closed);
}

/* Names the holder in a refusal, so the user knows whom they wait for. */
static void describe_holder(tfd_server *srv, char *buf, size_t len) {
    tfd_conn *h = srv->res.holder;
    if (h)
        snprintf(buf, len, "session %llu of client %llu (pid %d, %s)",
                 (unsigned long long)srv->res.session_id, (unsigned long long)h->client_id,
                 (int)h->pid, h->name);
    else
        snprintf(buf, len, "an earlier queued opener");
}

/* The deadline of a parked request passed: it never saw the domain. */
static void on_deadline(uv_timer_t *t) {
    tfd_queued_request *q = (tfd_queued_request *)t;
    tfd_conn *c = q->conn;
    c->srv->counters.admissions_timed_out++;
    char holder[160];
    describe_holder(c->srv, holder, sizeof holder);
    tfd_conn_reply(c, q->frame->seq, TF_ERR_TIMEOUT,
                   "the execution domain stayed held by %s for the whole %llu ms deadline", holder,
                   (unsigned long long)q->deadline_ms);
    drop_queued(c, 0);
    tfd_conn_eof_progress(c);
}

/*
 * What this request asks for (SessionOpen or a scoped root's Submit), bounded
 * by the daemon: a client may ask not to wait, or to wait less than the
 * configured deadline, never more, and under the reject policy it cannot wait
 * at all. Sets *policy and *deadline_ms.
 */
static void admission_asked(const tfd_server *srv, const Tenferro__Frame *frame, int held,
                            tfd_policy *policy, uint64_t *deadline_ms) {
    uint32_t asked = 0;
    uint64_t asked_ms = 0;
    if (held && frame->body_case == TENFERRO__FRAME__BODY_SESSION_OPEN) {
        asked = frame->session_open->policy;
        asked_ms = frame->session_open->deadline_ms;
    } else if (!held && frame->body_case == TENFERRO__FRAME__BODY_SUBMIT) {
        asked = frame->submit->policy;
        asked_ms = frame->submit->deadline_ms;
    }
    *policy = srv->opt.policy;
    *deadline_ms = srv->opt.wait_deadline_ms;
    if (asked == TENFERRO__ADMISSION_POLICY__ADMISSION_REJECT) *policy = TFD_POLICY_REJECT;
    if (*policy == TFD_POLICY_WAIT && asked_ms && asked_ms < *deadline_ms) *deadline_ms = asked_ms;
}

int tfd_admission_request(tfd_conn *c, Tenferro__Frame *frame, int held, uint64_t *session_id) {
    tfd_server *srv = c->srv;
    if (c->admitted_from_queue) {
        c->admitted_from_queue = 0;
        if (session_id) *session_id = c->admitted_session_id;
        return 1;
    }
    if (c->queued) {
        tfd_conn_reply(c, frame->seq, TF_ERR_BUSY,
                       "this connection already has a request waiting for the execution domain");
        tf__frame_free(frame);
        return 0;
    }
    tfd_waiter probe = {.owner = c, .held = held, .session_id = srv->next_session_id + 1};
    tfd_queued_request *q = NULL;
    tfd_waiter *w = &probe;
    tfd_policy policy;
    uint64_t deadline_ms;
    admission_asked(srv, frame, held, &policy, &deadline_ms);
    if (policy == TFD_POLICY_WAIT) {
        q = calloc(1, sizeof *q);
        if (!q) {
            tfd_conn_reply(c, frame->seq, TF_ERR_NO_MEMORY, "out of memory queueing the request");
            tf__frame_free(frame);
            return 0;
        }
        q->waiter = probe;
        q->conn = c;
        q->deadline_ms = deadline_ms;
        w = &q->waiter;
    }
    tfd_admission res = tfd_reservation_request(&srv->res, w, policy, tfd_now_ms());
    if (res != TFD_QUEUED) free(q);
    char holder[160];
    switch (res) {
    case TFD_ADMITTED:
        if (held) *session_id = ++srv->next_session_id;
        return 1;
    case TFD_REENTERED:
        srv->counters.admissions_reentered++;
        tfd_conn_reply(c, frame->seq, TF_ERR_REENTERED,
                       "this connection holds session %llu: use it, or close it first",
                       (unsigned long long)c->session_id);
        break;
    case TFD_CONTENDED:
        srv->counters.admissions_contended++;
        describe_holder(srv, holder, sizeof holder);
        tfd_conn_reply(c, frame->seq, TF_ERR_CONTENDED,
                       policy == srv->opt.policy
                           ? "the execution domain is held by %s; retry later or run tenferrod "
                             "with --reservation-policy wait"
                           : "the execution domain is held by %s; the request asked not to wait",
                       holder);
        break;
    case TFD_QUEUED:
        srv->counters.admissions_queued++;
        srv->next_session_id++; /* reserve the id the waiter was promised */
        q->frame = frame;
        c->queued = q;
        uv_timer_init(srv->loop, &q->timer);
        uv_timer_start(&q->timer, on_deadline, deadline_ms, 0);
        return 0;
    }
    tf__frame_free(frame);
    return 0;
}

void tfd_admission_release(tfd_conn *c) {
    tfd_server *srv = c->srv;
    if (!tfd_reservation_release(&srv->res, c)) return;
    tfd_waiter *w;
    while ((w = tfd_reservation_admit_next(&srv->res, tfd_now_ms())) != NULL) {
        tfd_conn *next = w->owner;
        Tenferro__Frame *frame = next->queued->frame;
        next->admitted_from_queue = 1;
        next->admitted_session_id = w->session_id;
        drop_queued(next, 1);
        tfd_log(TFD_LOG_DEBUG, "client %llu admitted from the queue", (unsigned long long)next->client_id);
        tfd_dispatch(next, frame);
        tfd_conn_eof_progress(next); /* a half-closed client waited for this answer */
    }
}

void tfd_admission_cancel(tfd_conn *c) { drop_queued(c, 0); }
