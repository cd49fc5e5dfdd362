// VM
// LIBS: -libverbs
// VM-ASAN
// VM-TSAN
/* tests/vm/test_krconn_events.c - krconn.h's completion events and raw-verbs wr_ids on
 * Soft-RoCE (rxe0), two contexts of one process connected to each other:
 *   events_send_wakes     an armed receiver's channel fd becomes readable when a message comes,
 *                         krconn_event_ack takes >= 1 event, the message is there
 *   events_quiet          armed with nothing sent: the fd stays unreadable for 100 ms
 *   events_notsup         a context without KRCONN_CTX_EVENTS: KRCONN_E_NOTSUP
 *   events_recycle        an event left unread when the connection closes: the QP goes back to
 *                         the pool, the next connection starts quiet, the contexts close
 *   raw_wr_id_chain       a chain of raw ibv_post_send WRITEs on krconn_qp (plain wr_ids < 2^48
 *                         on a connected, non-virtual connection; krconn_wr_id on a virtual one)
 *                         comes back from krconn_poll with the ids posted
 *   keepalive_live_idle   keepalive_ms = 100 on a connection with no traffic to a live peer: pings
 *                         go out, nothing is reported for 12 intervals
 *   keepalive_peer_killed the peer process is killed: the idle connection reports
 *                         KRCONN_E_PEERDEAD (poll and post) within 2 * keepalive_ms + the retry
 *                         bound; a context without keepalive sees nothing (the control)
 */
#define KRCONN_IMPLEMENTATION
#include "../../krconn.h"
#include "vmt.h"
#include <fcntl.h>
#include <poll.h>

#define TMO 10000
#define BUF (64u << 10)

static krconn_ctx *sctx, *cctx;
static krconn_mr smr, cmr;
static unsigned char *sbuf, *cbuf;

static krconn_ctx *ctx_ka(unsigned flags, unsigned backlog, unsigned keepalive_ms)
{
    krconn_ctx_opts o;
    krconn_ctx *c = NULL;
    char d[400];
    memset(&o, 0, sizeof o);
    o.flags = flags;
    o.accept_backlog = backlog;
    o.pool_size = 4;
    o.keepalive_ms = keepalive_ms;
    int rc = krconn_ctx_create(&o, &c);
    krconn_describe(rc, d, sizeof d);
    CHECKF(rc == 0, "krconn_ctx_create: %s", d);
    return c;
}

static krconn_ctx *ctx_new(unsigned flags, unsigned backlog) { return ctx_ka(flags, backlog, 0); }

/* A client connection to sctx and the server's side of it. */
static int pair(unsigned flags, krconn **k, krconn **a)
{
    krconn_addr sa;
    krconn_connect_opts co;
    char d[400];
    memset(&co, 0, sizeof co);
    co.timeout_ms = TMO;
    co.flags = flags;
    *k = *a = NULL;
    krconn_ctx_addr(sctx, &sa);
    int rc = krconn_connect(cctx, &sa, &co, k);
    krconn_describe(rc, d, sizeof d);
    CHECKF(rc == 0, "connect: %s", d);
    if (rc) return rc;
    rc = krconn_accept(sctx, TMO, a);
    CHECKF(rc == 0, "accept: %s", krconn_strerror(rc));
    if (rc) { krconn_disconnect(*k); *k = NULL; }
    return rc;
}

static int readable(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN, .revents = 0};
    return poll(&pf, 1, ms);
}

/* k sends to a (which has a receive posted): watched's event fd becomes readable, its event
   is taken, and both sides' completions come. */
static void send_seen(krconn *k, krconn *a, krconn *watched, int fd, uint64_t id)
{
    krconn_wc wc;
    CHECK_EQ(krconn_post_send(k, id, &cmr, cbuf, 8, 0), 0);
    CHECK_EQ(readable(fd, 5000), 1);
    CHECK(krconn_event_ack(watched) >= 1);
    CHECK_EQ(krconn_wait(watched, &wc, TMO), 0);
    CHECK_EQ(krconn_wait(watched == k ? a : k, &wc, TMO), 0);
}

