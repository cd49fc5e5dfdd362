// TSAN
/* rpcool safety modes: copy, sealed (and batched release), sandboxed handlers (faults become
 * error replies, checked accessors), channel policy, a client that truncates its heap file. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <fcntl.h>
#include <sys/mman.h>

enum { FN_INSPECT = 1, FN_WILD = 2, FN_NEED = 3, FN_MAP = 4, FN_SEALED = 5, FN_ECHO = 6 };

static int devzero = -1;

/* 1 if the page of p is writable in this process: read(2) into it fails with EFAULT if not. */
static int writable(const void *p)
{
    return read(devzero, (void *)p, 0) == 0 && read(devzero, (void *)p, 1) == 1;
}

/* reports how the argument arrived: 1 in the heap, 2 a private copy; +10 if content is "abc" */
static int h_inspect(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    int r = shmheap_contains(rpcool_ctx_heap(ctx), arg, len) ? 1 : 2;
    if (len == 4 && !memcmp(arg, "abc", 4) && rpcool_ctx_ok(ctx, arg, len)) r += 10;
    return r;
}

/* follows whatever pointer the argument holds, unchecked */
static int h_wild(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    volatile long *p = *(long *volatile *)arg;
    return (int)*p;
}

/* follows the pointer through the checked accessor */
static int h_need(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    const long *p = *(const long **)arg;
    return (int)*RPCOOL_NEED(ctx, p);
}

/* looks "answer" up in a client-built map */
static int h_map(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    uint64_t v = 0;
    return rpcool_map_get_checked(ctx, (const rpcool_map *)arg, "answer", &v) ? (int)v : 0;
}

/* 1 if the argument's page is read-only in this (shared) process during the call */
static int h_sealed(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    return writable(arg) ? 0 : 1;
}

static rpcool_server *serve(const char *name, unsigned safety)
{
    rpcool_server *s = NULL;
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.safety = safety;
    o.reap_ms = 20;
    int r = rpcool_server_open(name, &o, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (r) return NULL;
    rpcool_server_add_handler(s, FN_INSPECT, h_inspect, NULL, 0);
    rpcool_server_add_handler(s, FN_WILD, h_wild, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_NEED, h_need, NULL, 0);
    rpcool_server_add_handler(s, FN_MAP, h_map, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_SEALED, h_sealed, NULL, 0);
    rpcool_server_start(s, 1);
    return s;
}

static void test_copy(void)
{
    const char *name = t_uniq("copy");
    rpcool_server *s = serve(name, 0);
    rpcool_conn *c;
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    char *a = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 11); /* relaxed: the shared pointer */
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_COPY;
    CHECK_EQ(rpcool_call_ex(c, FN_INSPECT, a, 4, &co, NULL, NULL), 12); /* a private copy */
    rpcool_free(c, a);
    rpcool_disconnect(c);
    rpcool_server_close(s);
    /* the channel policy applies copy to every call */
    s = serve(name, RPCOOL_COPY);
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    a = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 12);
    rpcool_free(c, a);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

