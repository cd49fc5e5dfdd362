// VM
// LIBS: -libverbs
// VM-ASAN
// VM-TSAN
/* tests/vm/test_krconn.c - krconn.h on Soft-RoCE (rxe0) in one guest: server contexts run in
 * child processes, the tests connect to them from the parent.
 *   data on every connection (send/recv, write, read, CAS, FAA), physical and virtual
 *   virtual connect sends no packet (rxe0's hw_counters)
 *   4 threads connecting at once (virtual and physical)
 *   10000 connect/close cycles: QP, CQ, MR counts of `rdma resource` unchanged, pool bounded
 *   a peer killed: the next operation and krconn_ping report it within a bound
 *   a dead or absent service: a clear error within the deadline; pool empty + NOWAIT
 *   a stale directory entry (the service restarted): detected, refetched, never used again,
 *     through a second directory that still names it too (KRCONN_E_STALE at once)
 *   NO_VIRTUAL connections are private on both sides; plain connects share only shared ones
 *   a connect to a host that does not answer neighbour resolution lasts its whole deadline
 *   garbage on the UD QP from a fuzzer: dropped and counted, no crash, no QP to the wrong peer
 *   the meta server (bootstrap over TCP, lookup by RDMA READ, publish by UD)
 *   unpublish, in the heap's directory and at the meta server: then lookup is not found; an
 *     unknown name, a name withdrawn already or another context's is not found (and stays);
 *     published again, found again; a connect by a name cached before it was withdrawn and its
 *     context gone ends with KRCONN_E_NOTFOUND at once, not at its deadline
 * The directory inside the guest is a shmheap (krconn_dir_heap).
 *   test_krconn [CYCLES]      the single-guest tests
 *   test_krconn a|b PEER_IP   two guests: a runs a meta server and a service, b connects to it
 *                            through KRCONN_META=PEER_IP (stale entry, killed peer across guests)
 */
#define KRCONN_IMPLEMENTATION
#define SHMHEAP_IMPLEMENTATION
#include "../../shmheap.h"
#include "../../krconn.h"
#include "vmt.h"
#include <pthread.h>
#include <sys/prctl.h>

#define SRV_BUF (4u << 20)
#define SLOT 4096u
#define NSLOT_RECV 8
#define MAXC 64
#define WORDS_OFF (512u << 10)
#define TMO 10000

static char heapname[64];
static int cycles = 10000;

/* What a server hands every peer at connect (krconn_ctx_set_data). */
typedef struct srvinfo { uint64_t addr; uint32_t rkey, len, instance, pad; } srvinfo;

typedef struct srvcfg {
    const char *name;   /* service name to publish in the heap directory */
    unsigned instance;
    int meta;           /* also serve a meta directory */
    unsigned backlog;
    const char *meta_name; /* publish under this name at the meta server on 127.0.0.1 */
} srvcfg;

static void describe(int rc, char *buf, size_t len) { krconn_describe(rc, buf, len); }

/* ---------------------------------------------------------------- the server process */

/* Echo server: accepts, keeps NSLOT_RECV receives posted per connection, answers each message
 * with its bytes inverted. Commands on fd: 'S' -> its krconn_stats, 'Q' -> quit. */
static int srv_role(int fd, void *arg, char *why, size_t whylen)
{
    srvcfg *cfg = (srvcfg *)arg;
    krconn_ctx *ctx = NULL;
    alarm(0); /* vmt_spawn's 120 s limit is for short roles: this one ends on 'Q' or EOF */
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* and never outlives the test (it holds the meta port) */
    krconn_ctx_opts o;
    krconn_mr mr;
    krconn *cs[MAXC];
    int nc = 0, rc;
    char d[400];
    unsigned char *buf = (unsigned char *)mmap(NULL, SRV_BUF, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(&mr, 0, sizeof mr);
    memset(cs, 0, sizeof cs);
    memset(&o, 0, sizeof o);
    o.accept_backlog = cfg->backlog ? cfg->backlog : 64;
    o.min_rnr_timer = 24; /* 41 ms per RNR retry: a client may send before we accepted and posted
                             receives, and under a loaded host accepting can take a while */
    if ((rc = krconn_ctx_create(&o, &ctx))) {
        describe(rc, d, sizeof d);
        VMT_FAILF("server ctx: %s", d);
    }
    if ((rc = krconn_reg(ctx, buf, SRV_BUF, 0, &mr))) {
        describe(rc, d, sizeof d);
        VMT_FAILF("server reg: %s", d);
    }
    srvinfo si;
    memset(&si, 0, sizeof si);
    si.addr = (uintptr_t)buf;
    si.rkey = mr.rkey;
    si.len = SRV_BUF;
    si.instance = cfg->instance;
    krconn_ctx_set_data(ctx, &si, sizeof si);
    if (cfg->meta && (rc = krconn_meta_serve(ctx, NULL))) {
        describe(rc, d, sizeof d);
        VMT_FAILF("meta serve: %s", d);
    }
    if (cfg->meta_name) {
        krconn_dir *md = NULL;
        if ((rc = krconn_dir_meta(ctx, "127.0.0.1", TMO, &md)) ||
            (rc = krconn_publish(ctx, md, cfg->meta_name, TMO))) {
            describe(rc, d, sizeof d);
            VMT_FAILF("publish %s at the meta server: %s", cfg->meta_name, d);
        }
        krconn_dir_close(md);
    }
    if (cfg->name) {
        shmheap *h = NULL;
        krconn_dir *dir = NULL;
        if ((rc = shmheap_open(heapname, NULL, &h)))
            VMT_FAILF("server heap: %s", shmheap_strerror(rc));
        if ((rc = krconn_dir_heap(h, 0, &dir)) || (rc = krconn_publish(ctx, dir, cfg->name, TMO)))
            VMT_FAILF("server publish %s: %s", cfg->name, krconn_strerror(rc));
        krconn_dir_close(dir);
        shmheap_close(h);
    }
    {
        krconn_addr a;
        krconn_ctx_addr(ctx, &a);
        VMT_TRY(vmt_send_byte(fd, 'R'));
        VMT_TRY(vmt_write_all(fd, &a, sizeof a));
    }
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&pf, 1, 0) > 0) {
            char cmd = 0;
            if (read(fd, &cmd, 1) != 1 || cmd == 'Q') break;
            if (cmd == 'S') {
                krconn_stats st;
                krconn_ctx_get_stats(ctx, &st);
                VMT_TRY(vmt_write_all(fd, &st, sizeof st));
            }
        }
        krconn *k = NULL;
        if (nc < MAXC && krconn_accept(ctx, 1, &k) == 0) {
            int slot = -1;
            for (int i = 0; i < MAXC && slot < 0; i++) if (!cs[i]) slot = i;
            cs[slot] = k;
            nc++;
            for (unsigned r = 0; r < NSLOT_RECV; r++)
                krconn_post_recv(k, r, &mr,
                                 buf + (1u << 20) + ((unsigned)slot * (NSLOT_RECV + 1) + r) * SLOT,
                                 SLOT);
        }
        int busy = 0;
        for (int i = 0; i < MAXC; i++) {
            if (!cs[i]) continue;
            krconn_wc wc;
            int n = krconn_poll(cs[i], &wc, 1, 0);
            busy |= n != 0;
            if (n == KRCONN_E_CLOSED || (n == 1 && wc.status && wc.status != 0)) {
                krconn_disconnect(cs[i]);
                cs[i] = NULL;
                nc--;
                continue;
            }
            if (n != 1 || wc.op != KRCONN_OP_RECV) continue;
            unsigned char *in =
                buf + (1u << 20) + ((unsigned)i * (NSLOT_RECV + 1) + (unsigned)wc.wr_id) * SLOT;
            unsigned char *out =
                buf + (1u << 20) + ((unsigned)i * (NSLOT_RECV + 1) + NSLOT_RECV) * SLOT;
            for (uint32_t b = 0; b < wc.byte_len; b++) out[b] = (unsigned char)~in[b];
            krconn_post_recv(cs[i], wc.wr_id, &mr, in, SLOT);
            if (krconn_post_send(cs[i], 100, &mr, out, wc.byte_len, 0) == 0) {
                krconn_wc w2;
                krconn_wait(cs[i], &w2, TMO);
            }
        }
        if (!busy) usleep(nc ? 50 : 200);
    }
out:
    for (int i = 0; i < MAXC; i++) if (cs[i]) krconn_disconnect(cs[i]);
    if (mr.mr) krconn_dereg(&mr);
    if (ctx) krconn_ctx_destroy(ctx);
    return why[0] ? 1 : 0;
}

typedef struct server { vmt_child ch; int sock; krconn_addr addr; int up; } server;

static int server_start(server *s, srvcfg *cfg)
{
    memset(s, 0, sizeof *s);
    s->sock = -1;
    if (vmt_spawn_sock(srv_role, cfg, &s->ch, &s->sock)) return -1;
    int rc = vmt_expect_byte(s->sock, 'R', 60000);
    if (!rc) rc = vmt_read_all(s->sock, &s->addr, sizeof s->addr, 10000);
    if (rc) {
        char why[512] = "";
        vmt_reap(&s->ch, why, sizeof why);
        close(s->sock);
        s->sock = -1;
        CHECKF(0, "server %u did not start: %s (%s)", cfg->instance, strerror(-rc), why);
    }
    s->up = rc == 0;
    return rc;
}

static int server_stats(server *s, krconn_stats *st)
{
    int rc = vmt_send_byte(s->sock, 'S');
    if (!rc) rc = vmt_read_all(s->sock, st, sizeof *st, 10000);
    return rc;
}

static void server_stop(server *s, const char *who)
{
    char why[512] = "";
    if (s->sock < 0) return;
    vmt_send_byte(s->sock, 'Q');
    CHECKF(vmt_reap(&s->ch, why, sizeof why) == 0, "%s: %s", who, why);
    close(s->sock);
    s->sock = -1;
}

static void server_kill(server *s)
{
    char why[512];
    kill(s->ch.pid, SIGKILL);
    vmt_reap(&s->ch, why, sizeof why);
    close(s->sock);
    s->sock = -1;
}

/* ---------------------------------------------------------------- helpers */

