/*
 * Integration tests of the daemon's side of pinned buffers and pending
 * transfers (docs/transfers.md, DESIGN.md §6 and §9), spoken in raw frames so
 * each check is about what the daemon itself does, not what the client
 * library refuses first: the completion page that rides on HelloReply; sealed
 * memfds from BufferCreate; uploads and downloads through a buffer observed in
 * the page (state DONE, status, a futex wake); every refusal of a Transfer, in
 * its documented order, with nothing changed; tensors and buffers in flight
 * refused by every other request but an operation reading the tensor;
 * released (detached) transfers; the pinned
 * quotas and the daemon-wide limit; and a client killed with transfers in
 * flight, after which every counter is back to its baseline.
 *
 * Each test starts its own tenferrod on a private socket and ends by stopping
 * it with SIGTERM, requiring a clean exit (a crash or a sanitizer report in a
 * sanitizer build fails the test).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/completion.h"
#include "common/ops.h"
#include "tests/integration/harness.h"

/* How long a raw read may wait before the test calls the daemon unresponsive. */
#define RAW_TIMEOUT_MS 10000

/* The tensor most tests move: 64 x 48 f64 (24 KiB). */
#define ROWS 64
#define COLS 48
#define ELEMS (ROWS * COLS)
#define TENSOR_BYTES (ELEMS * sizeof(double))

static const int64_t SHAPE[2] = {ROWS, COLS};

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static uint64_t g_seq = 100;

/* ---- frames ---- */

/* Sends a frame (its seq is set here) and returns the reply and any descriptor with it. */
static Tenferro__Frame *call_fd(int fd, Tenferro__Frame *f, int *passed) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv_fd(fd, RAW_TIMEOUT_MS, passed);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    ck_assert_msg(r->seq == f->seq, "reply seq %llu answers request %llu", (unsigned long long)r->seq,
                  (unsigned long long)f->seq);
    return r;
}

/* Sends a frame and returns the reply, which must carry no descriptor. */
static Tenferro__Frame *call(int fd, Tenferro__Frame *f) {
    int passed;
    Tenferro__Frame *r = call_fd(fd, f, &passed);
    ck_assert_msg(passed < 0, "a reply of body %d carried a descriptor it should not",
                  (int)r->body_case);
    return r;
}

/* Sends Mapped for buffer (0: the completion page): the daemon seals it; no reply. */
static void send_mapped(int fd, uint64_t buffer) {
    ck_assert_int_eq(th_raw_send_mapped(fd, ++g_seq, buffer), 0);
}

/* Says Hello as client `name` and returns the reply and the descriptor that came with it. */
static Tenferro__Frame *call_hello(int fd, const char *name, int *page_fd) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    h.client_name = (char *)name;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &h;
    return call_fd(fd, &f, page_fd);
}

/* Connects, says Hello and maps the completion page that must come with the reply. */
static th_raw_client raw_open(const th_daemon *d) {
    th_raw_client rc;
    ck_assert_msg(th_raw_client_open(d, "raw-transfers", &g_seq, &rc) == 0,
                  "handshake failed (see the harness's words above)");
    ck_assert_uint_eq(rc.completion_slots, TF__COMPLETION_SLOTS);
    return rc;
}

/* Fills f/body with a BufferCreate. */
static void build_create(Tenferro__Frame *f, Tenferro__BufferCreate *b, uint64_t id, uint64_t bytes) {
    tenferro__frame__init(f);
    tenferro__buffer_create__init(b);
    b->buffer = id;
    b->bytes = bytes;
    f->body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
    f->buffer_create = b;
}

/*
 * The mapping each buffer got at its creation, by memfd: a sealed buffer
 * takes no new writable mapping, so map_buffer hands this one out.
 */
static struct {
    int mem;
    void *map;
    size_t bytes;
} g_maps[64];

/*
 * Creates pinned buffer id of `bytes`, requiring success, maps it as a client
 * does and says Mapped; returns its memfd.
 */
static int buffer_create(int fd, uint64_t id, uint64_t bytes) {
    Tenferro__Frame f;
    Tenferro__BufferCreate b;
    build_create(&f, &b, id, bytes);
    int mem;
    Tenferro__Frame *r = call_fd(fd, &f, &mem);
    CK_EXPECT_RESULT(r, TF_OK, NULL);
    ck_assert_msg(mem >= 0, "BufferCreate's reply carried no memfd");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    ck_assert_msg(p != MAP_FAILED, "cannot map a pinned buffer: %s", strerror(errno));
    size_t i = 0;
    while (i < sizeof g_maps / sizeof *g_maps - 1 && g_maps[i].map) i++;
    g_maps[i].mem = mem;
    g_maps[i].map = p;
    g_maps[i].bytes = bytes;
    send_mapped(fd, id);
    return mem;
}

/* Requires BufferCreate to be refused with `status` and no descriptor. */
static void buffer_create_refused(int fd, uint64_t id, uint64_t bytes, tf_status status,
                                  const char *needle) {
    Tenferro__Frame f;
    Tenferro__BufferCreate b;
    build_create(&f, &b, id, bytes);
    CK_EXPECT_RESULT(call(fd, &f), status, needle);
}

/* The client's mapping of a buffer's memfd, made at its creation (its entry is given up). */
static uint8_t *map_buffer(int mem, size_t bytes) {
    for (size_t i = 0; i < sizeof g_maps / sizeof *g_maps; i++)
        if (g_maps[i].map && g_maps[i].mem == mem && g_maps[i].bytes == bytes) {
            void *p = g_maps[i].map;
            g_maps[i].map = NULL;
            return p;
        }
    ck_abort_msg("no mapping of memfd %d (%zu bytes) was made at its creation", mem, bytes);
    return NULL;
}

/* Fills f/b with a BufferFree. */
static void build_buffer_free(Tenferro__Frame *f, Tenferro__BufferFree *b, uint64_t id) {
    tenferro__frame__init(f);
    tenferro__buffer_free__init(b);
    b->buffer = id;
    f->body_case = TENFERRO__FRAME__BODY_BUFFER_FREE;
    f->buffer_free = b;
}

static Tenferro__Frame *buffer_free(int fd, uint64_t id) {
    Tenferro__Frame f;
    Tenferro__BufferFree b;
    build_buffer_free(&f, &b, id);
    return call(fd, &f);
}

#define UP TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD
#define DOWN TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD

/* Sends a Transfer and returns its Result. */
static Tenferro__Frame *transfer(int fd, uint32_t direction, uint64_t buffer, uint64_t tensor,
                                 uint32_t slot, uint64_t offset, uint64_t bytes) {
    Tenferro__Frame f;
    Tenferro__Transfer t;
    th_raw_build_transfer(&f, &t, direction, buffer, tensor, slot, offset, bytes);
    return call(fd, &f);
}

/* Creates a tensor of shape `shape` (f64) without data, requiring success. */
static void tensor_create(int fd, uint64_t id, int rank, const int64_t *shape) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 1, TF_F64, rank, shape, 0, NULL, 0);
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
}

/* Writes bytes into a tensor with a plain Upload frame and returns the reply. */
static Tenferro__Frame *tensor_write(int fd, uint64_t id, const void *data, size_t len) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 0, (tf_dtype)0, 0, NULL, 0, data, len);
    return call(fd, &f);
}

/* Downloads a whole tensor of `bytes` bytes with a plain Download frame into dst. */
static void tensor_read(int fd, uint64_t id, void *dst, size_t bytes) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, bytes);
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(r->download_reply->data.len, bytes);
    memcpy(dst, r->download_reply->data.data, bytes);
    tf__frame_free(r);
}

/* Requires a Download of tensor id to be refused with `status`. */
static void tensor_read_refused(int fd, uint64_t id, tf_status status, const char *needle) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, 8);
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    CK_RESULT(r->download_reply->result, status, needle);
    tf__frame_free(r);
}

/* An operation with its own storage; initialise in place. */
typedef struct raw_op {
    Tenferro__Op op;
    uint64_t inputs[2];
    Tenferro__Op *ptr;
    Tenferro__Submit sub;
} raw_op;

/* Fills f with a final scoped Submit of one operation (kind on a, b, writing out). */
static void build_scoped_op(Tenferro__Frame *f, raw_op *r, tf__op_kind kind, int n_in, uint64_t a,
                            uint64_t b, uint64_t out) {
    tenferro__op__init(&r->op);
    r->inputs[0] = a;
    r->inputs[1] = b;
    r->op.kind = (uint32_t)kind;
    r->op.n_inputs = (size_t)n_in;
    r->op.inputs = r->inputs;
    r->op.output = out;
    r->ptr = &r->op;
    tenferro__submit__init(&r->sub);
    r->sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    r->sub.n_ops = 1;
    r->sub.ops = &r->ptr;
    tenferro__frame__init(f);
    f->body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f->submit = &r->sub;
}

/* Fills f with a TransferRelease of `slot` (no reply). */
static void build_release(Tenferro__Frame *f, Tenferro__TransferRelease *r, uint32_t slot) {
    tenferro__frame__init(f);
    tenferro__transfer_release__init(r);
    r->slot = slot;
    f->body_case = TENFERRO__FRAME__BODY_TRANSFER_RELEASE;
    f->transfer_release = r;
}

/*
 * Several frames sent with one write, so the daemon reads and handles them
 * back to back before any completion can run on its loop: the ones after a
 * Transfer see it in flight however fast the copy is.
 */
typedef th_frames pipeline;

/* Appends a frame; returns the seq its reply will carry. */
static uint64_t pipe_add(pipeline *p, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_frames_add(p, f), 0);
    return f->seq;
}

static void pipe_send(int fd, const pipeline *p) {
    ck_assert_int_eq(th_raw_send_bytes(fd, p->bytes, p->len), 0);
}

