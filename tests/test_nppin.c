// VALGRIND
/* tests/test_nppin.c - nppin.h on the host tier, where there is no RDMA device: built with
 * NPPIN_NO_RDMA (as it is automatically without rdma-core's headers), every function compiles
 * and says "not supported", and every error code has its own explanation. The verbs paths are
 * tested for real in the VM tier (tests/vm/test_nppin.c). */
#define NPPIN_NO_RDMA 1
#define NPPIN_IMPLEMENTATION
#include "../nppin.h"
#include "t.h"

static void every_function_says_notsup(void)
{
    nppin_ctx *ctx = (nppin_ctx *)1;
    nppin_region *rg = (nppin_region *)1;
    nppin_peer *p = (nppin_peer *)1;
    nppin_remote *rm = (nppin_remote *)1;
    nppin_chan ch = {0, 0, 0};
    nppin_stats st;
    nppin_target t = {0, 0, NULL};
    unsigned char h[NPPIN_HANDLE_SIZE] = {0};
    char buf[64];
    CHECK_EQ(nppin_create(NULL, NULL, &ctx), NPPIN_E_NOTSUP);
    CHECK(ctx == NULL);
    CHECK_EQ(nppin_reg(ctx, buf, sizeof buf, &rg), NPPIN_E_NOTSUP);
    CHECK(rg == NULL);
    CHECK_EQ(nppin_dereg(rg), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_post_send(ctx, NULL, 1, buf, 8, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_post_recv(ctx, NULL, 1, buf, 8), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_post_write(ctx, NULL, 1, buf, 8, &t, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_post_read(ctx, NULL, 1, buf, 8, &t, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_poll(ctx, NULL, NULL, 1), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_complete(ctx, NULL), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_xfer(ctx, NULL, NULL, NPPIN_OP_READ, buf, 8, &t, 0, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_invalidate(ctx, buf, 8), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_sync(ctx, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_peer_create(ctx, &ch, &p), NPPIN_E_NOTSUP);
    CHECK(p == NULL);
    CHECK_EQ(nppin_peer_progress(p, 0), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_peer_destroy(p), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_region_export(rg, h), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_remote_open(p, h, &rm), NPPIN_E_NOTSUP);
    CHECK(rm == NULL);
    CHECK_EQ(nppin_remote_close(rm), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_chan_verbs_create(NULL, NULL, NULL, &ch), NPPIN_E_NOTSUP);
    nppin_chan_verbs_destroy(&ch);
    CHECK_EQ(nppin_stats_get(ctx, &st), NPPIN_E_NOTSUP);
    CHECK_EQ(nppin_destroy(ctx), NPPIN_E_NOTSUP);
}

static void every_code_explained(void)
{
    static const int codes[] = {NPPIN_E_NOTSUP, NPPIN_E_NOTREG, NPPIN_E_OVERLAP, NPPIN_E_TOOBIG,
                                NPPIN_E_BUSY, NPPIN_E_PINLIMIT, NPPIN_E_PROTO, NPPIN_E_HANDLE,
                                NPPIN_E_PEERDEAD, NPPIN_E_INFLIGHT, NPPIN_E_NOPEERS};
    const char *unknown = nppin_strerror(-9999);
    for (unsigned i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = nppin_strerror(codes[i]);
        CHECKF(s && strlen(s) > 10 && strcmp(s, unknown), "code %d: %s", codes[i], s);
        for (unsigned j = 0; j < i; j++)
            CHECKF(strcmp(s, nppin_strerror(codes[j])), "codes %d and %d share a text", codes[i], codes[j]);
    }
    CHECK(strstr(nppin_strerror(NPPIN_E_PINLIMIT), "RLIMIT_MEMLOCK") != NULL);
    CHECK(strcmp(nppin_strerror(-ENOMEM), strerror(ENOMEM)) == 0);
    CHECK(strcmp(nppin_strerror(0), "success") == 0);
    char buf[200];
    CHECK(strcmp(nppin_explain(NULL, NPPIN_E_TOOBIG, buf, sizeof buf), nppin_strerror(NPPIN_E_TOOBIG)) == 0);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(every_function_says_notsup);
    RUN(every_code_explained);
    return T_DONE();
}
