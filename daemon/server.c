/*
 * The server: opens the backend, starts the executor, binds the Unix socket,
 * runs the libuv loop, and shuts down cleanly on SIGTERM/SIGINT (stop
 * accepting, close every connection, let each stream drain, stop the workers).
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/spin.h"
#include "daemon/backend/contract-cache.h"
#include "daemon/backend/registry.h"
#include "daemon/config.h"
#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/mailbox.h"
#include "daemon/notify.h"
#include "daemon/options.h"
#include "daemon/server.h"

uint64_t tfd_now_ms(void) { return tf__now_ns() / 1000000u; }

static void on_connection(uv_stream_t *listener, int status) {
    tfd_server *srv = listener->data;
    if (status < 0 || srv->stopping) return;
    tfd_conn_accept(srv);
}

/* Creates the socket's directory if missing (as the runtime directory would be). */
static void ensure_parent_dir(const char *path) {
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    mkdir(dir, 0755);
}

/*
 * Removes a socket file left by a daemon that died, but refuses to steal the
 * path from a daemon that still answers on it.
 */
static int clear_stale_socket(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        tfd_log(TFD_LOG_ERROR, "%s exists and is not a socket: remove it or pick another --socket", path);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path) >= (int)sizeof addr.sun_path) {
        if (fd >= 0) close(fd);
        return -1;
    }
    int live = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    if (fd >= 0) close(fd);
    if (live) {
        tfd_log(TFD_LOG_ERROR, "another tenferrod is listening on %s: stop it or pick another --socket",
                path);
        return -1;
    }
    unlink(path);
    return 0;
}

/* A shutdown after the device was lost must not hang on a device that no longer answers. */
static void on_watchdog(uv_timer_t *t) {
    tfd_server *srv = t->data;
    tfd_log(TFD_LOG_ERROR, "shutdown did not finish in time after the device was lost; exiting");
    _exit(srv->exit_code ? srv->exit_code : 1);
}

/*
 * The backend says the device can no longer be trusted (a CUDA context
 * poisoned by a kernel fault): tell every client why, show it in the status,
 * and exit non-zero so the service manager restarts the daemon, rather than
 * serving garbage.
 */
static void on_device_lost(void *arg, const char *reason) {
    tfd_server *srv = arg;
    snprintf(srv->device_error, sizeof srv->device_error, "%s", reason);
    srv->exit_code = 1;
    tfd_log(TFD_LOG_ERROR, "device lost: %s; closing every connection and exiting", reason);
    for (tfd_conn *c = srv->conns; c; c = c->next)
        if (c->hello_done && !c->closing)
            tfd_conn_reply(c, 0, TF_ERR_DEVICE,
                           "the device is lost (%s); tenferrod exits so its service manager can "
                           "restart it",
                           reason);
    uv_timer_init(srv->loop, &srv->watchdog);
    srv->watchdog.data = srv;
    uv_timer_start(&srv->watchdog, on_watchdog, 5000, 0);
    uv_unref((uv_handle_t *)&srv->watchdog);
    tfd_server_begin_shutdown(srv);
}

/*
 * The loop's poller (busy-poll.h): the clients' submission mailboxes and
 * rings, then the copies the loop took this turn, run (CPU) or watched
 * (CUDA) now that their requests are answered.
 */
int tfd_server_poll(tfd_server *srv) {
    int served = tfd_server_poll_mailboxes(srv);
    /* Once the executor is stopping (stopping 2) it has run and watched its last copies and may be gone. */
    if (srv->stopping < 2) {
        tfd_executor_run_loop_copies(srv->ex);
        tfd_executor_watch_copies(srv->ex);
    }
    return served;
}

static int poll_mailboxes(void *arg) { return tfd_server_poll(arg); }
static void mailboxes_polled(void *arg, int on) { tfd_server_mailboxes_polled(arg, on); }

/*
 * Sets the busy-polling window from busy_poll_us; "auto" polls 500 us on a
 * backend whose copies are asynchronous (a GPU: a client that comes back
 * within half a millisecond, say after an 8 MiB copy of its own, finds the
 * loop polling its mailbox) and not at all on the CPU backend, whose
 * workers need the cores.
 */
static void apply_busy_poll(tfd_server *srv) {
    int us = srv->opt.busy_poll_us;
    if (us < 0) us = srv->backend.vt->copies_enqueue_only ? 500 : 0;
    tfd_busy_poll_set(&srv->busy_poll, (uint64_t)us);
    tfd_busy_poll_ring_set(&srv->busy_poll, (uint64_t)(srv->opt.ring_spin_us > 0 ? srv->opt.ring_spin_us : 0));
    int idle = srv->opt.idle_poll_max_us;
    if (idle < 0) idle = srv->backend.vt->copies_enqueue_only ? 5000 : 0;
    tfd_busy_poll_idle_set(&srv->busy_poll, (uint64_t)idle);
}

