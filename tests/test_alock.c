// TSAN
/* alock.h's local cohort on the host: mutual exclusion with a plain counter and a checker that
   counts (threads, processes), FIFO fairness, trylock and deadlines (abandoned waiters passed
   over), dead holders and waiters (SIGKILL mid-critical-section: the successor takes over with
   ALOCK_OWNERDEAD; alock_recover with no successor; slots reused), bad input, the
   remote cohort's "not supported" in a build without RDMA, and alock_table_remote_dead's work at
   the table's node over a link of CPU atomics. The remote cohort is tested on real
   verbs in the VM tier (tests/vm/test_alock_rdma.c). */
#define ALOCK_NO_RDMA 1 /* plain cc: libc alone */
#define ALOCK_CHECK_RMW 1 /* the invariant's marks on the CPU side */
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "t.h"
#include <pthread.h>
#include <signal.h>

#ifdef T_TSAN
#define ITERS 3000
#else
#define ITERS 100000
#endif

/* shared state of a test, in the heap */
struct shared {
    uint64_t counter;      /* plain, protected by lock 0 */
    uint64_t inside;       /* plain: +1 on entry, -1 on exit; must read 0 on entry */
    uint64_t violations;
    uint64_t per[8];       /* acquisitions per worker */
    int stop, ready;
    int pipe_ok;
};

static shmheap *heap;
static const char *heap_name;
static alock_table *tab;
static struct shared *sh;

static void setup(uint32_t nlocks, uint32_t budget)
{
    heap_name = t_uniq("alock");
    shmheap_opts o = {.size = 16 << 20};
    int rc = shmheap_create(heap_name, &o, &heap);
    CHECKF(rc == 0, "shmheap_create: %s", shmheap_strerror(rc));
    if (rc) exit(1);
    alock_table_opts ao = {.nlocks = nlocks, .budget = budget, .check_ms = 2};
    rc = alock_table_create(heap, "table", &ao, &tab);
    CHECKF(rc == 0, "alock_table_create: %s", alock_strerror(rc));
    if (rc) exit(1);
    sh = (struct shared *)shmheap_calloc(heap, 1, sizeof *sh);
    shmheap_root_set(heap, "shared", sh);
}

static void teardown(void)
{
    char live[256];
    snprintf(live, sizeof live, "/dev/shm/alock.%llx.table", (unsigned long long)(uintptr_t)shmheap_base(heap));
    alock_table_close(tab);
    CHECK_EQ(alock_table_unlink(heap, "table"), 0);
    CHECKF(access(live, F_OK) != 0, "liveness file %s left behind", live);
    CHECK_EQ(alock_table_unlink(heap, "table"), ALOCK_E_NOTFOUND);
    shmheap_close(heap);
    shmheap_unlink(heap_name, NULL);
}

static void crit(int who)
{
    if (sh->inside != 0) __atomic_fetch_add(&sh->violations, 1, __ATOMIC_RELAXED);
    sh->inside++;
    sh->counter++;
    if (who >= 0) sh->per[who]++;
    sh->inside--;
}

/* ---------------------------------------------------------------- threads */

#define NTHR 4
static void *thr(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < ITERS; i++) {
        alock_hold h;
        int rc = alock_lock(tab, 0, &h);
        if (rc) { __atomic_fetch_add(&sh->violations, 1000000, __ATOMIC_RELAXED); return NULL; }
        crit(me);
        alock_unlock(&h);
    }
    return NULL;
}

static void threads_mutex(void)
{
    for (int budget = 1; budget <= 8; budget += 7) {
        setup(4, (uint32_t)budget);
        pthread_t th[NTHR];
        for (int i = 0; i < NTHR; i++) pthread_create(&th[i], NULL, thr, (void *)(intptr_t)i);
        for (int i = 0; i < NTHR; i++) pthread_join(th[i], NULL);
        CHECK_EQ(sh->counter, (uint64_t)NTHR * ITERS);
        CHECK_EQ(sh->violations, 0);
        teardown();
    }
}

/* ---------------------------------------------------------------- processes */