/* Receives the reply to request `seq` (replies to pipelined requests come in order). */
static Tenferro__Frame *recv_reply(int fd, uint64_t seq) {
    Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r != NULL, "no reply to request %llu", (unsigned long long)seq);
    ck_assert_msg(r->seq == seq, "reply seq %llu, expected %llu", (unsigned long long)r->seq,
                  (unsigned long long)seq);
    return r;
}

/* ---- the completion page ---- */

/*
 * Waits for the daemon to write DONE into a slot and returns its status. It
 * sleeps on the state word with a plain (shared) FUTEX_WAIT and a long
 * timeout, so a completion without a shared wake fails the test.
 */
static tf_status slot_wait(th_raw_client *rc, uint32_t slot) {
    for (int i = 0; i < 100; i++) {
        uint32_t state = __atomic_load_n(&rc->page[slot].state, __ATOMIC_ACQUIRE);
        if (state == TF__SLOT_DONE) return th_slot_take(rc->page, slot);
        ck_assert_msg(state == TF__SLOT_PENDING, "slot %u holds state %u", slot, state);
        struct timespec ts = {5, 0};
        long r = syscall(SYS_futex, &rc->page[slot].state, FUTEX_WAIT, state, &ts, NULL, 0);
        ck_assert_msg(!(r == -1 && errno == ETIMEDOUT),
                      "slot %u: no DONE and no futex wake within 5 s", slot);
    }
    ck_abort_msg("slot %u never completed", slot);
    return TF_ERR_INTERNAL;
}

/* Requires every slot but those in `armed` (a bit per slot below 64) to be untouched (zero). */
static void expect_page_untouched(const th_raw_client *rc, uint64_t armed) {
    for (uint32_t s = 0; s < TF__COMPLETION_SLOTS; s++) {
        if (s < 64 && (armed >> s & 1)) continue;
        ck_assert_msg(rc->page[s].state == 0 && rc->page[s].status == 0,
                      "the daemon wrote slot %u (state %u status %u), which is no transfer's", s,
                      rc->page[s].state, rc->page[s].status);
    }
}

/* ---- the submission mailbox ---- */

/* Writes a request into the mailbox and marks it SUBMITTED, as the client library does. */
static void box_submit(th_raw_client *rc, uint32_t direction, uint64_t buffer, uint64_t tensor,
                       uint32_t slot, uint64_t offset, uint64_t bytes, uint64_t after_seq) {
    tf__mailbox *m = rc->box;
    ck_assert_uint_eq(__atomic_load_n(&m->state, __ATOMIC_ACQUIRE), TF__MAILBOX_IDLE);
    m->direction = direction;
    m->buffer = buffer;
    m->tensor = tensor;
    m->slot = slot;
    m->offset = offset;
    m->bytes = bytes;
    m->after_seq = after_seq;
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
}

/* Waits up to RAW_TIMEOUT_MS for the daemon's answer; returns its status, the reason in msg. */
static tf_status box_answer(th_raw_client *rc, char *msg, size_t len) {
    tf__mailbox *m = rc->box;
    for (int i = 0; i < RAW_TIMEOUT_MS * 10; i++) {
        if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) == TF__MAILBOX_ANSWERED) {
            tf_status st = (tf_status)m->status;
            snprintf(msg, len, "%.*s", (int)sizeof m->message, m->message);
            __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_RELEASE);
            return st;
        }
        usleep(100);
    }
    ck_abort_msg("the daemon never answered the mailbox");
    return TF_ERR_INTERNAL;
}

/* Requires the mailbox's answer to be `want` with `needle` in its reason (NULL: any). */
static void expect_box_answer(th_raw_client *rc, tf_status want, const char *needle) {
    char msg[256];
    tf_status st = box_answer(rc, msg, sizeof msg);
    ck_assert_msg(st == want, "mailbox answer %s (%s), expected %s", tf_status_name(st), msg,
                  tf_status_name(want));
    if (needle)
        ck_assert_msg(strstr(msg, needle) != NULL, "mailbox reason \"%s\" lacks \"%s\"", msg, needle);
}

/* 1 once the daemon's daemon_polling flag reads `want`, within `ms` milliseconds. */
static int box_polling_reads(const th_raw_client *rc, uint32_t want, int ms) {
    for (int i = 0; i < ms * 10; i++) {
        if (__atomic_load_n(&rc->box->daemon_polling, __ATOMIC_SEQ_CST) == want) return 1;
        usleep(100);
    }
    return 0;
}

/* Sends a MailboxDoorbell frame (it has no reply). */
static void ring_doorbell(int fd) { ck_assert_int_eq(th_raw_send_doorbell(fd, ++g_seq), 0); }

/* ---- daemon state ---- */

/* This client's pinned_bytes in the status report. */
static uint64_t client_pinned_bytes(const th_daemon *d, uint64_t client_id) {
    Tenferro__Frame *r = th_status_report(d);
    ck_assert_ptr_nonnull(r);
    const Tenferro__ClientInfo *info = th_find_client(r, client_id);
    uint64_t v = info ? info->pinned_bytes : UINT64_MAX;
    tf__frame_free(r);
    ck_assert_msg(v != UINT64_MAX, "client %llu is not in the status report",
                  (unsigned long long)client_id);
    return v;
}

/* Fills a buffer with doubles that differ from call to call. */
static void fill(void *dst, size_t n) {
    th_fill_random(TF_F64, n, dst);
}

/* ---- tests ---- */

