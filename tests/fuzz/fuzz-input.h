/*
 * The layout of the fuzz targets' inputs, shared by the targets that read
 * them and by gen-corpus.c, which writes the seed corpora in it.
 *
 * fuzz-frame: one flags byte, then either raw bytes (FZ_FRAME_RAW: written
 * verbatim as client A's stream) or records, each an op byte and its operand:
 *   FRAME (op % 8 in 0, 5, 6, 7): a 2-byte little-endian length, then that
 *       many bytes sent as one frame body behind a correct length header;
 *   SETTLE: run the daemon until it is quiet (work done, replies out);
 *   SWITCH: the other client becomes current (connected and greeted the
 *       first time);
 *   HANGUP: the current client closes its socket;
 *   RAW: a 2-byte length, then that many bytes sent as they are.
 * The harness greets client A with a valid Hello unless FZ_FRAME_NO_HELLO;
 * the other flags choose the reservation policy, how fast the clients read,
 * whose credentials they have and the access settings (the enum below).
 *
 * fuzz-mailbox: one flags byte, then records:
 *   MAILBOX (op % 4 == 0): the next FZ_MAILBOX_REQUEST_BYTES bytes (zero
 *       padded) are written over the head of the mailbox (tf__mailbox from
 *       `state` to `bytes`); with FZ_MAILBOX_SUBMIT the harness then stores
 *       state SUBMITTED itself; op bit 2 rings the doorbell frame, otherwise
 *       the loop's poller (tfd_server_poll_mailboxes) looks; then the daemon
 *       runs until quiet and the client takes any answer (state IDLE);
 *   FRAME (op % 4 == 1): a 2-byte length and a frame body, as above;
 *   SETTLE (op % 4 == 2);
 *   POLLING (op % 4 == 3): op bit 2 says whether the loop is polling
 *       (tfd_server_mailboxes_polled).
 * Before the records the harness greets the client and creates tensors
 * 1..FZ_MAILBOX_TENSORS and pinned buffers 1..FZ_MAILBOX_BUFFERS (sizes
 * below), so a request can name them.
 *
 * fuzz-config: one mode byte (mode % 3), then
 *   0: an INI file, loaded with tfd_config_load;
 *   1: command-line flags: NUL- or newline-separated name, value, name, ...
 *      (tfd_config_flag, then tfd_config_set, as tenferrod's main does);
 *   2: settings: NUL- or newline-separated section, key, value, ...
 *      (tfd_config_set and tfd_config_runtime).
 */
#ifndef TENFERRO_TESTS_FUZZ_INPUT_H
#define TENFERRO_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

enum {
    FZ_FRAME_RAW = 1,
    FZ_FRAME_NO_HELLO = 2,
    FZ_FRAME_WAIT_POLICY = 4,  /* the reservation policy is wait instead of reject */
    FZ_FRAME_SLOW_READER = 8,  /* the clients read their replies a little at a time */
    FZ_FRAME_OTHER_USER = 16,  /* the clients are uid/gid 65534: no admin, quotas of that uid */
    FZ_FRAME_ONE_CLIENT = 32,  /* max_clients = 1: a second client is refused at its Hello */
    FZ_FRAME_ACCESS_LIST = 64, /* [access] allows uid 1000 only; [priority] high = 65534 */
};

enum {
    FZ_OP_FRAME = 0,
    FZ_OP_SETTLE = 1,
    FZ_OP_SWITCH = 2,
    FZ_OP_HANGUP = 3,
    FZ_OP_RAW = 4,
};

enum {
    FZ_MAILBOX_SUBMIT = 1, /* the harness stores state SUBMITTED after writing a request */
};

enum {
    FZ_MB_OP_MAILBOX = 0,
    FZ_MB_OP_FRAME = 1,
    FZ_MB_OP_SETTLE = 2,
    FZ_MB_OP_POLLING = 3,
    FZ_MB_DOORBELL = 4, /* bit of the op byte */
};

/* The head of tf__mailbox that a request writes: state .. bytes. */
#define FZ_MAILBOX_REQUEST_BYTES 64

/* What the mailbox target's preamble creates: f32 tensors of these many elements, buffers of these bytes. */
#define FZ_MAILBOX_TENSORS 3
#define FZ_MAILBOX_BUFFERS 2
static const int64_t fz_mailbox_tensor_elems[FZ_MAILBOX_TENSORS] = {16, 1024, 1};
static const uint64_t fz_mailbox_buffer_bytes[FZ_MAILBOX_BUFFERS] = {8192, 64};

enum { FZ_CONFIG_FILE = 0, FZ_CONFIG_FLAGS = 1, FZ_CONFIG_SETTINGS = 2 };

/* Reads a record's 2-byte little-endian length, clamped to what is left of the input. */
static inline size_t fz_take_length(const uint8_t **p, size_t *left) {
    size_t len;
    if (*left >= 2) {
        len = (size_t)(*p)[0] | ((size_t)(*p)[1] << 8);
        *p += 2;
        *left -= 2;
    } else {
        len = *left;
        *p += *left;
        *left = 0;
        return 0;
    }
    return len < *left ? len : *left;
}

#endif
