// VM
// LIBS: -libverbs -pthread
/* tests/vm/test_krconn_compose.c - alock.h and nppin.h carried by krconn.h connections, on
 * Soft-RoCE (rxe0) in one guest (issues 16 and 12: "remote nodes / peers connect over krconn").
 *   alock_over_krconn   the table's node (this process) serves a krconn context; a local process
 *                       locks with CPU atomics, a remote process connects with krconn_connect,
 *                       learns the lock lines, heap key and data address from krconn_peer_data,
 *                       and locks through alock_krconn_link_create's alock_link (krconn_cas,
 *                       _faa, _read, _write + krconn_wait); its critical section READs and WRITEs
 *                       the counter through the same link. Both take lock 0 and add to a plain
 *                       counter: the final count is exact.
 *   nppin_over_krconn   an owner process exports an nppin region; this process connects to it
 *                       twice (KRCONN_CONNECT_NO_VIRTUAL): one connection's QP and CQ carry the
 *                       nppin peer channel (nppin_chan_verbs_create on krconn_qp), the other the
 *                       data; a READ of a chunk through a lease is checked byte for byte.
 *                       krconn caps rnr_retry at 6, where nppin.h asks for 7 on a channel that may
 *                       meet bursts of revocations; this test sends one lease request.
 * Children are forked before any krconn context exists in the process that forks. */
#define KRCONN_IMPLEMENTATION
#include "../../krconn.h"
#define ALOCK_IMPLEMENTATION
#include "../../alock.h"
#define NPPIN_IMPLEMENTATION
#include "../../nppin.h"
#include "vmt.h"

#define TMO 20000        /* ms: one RDMA operation or connect under TCG */
#define NLOCKS 4
#define BUDGET 4
#define LOCAL_ITERS 400  /* critical sections of the local process */
#define REMOTE_ITERS 100 /* critical sections of the remote process */
#define RDESC 8

/* ---------------------------------------------------------------- alock over krconn */

struct shared {
    uint64_t counter; /* +1 per critical section, plain loads and stores (CPU or RDMA) */
    uint64_t inside;  /* 1 while someone is inside */
    uint64_t violations;
    uint64_t pad[5];
};

/* what the table's node tells remote processes: its krconn connect data (32 bytes) */
struct home_data {
    uint64_t lines;
    uint64_t shared;
    uint32_t rkey;
    uint32_t nlocks;
    uint32_t budget;
    uint32_t pad;
};
_Static_assert(sizeof(struct home_data) <= KRCONN_DATA_MAX, "fits krconn's connect data");

static const char *heap_name;

static int local_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    shmheap *h = NULL;
    alock_table *t = NULL;
    int rc;
    if ((rc = shmheap_open(heap_name, NULL, &h))) VMT_FAILF("shmheap_open: %s", shmheap_strerror(rc));
    if ((rc = alock_table_open(h, "table", NULL, &t))) VMT_FAILF("alock_table_open: %s", alock_strerror(rc));
    struct shared *s = (struct shared *)shmheap_root_get(h, "shared");
    if (!s) VMT_FAILF("no root \"shared\"");
    VMT_TRY(vmt_expect_byte(fd, 'G', 60000));
    for (int i = 0; i < LOCAL_ITERS; i++) {
        alock_hold hd;
        if ((rc = alock_lock(t, 0, &hd)) < 0) VMT_FAILF("alock_lock %d: %s", i, alock_strerror(rc));
        if (s->inside) s->violations++;
        s->inside = 1;
        s->counter++;
        s->inside = 0;
        if ((rc = alock_unlock(&hd))) VMT_FAILF("alock_unlock %d: %s", i, alock_strerror(rc));
    }
out:
    if (t) alock_table_close(t);
    if (h) shmheap_close(h);
    return why[0] ? -1 : 0;
}

#define OFF(f) offsetof(struct shared, f)

