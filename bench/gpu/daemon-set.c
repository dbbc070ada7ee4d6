/*
 * The daemons a benchmark starts itself (see daemon-set.h): starting them in a private folder,
 * waiting until they answer, stopping them, and the exit and signal handlers that make sure
 * none is left behind whatever path the benchmark leaves by.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/gpu/daemon-set.h"
#include "bench/gpu/gpu-common.h"

#define POLL_MS 50
#define STOP_TIMEOUT_S 30
#define EXIT_STOP_TIMEOUT_S 10
#define CTL_TIMEOUT_S 30
#define LOG_SHOWN_AT_START 65536
#define LOG_TAIL_BYTES 4096

/* The process's one set: the exit and signal handlers reach it after main has returned. */
static daemon_set the_set;

/* Logs already printed in full (not repeated on the way out), and whether the folder is gone. */
static int log_shown[DAEMON_SET_MAX];
static int folder_removed;

/* Decodes a waitpid status: the exit status, or 128 + the signal. */
static int exit_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

/* Copies the last `tail` bytes of daemon i's log to stderr, under a title line. */
static void print_log(const daemon_set *set, int i, size_t tail) {
    fprintf(stderr, "---- %s: daemon %d (--device %s) log %s%s:\n", set->bench, i,
            set->devices[i], set->logs[i], tail < LOG_SHOWN_AT_START ? ", its end" : "");
    FILE *f = fopen(set->logs[i], "r");
    if (!f) {
        fprintf(stderr, "(cannot open it: %s)\n", strerror(errno));
        return;
    }
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > (long)tail) fseek(f, size - (long)tail, SEEK_SET);
        else rewind(f);
    }
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, stderr);
    fclose(f);
    fprintf(stderr, "---- end of daemon %d's log\n", i);
    fflush(stderr);
}

/* Removes the sockets, the logs and the folder (what exists of them); async-signal-safe. */
static void remove_folder(const daemon_set *set) {
    for (int i = 0; i < set->count; i++) {
        unlink(set->sockets[i]);
        unlink(set->logs[i]);
    }
    if (set->folder[0]) rmdir(set->folder);
    folder_removed = 1;
}

/*
 * Waits until every daemon still listed has exited or the deadline passed, then kills and
 * reaps the rest; codes[i] gets daemon i's exit code (or -2 when it had to be killed).
 */
static void reap_all(daemon_set *set, uint64_t deadline_ns, int codes[]) {
    int left;
    do {
        left = 0;
        for (int i = 0; i < set->count; i++) {
            if (set->pids[i] <= 0) continue;
            int status = 0;
            pid_t r = waitpid(set->pids[i], &status, WNOHANG);
            if (r == set->pids[i] || (r < 0 && errno == ECHILD)) {
                codes[i] = r == set->pids[i] ? exit_code(status) : -1;
                set->pids[i] = 0;
            } else {
                left++;
            }
        }
        if (left) bench_sleep_ms(POLL_MS);
    } while (left && bench_now_ns() < deadline_ns);
    for (int i = 0; i < set->count; i++) {
        if (set->pids[i] <= 0) continue;
        kill(set->pids[i], SIGKILL);
        while (waitpid(set->pids[i], NULL, 0) < 0 && errno == EINTR) {
        }
        codes[i] = -2;
        set->pids[i] = 0;
    }
}

/*
 * atexit: leaving before daemon_set_stop means the benchmark failed; stop the daemons still
 * running, show the ends of the logs not shown yet, remove the folder.
 */
static void stop_on_exit(void) {
    daemon_set *set = &the_set;
    if (folder_removed || !set->bench) return;
    int running = 0, codes[DAEMON_SET_MAX];
    for (int i = 0; i < set->count; i++)
        if (set->pids[i] > 0) {
            kill(set->pids[i], SIGTERM);
            running++;
        }
    reap_all(set, bench_now_ns() + (uint64_t)EXIT_STOP_TIMEOUT_S * 1000000000u, codes);
    for (int i = 0; i < set->count; i++)
        if (!log_shown[i]) print_log(set, i, LOG_TAIL_BYTES);
    fprintf(stderr, "%s: stopped %d daemon%s on the way out\n", set->bench, running,
            running == 1 ? "" : "s");
    remove_folder(set);
}