/* HelloReply carries the completion page: a sealed memfd of one page, zeroed, mapped shared. */
START_TEST(test_completion_page_with_hello) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    int fd = th_raw_connect(&d);
    ck_assert_int_ge(fd, 0);
    int page_fd;
    Tenferro__Frame *r = call_hello(fd, "page", &page_fd);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_HELLO_REPLY);
    ck_assert_uint_eq(r->hello_reply->completion_slots, TF__COMPLETION_SLOTS);
    ck_assert_uint_eq(r->hello_reply->mailbox_offset, TF__MAILBOX_OFFSET);
    tf__frame_free(r);
    ck_assert_msg(page_fd >= 0, "no descriptor came with HelloReply");
    struct stat st;
    ck_assert_int_eq(fstat(page_fd, &st), 0);
    ck_assert_int_eq(st.st_size, TF_RING_MAP_BYTES); /* the slots, the mailbox and the submission ring */
    int seals = fcntl(page_fd, F_GET_SEALS);
    ck_assert_msg(seals >= 0, "the page is not a sealable memfd: %s", strerror(errno));
    ck_assert_msg((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW),
                  "page seals 0x%x lack shrink or grow", seals);
    ck_assert_int_ne(ftruncate(page_fd, 0), 0);
    ck_assert_int_ne(ftruncate(page_fd, 2 * TF__COMPLETION_MAP_BYTES), 0);
    /* The daemon's own writable mapping forbids a write seal, which would freeze it. */
    ck_assert_int_ne(fcntl(page_fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
    tf__completion_slot *page =
        mmap(NULL, TF__COMPLETION_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
    ck_assert_ptr_ne(page, MAP_FAILED);
    /* Once Mapped, the page is sealed: no hole can be punched, no new writable mapping made. */
    send_mapped(fd, 0);
    tensor_create(fd, 1, 2, SHAPE); /* answered after the Mapped before it */
    seals = fcntl(page_fd, F_GET_SEALS);
    ck_assert_msg((seals & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) == (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
                  "page seals 0x%x after Mapped lack future-write or seal", seals);
    ck_assert_int_ne(fallocate(page_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                               TF_RING_MAP_BYTES), 0);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_ne(madvise(page, TF__COMPLETION_MAP_BYTES, MADV_REMOVE), 0);
    ck_assert_ptr_eq(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0), MAP_FAILED);
    for (size_t i = 0; i < TF__COMPLETION_SLOTS; i++) {
        ck_assert_uint_eq(page[i].state, 0);
        ck_assert_uint_eq(page[i].status, 0);
    }
    const tf__mailbox *box = (const tf__mailbox *)((uint8_t *)page + TF__MAILBOX_OFFSET);
    ck_assert_uint_eq(box->state, TF__MAILBOX_IDLE);
    munmap(page, TF__COMPLETION_MAP_BYTES);
    close(page_fd);
    close(fd);
    /* A client that ignores the descriptor (a plain recv) is served as before. */
    fd = th_raw_connect(&d);
    Tenferro__Frame *plain = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert_ptr_nonnull(plain);
    ck_assert_int_eq(plain->body_case, TENFERRO__FRAME__BODY_HELLO_REPLY);
    tf__frame_free(plain);
    tensor_create(fd, 1, 2, SHAPE);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* BufferCreate: a sealed memfd of exactly the size asked; bad ids and sizes refused; BufferFree. */
START_TEST(test_buffer_create_and_free) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const size_t bytes = 10000; /* not a whole number of pages */
    int mem = buffer_create(c.fd, 1, bytes);
    struct stat st;
    ck_assert_int_eq(fstat(mem, &st), 0);
    ck_assert_int_eq(st.st_size, (off_t)bytes);
    int seals = fcntl(mem, F_GET_SEALS);
    ck_assert_msg(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
                                    (F_SEAL_SHRINK | F_SEAL_GROW),
                  "buffer seals 0x%x lack shrink or grow", seals);
    ck_assert_int_ne(ftruncate(mem, 0), 0);
    ck_assert_int_ne(ftruncate(mem, 4096), 0);
    ck_assert_int_ne(ftruncate(mem, 1 << 20), 0);
    /* Sealed once Mapped (buffer_create said it; a later frame is answered after the seal). */
    tensor_create(c.fd, 99, 2, SHAPE);
    seals = fcntl(mem, F_GET_SEALS);
    ck_assert_msg((seals & F_SEAL_FUTURE_WRITE) != 0, "buffer seals 0x%x after Mapped lack future-write",
                  seals);
    ck_assert_int_ne(fallocate(mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
    ck_assert_int_eq(errno, EPERM);
    uint8_t *map = map_buffer(mem, bytes);
    for (size_t i = 0; i < bytes; i++) ck_assert_uint_eq(map[i], 0);
    memset(map, 0xab, bytes);
    /* Counted in whole pages, as the kernel maps and pins them: 10000 bytes take three. */
    ck_assert_uint_eq(client_pinned_bytes(&d, c.client_id), 3 * 4096);
    ck_assert_uint_eq(th_counter(&d, "pinned_buffers_live"), 1);
    ck_assert_uint_eq(th_counter(&d, "pinned_bytes_live"), 3 * 4096);

    buffer_create_refused(c.fd, 1, 64, TF_ERR_INVALID_ARGUMENT, "in use");
    buffer_create_refused(c.fd, 0, 64, TF_ERR_INVALID_ARGUMENT, "zero");
    buffer_create_refused(c.fd, 2, 0, TF_ERR_INVALID_ARGUMENT, "at least 1 byte");
    buffer_create_refused(c.fd, 3, UINT64_MAX, TF_ERR_INVALID_ARGUMENT, NULL);
    ck_assert_uint_eq(th_counter(&d, "pinned_buffers_live"), 1);

    CK_EXPECT_RESULT(buffer_free(c.fd, 99), TF_ERR_UNKNOWN_HANDLE, "not live");
    CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_OK, NULL);
    CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_ERR_UNKNOWN_HANDLE, "not live");
    ck_assert_uint_eq(client_pinned_bytes(&d, c.client_id), 0);
    ck_assert_uint_eq(th_counter(&d, "pinned_buffers_live"), 0);
    ck_assert_uint_eq(th_counter(&d, "pinned_bytes_live"), 0);
    /* The client's own mapping outlives the daemon's; the id can be used again. */
    ck_assert_uint_eq(map[bytes - 1], 0xab);
    munmap(map, bytes);
    close(mem);
    close(buffer_create(c.fd, 1, 4096));
    expect_page_untouched(&c, 0);
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * An upload from a buffer the test filled (at an offset), completion observed
 * in the page, then a plain Download returns the same bytes; a download into
 * a buffer the client already unmapped and closed still completes.
 */
START_TEST(test_upload_then_download) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    tensor_create(c.fd, 10, 2, SHAPE);
    const size_t off = 128, size = TENSOR_BYTES + 256;
    int mem = buffer_create(c.fd, 1, size);
    uint8_t *map = map_buffer(mem, size);
    fill(map + off, ELEMS);

    th_slot_arm(c.page, 3);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 3, off, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 3), TF_OK);
    static double back[ELEMS];
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    ck_assert_msg(memcmp(back, map + off, TENSOR_BYTES) == 0, "the uploaded tensor differs");
    ck_assert_uint_eq(th_counter(&d, "transfers_completed"), 1);

    /* Download: new contents by a plain Upload, then into a second buffer at offset 0. */
    static double fresh[ELEMS];
    fill(fresh, ELEMS);
    CK_EXPECT_RESULT(tensor_write(c.fd, 10, fresh, TENSOR_BYTES), TF_OK, NULL);
    int mem2 = buffer_create(c.fd, 2, TENSOR_BYTES);
    uint8_t *map2 = map_buffer(mem2, TENSOR_BYTES);
    th_slot_arm(c.page, 4);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 2, 10, 4, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 4), TF_OK);
    ck_assert_msg(memcmp(map2, fresh, TENSOR_BYTES) == 0, "the downloaded bytes differ");
    /* The upload's buffer kept its bytes; the slots can be used again. */
    ck_assert_msg(memcmp(back, map + off, TENSOR_BYTES) == 0, "the upload changed its buffer");
    th_slot_arm(c.page, 3);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 1, 10, 3, 64, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 3), TF_OK);
    ck_assert_msg(memcmp(map + 64, fresh, TENSOR_BYTES) == 0, "download at an offset differs");

    /* The client drops its side of buffer 2 early: only the daemon's mapping is used. */
    munmap(map2, TENSOR_BYTES);
    close(mem2);
    th_slot_arm(c.page, 5);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 2, 10, 5, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 5), TF_OK);
    CK_EXPECT_RESULT(buffer_free(c.fd, 2), TF_OK, NULL);
    expect_page_untouched(&c, 1u << 3 | 1u << 4 | 1u << 5);
    ck_assert_uint_eq(th_counter(&d, "transfers_completed"), 4);
    munmap(map, size);
    close(mem);
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Every refusal of a Transfer, in the documented order; none changes anything or writes a slot. */
START_TEST(test_transfer_refusals) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d), other = raw_open(&d);
    tensor_create(c.fd, 10, 2, SHAPE);
    const size_t size = TENSOR_BYTES + 64;
    close(buffer_create(c.fd, 1, size));
    close(buffer_create(other.fd, 77, TENSOR_BYTES)); /* another connection's buffer id */
    const uint64_t B = TENSOR_BYTES;

    CK_EXPECT_RESULT(transfer(c.fd, 0, 1, 10, 0, 0, B), TF_ERR_INVALID_ARGUMENT, "direction");
    CK_EXPECT_RESULT(transfer(c.fd, 7, 1, 10, 0, 0, B), TF_ERR_INVALID_ARGUMENT, "direction");
    /* Direction before the buffer: both wrong names the direction. */
    CK_EXPECT_RESULT(transfer(c.fd, 0, 999, 10, 0, 0, B), TF_ERR_INVALID_ARGUMENT, "direction");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 999, 10, 0, 0, B), TF_ERR_UNKNOWN_HANDLE, "buffer 999");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 77, 10, 0, 0, B), TF_ERR_UNKNOWN_HANDLE, "buffer 77");
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 77, 10, 0, 0, B), TF_ERR_UNKNOWN_HANDLE, "buffer 77");
    CK_EXPECT_RESULT(buffer_free(c.fd, 77), TF_ERR_UNKNOWN_HANDLE, "not live");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 11, 0, 0, B), TF_ERR_UNKNOWN_HANDLE, "tensor 11");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, TF__COMPLETION_SLOTS, 0, B), TF_ERR_INVALID_ARGUMENT,
                  "slot");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, UINT32_MAX, 0, B), TF_ERR_INVALID_ARGUMENT, "slot");
    /* Slot before length: both wrong names the slot. */
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, UINT32_MAX, 0, B - 8), TF_ERR_INVALID_ARGUMENT, "slot");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 0, B - 8), TF_ERR_INVALID_ARGUMENT,
                  "length mismatch");
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 1, 10, 0, 0, B + 8), TF_ERR_INVALID_ARGUMENT,
                  "length mismatch");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 0, 0), TF_ERR_INVALID_ARGUMENT, "length mismatch");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 65, B), TF_ERR_INVALID_ARGUMENT, "does not fit");
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 1, 10, 0, UINT64_MAX - 4, B), TF_ERR_INVALID_ARGUMENT,
                  "does not fit");
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, UINT64_MAX, B), TF_ERR_INVALID_ARGUMENT,
                  "does not fit");
    /* A tensor as large as the whole buffer plus one byte can never fit. */
    const int64_t big[1] = {(int64_t)(size / 8 + 1)};
    tensor_create(c.fd, 12, 1, big);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 12, 0, 0, (uint64_t)big[0] * 8), TF_ERR_INVALID_ARGUMENT,
                  "does not fit");

    ck_assert_uint_eq(th_counter(&d, "transfers_accepted"), 0);
    ck_assert_uint_eq(th_counter(&d, "transfers_refused"), 17);
    expect_page_untouched(&c, 0);
    expect_page_untouched(&other, 0);
    /* Nothing was marked in flight: everything is still usable. */
    th_slot_arm(c.page, 0);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 64, B), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 0), TF_OK);
    CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_OK, NULL);
    CK_EXPECT_RESULT(buffer_free(other.fd, 77), TF_OK, NULL);
    expect_page_untouched(&other, 0);
    th_raw_client_close(&c);
    th_raw_client_close(&other);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * While a transfer is in flight its buffer, its tensor and its slot are
 * refused by everything but a read: a second transfer (buffer, tensor,
 * slot), BufferFree, OP_FREE, Download, an Upload write; a Free frame is
 * ignored. An operation reading the tensor is accepted and runs after the
 * copy. All are sent in one write behind the Transfer, so the daemon handles
 * them before the copy can complete.
 */
