// VALGRIND
/* shmheap.h: lifetime, allocator, bad input, roots, check, recovery from a dead lock holder,
   sealing, protection keys. Single heap tests plus forked second processes. */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <signal.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <pthread.h>

static void rm(shmheap *h, const char *name)
{
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap_unlink(name, NULL), 0);
}

static void lifetime_and_same_address(void)
{
    const char *n = t_uniq("life");
    shmheap *h = t_heap(n, 8 << 20), *h2;
    uintptr_t b = (uintptr_t)shmheap_base(h);
    CHECK(b >= 0x550000000000ull && b < 0x700000000000ull);
    CHECK(b % (2 << 20) == 0);
    CHECK_EQ(shmheap_size(h), 8 << 20);
    CHECK_EQ(shmheap_open(n, NULL, &h2), 0); /* same process: the same mapping, counted */
    CHECK(h2 == h);
    CHECK_EQ(shmheap_close(h2), 0);
    struct node { int v; struct node *next; } *head = NULL;
    for (int i = 0; i < 1000; i++) {
        struct node *x = (struct node *)shmheap_malloc(h, sizeof *x);
        CHECK(x != NULL);
        if (!x) break;
        x->v = i; x->next = head; head = x;
    }
    CHECK_EQ(shmheap_root_set(h, "list", head), 0);
    pid_t pid = fork();
    if (pid == 0) { /* a second process maps the heap itself, at the same address */
        shmheap *c;
        shmheap_close(h);
        if (shmheap_open(n, NULL, &c) || shmheap_base(c) != (void *)b) _exit(2);
        long sum = 0, cnt = 0;
        for (struct node *x = (struct node *)shmheap_root_get(c, "list"); x; x = x->next) { sum += x->v; cnt++; }
        _exit(cnt == 1000 && sum == 999 * 1000 / 2 ? 0 : 3);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(shmheap_of(head) == h);
    CHECK(shmheap_of(&st) == NULL);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    rm(h, n);
    CHECK_EQ(shmheap_open(n, NULL, &h2), SHMHEAP_E_NOTFOUND);
}

static void sizes_and_alignment(void)
{
    const char *n = t_uniq("sizes");
    shmheap *h = t_heap(n, 32 << 20);
    static void *ps[2000];
    int k = 0;
    for (size_t sz = 0; sz <= 200000; sz = sz < 64 ? sz + 1 : sz * 5 / 4) {
        char *p = (char *)shmheap_malloc(h, sz);
        CHECKF(p != NULL, "malloc %zu", sz);
        if (!p) continue;
        CHECKF(((uintptr_t)p & 15) == 0, "alignment of %zu", sz);
        CHECKF(shmheap_usable_size(h, p) >= sz, "usable %zu < %zu", shmheap_usable_size(h, p), sz);
        memset(p, 0xab, sz);
        ps[k++] = p;
    }
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, k);
    for (int i = 0; i < k; i++) CHECK_EQ(shmheap_free(h, ps[i]), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    for (size_t a = 16; a <= (4u << 20); a *= 2) {
        void *p = shmheap_aligned_alloc(h, a, 100);
        CHECKF(p && ((uintptr_t)p % a) == 0, "aligned_alloc %zu", a);
        CHECK_EQ(shmheap_free(h, p), 0);
    }
    void *out;
    CHECK_EQ(shmheap_alloc(h, 10, 48, &out), SHMHEAP_E_INVAL);
    unsigned char *c = (unsigned char *)shmheap_malloc(h, 100);
    memset(c, 7, 100);
    CHECK_EQ(shmheap_free(h, c), 0);
    c = (unsigned char *)shmheap_calloc(h, 10, 10);
    int zero = 1;
    for (int i = 0; i < 100; i++) zero &= c[i] == 0;
    CHECK(zero);
    CHECK(shmheap_calloc(h, SIZE_MAX / 2, 4) == NULL);
    for (int i = 0; i < 100; i++) c[i] = (unsigned char)i;
    unsigned char *g = (unsigned char *)shmheap_realloc(h, c, 100000);
    int same = g != NULL;
    for (int i = 0; g && i < 100; i++) same &= g[i] == i;
    CHECK(same);
    g = (unsigned char *)shmheap_realloc(h, g, 50);
    same = g != NULL;
    for (int i = 0; g && i < 50; i++) same &= g[i] == i;
    CHECK(same);
    CHECK(shmheap_realloc(h, g, 0) == NULL);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

static void bad_input(void)
{
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o = {.size = 4 << 20};
    CHECK_EQ(shmheap_open(t_uniq("nothere"), NULL, &h), SHMHEAP_E_NOTFOUND);
    CHECK_EQ(shmheap_create("", NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_create("shm:", NULL, &h), SHMHEAP_E_BADNAME);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_EQ(shmheap_create(longname, NULL, &h), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_open("cxl:region0", NULL, &h), SHMHEAP_E_NOTSUP);
    CHECK_EQ(shmheap_open("/nonexistent/dir/heap", NULL, &h), SHMHEAP_E_NOTFOUND);
    const char *n = t_uniq("bad");
    h = t_heap(n, 4 << 20);
    CHECK_EQ(shmheap_create(n, &o, &h2), SHMHEAP_E_EXISTS);
    /* pointers that are not blocks of this heap */
    char *p = (char *)shmheap_malloc(h, 64);
    void *m = malloc(64);
    CHECK_EQ(shmheap_free(h, m), SHMHEAP_E_FOREIGN);
    free(m);
    CHECK_EQ(shmheap_free(h, p + 8), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_usable_size(h, p + 8), 0);
    CHECK_EQ(shmheap_free(h, p), 0);
    CHECK_EQ(shmheap_free(h, p), SHMHEAP_E_DOUBLEFREE);
    CHECK_EQ(shmheap_usable_size(h, p), 0);
    char *big = (char *)shmheap_malloc(h, 100000);
    CHECK_EQ(shmheap_free(h, big + 65536), SHMHEAP_E_BADPTR);
    CHECK_EQ(shmheap_free(h, big), 0);
    CHECK_EQ(shmheap_free(h, big), SHMHEAP_E_DOUBLEFREE);
    CHECK_EQ(shmheap_free(h, shmheap_base(h)), SHMHEAP_E_BADPTR); /* the header: inside, no block */
    /* a pointer from another heap */
    const char *n2 = t_uniq("bad2");
    h2 = t_heap(n2, 4 << 20);
    void *q = shmheap_malloc(h2, 32);
    CHECK_EQ(shmheap_free(h, q), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_free(h2, q), 0);
    /* two heaps claiming one address */
    const char *n3 = t_uniq("bad3");
    shmheap *h3 = NULL;
    shmheap_opts fixed = {.size = 4 << 20, .addr = (uintptr_t)shmheap_base(h2)};
    CHECK_EQ(shmheap_create(n3, &fixed, &h3), SHMHEAP_E_ADDRINUSE);
    CHECK_EQ(shmheap_open(n3, NULL, &h3), SHMHEAP_E_NOTFOUND); /* a failed create leaves nothing */
    rm(h2, n2);
    /* heap full, then usable again */
    void *blocks[128];
    int k = 0;
    void *x;
    while (k < 128 && shmheap_alloc(h, 256 << 10, 0, &x) == 0) blocks[k++] = x;
    CHECK(k > 0 && k < 128);
    CHECK_EQ(shmheap_alloc(h, 256 << 10, 0, &x), SHMHEAP_E_FULL);
    CHECK(shmheap_malloc(h, 1 << 30) == NULL);
    int small = 0;
    while (shmheap_malloc(h, 1000)) small++; /* the remaining spans fill with small blocks */
    CHECK_EQ(shmheap_alloc(h, 1000, 0, &x), SHMHEAP_E_FULL);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    for (int i = 0; i < k; i++) CHECK_EQ(shmheap_free(h, blocks[i]), 0);
    CHECK(shmheap_malloc(h, 256 << 10) != NULL);
    rm(h, n);
    /* files that are not heaps */
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/%s", t_uniq("junk"));
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "hello", 5), 5);
    CHECK_EQ(shmheap_open(path, NULL, &h), SHMHEAP_E_TOOSMALL);
    CHECK_EQ(ftruncate(fd, 1 << 20), 0);
    CHECK_EQ(shmheap_open(path, NULL, &h), SHMHEAP_E_BADMAGIC);
    close(fd);
    unlink(path);
}

static void version_and_files(void)
{
    char path[96];
    t_heap_path(path, "file");
    shmheap *h = t_heap(path, 2 << 20), *h2;
    CHECK(h != NULL);
    if (!h) return;
    void *p = shmheap_malloc(h, 10);
    CHECK(p != NULL);
    struct shmheap__hdr *H = (struct shmheap__hdr *)shmheap_base(h);
    CHECK_EQ(shmheap_close(h), 0);
    /* a heap of another layout version is refused, not misread */
    int fd = open(path, O_RDWR);
    uint32_t v = 99;
    CHECK_EQ(pwrite(fd, &v, 4, offsetof(struct shmheap__hdr, version)), 4);
    CHECK_EQ(shmheap_open(path, NULL, &h2), SHMHEAP_E_VERSION);
    v = SHMHEAP__VERSION;
    CHECK_EQ(pwrite(fd, &v, 4, offsetof(struct shmheap__hdr, version)), 4);
    /* a header whose sizes do not fit the file is refused */
    uint64_t big = 1ull << 40;
    CHECK_EQ(pwrite(fd, &big, 8, offsetof(struct shmheap__hdr, size)), 8);
    CHECK_EQ(shmheap_open(path, NULL, &h2), SHMHEAP_E_TOOSMALL);
    big = 2 << 20;
    CHECK_EQ(pwrite(fd, &big, 8, offsetof(struct shmheap__hdr, size)), 8);
    close(fd);
    CHECK_EQ(shmheap_open(path, NULL, &h2), 0);
    CHECK((void *)H == shmheap_base(h2));
    CHECK_EQ(shmheap_usable_size(h2, p), 16);
    CHECK_EQ(shmheap_close(h2), 0);
    shmheap_opts ow = {.overwrite = 1};
    CHECK_EQ(shmheap_create(path, NULL, &h2), SHMHEAP_E_EXISTS);
    CHECK_EQ(shmheap_create(path, &ow, &h2), 0);
    CHECK_EQ(shmheap_usable_size(h2, p), 0); /* formatted anew */
    rm(h2, path);
}

static void roots(void)
{
    const char *n = t_uniq("roots");
    shmheap *h = t_heap(n, 2 << 20);
    int *a = (int *)shmheap_malloc(h, 4), *b = (int *)shmheap_malloc(h, 4);
    CHECK_EQ(shmheap_root_set(h, "a", a), 0);
    CHECK(shmheap_root_get(h, "a") == a);
    CHECK_EQ(shmheap_root_set(h, "a", b), 0);
    CHECK(shmheap_root_get(h, "a") == b);
    CHECK(shmheap_root_get(h, "b") == NULL);
    CHECK_EQ(shmheap_root_set(h, "a", NULL), 0);
    CHECK(shmheap_root_get(h, "a") == NULL);
    CHECK_EQ(shmheap_root_set(h, "a", NULL), SHMHEAP_E_NOTFOUND);
    CHECK_EQ(shmheap_root_set(h, "", a), SHMHEAP_E_BADNAME);
    CHECK_EQ(shmheap_root_set(h, "0123456789012345678901234567890123456789012345678", a), SHMHEAP_E_BADNAME);
    int x;
    CHECK_EQ(shmheap_root_set(h, "stack", &x), SHMHEAP_E_FOREIGN);
    char nm[16];
    for (int i = 0; i < 64; i++) {
        snprintf(nm, sizeof nm, "r%d", i);
        CHECK_EQ(shmheap_root_set(h, nm, a), 0);
    }
    CHECK_EQ(shmheap_root_set(h, "one-too-many", a), SHMHEAP_E_FULL);
    CHECK(shmheap_root_get(h, "r63") == a);
    rm(h, n);
}

static void check_finds_damage(void)
{
    const char *n = t_uniq("damage");
    shmheap *h = t_heap(n, 2 << 20);
    shmheap_stats st;
    void *p = shmheap_malloc(h, 100000);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 1);
    size_t s = (size_t)((char *)p - h->data) >> SHMHEAP__SPAN_SHIFT;
    uint64_t saved = h->ent[s + 1];
    h->ent[s + 1] = SHMHEAP__S_FREE; /* break the run */
    CHECK_EQ(shmheap_check(h, &st), SHMHEAP_E_CORRUPT);
    CHECK(strstr(st.problem, "run broken") != NULL);
    h->ent[s + 1] = saved;
    uint64_t w0 = h->bm[s * SHMHEAP__WORDS];
    h->bm[s * SHMHEAP__WORDS] = 1; /* open a word of a span that is not small, a slot taken */
    CHECK_EQ(shmheap_check(h, &st), SHMHEAP_E_CORRUPT);
    h->bm[s * SHMHEAP__WORDS] = w0;
    CHECK_EQ(shmheap_check(h, &st), 0);
    rm(h, n);
}

