/* Host memory shared between two daemons through a sealed memfd (cpu/peer.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/backend/cpu/peer.h"

tf_status tfd_peer_memfd_export(const void *ptr, size_t bytes, tfd_peer_memory *out, char *msg,
                                size_t msg_len) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int fd = memfd_create("tenferrod-peer-copy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(msg, msg_len, "memfd_create for a copy to another daemon: %s", strerror(errno));
        return errno == ENOMEM || errno == EMFILE || errno == ENFILE ? TF_ERR_NO_MEMORY : TF_ERR_IO;
    }
    const size_t len = bytes ? bytes : 1;
    void *map = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) != 0 ||
        (map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        snprintf(msg, msg_len, "%zu bytes of shared memory for a copy to another daemon: %s", len,
                 strerror(errno));
        close(fd);
        return TF_ERR_NO_MEMORY;
    }
    memcpy(map, ptr, bytes);
    munmap(map, len);
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        snprintf(msg, msg_len, "sealing the copy for another daemon: %s", strerror(errno));
        close(fd);
        return TF_ERR_IO;
    }
    snprintf(out->kind, sizeof out->kind, "%s", TFD_PEER_KIND_MEMFD);
    out->fd = fd;
    return TF_OK;
}

tf_status tfd_peer_memfd_map(const tfd_peer_memory *in, size_t bytes, const void **data,
                             void **base, size_t *mapped, char *msg, size_t msg_len) {
    struct stat st;
    int seals = fcntl(in->fd, F_GET_SEALS);
    /* Sealed against shrinking and writing: no hole can be punched under the read below either. */
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_WRITE)) != (F_SEAL_SHRINK | F_SEAL_WRITE) ||
        fstat(in->fd, &st) != 0) {
        snprintf(msg, msg_len,
                 "the other daemon's memory is not a memfd sealed against shrinking and writing");
        return TF_ERR_PEER;
    }
    if (in->offset > (uint64_t)st.st_size || bytes > (uint64_t)st.st_size - in->offset) {
        snprintf(msg, msg_len, "the other daemon's memory holds %lld bytes, not %zu at offset %llu",
                 (long long)st.st_size, bytes, (unsigned long long)in->offset);
        return TF_ERR_PEER;
    }
    const long page = sysconf(_SC_PAGESIZE);
    const uint64_t start = in->offset - in->offset % (uint64_t)page;
    const size_t len = (size_t)(in->offset - start) + (bytes ? bytes : 1);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, in->fd, (off_t)start);
    if (map == MAP_FAILED) {
        snprintf(msg, msg_len, "mapping the other daemon's memory: %s", strerror(errno));
        return TF_ERR_NO_MEMORY;
    }
    *base = map;
    *mapped = len;
    *data = (const uint8_t *)map + (in->offset - start);
    return TF_OK;
}

void tfd_peer_memfd_unmap(void *base, size_t mapped) { munmap(base, mapped); }

tf_status tfd_cpu_peer_export(tfd_backend *be, void *stream, const void *ptr, size_t bytes,
                              tfd_peer_memory *out, char *msg, size_t msg_len) {
    (void)be;
    (void)stream;
    return tfd_peer_memfd_export(ptr, bytes, out, msg, msg_len);
}

tf_status tfd_cpu_peer_import_copy(tfd_backend *be, void *stream, void *dst, size_t bytes,
                                   const tfd_peer_memory *in, char *msg, size_t msg_len) {
    (void)be;
    (void)stream;
    if (strcmp(in->kind, TFD_PEER_KIND_MEMFD) != 0) {
        snprintf(msg, msg_len,
                 "a CPU daemon cannot read memory shared as \"%s\" (a GPU daemon's device memory)",
                 in->kind);
        return TF_ERR_UNSUPPORTED;
    }
    const void *src;
    void *base;
    size_t mapped;
    tf_status st = tfd_peer_memfd_map(in, bytes, &src, &base, &mapped, msg, msg_len);
    if (st != TF_OK) return st;
    memcpy(dst, src, bytes);
    tfd_peer_memfd_unmap(base, mapped);
    return TF_OK;
}
