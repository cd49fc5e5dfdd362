// TSAN
/* rpcool safety modes: copy, sealed (and batched release), sandboxed handlers (faults become
 * error replies, checked accessors), channel policy, a client that tries to truncate its heap; the
 * union of safety flags, handler-required SEAL, the ctx helpers on the copy, max_copy, seals
 * shared by calls in flight and the seal of a timed-out call; a server dying during a sealed
 * call (rpcool_release makes the argument writable again). */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

enum { FN_INSPECT = 1, FN_WILD = 2, FN_NEED = 3, FN_MAP = 4, FN_SEALED = 5, FN_ECHO = 6, FN_SNAP = 7 };

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
    return t_writable(arg) ? 0 : 1;
}

/* the argument in the heap, as the client sent it (FN_SNAP) */
static char *snap_heap;
static int snap_started; /* set by the handler once it runs (the server has taken the argument) */
/* waits (up to 2 s) until the client changed the argument's first byte in the heap, then
   returns the first byte the handler sees + 1000 if it got a private copy (RPCOOL_COPY in its
   flags and not a pointer into the heap) */
static int h_snap(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    __atomic_store_n(&snap_started, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2000 && snap_heap && __atomic_load_n(&snap_heap[0], __ATOMIC_RELAXED) == 'a'; i++)
        usleep(1000);
    int copied = (rpcool_ctx_safety(ctx) & RPCOOL_COPY) && !shmheap_contains(rpcool_ctx_heap(ctx), arg, len);
    return ((const char *)arg)[0] + (copied ? 1000 : 0);
}

static rpcool_server *serve(const char *name, unsigned safety)
{
    static const t_handler hs[] = {
        {FN_INSPECT, h_inspect, 0}, {FN_WILD, h_wild, RPCOOL_SANDBOX}, {FN_NEED, h_need, 0},
        {FN_MAP, h_map, RPCOOL_SANDBOX}, {FN_SEALED, h_sealed, 0}, {FN_SNAP, h_snap, 0}};
    rpcool_server_opts o = {.safety = safety, .reap_ms = 20};
    return t_server_with(name, &o, hs, sizeof hs / sizeof hs[0], 1);
}

static void test_copy(void)
{
    const char *name = t_uniq("copy");
    rpcool_server *s = serve(name, 0);
    rpcool_conn *c;
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    char *a = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 11); /* relaxed: the shared pointer */
    rpcool_call_opts co = {.safety = RPCOOL_COPY};
    CHECK_EQ(rpcool_call_ex(c, FN_INSPECT, a, 4, &co, NULL, NULL), 12); /* a private copy */
    rpcool_free(c, a);
    t_disconnect_close(c, s);
    /* the channel policy applies copy to every call */
    s = serve(name, RPCOOL_COPY);
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    a = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 12);
    rpcool_free(c, a);
    t_disconnect_close(c, s);
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
    rpcool_call_opts co = {.safety = RPCOOL_SEAL};
    CHECK_EQ(rpcool_call(c, FN_SEALED, pg, 4096, NULL, NULL), 0);     /* relaxed: writable */
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 4096, &co, NULL, NULL), 1); /* sealed during the call */
    CHECK(t_writable(pg));                                               /* released after it */
    /* an argument of a page or more not on its own pages cannot be sealed (it would catch its
       neighbours); one of less than a page is copied instead, wherever it lies */
    char *big = (char *)rpcool_alloc(c, 5000);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, big, 5000, &co, NULL, NULL), RPCOOL_E_INVAL);
    rpcool_free(c, big);
    char *small = rpcool_strdup(c, "x");
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, small, 2, &co, NULL, NULL), 0);
    /* a seal range given separately must contain the argument (checked by the server too) */
    co.seal_p = pg;
    co.seal_len = 4096;
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 100, 8, &co, NULL, NULL), 1);
    rpcool_free(c, small);
    rpcool_free(c, pg);
    rpcool_disconnect(c);

    /* batched release: pages stay sealed until the batch fills or rpcool_release */
    rpcool_conn_opts o = {.seal_batch = 4, .safety = RPCOOL_SEAL};
    if (rpcool_connect(name, &o, &c)) { CHECK(0); rpcool_server_close(s); return; }
    char *p[4];
    for (int i = 0; i < 4; i++) p[i] = (char *)rpcool_alloc_pages(c, 4096);
    for (int i = 0; i < 3; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[i], 4096, NULL, NULL), 1);
    CHECK(!t_writable(p[0]) && !t_writable(p[2]) && t_writable(p[3]));
    CHECK_EQ(rpcool_release(c), 0);
    CHECK(t_writable(p[0]) && t_writable(p[2]));
    for (int i = 0; i < 4; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[i], 4096, NULL, NULL), 1);
    CHECK(t_writable(p[0]) && t_writable(p[3])); /* the fourth filled the batch */
    /* a sub-page argument is copied, not sealed: it takes no place in the batch */
    CHECK_EQ(rpcool_call(c, FN_SEALED, p[1], 64, NULL, NULL), 0);
    CHECK(t_writable(p[1]) && c->nseals == 0);
    /* a repeated argument is still sealed from the call before: no new seal, and the page
       stays read-only until the batch is released; freeing it releases it first */
    for (int i = 0; i < 3; i++) CHECK_EQ(rpcool_call(c, FN_SEALED, p[0], 4096, NULL, NULL), 1);
    CHECK(!t_writable(p[0]) && c->nseals == 1);
    rpcool_free(c, p[0]);
    CHECK(c->nseals == 0);
    p[0] = (char *)rpcool_alloc_pages(c, 4096);
    CHECK(p[0] && t_writable(p[0]));
    for (int i = 0; i < 4; i++) rpcool_free(c, p[i]);
    t_disconnect_close(c, s);

    /* a channel that requires sealing refuses unsealed calls */
    s = serve(name, RPCOOL_SEAL);
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    pg = (char *)rpcool_alloc_pages(c, 10);
    memset(&co, 0, sizeof co);
    CHECK_EQ(rpcool_call(c, FN_SEALED, pg, 10, NULL, NULL), RPCOOL_E_POLICY);
    co.safety = RPCOOL_SEAL;
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 4096, &co, NULL, NULL), 1);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 10, &co, NULL, NULL), 0); /* copied: meets the policy */
    rpcool_free(c, pg);
    t_disconnect_close(c, s);
}

