// VM
// LIBS: -libverbs
/* tests/vm/test_nppin.c - nppin.h on Soft-RoCE in one guest. The parent is the accessing side;
 * a child owns a 1 GiB region (MAP_NORESERVE, untouched) under a 64 MiB budget and serves
 * leases, and does what the parent asks to its memory (fill, check, munmap+mmap, MADV_DONTNEED,
 * mremap, MADV_PAGEOUT) over a command socket. Another child holds a lease and is killed. */
#include "nppt.h"
#include <linux/capability.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)
#define REGION ((size_t)1 << 30)
#define BUDGET (64 * MiB)
#define CHUNK (2 * MiB)
#define LEASE_MS 600u
#define LOCAL (16 * MiB)

/* ---------------------------------------------------------------- the owner (a child) */

static int owner_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    /* leases long enough that eviction has to revoke them, not just wait for expiry */
    nppin_opts o = {.chunk_size = CHUNK, .budget = BUDGET, .lease_ms = 5000};
    return nppt_owner_serve(fd, REGION, &o, why, whylen);
}

/* ---------------------------------------------------------------- the accessing side */

static nppt_side A;
static int sock = -1;
static nppin_region *lrg;
static unsigned char *lmem;
static nppin_remote *rem;
static uint64_t rbase;
static int qp_broken;

static int call(uint64_t op, uint64_t a, uint64_t b, uint64_t c, nppt_rep *r)
{
    return nppt_call(sock, A.peer_np, op, a, b, c, r);
}

/* One READ or WRITE of the owner's region at offset off through nppin; waits for it. */
static int rio(int op, size_t loff, size_t len, uint64_t off)
{
    nppin_target t = {.addr = rbase + off, .remote = rem};
    int rc = op == NPPIN_OP_READ ? nppin_post_read(A.np, A.dqp, 42, lmem + loff, len, &t, 0)
                                 : nppin_post_write(A.np, A.dqp, 42, lmem + loff, len, &t, 0);
    if (rc) return rc;
    struct ibv_wc wc;
    rc = nppt_wait(A.np, A.dcq, 20 * VMT_SEC, &wc);
    if (rc == 0 && wc.wr_id != 42) return -EPROTO;
    if (rc && rc != -ETIMEDOUT) qp_broken = 1;
    return rc;
}

static void reg_returns_at_once(void)
{
    size_t len = REGION;
    unsigned char *m = (unsigned char *)mmap(NULL, len, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED) return;
    long rss0 = nppt_rss_kb();
    nppin_region *rg = NULL;
    uint64_t t0 = rcp__now_ns();
    int rc = nppin_reg(A.np, m, len, &rg);
    uint64_t dt = rcp__now_ns() - t0;
    CHECKF(rc == 0, "nppin_reg: %s", nppin_strerror(rc));
    nppin_stats st;
    memset(&st, 0, sizeof st);
    nppin_get_stats(A.np, &st);
    long rss1 = nppt_rss_kb();
    printf("# nppin_reg of 1 GiB: %.3f ms, rss +%ld KiB, pinned %zu\n", dt / 1e6, rss1 - rss0, st.pinned);
    CHECKF(dt < 50000000ull, "nppin_reg of 1 GiB took %.1f ms", dt / 1e6);
    CHECKF(rss1 - rss0 < 1024, "resident memory grew by %ld KiB", rss1 - rss0);
    if (rg) nppin_dereg(rg);
    munmap(m, len);
}

static void errors_explained(void)
{
    CHECK(strstr(nppin_strerror(NPPIN_E_PINLIMIT), "RLIMIT_MEMLOCK") != NULL);
    char buf[300];
    nppin_explain(A.np, NPPIN_E_PINLIMIT, buf, sizeof buf);
    CHECKF(strstr(buf, "RLIMIT_MEMLOCK") && strstr(buf, "budget"), "explain: %s", buf);
    nppin_region *rg;
    CHECK_EQ(nppin_reg(A.np, lmem + 4096, 4096, &rg), NPPIN_E_OVERLAP);
    char x[64];
    nppin_target t = {.addr = rbase, .remote = rem};
    CHECK_EQ(nppin_post_read(A.np, A.dqp, 1, x, sizeof x, &t, 0), NPPIN_E_NOTREG);
    nppin_opts bad = {.chunk_size = 3 * 4096};
    nppin_ctx *np;
    CHECK_EQ(nppin_create(A.d.pd, &bad, &np), -EINVAL);
    unsigned char h[NPPIN_HANDLE_SIZE];
    memset(h, 0x5a, sizeof h);
    nppin_remote *r2;
    CHECK_EQ(nppin_remote_open(A.peer_np, h, &r2), NPPIN_E_HANDLE);
}

