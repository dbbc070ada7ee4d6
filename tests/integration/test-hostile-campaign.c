/*
 * The hostile-client campaign (DESIGN.md §9, docs/security.md, docs/testing.md):
 * one tenferrod, one well-behaved client of the test's own uid (the
 * bystander), and for ATTACK_MS attackers of three other uids that use every
 * way the protocol and the shared pages give them to make the daemon hold
 * memory, descriptors, slots or its loop:
 *
 *   no_hello     connections that never say Hello (the Hello deadline ends them);
 *   hello_idle   Hello, then nothing for a while (the page not mapped, or mapped
 *                and never said Mapped), or a Hello whose reply is never read;
 *   buffers      1-byte pinned buffers created until refused: first without
 *                Mapped (at most 8 may wait for it), then mapped ones;
 *   holes        holes punched (fallocate PUNCH_HOLE, madvise MADV_REMOVE) into
 *                the completion page and a pinned buffer before their Mapped,
 *                and punched in a loop while the seal happens, then pending
 *                transfers through that buffer, whose bytes must come back;
 *   tensors      tensors uploaded until a quota refuses; one created without
 *                data must read back as zeros;
 *   submits      long Submits of additions and frees (or matrix products, or
 *                additions whose outputs pile up) queued back to back, read or
 *                abandoned;
 *   downloads    Downloads of a 2 MiB tensor sent back to back and never read;
 *   status       Status requests sent back to back and never read;
 *   partial      frames announced near the maximum and sent in part, held by
 *                several clients at once (past uid_receive_bytes), a length
 *                above the maximum (after and before Hello), a complete frame of
 *                megabytes that does not decode;
 *   junk         requests, then random bytes, written into the mailbox and the
 *                submission ring of a sealed page, with doorbells;
 *   prepare      prepared graphs until a limit refuses;
 *   reconnect    connect, Hello, go away, many times; a crowd above the uid's
 *                client limit;
 *
 * and a third of the attacker processes SIGKILL themselves at a random moment
 * of whatever they are doing. Each attacker process runs moves for a few
 * seconds and exits; the test starts another in its place until ATTACK_MS.
 *
 * What must hold:
 *  - the bystander's every result is right and none of its calls fails; its
 *    p99 latency stays under a loose bound (BENCH hostile_campaign_p99);
 *  - every answer an attacker reads is a success or a typed refusal with a
 *    reason, within ANSWER_MS; a connection ends only where the protocol says
 *    it may (after a last word, at the Hello deadline, for unread replies);
 *    a client that never reads is closed, and holds no more queued replies
 *    than [limits] client_reply_bytes meanwhile;
 *  - twice a second under attack, the status report shows no client and no
 *    uid holding more than a bound allows (check_bounds);
 *  - once the attackers are gone and the bystander stopped, every gauge of the
 *    status report reads exactly what it read before the campaign, within
 *    RECOVERY_MS, and the daemon's VmRSS (RSS_SETTLE_MS later) is within
 *    RSS_MARGIN_MIB of where it started (BENCH hostile_campaign_rss_mib);
 *    SIGTERM then ends it with 0.
 *
 * The limits are set low, in a configuration file that holds only the
 * settings this daemon's --help lists (the others are named on stdout), so
 * each is reached within seconds. Attackers run as uids 65534, 65533 and
 * 65532 when the test runs as root; otherwise as the test's own uid, with the
 * per-uid settings left out (they would bound the bystander too), as the test
 * says on stdout.
 *
 * The bystander opens its held session per iteration rather than once for
 * the campaign: a session held throughout would make every attacker's Submit
 * a TF_ERR_CONTENDED refusal and leave the executor unattacked. Attackers
 * never hold the domain themselves: a held session under the reject policy is
 * what security.md lists as not defended.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/completion.h"
#include "common/ops.h"
#include "tests/integration/harness.h"

/* ---- the campaign's shape ---- */

/* How long attackers run, and how many processes each uid keeps running at once. */
#define ATTACK_MS 30000
#define PROCS_PER_UID 3
/*
 * The bystander's quiet reference: at least this many iterations, over at
 * least this long, after WARMUP_ITERATIONS that are not counted (its staging
 * buffer made, the daemon's first allocations and plans).
 */
#define QUIET_ITERATIONS 50
#define QUIET_MS 4000
#define WARMUP_ITERATIONS 10
/* The longest an attacker waits for an answer before it calls the daemon hung. */
#define ANSWER_MS 15000
/* After the attack: how long the gauges may take to come back, how much RSS may stay. */
#define RECOVERY_MS 15000
#define RSS_MARGIN_MIB 96
/*
 * VmRSS is judged this long after the gauges are back: the daemon trims its
 * heap a second after clients leave (daemon/heap-trim.c).
 */
#define RSS_SETTLE_MS 2500
/* The bystander's p99 bound under attack: loose, correctness is the strict part. */
#define P99_BOUND_MS 2000.0

/*
 * Under a sanitizer (make check's ASan and TSan passes run every integration
 * suite), the daemon's memory is the sanitizer's (ASan's quarantine and
 * shadow, TSan's shadow): its RSS says nothing about the daemon, so it is
 * reported and not judged; and everything runs several times slower, so the
 * latency bound is ten times looser.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#define P99_BOUND_SCALE 10.0
#else
#define SANITIZED 0
#define P99_BOUND_SCALE 1.0
#endif

/* The bystander's work: a (MM x KK) times b (KK x NN) plus c, then an 8 MiB round trip. */
#define MM 96
#define KK 80
#define NN 72
#define BIG_ELEMS ((size_t)1 << 20)

/* Attacker processes one campaign may start, and bystander samples it keeps per phase. */
#define MAX_PROCS 4096
#define MAX_SAMPLES 32768

/* The uids attackers run as when the test is root: nobody, and two without an account. */
static const uid_t ATTACK_UIDS[3] = {65534, 65533, 65532};
#define N_UIDS 3

/* ---- the daemon's configuration ---- */

/* One setting of the campaign's configuration file. */
typedef struct setting {
    const char *section, *key, *flag, *value;
    int per_uid; /* bounds all clients of one uid: left out when attackers share the bystander's uid */
    int applied; /* written into the file (this daemon's --help lists the flag) */
} setting;

static setting g_settings[] = {
    {"daemon", "socket_mode", "socket-mode", "0666", 0, 0},
    {"daemon", "max_frame_bytes", "max-frame-bytes", "4M", 0, 0},
    {"daemon", "max_pinned_bytes", "max-pinned-bytes", "512M", 0, 0},
    {"limits", "max_clients_per_uid", "max-clients-per-uid", "16", 1, 0},
    {"limits", "max_handshakes_per_uid", "max-handshakes-per-uid", "4", 1, 0},
    {"limits", "hello_timeout_ms", "hello-timeout-ms", "1500", 0, 0},
    {"limits", "uid_receive_bytes", "uid-receive-bytes", "12M", 1, 0},
    {"limits", "client_reply_bytes", "client-reply-bytes", "4M", 0, 0},
    {"limits", "uid_reply_bytes", "uid-reply-bytes", "12M", 1, 0},
    {"limits", "reply_stall_ms", "reply-stall-ms", "1500", 0, 0},
    {"limits", "max_buffers_per_client", "max-buffers-per-client", "48", 0, 0},
    {"limits", "max_buffers_per_uid", "max-buffers-per-uid", "96", 1, 0},
    {"limits", "max_prepared", "max-prepared", "8", 0, 0},
    {"limits", "max_prepared_per_uid", "max-prepared-per-uid", "16", 1, 0},
    {"quota.client", "device_bytes", "client-device-bytes", "48M", 0, 0},
    {"quota.client", "pinned_bytes", "client-pinned-bytes", "24M", 0, 0},
    {"quota.client", "live_tensors", "client-live-tensors", "256", 0, 0},
    {"quota.client", "queued_ops", "client-queued-ops", "12000", 0, 0},
    {"quota.uid", "device_bytes", "uid-device-bytes", "96M", 1, 0},
    {"quota.uid", "pinned_bytes", "uid-pinned-bytes", "48M", 1, 0},
    {"quota.uid", "live_tensors", "uid-live-tensors", "512", 1, 0},
    {"quota.uid", "queued_ops", "uid-queued-ops", "20000", 1, 0},
};
#define N_SETTINGS (sizeof g_settings / sizeof *g_settings)

/* The setting `key` of `section` when the campaign's daemon runs with it, else NULL. */
static const setting *applied(const char *section, const char *key) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (g_settings[i].applied && strcmp(g_settings[i].section, section) == 0 &&
            strcmp(g_settings[i].key, key) == 0)
            return &g_settings[i];
    return NULL;
}

/* A numeric setting the daemon runs with (K/M suffixes as the daemon reads them), or dflt. */
static uint64_t setting_value(const char *section, const char *key, uint64_t dflt) {
    const setting *s = applied(section, key);
    if (!s) return dflt;
    char *end;
    uint64_t v = strtoull(s->value, &end, 10);
    if (*end == 'K') v <<= 10;
    if (*end == 'M') v <<= 20;
    return v;
}

/* 1 when the test runs attackers as other uids (it is root). */
static int g_other_uids;

/*
 * Writes the configuration file with every setting whose flag this daemon's
 * --help lists (and, without root, no per-uid one); prints what was left out.
 */
static void write_config(const char *path) {
    const char *daemon = getenv("TENFERRO_DAEMON");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --help 2>&1", daemon && daemon[0] ? daemon : "build/tenferrod");
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    static char help[1 << 16];
    size_t len = fread(help, 1, sizeof help - 1, p);
    help[len] = '\0';
    pclose(p);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    const char *section = "";
    for (size_t i = 0; i < N_SETTINGS; i++) {
        setting *s = &g_settings[i];
        char want[64];
        snprintf(want, sizeof want, "--%s ", s->flag);
        if (!strstr(help, want)) {
            printf("# campaign: this tenferrod has no --%s: [%s] %s left at its default\n", s->flag,
                   s->section, s->key);
            continue;
        }
        if (s->per_uid && !g_other_uids) {
            printf("# campaign: [%s] %s left out: attackers share the bystander's uid\n",
                   s->section, s->key);
            continue;
        }
        if (strcmp(section, s->section) != 0) fprintf(f, "[%s]\n", s->section);
        section = s->section;
        fprintf(f, "%s = %s\n", s->key, s->value);
        s->applied = 1;
    }
    fclose(f);
}

/* ---- time, randomness ---- */

/* The monotonic clock in whole milliseconds. */
static uint64_t now_ms(void) { return (uint64_t)th_now_ms(); }

/* Milliseconds from now until `until` (0 when past), as a poll timeout. */
static int ms_until(uint64_t until) {
    uint64_t now = now_ms();
    return now >= until ? 0 : (int)(until - now);
}

/* ---- what the processes share ---- */

enum { PHASE_QUIET, PHASE_ATTACK, PHASE_STOP };

#define MOVES(X)                                                                                   \
    X(no_hello) X(hello_idle) X(buffers) X(holes) X(tensors) X(submits) X(downloads) X(status)     \
        X(partial) X(junk) X(prepare) X(reconnect)
#define MOVE_ENUM_(name) MOVE_##name,
enum { MOVES(MOVE_ENUM_) N_MOVES };
#define MOVE_NAME_(name) #name,
static const char *const MOVE_NAMES[N_MOVES] = {MOVES(MOVE_NAME_)};

/* One phase of the bystander: per iteration, the whole, the session part, the 8 MiB part (ms). */
typedef struct samples {
    uint32_t n;
    double total[MAX_SAMPLES], session[MAX_SAMPLES], big[MAX_SAMPLES];
} samples;

/* Shared by the test, the bystander and the attackers (an anonymous shared mapping). */
typedef struct campaign {
    int phase;
    samples quiet, attack;
    uint64_t moves[N_MOVES];    /* moves started */
    uint64_t failures[N_MOVES]; /* broken contracts found, by move */
    uint64_t statuses[32];      /* answers read, by status (31: anything out of range) */
    uint64_t daemon_closed;     /* connections the daemon ended (as the protocol allows) */
    uint64_t stall_closed;      /* of them, clients that never read, ended while they waited */
    uint64_t punch_before;      /* holes punched before Mapped */
    uint64_t punch_raced;       /* holes punched after Mapped was sent, before the seal took */
    uint64_t punch_refused;     /* holes refused once sealed (EPERM), as they must be */
    /* Moves that got what they went for: a limit's refusal, the daemon ending a connection for
       unread replies or bad input, a round trip through punched memory. */
    uint64_t reached[N_MOVES];
    uint64_t self_kills;
    uint8_t self_killed[MAX_PROCS]; /* by attacker slot: it SIGKILLed itself */
} campaign;

static campaign *g_cp;

static void count(uint64_t *c) { __atomic_fetch_add(c, 1, __ATOMIC_RELAXED); }

/* ---- the bystander ---- */

/* The bystander's tensors of one iteration. */
typedef struct chain {
    tf_tensor a, b, c, prod, sum;
} chain;

