/* rpcool failures: a client SIGKILLed mid-call, a dead server, a closed channel, takeover of a
 * dead server's channel, a dead server's heaps made ahead, malformed queue entries, heap full, channel full, call timeouts,
 * rpcool_progress when the server dies, liveness across fork, a client the server drops; clients
 * SIGKILLed inside rpcool_connect or rpcool_disconnect leave nothing held (counted in a private
 * pod: after reaping, after the server closes, after a takeover); an asynchronous call's
 * timeout_ms holds in rpcool_wait, rpcool_poll and rpcool_progress. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <signal.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>

enum { FN_BIG = 3 };

static int sleep_call(rpcool_conn *c, int ms, const rpcool_call_opts *o)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = ms;
    int r = rpcool_call_ex(c, T_FN_SLOW, a, sizeof *a, o, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

/* A client dies in the middle of a call: the server finishes the handler, reclaims the whole
   connection heap, and serves other clients throughout. */
static void test_client_killed(void)
{
    const char *name = t_uniq("kill");
    rpcool_server *s = t_open_server(name, 0);
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
    CHECK(t_shm_exists(hn));
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
    CHECK(!t_shm_exists(hn)); /* the dead client's heap is gone */
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
    pid_t p = t_fork_server(name);
    rpcool_conn_opts o = {.peer_check_ms = 50};
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, &o, &c); i++) usleep(5000);
    CHECK(c != NULL);
    if (!c) { kill(p, SIGKILL); waitpid(p, NULL, 0); return; }
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 10000;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, NULL, NULL, NULL, &id), 0);
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
    rpcool_server *s = t_open_server(name, 0);
    CHECK(s != NULL);
    if (s) rpcool_server_close(s);
}

/* A server that closes its channel: waiting and later calls fail with RPCOOL_E_CLOSED. */
static void test_server_closed(void)
{
    const char *name = t_uniq("closed");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serving_connect(name, 0, NULL, &s, &c)) return;
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    rpcool_server_close(s);
    CHECK_EQ(sleep_call(c, 1, NULL), RPCOOL_E_CLOSED);
    rpcool_disconnect(c);
}

/* A server killed with live and dead clients: a new server takes the name over and serves new
   clients; the old live client sees PEERDEAD. Connection heaps are the server's memfds: the
   dead client's went with the last process that had it (nothing for the new server to
   reclaim); the live client's stays held while it is connected (its mapping stays valid) and
   is freed once it disconnects. */