/* Connect to the service name through dir, check it is server instance `instance`, disconnect:
   the connect's code. */
static int connect_instance(krconn_ctx *c, krconn_dir *dir, const char *name, uint32_t instance,
                            const char *what)
{
    krconn *k = NULL;
    int rc = krconn_connect_name(c, dir, name, NULL, &k);
    CHECKF(rc == 0, "%s: %s", what, krconn_strerror(rc));
    if (!rc) {
        CHECK_EQ(((const srvinfo *)krconn_peer_data(k))->instance, instance);
        krconn_disconnect(k);
    }
    return rc;
}

static krconn_ctx *client_ctx(unsigned pool)
{
    krconn_ctx_opts o;
    krconn_ctx *c = NULL;
    char d[400];
    memset(&o, 0, sizeof o);
    o.pool_size = pool;
    int rc = krconn_ctx_create(&o, &c);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "krconn_ctx_create: %s", d);
    return c;
}

static krconn_dir *heap_dir(void)
{
    static shmheap *h;
    krconn_dir *d = NULL;
    if (!h) {
        int rc = shmheap_open(heapname, NULL, &h);
        CHECKF(rc == 0, "shmheap_open: %s", shmheap_strerror(rc));
        if (rc) return NULL;
    }
    int rc = krconn_dir_heap(h, 0, &d);
    CHECKF(rc == 0, "krconn_dir_heap: %s", krconn_strerror(rc));
    return d;
}

/* Check every operation on k against the echo server; seed picks this caller's region. With
 * two_sided = 0 only one-sided ones (send/recv on shared QPs from several threads could take
 * each other's echoes). 0 or a message in err. */
static int check_data(krconn_ctx *ctx, krconn *k, unsigned seed, int two_sided, char *err,
                      size_t elen)
{
    const srvinfo *si = (const srvinfo *)krconn_peer_data(k);
    unsigned char *b = (unsigned char *)aligned_alloc(4096, 64 << 10);
    krconn_mr mr;
    krconn_wc wc;
    int rc;
    char d[400];
    err[0] = 0;
    memset(b, 0, 64 << 10);
    if ((rc = krconn_reg(ctx, b, 64 << 10, 0, &mr))) {
        describe(rc, d, sizeof d);
        snprintf(err, elen, "reg: %s", d);
        free(b);
        return rc;
    }
#define STEP(call, what) do { if ((rc = (call))) { describe(rc, d, sizeof d); \
        snprintf(err, elen, "%s: %.400s", what, d); goto out; } } while (0)
/* a word read back: got must be want, else the check fails with what */
#define WORD_IS(got, want, what) do { if ((got) != (want)) { \
        snprintf(err, elen, "%s %llu, expected %llu", what, (unsigned long long)(got), \
                 (unsigned long long)(want)); rc = -1; goto out; } } while (0)
    uint64_t off = (uint64_t)(seed % 60) * 8192u;
    uint64_t word = si->addr + WORDS_OFF + (uint64_t)(seed % 512) * 64u;
    vmt_fill(b, 4096, seed);
    STEP(krconn_write(k, 1, &mr, b, 4096, si->addr + off, si->rkey, 0), "write");
    STEP(krconn_wait(k, &wc, TMO), "write completion");
    STEP(krconn_read(k, 2, &mr, b + 8192, 4096, si->addr + off, si->rkey, 0), "read");
    STEP(krconn_wait(k, &wc, TMO), "read completion");
    if (vmt_check(b + 8192, 4096, seed) >= 0) {
        snprintf(err, elen, "read back differs from write");
        rc = -1;
        goto out;
    }
    uint64_t *w = (uint64_t *)(b + 16384);
    STEP(krconn_read(k, 3, &mr, w, 8, word, si->rkey, 0), "read word");
    STEP(krconn_wait(k, &wc, TMO), "read word completion");
    uint64_t cur = *w;
    STEP(krconn_cas(k, 4, &mr, w + 1, word, si->rkey, cur, cur + 1, 0), "cas");
    STEP(krconn_wait(k, &wc, TMO), "cas completion");
    WORD_IS(w[1], cur, "cas returned");
    STEP(krconn_faa(k, 5, &mr, w + 2, word, si->rkey, 5, 0), "faa");
    STEP(krconn_wait(k, &wc, TMO), "faa completion");
    WORD_IS(w[2], cur + 1, "faa returned");
    STEP(krconn_read(k, 6, &mr, w + 3, 8, word, si->rkey, 0), "read word again");
    STEP(krconn_wait(k, &wc, TMO), "read word again completion");
    WORD_IS(w[3], cur + 6, "after cas+faa the word is");
    if (two_sided) {
        unsigned char *in = b + 32768, *outb = b + 24576;
        uint32_t n = 1000 + seed % 1000;
        vmt_fill(outb, n, seed + 7);
        STEP(krconn_post_recv(k, 7, &mr, in, 4096), "post recv");
        STEP(krconn_post_send(k, 8, &mr, outb, n, 0), "post send");
        int got_send = 0, got_recv = 0;
        while (!got_send || !got_recv) {
            STEP(krconn_wait(k, &wc, TMO), "send/recv completion");
            if (wc.wr_id == 8) got_send = 1;
            if (wc.wr_id == 7) {
                got_recv = 1;
                if (wc.byte_len != n) {
                    snprintf(err, elen, "echo of %u bytes came back as %u", n, wc.byte_len);
                    rc = -1;
                    goto out;
                }
            }
        }
        for (uint32_t i = 0; i < n; i++) in[i] = (unsigned char)~in[i];
        if (vmt_check(in, n, seed + 7) >= 0) {
            snprintf(err, elen, "echo differs");
            rc = -1;
            goto out;
        }
    }
#undef STEP
#undef WORD_IS
out:
    krconn_dereg(&mr);
    free(b);
    return rc;
}

static long long hw_counter(const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "/sys/class/infiniband/rxe0/ports/1/hw_counters/%s", name);
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static server main_srv;
static srvcfg main_cfg = {"svc", 1, 1, 64, NULL};

/* ---------------------------------------------------------------- tests */

static void connect_and_data(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    krconn *k = NULL, *v = NULL, *p2 = NULL;
    char err[600], d[400];
    if (!c || !dir) goto out;
    int rc = krconn_connect_name(c, dir, "svc", NULL, &k);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "connect_name: %s", d);
    if (rc) goto out;
    CHECK_EQ(krconn_is_virtual(k), 0);
    CHECK_EQ(((const srvinfo *)krconn_peer_data(k))->instance, 1);
    CHECKF(check_data(c, k, 1, 1, err, sizeof err) == 0, "physical: %s", err);
    /* the kernel caches hw_counters for about 10 ms (the stats' lifespan): wait before reads */
    usleep(50000);
    long long s0 = hw_counter("sent_pkts"), r0 = hw_counter("rcvd_pkts");
    rc = krconn_connect_name(c, dir, "svc", NULL, &v);
    usleep(50000);
    long long s1 = hw_counter("sent_pkts"), r1 = hw_counter("rcvd_pkts");
    CHECKF(rc == 0, "virtual connect: %s", krconn_strerror(rc));
    if (rc) goto out;
    CHECK_EQ(krconn_is_virtual(v), 1);
    CHECK(krconn_qp(v) == krconn_qp(k));
    if (s0 >= 0) {
        CHECKF(s1 == s0 && r1 == r0,
               "virtual connect moved rxe0 counters: sent %lld -> %lld, rcvd %lld -> %lld", s0, s1,
               r0, r1);
        printf("# virtual connect: rxe0 sent_pkts %lld -> %lld, rcvd_pkts %lld -> %lld\n", s0, s1,
               r0, r1);
    }
    CHECKF(check_data(c, v, 2, 1, err, sizeof err) == 0, "virtual: %s", err);
    CHECKF(check_data(c, k, 3, 1, err, sizeof err) == 0, "physical after virtual: %s", err);
    /* a second physical connection when asked; it does move the counters (the check above can
       fail) */
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    usleep(50000);
    s1 = hw_counter("sent_pkts");
    r1 = hw_counter("rcvd_pkts");
    rc = krconn_connect_name(c, dir, "svc", &co, &p2);
    usleep(50000);
    if (s0 >= 0) {
        long long s2 = hw_counter("sent_pkts"), r2 = hw_counter("rcvd_pkts");
        CHECKF(s2 >= s1 + 2 && r2 >= r1 + 2, "a physical connect moved sent %lld -> %lld, rcvd %lld -> %lld",
               s1, s2, r1, r2);
        printf("# physical connect: rxe0 sent_pkts %lld -> %lld, rcvd_pkts %lld -> %lld\n", s1, s2, r1, r2);
    }
    CHECKF(rc == 0, "no-virtual connect: %s", krconn_strerror(rc));
    if (!rc) {
        CHECK_EQ(krconn_is_virtual(p2), 0);
        CHECK(krconn_qp(p2) != krconn_qp(k));
        CHECKF(check_data(c, p2, 4, 1, err, sizeof err) == 0, "second physical: %s", err);
    }
    krconn_stats st;
    krconn_ctx_get_stats(c, &st);
    CHECK_EQ(st.connects, 2);
    CHECK_EQ(st.virtual_connects, 1);
    CHECK_EQ(st.physical, 2);
    CHECK_EQ(st.connections, 3);
    krconn_addr a;
    CHECK_EQ(krconn_lookup(dir, "no-such-service", 1000, &a), KRCONN_E_NOTFOUND);
    krconn *none = NULL;
    CHECK_EQ(krconn_connect_name(c, dir, "no-such-service", NULL, &none), KRCONN_E_NOTFOUND);
out:
    if (p2) krconn_disconnect(p2);
    if (v) krconn_disconnect(v);
    if (k) krconn_disconnect(k);
    if (dir) krconn_dir_close(dir);
    if (c) {
        krconn_stats st;
        krconn_ctx_get_stats(c, &st);
        CHECK_EQ(st.physical, 0);
        CHECK_EQ(st.connections, 0);
        krconn_ctx_destroy(c);
    }
}

/* krconn_connect_opts.before: called once per physical connect, with the QP in INIT, before the
   request; not for a virtual one; its error fails the connect with that code and the QP goes
   back (the connection count does not move). */
