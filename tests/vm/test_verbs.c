// VM
// LIBS: -libverbs
/* tests/vm/test_verbs.c - impl/verbs.h against real rdma-core on Soft-RoCE (rxe0), in one
 * guest: processes connect QPs through rxe and swap endpoints over socketpairs.
 *   test_verbs           run every check
 *   test_verbs --gid     print the GID index the layer chooses (for perftest's -x) */
#include "vmt.h"

#define BUFSZ (1u << 20)

/* ---------------------------------------------------------------- device and GID */

static void open_device(void)
{
    rcp__verbs_dev d;
    int rc = rcp__verbs_open(NULL, &d);
    CHECKF(rc == 0, "rcp__verbs_open: %s", strerror(-rc));
    if (rc) return;
    CHECK(d.roce);
    struct ibv_gid_entry e;
    rc = ibv_query_gid_ex(d.ctx, d.port, (uint32_t)d.gid_index, &e, 0);
    CHECK_EQ(rc, 0);
    CHECKF(e.gid_type == IBV_GID_TYPE_ROCE_V2, "gid %d has type %u", d.gid_index, e.gid_type);
    CHECKF(rcp__verbs_gid_is_v4mapped(&d.gid), "gid %d is not IPv4-mapped", d.gid_index);
    const char *ip = getenv("VM_IP");
    if (ip) {
        struct in_addr a;
        CHECK(inet_pton(AF_INET, ip, &a) == 1 && memcmp(d.gid.raw + 12, &a, 4) == 0);
    }
    printf("# %s: gid index %d, active mtu %d, max_qp_rd_atom %d, atomic_cap %d\n", d.name,
           d.gid_index, 128 << d.port_attr.active_mtu, d.attr.max_qp_rd_atom, d.attr.atomic_cap);
    rcp__verbs_close(&d);

    rcp__verbs_dev_opts o;
    memset(&o, 0, sizeof o);
    o.name = "rxe0";
    CHECK_EQ(rcp__verbs_open(&o, &d), 0);
    if (d.ctx) rcp__verbs_close(&d);
    o.fixed_gid = 1; /* a caller may insist on an index; index 0 is rxe's link-local IPv6 GID */
    o.gid_index = 0;
    CHECK_EQ(rcp__verbs_open(&o, &d), 0);
    CHECK(d.gid_index == 0 && !rcp__verbs_gid_is_v4mapped(&d.gid));
    if (d.ctx) rcp__verbs_close(&d);
    o.fixed_gid = 0;
    o.name = "no-such-device";
    CHECK_EQ(rcp__verbs_open(&o, &d), -ENODEV);
}

/* ---------------------------------------------------------------- RC SEND/RECV */

static const uint32_t sizes[] = {1, 64, 1000, 1024, 4096, 65536, 300000};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define REPS 8

/* Echo server: receive each message, check it, send it back with every byte inverted. */
static int echo_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    vmt_conn c;
    const char *step = "";
    int rc = 0;
    struct ibv_wc wc;
    unsigned char *in = NULL, *out = NULL;
    if ((rc = vmt_conn_setup(fd, IBV_QPT_RC, 2 * BUFSZ, NULL, &c, &step)))
        VMT_FAILF("echo setup: %s: %s", step, strerror(-rc));
    in = c.buf;
    out = c.buf + BUFSZ;
    VMT_TRY(rcp__verbs_post_recv(c.qp, 1, in, BUFSZ, c.mr->lkey));
    VMT_TRY(vmt_send_byte(fd, 'R'));
    for (unsigned i = 0; i < NSIZES * REPS; i++) {
        uint32_t n = sizes[i / REPS];
        VMT_WAIT_OK(c.rcq, &wc);
        if (wc.opcode != IBV_WC_RECV || wc.byte_len != n)
            VMT_FAILF("message %u: opcode %d, %u bytes, expected %u", i, wc.opcode, wc.byte_len, n);
        long bad = vmt_check(in, n, i);
        if (bad >= 0) VMT_FAILF("message %u (%u bytes): byte %ld differs", i, n, bad);
        for (uint32_t k = 0; k < n; k++) out[k] = (unsigned char)~in[k];
        VMT_TRY(rcp__verbs_post_recv(c.qp, 1, in, BUFSZ, c.mr->lkey));
        VMT_TRY(rcp__verbs_post_send(c.qp, 2, out, n, c.mr->lkey, IBV_SEND_SIGNALED));
        VMT_WAIT_OK(c.scq, &wc);
    }
    rc = 0;