/* SIGINT, SIGTERM, SIGHUP: kill the daemons, remove the folder, then die of the same signal. */
static void stop_on_signal(int sig) {
    daemon_set *set = &the_set;
    for (int i = 0; i < set->count; i++)
        if (set->pids[i] > 0) kill(set->pids[i], SIGKILL);
    remove_folder(set);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Forks and execs daemon i with its output in its log; returns its pid. */
static pid_t start_one(daemon_set *set, int i, const char *daemon_path) {
    int log = open(set->logs[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log < 0 || null_in < 0)
        bench_die(set->bench, "cannot open %s or /dev/null: %s", set->logs[i], strerror(errno));
    char *args[] = {(char *)daemon_path, "--device", set->devices[i], "--socket", set->sockets[i],
                    NULL};
    fflush(NULL);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) bench_die(set->bench, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        /* Die with the benchmark, so even a SIGKILL of it leaves no daemon behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        if (dup2(null_in, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0) _exit(127);
        execv(daemon_path, args);
        fprintf(stderr, "exec %s failed: %s\n", daemon_path, strerror(errno));
        _exit(127);
    }
    close(log);
    close(null_in);
    return pid;
}

/* 1 when daemon i answers tf_connect (its device description is kept), else 0. */
static int answers(daemon_set *set, int i) {
    struct stat st;
    if (stat(set->sockets[i], &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
    tf_client *c = NULL;
    int ok = tf_connect(set->sockets[i], &c) == TF_OK;
    if (ok) snprintf(set->described[i], sizeof set->described[i], "%s", tf_client_device(c));
    tf_disconnect(c);
    return ok;
}

/* Runs `ctl --socket S status` for daemon i (its output discarded); returns its exit code. */
static int ctl_status(const daemon_set *set, int i, const char *ctl_path) {
    char *args[] = {(char *)ctl_path, "--socket", (char *)set->sockets[i], "status", NULL};
    int fd = -1;
    pid_t pid = gpu_spawn(set->bench, args, -1, &fd);
    const uint64_t deadline = bench_now_ns() + (uint64_t)CTL_TIMEOUT_S * 1000000000u;
    char out[4096];
    size_t len;
    do {
        out[0] = '\0';
        len = 0;
    } while (gpu_read_line(fd, out, sizeof out, &len, deadline) == 1);
    close(fd);
    return gpu_reap(pid, deadline);
}

/* Ends the benchmark saying why daemon i failed to start, its whole log first. */
static void fail_start(daemon_set *set, int i, const char *why) {
    print_log(set, i, LOG_SHOWN_AT_START);
    log_shown[i] = 1;
    bench_die(set->bench, "daemon %d (--device %s --socket %s) %s; its log is above", i,
              set->devices[i], set->sockets[i], why);
}

const daemon_set *daemon_set_start(const char *bench, const char *daemon_path,
                                   const char *ctl_path, int count, const char *const devices[]) {
    daemon_set *set = &the_set;
    if (set->bench) bench_die(bench, "daemon_set_start called twice");
    if (count < 1 || count > DAEMON_SET_MAX)
        bench_die(bench, "%d daemons asked for (1 to %d)", count, DAEMON_SET_MAX);
    set->bench = bench;
    snprintf(set->folder, sizeof set->folder, "/tmp/tf-%s-XXXXXX", bench);
    if (!mkdtemp(set->folder)) bench_die(bench, "mkdtemp %s: %s", set->folder, strerror(errno));
    for (int i = 0; i < count; i++) {
        snprintf(set->devices[i], sizeof set->devices[i], "%s", devices[i]);
        snprintf(set->sockets[i], sizeof set->sockets[i], "%.63s/tenferrod-%d.sock", set->folder, i);
        snprintf(set->logs[i], sizeof set->logs[i], "%.63s/tenferrod-%d.log", set->folder, i);
    }
    set->count = count;
    atexit(stop_on_exit);
    signal(SIGINT, stop_on_signal);
    signal(SIGTERM, stop_on_signal);
    signal(SIGHUP, stop_on_signal);
    for (int i = 0; i < count; i++) set->pids[i] = start_one(set, i, daemon_path);

    const uint64_t deadline = bench_now_ns() + (uint64_t)DAEMON_SET_START_TIMEOUT_S * 1000000000u;
    int ready[DAEMON_SET_MAX] = {0}, waiting = count;
    while (waiting > 0) {
        for (int i = 0; i < count; i++) {
            if (ready[i]) continue;
            int status = 0;
            if (waitpid(set->pids[i], &status, WNOHANG) == set->pids[i]) {
                set->pids[i] = 0;
                char why[64];
                snprintf(why, sizeof why, "exited with status %d before answering",
                         exit_code(status));
                fail_start(set, i, why);
            }
            if (answers(set, i)) {
                ready[i] = 1;
                waiting--;
            }
        }
        if (waiting == 0) break;
        if (bench_now_ns() >= deadline)
            for (int i = 0; i < count; i++)
                if (!ready[i]) {
                    char why[64];
                    snprintf(why, sizeof why, "did not answer tf_connect within %d s",
                             DAEMON_SET_START_TIMEOUT_S);
                    fail_start(set, i, why);
                }
        bench_sleep_ms(POLL_MS);
    }
    if (ctl_path)
        for (int i = 0; i < count; i++) {
            int code = ctl_status(set, i, ctl_path);
            if (code != 0) {
                char why[128];
                snprintf(why, sizeof why, "answers tf_connect but `%s status` exited with %d",
                         ctl_path, code);
                fail_start(set, i, why);
            }
        }
    return set;
}

void daemon_set_expect_running(void) {
    daemon_set *set = &the_set;
    for (int i = 0; i < set->count; i++) {
        int status = 0;
        if (set->pids[i] > 0 && waitpid(set->pids[i], &status, WNOHANG) == set->pids[i]) {
            set->pids[i] = 0;
            print_log(set, i, LOG_TAIL_BYTES);
            log_shown[i] = 1;
            bench_die(set->bench, "daemon %d (--device %s) exited with status %d during the run",
                      i, set->devices[i], exit_code(status));
        }
    }
}

void daemon_set_stop(void) {
    daemon_set *set = &the_set;
    int codes[DAEMON_SET_MAX];
    for (int i = 0; i < set->count; i++) {
        codes[i] = 0;
        if (set->pids[i] > 0) kill(set->pids[i], SIGTERM);
    }
    reap_all(set, bench_now_ns() + (uint64_t)STOP_TIMEOUT_S * 1000000000u, codes);
    int failed = 0;
    for (int i = 0; i < set->count; i++) {
        if (codes[i] == 0) continue;
        failed++;
        if (codes[i] == -2)
            fprintf(stderr, "%s: daemon %d did not exit within %d s of SIGTERM: killed\n",
                    set->bench, i, STOP_TIMEOUT_S);
        else
            fprintf(stderr, "%s: daemon %d exited with status %d after SIGTERM\n", set->bench, i,
                    codes[i]);
        print_log(set, i, LOG_TAIL_BYTES);
    }
    remove_folder(set);
    if (failed)
        bench_die(set->bench, "%d daemon%s did not stop cleanly", failed, failed == 1 ? "" : "s");
}