START_TEST(test_in_flight_is_busy) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    tensor_create(c.fd, 10, 2, SHAPE);
    tensor_create(c.fd, 11, 2, SHAPE);
    int mem1 = buffer_create(c.fd, 1, TENSOR_BYTES), mem2 = buffer_create(c.fd, 2, TENSOR_BYTES);
    uint8_t *map1 = map_buffer(mem1, TENSOR_BYTES);
    fill(map1, ELEMS);
    const uint64_t allocations = th_counter(&d, "device_allocations_live");

    static pipeline p;
    p.len = 0;
    Tenferro__Frame f[10];
    Tenferro__Transfer t[4];
    raw_op ops[2];
    Tenferro__BufferFree bf;
    Tenferro__Download dl;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    uint64_t tensor10 = 10;
    static double junk[8];

    th_slot_arm(c.page, 0);
    th_raw_build_transfer(&f[0], &t[0], UP, 1, 10, 0, 0, TENSOR_BYTES);
    uint64_t s_ok = pipe_add(&p, &f[0]);
    th_raw_build_transfer(&f[1], &t[1], UP, 1, 11, 1, 0, TENSOR_BYTES);
    uint64_t s_buffer = pipe_add(&p, &f[1]);
    th_raw_build_transfer(&f[2], &t[2], DOWN, 2, 10, 2, 0, TENSOR_BYTES);
    uint64_t s_tensor = pipe_add(&p, &f[2]);
    th_raw_build_transfer(&f[3], &t[3], UP, 2, 11, 0, 0, TENSOR_BYTES);
    uint64_t s_slot = pipe_add(&p, &f[3]);
    build_buffer_free(&f[4], &bf, 1);
    uint64_t s_bfree = pipe_add(&p, &f[4]);
    build_scoped_op(&f[5], &ops[0], TF__OP_ADD, 2, 11, 10, 50);
    /* Not the burst's end: answered at once, not once the stream has drained. */
    ops[0].sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED;
    uint64_t s_op = pipe_add(&p, &f[5]);
    build_scoped_op(&f[6], &ops[1], TF__OP_FREE, 1, 10, 0, 0);
    uint64_t s_opfree = pipe_add(&p, &f[6]);
    th_raw_build_download(&f[7], &dl, 10, 0, TENSOR_BYTES);
    uint64_t s_dl = pipe_add(&p, &f[7]);
    tenferro__frame__init(&f[8]);
    up.tensor = 10;
    up.data.data = (uint8_t *)junk;
    up.data.len = sizeof junk;
    f[8].body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f[8].upload = &up;
    uint64_t s_up = pipe_add(&p, &f[8]);
    tenferro__frame__init(&f[9]);
    fr.n_tensors = 1;
    fr.tensors = &tensor10;
    f[9].body_case = TENFERRO__FRAME__BODY_FREE;
    f[9].free = &fr;
    pipe_add(&p, &f[9]); /* no reply */
    /* Small enough for one socket buffer (one skb), so one read of the daemon takes it all. */
    ck_assert_uint_lt(p.len, 4096);
    pipe_send(c.fd, &p);

    CK_EXPECT_RESULT(recv_reply(c.fd, s_ok), TF_OK, NULL);
    CK_EXPECT_RESULT(recv_reply(c.fd, s_buffer), TF_ERR_BUSY, "buffer 1 is already in a transfer");
    CK_EXPECT_RESULT(recv_reply(c.fd, s_tensor), TF_ERR_BUSY, "tensor 10 is already in a transfer");
    CK_EXPECT_RESULT(recv_reply(c.fd, s_slot), TF_ERR_BUSY, "slot 0");
    CK_EXPECT_RESULT(recv_reply(c.fd, s_bfree), TF_ERR_BUSY, "in flight");
    Tenferro__Frame *r = recv_reply(c.fd, s_op);
    CK_RESULT(r->result, TF_OK, NULL);
    ck_assert_uint_eq(r->result->ops_accepted, 1);
    tf__frame_free(r);
    r = recv_reply(c.fd, s_opfree);
    CK_RESULT(r->result, TF_ERR_BUSY, "cannot be freed");
    ck_assert(r->result->has_failed_index);
    tf__frame_free(r);
    r = recv_reply(c.fd, s_dl);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    CK_RESULT(r->download_reply->result, TF_ERR_BUSY, "cannot be downloaded");
    ck_assert_uint_eq(r->download_reply->data.len, 0);
    tf__frame_free(r);
    CK_EXPECT_RESULT(recv_reply(c.fd, s_up), TF_ERR_BUSY, "cannot be written");

    ck_assert_int_eq(slot_wait(&c, 0), TF_OK);
    /* The refused requests changed nothing: the tensor holds the buffer's bytes and lives on. */
    static double back[ELEMS];
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    ck_assert_msg(memcmp(back, map1, TENSOR_BYTES) == 0, "tensor 10 is not what was uploaded");
    /* The accepted read ran after the copy: 50 = 11 (never written: zeros) + 10. */
    static double sum[ELEMS];
    tensor_read(c.fd, 50, sum, TENSOR_BYTES);
    ck_assert_msg(memcmp(sum, map1, TENSOR_BYTES) == 0, "the read of tensor 10 did not see the copy");
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations + 1);
    ck_assert_uint_eq(th_counter(&d, "transfers_accepted"), 1);
    expect_page_untouched(&c, 1);
    /* Once complete, everything is free again. */
    Tenferro__Frame add;
    raw_op op;
    build_scoped_op(&add, &op, TF__OP_ADD, 2, 10, 10, 51);
    CK_EXPECT_RESULT(call(c.fd, &add), TF_OK, NULL);
    th_slot_arm(c.page, 0);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 2, 51, 0, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 0), TF_OK);
    uint8_t *map2 = map_buffer(mem2, TENSOR_BYTES);
    for (size_t i = 0; i < ELEMS; i++) ck_assert(((double *)map2)[i] == 2.0 * back[i]);
    CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_OK, NULL);
    munmap(map1, TENSOR_BYTES);
    munmap(map2, TENSOR_BYTES);
    close(mem1);
    close(mem2);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A released transfer (TransferRelease, sent before the copy can complete)
 * frees its buffer and its tensor once complete and then marks its slot DONE;
 * a release that arrives after the copy completed frees them at once;
 * releasing a slot without a transfer is ignored.
 */
START_TEST(test_released_transfer_frees_everything) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const uint64_t allocations = th_counter(&d, "device_allocations_live");
    for (int dir = 0; dir < 3; dir++) {
        tensor_create(c.fd, 10, 2, SHAPE);
        close(buffer_create(c.fd, 1, TENSOR_BYTES));
        if (dir == 2) {
            /* Late: the copy completed and its DONE was read before the release is sent. */
            th_slot_arm(c.page, 7);
            CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 7, 0, TENSOR_BYTES), TF_OK, NULL);
            ck_assert_int_eq(slot_wait(&c, 7), TF_OK);
            Tenferro__Frame f;
            Tenferro__TransferRelease rel;
            build_release(&f, &rel, 7);
            f.seq = ++g_seq;
            ck_assert_int_eq(th_raw_send(c.fd, &f), 0);
            CK_COUNTER(&d, "transfers_detached", 3, 15000);
            tensor_read_refused(c.fd, 10, TF_ERR_UNKNOWN_HANDLE, "not live");
            CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_ERR_UNKNOWN_HANDLE, "not live");
            CK_COUNTER(&d, "device_allocations_live", allocations, 15000);
            /* A second release of the same slot finds nothing. */
            f.seq = ++g_seq;
            ck_assert_int_eq(th_raw_send(c.fd, &f), 0);
            break;
        }
        static pipeline p;
        p.len = 0;
        Tenferro__Frame f[3];
        Tenferro__Transfer t;
        Tenferro__TransferRelease rel[2];
        th_slot_arm(c.page, 7);
        th_raw_build_transfer(&f[0], &t, dir ? DOWN : UP, 1, 10, 7, 0, TENSOR_BYTES);
        uint64_t s = pipe_add(&p, &f[0]);
        build_release(&f[1], &rel[0], 7);
        pipe_add(&p, &f[1]);
        build_release(&f[2], &rel[1], 8); /* no transfer: ignored */
        pipe_add(&p, &f[2]);
        pipe_send(c.fd, &p);
        CK_EXPECT_RESULT(recv_reply(c.fd, s), TF_OK, NULL);
        ck_assert_int_eq(slot_wait(&c, 7), TF_OK);
        tensor_read_refused(c.fd, 10, TF_ERR_UNKNOWN_HANDLE, "not live");
        CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_ERR_UNKNOWN_HANDLE, "not live");
        ck_assert_uint_eq(client_pinned_bytes(&d, c.client_id), 0);
        CK_COUNTER(&d, "device_allocations_live", allocations, 15000);
        ck_assert_uint_eq(th_counter(&d, "transfers_detached"), (uint64_t)dir + 1);
    }
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    ck_assert_uint_eq(th_counter(&d, "transfers_detached"), 3);
    expect_page_untouched(&c, 1u << 7);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Pinned quotas per client and per uid, and the daemon-wide limit: TF_ERR_QUOTA, nothing created. */
START_TEST(test_pinned_limits) {
    th_daemon d;
    CK_DAEMON_START(&d, "--client-pinned-bytes", "1M", "--uid-pinned-bytes", "2560K");
    th_raw_client a = raw_open(&d), b = raw_open(&d);
    close(buffer_create(a.fd, 1, 512 * 1024));
    buffer_create_refused(a.fd, 2, 768 * 1024, TF_ERR_QUOTA, "pinned_bytes");
    ck_assert_uint_eq(th_counter(&d, "pinned_buffers_live"), 1);
    ck_assert_uint_eq(th_counter(&d, "quota_refusals"), 1);
    CK_EXPECT_RESULT(buffer_free(a.fd, 1), TF_OK, NULL);
    close(buffer_create(a.fd, 2, 768 * 1024));
    close(buffer_create(a.fd, 3, 256 * 1024)); /* exactly the limit */
    buffer_create_refused(a.fd, 4, 1, TF_ERR_QUOTA, "quota.client");
    /* The uid's sum: a holds 1M, b takes 1M, a third connection 512K and then nothing. */
    close(buffer_create(b.fd, 1, 1024 * 1024));
    th_raw_client e = raw_open(&d);
    close(buffer_create(e.fd, 1, 512 * 1024));
    buffer_create_refused(e.fd, 2, 4096, TF_ERR_QUOTA, "quota.uid");
    th_raw_client_close(&a);
    th_raw_client_close(&b);
    CK_COUNTER(&d, "pinned_bytes_live", 512 * 1024, 15000);
    close(buffer_create(e.fd, 2, 4096));
    th_raw_client_close(&e);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);

    CK_DAEMON_START(&d, "--max-pinned-bytes", "1M");
    a = raw_open(&d);
    b = raw_open(&d);
    close(buffer_create(a.fd, 1, 768 * 1024));
    buffer_create_refused(b.fd, 1, 512 * 1024, TF_ERR_QUOTA, "max_pinned_bytes");
    buffer_create_refused(b.fd, 1, 2 * 1024 * 1024, TF_ERR_QUOTA, "max_pinned_bytes");
    close(buffer_create(b.fd, 1, 256 * 1024));
    ck_assert_uint_eq(th_counter(&d, "pinned_bytes_live"), 1024 * 1024);
    th_raw_client_close(&a);
    CK_COUNTER(&d, "pinned_bytes_live", 256 * 1024, 15000);
    close(buffer_create(b.fd, 2, 768 * 1024));
    th_raw_client_close(&b);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* The size of the reply that keeps the daemon's write queue busy. */
