/* shmheap.h's manual sentence by sentence through the public API only: names and where memory
 * lives, sizes and alignments, create/open/close/unlink and their codes, open counts, the
 * allocator's promises (size classes, align 0 = 16, errno of the pointer calls, checked frees,
 * usable sizes, the thread cache's bound, what the stats count), roots, contains, sealing,
 * protection keys without pku, strerror's rule, the environment (SHMHEAP_WINDOW,
 * SHMHEAP_POD_ID, SHMHEAP_DEBUG). */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>

#define MIB ((size_t)1 << 20)

static void m_names(void)
{
    const char *n = t_uniq("mn");
    char shm[128], file[160];
    shmheap *h = NULL, *h2 = NULL;
    snprintf(shm, sizeof shm, "shm:%s", n);
    shmheap_opts o = {.size = 2 * MIB};
    int r = shmheap_create(shm, &o, &h);
    CHECKF(r == 0, "create shm:NAME: %s", shmheap_strerror(r));
    if (r) return;
    CHECK(t_shm_exists(n));
    r = shmheap_open(n, NULL, &h2); /* "NAME" and "shm:NAME" are the same object */
    CHECK_EQ(r, 0);
    if (!r) CHECK(h2 == h);
    if (!r) shmheap_close(h2);
    t_rm(h, shm);
    CHECK(!t_shm_exists(n));
    snprintf(file, sizeof file, "file:/tmp/%s", n);
    r = shmheap_create(file, &o, &h);
    CHECKF(r == 0, "create file:PATH: %s", shmheap_strerror(r));
    if (!r) {
        struct stat st;
        CHECK(stat(file + 5, &st) == 0 && (size_t)st.st_size == 2 * MIB);
        t_rm(h, file);
        CHECK(stat(file + 5, &st) != 0);
    }
    r = shmheap_create("cxl:region987", &o, &h);
    CHECK_EQ(r, SHMHEAP_E_NOTSUP);
    r = shmheap_open("cxl:region987", NULL, &h);
    CHECK_EQ(r, SHMHEAP_E_NOTSUP);
    r = shmheap_open("/dev/dax987.0", NULL, &h);
    CHECKF(r == SHMHEAP_E_NOTFOUND, "open of an absent dax: %s", shmheap_strerror(r));
    r = shmheap_open(t_uniq("absent"), NULL, &h);
    CHECK_EQ(r, SHMHEAP_E_NOTFOUND);
    r = shmheap_unlink(t_uniq("absent"), NULL);
    CHECKF(r == SHMHEAP_E_NOTFOUND, "unlink of an absent heap: %s", shmheap_strerror(r));
    r = shmheap_create("", &o, &h);
    CHECK_EQ(r, SHMHEAP_E_BADNAME);
    r = shmheap_create("shm:", &o, &h);
    CHECK_EQ(r, SHMHEAP_E_BADNAME);
    r = shmheap_create(NULL, &o, &h);
    CHECKF(r < 0, "create NULL name: %d", r);
    r = shmheap_create(n, &o, NULL);
    CHECKF(r < 0, "create NULL out: %d", r);
    r = shmheap_open(NULL, NULL, &h);
    CHECKF(r < 0, "open NULL name: %d", r);
    r = shmheap_unlink(NULL, NULL);
    CHECKF(r < 0, "unlink NULL: %d", r);
}

static void m_sizes(void)
{
    const char *n = t_uniq("ms");
    shmheap *h = NULL;
    shmheap_opts o = {.size = 1};
    int r = shmheap_create(n, &o, &h); /* rounded up to 2 MiB */
    CHECKF(r == 0, "size 1: %s", shmheap_strerror(r));
    if (!r) { CHECK_EQ(shmheap_size(h), 2 * MIB); t_rm(h, n); }
    o.size = 3 * MIB;
    r = shmheap_create(n, &o, &h);
    CHECKF(r == 0, "size 3 MiB: %s", shmheap_strerror(r));
    if (!r) {
        CHECK_EQ(shmheap_size(h), 4 * MIB);
        CHECK((uintptr_t)shmheap_base(h) % (2 * MIB) == 0);
        t_rm(h, n);
    }
    r = shmheap_create(n, NULL, &h); /* default 64 MiB */
    CHECKF(r == 0, "NULL opts: %s", shmheap_strerror(r));
    if (!r) { CHECK_EQ(shmheap_size(h), SHMHEAP_DEFAULT_SIZE); t_rm(h, n); }
    o.size = ((size_t)16 << 40) + 2 * MIB; /* over 16 TiB */
    r = shmheap_create(n, &o, &h);
    CHECKF(r < 0, "a heap over 16 TiB: %d", r);
    if (!r) t_rm(h, n);
    o.size = (size_t)-1;
    r = shmheap_create(n, &o, &h);
    CHECKF(r < 0, "SIZE_MAX: %d", r);
    if (!r) t_rm(h, n);
    CHECK(!t_shm_exists(n));
    shmheap_opts a = {.size = 2 * MIB, .addr = 0x6f0000000000ull + 4096};
    r = shmheap_create(n, &a, &h);
    CHECKF(r == SHMHEAP_E_INVAL, "unaligned addr: %s", shmheap_strerror(r));
    if (!r) t_rm(h, n);
    CHECK(!t_shm_exists(n));
}

static void m_mode(void)
{
    const char *n = t_uniq("mm");
    char p[160];
    shmheap *h = NULL;
    struct stat st;
    mode_t old = umask(0);
    shmheap_opts o = {.size = 2 * MIB};
    int r = shmheap_create(n, &o, &h);
    snprintf(p, sizeof p, "/dev/shm/%s", n);
    CHECK(r == 0 && stat(p, &st) == 0 && (st.st_mode & 0777) == SHMHEAP_DEFAULT_MODE);
    if (!r) t_rm(h, n);
    o.mode = 0640;
    r = shmheap_create(n, &o, &h);
    CHECK(r == 0 && stat(p, &st) == 0 && (st.st_mode & 0777) == 0640);
    if (!r) t_rm(h, n);
    umask(022); /* less the umask */
    o.mode = 0666;
    r = shmheap_create(n, &o, &h);
    CHECK(r == 0 && stat(p, &st) == 0 && (st.st_mode & 0777) == 0644);
    if (!r) t_rm(h, n);
    umask(old);
}

