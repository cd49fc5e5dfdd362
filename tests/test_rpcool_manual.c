/* rpcool.h's manual held to the letter, through the public API only: the sentences of sections 2
 * (deferred replies, asynchronous calls), 6 (failures), 8 (errors), 9 (limits) and 12 (callers,
 * connection hooks, cancelling, stats), each a small check named after what it promises. */
// TSAN
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <pthread.h>

enum { FN_PEER = 30, FN_CUSER = 31, FN_NEG = 32, FN_DFAIL = 33, FN_DNOREPLY = 34, FN_DLATE = 35,
       FN_DHOLD = 36, FN_RUNCANCEL = 37, FN_COUNT = 38, FN_CANCELLED = 39, FN_DRET = 40 };

/* ---- handlers */
static int h_cuser(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    void *u = rpcool_ctx_conn_user(ctx);
    return u ? *(int *)u : 0;
}

static int h_neg(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    void *b = rpcool_ctx_alloc(ctx, 100);
    rpcool_ctx_reply(ctx, b, 100);
    return -1234;
}

static int h_cancelled(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    return rpcool_ctx_cancelled(ctx);
}

static int counted;
static int h_count(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return __atomic_add_fetch(&counted, 1, __ATOMIC_SEQ_CST);
}

/* Deferred, with a block of rpcool_ctx_alloc before and one of rpcool_deferred_alloc after:
   answered with a failure and a pointer */
static int h_dfail(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    void *a = rpcool_ctx_alloc(ctx, 4000);
    rpcool_deferred *d;
    if (!a || rpcool_ctx_defer(ctx, &d)) return -1;
    void *b = rpcool_deferred_alloc(d, 5000);
    return rpcool_deferred_reply(d, -77, b, 5000) ? -2 : 55;
}

/* ... answered with success and no reply */
static int h_dnoreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    void *a = rpcool_ctx_alloc(ctx, 4000);
    rpcool_deferred *d;
    if (!a || rpcool_ctx_defer(ctx, &d)) return -1;
    rpcool_deferred_alloc(d, 5000);
    return rpcool_deferred_reply(d, 3, NULL, 0) ? -2 : 55;
}

/* ... answered with the ctx_alloc block, and the handler returns something else */
static int h_dret(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    char *a = (char *)rpcool_ctx_alloc(ctx, 8);
    rpcool_deferred *d;
    if (!a || rpcool_ctx_defer(ctx, &d)) return -1;
    memcpy(a, "defer", 6);
    rpcool_deferred_reply(d, 9, a, 6);
    return 42;
}

/* Deferred; a thread answers after the int argument's milliseconds with rpcool_deferred_fail */
struct late { rpcool_deferred *d; int ms; };
static int late_rc = 1;
static void *late_fail(void *p)
{
    struct late *l = (struct late *)p;
    usleep((useconds_t)l->ms * 1000);
    __atomic_store_n(&late_rc, rpcool_deferred_fail(l->d, -321), __ATOMIC_SEQ_CST);
    free(l);
    return NULL;
}

static int h_dlate(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    struct late *l = (struct late *)malloc(sizeof *l);
    l->ms = len >= sizeof(int) ? *(int *)arg : 10;
    if (rpcool_ctx_defer(ctx, &l->d)) { free(l); return -1; }
    pthread_t t;
    pthread_create(&t, NULL, late_fail, l);
    pthread_detach(t);
    return 0;
}

/* Deferred and kept in `held` until the test answers it */
static rpcool_deferred *held;
static int h_dhold(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_deferred *d;
    if (rpcool_ctx_defer(ctx, &d)) return -1;
    __atomic_store_n(&held, d, __ATOMIC_SEQ_CST);
    return 0;
}

/* Runs until cancelled (3 s at most), then replies with a block: "whatever it returns is freed" */
static int run_started;
static int h_runcancel(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    __atomic_store_n(&run_started, 1, __ATOMIC_SEQ_CST);
    for (int k = 0; k < 3000 && !rpcool_ctx_cancelled(ctx); k++) usleep(1000);
    void *b = rpcool_ctx_alloc(ctx, 3000);
    rpcool_ctx_reply(ctx, b, 3000);
    return 1;
}

/* ---- the hooks */
struct hk {
    pthread_mutex_t lock;
    int refuse;             /* what on_connect returns */
    int connects, disconnects, why, order_bad, slot_in_connect, cu_before, pid_ok;
    int cuser_value, last_cu, last_slot, last_pid;
    rpcool_server *s;
};

static int on_connect(rpcool_server *s, const rpcool_peer *p, void **cu, void *user)
{
    struct hk *h = (struct hk *)user;
    pthread_mutex_lock(&h->lock);
    h->slot_in_connect = (int)p->slot;
    h->cu_before = *cu == NULL;
    h->pid_ok = p->pid == getpid() && p->uid == getuid() && p->gid == getgid() &&
                p->authenticated == 1 && p->transport == RPCOOL_TRANSPORT_SHM && !p->addr[0];
    h->s = s;
    int r = h->refuse;
    if (!r) {
        h->connects++;
        int *v = (int *)malloc(sizeof *v);
        *v = ++h->cuser_value;
        *cu = v;
    }
    pthread_mutex_unlock(&h->lock);
    return r;
}