/* The held session's work: prod = a b, sum = prod + c. */
static tf_status queue_chain(tf_view *v, void *arg) {
    chain *ch = arg;
    tf_status st = tf_view_matmul(v, ch->a, ch->b, &ch->prod);
    if (st == TF_OK) st = tf_view_add(v, ch->prod, ch->c, &ch->sum);
    return st;
}

/* The reference, a loop nest: out = a b + c. */
static void reference(const double *a, const double *b, const double *c, double *out) {
    for (int i = 0; i < MM; i++)
        for (int j = 0; j < NN; j++) {
            double s = 0;
            for (int k = 0; k < KK; k++) s += a[i * KK + k] * b[k * NN + j];
            out[i * NN + j] = s + c[i * NN + j];
        }
}

/* Says why the bystander stops, and makes it exit 1. */
#define BYSTANDER_FAIL(c, what, st)                                                                \
    do {                                                                                           \
        fprintf(stderr, "[bystander] iteration %u: %s: %s (%s)\n", iter, what, tf_status_name(st), \
                (c) ? tf_client_last_error(c) : "");                                               \
        return 1;                                                                                  \
    } while (0)

/*
 * The bystander: until the test says stop, one iteration after another of
 * fresh random matrices uploaded, multiplied and added in a held session,
 * synchronized, downloaded and checked against the loop nest, then a fresh
 * 8 MiB vector uploaded and downloaded and compared; each iteration's time
 * (the daemon's calls only, not the data's making or checking) goes into the
 * phase it ran in. Exits 1 at the first error or wrong result.
 */
static int bystander_main(void *arg) {
    const th_daemon *d = arg;
    th_die_with_parent();
    static double a[MM * KK], b[KK * NN], c[MM * NN], want[MM * NN];
    double *big = malloc(BIG_ELEMS * sizeof *big);
    void *back = NULL;
    size_t cap = 0;
    uint64_t rng = (uint64_t)getpid() * 7919u;
    unsigned iter = 0;
    tf_client *cl = NULL;
    tf_status st = tf_connect(d->socket, &cl);
    if (st != TF_OK) BYSTANDER_FAIL(cl, "tf_connect", st);
    for (;; iter++) {
        int phase = __atomic_load_n(&g_cp->phase, __ATOMIC_ACQUIRE);
        if (phase == PHASE_STOP) break;
        th_fill_random(TF_F64, MM * KK, a);
        th_fill_random(TF_F64, KK * NN, b);
        th_fill_random(TF_F64, MM * NN, c);
        for (size_t i = 0; i < BIG_ELEMS; i++) big[i] = (double)(th_splitmix(&rng) >> 11);

        const int64_t sa[2] = {MM, KK}, sb[2] = {KK, NN}, sc[2] = {MM, NN}, sbig[1] = {BIG_ELEMS};
        chain ch = {0};
        tf_session *s = NULL;
        tf_tensor tbig = 0;
        double t0 = th_now_ms();
        if ((st = tf_upload(cl, TF_F64, 2, sa, a, &ch.a)) != TF_OK)
            BYSTANDER_FAIL(cl, "upload a", st);
        if ((st = tf_upload(cl, TF_F64, 2, sb, b, &ch.b)) != TF_OK)
            BYSTANDER_FAIL(cl, "upload b", st);
        if ((st = tf_upload(cl, TF_F64, 2, sc, c, &ch.c)) != TF_OK)
            BYSTANDER_FAIL(cl, "upload c", st);
        if ((st = tf_session_open(cl, &s)) != TF_OK) BYSTANDER_FAIL(cl, "tf_session_open", st);
        if ((st = tf_session_with(s, queue_chain, &ch)) != TF_OK)
            BYSTANDER_FAIL(cl, "matmul, add", st);
        if ((st = tf_session_synchronize(s)) != TF_OK) BYSTANDER_FAIL(cl, "synchronize", st);
        if ((st = tf_session_close(s, NULL)) != TF_OK) BYSTANDER_FAIL(cl, "tf_session_close", st);
        if ((st = tf_download_into(cl, ch.sum, &back, &cap)) != TF_OK)
            BYSTANDER_FAIL(cl, "download", st);
        double t1 = th_now_ms();
        reference(a, b, c, want);
        double diff = th_max_rel_diff(TF_F64, MM * NN, back, want, 1.0);
        if (!(diff <= th_tolerance(TF_F64))) {
            fprintf(stderr, "[bystander] iteration %u: a b + c is wrong: relative error %g\n", iter,
                    diff);
            return 1;
        }
        double t2 = th_now_ms();
        if ((st = tf_upload(cl, TF_F64, 1, sbig, big, &tbig)) != TF_OK)
            BYSTANDER_FAIL(cl, "upload 8 MiB", st);
        if ((st = tf_download_into(cl, tbig, &back, &cap)) != TF_OK)
            BYSTANDER_FAIL(cl, "download 8 MiB", st);
        double t3 = th_now_ms();
        if (memcmp(back, big, BIG_ELEMS * sizeof *big) != 0) {
            fprintf(stderr, "[bystander] iteration %u: the 8 MiB round trip came back changed\n",
                    iter);
            return 1;
        }
        const tf_tensor mine[6] = {ch.a, ch.b, ch.c, ch.prod, ch.sum, tbig};
        for (int i = 0; i < 6; i++)
            if ((st = tf_tensor_free(cl, mine[i])) != TF_OK)
                BYSTANDER_FAIL(cl, "tf_tensor_free", st);
        /* An iteration counts for the phase it began and ended in. */
        int end_phase = __atomic_load_n(&g_cp->phase, __ATOMIC_ACQUIRE);
        samples *sm = iter < WARMUP_ITERATIONS                             ? NULL
                      : phase == PHASE_QUIET && end_phase == PHASE_QUIET   ? &g_cp->quiet
                      : phase == PHASE_ATTACK && end_phase == PHASE_ATTACK ? &g_cp->attack
                                                                           : NULL;
        if (sm && sm->n < MAX_SAMPLES) {
            sm->total[sm->n] = (t1 - t0) + (t3 - t2);
            sm->session[sm->n] = t1 - t0;
            sm->big[sm->n] = t3 - t2;
            __atomic_store_n(&sm->n, sm->n + 1, __ATOMIC_RELEASE);
        }
    }
    tf_disconnect(cl);
    free(back);
    free(big);
    return 0;
}

/* ---- attackers: answers ---- */

/* One attacker process. */
typedef struct attacker {
    const th_daemon *d;
    uid_t uid;
    int slot;
    uint64_t rng;
    uint64_t stop_ms; /* no move starts after this */
    int move;
    uint64_t seq;      /* the last sequence number sent on the connection in use */
    uint64_t last_req; /* of them, the last that was no doorbell (doorbells are not ordered) */
    uint64_t sent_ms;  /* when the last request went out */
    int failed;
} attacker;

static uint64_t rnd(attacker *a) { return th_splitmix(&a->rng); }
/* Uniform in [0, n). */
static int below(attacker *a, int n) { return n <= 1 ? 0 : (int)(rnd(a) % (uint64_t)n); }

/* Set once this attacker process found a broken contract: its self-kill then is no alibi. */
static volatile sig_atomic_t g_attacker_failed;

/* Reports a broken contract of the daemon: the move fails, the process will exit 1. */
static void broken(attacker *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void broken(attacker *a, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[attacker uid %u pid %d] %s: %s\n", (unsigned)a->uid, (int)getpid(),
            MOVE_NAMES[a->move], msg);
    count(&g_cp->failures[a->move]);
    a->failed = 1;
    g_attacker_failed = 1;
}

/* The Result an answer carries (every answer but HelloReply has one), or NULL. */
static const Tenferro__Result *result_of(const Tenferro__Frame *f) {
    switch (f->body_case) {
    case TENFERRO__FRAME__BODY_RESULT: return f->result;
    case TENFERRO__FRAME__BODY_DOWNLOAD_REPLY: return f->download_reply->result;
    case TENFERRO__FRAME__BODY_STATUS_REPLY: return f->status_reply->result;
    case TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY: return f->tensor_info_reply->result;
    default: return NULL;
    }
}

/*
 * Statuses a hostile request may get: success, or a refusal that says what
 * was wrong with it or which limit it met. TF_ERR_NO_MEMORY is one only for
 * a transfer (a buffer whose punched pages could not be held again:
 * docs/security.md); INTERNAL, DEVICE, IO, VERSION (the attackers speak the
 * right version) and the rest are not.
 */
static int typed_status(uint32_t st, int no_memory_ok) {
    switch (st) {
    case TF_OK:
    case TF_ERR_INVALID_ARGUMENT:
    case TF_ERR_PROTOCOL:
    case TF_ERR_UNKNOWN_HANDLE:
    case TF_ERR_SHAPE:
    case TF_ERR_DTYPE:
    case TF_ERR_AXIS:
    case TF_ERR_REENTERED:
    case TF_ERR_CONTENDED:
    case TF_ERR_TIMEOUT:
    case TF_ERR_BUSY:
    case TF_ERR_QUOTA:
    case TF_ERR_UNSUPPORTED:
    case TF_ERR_SESSION_CLOSED:
    case TF_ERR_TOO_MANY_CLIENTS:
    case TF_ERR_BAD_SHAPE:
    case TF_ERR_BATCH_FAILED: return 1;
    case TF_ERR_NO_MEMORY: return no_memory_ok;
    default: return 0;
    }
}

/* Counts a status and checks it is typed, with a reason when it refuses; -1 (failed) when not. */
static int check_status(attacker *a, uint32_t st, const char *message, int no_memory_ok,
                        const char *what) {
    count(&g_cp->statuses[st < 31 ? st : 31]);
    if (!typed_status(st, no_memory_ok)) {
        broken(a, "%s: answered %s (%s), which is no success or typed refusal", what,
               tf_status_name((tf_status)st), message ? message : "");
        return -1;
    }
    if (st != TF_OK && !(message && strlen(message) >= 10)) {
        broken(a, "%s: refused with %s but no readable reason", what,
               tf_status_name((tf_status)st));
        return -1;
    }
    return (int)st;
}

