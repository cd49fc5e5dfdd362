/* alock.h's local cohort across the hosts of a pod: a table in a heap in a device (a file in
   /tmp, mapped at one address), whose heap carries each process's lease (impl/podlease.h), so
   that the liveness of a local user is its lease, not a byte lock. "Hosts" are process trees in
   their own mount, pid and IPC namespaces (as root; skipped otherwise), each with its own tmpfs
   on /dev/shm, sharing only the device file: mutual exclusion with plain counters and a checker
   that counts (processes of both hosts), a holder SIGKILLed in its critical section on host A
   taken over by a waiter on host B within the lease's bound (ALOCK_OWNERDEAD, and not sooner
   than a lease can lapse), a queued waiter killed (passed over), a holder with no waiter killed
   (alock_recover from the other host), a holder SIGSTOPped past its lease then resumed (fenced:
   every call on its handle ALOCK_E_FENCED, it writes nothing, the others went on, counts exact,
   it comes back with a new lease). In one process: the fenced handle's codes, a table that
   needs a lease, no liveness file. */
#define ALOCK_NO_RDMA 1
#define ALOCK_CHECK_RMW 1
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "t.h"
#include "pod_hosts.h"
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>

#define MB ((size_t)1 << 20)
#define DEV_SIZE (16 * MB)
#define LEASE_LEN (64 * 1024) /* the lease table, at the device's start */
#define CTL_OFF (1 * MB)      /* the test's control block */
#define HEAP_OFF (2 * MB)     /* the heap, with the lock table in it */
#define HEAP_LEN (8 * MB)
/* the leases' bound: the default (a much shorter one fences processes whose renewals a loaded
   machine delays, which is not what these tests are about) */
#define BOUND_MS RCP__LEASE_DEFAULT_BOUND_MS
#define SLACK_MS 1000u        /* scheduling slack on a loaded machine, past the bound */
#define CHECK_MS 5u
#define NL 4                  /* locks */
#define NW 4                  /* workers, two per host */
#define ROUNDS 3000

struct ctl {
    uint32_t stage, failed_line, stop, go_on;
    uint32_t a1_in, b1_in, a1_queued, b2_queued, killed;
    uint64_t a1_desc, b1_desc, tail_addr;  /* addresses in the device: alike in every host */
    uint64_t counter[NL];                  /* plain, each under lock i */
    uint64_t inside[NL], violations;       /* atomic: holders inside now, entries with another */
    uint64_t done[NW + 1];                 /* critical sections completed, per worker */
    uint64_t a1_lslot;                     /* A1's lease slot */
    uint64_t ownerdead, t_kill_ns, t_took_ns, t_unlock_ns, stop_progress;
    int32_t rc_took, rc_check, rc_unlock, rc_lock, rc_try, rc_recover, rc_close, rc_rejoin;
    int32_t shm_entries[2], a1_acts;
    int32_t wline[NW + 1];                 /* the line a worker failed at */
    int32_t wrc[NW + 1];                   /* and the code it failed with */
};

static char dev_path[96];
static char *dev_at;     /* where every host maps the device */
static struct ctl *C;    /* in a host: the device's control block */

#define HFAIL(x) do { if (!(x)) { uint32_t z_ = 0;                                               \
    rcp__cas(&C->failed_line, &z_, (uint32_t)__LINE__); } } while (0)

static uint64_t ms_since(uint64_t t0) { return (rcp__now_ns() - t0) / 1000000u; }

/* Wait until *w >= want (30 s at most): 0, or -1 after a timeout or another failure. */
static int wait_for(uint32_t *w, uint32_t want)
{
    uint64_t t0 = rcp__now_ns();
    while (rcp__load(w) < want) {
        if (rcp__load(&C->failed_line) || ms_since(t0) > 30000) return -1;
        usleep(1000);
    }
    return 0;
}

