/* Documented behaviour of shmheap.h and rpcool.h that no other test exercised: each check here
 * fails if the promise it names is broken. shmheap: the SHMHEAP_STATIC/RPCOOL_STATIC builds,
 * size/addr/mode/overwrite/pod options, SHMHEAP_WINDOW and SHMHEAP_POD, unlink freeing the
 * range, the header deciding the address, ADDRINUSE instead of replacing a mapping,
 * lock_timeout_ms, open counts, flush and the cache cap, caches given back when the heap is
 * full, stats, large block granularity, errno, name limits, pkey NOTSUP.
 * rpcool: connect_timeout_ms, channel mode, max_conns, pods, rpcool_server_stop, close from a
 * handler, the union of safety flags, handler-required SEAL, ctx_str/ctx_fail/ctx_need on the
 * copy, seals shared by calls in flight, the seal of a timed-out call, rpcool_progress when the
 * server dies, liveness across fork, a waiting client sleeps, a sync call waits for a slot,
 * builders, name limits, strerror. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

static double ms_since(uint64_t t0) { return (double)(rcp__now_ns() - t0) / 1e6; }

/* Runs fn(arg) in a child; returns its exit status, or 128 + signal. */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int shm_mode(const char *name)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return stat(p, &st) ? -1 : (int)(st.st_mode & 0777);
}

static void rm(shmheap *h, const char *name)
{
    if (h) shmheap_close(h);
    shmheap_unlink(name, NULL);
}

/* ============================== shmheap ============================== */

/* SHMHEAP_STATIC / RPCOOL_STATIC: "make every function static". A file that defines them and
   does not call every function must still build warning-free (this project builds with
   -Wall -Werror), as C11 and as C++17. */
static void g_static_build(void)
{
    const char *src = __FILE__; /* tests/test_gaps.c, relative to the repository */
    char root[512], dir[] = "/tmp/t-gaps-XXXXXX", cmd[2048];
    snprintf(root, sizeof root, "%s", src);
    char *slash = strrchr(root, '/');
    if (slash) *slash = 0; else snprintf(root, sizeof root, ".");
    strncat(root, "/..", sizeof root - strlen(root) - 1);
    snprintf(cmd, sizeof cmd, "%s/rpcool.h", root);
    if (access(cmd, R_OK) || !mkdtemp(dir) || system("command -v cc >/dev/null 2>&1") != 0) {
        t_skip("g_static_build", "no compiler or sources here");
        return;
    }
    const char *kinds[2][2] = {
        {"shm", "#define SHMHEAP_STATIC\n#define SHMHEAP_IMPLEMENTATION\n#include \"shmheap.h\"\nint main(void) { return 0; }\n"},
        {"rpc", "#define SHMHEAP_STATIC\n#define RPCOOL_STATIC\n#define RPCOOL_IMPLEMENTATION\n#include \"rpcool.h\"\nint main(void) { return 0; }\n"},
    };
    for (int k = 0; k < 2; k++) {
        for (int cpp = 0; cpp < 2; cpp++) {
            char file[600];
            snprintf(file, sizeof file, "%s/%s.%s", dir, kinds[k][0], cpp ? "cpp" : "c");
            FILE *f = fopen(file, "w");
            if (!f) { CHECK(0); continue; }
            fputs(kinds[k][1], f);
            fclose(f);
            if (cpp && system("command -v c++ >/dev/null 2>&1") != 0) continue;
            snprintf(cmd, sizeof cmd, "%s -c -o /dev/null %s -Wall -Wextra -Werror -pthread -I%s %s >%s/err 2>&1",
                     cpp ? "c++" : "cc", cpp ? "-std=c++17" : "-std=c11", root, file, dir);
            int r = system(cmd);
            char first[200] = "";
            snprintf(cmd, sizeof cmd, "%s/err", dir);
            if (r && (f = fopen(cmd, "r"))) {
                while (fgets(first, sizeof first, f) && !strstr(first, "error")) first[0] = 0;
                fclose(f);
            }
            CHECKF(r == 0, "a %s static build (%s) does not compile warning-free: %s", kinds[k][0],
                   cpp ? "C++17" : "C11", first);
            unlink(file);
        }
    }
    snprintf(cmd, sizeof cmd, "%s/err", dir);
    unlink(cmd);
    rmdir(dir);
}

/* size: rounded up to 2 MiB, 0 = 64 MiB; addr: the heap is at that address; mode: the new
   object's permissions, 0 = 0600; overwrite: formats an existing shm heap anew. */
static void g_create_options(void)
{
    const char *pod = t_uniq("gpod");
    shmheap_opts o = {.size = 3 << 20, .pod = pod};
    const char *n = t_uniq("gsize");
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(n, &o, &h), 0);
    if (h) CHECK_EQ(shmheap_size(h), 4 << 20);
    CHECK_EQ(shm_mode(n), 0600);
    if (h) shmheap_close(h);
    shmheap_unlink(n, &o);
    o.size = 0;
    n = t_uniq("gdef");
    CHECK_EQ(shmheap_create(n, &o, &h), 0);
    if (h) CHECK_EQ(shmheap_size(h), 64 << 20);
    if (h) shmheap_close(h);
    shmheap_unlink(n, &o);
    /* a fixed address */
    o.size = 2 << 20;
    o.addr = 0x6f4000000000ull;
    n = t_uniq("gaddr");
    CHECK_EQ(shmheap_create(n, &o, &h), 0);
    if (h) CHECK(shmheap_base(h) == (void *)(uintptr_t)o.addr);
    if (h) shmheap_close(h);
    shmheap_unlink(n, &o);
    o.addr = 0;
    /* mode */
    mode_t old = umask(0);
    o.mode = 0640;
    n = t_uniq("gmode");
    CHECK_EQ(shmheap_create(n, &o, &h), 0);
    umask(old);
    CHECKF(shm_mode(n) == 0640, "mode 0640 asked, object has %o", shm_mode(n));
    /* overwrite of an existing shm heap formats it anew */
    int *v = h ? (int *)shmheap_malloc(h, sizeof *v) : NULL;
    if (v) CHECK_EQ(shmheap_root_set(h, "v", v), 0);
    shmheap_opts ow = {.size = 2 << 20, .pod = pod, .overwrite = 1};
    /* ... but not while this process has it open: its handle would point into a new heap */
    shmheap *h2 = NULL;
    CHECK_EQ(shmheap_create(n, &ow, &h2), SHMHEAP_E_BUSY);
    CHECK(h2 == NULL);
    if (v) CHECK(shmheap_root_get(h, "v") == v);
    if (h) CHECK_EQ(shmheap_check(h, NULL), 0);
    if (h) shmheap_close(h);
    h = NULL;
    CHECK_EQ(shmheap_create(n, &ow, &h), 0);
    if (h) {
        CHECK(shmheap_root_get(h, "v") == NULL);
        shmheap_stats st;
        CHECK_EQ(shmheap_check(h, &st), 0);
        CHECK_EQ(st.live_blocks, 0);
        shmheap_close(h);
    }
    shmheap_unlink(n, &o);
    char pp[128];
    snprintf(pp, sizeof pp, "/%s", pod);
    shm_unlink(pp);
}