out:
    if (why[0]) rc = -1;
    if (c.qp || c.buf) vmt_conn_free(&c);
    return rc;
}

static void rc_send_recv(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    char why[512] = "";
    struct ibv_wc wc;
    int rc = vmt_pair_start(&p, echo_role, NULL, IBV_QPT_RC, 2 * BUFSZ, NULL);
    if (!rc) rc = vmt_expect_byte(p.sock, 'R', 60000);
    unsigned char *out = c->buf, *in = c->buf + BUFSZ;
    for (unsigned i = 0; !rc && i < NSIZES * REPS; i++) {
        uint32_t n = sizes[i / REPS];
        vmt_fill(out, n, i);
        if ((rc = rcp__verbs_post_recv(c->qp, 1, in, BUFSZ, c->mr->lkey)) ||
            (rc = rcp__verbs_post_send(c->qp, 2, out, n, c->mr->lkey, IBV_SEND_SIGNALED)) ||
            (rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT)) ||
            (rc = rcp__verbs_wait(c->rcq, &wc, VMT_WAIT))) {
            CHECKF(0, "message %u: %s", i, rcp__verbs_describe(rc, &wc, why, sizeof why));
            break;
        }
        CHECK_EQ(wc.byte_len, n);
        for (uint32_t k = 0; k < n; k++)
            if (in[k] + out[k] != 0xff) {
                CHECKF(0, "echo %u: byte %u differs", i, k);
                rc = -1;
                break;
            }
    }
    vmt_pair_end(&p, "echo side");
}

/* ---------------------------------------------------------------- RDMA WRITE / READ */

#define WSEED 77u

/* Target of WRITEs: waits for the WRITE_WITH_IMM that ends them, then checks its buffer. */
static int write_target_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    vmt_conn c;
    struct ibv_wc wc;
    if (vmt_role_conn(fd, IBV_QPT_RC, BUFSZ, &c, why, whylen)) goto out;
    VMT_TRY(rcp__verbs_post_recv(c.qp, 9, NULL, 0, c.mr->lkey));
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_WAIT_OK(c.rcq, &wc);
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
        ntohl(wc.imm_data) != 0xC0FFEEu)
        VMT_FAILF("completion opcode %d flags %#x imm %#x", wc.opcode, wc.wc_flags, ntohl(wc.imm_data));
    long bad = vmt_check(c.buf, BUFSZ, WSEED);
    if (bad >= 0) VMT_FAILF("written data differs at byte %ld", bad);
out:
    vmt_conn_free(&c);
    return why[0] ? -1 : 0;
}

static void rdma_write(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    char why[512] = "";
    struct ibv_wc wc;
    int rc = vmt_pair_start(&p, write_target_role, NULL, IBV_QPT_RC, BUFSZ, NULL);
    if (!rc) {
        CHECK_EQ(c->rlen, BUFSZ);
        vmt_fill(c->buf, BUFSZ, WSEED);
        rc = vmt_expect_byte(p.sock, 'R', 60000);
        CHECK_EQ(rc, 0);
        /* Odd pieces first (unaligned, crossing MTU boundaries), then the rest in one go,
         * then a zero-length WRITE_WITH_IMM as the "done" signal; the RC QP keeps them in order. */
        const size_t cut[] = {0, 1, 7, 1030, 5000, 70001, BUFSZ};
        for (unsigned i = 0; !rc && i + 1 < sizeof cut / sizeof cut[0]; i++) {
            rc = rcp__verbs_post_write(c->qp, i, c->buf + cut[i], (uint32_t)(cut[i + 1] - cut[i]),
                                       c->mr->lkey, c->raddr + cut[i], c->rkey, 0, 0, IBV_SEND_SIGNALED);
            if (!rc) rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
            CHECKF(rc == 0, "write %u: %s", i, rcp__verbs_describe(rc, &wc, why, sizeof why));
        }
        if (!rc) {
            rc = rcp__verbs_post_write(c->qp, 99, NULL, 0, c->mr->lkey, c->raddr, c->rkey, 1, 0xC0FFEEu,
                                       IBV_SEND_SIGNALED);
            if (!rc) rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
            CHECKF(rc == 0, "write with imm: %s", rcp__verbs_describe(rc, &wc, why, sizeof why));
        }
    }
    vmt_pair_end(&p, "target");
}

