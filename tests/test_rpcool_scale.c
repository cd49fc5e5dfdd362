/* rpcool: many connections to one server. 2000 connections leave the host's pod usable by
 * another program, with connect times flat in their number; a busy client among many idle
 * connections is served about as fast as alone (counted calls); busy clients are served fairly
 * (calls counted per client); an idle server with many connections hardly wakes (its threads'
 * voluntary context switches over a second); a client killed with SIGKILL is reaped at once
 * and its slot reused; short-lived clients that exit without rpcool_disconnect never find the
 * channel full; a client that scribbles on the ready summary in the channel harms no one; the
 * count of clients asleep stays true. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

enum { FN_ECHO = 1, FN_SLOW = 2 };

static int h_echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return 7;
}

static int h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    usleep(1200000);
    return 7;
}

static rpcool_server *serve(const char *name, unsigned max_conns, unsigned reap_ms,
                            unsigned threads)
{
    static const t_handler hs[] = {{FN_ECHO, h_echo, 0}, {FN_SLOW, h_slow, 0}};
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.max_conns = max_conns;
    o.reap_ms = reap_ms;
    return t_server_with(name, &o, hs, 2, threads);
}

static const rpcool_conn_opts small = {.heap_size = (size_t)2 << 20};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* Child processes are this binary run again in a role (--holder, --busy, --other): a fork
   copies a threaded process, and ASan's allocator lock taken by a server thread (the heap maker
   refilling after many connects) at that moment stays taken in the child, which then hangs in
   its first malloc. Between fork and exec the child only closes and execs. */
static pid_t spawn_self(char *const av[], int keep1, int keep2)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (keep1 >= 0) fcntl(keep1, F_SETFD, 0);
        if (keep2 >= 0) fcntl(keep2, F_SETFD, 0);
        execv("/proc/self/exe", av);
        _exit(127);
    }
    return pid;
}

/* A child process with n connections to name, each of which made one call: it writes its
   result (0 ok, else the failing code) on its pipe, then holds them until the parent writes a
   byte (or closes the pipe), then exits without disconnecting when die is set. When times is
   not NULL, the child writes every connect's time in ns after its result. */
struct holder { pid_t pid; int to, from; };

static int holder_main(const char *name, unsigned n, int times, int die, int up, int down)
{
    rpcool_conn **c = (rpcool_conn **)calloc(n, sizeof *c);
    uint64_t *t = (uint64_t *)calloc(n, sizeof *t);
    int r = c && t ? 0 : -ENOMEM;
    for (unsigned i = 0; i < n && !r; i++) {
        uint64_t t0 = now_ns();
        r = rpcool_connect(name, &small, &c[i]);
        t[i] = now_ns() - t0;
        for (int k = 0; i == 0 && r == RPCOOL_E_NOCHANNEL && k < 500; k++) {
            usleep(5000); /* the server is still starting */
            r = rpcool_connect(name, &small, &c[i]);
        }
        if (!r) r = rpcool_call(c[i], FN_ECHO, NULL, 0, NULL, NULL) == 7 ? 0 : -1;
    }
    if (write(up, &r, sizeof r) != (ssize_t)sizeof r) return 3;
    if (times && write(up, t, n * sizeof *t) != (ssize_t)(n * sizeof *t)) return 3;
    char b;
    if (read(down, &b, 1) < 0) return 4;
    if (!die)
        for (unsigned i = 0; i < n; i++)
            if (c[i]) rpcool_disconnect(c[i]);
    free(c);
    free(t);
    return 0;
}