/* A free 2 MiB aligned range of len bytes in this process (nothing left mapped). */
static char *free_range(size_t len)
{
    char *r = (char *)mmap(NULL, len + 2 * MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return NULL;
    munmap(r, len + 2 * MB);
    return (char *)(((uintptr_t)r + 2 * MB - 1) & ~(uintptr_t)(2 * MB - 1));
}

/* The device file, mapped whole and shared at dev_at (a host's one mapping). */
static int dev_map(void)
{
    int fd = open(dev_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    void *p = mmap(dev_at, DEV_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                   fd, 0);
    close(fd);
    if (p != (void *)dev_at) return -1;
    C = (struct ctl *)(void *)(dev_at + CTL_OFF);
    return 0;
}

/* A process of a host: its lease (renewed by a thread), the heap and the table. */
struct pod {
    struct rcp__lease l;
    shmheap *h;
    alock_table *t;
};

static int pod_open(struct pod *p, const char *host)
{
    struct rcp__lease_opts lo = {.nslots = 32, .bound_ms = BOUND_MS};
    alock_table_opts to = {.check_ms = CHECK_MS};
    if (rcp__lease_attach(&p->l, dev_at, LEASE_LEN, &lo)) return __LINE__;
    if (rcp__lease_take(&p->l, host) < 0 || rcp__lease_start(&p->l)) return __LINE__;
    if (shmheap__open_mem(dev_at + HEAP_OFF, HEAP_LEN, &p->l, NULL, &p->h)) return __LINE__;
    if (alock_table_open(p->h, "t", &to, &p->t)) return __LINE__;
    return 0;
}

static void pod_close(struct pod *p)
{
    alock_table_close(p->t);
    shmheap_close(p->h);
    rcp__lease_detach(&p->l);
}

/* Host A's first act: the lease table, the heap and the lock table, made in the device by a
   process with a lease, which then lets everything go (the hosts' processes open them). */
static int pod_make(void)
{
    struct rcp__lease l;
    struct rcp__lease_opts lo = {.nslots = 32, .bound_ms = BOUND_MS};
    alock_table_opts to = {.nlocks = NL, .slots = 16, .check_ms = CHECK_MS};
    shmheap *h;
    alock_table *t;
    if (rcp__lease_attach(&l, dev_at, LEASE_LEN, &lo) || rcp__lease_take(&l, "hostA") < 0)
        return __LINE__;
    if (shmheap__create_mem(dev_at + HEAP_OFF, HEAP_LEN, &l, NULL, &h)) return __LINE__;
    if (alock_table_create(h, "t", &to, &t)) return __LINE__;
    rcp__store(&C->tail_addr, (uint64_t)(uintptr_t)&t->lines[0].l_tail);
    if (alock_table_close(t) || shmheap_close(h)) return __LINE__;
    rcp__lease_detach(&l);
    return 0;
}

/* Entries in this host's /dev/shm (its own tmpfs: the pod path leaves none there). */
static int shm_entries(void)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* One critical section on lock i by worker w: the checker, then a plain read-modify-write. */
static void section(uint32_t i, int w)
{
    if (rcp__fetch_add(&C->inside[i], (uint64_t)1)) rcp__fetch_add(&C->violations, (uint64_t)1);
    uint64_t v = *(volatile uint64_t *)&C->counter[i];
    if ((v & 15) == 0) sched_yield(); /* now and then, let the others run inside */
    *(volatile uint64_t *)&C->counter[i] = v + 1;
    C->done[w]++;
    rcp__fetch_add(&C->inside[i], (uint64_t)-1);
}

/* Fork worker fn(w) of this host (its pid namespace); its exit status is the failing line. */
static pid_t worker(int (*fn)(int), int w)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        int line = fn(w);
        if (line) rcp__store(&C->wline[w], (int32_t)line);
        _exit(line ? 1 : 0);
    }
    return p;
}

/* Wait for this host's workers: 0 if every one exited 0. */
static int reap(pid_t *ws, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st = -1;
        if (ws[i] <= 0) continue;
        waitpid(ws[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            HFAIL(0);
            bad = 1;
        }
    }
    return bad;
}

/* A "host" (tests/pod_hosts.h) whose init maps the device, then runs fn. */
static int (*host_fn)(void);
static int host_main(void *arg)
{
    (void)arg;
    return dev_map() ? 79 : host_fn();
}

static pid_t spawn_host(int (*fn)(void))
{
    host_fn = fn; /* the fork copies it */
    return host_spawn(host_main, NULL);
}

