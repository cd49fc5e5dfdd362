/* SPDX-License-Identifier: MIT */
/* impl/verbs.h - the small verbs layer that rpcool's RDMA parts share (krconn, alock's remote
 * cohort, nppin, rpcool's RDMA transport): open a device, choose the right GID, make CQs and RC
 * or UD QPs and walk them to RTS, register memory, post work and poll for it with a deadline.
 * Standard libibverbs calls only, so it runs on Soft-RoCE (rxe) and on real NICs alike.
 *
 * Internal, not a public API: names start with rcp__verbs_ and may change. Include it only when
 * RDMA is wanted; link with -libverbs (Debian: libibverbs-dev).
 *
 *     rcp__verbs_dev d;  struct ibv_cq *cq;  struct ibv_qp *qp;  struct ibv_mr *mr;
 *     rcp__verbs_ep me, peer;  struct ibv_wc wc;
 *     rcp__verbs_open(NULL, &d);                    // first device, RoCE v2 IPv4 GID
 *     rcp__verbs_cq_create(&d, 128, 0, &cq);
 *     rcp__verbs_qp_create(&d, cq, cq, NULL, &qp);   // RC, in INIT
 *     rcp__verbs_reg(&d, buf, len, 0, &mr);
 *     rcp__verbs_ep_local(&d, qp, 0, 0, &me);        // send rcp__verbs_ep_pack(&me) to the peer,
 *     rcp__verbs_rc_connect(&d, qp, &me, &peer, NULL); // unpack its endpoint into peer
 *     rcp__verbs_post_write(qp, 1, buf, 64, mr->lkey, raddr, rkey, 0, 0, IBV_SEND_SIGNALED);
 *     int rc = rcp__verbs_wait(cq, &wc, 1000000000); // 0, -ETIMEDOUT, or -errno of a failed wc
 *
 * Errors: 0 or a negative errno. A failed work completion is a negative errno as well
 * (rcp__verbs_wc_errno); the completion itself is handed back, so ibv_wc_status_str(wc.status)
 * tells exactly what the device said (rcp__verbs_describe puts both in one line). Nothing waits
 * forever: every wait takes a timeout.
 * Threads: as libibverbs; one thread at a time per CQ when polling.
 * Tested in the VM tier on rxe: tests/vm/test_verbs.c, tests/vm/test_twohost.c.
 * Set RCP_VERBS_DEBUG=1 in the environment to log setup steps to stderr. */
#ifndef RCP__VERBS_H
#define RCP__VERBS_H

#include "platform.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <infiniband/verbs.h>

#define RCP__VERBS_MAX_RD_ATOMIC 16

/* One port of an opened device, with a protection domain. */
typedef struct rcp__verbs_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_device_attr attr;
    struct ibv_port_attr port_attr;
    uint8_t port;
    int gid_index;      /* the GID used as source of every GRH */
    union ibv_gid gid;
    int roce;           /* 1 if the link layer is Ethernet: addressing by GID, not LID */
    char name[64];
} rcp__verbs_dev;

/* Zero means default. */
typedef struct rcp__verbs_dev_opts {
    const char *name;   /* device name; NULL = $RCP_VERBS_DEV, else the first device */
    uint8_t port;       /* 0 = port 1 */
    int fixed_gid;      /* 1 = use gid_index as given instead of choosing one */
    int gid_index;
} rcp__verbs_dev_opts;

/* What a peer needs to address one of our QPs. Exchange it with rcp__verbs_ep_pack/_unpack. */
typedef struct rcp__verbs_ep {
    uint32_t qpn;
    uint32_t psn;
    uint32_t qkey;      /* UD only */
    uint16_t lid;
    uint8_t gid[16];
} rcp__verbs_ep;
#define RCP__VERBS_EP_WIRE 30 /* bytes of a packed endpoint: big-endian, no padding */

