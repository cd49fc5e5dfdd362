/* shmheap.h's heaps in memory the caller mapped (shmheap__create_mem / shmheap__open_mem), the
 * pod device's case: a heap in a range of a mapped file used by two processes at once (exact
 * counts), bad arguments, memory that holds no heap or a moved header (errors, no crash), close
 * leaving the caller's mapping mapped and read-write (after seals too), open counts, the handle
 * rule, overlaps with heaps open here, no descriptor and no byte lock held. */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <sys/mman.h>

#define MB ((size_t)1 << 20)
#define DEV_SIZE (16 * MB)
#define NBLK 2000

static char dev_path[64];

/* A free 2 MiB aligned address range of len bytes in this process (nothing left mapped). */
static char *free_range(size_t len)
{
    char *r = (char *)mmap(NULL, len + 2 * MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return NULL;
    munmap(r, len + 2 * MB);
    return (char *)(((uintptr_t)r + 2 * MB - 1) & ~(uintptr_t)(2 * MB - 1));
}

/* The device file mapped whole at at (shared); NULL on failure. */
static char *dev_map(char *at)
{
    int fd = open(dev_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = mmap(at, DEV_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    close(fd);
    return p == (void *)at ? at : NULL;
}

/* A new zeroed device file, mapped at a free address. */
static char *dev_new(void)
{
    static int n;
    snprintf(dev_path, sizeof dev_path, "/tmp/%s-%d", t_uniq("memdev"), n++);
    int fd = open(dev_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)DEV_SIZE)) return NULL;
    close(fd);
    char *at = free_range(DEV_SIZE);
    return at ? dev_map(at) : NULL;
}

static void dev_drop(char *dev)
{
    if (dev) munmap(dev, DEV_SIZE);
    unlink(dev_path);
}

/* Count of descriptors open in this process. */
static int nfds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Allocate NBLK small blocks (and 4 large ones) in h, tagged with who, under a root named
   root: the array of pointers. 0 or the first failure's line. */
static int fill(shmheap *h, const char *root, unsigned who)
{
    void **v = (void **)shmheap_calloc(h, NBLK + 4, sizeof *v);
    if (!v) return __LINE__;
    for (unsigned i = 0; i < NBLK + 4; i++) {
        size_t sz = i < NBLK ? 16 + (i % 60) * 16 : 100000 + i;
        unsigned *p = (unsigned *)shmheap_malloc(h, sz);
        if (!p) return __LINE__;
        p[0] = who;
        p[1] = i;
        v[i] = p;
    }
    return shmheap_root_set(h, root, v) ? __LINE__ : 0;
}

/* Checks the blocks fill made, then frees them and the array. */
static int verify_free(shmheap *h, const char *root, unsigned who)
{
    void **v = (void **)shmheap_root_get(h, root);
    if (!v) return __LINE__;
    for (unsigned i = 0; i < NBLK + 4; i++) {
        unsigned *p = (unsigned *)v[i];
        if (!shmheap_contains(h, p, 8) || p[0] != who || p[1] != i) return __LINE__;
        if (shmheap_free(h, p)) return __LINE__;
    }
    if (shmheap_root_set(h, root, NULL) || shmheap_free(h, v)) return __LINE__;
    return 0;
}

/* Two processes, each with its own mapping of one file at the same address, use one heap at
   once; neither maps through shmheap. */
static void mem_two_processes(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    char *heap = dev + 4 * MB; /* a heap in a range of the device, not at its start */
    size_t hsize = 8 * MB;
    int go[2], done[2];
    CHECK(pipe(go) == 0 && pipe(done) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        shmheap *h;
        if (read(go[0], &c, 1) != 1) _exit(10);
        /* the child's own mapping: the inherited one goes first */
        munmap(dev, DEV_SIZE);
        if (!dev_map(dev)) _exit(11);
        if (shmheap__open_mem(heap, hsize, NULL, NULL, &h)) _exit(12);
        int line = fill(h, "child", 2);
        if (line) _exit(13);
        if (shmheap_check(h, NULL)) _exit(14);
        if (write(done[1], "x", 1) != 1) _exit(15);
        if (read(go[0], &c, 1) != 1) _exit(16);
        if (verify_free(h, "parent", 1)) _exit(17); /* frees the parent's blocks */
        _exit(shmheap_close(h) ? 18 : 0);
    }
    shmheap *h = NULL;
    int fds = nfds();
    CHECK_EQ(shmheap__create_mem(heap, hsize, NULL, NULL, &h), 0);
    CHECK_EQ(nfds(), fds); /* no descriptor kept */
    CHECK(h && shmheap_base(h) == heap && shmheap_size(h) == hsize);
    CHECK(write(go[1], "x", 1) == 1);
    if (h) CHECK_EQ(fill(h, "parent", 1), 0); /* at the same time as the child */
    char c;
    CHECK(read(done[0], &c, 1) == 1);
    shmheap_stats st;
    if (h) {
        CHECK_EQ(shmheap_check(h, &st), 0);
        CHECK_EQ(st.live_blocks + st.cached_blocks, 2 * (NBLK + 5));
        CHECK_EQ(verify_free(h, "child", 2), 0);
    }
    CHECK(write(go[1], "x", 1) == 1);
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child status %x", ws);
    if (h) {
        CHECK_EQ(shmheap_flush(h), 0);
        CHECK_EQ(shmheap_check(h, &st), 0);
        CHECK_EQ(st.live_blocks, 0);
        CHECK_EQ(st.cached_blocks, 0);
        CHECK_EQ(shmheap_close(h), 0);
    }
    /* nothing outside the heap's range was written */
    size_t dirty = 0;
    for (size_t i = 0; i < 4 * MB; i++) dirty += dev[i] != 0;
    for (size_t i = 12 * MB; i < DEV_SIZE; i++) dirty += dev[i] != 0;
    CHECK_EQ(dirty, 0);
    close(go[0]); close(go[1]); close(done[0]); close(done[1]);
    dev_drop(dev);
}

static void mem_bad_arguments(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    shmheap *h = (shmheap *)1;
    CHECK_EQ(shmheap__create_mem(NULL, 2 * MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK(h == NULL);
    CHECK_EQ(shmheap__open_mem(NULL, 2 * MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem(dev + 4096, 2 * MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__open_mem(dev + MB, 2 * MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem(dev, 0, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem(dev, MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem(dev, 3 * MB, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__open_mem(dev, 2 * MB + 4096, NULL, NULL, &h), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem(dev, 2 * MB, NULL, NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__open_mem(dev, 2 * MB, NULL, NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap__create_mem((void *)(uintptr_t)(-2 * MB), 4 * MB, NULL, NULL, &h),
             SHMHEAP_E_INVAL); /* wraps around */
    /* the smallest heap, 2 MiB, works */
    CHECK_EQ(shmheap__create_mem(dev, 2 * MB, NULL, NULL, &h), 0);
    void *p = h ? shmheap_malloc(h, 1000) : NULL;
    CHECK(p && shmheap_contains(h, p, 1000));
    if (h) CHECK_EQ(shmheap_close(h), 0);
    /* a 4 MiB heap opened as a 2 MiB range does not fit */
    CHECK_EQ(shmheap__create_mem(dev + 4 * MB, 4 * MB, NULL, NULL, &h), 0);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap__open_mem(dev + 4 * MB, 2 * MB, NULL, NULL, &h), SHMHEAP_E_TOOSMALL);
    CHECK_EQ(shmheap__open_mem(dev + 4 * MB, 8 * MB, NULL, NULL, &h), 0); /* a larger range does */
    CHECK(h && shmheap_size(h) == 4 * MB);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    dev_drop(dev);
}

/* Memory that holds no heap, or a header that does not belong there: errors, never a crash. */
static void mem_open_no_heap(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    shmheap *h = NULL;
    CHECK_EQ(shmheap__open_mem(dev, 4 * MB, NULL, NULL, &h), SHMHEAP_E_BADMAGIC); /* zeroes */
    uint64_t seed = 88172645463325252ull;
    for (size_t i = 0; i < 4 * MB / 8; i++) ((uint64_t *)dev)[i] = t_rng(&seed);
    CHECK_EQ(shmheap__open_mem(dev, 4 * MB, NULL, NULL, &h), SHMHEAP_E_BADMAGIC); /* noise */
    /* a heap's header copied elsewhere: it names another base */
    CHECK_EQ(shmheap__create_mem(dev + 8 * MB, 4 * MB, NULL, NULL, &h), 0);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    memcpy(dev, dev + 8 * MB, 2 * MB);
    CHECK_EQ(shmheap__open_mem(dev, 4 * MB, NULL, NULL, &h), SHMHEAP_E_CORRUPT);
    /* a header whose sizes do not add up */
    struct shmheap__hdr *H = (struct shmheap__hdr *)(dev + 8 * MB);
    uint64_t keep = H->nspans;
    H->nspans = 1u << 30;
    CHECK_EQ(shmheap__open_mem(dev + 8 * MB, 4 * MB, NULL, NULL, &h), SHMHEAP_E_TOOSMALL);
    H->nspans = keep;
    CHECK_EQ(shmheap__open_mem(dev + 8 * MB, 4 * MB, NULL, NULL, &h), 0);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    dev_drop(dev);
}

/* close leaves the caller's mapping mapped and read-write, sealed pages included; open counts;
   the handle rule; overlaps with heaps open here. */
static void mem_close_leaves_mapping(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    shmheap *h = NULL, *h2 = NULL, *h3 = NULL;
    CHECK_EQ(shmheap__create_mem(dev, 8 * MB, NULL, NULL, &h), 0);
    if (!h) { dev_drop(dev); return; }
    CHECK_EQ(shmheap_opens(h), 1);
    CHECK_EQ(shmheap__open_mem(dev, 8 * MB, NULL, NULL, &h2), 0);
    CHECK(h2 == h);
    CHECK_EQ(shmheap_opens(h), 2);
    /* a heap of this process lies there: not formatted again, not opened as another */
    CHECK_EQ(shmheap__create_mem(dev, 8 * MB, NULL, NULL, &h3), SHMHEAP_E_BUSY);
    CHECK_EQ(shmheap__create_mem(dev + 6 * MB, 4 * MB, NULL, NULL, &h3), SHMHEAP_E_BUSY);
    CHECK_EQ(shmheap__open_mem(dev + 6 * MB, 4 * MB, NULL, NULL, &h3), SHMHEAP_E_ADDRINUSE);
    char *p = (char *)shmheap_malloc(h, 3 * 4096);
    CHECK(p);
    if (!p) return;
    memset(p, 7, 3 * 4096);
    CHECK(shmheap_of(p) == h);
    CHECK_EQ(shmheap_seal(h, p, 3 * 4096), 0);
    CHECK_EQ(shmheap_root_set(h, "p", p), 0);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap_opens(h), 1);
    CHECK(shmheap_root_get(h, "p") == p);
    CHECK_EQ(shmheap_close(h), 0);
    /* closed: the handle rule, shmheap_of no longer finds it */
    errno = 0;
    CHECK(shmheap_malloc(h, 16) == NULL && errno == EBADF);
    CHECK_EQ(shmheap_close(h), SHMHEAP_E_BADHANDLE);
    CHECK(shmheap_of(p) == NULL);
    /* still mapped and writable, sealed pages included; the heap is still there */
    CHECK(p[0] == 7 && p[3 * 4096 - 1] == 7);
    p[100] = 9; /* a fault here would be a crash of the test */
    CHECK_EQ(shmheap__open_mem(dev, 8 * MB, NULL, NULL, &h), 0);
    CHECK(h && shmheap_root_get(h, "p") == p && p[100] == 9);
    if (h) {
        CHECK_EQ(shmheap_free(h, p), 0);
        CHECK_EQ(shmheap_check(h, NULL), 0);
        CHECK_EQ(shmheap_close(h), 0);
    }
    dev_drop(dev);
}

/* protection keys on such a heap: close gives the pages the default key back */
static void mem_pkeys(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    shmheap *h = NULL;
    CHECK_EQ(shmheap__create_mem(dev, 4 * MB, NULL, NULL, &h), 0);
    int k = shmheap_pkey_alloc(0);
    CHECK(k > 0);
    if (h && k > 0) {
        CHECK_EQ(shmheap_pkey_protect(h, shmheap_base(h), shmheap_size(h), k), 0);
        CHECK_EQ(shmheap_close(h), 0);
        CHECK_EQ(shmheap_pkey_set(k, 1), 0); /* no access through k: pages of key 0 still work */
        dev[4096] = 1;
        CHECK(dev[4096] == 1);
        CHECK_EQ(shmheap_pkey_set(k, 0), 0);
        shmheap_pkey_free(k);
    }
    dev_drop(dev);
}

/* A heap opened twice in two processes: the second process holds no lock on any file (there
   is none) and its mutex holder in a forked child that dies is recovered as on one host. */
static void mem_dead_holder_same_host(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    shmheap *h = NULL;
    CHECK_EQ(shmheap__create_mem(dev, 4 * MB, NULL, NULL, &h), 0);
    if (!h) { dev_drop(dev); return; }
    pid_t pid = fork();
    if (pid == 0) {
        shmheap__lock(h);
        long s = shmheap__find_free_run(h, 2, 0);
        shmheap__journal(h, SHMHEAP__J_LALLOC, (uint64_t)s, 2, 0, 0);
        rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_HEAD, 0, 2));
        kill(getpid(), SIGKILL);
    }
    int ws;
    waitpid(pid, &ws, 0);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.recoveries, 1);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(shmheap_close(h), 0);
    dev_drop(dev);
}

/* With leases, in one kernel (the namespaced hosts are tests/test_shmheap_lease.c, as root):
   a holder killed inside the mutex is named only by its lease (no thread id in the word), and
   a locker with a lease of the same table recovers it once the lease lapsed. */
static void mem_lease_dead_holder(void)
{
    char *dev = dev_new();
    CHECK(dev);
    if (!dev) return;
    struct rcp__lease_opts lo = {.nslots = 8, .bound_ms = 100};
    struct rcp__lease l;
    CHECK_EQ(rcp__lease_attach(&l, dev, 65536, &lo), 0);
    shmheap *h = NULL;
    CHECK_EQ(shmheap__create_mem(dev + 2 * MB, 4 * MB, NULL, NULL, &h), 0);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rcp__lease m;
        shmheap *c;
        if (rcp__lease_attach(&m, dev, 65536, NULL) || rcp__lease_take(&m, "child") < 0 ||
            shmheap__open_mem(dev + 2 * MB, 4 * MB, &m, NULL, &c) || shmheap__lock(c))
            _exit(1);
        if (!(rcp__load(&c->hdr->lock.m.owner) & SHMHEAP__LW)) _exit(2);
        long s = shmheap__find_free_run(c, 2, 0);
        shmheap__journal(c, SHMHEAP__J_LALLOC, (uint64_t)s, 2, 0, 0);
        rcp__store(&c->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_HEAD, 0, 2));
        kill(getpid(), SIGKILL);
    }
    int ws;
    waitpid(pid, &ws, 0);
    CHECKF(WIFSIGNALED(ws), "child status %x", ws);
    CHECK(rcp__lease_take(&l, "parent") >= 0);
    CHECK_EQ(shmheap__open_mem(dev + 2 * MB, 4 * MB, &l, NULL, &h), 0);
    if (h) {
        shmheap_stats st;
        uint64_t t0 = rcp__now_ns();
        CHECK_EQ(shmheap_check(h, &st), 0);
        uint64_t ms = (rcp__now_ns() - t0) / 1000000;
        CHECKF(ms >= 90 && ms < 5000, "recovered after %llu ms (bound 100 ms)",
               (unsigned long long)ms);
        CHECK_EQ(st.recoveries, 1);
        CHECK_EQ(st.live_blocks, 0);
        CHECK_EQ(shmheap_close(h), 0);
    }
    rcp__lease_detach(&l);
    dev_drop(dev);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--", 2)) t_only = argv[1];
    RUN(mem_two_processes);
    RUN(mem_bad_arguments);
    RUN(mem_open_no_heap);
    RUN(mem_close_leaves_mapping);
    if (!t_only || strstr("mem_pkeys", t_only))
        TEST_UNLESS(shmheap_pkey_supported() ? NULL : "no protection keys here", mem_pkeys);
    RUN(mem_dead_holder_same_host);
    RUN(mem_lease_dead_holder);
    return T_DONE();
}
