/* bench/alock_bench.c - alock.h's local cohort against a pthread mutex and a ticket spin lock,
   in the same run, peers alternated round by round (bench/bench_alock.sh runs it).
     alock_bench ROUNDS OPS
   uncontended/K/256pairs: one thread, lock+unlock pairs on one lock; every round times OPS pairs
     in batches of 256: the figures are ns per batch of 256 pairs (median, p99 over all batches
     of all rounds); the ratio line divides by 256.
   contended/T: T threads, lock + counter++ + unlock for 0.2 s per round; each pair timed
     (clock reads included); ops/s is pairs of all threads per second of wall time.
   Lines: NAME MEDIAN_NS P99_NS OPS_PER_S (hist.h), then the ratios against the pthread mutex. */
#define ALOCK_NO_RDMA 1
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "hist.h"
#include <pthread.h>

enum { K_ALOCK, K_MUTEX, K_TICKET, K_N };
static const char *kname[K_N] = {"alock", "pthread_mutex", "ticket_spin"};

static alock_table *tab;
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static struct { uint32_t next, serving; } tk __attribute__((aligned(64)));
static uint64_t counter;

static inline void ticket_lock(void)
{
    uint32_t me = __atomic_fetch_add(&tk.next, 1, __ATOMIC_RELAXED);
    while (__atomic_load_n(&tk.serving, __ATOMIC_ACQUIRE) != me) rcp__cpu_relax();
}
static inline void ticket_unlock(void) { __atomic_store_n(&tk.serving, tk.serving + 1, __ATOMIC_RELEASE); }

static inline void pair(int k, uint32_t idx)
{
    if (k == K_ALOCK) {
        alock_hold h;
        alock_lock(tab, idx, &h);
        counter++;
        alock_unlock(&h);
    } else if (k == K_MUTEX) {
        pthread_mutex_lock(&mtx);
        counter++;
        pthread_mutex_unlock(&mtx);
    } else {
        ticket_lock();
        counter++;
        ticket_unlock();
    }
}

struct targ { int k; volatile int *stop; hist h; uint64_t n; };
static void *worker(void *arg)
{
    struct targ *a = (struct targ *)arg;
    while (!*a->stop) {
        uint64_t s = hist_now();
        pair(a->k, 1);
        hist_add(&a->h, hist_now() - s);
        a->n++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    long ops = argc > 2 ? atol(argv[2]) : 2000000;
    shmheap *h;
    char name[64];
    snprintf(name, sizeof name, "alock-bench-%d", (int)getpid());
    shmheap_opts ho = {.size = 8 << 20};
    alock_table_opts ao = {.nlocks = 16};
    if (shmheap_create(name, &ho, &h) || alock_table_create(h, "t", &ao, &tab)) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    /* uncontended */
    long batches = ops / 256;
    hist un[K_N];
    double med[K_N][2], rate[K_N][2];
    for (int k = 0; k < K_N; k++) hist_init(&un[k], (size_t)(batches * rounds));
    uint64_t busy[K_N] = {0};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < K_N; k++) {
            uint64_t t0 = hist_now();
            for (long b = 0; b < batches; b++) {
                uint64_t s = hist_now();
                for (int i = 0; i < 256; i++) pair(k, 0);
                hist_add(&un[k], hist_now() - s);
            }
            busy[k] += hist_now() - t0;
        }
    for (int k = 0; k < K_N; k++) {
        char n[64];
        snprintf(n, sizeof n, "uncontended/%s/256pairs", kname[k]);
        hist_print(&un[k], n, hist_ops_per_s((uint64_t)batches * 256 * rounds, busy[k]));
        med[k][0] = (double)hist_pct(&un[k], 50.0) / 256.0;
        rate[k][0] = hist_ops_per_s((uint64_t)batches * 256 * rounds, busy[k]);
    }
    /* contended, 2 threads */
    const int T = 2;
    hist ch[K_N];
    uint64_t cn[K_N] = {0}, cwall[K_N] = {0};
    for (int k = 0; k < K_N; k++) hist_init(&ch[k], 1 << 24);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < K_N; k++) {
            volatile int stop = 0;
            struct targ a[2];
            pthread_t th[2];
            for (int i = 0; i < T; i++) {
                a[i].k = k; a[i].stop = &stop; a[i].n = 0;
                hist_init(&a[i].h, 1 << 22);
            }
            uint64_t t0 = hist_now();
            for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, worker, &a[i]);
            usleep(200000);
            stop = 1;
            for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
            cwall[k] += hist_now() - t0;
            for (int i = 0; i < T; i++) {
                for (size_t j = 0; j < a[i].h.n && ch[k].n < ch[k].cap; j++) hist_add(&ch[k], a[i].h.ns[j]);
                cn[k] += a[i].n;
                hist_free(&a[i].h);
            }
        }
    for (int k = 0; k < K_N; k++) {
        char n[64];
        snprintf(n, sizeof n, "contended2/%s", kname[k]);
        rate[k][1] = hist_ops_per_s(cn[k], cwall[k]);
        hist_print(&ch[k], n, rate[k][1]);
        med[k][1] = (double)hist_pct(&ch[k], 50.0);
    }
    printf("# uncontended lock+unlock, median ns per pair: alock %.2f, pthread_mutex %.2f, ticket_spin %.2f\n",
           med[K_ALOCK][0], med[K_MUTEX][0], med[K_TICKET][0]);
    printf("# ratios to pthread_mutex (same run): uncontended median alock %.2fx, ticket %.2fx; "
           "contended2 throughput alock %.2fx, ticket %.2fx\n",
           med[K_ALOCK][0] / med[K_MUTEX][0], med[K_TICKET][0] / med[K_MUTEX][0],
           rate[K_ALOCK][1] / rate[K_MUTEX][1], rate[K_TICKET][1] / rate[K_MUTEX][1]);
    alock_table_close(tab);
    alock_table_unlink(h, "t");
    shmheap_close(h);
    shmheap_unlink(name, NULL);
    return 0;
}