static int remote_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    krconn_ctx *ctx = NULL;
    krconn *k = NULL;
    alock_link hl = {0};
    alock_remote *r = NULL;
    void *descs = NULL;
    krconn_mr dmr = {0};
    krconn_addr home;
    char buf[300];
    int rc;
    if ((rc = krconn_ctx_create(NULL, &ctx))) VMT_FAILF("krconn_ctx_create: %s", krconn_describe(rc, buf, sizeof buf));
    VMT_TRY(vmt_read_all(fd, &home, sizeof home, 60000));
    krconn_connect_opts co = {.timeout_ms = TMO};
    if ((rc = krconn_connect(ctx, &home, &co, &k))) VMT_FAILF("krconn_connect: %s", krconn_describe(rc, buf, sizeof buf));
    struct home_data hd;
    memcpy(&hd, krconn_peer_data(k), sizeof hd);
    if ((rc = alock_krconn_link_create(ctx, k, hd.rkey, TMO, &hl)))
        VMT_FAILF("alock_krconn_link_create: %s", krconn_strerror(rc));
    /* our descriptors: registered for remote read and write (no other remote process here) */
    if (posix_memalign(&descs, 4096, ALOCK_REMOTE_MEM(RDESC))) VMT_FAILF("memalign");
    memset(descs, 0, ALOCK_REMOTE_MEM(RDESC));
    if ((rc = krconn_reg(ctx, descs, ALOCK_REMOTE_MEM(RDESC), 0, &dmr))) VMT_FAILF("krconn_reg: %s", krconn_strerror(rc));
    alock_remote_opts o = {.id = 1, .lines_addr = hd.lines, .nlocks = hd.nlocks, .budget = hd.budget,
                           .home = hl, .descs = descs, .ndesc = RDESC};
    if ((rc = alock_remote_create(&o, &r))) VMT_FAILF("alock_remote_create: %s", alock_strerror(rc));
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_TRY(vmt_expect_byte(fd, 'G', 60000));
    uint64_t viol = 0;
    for (int i = 0; i < REMOTE_ITERS; i++) {
        alock_rhold h;
        uint64_t v, in, one = 1, zero = 0;
        if ((rc = alock_remote_lock(r, 0, &h))) VMT_FAILF("alock_remote_lock %d: %s", i, alock_strerror(rc));
        /* the critical section through the same link: READ-modify-WRITE of the counter */
        if ((rc = hl.read(hl.conn, hd.shared + OFF(inside), &in, 8))) VMT_FAILF("read: %s", krconn_strerror(rc));
        if (in) viol++;
        if ((rc = hl.write(hl.conn, hd.shared + OFF(inside), &one, 8))) VMT_FAILF("write: %s", krconn_strerror(rc));
        if ((rc = hl.read(hl.conn, hd.shared + OFF(counter), &v, 8))) VMT_FAILF("read: %s", krconn_strerror(rc));
        v++;
        if ((rc = hl.write(hl.conn, hd.shared + OFF(counter), &v, 8))) VMT_FAILF("write: %s", krconn_strerror(rc));
        if ((rc = hl.write(hl.conn, hd.shared + OFF(inside), &zero, 8))) VMT_FAILF("write: %s", krconn_strerror(rc));
        if ((rc = alock_remote_unlock(&h))) VMT_FAILF("alock_remote_unlock %d: %s", i, alock_strerror(rc));
    }
    if (viol) VMT_FAILF("%llu remote critical sections found someone inside", (unsigned long long)viol);
out:
    if (r) alock_remote_destroy(r);
    if (dmr.mr) krconn_dereg(&dmr);
    free(descs);
    alock_krconn_link_destroy(&hl);
    if (k) krconn_disconnect(k);
    if (ctx) krconn_ctx_destroy(ctx);
    return why[0] ? -1 : 0;
}

