/*
 * Pinned buffers and the completion page: host memory the daemon shares with
 * one client through a memfd it creates, sizes and seals itself.
 *
 Every such memfd is sealed against shrinking and growing before its fd
 * leaves the daemon. Once the client has mapped it and says so (Mapped), it
 * is sealed against new writable mappings, which also forbids punching holes
 * (tfd_memfd_seal), and every page is allocated again: from then on no page
 * under the daemon's mapping can be taken away, which would turn the daemon's
 * next access into a SIGBUS. Before that the daemon never touches the memory.
 * The daemon maps each memfd once, keeps that mapping for the object's
 * lifetime and never depends on the client's mapping: a client that unmaps
 * early, or dies, affects only itself.
 *
 * A pinned buffer is also registered with the backend (cudaHostRegister on
 * CUDA) once, when it is sealed, so each transfer is one DMA from or into
 * those pages. The per-connection table maps the client's buffer ids to records and
 * keeps the byte count that quotas and the status report read. Loop thread only.
 */
#ifndef TENFERRO_DAEMON_PINNED_H
#define TENFERRO_DAEMON_PINNED_H

#include <stddef.h>
#include <stdint.h>

#include "common/completion.h"
#include "common/id-table.h"
#include "daemon/backend/backend.h"

typedef struct tfd_pinned {
    uint64_t id;    /* first: the id-table key; chosen by the client */
    void *map;      /* the daemon's own MAP_SHARED mapping of the memfd */
    size_t bytes;   /* the memfd's sealed size */
    size_t charged; /* what the limits count: bytes rounded up to whole pages (tfd_pinned_charge) */
    int fd;         /* the daemon's descriptor of the memfd until it is sealed, else -1 */
    int sealed;     /* the client said Mapped and the seal held: transfers may use it */
    tf_status seal_status; /* why the seal failed (TF_OK: not tried yet, or sealed) */
    size_t mapped;  /* bytes mapped and registered: bytes rounded up to whole pages */
    int registered; /* the backend page-locked the mapping */
    int huge;       /* on 2 MiB pages from the system's huge page pool (pinned.c) */
    int in_flight;  /* a transfer uses it: it may be neither freed nor used by another */
    int creating;   /* reserved while its memfd is made off the loop: not usable yet */
} tfd_pinned;

typedef struct tfd_pinned_table {
    tf__id_table map;
    size_t count;
    size_t unsealed; /* buffers being created or not yet sealed: each holds a descriptor */
    uint64_t bytes; /* sum of live buffers' charged bytes */
} tfd_pinned_table;

/*
 * Creates a memfd called `name` of `bytes` bytes, seals it (no shrink, no
 * grow, no further seals) and maps it shared and zeroed into *map. *fd is the
 * daemon's copy of the memfd, to be passed to the client and then closed.
 * Returns TF_OK, or a status with the reason in msg and nothing left behind.
 */
tf_status tfd_memfd_create(const char *name, size_t bytes, void **map, size_t *mapped, int *fd,
                           char *msg, size_t msg_len);

/*
 * Seals memfd fd of `bytes` bytes, which the client has mapped, and allocates
 * its every page again (see above). TF_OK, or a typed refusal with msg.
 */
tf_status tfd_memfd_seal(int fd, size_t bytes, char *msg, size_t msg_len);

/* What a buffer of `bytes` costs the limits: whole pages, as the kernel pins them. */
size_t tfd_pinned_charge(uint64_t bytes);

/*
 * Creates pinned buffer `id`: a memfd (on huge pages where the pool has room)
 * mapped into the daemon, its descriptor kept in out->fd, and *fd a copy of it
 * for the client. Not usable until tfd_pinned_seal.
 */
tf_status tfd_pinned_create(uint64_t id, size_t bytes, tfd_pinned *out, int *fd, char *msg,
                            size_t msg_len);

/* Seals a created buffer and registers it with be; closes b->fd either way. */
tf_status tfd_pinned_seal(tfd_backend *be, tfd_pinned *b, char *msg, size_t msg_len);

/* Unregisters and unmaps a buffer no copy uses any more. */
void tfd_pinned_destroy(tfd_backend *be, tfd_pinned *b);

void tfd_pinned_table_init(tfd_pinned_table *t);
/* Frees the table itself; the caller destroyed the buffers first. */
void tfd_pinned_table_free(tfd_pinned_table *t);
/* The record for id, or NULL; valid until the next insert or remove. */
tfd_pinned *tfd_pinned_table_find(tfd_pinned_table *t, uint64_t id);
/* Inserts a copy of *b (its id must be absent and nonzero); -1 when out of memory. */
int tfd_pinned_table_insert(tfd_pinned_table *t, const tfd_pinned *b);
/* Marks b (a record of t) sealed, or refused with st. */
void tfd_pinned_table_sealed(tfd_pinned_table *t, tfd_pinned *b, tf_status st);
/* Removes id, copying its record into *removed; -1 when absent. */
int tfd_pinned_table_remove(tfd_pinned_table *t, uint64_t id, tfd_pinned *removed);

/*
 * Removes every buffer of the table, or (keep_busy) every one that neither a
 * transfer uses nor is still being created, handing each to destroy(arg, b).
 * Adds how many buffers and bytes went to *n and *bytes.
 */
void tfd_pinned_table_release(tfd_pinned_table *t, int keep_busy,
                              void (*destroy)(void *arg, tfd_pinned *b), void *arg, uint64_t *n,
                              uint64_t *bytes);

/*
 * Creates a client's completion page: TF_RING_MAP_BYTES of zeroed memfd, the
 * slots followed by the submission mailbox and the submission ring, sealed
 * against resizing; tfd_memfd_seal seals it further once the client mapped it.
 */
tf_status tfd_completion_page_create(tf__completion_slot **page, int *fd, char *msg,
                                     size_t msg_len);
void tfd_completion_page_destroy(tf__completion_slot *page);

/*
 * Publishes the outcome of the transfer that owns `slot`: the status first,
 * then state DONE with release ordering (a client that reads DONE reads the
 * status), then a futex wake of every waiter on the state word. The page is
 * shared between processes, so the wake is not FUTEX_PRIVATE.
 */
void tfd_completion_post(tf__completion_slot *page, uint32_t slot, tf_status status);

#endif