/* Zero means default. */
typedef struct rcp__verbs_qp_opts {
    enum ibv_qp_type type;  /* IBV_QPT_RC or IBV_QPT_UD; 0 = RC */
    uint32_t max_send_wr;   /* 0 = 64 */
    uint32_t max_recv_wr;   /* 0 = 64 */
    uint32_t max_sge;       /* 0 = 1 */
    uint32_t max_inline;    /* 0 = none */
    uint32_t qkey;          /* UD: 0 = RCP__VERBS_QKEY */
    /* RC, after connect: */
    uint8_t timeout;        /* local ACK timeout, 4.096 us * 2^timeout; 0 = 14 (67 ms) */
    uint8_t retry_cnt;      /* 0 = 6 (rxe: 7 retries forever) */
    uint8_t rnr_retry;      /* 0 = 6 (7 would retry forever) */
    uint8_t min_rnr_timer;  /* 0 = 12 (0.64 ms) */
} rcp__verbs_qp_opts;
#define RCP__VERBS_QKEY 0x11111111u
#define RCP__VERBS_GRH 40u  /* bytes in front of every UD receive */

static inline void rcp__verbs_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rcp__vlog("RCP_VERBS_DEBUG", "verbs", fmt, ap);
    va_end(ap);
}

/* errno after a failed verbs call: most return a positive errno, some -1 with errno set, a few
 * leave errno at 0. Always negative. */
static inline int rcp__verbs_err(int rc)
{
    if (rc > 0) return -rc;
    if (errno > 0) return -errno;
    return -EIO;
}

/* A failed work completion as a negative errno; 0 for IBV_WC_SUCCESS. */
static inline int rcp__verbs_wc_errno(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return 0;
    case IBV_WC_LOC_LEN_ERR: return -EMSGSIZE;
    case IBV_WC_LOC_PROT_ERR: return -EFAULT;
    case IBV_WC_WR_FLUSH_ERR: return -ECANCELED;
    case IBV_WC_REM_ACCESS_ERR: return -EACCES;
    case IBV_WC_REM_INV_REQ_ERR: return -EINVAL;
    case IBV_WC_REM_OP_ERR: return -EREMOTEIO;
    case IBV_WC_RETRY_EXC_ERR: return -ETIMEDOUT;
    case IBV_WC_RNR_RETRY_EXC_ERR: return -ECONNREFUSED;
    case IBV_WC_MW_BIND_ERR: return -EPERM;
    default: return -EIO;
    }
}

static inline int rcp__verbs_gid_is_v4mapped(const union ibv_gid *g)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, prefix, sizeof prefix) == 0;
}

static inline int rcp__verbs_gid_is_zero(const union ibv_gid *g)
{
    static const uint8_t zero[16] = {0};
    return memcmp(g->raw, zero, sizeof zero) == 0;
}

/* Choose the source GID. RoCE: prefer RoCE v2 with an IPv4-mapped address (routable, and what
 * rxe over IPv4 answers to), then any RoCE v2, then RoCE v1; the table order differs between
 * devices and kernels, so never assume index 1. InfiniBand: index 0. */
static inline int rcp__verbs_pick_gid(struct ibv_context *ctx, uint8_t port,
                               const struct ibv_port_attr *pa, int *idx, union ibv_gid *gid)
{
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET) {
        *idx = 0;
        return ibv_query_gid(ctx, port, 0, gid) ? rcp__verbs_err(0) : 0;
    }
    int best = -1, best_rank = 0;
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0)) continue; /* empty slot */
        if (rcp__verbs_gid_is_zero(&e.gid)) continue;
        int rank = 1;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
            rank = rcp__verbs_gid_is_v4mapped(&e.gid) ? 3 : 2;
        if (rank > best_rank) {
            best = i; best_rank = rank; *gid = e.gid;
        }
    }
    if (best < 0) return -ENODEV; /* no address on the netdev yet */
    *idx = best;
    return 0;
}

static inline void rcp__verbs_close(rcp__verbs_dev *d)
{
    if (d->pd) ibv_dealloc_pd(d->pd);
    if (d->ctx) ibv_close_device(d->ctx);
    d->pd = NULL;
    d->ctx = NULL;
}

/* Open a device (by name or the first), query it, choose a GID, allocate a PD.
 * -ENODEV: no such device or no usable GID; -ENOSYS: no RDMA support in this kernel. */
