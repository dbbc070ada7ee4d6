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

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

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
    size_t rounded = (bytes + pg - 1) / pg * pg;
    const char *what = "memfd_create";
    int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0) goto fail;
    what = "ftruncate";
    if (ftruncate(f, (off_t)bytes) != 0) goto fail;
    what = "sealing";
    if (fcntl(f, F_ADD_SEALS, SEALS) != 0) goto fail;
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
    if (ftruncate(f, (off_t)bytes) == 0 && fcntl(f, F_ADD_SEALS, SEALS) == 0)
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

tf_status tfd_pinned_create(tfd_backend *be, uint64_t id, size_t bytes, tfd_pinned *out, int *fd,
                            char *msg, size_t msg_len) {
    memset(out, 0, sizeof *out);
    out->id = id;
    out->bytes = bytes;
    tf_status st = TF_OK;
    if (memfd_create_huge(bytes, &out->map, &out->mapped, fd) == 0) {
        out->huge = 1;
    } else {
        st = tfd_memfd_create("tenferro-pinned", bytes, &out->map, &out->mapped, fd, msg, msg_len);
        if (st != TF_OK) return st;
        /* Where shared memory may take transparent huge pages on request, ask (else a no-op). */
        if (bytes >= HUGE_FROM_BYTES) (void)madvise(out->map, out->mapped, MADV_HUGEPAGE);
    }
    if (be->vt->host_register) {
        char why[256] = "";
        st = be->vt->host_register(be, out->map, out->mapped, why, sizeof why);
        if (st != TF_OK) {
            snprintf(msg, msg_len, "cannot pin a buffer of %zu bytes on %s: %s", bytes,
                     be->vt->name, why);
            munmap(out->map, out->mapped);
            close(*fd);
            *fd = -1;
            return st;
        }
        out->registered = 1;
    }
    return TF_OK;
}

void tfd_pinned_destroy(tfd_backend *be, tfd_pinned *b) {
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

int tfd_pinned_table_insert(tfd_pinned_table *t, const tfd_pinned *b) {
    if (tf__id_table_insert(&t->map, b) != 0) return -1;
    t->count++;
    t->bytes += b->bytes;
    return 0;
}

int tfd_pinned_table_remove(tfd_pinned_table *t, uint64_t id, tfd_pinned *removed) {
    tfd_pinned b;
    if (tf__id_table_remove(&t->map, id, &b) != 0) return -1;
    t->count--;
    t->bytes -= b.bytes;
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
            *bytes += b.bytes;
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
