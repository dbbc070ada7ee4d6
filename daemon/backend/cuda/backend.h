/*
 * What the rest of the daemon may ask of the CUDA backend besides its vtable.
 *
 * This header needs no CUDA headers, so registry.c, server.c or a status
 * handler can include it; it only exists in builds with TFD_HAVE_CUDA (the
 * functions are defined in cuda/backend.c). A context is "poisoned" once a
 * sticky error was seen (an illegal address or another kernel fault): CUDA
 * then fails every later call in this process, so the daemon should report
 * that to its clients and exit for systemd to restart it.
 */
#ifndef TENFERRO_DAEMON_CUDA_BACKEND_H
#define TENFERRO_DAEMON_CUDA_BACKEND_H

#include "daemon/backend/backend.h"

/* Number of CUDA devices visible, 0 when none or when the driver is missing. */
int tfd_cuda_device_count(void);

/* 1 once a sticky CUDA error has made this process's context unusable, else 0. */
int tfd_cuda_context_poisoned(void);

/* The first sticky error's message ("" while none); stable once set. */
const char *tfd_cuda_poison_reason(void);

/* The CUDA backend's vtable, named "cuda". */
extern const tfd_backend_vtable tfd_cuda_backend;

#endif
