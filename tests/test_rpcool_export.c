// TSAN
/* rpcool.h's exports in one pod (section 13): a range of a heap exported by name, opened by
   other processes, locked with ALock's local cohort, read optimistically. Exact counts under
   concurrent writers (threads, processes), an optimistic reader that never sees a torn value
   while writers run (a checker that counts), bad input, the exporter's close, a writer killed
   holding its lock. The remote half runs in the VM tier (tests/vm/test_rpcool_export.c). */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <pthread.h>

#ifdef T_TSAN
#define ITERS 2000
#else
#define ITERS 20000
#endif
#define OPT_WRITES 1500 /* writes of each writer of the torn-read check */
#define NPROC 4
#define WORDS 64 /* a record of the torn-read check: 512 bytes, every word the same */

struct data {
    uint64_t counter[4];  /* plain, counter[i] under lock i */
    uint64_t inside[4];   /* +1 on entry, -1 on exit: 0 on entry or mutual exclusion broke */
    uint64_t violations;
    uint64_t rec[WORDS];  /* under lock 5: every word equal */
    uint64_t stop;
};

static const char *hname;
static shmheap *heap;
static struct data *dat;

static rpcool_export *setup(const rpcool_export_opts *o)
{
    hname = t_uniq("export");
    heap = t_heap(hname, 16 << 20);
    if (!heap) exit(1);
    dat = (struct data *)shmheap_calloc(heap, 1, sizeof *dat);
    rpcool_export *x = NULL;
    int rc = rpcool_export_create(heap, "data", dat, sizeof *dat, o, &x);
    CHECKF(rc == 0, "rpcool_export_create: %s", rpcool_strerror(rc));
    if (rc) exit(1);
    return x;
}

/* The alock table's liveness file of export x (there while the record lives). */
static int live_files(void)
{
    char pre[64];
    snprintf(pre, sizeof pre, "rpcool.x.%llx.", (unsigned long long)(uintptr_t)shmheap_base(heap));
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, pre, strlen(pre))) n++;
    if (d) closedir(d);
    return n;
}

static void teardown(rpcool_export *x)
{
    if (x) CHECK_EQ(rpcool_export_close(x), 0);
    CHECKF(live_files() == 0, "the lock table's liveness file stays after the last close");
    shmheap_free(heap, dat);
    t_rm_empty(heap, hname);
}

static void locked_add(rpcool_export *x, uint32_t i)
{
    rpcool_xhold h;
    int rc = rpcool_export_lock(x, i, RPCOOL_LOCK_WRITE, &h);
    if (rc < 0) { __atomic_fetch_add(&dat->violations, 1, __ATOMIC_RELAXED); return; }
    if (dat->inside[i]++ != 0) __atomic_fetch_add(&dat->violations, 1, __ATOMIC_RELAXED);
    uint64_t c = dat->counter[i];
    if ((c & 31) == 0) sched_yield(); /* others run meanwhile, if they can */
    dat->counter[i] = c + 1;
    dat->inside[i]--;
    if (rpcool_export_unlock(&h)) __atomic_fetch_add(&dat->violations, 1, __ATOMIC_RELAXED);
}

