// VM
/* tests/vm/test_dax.c - shmheap on a device-DAX character device that keeps its data: an NVDIMM
 * that qemu backs with a host file, turned into a devdax namespace with ndctl (qemu 7.2's CXL
 * type-3 memory does not keep data, so shmheap's DAX path is tested for data here; the same code
 * serves /dev/daxX.Y of a CXL region). Checks: the whole device becomes a heap at a 2 MiB aligned
 * address; a second process opens it at that address and walks and extends a pointer-linked list;
 * processes SIGKILLed while allocating leave it consistent; create without overwrite refuses a
 * device that holds a heap; a size that is not whole 2 MiB pages is rounded; unlink keeps the
 * device and only forgets the pod entry.
 *   test_dax /dev/daxX.Y */
#include "vmt.h"
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "vmt_list.h"
#include <sys/stat.h>
#include <sys/wait.h>

#define NODES 2000
#define TWO_MB (2u << 20)

static const char *dev;
static size_t dev_size;

static size_t sysfs_size(const char *d)
{
    char p[128];
    unsigned long long n = 0;
    snprintf(p, sizeof p, "/sys/bus/dax/devices/%s/size", strrchr(d, '/') + 1);
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%llu", &n) != 1) n = 0;
        fclose(f);
    }
    return (size_t)n;
}

static void dax_create_whole_device(void)
{
    shmheap *h;
    shmheap_opts o = {.overwrite = 1};
    int rc = shmheap_create(dev, &o, &h);
    CHECKF(rc == 0, "shmheap_create(%s): %s", dev, shmheap_strerror(rc));
    if (rc) return;
    printf("# heap on %s at %p, %zu bytes (device %zu)\n", dev, shmheap_base(h), shmheap_size(h), dev_size);
    CHECK_EQ((uintptr_t)shmheap_base(h) % TWO_MB, 0);
    CHECK(shmheap_size(h) <= dev_size && shmheap_size(h) + TWO_MB > dev_size);
    CHECK_EQ(shmheap_size(h) % TWO_MB, 0);
    CHECK_EQ(vmt_list_make(h, NODES), 0);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    CHECK_EQ(shmheap_close(h), 0);
}

static void dax_second_process(void)
{
    int p[2];
    if (pipe(p)) { CHECK(0); return; }
    pid_t pid = fork();
    if (pid == 0) { /* open at the recorded address, walk, extend */
        shmheap *h;
        char why[160] = "";
        long n = 0;
        if (shmheap_open(dev, NULL, &h)) snprintf(why, sizeof why, "child: open failed");
        else if (vmt_list_walk(h, &n) != (long long)NODES * (NODES - 1) / 2 || n != NODES)
            snprintf(why, sizeof why, "child: list has %ld nodes, wrong sum", n);
        else {
            struct node **head = (struct node **)shmheap_malloc(h, sizeof *head);
            struct node *first = (struct node *)shmheap_root_get(h, "list");
            for (int i = 0; i < 100 && !why[0]; i++) {
                struct node *x = (struct node *)shmheap_malloc(h, sizeof *x);
                if (!x) { snprintf(why, sizeof why, "child: malloc failed"); break; }
                x->v = 1000000;
                x->next = first;
                first = x;
            }
            if (!why[0] && shmheap_root_set(h, "list", first)) snprintf(why, sizeof why, "child: root_set");
            shmheap_free(h, head);
            shmheap_close(h);
        }
        (void)!write(p[1], why, strlen(why));
        _exit(0);
    }
    close(p[1]);
    char why[160] = "";
    (void)!read(p[0], why, sizeof why - 1);
    close(p[0]);
    waitpid(pid, NULL, 0);
    CHECKF(!why[0], "%s", why);
    shmheap *h;
    int rc = shmheap_open(dev, NULL, &h);
    CHECKF(rc == 0, "reopen: %s", shmheap_strerror(rc));
    if (rc) return;
    long n = 0;
    CHECK_EQ(vmt_list_walk(h, &n), (long long)NODES * (NODES - 1) / 2 + 100LL * 1000000);
    CHECK_EQ(n, NODES + 100);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    CHECK_EQ(shmheap_close(h), 0);
}

