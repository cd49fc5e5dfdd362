/* bench/seal_cost.c - what one seal costs on this machine: shmheap_seal + shmheap_unseal of one
   written 4 KiB page of a heap, against the bare mprotect(PROT_READ) + mprotect(READ|WRITE) pair
   of an anonymous shared page. Each is measured with this process alone on CPU 0, then with a
   second thread of the process spinning on CPU 1: changing a mapping's permissions must then
   flush the other CPU's TLB too (an inter-processor interrupt), which is what a sealed rpcool
   call pays when its server thread or the client's other threads run elsewhere.
   Lines: "NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h), one per case.
   Usage: seal_cost [iterations] */
#define _GNU_SOURCE
#include "hist.h"
#define SHMHEAP_IMPLEMENTATION
#include "../shmheap.h"
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

static volatile int stop;

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s); /* best effort: a 1-CPU machine runs unpinned */
}

static void *spin(void *unused)
{
    (void)unused;
    pin(1);
    while (!stop) { }
    return NULL;
}

/* kind 0: shmheap_seal/unseal of p in h; kind 1: raw mprotect pair */
static int measure(const char *name, int kind, shmheap *h, char *p, size_t n)
{
    hist hs;
    if (hist_init(&hs, n)) return 1;
    uint64_t t0 = hist_now();
    for (size_t i = 0; i < n; i++) {
        uint64_t s = hist_now();
        int r1, r2;
        if (kind == 0) {
            r1 = shmheap_seal(h, p, 4096);
            r2 = shmheap_unseal(h, p, 4096);
        } else {
            r1 = mprotect(p, 4096, PROT_READ);
            r2 = mprotect(p, 4096, PROT_READ | PROT_WRITE);
        }
        p[0] = (char)i; /* the page is written between seals, as an argument is */
        hist_add(&hs, hist_now() - s);
        if (r1 || r2) {
            fprintf(stderr, "%s: seal/unseal failed (%d, %d)\n", name, r1, r2);
            hist_free(&hs);
            return 1;
        }
    }
    hist_print(&hs, name, hist_ops_per_s(hs.n, hist_now() - t0));
    hist_free(&hs);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 20000;
    if (!n) { fprintf(stderr, "usage: %s [iterations]\n", argv[0]); return 2; }
    char name[64];
    snprintf(name, sizeof name, "rpcool-seal-cost-%d", (int)getpid());
    shmheap_opts o = {0};
    o.size = 16u << 20;
    shmheap *h;
    int rc = shmheap_create(name, &o, &h);
    if (rc) { fprintf(stderr, "shmheap_create: %s\n", shmheap_strerror(rc)); return 1; }
    char *hp = (char *)shmheap_aligned_alloc(h, 4096, 4096);
    char *ap = (char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!hp || ap == MAP_FAILED) { fprintf(stderr, "allocation failed\n"); return 1; }
    hp[0] = ap[0] = 1;
    pin(0);
    int bad = measure("seal/shmheap_seal+unseal", 0, h, hp, n);
    bad |= measure("seal/mprotect_pair", 1, h, ap, n);
    pthread_t t;
    if (pthread_create(&t, NULL, spin, NULL) == 0) {
        bad |= measure("seal/shmheap_seal+unseal,other_cpu_busy", 0, h, hp, n);
        bad |= measure("seal/mprotect_pair,other_cpu_busy", 1, h, ap, n);
        stop = 1;
        pthread_join(t, NULL);
    }
    shmheap_free(h, hp);
    shmheap_close(h);
    shmheap_unlink(name, NULL);
    return bad;
}
