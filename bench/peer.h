/* SPDX-License-Identifier: MIT */
/* peer.h - what every comparison peer under bench/ shares: options, process layout,
   the timed loop, and socket helpers. Header-only, all functions static.

   perftest conventions: a tool started without an address is the server (it serves one
   client, then exits); with an address it is the client and prints the results.
   -f runs both in one command: the server in a forked child pinned to CPU 1, the client
   in the parent pinned to CPU 0 (so a busy-polling server never steals the client's
   core); bench/bench_peers.sh and hyperfine use -f. -1 puts both on CPU 0: for peers
   that block in the kernel this avoids a cross-CPU wakeup, which on a VM whose idle
   vCPUs halt costs tens of microseconds.

   Usage of every peer:  server: TOOL [-a ADDR]   client: TOOL [opts] ADDR   both: TOOL -f
   Common options:  -n ITERS (timed round trips, default 100000)
                    -w WARMUP (untimed round trips before, default 10000)
                    -s SIZE (payload bytes each way, default 64)
                    -f (fork server + client)   -P (do not pin CPUs)
                    -T SECONDS (abort if still running, default 300) */
#ifndef BENCH_PEER_H
#define BENCH_PEER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hist.h"

#define PEER_COMMON_OPTS "n:w:s:fP1T:a:"
#define PEER_COMMON_HELP \
    "  -n ITERS   timed round trips (default 100000)\n" \
    "  -w WARMUP  untimed round trips first (default 10000)\n" \
    "  -s SIZE    payload bytes each way (default 64)\n" \
    "  -f         run server (child, CPU 1) and client (parent, CPU 0) in one command\n" \
    "  -P         do not pin CPUs\n" \
    "  -1         pin server and client both to CPU 0 (results named NAME@cpu0)\n" \
    "  -T SECS    abort after SECS seconds (default 300)\n" \
    "  -a ADDR    address the server listens on (default: the tool's own)\n"

struct peer_opts {
    long iters, warmup;
    size_t size;
    int fork_mode, pin, same_cpu, timeout;
    const char *addr;   /* client mode when set (the positional argument) */
    const char *listen; /* -a: server address instead of the tool's default */
};

static inline void peer_opts_default(struct peer_opts *o)
{
    o->iters = 100000;
    o->warmup = 10000;
    o->size = 64;
    o->fork_mode = 0;
    o->pin = 1;
    o->same_cpu = 0;
    o->timeout = 300;
    o->addr = NULL;
    o->listen = NULL;
}

/* Returns 1 when c was one of PEER_COMMON_OPTS. */
static inline int peer_opt(struct peer_opts *o, int c, const char *arg)
{
    switch (c) {
    case 'n': o->iters = atol(arg); return 1;
    case 'w': o->warmup = atol(arg); return 1;
    case 's': o->size = (size_t)atol(arg); return 1;
    case 'f': o->fork_mode = 1; return 1;
    case 'P': o->pin = 0; return 1;
    case '1': o->same_cpu = 1; return 1;
    case 'T': o->timeout = atoi(arg); return 1;
    case 'a': o->listen = arg; return 1;
    }
    return 0;
}

/* A tool's own option besides the common ones: -LETTER ARG puts ARG in *arg when arg is
   set, else -LETTER (no argument) sets *flag to 1. */
struct peer_own_opt {
    char letter;
    const char **arg;
    int *flag;
};

/* The command line of a peer: defaults, the common options, the tool's own option (own may
   be NULL), -h, then the address if one is given (client mode). On -h or a bad option prints
   "usage: TOOL USAGE", the common options and more_help (may be NULL), and returns 2;
   else 0. */