static void on_disconnect(rpcool_server *s, const rpcool_peer *p, void *cu, int why, void *user)
{
    struct hk *h = (struct hk *)user;
    pthread_mutex_lock(&h->lock);
    if (s != h->s) h->order_bad = 1;
    h->why = why;
    h->last_cu = cu ? *(int *)cu : -1;
    h->last_slot = (int)p->slot;
    h->last_pid = p->pid;
    pthread_mutex_unlock(&h->lock);
    free(cu);
    __atomic_add_fetch(&h->disconnects, 1, __ATOMIC_SEQ_CST);
}

static rpcool_server *open_with(const char *name, struct hk *h, int hooks, unsigned max_conns,
                                unsigned threads)
{
    static const t_handler hs[] = {
        {FN_PEER, t_h_peer, 0}, {FN_CUSER, h_cuser, 0}, {FN_NEG, h_neg, 0},
        {FN_DFAIL, h_dfail, 0}, {FN_DNOREPLY, h_dnoreply, 0}, {FN_DLATE, h_dlate, 0},
        {FN_DHOLD, h_dhold, 0}, {FN_RUNCANCEL, h_runcancel, 0}, {FN_COUNT, h_count, 0},
        {FN_CANCELLED, h_cancelled, 0}, {FN_DRET, h_dret, 0}, {T_FN_SLOW, t_h_slow, 0},
        {T_FN_ECHO, t_h_echo, 0}};
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.reap_ms = 20;
    o.max_conns = max_conns;
    if (h) {
        memset(h, 0, sizeof *h);
        pthread_mutex_init(&h->lock, NULL);
        if (hooks & 1) o.on_connect = on_connect;
        if (hooks & 2) o.on_disconnect = on_disconnect;
        o.hook_user = h;
    }
    return t_server_with(name, &o, hs, sizeof hs / sizeof hs[0], threads);
}

/* A server of one thread with the handlers of open_with, no hooks, and a connection to it: 0,
   or -1 (a FAIL line, nothing left open). */
static int conn_to(const char *base, rpcool_server **s, rpcool_conn **c)
{
    const char *name = t_uniq(base);
    *c = NULL;
    if (!(*s = open_with(name, NULL, 0, 0, 1))) return -1;
    CHECK_EQ(rpcool_connect(name, NULL, c), 0);
    if (*c) return 0;
    rpcool_server_close(*s);
    return -1;
}

/* An int argument of ms (T_FN_SLOW's milliseconds) in c's heap. */
static int *ms_arg(rpcool_conn *c, int ms)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (a) *a = ms;
    return a;
}

static size_t used(rpcool_conn *c)
{
    shmheap_stats st;
    memset(&st, 0, sizeof st);
    shmheap_check(rpcool_heap(c), &st);
    return st.used_bytes;
}

/* ---- section 12: callers */
static void peer_is_the_client(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-peer", &s, &c)) return;
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(c, FN_PEER, NULL, 0, &ret, &n), 0);
    CHECK_EQ(n, sizeof(rpcool_peer));
    if (ret) {
        rpcool_peer *p = (rpcool_peer *)ret;
        CHECK_EQ(p->transport, RPCOOL_TRANSPORT_SHM);
        CHECK_EQ(p->authenticated, 1);
        CHECK_EQ(p->pid, getpid());
        CHECK_EQ(p->uid, getuid());
        CHECK_EQ(p->gid, getgid());
        CHECK(p->slot < RPCOOL_DEFAULT_MAX_CONNS);
        CHECK_EQ(p->addr[0], 0);
        CHECK(p->pod[0] != 0);
        /* a name, not a path: the pod directory's name in /dev/shm */
        const char *pod = getenv("SHMHEAP_POD");
#ifdef T_TSAN
        const char *dflt = "shmheap-tsan.pod";
#else
        const char *dflt = "shmheap.pod";
#endif
        CHECKF(!strcmp(p->pod, pod && *pod ? pod : dflt) && !strchr(p->pod, '/'), "pod \"%s\"",
               p->pod);
        rpcool_conn_stats cs[2];
        CHECK_EQ(rpcool_server_conns(s, cs, 2), 1);
        CHECK_EQ(cs[0].peer.slot, p->slot);
        CHECK(!strcmp(cs[0].peer.pod, p->pod));
    }
    rpcool_free(c, ret);
    CHECK_EQ(rpcool_call(c, FN_CUSER, NULL, 0, NULL, NULL), 0); /* no hook: NULL */
    t_disconnect_close(c, s);
}

/* ---- section 12: hooks */
static void hook_connect_sees_claims(void)
{
    struct hk h;
    const char *name = t_uniq("m-hk");
    rpcool_server *s = open_with(name, &h, 3, 0, 1);
    rpcool_conn *c = NULL;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    CHECK_EQ(h.slot_in_connect, RPCOOL_MAX_CONNS);
    CHECK_EQ(h.cu_before, 1);
    CHECK_EQ(h.pid_ok, 1);
    CHECK_EQ(rpcool_call(c, FN_CUSER, NULL, 0, NULL, NULL), 1);
    CHECK_EQ(rpcool_disconnect(c), 0);
    CHECK(t_wait_for(&h.disconnects, 1, 1000));
    CHECK_EQ(h.why, 0);
    CHECK_EQ(h.order_bad, 0);
    CHECK_EQ(h.last_cu, 1);           /* its own conn_user */
    CHECK(h.last_slot < RPCOOL_DEFAULT_MAX_CONNS); /* a slot was given */
    CHECK_EQ(h.last_pid, getpid());
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 1);
}

