// TSAN
/* impl/podlease.h, the lease table kept in a shared device, with a file in /tmp as the device:
   processes taking and releasing slots (exact counts, one holder per slot), a full table, a
   SIGKILLed holder judged lapsed within the bound (measured), a SIGSTOPped holder recovered and
   fenced when it resumes (a counter shows it did not act after), a renewing thread keeping its
   lease alive (also under TSan), corrupt tables and slots refused, and two "hosts": process
   trees in their own mount, pid and IPC namespaces, each with its own /dev/shm, sharing only the
   device file, their pids colliding (as root; skipped otherwise). */
#include "impl/podlease.h"
#include "t.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>

#define BOUND_MS 300u          /* the bound the timing tests configure */
#define SLACK_MS 700u          /* scheduling slack on a loaded machine, past the bound */
#define NPROC 8
#define RACE_SLOTS 2 /* fewer slots than processes: they race for them */
#ifdef T_TSAN
#define ROUNDS 50
#else
#define ROUNDS 20000
#endif

static char t_dir[64];

/* A zeroed device file of len bytes, mapped shared; its path in path. */
static void *dev_new(char *path, size_t pathlen, size_t len)
{
    static int n;
    snprintf(path, pathlen, "%s/dev%d", t_dir, n++);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    void *p = ftruncate(fd, (off_t)len) ? MAP_FAILED :
              mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static void *dev_open(const char *path, size_t len)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static uint64_t ms_since(uint64_t t0) { return (rcp__now_ns() - t0) / 1000000u; }

/* Poll slot until rcp__lease_judge says want or timeout_ms passes; returns the last judgement. */
static int judge_until(struct rcp__lease *l, uint32_t slot, struct rcp__lease_seen *seen, int want,
                       unsigned timeout_ms)
{
    uint64_t t0 = rcp__now_ns();
    int j;
    while ((j = rcp__lease_judge(l, slot, seen)) != want && ms_since(t0) < timeout_ms)
        usleep(1000);
    return j;
}

/* ---- many processes take and release slots ------------------------------------------------ */

struct counts {
    uint32_t inside[8];   /* holders of each slot right now: never above 1 */
    uint32_t violations, takes, full, bad;
};

static void take_release_counts(void)
{
    char path[96];
    size_t len = 8192;
    void *mem = dev_new(path, sizeof path, len);
    struct counts *c = (struct counts *)((char *)mem + 4096);
    struct rcp__lease_opts o = {.nslots = RACE_SLOTS, .bound_ms = 0};
    struct rcp__lease l;
    CHECK(mem);
    if (!mem) return;
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &o), 0);
    pid_t kids[NPROC];
    for (int k = 0; k < NPROC; k++) {
        fflush(stdout);
        kids[k] = fork();
        if (kids[k] == 0) {
            struct rcp__lease m;
            if (rcp__lease_attach(&m, mem, len, NULL)) _exit(2);
            for (int r = 0; r < ROUNDS; r++) {
                int s;
                for (unsigned spin = 0; (s = rcp__lease_take(&m, "local")) == -ENOSPC; spin++) {
                    rcp__fetch_add(&c->full, 1u); /* spin a while: takers meet at a release */
                    if (spin % 1024 == 1023) sched_yield();
                }
                if (s < 0 || s >= RACE_SLOTS) { rcp__fetch_add(&c->bad, 1u); continue; }
                if (rcp__fetch_add(&c->inside[s], 1u) != 0) rcp__fetch_add(&c->violations, 1u);
                rcp__fetch_add(&c->takes, 1u);
                if (rcp__lease_check(&m)) rcp__fetch_add(&c->bad, 1u);
                if (r % 7 == 0) sched_yield();
                rcp__fetch_add(&c->inside[s], (uint32_t)-1);
                if (rcp__lease_release(&m)) rcp__fetch_add(&c->bad, 1u);
            }
            rcp__lease_detach(&m);
            _exit(0);
        }
    }
    for (int k = 0; k < NPROC; k++) {
        int st = -1;
        waitpid(kids[k], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %d", k, st);
    }
    CHECK_EQ(c->takes, NPROC * ROUNDS);
    CHECK_EQ(c->violations, 0);
    CHECK_EQ(c->bad, 0);
    /* every take bumped its slot's epoch by one, every release kept it: the epochs add up */
    uint64_t epochs = 0;
    for (uint32_t i = 0; i < RACE_SLOTS; i++) {
        struct rcp__lease_who w;
        CHECK_EQ(rcp__lease_read(&l, i, &w), 0);
        CHECK_EQ(rcp__lease_w_state(w.word), RCP__LEASE_FREE);
        epochs += rcp__lease_w_epoch(w.word);
    }
    CHECK_EQ(epochs, NPROC * ROUNDS);
    printf("# %d processes, %d slots: %u takes, %u times full\n", NPROC, RACE_SLOTS, c->takes,
           c->full);
    rcp__lease_detach(&l);
    munmap(mem, len);
    unlink(path);
}

