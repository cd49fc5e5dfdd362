/* alock.h's manual for the local cohort, sentence by sentence through the public API only:
 * the options and their bounds, create/open/close/unlink and their codes, lock, trylock,
 * lock_timeout and unlock on bad input, ndesc and slots, a dead holder (ALOCK_OWNERDEAD),
 * alock_recover's count, the liveness file, the remote cohort's "not supported" without RDMA,
 * error texts. */
#define ALOCK_NO_RDMA 1
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "t.h"
#include <errno.h>
#include <time.h>

static uint64_t m_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static shmheap *a_heap(const char *n)
{
    shmheap *h = NULL;
    shmheap_opts o = {.size = 8 << 20};
    int r = shmheap_create(n, &o, &h);
    CHECKF(r == 0, "heap: %s", shmheap_strerror(r));
    return r ? NULL : h;
}

static void a_create_bad(void)
{
    const char *n = t_uniq("ac");
    shmheap *h = a_heap(n);
    if (!h) return;
    alock_table *t = NULL;
    alock_table_opts o = {.nlocks = 16};
    CHECK_EQ(alock_table_create(h, "t", NULL, &t), ALOCK_E_INVAL); /* needs nlocks */
    alock_table_opts z = {0};
    CHECK_EQ(alock_table_create(h, "t", &z, &t), ALOCK_E_INVAL);
    alock_table_opts big = {.nlocks = (1u << 24) + 1};
    CHECK_EQ(alock_table_create(h, "t", &big, &t), ALOCK_E_INVAL);
    alock_table_opts sl = {.nlocks = 4, .slots = ALOCK_MAX_SLOTS + 1};
    CHECK_EQ(alock_table_create(h, "t", &sl, &t), ALOCK_E_INVAL);
    alock_table_opts nd = {.nlocks = 4, .ndesc = 4097};
    CHECK_EQ(alock_table_create(h, "t", &nd, &t), ALOCK_E_INVAL);
    alock_table_opts huge = {.nlocks = 1u << 24}; /* 1 GiB of lines in a heap of 8 MiB */
    CHECK_EQ(alock_table_create(h, "t", &huge, &t), SHMHEAP_E_FULL);
    CHECK_EQ(alock_table_create(NULL, "t", &o, &t), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_create(h, NULL, &o, &t), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_create(h, "t", &o, NULL), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_open(h, "absent", NULL, &t), ALOCK_E_NOTFOUND);
    CHECK_EQ(alock_table_open(NULL, "t", NULL, &t), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_open(h, NULL, NULL, &t), ALOCK_E_INVAL);
    CHECK_EQ(alock_table_open(h, "t", NULL, NULL), ALOCK_E_INVAL);
    /* a root that is not a table */
    void *junk = shmheap_calloc(h, 1, 4096);
    shmheap_root_set(h, "junk", junk);
    int r = alock_table_open(h, "junk", NULL, &t);
    CHECKF(r == ALOCK_E_BADTABLE, "open of a root that is no table: %s", alock_strerror(r));
    CHECK_EQ(alock_table_unlink(h, "absent"), ALOCK_E_NOTFOUND);
    CHECK(alock_table_unlink(NULL, "t") < 0);
    r = alock_table_close(NULL);
    CHECKF(r == 0 || r == ALOCK_E_INVAL, "close(NULL): %d", r);
    void *la = &r;
    size_t ll = 1;
    alock_table_lines(NULL, &la, &ll);
    CHECK(la == NULL && ll == 0);
    CHECK_EQ(alock_table_nlocks(NULL), 0);
    t_rm(h, n);
}