/* A process dies while holding the heap mutex in the middle of a step: the next locker repairs
   the step, nobody deadlocks, and the heap checks out. */
static void dead_lock_holder(void)
{
    const char *n = t_uniq("dead");
    shmheap *h = t_heap(n, 4 << 20);
    for (int op = SHMHEAP__J_INIT; op <= SHMHEAP__J_LFREE; op++) {
        void *big = op == SHMHEAP__J_LFREE ? shmheap_malloc(h, 200000) : NULL;
        void *q = op == SHMHEAP__J_RETIRE ? shmheap_malloc(h, 48) : NULL;
        if (q) shmheap_free(h, q);
        pid_t pid = fork();
        if (pid == 0) {
            shmheap__lock(h);
            if (op == SHMHEAP__J_INIT) { /* entry published, words not yet opened */
                long s = shmheap__find_free_run(h, 1, 0);
                shmheap__journal(h, op, (uint64_t)s, 1, 3, 777);
                shmheap__close_fresh_words(h, (size_t)s); /* as init_span does */
                rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, 3, 777));
            } else if (op == SHMHEAP__J_LALLOC) { /* half a run marked */
                long s = shmheap__find_free_run(h, 4, 0);
                shmheap__journal(h, op, (uint64_t)s, 4, 0, 0);
                rcp__store(&h->ent[s + 3], SHMHEAP__E_MAKE(SHMHEAP__S_CONT, 0, 3));
            } else if (op == SHMHEAP__J_LFREE) { /* half a run freed */
                size_t s = (size_t)((char *)big - h->data) >> SHMHEAP__SPAN_SHIFT;
                shmheap__journal(h, op, s, 4, 0, 0);
                rcp__store(&h->ent[s + 1], (uint64_t)SHMHEAP__S_FREE);
            } else if (op == SHMHEAP__J_RETIRE) { /* an empty span with one word closed */
                size_t s = (size_t)((char *)q - h->data) >> SHMHEAP__SPAN_SHIFT;
                shmheap__journal(h, op, s, 1, 2, 0);
                rcp__fetch_or(&h->bm[s * SHMHEAP__WORDS], SHMHEAP__CLOSED);
            }
            kill(getpid(), SIGKILL);
        }
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st));
        shmheap_stats s;
        CHECKF(shmheap_check(h, &s) == 0, "step %d: %s", op, s.problem);
        CHECK_EQ(s.recoveries, op);
        if (op == SHMHEAP__J_LFREE) CHECK_EQ(shmheap_usable_size(h, big), 0);
        void *x = shmheap_malloc(h, 300000);
        CHECK(x != NULL);
        CHECK_EQ(shmheap_free(h, x), 0);
    }
    rm(h, n);
}