static void test_takeover(void)
{
    const char *name = t_uniq("take");
    pid_t srv = t_fork_server(name);
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t cl = fork();
    if (cl == 0) {
        rpcool_conn *c = t_connect_retry(name, NULL);
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
    rpcool_conn *live = t_connect_retry(name, NULL);
    CHECK(live != NULL);
    rpcool_server *s2 = NULL;
    CHECK_EQ(rpcool_server_open(name, NULL, &s2), RPCOOL_E_NAMETAKEN);
    kill(cl, SIGKILL);
    waitpid(cl, NULL, 0);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    CHECK(!t_shm_exists(hn)); /* gone with its client and its server */
    char ln[160] = "";
    if (live) snprintf(ln, sizeof ln, "%s", shmheap_name(rpcool_heap(live)));
    CHECK(!live || t_shm_exists(ln));
    s2 = t_open_server(name, 0);
    CHECK(s2 != NULL);
    if (!s2) return;
    rpcool_server_start(s2, 1);
    if (live) {
        CHECK(t_shm_exists(ln)); /* still the orphan client's */
        CHECK_EQ(sleep_call(live, 1, NULL), RPCOOL_E_PEERDEAD);
        rpcool_disconnect(live);
        CHECK(!t_shm_exists(ln)); /* freed once that client disconnects */
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
    t_raw_fill(c, i, fn, flags, arg, len, seal, seal_len);
    rpcool__shm_post(c, (unsigned)i);
    int r = rpcool__shm_wait(c, (unsigned)i, rcp__now_ns() + 2000000000ull);
    return r ? r : rpcool__harvest(c, (unsigned)i, NULL, NULL);
}

static void test_malformed(void)
{
    const char *name = t_uniq("bad");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serving_connect(name, 0, NULL, &s, &c)) return;
    char *a = rpcool_strdup(c, "ok");
    uint64_t A = (uint64_t)(uintptr_t)a;
    CHECK_EQ(raw_call(c, T_FN_ECHO, 0, A, 3, 0, 0), 0);
    CHECK_EQ(raw_call(c, 999, 0, A, 3, 0, 0), RPCOOL_E_NOHANDLER);
    CHECK_EQ(raw_call(c, 0xffffffffu, 0, A, 3, 0, 0), RPCOOL_E_NOHANDLER);
    CHECK_EQ(raw_call(c, T_FN_ECHO, 0x80, A, 3, 0, 0), RPCOOL_E_INVAL);            /* unknown flags */
    CHECK_EQ(raw_call(c, T_FN_ECHO, 0, 0x1000, 3, 0, 0), RPCOOL_E_BADPTR);         /* outside */
    CHECK_EQ(raw_call(c, T_FN_ECHO, 0, A, (uint64_t)1 << 40, 0, 0), RPCOOL_E_BADPTR); /* too long */
    CHECK_EQ(raw_call(c, T_FN_ECHO, 0, ~0ull - 2, 8, 0, 0), RPCOOL_E_BADPTR);       /* wraps */
    CHECK_EQ(raw_call(c, T_FN_ECHO, RPCOOL_SEAL, A, 3, A + 64, 4096), RPCOOL_E_BADPTR); /* arg not in seal */
    CHECK_EQ(raw_call(c, T_FN_ECHO, RPCOOL_SEAL, A, 3, 0x1000, 1 << 20), RPCOOL_E_BADPTR);
    /* the private copy-instead-of-seal bit (8): only on a sealed call of under a page, and the
       argument must lie in its range; the copy is then bounded by a page */
    CHECK_EQ(raw_call(c, T_FN_ECHO, RPCOOL_SEAL | 8u, A, 3, A, 3), 0);
    CHECK_EQ(raw_call(c, T_FN_ECHO, 8u, A, 3, A, 3), RPCOOL_E_INVAL);
    CHECK_EQ(raw_call(c, T_FN_ECHO, RPCOOL_SEAL | 8u, A, 3, A, 4096), RPCOOL_E_INVAL);
    CHECK_EQ(raw_call(c, T_FN_ECHO, RPCOOL_SEAL | 8u, A, 3, A + 1, 100), RPCOOL_E_BADPTR);
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
    CHECK_EQ(rpcool_call(c, T_FN_ECHO, a, 3, NULL, NULL), 0);
    CHECK_EQ(shmheap_check(rpcool_heap(c), NULL), 0);
    /* a connection request naming a file instead of a heap is refused */
    rpcool_free(c, a);
    t_disconnect_close(c, s);
}

static void test_full(void)
{
    const char *name = t_uniq("full");
    rpcool_server *s = t_serving(name, 2);
    if (!s) return;
    rpcool_conn_opts o = {.heap_size = 2 << 20};
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
    CHECK_EQ(rpcool_call(c1, T_FN_ECHO, arg, 20000, NULL, NULL), SHMHEAP_E_FULL);
    rpcool_free(c1, blocks[--n]);
    void *ret = NULL;
    size_t rl;
    CHECK_EQ(rpcool_call(c1, T_FN_ECHO, arg, 20000, &ret, &rl), 0); /* space again */
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
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serving_connect(name, 0, NULL, &s, &c)) return;
    rpcool_call_opts co = {.timeout_ms = 30};
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(sleep_call(c, 200, &co), RPCOOL_E_TIMEOUT);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms >= 30 && ms < 150, "timed out after %llu ms", (unsigned long long)ms);
    CHECK(rcp__load(&c->free_bits) != ~0ull); /* the abandoned slot waits for its reply */
    usleep(250000);
    rpcool_progress(c);
    CHECK(rcp__load(&c->free_bits) == ~0ull); /* and is reclaimed after it */
    CHECK_EQ(sleep_call(c, 1, NULL), 1);
    t_disconnect_close(c, s);
}

static double ms_since(uint64_t t0) { return (double)(rcp__now_ns() - t0) / 1e6; }

/* Servers in a child process, for the death tests. */
static pid_t g_srv, g_srv_kid;

static int start_child_server(const char *name, int fork_kid)
{
    int p[2];
    pid_t pid = t_fork_pipe(p);
    if (pid == 0) {
        rpcool_server_opts so = {.reap_ms = 20};
        rpcool_server *s = NULL;
        if (rpcool_server_open(name, &so, &s)) _exit(2);
        rpcool_server_add_handler(s, T_FN_SLOW, t_h_slow, NULL, 0);
        rpcool_server_start(s, 1);
        pid_t kid = 0;
        if (fork_kid && (kid = fork()) == 0) { pause(); _exit(0); } /* inherits the channel */
        if (write(p[1], &kid, sizeof kid) != (ssize_t)sizeof kid) _exit(3);
        for (;;) pause();
    }
    if (pid < 0) return -1;
    g_srv = pid;
    g_srv_kid = 0;
    int ok = read(p[0], &g_srv_kid, sizeof g_srv_kid) == (ssize_t)sizeof g_srv_kid;
    close(p[0]);
    return ok ? 0 : -1;
}

/* rpcool_progress returns a negative error when the server died with callbacks pending. */
static int g_cb_calls;

static void count_cb(rpcool_conn *c, int status, void *ret, size_t n, void *user)
{
    (void)c; (void)status; (void)ret; (void)n; (void)user;
    g_cb_calls++;
}

