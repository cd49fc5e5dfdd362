/* SPDX-License-Identifier: MIT */
/* peer_sock - no-op round trip over a socket: the client writes SIZE bytes, the server
   reads them and writes them back, the client reads the reply.

   -t stream     UNIX domain SOCK_STREAM   (default; address: a socket path)
   -t seqpacket  UNIX domain SOCK_SEQPACKET (one message per read/write)
   -t tcp        TCP over loopback with TCP_NODELAY (address: IPv4[:PORT], port 18515)

   server:  peer_sock -t T [-a ADDR]   client: peer_sock -t T ADDR   both: peer_sock -t T -f
   The client first sends SIZE as 8 bytes so the server needs no -s. */
#include "peer.h"   /* first: it defines _GNU_SOURCE */

enum kind { K_STREAM, K_SEQPACKET, K_TCP };

struct sock_ctx {
    enum kind kind;
    int fd;
    size_t size;
    char *buf;
    char name[64];
};

static int sock_accept(const struct sock_ctx *ctx, const char *addr)
{
    switch (ctx->kind) {
    case K_STREAM: return peer_unix_accept(addr, SOCK_STREAM);
    case K_SEQPACKET: return peer_unix_accept(addr, SOCK_SEQPACKET);
    default: return peer_tcp_accept(addr);
    }
}

static int sock_connect(const struct sock_ctx *ctx, const char *addr)
{
    switch (ctx->kind) {
    case K_STREAM: return peer_unix_connect(addr, SOCK_STREAM);
    case K_SEQPACKET: return peer_unix_connect(addr, SOCK_SEQPACKET);
    default: return peer_tcp_connect(addr);
    }
}

/* Reads one message of ctx->size bytes: 0, 1 at end of stream, -1 on error. */
static int sock_recv(struct sock_ctx *ctx)
{
    if (ctx->kind != K_SEQPACKET)
        return peer_read_full(ctx->fd, ctx->buf, ctx->size);
    ssize_t r;
    do
        r = read(ctx->fd, ctx->buf, ctx->size);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return 1;
    return r == (ssize_t)ctx->size ? 0 : -1;
}

static int server(const struct peer_opts *o, const char *addr, void *vctx)
{
    (void)o;
    struct sock_ctx *ctx = (struct sock_ctx *)vctx;
    ctx->fd = sock_accept(ctx, addr);
    if (ctx->fd < 0)
        return 1;
    uint64_t size;
    if (peer_read_full(ctx->fd, &size, sizeof size) || size == 0 || size > (1u << 26))
        return 1;
    ctx->size = (size_t)size;
    ctx->buf = (char *)calloc(1, ctx->size);
    if (!ctx->buf)
        return 1;
    int r;
    while ((r = sock_recv(ctx)) == 0)
        if (peer_write_full(ctx->fd, ctx->buf, ctx->size))
            return 1;
    close(ctx->fd);
    free(ctx->buf);
    return r == 1 ? 0 : 1;
}

static int round_trip(void *vctx, long i)
{
    struct sock_ctx *ctx = (struct sock_ctx *)vctx;
    ctx->buf[0] = (char)i;
    if (peer_write_full(ctx->fd, ctx->buf, ctx->size) || sock_recv(ctx))
        return -1;
    return ctx->buf[0] == (char)i ? 0 : -1;
}

static int client(const struct peer_opts *o, const char *addr, void *vctx)
{
    struct sock_ctx *ctx = (struct sock_ctx *)vctx;
    ctx->fd = sock_connect(ctx, addr);
    if (ctx->fd < 0)
        return 1;
    uint64_t size = ctx->size;
    ctx->buf = (char *)calloc(1, ctx->size);
    if (!ctx->buf || peer_write_full(ctx->fd, &size, sizeof size))
        return 1;
    int rc = peer_measure(o, ctx->name, round_trip, ctx);
    close(ctx->fd);
    free(ctx->buf);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct peer_opts o;
    struct sock_ctx ctx = {K_STREAM, -1, 0, NULL, ""};
    const char *kind = "stream";
    struct peer_own_opt own = {'t', &kind, NULL};
    if (peer_parse(&o, argc, argv, &own, "[-t stream|seqpacket|tcp] [options] [ADDR]", NULL))
        return 2;
    if (!strcmp(kind, "stream"))
        ctx.kind = K_STREAM;
    else if (!strcmp(kind, "seqpacket"))
        ctx.kind = K_SEQPACKET;
    else if (!strcmp(kind, "tcp"))
        ctx.kind = K_TCP;
    else {
        fprintf(stderr, "unknown -t %s\n", kind);
        return 2;
    }
    if (peer_check_size(&o, 1, SIZE_MAX, "-s must be at least 1"))
        return 2;
    ctx.size = o.size;
    snprintf(ctx.name, sizeof ctx.name, "%s/%zu",
             ctx.kind == K_TCP ? "tcp" : ctx.kind == K_STREAM ? "uds_stream" : "uds_seqpacket",
             o.size);
    char path[108];
    snprintf(path, sizeof path, "/tmp/rpcool-bench-sock.%d", (int)getpid());
    return peer_run(&o, ctx.kind == K_TCP ? "127.0.0.1:18515" : path, server, client, &ctx);
}
