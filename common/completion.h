/*
 * The completion page shared by the daemon and one client: an array of slots,
 * one per pending transfer in flight. The client picks a free slot and names
 * it in its Transfer request; the daemon writes the outcome there when the
 * copy has completed and wakes any waiter with a futex on `state`. Reading a
 * slot is a plain atomic load, so checking readiness costs no system call.
 */
#ifndef TENFERRO_COMMON_COMPLETION_H
#define TENFERRO_COMMON_COMPLETION_H

#include <stdint.h>

#define TF__COMPLETION_PAGE_BYTES 4096u
#define TF__COMPLETION_SLOTS (TF__COMPLETION_PAGE_BYTES / sizeof(tf__completion_slot))

/* Values of a slot's state word. */
enum {
    TF__SLOT_IDLE = 0,    /* free for the client to use */
    TF__SLOT_PENDING = 1, /* set by the client before it sends the Transfer */
    TF__SLOT_DONE = 2,    /* set by the daemon once the copy completed; status says how */
};

typedef struct tf__completion_slot {
    uint32_t state;  /* accessed with __atomic builtins; the futex word */
    uint32_t status; /* tf_status of the finished transfer, valid once state is DONE */
} tf__completion_slot;

/*
 * The submission mailbox, in the page after the slots: a client may start a
 * pending transfer by writing its request here instead of sending a
 * Transfer frame, which spares a socket hop while the daemon's loop polls
 * (daemon_polling = 1). The client fills the fields, stores state SUBMITTED,
 * then reads daemon_polling (both sequentially consistent); if it reads 0
 * the daemon may be asleep and it sends a MailboxDoorbell frame. The daemon
 * stores daemon_polling = 0 before it sleeps and then looks once more, so
 * one of the two always sees the other. The daemon starts the request only
 * after it has handled every frame up to after_seq (the client's last
 * sequence number before it), answers with status and message, stores
 * state ANSWERED and, if the client said it sleeps, wakes the futex on
 * state. The client reads the answer and stores state IDLE. The daemon
 * reads each field once and checks everything, as for a frame.
 */
#define TF__MAILBOX_OFFSET TF__COMPLETION_PAGE_BYTES
#define TF__COMPLETION_MAP_BYTES (2 * TF__COMPLETION_PAGE_BYTES)

/* Values of the mailbox's state word. */
enum {
    TF__MAILBOX_IDLE = 0,      /* empty; the client may write a request */
    TF__MAILBOX_SUBMITTED = 1, /* a request waits for the daemon */
    TF__MAILBOX_ANSWERED = 2,  /* status and message hold the daemon's answer */
};

typedef struct tf__mailbox {
    uint32_t state;           /* futex word */
    uint32_t daemon_polling;  /* 1: the loop looks at the mailbox without a doorbell */
    uint32_t client_sleeping; /* 1: the client sleeps on state: wake it after answering */
    uint32_t direction;       /* TransferDirection */
    uint32_t slot;            /* completion slot of the transfer */
    uint32_t status;          /* the answer: tf_status */
    uint64_t after_seq;       /* start only after the frame with this sequence number */
    uint64_t buffer, tensor, offset, bytes;
    char message[256];        /* the answer's reason when refused */
} tf__mailbox;

_Static_assert(sizeof(tf__mailbox) <= TF__COMPLETION_PAGE_BYTES, "the mailbox fits its page");

#endif