/* Sets a send deadline, so an attacker whose input the daemon stops reading is never stuck. */
static int conn_open(attacker *a) {
    int fd = th_raw_connect(a->d);
    if (fd < 0) {
        broken(a, "connect: %s (the daemon must keep accepting)", strerror(errno));
        return -1;
    }
    struct timeval tv = {ANSWER_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/*
 * After a last word (a Result with sequence number 0), the daemon must close
 * the connection: 0 when it did within ANSWER_MS, -1 (failed) when not.
 */
static int last_word(attacker *a, int fd, Tenferro__Frame *f, const char *what) {
    const Tenferro__Result *r = f->result;
    int st = check_status(a, r->status, r->message, 0, what);
    tf__frame_free(f);
    if (st < 0) return -1;
    if (st == TF_OK) {
        broken(a, "%s: a last word (sequence 0) that says TF_OK", what);
        return -1;
    }
    if (!th_raw_closed(fd, ANSWER_MS)) {
        broken(a, "%s: a last word, then the connection stayed open for %d ms", what, ANSWER_MS);
        return -1;
    }
    count(&g_cp->daemon_closed);
    return 0;
}

/*
 * What became of a request: sent (no answer read yet), answered, the
 * connection ended as the protocol allows, or a broken contract (reported).
 * Negative, so a function can return either a status or one of the last two.
 */
enum { SENT = 1001, ANSWERED = 1000, CLOSED = -2, FAILED = -1 };

/*
 * Reads the answer to request `seq` within ANSWER_MS (with the descriptor
 * that rides on it when `passed` is not NULL) and checks it: ANSWERED with
 * *out set; CLOSED when the daemon said its last word and closed, as it may
 * after any request; FAILED (reported) for no answer, an answer out of order,
 * a close without a last word, or a status that is not typed.
 */
static int answer(attacker *a, int fd, uint64_t seq, Tenferro__Frame **out, int *passed,
                  int no_memory_ok, const char *what) {
    *out = NULL;
    Tenferro__Frame *f =
        passed ? th_raw_recv_fd(fd, ANSWER_MS, passed) : th_raw_recv(fd, ANSWER_MS);
    if (!f) {
        if (th_raw_closed(fd, 50)) {
            broken(a,
                   "%s: the daemon closed the connection without a last word, %llu ms after the "
                   "request",
                   what, (unsigned long long)(now_ms() - a->sent_ms));
        } else {
            broken(a, "%s: no answer within %d ms (or one that does not decode)", what, ANSWER_MS);
        }
        return FAILED;
    }
    if (f->seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT) {
        if (passed && *passed >= 0) close(*passed);
        if (passed) *passed = -1;
        return last_word(a, fd, f, what) == 0 ? CLOSED : FAILED;
    }
    if (f->seq != seq) {
        broken(a, "%s: the answer carries sequence %llu, the request %llu", what,
               (unsigned long long)f->seq, (unsigned long long)seq);
        tf__frame_free(f);
        return FAILED;
    }
    const Tenferro__Result *r = result_of(f);
    if (r && check_status(a, r->status, r->message, no_memory_ok, what) < 0) {
        tf__frame_free(f);
        return FAILED;
    }
    *out = f;
    return ANSWERED;
}

/* Sends f with the next sequence number: SENT, or CLOSED / FAILED as answer() would say. */
static int send_frame(attacker *a, int fd, Tenferro__Frame *f, const char *what) {
    f->seq = ++a->seq;
    if (f->body_case != TENFERRO__FRAME__BODY_MAILBOX_DOORBELL) a->last_req = f->seq;
    a->sent_ms = now_ms();
    if (th_raw_send(fd, f) == 0) return SENT;
    /* The daemon may have said its last word and closed: that is read, and judged, instead. */
    Tenferro__Frame *r = th_raw_recv(fd, 1000);
    if (r && r->seq == 0 && r->body_case == TENFERRO__FRAME__BODY_RESULT)
        return last_word(a, fd, r, what) == 0 ? CLOSED : FAILED;
    tf__frame_free(r);
    broken(a, "%s: the request could not be sent (%s) and no last word came", what,
           strerror(errno));
    return FAILED;
}

/* Sends f and reads its answer (see answer()): ANSWERED with *out set, CLOSED or FAILED. */
static int call(attacker *a, int fd, Tenferro__Frame *f, Tenferro__Frame **out, int *passed,
                const char *what) {
    *out = NULL;
    if (passed) *passed = -1;
    int rc = send_frame(a, fd, f, what);
    if (rc != SENT) return rc;
    return answer(a, fd, f->seq, out, passed, f->body_case == TENFERRO__FRAME__BODY_TRANSFER, what);
}

/* The status of an answer (its Result); FAILED (reported) when it carries none. */
static int status_of(attacker *a, const Tenferro__Frame *f, const char *what) {
    const Tenferro__Result *r = result_of(f);
    if (r) return (int)r->status;
    broken(a, "%s: answered with a frame of body %d, which carries no result", what,
           (int)f->body_case);
    return FAILED;
}

/*
 * Waits until the daemon ends fd by itself, by `until`: whatever it says
 * first must be a typed last word; fails when the connection is still open.
 * Closes fd; 1 when the daemon ended it as it should.
 */
static int expect_daemon_closes(attacker *a, int fd, uint64_t until, const char *what) {
    int ended = 0;
    for (;;) {
        Tenferro__Frame *f = th_raw_recv(fd, ms_until(until));
        if (f) {
            if (f->seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT) {
                ended = last_word(a, fd, f, what) == 0;
            } else {
                broken(a, "%s: the daemon sent a frame of body %d, expected only a last word", what,
                       (int)f->body_case);
                tf__frame_free(f);
            }
            break;
        }
        if (th_raw_closed(fd, 0)) {
            count(&g_cp->daemon_closed);
            ended = 1;
            break;
        }
        if (now_ms() >= until) {
            broken(a, "%s: the connection is still open", what);
            break;
        }
        broken(a, "%s: the daemon sent bytes that do not decode", what);
        break;
    }
    close(fd);
    return ended;
}

/*
 * Waits up to `ms` for the daemon to close fd without reading anything from
 * it (a client that never reads); 1 when it did.
 */
static int peer_gone(int fd, int ms) {
    uint64_t until = now_ms() + (uint64_t)ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        int n = poll(&p, 1, ms_until(until));
        if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return 1;
        if (n > 0) th_sleep_ms(20); /* readable replies, which this client does not read */
        if (now_ms() >= until) return 0;
    }
}

/* ---- attackers: a connection past its Hello ---- */

/* A raw connection of an attacker and its completion page. */
typedef struct raw {
    int fd;
    int page_fd;   /* the page's memfd, from HelloReply; -1 once closed */
    uint8_t *page; /* the attacker's mapping of it (TF_RING_MAP_BYTES), or NULL */
    uint64_t client_id;
} raw;

/*
 * Connects and says Hello: ANSWERED with r filled, CLOSED when the daemon
 * refused the client (typed, at accept or at the Hello), FAILED otherwise.
 */
static int say_hello(attacker *a, raw *r) {
    *r = (raw){.fd = conn_open(a), .page_fd = -1};
    if (r->fd < 0) return FAILED;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    h.client_name = (char *)MOVE_NAMES[a->move];
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &h;
    a->seq = a->last_req = 0;
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, &r->page_fd, "Hello");
    if (rc != ANSWERED) {
        close(r->fd);
        r->fd = -1;
        return rc;
    }
    if (rep->body_case == TENFERRO__FRAME__BODY_RESULT && rep->result->status != TF_OK) {
        /* Refused at the Hello (a client limit), typed: the daemon closes the connection. */
        if (th_raw_closed(r->fd, ANSWER_MS)) {
            count(&g_cp->daemon_closed);
            rc = CLOSED;
        } else {
            broken(a, "Hello refused with %s, then the connection stayed open",
                   tf_status_name((tf_status)rep->result->status));
            rc = FAILED;
        }
    } else if (rep->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY) {
        broken(a, "Hello: answered with a frame of body %d", (int)rep->body_case);
        rc = FAILED;
    } else if (r->page_fd < 0) {
        broken(a, "Hello: HelloReply came without the completion page's memfd");
        rc = FAILED;
    }
    if (rc == ANSWERED) r->client_id = rep->hello_reply->client_id;
    tf__frame_free(rep);
    if (rc != ANSWERED) {
        if (r->page_fd >= 0) close(r->page_fd);
        close(r->fd);
        r->fd = r->page_fd = -1;
    }
    return rc;
}

/* Maps the completion page (the slots, the mailbox and the ring); 0, or -1 (failed). */
static int map_page(attacker *a, raw *r) {
    void *p = mmap(NULL, TF_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, r->page_fd, 0);
    if (p == MAP_FAILED) {
        broken(a, "cannot map the completion page before its Mapped: %s", strerror(errno));
        return -1;
    }
    r->page = p;
    return 0;
}

/* Sends Mapped{buffer} (no answer): SENT, CLOSED or FAILED. */
static int send_mapped(attacker *a, raw *r, uint64_t buffer) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Mapped m = TENFERRO__MAPPED__INIT;
    m.buffer = buffer;
    f.body_case = TENFERRO__FRAME__BODY_MAPPED;
    f.mapped = &m;
    return send_frame(a, r->fd, &f, "Mapped");
}

static void raw_close(raw *r) {
    if (r->page) munmap(r->page, TF_RING_MAP_BYTES);
    if (r->page_fd >= 0) close(r->page_fd);
    if (r->fd >= 0) close(r->fd);
    *r = (raw){.fd = -1, .page_fd = -1};
}

/*
 * A client as the library makes one: Hello, the page mapped, Mapped{0}.
 * ANSWERED with r open; CLOSED or FAILED with nothing left open.
 */
static int open_client(attacker *a, raw *r) {
    int rc = say_hello(a, r);
    if (rc != ANSWERED) return rc;
    rc = map_page(a, r) == 0 ? send_mapped(a, r, 0) : FAILED;
    if (rc == SENT) return ANSWERED;
    raw_close(r);
    return rc;
}

/* ---- attackers: requests ---- */

/* Creates tensor id of n f64 (with `data` when not NULL); the status, CLOSED or FAILED. */
static int tensor_create(attacker *a, raw *r, uint64_t id, size_t n, const double *data) {
    int64_t shape[1] = {(int64_t)n};
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = id;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = 1;
    up.shape = shape;
    if (data) {
        up.data.data = (uint8_t *)data;
        up.data.len = n * sizeof *data;
    }
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, NULL, "Upload");
    if (rc != ANSWERED) return rc;
    int st = status_of(a, rep, "Upload");
    if (rep->body_case != TENFERRO__FRAME__BODY_RESULT) {
        broken(a, "Upload: answered with body %d", (int)rep->body_case);
        st = FAILED;
    }
    tf__frame_free(rep);
    return st;
}

/*
 * Downloads `len` bytes of tensor id into dst: the status, CLOSED or FAILED;
 * a success must carry exactly len bytes.
 */
static int tensor_read(attacker *a, raw *r, uint64_t id, void *dst, size_t len) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, len);
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, NULL, "Download");
    if (rc != ANSWERED) return rc;
    int st = status_of(a, rep, "Download");
    if (rep->body_case != TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
        broken(a, "Download: answered with body %d", (int)rep->body_case);
        st = FAILED;
    } else if (st == TF_OK && rep->download_reply->data.len != len) {
        broken(a, "Download of %zu bytes: %zu came", len, rep->download_reply->data.len);
        st = FAILED;
    } else if (st == TF_OK && dst) {
        memcpy(dst, rep->download_reply->data.data, len);
    }
    tf__frame_free(rep);
    return st;
}

/* A Download of a tensor that was never made: must be refused UNKNOWN_HANDLE (or the client closed). */
static int probe(attacker *a, raw *r, const char *what) {
    uint8_t byte;
    int st = tensor_read(a, r, 987654321, &byte, 8);
    if (st >= 0 && st != TF_ERR_UNKNOWN_HANDLE) {
        broken(a, "%s: a Download of a tensor never made was answered %s", what,
               tf_status_name((tf_status)st));
        return FAILED;
    }
    return st;
}

/* BufferCreate of `bytes` under id: the status with *mem the memfd on success, CLOSED or FAILED. */
static int buffer_create(attacker *a, raw *r, uint64_t id, uint64_t bytes, int *mem) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__BufferCreate b = TENFERRO__BUFFER_CREATE__INIT;
    b.buffer = id;
    b.bytes = bytes;
    f.body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
    f.buffer_create = &b;
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, mem, "BufferCreate");
    if (rc != ANSWERED) return rc;
    int st = status_of(a, rep, "BufferCreate");
    if (st == TF_OK && *mem < 0) {
        broken(a, "BufferCreate: TF_OK without the buffer's memfd");
        st = FAILED;
    } else if (st != TF_OK && *mem >= 0) {
        if (st >= 0)
            broken(a, "BufferCreate: refused %s, yet a descriptor came", tf_status_name((tf_status)st));
        close(*mem);
        *mem = -1;
        st = FAILED;
    }
    tf__frame_free(rep);
    return st;
}

/* BufferFree of id: the status, CLOSED or FAILED. */
static int buffer_free(attacker *a, raw *r, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__BufferFree b = TENFERRO__BUFFER_FREE__INIT;
    b.buffer = id;
    f.body_case = TENFERRO__FRAME__BODY_BUFFER_FREE;
    f.buffer_free = &b;
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, NULL, "BufferFree");
    if (rc != ANSWERED) return rc;
    int st = status_of(a, rep, "BufferFree");
    tf__frame_free(rep);
    return st;
}

#define UP TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD
#define DOWN TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD

/* A pending transfer through completion slot `slot`: the Transfer's status, CLOSED or FAILED. */
static int transfer(attacker *a, raw *r, uint32_t direction, uint64_t buffer, uint64_t tensor,
                    uint32_t slot, uint64_t bytes) {
    tf__completion_slot *slots = (tf__completion_slot *)r->page;
    if (slots) th_slot_arm(slots, slot);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Transfer t = TENFERRO__TRANSFER__INIT;
    t.direction = direction;
    t.buffer = buffer;
    t.tensor = tensor;
    t.slot = slot;
    t.bytes = bytes;
    f.body_case = TENFERRO__FRAME__BODY_TRANSFER;
    f.transfer = &t;
    Tenferro__Frame *rep;
    int rc = call(a, r->fd, &f, &rep, NULL, "Transfer");
    if (rc != ANSWERED) return rc;
    int st = status_of(a, rep, "Transfer");
    tf__frame_free(rep);
    return st;
}

/* Waits for the daemon to post slot `slot` DONE; its typed status, or FAILED. */
static int slot_wait(attacker *a, raw *r, uint32_t slot) {
    tf__completion_slot *slots = (tf__completion_slot *)r->page;
    uint64_t until = now_ms() + ANSWER_MS;
    while (__atomic_load_n(&slots[slot].state, __ATOMIC_ACQUIRE) != TF__SLOT_DONE) {
        if (now_ms() >= until) {
            broken(a, "an accepted transfer's slot %u was not DONE within %d ms", slot, ANSWER_MS);
            return FAILED;
        }
        usleep(200);
    }
    uint32_t st = (uint32_t)th_slot_take(slots, slot);
    return check_status(a, st, "(a completion slot carries no reason)", 1, "completion slot") < 0
               ? FAILED
               : (int)st;
}

/* Sends a MailboxDoorbell (no answer): SENT, CLOSED or FAILED. */
static int doorbell(attacker *a, raw *r) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__MailboxDoorbell bell = TENFERRO__MAILBOX_DOORBELL__INIT;
    f.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    f.mailbox_doorbell = &bell;
    return send_frame(a, r->fd, &f, "MailboxDoorbell");
}

