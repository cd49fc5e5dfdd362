// TSAN
/* shmheap.h's heaps shared between hosts, their holders named by leases (impl/podlease.h): the
 * "hosts" are process trees in their own mount, pid and IPC namespaces (each with its own
 * /dev/shm) that share only one regular file, the device, holding a lease table, a control
 * block and a heap (shmheap__create_mem / _open_mem at one address in every host). A holder
 * SIGKILLed inside the heap's mutex on host A is recovered by host B within the lease bound
 * (shmheap_check clean, exact block counts, A's thread cache given back); a holder SIGSTOPped
 * inside the mutex past its lease is recovered from B and, SIGCONTed, is fenced (-ESTALE; its
 * unlock frees nothing) while the heap stays consistent; the thread cache of a process killed
 * holding no mutex goes back once its lease lapsed; workers on both hosts allocate and free at
 * once, with exact counts. As root (skipped otherwise). */
#define SHMHEAP__TEST_HOOK(h, point) t_hook(point)
static __attribute__((unused)) void t_hook(const char *point);
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include "pod_hosts.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>

#define MB ((size_t)1 << 20)
#define DEV_SIZE (40 * MB)
#define LEASE_LEN (64 * 1024)  /* [0, 64 KiB): the lease table */
#define CTL_OFF (64 * 1024)    /* then the control block */
#define HEAP_OFF (2 * MB)      /* the heap: [2 MiB, 34 MiB) */
#define HEAP_SIZE (32 * MB)    /* four workers' blocks, caches and holes (8 MiB ran out) */
#define BOUND_MS 300u          /* the lease bound the device is formatted with */
#define SLACK_MS 700u          /* scheduling slack on a loaded machine, past the bound */
#define BIG (200 * 1000)       /* a large block: four spans, taken under the mutex */
#define NWORK 2                /* workers per host in the allocation test */
#define KEEP 100               /* blocks each worker leaves allocated */
#define ROUNDS 4000

struct ctl {
    uint32_t stage, failed_line, ready;
    uint32_t a_live;             /* blocks host A's worker left allocated */
    uint32_t worker_status;      /* host A's worker: how it ended */
    int32_t check_rc;            /* host B's shmheap_check after the death */
    uint64_t recover_ms;         /* how long host B waited for the dead or stopped holder */
    uint64_t recoveries, live, cached, large, big_ok, owner_kept;
    int32_t w_malloc_errno, w_free_rc, w_small_errno, w_big_null; /* the resumed worker */
    uint32_t done[2 * NWORK], bad[2 * NWORK];
};

static char *dev_at;        /* where every host maps the device */
static char dev_path[96];
static volatile int hook_kill, hook_stop;
static struct ctl *g_ctl;

#define CTL(dev) ((struct ctl *)((dev) + CTL_OFF))
#define HFAIL(x)                                                                                 \
    do {                                                                                         \
        if (!(x)) {                                                                              \
            uint32_t z = 0;                                                                      \
            rcp__cas(&ctl->failed_line, &z, (uint32_t)__LINE__);                                \
            rcp__store(&ctl->stage, 99u);                                                        \
        }                                                                                        \
    } while (0)

/* The test's fault points inside the library: die or stop while holding the heap's mutex. */
static void t_hook(const char *point)
{
    if (hook_kill && !strcmp(point, "lalloc-step")) kill(getpid(), SIGKILL);
    if (hook_stop && !strcmp(point, "lalloc-locked")) {
        hook_stop = 0;
        raise(SIGSTOP); /* holding the mutex */
    }
}

static uint64_t ms_since(uint64_t t0) { return (rcp__now_ns() - t0) / 1000000u; }

static int stage_wait(struct ctl *ctl, uint32_t want)
{
    uint64_t t0 = rcp__now_ns();
    uint32_t s;
    while ((s = rcp__load(&ctl->stage)) < want) {
        if (ms_since(t0) > 60000) return -1;
        usleep(1000);
    }
    return s == 99u && want != 99u ? -1 : 0;
}