#define BIG_REPLY ((size_t)8 << 20)

/*
 * Creates tensor 1 of BIG_REPLY bytes and asks for all of it without reading
 * the reply: the socket cannot take it at once, so the rest waits in the
 * daemon's write queue. Returns the Download's sequence number once the
 * daemon has produced the reply.
 */
static uint64_t queue_big_reply(const th_daemon *d, const th_raw_client *c) {
    const int64_t shape[1] = {(int64_t)(BIG_REPLY / sizeof(double))};
    tensor_create(c->fd, 1, 1, shape);
    const uint64_t downloaded = th_counter(d, "bytes_downloaded");
    Tenferro__Frame f;
    Tenferro__Download dl;
    static pipeline p;
    p.len = 0;
    th_raw_build_download(&f, &dl, 1, 0, BIG_REPLY);
    uint64_t seq = pipe_add(&p, &f);
    pipe_send(c->fd, &p);
    CK_COUNTER(d, "bytes_downloaded", downloaded + BIG_REPLY, 15000);
    return seq;
}

/*
 * A connection that ends while a reply with a descriptor is held behind a
 * big one (a protocol error after a BufferCreate, the client not reading):
 * the held reply and then the last word (Result with seq 0, the reason)
 * still reach the client, in order, before the end of the stream.
 */
START_TEST(test_last_word_behind_held_descriptor) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const uint64_t s_big = queue_big_reply(&d, &c);
    Tenferro__Frame f;
    Tenferro__BufferCreate bc;
    static pipeline p;
    p.len = 0;
    build_create(&f, &bc, 1, 4096);
    uint64_t s_create = pipe_add(&p, &f);
    /* A frame whose body does not decode: the connection ends with a protocol error. */
    const uint8_t junk[] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
    memcpy(p.bytes + p.len, junk, sizeof junk);
    p.len += sizeof junk;
    pipe_send(c.fd, &p);
    usleep(100 * 1000);

    Tenferro__Frame *r = recv_reply(c.fd, s_big);
    ck_assert_uint_eq(r->download_reply->data.len, BIG_REPLY);
    tf__frame_free(r);
    int passed;
    r = th_raw_recv_fd(c.fd, RAW_TIMEOUT_MS, &passed);
    ck_assert_msg(r != NULL && r->seq == s_create, "the BufferCreate's reply is missing");
    CK_EXPECT_RESULT(r, TF_OK, NULL);
    if (passed >= 0) close(passed);
    r = th_raw_recv_fd(c.fd, RAW_TIMEOUT_MS, &passed);
    ck_assert_msg(r != NULL, "the last word (seq 0) never came");
    ck_assert_uint_eq(r->seq, 0);
    CK_EXPECT_RESULT(r, TF_ERR_PROTOCOL, "does not decode");
    ck_assert_ptr_null(th_raw_recv(c.fd, RAW_TIMEOUT_MS));
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A reply carrying a descriptor while earlier replies still wait in the
 * daemon's write queue (the client is not reading): it is held until they
 * are out, the descriptor arrives with its own reply, and plain replies
 * produced after it stay behind it.
 */
START_TEST(test_descriptor_waits_behind_queued_reply) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const uint64_t s_big = queue_big_reply(&d, &c);
    Tenferro__Frame f[5];
    Tenferro__Download dl[2];
    Tenferro__BufferCreate bc[2];
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    static pipeline p;
    p.len = 0;
    build_create(&f[1], &bc[0], 1, 4096);
    uint64_t s_b1 = pipe_add(&p, &f[1]);
    tenferro__frame__init(&f[2]);
    f[2].body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f[2].status_request = &sr;
    uint64_t s_status = pipe_add(&p, &f[2]);
    build_create(&f[3], &bc[1], 2, 3 * 4096);
    uint64_t s_b2 = pipe_add(&p, &f[3]);
    th_raw_build_download(&f[4], &dl[1], 1, 0, 64);
    uint64_t s_small = pipe_add(&p, &f[4]);
    pipe_send(c.fd, &p);
    ck_assert_int_eq(th_wait_counter(&d, "pinned_buffers_live", 2, 10000), 1);
    usleep(100 * 1000);

    const uint64_t seqs[5] = {s_big, s_b1, s_status, s_b2, s_small};
    const off_t sizes[5] = {-1, 4096, -1, 3 * 4096, -1};
    for (int i = 0; i < 5; i++) {
        int passed;
        Tenferro__Frame *r = th_raw_recv_fd(c.fd, RAW_TIMEOUT_MS, &passed);
        ck_assert_msg(r != NULL, "reply %d missing", i);
        ck_assert_msg(r->seq == seqs[i], "reply %d answers request %llu, expected %llu", i,
                      (unsigned long long)r->seq, (unsigned long long)seqs[i]);
        if (sizes[i] < 0) {
            ck_assert_msg(passed < 0, "reply %d (body %d) carried a descriptor", i,
                          (int)r->body_case);
        } else {
            ck_assert_msg(passed >= 0, "reply %d came without its memfd", i);
            struct stat st;
            ck_assert_int_eq(fstat(passed, &st), 0);
            ck_assert_int_eq(st.st_size, sizes[i]);
            close(passed);
        }
        if (i == 0) ck_assert_uint_eq(r->download_reply->data.len, BIG_REPLY);
        tf__frame_free(r);
    }
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- a client killed with transfers in flight ---- */

#define KILL_TRANSFERS 6
#define KILL_ELEMS (2 * 1024 * 1024) /* 16 MiB of f64 per tensor and per buffer */

static const th_daemon *g_daemon;

/*
 * The doomed client: buffers and tensors of 16 MiB, six transfers queued back
 * to back (so later ones are still queued when it dies), one idle buffer; it
 * kills itself as soon as the daemon has accepted them all.
 */
static int doomed_client(void *arg) {
    (void)arg;
    th_raw_client c;
    CHILD_CHECK(th_raw_client_open(g_daemon, NULL, &g_seq, &c) == 0);
    const int fd = c.fd;
    const int64_t shape[1] = {KILL_ELEMS};
    const uint64_t bytes = (uint64_t)KILL_ELEMS * sizeof(double);
    for (uint64_t i = 1; i <= KILL_TRANSFERS + 1; i++) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__BufferCreate b = TENFERRO__BUFFER_CREATE__INIT;
        b.buffer = i;
        b.bytes = bytes;
        f.seq = ++g_seq;
        f.body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
        f.buffer_create = &b;
        CHILD_CHECK(th_raw_send(fd, &f) == 0);
        int mem;
        Tenferro__Frame *r = th_raw_recv_fd(fd, RAW_TIMEOUT_MS, &mem);
        CHILD_CHECK(r && r->body_case == TENFERRO__FRAME__BODY_RESULT && r->result->status == TF_OK);
        CHILD_CHECK(mem >= 0);
        tf__frame_free(r);
        CHILD_CHECK(mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0) != MAP_FAILED);
        close(mem);
        CHILD_CHECK(th_raw_send_mapped(fd, ++g_seq, i) == 0);
        Tenferro__Upload up;
        th_raw_build_upload(&f, &up, 100 + i, 1, TF_F64, 1, shape, 0, NULL, 0);
        f.seq = ++g_seq;
        CHILD_CHECK(th_raw_send(fd, &f) == 0);
        r = th_raw_recv(fd, RAW_TIMEOUT_MS);
        CHILD_CHECK(r && r->result && r->result->status == TF_OK);
        tf__frame_free(r);
    }
    static pipeline p;
    Tenferro__Frame f[KILL_TRANSFERS];
    Tenferro__Transfer t[KILL_TRANSFERS];
    for (int i = 0; i < KILL_TRANSFERS; i++) {
        th_raw_build_transfer(&f[i], &t[i], i % 2 ? DOWN : UP, (uint64_t)i + 1, 101 + (uint64_t)i,
                              (uint32_t)i, 0, bytes);
        f[i].seq = ++g_seq;
        CHILD_CHECK(th_frames_add(&p, &f[i]) == 0);
    }
    CHILD_CHECK(th_raw_send_bytes(fd, p.bytes, p.len) == 0);
    for (int i = 0; i < KILL_TRANSFERS; i++) {
        Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
        CHILD_CHECK(r && r->body_case == TENFERRO__FRAME__BODY_RESULT && r->result->status == TF_OK);
        tf__frame_free(r);
    }
    raise(SIGKILL);
    return 1;
}