static int open_child(shmheap **h, alock_table **t, struct shared **s)
{
    if (shmheap_open(heap_name, NULL, h)) return -1;
    if (alock_table_open(*h, "table", NULL, t)) return -2;
    *s = (struct shared *)shmheap_root_get(*h, "shared");
    return *s ? 0 : -3;
}

#define NPROC 4
static void processes_mutex(void)
{
#ifdef T_TSAN
    t_skip("processes_mutex", "ThreadSanitizer does not follow processes");
    t_cur_failed = 1; /* no ok line */
    return;
#endif
    setup(4, 4);
    fflush(stdout);
    pid_t pid[NPROC];
    for (int p = 0; p < NPROC; p++) {
        if ((pid[p] = fork()) == 0) {
            shmheap *h; alock_table *t; struct shared *s;
            if (open_child(&h, &t, &s)) _exit(2);
            for (int i = 0; i < ITERS; i++) {
                alock_hold hd;
                if (alock_lock(t, 1, &hd)) _exit(3);
                if (s->inside) __atomic_fetch_add(&s->violations, 1, __ATOMIC_RELAXED);
                s->inside++;
                s->counter++;
                s->per[p]++;
                s->inside--;
                alock_unlock(&hd);
            }
            alock_table_close(t);
            _exit(0);
        }
    }
    for (int p = 0; p < NPROC; p++) {
        int st = 0;
        waitpid(pid[p], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", p, st);
    }
    CHECK_EQ(sh->counter, (uint64_t)NPROC * ITERS);
    CHECK_EQ(sh->violations, 0);
    for (int p = 0; p < NPROC; p++) CHECK_EQ(sh->per[p], ITERS);
    teardown();
}

/* ---------------------------------------------------------------- fairness */

/* MCS is FIFO: while 4 threads hammer one lock for a fixed time, none is starved. */
static void *fair_thr(void *arg)
{
    int me = (int)(intptr_t)arg;
    while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
        alock_hold h;
        if (alock_lock(tab, 2, &h)) return NULL;
        crit(me);
        alock_unlock(&h);
    }
    return NULL;
}

static void fairness_fifo(void)
{
    setup(4, 2);
    pthread_t th[NTHR];
    for (int i = 0; i < NTHR; i++) pthread_create(&th[i], NULL, fair_thr, (void *)(intptr_t)i);
    usleep(300 * 1000);
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < NTHR; i++) pthread_join(th[i], NULL);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < NTHR; i++) {
        if (sh->per[i] < lo) lo = sh->per[i];
        if (sh->per[i] > hi) hi = sh->per[i];
    }
    printf("# fairness: %llu..%llu acquisitions per thread in 0.3 s\n", (unsigned long long)lo,
           (unsigned long long)hi);
    /* the threads share 2 CPUs with other work: the share of each follows its CPU time, so
       only starvation is checked here; the order is checked by fifo_order */
    CHECKF(lo > 0, "acquisitions per thread from %llu to %llu", (unsigned long long)lo,
           (unsigned long long)hi);
    CHECK_EQ(sh->violations, 0);
    teardown();
}

/* Waiters get the lock in the order they queued, and a holder that locks again queues last. */
static int order[8], norder;
static void *fifo_thr(void *arg)
{
    alock_hold h;
    if (alock_lock(tab, 1, &h) >= 0) {
        order[__atomic_fetch_add(&norder, 1, __ATOMIC_RELAXED)] = (int)(intptr_t)arg;
        alock_unlock(&h);
    }
    return NULL;
}

static void wait_tail_change(uint64_t old)
{
    while (__atomic_load_n(&tab->lines[1].l_tail, __ATOMIC_ACQUIRE) == old) usleep(100);
}

static void fifo_order(void)
{
    setup(4, 8);
    alock_hold a;
    CHECK_EQ(alock_lock(tab, 1, &a), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        uint64_t tail = __atomic_load_n(&tab->lines[1].l_tail, __ATOMIC_ACQUIRE);
        pthread_create(&th[i], NULL, fifo_thr, (void *)(intptr_t)(i + 1));
        wait_tail_change(tail); /* thread i+1 is queued before the next one starts */
    }
    alock_unlock(&a);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_EQ(norder, 4);
    for (int i = 0; i < 4; i++) CHECKF(order[i] == i + 1, "position %d: thread %d", i, order[i]);
    teardown();
}