/*
 * Punches holes into memfd mem (mapped at map, `bytes` long) both ways a
 * client can: a hole punched with fallocate and one removed with madvise.
 * Returns how many of the two the kernel allowed.
 */
static int punch(int mem, void *map, size_t bytes) {
    int made = fallocate(mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0;
    made += madvise(map, bytes, MADV_REMOVE) == 0;
    return made;
}

/*
 * Keeps punching holes into mem for `ms` after its Mapped was sent, while the
 * daemon seals it: every hole that lands before the seal must be allocated
 * again by the seal. Counts those that landed.
 */
static void punch_while_sealing(int mem, void *map, size_t bytes, int ms) {
    uint64_t until = now_ms() + (uint64_t)ms;
    while (now_ms() < until) {
        int made = punch(mem, map, bytes);
        for (int i = 0; i < made; i++) count(&g_cp->punch_raced);
        if (!made) break; /* sealed */
    }
}

/*
 * Once the daemon answered a request sent after Mapped, the memfd is sealed:
 * no hole may be punched any more. Fails when one can.
 */
static void expect_sealed(attacker *a, int mem, void *map, size_t bytes, const char *what) {
    int made = punch(mem, map, bytes);
    if (made) {
        broken(a, "%s: a hole could be punched after its Mapped was handled (%d of 2 ways)", what,
               made);
        return;
    }
    count(&g_cp->punch_refused);
}

/* ---- attackers: the moves ---- */

/* 1-4 connections that never say Hello: the daemon must end each by the Hello deadline. */
static void move_no_hello(attacker *a) {
    int fds[4], n = 1 + below(a, 4);
    for (int i = 0; i < n; i++) fds[i] = conn_open(a);
    uint64_t until = now_ms() + setting_value("limits", "hello_timeout_ms", 5000) + 5000;
    int ended = 0;
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            ended += expect_daemon_closes(a, fds[i], until, "a connection that never said Hello");
    if (ended == n) count(&g_cp->reached[a->move]);
}

/*
 * Hello and then nothing for a while: the page unmapped, or mapped but never
 * said Mapped; the connection still works (a probe). Or a Hello whose reply
 * is never read.
 */
static void move_hello_idle(attacker *a) {
    if (below(a, 3) == 0) {
        int fd = conn_open(a);
        if (fd < 0) return;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Hello h = TENFERRO__HELLO__INIT;
        h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
        h.client_name = "hello_idle";
        f.seq = 1;
        f.body_case = TENFERRO__FRAME__BODY_HELLO;
        f.hello = &h;
        (void)th_raw_send(fd, &f);
        th_sleep_ms(below(a, 300));
        close(fd);
        return;
    }
    raw r;
    if (say_hello(a, &r) != ANSWERED) return;
    if (below(a, 2) && map_page(a, &r) != 0) goto out;
    th_sleep_ms(300 + below(a, 1700));
    (void)probe(a, &r, "after an idle Hello");
out:
    raw_close(&r);
}

/* Mappings of one move's pinned buffers, unmapped when it ends. */
typedef struct maps {
    void *p[256];
    size_t bytes[256];
    int n;
} maps;

static void maps_release(maps *m) {
    for (int i = 0; i < m->n; i++) munmap(m->p[i], m->bytes[i]);
    m->n = 0;
}

/*
 * Pinned buffers until refused: 1-byte ones that are never Mapped (at most 8
 * may wait for their Mapped), then, after freeing two, mapped and Mapped ones
 * until a count or byte limit refuses; then the client goes away holding them.
 */
static void move_buffers(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    static maps m;
    int accepted = 0, st = -1, mem;
    uint64_t id;
    for (id = 1; id <= 12; id++) {
        st = buffer_create(a, &r, id, 1, &mem);
        if (st != TF_OK) break;
        close(mem); /* never mapped, never Mapped: the daemon keeps its own descriptor */
        accepted++;
    }
    if (st < 0) goto out;
    if (accepted > 8)
        broken(a, "%d buffers waiting for their Mapped were accepted; at most 8 may", accepted);
    if (st == TF_OK) broken(a, "12 buffers that were never Mapped, and no refusal");
    if (st != TF_OK && st != TF_ERR_QUOTA)
        broken(a, "a BufferCreate past the unsealed limit was refused %s, not TF_ERR_QUOTA",
               tf_status_name((tf_status)st));
    for (uint64_t k = 1; k <= 2 && k <= (uint64_t)accepted; k++)
        if ((st = buffer_free(a, &r, k)) != TF_OK) {
            if (st >= 0)
                broken(a, "BufferFree of an idle unsealed buffer: %s",
                       tf_status_name((tf_status)st));
            goto out;
        }
    int made = 0;
    for (id = 100; id < 100 + 200; id++) {
        uint64_t bytes = 1 + (uint64_t)below(a, 3) * (uint64_t)below(a, 8192);
        st = buffer_create(a, &r, id, bytes, &mem);
        if (st != TF_OK) break;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
        close(mem);
        if (p == MAP_FAILED) {
            broken(a, "cannot map a new pinned buffer: %s", strerror(errno));
            goto out;
        }
        if (m.n < 256) {
            m.p[m.n] = p;
            m.bytes[m.n++] = bytes;
        }
        memset(p, 0x3c, bytes);
        if (send_mapped(a, &r, id) != SENT) goto out;
        made++;
    }
    if (st < 0) goto out;
    if (st == TF_OK && applied("limits", "max_buffers_per_client"))
        broken(a,
               "%d pinned buffers for one client, and no limit refused ([limits] "
               "max_buffers_per_client is %s)",
               made, applied("limits", "max_buffers_per_client")->value);
    if (st == TF_ERR_QUOTA) count(&g_cp->reached[a->move]);
    th_sleep_ms(below(a, 500));
out:
    raw_close(&r);
    maps_release(&m);
}

/*
 * Holes punched into the completion page and into a pinned buffer before
 * their Mapped, and while the daemon seals them; a transfer through the
 * buffer before its Mapped must be refused; after it, a pattern uploaded
 * from the buffer and downloaded back into it must come back whole, and no
 * hole can be punched any more.
 */
static void move_holes(attacker *a) {
    raw r;
    void *buf = MAP_FAILED;
    int mem = -1;
    const size_t n = 512 * (size_t)(1 + below(a, 32)); /* 4 KiB to 128 KiB of f64 */
    const size_t bytes = n * sizeof(double);
    if (say_hello(a, &r) != ANSWERED) return;
    if (map_page(a, &r) != 0) goto out;
    /* Before Mapped the page is the client's alone: its holes are its own business. */
    memset(r.page, 0xa5, TF__COMPLETION_PAGE_BYTES); /* the slots' words, some of them garbage */
    int made = punch(r.page_fd, r.page, TF_RING_MAP_BYTES);
    for (int i = 0; i < made; i++) count(&g_cp->punch_before);
    if (send_mapped(a, &r, 0) != SENT) goto out;
    punch_while_sealing(r.page_fd, r.page, TF_RING_MAP_BYTES, below(a, 20));
    if (probe(a, &r, "after the page's Mapped") < 0) goto out;
    expect_sealed(a, r.page_fd, r.page, TF_RING_MAP_BYTES, "the completion page");

    int st = tensor_create(a, &r, 7, n, NULL);
    if (st != TF_OK) goto out; /* a quota: this move has nothing to move data into */
    st = buffer_create(a, &r, 1, bytes, &mem);
    if (st != TF_OK) goto out;
    buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    if (buf == MAP_FAILED) {
        broken(a, "cannot map a new pinned buffer: %s", strerror(errno));
        goto out;
    }
    memset(buf, 0x5a, bytes);
    made = punch(mem, buf, bytes);
    for (int i = 0; i < made; i++) count(&g_cp->punch_before);
    st = transfer(a, &r, below(a, 2) ? UP : DOWN, 1, 7, 3, bytes);
    if (st < 0) goto out;
    if (st == TF_OK) {
        broken(a, "a transfer through a pinned buffer not yet Mapped was accepted");
        goto out;
    }
    if (send_mapped(a, &r, 1) != SENT) goto out;
    punch_while_sealing(mem, buf, bytes, below(a, 20));

    double *pattern = malloc(bytes);
    if (!pattern) abort();
    for (size_t i = 0; i < n; i++) pattern[i] = (double)(rnd(a) >> 11);
    memcpy(buf, pattern, bytes);
    st = transfer(a, &r, UP, 1, 7, 1, bytes);
    if (st == TF_OK) st = slot_wait(a, &r, 1);
    if (st >= 0) expect_sealed(a, mem, buf, bytes, "a pinned buffer");
    int up_ok = st == TF_OK;
    if (st >= 0) {
        memset(buf, 0xee, bytes);
        st = transfer(a, &r, DOWN, 1, 7, 2, bytes);
        if (st == TF_OK) {
            /* In flight: the buffer must not take a hole now either. */
            expect_sealed(a, mem, buf, bytes, "a pinned buffer in a transfer");
            st = slot_wait(a, &r, 2);
        }
        if (up_ok && st == TF_OK && memcmp(buf, pattern, bytes) != 0)
            broken(a,
                   "%zu bytes uploaded from a pinned buffer whose holes were punched before its "
                   "Mapped came back changed",
                   bytes);
        if (st == TF_OK) count(&g_cp->reached[a->move]);
    }
    free(pattern);
out:
    if (buf != MAP_FAILED) munmap(buf, bytes);
    if (mem >= 0) close(mem);
    raw_close(&r);
}

/*
 * Tensors until a quota refuses, most created without data, some with; one
 * created without data must read back as zeros (bytes a client never wrote).
 * Then some are freed and the client goes away holding the rest.
 */
static void move_tensors(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    const size_t n = (size_t)1 << 17, n_data = (size_t)1 << 15; /* 1 MiB, 256 KiB */
    double *data = malloc(n_data * sizeof *data);
    if (!data) abort();
    for (size_t i = 0; i < n_data; i++) data[i] = 1.0 + (double)i;
    int st = -1;
    uint64_t id, empty = 0;
    for (id = 1; id <= 600; id++) {
        int with_data = below(a, 4) == 0;
        st = tensor_create(a, &r, id, with_data ? n_data : n, with_data ? data : NULL);
        if (st != TF_OK) break;
        if (!with_data && !empty) empty = id;
    }
    if (st < 0) goto out;
    if (st == TF_OK) {
        if (applied("quota.uid", "device_bytes") || applied("quota.client", "device_bytes"))
            broken(a, "600 tensors of up to 1 MiB for one client, and no quota refused");
    } else if (st != TF_ERR_QUOTA) {
        broken(a, "an Upload past the quota was refused %s, not TF_ERR_QUOTA",
               tf_status_name((tf_status)st));
    } else {
        count(&g_cp->reached[a->move]);
    }
    if (empty) {
        static double back[8192];
        st = tensor_read(a, &r, empty, back, sizeof back);
        if (st < 0) goto out;
        for (size_t i = 0; st == TF_OK && i < sizeof back / sizeof *back; i++)
            if (back[i] != 0.0) {
                broken(a, "a tensor created without data read back %g at element %zu, not zero",
                       back[i], i);
                break;
            }
    }
    if (below(a, 2) && id > 2) {
        uint64_t ids[64];
        size_t k = 0;
        for (uint64_t t = 1; t < id && k < 64; t += 2) ids[k++] = t;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Free fr = TENFERRO__FREE__INIT;
        fr.n_tensors = k;
        fr.tensors = ids;
        f.body_case = TENFERRO__FRAME__BODY_FREE;
        f.free = &fr;
        if (send_frame(a, r.fd, &f, "Free") != SENT) goto out;
    }
    th_sleep_ms(below(a, 800));
out:
    free(data);
    raw_close(&r);
}

/*
 * Long Submits back to back: scoped bursts of additions and frees (or, now
 * and then, matrix products and frees, or additions whose outputs are kept)
 * on two small tensors, the first ones keeping the scoped root open; their
 * answers read (each a success or a typed refusal: the bystander's held
 * session, a tensor quota), then an input read back unchanged. Or the client
 * goes away without reading.
 */
static void move_submits(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    const int matmul = below(a, 4) == 0;
    /* Now and then without the frees: the outputs pile up until the live_tensors quota refuses. */
    const int keep = !matmul && below(a, 3) == 0;
    const size_t side = matmul ? 48 : 32, elems = side * side;
    const int pairs = matmul ? 100 + below(a, 300) : 1000 + below(a, 6000);
    const int submits = 1 + below(a, 3);
    double *ones = malloc(elems * sizeof *ones);
    Tenferro__Op *ops = calloc((size_t)pairs * 2, sizeof *ops);
    Tenferro__Op **ptrs = calloc((size_t)pairs * 2, sizeof *ptrs);
    uint64_t *ins = calloc((size_t)pairs * 3, sizeof *ins);
    uint64_t seqs[3];
    if (!ones || !ops || !ptrs || !ins) abort();
    for (size_t i = 0; i < elems; i++) ones[i] = 1.0;
    int64_t shape[2] = {(int64_t)side, (int64_t)side};
    for (uint64_t id = 1; id <= 2; id++) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = id;
        up.create = 1;
        up.dtype = TF_F64;
        up.n_shape = 2;
        up.shape = shape;
        up.data.data = (uint8_t *)ones;
        up.data.len = elems * sizeof *ones;
        f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        f.upload = &up;
        Tenferro__Frame *rep;
        if (call(a, r.fd, &f, &rep, NULL, "Upload") != ANSWERED) goto out;
        int st = status_of(a, rep, "Upload");
        tf__frame_free(rep);
        if (st != TF_OK) goto out;
    }
    uint64_t next = 1000;
    for (int s = 0; s < submits; s++) {
        for (int p = 0; p < pairs; p++) {
            Tenferro__Op *op = &ops[2 * p], *fr = &ops[2 * p + 1];
            uint64_t *in = &ins[3 * p];
            tenferro__op__init(op);
            tenferro__op__init(fr);
            in[0] = 1;
            in[1] = 2;
            in[2] = next;
            op->kind = matmul ? TF__OP_MATMUL : TF__OP_ADD;
            op->n_inputs = 2;
            op->inputs = in;
            op->output = next++;
            fr->kind = TF__OP_FREE;
            fr->n_inputs = 1;
            fr->inputs = &in[2];
            if (keep) {
                ptrs[p] = op;
            } else {
                ptrs[2 * p] = op;
                ptrs[2 * p + 1] = fr;
            }
        }
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
        sub.mode = s == submits - 1 ? TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL
                                    : TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED;
        sub.n_ops = (size_t)pairs * (keep ? 1 : 2);
        sub.ops = ptrs;
        f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
        f.submit = &sub;
        if (send_frame(a, r.fd, &f, "Submit") != SENT) goto out;
        seqs[s] = f.seq;
    }
    if (below(a, 3) == 0) goto out; /* gone with the work queued: the daemon skips what is left */
    for (int s = 0; s < submits; s++) {
        Tenferro__Frame *rep;
        if (answer(a, r.fd, seqs[s], &rep, NULL, 0, "Submit") != ANSWERED) goto out;
        if (status_of(a, rep, "Submit") == TF_ERR_QUOTA) count(&g_cp->reached[a->move]);
        tf__frame_free(rep);
    }
    int st = tensor_read(a, &r, 1, ones, elems * sizeof *ones);
    for (size_t i = 0; st == TF_OK && i < elems; i++)
        if (ones[i] != 1.0) {
            broken(a, "an input of %d Submits changed: element %zu reads %g", submits, i, ones[i]);
            break;
        }
out:
    free(ones);
    free(ops);
    free(ptrs);
    free(ins);
    raw_close(&r);
}

