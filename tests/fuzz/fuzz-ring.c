/*
 * libFuzzer target: the submission ring (daemon/ring.c: take_entry,
 * tfd_conn_poll_ring, tfd_ring_reply; include/tenferro/wire.h), the
 * request and reply areas a client shares with the daemon in the pages
 * after its mailbox. A real connection of the in-process daemon
 * (fuzz-daemon.c) greets, says Mapped(0) and creates a few tensors; then the
 * input writes the request area and the header words through the client's
 * own mapping of its page: entries the harness frames (valid Submit and
 * SessionOpen frames among them, their sequence numbers in order), raw bytes
 * that make headers of any kind, req_head and rep_tail values, doorbells,
 * frames on the socket between them (layout in fuzz-input.h).
 *
 * Besides crashes, sanitizer reports and what fuzz-daemon.c checks after
 * every input (the baseline once the clients hung up), the client checks
 * what a client relies on:
 * - every reply the daemon writes into the reply area lies within rep_head,
 *   decodes, carries the sequence number of its header, answers an entry the
 *   daemon took from the request area, and no entry twice; rep_count counts
 *   them;
 * - the daemon's req_tail moves by whole entries as the client wrote them;
 * - at the end the connection is served or ended with a typed last word: if
 *   it is gone, its last frame on the socket is a Result of sequence number
 *   0 and a status other than TF_OK; if it goes on, every entry taken was
 *   answered, and an entry left in the area waits for a reason the protocol
 *   gives (a frame it names not handled yet, no room for its reply, the
 *   client's unread replies).
 *
 * With FZ_RING_RACE a writer thread of the fuzz process rewrites the header
 * words and the bytes of the entries being taken while the daemon looks, so
 * a field it checked and read again would act on a value it never checked.
 * The taken entries are then no longer known to the client (the daemon may
 * have copied any mix of old and new bytes), so the answered-entry checks
 * give way to the reply area's own consistency and the last word. Those
 * runs depend on timing and are not reproducible bit for bit.
 */
#include "daemon/mailbox.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ring.h"
#include "tests/fuzz/fuzz-daemon.h"
#include "tests/fuzz/fuzz-input.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* FUZZ_RING_TRACE=1: each reply read from the ring is printed (for writing seeds). */
static int trace;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_init();
    const char *t = getenv("FUZZ_RING_TRACE");
    trace = t && *t && strcmp(t, "0") != 0;
    return 0;
}

/*
 * A set of sequence numbers (0 never is one: an entry of sequence number 0
 * is never taken): open addressing, with the members also listed in the
 * order they came, so that walking and clearing it cost what is in it.
 */
#define SET_CAP 32768
typedef struct seq_set {
    uint64_t v[SET_CAP];
    uint64_t list[SET_CAP / 2];
    uint32_t at[SET_CAP / 2]; /* where each listed member sits in v */
    size_t n;
} seq_set;

static size_t set_slot(const seq_set *s, uint64_t x) {
    size_t i = (size_t)(x * 0x9e3779b97f4a7c15ULL) & (SET_CAP - 1);
    while (s->v[i] && s->v[i] != x) i = (i + 1) & (SET_CAP - 1);
    return i;
}

static int set_has(const seq_set *s, uint64_t x) { return x && s->v[set_slot(s, x)] == x; }

/* 1 when x is new, 0 when it was there, -1 when the set is full. */
static int set_add(seq_set *s, uint64_t x) {
    if (!x) return 0;
    size_t i = set_slot(s, x);
    if (s->v[i] == x) return 0;
    if (s->n >= SET_CAP / 2) return -1;
    s->v[i] = x;
    s->list[s->n] = x;
    s->at[s->n++] = (uint32_t)i;
    return 1;
}

static void set_clear(seq_set *s) {
    for (size_t i = 0; i < s->n; i++) s->v[s->at[i]] = 0;
    s->n = 0;
}