typedef struct before_rec { int calls, state, ret; uint32_t qpn; } before_rec;
static int before_fn(struct ibv_qp *qp, void *user)
{
    before_rec *b = (before_rec *)user;
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    b->calls++;
    b->qpn = qp->qp_num;
    b->state = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) ? -1 : (int)a.qp_state;
    return b->ret;
}

static void before_hook(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    krconn *k = NULL, *v = NULL, *bad = NULL;
    char err[600];
    before_rec b;
    memset(&b, 0, sizeof b);
    if (!c || !dir) goto out;
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.before = before_fn;
    co.user = &b;
    int rc = krconn_connect_name(c, dir, "svc", &co, &k);
    CHECKF(rc == 0, "connect with before: %s", krconn_strerror(rc));
    if (rc) goto out;
    CHECK_EQ(b.calls, 1);
    CHECK_EQ(b.state, (int)IBV_QPS_INIT);
    CHECK_EQ(b.qpn, krconn_qp(k)->qp_num);
    CHECKF(check_data(c, k, 5, 1, err, sizeof err) == 0, "after before(): %s", err);
    rc = krconn_connect_name(c, dir, "svc", &co, &v); /* virtual: not called */
    CHECKF(rc == 0, "virtual connect with before: %s", krconn_strerror(rc));
    CHECK_EQ(b.calls, 1);
    if (!rc) CHECK_EQ(krconn_is_virtual(v), 1);
    krconn_stats s0, s1;
    krconn_ctx_get_stats(c, &s0);
    b.ret = -EIO;
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    rc = krconn_connect_name(c, dir, "svc", &co, &bad);
    CHECK_EQ(rc, -EIO);
    CHECK(bad == NULL);
    CHECK_EQ(b.calls, 2);
    krconn_ctx_get_stats(c, &s1);
    CHECK_EQ(s1.connections, s0.connections);
    CHECK_EQ(s1.physical, s0.physical);
out:
    if (v) krconn_disconnect(v);
    if (k) krconn_disconnect(k);
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
}

typedef struct thr_arg {
    krconn_ctx *c;
    krconn_dir *dir;
    unsigned seed;
    unsigned flags;
    char err[600];
    int virt;
    pthread_barrier_t *all_in; /* nobody closes before all four connected (a slow thread would
                                  otherwise find the first one's connection already gone) */
} thr_arg;

static void *thr_connect(void *p)
{
    thr_arg *t = (thr_arg *)p;
    krconn *k = NULL;
    krconn_connect_opts co;
    char d[400];
    memset(&co, 0, sizeof co);
    co.flags = t->flags;
    int rc = krconn_connect_name(t->c, t->dir, "svc", &co, &k);
    pthread_barrier_wait(t->all_in);
    if (rc) {
        describe(rc, d, sizeof d);
        snprintf(t->err, sizeof t->err, "connect: %s", d);
        return NULL;
    }
    t->virt = krconn_is_virtual(k);
    for (int i = 0; i < 5 && !t->err[0]; i++)
        check_data(t->c, k, t->seed + 10u * (unsigned)i, t->flags & KRCONN_CONNECT_NO_VIRTUAL,
                   t->err, sizeof t->err);
    krconn_disconnect(k);
    return NULL;
}

static void threads_connect(unsigned flags, unsigned seed0)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    thr_arg t[4];
    pthread_t th[4];
    pthread_barrier_t all_in;
    if (!c || !dir) goto out;
    pthread_barrier_init(&all_in, NULL, 4);
    for (int i = 0; i < 4; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].c = c; t[i].dir = dir; t[i].seed = seed0 + (unsigned)i; t[i].flags = flags;
        t[i].all_in = &all_in;
        pthread_create(&th[i], NULL, thr_connect, &t[i]);
    }
    int nvirt = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(!t[i].err[0], "thread %d: %s", i, t[i].err);
        nvirt += t[i].virt;
    }
    pthread_barrier_destroy(&all_in);
    krconn_stats st;
    krconn_ctx_get_stats(c, &st);
    if (flags & KRCONN_CONNECT_NO_VIRTUAL) {
        CHECK_EQ(st.connects, 4);
        CHECK_EQ(nvirt, 0);
    } else {
        CHECKF(st.connects == 1 && st.virtual_connects == 3,
               "%llu physical + %llu virtual connects", (unsigned long long)st.connects,
               (unsigned long long)st.virtual_connects);
        printf("# 4 threads: %llu physical, %llu virtual\n", (unsigned long long)st.connects,
               (unsigned long long)st.virtual_connects);
    }
    CHECK_EQ(st.physical, 0);
out:
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
}

static void four_threads_virtual(void) { threads_connect(0, 100); }
static void four_threads_physical(void) { threads_connect(KRCONN_CONNECT_NO_VIRTUAL, 200); }

static void cycles_no_leak(void)
{
    krconn_ctx *c = client_ctx(4);
    krconn_dir *dir = heap_dir();
    krconn_addr a;
    krconn_connect_opts co;
    char d[400];
    int rc = 0, i;
    if (!c || !dir) goto out;
    CHECK_EQ(krconn_lookup(dir, "svc", 1000, &a), 0);
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    /* warm up: both pools reach their steady size */
    for (i = 0; i < 50 && !rc; i++) {
        krconn *k;
        if (!(rc = krconn_connect(c, &a, &co, &k))) krconn_disconnect(k);
    }
    usleep(300000);
    /* QPs and CQs outside the two pools, and MRs: these must not move. The pools float between
       half their size and their cap (closed connections give their QPs back up to the cap). */
    krconn_stats p0c, p0s;
    krconn_ctx_get_stats(c, &p0c);
    if (server_stats(&main_srv, &p0s)) memset(&p0s, 0, sizeof p0s);
    int qp0 = vmt_res_count("qp") - (int)(p0c.pool_ready + p0s.pool_ready);
    int cq0 = vmt_res_count("cq") - (int)(p0c.pool_ready + p0s.pool_ready), mr0 = vmt_res_count("mr");
    uint64_t t0 = rcp__now_ns();
    /* even cycles: a physical connect and close; odd ones: a virtual connect and close, on top
       of a connection held open through the loop */
    krconn *held = NULL;
    if ((rc = krconn_connect(c, &a, NULL, &held))) describe(rc, d, sizeof d);
    for (i = 0; i < cycles && !rc; i++) {
        krconn *k = NULL;
        if ((rc = krconn_connect(c, &a, i & 1 ? NULL : &co, &k))) {
            describe(rc, d, sizeof d);
            break;
        }
        if (krconn_is_virtual(k) != (i & 1)) {
            rc = -1;
            snprintf(d, sizeof d, "cycle %d: virtual is %d", i, krconn_is_virtual(k));
        }
        krconn_disconnect(k);
    }
    if (held) krconn_disconnect(held);
    double secs = (double)(rcp__now_ns() - t0) / 1e9;
    CHECKF(rc == 0, "cycle %d: %s", i, d);
    if (rc) { /* where is the server? its threads' kernel wait channels and stacks */
        char cmd[300];
        snprintf(cmd, sizeof cmd,
                 "for t in /proc/%d/task/*; do echo \"# task $t: $(cat $t/wchan) $(cat $t/stat | "
                 "cut -d' ' -f3)\"; "
                 "sed 's/^/#   /' $t/stack | head -8; done",
                 (int)main_srv.ch.pid);
        if (system(cmd)) {}
        krconn_stats cs_, ss_;
        krconn_ctx_get_stats(c, &cs_);
        if (server_stats(&main_srv, &ss_) == 0)
            printf("# cycles failed: client rx %llu forged %llu pool %u; server rx %llu bad %llu "
                   "forged %llu replay %llu accepts %llu physical %u pool %u\n",
                   (unsigned long long)cs_.rx, (unsigned long long)cs_.rx_forged, cs_.pool_ready,
                   (unsigned long long)ss_.rx, (unsigned long long)ss_.rx_bad,
                   (unsigned long long)ss_.rx_forged, (unsigned long long)ss_.rx_replay,
                   (unsigned long long)ss_.accepts, ss_.physical, ss_.pool_ready);
    }
    krconn_stats st, sst;
    int qp1 = -1, cq1 = -1, mr1 = -1;
    for (int w = 0; w < 40; w++) { /* the server's side goes back to its pool asynchronously */
        krconn_stats p1c, p1s;
        usleep(100000);
        krconn_ctx_get_stats(c, &p1c);
        if (server_stats(&main_srv, &p1s)) memset(&p1s, 0, sizeof p1s);
        qp1 = vmt_res_count("qp") - (int)(p1c.pool_ready + p1s.pool_ready);
        cq1 = vmt_res_count("cq") - (int)(p1c.pool_ready + p1s.pool_ready);
        mr1 = vmt_res_count("mr");
        if (qp1 == qp0 && cq1 == cq0 && mr1 == mr0) break;
    }
    printf("# %d connect/close cycles in %.1f s; rdma resource outside the pools: qp %d->%d cq "
           "%d->%d, mr %d->%d\n", i,
           secs, qp0, qp1, cq0, cq1, mr0, mr1);
    CHECKF(qp0 > 0 && qp1 == qp0 && cq1 == cq0 && mr1 == mr0,
           "resources moved: qp %d->%d cq %d->%d mr %d->%d", qp0, qp1, cq0, cq1, mr0, mr1);
    krconn_ctx_get_stats(c, &st);
    CHECK_EQ(st.physical, 0);
    CHECKF(st.pool_ready <= 8, "client pool holds %u QPs (cap 8)", st.pool_ready);
    if (server_stats(&main_srv, &sst) == 0) {
        CHECKF(sst.pool_ready <= 2 * KRCONN_DEFAULT_POOL, "server pool holds %u", sst.pool_ready);
        CHECKF(sst.physical <= 2, "server still has %u physical connections", sst.physical);
    }
out:
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
}

