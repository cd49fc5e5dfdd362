// TSAN
/* rpcool's promises against hostile data and dead clients, each with the test that failed
 * before it held: a sandboxed handler that overflows its stack on a cyclic list gets
 * RPCOOL_E_FAULT and the server serves on (threads of rpcool_server_start, and a thread of the
 * program's own in rpcool_serve); stack_size sets how deep a handler may recurse; checked reads
 * that add up to more than the heap end the call (RPCOOL_E_BUDGET); time limits end a looping
 * sandboxed handler (RPCOOL_E_DEADLINE) and a relaxed one at its next checked read; close returns
 * within its bound whatever handlers do; a dead client's queued call never starts and the client
 * is reaped while another client's handler runs; blocks a handler allocated for a call that
 * failed or did not reply are freed; contained faults, unknown handler ids and bad replies are
 * logged once per connection with the client's pid; rpcool_free reports bad pointers; a
 * connection heap over max_heap_size is refused; wait_ready waits for a server not up yet. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <pthread.h>
#include <sys/wait.h>

enum { FN_ECHO = 1, FN_RECURSE = 2, FN_WALK = 3, FN_RAWLOOP = 4, FN_DEPTH = 5, FN_QUIT = 6,
       FN_STATS = 7, FN_SLEEP = 8, FN_ALLOC_NEG = 9, FN_ALLOC_FAIL = 10, FN_ALLOC_BAD = 11,
       FN_ALLOC_FAULT = 12, FN_ALLOC_NOREPLY = 13, FN_WALK_RELAXED = 14, FN_NEED_SLOW = 15,
       FN_BADREPLY = 16, FN_FAULT = 17, FN_SPIN_FLAG = 18, FN_CHAIN = 19,
       FN_MAPGET = 20 };

struct node {
    struct node *next;
    long v;
};

/* A list of n nodes in the connection heap; cyclic: the last points back to the first. */
static struct node *make_list(rpcool_conn *c, int n, int cyclic)
{
    struct node *first = NULL, *prev = NULL;
    for (int i = 0; i < n; i++) {
        struct node *x = (struct node *)rpcool_alloc(c, sizeof *x);
        if (!x) return NULL;
        x->v = i;
        x->next = NULL;
        if (prev) prev->next = x;
        else first = x;
        prev = x;
    }
    if (cyclic && prev) prev->next = first;
    return first;
}

/* Recursion the compiler cannot turn into a loop: each frame keeps a page of its own. */
static long recurse(rpcool_ctx *ctx, const struct node *n)
{
    volatile char pad[1024];
    if (!n) return 0;
    n = RPCOOL_NEED(ctx, n);
    pad[0] = (char)n->v;
    long r = recurse(ctx, n->next);
    return r + pad[0] + 1;
}

static int h_recurse(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    return (int)recurse(ctx, *(struct node *const *)rpcool_ctx_need(ctx, arg, sizeof(void *)));
}

/* Recursion of depth *arg, a page of stack per frame. */
static long depth(int n)
{
    volatile char pad[1024];
    pad[0] = (char)n;
    if (n <= 0) return 0;
    return depth(n - 1) + pad[0];
}

static int h_depth(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    const int *n = (const int *)rpcool_ctx_need(ctx, arg, len);
    return depth(*n) >= 0 ? 0 : 1;
}

/* Walks the list through the checked accessor, in a loop. */
static int h_walk(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    long n = 0;
    for (const struct node *x = *(struct node *const *)rpcool_ctx_need(ctx, arg, sizeof(void *));
         x; x = x->next) {
        x = RPCOOL_NEED(ctx, x);
        n++;
    }
    return (int)n;
}

/* Walks the list with plain reads (no checked accessor). */
static int h_rawloop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    long n = 0;
    for (const struct node *volatile x = *(struct node *const *)arg; x; x = x->next) n++;
    return (int)n;
}

/* Reads its argument through the checked accessor every millisecond, for ever. */
static int h_need_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    for (;;) {
        rpcool_ctx_need(ctx, arg, len);
        usleep(1000);
    }
    return 0;
}

static int spin_release; /* atomic */
static int h_spin_flag(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    while (!__atomic_load_n(&spin_release, __ATOMIC_SEQ_CST)) usleep(1000);
    return 0;
}