static void g_progress_server_dead(void)
{
    const char *name = t_uniq("gprog");
    if (start_child_server(name, 0)) { CHECK(0); t_kill_wait(g_srv); return; }
    rpcool_conn_opts o = {.peer_check_ms = 50};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (!c) { t_kill_wait(g_srv); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 5000;
    g_cb_calls = 0;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, NULL, count_cb, NULL, NULL), 0);
    usleep(30000);
    CHECK_EQ(rpcool_progress(c), 0);
    t_kill_wait(g_srv);
    uint64_t t0 = rcp__now_ns();
    int r;
    while ((r = rpcool_progress(c)) == 0 && ms_since(t0) < 2000) usleep(5000);
    CHECK_EQ(r, RPCOOL_E_PEERDEAD);
    CHECKF(ms_since(t0) < 1000, "progress noticed the dead server after %.0f ms", ms_since(t0));
    CHECK_EQ(g_cb_calls, 0);
    rpcool_disconnect(c);
    t_rm_channel(name);
}

/* fork: "the child closes its inherited copies, so the parent's death is still seen". A server
   that forked dies: its clients see it. A client that forked dies: the server reaps it. */
static void g_fork_liveness(void)
{
    const char *name = t_uniq("gforks");
    if (start_child_server(name, 1)) { CHECK(0); t_kill_wait(g_srv_kid); t_kill_wait(g_srv); return; }
    rpcool_conn_opts o = {.peer_check_ms = 50, .timeout_ms = 2000};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) CHECK_EQ(t_slow_call(c, 0), 1);
    t_kill_wait(g_srv);
    if (c) {
        uint64_t t0 = rcp__now_ns();
        int r = t_slow_call(c, 0);
        CHECKF(r == RPCOOL_E_PEERDEAD, "call after the server died, its forked child alive: %s", rpcool_strerror(r));
        CHECKF(ms_since(t0) < 1000, "took %.0f ms", ms_since(t0));
        rpcool_disconnect(c);
    }
    t_kill_wait(g_srv_kid);
    t_rm_channel(name);

    /* the client side */
    name = t_uniq("gforkc");
    rpcool_server_opts so = {.reap_ms = 20};
    rpcool_server *s = t_serve(name, &so, 1);
    if (!s) return;
    int pp[2];
    if (pipe(pp)) { CHECK(0); rpcool_server_close(s); return; }
    fflush(stdout);
    pid_t cl = fork();
    if (cl == 0) {
        close(pp[0]);
        rpcool_conn *k = NULL;
        if (rpcool_connect(name, NULL, &k)) _exit(2);
        pid_t kid = fork();
        if (kid == 0) { pause(); _exit(0); }
        if (write(pp[1], &kid, sizeof kid) != (ssize_t)sizeof kid) _exit(3);
        for (;;) pause();
    }
    close(pp[1]);
    pid_t kid = 0;
    CHECK_EQ(read(pp[0], &kid, sizeof kid), (ssize_t)sizeof kid);
    close(pp[0]);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.conns, 1);
    t_kill_wait(cl);
    uint64_t t0 = rcp__now_ns();
    do { usleep(5000); rpcool_server_get_stats(s, &st); } while (!st.reaped && ms_since(t0) < 1500);
    CHECKF(st.reaped == 1 && st.conns == 0, "a dead client whose forked child lives was not reaped (%u conns)", st.conns);
    t_kill_wait(kid);
    rpcool_server_close(s);
}

/* A client the server drops (here: it keeps its heap's mutex taken while a handler needs it) is
   told: its next call fails with RPCOOL_E_DROPPED within peer_check_ms instead of waiting for
   its timeout, its close returns at once, and the channel serves other clients as before. The
   client runs in a child: in the server's process it would share the server's heap handle. */
static int dropped_child(void *arg)
{
    const char *name = (const char *)arg;
    rpcool_conn_opts o = {.peer_check_ms = 50};
    rpcool_conn *c = NULL;
    if (rpcool_connect(name, &o, &c)) return 100;
    int bad = 0, r;
    if (rpcool_call(c, T_FN_BIGREPLY, NULL, 0, NULL, NULL) != 4) bad |= 1;
    if (shmheap__lock(rpcool_heap(c))) bad |= 1; /* held by this thread: alive, never let go */
    r = rpcool_call(c, T_FN_BIGREPLY, NULL, 0, NULL, NULL); /* the handler waits 1 s, then NULL */
    if (r != SHMHEAP_E_FULL && r != RPCOOL_E_DROPPED) {
        bad |= 2;
        fprintf(stderr, "# call whose handler could not take the mutex: %s\n", rpcool_strerror(r));
    }
    shmheap__unlock(rpcool_heap(c)); /* too late: the connection is dropped */
    rpcool_call_opts co = {.timeout_ms = 3000};
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (!a) return 101;
    *a = 0;
    uint64_t t0 = rcp__now_ns();
    r = rpcool_call_ex(c, T_FN_SLOW, a, sizeof *a, &co, NULL, NULL);
    double took = ms_since(t0);
    if (r != RPCOOL_E_DROPPED) { bad |= 4; fprintf(stderr, "# call after the drop: %s after %.0f ms\n", rpcool_strerror(r), took); }
    if (took > 1000) { bad |= 8; fprintf(stderr, "# the drop was noticed after %.0f ms\n", took); }
    if ((r = rpcool_call_ex(c, T_FN_SLOW, a, sizeof *a, &co, NULL, NULL)) != RPCOOL_E_DROPPED) bad |= 16; /* sticky */
    t0 = rcp__now_ns();
    if (rpcool_disconnect(c)) bad |= 32;
    if (ms_since(t0) > 1000) { bad |= 64; fprintf(stderr, "# close of a dropped connection took %.0f ms\n", ms_since(t0)); }
    return bad;
}

