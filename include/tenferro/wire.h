/*
 * The shared-memory layouts of the wire protocol (docs/protocol.md, "Shared
 * memory beside the socket"), for clients written without this library: the
 * completion page the daemon hands over at the handshake (its memfd with
 * HelloReply), one slot per pending transfer, and the submission mailbox in
 * the page after it. Every field is little-endian, at the offset this
 * struct gives it on x86-64 and aarch64 (no padding: the asserts below).
 *
 * A slot: the client picks an IDLE one, stores PENDING, names it in its
 * Transfer request; the daemon writes `status` (a tf_status) and then stores
 * DONE, and wakes a FUTEX_WAIT on `state`. The client reads status once it
 * sees DONE and stores IDLE to reuse the slot.
 *
 * The mailbox: the client fills the request fields, stores SUBMITTED, then
 * reads daemon_polling (both sequentially consistent); on 0 it sends a
 * MailboxDoorbell frame. The daemon starts the request only after handling
 * every frame up to after_seq (a doorbell's own number does not count: name
 * the last other frame sent), writes status and message, stores ANSWERED,
 * and wakes the futex on state when client_sleeping is 1. The client reads
 * the answer and stores IDLE. The daemon reads each field once and checks
 * everything, as for a frame.
 */
#ifndef TENFERRO_WIRE_H
#define TENFERRO_WIRE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The completion page: slots from offset 0; the mailbox at TF_MAILBOX_OFFSET; the mapping's size. */
#define TF_COMPLETION_PAGE_BYTES 4096u
#define TF_MAILBOX_OFFSET TF_COMPLETION_PAGE_BYTES
#define TF_COMPLETION_MAP_BYTES (2 * TF_COMPLETION_PAGE_BYTES)

/* Values of a slot's state word. */
enum {
    TF_SLOT_IDLE = 0,    /* free for the client to use */
    TF_SLOT_PENDING = 1, /* set by the client before it sends the Transfer */
    TF_SLOT_DONE = 2,    /* set by the daemon once the copy completed; status says how */
};

typedef struct tf_completion_slot {
    uint32_t state;  /* the futex word */
    uint32_t status; /* tf_status of the finished transfer, valid once state is DONE */
} tf_completion_slot;

#define TF_COMPLETION_SLOTS (TF_COMPLETION_PAGE_BYTES / sizeof(tf_completion_slot))

/* Values of the mailbox's state word. */
enum {
    TF_MAILBOX_IDLE = 0,      /* empty; the client may write a request */
    TF_MAILBOX_SUBMITTED = 1, /* a request waits for the daemon */
    TF_MAILBOX_ANSWERED = 2,  /* status and message hold the daemon's answer */
};

typedef struct tf_mailbox {
    uint32_t state;           /* offset 0: the futex word */
    uint32_t daemon_polling;  /* 4: 1 while the daemon looks without a doorbell */
    uint32_t client_sleeping; /* 8: 1 when the client sleeps on state */
    uint32_t direction;       /* 12: TransferDirection */
    uint32_t slot;            /* 16: completion slot of the transfer */
    uint32_t status;          /* 20: the answer, a tf_status */
    uint64_t after_seq;       /* 24: start only after the frame with this sequence number */
    uint64_t buffer;          /* 32: pinned buffer id */
    uint64_t tensor;          /* 40: tensor id */
    uint64_t offset;          /* 48: byte offset in the buffer */
    uint64_t bytes;           /* 56: bytes to move */
    char message[256];        /* 64: the answer's reason when refused, NUL-terminated */
} tf_mailbox;

/*
 * The submission ring, in the pages after the mailbox (HelloReply's
 * ring_offset, ring_request_bytes, ring_reply_bytes; 0: none offered). A
 * header page of four cache lines, then the request area, then the reply
 * area. Each area holds entries back to back, each a tf_ring_entry then
 * `bytes` bytes of an encoded tenferro.Frame (without the socket's length
 * prefix), padded to a multiple of 8; an entry may wrap around the end of
 * its area. Offsets are byte counts since the connection began: position p
 * lies at p % area_bytes.
 *
 * The client writes a request entry at req_head, then stores req_head past
 * it and reads daemon_polling in the mailbox (both sequentially consistent):
 * on 0 it sends a MailboxDoorbell frame. The daemon reads entries up to
 * req_head, each only once every frame with a sequence number up to its
 * after_seq has been handled, copies it out of the shared page before it
 * checks it, handles it exactly as the same frame sent on the socket, and
 * stores req_tail past it. A reply to a ring request is written at rep_head
 * in the reply area; the daemon then stores rep_head, increments rep_count
 * and wakes a FUTEX_WAIT on rep_count when client_sleeping is 1. The client
 * reads it and stores rep_tail past it. Only Submit and SessionOpen frames
 * (each answered by one reply) may travel in the ring; any other entry is
 * answered in the ring with TF_ERR_INVALID_ARGUMENT. A frame is sent on the
 * socket only once every ring request has been answered, and the reverse.
 */
typedef struct tf_ring_header {
    uint64_t req_head;        /* 0: client: request bytes written */
    uint64_t pad0[7];
    uint64_t req_tail;        /* 64: daemon: request bytes consumed */
    uint64_t pad1[7];
    uint64_t rep_head;        /* 128: daemon: reply bytes written */
    uint32_t rep_count;       /* 136: daemon: replies written (the futex word) */
    uint32_t client_sleeping; /* 140: client: 1 while it sleeps on rep_count */
    uint64_t pad2[6];
    uint64_t rep_tail;        /* 192: client: reply bytes read */
    uint64_t pad3[7];
} tf_ring_header;

typedef struct tf_ring_entry {
    uint32_t bytes;     /* 0: length of the encoded frame that follows */
    uint32_t reserved;  /* 4: 0 */
    uint64_t seq;       /* 8: the frame's sequence number, repeated */
    uint64_t after_seq; /* 16: the last frame sent on the socket before this one */
} tf_ring_entry;

/* Where this daemon places the ring and how large its areas are. */
#define TF_RING_OFFSET TF_COMPLETION_MAP_BYTES
#define TF_RING_HEADER_BYTES 4096u
#define TF_RING_REQUEST_BYTES (64u << 10)
#define TF_RING_REPLY_BYTES (16u << 10)
#define TF_RING_MAP_BYTES \
    (TF_RING_OFFSET + TF_RING_HEADER_BYTES + TF_RING_REQUEST_BYTES + TF_RING_REPLY_BYTES)

_Static_assert(sizeof(tf_ring_header) == 256, "the ring header is four cache lines");
_Static_assert(sizeof(tf_ring_entry) == 24, "a ring entry header has no padding");
_Static_assert(sizeof(tf_completion_slot) == 8, "a slot is two words");
_Static_assert(sizeof(tf_mailbox) == 320, "the mailbox has no padding");

#ifdef __cplusplus
}
#endif

#endif
