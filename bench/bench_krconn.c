// VM
// LIBS: -libverbs
/* bench/bench_krconn.c - connection set-up costs on Soft-RoCE (rxe0), in one guest, for
 * bench/bench_krconn.sh (guest role krconn-bench; rdma_cm's cmtime runs beside it in the same
 * guest, see tests/vm/init.sh).
 *   bench_krconn [N]
 * Forks a krconn server process (a context that answers requests and serves a meta directory)
 * and a plain-verbs server process (TCP on port 18620), then times, in this process:
 *   krconn_new/T      a physical connect (KRCONN_CONNECT_NO_VIRTUAL: what a connect to a context
 *                     not yet connected costs), T = 1 or 2 threads; close not timed; with 1
 *                     thread alternated with verbs_tcp/1 (one of each per round, N/2 rounds)
 *   krconn_virtual/T  a connect to a context already connected (one physical connection held)
 *   krconn_lookup_shm, krconn_lookup_meta   a directory lookup (shared memory; RDMA READ)
 *   verbs_tcp/1       create CQ+QP, INIT, swap endpoints over TCP, RTR, RTS (the server does
 *                     the same on its side before it answers); the device stays open; teardown
 *                     not timed
 * Lines: "NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h), "# ..." for humans, and
 * "step NAME STEP US_PER_CONNECT" for the breakdown, "packets NAME PER_CONNECT". */
#define KRCONN_IMPLEMENTATION
#include "krconn.h" /* first: its implementation needs _GNU_SOURCE before any system header */
#include "hist.h"
#include "tests/vm/vmt.h"
#include <arpa/inet.h>
#include <pthread.h>

#define VERBS_PORT 18620

