/* tests/vm/ivshmem.h - the guests' ivshmem device (qemu's ivshmem-plain, PCI 1af4:1110) by name,
 * for the VM tier's pod tests and benchmarks. Two guests given the same backing file share its
 * BAR 2: the stand-in for one CXL 3.0 device shared by the hosts of a pod. No verbs, no test
 * harness: bench tools include it too.
 *   vmt_ivshmem_path(buf, n)      the BAR's sysfs file (/sys/bus/pci/devices/ADDR/resource2),
 *                                 the device enabled first; -ENODEV when the guest has none
 *   vmt_pod_device(arg, buf, n)   a device name as the programs take it: "ivshmem" is the
 *                                 BAR's file (the name a pod opens), anything else is itself
 *   vmt_ivshmem_map(path, &size)  the whole BAR mapped shared (its size from the sysfs file),
 *                                 NULL with errno set on failure */
#ifndef VMT_IVSHMEM_H
#define VMT_IVSHMEM_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* the first line of a small sysfs file into buf; 0, or -errno */
static inline int vmt__sysfs_read(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t r = read(fd, buf, n - 1);
    int e = errno;
    close(fd);
    if (r < 0) return -e;
    buf[r] = 0;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

static inline int vmt_ivshmem_path(char *buf, size_t n)
{
    DIR *d = opendir("/sys/bus/pci/devices");
    if (!d) return -errno;
    struct dirent *e;
    int rc = -ENODEV;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512], v[32], dv[32];
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/vendor", e->d_name);
        if (vmt__sysfs_read(p, v, sizeof v) || strcmp(v, "0x1af4")) continue;
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/device", e->d_name);
        if (vmt__sysfs_read(p, dv, sizeof dv) || strcmp(dv, "0x1110")) continue;
        /* enabled, so that the BAR decodes (writing 1 again is harmless) */
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/enable", e->d_name);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "1", 1) != 1) { /* already enabled by another program: fine */ }
            close(fd);
        }
        if ((size_t)snprintf(buf, n, "/sys/bus/pci/devices/%s/resource2", e->d_name) >= n)
            rc = -ENAMETOOLONG;
        else
            rc = 0;
        break;
    }
    closedir(d);
    return rc;
}

static inline const char *vmt_pod_device(const char *arg, char *buf, size_t n)
{
    if (strcmp(arg, "ivshmem")) return arg;
    return vmt_ivshmem_path(buf, n) ? NULL : buf;
}

static inline void *vmt_ivshmem_map(const char *path, size_t *size)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) || st.st_size <= 0) {
        int e = errno ? errno : ENODEV;
        close(fd);
        errno = e;
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        errno = e;
        return NULL;
    }
    *size = (size_t)st.st_size;
    return p;
}
#endif