/* The device file mapped at dev_at. */
static int dev_map(void)
{
    int fd = open(dev_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    void *m = mmap(dev_at, DEV_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                   fd, 0);
    close(fd);
    return m == (void *)dev_at ? 0 : -1;
}

/* A process of a host (whose init mapped the device at dev_at): its lease taken and renewed by
   a thread, the heap opened with it. */
struct host_proc { char *dev; struct rcp__lease l; shmheap *h; };

static int join(struct host_proc *p, const char *host)
{
    p->dev = dev_at;
    if (rcp__lease_attach(&p->l, p->dev, LEASE_LEN, NULL)) return __LINE__;
    if (rcp__lease_take(&p->l, host) < 0 || rcp__lease_start(&p->l)) return __LINE__;
    shmheap_opts o = {.lock_timeout_ms = 30000}; /* a hang is a failure, not a stuck test */
    if (shmheap__open_mem(p->dev + HEAP_OFF, HEAP_SIZE, &p->l, &o, &p->h)) return __LINE__;
    return 0;
}

static void leave(struct host_proc *p)
{
    if (p->h) shmheap_close(p->h);
    rcp__lease_detach(&p->l);
}

/* A "host" (tests/pod_hosts.h) whose init maps the device itself, then runs fn. */
static int (*host_fn)(void);
static int host_main(void *arg)
{
    (void)arg;
    munmap(dev_at, DEV_SIZE);
    return dev_map() ? 80 : host_fn();
}

static pid_t spawn_host(int (*fn)(void))
{
    host_fn = fn; /* the fork copies it */
    return host_spawn(host_main, NULL);
}

/* A new device file: lease table formatted with BOUND_MS, heap created; mapped at dev_at in
   this process (the test's), which takes no lease. */
static char *dev_setup(void)
{
    static int n;
    snprintf(dev_path, sizeof dev_path, "/tmp/%s-%d", t_uniq("leasedev"), n++);
    int fd = open(dev_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, (off_t)DEV_SIZE)) { close(fd); return NULL; }
    if (!dev_at) { /* a free 2 MiB aligned range, the same in every host (all fork from us) */
        char *r = (char *)mmap(NULL, DEV_SIZE + 2 * MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
        if (r == MAP_FAILED) { close(fd); return NULL; }
        munmap(r, DEV_SIZE + 2 * MB);
        dev_at = (char *)(((uintptr_t)r + 2 * MB - 1) & ~(uintptr_t)(2 * MB - 1));
    }
    close(fd);
    if (dev_map()) return NULL;
    struct rcp__lease l;
    struct rcp__lease_opts lo = {.nslots = 16, .bound_ms = BOUND_MS};
    shmheap *h;
    if (rcp__lease_attach(&l, dev_at, LEASE_LEN, &lo) ||
        shmheap__create_mem(dev_at + HEAP_OFF, HEAP_SIZE, NULL, NULL, &h)) {
        munmap(dev_at, DEV_SIZE);
        return NULL;
    }
    rcp__lease_detach(&l);
    shmheap_close(h);
    g_ctl = CTL(dev_at);
    return dev_at;
}

static void dev_done(char *dev)
{
    munmap(dev, DEV_SIZE);
    unlink(dev_path);
}

/* Runs host functions a and b to their end (at most two minutes); their exit statuses. */
static void run_hosts(int (*a)(void), int (*b)(void), int *sa, int *sb)
{
    pid_t pa = spawn_host(a), pb = spawn_host(b);
    int done = 0;
    uint64_t t0 = rcp__now_ns();
    *sa = *sb = -1;
    while (done < 2 && ms_since(t0) < 120000) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == pa) *sa = st, done++;
        else if (w == pb) *sb = st, done++;
        else usleep(10000);
    }
    if (*sa == -1) t_kill_wait(pa);
    if (*sb == -1) t_kill_wait(pb);
}

