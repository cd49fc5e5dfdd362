/* shmheap.h under an adversarial review. Two kinds of tests:
   - regression tests for the bugs a review found (each failed before its fix), and
   - adversarial checks that should pass: races of many processes on create/open, concurrent fill
     from several processes, extreme alignments, realloc edges, scribbled headers, a randomized
     sequence checked against a model, NULL and garbage arguments.
   Anything that could crash the test binary runs in a forked child. */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

static void rm(shmheap *h, const char *name)
{
    if (h) shmheap_close(h);
    shmheap_unlink(name, NULL);
}
static double now_s(void) { return (double)rcp__now_ns() / 1e9; }

/* Runs fn(arg) in a child; returns its exit status, or 128 + signal. */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ============================== bug reproducers ============================== */

/* BUG: a double free is not detected when the block sits in the thread cache and the cache of
   its class has filled up meanwhile: the second free goes to the bitmap (bit still set, since
   cached blocks keep their bit), so the block is in the cache AND free in the bitmap, and the
   next allocations hand it out twice. */
static void tc_double_free_detected(void)
{
    const char *n = t_uniq("tcdf");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    void *a[9];
    for (int i = 0; i < 9; i++) a[i] = shmheap_malloc(h, 64);
    CHECK_EQ(shmheap_free(h, a[0]), 0); /* into the cache (1 of 8) */
    for (int i = 1; i < 8; i++) CHECK_EQ(shmheap_free(h, a[i]), 0); /* cache now full */
    CHECK_EQ(shmheap_free(h, a[0]), SHMHEAP_E_DOUBLEFREE);
    /* even an immediate double free is missed when the first free is the one that fills the
       cache: the second finds the cache full and clears the (still set) bitmap bit */
    void *c[8];
    for (int i = 0; i < 8; i++) c[i] = shmheap_malloc(h, 256);
    for (int i = 0; i < 7; i++) CHECK_EQ(shmheap_free(h, c[i]), 0);
    CHECK_EQ(shmheap_free(h, c[7]), 0);
    CHECK_EQ(shmheap_free(h, c[7]), SHMHEAP_E_DOUBLEFREE);
    void *b[16];
    int dup = 0;
    for (int i = 0; i < 16; i++) {
        b[i] = shmheap_malloc(h, 64);
        for (int j = 0; j < i; j++) dup += b[i] == b[j];
    }
    CHECKF(dup == 0, "the same block handed out twice (%d duplicates)", dup);
    rm(h, n);
}

static shmheap *g_h;
static void *g_p;
static int g_rc;
static void *free_g_p(void *arg) { (void)arg; g_rc = shmheap_free(g_h, g_p); return NULL; }

/* BUG: the same across threads (or processes): thread 1 frees p into its cache, thread 2 frees p
   again; thread 2 only searches its own cache, so p lands in two places. */
static void tc_double_free_cross_thread(void)
{
    const char *n = t_uniq("tcdf2");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    g_h = h;
    g_p = shmheap_malloc(h, 64);
    CHECK_EQ(shmheap_free(h, g_p), 0);
    pthread_t th;
    pthread_create(&th, NULL, free_g_p, NULL);
    pthread_join(th, NULL); /* the thread's cache is flushed to the bitmap as it exits */
    CHECK_EQ(g_rc, SHMHEAP_E_DOUBLEFREE);
    void *x = shmheap_malloc(h, 64), *y = shmheap_malloc(h, 64);
    CHECKF(x != y, "block %p handed out twice", x);
    rm(h, n);
}

/* BUG: shmheap_alloc(h, 0, align >= 64 KiB) goes to the large path with n = 0 spans:
   find_free_run(h, 0, ..) "finds" span 0 whatever it holds, and its entry is overwritten with
   HEAD(0): live small blocks there are lost and the returned pointer aliases them. */
static void zero_size_large_align(void)
{
    const char *n = t_uniq("zero");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    char *small[64];
    for (int i = 0; i < 64; i++) { small[i] = (char *)shmheap_malloc(h, 48); memset(small[i], 0x5a, 48); }
    void *z = NULL;
    int r = shmheap_alloc(h, 0, 65536, &z);
    int alias = 0;
    for (int i = 0; i < 64 && z; i++) alias += small[i] >= (char *)z && small[i] < (char *)z + 65536;
    CHECKF(alias == 0, "aligned block of size 0 at %p overlaps %d live blocks", z, alias);
    shmheap_stats st;
    int c = shmheap_check(h, &st);
    CHECKF(c == 0, "check after alloc(0, 64K): %s", st.problem);
    CHECKF(r == 0 || r == SHMHEAP_E_INVAL, "rc %d", r);
    void *z2 = shmheap_aligned_alloc(h, 1 << 20, 0);
    c = shmheap_check(h, &st);
    CHECKF(c == 0, "check after aligned_alloc(1M, 0): %s", st.problem);
    (void)z2;
    rm(h, n);
}

/* BUG: creating a file-backed heap is not exclusive. A racer opens the file the winner has just
   made with O_EXCL, finds no magic yet (not formatted), and since the name is not shm it formats
   the file itself: several processes "create" the same heap, each at its own address, wiping
   each other's headers. */
static void create_race_file_exactly_one(void)
{
    int bad_rounds = 0, max_wins = 0;
    for (int round = 0; round < 6; round++) {
        char path[96];
        snprintf(path, sizeof path, "/tmp/%s.heap", t_uniq("frace"));
        int pfd[2];
        if (pipe(pfd)) return;
        pid_t pid[6];
        for (int i = 0; i < 6; i++) {
            if ((pid[i] = fork()) == 0) {
                char c;
                close(pfd[1]);
                if (read(pfd[0], &c, 1) < 0) _exit(9);
                shmheap *h;
                shmheap_opts o = {.size = 32 << 20};
                int rc = shmheap_create(path, &o, &h);
                _exit(rc == 0 ? 0 : rc == SHMHEAP_E_EXISTS ? 1 : 2);
            }
        }
        close(pfd[0]);
        close(pfd[1]);
        int wins = 0;
        for (int i = 0; i < 6; i++) {
            int st;
            waitpid(pid[i], &st, 0);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) wins++;
        }
        if (wins != 1) bad_rounds++;
        if (wins > max_wins) max_wins = wins;
        shmheap_unlink(path, NULL);
    }
    CHECKF(bad_rounds == 0, "%d of 6 rounds did not have exactly one creator (up to %d processes created the same file heap)",
           bad_rounds, max_wins);
}

/* BUG: an open that races with the create gets SHMHEAP_E_TOOSMALL (object still 0 bytes) or
   SHMHEAP_E_BADMAGIC (format in progress) instead of waiting: the wait loop in shmheap_open only
   waits while magic is set and ready is not, a window of one store, since format writes magic
   just before ready. */
static void open_while_creating(void)
{
    int bad = 0, codes[8] = {0}, lastsig = 0;
    for (int round = 0; round < 10; round++) {
        const char *n = t_uniq("owc");
        pid_t pid[4];
        for (int i = 0; i < 4; i++) {
            if ((pid[i] = fork()) == 0) {
                double end = now_s() + 5;
                while (now_s() < end) {
                    shmheap *h;
                    int rc = shmheap_open(n, NULL, &h);
                    if (rc == SHMHEAP_E_NOTFOUND) continue;
                    _exit(rc == 0 ? 0 : rc == SHMHEAP_E_TOOSMALL ? 2 : rc == SHMHEAP_E_BADMAGIC ? 3 : 4);
                }
                _exit(5);
            }
        }
        usleep(20000);
        shmheap *h = t_heap(n, 256 << 20);
        for (int i = 0; i < 4; i++) {
            int st;
            waitpid(pid[i], &st, 0);
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 7;
            if (WIFSIGNALED(st)) lastsig = WTERMSIG(st);
            codes[code & 7]++;
            if (code) bad++;
        }
        rm(h, n);
    }
    CHECKF(bad == 0,
           "%d of 40 racing opens failed: %d TOOSMALL, %d BADMAGIC, %d other, %d timed out, %d killed (signal %d), %d odd",
           bad, codes[2], codes[3], codes[4], codes[5], codes[7], lastsig, codes[1] + codes[6]);
}

