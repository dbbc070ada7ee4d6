/*
 * tenferroctl's renderings of daemon status reports (tenferroctl-format.c):
 * the sections an operator reads, one JSON object for scripts, the
 * Prometheus text exposition format for a metrics scraper, and the summary
 * of `status --all`, one row per daemon of the host; finding and asking those
 * daemons is tenferroctl-all.c.
 */
#ifndef TENFERRO_CLIENT_TENFERROCTL_H
#define TENFERRO_CLIENT_TENFERROCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tenferro/daemon-status.h"

/* Device, clients, reservations and counters as readable sections. */
void tfctl_print_status_text(FILE *out, const tf_daemon_status *s);

/* The same report as one JSON object (docs/operations.md lists its keys). */
void tfctl_print_status_json(FILE *out, const tf_daemon_status *s);

/* The report as Prometheus metrics, every name prefixed tenferrod_. */
void tfctl_print_metrics(FILE *out, const tf_daemon_status *s);

/* What a scraper reads when the daemon did not answer: tenferrod_up 0. */
void tfctl_print_metrics_down(FILE *out);

/* One daemon `status --all` found: its socket file, and its report or why it gave none. */
typedef struct tfctl_daemon_entry {
    char instance[256];       /* NAME of DIR/tenferrod-NAME.sock: "0", "1", ..., "cpu" */
    char socket[1024];        /* the socket's path */
    tf_daemon_status *status; /* its report; NULL when it did not answer */
    uint64_t own_client_id;   /* tenferroctl's own connection, listed in that report */
    char unreachable[512];    /* why it did not answer; "" when status is set */
} tfctl_daemon_entry;

/* One row per daemon: instance, socket, device, clients, held sessions, memory, state. */
void tfctl_print_all_text(FILE *out, const tfctl_daemon_entry *entries, size_t n);

/* A JSON array, one status object per daemon with its "instance", "socket" and "state". */
void tfctl_print_all_json(FILE *out, const tfctl_daemon_entry *entries, size_t n);

/*
 * status --all (tenferroctl-all.c): asks every daemon whose socket is in the
 * runtime directory, prints them in instance order, and returns the exit
 * status: 0 when every one answered, 1 otherwise.
 */
int tfctl_status_all(int json);

#endif