/* ---- a holder killed inside the mutex ----------------------------------------------------- */

static int kill_worker(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostA");
    if (line) return line;
    void *v[72];
    for (int i = 0; i < 72; i++) {
        v[i] = shmheap_malloc(p.h, i < 64 ? 100 : 1000);
        if (!v[i]) return __LINE__;
    }
    for (int i = 0; i < 20; i++) /* 8 stay in this thread's cache, 12 go back */
        if (shmheap_free(p.h, v[i])) return __LINE__;
    rcp__store(&ctl->a_live, 52u);
    hook_kill = 1;
    shmheap_malloc(p.h, BIG); /* dies inside, holding the mutex, its step half done */
    return __LINE__;
}

static int kill_host_a(void)
{
    struct ctl *ctl = g_ctl;
    pid_t w = fork(); /* not the namespace's init, which ignores its own signals */
    if (w == 0) _exit(kill_worker());
    int st = 0;
    waitpid(w, &st, 0);
    rcp__store(&ctl->worker_status, (uint32_t)st);
    HFAIL(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    rcp__store(&ctl->stage, 2u);
    return 0;
}

static int kill_host_b(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostB");
    HFAIL(line == 0);
    if (line) return 1;
    if (stage_wait(ctl, 2) == 0) {
        shmheap_stats st;
        uint64_t t0 = rcp__now_ns();
        ctl->check_rc = shmheap_check(p.h, &st); /* waits for the dead holder's lease */
        ctl->recover_ms = ms_since(t0);
        ctl->recoveries = st.recoveries;
        ctl->live = st.live_blocks;
        ctl->cached = st.cached_blocks;
        ctl->large = st.large_spans;
        void *b = shmheap_malloc(p.h, BIG);
        ctl->big_ok = b != NULL && shmheap_free(p.h, b) == 0 && shmheap_check(p.h, NULL) == 0;
    }
    leave(&p);
    return 0;
}

static void lease_kill_in_mutex(void)
{
    char *dev = dev_setup();
    CHECK(dev);
    if (!dev) return;
    struct ctl *ctl = CTL(dev);
    int sa, sb;
    run_hosts(kill_host_a, kill_host_b, &sa, &sb);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %x", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %x", sb);
    CHECKF(ctl->failed_line == 0, "a host failed at line %u", ctl->failed_line);
    CHECKF(WIFSIGNALED(ctl->worker_status), "worker status %x", ctl->worker_status);
    CHECK_EQ(ctl->check_rc, 0);
    CHECK_EQ(ctl->recoveries, 1);
    CHECK_EQ(ctl->live, ctl->a_live);   /* exactly what the dead worker left allocated */
    CHECK_EQ(ctl->cached, 0);           /* its thread cache went back */
    CHECK_EQ(ctl->large, 0);            /* its half-made large block was undone */
    CHECK(ctl->big_ok);
    CHECKF(ctl->recover_ms <= BOUND_MS + SLACK_MS, "recovered after %llu ms (bound %u ms)",
           (unsigned long long)ctl->recover_ms, BOUND_MS);
    printf("# a holder killed inside the mutex on host A: recovered by host B after %llu ms "
           "(lease bound %u ms)\n", (unsigned long long)ctl->recover_ms, BOUND_MS);
    /* from outside both hosts, without a lease: consistent */
    shmheap *h = NULL;
    shmheap_stats st;
    CHECK_EQ(shmheap__open_mem(dev + HEAP_OFF, HEAP_SIZE, NULL, NULL, &h), 0);
    if (h) {
        CHECK_EQ(shmheap_check(h, &st), 0);
        CHECK_EQ(st.live_blocks, ctl->a_live);
        shmheap_close(h);
    }
    dev_done(dev);
}

/* ---- a holder stopped inside the mutex past its lease ------------------------------------- */

