/*
 * Session requests: SessionOpen (held entry), Submit in each of its modes
 * (held submit / synchronize / close, scoped burst and its final frame) and
 * SessionRelease (the drop path). The session table of docs/sessions.md is
 * implemented here and in admission.c.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/admission.h"
#include "daemon/batch.h"
#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"

void tfd_handle_session_open(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t seq = frame->seq;
    if (c->session_id) {
        c->srv->counters.admissions_reentered++;
        tfd_conn_reply(c, seq, TF_ERR_REENTERED,
                       "this connection already holds session %llu: close it before opening another",
                       (unsigned long long)c->session_id);
        tf__frame_free(frame);
        return;
    }
    if (c->scoped_active) {
        c->srv->counters.admissions_reentered++;
        tfd_conn_reply(c, seq, TF_ERR_REENTERED,
                       "a scoped session of this connection is still running: finish it first");
        tf__frame_free(frame);
        return;
    }
    uint64_t session_id = 0;
    if (!tfd_admission_request(c, frame, 1, &session_id)) return;
    c->session_id = session_id;
    c->srv->counters.sessions_opened++;
    tf__frame_free(frame);

    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = TF_OK;
    result.message = "";
    result.session_id = session_id;
    tfd_conn_send_result(c, seq, &result, -1);
}

/* Sends the Result of a submission: its validation outcome, or a device failure seen by a wait. */
static void reply_batch(tfd_conn *c, uint64_t seq, const tfd_batch_result *r) {
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = (uint32_t)r->status;
    result.message = (char *)r->message;
    result.has_failed_index = r->has_failed_index;
    result.failed_index = r->failed_index;
    result.ops_accepted = r->accepted;
    result.session_id = c->session_id;
    tfd_conn_send_result(c, seq, &result, -1);
}

/* What a waiting submission needs when its marker completes. */
typedef struct sync_wait {
    tfd_conn *conn;
    uint64_t seq;
    uint64_t batch;
    uint64_t accepted;
} sync_wait;

/* Turns a stream's reported failure into the reply of the submission that waited for it. */
static void fill_outcome(tfd_batch_result *r, const tfd_item_outcome *o, uint64_t batch) {
    r->status = o->status;
    if (o->status == TF_OK) return;
    if (o->batch == batch) {
        r->has_failed_index = 1;
        r->failed_index = o->index;
        snprintf(r->message, sizeof r->message, "operation %u failed on the device: %s", o->index,
                 o->message);
    } else {
        snprintf(r->message, sizeof r->message,
                 "an operation of an earlier submission (index %u) failed on the device: %s",
                 o->index, o->message);
    }
}

static void on_sync_marker(tfd_item *it) {
    sync_wait *w = it->done_arg;
    tfd_conn *c = w->conn;
    tfd_busy_poll_release(&c->srv->busy_poll);
    if (!c->closing) {
        tfd_batch_result r = {.accepted = w->accepted};
        fill_outcome(&r, &it->outcome, w->batch);
        reply_batch(c, w->seq, &r);
    }
    free(w);
    tfd_item_free(it);
}

/* Answers once everything enqueued so far on the stream has completed. */
static void reply_when_drained(tfd_conn *c, uint64_t seq, const tfd_batch_result *r) {
    tfd_item_outcome o;
    if (tfd_stream_complete_if_idle(c->stream, &o)) {
        tfd_batch_result done = *r;
        fill_outcome(&done, &o, r->batch);
        reply_batch(c, seq, &done);
        return;
    }
    sync_wait *w = malloc(sizeof *w);
    if (!w || tfd_conn_enqueue_marker(c, on_sync_marker, w) != TF_OK) {
        free(w);
        tfd_batch_result fail = *r;
        fail.status = TF_ERR_NO_MEMORY;
        snprintf(fail.message, sizeof fail.message, "out of host memory waiting for the stream");
        reply_batch(c, seq, &fail);
        return;
    }
    w->conn = c;
    w->seq = seq;
    w->batch = r->batch;
    w->accepted = r->accepted;
    /* The client waits: the loop and the completion thread poll until its work is done. */
    tfd_busy_poll_hold(&c->srv->busy_poll);
}

/* What a submission does once its whole batch is validated and enqueued. */
typedef void (*submit_finish_fn)(tfd_conn *c, uint64_t seq, uint32_t mode, const tfd_batch_result *r);

/* A submission whose batch is validated over several loop turns (the connection waits meanwhile). */
typedef struct sliced_submit {
    Tenferro__Frame *frame;
    tfd_batch_job job;
    submit_finish_fn finish;
} sliced_submit;

/*
 * Ends a submission: does what its mode asks with the batch's outcome, then
 * frees its frame (a large one takes a while to free, and the client waits
 * for the answer, not for that).
 */
static void finish_submit(tfd_conn *c, Tenferro__Frame *frame, const tfd_batch_result *r,
                          submit_finish_fn finish) {
    uint64_t seq = frame->seq;
    uint32_t mode = frame->submit->mode;
    tfd_batch_result done = *r;
    finish(c, seq, mode, &done);
    tf__frame_free(frame);
}

