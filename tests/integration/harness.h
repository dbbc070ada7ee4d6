/*
 * The integration-test harness: starts a real tenferrod on a private socket,
 * runs client processes, speaks raw frames for bad-input tests, reads the
 * daemon's counters, and makes fresh random inputs.
 *
 * Environment: TENFERRO_DAEMON (path of the daemon binary, default
 * build/tenferrod), TENFERRO_TEST_DEVICE (the device the suite runs on,
 * default cpu; the GPU machine runs the same suites with cuda:0).
 */
#ifndef TENFERRO_TESTS_HARNESS_H
#define TENFERRO_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/completion.h"
#include "common/frame.h"
#include "tenferro/tenferro.h"
#include "tenferro/wire.h"

typedef struct th_daemon {
    pid_t pid;
    char socket[108];
    char log_path[128];
    int exit_status; /* tenferrod's status (as th_wait) when th_daemon_start failed as it exited */
} th_daemon;

/*
 * The runtime directory the test process's daemons share, as the daemons of
 * one host share /run/tenferro: /tmp/tf-test-PID, made at the first call
 * (mode 0711) and removed with what is left in it when the process exits.
 * A copy between daemons reaches only a socket of this directory.
 */
const char *th_runtime_dir(void);

/*
 * Starts tenferrod on a fresh socket, th_runtime_dir()/tenferrod-N.sock,
 * with the suite's device and any extra arguments (NULL-terminated list),
 * and waits until it accepts connections. The daemon dies with the test
 * process if the test crashes. Returns 0 on success.
 */
int th_daemon_start(th_daemon *d, ...);

/*
 * th_daemon_start on a given socket path (a daemon restarted where its
 * clients expect it), with extra arguments as a NULL-terminated list.
 */
int th_daemon_start_on(th_daemon *d, const char *socket, ...);

/* SIGTERM, then waits; returns the daemon's exit status (0 = clean), or -1. */
int th_daemon_stop(th_daemon *d);

/*
 * Waits up to timeout_ms for the daemon to exit by itself (an admin drain);
 * returns its exit status, or -1 while it is still running.
 */
int th_daemon_wait(th_daemon *d, int timeout_ms);

/* What the daemon has written to its log (its stderr) so far: a malloc'd string, "" if none. */
char *th_daemon_log(const th_daemon *d);

/* The device the suite runs against ("cpu", "cuda:0"). */
const char *th_device(void);

/* Connects a client, failing the test on error. */
tf_client *th_connect(const th_daemon *d);

/* Runs fn(arg) in a forked child process and returns its pid; the child exits with fn's result. */
pid_t th_spawn(int (*fn)(void *arg), void *arg);

/* Waits for a child; returns its exit code, or 128+signal when it was killed. */
int th_wait(pid_t pid);

/*
 * In a forked child: it gets SIGKILL when the test process dies, so a failed
 * test never leaves it waiting. A change of credentials clears this: call it
 * after th_become.
 */
void th_die_with_parent(void);

/* In a forked child: drops to uid/gid (no supplementary groups); 1 on success. */
int th_become(uid_t uid, gid_t gid);

/* 1 while the daemon runs; it is only looked at, never reaped, so th_daemon_stop still can. */
int th_daemon_running(const th_daemon *d);

/* ---- time and /proc ---- */

/* Sleeps ms milliseconds. */
void th_sleep_ms(int ms);

/* Milliseconds on the monotonic clock, with their fraction (th_now_s: in seconds). */
double th_now_ms(void);
double th_now_s(void);

/*
 * The number of field `name` of /proc/PID/status ("VmRSS", "VmHWM" in KiB,
 * "Threads"), or -1 when the file cannot be read or has no such field.
 */
long th_proc_status_value(pid_t pid, const char *name);

/* Entries of the directory /proc/PID/<dir> ("task": threads, "fd": descriptors), or -1. */
int th_proc_entries(pid_t pid, const char *dir);

/* A daemon-wide counter from the status report (as tenferroctl status lists them). */
uint64_t th_counter(const th_daemon *d, const char *name);

