/* Leveled logging to stderr (journald picks it up under systemd). */
#ifndef TENFERRO_DAEMON_LOG_H
#define TENFERRO_DAEMON_LOG_H

typedef enum tfd_log_level {
    TFD_LOG_ERROR = 0,
    TFD_LOG_WARN = 1,
    TFD_LOG_INFO = 2,
    TFD_LOG_DEBUG = 3,
} tfd_log_level;

/* Messages above this level are dropped. */
void tfd_log_set_level(tfd_log_level level);

/* Parses "error", "warn", "info" or "debug"; returns -1 for anything else. */
int tfd_log_parse_level(const char *name);

void tfd_log(tfd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