/* BUG: shmheap_create closes fd and then hands the closed number to shmheap__new_handle, which
   dups it: the creator's h->fd is -1 (or, with another thread opening files meanwhile, a dup
   of an unrelated file). So shmheap__intact never notices a truncated file in the creating
   process, and close touches the lost pages: SIGBUS. */
static int trunc_close_child(void *arg)
{
    const char *path = (const char *)arg;
    shmheap *h = t_heap(path, 4 << 20);
    if (!h) return 3;
    void *p = shmheap_malloc(h, 100);
    shmheap_free(h, p); /* a block in the thread cache: close will give it back */
    int fd = open(path, O_RDWR);
    if (fd < 0 || ftruncate(fd, 0)) return 4;
    close(fd);
    shmheap_close(h); /* must not touch the heap: the file is gone under it */
    return 0;
}
static void creator_keeps_fd(void)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/%s.heap", t_uniq("cfd"));
    shmheap *h = t_heap(path, 4 << 20);
    if (!h) return;
    CHECKF(h->fd >= 0, "creator's handle has fd %d: the fd was closed before it was dup'ed", h->fd);
    rm(h, path);
    int st = in_child(trunc_close_child, path);
    CHECKF(st == 0, "close after a peer truncated the file: child status %d (%s)", st,
           st == 128 + SIGBUS ? "SIGBUS" : "?");
    shmheap_unlink(path, NULL);
}

/* BUG: shmheap__validate multiplies header fields without overflow checks. nspans = 2^61 makes
   nspans * 8, nspans * 528 and nspans << 16 all wrap to 0, so a scribbled header with
   bitmap_off == entries_off passes, and every opener then walks 2^61 span entries. */
static int check_child(void *arg)
{
    shmheap_check((shmheap *)arg, NULL);
    return 0;
}
static void open_rejects_nspans_overflow(void)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/%s.heap", t_uniq("ovf"));
    shmheap *h = t_heap(path, 4 << 20);
    if (!h) return;
    CHECK_EQ(shmheap_close(h), 0);
    int fd = open(path, O_RDWR);
    uint64_t nsp = 1ull << 61, eoff;
    CHECK_EQ(pread(fd, &eoff, 8, offsetof(struct shmheap__hdr, entries_off)), 8);
    CHECK_EQ(pwrite(fd, &nsp, 8, offsetof(struct shmheap__hdr, nspans)), 8);
    CHECK_EQ(pwrite(fd, &eoff, 8, offsetof(struct shmheap__hdr, bitmap_off)), 8);
    close(fd);
    int r = shmheap_open(path, NULL, &h);
    CHECKF(r != 0, "a header with nspans = 2^61 was accepted");
    if (r == 0) {
        int st = in_child(check_child, h);
        CHECKF(st == 0, "shmheap_check on it: child status %d", st);
        shmheap_close(h);
    }
    shmheap_unlink(path, NULL);
}

/* BUG: the small-allocation fast path sets the FULL hint with fetch_or on a span entry it read
   earlier, without checking that the entry is still that span. If the span was retired (and
   reused) in between, the bit lands on a FREE entry or on a CONT entry of a large block, and
   shmheap_check reports corruption ("run broken" / "free entry with bits"). find_partial, now
   run without the lock, has the same pattern. The test pauses the allocator between its entry
   read and its bitmap read with a page fault (mprotect), and retires + reuses the span there. */
static char *g_page;
static size_t g_pgsz;
static void *g_big;
static int g_faults;
static void pause_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)uc;
    char *a = (char *)si->si_addr;
    if (a < g_page || a >= g_page + g_pgsz || g_faults++) { signal(SIGSEGV, SIG_DFL); return; }
    mprotect(g_page, g_pgsz, PROT_READ | PROT_WRITE);
    if (shmheap__lock(g_h) == 0) {
        shmheap__retire_empty(g_h);
        shmheap__unlock(g_h);
    }
    g_big = shmheap_malloc(g_h, 2 * 65536); /* takes spans 0 and 1: span 1 becomes CONT */
}
static void full_hint_on_reused_span(void)
{
    const char *n = t_uniq("full");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    g_h = h;
    void *l0 = shmheap_malloc(h, 65536); /* span 0 */
    void *q = shmheap_malloc(h, 5000);   /* class 5120 (not cached): span 1 */
    size_t s = (size_t)((char *)q - h->data) >> SHMHEAP__SPAN_SHIFT;
    CHECK_EQ(s, 1);
    CHECK_EQ(shmheap_free(h, q), 0);
    CHECK_EQ(shmheap_free(h, l0), 0);
    g_pgsz = (size_t)sysconf(_SC_PAGESIZE);
    g_page = (char *)((uintptr_t)&h->bm[s * SHMHEAP__WORDS] & ~(g_pgsz - 1));
    char *entpage = (char *)((uintptr_t)&h->ent[s] & ~(g_pgsz - 1));
    if (s != 1 || entpage == g_page) { t_skip("full_hint_on_reused_span", "layout differs"); rm(h, n); return; }
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pause_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, &old);
    g_faults = 0;
    mprotect(g_page, g_pgsz, PROT_NONE);
    void *p = shmheap_malloc(h, 5000); /* reads entry of span 1, faults on its bitmap word */
    sigaction(SIGSEGV, &old, NULL);
    CHECK_EQ(g_faults, 1);
    CHECK(p != NULL && g_big != NULL);
    shmheap_stats st;
    int r = shmheap_check(h, &st);
    CHECKF(r == 0, "check after a span was retired and reused under an allocator: %s (entry of span 1 = %llx)",
           st.problem, (unsigned long long)h->ent[1]);
    rm(h, n);
}

/* BUG: recovery of an interrupted span init only opens the words if the entry equals
   E_MAKE(SMALL, cls, gen) exactly. A concurrent allocator that read the fresh entry while its
   words were still closed sets the FULL hint on it (small_alloc: all words look full); then
   recovery leaves the words closed for good: the span is SMALL with closed words ("closed in a
   live span") and can never be retired. */
static void init_recovery_with_full_hint(void)
{
    const char *n = t_uniq("initfull");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    pid_t pid = fork();
    if (pid == 0) {
        shmheap__lock(h);
        long s = shmheap__find_free_run(h, 1, 0);
        shmheap__journal(h, SHMHEAP__J_INIT, (uint64_t)s, 1, 3, 777);
        shmheap__close_fresh_words(h, (size_t)s); /* as init_span does */
        rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, 3, 777));
        rcp__fetch_or(&h->ent[s], SHMHEAP__E_FULL); /* what small_alloc does meanwhile, lock-free */
        kill(getpid(), SIGKILL);
    }
    int ws;
    waitpid(pid, &ws, 0);
    shmheap_stats st;
    int r = shmheap_check(h, &st);
    CHECKF(r == 0, "after recovery: %s", st.problem);
    rm(h, n);
}

/* BUG: shmheap_unlink does shm_unlink, then takes the pod lock and drops the pod entry by name.
   A create of the same name that gets in between records its new range, which the unlink then
   drops: the live heap's address range is free in the pod and goes to the next heap. The test
   holds the pod lock to stop the unlink between its two steps. */
