/*
 * libFuzzer target: the submission mailbox (daemon/mailbox.c,
 * common/completion.h), the shared page a client writes pending transfers
 * into. A real connection of the in-process daemon (fuzz-daemon.c) greets,
 * creates tensors and pinned buffers, then the input is written over the
 * head of its mailbox page, request after request, and the daemon serves it
 * through its own paths: the loop's poller (tfd_server_poll_mailboxes) or a
 * doorbell frame, between frames that touch the same buffers and tensors
 * (layout in fuzz-input.h). Besides crashes, sanitizer reports and what
 * fuzz-daemon.c checks, two promises of completion.h are checked: an answer
 * carries a NUL-terminated message, and a request that is submitted and no
 * longer waits for earlier frames is answered once the daemon has looked.
 *
 * The client writes its own mapping of the page (fuzz-daemon.h), as a real
 * client does. With FZ_MAILBOX_RACE a writer thread keeps rewriting every
 * field of the request while the daemon looks, so a field the daemon read
 * twice (checked once, used the second time) would act on a value it never
 * checked: ASan, UBSan and the checks of fuzz-daemon.c catch what follows.
 * Those runs depend on timing and are not reproducible bit for bit.
 */
#include "daemon/mailbox.h"
#include <stddef.h>
#include <string.h>

#include "tests/fuzz/fuzz-daemon.h"
#include "tests/fuzz/fuzz-input.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_init();
    return 0;
}

/*
 * Greets (Hello, Mapped(0)) and makes the tensors and buffers the requests
 * name (fuzz-input.h), each buffer followed by its Mapped.
 */
static void preamble(fz_client *cl) {
    fz_hello(cl, "fuzz-mailbox");
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
        fz_send_frame(cl, &f);
    }
    for (int i = 0; i < FZ_MAILBOX_BUFFERS; i++) {
        Tenferro__BufferCreate bc = TENFERRO__BUFFER_CREATE__INIT;
        bc.buffer = (uint64_t)i + 1;
        bc.bytes = fz_mailbox_buffer_bytes[i];
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        f.body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
        f.buffer_create = &bc;
        fz_send_frame(cl, &f);
        /*
         * The client library sends it once the Result brought the memfd; sent
         * at once it reaches the daemon no earlier, as the connection reads
         * nothing while the buffer is being made, and saves the input a wait.
         */
        fz_mapped(cl, (uint64_t)i + 1);
    }
    fz_settle();
}

/* The mailbox in the client's own mapping of its page; NULL when the Hello was refused. */
static tf__mailbox *mailbox_of(const fz_client *cl) {
    return cl->page ? (tf__mailbox *)(cl->page + TF__MAILBOX_OFFSET) : NULL;
}

static void ring_doorbell(fz_client *cl) {
    Tenferro__MailboxDoorbell db = TENFERRO__MAILBOX_DOORBELL__INIT;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    f.mailbox_doorbell = &db;
    fz_send_frame(cl, &f);
}

static uint8_t flags;

/*
 * The client's side after the daemon looked: checks and takes an answer, or
 * that none was due. After a race the request is whatever the writer left,
 * written after the daemon's last look perhaps, so only the answer's message
 * is checked then.
 */
static void take_answer(fz_client *cl) {
    tf__mailbox *m = mailbox_of(cl);
    tfd_conn *c = fz_conn(cl);
    if (!m) return;
    uint32_t state = __atomic_load_n(&m->state, __ATOMIC_SEQ_CST);
    if (state == TF__MAILBOX_ANSWERED) {
        if (!memchr(m->message, '\0', sizeof m->message))
            fz_fail("the mailbox answer's message is not NUL-terminated");
        __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_SEQ_CST);
        return;
    }
    /* The daemon uses the mailbox once the page is sealed (c->mailbox), and not while input waits. */
    if (state == TF__MAILBOX_SUBMITTED && !(flags & FZ_MAILBOX_RACE) && c && c->mailbox &&
        m->after_seq <= c->dispatched_seq && !c->closing && !c->paused && !c->mem.waits)
        fz_fail("a submitted mailbox request (after_seq %llu, %llu frames handled) was not "
                "answered after the daemon looked",
                (unsigned long long)m->after_seq, (unsigned long long)c->dispatched_seq);
}

