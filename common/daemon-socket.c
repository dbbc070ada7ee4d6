/* The names of daemon sockets in a runtime directory (daemon-socket.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/daemon-socket.h"

#define PREFIX "tenferrod-"
#define SUFFIX ".sock"

int tf__device_socket_name(const char *device, char *buf, size_t len) {
    const char *n = strncmp(device, "cuda:", 5) == 0 ? device + 5 : device;
    int written;
    if (strcmp(device, "cpu") == 0) {
        written = snprintf(buf, len, PREFIX "cpu" SUFFIX);
    } else {
        /* Four digits at most: atoi cannot overflow, and "cuda:01" is cuda:1's socket. */
        if (!n[0] || strlen(n) > 4 || strspn(n, "0123456789") != strlen(n)) return -1;
        written = snprintf(buf, len, PREFIX "%d" SUFFIX, atoi(n));
    }
    return written > 0 && (size_t)written < len ? 0 : -1;
}

int tf__daemon_socket_name_valid(const char *file_name) {
    const size_t prefix = strlen(PREFIX), suffix = strlen(SUFFIX), total = strlen(file_name);
    if (total <= prefix + suffix || strncmp(file_name, PREFIX, prefix) != 0 ||
        strcmp(file_name + total - suffix, SUFFIX) != 0)
        return 0;
    const char *name = file_name + prefix;
    const size_t name_len = total - prefix - suffix;
    if (name[0] == '.') return 0;
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789:_.-";
    for (size_t i = 0; i < name_len; i++)
        if (!strchr(allowed, name[i])) return 0;
    return 1;
}
