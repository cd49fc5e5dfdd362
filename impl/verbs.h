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
 *     rcp__verbs_ep peer;  struct ibv_wc wc;     // peer: the other side's QPN, PSN, GID, LID
 *     rcp__verbs_open(NULL, &d);                    // first device, RoCE v2 IPv4 GID
 *     rcp__verbs_cq_create(&d, 0, 0, &cq);
 *     rcp__verbs_qp_create(&d, cq, cq, NULL, &qp);   // RC, in INIT
 *     rcp__verbs_reg(&d, buf, len, 0, &mr);
 *     rcp__verbs_rc_rtr(&d, qp, &peer, NULL);        // the QP steps, with the project's
 *     rcp__verbs_rc_rts(&d, qp, my_psn, NULL);       // attributes (RCP__VERBS_DEFAULT_*)
 *     rcp__verbs_post_write(qp, 1, buf, 64, mr->lkey, raddr, rkey, 0, 0, IBV_SEND_SIGNALED);
 *     int rc = rcp__verbs_wait(cq, &wc, 1000000000); // 0, -ETIMEDOUT, or -errno of a failed wc
 *
 * One layer for every RDMA user: the QP steps (rcp__verbs_qp_init, _rc_rtr, _rc_rts, _ud_ready,
 * _qp_recycle, _qp_fail), one receive poster (rcp__verbs_post_recv, _post_recv_sg), one keepalive
 * (rcp__verbs_post_ping: a zero-byte RDMA WRITE) and one completion wait (rcp__verbs_poll and
 * rcp__verbs_wait). Endpoint exchange and the one-call connect of the tests live in
 * tests/vm/vmt.h.
 *
 * Errors: 0 or a negative errno. A failed work completion is a negative errno as well
 * (rcp__verbs_wc_errno); the completion itself is handed back, so ibv_wc_status_str(wc.status)
 * tells exactly what the device said (rcp__verbs_describe puts both in one line). Nothing waits
 * forever: every wait takes a timeout.
 * Threads: as libibverbs; one thread at a time per CQ when polling.
 * Tested in the VM tier on rxe: tests/vm/test_verbs.c, tests/vm/test_twohost.c, and through
 * krconn, alock and nppin.
 * Set RCP_VERBS_DEBUG=1 in the environment to log setup steps to stderr. */
#ifndef RCP__VERBS_H
#define RCP__VERBS_H

#include "platform.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <infiniband/verbs.h>

#define RCP__VERBS_MAX_RD_ATOMIC 16    /* outstanding READs and atomics per QP, at most */
#define RCP__VERBS_DEFAULT_CQE 128     /* completion queue entries */
#define RCP__VERBS_DEFAULT_WR 64       /* send and receive queue depth */
#define RCP__VERBS_DEFAULT_ACK_TIMEOUT 14 /* local ACK timeout 4.096 us * 2^14 = 67 ms */
#define RCP__VERBS_DEFAULT_RETRY_CNT 6 /* transport retries; rxe retries forever at 7 */
#define RCP__VERBS_DEFAULT_RNR_RETRY 6 /* receiver-not-ready retries; 7 means forever */
#define RCP__VERBS_MIN_RNR_TIMER 12    /* 0.64 ms, the least RNR NAK delay used */
#define RCP__VERBS_HOP_LIMIT 64        /* GRH hop limit (RoCE v2 needs more than 1) */
#define RCP__VERBS_SPINS 256           /* polls before a wait yields or sleeps */
#define RCP__VERBS_QUIET_POLLS 4096    /* polls before a wait first reads the clock */
/* local write, remote read, write and atomics: the access of every MR and RC QP by default */
#define RCP__VERBS_ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | \
                               IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

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

/* What a peer needs to address one of our QPs (each user has its own wire format for it). */
typedef struct rcp__verbs_ep {
    uint32_t qpn;
    uint32_t psn;
    uint32_t qkey;      /* UD only */
    uint16_t lid;
    uint8_t gid[16];
} rcp__verbs_ep;