static void alock_over_krconn(void)
{
    shmheap *heap = NULL;
    alock_table *tab = NULL;
    krconn_ctx *ctx = NULL;
    krconn_mr hmr = {0};
    vmt_child lc, rc_;
    int lfd = -1, rfd = -1, lrun = 0, rrun = 0;
    char buf[300];
    heap_name = t_uniq("kcompose");
    shmheap_opts ho = {.size = 4 << 20};
    int rc = shmheap_create(heap_name, &ho, &heap);
    CHECKF(rc == 0, "shmheap_create: %s", shmheap_strerror(rc));
    if (rc) return;
    alock_table_opts ao = {.nlocks = NLOCKS, .budget = BUDGET, .check_ms = 5};
    rc = alock_table_create(heap, "table", &ao, &tab);
    CHECKF(rc == 0, "alock_table_create: %s", alock_strerror(rc));
    if (rc) goto done;
    struct shared *sh = (struct shared *)shmheap_calloc(heap, 1, sizeof *sh);
    CHECK(sh != NULL);
    if (!sh) goto done;
    shmheap_root_set(heap, "shared", sh);
    /* children first: no krconn context (and its thread) exists yet in this process */
    if (vmt_spawn_sock(local_role, NULL, &lc, &lfd)) goto done;
    lrun = 1;
    if (vmt_spawn_sock(remote_role, NULL, &rc_, &rfd)) goto done;
    rrun = 1;
    rc = krconn_ctx_create(NULL, &ctx);
    CHECKF(rc == 0, "krconn_ctx_create: %s", krconn_describe(rc, buf, sizeof buf));
    if (rc) goto done;
    rc = krconn_reg(ctx, shmheap_base(heap), shmheap_size(heap), 0, &hmr);
    CHECKF(rc == 0, "krconn_reg of the heap: %s", krconn_describe(rc, buf, sizeof buf));
    if (rc) goto done;
    void *lines;
    size_t llen;
    alock_table_lines(tab, &lines, &llen);
    struct home_data hd = {.lines = (uint64_t)(uintptr_t)lines, .shared = (uint64_t)(uintptr_t)sh,
                           .rkey = hmr.rkey, .nlocks = NLOCKS, .budget = BUDGET};
    CHECK_EQ(krconn_ctx_set_data(ctx, &hd, sizeof hd), 0);
    krconn_addr me;
    CHECK_EQ(krconn_ctx_addr(ctx, &me), 0);
    CHECK_EQ(vmt_write_all(rfd, &me, sizeof me), 0);
    /* the remote process connected and made its alock_remote: both go */
    rc = vmt_expect_byte(rfd, 'R', 60000);
    CHECKF(rc == 0, "the remote process did not get ready: %s", strerror(-rc));
    if (rc) goto done;
    CHECK_EQ(vmt_send_byte(lfd, 'G'), 0);
    CHECK_EQ(vmt_send_byte(rfd, 'G'), 0);
done:
    {
        char why[512];
        if (lrun) CHECKF(vmt_reap(&lc, why, sizeof why) == 0, "local process: %s", why);
        if (rrun) CHECKF(vmt_reap(&rc_, why, sizeof why) == 0, "remote process: %s", why);
    }
    if (lfd >= 0) close(lfd);
    if (rfd >= 0) close(rfd);
    if (tab && lrun && rrun) {
        struct shared *s = (struct shared *)shmheap_root_get(heap, "shared");
        CHECK_EQ(s->counter, (uint64_t)(LOCAL_ITERS + REMOTE_ITERS));
        CHECK_EQ(s->violations, 0);
        printf("# alock over krconn: counter %llu = %d local + %d remote critical sections\n",
               (unsigned long long)s->counter, LOCAL_ITERS, REMOTE_ITERS);
    }
    if (hmr.mr) krconn_dereg(&hmr);
    if (ctx) krconn_ctx_destroy(ctx);
    char live[256];
    snprintf(live, sizeof live, "/dev/shm/alock.%llx.table", (unsigned long long)(uintptr_t)shmheap_base(heap));
    if (tab) alock_table_close(tab);
    shmheap_close(heap);
    shmheap_unlink(heap_name, NULL);
    unlink(live);
}

/* ---------------------------------------------------------------- nppin over krconn */

#define MiB ((size_t)1 << 20)
#define NP_REGION (8 * MiB)
#define NP_CHUNK (2 * MiB)
#define NP_OFF (2 * MiB + 4096) /* inside chunk 1 */
#define NP_LEN (64u << 10)
#define NP_SEED 77

/* the connection's QP and the CQ it owns (krconn gives every physical QP one CQ for both) */
static int kqp(krconn *k, struct ibv_qp **qp, struct ibv_cq **cq)
{
    *qp = krconn_qp(k);
    if (!*qp) return KRCONN_E_INVAL;
    *cq = (*qp)->send_cq;
    return (*qp)->recv_cq == *cq ? 0 : KRCONN_E_INVAL;
}

/* The owner: accepts the channel connection, serves leases on its region until told 'Q'. */
/* nppin's side of a role, in reverse order of making; NULL (or chan->user NULL) = not made */
static void np_teardown(nppin_peer *peer, nppin_chan *chan, nppin_region *rg, nppin_ctx *np)
{
    if (peer) nppin_peer_destroy(peer);
    if (chan->user) nppin_chan_verbs_destroy(chan);
    if (rg) nppin_dereg(rg);
    if (np) nppin_destroy(np);
}