static void g_dropped_client(void)
{
    const char *n0 = t_uniq("gdrop");
    static char name[96];
    snprintf(name, sizeof name, "%s", n0);
    rpcool_server_opts so = {.reap_ms = 20};
    rpcool_server *s = t_serve(name, &so, 1);
    if (!s) return;
    int st = t_in_child(dropped_child, name);
    CHECKF(st == 0, "dropped client: child status %d (1 setup, 2 first call, 4 later call not RPCOOL_E_DROPPED, "
           "8 noticed late, 16 not sticky, 32 close failed, 64 close slow; 100+ connect/alloc)", st);
    CHECK(strstr(rpcool_strerror(RPCOOL_E_DROPPED), "dropped") != NULL);
    rpcool_server_stats ss;
    uint64_t t0 = rcp__now_ns();
    do { usleep(5000); rpcool_server_get_stats(s, &ss); } while (ss.conns && ms_since(t0) < 2000);
    CHECKF(ss.conns == 0, "the dropped client's slot was not freed (%u conns)", ss.conns);
    rpcool_conn *c2 = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c2), 0);
    if (c2) {
        CHECK_EQ(t_slow_call(c2, 0), 1);
        CHECK_EQ(rpcool_disconnect(c2), 0);
    }
    rpcool_server_close(s);
}

/* A new server s of channel NAME: started, one connection made and closed (a server makes heaps
   from its first connect on), then its pool of heaps made ahead waited for (3 s at most): its
   stats. */
static rpcool_server_stats start_and_fill_pool(rpcool_server *s, const char *name)
{
    rpcool_server_stats st;
    rpcool_conn *c = NULL;
    rpcool_server_start(s, 1);
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) rpcool_disconnect(c);
    for (int i = 0; i < 300; i++) {
        rpcool_server_get_stats(s, &st);
        if (st.ready == RPCOOL_DEFAULT_PREALLOC && st.conns == 0) break;
        usleep(10000);
    }
    return st;
}

/* A server SIGKILLed with heaps made ahead that no client claimed (and one that was claimed,
   by a client that died too): nothing of them stays held; the next server (another channel
   here) frees their pod entries when it makes its own heaps, so every recorded entry is then
   one it holds; nothing is left in /dev/shm. A private pod, so that no other program's heaps
   count. */
static void test_server_killed_premade(void)
{
    t_pod pod;
    t_pod_enter(&pod, "premade");
    const char *name = t_uniq("premade");
    int rd[2];
    CHECK_EQ(pipe(rd), 0);
    pid_t srv = fork();
    if (srv == 0) {
        rpcool_server *s = NULL;
        rpcool_server_opts o = {.prealloc = 8};
        if (rpcool_server_open(name, &o, &s) || write(rd[1], "s", 1) != 1) _exit(2);
        rpcool_serve(s);
        _exit(0);
    }
    char b = 0;
    CHECK_EQ(read(rd[0], &b, 1), 1);
    pid_t cl = fork();
    if (cl == 0) {
        rpcool_conn *c = t_connect_retry(name, NULL);
        if (!c || write(rd[1], "c", 1) != 1) _exit(2);
        pause();
        _exit(0);
    }
    CHECK_EQ(read(rd[0], &b, 1), 1);
    int rec = 0, held = 0;
    for (int i = 0; i < 200 && held < 9; i++) { /* 8 ready, 1 connected */
        t_pod_fd_entries(&rec, &held);
        if (held < 9) usleep(10000);
    }
    CHECKF(held == 9, "the server holds %d heaps (8 ready and 1 connected expected)", held);
    kill(cl, SIGKILL);
    kill(srv, SIGKILL);
    waitpid(cl, NULL, 0);
    waitpid(srv, NULL, 0);
    t_pod_fd_entries(&rec, &held);
    CHECKF(held == 0 && rec >= 9, "after the kill: %d recorded, %d held", rec, held);
    const char *n2 = t_uniq("premade2");
    rpcool_server *s2 = t_open_server(n2, 0);
    if (s2) {
        rpcool_server_stats st = start_and_fill_pool(s2, n2);
        t_pod_fd_entries(&rec, &held);
        /* every entry is one it holds, but for the heap of the connection just closed (freed by
           the next heap made): the dead server's are gone */
        CHECKF(rec - held <= 1 && held == (int)st.ready && st.ready == RPCOOL_DEFAULT_PREALLOC,
               "the next server: %d recorded, %d held, %u its own", rec, held, st.ready);
        rpcool_server_close(s2);
    }
    t_pod_fd_entries(&rec, &held);
    CHECK_EQ(held, 0);
    t_rm_channel(name);
    close(rd[0]);
    close(rd[1]);
    t_pod_leave(&pod);
}

