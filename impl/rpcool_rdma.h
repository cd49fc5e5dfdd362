/* SPDX-License-Identifier: MIT */
/* impl/rpcool_rdma.h - rpcool's RDMA transport between pods (private to rpcool.h's
   implementation, which includes it when RPCOOL_WITH_RDMA is defined; see rpcool.h's manual,
   section "Between pods"). Not a public header: every name here is rpcool__r*.

   The design, in short:
   - A connection is one physical krconn connection (KRCONN_CONNECT_NO_VIRTUAL: its own RC QP
     and CQ, taken from krconn's pool of ready QPs). The client finds the server through a krconn
     directory: "rdma://HOST[:PORT]/NAME" reads the meta server at HOST:PORT, "rdma:NAME" the one
     named by $KRCONN_META; the server publishes "rpcool.NAME" there.
   - Each side registers one area: [credit 64 B][receive ring][send buffer][credit source]
     [hello buffer]. Messages are frames [header 64 B][body][trailer 8 B] that the sender builds
     in its send buffer and writes with ONE RDMA WRITE WITH IMMEDIATE at the same offset of the
     peer's ring (RR-Compound's ring; the immediate is the frame's offset, so a frame never
     straddles the ring's end). The completion of the immediate is the receiver's signal that the
     whole frame is there. The receiver writes back what it consumed (bytes and frames, 16 B, one
     RDMA WRITE) once a quarter of the ring or of its posted receives is used; a frame is at most
     half the ring, so a sender always gets room eventually.
   - The client's connection heap is an ordinary shmheap of its pod, at an address unique to its
     pod (SHMHEAP_POD_ID). The server maps a private, anonymous MIRROR of it at the same address
     (MAP_FIXED_NOREPLACE: a clash is refused with RPCOOL_E_ADDRINUSE) and registers it with
     userfaultfd (missing pages). A call carries its extents (the argument's pages, and ranges
     the caller names) inline; the server drops every mirror page it populated for the previous
     call, copies the extents in (UFFDIO_COPY), and runs the handler. A page outside the extents
     faults on first touch: the server's fault thread asks the client for it (a FETCH frame), the
     client answers with the page's bytes (a PAGES frame) from inside its wait, and the fault
     thread copies it in. Why not an RDMA READ: the client's heap would have to be registered
     (pinned) whole for the server to read it at any time, or registered chunk by chunk with a
     lease round trip per miss (nppin.h), which costs the same round trip as asking for the page
     and adds lease state; a connection heap is sparse and 64 MiB by default.
   - Replies: the client sets aside a reply region in its heap at connect. The server owns it:
     rpcool_ctx_alloc carves blocks from it (a private first-fit allocator), and everything the
     handler allocated travels back inline in the DONE frame, which the client copies to the
     same addresses. rpcool_free of any block of a reply frees that call's whole reply; the
     frees ride on the next call (or a FREE frame when many are queued).
   - Waiting (RR-Compound's BPEV): poll the CQ while calls are frequent (spin_ns), then arm it
     and sleep on its completion channel (krconn's KRCONN_CTX_EVENTS), so an idle side uses no
     CPU for its connections.
   - Liveness: a side waiting on its peer posts a zero-byte RDMA WRITE every peer_check_ms (reap_ms
     on the server); a dead peer's QP stops acknowledging and the WRITE fails after krconn's
     retry bound (retry_cnt 6 x timeout 67 ms: about 0.5 s). */
#ifndef RPCOOL_RDMA_IMPL_H
#define RPCOOL_RDMA_IMPL_H

#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#define RPCOOL__R_VERSION 1u
#define RPCOOL__R_HELLO_MAGIC 0x31524c4843434f52ull /* "RCOCHLR1" */
#define RPCOOL__R_TRAILER 0x3152544f4f435052ull
#define RPCOOL__R_RING ((size_t)4 << 20)   /* each side's receive ring */
#define RPCOOL__R_MAXFRAME (RPCOOL__R_RING / 2)
#define RPCOOL__R_RECVS 128u               /* receives kept posted per side */
#define RPCOOL__R_WR 512u                  /* send and receive queue depth asked of krconn */
#define RPCOOL__R_SIGNAL 16u               /* every 16th send is signalled */
#define RPCOOL__R_HELLO 256u
#define RPCOOL__R_AREA (64 + 2 * RPCOOL__R_RING + 64 + RPCOOL__R_HELLO)
#define RPCOOL__R_FREES 256u               /* reply frees queued before a FREE frame goes */
#define RPCOOL__R_FETCH_MS 2000u           /* a page fetch waits this long for its client */

