/* Escaping of client-supplied strings (sanitize.h). */
#include <stdio.h>

#include "common/sanitize.h"

void tf__sanitize_name(const char *in, char *out, size_t out_len) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char esc[5];
        size_t n;
        if (*p == '\\') {
            esc[0] = esc[1] = '\\';
            n = 2;
        } else if (*p >= 0x20 && *p < 0x7f) {
            esc[0] = (char)*p;
            n = 1;
        } else {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            n = 4;
        }
        if (o + n >= out_len) break;
        for (size_t i = 0; i < n; i++) out[o++] = esc[i];
    }
    out[o] = '\0';
}

int tf__is_printable(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p >= 0x7f) return 0;
    return 1;
}