static void pool_empty_nowait(void)
{
    krconn_ctx_opts o;
    krconn_ctx *c = NULL;
    krconn *k[3] = {0};
    krconn_connect_opts co;
    krconn_stats st;
    memset(&o, 0, sizeof o);
    o.pool_size = 1;
    o.flags = KRCONN_CTX_NO_REFILL;
    int rc = krconn_ctx_create(&o, &c);
    CHECKF(rc == 0, "ctx: %s", krconn_strerror(rc));
    if (rc) return;
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NOWAIT | KRCONN_CONNECT_NO_VIRTUAL;
    CHECK_EQ(krconn_connect(c, &main_srv.addr, &co, &k[0]), 0);
    rc = krconn_connect(c, &main_srv.addr, &co, &k[1]);
    CHECKF(rc == KRCONN_E_AGAIN, "second NOWAIT connect with a pool of 1: %s", krconn_strerror(rc));
    co.flags = KRCONN_CONNECT_NO_VIRTUAL; /* without NOWAIT: it creates a QP itself */
    CHECK_EQ(krconn_connect(c, &main_srv.addr, &co, &k[2]), 0);
    krconn_ctx_get_stats(c, &st);
    CHECK_EQ(st.pool_fallback, 1);
    CHECK_EQ(st.pool_ready, 0);
    for (int i = 0; i < 3; i++) if (k[i]) krconn_disconnect(k[i]);
    krconn_ctx_get_stats(c, &st);
    CHECKF(st.pool_ready == 2, "closed connections gave back %u QPs (cap 2)", st.pool_ready);
    krconn_ctx_destroy(c);
}

/* One connect (and disconnect) within 10 s: its time in ms, or -1 (a failure is reported). */
static double timed_connect(krconn_ctx *c, const char *when)
{
    krconn_connect_opts co;
    krconn *k = NULL;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 10000;
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    uint64_t t0 = rcp__now_ns();
    int rc = krconn_connect(c, &main_srv.addr, &co, &k);
    double ms = (rcp__now_ns() - t0) / 1e6;
    CHECKF(rc == 0, "connect %s: %s", when, krconn_strerror(rc));
    if (k) krconn_disconnect(k);
    return rc ? -1 : ms;
}

/* The context's UD QP ends in error (a failed receive, as when the device moves it there; a
   failed send, as rxe's "local QP operation error" on a datagram it could not send): the
   context's thread resets it in place, and the next connect works within its timeout. Without
   the reset every later request of the context was lost and each connect timed out. */
static void ud_qp_reset(void)
{
    krconn_ctx_opts o;
    krconn_ctx *c = NULL;
    krconn_stats st;
    memset(&o, 0, sizeof o);
    int rc = krconn_ctx_create(&o, &c);
    CHECKF(rc == 0, "ctx: %s", krconn_strerror(rc));
    if (rc) return;
    uint32_t qpn = c->addr.qpn;
    if (timed_connect(c, "before") < 0) goto out;
    /* 1: the QP moved to ERR: its receives are flushed */
    CHECK_EQ(rcp__verbs_qp_fail(c->ud), 0);
    double ms1 = timed_connect(c, "after the UD QP went to ERR");
    /* 2: a UD send that fails (an lkey that is not one) */
    {
        int arc = 0;
        struct ibv_ah *ah = krconn__ah_get(c, main_srv.addr.gid, &arc);
        CHECKF(ah != NULL, "address handle: %s", krconn_strerror(arc));
        if (!ah) goto out;
        rcp__verbs_ep r;
        memset(&r, 0, sizeof r);
        r.qpn = main_srv.addr.qpn;
        r.qkey = main_srv.addr.qkey;
        pthread_mutex_lock(&c->tx_mu);
        rc = rcp__verbs_post_ud_send(c->ud, 0, c->ud_buf + KRCONN__NRX * KRCONN__SLOT, KRCONN__MSG,
                                     c->ud_mr->lkey ^ 0x5a5a00u, ah, &r, IBV_SEND_SIGNALED);
        if (!rc) c->tx_out++;
        pthread_mutex_unlock(&c->tx_mu);
        CHECKF(rc == 0, "post of the bad send: %s", krconn_strerror(rc));
    }
    double ms2 = timed_connect(c, "after a failed UD send");
    krconn_ctx_get_stats(c, &st);
    printf("# UD QP reset: connect after ERR %.1f ms, after a failed send %.1f ms; %llu resets\n",
           ms1, ms2, (unsigned long long)st.ud_resets);
    CHECKF(st.ud_resets == 2, "ud_resets %llu, expected 2", (unsigned long long)st.ud_resets);
    CHECK_EQ(c->addr.qpn, qpn); /* the same address */
    CHECK_EQ(vmt_qp_state(c->ud), IBV_QPS_RTS);
out:
    krconn_ctx_destroy(c);
}

static void dead_and_absent(void)
{
    krconn_ctx *c = client_ctx(0);
    server s;
    srvcfg cfg = {NULL, 7, 0, 8, NULL};
    krconn *k = NULL;
    char err[600], d[400];
    if (!c || server_start(&s, &cfg)) goto out;
    int rc = krconn_connect(c, &s.addr, NULL, &k);
    CHECKF(rc == 0, "connect: %s", krconn_strerror(rc));
    if (rc) { server_stop(&s, "server"); goto out; }
    CHECKF(check_data(c, k, 9, 0, err, sizeof err) == 0, "before the kill: %s", err);
    CHECK_EQ(krconn_ping(k, TMO), 0);
    server_kill(&s);
    uint64_t t0 = rcp__now_ns();
    rc = krconn_ping(k, TMO);
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    printf("# peer killed: ping said \"%s\" after %.0f ms\n", krconn_strerror(rc), ms);
    CHECKF(rc == KRCONN_E_PEERDEAD, "ping after kill: %s", krconn_strerror(rc));
    CHECKF(ms < 5000, "took %.0f ms", ms);
    const srvinfo *si = (const srvinfo *)krconn_peer_data(k);
    krconn_mr mr;
    uint64_t *w = (uint64_t *)aligned_alloc(64, 64);
    CHECK_EQ(krconn_reg(c, w, 64, 0, &mr), 0);
    rc = krconn_read(k, 1, &mr, w, 8, si->addr, si->rkey, 0);
    CHECKF(rc == KRCONN_E_PEERDEAD, "post after the peer died: %s", krconn_strerror(rc));
    krconn_dereg(&mr);
    free(w);
    krconn_disconnect(k);
    k = NULL;
    /* connect to the dead context: a clear error within the deadline */
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 500;
    t0 = rcp__now_ns();
    rc = krconn_connect(c, &s.addr, &co, &k);
    ms = (double)(rcp__now_ns() - t0) / 1e6;
    describe(rc, d, sizeof d);
    printf("# connect to a dead context: %s (%.0f ms)\n", d, ms);
    CHECKF(rc == KRCONN_E_TIMEDOUT, "connect to dead: %s", d);
    CHECKF(ms < 1500, "returned after %.0f ms, deadline 500", ms);
    CHECKF(strstr(d, "rxe0") && strstr(d, "gid"), "description lacks device or gid: %s", d);
    /* an address whose generation is not the live context's: rejected as stale */
    krconn_addr bad = main_srv.addr;
    bad.generation ^= 0x5a5a;
    rc = krconn_connect(c, &bad, &co, &k);
    CHECKF(rc == KRCONN_E_STALE, "wrong generation: %s", krconn_strerror(rc));
out:
    if (c) krconn_ctx_destroy(c);
}

static void stale_entry(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    server s1, s2;
    srvcfg c1 = {"restarting", 21, 0, 8, NULL}, c2 = {"restarting", 22, 0, 8, NULL};
    krconn *k = NULL;
    krconn_stats st;
    if (!c || !dir || server_start(&s1, &c1)) goto out;
    int rc = connect_instance(c, dir, "restarting", 21, "connect to the first instance");
    server_kill(&s1);
    if (server_start(&s2, &c2)) goto out;
    CHECK(s2.addr.generation != s1.addr.generation);
    rc = connect_instance(c, dir, "restarting", 22, "connect after the restart");
    krconn_ctx_get_stats(c, &st);
    CHECKF(st.stale_detected == 1, "stale_detected %llu", (unsigned long long)st.stale_detected);
    /* again: straight to the new instance, nothing stale */
    rc = krconn_connect_name(c, dir, "restarting", NULL, &k);
    CHECKF(rc == 0, "third connect: %s", krconn_strerror(rc));
    if (!rc) krconn_disconnect(k);
    krconn_ctx_get_stats(c, &st);
    CHECK_EQ(st.stale_detected, 1);
    /* the second instance dies too, and the directory keeps naming it: a clear error in time */
    server_kill(&s2);
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 700;
    rc = krconn_connect_name(c, dir, "restarting", &co, &k);
    CHECKF(rc == KRCONN_E_TIMEDOUT, "dead service: %s", krconn_strerror(rc));
out:
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
}

/* A copy of the heap directory's table as it is now: a second directory that will go on naming
   what the first named (a replica that missed the update). NULL on failure. */
static krconn_dir *dir_snapshot(void **mem)
{
    shmheap *h = NULL;
    krconn_dir *d = NULL;
    *mem = NULL;
    int rc = shmheap_open(heapname, NULL, &h);
    CHECKF(rc == 0, "shmheap_open: %s", shmheap_strerror(rc));
    if (rc) return NULL;
    void *t = shmheap_root_get(h, "krconn.dir");
    size_t n = t ? shmheap_usable_size(h, t) : 0;
    CHECKF(t != NULL, "no krconn.dir root in the heap");
    if (t && (*mem = aligned_alloc(64, (n + 63) & ~(size_t)63))) {
        memcpy(*mem, t, n);
        rc = krconn_dir_shm(*mem, n, &d);
        CHECKF(rc == 0, "krconn_dir_shm on the copy: %s", krconn_strerror(rc));
    }
    shmheap_close(h);
    return d;
}

/* The service restarts; d1 finds out (refetch, new generation). d2 still names the dead
   generation: connecting through it is KRCONN_E_STALE at once, not a wait for the deadline, and
   so is krconn_connect to the dead address. */
