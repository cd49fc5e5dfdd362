/* tests/call_semantics.h - one suite of call semantics, run against every transport: what a
 * call does must not depend on the way it came. The suite is parameterised by the channel name
 * a client connects to; tests/test_rpcool_semantics.c runs it on shared memory (host tier),
 * tests/test_rpcool_pod.c over the pod transport ("pod:NAME", host tier), tests/vm/
 * test_rpcool_rdma.c over RDMA ("rdma://HOST/NAME", VM tier). A new transport runs it
 * too: serve with cs_serve in a process of its own, then cs_suite(CHANNEL) in the client.
 *
 *   cs_ok        a call answered: its reply, a block of the connection heap, freed by the caller
 *   cs_unknown   an id with no handler: RPCOOL_E_NOHANDLER
 *   cs_fail      a handler that fails after allocating a reply: its code, and no reply
 *   cs_limit     a handler over its time limit ends at its next checked read: RPCOOL_E_DEADLINE,
 *                counted in over_limit
 *   cs_budget    a handler walking a cycle with checked reads: RPCOOL_E_BUDGET, over_budget
 *   cs_cancel    a running handler sees rpcool_ctx_cancelled; a queued call cancelled never starts
 *   cs_copy      an RPCOOL_COPY handler reads a private copy of the argument (safety says so)
 *   cs_toobig    a COPY argument over the server's max_copy: RPCOOL_E_TOOBIG
 *   cs_defer     a deferred call answered later from another thread, while the next call is not
 *                held up
 *   cs_who       rpcool_ctx_peer: the caller's pid, the transport, authenticated or claimed
 *
 * Include the headers (rpcool.h with its implementation) and t.h (or vmt.h) first. */
#ifndef CALL_SEMANTICS_H
#define CALL_SEMANTICS_H
#include <pthread.h>

enum { CS_OK = 1, CS_FAIL, CS_LIMIT, CS_BUDGET, CS_CANCEL, CS_COPY, CS_DEFER, CS_WHO, CS_COUNTS,
       CS_QUIT, CS_UNKNOWN = 77 };
#define CS_MAX_COPY ((size_t)64 << 10) /* the suite's server's max_copy */
#define CS_LIMIT_MS 200u               /* CS_LIMIT's time limit */
#define CS_HEAP ((size_t)16 << 20)     /* the suite's connection heaps (the budget of a call) */
#define CS_FAIL_CODE (-77)

/* ---- the server's side (a process of its own) ---- */

static uint64_t cs_cancel_started, cs_cancel_seen;

static int cs_h_ok(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    char *r = (char *)rpcool_ctx_alloc(ctx, len ? len : 1);
    if (!r) return SHMHEAP_E_FULL;
    if (len) memcpy(r, rpcool_ctx_need(ctx, arg, len), len);
    rpcool_ctx_reply(ctx, r, len);
    return (int)len;
}

/* Allocates and replies, then fails: the caller gets the code and no reply. */
static int cs_h_fail(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    void *r = rpcool_ctx_alloc(ctx, 64);
    if (r) rpcool_ctx_reply(ctx, r, 64);
    return CS_FAIL_CODE;
}

/* Runs until its time limit ends it: a checked read every millisecond (up to 10 s). */
static int cs_h_limit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len, (void)user;
    for (int i = 0; i < 10000; i++) {
        rpcool_ctx_need(ctx, arg, 1);
        usleep(1000);
    }
    return 0;
}

struct cs_cnode {
    struct cs_cnode *next;
    uint64_t v;
};

/* Walks a list with checked reads: the client's list is a cycle. */
static int cs_h_budget(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len, (void)user;
    uint64_t sum = 0;
    for (const struct cs_cnode *n = (const struct cs_cnode *)arg; n; n = n->next)
        sum += ((const struct cs_cnode *)rpcool_ctx_need(ctx, n, sizeof *n))->v;
    return (int)(sum & 0xffff);
}

/* Spins (up to 10 s) until its call is cancelled. */
static int cs_h_cancel(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    __atomic_fetch_add(&cs_cancel_started, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2000; i++) {
        if (rpcool_ctx_cancelled(ctx)) {
            __atomic_fetch_add(&cs_cancel_seen, 1, __ATOMIC_SEQ_CST);
            return RPCOOL_E_CANCELLED;
        }
        usleep(5000);
    }
    return 0;
}

static int cs_fnv(const unsigned char *p, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 16777619u;
    return (int)(h & 0x7fffffff);
}

