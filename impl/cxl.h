/* SPDX-License-Identifier: MIT */
/* impl/cxl.h - resolve a CXL region name to its device-DAX character device through libcxl.
 * Internal; compiled only when SHMHEAP_WITH_CXL is defined (link -lcxl; Debian: libcxl-dev).
 *
 * libcxl (ndctl v76) finds the region and says where it lives in host physical memory; it has
 * no region-to-DAX lookup of its own, so the last step reads sysfs, the way the kernel links them:
 *   - a pmem region (cxl create-region -t pmem) becomes an nvdimm region with the same resource
 *     address, /sys/bus/nd/devices/regionM; `ndctl create-namespace -m devdax` gives it an
 *     nd_dax device whose child is the device-DAX device: .../regionM/daxM.N/daxM.N.
 *   - a ram region (kernels from 6.3) carries dax_regionN directly: .../regionN/dax_regionN/daxN.M.
 * Tested in the VM tier (tests/vm/test_cxl.c) on qemu 7.2's CXL type-3 device. */
#ifndef RCP__CXL_H
#define RCP__CXL_H
#include <stddef.h>

/* region: "region0" (the part after "cxl:"). On success writes "/dev/daxX.Y" into out and
 * returns 0. Errors: -ENOENT no such region, -ENODEV region has no DAX device, other -errno. */
static int rcp__cxl_resolve(const char *region, char *out, size_t outlen);

#ifdef SHMHEAP_WITH_CXL
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cxl/libcxl.h>

/* A device-DAX device directly inside dir: a "daxX.Y" subdirectory with a "dev" file. Writes
 * "/dev/daxX.Y". */
static inline int rcp__cxl_dax_in(const char *dir, char *out, size_t outlen)
{
    DIR *d = opendir(dir);
    if (!d) return -errno;
    struct dirent *e;
    int rc = -ENODEV;
    while (rc && (e = readdir(d))) {
        unsigned a, b;
        char p[512];
        if (sscanf(e->d_name, "dax%u.%u", &a, &b) != 2) continue;
        if (snprintf(p, sizeof p, "%s/%s/dev", dir, e->d_name) >= (int)sizeof p) continue;
        if (access(p, F_OK) == 0)
            rc = snprintf(out, outlen, "/dev/%s", e->d_name) < (int)outlen ? 0 : -ENAMETOOLONG;
    }
    closedir(d);
    return rc;
}

/* The device-DAX device of the nvdimm region that covers the same physical range. */
static inline int rcp__cxl_pmem_dax(unsigned long long resource, char *out, size_t outlen)
{
    const char *bus = "/sys/bus/nd/devices";
    DIR *d = opendir(bus);
    if (!d) return -ENODEV; /* libnvdimm not loaded: no nvdimm regions at all */
    struct dirent *e;
    int rc = -ENODEV;
    while (rc == -ENODEV && (e = readdir(d))) {
        unsigned n;
        char p[512];
        unsigned long long res = 0;
        if (sscanf(e->d_name, "region%u", &n) != 1) continue;
        if (snprintf(p, sizeof p, "%s/%s/resource", bus, e->d_name) >= (int)sizeof p) continue;
        FILE *f = fopen(p, "r");
        if (!f) continue;
        int ok = fscanf(f, "%llx", &res) == 1;
        fclose(f);
        if (!ok || res != resource) continue;
        /* the nd_dax devices of this region; the one with a device-DAX child is in use */
        if (snprintf(p, sizeof p, "%s/%s", bus, e->d_name) >= (int)sizeof p) continue;
        DIR *r = opendir(p);
        if (!r) continue;
        struct dirent *x;
        while (rc == -ENODEV && (x = readdir(r))) {
            unsigned a, b;
            char q[768];
            if (sscanf(x->d_name, "dax%u.%u", &a, &b) != 2) continue;
            if (snprintf(q, sizeof q, "%s/%s", p, x->d_name) >= (int)sizeof q) continue;
            rc = rcp__cxl_dax_in(q, out, outlen);
            if (rc != -ENAMETOOLONG && rc != 0) rc = -ENODEV;
        }
        closedir(r);
    }
    closedir(d);
    return rc;
}

static inline int rcp__cxl_resolve(const char *region, char *out, size_t outlen)
{
    struct cxl_ctx *ctx;
    struct cxl_bus *bus;
    int rc = cxl_new(&ctx);
    if (rc) return rc < 0 ? rc : -rc;
    struct cxl_region *found = NULL;
    cxl_bus_foreach(ctx, bus) {
        struct cxl_port *root = cxl_bus_get_port(bus);
        struct cxl_decoder *dec;
        cxl_decoder_foreach(root, dec) {
            struct cxl_region *r;
            cxl_region_foreach(dec, r)
                if (!found && strcmp(cxl_region_get_devname(r), region) == 0) found = r;
        }
    }
    if (!found) rc = -ENOENT;
    else if (!cxl_region_is_enabled(found)) rc = -ENODEV;
    else {
        char dir[256];
        int id = cxl_region_get_id(found);
        rc = -ENODEV;
        int n = snprintf(dir, sizeof dir, "/sys/bus/cxl/devices/%s/dax_region%d", region, id);
        if (n < (int)sizeof dir) rc = rcp__cxl_dax_in(dir, out, outlen);
        if (rc && rc != -ENAMETOOLONG)
            rc = rcp__cxl_pmem_dax(cxl_region_get_resource(found), out, outlen);
    }
    cxl_unref(ctx);
    return rc;
}

#else /* !SHMHEAP_WITH_CXL */
#include <errno.h>
static inline int rcp__cxl_resolve(const char *region, char *out, size_t outlen)
{
    (void)region; (void)out; (void)outlen;
    return -ENOSYS;
}
#endif
#endif
