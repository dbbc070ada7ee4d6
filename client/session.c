/*
 * Sessions on the client side: the local queue of operations, the submission
 * that carries it to the daemon, the scoped burst and the held session with
 * its counters. Operations are queued without a round trip; only submission
 * boundaries talk to the daemon.
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

/* Largest number of operations carried in one Submit frame; longer queues travel in several. */
#define OPS_PER_FRAME TF__MAX_OPS_PER_SUBMIT
/* Room kept in a Submit frame for its own fields (sequence number, session id, mode, nesting). */
#define SUBMIT_FIELDS_BYTES 64
/* Bytes an encoded operation adds to a frame beyond its own size: field tag and length prefix. */
#define OP_FRAMING_BYTES 6

/*
 * Sends, as one Free frame, the frees of the queue from `from` on that were not
 * carried out (discarded, refused or behind a failed operation): tf_tensor_free
 * already forgot those handles, so the daemon must still let go of them. Keeps
 * the caller's last error; nothing to do on a broken connection.
 */
static void send_unsettled_frees(tf_client *c, size_t from) {
    if (c->broken) return;
    size_t n = 0;
    for (size_t i = from; i < c->n_queued; i++)
        if (c->queue[i].kind == TF__OP_FREE) n += (size_t)c->queue[i].n_inputs;
    if (n == 0) return;
    uint64_t *ids = malloc(n * sizeof *ids);
    if (!ids) return; /* the daemon frees them when the connection ends */
    n = 0;
    for (size_t i = from; i < c->n_queued; i++)
        if (c->queue[i].kind == TF__OP_FREE)
            for (int k = 0; k < c->queue[i].n_inputs; k++) ids[n++] = c->queue[i].inputs[k];
    char why[sizeof c->last_error];
    memcpy(why, c->last_error, sizeof why);
    tf__send_free(c, ids, n);
    memcpy(c->last_error, why, sizeof why);
    free(ids);
}

/*
 * After a submission: accepted outputs become live, the rest are forgotten;
 * frees that did not run are sent on their own.
 */
/* Marks an accepted operation's output live, or forgets a refused one's. */
static void settle_output(tf_client *c, uint64_t id, int accepted) {
    if (accepted) {
        tf__handle *h = tf__id_table_find(&c->handles, id);
        if (h) h->pending = 0;
    } else {
        tf__id_table_remove(&c->handles, id, NULL);
    }
}

static void settle_queue(tf_client *c, size_t accepted) {
    for (size_t i = 0; i < c->n_queued; i++) {
        tf__queued_op *q = &c->queue[i];
        if (q->kind == TF__OP_FREE) continue;
        if (tf__queued_names_io(q)) {
            for (int o = 0; o < q->n_run_outputs; o++)
                settle_output(c, q->run_io[q->n_run_inputs + o], i < accepted);
        } else {
            settle_output(c, q->output, i < accepted);
        }
    }
    send_unsettled_frees(c, accepted);
    for (size_t i = 0; i < c->n_queued; i++) tf__queued_op_release(&c->queue[i]);
    c->n_queued = 0;
    /* Transfers released while this queue read their tensors: the daemon now has that work. */
    tf__send_due_releases(c);
}

void tf__discard_queue(tf_client *c) { settle_queue(c, 0); }

/* Points op at the wire form of q's contraction, written into q (which stays put while encoding). */
static void encode_contraction(tf__queued_op *q, Tenferro__Op *op) {
    const tf__contraction *k = &q->contract;
    Tenferro__Contraction *m = &q->contract_msg;
    tenferro__contraction__init(m);
    for (int x = 0; x < 2; x++)
        for (int a = 0; a < k->rank[x]; a++) q->contract_labels[x][a] = k->labels[x][a];
    for (int a = 0; a < k->out_rank; a++) q->contract_labels[2][a] = k->out[a];
    m->n_labels_a = (size_t)k->rank[0];
    m->labels_a = q->contract_labels[0];
    m->n_labels_b = k->n_inputs == 2 ? (size_t)k->rank[1] : 0;
    m->labels_b = q->contract_labels[1];
    m->n_labels_out = (size_t)k->out_rank;
    m->labels_out = q->contract_labels[2];
    m->conj_a = k->conj[0] != 0;
    m->conj_b = k->n_inputs == 2 && k->conj[1] != 0;
    op->contraction = m;
}

