/*
 * The reservation table: per execution domain, at most one held session, and a
 * FIFO of openers waiting for it.
 *
 * The table is pure bookkeeping (no I/O, no timers, no libuv), so its rules
 * can be unit-tested alone: check-and-set admission that never waits, typed
 * refusal for the same owner (re-entry) and for another owner (contention),
 * and, under the `wait` policy, FIFO hand-over when the holder lets go. A
 * scoped root never takes the reservation; it only has to find it free (or
 * wait its turn in the same FIFO).
 */
#ifndef TENFERRO_DAEMON_RESERVATION_H
#define TENFERRO_DAEMON_RESERVATION_H

#include <stddef.h>
#include <stdint.h>

typedef enum tfd_policy {
    TFD_POLICY_REJECT = 0, /* refuse with TF_ERR_CONTENDED */
    TFD_POLICY_WAIT = 1,   /* queue FIFO until a deadline */
} tfd_policy;

typedef enum tfd_admission {
    TFD_ADMITTED = 0,
    TFD_REENTERED = 1, /* the owner already holds this domain */
    TFD_CONTENDED = 2, /* another owner holds it and the policy is reject */
    TFD_QUEUED = 3,    /* another owner holds it; the waiter was appended */
} tfd_admission;

typedef struct tfd_waiter {
    struct tfd_waiter *next, *prev;
    void *owner;      /* the connection */
    int held;         /* 1: held opener (takes the reservation); 0: scoped root */
    uint64_t session_id; /* for a held opener: the id it gets when admitted */
    int queued;       /* 1 while in a queue */
} tfd_waiter;

typedef struct tfd_reservation {
    unsigned domain;
    void *holder;        /* owner of the held session, NULL when free */
    uint64_t session_id; /* the held session's id */
    uint64_t since_ms;   /* when the holder took it */
    tfd_waiter *head, *tail;
    size_t n_queued;
} tfd_reservation;

void tfd_reservation_init(tfd_reservation *r, unsigned domain);

/*
 * Asks for the domain on behalf of w->owner: a held opener takes the
 * reservation, a scoped root only needs it free. Never waits; under the wait
 * policy a refused request is appended to the FIFO and TFD_QUEUED returned.
 * A request made while others are already queued joins the queue too, so
 * nobody overtakes an earlier waiter.
 */
tfd_admission tfd_reservation_request(tfd_reservation *r, tfd_waiter *w, tfd_policy policy,
                                      uint64_t now_ms);

/* Releases the reservation if `owner` holds it; returns 1 when it did. */
int tfd_reservation_release(tfd_reservation *r, void *owner);

/*
 * After a release: pops the next waiter that may now run (FIFO), making it the
 * holder when it is a held opener. Returns NULL when nobody can be admitted
 * (queue empty, or the domain was taken by the opener admitted just before).
 */
tfd_waiter *tfd_reservation_admit_next(tfd_reservation *r, uint64_t now_ms);

/* Takes a waiter out of the queue (deadline passed, or its owner went away). */
void tfd_reservation_cancel(tfd_reservation *r, tfd_waiter *w);

#endif
