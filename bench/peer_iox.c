/* SPDX-License-Identifier: MIT */
/* peer_iox - iceoryx (Eclipse, zero-copy shared memory) request/response round trip
   through Debian's C binding: the client loans a request chunk of SIZE bytes in RouDi's
   shared memory, the server loans a response chunk, copies the request into it and sends
   it back. Needs the RouDi daemon (iox-roudi) running; bench/bench_peers.sh starts it.

   Default: both sides block in an iceoryx WaitSet (semaphore in shared memory).
   -b: both sides busy-poll take_request/take_response instead (results iox_poll/SIZE).

   server:  peer_iox [-b] [-a INSTANCE]   client: peer_iox [-b] INSTANCE   both: peer_iox -f
   INSTANCE names the iceoryx service instance (service "rpcool-bench", event "echo"). */
// LIBS: -liceoryx_binding_c
#include "peer.h"   /* first: it defines _GNU_SOURCE */

#include <iceoryx_binding_c/client.h>
#include <iceoryx_binding_c/log.h>
#include <iceoryx_binding_c/runtime.h>
#include <iceoryx_binding_c/server.h>
#include <iceoryx_binding_c/wait_set.h>

#define IOX_STOP UINT64_MAX

struct iox_ctx {
    int poll;
    size_t size;
    iox_client_t client;
    iox_ws_t ws;
    iox_notification_info_t events[4];
};

static void runtime_init(const char *role)
{
    char name[64];
    snprintf(name, sizeof name, "rpcool-bench-%s-%d", role, (int)getpid());
    iox_set_loglevel(Iceoryx_LogLevel_Warn);
    iox_runtime_init(name);
}

static void ws_wait(struct iox_ctx *c)
{
    uint64_t missed = 0;
    iox_ws_wait(c->ws, c->events, sizeof c->events / sizeof c->events[0], &missed);
}

static int server(const struct peer_opts *o, const char *addr, void *vctx)
{
    (void)o;
    struct iox_ctx *c = (struct iox_ctx *)vctx;
    runtime_init("srv");
    iox_server_options_t opts;
    iox_server_options_init(&opts);
    iox_server_storage_t storage;
    iox_server_t srv = iox_server_init(&storage, "rpcool-bench", addr, "echo", &opts);
    iox_ws_storage_t ws_storage;
    c->ws = iox_ws_init(&ws_storage);
    if (!c->poll &&
        iox_ws_attach_server_event(c->ws, srv, ServerEvent_REQUEST_RECEIVED, 0, NULL) !=
            WaitSetResult_SUCCESS) {
        fprintf(stderr, "iox: cannot attach server to waitset\n");
        return 1;
    }
    int rc = 1, stop = 0;
    while (!stop) {
        const void *req;
        enum iox_ServerRequestResult r = iox_server_take_request(srv, &req);
        if (r == ServerRequestResult_NO_PENDING_REQUESTS) {
            if (!c->poll)
                ws_wait(c);
            continue;
        }
        if (r != ServerRequestResult_SUCCESS) {
            fprintf(stderr, "iox: take_request failed (%d)\n", (int)r);
            break;
        }
        const uint64_t *hdr = (const uint64_t *)req;
        size_t size = (size_t)hdr[1];
        void *resp;
        if (iox_server_loan_response(srv, req, &resp, (uint32_t)size) !=
            AllocationResult_SUCCESS) {
            fprintf(stderr, "iox: loan_response failed\n");
            iox_server_release_request(srv, req);
            break;
        }
        memcpy(resp, req, size);
        stop = hdr[0] == IOX_STOP;
        iox_server_release_request(srv, req);
        if (iox_server_send(srv, resp) != ServerSendResult_SUCCESS) {
            fprintf(stderr, "iox: server send failed\n");
            break;
        }
        rc = stop ? 0 : 1;
    }
    if (!c->poll)
        iox_ws_detach_server_event(c->ws, srv, ServerEvent_REQUEST_RECEIVED);
    iox_ws_deinit(c->ws);
    /* let the last response reach the client before our port goes away */
    usleep(100000);
    iox_server_deinit(srv);
    iox_runtime_shutdown();
    return rc;
}

/* Sends one request carrying seq and waits for its response. */
static int call(struct iox_ctx *c, uint64_t seq)
{
    void *req;
    if (iox_client_loan_request(c->client, &req, (uint32_t)c->size) != AllocationResult_SUCCESS)
        return -1;
    uint64_t *hdr = (uint64_t *)req;
    hdr[0] = seq;
    hdr[1] = c->size;
    if (iox_client_send(c->client, req) != ClientSendResult_SUCCESS)
        return -1;
    for (;;) {
        const void *resp;
        enum iox_ChunkReceiveResult r = iox_client_take_response(c->client, &resp);
        if (r == ChunkReceiveResult_SUCCESS) {
            uint64_t got = *(const uint64_t *)resp;
            iox_client_release_response(c->client, resp);
            return got == seq ? 0 : -1;
        }
        if (r != ChunkReceiveResult_NO_CHUNK_AVAILABLE)
            return -1;
        if (!c->poll)
            ws_wait(c);
    }
}

static int round_trip(void *vctx, long i)
{
    return call((struct iox_ctx *)vctx, (uint64_t)i);
}

static int client(const struct peer_opts *o, const char *addr, void *vctx)
{
    struct iox_ctx *c = (struct iox_ctx *)vctx;
    runtime_init("cli");
    iox_client_options_t opts;
    iox_client_options_init(&opts);
    iox_client_storage_t storage;
    c->client = iox_client_init(&storage, "rpcool-bench", addr, "echo", &opts);
    for (int tries = 0; iox_client_get_connection_state(c->client) != ConnectionState_CONNECTED;
         tries++) {
        if (tries > 10000) {
            fprintf(stderr, "iox: no server for instance %s\n", addr);
            return 1;
        }
        usleep(1000);
    }
    iox_ws_storage_t ws_storage;
    c->ws = iox_ws_init(&ws_storage);
    if (!c->poll &&
        iox_ws_attach_client_event(c->ws, c->client, ClientEvent_RESPONSE_RECEIVED, 0, NULL) !=
            WaitSetResult_SUCCESS) {
        fprintf(stderr, "iox: cannot attach client to waitset\n");
        return 1;
    }
    char name[64];
    snprintf(name, sizeof name, "%s/%zu", c->poll ? "iox_poll" : "iox_waitset", o->size);
    int rc = peer_measure(o, name, round_trip, c);
    if (call(c, IOX_STOP))
        rc = -1;
    if (!c->poll)
        iox_ws_detach_client_event(c->ws, c->client, ClientEvent_RESPONSE_RECEIVED);
    iox_ws_deinit(c->ws);
    iox_client_deinit(c->client);
    iox_runtime_shutdown();
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct peer_opts o;
    struct iox_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    struct peer_own_opt own = {'b', NULL, &ctx.poll};
    if (peer_parse(&o, argc, argv, &own, "[-b] [options] [INSTANCE]",
                   "  -b         busy-poll instead of blocking in a WaitSet\n") ||
        peer_check_size(&o, 16, 1u << 20,
                        "-s must be 16..1048576 (the request carries a 16-byte header)"))
        return 2;
    ctx.size = o.size;
    char inst[64];
    snprintf(inst, sizeof inst, "bench%d", (int)getpid());
    return peer_run(&o, inst, server, client, &ctx);
}