static void m_lifetime(void)
{
    const char *n = t_uniq("ml");
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    int r = shmheap_create(n, &o, &h);
    CHECK_EQ(r, 0);
    if (r) return;
    CHECK_EQ(shmheap_opens(h), 1);
    CHECK(strstr(shmheap_name(h), n) != NULL);
    r = shmheap_create(n, &o, &h2);
    CHECK_EQ(r, SHMHEAP_E_EXISTS);
    shmheap_opts ov = {.size = 2 * MIB, .overwrite = 1};
    r = shmheap_create(n, &ov, &h2);
    CHECK_EQ(r, SHMHEAP_E_BUSY);
    r = shmheap_open(n, NULL, &h2);
    CHECK(r == 0 && h2 == h);
    CHECK_EQ(shmheap_opens(h), 2);
    CHECK_EQ(shmheap_close(h2), 0);
    CHECK_EQ(shmheap_opens(h), 1);
    void *p = shmheap_malloc(h, 100);
    CHECK(p && shmheap_of(p) == h);
    CHECK(shmheap_of(&r) == NULL);
    CHECK(shmheap_of(NULL) == NULL);
    shmheap_root_set(h, "x", p);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK(shmheap_of(p) == NULL);
    r = shmheap_open(n, NULL, &h); /* the heap lives on */
    CHECK_EQ(r, 0);
    if (r) { shmheap_unlink(n, NULL); return; }
    CHECK(shmheap_root_get(h, "x") == p);
    CHECK_EQ(shmheap_close(h), 0);
    r = shmheap_create(n, &ov, &h); /* overwrite: a fresh heap */
    CHECK_EQ(r, 0);
    if (!r) { CHECK(shmheap_root_get(h, "x") == NULL); shmheap_close(h); }
    CHECK_EQ(shmheap_unlink(n, NULL), 0);
    CHECK(!t_shm_exists(n));
    r = shmheap_open(n, NULL, &h);
    CHECK_EQ(r, SHMHEAP_E_NOTFOUND);
}

/* A file that is no heap: BADMAGIC; a file too small: TOOSMALL. */
static void m_not_a_heap(void)
{
    char p[160], nm[170];
    shmheap *h;
    snprintf(p, sizeof p, "/tmp/%s", t_uniq("nh"));
    snprintf(nm, sizeof nm, "file:%s", p);
    int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(ftruncate(fd, 4 * MIB) == 0);
    CHECK(pwrite(fd, "garbage!garbage!", 16, 0) == 16);
    int r = shmheap_open(nm, NULL, &h);
    CHECKF(r == SHMHEAP_E_BADMAGIC, "open of a file of garbage: %s", shmheap_strerror(r));
    CHECK(ftruncate(fd, 100) == 0);
    r = shmheap_open(nm, NULL, &h);
    CHECKF(r == SHMHEAP_E_TOOSMALL || r == SHMHEAP_E_BADMAGIC, "a file of 100 bytes: %s",
           shmheap_strerror(r));
    close(fd);
    unlink(p);
}

