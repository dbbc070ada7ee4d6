/*
 * Allocation failure injection for tests (docs/testing.md), linked only into
 * build/tests/tenferrod-failalloc, never into the shipped tenferrod.
 *
 * That binary is the daemon's own objects linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,
 * --wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free,--wrap=uv_accept: every
 * call the daemon's code (and the frame decoder's protobuf-c allocator,
 * common/frame.c) makes to one of them lands here first. Calls made inside
 * shared libraries (libuv, protobuf-c's own, OpenBLAS, glibc) are not
 * wrapped and never fail.
 *
 * TENFERRO_FAIL_ALLOC=N makes the Nth allocation counted after arming return
 * NULL (posix_memalign: ENOMEM), once; N = 0 (or unset) only counts.
 * Counting arms when the daemon accepts a connection from the process
 * TENFERRO_FAIL_ALLOC_PEER names (its pid, read with SO_PEERCRED), or the
 * first connection accepted when that is unset, and it stops when that
 * connection's record is freed (tfd_conn_maybe_free: the record starts with
 * the libuv handle uv_accept was given). So everything the daemon allocates
 * on any thread while that client is served and torn down is counted, and a
 * client connected before, or the test's status queries after, are not.
 * Each event is one line on stderr (the daemon's log): "armed", the failed
 * allocation with its call site (an offset into the binary for addr2line)
 * followed by its stack, and "disarmed: K allocations counted".
 */
#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void **p, size_t align, size_t size);
void __real_free(void *p);
int __real_uv_accept(uv_stream_t *server, uv_stream_t *client);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
void *__wrap_aligned_alloc(size_t align, size_t size);
int __wrap_posix_memalign(void **p, size_t align, size_t size);
void __wrap_free(void *p);
int __wrap_uv_accept(uv_stream_t *server, uv_stream_t *client);

/* The start of the executable's image, so a call site prints as an offset addr2line reads. */
extern char __executable_start[];

enum { IDLE, COUNTING, DONE };

static uint64_t fail_at;          /* TENFERRO_FAIL_ALLOC; 0 = count only */
static long peer_pid;             /* TENFERRO_FAIL_ALLOC_PEER; 0 = the first connection */
static atomic_int phase = IDLE;
static atomic_uint_fast64_t counted;
static _Atomic(void *) armed_handle; /* the libuv handle (and connection record) being watched */

/* Reads the settings before main; the daemon allocates nothing through the wrappers before it. */
__attribute__((constructor)) static void read_settings(void) {
    const char *n = getenv("TENFERRO_FAIL_ALLOC");
    const char *p = getenv("TENFERRO_FAIL_ALLOC_PEER");
    fail_at = n ? strtoull(n, NULL, 10) : 0;
    peer_pid = p ? strtol(p, NULL, 10) : 0;
    /* The first backtrace loads the unwinder (which allocates): do it now, not inside malloc. */
    void *frames[4];
    (void)backtrace(frames, 4);
}

/* Writes one line to stderr with write(2): stdio could allocate, and this runs inside malloc. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

/* Counts one allocation while armed; 1 when it is the one that must fail. */
static int must_fail(const char *what, size_t bytes, void *caller) {
    if (atomic_load_explicit(&phase, memory_order_acquire) != COUNTING) return 0;
    uint64_t n = atomic_fetch_add_explicit(&counted, 1, memory_order_relaxed) + 1;
    if (n != fail_at) return 0;
    say("tenferrod-failalloc: failing allocation #%llu: %s(%zu) called from +0x%lx\n",
        (unsigned long long)n, what, bytes,
        (unsigned long)((uintptr_t)caller - (uintptr_t)__executable_start));
    /* The whole stack, one frame a line (binary(+offset), for addr2line -e). */
    void *frames[24];
    int depth = backtrace(frames, 24);
    backtrace_symbols_fd(frames, depth, STDERR_FILENO);
    return 1;
}

void *__wrap_malloc(size_t size) {
    if (must_fail("malloc", size, __builtin_return_address(0))) return NULL;
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
    if (must_fail("calloc", n * size, __builtin_return_address(0))) return NULL;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
    if (must_fail("realloc", size, __builtin_return_address(0))) return NULL;
    return __real_realloc(p, size);
}

char *__wrap_strdup(const char *s) {
    size_t len = strlen(s) + 1;
    if (must_fail("strdup", len, __builtin_return_address(0))) return NULL;
    char *copy = __real_malloc(len);
    if (copy) memcpy(copy, s, len);
    return copy;
}

void *__wrap_aligned_alloc(size_t align, size_t size) {
    if (must_fail("aligned_alloc", size, __builtin_return_address(0))) return NULL;
    return __real_aligned_alloc(align, size);
}

int __wrap_posix_memalign(void **p, size_t align, size_t size) {
    if (must_fail("posix_memalign", size, __builtin_return_address(0))) return ENOMEM;
    return __real_posix_memalign(p, align, size);
}

/* Stops counting when the watched connection's record goes: its client has been served. */
void __wrap_free(void *p) {
    if (p && p == atomic_load_explicit(&armed_handle, memory_order_relaxed) &&
        atomic_exchange_explicit(&phase, DONE, memory_order_acq_rel) == COUNTING)
        say("tenferrod-failalloc: disarmed: %llu allocations counted\n",
            (unsigned long long)atomic_load(&counted));
    __real_free(p);
}

/* The peer's pid, from the credentials of the accepted socket; 0 when unknown. */
static long peer_of(uv_stream_t *client) {
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)client, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return (long)cred.pid;
}

/* Arms the counter when the connection it waits for is accepted. */
int __wrap_uv_accept(uv_stream_t *server, uv_stream_t *client) {
    int rc = __real_uv_accept(server, client);
    if (rc == 0 && atomic_load(&phase) == IDLE && (peer_pid == 0 || peer_of(client) == peer_pid)) {
        atomic_store_explicit(&armed_handle, client, memory_order_relaxed);
        say("tenferrod-failalloc: armed at the connection of pid %ld; allocation #%llu fails\n",
            peer_of(client), (unsigned long long)fail_at);
        atomic_store_explicit(&phase, COUNTING, memory_order_release);
    }
    return rc;
}

/* A daemon that stops while still counting says how far it got. */
__attribute__((destructor)) static void report(void) {
    if (atomic_load(&phase) == COUNTING)
        say("tenferrod-failalloc: stopped while armed: %llu allocations counted\n",
            (unsigned long long)atomic_load(&counted));
}
