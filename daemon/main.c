/* tenferrod's entry point: command-line options, then the server. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: tenferrod [options]\n"
            "  --socket PATH              Unix socket (default $TENFERRO_SOCKET, else\n"
            "                             /run/tenferro/tenferrod-<device>.sock)\n"
            "  --device auto|cpu|cuda:N   device to own (default auto: a GPU if present)\n"
            "  --workers N                executor worker threads (default: one per core, <= 16)\n"
            "  --max-frame-bytes N        largest frame accepted (default 64 MiB)\n"
            "  --reservation-policy P     reject (default) or wait\n"
            "  --wait-deadline-ms N       how long a queued opener waits (default 10000)\n"
            "  --max-clients N            connections served at once (default 256)\n"
            "  --log-level L              error, warn, info (default) or debug\n"
            "  --version, --help\n");
}

/* Parses an unsigned number option, or exits with a message naming the option. */
static unsigned long long parse_number(const char *opt, const char *value) {
    char *end;
    unsigned long long v = strtoull(value, &end, 10);
    if (!*value || *end) {
        fprintf(stderr, "tenferrod: %s needs a number, got \"%s\"\n", opt, value);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    tfd_options opt;
    memset(&opt, 0, sizeof opt);
    snprintf(opt.device, sizeof opt.device, "auto");
    opt.max_frame_bytes = TF__DEFAULT_MAX_FRAME_BYTES;
    opt.policy = TFD_POLICY_REJECT;
    opt.wait_deadline_ms = 10000;
    opt.max_clients = 256;
    opt.log_level = TFD_LOG_INFO;

    static const struct option longopts[] = {
        {"socket", required_argument, 0, 's'},       {"device", required_argument, 0, 'd'},
        {"workers", required_argument, 0, 'w'},      {"max-frame-bytes", required_argument, 0, 'f'},
        {"reservation-policy", required_argument, 0, 'p'},
        {"wait-deadline-ms", required_argument, 0, 't'},
        {"max-clients", required_argument, 0, 'm'},  {"log-level", required_argument, 0, 'l'},
        {"version", no_argument, 0, 'V'},            {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 's':
            if (strlen(optarg) >= sizeof opt.socket_path) {
                fprintf(stderr, "tenferrod: --socket path is longer than %zu bytes\n",
                        sizeof opt.socket_path - 1);
                return 2;
            }
            snprintf(opt.socket_path, sizeof opt.socket_path, "%s", optarg);
            break;
        case 'd':
            snprintf(opt.device, sizeof opt.device, "%s", optarg);
            break;
        case 'w':
            opt.workers = (int)parse_number("--workers", optarg);
            break;
        case 'f':
            opt.max_frame_bytes = parse_number("--max-frame-bytes", optarg);
            if (opt.max_frame_bytes < TF__MIN_MAX_FRAME_BYTES || opt.max_frame_bytes > UINT32_MAX) {
                fprintf(stderr, "tenferrod: --max-frame-bytes must be between %llu and %u\n",
                        (unsigned long long)TF__MIN_MAX_FRAME_BYTES, UINT32_MAX);
                return 2;
            }
            break;
        case 'p':
            if (strcmp(optarg, "reject") == 0)
                opt.policy = TFD_POLICY_REJECT;
            else if (strcmp(optarg, "wait") == 0)
                opt.policy = TFD_POLICY_WAIT;
            else {
                fprintf(stderr, "tenferrod: --reservation-policy is reject or wait\n");
                return 2;
            }
            break;
        case 't':
            opt.wait_deadline_ms = parse_number("--wait-deadline-ms", optarg);
            break;
        case 'm':
            opt.max_clients = (int)parse_number("--max-clients", optarg);
            break;
        case 'l':
            opt.log_level = tfd_log_parse_level(optarg);
            if (opt.log_level < 0) {
                fprintf(stderr, "tenferrod: --log-level is error, warn, info or debug\n");
                return 2;
            }
            break;
        case 'V':
            printf("tenferrod %s (protocol %d)\n", TFD_VERSION_STRING,
                   TENFERRO__PROTOCOL__PROTOCOL_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tenferrod: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    tfd_log_set_level((tfd_log_level)opt.log_level);
    return tfd_server_run(&opt);
}
