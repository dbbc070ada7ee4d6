/*
 * libFuzzer target: the frame decoder and the dispatcher, with every real
 * handler behind it, over the in-process daemon of fuzz-daemon.c. The input
 * is what one or two clients send (layout in fuzz-input.h): by default a
 * stream of frames behind a valid Hello from the harness, so that the
 * fuzzer reaches the handlers at once; in raw mode the bytes as they are,
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

/* Connects and greets the second client the first time the input switches to it. */
static void ensure_second(fz_client *cl, int *n) {
    if (*n > 1) return;
    *n = 2;
    if (fz_connect(&cl[1]) == 0) fz_hello(&cl[1], "fuzz-b");
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
    tfd_server *srv = fz_server();
    uint8_t flags = data[0];
    srv->opt.policy = flags & FZ_FRAME_WAIT_POLICY ? TFD_POLICY_WAIT : TFD_POLICY_REJECT;
    fz_begin();
    fz_client cl[2] = {{.fd = -1}, {.fd = -1}};
    int n = 1;
    if (fz_connect(&cl[0]) != 0) return 0;
    if (!(flags & FZ_FRAME_NO_HELLO)) fz_hello(&cl[0], "fuzz-a");
    if (flags & FZ_FRAME_RAW)
        fz_send(&cl[0], data + 1, size - 1);
    else
        play(cl, &n, data + 1, size - 1);
    fz_settle();
    fz_finish(cl, n);
    return 0;
}
