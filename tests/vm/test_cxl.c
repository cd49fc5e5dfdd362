// VM
// LIBS: -lcxl
/* tests/vm/test_cxl.c - the "cxl:" name path on qemu's emulated CXL type-3 device: libcxl finds
 * the memdev and region, impl/cxl.h resolves a region to its /dev/daxX.Y, the device maps, and
 * shmheap resolves "cxl:" names through it. Creates the region and namespace itself (cxl and
 * ndctl commands), checking resolution before and after each step. qemu 7.2's device does not
 * keep data written through the DAX mapping, so data is reported, not required. */
#define SHMHEAP_WITH_CXL 1
#include "vmt.h"
#include "impl/cxl.h"
#include <sys/stat.h>
#include <sys/sysmacros.h>
/* shmheap's SHMHEAP_WITH_CXL path is checked for warnings by `make vm-compile-check`; here it
 * only has to run. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"

static char dax[64];

/* Run a shell command; if it fails, its output is shown with "# " in front. */
static int sh(const char *cmd)
{
    char full[512];
    snprintf(full, sizeof full, "(%s) >/tmp/cmd.log 2>&1 || { rc=$?; sed 's/^/# /' /tmp/cmd.log; exit $rc; }", cmd);
    fflush(stdout);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cxl_enumerate(void)
{
    struct cxl_ctx *ctx;
    CHECK_EQ(cxl_new(&ctx), 0);
    int memdevs = 0, root_decoders = 0;
    for (int tries = 0; tries < 100 && !memdevs; tries++) { /* cxl_mem probes asynchronously */
        struct cxl_memdev *m;
        if (tries) { cxl_unref(ctx); usleep(100000); CHECK_EQ(cxl_new(&ctx), 0); }
        cxl_memdev_foreach(ctx, m) memdevs++;
    }
    struct cxl_bus *bus;
    cxl_bus_foreach(ctx, bus) {
        struct cxl_decoder *d;
        cxl_decoder_foreach(cxl_bus_get_port(bus), d) root_decoders++;
    }
    printf("# libcxl: %d memdev(s), %d root decoder(s)\n", memdevs, root_decoders);
    CHECK(memdevs >= 1);
    CHECK(root_decoders >= 1);
    cxl_unref(ctx);
}

/* What rcp__cxl_resolve says of a region name, into a buffer that is large enough. */
static int resolve(const char *region)
{
    char out[64];
    return rcp__cxl_resolve(region, out, sizeof out);
}

static void cxl_resolve_before_region(void)
{
    CHECK_EQ(resolve("region0"), -ENOENT);
    CHECK_EQ(resolve("nonsense"), -ENOENT);
}

static void cxl_create_region(void) { CHECK_EQ(sh("cxl create-region -m -d decoder0.0 -t pmem mem0"), 0); }

static void cxl_resolve_region_without_dax(void)
{
    CHECK_EQ(resolve("region0"), -ENODEV);
    CHECK_EQ(resolve("region9"), -ENOENT);
}

static void cxl_create_devdax(void) { CHECK_EQ(sh("ndctl create-namespace -m devdax -r region0"), 0); }

static void cxl_resolve_to_dax(void)
{
    int rc = rcp__cxl_resolve("region0", dax, sizeof dax);
    CHECKF(rc == 0, "rcp__cxl_resolve(region0): %s", strerror(-rc));
    unsigned a, b;
    CHECKF(sscanf(dax, "/dev/dax%u.%u", &a, &b) == 2, "resolved to '%s'", dax);
    struct stat st;
    CHECKF(stat(dax, &st) == 0 && S_ISCHR(st.st_mode), "%s is not a character device", dax);
    char small[8];
    CHECK_EQ(rcp__cxl_resolve("region0", small, sizeof small), -ENAMETOOLONG);
    printf("# cxl:region0 -> %s\n", dax);
}

static void cxl_dax_mmap(void)
{
    int fd = open(dax, O_RDWR);
    CHECKF(fd >= 0, "open %s: %s", dax, strerror(errno));
    if (fd < 0) return;
    struct stat st;
    fstat(fd, &st);
    char p[96];
    unsigned long long size = 0;
    snprintf(p, sizeof p, "/sys/dev/char/%u:%u/size", major(st.st_rdev), minor(st.st_rdev));
    FILE *f = fopen(p, "r");
    CHECK(f && fscanf(f, "%llu", &size) == 1);
    if (f) fclose(f);
    CHECKF(size >= (2u << 20) && size % (2u << 20) == 0, "size %llu", size);
    unsigned char *m = (unsigned char *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECKF(m != MAP_FAILED, "mmap %s (%llu bytes): %s", dax, size, strerror(errno));
    if (m != MAP_FAILED) {
        memcpy(m + size - 64, "rpcool", 7); /* touches the last page: the whole range is mapped */
        msync(m, size, MS_SYNC);
        printf("# %s: %llu bytes mapped; data written %s\n", dax, size,
               memcmp(m + size - 64, "rpcool", 7) == 0 ? "reads back" : "does not read back (qemu 7.2)");
        munmap(m, size);
    }
    /* device DAX refuses mappings that break its 2 MiB alignment */
    void *bad = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 4096);
    CHECK(bad == MAP_FAILED);
    close(fd);
}

static void shmheap_cxl_names(void)
{
    shmheap *h = NULL;
    shmheap_opts o = {.overwrite = 1};
    CHECK_EQ(shmheap_open("cxl:region9", NULL, &h), SHMHEAP_E_NOTFOUND);
    /* region0 resolves to the DAX device: create reaches the device (what happens next depends
     * on whether the emulated device keeps data) */
    int rc = shmheap_create("cxl:region0", &o, &h);
    printf("# shmheap_create(\"cxl:region0\"): %s\n", rc ? shmheap_strerror(rc) : "ok");
    CHECKF(rc != SHMHEAP_E_NOTFOUND && rc != SHMHEAP_E_NOTSUP && rc != SHMHEAP_E_BADNAME,
           "cxl:region0 did not resolve: %s", shmheap_strerror(rc));
    if (rc == 0) {
        printf("# heap %s at %p, %zu bytes\n", shmheap_name(h), shmheap_base(h), shmheap_size(h));
        CHECK_EQ(shmheap_close(h), 0);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    TEST(cxl_enumerate);
    TEST(cxl_resolve_before_region);
    TEST(cxl_create_region);
    TEST(cxl_resolve_region_without_dax);
    TEST(cxl_create_devdax);
    TEST(cxl_resolve_to_dax);
    if (dax[0]) TEST(cxl_dax_mmap);
    TEST(shmheap_cxl_names);
    return T_DONE();
}