/* Run hosts A and B on a new device file; the control block as the test reads it in *out. */
static void run_hosts(int (*fa)(void), int (*fb)(void), struct ctl *out)
{
    snprintf(dev_path, sizeof dev_path, "/tmp/%s.dev", t_uniq("alockpod"));
    int fd = open(dev_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)DEV_SIZE) == 0);
    if (fd >= 0) close(fd);
    dev_at = free_range(DEV_SIZE);
    CHECK(dev_at != NULL);
    memset(out, 0, sizeof *out);
    if (!dev_at || fd < 0) return;
    pid_t a = spawn_host(fa), b = spawn_host(fb);
    int sa = -1, sb = -1, done = 0;
    uint64_t t0 = rcp__now_ns();
    while (done < 2 && ms_since(t0) < 120000) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == a) sa = st, done++;
        else if (w == b) sb = st, done++;
        else usleep(10000);
    }
    if (done < 2) {
        t_kill_wait(sa == -1 ? a : -1);
        t_kill_wait(sb == -1 ? b : -1);
    }
    fd = open(dev_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && pread(fd, out, sizeof *out, (off_t)CTL_OFF) != (ssize_t)sizeof *out)
        memset(out, 0, sizeof *out);
    if (fd >= 0) close(fd);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %d", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %d", sb);
    CHECKF(out->failed_line == 0, "a host failed at line %u", out->failed_line);
    for (int w = 0; w <= NW; w++)
        CHECKF(out->wline[w] == 0, "worker %d failed at line %d (%d)", w, out->wline[w],
               out->wrc[w]);
    CHECK_EQ(out->shm_entries[0], 0); /* no liveness file, nothing in either host's /dev/shm */
    CHECK_EQ(out->shm_entries[1], 0);
    unlink(dev_path);
}

/* ---- mutual exclusion across the hosts ----------------------------------------------------- */

static int mutex_worker(int w)
{
    struct pod p;
    char host[8] = {'h', 'o', 's', 't', w < 2 ? 'A' : 'B', 0};
    int line = pod_open(&p, host);
    if (line) return line;
    if (wait_for(&C->go_on, 1)) return __LINE__;
    for (int r = 0; r < ROUNDS; r++) {
        uint32_t i = (uint32_t)(r + w) % NL;
        alock_hold hold;
        int rc = alock_lock(p.t, i, &hold);
        if (rc) return C->wrc[w] = rc, __LINE__;
        section(i, w);
        if ((rc = alock_unlock(&hold))) return C->wrc[w] = rc, __LINE__;
    }
    pod_close(&p);
    return 0;
}

static int mutex_a(void)
{
    int line = pod_make();
    HFAIL(line == 0);
    rcp__store(&C->stage, 1u);
    pid_t ws[2] = {worker(mutex_worker, 0), worker(mutex_worker, 1)};
    int bad = reap(ws, 2);
    C->shm_entries[0] = shm_entries();
    return bad;
}

static int mutex_b(void)
{
    if (wait_for(&C->stage, 1)) return 1;
    pid_t ws[2] = {worker(mutex_worker, 2), worker(mutex_worker, 3)};
    rcp__store(&C->go_on, 1u);
    int bad = reap(ws, 2);
    C->shm_entries[1] = shm_entries();
    return bad;
}

static void hosts_mutex(void)
{
    struct ctl c;
    run_hosts(mutex_a, mutex_b, &c);
    uint64_t total = 0, done = 0;
    for (int i = 0; i < NL; i++) total += c.counter[i];
    for (int w = 0; w < NW; w++) {
        CHECK_EQ(c.done[w], ROUNDS);
        done += c.done[w];
    }
    CHECK_EQ(total, (uint64_t)NW * ROUNDS);
    CHECK_EQ(done, total);
    CHECK_EQ(c.violations, 0);
    printf("# %d processes on two hosts, %d locks: %llu critical sections, counts exact\n", NW,
           NL, (unsigned long long)total);
}

/* ---- a holder killed on A, taken over by a waiter on B -------------------------------------- */

static int killed_holder(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostA");
    if (line) return line;
    if (alock_lock(p.t, 0, &hold)) return __LINE__;
    *(volatile uint64_t *)&C->counter[0] = 1000; /* half an update: then it dies */
    rcp__store(&C->a1_desc, (uint64_t)(uintptr_t)hold.desc);
    rcp__store(&C->a1_lslot, (rcp__lease_tag(&p.l) & 0xffffu) - 1u);
    rcp__store(&C->a1_in, 1u);
    (void)w;
    for (;;) pause();
}

/* Kill a1 right after its lease was renewed (its lease slot's word changed), so that the lease
   lapses a bound after the kill whatever the load did to its renewals before. */