/* Freeing every small block lets the spans serve other sizes and large blocks again. */
static void spans_return(void)
{
    const char *n = t_uniq("spans");
    shmheap *h = t_heap(n, 4 << 20);
    shmheap_stats st;
    static void *ps[300000];
    size_t k = 0;
    void *p;
    while (k < 300000 && (p = shmheap_malloc(h, 16))) ps[k++] = p;
    CHECK(k > 1000);
    CHECK(shmheap_malloc(h, 100000) == NULL);
    for (size_t i = 0; i < k; i++) CHECK_EQ(shmheap_free(h, ps[i]), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    void *big = shmheap_malloc(h, (st.data_bytes * 3) / 4);
    CHECK(big != NULL);
    CHECK_EQ(shmheap_free(h, big), 0);
    rm(h, n);
}

static void on_segv(int sig) { (void)sig; _exit(77); }

/* Runs fn(arg) in a child; returns 77 if it faulted with SIGSEGV, its exit status otherwise. */
static int faults(void (*fn)(char *), char *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, on_segv);
        fn(arg);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
static void write_byte(char *p) { *(volatile char *)(p + 1) = 2; }
static void read_byte(char *p) { volatile char c = *p; (void)c; }

static void *free_three(void *arg)
{
    shmheap *h = (shmheap *)arg;
    for (int i = 0; i < 3; i++) shmheap_free(h, shmheap_malloc(h, 100));
    return NULL;
}

/* Freed small blocks wait in per-thread caches kept in the heap; a thread that exits gives its
   cache back, and so does anyone for a process that died. */
static void thread_caches(void)
{
    const char *n = t_uniq("tc");
    shmheap *h = t_heap(n, 4 << 20);
    shmheap_stats st;
    void *p = shmheap_malloc(h, 100);
    CHECK_EQ(shmheap_free(h, p), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 1);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(shmheap_free(h, p), SHMHEAP_E_DOUBLEFREE); /* found in the cache */
    CHECK(shmheap_malloc(h, 100) == p);                 /* and served from it */
    CHECK_EQ(shmheap_free(h, p), 0);
    pthread_t th;
    pthread_create(&th, NULL, free_three, h);
    pthread_join(th, NULL);
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.cached_blocks, 1); /* only ours: the thread's went back when it exited */
    pid_t pid = fork();
    if (pid == 0) {
        void *q[5];
        for (int i = 0; i < 5; i++) q[i] = shmheap_malloc(h, 64);
        for (int i = 0; i < 5; i++) shmheap_free(h, q[i]);
        kill(getpid(), SIGKILL);
    }
    int ws;
    waitpid(pid, &ws, 0);
    CHECK(WIFSIGNALED(ws));
    CHECK_EQ(shmheap_check(h, &st), 0); /* sweeps the dead child's cache */
    CHECK_EQ(st.cached_blocks, 1);
    CHECK_EQ(st.live_blocks, 0);
    rm(h, n);
}