static void stale_second_directory(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *d1 = heap_dir(), *d2 = NULL;
    void *d2mem = NULL;
    server s1, s2;
    srvcfg c1 = {"restarting2", 31, 0, 8, NULL}, c2 = {"restarting2", 32, 0, 8, NULL};
    krconn *k = NULL;
    krconn_stats st;
    krconn_connect_opts co;
    char d[400];
    memset(&co, 0, sizeof co);
    co.timeout_ms = 3000; /* what the old behaviour waited */
    s2.up = 0;
    if (!c || !d1 || server_start(&s1, &c1)) goto out;
    int rc = connect_instance(c, d1, "restarting2", 31, "connect to the first instance");
    if (!(d2 = dir_snapshot(&d2mem))) { server_stop(&s1, "server 31"); goto out; }
    server_kill(&s1);
    if (server_start(&s2, &c2)) goto out;
    /* d1: detected, refetched */
    rc = connect_instance(c, d1, "restarting2", 32, "connect through d1 after the restart");
    krconn_ctx_get_stats(c, &st);
    CHECK_EQ(st.stale_detected, 1);
    krconn_addr a2;
    CHECK_EQ(krconn_lookup(d2, "restarting2", 1000, &a2), 0);
    CHECKF(a2.generation == s1.addr.generation, "d2 should still name the first instance");
    uint64_t t0 = rcp__now_ns();
    rc = krconn_connect_name(c, d2, "restarting2", &co, &k);
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    describe(rc, d, sizeof d);
    printf("# connect through a second directory naming the dead generation: %s (%.0f ms)\n", d,
           ms);
    CHECKF(rc == KRCONN_E_STALE, "through d2: %s after %.0f ms", d, ms);
    CHECKF(ms < 1000, "through d2: %.0f ms, expected at once", ms);
    if (!rc) { krconn_disconnect(k); k = NULL; }
    t0 = rcp__now_ns();
    rc = krconn_connect(c, &s1.addr, &co, &k);
    ms = (double)(rcp__now_ns() - t0) / 1e6;
    CHECKF(rc == KRCONN_E_STALE && ms < 1000, "krconn_connect to the dead address: %s after %.0f ms",
           krconn_strerror(rc), ms);
    if (!rc) { krconn_disconnect(k); k = NULL; }
    krconn_ctx_get_stats(c, &st);
    CHECKF(st.stale_detected == 1, "stale_detected %llu (counted once)",
           (unsigned long long)st.stale_detected);
    rc = krconn_connect_name(c, d1, "restarting2", NULL, &k); /* d1 still works */
    CHECKF(rc == 0, "d1 afterwards: %s", krconn_strerror(rc));
    if (!rc) krconn_disconnect(k);
out:
    if (s2.up) server_stop(&s2, "server 32");
    if (d2) krconn_dir_close(d2);
    free(d2mem);
    if (d1) krconn_dir_close(d1);
    if (c) krconn_ctx_destroy(c);
}

/* Wait until ctx has accepted n connections: the accepting side lists a connection after its
   RTS, which can come after the asker's connect has returned. */
static int wait_accepts(krconn_ctx *ctx, uint64_t n)
{
    krconn_stats st;
    for (int i = 0; i < 500; i++) {
        krconn_ctx_get_stats(ctx, &st);
        if (st.accepts >= n) return 0;
        usleep(10000);
    }
    CHECKF(0, "accepts %llu, waited for %llu", (unsigned long long)st.accepts,
           (unsigned long long)n);
    return -1;
}

/* NO_VIRTUAL is private on both sides: the peer's plain connect back does not go virtual over
   it, nor does a later plain connect of ours; plain connects share the shared ones. */
static void no_virtual_private(void)
{
    krconn_ctx *a = client_ctx(0), *b = client_ctx(0), *c = client_ctx(0);
    krconn *kp = NULL, *kb = NULL, *k1 = NULL, *k2 = NULL, *kq = NULL, *kr = NULL, *ks = NULL;
    krconn_addr aa, ba;
    krconn_connect_opts nv;
    krconn_stats sa, sb, sc;
    int rc;
    memset(&nv, 0, sizeof nv);
    nv.flags = KRCONN_CONNECT_NO_VIRTUAL;
    nv.timeout_ms = TMO;
    if (!a || !b || !c) goto out;
    krconn_ctx_addr(a, &aa);
    krconn_ctx_addr(b, &ba);
    rc = krconn_connect(a, &ba, &nv, &kp);
    CHECKF(rc == 0, "a -> b NO_VIRTUAL: %s", krconn_strerror(rc));
    if (rc) goto out;
    /* b's plain connect back to a: a new physical connection, not virtual over a's private one */
    if (wait_accepts(b, 1)) goto out;
    rc = krconn_connect(b, &aa, NULL, &kb);
    CHECKF(rc == 0, "b -> a plain: %s", krconn_strerror(rc));
    if (rc) goto out;
    CHECKF(krconn_is_virtual(kb) == 0, "b's plain connect went virtual over a's NO_VIRTUAL QP");
    krconn_ctx_get_stats(b, &sb);
    CHECK_EQ(sb.virtual_connects, 0);
    CHECK_EQ(sb.connects, 1);
    CHECK_EQ(sb.accepts, 1);
    CHECK_EQ(krconn_ping(kp, TMO), 0);
    CHECK_EQ(krconn_ping(kb, TMO), 0);
    /* a's plain connect to b: virtual over the shared connection b made, never over kp */
    if (wait_accepts(a, 1)) goto out;
    rc = krconn_connect(a, &ba, NULL, &k1);
    CHECKF(rc == 0, "a -> b plain: %s", krconn_strerror(rc));
    if (!rc) {
        CHECK_EQ(krconn_is_virtual(k1), 1);
        CHECK(krconn_qp(k1) != krconn_qp(kp));
        CHECK_EQ(krconn_ping(k1, TMO), 0);
    }
    rc = krconn_connect(a, &ba, NULL, &k2);
    CHECKF(rc == 0 && krconn_qp(k2) == krconn_qp(k1), "a -> b plain again: %s",
           krconn_strerror(rc));
    krconn_ctx_get_stats(a, &sa);
    CHECKF(sa.physical == 2 && sa.connects == 1 && sa.accepts == 1 && sa.virtual_connects == 2,
           "a: %u physical, %llu connects, %llu accepts, %llu virtual", sa.physical,
           (unsigned long long)sa.connects, (unsigned long long)sa.accepts,
           (unsigned long long)sa.virtual_connects);
    /* with only a private connection to b, c's plain connect makes a physical one; the next
       plain connect shares that one */
    rc = krconn_connect(c, &ba, &nv, &kq);
    CHECKF(rc == 0, "c -> b NO_VIRTUAL: %s", krconn_strerror(rc));
    rc = krconn_connect(c, &ba, NULL, &kr);
    CHECKF(rc == 0 && krconn_is_virtual(kr) == 0 && krconn_qp(kr) != krconn_qp(kq),
           "c -> b plain after NO_VIRTUAL: %s, virtual %d", krconn_strerror(rc),
           rc ? -1 : krconn_is_virtual(kr));
    rc = krconn_connect(c, &ba, NULL, &ks);
    CHECKF(rc == 0 && krconn_is_virtual(ks) == 1 && krconn_qp(ks) == krconn_qp(kr),
           "c -> b plain, third: %s", krconn_strerror(rc));
    krconn_ctx_get_stats(c, &sc);
    CHECKF(sc.physical == 2 && sc.connects == 2 && sc.virtual_connects == 1,
           "c: %u physical, %llu connects, %llu virtual", sc.physical,
           (unsigned long long)sc.connects, (unsigned long long)sc.virtual_connects);
out:;
    krconn *all[] = {ks, kr, kq, k2, k1, kb, kp};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) if (all[i]) krconn_disconnect(all[i]);
    if (c) krconn_ctx_destroy(c);
    if (b) krconn_ctx_destroy(b);
    if (a) krconn_ctx_destroy(a);
}

/* A host that does not answer (no ARP reply: nothing at 10.0.2.99 on the guest's hub): the
   kernel gives up on the address handle after about 1 s, and the connect goes on trying until
   its own deadline, then says KRCONN_E_TIMEDOUT. */
static void slow_host_full_deadline(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn *k = NULL;
    krconn_connect_opts co;
    char d[400];
    if (!c) return;
    krconn_addr absent = main_srv.addr;
    memset(absent.gid, 0, 10);
    absent.gid[10] = absent.gid[11] = 0xff;
    absent.gid[12] = 10, absent.gid[13] = 0, absent.gid[14] = 2, absent.gid[15] = 99;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 3500;
    uint64_t t0 = rcp__now_ns();
    int rc = krconn_connect(c, &absent, &co, &k);
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    describe(rc, d, sizeof d);
    printf("# connect to an absent host, deadline 3500 ms: %s (%.0f ms)\n", d, ms);
    CHECKF(rc == KRCONN_E_TIMEDOUT, "absent host: %s after %.0f ms", d, ms);
    CHECKF(ms >= 3400 && ms < 3500 + 2500, "absent host: returned after %.0f ms, deadline 3500", ms);
    if (!rc) krconn_disconnect(k);
    /* the context still serves: a connect to the live server works at once */
    rc = krconn_connect(c, &main_srv.addr, NULL, &k);
    CHECKF(rc == 0, "then to the live server: %s", krconn_strerror(rc));
    if (!rc) krconn_disconnect(k);
    krconn_ctx_destroy(c);
}

/* ---------------------------------------------------------------- fuzzer */

#define MSGSZ 160
static void put32(unsigned char *p, uint32_t v) { rcp__verbs_put32(p, v); }
static void put64(unsigned char *p, uint64_t v) { vmt_put64(p, v); }

/* A control message as krconn packs it (see krconn__msg_pack). */
static void mk_msg(unsigned char *b, int type, uint64_t nonce, uint64_t sgen, uint64_t dgen,
                   const uint8_t *gid, uint32_t udqpn, uint32_t qpn, uint32_t psn)
{
    memset(b, 0, MSGSZ);
    put32(b, 0x4b52434eu);
    b[4] = 1;
    b[5] = (unsigned char)type;
    put64(b + 8, nonce);
    put64(b + 16, sgen);
    put64(b + 24, dgen);
    memcpy(b + 32, gid, 16);
    put32(b + 48, udqpn);
    put32(b + 52, qpn);
    put32(b + 56, psn);
}

typedef struct fz {
    rcp__verbs_dev d;
    struct ibv_cq *cq;
    struct ibv_qp *qp, *rc;
    struct ibv_mr *mr;
    unsigned char *buf;
    struct ibv_ah *ah;
} fz;