enum { /* frame types */
    RPCOOL__RF_CALL = 1, RPCOOL__RF_DONE, RPCOOL__RF_FETCH, RPCOOL__RF_PAGES, RPCOOL__RF_FREE,
    RPCOOL__RF_BYE, RPCOOL__RF_ACCEPT
};
enum { /* work request ids */
    RPCOOL__RW_SEND = 1, RPCOOL__RW_RECV = 2, RPCOOL__RW_PING = 3, RPCOOL__RW_HELLO = 4
};

struct rpcool__rf {
    uint32_t len;      /* the whole frame: header, body, trailer; a multiple of 8 */
    uint16_t type, slot;
    uint32_t gen, seq;
    int32_t status;    /* DONE, ACCEPT, PAGES */
    uint32_t fn, flags;
    uint32_t n1, n2;   /* CALL: frees, extents; DONE: blocks; FREE: frees */
    uint32_t id;       /* FETCH, PAGES */
    uint64_t a, b;     /* CALL: arg, arg_len; DONE: ret, ret_len; FETCH/PAGES: addr, len */
    uint64_t pad;
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__rf) == 64, "rdma frame header");

struct rpcool__rhello {
    uint64_t magic;
    uint32_t version, role;     /* 1 server, 2 client */
    uint64_t area;              /* the sender's registered area */
    uint32_t rkey;
    int32_t status;
    uint64_t heap_base, heap_size, reply_base, reply_len;
    char channel[RPCOOL__NAME_MAX + 8];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__rhello) <= RPCOOL__R_HELLO, "rdma hello");

struct rpcool__rcredit {
    uint64_t bytes, frames; /* consumed by the receiver, of what this side sent */
};

/* A reply block the server carved from a client's reply region. */
struct rpcool__rblk {
    uint64_t addr, len;
    uint32_t group; /* the call that allocated it */
};

struct rpcool__rframe { /* a frame set aside by the fault thread for the serving thread */
    struct rpcool__rframe *next;
    size_t len;
    char data[];
};

enum { RPCOOL__RS_HELLO = 1, RPCOOL__RS_ACTIVE, RPCOOL__RS_DEAD };

struct rpcool__rconn {
    struct rpcool__rconn *next;  /* the server's list */
    krconn *k;
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    krconn_mr mr;
    char *area;
    uint64_t peer_area;
    uint32_t peer_rkey;
    int evfd;                    /* completion channel, or -1 */
    /* completions: under cq_lock */
    pthread_mutex_t cq_lock;
    uint32_t rxq[2 * RPCOOL__R_RECVS];
    unsigned rxq_head, rxq_n;
    int hello_in;                /* a hello came (its bytes are in the hello buffer) */
    /* receiving: under rx_lock */
    pthread_mutex_t rx_lock;
    uint64_t rx_pos, rx_frames, rep_bytes, rep_frames;
    uint32_t rx_seq;
    struct rpcool__rframe *backlog, **backlog_tail;
    /* sending: under tx_lock */
    pthread_mutex_t tx_lock;
    uint64_t tx_pos, tx_frames, sq_posted;
    uint32_t tx_seq;
    uint64_t sq_done;            /* work requests known complete (cq_lock, read under tx_lock) */
    int ping_out;
    uint64_t last_ping, last_rx;
    int32_t dead;                /* sticky: why the connection is unusable */
    uint64_t bad;                /* malformed frames */
    /* the client's heap, as the server mirrors it */
    uint64_t base, size, rbase, rlen;
    int state;                   /* server: RPCOOL__RS_* */
    uint64_t hello_deadline;
    int mirror, populated;
    struct rpcool__rblk *blk;    /* reply blocks, sorted by address */
    size_t nblk, capblk;
    uint32_t group;              /* the call being served */
    uint32_t fetch_id;
    /* client side: frees to send */
    pthread_mutex_t free_lock;
    uint64_t *frees;
    unsigned nfrees;
};

