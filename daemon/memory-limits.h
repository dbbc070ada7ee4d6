/*
 * Host memory a client makes the daemon hold for it, counted per connection
 * and per uid, and the gate that keeps it bounded (memory-limits.c):
 *
 * - queued reply bytes: every encoded reply from its encoding until libuv's
 *   write callback frees it (replies held behind one that carries a
 *   descriptor included), plus each Download's reply, reserved before its
 *   host buffer is allocated, plus each Upload's bytes from its decoding
 *   until its copy has run (handle-upload-download.c): a client whose stream is
 *   busy cannot pile up decoded uploads either. Before any frame of a connection is handled
 *   (read from the socket, already buffered, from the submission ring or the
 *   mailbox), the connection's input waits while its queued bytes or its
 *   uid's are at [limits] client_reply_bytes / uid_reply_bytes, or while a
 *   Download's reservation would take them over (unless the connection has
 *   nothing queued: one large Download always goes). It goes on once its
 *   writes (or, for the uid, any of the uid's writes) drain. A waiting
 *   connection whose queued bytes make no write progress for [limits]
 *   reply_stall_ms is closed, dropping them; so is a closing one whose last
 *   replies are never read.
 * - decode memory: a frame decoded on the thread pool may take its decode
 *   budget (TF__DECODE_BUDGET); the budgets of one uid's decodes in progress
 *   stay within [limits] uid_receive_bytes (one decode always goes), and a
 *   connection whose frame does not fit waits, in line, for one to end.
 *
 * Nobody is exempt, root included: this is the daemon's memory, not a slot.
 * Loop thread only.
 */
#ifndef TENFERRO_DAEMON_MEMORY_LIMITS_H
#define TENFERRO_DAEMON_MEMORY_LIMITS_H

#include <stdint.h>
#include <uv.h>

#include "common/frame.h"

struct tfd_conn;
struct tfd_server;

/* What all connections of one uid hold; shared by them, freed with the last. */
typedef struct tfd_uid_memory tfd_uid_memory;

/* One connection's share, and why its input waits (a field of tfd_conn). */
typedef struct tfd_conn_memory {
    tfd_uid_memory *uid;    /* NULL only when there was no memory for it at accept */
    uint64_t reply_bytes;   /* queued replies and reserved Download replies */
    uint64_t decode_bytes;  /* decode budget of the frame being decoded off the loop, or 0 */
    uint64_t reply_out;     /* reply bytes sent, or handed to libuv, so far (write progress) */
    int waits;              /* why input waits (memory-limits.c) */
    int pausing;            /* holds one tfd_conn_pause for those waits, until the timer lets go */
    uint64_t want;          /* the reservation the held frame needs, 0 for none */
    Tenferro__Frame *held;  /* a decoded frame waiting for room, handled first when it goes */
    int decode_woken;       /* woken for a decode: goes before the uid's connections not in line */
    int drop_output;        /* closing without waiting for the peer to read what is queued */
    uv_timer_t *timer;      /* wakes a waiting connection, watches for a stall */
    uint64_t progress_mark; /* bytes written at the last progress seen */
    uint64_t progress_ms;   /* when it was seen */
} tfd_conn_memory;

/* At accept, once the uid is known: joins (or starts) the uid's record. -1 when out of memory. */
int tfd_memory_attach(struct tfd_conn *c);
/* At the final free: leaves the uid's record and frees the connection's timer. */
void tfd_memory_detach(struct tfd_conn *c);

/* An encoded reply of n bytes is queued (from encode until its bytes are freed). */
void tfd_memory_reply_add(struct tfd_conn *c, uint64_t n);
/* n bytes of queued or reserved replies are gone: a waiting connection may go on. */
void tfd_memory_reply_release(struct tfd_conn *c, uint64_t n);
/* Reserves a Download reply of n bytes before its buffer is allocated (released as above). */
void tfd_memory_reply_reserve(struct tfd_conn *c, uint64_t n);

/*
 * Before a frame is taken from the socket buffer, the ring or the mailbox:
 * 1 when the connection may handle one; 0 when its queued replies (or its
 * uid's) are at the limit, and its input now waits.
 */
int tfd_memory_input_may_go(struct tfd_conn *c);
/*
 * Before a decoded frame is handled: 0 when it may be; 1 when it waits for
 * room (the gate above, and a Download's reservation), kept to be handled
 * first once there is.
 */
int tfd_memory_hold_frame(struct tfd_conn *c, Tenferro__Frame *frame);

/*
 * Before a frame of len bytes is decoded off the loop: 1 with its budget
 * counted; 0 when the uid's decodes in progress leave no room, and the
 * connection's input waits for one to end.
 */
int tfd_memory_decode_start(struct tfd_conn *c, uint32_t len);
/* The decode tfd_memory_decode_start counted has ended: the uid's waiting connections go on. */
void tfd_memory_decode_end(struct tfd_conn *c);

/* The connection is closing: a held frame and the waits go; its last replies are watched. */
void tfd_memory_closing(struct tfd_conn *c);

/* After a reload: limits may have grown, so every waiting connection looks again. */
void tfd_memory_limits_changed(struct tfd_server *srv);

#endif