static int holder_start(struct holder *h, const char *name, unsigned n, int times, int die)
{
    int up[2], down[2];
    if (pipe2(up, O_CLOEXEC)) return -1;
    if (pipe2(down, O_CLOEXEC)) {
        close(up[0]);
        close(up[1]);
        return -1;
    }
    char a[5][24];
    snprintf(a[0], sizeof a[0], "%u", n);
    snprintf(a[1], sizeof a[1], "%d", times);
    snprintf(a[2], sizeof a[2], "%d", die);
    snprintf(a[3], sizeof a[3], "%d", up[1]);
    snprintf(a[4], sizeof a[4], "%d", down[0]);
    char *av[] = {(char *)"test_rpcool_scale", (char *)"--holder", (char *)name, a[0], a[1],
                  a[2], a[3], a[4], NULL};
    h->pid = spawn_self(av, up[1], down[0]);
    close(up[1]);
    close(down[0]);
    h->to = down[1];
    h->from = up[0];
    if (h->pid > 0) return 0;
    close(h->to);
    close(h->from);
    return -1;
}

static int holder_result(struct holder *h)
{
    int r = -1;
    if (read(h->from, &r, sizeof r) != (ssize_t)sizeof r) return -1;
    return r;
}

static void holder_end(struct holder *h)
{
    if (h->pid <= 0) return;
    if (write(h->to, "x", 1) != 1) kill(h->pid, SIGKILL);
    close(h->to);
    close(h->from);
    waitpid(h->pid, NULL, 0);
    h->pid = -1;
}

static int read_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Another program: create (then unlink) a named heap in the current pod: 0 or its code. */
static int other_main(void)
{
    shmheap *h = NULL;
    const char *nm = t_uniq("other");
    shmheap_opts o = {.size = (size_t)2 << 20};
    int r = shmheap_create(nm, &o, &h);
    if (!r) {
        shmheap_close(h);
        shmheap_unlink(nm, NULL);
    }
    return r ? 1 : 0;
}

static int other_program(void)
{
    char *av[] = {(char *)"test_rpcool_scale", (char *)"--other", NULL};
    int st;
    pid_t pid = spawn_self(av, -1, -1);
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Entries recorded in this process's pod, or -1. */
static int pod_entries(void)
{
    struct shmheap__podref pr;
    int n = 0;
    if (shmheap__pod_open(NULL, &pr)) return -1;
    for (int i = 0; i < SHMHEAP__POD_N; i++) n += pr.p->e[i].base != 0;
    shmheap__pod_close(&pr);
    return n;
}

/* 2000 connections to one server, from 10 processes one after another: another program can
   still create a heap in the pod, the pod holds few entries for them, and connecting stays
   flat: the median of the last 100 connects within 4x of the first 100's plus 50 us (the
   bench asks 2x; a loaded test machine varies; it was 55x). */
static void test_scale_2000_conns(void)
{
    enum { N = 2000, P = 10 };
    t_pod pod;
    t_pod_enter(&pod, "scale2000");
    const char *name = t_uniq("scale2000");
    struct holder h[P];
    static uint64_t t[N];
    int r = 0, started = 0;
    rpcool_server *s = serve(name, N + 100, 0, 1);
    if (!s) {
        t_pod_leave(&pod);
        return;
    }
    for (; started < P && !r; started++) {
        if (holder_start(&h[started], name, N / P, 1, 0)) break;
        r = holder_result(&h[started]);
        if (!r) r = read_all(h[started].from, t + started * (N / P), sizeof t / P);
    }
    CHECKF(r == 0 && started == P, "2000 connects: %s", rpcool_strerror(r));
    if (r == 0 && started == P) {
        uint64_t first = median(t, 100), last = median(t + N - 100, 100);
        printf("# connect median: first 100 %.1f us, last 100 %.1f us\n", first / 1e3,
               last / 1e3);
        CHECKF(last <= 4 * first + 50000, "connects grow with N: %llu ns -> %llu ns",
               (unsigned long long)first, (unsigned long long)last);
        rpcool_server_stats st;
        rpcool_server_get_stats(s, &st);
        CHECK_EQ(st.conns, N);
        CHECKF(pod_entries() <= 32, "%d pod entries for %d connections", pod_entries(), N);
        CHECKF(other_program() == 0, "another program cannot create a heap");
    }
    for (int k = 0; k < started; k++) holder_end(&h[k]);
    rpcool_server_close(s);
    CHECKF(other_program() == 0, "another program cannot create a heap");
    t_pod_leave(&pod);
}

/* A client that calls for ms milliseconds and writes its count; with idle connections. */
static int busy_main(const char *name, unsigned ms, int fd)
{
    rpcool_conn *c = t_connect_retry(name, &small);
    uint64_t n = 0;
    if (c) {
        uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
        while (now_ns() < end)
            for (int k = 0; k < 64; k++) n += rpcool_call(c, FN_ECHO, NULL, 0, NULL, NULL) == 7;
        rpcool_disconnect(c);
    }
    return write(fd, &n, sizeof n) == (ssize_t)sizeof n ? 0 : 1;
}

/* Start a busy client; its count comes on *from. */
static pid_t busy_start(const char *name, unsigned ms, int *from)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC)) return -1;
    char a[2][24];
    snprintf(a[0], sizeof a[0], "%u", ms);
    snprintf(a[1], sizeof a[1], "%d", p[1]);
    char *av[] = {(char *)"test_rpcool_scale", (char *)"--busy", (char *)name, a[0], a[1], NULL};
    pid_t pid = spawn_self(av, p[1], -1);
    close(p[1]);
    if (pid < 0) close(p[0]);
    else *from = p[0];
    return pid;
}

