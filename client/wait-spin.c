/*
 * How a client waits for a synchronize: it polls the socket for about as
 * long as the previous wait took, then sleeps. A steady loop (queue work,
 * synchronize, repeat) waits about as long each time, so the reply is taken
 * the moment it arrives rather than after a thread wake-up, which costs
 * tens of microseconds on virtual machines. This is what an in-process CUDA
 * program does by default (cudaDeviceScheduleAuto spins in
 * cudaDeviceSynchronize); a process that would rather sleep sets
 * TENFERRO_WAIT_SPIN_US=0 (docs/operations.md, "Client CPU while waiting").
 * Against the CPU backend the default is not to poll: there the daemon's
 * own threads do the work on the cores a polling client would take. Such a
 * client still polls a reply briefly (TF__REPLY_SPIN_US) while its waits are
 * short (an empty synchronize), and sleeps at once while they are several
 * times longer (TF__WAIT_SLEEP_AFTER_US): a poll at the start of a matrix
 * product only takes a core from it.
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/spin.h"

/* The longest poll of one wait unless TENFERRO_WAIT_SPIN_US says otherwise. */
#define WAIT_SPIN_DEFAULT_US 20000u
/* Polled beyond the previous wait's length, for its jitter. */
#define WAIT_SPIN_SLACK_US 100u

void tf__wait_spin_init(tf_client *c) {
    const char *env = getenv("TENFERRO_WAIT_SPIN_US");
    char *end = NULL;
    c->device_is_host = strcmp(c->device, "cpu") == 0 || strncmp(c->device, "cpu ", 4) == 0;
    unsigned long long us = c->device_is_host ? 0 : WAIT_SPIN_DEFAULT_US;
    if (env && env[0]) {
        unsigned long long v = strtoull(env, &end, 10);
        if (end && *end == '\0') us = v > 10000000ull ? 10000000ull : v;
    }
    c->wait_spin_max_ns = us * 1000u;
}

uint64_t tf__wait_spin_begin(tf_client *c) {
    const uint64_t now = tf__now_ns();
    if (c->wait_spin_max_ns) {
        uint64_t budget = c->last_wait_ns + c->last_wait_ns / 4 + WAIT_SPIN_SLACK_US * 1000u;
        if (budget > c->wait_spin_max_ns) budget = c->wait_spin_max_ns;
        c->spin_until_ns = now + budget;
    } else {
        c->wait_sleeps = c->last_wait_ns > (uint64_t)TF__WAIT_SLEEP_AFTER_US * 1000u;
    }
    return now;
}

void tf__wait_spin_end(tf_client *c, uint64_t started_ns) {
    c->last_wait_ns = tf__now_ns() - started_ns;
    c->spin_until_ns = 0;
    c->wait_sleeps = 0;
}