static void kill_renewed(pid_t a1)
{
    struct rcp__lease obs;
    if (rcp__lease_attach(&obs, dev_at, LEASE_LEN, NULL)) {
        HFAIL(0);
        return;
    }
    uint32_t s = (uint32_t)rcp__load(&C->a1_lslot);
    HFAIL(s < obs.nslots);
    uint64_t *w = &obs.slots[s < obs.nslots ? s : 0].word, w0 = rcp__load(w), t0 = rcp__now_ns();
    while (rcp__load(w) == w0 && ms_since(t0) < 5000) rcp__cpu_relax();
    rcp__store(&C->t_kill_ns, rcp__now_ns());
    kill(a1, SIGKILL);
    rcp__lease_detach(&obs);
}

static int holder_a(void)
{
    int line = pod_make();
    HFAIL(line == 0);
    rcp__store(&C->stage, 1u);
    pid_t a1 = worker(killed_holder, 0);
    /* B1 queued behind A1 (the tail moved past A1's descriptor), and watching it */
    if (!wait_for(&C->a1_in, 1) && !wait_for(&C->b2_queued, 1)) {
        uint64_t *tail = (uint64_t *)(uintptr_t)rcp__load(&C->tail_addr), t0 = rcp__now_ns();
        while (rcp__load(tail) == rcp__load(&C->a1_desc) && ms_since(t0) < 10000) usleep(1000);
        HFAIL(rcp__load(tail) != rcp__load(&C->a1_desc));
        usleep(50 * 1000);
        kill_renewed(a1);
    }
    t_kill_wait(a1);
    rcp__store(&C->killed, 1u);
    wait_for(&C->stop, 1);
    C->shm_entries[0] = shm_entries();
    return 0;
}

static int taker(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostB");
    if (line) return line;
    if (wait_for(&C->a1_in, 1)) return __LINE__;
    rcp__store(&C->b2_queued, 1u);
    int rc = alock_lock(p.t, 0, &hold);
    rcp__store(&C->t_took_ns, rcp__now_ns());
    C->rc_took = rc;
    if (rc != ALOCK_OWNERDEAD) return __LINE__;
    section(0, w);
    if (alock_unlock(&hold)) return __LINE__;
    /* the lock is sound again: a plain lock, from this host */
    if (alock_lock(p.t, 0, &hold) || (section(0, w), alock_unlock(&hold))) return __LINE__;
    pod_close(&p);
    return 0;
}

static int holder_b(void)
{
    if (wait_for(&C->stage, 1)) return 1;
    pid_t b1 = worker(taker, 2);
    int bad = reap(&b1, 1);
    rcp__store(&C->stop, 1u);
    C->shm_entries[1] = shm_entries();
    return bad;
}

static void hosts_holder_killed(void)
{
    struct ctl c;
    run_hosts(holder_a, holder_b, &c);
    CHECK_EQ(c.rc_took, ALOCK_OWNERDEAD);
    CHECK_EQ(c.counter[0], 1002);
    CHECK_EQ(c.violations, 0);
    uint64_t ms = c.t_kill_ns && c.t_took_ns > c.t_kill_ns ? (c.t_took_ns - c.t_kill_ns) / 1000000
                                                             : ~0ull;
    /* within the bound (and a check) of the death, and not before its lease could lapse (it
       was killed right after a renewal): the waiter learnt it from the lease, not the kernel */
    CHECKF(ms <= BOUND_MS + SLACK_MS, "taken over %llu ms after the kill", (unsigned long long)ms);
    CHECKF(ms + BOUND_MS / 4 >= BOUND_MS, "taken over %llu ms after the kill: before the bound",
           (unsigned long long)ms);
    printf("# a holder killed on host A, taken over on host B %llu ms later (bound %u ms)\n",
           (unsigned long long)ms, BOUND_MS);
}

/* ---- a queued waiter killed ------------------------------------------------------------------ */

static int dying_waiter(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostA");
    if (line) return line;
    if (wait_for(&C->b1_in, 1)) return __LINE__;
    rcp__store(&C->a1_queued, 1u);
    alock_lock(p.t, 0, &hold); /* killed while it waits */
    (void)w;
    return __LINE__;
}

