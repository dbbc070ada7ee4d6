/*
 * Queued reply bytes and decode memory, per connection and per uid, and the
 * gate that pauses a connection's input while they are at their limits (see
 * memory-limits.h). A connection waits through one tfd_conn_pause whatever it
 * waits for, and is woken from a timer on the next loop turn, never from
 * inside the write callback or decode that made room: what it then handles
 * may write, decode or close again.
 */
#include <stdlib.h>

#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/memory-limits.h"
#include "daemon/server.h"

/* Why a connection's input waits: room for its replies, room for a decode. */
#define WAIT_REPLY 1
#define WAIT_DECODE 2

struct tfd_uid_memory {
    uid_t uid;
    unsigned refs;           /* connections sharing this record */
    uint64_t reply_bytes;    /* their queued and reserved replies */
    uint64_t decode_bytes;   /* the budgets of their decodes in progress */
    unsigned reply_waiting;  /* of them, waiting for reply room */
    unsigned decode_waiting; /* waiting for decode room */
    unsigned decode_woken;   /* woken for a decode they have not started yet */
};

static void on_timer(uv_timer_t *t);

int tfd_memory_attach(tfd_conn *c) {
    tfd_conn_memory *m = &c->mem;
    m->timer = malloc(sizeof *m->timer);
    if (!m->timer) return -1;
    uv_timer_init(c->srv->loop, m->timer);
    m->timer->data = c;
    for (tfd_conn *o = c->srv->conns; o; o = o->next) {
        if (o != c && o->uid == c->uid && o->mem.uid) {
            m->uid = o->mem.uid;
            m->uid->refs++;
            return 0;
        }
    }
    m->uid = calloc(1, sizeof *m->uid);
    if (!m->uid) return -1; /* the timer goes with the connection (tfd_memory_detach) */
    m->uid->uid = c->uid;
    m->uid->refs = 1;
    return 0;
}

void tfd_memory_detach(tfd_conn *c) {
    tfd_conn_memory *m = &c->mem;
    tf__frame_free(m->held);
    m->held = NULL;
    if (m->timer) uv_close((uv_handle_t *)m->timer, (uv_close_cb)free);
    m->timer = NULL;
    tfd_uid_memory *u = m->uid;
    m->uid = NULL;
    if (!u) return;
    /* Every reply was freed before the pipe closed and the stream drained: nothing is left to count. */
    u->reply_bytes -= m->reply_bytes < u->reply_bytes ? m->reply_bytes : u->reply_bytes;
    u->decode_bytes -= m->decode_bytes < u->decode_bytes ? m->decode_bytes : u->decode_bytes;
    if (--u->refs == 0) free(u);
}

/* The queued replies of c's uid (c's own when it has no record). */
static uint64_t uid_reply_bytes(const tfd_conn *c) {
    return c->mem.uid ? c->mem.uid->reply_bytes : c->mem.reply_bytes;
}

/*
 * 1 when the queued replies of c and of its uid leave room for a frame whose
 * reply reserves `want` bytes: both under their limit, and the reservation
 * fitting unless c has nothing queued (so one large Download always goes).
 */
static int reply_room(const tfd_conn *c, uint64_t want) {
    const tfd_options *o = &c->srv->opt;
    uint64_t mine = c->mem.reply_bytes, uid = uid_reply_bytes(c);
    uint64_t climit = o->client_reply_bytes, ulimit = o->uid_reply_bytes;
    if ((climit && mine >= climit) || (ulimit && uid >= ulimit)) return 0;
    if (want == 0 || mine == 0) return 1;
    return !(climit && mine + want > climit) && !(ulimit && uid + want > ulimit);
}

/* How often a waiting connection is checked for write progress: a quarter of the stall, 0 for never. */
static uint64_t watch_period(const tfd_conn *c) {
    uint64_t stall = c->srv->opt.reply_stall_ms;
    if (stall == 0) return 0;
    uint64_t p = stall / 4;
    return p < 5 ? 5 : p > 1000 ? 1000 : p;
}

/* Reply bytes written to the socket so far: what left the daemon, less what libuv still queues. */
static uint64_t written(const tfd_conn *c) {
    return c->mem.reply_out - uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe);
}

/* Starts the stall clock afresh. */
static void watch_from_now(tfd_conn *c) {
    c->mem.progress_mark = written(c);
    c->mem.progress_ms = tfd_now_ms();
}

/*
 * 1 when the replies waiting for c's socket have not moved for
 * reply_stall_ms. Nothing waiting for the socket (only reservations whose
 * copies the device has not run, or a wait for the uid's other connections)
 * is no stall of c's: the clock starts again.
 */
static int stalled(tfd_conn *c) {
    tfd_conn_memory *m = &c->mem;
    uint64_t now = tfd_now_ms(), done = written(c);
    int waiting = uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe) > 0 || c->held_head;
    if (done != m->progress_mark || !waiting) {
        m->progress_mark = done;
        m->progress_ms = now;
        return 0;
    }
    return now - m->progress_ms >= c->srv->opt.reply_stall_ms;
}