/* SHMHEAP_WINDOW gives a new pod its window; unlink frees the heap's range for the next one;
   SHMHEAP_POD names the pod when opts->pod is NULL. */
static void g_window_pod_unlink(void)
{
    const char *pod = t_uniq("gwin");
    const uint64_t lo = 0x6c8000000000ull, hi = lo + (4 << 20);
    char win[64], pp[128];
    snprintf(win, sizeof win, "%llx-%llx", (unsigned long long)lo, (unsigned long long)hi);
    snprintf(pp, sizeof pp, "/%s", pod);
    setenv("SHMHEAP_WINDOW", win, 1);
    setenv("SHMHEAP_POD", pod, 1);
    const char *na = t_uniq("gwa"), *nb = t_uniq("gwb");
    char a[96], b[96];
    snprintf(a, sizeof a, "%s", na);
    snprintf(b, sizeof b, "%s", nb);
    shmheap_opts o4 = {.size = 4 << 20}, o2 = {.size = 2 << 20};
    shmheap *ha = NULL, *hb = NULL;
    int r = shmheap_create(a, &o4, &ha); /* no opts.pod: $SHMHEAP_POD */
    unsetenv("SHMHEAP_WINDOW");
    CHECKF(r == 0, "create: %s", shmheap_strerror(r));
    CHECK(shm_mode(pod) >= 0); /* the pod named by $SHMHEAP_POD exists */
    if (ha) CHECKF(shmheap_base(ha) == (void *)(uintptr_t)lo, "heap at %p, window starts at %llx",
                   shmheap_base(ha), (unsigned long long)lo);
    if (ha) shmheap_close(ha);
    r = shmheap_create(b, &o2, &hb); /* the window is full */
    CHECKF(r != 0, "a heap beyond a full window was created at %p", hb ? shmheap_base(hb) : NULL);
    if (!r) { shmheap_close(hb); shmheap_unlink(b, NULL); hb = NULL; }
    CHECK_EQ(shmheap_unlink(a, NULL), 0);
    r = shmheap_create(b, &o2, &hb); /* unlink gave the range back */
    CHECKF(r == 0, "create after unlink: %s", shmheap_strerror(r));
    if (hb) CHECK(shmheap_base(hb) == (void *)(uintptr_t)lo);
    if (hb) shmheap_close(hb);
    shmheap_unlink(b, NULL);
    unsetenv("SHMHEAP_POD");
    shm_unlink(pp);
}

/* The header decides the address: a process using another pod maps a file heap where its
   header says. And an opener whose range is taken fails with ADDRINUSE rather than replace
   the mapping that is there. */
static const char *g_path;
static uintptr_t g_base;
static int other_pod_child(void *arg)
{
    shmheap *h = (shmheap *)arg, *h2 = NULL;
    shmheap_close(h);
    shmheap_opts o = {.pod = t_uniq("gother")};
    int r = shmheap_open(g_path, &o, &h2);
    char pp[128];
    snprintf(pp, sizeof pp, "/%s", o.pod);
    shm_unlink(pp);
    if (r) return 2;
    return shmheap_base(h2) == (void *)g_base ? 0 : 3;
}
static int addr_taken_child(void *arg)
{
    shmheap *h = (shmheap *)arg, *h2 = NULL;
    shmheap_close(h);
    char *m = (char *)mmap((void *)g_base, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != (char *)g_base) return 9; /* cannot set the test up */
    strcpy(m, "mine");
    int r = shmheap_open(g_path, NULL, &h2);
    if (r != SHMHEAP_E_ADDRINUSE) return 2;
    return strcmp(m, "mine") ? 3 : 0;
}
static void g_header_decides(void)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/%s.heap", t_uniq("ghdr"));
    g_path = path;
    shmheap *h = t_heap(path, 2 << 20);
    if (!h) return;
    g_base = (uintptr_t)shmheap_base(h);
    int st = in_child(other_pod_child, h);
    CHECKF(st == 0, "open through another pod: child status %d", st);
    st = in_child(addr_taken_child, h);
    CHECKF(st == 0, "open over a private mapping: child status %d (2: not ADDRINUSE, 3: mapping replaced)", st);
    rm(h, path);
}

/* lock_timeout_ms: with a peer holding the heap's mutex, calls that need it fail with
   -ETIMEDOUT in about that time; small blocks are still served. */
static shmheap *g_h;
static void *g_big;
static int lock_timeout_child(void *arg)
{
    const char *n = (const char *)arg;
    shmheap_close(g_h);
    shmheap_opts o = {.lock_timeout_ms = 100};
    shmheap *h;
    if (shmheap_open(n, &o, &h)) return 20;
    int bad = 0;
    uint64_t t0 = rcp__now_ns();
    void *p = NULL;
    int r = shmheap_alloc(h, 300000, 0, &p);
    if (r != -ETIMEDOUT) { bad |= 1; fprintf(stderr, "# shmheap_alloc(300000): %d (%s)\n", r, shmheap_strerror(r)); }
    if ((r = shmheap_free(h, g_big)) != -ETIMEDOUT) { bad |= 2; fprintf(stderr, "# free(large): %d\n", r); }
    if ((r = shmheap_root_set(h, "x", g_big)) != -ETIMEDOUT) { bad |= 4; fprintf(stderr, "# root_set: %d\n", r); }
    if (shmheap_root_get(h, "v") != NULL) bad |= 8;
    if ((r = shmheap_check(h, NULL)) != -ETIMEDOUT) { bad |= 16; fprintf(stderr, "# check: %d\n", r); }
    if (ms_since(t0) > 2000) bad |= 32;
    if (!shmheap_malloc(h, 64)) bad |= 64;
    /* a class with no span yet needs the mutex to get one: a timeout, not "heap full" */
    p = NULL;
    if ((r = shmheap_alloc(h, 3000, 0, &p)) != -ETIMEDOUT) {
        bad |= 128;
        fprintf(stderr, "# shmheap_alloc(3000) with no span of its class: %d (%s)\n", r, shmheap_strerror(r));
    }
    errno = 0;
    if (shmheap_malloc(h, 3000) != NULL || errno != ETIMEDOUT) {
        bad |= 128; /* an exit status holds 8 bits */
        fprintf(stderr, "# shmheap_malloc(3000) with no span of its class: errno %d, want ETIMEDOUT\n", errno);
    }
    return bad;
}
static void g_lock_timeout(void)
{
    const char *n0 = t_uniq("glock");
    static char n[96];
    snprintf(n, sizeof n, "%s", n0);
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    g_h = h;
    g_big = shmheap_malloc(h, 200000);
    int *v = (int *)shmheap_malloc(h, sizeof *v);
    shmheap_free(h, shmheap_malloc(h, 64)); /* a span of that class with room */
    CHECK_EQ(shmheap_root_set(h, "v", v), 0);
    CHECK_EQ(shmheap__lock(h), 0); /* the stuck peer */
    int st = in_child(lock_timeout_child, n);
    shmheap__unlock(h);
    CHECKF(st == 0, "with the mutex held elsewhere and lock_timeout_ms = 100: child status %d "
           "(1 alloc, 2 free, 4 root_set, 8 root_get, 16 check not -ETIMEDOUT; 32 slow; 64 small malloc failed; "
           "128 small alloc needing a new span not -ETIMEDOUT)", st);
    CHECK(shmheap_root_get(h, "v") == v);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    rm(h, n);
}

