// VM
// LIBS: -libverbs
/* tests/vm/test_nppin_twohost.c - nppin.h between two guests ("hosts"), each with its own rxe:
 *   test_nppin_twohost a PEER_IP   owns a 256 MiB region under a 16 MiB budget (listens)
 *   test_nppin_twohost b PEER_IP   reads and writes all of it at random, data checked, then
 *                                  sees new contents after the owner remaps memory under a lease
 * Endpoints and commands go over TCP; leases over nppin's verbs channel between the hosts. */
#include "nppt.h"

#define PORT 18611
#define MiB ((size_t)1 << 20)
#define REGION (256 * MiB)
#define SLOTS 256                 /* 1 MiB apart */
#define SLOT_BYTES 2048u

static nppt_side B;
static int sock = -1;
static unsigned char *lmem;
static nppin_region *lrg;
static nppin_remote *rem;
static uint64_t rbase;

static int rio(int op, size_t len, uint64_t off)
{
    nppin_target t = {.addr = rbase + off, .remote = rem};
    int rc = op == NPPIN_OP_READ ? nppin_post_read(B.np, B.dqp, 5, lmem, len, &t, 0)
                                 : nppin_post_write(B.np, B.dqp, 5, lmem, len, &t, 0);
    struct ibv_wc wc;
    if (!rc) rc = nppt_wait(B.np, B.dcq, 20 * VMT_SEC, &wc);
    return rc;
}

static void twohost_random_rw(void)
{
    static unsigned seeds[SLOTS];
    uint64_t rng = 4242;
    int ops = 0;
    for (int i = 0; i < 400; i++, ops++) {
        unsigned slot = (unsigned)(t_rng(&rng) % SLOTS);
        uint64_t off = (uint64_t)slot * MiB + (slot * 131u) % 8192;
        int rc;
        if (t_rng(&rng) % 2) {
            vmt_fill(lmem, SLOT_BYTES, 5000 + (unsigned)i);
            rc = rio(NPPIN_OP_WRITE, SLOT_BYTES, off);
            if (!rc) seeds[slot] = 5000 + (unsigned)i;
        } else {
            memset(lmem, 0xee, SLOT_BYTES);
            rc = rio(NPPIN_OP_READ, SLOT_BYTES, off);
            int ok = 1;
            if (!rc && seeds[slot]) ok = vmt_check(lmem, SLOT_BYTES, seeds[slot]) < 0;
            else if (!rc) for (unsigned k = 0; k < SLOT_BYTES; k++) ok &= lmem[k] == 0;
            if (!ok) { CHECKF(0, "read %d of slot %u: wrong data", i, slot); break; }
        }
        if (rc) { CHECKF(0, "op %d: %s", i, nppin_strerror(rc)); break; }
    }
    nppt_rep r;
    CHECK_EQ(nppt_call(sock, B.peer_np, C_STATS, 0, 0, 0, &r), 0);
    printf("# %d ops across hosts; owner: pinned peak %llu of %llu, %llu evictions, %llu revokes\n",
           ops, (unsigned long long)r.v[1], (unsigned long long)r.v[2], (unsigned long long)r.v[3],
           (unsigned long long)r.v[7]);
    CHECK(r.v[1] <= r.v[2]);
    CHECK(r.v[3] > 0);
    CHECK_EQ(vmt_qp_state(B.dqp), IBV_QPS_RTS);
}

static void twohost_remap_seen(void)
{
    nppt_rep r;
    uint64_t off = 100 * MiB;
    CHECK_EQ(nppt_call(sock, B.peer_np, C_FILL, off, 2 * MiB, 61, &r), 0);
    CHECK_EQ(rio(NPPIN_OP_READ, 4096, off), 0); /* leased now */
    CHECK_EQ(nppt_call(sock, B.peer_np, C_UNMAP, off, 2 * MiB, 62, &r), 0);
    memset(lmem, 0, 2 * MiB);
    CHECK_EQ(rio(NPPIN_OP_READ, 2 * MiB, off), 0);
    CHECKF(vmt_check(lmem, 2 * MiB, 62) < 0, "after munmap+mmap on the owner, READ saw old data");
}

int main(int argc, char **argv)
{
    int is_a = vmt_guest_role(argc, argv, 3, "PEER_IP");
    if (is_a < 0) return 2;
    const char *step = "";
    char why[512] = "";
    if (is_a) {
        t_begin("nppin_twohost_owner");
        sock = vmt_tcp_peer(1, argv[2], PORT);
        nppin_opts o = {.chunk_size = 2 * MiB, .budget = 16 * MiB, .lease_ms = 3000};
        if (sock >= 0) CHECKF(nppt_owner_serve(sock, REGION, &o, why, sizeof why) == 0, "%s", why);
        t_end();
        return T_DONE();
    }
    t_begin("nppin_twohost_setup");
    int rc = -1;
    sock = vmt_tcp_peer(0, argv[2], PORT);
    if (sock >= 0) {
        nppin_opts o = {.chunk_size = 2 * MiB, .budget = 8 * MiB};
        rc = nppt_side_setup(sock, &o, &B, &step);
        CHECKF(rc == 0, "setup: %s: %s", step, nppin_strerror(rc));
    }
    lmem = (unsigned char *)mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    nppt_rep r;
    if (!rc) rc = nppin_reg(B.np, lmem, 4 * MiB, &lrg);
    if (!rc) rc = nppt_call(sock, B.peer_np, C_HANDLE, 0, 0, 0, &r);
    if (!rc) rc = nppin_remote_open(B.peer_np, (unsigned char *)r.v, &rem);
    if (!rc) rbase = nppin__get64((unsigned char *)r.v + 8);
    CHECKF(rc == 0, "%s", nppin_strerror(rc));
    t_end();
    if (!rc) {
        TEST(twohost_random_rw);
        TEST(twohost_remap_seen);
        nppt_cmd q = {C_QUIT, 0, 0, 0};
        vmt_write_all(sock, &q, sizeof q);
    }
    if (rem) nppin_remote_close(rem);
    if (lrg) nppin_dereg(lrg);
    if (B.np) nppt_side_free(&B);
    return T_DONE();
}
