/* rpcool failures: a client SIGKILLed mid-call, a dead server, a closed channel, takeover of a
 * dead server's channel, malformed queue entries, heap full, channel full, call timeouts. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <signal.h>
#include <sys/stat.h>

enum { FN_SLEEP = 1, FN_ECHO = 2, FN_BIG = 3 };

static int h_sleep(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    usleep(len >= sizeof(int) ? (useconds_t)*(int *)arg * 1000 : 1000);
    return 1;
}

static int h_echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    char *r = (char *)rpcool_ctx_alloc(ctx, len ? len : 1);
    if (!r) return SHMHEAP_E_FULL;
    memcpy(r, arg, len);
    rpcool_ctx_reply(ctx, r, len);
    return 0;
}

static rpcool_server *open_server(const char *name, unsigned max_conns)
{
    rpcool_server *s = NULL;
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.reap_ms = 20;
    o.max_conns = max_conns;
    int r = rpcool_server_open(name, &o, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (r) return NULL;
    rpcool_server_add_handler(s, FN_SLEEP, h_sleep, NULL, 0);
    rpcool_server_add_handler(s, FN_ECHO, h_echo, NULL, 0);
    return s;
}

static int sleep_call(rpcool_conn *c, int ms, const rpcool_call_opts *o)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = ms;
    int r = rpcool_call_ex(c, FN_SLEEP, a, sizeof *a, o, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

static int shm_exists(const char *heap)
{
    char p[200];
    struct stat st;
    if (!strncmp(heap, "shm:", 4)) heap += 4;
    snprintf(p, sizeof p, "/dev/shm/%s", heap);
    return stat(p, &st) == 0;
}

static rpcool_conn *connect_retry(const char *name)
{
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, NULL, &c); i++) usleep(5000);
    return c;
}

/* A client dies in the middle of a call: the server finishes the handler, reclaims the whole
   connection heap, and serves other clients throughout. */
static void test_client_killed(void)
{
    const char *name = t_uniq("kill");
    rpcool_server *s = open_server(name, 0);
    if (!s) return;
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t p = fork();
    if (p == 0) {
        rpcool_conn *c;
        if (rpcool_connect(name, NULL, &c)) _exit(2);
        char hn[160];
        snprintf(hn, sizeof hn, "%s", shmheap_name(rpcool_heap(c)));
        if (write(pfd[1], hn, sizeof hn) != (ssize_t)sizeof hn) _exit(3);
        sleep_call(c, 300, NULL); /* killed in here */
        _exit(4);
    }
    close(pfd[1]);
    rpcool_server_start(s, 1);
    char hn[160] = "";
    CHECK_EQ(read(pfd[0], hn, sizeof hn), (ssize_t)sizeof hn);
    close(pfd[0]);
    CHECK(shm_exists(hn));
    usleep(100000); /* the call is running */
    kill(p, SIGKILL);
    int st;
    waitpid(p, &st, 0);
    CHECK(WIFSIGNALED(st));
    rpcool_server_stats ss;
    uint64_t t0 = rcp__now_ns();
    do { usleep(10000); rpcool_server_get_stats(s, &ss); } while (!ss.reaped && rcp__now_ns() - t0 < 3000000000ull);
    CHECK_EQ(ss.reaped, 1);
    CHECK_EQ(ss.conns, 0);
    CHECK(!shm_exists(hn)); /* the dead client's heap is gone */
    rpcool_conn *c;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* others are served */
    if (c) {
        CHECK_EQ(sleep_call(c, 1, NULL), 1);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* The server dies while a call waits: the call fails within about peer_check_ms. */
static void test_server_killed(void)
{
    const char *name = t_uniq("sdead");
    pid_t p = fork();
    if (p == 0) {
        rpcool_server *s = open_server(name, 0);
        if (!s) _exit(2);
        rpcool_serve(s);
        _exit(0);
    }
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.peer_check_ms = 50;
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, &o, &c); i++) usleep(5000);
    CHECK(c != NULL);
    if (!c) { kill(p, SIGKILL); waitpid(p, NULL, 0); return; }
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 10000;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, FN_SLEEP, a, sizeof *a, NULL, NULL, NULL, &id), 0);
    usleep(50000);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), RPCOOL_E_PEERDEAD);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms < 500, "noticed the dead server after %llu ms", (unsigned long long)ms);
    CHECK_EQ(sleep_call(c, 1, NULL), RPCOOL_E_PEERDEAD); /* and fails at once from now on */
    rpcool_disconnect(c);
    /* the dead server's channel is taken over by a new server; the old heap was unlinked */
    rpcool_server *s = open_server(name, 0);
    CHECK(s != NULL);
    if (s) rpcool_server_close(s);
}