static long long hw(const char *name)
{
    char path[160];
    long long v = -1;
    snprintf(path, sizeof path, "/sys/class/infiniband/rxe0/ports/1/hw_counters/%s", name);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static void die(const char *what, int rc)
{
    char d[400];
    printf("FAIL bench_krconn: %s: %s\n", what, krconn_describe(rc, d, sizeof d));
    exit(1);
}

/* ---------------------------------------------------------------- servers */

static int krconn_server(int fd)
{
    krconn_ctx *ctx;
    krconn_ctx_opts o;
    memset(&o, 0, sizeof o);
    o.pool_size = 32;
    int rc = krconn_ctx_create(&o, &ctx);
    if (rc) die("server ctx", rc);
    if ((rc = krconn_meta_serve(ctx, NULL))) die("meta serve", rc);
    krconn_addr a;
    krconn_ctx_addr(ctx, &a);
    vmt_write_all(fd, &a, sizeof a);
    for (;;) {
        char c = 0;
        if (read(fd, &c, 1) != 1 || c == 'Q') break;
        if (c == 'S') {
            krconn_stats st;
            krconn_ctx_get_stats(ctx, &st);
            vmt_write_all(fd, &st, sizeof st);
        }
    }
    krconn_ctx_destroy(ctx);
    return 0;
}

/* Plain verbs, as most programs do it: per connection a CQ and a QP, endpoints over TCP. */
static int verbs_server(int lfd)
{
    rcp__verbs_dev d;
    if (rcp__verbs_open(NULL, &d)) return 1;
    for (;;) {
        int s = vmt_tcp_accept(lfd, 600000);
        if (s < 0) break;
        unsigned char in[VMT_EP_WIRE], out[VMT_EP_WIRE];
        struct ibv_cq *cq = NULL;
        struct ibv_qp *qp = NULL;
        rcp__verbs_ep me, peer;
        if (vmt_read_all(s, in, sizeof in, 10000) == 0 && vmt_ep_unpack(in, &peer) == 0 &&
            rcp__verbs_cq_create(&d, 128, 0, &cq) == 0 &&
            rcp__verbs_qp_create(&d, cq, cq, NULL, &qp) == 0) {
            vmt_ep_local(&d, qp, 0, 0, &me);
            if (vmt_rc_connect(&d, qp, &me, &peer, NULL) == 0) {
                vmt_ep_pack(&me, out);
                vmt_write_all(s, out, sizeof out);
                char c;
                vmt_read_all(s, &c, 1, 10000); /* the client is done (or gone) */
            }
        }
        if (qp) rcp__verbs_qp_destroy(qp);
        if (cq) rcp__verbs_cq_destroy(cq);
        close(s);
    }
    rcp__verbs_close(&d);
    return 0;
}


/* ---------------------------------------------------------------- probe: GID kinds */

/* What an RTR and an address handle cost towards each kind of GID the port has: the
 * IPv4-mapped RoCE v2 GID krconn uses, the IPv6 link-local RoCE v2 one, a RoCE v1 one if any
 * (the kernel derives a link-local destination's MAC from the GID without the IP stack only
 * when the source GID is RoCE v1). Two RC QPs of this process; the QP is reset and brought back
 * to INIT between RTRs, only the RTR is timed; the kinds alternate round by round. Lines:
 * "# gid ..." (the table), and probe_rtr_KIND/1, probe_ah_KIND/1 in the usual format (KIND:
 * mapped, linklocal, linklocal_rocevone). */
static void probe_gids(int n)
{
    rcp__verbs_dev d;
    struct ibv_cq *cq = NULL;
    struct ibv_qp *qa = NULL, *qb = NULL;
    if (rcp__verbs_open(NULL, &d)) { printf("# probe: no device\n"); return; }
    int idx[3] = {-1, -1, -1}; /* v2 IPv4-mapped, v2 link-local, v1 link-local */
    union ibv_gid gid[3];
    for (int i = 0; i < d.port_attr.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(d.ctx, d.port, (uint32_t)i, &e, 0)) continue;
        if (rcp__verbs_gid_is_zero(&e.gid)) continue;
        char t[64];
        inet_ntop(AF_INET6, e.gid.raw, t, sizeof t);
        int v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
        int ll = e.gid.raw[0] == 0xfe && (e.gid.raw[1] & 0xc0) == 0x80;
        printf("# gid %d %s %s\n", i,
               v2 ? "RoCEv2" : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCEv1" : "IB", t);
        int k = v2 && rcp__verbs_gid_is_v4mapped(&e.gid) ? 0 : v2 && ll ? 1 : !v2 && ll ? 2 : -1;
        if (k >= 0 && idx[k] < 0) { idx[k] = i; gid[k] = e.gid; }
    }
    if (rcp__verbs_cq_create(&d, 16, 0, &cq) || rcp__verbs_qp_create(&d, cq, cq, NULL, &qa) ||
        rcp__verbs_qp_create(&d, cq, cq, NULL, &qb)) {
        printf("# probe: no QPs\n");
        goto out;
    }
    /* names without digits: tests/vm/run.sh passes on "[a-z_]+/[0-9]+ " lines only */
    static const char *kind[3] = {"mapped", "linklocal", "linklocal_rocevone"};
    /* the kinds alternate, one RTR and one address handle each per round, so that all see the
       same load */
    hist hr[3], ha[3];
    uint64_t tr[3] = {0, 0, 0}, ta[3] = {0, 0, 0};
    int err[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        hist_init(&hr[k], (size_t)n);
        hist_init(&ha[k], (size_t)n);
        if (idx[k] < 0) printf("# probe: no %s GID on this port\n", kind[k]);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            if (idx[k] < 0 || err[k]) continue;
            rcp__verbs_dev dk = d;
            dk.gid_index = idx[k];
            rcp__verbs_ep r;
            memset(&r, 0, sizeof r);
            r.qpn = qb->qp_num;
            r.psn = 1;
            memcpy(r.gid, gid[k].raw, 16);
            struct ibv_qp_attr a;
            memset(&a, 0, sizeof a);
            a.qp_state = IBV_QPS_RESET;
            if (ibv_modify_qp(qa, &a, IBV_QP_STATE)) { err[k] = errno; continue; }
            a.qp_state = IBV_QPS_INIT;
            a.port_num = d.port;
            a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
            if (ibv_modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                          IBV_QP_ACCESS_FLAGS)) {
                err[k] = errno;
                continue;
            }
            memset(&a, 0, sizeof a);
            a.qp_state = IBV_QPS_RTR;
            a.path_mtu = d.port_attr.active_mtu;
            a.dest_qp_num = r.qpn;
            a.rq_psn = 1;
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 12;
            rcp__verbs_ah_attr(&dk, &r, &a.ah_attr);
            uint64_t t = hist_now();
            if (ibv_modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
                err[k] = errno;
                continue;
            }
            uint64_t t1 = hist_now();
            hist_add(&hr[k], t1 - t);
            tr[k] += t1 - t;
            struct ibv_ah *ah;
            t = hist_now();
            if (rcp__verbs_ah_create(&dk, &r, &ah)) {
                err[k] = errno ? errno : EIO;
                continue;
            }
            t1 = hist_now();
            hist_add(&ha[k], t1 - t);
            ta[k] += t1 - t;
            ibv_destroy_ah(ah);
        }
    for (int k = 0; k < 3; k++) {
        char name[64];
        if (err[k]) {
            printf("FAIL bench_krconn-probe-%s: gid index %d, after %zu: %s\n", kind[k], idx[k],
                   hr[k].n, strerror(err[k]));
        } else if (idx[k] >= 0) {
            snprintf(name, sizeof name, "probe_rtr_%s/1", kind[k]);
            hist_print(&hr[k], name, (double)n * 1e9 / (double)tr[k]);
            snprintf(name, sizeof name, "probe_ah_%s/1", kind[k]);
            hist_print(&ha[k], name, (double)n * 1e9 / (double)ta[k]);
        }
        hist_free(&hr[k]);
        hist_free(&ha[k]);
    }
out:
    if (qa) rcp__verbs_qp_destroy(qa);
    if (qb) rcp__verbs_qp_destroy(qb);
    if (cq) rcp__verbs_cq_destroy(cq);
    rcp__verbs_close(&d);
}