static inline int rcp__verbs_open(const rcp__verbs_dev_opts *o, rcp__verbs_dev *d)
{
    rcp__verbs_dev_opts def;
    memset(&def, 0, sizeof def);
    if (!o) o = &def;
    memset(d, 0, sizeof *d);
    const char *want = o->name ? o->name : getenv("RCP_VERBS_DEV");
    int n = 0, rc;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return errno ? -errno : -ENOSYS;
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n && !dev; i++)
        if (!want || strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
    if (!dev) {
        ibv_free_device_list(list);
        return -ENODEV;
    }
    snprintf(d->name, sizeof d->name, "%s", ibv_get_device_name(dev));
    d->ctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (!d->ctx) return rcp__verbs_err(0);
    d->port = o->port ? o->port : 1;
    if ((rc = ibv_query_device(d->ctx, &d->attr)) ||
        (rc = ibv_query_port(d->ctx, d->port, &d->port_attr))) {
        rc = rcp__verbs_err(rc);
        goto fail;
    }
    d->roce = d->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (o->fixed_gid) {
        d->gid_index = o->gid_index;
        if (ibv_query_gid(d->ctx, d->port, o->gid_index, &d->gid)) {
            rc = rcp__verbs_err(0);
            goto fail;
        }
    } else if ((rc = rcp__verbs_pick_gid(d->ctx, d->port, &d->port_attr, &d->gid_index, &d->gid))) {
        goto fail;
    }
    if (!(d->pd = ibv_alloc_pd(d->ctx))) {
        rc = rcp__verbs_err(0);
        goto fail;
    }
    rcp__verbs_log("opened %s port %u, gid index %d, %s", d->name, d->port, d->gid_index,
                   d->roce ? "RoCE" : "InfiniBand");
    return 0;
fail:
    rcp__verbs_close(d);
    return rc;
}

/* A CQ; with_channel = 1 also gives it a completion channel, so waits sleep in poll(2) instead
 * of spinning. */
static inline int rcp__verbs_cq_create(rcp__verbs_dev *d, int cqe, int with_channel,
                                       struct ibv_cq **out)
{
    struct ibv_comp_channel *ch = NULL;
    if (with_channel) {
        if (!(ch = ibv_create_comp_channel(d->ctx))) return rcp__verbs_err(0);
        int fl = fcntl(ch->fd, F_GETFL);
        if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            int rc = -errno;
            ibv_destroy_comp_channel(ch);
            return rc;
        }
    }
    struct ibv_cq *cq = ibv_create_cq(d->ctx, cqe > 0 ? cqe : 128, NULL, ch, 0);
    if (!cq) {
        int rc = rcp__verbs_err(0);
        if (ch) ibv_destroy_comp_channel(ch);
        return rc;
    }
    *out = cq;
    return 0;
}

static inline int rcp__verbs_cq_destroy(struct ibv_cq *cq)
{
    if (!cq) return 0;
    struct ibv_comp_channel *ch = cq->channel;
    int rc = ibv_destroy_cq(cq);
    if (rc) return rcp__verbs_err(rc);
    return ch && ibv_destroy_comp_channel(ch) ? rcp__verbs_err(0) : 0;
}

static inline int rcp__verbs_modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                                    const char *step)
{
    int rc = ibv_modify_qp(qp, a, mask);
    if (rc) {
        rc = rcp__verbs_err(rc);
        rcp__verbs_log("qp %u to %s: %s", qp->qp_num, step, strerror(-rc));
    }
    return rc;
}

/* Create an RC or UD QP and bring it to INIT (RC: remote read, write and atomics allowed). */
static inline int rcp__verbs_qp_create(rcp__verbs_dev *d, struct ibv_cq *scq, struct ibv_cq *rcq,
                                const rcp__verbs_qp_opts *o, struct ibv_qp **out)
{
    rcp__verbs_qp_opts def;
    memset(&def, 0, sizeof def);
    if (!o) o = &def;
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = scq;
    ia.recv_cq = rcq ? rcq : scq;
    ia.qp_type = o->type ? o->type : IBV_QPT_RC;
    if (ia.qp_type != IBV_QPT_RC && ia.qp_type != IBV_QPT_UD) return -EINVAL;
    ia.cap.max_send_wr = o->max_send_wr ? o->max_send_wr : 64;
    ia.cap.max_recv_wr = o->max_recv_wr ? o->max_recv_wr : 64;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = o->max_sge ? o->max_sge : 1;
    ia.cap.max_inline_data = o->max_inline;
    struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
    if (!qp) return rcp__verbs_err(0);

    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = d->port;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (ia.qp_type == IBV_QPT_RC) {
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    } else {
        a.qkey = o->qkey ? o->qkey : RCP__VERBS_QKEY;
        mask |= IBV_QP_QKEY;
    }
    int rc = rcp__verbs_modify(qp, &a, mask, "INIT");
    if (rc) {
        ibv_destroy_qp(qp);
        return rc;
    }
    *out = qp;
    return 0;
}