static void events_send_wakes(void)
{
    krconn *k, *a;
    krconn_wc wc;
    if (pair(KRCONN_CONNECT_NO_VIRTUAL, &k, &a)) return;
    int fd = krconn_event_fd(a);
    CHECKF(fd >= 0, "event_fd: %s", krconn_strerror(fd));
    CHECK(fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK));
    CHECK_EQ(krconn_post_recv(a, 7, &smr, sbuf, 4096), 0);
    CHECK_EQ(krconn_poll(a, &wc, 1, 0), 0);
    CHECK_EQ(krconn_arm(a), 0);
    CHECK_EQ(krconn_poll(a, &wc, 1, 0), 0); /* the re-poll after arming */
    CHECK_EQ(krconn_event_ack(a), 0);
    memset(cbuf, 0x5a, 100);
    CHECK_EQ(krconn_post_send(k, 9, &cmr, cbuf, 100, 0), 0);
    uint64_t t0 = rcp__now_ns();
    int r = readable(fd, 5000);
    printf("# events: receiver's fd readable after %.0f us\n", (double)(rcp__now_ns() - t0) / 1e3);
    CHECKF(r == 1, "poll on the event fd: %d (errno %d)", r, errno);
    int n = krconn_event_ack(a);
    CHECKF(n >= 1, "event_ack: %d", n);
    CHECK_EQ(readable(fd, 0), 0); /* all taken */
    CHECK_EQ(krconn_poll(a, &wc, 1, TMO), 1);
    CHECK_EQ(wc.status, 0);
    CHECK_EQ(wc.wr_id, 7);
    CHECK_EQ(wc.op, KRCONN_OP_RECV);
    CHECK_EQ(wc.byte_len, 100);
    CHECK(sbuf[0] == 0x5a && sbuf[99] == 0x5a);
    CHECK_EQ(krconn_wait(k, &wc, TMO), 0);
    CHECK_EQ(wc.wr_id, 9);
    /* the sender's side: armed before its completion, readable after */
    int kfd = krconn_event_fd(k);
    CHECK(kfd >= 0 && kfd != fd);
    CHECK_EQ(krconn_arm(k), 0);
    CHECK_EQ(krconn_post_recv(a, 8, &smr, sbuf, 4096), 0);
    send_seen(k, a, k, kfd, 10);
    krconn_disconnect(k);
    krconn_disconnect(a);
}

static void events_quiet(void)
{
    krconn *k, *a;
    krconn_wc wc;
    if (pair(KRCONN_CONNECT_NO_VIRTUAL, &k, &a)) return;
    int fd = krconn_event_fd(a);
    CHECK(fd >= 0);
    CHECK_EQ(krconn_post_recv(a, 1, &smr, sbuf, 4096), 0);
    CHECK_EQ(krconn_arm(a), 0);
    CHECK_EQ(krconn_poll(a, &wc, 1, 0), 0);
    CHECK_EQ(readable(fd, 100), 0);
    CHECK_EQ(krconn_event_ack(a), 0);
    /* a positive control on the same connection: one message makes it readable */
    send_seen(k, a, a, fd, 2);
    krconn_disconnect(k);
    krconn_disconnect(a);
}

static void events_notsup(void)
{
    krconn_ctx *plain = ctx_new(0, 0);
    if (!plain) return;
    krconn_addr sa;
    krconn *k = NULL, *a = NULL;
    krconn_ctx_addr(sctx, &sa);
    int rc = krconn_connect(plain, &sa, NULL, &k);
    CHECKF(rc == 0, "connect: %s", krconn_strerror(rc));
    if (!rc) {
        CHECK_EQ(krconn_event_fd(k), KRCONN_E_NOTSUP);
        CHECK_EQ(krconn_arm(k), KRCONN_E_NOTSUP);
        CHECK_EQ(krconn_event_ack(k), KRCONN_E_NOTSUP);
        CHECK_EQ(krconn_accept(sctx, TMO, &a), 0);
        CHECK(a && krconn_event_fd(a) >= 0); /* the server's side has EVENTS */
        krconn_disconnect(k);
        if (a) krconn_disconnect(a);
    }
    CHECK_EQ(krconn_event_fd(NULL), KRCONN_E_INVAL);
    CHECK_EQ(krconn_arm(NULL), KRCONN_E_INVAL);
    CHECK_EQ(krconn_event_ack(NULL), KRCONN_E_INVAL);
    krconn_ctx_destroy(plain);
}