/* Local posts from any part of a local region, and ranges larger than the (local) budget. */
static void local_any_part_and_split(void)
{
    nppt_rep r;
    /* WRITE 3 MiB + 7 from an odd local offset across two local chunks: one post */
    size_t n = 3 * MiB + 7, loff = CHUNK - 12345;
    vmt_fill(lmem + loff, n, 5);
    CHECK_EQ(rio(NPPIN_OP_WRITE, loff, n, 700 * MiB + 3), 0);
    CHECK_EQ(call(C_CHECK, 700 * MiB + 3, n, 5, &r), 0);
    /* the local budget is 4 chunks (8 MiB): a 12 MiB post is too big, nppin_xfer moves it */
    size_t big = 12 * MiB;
    nppin_target t = {.addr = rbase + 800 * MiB, .remote = rem};
    vmt_fill(lmem + 1, big, 6);
    CHECK_EQ(nppin_post_write(A.np, A.dqp, 1, lmem + 1, big, &t, 0), NPPIN_E_TOOBIG);
    CHECK_EQ(nppin_xfer(A.np, A.dqp, A.dcq, NPPIN_OP_WRITE, lmem + 1, big, &t, NPPIN_NOSPLIT,
                        20 * VMT_SEC), NPPIN_E_TOOBIG);
    int rc = nppin_xfer(A.np, A.dqp, A.dcq, NPPIN_OP_WRITE, lmem + 1, big, &t, 0, 60 * VMT_SEC);
    CHECKF(rc == 0, "xfer write: %s", nppin_strerror(rc));
    CHECK_EQ(call(C_CHECK, 800 * MiB, big, 6, &r), 0);
    memset(lmem, 0, LOCAL);
    rc = nppin_xfer(A.np, A.dqp, A.dcq, NPPIN_OP_READ, lmem + 3, big, &t, 0, 60 * VMT_SEC);
    CHECKF(rc == 0, "xfer read: %s", nppin_strerror(rc));
    CHECKF(vmt_check(lmem + 3, big, 6) < 0, "xfer read: data differs");
    nppin_stats st;
    memset(&st, 0, sizeof st);
    nppin_get_stats(A.np, &st);
    CHECKF(st.pinned_peak <= st.budget, "local pinned peak %zu above budget %zu", st.pinned_peak, st.budget);
}

/* An nppin_xfer that stops waiting leaves its piece posted: here a WRITE on a QP whose peer QP
 * is gone, which fails once the QP's retries run out. That completion, when nppin_poll sees it,
 * is nppin's (never handed out with a wr_id nobody posted), and it lets the piece's chunks go. */