/* A mutex holder in another pid namespace that dies holding it: its thread id means nothing
   here, but the kernel drops its live slot's lock, so the next locker takes the mutex over
   (glibc's robust mutexes did this across pid namespaces; a bare thread id cannot). Second
   case: a newcomer claims the dead holder's freed slot before anyone looked; it takes the mutex
   over itself, since the slot lock can no longer tell. Needs CAP_SYS_ADMIN for CLONE_NEWPID. */
static const char *g_pidns_name;
/* pid 1 of a new pid namespace, with a handle of its own (not the inherited one: a forked child
   shares its parent's slot). stay = 0: dies holding the mutex. stay = 1: the newcomer, which
   says when its handle is open and lives on, holding the slot it claimed. */
static int pidns_main(int stay, int fd)
{
    shmheap_close(g_h);
    shmheap *h;
    if (shmheap_open(g_pidns_name, NULL, &h)) return 20;
    if (!stay) return shmheap__lock(h) ? 21 : 0;
    if (write(fd, "x", 1) != 1) return 22;
    pause();
    return 0;
}
/* Runs pidns_main in a new pid namespace; *g gets its pid as we see it. With stay, returns once
   its handle is open. */
static pid_t pidns_spawn(int stay, pid_t *g)
{
    fflush(stdout);
    fflush(stderr);
    int p[2], q[2]; /* p: its pid, from the intermediate child; q: "x" once its handle is open */
    *g = -1;
    if (pipe(p)) return -1;
    if (pipe(q)) { close(p[0]); close(p[1]); return -1; }
    pid_t a = fork();
    if (a == 0) {
        close(p[0]);
        close(q[0]);
        if (unshare(CLONE_NEWPID)) _exit(77);
        pid_t k = fork();
        if (k == 0) _exit(pidns_main(stay, q[1]));
        if (write(p[1], &k, sizeof k) != (ssize_t)sizeof k) _exit(23);
        int st = 0;
        waitpid(k, &st, 0);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
    }
    close(p[1]);
    close(q[1]);
    if (read(p[0], g, sizeof *g) != (ssize_t)sizeof *g) *g = -1;
    char x;
    if (stay && read(q[0], &x, 1) != 1) { /* it failed before its handle was open */ }
    close(p[0]);
    close(q[0]);
    return a;
}
static void g_lock_dead_other_pidns(void)
{
    const char *n0 = t_uniq("gpidns");
    static char n[96];
    snprintf(n, sizeof n, "%s", n0);
    g_pidns_name = n;
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    g_h = h;
    for (int round = 0; round < 2; round++) {
        pid_t g, ng = -1;
        pid_t a = pidns_spawn(0, &g);
        int st = -1;
        if (a > 0) waitpid(a, &st, 0);
        if (a > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            t_skip("g_lock_dead_other_pidns", "unshare(CLONE_NEWPID) not permitted here");
            rm(h, n);
            return;
        }
        CHECKF(a > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder in a new pid namespace: status %d", st);
        CHECK(rcp__load(&h->hdr->lock.m.owner) != 0); /* it died holding the mutex */
        uint64_t rec = h->hdr->recoveries;
        pid_t newcomer = round == 1 ? pidns_spawn(1, &ng) : 0; /* claims the freed slot first */
        if (round == 1) CHECKF(h->hdr->recoveries == rec + 1, "the newcomer did not take the mutex over");
        h->lock_timeout_ms = 5000;
        void *p = NULL;
        uint64_t t0 = rcp__now_ns();
        int r = shmheap_alloc(h, 300000, 0, &p);
        double took = ms_since(t0);
        h->lock_timeout_ms = 0;
        CHECKF(r == 0, "round %d (%s): a large allocation after the holder died: %s after %.0f ms", round,
               round ? "a newcomer took its slot" : "slot free", shmheap_strerror(r), took);
        CHECKF(took < 1000, "round %d: the dead holder was recognised after %.0f ms", round, took);
        CHECK_EQ(h->hdr->recoveries, rec + 1);
        if (p) shmheap_free(h, p);
        CHECK_EQ(shmheap_check(h, NULL), 0);
        if (ng > 0) kill(ng, SIGKILL);
        if (newcomer > 0) waitpid(newcomer, NULL, 0);
    }
    rm(h, n);
}

/* shmheap_opens counts create/open of one heap in this process; the last close unmaps. */
static void g_opens(void)
{
    const char *n = t_uniq("gopens");
    shmheap *h = t_heap(n, 2 << 20), *h2 = NULL, *h3 = NULL;
    if (!h) return;
    CHECK_EQ(shmheap_opens(h), 1);
    CHECK_EQ(shmheap_open(n, NULL, &h2), 0);
    CHECK_EQ(shmheap_open(n, NULL, &h3), 0);
    CHECK(h2 == h && h3 == h);
    CHECK_EQ(shmheap_opens(h), 3);
    void *p = shmheap_malloc(h, 10);
    CHECK_EQ(shmheap_close(h3), 0);
    CHECK_EQ(shmheap_close(h2), 0);
    CHECK_EQ(shmheap_opens(h), 1);
    CHECK(shmheap_of(p) == h);
    const char *nm = shmheap_name(h);
    CHECK(nm && strstr(nm, n) != NULL);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK(shmheap_of(p) == NULL);
    shmheap_unlink(n, NULL);
}

/* A thread cache holds at most 8 blocks per class; shmheap_flush gives them back now. */
static void g_flush_and_cap(void)
{
    const char *n = t_uniq("gflush");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    void *p[12];
    for (int i = 0; i < 12; i++) p[i] = shmheap_malloc(h, 200);
    for (int i = 0; i < 12; i++) CHECK_EQ(shmheap_free(h, p[i]), 0);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 8);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(shmheap_flush(h), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 0);
    CHECK_EQ(shmheap_free(h, p[0]), SHMHEAP_E_DOUBLEFREE); /* free in the bitmap now */
    rm(h, n);
}

