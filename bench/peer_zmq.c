/* SPDX-License-Identifier: MIT */
/* peer_zmq - ZeroMQ REQ/REP round trip over ipc:// (a UNIX socket under libzmq's I/O
   thread): the client sends SIZE bytes, the server replies with the same bytes.
   An empty request tells the server to stop.

   server:  peer_zmq [-a ipc:///PATH]   client: peer_zmq ENDPOINT   both: peer_zmq -f */
// LIBS: -lzmq
#include "peer.h"   /* first: it defines _GNU_SOURCE */

#include <zmq.h>

struct zmq_ctx_s {
    void *zctx, *sock;
    char *buf;
    size_t size;
};

/* A context and a socket of c: a REP socket bound to addr, or a REQ socket connected to it. */
static int zsock_open(struct zmq_ctx_s *c, int type, const char *addr)
{
    int bind = type == ZMQ_REP;
    c->zctx = zmq_ctx_new();
    c->sock = zmq_socket(c->zctx, type);
    if (!c->sock || (bind ? zmq_bind(c->sock, addr) : zmq_connect(c->sock, addr))) {
        fprintf(stderr, "%s %s: %s\n", bind ? "zmq_bind" : "zmq_connect", addr,
                zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

static void zsock_close(struct zmq_ctx_s *c)
{
    zmq_close(c->sock);
    zmq_ctx_term(c->zctx);
}

static int server(const struct peer_opts *o, const char *addr, void *vctx)
{
    (void)o;
    struct zmq_ctx_s *c = (struct zmq_ctx_s *)vctx;
    if (zsock_open(c, ZMQ_REP, addr))
        return 1;
    size_t cap = 1u << 20;
    char *buf = (char *)malloc(cap);
    int rc = 1;
    for (;;) {
        int n = zmq_recv(c->sock, buf, cap, 0);
        if (n < 0 || (size_t)n > cap)
            break;
        if (zmq_send(c->sock, buf, (size_t)n, 0) != n)
            break;
        if (n == 0) {
            rc = 0;
            break;
        }
    }
    free(buf);
    zsock_close(c);
    if (!strncmp(addr, "ipc://", 6))
        unlink(addr + 6);
    return rc;
}

static int round_trip(void *vctx, long i)
{
    struct zmq_ctx_s *c = (struct zmq_ctx_s *)vctx;
    c->buf[0] = (char)i;
    if (zmq_send(c->sock, c->buf, c->size, 0) != (int)c->size)
        return -1;
    if (zmq_recv(c->sock, c->buf, c->size, 0) != (int)c->size)
        return -1;
    return c->buf[0] == (char)i ? 0 : -1;
}

static int client(const struct peer_opts *o, const char *addr, void *vctx)
{
    struct zmq_ctx_s *c = (struct zmq_ctx_s *)vctx;
    if (zsock_open(c, ZMQ_REQ, addr))
        return 1;
    c->size = o->size;
    c->buf = (char *)calloc(1, c->size);
    char name[64];
    snprintf(name, sizeof name, "zmq_ipc/%zu", o->size);
    int rc = peer_measure(o, name, round_trip, c);
    char stop;
    if (zmq_send(c->sock, "", 0, 0) != 0 || zmq_recv(c->sock, &stop, 1, 0) != 0)
        rc = -1;
    free(c->buf);
    zsock_close(c);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct peer_opts o;
    if (peer_parse(&o, argc, argv, NULL, "[options] [ENDPOINT]", NULL) ||
        peer_check_size(&o, 1, 1u << 20, "-s must be 1..1048576"))
        return 2;
    char ep[128];
    snprintf(ep, sizeof ep, "ipc:///tmp/rpcool-bench-zmq.%d", (int)getpid());
    struct zmq_ctx_s ctx = {NULL, NULL, NULL, 0};
    return peer_run(&o, ep, server, client, &ctx);
}
