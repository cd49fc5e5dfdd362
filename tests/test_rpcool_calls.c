// TSAN
/* rpcool: channels and every call path - sync, async (poll, wait, callback), many threads on one
 * connection, many client processes, many channels, idle sleep, names, the data builders;
 * rpcool_server_stop and close from a handler, a sync call waiting for a slot, a waiting client
 * that sleeps, builders and name limits; rpcool_ctx_fail's status, whatever its sign. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <pthread.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

enum { FN_ECHO = 1, FN_STATUS = 2, FN_SUM = 3, FN_SLOW = 4, FN_SLEEP = 5 };

/* returns the first int of the argument as the status (negative = error) */
static int h_status(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    return len >= sizeof(int) ? *(int *)arg : RPCOOL_E_INVAL;
}

/* sums a pointer-rich list: struct node { long v; struct node *next; } */
struct node { long v; struct node *next; };

static int h_sum(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    long s = 0;
    for (const struct node *n = (const struct node *)arg; n; n = n->next) s += RPCOOL_NEED(ctx, n)->v;
    long *r = (long *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    *r = s;
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return 0;
}

static int h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    usleep(20000);
    return 5;
}

/* sleeps as many milliseconds as the argument's int says, returns 1 */
static int h_sleep(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    if (len < sizeof(int)) return RPCOOL_E_INVAL;
    usleep((useconds_t)*(int *)arg * 1000);
    return 1;
}

static rpcool_server *serve(const char *name, unsigned threads)
{
    static const t_handler hs[] = {{FN_ECHO, t_h_echo, 0}, {FN_STATUS, h_status, 0},
                                   {FN_SUM, h_sum, 0}, {FN_SLOW, h_slow, 0}, {FN_SLEEP, h_sleep, 0}};
    return t_server_with(name, NULL, hs, sizeof hs / sizeof hs[0], threads);
}