#define RSEED 91u

/* Source of READs: fills its buffer, says so, and waits until the reader is done. */
static int read_source_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    vmt_conn c;
    if (vmt_role_conn(fd, IBV_QPT_RC, BUFSZ, &c, why, whylen)) goto out;
    vmt_fill(c.buf, BUFSZ, RSEED);
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_TRY(vmt_expect_byte(fd, 'D', 60000));
out:
    vmt_conn_free(&c);
    return why[0] ? -1 : 0;
}

static void rdma_read(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    char why[512] = "";
    struct ibv_wc wc;
    int rc = vmt_pair_start(&p, read_source_role, NULL, IBV_QPT_RC, BUFSZ, NULL);
    if (!rc) rc = vmt_expect_byte(p.sock, 'R', 60000);
    if (!rc) {
        /* the whole buffer in one READ, then a small unaligned piece into an odd offset */
        memset(c->buf, 0, BUFSZ);
        rc = rcp__verbs_post_read(c->qp, 1, c->buf, BUFSZ, c->mr->lkey, c->raddr, c->rkey, IBV_SEND_SIGNALED);
        if (!rc) rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
        CHECKF(rc == 0, "read: %s", rcp__verbs_describe(rc, &wc, why, sizeof why));
        if (!rc) {
            CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
            CHECK_EQ(vmt_check(c->buf, BUFSZ, RSEED), -1);
            unsigned char want[3000];
            memcpy(want, c->buf + 12345, sizeof want);
            memset(c->buf, 0, BUFSZ);
            rc = rcp__verbs_post_read(c->qp, 2, c->buf + 3, sizeof want, c->mr->lkey, c->raddr + 12345,
                                      c->rkey, IBV_SEND_SIGNALED);
            if (!rc) rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
            CHECKF(rc == 0, "small read: %s", rcp__verbs_describe(rc, &wc, why, sizeof why));
            CHECK(memcmp(c->buf + 3, want, sizeof want) == 0);
            CHECK(c->buf[2] == 0 && c->buf[3 + sizeof want] == 0);
        }
    }
    if (p.sock >= 0) vmt_send_byte(p.sock, 'D');
    vmt_pair_end(&p, "source");
}

/* ---------------------------------------------------------------- atomics, two processes */

#define ATOMIC_OPS 400 /* per client: this many fetch-and-adds and as many CAS increments */

