/*
 * Readiness and state reports to the service manager (sd_notify, libsystemd):
 * READY=1 once the socket listens, STATUS= lines an operator sees in
 * `systemctl status`, RELOADING=1/READY=1 around a SIGHUP reload and
 * STOPPING=1 when shutdown begins. Every call is a no-op when $NOTIFY_SOCKET
 * is unset (the daemon was not started by systemd with Type=notify).
 */
#ifndef TENFERRO_DAEMON_NOTIFY_H
#define TENFERRO_DAEMON_NOTIFY_H

/* The socket listens: READY=1 and STATUS="serving <device> on <socket>". */
void tfd_notify_ready(const char *device, const char *socket_path);

/* The number of connected clients changed: a new STATUS= line. */
void tfd_notify_clients(int n_clients);

/* A reload begins: RELOADING=1 (with MONOTONIC_USEC=, as systemd asks). */
void tfd_notify_reloading(void);

/* A reload ended, applied or refused: READY=1 and the STATUS= line again. */
void tfd_notify_reloaded(void);

/* An admin drain began: STATUS= says so (new connections are refused, the daemon exits when idle). */
void tfd_notify_draining(void);

/* Shutdown begins: STOPPING=1; device_error is "" for an ordinary stop, else why the device was lost. */
void tfd_notify_stopping(const char *device_error);

#endif
