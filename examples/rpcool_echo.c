/* rpcool_echo.c - the smallest rpcool program: a server and a client (forked) and a no-op call.
 *
 *   cc -O2 -pthread -I. examples/rpcool_echo.c -o echo && ./echo [calls]
 *
 * The idea: a call passes a pointer into the connection's shared heap; nothing is serialised.
 * Here the argument is a string the client allocated in its heap; the handler reads it in place
 * and answers with a status only (no result allocation), which is RPCool's "no-op" RPC. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

enum { FN_NOOP = 1 };

static int noop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    return len ? ((const char *)arg)[0] : 0; /* read the argument where the client left it */
}

int main(int argc, char **argv)
{
    char *end = "";
    long calls = argc > 1 ? strtol(argv[1], &end, 10) : 100000;
    if (argc > 2 || *end || calls < 1 || calls > 1000000000L) {
        fprintf(stderr, "usage: %s [calls: 1..1000000000, default 100000]\n", argv[0]);
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "echo-%d", (int)getpid());
    rpcool_server *s;
    int r = rpcool_server_open(name, NULL, &s);
    if (r) { fprintf(stderr, "server: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_server_add_handler(s, FN_NOOP, noop, NULL, 0);
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0) { /* the client */
        rpcool_conn *c;
        if ((r = rpcool_connect(name, NULL, &c))) { fprintf(stderr, "client: %s\n", rpcool_strerror(r)); _exit(1); }
        char *msg = rpcool_strdup(c, "hello");
        printf("call(noop, \"%s\") -> %d ('%c')\n", msg, rpcool_call(c, FN_NOOP, msg, 6, NULL, NULL),
               rpcool_call(c, FN_NOOP, msg, 6, NULL, NULL));
        uint64_t t0 = rcp__now_ns();
        for (long i = 0; i < calls; i++) rpcool_call(c, FN_NOOP, msg, 6, NULL, NULL);
        double ns = (double)(rcp__now_ns() - t0) / (double)calls;
        printf("%ld no-op calls: %.0f ns per round trip, %.0f calls/s\n", calls, ns, 1e9 / ns);
        rpcool_free(c, msg);
        rpcool_disconnect(c);
        fflush(stdout);
        _exit(0);
    }
    rpcool_server_start(s, 1); /* after fork: a child never inherits running server threads */
    int st;
    waitpid(kid, &st, 0);
    rpcool_server_close(s);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