struct rpcool__rsrv {
    krconn_ctx *kc;
    krconn_dir *dir;
    int uffd;
    int stop;
    pthread_t thr, fthr;
    int thr_started, fthr_started;
    pthread_mutex_t lock;        /* the connection list, against the fault thread */
    struct rpcool__rconn *conns;
    char name[RPCOOL__NAME_MAX + 8];
};

static inline struct rpcool__rcredit *rpcool__r_credit_in(struct rpcool__rconn *rc)
{
    return (struct rpcool__rcredit *)rc->area;
}
static inline char *rpcool__r_ring(struct rpcool__rconn *rc) { return rc->area + 64; }
static inline char *rpcool__r_sbuf(struct rpcool__rconn *rc)
{
    return rc->area + 64 + RPCOOL__R_RING;
}
static inline struct rpcool__rcredit *rpcool__r_credit_src(struct rpcool__rconn *rc)
{
    return (struct rpcool__rcredit *)(rc->area + 64 + 2 * RPCOOL__R_RING);
}
static inline char *rpcool__r_hello(struct rpcool__rconn *rc)
{
    return rc->area + 128 + 2 * RPCOOL__R_RING;
}

static int rpcool__r_err(int krc)
{
    switch (krc) {
    case 0: return 0;
    case KRCONN_E_NOTSUP: return RPCOOL_E_NOTSUP;
    case KRCONN_E_TIMEDOUT: return RPCOOL_E_TIMEOUT;
    case KRCONN_E_NOTFOUND: return RPCOOL_E_NOCHANNEL;
    case KRCONN_E_STALE: return RPCOOL_E_NOCHANNEL;
    case KRCONN_E_REJECTED: return RPCOOL_E_NOSLOT;
    case KRCONN_E_PEERDEAD: case KRCONN_E_FLUSHED: case KRCONN_E_QPERR: case KRCONN_E_NORECV:
        return RPCOOL_E_PEERDEAD;
    case KRCONN_E_CLOSED: return RPCOOL_E_CLOSED;
    case KRCONN_E_INVAL: return RPCOOL_E_INVAL;
    case KRCONN_E_PROTO: return RPCOOL_E_PROTO;
    case KRCONN_E_NODEV: return RPCOOL_E_NOTSUP;
    default: return krc < 0 && krc > -4096 ? krc : RPCOOL_E_PROTO;
    }
}

/* ---------------------------------------------------------------------------- >>r-conn */

static void rpcool__r_conn_free(struct rpcool__rconn *rc)
{
    if (!rc) return;
    if (rc->mr.mr) krconn_dereg(&rc->mr);
    if (rc->k) krconn_disconnect(rc->k);
    free(rc->area);
    rpcool__free(rc->blk);
    rpcool__free(rc->frees);
    while (rc->backlog) {
        struct rpcool__rframe *f = rc->backlog;
        rc->backlog = f->next;
        rpcool__free(f);
    }
    pthread_mutex_destroy(&rc->cq_lock);
    pthread_mutex_destroy(&rc->rx_lock);
    pthread_mutex_destroy(&rc->tx_lock);
    pthread_mutex_destroy(&rc->free_lock);
    rpcool__free(rc);
}

static int rpcool__r_post_recv(struct rpcool__rconn *rc)
{
    struct ibv_sge sge = {(uint64_t)(uintptr_t)rpcool__r_hello(rc), RPCOOL__R_HELLO, rc->mr.lkey};
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = RPCOOL__RW_RECV;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int r = ibv_post_recv(rc->qp, &wr, &bad);
    return r ? -r : 0;
}

