/*
 * tenferroctl: the operator's view of a running tenferrod, and its levers.
 *
 *   tenferroctl [--socket PATH | --device DEV] COMMAND
 *   tenferroctl status --all [--json]
 *
 *   status [--json]   device, clients, reservations, counters
 *   status --all      one row per daemon of this host (with --json: one array)
 *   metrics           the same as Prometheus text
 *   terminate ID      end client ID's connection, reclaim what it held
 *   drain             refuse new clients, exit when the last one leaves
 *   trim              return cached device memory (busy while held)
 *
 * --device names the daemon of one device (cuda:N, N or cpu) and finds its
 * socket as tf_connect_device does; --all lists every daemon's socket in the
 * same runtime directory (tenferroctl-all.c). This file parses the command
 * line and speaks to the daemon; rendering lives in tenferroctl-format.c.
 * Exit status: 0 on success, 1 when the daemon (or the connection to it)
 * answered with a typed error, printed as "tenferroctl: TF_ERR_NAME: message",
 * or, for --all, when any daemon did not answer; 2 on a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "client/tenferroctl.h"

enum { EXIT_TYPED_ERROR = 1, EXIT_USAGE = 2 };

static void usage(FILE *out) {
    fprintf(out,
            "usage: tenferroctl [--socket PATH | --device DEV] COMMAND\n"
            "       tenferroctl status --all [--json]\n"
            "\n"
            "commands:\n"
            "  status [--json]   device, clients, reservations and counters\n"
            "  status --all      one row per daemon of this host: instance, socket, device,\n"
            "                    clients, held sessions, memory in use, up or unreachable\n"
            "                    (exit status 1 when any is unreachable)\n"
            "  metrics           the status as Prometheus text exposition format\n"
            "  terminate ID      end client ID's connection (its tensors are freed, its\n"
            "                    reservation released); needs admin rights\n"
            "  drain             refuse new connections; tenferrod exits when the last\n"
            "                    client leaves; needs admin rights\n"
            "  trim              return cached device memory to the system (TF_ERR_BUSY while\n"
            "                    a held session is open); needs admin rights\n"
            "\n"
            "The socket is --socket, else that of the daemon of --device DEV (cuda:N or N:\n"
            "DIR/tenferrod-N.sock; cpu: DIR/tenferrod-cpu.sock), else $TENFERRO_SOCKET, else\n"
            "the default under DIR. DIR is $TENFERRO_RUNTIME_DIR or /run/tenferro; status --all\n"
            "asks every DIR/tenferrod-*.sock.\n");
}

/* Prints a typed error the way every command reports one, and returns the exit status. */
static int report(tf_client *c, tf_status st) {
    fprintf(stderr, "tenferroctl: %s: %s\n", tf_status_name(st),
            c && tf_client_last_error(c)[0] ? tf_client_last_error(c) : tf_strerror(st));
    return EXIT_TYPED_ERROR;
}

/* status and metrics: one report through the library (tf_daemon_status_get), printed by `print`. */
static int cmd_report(tf_client *c, void (*print)(FILE *, const tf_daemon_status *)) {
    tf_daemon_status *s = NULL;
    tf_status st = tf_daemon_status_get(c, &s);
    if (st != TF_OK) return report(c, st);
    print(stdout, s);
    tf_daemon_status_free(s);
    return 0;
}

/* terminate, drain, trim: one AdminRequest; the daemon's message is printed on success. */
static int cmd_admin(tf_client *c, uint32_t kind, uint64_t client_id) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__AdminRequest body = TENFERRO__ADMIN_REQUEST__INIT;
    body.kind = kind;
    body.client_id = client_id;
    req.body_case = TENFERRO__FRAME__BODY_ADMIN_REQUEST;
    req.admin_request = &body;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    if (st != TF_OK) return report(c, st);
    if (reply->body_case != TENFERRO__FRAME__BODY_RESULT) {
        tf__frame_free(reply);
        return report(c, tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to an admin request"));
    }
    st = tf__result_status(c, reply->result);
    if (st == TF_OK && reply->result->message && reply->result->message[0])
        printf("%s\n", reply->result->message);
    tf__frame_free(reply);
    return st == TF_OK ? 0 : report(c, st);
}

