/*
 * Pinned buffers and the completion page (see pinned.h): sealed memfds, the
 * daemon's mappings of them, their registration with the backend, and the
 * per-connection buffer table.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/pinned.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1; older C libraries lack the name */
#endif

/* At creation: the size is fixed. Sealing against new seals waits for tfd_memfd_seal. */
#define CREATE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)
/* Once the client has mapped: no new writable mapping, no write(2), no hole punching. */
#define MAPPED_SEALS (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

/* Out of memory or room is the client's to fix (smaller or fewer buffers); the rest is the system's. */
static tf_status status_of_errno(int err) {
    return err == ENOMEM || err == ENOSPC || err == EFBIG || err == EOVERFLOW ? TF_ERR_NO_MEMORY
                                                                              : TF_ERR_IO;
}

tf_status tfd_memfd_create(const char *name, size_t bytes, void **map, size_t *mapped, int *fd,
                           char *msg, size_t msg_len) {
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (bytes == 0 || bytes > (size_t)INT64_MAX - pg) {
        snprintf(msg, msg_len, "a shared buffer of %zu bytes cannot be created", bytes);
        return TF_ERR_INVALID_ARGUMENT;
    }
    size_t rounded = tfd_pinned_charge(bytes); /* the mapping is whole pages, as the limits count */
    const char *what = "memfd_create";
    int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0) goto fail;
    what = "ftruncate";
    if (ftruncate(f, (off_t)bytes) != 0) goto fail;
    what = "sealing";
    if (fcntl(f, F_ADD_SEALS, CREATE_SEALS) != 0) goto fail;
    what = "mmap";
    void *p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) goto fail;
    *map = p;
    *mapped = rounded;
    *fd = f;
    return TF_OK;
fail:;
    int err = errno;
    if (f >= 0) close(f);
    snprintf(msg, msg_len, "cannot create a shared buffer of %zu bytes (%s: %s)", bytes, what,
             strerror(err));
    return status_of_errno(err);
}

/*
 * Seals a memfd the client has mapped: F_SEAL_FUTURE_WRITE keeps the mappings
 * made so far (the daemon's and the client's) writable but refuses any new
 * one, write(2), fallocate(PUNCH_HOLE) and madvise(MADV_REMOVE), so from here
 * on no page under the daemon's mapping can be taken away. A client that
 * punched holes before this point is made whole by allocating every page
 * again (fallocate mode 0): on huge pages whose pool it emptied meanwhile that
 * fails, typed, instead of the daemon's next access dying with SIGBUS.
 */
tf_status tfd_memfd_seal(int fd, size_t bytes, char *msg, size_t msg_len) {
    /* A client may have added seals itself (F_SEAL_SEAL among them): what counts is the result. */
    (void)fcntl(fd, F_ADD_SEALS, MAPPED_SEALS);
    int seals = fcntl(fd, F_GET_SEALS);
    const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE;
    if (seals < 0 || (seals & need) != need) {
        snprintf(msg, msg_len,
                 "the shared memory could not be sealed against hole punching (seals 0x%x): "
                 "it was sealed against further seals by the client",
                 seals < 0 ? 0 : (unsigned)seals);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0) {
        int err = errno;
        snprintf(msg, msg_len,
                 "the pages of %zu bytes of shared memory cannot be held (fallocate: %s): the "
                 "system has no room for them, or the client freed them before saying Mapped",
                 bytes, strerror(err));
        return status_of_errno(err);
    }
    return TF_OK;
}

/* Huge pages are tried for buffers of whole 2 MiB pages from this size on. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
#define HUGE_FROM_BYTES ((size_t)4 << 20)

/*
 * A sealed memfd of `bytes` on 2 MiB pages from the system's huge page pool,
 * mapped: 0, or -1 (nothing left behind) when the pool has no room or the
 * system offers none. A device copies such a buffer with one page-table entry
 * per 2 MiB rather than per 4 KiB, and the CPU touches it with fewer TLB
 * misses. Only sizes of whole huge pages qualify: both sides map exactly the
 * buffer's size, and a huge-page mapping must be whole pages.
 */
static int memfd_create_huge(size_t bytes, void **map, size_t *mapped, int *fd) {
    if (bytes < HUGE_FROM_BYTES || bytes % HUGE_PAGE_BYTES != 0) return -1;
    int f = memfd_create("tenferro-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
    if (f < 0) return -1;
    void *p = MAP_FAILED;
    /* The reservation at mmap fails at once when the pool is short; faults never SIGBUS later. */
    if (ftruncate(f, (off_t)bytes) == 0 && fcntl(f, F_ADD_SEALS, CREATE_SEALS) == 0)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) {
        close(f);
        return -1;
    }
    *map = p;
    *mapped = bytes;
    *fd = f;
    return 0;
}

size_t tfd_pinned_charge(uint64_t bytes) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t pg = page > 0 ? (uint64_t)page : 4096;
    return (size_t)((bytes + pg - 1) / pg * pg);
}

tf_status tfd_pinned_create(uint64_t id, size_t bytes, tfd_pinned *out, int *fd, char *msg,
                            size_t msg_len) {
    memset(out, 0, sizeof *out);
    out->id = id;
    out->bytes = bytes;
    out->charged = tfd_pinned_charge(bytes);
    out->fd = -1;
    int f = -1;
    if (memfd_create_huge(bytes, &out->map, &out->mapped, &f) == 0) {
        out->huge = 1;
    } else {
        tf_status st =
            tfd_memfd_create("tenferro-pinned", bytes, &out->map, &out->mapped, &f, msg, msg_len);
        if (st != TF_OK) return st;
        /* Where shared memory may take transparent huge pages on request, ask (else a no-op). */
        if (bytes >= HUGE_FROM_BYTES) (void)madvise(out->map, out->mapped, MADV_HUGEPAGE);
    }
    /* The daemon keeps a descriptor until the client says Mapped: sealing needs one. */
    *fd = fcntl(f, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0) {
        int err = errno;
        munmap(out->map, out->mapped);
        close(f);
        out->map = NULL;
        snprintf(msg, msg_len, "cannot pass a pinned buffer of %zu bytes: %s", bytes, strerror(err));
        return status_of_errno(err);
    }
    out->fd = f;
    return TF_OK;
}