/* The client's side of one input's ring. */
static struct {
    fz_client cl[2];  /* the ring's client, and the holder of FZ_RING_CONTENDED */
    int n_clients;
    uint8_t flags;
    tf_ring_header *h; /* in the client's own mapping; NULL when the Hello was refused */
    uint8_t *req, *rep;
    uint64_t wpos;      /* where the harness writes next; only moves forward */
    uint64_t published; /* the req_head it stored last */
    uint64_t top_seq;   /* the highest sequence number it gave an entry */
    uint64_t read;      /* reply bytes read: the client's rep_tail */
    uint32_t replies;   /* replies read: what rep_count must say */
    uint64_t taken_pos; /* request bytes whose entries are counted as taken */
    int inexact;        /* a race ran: which entries were taken is not known */
    int unreliable;     /* rep_tail went ahead of what was read: replies may be overwritten */
    int hung_up;
} R;

/* Beside it, too large to clear whole for every input: the request area as the harness wrote it, */
static uint8_t shadow[TF_RING_REQUEST_BYTES];
/* the sequence numbers of the entries the daemon took, and of those answered in the ring. */
static seq_set taken, answered;

/* Writes len bytes at position pos of the request area and of its shadow. */
static void put_req(uint64_t pos, const void *src, size_t len) {
    if (len > TF_RING_REQUEST_BYTES) len = TF_RING_REQUEST_BYTES;
    tf__ring_put(R.req, TF_RING_REQUEST_BYTES, pos, src, len);
    tf__ring_put(shadow, TF_RING_REQUEST_BYTES, pos, src, len);
}

/*
 * Counts the entries the daemon took since the last look: from the harness's
 * count to the daemon's req_tail, walking the headers as the harness wrote
 * them. Called before the harness writes the area again, so the bytes are
 * those the daemon read. While the connection lives its own copy of req_tail
 * is the truth, and without a race a walk that does not land on whole
 * entries is a finding: the daemon consumed something other than entries.
 * Once it is gone only the last req_tail it stored in the page is left, which
 * the input may have overwritten since (a WORD record): a walk that does not
 * land, or one longer than the daemon could have gone, means the taken
 * entries are no longer known, and the checks that need them give way.
 */
static void scan_taken(void) {
    if (!R.h) return;
    tfd_conn *c = fz_conn(&R.cl[0]);
    const int exact = c && !R.inexact;
    uint64_t upto = c ? c->ring.req_tail : __atomic_load_n(&R.h->req_tail, __ATOMIC_ACQUIRE);
    if (!c && (upto < R.taken_pos || upto - R.taken_pos > 2 * (uint64_t)TF_RING_REQUEST_BYTES)) {
        R.inexact = 1;
        return;
    }
    while (R.taken_pos < upto) {
        uint64_t left = upto - R.taken_pos;
        tf_ring_entry e;
        memset(&e, 0, sizeof e);
        if (left >= sizeof e) tf__ring_get(&e, shadow, TF_RING_REQUEST_BYTES, R.taken_pos, sizeof e);
        if (left < sizeof e || e.bytes == 0 || tf__ring_span(e.bytes) > left) {
            if (exact)
                fz_fail("the daemon's req_tail moved to %llu, not by whole entries from %llu (an "
                        "entry of %u bytes there)",
                        (unsigned long long)upto, (unsigned long long)R.taken_pos, e.bytes);
            R.inexact = 1;
            break;
        }
        if (set_add(&taken, e.seq) < 0) R.inexact = 1;
        R.taken_pos += tf__ring_span(e.bytes);
    }
    R.taken_pos = upto;
}

/* Prints a reply read from the ring (FUZZ_RING_TRACE). */
static void print_reply(const Tenferro__Frame *f) {
    const Tenferro__Result *r = f->body_case == TENFERRO__FRAME__BODY_RESULT ? f->result : NULL;
    fprintf(stderr, "fuzz-ring: reply in the ring: seq %llu body %d status %s%s%s\n",
            (unsigned long long)f->seq, (int)f->body_case,
            r ? tf_status_name((tf_status)r->status) : "-", r && r->message ? ": " : "",
            r && r->message ? r->message : "");
}

