/*
 * Pinned buffers and pending transfers on the client side (docs/transfers.md).
 * A buffer is the daemon's sealed memfd, mapped here MAP_SHARED, so both
 * processes see one copy of its pages. A pending transfer owns its buffer and
 * its tensor from an accepted Transfer until tf_pending_wait hands them back:
 * the buffer's `transfer` and the tensor handle's `in_flight` make writing,
 * freeing, downloading or transferring them again TF_ERR_BUSY here, before
 * any round trip. Operations may read the tensor meanwhile: they reach the
 * daemon after the transfer was accepted, so its stream runs them after the
 * copy. Completion comes through the completion page (completion.c), never
 * through a reply, so polling costs no system call. The Transfer messages and the buffer life
 * cycle here serve the staged blocking route (staging.c) too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/internal.h"

/* Pushes `node` at the front of the doubly linked list `head`. */
#define LIST_PUSH(head, node)                                                                     \
    do {                                                                                          \
        (node)->prev = NULL;                                                                      \
        (node)->next = (head);                                                                    \
        if (head) (head)->prev = (node);                                                          \
        (head) = (node);                                                                          \
    } while (0)

/* Takes `node` out of the doubly linked list `head`. */
#define LIST_REMOVE(head, node)                                                                   \
    do {                                                                                          \
        if ((node)->prev)                                                                         \
            (node)->prev->next = (node)->next;                                                    \
        else                                                                                      \
            (head) = (node)->next;                                                                \
        if ((node)->next) (node)->next->prev = (node)->prev;                                      \
    } while (0)

/* Keeps the client's last error across calls made only to tidy up after a failure. */
typedef struct saved_error {
    char text[sizeof ((tf_client *)0)->last_error];
} saved_error;

static void save_error(const tf_client *c, saved_error *s) { memcpy(s->text, c->last_error, sizeof s->text); }
static void restore_error(tf_client *c, const saved_error *s) { memcpy(c->last_error, s->text, sizeof s->text); }

/* ---- buffers ---- */

/* Asks the daemon to free buffer `id`; returns its answer. */
static tf_status send_buffer_free(tf_client *c, uint64_t id) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__BufferFree body = TENFERRO__BUFFER_FREE__INIT;
    body.buffer = id;
    req.body_case = TENFERRO__FRAME__BODY_BUFFER_FREE;
    req.buffer_free = &body;
    return tf__call_result(c, &req, "BufferFree");
}

/*
 * Maps a new buffer's memfd (consumes fd). MAP_POPULATE takes the page faults
 * now, at creation, which is the step meant to be expensive, rather than in
 * the first transfers.
 */
static tf_status map_buffer(tf_client *c, int fd, size_t bytes, uint8_t **data) {
    struct stat sb;
    tf_status st = TF_OK;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < bytes) {
        st = tf__fail(c, TF_ERR_PROTOCOL, "the daemon's pinned buffer is shorter than %zu bytes",
                      bytes);
    } else {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED)
            st = tf__fail(c, TF_ERR_NO_MEMORY, "cannot map a pinned buffer of %zu bytes: %s",
                          bytes, strerror(errno));
        else
            *data = p;
    }
    close(fd);
    return st;
}

tf_status tf__buffer_create(tf_client *c, size_t bytes, tf_pinned_buffer **out) {
    tf_pinned_buffer *b = calloc(1, sizeof *b);
    if (!b) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory");
    b->client = c;
    b->id = ++c->next_buffer_id;
    b->bytes = bytes;
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__BufferCreate body = TENFERRO__BUFFER_CREATE__INIT;
    body.buffer = b->id;
    body.bytes = bytes;
    req.body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
    req.buffer_create = &body;
    tf_status st = tf__call_result(c, &req, "BufferCreate");
    if (st == TF_OK) {
        int fd = tf__take_fd(c);
        st = fd >= 0 ? map_buffer(c, fd, bytes, &b->data)
                     : tf__fail(c, TF_ERR_PROTOCOL,
                                "the daemon created pinned buffer %llu without passing its memory",
                                (unsigned long long)b->id);
        /* Mapped once and for all: the daemon may seal it and pin its pages. */
        if (st == TF_OK) st = tf__send_mapped(c, b->id);
        if (st != TF_OK && !c->broken) {
            saved_error why;
            save_error(c, &why);
            send_buffer_free(c, b->id);
            restore_error(c, &why);
        }
    }
    if (st != TF_OK) {
        free(b);
        return st;
    }
    LIST_PUSH(c->buffers, b);
    *out = b;
    return tf__ok(c);
}

/* Unmaps and forgets a buffer on this side only. */
static void destroy_buffer(tf_pinned_buffer *b) {
    tf_client *c = b->client;
    munmap(b->data, b->bytes);
    LIST_REMOVE(c->buffers, b);
    if (c->staging == b) c->staging = NULL;
    free(b);
}

