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

#include "tenferro/wire.h"

/* The library's names for the public layout (include/tenferro/wire.h). */
#define TF__COMPLETION_PAGE_BYTES TF_COMPLETION_PAGE_BYTES
#define TF__COMPLETION_SLOTS TF_COMPLETION_SLOTS
#define TF__MAILBOX_OFFSET TF_MAILBOX_OFFSET
#define TF__COMPLETION_MAP_BYTES TF_COMPLETION_MAP_BYTES
enum {
    TF__SLOT_IDLE = TF_SLOT_IDLE,
    TF__SLOT_PENDING = TF_SLOT_PENDING,
    TF__SLOT_DONE = TF_SLOT_DONE,
    TF__MAILBOX_IDLE = TF_MAILBOX_IDLE,
    TF__MAILBOX_SUBMITTED = TF_MAILBOX_SUBMITTED,
    TF__MAILBOX_ANSWERED = TF_MAILBOX_ANSWERED,
};
typedef tf_completion_slot tf__completion_slot;
typedef tf_mailbox tf__mailbox;

_Static_assert(sizeof(tf__mailbox) <= TF__COMPLETION_PAGE_BYTES, "the mailbox fits its page");

#endif