/* ---- a full table ------------------------------------------------------------------------ */

static void table_full(void)
{
    char path[96];
    size_t len = 4096;
    void *mem = dev_new(path, sizeof path, len);
    struct rcp__lease_opts o = {.nslots = 3, .bound_ms = 0};
    struct rcp__lease l[4];
    CHECK(mem);
    if (!mem) return;
    for (int i = 0; i < 4; i++) CHECK_EQ(rcp__lease_attach(&l[i], mem, len, &o), 0);
    CHECK_EQ(l[0].nslots, 3);
    CHECK_EQ(l[0].bound_ms, RCP__LEASE_DEFAULT_BOUND_MS);
    for (int i = 0; i < 3; i++) CHECK_EQ(rcp__lease_take(&l[i], NULL), i);
    CHECK_EQ(rcp__lease_take(&l[0], NULL), -EALREADY);
    CHECK_EQ(rcp__lease_take(&l[3], NULL), -ENOSPC);
    CHECK_EQ(rcp__lease_check(&l[3]), -ENOENT);
    CHECK_EQ(rcp__lease_release(&l[3]), -ENOENT);
    uint64_t tag1 = rcp__lease_tag(&l[1]);
    CHECK(rcp__lease_tag_alive(&l[0], tag1));
    CHECK_EQ(rcp__lease_release(&l[1]), 0);
    CHECK(!rcp__lease_tag_alive(&l[0], tag1));
    CHECK_EQ(rcp__lease_take(&l[3], NULL), 1);
    CHECK(rcp__lease_tag(&l[3]) != tag1); /* the same slot, a new epoch: a new tag */
    struct rcp__lease_who w;
    char host[RCP__LEASE_HOST_LEN] = {0};
    gethostname(host, sizeof host - 1);
    CHECK_EQ(rcp__lease_read(&l[0], 1, &w), 0);
    CHECK_EQ(w.pid, getpid());
    CHECK(!strcmp(w.host, host));
    CHECK_EQ(strlen(w.boot), 36); /* a boot_id's text */
    for (int i = 0; i < 4; i++) rcp__lease_detach(&l[i]);
    CHECK_EQ(rcp__lease_w_state(((struct rcp__lease_slot *)((char *)mem + 64))[0].word),
             RCP__LEASE_FREE);
    munmap(mem, len);
    unlink(path);
}

/* ---- a SIGKILLed holder is seen dead within the bound ----------------------------------- */

static void killed_run(unsigned bound_ms)
{
    char path[96];
    size_t len = 4096;
    void *mem = dev_new(path, sizeof path, len);
    struct rcp__lease_opts o = {.nslots = 4, .bound_ms = bound_ms};
    struct rcp__lease l;
    CHECK(mem);
    if (!mem) return;
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &o), 0);
    unsigned bound = l.bound_ms, period = l.period_ms;
    int p[2];
    pid_t kid = t_fork_pipe(p);
    if (kid == 0) {
        struct rcp__lease m;
        if (rcp__lease_attach(&m, mem, len, NULL) || rcp__lease_take(&m, "holder") != 0 ||
            rcp__lease_start(&m))
            _exit(2);
        if (write(p[1], "x", 1) != 1) _exit(3);
        for (;;) pause();
    }
    CHECK_EQ(t_ready_wait(p[0]), 0);
    struct rcp__lease_seen seen = {0, 0};
    /* alive for three bounds: never judged lapsed while its thread renews */
    uint64_t t0 = rcp__now_ns(), changed = t0, last = 0;
    int lapsed = 0;
    while (ms_since(t0) < 3 * bound) {
        int j = rcp__lease_judge(&l, 0, &seen);
        if (seen.word != last) last = seen.word, changed = rcp__now_ns();
        CHECKF(j == RCP__LEASE_LIVE, "judged %d while alive, after %llu ms", j,
               (unsigned long long)ms_since(t0));
        if (j != RCP__LEASE_LIVE && ++lapsed > 3) break;
        usleep(1000);
    }
    kill(kid, SIGKILL);
    uint64_t tk = rcp__now_ns();
    waitpid(kid, NULL, 0);
    int j; /* as judge_until, noting when this observer last saw the word change */
    while ((j = rcp__lease_judge(&l, 0, &seen)) != RCP__LEASE_LAPSED && ms_since(tk) < bound + 5000) {
        if (seen.word != last) last = seen.word, changed = rcp__now_ns();
        usleep(1000);
    }
    uint64_t dt = ms_since(tk), quiet = ms_since(changed);
    printf("# bound %u ms (period %u): SIGKILLed holder judged lapsed after %llu ms\n", bound,
           period, (unsigned long long)dt);
    CHECK_EQ(j, RCP__LEASE_LAPSED);
    CHECKF(quiet >= bound, "lapsed %llu ms after its last change, before the bound",
           (unsigned long long)quiet);
    CHECKF(dt <= bound + SLACK_MS, "lapsed after %llu ms > bound %u + %u", (unsigned long long)dt,
           bound, SLACK_MS);
    /* recovery: one compare-and-swap wins; a second observer with the same view loses */
    struct rcp__lease_seen other = seen;
    uint64_t tag = rcp__lease_tag_of(0, rcp__lease_w_epoch(seen.word));
    CHECK(rcp__lease_tag_alive(&l, tag));
    CHECK_EQ(rcp__lease_recover(&l, 0, &seen), 0);
    CHECK_EQ(rcp__lease_recover(&l, 0, &other), -EAGAIN);
    CHECK_EQ(rcp__lease_recover(&l, 0, &seen), -EINVAL); /* seen is now a free slot */
    CHECK(!rcp__lease_tag_alive(&l, tag));
    CHECK_EQ(rcp__lease_judge(&l, 0, &seen), RCP__LEASE_FREE);
    CHECK_EQ(rcp__lease_take(&l, NULL), 0); /* the slot is free again, at a later epoch */
    CHECK(rcp__lease_tag(&l) != tag);
    rcp__lease_detach(&l);
    munmap(mem, len);
    unlink(path);
}

