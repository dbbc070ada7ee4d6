/*
 * tenferroctl's renderings of a daemon's status report: the sections an
 * operator reads, one JSON object for scripts, and the Prometheus text
 * exposition format for a metrics scraper (tenferroctl-format.c).
 */
#ifndef TENFERRO_CLIENT_TENFERROCTL_H
#define TENFERRO_CLIENT_TENFERROCTL_H

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

#endif