/* Polls until counter `name` reaches `value` or timeout_ms passes; returns 1 when reached. */
int th_wait_counter(const th_daemon *d, const char *name, uint64_t value, int timeout_ms);

/* Number of clients the status report lists (connected, past the handshake). */
int th_client_count(const th_daemon *d);

/* The status report (a StatusReply frame, caller frees with tf__frame_free), or NULL. */
Tenferro__Frame *th_status_report(const th_daemon *d);

/* Counter `name` of a status report, 0 when it lists none by that name. */
uint64_t th_report_counter(const Tenferro__StatusReply *report, const char *name);

/* A status report's entry for client client_id (NULL when not listed); frees nothing. */
const Tenferro__ClientInfo *th_find_client(const Tenferro__Frame *status, uint64_t client_id);

/*
 * ---- assertions: Check in the test process, stderr plus exit status in children ----
 * (the CK_ macros need <check.h> and <string.h>; the CHILD_ ones <stdio.h> and <unistd.h>.)
 */

/*
 * In the test process: `call` must return `want`; the message names the call and the client's
 * error.
 */
#define CK_STATUS(c, call, want)                                                                  \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        ck_assert_msg(st_ == (want), "%s returned %s, expected %s: %s", #call,                    \
                      tf_status_name(st_), tf_status_name(want), tf_client_last_error(c));        \
    } while (0)

/* In the test process: starts tenferrod with extra arguments (at least one) or fails the test. */
#define CK_DAEMON_START(d, ...)                                                                   \
    ck_assert_msg(th_daemon_start((d), __VA_ARGS__, (char *)NULL) == 0,                           \
                  "tenferrod did not start (log %s)", (d)->log_path)

/* In the test process: stops tenferrod with SIGTERM and fails the test unless it exited 0. */
#define CK_DAEMON_STOP(d)                                                                         \
    do {                                                                                          \
        char log_[sizeof (d)->log_path];                                                          \
        memcpy(log_, (d)->log_path, sizeof log_);                                                 \
        int rc_ = th_daemon_stop(d);                                                              \
        ck_assert_msg(rc_ == 0, "tenferrod exited with status %d at SIGTERM (log %s)", rc_, log_); \
    } while (0)

/* In the test process: daemon counter `name` must reach `value` within timeout_ms. */
#define CK_COUNTER(d, name, value, timeout_ms)                                                    \
    do {                                                                                          \
        const char *cname_ = (name);                                                              \
        uint64_t cvalue_ = (value);                                                               \
        ck_assert_msg(th_wait_counter((d), cname_, cvalue_, (timeout_ms)),                        \
                      "daemon counter %s is %llu, expected %llu", cname_,                         \
                      (unsigned long long)th_counter((d), cname_), (unsigned long long)cvalue_);   \
    } while (0)

/* In the test process: child `pid` (`what` names it) must have been spawned and must exit 0. */
#define CK_CHILD_OK(pid, what)                                                                    \
    do {                                                                                          \
        pid_t cpid_ = (pid);                                                                      \
        ck_assert_msg(cpid_ > 0, "could not spawn %s", (what));                                   \
        int crc_ = th_wait(cpid_);                                                                \
        ck_assert_msg(crc_ == 0, "%s (pid %d) exited with %d (see its messages above)", (what),    \
                      (int)cpid_, crc_);                                                          \
    } while (0)

/* In a child: report a failed condition and make the child exit with status 1. */
#define CHILD_CHECK(cond)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "[child %d] %s:%d: check failed: %s\n", (int)getpid(), __FILE__,      \
                    __LINE__, #cond);                                                             \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/* In a child: `call` must return `want`. */
#define CHILD_STATUS(c, call, want)                                                               \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        if (st_ != (want)) {                                                                      \
            fprintf(stderr, "[child %d] %s:%d: %s returned %s, expected %s: %s\n", (int)getpid(), \
                    __FILE__, __LINE__, #call, tf_status_name(st_), tf_status_name(want),         \
                    tf_client_last_error(c));                                                     \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/*
 * Runs `tenferroctl --socket S cmd [arg]` (the binary next to TENFERRO_DAEMON)
 * with stdout and stderr captured into out (NUL-terminated, cut at cap).
 * Returns its exit status, or -1 when it could not be started.
 */