/* A client: FAA +1 and CAS-increment loops on the target's word, contending with the other. */
static int atomic_client_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    vmt_conn c;
    struct ibv_wc wc;
    uint64_t cas_retries = 0;
    if (vmt_role_conn(fd, IBV_QPT_RC, 4096, &c, why, whylen)) goto out;
    uint64_t *old = (uint64_t *)c.buf, last = 0, guess = 0, raddr;
    uint32_t rkey;
    unsigned char go[13];
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_TRY(vmt_read_all(fd, go, sizeof go, 60000));
    if (go[0] != 'G') VMT_FAILF("bad go message");
    raddr = vmt_get64(go + 1);
    rkey = rcp__verbs_get32(go + 9);
    for (int i = 0; i < ATOMIC_OPS; i++) {
        VMT_TRY(rcp__verbs_post_faa(c.qp, 1, old, c.mr->lkey, raddr, rkey, 1, IBV_SEND_SIGNALED));
        VMT_WAIT_OK(c.scq, &wc);
        if (wc.opcode != IBV_WC_FETCH_ADD) VMT_FAILF("faa completion opcode %d", wc.opcode);
        if (*old < last) VMT_FAILF("fetch-and-add returned %llu after %llu",
                                          (unsigned long long)*old, (unsigned long long)last);
        last = guess = *old + 1;
        for (;;) { /* CAS increment: retry with the value the target really held */
            VMT_TRY(rcp__verbs_post_cas(c.qp, 2, old, c.mr->lkey, raddr, rkey, guess, guess + 1,
                                        IBV_SEND_SIGNALED));
            VMT_WAIT_OK(c.scq, &wc);
            if (wc.opcode != IBV_WC_COMP_SWAP) VMT_FAILF("cas completion opcode %d", wc.opcode);
            if (*old == guess) break;
            if (*old < guess) VMT_FAILF("word went backwards: %llu < %llu",
                                        (unsigned long long)*old, (unsigned long long)guess);
            guess = *old;
            cas_retries++;
        }
        last = guess + 1;
    }
    dprintf(fd, "%020llu", (unsigned long long)cas_retries);
out:
    vmt_conn_free(&c);
    return why[0] ? -1 : 0;
}

static void atomics_two_procs(void)
{
    int sock[2] = {-1, -1};
    vmt_child ch[2];
    vmt_conn c[2];
    struct ibv_mr *wmr[2] = {NULL, NULL};
    const char *step = "";
    char why[512];
    memset(c, 0, sizeof c);
    /* One word, registered in each connection's protection domain, so both clients' QPs aim
     * at the same address. */
    uint64_t *word = (uint64_t *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(word != MAP_FAILED);
    if (word == MAP_FAILED) return;
    word[8] = 1000; /* not at the start of the page: a real offset inside the region */
    int ok = 1;
    for (int i = 0; i < 2; i++)
        if (vmt_spawn_sock(atomic_client_role, NULL, &ch[i], &sock[i])) ok = 0;
    for (int i = 0; i < 2 && ok; i++) {
        step = "register word";
        int rc = vmt_conn_setup(sock[i], IBV_QPT_RC, 4096, NULL, &c[i], &step);
        if (!rc) rc = rcp__verbs_reg(&c[i].d, word, 4096, 0, &wmr[i]);
        if (!rc) rc = vmt_expect_byte(sock[i], 'R', 60000);
        CHECKF(rc == 0, "connection %d: %s: %s", i, step, strerror(-rc));
        ok = rc == 0;
    }
    for (int i = 0; i < 2 && ok; i++) { /* go: where the word is, both at once */
        unsigned char go[13];
        go[0] = 'G';
        vmt_put64(go + 1, (uintptr_t)&word[8]);
        rcp__verbs_put32(go + 9, wmr[i]->rkey);
        vmt_write_all(sock[i], go, sizeof go);
    }
    unsigned long long retries[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        char num[21] = "";
        if (sock[i] < 0) continue;
        if (ok && vmt_read_all(sock[i], num, 20, 100000) == 0) retries[i] = strtoull(num, NULL, 10);
        why[0] = 0;
        if (vmt_reap(&ch[i], why, sizeof why)) {
            if (ok) CHECKF(0, "client %d: %s", i, why);
            ok = 0;
        }
        close(sock[i]);
    }
    if (ok) {
        CHECK_EQ(rcp__load(&word[8]), 1000 + 2 * 2 * ATOMIC_OPS);
        CHECK(word[7] == 0 && word[9] == 0);
    }
    printf("# atomics: final %llu, CAS retries under contention %llu + %llu\n",
           (unsigned long long)word[8], retries[0], retries[1]);
    for (int i = 0; i < 2; i++) {
        if (wmr[i]) rcp__verbs_dereg(wmr[i]);
        if (c[i].qp) vmt_conn_free(&c[i]);
    }
    munmap(word, 4096);
}

/* ---------------------------------------------------------------- UD */

#define UD_MSGS 16
#define UD_MAX 1024 /* one MTU: UD messages are single packets */

static uint32_t ud_len(unsigned i) { return 1 + (i * 389u) % UD_MAX; }

/* Receives UD_MSGS datagrams, checks them and their source, answers each with its inverse. */
static int ud_echo_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    vmt_conn c;
    struct ibv_wc wc;
    const uint32_t slot = RCP__VERBS_GRH + UD_MAX;
    if (vmt_role_conn(fd, IBV_QPT_UD, 2 * UD_MSGS * slot, &c, why, whylen)) goto out;
    for (unsigned i = 0; i < UD_MSGS; i++)
        VMT_TRY(rcp__verbs_post_recv(c.qp, i, c.buf + i * slot, slot, c.mr->lkey));
    VMT_TRY(vmt_send_byte(fd, 'R'));
    for (unsigned i = 0; i < UD_MSGS; i++) {
        VMT_WAIT_OK(c.rcq, &wc);
        unsigned k = (unsigned)wc.wr_id;
        unsigned char *msg = c.buf + k * slot + RCP__VERBS_GRH;
        if (wc.opcode != IBV_WC_RECV || wc.byte_len != RCP__VERBS_GRH + ud_len(k))
            VMT_FAILF("datagram %u: opcode %d, %u bytes", k, wc.opcode, wc.byte_len);
        if (wc.src_qp != c.peer.qpn) VMT_FAILF("datagram %u from qp %u, not %u", k, wc.src_qp, c.peer.qpn);
        if (!(wc.wc_flags & IBV_WC_GRH)) VMT_FAILF("datagram %u without GRH", k);
        long bad = vmt_check(msg, ud_len(k), 500 + k);
        if (bad >= 0) VMT_FAILF("datagram %u: byte %ld differs", k, bad);
        unsigned char *reply = c.buf + (UD_MSGS + k) * slot;
        for (uint32_t j = 0; j < ud_len(k); j++) reply[j] = (unsigned char)~msg[j];
        VMT_TRY(rcp__verbs_post_ud_send(c.qp, k, reply, ud_len(k), c.mr->lkey, c.ah, &c.peer,
                                        IBV_SEND_SIGNALED));
        VMT_WAIT_OK(c.scq, &wc);
    }
out:
    vmt_conn_free(&c);
    return why[0] ? -1 : 0;
}