static int stop_worker(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostA");
    if (line) return line;
    void *v[30];
    for (int i = 0; i < 30; i++)
        if (!(v[i] = shmheap_malloc(p.h, 100))) return __LINE__;
    for (int i = 0; i < 10; i++)
        if (shmheap_free(p.h, v[i])) return __LINE__;
    rcp__store(&ctl->a_live, 20u);
    hook_stop = 1;
    errno = 0;
    void *big = shmheap_malloc(p.h, BIG); /* stops holding the mutex; resumes fenced */
    ctl->w_big_null = big == NULL;
    ctl->w_malloc_errno = errno;
    ctl->w_free_rc = shmheap_free(p.h, v[20]);
    errno = 0;
    ctl->w_small_errno = shmheap_malloc(p.h, 64) ? 0 : errno;
    shmheap__unlock(p.h); /* as if it still held the mutex: frees nothing of B's */
    leave(&p);
    return 0;
}

static int stop_host_a(void)
{
    struct ctl *ctl = g_ctl;
    pid_t w = fork();
    if (w == 0) _exit(stop_worker());
    int st = 0;
    waitpid(w, &st, WUNTRACED);
    HFAIL(WIFSTOPPED(st));
    rcp__store(&ctl->stage, 2u);
    stage_wait(ctl, 3); /* host B recovered it and holds the mutex */
    kill(w, SIGCONT);
    waitpid(w, &st, 0);
    rcp__store(&ctl->worker_status, (uint32_t)st);
    HFAIL(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (rcp__load(&ctl->stage) != 99u) rcp__store(&ctl->stage, 4u);
    return 0;
}

static int stop_host_b(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostB");
    HFAIL(line == 0);
    if (line) return 1;
    if (stage_wait(ctl, 2) == 0) {
        uint64_t t0 = rcp__now_ns();
        void *b = shmheap_malloc(p.h, BIG); /* waits for the stopped holder's lease */
        ctl->recover_ms = ms_since(t0);
        HFAIL(b != NULL);
        HFAIL(shmheap__lock(p.h) == 0); /* held while the stopped holder resumes */
        uint64_t mine = rcp__load(&p.h->hdr->lock.m.owner);
        rcp__store(&ctl->stage, 3u);
        stage_wait(ctl, 4);
        ctl->owner_kept = rcp__load(&p.h->hdr->lock.m.owner) == mine;
        shmheap__unlock(p.h);
        shmheap_stats st;
        ctl->check_rc = shmheap_check(p.h, &st);
        ctl->recoveries = st.recoveries;
        ctl->live = st.live_blocks;
        ctl->cached = st.cached_blocks;
        ctl->large = st.large_spans;
        ctl->big_ok = b && shmheap_free(p.h, b) == 0 && shmheap_check(p.h, NULL) == 0;
    }
    leave(&p);
    return 0;
}

static void lease_stop_fenced(void)
{
    char *dev = dev_setup();
    CHECK(dev);
    if (!dev) return;
    struct ctl *ctl = CTL(dev);
    int sa, sb;
    run_hosts(stop_host_a, stop_host_b, &sa, &sb);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %x", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %x", sb);
    CHECKF(ctl->failed_line == 0, "a host failed at line %u", ctl->failed_line);
    CHECK(ctl->w_big_null);
    CHECK_EQ(ctl->w_malloc_errno, ESTALE);
    CHECK_EQ(ctl->w_free_rc, -ESTALE);
    CHECK_EQ(ctl->w_small_errno, ESTALE);
    CHECK(ctl->owner_kept); /* the fenced holder's unlock freed nothing */
    CHECK_EQ(ctl->check_rc, 0);
    CHECK_EQ(ctl->recoveries, 1);
    CHECK_EQ(ctl->live, ctl->a_live + 1); /* the worker's blocks and B's large one */
    CHECK_EQ(ctl->large, 4);
    CHECK_EQ(ctl->cached, 0); /* the stopped worker's cache went back */
    CHECK(ctl->big_ok);
    CHECKF(ctl->recover_ms <= BOUND_MS + SLACK_MS, "recovered after %llu ms (bound %u ms)",
           (unsigned long long)ctl->recover_ms, BOUND_MS);
    printf("# a holder stopped inside the mutex on host A: recovered by host B after %llu ms "
           "(lease bound %u ms), fenced when resumed\n", (unsigned long long)ctl->recover_ms,
           BOUND_MS);
    dev_done(dev);
}