/* ---------------------------------------------------------------- krconn */

static krconn_ctx *cli;
static krconn_addr srv;
static int srv_fd;

typedef struct job { int n; unsigned flags; hist h; int rc; } job;

static void *connect_loop(void *arg)
{
    job *j = (job *)arg;
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.flags = j->flags;
    for (int i = 0; i < j->n; i++) {
        krconn *k;
        uint64_t t = hist_now();
        int rc = krconn_connect(cli, &srv, &co, &k);
        hist_add(&j->h, hist_now() - t);
        if (rc) { j->rc = rc; return NULL; }
        krconn_disconnect(k);
    }
    return NULL;
}

static void server_stats(krconn_stats *st)
{
    char c = 'S';
    if (write(srv_fd, &c, 1) != 1 || vmt_read_all(srv_fd, st, sizeof *st, 10000))
        die("server stats", -EIO);
}

/* "step NAME STEP US" lines: the client's mean steps over its physical connects between the
   stats c0 and c1, and the peer's over its accepts between s0 and s1 (none where there were
   none). */
static void print_steps(const char *full, const krconn_stats *c0, const krconn_stats *c1,
                        const krconn_stats *s0, const krconn_stats *s1)
{
    static const struct { const char *step; size_t off; int peer; } steps[] = {
        {"pool", offsetof(krconn_stats, ns_pool), 0},
        {"request", offsetof(krconn_stats, ns_request), 0},
        {"RTR+RTS", offsetof(krconn_stats, ns_modify), 0},
        {"RTR+RTS:RTR", offsetof(krconn_stats, ns_modify_rtr), 0},
        {"peer_answer", offsetof(krconn_stats, ns_accept), 1},
        {"peer_answer:RTR", offsetof(krconn_stats, ns_accept_modify), 1},
        {"peer_answer:post_send", offsetof(krconn_stats, ns_accept_send), 1},
        {"peer_after_answer:RTS", offsetof(krconn_stats, ns_accept_rts), 1}};
    uint64_t phys = c1->connects - c0->connects, acc = s1->accepts - s0->accepts;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const krconn_stats *a = steps[i].peer ? s0 : c0, *b = steps[i].peer ? s1 : c1;
        uint64_t n = steps[i].peer ? acc : phys, va, vb;
        memcpy(&va, (const char *)a + steps[i].off, sizeof va);
        memcpy(&vb, (const char *)b + steps[i].off, sizeof vb);
        if (n) printf("step %s %s %.1f\n", full, steps[i].step, (double)(vb - va) / 1e3 / (double)n);
    }
}

