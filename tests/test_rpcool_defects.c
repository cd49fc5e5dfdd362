/* rpcool defects found by a black-box suite (issue 14), each with the test that failed before its
 * fix: a client SIGKILLed inside rpcool_connect or rpcool_disconnect leaves nothing in /dev/shm
 * (after reaping, after the server closes, after a takeover); an asynchronous call's timeout_ms
 * holds in rpcool_wait, rpcool_poll and rpcool_progress; a sealed argument is writable again
 * after rpcool_release once the server died; rpcool_ctx_fail ends a call with any status.
 * And the file attacks of issue 14's item 4, one test each: a client cannot truncate its heap
 * (a sealed memfd of the server's: ftruncate fails, so the handler running meanwhile is not
 * disturbed); a client that truncates or overwrites the channel disturbs neither the server
 * nor other clients.
 * "Nothing left" is counted in the tests' own pod: connection heaps are memfds whose pod entry
 * lives while somebody holds its byte (t_pod_fd_entries); with a server in this process, the
 * held entries must come down to its made-ahead heaps plus its live connections. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>

enum { FN_SLEEP = 1, FN_ECHO = 2, FN_FAIL = 3, FN_DIE = 4, FN_SLOW_ALLOC = 5, FN_TOUCH = 6,
       FN_SLOW_STR = 7 };

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

static int h_fail(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    rpcool_ctx_fail(ctx, len >= sizeof(int) ? *(int *)arg : 0);
    return 7; /* not reached */
}

static int h_die(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    raise(SIGKILL); /* the server dies during the call */
    return 0;
}

/* The client truncates its heap while this sleeps; then the library allocates in that heap. */
static int h_slow_alloc(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    usleep(300000);
    void *a = rpcool_ctx_alloc(ctx, 64), *b = rpcool_ctx_alloc(ctx, (size_t)1 << 20);
    rpcool_ctx_reply(ctx, a, a ? 64 : 0);
    (void)b;
    return a && b ? 0 : SHMHEAP_E_FULL;
}

/* The same with the checked accessor rpcool_ctx_need_str, from a relaxed handler. */
static int h_slow_str(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    usleep(300000);
    return (int)strlen(rpcool_ctx_need_str(ctx, (const char *)arg));
}

static int h_touch(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    volatile const char *p = (const char *)arg;
    return len ? p[len - 1] : 0;
}

static void add_handlers(rpcool_server *s)
{
    rpcool_server_add_handler(s, FN_SLEEP, h_sleep, NULL, 0);
    rpcool_server_add_handler(s, FN_ECHO, h_echo, NULL, 0);
    rpcool_server_add_handler(s, FN_FAIL, h_fail, NULL, 0);
    rpcool_server_add_handler(s, FN_DIE, h_die, NULL, 0);
    rpcool_server_add_handler(s, FN_SLOW_ALLOC, h_slow_alloc, NULL, 0);
    rpcool_server_add_handler(s, FN_TOUCH, h_touch, NULL, 0);
    rpcool_server_add_handler(s, FN_SLOW_STR, h_slow_str, NULL, 0);
}

static rpcool_server *open_server(const char *name, unsigned reap_ms)
{
    rpcool_server *s = NULL;
    rpcool_server_opts o = {.reap_ms = reap_ms};
    int r = rpcool_server_open(name, &o, &s);
    CHECKF(r == 0, "server_open %s: %s", name, rpcool_strerror(r));
    if (r) return NULL;
    add_handlers(s);
    return s;
}

/* A server in a child process, serving until killed. */
static pid_t fork_server(const char *name)
{
    pid_t p = fork();
    if (p == 0) {
        rpcool_server *s = NULL;
        rpcool_server_opts o = {.reap_ms = 20};
        if (rpcool_server_open(name, &o, &s)) _exit(2);
        add_handlers(s);
        rpcool_serve(s);
        _exit(0);
    }
    return p;
}

static rpcool_conn *connect_retry(const char *name, const rpcool_conn_opts *o)
{
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, o, &c); i++) usleep(5000);
    return c;
}

/* How many connection heaps of this channel are in /dev/shm. */
static int count_heaps(const char *channel)
{
    char prefix[160];
    int n = 0;
    snprintf(prefix, sizeof prefix, "rpcool-%s-", channel);
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

/* Kill a server process and remove what a killed server leaves: its name file and socket, and
   the heaps of clients that were not reaped before it died. */
static void kill_server(pid_t sp, const char *channel)
{
    char prefix[160];
    kill(sp, SIGKILL);
    waitpid(sp, NULL, 0);
    t_rm_channel(channel);
    snprintf(prefix, sizeof prefix, "rpcool-%s-", channel);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) shmheap_unlink(e->d_name, NULL);
    closedir(d);
}