/* ---------------------------------------------------------------- trylock and deadlines */

struct waiter { uint32_t idx; uint64_t deadline; int rc; int hold_ms; };
static void *wait_thr(void *arg)
{
    struct waiter *w = (struct waiter *)arg;
    alock_hold h;
    w->rc = w->deadline ? alock_lock_timeout(tab, w->idx, w->deadline, &h) : alock_lock(tab, w->idx, &h);
    if (w->rc >= 0) { /* 0 or ALOCK_OWNERDEAD: held */
        crit(-1);
        if (w->hold_ms) usleep((useconds_t)w->hold_ms * 1000);
        alock_unlock(&h);
    }
    return NULL;
}

static void trylock_and_timeout(void)
{
    setup(4, 4);
    alock_hold a, b;
    CHECK_EQ(alock_trylock(tab, 3, &a), 0);
    CHECK_EQ(alock_trylock(tab, 3, &b), ALOCK_E_BUSY);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(alock_lock_timeout(tab, 3, t0 + 20000000ull, &b), ALOCK_E_TIMEDOUT);
    CHECKF(rcp__now_ns() - t0 >= 20000000ull, "timed out early");
    /* a queue with abandoned waiters in it: B waits without deadline, C and D time out */
    struct waiter wb = {3, 0, -99, 0}, wc = {3, rcp__now_ns() + 30000000ull, -99, 0},
                  wd = {3, rcp__now_ns() + 40000000ull, -99, 0};
    pthread_t tb, tc, td;
    pthread_create(&tb, NULL, wait_thr, &wb);
    usleep(5000);
    pthread_create(&tc, NULL, wait_thr, &wc);
    usleep(5000);
    pthread_create(&td, NULL, wait_thr, &wd);
    pthread_join(tc, NULL);
    pthread_join(td, NULL);
    CHECK_EQ(wc.rc, ALOCK_E_TIMEDOUT);
    CHECK_EQ(wd.rc, ALOCK_E_TIMEDOUT);
    alock_unlock(&a); /* B gets it, then passes over C and D */
    pthread_join(tb, NULL);
    CHECK_EQ(wb.rc, 0);
    CHECK_EQ(alock_trylock(tab, 3, &a), 0); /* the queue emptied behind the abandoned ones */
    CHECK_EQ(alock_unlock(&a), 0);
    /* every descriptor came back: ndesc acquisitions in a row still work */
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(alock_lock(tab, (uint32_t)(i & 3), &a), 0);
        alock_unlock(&a);
    }
    CHECK_EQ(sh->violations, 0);
    teardown();
}

/* ---------------------------------------------------------------- dead holders and waiters */

/* a child that takes lock idx, says so on a pipe, and sits in its critical section */
static pid_t child_holding(uint32_t idx, int enter_crit)
{
    int p[2];
    pid_t pid = t_fork_pipe(p);
    if (pid == 0) {
        shmheap *h; alock_table *t; struct shared *s;
        if (open_child(&h, &t, &s)) _exit(2);
        alock_hold hd;
        if (alock_lock(t, idx, &hd) < 0) _exit(3);
        if (enter_crit) s->inside = 1; /* half-updated data, as a crash leaves it */
        if (write(p[1], "x", 1) != 1) _exit(4);
        for (;;) pause();
    }
    return pid < 0 || t_ready_wait(p[0]) ? -1 : pid;
}