static void xfer_timeout_leaves_nothing(void)
{
    struct ibv_cq *cq = NULL;
    struct ibv_qp *qa = NULL, *qb = NULL;
    rcp__verbs_ep ea, eb;
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = 12; /* 16.8 ms, 2 retries */
    o.retry_cnt = 2;
    int rc = rcp__verbs_cq_create(&A.d, 64, 0, &cq);
    if (!rc) rc = rcp__verbs_qp_create(&A.d, cq, cq, &o, &qa);
    if (!rc) rc = rcp__verbs_qp_create(&A.d, cq, cq, &o, &qb);
    if (!rc) {
        vmt_ep_local(&A.d, qa, 0, 0, &ea);
        vmt_ep_local(&A.d, qb, 0, 0, &eb);
        rc = vmt_rc_connect(&A.d, qa, &ea, &eb, &o);
    }
    if (!rc) rc = vmt_rc_connect(&A.d, qb, &eb, &ea, &o);
    CHECKF(rc == 0, "a QP pair: %s", strerror(-rc));
    if (rc) goto out;
    rcp__verbs_qp_destroy(qb); /* qa's packets now reach no QP */
    qb = NULL;
    nppin_target t = {.addr = 4096, .rkey = 1, .remote = NULL};
    rc = nppin_xfer(A.np, qa, cq, NPPIN_OP_WRITE, lmem, 4 * MiB, &t, 0, 1);
    CHECKF(rc == -ETIMEDOUT, "xfer with a 1 ns timeout: %s", nppin_strerror(rc));
    struct ibv_wc wc;
    int got = 0;
    for (uint64_t t0 = rcp__now_ns(); rcp__now_ns() - t0 < 3 * VMT_SEC && !got;) {
        got = nppin_poll(A.np, cq, &wc, 1);
        if (!got) usleep(1000);
    }
    CHECKF(got == 0, "nppin_poll returned the given-up piece: wr_id %#llx, %s",
           (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
    /* the xfer's local chunks (0 and 1) are free again: chunks 4 to 7 take the whole budget */
    size_t loff = ((uintptr_t)lmem & ~(uintptr_t)(CHUNK - 1)) + 8 * MiB - (uintptr_t)lmem;
    rc = rio(NPPIN_OP_READ, loff, 8 * MiB, 832 * MiB);
    CHECKF(rc == 0, "a post of the whole budget after a timed-out xfer: %s", nppin_strerror(rc));
out:
    rcp__verbs_qp_destroy(qa);
    rcp__verbs_qp_destroy(qb);
    rcp__verbs_cq_destroy(cq);
}

/* Random READs and WRITEs all over the owner's 1 GiB while its 64 MiB budget forces eviction:
 * every completion succeeds, every READ returns what was last written there (or zeros). */
#define SLOTS 1024                 /* 1 MiB apart: every chunk of the region is used */
#define SLOT_BYTES 1536u
static void random_rw_under_eviction(void)
{
    static unsigned seeds[SLOTS]; /* 0 = never written, 1 = written by an earlier test */
    for (unsigned i = 700; i < 704; i++) seeds[i] = 1;
    for (unsigned i = 800; i < 813; i++) seeds[i] = 1;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int errors = 0, mismatches = 0, ops = 0;
    uint64_t t0 = rcp__now_ns();
    for (int i = 0; i < 1500 && !errors && rcp__now_ns() - t0 < 45 * VMT_SEC; i++, ops++) {
        unsigned slot = (unsigned)(t_rng(&rng) % SLOTS);
        uint64_t off = (uint64_t)slot * MiB + (slot * 77u) % 4096;
        if (t_rng(&rng) % 2) {
            unsigned seed = 1000 + (unsigned)i;
            vmt_fill(lmem, SLOT_BYTES, seed);
            int rc = rio(NPPIN_OP_WRITE, 0, SLOT_BYTES, off);
            if (rc) { errors++; CHECKF(0, "write %d: %s", i, nppin_strerror(rc)); break; }
            seeds[slot] = seed;
        } else {
            memset(lmem, 0xee, SLOT_BYTES);
            int rc = rio(NPPIN_OP_READ, 0, SLOT_BYTES, off);
            if (rc) { errors++; CHECKF(0, "read %d: %s", i, nppin_strerror(rc)); break; }
            int ok = 1;
            if (seeds[slot] > 1) ok = vmt_check(lmem, SLOT_BYTES, seeds[slot]) < 0;
            else if (seeds[slot] == 1) ok = 1;
            else for (unsigned k = 0; k < SLOT_BYTES; k++) ok &= lmem[k] == 0;
            if (!ok && mismatches++ < 3) CHECKF(0, "read %d of slot %u: wrong data", i, slot);
        }
    }
    double dt = (rcp__now_ns() - t0) / 1e9;
    nppt_rep r;
    CHECK_EQ(call(C_STATS, 0, 0, 0, &r), 0);
    printf("# %d random ops over 1 GiB in %.1f s; owner: pinned peak %llu of budget %llu, "
           "%llu evictions, %llu leases, %llu revokes, rss %llu KiB, VmPin %llu KiB\n", ops, dt,
           (unsigned long long)r.v[1], (unsigned long long)r.v[2], (unsigned long long)r.v[3],
           (unsigned long long)r.v[4], (unsigned long long)r.v[7], (unsigned long long)r.v[5],
           (unsigned long long)r.v[6]);
    CHECKF(r.v[1] <= r.v[2], "owner pinned peak %llu above budget %llu", (unsigned long long)r.v[1],
           (unsigned long long)r.v[2]);
    CHECKF(r.v[3] > 0, "no eviction happened");
    CHECKF(r.v[7] > 0, "no lease was revoked");
    /* what the kernel counts as pinned (VmPin) stays within the budget, plus the channel's
       buffer; resident memory is every chunk ever registered: ibv_reg_mr faults them in */
    CHECKF(r.v[6] <= BUDGET / 1024 + 64, "owner VmPin %llu KiB", (unsigned long long)r.v[6]);
    CHECK_EQ(vmt_qp_state(A.dqp), IBV_QPS_RTS);
    /* and the owner sees the writes in its own memory */
    for (unsigned slot = 0; slot < SLOTS; slot++)
        if (seeds[slot] > 1) {
            int rc = call(C_CHECK, (uint64_t)slot * MiB + (slot * 77u) % 4096, SLOT_BYTES, seeds[slot], &r);
            if (rc) { CHECKF(0, "owner's slot %u differs", slot); break; }
        }
}

/* The owner changes what is mapped at an address under a leased, registered chunk; our next
 * READ must see the new contents. */
static void stale(int op, const char *what, uint64_t off)
{
    nppt_rep r;
    size_t len = CHUNK;
    CHECK_EQ(call(C_FILL, off, len, 11, &r), 0);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, 4096, off + 4096), 0);        /* registered and leased now */
    int rc = call(op, off, len, 22, &r);
    CHECKF(rc == 0, "%s at the owner: %s", what, nppin_strerror(rc));
    memset(lmem, 0, 2 * 4096);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, len, off), 0);
    long bad = vmt_check(lmem, len, 22);
    CHECKF(bad < 0, "after %s, READ byte %ld is not the new contents", what, bad);
    CHECK_EQ(vmt_qp_state(A.dqp), IBV_QPS_RTS);
}
static void stale_munmap_mmap(void) { stale(C_UNMAP, "munmap+mmap", 300 * MiB); }
static void stale_madv_dontneed(void) { stale(C_DONTNEED, "MADV_DONTNEED", 302 * MiB); }
static void stale_mremap(void) { stale(C_MREMAP, "mremap", 304 * MiB); }

