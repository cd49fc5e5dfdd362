/* shmheap.h's heaps and the pod: create and open racing between processes (files and /dev/shm),
 * open while a creator formats, a creator's descriptor, unlink racing create, fixed addresses
 * straddling the window, open after re-create, open on a small stack, the options of create,
 * SHMHEAP_WINDOW and SHMHEAP_POD, the header deciding the address, open counts, name limits,
 * stale pod entries, a huge heap that touches little, reservations (many heaps, one entry). */
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
#include <sched.h>
#include <sys/resource.h>

static double now_s(void) { return (double)rcp__now_ns() / 1e9; }

/* n processes (n <= 8) create the heap NAME of size bytes at the same moment: how many created
   it (*wins) and how many failed otherwise than with SHMHEAP_E_EXISTS (*other). -1 if no pipe. */
static int create_race(const char *name, int n, size_t size, int *wins, int *other)
{
    int pfd[2];
    pid_t pid[8];
    *wins = *other = 0;
    if (pipe(pfd)) return -1;
    for (int i = 0; i < n; i++) {
        if ((pid[i] = fork()) == 0) {
            char c;
            close(pfd[1]);
            if (read(pfd[0], &c, 1) < 0) _exit(9);
            shmheap *h;
            shmheap_opts o = {.size = size};
            int rc = shmheap_create(name, &o, &h);
            _exit(rc == 0 ? 0 : rc == SHMHEAP_E_EXISTS ? 1 : 2);
        }
    }
    close(pfd[0]);
    close(pfd[1]); /* all go */
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
        *wins += code == 0;
        *other += code > 1;
    }
    return 0;
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
        t_heap_path(path, "frace");
        int wins, other;
        if (create_race(path, 6, 32 << 20, &wins, &other)) return;
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
        t_rm(h, n);
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
    shmheap *h = t_heap(t_heap_path(path, "cfd"), 4 << 20);
    if (!h) return;
    CHECKF(h->fd >= 0, "creator's handle has fd %d: the fd was closed before it was dup'ed", h->fd);
    t_rm(h, path);
    int st = t_in_child(trunc_close_child, path);
    CHECKF(st == 0, "close after a peer truncated the file: child status %d (%s)", st,
           st == 128 + SIGBUS ? "SIGBUS" : "?");
    shmheap_unlink(path, NULL);
}

/* Options for 2 MiB heaps in a pod of a new name (written to pod[len]). */
static shmheap_opts pod_opts(char *pod, size_t len, const char *base)
{
    snprintf(pod, len, "%s", t_uniq(base));
    shmheap_opts o = {.size = 2 << 20, .pod = pod};
    return o;
}

/* BUG: shmheap_unlink does shm_unlink, then takes the pod lock and drops the pod entry by name.
   A create of the same name that gets in between records its new range, which the unlink then
   drops: the live heap's address range is free in the pod and goes to the next heap. The test
   holds the pod lock to stop the unlink between its two steps. */
static void unlink_create_pod_race(void)
{
    char pod[96], podpath[128], name[96];
    shmheap_opts o = pod_opts(pod, sizeof pod, "pod");
    snprintf(podpath, sizeof podpath, "/%s", pod);
    snprintf(name, sizeof name, "%s", t_uniq("ucr"));
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
    CHECK_EQ(t_in_child(recreate_child, n), 0);
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
    int st = t_in_child(small_stack_child, n);
    CHECKF(st == 0, "shmheap_open on a thread with a 64 KiB stack: child status %d", st);
    shmheap_unlink(n, NULL);
}