START_TEST(test_killed_client_releases_everything) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    g_daemon = &d;
    const uint64_t device_bytes = th_counter(&d, "device_bytes_live");
    const uint64_t allocations = th_counter(&d, "device_allocations_live");
    pid_t pid = th_spawn(doomed_client, NULL);
    ck_assert_int_gt(pid, 0);
    ck_assert_msg(th_wait(pid) == 128 + SIGKILL, "the doomed client did not get as far as its kill");
    CK_COUNTER(&d, "transfers_accepted", KILL_TRANSFERS, 15000);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_COUNTER(&d, "device_bytes_live", device_bytes, 15000);
    CK_COUNTER(&d, "device_allocations_live", allocations, 15000);
    ck_assert_int_eq(th_client_count(&d), 0);
    const uint64_t completed = th_counter(&d, "transfers_completed");
    const uint64_t failed = th_counter(&d, "transfers_failed");
    ck_assert_uint_eq(completed + failed, KILL_TRANSFERS);
    fprintf(stderr, "killed client: %llu transfers had completed, %llu were cut short\n",
            (unsigned long long)completed, (unsigned long long)failed);
    /* The daemon serves on. */
    th_raw_client c = raw_open(&d);
    tensor_create(c.fd, 1, 2, SHAPE);
    close(buffer_create(c.fd, 1, TENSOR_BYTES));
    th_slot_arm(c.page, 0);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 1, 0, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 0), TF_OK);
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A BufferCreate is finished off the daemon's loop, but the requests sent
 * behind it in the same write are handled after it: a Transfer naming the
 * new buffer is accepted (the buffer exists) and moves its bytes (a fresh
 * memfd reads zero, so the tensor's random contents turn to zeros), and the
 * replies come in order, the first with the memfd.
 */
START_TEST(test_requests_behind_buffer_create) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    tensor_create(c.fd, 10, 2, SHAPE);
    static double data[ELEMS], back[ELEMS];
    fill(data, ELEMS);
    CK_EXPECT_RESULT(tensor_write(c.fd, 10, data, TENSOR_BYTES), TF_OK, NULL);

    static pipeline p;
    p.len = 0;
    Tenferro__Frame f[2];
    Tenferro__BufferCreate bc;
    Tenferro__Transfer t;
    build_create(&f[0], &bc, 7, TENSOR_BYTES);
    uint64_t s_create = pipe_add(&p, &f[0]);
    th_raw_build_transfer(&f[1], &t, UP, 7, 10, 2, 0, TENSOR_BYTES);
    uint64_t s_transfer = pipe_add(&p, &f[1]);
    th_slot_arm(c.page, 2);
    pipe_send(c.fd, &p);

    int mem = -1;
    Tenferro__Frame *r = th_raw_recv_fd(c.fd, RAW_TIMEOUT_MS, &mem);
    ck_assert_msg(r != NULL && r->seq == s_create, "the BufferCreate's reply did not come first");
    CK_EXPECT_RESULT(r, TF_OK, NULL);
    ck_assert_msg(mem >= 0, "BufferCreate's reply carried no memfd");
    /* Handled after the creation: the buffer is known, but not to be used before Mapped. */
    CK_EXPECT_RESULT(recv_reply(c.fd, s_transfer), TF_ERR_INVALID_ARGUMENT, "not sealed");
    void *client_map = mmap(NULL, TENSOR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    ck_assert_ptr_ne(client_map, MAP_FAILED);
    send_mapped(c.fd, 7);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 7, 10, 2, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 2), TF_OK);
    munmap(client_map, TENSOR_BYTES);
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    for (size_t i = 0; i < ELEMS; i++)
        ck_assert_msg(back[i] == 0.0, "element %zu is %g after an upload from a fresh buffer", i,
                      back[i]);
    CK_EXPECT_RESULT(buffer_free(c.fd, 7), TF_OK, NULL);
    close(mem);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * Clients that hang up right after asking for a pinned buffer, while it may
 * still be in the making: every reserved or created byte comes back, and the
 * daemon serves the next client.
 */
START_TEST(test_hang_up_during_buffer_create) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    for (int i = 0; i < 40; i++) {
        th_raw_client c = raw_open(&d);
        Tenferro__Frame f;
        Tenferro__BufferCreate bc;
        build_create(&f, &bc, 1, (uint64_t)(1 + i % 8) << 24); /* 16 .. 128 MiB */
        f.seq = ++g_seq;
        ck_assert_int_eq(th_raw_send(c.fd, &f), 0);
        if (i % 2) th_sleep_ms(1);
        th_raw_client_close(&c);
    }
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    th_raw_client c = raw_open(&d);
    int mem = buffer_create(c.fd, 1, TENSOR_BYTES);
    close(mem);
    ck_assert_uint_eq(client_pinned_bytes(&d, c.client_id), TENSOR_BYTES);
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Creates tensor 10 (SHAPE, f64) and pinned buffer 1 of its size filled with random doubles. */
static uint8_t *tensor_and_filled_buffer(th_raw_client *rc, int *mem) {
    tensor_create(rc->fd, 10, 2, SHAPE);
    *mem = buffer_create(rc->fd, 1, TENSOR_BYTES);
    uint8_t *map = map_buffer(*mem, TENSOR_BYTES);
    fill(map, ELEMS);
    return map;
}

/*
 * A polling daemon serves requests written into the mailbox: refusals come
 * back typed with their reason and write no slot; an accepted upload and
 * download move the bytes; a request that names a tensor whose creating
 * frame has not been sent yet waits for that frame (after_seq); 200 requests
 * of random fields are each answered with a typed status; the counter counts
 * every request.
 */
START_TEST(test_mailbox_requests) {
    th_daemon d;
    CK_DAEMON_START(&d, "--busy-poll-us", "1000000", "--workers", "2");
    th_raw_client c = raw_open(&d);
    int mem;
    uint8_t *map = tensor_and_filled_buffer(&c, &mem);
    ck_assert_msg(box_polling_reads(&c, 1, 5000), "a daemon polling for 1 s never said it polls");
    uint64_t requests = 0;

    box_submit(&c, 7, 1, 10, 3, 0, TENSOR_BYTES, g_seq);
    expect_box_answer(&c, TF_ERR_INVALID_ARGUMENT, "direction 7");
    box_submit(&c, UP, 99, 10, 3, 0, TENSOR_BYTES, g_seq);
    expect_box_answer(&c, TF_ERR_UNKNOWN_HANDLE, "pinned buffer 99");
    box_submit(&c, UP, 1, 10, 9999, 0, TENSOR_BYTES, g_seq);
    expect_box_answer(&c, TF_ERR_INVALID_ARGUMENT, "slot 9999");
    box_submit(&c, UP, 1, 10, 3, 0, TENSOR_BYTES - 8, g_seq);
    expect_box_answer(&c, TF_ERR_INVALID_ARGUMENT, "length mismatch");
    requests += 4;
    expect_page_untouched(&c, 0);
    ck_assert_uint_eq(th_counter(&d, "transfers_refused"), 4);

    th_slot_arm(c.page, 3);
    box_submit(&c, UP, 1, 10, 3, 0, TENSOR_BYTES, g_seq);
    expect_box_answer(&c, TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 3), TF_OK);
    static double back[ELEMS];
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    ck_assert_msg(memcmp(back, map, TENSOR_BYTES) == 0, "the mailbox upload differs");
    requests++;

    /* Tensor 11 is created by the next frame, sent only after the request is written. */
    th_slot_arm(c.page, 4);
    box_submit(&c, UP, 1, 11, 4, 0, TENSOR_BYTES, g_seq + 1);
    th_sleep_ms(50);
    ck_assert_msg(__atomic_load_n(&c.box->state, __ATOMIC_ACQUIRE) == TF__MAILBOX_SUBMITTED,
                  "the daemon answered a request before the frames it comes after");
    tensor_create(c.fd, 11, 2, SHAPE);
    expect_box_answer(&c, TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 4), TF_OK);
    tensor_read(c.fd, 11, back, TENSOR_BYTES);
    ck_assert_msg(memcmp(back, map, TENSOR_BYTES) == 0, "the upload after its tensor's creation differs");
    requests++;

    /* Download through the mailbox: new contents by a plain Upload, then into buffer 2. */
    static double fresh[ELEMS];
    fill(fresh, ELEMS);
    CK_EXPECT_RESULT(tensor_write(c.fd, 11, fresh, TENSOR_BYTES), TF_OK, NULL);
    int mem2 = buffer_create(c.fd, 2, TENSOR_BYTES);
    uint8_t *map2 = map_buffer(mem2, TENSOR_BYTES);
    th_slot_arm(c.page, 5);
    box_submit(&c, DOWN, 2, 11, 5, 0, TENSOR_BYTES, g_seq);
    expect_box_answer(&c, TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 5), TF_OK);
    ck_assert_msg(memcmp(map2, fresh, TENSOR_BYTES) == 0, "the mailbox download differs");
    requests++;

    /* Random requests: each gets a typed answer; an accepted one completes in its slot. */
    unsigned accepted = 0;
    for (int i = 0; i < 200; i++) {
        uint32_t direction = (uint32_t)(rand() % 4), slot = (uint32_t)(rand() % 600);
        uint64_t buffer = (uint64_t)(rand() % 4), tensor = 9 + (uint64_t)(rand() % 4);
        uint64_t offset = rand() % 2 ? 0 : (uint64_t)rand();
        uint64_t bytes = rand() % 2 ? TENSOR_BYTES : (uint64_t)rand() * (uint64_t)rand();
        if (slot < TF__COMPLETION_SLOTS) th_slot_arm(c.page, slot);
        box_submit(&c, direction, buffer, tensor, slot, offset, bytes, rand() % 2 ? 0 : g_seq);
        char msg[256];
        tf_status st = box_answer(&c, msg, sizeof msg);
        ck_assert_msg(st == TF_OK || (msg[0] != '\0' && st > 0 && st < 100),
                      "request %d: status %d without a reason", i, (int)st);
        if (st == TF_OK) {
            accepted++;
            ck_assert_int_eq(slot_wait(&c, slot), TF_OK);
        } else if (slot < TF__COMPLETION_SLOTS) {
            __atomic_store_n(&c.page[slot].state, (uint32_t)TF__SLOT_IDLE, __ATOMIC_RELAXED);
        }
    }
    requests += 200;
    printf("mailbox: %u of 200 random requests were valid and completed\n", accepted);
    CK_COUNTER(&d, "mailbox_requests", requests, 15000);
    /* The daemon still serves this connection and others. */
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    th_raw_client other = raw_open(&d);
    th_raw_client_close(&other);
    munmap(map, TENSOR_BYTES);
    munmap(map2, TENSOR_BYTES);
    close(mem);
    close(mem2);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A daemon that does not poll says so (daemon_polling 0) and leaves a
 * request in the mailbox until the doorbell frame rings; then it serves it.
 */