static void pageout_then_read(void)
{
    FILE *f = fopen("/proc/swaps", "r");
    char line[256];
    int lines = 0;
    while (f && fgets(line, sizeof line, f)) lines++;
    if (f) fclose(f);
    if (lines < 2) {
        t_skip("pageout_then_read", "no swap in this guest (/proc/swaps is empty)");
        return;
    }
    t_begin("pageout_then_read");
    nppt_rep r;
    uint64_t off = 400 * MiB;
    CHECK_EQ(call(C_FILL, off, CHUNK, 33, &r), 0);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, 4096, off), 0);
    int rc = call(C_PAGEOUT, off, CHUNK, 0, &r);
    CHECKF(rc == 0, "pageout: %s", nppin_strerror(rc));
    printf("# MADV_PAGEOUT: %llu of %llu pages still resident\n", (unsigned long long)r.v[0],
           (unsigned long long)r.v[1]);
    CHECKF(r.v[0] < r.v[1] / 2, "MADV_PAGEOUT left %llu of %llu pages resident", (unsigned long long)r.v[0],
           (unsigned long long)r.v[1]);
    memset(lmem, 0, CHUNK);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, CHUNK, off), 0);
    CHECKF(vmt_check(lmem, CHUNK, 33) < 0, "paged-out chunk read back wrong");
    t_end();
}

/* ---------------------------------------------------------------- a holder that dies */

static int dying_holder_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    nppt_side s;
    const char *step = "";
    nppin_opts o = {.chunk_size = CHUNK, .budget = 4 * MiB, .detect = NPPIN_DETECT_NONE};
    unsigned char *buf = (unsigned char *)mmap(NULL, CHUNK, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    nppin_region *rg = NULL;
    nppin_remote *rm = NULL;
    unsigned char h[NPPIN_HANDLE_SIZE];
    struct ibv_wc wc;
    int rc = nppt_side_setup(fd, &o, &s, &step);
    if (rc) VMT_FAILF("holder setup: %s: %s", step, nppin_strerror(rc));
    VMT_TRY(nppin_reg(s.np, buf, CHUNK, &rg));
    VMT_TRY(vmt_read_all(fd, h, sizeof h, 60000));
    VMT_TRY(nppin_remote_open(s.peer_np, h, &rm));
    {
        nppin_target t = {.addr = nppin__get64(h + 8), .remote = rm};
        VMT_TRY(nppin_post_read(s.np, s.dqp, 1, buf, 64, &t, 0));
        VMT_TRY(nppt_wait(s.np, s.dcq, VMT_WAIT, &wc));
    }
    VMT_TRY(vmt_send_byte(fd, 'L'));
    pause(); /* killed here, holding the lease */
out:
    return why[0] ? -1 : 0;
}

