// TSAN
/* shmheap.h from many threads at once: random sizes, patterns checked before every free, and
   blocks handed between threads through an exchange array so that threads free each other's
   blocks. Counts every block: at the end nothing is live and the heap checks out. */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <pthread.h>

#define NTHREADS 4
#define XCHG 256
static shmheap *H;
static void *xchg[XCHG];
static long allocs[NTHREADS], frees[NTHREADS], errors;
static int iters = 200000;


static int check_free(void *p)
{
    unsigned char *c = (unsigned char *)p;
    size_t n = c[0] | (size_t)c[1] << 8;
    for (size_t i = 2; i < n; i++)
        if (c[i] != (unsigned char)(n + i)) return -1;
    return shmheap_free(H, p);
}

static void *thread_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    void *mine[64] = {0};
    for (int it = 0; it < iters; it++) {
        uint64_t x = t_rng(&seed);
        int i = (int)(x % 64);
        if (mine[i]) {
            void *p = mine[i];
            mine[i] = NULL;
            if ((x >> 8) & 1) p = __atomic_exchange_n(&xchg[(x >> 16) % XCHG], p, __ATOMIC_ACQ_REL);
            if (p) {
                if (check_free(p)) __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
                frees[me]++;
            }
        } else {
            size_t n = 2 + (x >> 20) % ((x & 0xf0) ? 500 : 5000);
            unsigned char *c = (unsigned char *)shmheap_malloc(H, n);
            if (!c) { __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED); continue; }
            c[0] = (unsigned char)n;
            c[1] = (unsigned char)(n >> 8);
            for (size_t k = 2; k < n; k++) c[k] = (unsigned char)(n + k);
            mine[i] = c;
            allocs[me]++;
        }
    }
    for (int i = 0; i < 64; i++)
        if (mine[i]) { if (check_free(mine[i])) __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED); frees[me]++; }
    return NULL;
}

static void threads(void)
{
    const char *n = t_uniq("thr");
    if (!(H = t_heap(n, 64 << 20))) return;
#ifdef T_TSAN
    iters = 40000;
#endif
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    long a = 0, f = 0;
    for (int i = 0; i < XCHG; i++)
        if (xchg[i]) { CHECK_EQ(check_free(xchg[i]), 0); f++; }
    for (int i = 0; i < NTHREADS; i++) { a += allocs[i]; f += frees[i]; }
    CHECK_EQ(errors, 0);
    CHECK_EQ(a, f);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(H, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    printf("# %ld blocks allocated and freed by %d threads\n", a, NTHREADS);
    shmheap_close(H);
    shmheap_unlink(n, NULL);
}

/* Threads keep to spans of their own (one per stripe) while the heap has free spans: a span
   holding live blocks of two threads has both writing its bitmap words, and two threads of
   bench/shmheap_alloc's mixed sizes then ran slower than one. Thread A allocates 48 blocks of
   the 16-per-span class and frees every other one, leaving half-free spans; thread B then
   allocates 48 of its own: none may land in a span holding A's blocks. */
static void *own_spans_alloc(void *arg)
{
    void **out = (void **)arg;
    for (int i = 0; i < 48; i++) out[i] = shmheap_malloc(H, 4000);
    for (int i = 0; i < 48; i += 2) { shmheap_free(H, out[i]); out[i] = NULL; }
    return NULL;
}
static void own_spans(void)
{
    const char *n = t_uniq("own");
    if (!(H = t_heap(n, 16 << 20))) return;
    void *a[48], *b[48];
    pthread_t th;
    pthread_create(&th, NULL, own_spans_alloc, a);
    pthread_join(th, NULL);
    pthread_create(&th, NULL, own_spans_alloc, b);
    pthread_join(th, NULL);
    int shared = 0;
    for (int i = 1; i < 48; i += 2) {
        CHECK(a[i] && b[i]);
        if (!a[i] || !b[i]) break;
        for (int j = 1; j < 48; j += 2)
            if (((char *)a[i] - H->data) >> SHMHEAP__SPAN_SHIFT == ((char *)b[j] - H->data) >> SHMHEAP__SPAN_SHIFT) shared++;
    }
    CHECKF(shared == 0, "%d pairs of live blocks of two threads share a span", shared);
    for (int i = 1; i < 48; i += 2) { CHECK_EQ(shmheap_free(H, a[i]), 0); CHECK_EQ(shmheap_free(H, b[i]), 0); }
    shmheap_stats st;
    CHECK_EQ(shmheap_check(H, &st), 0);
    CHECK_EQ(st.live_blocks, 0);
    shmheap_close(H);
    shmheap_unlink(n, NULL);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(threads);
    RUN(own_spans);
    return T_DONE();
}