static void hook_refusal_codes(void)
{
    struct hk h;
    const char *name = t_uniq("m-ref");
    rpcool_server *s = open_with(name, &h, 3, 0, 1);
    rpcool_conn *c = NULL;
    if (!s) return;
    h.refuse = 5; /* positive: RPCOOL_E_REFUSED */
    CHECK_EQ(rpcool_connect(name, NULL, &c), RPCOOL_E_REFUSED);
    CHECK(c == NULL);
    h.refuse = -EPERM;
    CHECK_EQ(rpcool_connect(name, NULL, &c), -EPERM);
    h.refuse = RPCOOL_E_POLICY;
    CHECK_EQ(rpcool_connect(name, NULL, &c), RPCOOL_E_POLICY);
    h.refuse = -123456; /* a code of the user's own */
    CHECK_EQ(rpcool_connect(name, NULL, &c), -123456);
    rpcool_server_stats st;
    CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
    CHECK_EQ(st.refused, 4);
    CHECK_EQ(st.accepted, 0);
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 0); /* only accepted connections */
}

static void hook_closed_by_server(void)
{
    struct hk h;
    const char *name = t_uniq("m-cl");
    rpcool_server *s = open_with(name, &h, 3, 0, 1);
    rpcool_conn *a = NULL, *b = NULL;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    CHECK_EQ(rpcool_connect(name, NULL, &b), 0);
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 2); /* within rpcool_server_close */
    CHECK_EQ(h.why, RPCOOL_E_CLOSED);
    rpcool_disconnect(a);
    rpcool_disconnect(b);
    usleep(50000);
    CHECK_EQ(h.disconnects, 2);
}

static void hook_disconnect_without_connect(void)
{
    struct hk h;
    const char *name = t_uniq("m-dc");
    rpcool_server *s = open_with(name, &h, 2, 0, 1);
    rpcool_conn *a = NULL;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    CHECK_EQ(rpcool_call(a, FN_CUSER, NULL, 0, NULL, NULL), 0);
    rpcool_disconnect(a);
    CHECK(t_wait_for(&h.disconnects, 1, 1000));
    CHECK_EQ(h.why, 0);
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 1);
}

/* a connect that fails after on_connect accepted it: on_disconnect gets its code */
static void hook_noslot_after_accept(void)
{
    struct hk h;
    const char *name = t_uniq("m-ns");
    rpcool_server *s = open_with(name, &h, 3, 1, 1);
    rpcool_conn *a = NULL, *b = NULL;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    CHECK_EQ(rpcool_connect(name, NULL, &b), RPCOOL_E_NOSLOT);
    CHECK(t_wait_for(&h.disconnects, 1, 1000));
    pthread_mutex_lock(&h.lock);
    CHECK_EQ(h.connects, 2);
    CHECK_EQ(h.why, RPCOOL_E_NOSLOT);
    pthread_mutex_unlock(&h.lock);
    rpcool_disconnect(a);
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 2);
}

static int child_hold(void *name)
{
    rpcool_conn *c = NULL;
    if (rpcool_connect((const char *)name, NULL, &c)) return 1;
    uint64_t id;
    if (rpcool_call_async(c, FN_DHOLD, NULL, 0, NULL, NULL, NULL, &id)) return 2;
    printf("called\n");
    fflush(stdout);
    for (;;) pause();
}

/* a client dies while its call is deferred: on_disconnect waits for the deferred call */
static void hook_waits_for_deferred(void)
{
    struct hk h;
    const char *name = t_uniq("m-dd");
    rpcool_server *s = open_with(name, &h, 3, 0, 1);
    if (!s) return;
    __atomic_store_n(&held, NULL, __ATOMIC_SEQ_CST);
    int pfd[2];
    pid_t pid = t_fork_pipe(pfd);
    if (pid == 0) {
        dup2(pfd[1], 1);
        _exit(child_hold((void *)name));
    }
    char buf[8];
    CHECK(read(pfd[0], buf, sizeof buf) > 0);
    close(pfd[0]);
    for (int k = 0; k < 1000 && !__atomic_load_n(&held, __ATOMIC_SEQ_CST); k++) usleep(1000);
    rpcool_deferred *d = __atomic_load_n(&held, __ATOMIC_SEQ_CST);
    CHECK(d != NULL);
    t_kill_wait(pid);
    usleep(200000); /* 10 reap periods */
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 0);
    if (d) {
        void *b = rpcool_deferred_alloc(d, 64); /* the heap is still there */
        CHECK(b != NULL);
        rpcool_deferred_reply(d, 0, b, 64);
    }
    CHECK(t_wait_for(&h.disconnects, 1, 1000));
    CHECK_EQ(h.why, RPCOOL_E_PEERDEAD);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.reaped, 1);
    rpcool_server_close(s);
    CHECK_EQ(h.disconnects, 1);
}

/* ---- section 12: cancelling */
static int cb_runs;
static void cb_count(rpcool_conn *c, int status, void *ret, size_t n, void *user)
{
    (void)status, (void)n, (void)user;
    rpcool_free(c, ret);
    __atomic_add_fetch(&cb_runs, 1, __ATOMIC_SEQ_CST);
}