/* A new connection over krconn connection k: register the area, post the receives. */
static int rpcool__r_conn_new(krconn_ctx *kc, krconn *k, struct rpcool__rconn **out)
{
    struct rpcool__rconn *rc = (struct rpcool__rconn *)rpcool__calloc(1, sizeof *rc);
    int r;
    if (!rc) return -ENOMEM;
    pthread_mutex_init(&rc->cq_lock, NULL);
    pthread_mutex_init(&rc->rx_lock, NULL);
    pthread_mutex_init(&rc->tx_lock, NULL);
    pthread_mutex_init(&rc->free_lock, NULL);
    rc->backlog_tail = &rc->backlog;
    rc->evfd = -1;
    rc->k = k;
    rc->qp = krconn_qp(k);
    rc->cq = rc->qp ? rc->qp->recv_cq : NULL;
    if (!rc->qp || rc->cq != rc->qp->send_cq) {
        r = RPCOOL_E_PROTO; /* krconn gives every physical QP one CQ */
        goto fail;
    }
    if (posix_memalign((void **)&rc->area, 4096, RPCOOL__R_AREA)) {
        rc->area = NULL;
        r = -ENOMEM;
        goto fail;
    }
    memset(rc->area, 0, RPCOOL__R_AREA);
    if ((r = rpcool__r_err(krconn_reg(kc, rc->area, RPCOOL__R_AREA, 0, &rc->mr)))) goto fail;
#ifdef KRCONN_CTX_EVENTS
    rc->evfd = krconn_event_fd(k);
    if (rc->evfd < 0) rc->evfd = -1;
#endif
    for (unsigned i = 0; i < RPCOOL__R_RECVS; i++)
        if ((r = rpcool__r_post_recv(rc))) goto fail;
    rc->last_rx = rcp__now_ns();
    *out = rc;
    return 0;
fail:
    rc->k = NULL; /* the caller still owns k */
    rpcool__r_conn_free(rc);
    return r;
}

/* Poll the CQ once: receives queue their frame offsets (and are posted again), sends count,
   failures make the connection dead. Returns how many completions. */
static int rpcool__r_cq(struct rpcool__rconn *rc)
{
    struct ibv_wc wc[16];
    int n, total = 0;
    pthread_mutex_lock(&rc->cq_lock);
    while ((n = ibv_poll_cq(rc->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (!rcp__load(&rc->dead))
                    rcp__store(&rc->dead, wc[i].status == IBV_WC_WR_FLUSH_ERR
                                              ? (int32_t)RPCOOL_E_PEERDEAD
                                              : (int32_t)RPCOOL_E_PEERDEAD);
                continue;
            }
            uint64_t id = wc[i].wr_id & 0xffffffffffffull;
            if (id == RPCOOL__RW_RECV) {
                if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                    if (rc->rxq_n < 2 * RPCOOL__R_RECVS) {
                        rc->rxq[(rc->rxq_head + rc->rxq_n) % (2 * RPCOOL__R_RECVS)] =
                            ntohl(wc[i].imm_data);
                        rc->rxq_n++;
                    } else {
                        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PROTO); /* more than credited */
                    }
                } else if (wc[i].opcode == IBV_WC_RECV) {
                    rc->hello_in = (int)wc[i].byte_len;
                }
                rpcool__r_post_recv(rc);
            } else if (id == RPCOOL__RW_PING) {
                rcp__store(&rc->ping_out, 0);
            } else if ((id & 0xff) == RPCOOL__RW_SEND) {
                rcp__store(&rc->sq_done, id >> 8);
            }
        }
        total += n;
    }
    pthread_mutex_unlock(&rc->cq_lock);
    if (total) rcp__store_relaxed(&rc->last_rx, rcp__now_ns());
    return total;
}

/* Post one send work request (under tx_lock): every RPCOOL__R_SIGNAL-th is signalled, its
   wr_id carrying how many were posted, so the send queue never overflows. */
static int rpcool__r_post(struct rpcool__rconn *rc, struct ibv_send_wr *wr)
{
    while (rc->sq_posted - rcp__load(&rc->sq_done) >= RPCOOL__R_WR - 2 * RPCOOL__R_SIGNAL) {
        rpcool__r_cq(rc);
        int d = rcp__load(&rc->dead);
        if (d) return d;
    }
    struct ibv_send_wr *bad = NULL;
    rc->sq_posted++;
    if (!(rc->sq_posted % RPCOOL__R_SIGNAL)) wr->send_flags |= IBV_SEND_SIGNALED;
    wr->wr_id = rc->sq_posted << 8 | RPCOOL__RW_SEND;
    int r = ibv_post_send(rc->qp, wr, &bad);
    if (r) {
        rc->sq_posted--;
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
        return RPCOOL_E_PEERDEAD;
    }
    return 0;
}