/* Zero means default. */
typedef struct rcp__verbs_qp_opts {
    enum ibv_qp_type type;  /* IBV_QPT_RC or IBV_QPT_UD; 0 = RC */
    uint32_t max_send_wr;   /* 0 = RCP__VERBS_DEFAULT_WR */
    uint32_t max_recv_wr;   /* 0 = RCP__VERBS_DEFAULT_WR */
    uint32_t max_sge;       /* 0 = 1 */
    uint32_t max_inline;    /* 0 = none */
    uint32_t qkey;          /* UD: 0 = RCP__VERBS_QKEY */
    /* RC, for its RTR and RTS: */
    uint8_t timeout;        /* local ACK timeout, 4.096 us * 2^timeout; 0 = _DEFAULT_ACK_TIMEOUT */
    uint8_t retry_cnt;      /* 0 = RCP__VERBS_DEFAULT_RETRY_CNT */
    uint8_t rnr_retry;      /* 0 = RCP__VERBS_DEFAULT_RNR_RETRY */
    uint8_t min_rnr_timer;  /* 0 = RCP__VERBS_MIN_RNR_TIMER */
} rcp__verbs_qp_opts;
#define RCP__VERBS_QKEY 0x11111111u
#define RCP__VERBS_GRH 40u  /* bytes in front of every UD receive */

/* The one place a QP option's default is resolved: o (NULL = all defaults) with every zero
   replaced. */
static inline rcp__verbs_qp_opts rcp__verbs_qp_opts_defaults(const rcp__verbs_qp_opts *o)
{
    rcp__verbs_qp_opts r;
    memset(&r, 0, sizeof r);
    if (o) r = *o;
    if (!r.type) r.type = IBV_QPT_RC;
    if (!r.max_send_wr) r.max_send_wr = RCP__VERBS_DEFAULT_WR;
    if (!r.max_recv_wr) r.max_recv_wr = RCP__VERBS_DEFAULT_WR;
    if (!r.max_sge) r.max_sge = 1;
    if (!r.qkey) r.qkey = RCP__VERBS_QKEY;
    if (!r.timeout) r.timeout = RCP__VERBS_DEFAULT_ACK_TIMEOUT;
    if (!r.retry_cnt) r.retry_cnt = RCP__VERBS_DEFAULT_RETRY_CNT;
    if (!r.rnr_retry) r.rnr_retry = RCP__VERBS_DEFAULT_RNR_RETRY;
    if (!r.min_rnr_timer) r.min_rnr_timer = RCP__VERBS_MIN_RNR_TIMER;
    return r;
}

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

/* A CQ of cqe entries (0 = RCP__VERBS_DEFAULT_CQE); with_channel = 1 also gives it a completion
 * channel, so waits sleep in poll(2) instead of spinning. */
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
    struct ibv_cq *cq = ibv_create_cq(d->ctx, cqe > 0 ? cqe : RCP__VERBS_DEFAULT_CQE, NULL, ch, 0);
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

/* INIT for a new or reset QP on d's port: RC allows remote read, write and atomics, UD takes
   qkey (0 = RCP__VERBS_QKEY). */
static inline int rcp__verbs_qp_init(const rcp__verbs_dev *d, struct ibv_qp *qp, uint32_t qkey)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = d->port;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (qp->qp_type == IBV_QPT_RC) {
        a.qp_access_flags = RCP__VERBS_ACCESS_ALL;
        mask |= IBV_QP_ACCESS_FLAGS;
    } else {
        a.qkey = qkey ? qkey : RCP__VERBS_QKEY;
        mask |= IBV_QP_QKEY;
    }
    return rcp__verbs_modify(qp, &a, mask, "INIT");
}

/* Create an RC or UD QP and bring it to INIT (rcp__verbs_qp_init). */
static inline int rcp__verbs_qp_create(rcp__verbs_dev *d, struct ibv_cq *scq, struct ibv_cq *rcq,
                                const rcp__verbs_qp_opts *opts, struct ibv_qp **out)
{
    rcp__verbs_qp_opts o = rcp__verbs_qp_opts_defaults(opts);
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = scq;
    ia.recv_cq = rcq ? rcq : scq;
    ia.qp_type = o.type;
    if (ia.qp_type != IBV_QPT_RC && ia.qp_type != IBV_QPT_UD) return -EINVAL;
    ia.cap.max_send_wr = o.max_send_wr;
    ia.cap.max_recv_wr = o.max_recv_wr;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = o.max_sge;
    ia.cap.max_inline_data = o.max_inline;
    struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
    if (!qp) return rcp__verbs_err(0);
    int rc = rcp__verbs_qp_init(d, qp, o.qkey);
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

static inline void rcp__verbs_put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
}

static inline uint32_t rcp__verbs_get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
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
        ah->grh.hop_limit = RCP__VERBS_HOP_LIMIT;
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

/* The device's limit of outstanding READs and atomics (max_qp_rd_atom or max_qp_init_rd_atom),
   between 1 and RCP__VERBS_MAX_RD_ATOMIC. */