/* A sealed call of less than a page is copied by the server, not sealed: the
   handler sees the argument as sent while the client changes it, the client's page stays
   writable, and a range of a page or more is still sealed. */
static void test_seal_small(void)
{
    const char *name = t_uniq("sealsm");
    rpcool_server *s = serve(name, 0);
    rpcool_conn *c;
    if (!s || rpcool_connect(name, NULL, &c)) { CHECK(0); if (s) rpcool_server_close(s); return; }
    rpcool_call_opts co = {.safety = RPCOOL_SEAL};
    char *a = (char *)rpcool_alloc(c, 8); /* not page aligned: no seal, so no need to be */
    memcpy(a, "aaaaaaa", 8);
    snap_heap = a;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, FN_SNAP, a, 8, &co, NULL, NULL, &id), 0);
    /* once the handler runs (the server has its copy), the sender changes the argument: its
       page is writable (t_writable stores a zero byte: probe the last byte, which is one) */
    for (int i = 0; i < 2000 && !__atomic_load_n(&snap_started, __ATOMIC_SEQ_CST); i++) usleep(1000);
    CHECKF(t_writable(a + 7), "a sub-page sealed argument was made read-only");
    if (t_writable(a + 7)) __atomic_store_n(&a[0], 'b', __ATOMIC_RELAXED);
    int r = rpcool_wait(c, id, NULL, NULL);
    CHECKF(r == 1000 + 'a', "the handler did not see the argument as sent (%d)", r);
    snap_heap = NULL;
    CHECK(t_writable(a) && c->nseals == 0);
    /* the boundary: 4095 bytes are copied, 4096 sealed; an explicit page-sized seal range
       around a small argument is sealed */
    char *pg = (char *)rpcool_alloc_pages(c, 8192);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 4095, &co, NULL, NULL), 0);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg, 4096, &co, NULL, NULL), 1);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 4096, 8192 - 4096, &co, NULL, NULL), 1);
    co.seal_p = pg;
    co.seal_len = 4096;
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 8, 8, &co, NULL, NULL), 1);
    co.seal_len = 100; /* an explicit range under a page: copied, and must contain the argument */
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 8, 8, &co, NULL, NULL), 0);
    CHECK_EQ(rpcool_call_ex(c, FN_SEALED, pg + 96, 8, &co, NULL, NULL), RPCOOL_E_BADPTR);
    CHECK(t_writable(pg) && t_writable(pg + 4096));
    rpcool_free(c, pg);
    rpcool_free(c, a);
    t_disconnect_close(c, s);

    /* the copy of a sealed call is bounded by a page, not by max_copy */
    rpcool_server_opts so = {.max_copy = 4};
    s = t_serve(name, &so, 1);
    if (!s) return;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    char *b = (char *)rpcool_alloc(c, 64);
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_SEAL;
    CHECK_EQ(rpcool_call_ex(c, T_FN_SEALED, b, 64, &co, NULL, NULL), 0);
    co.safety = RPCOOL_SEAL | RPCOOL_COPY; /* an explicit COPY keeps its limit */
    CHECK_EQ(rpcool_call_ex(c, T_FN_SEALED, b, 64, &co, NULL, NULL), RPCOOL_E_TOOBIG);
    co.safety = RPCOOL_SEAL | RPCOOL_SANDBOX;
    CHECK_EQ(rpcool_call_ex(c, T_FN_SAFETY, b, 64, &co, NULL, NULL), RPCOOL_COPY | RPCOOL_SEAL | RPCOOL_SANDBOX);
    rpcool_free(c, b);
    t_disconnect_close(c, s);
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
    t_disconnect_close(c, s);
    if (!shmheap_pkey_supported()) t_skip("sandbox-pkeys", "no pku on this CPU: bounds checks and fault containment only");
}