/* Tell the peer what we consumed, if enough to matter (or force). Takes tx_lock. */
static void rpcool__r_credit(struct rpcool__rconn *rc, int force)
{
    if (!force && rc->rx_pos - rc->rep_bytes < RPCOOL__R_RING / 4 &&
        rc->rx_frames - rc->rep_frames < RPCOOL__R_RECVS / 4)
        return;
    pthread_mutex_lock(&rc->tx_lock);
    struct rpcool__rcredit *src = rpcool__r_credit_src(rc);
    src->bytes = rc->rx_pos;
    src->frames = rc->rx_frames;
    struct ibv_sge sge = {(uint64_t)(uintptr_t)src, sizeof *src, rc->mr.lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE * 0;
    wr.wr.rdma.remote_addr = rc->peer_area;
    wr.wr.rdma.rkey = rc->peer_rkey;
    if (!rpcool__r_post(rc, &wr)) {
        rc->rep_bytes = rc->rx_pos;
        rc->rep_frames = rc->rx_frames;
    }
    pthread_mutex_unlock(&rc->tx_lock);
}

/* A keepalive: a zero-byte RDMA WRITE, at most one outstanding; a dead peer fails it. */
static void rpcool__r_ping(struct rpcool__rconn *rc)
{
    if (rcp__load(&rc->ping_out) || rcp__load(&rc->dead)) return;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = RPCOOL__RW_PING;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = rc->peer_area;
    wr.wr.rdma.rkey = rc->peer_rkey;
    pthread_mutex_lock(&rc->tx_lock);
    rcp__store(&rc->ping_out, 1);
    if (ibv_post_send(rc->qp, &wr, &bad)) {
        rcp__store(&rc->ping_out, 0);
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
    }
    pthread_mutex_unlock(&rc->tx_lock);
}

/* One piece of a frame's body. */
struct rpcool__rpart {
    const void *p;
    size_t len;
};

/* Send a frame: header h (len, seq filled in here) and a body of parts, padded to 8 bytes.
   Waits for room in the peer's ring up to deadline (0: 5 s). */
static int rpcool__r_send(struct rpcool__rconn *rc, struct rpcool__rf *h,
                          const struct rpcool__rpart *parts, unsigned nparts, uint64_t deadline)
{
    size_t body = 0;
    for (unsigned i = 0; i < nparts; i++) body += parts[i].len;
    size_t flen = sizeof *h + ((body + 7) & ~(size_t)7) + 8;
    if (flen > RPCOOL__R_MAXFRAME) return RPCOOL_E_TOOBIG;
    if (!deadline) deadline = rcp__now_ns() + 5000000000ull;
    pthread_mutex_lock(&rc->tx_lock);
    int r = rcp__load(&rc->dead);
    uint64_t pos = rc->tx_pos, off = pos % RPCOOL__R_RING;
    if (off + flen > RPCOOL__R_RING) { /* no frame straddles the end: start over at 0 */
        pos += RPCOOL__R_RING - off;
        off = 0;
    }
    for (unsigned k = 0; !r; k++) {
        struct rpcool__rcredit *cr = rpcool__r_credit_in(rc);
        uint64_t cb = rcp__load((volatile uint64_t *)&cr->bytes);
        uint64_t cf = rcp__load((volatile uint64_t *)&cr->frames);
        if (pos + flen - cb <= RPCOOL__R_RING && rc->tx_frames + 1 - cf <= RPCOOL__R_RECVS - 4)
            break;
        if (rcp__now_ns() >= deadline) {
            r = RPCOOL_E_TIMEOUT;
            break;
        }
        pthread_mutex_unlock(&rc->tx_lock);
        rpcool__r_cq(rc);
        if (k > 64) sched_yield();
        pthread_mutex_lock(&rc->tx_lock);
        r = rcp__load(&rc->dead);
    }
    if (r) {
        pthread_mutex_unlock(&rc->tx_lock);
        return r;
    }
    char *f = rpcool__r_sbuf(rc) + off;
    h->len = (uint32_t)flen;
    h->seq = rc->tx_seq;
    memcpy(f, h, sizeof *h);
    size_t at = sizeof *h;
    for (unsigned i = 0; i < nparts; i++) {
        if (parts[i].len) memcpy(f + at, parts[i].p, parts[i].len);
        at += parts[i].len;
    }
    memset(f + at, 0, flen - 8 - at);
    uint64_t tr = RPCOOL__R_TRAILER ^ rc->tx_seq;
    memcpy(f + flen - 8, &tr, 8);
    struct ibv_sge sge = {(uint64_t)(uintptr_t)f, (uint32_t)flen, rc->mr.lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl((uint32_t)(off / 8));
    wr.wr.rdma.remote_addr = rc->peer_area + 64 + off;
    wr.wr.rdma.rkey = rc->peer_rkey;
    r = rpcool__r_post(rc, &wr);
    if (!r) {
        rc->tx_pos = pos + flen;
        rc->tx_frames++;
        rc->tx_seq++;
    }
    pthread_mutex_unlock(&rc->tx_lock);
    return r;
}

/* The next frame (under rx_lock), or NULL if none came: checked for its place, length and
   trailer; a malformed one makes the connection dead (RPCOOL_E_PROTO). */
static struct rpcool__rf *rpcool__r_next(struct rpcool__rconn *rc)
{
    uint32_t imm;
    pthread_mutex_lock(&rc->cq_lock);
    int have = rc->rxq_n != 0;
    if (have) {
        imm = rc->rxq[rc->rxq_head];
        rc->rxq_head = (rc->rxq_head + 1) % (2 * RPCOOL__R_RECVS);
        rc->rxq_n--;
    }
    pthread_mutex_unlock(&rc->cq_lock);
    if (!have) {
        if (!rpcool__r_cq(rc)) return NULL;
        return rpcool__r_next(rc);
    }
    uint64_t off = (uint64_t)imm * 8, exp = rc->rx_pos % RPCOOL__R_RING;
    if (off != exp) {
        if (off != 0) goto bad;
        rc->rx_pos += RPCOOL__R_RING - exp; /* the sender started over at 0 */
    }
    if (off + sizeof(struct rpcool__rf) + 8 > RPCOOL__R_RING) goto bad;
    struct rpcool__rf *h = (struct rpcool__rf *)(rpcool__r_ring(rc) + off);
    uint32_t len = rcp__load_relaxed(&h->len);
    if (len < sizeof *h + 8 || (len & 7) || len > RPCOOL__R_MAXFRAME || off + len > RPCOOL__R_RING ||
        h->seq != rc->rx_seq)
        goto bad;
    uint64_t tr;
    memcpy(&tr, (char *)h + len - 8, 8);
    if (tr != (RPCOOL__R_TRAILER ^ rc->rx_seq)) goto bad;
    return h;
bad:
    rc->bad++;
    rcp__store(&rc->dead, (int32_t)RPCOOL_E_PROTO);
    return NULL;
}

/* Done with frame h (the one rpcool__r_next returned): its room goes back to the sender. */
static void rpcool__r_consume(struct rpcool__rconn *rc, struct rpcool__rf *h)
{
    rc->rx_pos += h->len;
    rc->rx_frames++;
    rc->rx_seq++;
    rpcool__r_credit(rc, 0);
}

/* Sleep until the CQ has something or timeout_ns pass (BPEV's event half). */
static void rpcool__r_sleep(struct rpcool__rconn *rc, uint64_t timeout_ns)
{
#ifdef KRCONN_CTX_EVENTS
    if (rc->evfd >= 0 && !krconn_arm(rc->k)) {
        if (rpcool__r_cq(rc)) return; /* came before the arm took */
        pthread_mutex_lock(&rc->cq_lock);
        int have = rc->rxq_n != 0;
        pthread_mutex_unlock(&rc->cq_lock);
        if (have) return;
        struct pollfd pf = {rc->evfd, POLLIN, 0};
        poll(&pf, 1, (int)(timeout_ns / 1000000u) + 1);
        krconn_event_ack(rc->k);
        return;
    }
#endif
    uint64_t t = timeout_ns < 200000u ? timeout_ns : 200000u;
    struct timespec ts = {0, (long)t};
    nanosleep(&ts, NULL);
}

#endif /* RPCOOL_RDMA_IMPL_H */