static void ud_send_recv(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    char why[512] = "";
    struct ibv_wc wc;
    const uint32_t slot = RCP__VERBS_GRH + UD_MAX;
    int rc = vmt_pair_start(&p, ud_echo_role, NULL, IBV_QPT_UD, 2 * UD_MSGS * slot, NULL);
    for (unsigned i = 0; !rc && i < UD_MSGS; i++)
        rc = rcp__verbs_post_recv(c->qp, i, c->buf + (UD_MSGS + i) * slot, slot, c->mr->lkey);
    if (!rc) rc = vmt_expect_byte(p.sock, 'R', 60000);
    CHECK_EQ(rc, 0);
    for (unsigned i = 0; !rc && i < UD_MSGS; i++) {
        vmt_fill(c->buf + i * slot, ud_len(i), 500 + i);
        rc = rcp__verbs_post_ud_send(c->qp, i, c->buf + i * slot, ud_len(i), c->mr->lkey, c->ah, &c->peer,
                                     IBV_SEND_SIGNALED);
        if (!rc) rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
        CHECKF(rc == 0, "send %u: %s", i, rcp__verbs_describe(rc, &wc, why, sizeof why));
    }
    for (unsigned i = 0; !rc && i < UD_MSGS; i++) {
        rc = rcp__verbs_wait(c->rcq, &wc, VMT_WAIT);
        CHECKF(rc == 0, "reply %u: %s", i, rcp__verbs_describe(rc, &wc, why, sizeof why));
        if (rc) break;
        unsigned k = (unsigned)wc.wr_id;
        CHECK_EQ(wc.byte_len, RCP__VERBS_GRH + ud_len(k));
        const unsigned char *sent = c->buf + k * slot, *got = c->buf + (UD_MSGS + k) * slot + RCP__VERBS_GRH;
        for (uint32_t j = 0; j < ud_len(k); j++)
            if (got[j] + sent[j] != 0xff) { CHECKF(0, "reply %u byte %u", k, j); break; }
    }
    vmt_pair_end(&p, "echo side");
}

