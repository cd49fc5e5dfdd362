// VM
/* tests/vm/test_pkey.c - memory protection keys inside the guest (qemu TCG's -cpu max offers
 * pku; our hosts' CPUs do not): the raw pkey syscalls, then shmheap's pkey API on a heap. A read
 * through a key with access disabled must fault with SEGV_PKUERR. */
#include "vmt.h"
#include <setjmp.h>
#include <sys/mman.h>
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#ifndef SEGV_PKUERR
#define SEGV_PKUERR 4
#endif

static sigjmp_buf jb;
static volatile int fault_code;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)uc;
    fault_code = si->si_code;
    siglongjmp(jb, 1);
}

/* 0 if the access worked, else the si_code of the fault. */
static int try_access(volatile unsigned char *p, int write)
{
    fault_code = 0;
    if (sigsetjmp(jb, 1) == 0) {
        if (write) *p = 42;
        else (void)*p;
    }
    return fault_code;
}

static int cpu_has_pku(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int yes = 0;
    while (f && !yes && fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5) && strstr(line, " pku")) yes = 1;
    if (f) fclose(f);
    return yes;
}

static void pkey_raw(void)
{
    int k = pkey_alloc(0, 0);
    CHECKF(k > 0, "pkey_alloc: %s", strerror(errno));
    if (k <= 0) return;
    unsigned char *p = (unsigned char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK_EQ(pkey_mprotect(p, 4096, PROT_READ | PROT_WRITE, k), 0);
    CHECK_EQ(try_access(p, 1), 0);
    CHECK_EQ(pkey_set(k, PKEY_DISABLE_ACCESS), 0);
    CHECK_EQ(try_access(p, 0), SEGV_PKUERR);
    CHECK_EQ(pkey_set(k, PKEY_DISABLE_WRITE), 0);
    CHECK_EQ(try_access(p, 0), 0);
    CHECK_EQ(pkey_set(k, PKEY_DISABLE_WRITE), 0);
    CHECK_EQ(try_access(p, 1), SEGV_PKUERR);
    CHECK_EQ(pkey_set(k, 0), 0);
    CHECK_EQ(try_access(p, 1), 0);
    munmap(p, 4096);
    CHECK_EQ(pkey_free(k), 0);
}

static void shmheap_pkeys(void)
{
    shmheap *h;
    const char *name = t_uniq("pkey");
    int rc = shmheap_create(name, NULL, &h);
    CHECKF(rc == 0, "create: %s", shmheap_strerror(rc));
    if (rc) return;
    CHECK_EQ(shmheap_pkey_supported(), 1);
    unsigned char *p = (unsigned char *)shmheap_aligned_alloc(h, 4096, 4096);
    CHECK(p != NULL);
    int k = shmheap_pkey_alloc(0);
    CHECKF(k > 0, "shmheap_pkey_alloc: %s", shmheap_strerror(k));
    if (p && k > 0) {
        CHECK_EQ(shmheap_pkey_protect(h, p, 4096, k), 0);
        CHECK_EQ(try_access(p, 1), 0);
        CHECK_EQ(shmheap_pkey_set(k, 1), 0);
        CHECK_EQ(try_access(p, 0), SEGV_PKUERR);
        CHECK_EQ(shmheap_pkey_set(k, 2), 0);
        CHECK_EQ(try_access(p, 0), 0);
        CHECK_EQ(shmheap_pkey_set(k, 2), 0);
        CHECK_EQ(try_access(p, 1), SEGV_PKUERR);
        CHECK_EQ(shmheap_pkey_set(k, 0), 0);
        CHECK_EQ(try_access(p, 1), 0);
        CHECK_EQ(shmheap_pkey_protect(h, p, 4096, 0), 0); /* back to the default key */
        CHECK_EQ(shmheap_pkey_free(k), 0);
    }
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap_unlink(name, NULL), 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    const char *why = cpu_has_pku() ? NULL : "the guest CPU has no pku";
    TEST_UNLESS(why, pkey_raw);
    TEST_UNLESS(why, shmheap_pkeys);
    return T_DONE();
}