static inline int rcp__verbs_qp_destroy(struct ibv_qp *qp)
{
    int rc = qp ? ibv_destroy_qp(qp) : 0;
    return rc ? rcp__verbs_err(rc) : 0;
}

/* This side's endpoint for qp: a random 24-bit starting PSN unless psn is given (non-zero). */
static inline void rcp__verbs_ep_local(const rcp__verbs_dev *d, const struct ibv_qp *qp,
                                       uint32_t psn, uint32_t qkey, rcp__verbs_ep *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->qpn = qp->qp_num;
    if (!psn) psn = (uint32_t)(rcp__now_ns() ^ ((uint64_t)getpid() << 8) ^ qp->qp_num);
    ep->psn = psn & 0xffffff;
    ep->qkey = qkey ? qkey : RCP__VERBS_QKEY;
    ep->lid = d->port_attr.lid;
    memcpy(ep->gid, d->gid.raw, 16);
}

static inline void rcp__verbs_put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
}

static inline uint32_t rcp__verbs_get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void rcp__verbs_ep_pack(const rcp__verbs_ep *ep,
                                      unsigned char out[RCP__VERBS_EP_WIRE])
{
    rcp__verbs_put32(out, ep->qpn);
    rcp__verbs_put32(out + 4, ep->psn);
    rcp__verbs_put32(out + 8, ep->qkey);
    out[12] = (unsigned char)(ep->lid >> 8);
    out[13] = (unsigned char)ep->lid;
    memcpy(out + 14, ep->gid, 16);
}

/* -EPROTO if the bytes cannot be an endpoint (a peer's input is checked, never trusted). */
static inline int rcp__verbs_ep_unpack(const unsigned char in[RCP__VERBS_EP_WIRE],
                                       rcp__verbs_ep *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->qpn = rcp__verbs_get32(in);
    ep->psn = rcp__verbs_get32(in + 4);
    ep->qkey = rcp__verbs_get32(in + 8);
    ep->lid = (uint16_t)(in[12] << 8 | in[13]);
    memcpy(ep->gid, in + 14, 16);
    if (ep->qpn > 0xffffff || ep->psn > 0xffffff) return -EPROTO;
    return 0;
}

/* Address vector towards a remote endpoint: GRH with our chosen source GID on RoCE (hop limit
 * above 1, as RoCE v2 needs), LID on InfiniBand. */
static inline void rcp__verbs_ah_attr(const rcp__verbs_dev *d, const rcp__verbs_ep *r,
                                      struct ibv_ah_attr *ah)
{
    memset(ah, 0, sizeof *ah);
    ah->port_num = d->port;
    ah->dlid = r->lid;
    ah->sl = 0;
    union ibv_gid rg;
    memcpy(rg.raw, r->gid, 16);
    if (d->roce || !rcp__verbs_gid_is_zero(&rg)) {
        ah->is_global = 1;
        ah->grh.dgid = rg;
        ah->grh.sgid_index = (uint8_t)d->gid_index;
        ah->grh.hop_limit = 64;
    }
}

static inline int rcp__verbs_ah_create(rcp__verbs_dev *d, const rcp__verbs_ep *r,
                                       struct ibv_ah **out)
{
    struct ibv_ah_attr a;
    rcp__verbs_ah_attr(d, r, &a);
    struct ibv_ah *ah = ibv_create_ah(d->pd, &a);
    if (!ah) return rcp__verbs_err(0);
    *out = ah;
    return 0;
}