/* ---------------------------------------------------------------- error paths */

/* A passive peer: connects and stays until told to go (or exits at once with arg != NULL,
 * leaving a dead QP number behind). */
static int passive_role(int fd, void *arg, char *why, size_t whylen)
{
    vmt_conn c;
    if (vmt_role_conn(fd, IBV_QPT_RC, 65536, &c, why, whylen)) goto out;
    if (arg) { vmt_conn_free(&c); VMT_TRY(vmt_send_byte(fd, 'X')); return 0; }
    VMT_TRY(vmt_send_byte(fd, 'R'));
    VMT_TRY(vmt_expect_byte(fd, 'D', 120000));
out:
    vmt_conn_free(&c);
    return why[0] ? -1 : 0;
}

/* Connect to a passive peer with the given QP options; 0 once it is ready. End with
 * passive_done. */
static int passive_pair(vmt_pair *p, void *arg, const rcp__verbs_qp_opts *o)
{
    int rc = vmt_pair_start(p, passive_role, arg, IBV_QPT_RC, 65536, o);
    if (!rc) {
        rc = vmt_expect_byte(p->sock, arg ? 'X' : 'R', 60000);
        CHECKF(rc == 0, "setup: peer ready: %s", strerror(-rc));
    }
    return rc;
}

/* Tell a peer still running to go, and reap it. */
static void passive_done(vmt_pair *p)
{
    if (p->running) vmt_send_byte(p->sock, 'D');
    vmt_pair_end(p, "peer");
}

/* The work request just posted (rc: what posting it returned) must complete with the error
 * want_rc, status want; returns what waiting for it returned, its description in d. */
static int wait_failed(vmt_conn *c, int rc, int want_rc, enum ibv_wc_status want, struct ibv_wc *wc,
                       char *d, size_t dlen)
{
    CHECK_EQ(rc, 0);
    rc = rcp__verbs_wait(c->scq, wc, VMT_WAIT);
    CHECKF(rc == want_rc && wc->status == want, "got %s", rcp__verbs_describe(rc, wc, d, dlen));
    return rc;
}

/* A WRITE with a wrong rkey ends in a remote access error completion, quickly; the QP is then
 * in the error state and later work is flushed, not lost. */
static void err_bad_rkey(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    struct ibv_wc wc;
    char d[256];
    if (passive_pair(&p, NULL, NULL) == 0) {
        uint64_t t0 = rcp__now_ns();
        int rc = rcp__verbs_post_write(c->qp, 1, c->buf, 64, c->mr->lkey, c->raddr, c->rkey ^ 0x5a5a00u,
                                       0, 0, IBV_SEND_SIGNALED);
        rc = wait_failed(c, rc, -EACCES, IBV_WC_REM_ACCESS_ERR, &wc, d, sizeof d);
        double ms = (double)(rcp__now_ns() - t0) / 1e6;
        printf("# bad rkey -> \"%s\" after %.1f ms\n", rcp__verbs_describe(rc, &wc, d, sizeof d), ms);
        CHECK(strstr(d, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)) != NULL);
        CHECK_EQ(vmt_qp_state(c->qp), IBV_QPS_ERR);
        rc = rcp__verbs_post_send(c->qp, 2, c->buf, 8, c->mr->lkey, IBV_SEND_SIGNALED);
        if (rc == 0) {
            rc = rcp__verbs_wait(c->scq, &wc, VMT_WAIT);
            CHECKF(rc == -ECANCELED && wc.status == IBV_WC_WR_FLUSH_ERR, "after error: %s",
                   rcp__verbs_describe(rc, &wc, d, sizeof d));
        }
    }
    passive_done(&p);
}