static int waiter_a(void)
{
    int line = pod_make();
    HFAIL(line == 0);
    rcp__store(&C->stage, 1u);
    pid_t a1 = worker(dying_waiter, 0);
    if (!wait_for(&C->b2_queued, 1)) {
        uint64_t *tail = (uint64_t *)(uintptr_t)rcp__load(&C->tail_addr), t0 = rcp__now_ns();
        uint64_t a1tail = rcp__load(&C->a1_desc); /* B2 queues after A1 */
        while (rcp__load(tail) == a1tail && ms_since(t0) < 10000) usleep(1000);
        HFAIL(rcp__load(tail) != a1tail);
        usleep(50 * 1000);
    }
    rcp__store(&C->t_kill_ns, rcp__now_ns());
    t_kill_wait(a1);
    rcp__store(&C->killed, 1u);
    wait_for(&C->stop, 1);
    C->shm_entries[0] = shm_entries();
    return 0;
}

static int waiter_holder(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostB");
    if (line) return line;
    if (alock_lock(p.t, 0, &hold)) return __LINE__;
    rcp__store(&C->b1_desc, (uint64_t)(uintptr_t)hold.desc);
    rcp__store(&C->b1_in, 1u);
    if (wait_for(&C->killed, 1)) return __LINE__;
    section(0, w);
    rcp__store(&C->t_unlock_ns, rcp__now_ns());
    if (alock_unlock(&hold)) return __LINE__; /* hands the lock to the dead waiter */
    pod_close(&p);
    return 0;
}

static int waiter_next(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostB");
    if (line) return line;
    if (wait_for(&C->a1_queued, 1)) return __LINE__;
    /* A1 queued: the tail moved past B1's descriptor */
    uint64_t *tail = (uint64_t *)(uintptr_t)rcp__load(&C->tail_addr), t0 = rcp__now_ns();
    while (rcp__load(tail) == rcp__load(&C->b1_desc) && ms_since(t0) < 10000) usleep(1000);
    if (rcp__load(tail) == rcp__load(&C->b1_desc)) return __LINE__;
    rcp__store(&C->a1_desc, rcp__load(tail)); /* A1's descriptor, the tail we queue behind */
    rcp__store(&C->b2_queued, 1u);
    int rc = alock_lock(p.t, 0, &hold);
    rcp__store(&C->t_took_ns, rcp__now_ns());
    C->rc_took = rc;
    if (rc) return __LINE__;
    section(0, w);
    if (alock_unlock(&hold)) return __LINE__;
    pod_close(&p);
    return 0;
}

static int waiter_b(void)
{
    if (wait_for(&C->stage, 1)) return 1;
    pid_t ws[2] = {worker(waiter_holder, 2), worker(waiter_next, 3)};
    int bad = reap(ws, 2);
    rcp__store(&C->stop, 1u);
    C->shm_entries[1] = shm_entries();
    return bad;
}

static void hosts_waiter_killed(void)
{
    struct ctl c;
    run_hosts(waiter_a, waiter_b, &c);
    CHECK_EQ(c.rc_took, 0); /* the dead waiter never entered: no ALOCK_OWNERDEAD */
    CHECK_EQ(c.counter[0], 2);
    CHECK_EQ(c.violations, 0);
    uint64_t ms = c.t_kill_ns && c.t_took_ns > c.t_kill_ns ? (c.t_took_ns - c.t_kill_ns) / 1000000
                                                             : ~0ull;
    CHECKF(ms <= BOUND_MS + SLACK_MS, "passed over %llu ms after the kill", (unsigned long long)ms);
    printf("# a waiter killed on host A, passed over on host B %llu ms later (bound %u ms)\n",
           (unsigned long long)ms, BOUND_MS);
}

/* ---- a holder killed with nobody behind it: alock_recover from the other host ---------------- */

static int recover_a(void)
{
    int line = pod_make();
    HFAIL(line == 0);
    rcp__store(&C->stage, 1u);
    pid_t a1 = worker(killed_holder, 0);
    if (!wait_for(&C->a1_in, 1)) {
        usleep(100 * 1000); /* B1 watches A1's lease meanwhile (alock_recover finds it live) */
        kill_renewed(a1);
    }
    t_kill_wait(a1);
    rcp__store(&C->killed, 1u);
    wait_for(&C->stop, 1);
    C->shm_entries[0] = shm_entries();
    return 0;
}

static int recoverer(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, "hostB"), rc = 0;
    if (line) return line;
    if (wait_for(&C->a1_in, 1)) return __LINE__;
    uint64_t t0 = rcp__now_ns();
    while ((rc = alock_recover(p.t)) == 0 && ms_since(t0) < 10000) usleep(CHECK_MS * 1000);
    rcp__store(&C->t_took_ns, rcp__now_ns());
    C->rc_recover = rc;
    if (rc != 1 || !rcp__load(&C->killed)) return __LINE__;
    if (alock_trylock(p.t, 0, &hold)) return __LINE__;
    section(0, w);
    if (alock_unlock(&hold)) return __LINE__;
    pod_close(&p);
    return 0;
}