static int quit; /* atomic */
static int h_quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    __atomic_store_n(&quit, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static int h_stats(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len;
    rpcool_server_stats st;
    rpcool_server_get_stats((rpcool_server *)user, &st);
    return (int)st.faults;
}

static int sleep_starts;
static int h_sleep(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    __atomic_fetch_add(&sleep_starts, 1, __ATOMIC_SEQ_CST);
    usleep(len >= sizeof(int) ? (useconds_t)*(int *)arg * 1000 : 1000);
    return 1;
}

static volatile int *volatile wild = (volatile int *)8; /* an address nothing maps */

/* 1 MiB in the client's heap, then the call fails in one way or another. */
static int h_alloc_then(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len;
    if (!rpcool_ctx_alloc(ctx, (size_t)1 << 20)) return SHMHEAP_E_FULL;
    switch ((int)(intptr_t)user) {
    case FN_ALLOC_NEG: return -5;
    case FN_ALLOC_FAIL: rpcool_ctx_fail(ctx, -6);
    case FN_ALLOC_BAD: return (int)*(const int *)rpcool_ctx_need(ctx, (void *)8, sizeof(int));
    case FN_ALLOC_FAULT: return *wild;
    default: return 0; /* FN_ALLOC_NOREPLY: success without a reply */
    }
}

static char private_reply[16];
static int h_badreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    rpcool_ctx_reply(ctx, private_reply, sizeof private_reply);
    return 0;
}

static int h_fault(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    return *wild;
}

/* A reply of three 4 KiB blocks chained by their first word: the caller frees each. */
static int h_chain(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    void **b[3];
    for (int k = 0; k < 3; k++) {
        b[k] = (void **)rpcool_ctx_alloc(ctx, 4096);
        if (!b[k]) return SHMHEAP_E_FULL;
    }
    b[0][0] = b[1];
    b[1][0] = b[2];
    b[2][0] = NULL;
    rpcool_ctx_reply(ctx, b[0], 4096);
    return 0;
}

/* n lookups of "k0".."k{n-1}" (modulo keys) in a map of the client's heap, checked */
struct mapget {
    const rpcool_map *m;
    long n, keys;
};

static int h_mapget(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len;
    (void)user;
    const struct mapget *a = RPCOOL_NEED(ctx, (const struct mapget *)arg);
    int found = 0;
    for (long i = 0; i < a->n; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%ld", i % a->keys);
        uint64_t v = 0;
        found += rpcool_map_get_checked(ctx, a->m, key, &v) && v == (uint64_t)(i % a->keys);
    }
    return found;
}

static void add_handlers(rpcool_server *s)
{
    rpcool_server_add_handler(s, FN_MAPGET, h_mapget, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_CHAIN, h_chain, NULL, 0);
    rpcool_server_add_handler(s, FN_ECHO, t_h_echo, NULL, 0);
    rpcool_server_add_handler(s, FN_RECURSE, h_recurse, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_WALK, h_walk, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_WALK_RELAXED, h_walk, NULL, 0);
    rpcool_server_add_handler(s, FN_DEPTH, h_depth, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_QUIT, h_quit, NULL, 0);
    rpcool_server_add_handler(s, FN_STATS, h_stats, s, 0);
    rpcool_server_add_handler(s, FN_SLEEP, h_sleep, NULL, 0);
    rpcool_server_add_handler(s, FN_ALLOC_NEG, h_alloc_then, (void *)FN_ALLOC_NEG, 0);
    rpcool_server_add_handler(s, FN_ALLOC_FAIL, h_alloc_then, (void *)FN_ALLOC_FAIL, 0);
    rpcool_server_add_handler(s, FN_ALLOC_BAD, h_alloc_then, (void *)FN_ALLOC_BAD, 0);
    rpcool_server_add_handler(s, FN_ALLOC_FAULT, h_alloc_then, (void *)FN_ALLOC_FAULT,
                              RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_ALLOC_NOREPLY, h_alloc_then, (void *)FN_ALLOC_NOREPLY, 0);
    rpcool_server_add_handler(s, FN_BADREPLY, h_badreply, NULL, 0);
    rpcool_server_add_handler(s, FN_FAULT, h_fault, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_SPIN_FLAG, h_spin_flag, NULL, 0);
}

/* A server of channel NAME with options so and every handler above, serving with that many
   threads (0: not yet); NULL and a FAIL line if it cannot be opened. */
static rpcool_server *open_with(const char *name, const rpcool_server_opts *so, unsigned threads)
{
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, so, &s), 0);
    if (s) add_handlers(s);
    if (s && threads) rpcool_server_start(s, threads);
    return s;
}