/* Makes c's input wait for `why` (the first reason pauses it). */
static void add_wait(tfd_conn *c, int why) {
    if (!c->mem.pausing) {
        c->mem.pausing = 1;
        tfd_conn_pause(c);
    }
    c->mem.waits |= why;
}

/* Runs on_timer on the next loop turn, then every watch period. */
static void wake(tfd_conn *c) {
    if (c->mem.timer) uv_timer_start(c->mem.timer, on_timer, 0, watch_period(c));
}

/*
 * A decode of uid u ended, or the line of connections waiting for one
 * changed: every connection waiting for decode room is woken, and goes before
 * those that were not in line.
 */
static void wake_decoders(tfd_server *srv, tfd_uid_memory *u) {
    if (!u || u->decode_waiting == 0) return;
    for (tfd_conn *o = srv->conns; o && u->decode_waiting; o = o->next) {
        if (o->mem.uid != u || !(o->mem.waits & WAIT_DECODE)) continue;
        o->mem.waits &= ~WAIT_DECODE;
        u->decode_waiting--;
        o->mem.decode_woken = 1;
        u->decode_woken++;
        wake(o);
    }
}

/* c leaves the line of connections woken for a decode; the others may go. */
static void leave_decode_line(tfd_conn *c) {
    tfd_uid_memory *u = c->mem.uid;
    if (!c->mem.decode_woken) return;
    c->mem.decode_woken = 0;
    if (u) u->decode_woken--;
    wake_decoders(c->srv, u);
}

/* Makes c's input wait for reply room, with `want` the reservation of the frame it holds. */
static void wait_reply(tfd_conn *c, uint64_t want) {
    tfd_conn_memory *m = &c->mem;
    /* A connection woken for a decode that now waits for its replies does not hold the uid's line. */
    leave_decode_line(c);
    m->want = want;
    if (!(m->waits & WAIT_REPLY) && m->uid) m->uid->reply_waiting++;
    add_wait(c, WAIT_REPLY);
    watch_from_now(c);
    uint64_t period = watch_period(c);
    if (m->timer && period) uv_timer_start(m->timer, on_timer, period, period);
}

/* Wakes every connection of uid u that waits for reply room and now has it. */
static void wake_uid_replies(tfd_server *srv, tfd_uid_memory *u) {
    unsigned left = u->reply_waiting;
    for (tfd_conn *o = srv->conns; o && left; o = o->next) {
        if (o->mem.uid != u || !(o->mem.waits & WAIT_REPLY)) continue;
        left--;
        if (reply_room(o, o->mem.want)) wake(o);
    }
}