static void unlink_create_pod_race(void)
{
    const char *pod = t_uniq("pod");
    char podpath[128];
    snprintf(podpath, sizeof podpath, "/%s", pod);
    shmheap_opts o = {.size = 2 << 20, .pod = pod};
    const char *n = t_uniq("ucr");
    char name[96];
    snprintf(name, sizeof name, "%s", n);
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(name, &o, &h), 0);
    if (!h) return;
    shmheap_close(h);
    int pfd = shm_open(podpath, O_RDWR, 0);
    CHECK(pfd >= 0);
    flock(pfd, LOCK_EX);
    pid_t pid = fork();
    if (pid == 0) _exit(shmheap_unlink(name, &o) == 0 ? 0 : 1);
    char objpath[128];
    snprintf(objpath, sizeof objpath, "/%s", name);
    for (int i = 0; i < 300; i++) { /* until the unlink has removed the object (if it can) */
        int fd = shm_open(objpath, O_RDONLY, 0);
        if (fd < 0) break;
        close(fd);
        usleep(1000);
    }
    kill(pid, SIGSTOP);
    int ws;
    waitpid(pid, &ws, WUNTRACED);
    flock(pfd, LOCK_UN);
    int r = shmheap_create(name, &o, &h); /* the name again, while the unlink is between steps */
    /* Fixed: unlink removes the object under the pod lock, so it is still there: EXISTS, and
       the unlink completes afterwards. Either way no live heap may lose its range. */
    CHECK(r == 0 || r == SHMHEAP_E_EXISTS);
    kill(pid, SIGCONT);
    waitpid(pid, &ws, 0);
    struct shmheap__pod *P = (struct shmheap__pod *)mmap(NULL, sizeof *P, PROT_READ, MAP_SHARED, pfd, 0);
    char key[128];
    snprintf(key, sizeof key, "shm:%s", name);
    struct shmheap__pod_ent *e = P != MAP_FAILED ? shmheap__pod_find(P, key) : NULL;
    if (r == 0)
        CHECKF(e && e->base == (uint64_t)(uintptr_t)shmheap_base(h),
               "the pod lost the range of the live heap %s at %p", name, shmheap_base(h));
    else
        CHECKF(!e, "the unlinked heap %s kept its range", name);
    if (P != MAP_FAILED) munmap(P, sizeof *P);
    close(pfd);
    if (r == 0) shmheap_close(h);
    shmheap_unlink(name, &o);
    shm_unlink(podpath);
}

/* BUG: a heap created at a fixed address that starts below the pod's window but reaches into it
   is not recorded (only o.addr inside [lo, hi) is), so the pod hands its upper part to the next
   heap: two heaps of one pod overlap, and no process can map both. */
static void fixed_addr_straddling_window(void)
{
    const char *pod = t_uniq("podw");
    char podpath[128];
    snprintf(podpath, sizeof podpath, "/%s", pod);
    const uint64_t lo = 0x6c0000000000ull, hi = 0x6c0040000000ull;
    char win[64];
    snprintf(win, sizeof win, "%llx-%llx", (unsigned long long)lo, (unsigned long long)hi);
    setenv("SHMHEAP_WINDOW", win, 1);
    const char *na = t_uniq("stra"), *nb = t_uniq("strb");
    char a[96], b[96];
    snprintf(a, sizeof a, "%s", na);
    snprintf(b, sizeof b, "%s", nb);
    shmheap_opts oa = {.size = 4 << 20, .addr = lo - (2 << 20), .pod = pod};
    shmheap *ha = NULL, *hb = NULL;
    int r = shmheap_create(a, &oa, &ha);
    unsetenv("SHMHEAP_WINDOW");
    CHECKF(r == 0, "create at a fixed address: %s", shmheap_strerror(r));
    if (r) { shm_unlink(podpath); return; }
    pid_t pid = fork();
    if (pid == 0) { /* a process that does not have heap a mapped creates heap b */
        shmheap_close(ha);
        shmheap_opts ob = {.size = 2 << 20, .pod = pod};
        shmheap *x;
        _exit(shmheap_create(b, &ob, &x) == 0 ? 0 : 1);
    }
    int ws;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    shmheap_opts ob = {.pod = pod};
    r = shmheap_open(b, &ob, &hb);
    CHECKF(r == 0, "a process with heap a cannot open heap b: %s (b overlaps a)", shmheap_strerror(r));
    if (hb) shmheap_close(hb);
    shmheap_close(ha);
    shmheap_unlink(a, &oa);
    shmheap_unlink(b, &ob);
    shm_unlink(podpath);
}

/* BUG: shmheap_open returns this process's existing handle by name, even when the name now
   belongs to another heap (unlinked and created again by someone else): the caller silently
   works in the old, unlinked heap. */
static int recreate_child(void *arg)
{
    const char *n = (const char *)arg;
    shmheap *h;
    if (shmheap_open(n, NULL, &h)) return 2;
    shmheap_close(h); /* the inherited handle too */
    shmheap_close(h);
    if (shmheap_unlink(n, NULL)) return 3;
    if (shmheap_create(n, NULL, &h)) return 4;
    int *v = (int *)shmheap_malloc(h, sizeof *v);
    *v = 2;
    shmheap_root_set(h, "v", v);
    return 0;
}
static void open_after_recreate(void)
{
    const char *n0 = t_uniq("recr");
    char n[96];
    snprintf(n, sizeof n, "%s", n0);
    shmheap *h = t_heap(n, 2 << 20), *h2 = NULL;
    if (!h) return;
    int *v = (int *)shmheap_malloc(h, sizeof *v);
    *v = 1;
    shmheap_root_set(h, "v", v);
    CHECK_EQ(in_child(recreate_child, n), 0);
    /* Fixed: open looks the handle up by object, not name. The new heap may have been given
       the old one's freed range, which this process still maps: then ADDRINUSE, never the old
       heap. */
    int r = shmheap_open(n, NULL, &h2);
    CHECK(r == 0 || r == SHMHEAP_E_ADDRINUSE);
    int *w = h2 ? (int *)shmheap_root_get(h2, "v") : NULL;
    if (r == 0)
        CHECKF(h2 != h && w && *w == 2, "open(\"%s\") gave the old unlinked heap (same handle: %d)", n, h2 == h);
    if (h2) shmheap_close(h2);
    shmheap_close(h);
    shmheap_unlink(n, NULL);
}

/* BUG (peer): a large block's run length comes from the shared span entry and is trusted by
   free: a peer that sets HEAD(n) with n past the end makes the freeing process store FREE
   entries past the span table (into the bitmaps, the data, the next heap's header...). */
static void peer_large_run_length(void)
{
    const char *n = t_uniq("peerrun");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    char *big = (char *)shmheap_malloc(h, 100000);
    size_t s = (size_t)(big - h->data) >> SHMHEAP__SPAN_SHIFT;
    uint64_t saved[4];
    memcpy(saved, h->bm, sizeof saved);
    h->ent[s] = SHMHEAP__E_MAKE(SHMHEAP__S_HEAD, 0, h->nspans - s + 4); /* the peer's scribble */
    size_t us = shmheap_usable_size(h, big);
    CHECKF(us <= (h->nspans - s) << SHMHEAP__SPAN_SHIFT, "usable_size %zu reaches past the heap", us);
    int r = shmheap_free(h, big);
    CHECKF(memcmp(saved, h->bm, sizeof saved) == 0, "free wrote past the span table (rc %d)", r);
    memcpy(h->bm, saved, sizeof saved);
    rm(h, n);
}