/* Connections of one process to one channel share its mapping, which keeps the descriptor of
   the first one (and so that connection's open file description) alive: disconnecting the
   first must still free its slot at once (the server counts it closed and can give the slot
   again), while the second goes on; and once both are gone, the mapping is too. */
static void test_shared_channel_mapping(void)
{
    const char *name = t_uniq("chmap");
    rpcool_server *s = t_serving(name, 2);
    if (!s) return;
    rpcool_conn *c1 = NULL, *c2 = NULL, *c3 = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c1), 0);
    CHECK_EQ(rpcool_connect(name, NULL, &c2), 0);
    if (!c1 || !c2) { rpcool_server_close(s); return; }
    CHECK(c1->ch == c2->ch);
    void *m = c1->ch;
    rpcool_server_stats st0, st;
    rpcool_server_get_stats(s, &st0);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_disconnect(c1), 0);
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    CHECKF(ms < 1000, "disconnect took %.0f ms", ms);
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.closed, st0.closed + 1);
    CHECK_EQ(sleep_call(c2, 1, NULL), 1);
    CHECK_EQ(rpcool_connect(name, NULL, &c3), 0); /* the freed slot (max_conns 2) */
    if (c3) {
        CHECK(c3->ch == m);
        CHECK_EQ(sleep_call(c3, 1, NULL), 1);
        rpcool_disconnect(c3);
    }
    rpcool_disconnect(c2);
    /* the mapping is gone with the last connection: the page is free again */
    unsigned char vec = 0;
    CHECK(mincore(m, 4096, &vec) == -1 && errno == ENOMEM);
    rpcool_server_close(s);
}

/* A connect made while the server is still opening (it holds the name, its socket is not
   there yet: it is making its first heaps) waits for it and succeeds. It used to return the
   errno of its first try at the socket (2, "unknown error"): every result must be 0 or an
   error code rpcool_strerror explains. */
static void test_connect_while_server_opens(void)
{
    for (int k = 0; k < 5; k++) {
        const char *name = t_uniq("opening");
        pid_t srv = fork();
        if (srv == 0) {
            rpcool_server *s = NULL;
            rpcool_server_opts o = {.prealloc = RPCOOL_MAX_PREALLOC};
            if (rpcool_server_open(name, &o, &s)) _exit(2);
            rpcool_server_add_handler(s, T_FN_SLOW, t_h_slow, NULL, 0);
            rpcool_serve(s);
            _exit(0);
        }
        rpcool_conn *c = NULL;
        int r = RPCOOL_E_NOCHANNEL, tries = 0;
        uint64_t t0 = rcp__now_ns();
        while ((r = rpcool_connect(name, NULL, &c)) == RPCOOL_E_NOCHANNEL &&
               rcp__now_ns() - t0 < 5000000000ull)
            tries++;
        CHECKF(r == 0, "connect while the server opens: %d (%s) after %d tries", r,
               rpcool_strerror(r), tries);
        CHECK(r <= 0);
        if (c) {
            CHECK_EQ(sleep_call(c, 1, NULL), 1);
            rpcool_disconnect(c);
        }
        t_kill_wait(srv);
        char p[128];
        snprintf(p, sizeof p, "/dev/shm/rpcool.%s", name);
        unlink(p);
        snprintf(p, sizeof p, "/dev/shm/rpcool.%s.sock", name);
        unlink(p);
    }
}

static int leaked(rpcool_server *s, int extra)
{
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    return t_pod_held() - (int)st.ready - (int)st.conns - extra;
}

static int wait_no_leak(rpcool_server *s, unsigned ms)
{
    int n = leaked(s, 0);
    for (unsigned i = 0; n && i < ms / 10; i++) {
        usleep(10000);
        n = leaked(s, 0);
    }
    return n;
}

/* Microseconds of one connect (disc = 0) or one disconnect (disc = 1) here, now. */
static unsigned time_us(const char *name, int disc)
{
    rpcool_conn *c = NULL;
    uint64_t t0 = rcp__now_ns();
    if (rpcool_connect(name, NULL, &c)) return 1000;
    uint64_t t1 = rcp__now_ns();
    rpcool_disconnect(c);
    uint64_t t2 = rcp__now_ns();
    return (unsigned)((disc ? t2 - t1 : t1 - t0) / 1000) + 1;
}

/* n clients, each SIGKILLed at a random moment of its rpcool_connect (disc = 0) or of its
   rpcool_disconnect (disc = 1): the delay is drawn from [0, 3 * span_us]. */