/* Ends the connection whose replies no longer move while its input waits for them to. */
static void close_stalled(tfd_conn *c) {
    tfd_log(TFD_LOG_INFO,
            "client %llu (pid %d uid %u, %s): %llu bytes of replies unread for %llu ms while its "
            "input waits for them ([limits] reply_stall_ms): closing this connection",
            (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, c->name,
            (unsigned long long)c->mem.reply_bytes, (unsigned long long)c->srv->opt.reply_stall_ms);
    c->srv->counters.reply_stall_closes++;
    tfd_conn_abort(c);
}

/*
 * The connection's timer: a waiting connection whose reasons are gone goes
 * on, the frame it held first; one still waiting for reply room is checked
 * for a stall; a closing one whose last replies never leave is dropped.
 */
static void on_timer(uv_timer_t *t) {
    tfd_conn *c = t->data;
    tfd_conn_memory *m = &c->mem;
    if (c->pipe_closed || uv_is_closing((uv_handle_t *)&c->pipe)) {
        uv_timer_stop(t);
        return;
    }
    if (c->closing) {
        if (!stalled(c)) return;
        uv_timer_stop(t);
        tfd_log(TFD_LOG_DEBUG, "client %llu: its last %llu bytes of replies were not read for %llu "
                               "ms: dropped",
                (unsigned long long)c->client_id, (unsigned long long)m->reply_bytes,
                (unsigned long long)c->srv->opt.reply_stall_ms);
        tfd_conn_abort(c);
        return;
    }
    if ((m->waits & WAIT_REPLY) && reply_room(c, m->want)) {
        m->waits &= ~WAIT_REPLY;
        if (m->uid) m->uid->reply_waiting--;
    }
    if (m->waits & WAIT_REPLY) {
        if (watch_period(c) && stalled(c)) {
            uv_timer_stop(t);
            close_stalled(c);
        }
        return;
    }
    uv_timer_stop(t);
    /* A decode wait is woken by the decode that ends. */
    if (m->waits || !m->pausing) return;
    m->pausing = 0;
    Tenferro__Frame *held = m->held;
    m->held = NULL;
    m->want = 0;
    /* The pause of the wait holds while the held frame runs, so it is handled before any other. */
    if (held) tfd_conn_dispatch_frame(c, held);
    tfd_conn_resume(c);
}

void tfd_memory_reply_add(tfd_conn *c, uint64_t n) {
    c->mem.reply_bytes += n;
    if (c->mem.uid) c->mem.uid->reply_bytes += n;
}

void tfd_memory_reply_reserve(tfd_conn *c, uint64_t n) { tfd_memory_reply_add(c, n); }

void tfd_memory_reply_release(tfd_conn *c, uint64_t n) {
    tfd_conn_memory *m = &c->mem;
    tfd_uid_memory *u = m->uid;
    m->reply_bytes -= n < m->reply_bytes ? n : m->reply_bytes;
    if (u) u->reply_bytes -= n < u->reply_bytes ? n : u->reply_bytes;
    if ((m->waits & WAIT_REPLY) && reply_room(c, m->want)) wake(c);
    /* A closing connection's replies draining count for the uid's other connections too. */
    if (u && u->reply_waiting > ((m->waits & WAIT_REPLY) ? 1u : 0u)) wake_uid_replies(c->srv, u);
}

int tfd_memory_input_may_go(tfd_conn *c) {
    if (c->closing || reply_room(c, 0)) return 1;
    wait_reply(c, 0);
    return 0;
}

int tfd_memory_hold_frame(tfd_conn *c, Tenferro__Frame *frame) {
    /* A held frame is handled before the input goes on: a second cannot come meanwhile. */
    if (c->closing || c->mem.held) return 0;
    uint64_t want = 0;
    if (frame->body_case == TENFERRO__FRAME__BODY_DOWNLOAD && frame->download) {
        /* A read larger than a reply can carry is refused: it reserves nothing. */
        want = frame->download->length;
        if (want > c->srv->opt.max_frame_bytes) want = 0;
    }
    if (reply_room(c, want)) return 0;
    c->mem.held = frame;
    wait_reply(c, want);
    return 1;
}

int tfd_memory_decode_start(tfd_conn *c, uint32_t len) {
    tfd_conn_memory *m = &c->mem;
    tfd_uid_memory *u = m->uid;
    uint64_t budget = TF__DECODE_BUDGET(len), limit = c->srv->opt.uid_receive_bytes;
    /* One decode always goes; more while their budgets stay within the uid's receive budget. */
    int room = !u || limit == 0 || u->decode_bytes == 0 || u->decode_bytes + budget <= limit;
    /* Connections already in line go first: a connection that decodes back to back waits its turn. */
    unsigned ahead = u ? u->decode_waiting + u->decode_woken - (m->decode_woken ? 1u : 0u) : 0;
    if (room && (m->decode_woken || ahead == 0)) {
        if (m->decode_woken) {
            m->decode_woken = 0;
            u->decode_woken--;
        }
        m->decode_bytes = budget;
        if (u) u->decode_bytes += budget;
        return 1;
    }
    if (m->decode_woken) {
        m->decode_woken = 0;
        u->decode_woken--;
    }
    u->decode_waiting++;
    add_wait(c, WAIT_DECODE);
    return 0;
}

void tfd_memory_decode_end(tfd_conn *c) {
    tfd_conn_memory *m = &c->mem;
    tfd_uid_memory *u = m->uid;
    if (u) u->decode_bytes -= m->decode_bytes < u->decode_bytes ? m->decode_bytes : u->decode_bytes;
    m->decode_bytes = 0;
    wake_decoders(c->srv, u);
}

void tfd_memory_closing(tfd_conn *c) {
    tfd_conn_memory *m = &c->mem;
    tfd_uid_memory *u = m->uid;
    tf__frame_free(m->held);
    m->held = NULL;
    m->want = 0;
    if ((m->waits & WAIT_REPLY) && u) u->reply_waiting--;
    int in_line = m->decode_woken || (m->waits & WAIT_DECODE);
    if ((m->waits & WAIT_DECODE) && u) u->decode_waiting--;
    if (m->decode_woken && u) u->decode_woken--;
    m->decode_woken = 0;
    m->waits = 0;
    m->pausing = 0; /* moot: a closing connection reads nothing more */
    if (in_line) wake_decoders(c->srv, u);
    if (!m->timer) return;
    uv_timer_stop(m->timer);
    /* A shutdown waits for the queued replies: watch that the peer reads them at all. */
    uint64_t period = watch_period(c);
    if (period && !c->pipe_closed && !uv_is_closing((uv_handle_t *)&c->pipe) && !m->drop_output &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0) {
        watch_from_now(c);
        uv_timer_start(m->timer, on_timer, period, period);
    }
}

void tfd_memory_limits_changed(tfd_server *srv) {
    for (tfd_conn *o = srv->conns; o; o = o->next) {
        if (o->closing) continue;
        if ((o->mem.waits & WAIT_REPLY) && reply_room(o, o->mem.want)) wake(o);
        if (o->mem.waits & WAIT_DECODE) wake_decoders(srv, o->mem.uid);
    }
}
