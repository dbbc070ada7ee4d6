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

#endif
