/*
 * Sessions: the two ways to run operations.
 *
 * Scoped: tf_with_session(client, fn, arg) runs fn(view, arg) as one burst.
 * The operations fn queues travel in one message when fn returns, the daemon
 * admits the burst, runs it and answers when it has completed. An empty burst
 * costs one round trip.
 *
 * Held: tf_session_open reserves the device's execution domain for a whole
 * stage. tf_session_with runs callbacks on the held binding (operations are
 * queued locally, no round trip), tf_session_submit hands them to the daemon
 * without waiting for the device, tf_session_synchronize also waits and reports
 * device failures, tf_session_close submits what is left, releases the
 * reservation and reports the counters, and tf_session_release is the drop
 * path: release without submitting, cannot fail.
 *
 * docs/sessions.md has the full table of who may enter when.
 */
#ifndef TENFERRO_SESSION_H
#define TENFERRO_SESSION_H

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_session tf_session;
typedef struct tf_view tf_view;

/* A session callback: queue operations on `view`; its result is returned unchanged. */
typedef tf_status (*tf_session_fn)(tf_view *view, void *arg);

/*
 * Scoped entry. Returns TF_ERR_REENTERED without running fn when called from
 * inside a session callback or while this client holds a session. When the
 * domain is held by another client, the burst is refused (TF_ERR_CONTENDED) or
 * queued (daemon policy `wait`, TF_ERR_TIMEOUT at the deadline); a refused
 * burst runs nothing and its output handles are invalid. If fn fails, its
 * status is returned unchanged (the operations it queued before failing still run).
 */
TF_EXTERN tf_status tf_with_session(tf_client *client, tf_session_fn fn, void *arg);

/* Held entry: reserves the execution domain and captures the binding. Never waits under `reject`. */
TF_EXTERN tf_status tf_session_open(tf_client *client, tf_session **session);

/* How one entry asks to be admitted while another client holds the execution domain. */
typedef enum tf_admission_policy {
    TF_ADMISSION_DAEMON = 0, /* the daemon's [admission] policy and deadline */
    TF_ADMISSION_REJECT = 1, /* TF_ERR_CONTENDED at once */
    TF_ADMISSION_WAIT = 2,   /* queue, up to deadline_ms (0: the daemon's deadline) */
} tf_admission_policy;

/*
 * Per-call admission (docs/admission.md, "Per call"). The daemon's settings
 * bound it: a call may ask not to wait, or to wait less than the daemon's
 * deadline, never longer; against a daemon of the reject policy it cannot
 * wait at all (TF_ADMISSION_WAIT then refuses as TF_ADMISSION_REJECT does).
 * Refusals are typed as for the plain calls: TF_ERR_CONTENDED and
 * TF_ERR_TIMEOUT both name the holder.
 */
typedef struct tf_session_options {
    tf_admission_policy policy;
    uint64_t deadline_ms;
} tf_session_options;

/* tf_session_open and tf_with_session with admission options (NULL: as the plain calls). */
TF_EXTERN tf_status tf_session_open_opts(tf_client *client, const tf_session_options *options,
                                         tf_session **session);
TF_EXTERN tf_status tf_with_session_opts(tf_client *client, const tf_session_options *options,
                                         tf_session_fn fn, void *arg);

/* Runs fn(view, arg) on the held binding; counts one held operation. */
TF_EXTERN tf_status tf_session_with(tf_session *session, tf_session_fn fn, void *arg);

/* Submission boundary: validate and enqueue queued operations; never waits for the device. */
TF_EXTERN tf_status tf_session_submit(tf_session *session);

/* Submit plus a wait for the bound stream; reports device failures. */
TF_EXTERN tf_status tf_session_synchronize(tf_session *session);

/* The session's counters so far. */
TF_EXTERN tf_status tf_session_stats(const tf_session *session, tf_session_counters *stats);

/*
 * How often this client waited for the device's results while the session
 * was open: its synchronizes, and the blocking downloads and truncation
 * report reads (tf_truncation_report_read) it made between them. A loop that
 * must not wait per step reads it to prove so (docs/linalg.md).
 */
TF_EXTERN uint64_t tf_session_host_waits(const tf_session *session);

/*
 * Submits what is queued, releases the reservation and the binding, writes the
 * final counters to *stats (may be NULL) and frees the session, whatever the
 * result. A submission failure is returned, and the reservation is released anyway.
 */
TF_EXTERN tf_status tf_session_close(tf_session *session, tf_session_counters *stats);

/* Drop path: releases the reservation without submitting or reporting; frees the session. */
TF_EXTERN void tf_session_release(tf_session *session);

/*
 * The index (inside the last submission) of the operation that stopped it, or
 * -1 when the last submission of this client did not stop at an operation.
 */
TF_EXTERN int64_t tf_client_failed_index(const tf_client *client);

#ifdef __cplusplus
}
#endif
#endif
