// LIBS: -libverbs
/* examples/krconn_hello.c - a krconn connection and one RDMA READ.
   The server registers a greeting and hands its address and key to every peer as connect data;
   it prints its context address. The client, given that address, connects (one UD round trip),
   reads the greeting with a one-sided RDMA READ, and connects once more: that second connection
   is virtual (it shares the first one's QP, no packet).
       cc -O2 -pthread krconn_hello.c -o krconn_hello -libverbs
       ./krconn_hello                 # server: prints ADDRESS, serves for 60 s
       ./krconn_hello ADDRESS         # client
   Needs an RDMA device (Soft-RoCE does: rdma link add rxe0 type rxe netdev eth0). */
#define KRCONN_IMPLEMENTATION
#include "krconn.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct hello { uint64_t addr; uint32_t rkey, len; }; /* the server's connect data */

static int fail(const char *what, int rc)
{
    char why[400];
    fprintf(stderr, "%s: %s\n", what, krconn_describe(rc, why, sizeof why));
    return 1;
}

static int server(void)
{
    static char greeting[64] = "hello over RDMA READ";
    krconn_ctx *ctx;
    krconn_mr mr;
    krconn_addr me;
    char text[128];
    int rc = krconn_ctx_create(NULL, &ctx);
    if (rc) return fail("context", rc);
    if ((rc = krconn_reg(ctx, greeting, sizeof greeting, 0, &mr))) return fail("register", rc);
    struct hello h = {(uintptr_t)greeting, mr.rkey, sizeof greeting};
    krconn_ctx_set_data(ctx, &h, sizeof h);
    krconn_ctx_addr(ctx, &me);
    krconn_addr_format(&me, text, sizeof text);
    printf("%s\n", text);
    fflush(stdout);
    sleep(60); /* the context answers connects from its own thread */
    krconn_dereg(&mr);
    krconn_ctx_destroy(ctx);
    return 0;
}

static int client(const char *address)
{
    krconn_ctx *ctx;
    krconn_addr peer;
    krconn *k, *v;
    krconn_mr mr;
    krconn_wc wc;
    static char buf[64];
    int rc = krconn_addr_parse(address, &peer);
    if (rc) return fail("address", rc);
    if ((rc = krconn_ctx_create(NULL, &ctx))) return fail("context", rc);
    if ((rc = krconn_connect(ctx, &peer, NULL, &k))) return fail("connect", rc);
    const struct hello *h = (const struct hello *)krconn_peer_data(k);
    if ((rc = krconn_reg(ctx, buf, sizeof buf, 0, &mr))) return fail("register", rc);
    if ((rc = krconn_read(k, 1, &mr, buf, h->len, h->addr, h->rkey, 0)) ||
        (rc = krconn_wait(k, &wc, 1000)))
        return fail("read", rc);
    printf("read: %s\n", buf);
    if ((rc = krconn_connect(ctx, &peer, NULL, &v))) return fail("second connect", rc);
    printf("second connection virtual: %s\n", krconn_is_virtual(v) ? "yes" : "no");
    krconn_disconnect(v);
    krconn_disconnect(k);
    krconn_dereg(&mr);
    krconn_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv) { return argc > 1 ? client(argv[1]) : server(); }