tf_status tf__buffer_free(tf_pinned_buffer *b) {
    tf_client *c = b->client;
    tf_status st = c->broken ? TF_ERR_DISCONNECTED : send_buffer_free(c, b->id);
    if (st == TF_ERR_BUSY) return st;
    destroy_buffer(b);
    /*
     * A lost connection freed the daemon's side already: only the mapping was left. (A lost
     * device learnt during this call is still reported: TF_ERR_DEVICE.)
     */
    return st == TF_ERR_DISCONNECTED ? tf__ok(c) : st;
}

tf_status tf_pinned_buffer_new(tf_client *c, size_t bytes, tf_pinned_buffer **out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (bytes == 0) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "a pinned buffer needs at least 1 byte");
    if (!c->completion)
        return tf__fail(c, TF_ERR_UNSUPPORTED,
                        "this tenferrod offers no pinned buffers (it passed no completion page)");
    return tf__buffer_create(c, bytes, out);
}

void *tf_pinned_buffer_data(tf_pinned_buffer *b) { return b && !b->transfer ? b->data : NULL; }

size_t tf_pinned_buffer_size(const tf_pinned_buffer *b) { return b ? b->bytes : 0; }

tf_status tf_pinned_buffer_free(tf_pinned_buffer *b) {
    if (!b) return TF_OK;
    if (b->transfer)
        return tf__fail(b->client, TF_ERR_BUSY,
                        "pinned buffer %llu is in a pending transfer: wait for it or release it",
                        (unsigned long long)b->id);
    return tf__buffer_free(b);
}

/* ---- transfers ---- */

tf_status tf__transfer_send(tf_client *c, uint32_t direction, const tf_pinned_buffer *b,
                            tf_tensor t, size_t bytes, uint32_t slot, uint64_t *ticket) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (tf__mailbox_usable(c)) {
        tf__slot_arm(c, slot, bytes);
        tf_status st = tf__mailbox_submit(c, direction, b->id, t, bytes, slot);
        if (st != TF_OK) {
            tf__slot_release(c, slot);
            return st;
        }
        *ticket = 0;
        return TF_OK;
    }
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__Transfer body = TENFERRO__TRANSFER__INIT;
    body.direction = direction;
    body.buffer = b->id;
    body.tensor = t;
    body.slot = slot;
    body.offset = 0;
    body.bytes = bytes;
    req.body_case = TENFERRO__FRAME__BODY_TRANSFER;
    req.transfer = &body;
    /* PENDING before the request leaves: the daemon may finish before the Result is read. */
    tf__slot_arm(c, slot, bytes);
    tf_status st = tf__send(c, &req);
    if (st != TF_OK) {
        tf__slot_release(c, slot);
        return st;
    }
    *ticket = req.seq;
    return TF_OK;
}

tf_status tf__transfer_result(tf_client *c, uint64_t ticket, uint32_t slot) {
    tf_status st = ticket ? tf__recv_result(c, ticket, "Transfer") : tf__mailbox_answer(c);
    if (st != TF_OK) tf__slot_release(c, slot);
    return st;
}

/* The word for a direction in messages. */
static const char *direction_name(uint32_t direction) {
    return direction == TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD ? "upload" : "download";
}

tf_status tf__transfer_wait(tf_client *c, uint32_t slot, uint32_t direction, tf_tensor t) {
    tf_status moved = TF_OK;
    tf_status st = tf__slot_wait(c, slot, &moved);
    if (st != TF_OK) return st;
    tf__slot_release(c, slot);
    if (moved == TF_OK) return tf__ok(c);
    return tf__fail(c, moved, "the %s of tensor %llu failed in tenferrod: %s",
                    direction_name(direction), (unsigned long long)t, tf_strerror(moved));
}

/*
 * Starts a pending transfer: every refusal is found before anything changes
 * (here, or by the daemon before it touches the slot), so a refused call
 * leaves the buffer, the tensor and the slots as they were.
 */