static int recover_b(void)
{
    if (wait_for(&C->stage, 1)) return 1;
    pid_t b1 = worker(recoverer, 2);
    int bad = reap(&b1, 1);
    rcp__store(&C->stop, 1u);
    C->shm_entries[1] = shm_entries();
    return bad;
}

static void hosts_recover(void)
{
    struct ctl c;
    run_hosts(recover_a, recover_b, &c);
    CHECK_EQ(c.rc_recover, 1);
    CHECK_EQ(c.counter[0], 1001);
    uint64_t ms = c.t_kill_ns && c.t_took_ns > c.t_kill_ns ? (c.t_took_ns - c.t_kill_ns) / 1000000
                                                             : ~0ull;
    CHECKF(ms <= BOUND_MS + SLACK_MS, "released %llu ms after the kill", (unsigned long long)ms);
    printf("# a holder killed on host A, released by alock_recover on host B %llu ms later\n",
           (unsigned long long)ms);
}

/* ---- a holder stopped past its lease, then resumed -------------------------------------------- */

static int stopped_holder(int w)
{
    struct pod p;
    alock_hold hold, h2;
    int line = pod_open(&p, "hostA");
    if (line) return line;
    if (wait_for(&C->go_on, 1) || alock_lock(p.t, 0, &hold)) return __LINE__;
    uint64_t v = *(volatile uint64_t *)&C->counter[0];
    rcp__store(&C->a1_desc, (uint64_t)(uintptr_t)hold.desc);
    rcp__store(&C->a1_in, 1u);
    while (rcp__load(&C->go_on) < 2) usleep(1000); /* stopped here, past its lease */
    /* as the lease's manual asks: check before acting on what the lock protects */
    C->rc_check = rcp__lease_check(&p.l);
    if (C->rc_check == 0) {
        *(volatile uint64_t *)&C->counter[0] = v + 1;
        C->a1_acts++;
    }
    C->rc_unlock = alock_unlock(&hold);
    C->rc_lock = alock_lock(p.t, 1, &h2);
    C->rc_try = alock_trylock(p.t, 2, &h2);
    C->rc_recover = alock_recover(p.t);
    C->rc_close = alock_table_close(p.t);
    shmheap_close(p.h);
    rcp__lease_detach(&p.l);
    /* back with a new lease */
    if ((C->rc_rejoin = pod_open(&p, "hostA"))) return __LINE__;
    for (int r = 0; r < 100; r++) {
        if (alock_lock(p.t, 0, &hold)) return __LINE__;
        section(0, w);
        if (alock_unlock(&hold)) return __LINE__;
    }
    pod_close(&p);
    return 0;
}

/* Lock 0 until told to stop; counts its ALOCK_OWNERDEADs. */
static int looper(int w)
{
    struct pod p;
    alock_hold hold;
    int line = pod_open(&p, w < 2 ? "hostA" : "hostB");
    if (line) return line;
    if (wait_for(&C->go_on, 1)) return __LINE__;
    while (!rcp__load(&C->stop)) {
        int rc = alock_lock(p.t, 0, &hold);
        if (rc == ALOCK_OWNERDEAD) rcp__fetch_add(&C->ownerdead, (uint64_t)1);
        else if (rc) return __LINE__;
        section(0, w);
        if (alock_unlock(&hold)) return __LINE__;
    }
    pod_close(&p);
    return 0;
}

static uint64_t done_sum(void)
{
    uint64_t n = 0;
    for (int w = 0; w <= NW; w++) n += rcp__load(&C->done[w]);
    return n;
}