static uint64_t busy_run(const char *name, unsigned ms)
{
    int from;
    uint64_t n = 0;
    pid_t pid = busy_start(name, ms, &from);
    if (pid < 0) return 0;
    if (read(from, &n, sizeof n) != (ssize_t)sizeof n) n = 0;
    close(from);
    waitpid(pid, NULL, 0);
    return n;
}

/* One busy client among 999 idle connections (each made one call) makes at least a third of
   the calls it makes alone, in alternating rounds (today's figure is in bench/RESULTS.md). */
static void test_scale_busy_among_idle(void)
{
    const char *name = t_uniq("scalebusy");
    struct holder h;
    rpcool_server *s = serve(name, 1024, 0, 1);
    if (!s) return;
    uint64_t alone = 0, among = 0;
    for (int round = 0; round < 2; round++) {
        alone += busy_run(name, 300);
        if (holder_start(&h, name, 999, 0, 0)) break;
        int r = holder_result(&h);
        CHECKF(r == 0, "999 connects: %s", rpcool_strerror(r));
        usleep(50000);
        among += busy_run(name, 300);
        holder_end(&h);
    }
    printf("# calls in 600 ms: alone %llu, among 999 idle %llu\n", (unsigned long long)alone,
           (unsigned long long)among);
    CHECK(alone > 0);
    CHECKF(among * 3 >= alone, "among idle %llu calls, alone %llu", (unsigned long long)among,
           (unsigned long long)alone);
    rpcool_server_close(s);
}

/* 8 closed-loop clients for 600 ms: the server publishes their crowd (more than 2 requests in a
   pass), and none once it sleeps; the slowest makes at least a tenth of the calls of the
   fastest, none is starved (the bench asks 0.7 at 64 and 1000 clients; with more clients than
   CPUs the scheduler decides much of it). */
static void test_scale_fair(void)
{
    enum { K = 8 };
    const char *name = t_uniq("scalefair");
    rpcool_server *s = serve(name, 64, 0, 1);
    if (!s) return;
    int from[K];
    pid_t pid[K];
    uint64_t n[K], lo = UINT64_MAX, hi = 0;
    rpcool_conn *c0 = NULL;
    CHECK(rpcool_connect(name, &small, &c0) == 0);
    for (int k = 0; k < K; k++) pid[k] = busy_start(name, 600, &from[k]);
    uint32_t crowd = 0; /* the crowd the server publishes while the 8 call */
    for (uint64_t t0 = now_ns(); c0 && now_ns() - t0 < 500000000u; usleep(1000)) {
        uint32_t v = __atomic_load_n(&c0->ch->crowd, __ATOMIC_RELAXED);
        if (v > crowd) crowd = v;
    }
    for (int k = 0; k < K; k++) {
        n[k] = 0;
        if (pid[k] > 0) {
            if (read(from[k], &n[k], sizeof n[k]) != (ssize_t)sizeof n[k]) n[k] = 0;
            close(from[k]);
            waitpid(pid[k], NULL, 0);
        }
        if (n[k] < lo) lo = n[k];
        if (n[k] > hi) hi = n[k];
    }
    printf("# calls per client: slowest %llu, fastest %llu; crowd seen %u\n",
           (unsigned long long)lo, (unsigned long long)hi, crowd);
    CHECKF(crowd > 2 && crowd <= K, "crowd %u with %d clients calling", crowd, K);
    if (c0) {
        usleep(200000); /* the serving thread sleeps: the crowd is gone */
        CHECK_EQ(__atomic_load_n(&c0->ch->crowd, __ATOMIC_RELAXED), 0u);
        rpcool_disconnect(c0);
    }
    CHECKF(hi > 0 && lo * 10 >= hi, "slowest %llu, fastest %llu", (unsigned long long)lo,
           (unsigned long long)hi);
    rpcool_server_close(s);
}