static void cancel_bad_ids(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-cbad", &s, &c)) return;
    CHECK_EQ(rpcool_cancel(NULL, 0), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_cancel(c, 12345678), RPCOOL_E_INVAL);
    uint64_t id;
    int *ms = ms_arg(c, 100);
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_cancel(c, id), 0);
    CHECK_EQ(rpcool_cancel(c, id), RPCOOL_E_INVAL); /* finished: no such call any more */
    void *ret = (void *)1;
    CHECK_EQ(rpcool_poll(c, id, &ret, NULL), RPCOOL_E_CANCELLED);
    CHECK_EQ(rpcool_wait(c, id, &ret, NULL), RPCOOL_E_CANCELLED);
    uint64_t done;
    CHECK_EQ(rpcool_call_async(c, FN_CANCELLED, NULL, 0, NULL, NULL, NULL, &done), 0);
    CHECK_EQ(rpcool_wait(c, done, NULL, NULL), 0); /* not cancelled: 0 */
    CHECK_EQ(rpcool_cancel(c, done), RPCOOL_E_INVAL); /* waited for already */
    CHECK(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0);
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

/* a callback of a cancelled call never runs, nor one of a call cancelled after its reply */
static void cancel_callback_never_runs(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-ccb", &s, &c)) return;
    __atomic_store_n(&cb_runs, 0, __ATOMIC_SEQ_CST);
    int *ms = ms_arg(c, 100);
    uint64_t a, b;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, cb_count, NULL, &a), 0);
    CHECK_EQ(rpcool_call_async(c, T_FN_ECHO, ms, sizeof *ms, NULL, cb_count, NULL, &b), 0);
    CHECK_EQ(rpcool_cancel(c, a), 0);
    usleep(250000); /* both answered by now */
    CHECK_EQ(rpcool_cancel(c, b), 1);
    for (int k = 0; k < 20; k++) {
        rpcool_progress(c);
        usleep(5000);
    }
    CHECK_EQ(__atomic_load_n(&cb_runs, __ATOMIC_SEQ_CST), 0);
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

/* a running handler sees the flag, and what it returns is freed: the heap is as before */
static void cancel_running_reply_freed(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-crun", &s, &c)) return;
    CHECK_EQ(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0, 1);
    size_t before = used(c);
    uint64_t t0 = t_cancel_running(c, FN_RUNCANCEL, &run_started, 2000);
    CHECK_EQ(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0, 1); /* after it on one thread */
    CHECKF(rcp__now_ns() - t0 < 1000000000ull, "the handler did not see the flag");
    CHECK_EQ(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0, 1);
    CHECK_EQ(used(c), before);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.cancelled, 0); /* it had started */
    t_disconnect_close(c, s);
}