/* children allocate and free at random until killed; the heap stays consistent */
static void dax_kill_rounds(void)
{
    shmheap *h;
    int rc = shmheap_open(dev, NULL, &h);
    CHECKF(rc == 0, "open: %s", shmheap_strerror(rc));
    if (rc) return;
    for (int round = 0; round < 20; round++) {
        pid_t kids[3];
        for (int k = 0; k < 3; k++) {
            kids[k] = fork();
            if (kids[k] == 0) {
                uint64_t rng = (uint64_t)getpid() * 2654435761u + (uint64_t)round;
                void *held[64] = {NULL};
                for (;;) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    unsigned i = (unsigned)(rng >> 33) % 64;
                    if (held[i]) { shmheap_free(h, held[i]); held[i] = NULL; }
                    else held[i] = shmheap_malloc(h, 16 + (size_t)(rng >> 40) % 70000);
                }
            }
        }
        usleep(20000 + (useconds_t)(round * 3000));
        for (int k = 0; k < 3; k++) kill(kids[k], SIGKILL);
        for (int k = 0; k < 3; k++) waitpid(kids[k], NULL, 0);
        shmheap_stats st;
        int c = shmheap_check(h, &st);
        CHECKF(c == 0, "round %d: %s %s", round, shmheap_strerror(c), st.problem);
        if (c) break;
    }
    long n = 0;
    CHECK_EQ(vmt_list_walk(h, &n), (long long)NODES * (NODES - 1) / 2 + 100LL * 1000000);
    void *p = shmheap_malloc(h, 100000);
    CHECK(p != NULL);
    shmheap_free(h, p);
    CHECK_EQ(shmheap_close(h), 0);
}

static void dax_bad_input(void)
{
    shmheap *h;
    /* a device that holds a heap is not formatted again without overwrite */
    CHECK_EQ(shmheap_create(dev, NULL, &h), SHMHEAP_E_EXISTS);
    /* a size that is not whole 2 MiB pages is rounded up */
    shmheap_opts o = {.size = 3u << 20, .overwrite = 1};
    int rc = shmheap_create(dev, &o, &h);
    CHECKF(rc == 0, "create 3 MiB: %s", shmheap_strerror(rc));
    if (!rc) {
        CHECK_EQ(shmheap_size(h), 4u << 20);
        CHECK(shmheap_malloc(h, 8u << 20) == NULL); /* the heap is full, the device is not */
        CHECK_EQ(shmheap_close(h), 0);
    }
    /* more than the device holds */
    o.size = dev_size + TWO_MB;
    CHECK(shmheap_create(dev, &o, &h) < 0);
    /* unlink leaves the device (and its heap) and forgets the pod entry */
    CHECK_EQ(shmheap_unlink(dev, NULL), 0);
    struct stat st;
    CHECK_EQ(stat(dev, &st), 0);
    rc = shmheap_open(dev, NULL, &h);
    CHECKF(rc == 0, "open after unlink: %s", shmheap_strerror(rc));
    if (!rc) {
        CHECK_EQ(shmheap_size(h), 4u << 20);
        CHECK_EQ(shmheap_close(h), 0);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2 || strncmp(argv[1], "/dev/dax", 8)) {
        printf("FAIL dax: usage: %s /dev/daxX.Y\n", argv[0]);
        return 1;
    }
    dev = argv[1];
    dev_size = sysfs_size(dev);
    if (!dev_size) {
        printf("FAIL dax: no size for %s in /sys/bus/dax/devices\n", dev);
        return 1;
    }
    TEST(dax_create_whole_device);
    TEST(dax_second_process);
    TEST(dax_kill_rounds);
    TEST(dax_bad_input);
    return T_DONE();
}