/* No file of the channel is left in /dev/shm. */
static int files_left(const char *name)
{
    char p[160];
    snprintf(p, sizeof p, "rpcool.%s", name);
    int n = t_shm_exists(p);
    snprintf(p, sizeof p, "rpcool.%s.sock", name);
    return n + t_shm_exists(p);
}

/* A server in a child process: `how` 0 serves with rpcool_server_start (one thread), 1 with
   rpcool_serve on a thread of the child's own; until a call of FN_QUIT, then it closes the
   server and exits 0 (or 3 if close failed). */
struct child_server {
    const char *name;
    int how;
    rpcool_server *s;
};

static void *serve_main(void *p)
{
    rpcool_serve(((struct child_server *)p)->s);
    return NULL;
}

static pid_t fork_server(const char *name, int how)
{
    pid_t p = fork();
    if (p == 0) {
        struct child_server cs = {name, how, NULL};
        rpcool_server_opts o = {.reap_ms = 20};
        if (rpcool_server_open(name, &o, &cs.s)) _exit(2);
        add_handlers(cs.s);
        pthread_t th;
        if (how == 0) rpcool_server_start(cs.s, 1);
        else if (pthread_create(&th, NULL, serve_main, &cs)) _exit(4);
        while (!__atomic_load_n(&quit, __ATOMIC_SEQ_CST)) usleep(1000);
        if (how == 1) rpcool_server_stop(cs.s), pthread_join(th, NULL);
        _exit(rpcool_server_close(cs.s) ? 3 : 0);
    }
    return p;
}

static rpcool_conn *connect_retry(const char *name, const rpcool_conn_opts *o)
{
    rpcool_conn *c = NULL;
    for (int i = 0; i < 400 && rpcool_connect(name, o, &c); i++) usleep(5000);
    return c;
}

