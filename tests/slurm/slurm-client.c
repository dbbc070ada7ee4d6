/*
 * The tenferrod client that the Slurm test's jobs run (tests/slurm/test-slurm.sh).
 * It finds its daemon the way any program in a job does, tf_connect(NULL):
 * $TENFERRO_SOCKET as the TaskProlog exported it, else the default paths. Each
 * mode prints one line per event, KEY=value words after a tag, so the test
 * reads the outcome from the job's output:
 *
 *   slurm-client report [MS]   connect, upload and read back a vector, print
 *                              REPORT (job, step, task, the GPUs Slurm gave the
 *                              task, TENFERRO_DEVICE, TENFERRO_SOCKET, client id,
 *                              pid), stay connected MS milliseconds (default 0);
 *                              CONNECT-FAILED with the library's message when
 *                              tf_connect fails (exit 2)
 *   slurm-client hold MS [FILE]
 *                              open a held session, print OPEN with its status and
 *                              how long the open took; when admitted, HELD, hold it
 *                              MS milliseconds or until FILE exists, whichever comes
 *                              first, run one add, close, CLOSED. A refusal
 *                              (TF_ERR_CONTENDED, TF_ERR_TIMEOUT) is an outcome to
 *                              report, not a failure: exit 0
 *   slurm-client linger [held] upload 4 MiB (and with `held`, open a held session),
 *                              print READY, then read a small tensor back every
 *                              100 ms until the connection ends: LOST with the
 *                              status and message (exit 3). Gives up by itself
 *                              after 300 s (exit 4), so a failed test leaves
 *                              nothing running for long
 *
 * Any other failure prints FAIL with the call and the message, and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tenferro/tenferro.h"

/* The longest a lingering client waits for its connection to be ended. */
#define LINGER_LIMIT_MS 300000

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

/* An environment variable, or "-" when unset or empty (every printed word has a value). */
static const char *env_or_dash(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : "-";
}

/* The GPUs Slurm gave this task: the step's, else the job's (the batch step has only those). */
static const char *slurm_gpus(void) {
    const char *v = getenv("SLURM_STEP_GPUS");
    return v && v[0] ? v : env_or_dash("SLURM_JOB_GPUS");
}

/* The job step: SLURM_STEP_ID, which the batch script does not have ("batch"). */
static const char *slurm_step(void) {
    const char *v = getenv("SLURM_STEP_ID");
    if (v && v[0]) return v;
    return getenv("SLURM_JOB_ID") ? "batch" : "-";
}

/* Prints FAIL for a call that should have worked and exits 1. */
static void must(tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    printf("FAIL call=%s status=%s message=%s\n", what, tf_status_name(st), tf_client_last_error(c));
    exit(1);
}

/* Connects through the library's rules; CONNECT-FAILED and exit 2 when that fails. */
static tf_client *connect_or_report(void) {
    tf_client *c = NULL;
    tf_status st = tf_connect(NULL, &c);
    if (st != TF_OK) {
        printf("CONNECT-FAILED job=%s task=%s status=%s message=%s\n", env_or_dash("SLURM_JOB_ID"),
               env_or_dash("SLURM_PROCID"), tf_status_name(st), tf_client_last_error(c));
        tf_disconnect(c);
        exit(2);
    }
    return c;
}