static int truncate_child(void *p)
{
    const char *name = (const char *)p;
    rpcool_conn *c;
    char proc[64];
    if (rpcool_connect(name, NULL, &c)) return 2;
    int fd = rpcool_heap(c)->fd;
    if (ftruncate(fd, 0) == 0 || errno != EPERM) return 3;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int fd2 = open(proc, O_RDWR);
    if (fd2 < 0 || ftruncate(fd2, 4096) == 0 || errno != EPERM) return 4;
    close(fd2);
    char *a = rpcool_strdup(c, "abc");
    if (rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL) != 11) return 5;
    rpcool_free(c, a);
    rpcool_disconnect(c);
    return 0;
}

/* A client tries to truncate its own heap under the server (it used to be a file the client
   made; its truncation made the server's reads fault). The heap is now the server's memfd,
   sealed against resizing: every ftruncate fails with EPERM, through the descriptor the client
   was given and through a new open of it, and the server sees no fault. */
static void test_heap_truncate_refused(void)
{
    const char *name = t_uniq("trunc");
    rpcool_server *s = NULL;
    rpcool_server_opts so = {.reap_ms = 20};
    if (rpcool_server_open(name, &so, &s)) { CHECK(0); return; }
    rpcool_server_add_handler(s, FN_INSPECT, h_inspect, NULL, 0);
    rpcool_server_start(s, 1);
    int r = t_in_child(truncate_child, (void *)name);
    CHECKF(r == 0, "client: %d (3: a truncation through its descriptor worked, 4: through "
           "/proc/self/fd, 5: its call failed afterwards)", r);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.faults, 0);
    rpcool_conn *c;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* the server is fine */
    if (c) {
        char *a = rpcool_strdup(c, "abc");
        CHECK_EQ(rpcool_call(c, FN_INSPECT, a, 4, NULL, NULL), 11);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* A call gets the union of per-call, connection, channel and handler flags (rpcool_ctx_safety);
   a handler registered with RPCOOL_SEAL refuses unsealed calls. */
static void g_safety_union(void)
{
    const char *name = t_uniq("gunion");
    rpcool_server *s = t_serve(name, NULL, 1);
    if (!s) return;
    rpcool_conn_opts o = {.safety = RPCOOL_COPY};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) {
        char *pg = (char *)rpcool_alloc_pages(c, 64);
        rpcool_call_opts co = {.safety = RPCOOL_SEAL};
        CHECK_EQ(rpcool_call_ex(c, T_FN_SAFETY, pg, 64, &co, NULL, NULL), RPCOOL_COPY | RPCOOL_SEAL | RPCOOL_SANDBOX);
        CHECK_EQ(rpcool_call(c, T_FN_SAFETY, pg, 64, NULL, NULL), RPCOOL_COPY | RPCOOL_SANDBOX);
        /* handler-required sealing */
        rpcool_free(c, pg);
        rpcool_disconnect(c);
    }
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        char *pg = (char *)rpcool_alloc_pages(c, 64);
        CHECK_EQ(rpcool_call(c, T_FN_SEALREQ, pg, 64, NULL, NULL), RPCOOL_E_POLICY);
        rpcool_call_opts co = {.safety = RPCOOL_SEAL, .seal_p = pg, .seal_len = 4096};
        CHECK_EQ(rpcool_call_ex(c, T_FN_SEALREQ, pg, 64, &co, NULL, NULL), 1);
        CHECK(t_writable(pg));
        rpcool_free(c, pg);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
    rpcool_server_opts so = {.safety = RPCOOL_COPY};
    s = t_serve(name, &so, 1);
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        char *a = rpcool_strdup(c, "x");
        CHECK_EQ(rpcool_call(c, T_FN_SAFETY, a, 2, NULL, NULL), RPCOOL_COPY | RPCOOL_SANDBOX);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* rpcool_ctx_need_str, rpcool_ctx_fail, rpcool_ctx_need on the private copy of a COPY call. */
static const char *private_str = "private";

static void g_ctx_helpers(void)
{
    const char *name = t_uniq("gctx");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serve_connect(name, 1, &s, &c)) return;
    char **arg = (char **)rpcool_alloc(c, sizeof *arg);
    *arg = rpcool_strdup(c, "twelve chars");
    CHECK_EQ(rpcool_call(c, T_FN_STR, arg, sizeof *arg, NULL, NULL), 12);
    char *mine = *arg;
    *arg = (char *)private_str;
    CHECK_EQ(rpcool_call(c, T_FN_STR, arg, sizeof *arg, NULL, NULL), RPCOOL_E_BADPTR);
    /* a string that runs to the end of the heap without a NUL */
    char *end = (char *)shmheap_base(rpcool_heap(c)) + shmheap_size(rpcool_heap(c)) - 64;
    void *tail = shmheap_aligned_alloc(rpcool_heap(c), 65536, 65536);
    if (tail && (char *)tail + 65536 == end + 64) {
        memset(end, 'a', 64);
        *arg = end;
        CHECK_EQ(rpcool_call(c, T_FN_STR, arg, sizeof *arg, NULL, NULL), RPCOOL_E_BADPTR);
    }
    if (tail) rpcool_free(c, tail);
    CHECK_EQ(rpcool_call(c, T_FN_FAIL, NULL, 0, NULL, NULL), -1234);
    char *txt = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, txt, 4, NULL, NULL), 1);
    CHECK(!strcmp(txt, "abc")); /* the handler wrote to its copy only */
    rpcool_free(c, txt);
    rpcool_free(c, mine);
    rpcool_free(c, arg);
    t_disconnect_close(c, s);
}