static void dead_holder_does_not_pin_forever(void)
{
    nppt_side s;
    vmt_child ch;
    int fd = -1;
    const char *step = "";
    nppin_region *rg = NULL;
    /* two whole chunks: 2 MiB aligned inside a larger mapping */
    unsigned char *map = (unsigned char *)mmap(NULL, 3 * CHUNK, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *mem = (unsigned char *)(((uintptr_t)map + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    memset(&s, 0, sizeof s);
    if (vmt_spawn_sock(dying_holder_role, NULL, &ch, &fd)) return;
    /* a budget of one chunk: the dead holder's lease on chunk 0 stands in the way of chunk 1 */
    nppin_opts o = {.chunk_size = CHUNK, .budget = CHUNK, .lease_ms = LEASE_MS};
    int rc = nppt_side_setup(fd, &o, &s, &step);
    CHECKF(rc == 0, "setup: %s: %s", step, nppin_strerror(rc));
    if (!rc) rc = nppin_reg(s.np, mem, 2 * CHUNK, &rg);
    unsigned char h[NPPIN_HANDLE_SIZE];
    if (!rc) rc = nppin_region_export(rg, h);
    if (!rc) rc = vmt_write_all(fd, h, sizeof h);
    char c = 0;
    if (!rc) rc = nppt_read_progress(fd, &c, 1, s.peer_np, 60000);
    CHECKF(rc == 0 && c == 'L', "the holder did not take its lease: %s", nppin_strerror(rc));
    kill(ch.pid, SIGKILL);
    char why[256];
    vmt_reap(&ch, why, sizeof why);
    close(fd);
    if (rc) goto out;
    {
        uint64_t t0 = rcp__now_ns(), t_ok = 0;
        int busy = 0;
        while (rcp__now_ns() - t0 < 10 * VMT_SEC) {
            rc = nppin_post_recv(s.np, s.dqp, 9, mem + CHUNK + 100, 64);
            if (rc != NPPIN_E_BUSY) { t_ok = rcp__now_ns(); break; }
            busy++;
            nppin_peer_progress(s.peer_np, 1000000);
        }
        double ms = (t_ok - t0) / 1e6;
        printf("# chunk of a dead holder free after %.0f ms (lease %u ms), %d busy answers\n", ms,
               LEASE_MS, busy);
        CHECKF(rc == 0, "post after the holder died: %s", nppin_strerror(rc));
        CHECKF(busy > 0, "the lease of the dead holder was not respected");
        CHECKF(ms < LEASE_MS + 3000, "took %.0f ms", ms);
        nppin_stats st;
        memset(&st, 0, sizeof st);
        nppin_get_stats(s.np, &st);
        CHECK(st.pinned <= st.budget);
    }
out:
    if (rg) nppin_dereg(rg);
    if (s.np) nppt_side_free(&s);
    munmap(map, 3 * CHUNK);
}

/* The owner's channel gets garbage: random bytes, and well-formed messages of every type with
 * random fields (requests for chunks that do not exist, grants nobody asked for, revocations
 * and returns of nothing). It counts and drops them, answers what it can, and serves on. */
static void peer_sends_garbage(void)
{
    uint64_t rng = 777;
    unsigned char m[NPPIN_MSG_SIZE];
    int rc = 0;
    for (int i = 0; i < 300 && !rc; i++) {
        for (unsigned k = 0; k < sizeof m; k++) m[k] = (unsigned char)t_rng(&rng);
        if (i % 2) {
            uint64_t x = t_rng(&rng);
            nppin__msg(m, 1 + (uint32_t)(x % 7), (uint32_t)(x >> 8) % 4, t_rng(&rng) % 2 ? x : x % 600,
                       (uint32_t)t_rng(&rng), (uint32_t)x, t_rng(&rng), (uint32_t)x, (uint32_t)(x >> 3),
                       t_rng(&rng));
        }
        rc = A.ch.send(A.ch.user, m, i % 5 ? sizeof m : 7);
        if (i % 16 == 0) nppin_peer_progress(A.peer_np, 1000000);
    }
    CHECKF(rc == 0, "sending garbage: %s", strerror(-rc));
    nppt_rep r;
    CHECK_EQ(call(C_BAD, 0, 0, 0, &r), 0);
    printf("# owner dropped %llu bad messages\n", (unsigned long long)r.v[0]);
    CHECK(r.v[0] > 0);
    /* and it serves on */
    vmt_fill(lmem, 4096, 99);
    CHECK_EQ(rio(NPPIN_OP_WRITE, 0, 4096, 600 * MiB), 0);
    memset(lmem, 0, 4096);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, 4096, 600 * MiB), 0);
    CHECKF(vmt_check(lmem, 4096, 99) < 0, "after the garbage, data differs");
    CHECK_EQ(vmt_qp_state(A.dqp), IBV_QPS_RTS);
}

/* Without CAP_IPC_LOCK and with a 1 MiB RLIMIT_MEMLOCK, a budget of 8 MiB cannot be pinned:
 * the post fails with NPPIN_E_PINLIMIT and nppin_explain names the limit and the budget. */
static int pinlimit_child(char *why, size_t whylen)
{
    struct rlimit rl = {1 << 20, 1 << 20};
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    rcp__verbs_dev dev;
    nppin_ctx *np = NULL;
    nppin_region *rg = NULL;
    unsigned char *m = (unsigned char *)mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char buf[300];
    memset(&dev, 0, sizeof dev);
    if (setrlimit(RLIMIT_MEMLOCK, &rl)) VMT_FAILF("setrlimit: %s", strerror(errno));
    if (syscall(SYS_capget, &h, d)) VMT_FAILF("capget: %s", strerror(errno));
    d[0].effective &= ~(1u << CAP_IPC_LOCK);
    d[0].permitted &= ~(1u << CAP_IPC_LOCK);
    if (syscall(SYS_capset, &h, d)) VMT_FAILF("capset: %s", strerror(errno));
    VMT_TRY(rcp__verbs_open(NULL, &dev));
    {
        nppin_opts o = {.chunk_size = CHUNK, .budget = 8 * MiB};
        VMT_TRY(nppin_create(dev.pd, &o, &np));
        VMT_TRY(nppin_reg(np, m, 4 * MiB, &rg));
        nppin_target t = {.addr = 4096, .rkey = 1};
        int rc = nppin_post_write(np, (struct ibv_qp *)1, 1, m, 3 * MiB, &t, 0);
        nppin_explain(np, rc, buf, sizeof buf);
        printf("# %s\n", buf);
        if (rc != NPPIN_E_PINLIMIT) VMT_FAILF("post: %s, expected NPPIN_E_PINLIMIT", nppin_strerror(rc));
        if (!strstr(buf, "RLIMIT_MEMLOCK 1048576 bytes") || !strstr(buf, "budget 8388608"))
            VMT_FAILF("explain does not name the limit and the budget: %s", buf);
    }
out:
    if (rg) nppin_dereg(rg);
    if (np) nppin_destroy(np);
    if (dev.ctx) rcp__verbs_close(&dev);
    return why[0] ? -1 : 0;
}

static void pinlimit_named(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char why[400] = "";
        close(p[0]);
        int rc = pinlimit_child(why, sizeof why);
        if (rc && write(p[1], why, strlen(why)) < 0) _exit(3);
        fflush(stdout);
        _exit(rc ? 1 : 0);
    }
    close(p[1]);
    char why[400] = "";
    ssize_t n = read(p[0], why, sizeof why - 1);
    why[n > 0 ? n : 0] = 0;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", why[0] ? why : "child failed");
}