/* Ask the child server to quit: it must exit 0 within 5 s (else it is killed, and fails). */
static void finish_server(pid_t sp, rpcool_conn *c, const char *name)
{
    int st = 0;
    pid_t w = 0;
    if (c) {
        rpcool_call_opts co = {.timeout_ms = 2000};
        rpcool_call_ex(c, FN_QUIT, NULL, 0, &co, NULL, NULL);
        rpcool_disconnect(c);
    }
    for (int i = 0; i < 500 && (w = waitpid(sp, &st, WNOHANG)) == 0; i++) usleep(10000);
    if (w == 0) {
        t_kill_wait(sp);
        CHECKF(0, "the server did not finish");
    } else {
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the server: %s %d",
               WIFSIGNALED(st) ? "killed by signal" : "exit status",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    t_rm_channel(name); /* a killed server's files: not to stay after the test */
}

/* A call with a timeout, so that a hung server fails the test instead of hanging it. */
static int call_t(rpcool_conn *c, unsigned fn, const void *arg, size_t len, unsigned ms)
{
    rpcool_call_opts co = {.timeout_ms = ms};
    return rpcool_call_ex(c, fn, arg, len, &co, NULL, NULL);
}

static void stack_overflow(int how)
{
    const char *name = t_uniq(how ? "sovu" : "sovs");
    pid_t sp = fork_server(name, how);
    rpcool_conn *c = connect_retry(name, NULL);
    CHECK(c != NULL);
    if (!c) return finish_server(sp, NULL, name);
    struct node **arg = (struct node **)rpcool_alloc(c, sizeof *arg);
    *arg = make_list(c, 2, 1);
    int r = call_t(c, FN_RECURSE, arg, sizeof *arg, 10000);
    CHECKF(r == RPCOOL_E_FAULT, "recursion over a cycle: %d (%s)", r, rpcool_strerror(r));
    r = call_t(c, FN_RECURSE, arg, sizeof *arg, 10000); /* and again: the thread carries on */
    CHECKF(r == RPCOOL_E_FAULT, "second overflow: %d (%s)", r, rpcool_strerror(r));
    CHECKF(call_t(c, FN_STATS, NULL, 0, 5000) == 2, "faults counted: %d",
           call_t(c, FN_STATS, NULL, 0, 5000));
    (*arg)->next->next = NULL; /* a list again: served as before */
    CHECK_EQ(call_t(c, FN_RECURSE, arg, sizeof *arg, 5000), 3); /* (1 + 1) + (0 + 1) */
    rpcool_free(c, arg);
    finish_server(sp, c, name);
}

/* A sandboxed handler that recurses until its stack is gone (a cyclic list): RPCOOL_E_FAULT, and
   the server serves on, on a thread of rpcool_server_start and on a thread of the program's own
   in rpcool_serve. */
static void test_stack_overflow_started(void) { stack_overflow(0); }
static void test_stack_overflow_own_thread(void) { stack_overflow(1); }

/* Checked reads over a cyclic list, in a loop, end with RPCOOL_E_BUDGET once they add up to more
   than the heap, in a sandboxed handler and in a relaxed one. */
static void test_cycle_budget(void)
{
    const char *name = t_uniq("cyc");
    pid_t sp = fork_server(name, 0);
    rpcool_conn_opts o = {.heap_size = 8 << 20};
    rpcool_conn *c = connect_retry(name, &o);
    CHECK(c != NULL);
    if (!c) return finish_server(sp, NULL, name);
    struct node **arg = (struct node **)rpcool_alloc(c, sizeof *arg);
    *arg = make_list(c, 3, 1);
    uint64_t t0 = rcp__now_ns();
    int r = call_t(c, FN_WALK, arg, sizeof *arg, 5000);
    CHECKF(r == RPCOOL_E_BUDGET, "sandboxed walk over a cycle: %d (%s)", r, rpcool_strerror(r));
    r = call_t(c, FN_WALK_RELAXED, arg, sizeof *arg, 5000);
    CHECKF(r == RPCOOL_E_BUDGET, "relaxed walk over a cycle: %d (%s)", r, rpcool_strerror(r));
    CHECKF(rcp__now_ns() - t0 < 4000000000ull, "took %llu ms",
           (unsigned long long)((rcp__now_ns() - t0) / 1000000));
    (*arg)->next->next->next = NULL;
    CHECK_EQ(call_t(c, FN_WALK, arg, sizeof *arg, 5000), 3);
    rpcool_free(c, arg);
    finish_server(sp, c, name);
}

/* rpcool_map_get_checked charges the budget what it reads (the entries probed and the keys
   compared), not the whole table: 3000 lookups in a map of 4096 slots in a 64 MiB heap (the
   whole table each time would be 295 MB) are served. */
static void test_map_get_budget(void)
{
    const char *name = t_uniq("mapb");
    pid_t sp = fork_server(name, 0);
    rpcool_conn_opts o = {.heap_size = 64 << 20};
    rpcool_conn *c = connect_retry(name, &o);
    CHECK(c != NULL);
    if (!c) return finish_server(sp, NULL, name);
    rpcool_arena a;
    CHECK_EQ(rpcool_arena_init(&a, rpcool_heap(c), 1 << 20), 0);
    rpcool_map *m = rpcool_map_new(&a, 2048);
    CHECK(m && m->cap == 4096);
    for (long i = 0; m && i < 1000; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%ld", i);
        CHECK_EQ(rpcool_map_put(&a, m, key, (uint64_t)i, NULL), 0);
    }
    struct mapget *arg = (struct mapget *)rpcool_alloc(c, sizeof *arg);
    arg->m = m;
    arg->n = 3000;
    arg->keys = 1000;
    int r = call_t(c, FN_MAPGET, arg, sizeof *arg, 20000);
    CHECKF(r == 3000, "3000 checked lookups: %d (%s)", r, r < 0 ? rpcool_strerror(r) : "found");
    rpcool_free(c, arg);
    rpcool_arena_destroy(&a);
    finish_server(sp, c, name);
}

/* A client dies while its handler runs: stats.conns and rpcool_server_conns agree all along
   (the connection counted and listed, with no calls in flight, until its handler has ended and
   it is reaped), then both say 0. */
static void test_dead_client_conns_agree(void)
{
    const char *name = t_uniq("dconn");
    rpcool_server_opts so = {.reap_ms = 20};
    rpcool_server *s = open_with(name, &so, 2);
    if (!s) return;
    __atomic_store_n(&sleep_starts, 0, __ATOMIC_SEQ_CST);
    pid_t b = fork();
    if (b == 0) {
        rpcool_conn *c = NULL;
        if (rpcool_connect(name, NULL, &c)) _exit(2);
        int *m = (int *)rpcool_alloc(c, sizeof *m);
        uint64_t bid;
        *m = 800;
        if (rpcool_call_async(c, FN_SLEEP, m, sizeof *m, NULL, NULL, NULL, &bid)) _exit(3);
        pause();
        _exit(0);
    }
    uint64_t t0 = rcp__now_ns();
    while (!__atomic_load_n(&sleep_starts, __ATOMIC_SEQ_CST) && rcp__now_ns() - t0 < 5000000000ull)
        usleep(1000);
    t_kill_wait(b);
    int disagree = 0, samples = 0, listed_draining = 0;
    unsigned last = 1;
    t0 = rcp__now_ns();
    while (rcp__now_ns() - t0 < 2000000000ull) {
        rpcool_server_stats st;
        rpcool_conn_stats cs[4];
        int n1 = rpcool_server_conns(s, cs, 4);
        CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
        int n2 = rpcool_server_conns(s, cs, 4);
        if (n1 == n2) {
            samples++;
            if ((int)st.conns != n1) disagree++;
            if (n1 == 1 && cs[0].inflight == 0) listed_draining++;
        }
        last = st.conns;
        if (!st.conns && st.reaped) break;
        usleep(2000);
    }
    CHECKF(!disagree, "stats.conns and rpcool_server_conns disagreed in %d of %d samples",
           disagree, samples);
    CHECKF(listed_draining > 0, "the dead client's connection was never listed while its "
           "handler ran");
    CHECKF(last == 0, "the connection stayed: %u", last);
    rpcool_server_close(s);
}

/* A client dies while its call waits behind another client's long call on the one serving
   thread: it is reaped while that call still runs (within reap_ms and a little), and its call
   never starts. */
static void test_dead_client_call_dropped(void)
{
    const char *name = t_uniq("dead");
    rpcool_server_opts so = {.reap_ms = 50};
    rpcool_server *s = open_with(name, &so, 1);
    if (!s) return;
    rpcool_conn *a = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    int *ms = (int *)rpcool_alloc(a, sizeof *ms);
    *ms = 1500;
    __atomic_store_n(&sleep_starts, 0, __ATOMIC_SEQ_CST);
    uint64_t id;
    CHECK_EQ(rpcool_call_async(a, FN_SLEEP, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    while (!__atomic_load_n(&sleep_starts, __ATOMIC_SEQ_CST)) usleep(1000);
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t b = fork();
    if (b == 0) { /* client B: queues the same call, then is killed */
        rpcool_conn *c = NULL;
        if (rpcool_connect(name, NULL, &c)) _exit(2);
        int *m = (int *)rpcool_alloc(c, sizeof *m);
        uint64_t bid;
        *m = 1500;
        if (rpcool_call_async(c, FN_SLEEP, m, sizeof *m, NULL, NULL, NULL, &bid)) _exit(3);
        char x = 1;
        if (write(pfd[1], &x, 1) != 1) _exit(4);
        pause();
        _exit(0);
    }
    char x = 0;
    CHECK_EQ(read(pfd[0], &x, 1), 1);
    close(pfd[0]);
    close(pfd[1]);
    usleep(200000);
    t_kill_wait(b);
    uint64_t t0 = rcp__now_ns();
    rpcool_server_stats st;
    memset(&st, 0, sizeof st);
    while (rcp__now_ns() - t0 < 2000000000ull) {
        rpcool_server_get_stats(s, &st);
        if (st.reaped) break;
        usleep(5000);
    }
    uint64_t took = (rcp__now_ns() - t0) / 1000000;
    CHECKF(st.reaped == 1 && took < 400, "client B reaped %llu after %llu ms (reap_ms 50; A's "
           "call runs for another second)", (unsigned long long)st.reaped,
           (unsigned long long)took);
    CHECK_EQ(rpcool_wait(a, id, NULL, NULL), 1);
    usleep(300000); /* B's call would have started by now */
    int started = __atomic_load_n(&sleep_starts, __ATOMIC_SEQ_CST);
    CHECKF(started == 1, "handlers started: %d (the dead client's call ran)", started);
    rpcool_free(a, ms);
    rpcool_disconnect(a);
    CHECK_EQ(rpcool_server_close(s), 0);
}

/* A server with add_handlers' handlers on one thread and a client with an 8 MiB heap: 0, or
   -1 with a FAIL line and nothing left open. */
static int serve_8m(const char *name, rpcool_server **s, rpcool_conn **c)
{
    *c = NULL;
    if (!(*s = t_serve(name, NULL, 0))) return -1;
    add_handlers(*s);
    rpcool_server_start(*s, 1);
    rpcool_conn_opts o = {.heap_size = 8 << 20};
    CHECK_EQ(rpcool_connect(name, &o, c), 0);
    if (*c) return 0;
    rpcool_server_close(*s);
    return -1;
}

/* Blocks a handler allocated are freed when its call fails (negative status, rpcool_ctx_fail, a
   checked accessor, a fault) or succeeds without a reply: 20 calls of each with 1 MiB in an
   8 MiB heap, then 6 MiB are still free. */
static void test_failed_call_blocks_freed(void)
{
    const char *name = t_uniq("blk");
    rpcool_server *s;
    rpcool_conn *c;
    if (serve_8m(name, &s, &c)) return;
    static const struct { unsigned fn; int want; } k[] = {
        {FN_ALLOC_NEG, -5}, {FN_ALLOC_FAIL, -6}, {FN_ALLOC_BAD, RPCOOL_E_BADPTR},
        {FN_ALLOC_FAULT, RPCOOL_E_FAULT}, {FN_ALLOC_NOREPLY, 0}};
    for (unsigned j = 0; j < sizeof k / sizeof k[0]; j++)
        for (int i = 0; i < 20; i++) {
            void *ret = (void *)1;
            int r = rpcool_call(c, k[j].fn, NULL, 0, &ret, NULL);
            CHECKF(r == k[j].want && ret == NULL, "fn %u call %d: %d (%s), reply %p", k[j].fn, i,
                   r, rpcool_strerror(r), ret);
            if (r != k[j].want) break;
        }
    void *big = rpcool_alloc(c, (size_t)6 << 20);
    CHECKF(big != NULL, "6 MiB of the 8 MiB heap are not free: the failed calls' blocks leaked");
    rpcool_free(c, big);
    t_disconnect_close(c, s);
}

/* A reply of several blocks: the caller frees each block once (the rule on both transports),
   and a reply discarded with ret NULL leaves nothing behind. 8 MiB heap, 12 KiB a call: 1000
   calls of either kind would fill it if blocks leaked. */
static void test_multiblock_reply(void)
{
    const char *name = t_uniq("mblk");
    rpcool_server *s;
    rpcool_conn *c;
    if (serve_8m(name, &s, &c)) return;
    for (int i = 0; i < 1000; i++) {
        void *ret = NULL;
        int r = rpcool_call(c, FN_CHAIN, NULL, 0, &ret, NULL);
        if (r || !ret) { CHECKF(0, "call %d: %d (%s)", i, r, rpcool_strerror(r)); break; }
        int freed = 0;
        for (void **b = (void **)ret; b;) {
            void **next = (void **)b[0];
            CHECK_EQ(rpcool_free(c, b), 0);
            b = next;
            freed++;
        }
        if (freed != 3) { CHECKF(0, "call %d: %d blocks in the reply", i, freed); break; }
    }
    for (int i = 0; i < 1000; i++) {
        int r = rpcool_call(c, FN_CHAIN, NULL, 0, NULL, NULL);
        if (r) { CHECKF(0, "discarded call %d: %d (%s)", i, r, rpcool_strerror(r)); break; }
    }
    void *big = rpcool_alloc(c, (size_t)6 << 20);
    CHECKF(big != NULL, "%s", "6 MiB of the 8 MiB heap are not free: reply blocks leaked");
    rpcool_free(c, big);
    t_disconnect_close(c, s);
}

/* What a log callback received. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[16384];
static void log_fn(int level, const char *msg, void *user)
{
    (void)level; (void)user;
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(log_buf);
    snprintf(log_buf + n, sizeof log_buf - n, "%s\n", msg);
    pthread_mutex_unlock(&log_mu);
}

static int log_count(const char *a, const char *b)
{
    int n = 0;
    pthread_mutex_lock(&log_mu);
    for (const char *l = log_buf; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        if (strstr(line, a) && (!b || strstr(line, b))) n++;
        l += len + (e ? 1 : 0);
    }
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* A contained fault, an unknown handler id and a reply outside the heap are logged, once per
   connection each however often they happen, with the client's pid. */
static void test_faults_logged_once(void)
{
    const char *name = t_uniq("flog");
    rpcool_server_opts so = {.log = log_fn};
    rpcool_server *s = open_with(name, &so, 1);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)getpid());
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(rpcool_call(c, FN_FAULT, NULL, 0, NULL, NULL), RPCOOL_E_FAULT);
        CHECK_EQ(rpcool_call(c, 999, NULL, 0, NULL, NULL), RPCOOL_E_NOHANDLER);
        CHECK_EQ(rpcool_call(c, FN_BADREPLY, NULL, 0, NULL, NULL), RPCOOL_E_BADPTR);
    }
    CHECKF(log_count(pid, "fault") == 1, "fault lines: %d\n%s", log_count(pid, "fault"), log_buf);
    CHECKF(log_count(pid, "id 999") == 1, "unknown handler lines: %d\n%s", log_count(pid, "id 999"),
           log_buf);
    CHECKF(log_count(pid, "outside") == 1, "bad reply lines: %d\n%s", log_count(pid, "outside"),
           log_buf);
    t_disconnect_close(c, s);
}