/* max_copy: a COPY argument larger than the server copies fails with RPCOOL_E_TOOBIG (a client
   picks its heap's size: it must not make every serving thread copy gigabytes), the server
   serves on, and 0 means 64 MiB. */
static void g_copy_max(void)
{
    const char *name = t_uniq("gcopy");
    rpcool_server_opts so = {.max_copy = (size_t)1 << 20};
    rpcool_server *s = t_serve(name, &so, 1);
    if (!s) return;
    rpcool_conn_opts co = {.heap_size = (size_t)256 << 20};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &co, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    char *big = (char *)rpcool_alloc(c, ((size_t)64 << 20) + 1);
    CHECK(big != NULL);
    if (big) {
        memset(big, 'b', (size_t)1 << 20);
        CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, big, (size_t)1 << 20, NULL, NULL), 1);
        CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, big, ((size_t)1 << 20) + 1, NULL, NULL), RPCOOL_E_TOOBIG);
        CHECK_EQ(big[0], 'b');
        CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, big, 16, NULL, NULL), 1); /* still served */
        CHECK(strstr(rpcool_strerror(RPCOOL_E_TOOBIG), "max_copy") != NULL);
    }
    t_disconnect_close(c, s);
    /* the default: 64 MiB */
    s = t_serve(name, NULL, 1);
    if (!s) return;
    c = NULL;
    CHECK_EQ(rpcool_connect(name, &co, &c), 0);
    if (c) {
        big = (char *)rpcool_alloc(c, ((size_t)64 << 20) + 1);
        CHECK(big != NULL);
        if (big) CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, big, ((size_t)64 << 20) + 1, NULL, NULL), RPCOOL_E_TOOBIG);
        if (big) CHECK_EQ(rpcool_call(c, T_FN_COPYNEED, big, 16, NULL, NULL), 1);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* "a range stays sealed while any call uses it": two sealed calls in flight on one page, the
   short one finishes first (seal_batch 1): the page stays read-only until the long one ends.
   And the seal of a call that timed out stays until the server answers; then it goes, and so
   does the reply nobody took. */
