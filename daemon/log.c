/*
 * Logging. Lines carry a syslog priority prefix ("<3>") so journald files them
 * at the right level, and a plain level word for a terminal reader. A line is
 * one line: whatever a message carries (a client's string, an errno text) is
 * escaped, so no input can start a forged line or send a terminal sequence.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/sanitize.h"
#include "daemon/log.h"

/* Set by the loop thread (start, SIGHUP), read by every thread that logs (CUDA workers too). */
static atomic_int current_level = TFD_LOG_INFO;

void tfd_log_set_level(tfd_log_level level) {
    atomic_store_explicit(&current_level, (int)level, memory_order_relaxed);
}

int tfd_log_parse_level(const char *name) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

void tfd_log(tfd_log_level level, const char *fmt, ...) {
    static const int priorities[] = {3, 4, 6, 7};
    static const char *const words[] = {"error", "warn", "info", "debug"};
    if ((int)level > atomic_load_explicit(&current_level, memory_order_relaxed)) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!tf__is_printable(line)) {
        char safe[4 * sizeof line];
        tf__sanitize_name(line, safe, sizeof safe);
        fprintf(stderr, "<%d>tenferrod %s: %s\n", priorities[level], words[level], safe);
        return;
    }
    fprintf(stderr, "<%d>tenferrod %s: %s\n", priorities[level], words[level], line);
}
