// VM
/* tests/vm/test_hugetlb.c - shmheap on a file in hugetlbfs (2 MiB pages), which the guest can
 * offer (the hosts running the host tier may have no huge pages reserved): create grows the file
 * with ftruncate to whole huge pages, a second process opens it by path at the same address and
 * walks and extends a pointer-linked list, unlink removes the file.
 *   test_hugetlb DIR     (DIR: a hugetlbfs mount) */
#include "vmt.h"
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "vmt_list.h"
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#define HUGETLBFS_MAGIC_ 0x958458f6
#define NODES 5000

static char path[256];

static long huge_free(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "HugePages_Free: %ld", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

static void hugetlb_heap(void)
{
    long free0 = huge_free();
    shmheap *h;
    shmheap_opts o = {.size = 16u << 20};
    int rc = shmheap_create(path, &o, &h);
    CHECKF(rc == 0, "shmheap_create(%s): %s", path, shmheap_strerror(rc));
    if (rc) return;
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_size, 16 << 20);
    printf("# heap in %s at %p, %zu bytes\n", path, shmheap_base(h), shmheap_size(h));
    CHECK_EQ(vmt_list_make(h, NODES), 0);
    CHECKF(huge_free() < free0, "HugePages_Free %ld -> %ld: the heap is not on huge pages", free0, huge_free());
    shmheap *h2;
    CHECK_EQ(shmheap_create(path, NULL, &h2), SHMHEAP_E_EXISTS); /* a file is never re-formatted */
    pid_t pid = fork();
    if (pid == 0) {
        shmheap *c;
        long n = 0;
        if (shmheap_open(path, NULL, &c)) _exit(2);
        /* in the child the heap is still mapped from the fork: the same handle comes back */
        if (vmt_list_walk(c, &n) != (long long)NODES * (NODES - 1) / 2 || n != NODES) _exit(3);
        struct node *x = (struct node *)shmheap_malloc(c, sizeof *x);
        if (!x) _exit(4);
        x->v = 1000000;
        x->next = (struct node *)shmheap_root_get(c, "list");
        shmheap_root_set(c, "list", x);
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child status %d", ws);
    CHECK_EQ(shmheap_close(h), 0);
    /* a fresh process (exec'd, nothing inherited) opens it by path */
    pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_hugetlb", "--walk", path, (char *)NULL);
        _exit(5);
    }
    waitpid(pid, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "exec'd walker status %d", ws);
    CHECK_EQ(shmheap_unlink(path, NULL), 0);
    CHECK(stat(path, &st) != 0 && errno == ENOENT);
}

static int walker(const char *p)
{
    shmheap *h;
    long n = 0;
    if (shmheap_open(p, NULL, &h)) return 2;
    if (vmt_list_walk(h, &n) != (long long)NODES * (NODES - 1) / 2 + 1000000 || n != NODES + 1) return 3;
    if (shmheap_check(h, NULL)) return 4;
    return shmheap_close(h) ? 5 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "--walk")) return walker(argv[2]);
    struct statfs sf;
    if (argc != 2 || statfs(argv[1], &sf) || sf.f_type != HUGETLBFS_MAGIC_) {
        printf("FAIL hugetlb: usage: %s HUGETLBFS_DIR\n", argv[0]);
        return 1;
    }
    snprintf(path, sizeof path, "%s/heap-%d", argv[1], (int)getpid());
    TEST(hugetlb_heap);
    return T_DONE();
}
