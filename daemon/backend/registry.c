/* Backend selection (see registry.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/registry.h"
#include "daemon/log.h"

#ifdef TFD_HAVE_CUDA
/* Number of CUDA devices visible, 0 when none or when the driver is missing. */
int tfd_cuda_device_count(void);
extern const tfd_backend_vtable tfd_cuda_backend;
#endif

static tf_status open_cpu(tfd_backend *be, const tfd_cache_config *caches, char *resolved,
                          size_t rlen, char *msg, size_t mlen) {
    memset(be, 0, sizeof *be);
    be->vt = &tfd_cpu_backend;
    be->caches = *caches;
    snprintf(resolved, rlen, "cpu");
    return be->vt->open(be, 0, msg, mlen);
}

tf_status tfd_backend_select(const char *device, const tfd_cache_config *caches, tfd_backend *be,
                             char *resolved, size_t resolved_len, char *msg, size_t msg_len) {
    if (strcmp(device, "cpu") == 0)
        return open_cpu(be, caches, resolved, resolved_len, msg, msg_len);
    if (strcmp(device, "auto") == 0) {
#ifdef TFD_HAVE_CUDA
        if (tfd_cuda_device_count() > 0) {
            tfd_log(TFD_LOG_INFO, "--device auto: a CUDA GPU is present, using cuda:0");
            return tfd_backend_select("cuda:0", caches, be, resolved, resolved_len, msg, msg_len);
        }
        tfd_log(TFD_LOG_INFO, "--device auto: no CUDA GPU found, using the CPU backend");
#else
        tfd_log(TFD_LOG_INFO, "--device auto: built without CUDA, using the CPU backend");
#endif
        return open_cpu(be, caches, resolved, resolved_len, msg, msg_len);
    }
    if (strncmp(device, "cuda:", 5) == 0) {
        char *end;
        long ordinal = strtol(device + 5, &end, 10);
        if (*end || end == device + 5 || ordinal < 0 || ordinal > 1024) {
            snprintf(msg, msg_len, "bad device \"%s\": use auto, cpu or cuda:N", device);
            return TF_ERR_INVALID_ARGUMENT;
        }
#ifdef TFD_HAVE_CUDA
        int count = tfd_cuda_device_count();
        if (ordinal >= count) {
            snprintf(msg, msg_len,
                     "no CUDA device %ld: %d CUDA device%s found; start with --device cpu or pick "
                     "cuda:0..cuda:%d",
                     ordinal, count, count == 1 ? "" : "s", count - 1);
            if (count == 0)
                snprintf(msg, msg_len,
                         "no CUDA device %ld: no CUDA GPU or driver found on this machine; start "
                         "with --device cpu",
                         ordinal);
            return TF_ERR_DEVICE;
        }
        memset(be, 0, sizeof *be);
        be->vt = &tfd_cuda_backend;
        be->caches = *caches;
        snprintf(resolved, resolved_len, "%ld", ordinal);
        return be->vt->open(be, (int)ordinal, msg, msg_len);
#else
        snprintf(msg, msg_len,
                 "this tenferrod was built without the CUDA backend (CUDA=0 or no nvcc): rebuild "
                 "with nvcc on PATH, or start with --device cpu");
        return TF_ERR_UNSUPPORTED;
#endif
    }
    snprintf(msg, msg_len, "bad device \"%s\": use auto, cpu or cuda:N", device);
    return TF_ERR_INVALID_ARGUMENT;
}