static void killed_seen_within_bound(void) { killed_run(BOUND_MS); }
static void killed_seen_default_bound(void) { killed_run(0); }

/* ---- a SIGSTOPped holder is recovered, resumes and finds itself fenced ------------------- */

/* The holder's act: one compare-and-swap on a cell of (tag:32 | count:32) that carries its
 * owner's tag, after a check; acts counts the successful ones. */
struct cell {
    uint64_t cell;
    uint32_t acts, fenced, release_rc, gave_up;
};

static int holder_acts(struct rcp__lease *m, struct cell *c)
{
    uint32_t mine = (uint32_t)rcp__lease_tag(m);
    uint64_t zero = 0;
    rcp__cas(&c->cell, &zero, (uint64_t)mine << 32);
    uint64_t t0 = rcp__now_ns();
    int rc;
    while (!(rc = rcp__lease_check(m))) {
        uint64_t cur = rcp__load(&c->cell);
        if ((uint32_t)(cur >> 32) == mine && rcp__cas(&c->cell, &cur, cur + 1))
            rcp__store(&c->acts, rcp__load(&c->acts) + 1);
        if (ms_since(t0) > 30000) { rcp__store(&c->gave_up, 1u); break; }
        usleep(200);
    }
    rcp__store(&c->fenced, (uint32_t)(rc == RCP__LEASE_E_FENCED && rcp__lease_is_fenced(m)));
    rcp__store(&c->release_rc, (uint32_t)-rcp__lease_release(m));
    return 0;
}

/* The recoverer's side once a lease lapsed: recover it, then take the cell from its old tag. */
static int take_over(struct rcp__lease *l, uint32_t slot, struct rcp__lease_seen *seen,
                     struct cell *c, uint64_t *count)
{
    uint32_t old = (uint32_t)rcp__lease_tag_of(slot, rcp__lease_w_epoch(seen->word));
    if (rcp__lease_recover(l, slot, seen)) return -1;
    uint64_t cur = rcp__load(&c->cell);
    if ((uint32_t)(cur >> 32) != old) return -2;
    uint64_t nw = (uint64_t)(uint32_t)rcp__lease_tag(l) << 32 | (uint32_t)cur;
    if (!rcp__cas(&c->cell, &cur, nw)) return -3;
    *count = (uint32_t)cur;
    return 0;
}