static int owner_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    krconn_ctx *ctx = NULL;
    krconn *kc = NULL;
    nppin_ctx *np = NULL;
    nppin_region *rg = NULL;
    nppin_peer *peer = NULL;
    nppin_chan chan = {0};
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    char buf[300];
    int rc;
    unsigned char *mem = (unsigned char *)mmap(NULL, NP_REGION, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) VMT_FAILF("mmap: %s", strerror(errno));
    vmt_fill(mem + NP_OFF, NP_LEN, NP_SEED);
    krconn_ctx_opts ko = {.accept_backlog = 4};
    if ((rc = krconn_ctx_create(&ko, &ctx))) VMT_FAILF("krconn_ctx_create: %s", krconn_describe(rc, buf, sizeof buf));
    krconn_addr me;
    VMT_TRY(krconn_ctx_addr(ctx, &me));
    VMT_TRY(vmt_write_all(fd, &me, sizeof me));
    /* the accessing side connected the channel connection and posted its receives */
    VMT_TRY(vmt_expect_byte(fd, 'C', 60000));
    if ((rc = krconn_accept(ctx, TMO, &kc))) VMT_FAILF("krconn_accept: %s", krconn_describe(rc, buf, sizeof buf));
    if (kqp(kc, &qp, &cq)) VMT_FAILF("the connection's QP has no single CQ");
    nppin_opts no = {.chunk_size = NP_CHUNK, .budget = 4 * NP_CHUNK};
    if ((rc = nppin_create(qp->pd, &no, &np))) VMT_FAILF("nppin_create: %s", nppin_strerror(rc));
    if ((rc = nppin_reg(np, mem, NP_REGION, &rg))) VMT_FAILF("nppin_reg: %s", nppin_strerror(rc));
    if ((rc = nppin_chan_verbs_create(qp->pd, qp, cq, &chan))) VMT_FAILF("nppin_chan_verbs_create: %s", nppin_strerror(rc));
    if ((rc = nppin_peer_create(np, &chan, &peer))) VMT_FAILF("nppin_peer_create: %s", nppin_strerror(rc));
    unsigned char msg[NPPIN_HANDLE_SIZE + 8];
    if ((rc = nppin_region_export(rg, msg))) VMT_FAILF("nppin_region_export: %s", nppin_strerror(rc));
    vmt_put64(msg + NPPIN_HANDLE_SIZE, (uint64_t)(uintptr_t)mem);
    VMT_TRY(vmt_write_all(fd, msg, sizeof msg));
    for (;;) {
        if ((rc = nppin_peer_progress(peer, 20 * 1000000ull)) < 0)
            VMT_FAILF("nppin_peer_progress: %s", nppin_strerror(rc));
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) break;
    }
    VMT_TRY(vmt_expect_byte(fd, 'Q', 1000));
out:
    np_teardown(peer, &chan, rg, np);
    if (kc) krconn_disconnect(kc);
    if (ctx) krconn_ctx_destroy(ctx);
    return why[0] ? -1 : 0;
}