START_TEST(test_mailbox_doorbell) {
    th_daemon d;
    /* Not polling at all: neither after activity nor across request gaps (auto polls on CUDA). */
    CK_DAEMON_START(&d, "--busy-poll-us", "0", "--idle-poll-max-us", "0");
    th_raw_client c = raw_open(&d);
    int mem;
    uint8_t *map = tensor_and_filled_buffer(&c, &mem);
    ck_assert_uint_eq(__atomic_load_n(&c.box->daemon_polling, __ATOMIC_SEQ_CST), 0);
    /* Once the daemon has nothing left to do it sleeps: only a descriptor wakes it. */
    th_sleep_ms(100);
    th_slot_arm(c.page, 6);
    box_submit(&c, UP, 1, 10, 6, 0, TENSOR_BYTES, g_seq);
    th_sleep_ms(100);
    ck_assert_msg(__atomic_load_n(&c.box->state, __ATOMIC_ACQUIRE) == TF__MAILBOX_SUBMITTED,
                  "a daemon that does not poll answered without the doorbell");
    ring_doorbell(c.fd);
    expect_box_answer(&c, TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 6), TF_OK);
    static double back[ELEMS];
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    ck_assert_msg(memcmp(back, map, TENSOR_BYTES) == 0, "the doorbell upload differs");
    ck_assert_uint_eq(th_counter(&d, "mailbox_requests"), 1);
    munmap(map, TENSOR_BYTES);
    close(mem);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* SIGTERM while transfers are queued: the daemon drains them, frees everything and exits 0. */
START_TEST(test_stop_with_transfers_in_flight) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const int64_t shape[1] = {KILL_ELEMS};
    const uint64_t bytes = (uint64_t)KILL_ELEMS * sizeof(double);
    for (uint64_t i = 1; i <= 3; i++) {
        tensor_create(c.fd, i, 1, shape);
        close(buffer_create(c.fd, i, bytes));
    }
    static pipeline p;
    p.len = 0;
    Tenferro__Frame f[3];
    Tenferro__Transfer t[3];
    for (uint32_t i = 0; i < 3; i++) {
        th_slot_arm(c.page, i);
        th_raw_build_transfer(&f[i], &t[i], UP, i + 1, i + 1, i, 0, bytes);
        pipe_add(&p, &f[i]);
    }
    pipe_send(c.fd, &p);
    CK_DAEMON_STOP(&d);
    th_raw_client_close(&c);
}
END_TEST

/* ---- a hostile client's hands on the shared pages (docs/security.md) ---- */

/* Creates pinned buffer id of `bytes` and maps it, without saying Mapped: returns the memfd. */
static int buffer_create_unsealed(int fd, uint64_t id, uint64_t bytes, uint8_t **map) {
    Tenferro__Frame f;
    Tenferro__BufferCreate b;
    build_create(&f, &b, id, bytes);
    int mem;
    CK_EXPECT_RESULT(call_fd(fd, &f, &mem), TF_OK, NULL);
    ck_assert_msg(mem >= 0, "BufferCreate's reply carried no memfd");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    ck_assert_msg(p != MAP_FAILED, "cannot map a pinned buffer: %s", strerror(errno));
    *map = p;
    return mem;
}

/*
 * Nothing of the shared memory is used before Mapped: a pending transfer on a
 * connection whose completion page is not sealed, or into a buffer not
 * sealed, is refused typed; once Mapped, the same transfer runs. A client
 * that sealed its buffer against further seals itself (so the daemon cannot
 * forbid hole punching) has that buffer refused at its first use.
 */
START_TEST(test_shared_memory_used_only_once_mapped) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    /* A connection that never says Mapped for its page. */
    int fd = th_raw_connect(&d);
    int page_fd;
    Tenferro__Frame *r = call_hello(fd, "unmapped-page", &page_fd);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_HELLO_REPLY);
    tf__frame_free(r);
    tf__completion_slot *page =
        mmap(NULL, TF__COMPLETION_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
    ck_assert_ptr_ne(page, MAP_FAILED);
    tensor_create(fd, 10, 2, SHAPE);
    uint8_t *map;
    int mem = buffer_create_unsealed(fd, 1, TENSOR_BYTES, &map);
    CK_EXPECT_RESULT(transfer(fd, UP, 1, 10, 0, 0, TENSOR_BYTES), TF_ERR_INVALID_ARGUMENT,
                     "completion page is not sealed");
    ck_assert_uint_eq(page[0].state, 0); /* the daemon wrote nothing there */
    munmap(map, TENSOR_BYTES);
    close(mem);
    munmap(page, TF__COMPLETION_MAP_BYTES);
    close(page_fd);
    close(fd);

    /* A sealed page, a buffer not yet Mapped: refused; Mapped: served, the bytes right. */
    th_raw_client c = raw_open(&d);
    tensor_create(c.fd, 10, 2, SHAPE);
    mem = buffer_create_unsealed(c.fd, 1, TENSOR_BYTES, &map);
    static double data[ELEMS], back[ELEMS];
    fill(data, ELEMS);
    memcpy(map, data, TENSOR_BYTES);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 0, TENSOR_BYTES), TF_ERR_INVALID_ARGUMENT,
                     "not sealed");
    send_mapped(c.fd, 1);
    th_slot_arm(c.page, 0);
    CK_EXPECT_RESULT(transfer(c.fd, UP, 1, 10, 0, 0, TENSOR_BYTES), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 0), TF_OK);
    tensor_read(c.fd, 10, back, TENSOR_BYTES);
    ck_assert_int_eq(memcmp(back, data, TENSOR_BYTES), 0);
    munmap(map, TENSOR_BYTES);
    close(mem);

    /* The client seals against further seals before Mapped: the daemon cannot protect it. */
    mem = buffer_create_unsealed(c.fd, 2, TENSOR_BYTES, &map);
    ck_assert_int_eq(fcntl(mem, F_ADD_SEALS, F_SEAL_SEAL), 0);
    send_mapped(c.fd, 2);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 2, 10, 1, 0, TENSOR_BYTES), TF_ERR_INVALID_ARGUMENT,
                     "could not be sealed");
    ck_assert_uint_eq(th_counter(&d, "shared_seals_refused"), 1);
    munmap(map, TENSOR_BYTES);
    close(mem);
    th_raw_client_close(&c);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

#define HUGE_SYSFS "/sys/kernel/mm/hugepages/hugepages-2048kB/"

/* Reads one number from a hugetlb sysfs file; -1 when there is none. */
static long huge_read(const char *name) {
    char path[128];
    snprintf(path, sizeof path, HUGE_SYSFS "%s", name);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* Sets the pool's size; 0 when it took. */
static int huge_set_pool(long pages) {
    FILE *f = fopen(HUGE_SYSFS "nr_hugepages", "w");
    if (!f) return -1;
    int rc = fprintf(f, "%ld\n", pages) > 0 ? 0 : -1;
    if (fclose(f) != 0) rc = -1;
    return rc == 0 && huge_read("nr_hugepages") >= pages ? 0 : -1;
}

/*
 * The SIGBUS attack on a buffer on huge pages: before saying Mapped, the
 * client punches a hole over the whole buffer, takes the freed huge pages
 * with a memfd of its own and asks for a download into the buffer. The
 * daemon seals at Mapped, finds it cannot get the pages back, and refuses the
 * buffer typed at its first transfer (TF_ERR_NO_MEMORY) instead of faulting;
 * everyone else is served. After Mapped, a hole can no longer be punched.
 * Needs root to size the huge page pool; without a pool it says so and checks
 * nothing of huge pages.
 */
START_TEST(test_punched_huge_pages_do_not_kill) {
    const long before = huge_read("nr_hugepages");
    if (geteuid() != 0 || before < 0 || huge_set_pool(before + 4) != 0) {
        fprintf(stderr, "test_punched_huge_pages_do_not_kill: no huge page pool to size here "
                        "(needs root and hugetlbfs); the huge-page case was not run\n");
        return;
    }
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    th_raw_client c = raw_open(&d);
    const size_t bytes = (size_t)4 << 20;
    const int64_t shape[2] = {512, 1024}; /* 4 MiB of f64 */
    tensor_create(c.fd, 10, 2, shape);
    double *data = malloc(bytes);
    fill(data, bytes / sizeof(double));
    CK_EXPECT_RESULT(tensor_write(c.fd, 10, data, bytes), TF_OK, NULL);
    uint8_t *map;
    int mem = buffer_create_unsealed(c.fd, 1, bytes, &map);
    ck_assert_uint_eq(th_counter(&d, "pinned_buffers_huge"), 1);
    /* Touched first: the pages leave the reservation, so the punch gives them back to the pool. */
    memset(map, 0x5a, bytes);
    ck_assert_int_eq(fallocate(mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes), 0);
    long free_pages = huge_read("free_hugepages") - huge_read("resv_hugepages");
    ck_assert_msg(free_pages >= 2, "the punched pages did not go back to the pool (%ld free, %ld "
                                   "reserved)",
                  huge_read("free_hugepages"), huge_read("resv_hugepages"));
    int thief = memfd_create("thief", MFD_HUGETLB);
    ck_assert_int_ge(thief, 0);
    ck_assert_int_eq(ftruncate(thief, (off_t)free_pages << 21), 0);
    ck_assert_msg(fallocate(thief, 0, 0, (off_t)free_pages << 21) == 0,
                  "the thief cannot take %ld huge pages: %s", free_pages, strerror(errno));
    ck_assert_int_eq(huge_read("free_hugepages"), 0);
    send_mapped(c.fd, 1);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 1, 10, 0, 0, bytes), TF_ERR_NO_MEMORY, "freed by the client");
    ck_assert_uint_eq(th_counter(&d, "shared_seals_refused"), 1);
    /* The daemon is alive and serves this client and a new one. */
    static double back[ELEMS];
    tensor_create(c.fd, 11, 2, SHAPE);
    CK_EXPECT_RESULT(tensor_write(c.fd, 11, data, TENSOR_BYTES), TF_OK, NULL);
    tensor_read(c.fd, 11, back, TENSOR_BYTES);
    ck_assert_int_eq(memcmp(back, data, TENSOR_BYTES), 0);
    munmap(map, bytes);
    close(mem);
    CK_EXPECT_RESULT(buffer_free(c.fd, 1), TF_OK, NULL);

    /* Pages given back: a new huge buffer, Mapped at once, cannot be punched any more. */
    close(thief);
    mem = buffer_create(c.fd, 2, bytes);
    map = map_buffer(mem, bytes);
    tensor_create(c.fd, 12, 2, SHAPE); /* answered once the Mapped before it has sealed */
    ck_assert_int_ne(fallocate(mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes), 0);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_ne(madvise(map, bytes, MADV_REMOVE), 0);
    th_slot_arm(c.page, 1);
    CK_EXPECT_RESULT(transfer(c.fd, DOWN, 2, 10, 1, 0, bytes), TF_OK, NULL);
    ck_assert_int_eq(slot_wait(&c, 1), TF_OK);
    ck_assert_int_eq(memcmp(map, data, bytes), 0);
    munmap(map, bytes);
    close(mem);
    th_raw_client_close(&c);
    free(data);
    CK_DAEMON_STOP(&d);
    ck_assert_int_eq(huge_set_pool(before) == 0 || huge_read("nr_hugepages") == before, 1);
}
END_TEST

