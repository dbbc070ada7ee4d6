/*
 * Backend selection: maps --device (auto, cpu, cuda:N) to a backend and opens
 * it. `auto` prefers a CUDA GPU when the backend is built in and a device is
 * present, and says which it chose.
 */
#ifndef TENFERRO_DAEMON_BACKEND_REGISTRY_H
#define TENFERRO_DAEMON_BACKEND_REGISTRY_H

#include "daemon/backend/backend.h"

/*
 * Opens the backend named by `device` into *be, with the cache settings
 * `caches`. On success writes the
 * resolved device name ("cpu", "0" for cuda:0) into resolved. On failure
 * returns a typed status and a message that says what was found and what to do.
 */
tf_status tfd_backend_select(const char *device, const tfd_cache_config *caches, tfd_backend *be,
                             char *resolved, size_t resolved_len, char *msg, size_t msg_len);

#endif
