// VM
// LIBS: -libverbs -lprotobuf-c -pthread
// PROTO: ../pbc_test.proto ../pbc_test2.proto
/* tests/vm/test_pbc_rdma.c - protobuf-c services between pods over RDMA, on Soft-RoCE: the
 * service of tests/pbc_svc.c served by a server exec'd in pod A (rdma = "serve"), called from
 * pod B (SHMHEAP_POD=shmheap-b.pod, SHMHEAP_POD_ID=1) through "rdma://127.0.0.1/NAME" in the
 * RELAXED, SANDBOX and COPY modes: every answer the same as in process (packed), a closure called
 * later from another thread (Later) included; a message outside the heap is refused; the
 * server lives.
 * Two guests ("server" / "client PEER", the pods pair): the server in guest a (pod 0), the
 * same checks from guest b (pod 1) across the pair network; the client's last call (a plain
 * rpcool handler beside the service) stops the server. */
#define RPCOOL_WITH_RDMA 1
#define RPCOOL_WITH_PROTOBUF_C 1
#define RPCOOL_IMPLEMENTATION
#include "../../rpcool.h"
#include "../pbc_test2.pb-c.c"
#include "../pbc_test.pb-c.c"
#include "vmt.h"
#include "../pbc_svc.c"
#include "../pbc_shapes.h"
#include <sys/prctl.h>
#include <sys/wait.h>

#define NAME "pbcrdma"
enum { ID_QUIT = 9 };
static pid_t t_srv = -1; /* the exec'd server (one guest), or -1 (it runs in the other guest) */

static int h_quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    rpcool_server_stop((rpcool_server *)user);
    return 0;
}

static int serve_main(void)
{
    rpcool_server *s;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.rdma = "serve";
    int rc = rpcool_server_open(NAME, &so, &s);
    if (rc) {
        printf("FAIL pbc_rdma_server_open: %s\n", rpcool_strerror(rc));
        return 1;
    }
    rpcool_pbc_serve(s, ID_RELAXED, &svc_impl.base, RPCOOL_RELAXED);
    rpcool_pbc_serve(s, ID_SANDBOX, &svc_impl.base, RPCOOL_SANDBOX);
    rpcool_pbc_serve(s, ID_COPY, &svc_impl.base, RPCOOL_COPY);
    rpcool_server_add_handler(s, ID_QUIT, h_quit, s, 0);
    rc = rpcool_serve(s); /* until killed, or a client calls ID_QUIT */
    rpcool_server_close(s);
    return rc ? 1 : 0;
}

static void pbc_rdma_same_answers(void) { same_answers(); }

static void pbc_rdma_limits(void)
{
    Msg m = MSG__INIT;
    m.text = (char *)"later";
    ProtobufCMessage *out = NULL;
    CHECK_EQ(same("later", "Later", &m.base), 0); /* a closure called later, from a thread */
    CHECK_EQ(rpcool_pbc_call(t_svc[1], (unsigned)method_of("Crash"), &m.base, &out),
             RPCOOL_E_FAULT);
    if (t_srv > 0) CHECK(waitpid(t_srv, NULL, WNOHANG) == 0);
    CHECK_EQ(rpcool_pbc_call(t_svc[2], (unsigned)method_of("Echo"), &m.base, &out), 0);
    CHECK(out && !strcmp(((Msg *)out)->text, "later"));
    rpcool_pbc_reply_free(t_svc[2], out);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "--serve")) return serve_main();
    if (argc > 1 && !strcmp(argv[1], "server")) { /* a guest of its own: until ID_QUIT */
        t_begin("pbc_rdma_server");
        CHECK_EQ(serve_main(), 0);
        t_end();
        return T_DONE();
    }
    char where[200];
    snprintf(where, sizeof where, "rdma://%s/" NAME,
             argc > 2 && !strcmp(argv[1], "client") ? argv[2] : "127.0.0.1");
    if (argc < 2) {
        t_srv = fork();
        if (t_srv == 0) { /* exec'd: descriptors and defaults at other addresses */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execl("/proc/self/exe", argv[0], "--serve", (char *)NULL);
            _exit(127);
        }
        setenv("SHMHEAP_POD", "shmheap-b.pod", 1); /* another pod in the same guest */
    }
    setenv("SHMHEAP_POD_ID", "1", 1);
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 5000;
    int rc = -1;
    for (int i = 0; i < 60 && rc; i++)
        if ((rc = rpcool_connect(where, &o, &c))) sleep(1);
    t_begin("pbc_rdma_connect");
    CHECKF(rc == 0, "connect: %s", rpcool_strerror(rc));
    if (c) t_svc_new(c);
    t_end();
    if (c) {
        RUN(pbc_rdma_same_answers);
        RUN(pbc_rdma_limits);
        t_svc_destroy();
        if (t_srv < 0) rpcool_call(c, ID_QUIT, NULL, 0, NULL, NULL); /* the other guest's */
        rpcool_disconnect(c);
    }
    if (t_srv > 0) {
        kill(t_srv, SIGKILL);
        waitpid(t_srv, NULL, 0);
    }
    return T_DONE();
}