static void test_seal(void)
{
    const char *name = t_uniq("seal");
    rpcool_server *s = serve(name, 0);
    rpcool_conn *c;
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    char *pg = (char *)rpcool_alloc_pages(c, 100);
    CHECK(pg && ((uintptr_t)pg & 4095) == 0);
    strcpy(pg, "sealed");
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_SEAL;
    CHECK_EQ(rpcool_call(c, FN_SEALED, pg, 7, NULL, NULL), 0);     /* relaxed: writable */
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 7, &co, NULL, NULL), 1); /* sealed during the call */
    CHECK(writable(pg));                                            /* released after it */
    /* an argument not on its own pages cannot be sealed (it would catch its neighbours) */
    char *small = rpcool_strdup(c, "x");
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, small, 2, &co, NULL, NULL), RPCOOL_E_INVAL);
    /* a seal range given separately must contain the argument (checked by the server too) */
    co.seal_p = pg;
    co.seal_len = 4096;
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 100, 8, &co, NULL, NULL), 1);
    rpcool_free(c, small);
    rpcool_free(c, pg);
    rpcool_disconnect(c);

    /* batched release: pages stay sealed until the batch fills or rpcool_release */
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.seal_batch = 4;
    o.safety = RPCOOL_SEAL;
    if (rpcool_connect(name, &o, &c)) { CHECK(0); rpcool_server_close(s); return; }
    char *p[4];
    for (int i = 0; i < 4; i++) p[i] = (char *)rpcool_alloc_pages(c, 4096);
    for (int i = 0; i < 3; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[i], 64, NULL, NULL), 1);
    CHECK(!writable(p[0]) && !writable(p[2]) && writable(p[3]));
    CHECK_EQ(rpcool_release(c), 0);
    CHECK(writable(p[0]) && writable(p[2]));
    for (int i = 0; i < 4; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[i], 64, NULL, NULL), 1);
    CHECK(writable(p[0]) && writable(p[3])); /* the fourth filled the batch */
    /* a repeated argument is still sealed from the call before: no new seal, and the page
       stays read-only until the batch is released; freeing it releases it first */
    for (int i = 0; i < 3; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[0], 64, NULL, NULL), 1);
    CHECK(!writable(p[0]) && c->nseals == 1);
    rpcool_free(c, p[0]);
    CHECK(c->nseals == 0);
    p[0] = (char *)rpcool_alloc_pages(c, 4096);
    CHECK(p[0] && writable(p[0]));
    for (int i = 0; i < 4; i++) rpcool_free(c, p[i]);
    rpcool_disconnect(c);
    rpcool_server_close(s);

    /* a channel that requires sealing refuses unsealed calls */
    s = serve(name, RPCOOL_SEAL);
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    pg = (char *)rpcool_alloc_pages(c, 10);
    memset(&co, 0, sizeof co);
    CHECK_EQ(rpcool_call(c, FN_SEALED, pg, 10, NULL, NULL), RPCOOL_E_POLICY);
    co.safety = RPCOOL_SEAL;
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 10, &co, NULL, NULL), 1);
    rpcool_free(c, pg);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

static long private_value = 7;

static void test_sandbox(void)
{
    const char *name = t_uniq("sandbox");
    rpcool_server *s = serve(name, 0);
    rpcool_conn *c;
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    long **arg = (long **)rpcool_alloc(c, sizeof *arg);
    long *good = (long *)rpcool_alloc(c, sizeof *good);
    *good = 33;
    *arg = good;
    CHECK_EQ(rpcool_call(c, FN_WILD, arg, sizeof *arg, NULL, NULL), 33);
    /* a wild pointer: the sandboxed handler faults, the server lives; three times, so a signal
       left blocked after the first (ThreadSanitizer's interposed handler) would show */
    *arg = (long *)16;
    for (int i = 0; i < 3; i++) CHECK_EQ(rpcool_call(c, FN_WILD, arg, sizeof *arg, NULL, NULL), RPCOOL_E_FAULT);
    *arg = good;
    CHECK_EQ(rpcool_call(c, FN_WILD, arg, sizeof *arg, NULL, NULL), 33); /* still serving */
    /* the checked accessor refuses a pointer out of the heap, in any mode */
    *arg = &private_value;
    CHECK_EQ(rpcool_call(c, FN_NEED, arg, sizeof *arg, NULL, NULL), RPCOOL_E_BADPTR);
    *arg = good;
    CHECK_EQ(rpcool_call(c, FN_NEED, arg, sizeof *arg, NULL, NULL), 33);
    /* a client-built map, then the same map corrupted */
    rpcool_arena a;
    rpcool_arena_init(&a, rpcool_heap(c), 0);
    rpcool_map *m = rpcool_map_new(&a, 4);
    rpcool_map_put(&a, m, "question", 1, NULL);
    rpcool_map_put(&a, m, "answer", 42, NULL);
    CHECK_EQ(rpcool_call(c, FN_MAP, m, sizeof *m, NULL, NULL), 42);
    rpcool_map_entry *saved = m->e;
    m->e = (rpcool_map_entry *)(uintptr_t)0x1000;
    CHECK_EQ(rpcool_call(c, FN_MAP, m, sizeof *m, NULL, NULL), RPCOOL_E_BADPTR);
    m->e = saved;
    uint64_t h = rpcool_hash("answer") & (m->cap - 1);
    for (uint64_t i = 0; i < m->cap; i++) /* point the key at private memory */
        if (m->e[(h + i) & (m->cap - 1)].key && !strcmp(m->e[(h + i) & (m->cap - 1)].key, "answer")) {
            m->e[(h + i) & (m->cap - 1)].key = "answer";
            break;
        }
    CHECK_EQ(rpcool_call(c, FN_MAP, m, sizeof *m, NULL, NULL), RPCOOL_E_BADPTR);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK(st.faults >= 3);
    rpcool_disconnect(c);
    rpcool_server_close(s);
    if (!shmheap_pkey_supported()) t_skip("sandbox-pkeys", "no pku on this CPU: bounds checks and fault containment only");
}