/* Pod entries held beyond what the server s has: its made-ahead heaps and its connections
   (plus extra, connections of this process's own that the caller keeps). */
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

/* The tests' own pod (SHMHEAP_POD, set in main): its lock is ours to hold. */
static char pod_name[64];

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
    snprintf(path, sizeof path, "/dev/shm/%s", pod_name);
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

/* Defect 1: clients killed inside rpcool_connect, reaped by a running server. */
static void test_connect_killed_reaped(void)
{
    const char *name = t_uniq("kconn");
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    rpcool_server *s = open_server(name, 20);
    if (!s) return;
    rpcool_server_start(s, 1);
    kill_in_connect(name);
    kill_clients(name, 40, 0, time_us(name, 0), &rng);
    int n = wait_no_leak(s, 3000);
    CHECKF(n == 0, "%d heaps of dead clients still held in the pod", n);
    CHECK_EQ(count_heaps(name), 0);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* room for more */
    if (c) {
        int *a = (int *)rpcool_alloc(c, sizeof *a);
        *a = 1;
        CHECK_EQ(rpcool_call(c, FN_SLEEP, a, sizeof *a, NULL, NULL), 1);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
    CHECK_EQ(t_pod_held(), 0);
    CHECK_EQ(count_heaps(name), 0);
}

/* Defect 1: clients killed inside rpcool_connect, then the server closes before it reaps them
   (its reap period is a minute). */
static void test_connect_killed_server_closes(void)
{
    const char *name = t_uniq("kconnc");
    uint64_t rng = 0x2545f4914f6cdd1dull ^ (uint64_t)getpid();
    rpcool_server *s = open_server(name, 60000);
    if (!s) return;
    rpcool_server_start(s, 1);
    kill_in_connect(name);
    kill_clients(name, 30, 0, time_us(name, 0), &rng);
    rpcool_server_close(s);
    int n = t_pod_held();
    CHECKF(n == 0, "%d heaps of dead clients still held in the pod after the server closed", n);
    CHECK_EQ(count_heaps(name), 0);
}

/* Defect 1: clients killed inside rpcool_connect, then the server dies with its made-ahead
   heaps; a new server takes the channel over. Nothing of the dead ones is held, and the new
   server's first heaps (from its first connect on) swept their pod entries. */
static void test_connect_killed_takeover(void)
{
    const char *name = t_uniq("kconnt");
    uint64_t rng = 0x853c49e6748fea9bull ^ (uint64_t)getpid();
    pid_t sp = fork_server(name);
    rpcool_conn *c = connect_retry(name, NULL);
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
    rpcool_server *s = open_server(name, 20);
    if (!s) return;
    rpcool_server_start(s, 1);
    c = NULL; /* it makes heaps from its first connect on */
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) rpcool_disconnect(c);
    rpcool_server_stats st;
    for (int i = 0; i < 300; i++) {
        rpcool_server_get_stats(s, &st);
        if (st.ready == RPCOOL_DEFAULT_PREALLOC && st.conns == 0) break;
        usleep(10000);
    }
    t_pod_fd_entries(&rec, &held);
    /* but for the heap of the connection just closed (freed by the next heap made) */
    CHECKF(held == (int)st.ready && rec - held <= 1 && st.ready == RPCOOL_DEFAULT_PREALLOC,
           "after the takeover: %d entries recorded, %d held, the new server has %u", rec, held,
           st.ready);
    CHECK_EQ(count_heaps(name), 0);
    rpcool_server_close(s);
    CHECK_EQ(t_pod_held(), 0);
}

/* Defect 2: clients killed inside rpcool_disconnect: nothing of theirs is left, and every
   connection is counted once: as reaped if it died before the server let go of it, else as
   closed. */
static void test_disconnect_killed(void)
{
    const char *name = t_uniq("kdisc");
    uint64_t rng = 0xda942042e4dd58b5ull ^ (uint64_t)getpid();
    rpcool_server *s = open_server(name, 20);
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
        CHECK_EQ(rpcool_call_async(c, FN_SLEEP, a, sizeof *a, NULL, NULL, NULL, &id), 0);
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
    CHECK_EQ(count_heaps(name), 0);
}