static void sealing(void)
{
    const char *n = t_uniq("seal");
    shmheap *h = t_heap(n, 2 << 20);
    char *p = (char *)shmheap_malloc(h, 8192);
    p[0] = 1;
    CHECK_EQ(shmheap_seal(h, p, 8192), 0);
    CHECK(p[0] == 1); /* still readable */
    CHECK_EQ(faults(write_byte, p), 77); /* a child inherits the seal: its write faults */
    CHECK_EQ(faults(read_byte, p), 0);
    shmheap_range r[3] = {{p, 100}, {p + 4096, 10}, {p + 100, 50}};
    CHECK_EQ(shmheap_unseal_batch(h, r, 3), 0);
    CHECK_EQ(faults(write_byte, p), 0);
    p[1] = 2;
    p[5000] = 3;
    CHECK_EQ(shmheap_seal(h, p, 10), 0);
    CHECK_EQ(shmheap_unseal(h, p, 10), 0);
    p[2] = 4;
    int x;
    CHECK_EQ(shmheap_seal(h, &x, 4), SHMHEAP_E_FOREIGN);
    CHECK_EQ(shmheap_contains(h, p, 8192), 1);
    CHECK_EQ(shmheap_contains(h, p, shmheap_size(h)), 0);
    CHECK_EQ(shmheap_contains(h, &x, 4), 0);
    CHECK_EQ(shmheap_contains(h, shmheap_base(h), 8), 0); /* the header is not data */
    rm(h, n);
}