/* T threads, n connects each; one histogram over all of them. */
static void run_connects(const char *name, int threads, int n, unsigned flags)
{
    job j[2];
    pthread_t th[2];
    krconn_stats c0, c1, s0, s1;
    krconn_ctx_get_stats(cli, &c0);
    server_stats(&s0);
    usleep(20000); /* hw_counters are cached for about 10 ms: read fresh values */
    long long p0 = hw("sent_pkts"), r0 = hw("rcvd_pkts");
    uint64_t t0 = hist_now();
    for (int i = 0; i < threads; i++) {
        memset(&j[i], 0, sizeof j[i]);
        j[i].n = n;
        j[i].flags = flags;
        if (hist_init(&j[i].h, (size_t)n)) die("hist", -ENOMEM);
        pthread_create(&th[i], NULL, connect_loop, &j[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    uint64_t wall = hist_now() - t0;
    usleep(20000);
    long long p1 = hw("sent_pkts"), r1 = hw("rcvd_pkts");
    krconn_ctx_get_stats(cli, &c1);
    server_stats(&s1);
    for (int i = 0; i < threads; i++) if (j[i].rc) die(name, j[i].rc);
    hist all;
    hist_init(&all, (size_t)n * threads);
    for (int i = 0; i < threads; i++) {
        for (size_t k = 0; k < j[i].h.n; k++) hist_add(&all, j[i].h.ns[k]);
        hist_free(&j[i].h);
    }
    char full[64];
    snprintf(full, sizeof full, "%s/%d", name, threads);
    hist_print(&all, full, (double)n * threads * 1e9 / (double)wall);
    hist_free(&all);
    int total = n * threads;
    /* each side's rxe counts what it sends and receives; both sides are in this guest */
    printf("packets %s %.2f\n", full, (double)(p1 - p0 + r1 - r0) / 2.0 / total);
    uint64_t phys = c1.connects - c0.connects;
    if (phys) {
        print_steps(full, &c0, &c1, &s0, &s1);
        printf("# %s: %llu physical connects, pool fallbacks %llu (client) %llu (server)\n", full,
               (unsigned long long)phys, (unsigned long long)(c1.pool_fallback - c0.pool_fallback),
               (unsigned long long)(s1.pool_fallback - s0.pool_fallback));
    }
}

/* n lookups of a name published in directory d (kind "shm" or "meta", timeout ms), timed one by
   one: the histogram line krconn_lookup_KIND/1; then d is closed. */
static void time_lookups(krconn_dir *d, const char *kind, unsigned ms, int n)
{
    hist h;
    krconn_addr a;
    char what[64];
    int rc;
    snprintf(what, sizeof what, "publish %s", kind);
    if ((rc = krconn_publish(cli, d, "bench-svc", ms))) die(what, rc);
    snprintf(what, sizeof what, "lookup %s", kind);
    hist_init(&h, (size_t)n);
    uint64_t t0 = hist_now();
    for (int i = 0; i < n; i++) {
        uint64_t t = hist_now();
        if ((rc = krconn_lookup(d, "bench-svc", ms, &a))) die(what, rc);
        hist_add(&h, hist_now() - t);
    }
    snprintf(what, sizeof what, "krconn_lookup_%s/1", kind);
    hist_print(&h, what, (double)n * 1e9 / (double)(hist_now() - t0));
    hist_free(&h);
    krconn_dir_close(d);
}

static void run_lookups(int n)
{
    krconn_dir *d;
    size_t len = KRCONN_DIR_BYTES(256);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int rc = krconn_dir_shm(mem, len, &d);
    if (rc) die("dir shm", rc);
    time_lookups(d, "shm", 1000, n);
    munmap(mem, len);
    if ((rc = krconn_dir_meta(cli, "127.0.0.1", 10000, &d))) die("dir meta", rc);
    time_lookups(d, "meta", 10000, n);
}

/* ---------------------------------------------------------------- plain verbs */

/* One plain-verbs connection: steps added to st[0..2] (create, TCP exchange, RTR/RTS); returns
   the total in ns. */
static uint64_t verbs_one(rcp__verbs_dev *d, uint64_t *st)
{
    struct ibv_cq *cq = NULL;
    struct ibv_qp *qp = NULL;
    rcp__verbs_ep me, peer;
    unsigned char out[VMT_EP_WIRE], in[VMT_EP_WIRE];
    uint64_t a = hist_now();
    if (rcp__verbs_cq_create(d, 128, 0, &cq) || rcp__verbs_qp_create(d, cq, cq, NULL, &qp))
        die("verbs create", -EIO);
    uint64_t b = hist_now();
    int s = vmt_tcp_connect("127.0.0.1", VERBS_PORT, 10000);
    if (s < 0) die("verbs tcp", s);
    vmt_ep_local(d, qp, 0, 0, &me);
    vmt_ep_pack(&me, out);
    if (vmt_write_all(s, out, sizeof out) || vmt_read_all(s, in, sizeof in, 10000) ||
        vmt_ep_unpack(in, &peer))
        die("verbs exchange", -EIO);
    uint64_t c = hist_now();
    if (vmt_rc_connect(d, qp, &me, &peer, NULL)) die("verbs rtr/rts", -EIO);
    uint64_t e = hist_now();
    st[0] += b - a;
    st[1] += c - b;
    st[2] += e - c;
    vmt_send_byte(s, 'D');
    close(s);
    rcp__verbs_qp_destroy(qp);
    rcp__verbs_cq_destroy(cq);
    return e - a;
}

/* krconn new-peer connects and plain-verbs connects alternated, one of each per round, so both
   see the same conditions (the host's load moves within a run). */
static void run_new_and_verbs(int n)
{
    rcp__verbs_dev d;
    hist hk, hv;
    uint64_t st[3] = {0, 0, 0}, tk = 0, tv = 0;
    krconn_stats c0, c1, s0, s1;
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    if (rcp__verbs_open(NULL, &d)) die("verbs open", -ENODEV);
    hist_init(&hk, (size_t)n);
    hist_init(&hv, (size_t)n);
    krconn_ctx_get_stats(cli, &c0);
    server_stats(&s0);
    /* per-connect steps, for their medians (the sums in krconn_stats give means, which the
       tail dominates): this side's stats around each connect, the peer's after each close
       (kept only when exactly this connect was accepted since the last look) */
    enum { S_REQ, S_RTR, S_RTS, S_PEER, S_PRTR, S_PPOST, S_WIRE, S_N };
    static const char *sname[S_N] = {"request", "RTR", "RTS", "peer_answer", "peer_answer:RTR",
                                     "peer_answer:post_send", "request-peer_answer"};
    hist sh[S_N];
    for (int j = 0; j < S_N; j++) hist_init(&sh[j], (size_t)n);
    krconn_stats ca, cb, sa = s0, sb;
    memset(&ca, 0, sizeof ca);
    memset(&cb, 0, sizeof cb);
    memset(&sb, 0, sizeof sb);
    for (int i = 0; i < n; i++) { /* packets per connect: see krconn_new/2 */
        krconn *k;
        krconn_ctx_get_stats(cli, &ca);
        uint64_t t = hist_now();
        int rc = krconn_connect(cli, &srv, &co, &k);
        uint64_t dt = hist_now() - t;
        if (rc) die("krconn_new", rc);
        hist_add(&hk, dt);
        tk += dt;
        krconn_ctx_get_stats(cli, &cb);
        krconn_disconnect(k);
        hist_add(&sh[S_REQ], cb.ns_request - ca.ns_request);
        hist_add(&sh[S_RTR], cb.ns_modify_rtr - ca.ns_modify_rtr);
        hist_add(&sh[S_RTS], (cb.ns_modify - ca.ns_modify) - (cb.ns_modify_rtr - ca.ns_modify_rtr));
        server_stats(&sb);
        if (sb.accepts == sa.accepts + 1) {
            hist_add(&sh[S_PEER], sb.ns_accept - sa.ns_accept);
            hist_add(&sh[S_PRTR], sb.ns_accept_modify - sa.ns_accept_modify);
            hist_add(&sh[S_PPOST], sb.ns_accept_send - sa.ns_accept_send);
            uint64_t rq = cb.ns_request - ca.ns_request, pa = sb.ns_accept - sa.ns_accept;
            hist_add(&sh[S_WIRE], rq > pa ? rq - pa : 0);
        }
        sa = sb;
        dt = verbs_one(&d, st);
        hist_add(&hv, dt);
        tv += dt;
    }
    krconn_ctx_get_stats(cli, &c1);
    server_stats(&s1);
    /* connects per second from the time spent in each alone */
    hist_print(&hk, "krconn_new/1", (double)n * 1e9 / (double)tk);
    hist_print(&hv, "verbs_tcp/1", (double)n * 1e9 / (double)tv);
    const char *full = "krconn_new/1";
    print_steps(full, &c0, &c1, &s0, &s1);
    printf("# krconn_new/1: the peer's steps of %zu of %d connects seen one by one\n",
           sh[S_PEER].n, n);
    for (int j = 0; j < S_N; j++) {
        if (sh[j].n)
            printf("step %s median:%s %.1f\n", full, sname[j], (double)hist_median(&sh[j]) / 1e3);
        hist_free(&sh[j]);
    }
    printf("step verbs_tcp/1 create_cq_qp_init %.1f\n", (double)st[0] / 1e3 / n);
    printf("step verbs_tcp/1 tcp_connect_exchange %.1f\n", (double)st[1] / 1e3 / n);
    printf("step verbs_tcp/1 RTR+RTS %.1f\n", (double)st[2] / 1e3 / n);
    hist_free(&hk);
    hist_free(&hv);
    rcp__verbs_close(&d);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 400;
    int sv[2], rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
    pid_t ks = fork();
    if (ks == 0) { close(sv[0]); _exit(krconn_server(sv[1])); }
    close(sv[1]);
    srv_fd = sv[0];
    int lfd = vmt_tcp_listen(VERBS_PORT);
    pid_t vs = fork();
    if (vs == 0) _exit(verbs_server(lfd));
    close(lfd);
    if (vmt_read_all(srv_fd, &srv, sizeof srv, 60000)) die("server start", -EIO);
    krconn_ctx_opts o;
    memset(&o, 0, sizeof o);
    o.pool_size = 32;
    if ((rc = krconn_ctx_create(&o, &cli))) die("client ctx", rc);
    /* warm up: address handles, pools, caches */
    job w;
    memset(&w, 0, sizeof w);
    w.n = 20;
    w.flags = KRCONN_CONNECT_NO_VIRTUAL;
    hist_init(&w.h, 20);
    connect_loop(&w);
    hist_free(&w.h);
    usleep(200000);

    run_new_and_verbs(n / 2);
    usleep(200000);
    run_connects("krconn_new", 2, n / 2, KRCONN_CONNECT_NO_VIRTUAL);
    krconn *held;
    if ((rc = krconn_connect(cli, &srv, NULL, &held))) die("held connect", rc);
    run_connects("krconn_virtual", 1, n * 10, 0);
    run_connects("krconn_virtual", 2, n * 5, 0);
    krconn_disconnect(held);
    run_lookups(n);
    probe_gids(n / 4);

    krconn_ctx_destroy(cli);
    if (write(srv_fd, "Q", 1) != 1) {}
    waitpid(ks, NULL, 0);
    kill(vs, SIGTERM);
    waitpid(vs, NULL, 0);
    printf("ok bench_krconn\n");
    return 0;
}