static int cb_status = 1;
static void on_done(rpcool_conn *c, int status, void *ret, size_t ret_len, void *user)
{
    (void)ret_len; (void)user;
    rpcool_free(c, ret);
    cb_status = status;
}

/* Defect 3: rpcool_call_async's opts.timeout_ms holds in rpcool_wait, rpcool_poll and
   rpcool_progress, counted from the call, as in rpcool_call_ex. */
static void test_async_timeout(void)
{
    const char *name = t_uniq("atmo");
    rpcool_server *s = open_server(name, 20);
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
    CHECK_EQ(rpcool_call_async(c, FN_SLEEP, a, sizeof *a, &co, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), RPCOOL_E_TIMEOUT);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms >= 140 && ms < 700, "rpcool_wait returned after %llu ms, timeout 150 ms",
           (unsigned long long)ms);

    /* poll: not done yet, then past the deadline */
    co.timeout_ms = 100;
    CHECK_EQ(rpcool_call_async(c, FN_SLEEP, a, sizeof *a, &co, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_AGAIN);
    usleep(200000);
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_TIMEOUT);

    /* a callback gets RPCOOL_E_TIMEOUT from rpcool_progress once the deadline passed */
    CHECK_EQ(rpcool_call_async(c, FN_SLEEP, a, sizeof *a, &co, on_done, NULL, NULL), 0);
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
    CHECK_EQ(rpcool_call_async(c, FN_SLEEP, one, sizeof *one, NULL, NULL, NULL, &id), 0);
    CHECK_EQ(rpcool_wait(c, id, NULL, NULL), 1);
    rpcool_free(c, one); /* not a: calls that timed out may still read it (the heap goes whole) */
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* Can this process write to p? (A read(2) into a read-only page fails with EFAULT.) */
static int writable(void *p)
{
    int pfd[2];
    if (pipe(pfd)) return -1;
    ssize_t w = write(pfd[1], "x", 1), r = read(pfd[0], p, 1);
    close(pfd[0]);
    close(pfd[1]);
    return w == 1 && r == 1;
}

/* Defect 4: the server dies during a sealed call (sync or async): the call fails with
   RPCOOL_E_PEERDEAD and rpcool_release makes the argument writable again. */
static void sealed_server_dies(int async)
{
    const char *name = t_uniq(async ? "sealda" : "seald");
    pid_t sp = fork_server(name);
    rpcool_conn_opts o = {.peer_check_ms = 20};
    rpcool_conn *c = connect_retry(name, &o);
    CHECK(c != NULL);
    if (!c) { kill_server(sp, name); return; }
    char *arg = (char *)rpcool_alloc_pages(c, 4096);
    memset(arg, 'a', 4096);
    rpcool_call_opts co = {.safety = RPCOOL_SEAL};
    if (async) {
        uint64_t id;
        CHECK_EQ(rpcool_call_async(c, FN_DIE, arg, 4096, &co, NULL, NULL, &id), 0);
        CHECK_EQ(rpcool_wait(c, id, NULL, NULL), RPCOOL_E_PEERDEAD);
    } else {
        CHECK_EQ(rpcool_call_ex(c, FN_DIE, arg, 4096, &co, NULL, NULL), RPCOOL_E_PEERDEAD);
    }
    waitpid(sp, NULL, 0);
    CHECK_EQ(rpcool_release(c), 0);
    CHECKF(writable(arg) == 1, "the argument is still read-only after rpcool_release");
    if (writable(arg) == 1) arg[0] = 'b';
    rpcool_free(c, arg);
    rpcool_disconnect(c);
    CHECK_EQ(count_heaps(name), 0);
    t_rm_channel(name); /* a killed server's files */
}
static void test_sealed_server_dies(void) { sealed_server_dies(0); }
static void test_sealed_server_dies_async(void) { sealed_server_dies(1); }

/* Defect 5: rpcool_ctx_fail(ctx, code) ends the call with that status, whatever its sign, as
   a handler's return would; it is not counted as a fault. */
