/* Pinned buffers' slow steps on libuv's thread pool (see pinned-work.h). */
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/pinned-work.h"

/* A buffer on its way in. */
typedef struct creation {
    uv_work_t req; /* first: the request points back to the whole record */
    tfd_backend *be;
    uint64_t id;
    size_t bytes;
    tfd_pinned b;
    int fd;
    tf_status st;
    char msg[512];
    tfd_pinned_created_fn done;
    tfd_pinned_sealed_fn sealed;
    void *arg;
} creation;

/* Thread pool: the memfd and its mapping. */
static void create_work(uv_work_t *req) {
    creation *w = (creation *)req;
    w->st = tfd_pinned_create(w->id, w->bytes, &w->b, &w->fd, w->msg, sizeof w->msg);
}

/* Loop: hands the outcome over. */
static void create_done(uv_work_t *req, int status) {
    creation *w = (creation *)req;
    (void)status; /* work is never cancelled: uv_cancel is not used */
    w->done(w->arg, w->st, &w->b, w->st == TF_OK ? w->fd : -1, w->msg);
    free(w);
}

tf_status tfd_pinned_create_async(uv_loop_t *loop, tfd_backend *be, uint64_t id, size_t bytes,
                                  tfd_pinned_created_fn done, void *arg) {
    creation *w = calloc(1, sizeof *w);
    if (!w) return TF_ERR_NO_MEMORY;
    w->be = be;
    w->id = id;
    w->bytes = bytes;
    w->fd = -1;
    w->done = done;
    w->arg = arg;
    if (uv_queue_work(loop, &w->req, create_work, create_done) != 0) {
        free(w);
        return TF_ERR_INTERNAL;
    }
    return TF_OK;
}

/* Thread pool: the seals, every page allocated, the registration. */
static void seal_work(uv_work_t *req) {
    creation *w = (creation *)req;
    w->st = tfd_pinned_seal(w->be, &w->b, w->msg, sizeof w->msg);
}

static void seal_done(uv_work_t *req, int status) {
    creation *w = (creation *)req;
    (void)status;
    w->sealed(w->arg, w->st, &w->b, w->msg);
    free(w);
}

tf_status tfd_pinned_seal_async(uv_loop_t *loop, tfd_backend *be, const tfd_pinned *b,
                                tfd_pinned_sealed_fn done, void *arg) {
    creation *w = calloc(1, sizeof *w);
    if (!w) return TF_ERR_NO_MEMORY;
    w->be = be;
    w->b = *b;
    w->fd = -1;
    w->sealed = done;
    w->arg = arg;
    if (uv_queue_work(loop, &w->req, seal_work, seal_done) != 0) {
        free(w);
        return TF_ERR_INTERNAL;
    }
    return TF_OK;
}

/* A buffer on its way out. */
typedef struct destruction {
    uv_work_t req;
    tfd_backend *be;
    tfd_pinned b;
} destruction;

static void destroy_work(uv_work_t *req) {
    destruction *w = (destruction *)req;
    tfd_pinned_destroy(w->be, &w->b);
}

static void destroy_done(uv_work_t *req, int status) {
    (void)status;
    free(req);
}

void tfd_pinned_destroy_async(uv_loop_t *loop, tfd_backend *be, const tfd_pinned *b) {
    destruction *w = calloc(1, sizeof *w);
    if (w) {
        w->be = be;
        w->b = *b;
        if (uv_queue_work(loop, &w->req, destroy_work, destroy_done) == 0) return;
        free(w);
    }
    /* No room to defer it: do it here, late rather than never. */
    tfd_pinned b_copy = *b;
    tfd_pinned_destroy(be, &b_copy);
}