/*
 * Reads the replies the daemon wrote since the last read, checking each, and
 * stores rep_tail past them, as the client library does.
 */
static void read_replies(void) {
    if (!R.h) return;
    uint64_t head = __atomic_load_n(&R.h->rep_head, __ATOMIC_ACQUIRE);
    if (R.unreliable) {
        R.read = head;
        __atomic_store_n(&R.h->rep_tail, R.read, __ATOMIC_RELEASE);
        return;
    }
    if (head < R.read || head - R.read > TF_RING_REPLY_BYTES)
        fz_fail("the daemon's rep_head %llu is not within the reply area after the %llu bytes "
                "read",
                (unsigned long long)head, (unsigned long long)R.read);
    static uint8_t body[TF_RING_REPLY_BYTES];
    while (R.read < head) {
        tf_ring_entry e;
        if (head - R.read < sizeof e)
            fz_fail("%llu bytes before rep_head hold no reply header",
                    (unsigned long long)(head - R.read));
        tf__ring_get(&e, R.rep, TF_RING_REPLY_BYTES, R.read, sizeof e);
        if (e.seq == 0 || e.reserved != 0 || tf__ring_span(e.bytes) > head - R.read)
            fz_fail("a reply header at %llu (bytes %u, reserved %u, seq %llu) does not lie within "
                    "the %llu bytes before rep_head",
                    (unsigned long long)R.read, e.bytes, e.reserved, (unsigned long long)e.seq,
                    (unsigned long long)(head - R.read));
        tf__ring_get(body, R.rep, TF_RING_REPLY_BYTES, R.read + sizeof e, e.bytes);
        Tenferro__Frame *f = tf__frame_decode(body, e.bytes);
        if (!f) fz_fail("a reply of %u bytes in the ring does not decode", e.bytes);
        uint64_t seq = f->seq;
        if (trace) print_reply(f);
        tf__frame_free(f);
        if (seq != e.seq)
            fz_fail("a reply in the ring carries sequence number %llu, its header %llu",
                    (unsigned long long)seq, (unsigned long long)e.seq);
        if (!R.inexact && !set_has(&taken, e.seq))
            fz_fail("a reply in the ring answers sequence number %llu, which the daemon never took "
                    "from the ring",
                    (unsigned long long)e.seq);
        if (set_add(&answered, e.seq) == 0)
            fz_fail("sequence number %llu is answered twice in the ring", (unsigned long long)e.seq);
        R.read += tf__ring_span(e.bytes);
        R.replies++;
    }
    uint32_t count = __atomic_load_n(&R.h->rep_count, __ATOMIC_ACQUIRE);
    if (count != R.replies)
        fz_fail("rep_count says %u replies, the reply area holds %u", count, R.replies);
    __atomic_store_n(&R.h->rep_tail, R.read, __ATOMIC_RELEASE);
}

/* After the daemon looked: the entries it took are counted, and replies read unless lazy. */
static void after_look(void) {
    scan_taken();
    if (!(R.flags & FZ_RING_LAZY_READER)) read_replies();
}

/* The next entry's sequence number: after every one used on either path, as a client numbers them. */
static uint64_t next_entry_seq(void) {
    fz_client *cl = &R.cl[0];
    uint64_t top = R.top_seq;
    if (cl->max_seq > top) top = cl->max_seq;
    if (cl->next_seq - 1 > top) top = cl->next_seq - 1;
    R.top_seq = top + 1;
    cl->next_seq = R.top_seq + 1;
    return R.top_seq;
}

/* Writes one entry at the harness's position: its header, the body, zeros to its span. */
static void write_entry(const uint8_t *body, size_t len, uint64_t seq) {
    static const uint8_t zeros[8];
    tf_ring_entry e = {.bytes = (uint32_t)len, .seq = seq, .after_seq = R.cl[0].max_seq};
    put_req(R.wpos, &e, sizeof e);
    put_req(R.wpos + sizeof e, body, len);
    uint64_t span = tf__ring_span(len);
    put_req(R.wpos + sizeof e + len, zeros, (size_t)(span - sizeof e - len));
    R.wpos += span;
}