/*
 * SIGHUP: builds the configuration again from the file and the flags. A bad
 * file changes nothing; a good one takes effect for what can change while
 * running (admission, quotas, access, priorities, limits, log level), and
 * settings that need a restart are named in the log.
 */
void tfd_server_reload(tfd_server *srv) {
    tfd_options next;
    char err[512];
    tfd_notify_reloading();
    if (tfd_startup_options(&srv->startup, &next, err, sizeof err) != 0) {
        tfd_log(TFD_LOG_ERROR, "reload refused, keeping the running configuration: %s", err);
        tfd_notify_reloaded();
        return;
    }
    tfd_options *cur = &srv->opt;
    if (strcmp(next.device, cur->device) != 0 || next.workers != cur->workers ||
        next.max_frame_bytes != cur->max_frame_bytes || next.socket_mode != cur->socket_mode ||
        strcmp(next.socket_group, cur->socket_group) != 0 ||
        next.test_fault_injection != cur->test_fault_injection)
        tfd_log(TFD_LOG_WARN, "reload: device, workers, max_frame_bytes, socket settings and "
                              "[testing] fault_injection change only at restart; keeping the "
                              "running ones");
    if (next.caches.fft_plans != cur->caches.fft_plans ||
        next.caches.fftw_planner != cur->caches.fftw_planner ||
        strcmp(next.caches.fftw_wisdom, cur->caches.fftw_wisdom) != 0)
        tfd_log(TFD_LOG_WARN, "reload: [caches] settings change only at restart; keeping the running ones");
    /* Every setting the table marks reloadable, and nothing else (config.c). */
    tfd_config_apply_runtime(cur, &next);
    tfd_log_set_level((tfd_log_level)cur->log_level);
    apply_busy_poll(srv);
    tfd_contract_cache_set_capacity(tfd_contract_plans(), cur->contraction_plans);
    tfd_memory_limits_changed(srv); /* connections waiting for room look again */
    tfd_log(TFD_LOG_INFO, "configuration reloaded from %s",
            srv->startup.config_path[0] ? srv->startup.config_path : "the command line");
    tfd_notify_reloaded();
}

static void on_hup(uv_signal_t *h, int signum) {
    (void)signum;
    tfd_server_reload(h->data);
}

static void on_signal(uv_signal_t *h, int signum) {
    tfd_server *srv = h->data;
    tfd_log(TFD_LOG_INFO, "signal %d: draining %d client%s and exiting", signum, srv->n_conns,
            srv->n_conns == 1 ? "" : "s");
    tfd_server_begin_shutdown(srv);
}

void tfd_server_begin_shutdown(tfd_server *srv) {
    if (!srv->stopping) {
        srv->stopping = 1;
        tfd_notify_stopping(srv->device_error);
        uv_close((uv_handle_t *)&srv->listener, NULL);
        unlink(srv->opt.socket_path);
        for (tfd_conn *c = srv->conns, *next; c; c = next) {
            next = c->next;
            tfd_conn_close(c);
        }
    }
    if (srv->n_conns == 0 && srv->stopping == 1) {
        srv->stopping = 2;
        if (srv->device_error[0]) uv_close((uv_handle_t *)&srv->watchdog, NULL);
        uv_close((uv_handle_t *)&srv->sig_term, NULL);
        uv_close((uv_handle_t *)&srv->sig_int, NULL);
        uv_close((uv_handle_t *)&srv->sig_hup, NULL);
        tfd_heap_trim_close(&srv->heap_trim);
        tfd_executor_stop(srv->ex);
    }
}

int tfd_server_client_count(const tfd_server *srv) {
    int n = 0;
    for (const tfd_conn *c = srv->conns; c; c = c->next) n += c->hello_done && !c->closing;
    return n;
}

void tfd_server_drain_check(tfd_server *srv) {
    if (!srv->draining || srv->stopping || tfd_server_client_count(srv) > 0) return;
    tfd_log(TFD_LOG_INFO, "drained: the last client left; exiting");
    tfd_server_begin_shutdown(srv);
}