#ifndef T_OLD /* what follows uses options the header had not before these promises */
/* rpcool_free reports what is not a live block of the connection heap. */
static void test_free_reports(void)
{
    const char *name = t_uniq("free");
    rpcool_server *s = NULL;
    rpcool_conn *c = NULL;
    if (t_serve_connect(name, 1, &s, &c)) return;
    int on_stack = 0;
    void *m = malloc(64);
    char *b = (char *)rpcool_alloc(c, 64);
    CHECK(rpcool_free(c, &on_stack) < 0);
    CHECK(rpcool_free(c, m) < 0);
    CHECK(rpcool_free(c, b + 8) < 0);
    CHECK_EQ(rpcool_free(c, b), 0);
    CHECK(rpcool_free(c, b) < 0);
    CHECK_EQ(rpcool_free(c, NULL), 0);
    free(m);
    t_disconnect_close(c, s);
}

/* stack_size: how deep a handler on a thread of rpcool_server_start may recurse. */
static void test_stack_size_option(void)
{
    const char *name = t_uniq("stk");
    rpcool_server_opts so = {.stack_size = 256 << 10};
    rpcool_server *s = open_with(name, &so, 1);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    int *n = (int *)rpcool_alloc(c, sizeof *n);
    *n = 100; /* about 100 KiB */
    CHECK_EQ(rpcool_call(c, FN_DEPTH, n, sizeof *n, NULL, NULL), 0);
    *n = 2000; /* about 2 MiB: over 256 KiB */
    CHECK_EQ(rpcool_call(c, FN_DEPTH, n, sizeof *n, NULL, NULL), RPCOOL_E_FAULT);
    rpcool_free(c, n);
    rpcool_disconnect(c);
    CHECK_EQ(rpcool_server_close(s), 0);
    /* the default (8 MiB) takes 2 MiB */
    name = t_uniq("stkd");
    s = t_serve(name, NULL, 0);
    if (!s) return;
    add_handlers(s);
    rpcool_server_start(s, 1);
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    n = (int *)rpcool_alloc(c, sizeof *n);
    *n = 2000;
    CHECK_EQ(rpcool_call(c, FN_DEPTH, n, sizeof *n, NULL, NULL), 0);
    rpcool_free(c, n);
    rpcool_disconnect(c);
    CHECK_EQ(rpcool_server_close(s), 0);
}