static void odp_when_offered(void)
{
    nppin_stats st;
    memset(&st, 0, sizeof st);
    nppin_get_stats(A.np, &st);
    struct ibv_device_attr_ex a;
    memset(&a, 0, sizeof a);
    int rc = ibv_query_device_ex(A.d.ctx, NULL, &a);
    if (rc || !(a.odp_caps.general_caps & IBV_ODP_SUPPORT)) {
        char why[160];
        snprintf(why, sizeof why, "%s reports no on-demand paging (odp general_caps %#llx)",
                 A.d.name, (unsigned long long)a.odp_caps.general_caps);
        t_skip("odp_when_offered", why);
        CHECK(!st.odp);
        return;
    }
    t_begin("odp_when_offered");
    CHECK(st.odp);
    t_end();
}

static void fork_child_may_touch(void)
{
    nppin_stats st;
    memset(&st, 0, sizeof st);
    nppin_get_stats(A.np, &st);
    printf("# ibv_is_fork_initialized() = %d (2 = unneeded)\n", st.fork_status);
    vmt_fill(lmem, 4096, 71);
    CHECK_EQ(rio(NPPIN_OP_WRITE, 0, 4096, 500 * MiB), 0); /* lmem's chunk 0 is registered */
    pid_t pid = fork();
    if (pid == 0) {
        memset(lmem, 0x33, 8192); /* the child's own copy */
        _exit(lmem[0] == 0x33 ? 0 : 1);
    }
    int stt = 0;
    waitpid(pid, &stt, 0);
    CHECK(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
    CHECKF(vmt_check(lmem, 4096, 71) < 0, "the child's writes reached the parent");
    memset(lmem, 0, 4096);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, 4096, 500 * MiB), 0);
    CHECKF(vmt_check(lmem, 4096, 71) < 0, "after fork, READ into the parent's buffer differs");
}

/* A forked child given the parent's nppin_ctx, nppin_region, nppin_peer and nppin_remote:
   NPPIN_E_FORKED for every call, closes included (ERRORS); the parent's handles work on after
   the child exits. */