static int call_status(rpcool_conn *c, int v)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = v;
    int r = rpcool_call(c, FN_STATUS, a, sizeof *a, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

static void test_sync_echo(void)
{
    const char *name = t_uniq("echo");
    rpcool_server *s = serve(name, 1);
    rpcool_conn *c;
    int r = rpcool_connect(name, NULL, &c);
    CHECKF(r == 0, "connect: %s", rpcool_strerror(r));
    if (r) { rpcool_server_close(s); return; }
    char *m = rpcool_strdup(c, "hello, rpcool");
    void *ret = NULL;
    size_t n = 0;
    r = rpcool_call(c, FN_ECHO, m, strlen(m) + 1, &ret, &n);
    CHECK_EQ(r, 0);
    CHECK(ret && n == strlen(m) + 1 && !strcmp((char *)ret, m));
    CHECK(shmheap_contains(rpcool_heap(c), ret, n)); /* the result is in our heap */
    rpcool_free(c, ret);
    CHECK_EQ(call_status(c, 42), 42);
    CHECK_EQ(call_status(c, -17), -17);            /* handler errors pass through */
    CHECK_EQ(rpcool_call(c, 77, m, 1, NULL, NULL), RPCOOL_E_NOHANDLER);
    CHECK_EQ(rpcool_call(c, 5000, m, 1, NULL, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_call(c, FN_ECHO, NULL, 0, NULL, NULL), 0); /* no argument */
    /* a pointer-rich argument: a list in the heap */
    struct node *head = NULL;
    for (long i = 1; i <= 100; i++) {
        struct node *nd = (struct node *)rpcool_alloc(c, sizeof *nd);
        nd->v = i;
        nd->next = head;
        head = nd;
    }
    r = rpcool_call(c, FN_SUM, head, sizeof *head, &ret, &n);
    CHECK_EQ(r, 0);
    CHECK(ret && *(long *)ret == 5050);
    rpcool_free(c, ret);
    while (head) { struct node *nx = head->next; rpcool_free(c, head); head = nx; }
    /* a private pointer as argument is refused before it leaves */
    static char priv[8];
    CHECK_EQ(rpcool_call(c, FN_ECHO, priv, sizeof priv, NULL, NULL), RPCOOL_E_BADPTR);
    rpcool_free(c, m);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.conns, 1);
    CHECK_EQ(st.calls, 5); /* handlers run: not for NOHANDLER or client-side refusals */
    t_disconnect_close(c, s);
}

static void test_names(void)
{
    const char *name = t_uniq("names");
    rpcool_server *s = serve(name, 0), *s2 = NULL;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_server_open(name, NULL, &s2), RPCOOL_E_NAMETAKEN);
    /* also from another process */
    pid_t p = fork();
    if (p == 0) _exit(rpcool_server_open(name, NULL, &s2) == RPCOOL_E_NAMETAKEN ? 0 : 1);
    int st;
    waitpid(p, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(rpcool_connect(t_uniq("nobody"), NULL, &c), RPCOOL_E_NOCHANNEL);
    CHECK_EQ(rpcool_connect("bad/name", NULL, &c), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_connect("", NULL, &c), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_server_open("x y", NULL, &s2), RPCOOL_E_BADNAME);
    rpcool_conn_opts o = {.transport = RPCOOL_TRANSPORT_RDMA};
    CHECK_EQ(rpcool_connect(name, &o, &c), RPCOOL_E_NOTSUP);
    CHECK(strstr(rpcool_strerror(RPCOOL_E_NAMETAKEN), "taken") != NULL);
    CHECK(strstr(rpcool_strerror(SHMHEAP_E_FULL), "full") != NULL);
    rpcool_server_close(s);
    /* closed: the name is free again, and connecting fails cleanly */
    CHECK_EQ(rpcool_connect(name, NULL, &c), RPCOOL_E_NOCHANNEL);
    CHECK_EQ(rpcool_server_open(name, NULL, &s2), 0);
    rpcool_server_close(s2);
}

static int cb_count;

static long cb_sum;

static void on_done(rpcool_conn *c, int status, void *ret, size_t n, void *user)
{
    (void)n;
    cb_count++;
    cb_sum += status + (long)(intptr_t)user;
    rpcool_free(c, ret);
}

static void test_async(void)
{
    const char *name = t_uniq("async");
    rpcool_server *s = serve(name, 1);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 9;
    uint64_t ids[RPCOOL_MAX_INFLIGHT], extra;
    int r = 0;
    for (int i = 0; i < RPCOOL_MAX_INFLIGHT && !r; i++) r = rpcool_call_async(c, FN_SLOW, a, sizeof *a, NULL, NULL, NULL, &ids[i]);
    CHECK_EQ(r, 0);
    CHECK_EQ(rpcool_call_async(c, FN_STATUS, a, sizeof *a, NULL, NULL, NULL, &extra), RPCOOL_E_AGAIN);
    CHECK_EQ(rpcool_poll(c, ids[63], NULL, NULL), RPCOOL_E_AGAIN); /* the slow ones take a while */
    int sum = 0;
    for (int i = 0; i < RPCOOL_MAX_INFLIGHT; i++) sum += rpcool_wait(c, ids[i], NULL, NULL);
    CHECK_EQ(sum, 5 * RPCOOL_MAX_INFLIGHT);
    CHECK_EQ(rpcool_poll(c, ids[0], NULL, NULL), RPCOOL_E_INVAL); /* already finished */
    /* polling until done */
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, FN_STATUS, a, sizeof *a, NULL, NULL, NULL, &id), 0);
    while ((r = rpcool_poll(c, id, NULL, NULL)) == RPCOOL_E_AGAIN) sched_yield();
    CHECK_EQ(r, 9);
    /* callbacks, run by rpcool_progress */
    cb_count = 0;
    cb_sum = 0;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(rpcool_call_async(c, FN_STATUS, a, sizeof *a, NULL, on_done, (void *)(intptr_t)i, NULL), 0);
    uint64_t t0 = rcp__now_ns();
    while (cb_count < 10 && rcp__now_ns() - t0 < 5000000000ull) CHECK(rpcool_progress(c) >= 0);
    CHECK_EQ(cb_count, 10);
    CHECK_EQ(cb_sum, 9 * 10 + 45);
    CHECK_EQ(rpcool_progress(c), 0);
    rpcool_free(c, a);
    t_disconnect_close(c, s);
}