static int stopped_a(void)
{
    int line = pod_make();
    HFAIL(line == 0);
    rcp__store(&C->stage, 1u);
    pid_t a1 = worker(stopped_holder, 0), a2 = worker(looper, 1);
    if (!wait_for(&C->a1_in, 1)) {
        /* someone queued behind A1, then A1 stops for three bounds */
        uint64_t *tail = (uint64_t *)(uintptr_t)rcp__load(&C->tail_addr), t0 = rcp__now_ns();
        while (rcp__load(tail) == rcp__load(&C->a1_desc) && ms_since(t0) < 10000) usleep(1000);
        HFAIL(rcp__load(tail) != rcp__load(&C->a1_desc));
        int st;
        kill(a1, SIGSTOP);
        waitpid(a1, &st, WUNTRACED);
        uint64_t before = done_sum();
        usleep(3 * BOUND_MS * 1000);
        C->stop_progress = done_sum() - before; /* the others went on meanwhile */
    }
    rcp__store(&C->go_on, 2u);
    kill(a1, SIGCONT);
    int bad = reap(&a1, 1);
    rcp__store(&C->stop, 1u);
    bad |= reap(&a2, 1);
    C->shm_entries[0] = shm_entries();
    return bad;
}

static int stopped_b(void)
{
    if (wait_for(&C->stage, 1)) return 1;
    pid_t ws[2] = {worker(looper, 2), worker(looper, 3)};
    usleep(100 * 1000);
    rcp__store(&C->go_on, 1u);
    int bad = reap(ws, 2);
    C->shm_entries[1] = shm_entries();
    return bad;
}

static void hosts_holder_stopped(void)
{
    struct ctl c;
    run_hosts(stopped_a, stopped_b, &c);
    CHECK_EQ(c.rc_check, RCP__LEASE_E_FENCED);
    CHECK_EQ(c.a1_acts, 0);
    CHECK_EQ(c.rc_unlock, ALOCK_E_FENCED);
    CHECK_EQ(c.rc_lock, ALOCK_E_FENCED);
    CHECK_EQ(c.rc_try, ALOCK_E_FENCED);
    CHECK_EQ(c.rc_recover, ALOCK_E_FENCED);
    CHECK_EQ(c.rc_close, 0);
    CHECK_EQ(c.rc_rejoin, 0);
    CHECK_EQ(c.ownerdead, 1); /* the one waiter behind it took over, once */
    CHECK(c.stop_progress > 0);
    uint64_t done = 0;
    for (int w = 0; w <= NW; w++) done += c.done[w];
    CHECK_EQ(c.done[0], 100);
    CHECK_EQ(c.counter[0], done);
    CHECK_EQ(c.violations, 0);
    printf("# a holder stopped past its lease: fenced; %llu critical sections of the others "
           "while it was stopped, %llu in all, counts exact\n",
           (unsigned long long)c.stop_progress, (unsigned long long)done);
}

/* ---- in one process ------------------------------------------------------------------------- */

static char *mem_dev(void)
{
    snprintf(dev_path, sizeof dev_path, "/tmp/%s.dev", t_uniq("alockpod"));
    int fd = open(dev_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)DEV_SIZE)) return NULL;
    close(fd);
    dev_at = free_range(DEV_SIZE);
    return dev_at && !dev_map() ? dev_at : NULL;
}

static void mem_drop(void)
{
    munmap(dev_at, DEV_SIZE);
    unlink(dev_path);
}