static int fz_send(fz *f, const krconn_addr *to, const unsigned char *msg, uint32_t len)
{
    rcp__verbs_ep r;
    struct ibv_wc wc;
    memset(&r, 0, sizeof r);
    r.qpn = to->qpn;
    r.qkey = to->qkey;
    memcpy(f->buf, msg, len);
    int rc =
        rcp__verbs_post_ud_send(f->qp, 1, f->buf, len, f->mr->lkey, f->ah, &r, IBV_SEND_SIGNALED);
    if (!rc) rc = rcp__verbs_wait(f->cq, &wc, VMT_WAIT);
    return rc;
}

typedef struct racer { krconn_ctx *c; int rc; unsigned instance; } racer;
static void *racer_fn(void *p)
{
    racer *r = (racer *)p;
    krconn *k = NULL;
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    for (int i = 0; i < 20 && !r->rc; i++) {
        r->rc = krconn_connect(r->c, &main_srv.addr, &co, &k);
        if (!r->rc) {
            r->instance = ((const srvinfo *)krconn_peer_data(k))->instance;
            if (r->instance != 1) r->rc = -1;
            krconn_disconnect(k);
        }
    }
    return NULL;
}

static void fuzz_control_qp(void)
{
    fz f;
    uint64_t seed = 0x1234567;
    krconn_stats before, after, cst;
    unsigned char m[512];
    int rc;
    memset(&f, 0, sizeof f);
    f.buf = (unsigned char *)aligned_alloc(4096, 4096);
    CHECK_EQ(rcp__verbs_open(NULL, &f.d), 0);
    CHECK_EQ(rcp__verbs_cq_create(&f.d, 64, 0, &f.cq), 0);
    rcp__verbs_qp_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.type = IBV_QPT_UD;
    uo.qkey = KRCONN_DEFAULT_QKEY;
    CHECK_EQ(rcp__verbs_qp_create(&f.d, f.cq, f.cq, &uo, &f.qp), 0);
    CHECK_EQ(rcp__verbs_ud_ready(f.qp, 1), 0);
    CHECK_EQ(rcp__verbs_reg(&f.d, f.buf, 4096, 0, &f.mr), 0);
    rcp__verbs_ep ep;
    memset(&ep, 0, sizeof ep);
    memcpy(ep.gid, main_srv.addr.gid, 16);
    CHECK_EQ(rcp__verbs_ah_create(&f.d, &ep, &f.ah), 0);
    if (!f.ah || server_stats(&main_srv, &before)) goto out;

    /* a client connecting over and over while forged answers fly at it */
    racer r;
    memset(&r, 0, sizeof r);
    r.c = client_ctx(0);
    krconn_addr ca;
    krconn_ctx_addr(r.c, &ca);
    pthread_t th;
    pthread_create(&th, NULL, racer_fn, &r);

    int n_random = 0, n_trunc = 0, n_forged = 0, n_stale = 0, n_replay = 0, n_badrep = 0,
        n_other = 0;
    for (int i = 0; i < 3000; i++) {
        uint64_t x = t_rng(&seed);
        uint32_t len;
        int kind = (int)(x % 6);
        switch (kind) {
        case 0: /* random bytes, random length */
            len = (uint32_t)(t_rng(&seed) % 300);
            for (uint32_t k = 0; k < len; k++) m[k] = (unsigned char)t_rng(&seed);
            n_random++;
            break;
        case 1: /* a valid request cut short */
            mk_msg(m, 1, t_rng(&seed) | 1, 77, 0, f.d.gid.raw, f.qp->qp_num, 0x100, 5);
            len = (uint32_t)(t_rng(&seed) % MSGSZ);
            n_trunc++;
            break;
        case 2: /* a request whose source fields lie about the sender */
            mk_msg(m, 1, t_rng(&seed) | 1, 77, 0, f.d.gid.raw,
                   (f.qp->qp_num + 1 + (uint32_t)(x >> 8) % 50) & 0xffffff, 0x100, 5);
            if (x & 1) m[32 + 15] ^= 1;
            len = MSGSZ;
            n_forged++;
            break;
        case 3: /* a request for another generation */
            mk_msg(m, 1, t_rng(&seed) | 1, 77, main_srv.addr.generation ^ 1, f.d.gid.raw,
                   f.qp->qp_num, 0x100, 5);
            len = MSGSZ;
            n_stale++;
            break;
        case 4: /* answers with guessed nonces at the connecting client */
            mk_msg(m, 2, t_rng(&seed) | 1, main_srv.addr.generation, ca.generation, f.d.gid.raw,
                   f.qp->qp_num, 0x100, 5);
            len = MSGSZ;
            {
                int s = fz_send(&f, &ca, m, len);
                if (s) { CHECKF(0, "fuzzer send: %s", strerror(-s)); goto stop; }
            }
            n_badrep++;
            continue;
        default: /* valid header, random fields and type */
            mk_msg(m, (int)(t_rng(&seed) % 8), t_rng(&seed), t_rng(&seed),
                   t_rng(&seed) & 1 ? 0 : t_rng(&seed), f.d.gid.raw,
                   (uint32_t)t_rng(&seed) & 0xffffff, (uint32_t)t_rng(&seed) & 0xffffff, 5);
            len = MSGSZ;
            n_other++;
            break;
        }
        if ((rc = fz_send(&f, &main_srv.addr, m, len))) {
            CHECKF(0, "fuzzer send: %s", strerror(-rc));
            goto stop;
        }
        if (i % 4 == 3) usleep(500); /* rxe drops what finds no receive posted: pace it a little */
    }
    /* one real request from the fuzzer, then the same bytes replayed: one QP at most */
    {
        struct ibv_qp *rcqp = NULL;
        CHECK_EQ(rcp__verbs_qp_create(&f.d, f.cq, f.cq, NULL, &rcqp), 0);
        mk_msg(m, 1, 0xabcdef12345ull, 99, main_srv.addr.generation, f.d.gid.raw, f.qp->qp_num,
               rcqp ? rcqp->qp_num : 1, 77);
        for (int i = 0; i < 20; i++) {
            CHECK_EQ(fz_send(&f, &main_srv.addr, m, MSGSZ), 0);
            n_replay++;
        }
        f.rc = rcqp;
    }
stop:
    pthread_join(th, NULL);
    CHECKF(r.rc == 0, "connects while fuzzed: %s", krconn_strerror(r.rc));
    krconn_ctx_get_stats(r.c, &cst);
    CHECKF(cst.rx_forged >= 1, "client counted no forged answers (%llu)",
           (unsigned long long)cst.rx_forged);
    krconn_ctx_destroy(r.c);
    usleep(500000);
    CHECK_EQ(server_stats(&main_srv, &after), 0);
    printf(
        "# fuzz: sent %d random, %d truncated, %d forged, %d stale, %d random-field, %d replays, "
        "%d forged answers; "
        "server counted bad %llu forged %llu stale %llu replay %llu; client counted forged %llu\n",
        n_random, n_trunc, n_forged, n_stale, n_other, n_replay, n_badrep,
        (unsigned long long)(after.rx_bad - before.rx_bad),
        (unsigned long long)(after.rx_forged - before.rx_forged),
        (unsigned long long)(after.rx_stale - before.rx_stale),
        (unsigned long long)(after.rx_replay - before.rx_replay),
        (unsigned long long)cst.rx_forged);
    /* Everything that reached the server is counted as bad, forged, stale or replayed, except
       the racer's 20 requests and 20 disconnects and the fuzzer's one real request. */
    uint64_t rx = after.rx - before.rx;
    uint64_t counted = (after.rx_bad - before.rx_bad) + (after.rx_forged - before.rx_forged) +
                       (after.rx_stale - before.rx_stale) + (after.rx_replay - before.rx_replay);
    int sent = n_random + n_trunc + n_forged + n_stale + n_replay + n_other;
    printf("# fuzz: the server received %llu of the %d datagrams sent to it (plus the racer's)\n",
           (unsigned long long)rx, sent);
    CHECKF(counted + 41 >= rx && counted <= rx, "received %llu, counted %llu",
           (unsigned long long)rx, (unsigned long long)counted);
    CHECKF(rx >= (uint64_t)sent / 2, "only %llu of %d arrived", (unsigned long long)rx, sent);
    CHECK(after.rx_bad > before.rx_bad && after.rx_forged > before.rx_forged &&
          after.rx_stale > before.rx_stale && after.rx_replay > before.rx_replay);
    /* the replayed request made one connection, not twenty */
    CHECKF(after.accepts - before.accepts <= 21 + 1, "accepts grew by %llu",
           (unsigned long long)(after.accepts - before.accepts));
    /* and the server still serves */
    {
        krconn_ctx *c = client_ctx(0);
        krconn *k = NULL;
        char err[600];
        if (c && krconn_connect(c, &main_srv.addr, NULL, &k) == 0) {
            CHECKF(check_data(c, k, 30, 1, err, sizeof err) == 0, "after the fuzz: %s", err);
            krconn_disconnect(k);
        } else CHECKF(0, "connect after the fuzz failed");
        if (c) krconn_ctx_destroy(c);
    }
out:
    if (f.ah) ibv_destroy_ah(f.ah);
    rcp__verbs_qp_destroy(f.rc);
    rcp__verbs_qp_destroy(f.qp);
    rcp__verbs_dereg(f.mr);
    rcp__verbs_cq_destroy(f.cq);
    rcp__verbs_close(&f.d);
    free(f.buf);
}