/* A sandboxed handler looping over a cyclic list with plain reads is ended at its time limit
   (RPCOOL_E_DEADLINE), counted; a relaxed one at its next checked read; the thread serves on. */
static void test_time_limits(void)
{
    const char *name = t_uniq("lim");
    rpcool_server_opts so = {.limit_ms = 2000};
    rpcool_server *s = open_with(name, &so, 0);
    if (!s) return;
    rpcool_handler_opts ho = {.safety = RPCOOL_SANDBOX, .limit_ms = 100};
    rpcool_server_add_handler_ex(s, FN_RAWLOOP, h_rawloop, NULL, &ho);
    rpcool_server_add_handler(s, FN_NEED_SLOW, h_need_slow, NULL, 0); /* the server's 2 s */
    rpcool_server_start(s, 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    struct node **arg = (struct node **)rpcool_alloc(c, sizeof *arg);
    *arg = make_list(c, 2, 1);
    uint64_t t0 = rcp__now_ns();
    int r = call_t(c, FN_RAWLOOP, arg, sizeof *arg, 5000);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(r == RPCOOL_E_DEADLINE && ms >= 100 && ms < 1000, "sandboxed loop: %d (%s) after "
           "%llu ms", r, rpcool_strerror(r), (unsigned long long)ms);
    t0 = rcp__now_ns();
    r = call_t(c, FN_NEED_SLOW, arg, sizeof *arg, 5000);
    ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(r == RPCOOL_E_DEADLINE && ms >= 2000 && ms < 3000, "relaxed loop: %d (%s) after "
           "%llu ms", r, rpcool_strerror(r), (unsigned long long)ms);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.over_limit, 2);
    (*arg)->next->next = NULL;
    CHECK_EQ(call_t(c, FN_RAWLOOP, arg, sizeof *arg, 5000), 2);
    rpcool_free(c, arg);
    rpcool_disconnect(c);
    CHECK_EQ(rpcool_server_close(s), 0);
}