static void stopped_holder_fenced(void)
{
    char path[96];
    size_t len = 8192;
    void *mem = dev_new(path, sizeof path, len);
    struct cell *c = (struct cell *)((char *)mem + 4096);
    struct rcp__lease_opts o = {.nslots = 4, .bound_ms = BOUND_MS};
    struct rcp__lease l;
    CHECK(mem);
    if (!mem) return;
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &o), 0);
    int p[2];
    pid_t kid = t_fork_pipe(p);
    if (kid == 0) {
        struct rcp__lease m;
        if (rcp__lease_attach(&m, mem, len, NULL) || rcp__lease_take(&m, "holder") != 0 ||
            rcp__lease_start(&m))
            _exit(2);
        if (write(p[1], "x", 1) != 1) _exit(3);
        _exit(holder_acts(&m, c));
    }
    CHECK_EQ(t_ready_wait(p[0]), 0);
    CHECK_EQ(rcp__lease_take(&l, "recoverer"), 1);
    CHECK_EQ(rcp__lease_start(&l), 0);
    usleep(3 * BOUND_MS * 1000); /* it acts meanwhile, and its lease stays live */
    struct rcp__lease_seen seen = {0, 0};
    CHECK_EQ(rcp__lease_judge(&l, 0, &seen), RCP__LEASE_LIVE);
    CHECK(rcp__load(&c->acts) > 0);
    kill(kid, SIGSTOP);
    uint64_t ts = rcp__now_ns();
    int st = 0;
    waitpid(kid, &st, WUNTRACED);
    CHECK(WIFSTOPPED(st));
    int j = judge_until(&l, 0, &seen, RCP__LEASE_LAPSED, BOUND_MS + 5000);
    uint64_t dt = ms_since(ts);
    CHECK_EQ(j, RCP__LEASE_LAPSED);
    CHECKF(dt <= BOUND_MS + SLACK_MS, "lapsed after %llu ms", (unsigned long long)dt);
    uint64_t count = 0;
    CHECK_EQ(take_over(&l, 0, &seen, c, &count), 0);
    usleep(2 * BOUND_MS * 1000); /* still stopped, well past its lease */
    kill(kid, SIGCONT);
    waitpid(kid, &st, 0);
    printf("# stopped holder lapsed after %llu ms; %llu acts before the take-over\n",
           (unsigned long long)dt, (unsigned long long)count);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECK_EQ(c->gave_up, 0);
    CHECK_EQ(c->fenced, 1);                      /* its check said -ESTALE */
    CHECK_EQ(c->release_rc, ESTALE);             /* and its release touched nothing */
    CHECK_EQ(c->acts, count);                    /* no act after the take-over */
    CHECK_EQ(c->cell, (uint64_t)(uint32_t)rcp__lease_tag(&l) << 32 | count);
    struct rcp__lease_who w;
    CHECK_EQ(rcp__lease_read(&l, 0, &w), 0);
    CHECK_EQ(w.word, rcp__lease_w_make(RCP__LEASE_FREE, 2, 0)); /* recovered: epoch 1 -> 2 */
    CHECK_EQ(rcp__lease_check(&l), 0);
    rcp__lease_detach(&l);
    munmap(mem, len);
    unlink(path);
}

/* ---- threads: a renewing thread against checks and an observer (TSan) ------------------- */

struct watch_arg {
    struct rcp__lease *l;
    uint32_t stop, lapsed, looks;
};

static void *watcher(void *arg)
{
    struct watch_arg *a = (struct watch_arg *)arg;
    struct rcp__lease_seen seen = {0, 0};
    while (!rcp__load(&a->stop)) {
        if (rcp__lease_judge(a->l, 0, &seen) != RCP__LEASE_LIVE) rcp__fetch_add(&a->lapsed, 1u);
        rcp__fetch_add(&a->looks, 1u);
        usleep(500);
    }
    return NULL;
}

static void threads_renew_and_fence(void)
{
    char path[96];
    size_t len = 4096;
    void *mem = dev_new(path, sizeof path, len);
    struct rcp__lease_opts o = {.nslots = 4, .bound_ms = BOUND_MS};
    struct rcp__lease a, b, obs;
    CHECK(mem);
    if (!mem) return;
    CHECK_EQ(rcp__lease_attach(&a, mem, len, &o), 0);
    CHECK_EQ(rcp__lease_attach(&b, mem, len, &o), 0);
    CHECK_EQ(rcp__lease_attach(&obs, mem, len, &o), 0);
    CHECK_EQ(rcp__lease_take(&a, "a"), 0);
    CHECK_EQ(rcp__lease_start(&a), 0);
    CHECK_EQ(rcp__lease_start(&a), -EALREADY);
    struct watch_arg wa = {&obs, 0, 0, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, watcher, &wa), 0);
    uint64_t t0 = rcp__now_ns();
    int bad = 0;
    while (ms_since(t0) < 3 * BOUND_MS) { /* the holder checks while its thread renews */
        bad += rcp__lease_check(&a) != 0;
        usleep(200);
    }
    rcp__store(&wa.stop, 1u);
    pthread_join(t, NULL);
    CHECK_EQ(bad, 0);
    CHECK_EQ(wa.lapsed, 0);
    CHECK(wa.looks > 10);
    /* b takes a lease and never renews: lapsed, recovered, and then fenced */
    CHECK_EQ(rcp__lease_take(&b, "b"), 1);
    struct rcp__lease_seen seen = {0, 0};
    CHECK_EQ(rcp__lease_judge(&obs, 1, &seen), RCP__LEASE_LIVE);
    CHECK_EQ(rcp__lease_recover(&obs, 1, &seen), -EINVAL); /* not judged lapsed */
    CHECK_EQ(judge_until(&obs, 1, &seen, RCP__LEASE_LAPSED, BOUND_MS + 5000), RCP__LEASE_LAPSED);
    CHECK_EQ(rcp__lease_recover(&obs, 1, &seen), 0);
    CHECK(!rcp__lease_is_fenced(&b));
    b.renewed_ns = rcp__now_ns(); /* as if it had renewed just now: the check still sees it */
    CHECK_EQ(rcp__lease_check(&b), RCP__LEASE_E_FENCED);
    CHECK(rcp__lease_is_fenced(&b));
    CHECK_EQ(rcp__lease_renew(&b), RCP__LEASE_E_FENCED);
    CHECK_EQ(rcp__lease_check(&b), RCP__LEASE_E_FENCED); /* and stays so */
    CHECK_EQ(rcp__lease_release(&b), RCP__LEASE_E_FENCED);
    /* a late renewal wins against a recovery that comes after it: c stalls past the bound,
       renews before anyone recovers, and the recovery loses */
    struct rcp__lease c;
    CHECK_EQ(rcp__lease_attach(&c, mem, len, &o), 0);
    CHECK_EQ(rcp__lease_take(&c, "c"), 1);
    seen.since_ns = 0;
    CHECK_EQ(judge_until(&obs, 1, &seen, RCP__LEASE_LAPSED, BOUND_MS + 5000), RCP__LEASE_LAPSED);
    CHECK_EQ(rcp__lease_check(&c), 0);
    CHECK_EQ(rcp__lease_recover(&obs, 1, &seen), -EAGAIN);
    CHECK_EQ(rcp__lease_check(&c), 0);
    rcp__lease_detach(&c);
    rcp__lease_detach(&a);
    rcp__lease_detach(&b);
    rcp__lease_detach(&obs);
    munmap(mem, len);
    unlink(path);
}

