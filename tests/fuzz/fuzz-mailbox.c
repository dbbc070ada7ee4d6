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
 */
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

/* Greets and makes the tensors and buffers the requests name (fuzz-input.h). */
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
    }
    fz_settle();
}

static void ring_doorbell(fz_client *cl) {
    Tenferro__MailboxDoorbell db = TENFERRO__MAILBOX_DOORBELL__INIT;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    f.mailbox_doorbell = &db;
    fz_send_frame(cl, &f);
}

/* The client's side after the daemon looked: checks and takes an answer, or that none was due. */
static void take_answer(fz_client *cl) {
    tfd_conn *c = fz_conn(cl);
    if (!c || !c->mailbox) return;
    tf__mailbox *m = c->mailbox;
    uint32_t state = __atomic_load_n(&m->state, __ATOMIC_SEQ_CST);
    if (state == TF__MAILBOX_ANSWERED) {
        if (!memchr(m->message, '\0', sizeof m->message))
            fz_fail("the mailbox answer's message is not NUL-terminated");
        __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_SEQ_CST);
        return;
    }
    if (state == TF__MAILBOX_SUBMITTED && m->after_seq <= c->dispatched_seq && !c->closing &&
        !c->paused)
        fz_fail("a submitted mailbox request (after_seq %llu, %llu frames handled) was not "
                "answered after the daemon looked",
                (unsigned long long)m->after_seq, (unsigned long long)c->dispatched_seq);
}

/* Writes one request over the mailbox head, has the daemon look, and takes the answer. */
static void submit(fz_client *cl, uint8_t flags, uint8_t op, const uint8_t *req, size_t len) {
    tfd_conn *c = fz_conn(cl);
    if (!c || !c->mailbox) return;
    uint8_t head[FZ_MAILBOX_REQUEST_BYTES] = {0};
    memcpy(head, req, len);
    memcpy(c->mailbox, head, sizeof head);
    if (flags & FZ_MAILBOX_SUBMIT)
        __atomic_store_n(&c->mailbox->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
    if (op & FZ_MB_DOORBELL)
        ring_doorbell(cl);
    else
        (void)tfd_server_poll_mailboxes(fz_server());
    fz_settle();
    take_answer(cl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t flags = data[0];
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
        case FZ_MB_OP_MAILBOX:
            len = left < FZ_MAILBOX_REQUEST_BYTES ? left : FZ_MAILBOX_REQUEST_BYTES;
            submit(&cl, flags, op, p, len);
            break;
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