/* A server that closes its channel: waiting and later calls fail with RPCOOL_E_CLOSED. */
static void test_server_closed(void)
{
    const char *name = t_uniq("closed");
    rpcool_server *s = open_server(name, 0);
    if (!s) return;
    rpcool_server_start(s, 1);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    rpcool_server_close(s);
    CHECK_EQ(sleep_call(c, 1, NULL), RPCOOL_E_CLOSED);
    rpcool_disconnect(c);
}

/* A server killed with live and dead clients: a new server takes the name over, reclaims the
   dead client's heap and serves new clients; the old live client sees PEERDEAD. */
static void test_takeover(void)
{
    const char *name = t_uniq("take");
    pid_t srv = fork();
    if (srv == 0) {
        rpcool_server *s = open_server(name, 0);
        if (!s) _exit(2);
        rpcool_serve(s);
        _exit(0);
    }
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t cl = fork();
    if (cl == 0) {
        rpcool_conn *c = connect_retry(name);
        if (!c) _exit(2);
        char hn[160];
        snprintf(hn, sizeof hn, "%s", shmheap_name(rpcool_heap(c)));
        if (write(pfd[1], hn, sizeof hn) != (ssize_t)sizeof hn) _exit(3);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char hn[160] = "";
    CHECK_EQ(read(pfd[0], hn, sizeof hn), (ssize_t)sizeof hn);
    close(pfd[0]);
    rpcool_conn *live = connect_retry(name);
    CHECK(live != NULL);
    rpcool_server *s2 = NULL;
    CHECK_EQ(rpcool_server_open(name, NULL, &s2), RPCOOL_E_NAMETAKEN);
    kill(cl, SIGKILL);
    waitpid(cl, NULL, 0);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    CHECK(shm_exists(hn)); /* nobody reclaimed it yet: its server died too */
    s2 = open_server(name, 0);
    CHECK(s2 != NULL);
    if (!s2) return;
    rpcool_server_start(s2, 1);
    CHECK(!shm_exists(hn)); /* the takeover reclaimed the dead client's heap */
    if (live) {
        CHECK_EQ(sleep_call(live, 1, NULL), RPCOOL_E_PEERDEAD);
        rpcool_disconnect(live);
    }
    rpcool_conn *c;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        CHECK_EQ(sleep_call(c, 1, NULL), 1);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s2);
}

/* Write a request slot by hand, as a buggy or malicious client could, and read the answer. */
static int raw_call(rpcool_conn *c, uint32_t fn, uint32_t flags, uint64_t arg, uint64_t len,
                    uint64_t seal, uint64_t seal_len)
{
    int i = rpcool__slot_get(c);
    if (i < 0) return i;
    struct rpcool__req *sl = &c->hdr->req[i];
    sl->fn = fn;
    sl->flags = flags;
    sl->arg = arg;
    sl->arg_len = len;
    sl->seal = seal;
    sl->seal_len = seal_len;
    c->pend[i].pstate = RPCOOL__P_SYNC;
    c->pend[i].seal_p = NULL;
    rpcool__shm_post(c, (unsigned)i);
    int r = rpcool__shm_wait(c, (unsigned)i, rcp__now_ns() + 2000000000ull);
    return r ? r : rpcool__harvest(c, (unsigned)i, NULL, NULL);
}