static void m_alloc(void)
{
    const char *n = t_uniq("ma");
    shmheap *h = t_heap(n, 4 * MIB);
    if (!h) return;
    void *p = NULL;
    CHECK_EQ(shmheap_alloc(h, 1, 0, &p), 0);
    CHECK(p && (uintptr_t)p % 16 == 0);
    CHECK(shmheap_contains(h, p, 1));
    CHECK(shmheap_usable_size(h, p) >= 1);
    CHECK_EQ(shmheap_free(h, p), 0);
    for (size_t al = 16; al <= 2 * MIB; al <<= 1) {
        void *q = NULL;
        int r = shmheap_alloc(h, 24, al, &q);
        CHECKF(r == 0 && (uintptr_t)q % al == 0, "align %zu: %s", al, shmheap_strerror(r));
        if (!r) CHECK_EQ(shmheap_free(h, q), 0);
        q = shmheap_aligned_alloc(h, al, 100);
        CHECKF(q && (uintptr_t)q % al == 0, "aligned_alloc %zu", al);
        if (q) CHECK_EQ(shmheap_free(h, q), 0);
    }
    for (size_t al = 1; al < 16; al <<= 1) { /* smaller alignments: at least that */
        void *q = NULL;
        int r = shmheap_alloc(h, 24, al, &q);
        CHECKF(r == 0, "align %zu: %s", al, shmheap_strerror(r));
        if (!r) CHECK_EQ(shmheap_free(h, q), 0);
    }
    p = (void *)1;
    CHECK_EQ(shmheap_alloc(h, 24, 3, &p), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_alloc(h, 24, 48, &p), SHMHEAP_E_INVAL);
    errno = 0;
    CHECK(shmheap_aligned_alloc(h, 3, 10) == NULL);
    CHECK_EQ(shmheap_alloc(NULL, 24, 0, &p), SHMHEAP_E_INVAL);
    CHECKF(shmheap_alloc(h, 24, 0, NULL) < 0, "NULL out");
    /* full: SHMHEAP_E_FULL; pointer calls NULL with errno ENOMEM */
    CHECK_EQ(shmheap_alloc(h, 64 * MIB, 0, &p), SHMHEAP_E_FULL);
    CHECK(p == NULL);
    errno = 0;
    CHECK(shmheap_malloc(h, 64 * MIB) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(shmheap_calloc(h, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(shmheap_malloc(h, SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK_EQ(shmheap_alloc(h, SIZE_MAX - 10, 0, &p), SHMHEAP_E_FULL);
    /* sizes over 32 KiB are multiples of 64 KiB */
    void *big = shmheap_malloc(h, 32769);
    CHECK(big && shmheap_usable_size(h, big) == 65536);
    void *sm = shmheap_malloc(h, 32768);
    CHECK(sm && shmheap_usable_size(h, sm) == 32768);
    shmheap_free(h, big);
    shmheap_free(h, sm);
    /* calloc zeroes */
    unsigned char *c = shmheap_malloc(h, 512);
    if (c) { memset(c, 0xab, 512); shmheap_free(h, c); }
    c = shmheap_calloc(h, 16, 32);
    int z = c != NULL;
    for (int i = 0; c && i < 512; i++) z &= c[i] == 0;
    CHECK(z);
    if (c) shmheap_free(h, c);
    /* realloc keeps the contents */
    char *s = shmheap_malloc(h, 10);
    if (s) memcpy(s, "abcdefghi", 10);
    s = shmheap_realloc(h, s, 100000);
    CHECK(s && !memcmp(s, "abcdefghi", 10));
    s = shmheap_realloc(h, s, 5);
    CHECK(s && !memcmp(s, "abcde", 5));
    if (s) shmheap_free(h, s);
    s = shmheap_realloc(h, NULL, 30);
    CHECK(s != NULL);
    if (s) shmheap_free(h, s);
    t_rm_empty(h, n);
}

static void m_free_checks(void)
{
    const char *n = t_uniq("mf");
    shmheap *h = t_heap(n, 2 * MIB);
    if (!h) return;
    int local;
    CHECK_EQ(shmheap_free(h, NULL), 0);
    CHECK_EQ(shmheap_free(h, &local), SHMHEAP_E_FOREIGN);
    char *p = shmheap_malloc(h, 64);
    CHECK_EQ(shmheap_free(h, p + 16), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_free(h, p + 1), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_usable_size(h, p + 16), 0);
    CHECK_EQ(shmheap_usable_size(h, &local), 0);
    CHECK_EQ(shmheap_usable_size(h, NULL), 0);
    CHECK_EQ(shmheap_free(h, p), 0);
    CHECK_EQ(shmheap_free(h, p), SHMHEAP_E_DOUBLEFREE);
    CHECK_EQ(shmheap_usable_size(h, p), 0);
    char *b = shmheap_malloc(h, 100000);
    CHECK_EQ(shmheap_free(h, b + 65536), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_free(h, b), 0);
    CHECK_EQ(shmheap_free(h, b), SHMHEAP_E_DOUBLEFREE);
    CHECK_EQ(shmheap_usable_size(h, b), 0);
    /* the header is inside the heap but no block */
    CHECK_EQ(shmheap_free(h, shmheap_base(h)), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_usable_size(h, shmheap_base(h)), 0);
    CHECK_EQ(shmheap_free(NULL, p), SHMHEAP_E_INVAL);
    t_rm_empty(h, n);
}

static void m_cache_bound(void)
{
    const char *n = t_uniq("mc");
    shmheap *h = t_heap(n, 4 * MIB);
    if (!h) return;
    void *b[20];
    shmheap_stats st;
    for (int i = 0; i < 20; i++) b[i] = shmheap_malloc(h, 64);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 20);
    CHECK_EQ(st.used_bytes, 20 * 64);
    for (int i = 0; i < 20; i++) shmheap_free(h, b[i]);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(st.used_bytes, 0);
    CHECKF(st.cached_blocks <= 8, "%zu blocks cached in one class", st.cached_blocks);
    void *k = shmheap_malloc(h, 8192); /* over 4 KiB: never cached */
    shmheap_free(h, k);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECKF(st.cached_blocks <= 8, "%zu cached", st.cached_blocks);
    CHECK_EQ(shmheap_flush(h), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 0);
    CHECK_EQ(st.size, shmheap_size(h));
    CHECK(st.data_bytes > 0 && st.data_bytes < st.size);
    CHECK_EQ(st.problem[0], 0);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    CHECK_EQ(shmheap_flush(NULL), SHMHEAP_E_INVAL);
    t_rm_empty(h, n);
}

static void *m_thr(void *a)
{
    shmheap *h = a;
    for (int i = 0; i < 8; i++) shmheap_free(h, shmheap_malloc(h, 128));
    return NULL;
}

/* "it goes back to everyone when the thread exits" */
static void m_cache_thread_exit(void)
{
    const char *n = t_uniq("mt");
    shmheap *h = t_heap(n, 4 * MIB);
    if (!h) return;
    pthread_t t;
    shmheap_stats st;
    pthread_create(&t, NULL, m_thr, h);
    pthread_join(t, NULL);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECKF(st.cached_blocks == 0, "%zu blocks still cached after the thread exited",
           st.cached_blocks);
    t_rm_empty(h, n);
}

static void m_roots(void)
{
    const char *n = t_uniq("mr");
    shmheap *h = t_heap(n, 2 * MIB);
    if (!h) return;
    void *p = shmheap_malloc(h, 16);
    char nm[64];
    memset(nm, 'r', 47);
    nm[47] = 0;
    CHECK_EQ(shmheap_root_set(h, nm, p), 0);
    CHECK(shmheap_root_get(h, nm) == p);
    nm[47] = 'r';
    nm[48] = 0;
    CHECK_EQ(shmheap_root_set(h, nm, p), SHMHEAP_E_BADNAME);
    CHECK(shmheap_root_get(h, nm) == NULL);
    CHECK_EQ(shmheap_root_set(h, "", p), SHMHEAP_E_BADNAME);
    CHECKF(shmheap_root_set(h, NULL, p) < 0, "NULL root name");
    CHECK(shmheap_root_get(h, NULL) == NULL);
    CHECK(shmheap_root_get(NULL, "a") == NULL);
    CHECK(shmheap_root_get(h, "absent") == NULL);
    int local;
    int r = shmheap_root_set(h, "foreign", &local);
    CHECKF(r == SHMHEAP_E_FOREIGN, "root to a pointer outside the heap: %s",
           shmheap_strerror(r));
    nm[47] = 0;
    CHECK_EQ(shmheap_root_set(h, nm, NULL), 0); /* removes */
    CHECK(shmheap_root_get(h, nm) == NULL);
    r = shmheap_root_set(h, "never-set", NULL);
    CHECKF(r == 0 || r == SHMHEAP_E_NOTFOUND, "removing an absent root: %s", shmheap_strerror(r));
    int i;
    for (i = 0; i < 64; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        if ((r = shmheap_root_set(h, k, p)) != 0) break;
    }
    CHECKF(i == 64, "only %d roots: %s", i, shmheap_strerror(r));
    r = shmheap_root_set(h, "k64", p);
    CHECKF(r == SHMHEAP_E_FULL, "65th root: %s", shmheap_strerror(r));
    CHECK_EQ(shmheap_root_set(h, "k3", p), 0); /* replacing one is fine when full */
    CHECK_EQ(shmheap_root_set(h, "k3", NULL), 0);
    CHECK_EQ(shmheap_root_set(h, "k64", p), 0);
    shmheap_free(h, p);
    t_rm(h, n);
}

static void m_contains(void)
{
    const char *n = t_uniq("mx");
    shmheap *h = t_heap(n, 2 * MIB);
    if (!h) return;
    char *p = shmheap_malloc(h, 64);
    char *base = shmheap_base(h);
    CHECK_EQ(shmheap_contains(h, p, 64), 1);
    CHECK_EQ(shmheap_contains(h, base, 1), 0); /* the header is not the data area */
    CHECK_EQ(shmheap_contains(h, base + shmheap_size(h) - 1, 1), 1);
    CHECK_EQ(shmheap_contains(h, base + shmheap_size(h) - 1, 2), 0);
    CHECK_EQ(shmheap_contains(h, p, SIZE_MAX), 0);
    CHECK_EQ(shmheap_contains(NULL, p, 1), 0);
    CHECK_EQ(shmheap_contains(h, NULL, 1), 0);
    shmheap_free(h, p);
    t_rm_empty(h, n);
}

static void m_seal(void)
{
    const char *n = t_uniq("mz");
    shmheap *h = t_heap(n, 2 * MIB);
    if (!h) return;
    char *p = shmheap_malloc(h, 8192);
    CHECK_EQ(shmheap_seal(h, p, 8192), 0);
    CHECK(!t_writable(p));
    CHECK_EQ(shmheap_unseal(h, p, 8192), 0);
    CHECK(t_writable(p));
    shmheap_range rg = {p, 100};
    CHECK_EQ(shmheap_seal(h, p, 100), 0);
    CHECK_EQ(shmheap_unseal_batch(h, &rg, 1), 0);
    CHECK(t_writable(p));
    CHECK_EQ(shmheap_unseal_batch(h, NULL, 0), 0);
    int local;
    int r = shmheap_seal(h, &local, 4);
    CHECKF(r == SHMHEAP_E_FOREIGN, "seal outside the heap: %s", shmheap_strerror(r));
    r = shmheap_unseal(h, &local, 4);
    CHECKF(r == SHMHEAP_E_FOREIGN, "unseal outside the heap: %s", shmheap_strerror(r));
    CHECK_EQ(shmheap_seal(NULL, p, 4), SHMHEAP_E_INVAL);
    shmheap_free(h, p);
    t_rm_empty(h, n);
}

static void m_pkeys(void)
{
    int sup = shmheap_pkey_supported();
    CHECK(sup == 0 || sup == 1);
    CHECK_EQ(shmheap_pkey_supported(), sup);
    if (sup) { t_skip("m_pkeys_without_pku", "this CPU has pku"); return; }
    CHECK_EQ(shmheap_pkey_alloc(0), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_pkey_free(1), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_pkey_set(1, 0), SHMHEAP_E_NOTSUP);
    const char *n = t_uniq("mk");
    shmheap *h = t_heap(n, 2 * MIB);
    if (h) CHECK_EQ(shmheap_pkey_protect(h, shmheap_base(h), 4096, 1), SHMHEAP_E_NOTSUP);
    t_rm(h, n);
}

static void m_strerror(void)
{
    CHECK(!strcmp(shmheap_strerror(0), "success"));
    CHECK(!strcmp(shmheap_strerror(-EPERM), strerror(EPERM)));
    CHECK(!strcmp(shmheap_strerror(-ENOENT), strerror(ENOENT)));
    CHECK(!strcmp(shmheap_strerror(-4095), "unknown error code")); /* no errno the system knows */
    CHECK(!strcmp(shmheap_strerror(-999999), "unknown error code"));
    CHECK(!strcmp(shmheap_strerror(1), "unknown error code"));
    CHECK(!strcmp(shmheap_strerror(-982), "unknown error code")); /* the first unused */
    CHECK(!strcmp(shmheap_strerror(SHMHEAP_E_FULL), "heap full"));
    /* a code of a header not declared names it; an unused one of a declared header is unknown */
    const char *a = shmheap_strerror(-2000), *b = shmheap_strerror(-2999);
    CHECKF(strstr(a, "rpcool") != NULL, "-2000: %s", a);
    CHECKF(strstr(b, "alock") != NULL, "-2999: %s", b);
    CHECK(!strcmp(shmheap_strerror(-901), "unknown error code"));
}

/* $SHMHEAP_WINDOW and $SHMHEAP_POD_ID for a new pod; a full window: SHMHEAP_E_PODFULL */
static int m_env_child(void *a)
{
    (void)a;
    char pod[64];
    snprintf(pod, sizeof pod, "t-pod-menv-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod, 1);
    setenv("SHMHEAP_WINDOW", "6a0000000000-6a0001000000", 1); /* 16 MiB */
    setenv("SHMHEAP_POD_ID", "3", 1);
    int bad = 0;
    const char *n1 = t_uniq("me1"), *n2 = t_uniq("me2");
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o = {.size = 1 * MIB};
    /* its sixteenth, [+3 MiB, +4 MiB), holds no heap of 2 MiB: never one outside it */
    int r = shmheap_create(n1, &o, &h);
    if (r != SHMHEAP_E_PODFULL) { printf("# create: %s\n", shmheap_strerror(r)); bad |= 1; }
    if (!r) t_rm(h, n1);
    setenv("SHMHEAP_WINDOW", "6a0000000000-6a0020000000", 1); /* 512 MiB: 32 MiB each */
    snprintf(pod, sizeof pod, "t-pod-menv2-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod, 1);
    uintptr_t lo = 0x6a0000000000ull + 3 * 32 * MIB, hi = lo + 32 * MIB;
    r = shmheap_create(n2, &o, &h2);
    if (r == 0) {
        uintptr_t b = (uintptr_t)shmheap_base(h2);
        if (b < lo || b + shmheap_size(h2) > hi) {
            printf("# base %lx\n", (unsigned long)b);
            bad |= 2;
        }
        t_rm(h2, n2);
    } else { printf("# create: %s\n", shmheap_strerror(r)); bad |= 4; }
    char p2[96];
    snprintf(p2, sizeof p2, "/dev/shm/%s", pod);
    unlink(p2);
    snprintf(pod, sizeof pod, "t-pod-menv-%d", (int)getpid());
    char p[96];
    snprintf(p, sizeof p, "/dev/shm/%s", pod);
    unlink(p);
    return bad;
}

static void m_env_window(void)
{
    int r = t_in_child(m_env_child, NULL);
    CHECKF(r == 0, "child: %d", r);
}

static int m_env_child2(void *a)
{
    (void)a;
    char pod[64];
    snprintf(pod, sizeof pod, "t-pod-menw-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod, 1);
    setenv("SHMHEAP_WINDOW", "6a0000000000-6a0000600000", 1); /* 6 MiB */
    unsetenv("SHMHEAP_POD_ID");
    int bad = 0;
    const char *n1 = t_uniq("mw1"), *n2 = t_uniq("mw2"), *n3 = t_uniq("mw3");
    shmheap *h1 = NULL, *h2 = NULL, *h3 = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    int r1 = shmheap_create(n1, &o, &h1), r2 = shmheap_create(n2, &o, &h2);
    int r3 = shmheap_create(n3, &o, &h3);
    if (r1 || r2 || r3) { printf("# %d %d %d\n", r1, r2, r3); bad |= 1; }
    const char *n4 = t_uniq("mw4");
    shmheap *h4 = NULL;
    int r4 = shmheap_create(n4, &o, &h4);
    if (r4 != SHMHEAP_E_PODFULL) { printf("# 4th: %s\n", shmheap_strerror(r4)); bad |= 2; }
    if (!r4) t_rm(h4, n4);
    if (t_shm_exists(n4)) bad |= 4; /* a failed create leaves nothing */
    uintptr_t lo = 0x6a0000000000ull, hi = lo + 6 * MIB;
    shmheap *hs[3] = {h1, h2, h3};
    for (int i = 0; i < 3; i++)
        if (hs[i] && ((uintptr_t)shmheap_base(hs[i]) < lo ||
                      (uintptr_t)shmheap_base(hs[i]) + shmheap_size(hs[i]) > hi)) bad |= 8;
    /* unlink frees the address range */
    if (!r2) t_rm(h2, n2);
    r4 = shmheap_create(n4, &o, &h4);
    if (r4) { printf("# after unlink: %s\n", shmheap_strerror(r4)); bad |= 16; }
    else t_rm(h4, n4);
    if (!r1) t_rm(h1, n1);
    if (!r3) t_rm(h3, n3);
    char p[96];
    snprintf(p, sizeof p, "/dev/shm/%s", pod);
    unlink(p);
    return bad;
}

static void m_env_podfull(void)
{
    int r = t_in_child(m_env_child2, NULL);
    CHECKF(r == 0, "child: %d", r);
}

static int m_logs;
static void m_log(int level, const char *msg, void *user)
{
    (void)level; (void)msg;
    if (user == &m_logs) m_logs++;
}

/* opts.log gets the library's messages with log_user: a create says so at SHMHEAP_LOG_INFO */
static void m_log_cb(void)
{
    const char *n = t_uniq("mg");
    shmheap *h = NULL;
    shmheap_opts o = {.size = 2 * MIB, .log = m_log, .log_user = &m_logs};
    m_logs = 0;
    int r = shmheap_create(n, &o, &h);
    CHECK_EQ(r, 0);
    if (r) return;
    CHECKF(m_logs >= 1, "%d messages with log_user", m_logs);
    t_rm(h, n);
}

/* "the cache goes back to everyone ... when the heap is full for that thread": its own blocks
   of another class are given out once its allocations find no room; shmheap_flush empties the
   calling thread's cache only; a live thread's cache is never taken */
static shmheap *m_fh;
static int m_fpipe[2];
static void *m_full_thr(void *a)
{
    (void)a;
    void *b[8];
    char c;
    for (int i = 0; i < 8; i++) b[i] = shmheap_malloc(m_fh, 48);
    for (int i = 0; i < 8; i++) shmheap_free(m_fh, b[i]);
    if (write(m_fpipe[1], "r", 1) != 1) return NULL;
    if (read(m_fpipe[0], &c, 1) != 1) return NULL; /* lives until told */
    return NULL;
}

static void m_cache_full(void)
{
    const char *n = t_uniq("mu");
    shmheap *h = t_heap(n, 2 * MIB);
    if (!h) return;
    m_fh = h;
    int p1[2], p2[2];
    CHECK(pipe(p1) == 0 && pipe(p2) == 0);
    m_fpipe[0] = p2[0];
    m_fpipe[1] = p1[1];
    pthread_t t;
    char c;
    pthread_create(&t, NULL, m_full_thr, NULL);
    CHECK(read(p1[0], &c, 1) == 1);
    void *b[8];
    for (int i = 0; i < 8; i++) b[i] = shmheap_malloc(h, 64);
    for (int i = 0; i < 8; i++) shmheap_free(h, b[i]);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 16);
    size_t cnt = 0, cap = 4096;
    void **v = malloc(cap * sizeof *v);
    for (;;) {
        void *q = shmheap_malloc(h, 128);
        if (!q) break;
        if (cnt == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[cnt++] = q;
    }
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECKF(st.cached_blocks == 8, "%zu blocks cached in a full heap, 8 of a live thread expected",
           st.cached_blocks);
    for (size_t i = 0; i < cnt; i++) shmheap_free(h, v[i]);
    CHECK_EQ(shmheap_flush(h), 0); /* the calling thread's cache */
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 8);
    CHECK(write(p2[1], "g", 1) == 1);
    pthread_join(t, NULL); /* its exit gives its cache back */
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 0);
    free(v);
    close(p1[0]); close(p1[1]); close(p2[0]); close(p2[1]);
    t_rm_empty(h, n);
}

/* a process that closes the heap, or dies, gives its cache back (at the next check) */
static const char *m_dn;
static int m_die_child(void *a)
{
    shmheap *h;
    if (shmheap_open(m_dn, NULL, &h)) return 3;
    void *b[8];
    for (int i = 0; i < 8; i++) b[i] = shmheap_malloc(h, 96);
    for (int i = 0; i < 8; i++) shmheap_free(h, b[i]);
    if (a) { shmheap_close(h); return 0; }
    kill(getpid(), SIGKILL);
    return 4;
}

static int m_l1, m_l2, m_lbad; /* m_lbad: a message of more than one line, or a bad level */
static void m_log1(int lv, const char *m, void *u)
{
    (void)u;
    m_l1++;
    m_lbad += lv < SHMHEAP_LOG_ERROR || lv > SHMHEAP_LOG_DEBUG || strchr(m, '\n') != NULL;
}
static void m_log2(int lv, const char *m, void *u) { (void)lv; (void)m; (void)u; m_l2++; }

/* ... and "A heap open twice in a process keeps the first opener's [log]" */
static void m_cache_dead(void)
{
    m_dn = t_uniq("md");
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o1 = {.size = 2 * MIB, .log = m_log1}, o2 = {.log = m_log2};
    if (shmheap_create(m_dn, &o1, &h)) { CHECK(0); return; }
    CHECK_EQ(shmheap_open(m_dn, &o2, &h2), 0);
    m_l1 = m_l2 = 0;
    shmheap_stats st;
    CHECK_EQ(t_in_child(m_die_child, (void *)1), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECKF(st.cached_blocks == 0, "%zu cached after the process closed", st.cached_blocks);
    CHECK_EQ(t_in_child(m_die_child, NULL), 128 + SIGKILL);
    shmheap_check(h, &st);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECKF(st.cached_blocks == 0, "%zu cached after the process died", st.cached_blocks);
    CHECK_EQ(st.live_blocks, 0);
    CHECKF(m_l1 > 0 && m_l2 == 0, "first opener's log %d, second's %d", m_l1, m_l2);
    CHECK_EQ(m_lbad, 0);
    if (h2) shmheap_close(h2);
    t_rm_empty(h, m_dn);
}

/* "fails with SHMHEAP_E_ADDRINUSE rather than replace a mapping" */
static int m_addr_child(void *a)
{
    shmheap *h;
    void *base = a;
    void *m = mmap(base, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    if (m != base) return 3;
    *(volatile char *)m = 7;
    int r = shmheap_open(m_dn, NULL, &h);
    if (r != SHMHEAP_E_ADDRINUSE) { printf("# open: %s\n", shmheap_strerror(r)); return 1; }
    return *(volatile char *)m == 7 ? 0 : 2;
}

static void m_addrinuse(void)
{
    m_dn = t_uniq("mi");
    shmheap *h = t_heap(m_dn, 2 * MIB);
    if (!h) return;
    void *base = shmheap_base(h);
    shmheap_close(h);
    CHECK_EQ(t_in_child(m_addr_child, base), 0);
    shmheap_unlink(m_dn, NULL);
}

/* a descriptor's heap: the fd stays the caller's */
static void m_fd(void)
{
    int fd = memfd_create("m_fd", MFD_CLOEXEC);
    CHECK(fd >= 0);
    if (fd < 0) return;
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    CHECK_EQ(shmheap_open_fd(fd, NULL, &h), SHMHEAP_E_TOOSMALL); /* empty */
    int r = shmheap_create_fd(fd, &o, &h);
    CHECKF(r == 0, "create_fd: %s", shmheap_strerror(r));
    if (r) { close(fd); return; }
    CHECK_EQ(shmheap_size(h), 2 * MIB);
    int hold = shmheap_pod_hold(h, NULL);
    CHECK(hold >= 0);
    if (hold >= 0) close(hold);
    r = shmheap_open_fd(fd, NULL, &h2);
    CHECK(r == 0 && h2 == h);
    CHECK_EQ(shmheap_opens(h), 2);
    if (!r) shmheap_close(h2);
    void *p = shmheap_malloc(h, 100);
    CHECK(p != NULL);
    shmheap_free(h, p);
    shmheap_close(h);
    CHECK(fcntl(fd, F_GETFD) >= 0); /* still the caller's */
    close(fd);
    CHECK(shmheap_create_fd(-1, &o, &h) < 0);
    CHECK(shmheap_open_fd(-1, NULL, &h) < 0);
    int fd2 = memfd_create("m_fd2", MFD_CLOEXEC);
    if (fd2 >= 0) {
        CHECK(ftruncate(fd2, 4 * MIB) == 0);
        CHECK_EQ(shmheap_open_fd(fd2, NULL, &h), SHMHEAP_E_BADMAGIC);
        close(fd2);
    }
}

/* "a path containing '/'" is a file */
static void m_path(void)
{
    char p[160];
    snprintf(p, sizeof p, "/tmp/%s", t_uniq("mp"));
    shmheap *h = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    int r = shmheap_create(p, &o, &h);
    CHECKF(r == 0, "create %s: %s", p, shmheap_strerror(r));
    struct stat st;
    CHECK(stat(p, &st) == 0);
    if (!r) t_rm(h, p);
    CHECK(stat(p, &st) != 0);
}

/* SHMHEAP_DEBUG sends messages to stderr; a malformed SHMHEAP_WINDOW is one */
static int m_debug_child(void *a)
{
    (void)a;
    char pod[64], path[128];
    snprintf(pod, sizeof pod, "t-pod-mdbg-%d", (int)getpid());
    snprintf(path, sizeof path, "/tmp/t-mdbg-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod, 1);
    setenv("SHMHEAP_WINDOW", "zzz", 1);
    setenv("SHMHEAP_DEBUG", "1", 1);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    dup2(fd, 2);
    const char *n = t_uniq("mdbg");
    shmheap *h = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    int r = shmheap_create(n, &o, &h);
    if (!r) t_rm(h, n);
    char buf[512] = {0};
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    unlink(path);
    snprintf(path, sizeof path, "/dev/shm/%s", pod);
    unlink(path);
    return r ? 2 : k > 0 && strstr(buf, "SHMHEAP_WINDOW") ? 0 : 1;
}

static void m_debug_env(void)
{
    CHECK_EQ(t_in_child(m_debug_child, NULL), 0);
}

/* 1024 heaps per pod; the 1025th: SHMHEAP_E_PODFULL */
static int m_1024_child(void *a)
{
    (void)a;
    char pod[64];
    snprintf(pod, sizeof pod, "t-pod-m1024-%d", (int)getpid());
    setenv("SHMHEAP_POD", pod, 1);
    unsetenv("SHMHEAP_POD_ID");
    unsetenv("SHMHEAP_WINDOW");
    static char names[1025][48];
    int made = 0, bad = 0, r = 0;
    shmheap_opts o = {.size = 2 * MIB};
    for (int i = 0; i < 1025; i++) {
        shmheap *h;
        snprintf(names[i], sizeof names[i], "t-m1024-%d-%d", (int)getpid(), i);
        r = shmheap_create(names[i], &o, &h);
        if (r) break;
        shmheap_close(h);
        made++;
    }
    if (made != 1024 || r != SHMHEAP_E_PODFULL) {
        printf("# made %d, then %s\n", made, shmheap_strerror(r));
        bad = 1;
    }
    for (int i = 0; i < made; i++) shmheap_unlink(names[i], NULL);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", pod);
    unlink(path);
    return bad;
}

static void m_pod_1024(void)
{
    CHECK_EQ(t_in_child(m_1024_child, NULL), 0);
}

/* a NULL handle: SHMHEAP_E_INVAL from every function that returns a code, never a crash */
static void m_null_handles(void)
{
    int x = 0;
    shmheap_range rg = {&x, 1};
    CHECK_EQ(shmheap_close(NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_check(NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_root_set(NULL, "a", NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_seal(NULL, &x, 1), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_unseal(NULL, &x, 1), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_unseal_batch(NULL, &rg, 1), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_pod_hold(NULL, NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_flush(NULL), SHMHEAP_E_INVAL);
    CHECK_EQ(shmheap_free(NULL, &x), SHMHEAP_E_INVAL);
    CHECK(shmheap_malloc(NULL, 8) == NULL);
    CHECK(shmheap_calloc(NULL, 1, 8) == NULL);
    CHECK(shmheap_realloc(NULL, NULL, 8) == NULL);
    CHECK(shmheap_aligned_alloc(NULL, 16, 8) == NULL);
    CHECK(shmheap_base(NULL) == NULL && shmheap_size(NULL) == 0 && shmheap_name(NULL) == NULL);
    CHECK_EQ(shmheap_opens(NULL), 0);
    CHECK_EQ(shmheap_usable_size(NULL, &x), 0);
}

/* what the stats count: live blocks by slot size, spans by kind */
static void m_stats(void)
{
    const char *n = t_uniq("mv");
    shmheap *h = t_heap(n, 4 * MIB);
    if (!h) return;
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    size_t spans = st.free_spans + st.small_spans + st.large_spans;
    CHECKF(spans * 65536 == st.data_bytes, "%zu spans, %zu data bytes", spans, st.data_bytes);
    CHECK_EQ(st.recoveries, 0);
    CHECK_EQ(st.live_blocks, 0);
    void *big = shmheap_malloc(h, 100000), *sm = shmheap_malloc(h, 100);
    size_t us = shmheap_usable_size(h, sm);
    CHECK(us >= 100);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 2);
    CHECK_EQ(st.used_bytes, 131072 + us);
    CHECK_EQ(st.large_spans, 2);
    CHECK_EQ(st.small_spans, 1);
    CHECK_EQ(st.free_spans + 3, spans);
    shmheap_free(h, big);
    shmheap_free(h, sm);
    t_rm_empty(h, n);
}

/* a file that exists: EXISTS without overwrite, formatted with it (size 0: the file's size) */
static void m_overwrite_file(void)
{
    char p[160], nm[170];
    snprintf(p, sizeof p, "/tmp/%s", t_uniq("mo"));
    snprintf(nm, sizeof nm, "file:%s", p);
    int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 4 * MIB) == 0);
    if (fd >= 0) close(fd);
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(nm, NULL, &h), SHMHEAP_E_EXISTS);
    shmheap_opts o = {.overwrite = 1};
    int r = shmheap_create(nm, &o, &h);
    CHECKF(r == 0, "overwrite: %s", shmheap_strerror(r));
    if (!r) {
        CHECK_EQ(shmheap_size(h), 4 * MIB);
        shmheap_close(h);
    }
    CHECK_EQ(shmheap_unlink(nm, NULL), 0);
    unlink(p);
}

/* "Heap names up to 100 bytes" after the prefix; a relative path counts made absolute */
static void m_name_prefix(void)
{
    char n[200], dir[160];
    shmheap *h = NULL;
    shmheap_opts o = {.size = 2 * MIB};
    int k = snprintf(n, sizeof n, "shm:t-%d-", (int)getpid());
    memset(n + k, 'p', 104 - (size_t)k);
    n[104] = 0; /* "shm:" and 100 */
    int r = shmheap_create(n, &o, &h);
    CHECKF(r == 0, "shm: and 100 bytes: %s", shmheap_strerror(r));
    if (!r) t_rm(h, n);
    n[104] = 'p';
    n[105] = 0;
    CHECK_EQ(shmheap_create(n, &o, &h), SHMHEAP_E_BADNAME);
    k = snprintf(n, sizeof n, "file:/tmp/t-%d-", (int)getpid());
    memset(n + k, 'f', 105 - (size_t)k);
    n[105] = 0; /* "file:" and a path of 100 */
    r = shmheap_create(n, &o, &h);
    CHECKF(r == 0, "file: and 100 bytes: %s", shmheap_strerror(r));
    if (!r) t_rm(h, n);
    n[105] = 'f';
    n[106] = 0;
    CHECK_EQ(shmheap_create(n, &o, &h), SHMHEAP_E_BADNAME);
    /* a short relative path in a deep directory: its absolute path is over 100 bytes */
    k = snprintf(dir, sizeof dir, "/tmp/t-%d-", (int)getpid());
    memset(dir + k, 'd', 110 - (size_t)k);
    dir[110] = 0;
    char cwd[512];
    if (mkdir(dir, 0700) || !getcwd(cwd, sizeof cwd) || chdir(dir)) { CHECK(0); return; }
    r = shmheap_create("./x", &o, &h);
    CHECK_EQ(r, SHMHEAP_E_BADNAME);
    if (!r) t_rm(h, "./x");
    CHECK(chdir(cwd) == 0);
    rmdir(dir);
}

/* more ranges than a handle keeps as mappings of their own: each is sealed all the same;
   a batch unseal gives every one back */
static void m_seal_many(void)
{
    const char *n = t_uniq("ms");
    shmheap *h = t_heap(n, 4 * MIB);
    if (!h) return;
    enum { N = 80 };
    char *p = shmheap_malloc(h, (size_t)N * 2 * 4096);
    shmheap_range rg[N];
    int sealed = 0, wr = 0;
    for (int i = 0; p && i < N; i++) {
        char *q = (char *)(((uintptr_t)p + 4095) & ~(uintptr_t)4095) + (size_t)i * 8192;
        if (q + 4096 > p + (size_t)N * 2 * 4096) break;
        rg[i].p = q;
        rg[i].len = 4096;
        CHECK_EQ(shmheap_seal(h, q, 4096), 0);
        sealed++;
    }
    for (int i = 0; i < sealed; i++) wr += t_writable(rg[i].p);
    CHECKF(wr == 0, "%d of %d sealed pages writable", wr, sealed);
    CHECK_EQ(shmheap_unseal_batch(h, rg, (size_t)sealed), 0);
    wr = 0;
    for (int i = 0; i < sealed; i++) wr += t_writable(rg[i].p);
    CHECKF(wr == sealed, "%d of %d unsealed pages writable", wr, sealed);
    shmheap_free(h, p);
    t_rm_empty(h, n);
}

/* opts.pod names the pod directory in /dev/shm */
static void m_pod_opt(void)
{
    char pod[64];
    snprintf(pod, sizeof pod, "t-pod-mopt-%d", (int)getpid());
    const char *n = t_uniq("mq");
    shmheap *h = NULL;
    shmheap_opts o = {.size = 2 * MIB, .pod = pod};
    int r = shmheap_create(n, &o, &h);
    CHECKF(r == 0, "create in pod %s: %s", pod, shmheap_strerror(r));
    CHECK(t_shm_exists(pod));
    if (!r) shmheap_close(h);
    CHECK_EQ(shmheap_unlink(n, &o), 0);
    CHECK(!t_shm_exists(n));
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", pod);
    unlink(path);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(m_names);
    RUN(m_sizes);
    RUN(m_mode);
    RUN(m_lifetime);
    RUN(m_not_a_heap);
    RUN(m_alloc);
    RUN(m_free_checks);
    RUN(m_cache_bound);
    RUN(m_cache_thread_exit);
    RUN(m_roots);
    RUN(m_contains);
    RUN(m_seal);
    RUN(m_pkeys);
    RUN(m_strerror);
    RUN(m_env_window);
    RUN(m_env_podfull);
    RUN(m_log_cb);
    RUN(m_cache_full);
    RUN(m_cache_dead);
    RUN(m_addrinuse);
    RUN(m_fd);
    RUN(m_path);
    RUN(m_debug_env);
    RUN(m_pod_1024);
    RUN(m_null_handles);
    RUN(m_stats);
    RUN(m_overwrite_file);
    RUN(m_name_prefix);
    RUN(m_seal_many);
    RUN(m_pod_opt);
    return T_DONE();
}