struct thr_arg { rpcool_conn *c; int n, bad; };

static void *thr_calls(void *p)
{
    struct thr_arg *ta = (struct thr_arg *)p;
    char *m = rpcool_strdup(ta->c, "threads");
    for (int i = 0; i < ta->n; i++) {
        void *ret = NULL;
        size_t n = 0;
        if (rpcool_call(ta->c, FN_ECHO, m, 8, &ret, &n) != 0 || n != 8 || memcmp(ret, m, 8)) ta->bad++;
        rpcool_free(ta->c, ret);
    }
    rpcool_free(ta->c, m);
    return NULL;
}

/* Many threads share one connection; two server threads serve it. */
static void test_threads(void)
{
    const char *name = t_uniq("thr");
    rpcool_server *s = serve(name, 2);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    pthread_t th[4];
    struct thr_arg ta[4];
    rpcool_server_stats st0, st1;
    rpcool_server_get_stats(s, &st0);
    for (int i = 0; i < 4; i++) {
        ta[i].c = c; ta[i].n = 2000; ta[i].bad = 0;
        pthread_create(&th[i], NULL, thr_calls, &ta[i]);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); bad += ta[i].bad; }
    CHECK_EQ(bad, 0);
    rpcool_server_get_stats(s, &st1);
    CHECK_EQ(st1.calls - st0.calls, 4 * 2000); /* each call served once: none twice, none lost */
    shmheap_stats hs;
    CHECK_EQ(shmheap_check(rpcool_heap(c), &hs), 0);
    t_disconnect_close(c, s);
}