/* The voluntary context switches of this process's threads but the calling one. */
static long server_switches(void)
{
    DIR *d = opendir("/proc/self/task");
    long sum = 0;
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d))) {
        char p[300], line[128];
        if (e->d_name[0] == '.' || atoi(e->d_name) == (int)syscall(SYS_gettid)) continue;
        snprintf(p, sizeof p, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "voluntary_ctxt_switches:", 24)) sum += atol(line + 24);
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* An idle server with 1000 connections (each made one call) wakes at most 5 times in a
   second, all its threads together (with the default reap_ms). */
static void test_scale_idle_wakeups(void)
{
    const char *name = t_uniq("scaleidle");
    struct holder h;
    if (holder_start(&h, name, 1000, 0, 0)) return;
    rpcool_server *s = serve(name, 1024, 0, 2);
    if (!s) {
        holder_end(&h);
        return;
    }
    int r = holder_result(&h);
    CHECKF(r == 0, "1000 connects: %s", rpcool_strerror(r));
    usleep(300000); /* the serving threads go to sleep after their spin */
    long a = server_switches();
    usleep(1000000);
    long b = server_switches();
    printf("# idle server: %ld wake-ups in 1 s\n", b - a);
    CHECKF(a >= 0 && b - a <= 5, "%ld wake-ups in a second", b - a);
    holder_end(&h);
    rpcool_server_close(s);
}

/* A client SIGKILLed is reaped within 200 ms although reap_ms is 10 s (its death is an event),
   and its slot serves a new client. */
static void test_scale_kill9_reaped(void)
{
    const char *name = t_uniq("scalekill");
    struct holder h;
    if (holder_start(&h, name, 2, 0, 0)) return;
    rpcool_server *s = serve(name, 2, 10000, 1);
    if (!s) {
        holder_end(&h);
        return;
    }
    CHECK_EQ(holder_result(&h), 0);
    kill(h.pid, SIGKILL);
    uint64_t t0 = now_ns();
    rpcool_server_stats st;
    do {
        usleep(2000);
        rpcool_server_get_stats(s, &st);
    } while (st.reaped < 2 && now_ns() - t0 < 2000000000u);
    printf("# reaped %llu in %.1f ms\n", (unsigned long long)st.reaped, (now_ns() - t0) / 1e6);
    CHECK_EQ(st.reaped, 2);
    CHECKF(now_ns() - t0 < 200000000u, "reaped after %.1f ms", (now_ns() - t0) / 1e6);
    holder_end(&h);
    rpcool_conn *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        int r = rpcool_connect(name, &small, &c[k]);
        CHECKF(r == 0, "connect into a reaped slot: %s", rpcool_strerror(r));
        if (!r) CHECK_EQ(rpcool_call(c[k], FN_ECHO, NULL, 0, NULL, NULL), 7);
    }
    for (int k = 0; k < 2; k++)
        if (c[k]) rpcool_disconnect(c[k]);
    rpcool_server_close(s);
}

/* 40 short-lived clients, one after another, each connects, calls and exits without
   rpcool_disconnect, to a channel of 4 slots reaped every 10 s: none gets RPCOOL_E_NOSLOT. */