/* RPCOOL_COPY: the hash of its private copy, or -1 if rpcool_ctx_safety does not say COPY. */
static int cs_h_copy(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (!(rpcool_ctx_safety(ctx) & RPCOOL_COPY)) return -1;
    return cs_fnv((const unsigned char *)arg, len);
}

struct cs_late {
    rpcool_deferred *d;
    char text[64];
};

static void *cs_late_thread(void *p)
{
    struct cs_late *l = (struct cs_late *)p;
    usleep(100000);
    size_t n = strlen(l->text) + 1;
    char *r = (char *)rpcool_deferred_alloc(l->d, n);
    if (r) memcpy(r, l->text, n);
    rpcool_deferred_reply(l->d, r ? 0 : SHMHEAP_E_FULL, r, r ? n : 0);
    free(l);
    return NULL;
}

/* Deferred: another thread answers 100 ms later with "late: " + the argument. */
static int cs_h_defer(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    struct cs_late *l = (struct cs_late *)calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    snprintf(l->text, sizeof l->text, "late: %.*s", (int)(len < 40 ? len : 40), (char *)arg);
    int rc = rpcool_ctx_defer(ctx, &l->d);
    pthread_t t;
    if (rc || pthread_create(&t, NULL, cs_late_thread, l)) {
        free(l);
        return rc ? rc : -EAGAIN;
    }
    pthread_detach(t);
    return 0;
}

static int cs_h_who(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_peer *r = (rpcool_peer *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    memcpy(r, rpcool_ctx_peer(ctx), sizeof *r);
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return 0;
}

enum { CS_N = 6 };
/* {cancel handlers started, cancels they saw, stats: cancelled, over_limit, over_budget, calls} */
static int cs_h_counts(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len;
    rpcool_server_stats st;
    uint64_t *v = (uint64_t *)rpcool_ctx_alloc(ctx, CS_N * sizeof *v);
    if (!v || rpcool_server_get_stats((rpcool_server *)user, &st)) return -1;
    v[0] = __atomic_load_n(&cs_cancel_started, __ATOMIC_SEQ_CST);
    v[1] = __atomic_load_n(&cs_cancel_seen, __ATOMIC_SEQ_CST);
    v[2] = st.cancelled;
    v[3] = st.over_limit;
    v[4] = st.over_budget;
    v[5] = st.calls;
    rpcool_ctx_reply(ctx, v, CS_N * sizeof *v);
    return 0;
}

static int cs_h_quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    rpcool_server_stop((rpcool_server *)user);
    return 0;
}

/* Serve the suite on channel name (rdma: as rpcool_server_opts.rdma, or NULL) with one serving
   thread, until a client calls CS_QUIT; ready (if >= 0) gets a byte once it serves. Returns
   the process's exit code. */
static __attribute__((unused)) int cs_serve(const char *name, const char *rdma, int ready)
{
    rpcool_server *s = NULL;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.rdma = rdma;
    so.max_copy = CS_MAX_COPY;
    int rc = rpcool_server_open(name, &so, &s);
    if (rc) {
        printf("# cs_serve %s: %s\n", name, rpcool_strerror(rc));
        return 1;
    }
    static const struct { unsigned id; rpcool_handler *fn; unsigned safety, limit_ms; } hs[] = {
        {CS_OK, cs_h_ok, 0, 0},         {CS_FAIL, cs_h_fail, 0, 0},
        {CS_LIMIT, cs_h_limit, 0, CS_LIMIT_MS}, {CS_BUDGET, cs_h_budget, 0, 0},
        {CS_CANCEL, cs_h_cancel, 0, 0}, {CS_COPY, cs_h_copy, RPCOOL_COPY, 0},
        {CS_DEFER, cs_h_defer, 0, 0},   {CS_WHO, cs_h_who, 0, 0},
        {CS_COUNTS, cs_h_counts, 0, 0}, {CS_QUIT, cs_h_quit, 0, 0},
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        rpcool_handler_opts ho;
        memset(&ho, 0, sizeof ho);
        ho.safety = hs[i].safety;
        ho.limit_ms = hs[i].limit_ms;
        rpcool_server_add_handler_ex(s, hs[i].id, hs[i].fn, s, &ho);
    }
    if (ready >= 0 && write(ready, "r", 1) != 1) return 1;
    rpcool_serve(s);
    return rpcool_server_close(s) ? 1 : 0;
}

/* ---- the client's side ---- */

static const char *cs_channel;

static rpcool_conn *cs_conn(void)
{
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 20000;
    o.heap_size = CS_HEAP;
    int rc = rpcool_connect(cs_channel, &o, &c);
    CHECKF(rc == 0, "connect %s: %s", cs_channel, rpcool_strerror(rc));
    return rc ? NULL : c;
}

