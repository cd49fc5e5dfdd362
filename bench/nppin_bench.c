// VM
// LIBS: -libverbs
/* bench/nppin_bench.c - nppin.h's benchmark, run in the guest by `tests/vm/run.sh
 * nppin-bench` (bench/bench_nppin.sh). Every figure is measured against its peer in this run:
 *   reg/...      register 1 GiB of which 1% (the first 10.24 MiB) was touched: nppin_reg plus
 *                moving the touched part through nppin, against one ibv_reg_mr of the region;
 *                time, pinned (VmPin) and resident memory
 *   read64/...   remote 64 B READ: raw verbs on a plain MR against nppin on a leased chunk
 *   firsttouch   remote 64 B READ of a chunk nobody used yet (lease request, registration)
 *   churn/...    remote 4 KiB READs at random places over 1 GiB under a 64 MiB budget, against
 *                4 KiB READs inside one leased chunk
 * Machine lines: "nppin_bench NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h's four fields);
 * other figures as "nppin_bench NAME VALUE UNIT". */
#include "tests/vm/nppt.h"
#include "hist.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CHUNK (2 * MiB)

static void line(const char *name, double v, const char *unit)
{
    printf("nppin_bench %s %.6g %s\n", name, v, unit);
}

static void hist_line(hist *h, const char *name, uint64_t wall_ns)
{
    printf("nppin_bench ");
    hist_print(h, name, hist_ops_per_s(h->n, wall_ns));
}

/* ---------------------------------------------------------------- the owner (a child) */

typedef struct owner_arg { size_t budget; } owner_arg;

/* The two histograms of one measure as lines, or a FAIL line if rc says it failed; frees both. */
static void hist_pair(int rc, const char *what, hist *a, const char *na, uint64_t wa, hist *b,
                      const char *nb, uint64_t wb)
{
    if (rc) {
        printf("FAIL nppin-bench: %s: %s\n", what, nppin_strerror(rc));
    } else {
        hist_line(a, na, wa);
        hist_line(b, nb, wb);
    }
    hist_free(a);
    hist_free(b);
}