static void handles_forked(void)
{
    unsigned char h[NPPIN_HANDLE_SIZE];
    vmt_fill(lmem, 4096, 73);
    CHECK_EQ(rio(NPPIN_OP_WRITE, 0, 4096, 502 * MiB), 0);
    CHECK_EQ(nppin_region_export(lrg, h), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        nppin_stats st;
        nppin_region *rg2 = NULL;
        nppin_remote *rm2 = NULL;
        nppin_target t = {.addr = rbase + 502 * MiB, .remote = rem};
        unsigned char h2[NPPIN_HANDLE_SIZE];
        int bad = 0; /* bit i: check i gave another code */
        bad |= (nppin_get_stats(A.np, &st) != NPPIN_E_FORKED) << 0;
        bad |= (nppin_reg(A.np, lmem + 8192, 4096, &rg2) != NPPIN_E_FORKED) << 1;
        bad |= (nppin_region_export(lrg, h2) != NPPIN_E_FORKED) << 2;
        bad |= (nppin_post_read(A.np, A.dqp, 43, lmem, 4096, &t, 0) != NPPIN_E_FORKED) << 3;
        bad |= (nppin_peer_progress(A.peer_np, 0) != NPPIN_E_FORKED) << 4;
        bad |= (nppin_remote_open(A.peer_np, h, &rm2) != NPPIN_E_FORKED) << 5;
        bad |= (nppin_sync(A.np, 0) != NPPIN_E_FORKED) << 6;
        bad |= (nppin_remote_close(rem) != NPPIN_E_FORKED) << 7;
        bad |= (nppin_dereg(lrg) != NPPIN_E_FORKED) << 8;
        bad |= (nppin_peer_destroy(A.peer_np) != NPPIN_E_FORKED) << 9;
        bad |= (nppin_destroy(A.np) != NPPIN_E_FORKED) << 10;
        bad |= (nppin_destroy(A.np) != NPPIN_E_FORKED) << 11; /* closed in the child: still */
        if (bad) printf("# handles_forked: the child's checks with another code: 0x%x\n", bad);
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    int stt = 0;
    CHECK(pid > 0 && waitpid(pid, &stt, 0) == pid);
    CHECKF(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "child: %s %d",
           WIFEXITED(stt) ? "exit" : "signal", WIFEXITED(stt) ? WEXITSTATUS(stt) : WTERMSIG(stt));
    memset(lmem, 0, 4096);
    CHECK_EQ(rio(NPPIN_OP_READ, 0, 4096, 502 * MiB), 0);
    CHECKF(vmt_check(lmem, 4096, 73) < 0, "the parent's READ after the child differs");
    CHECK_EQ(nppin_region_export(lrg, h), 0);
    CHECK_EQ(nppin_peer_progress(A.peer_np, 0), 0);
}

static int small_owner_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    nppin_opts o = {.chunk_size = CHUNK, .budget = 8 * MiB, .detect = NPPIN_DETECT_NONE};
    return nppt_owner_serve(fd, 8 * MiB, &o, why, whylen);
}

/* nppin_ctx, nppin_region, nppin_peer and nppin_remote closed twice or used after their close:
   NPPIN_E_BADHANDLE (ERRORS), a closed remote named in a target included; nppin_peer_destroy
   closes the peer's remotes, nppin_destroy the context's regions and peers. */
static void handles_closed(void)
{
    nppt_side s;
    vmt_child ch;
    int fd = -1, rc;
    const char *step = "";
    nppin_region *rg = NULL, *rg2 = NULL;
    nppin_remote *rm = NULL, *rm2 = NULL;
    nppin_stats st;
    nppt_rep r;
    unsigned char h[NPPIN_HANDLE_SIZE];
    struct ibv_wc wc;
    unsigned char *m = (unsigned char *)mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(&s, 0, sizeof s);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED || vmt_spawn_sock(small_owner_role, NULL, &ch, &fd)) return;
    nppin_opts o = {.chunk_size = CHUNK, .budget = 4 * CHUNK, .lease_ms = LEASE_MS,
                    .detect = NPPIN_DETECT_NONE};
    rc = nppt_side_setup(fd, &o, &s, &step);
    CHECKF(rc == 0, "setup: %s: %s", step, nppin_strerror(rc));
    if (!rc) rc = nppin_reg(s.np, m, CHUNK, &rg);
    if (!rc) rc = nppt_call(fd, s.peer_np, C_HANDLE, 0, 0, 0, &r);
    if (!rc) rc = nppin_remote_open(s.peer_np, (unsigned char *)r.v, &rm);
    if (!rc) rc = nppin_remote_open(s.peer_np, (unsigned char *)r.v, &rm2);
    CHECKF(rc == 0, "%s", nppin_strerror(rc));
    if (rc) goto out;
    nppin_target t = {.addr = nppin__get64((unsigned char *)r.v + 8), .remote = rm};
    CHECK_EQ(nppin_post_read(s.np, s.dqp, 7, m, 4096, &t, 0), 0);
    CHECK_EQ(nppt_wait(s.np, s.dcq, 20 * VMT_SEC, &wc), 0);
    /* a remote */
    CHECK_EQ(nppin_remote_close(rm), 0);
    CHECK_EQ(nppin_remote_close(rm), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_post_read(s.np, s.dqp, 8, m, 4096, &t, 0), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_xfer(s.np, s.dqp, s.dcq, NPPIN_OP_READ, m, 4096, &t, 0, 1000000000ull),
             NPPIN_E_BADHANDLE);
    rm = NULL;
    /* a region */
    CHECK_EQ(nppin_region_export(rg, h), 0);
    CHECK_EQ(nppin_dereg(rg), 0);
    CHECK_EQ(nppin_dereg(rg), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_region_export(rg, h), NPPIN_E_BADHANDLE);
    rg = NULL;
    /* a peer, and the remote still open on it */
    CHECK_EQ(nppin_peer_destroy(s.peer_np), 0);
    CHECK_EQ(nppin_peer_destroy(s.peer_np), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_peer_progress(s.peer_np, 0), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_remote_open(s.peer_np, (unsigned char *)r.v, &rm), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_remote_close(rm2), NPPIN_E_BADHANDLE);
    rm = rm2 = NULL;
    s.peer_np = NULL;
    /* a context, and the region still open on it */
    CHECK_EQ(nppin_reg(s.np, m + CHUNK, CHUNK, &rg2), 0);
    CHECK_EQ(nppin_destroy(s.np), 0);
    CHECK_EQ(nppin_destroy(s.np), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_get_stats(s.np, &st), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_reg(s.np, m, CHUNK, &rg), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_sync(s.np, 0), NPPIN_E_BADHANDLE);
    CHECK_EQ(nppin_post_read(s.np, s.dqp, 9, m, 4096, &t, 0), NPPIN_E_BADHANDLE);
    if (rg2) CHECK_EQ(nppin_dereg(rg2), NPPIN_E_BADHANDLE);
    rg = rg2 = NULL;
    s.np = NULL;