/* Uploads n doubles 0, 1, 2, ... */
static tf_tensor upload_ramp(tf_client *c, int64_t n) {
    double *x = malloc((size_t)n * sizeof *x);
    if (!x) {
        printf("FAIL call=malloc\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) x[i] = (double)i;
    tf_tensor t;
    must(c, tf_upload(c, TF_F64, 1, &n, x, &t), "tf_upload");
    free(x);
    return t;
}

static int cmd_report(long linger_ms) {
    tf_client *c = connect_or_report();
    tf_tensor t = upload_ramp(c, 256);
    void *out = NULL;
    size_t bytes = 0;
    must(c, tf_download(c, t, &out, &bytes), "tf_download");
    if (bytes != 256 * sizeof(double) || ((double *)out)[255] != 255.0) {
        printf("FAIL call=tf_download message=the vector came back wrong\n");
        return 1;
    }
    free(out);
    printf("REPORT job=%s step=%s task=%s gpus=%s device=%s socket=%s client=%llu pid=%d\n",
           env_or_dash("SLURM_JOB_ID"), slurm_step(), env_or_dash("SLURM_PROCID"),
           slurm_gpus(), env_or_dash("TENFERRO_DEVICE"), env_or_dash("TENFERRO_SOCKET"),
           (unsigned long long)tf_client_id(c), (int)getpid());
    fflush(stdout);
    sleep_ms(linger_ms);
    tf_disconnect(c);
    return 0;
}

/* The one operation of a held session: y = x + x. */
static tf_status add_once(tf_view *v, void *arg) {
    tf_tensor *x = arg, y;
    return tf_view_add(v, *x, *x, &y);
}

static int cmd_hold(long hold_ms, const char *release) {
    tf_client *c = connect_or_report();
    tf_tensor x = upload_ramp(c, 1024);
    tf_session *s = NULL;
    double t0 = now_ms();
    tf_status st = tf_session_open(c, &s);
    printf("OPEN job=%s device=%s status=%s waited_ms=%.0f message=%s\n",
           env_or_dash("SLURM_JOB_ID"), env_or_dash("TENFERRO_DEVICE"), tf_status_name(st),
           now_ms() - t0, st == TF_OK ? "-" : tf_client_last_error(c));
    fflush(stdout);
    if (st == TF_ERR_CONTENDED || st == TF_ERR_TIMEOUT) {
        tf_disconnect(c);
        return 0;
    }
    must(c, st, "tf_session_open");
    printf("HELD job=%s client=%llu\n", env_or_dash("SLURM_JOB_ID"),
           (unsigned long long)tf_client_id(c));
    fflush(stdout);
    for (double start = now_ms(); now_ms() - start < (double)hold_ms;) {
        if (release && access(release, F_OK) == 0) break;
        sleep_ms(20);
    }
    must(c, tf_session_with(s, add_once, &x), "tf_session_with");
    must(c, tf_session_close(s, NULL), "tf_session_close");
    printf("CLOSED job=%s\n", env_or_dash("SLURM_JOB_ID"));
    tf_disconnect(c);
    return 0;
}

static int cmd_linger(int held) {
    tf_client *c = connect_or_report();
    upload_ramp(c, (int64_t)1 << 19); /* 4 MiB the daemon holds for this client */
    tf_tensor probe = upload_ramp(c, 8);
    tf_session *s = NULL;
    if (held) must(c, tf_session_open(c, &s), "tf_session_open");
    printf("READY job=%s device=%s pid=%d client=%llu held=%d\n", env_or_dash("SLURM_JOB_ID"),
           env_or_dash("TENFERRO_DEVICE"), (int)getpid(), (unsigned long long)tf_client_id(c), held);
    fflush(stdout);
    for (double start = now_ms(); now_ms() - start < LINGER_LIMIT_MS;) {
        sleep_ms(100);
        void *out = NULL;
        size_t bytes = 0;
        tf_status st = tf_download(c, probe, &out, &bytes);
        free(out);
        if (st != TF_OK) {
            printf("LOST job=%s pid=%d status=%s message=%s\n", env_or_dash("SLURM_JOB_ID"),
                   (int)getpid(), tf_status_name(st), tf_client_last_error(c));
            fflush(stdout);
            tf_disconnect(c); /* also drops the session handle the broken connection left */
            return 3;
        }
    }
    printf("GAVE-UP job=%s pid=%d\n", env_or_dash("SLURM_JOB_ID"), (int)getpid());
    return 4;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    long ms = argc > 2 ? atol(argv[2]) : 0;
    if (strcmp(mode, "report") == 0) return cmd_report(ms);
    if (strcmp(mode, "hold") == 0 && (argc == 3 || argc == 4))
        return cmd_hold(ms, argc == 4 ? argv[3] : NULL);
    if (strcmp(mode, "linger") == 0)
        return cmd_linger(argc > 2 && strcmp(argv[2], "held") == 0);
    fprintf(stderr, "usage: slurm-client report [MS] | hold MS [FILE] | linger [held]\n");
    return 2;
}