static inline uint8_t rcp__verbs_rd_atomic(int dev_max)
{
    if (dev_max <= 0) return 1;
    return (uint8_t)(dev_max > RCP__VERBS_MAX_RD_ATOMIC ? RCP__VERBS_MAX_RD_ATOMIC : dev_max);
}

/* INIT -> RTR for an RC QP towards the remote endpoint r (its qpn, psn, gid, lid): from then on
   this side answers the peer's packets. o: min_rnr_timer (NULL = the defaults). */
static inline int rcp__verbs_rc_rtr(const rcp__verbs_dev *d, struct ibv_qp *qp,
                                    const rcp__verbs_ep *r, const rcp__verbs_qp_opts *opts)
{
    rcp__verbs_qp_opts o = rcp__verbs_qp_opts_defaults(opts);
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = d->port_attr.active_mtu;
    a.dest_qp_num = r->qpn;
    a.rq_psn = r->psn;
    a.max_dest_rd_atomic = rcp__verbs_rd_atomic(d->attr.max_qp_rd_atom);
    a.min_rnr_timer = o.min_rnr_timer;
    rcp__verbs_ah_attr(d, r, &a.ah_attr);
    return rcp__verbs_modify(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                             "RTR");
}

/* RTR -> RTS: this side may send, starting at sq_psn (what the peer was told as our PSN).
   o: timeout, retry_cnt, rnr_retry (NULL = the defaults). */
static inline int rcp__verbs_rc_rts(const rcp__verbs_dev *d, struct ibv_qp *qp, uint32_t sq_psn,
                                    const rcp__verbs_qp_opts *opts)
{
    rcp__verbs_qp_opts o = rcp__verbs_qp_opts_defaults(opts);
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn & 0xffffff;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = rcp__verbs_rd_atomic(d->attr.max_qp_init_rd_atom);
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

/* Move qp to the error state: its outstanding work is flushed and nobody reuses it (a pool that
   takes QPs back destroys those in error). */
static inline int rcp__verbs_qp_fail(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    return rcp__verbs_modify(qp, &a, IBV_QP_STATE, "ERR");
}

/* Make a used QP new again: RESET, its CQ emptied, then INIT (rcp__verbs_qp_init). 0 if it can
   be used again; -EIO if it had ended in error (whatever state it is left in: destroy it), or
   the errno of a failed step. */
static inline int rcp__verbs_qp_recycle(const rcp__verbs_dev *d, struct ibv_qp *qp,
                                        struct ibv_cq *cq, uint32_t qkey)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
    if (rc) rc = rcp__verbs_err(rc);
    else if (a.qp_state == IBV_QPS_ERR || a.qp_state == IBV_QPS_SQE) rc = -EIO;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RESET;
    int r2 = ibv_modify_qp(qp, &a, IBV_QP_STATE);
    if (!rc && r2) rc = rcp__verbs_err(r2);
    struct ibv_wc wc[16];
    while (ibv_poll_cq(cq, 16, wc) > 0) {}
    return rc ? rc : rcp__verbs_qp_init(d, qp, qkey);
}

/* access 0 = RCP__VERBS_ACCESS_ALL. */
static inline int rcp__verbs_reg(rcp__verbs_dev *d, void *addr, size_t len, int access,
                                 struct ibv_mr **out)
{
    if (!access) access = RCP__VERBS_ACCESS_ALL;
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

/* The one receive poster: one receive work request over n scatter entries (n may be 0). */
static inline int rcp__verbs_post_recv_sg(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sg,
                                          int n)
{
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.sg_list = n ? sg : NULL;
    wr.num_sge = n;
    int rc = ibv_post_recv(qp, &wr, &bad);
    return rc ? rcp__verbs_err(rc) : 0;
}

/* A receive of up to len bytes into buf (registered with lkey). */
static inline int rcp__verbs_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                       uint32_t lkey)
{
    struct ibv_sge sge;
    sge.addr = (uintptr_t)buf;
    sge.length = len;
    sge.lkey = lkey;
    return rcp__verbs_post_recv_sg(qp, wr_id, &sge, 1);
}

/* A chain of send-queue work requests (wr->next ...), as they are, with one doorbell. On failure
   *bad (if not NULL) is the first one not posted. */
static inline int rcp__verbs_post_chain(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                        struct ibv_send_wr **bad)
{
    struct ibv_send_wr *b = NULL;
    int rc = ibv_post_send(qp, wr, &b);
    if (bad) *bad = b;
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
    return rcp__verbs_post_chain(qp, wr, NULL);
}