tf_status tfd_pinned_seal(tfd_backend *be, tfd_pinned *b, char *msg, size_t msg_len) {
    tf_status st = tfd_memfd_seal(b->fd, b->bytes, msg, msg_len); /* the file's size: it may not grow */
    close(b->fd);
    b->fd = -1;
    if (st != TF_OK) return st;
    /* Registered only now: the pages page-locked for DMA are the ones the seal holds in the file. */
    if (be->vt->host_register) {
        char why[256] = "";
        st = be->vt->host_register(be, b->map, b->mapped, why, sizeof why);
        if (st != TF_OK) {
            snprintf(msg, msg_len, "cannot pin a buffer of %zu bytes on %s: %s", b->bytes,
                     be->vt->name, why);
            return st;
        }
        b->registered = 1;
    }
    return TF_OK;
}

void tfd_pinned_destroy(tfd_backend *be, tfd_pinned *b) {
    if (b->fd >= 0) close(b->fd);
    b->fd = -1;
    if (b->registered && be->vt->host_unregister) be->vt->host_unregister(be, b->map);
    b->registered = 0;
    if (b->map && munmap(b->map, b->mapped) != 0)
        tfd_log(TFD_LOG_ERROR, "munmap of pinned buffer %llu failed: %s", (unsigned long long)b->id,
                strerror(errno));
    b->map = NULL;
}

void tfd_pinned_table_init(tfd_pinned_table *t) {
    memset(t, 0, sizeof *t);
    tf__id_table_init(&t->map, sizeof(tfd_pinned));
}

void tfd_pinned_table_free(tfd_pinned_table *t) {
    tf__id_table_free(&t->map);
    t->count = 0;
    t->bytes = 0;
}

tfd_pinned *tfd_pinned_table_find(tfd_pinned_table *t, uint64_t id) {
    return tf__id_table_find(&t->map, id);
}

/* Not sealed and never refused: being created, or waiting for Mapped with a descriptor held. */
static int unsealed(const tfd_pinned *b) { return !b->sealed && b->seal_status == TF_OK; }

int tfd_pinned_table_insert(tfd_pinned_table *t, const tfd_pinned *b) {
    if (tf__id_table_insert(&t->map, b) != 0) return -1;
    t->count++;
    t->bytes += b->charged;
    if (unsealed(b)) t->unsealed++;
    return 0;
}

void tfd_pinned_table_sealed(tfd_pinned_table *t, tfd_pinned *b, tf_status st) {
    if (!unsealed(b)) return;
    t->unsealed--;
    b->sealed = st == TF_OK;
    b->seal_status = st;
}

int tfd_pinned_table_remove(tfd_pinned_table *t, uint64_t id, tfd_pinned *removed) {
    tfd_pinned b;
    if (tf__id_table_remove(&t->map, id, &b) != 0) return -1;
    t->count--;
    t->bytes -= b.charged;
    if (unsealed(&b)) t->unsealed--;
    if (removed) *removed = b;
    return 0;
}

/* Ids picked by one pass over the table (the table cannot change while it is walked). */
typedef struct pick {
    uint64_t ids[64];
    int n;
    int keep_busy;
} pick;

static void pick_one(void *record, void *arg) {
    tfd_pinned *b = record;
    pick *p = arg;
    if (p->n < (int)(sizeof p->ids / sizeof *p->ids) &&
        !(p->keep_busy && (b->in_flight || b->creating)))
        p->ids[p->n++] = b->id;
}

void tfd_pinned_table_release(tfd_pinned_table *t, int keep_busy,
                              void (*destroy)(void *arg, tfd_pinned *b), void *arg, uint64_t *n,
                              uint64_t *bytes) {
    for (;;) {
        pick p = {.keep_busy = keep_busy};
        tf__id_table_each(&t->map, pick_one, &p);
        if (p.n == 0) return;
        for (int i = 0; i < p.n; i++) {
            tfd_pinned b;
            if (tfd_pinned_table_remove(t, p.ids[i], &b) != 0) continue;
            destroy(arg, &b);
            *n += 1;
            *bytes += b.charged;
        }
    }
}

tf_status tfd_completion_page_create(tf__completion_slot **page, int *fd, char *msg,
                                     size_t msg_len) {
    void *map;
    size_t mapped;
    tf_status st = tfd_memfd_create("tenferro-completion", TF_RING_MAP_BYTES, &map, &mapped,
                                    fd, msg, msg_len);
    if (st != TF_OK) return st;
    *page = map;
    return TF_OK;
}

void tfd_completion_page_destroy(tf__completion_slot *page) {
    if (page) munmap(page, TF_RING_MAP_BYTES);
}

void tfd_completion_post(tf__completion_slot *page, uint32_t slot, tf_status status) {
    tf__completion_slot *s = &page[slot];
    __atomic_store_n(&s->status, (uint32_t)status, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, (uint32_t)TF__SLOT_DONE, __ATOMIC_RELEASE);
    /* No waiter count is kept, so wake unconditionally: one cheap system call per completion. */
    syscall(SYS_futex, &s->state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