int tfd_server_run(const tfd_options *opt, const tfd_startup *startup) {
    static tfd_server server;
    tfd_server *srv = &server;
    memset(srv, 0, sizeof *srv);
    srv->opt = *opt;
    srv->startup = *startup;
    srv->loop = uv_default_loop();
    srv->start_ms = tfd_now_ms();
    tfd_reservation_init(&srv->res, 0);
    signal(SIGPIPE, SIG_IGN);

    char msg[512], resolved[32];
    tf_status st = tfd_backend_select(opt->device, &opt->caches, &srv->backend, resolved,
                                      sizeof resolved, msg, sizeof msg);
    if (st != TF_OK) {
        tfd_log(TFD_LOG_ERROR, "cannot open device %s: %s", opt->device, msg);
        return 1;
    }
    if (!srv->opt.socket_path[0]) {
        const char *env = getenv("TENFERRO_SOCKET");
        if (env && env[0])
            snprintf(srv->opt.socket_path, sizeof srv->opt.socket_path, "%s", env);
        else {
            /* Where clients look for the daemon of a device (tf_connect_device). */
            const char *dir = getenv("TENFERRO_RUNTIME_DIR");
            snprintf(srv->opt.socket_path, sizeof srv->opt.socket_path, "%s/tenferrod-%s.sock",
                     dir && dir[0] ? dir : "/run/tenferro", resolved);
        }
    }
    int workers = opt->workers;
    if (workers <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        workers = n < 1 ? 1 : n > 16 ? 16 : (int)n;
    }
    if (tfd_executor_start(srv->loop, &srv->backend, workers, &srv->ex) != TF_OK) {
        tfd_log(TFD_LOG_ERROR, "cannot start the executor");
        srv->backend.vt->close(&srv->backend);
        return 1;
    }
    if (tfd_prepared_cache_init(&srv->prepared, &srv->backend, srv->opt.prepared_graphs) != 0) {
        tfd_log(TFD_LOG_ERROR, "out of memory making the prepared-graph cache");
        tfd_executor_stop(srv->ex);
        srv->backend.vt->close(&srv->backend);
        return 1;
    }
    tfd_executor_on_device_lost(srv->ex, on_device_lost, srv);
    apply_busy_poll(srv);
    tfd_contract_cache_set_capacity(tfd_contract_plans(), srv->opt.contraction_plans);
    tfd_executor_set_busy_poll(srv->ex, &srv->busy_poll);

    ensure_parent_dir(srv->opt.socket_path);
    if (clear_stale_socket(srv->opt.socket_path) != 0) return 1;
    uv_pipe_init(srv->loop, &srv->listener, 0);
    srv->listener.data = srv;
    int rc = uv_pipe_bind(&srv->listener, srv->opt.socket_path);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
    if (rc != 0) {
        tfd_log(TFD_LOG_ERROR, "cannot listen on %s: %s", srv->opt.socket_path, uv_strerror(rc));
        return 1;
    }
    chmod(srv->opt.socket_path, srv->opt.socket_mode);
    if (srv->opt.socket_group[0]) {
        struct group *g = getgrnam(srv->opt.socket_group);
        if (!g || chown(srv->opt.socket_path, (uid_t)-1, g->gr_gid) != 0)
            tfd_log(TFD_LOG_WARN, "cannot give %s to group %s: %s", srv->opt.socket_path,
                    srv->opt.socket_group, strerror(errno));
    }

    uv_signal_init(srv->loop, &srv->sig_term);
    uv_signal_init(srv->loop, &srv->sig_int);
    srv->sig_term.data = srv->sig_int.data = srv;
    uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
    uv_signal_start(&srv->sig_int, on_signal, SIGINT);
    uv_signal_init(srv->loop, &srv->sig_hup);
    srv->sig_hup.data = srv;
    uv_signal_start(&srv->sig_hup, on_hup, SIGHUP);
    tfd_heap_trim_init(&srv->heap_trim, srv->loop);

    tfd_log(TFD_LOG_INFO, "tenferrod %s serving %s on %s (%d worker%s, policy %s)",
            TFD_VERSION_STRING, srv->backend.description, srv->opt.socket_path, workers,
            workers == 1 ? "" : "s", srv->opt.policy == TFD_POLICY_WAIT ? "wait" : "reject");
    if (srv->opt.test_fault_injection)
        tfd_log(TFD_LOG_WARN, "fault injection is on (--test-fault-injection): any client may make "
                              "the device fault and this daemon exit; for tests only");
    tfd_notify_ready(srv->backend.description, srv->opt.socket_path);

    const tfd_loop_poller mailboxes = {poll_mailboxes, mailboxes_polled, srv};
    tfd_loop_run(srv->loop, &srv->busy_poll, &mailboxes);
    tfd_item_pool_drain();

    /* Every connection is gone and the executor stopped: no instance runs any more. */
    tfd_prepared_cache_destroy(&srv->prepared);
    srv->backend.vt->close(&srv->backend);
    uv_loop_close(srv->loop);
    tfd_log(srv->exit_code ? TFD_LOG_ERROR : TFD_LOG_INFO, "stopped%s",
            srv->exit_code ? " after losing the device" : "");
    return srv->exit_code;
}