/* A handle whose lease was recovered behind its back: every call ALOCK_E_FENCED, for good. */
static void fenced_codes(void)
{
    if (!mem_dev()) {
        CHECK(0);
        return;
    }
    struct rcp__lease l, obs;
    struct rcp__lease_opts lo = {.nslots = 8, .bound_ms = 50};
    alock_table_opts to = {.nlocks = 4, .slots = 4};
    shmheap *h = NULL;
    alock_table *t = NULL;
    alock_hold hold, h2;
    CHECK_EQ(rcp__lease_attach(&l, dev_at, LEASE_LEN, &lo), 0);
    CHECK_EQ(rcp__lease_attach(&obs, dev_at, LEASE_LEN, &lo), 0);
    int s = rcp__lease_take(&l, "me");
    CHECK(s >= 0);
    CHECK_EQ(shmheap__create_mem(dev_at + HEAP_OFF, HEAP_LEN, &l, NULL, &h), 0);
    CHECK(shmheap__lease(h) == &l);
    CHECK_EQ(alock_table_create(h, "t", &to, &t), 0);
    CHECK_EQ(alock_lock(t, 0, &hold), 0);
    /* no renewal from here: an observer judges the lease lapsed and recovers it */
    struct rcp__lease_seen seen = {0, 0};
    uint64_t t0 = rcp__now_ns();
    while (rcp__lease_judge(&obs, (uint32_t)s, &seen) != RCP__LEASE_LAPSED && ms_since(t0) < 5000)
        usleep(2000);
    CHECK_EQ(rcp__lease_recover(&obs, (uint32_t)s, &seen), 0);
    CHECK_EQ(alock_unlock(&hold), ALOCK_E_FENCED);
    CHECK_EQ(alock_unlock(&hold), ALOCK_E_INVAL); /* the hold is spent */
    CHECK_EQ(alock_lock(t, 1, &h2), ALOCK_E_FENCED);
    CHECK_EQ(alock_lock_timeout(t, 1, rcp__now_ns() + 1000000, &h2), ALOCK_E_FENCED);
    CHECK_EQ(alock_trylock(t, 1, &h2), ALOCK_E_FENCED);
    CHECK_EQ(alock_recover(t), ALOCK_E_FENCED);
    CHECK(strstr(alock_strerror(ALOCK_E_FENCED), "lease") != NULL);
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(alock_table_close(t), ALOCK_E_BADHANDLE);
    /* a new lease: the table opens again, lock 0 (left with the fenced holder) is taken over
       by alock_recover once the old lease is seen recovered, and works */
    rcp__lease_detach(&l);
    CHECK_EQ(rcp__lease_attach(&l, dev_at, LEASE_LEN, &lo), 0); /* the heap names &l still */
    CHECK(rcp__lease_take(&l, "me") >= 0);
    CHECK_EQ(alock_table_open(h, "t", &to, &t), 0);
    CHECK_EQ(alock_recover(t), 1);
    CHECK_EQ(alock_trylock(t, 0, &hold), 0);
    CHECK_EQ(alock_unlock(&hold), 0);
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(alock_table_unlink(h, "t"), 0);
    CHECK_EQ(shmheap_close(h), 0);
    rcp__lease_detach(&l);
    rcp__lease_detach(&obs);
    mem_drop();
}

/* A table made in a heap with a lease keeps no liveness file, and needs a lease to open. */
static void needs_lease(void)
{
    if (!mem_dev()) {
        CHECK(0);
        return;
    }
    struct rcp__lease l;
    struct rcp__lease_opts lo = {.nslots = 8, .bound_ms = BOUND_MS};
    alock_table_opts to = {.nlocks = 2, .live_path = NULL};
    shmheap *h = NULL;
    alock_table *t = NULL;
    char live[160];
    CHECK_EQ(rcp__lease_attach(&l, dev_at, LEASE_LEN, &lo), 0);
    CHECK_EQ(shmheap__create_mem(dev_at + HEAP_OFF, HEAP_LEN, &l, NULL, &h), 0);
    CHECK_EQ(alock_table_create(h, "t", &to, &t), ALOCK_E_INVAL); /* the lease holds no slot */
    CHECK(rcp__lease_take(&l, "me") >= 0);
    CHECK_EQ(alock_table_create(h, "t", &to, &t), 0);
    snprintf(live, sizeof live, "/dev/shm/alock.%llx.t",
             (unsigned long long)(uintptr_t)shmheap_base(h));
    CHECK(access(live, F_OK) != 0);
    CHECK_EQ(t->live_fd, -1);
    /* the heap opened without a lease: the table refuses */
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap__open_mem(dev_at + HEAP_OFF, HEAP_LEN, NULL, NULL, &h), 0);
    CHECK(shmheap__lease(h) == NULL);
    CHECK_EQ(alock_table_open(h, "t", NULL, &t), ALOCK_E_INVAL);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap__open_mem(dev_at + HEAP_OFF, HEAP_LEN, &l, NULL, &h), 0);
    CHECK_EQ(alock_table_open(h, "t", NULL, &t), 0);
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(alock_table_unlink(h, "t"), 0);
    CHECK_EQ(shmheap_close(h), 0);
    rcp__lease_detach(&l);
    mem_drop();
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(fenced_codes);
    RUN(needs_lease);
    const char *skip = hosts_skip();
    if (!t_only || strstr("hosts_mutex", t_only)) TEST_UNLESS(skip, hosts_mutex);
    if (!t_only || strstr("hosts_holder_killed", t_only)) TEST_UNLESS(skip, hosts_holder_killed);
    if (!t_only || strstr("hosts_waiter_killed", t_only)) TEST_UNLESS(skip, hosts_waiter_killed);
    if (!t_only || strstr("hosts_recover", t_only)) TEST_UNLESS(skip, hosts_recover);
    if (!t_only || strstr("hosts_holder_stopped", t_only)) TEST_UNLESS(skip, hosts_holder_stopped);
    return T_DONE();
}