static void test_malformed(void)
{
    const char *name = t_uniq("bad");
    rpcool_server *s = open_server(name, 0);
    if (!s) return;
    rpcool_server_start(s, 1);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    char *a = rpcool_strdup(c, "ok");
    uint64_t A = (uint64_t)(uintptr_t)a;
    CHECK_EQ(raw_call(c, FN_ECHO, 0, A, 3, 0, 0), 0);
    CHECK_EQ(raw_call(c, 999, 0, A, 3, 0, 0), RPCOOL_E_NOHANDLER);
    CHECK_EQ(raw_call(c, 0xffffffffu, 0, A, 3, 0, 0), RPCOOL_E_NOHANDLER);
    CHECK_EQ(raw_call(c, FN_ECHO, 0x80, A, 3, 0, 0), RPCOOL_E_INVAL);            /* unknown flags */
    CHECK_EQ(raw_call(c, FN_ECHO, 0, 0x1000, 3, 0, 0), RPCOOL_E_BADPTR);         /* outside */
    CHECK_EQ(raw_call(c, FN_ECHO, 0, A, (uint64_t)1 << 40, 0, 0), RPCOOL_E_BADPTR); /* too long */
    CHECK_EQ(raw_call(c, FN_ECHO, 0, ~0ull - 2, 8, 0, 0), RPCOOL_E_BADPTR);       /* wraps */
    CHECK_EQ(raw_call(c, FN_ECHO, RPCOOL_SEAL, A, 3, A + 64, 4096), RPCOOL_E_BADPTR); /* arg not in seal */
    CHECK_EQ(raw_call(c, FN_ECHO, RPCOOL_SEAL, A, 3, 0x1000, 1 << 20), RPCOOL_E_BADPTR);
    /* a request bit with no request behind it: ignored and counted */
    uint64_t before;
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    before = st.bad_entries;
    rcp__fetch_or(&c->hdr->req_bits, 1ull << 63);
    uint64_t t0 = rcp__now_ns();
    do { usleep(1000); rpcool_server_get_stats(s, &st); } while (st.bad_entries == before && rcp__now_ns() - t0 < 2000000000ull);
    CHECK_EQ(st.bad_entries, before + 1);
    /* nothing is corrupted: the heap checks out and calls still work */
    CHECK_EQ(rpcool_call(c, FN_ECHO, a, 3, NULL, NULL), 0);
    CHECK_EQ(shmheap_check(rpcool_heap(c), NULL), 0);
    /* a connection request naming a file instead of a heap is refused */
    rpcool_free(c, a);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

static void test_full(void)
{
    const char *name = t_uniq("full");
    rpcool_server *s = open_server(name, 2);
    if (!s) return;
    rpcool_server_start(s, 1);
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.heap_size = 2 << 20;
    rpcool_conn *c1, *c2, *c3;
    CHECK_EQ(rpcool_connect(name, &o, &c1), 0);
    CHECK_EQ(rpcool_connect(name, &o, &c2), 0);
    CHECK_EQ(rpcool_connect(name, &o, &c3), RPCOOL_E_NOSLOT); /* two slots */
    /* fill c1's heap, then ask for a reply that needs space */
    char *arg = (char *)rpcool_alloc(c1, 20000);
    memset(arg, 'x', 20000);
    void *blocks[4096];
    int n = 0;
    while (n < 4096 && (blocks[n] = rpcool_alloc(c1, 20000)) != NULL) n++;
    CHECK(n > 0 && n < 4096);
    CHECK(rpcool_alloc(c1, 20000) == NULL);
    CHECK_EQ(rpcool_call(c1, FN_ECHO, arg, 20000, NULL, NULL), SHMHEAP_E_FULL);
    rpcool_free(c1, blocks[--n]);
    void *ret = NULL;
    size_t rl;
    CHECK_EQ(rpcool_call(c1, FN_ECHO, arg, 20000, &ret, &rl), 0); /* space again */
    CHECK(ret && rl == 20000);
    rpcool_free(c1, ret);
    while (n > 0) rpcool_free(c1, blocks[--n]);
    rpcool_disconnect(c2);
    /* the freed slot is reusable once the server let go of it */
    uint64_t t0 = rcp__now_ns();
    int r;
    while ((r = rpcool_connect(name, &o, &c3)) == RPCOOL_E_NOSLOT && rcp__now_ns() - t0 < 2000000000ull) usleep(2000);
    CHECK_EQ(r, 0);
    if (!r) rpcool_disconnect(c3);
    rpcool_disconnect(c1);
    rpcool_server_close(s);
}

static void test_timeout(void)
{
    const char *name = t_uniq("tmo");
    rpcool_server *s = open_server(name, 0);
    if (!s) return;
    rpcool_server_start(s, 1);
    rpcool_conn *c;
    if (rpcool_connect(name, NULL, &c)) { CHECK(0); rpcool_server_close(s); return; }
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 30;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(sleep_call(c, 200, &co), RPCOOL_E_TIMEOUT);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms >= 30 && ms < 150, "timed out after %llu ms", (unsigned long long)ms);
    CHECK(rcp__load(&c->free_bits) != ~0ull); /* the abandoned slot waits for its reply */
    usleep(250000);
    rpcool_progress(c);
    CHECK(rcp__load(&c->free_bits) == ~0ull); /* and is reclaimed after it */
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

int main(void)
{
    (void)t_skip;
    TEST(test_client_killed);
    TEST(test_server_killed);
    TEST(test_server_closed);
    TEST(test_takeover);
    TEST(test_malformed);
    TEST(test_full);
    TEST(test_timeout);
    return T_DONE();
}