/* A zeroed work request with its id, opcode and flags. */
static inline void rcp__verbs_wr_init(struct ibv_send_wr *wr, uint64_t wr_id, enum ibv_wr_opcode op,
                                      unsigned flags)
{
    memset(wr, 0, sizeof *wr);
    wr->wr_id = wr_id;
    wr->opcode = op;
    wr->send_flags = flags;
}

static inline int rcp__verbs_post_send(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                uint32_t lkey, unsigned flags)
{
    struct ibv_send_wr wr;
    rcp__verbs_wr_init(&wr, wr_id, IBV_WR_SEND, flags);
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

static inline int rcp__verbs_post_ud_send(struct ibv_qp *qp, uint64_t wr_id, void *buf,
                                          uint32_t len, uint32_t lkey, struct ibv_ah *ah,
                                          const rcp__verbs_ep *r, unsigned flags)
{
    struct ibv_send_wr wr;
    rcp__verbs_wr_init(&wr, wr_id, IBV_WR_SEND, flags);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = r->qpn;
    wr.wr.ud.remote_qkey = r->qkey;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

/* RDMA WRITE, WRITE_WITH_IMM (imm in host order) or READ between buf and raddr. */
static inline int rcp__verbs_post_rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
                                       void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
                                       uint32_t rkey, uint32_t imm, unsigned flags)
{
    struct ibv_send_wr wr;
    rcp__verbs_wr_init(&wr, wr_id, op, flags);
    if (op == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return rcp__verbs_post_wr(qp, &wr, buf, len, lkey);
}

/* RDMA WRITE; with_imm = 1 makes it WRITE_WITH_IMM, which consumes a receive at the peer. */
static inline int rcp__verbs_post_write(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                 uint32_t lkey, uint64_t raddr, uint32_t rkey, int with_imm,
                                 uint32_t imm, unsigned flags)
{
    return rcp__verbs_post_rdma(qp, with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                                wr_id, buf, len, lkey, raddr, rkey, imm, flags);
}

static inline int rcp__verbs_post_read(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
                                uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    return rcp__verbs_post_rdma(qp, IBV_WR_RDMA_READ, wr_id, buf, len, lkey, raddr, rkey, 0,
                                flags);
}

/* 8-byte atomics on an 8-byte aligned remote word; the old value lands in *old (registered). */
static inline int rcp__verbs_post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
                                  uint64_t *old, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                                  uint64_t compare_add, uint64_t swap, unsigned flags)
{
    if (raddr & 7) return -EINVAL;
    struct ibv_send_wr wr;
    rcp__verbs_wr_init(&wr, wr_id, op, flags);
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

/* The one keepalive: a signalled zero-byte RDMA WRITE to raddr/rkey (0/0 will do: no byte is
   written). The peer's program does nothing; a dead peer fails its completion
   (IBV_WC_RETRY_EXC_ERR once the retries are spent). */
static inline int rcp__verbs_post_ping(struct ibv_qp *qp, uint64_t wr_id, uint64_t raddr,
                                       uint32_t rkey)
{
    return rcp__verbs_post_write(qp, wr_id, NULL, 0, 0, raddr, rkey, 0, 0, IBV_SEND_SIGNALED);
}

/* ---- polling ---- */

/* The one completion wait. Up to max completions from cq. First RCP__VERBS_QUIET_POLLS polls
 * without reading the clock (in a VM whose clock source is not the TSC a clock read is a system
 * call, longer than a poll), yielding every RCP__VERBS_SPINS; then spins briefly and sleeps: in
 * poll(2) on the CQ's completion channel if it has one, else by yielding. Returns the number of
 * completions (>= 1), -ETIMEDOUT when none came within timeout_ns, or another negative errno.
 * Failed completions are returned like good ones: check wc[i].status (or use rcp__verbs_wait). */
static inline int rcp__verbs_poll(struct ibv_cq *cq, struct ibv_wc *wc, int max,
                                  uint64_t timeout_ns)
{
    uint64_t start = rcp__now_ns();
    unsigned spins = 0;
    for (unsigned k = 0; k < RCP__VERBS_QUIET_POLLS; k++) {
        int n = ibv_poll_cq(cq, max, wc);
        if (n != 0) return n > 0 ? n : -EIO;
        if ((k & (RCP__VERBS_SPINS - 1)) == RCP__VERBS_SPINS - 1) sched_yield();
        else rcp__cpu_relax();
    }
    for (;;) {
        int n = ibv_poll_cq(cq, max, wc);
        if (n != 0) return n > 0 ? n : -EIO;
        uint64_t now = rcp__now_ns();
        if (now - start >= timeout_ns) return -ETIMEDOUT;
        if (++spins < RCP__VERBS_SPINS) {
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