/* rpcool_server_close returns within its bound: a sandboxed handler looping for ever is ended
   (close returns 0); a relaxed one cannot be: close returns RPCOOL_E_TIMEOUT and leaves it its
   thread (in a child process: the server's memory stays with that thread). */
static int close_child(void *arg)
{
    const char *name = (const char *)arg;
    rpcool_server_opts so = {.close_ms = 200};
    rpcool_server *s = NULL;
    if (rpcool_server_open(name, &so, &s)) return 2;
    add_handlers(s);
    rpcool_server_add_handler(s, FN_RAWLOOP, h_rawloop, NULL, RPCOOL_SANDBOX);
    rpcool_server_start(s, 2);
    rpcool_conn *c = NULL;
    if (rpcool_connect(name, NULL, &c)) return 3;
    struct node **arg2 = (struct node **)rpcool_alloc(c, sizeof *arg2);
    *arg2 = make_list(c, 2, 1);
    uint64_t id1, id2;
    if (rpcool_call_async(c, FN_RAWLOOP, arg2, sizeof *arg2, NULL, NULL, NULL, &id1)) return 4;
    int want = RPCOOL_E_TIMEOUT, code = 0;
    if (!strstr(name, "clr")) want = 0; /* the sandboxed loop alone */
    else if (rpcool_call_async(c, FN_SPIN_FLAG, NULL, 0, NULL, NULL, NULL, &id2)) return 5;
    usleep(100000);
    uint64_t t0 = rcp__now_ns();
    int r = rpcool_server_close(s);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    if (r != want) code = 6;
    else if (ms > 1000) code = 7;
    __atomic_store_n(&spin_release, 1, __ATOMIC_SEQ_CST);
    if (r) usleep(100000); /* the stuck thread leaves */
    return code;
}