static void kill_clients(const char *name, int n, int disc, unsigned span_us, uint64_t *rng)
{
    for (int k = 0; k < n; k++) {
        int pfd[2];
        if (pipe(pfd)) return;
        pid_t p = fork();
        if (p == 0) {
            rpcool_conn *c = NULL;
            char b = 1;
            close(pfd[0]);
            if (disc && rpcool_connect(name, NULL, &c)) _exit(2);
            if (write(pfd[1], &b, 1) != 1) _exit(3);
            if (disc) rpcool_disconnect(c);
            else if (rpcool_connect(name, NULL, &c)) _exit(2);
            for (;;) pause(); /* done before the kill: it dies connected (or not at all) */
        }
        close(pfd[1]);
        char b;
        ssize_t rd = read(pfd[0], &b, 1);
        (void)rd;
        close(pfd[0]);
        unsigned d = (unsigned)(t_rng(rng) % (3 * (uint64_t)span_us + 1));
        if (d > 60) usleep(d - 60); /* usleep's own overhead */
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
}

/* A client killed for sure inside rpcool_connect: it asks for a heap size no made-ahead heap
   has, so the acceptor makes one while it waits; we hold the pod's lock, so the acceptor waits
   for it in there. The kill comes while the client waits for the answer; then we let the
   acceptor go on: it makes the heap, gives the client a slot (its lock byte taken through the
   descriptor it sends) and finds the client gone. */
static void kill_in_connect(const char *name)
{
    static unsigned mib = 6;
    char path[80];
    int ready[2];
    snprintf(path, sizeof path, "/dev/shm/%s", getenv("SHMHEAP_POD")); /* private: ours to lock */
    int fd = open(path, O_RDWR | O_CREAT, 0666);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    CHECK_EQ(pipe(ready), 0);
    mib += 2; /* a size of its own each time: never one of the pool's */
    pid_t p = fork();
    if (p == 0) {
        rpcool_conn *c = NULL;
        rpcool_conn_opts o = {.heap_size = (size_t)mib << 20, .connect_timeout_ms = 10000};
        char b = 1;
        if (write(ready[1], &b, 1) != 1) _exit(3);
        rpcool_connect(name, &o, &c);
        _exit(0);
    }
    char b;
    CHECK_EQ(read(ready[0], &b, 1), 1);
    close(ready[0]);
    close(ready[1]);
    usleep(150000); /* it asked; the acceptor waits for the pod */
    kill(p, SIGKILL);
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFSIGNALED(st), "the client was not inside rpcool_connect when killed");
    if (fd >= 0) close(fd); /* drops the lock */
}

/* A server of channel NAME (reaping every reap_ms) serving with one thread, and clients
   SIGKILLed inside rpcool_connect: one for sure (kill_in_connect), n at random moments (drawn
   from seed). The server, or NULL with a FAIL line. */
static rpcool_server *serve_kill_connecting(const char *name, unsigned reap_ms, int n,
                                            uint64_t seed)
{
    uint64_t rng = seed ^ (uint64_t)getpid();
    rpcool_server *s = t_open_server_ex(name, 0, reap_ms, 1);
    if (!s) return NULL;
    rpcool_server_start(s, 1);
    kill_in_connect(name);
    kill_clients(name, n, 0, time_us(name, 0), &rng);
    return s;
}