/*
 * Mappings cannot be exhausted: buffers are counted per client, per uid and
 * for the daemon, in whole pages for the byte limits (a 1-byte buffer costs
 * a page), and at most 8 may wait for their Mapped. Each refusal is typed and
 * names its setting; the limits hold for root too.
 */
START_TEST(test_buffer_count_limits) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-buffers-per-client", "16", "--max-buffers-per-uid", "40");
    th_raw_client a = raw_open(&d), b = raw_open(&d), e = raw_open(&d);
    for (uint64_t id = 1; id <= 16; id++) close(buffer_create(a.fd, id, 1));
    buffer_create_refused(a.fd, 17, 1, TF_ERR_QUOTA, "max_buffers_per_client");
    ck_assert_uint_eq(client_pinned_bytes(&d, a.client_id), 16 * 4096);
    ck_assert_uint_eq(th_counter(&d, "pinned_bytes_live"), 16 * 4096);
    uint8_t *maps[8];
    int mems[8];
    for (int i = 0; i < 8; i++) mems[i] = buffer_create_unsealed(b.fd, (uint64_t)i + 1, 100, &maps[i]);
    buffer_create_refused(b.fd, 9, 1, TF_ERR_QUOTA, "not yet Mapped");
    for (int i = 0; i < 8; i++) {
        send_mapped(b.fd, (uint64_t)i + 1);
        munmap(maps[i], 100);
        close(mems[i]);
    }
    for (uint64_t id = 9; id <= 16; id++) close(buffer_create(b.fd, id, 1));
    for (uint64_t id = 1; id <= 8; id++) close(buffer_create(e.fd, id, 1));
    buffer_create_refused(e.fd, 9, 1, TF_ERR_QUOTA, "max_buffers_per_uid");
    ck_assert_uint_eq(th_counter(&d, "limit_refusals"), 3);
    th_raw_client_close(&a);
    CK_COUNTER(&d, "pinned_buffers_live", 24, 15000);
    close(buffer_create(e.fd, 9, 1));
    th_raw_client_close(&b);
    th_raw_client_close(&e);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);

    CK_DAEMON_START(&d, "--max-buffers", "20");
    a = raw_open(&d);
    b = raw_open(&d);
    close(buffer_create(a.fd, 1, 1));
    close(buffer_create(a.fd, 2, 1));
    for (uint64_t id = 1; id <= 18; id++) close(buffer_create(b.fd, id, 1 + id % 3));
    buffer_create_refused(b.fd, 19, 1, TF_ERR_QUOTA, "max_buffers");
    th_raw_client_close(&a);
    th_raw_client_close(&b);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    CK_DAEMON_STOP(&d);

    CK_DAEMON_START(&d, "--client-pinned-bytes", "8192");
    a = raw_open(&d);
    close(buffer_create(a.fd, 1, 1));
    close(buffer_create(a.fd, 2, 1));
    buffer_create_refused(a.fd, 3, 1, TF_ERR_QUOTA, "pinned_bytes"); /* two pages are the quota */
    th_raw_client_close(&a);
    CK_COUNTER(&d, "pinned_bytes_live", 0, 15000);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Mappings of process pid (lines of /proc/pid/maps). */
static long process_mappings(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long n = 0;
    for (int ch; (ch = fgetc(f)) != EOF;) n += ch == '\n';
    fclose(f);
    return n;
}

/*
 * The mapping-exhaustion attack with the default limits: one uid creates
 * 1-byte buffers on connection after connection until refused. It is
 * stopped at [limits] max_buffers_per_uid, the daemon's mappings stay far
 * from vm.max_map_count, and a new client connects and moves 8 MiB intact.
 */
START_TEST(test_mapping_exhaustion_stopped) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    const long maps_before = process_mappings(d.pid);
    th_raw_client conns[6] = {{0}};
    uint64_t made = 0;
    int refused = 0;
    for (int k = 0; k < 6 && !refused; k++) {
        conns[k] = raw_open(&d);
        for (uint64_t id = 1; id <= 2000; id++) {
            Tenferro__Frame f;
            Tenferro__BufferCreate bc;
            build_create(&f, &bc, id, 1);
            int mem;
            Tenferro__Frame *r = call_fd(conns[k].fd, &f, &mem);
            ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
            if (r->result->status != TF_OK) {
                CK_RESULT(r->result, TF_ERR_QUOTA, "max_buffers_per");
                tf__frame_free(r);
                refused = made >= 4096; /* the uid's bound, not a connection's */
                break;
            }
            tf__frame_free(r);
            void *p = mmap(NULL, 1, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
            ck_assert_ptr_ne(p, MAP_FAILED);
            munmap(p, 1);
            close(mem);
            send_mapped(conns[k].fd, id);
            made++;
        }
    }
    ck_assert_uint_eq(made, 4096); /* 4 connections of 1024, then the uid's bound */
    /* Far below vm.max_map_count; the margin covers a sanitizer's own mappings of a busy daemon. */
    ck_assert_msg(process_mappings(d.pid) - maps_before < 4096 + 512,
                  "the daemon holds %ld mappings more than at start",
                  process_mappings(d.pid) - maps_before);
    tf_client *bystander = th_connect(&d);
    const size_t n = (8u << 20) / sizeof(double);
    double *in = malloc(n * sizeof *in), *out = NULL;
    size_t got = 0;
    fill(in, n);
    tf_tensor t;
    ck_assert_int_eq(tf_upload(bystander, TF_F64, 1, (int64_t[]){(int64_t)n}, in, &t), TF_OK);
    ck_assert_int_eq(tf_download(bystander, t, (void **)&out, &got), TF_OK);
    ck_assert_uint_eq(got, n * sizeof *in);
    ck_assert_int_eq(memcmp(in, out, got), 0);
    free(in);
    free(out);
    tf_disconnect(bystander);
    for (int k = 0; k < 6; k++)
        if (conns[k].fd > 0) th_raw_client_close(&conns[k]);
    CK_COUNTER(&d, "pinned_buffers_live", 0, 15000);
    /* Buffers are unmapped on the thread pool, just after they leave the books. */
    /* A margin for the thread pool's stacks and malloc's arenas, which the attack started. */
    for (int i = 0; i < 100 && process_mappings(d.pid) > maps_before + 256; i++) usleep(50000);
    ck_assert_msg(process_mappings(d.pid) <= maps_before + 256, "mappings left behind: %ld, %ld at start",
                  process_mappings(d.pid), maps_before);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *transfers_raw_suite(void) {
    Suite *s = suite_create("transfers-raw");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_completion_page_with_hello);
    tcase_add_test(tc, test_buffer_create_and_free);
    tcase_add_test(tc, test_upload_then_download);
    tcase_add_test(tc, test_transfer_refusals);
    tcase_add_test(tc, test_in_flight_is_busy);
    tcase_add_test(tc, test_released_transfer_frees_everything);
    tcase_add_test(tc, test_pinned_limits);
    tcase_add_test(tc, test_descriptor_waits_behind_queued_reply);
    tcase_add_test(tc, test_last_word_behind_held_descriptor);
    tcase_add_test(tc, test_killed_client_releases_everything);
    tcase_add_test(tc, test_stop_with_transfers_in_flight);
    tcase_add_test(tc, test_mailbox_requests);
    tcase_add_test(tc, test_mailbox_doorbell);
    tcase_add_test(tc, test_requests_behind_buffer_create);
    tcase_add_test(tc, test_hang_up_during_buffer_create);
    tcase_add_test(tc, test_shared_memory_used_only_once_mapped);
    tcase_add_test(tc, test_punched_huge_pages_do_not_kill);
    tcase_add_test(tc, test_buffer_count_limits);
    tcase_add_test(tc, test_mapping_exhaustion_stopped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    th_seed();
    SRunner *sr = srunner_create(transfers_raw_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