/* INIT -> RTR -> RTS for an RC QP towards the remote endpoint r; local is what we sent to r. */
static inline int rcp__verbs_rc_connect(rcp__verbs_dev *d, struct ibv_qp *qp,
                                        const rcp__verbs_ep *local, const rcp__verbs_ep *r,
                                        const rcp__verbs_qp_opts *o)
{
    rcp__verbs_qp_opts def;
    memset(&def, 0, sizeof def);
    if (!o) o = &def;
    int rd_dest = d->attr.max_qp_rd_atom, rd_init = d->attr.max_qp_init_rd_atom;
    if (rd_dest > RCP__VERBS_MAX_RD_ATOMIC) rd_dest = RCP__VERBS_MAX_RD_ATOMIC;
    if (rd_init > RCP__VERBS_MAX_RD_ATOMIC) rd_init = RCP__VERBS_MAX_RD_ATOMIC;

    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = d->port_attr.active_mtu;
    a.dest_qp_num = r->qpn;
    a.rq_psn = r->psn;
    a.max_dest_rd_atomic = (uint8_t)(rd_dest > 0 ? rd_dest : 1);
    a.min_rnr_timer = o->min_rnr_timer ? o->min_rnr_timer : 12;
    rcp__verbs_ah_attr(d, r, &a.ah_attr);
    int rc = rcp__verbs_modify(qp, &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                               "RTR");
    if (rc) return rc;

    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = local->psn;
    a.timeout = o->timeout ? o->timeout : 14;
    a.retry_cnt = o->retry_cnt ? o->retry_cnt : 6;
    a.rnr_retry = o->rnr_retry ? o->rnr_retry : 6;
    a.max_rd_atomic = (uint8_t)(rd_init > 0 ? rd_init : 1);
    return rcp__verbs_modify(qp, &a,
                             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                             "RTS");
}

/* INIT -> RTR -> RTS for a UD QP. */
static inline int rcp__verbs_ud_ready(struct ibv_qp *qp, uint32_t psn)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    int rc = rcp__verbs_modify(qp, &a, IBV_QP_STATE, "RTR");
    if (rc) return rc;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psn & 0xffffff;
    return rcp__verbs_modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS");
}

/* The QP's current state (IBV_QPS_*), or a negative errno. */
static inline int rcp__verbs_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
    return rc ? rcp__verbs_err(rc) : (int)a.qp_state;
}

/* access 0 = local write + remote read, write and atomics. */
static inline int rcp__verbs_reg(rcp__verbs_dev *d, void *addr, size_t len, int access,
                                 struct ibv_mr **out)
{
    if (!access)
        access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                 IBV_ACCESS_REMOTE_ATOMIC;
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr(d->pd, addr, len, access);
    if (!mr) return rcp__verbs_err(0);
    *out = mr;
    return 0;
}

static inline int rcp__verbs_dereg(struct ibv_mr *mr)
{
    int rc = mr ? ibv_dereg_mr(mr) : 0;
    return rc ? rcp__verbs_err(rc) : 0;
}

/* ---- posting ---- */

static inline int rcp__verbs_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                       uint32_t lkey)
{
    struct ibv_sge sge;
    sge.addr = (uintptr_t)buf;
    sge.length = len;
    sge.lkey = lkey;
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rc = ibv_post_recv(qp, &wr, &bad);
    return rc ? rcp__verbs_err(rc) : 0;
}

/* One send-queue work request with one SGE (none when len is 0). flags: IBV_SEND_SIGNALED,
 * IBV_SEND_INLINE, IBV_SEND_FENCE, ... */
static inline int rcp__verbs_post_wr(struct ibv_qp *qp, struct ibv_send_wr *wr, void *buf,
                                     uint32_t len, uint32_t lkey)
{
    struct ibv_sge sge;
    sge.addr = (uintptr_t)buf;
    sge.length = len;
    sge.lkey = lkey;
    wr->sg_list = len ? &sge : NULL;
    wr->num_sge = len ? 1 : 0;
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(qp, wr, &bad);
    return rc ? rcp__verbs_err(rc) : 0;
}