static void t_basic(void)
{
    rpcool_export *x = setup(NULL);
    size_t len = 0;
    CHECK(rpcool_export_base(x, &len) == (void *)dat && len == sizeof *dat);
    CHECK_EQ(rpcool_export_nlocks(x), RPCOOL_EXPORT_DEFAULT_LOCKS);
    rpcool_export *y = NULL;
    CHECK_EQ(rpcool_export_open(heap, "data", &y), 0);
    CHECK(rpcool_export_base(y, &len) == (void *)dat && len == sizeof *dat);
    CHECK_EQ(rpcool_export_nlocks(y), RPCOOL_EXPORT_DEFAULT_LOCKS);
    /* READ and WRITE both exclude: a second process's trylock-free lock would block, so take
       two different locks and one lock twice in a row */
    rpcool_xhold a, b;
    CHECK_EQ(rpcool_export_lock(x, 0, RPCOOL_LOCK_READ, &a), 0);
    CHECK_EQ(rpcool_export_lock(y, 1, RPCOOL_LOCK_WRITE, &b), 0);
    dat->counter[1] = 7;
    CHECK_EQ(rpcool_export_unlock(&b), 0);
    CHECK_EQ(rpcool_export_unlock(&a), 0);
    uint64_t v = 0;
    CHECK_EQ(rpcool_export_read(y, 1, &dat->counter[1], &v, sizeof v), 0);
    CHECK_EQ(v, 7);
    CHECK_EQ(rpcool_export_read(y, 1, dat, &v, 0), 0);                 /* nothing to copy */
    /* the exporter's close withdraws: the name is free, the opener's calls say so */
    CHECK_EQ(rpcool_export_close(x), 0);
    rpcool_export *z = NULL;
    CHECK_EQ(rpcool_export_open(heap, "data", &z), RPCOOL_E_NOEXPORT);
    CHECK(z == NULL);
    CHECK_EQ(rpcool_export_lock(y, 0, RPCOOL_LOCK_READ, &a), RPCOOL_E_WITHDRAWN);
    CHECK_EQ(rpcool_export_read(y, 0, dat, &v, sizeof v), RPCOOL_E_WITHDRAWN);
    CHECKF(live_files() == 1, "the record and its table stay while an opener holds them");
    CHECK_EQ(rpcool_export_create(heap, "data", dat, sizeof *dat, NULL, &x), 0);
    CHECK_EQ(rpcool_export_close(y), 0); /* the withdrawn record goes with its last user */
    CHECK_EQ(live_files(), 1);
    /* the whole heap: base NULL, len 0 */
    rpcool_export *w = NULL;
    CHECK_EQ(rpcool_export_create(heap, "whole", NULL, 0, NULL, &w), 0);
    void *wb = rpcool_export_base(w, &len);
    CHECK(shmheap_contains(heap, wb, len) && len > (15u << 20) && len < (16u << 20));
    CHECK(!shmheap_contains(heap, (char *)wb - 1, 1) && !shmheap_contains(heap, wb, len + 1));
    CHECK(shmheap_contains(heap, dat, sizeof *dat) && (char *)dat >= (char *)wb);
    CHECK_EQ(rpcool_export_close(w), 0);
    teardown(x);
}