static void meta_directory(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = NULL;
    krconn *k = NULL;
    krconn_addr a;
    char err[600], d[400];
    if (!c) return;
    int rc = krconn_dir_meta(c, "127.0.0.1", TMO, &dir);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "krconn_dir_meta: %s", d);
    if (rc) goto out;
    /* the main server published "svc" in the heap only; publish the client under a name */
    CHECK_EQ(krconn_lookup(dir, "svc", TMO, &a), KRCONN_E_NOTFOUND);
    rc = krconn_publish(c, dir, "client-x", TMO);
    CHECKF(rc == 0, "publish to meta: %s", krconn_strerror(rc));
    rc = krconn_lookup(dir, "client-x", TMO, &a);
    CHECKF(rc == 0, "lookup by RDMA READ: %s", krconn_strerror(rc));
    krconn_addr me;
    krconn_ctx_addr(c, &me);
    CHECK(rc == 0 && memcmp(&a, &me, sizeof a) == 0);
    /* the meta server is the main server: look up its own context through itself */
    krconn_ctx *c2 = client_ctx(0);
    krconn_dir *dir2 = NULL;
    if (c2 && krconn_dir_meta(c2, "127.0.0.1:7471", TMO, &dir2) == 0) {
        CHECK_EQ(krconn_publish(c2, dir2, "second", TMO), 0);
        rc = krconn_connect_name(c, dir, "second", NULL, &k);
        CHECKF(rc == 0, "connect to a service found through the meta server: %s",
               krconn_strerror(rc));
        if (!rc) krconn_disconnect(k);
        krconn_dir_close(dir2);
    } else CHECKF(0, "second client's dir_meta failed");
    if (c2) krconn_ctx_destroy(c2);
    rc = krconn_connect(c, &main_srv.addr, NULL, &k);
    CHECKF(rc == 0 && krconn_is_virtual(k) == 0, "connect to the meta server's context: %s",
           krconn_strerror(rc));
    if (!rc) {
        CHECKF(check_data(c, k, 40, 1, err, sizeof err) == 0, "data: %s", err);
        krconn_disconnect(k);
    }
    CHECK_EQ(krconn_dir_meta(c, "127.0.0.1:1", 300, &dir2), KRCONN_E_TIMEDOUT);
out:
    if (dir) krconn_dir_close(dir);
    krconn_ctx_destroy(c);
}

/* krconn_unpublish on one directory: c publishes, withdraws, publishes again; c2's name stays. */
static void unpublish_on(krconn_ctx *c, krconn_dir *dir, krconn_ctx *c2, const char *where)
{
    krconn_addr a, me, other;
    krconn_ctx_addr(c, &me);
    krconn_ctx_addr(c2, &other);
    CHECKF(krconn_publish(c, dir, "unpub-x", TMO) == 0, "%s: publish", where);
    CHECKF(krconn_publish(c2, dir, "unpub-y", TMO) == 0, "%s: publish", where);
    CHECKF(krconn_lookup(dir, "unpub-x", TMO, &a) == 0 && !memcmp(&a, &me, sizeof a),
           "%s: lookup", where);
    int rc = krconn_unpublish(c, dir, "unpub-x", TMO);
    CHECKF(rc == 0, "%s: unpublish: %s", where, krconn_strerror(rc));
    rc = krconn_lookup(dir, "unpub-x", TMO, &a);
    CHECKF(rc == KRCONN_E_NOTFOUND, "%s: lookup after unpublish: %s", where, krconn_strerror(rc));
    rc = krconn_unpublish(c, dir, "unpub-x", TMO);
    CHECKF(rc == KRCONN_E_NOTFOUND, "%s: unpublish twice: %s", where, krconn_strerror(rc));
    rc = krconn_unpublish(c, dir, "never-published", TMO);
    CHECKF(rc == KRCONN_E_NOTFOUND, "%s: unpublish of an unknown name: %s", where,
           krconn_strerror(rc));
    rc = krconn_unpublish(c, dir, "unpub-y", TMO); /* c2's: left as it is */
    CHECKF(rc == KRCONN_E_NOTFOUND, "%s: unpublish of another's name: %s", where,
           krconn_strerror(rc));
    CHECKF(krconn_lookup(dir, "unpub-y", TMO, &a) == 0 && !memcmp(&a, &other, sizeof a),
           "%s: another's name after a foreign unpublish", where);
    CHECKF(krconn_publish(c, dir, "unpub-x", TMO) == 0, "%s: publish again", where);
    rc = krconn_lookup(dir, "unpub-x", TMO, &a);
    CHECKF(rc == 0 && !memcmp(&a, &me, sizeof a), "%s: lookup after publishing again: %s", where,
           krconn_strerror(rc));
    CHECK_EQ(krconn_unpublish(NULL, dir, "unpub-x", TMO), KRCONN_E_INVAL);
    CHECK_EQ(krconn_unpublish(c, NULL, "unpub-x", TMO), KRCONN_E_INVAL);
    CHECK_EQ(krconn_unpublish(c, dir, "", TMO), KRCONN_E_INVAL);
    CHECK_EQ(krconn_unpublish(c, dir, NULL, TMO), KRCONN_E_INVAL);
    krconn_unpublish(c, dir, "unpub-x", TMO);
    krconn_unpublish(c2, dir, "unpub-y", TMO);
}

static void unpublish(void)
{
    krconn_ctx *c = client_ctx(0), *c2 = client_ctx(0), *c3 = client_ctx(0);
    krconn_dir *hd = heap_dir(), *md = NULL;
    krconn *k = NULL;
    if (!c || !c2 || !c3 || !hd) goto out;
    unpublish_on(c, hd, c2, "heap directory");
    int rc = krconn_dir_meta(c, "127.0.0.1", TMO, &md);
    CHECKF(rc == 0, "krconn_dir_meta: %s", krconn_strerror(rc));
    if (!rc) unpublish_on(c, md, c2, "meta server");
    /* a name c connected to (cached), then withdrawn and its context gone */
    CHECK_EQ(krconn_publish(c3, hd, "unpub-gone", TMO), 0);
    rc = krconn_connect_name(c, hd, "unpub-gone", NULL, &k);
    CHECKF(rc == 0, "connect: %s", krconn_strerror(rc));
    if (!rc) krconn_disconnect(k);
    CHECK_EQ(krconn_unpublish(c3, hd, "unpub-gone", TMO), 0);
    krconn_ctx_destroy(c3);
    c3 = NULL;
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = 5000;
    uint64_t t0 = rcp__now_ns();
    rc = krconn_connect_name(c, hd, "unpub-gone", &co, &k);
    double ms = (double)(rcp__now_ns() - t0) / 1e6;
    if (!rc) krconn_disconnect(k);
    printf("# unpublish: a connect by a withdrawn name cached before: %s after %.0f ms\n",
           krconn_strerror(rc), ms);
    CHECKF(rc == KRCONN_E_NOTFOUND && ms < 2000, "connect by a withdrawn name: %s after %.0f ms",
           krconn_strerror(rc), ms);
out:
    if (md) krconn_dir_close(md);
    if (hd) krconn_dir_close(hd);
    if (c3) krconn_ctx_destroy(c3);
    if (c2) krconn_ctx_destroy(c2);
    if (c) krconn_ctx_destroy(c);
}

static void errors_and_no_device(void)
{
    krconn_ctx_opts o;
    krconn_ctx *c = NULL;
    char d[400];
    memset(&o, 0, sizeof o);
    o.device = "no-such-dev";
    int rc = krconn_ctx_create(&o, &c);
    CHECK_EQ(rc, KRCONN_E_NODEV);
    describe(rc, d, sizeof d);
    CHECKF(strstr(d, "open device") != NULL, "describe: %s", d);
    o.device = NULL;
    o.rnr_retry = 7;
    CHECK_EQ(krconn_ctx_create(&o, &c), KRCONN_E_INVAL);
    /* that refused context is no handle: the next context (often at its address) closes once */
    c = client_ctx(0);
    if (c) {
        CHECK_EQ(krconn_ctx_destroy(c), 0);
        CHECK_EQ(krconn_ctx_destroy(c), KRCONN_E_BADHANDLE);
        c = NULL;
    }
    /* addresses as text are checked by the host test (tests/test_krconn.c): they need no device */
    CHECK(strstr(krconn_strerror(KRCONN_E_STALE), "stale") != NULL);
}

/* The one handle rule (ERRORS): krconn_ctx, krconn and krconn_dir closed twice or used after
   their close return KRCONN_E_BADHANDLE (a pointer-returning call NULL with errno EBADF);
   krconn_ctx_destroy closes the connections still open on it. */
static void handles_closed(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    krconn *k = NULL, *k2 = NULL;
    krconn_addr a;
    krconn_stats st;
    if (!c || !dir) goto out;
    int rc = krconn_connect_name(c, dir, "svc", NULL, &k);
    CHECKF(rc == 0, "connect_name: %s", krconn_strerror(rc));
    if (rc) goto out;
    CHECK_EQ(krconn_ping(k, TMO), 0);
    CHECK_EQ(krconn_disconnect(k), 0);
    CHECK_EQ(krconn_disconnect(k), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_ping(k, TMO), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_peer_addr(k, &a), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_is_virtual(k), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_poll(k, NULL, 0, 0), KRCONN_E_BADHANDLE);
    errno = 0;
    CHECK(krconn_peer_data(k) == NULL && errno == EBADF);
    errno = 0;
    CHECK(krconn_qp(k) == NULL && errno == EBADF);
    k = NULL;
    CHECK_EQ(krconn_lookup(dir, "svc", 1000, &a), 0);
    CHECK_EQ(krconn_dir_close(dir), 0);
    CHECK_EQ(krconn_dir_close(dir), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_lookup(dir, "svc", 1000, &a), KRCONN_E_BADHANDLE);
    dir = NULL;
    /* a connection left open is closed by its context's destroy */
    CHECK_EQ(krconn_connect(c, &main_srv.addr, NULL, &k2), 0);
    CHECK_EQ(krconn_ctx_destroy(c), 0);
    CHECK_EQ(krconn_ctx_destroy(c), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_ctx_get_stats(c, &st), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_ctx_addr(c, &a), KRCONN_E_BADHANDLE);
    CHECK_EQ(krconn_accept(c, 0, &k), KRCONN_E_BADHANDLE);
    errno = 0;
    CHECK(krconn_ctx_device(c) == NULL && errno == EBADF);
    c = NULL;
    if (k2) {
        CHECK_EQ(krconn_ping(k2, TMO), KRCONN_E_BADHANDLE);
        CHECK_EQ(krconn_disconnect(k2), KRCONN_E_BADHANDLE);
    }
out:
    if (k) krconn_disconnect(k);
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
}

/* A forked child given its parent's krconn_ctx, krconn and krconn_dir: KRCONN_E_FORKED for
   every call, closes included; the parent's handles work on after the child exits. */
