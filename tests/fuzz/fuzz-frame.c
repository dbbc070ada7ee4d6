/*
 * libFuzzer target: the frame decoder and the dispatcher, with every real
 * handler behind it, over the in-process daemon of fuzz-daemon.c. The input
 * is what one or two clients send (layout in fuzz-input.h): by default a
 * stream of frames behind a valid Hello and Mapped(0) from the harness, so
 * that the fuzzer reaches the handlers (and the completion page, the
 * mailbox and the ring behind Mapped) at once; in raw mode the bytes as they are,
 * length headers included. After the input every client hangs up and the
 * server must be back at its baseline; a crash, a sanitizer report, a reply
 * that does not decode, a hang or anything left behind is a finding.
 */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz-daemon.h"
#include "tests/fuzz/fuzz-input.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_init();
    return 0;
}

static uint8_t flags;

/* Connects a client as the input's flags say; 0 on success. */
static int connect_client(fz_client *cl) {
    if (fz_connect(cl) != 0) return -1;
    if (flags & FZ_FRAME_SLOW_READER) fz_slow_reader(cl);
    cl->skip_mapped = (flags & FZ_FRAME_NO_MAPPED) != 0;
    return 0;
}

/* Connects and greets the second client the first time the input switches to it. */
static void ensure_second(fz_client *cl, int *n) {
    if (*n > 1) return;
    *n = 2;
    if (connect_client(&cl[1]) == 0) fz_hello(&cl[1], "fuzz-b");
}

/* The daemon-wide settings the flags choose. */
static void apply_flags(tfd_options *opt) {
    opt->policy = flags & FZ_FRAME_WAIT_POLICY ? TFD_POLICY_WAIT : TFD_POLICY_REJECT;
    if (flags & FZ_FRAME_OTHER_USER) fz_peer_credentials(65534, 65534);
    if (flags & FZ_FRAME_ONE_CLIENT) opt->max_clients = 1;
    if (flags & FZ_FRAME_ACCESS_LIST) {
        opt->allowed[0] = (tfd_principal){.is_group = 0, .id = 1000};
        opt->n_allowed = 1;
        opt->priorities[0] = (tfd_priority_rule){{.is_group = 0, .id = 65534}, -1};
        opt->n_priorities = 1;
    }
}

/* Plays the records of a structured input. */
static void play(fz_client *cl, int *n, const uint8_t *p, size_t left) {
    int cur = 0;
    while (left > 0) {
        uint8_t op = *p++;
        left--;
        size_t len;
        switch (op % 8) {
        case FZ_OP_SETTLE:
            fz_settle();
            break;
        case FZ_OP_SWITCH:
            ensure_second(cl, n);
            cur ^= 1;
            break;
        case FZ_OP_HANGUP:
            fz_hangup(&cl[cur]);
            break;
        case FZ_OP_RAW:
            len = fz_take_length(&p, &left);
            fz_send(&cl[cur], p, len);
            p += len;
            left -= len;
            break;
        default:
            len = fz_take_length(&p, &left);
            fz_send_body(&cl[cur], p, len);
            p += len;
            left -= len;
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    flags = data[0];
    fz_begin();
    apply_flags(&fz_server()->opt);
    fz_client cl[2] = {{.fd = -1}, {.fd = -1}};
    int n = 1;
    if (connect_client(&cl[0]) != 0) return 0;
    if (!(flags & FZ_FRAME_NO_HELLO)) fz_hello(&cl[0], "fuzz-a");
    if (flags & FZ_FRAME_RAW)
        fz_send(&cl[0], data + 1, size - 1);
    else
        play(cl, &n, data + 1, size - 1);
    fz_settle();
    fz_finish(cl, n);
    return 0;
}
