/* scale_bench.c - one server, many clients: rpcool against a UNIX-socket + epoll server, in the
   same run, rounds alternating between the two.

       scale_bench [-r ROUNDS] [-t MS] [-n CLIENTS,...] [-i IDLE] [-c CONNS] [-o SECTIONS]

   Measures (each a "NAME MEDIAN_NS P99_NS OPS_PER_S" line of bench/hist.h, and "#" lines):
     busy/alone, busy/idleN    one closed-loop client's no-op call alone, and among IDLE idle
                               connections (each made one call), timed by blocks of 1000 calls
     closed/N                  N closed-loop client processes, each round counted over one
                               window of MS after a 300 ms warm-up (all calling): calls per
                               second of all, and slowest/fastest client (every round printed);
                               rounds of rpcool, the socket server and the floor (a bare
                               futex-wake server: the kernel's part of waking a sleeping client)
                               alternate
     idle_cpu/N                the server's CPU with N idle connections over 2 s (per cent)
     connect/first100, connect/last100   CONNS connections to one server, by 10 processes one
                               after another: connect medians of the first and last 100
     podheap                   after those, another program creates a heap in the host's pod
     floor/ofd_lock/first100, floor/ofd_lock/last100   the kernel's part of a connect: an OFD
                               byte lock taken and closed on a file holding CONNS others
   Servers run in their own processes with one serving thread (rpcool) or one epoll loop. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "hist.h"
#include <dirent.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

enum { FN_NOP = 1, BLOCK = 1000, WARM_MS = 300 };
static char g_chan[64], g_sock[108];
static const rpcool_conn_opts g_copts = {.heap_size = (size_t)2 << 20};

static int h_nop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return 0;
}

/* --- the servers --------------------------------------------------------------------------- */

static pid_t rpcool_server_fork(unsigned max_conns)
{
    fflush(stdout);
    pid_t p = fork();
    if (p) return p;
    rpcool_server_opts o = {.max_conns = max_conns};
    rpcool_server *s;
    if (rpcool_server_open(g_chan, &o, &s)) _exit(2);
    rpcool_server_add_handler(s, FN_NOP, h_nop, NULL, 0);
    rpcool_serve(s);
    _exit(0);
}

static pid_t sock_server_fork(void)
{
    fflush(stdout);
    pid_t p = fork();
    if (p) return p;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
    unlink(g_sock);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4096)) _exit(2);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l}, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int k = 0; k < n; k++) {
            int fd = evs[k].data.fd;
            if (fd == l) {
                int c;
                while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                }
                continue;
            }
            char b[64];
            ssize_t r = read(fd, b, sizeof b);
            if (r <= 0) close(fd); /* leaves the epoll with its last descriptor */
            else if (write(fd, b, (size_t)r) != r) close(fd);
        }
    }
}

/* End a server process; what a killed rpcool server leaves (its name file and socket) goes. */
static void server_end(pid_t p)
{
    char f[128];
    kill(p, SIGTERM);
    waitpid(p, NULL, 0);
    snprintf(f, sizeof f, "/dev/shm/rpcool.%s", g_chan);
    unlink(f);
    snprintf(f, sizeof f, "/dev/shm/rpcool.%s.sock", g_chan);
    unlink(f);
}

/* --- clients ------------------------------------------------------------------------------- */

/* A client of either kind: one rpcool connection or one connected socket. */
struct cli { rpcool_conn *c; int fd; };

static int cli_open(struct cli *k, int sock)
{
    k->c = NULL;
    k->fd = -1;
    for (int t = 0; t < 2000; t++) { /* the server may still be starting */
        if (!sock) {
            if (!rpcool_connect(g_chan, &g_copts, &k->c)) return 0;
        } else {
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
            k->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (k->fd >= 0 && !connect(k->fd, (struct sockaddr *)&a, sizeof a)) return 0;
            if (k->fd >= 0) close(k->fd);
            k->fd = -1;
        }
        usleep(2000);
    }
    return -1;
}

static int cli_call(struct cli *k)
{
    if (k->c) return rpcool_call(k->c, FN_NOP, NULL, 0, NULL, NULL);
    uint64_t v = 1;
    if (write(k->fd, &v, sizeof v) != (ssize_t)sizeof v) return -1;
    return read(k->fd, &v, sizeof v) == (ssize_t)sizeof v ? 0 : -1;
}

static void cli_close(struct cli *k)
{
    if (k->c) rpcool_disconnect(k->c);
    if (k->fd >= 0) close(k->fd);
}