/* a child that queues for lock idx (someone holds it) and stays queued */
static pid_t child_waiting(uint32_t idx)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        shmheap *h; alock_table *t; struct shared *s;
        if (open_child(&h, &t, &s)) _exit(2);
        alock_hold hd;
        alock_lock(t, idx, &hd);
        for (;;) pause();
    }
    return pid;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void dead_holder_successor_takes_over(void)
{
    setup(4, 4);
    pid_t pid = child_holding(0, 1);
    CHECK(pid > 0);
    /* we queue behind it, then it dies */
    struct waiter w = {0, 0, -99, 0};
    pthread_t th;
    pthread_create(&th, NULL, wait_thr, &w);
    usleep(20000);
    uint64_t t0 = rcp__now_ns();
    sh->inside = 0; /* what a dead holder's data repair would do; crit() checks it */
    kill_and_reap(pid);
    pthread_join(th, NULL);
    CHECK_EQ(w.rc, ALOCK_OWNERDEAD);
    printf("# taken over %.1f ms after the holder's death\n", (rcp__now_ns() - t0) / 1e6);
    alock_hold a;
    CHECK_EQ(alock_trylock(tab, 0, &a), 0);
    alock_unlock(&a);
    teardown();
}

static void dead_waiter_passed_over(void)
{
    setup(4, 4);
    alock_hold a;
    CHECK_EQ(alock_lock(tab, 1, &a), 0);
    pid_t pid = child_waiting(1);
    usleep(50000);
    struct waiter w = {1, 0, -99, 0};
    pthread_t th;
    pthread_create(&th, NULL, wait_thr, &w);
    usleep(20000);
    kill_and_reap(pid);
    alock_unlock(&a); /* hands it to the dead waiter; our thread takes over */
    pthread_join(th, NULL);
    CHECK_EQ(w.rc, 0); /* the dead one never entered: not OWNERDEAD */
    CHECK_EQ(alock_trylock(tab, 1, &a), 0);
    alock_unlock(&a);
    teardown();
}

static void dead_holder_recovered_without_successor(void)
{
    setup(4, 4);
    pid_t pid = child_holding(2, 0);
    CHECK(pid > 0);
    kill_and_reap(pid);
    alock_hold a;
    CHECK_EQ(alock_trylock(tab, 2, &a), ALOCK_E_BUSY);
    CHECK_EQ(alock_recover(tab), 1);
    CHECK_EQ(alock_recover(tab), 0);
    CHECK_EQ(alock_trylock(tab, 2, &a), 0);
    alock_unlock(&a);
    /* slots of the dead are reused: more processes than slots, one after another */
    for (int i = 0; i < 70; i++) {
        pid = child_holding(3, 0);
        if (pid <= 0) { CHECKF(0, "child %d could not lock", i); break; }
        kill_and_reap(pid);
        alock_recover(tab);
    }
    CHECK_EQ(alock_trylock(tab, 3, &a), 0);
    alock_unlock(&a);
    teardown();
}

static void dead_processes(void)
{
#ifdef T_TSAN
    t_skip("dead_processes", "ThreadSanitizer does not follow processes");
    t_cur_failed = 1;
    return;
#endif
    dead_holder_successor_takes_over();
    dead_waiter_passed_over();
    dead_holder_recovered_without_successor();
}

/* ---------------------------------------------------------------- bad input, no RDMA */

