// LIBS: -libverbs
/* examples/nppin_reg.c - register 1 GiB for RDMA without pinning it: nppin_reg returns at once,
 * and chunks are pinned only when a work request or a peer needs them (here: none). Needs an
 * RDMA device (Soft-RoCE will do: `rdma link add rxe0 type rxe netdev eth0`). */
#define NPPIN_IMPLEMENTATION
#include "nppin.h"
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

int main(void)
{
#ifdef NPPIN_NO_RDMA /* built without rdma-core's headers */
    printf("nppin: %s\n", nppin_strerror(NPPIN_E_NOTSUP));
    return 0;
#else
    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (!devs || n == 0) {
        printf("no RDMA device here (try Soft-RoCE); nothing to show\n");
        return 0;
    }
    struct ibv_context *vctx = ibv_open_device(devs[0]);
    struct ibv_pd *pd = vctx ? ibv_alloc_pd(vctx) : NULL;
    if (!pd) {
        printf("cannot open %s\n", ibv_get_device_name(devs[0]));
        return 1;
    }
    nppin_ctx *np;
    nppin_opts opts = {.budget = 64 << 20}; /* at most 64 MiB pinned at any time */
    int rc = nppin_create(pd, &opts, &np);
    size_t len = (size_t)1 << 30;
    char *big = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct timespec t0, t1;
    nppin_region *rg = NULL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!rc) rc = nppin_reg(np, big, len, &rg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
        printf("nppin: %s\n", nppin_strerror(rc));
        return 1;
    }
    nppin_stats st;
    nppin_stats_get(np, &st);
    printf("registered 1 GiB in %.3f ms on %s: %zu bytes pinned, budget %zu, stale-mapping "
           "detection %s\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
           ibv_get_device_name(devs[0]), st.pinned, st.budget, st.stale_detect ? "on" : "off");
    nppin_dereg(rg);
    nppin_destroy(np);
    munmap(big, len);
    ibv_dealloc_pd(pd);
    ibv_close_device(vctx);
    ibv_free_device_list(devs);
    return 0;
#endif
}
