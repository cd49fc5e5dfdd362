// VM
/* tests/vm/test_rpcool_pkey.c - rpcool's sandboxed handlers with memory protection keys, in a
 * guest whose CPU has pku (qemu TCG's -cpu max; our hosts' CPUs have none, so this path can only
 * run here). The server runs in a child process with two threads; one client process holds three
 * connections (each its own heap, each heap its own key in the server). A sandboxed handler that
 * follows, unchecked, a pointer into another connection's heap must fault (RPCOOL_E_FAULT), the
 * server must carry on serving every connection (its own key re-enabled after the fault), and a
 * relaxed handler must still see everything (keys only restrict sandboxed calls). A client in
 * the server's own process keeps working (its heap gets no key). */
#include "vmt.h"
#define RPCOOL_IMPLEMENTATION
#include "../../rpcool.h"
#include <sys/wait.h>

enum { FN_WILD = 1, FN_WILD_RELAXED = 2, FN_ALLOC = 3 };
#define NCONN 3

/* follows whatever pointer the argument holds, unchecked */
static int h_wild(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    volatile long *p = *(long *volatile *)arg;
    return (int)*p;
}

/* replies with a fresh long in the caller's heap, written by the server under its key */
static int h_alloc(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    long *r = (long *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    *r = 4242;
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return 0;
}

/* The server: opens the channel, says so on ready, serves until done closes; exits 0 if the
   faults it counted are exactly the expected number (read from done). */
static int server_main(const char *name, int ready, int done)
{
    rpcool_server *s = NULL;
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.reap_ms = 20;
    int r = rpcool_server_open(name, &o, &s);
    if (r) { dprintf(ready, "server_open: %s", rpcool_strerror(r)); return 1; }
    rpcool_server_add_handler(s, FN_WILD, h_wild, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_WILD_RELAXED, h_wild, NULL, 0);
    rpcool_server_add_handler(s, FN_ALLOC, h_alloc, NULL, RPCOOL_SANDBOX);
    r = rpcool_server_start(s, 2);
    if (r) { dprintf(ready, "server_start: %s", rpcool_strerror(r)); return 1; }
    if (write(ready, "R", 1) != 1) return 1;
    unsigned want = 0;
    ssize_t n = read(done, &want, sizeof want);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    rpcool_server_close(s);
    if (n != (ssize_t)sizeof want) return 1;
    if (st.faults != want) { fprintf(stderr, "faults %llu, want %u\n", (unsigned long long)st.faults, want); return 2; }
    return 0;
}

static void rpcool_sandbox_pkeys(void)
{
    const char *name = t_uniq("pkrpc");
    int rp[2], dp[2];
    if (pipe(rp) || pipe(dp)) { CHECK(0); return; }
    pid_t pid = fork();
    if (pid == 0) {
        close(rp[0]); close(dp[1]);
        _exit(server_main(name, rp[1], dp[0]));
    }
    close(rp[1]); close(dp[0]);
    char msg[200] = {0};
    struct pollfd pf = {.fd = rp[0], .events = POLLIN, .revents = 0};
    ssize_t n = poll(&pf, 1, 30000) == 1 ? read(rp[0], msg, sizeof msg - 1) : 0;
    CHECKF(n == 1 && msg[0] == 'R', "server did not start: %s", n > 0 ? msg : "no answer");
    rpcool_conn *c[NCONN] = {NULL};
    long *mine[NCONN] = {NULL};
    long **argp[NCONN] = {NULL};
    unsigned faults = 0;
    int ok = n == 1 && msg[0] == 'R';
    if (!ok) kill(pid, SIGKILL);
    for (int i = 0; ok && i < NCONN; i++) {
        int r = rpcool_connect(name, NULL, &c[i]);
        CHECKF(r == 0, "connect %d: %s", i, rpcool_strerror(r));
        if (r) { ok = 0; break; }
        mine[i] = (long *)rpcool_alloc(c[i], sizeof(long));
        argp[i] = (long **)rpcool_alloc(c[i], sizeof(long *));
        if (!mine[i] || !argp[i]) { CHECK(0); ok = 0; break; }
        *mine[i] = 100 + i;
    }
    if (ok) {
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < NCONN; i++) {
                int j = (i + 1) % NCONN;
                /* its own data: allowed */
                *argp[i] = mine[i];
                CHECK_EQ(rpcool_call(c[i], FN_WILD, argp[i], sizeof(long *), NULL, NULL), 100 + i);
                /* another connection's heap from a sandboxed handler: the key stops it */
                *argp[i] = mine[j];
                CHECK_EQ(rpcool_call(c[i], FN_WILD, argp[i], sizeof(long *), NULL, NULL), RPCOOL_E_FAULT);
                faults++;
                /* right after the fault, the server still reads and writes this heap */
                void *ret = NULL;
                size_t rl = 0;
                CHECK_EQ(rpcool_call(c[i], FN_ALLOC, NULL, 0, &ret, &rl), 0);
                CHECK(ret && rl == sizeof(long) && *(long *)ret == 4242);
                if (ret) rpcool_free(c[i], ret);
                /* a relaxed handler is not restricted: keys only apply to sandboxed calls */
                CHECK_EQ(rpcool_call(c[i], FN_WILD_RELAXED, argp[i], sizeof(long *), NULL, NULL), 100 + j);
            }
        }
    }
    for (int i = 0; i < NCONN; i++)
        if (c[i]) rpcool_disconnect(c[i]);
    if (write(dp[1], &faults, sizeof faults) != (ssize_t)sizeof faults) CHECK(0);
    close(dp[1]);
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server: %s %d (2: wrong fault count)",
           WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    close(rp[0]);
}

