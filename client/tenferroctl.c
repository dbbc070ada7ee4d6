/*
 * tenferroctl: the operator's view of a running tenferrod.
 *
 *   tenferroctl [--socket PATH] status   device, clients, reservation table, counters
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

static void usage(FILE *out) {
    fprintf(out, "usage: tenferroctl [--socket PATH] status\n");
}

/* Prints a duration in ms as the most readable unit. */
static void print_age(uint64_t ms) {
    if (ms < 10000)
        printf("%llums", (unsigned long long)ms);
    else
        printf("%.1fs", (double)ms / 1000.0);
}

/* Asks the daemon for its status and prints it as sections. */
static int cmd_status(tf_client *c) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    req.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    req.status_request = &body;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    if (st != TF_OK) {
        fprintf(stderr, "tenferroctl: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        return 1;
    }
    if (reply->body_case != TENFERRO__FRAME__BODY_STATUS_REPLY) {
        fprintf(stderr, "tenferroctl: unexpected answer to a status request\n");
        tf__frame_free(reply);
        return 1;
    }
    Tenferro__StatusReply *s = reply->status_reply;
    printf("device:   %s\n", s->device);
    printf("version:  tenferrod %s, up ", s->daemon_version);
    print_age(s->uptime_ms);
    printf(", reservation policy %s\n", s->policy);
    if (s->device_error && s->device_error[0])
        printf("DEVICE LOST: %s (tenferrod is exiting for its service manager to restart it)\n",
               s->device_error);

    printf("\nclients (%zu):\n", s->n_clients);
    printf("  %-6s %-8s %-6s %-20s %8s %12s %8s %s\n", "id", "pid", "uid", "name", "tensors",
           "bytes", "queued", "session");
    for (size_t i = 0; i < s->n_clients; i++) {
        Tenferro__ClientInfo *ci = s->clients[i];
        char session[32] = "-";
        if (ci->session_id)
            snprintf(session, sizeof session, "held %llu", (unsigned long long)ci->session_id);
        else if (ci->scoped_active)
            snprintf(session, sizeof session, "scoped");
        printf("  %-6llu %-8d %-6u %-20s %8llu %12llu %8llu %s\n", (unsigned long long)ci->client_id,
               ci->pid, ci->uid, ci->name, (unsigned long long)ci->live_tensors,
               (unsigned long long)ci->live_bytes, (unsigned long long)ci->queued_items, session);
    }

    printf("\nreservations:\n");
    for (size_t i = 0; i < s->n_reservations; i++) {
        Tenferro__ReservationInfo *r = s->reservations[i];
        printf("  domain %u: ", r->domain);
        if (r->holder_client_id) {
            printf("held by client %llu (pid %d), session %llu, for ",
                   (unsigned long long)r->holder_client_id, r->holder_pid,
                   (unsigned long long)r->session_id);
            print_age(r->age_ms);
        } else {
            printf("free");
        }
        printf("; queued openers: %zu", r->n_queued_client_ids);
        for (size_t j = 0; j < r->n_queued_client_ids; j++)
            printf("%s%llu", j ? ", " : " [", (unsigned long long)r->queued_client_ids[j]);
        printf("%s\n", r->n_queued_client_ids ? "]" : "");
    }

    printf("\ncounters:\n");
    for (size_t i = 0; i < s->n_counters; i++)
        printf("  %-26s %llu\n", s->counters[i]->name, (unsigned long long)s->counters[i]->value);
    tf__frame_free(reply);
    return 0;
}

int main(int argc, char **argv) {
    const char *socket_path = NULL;
    static const struct option longopts[] = {
        {"socket", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
        if (ch == 's')
            socket_path = optarg;
        else if (ch == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    if (strcmp(cmd, "status") != 0) {
        fprintf(stderr, "tenferroctl: unknown command \"%s\"\n", cmd);
        usage(stderr);
        return 2;
    }
    setenv("TENFERRO_CLIENT_NAME", "tenferroctl", 0);
    tf_client *c = NULL;
    tf_status st = tf_connect(socket_path, &c);
    if (st != TF_OK) {
        fprintf(stderr, "tenferroctl: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        tf_disconnect(c);
        return 1;
    }
    int rc = cmd_status(c);
    tf_disconnect(c);
    return rc;
}