static tf_status submit(tf_client *c, uint32_t direction, tf_pinned_buffer *b, tf_tensor t,
                        tf_pending **out) {
    if (!c || !b || !out) return c ? tf__fail(c, TF_ERR_INVALID_ARGUMENT, "NULL argument")
                                   : TF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (!c->completion)
        return tf__fail(c, TF_ERR_UNSUPPORTED,
                        "this tenferrod offers no pending transfers (it passed no completion page)");
    if (b->client != c)
        return tf__fail(c, TF_ERR_UNKNOWN_HANDLE,
                        "pinned buffer %llu belongs to another connection",
                        (unsigned long long)b->id);
    if (b->transfer)
        return tf__fail(c, TF_ERR_BUSY,
                        "pinned buffer %llu is already in a pending transfer: wait for it first",
                        (unsigned long long)b->id);
    size_t bytes;
    tf_status st = tf__transferable(c, t, &bytes);
    if (st != TF_OK) return st;
    if (bytes != b->bytes)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "pinned buffer %llu has %zu bytes but tensor %llu has %zu: the sizes must "
                        "be equal",
                        (unsigned long long)b->id, b->bytes, (unsigned long long)t, bytes);
    tf_pending *p = calloc(1, sizeof *p);
    if (!p) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory");
    uint32_t slot = 0;
    uint64_t seq = 0;
    /* Each step gives the slot back itself when it fails. */
    st = tf__slot_acquire(c, &slot);
    if (st == TF_OK) st = tf__transfer_send(c, direction, b, t, bytes, slot, &seq);
    if (st == TF_OK) st = tf__transfer_result(c, seq, slot);
    if (st != TF_OK) {
        free(p);
        return st;
    }
    p->client = c;
    p->slot = slot;
    p->direction = direction;
    p->tensor = t;
    p->buffer = b;
    b->transfer = p;
    tf__handle *h = tf__id_table_find(&c->handles, t); /* found again: a flush may have moved it */
    if (h) h->in_flight = direction;
    LIST_PUSH(c->pendings, p);
    *out = p;
    return tf__ok(c);
}

tf_status tf_upload_pending(tf_client *c, tf_pinned_buffer *b, tf_tensor destination,
                            tf_pending **pending) {
    return submit(c, TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD, b, destination, pending);
}

tf_status tf_download_pending(tf_client *c, tf_tensor source, tf_pinned_buffer *b,
                              tf_pending **pending) {
    return submit(c, TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD, b, source, pending);
}

int tf_pending_is_ready(const tf_pending *p) {
    if (!p) return 0;
    const tf_client *c = p->client;
    return c->broken ||
           __atomic_load_n(&c->completion[p->slot].state, __ATOMIC_ACQUIRE) == TF__SLOT_DONE;
}

/* Takes a pending transfer off its client's list and frees it. */
static void forget_pending(tf_pending *p) {
    LIST_REMOVE(p->client->pendings, p);
    free(p);
}

tf_status tf_pending_wait(tf_pending *p, tf_tensor *tensor, tf_pinned_buffer **buffer) {
    if (!p) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = p->client;
    tf_status st = tf__transfer_wait(c, p->slot, p->direction, p->tensor);
    tf__handle *h = tf__id_table_find(&c->handles, p->tensor);
    if (h) h->in_flight = 0;
    tf_tensor t = p->tensor;
    tf_pinned_buffer *b = p->buffer;
    b->transfer = NULL;
    forget_pending(p);
    saved_error why;
    save_error(c, &why);
    if (tensor)
        *tensor = t;
    else
        tf_tensor_free(c, t);
    if (buffer)
        *buffer = b;
    else
        tf_pinned_buffer_free(b);
    restore_error(c, &why);
    return st;
}

/*
 * Tells the daemon nobody waits for the transfer in `slot` (it frees the
 * buffer and the tensor once the copy completed) and leaves the slot to be
 * reclaimed once DONE: the daemon still finishes (and marks) the copy it was
 * given. Keeps the caller's last error.
 */
static void send_release(tf_client *c, uint32_t slot) {
    if (!c->broken) {
        Tenferro__Frame fr = TENFERRO__FRAME__INIT;
        Tenferro__TransferRelease body = TENFERRO__TRANSFER_RELEASE__INIT;
        body.slot = slot;
        fr.body_case = TENFERRO__FRAME__BODY_TRANSFER_RELEASE;
        fr.transfer_release = &body;
        saved_error why;
        save_error(c, &why);
        tf__send(c, &fr);
        restore_error(c, &why);
    }
    tf__slot_detach(c, slot);
}

void tf__send_due_releases(tf_client *c) {
    for (uint32_t w = 0; w < TF__COMPLETION_SLOTS / 64; w++) {
        uint64_t bits = c->slot_release_due[w];
        c->slot_release_due[w] = 0;
        while (bits) {
            send_release(c, w * 64 + (uint32_t)__builtin_ctzll(bits));
            bits &= bits - 1;
        }
    }
}

void tf_pending_release(tf_pending *p) {
    if (!p) return;
    tf_client *c = p->client;
    /*
     * Work queued and not yet submitted reads the tensor: a release sent now
     * would reach the daemon before that work and let it free the tensor
     * first. The release follows the queue's submission instead; the slot
     * stays taken until then, so no later transfer can be given it.
     */
    if (!c->broken && tf__queue_names(c, p->tensor))
        c->slot_release_due[p->slot / 64] |= (uint64_t)1 << (p->slot % 64);
    else
        send_release(c, p->slot);
    tf__id_table_remove(&c->handles, p->tensor, NULL);
    destroy_buffer(p->buffer);
    forget_pending(p);
}

void tf__pinned_release_all(tf_client *c) {
    while (c->pendings) forget_pending(c->pendings);
    while (c->buffers) destroy_buffer(c->buffers);
}