/* ---- section 12: stats */
static void stats_counts(void)
{
    const char *name = t_uniq("m-st");
    rpcool_server *s = open_with(name, NULL, 0, 10, 1);
    if (!s) return;
    rpcool_server_stats st;
    CHECK_EQ(rpcool_server_get_stats(NULL, &st), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_server_get_stats(s, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_server_conns(NULL, NULL, 0), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_server_conns(s, NULL, 0), 0);
    rpcool_conn *a = NULL, *b = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    CHECK_EQ(rpcool_connect(name, NULL, &b), 0);
    for (int k = 0; k < 5; k++) CHECK(rpcool_call(a, FN_COUNT, NULL, 0, NULL, NULL) > 0);
    CHECK_EQ(rpcool_call(b, 999, NULL, 0, NULL, NULL), RPCOOL_E_NOHANDLER);
    rpcool_disconnect(b);
    for (int k = 0; k < 100 && rpcool_server_conns(s, NULL, 0) != 1; k++) usleep(5000);
    CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
    CHECK_EQ(st.calls, 5);
    CHECK_EQ(st.accepted, 2);
    CHECK_EQ(st.closed, 1);
    CHECK_EQ(st.reaped, 0);
    CHECK_EQ(st.conns, 1);
    CHECK_EQ(st.max_conns, 10);
    CHECK_EQ(st.server_pid, getpid());
    CHECK_EQ(st.cancelled, 0);
    CHECK(st.ready <= RPCOOL_MAX_PREALLOC);
    rpcool_conn_stats cs[4];
    memset(cs, 0xff, sizeof cs);
    CHECK_EQ(rpcool_server_conns(s, cs, 4), 1);
    CHECK_EQ(cs[0].peer.pid, getpid());
    CHECK_EQ(cs[0].inflight, 0);
    /* in flight: a slow call posted, not answered */
    int *ms = (int *)rpcool_alloc(a, sizeof *ms);
    *ms = 200;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(a, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    usleep(50000);
    CHECK_EQ(rpcool_server_conns(s, cs, 4), 1);
    CHECK_EQ(cs[0].inflight, 1);
    rpcool_server_stats cst;
    rpcool_conn_stats ccs[4];
    unsigned n = 99;
    CHECK_EQ(rpcool_channel_stats(name, 0, &cst, ccs, 4, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(cst.accepted, 2);
    CHECK_EQ(cst.closed, 1);
    CHECK_EQ(cst.max_conns, 10);
    CHECK_EQ(cst.server_pid, getpid());
    CHECK_EQ(ccs[0].peer.pid, getpid());
    CHECK_EQ(ccs[0].peer.uid, getuid());
    CHECK_EQ(ccs[0].peer.authenticated, 1);
    CHECK_EQ(ccs[0].peer.slot, cs[0].peer.slot);
    CHECK(!strcmp(ccs[0].peer.pod, cs[0].peer.pod));
    CHECK_EQ(ccs[0].inflight, 1);
    CHECK_EQ(rpcool_channel_stats(name, 0, &cst, NULL, 0, NULL), 0);
    CHECK_EQ(rpcool_wait(a, id, NULL, NULL), 1);
    rpcool_free(a, ms);
    t_disconnect_close(a, s);
}

static void stats_channel_errors(void)
{
    rpcool_server_stats st;
    unsigned n;
    CHECK_EQ(rpcool_channel_stats("bad/name", 0, &st, NULL, 0, &n), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_channel_stats("", 0, &st, NULL, 0, &n), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_channel_stats(NULL, 0, &st, NULL, 0, &n), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_channel_stats(t_uniq("m-none"), 0, &st, NULL, 0, &n), RPCOOL_E_NOCHANNEL);
    CHECK_EQ(rpcool_channel_stats("x", 0, NULL, NULL, 0, &n), RPCOOL_E_INVAL);
}

/* the manual's cancel count: a call still queued is never started, and counted */
static void stats_cancelled_queued(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-cq", &s, &c)) return;
    int *ms = ms_arg(c, 200);
    uint64_t slow, v;
    __atomic_store_n(&counted, 0, __ATOMIC_SEQ_CST);
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &slow), 0);
    usleep(50000);
    CHECK_EQ(rpcool_call_async(c, FN_COUNT, NULL, 0, NULL, NULL, NULL, &v), 0);
    CHECK_EQ(rpcool_cancel(c, v), 0);
    CHECK_EQ(rpcool_wait(c, slow, NULL, NULL), 1);
    CHECK_EQ(rpcool_call(c, T_FN_ECHO, ms, sizeof *ms, NULL, NULL), 0);
    CHECK_EQ(__atomic_load_n(&counted, __ATOMIC_SEQ_CST), 0);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.cancelled, 1);
    CHECK_EQ(st.calls, 2); /* the slow call and the echo: a cancelled call is no handler run */
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

/* ---- section 2: deferred replies */
static void defer_failed_frees_blocks(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-dfb", &s, &c)) return;
    CHECK(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0);
    size_t before = used(c);
    void *ret = (void *)1;
    size_t n = 7;
    CHECK_EQ(rpcool_call(c, FN_DFAIL, NULL, 0, &ret, &n), -77);
    CHECK(ret == NULL);
    CHECK_EQ(used(c), before);
    CHECK_EQ(rpcool_call(c, FN_DNOREPLY, NULL, 0, &ret, &n), 3);
    CHECK(ret == NULL);
    CHECK_EQ(used(c), before);
    CHECK_EQ(rpcool_call(c, FN_NEG, NULL, 0, &ret, &n), -1234); /* passes through unchanged */
    CHECK(ret == NULL);
    CHECK_EQ(used(c), before);
    t_disconnect_close(c, s);
}

static void defer_return_ignored(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-dri", &s, &c)) return;
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(c, FN_DRET, NULL, 0, &ret, &n), 9);
    CHECK_EQ(n, 6);
    CHECK(ret && !strcmp((char *)ret, "defer"));
    CHECK_EQ(rpcool_free(c, ret), 0);
    size_t before = used(c);
    CHECK_EQ(rpcool_call(c, FN_DRET, NULL, 0, NULL, NULL), 9); /* discarded: freed for us */
    CHECK_EQ(used(c), before);
    t_disconnect_close(c, s);
}

/* from another thread, later: the caller gets the code; the caller's timeout applies */
static void defer_fail_from_thread_and_timeout(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-dft", &s, &c)) return;
    int *ms = ms_arg(c, 20);
    __atomic_store_n(&late_rc, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(rpcool_call(c, FN_DLATE, ms, sizeof *ms, NULL, NULL), -321);
    for (int k = 0; k < 100 && __atomic_load_n(&late_rc, __ATOMIC_SEQ_CST) == 1; k++)
        usleep(1000);
    CHECK_EQ(__atomic_load_n(&late_rc, __ATOMIC_SEQ_CST), 0);
    *ms = 300;
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 50;
    __atomic_store_n(&late_rc, 1, __ATOMIC_SEQ_CST);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_call_ex(c, FN_DLATE, ms, sizeof *ms, &co, NULL, NULL), RPCOOL_E_TIMEOUT);
    CHECK(rcp__now_ns() - t0 < 250000000ull);
    for (int k = 0; k < 1000 && __atomic_load_n(&late_rc, __ATOMIC_SEQ_CST) == 1; k++)
        usleep(1000);
    CHECK_EQ(__atomic_load_n(&late_rc, __ATOMIC_SEQ_CST), 0);
    CHECK(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0);
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

static void defer_bad_arguments(void)
{
    CHECK_EQ(rpcool_deferred_reply(NULL, 0, NULL, 0), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_deferred_fail(NULL, -1), RPCOOL_E_INVAL);
    CHECK(rpcool_deferred_alloc(NULL, 8) == NULL);
}

/* ---- section 8: errors */
static void errors_free_and_texts(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-err", &s, &c)) return;
    int local;
    void *m = malloc(16);
    CHECK_EQ(rpcool_free(c, NULL), 0);
    CHECK_EQ(rpcool_free(c, &local), SHMHEAP_E_FOREIGN);
    CHECK_EQ(rpcool_free(c, m), SHMHEAP_E_FOREIGN);
    free(m);
    char *b = (char *)rpcool_alloc(c, 64);
    CHECK_EQ(rpcool_free(c, b + 8), SHMHEAP_E_BADPTR);
    CHECK_EQ(rpcool_free(c, b), 0);
    CHECK_EQ(rpcool_free(c, b), SHMHEAP_E_DOUBLEFREE);
    CHECK(!strcmp(rpcool_strerror(0), "success"));
    CHECK(!strcmp(rpcool_strerror(-ENOENT), strerror(ENOENT)));
    CHECK(!strcmp(rpcool_strerror(-4095), "unknown error code")); /* an errno nobody knows */
    CHECK(!strcmp(rpcool_strerror(-123456), "unknown error code"));
    CHECK(!strcmp(rpcool_strerror(5), "unknown error code"));
    CHECK(strcmp(rpcool_strerror(RPCOOL_E_REFUSED), rpcool_strerror(RPCOOL_E_CANCELLED)));
    /* an unused code of rpcool's own block: rpcool.h is declared, so the rule's "anything
       else" */
    CHECK(!strcmp(rpcool_strerror(-1950), "unknown error code"));
    CHECK(strcmp(rpcool_strerror(SHMHEAP_E_FULL), "unknown error code") != 0);
    t_disconnect_close(c, s);
}

/* ---- section 9: limits */
static void limits_names(void)
{
    char n48[49], n49[50];
    memset(n48, 'a', 48);
    n48[48] = 0;
    memcpy(n48, "m48", 3);
    memset(n49, 'a', 49);
    n49[49] = 0;
    rpcool_server *s = NULL;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_server_open(n49, NULL, &s), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_connect(n49, NULL, &c), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_server_open("", NULL, &s), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_server_open("a/b", NULL, &s), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_server_open("a b", NULL, &s), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_connect("..", NULL, &c) < 0, 1);
    t_rm_channel(n48);
    CHECK_EQ(rpcool_server_open(n48, NULL, &s), 0);
    if (s) {
        rpcool_server *s2 = NULL;
        CHECK_EQ(rpcool_server_open(n48, NULL, &s2), RPCOOL_E_NAMETAKEN);
        rpcool_server_close(s);
    }
}

static void limits_conns_handlers_heap(void)
{
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    rpcool_server *s = NULL;
    o.max_conns = RPCOOL_MAX_CONNS + 1;
    CHECK_EQ(rpcool_server_open(t_uniq("m-mc"), &o, &s), RPCOOL_E_INVAL);
    o.max_conns = RPCOOL_MAX_CONNS;
    o.max_heap_size = (size_t)8 << 20;
    const char *name = t_uniq("m-lim");
    CHECK_EQ(rpcool_server_open(name, &o, &s), 0);
    if (!s) return;
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.max_conns, RPCOOL_MAX_CONNS);
    CHECK_EQ(rpcool_server_add_handler(s, RPCOOL_MAX_HANDLERS, t_h_echo, NULL, 0),
             RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_server_add_handler(s, RPCOOL_MAX_HANDLERS - 1, t_h_echo, NULL, 0), 0);
    CHECK_EQ(rpcool_server_add_handler(s, 1, t_h_echo, NULL, 64), RPCOOL_E_INVAL);
    rpcool_server_start(s, 1);
    rpcool_conn_opts co;
    memset(&co, 0, sizeof co);
    co.heap_size = (size_t)16 << 20;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &co, &c), RPCOOL_E_HEAPSIZE);
    co.heap_size = (size_t)8 << 20;
    CHECK_EQ(rpcool_connect(name, &co, &c), 0);
    if (c) {
        char *a = rpcool_strdup(c, "x");
        CHECK_EQ(rpcool_call(c, RPCOOL_MAX_HANDLERS - 1, a, 2, NULL, NULL), 0);
        CHECK(rpcool_call(c, RPCOOL_MAX_HANDLERS, a, 2, NULL, NULL) < 0);
        CHECK_EQ(rpcool_call(c, 7, a, 2, NULL, NULL), RPCOOL_E_NOHANDLER);
        rpcool_call_opts po;
        memset(&po, 0, sizeof po);
        po.safety = 64;
        CHECK_EQ(rpcool_call_ex(c, RPCOOL_MAX_HANDLERS - 1, a, 2, &po, NULL, NULL),
                 RPCOOL_E_INVAL);
        int local = 0;
        CHECK_EQ(rpcool_call(c, RPCOOL_MAX_HANDLERS - 1, &local, 4, NULL, NULL),
                 RPCOOL_E_BADPTR);
        rpcool_free(c, a);
    }
    t_disconnect_close(c, s);
}