/* ---- a process that dies holding no mutex: its cache goes back by its lapsed lease -------- */

static int cache_worker(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostA");
    if (line) return line;
    void *v[40];
    for (int i = 0; i < 40; i++)
        if (!(v[i] = shmheap_malloc(p.h, 200))) return __LINE__;
    for (int i = 0; i < 8; i++) /* all 8 stay in this thread's cache */
        if (shmheap_free(p.h, v[i])) return __LINE__;
    rcp__store(&ctl->a_live, 32u);
    rcp__store(&ctl->stage, 1u);
    for (;;) pause(); /* killed here, holding no mutex */
}

static int cache_host_a(void)
{
    struct ctl *ctl = g_ctl;
    pid_t w = fork();
    if (w == 0) _exit(cache_worker());
    stage_wait(ctl, 1);
    kill(w, SIGKILL);
    int st = 0;
    waitpid(w, &st, 0);
    rcp__store(&ctl->worker_status, (uint32_t)st);
    if (rcp__load(&ctl->stage) != 99u) rcp__store(&ctl->stage, 2u);
    return 0;
}

static int cache_host_b(void)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, "hostB");
    HFAIL(line == 0);
    if (line) return 1;
    if (stage_wait(ctl, 2) == 0) {
        shmheap_stats st;
        HFAIL(shmheap_check(p.h, &st) == 0); /* the first look: the lease is not lapsed yet */
        ctl->cached = st.cached_blocks;
        uint64_t t0 = rcp__now_ns();
        do {
            usleep(20000);
            HFAIL(shmheap_check(p.h, &st) == 0);
        } while (st.cached_blocks && ms_since(t0) < BOUND_MS + SLACK_MS);
        ctl->recover_ms = ms_since(t0);
        ctl->live = st.live_blocks;
        ctl->recoveries = st.cached_blocks; /* what is left in caches: 0 */
    }
    leave(&p);
    return 0;
}

static void lease_dead_cache_given_back(void)
{
    char *dev = dev_setup();
    CHECK(dev);
    if (!dev) return;
    struct ctl *ctl = CTL(dev);
    int sa, sb;
    run_hosts(cache_host_a, cache_host_b, &sa, &sb);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %x", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %x", sb);
    CHECKF(ctl->failed_line == 0, "a host failed at line %u", ctl->failed_line);
    CHECK_EQ(ctl->cached, 8);     /* seen before the lease lapsed: still the dead one's */
    CHECK_EQ(ctl->recoveries, 0); /* then given back */
    CHECK_EQ(ctl->live, ctl->a_live);
    CHECKF(ctl->recover_ms <= BOUND_MS + SLACK_MS, "given back after %llu ms (bound %u ms)",
           (unsigned long long)ctl->recover_ms, BOUND_MS);
    dev_done(dev);
}

/* ---- many allocations from both hosts ----------------------------------------------------- */

/* Worker who (0 .. 2 * NWORK - 1): ROUNDS allocations and frees of mixed sizes (some large,
   under the mutex), every block stamped and checked before it is freed; KEEP left at the end. */
