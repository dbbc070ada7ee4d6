/*
 * The server: the loop, listener, backend, executor, reservation table, the
 * list of connections and the counters, and its lifecycle (server.c).
 */
#ifndef TENFERRO_DAEMON_SERVER_H
#define TENFERRO_DAEMON_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "daemon/backend/backend.h"
#include "daemon/busy-poll.h"
#include "daemon/heap-trim.h"
#include "daemon/counters.h"
#include "daemon/executor.h"
#include "daemon/options.h"
#include "daemon/prepared.h"
#include "daemon/reservation.h"
#include "tenferro/version.h"

#define TFD_STR2_(x) #x
#define TFD_STR_(x) TFD_STR2_(x)
#define TFD_VERSION_STRING \
    TFD_STR_(TF_VERSION_MAJOR) "." TFD_STR_(TF_VERSION_MINOR) "." TFD_STR_(TF_VERSION_PATCH)

typedef struct tfd_conn tfd_conn;

typedef struct tfd_server {
    uv_loop_t *loop;
    tfd_options opt;
    uv_pipe_t listener;
    uv_signal_t sig_term, sig_int, sig_hup;
    tfd_startup startup;
    tfd_backend backend;
    tfd_executor *ex;
    tfd_prepared_cache prepared; /* daemon-wide instances of prepared graphs (prepared.c) */
    tfd_reservation res;
    tfd_conn *conns;
    int n_conns;
    uint64_t next_client_id, next_session_id, next_batch_id;
    uint64_t start_ms;
    tfd_counters counters;
    int stopping;
    int draining;           /* admin drain: no new connections, exit when the last leaves */
    int exit_code;          /* what tfd_server_run returns: 0 after a clean stop */
    char device_error[512]; /* why the device was declared lost, "" while healthy */
    uv_timer_t watchdog;    /* bounds a shutdown after the device was lost */
    tfd_busy_poll busy_poll; /* the loop's and completion thread's polling window */
    tfd_heap_trim heap_trim; /* freed heap given back once clients have gone (heap-trim.c) */
    int mailboxes_polled;    /* the loop polls submission mailboxes now (mailbox.c) */
    struct tfd_offer *offers; /* tensors offered to other daemons (peer-offer.c) */
} tfd_server;

/* Monotonic milliseconds. */
uint64_t tfd_now_ms(void);

/* Server lifecycle (server.c). */
int tfd_server_run(const tfd_options *opt, const tfd_startup *startup);
/* Re-reads the configuration (SIGHUP); keeps the running one if the new one is bad. */
void tfd_server_reload(tfd_server *srv);
void tfd_server_begin_shutdown(tfd_server *srv);
/* Clients past their handshake whose connection is not closing. */
int tfd_server_client_count(const tfd_server *srv);
/* During an admin drain: starts the shutdown once no client past its handshake is left. */
void tfd_server_drain_check(tfd_server *srv);

#endif