static void events_recycle(void)
{
    krconn *k, *a;
    krconn_wc wc;
    krconn_stats st0, st1;
    krconn_ctx_get_stats(cctx, &st0);
    for (int round = 0; round < 6; round++) {
        if (pair(KRCONN_CONNECT_NO_VIRTUAL, &k, &a)) return;
        int fd = krconn_event_fd(k);
        CHECKF(readable(fd, 0) == 0, "round %d: a fresh connection's fd is readable", round);
        CHECK_EQ(krconn_arm(k), 0);
        CHECK_EQ(krconn_write(k, 1, &cmr, cbuf, 8, (uintptr_t)sbuf, smr.rkey, 0), 0);
        CHECK_EQ(krconn_wait(k, &wc, TMO), 0);
        CHECK_EQ(readable(fd, 5000), 1); /* an event is waiting; left unread on purpose */
        krconn_disconnect(k);
        krconn_disconnect(a);
        /* a QP given back rests for its retry window (67 ms x 7 + 50 ms with the default
           attributes) before the pool hands it out again: past it, later rounds reuse them */
        usleep(700000);
    }
    krconn_ctx_get_stats(cctx, &st1);
    CHECKF(st1.pool_recycled - st0.pool_recycled >= 5, "recycled %llu",
           (unsigned long long)(st1.pool_recycled - st0.pool_recycled));
}

