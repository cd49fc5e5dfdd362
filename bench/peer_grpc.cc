// SPDX-License-Identifier: MIT
// peer_grpc - gRPC (C++, synchronous API) unary round trip over a UNIX socket, or over TCP
// when the address is IPV4:PORT (gRPC's own address syntax; between two machines:
// bench/bench_rdma_pair.sh): the client calls Echo.Call with SIZE bytes, the server returns
// them. The generated code (bench/echo.proto) is built into build/bench/gen by
// bench/bench_peers.sh (build/vm/bench/gen by mk/vm.mk for the guests). Results are named
// grpc_uds/SIZE over unix:, grpc_tcp/SIZE otherwise.
//
// server:  peer_grpc [-a unix:PATH|IPV4:PORT]   client: peer_grpc unix:PATH|IPV4:PORT
// both:    peer_grpc -f
// LIBS: $(pkg-config --libs grpc++ protobuf)
#include "peer.h"  // first: it defines _GNU_SOURCE

#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <string>

#include "echo.grpc.pb.h"

using rpcool_bench::Blob;
using rpcool_bench::Echo;

namespace {

class EchoService final : public Echo::Service {
  public:
    grpc::Status Call(grpc::ServerContext *, const Blob *req, Blob *resp) override
    {
        resp->set_data(req->data());
        return grpc::Status::OK;
    }
    grpc::Status Stop(grpc::ServerContext *, const Blob *, Blob *) override
    {
        std::call_once(once_, [this] { stop_.set_value(); });
        return grpc::Status::OK;
    }
    std::future<void> stopped() { return stop_.get_future(); }

  private:
    std::promise<void> stop_;
    std::once_flag once_;
};

int server(const struct peer_opts *, const char *addr, void *)
{
    EchoService service;
    auto stopped = service.stopped();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(addr, grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> srv = builder.BuildAndStart();
    if (!srv) {
        fprintf(stderr, "grpc: cannot listen on %s\n", addr);
        return 1;
    }
    stopped.wait();
    srv->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (!strncmp(addr, "unix:", 5))
        unlink(addr + 5);
    return 0;
}

struct client_ctx {
    std::unique_ptr<Echo::Stub> stub;
    Blob req, resp;
};

int round_trip(void *vctx, long i)
{
    client_ctx *c = static_cast<client_ctx *>(vctx);
    (*c->req.mutable_data())[0] = (char)i;
    grpc::ClientContext ctx;
    grpc::Status st = c->stub->Call(&ctx, c->req, &c->resp);
    if (!st.ok()) {
        fprintf(stderr, "grpc: %s\n", st.error_message().c_str());
        return -1;
    }
    return c->resp.data().size() == c->req.data().size() && c->resp.data()[0] == (char)i ? 0 : -1;
}

int client(const struct peer_opts *o, const char *addr, void *)
{
    grpc::ChannelArguments args;
    // the server may still be starting: retry every 10 ms, not after gRPC's 1 s backoff
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    auto channel = grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
        fprintf(stderr, "grpc: no server at %s\n", addr);
        return 1;
    }
    client_ctx c;
    c.stub = Echo::NewStub(channel);
    c.req.set_data(std::string(o->size, 'x'));
    char name[64];
    snprintf(name, sizeof name, "%s/%zu", strncmp(addr, "unix:", 5) ? "grpc_tcp" : "grpc_uds",
             o->size);
    int rc = peer_measure(o, name, round_trip, &c);
    grpc::ClientContext ctx;
    Blob empty;
    if (!c.stub->Stop(&ctx, empty, &c.resp).ok())
        rc = -1;
    return rc ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv)
{
    struct peer_opts o;
    if (peer_parse(&o, argc, argv, NULL, "[options] [unix:PATH|IPV4:PORT]", NULL) ||
        peer_check_size(&o, 1, SIZE_MAX, "-s must be at least 1"))
        return 2;
    char addr[128];
    snprintf(addr, sizeof addr, "unix:/tmp/rpcool-bench-grpc.%d", (int)getpid());
    return peer_run(&o, addr, server, client, NULL);
}
