/*
 * The client's side of the completion page (common/completion.h): mapping
 * the page the daemon passed with HelloReply, handing out its slots (a
 * bitmap; slot 0 is kept for the blocking staged route, the others serve
 * pending transfers), and waiting on a slot. The daemon writes a slot's
 * status, then its state DONE (release order), then wakes the shared futex on
 * the state word, so readiness is one atomic load and a wait sleeps in the
 * kernel. A wait never trusts the daemon to wake it: it sleeps in bounded
 * steps and checks the connection between them.
 */
#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/spin.h"

/* Longest sleep on a slot before the connection is checked again. */
#define WAIT_STEP_NS 100000000L
/*
 * How long a wait polls its slot before it sleeps: a fixed part for the
 * request's trip, plus the copy at a pessimistic bandwidth, up to a cap. A
 * copy that ends while the client polls costs no wake-up (a futex wake-up
 * is several microseconds, and tens after a deep idle state: a large share
 * of a transfer of a few MiB, and still a percent of 256 MiB on a GPU); past
 * the cap a wake-up is noise. A synchronous cudaMemcpy polls the same way.
 */
#define WAIT_SPIN_BASE_US 50u
#define WAIT_SPIN_BYTES_PER_US 4000u /* 4 GB/s */
#define WAIT_SPIN_MAX_US 20000u
/*
 * Against the CPU backend a copy is the daemon's memcpy on this machine's own
 * cores, and a poll through it holds one of them: on a 2-vCPU machine shared
 * with other work that slowed 8 MiB copies by 3-5% and delayed the start of
 * 256 MiB ones by milliseconds. So the poll stops after about a 1 MiB copy's
 * time (the wake-up that follows is under 2% of a larger copy).
 */
#define WAIT_SPIN_HOST_MAX_US 300u

tf_status tf__completion_map(tf_client *c, const tf__page_layout *layout, int fd) {
    struct stat sb;
    void *page = MAP_FAILED;
    uint32_t slots = layout->slots > TF__COMPLETION_SLOTS ? TF__COMPLETION_SLOTS : layout->slots;
    /* A page shorter than promised would fault (SIGBUS) on its last slots: refuse it. */
    size_t bytes = TF__COMPLETION_PAGE_BYTES;
    int mailbox = 0;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= bytes) {
        /* The mailbox is used only where this library knows its place and the page holds it. */
        mailbox = layout->mailbox_offset == TF__MAILBOX_OFFSET &&
                  (uint64_t)sb.st_size >= TF__COMPLETION_MAP_BYTES;
        if (mailbox) bytes = TF__COMPLETION_MAP_BYTES;
        /* The ring, wherever the daemon put it, as far as the memfd really reaches. */
        uint64_t ring_end = (uint64_t)layout->ring_offset + TF_RING_HEADER_BYTES +
                            layout->ring_request_bytes + layout->ring_reply_bytes;
        if (mailbox && layout->ring_offset && ring_end <= (uint64_t)sb.st_size && ring_end <= (64u << 20))
            bytes = (size_t)ring_end;
        page = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (page == MAP_FAILED || slots < 2)
        return tf__fail(c, TF_ERR_UNSUPPORTED, "the daemon's completion page is unusable");
    c->completion = page;
    c->completion_bytes = bytes;
    c->mailbox = mailbox ? (tf__mailbox *)((uint8_t *)page + TF__MAILBOX_OFFSET) : NULL;
    c->n_slots = slots;
    c->slot_used[TF__STAGING_SLOT / 64] |= (uint64_t)1 << (TF__STAGING_SLOT % 64);
    tf__ring_attach(c, page, bytes, layout->ring_offset, layout->ring_request_bytes,
                    layout->ring_reply_bytes);
    return TF_OK;
}

void tf__completion_unmap(tf_client *c) {
    if (c->completion) munmap(c->completion, c->completion_bytes);
    c->completion = NULL;
    c->mailbox = NULL;
    c->ring = NULL;
    c->n_slots = 0;
}

/* The state word of a slot. */
static uint32_t *state_word(tf_client *c, uint32_t slot) { return &c->completion[slot].state; }

/* Clears bit `slot` of a slot bitmap. */
static void clear_bit(uint64_t *bits, uint32_t slot) { bits[slot / 64] &= ~((uint64_t)1 << (slot % 64)); }