static int cs_counts(rpcool_conn *c, uint64_t v[CS_N])
{
    void *ret = NULL;
    size_t n = 0;
    int rc = rpcool_call(c, CS_COUNTS, NULL, 0, &ret, &n);
    if (rc == 0 && n == CS_N * sizeof *v) memcpy(v, ret, n);
    if (ret) rpcool_free(c, ret);
    return rc ? rc : n == CS_N * sizeof *v ? 0 : -1;
}

static void cs_ok(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    for (int i = 0; i < 20; i++) {
        char *m = rpcool_strdup(c, "semantics");
        void *ret = NULL;
        size_t n = 0;
        CHECK_EQ(rpcool_call(c, CS_OK, m, 10, &ret, &n), 10);
        CHECKF(ret && n == 10 && !strcmp((char *)ret, "semantics"), "reply %zu bytes", n);
        CHECK(ret && shmheap_contains(rpcool_heap(c), ret, n));
        rpcool_free(c, ret);
        rpcool_free(c, m);
    }
    rpcool_disconnect(c);
}

static void cs_unknown(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    void *ret = (void *)1;
    size_t n = 1;
    CHECK_EQ(rpcool_call(c, CS_UNKNOWN, NULL, 0, &ret, &n), RPCOOL_E_NOHANDLER);
    CHECK(ret == NULL && n == 0);
    CHECK_EQ(rpcool_call(c, CS_OK, NULL, 0, NULL, NULL), 0); /* and the connection serves on */
    rpcool_disconnect(c);
}

static void cs_fail(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    void *ret = (void *)1;
    size_t n = 1;
    CHECK_EQ(rpcool_call(c, CS_FAIL, NULL, 0, &ret, &n), CS_FAIL_CODE);
    CHECK(ret == NULL && n == 0); /* a failed call returns no reply (its blocks are freed) */
    rpcool_disconnect(c);
}

static void cs_limit(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    uint64_t a[CS_N], b[CS_N];
    CHECK_EQ(cs_counts(c, a), 0);
    char *m = rpcool_strdup(c, "x");
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_call(c, CS_LIMIT, m, 2, NULL, NULL), RPCOOL_E_DEADLINE);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000u;
    CHECKF(ms >= CS_LIMIT_MS && ms < 8000, "ended after %llu ms", (unsigned long long)ms);
    CHECK_EQ(cs_counts(c, b), 0);
    CHECK_EQ(b[3], a[3] + 1); /* over_limit */
    CHECK_EQ(rpcool_call(c, CS_OK, m, 2, NULL, NULL), 2); /* the thread serves on */
    rpcool_free(c, m);
    rpcool_disconnect(c);
}

static void cs_budget(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    uint64_t a[CS_N], b[CS_N];
    CHECK_EQ(cs_counts(c, a), 0);
    struct cs_cnode *n = (struct cs_cnode *)rpcool_alloc(c, 2 * sizeof *n);
    if (!n) {
        CHECK(n != NULL);
        rpcool_disconnect(c);
        return;
    }
    n[0].next = &n[1], n[0].v = 1;
    n[1].next = NULL, n[1].v = 2;
    CHECK_EQ(rpcool_call(c, CS_BUDGET, n, 2 * sizeof *n, NULL, NULL), 3); /* a list: its sum */
    n[1].next = &n[0]; /* a cycle */
    CHECK_EQ(rpcool_call(c, CS_BUDGET, n, 2 * sizeof *n, NULL, NULL), RPCOOL_E_BUDGET);
    CHECK_EQ(cs_counts(c, b), 0);
    CHECK_EQ(b[4], a[4] + 1); /* over_budget */
    rpcool_free(c, n);
    rpcool_disconnect(c);
}