/*
 * From a connection of its own, the queued reply bytes the status report
 * lists for client `id`: 1 with *bytes set, 0 when the client is not listed
 * (closed), -1 when no report came (failed).
 */
static int client_reply_bytes(attacker *a, uint64_t id, uint64_t *bytes) {
    raw s;
    int rc = say_hello(a, &s);
    if (rc != ANSWERED) return rc == CLOSED ? 0 : -1; /* refused: nothing to measure now */
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest req = TENFERRO__STATUS_REQUEST__INIT;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &req;
    Tenferro__Frame *rep;
    int found = -1;
    if (call(a, s.fd, &f, &rep, NULL, "StatusRequest") == ANSWERED) {
        found = 0;
        if (rep->body_case == TENFERRO__FRAME__BODY_STATUS_REPLY)
            for (size_t i = 0; i < rep->status_reply->n_clients; i++)
                if (rep->status_reply->clients[i]->client_id == id) {
                    *bytes = rep->status_reply->clients[i]->reply_bytes;
                    found = 1;
                }
        tf__frame_free(rep);
    }
    raw_close(&s);
    return found;
}

/*
 * A client that never reads: while it waits, its queued replies stay within
 * [limits] client_reply_bytes (one reply of slack), and the daemon ends it
 * within reply_stall_ms and some seconds.
 */
static void expect_reader_bounded(attacker *a, raw *r, const char *what) {
    const uint64_t limit = setting_value("limits", "client_reply_bytes", 0);
    const uint64_t stall = setting_value("limits", "reply_stall_ms", 0);
    th_sleep_ms(300);
    uint64_t queued = 0;
    int listed = client_reply_bytes(a, r->client_id, &queued);
    if (listed == 1 && limit && queued > limit + ((uint64_t)2 << 20))
        broken(a,
               "%s: %llu bytes of replies queued for a client that reads none, above [limits] "
               "client_reply_bytes %llu",
               what, (unsigned long long)queued, (unsigned long long)limit);
    if (!stall || !limit) return;
    if (!peer_gone(r->fd, (int)stall + 10000)) {
        broken(
            a,
            "%s: still connected %llu ms after it stopped reading ([limits] reply_stall_ms %llu)",
            what, (unsigned long long)stall + 10000, (unsigned long long)stall);
        return;
    }
    count(&g_cp->daemon_closed);
    count(&g_cp->stall_closed);
    count(&g_cp->reached[a->move]);
}

/*
 * Downloads of a 2 MiB tensor sent back to back, far more than
 * client_reply_bytes, and never read (but perhaps the first): the daemon
 * must stop reading this client, bound what it queues, and close it. Or the
 * client goes away itself with the replies queued.
 */
static void move_downloads(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    const size_t n = (size_t)1 << 18; /* 2 MiB of f64 */
    if (tensor_create(a, &r, 1, n, NULL) != TF_OK) goto out;
    int first = below(a, 4) == 0;
    if (first) {
        static double back[(size_t)1 << 18];
        int st = tensor_read(a, &r, 1, back, sizeof back);
        if (st != TF_OK) goto out;
        for (size_t i = 0; i < n; i++)
            if (back[i] != 0.0) {
                broken(a, "a tensor created without data read back %g at element %zu", back[i], i);
                goto out;
            }
    }
    const int downloads = 16 + below(a, 24);
    for (int i = 0; i < downloads; i++) {
        Tenferro__Frame f;
        Tenferro__Download dl;
        th_raw_build_download(&f, &dl, 1, 0, n * sizeof(double));
        if (send_frame(a, r.fd, &f, "Download") != SENT) goto out;
    }
    if (below(a, 3) == 0) {
        th_sleep_ms(below(a, 300));
        goto out;
    }
    expect_reader_bounded(a, &r, "a client that never read its Downloads");
out:
    raw_close(&r);
}

/*
 * Status requests sent back to back as long as the socket takes them, never
 * read: bounded and closed like unread Downloads once their replies pass
 * client_reply_bytes.
 */
static void move_status(attacker *a) {
    raw r;
    if (say_hello(a, &r) != ANSWERED) return;
    static uint8_t frames[20000 * 8];
    size_t len = 0;
    int n = 0;
    for (; n < 20000; n++) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__StatusRequest req = TENFERRO__STATUS_REQUEST__INIT;
        f.seq = ++a->seq;
        f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
        f.status_request = &req;
        uint8_t *buf;
        size_t blen;
        if (tf__frame_encode(&f, UINT32_MAX, &buf, &blen) != TF_OK) abort();
        if (len + blen > sizeof frames) {
            free(buf);
            break;
        }
        memcpy(frames + len, buf, blen);
        len += blen;
        free(buf);
    }
    /* As much as the socket takes in a few seconds: the daemon stops reading once replies pile up. */
    size_t sent = 0;
    uint64_t until = now_ms() + 3000;
    while (sent < len && now_ms() < until) {
        ssize_t k = send(r.fd, frames + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            sent += (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            th_sleep_ms(5);
        } else {
            break; /* closed already: judged below */
        }
    }
    /* Each reply lists every client and counter: 20000 of them are far above client_reply_bytes. */
    if (sent == len)
        expect_reader_bounded(a, &r, "a client that never read its Status replies");
    else
        th_sleep_ms(500);
    raw_close(&r);
}

/* A body of `part` random bytes under a header announcing `len` (the caller frees it). */
static uint8_t *junk_frame(attacker *a, uint32_t len, size_t part) {
    uint8_t *junk = malloc(4 + part);
    if (!junk) abort();
    tf__frame_put_length(junk, len);
    for (size_t i = 4; i < 4 + part; i += 8) {
        uint64_t v = rnd(a);
        memcpy(junk + i, &v, 4 + part - i < 8 ? 4 + part - i : 8);
    }
    if (part) junk[4] = (uint8_t)(((1 + below(a, 15)) << 3) | 7); /* wire type 7: never decodes */
    return junk;
}

/*
 * Two to four clients at once, each with a frame announced near the maximum
 * and sent in part, held for a while: together they pass the uid's
 * uid_receive_bytes, so the daemon may end some with a TF_ERR_QUOTA last word
 * (nothing else); the attacker closes the rest. 1 when the daemon ended one.
 */
static int partial_crowd(attacker *a, uint64_t max) {
    raw rs[4];
    int n = 2 + below(a, 3), opened = 0, ended = 0, sent[4] = {0};
    while (opened < n && say_hello(a, &rs[opened]) == ANSWERED) opened++;
    for (int i = 0; i < opened; i++) {
        const uint32_t len = (uint32_t)(max - (uint64_t)below(a, (int)(max / 8)));
        const size_t part = len / 2 + (size_t)below(a, (int)(len / 2));
        uint8_t *junk = junk_frame(a, len, part);
        sent[i] = th_raw_send_bytes(rs[i].fd, junk, 4 + part) == 0;
        free(junk);
    }
    th_sleep_ms(200 + below(a, 1300));
    for (int i = 0; i < opened; i++) {
        struct pollfd p = {.fd = rs[i].fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 1) {
            ended |= expect_daemon_closes(a, rs[i].fd, now_ms() + ANSWER_MS,
                                          "an unfinished frame near the maximum");
            rs[i].fd = -1;
        } else if (!sent[i]) {
            broken(a, "an unfinished frame: the send failed (%s) and the daemon said nothing",
                   strerror(errno));
        }
        raw_close(&rs[i]);
    }
    return ended;
}

/*
 * Frames that cannot be finished or read: partial frames near the maximum
 * held by several clients at once (partial_crowd); a length above the
 * maximum, after Hello and before it; a complete frame of megabytes that does
 * not decode. The daemon ends the last three with a typed last word.
 */
static void move_partial(attacker *a) {
    const uint64_t max = setting_value("daemon", "max_frame_bytes", TF__DEFAULT_MAX_FRAME_BYTES);
    const int kind = below(a, 4);
    int ended = 0;
    if (kind == 0) {
        ended = partial_crowd(a, max);
    } else if (kind == 1) {
        int fd = conn_open(a);
        if (fd < 0) return;
        uint8_t header[4];
        tf__frame_put_length(header, (uint32_t)(TF__MIN_MAX_FRAME_BYTES + 1 + rnd(a) % 1000000));
        if (th_raw_send_bytes(fd, header, sizeof header) == 0)
            ended = expect_daemon_closes(a, fd, now_ms() + ANSWER_MS,
                                         "a frame above 64 KiB before Hello");
        else
            close(fd);
    } else {
        raw r;
        if (say_hello(a, &r) != ANSWERED) return;
        /* Above the maximum (a header alone), or up to it and at least 256 KiB: decoded off the loop. */
        const uint32_t len = kind == 2 ? (uint32_t)(max + 1 + rnd(a) % (UINT32_MAX - max))
                                       : (uint32_t)(max - (uint64_t)below(a, (int)(max / 4)));
        uint8_t *junk = junk_frame(a, len, kind == 2 ? 0 : len);
        if (th_raw_send_bytes(r.fd, junk, 4 + (kind == 2 ? 0 : len)) == 0 || kind == 3) {
            ended = expect_daemon_closes(a, r.fd, now_ms() + ANSWER_MS,
                                         kind == 2 ? "a frame above max_frame_bytes"
                                                   : "a frame of megabytes that does not decode");
            r.fd = -1;
        }
        free(junk);
        raw_close(&r);
    }
    if (ended) count(&g_cp->reached[a->move]);
}

