/* rpcool across pid namespaces of one host: a client in a child pid namespace (its server sees
 * its pid translated by the kernel) and a server in a child pid namespace (it sees no pid for a
 * client outside: the client's pid is as claimed). Each side SIGKILLed in the middle of a call:
 * a dead client is reaped (its heap gone, others served), a dead server fails the call with
 * RPCOOL_E_PEERDEAD, both within a bound; the caller's identity as the manual says. Needs root
 * (unshare CLONE_NEWPID); skipped otherwise. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <sched.h>
#include <poll.h>

enum { FN_PEER = 20 };

/* 0 if this process may make pid namespaces (a child tries), else why not. */
static const char *no_pidns(void)
{
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWPID) ? 1 : 0);
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
        return "unshare(CLONE_NEWPID) refused (needs root)";
    return NULL;
}

/* Forks a child that enters a new pid namespace and forks fn's process there (pid 1 of it);
   the child reports that process's pid as this namespace sees it on the pipe, and waits for
   it. Returns the child, *inner the process in the namespace (0 on failure), *rd the read end
   of a pipe fn writes to (its fd argument). */
static pid_t in_pidns(int (*fn)(int wfd, void *arg), void *arg, pid_t *inner, int *rd)
{
    int p[2], q[2];
    *inner = 0;
    if (pipe(p)) return -1;
    if (pipe(q)) { close(p[0]); close(p[1]); return -1; }
    fflush(stdout);
    fflush(stderr);
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        close(q[0]);
        if (unshare(CLONE_NEWPID)) _exit(2);
        pid_t g = fork();
        if (g == 0) {
            close(p[1]);
            _exit(fn(q[1], arg));
        }
        close(q[1]);
        if (write(p[1], &g, sizeof g) != (ssize_t)sizeof g) _exit(3);
        close(p[1]);
        int st;
        waitpid(g, &st, 0);
        _exit(0);
    }
    close(p[1]);
    close(q[1]);
    if (c < 0 || read(p[0], inner, sizeof *inner) != (ssize_t)sizeof *inner) *inner = 0;
    close(p[0]);
    *rd = q[0];
    return c;
}

static int read_full(int fd, void *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)b + got, n - got);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static void end_child(pid_t c, pid_t inner)
{
    if (inner > 0) kill(inner, SIGKILL);
    if (c > 0) { kill(c, SIGKILL); waitpid(c, NULL, 0); }
}

static rpcool_server *open_server(const char *name)
{
    rpcool_server *s = t_open_server_ex(name, 0, 20, 0);
    if (s) rpcool_server_add_handler(s, FN_PEER, t_h_peer, NULL, 0);
    return s;
}

/* In the namespace: connect, report the peer the server saw and the heap's name, then sit in a
   long call until killed. */
struct cl_report { int rc; int pid_seen_inside; rpcool_peer peer; char heap[160]; };
static int client_fn(int wfd, void *arg)
{
    const char *name = (const char *)arg;
    struct cl_report r;
    memset(&r, 0, sizeof r);
    rpcool_conn *c = NULL;
    r.rc = rpcool_connect(name, NULL, &c);
    r.pid_seen_inside = (int)getpid();
    if (!r.rc) {
        void *ret = NULL;
        size_t n = 0;
        r.rc = rpcool_call(c, FN_PEER, NULL, 0, &ret, &n);
        if (!r.rc && ret && n == sizeof r.peer) memcpy(&r.peer, ret, sizeof r.peer);
        snprintf(r.heap, sizeof r.heap, "%s", shmheap_name(rpcool_heap(c)));
    }
    if (write(wfd, &r, sizeof r) != (ssize_t)sizeof r || r.rc) return 1;
    int *ms = (int *)rpcool_alloc(c, sizeof *ms);
    *ms = 300;
    rpcool_call(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL); /* killed in here */
    return 4;
}

/* A client in a child pid namespace: the server sees its pid as this namespace knows it
   (authenticated), reaps it when it is killed mid-call, and serves others. */
static void test_client_in_child_ns_killed(void)
{
    const char *name = t_uniq("pidns-c");
    rpcool_server *s = open_server(name);
    if (!s) return;
    rpcool_server_start(s, 2);
    pid_t inner, c;
    int rd = -1;
    c = in_pidns(client_fn, (void *)name, &inner, &rd);
    CHECK(c > 0 && inner > 0);
    struct cl_report r;
    int got = read_full(rd, &r, sizeof r);
    CHECK_EQ(got, 0);
    if (got || r.rc) {
        CHECKF(0, "client in the namespace: %s", got ? "died" : rpcool_strerror(r.rc));
        end_child(c, inner);
        close(rd);
        rpcool_server_close(s);
        return;
    }
    CHECK_EQ(r.pid_seen_inside, 1);        /* it is pid 1 of its namespace */
    CHECK_EQ(r.peer.pid, inner);           /* the server sees it as this namespace does */
    CHECK_EQ(r.peer.authenticated, 1);
    CHECK_EQ(r.peer.uid, getuid());
    CHECK(t_shm_exists(r.heap));
    usleep(100000); /* the slow call (300 ms) is running: the server finishes it first */
    uint64_t t0 = rcp__now_ns();
    end_child(c, inner);
    rpcool_server_stats ss;
    do {
        usleep(5000);
        rpcool_server_get_stats(s, &ss);
    } while (!ss.reaped && rcp__now_ns() - t0 < 3000000000ull);
    unsigned ms = (unsigned)((rcp__now_ns() - t0) / 1000000u);
    CHECKF(ss.reaped == 1, "reaped %llu after %u ms", (unsigned long long)ss.reaped, ms);
    CHECKF(ms < 1500, "the dead client was reaped after %u ms", ms);
    CHECK(!t_shm_exists(r.heap)); /* the dead client's heap is gone */
    rpcool_conn *k = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &k), 0);
    if (k) {
        int *a = (int *)rpcool_alloc(k, sizeof *a);
        *a = 1;
        CHECK_EQ(rpcool_call(k, T_FN_SLOW, a, sizeof *a, NULL, NULL), 1);
        rpcool_disconnect(k);
    }
    close(rd);
    rpcool_server_close(s);
}