static void test_scale_short_lived(void)
{
    const char *name = t_uniq("scaleshort");
    struct holder h;
    rpcool_server *s = serve(name, 4, 10000, 1);
    if (!s) return;
    int bad = 0, first = 0;
    for (int k = 0; k < 40; k++) {
        if (holder_start(&h, name, 1, 0, 1)) break;
        int r = holder_result(&h);
        if (r && !bad++) first = r;
        holder_end(&h);
    }
    CHECKF(bad == 0, "%d of 40 short-lived clients failed, the first with %s", bad,
           rpcool_strerror(first));
    rpcool_server_close(s);
}

/* A client that makes one slow call (and is killed in it). */
static int sleeper_main(const char *name)
{
    rpcool_conn *c = t_connect_retry(name, &small);
    return c && rpcool_call(c, FN_SLOW, NULL, 0, NULL, NULL) == 7 ? 0 : 1;
}

static void *slow_caller(void *p)
{
    return (void *)(intptr_t)(rpcool_call((rpcool_conn *)p, FN_SLOW, NULL, 0, NULL, NULL) == 7);
}

static int32_t waiting(rpcool_conn *c)
{
    return (int32_t)__atomic_load_n(&c->ch->cwaiting, __ATOMIC_SEQ_CST);
}

/* The channel's count of clients asleep waiting (which every client reads to choose between
   polling and sleeping at once) stays true across the server's timed rounds: 2 clients asleep
   in 1.2 s calls count 2 after a round, 0 once answered; a scribbled count is set right again;
   a client killed asleep is taken out when it is reaped. */
static void test_scale_waiting_count(void)
{
    const char *name = t_uniq("scalewait");
    rpcool_server *s = serve(name, 8, 20, 2);
    if (!s) return;
    rpcool_conn *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) CHECK(rpcool_connect(name, &small, &c[k]) == 0);
    if (c[0] && c[1]) {
        pthread_t th[2];
        void *ok[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, slow_caller, c[k]);
        usleep(1100000); /* asleep in their calls, past a timed round (at least once a second) */
        CHECK_EQ(waiting(c[0]), 2);
        for (int k = 0; k < 2; k++) pthread_join(th[k], &ok[k]);
        CHECK(ok[0] && ok[1]);
        CHECK_EQ(waiting(c[0]), 0);
        __atomic_store_n(&c[0]->ch->cwaiting, 0x80000000u, __ATOMIC_SEQ_CST); /* scribbled */
        uint64_t t0 = now_ns();
        while (waiting(c[0]) != 0 && now_ns() - t0 < 3000000000u) usleep(5000);
        CHECKF(waiting(c[0]) == 0, "a scribbled count stays %d", (int)waiting(c[0]));
        /* a client killed asleep */
        char *av[] = {(char *)"test_rpcool_scale", (char *)"--sleeper", (char *)name, NULL};
        pid_t pid = spawn_self(av, -1, -1);
        t0 = now_ns();
        while (waiting(c[0]) != 1 && now_ns() - t0 < 3000000000u) usleep(2000);
        CHECK_EQ(waiting(c[0]), 1);
        t_kill_wait(pid);
        rpcool_server_stats st;
        t0 = now_ns();
        do {
            usleep(5000);
            rpcool_server_get_stats(s, &st);
        } while ((st.reaped < 1 || waiting(c[0]) != 0) && now_ns() - t0 < 4000000000u);
        CHECK_EQ(st.reaped, 1);
        CHECKF(waiting(c[0]) == 0, "a client killed asleep still counts: %d", (int)waiting(c[0]));
        CHECK_EQ(rpcool_call(c[0], FN_ECHO, NULL, 0, NULL, NULL), 7);
    }
    for (int k = 0; k < 2; k++)
        if (c[k]) rpcool_disconnect(c[k]);
    rpcool_server_close(s);
}

/* A client that sets every bit of the channel's ready summary (slots beyond max_conns too) and
   then clears them all, again and again from a thread, while two others call: their calls all
   complete (a bit cleared under a caller costs it at most its peer_check_ms), the server stays
   up, and the bogus bits are counted as bad entries. */