/* Random bytes. */
static void fill_random(attacker *a, void *dst, size_t n) {
    uint8_t *p = dst;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rnd(a);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/*
 * Junk in the shared page: first plausible mailbox requests naming nothing
 * that exists, each answered in the mailbox with a typed refusal; then random
 * bytes in the mailbox, in the slots, and ring entries that are malformed or
 * carry random frames (never a SessionOpen, which would hold the domain),
 * each with a doorbell. Then a probe: the daemon answers it, or has closed
 * the connection with a last word (a malformed ring is a protocol error).
 */
static void move_junk(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    tf__mailbox *box = (tf__mailbox *)(r.page + TF__MAILBOX_OFFSET);
    tf_ring_header *ring = (tf_ring_header *)(r.page + TF_RING_OFFSET);
    uint8_t *requests = r.page + TF_RING_OFFSET + TF_RING_HEADER_BYTES;
    /* The first answer is only read once the page's Mapped (sent before) took effect. */
    if (probe(a, &r, "after the page's Mapped") < 0) goto out;
    const int asks = 1 + below(a, 6);
    for (int i = 0; i < asks; i++) {
        box->direction = (uint32_t)below(a, 4);
        box->slot = (uint32_t)below(a, 1024);
        box->buffer = 1 + (uint64_t)below(a, 100);
        box->tensor = (uint64_t)below(a, 100);
        box->offset = below(a, 2) ? 0 : rnd(a);
        box->bytes = below(a, 2) ? 8 : rnd(a);
        box->after_seq = a->last_req; /* a doorbell is no frame a request can wait for */
        box->client_sleeping = 0;
        __atomic_store_n(&box->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
        if (doorbell(a, &r) != SENT) goto out;
        uint64_t until = now_ms() + ANSWER_MS;
        while (__atomic_load_n(&box->state, __ATOMIC_ACQUIRE) != TF__MAILBOX_ANSWERED) {
            if (now_ms() >= until) {
                broken(a, "a mailbox request with a doorbell was not answered within %d ms",
                       ANSWER_MS);
                goto out;
            }
            usleep(200);
        }
        char msg[sizeof box->message + 1];
        memcpy(msg, box->message, sizeof box->message);
        msg[sizeof box->message] = '\0';
        int st = check_status(a, box->status, msg, 0, "a mailbox request naming nothing");
        if (st < 0) goto out;
        if (st == TF_OK) {
            broken(a, "a mailbox transfer naming buffer %llu, which was never made, was accepted",
                   (unsigned long long)box->buffer);
            goto out;
        }
        __atomic_store_n(&box->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_RELEASE);
    }
    const int rounds = 1 + below(a, 20);
    for (int i = 0; i < rounds; i++) {
        switch (below(a, 4)) {
        case 0: fill_random(a, box, 64); break; /* the mailbox's words, all random */
        case 1: fill_random(a, r.page, TF__COMPLETION_PAGE_BYTES); break; /* the slots */
        case 2: { /* a head that is nowhere near the tail */
            uint64_t tail = __atomic_load_n(&ring->req_tail, __ATOMIC_ACQUIRE);
            uint64_t head =
                below(a, 2) ? rnd(a) : tail + (uint64_t)below(a, 2 * TF_RING_REQUEST_BYTES);
            __atomic_store_n(&ring->req_head, head, __ATOMIC_SEQ_CST);
            break;
        }
        default: { /* one entry at the tail: random framing or a random frame */
            uint64_t tail = __atomic_load_n(&ring->req_tail, __ATOMIC_ACQUIRE);
            uint32_t body = (uint32_t)below(a, 2048);
            tf_ring_entry e = {.bytes = below(a, 8) ? body : (uint32_t)rnd(a),
                               .reserved = (uint32_t)below(a, 2),
                               .seq = below(a, 2) ? a->seq + 1 : rnd(a),
                               .after_seq =
                                   below(a, 4) ? a->last_req : (uint64_t)below(a, (int)a->seq + 1)};
            uint8_t payload[2048];
            fill_random(a, payload, body);
            /* Never a SessionOpen: an attacker holding the domain is not what this campaign tests. */
            for (;;) {
                Tenferro__Frame *fr = tf__frame_decode(payload, body);
                int open = fr && fr->body_case == TENFERRO__FRAME__BODY_SESSION_OPEN;
                tf__frame_free(fr);
                if (!open) break;
                payload[0] ^= 0x07;
            }
            size_t at = (size_t)(tail % TF_RING_REQUEST_BYTES);
            /* Written where the daemon reads next, wrapping as the ring does. */
            uint8_t whole[sizeof e + sizeof payload];
            memcpy(whole, &e, sizeof e);
            memcpy(whole + sizeof e, payload, body);
            for (size_t k = 0; k < sizeof e + body; k++)
                requests[(at + k) % TF_RING_REQUEST_BYTES] = whole[k];
            uint64_t span = ((uint64_t)sizeof e + body + 7) & ~(uint64_t)7;
            __atomic_store_n(&ring->req_head, tail + span, __ATOMIC_SEQ_CST);
            break;
        }
        }
        int rc = doorbell(a, &r);
        if (rc == CLOSED) count(&g_cp->reached[a->move]); /* ended over a malformed ring */
        if (rc != SENT) goto out;
        th_sleep_ms(below(a, 20));
    }
    if (probe(a, &r, "after junk in the mailbox and the ring") != FAILED)
        count(&g_cp->reached[a->move]);
out:
    raw_close(&r);
}

/* Prepared graphs (x + x over shapes that differ) until a limit refuses. */
static void move_prepare(attacker *a) {
    raw r;
    if (open_client(a, &r) != ANSWERED) return;
    int st = TF_OK;
    int k;
    for (k = 1; k <= 40 && st == TF_OK; k++) {
        int64_t shape[1] = {1 + below(a, 256)};
        Tenferro__GraphInput in = TENFERRO__GRAPH_INPUT__INIT;
        Tenferro__GraphInput *inp = &in;
        in.id = 1;
        in.dtype = TF_F64;
        in.n_shape = 1;
        in.shape = shape;
        uint64_t node_in[2] = {1, 1}, outs[1] = {2};
        Tenferro__Op node = TENFERRO__OP__INIT;
        Tenferro__Op *nodep = &node;
        node.kind = TF__OP_ADD;
        node.n_inputs = 2;
        node.inputs = node_in;
        node.output = 2;
        Tenferro__Prepare p = TENFERRO__PREPARE__INIT;
        p.id = (uint64_t)k;
        p.n_inputs = 1;
        p.inputs = &inp;
        p.n_nodes = 1;
        p.nodes = &nodep;
        p.n_outputs = 1;
        p.outputs = outs;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        f.body_case = TENFERRO__FRAME__BODY_PREPARE;
        f.prepare = &p;
        Tenferro__Frame *rep;
        if (call(a, r.fd, &f, &rep, NULL, "Prepare") != ANSWERED) goto out;
        st = status_of(a, rep, "Prepare");
        tf__frame_free(rep);
    }
    if (st == TF_OK && applied("limits", "max_prepared"))
        broken(a,
               "40 prepared graphs for one client, and no limit refused ([limits] max_prepared %s)",
               applied("limits", "max_prepared")->value);
    if (st == TF_ERR_QUOTA) count(&g_cp->reached[a->move]);
    th_sleep_ms(below(a, 500));
out:
    raw_close(&r);
}

/*
 * Reconnect loops: connect, Hello, then go at once, after reading the
 * answer, or after a request whose answer is never read; or a crowd of
 * clients above the uid's max_clients_per_uid, the ones past it refused
 * typed.
 */
static void move_reconnect(attacker *a) {
    if (below(a, 3) == 0) {
        raw crowd[24];
        int n = 0, refused = 0;
        for (int i = 0; i < 24; i++) {
            int rc = say_hello(a, &crowd[n]);
            if (rc == ANSWERED)
                n++;
            else if (rc == CLOSED)
                refused++;
            else
                break;
        }
        if (refused) count(&g_cp->reached[a->move]);
        for (int i = 0; i < n; i++) raw_close(&crowd[i]);
        return;
    }
    const int loops = 10 + below(a, 30);
    for (int i = 0; i < loops && !a->failed; i++) {
        const int how = below(a, 3);
        if (how == 0) {
            int fd = conn_open(a);
            if (fd < 0) return;
            Tenferro__Frame f = TENFERRO__FRAME__INIT;
            Tenferro__Hello h = TENFERRO__HELLO__INIT;
            h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
            h.client_name = "reconnect";
            f.seq = 1;
            f.body_case = TENFERRO__FRAME__BODY_HELLO;
            f.hello = &h;
            (void)th_raw_send(fd, &f);
            close(fd);
            continue;
        }
        raw r;
        if (say_hello(a, &r) != ANSWERED) continue;
        if (how == 2) {
            Tenferro__Frame f;
            Tenferro__Download dl;
            th_raw_build_download(&f, &dl, 5, 0, 8);
            (void)send_frame(a, r.fd, &f, "Download");
        }
        raw_close(&r);
    }
}

static void (*const MOVE_FNS[N_MOVES])(attacker *) = {
    move_no_hello,  move_hello_idle, move_buffers, move_holes, move_tensors, move_submits,
    move_downloads, move_status,     move_partial, move_junk,  move_prepare, move_reconnect,
};

/* SIGALRM: the attacker kills itself in the middle of whatever it is doing (marked first). */
static int g_slot;
static void on_self_kill(int sig) {
    (void)sig;
    if (!g_attacker_failed) __atomic_store_n(&g_cp->self_killed[g_slot], 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&g_cp->self_kills, 1, __ATOMIC_SEQ_CST);
    kill(getpid(), SIGKILL);
}

/*
 * One attacker process: becomes its uid (as root), then runs random moves
 * until its stop time; a third of them arm a timer that SIGKILLs the process
 * mid-move. Exits 1 when any answer broke the contract.
 */
static int attacker_main(void *arg) {
    attacker *a = arg;
    if (g_other_uids && !th_become(a->uid, a->uid)) {
        fprintf(stderr, "[attacker] cannot become uid %u: %s\n", (unsigned)a->uid, strerror(errno));
        return 2;
    }
    th_die_with_parent(); /* after the credential change, which clears it */
    g_slot = a->slot;
    if (below(a, 3) == 0) {
        signal(SIGALRM, on_self_kill);
        int ms = 300 + below(a, 5000);
        struct itimerval t = {.it_value = {ms / 1000, (ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &t, NULL);
    }
    /* TENFERRO_CAMPAIGN_MOVES=name,name... runs only those moves: a failure reproduced alone. */
    const char *only = getenv("TENFERRO_CAMPAIGN_MOVES");
    int allowed[N_MOVES], n_allowed = 0;
    for (int m = 0; m < N_MOVES; m++)
        if (!only || !only[0] || strstr(only, MOVE_NAMES[m])) allowed[n_allowed++] = m;
    if (n_allowed == 0) return 2;
    while (now_ms() < a->stop_ms) {
        a->move = allowed[below(a, n_allowed)];
        count(&g_cp->moves[a->move]);
        MOVE_FNS[a->move](a);
        th_sleep_ms(10 + below(a, 60));
    }
    return a->failed ? 1 : 0;
}

/* ---- the test process ---- */

/*
 * Prints the daemon's five mappings with the most resident memory (from
 * /proc/PID/smaps): where RSS that stayed after the campaign lives.
 */
static void print_resident_mappings(pid_t pid) {
    char path[64], line[512], name[256] = "";
    snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return;
    struct {
        long kib;
        char name[256];
    } top[5] = {{0, ""}};
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char rest[256] = "";
        long kib;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255[^\n]", &lo, &hi, rest) >= 2) {
            const char *n = rest;
            while (*n == ' ') n++;
            snprintf(name, sizeof name, "%s (%lu MiB mapped)", *n ? n : "[anon]", (hi - lo) >> 20);
        } else if (sscanf(line, "Rss: %ld kB", &kib) == 1) {
            for (int i = 0; i < 5; i++)
                if (kib > top[i].kib) {
                    memmove(&top[i + 1], &top[i], (size_t)(4 - i) * sizeof top[0]);
                    top[i].kib = kib;
                    snprintf(top[i].name, sizeof top[i].name, "%s", name);
                    break;
                }
        }
    }
    fclose(f);
    for (int i = 0; i < 5 && top[i].kib; i++)
        printf("#   resident: %.1f MiB in %s\n", top[i].kib / 1024.0, top[i].name);
}

/* The gauges the campaign must leave as it found them. */
#define GAUGES(X)                                                                                  \
    X(clients) X(pinned_buffers_live) X(pinned_bytes_live) X(device_bytes_live)                    \
    X(device_allocations_live) X(tensors_live) X(sessions_live) X(reservation_holders)             \
    X(admission_queued) X(client_live_tensors) X(client_live_bytes) X(client_pinned_bytes)        \
    X(client_pinned_buffers) X(client_mappings) X(client_descriptors) X(client_prepared)          \
    X(client_reply_bytes) X(client_decode_bytes) X(client_receive_buffer_bytes)                   \
    X(client_queued_items) X(client_queued_requests) X(client_takes) X(client_scoped_active)      \
    X(client_held_sessions)
#define GAUGE_ENUM_(name) G_##name,
enum { GAUGES(GAUGE_ENUM_) N_GAUGES };
#define GAUGE_NAME_(name) #name,
static const char *const GAUGE_NAMES[N_GAUGES] = {GAUGES(GAUGE_NAME_)};

typedef struct gauges {
    uint64_t v[N_GAUGES];
} gauges;

/*
 * Reads every gauge from one status report: the daemon's _live counters,
 * tensors and sessions as created less freed, the reservation, and the sums
 * over the listed clients of what each holds (the asking connection is listed
 * too, the same at every reading). With `detail`, the clients still listed
 * are printed. 0, or -1 when no report came.
 */
static int read_gauges(const th_daemon *d, gauges *g, int detail) {
    Tenferro__Frame *f = th_status_report(d);
    if (!f) return -1;
    const Tenferro__StatusReply *s = f->status_reply;
    memset(g, 0, sizeof *g);
    g->v[G_clients] = s->n_clients;
    g->v[G_pinned_buffers_live] = th_report_counter(s, "pinned_buffers_live");
    g->v[G_pinned_bytes_live] = th_report_counter(s, "pinned_bytes_live");
    g->v[G_device_bytes_live] = th_report_counter(s, "device_bytes_live");
    g->v[G_device_allocations_live] = th_report_counter(s, "device_allocations_live");
    g->v[G_tensors_live] =
        th_report_counter(s, "tensors_created") - th_report_counter(s, "tensors_freed");
    g->v[G_sessions_live] =
        th_report_counter(s, "sessions_opened") - th_report_counter(s, "sessions_closed") -
        th_report_counter(s, "sessions_released") - th_report_counter(s, "sessions_reclaimed");
    for (size_t i = 0; i < s->n_reservations; i++) {
        g->v[G_reservation_holders] += s->reservations[i]->holder_client_id != 0;
        g->v[G_admission_queued] += s->reservations[i]->n_queued_client_ids;
    }
    for (size_t i = 0; i < s->n_clients; i++) {
        const Tenferro__ClientInfo *c = s->clients[i];
        g->v[G_client_live_tensors] += c->live_tensors;
        g->v[G_client_live_bytes] += c->live_bytes;
        g->v[G_client_pinned_bytes] += c->pinned_bytes;
        g->v[G_client_pinned_buffers] += c->pinned_buffers;
        g->v[G_client_mappings] += c->mappings;
        g->v[G_client_descriptors] += c->descriptors;
        g->v[G_client_prepared] += c->prepared;
        g->v[G_client_reply_bytes] += c->reply_bytes;
        g->v[G_client_decode_bytes] += c->decode_bytes;
        g->v[G_client_receive_buffer_bytes] += c->receive_buffer_bytes;
        g->v[G_client_queued_items] += c->queued_items;
        g->v[G_client_queued_requests] += c->queued_requests;
        g->v[G_client_takes] += c->takes;
        g->v[G_client_scoped_active] += c->scoped_active;
        g->v[G_client_held_sessions] += c->session_id != 0;
        if (detail)
            printf("#   client %llu pid %d uid %u \"%s\": tensors %llu (%llu B), buffers %llu "
                   "(%llu B), mappings %llu, descriptors %llu, prepared %llu, replies %llu B, "
                   "receive %llu B, queued %llu\n",
                   (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, c->name,
                   (unsigned long long)c->live_tensors, (unsigned long long)c->live_bytes,
                   (unsigned long long)c->pinned_buffers, (unsigned long long)c->pinned_bytes,
                   (unsigned long long)c->mappings, (unsigned long long)c->descriptors,
                   (unsigned long long)c->prepared, (unsigned long long)c->reply_bytes,
                   (unsigned long long)c->receive_buffer_bytes,
                   (unsigned long long)c->queued_items);
    }
    tf__frame_free(f);
    return 0;
}

/* What one uid's listed clients hold together, for check_bounds. */
typedef struct uid_sum {
    uint32_t uid;
    uint64_t clients, tensors, bytes, pinned, buffers, prepared, replies, receive, decode;
} uid_sum;

/* Reports one bound found broken (the first few in full); counts every one. */
static int bound_broken(char *why, size_t n, int *broken_bounds, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bound_broken(char *why, size_t n, int *broken_bounds, const char *fmt, ...) {
    if ((*broken_bounds)++ < 5) {
        size_t used = strlen(why);
        va_list ap;
        va_start(ap, fmt);
        if (used < n) vsnprintf(why + used, n - used, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* A bound the campaign's daemon runs with (0 when the setting was left out: unbounded here). */
static uint64_t bound(const char *section, const char *key) {
    return setting_value(section, key, 0);
}

/*
 * Checks, from one status report taken under attack, that what the listed
 * clients hold stays within every per-client and per-uid bound the daemon
 * runs with: clients, tensors and their bytes, pinned buffers and bytes,
 * prepared graphs, queued replies (one reply over the limit at most: the
 * frame that crossed it), receive buffers and decode budgets (one decode
 * always goes). Clients that are closing are not listed, so the sums are at
 * most what the daemon counts. Appends what is broken to why; returns how
 * many bounds were broken.
 */
static int check_bounds(const th_daemon *d, char *why, size_t n) {
    Tenferro__Frame *f = th_status_report(d);
    if (!f) return 0; /* the report is judged elsewhere: a daemon that stopped answering is dead */
    const Tenferro__StatusReply *s = f->status_reply;
    const uint64_t max_frame =
        setting_value("daemon", "max_frame_bytes", TF__DEFAULT_MAX_FRAME_BYTES);
    const uint64_t c_reply = bound("limits", "client_reply_bytes"),
                   u_reply = bound("limits", "uid_reply_bytes");
    const uint64_t u_receive = bound("limits", "uid_receive_bytes");
    const uint64_t c_bytes = bound("quota.client", "device_bytes"),
                   u_bytes = bound("quota.uid", "device_bytes");
    const uint64_t c_tensors = bound("quota.client", "live_tensors"),
                   u_tensors = bound("quota.uid", "live_tensors");
    const uint64_t c_pinned = bound("quota.client", "pinned_bytes"),
                   u_pinned = bound("quota.uid", "pinned_bytes");
    const uint64_t c_buffers = bound("limits", "max_buffers_per_client"),
                   u_buffers = bound("limits", "max_buffers_per_uid");
    const uint64_t c_prepared = bound("limits", "max_prepared"),
                   u_prepared = bound("limits", "max_prepared_per_uid");
    const uint64_t u_clients = bound("limits", "max_clients_per_uid");
    uid_sum sums[8];
    size_t n_sums = 0;
    int broken_bounds = 0;
    for (size_t i = 0; i < s->n_clients; i++) {
        const Tenferro__ClientInfo *c = s->clients[i];
        if (c->uid == 0 || c->uid == (uint32_t)geteuid()) continue; /* the bystander, this report */
#define CLIENT_BOUND(field, limit, slack)                                                          \
    if ((limit) && c->field > (limit) + (slack))                                                   \
        bound_broken(why, n, &broken_bounds, "client %llu (uid %u) holds %s %llu, above %llu; ",   \
                     (unsigned long long)c->client_id, (unsigned)c->uid, #field,                   \
                     (unsigned long long)c->field, (unsigned long long)(limit));
        CLIENT_BOUND(live_bytes, c_bytes, 0)
        CLIENT_BOUND(live_tensors, c_tensors, 0)
        CLIENT_BOUND(pinned_bytes, c_pinned, 0)
        CLIENT_BOUND(pinned_buffers, c_buffers, 0)
        CLIENT_BOUND(prepared, c_prepared, 0)
        CLIENT_BOUND(reply_bytes, c_reply, max_frame)
#undef CLIENT_BOUND
        uid_sum *u = NULL;
        for (size_t k = 0; k < n_sums; k++)
            if (sums[k].uid == c->uid) u = &sums[k];
        if (!u && n_sums < sizeof sums / sizeof *sums) {
            u = &sums[n_sums++];
            *u = (uid_sum){.uid = c->uid};
        }
        if (!u) continue;
        u->clients++;
        u->tensors += c->live_tensors;
        u->bytes += c->live_bytes;
        u->pinned += c->pinned_bytes;
        u->buffers += c->pinned_buffers;
        u->prepared += c->prepared;
        u->replies += c->reply_bytes;
        u->receive +=
            c->receive_buffer_bytes > TF__MIN_MAX_FRAME_BYTES ? c->receive_buffer_bytes : 0;
        u->decode += c->decode_bytes;
    }
    for (size_t k = 0; k < n_sums; k++) {
        const uid_sum *u = &sums[k];
#define UID_BOUND(field, limit, slack)                                                             \
    if ((limit) && u->field > (limit) + (slack))                                                   \
        bound_broken(why, n, &broken_bounds, "uid %u holds %s %llu, above %llu; ",                 \
                     (unsigned)u->uid, #field, (unsigned long long)u->field,                       \
                     (unsigned long long)(limit));
        UID_BOUND(clients, u_clients, 0)
        UID_BOUND(tensors, u_tensors, 0)
        UID_BOUND(bytes, u_bytes, 0)
        UID_BOUND(pinned, u_pinned, 0)
        UID_BOUND(buffers, u_buffers, 0)
        UID_BOUND(prepared, u_prepared, 0)
        UID_BOUND(replies, u_reply, 2 * max_frame)
        UID_BOUND(receive, u_receive, 0)
        UID_BOUND(decode, u_receive, TF__DECODE_BUDGET(max_frame))
#undef UID_BOUND
    }
    tf__frame_free(f);
    return broken_bounds;
}

/* The gauges where now differs from base, as "name base -> now, ..." into out; 0 when none differ. */
static int gauge_diff(const gauges *base, const gauges *now, char *out, size_t len) {
    int n = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < N_GAUGES; i++) {
        if (base->v[i] == now->v[i]) continue;
        n++;
        if (used < len)
            used += (size_t)snprintf(out + used, len - used, "%s%s %llu -> %llu", n > 1 ? ", " : "",
                                     GAUGE_NAMES[i], (unsigned long long)base->v[i],
                                     (unsigned long long)now->v[i]);
    }
    return n;
}

/* The q-quantile (0..1) of n samples (a sorted copy; n > 0). */
static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}
static double quantile(const double *v, uint32_t n, double q) {
    double *s = malloc(n * sizeof *s);
    if (!s) abort();
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    size_t k = (size_t)(q * n);
    if (k >= n) k = n - 1;
    double r = s[k];
    free(s);
    return r;
}

/* Prints one phase's p50/p99/max of the whole iteration and of each part. */
static void print_phase(const char *name, const samples *s) {
    printf("# bystander %-6s %5u iterations: total p50 %.2f p99 %.2f max %.2f ms; session p50 %.2f "
           "p99 %.2f max %.2f; 8 MiB round trip p50 %.2f p99 %.2f max %.2f\n",
           name, s->n, quantile(s->total, s->n, 0.5), quantile(s->total, s->n, 0.99),
           quantile(s->total, s->n, 1.0), quantile(s->session, s->n, 0.5),
           quantile(s->session, s->n, 0.99), quantile(s->session, s->n, 1.0),
           quantile(s->big, s->n, 0.5), quantile(s->big, s->n, 0.99), quantile(s->big, s->n, 1.0));
}

/* A live attacker process of the test: its pid and slot. */
typedef struct live {
    pid_t pid;
    int slot;
} live;

/* Starts an attacker process as uid in slot, until stop_ms at the latest (its seed from both). */
static pid_t start_attacker(const th_daemon *d, uid_t uid, int slot, uint64_t stop_ms) {
    attacker a = {.d = d,
                  .uid = uid,
                  .slot = slot,
                  .rng = ((uint64_t)th_seed() << 20) ^ (uint64_t)slot * 0x9e37u};
    uint64_t life = 2000 + (uint64_t)below(&a, 6000);
    a.stop_ms = now_ms() + life < stop_ms ? now_ms() + life : stop_ms;
    return th_spawn(attacker_main, &a);
}

/* Judges an attacker's exit: 0 is clean, a SIGKILL it marked as its own is expected; 1 when failed. */
static int attacker_exit_bad(int slot, int rc) {
    if (rc == 0) return 0;
    if (rc == 128 + SIGKILL && g_cp->self_killed[slot]) return 0;
    fprintf(stderr, "campaign: attacker in slot %d exited with %d\n", slot, rc);
    return 1;
}

/* What the attack phase saw. */
typedef struct attack_outcome {
    int procs;         /* attacker processes started */
    int bad;           /* of them, exits that were neither clean nor their own SIGKILL, or hung */
    int alive;         /* the daemon ran throughout */
    int bound_checks;  /* status reports checked against the bounds */
    int broken_bounds; /* bounds found broken in them */
    char why[2048];    /* the first broken bounds */
    long rss_peak;     /* the daemon's highest VmRSS seen, KiB */
    uint64_t ms;       /* from the first attacker to the last one's exit */
} attack_outcome;

/* Runs fn on every live attacker of the table. */
static void each_live(live procs[N_UIDS][PROCS_PER_UID], void (*fn)(live *p)) {
    for (int u = 0; u < N_UIDS; u++)
        for (int k = 0; k < PROCS_PER_UID; k++)
            if (procs[u][k].pid > 0) fn(&procs[u][k]);
}

static void kill_live(live *p) {
    fprintf(stderr, "campaign: attacker in slot %d still runs: killed\n", p->slot);
    kill(p->pid, SIGKILL);
    (void)th_wait(p->pid);
    p->pid = 0;
}

/*
 * The attack: PROCS_PER_UID attacker processes per uid, each replaced when it
 * exits until ATTACK_MS has passed; meanwhile the daemon is watched (alive,
 * VmRSS, and twice a second every bound). Returns once the last attacker is
 * gone, or at once when the daemon died.
 */
static void run_attack(const th_daemon *d, long rss_start, attack_outcome *o) {
    const uint64_t start = now_ms(), attack_end = start + ATTACK_MS;
    live procs[N_UIDS][PROCS_PER_UID];
    uint64_t next_check = 0;
    *o = (attack_outcome){.alive = 1, .rss_peak = rss_start};
    for (int u = 0; u < N_UIDS; u++)
        for (int k = 0; k < PROCS_PER_UID; k++, o->procs++)
            procs[u][k] = (live){
                start_attacker(d, g_other_uids ? ATTACK_UIDS[u] : geteuid(), o->procs, attack_end),
                o->procs};
    for (;;) {
        int running = 0;
        for (int u = 0; u < N_UIDS; u++)
            for (int k = 0; k < PROCS_PER_UID; k++) {
                live *p = &procs[u][k];
                int st;
                pid_t got = p->pid > 0 ? waitpid(p->pid, &st, WNOHANG) : -1;
                if (got == 0) running++;
                if (p->pid <= 0 || got == 0) continue;
                o->bad += attacker_exit_bad(p->slot, got < 0         ? -1
                                                     : WIFEXITED(st) ? WEXITSTATUS(st)
                                                                     : 128 + WTERMSIG(st));
                p->pid = 0;
                if (now_ms() < attack_end && o->procs < MAX_PROCS) {
                    *p = (live){start_attacker(d, g_other_uids ? ATTACK_UIDS[u] : geteuid(),
                                               o->procs, attack_end),
                                o->procs};
                    o->procs++;
                    running++;
                }
            }
        if (!(o->alive = th_daemon_running(d))) {
            each_live(procs, kill_live);
            break;
        }
        long rss = th_proc_status_value(d->pid, "VmRSS");
        if (rss > o->rss_peak) o->rss_peak = rss;
        if (g_other_uids && now_ms() >= next_check) {
            o->broken_bounds += check_bounds(d, o->why, sizeof o->why);
            o->bound_checks++;
            next_check = now_ms() + 500;
        }
        if (running == 0) break;
        /* Attackers start no move after attack_end; one still running a minute later is hung. */
        if (now_ms() > attack_end + 60000) {
            for (int u = 0; u < N_UIDS; u++)
                for (int k = 0; k < PROCS_PER_UID; k++) o->bad += procs[u][k].pid > 0;
            each_live(procs, kill_live);
            break;
        }
        th_sleep_ms(20);
    }
    o->ms = now_ms() - start;
}

/*
 * Polls until every gauge reads its baseline again, up to RECOVERY_MS: the
 * milliseconds it took, or -1 with the gauges that differ in diff (and the
 * clients still listed printed).
 */
static long wait_gauges(const th_daemon *d, const gauges *base, char *diff, size_t n) {
    gauges now;
    const uint64_t start = now_ms();
    do {
        ck_assert_int_eq(read_gauges(d, &now, 0), 0);
        if (gauge_diff(base, &now, diff, n) == 0) return (long)(now_ms() - start);
        th_sleep_ms(50);
    } while (now_ms() - start <= RECOVERY_MS);
    printf("# campaign: gauges not back after %d ms: %s; the clients still listed:\n", RECOVERY_MS,
           diff);
    (void)read_gauges(d, &now, 1);
    return -1;
}

/* Prints what the attackers did and met, and the daemon's own counters of it. */
static void print_attack(const th_daemon *d, const attack_outcome *o) {
    printf("# campaign: %d attacker processes as %s over %llu ms, %llu killed themselves\n",
           o->procs, g_other_uids ? "uids 65534, 65533, 65532" : "the test's uid",
           (unsigned long long)o->ms, (unsigned long long)g_cp->self_kills);
    for (int m = 0; m < N_MOVES; m++)
        printf("#   %-10s %5llu moves, %4llu reached their aim, %llu failed\n", MOVE_NAMES[m],
               (unsigned long long)g_cp->moves[m], (unsigned long long)g_cp->reached[m],
               (unsigned long long)g_cp->failures[m]);
    printf("#   answers read:");
    for (int s = 0; s < 32; s++)
        if (g_cp->statuses[s])
            printf(" %s %llu", s < 31 ? tf_status_name((tf_status)s) : "other",
                   (unsigned long long)g_cp->statuses[s]);
    printf("\n#   connections the daemon ended: %llu (%llu that never read); holes punched before "
           "Mapped %llu, while sealing %llu, refused once sealed %llu\n",
           (unsigned long long)g_cp->daemon_closed, (unsigned long long)g_cp->stall_closed,
           (unsigned long long)g_cp->punch_before, (unsigned long long)g_cp->punch_raced,
           (unsigned long long)g_cp->punch_refused);
    printf("#   bounds: %d status reports under attack checked, %d bounds found broken%s%s\n",
           o->bound_checks, o->broken_bounds, o->broken_bounds ? ": " : "", o->why);
    static const char *const shown[] = {
        "connections_accepted", "handshake_timeouts",  "protocol_errors",
        "limit_refusals",       "quota_refusals",      "reply_stall_closes",
        "shared_seals_refused", "transfers_completed", "ops_accepted"};
    Tenferro__Frame *rep = th_status_report(d);
    ck_assert_ptr_nonnull(rep);
    printf("#   daemon:");
    for (size_t i = 0; i < sizeof shown / sizeof *shown; i++)
        printf(" %s %llu", shown[i],
               (unsigned long long)th_report_counter(rep->status_reply, shown[i]));
    printf("\n");
    tf__frame_free(rep);
}

/* The daemon's log goes with a clean stop: a failed campaign keeps a copy, and says where. */
static void keep_log(const th_daemon *d) {
    char keep[192];
    snprintf(keep, sizeof keep, "/tmp/tf-hostile-campaign-%d.log", (int)getpid());
    char *log = th_daemon_log(d);
    FILE *f = fopen(keep, "w");
    if (f) {
        fputs(log, f);
        fclose(f);
        printf("# campaign: the daemon's log is kept in %s\n", keep);
    }
    free(log);
}

START_TEST(test_hostile_campaign) {
    const uint64_t t_start = now_ms();
    g_other_uids = geteuid() == 0;
    if (!g_other_uids)
        printf("# campaign: not root: attackers run as the test's own uid %u, per-uid limits left "
               "out\n",
               (unsigned)geteuid());
    char conf[256];
    snprintf(conf, sizeof conf, "%s/campaign.conf", th_runtime_dir());
    write_config(conf);
    g_cp = mmap(NULL, sizeof *g_cp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(g_cp, MAP_FAILED);
    (void)th_seed();

    th_daemon d;
    CK_DAEMON_START(&d, "--config", conf, "--log-level", "info");
    gauges base;
    ck_assert_int_eq(read_gauges(&d, &base, 0), 0);
    const long rss_before = th_proc_status_value(d.pid, "VmRSS");
    ck_assert_int_gt(rss_before, 0);

    /* The bystander alone first: the quiet figures. */
    pid_t by = th_spawn(bystander_main, &d);
    ck_assert_int_gt(by, 0);
    const uint64_t quiet_until = now_ms() + QUIET_MS;
    while (now_ms() < quiet_until ||
           __atomic_load_n(&g_cp->quiet.n, __ATOMIC_ACQUIRE) < QUIET_ITERATIONS) {
        int st;
        ck_assert_msg(waitpid(by, &st, WNOHANG) == 0,
                      "the bystander failed on a quiet daemon (see stderr)");
        ck_assert_msg(now_ms() < quiet_until + 30000,
                      "the bystander made %u iterations on a quiet "
                      "daemon in %d s",
                      g_cp->quiet.n, QUIET_MS / 1000 + 30);
        th_sleep_ms(20);
    }
    const long rss_quiet = th_proc_status_value(d.pid, "VmRSS");

    __atomic_store_n(&g_cp->phase, PHASE_ATTACK, __ATOMIC_RELEASE);
    static attack_outcome o;
    run_attack(&d, rss_quiet, &o);
    if (!o.alive) {
        kill(by, SIGKILL);
        (void)th_wait(by);
        char *log = th_daemon_log(&d);
        size_t len = strlen(log);
        fprintf(stderr, "campaign: tenferrod died under attack; the end of its log:\n%s\n",
                log + (len > 4000 ? len - 4000 : 0));
        free(log);
        ck_abort_msg("tenferrod died under attack (status %d; log %s)", th_wait(d.pid), d.log_path);
    }

    /* The bystander is stopped first: what it holds is its own, and goes with it. */
    __atomic_store_n(&g_cp->phase, PHASE_STOP, __ATOMIC_RELEASE);
    const int by_rc = th_wait(by);
    char diff[2048];
    const long recovered_ms = wait_gauges(&d, &base, diff, sizeof diff);
    /* The daemon gives freed heap back a moment after clients leave (heap-trim.c): RSS settles. */
    const long rss_recovered = th_proc_status_value(d.pid, "VmRSS");
    th_sleep_ms(RSS_SETTLE_MS);
    const long rss_after = th_proc_status_value(d.pid, "VmRSS");
    const int rss_high = !SANITIZED && rss_after > rss_before + (long)RSS_MARGIN_MIB * 1024;

    print_attack(&d, &o);
    if (recovered_ms >= 0)
        printf("# campaign: every gauge back at its baseline %ld ms after the bystander stopped\n",
               recovered_ms);
    printf("# campaign: VmRSS %.1f MiB at start, %.1f after the quiet phase, %.1f at the peak, "
           "%.1f when the gauges were back, %.1f %d ms later%s\n",
           rss_before / 1024.0, rss_quiet / 1024.0, o.rss_peak / 1024.0, rss_recovered / 1024.0,
           rss_after / 1024.0, RSS_SETTLE_MS,
           SANITIZED ? " (a sanitizer build: reported, not judged)" : "");
    /* RSS that stayed (a third of the margin or more): where it lives, for whoever looks into it. */
    if (!SANITIZED && rss_after > rss_before + (long)RSS_MARGIN_MIB * 1024 / 3)
        print_resident_mappings(d.pid);
    const samples *q = &g_cp->quiet, *at = &g_cp->attack;
    print_phase("quiet", q);
    if (at->n) print_phase("attack", at);
    const double p99 = at->n ? quantile(at->total, at->n, 0.99) : 0,
                 q99 = quantile(q->total, q->n, 0.99);
    printf("BENCH hostile_campaign_p99 tenferrod=%.3f baseline=%.3f unit=ms\n", p99, q99);
    printf("BENCH hostile_campaign_rss_mib tenferrod=%.1f baseline=%.1f unit=MiB\n",
           rss_after / 1024.0, rss_before / 1024.0);
    printf("# campaign: %.1f s in all\n", (double)(now_ms() - t_start) / 1000.0);

    uint64_t failed_moves = 0;
    for (int m = 0; m < N_MOVES; m++) failed_moves += g_cp->failures[m];
    const double p99_bound = P99_BOUND_MS * P99_BOUND_SCALE;
    if (o.bad || failed_moves || o.broken_bounds || by_rc || !at->n || p99 > p99_bound ||
        recovered_ms < 0 || rss_high)
        keep_log(&d);
    fflush(stdout);
    ck_assert_msg(o.bad == 0 && failed_moves == 0,
                  "%d attacker processes failed or hung, %llu moves found a broken contract (see "
                  "stderr)",
                  o.bad, (unsigned long long)failed_moves);
    ck_assert_msg(o.broken_bounds == 0, "what attackers held passed a bound %d times: %s",
                  o.broken_bounds, o.why);
    ck_assert_msg(by_rc == 0, "the bystander failed under attack (exit %d, see stderr)", by_rc);
    ck_assert_msg(at->n > 0, "the bystander finished no iteration under attack");
    ck_assert_msg(p99 <= p99_bound, "the bystander's p99 under attack is %.1f ms, above %.0f ms",
                  p99, p99_bound);
    ck_assert_msg(recovered_ms >= 0,
                  "gauges not back at their baseline %d ms after the campaign: %s", RECOVERY_MS,
                  diff);
    ck_assert_msg(!rss_high,
                  "the daemon's VmRSS is %.1f MiB after the campaign, %.1f before (margin %d MiB)",
                  rss_after / 1024.0, rss_before / 1024.0, RSS_MARGIN_MIB);
    /* The campaign reached the bounds it is about. */
    if (applied("limits", "hello_timeout_ms"))
        ck_assert_msg(th_counter(&d, "handshake_timeouts") > 0,
                      "no connection met the Hello deadline");
    if (applied("limits", "reply_stall_ms") && applied("limits", "client_reply_bytes"))
        ck_assert_msg(th_counter(&d, "reply_stall_closes") > 0,
                      "no client that never reads was closed for it");
    CK_DAEMON_STOP(&d);
    munmap(g_cp, sizeof *g_cp);
}
END_TEST

static Suite *campaign_suite(void) {
    Suite *s = suite_create("hostile-campaign");
    TCase *tc = tcase_create("campaign");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_hostile_campaign);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(campaign_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