static inline int peer_parse(struct peer_opts *o, int argc, char **argv,
                             const struct peer_own_opt *own, const char *usage,
                             const char *more_help)
{
    char optstr[sizeof PEER_COMMON_OPTS + 3] = PEER_COMMON_OPTS;
    size_t n = sizeof PEER_COMMON_OPTS - 1;
    if (own) {
        optstr[n++] = own->letter;
        if (own->arg)
            optstr[n++] = ':';
    }
    optstr[n++] = 'h';
    optstr[n] = 0;
    peer_opts_default(o);
    int c;
    while ((c = getopt(argc, argv, optstr)) != -1) {
        if (peer_opt(o, c, optarg))
            continue;
        if (own && c == own->letter) {
            if (own->arg)
                *own->arg = optarg;
            else
                *own->flag = 1;
            continue;
        }
        fprintf(stderr, "usage: %s %s\n" PEER_COMMON_HELP "%s", argv[0], usage,
                more_help ? more_help : "");
        return 2;
    }
    o->addr = optind < argc ? argv[optind] : NULL;
    return 0;
}

/* 0 when -s is within [min, max]; else prints msg and returns 2. */
static inline int peer_check_size(const struct peer_opts *o, size_t min, size_t max,
                                  const char *msg)
{
    if (o->size >= min && o->size <= max)
        return 0;
    fprintf(stderr, "%s\n", msg);
    return 2;
}

/* The next number of a list like "64,256,1024": reads it at *p and moves *p past it and its
   comma. Returns 0, or -1 when *p does not start with a number. */
static inline int peer_list_next(const char **p, unsigned long long *v)
{
    char *end;
    *v = strtoull(*p, &end, 10);
    if (end == *p)
        return -1;
    *p = *end == ',' ? end + 1 : end;
    return 0;
}

static inline void peer_pin(const struct peer_opts *o, int cpu)
{
    if (!o->pin || sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return;
    if (o->same_cpu)
        cpu = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        perror("sched_setaffinity");
}

/* Server and client entry points get the options and the address to use. */
typedef int (*peer_fn)(const struct peer_opts *o, const char *addr, void *ctx);

/* Runs server, client or both (-f) as the options say; returns the exit status. */
static inline int peer_run(const struct peer_opts *o, const char *default_addr,
                           peer_fn server, peer_fn client, void *ctx)
{
    alarm((unsigned)o->timeout);
    if (o->listen)
        default_addr = o->listen;
    if (!o->fork_mode) {
        if (o->addr)
            return client(o, o->addr, ctx);
        return server(o, default_addr, ctx);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        /* a spinning server must not outlive a client that died or hung */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        alarm((unsigned)o->timeout);
        if (getppid() == 1)
            _exit(1);
        peer_pin(o, 1);
        exit(server(o, default_addr, ctx) ? 1 : 0);   /* exit: libraries deregister (iceoryx) */
    }
    peer_pin(o, 0);
    int rc = client(o, o->addr ? o->addr : default_addr, ctx);
    int st = 0;
    if (rc)
        kill(pid, SIGTERM);   /* a failed client must not leave its server waiting */
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "server exited abnormally (status 0x%x)\n", st);
        rc = rc ? rc : 1;
    }
    return rc ? 1 : 0;
}

/* The end of a client: its socket closed and its buffer freed; the exit status for rc. */
static inline int peer_client_done(int fd, void *buf, int rc)
{
    close(fd);
    free(buf);
    return rc ? 1 : 0;
}

/* The main of a peer whose own option is a list (-LETTER LIST, its default in *list): the
   options parsed, then peer_run with the UNIX socket /tmp/rpcool-bench-NAME.PID by default. */
static inline int peer_main_list(int argc, char **argv, char letter, const char **list,
                                 const char *usage, const char *name, peer_fn server,
                                 peer_fn client, void *ctx)
{
    struct peer_opts o;
    struct peer_own_opt own = {letter, list, NULL};
    if (peer_parse(&o, argc, argv, &own, usage, NULL))
        return 2;
    char path[108];
    snprintf(path, sizeof path, "/tmp/rpcool-bench-%s.%d", name, (int)getpid());
    return peer_run(&o, path, server, client, ctx);
}

/* One round trip; returns 0 or -1 (the loop stops and the run fails). */
typedef int (*peer_op)(void *ctx, long i);