static void test_close_bounded(void)
{
    const char *name = t_uniq("clsb");
    CHECK_EQ(t_in_child(close_child, (void *)name), 0);
    CHECK_EQ(files_left(name), 0);
    name = t_uniq("clr");
    CHECK_EQ(t_in_child(close_child, (void *)name), 0);
    CHECK_EQ(files_left(name), 0);
}

/* A client may not ask for a heap over max_heap_size; wait_ready connects to a server that
   comes up after the connect began. */
static void test_heap_cap_and_wait_ready(void)
{
    const char *name = t_uniq("cap");
    rpcool_server_opts so = {.max_heap_size = 16 << 20};
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, &so, &s), 0);
    if (!s) return;
    rpcool_server_start(s, 1);
    rpcool_conn_opts o = {.heap_size = 32 << 20};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), RPCOOL_E_HEAPSIZE);
    o.heap_size = 16 << 20;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) rpcool_disconnect(c);
    rpcool_server_close(s);
    CHECK_EQ(rpcool_connect(name, NULL, &c), RPCOOL_E_NOCHANNEL); /* no server: at once */
    pid_t p = fork();
    if (p == 0) {
        usleep(300000);
        rpcool_server *s2 = NULL;
        if (rpcool_server_open(name, NULL, &s2)) _exit(2);
        add_handlers(s2);
        rpcool_server_start(s2, 1);
        while (!__atomic_load_n(&quit, __ATOMIC_SEQ_CST)) usleep(1000);
        _exit(rpcool_server_close(s2) ? 3 : 0);
    }
    rpcool_conn_opts w = {.wait_ready = 1, .connect_timeout_ms = 5000};
    int r = rpcool_connect(name, &w, &c);
    CHECKF(r == 0, "wait_ready: %s", rpcool_strerror(r));
    finish_server(p, r ? NULL : c, name);
}
#endif

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(test_stack_overflow_started);
    RUN(test_stack_overflow_own_thread);
    RUN(test_cycle_budget);
    RUN(test_map_get_budget);
    RUN(test_dead_client_call_dropped);
    RUN(test_dead_client_conns_agree);
    RUN(test_failed_call_blocks_freed);
    RUN(test_multiblock_reply);
    RUN(test_faults_logged_once);
#ifndef T_OLD
    RUN(test_free_reports);
    RUN(test_stack_size_option);
    RUN_NO_TSAN(test_time_limits); /* ThreadSanitizer holds signals back from a plain loop */
    RUN_NO_TSAN(test_close_bounded);
    RUN(test_heap_cap_and_wait_ready);
#endif
    return T_DONE();
}
