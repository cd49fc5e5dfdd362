/* bench/shmheap_alloc.c - allocation throughput of shmheap against glibc malloc, same run.
   Each thread keeps 1024 live blocks; one operation frees a random one and allocates a new one
   (a malloc/free pair). Sizes: fixed 16, 64, 256, 1024, 4096 B, and mixed (uniform 16..4096).
   Every configuration runs REPS times; the line reports the median rate and the ratio to glibc.
   Usage: shmheap_alloc [ops_per_thread] [reps] */
#define SHMHEAP_IMPLEMENTATION
#include "../shmheap.h"
#include <pthread.h>

#define LIVE 1024
static shmheap *H;
static long OPS = 2000000;
struct arg { int use_shm; size_t size; uint64_t seed; pthread_barrier_t *bar; };

static uint64_t rng(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static inline size_t pick(size_t fixed, uint64_t x) { return fixed ? fixed : 16 + x % (4096 - 16 + 1); }

static void *run(void *vp)
{
    struct arg *a = (struct arg *)vp;
    void *live[LIVE];
    uint64_t s = a->seed;
    for (int i = 0; i < LIVE; i++) live[i] = a->use_shm ? shmheap_malloc(H, pick(a->size, rng(&s))) : malloc(pick(a->size, rng(&s)));
    pthread_barrier_wait(a->bar);
    for (long k = 0; k < OPS; k++) {
        uint64_t x = rng(&s);
        unsigned i = (unsigned)(x >> 40) % LIVE;
        if (a->use_shm) {
            shmheap_free(H, live[i]);
            live[i] = shmheap_malloc(H, pick(a->size, x));
        } else {
            free(live[i]);
            live[i] = malloc(pick(a->size, x));
        }
        *(volatile char *)live[i] = 1; /* touch it, as a user would */
    }
    pthread_barrier_wait(a->bar);
    for (int i = 0; i < LIVE; i++) { if (a->use_shm) shmheap_free(H, live[i]); else free(live[i]); }
    return NULL;
}

/* Million malloc/free pairs per second, all threads together. */
static double rate(int use_shm, size_t size, int nthreads)
{
    pthread_t th[8];
    struct arg a[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        a[i] = (struct arg){use_shm, size, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 7), &bar};
        pthread_create(&th[i], NULL, run, &a[i]);
    }
    pthread_barrier_wait(&bar);
    uint64_t t0 = rcp__now_ns();
    pthread_barrier_wait(&bar);
    uint64_t t1 = rcp__now_ns();
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    return (double)OPS * nthreads / ((double)(t1 - t0) / 1e3);
}

static int cmp(const void *x, const void *y) { double a = *(const double *)x, b = *(const double *)y; return a < b ? -1 : a > b; }

int main(int argc, char **argv)
{
    int reps = 5;
    if (argc > 1) OPS = atol(argv[1]);
    if (argc > 2) reps = atoi(argv[2]);
    if (reps < 1 || reps > 51 || OPS < 1) { fprintf(stderr, "usage: %s [ops_per_thread] [reps]\n", argv[0]); return 2; }
    char name[64];
    snprintf(name, sizeof name, "bench-alloc-%d", (int)getpid());
    shmheap_opts o = {.size = (size_t)256 << 20};
    int r = shmheap_create(name, &o, &H);
    if (r) { fprintf(stderr, "shmheap_create: %s\n", shmheap_strerror(r)); return 1; }
    size_t sizes[] = {16, 64, 256, 1024, 4096, 0};
    printf("# alloc: malloc/free pairs per second (millions), median of %d runs of %ld pairs per thread\n", reps, OPS);
    printf("# %-8s %7s %12s %12s %8s\n", "size", "threads", "shmheap", "glibc", "ratio");
    for (int t = 1; t <= 2; t++)
        for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            double s[51], g[51];
            for (int k = 0; k < reps; k++) { s[k] = rate(1, sizes[si], t); g[k] = rate(0, sizes[si], t); }
            qsort(s, (size_t)reps, sizeof *s, cmp);
            qsort(g, (size_t)reps, sizeof *g, cmp);
            char sz[16];
            if (sizes[si]) snprintf(sz, sizeof sz, "%zu", sizes[si]); else snprintf(sz, sizeof sz, "16-4096");
            printf("alloc %-8s %7d %12.2f %12.2f %8.2f\n", sz, t, s[reps / 2], g[reps / 2], s[reps / 2] / g[reps / 2]);
            fflush(stdout);
        }
    shmheap_stats st;
    r = shmheap_check(H, &st);
    printf("# heap check after the benchmark: %s, %zu live blocks\n", r ? st.problem : "consistent", st.live_blocks);
    shmheap_close(H);
    shmheap_unlink(name, NULL);
    return r ? 1 : 0;
}