static void a_basic(void)
{
    const char *n = t_uniq("ab");
    shmheap *h = a_heap(n);
    if (!h) return;
    alock_table *t = NULL, *t2 = NULL;
    alock_table_opts o = {.nlocks = 16};
    int r = alock_table_create(h, "t", &o, &t);
    CHECK_EQ(r, 0);
    if (r) { t_rm(h, n); return; }
    CHECK_EQ(alock_table_nlocks(t), 16);
    char live[256];
    snprintf(live, sizeof live, "/dev/shm/alock.%llx.t",
             (unsigned long long)(uintptr_t)shmheap_base(h));
    struct stat st;
    CHECKF(stat(live, &st) == 0, "no liveness file %s", live);
    r = alock_table_create(h, "t", &o, &t2);
    CHECKF(r == ALOCK_E_EXISTS, "create of an existing table: %d", r);
    if (!r) alock_table_close(t2);
    void *u = shmheap_malloc(h, 64);
    shmheap_root_set(h, "user", u);
    r = alock_table_create(h, "user", &o, &t2); /* another structure's root is never replaced */
    CHECKF(r == ALOCK_E_EXISTS, "create over a user's root: %d", r);
    if (!r) alock_table_close(t2);
    CHECK(shmheap_root_get(h, "user") == u);
    CHECK_EQ(alock_table_open(h, "t", NULL, &t2), 0);
    CHECK_EQ(alock_table_nlocks(t2), 16);
    alock_hold a, b;
    CHECK_EQ(alock_lock(t, 16, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_lock(t, 0, NULL), ALOCK_E_INVAL);
    CHECK_EQ(alock_lock(NULL, 0, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_trylock(t, 16, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_lock_timeout(t, 16, 0, &a), ALOCK_E_INVAL);
    CHECK_EQ(alock_unlock(NULL), ALOCK_E_INVAL);
    CHECK_EQ(alock_lock(t, 3, &a), 0);
    CHECK_EQ(alock_trylock(t2, 3, &b), ALOCK_E_BUSY);
    CHECK_EQ(alock_trylock(t, 3, &b), ALOCK_E_BUSY);
    uint64_t t0 = m_now();
    CHECK_EQ(alock_lock_timeout(t2, 3, t0 + 50000000ull, &b), ALOCK_E_TIMEDOUT);
    uint64_t el = m_now() - t0;
    CHECKF(el >= 50000000ull && el < 2000000000ull, "waited %llu ns", (unsigned long long)el);
    CHECK_EQ(alock_lock_timeout(t2, 3, t0, &b), ALOCK_E_TIMEDOUT); /* deadline passed */
    CHECK_EQ(alock_unlock(&a), 0);
    CHECK_EQ(alock_trylock(t2, 3, &b), 0);
    CHECK_EQ(alock_unlock(&b), 0);
    CHECK_EQ(alock_lock_timeout(t2, 3, 0, &b), 0); /* 0 = none */
    CHECK_EQ(alock_unlock(&b), 0);
    void *addr = NULL;
    size_t len = 0;
    alock_table_lines(t, &addr, &len);
    CHECK(addr != NULL && len >= 16 * 64 && shmheap_contains(h, addr, len));
    CHECK_EQ(alock_recover(t), 0);
    CHECK_EQ(alock_table_close(t2), 0);
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(alock_table_unlink(h, "t"), 0);
    CHECK(stat(live, &st) != 0);
    CHECK(shmheap_root_get(h, "t") == NULL);
    CHECK_EQ(alock_table_open(h, "t", NULL, &t), ALOCK_E_NOTFOUND);
    t_rm(h, n);
}

static void a_ndesc_slots(void)
{
    const char *n = t_uniq("an");
    shmheap *h = a_heap(n);
    if (!h) return;
    alock_table *t = NULL, *t2 = NULL, *t3 = NULL;
    alock_table_opts o = {.nlocks = 8, .ndesc = 2, .slots = 2};
    int r = alock_table_create(h, "t", &o, &t);
    CHECK_EQ(r, 0);
    if (r) { t_rm(h, n); return; }
    alock_hold a, b, c;
    CHECK_EQ(alock_lock(t, 0, &a), 0);
    CHECK_EQ(alock_lock(t, 1, &b), 0);
    CHECK_EQ(alock_lock(t, 2, &c), ALOCK_E_NODESC);
    CHECK_EQ(alock_trylock(t, 2, &c), ALOCK_E_NODESC);
    CHECK_EQ(alock_unlock(&b), 0);
    CHECK_EQ(alock_lock(t, 2, &c), 0);
    CHECK_EQ(alock_unlock(&c), 0);
    CHECK_EQ(alock_unlock(&a), 0);
    CHECK_EQ(alock_table_open(h, "t", NULL, &t2), 0);
    r = alock_table_open(h, "t", NULL, &t3);
    CHECKF(r == ALOCK_E_NOSLOT, "a third handle of 2 slots: %s", alock_strerror(r));
    if (!r) alock_table_close(t3);
    CHECK_EQ(alock_table_close(t2), 0);
    r = alock_table_open(h, "t", NULL, &t3); /* the slot is free again */
    CHECK_EQ(r, 0);
    if (!r) alock_table_close(t3);
    alock_table_close(t);
    alock_table_unlink(h, "t");
    t_rm(h, n);
}

static const char *a_hn;
static int a_die_holding(void *arg)
{
    shmheap *h;
    alock_table *t;
    alock_hold a;
    if (shmheap_open(a_hn, NULL, &h) || alock_table_open(h, "t", NULL, &t)) return 3;
    if (alock_lock(t, (uint32_t)(uintptr_t)arg, &a)) return 4;
    kill(getpid(), SIGKILL);
    return 5;
}

/* A heap (a_hn) with table "t" of 8 locks looked at every 5 ms: 0, or a FAIL line and -1. */
static int a_setup(const char *base, shmheap **h, alock_table **t)
{
    a_hn = t_uniq(base);
    *t = NULL;
    if (!(*h = a_heap(a_hn))) return -1;
    alock_table_opts o = {.nlocks = 8, .check_ms = 5};
    int r = alock_table_create(*h, "t", &o, t);
    CHECKF(r == 0, "table: %s", alock_strerror(r));
    if (r) t_rm(*h, a_hn);
    return r ? -1 : 0;
}

static void a_teardown(shmheap *h, alock_table *t)
{
    alock_table_close(t);
    alock_table_unlink(h, "t");
    t_rm(h, a_hn);
}

static void a_dead_holder(void)
{
    shmheap *h;
    alock_table *t;
    if (a_setup("ad", &h, &t)) return;
    int r;
    alock_hold a;
    CHECK_EQ(t_in_child(a_die_holding, (void *)1), 128 + SIGKILL);
    uint64_t t0 = m_now();
    r = alock_lock(t, 1, &a);
    CHECKF(r == ALOCK_OWNERDEAD, "lock after its holder died: %d %s", r, alock_strerror(r));
    CHECKF(m_now() - t0 < 2000000000ull, "took %llu ns", (unsigned long long)(m_now() - t0));
    if (r >= 0) CHECK_EQ(alock_unlock(&a), 0);
    CHECK_EQ(alock_lock(t, 1, &a), 0); /* the news is told once */
    alock_unlock(&a);
    CHECK_EQ(t_in_child(a_die_holding, (void *)2), 128 + SIGKILL);
    r = alock_recover(t);
    CHECKF(r == 1, "alock_recover released %d", r);
    CHECK_EQ(alock_recover(t), 0);
    r = alock_trylock(t, 2, &a);
    CHECKF(r == 0 || r == ALOCK_OWNERDEAD, "trylock after recover: %s", alock_strerror(r));
    if (r >= 0) alock_unlock(&a);
    r = alock_recover(NULL);
    CHECKF(r == 0 || r == ALOCK_E_INVAL, "recover(NULL): %d", r);
    a_teardown(h, t);
}

/* a process that dies queued for a lock (never in its critical section): the next locker
   takes the lock over, and gets 0, not ALOCK_OWNERDEAD */
static int a_die_waiting(void *arg)
{
    shmheap *h;
    alock_table *t;
    alock_hold a;
    int fd = (int)(intptr_t)arg;
    if (shmheap_open(a_hn, NULL, &h) || alock_table_open(h, "t", NULL, &t)) return 3;
    if (write(fd, "q", 1) != 1) return 4;
    alock_lock(t, 4, &a); /* waits: the parent holds it */
    return 5;
}

static void a_dead_waiter(void)
{
    shmheap *h;
    alock_table *t;
    if (a_setup("aw", &h, &t)) return;
    int r;
    alock_hold a, b;
    CHECK_EQ(alock_lock(t, 4, &a), 0);
    int p[2];
    pid_t pid = t_fork_pipe(p);
    if (pid == 0) _exit(a_die_waiting((void *)(intptr_t)p[1]));
    CHECK(t_ready_wait(p[0]) == 0);
    usleep(100000); /* queued by now */
    t_kill_wait(pid);
    CHECK_EQ(alock_unlock(&a), 0);
    uint64_t t0 = m_now();
    r = alock_lock_timeout(t, 4, t0 + 3000000000ull, &b);
    CHECKF(r == 0, "lock after a dead waiter: %s", alock_strerror(r));
    if (r >= 0) CHECK_EQ(alock_unlock(&b), 0);
    a_teardown(h, t);
}

/* "A new process never reuses the slot of a dead one before that slot's descriptors are out
   of every queue"; live_path names the liveness file, which unlink removes */
static void a_slot_reuse(void)
{
    a_hn = t_uniq("as");
    shmheap *h = a_heap(a_hn);
    if (!h) return;
    char live[96];
    snprintf(live, sizeof live, "/tmp/%s.live", a_hn);
    alock_table *t = NULL, *t2 = NULL;
    alock_table_opts o = {.nlocks = 8, .slots = 2, .check_ms = 5, .live_path = live};
    int r = alock_table_create(h, "t", &o, &t);
    CHECK_EQ(r, 0);
    if (r) { t_rm(h, a_hn); return; }
    CHECK(access(live, F_OK) == 0);
    CHECK_EQ(t_in_child(a_die_holding, (void *)1), 128 + SIGKILL);
    r = alock_table_open(h, "t", NULL, &t2); /* the dead slot still holds lock 1 */
    CHECKF(r == ALOCK_E_NOSLOT, "open while the dead slot holds a lock: %s", alock_strerror(r));
    if (!r) alock_table_close(t2);
    alock_hold a;
    CHECK_EQ(alock_trylock(t, 1, &a), ALOCK_E_BUSY); /* held, by a dead process */
    CHECK_EQ(alock_lock(t, 1, &a), ALOCK_OWNERDEAD);
    CHECK_EQ(alock_unlock(&a), 0);
    r = alock_table_open(h, "t", NULL, &t2); /* out of every queue now */
    CHECKF(r == 0, "open after the take-over: %s", alock_strerror(r));
    if (!r) alock_table_close(t2);
    alock_table_close(t);
    CHECK_EQ(alock_table_unlink(h, "t"), 0);
    CHECK(access(live, F_OK) != 0);
    t_rm(h, a_hn);
}

static void a_remote_notsup(void)
{
    CHECK_EQ(alock_remote_create(NULL, NULL), ALOCK_E_NOTSUP);
}

static void a_strerror(void)
{
    CHECK(!strcmp(alock_strerror(0), "success"));
    CHECK(strstr(alock_strerror(ALOCK_OWNERDEAD), "died") != NULL); /* success with news */
    CHECK(!strcmp(alock_strerror(-EINVAL), strerror(EINVAL)));
    CHECK(!strcmp(alock_strerror(SHMHEAP_E_FULL), shmheap_strerror(SHMHEAP_E_FULL)));
    CHECK(!strcmp(alock_strerror(-2950), "unknown error code"));
    CHECK(!strcmp(alock_strerror(-99999), "unknown error code"));
    const char *k = alock_strerror(-4000);
    CHECKF(strstr(k, "krconn") != NULL, "%s", k);
#define A_X(name, value, text) CHECK(!strcmp(alock_strerror(name), text) && name == value);
    ALOCK_ERRORS(A_X)
#undef A_X
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(a_create_bad);
    RUN(a_basic);
    RUN(a_ndesc_slots);
    RUN(a_dead_holder);
    RUN(a_dead_waiter);
    RUN(a_slot_reuse);
    RUN(a_remote_notsup);
    RUN(a_strerror);
    return T_DONE();
}