/* Clients killed inside rpcool_connect, reaped by a running server. */
static void connect_killed_reaped(void)
{
    const char *name = t_uniq("kconn");
    rpcool_server *s = serve_kill_connecting(name, 20, 40, 0x9e3779b97f4a7c15ull);
    if (!s) return;
    int n = wait_no_leak(s, 3000);
    CHECKF(n == 0, "%d heaps of dead clients still held in the pod", n);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* room for more */
    if (c) {
        int *a = (int *)rpcool_alloc(c, sizeof *a);
        *a = 1;
        CHECK_EQ(rpcool_call(c, T_FN_SLOW, a, sizeof *a, NULL, NULL), 1);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
    CHECK_EQ(t_pod_held(), 0);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
}

/* Clients killed inside rpcool_connect, then the server closes before it reaps them
   (its reap period is a minute). */
static void connect_killed_server_closes(void)
{
    const char *name = t_uniq("kconnc");
    rpcool_server *s = serve_kill_connecting(name, 60000, 30, 0x2545f4914f6cdd1dull);
    if (!s) return;
    rpcool_server_close(s);
    int n = t_pod_held();
    CHECKF(n == 0, "%d heaps of dead clients still held in the pod after the server closed", n);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
}

/* Clients killed inside rpcool_connect, then the server dies with its made-ahead
   heaps; a new server takes the channel over. Nothing of the dead ones is held, and the new
   server's first heaps (from its first connect on) swept their pod entries. */
static void connect_killed_takeover(void)
{
    const char *name = t_uniq("kconnt");
    uint64_t rng = 0x853c49e6748fea9bull ^ (uint64_t)getpid();
    pid_t sp = t_fork_server(name);
    rpcool_conn *c = t_connect_retry(name, NULL);
    CHECK(c != NULL);
    if (c) rpcool_disconnect(c);
    kill_in_connect(name);
    kill_clients(name, 30, 0, time_us(name, 0), &rng);
    int rec = 0, held = 0;
    t_pod_fd_entries(&rec, &held);
    CHECKF(held > 0, "the server holds no made-ahead heaps (%d recorded)", rec);
    kill(sp, SIGKILL); /* its name file stays: the next server takes it over */
    waitpid(sp, NULL, 0);
    CHECK_EQ(t_pod_held(), 0); /* its heaps and its dead clients' went with it */
    rpcool_server *s = t_open_server_ex(name, 0, 20, 1);
    if (!s) return;
    rpcool_server_stats st = start_and_fill_pool(s, name);
    t_pod_fd_entries(&rec, &held);
    /* but for the heap of the connection just closed (freed by the next heap made) */
    CHECKF(held == (int)st.ready && rec - held <= 1 && st.ready == RPCOOL_DEFAULT_PREALLOC,
           "after the takeover: %d entries recorded, %d held, the new server has %u", rec, held,
           st.ready);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
    rpcool_server_close(s);
    CHECK_EQ(t_pod_held(), 0);
}

/* Clients killed inside rpcool_disconnect: nothing of theirs is left, and every
   connection is counted once: as reaped if it died before the server let go of it, else as
   closed. */
static void disconnect_killed(void)
{
    const char *name = t_uniq("kdisc");
    uint64_t rng = 0xda942042e4dd58b5ull ^ (uint64_t)getpid();
    rpcool_server *s = t_open_server_ex(name, 0, 20, 1);
    if (!s) return;
    rpcool_server_start(s, 1);
    unsigned span = time_us(name, 1);
    rpcool_server_stats st0, st;
    rpcool_server_get_stats(s, &st0);
    kill_clients(name, 40, 1, span, &rng);
    int n = wait_no_leak(s, 3000);
    CHECKF(n == 0, "%d heaps of clients killed in rpcool_disconnect still held", n);
    uint64_t t0 = rcp__now_ns();
    do {
        rpcool_server_get_stats(s, &st);
        if (st.conns == 0 && st.closed + st.reaped - st0.closed - st0.reaped == 40) break;
        usleep(10000);
    } while (rcp__now_ns() - t0 < 3000000000ull);
    CHECK_EQ(st.accepted - st0.accepted, 40);
    CHECK_EQ(st.closed + st.reaped - st0.closed - st0.reaped, 40);
    CHECK_EQ(st.conns, 0);

    /* One killed for sure while it waits in rpcool_disconnect for the server, whose only thread
       is busy with a slow call meanwhile and whose housekeeping is held up (its lock taken
       here: the watchdog would let the client go at once): it is counted as reaped, and its
       heap goes. */
    int go[2], ready[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(ready), 0);
    pid_t p = fork();
    if (p == 0) {
        rpcool_conn *c = NULL;
        char b = 1;
        if (rpcool_connect(name, NULL, &c)) _exit(2);
        if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1) _exit(3);
        rpcool_disconnect(c); /* killed in here */
        _exit(0);
    }
    char b = 0;
    CHECK_EQ(read(ready[0], &b, 1), 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    int *a = c ? (int *)rpcool_alloc(c, sizeof *a) : NULL;
    uint64_t id = 0;
    if (a) {
        *a = 400;
        CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, NULL, NULL, NULL, &id), 0);
    }
    usleep(50000); /* the server's thread sleeps in the handler */
    rpcool_server_get_stats(s, &st0);
    pthread_mutex_lock(&s->hk_lock);
    CHECK_EQ(write(go[1], &b, 1), 1);
    usleep(100000); /* the client waits in rpcool_disconnect */
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    pthread_mutex_unlock(&s->hk_lock);
    if (a) CHECK_EQ(rpcool_wait(c, id, NULL, NULL), 1);
    t0 = rcp__now_ns();
    do {
        rpcool_server_get_stats(s, &st);
        if (st.reaped + st.closed > st0.reaped + st0.closed) break;
        usleep(10000);
    } while (rcp__now_ns() - t0 < 3000000000ull);
    CHECKF(st.reaped == st0.reaped + 1 && st.closed == st0.closed,
           "the client killed in rpcool_disconnect: "
           "reaped %llu, closed %llu", (unsigned long long)(st.reaped - st0.reaped),
           (unsigned long long)(st.closed - st0.closed));
    if (a) rpcool_free(c, a);
    if (c) rpcool_disconnect(c);
    n = wait_no_leak(s, 3000);
    CHECKF(n == 0, "%d heaps left", n);
    for (int k = 0; k < 2; k++) { close(go[k]); close(ready[k]); }
    rpcool_server_close(s);
    CHECK_EQ(t_pod_held(), 0);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
}
/* The tests of clients killed in connect and disconnect count heaps in a private pod (only
   their own heaps count; its lock is theirs to hold). */