int th_run_ctl(const th_daemon *d, char *out, size_t cap, const char *cmd, const char *arg);

/*
 * Runs tenferroctl (the binary next to TENFERRO_DAEMON) with the arguments
 * args (NULL-terminated; no --socket is added) and the test process's
 * environment, captured as th_run_ctl does. Returns its exit status, or -1.
 */
int th_run_ctl_args(char *out, size_t cap, const char *const *args);

/* ---- raw frames, for bad-input tests ---- */

/* Connects a plain socket without a handshake; returns the fd or -1. */
int th_raw_connect(const th_daemon *d);
/* Sends Hello with the given protocol version; returns the reply frame (caller frees) or NULL. */
Tenferro__Frame *th_raw_hello(int fd, uint32_t version);
/*
 * Says Hello (this protocol version, sequence number 1) as a peer daemon
 * (Hello.peer_daemon, no name); returns the reply frame (caller frees) or NULL.
 */
Tenferro__Frame *th_raw_peer_hello(int fd, int timeout_ms);
/*
 * Sends Hello (this protocol version) as client `name` (NULL: none) numbered
 * seq, without waiting for the reply; 0 on success.
 */
int th_raw_send_hello(int fd, uint64_t seq, const char *name);
/*
 * Connects and says Hello as `name` (NULL: none) numbered seq; returns the fd
 * past the handshake (a HelloReply came; a completion page riding on it is
 * closed unmapped), or -1. *client_id, when not NULL, is the daemon's id for it.
 */
int th_raw_open(const th_daemon *d, const char *name, uint64_t seq, uint64_t *client_id);
/* Encodes and sends a frame; returns 0 on success. */
int th_raw_send(int fd, Tenferro__Frame *frame);
/*
 * Sends Mapped{buffer} with sequence number seq: the memfd of pinned buffer
 * `buffer` (0: the completion page) is mapped and the daemon may seal it. No
 * reply comes. Returns 0 on success.
 */
int th_raw_send_mapped(int fd, uint64_t seq, uint64_t buffer);
/* Sends MailboxDoorbell numbered seq: the daemon looks at the mailbox and the ring. No reply. */
int th_raw_send_doorbell(int fd, uint64_t seq);
/* Sends raw bytes. */
int th_raw_send_bytes(int fd, const void *bytes, size_t len);
/* Fills f and dl with a Download of `len` bytes at `offset` of tensor id (seq left 0). */
void th_raw_build_download(Tenferro__Frame *f, Tenferro__Download *dl, uint64_t id, uint64_t offset,
                           uint64_t len);
/*
 * Fills f and up with an Upload into tensor id of `len` bytes of data at
 * `offset`, creating it when `create` (dtype, rank and shape are set as
 * given either way; seq left 0).
 */
void th_raw_build_upload(Tenferro__Frame *f, Tenferro__Upload *up, uint64_t id, int create,
                         tf_dtype dtype, int rank, const int64_t *shape, uint64_t offset,
                         const void *data, size_t len);
/*
 * Fills f and t with a Transfer of `bytes` at `offset` between pinned buffer
 * and tensor, completing in slot (seq left 0).
 */
void th_raw_build_transfer(Tenferro__Frame *f, Tenferro__Transfer *t, uint32_t direction,
                           uint64_t buffer, uint64_t tensor, uint32_t slot, uint64_t offset,
                           uint64_t bytes);
/* Receives one frame, waiting up to timeout_ms; NULL on EOF, timeout or a bad frame. */
Tenferro__Frame *th_raw_recv(int fd, int timeout_ms);
/*
 * Receives one frame like th_raw_recv, also taking the file descriptor that
 * arrived as SCM_RIGHTS with its bytes: *received_fd is that descriptor (the
 * caller closes it) or -1 when none came.
 */