static void test_ctx_fail_status(void)
{
    const char *name = t_uniq("cfail");
    rpcool_server *s = open_server(name, 20);
    if (!s) return;
    rpcool_server_add_handler(s, FN_FAIL + 10, h_fail, NULL, RPCOOL_SANDBOX);
    rpcool_server_start(s, 1);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    const int codes[] = {42, 0, 1, RPCOOL_E_BADPTR, -5, SHMHEAP_E_FULL};
    for (unsigned fn = FN_FAIL; fn <= FN_FAIL + 10; fn += 10)
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
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* Try to cut the connection heap to len bytes, every way its client can: through the
   descriptor it was given and through a new open of it. 0 if one worked, else -errno. */
static int heap_truncate(rpcool_conn *c, off_t len)
{
    char proc[64];
    int fd = rpcool_heap(c)->fd, r;
    r = ftruncate(fd, len) ? -errno : 0;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int fd2 = open(proc, O_RDWR);
    if (fd2 < 0) return r ? r : 0;
    if (r && ftruncate(fd2, len) == 0) r = 0;
    close(fd2);
    return r;
}

/* Item 4 (attack 1): a client tries to truncate its heap while a relaxed handler runs; the
   handler then allocates its reply with rpcool_ctx_alloc (fn FN_SLOW_ALLOC) or reads its
   argument with rpcool_ctx_need_str (FN_SLOW_STR). The heap is the server's memfd, sealed
   against resizing: every ftruncate fails with EPERM, so the attack is gone (it used to fault
   the handler); the call completes, and the server lives on and serves others. */
static void truncate_under_handler(unsigned fn)
{
    const char *name = t_uniq(fn == FN_SLOW_ALLOC ? "trca" : "trcs");
    pid_t sp = fork_server(name);
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t ap = fork();
    if (ap == 0) { /* the attacker */
        rpcool_conn *c = connect_retry(name, NULL);
        char b = 1;
        uint64_t id;
        char *str = c ? rpcool_strdup(c, "a string in the client's heap") : NULL;
        if (!c || !str) _exit(2);
        if (rpcool_call_async(c, fn, str, strlen(str) + 1, NULL, NULL, NULL, &id)) _exit(3);
        usleep(100000); /* the handler sleeps */
        if (heap_truncate(c, 0) != -EPERM) _exit(4); /* refused: sealed */
        if (write(pfd[1], &b, 1) != 1) _exit(5);
        int r = rpcool_wait(c, id, NULL, NULL); /* not disturbed */
        if (r != (fn == FN_SLOW_ALLOC ? 0 : (int)strlen(str))) _exit(6);
        _exit(0);
    }
    close(pfd[1]);
    char b = 0;
    CHECK_EQ(read(pfd[0], &b, 1), 1);
    close(pfd[0]);
    usleep(500000); /* the handler allocates */
    int st = 0;
    pid_t w = waitpid(sp, &st, WNOHANG);
    CHECKF(w == 0, "the server died (%s)",
           w == sp && WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited");
    rpcool_conn *c = w == 0 ? connect_retry(name, NULL) : NULL;
    CHECK(c != NULL);
    if (c) {
        char *m = rpcool_strdup(c, "still here");
        void *ret = NULL;
        size_t n = 0;
        CHECK_EQ(rpcool_call(c, FN_ECHO, m, 11, &ret, &n), 0);
        CHECK(n == 11 && ret && !strcmp((char *)ret, "still here"));
        rpcool_free(c, ret);
        rpcool_free(c, m);
        rpcool_disconnect(c);
    }
    st = 0;
    waitpid(ap, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "the attacker: %d (4: a truncation worked; 6: its call failed)",
           WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    kill_server(sp, name);
}
static void test_truncate_under_ctx_alloc(void) { truncate_under_handler(FN_SLOW_ALLOC); }
static void test_truncate_under_need_str(void) { truncate_under_handler(FN_SLOW_STR); }

/* Item 4 (attack 2): a client tries to cut the end off its heap before a sandboxed call that
   reads its argument there (that used to fault the handler, and the server dropped the
   connection). Sealed: the ftruncate fails with EPERM, the call succeeds, the connection stays
   served, and so does another. */
static void test_truncate_sandbox_refused(void)
{
    const char *name = t_uniq("trsb");
    pid_t sp = fork_server(name);
    rpcool_conn_opts o = {.peer_check_ms = 20};
    rpcool_conn *c = connect_retry(name, &o);
    CHECK(c != NULL);
    if (!c) { kill_server(sp, name); return; }
    shmheap *h = rpcool_heap(c);
    char *base = (char *)shmheap_base(h), *hdr = (char *)shmheap_root_get(h, "rpcool.conn");
    char *arg = (char *)rpcool_alloc(c, (size_t)1 << 20);
    CHECK(arg && hdr && hdr < arg);
    if (!arg || !hdr || hdr > arg) {
        kill_server(sp, name);
        return;
    }
    memset(arg, 0, (size_t)1 << 20);
    CHECK_EQ(heap_truncate(c, (off_t)(arg - base) + 4096), -EPERM);
    rpcool_call_opts co = {.safety = RPCOOL_SANDBOX};
    CHECK_EQ(rpcool_call_ex(c, FN_TOUCH, arg, (size_t)1 << 20, &co, NULL, NULL), 0);
    CHECK_EQ(rpcool_call(c, FN_TOUCH, arg, 1, NULL, NULL), 0);
    int st = 0;
    CHECK_EQ(waitpid(sp, &st, WNOHANG), 0); /* the server lives */
    rpcool_conn *c2 = connect_retry(name, NULL);
    CHECK(c2 != NULL);
    if (c2) {
        char *m = rpcool_strdup(c2, "x");
        CHECK_EQ(rpcool_call(c2, FN_TOUCH, m, 2, NULL, NULL), 0);
        rpcool_free(c2, m);
        rpcool_disconnect(c2);
    }
    rpcool_free(c, arg);
    CHECK_EQ(rpcool_disconnect(c), 0);
    kill_server(sp, name);
}

/* A client in a child process: connects, says so on ready, waits for a byte on go, then calls
   for ms milliseconds without pause: echo calls, and calls whose handler sleeps 40 ms (longer
   than peer_check_ms: the client waits asleep and checks on the server). Exits 0 if every call
   succeeded, 1 + (failures capped) otherwise; a fault kills it (the parent sees the signal). */
static pid_t honest_client(const char *name, int ready, int go, unsigned ms)
{
    pid_t p = fork();
    if (p == 0) {
        rpcool_conn_opts o = {.peer_check_ms = 20};
        rpcool_conn *c = connect_retry(name, &o);
        char b = 1;
        if (!c || write(ready, &b, 1) != 1 || read(go, &b, 1) != 1) _exit(100);
        char *m = rpcool_strdup(c, "ping");
        int *slow = (int *)rpcool_alloc(c, sizeof *slow);
        int bad = 0, last = 0;
        *slow = 40;
        uint64_t t0 = rcp__now_ns();
        for (unsigned k = 0; rcp__now_ns() - t0 < (uint64_t)ms * 1000000u; k++) {
            void *ret = NULL;
            size_t n = 0;
            int r;
            if (k & 1) {
                if ((r = rpcool_call(c, FN_SLEEP, slow, sizeof *slow, NULL, NULL)) != 1)
                    bad++, last = r;
            } else {
                r = rpcool_call(c, FN_ECHO, m, 5, &ret, &n);
                if (r != 0 || n != 5 || !ret || memcmp(ret, "ping", 5)) bad++, last = r;
                rpcool_free(c, ret);
            }
        }
        rpcool_free(c, slow);
        if (bad)
            fprintf(stderr, "honest client: %d calls failed, the last with %s\n", bad,
                    rpcool_strerror(last));
        rpcool_free(c, m);
        rpcool_disconnect(c);
        _exit(bad ? 1 + (bad > 50 ? 50 : bad) : 0);
    }
    return p;
}

static void check_honest(pid_t p)
{
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other client: %s %d",
           WIFSIGNALED(st) ? "killed by signal" : "exit status",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* Read the channel's rendezvous record: the server's pid and the channel memfd's descriptor
   (0 if the name file holds no such record). */
static int chan_proc_path(const char *name, char *out, size_t n)
{
    char path[128];
    uint32_t rec[16];
    snprintf(path, sizeof path, "/dev/shm/rpcool.%s", name);
    int fd = open(path, O_RDONLY);
    ssize_t r = fd >= 0 ? pread(fd, rec, sizeof rec, 0) : -1;
    if (fd >= 0) close(fd);
    if (r != (ssize_t)sizeof rec) return 0;
    snprintf(out, n, "/proc/%u/fd/%d", rec[3], (int)rec[4]);
    return 1;
}

/* The set-up and the end of the channel attacks: a server and an honest client calling in a
   loop; at the end the honest client saw every call succeed, the server lives, and a new client
   connects and calls. */
static int attack_pipes[2][2]; /* ready, go */

static pid_t attack_start(const char *name, pid_t *honest)
{
    pid_t sp = fork_server(name);
    int *ready = attack_pipes[0], *go = attack_pipes[1];
    CHECK_EQ(pipe(ready), 0);
    CHECK_EQ(pipe(go), 0);
    *honest = honest_client(name, ready[1], go[0], 700);
    char b = 0;
    CHECK_EQ(read(ready[0], &b, 1), 1);
    CHECK_EQ(write(go[1], &b, 1), 1);
    usleep(100000);
    return sp;
}

static void attack_finish(pid_t sp, pid_t hp, const char *name, const char *what)
{
    int st = 0;
    check_honest(hp);
    CHECK_EQ(waitpid(sp, &st, WNOHANG), 0); /* the server lives */
    rpcool_conn_opts o = {.connect_timeout_ms = 2000};
    rpcool_conn *c = NULL;
    int r = rpcool_connect(name, &o, &c);
    CHECKF(r == 0, "connect after the %s: %s", what, rpcool_strerror(r));
    if (c) {
        char *m = rpcool_strdup(c, "x");
        CHECK_EQ(rpcool_call(c, FN_TOUCH, m, 2, NULL, NULL), 0);
        rpcool_free(c, m);
        rpcool_disconnect(c);
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) close(attack_pipes[i][k]);
    kill_server(sp, name);
}

/* Item 4 (attack 3): a client truncates the channel: the name file, and the channel memfd
   itself through /proc (refused: it is sealed). Other clients' calls all succeed meanwhile,
   the server lives, and a new client connects. */
static void test_chan_truncate_attack(void)
{
    const char *name = t_uniq("chtr");
    pid_t hp, sp = attack_start(name, &hp);
    pid_t ap = fork();
    if (ap == 0) { /* the attacker */
        char path[128], proc[64];
        int bad = 0;
        rpcool_conn *c = connect_retry(name, NULL);
        if (!c) _exit(2);
        if (chan_proc_path(name, proc, sizeof proc)) {
            int fd = open(proc, O_RDWR);
            if (fd >= 0 && (ftruncate(fd, 0) == 0 || ftruncate(fd, 4096) == 0)) bad |= 4;
            if (fd >= 0) close(fd);
        }
        snprintf(path, sizeof path, "/dev/shm/rpcool.%s", name);
        int fd = open(path, O_RDWR);
        for (int k = 0; k < 300; k++) { /* again and again: the server repairs what it can */
            if (fd < 0 || ftruncate(fd, 0)) bad |= 8;
            usleep(1000);
        }
        _exit(bad);
    }
    int st = 0;
    waitpid(ap, &st, 0);
    CHECKF(WIFEXITED(st) && (WEXITSTATUS(st) & 4) == 0, "a client truncated the channel memfd");
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "attacker: status %d", st);
    attack_finish(sp, hp, name, "truncation");
}

/* Item 4 (attack 4): a client overwrites the channel header (magic, epoch, state, size) and
   the name file. Other clients' calls all succeed meanwhile (a "closed" or changed header is
   believed only when the server's lock says so), the server restores both, and a new client
   connects. */
static void test_chan_overwrite_attack(void)
{
    const char *name = t_uniq("chow");
    pid_t hp, sp = attack_start(name, &hp);
    pid_t ap = fork();
    if (ap == 0) { /* the attacker */
        char path[128], junk[64];
        rpcool_conn *c = connect_retry(name, NULL);
        if (!c) _exit(2);
        memset(junk, 0x5a, sizeof junk);
        snprintf(path, sizeof path, "/dev/shm/rpcool.%s", name);
        int fd = open(path, O_RDWR);
        for (int k = 0; k < 300; k++) { /* again and again: the server restores it */
            c->ch->magic = 0;
            c->ch->epoch += 7;
            c->ch->max_conns = 1024;
            rcp__store(&c->ch->state, (uint32_t)RPCOOL__CH_CLOSED);
            if (fd < 0 || pwrite(fd, junk, sizeof junk, 0) != (ssize_t)sizeof junk) _exit(3);
            usleep(1000);
        }
        _exit(0);
    }
    int st = 0;
    waitpid(ap, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "attacker: status %d", st);
    attack_finish(sp, hp, name, "overwrite");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(pod_name, sizeof pod_name, "t-pod-defects-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod_name, 1);
    TEST(test_connect_killed_reaped);
    TEST(test_connect_killed_server_closes);
    TEST(test_connect_killed_takeover);
    TEST(test_disconnect_killed);
    TEST(test_async_timeout);
    TEST(test_sealed_server_dies);
    TEST(test_sealed_server_dies_async);
    TEST(test_ctx_fail_status);
    TEST(test_truncate_under_ctx_alloc);
    TEST(test_truncate_under_need_str);
    TEST(test_truncate_sandbox_refused);
    TEST(test_chan_truncate_attack);
    TEST(test_chan_overwrite_attack);
    char path[80];
    snprintf(path, sizeof path, "/dev/shm/%s", pod_name);
    unlink(path);
    return T_DONE();
}