/* In the namespace: a server that writes a ready byte, then its reaped count (and the time)
   at every change, until killed. */
struct sv_arg { const char *name; };
static int server_fn(int wfd, void *arg)
{
    struct sv_arg *a = (struct sv_arg *)arg;
    rpcool_server *s = open_server(a->name);
    if (!s) return 2;
    rpcool_server_start(s, 2);
    uint64_t last = ~0ull;
    char ready = 'r';
    if (write(wfd, &ready, 1) != 1) return 3;
    for (;;) {
        rpcool_server_stats ss;
        rpcool_server_get_stats(s, &ss);
        if (ss.reaped != last) {
            last = ss.reaped;
            uint64_t v[2] = {ss.reaped, rcp__now_ns()};
            if (write(wfd, v, sizeof v) != (ssize_t)sizeof v) break;
        }
        usleep(2000);
    }
    rpcool_server_close(s);
    return 0;
}

/* A server in a child pid namespace killed while a call of ours waits: the call fails with
   RPCOOL_E_PEERDEAD within peer_check_ms and some. It sees no pid for us: what we claim. */
static void test_server_in_child_ns_killed(void)
{
    const char *name = t_uniq("pidns-s");
    struct sv_arg a = {name};
    pid_t inner, c;
    int rd = -1;
    c = in_pidns(server_fn, &a, &inner, &rd);
    CHECK(c > 0 && inner > 0);
    char ready = 0;
    CHECK_EQ(read_full(rd, &ready, 1), 0);
    CHECK_EQ(ready, 'r');
    uint64_t v[2];
    CHECK_EQ(read_full(rd, v, sizeof v), 0); /* reaped 0 */
    rpcool_conn_opts o = {.peer_check_ms = 50};
    rpcool_conn *k = t_connect_retry(name, &o);
    CHECK(k != NULL);
    if (!k) { end_child(c, inner); close(rd); return; }
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(k, FN_PEER, NULL, 0, &ret, &n), 0);
    if (ret && n == sizeof(rpcool_peer)) {
        rpcool_peer p;
        memcpy(&p, ret, sizeof p);
        CHECK_EQ(p.pid, getpid());       /* as claimed */
        CHECK_EQ(p.authenticated, 0);    /* the kernel gave no pid */
        CHECK_EQ(p.uid, getuid());       /* the kernel's */
        rpcool_free(k, ret);
    }
    int *ms = (int *)rpcool_alloc(k, sizeof *ms);
    *ms = 10000;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(k, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    usleep(50000);
    end_child(c, inner);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_wait(k, id, NULL, NULL), RPCOOL_E_PEERDEAD);
    unsigned took = (unsigned)((rcp__now_ns() - t0) / 1000000u);
    CHECKF(took < 500, "noticed the dead server after %u ms", took);
    rpcool_disconnect(k);
    close(rd);
    t_channel_heaps(name, 1);
    rpcool_server *s = open_server(name); /* the dead server's channel is taken over */
    CHECK(s != NULL);
    if (s) rpcool_server_close(s);
}

/* A client outside killed mid-call, its server in a child pid namespace (it has no pid of the
   client's, only what the kernel's socket gives it): reaped within a second. */
static void test_client_outside_killed(void)
{
    const char *name = t_uniq("pidns-o");
    struct sv_arg a = {name};
    pid_t inner, c;
    int rd = -1;
    c = in_pidns(server_fn, &a, &inner, &rd);
    CHECK(c > 0 && inner > 0);
    char ready = 0;
    uint64_t v[2];
    CHECK_EQ(read_full(rd, &ready, 1), 0);
    CHECK_EQ(read_full(rd, v, sizeof v), 0);
    int p[2];
    pid_t cl = t_fork_pipe(p);
    if (cl == 0) {
        rpcool_conn *k = t_connect_retry(name, NULL);
        if (!k) _exit(2);
        char x = 'c';
        if (write(p[1], &x, 1) != 1) _exit(3);
        int *ms = (int *)rpcool_alloc(k, sizeof *ms);
        *ms = 300;
        rpcool_call(k, T_FN_SLOW, ms, sizeof *ms, NULL, NULL); /* killed in here */
        _exit(4);
    }
    CHECK_EQ(t_ready_wait(p[0]), 0);
    usleep(100000);
    uint64_t t0 = rcp__now_ns();
    t_kill_wait(cl);
    int got = 0;
    struct pollfd pf = {.fd = rd, .events = POLLIN};
    while (!got && poll(&pf, 1, 3000) == 1 && read_full(rd, v, sizeof v) == 0) got = v[0] == 1;
    unsigned ms = (unsigned)((rcp__now_ns() - t0) / 1000000u);
    CHECKF(got, "the server in the namespace never reaped the dead client (%u ms)", ms);
    CHECKF(ms < 1500, "reaped after %u ms", ms);
    end_child(c, inner);
    close(rd);
    t_rm_channel(name);
    t_channel_heaps(name, 1);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    const char *why = no_pidns();
    TEST_UNLESS(why, test_client_in_child_ns_killed);
    TEST_UNLESS(why, test_server_in_child_ns_killed);
    TEST_UNLESS(why, test_client_outside_killed);
    return T_DONE();
}