/* BUG (peer): a SMALL entry whose class is >= 40 is used unchecked by retire_empty (and by the
   INIT/RETIRE recovery through journal.cls): shmheap__size[200] is read out of bounds. */
static int bad_class_retire_child(void *arg)
{
    shmheap *h = (shmheap *)arg;
    size_t last = h->nspans - 1;
    h->ent[last] = SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, 200, 1); /* the peer's scribble */
    void *p;
    /* no run this long is free: the large path retires empty spans and meets the bad entry */
    int r = shmheap_alloc(h, (h->nspans) << SHMHEAP__SPAN_SHIFT, 0, &p);
    return r == SHMHEAP_E_FULL ? 0 : 1;
}
static int bad_class_recover_child(void *arg)
{
    shmheap *h = (shmheap *)arg;
    pid_t pid = fork();
    if (pid == 0) {
        shmheap__lock(h);
        long s = shmheap__find_free_run(h, 1, 0);
        shmheap__journal(h, SHMHEAP__J_RETIRE, (uint64_t)s, 1, 200, 0);
        rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, 200, 0));
        kill(getpid(), SIGKILL);
    }
    int ws;
    waitpid(pid, &ws, 0);
    shmheap_check(h, NULL); /* takes the lock: recovery */
    return 0;
}
static void peer_bad_class(void)
{
    const char *n = t_uniq("peercls");
    shmheap *h = t_heap(n, 4 << 20);
    if (!h) return;
    int st = in_child(bad_class_retire_child, h);
    CHECKF(st == 0, "retire_empty over a span entry of class 200: child status %d", st);
    st = in_child(bad_class_recover_child, h);
    CHECKF(st == 0, "recovery of a journal with class 200: child status %d", st);
    rm(h, n);
}

/* BUG: unseal_batch allocates n * 2 * sizeof(uintptr_t) bytes without an overflow check:
   n = 2^60 wraps to malloc(0) and the first range is written past it. */
static int unseal_ovf_child(void *arg)
{
    shmheap *h = (shmheap *)arg;
    char *p = (char *)shmheap_malloc(h, 64);
    shmheap_range r[1] = {{p, 8}};
    int rc = shmheap_unseal_batch(h, r, ((size_t)1 << 60));
    return rc ? 0 : 1;
}
static void unseal_batch_count_overflow(void)
{
    const char *n = t_uniq("ovfb");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    int st = in_child(unseal_ovf_child, h);
    CHECKF(st == 0, "unseal_batch with n = 2^60: child status %d", st);
    rm(h, n);
}

/* BUG (minor): seal with len 0 at an unaligned address seals a whole page; and seal accepts the
   header and the allocator metadata, after which this process faults on its next allocation. */
static int write_first(void *arg) { *(volatile char *)arg = 1; return 0; }
static void seal_edges(void)
{
    const char *n = t_uniq("seal0");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    char *p = (char *)shmheap_malloc(h, 8192);
    CHECK_EQ(shmheap_seal(h, p + 100, 0), 0);
    int st = in_child(write_first, p);
    CHECKF(st == 0, "a write to %p faults after seal(p + 100, 0): child status %d", (void *)p, st);
    shmheap_unseal(h, p, 8192);
    int r = shmheap_seal(h, shmheap_base(h), 4096);
    CHECKF(r != 0, "seal of the heap header accepted");
    if (!r) shmheap_unseal(h, shmheap_base(h), 4096);
    rm(h, n);
}

/* BUG (minor): NULL out in shmheap_alloc is written before any check; shmheap_strerror(INT_MIN)
   negates INT_MIN. */
static int alloc_null_out_child(void *arg) { return shmheap_alloc((shmheap *)arg, 1, 0, NULL) == SHMHEAP_E_INVAL ? 0 : 1; }
static int strerror_min_child(void *arg) { (void)arg; return shmheap_strerror(INT_MIN) != NULL ? 0 : 1; }
static void bad_args_crash(void)
{
    const char *n = t_uniq("nullout");
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    int st = in_child(alloc_null_out_child, h);
    CHECKF(st == 0, "shmheap_alloc(h, 1, 0, NULL): child status %d", st);
    st = in_child(strerror_min_child, NULL);
    CHECKF(st == 0, "shmheap_strerror(INT_MIN): child status %d", st);
    rm(h, n);
}

/* BUG: shmheap_open and shmheap_create keep a whole struct shmheap__hdr (~91 KiB) on the stack
   only to read a few header fields: a thread with a 64 KiB stack crashes in shmheap_open. */
static void *open_thread(void *arg)
{
    shmheap *h;
    int r = shmheap_open((const char *)arg, NULL, &h);
    if (!r) shmheap_close(h);
    return (void *)(intptr_t)r;
}
static int small_stack_child(void *arg)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_t th;
    if (pthread_create(&th, &a, open_thread, arg)) return 3;
    void *r;
    pthread_join(th, &r);
    return r == NULL ? 0 : 1;
}
static void open_on_small_stack(void)
{
    const char *n0 = t_uniq("stack");
    char n[96];
    snprintf(n, sizeof n, "%s", n0);
    shmheap *h = t_heap(n, 2 << 20);
    if (!h) return;
    shmheap_close(h);
    int st = in_child(small_stack_child, n);
    CHECKF(st == 0, "shmheap_open on a thread with a 64 KiB stack: child status %d", st);
    shmheap_unlink(n, NULL);
}

/* BUG: the heap lock is now a 2 s timed lock; a peer that holds it a little longer (a slow
   check of a big heap, a process stopped in a debugger or by SIGSTOP) makes large allocations
   fail as if the heap were full, frees of large blocks fail (leak unless the caller retries),
   and root_get answer "no such root". */
static void *hold_lock(void *arg)
{
    shmheap *h = (shmheap *)arg;
    shmheap__lock(h);
    usleep(4300 * 1000);
    shmheap__unlock(h);
    return NULL;
}
static void lock_timeout_spurious_failures(void)
{
    const char *n = t_uniq("tmo");
    shmheap *h = t_heap(n, 8 << 20);
    if (!h) return;
    void *big = shmheap_malloc(h, 200000);
    int *v = (int *)shmheap_malloc(h, 4);
    shmheap_root_set(h, "v", v);
    pthread_t th;
    pthread_create(&th, NULL, hold_lock, h);
    usleep(100 * 1000);
    void *x = shmheap_malloc(h, 300000);
    int fr = shmheap_free(h, big);
    void *rv = shmheap_root_get(h, "v");
    pthread_join(th, NULL);
    CHECKF(x != NULL, "malloc(300000) on an empty heap returned NULL while a peer held the lock");
    CHECKF(fr == 0, "free of a large block: %s", shmheap_strerror(fr));
    CHECKF(rv == v, "root_get lost an existing root while a peer held the lock");
    rm(h, n);
}

/* ============================== adversarial checks (should pass) ============================== */

/* Many processes create the same shm name at once: exactly one wins, the rest get EXISTS. */
static void create_race_shm_exactly_one(void)
{
    int bad = 0;
    for (int round = 0; round < 6; round++) {
        const char *n = t_uniq("srace");
        int pfd[2];
        if (pipe(pfd)) return;
        pid_t pid[8];
        for (int i = 0; i < 8; i++) {
            if ((pid[i] = fork()) == 0) {
                char c;
                close(pfd[1]);
                if (read(pfd[0], &c, 1) < 0) _exit(9);
                shmheap *h;
                shmheap_opts o = {.size = 16 << 20};
                int rc = shmheap_create(n, &o, &h);
                _exit(rc == 0 ? 0 : rc == SHMHEAP_E_EXISTS ? 1 : 2);
            }
        }
        close(pfd[0]);
        close(pfd[1]);
        int wins = 0, other = 0;
        for (int i = 0; i < 8; i++) {
            int st;
            waitpid(pid[i], &st, 0);
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
            wins += code == 0;
            other += code > 1;
        }
        if (wins != 1 || other) bad++;
        shmheap_unlink(n, NULL);
    }
    CHECKF(bad == 0, "%d rounds without exactly one creator", bad);
}