static int owner_role(int fd, void *arg, char *why, size_t whylen)
{
    owner_arg *oa = (owner_arg *)arg;
    nppt_side s;
    const char *step = "";
    nppin_opts o = {.chunk_size = CHUNK, .budget = oa->budget};
    nppin_region *rg = NULL;
    unsigned char *mem = (unsigned char *)mmap(NULL, GiB, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    unsigned char *plain = (unsigned char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct ibv_mr *mr = NULL;
    int rc = nppt_side_setup(fd, &o, &s, &step);
    if (rc) VMT_FAILF("owner setup: %s: %s", step, nppin_strerror(rc));
    VMT_TRY(nppin_reg(s.np, mem, GiB, &rg));
    VMT_TRY(rcp__verbs_reg(&s.d, plain, 4096, 0, &mr));
    {
        unsigned char h[NPPIN_HANDLE_SIZE + 12];
        nppin_region_export(rg, h);
        vmt_put64(h + NPPIN_HANDLE_SIZE, (uintptr_t)plain);
        rcp__verbs_put32(h + NPPIN_HANDLE_SIZE + 8, mr->rkey);
        VMT_TRY(vmt_write_all(fd, h, sizeof h));
        char c = 0;
        VMT_TRY(nppt_read_progress(fd, &c, 1, s.peer_np, 160000));
        nppin_stats st;
        nppin_get_stats(s.np, &st);
        printf("# owner (budget %zu MiB): pinned peak %zu MiB, %llu evictions, %llu leases, "
               "%llu busy answers, %llu revocations\n", st.budget >> 20, st.pinned_peak >> 20,
               (unsigned long long)st.evictions, (unsigned long long)st.leases_granted,
               (unsigned long long)st.leases_busy, (unsigned long long)st.revokes_sent);
    }
out:
    if (mr) rcp__verbs_dereg(mr);
    if (rg) nppin_dereg(rg);
    if (s.np) nppt_side_free(&s);
    munmap(mem, GiB);
    munmap(plain, 4096);
    return why[0] ? -1 : 0;
}

/* ---------------------------------------------------------------- the client */

typedef struct client {
    vmt_child ch;
    int sock;
    nppt_side s;
    nppin_remote *rm;
    uint64_t rbase, plain_addr;
    uint32_t plain_rkey;
    unsigned char *lbuf;        /* 4 MiB: an nppin region */
    nppin_region *lrg;
    unsigned char *raw;         /* 4 KiB: a plain MR */
    struct ibv_mr *raw_mr;
} client;

static int client_start(client *c, size_t owner_budget)
{
    static owner_arg oa;
    const char *step = "";
    memset(c, 0, sizeof *c);
    oa.budget = owner_budget;
    if (vmt_spawn_sock(owner_role, &oa, &c->ch, &c->sock)) return -1;
    nppin_opts o = {.chunk_size = CHUNK, .budget = 16 * MiB};
    int rc = nppt_side_setup(c->sock, &o, &c->s, &step);
    if (rc) { printf("FAIL nppin-bench: setup: %s: %s\n", step, nppin_strerror(rc)); return rc; }
    unsigned char h[NPPIN_HANDLE_SIZE + 12];
    if ((rc = vmt_read_all(c->sock, h, sizeof h, 60000))) return rc;
    if ((rc = nppin_remote_open(c->s.peer_np, h, &c->rm))) return rc;
    c->rbase = nppin__get64(h + 8);
    c->plain_addr = vmt_get64(h + NPPIN_HANDLE_SIZE);
    c->plain_rkey = rcp__verbs_get32(h + NPPIN_HANDLE_SIZE + 8);
    c->lbuf = (unsigned char *)mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    c->raw = (unsigned char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((rc = nppin_reg(c->s.np, c->lbuf, 4 * MiB, &c->lrg))) return rc;
    return rcp__verbs_reg(&c->s.d, c->raw, 4096, 0, &c->raw_mr);
}

static void client_end(client *c)
{
    char why[512];
    vmt_send_byte(c->sock, 'Q');
    if (vmt_reap(&c->ch, why, sizeof why)) printf("FAIL nppin-bench: owner: %s\n", why);
    if (c->rm) nppin_remote_close(c->rm);
    if (c->lrg) nppin_dereg(c->lrg);
    if (c->raw_mr) rcp__verbs_dereg(c->raw_mr);
    if (c->s.np) nppt_side_free(&c->s);
    close(c->sock);
    munmap(c->lbuf, 4 * MiB);
    munmap(c->raw, 4096);
}

static int raw_read(client *c, uint32_t len)
{
    struct ibv_wc wc;
    int rc = rcp__verbs_post_read(c->s.dqp, 1, c->raw, len, c->raw_mr->lkey, c->plain_addr,
                                  c->plain_rkey, IBV_SEND_SIGNALED);
    if (rc) return rc;
    for (;;) {
        int n = ibv_poll_cq(c->s.dcq, 1, &wc);
        if (n < 0) return -EIO;
        if (n) return wc.status == IBV_WC_SUCCESS ? 0 : -EIO;
    }
}

static int np_read(client *c, uint64_t off, uint32_t len)
{
    struct ibv_wc wc;
    nppin_target t = {.addr = c->rbase + off, .remote = c->rm};
    int rc = nppin_post_read(c->s.np, c->s.dqp, 1, c->lbuf, len, &t, 0);
    if (rc) return rc;
    for (;;) {
        int n = nppin_poll(c->s.np, c->s.dcq, &wc, 1);
        if (n < 0) return n;
        if (n) return wc.status == IBV_WC_SUCCESS ? 0 : -EIO;
    }
}

#define LAT_N 3000

static void read_latency(client *c)
{
    hist hr, hn;
    if (hist_init(&hr, LAT_N) || hist_init(&hn, LAT_N)) return;
    int rc = 0;
    for (int i = 0; i < 200 && !rc; i++) { /* warm */
        rc = raw_read(c, 64);
        if (!rc) rc = np_read(c, 8 * MiB, 64);
    }
    uint64_t wall_r = 0, wall_n = 0;
    /* alternate blocks of 100 so drift under TCG hits both alike */
    for (int b = 0; b < LAT_N / 100 && !rc; b++) {
        uint64_t t0 = hist_now();
        for (int i = 0; i < 100 && !rc; i++) {
            uint64_t s = hist_now();
            rc = raw_read(c, 64);
            hist_add(&hr, hist_now() - s);
        }
        uint64_t t1 = hist_now();
        for (int i = 0; i < 100 && !rc; i++) {
            uint64_t s = hist_now();
            rc = np_read(c, 8 * MiB + (uint64_t)(i % 64) * 64, 64);
            hist_add(&hn, hist_now() - s);
        }
        wall_r += t1 - t0;
        wall_n += hist_now() - t1;
    }
    hist_pair(rc, "read64", &hr, "read64/raw_verbs", wall_r, &hn, "read64/nppin_leased",
              wall_n);
}

/* Reads of chunks nobody used yet (TOUCH_N of them), then of the same chunk again. */
enum { TOUCH_N = 80 };
static void first_touch(client *c)
{
    hist h, hw;
    if (hist_init(&h, TOUCH_N) || hist_init(&hw, TOUCH_N)) return;
    int rc = 0;
    uint64_t wall = 0, wall_w = 0;
    for (int i = 0; i < TOUCH_N && !rc; i++) {
        uint64_t off = (uint64_t)(16 + i * 3) * CHUNK + 4096; /* chunks nobody used */
        uint64_t s = hist_now();
        rc = np_read(c, off, 64);
        uint64_t d = hist_now() - s;
        hist_add(&h, d);
        wall += d;
        s = hist_now();
        if (!rc) rc = np_read(c, off + 64, 64); /* the same chunk again: leased now */
        d = hist_now() - s;
        hist_add(&hw, d);
        wall_w += d;
    }
    hist_pair(rc, "firsttouch", &h, "firsttouch/nppin", wall, &hw, "firsttouch/then_leased",
              wall_w);
}

static void churn(client *c)
{
    enum { N = 400 };
    hist h, hw;
    if (hist_init(&h, N) || hist_init(&hw, N)) return;
    uint64_t rng = 12345;
    int rc = 0;
    uint64_t t0 = hist_now();
    for (int i = 0; i < N && !rc; i++) {
        uint64_t off = (t_rng(&rng) % (GiB / 4096 - 1)) * 4096;
        uint64_t s = hist_now();
        rc = np_read(c, off, 4096);
        hist_add(&h, hist_now() - s);
    }
    uint64_t t1 = hist_now();
    for (int i = 0; i < N && !rc; i++) {
        uint64_t s = hist_now();
        rc = np_read(c, 900 * MiB + (uint64_t)(i % 256) * 4096, 4096);
        hist_add(&hw, hist_now() - s);
    }
    uint64_t t2 = hist_now();
    hist_pair(rc, "churn", &h, "churn/random_1GiB_budget64MiB", t1 - t0, &hw, "churn/one_leased_chunk",
              t2 - t1);
}

/* ---------------------------------------------------------------- registration, one process */

static void registration(void)
{
    rcp__verbs_dev d;
    int rc = rcp__verbs_open(NULL, &d);
    if (rc) { printf("FAIL nppin-bench: open: %s\n", strerror(-rc)); return; }
    size_t touched = GiB / 100;
    /* nppin: register, then move the touched part through it (WRITE to a plain MR target of
       this process over a loopback QP pair), so the touched chunks really are registered */
    struct ibv_cq *cq = NULL;
    struct ibv_qp *qa = NULL, *qb = NULL;
    rcp__verbs_ep ea, eb;
    rcp__verbs_cq_create(&d, 256, 0, &cq);
    rcp__verbs_qp_create(&d, cq, cq, NULL, &qa);
    rcp__verbs_qp_create(&d, cq, cq, NULL, &qb);
    vmt_ep_local(&d, qa, 0, 0, &ea);
    vmt_ep_local(&d, qb, 0, 0, &eb);
    if (!qa || !qb || vmt_rc_connect(&d, qa, &ea, &eb, NULL) || vmt_rc_connect(&d, qb, &eb, &ea, NULL)) {
        printf("FAIL nppin-bench: loopback qp\n");
        return;
    }
    unsigned char *sink = (unsigned char *)mmap(NULL, 12 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct ibv_mr *sink_mr = NULL;
    rcp__verbs_reg(&d, sink, 12 * MiB, 0, &sink_mr);
    enum { NR = 200, RR = 2 };
    hist hn, hr;
    hist_init(&hn, NR);
    hist_init(&hr, RR);
    long np_rss = 0, np_pin = 0, raw_rss = 0, raw_pin = 0;
    size_t np_pinned = 0;
    for (int i = 0; i < NR; i++) {
        nppin_ctx *np = NULL;
        nppin_opts o = {.chunk_size = CHUNK, .budget = 64 * MiB};
        if ((rc = nppin_create(d.pd, &o, &np))) break;
        unsigned char *m = (unsigned char *)mmap(NULL, GiB, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        long rss0 = nppt_rss_kb(), pin0 = nppt_pinned_kb();
        nppin_region *rg = NULL;
        uint64_t s = hist_now();
        rc = nppin_reg(np, m, GiB, &rg);
        hist_add(&hn, hist_now() - s);
        if (!rc && i == NR - 1) { /* once: touch 1% and move it */
            memset(m, 0x5a, touched);
            nppin_target t = {.addr = (uintptr_t)sink, .rkey = sink_mr->rkey};
            rc = nppin_xfer(np, qa, cq, NPPIN_OP_WRITE, m, touched, &t, 0, 60 * VMT_SEC);
            nppin_stats st;
            nppin_get_stats(np, &st);
            np_pinned = st.pinned;
            np_rss = nppt_rss_kb() - rss0;
            np_pin = nppt_pinned_kb() - pin0;
        }
        if (rg) nppin_dereg(rg);
        nppin_destroy(np);
        munmap(m, GiB);
        if (rc) break;
    }
    if (rc) { printf("FAIL nppin-bench: reg: %s\n", nppin_strerror(rc)); return; }
    for (int i = 0; i < RR; i++) {
        unsigned char *m = (unsigned char *)mmap(NULL, GiB, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        memset(m, 0x5a, touched);
        long rss0 = nppt_rss_kb(), pin0 = nppt_pinned_kb();
        struct ibv_mr *mr = NULL;
        uint64_t s = hist_now();
        rc = rcp__verbs_reg(&d, m, GiB, 0, &mr);
        hist_add(&hr, hist_now() - s);
        if (!rc && i == 0) {
            raw_rss = nppt_rss_kb() - rss0;
            raw_pin = nppt_pinned_kb() - pin0;
        }
        if (mr) rcp__verbs_dereg(mr);
        munmap(m, GiB);
        if (rc) { printf("FAIL nppin-bench: ibv_reg_mr of 1 GiB: %s\n", strerror(-rc)); return; }
    }
    hist_line(&hn, "reg/nppin_reg_1GiB", 0);
    hist_line(&hr, "reg/ibv_reg_mr_1GiB", 0);
    line("reg/touched_kib", (double)(touched >> 10), "KiB");
    line("reg/nppin_pinned_after_touch_kib", (double)(np_pinned >> 10), "KiB");
    line("reg/nppin_vmpin_kib", (double)np_pin, "KiB");
    line("reg/nppin_rss_kib", (double)np_rss, "KiB");
    line("reg/ibv_reg_mr_vmpin_kib", (double)raw_pin, "KiB");
    line("reg/ibv_reg_mr_rss_kib", (double)raw_rss, "KiB");
    hist_free(&hn);
    hist_free(&hr);
    rcp__verbs_dereg(sink_mr);
    munmap(sink, 12 * MiB);
    rcp__verbs_qp_destroy(qa);
    rcp__verbs_qp_destroy(qb);
    rcp__verbs_cq_destroy(cq);
    rcp__verbs_close(&d);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    client c;
    uint64_t t0 = rcp__now_ns();
    if (client_start(&c, 768 * MiB) == 0) {
        read_latency(&c);
        first_touch(&c);
    }
    client_end(&c);
    printf("# latency phases: %.1f s\n", (rcp__now_ns() - t0) / 1e9);
    t0 = rcp__now_ns();
    if (client_start(&c, 64 * MiB) == 0) churn(&c);
    client_end(&c);
    printf("# churn phase: %.1f s\n", (rcp__now_ns() - t0) / 1e9);
    t0 = rcp__now_ns();
    registration();
    printf("# registration phase: %.1f s\n", (rcp__now_ns() - t0) / 1e9);
    printf("ok nppin-bench\n");
    return 0;
}