void tf__encode_ops(tf__queued_op *queue, size_t n, Tenferro__Op *ops, Tenferro__Op **ptrs) {
    for (size_t i = 0; i < n; i++) {
        tf__queued_op *q = &queue[i];
        Tenferro__Op *op = &ops[i];
        tenferro__op__init(op);
        op->kind = q->kind;
        op->n_inputs = (size_t)q->n_inputs;
        op->inputs = q->inputs;
        op->output = q->output;
        op->n_params = (size_t)q->n_params;
        op->params = q->params;
        op->flags = q->flags;
        op->alpha_re = q->alpha.re;
        op->alpha_im = q->alpha.im;
        op->beta_re = q->beta.re;
        op->beta_im = q->beta.im;
        if (q->kind == TF__OP_CONTRACT) encode_contraction(q, op);
        if (q->kind == TF__OP_FFT) tf__encode_fft(q, op);
        if (q->linalg) tf__encode_linalg(q, op);
        if (tf__queued_names_io(q)) {
            op->prepared = q->prepared;
            op->n_inputs = (size_t)q->n_run_inputs;
            op->inputs = q->run_io;
            op->n_outputs = (size_t)q->n_run_outputs;
            op->outputs = q->run_io + q->n_run_inputs;
        }
        ptrs[i] = op;
    }
}

/*
 * Encodes as many queued operations from `from` as one frame can carry (at
 * most OPS_PER_FRAME, and within the daemon's frame maximum) and returns how many.
 */
static size_t encode_frame_ops(tf_client *c, size_t from, Tenferro__Op *ops, Tenferro__Op **ptrs) {
    size_t budget = (size_t)c->max_frame_bytes - SUBMIT_FIELDS_BYTES, used = 0, n = 0;
    while (from + n < c->n_queued && n < OPS_PER_FRAME) {
        tf__encode_ops(&c->queue[from + n], 1, &ops[n], &ptrs[n]);
        size_t cost = tenferro__op__get_packed_size(&ops[n]) + OP_FRAMING_BYTES;
        if (n > 0 && used + cost > budget) break;
        used += cost;
        n++;
    }
    return n;
}

/*
 * Sends the queue in frames of at most OPS_PER_FRAME operations that each fit
 * the daemon's frame maximum. Every frame but the last goes as a plain enqueue
 * (or a non-final scoped frame); the last carries the caller's mode, so
 * waiting and closing happen once, at the end.
 */
tf_status tf__submit_queue(tf_client *c, uint64_t session_id, uint32_t mode, uint64_t *carried) {
    c->failed_index = -1;
    *carried = 0;
    size_t total = c->n_queued, sent = 0, accepted = 0;
    size_t chunk_cap = total < OPS_PER_FRAME ? total : OPS_PER_FRAME;
    Tenferro__Op *ops = calloc(chunk_cap ? chunk_cap : 1, sizeof *ops);
    Tenferro__Op **ptrs = calloc(chunk_cap ? chunk_cap : 1, sizeof *ptrs);
    if (!ops || !ptrs) {
        free(ops);
        free(ptrs);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory encoding %zu operations", total);
    }
    tf_status st = TF_OK;
    do {
        size_t n = encode_frame_ops(c, sent, ops, ptrs);
        int last = sent + n == total;
        uint32_t frame_mode = mode;
        if (!last)
            frame_mode = (mode == TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED ||
                          mode == TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL)
                             ? TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED
                             : TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE;
        Tenferro__Frame req = TENFERRO__FRAME__INIT;
        Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
        sub.session_id = session_id;
        sub.mode = frame_mode;
        if (session_id == 0) { /* a scoped root: its first frame is admitted as the burst asked */
            sub.policy = (uint32_t)c->scoped_options.policy;
            sub.deadline_ms = c->scoped_options.deadline_ms;
        }
        sub.n_ops = n;
        sub.ops = ptrs;
        req.body_case = TENFERRO__FRAME__BODY_SUBMIT;
        req.submit = &sub;
        Tenferro__Frame *reply = NULL;
        /* The last frame of a synchronize or of a burst is answered once the device is done. */
        const int waits = last && (mode == TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE ||
                                   mode == TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL);
        const uint64_t wait_start = waits ? tf__wait_spin_begin(c) : 0;
        st = tf__call(c, &req, &reply);
        if (waits) tf__wait_spin_end(c, wait_start);
        if (st != TF_OK) break;
        *carried += n;
        if (reply->body_case != TENFERRO__FRAME__BODY_RESULT) {
            tf__frame_free(reply);
            st = tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to Submit");
            break;
        }
        Tenferro__Result *r = reply->result;
        accepted += r->ops_accepted;
        if (r->has_failed_index) c->failed_index = (int64_t)(sent + r->failed_index);
        st = tf__result_status(c, r);
        if (st != TF_OK && r->has_failed_index)
            tf__fail(c, st, "operation %lld of the submission failed: %s",
                     (long long)c->failed_index, r->message);
        tf__frame_free(reply);
        sent += n;
        if (st != TF_OK) break;
    } while (sent < total);
    free(ops);
    free(ptrs);
    /* On a transport failure nothing more is known: treat unsent and unanswered work as lost. */
    settle_queue(c, accepted);
    return st;
}