/* Many processes create-or-open one name (retrying opens that race the creator): all map it at
   one address, each leaves a root, and the heap checks out. */
struct coo { uint64_t base; int created, ok; };
static void create_or_open_many(void)
{
    const char *n0 = t_uniq("coo");
    char n[96];
    snprintf(n, sizeof n, "%s", n0);
    int pfd[2], go[2];
    if (pipe(pfd) || pipe(go)) return;
    pid_t pid[8];
    for (int i = 0; i < 8; i++) {
        if ((pid[i] = fork()) == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) < 0) _exit(9);
            struct coo res = {0, 0, 0};
            shmheap *h = NULL;
            shmheap_opts o = {.size = 16 << 20};
            int rc = shmheap_create(n, &o, &h);
            if (rc == 0) res.created = 1;
            else if (rc == SHMHEAP_E_EXISTS) {
                double end = now_s() + 5;
                do {
                    rc = shmheap_open(n, NULL, &h);
                    if (rc == SHMHEAP_E_NOTFOUND || rc == SHMHEAP_E_TOOSMALL || rc == SHMHEAP_E_BADMAGIC) usleep(1000);
                    else break;
                } while (now_s() < end);
            }
            if (rc == 0) {
                int *v = (int *)shmheap_malloc(h, sizeof *v);
                char rn[16];
                snprintf(rn, sizeof rn, "p%d", i);
                if (v) { *v = i; res.ok = shmheap_root_set(h, rn, v) == 0; }
                res.base = (uint64_t)(uintptr_t)shmheap_base(h);
            }
            if (write(pfd[1], &res, sizeof res) != (ssize_t)sizeof res) _exit(8);
            _exit(0);
        }
    }
    close(go[0]);
    close(go[1]);
    close(pfd[1]);
    struct coo res[8];
    int got = 0, created = 0, ok = 0;
    uint64_t base = 0;
    int same = 1;
    while (got < 8 && read(pfd[0], &res[got], sizeof res[0]) == (ssize_t)sizeof res[0]) got++;
    close(pfd[0]);
    for (int i = 0; i < 8; i++) waitpid(pid[i], NULL, 0);
    for (int i = 0; i < got; i++) {
        created += res[i].created;
        ok += res[i].ok;
        if (!base) base = res[i].base;
        same &= res[i].base == base;
    }
    CHECK_EQ(got, 8);
    CHECK_EQ(created, 1);
    CHECK_EQ(ok, 8);
    CHECK(same && base);
    shmheap *h;
    CHECK_EQ(shmheap_open(n, NULL, &h), 0);
    if (h) {
        CHECK((uint64_t)(uintptr_t)shmheap_base(h) == base);
        int found = 0;
        char rn[16];
        for (int i = 0; i < 8; i++) {
            snprintf(rn, sizeof rn, "p%d", i);
            int *v = (int *)shmheap_root_get(h, rn);
            found += v && *v == i;
        }
        CHECK_EQ(found, 8);
        CHECK_EQ(shmheap_check(h, NULL), 0);
        shmheap_close(h);
    }
    shmheap_unlink(n, NULL);
}

/* Several processes fill one heap at once with blocks of mixed sizes, each filling its blocks
   with its own byte; after all are done every block must still hold its owner's byte (no block
   given twice), then all free everything and the heap is empty and consistent. */
#define FILL_NPROC 6
struct fill_ctl { int go, done1, done2; long k[FILL_NPROC]; };
static int spin_until(int *ctr, int want)
{
    double end = now_s() + 10;
    while (__atomic_load_n(ctr, __ATOMIC_ACQUIRE) < want)
        if (now_s() > end) return -1;
    return 0;
}
static void fill_worker(shmheap *h, struct fill_ctl *ctl, int me)
{
    size_t cap = 200000, k = 0;
    void **ps = (void **)malloc(cap * sizeof *ps);
    size_t *sz = (size_t *)malloc(cap * sizeof *sz);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    int fails = 0, bad = 0;
    __atomic_fetch_add(&ctl->go, 1, __ATOMIC_ACQ_REL);
    if (spin_until(&ctl->go, FILL_NPROC)) _exit(4);
    while (k < cap && fails < 50) {
        uint64_t x = t_rng(&seed);
        size_t s = (x & 15) == 0 ? 40000 + x % 260000 : 1 + (x >> 8) % 5000;
        unsigned char *p = (unsigned char *)shmheap_malloc(h, s);
        if (!p) { fails++; continue; }
        memset(p, me + 1, s);
        ps[k] = p;
        sz[k++] = s;
    }
    ctl->k[me] = (long)k;
    __atomic_fetch_add(&ctl->done1, 1, __ATOMIC_ACQ_REL);
    if (spin_until(&ctl->done1, FILL_NPROC)) _exit(5);
    for (size_t i = 0; i < k; i++) {
        unsigned char *p = (unsigned char *)ps[i];
        for (size_t j = 0; j < sz[i]; j++)
            if (p[j] != me + 1) { bad++; break; }
    }
    __atomic_fetch_add(&ctl->done2, 1, __ATOMIC_ACQ_REL);
    if (spin_until(&ctl->done2, FILL_NPROC)) _exit(6);
    for (size_t i = 0; i < k; i++)
        if (shmheap_free(h, ps[i])) bad++;
    _exit(bad ? 1 : 0);
}
static void mp_fill_no_overlap(void)
{
    const char *n = t_uniq("fill");
    shmheap *h = t_heap(n, 32 << 20);
    if (!h) return;
    struct fill_ctl *ctl = (struct fill_ctl *)shmheap_calloc(h, 1, sizeof *ctl);
    pid_t pid[FILL_NPROC];
    for (int i = 0; i < FILL_NPROC; i++)
        if ((pid[i] = fork()) == 0) fill_worker(h, ctl, i);
    int bad = 0;
    for (int i = 0; i < FILL_NPROC; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) { bad++; printf("# fill worker %d: status %d\n", i, st); }
    }
    CHECK_EQ(bad, 0);
    printf("# blocks per filling process:");
    for (int i = 0; i < FILL_NPROC; i++) printf(" %ld", ctl->k[i]);
    printf("\n");
    shmheap_stats st;
    CHECKF(shmheap_check(h, &st) == 0, "%s", st.problem);
    CHECK_EQ(st.live_blocks, 1);
    CHECK_EQ(shmheap_free(h, ctl), 0);
    CHECK(shmheap_malloc(h, 16 << 20) != NULL); /* everything came back */
    rm(h, n);
}