Tenferro__Frame *th_raw_recv_fd(int fd, int timeout_ms, int *received_fd);
/* 1 when the peer has closed the connection (EOF within timeout_ms). */
int th_raw_closed(int fd, int timeout_ms);

/*
 * Describes, in why (n bytes), how Result r differs from the expected one: its status must be
 * `status`, and an error must carry a readable message (10+ characters) containing `needle`
 * (when not NULL). Returns 1 and fills why when it differs, 0 when it matches.
 */
int th_result_problem(const Tenferro__Result *r, tf_status status, const char *needle, char *why,
                      size_t n);
/* Like th_result_problem for a whole reply, which must also be a Result frame. */
int th_reply_problem(const Tenferro__Frame *reply, tf_status status, const char *needle, char *why,
                     size_t n);

/*
 * Frames encoded back to back, to be sent in one write (requests pipelined
 * ahead of their replies). Starts zeroed; th_frames_free releases it.
 */
typedef struct th_frames {
    uint8_t *bytes;
    size_t len, cap;
} th_frames;
/* Encodes frame f (its seq as set) at the end of *frames; 0 on success. */
int th_frames_add(th_frames *frames, const Tenferro__Frame *f);
void th_frames_free(th_frames *frames);

/*
 * A raw client as the library is one: past its Hello, its completion page
 * mapped (the memfd that rode on the HelloReply: completion slots, the
 * submission mailbox and, when offered, the submission ring) and Mapped sent.
 */
typedef struct th_raw_client {
    int fd;
    uint64_t client_id;
    uint8_t *map; /* the whole mapping, map_bytes long */
    size_t map_bytes;
    tf__completion_slot *page; /* the completion slots, at the start of the mapping */
    tf__mailbox *box;          /* the submission mailbox after the slots */
    uint32_t completion_slots; /* as the HelloReply said */
    uint64_t mailbox_offset;
    /* The submission ring, when the HelloReply offered one (ring is NULL otherwise). */
    uint64_t ring_offset;
    tf_ring_header *ring;
    uint8_t *req, *rep; /* its request and reply areas */
    uint32_t req_bytes, rep_bytes;
    uint64_t req_head, rep_tail; /* how far this client has written requests and read replies */
} th_raw_client;

/*
 * Connects and says Hello as `name` (NULL: none), maps the completion page
 * that must ride on the HelloReply and says Mapped{buffer=0}: the Hello and
 * the Mapped take the next sequence numbers of *seq. 0 on success; -1 (with
 * why on stderr) when the handshake (a HelloReply answering the Hello), the
 * page or the mapping fails.
 */
int th_raw_client_open(const th_daemon *d, const char *name, uint64_t *seq, th_raw_client *rc);
/* Unmaps the page and closes the connection. */
void th_raw_client_close(th_raw_client *rc);

/* Marks completion slot `slot` pending, as the client does before it names it in a Transfer. */
void th_slot_arm(tf__completion_slot *page, uint32_t slot);
/* Takes the status of a slot the daemon marked DONE, leaving it IDLE again. */
tf_status th_slot_take(tf__completion_slot *page, uint32_t slot);

/*
 * Copies len bytes into the circular area base of `area` bytes at position
 * pos (th_ring_copy_out: out of it).
 */
void th_ring_copy_in(uint8_t *base, uint32_t area, uint64_t pos, const void *src, size_t len);
void th_ring_copy_out(uint8_t *dst, const uint8_t *base, uint32_t area, uint64_t pos, size_t len);
/*
 * Writes one request entry (header seq and after_seq, then len bytes of body)
 * at the ring's head and publishes it, without ringing the doorbell.
 */
void th_ring_write(th_raw_client *rc, uint64_t seq, uint64_t after_seq, const void *body,
                   uint32_t len);
/* th_ring_write of frame f, encoded, numbered as f->seq. */
void th_ring_write_frame(th_raw_client *rc, const Tenferro__Frame *f, uint64_t after_seq);
/*
 * Takes the next reply of the ring, waiting up to timeout_ms: 1 when one was
 * there, *frame its decoded frame (NULL when it does not decode) and
 * *entry_seq (when not NULL) the sequence number its entry header carries;
 * 0 when none came.
 */