/* 1 if /proc/self/maps has a mapping exactly [a, e) */
static int own_mapping(const void *a, const void *e)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long x, y;
        found = sscanf(line, "%lx-%lx", &x, &y) == 2 && x == (uintptr_t)a && y == (uintptr_t)e;
    }
    if (f) fclose(f);
    return found;
}

/* A child that maps the heap afresh (one mapping) sees at p + off what the parent wrote */
static int child_sees(const char *name, shmheap *h, const char *p, size_t off, char v)
{
    pid_t pid = fork();
    if (pid == 0) {
        shmheap *c;
        void *b = shmheap_base(h);
        shmheap_close(h);
        if (shmheap_open(name, NULL, &c) || shmheap_base(c) != b) _exit(2);
        _exit(((volatile const char *)p)[off] == v ? 0 : 3);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A sealed range becomes a mapping of its own (the same pages, another open of the file), so
   sealing it again splits and merges nothing; a range covering kept ones replaces them; one
   that sticks out of a kept range, and ranges beyond the 64 kept, are sealed by mprotect. */
static void seal_own_mapping(void)
{
    const char *n = t_uniq("sealmap");
    shmheap *h = t_heap(n, 4 << 20);
    const size_t pg = 4096;
    char *q = (char *)shmheap_aligned_alloc(h, pg, 16 * pg);
    CHECK(q != NULL);
    if (!q) return;
    memset(q, 'a', 16 * pg);
    CHECK_EQ(shmheap_seal(h, q + pg, 2 * pg), 0);
    CHECK_EQ(faults(write_byte, q + pg), 77);
    CHECK_EQ(faults(write_byte, q), 0); /* its neighbours stay writable */
    CHECK_EQ(faults(write_byte, q + 3 * pg), 0);
    CHECK(q[pg] == 'a' && q[3 * pg - 1] == 'a'); /* the same pages: contents kept */
    CHECK_EQ(shmheap_unseal(h, q + pg, 2 * pg), 0);
    CHECKF(own_mapping(q + pg, q + 3 * pg), "[%p, %p) merged back into the heap's mapping",
           (void *)(q + pg), (void *)(q + 3 * pg));
    q[pg + 5] = 'b'; /* written through the new mapping, seen by a fresh mapping of the heap */
    CHECK_EQ(child_sees(n, h, q, pg + 5, 'b'), 0);
    for (int i = 0; i < 3; i++) { /* again: the same mapping, sealed and unsealed */
        CHECK_EQ(shmheap_seal(h, q + pg, 2 * pg), 0);
        CHECK_EQ(faults(write_byte, q + 2 * pg), 77);
        CHECK_EQ(shmheap_unseal(h, q + pg, 2 * pg), 0);
        CHECK(own_mapping(q + pg, q + 3 * pg));
    }
    CHECK_EQ(shmheap_seal(h, q, 8 * pg), 0); /* covers the kept range: replaces it */
    CHECK_EQ(faults(write_byte, q + 7 * pg), 77);
    CHECK_EQ(shmheap_unseal(h, q, 8 * pg), 0);
    CHECK(own_mapping(q, q + 8 * pg));
    CHECK(q[pg + 5] == 'b');
    CHECK_EQ(shmheap_seal(h, q + 6 * pg, 4 * pg), 0); /* sticks out of it: mprotect */
    CHECK_EQ(faults(write_byte, q + 6 * pg), 77);
    CHECK_EQ(faults(write_byte, q + 9 * pg), 77);
    CHECK_EQ(faults(write_byte, q + 5 * pg), 0);
    CHECK_EQ(shmheap_unseal(h, q + 6 * pg, 4 * pg), 0);
    CHECK_EQ(faults(write_byte, q + 9 * pg), 0);
    CHECK_EQ(shmheap_seal(h, q + 2 * pg, pg), 0); /* inside it: mprotect */
    CHECK_EQ(faults(write_byte, q + 2 * pg), 77);
    CHECK_EQ(shmheap_unseal(h, q + 2 * pg, pg), 0);
    /* 80 more ranges, every other page: beyond the 64 kept, seals are mprotects; all hold */
    char *r = (char *)shmheap_aligned_alloc(h, pg, 160 * pg);
    CHECK(r != NULL);
    if (!r) return;
    memset(r, 'c', 160 * pg);
    for (int i = 0; i < 80; i++) {
        CHECK_EQ(shmheap_seal(h, r + 2 * i * pg, pg), 0);
        if (i % 20 == 0 || i == 79) CHECK_EQ(faults(write_byte, r + 2 * i * pg), 77);
    }
    CHECK_EQ(faults(write_byte, r + pg), 0);
    for (int i = 0; i < 80; i++) CHECK_EQ(shmheap_unseal(h, r + 2 * i * pg, pg), 0);
    for (int i = 0; i < 80; i++) r[2 * i * pg] = 'd';
    CHECK_EQ(child_sees(n, h, r, 158 * pg, 'd'), 0);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    shmheap_free(h, r);
    shmheap_free(h, q);
    rm(h, n);
}

static void pkeys(void)
{
    if (shmheap_pkey_supported()) {
        const char *n = t_uniq("pkey");
        shmheap *h = t_heap(n, 2 << 20);
        int k = shmheap_pkey_alloc(0);
        CHECK(k > 0);
        char *p = (char *)shmheap_malloc(h, 4096);
        CHECK_EQ(shmheap_pkey_protect(h, p, 4096, k), 0);
        p[0] = 1;
        CHECK_EQ(shmheap_pkey_set(k, 1), 0);
        CHECK_EQ(faults(read_byte, p), 77);
        CHECK_EQ(shmheap_pkey_set(k, 0), 0);
        CHECK_EQ(shmheap_pkey_free(k), 0);
        rm(h, n);
    } else {
        CHECK_EQ(shmheap_pkey_alloc(0), SHMHEAP_E_NOTSUP);
        CHECK_EQ(shmheap_pkey_set(1, 0), SHMHEAP_E_NOTSUP);
        t_skip("pkeys-hardware", "CPU or kernel without pku: checked the not-supported path");
    }
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(lifetime_and_same_address);
    RUN(sizes_and_alignment);
    RUN(bad_input);
    RUN(version_and_files);
    RUN(roots);
    RUN(check_finds_damage);
    RUN(dead_lock_holder);
    RUN(spans_return);
    RUN(thread_caches);
    RUN(sealing);
    RUN(seal_own_mapping);
    RUN(pkeys);
    return T_DONE();
}