/* "the cache ... goes back to everyone ... when the heap is full, ... and, for a process that
   died, at the ... full heap of anyone on the same host": a block as big as the whole data area
   fits after everything was freed, even with freed blocks held in a cache. */
static void fill_free_small(shmheap *h)
{
    static void *ps[200000];
    size_t k = 0;
    void *p;
    while (k < 200000 && (p = shmheap_malloc(h, 16))) ps[k++] = p;
    for (size_t i = 0; i < k; i++) shmheap_free(h, ps[i]);
}
static int dead_cache_child(void *arg)
{
    fill_free_small((shmheap *)arg);
    kill(getpid(), SIGKILL);
    return 0;
}
static void g_full_returns_caches(void)
{
    const char *n = t_uniq("gfull");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    size_t all = st.data_bytes;
    fill_free_small(h); /* our own cache keeps 8 blocks of one span */
    void *big = shmheap_malloc(h, all);
    CHECKF(big != NULL, "a block of the whole data area (%zu bytes) after freeing everything: our own cache was not given back", all);
    if (big) CHECK_EQ(shmheap_free(h, big), 0);
    rm(h, n);
    n = t_uniq("gfull2");
    h = t_heap(n, 2 << 20);
    if (!h) return;
    CHECK_EQ(in_child(dead_cache_child, h), 128 + SIGKILL);
    big = shmheap_malloc(h, all);
    CHECKF(big != NULL, "a block of the whole data area after a process died with a full cache: its cache was not given back");
    if (big) CHECK_EQ(shmheap_free(h, big), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

/* shmheap_check's numbers: used bytes are slot sizes, spans add up; large blocks come in
   64 KiB multiples; allocation functions set errno = ENOMEM when the heap is full. */
static void g_stats_and_sizes(void)
{
    const char *n = t_uniq("gstats");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    void *a = shmheap_malloc(h, 100);    /* class 112 */
    void *b = shmheap_malloc(h, 100000); /* two spans */
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.size, 4 << 20);
    CHECK_EQ(st.live_blocks, 2);
    CHECK_EQ(st.used_bytes, 112 + 131072);
    CHECK_EQ(st.small_spans, 1);
    CHECK_EQ(st.large_spans, 2);
    CHECK_EQ(st.free_spans + st.small_spans + st.large_spans, st.data_bytes >> 16);
    CHECK_EQ(shmheap_usable_size(h, a), 112);
    CHECK_EQ(shmheap_usable_size(h, b), 131072);
    void *c = shmheap_malloc(h, 32769);
    CHECK_EQ(shmheap_usable_size(h, c), 65536);
    CHECK_EQ(shmheap_free(h, c), 0);
    errno = 0;
    CHECK(shmheap_malloc(h, 8 << 20) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(shmheap_calloc(h, 1, 8 << 20) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(shmheap_realloc(h, b, 8 << 20) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK_EQ(shmheap_usable_size(h, b), 131072); /* untouched */
    CHECK_EQ(shmheap_free(h, a), 0);
    CHECK_EQ(shmheap_free(h, b), 0);
    rm(h, n);
}

/* Root names up to 47 bytes, heap names up to 100 bytes. */
static void g_name_limits(void)
{
    const char *n = t_uniq("gname");
    shmheap *h = t_heap(n, 2 << 20), *h2 = NULL;
    if (!h) return;
    char nm[128];
    memset(nm, 'r', sizeof nm);
    nm[47] = 0;
    void *p = shmheap_malloc(h, 8);
    CHECK_EQ(shmheap_root_set(h, nm, p), 0);
    CHECK(shmheap_root_get(h, nm) == p);
    nm[47] = 'r';
    nm[48] = 0;
    CHECK_EQ(shmheap_root_set(h, nm, p), SHMHEAP_E_BADNAME);
    rm(h, n);
    memset(nm, 'h', sizeof nm);
    int off = snprintf(nm, sizeof nm, "t-%d-", (int)getpid());
    nm[off] = 'h';
    nm[100] = 0;
    shmheap_opts o = {.size = 2 << 20};
    int r = shmheap_create(nm, &o, &h2);
    CHECKF(r == 0, "a heap name of 100 bytes: %s", shmheap_strerror(r));
    if (!r) rm(h2, nm);
    nm[100] = 'h';
    nm[101] = 0;
    r = shmheap_create(nm, &o, &h2);
    CHECK_EQ(r, SHMHEAP_E_BADNAME);
    if (!r) rm(h2, nm);
}

/* Without pku every pkey function but supported returns SHMHEAP_E_NOTSUP. */
static void g_pkey_notsup(void)
{
    if (shmheap_pkey_supported()) { t_skip("g_pkey_notsup", "this CPU has pku (see tests/vm)"); return; }
    const char *n = t_uniq("gpkey");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    void *p = shmheap_malloc(h, 4096);
    CHECK_EQ(shmheap_pkey_free(1), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_pkey_protect(h, p, 4096, 1), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_pkey_alloc(1), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_pkey_set(1, 1), SHMHEAP_E_NOTSUP);
    rm(h, n);
}

/* Every error code has its own explanation, the one its X-macro list gives; -errno is explained
   too. */
#define T_CODE(name, value, text) {name, value, text},
static const struct { int code, value; const char *text; } t_shm_codes[] = {SHMHEAP_ERRORS(T_CODE)},
                                                            t_rpc_codes[] = {RPCOOL_ERRORS(T_CODE)};
#undef T_CODE
static void g_strerror(void)
{
    const char *seen[64];
    int k = 0;
    for (size_t i = 0; i < sizeof t_shm_codes / sizeof t_shm_codes[0]; i++) {
        int c = t_shm_codes[i].code;
        const char *s = shmheap_strerror(c);
        CHECK_EQ(c, t_shm_codes[i].value);
        CHECKF(s && *s && !strstr(s, "unknown"), "shmheap_strerror(%d) = %s", c, s ? s : "NULL");
        CHECKF(s && !strcmp(s, t_shm_codes[i].text), "shmheap_strerror(%d) = %s", c, s);
        CHECKF(s && !strcmp(s, rpcool_strerror(c)), "rpcool_strerror(%d) differs", c);
        for (int j = 0; j < k; j++) CHECKF(strcmp(seen[j], s), "two codes share \"%s\"", s);
        seen[k++] = s;
    }
    CHECK_EQ(k, 16);
    k = 0;
    for (size_t i = 0; i < sizeof t_rpc_codes / sizeof t_rpc_codes[0]; i++) {
        int c = t_rpc_codes[i].code;
        const char *s = rpcool_strerror(c);
        CHECK_EQ(c, t_rpc_codes[i].value);
        CHECKF(s && *s && !strstr(s, "unknown"), "rpcool_strerror(%d) = %s", c, s ? s : "NULL");
        CHECKF(s && !strcmp(s, t_rpc_codes[i].text), "rpcool_strerror(%d) = %s", c, s);
        for (int j = 0; j < k; j++) CHECKF(strcmp(seen[j], s), "two codes share \"%s\"", s);
        seen[k++] = s;
    }
    CHECK_EQ(k, 17);
    CHECK(!strcmp(shmheap_strerror(-ETIMEDOUT), strerror(ETIMEDOUT)));
    CHECK(!strcmp(rpcool_strerror(-ENOENT), strerror(ENOENT)));
}

/* ============================== rpcool ============================== */

enum { FN_SLOW = 1, FN_SAFETY = 2, FN_STR = 3, FN_FAIL = 4, FN_CLOSE = 5, FN_COPYNEED = 6,
       FN_SLOWREPLY = 7, FN_SEALREQ = 8, FN_SEALED = 9, FN_BIGREPLY = 10 };

static int h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    usleep(len >= sizeof(int) ? (useconds_t)*(int *)arg * 1000 : 1000);
    return 1;
}
static int h_safety(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    return (int)rpcool_ctx_safety(ctx);
}
static int h_str(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    const char *s = rpcool_ctx_need_str(ctx, *(const char **)rpcool_ctx_need(ctx, arg, sizeof(char *)));
    return (int)strlen(s);
}
static int h_fail(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    rpcool_ctx_fail(ctx, -1234);
    return 0;
}
static int h_close(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len;
    return rpcool_server_close((rpcool_server *)user);
}
/* under COPY: the argument is the private copy, rpcool_ctx_need accepts it, and writing to it
   does not change the sender's memory */
static int h_copyneed(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (shmheap_contains(rpcool_ctx_heap(ctx), arg, len)) return 2;
    char *p = (char *)rpcool_ctx_need(ctx, arg, len);
    p[0] = 'X';
    return 1;
}
static int h_slowreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    usleep(200000);
    void *r = rpcool_ctx_alloc(ctx, 1000);
    if (!r) return SHMHEAP_E_FULL;
    rpcool_ctx_reply(ctx, r, 1000);
    return 3;
}
/* a reply over 32 KiB: rpcool_ctx_alloc takes the client heap's mutex */
static int h_bigreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    void *r = rpcool_ctx_alloc(ctx, 100000);
    if (!r) return SHMHEAP_E_FULL;
    rpcool_ctx_reply(ctx, r, 100000);
    return 4;
}
static int devzero = -1;
static int writable(const void *p) { return read(devzero, (void *)p, 0) == 0 && read(devzero, (void *)p, 1) == 1; }
static int h_sealed(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    return writable(arg) ? 0 : 1;
}

static rpcool_server *serve(const char *name, const rpcool_server_opts *so, unsigned threads)
{
    rpcool_server *s = NULL;
    int r = rpcool_server_open(name, so, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (r) return NULL;
    rpcool_server_add_handler(s, FN_SLOW, h_slow, NULL, 0);
    rpcool_server_add_handler(s, FN_SAFETY, h_safety, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, FN_STR, h_str, NULL, 0);
    rpcool_server_add_handler(s, FN_FAIL, h_fail, NULL, 0);
    rpcool_server_add_handler(s, FN_CLOSE, h_close, s, 0);
    rpcool_server_add_handler(s, FN_COPYNEED, h_copyneed, NULL, RPCOOL_COPY);
    rpcool_server_add_handler(s, FN_SLOWREPLY, h_slowreply, NULL, 0);
    rpcool_server_add_handler(s, FN_SEALREQ, h_sealed, NULL, RPCOOL_SEAL);
    rpcool_server_add_handler(s, FN_SEALED, h_sealed, NULL, 0);
    rpcool_server_add_handler(s, FN_BIGREPLY, h_bigreply, NULL, 0);
    if (threads) rpcool_server_start(s, threads);
    return s;
}

static int slow_call(rpcool_conn *c, int ms)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (!a) return SHMHEAP_E_FULL;
    *a = ms;
    int r = rpcool_call(c, FN_SLOW, a, sizeof *a, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

/* connect_timeout_ms: a channel whose server never serves refuses within that time, and the
   would-be connection leaves no heap behind. mode: the channel file's permissions. */
static int count_shm(const char *needle)
{
    char cmd[256];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd, "ls /dev/shm 2>/dev/null | grep -c -- 'rpcool-%s-'", needle);
    if ((f = popen(cmd, "r"))) { if (fscanf(f, "%d", &n) != 1) n = -1; pclose(f); }
    return n;
}
static void g_connect_timeout_and_mode(void)
{
    const char *name = t_uniq("gcto");
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.mode = 0640;
    mode_t old = umask(0);
    rpcool_server *s = serve(name, &so, 0); /* opened, never served */
    umask(old);
    if (!s) return;
    char fn[128];
    snprintf(fn, sizeof fn, "rpcool.%s", name);
    CHECKF(shm_mode(fn) == 0640, "channel mode 0640 asked, file has %o", shm_mode(fn));
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 150;
    o.heap_size = 2 << 20;
    rpcool_conn *c = NULL;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_connect(name, &o, &c), RPCOOL_E_TIMEOUT);
    double ms = ms_since(t0);
    CHECKF(ms >= 140 && ms < 1500, "connect_timeout_ms 150 took %.0f ms", ms);
    CHECK_EQ(count_shm(name), 0);
    rpcool_server_close(s);
    s = serve(name, NULL, 0);
    if (s) CHECKF(shm_mode(fn) == 0600, "default channel mode: %o", shm_mode(fn));
    if (s) rpcool_server_close(s);
}

/* max_conns: 0 means 64 slots, more than 1024 is refused. A connection in a pod of its own. */
static void g_max_conns_and_pod(void)
{
    rpcool_server *s = NULL;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.max_conns = 1025;
    CHECK_EQ(rpcool_server_open(t_uniq("gmax"), &so, &s), RPCOOL_E_INVAL);
    const char *name = t_uniq("gmax");
    const char *pod = t_uniq("gcpod");
    so.max_conns = 0;
    so.pod = pod;
    s = serve(name, &so, 1);
    if (!s) return;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.heap_size = 2 << 20;
    o.pod = pod;
    static rpcool_conn *c[65];
    int k = 0, r = 0;
    while (k < 65 && (r = rpcool_connect(name, &o, &c[k])) == 0) k++;
    CHECK_EQ(k, 64);
    CHECK_EQ(r, RPCOOL_E_NOSLOT);
    CHECK(shm_mode(pod) >= 0); /* the heaps went to that pod */
    if (k) CHECK_EQ(slow_call(c[k - 1], 0), 1);
    while (k > 0) rpcool_disconnect(c[--k]);
    rpcool_server_close(s);
    char pp[128];
    snprintf(pp, sizeof pp, "/%s", pod);
    shm_unlink(pp);
}

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
    rpcool_server *s = serve(name, NULL, 0);
    if (!s) return;
    pthread_t th;
    g_served = 0;
    pthread_create(&th, NULL, serve_main, s);
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) CHECK_EQ(rpcool_call(c, FN_CLOSE, NULL, 0, NULL, NULL), RPCOOL_E_INVAL);
    if (c) CHECK_EQ(slow_call(c, 0), 1); /* still open */
    if (c) rpcool_disconnect(c); /* (a stopped server would not see it go until close's 5 s) */
    rpcool_server_stop(s);
    uint64_t t0 = rcp__now_ns();
    while (!__atomic_load_n(&g_served, __ATOMIC_ACQUIRE) && ms_since(t0) < 2000) usleep(1000);
    CHECKF(__atomic_load_n(&g_served, __ATOMIC_ACQUIRE), "rpcool_serve did not return after rpcool_server_stop");
    pthread_join(th, NULL);
    rpcool_server_close(s);
}