/*
 * An ENTRY record: the body as given; with FZ_RING_FIXUP, when it decodes,
 * renumbered to the header's sequence number; with FZ_RING_FILLER an Upload
 * of len bytes of data instead.
 */
static void entry_record(uint8_t op, const uint8_t *p, size_t len) {
    scan_taken();
    const uint64_t seq = next_entry_seq();
    Tenferro__Frame *f = NULL;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    Tenferro__Frame filler = TENFERRO__FRAME__INIT;
    if (op & FZ_RING_FILLER) {
        static uint8_t data[65536];
        up.tensor = 1;
        up.data.data = data;
        up.data.len = len;
        filler.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        filler.upload = &up;
        f = &filler;
    } else if (op & FZ_RING_FIXUP) {
        f = tf__frame_decode(p, len);
    }
    if (!f) {
        write_entry(p, len, seq);
        return;
    }
    f->seq = seq;
    size_t n = tenferro__frame__get_packed_size(f);
    uint8_t *bytes = malloc(n ? n : 1);
    if (!bytes) fz_fail("out of memory encoding a ring entry");
    tenferro__frame__pack(f, bytes);
    if (f != &filler) tf__frame_free(f);
    write_entry(bytes, n, seq);
    free(bytes);
}

static void send_doorbell(fz_client *cl) {
    Tenferro__MailboxDoorbell db = TENFERRO__MAILBOX_DOORBELL__INIT;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    f.mailbox_doorbell = &db;
    fz_send_frame(cl, &f);
}

/* A word of an entry's header at position pos, for the writer; skipped where it wraps the area. */
static void race_entry_word(fz_race_word *w, int *n, uint64_t pos, int width, uint64_t was,
                            uint64_t alt) {
    uint64_t at = pos % TF_RING_REQUEST_BYTES;
    if (at + (uint64_t)width > TF_RING_REQUEST_BYTES || was == alt || *n >= FZ_RACE_WORDS) return;
    w[(*n)++] = (fz_race_word){.at = R.req + at, .width = width, .n_values = 2, .values = {was, alt}};
}

/* One byte of an entry's body, flipping between its value and that XOR flip (0: left alone). */
static void race_body(fz_race_word *w, int *n, uint64_t pos, uint64_t len, uint16_t off, uint8_t flip) {
    if (len == 0 || flip == 0 || *n >= FZ_RACE_WORDS) return;
    uint64_t at = (pos + off % len) % TF_RING_REQUEST_BYTES;
    uint8_t was = shadow[at];
    w[(*n)++] = (fz_race_word){.at = R.req + at, .width = 1, .n_values = 2,
                               .values = {was, (uint8_t)(was ^ flip)}};
}

/*
 * Starts the writer for one look. Each palette byte (fuzz-input.h) names
 * the other value of one word, 0 leaving that word alone, so an input can
 * race one field or several: req_head around what was published; rep_tail
 * behind what was read or far beyond rep_head (never where the daemon would
 * overwrite an unread reply); client_sleeping; the daemon's own req_tail;
 * and in the next four entries (the daemon takes up to 16 in a look; four
 * keep the writer's round short) the header's bytes, seq and after_seq and
 * two bytes of the body.
 */