static void cs_cancel(void)
{
    rpcool_conn *q = cs_conn(), *c = q ? cs_conn() : NULL;
    if (!c) {
        if (q) rpcool_disconnect(q);
        return;
    }
    uint64_t a[CS_N], b[CS_N], ida = 0, idb = 0;
    CHECK_EQ(cs_counts(q, a), 0);
    CHECK_EQ(rpcool_call_async(c, CS_CANCEL, NULL, 0, NULL, NULL, NULL, &ida), 0);
    CHECK_EQ(rpcool_call_async(c, CS_CANCEL, NULL, 0, NULL, NULL, NULL, &idb), 0);
    sleep(2); /* the first one runs, the second waits behind it (one serving thread) */
    CHECK_EQ(rpcool_cancel(c, idb), 0);
    CHECK_EQ(rpcool_cancel(c, ida), 0);
    memcpy(b, a, sizeof b);
    for (int k = 0; k < 100; k++) { /* the server meets the second one */
        if (cs_counts(q, b) || b[2] > a[2]) break;
        usleep(50000);
    }
    CHECKF(b[0] == a[0] + 1 && b[1] == a[1] + 1 && b[2] == a[2] + 1,
           "started %llu -> %llu, saw the cancel %llu -> %llu, never started %llu -> %llu",
           (unsigned long long)a[0], (unsigned long long)b[0], (unsigned long long)a[1],
           (unsigned long long)b[1], (unsigned long long)a[2], (unsigned long long)b[2]);
    CHECK_EQ(rpcool_call(c, CS_OK, NULL, 0, NULL, NULL), 0); /* its slots came back */
    rpcool_disconnect(c);
    rpcool_disconnect(q);
}

static void cs_copy(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    unsigned char *m = (unsigned char *)rpcool_alloc(c, 1000);
    if (!m) {
        CHECK(m != NULL);
        rpcool_disconnect(c);
        return;
    }
    for (int i = 0; i < 1000; i++) m[i] = (unsigned char)(i * 7 + 3);
    CHECK_EQ(rpcool_call(c, CS_COPY, m, 1000, NULL, NULL), cs_fnv(m, 1000));
    rpcool_free(c, m);
    rpcool_disconnect(c);
}

static void cs_toobig(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    char *m = (char *)rpcool_alloc(c, CS_MAX_COPY + 1);
    if (!m) {
        CHECK(m != NULL);
        rpcool_disconnect(c);
        return;
    }
    memset(m, 'z', CS_MAX_COPY + 1);
    CHECK_EQ(rpcool_call(c, CS_COPY, m, CS_MAX_COPY + 1, NULL, NULL), RPCOOL_E_TOOBIG);
    CHECK_EQ(rpcool_call(c, CS_COPY, m, CS_MAX_COPY, NULL, NULL), cs_fnv((unsigned char *)m,
                                                                         CS_MAX_COPY));
    rpcool_free(c, m);
    rpcool_disconnect(c);
}

static void cs_defer(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    uint64_t id = 0;
    char *m = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call_async(c, CS_DEFER, m, 4, NULL, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_call(c, CS_OK, m, 4, NULL, NULL), 4); /* not held up by the deferred call */
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_wait(c, id, &ret, &n), 0);
    CHECKF(ret && n == 10 && !strcmp((char *)ret, "late: abc"), "reply %zu bytes: %s", n,
           ret ? (char *)ret : "(none)");
    CHECK(ret && shmheap_contains(rpcool_heap(c), ret, n));
    rpcool_free(c, ret);
    rpcool_free(c, m);
    rpcool_disconnect(c);
}

static void cs_who(void)
{
    rpcool_conn *c = cs_conn();
    if (!c) return;
    void *ret = NULL;
    size_t n = 0;
    int rdma = !strncmp(cs_channel, "rdma:", 5), pod = !strncmp(cs_channel, "pod:", 4);
    CHECK_EQ(rpcool_call(c, CS_WHO, NULL, 0, &ret, &n), 0);
    const rpcool_peer *p = (const rpcool_peer *)ret;
    CHECK(p && n == sizeof *p);
    if (p && n == sizeof *p) {
        CHECK_EQ(p->pid, getpid());
        CHECK_EQ(p->uid, getuid());
        CHECK_EQ(p->transport, rdma  ? RPCOOL_TRANSPORT_RDMA
                               : pod ? RPCOOL_TRANSPORT_POD
                                     : RPCOOL_TRANSPORT_SHM);
        CHECK_EQ(p->authenticated, rdma || pod ? 0 : 1); /* RDMA, pod: what the client claims */
    }
    if (ret) rpcool_free(c, ret);
    rpcool_disconnect(c);
}

/* The suite against channel, then CS_QUIT to its server. */
static __attribute__((unused)) void cs_suite(const char *channel)
{
    cs_channel = channel;
    RUN(cs_ok);
    RUN(cs_unknown);
    RUN(cs_fail);
    RUN(cs_limit);
    RUN(cs_budget);
    RUN(cs_cancel);
    RUN(cs_copy);
    RUN(cs_toobig);
    RUN(cs_defer);
    RUN(cs_who);
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.heap_size = CS_HEAP;
    if (rpcool_connect(channel, &o, &c) == 0) {
        rpcool_call(c, CS_QUIT, NULL, 0, NULL, NULL);
        rpcool_disconnect(c);
    }
}

#endif /* CALL_SEMANTICS_H */