/* A client in the server's own process, on a thread that existed before the server took its
   keys (so it has no rights to them): its heap must not get a key, or its own accesses fault. */
struct inproc {
    pthread_barrier_t go;
    const char *name;
    int rc_connect, rc_call, rc_foreign;
    long *foreign;
};

static void *inproc_client(void *p)
{
    struct inproc *ip = (struct inproc *)p;
    pthread_barrier_wait(&ip->go); /* the server is up */
    rpcool_conn *c = NULL;
    if ((ip->rc_connect = rpcool_connect(ip->name, NULL, &c))) return NULL;
    long *v = (long *)rpcool_alloc(c, sizeof *v), **a = (long **)rpcool_alloc(c, sizeof *a);
    if (v && a) {
        *v = 77;
        *a = v;
        ip->rc_call = rpcool_call(c, FN_WILD, a, sizeof *a, NULL, NULL);
        *a = ip->foreign; /* a separate process's connection heap: keyed, so it faults */
        ip->rc_foreign = rpcool_call(c, FN_WILD, a, sizeof *a, NULL, NULL);
    }
    rpcool_disconnect(c);
    return NULL;
}

static void rpcool_sandbox_pkeys_inproc(void)
{
    struct inproc ip;
    memset(&ip, 0, sizeof ip);
    ip.name = t_uniq("pkin");
    pthread_barrier_init(&ip.go, NULL, 2);
    pthread_t th;
    if (pthread_create(&th, NULL, inproc_client, &ip)) { CHECK(0); return; }
    rpcool_server *s = NULL;
    int r = rpcool_server_open(ip.name, NULL, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (s) {
        rpcool_server_add_handler(s, FN_WILD, h_wild, NULL, RPCOOL_SANDBOX);
        CHECK_EQ(rpcool_server_start(s, 1), 0);
    }
    /* a connection from another process, whose heap does get a key */
    int rp[2], dp[2];
    pid_t pid = -1;
    if (s && !pipe(rp) && !pipe(dp)) {
        pid = fork();
        if (pid == 0) {
            rpcool_conn *c = NULL;
            long *v = NULL;
            if (!rpcool_connect(ip.name, NULL, &c)) v = (long *)rpcool_alloc(c, sizeof *v);
            if (v) *v = 5;
            if (write(rp[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(1);
            char x;
            (void)!read(dp[0], &x, 1);
            _exit(0);
        }
        if (read(rp[0], &ip.foreign, sizeof ip.foreign) != (ssize_t)sizeof ip.foreign) ip.foreign = NULL;
    }
    CHECK(ip.foreign != NULL);
    pthread_barrier_wait(&ip.go);
    pthread_join(th, NULL);
    CHECK_EQ(ip.rc_connect, 0);
    CHECK_EQ(ip.rc_call, 77);
    CHECK_EQ(ip.rc_foreign, RPCOOL_E_FAULT);
    if (pid > 0) {
        (void)!write(dp[1], "x", 1);
        waitpid(pid, NULL, 0);
    }
    if (s) rpcool_server_close(s);
    pthread_barrier_destroy(&ip.go);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    const char *why = shmheap_pkey_supported() ? NULL : "no pku (shmheap_pkey_supported() is 0)";
    TEST_UNLESS(why, rpcool_sandbox_pkeys);
    TEST_UNLESS(why, rpcool_sandbox_pkeys_inproc);
    return T_DONE();
}