/* A client truncates its own heap file under the server: the server's reads of it fault, the
   fault is contained, the connection is dropped and other clients carry on. */
static void test_truncated_heap(void)
{
    const char *name = t_uniq("trunc");
    rpcool_server *s = NULL;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.reap_ms = 20;
    if (rpcool_server_open(name, &so, &s)) { CHECK(0); return; }
    rpcool_server_add_handler(s, FN_INSPECT, h_inspect, NULL, 0);
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t p = fork(); /* before the server starts its threads */
    if (p == 0) {
        rpcool_conn *c;
        if (rpcool_connect(name, NULL, &c)) _exit(2);
        char path[160];
        const char *hn = shmheap_name(rpcool_heap(c));
        if (!strncmp(hn, "shm:", 4)) hn += 4;
        snprintf(path, sizeof path, "/dev/shm/%s", hn);
        int fd = open(path, O_RDWR);
        if (fd < 0 || ftruncate(fd, 0)) _exit(3);
        if (write(pfd[1], "x", 1) != 1) _exit(4);
        pause(); /* keep the connection alive (touching our heap would fault us too) */
        _exit(0);
    }
    close(pfd[1]);
    rpcool_server_start(s, 1);
    char x;
    int got = (int)read(pfd[0], &x, 1);
    CHECK_EQ(got, 1);
    if (got != 1) {
        int wst;
        waitpid(p, &wst, 0);
        CHECKF(0, "client exited with %d", WIFEXITED(wst) ? WEXITSTATUS(wst) : -WTERMSIG(wst));
    }
    close(pfd[0]);
    rpcool_server_stats st;
    uint64_t t0 = rcp__now_ns();
    do { usleep(5000); rpcool_server_get_stats(s, &st); } while (st.faults == 0 && rcp__now_ns() - t0 < 3000000000ull);
    CHECK(st.faults >= 1);
    rpcool_conn *c;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* the server is fine */
    if (c) {
        char *a = rpcool_strdup(c, "abc");
        CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 11);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    rpcool_server_close(s);
}

int main(void)
{
#ifdef T_TSAN /* ThreadSanitizer programs can map only inside this window (see shmheap.h) */
    setenv("SHMHEAP_POD", "shmheap-tsan.pod", 0);
    setenv("SHMHEAP_WINDOW", "560000000000-568000000000", 0);
#endif
    devzero = open("/dev/zero", O_RDONLY);
    TEST(test_copy);
    TEST(test_seal);
    TEST(test_sandbox);
    TEST(test_truncated_heap);
    close(devzero);
    return T_DONE();
}
