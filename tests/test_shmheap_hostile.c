/* shmheap.h against hostile peers and bad input: headers with overflowing span counts, large
 * runs and classes a peer scribbled, scribbled headers, unseal_batch counts that overflow, seal
 * edges, NULL and garbage arguments, pkeys without pku. Anything that could crash the test
 * binary runs in a forked child. */
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
    shmheap *h = t_heap(t_heap_path(path, "ovf"), 4 << 20);
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
        int st = t_in_child(check_child, h);
        CHECKF(st == 0, "shmheap_check on it: child status %d", st);
        shmheap_close(h);
    }
    shmheap_unlink(path, NULL);
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
    t_rm(h, n);
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

/* Each case run in a child process given a new heap of size bytes (or NULL, no_heap): each must
   exit 0. */
struct child_case { int (*fn)(void *); int no_heap; const char *what; };
static void in_children(const char *base, size_t size, const struct child_case *cs, size_t n)
{
    const char *name = t_uniq(base);
    shmheap *h = t_heap(name, size);
    if (!h) return;
    for (size_t i = 0; i < n; i++) {
        int st = t_in_child(cs[i].fn, cs[i].no_heap ? NULL : h);
        CHECKF(st == 0, "%s: child status %d", cs[i].what, st);
    }
    t_rm(h, name);
}

static void peer_bad_class(void)
{
    static const struct child_case cs[] = {
        {bad_class_retire_child, 0, "retire_empty over a span entry of class 200"},
        {bad_class_recover_child, 0, "recovery of a journal with class 200"}};
    in_children("peercls", 4 << 20, cs, 2);
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
    static const struct child_case cs[] = {{unseal_ovf_child, 0, "unseal_batch with n = 2^60"}};
    in_children("ovfb", 2 << 20, cs, 1);
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
    int st = t_in_child(write_first, p);
    CHECKF(st == 0, "a write to %p faults after seal(p + 100, 0): child status %d", (void *)p, st);
    shmheap_unseal(h, p, 8192);
    int r = shmheap_seal(h, shmheap_base(h), 4096);
    CHECKF(r != 0, "seal of the heap header accepted");
    if (!r) shmheap_unseal(h, shmheap_base(h), 4096);
    t_rm(h, n);
}

/* BUG (minor): NULL out in shmheap_alloc is written before any check; shmheap_strerror(INT_MIN)
   negates INT_MIN. */
static int alloc_null_out_child(void *arg) { return shmheap_alloc((shmheap *)arg, 1, 0, NULL) == SHMHEAP_E_INVAL ? 0 : 1; }

static int strerror_min_child(void *arg) { (void)arg; return shmheap_strerror(INT_MIN) != NULL ? 0 : 1; }

static void bad_args_crash(void)
{
    static const struct child_case cs[] = {
        {alloc_null_out_child, 0, "shmheap_alloc(h, 1, 0, NULL)"},
        {strerror_min_child, 1, "shmheap_strerror(INT_MIN)"}};
    in_children("nullout", 2 << 20, cs, 2);
}

/* Headers scribbled field by field are refused (and the original still opens). */
static void scribbled_headers(void)
{
    char path[96];
    shmheap *h = t_heap(t_heap_path(path, "scrib"), 4 << 20);
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
    t_rm(h, n);
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
    t_rm(h, n);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(open_rejects_nspans_overflow);
    RUN(peer_large_run_length);
    RUN(peer_bad_class);
    RUN(unseal_batch_count_overflow);
    RUN(seal_edges);
    RUN(bad_args_crash);
    RUN(scribbled_headers);
    RUN(null_and_garbage_args);
    RUN(g_pkey_notsup);
    return T_DONE();
}