/* Warmup, then o->iters timed round trips; prints the result under name. */
static inline int peer_measure(const struct peer_opts *o, const char *name, peer_op op,
                               void *ctx)
{
    hist h;
    if (hist_init(&h, (size_t)o->iters))
        return -1;
    for (long i = 0; i < o->warmup; i++)
        if (op(ctx, i)) {
            fprintf(stderr, "%s: warmup round trip %ld failed\n", name, i);
            hist_free(&h);
            return -1;
        }
    uint64_t t0 = hist_now(), prev = t0;
    for (long i = 0; i < o->iters; i++) {
        if (op(ctx, o->warmup + i)) {
            fprintf(stderr, "%s: round trip %ld failed\n", name, i);
            hist_free(&h);
            return -1;
        }
        uint64_t now = hist_now();
        hist_add(&h, now - prev);
        prev = now;
    }
    char label[160];
    snprintf(label, sizeof label, "%s%s", name, o->same_cpu ? "@cpu0" : "");
    hist_print(&h, label, hist_ops_per_s(h.n, prev - t0));
    hist_free(&h);
    return 0;
}

/* ---- sockets ---- */

static inline int peer_write_full(int fd, const void *buf, size_t len)
{
    const char *p = (const char *)buf;
    while (len) {
        ssize_t r = write(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Returns 0, -1 on error, 1 on end of stream before any byte. */
static inline int peer_read_full(int fd, void *buf, size_t len)
{
    char *p = (char *)buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return got ? -1 : 1;
        if (r < 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static inline int peer_unix_addr(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path) {
        fprintf(stderr, "socket path too long: %s\n", path);
        return -1;
    }
    strcpy(sa->sun_path, path);
    return 0;
}

/* Listens on a UNIX socket path (replacing a stale one) and accepts one client. */
static inline int peer_unix_accept(const char *path, int type)
{
    struct sockaddr_un sa;
    if (peer_unix_addr(&sa, path))
        return -1;
    int ls = socket(AF_UNIX, type, 0);
    if (ls < 0) {
        perror("socket");
        return -1;
    }
    unlink(path);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1)) {
        perror(path);
        close(ls);
        return -1;
    }
    int fd = accept(ls, NULL, NULL);
    if (fd < 0)
        perror("accept");
    close(ls);
    unlink(path);
    return fd;
}

/* Connects a new socket of the family of sa (a stream, or type for AF_UNIX) to sa, retrying
   for up to 10 s while the server starts (its socket not there yet, or refusing); the socket, or
   -1 after a line on stderr naming what (its path or address). */
static inline int peer_connect_retry(const struct sockaddr *sa, socklen_t len, int type,
                                     const char *what)
{
    for (int tries = 0; tries < 10000; tries++) {
        int fd = socket(sa->sa_family, type, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, sa, len) == 0)
            return fd;
        close(fd);
        if (errno != ENOENT && errno != ECONNREFUSED) {
            perror(what);
            return -1;
        }
        usleep(1000);
    }
    fprintf(stderr, "%s: no server\n", what);
    return -1;
}

static inline int peer_unix_connect(const char *path, int type)
{
    struct sockaddr_un sa;
    if (peer_unix_addr(&sa, path))
        return -1;
    return peer_connect_retry((struct sockaddr *)&sa, sizeof sa, type, path);
}

static inline void peer_tcp_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* "HOST:PORT" or "HOST" (port 18515, perftest's default) -> sockaddr_in. */
static inline int peer_tcp_addr(struct sockaddr_in *sa, const char *addr)
{
    char host[256];
    int port = 18515;
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon) {
        *colon = 0;
        port = atoi(colon + 1);
    }
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", host);
        return -1;
    }
    return 0;
}

static inline int peer_tcp_accept(const char *addr)
{
    struct sockaddr_in sa;
    if (peer_tcp_addr(&sa, addr))
        return -1;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (ls < 0)
        return -1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1)) {
        perror(addr);
        close(ls);
        return -1;
    }
    int fd = accept(ls, NULL, NULL);
    close(ls);
    if (fd >= 0)
        peer_tcp_nodelay(fd);
    return fd;
}

static inline int peer_tcp_connect(const char *addr)
{
    struct sockaddr_in sa;
    if (peer_tcp_addr(&sa, addr))
        return -1;
    int fd = peer_connect_retry((struct sockaddr *)&sa, sizeof sa, SOCK_STREAM, addr);
    if (fd >= 0)
        peer_tcp_nodelay(fd);
    return fd;
}

#endif /* BENCH_PEER_H */