/* A call gets the union of per-call, connection, channel and handler flags (rpcool_ctx_safety);
   a handler registered with RPCOOL_SEAL refuses unsealed calls. */
static void g_safety_union(void)
{
    const char *name = t_uniq("gunion");
    rpcool_server *s = serve(name, NULL, 1);
    if (!s) return;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.safety = RPCOOL_COPY;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) {
        char *pg = (char *)rpcool_alloc_pages(c, 64);
        rpcool_call_opts co;
        memset(&co, 0, sizeof co);
        co.safety = RPCOOL_SEAL;
        CHECK_EQ(rpcool_call_ex(c, FN_SAFETY, pg, 64, &co, NULL, NULL), RPCOOL_COPY | RPCOOL_SEAL | RPCOOL_SANDBOX);
        CHECK_EQ(rpcool_call(c, FN_SAFETY, pg, 64, NULL, NULL), RPCOOL_COPY | RPCOOL_SANDBOX);
        /* handler-required sealing */
        rpcool_free(c, pg);
        rpcool_disconnect(c);
    }
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        char *pg = (char *)rpcool_alloc_pages(c, 64);
        CHECK_EQ(rpcool_call(c, FN_SEALREQ, pg, 64, NULL, NULL), RPCOOL_E_POLICY);
        rpcool_call_opts co;
        memset(&co, 0, sizeof co);
        co.safety = RPCOOL_SEAL;
        CHECK_EQ(rpcool_call_ex(c, FN_SEALREQ, pg, 64, &co, NULL, NULL), 1);
        CHECK(writable(pg));
        rpcool_free(c, pg);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.safety = RPCOOL_COPY;
    s = serve(name, &so, 1);
    if (!s) return;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (c) {
        char *a = rpcool_strdup(c, "x");
        CHECK_EQ(rpcool_call(c, FN_SAFETY, a, 2, NULL, NULL), RPCOOL_COPY | RPCOOL_SANDBOX);
        rpcool_free(c, a);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* rpcool_ctx_need_str, rpcool_ctx_fail, rpcool_ctx_need on the private copy of a COPY call. */
static const char *private_str = "private";
static void g_ctx_helpers(void)
{
    const char *name = t_uniq("gctx");
    rpcool_server *s = serve(name, NULL, 1);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    char **arg = (char **)rpcool_alloc(c, sizeof *arg);
    *arg = rpcool_strdup(c, "twelve chars");
    CHECK_EQ(rpcool_call(c, FN_STR, arg, sizeof *arg, NULL, NULL), 12);
    char *mine = *arg;
    *arg = (char *)private_str;
    CHECK_EQ(rpcool_call(c, FN_STR, arg, sizeof *arg, NULL, NULL), RPCOOL_E_BADPTR);
    /* a string that runs to the end of the heap without a NUL */
    char *end = (char *)shmheap_base(rpcool_heap(c)) + shmheap_size(rpcool_heap(c)) - 64;
    void *tail = shmheap_aligned_alloc(rpcool_heap(c), 65536, 65536);
    if (tail && (char *)tail + 65536 == end + 64) {
        memset(end, 'a', 64);
        *arg = end;
        CHECK_EQ(rpcool_call(c, FN_STR, arg, sizeof *arg, NULL, NULL), RPCOOL_E_BADPTR);
    }
    if (tail) rpcool_free(c, tail);
    CHECK_EQ(rpcool_call(c, FN_FAIL, NULL, 0, NULL, NULL), -1234);
    char *txt = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call(c, FN_COPYNEED, txt, 4, NULL, NULL), 1);
    CHECK(!strcmp(txt, "abc")); /* the handler wrote to its copy only */
    rpcool_free(c, txt);
    rpcool_free(c, mine);
    rpcool_free(c, arg);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* max_copy: a COPY argument larger than the server copies fails with RPCOOL_E_TOOBIG (a client
   picks its heap's size: it must not make every serving thread copy gigabytes), the server
   serves on, and 0 means 64 MiB. */
static void g_copy_max(void)
{
    const char *name = t_uniq("gcopy");
    rpcool_server_opts so = {.max_copy = (size_t)1 << 20};
    rpcool_server *s = serve(name, &so, 1);
    if (!s) return;
    rpcool_conn_opts co = {.heap_size = (size_t)256 << 20};
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &co, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    char *big = (char *)rpcool_alloc(c, ((size_t)64 << 20) + 1);
    CHECK(big != NULL);
    if (big) {
        memset(big, 'b', (size_t)1 << 20);
        CHECK_EQ(rpcool_call(c, FN_COPYNEED, big, (size_t)1 << 20, NULL, NULL), 1);
        CHECK_EQ(rpcool_call(c, FN_COPYNEED, big, ((size_t)1 << 20) + 1, NULL, NULL), RPCOOL_E_TOOBIG);
        CHECK_EQ(big[0], 'b');
        CHECK_EQ(rpcool_call(c, FN_COPYNEED, big, 16, NULL, NULL), 1); /* still served */
        CHECK(strstr(rpcool_strerror(RPCOOL_E_TOOBIG), "max_copy") != NULL);
    }
    rpcool_disconnect(c);
    rpcool_server_close(s);
    /* the default: 64 MiB */
    s = serve(name, NULL, 1);
    if (!s) return;
    c = NULL;
    CHECK_EQ(rpcool_connect(name, &co, &c), 0);
    if (c) {
        big = (char *)rpcool_alloc(c, ((size_t)64 << 20) + 1);
        CHECK(big != NULL);
        if (big) CHECK_EQ(rpcool_call(c, FN_COPYNEED, big, ((size_t)64 << 20) + 1, NULL, NULL), RPCOOL_E_TOOBIG);
        if (big) CHECK_EQ(rpcool_call(c, FN_COPYNEED, big, 16, NULL, NULL), 1);
        rpcool_disconnect(c);
    }
    rpcool_server_close(s);
}

/* "a range stays sealed while any call uses it": two sealed calls in flight on one page, the
   short one finishes first (seal_batch 1): the page stays read-only until the long one ends.
   And the seal of a call that timed out stays until the server answers; then it goes, and so
   does the reply nobody took. */
static void g_seals_in_flight(void)
{
    const char *name = t_uniq("gseal");
    rpcool_server *s = serve(name, NULL, 2);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    int *pg = (int *)rpcool_alloc_pages(c, 4096);
    pg[0] = 300;
    pg[1] = 1;
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_SEAL;
    uint64_t slow, quick;
    CHECK_EQ(rpcool_call_async(c, FN_SLOW, pg, sizeof(int), &co, NULL, NULL, &slow), 0);
    usleep(20000);
    co.seal_p = pg;
    co.seal_len = 4096;
    CHECK_EQ(rpcool_call_async(c, FN_SLOW, pg + 1, sizeof(int), &co, NULL, NULL, &quick), 0);
    CHECK_EQ(rpcool_wait(c, quick, NULL, NULL), 1);
    CHECKF(!writable(pg), "the page was unsealed while another sealed call still used it");
    CHECK_EQ(rpcool_wait(c, slow, NULL, NULL), 1);
    CHECK(writable(pg));
    /* a sealed call that times out */
    shmheap_stats st0, st1;
    CHECK_EQ(shmheap_check(rpcool_heap(c), &st0), 0);
    memset(&co, 0, sizeof co);
    co.safety = RPCOOL_SEAL;
    co.timeout_ms = 30;
    CHECK_EQ(rpcool_call_ex(c, FN_SLOWREPLY, pg, 64, &co, NULL, NULL), RPCOOL_E_TIMEOUT);
    CHECKF(!writable(pg), "the seal of a call that timed out went before the server answered");
    usleep(300000);
    CHECK(rpcool_progress(c) >= 0);
    CHECKF(writable(pg), "the seal of a timed-out call stayed after the server answered");
    CHECK_EQ(shmheap_check(rpcool_heap(c), &st1), 0);
    CHECKF(st1.live_blocks == st0.live_blocks, "the reply of a timed-out call was not freed (%zu live blocks, %zu before)",
           st1.live_blocks, st0.live_blocks);
    rpcool_free(c, pg);
    rpcool_disconnect(c);
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
    rpcool_server *s = serve(name, NULL, 2);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    g_c = c;
    g_waitsum = 0;
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 5;
    int r = 0;
    for (int i = 0; i < RPCOOL_MAX_INFLIGHT && !r; i++) r = rpcool_call_async(c, FN_SLOW, a, sizeof *a, NULL, NULL, NULL, &g_ids[i]);
    CHECK_EQ(r, 0);
    pthread_t th;
    pthread_create(&th, NULL, waiter, NULL);
    CHECK_EQ(rpcool_call(c, FN_SLOW, a, sizeof *a, NULL, NULL), 1);
    pthread_join(th, NULL);
    CHECK_EQ(g_waitsum, RPCOOL_MAX_INFLIGHT);
    rpcool_free(c, a);
    rpcool_disconnect(c);
    rpcool_server_close(s);
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
    rpcool_server *s = serve(name, NULL, 1);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0);
    if (!c) { rpcool_server_close(s); return; }
    double t0 = thread_cpu_ms();
    CHECK_EQ(slow_call(c, 300), 1);
    double used = thread_cpu_ms() - t0;
    CHECKF(used < 60, "the caller used %.1f ms of CPU waiting 300 ms", used);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* Servers in a child process, for the death tests. */
static pid_t g_srv, g_srv_kid;
static int start_child_server(const char *name, int fork_kid)
{
    int p[2];
    if (pipe(p)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        rpcool_server_opts so;
        memset(&so, 0, sizeof so);
        so.reap_ms = 20;
        rpcool_server *s = NULL;
        if (rpcool_server_open(name, &so, &s)) _exit(2);
        rpcool_server_add_handler(s, FN_SLOW, h_slow, NULL, 0);
        rpcool_server_start(s, 1);
        pid_t kid = 0;
        if (fork_kid && (kid = fork()) == 0) { pause(); _exit(0); } /* inherits the channel */
        if (write(p[1], &kid, sizeof kid) != (ssize_t)sizeof kid) _exit(3);
        for (;;) pause();
    }
    close(p[1]);
    g_srv = pid;
    g_srv_kid = 0;
    int ok = read(p[0], &g_srv_kid, sizeof g_srv_kid) == (ssize_t)sizeof g_srv_kid;
    close(p[0]);
    return ok ? 0 : -1;
}
static void kill_wait(pid_t p)
{
    if (p > 0) { kill(p, SIGKILL); waitpid(p, NULL, 0); }
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
    if (start_child_server(name, 0)) { CHECK(0); kill_wait(g_srv); return; }
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.peer_check_ms = 50;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (!c) { kill_wait(g_srv); return; }
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    *a = 5000;
    g_cb_calls = 0;
    CHECK_EQ(rpcool_call_async(c, FN_SLOW, a, sizeof *a, NULL, count_cb, NULL, NULL), 0);
    usleep(30000);
    CHECK_EQ(rpcool_progress(c), 0);
    kill_wait(g_srv);
    uint64_t t0 = rcp__now_ns();
    int r;
    while ((r = rpcool_progress(c)) == 0 && ms_since(t0) < 2000) usleep(5000);
    CHECK_EQ(r, RPCOOL_E_PEERDEAD);
    CHECKF(ms_since(t0) < 1000, "progress noticed the dead server after %.0f ms", ms_since(t0));
    CHECK_EQ(g_cb_calls, 0);
    rpcool_disconnect(c);
    char p[128];
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", name);
    unlink(p);
}

/* fork: "the child closes its inherited copies, so the parent's death is still seen". A server
   that forked dies: its clients see it. A client that forked dies: the server reaps it. */
static void g_fork_liveness(void)
{
    const char *name = t_uniq("gforks");
    if (start_child_server(name, 1)) { CHECK(0); kill_wait(g_srv_kid); kill_wait(g_srv); return; }
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.peer_check_ms = 50;
    o.timeout_ms = 2000;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0);
    if (c) CHECK_EQ(slow_call(c, 0), 1);
    kill_wait(g_srv);
    if (c) {
        uint64_t t0 = rcp__now_ns();
        int r = slow_call(c, 0);
        CHECKF(r == RPCOOL_E_PEERDEAD, "call after the server died, its forked child alive: %s", rpcool_strerror(r));
        CHECKF(ms_since(t0) < 1000, "took %.0f ms", ms_since(t0));
        rpcool_disconnect(c);
    }
    kill_wait(g_srv_kid);
    char p[128];
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", name);
    unlink(p);

    /* the client side */
    name = t_uniq("gforkc");
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.reap_ms = 20;
    rpcool_server *s = serve(name, &so, 1);
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
    kill_wait(cl);
    uint64_t t0 = rcp__now_ns();
    do { usleep(5000); rpcool_server_get_stats(s, &st); } while (!st.reaped && ms_since(t0) < 1500);
    CHECKF(st.reaped == 1 && st.conns == 0, "a dead client whose forked child lives was not reaped (%u conns)", st.conns);
    kill_wait(kid);
    rpcool_server_close(s);
}

/* A client the server drops (here: it keeps its heap's mutex taken while a handler needs it) is
   told: its next call fails with RPCOOL_E_DROPPED within peer_check_ms instead of waiting for
   its timeout, its close returns at once, and the channel serves other clients as before. The
   client runs in a child: in the server's process it would share the server's heap handle. */
static int dropped_child(void *arg)
{
    const char *name = (const char *)arg;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.peer_check_ms = 50;
    rpcool_conn *c = NULL;
    if (rpcool_connect(name, &o, &c)) return 100;
    int bad = 0, r;
    if (rpcool_call(c, FN_BIGREPLY, NULL, 0, NULL, NULL) != 4) bad |= 1;
    if (shmheap__lock(rpcool_heap(c))) bad |= 1; /* held by this thread: alive, never let go */
    r = rpcool_call(c, FN_BIGREPLY, NULL, 0, NULL, NULL); /* the handler waits 1 s, then NULL */
    if (r != SHMHEAP_E_FULL && r != RPCOOL_E_DROPPED) {
        bad |= 2;
        fprintf(stderr, "# call whose handler could not take the mutex: %s\n", rpcool_strerror(r));
    }
    shmheap__unlock(rpcool_heap(c)); /* too late: the connection is dropped */
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 3000;
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (!a) return 101;
    *a = 0;
    uint64_t t0 = rcp__now_ns();
    r = rpcool_call_ex(c, FN_SLOW, a, sizeof *a, &co, NULL, NULL);
    double took = ms_since(t0);
    if (r != RPCOOL_E_DROPPED) { bad |= 4; fprintf(stderr, "# call after the drop: %s after %.0f ms\n", rpcool_strerror(r), took); }
    if (took > 1000) { bad |= 8; fprintf(stderr, "# the drop was noticed after %.0f ms\n", took); }
    if ((r = rpcool_call_ex(c, FN_SLOW, a, sizeof *a, &co, NULL, NULL)) != RPCOOL_E_DROPPED) bad |= 16; /* sticky */
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
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.reap_ms = 20;
    rpcool_server *s = serve(name, &so, 1);
    if (!s) return;
    int st = in_child(dropped_child, name);
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
        CHECK_EQ(slow_call(c2, 0), 1);
        CHECK_EQ(rpcool_disconnect(c2), 0);
    }
    rpcool_server_close(s);
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
        rpcool_server_add_handler(srv, FN_SLOW, h_slow, NULL, 0);
        rpcool_server_start(srv, 1);
        rpcool_conn *c = NULL;
        CHECK_EQ(rpcool_connect(nm, NULL, &c), 0);
        if (c) {
            CHECK_EQ(slow_call(c, 0), 1);
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

static const char *only; /* argv[1]: run only the tests whose name contains it */
#define RUN(fn) do { if (!only || strstr(#fn, only)) TEST(fn); } while (0)

int main(int argc, char **argv)
{
    only = argc > 1 ? argv[1] : NULL;
    signal(SIGPIPE, SIG_IGN);
    devzero = open("/dev/zero", O_RDONLY);
    RUN(g_static_build);
    RUN(g_create_options);
    RUN(g_window_pod_unlink);
    RUN(g_header_decides);
    RUN(g_lock_timeout);
    RUN(g_lock_dead_other_pidns);
    RUN(g_opens);
    RUN(g_flush_and_cap);
    RUN(g_full_returns_caches);
    RUN(g_stats_and_sizes);
    RUN(g_name_limits);
    RUN(g_pkey_notsup);
    RUN(g_strerror);
    RUN(g_connect_timeout_and_mode);
    RUN(g_max_conns_and_pod);
    RUN(g_stop_and_close_from_handler);
    RUN(g_safety_union);
    RUN(g_ctx_helpers);
    RUN(g_copy_max);
    RUN(g_seals_in_flight);
    RUN(g_sync_waits_for_slot);
    RUN(g_client_sleeps);
    RUN(g_progress_server_dead);
    RUN(g_fork_liveness);
    RUN(g_builders_and_names);
    RUN(g_dropped_client);
    close(devzero);
    return T_DONE();
}