static int alloc_worker(int who)
{
    struct host_proc p;
    memset(&p, 0, sizeof p);
    struct ctl *ctl = g_ctl;
    int line = join(&p, who < NWORK ? "hostA" : "hostB");
    if (line) return line;
    enum { LIVE = 128 };
    uint64_t *live[LIVE];
    size_t n = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(who + 1), bad = 0, nulls = 0;
    rcp__fetch_add(&ctl->ready, 1u);
    while (rcp__load(&ctl->ready) < 2 * NWORK) usleep(100);
    for (unsigned r = 0; r < ROUNDS; r++) {
        if (n == LIVE || (n > KEEP && t_rng(&rng) % 3 == 0)) {
            size_t k = (size_t)(t_rng(&rng) % n);
            uint64_t *b = live[k];
            bad += b[0] != (uint64_t)who || b[1] != (uint64_t)(uintptr_t)b;
            if (shmheap_free(p.h, b)) bad++;
            live[k] = live[--n];
            continue;
        }
        uint64_t x = t_rng(&rng);
        size_t sz = x % 40 == 0 ? 40000 + x % 100000 : 16 + x % 3000;
        uint64_t *b = (uint64_t *)shmheap_malloc(p.h, sz);
        if (!b) {
            bad++;
            nulls++;
            continue;
        }
        b[0] = (uint64_t)who;
        b[1] = (uint64_t)(uintptr_t)b;
        live[n++] = b;
    }
    while (n > KEEP) {
        uint64_t *b = live[--n];
        bad += b[0] != (uint64_t)who || b[1] != (uint64_t)(uintptr_t)b;
        if (shmheap_free(p.h, b)) bad++;
    }
    for (size_t k = 0; k < n; k++) bad += live[k][0] != (uint64_t)who;
    if (bad) /* why, for the log */
        printf("# worker %d: %llu bad, %llu of them allocations that failed; lease %s\n", who,
               (unsigned long long)bad, (unsigned long long)nulls,
               rcp__lease_is_fenced(&p.l) ? "fenced" : "held");
    rcp__store(&ctl->done[who], (uint32_t)n);
    rcp__store(&ctl->bad[who], (uint32_t)bad);
    leave(&p); /* its caches go back */
    return 0;
}

static int alloc_host(int first)
{
    pid_t w[NWORK];
    int rc = 0;
    for (int i = 0; i < NWORK; i++)
        if ((w[i] = fork()) == 0) _exit(alloc_worker(first + i));
    for (int i = 0; i < NWORK; i++) {
        int st = 0;
        waitpid(w[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = 1;
    }
    return rc;
}
static int alloc_host_a(void) { return alloc_host(0); }
static int alloc_host_b(void) { return alloc_host(NWORK); }

static void lease_many_allocs_both_hosts(void)
{
    char *dev = dev_setup();
    CHECK(dev);
    if (!dev) return;
    struct ctl *ctl = CTL(dev);
    int sa, sb;
    run_hosts(alloc_host_a, alloc_host_b, &sa, &sb);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %x", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %x", sb);
    size_t kept = 0;
    for (int i = 0; i < 2 * NWORK; i++) {
        CHECK_EQ(ctl->done[i], KEEP);
        CHECK_EQ(ctl->bad[i], 0);
        kept += ctl->done[i];
    }
    shmheap *h = NULL;
    shmheap_stats st;
    CHECK_EQ(shmheap__open_mem(dev + HEAP_OFF, HEAP_SIZE, NULL, NULL, &h), 0);
    if (h) {
        CHECK_EQ(shmheap_check(h, &st), 0);
        CHECK_EQ(st.live_blocks, kept);
        CHECK_EQ(st.cached_blocks, 0);
        CHECK_EQ(st.recoveries, 0);
        shmheap_close(h);
    }
    dev_done(dev);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *why = hosts_skip();
    if (!t_only || strstr("lease_kill_in_mutex", t_only))
        TEST_UNLESS(why, lease_kill_in_mutex);
    if (!t_only || strstr("lease_stop_fenced", t_only))
        TEST_UNLESS(why, lease_stop_fenced);
    if (!t_only || strstr("lease_dead_cache_given_back", t_only))
        TEST_UNLESS(why, lease_dead_cache_given_back);
    if (!t_only || strstr("lease_many_allocs_both_hosts", t_only))
        TEST_UNLESS(why, lease_many_allocs_both_hosts);
    return T_DONE();
}
