/* Device memory shared between two daemons through a shareable CUDA memory pool (cuda/peer.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/backend/cpu/peer.h"
#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/peer.h"

_Static_assert(sizeof(struct cudaMemPoolPtrExportData) <= TFD_PEER_HANDLE_BYTES,
               "the pointer's export data fits tfd_peer_memory");

tf_status tfd_cuda_pool_create_shareable(int ordinal, cudaMemPool_t *pool, char *msg,
                                         size_t msg_len) {
    int supported = 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, ordinal) !=
            cudaSuccess ||
        !(supported & cudaMemHandleTypePosixFileDescriptor)) {
        (void)cudaGetLastError();
        snprintf(msg, msg_len, "cuda:%d offers no shareable memory pools", ordinal);
        return TF_ERR_UNSUPPORTED;
    }
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal;
    cudaError_t e = cudaMemPoolCreate(pool, &props);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, msg_len, "cudaMemPoolCreate of a shareable pool on cuda:%d: %s", ordinal,
                 cudaGetErrorString(e));
        return TF_ERR_UNSUPPORTED;
    }
    return TF_OK;
}

tf_status tfd_cuda_peer_export(cudaMemPool_t pool, void *base, const void *ptr, size_t bytes,
                               tfd_peer_memory *out, char *msg, size_t msg_len) {
    (void)bytes;
    memset(out, 0, sizeof *out);
    out->fd = -1;
    /* The pool's descriptor first: a pointer is exported only from a pool already shared. */
    int fd = -1;
    TFD_CUDA_CHECK_RET(
        cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), msg,
        msg_len);
    struct cudaMemPoolPtrExportData data;
    cudaError_t e = cudaMemPoolExportPointer(&data, base);
    if (e != cudaSuccess) {
        close(fd);
        return tfd_cuda_fail(e, "cudaMemPoolExportPointer(&data, base)", __FILE__, __LINE__, msg,
                             msg_len);
    }
    snprintf(out->kind, sizeof out->kind, "%s", TFD_PEER_KIND_CUDA_POOL);
    memcpy(out->handle, &data, sizeof data);
    out->handle_len = sizeof data;
    out->offset = (uint64_t)((const char *)ptr - (const char *)base);
    out->fd = fd;
    return TF_OK;
}

/* Host memory of a CPU daemon: mapped, copied up on the stream, waited for. */
static tf_status import_host(cudaStream_t stream, void *dst, size_t bytes, const tfd_peer_memory *in,
                             char *msg, size_t msg_len) {
    const void *src;
    void *base;
    size_t mapped;
    tf_status st = tfd_peer_memfd_map(in, bytes, &src, &base, &mapped, msg, msg_len);
    if (st != TF_OK) return st;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    tfd_peer_memfd_unmap(base, mapped);
    if (e != cudaSuccess)
        return tfd_cuda_fail(e, "copying a CPU daemon's tensor up", __FILE__, __LINE__, msg, msg_len);
    return TF_OK;
}

tf_status tfd_cuda_peer_import_copy(int ordinal, cudaStream_t stream, void *dst, size_t bytes,
                                    const tfd_peer_memory *in, char *msg, size_t msg_len) {
    if (strcmp(in->kind, TFD_PEER_KIND_MEMFD) == 0) return import_host(stream, dst, bytes, in, msg, msg_len);
    if (strcmp(in->kind, TFD_PEER_KIND_CUDA_POOL) != 0 ||
        in->handle_len != sizeof(struct cudaMemPoolPtrExportData)) {
        snprintf(msg, msg_len, "a CUDA daemon cannot read memory shared as \"%.32s\"", in->kind);
        return TF_ERR_UNSUPPORTED;
    }
    cudaMemPool_t pool;
    TFD_CUDA_CHECK_RET(cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)in->fd,
                                                           cudaMemHandleTypePosixFileDescriptor, 0),
                       msg, msg_len);
    tf_status st = TF_OK;
    void *src = NULL;
    /* The other daemon's pool may live on another GPU: this one needs access to it. */
    struct cudaMemLocation here = {.type = cudaMemLocationTypeDevice, .id = ordinal};
    enum cudaMemAccessFlags access = cudaMemAccessFlagsProtNone;
    TFD_CUDA_CHECK_GOTO(cudaMemPoolGetAccess(&access, pool, &here), st, msg, msg_len, out);
    if (access != cudaMemAccessFlagsProtReadWrite) {
        struct cudaMemAccessDesc desc = {.location = here, .flags = cudaMemAccessFlagsProtReadWrite};
        TFD_CUDA_CHECK_GOTO(cudaMemPoolSetAccess(pool, &desc, 1), st, msg, msg_len, out);
    }
    struct cudaMemPoolPtrExportData data;
    memcpy(&data, in->handle, sizeof data);
    TFD_CUDA_CHECK_GOTO(cudaMemPoolImportPointer(&src, pool, &data), st, msg, msg_len, out);
    TFD_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, (const char *)src + in->offset, bytes,
                                        cudaMemcpyDeviceToDevice, stream),
                        st, msg, msg_len, out);
    /* The imported memory goes in stream order behind the copy, and one wait covers both. */
    TFD_CUDA_CHECK_GOTO(cudaFreeAsync(src, stream), st, msg, msg_len, out);
    src = NULL;
    TFD_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), st, msg, msg_len, out);
out:
    if (src) (void)cudaFree(src);
    (void)cudaMemPoolDestroy(pool);
    (void)cudaGetLastError();
    return st;
}
