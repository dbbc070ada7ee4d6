/* The frame codec shared by the daemon and the client (see frame.h). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/frame.h"

tf_status tf__frame_encode(const Tenferro__Frame *frame, uint64_t max_bytes, uint8_t **out,
                           size_t *out_len) {
    size_t body = tenferro__frame__get_packed_size(frame);
    if (body > max_bytes || body > UINT32_MAX) return TF_ERR_PROTOCOL;
    uint8_t *buf = malloc(TF__FRAME_HEADER_BYTES + body);
    if (!buf) return TF_ERR_NO_MEMORY;
    tf__frame_put_length(buf, (uint32_t)body);
    tenferro__frame__pack(frame, buf + TF__FRAME_HEADER_BYTES);
    *out = buf;
    *out_len = TF__FRAME_HEADER_BYTES + body;
    return TF_OK;
}

/*
 * A decoded frame lives in an arena: protobuf-c allocates its messages and
 * arrays through frame_alloc, which carves them from chunks of the decode's
 * own, and tf__frame_free lets the chunks go together instead of walking the
 * frame and freeing every piece (a Submit of thousands of operations is
 * several allocations per operation). Each piece is preceded by a word
 * naming the arena, so the frame's own pointer finds it. The chunks come from
 * malloc, so the caller's allocations still include the frame's (the failure
 * injection build wraps them, docs/testing.md), a decode that ran out of
 * memory can be told from a malformed body, and a bounded decode stops at its
 * budget. Under AddressSanitizer every piece is an allocation of its own, so
 * a use of a freed frame is still caught.
 */
#if defined(__SANITIZE_ADDRESS__)
#define FRAME_ARENA 0
#else
#define FRAME_ARENA 1
#endif

/* One chunk of an arena; the first one's `next` list holds them all. */
typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
} arena_chunk;

/* What precedes every piece of an arena frame: the arena, and a mark that says it is one. */
typedef struct piece_head {
    arena_chunk *arena;
    uint64_t mark;
} piece_head;
#define PIECE_MARK UINT64_C(0x7466617265616e61)
#define PIECE_ALIGN sizeof(max_align_t)

typedef struct decode_state {
    uint64_t left; /* bytes the decode may still take; UINT64_MAX unbounded */
    int out_of_memory, over_budget;
    arena_chunk *arena;    /* the first chunk (NULL until the first piece) */
    size_t next_cap;       /* the size of the next chunk */
} decode_state;

/* Rounds n up to a multiple of PIECE_ALIGN. */
static size_t aligned(size_t n) { return (n + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN; }

/* A piece of `size` bytes from the decode's arena, after its head. */
static void *arena_alloc(decode_state *d, size_t size) {
    const size_t need = aligned(sizeof(piece_head)) + aligned(size);
    arena_chunk *c = d->arena;
    /* The chunk being carved is the first one's successor, or the first one itself. */
    arena_chunk *cur = c && c->next ? c->next : c;
    if (!cur || cur->cap - cur->used < need) {
        size_t cap = d->next_cap > need ? d->next_cap : need;
        arena_chunk *n = malloc(sizeof *n + cap);
        if (!n) return NULL;
        n->used = 0;
        n->cap = cap;
        n->next = NULL;
        if (!c) {
            d->arena = n;
        } else {
            n->next = c->next; /* newest first after the head: the one carved is at c->next */
            c->next = n;
        }
        d->next_cap = cap * 2;
        cur = n;
    }
    uint8_t *p = (uint8_t *)cur->data + cur->used;
    cur->used += need;
    piece_head *h = (piece_head *)p;
    h->arena = d->arena;
    h->mark = PIECE_MARK;
    return p + aligned(sizeof(piece_head));
}

/* Frees an arena's chunks. */
static void arena_free(arena_chunk *first) {
    if (!first) return;
    arena_chunk *c = first->next;
    while (c) {
        arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(first);
}

static void *frame_alloc(void *data, size_t size) {
    decode_state *d = data;
    if (d && size > d->left) {
        d->over_budget = 1;
        return NULL;
    }
    void *p = FRAME_ARENA && d ? arena_alloc(d, size) : malloc(size);
    if (!p && d) d->out_of_memory = 1;
    if (p && d) d->left -= size;
    return p;
}

static void frame_release(void *data, void *p) {
    (void)data;
    if (!FRAME_ARENA) free(p); /* an arena's pieces go with the arena */
}

Tenferro__Frame *tf__frame_decode(const uint8_t *body, size_t len) {
    Tenferro__Frame *frame;
    return tf__frame_decode_status(body, len, 0, &frame) == TF_OK ? frame : NULL;
}

tf_status tf__frame_decode_status(const uint8_t *body, size_t len, uint64_t budget,
                                  Tenferro__Frame **frame) {
    /* A first chunk about what a body of this size decodes into, so most take one malloc. */
    decode_state d = {.left = budget ? budget : UINT64_MAX, .next_cap = 4 * len + 512};
    ProtobufCAllocator allocator = {frame_alloc, frame_release, &d};
    *frame = tenferro__frame__unpack(&allocator, len, body);
    if (*frame) return TF_OK;
    arena_free(d.arena);
    if (d.out_of_memory) return TF_ERR_NO_MEMORY;
    return d.over_budget ? TF_ERR_QUOTA : TF_ERR_PROTOCOL;
}

void tf__frame_free(Tenferro__Frame *frame) {
    if (!frame) return;
    if (FRAME_ARENA) {
        const piece_head *h = (const piece_head *)((uint8_t *)frame - aligned(sizeof(piece_head)));
        if (h->mark == PIECE_MARK) {
            arena_free(h->arena);
            return;
        }
    }
    /* Pieces that are allocations of their own (AddressSanitizer builds). */
    tenferro__frame__free_unpacked(frame, NULL);
}