/* ---- scoped entry ---- */

/* Checks admission options; TF_OK for NULL. */
static tf_status check_options(tf_client *c, const tf_session_options *o) {
    if (!o || o->policy == TF_ADMISSION_DAEMON || o->policy == TF_ADMISSION_REJECT ||
        o->policy == TF_ADMISSION_WAIT)
        return TF_OK;
    return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "unknown admission policy %d", (int)o->policy);
}


tf_status tf_with_session(tf_client *c, tf_session_fn fn, void *arg) {
    return tf_with_session_opts(c, NULL, fn, arg);
}

tf_status tf_with_session_opts(tf_client *c, const tf_session_options *opts, tf_session_fn fn,
                               void *arg) {
    if (!c || !fn) return TF_ERR_INVALID_ARGUMENT;
    if (check_options(c, opts) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (c->in_callback)
        return tf__fail(c, TF_ERR_REENTERED,
                        "tf_with_session called inside a session callback; queue the work on the "
                        "callback's view instead");
    if (c->held)
        return tf__fail(c, TF_ERR_REENTERED,
                        "this client holds session %llu: run the work with tf_session_with",
                        (unsigned long long)c->held->id);
    c->in_scoped = 1;
    c->in_callback = 1;
    c->scoped_sent = 0;
    c->scoped_options = opts ? *opts : (tf_session_options){TF_ADMISSION_DAEMON, 0};
    c->scoped_refused = TF_OK;
    tf_status fn_status = fn(&c->view, arg);
    c->in_callback = 0;
    tf_status st;
    uint64_t carried;
    if (c->scoped_refused != TF_OK) {
        tf__discard_queue(c);
        st = c->scoped_refused;
    } else {
        char fn_error[sizeof c->last_error];
        memcpy(fn_error, c->last_error, sizeof fn_error);
        st = tf__submit_queue(c, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &carried);
        /* The callback's own failure takes precedence, with its message. */
        if (fn_status != TF_OK) memcpy(c->last_error, fn_error, sizeof fn_error);
    }
    c->in_scoped = 0;
    return fn_status != TF_OK ? fn_status : st;
}

/* Inside a scoped burst: sends what is queued so far so a transfer can see its results. */
tf_status tf__scoped_flush(tf_client *c) {
    if (c->scoped_refused != TF_OK)
        return tf__fail(c, c->scoped_refused, "this scoped session was refused admission");
    uint64_t carried;
    tf_status st = tf__submit_queue(c, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED, &carried);
    if (st == TF_ERR_CONTENDED || st == TF_ERR_TIMEOUT || st == TF_ERR_REENTERED) {
        if (!c->scoped_sent) c->scoped_refused = st;
    } else {
        c->scoped_sent = 1;
    }
    return st;
}

/* ---- held sessions ---- */

/* Tells the daemon to drop session `id` of this client; no reply, ignored when it is not held. */
static void send_release(tf_client *c, uint64_t id) {
    Tenferro__Frame rel = TENFERRO__FRAME__INIT;
    Tenferro__SessionRelease body = TENFERRO__SESSION_RELEASE__INIT;
    body.session_id = id;
    rel.body_case = TENFERRO__FRAME__BODY_SESSION_RELEASE;
    rel.session_release = &body;
    tf__send(c, &rel);
}

tf_status tf_session_open(tf_client *c, tf_session **out) { return tf_session_open_opts(c, NULL, out); }

tf_status tf_session_open_opts(tf_client *c, const tf_session_options *opts, tf_session **out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    if (check_options(c, opts) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (c->held)
        return tf__fail(c, TF_ERR_REENTERED, "this client already holds session %llu",
                        (unsigned long long)c->held->id);
    if (c->in_callback)
        return tf__fail(c, TF_ERR_REENTERED, "tf_session_open called inside a session callback");
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__SessionOpen open = TENFERRO__SESSION_OPEN__INIT;
    if (opts) {
        open.policy = (uint32_t)opts->policy;
        open.deadline_ms = opts->deadline_ms;
    }
    req.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
    req.session_open = &open;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    if (st != TF_OK) return st;
    if (reply->body_case != TENFERRO__FRAME__BODY_RESULT) {
        tf__frame_free(reply);
        return tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to SessionOpen");
    }
    st = tf__result_status(c, reply->result);
    uint64_t id = reply->result->session_id;
    tf__frame_free(reply);
    if (st != TF_OK) return st;
    tf_session *s = calloc(1, sizeof *s);
    if (!s) {
        /* Give the reservation back rather than hold it with no handle to release it. */
        send_release(c, id);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory");
    }
    s->client = c;
    s->id = id;
    c->held = s;
    *out = s;
    return TF_OK;
}

tf_status tf_session_with(tf_session *s, tf_session_fn fn, void *arg) {
    if (!s || !fn) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = s->client;
    if (c->in_callback)
        return tf__fail(c, TF_ERR_REENTERED, "tf_session_with called inside a session callback");
    s->stats.held_operations++;
    c->in_callback = 1;
    tf_status st = fn(&c->view, arg);
    c->in_callback = 0;
    return st;
}

/* One held-session boundary: carries the queue with `mode` and counts it. */
static tf_status held_boundary(tf_session *s, uint32_t mode) {
    tf_client *c = s->client;
    uint64_t carried = 0;
    tf_status st = tf__submit_queue(c, s->id, mode, &carried);
    s->stats.queued_ops += carried;
    return st;
}

tf_status tf_session_submit(tf_session *s) {
    if (!s) return TF_ERR_INVALID_ARGUMENT;
    if (s->client->in_callback)
        return tf__fail(s->client, TF_ERR_REENTERED, "submit the session after its callback returns");
    s->stats.explicit_submits++;
    tf_status st = held_boundary(s, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE);
    if (st != TF_OK) s->stats.failed_submits++;
    return st;
}

tf_status tf_session_synchronize(tf_session *s) {
    if (!s) return TF_ERR_INVALID_ARGUMENT;
    if (s->client->in_callback)
        return tf__fail(s->client, TF_ERR_REENTERED,
                        "synchronize the session after its callback returns");
    s->stats.explicit_synchronizes++;
    s->host_waits++;
    tf_status st = held_boundary(s, TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE);
    if (st != TF_OK) s->stats.failed_synchronizes++;
    return st;
}

tf_status tf_session_stats(const tf_session *s, tf_session_counters *stats) {
    if (!s || !stats) return TF_ERR_INVALID_ARGUMENT;
    *stats = s->stats;
    return TF_OK;
}

uint64_t tf_session_host_waits(const tf_session *s) { return s ? s->host_waits : 0; }

tf_status tf_session_close(tf_session *s, tf_session_counters *stats) {
    if (!s) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = s->client;
    if (c->in_callback)
        return tf__fail(c, TF_ERR_REENTERED, "close the session after its callback returns");
    s->stats.close_submits++;
    tf_status st = held_boundary(s, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE);
    if (st != TF_OK) {
        s->stats.failed_submits++;
        /*
         * The submission may have stopped before its closing frame reached the
         * daemon (a frame that could not be sent, an earlier frame refused):
         * release the reservation anyway, as promised, keeping the close's error.
         */
        if (!c->broken) {
            char why[sizeof c->last_error];
            memcpy(why, c->last_error, sizeof why);
            send_release(c, s->id);
            memcpy(c->last_error, why, sizeof why);
        }
    }
    if (stats) *stats = s->stats;
    c->held = NULL;
    free(s);
    return st;
}

void tf_session_release(tf_session *s) {
    if (!s) return;
    tf_client *c = s->client;
    tf__discard_queue(c);
    /* No reply; if the connection is gone the daemon has already reclaimed the session. */
    if (!c->broken) send_release(c, s->id);
    c->held = NULL;
    free(s);
}
