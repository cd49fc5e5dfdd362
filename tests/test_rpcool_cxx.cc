/* tests/test_rpcool_cxx.cc - rpcool's implementation compiled as C++ (as a C++ program using it
 * would): an exception escaping a handler is the error reply RPCOOL_E_EXCEPTION and the server
 * serves on; rpcool_ctx_fail and a checked accessor that refuses a pointer end the call by
 * unwinding, so the handler's destructors run (in every safety mode); a contained fault still
 * ends the call without unwinding (RPCOOL_E_FAULT). Built with c++ by the Makefile. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <stdexcept>
#include <string>

enum { FN_THROW = 1, FN_THROW_INT, FN_FAIL, FN_NEED_BAD, FN_ECHO, FN_FAULT };

static int destroyed; /* the serving thread's destructors, counted */

struct counted {
    std::string s{"a string that owns heap memory, so a leak shows under ASan"};
    ~counted() { __atomic_add_fetch(&destroyed, 1, __ATOMIC_SEQ_CST); }
};

static int h_throw(rpcool_ctx *, void *, size_t, void *)
{
    counted c;
    throw std::runtime_error("handler gave up");
}

static int h_throw_int(rpcool_ctx *, void *, size_t, void *)
{
    counted c;
    throw 42;
}

static int h_fail(rpcool_ctx *ctx, void *, size_t, void *)
{
    counted c;
    rpcool_ctx_fail(ctx, -7);
}

static int h_need_bad(rpcool_ctx *ctx, void *, size_t, void *)
{
    counted c;
    static long outside = 1; /* not in the client's heap */
    const long *p = (const long *)rpcool_ctx_need(ctx, &outside, sizeof outside);
    return (int)*p;
}

static int *volatile nowhere = (int *)(uintptr_t)16;
static int h_fault(rpcool_ctx *ctx, void *, size_t, void *)
{
    (void)ctx;
    return *nowhere; /* contained in a sandbox: no unwinding */
}

static int h_echo(rpcool_ctx *ctx, void *arg, size_t len, void *)
{
    void *r = rpcool_ctx_alloc(ctx, len);
    if (!r) return RPCOOL_E_AGAIN;
    memcpy(r, arg, len);
    rpcool_ctx_reply(ctx, r, len);
    return 0;
}

static void run_mode(unsigned safety)
{
    const char *name = t_uniq("cxx");
    rpcool_server *s = NULL;
    int r = rpcool_server_open(name, NULL, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (r) return;
    rpcool_server_add_handler(s, FN_THROW, h_throw, NULL, safety);
    rpcool_server_add_handler(s, FN_THROW_INT, h_throw_int, NULL, safety);
    rpcool_server_add_handler(s, FN_FAIL, h_fail, NULL, safety);
    rpcool_server_add_handler(s, FN_NEED_BAD, h_need_bad, NULL, safety);
    rpcool_server_add_handler(s, FN_ECHO, h_echo, NULL, safety);
    rpcool_server_add_handler(s, FN_FAULT, h_fault, NULL, RPCOOL_SANDBOX);
    rpcool_server_start(s, 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) return (void)rpcool_server_close(s);
    __atomic_store_n(&destroyed, 0, __ATOMIC_SEQ_CST);
    static const struct { unsigned fn; int want; } k[] = {
        {FN_THROW, RPCOOL_E_EXCEPTION}, {FN_THROW_INT, RPCOOL_E_EXCEPTION}, {FN_FAIL, -7},
        {FN_NEED_BAD, RPCOOL_E_BADPTR}};
    int calls = 0;
    for (unsigned j = 0; j < sizeof k / sizeof k[0]; j++)
        for (int i = 0; i < 10; i++, calls++) {
            void *ret = (void *)1;
            r = rpcool_call(c, k[j].fn, NULL, 0, &ret, NULL);
            CHECKF(r == k[j].want && ret == NULL, "fn %u (safety %u): %d (%s)", k[j].fn, safety,
                   r, rpcool_strerror(r));
            char *m = (char *)rpcool_alloc(c, 6);
            if (!m) break;
            memcpy(m, "alive", 6);
            void *e = NULL;
            r = rpcool_call(c, FN_ECHO, m, 6, &e, NULL);
            CHECKF(r == 0 && e && !strcmp((char *)e, "alive"), "echo after fn %u: %d", k[j].fn, r);
            if (e) rpcool_free(c, e);
            rpcool_free(c, m);
        }
    CHECKF(__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST) == calls,
           "%d of %d calls' destructors ran (safety %u)", destroyed, calls, safety);
    r = rpcool_call(c, FN_FAULT, NULL, 0, NULL, NULL);
    CHECKF(r == RPCOOL_E_FAULT, "a contained fault: %d (%s)", r, rpcool_strerror(r));
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK(st.faults >= 1);
    rpcool_disconnect(c);
    CHECK_EQ(rpcool_server_close(s), 0);
}

static void test_cxx_relaxed(void) { run_mode(RPCOOL_RELAXED); }
static void test_cxx_sandbox(void) { run_mode(RPCOOL_SANDBOX); }
static void test_cxx_copy(void) { run_mode(RPCOOL_COPY); }

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(test_cxx_relaxed);
    RUN(test_cxx_sandbox);
    RUN(test_cxx_copy);
    return T_DONE();
}
