// The floor of a 4 KiB fetch over TCP on loopback on this machine, without UCX or nam: a
// 64-byte request and a 4 KiB + 64-byte reply between two processes over one TCP
// connection (TCP_NODELAY), what a remote page fault over UCX TCP (`nam-bench farmem
// --workload fault-latency --transport tcp`) pays at least for its transfer.
//
//   gcc -O2 -o /tmp/tcp-floor bench/farmem-tcp-floor.c
//   /tmp/tcp-floor              # prints the medians, both ends polling and both blocking
//
// `poll`: both ends busy-poll non-blocking sockets (as UCX's progress loop does while it
// spins); `block`: both ends sleep in recv(2) (a wake-up per message).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 4000
#define REQUEST 64
#define REPLY (4096 + 64)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void receive(int fd, char *buf, int len, int poll) {
    for (int got = 0; got < len;) {
        ssize_t r = recv(fd, buf + got, len - got, poll ? MSG_DONTWAIT : 0);
        if (r > 0) got += r;
        else if (r == 0 || errno != EAGAIN) _exit(0); /* the peer closed: done */
    }
}

static void sendall(int fd, const char *buf, int len) {
    for (int sent = 0; sent < len;) {
        ssize_t r = send(fd, buf + sent, len - sent, 0);
        if (r > 0) sent += r;
        else if (errno != EAGAIN) { perror("send"); exit(1); }
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(int poll) {
    int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (bind(listener, (struct sockaddr *)&addr, len) || listen(listener, 1) ||
        getsockname(listener, (struct sockaddr *)&addr, &len)) { perror("listen"); exit(1); }
    static char buf[REPLY];
    fflush(stdout);
    pid_t server = fork();
    if (server == 0) {
        int c = accept(listener, NULL, NULL);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (;;) { receive(c, buf, REQUEST, poll); sendall(c, buf, REPLY); }
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&addr, len)) { perror("connect"); exit(1); }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    static double t[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double start = now_us();
        sendall(c, buf, REQUEST);
        receive(c, buf, REPLY, poll);
        t[i] = now_us() - start;
    }
    close(c);
    close(listener);
    waitpid(server, NULL, 0);
    qsort(t, ROUNDS, sizeof t[0], by_value);
    printf("tcp loopback %-5s 64 B request, 4 KiB reply: median %6.2f us, p99 %6.2f us\n", poll ? "poll" : "block",
           t[ROUNDS / 2], t[ROUNDS * 99 / 100]);
}

int main(void) {
    measure(1);
    measure(0);
    return 0;
}