static void nppin_over_krconn(void)
{
    vmt_child oc;
    int fd = -1;
    krconn_ctx *ctx = NULL;
    krconn *kc = NULL, *kd = NULL;
    nppin_ctx *np = NULL;
    nppin_region *lrg = NULL;
    nppin_peer *peer = NULL;
    nppin_remote *rm = NULL;
    nppin_chan chan = {0};
    struct ibv_qp *cqp = NULL, *dqp = NULL;
    struct ibv_cq *ccq = NULL, *dcq = NULL;
    char buf[300];
    int rc;
    unsigned char *lmem = (unsigned char *)mmap(NULL, NP_CHUNK, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(lmem != MAP_FAILED);
    if (lmem == MAP_FAILED) return;
    if (vmt_spawn_sock(owner_role, NULL, &oc, &fd)) return;
    krconn_addr owner;
    rc = krconn_ctx_create(NULL, &ctx);
    CHECKF(rc == 0, "krconn_ctx_create: %s", krconn_describe(rc, buf, sizeof buf));
    if (rc) goto done;
    rc = vmt_read_all(fd, &owner, sizeof owner, 60000);
    CHECKF(rc == 0, "owner's address: %s", strerror(-rc));
    if (rc) goto done;
    /* two physical connections: the channel's CQ must serve nothing else */
    krconn_connect_opts co = {.timeout_ms = TMO, .flags = KRCONN_CONNECT_NO_VIRTUAL};
    rc = krconn_connect(ctx, &owner, &co, &kc);
    CHECKF(rc == 0, "krconn_connect (channel): %s", krconn_describe(rc, buf, sizeof buf));
    if (rc) goto done;
    CHECK_EQ(kqp(kc, &cqp, &ccq), 0);
    if (!ccq) goto done;
    nppin_opts no = {.chunk_size = NP_CHUNK, .budget = 2 * NP_CHUNK};
    rc = nppin_create(cqp->pd, &no, &np);
    CHECKF(rc == 0, "nppin_create: %s", nppin_strerror(rc));
    if (rc) goto done;
    rc = nppin_chan_verbs_create(cqp->pd, cqp, ccq, &chan);
    CHECKF(rc == 0, "nppin_chan_verbs_create on krconn_qp: %s", nppin_strerror(rc));
    if (rc) goto done;
    CHECK_EQ(vmt_send_byte(fd, 'C'), 0);
    rc = krconn_connect(ctx, &owner, &co, &kd);
    CHECKF(rc == 0, "krconn_connect (data): %s", krconn_describe(rc, buf, sizeof buf));
    if (rc) goto done;
    CHECK(!krconn_is_virtual(kc) && !krconn_is_virtual(kd));
    CHECK_EQ(kqp(kd, &dqp, &dcq), 0);
    CHECK(dcq != ccq);
    if (!dcq || dcq == ccq) goto done;
    unsigned char msg[NPPIN_HANDLE_SIZE + 8];
    rc = vmt_read_all(fd, msg, sizeof msg, 60000);
    CHECKF(rc == 0, "owner's handle: %s", strerror(-rc));
    if (rc) goto done;
    uint64_t obase = vmt_get64(msg + NPPIN_HANDLE_SIZE);
    rc = nppin_peer_create(np, &chan, &peer);
    CHECKF(rc == 0, "nppin_peer_create: %s", nppin_strerror(rc));
    if (rc) goto done;
    rc = nppin_remote_open(peer, msg, &rm);
    CHECKF(rc == 0, "nppin_remote_open: %s", nppin_strerror(rc));
    if (rc) goto done;
    rc = nppin_reg(np, lmem, NP_CHUNK, &lrg);
    CHECKF(rc == 0, "nppin_reg: %s", nppin_strerror(rc));
    if (rc) goto done;
    memset(lmem, 0, NP_LEN);
    /* a miss: the lease request and grant go over the krconn channel; the READ over kd */
    nppin_target t = {.addr = obase + NP_OFF, .remote = rm};
    rc = nppin_xfer(np, dqp, dcq, NPPIN_OP_READ, lmem, NP_LEN, &t, 0, 30 * VMT_SEC);
    CHECKF(rc == 0, "nppin_xfer READ: %s", nppin_explain(np, rc, buf, sizeof buf));
    if (!rc) {
        long bad = vmt_check(lmem, NP_LEN, NP_SEED);
        CHECKF(bad < 0, "READ of the owner's chunk differs at byte %ld", bad);
    }
    nppin_stats st;
    memset(&st, 0, sizeof st);
    nppin_get_stats(np, &st);
    CHECKF(st.lease_misses >= 1, "no lease was asked for (lease_misses %llu)",
           (unsigned long long)st.lease_misses);
    printf("# nppin over krconn: %u bytes READ from chunk 1, lease_misses %llu\n", NP_LEN,
           (unsigned long long)st.lease_misses);
done:
    if (rm) CHECK_EQ(nppin_remote_close(rm), 0);
    if (fd >= 0) vmt_send_byte(fd, 'Q');
    {
        char why[512];
        CHECKF(vmt_reap(&oc, why, sizeof why) == 0, "owner: %s", why);
    }
    np_teardown(peer, &chan, lrg, np);
    if (kd) krconn_disconnect(kd);
    if (kc) krconn_disconnect(kc);
    if (ctx) krconn_ctx_destroy(ctx);
    if (fd >= 0) close(fd);
    munmap(lmem, NP_CHUNK);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    TEST(alock_over_krconn);
    TEST(nppin_over_krconn);
    return T_DONE();
}