static void handles_forked(void)
{
    krconn_ctx *c = client_ctx(0);
    krconn_dir *dir = heap_dir();
    krconn *k = NULL;
    char err[600];
    if (!c || !dir) goto out;
    int rc = krconn_connect_name(c, dir, "svc", NULL, &k);
    CHECKF(rc == 0, "connect_name: %s", krconn_strerror(rc));
    if (rc) goto out;
    CHECK_EQ(krconn_ping(k, TMO), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        krconn_addr a;
        krconn_stats st;
        krconn_mr mr;
        static char b[64];
        int bad = 0; /* bit i: check i gave another code */
        bad |= (krconn_ping(k, TMO) != KRCONN_E_FORKED) << 0;
        bad |= (krconn_post_send(k, 1, NULL, b, sizeof b, 0) != KRCONN_E_FORKED) << 1;
        bad |= (krconn_peer_addr(k, &a) != KRCONN_E_FORKED) << 2;
        errno = 0;
        bad |= !(krconn_peer_data(k) == NULL && errno == EBADF) << 3;
        bad |= (krconn_ctx_get_stats(c, &st) != KRCONN_E_FORKED) << 4;
        bad |= (krconn_reg(c, b, sizeof b, 0, &mr) != KRCONN_E_FORKED) << 5;
        bad |= (krconn_connect(c, &main_srv.addr, NULL, &k) != KRCONN_E_FORKED) << 6;
        bad |= (krconn_lookup(dir, "svc", 1000, &a) != KRCONN_E_FORKED) << 7;
        bad |= (krconn_disconnect(k) != KRCONN_E_FORKED) << 8;
        bad |= (krconn_dir_close(dir) != KRCONN_E_FORKED) << 9;
        bad |= (krconn_ctx_destroy(c) != KRCONN_E_FORKED) << 10;
        /* closed in the child: still the parent's, still KRCONN_E_FORKED */
        bad |= (krconn_ctx_destroy(c) != KRCONN_E_FORKED) << 11;
        if (bad) printf("# handles_forked: the child's checks with another code: 0x%x\n", bad);
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    int stt = 0;
    CHECK(pid > 0 && waitpid(pid, &stt, 0) == pid);
    CHECKF(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "child: %s %d",
           WIFEXITED(stt) ? "exit" : "signal", WIFEXITED(stt) ? WEXITSTATUS(stt) : WTERMSIG(stt));
    CHECK_EQ(krconn_ping(k, TMO), 0);
    CHECKF(check_data(c, k, 9, 1, err, sizeof err) == 0, "after the child: %s", err);
    krconn_addr a;
    CHECK_EQ(krconn_lookup(dir, "svc", 1000, &a), 0);
    krconn_stats st;
    CHECK_EQ(krconn_ctx_get_stats(c, &st), 0);
    CHECK_EQ(krconn_disconnect(k), 0);
    k = NULL;
out:
    if (k) krconn_disconnect(k);
    if (dir) CHECK_EQ(krconn_dir_close(dir), 0);
    if (c) CHECK_EQ(krconn_ctx_destroy(c), 0);
}

/* ---------------------------------------------------------------- two guests */

#define PAIR_PORT 18611

/* Guest a: a meta server process and a service process ("pair-svc", published at the meta
   server); it restarts or kills the service when b asks. */
static int pair_a(int sock)
{
    server meta, svc;
    srvcfg mcfg = {NULL, 50, 1, 8, NULL}, s1 = {NULL, 51, 0, 8, "pair-svc"},
           s2 = {NULL, 52, 0, 8, "pair-svc"};
    t_begin("pair_a_servers");
    if (server_start(&meta, &mcfg)) { t_end(); return 1; }
    if (server_start(&svc, &s1)) { t_end(); server_stop(&meta, "meta"); return 1; }
    t_end();
    vmt_send_byte(sock, 'R');
    int live = 1;
    for (;;) {
        char cmd = 0;
        if (vmt_read_all(sock, &cmd, 1, 120000)) break;
        if (cmd == 'K') { /* restart the service: a new context, published again */
            server_kill(&svc);
            server_start(&svc, &s2);
        } else if (cmd == 'X') {
            server_kill(&svc);
            live = 0;
        } else break;
        vmt_send_byte(sock, 'R');
    }
    t_begin("pair_a_servers_survived");
    if (live) server_stop(&svc, "service");
    server_stop(&meta, "meta");
    t_end();
    return 0;
}

static int pair_cmd(int sock, char c)
{
    int rc = vmt_send_byte(sock, c);
    return rc ? rc : vmt_expect_byte(sock, 'R', 60000);
}

/* Guest b: finds the meta server through KRCONN_META, connects by name, checks data, sees the
   service restart (stale entry) and die. */
static int pair_b(int sock, const char *peer)
{
    krconn_ctx *c = NULL;
    krconn_dir *dir = NULL;
    krconn *k = NULL, *v = NULL;
    char err[600], d[400];
    int rc;
    CHECK_EQ(vmt_expect_byte(sock, 'R', 120000), 0);
    setenv("KRCONN_META", peer, 1);
    t_begin("pair_meta_connect_data");
    c = client_ctx(0);
    if (!c) goto out;
    rc = krconn_dir_meta(c, NULL, TMO, &dir);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "krconn_dir_meta($KRCONN_META=%s): %s", peer, d);
    if (rc) goto out;
    rc = krconn_connect_name(c, dir, "pair-svc", NULL, &k);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "connect_name across guests: %s", d);
    if (rc) goto out;
    CHECK_EQ(((const srvinfo *)krconn_peer_data(k))->instance, 51);
    CHECKF(check_data(c, k, 61, 1, err, sizeof err) == 0, "physical: %s", err);
    rc = krconn_connect_name(c, dir, "pair-svc", NULL, &v);
    CHECKF(rc == 0 && krconn_is_virtual(v) == 1, "virtual connect: %s", krconn_strerror(rc));
    if (!rc) {
        CHECKF(check_data(c, v, 62, 1, err, sizeof err) == 0, "virtual: %s", err);
        krconn_disconnect(v);
    }
    krconn_disconnect(k);
    k = NULL;
    t_end();

    t_begin("pair_stale_entry");
    CHECK_EQ(pair_cmd(sock, 'K'), 0);
    rc = krconn_connect_name(c, dir, "pair-svc", NULL, &k);
    describe(rc, d, sizeof d);
    CHECKF(rc == 0, "connect after the restart: %s", d);
    if (!rc) {
        krconn_stats st;
        krconn_ctx_get_stats(c, &st);
        CHECK_EQ(((const srvinfo *)krconn_peer_data(k))->instance, 52);
        CHECK_EQ(st.stale_detected, 1);
        CHECKF(check_data(c, k, 63, 1, err, sizeof err) == 0, "after the restart: %s", err);
    }
    t_end();

    t_begin("pair_peer_killed");
    if (k) {
        CHECK_EQ(pair_cmd(sock, 'X'), 0);
        uint64_t t0 = rcp__now_ns();
        rc = krconn_ping(k, TMO);
        double ms = (double)(rcp__now_ns() - t0) / 1e6;
        printf("# pair: peer killed, ping said \"%s\" after %.0f ms\n", krconn_strerror(rc), ms);
        CHECKF(rc == KRCONN_E_PEERDEAD, "ping: %s", krconn_strerror(rc));
        krconn_disconnect(k);
        k = NULL;
    } else CHECKF(0, "no connection to test");
    t_end();
out:
    if (k) krconn_disconnect(k);
    if (dir) krconn_dir_close(dir);
    if (c) krconn_ctx_destroy(c);
    vmt_send_byte(sock, 'D');
    return 0;
}

static int pair_main(int argc, char **argv)
{
    int is_a = vmt_guest_role(argc, argv, 3, "PEER_IP");
    if (is_a < 0) return 2;
    t_begin("pair_tcp");
    int sock = vmt_tcp_peer(is_a, argv[2], PAIR_PORT);
    t_end();
    if (sock < 0) return T_DONE();
    if (is_a) pair_a(sock);
    else pair_b(sock, argv[2]);
    close(sock);
    return T_DONE();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3) return pair_main(argc, argv);
    /* "cycles" and "threads": those groups; any other NAME: the tests whose name contains it */
    const char *only = getenv("KRCONN_TEST_ONLY");
    if (argc > 1) cycles = atoi(argv[1]);
    snprintf(heapname, sizeof heapname, "krconn-dir-%d", (int)getpid());
    shmheap_opts ho;
    memset(&ho, 0, sizeof ho);
    ho.size = 4u << 20;
    shmheap *h = NULL;
    int rc = shmheap_create(heapname, &ho, &h);
    if (rc) { printf("FAIL krconn-setup: shmheap_create: %s\n", shmheap_strerror(rc)); return 1; }
    krconn_dir *d0 = NULL;
    krconn_dir_heap(h, 0, &d0); /* made once, before any publisher */
    if (d0) krconn_dir_close(d0);
    t_begin("krconn_server_start");
    server_start(&main_srv, &main_cfg);
    t_end();
    if (only && strcmp(only, "cycles") && strcmp(only, "threads")) t_only = only;
    if (main_srv.up && only && !t_only) {
        if (!strcmp(only, "cycles")) TEST(cycles_no_leak);
        if (!strcmp(only, "threads")) { /* the concurrent part, for ThreadSanitizer */
            TEST(connect_and_data);
            TEST(four_threads_virtual);
            TEST(four_threads_physical);
            TEST(pool_empty_nowait);
            TEST(meta_directory);
        }
        server_stop(&main_srv, "server");
    } else if (main_srv.up) {
        RUN(errors_and_no_device);
        RUN(connect_and_data);
        RUN(before_hook);
        RUN(four_threads_virtual);
        RUN(four_threads_physical);
        RUN(pool_empty_nowait);
        RUN(ud_qp_reset);
        RUN(no_virtual_private);
        RUN(dead_and_absent);
        RUN(stale_entry);
        RUN(stale_second_directory);
        RUN(slow_host_full_deadline);
        RUN(fuzz_control_qp);
        RUN(meta_directory);
        RUN(unpublish);
        RUN(handles_closed);
        RUN(handles_forked);
        RUN(cycles_no_leak);
        t_begin("krconn_server_survived");
        server_stop(&main_srv, "server");
        t_end();
    }
    shmheap_close(h);
    shmheap_unlink(heapname, NULL);
    return T_DONE();
}