static void race_start(const uint8_t *pal) {
    fz_race_word w[FZ_RACE_WORDS];
    int n = 0;
    const uint64_t head = R.published;
    if (pal[0])
        w[n++] = (fz_race_word){.at = &R.h->req_head, .width = 8, .n_values = 2,
                                .values = {head, head + (uint64_t)(int64_t)(int8_t)pal[0] * 8}};
    if (pal[1]) {
        uint64_t back = (uint64_t)pal[1] * 8 < R.read ? (uint64_t)pal[1] * 8 : R.read;
        w[n++] = (fz_race_word){.at = &R.h->rep_tail, .width = 8, .n_values = 2,
                                .values = {R.read, pal[1] & 0x80 ? UINT64_MAX - pal[1] : R.read - back}};
    }
    if (pal[2])
        w[n++] = (fz_race_word){.at = &R.h->client_sleeping, .width = 4, .n_values = 2, .values = {0, 1}};
    if (pal[3])
        w[n++] = (fz_race_word){.at = &R.h->req_tail, .width = 8, .n_values = 2,
                                .values = {R.taken_pos, R.taken_pos + (uint64_t)pal[3] * 8}};
    uint32_t bytes_flip;
    memcpy(&bytes_flip, pal + 4, 4);
    const uint16_t off1 = (uint16_t)(pal[10] | pal[11] << 8), off2 = (uint16_t)(pal[13] | pal[14] << 8);
    uint64_t pos = R.taken_pos;
    for (int k = 0; k < 4 && head > pos && head - pos >= sizeof(tf_ring_entry) &&
                    head - pos <= TF_RING_REQUEST_BYTES;
         k++) {
        tf_ring_entry e;
        tf__ring_get(&e, shadow, TF_RING_REQUEST_BYTES, pos, sizeof e);
        race_entry_word(w, &n, pos + offsetof(tf_ring_entry, bytes), 4, e.bytes, e.bytes ^ bytes_flip);
        race_entry_word(w, &n, pos + offsetof(tf_ring_entry, seq), 8, e.seq,
                        e.seq + (uint64_t)(int64_t)(int8_t)pal[8]);
        race_entry_word(w, &n, pos + offsetof(tf_ring_entry, after_seq), 8, e.after_seq,
                        e.after_seq + pal[9]);
        uint64_t room = head - pos - sizeof e;
        race_body(w, &n, pos + sizeof e, e.bytes < room ? e.bytes : room, off1, pal[12]);
        race_body(w, &n, pos + sizeof e, e.bytes < room ? e.bytes : room, off2, pal[15]);
        if (e.bytes == 0) break;
        pos += tf__ring_span(e.bytes);
    }
    R.inexact = 1;
    fz_race_start(w, n);
}

/* After a race: the client's words and bytes as it wrote them (the daemon's own words as they are). */
static void race_end(void) {
    (void)fz_race_stop();
    __atomic_store_n(&R.h->req_head, R.published, __ATOMIC_SEQ_CST);
    __atomic_store_n(&R.h->rep_tail, R.read, __ATOMIC_RELEASE);
    __atomic_store_n(&R.h->client_sleeping, 0u, __ATOMIC_SEQ_CST);
    memcpy(R.req, shadow, TF_RING_REQUEST_BYTES);
}

/* Turns of the loop a raced look gets: enough to read and handle a doorbell. */
#define RACE_TURNS 8

/*
 * A PUBLISH record: req_head goes to the harness's position and the daemon
 * looks, through a doorbell, the loop's poller or its next turns; in race
 * mode with the writer at work meanwhile.
 */
static void publish(uint8_t op, const uint8_t *pal) {
    scan_taken();
    R.published = R.wpos;
    __atomic_store_n(&R.h->req_head, R.published, __ATOMIC_SEQ_CST);
    if (pal) race_start(pal);
    if (op & FZ_RING_DOORBELL) {
        send_doorbell(&R.cl[0]);
    } else if (op & FZ_RING_POLLER) {
        (void)tfd_server_poll_mailboxes(fz_server());
    }
    if (pal) {
        for (int i = 0; i < RACE_TURNS; i++) (void)fz_turn();
        race_end();
    }
    fz_settle();
    after_look();
}