/* The floor of any server that wakes sleeping clients: one polling thread answers a request
   word with a store and a futex wake, the client waits on its answer word with a futex wait at
   once; no connection, no request record, no handler, no check. What is left is the kernel's
   part (a wake, a context switch each way), which rpcool in a crowd and the socket server pay
   too. Its server process lives for its own rounds only (it polls). */
struct fslot { uint32_t req, pad[15]; uint32_t resp, pad2[15]; };
static struct fslot *g_floor;
static unsigned g_floor_n;

static pid_t floor_server_fork(void)
{
    fflush(stdout);
    pid_t p = fork();
    if (p) return p;
    for (;;)
        for (unsigned i = 0; i < g_floor_n; i++) {
            uint32_t q = __atomic_load_n(&g_floor[i].req, __ATOMIC_ACQUIRE);
            if (q == g_floor[i].resp) continue;
            __atomic_store_n(&g_floor[i].resp, q, __ATOMIC_RELEASE);
            syscall(SYS_futex, &g_floor[i].resp, FUTEX_WAKE, 1, NULL, NULL, 0);
        }
}

static int floor_call(unsigned me)
{
    struct fslot *f = &g_floor[me];
    uint32_t q = f->req + 1, v;
    __atomic_store_n(&f->req, q, __ATOMIC_RELEASE);
    while ((v = __atomic_load_n(&f->resp, __ATOMIC_ACQUIRE)) != q)
        syscall(SYS_futex, &f->resp, FUTEX_WAIT, v, NULL, NULL, 0);
    return 0;
}

/* Shared between the driver and its client processes. */
struct board {
    uint32_t ready, go;
    uint32_t open, stop; /* round r's counting window opened, closed */
    uint64_t count[];
};

/* Wait until *w is v: a futex sleep, so a thousand waiting processes cost nothing. */
static void wait_word(uint32_t *w, uint32_t v)
{
    uint32_t cur;
    while ((cur = __atomic_load_n(w, __ATOMIC_ACQUIRE)) != v)
        syscall(SYS_futex, w, FUTEX_WAIT, cur, NULL, NULL, 0);
}