struct scribble { struct rpcool__chan_hdr *ch; int stop; };

static void *scribbler(void *p)
{
    struct scribble *sc = (struct scribble *)p;
    uint64_t *top = rpcool__rdy_top(sc->ch), *w = rpcool__rdy(sc->ch);
    while (!__atomic_load_n(&sc->stop, __ATOMIC_ACQUIRE)) {
        uint64_t v = (now_ns() >> 10) & 1 ? ~0ull : 0ull;
        for (unsigned i = 0; i < RPCOOL__RDY_TOP; i++)
            __atomic_store_n(&top[i], v, __ATOMIC_RELAXED);
        for (unsigned i = 0; i < RPCOOL_MAX_CONNS / 64; i++)
            __atomic_store_n(&w[i], v, __ATOMIC_RELAXED);
        sched_yield();
    }
    return NULL;
}

static void test_scale_ready_scribbled(void)
{
    const char *name = t_uniq("scalescrib");
    rpcool_server *s = serve(name, 16, 0, 1);
    if (!s) return;
    rpcool_conn *bad = NULL, *good[2] = {NULL, NULL};
    rpcool_conn_opts o = small;
    o.peer_check_ms = 20;
    CHECK(rpcool_connect(name, &o, &bad) == 0);
    for (int k = 0; k < 2; k++) CHECK(rpcool_connect(name, &o, &good[k]) == 0);
    if (bad && good[0] && good[1]) {
        struct scribble sc = {bad->ch, 0};
        pthread_t th;
        int ok = 0;
        uint64_t t0 = now_ns();
        pthread_create(&th, NULL, scribbler, &sc);
        for (int k = 0; k < 200; k++)
            ok += rpcool_call(good[k & 1], FN_ECHO, NULL, 0, NULL, NULL) == 7;
        __atomic_store_n(&sc.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        printf("# 200 calls under scribbling: %.1f ms\n", (now_ns() - t0) / 1e6);
        CHECK_EQ(ok, 200);
        CHECK_EQ(rpcool_call(bad, FN_ECHO, NULL, 0, NULL, NULL), 7);
        /* bits beyond the 16 slots, then a call: the pass that serves it finds them */
        __atomic_fetch_or(&rpcool__rdy(bad->ch)[0], ~0xffffull, __ATOMIC_SEQ_CST);
        __atomic_fetch_or(&rpcool__rdy_top(bad->ch)[0], ~1ull, __ATOMIC_SEQ_CST);
        CHECK_EQ(rpcool_call(good[0], FN_ECHO, NULL, 0, NULL, NULL), 7);
        rpcool_server_stats st;
        rpcool_server_get_stats(s, &st);
        CHECK(st.bad_entries > 0);
    }
    for (int k = 0; k < 2; k++)
        if (good[k]) rpcool_disconnect(good[k]);
    if (bad) rpcool_disconnect(bad);
    rpcool_server_close(s);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 16384) { /* 3 descriptors a connection */
        rl.rlim_cur = rl.rlim_max < 16384 ? rl.rlim_max : 16384;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* the roles of child processes (_exit: a holder that dies keeps its connections unfreed) */
    if (argc == 8 && !strcmp(argv[1], "--holder"))
        _exit(holder_main(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                          atoi(argv[6]), atoi(argv[7])));
    if (argc == 5 && !strcmp(argv[1], "--busy"))
        _exit(busy_main(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4])));
    if (argc == 2 && !strcmp(argv[1], "--other")) _exit(other_main());
    if (argc == 3 && !strcmp(argv[1], "--sleeper")) _exit(sleeper_main(argv[2]));
    RUN(test_scale_2000_conns);
    RUN(test_scale_busy_among_idle);
    RUN(test_scale_fair);
    RUN(test_scale_idle_wakeups);
    RUN(test_scale_kill9_reaped);
    RUN(test_scale_short_lived);
    RUN(test_scale_ready_scribbled);
    RUN(test_scale_waiting_count);
    return T_DONE();
}