/* Parses a client id (a positive decimal number); 0 when it is not one. */
static uint64_t parse_client_id(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || s[0] == '+') return 0;
    return v;
}

/* What the command line asks for, checked before anything connects. */
typedef struct request {
    const char *socket_path;
    const char *device; /* --device: cuda:N, N or cpu */
    const char *command;
    int json;
    int all; /* status --all */
    uint32_t admin_kind; /* 0 for status and metrics */
    uint64_t client_id;
} request;

/* Fills rq from argv; returns -1 to go on, else the exit status (0 after --help, 2 on misuse). */
static int parse_args(int argc, char **argv, request *rq) {
    static const struct option longopts[] = {{"socket", required_argument, 0, 's'},
                                             {"device", required_argument, 0, 'd'},
                                             {"json", no_argument, 0, 'j'},
                                             {"all", no_argument, 0, 'a'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
        if (ch == 's') {
            rq->socket_path = optarg;
        } else if (ch == 'd') {
            rq->device = optarg;
        } else if (ch == 'j') {
            rq->json = 1;
        } else if (ch == 'a') {
            rq->all = 1;
        } else if (ch == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (rq->socket_path && rq->device) {
        fprintf(stderr,
                "tenferroctl: --socket and --device both name the daemon; give one of them\n");
        return EXIT_USAGE;
    }
    char device_path[512];
    if (rq->device && tf__device_socket(rq->device, device_path, sizeof device_path) != 0) {
        fprintf(stderr,
                "tenferroctl: --device: \"%s\" names no device (cuda:N, N or cpu expected)\n",
                rq->device);
        return EXIT_USAGE;
    }
    int n_args = argc - optind;
    rq->command = n_args > 0 ? argv[optind] : "";
    const char *cmd = rq->command;
    int want_args = 1;
    if (strcmp(cmd, "terminate") == 0) {
        rq->admin_kind = TENFERRO__ADMIN_KIND__ADMIN_TERMINATE;
        want_args = 2;
        if (n_args == 2 && (rq->client_id = parse_client_id(argv[optind + 1])) == 0) {
            fprintf(stderr, "tenferroctl: terminate: \"%s\" is not a client id (tenferroctl status "
                            "lists them)\n", argv[optind + 1]);
            return EXIT_USAGE;
        }
    } else if (strcmp(cmd, "drain") == 0) {
        rq->admin_kind = TENFERRO__ADMIN_KIND__ADMIN_DRAIN;
    } else if (strcmp(cmd, "trim") == 0) {
        rq->admin_kind = TENFERRO__ADMIN_KIND__ADMIN_TRIM;
    } else if (strcmp(cmd, "status") != 0 && strcmp(cmd, "metrics") != 0) {
        if (cmd[0]) fprintf(stderr, "tenferroctl: unknown command \"%s\"\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (n_args != want_args || ((rq->json || rq->all) && strcmp(cmd, "status") != 0)) {
        fprintf(stderr, "tenferroctl: %s: %s\n", cmd,
                n_args != want_args ? "wrong number of arguments"
                : rq->json          ? "--json goes with status only"
                                    : "--all goes with status only");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (rq->all && (rq->socket_path || rq->device)) {
        fprintf(stderr, "tenferroctl: status --all asks every daemon; it takes neither --socket "
                        "nor --device\n");
        return EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv) {
    request rq = {0};
    int rc = parse_args(argc, argv, &rq);
    if (rc >= 0) return rc;
    int metrics = strcmp(rq.command, "metrics") == 0;

    setenv("TENFERRO_CLIENT_NAME", "tenferroctl", 0);
    if (rq.all) return tfctl_status_all(rq.json);
    tf_client *c = NULL;
    tf_status st = rq.device ? tf_connect_device(rq.device, &c) : tf_connect(rq.socket_path, &c);
    if (st != TF_OK) {
        if (metrics) tfctl_print_metrics_down(stdout); /* a scraper still learns the daemon is down */
        rc = report(c, st);
    } else if (rq.admin_kind) {
        rc = cmd_admin(c, rq.admin_kind, rq.client_id);
    } else if (metrics) {
        rc = cmd_report(c, tfctl_print_metrics);
    } else {
        rc = cmd_report(c, rq.json ? tfctl_print_status_json : tfctl_print_status_text);
    }
    tf_disconnect(c);
    return rc;
}