/* A WORD record: one header word, or the harness's position (fuzz-input.h). */
static void word_record(uint8_t which, uint64_t v) {
    switch (which % 5) {
    case FZ_RING_WORD_REQ_HEAD:
        R.published = v >> 63 ? v : R.wpos + (uint64_t)(int64_t)(int32_t)(uint32_t)v;
        __atomic_store_n(&R.h->req_head, R.published, __ATOMIC_SEQ_CST);
        break;
    case FZ_RING_WORD_REP_TAIL: {
        uint64_t tail;
        if (v >> 63) {
            tail = v;
        } else if (v >> 62 == 1) {
            tail = R.read + (v & 0xffff);
            R.unreliable = 1;
        } else {
            uint64_t back = v & 0xffff;
            tail = R.read - (back < R.read ? back : R.read);
        }
        __atomic_store_n(&R.h->rep_tail, tail, __ATOMIC_RELEASE);
        break;
    }
    case FZ_RING_WORD_SLEEPING:
        __atomic_store_n(&R.h->client_sleeping, (uint32_t)v, __ATOMIC_SEQ_CST);
        break;
    case FZ_RING_WORD_REQ_TAIL:
        __atomic_store_n(&R.h->req_tail, v, __ATOMIC_RELEASE);
        break;
    default:
        R.wpos += v & 0xffff;
        break;
    }
}

/*
 * The preamble: the ring's client greets (Hello and, unless
 * FZ_RING_NO_MAPPED, Mapped(0)) and creates the tensors; with
 * FZ_RING_CONTENDED a second client opens a held session on the socket.
 */
static int preamble(void) {
    if (R.flags & FZ_RING_CONTENDED) fz_server()->opt.policy = TFD_POLICY_WAIT;
    if (fz_connect(&R.cl[0]) != 0) return -1;
    R.n_clients = 1;
    R.cl[0].skip_mapped = (R.flags & FZ_RING_NO_MAPPED) != 0;
    fz_hello(&R.cl[0], "fuzz-ring");
    if (R.cl[0].page) {
        R.h = (tf_ring_header *)(R.cl[0].page + TF_RING_OFFSET);
        R.req = R.cl[0].page + TF_RING_OFFSET + TF_RING_HEADER_BYTES;
        R.rep = R.req + TF_RING_REQUEST_BYTES;
    }
    for (int i = 0; i < FZ_MAILBOX_TENSORS; i++) {
        int64_t shape[1] = {fz_mailbox_tensor_elems[i]};
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = (uint64_t)i + 1;
        up.create = 1;
        up.dtype = TF_F32;
        up.shape = shape;
        up.n_shape = 1;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        f.upload = &up;
        fz_send_frame(&R.cl[0], &f);
    }
    if (R.flags & FZ_RING_CONTENDED && fz_connect(&R.cl[1]) == 0) {
        R.n_clients = 2;
        fz_hello(&R.cl[1], "fuzz-ring-holder");
        Tenferro__SessionOpen so = TENFERRO__SESSION_OPEN__INIT;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
        f.session_open = &so;
        fz_send_frame(&R.cl[1], &f);
    }
    fz_settle();
    return 0;
}

/*
 * The end of the input, before the harness hangs up: the connection is
 * served, or ended with a typed last word (see the top of this file).
 */
static void check_end(void) {
    if (R.hung_up || fz_server()->stopping || !R.h) return;
    fz_client *cl = &R.cl[0];
    tfd_conn *c = fz_conn(cl);
    if (!c || c->closing) {
        if (!cl->last_words)
            fz_fail("the ring's connection ended without a last word from the daemon");
        if (cl->last_word_status == TF_OK)
            fz_fail("the ring's connection ended with a last word of status TF_OK");
        return;
    }
    if (!c->ring.header || R.inexact || R.unreliable) return;
    /* A reply for a number the socket used too may have gone there (the client's own mix-up). */
    for (size_t i = 0; i < taken.n; i++) {
        uint64_t seq = taken.list[i];
        if (!set_has(&answered, seq) && !fz_sent(cl, seq) && !c->queued)
            fz_fail("the ring's entry of sequence number %llu was taken and never answered",
                    (unsigned long long)seq);
    }
    uint64_t head = __atomic_load_n(&R.h->req_head, __ATOMIC_ACQUIRE);
    uint64_t tail = c->ring.req_tail;
    if (head == tail || c->paused || c->mem.waits || c->rlen) return;
    uint64_t avail = head - tail;
    if (head < tail || avail > TF_RING_REQUEST_BYTES || avail < sizeof(tf_ring_entry))
        fz_fail("req_head %llu is out of range after req_tail %llu and the connection goes on",
                (unsigned long long)head, (unsigned long long)tail);
    tf_ring_entry e;
    tf__ring_get(&e, shadow, TF_RING_REQUEST_BYTES, tail, sizeof e);
    if (e.bytes == 0 || tf__ring_span(e.bytes) > avail)
        fz_fail("an entry of %u bytes at %llu does not fit the %llu bytes published and the "
                "connection goes on",
                e.bytes, (unsigned long long)tail, (unsigned long long)avail);
    if (e.after_seq > c->dispatched_seq) {
        if (e.after_seq <= cl->max_seq)
            fz_fail("an entry waits for frame %llu, which was sent, but %llu frames were handled",
                    (unsigned long long)e.after_seq, (unsigned long long)c->dispatched_seq);
        return; /* it names a frame never sent: it waits, as the protocol says */
    }
    if (e.seq <= c->dispatched_seq)
        fz_fail("an entry of sequence number %llu (not after %llu) was left and the connection "
                "goes on",
                (unsigned long long)e.seq, (unsigned long long)c->dispatched_seq);
    for (int i = 0; i < TFD_RING_OUTSTANDING; i++)
        if (c->ring.outstanding[i] == 0)
            fz_fail("an entry of sequence number %llu that may run was never taken though the "
                    "daemon looked",
                    (unsigned long long)e.seq);
}