static void set_word(uint32_t *w, uint32_t v)
{
    __atomic_store_n(w, v, __ATOMIC_RELEASE);
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void add_word(uint32_t *w)
{
    __atomic_fetch_add(w, 1u, __ATOMIC_ACQ_REL);
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A closed-loop client process: one connection of each kind; each round (the driver's round
   number says which kind) it calls from the go until the stop, and counts the calls made while
   the driver's window was open: the same interval for every client, all of them calling
   (waking a thousand processes for the go takes a while; a client that timed its own interval
   from its own start would count uncontended calls at the edges). */
static void closed_client(struct board *b, unsigned me, int rounds)
{
    struct cli k[2];
    if (cli_open(&k[0], 0) || cli_open(&k[1], 1)) _exit(2);
    cli_call(&k[0]);
    add_word(&b->ready);
    for (int r = 1; r <= rounds; r++) {
        wait_word(&b->go, (uint32_t)r);
        int kind = r % 3; /* 0 rpcool, 1 socket, 2 the floor */
        uint64_t n = 0, at_open = 0;
        int opened = 0;
        while (__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE) != (uint32_t)r) {
            if (!opened && __atomic_load_n(&b->open, __ATOMIC_ACQUIRE) == (uint32_t)r) {
                opened = 1;
                at_open = n;
            }
            for (int j = 0; j < 4; j++) n += (kind == 2 ? floor_call(me) : cli_call(&k[kind])) == 0;
        }
        b->count[me] = opened ? n - at_open : 0;
        add_word(&b->ready);
    }
    cli_close(&k[0]);
    cli_close(&k[1]);
    _exit(0);
}

static void closed_loop(unsigned nclients, unsigned ms, int rounds)
{
    static const char *const kn[3] = {"rpcool", "uds", "floor"};
    size_t sz = sizeof(struct board) + nclients * sizeof(uint64_t);
    struct board *b = (struct board *)mmap(NULL, sz, PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_floor_n = nclients;
    g_floor = (struct fslot *)mmap(NULL, nclients * sizeof *g_floor, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t *kids = (pid_t *)calloc(nclients, sizeof *kids);
    pid_t rs = rpcool_server_fork(nclients + 64), ss = sock_server_fork();
    double tot[3] = {0, 0, 0}, worst[3] = {1, 1, 1};
    hist hc[3];
    rounds = 3 * ((rounds + 1) / 2); /* each kind as often, alternating */
    for (int k = 0; k < 3; k++) hist_init(&hc[k], (size_t)rounds);
    fflush(stdout);
    for (unsigned i = 0; i < nclients; i++)
        if ((kids[i] = fork()) == 0) closed_client(b, i, rounds);
    wait_word(&b->ready, nclients);
    for (int r = 1; r <= rounds; r++) {
        int kind = r % 3;
        pid_t fs = kind == 2 ? floor_server_fork() : 0;
        __atomic_store_n(&b->ready, 0u, __ATOMIC_RELEASE);
        set_word(&b->go, (uint32_t)r);
        usleep(WARM_MS * 1000); /* every client awake and calling */
        uint64_t t0 = hist_now();
        __atomic_store_n(&b->open, (uint32_t)r, __ATOMIC_RELEASE);
        usleep(ms * 1000);
        __atomic_store_n(&b->stop, (uint32_t)r, __ATOMIC_RELEASE);
        double win_ms = (double)(hist_now() - t0) / 1e6; /* the window as it was */
        wait_word(&b->ready, nclients);
        if (fs > 0) {
            kill(fs, SIGKILL);
            waitpid(fs, NULL, 0);
        }
        uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
        for (unsigned i = 0; i < nclients; i++) {
            sum += b->count[i];
            if (b->count[i] < lo) lo = b->count[i];
            if (b->count[i] > hi) hi = b->count[i];
        }
        double cps = sum * 1000.0 / win_ms, fair = hi ? (double)lo / (double)hi : 0;
        tot[kind] += cps;
        if (fair < worst[kind]) worst[kind] = fair;
        hist_add(&hc[kind], (uint64_t)(win_ms * 1e6 / (sum ? (double)sum / nclients : 1)));
        printf("#   closed/%u round %d %s: %.0f calls/s, slowest/fastest %.2f (%llu/%llu)\n",
               nclients, r, kn[kind], cps, fair, (unsigned long long)lo, (unsigned long long)hi);
        fflush(stdout);
    }
    double n = rounds / 3;
    char nm[64];
    for (int k = 0; k < 3; k++) {
        snprintf(nm, sizeof nm, "%s/closed/%u", kn[k], nclients);
        hist_print(&hc[k], nm, tot[k] / n);
    }
    printf("# closed/%u: rpcool/uds calls per second %.2fx, rpcool/floor %.2fx, uds/floor %.2fx; "
           "slowest/fastest worst round: rpcool %.2f, uds %.2f, floor %.2f\n", nclients,
           tot[0] / (tot[1] ? tot[1] : 1), tot[0] / (tot[2] ? tot[2] : 1),
           tot[1] / (tot[2] ? tot[2] : 1), worst[0], worst[1], worst[2]);
    for (unsigned i = 0; i < nclients; i++) waitpid(kids[i], NULL, 0);
    server_end(rs);
    server_end(ss);
    for (int k = 0; k < 3; k++) hist_free(&hc[k]);
    free(kids);
    munmap(b, sz);
    munmap(g_floor, nclients * sizeof *g_floor);
}

/* --- idle connections ---------------------------------------------------------------------- */

/* A process holding n connections of one kind (each made one call) until killed; with times
   not NULL it records each connect's ns there (shared memory). Returns once they are open. */
static pid_t holder(unsigned n, int sock, uint64_t *times)
{
    int p[2];
    if (pipe(p)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        struct cli *k = (struct cli *)calloc(n, sizeof *k);
        int ok = 1;
        for (unsigned i = 0; i < n && ok; i++) {
            uint64_t t0 = hist_now();
            ok = !cli_open(&k[i], sock) && !cli_call(&k[i]);
            if (times) times[i] = hist_now() - t0;
        }
        if (write(p[1], &ok, sizeof ok) != (ssize_t)sizeof ok || !ok) _exit(2);
        for (;;) pause();
    }
    close(p[1]);
    int ok = 0;
    if (read(p[0], &ok, sizeof ok) != (ssize_t)sizeof ok || !ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(p[0]);
    return pid;
}

static void holder_end(pid_t p)
{
    if (p <= 0) return;
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
}

/* The busy client's latency, in a child: per-block means of blocks blocks of 1000 calls. */
static void busy_blocks(int sock, hist *h, unsigned blocks)
{
    int p[2];
    if (pipe(p)) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct cli k;
        if (cli_open(&k, sock)) _exit(2);
        for (int w = 0; w < BLOCK; w++) cli_call(&k);
        for (unsigned b = 0; b < blocks; b++) {
            uint64_t t0 = hist_now();
            for (int j = 0; j < BLOCK; j++) cli_call(&k);
            uint64_t v = (hist_now() - t0) / BLOCK;
            if (write(p[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(3);
        }
        cli_close(&k);
        _exit(0);
    }
    close(p[1]);
    uint64_t v;
    while (read(p[0], &v, sizeof v) == (ssize_t)sizeof v) hist_add(h, v);
    close(p[0]);
    waitpid(pid, NULL, 0);
}

static void busy_among_idle(unsigned idle, int rounds)
{
    hist h[2][2]; /* [sock][among] */
    for (int s = 0; s < 2; s++)
        for (int a = 0; a < 2; a++) hist_init(&h[s][a], (size_t)rounds * 50);
    pid_t rs = rpcool_server_fork(idle + 64), ss = sock_server_fork();
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < 2; s++) {
            busy_blocks(s, &h[s][0], 50);
            pid_t hp = holder(idle, s, NULL);
            usleep(100000); /* the idle ones settle (their bits leave the ready summary) */
            busy_blocks(s, &h[s][1], 50);
            holder_end(hp);
        }
    char nm[2][2][64];
    for (int s = 0; s < 2; s++) {
        snprintf(nm[s][0], 64, "%s/busy/alone", s ? "uds" : "rpcool");
        snprintf(nm[s][1], 64, "%s/busy/idle%u", s ? "uds" : "rpcool", idle);
        for (int a = 0; a < 2; a++) {
            uint64_t m = hist_median(&h[s][a]);
            hist_print(&h[s][a], nm[s][a], m ? 1e9 / (double)m : 0);
        }
        printf("# busy among %u idle vs alone (%s): %.2fx\n", idle, s ? "uds" : "rpcool",
               (double)hist_median(&h[s][1]) / (double)hist_median(&h[s][0]));
    }
    server_end(rs);
    server_end(ss);
    for (int s = 0; s < 2; s++)
        for (int a = 0; a < 2; a++) hist_free(&h[s][a]);
}

/* CPU ticks (utime + stime) of a process. */
static long cpu_ticks(pid_t p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *q = strrchr(buf, ')');
    long ut = 0, st = 0;
    if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) != 2)
        return -1;
    return ut + st;
}

static long wakeups(pid_t p)
{
    char path[64], line[128];
    long sum = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int)p);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sp[400];
        snprintf(sp, sizeof sp, "%s/%s/status", path, e->d_name);
        FILE *f = fopen(sp, "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "voluntary_ctxt_switches:", 24)) sum += atol(line + 24);
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return sum;
}

static void idle_cpu(unsigned n)
{
    for (int s = 0; s < 2; s++) {
        pid_t srv = s ? sock_server_fork() : rpcool_server_fork(n + 64);
        pid_t hp = holder(n, s, NULL);
        sleep(1);
        long t0 = cpu_ticks(srv), w0 = wakeups(srv);
        uint64_t c0 = hist_now();
        sleep(2);
        long t1 = cpu_ticks(srv), w1 = wakeups(srv);
        double secs = (hist_now() - c0) / 1e9, pct = 100.0 * (t1 - t0) / sysconf(_SC_CLK_TCK) / secs;
        printf("%s/idle_cpu/%u %.0f %ld 0\n", s ? "uds" : "rpcool", n, pct * 1000, w1 - w0);
        printf("#   %s/idle_cpu/%u: %.2f%% CPU, %.1f wake-ups/s (fields: CPU in 1/1000 %%, "
               "wake-ups in 2 s)\n", s ? "uds" : "rpcool", n, pct, (w1 - w0) / secs);
        holder_end(hp);
        server_end(srv);
    }
}

/* --- connecting many ------------------------------------------------------------------------ */

static int other_heap(void)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        char nm[64];
        snprintf(nm, sizeof nm, "scale-bench-other-%d", (int)getpid());
        shmheap *h;
        shmheap_opts o = {.size = (size_t)2 << 20};
        int r = shmheap_create(nm, &o, &h);
        if (!r) {
            shmheap_close(h);
            shmheap_unlink(nm, NULL);
        }
        _exit(r ? 1 : 0);
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The kernel's floor under a connect: an OFD byte lock taken and its descriptor closed on a
   file that holds n other such locks (a channel with n connections): medians of the first and
   last 100, as the connects are measured. */
static void lock_floor(unsigned n)
{
    int fd = memfd_create("scale-bench-locks", MFD_CLOEXEC);
    int *fds = (int *)calloc(n, sizeof *fds);
    hist a, b;
    hist_init(&a, 100);
    hist_init(&b, 100);
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    for (unsigned i = 0; fd >= 0 && fds && i < n; i++) {
        uint64_t t0 = hist_now();
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + i, .l_len = 1};
        fds[i] = open(proc, O_RDWR | O_CLOEXEC);
        if (fds[i] < 0 || fcntl(fds[i], F_OFD_SETLK, &fl)) break;
        int t = open(proc, O_RDWR | O_CLOEXEC); /* a new description: lock, give away */
        fl.l_start = 0x7fffffff;
        fcntl(t, F_OFD_SETLK, &fl);
        close(t);
        uint64_t dt = hist_now() - t0;
        if (i < 100) hist_add(&a, dt);
        else if (i >= n - 100) hist_add(&b, dt);
    }
    hist_print(&a, "floor/ofd_lock/first100", 0);
    hist_print(&b, "floor/ofd_lock/last100", 0);
    printf("# floor: an OFD lock and close beside %u others, last 100 / first 100: %.2fx\n", n,
           (double)hist_median(&b) / (double)(hist_median(&a) ? hist_median(&a) : 1));
    for (unsigned i = 0; fds && i < n; i++)
        if (fds[i] > 0) close(fds[i]);
    free(fds);
    if (fd >= 0) close(fd);
    hist_free(&a);
    hist_free(&b);
}

static void connect_many(unsigned n)
{
    enum { P = 10 };
    for (int s = 0; s < 2; s++) {
        uint64_t *t = (uint64_t *)mmap(NULL, n * sizeof *t, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pid_t srv = s ? sock_server_fork() : rpcool_server_fork(n + 64), hp[P];
        int got = 0;
        for (int k = 0; k < P; k++)
            if ((hp[k] = holder(n / P, s, t + k * (n / P))) > 0) got++;
        const char *nm = s ? "uds" : "rpcool";
        if (got == P) {
            hist a, b;
            hist_init(&a, 100);
            hist_init(&b, 100);
            for (int i = 0; i < 100; i++) hist_add(&a, t[i]), hist_add(&b, t[n - 100 + i]);
            char x[64];
            snprintf(x, sizeof x, "%s/connect%u/first100", nm, n);
            hist_print(&a, x, 0);
            snprintf(x, sizeof x, "%s/connect%u/last100", nm, n);
            hist_print(&b, x, 0);
            printf("# %s: %u connections, connect median last 100 / first 100: %.2fx\n", nm, n,
                   (double)hist_median(&b) / (double)hist_median(&a));
            if (!s)
                printf("# another program's heap in the host's pod with %u connections: %s\n", n,
                       other_heap() ? "FAILED" : "created");
            hist_free(&a);
            hist_free(&b);
        } else {
            printf("# %s: only %d of %d groups of %u connections connected\n", nm, got, P, n / P);
        }
        for (int k = 0; k < P; k++) holder_end(hp[k]);
        server_end(srv);
        munmap(t, n * sizeof *t);
    }
}

int main(int argc, char **argv)
{
    unsigned ms = 1000, idle = 999, conns = 2000, ns[8] = {64, 1000}, nn = 2;
    int rounds = 6, opt;
    const char *only = "busy,closed,idle,connect";
    while ((opt = getopt(argc, argv, "r:t:n:i:c:o:")) != -1) {
        if (opt == 'r') rounds = atoi(optarg);
        else if (opt == 'o') only = optarg;
        else if (opt == 't') ms = (unsigned)atoi(optarg);
        else if (opt == 'i') idle = (unsigned)atoi(optarg);
        else if (opt == 'c') conns = (unsigned)atoi(optarg);
        else if (opt == 'n') {
            nn = 0;
            for (char *q = strtok(optarg, ","); q && nn < 8; q = strtok(NULL, ","))
                ns[nn++] = (unsigned)atoi(q);
        } else {
            fprintf(stderr, "usage: %s [-r ROUNDS] [-t MS] [-n N,...] [-i IDLE] [-c CONNS] "
                    "[-o busy,closed,idle,connect]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 2) rounds = 2;
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) { /* the holders and servers: 3 descriptors each */
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_chan, sizeof g_chan, "scale-bench-%d", (int)getpid());
    snprintf(g_sock, sizeof g_sock, "/tmp/scale-bench-%d.sock", (int)getpid());
    if (strstr(only, "busy")) busy_among_idle(idle, rounds / 2);
    for (unsigned i = 0; strstr(only, "closed") && i < nn; i++) closed_loop(ns[i], ms, rounds);
    if (strstr(only, "idle")) idle_cpu(idle + 1);
    if (strstr(only, "connect")) connect_many(conns);
    if (strstr(only, "connect")) lock_floor(conns);
    unlink(g_sock);
    return 0;
}
