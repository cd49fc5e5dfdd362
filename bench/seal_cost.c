/* bench/seal_cost.c - what one seal costs on this machine: shmheap_seal + shmheap_unseal of one
   written 4 KiB page of a heap, against the bare mprotect(PROT_READ) + mprotect(READ|WRITE) pair
   of an anonymous shared page. Each is measured with this process alone on CPU 0, then with a
   second thread of the process spinning on CPU 1: changing a mapping's permissions must then
   flush the other CPU's TLB too (an inter-processor interrupt), which is what a sealed rpcool
   call pays when its server thread or the client's other threads run elsewhere.
   Then where a seal's cost beyond the bare pair went: the same bare pair on a
   page in the middle of a 16 MiB shared mapping (the kernel splits the mapping in three and
   merges it back: what shmheap_seal paid before it mapped sealed ranges on their own), and on
   that page mapped again on its own from a second open of the file (what shmheap_seal does
   now), alone, for one page and for 16 pages.
   Lines: "NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h), one per case.
   Usage: seal_cost [iterations] */
#define _GNU_SOURCE
#include "hist.h"
#define SHMHEAP_IMPLEMENTATION
#include "../shmheap.h"
#include <fcntl.h>
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

static size_t len_ = 4096; /* bytes a raw mprotect pair covers */

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
            r1 = mprotect(p, len_, PROT_READ);
            r2 = mprotect(p, len_, PROT_READ | PROT_WRITE);
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
    /* split and merge: a 16 MiB shared mapping of a memfd, a page (and 16) in its middle, then
       the same pages mapped again on their own from a second open of the memfd */
    int fd = memfd_create("seal-cost", MFD_CLOEXEC), f2 = -1;
    size_t big = 16u << 20, mid = 8u << 20;
    char *m = fd >= 0 && ftruncate(fd, (off_t)big) == 0
                  ? (char *)mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : (char *)MAP_FAILED;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (m != MAP_FAILED && (f2 = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
        memset(m + mid, 1, 32 * 4096);
        bad |= measure("seal/mprotect_pair,page_in_16MiB_mapping", 1, h, m + mid, n);
        len_ = 16 * 4096;
        bad |= measure("seal/mprotect_pair,16_pages_in_16MiB_mapping", 1, h, m + mid, n);
        len_ = 4096;
        char *own = (char *)mmap(m + mid, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                                 f2, (off_t)mid);
        char *own16 = (char *)mmap(m + mid + 16 * 4096, 16 * 4096, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_FIXED, f2, (off_t)(mid + 16 * 4096));
        if (own == m + mid && own16 == m + mid + 16 * 4096) {
            bad |= measure("seal/mprotect_pair,page_mapped_on_its_own", 1, h, own, n);
            len_ = 16 * 4096;
            bad |= measure("seal/mprotect_pair,16_pages_mapped_on_their_own", 1, h, own16, n);
            len_ = 4096;
        } else {
            fprintf(stderr, "seal_cost: cannot map a page on its own\n");
            bad = 1;
        }
        close(f2);
    } else {
        fprintf(stderr, "seal_cost: no memfd mapping or /proc/self/fd (the split cases)\n");
    }
    if (m != MAP_FAILED) munmap(m, big);
    if (fd >= 0) close(fd);
    shmheap_free(h, hp);
    shmheap_close(h);
    shmheap_unlink(name, NULL);
    return bad;
}