/* A READ past the end of the peer's region: remote access error too. */
static void err_out_of_bounds(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    struct ibv_wc wc;
    char d[256];
    if (passive_pair(&p, NULL, NULL) == 0) {
        int rc = rcp__verbs_post_read(c->qp, 1, c->buf, 4096, c->mr->lkey, c->raddr + c->rlen - 100,
                                      c->rkey, IBV_SEND_SIGNALED);
        wait_failed(c, rc, -EACCES, IBV_WC_REM_ACCESS_ERR, &wc, d, sizeof d);
    }
    passive_done(&p);
}

/* Sending to a QP whose process died: the retries run out and the completion says so, within
 * the time the QP's timeout and retry count allow. Nothing hangs. */
static void err_dead_peer(void)
{
    vmt_pair p;
    vmt_conn *c = &p.c;
    struct ibv_wc wc;
    char d[256];
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = 12;  /* 16.8 ms */
    o.retry_cnt = 2;
    if (passive_pair(&p, (void *)1, &o) == 0) {
        vmt_pair_reap(&p, "peer");
        uint64_t t0 = rcp__now_ns();
        int rc = rcp__verbs_post_send(c->qp, 1, c->buf, 64, c->mr->lkey, IBV_SEND_SIGNALED);
        rc = wait_failed(c, rc, -ETIMEDOUT, IBV_WC_RETRY_EXC_ERR, &wc, d, sizeof d);
        double ms = (double)(rcp__now_ns() - t0) / 1e6;
        printf("# dead peer -> \"%s\" after %.1f ms\n", rcp__verbs_describe(rc, &wc, d, sizeof d), ms);
    }
    passive_done(&p);
}

/* Waiting on an idle CQ returns -ETIMEDOUT on time, with and without a completion channel;
 * registering unmapped memory is an error code, not a crash. */
static void err_timeouts_and_bad_input(void)
{
    rcp__verbs_dev d;
    int rc = rcp__verbs_open(NULL, &d);
    CHECK_EQ(rc, 0);
    if (rc) return;
    for (int chan = 0; chan < 2; chan++) {
        struct ibv_cq *cq = NULL;
        struct ibv_wc wc;
        CHECK_EQ(rcp__verbs_cq_create(&d, 16, chan, &cq), 0);
        if (!cq) continue;
        uint64_t t0 = rcp__now_ns();
        rc = rcp__verbs_wait(cq, &wc, 300 * 1000000ull);
        uint64_t ms = (rcp__now_ns() - t0) / 1000000ull;
        CHECK_EQ(rc, -ETIMEDOUT);
        CHECKF(ms >= 300 && ms < 3000, "waited %llu ms for a 300 ms timeout (channel %d)",
               (unsigned long long)ms, chan);
        CHECK_EQ(rcp__verbs_cq_destroy(cq), 0);
    }
    void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, 1 << 16);
    struct ibv_mr *mr = NULL;
    rc = rcp__verbs_reg(&d, p, 1 << 16, 0, &mr);
    CHECKF(rc < 0 && mr == NULL, "registering unmapped memory gave %d", rc);
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.type = IBV_QPT_UC;
    struct ibv_qp *qp = NULL;
    CHECK_EQ(rcp__verbs_qp_create(&d, NULL, NULL, &o, &qp), -EINVAL);
    unsigned char bad[VMT_EP_WIRE];
    memset(bad, 0xff, sizeof bad);
    rcp__verbs_ep ep;
    CHECK_EQ(vmt_ep_unpack(bad, &ep), -EPROTO);
    rcp__verbs_close(&d);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--gid") == 0) {
        rcp__verbs_dev d;
        int rc = rcp__verbs_open(NULL, &d);
        if (rc) { fprintf(stderr, "open: %s\n", strerror(-rc)); return 1; }
        printf("%d\n", d.gid_index);
        rcp__verbs_close(&d);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    TEST(open_device);
    TEST(rc_send_recv);
    TEST(rdma_write);
    TEST(rdma_read);
    TEST(atomics_two_procs);
    TEST(ud_send_recv);
    TEST(err_bad_rkey);
    TEST(err_out_of_bounds);
    TEST(err_dead_peer);
    TEST(err_timeouts_and_bad_input);
    return T_DONE();
}