static void bad_input_and_notsup(void)
{
    setup(4, 4);
    alock_table *t2;
    alock_hold a;
    CHECK_EQ(alock_table_open(heap, "nosuch", NULL, &t2), ALOCK_E_NOTFOUND);
    alock_table_opts zero = {0};
    CHECK_EQ(alock_table_create(heap, "t2", &zero, &t2), ALOCK_E_INVAL);
    CHECK_EQ(alock_lock(tab, 4, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_trylock(tab, 99, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_unlock(NULL), ALOCK_E_INVAL);
    /* a heap root that is not a table */
    shmheap_root_set(heap, "junk", sh);
    CHECK_EQ(alock_table_open(heap, "junk", NULL, &t2), ALOCK_E_BADTABLE);
    alock_remote *r;
    alock_remote_opts ro = {0};
    CHECK_EQ(alock_remote_create(&ro, &r), ALOCK_E_NOTSUP);
    alock_rhold rh;
    CHECK_EQ(alock_remote_lock_timeout(NULL, 0, 1, &rh), ALOCK_E_NOTSUP);
    CHECK(strstr(alock_strerror(ALOCK_E_NOTSUP), "not supported") != NULL);
    teardown();
}

/* ---------------------------------------------------------------- a remote process dies */

/* An alock_link over this process's memory (CPU compare-and-swap): the table's node's calls are
   tested here without a NIC (on real verbs: tests/vm/test_alock_rdma.c, remote_holder_dies). */
static int cpu_cas(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired, uint64_t *old)
{
    (void)conn;
    uint64_t e = expect;
    __atomic_compare_exchange_n((uint64_t *)(uintptr_t)raddr, &e, desired, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    *old = e;
    return 0;
}
static int cpu_read(void *conn, uint64_t raddr, void *dst, uint32_t len)
{
    (void)conn;
    memcpy(dst, (const void *)(uintptr_t)raddr, len);
    return 0;
}

/* alock_table_remote_dead: bad input; the id's bit in the dead map after the lines; a dead head
   at the remote tail (entered an empty queue: head bit; or named by r_head) released, a dead
   waiter (r_head names another) and another id's tail left alone */
static void remote_dead_table_side(void)
{
    setup(8, 4);
    alock_link k = {0}, none = {0};
    k.cas = cpu_cas;
    k.read = cpu_read; /* ALOCK_CHECK_RMW reads the line (faa NULL: no marks counted) */
    CHECK_EQ(alock_table_remote_dead(NULL, &k, 5), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_remote_dead(tab, NULL, 5), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_remote_dead(tab, &none, 5), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_remote_dead(tab, &k, 0), ALOCK_E_INVAL);
    void *lines;
    size_t len;
    alock_table_lines(tab, &lines, &len);
    CHECK(len >= 8 * 64 + 8192 / 8);
    alock__line *L = (alock__line *)lines;
    uint64_t d5 = 5ull << 48 | 0x1000, d6 = 6ull << 48 | 0x2000;
    L[1].r_tail = d5 | ALOCK__RHEAD;           /* 5 entered an empty queue */
    L[2].r_tail = d5 + 64, L[2].r_head = d5 + 64; /* 5 was handed the lock */
    L[3].r_tail = d5 + 128, L[3].r_head = d6;   /* 5 waits behind 6, the holder */
    L[4].r_tail = d6 | ALOCK__RHEAD;
    CHECK_EQ(alock_table_remote_dead(tab, &k, 5), 2);
    CHECK_EQ(L[1].r_tail, 0);
    CHECK(L[2].r_tail == 0 && L[2].r_head == 0);
    CHECK(L[3].r_tail == d5 + 128 && L[3].r_head == d6);
    CHECK_EQ(L[4].r_tail, d6 | ALOCK__RHEAD);
    const uint64_t *map = (const uint64_t *)(const void *)(L + 8);
    CHECK_EQ(map[0], 1ull << 5);
    CHECK_EQ(alock_table_remote_dead(tab, &k, 5), 0); /* again: harmless */
    CHECK_EQ(alock_table_remote_dead(tab, &k, 65535), 0);
    CHECK_EQ(map[65535 / 64], 1ull << (65535 % 64));
    alock_hold h;
    CHECK_EQ(alock_trylock(tab, 1, &h), 0); /* released: free for the local cohort */
    alock_unlock(&h);
    CHECK_EQ(alock_trylock(tab, 3, &h), ALOCK_E_BUSY);
    L[3].r_tail = L[3].r_head = L[4].r_tail = 0;
    teardown();
}

static void ndesc_limit(void)
{
    setup(80, 4);
    alock_hold h[65];
    int i, rc = 0;
    for (i = 0; i < 65; i++)
        if ((rc = alock_lock(tab, (uint32_t)i, &h[i]))) break;
    CHECK_EQ(i, ALOCK_DEFAULT_NDESC);
    CHECK_EQ(rc, ALOCK_E_NODESC);
    while (i--) alock_unlock(&h[i]);
    CHECK_EQ(alock_lock(tab, 70, &h[0]), 0);
    alock_unlock(&h[0]);
    teardown();
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(threads_mutex);
    RUN(processes_mutex);
    RUN(fairness_fifo);
    RUN(fifo_order);
    RUN(trylock_and_timeout);
    RUN(dead_processes);
    RUN(ndesc_limit);
    RUN(bad_input_and_notsup);
    RUN(remote_dead_table_side);
    return T_DONE();
}