/* Returns the released slots the daemon has finished with to the free set. */
static void reclaim_detached(tf_client *c) {
    for (uint32_t w = 0; w < TF__COMPLETION_SLOTS / 64; w++) {
        uint64_t bits = c->slot_detached[w];
        while (bits) {
            uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            if (__atomic_load_n(state_word(c, slot), __ATOMIC_ACQUIRE) == TF__SLOT_DONE) {
                clear_bit(c->slot_detached, slot);
                tf__slot_release(c, slot);
            }
        }
    }
}

/* The lowest free slot, or UINT32_MAX. */
static uint32_t free_slot(const tf_client *c) {
    for (uint32_t w = 0; w * 64 < c->n_slots; w++) {
        uint64_t used = c->slot_used[w];
        if (~used == 0) continue;
        uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(~used);
        return slot < c->n_slots ? slot : UINT32_MAX;
    }
    return UINT32_MAX;
}

tf_status tf__slot_acquire(tf_client *c, uint32_t *slot) {
    uint32_t s = free_slot(c);
    if (s == UINT32_MAX) {
        reclaim_detached(c);
        s = free_slot(c);
    }
    if (s == UINT32_MAX)
        return tf__fail(c, TF_ERR_BUSY,
                        "all %u completion slots are in use: wait for or release a pending transfer",
                        c->n_slots - 1);
    c->slot_used[s / 64] |= (uint64_t)1 << (s % 64);
    *slot = s;
    return TF_OK;
}

void tf__slot_arm(tf_client *c, uint32_t slot, size_t bytes) {
    size_t spin_us = WAIT_SPIN_BASE_US + bytes / WAIT_SPIN_BYTES_PER_US;
    const size_t cap = c->device_is_host ? WAIT_SPIN_HOST_MAX_US : WAIT_SPIN_MAX_US;
    c->slot_spin_us[slot] = spin_us > cap ? (uint32_t)cap : (uint32_t)spin_us;
    c->completion[slot].status = TF_OK;
    __atomic_store_n(state_word(c, slot), TF__SLOT_PENDING, __ATOMIC_RELEASE);
}

void tf__slot_release(tf_client *c, uint32_t slot) {
    __atomic_store_n(state_word(c, slot), TF__SLOT_IDLE, __ATOMIC_RELAXED);
    if (slot != TF__STAGING_SLOT) clear_bit(c->slot_used, slot);
}

void tf__slot_detach(tf_client *c, uint32_t slot) {
    c->slot_detached[slot / 64] |= (uint64_t)1 << (slot % 64);
}

/*
 * Polls *word for up to spin_us microseconds; returns 1 once it no longer
 * holds `value`. Every few microseconds it yields the core: on a machine with
 * fewer cores than runnable threads, the daemon thread that is to write the
 * word may be waiting for this very core.
 */
static int spin_while(uint32_t *word, uint32_t value, uint32_t spin_us) {
    const uint64_t start = tf__now_ns(), limit = (uint64_t)spin_us * 1000u;
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) return 1;
        tf__cpu_relax();
        if ((i & 63) == 0) {
            if (tf__now_ns() - start > limit) return 0;
            sched_yield();
        }
    }
}

tf_status tf__await_change(tf_client *c, uint32_t *word, uint32_t value, uint32_t spin_us,
                           uint32_t *sleeping) {
    if (spin_while(word, value, spin_us)) return TF_OK;
    tf_status st = TF_OK;
    if (sleeping) __atomic_store_n(sleeping, 1u, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) {
        if (c->broken) {
            st = tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
            break;
        }
        /* A shared (not FUTEX_PRIVATE) wait: the daemon's wake comes from another process. */
        struct timespec step = {0, WAIT_STEP_NS};
        long r = syscall(SYS_futex, word, FUTEX_WAIT, value, &step, NULL, 0);
        if (r != 0 && errno == ETIMEDOUT && (st = tf__check_connection(c)) != TF_OK) break;
    }
    if (sleeping) __atomic_store_n(sleeping, 0u, __ATOMIC_RELAXED);
    return st;
}

tf_status tf__slot_wait(tf_client *c, uint32_t slot, tf_status *transfer_status) {
    uint32_t *word = state_word(c, slot);
    tf_status st = tf__await_change(c, word, TF__SLOT_PENDING, c->slot_spin_us[slot], NULL);
    if (st != TF_OK) return st;
    uint32_t state = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if (state != TF__SLOT_DONE) {
        c->broken = 1;
        return tf__fail(c, TF_ERR_DISCONNECTED,
                        "connection to tenferrod lost: completion slot %u holds state %u", slot,
                        state);
    }
    *transfer_status = (tf_status)__atomic_load_n(&c->completion[slot].status, __ATOMIC_RELAXED);
    return TF_OK;
}