int th_ring_read(th_raw_client *rc, int timeout_ms, Tenferro__Frame **frame, uint64_t *entry_seq);

/* In the test process: Result r must have `status` (see th_result_problem). */
#define CK_RESULT(r, status, needle)                                                              \
    do {                                                                                          \
        char why_[1024];                                                                          \
        ck_assert_msg(th_result_problem((r), (status), (needle), why_, sizeof why_) == 0, "%s",   \
                      why_);                                                                      \
    } while (0)

/* In the test process: reply must be a Result with `status` (see th_result_problem); frees it. */
#define CK_EXPECT_RESULT(reply, status, needle)                                                   \
    do {                                                                                          \
        Tenferro__Frame *reply_ = (reply);                                                        \
        char why_[1024];                                                                          \
        ck_assert_msg(th_reply_problem(reply_, (status), (needle), why_, sizeof why_) == 0, "%s", \
                      why_);                                                                      \
        tf__frame_free(reply_);                                                                   \
    } while (0)

/* ---- JSON ---- */

/* 1 when text is exactly one JSON value and white space (RFC 8259; no raw control characters in strings). */
int th_json_valid(const char *text);

/* ---- files ---- */

/* Writes `text` as the whole of file path; 0 on success. */
int th_write_file(const char *path, const char *text);

/*
 * Writes `text` to /tmp/tf-test-<kind>-<pid>-<tag>.conf and puts that path in
 * path (len bytes); 0 on success.
 */
int th_write_config(char *path, size_t len, const char *kind, const char *tag, const char *text);

/* ---- data ---- */

/* malloc that aborts the test instead of returning NULL (0 bytes: 1). */
void *th_xmalloc(size_t bytes);

/* splitmix64: the next number of the random stream *state. */
uint64_t th_splitmix(uint64_t *state);

/* 1 for the complex dtypes. */
int th_is_complex(tf_dtype dtype);
/* The real dtype of a complex one (abs of c64 is f32), the complex one of a real one. */
tf_dtype th_real_of(tf_dtype dtype);
tf_dtype th_complex_of(tf_dtype dtype);
/* Elements of a tensor of that rank and shape (1 for rank 0). */
size_t th_numel(int rank, const int64_t *shape);

/*
 * Widens n elements of dtype in buf to double complex values z (th_narrow:
 * rounds them back to dtype's layout).
 */
void th_widen(tf_dtype dtype, size_t n, const void *buf, double _Complex *z);
void th_narrow(tf_dtype dtype, size_t n, const double _Complex *z, void *buf);

/* out[m x n] = a[m x k] b[k x n], row-major, summed in double in order of k. */
void th_ref_matmul(int m, int k, int n, const double *a, const double *b, double *out);

/*
 * Uploads fresh random values (th_fill_random) as a tensor of dtype, rank
 * and shape into *t; *host keeps them (the caller frees it). Returns
 * tf_upload's status (on failure *host is NULL).
 */
tf_status th_upload_random(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape,
                           void **host, tf_tensor *t);

/* A session callback that queues nothing (a session's end then only waits for the stream). */
tf_status th_queue_nothing(tf_view *v, void *arg);

/* The seed of this test process's random inputs (printed once, settable with TENFERRO_TEST_SEED). */
unsigned th_seed(void);
/* Fills n elements of dtype with random values in [-1,-0.1] U [0.1,1] (never zero). */
void th_fill_random(tf_dtype dtype, size_t n, void *buf);
/* Fills n elements with random positive values in [0.1, 2]. */
void th_fill_positive(tf_dtype dtype, size_t n, void *buf);

/* Largest relative difference |a-b| / max(|b|, floor) over n elements (complex: by modulus). */
double th_max_rel_diff(tf_dtype dtype, size_t n, const void *a, const void *b, double floor);

/* The tolerance a dtype's results are held to (1e-5 for f32/c64, 1e-12 for f64/c128). */
double th_tolerance(tf_dtype dtype);

#endif
