/*
 * What polling loops on both sides of the shared pages need: the monotonic
 * clock in nanoseconds and one relaxing instruction per turn. Inline, so a
 * loop that polls a word pays no call for either.
 */
#ifndef TENFERRO_COMMON_SPIN_H
#define TENFERRO_COMMON_SPIN_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
static inline uint64_t tf__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One relaxing instruction for a polling loop. */
static inline void tf__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
