/*
 * sd_notify reports (see notify.h). The STATUS= line is rebuilt from a few
 * remembered facts (what the daemon is doing, how many clients it has) so
 * each report is one datagram and a caller passes only what changed. Whether
 * $NOTIFY_SOCKET is set is read once: when it is not, every call returns
 * before formatting anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "daemon/log.h"
#include "daemon/notify.h"

static struct {
    int checked, enabled;
    char doing[640]; /* "serving <device> on <socket>", "stopping", "device lost: ..." */
    int n_clients;
    int stopping;
} state;

/* 1 when a service manager listens; looked up on the first report only. */
static int enabled(void) {
    if (!state.checked) {
        const char *s = getenv("NOTIFY_SOCKET");
        state.enabled = s && s[0];
        state.checked = 1;
    }
    return state.enabled;
}

/* Sends `fields` (may be "") followed by the STATUS= line; a failure only reaches the debug log. */
static void send_report(const char *fields) {
    int n = state.n_clients;
    int rc = sd_notifyf(0, "%s%sSTATUS=%s, %d client%s%s", fields, fields[0] ? "\n" : "", state.doing,
                        n, n == 1 ? "" : "s", state.stopping ? " left" : "");
    if (rc < 0) tfd_log(TFD_LOG_DEBUG, "sd_notify failed (error %d)", -rc);
}

void tfd_notify_ready(const char *device, const char *socket_path) {
    if (!enabled()) return;
    snprintf(state.doing, sizeof state.doing, "serving %s on %s", device, socket_path);
    send_report("READY=1");
}

void tfd_notify_clients(int n_clients) {
    if (!enabled() || n_clients == state.n_clients) return;
    state.n_clients = n_clients;
    send_report("");
}

void tfd_notify_reloading(void) {
    if (!enabled()) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char fields[64];
    snprintf(fields, sizeof fields, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000u + (unsigned long long)ts.tv_nsec / 1000u);
    send_report(fields);
}

void tfd_notify_reloaded(void) {
    if (!enabled()) return;
    send_report("READY=1");
}

void tfd_notify_draining(void) {
    if (!enabled() || state.stopping) return;
    snprintf(state.doing, sizeof state.doing, "draining: refusing new clients, exiting when idle");
    send_report("");
}

void tfd_notify_stopping(const char *device_error) {
    if (!enabled() || state.stopping) return;
    state.stopping = 1;
    if (device_error[0])
        snprintf(state.doing, sizeof state.doing, "device lost (%s); stopping so systemd restarts it",
                 device_error);
    else
        snprintf(state.doing, sizeof state.doing, "stopping");
    send_report("STOPPING=1");
}
