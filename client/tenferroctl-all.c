/*
 * tenferroctl status --all: every daemon of this host, one per device, each
 * listening on DIR/tenferrod-INSTANCE.sock (DIR as the client library picks
 * it: $TENFERRO_RUNTIME_DIR or /run/tenferro). The sockets are found by
 * listing DIR, each daemon is asked for its report through the library
 * (tf_daemon_status_get), and the daemons are printed in instance order:
 * numeric ordinals first, by value, then cpu, then any other name. A socket
 * nobody answers on (a daemon that died and left its socket file, one that
 * is draining or refuses this user) is a row of its own, and makes the exit
 * status 1 once every other daemon has been printed.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "client/tenferroctl.h"

#define SOCKET_PREFIX "tenferrod-"
#define SOCKET_SUFFIX ".sock"

/* The instance a directory entry is the socket of, into buf; 0 when the name is not a daemon's. */
static int instance_of(const char *file_name, char *buf, size_t len) {
    size_t name_len = strlen(file_name);
    size_t prefix = strlen(SOCKET_PREFIX), suffix = strlen(SOCKET_SUFFIX);
    if (name_len <= prefix + suffix || strncmp(file_name, SOCKET_PREFIX, prefix) != 0 ||
        strcmp(file_name + name_len - suffix, SOCKET_SUFFIX) != 0)
        return 0;
    size_t instance_len = name_len - prefix - suffix;
    if (instance_len >= len) return 0;
    memcpy(buf, file_name + prefix, instance_len);
    buf[instance_len] = '\0';
    return 1;
}

/* Where an instance sorts: numeric ordinals (cuda:N), then the CPU's daemon, then other names. */
static int instance_rank(const char *instance) {
    if (strspn(instance, "0123456789") == strlen(instance)) return 0;
    return strcmp(instance, "cpu") == 0 ? 1 : 2;
}

/* qsort order of entries: by rank, ordinals by value (of any length), ties and names by bytes. */
static int compare_entries(const void *a, const void *b) {
    const char *x = ((const tfctl_daemon_entry *)a)->instance;
    const char *y = ((const tfctl_daemon_entry *)b)->instance;
    int rank_x = instance_rank(x), rank_y = instance_rank(y);
    if (rank_x != rank_y) return rank_x < rank_y ? -1 : 1;
    if (rank_x == 0) {
        const char *digits_x = x + strspn(x, "0"), *digits_y = y + strspn(y, "0");
        size_t len_x = strlen(digits_x), len_y = strlen(digits_y);
        if (len_x != len_y) return len_x < len_y ? -1 : 1;
        int by_value = strcmp(digits_x, digits_y);
        if (by_value) return by_value;
    }
    return strcmp(x, y);
}

/*
 * Lists the daemon sockets of dir into *out (n entries, caller frees);
 * 0 on success, -1 with errno set when dir cannot be read.
 */
static int find_sockets(const char *dir, tfctl_daemon_entry **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    tfctl_daemon_entry *entries = NULL;
    size_t count = 0, capacity = 0;
    struct dirent *de;
    int failed = 0;
    while (!failed && (errno = 0, de = readdir(d)) != NULL) {
        char instance[sizeof entries->instance];
        if (!instance_of(de->d_name, instance, sizeof instance)) continue;
        if (count == capacity) {
            size_t grown = capacity ? capacity * 2 : 8;
            tfctl_daemon_entry *p = realloc(entries, grown * sizeof *p);
            if (!p) {
                failed = ENOMEM;
                break;
            }
            entries = p;
            capacity = grown;
        }
        tfctl_daemon_entry *e = &entries[count++];
        memset(e, 0, sizeof *e);
        memcpy(e->instance, instance, sizeof instance);
        if (snprintf(e->socket, sizeof e->socket, "%s/%s", dir, de->d_name) >=
            (int)sizeof e->socket)
            count--; /* a path this long could not be connected to either */
    }
    if (!failed && errno) failed = errno;
    closedir(d);
    if (failed) {
        free(entries);
        errno = failed;
        return -1;
    }
    qsort(entries, count, sizeof *entries, compare_entries);
    *out = entries;
    *n = count;
    return 0;
}

/*
 * Records why a daemon did not answer, for its row: the library's message,
 * less the socket path the row shows already and the hint meant for a client
 * looking for one daemon ("... (is the daemon running? set TENFERRO_SOCKET ...)").
 */
static void note_unreachable(tfctl_daemon_entry *e, const char *message) {
    char prefix[sizeof e->socket + 64];
    snprintf(prefix, sizeof prefix, "cannot connect to tenferrod at %s: ", e->socket);
    if (strncmp(message, prefix, strlen(prefix)) == 0) message += strlen(prefix);
    if (!message[0]) message = "no answer";
    const char *hint = strstr(message, " (is the daemon running?");
    int keep = hint ? (int)(hint - message) : (int)strlen(message);
    snprintf(e->unreachable, sizeof e->unreachable, "%.*s", keep, message);
}

/* Connects to one daemon and fills its report, or the reason it gave none. */
static void ask_daemon(tfctl_daemon_entry *e) {
    tf_client *c = NULL;
    tf_status st = tf_connect(e->socket, &c);
    if (st == TF_OK) {
        e->own_client_id = tf_client_id(c);
        st = tf_daemon_status_get(c, &e->status);
    }
    if (st != TF_OK) note_unreachable(e, c ? tf_client_last_error(c) : tf_strerror(st));
    tf_disconnect(c);
}

int tfctl_status_all(int json) {
    const char *dir = tf__runtime_dir();
    tfctl_daemon_entry *entries = NULL;
    size_t n = 0;
    if (find_sockets(dir, &entries, &n) != 0) {
        if (json) printf("[]\n");
        fprintf(stderr, "tenferroctl: cannot list %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int unreachable = 0;
    for (size_t i = 0; i < n; i++) {
        ask_daemon(&entries[i]);
        if (!entries[i].status) unreachable++;
    }
    if (json)
        tfctl_print_all_json(stdout, entries, n);
    else if (n > 0)
        tfctl_print_all_text(stdout, entries, n);
    if (n == 0)
        fprintf(stderr, "tenferroctl: no daemon sockets (%s*%s) in %s\n", SOCKET_PREFIX,
                SOCKET_SUFFIX, dir);
    for (size_t i = 0; i < n; i++) tf_daemon_status_free(entries[i].status);
    free(entries);
    return n == 0 || unreachable > 0 ? 1 : 0;
}