static void limits_inflight(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-inf", &s, &c)) return;
    int *ms = ms_arg(c, 1);
    uint64_t ids[RPCOOL_MAX_INFLIGHT + 1];
    int posted = 0;
    for (int k = 0; k < RPCOOL_MAX_INFLIGHT; k++)
        if (!rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &ids[k])) posted++;
    CHECK_EQ(posted, RPCOOL_MAX_INFLIGHT);
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &ids[64]),
             RPCOOL_E_AGAIN);
    for (int k = 0; k < posted; k++) CHECK_EQ(rpcool_wait(c, ids[k], NULL, NULL), 1);
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

static void limits_connect_waits(void)
{
    const char *name = t_uniq("m-cw");
    rpcool_conn *c = NULL;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_connect(name, NULL, &c), RPCOOL_E_NOCHANNEL);
    CHECK(rcp__now_ns() - t0 < 200000000ull);
    rpcool_conn_opts co;
    memset(&co, 0, sizeof co);
    co.wait_ready = 1;
    co.connect_timeout_ms = 150;
    t0 = rcp__now_ns();
    int r = rpcool_connect(name, &co, &c);
    uint64_t took = rcp__now_ns() - t0;
    CHECKF(r < 0, "connect: %d", r);
    CHECKF(took >= 140000000ull && took < 1000000000ull, "waited %llu ms",
           (unsigned long long)(took / 1000000));
}