/* Many processes create the same shm name at once: exactly one wins, the rest get EXISTS. */
static void create_race_shm_exactly_one(void)
{
    int bad = 0;
    for (int round = 0; round < 6; round++) {
        const char *n = t_uniq("srace");
        int wins, other;
        if (create_race(n, 8, 16 << 20, &wins, &other)) return;
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

/* A pod entry whose shm object was removed behind shmheap's back (rm /dev/shm/x) is stale: its
   range is given back when it is in the way. Creates no longer open every object the pod names
   first (with 500 live heaps that made each create take 2 ms instead of 0.3 ms), so this is the
   sweep on demand: a create at the stale range's address, and one in a private pod. */
static void pod_stale_entry_swept_when_in_the_way(void)
{
    char podname[96];
    shmheap_opts o = pod_opts(podname, sizeof podname, "pods");
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
    t_rm(h, b);
    /* a heap larger than the pod's window (8 TiB) has no place: a clear error, nothing left */
    shmheap_opts oh = o;
    oh.size = (size_t)9 << 40;
    h = NULL;
    r = shmheap_create(a, &oh, &h);
    CHECKF(r == SHMHEAP_E_PODFULL, "a 9 TiB heap: %d (%s)", r, shmheap_strerror(r));
    CHECK(strstr(shmheap_strerror(SHMHEAP_E_PODFULL), "pod is full") != NULL);
    if (h) t_rm(h, a);
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
    t_rm(h, n);
}

static int shm_mode(const char *name)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return stat(p, &st) ? -1 : (int)(st.st_mode & 0777);
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
    t_heap_path(path, "ghdr");
    g_path = path;
    shmheap *h = t_heap(path, 2 << 20);
    if (!h) return;
    g_base = (uintptr_t)shmheap_base(h);
    int st = t_in_child(other_pod_child, h);
    CHECKF(st == 0, "open through another pod: child status %d", st);
    st = t_in_child(addr_taken_child, h);
    CHECKF(st == 0, "open over a private mapping: child status %d (2: not ADDRINUSE, 3: mapping replaced)", st);
    t_rm(h, path);
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
    t_rm(h, n);
    memset(nm, 'h', sizeof nm);
    int off = snprintf(nm, sizeof nm, "t-%d-", (int)getpid());
    nm[off] = 'h';
    nm[100] = 0;
    shmheap_opts o = {.size = 2 << 20};
    int r = shmheap_create(nm, &o, &h2);
    CHECKF(r == 0, "a heap name of 100 bytes: %s", shmheap_strerror(r));
    if (!r) t_rm(h2, nm);
    nm[100] = 'h';
    nm[101] = 0;
    r = shmheap_create(nm, &o, &h2);
    CHECK_EQ(r, SHMHEAP_E_BADNAME);
    if (!r) t_rm(h2, nm);
}

/* A reservation: 8 heaps on memfds in one pod entry (t_pod_fd_entries counts them as heaps);
   each maps at its offset, allocates, and is named fd:IDX:...@ADDR; offsets outside the range
   or unaligned are refused; a place taken in this process is SHMHEAP_E_ADDRINUSE; a hold of
   the reservation keeps its entry after resv_destroy and the heaps' close, until it is closed. */
static void resv_many_heaps_one_entry(void)
{
    t_pod pod;
    t_pod_enter(&pod, "resv");
    shmheap_resv *r = NULL;
    shmheap_opts o = {.size = (size_t)2 << 20};
    CHECK_EQ(shmheap_resv_create(0, NULL, &r), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_resv_create((size_t)16 << 20, NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_resv_create((size_t)16 << 20, NULL, &r), 0);
    if (!r) {
        t_pod_leave(&pod);
        return;
    }
    CHECK_EQ(shmheap_resv_size(r), (size_t)16 << 20);
    char *base = (char *)shmheap_resv_base(r);
    CHECK(base != NULL);
    shmheap *h[8] = {NULL};
    int fd[8];
    for (int k = 0; k < 8; k++) {
        fd[k] = memfd_create("t-resv", MFD_CLOEXEC);
        CHECK_EQ(shmheap_create_fd_in(r, (size_t)k << 21, fd[k], &o, &h[k]), 0);
        if (!h[k]) continue;
        CHECK(shmheap_base(h[k]) == base + ((size_t)k << 21));
        CHECK(strchr(shmheap_name(h[k]), '@') != NULL);
        CHECK(shmheap_malloc(h[k], 100) != NULL);
    }
    int extra = memfd_create("t-resv", MFD_CLOEXEC);
    shmheap *x = NULL;
    CHECK_EQ(shmheap_create_fd_in(r, (size_t)8 << 21, extra, &o, &x), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_create_fd_in(r, 4096, extra, &o, &x), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_create_fd_in(r, 0, extra, &o, &x), SHMHEAP_E_ADDRINUSE);
    CHECK_EQ(shmheap_create_fd_in(NULL, 0, extra, &o, &x), SHMHEAP_E_INVAL);
    close(extra);
    int rec = 0, held = 0;
    CHECK_EQ(t_pod_fd_entries(&rec, &held), 0);
    CHECK_EQ(held, 8); /* eight heaps alive, in one entry */
    int hold = shmheap_resv_hold(r);
    CHECK(hold >= 0);
    CHECK_EQ(shmheap_resv_destroy(r), 0);
    for (int k = 0; k < 8; k++) {
        if (h[k]) shmheap_close(h[k]);
        close(fd[k]);
    }
    CHECK(t_pod_held() == 0);
    /* the hold keeps the range: another reservation does not get it */
    shmheap_resv *r2 = NULL;
    CHECK_EQ(shmheap_resv_create((size_t)16 << 20, NULL, &r2), 0);
    if (r2) CHECK((char *)shmheap_resv_base(r2) != base);
    if (r2) shmheap_resv_destroy(r2);
    close(hold);
    t_pod_leave(&pod);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(create_race_file_exactly_one);
    RUN(open_while_creating);
    RUN(creator_keeps_fd);
    RUN(unlink_create_pod_race);
    RUN(fixed_addr_straddling_window);
    RUN(open_after_recreate);
    RUN(open_on_small_stack);
    RUN(create_race_shm_exactly_one);
    RUN(create_or_open_many);
    RUN(huge_heap_touches_little);
    RUN(pod_stale_entry_swept_when_in_the_way);
    RUN(g_create_options);
    RUN(g_window_pod_unlink);
    RUN(g_header_decides);
    RUN(g_opens);
    RUN(g_name_limits);
    RUN(resv_many_heaps_one_entry);
    return T_DONE();
}