out:
    if (rm) nppin_remote_close(rm);
    if (rm2) nppin_remote_close(rm2);
    if (rg) nppin_dereg(rg);
    if (fd >= 0) {
        nppt_cmd q = {C_QUIT, 0, 0, 0};
        vmt_write_all(fd, &q, sizeof q);
        char why[512] = "";
        CHECKF(vmt_reap(&ch, why, sizeof why) == 0, "owner: %s", why);
        close(fd);
    }
    nppt_side_free(&s);
    munmap(m, 2 * CHUNK);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    vmt_child owner;
    const char *step = "";
    t_begin("nppin_setup");
    int rc = vmt_spawn_sock(owner_role, NULL, &owner, &sock);
    nppin_opts o = {.chunk_size = CHUNK, .budget = 8 * MiB, .lease_ms = LEASE_MS};
    if (!rc) {
        rc = nppt_side_setup(sock, &o, &A, &step);
        CHECKF(rc == 0, "setup: %s: %s", step, nppin_strerror(rc));
    }
    lmem = (unsigned char *)mmap(NULL, LOCAL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!rc) rc = nppin_reg(A.np, lmem, LOCAL, &lrg);
    nppt_rep r;
    if (!rc) rc = call(C_HANDLE, 0, 0, 0, &r);
    if (!rc) rc = nppin_remote_open(A.peer_np, (unsigned char *)r.v, &rem);
    if (!rc) rbase = nppin__get64((unsigned char *)r.v + 8);
    CHECKF(rc == 0, "%s", nppin_strerror(rc));
    nppin_stats st;
    memset(&st, 0, sizeof st);
    if (!rc) {
        nppin_get_stats(A.np, &st);
        printf("# userfaultfd stale detection: %s\n", st.stale_detect ? "on" : "off");
    }
    t_end();
    if (!rc) {
        TEST(reg_returns_at_once);
        TEST(errors_explained);
        TEST(local_any_part_and_split);
        TEST(xfer_timeout_leaves_nothing);
        TEST(random_rw_under_eviction);
        if (!st.stale_detect) {
            t_skip("stale_*", "no userfaultfd in this guest");
        } else {
            TEST(stale_munmap_mmap);
            TEST(stale_madv_dontneed);
            TEST(stale_mremap);
        }
        pageout_then_read();
        TEST(peer_sends_garbage);
        odp_when_offered();
        TEST(fork_child_may_touch);
        TEST(handles_forked);
        t_begin("no_remote_access_error");
        CHECK(!qp_broken);
        CHECK_EQ(vmt_qp_state(A.dqp), IBV_QPS_RTS);
        t_end();
        nppt_cmd q = {C_QUIT, 0, 0, 0};
        vmt_write_all(sock, &q, sizeof q);
    }
    char why[512] = "";
    t_begin("nppin_owner");
    CHECKF(vmt_reap(&owner, why, sizeof why) == 0, "owner: %s", why);
    t_end();
    if (rem) nppin_remote_close(rem);
    if (lrg) nppin_dereg(lrg);
    if (A.np) nppt_side_free(&A);
    TEST(dead_holder_does_not_pin_forever);
    TEST(pinlimit_named);
    TEST(handles_closed);
    return T_DONE();
}