/* aligned_alloc from 1 to 2^63, non-powers of two, sizes at class and span borders. */
static void aligned_extremes(void)
{
    const char *n = t_uniq("align");
    shmheap *h = t_heap(n, 16 << 20);
    if (!h) return;
    for (int k = 0; k < 64; k++) {
        size_t a = (size_t)1 << k;
        size_t sizes[] = {1, 17, 4096, 32768, 32769, 65536, 65537};
        for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            errno = 0;
            char *p = (char *)shmheap_aligned_alloc(h, a, sizes[i]);
            if (a <= (4u << 20)) {
                CHECKF(p != NULL, "aligned_alloc(%zu, %zu) failed", a, sizes[i]);
            } else if (!p) {
                CHECKF(errno == ENOMEM, "aligned_alloc(%zu): errno %d", a, errno);
            }
            if (!p) continue;
            CHECKF((uintptr_t)p % a == 0, "aligned_alloc(%zu, %zu) = %p", a, sizes[i], (void *)p);
            CHECKF(shmheap_usable_size(h, p) >= sizes[i], "usable");
            CHECKF(shmheap_contains(h, p, sizes[i]), "outside");
            memset(p, 0x11, sizes[i]);
            CHECK_EQ(shmheap_free(h, p), 0);
        }
    }
    size_t odd[] = {3, 6, 24, 48, 65535, ((size_t)1 << 63) + 1, SIZE_MAX};
    for (unsigned i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        errno = 0;
        CHECK(shmheap_aligned_alloc(h, odd[i], 10) == NULL);
        CHECK_EQ(errno, EINVAL);
    }
    void *p;
    CHECK_EQ(shmheap_alloc(h, SIZE_MAX, 16, &p), SHMHEAP_E_FULL);
    CHECK_EQ(shmheap_alloc(h, SIZE_MAX - 65535, 1 << 16, &p), SHMHEAP_E_FULL);
    CHECK_EQ(shmheap_alloc(h, shmheap_size(h), 0, &p), SHMHEAP_E_FULL);
    CHECK(shmheap_malloc(h, SIZE_MAX) == NULL);
    CHECK(shmheap_calloc(h, SIZE_MAX, SIZE_MAX) == NULL);
    CHECK(shmheap_calloc(h, 1ull << 33, 1ull << 31) == NULL);
    shmheap_stats st;
    CHECKF(shmheap_check(h, &st) == 0, "%s", st.problem);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

