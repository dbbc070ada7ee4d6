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
 * The harness greets client A with a valid Hello unless FZ_FRAME_NO_HELLO,
 * maps the completion page of its HelloReply and says Mapped(0) unless
 * FZ_FRAME_NO_MAPPED (then the page waits for a Mapped frame of the input);
 * the other flags choose the reservation policy, how fast the clients read,
 * whose credentials they have and the access settings (the enum below).
 *
 * fuzz-mailbox: one flags byte, then records:
 *   MAILBOX (op % 4 == 0): the next FZ_MAILBOX_REQUEST_BYTES bytes (zero
 *       padded) are written over the head of the mailbox (tf__mailbox from
 *       `state` to `bytes`); with FZ_MAILBOX_SUBMIT the harness then stores
 *       state SUBMITTED itself; op bit 2 rings the doorbell frame, otherwise
 *       the loop's poller (tfd_server_poll_mailboxes) looks; then the daemon
 *       runs until quiet and the client takes any answer (state IDLE). With
 *       FZ_MAILBOX_RACE the record is twice as long: a second head follows,
 *       and while the daemon looks a writer thread keeps storing into every
 *       field of the head either its first or its second value;
 *   FRAME (op % 4 == 1): a 2-byte length and a frame body, as above;
 *   SETTLE (op % 4 == 2);
 *   POLLING (op % 4 == 3): op bit 2 says whether the loop is polling
 *       (tfd_server_mailboxes_polled).
 * Before the records the harness greets the client (Hello, Mapped(0)) and
 * creates tensors 1..FZ_MAILBOX_TENSORS and pinned buffers
 * 1..FZ_MAILBOX_BUFFERS (sizes below), each followed by its Mapped, so a
 * request can name them.
 *
 * fuzz-ring: one flags byte (FZ_RING_*), then records on the submission
 * ring of a client greeted with Hello and Mapped(0) (unless
 * FZ_RING_NO_MAPPED) that created tensors 1..FZ_MAILBOX_TENSORS as above.
 * The harness writes the request area at its own position, which only
 * moves forward, and the daemon sees nothing until PUBLISH:
 *   ENTRY (op % 8 == 0): a 2-byte length L and L bytes of frame body, written
 *       as one entry: the harness's header (bytes L, the client's next
 *       sequence number, after_seq the last one sent on the socket), the
 *       body, zero padding. Op bit 3: when the body decodes, its sequence
 *       number is set to the header's (so mutated Submits stay in order).
 *       Op bit 4: the body is an Upload frame of L bytes of data instead
 *       (valid, refused in the ring: moves both areas towards their wrap);
 *   RAW (op % 8 == 1): a 2-byte length and that many bytes written as they
 *       are (entry headers of any kind);
 *   PUBLISH (op % 8 == 2): req_head is stored at the harness's position, the
 *       daemon looks (op bit 3: a MailboxDoorbell frame; op bit 4: the loop's
 *       poller; neither: its next turns), and the client reads the replies.
 *       With FZ_RING_RACE a FZ_RING_PALETTE_BYTES palette follows, and a
 *       writer thread rewrites the header words and the bytes of the entries
 *       being taken (values from the palette) while the daemon looks;
 *   WORD (op % 8 == 3): a selector byte and an 8-byte little-endian value
 *       (FZ_RING_WORD_*: req_head, rep_tail, client_sleeping, req_tail, or a
 *       skip of the harness's position);
 *   FRAME (op % 8 == 4): a 2-byte length and a frame body on the socket;
 *   SETTLE (op % 8 == 5): the daemon runs until quiet; replies are read;
 *   CONSUME (op % 8 == 6): the client reads the replies and stores rep_tail
 *       (the only place it does with FZ_RING_LAZY_READER);
 *   HANGUP (op % 8 == 7): the client hangs up (op bit 3: the holder of
 *       FZ_RING_CONTENDED instead).
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
    FZ_FRAME_NO_MAPPED = 128,  /* the harness's Hello is not followed by Mapped(0) */
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
    FZ_MAILBOX_RACE = 2,   /* a writer thread rewrites the request while the daemon looks */
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

enum {
    FZ_RING_RACE = 1,        /* a writer thread rewrites the ring while the daemon looks */
    FZ_RING_NO_MAPPED = 2,   /* no Mapped(0) from the harness: the input may send one */
    FZ_RING_LAZY_READER = 4, /* replies are read only at CONSUME records */
    FZ_RING_CONTENDED = 8,   /* a second client holds the session; the policy is wait */
};

enum {
    FZ_RING_OP_ENTRY = 0,
    FZ_RING_OP_RAW = 1,
    FZ_RING_OP_PUBLISH = 2,
    FZ_RING_OP_WORD = 3,
    FZ_RING_OP_FRAME = 4,
    FZ_RING_OP_SETTLE = 5,
    FZ_RING_OP_CONSUME = 6,
    FZ_RING_OP_HANGUP = 7,
    FZ_RING_FIXUP = 8,    /* ENTRY: the body's sequence number made the header's */
    FZ_RING_FILLER = 16,  /* ENTRY: an Upload of L bytes instead of the body */
    FZ_RING_DOORBELL = 8, /* PUBLISH: a MailboxDoorbell frame */
    FZ_RING_POLLER = 16,  /* PUBLISH: tfd_server_poll_mailboxes */
    FZ_RING_HOLDER = 8,   /* HANGUP: the second client hangs up */
};

/*
 * WORD selectors (selector % 5). rep_tail is mapped so that the daemon never
 * overwrites a reply the client has not read (that would only be the
 * client's loss, and would make the replies uncheckable): a value whose top
 * bit is set is stored as it is (far beyond rep_head), one whose top two bits
 * are 01 puts rep_tail ahead of what the client read (from then on the
 * harness stops checking the replies' contents), any other puts it up to
 * 64 KiB behind. req_head: top bit set, the value as it is; else the
 * harness's position plus the value's low 32 bits as a signed number.
 */
enum {
    FZ_RING_WORD_REQ_HEAD = 0,
    FZ_RING_WORD_REP_TAIL = 1,
    FZ_RING_WORD_SLEEPING = 2,
    FZ_RING_WORD_REQ_TAIL = 3, /* the daemon's word: it must never read it back */
    FZ_RING_WORD_SKIP = 4,     /* the harness's position moves on by the value's low 16 bits */
};

/*
 * A raced PUBLISH's palette: each field names the other value of one word
 * the writer alternates with the client's own, 0 leaving the word alone:
 *   [0]  req_head: published + (int8) * 8;   [1] rep_tail: bit 7 set, far
 *        beyond rep_head, else up to 1 KiB behind what was read;
 *   [2]  client_sleeping flips 0/1;          [3] req_tail (the daemon's
 *        word): + value * 8;
 *   [4..7] XOR of the next four entries' `bytes` (little-endian);
 *   [8]  their seq + (int8);                 [9] their after_seq + value;
 *   [10..11], [13..14] offsets of two body bytes, [12], [15] their XOR.
 */
#define FZ_RING_PALETTE_BYTES 16

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
