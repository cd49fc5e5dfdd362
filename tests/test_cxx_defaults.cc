// CXX-STRICT
// LIBS: -libverbs
/* tests/test_cxx_defaults.cc - the manuals' C++ way to take an options struct's defaults (section
 * 1 of each header: `T o{};`, then assign the fields you set), for every options struct of the
 * five headers. The "// CXX-STRICT" line makes the Makefile build it under -Wall -Wextra -Werror
 * WITHOUT -Wno-missing-field-initializers, so a warning of that way fails the build. Run, each
 * value-initialised struct is all zero bytes (zero means the default) and is taken by the
 * functions that use it. tests/t.h is not included: its C initialisers are not this way. */
#define SHMHEAP_IMPLEMENTATION
#define RPCOOL_IMPLEMENTATION
#define KRCONN_IMPLEMENTATION
#define ALOCK_IMPLEMENTATION
#define NPPIN_IMPLEMENTATION
#include "shmheap.h"
#include "rpcool.h"
#include "krconn.h"
#include "alock.h"
#include "nppin.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>

static int failed;
#define CHECK(name, cond)                                                                  \
    do {                                                                                   \
        if (cond) std::printf("ok %s\n", name);                                            \
        else { std::printf("FAIL %s: %s:%d: %s\n", name, __FILE__, __LINE__, #cond); failed = 1; } \
    } while (0)

template <typename T> static bool all_zero(const T &o)
{
    unsigned char z[sizeof(T)];
    std::memset(z, 0, sizeof z);
    return std::memcmp(&o, z, sizeof z) == 0;
}

/* the documented way, for each struct: value-initialised, all zero */
static void value_init_is_zero()
{
    shmheap_opts a{};
    rpcool_server_opts b{};
    rpcool_conn_opts c{};
    rpcool_call_opts d{};
    rpcool_handler_opts e{};
    rpcool_export_opts f{};
    rpcool_attach_opts g{};
    krconn_ctx_opts h{};
    krconn_connect_opts i{};
    krconn_meta_opts j{};
    alock_table_opts k{};
    alock_remote_opts l{};
    nppin_opts m = {}; /* the other spelling the manuals name */
    CHECK("cxx-defaults-zero", all_zero(a) && all_zero(b) && all_zero(c) && all_zero(d) &&
                                   all_zero(e) && all_zero(f) && all_zero(g) && all_zero(h) &&
                                   all_zero(i) && all_zero(j) && all_zero(k) && all_zero(l) &&
                                   all_zero(m));
}

static const char *uniq(const char *base) /* as tests/t.h's t_uniq: run.sh finds leftovers */
{
    static char buf[4][96];
    static int n;
    const char *tag = std::getenv("RPCOOL_TEST_TAG");
    char *b = buf[n++ & 3];
    std::snprintf(b, sizeof buf[0], "t-%s-%s%d-%d", base, tag ? tag : "", (int)getpid(), n);
    return b;
}

static int h_seven(rpcool_ctx *, void *, size_t, void *) { return 7; }

/* the structs that work without RDMA, used: a heap, a lock table and an export in it, a server,
   a handler, a connection and a call */
static void used_locally()
{
    const char *heap = uniq("cxxd");
    shmheap_opts ho{};
    ho.size = 8u << 20;
    shmheap *h = nullptr;
    int rc = shmheap_create(heap, &ho, &h);
    CHECK("cxx-defaults-shmheap", rc == 0 && h);
    if (!h) return;

    alock_table_opts ao{};
    ao.nlocks = 8;
    alock_table *t = nullptr;
    alock_hold hold;
    rc = alock_table_create(h, "cxxd", &ao, &t);
    CHECK("cxx-defaults-alock-table", rc == 0 && alock_lock(t, 3, &hold) == 0 &&
                                          alock_unlock(&hold) == 0);
    if (t) alock_table_close(t);
    alock_table_unlink(h, "cxxd");

    rpcool_export_opts xo{};
    xo.nlocks = 4;
    rpcool_export *x = nullptr;
    rc = rpcool_export_create(h, uniq("cxx"), nullptr, 0, &xo, &x);
    CHECK("cxx-defaults-export", rc == 0 && rpcool_export_nlocks(x) == 4);
    if (x) rpcool_export_close(x);

    const char *chan = uniq("cxxd");
    rpcool_server_opts so{};
    so.max_conns = 4;
    rpcool_server *s = nullptr;
    rc = rpcool_server_open(chan, &so, &s);
    rpcool_handler_opts hopt{};
    hopt.safety = RPCOOL_COPY;
    if (rc == 0) rc = rpcool_server_add_handler_ex(s, 1, h_seven, nullptr, &hopt);
    if (rc == 0) rc = rpcool_server_start(s, 1);
    CHECK("cxx-defaults-server", rc == 0);
    rpcool_conn_opts co{};
    co.connect_timeout_ms = 5000;
    rpcool_conn *c = nullptr;
    if (rc == 0) rc = rpcool_connect(chan, &co, &c);
    CHECK("cxx-defaults-connect", rc == 0 && c);
    rpcool_call_opts callo{};
    callo.timeout_ms = 5000;
    if (c) CHECK("cxx-defaults-call", rpcool_call_ex(c, 1, nullptr, 0, &callo, nullptr, nullptr) == 7);
    if (c) rpcool_disconnect(c);
    if (s) rpcool_server_close(s);

    shmheap_close(h);
    shmheap_unlink(heap, nullptr);
}

/* the RDMA ones are taken too: with no context, device or peer, each call returns a code, never
   crashes (a context made where a device exists is destroyed at once) */
static void used_rdma()
{
    krconn_ctx_opts ko{};
    ko.pool_size = 1;
    krconn_ctx *ctx = nullptr;
    int rc = krconn_ctx_create(&ko, &ctx);
    if (rc == 0) krconn_ctx_destroy(ctx);
    krconn_connect_opts kc{};
    kc.timeout_ms = 1;
    krconn_addr peer{};
    krconn *k = nullptr;
    int kr = krconn_connect(nullptr, &peer, &kc, &k);
    krconn_meta_opts mo{};
    mo.slots = 16;
    int mr = krconn_meta_serve(nullptr, &mo);
    alock_remote_opts ro{};
    alock_remote *r = nullptr;
    int rr = alock_remote_create(&ro, &r); /* ndesc is required */
    nppin_opts no{};
    no.budget = 64u << 20;
    nppin_ctx *n = nullptr;
    int nr = nppin_create(nullptr, &no, &n); /* no protection domain */
    rpcool_attach_opts ato{};
    ato.timeout_ms = 100;
    rpcool_remote *a = nullptr;
    int ar = rpcool_attach("rdma://127.0.0.1:1/none", &ato, &a); /* nothing there */
    CHECK("cxx-defaults-rdma-structs", rc <= 0 && kr < 0 && !k && mr < 0 && rr < 0 && nr < 0 &&
                                           ar < 0 && !a);
}

int main()
{
    value_init_is_zero();
    used_locally();
    used_rdma();
    std::fflush(stdout);
    return failed;
}