static void realloc_edges(void)
{
    const char *n = t_uniq("realloc");
    shmheap *h = t_heap(n, 16 << 20);
    if (!h) return;
    unsigned char *p = (unsigned char *)shmheap_realloc(h, NULL, 0); /* malloc(0) */
    CHECK(p != NULL);
    CHECK_EQ(shmheap_free(h, p), 0);
    p = (unsigned char *)shmheap_realloc(h, NULL, 100);
    for (int i = 0; i < 100; i++) p[i] = (unsigned char)i;
    /* growth through every regime: small -> bigger small -> large -> bigger large -> small */
    size_t steps[] = {200, 1000, 4096, 32768, 32769, 70000, 1 << 20, 3 << 20, 40000, 33000, 30000, 50};
    size_t have = 100;
    for (unsigned s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        unsigned char *q = (unsigned char *)shmheap_realloc(h, p, steps[s]);
        CHECKF(q != NULL, "realloc to %zu", steps[s]);
        if (!q) break;
        size_t keep = have < steps[s] ? have : steps[s];
        int ok = 1;
        for (size_t i = 0; i < keep && i < 100; i++) ok &= q[i] == (unsigned char)i;
        CHECKF(ok, "contents lost in realloc to %zu", steps[s]);
        CHECK(shmheap_usable_size(h, q) >= steps[s]);
        p = q;
        have = steps[s];
    }
    /* too big: NULL and the block is untouched */
    errno = 0;
    CHECK(shmheap_realloc(h, p, (size_t)1 << 40) == NULL);
    CHECK(shmheap_usable_size(h, p) >= 50);
    CHECK(shmheap_realloc(h, p, SIZE_MAX) == NULL);
    CHECK(p[7] == 7);
    /* pointers that are not blocks: NULL with EINVAL, nothing freed */
    int x;
    errno = 0;
    CHECK(shmheap_realloc(h, &x, 10) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(shmheap_realloc(h, p + 1, 10) == NULL);
    CHECK(shmheap_usable_size(h, p) >= 50);
    /* a freed block (in the cache) */
    unsigned char *f = (unsigned char *)shmheap_malloc(h, 64);
    CHECK_EQ(shmheap_free(h, f), 0);
    CHECK(shmheap_realloc(h, f, 128) == NULL);
    CHECK(shmheap_realloc(h, p, 0) == NULL); /* frees */
    CHECK_EQ(shmheap_usable_size(h, p), 0);
    shmheap_stats st;
    CHECKF(shmheap_check(h, &st) == 0, "%s", st.problem);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

/* Headers scribbled field by field are refused (and the original still opens). */
static void scribbled_headers(void)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/%s.heap", t_uniq("scrib"));
    shmheap *h = t_heap(path, 4 << 20);
    if (!h) return;
    void *keep = shmheap_malloc(h, 1000);
    shmheap_root_set(h, "keep", keep);
    CHECK_EQ(shmheap_close(h), 0);
    struct { size_t off, len; uint64_t val; int xor_; } m[] = {
        {offsetof(struct shmheap__hdr, magic), 8, 1, 1},
        {offsetof(struct shmheap__hdr, version), 4, SHMHEAP__VERSION + 1, 0},
        {offsetof(struct shmheap__hdr, ready), 4, 0, 0},
        {offsetof(struct shmheap__hdr, size), 8, 0, 0},
        {offsetof(struct shmheap__hdr, size), 8, 1ull << 46, 0},
        {offsetof(struct shmheap__hdr, size), 8, 1ull << 20, 0},
        {offsetof(struct shmheap__hdr, base), 8, 4096, 1},
        {offsetof(struct shmheap__hdr, base), 8, 0xffffffffffe00000ull, 0},
        {offsetof(struct shmheap__hdr, nspans), 8, 0, 0},
        {offsetof(struct shmheap__hdr, nspans), 8, 1ull << 40, 0},
        {offsetof(struct shmheap__hdr, nspans), 8, 1000, 0},
        {offsetof(struct shmheap__hdr, entries_off), 8, 8, 1},
        {offsetof(struct shmheap__hdr, bitmap_off), 8, 8, 1},
        {offsetof(struct shmheap__hdr, data_off), 8, 4096, 1},
        {offsetof(struct shmheap__hdr, data_off), 8, 1ull << 40, 0},
        {offsetof(struct shmheap__hdr, hdr_size), 8, 0, 0},
    };
    int fd = open(path, O_RDWR);
    for (unsigned i = 0; i < sizeof m / sizeof m[0]; i++) {
        uint64_t orig = 0, v;
        CHECK_EQ(pread(fd, &orig, m[i].len, (off_t)m[i].off), (ssize_t)m[i].len);
        v = m[i].xor_ ? orig ^ m[i].val : m[i].val;
        CHECK_EQ(pwrite(fd, &v, m[i].len, (off_t)m[i].off), (ssize_t)m[i].len);
        shmheap *x = NULL;
        int r = shmheap_open(path, NULL, &x);
        CHECKF(r != 0, "scribble %u (field at %zu = %llx) accepted", i, m[i].off, (unsigned long long)v);
        if (!r) shmheap_close(x);
        CHECK_EQ(pwrite(fd, &orig, m[i].len, (off_t)m[i].off), (ssize_t)m[i].len);
    }
    /* a file cut shorter than its header says */
    struct stat sb;
    fstat(fd, &sb);
    CHECK_EQ(ftruncate(fd, sb.st_size - 65536), 0);
    CHECK_EQ(shmheap_open(path, NULL, &h), SHMHEAP_E_TOOSMALL);
    CHECK_EQ(ftruncate(fd, sb.st_size), 0);
    close(fd);
    CHECK_EQ(shmheap_open(path, NULL, &h), 0);
    if (h) {
        CHECK(shmheap_root_get(h, "keep") == keep);
        CHECK_EQ(shmheap_check(h, NULL), 0);
        shmheap_close(h);
    }
    shmheap_unlink(path, NULL);
}

/* A long random sequence of malloc/calloc/realloc/aligned_alloc/free and bad frees, checked
   against a model: blocks never overlap, contents survive, counts match shmheap_check. */
#define MODEL_N 2048
struct mblk { unsigned char *p; size_t size; unsigned char tag; };
static int cmp_mblk(const void *a, const void *b)
{
    const struct mblk *x = (const struct mblk *)a, *y = (const struct mblk *)b;
    return x->p < y->p ? -1 : x->p > y->p;
}
static void random_model(void)
{
    const char *n = t_uniq("model");
    shmheap *h = t_heap(n, 64 << 20);
    if (!h) return;
    static struct mblk m[MODEL_N], sorted[MODEL_N];
    uint64_t seed = 12345;
    long live = 0, errs = 0;
    for (int op = 0; op < 60000 && errs < 10; op++) {
        uint64_t x = t_rng(&seed);
        struct mblk *b = &m[x % MODEL_N];
        unsigned kind = (unsigned)(x >> 12) % 10;
        if (b->p) {
            for (size_t i = 0; i < b->size && i < 256; i++)
                if (b->p[i] != (unsigned char)(b->tag + i)) { errs++; t_fail(__FILE__, __LINE__, "op %d: block %p damaged", op, (void *)b->p); break; }
            if (kind < 3) { /* realloc */
                size_t ns = (x >> 20) & 1 ? 1 + (x >> 24) % 3000 : 1 + (x >> 24) % 200000;
                unsigned char *q = (unsigned char *)shmheap_realloc(h, b->p, ns);
                if (!q) continue;
                size_t keep = b->size < ns ? b->size : ns;
                for (size_t i = 0; i < keep && i < 256; i++)
                    if (q[i] != (unsigned char)(b->tag + i)) { errs++; t_fail(__FILE__, __LINE__, "op %d: realloc lost contents", op); break; }
                b->p = q;
                b->size = ns;
                for (size_t i = 0; i < ns && i < 256; i++) q[i] = (unsigned char)(b->tag + i);
            } else if (kind < 4) { /* a bad free (interior pointer), then the real one */
                if (shmheap_usable_size(h, b->p) > 1 && shmheap_free(h, b->p + 1) != SHMHEAP_E_BADPTR) { errs++; t_fail(__FILE__, __LINE__, "op %d: interior free accepted", op); }
                if (shmheap_free(h, b->p)) { errs++; t_fail(__FILE__, __LINE__, "op %d: free failed", op); }
                /* (no double free here: see tc_double_free_detected) */
                b->p = NULL;
                live--;
            } else {
                if (shmheap_free(h, b->p)) { errs++; t_fail(__FILE__, __LINE__, "op %d: free failed", op); }
                b->p = NULL;
                live--;
            }
        } else {
            size_t s = kind < 7 ? 1 + (x >> 20) % 2000 : kind < 9 ? 1 + (x >> 20) % 40000 : 1 + (x >> 20) % 400000;
            unsigned char *p;
            if (kind == 0) { size_t a = (size_t)16 << ((x >> 40) % 14); p = (unsigned char *)shmheap_aligned_alloc(h, a, s); if (p && (uintptr_t)p % a) { errs++; t_fail(__FILE__, __LINE__, "misaligned"); } }
            else if (kind == 1) { p = (unsigned char *)shmheap_calloc(h, 1, s); for (size_t i = 0; p && i < s; i += 61) if (p[i]) { errs++; t_fail(__FILE__, __LINE__, "calloc not zero"); break; } }
            else p = (unsigned char *)shmheap_malloc(h, s);
            if (!p) continue;
            if (shmheap_usable_size(h, p) < s || !shmheap_contains(h, p, s)) { errs++; t_fail(__FILE__, __LINE__, "op %d: bad block %p size %zu", op, (void *)p, s); }
            b->p = p;
            b->size = s;
            b->tag = (unsigned char)(x >> 56);
            for (size_t i = 0; i < s && i < 256; i++) p[i] = (unsigned char)(b->tag + i);
            live++;
        }
        if (op % 5000 == 4999) {
            int k = 0;
            for (int i = 0; i < MODEL_N; i++) if (m[i].p) sorted[k++] = m[i];
            qsort(sorted, (size_t)k, sizeof sorted[0], cmp_mblk);
            for (int i = 1; i < k; i++)
                if (sorted[i - 1].p + sorted[i - 1].size > sorted[i].p) { errs++; t_fail(__FILE__, __LINE__, "op %d: blocks %p and %p overlap", op, (void *)sorted[i - 1].p, (void *)sorted[i].p); }
            if (op % 10000 == 9999) shmheap_flush(h);
            shmheap_stats st;
            if (shmheap_check(h, &st)) { errs++; t_fail(__FILE__, __LINE__, "op %d: %s", op, st.problem); }
            else if ((long)st.live_blocks != live) { errs++; t_fail(__FILE__, __LINE__, "op %d: %zu live blocks, model says %ld", op, st.live_blocks, live); }
        }
    }
    for (int i = 0; i < MODEL_N; i++) if (m[i].p) { shmheap_free(h, m[i].p); m[i].p = NULL; }
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

/* Every public function with NULL or garbage arguments returns its documented error. */
static void null_and_garbage_args(void)
{
    shmheap *h = NULL;
    void *p;
    CHECK_EQ(shmheap_create(NULL, NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_create("x", NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_open(NULL, NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_open("x", NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_open(".", NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_open("shm:..", NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_open("file:", NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_unlink(NULL, NULL), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_close(NULL), SHMHEAP_E_INVAL);
    CHECK(shmheap_base(NULL) == NULL && shmheap_size(NULL) == 0 && shmheap_name(NULL) == NULL);
    CHECK(shmheap_of(NULL) == NULL);
    CHECK(shmheap_malloc(NULL, 10) == NULL);
    CHECK(shmheap_calloc(NULL, 1, 10) == NULL);
    CHECK(shmheap_realloc(NULL, NULL, 10) == NULL);
    CHECK(shmheap_aligned_alloc(NULL, 16, 10) == NULL);
    CHECK_EQ(shmheap_alloc(NULL, 10, 0, &p), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_free(NULL, NULL), 0);
    CHECK_EQ(shmheap_free(NULL, &p), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_usable_size(NULL, &p), 0);
    CHECK_EQ(shmheap_flush(NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_check(NULL, NULL), SHMHEAP_E_INVAL);
    CHECK(shmheap_root_set(NULL, "a", NULL) != 0);
    CHECK(shmheap_root_get(NULL, "a") == NULL);
    CHECK_EQ(shmheap_contains(NULL, &p, 1), 0);
    CHECK(shmheap_seal(NULL, &p, 1) != 0);
    CHECK(shmheap_unseal(NULL, &p, 1) != 0);
    CHECK_EQ(shmheap_unseal_batch(NULL, NULL, 0), 0);
    CHECK(shmheap_unseal_batch(NULL, NULL, 1) != 0);
    CHECK(shmheap_strerror(12345) != NULL && shmheap_strerror(-5) != NULL);
    const char *n = t_uniq("garbage");
    h = t_heap(n, 2 << 20);
    if (!h) return;
    int x;
    CHECK_EQ(shmheap_free(h, &x), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_free(h, (void *)(uintptr_t)1), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_free(h, (void *)UINTPTR_MAX), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_free(h, (char *)shmheap_base(h) + shmheap_size(h)), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_free(h, (char *)shmheap_base(h) + shmheap_size(h) - 1), SHMHEAP_E_DOUBLEFREE); /* a free span */
    CHECK_EQ(shmheap_usable_size(h, (char *)shmheap_base(h) + 8), 0);
    CHECK(shmheap_root_get(h, NULL) == NULL);
    CHECK_EQ(shmheap_root_set(h, NULL, NULL), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_root_set(h, "a", (char *)shmheap_base(h) + shmheap_size(h)), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_root_set(h, "a", (void *)UINTPTR_MAX), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_contains(h, (char *)shmheap_base(h) + shmheap_size(h) - 1, SIZE_MAX), 0);
    CHECK_EQ(shmheap_seal(h, (void *)UINTPTR_MAX, 2), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_seal(h, shmheap_base(h), SIZE_MAX), SHMHEAP_E_FOREIGN);
    shmheap_range r[2] = {{(char *)shmheap_base(h) + (1 << 20), 10}, {&x, 4}};
    CHECK_EQ(shmheap_unseal_batch(h, r, 2), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_pkey_set(-1, 0) == 0, 0);
    CHECK(shmheap_pkey_alloc(99) < 0);
    shmheap_opts bad = {.addr = 12345};
    shmheap *h2;
    CHECK_EQ(shmheap_create(t_uniq("badaddr"), &bad, &h2), SHMHEAP_E_INVAL);
    shmheap_opts huge = {.size = (size_t)1 << 50};
    CHECK_EQ(shmheap_create(t_uniq("huge"), &huge, &h2), SHMHEAP_E_INVAL);
    shmheap_opts badpod = {.pod = "a/b"};
    CHECK_EQ(shmheap_create(t_uniq("badpod"), &badpod, &h2), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_open(t_uniq("badpod"), &badpod, &h2), SHMHEAP_E_NOTFOUND);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    rm(h, n);
}

/* A pod entry whose shm object was removed behind shmheap's back (rm /dev/shm/x) is stale: its
   range is given back when it is in the way. Creates no longer open every object the pod names
   first (with 500 live heaps that made each create take 2 ms instead of 0.3 ms), so this is the
   sweep on demand: a create at the stale range's address, and one in a private pod. */
static void pod_stale_entry_swept_when_in_the_way(void)
{
    const char *pod = t_uniq("pods");
    char podname[96];
    snprintf(podname, sizeof podname, "%s", pod);
    shmheap_opts o = {.size = 2 << 20, .pod = podname};
    const char *n0 = t_uniq("stale");
    char a[96], b[96], path[128];
    snprintf(a, sizeof a, "%s", n0);
    snprintf(b, sizeof b, "%s-b", n0);
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(a, &o, &h), 0);
    if (!h) return;
    void *at = shmheap_base(h);
    shmheap_close(h);
    snprintf(path, sizeof path, "/%s", a);
    CHECK_EQ(shm_unlink(path), 0); /* behind shmheap's back: the pod still names it */
    shmheap_opts ob = o;
    ob.addr = (uint64_t)(uintptr_t)at;
    h = NULL;
    int r = shmheap_create(b, &ob, &h);
    CHECKF(r == 0, "create at the stale entry's address: %s", shmheap_strerror(r));
    if (h) CHECK(shmheap_base(h) == at);
    rm(h, b);
    /* a heap larger than the pod's window (8 TiB) has no place: a clear error, nothing left */
    shmheap_opts oh = o;
    oh.size = (size_t)9 << 40;
    h = NULL;
    r = shmheap_create(a, &oh, &h);
    CHECKF(r == SHMHEAP_E_PODFULL, "a 9 TiB heap: %d (%s)", r, shmheap_strerror(r));
    CHECK(strstr(shmheap_strerror(SHMHEAP_E_PODFULL), "pod is full") != NULL);
    if (h) rm(h, a);
    snprintf(path, sizeof path, "/%s", a);
    CHECK(shm_unlink(path) != 0 && errno == ENOENT); /* create cleaned up after itself */
    snprintf(path, sizeof path, "/%s", podname);
    shm_unlink(path);
}

/* A big heap costs what is used of it, not its size: creating a 64 GiB heap in /dev/shm used
   to write all its metadata (1/128 of the size: 512 MiB), and every search for a partly free
   span read the whole span table (8 MiB here; reading a page of /dev/shm never written
   allocates it). Now the object holds only what was touched: checked by the blocks the shm
   object occupies after create, and after a thousand small blocks of several classes and a
   large one (about 7.5 MiB of data pages written). shmheap_check reads the whole span table,
   1/8192 of the heap. */
static long shm_kib(const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    struct stat st;
    return stat(path, &st) ? -1 : (long)(st.st_blocks / 2);
}
static void huge_heap_touches_little(void)
{
    const char *n = t_uniq("huge");
    shmheap_opts o = {.size = (size_t)64 << 30};
    shmheap *h = NULL;
    double t0 = now_s();
    int r = shmheap_create(n, &o, &h);
    if (r == SHMHEAP_E_PODFULL || r == -ENOSPC || r == -ENOMEM) { printf("  skip huge_heap_touches_little: %s\n", shmheap_strerror(r)); return; }
    CHECKF(r == 0, "create 64 GiB: %s", shmheap_strerror(r));
    if (r) return;
    long kib = shm_kib(n);
    printf("# 64 GiB heap: created in %.1f ms, %ld KiB in /dev/shm\n", (now_s() - t0) * 1e3, kib);
    CHECKF(kib >= 0 && kib < 4096, "a fresh 64 GiB heap occupies %ld KiB", kib);
    void *p[1000];
    static const size_t sz[] = {16, 100, 1000, 4000, 30000};
    for (int i = 0; i < 1000; i++) {
        p[i] = shmheap_malloc(h, sz[i % 5]);
        CHECK(p[i] != NULL);
        if (p[i]) memset(p[i], 1, sz[i % 5]);
    }
    void *big = shmheap_malloc(h, (size_t)1 << 20);
    CHECK(big != NULL);
    kib = shm_kib(n);
    printf("# after use: %ld KiB in /dev/shm\n", kib);
    CHECKF(kib >= 0 && kib < 12 * 1024, "the 64 GiB heap occupies %ld KiB after ~7.5 MiB of use", kib);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 1001);
    for (int i = 0; i < 1000; i++) CHECK_EQ(shmheap_free(h, p[i]), 0);
    CHECK_EQ(shmheap_free(h, big), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    kib = shm_kib(n);
    printf("# after use and check: %ld KiB in /dev/shm\n", kib);
    CHECKF(kib >= 0 && kib < 20 * 1024, "the 64 GiB heap occupies %ld KiB after use and a check", kib);
    rm(h, n);
}

int main(void)
{
    /* bug reproducers: these FAIL while the bug is there */
    TEST(tc_double_free_detected);
    TEST(tc_double_free_cross_thread);
    TEST(zero_size_large_align);
    TEST(create_race_file_exactly_one);
    TEST(open_while_creating);
    TEST(creator_keeps_fd);
    TEST(open_rejects_nspans_overflow);
    TEST(full_hint_on_reused_span);
    TEST(init_recovery_with_full_hint);
    TEST(unlink_create_pod_race);
    TEST(fixed_addr_straddling_window);
    TEST(open_after_recreate);
    TEST(peer_large_run_length);
    TEST(peer_bad_class);
    TEST(unseal_batch_count_overflow);
    TEST(seal_edges);
    TEST(bad_args_crash);
    TEST(open_on_small_stack);
    TEST(lock_timeout_spurious_failures);
    /* adversarial checks that pass */
    TEST(create_race_shm_exactly_one);
    TEST(create_or_open_many);
    TEST(mp_fill_no_overlap);
    TEST(aligned_extremes);
    TEST(realloc_edges);
    TEST(scribbled_headers);
    TEST(random_model);
    TEST(null_and_garbage_args);
    TEST(huge_heap_touches_little);
    TEST(pod_stale_entry_swept_when_in_the_way);
    return T_DONE();
}