/* ---- corrupt tables and slots ------------------------------------------------------------ */

static void corrupt_rejected(void)
{
    char path[96];
    size_t len = 4096;
    void *mem = dev_new(path, sizeof path, len);
    struct rcp__lease_hdr *h = (struct rcp__lease_hdr *)mem;
    struct rcp__lease_slot *s = (struct rcp__lease_slot *)(h + 1);
    struct rcp__lease_opts o = {.nslots = 8, .bound_ms = 100};
    struct rcp__lease l;
    CHECK(mem);
    if (!mem) return;
    CHECK_EQ(rcp__lease_attach(&l, mem, 100, &o), -EINVAL); /* 8 slots do not fit in 100 bytes */
    struct rcp__lease_opts bad = {.nslots = 0, .bound_ms = 1};
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &bad), -EINVAL);
    CHECK_EQ(h->magic, 0); /* a refused format wrote nothing */
    CHECK_EQ(rcp__lease_attach(&l, (char *)mem + 8, len - 8, &o), -EINVAL); /* misaligned */
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &o), 0);
    rcp__lease_detach(&l);
    CHECK_EQ(rcp__lease_attach(&l, mem, len, &bad), 0); /* formatted: its opts do not apply */
    CHECK_EQ(l.nslots, 8);
    CHECK_EQ(l.bound_ms, 100);
    rcp__lease_detach(&l);
    struct rcp__lease_hdr good = *h;
    struct { const char *what; int rc; } cases[] = {
        {"magic", -EBADMSG}, {"layout", -EPROTO}, {"slot_size", -EBADMSG},
        {"nslots huge", -EBADMSG}, {"nslots 0", -EBADMSG}, {"nslots past len", -EBADMSG},
        {"bound 0", -EBADMSG}, {"bound huge", -EBADMSG}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        *h = good;
        switch (i) {
        case 0: h->magic = 0x1234; break;
        case 1: h->layout = 99; break;
        case 2: h->slot_size = 8; break;
        case 3: h->nslots = 0xffffffffu; break;
        case 4: h->nslots = 0; break;
        case 5: h->nslots = 30; break; /* 30 * 192 > 4096 */
        case 6: h->bound_ms = 0; break;
        default: h->bound_ms = 0xffffffffu; break;
        }
        int rc = rcp__lease_attach(&l, mem, len, NULL);
        CHECKF(rc == cases[i].rc, "%s: %d, expected %d", cases[i].what, rc, cases[i].rc);
        if (!rc) rcp__lease_detach(&l);
    }
    *h = good;
    CHECK_EQ(rcp__lease_attach(&l, mem, len, NULL), 0);
    /* a slot in a state no writer makes, and garbage identity: judged corrupt, skipped */
    memset(&s[0], 0xff, sizeof s[0]);
    struct rcp__lease_seen seen = {0, 0};
    struct rcp__lease_who w;
    CHECK_EQ(rcp__lease_judge(&l, 0, &seen), -EBADMSG);
    CHECK_EQ(rcp__lease_read(&l, 0, &w), -EBADMSG);
    CHECK_EQ(strlen(w.host), RCP__LEASE_HOST_LEN - 1);
    CHECK_EQ(strlen(w.boot), RCP__LEASE_BOOT_LEN - 1);
    CHECK_EQ(rcp__lease_take(&l, "x"), 1);
    /* out of range indexes and tags */
    CHECK_EQ(rcp__lease_judge(&l, 8, &seen), -EINVAL);
    CHECK_EQ(rcp__lease_judge(&l, 0xffffffffu, &seen), -EINVAL);
    CHECK_EQ(rcp__lease_read(&l, 8, &w), -EINVAL);
    CHECK_EQ(rcp__lease_recover(&l, 8, &seen), -EINVAL);
    CHECK(!rcp__lease_tag_alive(&l, 0));
    CHECK(!rcp__lease_tag_alive(&l, 0xffff));
    CHECK(!rcp__lease_tag_alive(&l, rcp__lease_tag_of(9, 1)));
    CHECK(rcp__lease_tag_alive(&l, rcp__lease_tag(&l)));
    /* a hostile writer changes the header after the attach: the handle keeps its copies */
    h->nslots = 0xffffffffu;
    h->bound_ms = 1;
    CHECK_EQ(rcp__lease_judge(&l, 100, &seen), -EINVAL);
    CHECK_EQ(l.bound_ms, 100);
    struct rcp__lease more[8];
    int took = 0, full = 0;
    for (int i = 0; i < 8; i++) {
        memset(&more[i], 0, sizeof more[i]);
        more[i].hdr = l.hdr; /* as attached before the scribble */
        more[i].slots = l.slots;
        more[i].nslots = l.nslots;
        more[i].bound_ms = l.bound_ms;
        more[i].period_ms = l.period_ms;
        pthread_mutex_init(&more[i].mu, NULL);
        int rc = rcp__lease_take(&more[i], "y");
        took += rc >= 0 && rc < 8;
        full += rc == -ENOSPC;
    }
    CHECK_EQ(took, 6); /* 8 slots: one corrupt, one held */
    CHECK_EQ(full, 2);
    for (int i = 0; i < 8; i++) rcp__lease_detach(&more[i]);
    rcp__lease_detach(&l);
    /* a formatter that never finishes: -EBUSY after the wait */
    memset(mem, 0, len);
    h->magic = RCP__LEASE_FORMATTING;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rcp__lease_attach(&l, mem, len, NULL), -EBUSY);
    CHECK(ms_since(t0) >= RCP__LEASE_FORMAT_WAIT_MS);
    CHECK_EQ(rcp__lease_attach(NULL, mem, len, NULL), -EINVAL);
    CHECK_EQ(rcp__lease_take(NULL, NULL), -EINVAL);
    CHECK_EQ(rcp__lease_check(NULL), -EINVAL);
    munmap(mem, len);
    unlink(path);
}