/* section 2: an asynchronous call's timeout counts from rpcool_call_async */
static void async_timeout(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-at", &s, &c)) return;
    int *ms = ms_arg(c, 300);
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 50;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, &co, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_AGAIN);
    usleep(100000);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_TIMEOUT);
    usleep(300000);
    CHECK(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0); /* after the slow one: it is done */
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

/* ---- section 6 and 12: more counts */
static int h_fault(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    volatile uintptr_t a = 4096; /* unmapped */
    return *(volatile int *)a;
}

static int h_close_self(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    return rpcool_server_close((rpcool_server *)user);
}

static int slow_ended;
static int h_slow_mark(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    usleep(300000);
    __atomic_store_n(&slow_ended, 1, __ATOMIC_SEQ_CST);
    return 1;
}

static int left_after_handler = -1;
static void on_disc_after(rpcool_server *s, const rpcool_peer *p, void *cu, int why, void *user)
{
    (void)s, (void)p, (void)cu, (void)why;
    __atomic_store_n(&left_after_handler, __atomic_load_n(&slow_ended, __ATOMIC_SEQ_CST),
                     __ATOMIC_SEQ_CST);
    __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST);
}

static int child_slow(void *name)
{
    rpcool_conn *c = NULL;
    if (rpcool_connect((const char *)name, NULL, &c)) return 1;
    uint64_t id;
    if (rpcool_call_async(c, 50, NULL, 0, NULL, NULL, NULL, &id)) return 2;
    printf("called\n");
    fflush(stdout);
    for (;;) pause();
}

static void faults_toobig_close_in_handler(void)
{
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.max_copy = 16;
    o.reap_ms = 20;
    int gone = 0;
    o.on_disconnect = on_disc_after;
    o.hook_user = &gone;
    const char *name = t_uniq("m-flt");
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, &o, &s), 0);
    if (!s) return;
    rpcool_server_add_handler(s, 48, h_fault, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, 49, h_close_self, s, 0);
    rpcool_server_add_handler(s, 50, h_slow_mark, NULL, 0);
    rpcool_server_add_handler(s, T_FN_ECHO, t_h_echo, NULL, RPCOOL_COPY);
    rpcool_server_start(s, 2);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        CHECK_EQ(rpcool_call(c, 48, NULL, 0, NULL, NULL), RPCOOL_E_FAULT);
        CHECK_EQ(rpcool_call(c, 49, NULL, 0, NULL, NULL), RPCOOL_E_INVAL);
        char *a = (char *)rpcool_alloc(c, 64);
        memset(a, 1, 64);
        CHECK_EQ(rpcool_call(c, T_FN_ECHO, a, 64, NULL, NULL), RPCOOL_E_TOOBIG);
        CHECK_EQ(rpcool_call(c, T_FN_ECHO, a, 16, NULL, NULL), 0);
        rpcool_free(c, a);
        rpcool_server_stats st;
        rpcool_server_get_stats(s, &st);
        CHECK_EQ(st.faults, 1);
        rpcool_disconnect(c);
        CHECK(t_wait_for(&gone, 1, 1000));
    }
    /* a client killed while its handler runs: on_disconnect only once the handler ended */
    int pfd[2];
    __atomic_store_n(&slow_ended, 0, __ATOMIC_SEQ_CST);
    pid_t pid = t_fork_pipe(pfd);
    if (pid == 0) {
        dup2(pfd[1], 1);
        _exit(child_slow((void *)name));
    }
    char buf[8];
    CHECK(read(pfd[0], buf, sizeof buf) > 0);
    close(pfd[0]);
    usleep(50000);
    t_kill_wait(pid);
    CHECK(t_wait_for(&gone, 2, 2000));
    CHECK_EQ(__atomic_load_n(&left_after_handler, __ATOMIC_SEQ_CST), 1);
    rpcool_server_close(s);
    CHECK_EQ(gone, 2);
}

/* cancel after the reply came: 1, and the reply is freed */
static void cancel_after_reply_frees_it(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (conn_to("m-car", &s, &c)) return;
    char *a = (char *)rpcool_alloc(c, 2000);
    memset(a, 2, 2000);
    size_t before = used(c);
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, T_FN_ECHO, a, 2000, NULL, NULL, NULL, &id), 0);
    usleep(100000);
    CHECK_EQ(rpcool_cancel(c, id), 1);
    CHECK_EQ(used(c), before);
    rpcool_free(c, a);
    t_disconnect_close(c, s);
}