static void g_seals_in_flight(void)
{
    const char *name = t_uniq("gseal");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serve_connect(name, 2, &s, &c)) return;
    int *pg = (int *)rpcool_alloc_pages(c, 4096);
    pg[0] = 300;
    pg[1] = 1;
    rpcool_call_opts co = {.safety = RPCOOL_SEAL};
    co.seal_p = pg; /* a page: sealed (less than a page would be copied) */
    co.seal_len = 4096;
    uint64_t slow, quick;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, pg, sizeof(int), &co, NULL, NULL, &slow), 0);
    usleep(20000);
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, pg + 1, sizeof(int), &co, NULL, NULL, &quick), 0);
    CHECK_EQ(rpcool_wait(c, quick, NULL, NULL), 1);
    CHECKF(!t_writable(pg), "the page was unsealed while another sealed call still used it");
    CHECK_EQ(rpcool_wait(c, slow, NULL, NULL), 1);
    CHECK(t_writable(pg));
    /* a sealed call that times out */
    shmheap_stats st0, st1;
    CHECK_EQ(shmheap_check(rpcool_heap(c), &st0), 0);
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_SEAL;
    co.timeout_ms = 30;
    co.seal_p = pg;
    co.seal_len = 4096;
    CHECK_EQ(rpcool_call_ex(c, T_FN_SLOWREPLY, pg, 64, &co, NULL, NULL), RPCOOL_E_TIMEOUT);
    CHECKF(!t_writable(pg), "the seal of a call that timed out went before the server answered");
    usleep(300000);
    CHECK(rpcool_progress(c) >= 0);
    CHECKF(t_writable(pg), "the seal of a timed-out call stayed after the server answered");
    CHECK_EQ(shmheap_check(rpcool_heap(c), &st1), 0);
    CHECKF(st1.live_blocks == st0.live_blocks, "the reply of a timed-out call was not freed (%zu live blocks, %zu before)",
           st1.live_blocks, st0.live_blocks);
    rpcool_free(c, pg);
    t_disconnect_close(c, s);
}


/* The server dies during a sealed call (sync or async): the call fails with
   RPCOOL_E_PEERDEAD and rpcool_release makes the argument writable again. */
static void sealed_server_dies(int async)
{
    const char *name = t_uniq(async ? "sealda" : "seald");
    pid_t sp = t_fork_server(name);
    rpcool_conn_opts o = {.peer_check_ms = 20};
    rpcool_conn *c = t_connect_retry(name, &o);
    CHECK(c != NULL);
    if (!c) { t_kill_server(sp, name); return; }
    char *arg = (char *)rpcool_alloc_pages(c, 4096);
    memset(arg, 'a', 4096);
    rpcool_call_opts co = {.safety = RPCOOL_SEAL};
    if (async) {
        uint64_t id;
        CHECK_EQ(rpcool_call_async(c, T_FN_DIE, arg, 4096, &co, NULL, NULL, &id), 0);
        CHECK_EQ(rpcool_wait(c, id, NULL, NULL), RPCOOL_E_PEERDEAD);
    } else {
        CHECK_EQ(rpcool_call_ex(c, T_FN_DIE, arg, 4096, &co, NULL, NULL), RPCOOL_E_PEERDEAD);
    }
    waitpid(sp, NULL, 0);
    CHECK_EQ(rpcool_release(c), 0);
    CHECKF(t_writable(arg) == 1, "the argument is still read-only after rpcool_release");
    if (t_writable(arg) == 1) arg[0] = 'b';
    rpcool_free(c, arg);
    rpcool_disconnect(c);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
    t_rm_channel(name); /* a killed server's files */
}
static void test_sealed_server_dies(void) { sealed_server_dies(0); }
static void test_sealed_server_dies_async(void) { sealed_server_dies(1); }

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(test_copy);
    RUN(test_seal);
    RUN(test_seal_small);
    RUN(test_sandbox);
    RUN(test_heap_truncate_refused);
    RUN_NO_TSAN(g_safety_union);
    RUN_NO_TSAN(g_ctx_helpers);
    RUN_NO_TSAN(g_copy_max);
    RUN_NO_TSAN(g_seals_in_flight);
    RUN_NO_TSAN(test_sealed_server_dies);
    RUN_NO_TSAN(test_sealed_server_dies_async);
    return T_DONE();
}