static void raw_wr_id_chain(void)
{
    krconn *k, *a, *v = NULL;
    krconn_wc wc[4];
    if (pair(0, &k, &a)) return;
    CHECK_EQ(krconn_is_virtual(k), 0);
    const uint64_t id1 = 0xabcdef012345ull, id3 = (1ull << 48) - 2;
    CHECK_EQ(krconn_wr_id(k, id1), id1); /* tag 0 on a connected, non-virtual connection */
    struct ibv_sge sg[3];
    struct ibv_send_wr wr[3], *bad = NULL;
    memset(wr, 0, sizeof wr);
    for (int i = 0; i < 3; i++) {
        memset(cbuf + 1024 * i, 0x30 + i, 512);
        sg[i].addr = (uintptr_t)(cbuf + 1024 * i);
        sg[i].length = 512;
        sg[i].lkey = cmr.lkey;
        wr[i].sg_list = &sg[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_WRITE;
        wr[i].wr.rdma.remote_addr = (uintptr_t)(sbuf + 8192 + 1024 * i);
        wr[i].wr.rdma.rkey = smr.rkey;
        wr[i].next = i < 2 ? &wr[i + 1] : NULL;
    }
    wr[0].wr_id = id1;
    wr[0].send_flags = IBV_SEND_SIGNALED;
    wr[1].wr_id = 5; /* unsignaled */
    wr[2].wr_id = id3;
    wr[2].send_flags = IBV_SEND_SIGNALED;
    CHECK_EQ(ibv_post_send(krconn_qp(k), wr, &bad), 0);
    int got = 0;
    uint64_t ids[2] = {0, 0};
    while (got < 2) {
        int n = krconn_poll(k, wc, 2 - got, TMO);
        CHECKF(n >= 1, "poll: %s", krconn_strerror(n));
        if (n < 1) break;
        for (int i = 0; i < n; i++) {
            CHECK_EQ(wc[i].status, 0);
            CHECK_EQ(wc[i].op, KRCONN_OP_WRITE);
            ids[got++] = wc[i].wr_id;
        }
    }
    CHECK_EQ(ids[0], id1);
    CHECK_EQ(ids[1], id3);
    for (int i = 0; i < 3; i++)
        CHECKF(sbuf[8192 + 1024 * i] == 0x30 + i && sbuf[8192 + 1024 * i + 511] == 0x30 + i,
               "write %d did not land", i);
    /* a virtual connection on the same QP: krconn_wr_id carries its tag */
    krconn_addr sa;
    krconn_ctx_addr(sctx, &sa);
    CHECK_EQ(krconn_connect(cctx, &sa, NULL, &v), 0);
    if (v) {
        CHECK_EQ(krconn_is_virtual(v), 1);
        CHECK(krconn_qp(v) == krconn_qp(k));
        CHECK_EQ(krconn_event_fd(v), krconn_event_fd(k));
        uint64_t w = krconn_wr_id(v, 77);
        CHECK(w != 77 && (w & ((1ull << 48) - 1)) == 77);
        struct ibv_send_wr one = wr[0];
        one.next = NULL;
        one.wr_id = w;
        CHECK_EQ(ibv_post_send(krconn_qp(v), &one, &bad), 0);
        one.wr_id = krconn_wr_id(k, 78);
        CHECK_EQ(ibv_post_send(krconn_qp(k), &one, &bad), 0);
        CHECK_EQ(krconn_poll(k, wc, 1, TMO), 1); /* k's own, v's is kept for v */
        CHECK_EQ(wc[0].wr_id, 78);
        CHECK_EQ(krconn_poll(v, wc, 1, TMO), 1);
        CHECK_EQ(wc[0].wr_id, 77);
        krconn_disconnect(v);
    }
    krconn_disconnect(k);
    krconn_disconnect(a);
}

/* ---------------------------------------------------------------- keepalive */

#define KA_MS 100
static vmt_child peer;
static int peer_sock = -1;
static krconn_addr peer_addr;
static int peer_up;

/* A plain context that answers connects until it is told to quit or killed. */
static int peer_role(int fd, void *arg, char *why, size_t whylen)
{
    krconn_ctx *ctx = NULL;
    krconn_addr a;
    char c;
    (void)arg;
    int rc = krconn_ctx_create(NULL, &ctx);
    if (rc) VMT_FAILF("peer ctx: %s", krconn_strerror(rc));
    krconn_ctx_addr(ctx, &a);
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_TRY(vmt_write_all(fd, &a, sizeof a));
    vmt_read_all(fd, &c, 1, 110000);
out:
    if (ctx) krconn_ctx_destroy(ctx);
    return why[0] ? 1 : 0;
}

static krconn_ctx *kactx;
static krconn *ka_k, *plain_k;

static void keepalive_live_idle(void)
{
    krconn_stats st;
    krconn_wc wc;
    CHECK(peer_up);
    if (!peer_up) return;
    kactx = ctx_ka(0, 0, KA_MS);
    if (!kactx) return;
    int rc = krconn_connect(kactx, &peer_addr, NULL, &ka_k);
    CHECKF(rc == 0, "connect: %s", krconn_strerror(rc));
    rc = krconn_connect(cctx, &peer_addr, NULL, &plain_k);
    CHECKF(rc == 0, "connect (no keepalive): %s", krconn_strerror(rc));
    if (!ka_k || !plain_k) return;
    for (int i = 0; i < 24; i++) { /* 12 intervals */
        usleep(KA_MS * 1000 / 2);
        rc = krconn_poll(ka_k, &wc, 1, 0);
        CHECKF(rc == 0, "poll on a live idle connection, after %d ms: %s", (i + 1) * KA_MS / 2,
               krconn_strerror(rc));
        if (rc) break;
    }
    krconn_ctx_get_stats(kactx, &st);
    printf("# keepalive: %llu pings in 12 intervals, %llu dead\n",
           (unsigned long long)st.keepalive_sent, (unsigned long long)st.keepalive_dead);
    CHECKF(st.keepalive_sent >= 4, "pings sent: %llu", (unsigned long long)st.keepalive_sent);
    CHECK_EQ(st.keepalive_dead, 0);
    CHECK_EQ(krconn_ping(ka_k, TMO), 0);
}

static void keepalive_peer_killed(void)
{
    krconn_wc wc;
    krconn_stats st;
    char why[512];
    if (!ka_k || !plain_k) { CHECKF(0, "no connection (keepalive_live_idle failed)"); return; }
    kill(peer.pid, SIGKILL);
    uint64_t t0 = rcp__now_ns();
    vmt_reap(&peer, why, sizeof why);
    peer_up = 0;
    int rc = 0;
    while (rcp__now_ns() - t0 < 10 * VMT_SEC) {
        rc = krconn_poll(ka_k, &wc, 1, 0);
        if (rc) break;
        usleep(2000);
    }
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    /* the documented bound: 2 * keepalive_ms + the retry bound (retry_cnt 6: 7 sends, timeout
       14: 67.1 ms apart), plus 300 ms of scheduling slack under TCG */
    double bound = 2.0 * KA_MS + 7 * 67.1 + 300;
    printf("# keepalive: killed peer reported after %.0f ms (bound %.0f ms)\n", ms, bound);
    CHECKF(rc == KRCONN_E_PEERDEAD, "poll after the kill: %s", krconn_strerror(rc));
    CHECKF(ms <= bound, "reported after %.0f ms, bound %.0f ms", ms, bound);
    CHECK_EQ(krconn_write(ka_k, 1, &cmr, cbuf, 8, 0, 0, 0), KRCONN_E_PEERDEAD);
    CHECK_EQ(krconn_wait(ka_k, &wc, 100), KRCONN_E_PEERDEAD);
    krconn_ctx_get_stats(kactx, &st);
    CHECK_EQ(st.keepalive_dead, 1);
    /* the control: without keepalive nothing is noticed until an operation */
    CHECK_EQ(krconn_poll(plain_k, &wc, 1, 0), 0);
    krconn_disconnect(ka_k);
    krconn_disconnect(plain_k);
    ka_k = plain_k = NULL;
    CHECK_EQ(krconn_ctx_destroy(kactx), 0);
    kactx = NULL;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    t_begin("krconn_events_setup");
    /* the keepalive tests' peer process, forked before this process has threads */
    if (vmt_spawn_sock(peer_role, NULL, &peer, &peer_sock) == 0 &&
        vmt_expect_byte(peer_sock, 'R', 60000) == 0 &&
        vmt_read_all(peer_sock, &peer_addr, sizeof peer_addr, 10000) == 0)
        peer_up = 1;
    CHECK(peer_up);
    sctx = ctx_new(KRCONN_CTX_EVENTS, 16);
    cctx = ctx_new(KRCONN_CTX_EVENTS, 0);
    sbuf = (unsigned char *)aligned_alloc(4096, BUF);
    cbuf = (unsigned char *)aligned_alloc(4096, BUF);
    memset(sbuf, 0, BUF);
    memset(cbuf, 0, BUF);
    if (sctx) CHECK_EQ(krconn_reg(sctx, sbuf, BUF, 0, &smr), 0);
    if (cctx) CHECK_EQ(krconn_reg(cctx, cbuf, BUF, 0, &cmr), 0);
    t_end();
    if (sctx && cctx && smr.mr && cmr.mr) {
        TEST(events_send_wakes);
        TEST(events_quiet);
        TEST(events_notsup);
        TEST(events_recycle);
        TEST(raw_wr_id_chain);
        TEST(keepalive_live_idle);
        TEST(keepalive_peer_killed);
    }
    t_begin("krconn_events_teardown");
    if (smr.mr) CHECK_EQ(krconn_dereg(&smr), 0);
    if (cmr.mr) CHECK_EQ(krconn_dereg(&cmr), 0);
    if (cctx) CHECK_EQ(krconn_ctx_destroy(cctx), 0);
    if (sctx) CHECK_EQ(krconn_ctx_destroy(sctx), 0);
    if (peer_up) {
        char why[512] = "";
        vmt_send_byte(peer_sock, 'Q');
        CHECKF(vmt_reap(&peer, why, sizeof why) == 0, "peer: %s", why);
    }
    if (peer_sock >= 0) close(peer_sock);
    t_end();
    free(sbuf);
    free(cbuf);
    return T_DONE();
}