/* Many client processes on one channel, and several channels in one process. */
static void test_processes(void)
{
    enum { KIDS = 4, CALLS = 500 };
    const char *n1 = t_uniq("procA"), *n2 = t_uniq("procB");
    rpcool_server *s1 = serve(n1, 0), *s2 = serve(n2, 0);
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        if ((kids[k] = fork()) == 0) { /* client: fork before the servers start threads (TSAN) */
            rpcool_conn *c1, *c2;
            if (rpcool_connect(k & 1 ? n1 : n2, NULL, &c1) || rpcool_connect(k & 1 ? n2 : n1, NULL, &c2)) _exit(2);
            int fails = 0;
            for (int i = 0; i < CALLS; i++) {
                if (call_status(c1, i) != i) fails++;
                if (call_status(c2, k) != k) fails++;
            }
            rpcool_disconnect(c1);
            rpcool_disconnect(c2);
            _exit(fails ? 1 : 0);
        }
    }
    rpcool_server_start(s1, 1);
    rpcool_server_start(s2, 1);
    for (int k = 0; k < KIDS; k++) {
        int st;
        waitpid(kids[k], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d: status %d", k, st);
    }
    rpcool_server_stats a, b;
    rpcool_server_get_stats(s1, &a);
    rpcool_server_get_stats(s2, &b);
    CHECK_EQ(a.calls + b.calls, 2 * KIDS * CALLS);
    CHECK_EQ(a.accepted + b.accepted, 2 * KIDS);
    /* every client closed: after housekeeping no connection is left */
    uint64_t t0 = rcp__now_ns();
    do { usleep(10000); rpcool_server_get_stats(s1, &a); rpcool_server_get_stats(s2, &b); }
    while ((a.conns || b.conns) && rcp__now_ns() - t0 < 3000000000ull);
    CHECK_EQ(a.conns + b.conns, 0);
    CHECK_EQ(a.closed + b.closed, 2 * KIDS);
    rpcool_server_close(s1);
    rpcool_server_close(s2);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

/* An idle server (and an idle connection) sleeps on its futex instead of spinning. */
static void test_idle_sleeps(void)
{
    const char *name = t_uniq("idle");
    rpcool_server *s = serve(name, 2);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    CHECK_EQ(call_status(c, 1), 1);
    usleep(50000); /* past the spin time */
    double t0 = cpu_seconds();
    usleep(500000);
    double used = cpu_seconds() - t0;
    CHECKF(used < 0.05, "idle server used %.3f s of CPU in 0.5 s", used);
    CHECK_EQ(call_status(c, 2), 2); /* and wakes up for the next call */
    t_disconnect_close(c, s);
}

/* Both sides sleep on their futex at every call (spin_ns 1): many threads and two connections
   post while the server goes to sleep, trims its request bits and wakes. A lost wake-up would
   leave a call waiting for a 1 s time slice (peer_check_ms, reap_ms), so no call may take
   that long. */
struct wake_arg { rpcool_conn *c; int id, bad; uint64_t max_ns; };

static void *wake_calls(void *p)
{
    struct wake_arg *wa = (struct wake_arg *)p;
    for (int i = 0; i < 300; i++) {
        uint64_t t0 = rcp__now_ns();
        if (call_status(wa->c, i) != i) wa->bad++;
        uint64_t dt = rcp__now_ns() - t0;
        if (dt > wa->max_ns) wa->max_ns = dt;
        if ((i + wa->id) % 3 == 0) usleep(50u * (unsigned)(wa->id + 1)); /* vary who sleeps first */
    }
    return NULL;
}

static void test_sleep_wake(void)
{
    const char *name = t_uniq("wake");
    rpcool_server_opts so = {.spin_ns = 1, .reap_ms = 1000};
    rpcool_server *s = NULL;
    if (rpcool_server_open(name, &so, &s)) { CHECK(0); return; }
    rpcool_server_add_handler(s, FN_STATUS, h_status, NULL, 0);
    rpcool_server_start(s, 2);
    rpcool_conn_opts co = {.spin_ns = 1, .peer_check_ms = 1000};
    rpcool_conn *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) CHECK_EQ(rpcool_connect(name, &co, &c[k]), 0);
    if (c[0] && c[1]) {
        pthread_t th[4];
        struct wake_arg wa[4];
        for (int i = 0; i < 4; i++) {
            wa[i].c = c[i & 1]; wa[i].id = i; wa[i].bad = 0; wa[i].max_ns = 0;
            pthread_create(&th[i], NULL, wake_calls, &wa[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ(wa[i].bad, 0);
            CHECKF(wa[i].max_ns < 500000000ull, "a call took %llu ms: a lost wake-up",
                   (unsigned long long)(wa[i].max_ns / 1000000));
        }
    }
    for (int k = 0; k < 2; k++) if (c[k]) rpcool_disconnect(c[k]);
    rpcool_server_close(s);
}

static void test_builders(void)
{
    const char *hn = t_uniq("build");
    shmheap *h;
    if (shmheap_create(hn, NULL, &h)) { CHECK(0); return; }
    rpcool_arena heap, arena;
    CHECK_EQ(rpcool_arena_init(&heap, h, 0), 0);
    CHECK_EQ(rpcool_arena_init(&arena, h, 60000), 0);
    CHECK(((uintptr_t)arena.base & 4095) == 0 && arena.end - arena.base == 61440);
    for (int pass = 0; pass < 2; pass++) {
        rpcool_arena *a = pass ? &arena : &heap;
        rpcool_map *m = rpcool_map_new(a, 2);
        rpcool_array *arr = rpcool_array_new(a, sizeof(long), 1);
        CHECK(m && arr);
        char key[32];
        for (long i = 0; i < 100; i++) {
            snprintf(key, sizeof key, "key%ld", i);
            CHECK_EQ(rpcool_map_put(a, m, key, (uint64_t)i * 3, NULL), 0);
            CHECK(rpcool_array_push(a, arr, &i) != NULL);
        }
        uint64_t v = 0, old = 0;
        CHECK_EQ(m->len, 100);
        CHECK(rpcool_map_get(m, "key57", &v) && v == 171);
        CHECK(!rpcool_map_get(m, "nope", &v));
        CHECK_EQ(rpcool_map_put(a, m, "key57", 1, &old), 0);
        CHECK(old == 171 && rpcool_map_get(m, "key57", &v) && v == 1 && m->len == 100);
        CHECK(arr->len == 100 && RPCOOL_AT(arr, long, 99) == 99);
        CHECK(shmheap_contains(h, m->e, m->cap * sizeof *m->e));
        char *s = rpcool_arena_strdup(a, "text");
        CHECK(s && !strcmp(s, "text") && shmheap_contains(h, s, 5));
    }
    CHECK(rpcool_arena_used(&arena) > 0 && rpcool_arena_used(&arena) <= 61440);
    CHECK(rpcool_arena_alloc(&arena, 1 << 20, 0) == NULL); /* a region arena is bounded */
    rpcool_arena_destroy(&arena);
    shmheap_close(h);
    shmheap_unlink(hn, NULL);
}

static double ms_since(uint64_t t0) { return (double)(rcp__now_ns() - t0) / 1e6; }

/* rpcool_server_stop makes a thread in rpcool_serve return; rpcool_server_close from a
   handler of that server fails with RPCOOL_E_INVAL. */
static int g_served;

static void *serve_main(void *p)
{
    rpcool_serve((rpcool_server *)p);
    __atomic_store_n(&g_served, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void g_stop_and_close_from_handler(void)
{
    const char *name = t_uniq("gstop");
    rpcool_server *s = t_serve(name, NULL, 0);
    if (!s) return;
    pthread_t th;
    g_served = 0;
    pthread_create(&th, NULL, serve_main, s);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) CHECK_EQ(rpcool_call(c, T_FN_CLOSE, NULL, 0, NULL, NULL), RPCOOL_E_INVAL);
    if (c) CHECK_EQ(t_slow_call(c, 0), 1); /* still open */
    if (c) rpcool_disconnect(c); /* (a stopped server would not see it go until close's 5 s) */
    rpcool_server_stop(s);
    uint64_t t0 = rcp__now_ns();
    while (!__atomic_load_n(&g_served, __ATOMIC_ACQUIRE) && ms_since(t0) < 2000) usleep(1000);
    CHECKF(__atomic_load_n(&g_served, __ATOMIC_ACQUIRE), "rpcool_serve did not return after rpcool_server_stop");
    pthread_join(th, NULL);
    rpcool_server_close(s);
}

/* A synchronous call waits for a free slot while 64 asynchronous calls are in flight. */
static rpcool_conn *g_c;

static uint64_t g_ids[RPCOOL_MAX_INFLIGHT];

static int g_waitsum;

static void *waiter(void *p)
{
    (void)p;
    usleep(50000);
    for (int i = 0; i < RPCOOL_MAX_INFLIGHT; i++) g_waitsum += rpcool_wait(g_c, g_ids[i], NULL, NULL);
    return NULL;
}

static void g_sync_waits_for_slot(void)
{
    const char *name = t_uniq("gslot");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serve_connect(name, 2, &s, &c)) return;
    g_c = c;
    g_waitsum = 0;
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 5;
    int r = 0;
    for (int i = 0; i < RPCOOL_MAX_INFLIGHT && !r; i++) r = rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, NULL, NULL, NULL, &g_ids[i]);
    CHECK_EQ(r, 0);
    pthread_t th;
    pthread_create(&th, NULL, waiter, NULL);
    CHECK_EQ(rpcool_call(c, T_FN_SLOW, a, sizeof *a, NULL, NULL), 1);
    pthread_join(th, NULL);
    CHECK_EQ(g_waitsum, RPCOOL_MAX_INFLIGHT);
    rpcool_free(c, a);
    t_disconnect_close(c, s);
}

/* The kept slot: a thread keeps its synchronous calls' slot (no atomic operation per call for
   a slot) but the connection still takes 64 calls in flight: after synchronous calls, 64
   asynchronous ones fit (the last takes the kept slot); while the keeper's own call is in
   flight its slot is not taken (the 64th asynchronous call is refused); a kept slot whose call
   timed out comes back once answered; threads calling and bursts of 64 asynchronous calls on
   one connection each get their own answers. */
struct keeper { rpcool_conn *c; int started, r; };

static int sleep_call(rpcool_conn *c, int ms)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (!a) return SHMHEAP_E_FULL;
    *a = ms;
    int r = rpcool_call(c, FN_SLEEP, a, sizeof *a, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

static void *keeper_main(void *p)
{
    struct keeper *k = (struct keeper *)p;
    int r1 = sleep_call(k->c, 0); /* this thread keeps its slot now */
    __atomic_store_n(&k->started, 1, __ATOMIC_RELEASE);
    int r2 = sleep_call(k->c, 600); /* on the kept slot, in flight for 600 ms */
    k->r = r1 == 1 && r2 == 1 ? 0 : -1;
    return NULL;
}

static int async_burst(rpcool_conn *c, int *ms, int n)
{
    uint64_t ids[RPCOOL_MAX_INFLIGHT];
    int k = 0, r = 0, sum = 0;
    for (; k < n; k++)
        if ((r = rpcool_call_async(c, FN_SLEEP, ms, sizeof *ms, NULL, NULL, NULL, &ids[k]))) break;
    for (int i = 0; i < k; i++) sum += rpcool_wait(c, ids[i], NULL, NULL);
    return r ? r : sum;
}

struct sync_caller { rpcool_conn *c; int id, n, bad; };

static void *sync_caller_main(void *p)
{
    struct sync_caller *sc = (struct sync_caller *)p;
    int *a = (int *)rpcool_alloc(sc->c, sizeof *a);
    for (int i = 0; a && i < sc->n; i++) {
        *a = sc->id * 100000 + i; /* h_status answers with it: a slot used twice would mix them */
        int want = sc->id * 100000 + i;
        if (rpcool_call(sc->c, FN_STATUS, a, sizeof *a, NULL, NULL) != want) sc->bad++;
    }
    rpcool_free(sc->c, a);
    return NULL;
}

struct burster { rpcool_conn *c; int rounds, bad, refused; };

static void *burster_main(void *p)
{
    struct burster *b = (struct burster *)p;
    int *a = (int *)rpcool_alloc(b->c, sizeof *a);
    uint64_t ids[RPCOOL_MAX_INFLIGHT];
    for (int r = 0; a && r < b->rounds; r++) {
        int k = 0;
        *a = 77;
        for (; k < RPCOOL_MAX_INFLIGHT; k++)
            if (rpcool_call_async(b->c, FN_STATUS, a, sizeof *a, NULL, NULL, NULL, &ids[k])) break;
        if (k < RPCOOL_MAX_INFLIGHT) b->refused++; /* the synchronous callers hold slots: fine */
        for (int i = 0; i < k; i++)
            if (rpcool_wait(b->c, ids[i], NULL, NULL) != 77) b->bad++;
    }
    rpcool_free(b->c, a);
    return NULL;
}

static void test_kept_slot(void)
{
    const char *name = t_uniq("kept");
    rpcool_server *s = serve(name, 2);
    rpcool_conn *c = NULL, *c2 = NULL;
    if (!s) return;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    int *ms = (int *)rpcool_alloc(c, sizeof *ms);
    *ms = 0;
    for (int i = 0; i < 50; i++) CHECK_EQ(rpcool_call(c, FN_SLEEP, ms, sizeof *ms, NULL, NULL), 1);
    *ms = 1;
    CHECK_EQ(async_burst(c, ms, RPCOOL_MAX_INFLIGHT), RPCOOL_MAX_INFLIGHT); /* all 64 fit */
    *ms = 0;
    for (int i = 0; i < 10; i++) CHECK_EQ(rpcool_call(c, FN_SLEEP, ms, sizeof *ms, NULL, NULL), 1);
    /* a kept slot whose call timed out: dropped, and back once the server answered */
    rpcool_call_opts to = {.timeout_ms = 30};
    int *ms200 = (int *)rpcool_alloc(c, sizeof *ms200); /* the handler reads it after we gave up */
    *ms200 = 200;
    CHECK_EQ(rpcool_call_ex(c, FN_SLEEP, ms200, sizeof *ms200, &to, NULL, NULL), RPCOOL_E_TIMEOUT);
    usleep(400000);
    *ms = 1;
    CHECK_EQ(async_burst(c, ms, RPCOOL_MAX_INFLIGHT), RPCOOL_MAX_INFLIGHT);
    *ms = 0;
    CHECK_EQ(rpcool_call(c, FN_SLEEP, ms, sizeof *ms, NULL, NULL), 1);
    /* a keeper in another thread, its call in flight: its slot is not taken */
    CHECK_EQ(rpcool_connect(name, NULL, &c2), 0);
    if (c2) {
        struct keeper k = {c2, 0, -1};
        pthread_t th;
        pthread_create(&th, NULL, keeper_main, &k);
        while (!__atomic_load_n(&k.started, __ATOMIC_ACQUIRE)) usleep(1000);
        usleep(50000);
        int *m2 = (int *)rpcool_alloc(c2, sizeof *m2);
        *m2 = 1;
        CHECK_EQ(async_burst(c2, m2, RPCOOL_MAX_INFLIGHT), RPCOOL_E_AGAIN); /* 63 + the keeper's */
        pthread_join(th, NULL);
        CHECK_EQ(k.r, 0);
        CHECK_EQ(async_burst(c2, m2, RPCOOL_MAX_INFLIGHT), RPCOOL_MAX_INFLIGHT); /* idle: taken */
        rpcool_free(c2, m2);
    }
    /* three threads calling and one sending bursts of 64 on one connection */
    struct sync_caller sc[3];
    struct burster b = {c, 40, 0, 0};
    pthread_t ts[3], tb;
    for (int i = 0; i < 3; i++) {
        sc[i].c = c; sc[i].id = i + 1; sc[i].n = 3000; sc[i].bad = 0;
        pthread_create(&ts[i], NULL, sync_caller_main, &sc[i]);
    }
    pthread_create(&tb, NULL, burster_main, &b);
    for (int i = 0; i < 3; i++) {
        pthread_join(ts[i], NULL);
        CHECK_EQ(sc[i].bad, 0);
    }
    pthread_join(tb, NULL);
    CHECK_EQ(b.bad, 0);
    rpcool_free(c, ms);
    rpcool_free(c, ms200);
    if (c2) rpcool_disconnect(c2);
    t_disconnect_close(c, s);
}

/* A waiting client busy-polls only spin_ns, then sleeps: a 300 ms call costs its thread little
   CPU. */
static double thread_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void g_client_sleeps(void)
{
    const char *name = t_uniq("gsleep");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serve_connect(name, 1, &s, &c)) return;
    double t0 = thread_cpu_ms();
    CHECK_EQ(t_slow_call(c, 300), 1);
    double used = thread_cpu_ms() - t0;
    CHECKF(used < 60, "the caller used %.1f ms of CPU waiting 300 ms", used);
    t_disconnect_close(c, s);
}

/* Builders: arena_reset, strn, alignment, array growth, map_put's old value and a full heap,
   alloc_pages gives whole pages; channel names of 48 characters, not 49. */
static void g_builders_and_names(void)
{
    const char *hn = t_uniq("gbuild");
    shmheap *h = t_heap(hn, 2 << 20);
    if (!h) return;
    rpcool_arena a;
    CHECK_EQ(rpcool_arena_init(&a, h, 8192), 0);
    char *x = (char *)rpcool_arena_alloc(&a, 10, 0);
    char *y = (char *)rpcool_arena_alloc(&a, 8, 64);
    CHECK(x && y && ((uintptr_t)y & 63) == 0);
    char *s = rpcool_arena_strndup(&a, "abcdef", 3);
    CHECK(s && !strcmp(s, "abc"));
    CHECK(rpcool_arena_used(&a) > 0);
    rpcool_arena_reset(&a);
    CHECK_EQ(rpcool_arena_used(&a), 0);
    CHECK(rpcool_arena_alloc(&a, 10, 0) == x);
    rpcool_arena_reset(&a);
    rpcool_array *arr = rpcool_array_new(&a, sizeof(int), 1);
    for (int i = 0; arr && i < 50; i++) CHECK(rpcool_array_push(&a, arr, &i) != NULL);
    int ok = arr && arr->len == 50;
    for (int i = 0; ok && i < 50; i++) ok = RPCOOL_AT(arr, int, i) == i;
    CHECK(ok);
    rpcool_arena_reset(&a);
    rpcool_map *m = rpcool_map_new(&a, 4);
    uint64_t old = 99;
    CHECK(m && rpcool_map_put(&a, m, "k", 5, &old) == 0 && old == 0);
    char key[32];
    int r = 0, i;
    for (i = 0; i < 10000 && (r = rpcool_map_put(&a, m, (snprintf(key, sizeof key, "key-%d", i), key), (uint64_t)i, NULL)) == 0; i++) {}
    CHECK_EQ(r, SHMHEAP_E_FULL);
    uint64_t v = 0;
    CHECK(rpcool_map_get(m, "k", &v) && v == 5);
    CHECK(i > 0 && rpcool_map_get(m, "key-0", &v) && v == 0);
    rpcool_arena_destroy(&a);
    shmheap_close(h);
    shmheap_unlink(hn, NULL);

    char nm[64];
    memset(nm, 'c', sizeof nm);
    snprintf(nm, sizeof nm, "g%d", (int)getpid());
    nm[strlen(nm)] = 'c';
    nm[48] = 0;
    rpcool_server *srv = NULL;
    CHECK_EQ(rpcool_server_open(nm, NULL, &srv), 0);
    if (srv) {
        rpcool_server_add_handler(srv, T_FN_SLOW, t_h_slow, NULL, 0);
        rpcool_server_start(srv, 1);
        rpcool_conn *c = NULL;
        CHECK_EQ(rpcool_connect(nm, NULL, &c), 0);
        if (c) {
            CHECK_EQ(t_slow_call(c, 0), 1);
            char *pg = (char *)rpcool_alloc_pages(c, 5000);
            CHECK(pg && ((uintptr_t)pg & 4095) == 0 && shmheap_usable_size(rpcool_heap(c), pg) >= 8192);
            rpcool_free(c, pg);
            rpcool_disconnect(c);
        }
        rpcool_server_close(srv);
    }
    nm[48] = 'c';
    nm[49] = 0;
    CHECK_EQ(rpcool_server_open(nm, NULL, &srv), RPCOOL_E_BADNAME);
    rpcool_conn *c2 = NULL;
    CHECK_EQ(rpcool_connect(nm, NULL, &c2), RPCOOL_E_BADNAME);
}


/* rpcool_ctx_fail(ctx, code) ends the call with that status, whatever its sign, as
   a handler's return would; it is not counted as a fault. */
static void test_ctx_fail_status(void)
{
    const char *name = t_uniq("cfail");
    rpcool_server *s = t_open_server_ex(name, 0, 20, 1);
    if (!s) return;
    rpcool_server_add_handler(s, T_FN_FAIL_ARG + 10, t_h_fail_arg, NULL, RPCOOL_SANDBOX);
    rpcool_server_start(s, 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    const int codes[] = {42, 0, 1, RPCOOL_E_BADPTR, -5, SHMHEAP_E_FULL};
    for (unsigned fn = T_FN_FAIL_ARG; fn <= T_FN_FAIL_ARG + 10; fn += 10)
        for (unsigned k = 0; k < sizeof codes / sizeof codes[0]; k++) {
            *a = codes[k];
            int r = rpcool_call(c, fn, a, sizeof *a, NULL, NULL);
            CHECKF(r == codes[k], "rpcool_ctx_fail(ctx, %d) (handler %u): the call returned %d "
                   "(%s)", codes[k], fn, r, rpcool_strerror(r));
        }
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.faults, 0);
    rpcool_free(c, a);
    t_disconnect_close(c, s);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(test_sync_echo);
    RUN(test_names);
    RUN(test_async);
    RUN(test_threads);
    RUN(test_processes);
    RUN(test_idle_sleeps);
    RUN(test_sleep_wake);
    RUN(test_builders);
    RUN(test_kept_slot);
    RUN_NO_TSAN(g_stop_and_close_from_handler);
    RUN_NO_TSAN(g_sync_waits_for_slot);
    RUN_NO_TSAN(g_client_sleeps);
    RUN_NO_TSAN(g_builders_and_names);
    RUN_NO_TSAN(test_ctx_fail_status);
    return T_DONE();
}
