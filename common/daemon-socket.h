/*
 * The names of daemon sockets in a runtime directory, shared by the client
 * library (tf_connect_device) and the daemon (the one kind of path a copy
 * take may reach, docs/multi-gpu.md): `tenferrod-<name>.sock`, one per
 * device, `tenferrod-N.sock` for cuda:N and `tenferrod-cpu.sock`.
 */
#ifndef TENFERRO_COMMON_DAEMON_SOCKET_H
#define TENFERRO_COMMON_DAEMON_SOCKET_H

#include <stddef.h>

/*
 * The socket file name of a device's daemon ("cuda:1" and "1" give
 * "tenferrod-1.sock", "cpu" gives "tenferrod-cpu.sock") into buf; 0, or -1
 * when device names no device (or buf is too small).
 */
int tf__device_socket_name(const char *device, char *buf, size_t len);

/*
 * 1 when file_name is a daemon socket's name: `tenferrod-<name>.sock`, the
 * name of [A-Za-z0-9:_.-] only and not starting with '.', so it is one path
 * component that can be neither "." nor "..".
 */
int tf__daemon_socket_name_valid(const char *file_name);

#endif