/* A field of the mailbox head in the writer's table: its first and its second value. */
static void race_field(fz_race_word *w, int *n, tf__mailbox *m, size_t offset, int width,
                       const uint8_t *a, const uint8_t *b) {
    uint64_t va = 0, vb = 0;
    memcpy(&va, a + offset, (size_t)width);
    memcpy(&vb, b + offset, (size_t)width);
    w[*n] = (fz_race_word){.at = (uint8_t *)m + offset, .width = width, .n_values = 2,
                           .values = {va, vb}};
    ++*n;
}

/*
 * Starts the writer on every field of the head (tf__mailbox from state to
 * bytes), each alternating between its value in head a and in head b.
 */
static void race_mailbox(tf__mailbox *m, const uint8_t *a, const uint8_t *b) {
    fz_race_word w[16];
    int n = 0;
    race_field(w, &n, m, offsetof(tf__mailbox, state), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, daemon_polling), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, client_sleeping), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, direction), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, slot), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, status), 4, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, after_seq), 8, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, buffer), 8, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, tensor), 8, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, offset), 8, a, b);
    race_field(w, &n, m, offsetof(tf__mailbox, bytes), 8, a, b);
    fz_race_start(w, n);
}

/* Turns of the loop a doorbell gets with the writer at work: enough to read and handle the frame. */
#define RACE_TURNS 8

/*
 * Writes one request over the mailbox head, has the daemon look (with the
 * writer at work in race mode: during the poller's call, or the turns that
 * handle the doorbell), and takes the answer.
 */
static void submit(fz_client *cl, uint8_t op, const uint8_t *req, const uint8_t *second) {
    tf__mailbox *m = mailbox_of(cl);
    if (!m) return;
    memcpy(m, req, FZ_MAILBOX_REQUEST_BYTES);
    if (flags & FZ_MAILBOX_SUBMIT)
        __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
    if (second) race_mailbox(m, req, second);
    if (op & FZ_MB_DOORBELL) {
        ring_doorbell(cl);
        for (int i = 0; second && i < RACE_TURNS; i++) (void)fz_turn();
    } else {
        (void)tfd_server_poll_mailboxes(fz_server());
    }
    (void)fz_race_stop();
    fz_settle();
    take_answer(cl);
}

/* Takes up to `want` bytes of the input into a zero-padded head of FZ_MAILBOX_REQUEST_BYTES. */
static size_t take_head(uint8_t head[FZ_MAILBOX_REQUEST_BYTES], const uint8_t *p, size_t left) {
    size_t len = left < FZ_MAILBOX_REQUEST_BYTES ? left : FZ_MAILBOX_REQUEST_BYTES;
    memset(head, 0, FZ_MAILBOX_REQUEST_BYTES);
    memcpy(head, p, len);
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    flags = data[0];
    const uint8_t *p = data + 1;
    size_t left = size - 1;
    fz_begin();
    fz_client cl = {.fd = -1};
    if (fz_connect(&cl) != 0) return 0;
    preamble(&cl);
    while (left > 0) {
        uint8_t op = *p++;
        left--;
        size_t len;
        switch (op % 4) {
        case FZ_MB_OP_MAILBOX: {
            uint8_t head[FZ_MAILBOX_REQUEST_BYTES], second[FZ_MAILBOX_REQUEST_BYTES];
            len = take_head(head, p, left);
            if (flags & FZ_MAILBOX_RACE) len += take_head(second, p + len, left - len);
            submit(&cl, op, head, flags & FZ_MAILBOX_RACE ? second : NULL);
            break;
        }
        case FZ_MB_OP_FRAME:
            len = fz_take_length(&p, &left);
            fz_send_body(&cl, p, len);
            break;
        case FZ_MB_OP_SETTLE:
            len = 0;
            fz_settle();
            take_answer(&cl);
            break;
        default:
            len = 0;
            tfd_server_mailboxes_polled(fz_server(), (op & FZ_MB_DOORBELL) != 0);
            break;
        }
        p += len;
        left -= len;
    }
    fz_settle();
    take_answer(&cl);
    /* The loop's polling flag is daemon-wide: the next input starts from "not polling". */
    tfd_server_mailboxes_polled(fz_server(), 0);
    fz_finish(&cl, 1);
    return 0;
}
