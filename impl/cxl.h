/* SPDX-License-Identifier: MIT */
/* impl/cxl.h - resolve a CXL region name to its device-DAX character device through libcxl.
 * Internal; compiled only when SHMHEAP_WITH_CXL is defined (link -lcxl). */
#ifndef RCP__CXL_H
#define RCP__CXL_H
#include <stddef.h>

/* region: "region0" (the part after "cxl:"). On success writes "/dev/daxX.Y" into out and
 * returns 0. Errors: -ENOENT no such region, -ENODEV region has no DAX device, other -errno. */
static int rcp__cxl_resolve(const char *region, char *out, size_t outlen);

/* TODO(issue 3): implementation through libcxl lands with the VM tier. */
#include <errno.h>
static int rcp__cxl_resolve(const char *region, char *out, size_t outlen)
{
    (void)region; (void)out; (void)outlen;
    return -ENOSYS;
}
#endif