static void in_own_pod(void (*fn)(void))
{
    t_pod pod;
    t_pod_enter(&pod, "kconn");
    fn();
    t_pod_leave(&pod);
}
static void test_connect_killed_reaped(void) { in_own_pod(connect_killed_reaped); }
static void test_connect_killed_server_closes(void) { in_own_pod(connect_killed_server_closes); }
static void test_connect_killed_takeover(void) { in_own_pod(connect_killed_takeover); }
static void test_disconnect_killed(void) { in_own_pod(disconnect_killed); }

static int cb_status = 1;
static void on_done(rpcool_conn *c, int status, void *ret, size_t ret_len, void *user)
{
    (void)ret_len; (void)user;
    rpcool_free(c, ret);
    cb_status = status;
}

/* rpcool_call_async's opts.timeout_ms holds in rpcool_wait, rpcool_poll and
   rpcool_progress, counted from the call, as in rpcool_call_ex. */
static void test_async_timeout(void)
{
    const char *name = t_uniq("atmo");
    rpcool_server *s = t_open_server_ex(name, 0, 20, 1);
    if (!s) return;
    rpcool_server_start(s, 3);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 1000; /* the handler takes a second */
    rpcool_call_opts co = {.timeout_ms = 150};
    uint64_t id;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, &co, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), RPCOOL_E_TIMEOUT);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms >= 140 && ms < 700, "rpcool_wait returned after %llu ms, timeout 150 ms",
           (unsigned long long)ms);

    /* poll: not done yet, then past the deadline */
    co.timeout_ms = 100;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, &co, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_AGAIN);
    usleep(200000);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_TIMEOUT);

    /* a callback gets RPCOOL_E_TIMEOUT from rpcool_progress once the deadline passed */
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, a, sizeof *a, &co, on_done, NULL, NULL), 0);
    t0 = rcp__now_ns();
    while (cb_status == 1 && rcp__now_ns() - t0 < 900000000ull) {
        CHECK(rpcool_progress(c) >= 0);
        usleep(5000);
    }
    CHECK_EQ(cb_status, RPCOOL_E_TIMEOUT);
    ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms < 600, "the callback came after %llu ms, timeout 100 ms", (unsigned long long)ms);

    /* without a timeout the call still completes (a new argument: the calls that timed out
       may still read theirs) */
    int *one = (int *)rpcool_alloc(c, sizeof *one);
    *one = 1;
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, one, sizeof *one, NULL, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), 1);
    rpcool_free(c, one); /* not a: calls that timed out may still read it (the heap goes whole) */
    t_disconnect_close(c, s);
}


/* rpcool_disconnect with 20 calls queued behind a running one (one serving thread, 300 ms
   each): it returns once the running handler returned, not after all of them, and the queued
   calls never start (stats.calls stops growing). With disconnect_ms it returns within that
   bound even while a long handler runs. */
static void test_disconnect_in_flight(void)
{
    const char *name = t_uniq("disc-q");
    rpcool_server *s = t_serving(name, 0);
    rpcool_conn *c = NULL;
    rpcool_server_stats st;
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    int *ms = (int *)rpcool_alloc(c, sizeof *ms);
    *ms = 300;
    uint64_t id;
    for (int i = 0; i < 20; i++)
        CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    usleep(50000); /* the first one runs */
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_disconnect(c), 0);
    uint64_t took = (rcp__now_ns() - t0) / 1000000u;
    CHECKF(took < 1500, "rpcool_disconnect took %llu ms", (unsigned long long)took);
    CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
    uint64_t calls = st.calls;
    usleep(1000000);
    CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
    CHECKF(st.calls == calls && calls <= 2, "calls %llu, then %llu", (unsigned long long)calls,
           (unsigned long long)st.calls);
    /* a handler running for 3 s: disconnect_ms bounds the wait */
    rpcool_conn_opts o = {.disconnect_ms = 300};
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) {
        ms = (int *)rpcool_alloc(c, sizeof *ms);
        *ms = 3000;
        CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
        usleep(50000);
        t0 = rcp__now_ns();
        CHECK_EQ(rpcool_disconnect(c), 0);
        took = (rcp__now_ns() - t0) / 1000000u;
        CHECKF(took >= 250 && took < 1000, "rpcool_disconnect took %llu ms",
               (unsigned long long)took);
    }
    rpcool_server_close(s);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(test_client_killed);
    RUN(test_server_killed);
    RUN(test_server_closed);
    RUN(test_takeover);
    RUN(test_server_killed_premade);
    RUN(test_shared_channel_mapping);
    RUN(test_connect_while_server_opens);
    RUN(test_malformed);
    RUN(test_full);
    RUN(test_timeout);
    RUN(g_progress_server_dead);
    RUN(g_fork_liveness);
    RUN(g_dropped_client);
    RUN(test_connect_killed_reaped);
    RUN(test_connect_killed_server_closes);
    RUN(test_connect_killed_takeover);
    RUN(test_disconnect_killed);
    RUN(test_async_timeout);
    RUN(test_disconnect_in_flight);
    return T_DONE();
}