static inline int rcp__verbs_post_send(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                uint32_t lkey, unsigned flags)
{
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = flags;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

static inline int rcp__verbs_post_ud_send(struct ibv_qp *qp, uint64_t wr_id, void *buf,
                                          uint32_t len, uint32_t lkey, struct ibv_ah *ah,
                                          const rcp__verbs_ep *r, unsigned flags)
{
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = flags;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = r->qpn;
    wr.wr.ud.remote_qkey = r->qkey;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

/* RDMA WRITE; with_imm = 1 makes it WRITE_WITH_IMM, which consumes a receive at the peer. */
static inline int rcp__verbs_post_write(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                 uint32_t lkey, uint64_t raddr, uint32_t rkey, int with_imm,
                                 uint32_t imm, unsigned flags)
{
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(imm);
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

static inline int rcp__verbs_post_read(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

/* 8-byte atomics on an 8-byte aligned remote word; the old value lands in *old (registered). */
static inline int rcp__verbs_post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
                                  uint64_t *old, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                                  uint64_t compare_add, uint64_t swap, unsigned flags)
{
    if (raddr & 7) return -EINVAL;
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    return rcp__verbs_post_wr(qp, &wr, old, sizeof *old, lkey);
}

static inline int rcp__verbs_post_cas(struct ibv_qp *qp, uint64_t wr_id, uint64_t *old,
                                      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t expect,
                                      uint64_t desired, unsigned flags)
{
    return rcp__verbs_post_atomic(qp, IBV_WR_ATOMIC_CMP_AND_SWP, wr_id, old, lkey, raddr, rkey,
                                  expect, desired, flags);
}

static inline int rcp__verbs_post_faa(struct ibv_qp *qp, uint64_t wr_id, uint64_t *old,
                                      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add,
                                      unsigned flags)
{
    return rcp__verbs_post_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, wr_id, old, lkey, raddr, rkey,
                                  add, 0, flags);
}

/* ---- polling ---- */

/* Up to max completions from cq. Spins briefly, then sleeps: in poll(2) on the CQ's completion
 * channel if it has one, else by yielding. Returns the number of completions (>= 1), -ETIMEDOUT
 * when none came within timeout_ns, or another negative errno. Failed completions are returned
 * like good ones: check wc[i].status (or use rcp__verbs_wait). */
static inline int rcp__verbs_poll(struct ibv_cq *cq, struct ibv_wc *wc, int max,
                                  uint64_t timeout_ns)
{
    uint64_t start = rcp__now_ns();
    unsigned spins = 0;
    for (;;) {
        int n = ibv_poll_cq(cq, max, wc);
        if (n != 0) return n > 0 ? n : -EIO;
        uint64_t now = rcp__now_ns();
        if (now - start >= timeout_ns) return -ETIMEDOUT;
        if (++spins < 256) {
            rcp__cpu_relax();
            continue;
        }
        if (!cq->channel) {
            sched_yield();
            continue;
        }
        /* Arm, re-check (a completion may have slipped in before arming), then sleep. */
        if (ibv_req_notify_cq(cq, 0)) return rcp__verbs_err(0);
        n = ibv_poll_cq(cq, max, wc);
        if (n != 0) return n > 0 ? n : -EIO;
        uint64_t left_ms = (timeout_ns - (now - start)) / 1000000u + 1;
        struct pollfd p;
        p.fd = cq->channel->fd;
        p.events = POLLIN;
        p.revents = 0;
        int pr = poll(&p, 1, left_ms > 60000 ? 60000 : (int)left_ms);
        if (pr < 0 && errno != EINTR) return -errno;
        if (pr > 0) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
        }
    }
}

/* Wait for one completion. 0 if it succeeded; a negative errno from its status if it failed
 * (wc holds it: ibv_wc_status_str(wc->status)); -ETIMEDOUT if none came in time. */
static inline int rcp__verbs_wait(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t timeout_ns)
{
    int n = rcp__verbs_poll(cq, wc, 1, timeout_ns);
    if (n < 0) {
        wc->status = IBV_WC_GENERAL_ERR;
        return n;
    }
    return rcp__verbs_wc_errno(wc->status);
}

/* A readable account of a result for logs and test messages: strerror plus, for a failed
 * completion, the device's own words. */
static inline const char *rcp__verbs_describe(int rc, const struct ibv_wc *wc, char *buf,
                                              size_t len)
{
    if (rc == 0) snprintf(buf, len, "success");
    else if (wc && wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_GENERAL_ERR)
        snprintf(buf, len, "%s (work completion: %s, vendor error 0x%x)", strerror(-rc),
                 ibv_wc_status_str(wc->status), wc->vendor_err);
    else snprintf(buf, len, "%s", strerror(-rc));
    return buf;
}

#endif /* RCP__VERBS_H */
