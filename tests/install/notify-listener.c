/*
 * A stand-in for systemd's notification socket, for tests/install/test-install.sh:
 *
 *   notify-listener PATH SECONDS WORD
 *
 * binds a Unix datagram socket at PATH (what $NOTIFY_SOCKET names), prints each
 * datagram it receives as one line per field, e.g. "READY=1" (flushed at once, so
 * a test can poll the output), and exits 0 once a datagram carried the field
 * WORD (e.g. STOPPING=1), or 1 when SECONDS pass without it. It removes PATH
 * when it exits.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: notify-listener PATH SECONDS WORD\n");
        return 2;
    }
    const char *path = argv[1], *word = argv[3];
    long long deadline = now_ms() + atoll(argv[2]) * 1000;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        fprintf(stderr, "notify-listener: path too long\n");
        return 2;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("notify-listener: bind");
        return 2;
    }
    int found = 0;
    while (!found) {
        long long left = deadline - now_ms();
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0) continue;
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0) continue;
        buf[n] = '\0';
        for (char *save, *field = strtok_r(buf, "\n", &save); field; field = strtok_r(NULL, "\n", &save)) {
            printf("%s\n", field);
            if (strcmp(field, word) == 0) found = 1;
        }
        fflush(stdout);
    }
    close(fd);
    unlink(path);
    if (!found) fprintf(stderr, "notify-listener: no %s within %s s\n", word, argv[2]);
    return found ? 0 : 1;
}