/* ---- two hosts: namespaces that share only the device file ------------------------------ */

enum { H_A1, H_A2, H_B1, H_B2, H_B3, H_N };
struct hctl {
    uint32_t stage, ready, failed_line;
    uint32_t slot[H_N], pid[H_N];
    uint32_t own_shm[2], other_shm[2]; /* each host: its own marker seen, the other's */
    uint32_t pid1_both, pid2_both, hosts_seen;
    uint64_t kill_ms, stop_ms, count;
    uint32_t recovered_kill, recovered_stop;
    struct cell c;
};
#define HDEV_LEN 8192
#define HCTL(mem) ((struct hctl *)((char *)(mem) + 4096))
#define HFAIL(x) do { if (!(x)) { uint32_t z = 0; rcp__cas(&ctl->failed_line, &z, (uint32_t)__LINE__); \
    rcp__store(&ctl->stage, 99u); } } while (0)

static int stage_wait(struct hctl *ctl, uint32_t want)
{
    uint64_t t0 = rcp__now_ns();
    uint32_t s;
    while ((s = rcp__load(&ctl->stage)) < want) {
        if (ms_since(t0) > 30000) { HFAIL(0); return -1; }
        usleep(1000);
    }
    return s == 99u && want != 99u ? -1 : 0;
}

/* A process of a host: attach, take a lease, renew with a thread; its index in ctl. */
static int host_join(const char *dev, const char *host, int who, struct rcp__lease *l,
                     void **memp)
{
    void *mem = dev_open(dev, HDEV_LEN);
    struct rcp__lease_opts o = {.nslots = 8, .bound_ms = BOUND_MS};
    if (!mem) return -1;
    struct hctl *ctl = HCTL(mem);
    *memp = mem;
    int s = rcp__lease_attach(l, mem, 4096, &o) ? -1 : rcp__lease_take(l, host);
    HFAIL(s >= 0 && rcp__lease_start(l) == 0);
    if (s < 0) return -1;
    rcp__store(&ctl->slot[who], (uint32_t)s);
    rcp__store(&ctl->pid[who], (uint32_t)getpid());
    rcp__fetch_add(&ctl->ready, 1u);
    return 0;
}

static void shm_marks(struct hctl *ctl, int h)
{
    const char *mine = h ? "/dev/shm/podlease-B" : "/dev/shm/podlease-A";
    const char *other = h ? "/dev/shm/podlease-A" : "/dev/shm/podlease-B";
    struct stat st;
    rcp__store(&ctl->own_shm[h], (uint32_t)(stat(mine, &st) == 0));
    rcp__store(&ctl->other_shm[h], (uint32_t)(stat(other, &st) == 0));
}