/* ---- the heaps made ahead, a time limit counted, a discarded reply, wait_ready */
static void stats_ready_and_limit(void)
{
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.prealloc = 2;
    o.limit_ms = 20;
    const char *name = t_uniq("m-rdy");
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, &o, &s), 0);
    if (!s) return;
    rpcool_server_add_handler(s, T_FN_SLOW, t_h_slow, NULL, 0);
    rpcool_server_add_handler(s, T_FN_ECHO, t_h_echo, NULL, 0);
    rpcool_server_start(s, 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    rpcool_server_stats st;
    memset(&st, 0, sizeof st);
    for (int k = 0; k < 400 && st.ready != 2; k++) {
        usleep(5000);
        rpcool_server_get_stats(s, &st);
    }
    CHECK_EQ(st.ready, 2);
    if (c) {
        CHECK_EQ(t_slow_call(c, 100), 1); /* relaxed: runs on past its limit, counted */
        rpcool_server_get_stats(s, &st);
        CHECK_EQ(st.over_limit, 1);
        char *a = (char *)rpcool_alloc(c, 3000);
        memset(a, 3, 3000);
        size_t before = used(c);
        CHECK_EQ(rpcool_call(c, T_FN_ECHO, a, 3000, NULL, NULL), 0); /* reply discarded */
        CHECK_EQ(used(c), before);
        rpcool_free(c, a);
    }
    t_disconnect_close(c, s);
}

struct later { const char *name; rpcool_server *s; };
static void *open_later(void *p)
{
    struct later *l = (struct later *)p;
    usleep(100000);
    l->s = open_with(l->name, NULL, 0, 0, 1);
    return NULL;
}

static void wait_ready_connects(void)
{
    struct later l = {t_uniq("m-wr"), NULL};
    pthread_t t;
    pthread_create(&t, NULL, open_later, &l);
    rpcool_conn_opts co;
    memset(&co, 0, sizeof co);
    co.wait_ready = 1;
    co.connect_timeout_ms = 3000;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(l.name, &co, &c), 0);
    pthread_join(t, NULL);
    if (c) CHECK(rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) > 0);
    t_disconnect_close(c, l.s);
}

/* the acceptor answers the stats request: a handler busy for 600 ms does not delay it */
static void stats_while_handler_busy(void)
{
    const char *name = t_uniq("m-busy");
    rpcool_server *s = open_with(name, NULL, 0, 0, 1);
    rpcool_conn *c = NULL;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) {
        rpcool_server_close(s);
        return;
    }
    int *ms = ms_arg(c, 600);
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    usleep(50000);
    rpcool_server_stats st;
    rpcool_conn_stats cs[2];
    unsigned n = 0;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_channel_stats(name, 2000, &st, cs, 2, &n), 0);
    CHECKF(rcp__now_ns() - t0 < 300000000ull, "answered after %llu ms",
           (unsigned long long)((rcp__now_ns() - t0) / 1000000));
    CHECK_EQ(n, 1);
    CHECK_EQ(cs[0].inflight, 1);
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), 1);
    rpcool_free(c, ms);
    t_disconnect_close(c, s);
}

/* ---- rpcoolctl: --help is no usage error; an unknown option is (2) */
static char tool[512];
static void tool_help_and_usage(void)
{
    if (access(tool, X_OK)) {
        t_skip("tool_help_and_usage", "build/bin/rpcoolctl is not built (make builds it)");
        return;
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s --help 2>/dev/null | grep -q usage", tool);
    CHECK_EQ(system(cmd), 0); /* on stdout, exit 0 (the pipe's status is grep's) */
    snprintf(cmd, sizeof cmd, "%s --help >/dev/null 2>&1", tool);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    snprintf(cmd, sizeof cmd, "%s --bogus >/dev/null 2>&1", tool);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    char self[400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    if (strrchr(self, '/')) *strrchr(self, '/') = 0;
    snprintf(tool, sizeof tool, "%s/../bin/rpcoolctl", self); /* build/t -> build/bin */
    RUN(peer_is_the_client);
    RUN(hook_connect_sees_claims);
    RUN(hook_refusal_codes);
    RUN(hook_closed_by_server);
    RUN(hook_disconnect_without_connect);
    RUN(hook_noslot_after_accept);
    RUN(hook_waits_for_deferred);
    RUN(cancel_bad_ids);
    RUN(cancel_callback_never_runs);
    RUN(cancel_running_reply_freed);
    RUN(stats_counts);
    RUN(stats_channel_errors);
    RUN(stats_cancelled_queued);
    RUN(defer_failed_frees_blocks);
    RUN(defer_return_ignored);
    RUN(defer_fail_from_thread_and_timeout);
    RUN(defer_bad_arguments);
    RUN(errors_free_and_texts);
    RUN(limits_names);
    RUN(limits_conns_handlers_heap);
    RUN(limits_inflight);
    RUN(limits_connect_waits);
    RUN(async_timeout);
    RUN(faults_toobig_close_in_handler);
    RUN(cancel_after_reply_frees_it);
    RUN(stats_ready_and_limit);
    RUN(wait_ready_connects);
    RUN(stats_while_handler_busy);
    RUN(tool_help_and_usage);
    return T_DONE();
}