/* Plays the records (fuzz-input.h). */
static void play(const uint8_t *p, size_t left) {
    while (left > 0) {
        uint8_t op = *p++;
        left--;
        size_t len = 0;
        switch (op % 8) {
        case FZ_RING_OP_ENTRY:
            if (op & FZ_RING_FILLER) {
                /* Only the length: the filler's bytes are the harness's. */
                uint8_t b[2] = {0};
                len = left < 2 ? left : 2;
                memcpy(b, p, len);
                if (R.h) entry_record(op, NULL, (size_t)(b[0] | b[1] << 8));
            } else {
                len = fz_take_length(&p, &left);
                if (R.h) entry_record(op, p, len);
            }
            break;
        case FZ_RING_OP_RAW:
            len = fz_take_length(&p, &left);
            if (R.h) {
                scan_taken();
                put_req(R.wpos, p, len);
                R.wpos += len;
            }
            break;
        case FZ_RING_OP_PUBLISH: {
            uint8_t pal[FZ_RING_PALETTE_BYTES] = {0};
            if (R.flags & FZ_RING_RACE) {
                len = left < sizeof pal ? left : sizeof pal;
                memcpy(pal, p, len);
            }
            if (R.h) publish(op, R.flags & FZ_RING_RACE ? pal : NULL);
            break;
        }
        case FZ_RING_OP_WORD: {
            uint8_t rec[9] = {0};
            len = left < sizeof rec ? left : sizeof rec;
            memcpy(rec, p, len);
            uint64_t v;
            memcpy(&v, rec + 1, 8);
            if (R.h) word_record(rec[0], v);
            break;
        }
        case FZ_RING_OP_FRAME:
            len = fz_take_length(&p, &left);
            fz_send_body(&R.cl[0], p, len);
            break;
        case FZ_RING_OP_SETTLE:
            fz_settle();
            after_look();
            break;
        case FZ_RING_OP_CONSUME:
            scan_taken();
            read_replies();
            break;
        default:
            if (op & FZ_RING_HOLDER) {
                if (R.n_clients > 1) fz_hangup(&R.cl[1]);
            } else {
                fz_hangup(&R.cl[0]);
                R.hung_up = 1;
            }
            break;
        }
        p += len;
        left -= len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    /* A fresh client: the sets emptied (cheaper than clearing them whole), the rest zeroed. */
    memset(&R, 0, sizeof R);
    memset(shadow, 0, sizeof shadow);
    set_clear(&taken);
    set_clear(&answered);
    R.flags = data[0];
    fz_begin();
    if (preamble() != 0) return 0;
    play(data + 1, size - 1);
    fz_settle();
    scan_taken();
    read_replies();
    check_end();
    fz_finish(R.cl, R.n_clients);
    return 0;
}