static void t_bad_input(void)
{
    rpcool_export_opts o = {.nlocks = 8};
    rpcool_export *x = setup(&o), *y = (rpcool_export *)&o;
    rpcool_xhold h;
    char buf[16];
    memset(&h, 0, sizeof h);
    CHECK_EQ(rpcool_export_create(NULL, "a", dat, 8, NULL, &y), RPCOOL_E_INVAL);
    CHECK(y == NULL);
    CHECK_EQ(rpcool_export_create(heap, "a", dat, 8, NULL, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_create(heap, NULL, dat, 8, NULL, &y), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_export_create(heap, "", dat, 8, NULL, &y), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_export_create(heap, "a/b", dat, 8, NULL, &y), RPCOOL_E_BADNAME);
    char longname[RPCOOL_EXPORT_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_EQ(rpcool_export_create(heap, longname, dat, 8, NULL, &y), RPCOOL_E_NAMELONG);
    CHECK_EQ(rpcool_export_open(heap, longname, &y), RPCOOL_E_NAMELONG);
    longname[RPCOOL_EXPORT_NAME_MAX] = 0; /* the longest name is fine */
    CHECK_EQ(rpcool_export_create(heap, longname, dat, 8, NULL, &y), 0);
    CHECK_EQ(rpcool_export_close(y), 0);
    CHECK_EQ(rpcool_export_create(heap, "data", dat, 8, NULL, &y), RPCOOL_E_EXPORTED);
    CHECK_EQ(rpcool_export_create(heap, "a", buf, sizeof buf, NULL, &y), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_create(heap, "a", dat, 0, NULL, &y), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_create(heap, "a", NULL, 8, NULL, &y), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_create(heap, "a", dat, (size_t)32 << 20, NULL, &y), RPCOOL_E_RANGE);
    rpcool_export_opts bad = {.nlocks = RPCOOL_EXPORT_MAX_LOCKS + 1};
    CHECK_EQ(rpcool_export_create(heap, "a", dat, 8, &bad, &y), RPCOOL_E_INVAL);
    rpcool_export_opts badr = {.remote = 7};
    CHECK_EQ(rpcool_export_create(heap, "a", dat, 8, &badr, &y), RPCOOL_E_INVAL);
#ifndef RPCOOL_WITH_RDMA
    rpcool_export_opts rem = {.remote = RPCOOL_REMOTE_READ};
    CHECK_EQ(rpcool_export_create(heap, "a", dat, 8, &rem, &y), RPCOOL_E_NOTSUP);
    CHECK_EQ(rpcool_export_open(heap, "a", &y), RPCOOL_E_NOEXPORT); /* nothing left behind */
    CHECK_EQ(rpcool_attach("rdma:data", NULL, (rpcool_remote **)&y), RPCOOL_E_NOTSUP);
#endif
    CHECK_EQ(rpcool_export_open(NULL, "data", &y), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_open(heap, "data", NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_open(heap, "nosuch", &y), RPCOOL_E_NOEXPORT);
    CHECK_EQ(rpcool_export_open(heap, "bad name", &y), RPCOOL_E_BADNAME);
    /* a root of that name that is no export */
    uint64_t *junk = (uint64_t *)shmheap_calloc(heap, 1, 256);
    CHECK_EQ(shmheap_root_set(heap, "rpcool.x.junk", junk), 0);
    CHECK_EQ(rpcool_export_open(heap, "junk", &y), RPCOOL_E_NOEXPORT);
    CHECK_EQ(shmheap_root_set(heap, "rpcool.x.junk", NULL), 0);
    shmheap_free(heap, junk);
    CHECK_EQ(rpcool_export_lock(NULL, 0, RPCOOL_LOCK_READ, &h), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_lock(x, 0, RPCOOL_LOCK_READ, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_lock(x, 8, RPCOOL_LOCK_READ, &h), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_lock(x, 0, 2, &h), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_unlock(NULL), RPCOOL_E_INVAL);
    memset(&h, 0, sizeof h);
    CHECK_EQ(rpcool_export_unlock(&h), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_lock(x, 7, RPCOOL_LOCK_WRITE, &h), 0);
    CHECK_EQ(rpcool_export_unlock(&h), 0);
    CHECK_EQ(rpcool_export_unlock(&h), RPCOOL_E_INVAL); /* twice */
    CHECK_EQ(rpcool_export_read(NULL, 0, dat, buf, 8), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_read(x, 8, dat, buf, 8), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_read(x, 0, dat, NULL, 8), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_export_read(x, 0, (char *)dat - 1, buf, 8), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_read(x, 0, (char *)(dat + 1) - 7, buf, 8), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_read(x, 0, (char *)(dat + 1) - 8, buf, 8), 0);
    CHECK_EQ(rpcool_export_read(x, 0, dat, buf, SIZE_MAX), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_read(x, 0, buf, buf, 1), RPCOOL_E_RANGE);
    CHECK_EQ(rpcool_export_close(NULL), RPCOOL_E_INVAL);
    CHECK(rpcool_export_base(NULL, NULL) == NULL);
    CHECK_EQ(rpcool_export_nlocks(NULL), 0);
    /* every code has its own text */
    int codes[] = {RPCOOL_E_RANGE, RPCOOL_E_PERM, RPCOOL_E_NOEXPORT, RPCOOL_E_EXPORTED};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        CHECKF(strcmp(rpcool_strerror(codes[i]), "unknown error code") != 0, "%d", codes[i]);
    teardown(x);
}

struct thr {
    rpcool_export *x;
    int id;
};

static void *thr_add(void *arg)
{
    struct thr *t = (struct thr *)arg;
    for (int i = 0; i < ITERS; i++) locked_add(t->x, (uint32_t)((i + t->id) & 3));
    return NULL;
}

/* Threads of one process, half on the exporter's handle, half on an opener's. */
static void t_threads_count(void)
{
    rpcool_export *x = setup(NULL), *y = NULL;
    CHECK_EQ(rpcool_export_open(heap, "data", &y), 0);
    pthread_t th[4];
    struct thr a[4];
    for (int i = 0; i < 4; i++) {
        a[i].x = i & 1 ? y : x;
        a[i].id = i;
        pthread_create(&th[i], NULL, thr_add, &a[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++) sum += dat->counter[i];
    CHECKF(sum == 4u * ITERS && dat->violations == 0, "sum %llu of %d, %llu violations",
           (unsigned long long)sum, 4 * ITERS, (unsigned long long)dat->violations);
    for (int i = 0; i < 4; i++) CHECK_EQ(dat->counter[i], ITERS);
    CHECK_EQ(rpcool_export_close(y), 0);
    teardown(x);
}

/* A process of the pod: its own heap handle and export handle. */
static rpcool_export *child_open(shmheap **h)
{
    if (shmheap_open(hname, NULL, h)) _exit(20);
    rpcool_export *x = NULL;
    if (rpcool_export_open(*h, "data", &x)) _exit(21);
    return x;
}

static void t_processes_count(void)
{
    rpcool_export *x = setup(NULL);
    pid_t pid[NPROC];
    for (int p = 0; p < NPROC; p++) {
        fflush(stdout);
        if ((pid[p] = fork()) == 0) {
            shmheap *h;
            rpcool_export *y = child_open(&h);
            for (int i = 0; i < ITERS; i++) locked_add(y, (uint32_t)((i + p) & 3));
            rpcool_export_close(y);
            shmheap_close(h);
            _exit(0);
        }
    }
    for (int i = 0; i < ITERS; i++) locked_add(x, (uint32_t)(i & 3)); /* the exporter too */
    for (int p = 0; p < NPROC; p++) {
        int st = 0;
        waitpid(pid[p], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", p, st);
    }
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++) sum += dat->counter[i];
    CHECKF(sum == (NPROC + 1u) * ITERS && dat->violations == 0, "sum %llu of %d, %llu violations",
           (unsigned long long)sum, (NPROC + 1) * ITERS, (unsigned long long)dat->violations);
    teardown(x);
}

/* Writers (processes) rewrite the record under lock 5 in WRITE mode, word by word; readers
   (processes) copy it with rpcool_export_read and count copies whose words differ. */
static void t_optimistic_no_torn(void)
{
    rpcool_export *x = setup(NULL);
    int nw = 2, nr = 2;
    pid_t pid[4];
    int fd[4][2];
    for (int p = 0; p < nw + nr; p++) {
        if ((pid[p] = t_fork_pipe(fd[p])) == 0) {
            shmheap *h;
            rpcool_export *y = child_open(&h);
            uint64_t out[3] = {0, 0, 0}; /* reads or writes, torn, reads that saw a change */
            if (p < nw) {
                for (uint64_t k = 1; k <= (uint64_t)OPT_WRITES; k++) {
                    rpcool_xhold hd;
                    if (rpcool_export_lock(y, 5, RPCOOL_LOCK_WRITE, &hd) < 0) _exit(22);
                    uint64_t v = dat->rec[0] + 1;
                    for (int w = 0; w < WORDS; w++) {
                        dat->rec[w] = v;
                        if ((w & 15) == 0) sched_yield(); /* a reader may come in meanwhile */
                    }
                    rpcool_export_unlock(&hd);
                    out[0]++;
                }
            } else {
                uint64_t copy[WORDS], last = 0;
                while (!__atomic_load_n(&dat->stop, __ATOMIC_ACQUIRE)) {
                    int rc = rpcool_export_read(y, 5, dat->rec, copy, sizeof copy);
                    if (rc) _exit(23);
                    out[0]++;
                    for (int w = 1; w < WORDS; w++)
                        if (copy[w] != copy[0]) { out[1]++; break; }
                    if (copy[0] != last) out[2]++;
                    last = copy[0];
                }
            }
            if (write(fd[p][1], out, sizeof out) != sizeof out) _exit(24);
            rpcool_export_close(y);
            shmheap_close(h);
            _exit(0);
        }
    }
    uint64_t res[4][3];
    for (int p = 0; p < nw; p++)
        CHECK(read(fd[p][0], res[p], sizeof res[p]) == sizeof res[p]);
    __atomic_store_n(&dat->stop, 1, __ATOMIC_RELEASE);
    for (int p = nw; p < nw + nr; p++)
        CHECK(read(fd[p][0], res[p], sizeof res[p]) == sizeof res[p]);
    for (int p = 0; p < nw + nr; p++) {
        int st = 0;
        close(fd[p][0]);
        waitpid(pid[p], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", p, st);
    }
    uint64_t reads = 0, torn = 0, changes = 0;
    for (int p = nw; p < nw + nr; p++) reads += res[p][0], torn += res[p][1], changes += res[p][2];
    CHECKF(dat->rec[0] == (uint64_t)nw * OPT_WRITES, "record %llu, %d writes",
           (unsigned long long)dat->rec[0], nw * OPT_WRITES);
    CHECKF(torn == 0, "%llu of %llu optimistic reads were torn", (unsigned long long)torn,
           (unsigned long long)reads);
    CHECKF(reads > 0 && changes > 1, "the readers read %llu times, saw %llu changes",
           (unsigned long long)reads, (unsigned long long)changes);
    teardown(x);
}

/* A writer killed inside its critical section: the next holder gets RPCOOL_OWNERDEAD; until
   then an optimistic read of that lock times out (the version stays odd), after it works. */
static void t_owner_dead(void)
{
    rpcool_export *x = setup(NULL);
    int fd[2];
    pid_t pid = t_fork_pipe(fd);
    if (pid == 0) {
        shmheap *h;
        rpcool_export *y = child_open(&h);
        rpcool_xhold hd;
        if (rpcool_export_lock(y, 2, RPCOOL_LOCK_WRITE, &hd)) _exit(25);
        dat->counter[2] = 99;
        if (write(fd[1], "r", 1) != 1) _exit(26);
        pause();
        _exit(0);
    }
    CHECK_EQ(t_ready_wait(fd[0]), 0);
    t_kill_wait(pid);
    uint64_t v = 0;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_export_read(x, 2, &dat->counter[2], &v, sizeof v), RPCOOL_E_TIMEOUT);
    uint64_t ms = (rcp__now_ns() - t0) / 1000000;
    CHECKF(ms >= RPCOOL_EXPORT_DEFAULT_READ_MS && ms < 3 * RPCOOL_EXPORT_DEFAULT_READ_MS,
           "the read gave up after %llu ms", (unsigned long long)ms);
    CHECK_EQ(rpcool_export_read(x, 3, &dat->counter[3], &v, sizeof v), 0); /* other locks */
    rpcool_xhold hd;
    CHECK_EQ(rpcool_export_lock(x, 2, RPCOOL_LOCK_READ, &hd), RPCOOL_OWNERDEAD);
    CHECK_EQ(rpcool_export_unlock(&hd), 0);
    CHECK_EQ(rpcool_export_read(x, 2, &dat->counter[2], &v, sizeof v), 0);
    CHECK_EQ(v, 99);
    CHECK_EQ(rpcool_export_lock(x, 2, RPCOOL_LOCK_WRITE, &hd), 0); /* the news was given once */
    CHECK_EQ(rpcool_export_unlock(&hd), 0);
    teardown(x);
}

/* An exporter killed: its pod keeps the data and the locks; a new create of the name takes the
   export over (the old one withdrawn), the old one's handles then say RPCOOL_E_WITHDRAWN. */
static void t_exporter_dead(void)
{
    rpcool_export *x = setup(NULL), *y = NULL, *z = NULL;
    int fd[2];
    pid_t pid = t_fork_pipe(fd);
    if (pid == 0) {
        shmheap *h;
        rpcool_export *e;
        if (shmheap_open(hname, NULL, &h)) _exit(20);
        if (rpcool_export_create(h, "other", dat->rec, sizeof dat->rec, NULL, &e)) _exit(21);
        if (write(fd[1], "r", 1) != 1) _exit(26);
        pause();
        _exit(0);
    }
    CHECK_EQ(t_ready_wait(fd[0]), 0);
    CHECK_EQ(rpcool_export_open(heap, "other", &y), 0);
    CHECK_EQ(rpcool_export_create(heap, "other", dat->rec, 8, NULL, &z), RPCOOL_E_EXPORTED);
    t_kill_wait(pid);
    rpcool_xhold hd;
    CHECK_EQ(rpcool_export_lock(y, 1, RPCOOL_LOCK_WRITE, &hd), 0); /* the pod goes on */
    CHECK_EQ(rpcool_export_unlock(&hd), 0);
    CHECK_EQ(live_files(), 2);
    CHECK_EQ(rpcool_export_create(heap, "other", dat->rec, 8, NULL, &z), 0);
    CHECK_EQ(rpcool_export_lock(y, 1, RPCOOL_LOCK_WRITE, &hd), RPCOOL_E_WITHDRAWN);
    CHECK_EQ(live_files(), 3);
    CHECK_EQ(rpcool_export_close(y), 0); /* the old record goes with its last handle */
    CHECK_EQ(live_files(), 2);
    CHECK_EQ(rpcool_export_close(z), 0);
    teardown(x);
}

/* The manual's own usage: a forked child opens the export again. Once that child has closed its
   handle and the exporter has closed, the record and its lock table are freed while the child
   still lives (the child does not keep the exporter's liveness locks). */
static void t_fork_child_lets_go(void)
{
    rpcool_export *x = setup(NULL);
    int fd[2];
    pid_t pid = t_fork_pipe(fd);
    if (pid == 0) {
        shmheap *h;
        rpcool_export *y = child_open(&h);
        if (rpcool_export_close(y)) _exit(22);
        if (write(fd[1], "r", 1) != 1) _exit(26);
        pause();
        _exit(0);
    }
    CHECK_EQ(t_ready_wait(fd[0]), 0);
    CHECK_EQ(rpcool_export_close(x), 0);
    CHECKF(live_files() == 0, "the record and its lock table stay while a forked child lives");
    t_kill_wait(pid);
    teardown(NULL);
}

/* An exporter SIGKILLed while a child it forked lives on: a new create of the name takes the
   export over (the child does not hold the exporter's liveness lock). */
static void t_fork_exporter_dead(void)
{
    rpcool_export *x = setup(NULL), *z = NULL;
    int fd[2];
    pid_t pid = t_fork_pipe(fd);
    if (pid == 0) {
        shmheap *h;
        rpcool_export *e;
        if (shmheap_open(hname, NULL, &h)) _exit(20);
        if (rpcool_export_create(h, "other", dat->rec, sizeof dat->rec, NULL, &e)) _exit(21);
        pid_t g = fork();
        if (g == 0) { /* lives on after its parent is killed; ends by itself. It says so itself:
                         its fork handlers have run (it holds no inherited lock) once it runs */
            pid_t me = getpid();
            if (write(fd[1], &me, sizeof me) != sizeof me) _exit(26);
            sleep(5);
            _exit(0);
        }
        if (g < 0) _exit(26);
        pause();
        _exit(0);
    }
    pid_t g = -1;
    CHECK(read(fd[0], &g, sizeof g) == sizeof g);
    close(fd[0]);
    CHECK_EQ(rpcool_export_create(heap, "other", dat->rec, 8, NULL, &z), RPCOOL_E_EXPORTED);
    t_kill_wait(pid);
    CHECK(g > 0 && kill(g, 0) == 0); /* the exporter's child lives */
    int rc = rpcool_export_create(heap, "other", dat->rec, 8, NULL, &z);
    CHECKF(rc == 0, "a create after the exporter died, its child alive: %d (%s)", rc,
           rpcool_strerror(rc));
    if (z) CHECK_EQ(rpcool_export_close(z), 0);
    if (g > 0) kill(g, SIGKILL); /* not our child: init reaps it */
    teardown(x);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(t_basic);
    RUN(t_bad_input);
    RUN(t_threads_count);
    RUN(t_processes_count);
    RUN(t_optimistic_no_torn);
    RUN(t_owner_dead);
    RUN(t_exporter_dead);
    RUN(t_fork_child_lets_go);
    RUN(t_fork_exporter_dead);
    return T_DONE();
}
