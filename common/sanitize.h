/*
 * Strings from clients made safe to show: a client's name reaches the
 * daemon's log (journald reads a leading "<N>" as a priority, a newline
 * starts a forged line), other clients' error messages and an operator's
 * terminal (escape sequences). Shared by the daemon and tenferroctl.
 */
#ifndef TENFERRO_COMMON_SANITIZE_H
#define TENFERRO_COMMON_SANITIZE_H

#include <stddef.h>

/*
 * Copies in to out (out_len bytes, at least 1) keeping printable ASCII
 * (0x20..0x7e) and writing every other byte as \xHH; a backslash becomes
 * \\. Stops at a byte that would not fit whole, so out is always a complete,
 * NUL-terminated, printable string.
 */
void tf__sanitize_name(const char *in, char *out, size_t out_len);

/* 1 when every byte of s is printable ASCII (what tf__sanitize_name leaves unchanged but for backslashes). */
int tf__is_printable(const char *s);

#endif