static int host_a(const char *dev)
{
    struct rcp__lease l;
    void *mem;
    int fd = open("/dev/shm/podlease-A", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    pid_t a2 = fork(); /* before any thread, so that the pids are 1 and 2 */
    if (a2 == 0) {
        struct rcp__lease m;
        void *mm;
        if (host_join(dev, "hostA", H_A2, &m, &mm)) _exit(1);
        stage_wait(HCTL(mm), 7);
        rcp__lease_detach(&m);
        _exit(0);
    }
    if (host_join(dev, "hostA", H_A1, &l, &mem)) return 1;
    struct hctl *ctl = HCTL(mem);
    uint64_t t0 = rcp__now_ns();
    while (rcp__load(&ctl->ready) < H_N && ms_since(t0) < 30000) usleep(1000);
    HFAIL(rcp__load(&ctl->ready) == H_N);
    shm_marks(ctl, 0);
    /* the table as this host reads it: both hosts, pids 1 and 2 on each */
    int p1 = 0, p2 = 0, ha = 0, hb = 0;
    for (uint32_t i = 0; i < l.nslots; i++) {
        struct rcp__lease_who w;
        if (rcp__lease_read(&l, i, &w) || rcp__lease_w_state(w.word) != RCP__LEASE_HELD) continue;
        p1 += w.pid == 1;
        p2 += w.pid == 2;
        ha += !strcmp(w.host, "hostA");
        hb += !strcmp(w.host, "hostB");
    }
    ctl->pid1_both = p1 == 2;
    ctl->pid2_both = p2 == 2;
    ctl->hosts_seen = ha == 2 && hb == 3;
    /* a kill on B, judged from A */
    struct rcp__lease_seen seen = {0, 0};
    uint32_t b2 = ctl->slot[H_B2], b3 = ctl->slot[H_B3];
    HFAIL(rcp__lease_judge(&l, b2, &seen) == RCP__LEASE_LIVE);
    rcp__store(&ctl->stage, 1u);
    if (stage_wait(ctl, 2) == 0) {
        uint64_t tk = rcp__now_ns();
        int j = judge_until(&l, b2, &seen, RCP__LEASE_LAPSED, BOUND_MS + 5000);
        ctl->kill_ms = ms_since(tk);
        HFAIL(j == RCP__LEASE_LAPSED);
        ctl->recovered_kill = rcp__lease_recover(&l, b2, &seen) == 0;
        rcp__store(&ctl->stage, 3u);
    }
    /* a holder on B stopped past its lease: recovered from A, its cell taken over */
    if (stage_wait(ctl, 4) == 0) {
        seen.since_ns = 0;
        uint64_t ts = rcp__now_ns();
        int j = judge_until(&l, b3, &seen, RCP__LEASE_LAPSED, BOUND_MS + 5000);
        ctl->stop_ms = ms_since(ts);
        HFAIL(j == RCP__LEASE_LAPSED);
        ctl->recovered_stop = take_over(&l, b3, &seen, &ctl->c, &ctl->count) == 0;
        rcp__store(&ctl->stage, 5u);
    }
    if (stage_wait(ctl, 6) == 0) {
        HFAIL(rcp__lease_check(&l) == 0);
        rcp__store(&ctl->stage, 7u);
    }
    int st = 0;
    waitpid(a2, &st, 0);
    rcp__lease_detach(&l);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

static int host_b(const char *dev)
{
    struct rcp__lease l;
    void *mem;
    int fd = open("/dev/shm/podlease-B", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    int go[2]; /* the workers join once both are forked, so that the pids are 1, 2 and 3 */
    if (pipe(go)) return 1;
    char x;
    pid_t b2 = fork();
    if (b2 == 0) {
        close(go[1]);
        if (read(go[0], &x, 1) < 0) _exit(1);
        struct rcp__lease m;
        void *mm;
        if (host_join(dev, "hostB", H_B2, &m, &mm)) _exit(1);
        for (;;) pause();
    }
    pid_t b3 = fork();
    if (b3 == 0) {
        struct rcp__lease m;
        void *mm;
        close(go[1]);
        if (read(go[0], &x, 1) < 0) _exit(1);
        if (host_join(dev, "hostB", H_B3, &m, &mm)) _exit(1);
        _exit(holder_acts(&m, &HCTL(mm)->c));
    }
    close(go[0]);
    close(go[1]);
    if (host_join(dev, "hostB", H_B1, &l, &mem)) {
        kill(b2, SIGKILL);
        kill(b3, SIGKILL);
        return 1;
    }
    struct hctl *ctl = HCTL(mem);
    uint64_t t0 = rcp__now_ns();
    while (rcp__load(&ctl->ready) < H_N && ms_since(t0) < 30000) usleep(1000);
    shm_marks(ctl, 1);
    int st = 0, rc = 0;
    if (stage_wait(ctl, 1) == 0) {
        kill(b2, SIGKILL);
        waitpid(b2, NULL, 0);
        rcp__store(&ctl->stage, 2u);
    } else {
        kill(b2, SIGKILL);
        waitpid(b2, NULL, 0);
    }
    if (stage_wait(ctl, 3) == 0) {
        usleep(2 * BOUND_MS * 1000); /* it acts meanwhile */
        HFAIL(rcp__load(&ctl->c.acts) > 0);
        kill(b3, SIGSTOP);
        waitpid(b3, &st, WUNTRACED);
        rcp__store(&ctl->stage, 4u);
    }
    if (stage_wait(ctl, 5) == 0) usleep(2 * BOUND_MS * 1000); /* past its lease, still stopped */
    kill(b3, SIGCONT);
    if (rcp__load(&ctl->stage) == 99u) kill(b3, SIGKILL);
    waitpid(b3, &st, 0);
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
    if (rcp__load(&ctl->stage) == 5u) rcp__store(&ctl->stage, 6u);
    stage_wait(ctl, 7);
    rcp__lease_detach(&l);
    return rc;
}

/* A "host": a process tree in new mount, pid and IPC namespaces, with its own tmpfs on /dev/shm.
 * Returns the pid (in this namespace) of the process that waits for its init. */
static pid_t host_spawn(int (*fn)(const char *), const char *dev)
{
    fflush(stdout);
    fflush(stderr);
    pid_t a = fork();
    if (a != 0) return a;
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)) _exit(77);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m,mode=1777"))
        _exit(78);
    pid_t init = fork();
    if (init == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the test gave up on this host: its tree dies */
        _exit(getpid() == 1 ? fn(dev) : 79);
    }
    int st = 0;
    waitpid(init, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
}

static const char *hosts_skip(void)
{
    if (geteuid() != 0) return "needs root (new mount, pid and IPC namespaces)";
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) ? 1 : 0);
    int st = -1;
    waitpid(p, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? NULL
                                                  : "unshare(CLONE_NEWNS|NEWPID|NEWIPC) refused";
}

static void hosts_namespaces(void)
{
    char path[96];
    void *mem = dev_new(path, sizeof path, HDEV_LEN);
    CHECK(mem);
    if (!mem) return;
    struct hctl *ctl = HCTL(mem);
    pid_t a = host_spawn(host_a, path);
    pid_t b = host_spawn(host_b, path);
    int sa = -1, sb = -1;
    uint64_t t0 = rcp__now_ns();
    int done = 0;
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
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "host A status %d", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "host B status %d", sb);
    CHECKF(ctl->failed_line == 0, "a host failed at line %u (stage %u)", ctl->failed_line,
           ctl->stage);
    CHECK_EQ(ctl->pid[H_A1], 1);
    CHECK_EQ(ctl->pid[H_B1], 1);
    CHECK_EQ(ctl->pid[H_A2], 2);
    CHECK_EQ(ctl->pid[H_B2], 2);
    CHECK_EQ(ctl->pid[H_B3], 3);
    CHECK(ctl->pid1_both && ctl->pid2_both && ctl->hosts_seen);
    CHECK(ctl->own_shm[0] && ctl->own_shm[1]);
    CHECK(!ctl->other_shm[0] && !ctl->other_shm[1]); /* no common /dev/shm */
    CHECK(ctl->recovered_kill);
    CHECK(ctl->recovered_stop);
    CHECKF(ctl->kill_ms <= BOUND_MS + SLACK_MS, "kill seen after %llu ms",
           (unsigned long long)ctl->kill_ms);
    CHECKF(ctl->stop_ms <= BOUND_MS + SLACK_MS, "stop seen after %llu ms",
           (unsigned long long)ctl->stop_ms);
    CHECK_EQ(ctl->c.gave_up, 0);
    CHECK_EQ(ctl->c.fenced, 1);
    CHECK_EQ(ctl->c.release_rc, ESTALE);
    CHECK(ctl->count > 0);
    CHECK_EQ(ctl->c.acts, ctl->count); /* B3 did not act after A took its cell */
    CHECK_EQ((uint32_t)ctl->c.cell, ctl->count);
    printf("# hosts: a kill on B judged lapsed from A after %llu ms, a stop after %llu ms "
           "(bound %u ms); %llu acts before the take-over\n", (unsigned long long)ctl->kill_ms,
           (unsigned long long)ctl->stop_ms, BOUND_MS, (unsigned long long)ctl->count);
    munmap(mem, HDEV_LEN);
    unlink(path);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(t_dir, sizeof t_dir, "/tmp/t-podlease-XXXXXX");
    if (!mkdtemp(t_dir)) {
        printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    RUN_NO_TSAN(take_release_counts);
    RUN(table_full);
    RUN_NO_TSAN(killed_seen_within_bound);
    RUN_NO_TSAN(killed_seen_default_bound);
    RUN_NO_TSAN(stopped_holder_fenced);
    RUN(threads_renew_and_fence);
    RUN(corrupt_rejected);
#ifdef T_TSAN
    (void)hosts_skip; /* its hosts fork processes with threads */
    (void)hosts_namespaces;
#else
    if (!t_only || strstr("hosts_namespaces", t_only)) TEST_UNLESS(hosts_skip(), hosts_namespaces);
#endif
    rmdir(t_dir);
    return T_DONE();
}
