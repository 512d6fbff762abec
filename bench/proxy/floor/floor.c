/* floor: the least an epoll reverse proxy can do per request, as a yardstick.
 *
 *   floor LISTEN_PORT ORIGIN_PORT [PROCESSES]
 *
 * A TCP relay on 127.0.0.1: one process per CPU (or PROCESSES), each with its own SO_REUSEPORT
 * listener and epoll loop. Each client connection gets its own origin connection, opened when the
 * client connects and kept for its life; bytes read from one side are written to the other as
 * they are, with no parsing, no pool, no timers, no headers added. A keep-alive HTTP/1.1 request
 * then costs what any epoll proxy must pay at least: a recv from the client, a send to the origin,
 * a recv from the origin, a send to the client, and a share of an epoll_wait. proxy_peers.py runs
 * it as the `floor` row, so that a proxy's CPU per request can be read against that floor in the
 * same run. It is not a proxy anyone should deploy: its sends block (a slow reader stalls its
 * whole process), which costs nothing when every write fits the socket buffer, as in `fast`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FD 65536
static int peer[MAX_FD]; /* descriptor -> the other side of its pair, or -1 */

static int listener(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4096)) {
        perror("floor: listen");
        exit(1);
    }
    return fd;
}

static int origin(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) || fd >= MAX_FD) { close(fd); return -1; }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void drop(int ep, int fd) {
    int p = peer[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    peer[fd] = -1;
    if (p >= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, p, NULL); close(p); peer[p] = -1; }
}

static void serve(int lfd, int up) {
    static char buf[65536];
    struct epoll_event evs[512], ev = {.events = EPOLLIN, .data.fd = lfd};
    int ep = epoll_create1(0), one = 1;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev)) { perror("floor: epoll"); exit(1); }
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, 0)) >= 0) {
                    int o = c < MAX_FD ? origin(up) : -1;
                    if (o < 0) { close(c); continue; }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    peer[c] = o; peer[o] = c;
                    struct epoll_event e1 = {.events = EPOLLIN, .data.fd = c}, e2 = {.events = EPOLLIN, .data.fd = o};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e1);
                    epoll_ctl(ep, EPOLL_CTL_ADD, o, &e2);
                }
                continue;
            }
            if (peer[fd] < 0) continue; /* dropped earlier in this batch */
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0 || send(peer[fd], buf, (size_t)r, MSG_NOSIGNAL) != r) drop(ep, fd); /* blocking: all or error */
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: floor LISTEN_PORT ORIGIN_PORT [PROCESSES]\n"); return 2; }
    int port = atoi(argv[1]), up = atoi(argv[2]);
    long procs = argc > 3 ? atol(argv[3]) : sysconf(_SC_NPROCESSORS_ONLN);
    if (port <= 0 || up <= 0 || procs < 1 || procs > 1024) { fprintf(stderr, "floor: bad arguments\n"); return 2; }
    memset(peer, -1, sizeof peer);
    signal(SIGPIPE, SIG_IGN);
    for (long i = 0; i < procs; i++) {
        int lfd = listener(port); /* one listener per process: the kernel spreads connections */
        pid_t pid = fork();
        if (pid == 0) serve(lfd, up);
        if (pid < 0) { perror("floor: fork"); return 1; }
        close(lfd);
    }
    while (wait(NULL) > 0) {}
    return 0;
}