/* The slice budget: how long one connection's batch may hold the loop at a time. */
static uint64_t slice_ns(const tfd_conn *c) { return c->srv->opt.loop_slice_us * 1000u; }

static void continue_submit(tfd_conn *c, void *arg) {
    sliced_submit *ss = arg;
    if (c->closing) {
        tf__frame_free(ss->frame);
        free(ss);
        return;
    }
    if (!tfd_batch_step(c, &ss->job, slice_ns(c)) &&
        tfd_conn_continue_later(c, continue_submit, ss) == 0) {
        tfd_conn_resume(c); /* the pause of this turn; the new continuation holds its own */
        return;
    }
    /* Finished, or no memory to continue later: the rest is done now. */
    (void)tfd_batch_step(c, &ss->job, 0);
    finish_submit(c, ss->frame, &ss->job.result, ss->finish);
    free(ss);
    tfd_conn_resume(c);
}

/*
 * Validates and enqueues a submission's batch, then finishes it. A batch
 * that takes longer than a slice goes on in later loop turns, so other
 * clients are served in between; this connection's later requests wait.
 */
static void run_submit(tfd_conn *c, Tenferro__Frame *frame, submit_finish_fn finish) {
    Tenferro__Submit *sub = frame->submit;
    sliced_submit *ss = malloc(sizeof *ss);
    tfd_batch_job local;
    tfd_batch_job *job = ss ? &ss->job : &local;
    tfd_batch_begin(c, job, sub->ops, sub->n_ops);
    if (ss && !tfd_batch_step(c, job, slice_ns(c))) {
        ss->frame = frame;
        ss->finish = finish;
        if (tfd_conn_continue_later(c, continue_submit, ss) == 0) return;
    }
    (void)tfd_batch_step(c, job, 0);
    finish_submit(c, frame, &job->result, finish);
    free(ss);
}

/* A held session's batch is in: per mode, answer now, wait for the stream, or close. */
static void finish_held(tfd_conn *c, uint64_t seq, uint32_t mode, const tfd_batch_result *r) {
    if (mode == TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE) {
        tfd_admission_release(c);
        c->session_id = 0;
        c->srv->counters.sessions_closed++;
        reply_batch(c, seq, r);
        return;
    }
    if (mode == TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE && r->status == TF_OK) {
        reply_when_drained(c, seq, r);
        return;
    }
    reply_batch(c, seq, r);
}

/* Submit on a held session: enqueue, and per mode also wait or close. */
static void submit_held(tfd_conn *c, Tenferro__Frame *frame) {
    Tenferro__Submit *sub = frame->submit;
    uint64_t seq = frame->seq;
    if (sub->session_id == 0 || sub->session_id != c->session_id) {
        tfd_conn_reply(c, seq, TF_ERR_SESSION_CLOSED,
                       "session %llu is not open on this connection",
                       (unsigned long long)sub->session_id);
        tf__frame_free(frame);
        return;
    }
    run_submit(c, frame, finish_held);
}

/* A scoped frame's batch is in: the final one waits for the stream, the others answer now. */
static void finish_scoped(tfd_conn *c, uint64_t seq, uint32_t mode, const tfd_batch_result *r) {
    int final = mode == TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    /* A failed batch ends the burst, so no root is left open that the client will never finish. */
    c->scoped_active = !final && r->status == TF_OK;
    if (final && r->status == TF_OK) {
        reply_when_drained(c, seq, r);
        return;
    }
    reply_batch(c, seq, r);
}

/* Submit of a scoped root: admitted on its first frame, synchronized on its final one. */
static void submit_scoped(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t seq = frame->seq;
    if (!c->scoped_active) {
        if (c->session_id) {
            c->srv->counters.admissions_reentered++;
            tfd_conn_reply(c, seq, TF_ERR_REENTERED,
                           "this connection holds session %llu: run the work in it instead of a "
                           "scoped session",
                           (unsigned long long)c->session_id);
            tf__frame_free(frame);
            return;
        }
        if (!tfd_admission_request(c, frame, 0, NULL)) return;
        c->srv->counters.scoped_roots++;
        c->scoped_active = 1; /* the root is open while its batch is being checked */
    }
    run_submit(c, frame, finish_scoped);
}

void tfd_handle_submit(tfd_conn *c, Tenferro__Frame *frame) {
    switch (frame->submit->mode) {
    case TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE:
    case TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE:
    case TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE:
        submit_held(c, frame);
        return;
    case TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED:
    case TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL:
        submit_scoped(c, frame);
        return;
    default:
        tfd_conn_reply(c, frame->seq, TF_ERR_INVALID_ARGUMENT, "unknown submit mode %u",
                       frame->submit->mode);
        tf__frame_free(frame);
        return;
    }
}

void tfd_handle_session_release(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t id = frame->session_release->session_id;
    tf__frame_free(frame);
    if (id == 0 || id != c->session_id) {
        tfd_log(TFD_LOG_DEBUG, "client %llu released session %llu, which it does not hold",
                (unsigned long long)c->client_id, (unsigned long long)id);
        return;
    }
    c->session_id = 0;
    c->srv->counters.sessions_released++;
    tfd_admission_release(c);
}
