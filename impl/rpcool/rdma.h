/* SPDX-License-Identifier: MIT */
/* impl/rpcool/rdma.h - rpcool's RDMA transport between pods (private to rpcool.h's
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
     whole frame is there. Every frame carries what its sender has consumed of the other
     side's frames (bytes and frames: the credit); a side with nothing to send writes it back on
     its own (16 B, one RDMA WRITE) once half the ring or half its posted receives is used. A
     frame is at most half the ring, so a sender always gets room eventually.
   - The client's connection heap is a shmheap of its pod on a memfd (shmheap_create_fd: no
     name, its range held only while the client lives), at an address unique to its pod
     (SHMHEAP_POD_ID). The server maps a private, anonymous MIRROR of it at the same address
     (MAP_FIXED_NOREPLACE: a clash is refused with RPCOOL_E_ADDRINUSE) and registers it with
     userfaultfd (missing pages). A call carries its extents (the argument's pages, and ranges
     the caller names) inline as entries: WHOLE pages (their bytes), pages KEPT from the previous
     call (no bytes: the client compared them with its copy of what it sent last, the server
     checks them against its copy of what it installed, so a handler's write undoes a keep), and
     PATCHES (the changed 8-byte words of a kept page). When a call names the same ranges as
     the last one (a structure called again), both sides keep their copy and update it in place
     (only a changed page is copied) instead of copying every page afresh: a repeated call of a
     4096-node tree (about 300 KB) costs one comparison per side, not a copy and a comparison.
     The server drops every other mirror page it populated for the previous call (but
     the pages of reply blocks whose DONE has not gone: a deferred reply is built and sent by
     another thread meanwhile), copies the whole pages in (UFFDIO_COPY), applies the patches,
     and runs the handler. A small argument that stays in place (the usual case) costs
     a 16-byte entry, or its changed words, instead of a page; a DONE that says some kept pages
     were not kept makes the client send everything whole next time. A page outside the extents
     faults on first touch: the server's fault thread asks the client for it (a FETCH frame), the
     client answers with the page's bytes (a PAGES frame) from inside its wait, and the fault
     thread copies it in (unless the serving thread made that page present meanwhile: that one
     is newer and stays). Why not an RDMA READ: the client's heap would have to be registered
     (pinned) whole for the server to read it at any time, or registered chunk by chunk with a
     lease round trip per miss (nppin.h), which costs the same round trip as asking for the page
     and adds lease state; a connection heap is sparse and 64 MiB by default.
   - Replies: the client sets aside a reply region in its heap at connect. The server owns it:
     rpcool_ctx_alloc carves blocks from it (a private first-fit allocator), and everything the
     handler allocated travels back inline in the DONE frame, which the client copies to the
     same addresses. rpcool_free of a reply block frees that block (as on shared memory); the
     frees ride on the next call (or a FREE frame when many are queued). A caller that
     discards the reply (RPCOOL__DISCARD) gets none: the server frees the call's blocks.
   - Waiting (RR-Compound's BPEV): poll the CQ while calls are frequent (spin_ns), then arm it
     and sleep on its completion channel (krconn's KRCONN_CTX_EVENTS), so an idle side uses no
     CPU for its connections.
   - Liveness: a side waiting on its peer posts a zero-byte RDMA WRITE every peer_check_ms (reap_ms
     on the server); a dead peer's QP stops acknowledging and the WRITE fails after krconn's
     retry bound (7 tries of RPCOOL__R_ACK_TIMEOUT's 0.54 s: about 4 s). */
#ifndef RPCOOL_RDMA_IMPL_H
#define RPCOOL_RDMA_IMPL_H

#include "../verbs.h" /* the project's verbs layer (krconn.h includes it too) */
#include <linux/userfaultfd.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#define RPCOOL__R_VERSION 3u
#define RPCOOL__R_HELLO_MAGIC 0x31524c4843434f52ull /* "RCOCHLR1" */
#define RPCOOL__R_TRAILER 0x3152544f4f435052ull
#define RPCOOL__R_RING ((size_t)4 << 20)   /* each side's receive ring */
#define RPCOOL__R_MAXFRAME (RPCOOL__R_RING / 2)
#define RPCOOL__R_RECVS 128u               /* receives kept posted per side */
#define RPCOOL__R_WR 512u                  /* send and receive queue depth asked of krconn */
#define RPCOOL__R_SIGNAL 16u               /* every 16th send is signalled */
#define RPCOOL__R_HELLO 256u
/* each side's area: credit in, receive ring, send buffer, credit out, hello, cancel words */
#define RPCOOL__R_CANCEL_OFF (128 + 2 * RPCOOL__R_RING + RPCOOL__R_HELLO)
#define RPCOOL__R_AREA (RPCOOL__R_CANCEL_OFF + 8 * RPCOOL__NSLOTS)
#define RPCOOL__R_FREES 256u               /* reply frees queued before a FREE frame goes */
#define RPCOOL__R_FETCH_MS 10000u          /* a page fetch waits this long for its client */
#define RPCOOL__R_MAXENT 256u              /* entries (whole, kept, patch) in one CALL */
#define RPCOOL__R_SNAP 4096u               /* a page's snapshot (larger pages: no fast path) */
#define RPCOOL__R_HELD 4                   /* heaps held while retrying a refused range */
/* A CALL entry's kind, in the top bits of its length: whole pages (their bytes follow), pages
   kept from the previous call (no bytes), a patch of bytes inside a kept page. */
#define RPCOOL__R_KEEP (1ull << 63)
#define RPCOOL__R_PATCH (1ull << 62)
#define RPCOOL__R_DONE_LOST 1u             /* DONE.flags: some kept pages were not kept */
/* The RC ACK timeout of rpcool's queue pairs: 4.096 us x 2^17 = 0.54 s, 7 tries (retry_cnt 6),
   so a silent peer is declared dead after about 4 s. krconn's shorter default declares live
   peers dead between loaded emulated guests. */
#define RPCOOL__R_ACK_TIMEOUT 17
/* The RNR timer our queue pairs advertise: 24 = 40.96 ms, so a peer whose first message (the
   server's hello) arrives before our receives are posted (they are posted before the connect
   asks, rpcool__r_before: this is the margin if not) retries for about 0.25 s (rnr_retry 6)
   instead of 4 ms; with krconn's 0.64 ms a hello was lost now and then under TCG (the server's
   queue pair failed, the client waited out its connect timeout). Receives are kept posted after
   that, so no later message waits for it. */
#define RPCOOL__R_RNR_TIMER 24
/* A client waiting for the server's hello checks this often that the server's queue pair still
   answers (rpcool__r_await_hello); one found dead makes the connect start afresh while its
   deadline allows. */
#define RPCOOL__R_HELLO_PING_MS 500u
/* ... and waits at most this long for it: the server sends its hello as soon as it accepts and
   gives up on it after its retry bound (about 4 s), so a hello not here by then never comes (a
   queue pair that stopped acknowledging was seen to answer our check writes but not the
   server's hello): the connect starts afresh, with another queue pair, while its deadline
   allows. */
#define RPCOOL__R_HELLO_WAIT_MS 8000u
/* Busy-polling adapts to the traffic (BPEV "while calls are frequent"): a side keeps polling
   up to 4 times the recent round trip (client) or gap between calls (server), if that is under
   this bound, else only spin_ns. */
#define RPCOOL__R_SPIN_MAX_NS 50000000ull

/* How long a side polls before it sleeps: spin_ns, or 4 x recent (round trip or gap) while
   that is under the bound. */
static uint64_t rpcool__r_spin(uint64_t spin_ns, uint64_t recent)
{
    uint64_t spin = spin_ns;
    if (4 * recent < RPCOOL__R_SPIN_MAX_NS && 4 * recent > spin) spin = 4 * recent;
    return spin;
}

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
    uint32_t cbytes, cframes; /* what the sender had consumed of our frames (low 32 bits): the
                                 credit rides in every frame, no WRITE of its own */
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
    int32_t pid;                /* client: who it says it is (rpcool_ctx_peer; unauthenticated) */
    uint32_t uid, gid;
    char pod[20];               /* its SHMHEAP_POD_ID, "" if unset */
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__rhello) <= RPCOOL__R_HELLO, "rdma hello");

struct rpcool__rcredit {
    uint64_t bytes, frames; /* consumed by the receiver, of what this side sent */
};

/* A reply block the server carved from a client's reply region. */
struct rpcool__rblk {
    uint64_t addr, len;
    uint32_t group; /* the call that allocated it */
    uint32_t sent;  /* its call's DONE went: its bytes in the mirror no longer matter */
};

struct rpcool__rrange {
    uint64_t lo, hi;
};

struct rpcool__rframe { /* a frame set aside by the fault thread for the serving thread */
    struct rpcool__rframe *next;
    size_t len;
    char data[];
};

enum { RPCOOL__RS_HELLO = 1, RPCOOL__RS_ACTIVE, RPCOOL__RS_DEAD };

struct rpcool__rconn {
    struct rpcool__rconn *next;  /* the server's list */
    char meta[128];              /* client: the meta server it was found at ("": $KRCONN_META) */
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
    uint64_t hdr_cb, hdr_cf;     /* the latest credit that rode in the peer's frames */
    int ping_out;
    uint64_t last_ping, last_rx;
    int32_t dead;                /* sticky: why the connection is unusable */
    int failed;                  /* its connect or hello failed: the QP is not pooled again */
    rpcool_conn *owner;          /* client: its connection (a sender waiting for room pumps) */
    rpcool_peer peer;            /* server: the client, as its hello claims (rpcool__r_peer_set) */
    void *cuser;                 /* server: on_connect's conn_user */
    int hooked;                  /* server: on_connect accepted it: on_disconnect is owed */
    int peer_ok;                 /* peer is set (release: read by rpcool__r_conns, under lock) */
    uint64_t check_ns;           /* a sender waiting for room pings after this long silent */
    int wc_fail;                 /* the first failed completion's status + 1 (0: none), for logs */
    uint64_t bad;                /* malformed frames */
    /* the client's heap, as the server mirrors it */
    uint64_t base, size, rbase, rlen;
    int state;                   /* server: RPCOOL__RS_* */
    uint64_t hello_deadline;
    int mirror;
    /* the mirror's pages that hold something: the last call's extents, pages fetched for it,
       reply blocks (under pop_lock: the fault thread adds too) */
    pthread_mutex_t pop_lock;
    struct rpcool__rrange *pop;
    size_t npop, cappop;
    int pop_all;                 /* lost track (no memory): drop the whole mirror next call */
    struct rpcool__rblk *blk;    /* reply blocks, sorted by address */
    size_t nblk, capblk;
    pthread_mutex_t blk_lock;    /* blk: the RDMA thread and threads giving deferred replies */
    uint32_t ndeferred;          /* deferred calls not yet finished: the mirror stays */
    uint32_t group;              /* the call being served */
    uint32_t fetch_id;
    uint64_t sleeps, polls;      /* times this side slept on the channel / polled the CQ */
    uint64_t arms, events;       /* times its CQ was armed / completion events taken from it */
    uint64_t rtt_ns;             /* client: recent round trips (moving average) */
    /* client, when its spin_ns is the default: the recent
       round trip of a wait that polled first and of one that slept at once (moving averages,
       0 = none yet), and the waits so far (rpcool__r_wait chooses by them) */
    int adapt;
    uint64_t rtt_poll, rtt_sleep, waits;
    int preposted;               /* client: receives posted before the connect (rpcool__r_before) */
    /* the pages the server holds from the last call, with a copy of their bytes (client: what
       it sent; server: what it installed): a page unchanged on both sides is kept for the next
       call instead of travelling again (client: under post_lock; server: serving thread) */
    pthread_mutex_t post_lock;
    struct rpcool__rrange held[RPCOOL__R_MAXENT];
    unsigned nheld;
    char *hbuf, *hbuf2;
    size_t hcap, hcap2;
    int held_reset;              /* client: the server lost some: send everything next call */
    uint64_t (*pen)[2];          /* client, under post_lock: a CALL's entries (RPCOOL__R_MAXENT), */
    const char **psrc;           /* where each entry's bytes are, */
    struct rpcool__rpart *pparts; /* and the parts of the frame; made at the first call */
    uint32_t lost;               /* server: the next DONE says so (any thread's: atomic) */
    uint32_t logged;             /* server: RPCOOL__NOTE_* kinds logged (once per connection) */
    /* counts for the line logged when the connection ends (RPCOOL_DEBUG): calls posted (client,
       under post_lock) or served (server), bytes of kept pages (not sent) and bytes sent as whole
       pages (client), calls whose pages were compared in place, no copy (both sides) */
    uint64_t calls, kept_bytes, whole_bytes, same_calls;
    /* client side: frees to send */
    pthread_mutex_t free_lock;
    uint64_t *frees;
    unsigned nfrees;
};

struct rpcool__rsrv {
    krconn_ctx *kc;
    krconn_ctx *meta;            /* "serve": the meta server's own context (its connections are
                                    directory readers, never rpcool clients) */
    krconn_dir *dir;
    int uffd;
    int stop, closing;   /* stop: the serving thread; closing: the fault thread too */
    int stop_ev;         /* an eventfd that wakes the serving thread's idle sleep at a stop */
    uint64_t spin_ns;    /* the serving thread polls this long before it sleeps */
    uint64_t sleeps;     /* times the serving thread slept */
    uint64_t gap_ns;     /* recent idle gaps between calls (moving average) */
    /* spin_ns the default: the serving thread polls through
       an idle gap or sleeps at once, whichever gave the shorter recent gaps (as a client's wait:
       rpcool__r_wait); gaps over a quarter of the polling bound count for neither */
    int adapt;
    uint64_t gap_poll, gap_sleep, idles;
    pthread_t thr, fthr;
    int thr_started, fthr_started;
    pthread_mutex_t lock;        /* the connection list, against the fault thread */
    struct rpcool__rconn *conns;
    char name[RPCOOL__NAME_MAX + 8];
};

/* A call's connection (ctx->conn of a call over RDMA). */
static inline struct rpcool__rconn *rpcool__r_conn(const rpcool_ctx *ctx)
{
    return (struct rpcool__rconn *)ctx->conn;
}

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
/* Slot i's cancel word: at the server, what the client wrote (RPCOOL__SL(gen, REQ): call gen
   of slot i is cancelled); at the client, the source of that WRITE. */
static inline uint32_t *rpcool__r_cancel_word(struct rpcool__rconn *rc, unsigned i)
{
    return (uint32_t *)(void *)(rc->area + RPCOOL__R_CANCEL_OFF + 8 * (size_t)i);
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

/* >>r-conn - the RDMA transport: a connection's frames, credits and waiting -------------------- */

/* The copy of the pages the server holds from the last call (hbuf) and the one being made for
   this call (hbuf2): make hbuf2 hold at least n bytes (0, or -ENOMEM with nothing changed), and
   swap the two once the new copy stands. */
/* The queue pair as the verbs see it, for the log: "qp N -> M (state, send and receive PSN)". */
static const char *rpcool__r_qp_text(const struct rpcool__rconn *rc, char *buf, size_t n)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (!rc->qp || ibv_query_qp(rc->qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_SQ_PSN |
                                                IBV_QP_RQ_PSN, &ia))
        snprintf(buf, n, "qp ?");
    else
        snprintf(buf, n, "qp %u -> %u (state %d, psn %u/%u)", rc->qp->qp_num, a.dest_qp_num,
                 (int)a.qp_state, a.sq_psn, a.rq_psn);
    return buf;
}

/* Who a client says it is, for its hello: nothing of it is authenticated. */
static void rpcool__r_claim(struct rpcool__rhello *hl)
{
    const char *id = getenv("SHMHEAP_POD_ID");
    hl->pid = (int32_t)getpid();
    hl->uid = (uint32_t)getuid();
    hl->gid = (uint32_t)getgid();
    snprintf(hl->pod, sizeof hl->pod, "%s", id ? id : "");
}

/* The server's record of a client (rpcool_ctx_peer): its hello's claims, marked unauthenticated,
   and its address: the GID its queue pair is connected to. */
static void rpcool__r_peer_set(struct rpcool__rconn *rc, const struct rpcool__rhello *ch)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    rpcool_peer *p = &rc->peer;
    memset(p, 0, sizeof *p);
    p->transport = RPCOOL_TRANSPORT_RDMA;
    p->pid = ch->pid;
    p->uid = ch->uid;
    p->gid = ch->gid;
    p->slot = RPCOOL_MAX_CONNS;
    snprintf(p->pod, sizeof p->pod, "%.*s", (int)sizeof ch->pod, ch->pod);
    if (rc->qp && !ibv_query_qp(rc->qp, &a, IBV_QP_AV, &ia) && a.ah_attr.is_global)
        inet_ntop(AF_INET6, a.ah_attr.grh.dgid.raw, p->addr, sizeof p->addr);
    else if (rc->qp && !ibv_query_qp(rc->qp, &a, IBV_QP_AV, &ia))
        snprintf(p->addr, sizeof p->addr, "lid %u", (unsigned)a.ah_attr.dlid);
}

/* rpcool_server_conns: the RDMA connections, from out[n] on (up to max); n plus their number.
   Any thread: the list's lock keeps each one alive while it is read. */
static int rpcool__r_conns(rpcool_server *s, rpcool_conn_stats *out, unsigned max, int n)
{
    struct rpcool__rsrv *rs = rcp__load(&s->rdma);
    if (!rs) return n;
    pthread_mutex_lock(&rs->lock);
    for (struct rpcool__rconn *rc = rs->conns; rc; rc = rc->next) {
        if (!rcp__load(&rc->peer_ok)) continue;
        if ((unsigned)n < max) {
            out[n].peer = rc->peer;
            out[n].inflight = 0;
        }
        n++;
    }
    pthread_mutex_unlock(&rs->lock);
    return n;
}

static int rpcool__r_hbuf2_fit(struct rpcool__rconn *rc, uint64_t n)
{
    if (n <= rc->hcap2) return 0;
    char *nb = (char *)RPCOOL_MALLOC((size_t)n);
    if (!nb) return -ENOMEM;
    rpcool__free(rc->hbuf2);
    rc->hbuf2 = nb;
    rc->hcap2 = (size_t)n;
    return 0;
}

static void rpcool__r_hbuf_swap(struct rpcool__rconn *rc)
{
    char *t = rc->hbuf;
    size_t tc = rc->hcap;
    rc->hbuf = rc->hbuf2;
    rc->hcap = rc->hcap2;
    rc->hbuf2 = t;
    rc->hcap2 = tc;
}

static void rpcool__r_conn_free(struct rpcool__rconn *rc)
{
    if (!rc) return;
    int32_t why = rcp__load(&rc->dead);
    if (rc->k && rc->qp && (rc->failed || rc->wc_fail || (why && why != RPCOOL_E_CLOSED))) {
        /* a connection that failed gives its queue pair to nobody: in the error state, krconn
           destroys it instead of keeping it in its pool */
        rcp__verbs_qp_fail(rc->qp);
    }
    /* the queue pair first (krconn resets or destroys it: nothing reaches the area any more),
       then the area's registration, which its posted receives named until then */
    if (rc->k) krconn_disconnect(rc->k);
    if (rc->mr.mr) krconn_dereg(&rc->mr);
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
    pthread_mutex_destroy(&rc->pop_lock);
    pthread_mutex_destroy(&rc->blk_lock);
    pthread_mutex_destroy(&rc->post_lock);
    rpcool__free(rc->pop);
    rpcool__free(rc->hbuf);
    rpcool__free(rc->hbuf2);
    rpcool__free(rc->pen);
    rpcool__free(rc->psrc);
    rpcool__free(rc->pparts);
    rpcool__free(rc);
}

static int rpcool__r_post_recv(struct rpcool__rconn *rc)
{
    return rcp__verbs_post_recv(rc->qp, RPCOOL__RW_RECV, rpcool__r_hello(rc), RPCOOL__R_HELLO,
                                rc->mr.lkey);
}

/* A new connection: its area registered, ready for rpcool__r_attach. The slow part (8 MiB
   allocated and registered) comes first, so that receives are posted at once after the connect:
   a peer's first message must not find none (it would retry only for a few milliseconds). */
static int rpcool__r_prep(krconn_ctx *kc, struct rpcool__rconn **out)
{
    struct rpcool__rconn *rc = (struct rpcool__rconn *)rpcool__calloc(1, sizeof *rc);
    int r;
    if (!rc) return -ENOMEM;
    pthread_mutex_init(&rc->cq_lock, NULL);
    pthread_mutex_init(&rc->rx_lock, NULL);
    pthread_mutex_init(&rc->tx_lock, NULL);
    pthread_mutex_init(&rc->free_lock, NULL);
    pthread_mutex_init(&rc->pop_lock, NULL);
    pthread_mutex_init(&rc->blk_lock, NULL);
    pthread_mutex_init(&rc->post_lock, NULL);
    rc->backlog_tail = &rc->backlog;
    rc->evfd = -1;
    if (posix_memalign((void **)&rc->area, 4096, RPCOOL__R_AREA)) {
        rc->area = NULL;
        r = -ENOMEM;
        goto fail;
    }
    memset(rc->area, 0, RPCOOL__R_AREA);
    if ((r = rpcool__r_err(krconn_reg(kc, rc->area, RPCOOL__R_AREA, 0, &rc->mr)))) goto fail;
    *out = rc;
    return 0;
fail:
    rpcool__r_conn_free(rc);
    return r;
}

/* krconn_connect_opts.before: the client posts its receives on the QP (still in INIT) before
   krconn asks the server, whose hello may come the moment the server's side is up. */
static int rpcool__r_before(struct ibv_qp *qp, void *user)
{
    struct rpcool__rconn *rc = (struct rpcool__rconn *)user;
    int r = 0;
    rc->qp = qp;
    for (unsigned i = 0; i < RPCOOL__R_RECVS && !r; i++) r = rpcool__r_post_recv(rc);
    rc->preposted = !r;
    return r;
}

/* Put rc on krconn connection k (rc owns k from now on, even on failure): post the receives
   (unless rpcool__r_before did). */
static int rpcool__r_attach(struct rpcool__rconn *rc, krconn *k)
{
    int r = 0;
    rc->k = k;
    if (rc->preposted && rc->qp != krconn_qp(k)) return RPCOOL_E_PROTO;
    rc->qp = krconn_qp(k);
    rc->cq = rc->qp ? rc->qp->recv_cq : NULL;
    if (!rc->qp || rc->cq != rc->qp->send_cq) return RPCOOL_E_PROTO; /* one CQ per krconn QP */
    for (unsigned i = 0; i < RPCOOL__R_RECVS && !r && !rc->preposted; i++)
        r = rpcool__r_post_recv(rc);
#ifdef KRCONN_CTX_EVENTS
    rc->evfd = krconn_event_fd(k);
    if (rc->evfd < 0) rc->evfd = -1;
#endif
    rc->last_rx = rcp__now_ns();
    return r;
}

/* One completion (under cq_lock): a receive queues its frame's offset (and is posted again), a
   send counts, a failure makes the connection dead. */
static void rpcool__r_wc(struct rpcool__rconn *rc, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) {
        if (!rc->wc_fail) rc->wc_fail = (int)wc->status + 1;
        if (!rcp__load(&rc->dead)) rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
        return;
    }
    uint64_t id = wc->wr_id & 0xffffffffffffull;
    if (id == RPCOOL__RW_PING) {
        rcp__store(&rc->ping_out, 0);
        return;
    }
    if (id != RPCOOL__RW_RECV) {
        if ((id & 0xff) == RPCOOL__RW_SEND) rcp__store(&rc->sq_done, id >> 8);
        return;
    }
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && rc->rxq_n < 2 * RPCOOL__R_RECVS) {
        rc->rxq[(rc->rxq_head + rc->rxq_n) % (2 * RPCOOL__R_RECVS)] = ntohl(wc->imm_data);
        rc->rxq_n++;
    } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PROTO); /* more than credited */
    } else if (wc->opcode == IBV_WC_RECV) {
        rc->hello_in = (int)wc->byte_len;
    }
    rpcool__r_post_recv(rc);
}

/* Poll the CQ until it is empty (rpcool__r_wc for each completion). Returns how many
   completions. */
static int rpcool__r_cq(struct rpcool__rconn *rc)
{
    struct ibv_wc wc[16];
    int n, total = 0;
    pthread_mutex_lock(&rc->cq_lock);
    while ((n = ibv_poll_cq(rc->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) rpcool__r_wc(rc, &wc[i]);
        total += n;
    }
    pthread_mutex_unlock(&rc->cq_lock);
    if (total) rcp__store_relaxed(&rc->last_rx, rcp__now_ns());
    return total;
}

/* Post a chain of send work requests with one doorbell (under tx_lock): the last one of a chain
   that reaches a multiple of RPCOOL__R_SIGNAL is signalled, its wr_id carrying how many were
   posted, so the send queue never overflows. */
static int rpcool__r_post_wr(struct rpcool__rconn *rc, struct ibv_send_wr *wr)
{
    unsigned n = 0;
    struct ibv_send_wr *last = wr;
    for (struct ibv_send_wr *w = wr; w; w = w->next, n++) {
        last = w;
        w->wr_id = RPCOOL__RW_SEND; /* unsignalled: completes only if it fails */
    }
    while (rc->sq_posted + n - rcp__load(&rc->sq_done) > RPCOOL__R_WR - 2 * RPCOOL__R_SIGNAL) {
        rpcool__r_cq(rc);
        int d = rcp__load(&rc->dead);
        if (d) return d;
    }
    struct ibv_send_wr *bad = NULL;
    uint64_t before = rc->sq_posted;
    rc->sq_posted += n;
    if (rc->sq_posted / RPCOOL__R_SIGNAL != before / RPCOOL__R_SIGNAL) {
        last->send_flags |= IBV_SEND_SIGNALED;
        last->wr_id = rc->sq_posted << 8 | RPCOOL__RW_SEND;
    }
    int r = rcp__verbs_post_chain(rc->qp, wr, &bad);
    if (r) {
        rc->sq_posted = before;
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
        return RPCOOL_E_PEERDEAD;
    }
    return 0;
}

/* wr: one scatter entry sge over [p, p+len) of our area, op to the peer's raddr. */
static void rpcool__r_wr(struct rpcool__rconn *rc, struct ibv_send_wr *wr, struct ibv_sge *sge,
                         const void *p, size_t len, enum ibv_wr_opcode op, uint64_t raddr)
{
    *sge = (struct ibv_sge){(uint64_t)(uintptr_t)p, (uint32_t)len, rc->mr.lkey};
    rcp__verbs_wr_init(wr, 0, op, 0);
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rc->peer_rkey;
}

/* wr: the WRITE of what we consumed ({*bytes, *frames}) into the peer's credit word (under
   tx_lock: the source is one buffer). */
static void rpcool__r_credit_wr(struct rpcool__rconn *rc, struct ibv_send_wr *wr,
                                struct ibv_sge *sge, uint64_t *bytes, uint64_t *frames)
{
    struct rpcool__rcredit *src = rpcool__r_credit_src(rc);
    src->bytes = *bytes = rcp__load_relaxed(&rc->rx_pos);
    src->frames = *frames = rcp__load_relaxed(&rc->rx_frames);
    rpcool__r_wr(rc, wr, sge, src, sizeof *src, IBV_WR_RDMA_WRITE, rc->peer_area);
}

/* Tell the peer what we consumed, if enough to matter (or force). Takes tx_lock. */
static void rpcool__r_credit(struct rpcool__rconn *rc, int force)
{
    /* below half a ring or half the receives, the credit rides on our next frame */
    if (!force && rc->rx_pos - rcp__load_relaxed(&rc->rep_bytes) < RPCOOL__R_RING / 2 &&
        rc->rx_frames - rcp__load_relaxed(&rc->rep_frames) < RPCOOL__R_RECVS / 2)
        return;
    pthread_mutex_lock(&rc->tx_lock);
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    uint64_t b, f;
    rpcool__r_credit_wr(rc, &wr, &sge, &b, &f);
    if (!rpcool__r_post_wr(rc, &wr)) {
        rcp__store_relaxed(&rc->rep_bytes, b);
        rcp__store_relaxed(&rc->rep_frames, f);
    }
    pthread_mutex_unlock(&rc->tx_lock);
}

/* A keepalive: a zero-byte RDMA WRITE, at most one outstanding; a dead peer fails it. */
static void rpcool__r_ping(struct rpcool__rconn *rc)
{
    if (rcp__load(&rc->ping_out) || rcp__load(&rc->dead)) return;
    pthread_mutex_lock(&rc->tx_lock);
    rcp__store(&rc->ping_out, 1);
    if (rcp__verbs_post_ping(rc->qp, RPCOOL__RW_PING, rc->peer_area, rc->peer_rkey)) {
        rcp__store(&rc->ping_out, 0);
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
    }
    pthread_mutex_unlock(&rc->tx_lock);
}

/* A goodbye (either side's BYE frame) waits this long at most for the peer's NIC to take it. */
#define RPCOOL__R_BYE_MS 1000u

/* One piece of a frame's body. */
struct rpcool__rpart {
    const void *p;
    size_t len;
};

/* Send deadlines: 0 waits for room up to 5 s (the server: a client that never
   consumes must not hold a serving thread for good), RPCOOL__R_NEVER while the peer lives (a
   client's call without a timeout: giving up would lose a frame the caller counts on). */
#define RPCOOL__R_SEND_DEFAULT_NS 5000000000ull
#define RPCOOL__R_NEVER UINT64_MAX

static void rpcool__r_hdr_credit(struct rpcool__rconn *rc, uint32_t cb32, uint32_t cf32);
static void rpcool__r_poll(rpcool_conn *c);

/* The credit riding in the frames that came but nobody has handled yet (a thread that waits
   for room while it holds rx_lock, or while the thread that would handle them waits for it):
   a completion means the whole frame is in the ring; rpcool__r_hdr_credit bounds the value. */
static void rpcool__r_peek_credit(struct rpcool__rconn *rc)
{
    pthread_mutex_lock(&rc->cq_lock);
    for (unsigned k = 0; k < rc->rxq_n; k++) {
        uint64_t off = (uint64_t)rc->rxq[(rc->rxq_head + k) % (2 * RPCOOL__R_RECVS)] * 8;
        if (off + sizeof(struct rpcool__rf) + 8 > RPCOOL__R_RING) continue;
        const struct rpcool__rf *h = (const struct rpcool__rf *)(rpcool__r_ring(rc) + off);
        rpcool__r_hdr_credit(rc, rcp__load_relaxed(&h->cbytes), rcp__load_relaxed(&h->cframes));
    }
    pthread_mutex_unlock(&rc->cq_lock);
}

/* Where a frame of flen bytes goes (under tx_lock): *off in the peer's ring; returns its start
   in the stream (no frame straddles the end: it starts over at 0). */
static uint64_t rpcool__r_place(struct rpcool__rconn *rc, size_t flen, uint64_t *off)
{
    uint64_t pos = rc->tx_pos;
    *off = pos % RPCOOL__R_RING;
    if (*off + flen > RPCOOL__R_RING) {
        pos += RPCOOL__R_RING - *off;
        *off = 0;
    }
    return pos;
}

/* Is there room in the peer's ring and receives for a frame of flen bytes at pos (tx_lock)? */
static int rpcool__r_room(struct rpcool__rconn *rc, uint64_t pos, size_t flen)
{
    struct rpcool__rcredit *cr = rpcool__r_credit_in(rc);
    uint64_t cb = rcp__load((volatile uint64_t *)&cr->bytes);
    uint64_t cf = rcp__load((volatile uint64_t *)&cr->frames);
    uint64_t hb = rcp__load_relaxed(&rc->hdr_cb), hf = rcp__load_relaxed(&rc->hdr_cf);
    if (hb > cb) cb = hb; /* the newer of the two ways a credit comes */
    if (hf > cf) cf = hf;
    if (cb > rc->tx_pos) cb = rc->tx_pos; /* never more than we sent (a peer's bug) */
    if (cf > rc->tx_frames) cf = rc->tx_frames;
    return pos + flen - cb <= RPCOOL__R_RING && rc->tx_frames + 1 - cf <= RPCOOL__R_RECVS - 4;
}

/* Waiting for room, with tx_lock released: handle what came (a client's frames carry the
   credit; the thread that would handle them may be this one's caller, or waiting for
   post_lock), else read the credit they carry; a keepalive while nothing comes. */
static void rpcool__r_room_wait(struct rpcool__rconn *rc, unsigned k)
{
    if (rc->owner && !pthread_mutex_trylock(&rc->rx_lock)) {
        pthread_mutex_unlock(&rc->rx_lock);
        rpcool__r_poll(rc->owner);
    } else {
        rpcool__r_cq(rc);
        rpcool__r_peek_credit(rc);
    }
    if (k < 64) return;
    uint64_t now = rcp__now_ns(), rx = rcp__load_relaxed(&rc->last_rx);
    if (now > rx && now - rx >= rc->check_ns && now - rc->last_ping >= rc->check_ns) {
        rc->last_ping = now;
        rpcool__r_ping(rc);
    }
    if (k < 1024) sched_yield();
    else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* Send a frame: header h (len, seq filled in here) and a body of parts, padded to 8 bytes.
   Waits for room in the peer's ring up to deadline (0: 5 s; RPCOOL__R_NEVER: while the peer
   lives). */
static int rpcool__r_send(struct rpcool__rconn *rc, struct rpcool__rf *h,
                          const struct rpcool__rpart *parts, unsigned nparts, uint64_t deadline)
{
    size_t body = 0;
    for (unsigned i = 0; i < nparts; i++) body += parts[i].len;
    size_t flen = sizeof *h + ((body + 7) & ~(size_t)7) + 8;
    if (flen > RPCOOL__R_MAXFRAME) return RPCOOL_E_TOOBIG;
    if (!deadline) deadline = rcp__now_ns() + RPCOOL__R_SEND_DEFAULT_NS;
    pthread_mutex_lock(&rc->tx_lock);
    int r = rcp__load(&rc->dead);
    uint64_t off = 0, pos = 0;
    for (unsigned k = 0; !r; k++) {
        /* placed afresh each time: other senders (frees, fetched pages, credits) may have
           gone while tx_lock was released */
        pos = rpcool__r_place(rc, flen, &off);
        if (rpcool__r_room(rc, pos, flen)) break;
        if (deadline != RPCOOL__R_NEVER && rcp__now_ns() >= deadline) {
            r = RPCOOL_E_TIMEOUT;
            break;
        }
        pthread_mutex_unlock(&rc->tx_lock);
        rpcool__r_room_wait(rc, k);
        pthread_mutex_lock(&rc->tx_lock);
        r = rcp__load(&rc->dead);
    }
    if (r) {
        pthread_mutex_unlock(&rc->tx_lock);
        return r;
    }
    char *f = rpcool__r_sbuf(rc) + off;
    uint64_t cb = rcp__load_relaxed(&rc->rx_pos), cf = rcp__load_relaxed(&rc->rx_frames);
    h->len = (uint32_t)flen;
    h->seq = rc->tx_seq;
    h->cbytes = (uint32_t)cb; /* what we consumed of the peer's frames rides along */
    h->cframes = (uint32_t)cf;
    memcpy(f, h, sizeof *h);
    size_t at = sizeof *h;
    for (unsigned i = 0; i < nparts; i++) {
        if (parts[i].len) memcpy(f + at, parts[i].p, parts[i].len);
        at += parts[i].len;
    }
    memset(f + at, 0, flen - 8 - at);
    uint64_t tr = RPCOOL__R_TRAILER ^ rc->tx_seq;
    memcpy(f + flen - 8, &tr, 8);
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    rpcool__r_wr(rc, &wr, &sge, f, flen, IBV_WR_RDMA_WRITE_WITH_IMM, rc->peer_area + 64 + off);
    wr.imm_data = htonl((uint32_t)(off / 8));
    /* counted before the post: the peer's answer, which carries its credit for this frame,
       may be handled by another thread before rpcool__r_post_wr returns (a failed post makes
       the connection dead: nothing is sent on it again) */
    rcp__store_relaxed(&rc->tx_pos, pos + flen);
    rcp__store_relaxed(&rc->tx_frames, rc->tx_frames + 1);
    rc->tx_seq++;
    r = rpcool__r_post_wr(rc, &wr);
    if (!r) {
        rcp__store_relaxed(&rc->rep_bytes, cb);
        rcp__store_relaxed(&rc->rep_frames, cf);
    }
    pthread_mutex_unlock(&rc->tx_lock);
    return r;
}

/* Send the BYE frame and wait, until `until`, for the peer to have taken it: the QP is reset
   (or given to the pool) right after, which would drop a frame still on its way. A ping posted
   after the BYE completes once the BYE has (a send queue completes in order); an earlier ping
   still out is waited out first. Only the thread that owns rc's completions (its closer). */
static void rpcool__r_bye(struct rpcool__rconn *rc, uint64_t until)
{
    struct rpcool__rf h;
    memset(&h, 0, sizeof h);
    h.type = RPCOOL__RF_BYE;
    if (rpcool__r_send(rc, &h, NULL, 0, until)) return;
    int pinged = 0;
    while (!rcp__load(&rc->dead) && rcp__now_ns() < until) {
        rpcool__r_cq(rc);
        if (rcp__load(&rc->ping_out)) {
            sched_yield();
            continue;
        }
        if (pinged) return; /* ours completed: the BYE is there */
        rpcool__r_ping(rc);
        pinged = 1;
    }
}

/* Raise *p to v if v is larger (any thread). */
static void rpcool__r_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = rcp__load_relaxed(p);
    while (v > cur && !rcp__cas(p, &cur, v)) {
    }
}

/* The credit that rode in a peer's frame (low 32 bits of what it consumed of ours), widened
   against what we sent: it can be neither more than that nor more than a ring (bytes) or the
   receives (frames) behind it; a value outside (a peer's bug) is ignored. tx_pos and tx_frames
   count a frame before it is posted, so an answer to it never finds them behind. */
static void rpcool__r_hdr_credit(struct rpcool__rconn *rc, uint32_t cb32, uint32_t cf32)
{
    uint64_t tb = rcp__load_relaxed(&rc->tx_pos), tf = rcp__load_relaxed(&rc->tx_frames);
    uint32_t db = (uint32_t)tb - cb32, df = (uint32_t)tf - cf32;
    if (db <= RPCOOL__R_RING && db <= tb) rpcool__r_max(&rc->hdr_cb, tb - db);
    if (df <= 2 * RPCOOL__R_RECVS && df <= tf) rpcool__r_max(&rc->hdr_cf, tf - df);
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
    uint64_t off = (uint64_t)imm * 8, exp = rc->rx_pos % RPCOOL__R_RING, tr;
    struct rpcool__rf *h;
    uint32_t len;
    if (off != exp) {
        if (off != 0) goto bad;
        rcp__store_relaxed(&rc->rx_pos, rc->rx_pos + RPCOOL__R_RING - exp); /* started over at 0 */
    }
    if (off + sizeof(struct rpcool__rf) + 8 > RPCOOL__R_RING) goto bad;
    h = (struct rpcool__rf *)(rpcool__r_ring(rc) + off);
    len = rcp__load_relaxed(&h->len);
    if (len < sizeof *h + 8 || (len & 7) || len > RPCOOL__R_MAXFRAME ||
        off + len > RPCOOL__R_RING ||
        h->seq != rc->rx_seq)
        goto bad;
    memcpy(&tr, (char *)h + len - 8, 8);
    if (tr != (RPCOOL__R_TRAILER ^ rc->rx_seq)) goto bad;
    rpcool__r_hdr_credit(rc, h->cbytes, h->cframes);
    return h;
bad:
    rc->bad++;
    rcp__store(&rc->dead, (int32_t)RPCOOL_E_PROTO);
    return NULL;
}

/* Done with frame h (the one rpcool__r_next returned): its room goes back to the sender. */
static void rpcool__r_consume(struct rpcool__rconn *rc, struct rpcool__rf *h)
{
    rcp__store_relaxed(&rc->rx_pos, rc->rx_pos + h->len); /* read by senders of credits */
    rcp__store_relaxed(&rc->rx_frames, rc->rx_frames + 1);
    rc->rx_seq++;
    rpcool__r_credit(rc, 0);
}

/* Sleep until the CQ has something or timeout_ns pass (BPEV's event half). */
static void rpcool__r_sleep(struct rpcool__rconn *rc, uint64_t timeout_ns)
{
    rc->sleeps++;
#ifdef KRCONN_CTX_EVENTS
    if (rc->evfd >= 0 && !krconn_arm(rc->k)) {
        rc->arms++;
        if (rpcool__r_cq(rc)) return; /* came before the arm took */
        pthread_mutex_lock(&rc->cq_lock);
        int have = rc->rxq_n != 0;
        pthread_mutex_unlock(&rc->cq_lock);
        if (have) return;
        struct pollfd pf = {rc->evfd, POLLIN, 0};
        poll(&pf, 1, (int)(timeout_ns / 1000000u) + 1);
        int ev = krconn_event_ack(rc->k);
        if (ev > 0) rc->events += (unsigned)ev;
        return;
    }
#endif
    (void)rc;
    uint64_t t = timeout_ns < 200000u ? timeout_ns : 200000u;
    struct timespec ts = {0, (long)t};
    nanosleep(&ts, NULL);
}


/* >>r-client - the RDMA transport: the client -------------------------------------------------- */

static pthread_mutex_t rpcool__r_lock = PTHREAD_MUTEX_INITIALIZER;
static krconn_ctx *rpcool__r_kc;    /* the process's client context, made at the first connect */
static struct { char where[128]; krconn_dir *dir; } rpcool__r_dirs[8];

/* The options of rpcool's krconn contexts (device NULL: $KRCONN_DEVICE or the first active). */
static void rpcool__r_ctx_opts(krconn_ctx_opts *ko, const char *device, unsigned backlog)
{
    memset(ko, 0, sizeof *ko);
    ko->device = device;
    ko->max_send_wr = RPCOOL__R_WR;
    ko->max_recv_wr = RPCOOL__R_WR;
    ko->timeout = RPCOOL__R_ACK_TIMEOUT;
    ko->min_rnr_timer = RPCOOL__R_RNR_TIMER;
    ko->accept_backlog = backlog;
#ifdef KRCONN_CTX_EVENTS
    ko->flags = KRCONN_CTX_EVENTS;
#endif
}

/* A child of fork() must not use its parent's verbs objects: it makes a context of its own. */
static void rpcool__r_atfork_child(void)
{
    pthread_mutex_init(&rpcool__r_lock, NULL);
    rpcool__r_kc = NULL;
    memset(rpcool__r_dirs, 0, sizeof rpcool__r_dirs);
}
static pthread_once_t rpcool__r_fork_once = PTHREAD_ONCE_INIT;
static void rpcool__r_fork_init(void) { pthread_atfork(NULL, NULL, rpcool__r_atfork_child); }

static int rpcool__r_client_ctx(krconn_ctx **out)
{
    int r = 0;
    pthread_once(&rpcool__r_fork_once, rpcool__r_fork_init);
    pthread_mutex_lock(&rpcool__r_lock);
    if (!rpcool__r_kc) {
        krconn_ctx_opts ko;
        rpcool__r_ctx_opts(&ko, NULL, 0);
        r = rpcool__r_err(krconn_ctx_create(&ko, &rpcool__r_kc));
    }
    *out = rpcool__r_kc;
    pthread_mutex_unlock(&rpcool__r_lock);
    return r;
}

/* The directory at meta server `where` (NULL: $KRCONN_META), kept for the process. */
static int rpcool__r_dir(krconn_ctx *kc, const char *where, unsigned timeout_ms, krconn_dir **out)
{
    const char *w = where ? where : "";
    int r = 0;
    pthread_mutex_lock(&rpcool__r_lock);
    unsigned i;
    for (i = 0; i < 8 && rpcool__r_dirs[i].dir; i++)
        if (!strcmp(rpcool__r_dirs[i].where, w)) break;
    if (i < 8 && rpcool__r_dirs[i].dir) {
        *out = rpcool__r_dirs[i].dir;
    } else {
        r = rpcool__r_err(krconn_dir_meta(kc, where, (int)timeout_ms, out));
        if (!r && i < 8) {
            snprintf(rpcool__r_dirs[i].where, sizeof rpcool__r_dirs[i].where, "%s", w);
            rpcool__r_dirs[i].dir = *out;
        } else if (!r) {
            krconn_dir_close(*out); /* more than 8 meta servers: not kept */
            r = RPCOOL_E_NOTSUP;
        }
    }
    pthread_mutex_unlock(&rpcool__r_lock);
    return r;
}

/* Forget a cached directory whose meta server connection broke. */
static void rpcool__r_dir_drop(krconn_dir *dir)
{
    pthread_mutex_lock(&rpcool__r_lock);
    for (unsigned i = 0; i < 8; i++)
        if (rpcool__r_dirs[i].dir == dir) {
            krconn_dir_close(dir);
            for (; i < 7; i++) rpcool__r_dirs[i] = rpcool__r_dirs[i + 1];
            memset(&rpcool__r_dirs[7], 0, sizeof rpcool__r_dirs[7]);
            break;
        }
    pthread_mutex_unlock(&rpcool__r_lock);
}

static void rpcool__r_rounds(uint64_t *lo, uint64_t *hi, uint64_t base, uint64_t size)
{
    uint64_t pg = rpcool__page_size();
    *lo &= ~(pg - 1);
    *hi = (*hi + pg - 1) & ~(pg - 1);
    if (*lo < base) *lo = base;
    if (*hi > base + size) *hi = base + size;
}

/* Handle one frame at the client (under rx_lock). */
static void rpcool__r_client_frame(rpcool_conn *c, struct rpcool__rconn *rc, struct rpcool__rf *h)
{
    if (h->type == RPCOOL__RF_DONE) {
        unsigned i = h->slot;
        if (i >= RPCOOL__NSLOTS || h->gen != c->pend[i].gen) { rc->bad++; return; }
        const char *q = (const char *)(h + 1), *end = (const char *)h + h->len - 8;
        int status = h->status;
        for (uint32_t b = 0; b < h->n1; b++) {
            uint64_t ba, bl;
            if (end - q < 16) { status = RPCOOL_E_PROTO; break; }
            memcpy(&ba, q, 8);
            memcpy(&bl, q + 8, 8);
            q += 16;
            if (bl > (uint64_t)(end - q) || ba < rc->rbase || bl > rc->rlen ||
                ba - rc->rbase > rc->rlen - bl) {
                status = RPCOOL_E_PROTO;
                break;
            }
            memcpy((void *)(uintptr_t)ba, q, (size_t)bl); /* the reply, at its own address */
            q += (bl + 7) & ~(uint64_t)7;
        }
        if (h->flags & RPCOOL__R_DONE_LOST) rcp__store(&rc->held_reset, 1);
        struct rpcool__resp *sl = &c->hdr->resp[i];
        sl->status = status;
        sl->ret = status == RPCOOL_E_PROTO ? 0 : h->a;
        sl->ret_len = status == RPCOOL_E_PROTO ? 0 : h->b;
        rcp__store(&sl->state, RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_DONE));
    } else if (h->type == RPCOOL__RF_FETCH) {
        uint64_t lo = h->a, hi = h->a + h->b, base = (uint64_t)(uintptr_t)shmheap_base(c->heap);
        uint64_t size = shmheap_size(c->heap);
        struct rpcool__rf a;
        memset(&a, 0, sizeof a);
        a.type = RPCOOL__RF_PAGES;
        a.id = h->id;
        a.a = h->a;
        a.b = h->b;
        struct rpcool__rpart part = {NULL, 0};
        if (h->a < base || h->b > size || h->a - base > size - h->b || h->b > RPCOOL__R_RING / 4) {
            a.status = RPCOOL_E_BADPTR;
        } else {
            rpcool__r_rounds(&lo, &hi, base, size);
            part.p = (const void *)(uintptr_t)h->a;
            part.len = (size_t)h->b;
        }
        rpcool__r_send(rc, &a, &part, part.len ? 1 : 0, 0);
    } else if (h->type == RPCOOL__RF_BYE) {
        rcp__store(&rc->dead, (int32_t)RPCOOL_E_CLOSED);
    } else {
        rc->bad++;
    }
}

/* Read and handle what came (the client side); another thread doing it is enough. */
static void rpcool__r_poll(rpcool_conn *c)
{
    struct rpcool__rconn *rc = c->rdma;
    if (pthread_mutex_trylock(&rc->rx_lock)) return;
    struct rpcool__rf *h;
    while ((h = rpcool__r_next(rc))) {
        rpcool__r_client_frame(c, rc, h);
        rpcool__r_consume(rc, h);
    }
    pthread_mutex_unlock(&rc->rx_lock);
}

static int rpcool__r_gone(rpcool_conn *c) { return rcp__load(&c->rdma->dead); }

#define RPCOOL__R_MAXEXT 16

/* The ranges a call sends: the argument's pages, its seal range and the extents the caller
   named (clipped to the heap), in whole pages, sorted by start and merged. Returns how many. */
static unsigned rpcool__r_call_ranges(rpcool_conn *c, const struct rpcool__call *call,
                                      uint64_t ext[][2])
{
    uint64_t base = (uint64_t)(uintptr_t)shmheap_base(c->heap), size = shmheap_size(c->heap);
    uint64_t arg = (uint64_t)(uintptr_t)call->arg, seal = (uint64_t)(uintptr_t)call->seal_p;
    unsigned n = 0, m = 0;
    if (call->arg_len) {
        ext[n][0] = arg;
        ext[n][1] = arg + call->arg_len;
        n++;
    }
    if (call->seal_len && seal + call->seal_len > seal) { /* a seal range: it travels too */
        ext[n][0] = seal;
        ext[n][1] = seal + call->seal_len;
        n++;
    }
    for (unsigned k = 0; k < call->next && n < RPCOOL__R_MAXEXT; k++) {
        const rpcool_extent *e = &call->ext[k];
        uint64_t lo = (uint64_t)(uintptr_t)e->p, hi = lo + e->len;
        if (!e->len || hi < lo || lo >= base + size || hi <= base) continue;
        ext[n][0] = lo;
        ext[n][1] = hi;
        n++;
    }
    for (unsigned k = 0; k < n; k++) rpcool__r_rounds(&ext[k][0], &ext[k][1], base, size);
    for (unsigned a = 1; a < n; a++) /* sort by start, then merge */
        for (unsigned b = a; b > 0 && ext[b][0] < ext[b - 1][0]; b--) {
            uint64_t t0 = ext[b][0], t1 = ext[b][1];
            ext[b][0] = ext[b - 1][0], ext[b][1] = ext[b - 1][1];
            ext[b - 1][0] = t0, ext[b - 1][1] = t1;
        }
    for (unsigned k = 0; k < n; k++) {
        if (m && ext[k][0] <= ext[m - 1][1]) {
            if (ext[k][1] > ext[m - 1][1]) ext[m - 1][1] = ext[k][1];
        } else {
            ext[m][0] = ext[k][0];
            ext[m][1] = ext[k][1];
            m++;
        }
    }
    return m;
}

/* Take the reply frees queued (rpcool__r_drop_reply): they ride on this call. Returns how many. */
static unsigned rpcool__r_frees_take(struct rpcool__rconn *rc, uint64_t *frees)
{
    pthread_mutex_lock(&rc->free_lock);
    unsigned nf = rc->nfrees;
    memcpy(frees, rc->frees, nf * sizeof *frees);
    rc->nfrees = 0;
    pthread_mutex_unlock(&rc->free_lock);
    return nf;
}

/* Frees a call did not carry (it was not sent): queued again. */
static void rpcool__r_frees_requeue(struct rpcool__rconn *rc, const uint64_t *frees, unsigned nf)
{
    pthread_mutex_lock(&rc->free_lock);
    for (unsigned k = 0; k < nf && rc->nfrees < RPCOOL__R_FREES; k++)
        rc->frees[rc->nfrees++] = frees[k];
    pthread_mutex_unlock(&rc->free_lock);
}

/* What travels: the ranges as whole pages, at most budget bytes (the rest is fetched when
   touched). Returns how many ranges remain; *total: their bytes. */
static unsigned rpcool__r_clip(uint64_t ext[][2], unsigned m, uint64_t budget, uint64_t *total)
{
    uint64_t pg = rpcool__page_size();
    *total = 0;
    for (unsigned k = 0; k < m; k++) {
        uint64_t len = ext[k][1] - ext[k][0];
        if (*total + len > budget) len = (budget - *total) & ~(pg - 1);
        if (!len) return k;
        ext[k][1] = ext[k][0] + len;
        *total += len;
    }
    return m;
}

/* 1 if the call sends the same ranges as the server holds from the last one (a call repeated
   on the same structure): the pages are then compared with our copy of them in place, and
   only a changed page is copied (through a page-sized snapshot, into the copy, which the patch
   is then sent from). A DONE that said some kept pages were lost empties what it holds. */
static int rpcool__r_same(struct rpcool__rconn *rc, uint64_t ext[][2], unsigned m,
                          uint64_t total)
{
    if (rcp__load(&rc->held_reset)) {
        rcp__store(&rc->held_reset, 0);
        rc->nheld = 0;
    }
    int same = m > 0 && m == rc->nheld && rpcool__page_size() <= RPCOOL__R_SNAP &&
               total <= rc->hcap;
    for (unsigned k = 0; same && k < m; k++)
        same = ext[k][0] == rc->held[k].lo && ext[k][1] == rc->held[k].hi;
    return same;
}

/* Another call's ranges: taken into a copy first (hbuf2), so that what the server gets and
   what we remember it holds are the same bytes even if another thread writes meanwhile.
   Returns how many ranges travel (none if there is no room for the copy). */
static unsigned rpcool__r_copy_ranges(struct rpcool__rconn *rc, uint64_t ext[][2], unsigned m,
                                      uint64_t *total)
{
    if (rpcool__r_hbuf2_fit(rc, *total)) { /* no copy: nothing kept, no page travels */
        *total = 0;
        return 0;
    }
    for (unsigned k = 0, off = 0; k < m; off += (unsigned)(ext[k][1] - ext[k][0]), k++)
        memcpy(rc->hbuf2 + off, (const void *)(uintptr_t)ext[k][0],
               (size_t)(ext[k][1] - ext[k][0]));
    return m;
}

/* The per-connection scratch of a CALL's entries, made on first use. */
static int rpcool__r_post_bufs(struct rpcool__rconn *rc)
{
    if (!rc->pen) rc->pen = (uint64_t(*)[2])rpcool__calloc(RPCOOL__R_MAXENT, 16);
    if (!rc->psrc) rc->psrc = (const char **)rpcool__calloc(RPCOOL__R_MAXENT, sizeof(char *));
    if (!rc->pparts)
        rc->pparts =
            (struct rpcool__rpart *)rpcool__calloc(1 + 2 * RPCOOL__R_MAXENT, sizeof *rc->pparts);
    return rc->pen && rc->psrc && rc->pparts ? 0 : -ENOMEM;
}

/* A CALL's entries as they are built: ranges (start, length | kind) and where each one's bytes
   are (NULL for KEPT). Range entries ascend; a patch lies inside a kept range. */
struct rpcool__rents {
    uint64_t (*en)[2];
    const char **esrc;
    unsigned ne, lastr; /* entries so far; the last range entry (~0u: none) */
    uint64_t kept;      /* bytes kept */
};

/* Our copy of what the server holds of page p, or NULL. Pages are asked for in ascending
   order: *j and *oj (the held range, its offset in our copy) carry the walk. */
static const char *rpcool__r_held_at(const struct rpcool__rconn *rc, uint64_t p, unsigned *j,
                                     uint64_t *oj)
{
    while (*j < rc->nheld && rc->held[*j].hi <= p) {
        *oj += rc->held[*j].hi - rc->held[*j].lo;
        (*j)++;
    }
    return *j < rc->nheld && rc->held[*j].lo <= p ? rc->hbuf + *oj + (p - rc->held[*j].lo)
                                                  : NULL;
}

/* Page p's entry: KEPT (no bytes) if the server holds it (old: our copy of that) and it did not
   change; kept with a PATCH of its changed bytes (in 8-byte words) if it changed; else WHOLE.
   cur: its bytes now; mine: our copy to update in place (a repeated call), or NULL. Adjacent
   pages of one kind extend one range entry. */
static void rpcool__r_page_entry(struct rpcool__rents *b, uint64_t p, const char *old,
                                 const char *cur, char *mine)
{
    uint64_t pg = rpcool__page_size(), kind = 0, plo = 0, phi = 0;
    if (old) {
        kind = RPCOOL__R_KEEP;
        if (memcmp(old, cur, (size_t)pg)) {
            while (plo < pg && !memcmp(old + plo, cur + plo, 8)) plo += 8;
            phi = pg;
            while (phi > plo && !memcmp(old + phi - 8, cur + phi - 8, 8)) phi -= 8;
        }
    }
    if (mine && cur != mine) { /* our copy takes the new bytes; they are sent from it */
        memcpy(mine, cur, (size_t)pg);
        cur = mine;
    }
    uint64_t(*en)[2] = b->en;
    if (b->lastr != ~0u && (en[b->lastr][1] & RPCOOL__R_KEEP) == kind &&
        en[b->lastr][0] + (en[b->lastr][1] & ~RPCOOL__R_KEEP) == p) {
        en[b->lastr][1] += pg; /* extends the last range */
    } else {
        b->lastr = b->ne++;
        en[b->lastr][0] = p;
        en[b->lastr][1] = pg | kind;
        b->esrc[b->lastr] = kind ? NULL : cur;
    }
    if (kind) b->kept += pg;
    if (phi > plo) {
        en[b->ne][0] = p + plo;
        en[b->ne][1] = (phi - plo) | RPCOOL__R_PATCH;
        b->esrc[b->ne++] = cur + plo;
    }
}

/* The entries of m ranges: a repeated call (same) compares each page with our copy in place,
   another looks each page up among the pages the server holds. */
static void rpcool__r_entries_of(struct rpcool__rconn *rc, uint64_t ext[][2], unsigned m,
                                 int same, struct rpcool__rents *b)
{
    uint64_t pg = rpcool__page_size(), oj = 0;
    char snap[RPCOOL__R_SNAP];
    unsigned j = 0;
    size_t off = 0;
    for (unsigned k = 0; k < m; off += (size_t)(ext[k][1] - ext[k][0]), k++) {
        for (uint64_t p = ext[k][0]; p < ext[k][1]; p += pg) {
            const char *cur = rc->hbuf2 + off + (p - ext[k][0]), *old;
            char *mine = NULL;
            if (same) { /* old: our copy; cur: a snapshot of the page if it changed */
                mine = rc->hbuf + off + (p - ext[k][0]);
                old = cur = mine;
                if (memcmp(mine, (const void *)(uintptr_t)p, (size_t)pg)) {
                    memcpy(snap, (const void *)(uintptr_t)p, (size_t)pg);
                    cur = snap;
                }
            } else {
                old = rpcool__r_held_at(rc, p, &j, &oj);
            }
            if (b->ne + 3 + (m - k) > RPCOOL__R_MAXENT) old = NULL; /* out of entries: whole */
            rpcool__r_page_entry(b, p, old, cur, mine);
        }
    }
}

/* The CALL frame: the frees, then each entry, followed by its bytes unless it is KEPT. */
static int rpcool__r_send_call(struct rpcool__rconn *rc, struct rpcool__rf *h,
                               const uint64_t *frees, unsigned nf, const struct rpcool__rents *b,
                               uint64_t deadline)
{
    struct rpcool__rpart *parts = rc->pparts;
    unsigned np = 0;
    parts[np++] = (struct rpcool__rpart){frees, nf * 8};
    for (unsigned e = 0; e < b->ne; e++) {
        parts[np++] = (struct rpcool__rpart){b->en[e], 16};
        if (!(b->en[e][1] & RPCOOL__R_KEEP))
            parts[np++] =
                (struct rpcool__rpart){b->esrc[e], (size_t)(b->en[e][1] & ~RPCOOL__R_PATCH)};
    }
    h->n2 = b->ne;
    return rpcool__r_send(rc, h, parts, np, deadline ? deadline : RPCOOL__R_NEVER);
}

/* After the CALL went (r == 0), the server holds these pages: remember them. */
static void rpcool__r_held_note(struct rpcool__rconn *rc, uint64_t ext[][2], unsigned m,
                                int same, int r, uint64_t total, uint64_t kept)
{
    if (r) {
        if (same) rc->nheld = 0; /* our copy took bytes the server never got */
        return;
    }
    if (!same) rpcool__r_hbuf_swap(rc);
    for (unsigned k = 0; k < m; k++) rc->held[k] = (struct rpcool__rrange){ext[k][0], ext[k][1]};
    rc->nheld = m;
    rc->calls++;
    rc->kept_bytes += kept;
    rc->whole_bytes += total - kept;
    rc->same_calls += same;
}

/* Post a call: one CALL frame carrying the frees queued, and the extents (the argument's
   pages and the ranges the caller named, merged, clipped to the heap, as many whole ones as fit
   in a frame; the rest is fetched when touched). */
static int rpcool__r_post(rpcool_conn *c, const struct rpcool__call *call)
{
    struct rpcool__rconn *rc = c->rdma;
    uint64_t ext[RPCOOL__R_MAXEXT + 2][2], frees[RPCOOL__R_FREES], total;
    unsigned m = rpcool__r_call_ranges(c, call, ext);
    pthread_mutex_lock(&rc->post_lock);
    unsigned nf = rpcool__r_frees_take(rc, frees);
    struct rpcool__rf h;
    memset(&h, 0, sizeof h);
    h.type = RPCOOL__RF_CALL;
    h.slot = (uint16_t)call->slot;
    h.gen = call->gen;
    h.fn = call->fn;
    h.flags = call->flags;
    h.a = (uint64_t)(uintptr_t)call->arg;
    h.b = call->arg_len;
    h.n1 = nf;
    m = rpcool__r_clip(ext, m, RPCOOL__R_MAXFRAME - sizeof h - 8 - nf * 8 - 16 * RPCOOL__R_MAXENT,
                       &total);
    int same = rpcool__r_same(rc, ext, m, total);
    if (!same) m = rpcool__r_copy_ranges(rc, ext, m, &total);
    int r = rpcool__r_post_bufs(rc);
    if (!r) {
        struct rpcool__rents b = {rc->pen, rc->psrc, 0, ~0u, 0};
        rpcool__r_entries_of(rc, ext, m, same, &b);
        r = rpcool__r_send_call(rc, &h, frees, nf, &b, call->deadline);
        rpcool__r_held_note(rc, ext, m, same, r, total, b.kept);
    }
    pthread_mutex_unlock(&rc->post_lock);
    if (r) rpcool__r_frees_requeue(rc, frees, nf); /* the frees were not sent */
    return r;
}

/* A moving average of round trips: one outlier (a descheduled guest, a slow handler) counts as
   4 times the average at most. */
static void rpcool__r_avg(uint64_t *avg, uint64_t took)
{
    uint64_t a = rcp__load_relaxed(avg);
    if (a && took > 4 * a) took = 4 * a;
    rcp__store_relaxed(avg, a ? (7 * a + took) / 8 : took);
}

/* Polling competes for the CPU with whatever moves the packets (Soft-RoCE runs in the kernel,
   on the same CPUs), so on some machines it loses: an adapting side (a client's waits, the
   serving thread's idle gaps) polls first or sleeps at once, whichever was faster recently. */
#define RPCOOL__R_PROBE 16u

/* Sleep at once (1) or poll first (0), by the recent waits of each way (0 = none yet): the
   first wait polls, the second sleeps, then the faster way, and the other in 1 of
   RPCOOL__R_PROBE (n counts the choices made so far). */
static int rpcool__r_sleep_first(uint64_t poll, uint64_t sleep, uint64_t n)
{
    if (!poll) return 0;
    if (!sleep) return 1;
    return (sleep < poll) ^ (n % RPCOOL__R_PROBE == RPCOOL__R_PROBE - 1);
}

/* Wait for call i: poll while spin_ns lasts (not at all when an adapting client sleeps at
   once), then sleep on the completion channel; a keepalive every peer_check_ms. */
static int rpcool__r_wait(rpcool_conn *c, unsigned i, uint64_t deadline)
{
    struct rpcool__rconn *rc = c->rdma;
    const uint32_t done = RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_DONE);
    uint64_t t0 = rcp__now_ns(), check = (uint64_t)c->peer_check_ms * 1000000u;
    uint64_t rtt = rcp__load_relaxed(&rc->rtt_ns);
    uint64_t spin = rpcool__r_spin(c->spin_ns, rtt);
    int slept = 0; /* this wait's mode: sleep at once */
    if (rc->adapt) {
        uint64_t w = __atomic_fetch_add(&rc->waits, 1, __ATOMIC_RELAXED);
        slept = rpcool__r_sleep_first(rcp__load_relaxed(&rc->rtt_poll),
                                      rcp__load_relaxed(&rc->rtt_sleep), w);
        if (slept) spin = 0;
    }
    for (unsigned k = 0;; k++) {
        rpcool__r_poll(c);
        if (rcp__load(&c->hdr->resp[i].state) == done) {
            uint64_t took = rcp__now_ns() - t0; /* the round trips the next waits expect */
            rcp__store_relaxed(&rc->rtt_ns, rtt ? (7 * rtt + took) / 8 : took);
            if (rc->adapt) rpcool__r_avg(slept ? &rc->rtt_sleep : &rc->rtt_poll, took);
            return 0;
        }
        int d = rcp__load(&rc->dead);
        if (d) return d;
        if (k & 15) {
            rcp__cpu_relax();
            continue;
        }
        uint64_t now = rcp__now_ns();
        if (deadline && now >= deadline) return RPCOOL_E_TIMEOUT;
        uint64_t rx = rcp__load_relaxed(&rc->last_rx); /* may be newer than now */
        if (now > rx && now - rx >= check && now - rc->last_ping >= check) {
            rc->last_ping = now;
            rpcool__r_ping(rc);
        }
        if (now - t0 < spin) continue;
        uint64_t slice = check;
        if (deadline && deadline - now < slice) slice = deadline - now;
        rpcool__r_sleep(rc, slice);
    }
}

/* A reply block nobody takes, or one rpcool_free gave back (rpcool__r_free): it goes back to
   the server with the next call (or a FREE frame once RPCOOL__R_FREES are queued). */
static void rpcool__r_drop_reply(rpcool_conn *c, void *p)
{
    struct rpcool__rconn *rc = c->rdma;
    uint64_t a = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&rc->free_lock);
    rc->frees[rc->nfrees++] = a;
    int flush = rc->nfrees == RPCOOL__R_FREES;
    uint64_t frees[RPCOOL__R_FREES];
    unsigned nf = 0;
    if (flush) {
        nf = rc->nfrees;
        memcpy(frees, rc->frees, nf * sizeof *frees);
        rc->nfrees = 0;
    }
    pthread_mutex_unlock(&rc->free_lock);
    if (flush) {
        struct rpcool__rf h;
        memset(&h, 0, sizeof h);
        h.type = RPCOOL__RF_FREE;
        h.n1 = nf;
        struct rpcool__rpart part = {frees, nf * 8};
        /* lost only if the server is gone: so is the heap */
        rpcool__r_send(rc, &h, &part, 1, RPCOOL__R_NEVER);
    }
}

/* rpcool_free: a block of the reply region (the server owns it) goes back to the server. */
static int rpcool__r_free(rpcool_conn *c, void *p)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (a < c->rdma->rbase || a - c->rdma->rbase >= c->rdma->rlen) return 0;
    rpcool__r_drop_reply(c, p);
    return 1;
}

/* Wait for the server's hello (its area), up to deadline. A zero-byte RDMA WRITE goes every
   RPCOOL__R_HELLO_PING_MS: a server that dropped the connection (its hello found no receive
   posted here in time: RNR retries exceeded) leaves its queue pair in error or back in its
   pool, which acknowledges nothing, so the write fails after the ACK retries (about 4 s) and
   this returns RPCOOL_E_PEERDEAD instead of waiting out the deadline; so does a hello not here
   after RPCOOL__R_HELLO_WAIT_MS. */
static int rpcool__r_await_hello(struct rpcool__rconn *rc, uint64_t deadline,
                                 struct rpcool__rhello *out)
{
    uint64_t next_ping = rcp__now_ns() + RPCOOL__R_HELLO_PING_MS * 1000000ull;
    uint64_t give_up = rcp__now_ns() + RPCOOL__R_HELLO_WAIT_MS * 1000000ull;
    if (give_up < deadline) deadline = give_up;
    for (;;) {
        rpcool__r_cq(rc);
        int d = rcp__load(&rc->dead);
        if (d) return d;
        pthread_mutex_lock(&rc->cq_lock);
        int got = rc->hello_in;
        if (got) memcpy(out, rpcool__r_hello(rc), sizeof *out);
        pthread_mutex_unlock(&rc->cq_lock);
        if (got) return got == (int)sizeof *out ? 0 : RPCOOL_E_PROTO;
        uint64_t now = rcp__now_ns();
        if (now >= deadline) return now >= give_up ? RPCOOL_E_PEERDEAD : RPCOOL_E_TIMEOUT;
        if (now >= next_ping) {
            rpcool__r_ping(rc);
            next_ping = now + RPCOOL__R_HELLO_PING_MS * 1000000ull;
        }
        rpcool__r_sleep(rc, 1000000u);
    }
}

/* Send our hello as role (1 server, 2 client) on channel: hl's other fields as the caller set
   them (the heap, for a client). */
static int rpcool__r_send_hello(struct rpcool__rconn *rc, struct rpcool__rhello *hl,
                                uint32_t role, const char *channel)
{
    hl->magic = RPCOOL__R_HELLO_MAGIC;
    hl->version = RPCOOL__R_VERSION;
    hl->role = role;
    hl->area = (uint64_t)(uintptr_t)rc->area;
    hl->rkey = rc->mr.rkey;
    snprintf(hl->channel, sizeof hl->channel, "%s", channel);
    /* from the send buffer's last bytes: frames reach them only after ring-size bytes, long
       after this send completed */
    char *src = rpcool__r_sbuf(rc) + RPCOOL__R_RING - RPCOOL__R_HELLO;
    memcpy(src, hl, sizeof *hl);
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    rpcool__r_wr(rc, &wr, &sge, src, sizeof *hl, IBV_WR_SEND, 0);
    pthread_mutex_lock(&rc->tx_lock);
    int r = rpcool__r_post_wr(rc, &wr);
    pthread_mutex_unlock(&rc->tx_lock);
    return r;
}

#ifdef RPCOOL__R_TEST_HOOKS
static unsigned rpcool__r_test_late_recv_us; /* tests only: see rpcool__r_connect */
static int rpcool__r_test_no_prepost;         /* tests only: receives after the connect, once */
#endif

/* The queue pair of a connection to the service svc, from the directory at meta (NULL:
   $KRCONN_META; rc's receives are posted before it asks: rpcool__r_before). A directory whose
   meta server went away since it was read is read afresh, once. */
static int rpcool__r_qp(rpcool_conn *c, krconn_ctx *kc, krconn_dir **dir, const char *meta,
                        const char *name, const char *svc, struct rpcool__rconn *rc,
                        uint64_t deadline, unsigned connect_ms, krconn **k)
{
    uint64_t now = rcp__now_ns();
    unsigned left_ms = now < deadline ? (unsigned)((deadline - now) / 1000000u) : 0;
    krconn_connect_opts co = {(int)(left_ms ? left_ms : 1), KRCONN_CONNECT_NO_VIRTUAL,
                              rpcool__r_before, rc};
    int r;
#ifdef RPCOOL__R_TEST_HOOKS
    if (rpcool__r_test_no_prepost) co.before = NULL, rpcool__r_test_no_prepost = 0;
#endif
    int kr = krconn_connect_name(kc, *dir, svc, &co, k);
    if (kr == KRCONN_E_CLOSED || kr == KRCONN_E_PEERDEAD || kr == KRCONN_E_QPERR ||
        kr == KRCONN_E_FLUSHED) { /* the meta server went away since: ask it afresh, once */
        rpcool__r_dir_drop(*dir);
        if ((r = rpcool__r_dir(kc, meta, connect_ms, dir))) return r;
        kr = krconn_connect_name(kc, *dir, svc, &co, k);
    }
    if ((r = rpcool__r_err(kr))) {
        char buf[256];
        rpcool__log(&c->log, RPCOOL_LOG_WARN, "rdma connect to %s: %s", name,
                    krconn_describe(kr, buf, sizeof buf));
    }
    return r;
}

/* The connection heap: one of our pod, at our pod's addresses, on a memfd: no name in
   /dev/shm, and its range in the pod is held by our handle's lock, so a client killed while
   connected leaves nothing behind past the pod's next create (shmheap_create_fd). In it: c->hdr
   (where replies show) and the reply region (a quarter of the heap), which the server owns. */
static int rpcool__r_heap_make(rpcool_conn *c, struct rpcool__rconn *rc, const char *name)
{
    char mn[RPCOOL__NAME_MAX + 16];
    size_t pg = rpcool__page_size(), hs, rlen;
    snprintf(mn, sizeof mn, "rpcool-rdma-%s", name);
    int hfd = memfd_create(mn, MFD_CLOEXEC), r;
    if (hfd < 0) return -errno;
    r = shmheap_create_fd(hfd, &c->hopts, &c->heap);
    close(hfd); /* the handle keeps its own duplicate */
    if (r) return r;
    snprintf(c->heap_name, sizeof c->heap_name, "%.100s", shmheap_name(c->heap));
    c->hdr = (struct rpcool__conn_hdr *)shmheap_aligned_alloc(c->heap, 128, sizeof *c->hdr);
    hs = shmheap_size(c->heap);
    rlen = (hs / 4) & ~(pg - 1);
    void *reply = rlen ? shmheap_aligned_alloc(c->heap, pg, rlen) : NULL;
    if (!c->hdr || !reply) {
        shmheap_close(c->heap);
        c->heap = NULL;
        return SHMHEAP_E_FULL;
    }
    memset(c->hdr, 0, sizeof *c->hdr);
    c->hdr->version = RPCOOL__VERSION;
    c->hdr->nslots = RPCOOL__NSLOTS;
    c->hdr->magic = RPCOOL__CONN_MAGIC;
    rc->base = (uint64_t)(uintptr_t)shmheap_base(c->heap);
    rc->size = hs;
    rc->rbase = (uint64_t)(uintptr_t)reply;
    rc->rlen = rlen;
    return 0;
}

/* The server's verdict on our hello: its ACCEPT frame's status (0, or why it refused). */
static int rpcool__r_accepted(struct rpcool__rconn *rc, uint64_t deadline)
{
    for (;;) {
        pthread_mutex_lock(&rc->rx_lock);
        struct rpcool__rf *h = rpcool__r_next(rc);
        int st = 1, r;
        if (h) {
            st = h->type == RPCOOL__RF_ACCEPT ? h->status : RPCOOL_E_PROTO;
            rpcool__r_consume(rc, h);
        }
        pthread_mutex_unlock(&rc->rx_lock);
        if (st != 1) return st;
        if ((r = rcp__load(&rc->dead))) return r;
        if (rcp__now_ns() >= deadline) return RPCOOL_E_TIMEOUT;
        rpcool__r_sleep(rc, 1000000u);
    }
}

/* The hellos: the server's (its area), ours (the heap's and the reply region's place), then
   its verdict. *again: the server dropped the connection before its hello reached us, and the
   deadline leaves time for a new one. */
static int rpcool__r_handshake(rpcool_conn *c, struct rpcool__rconn *rc, const char *name,
                               uint64_t deadline, int *again)
{
    struct rpcool__rhello sh, ch;
    int r;
    if ((r = rpcool__r_await_hello(rc, deadline, &sh))) {
        *again = r == RPCOOL_E_PEERDEAD && rcp__now_ns() < deadline;
        char qt[96];
        rpcool__log(&c->log, RPCOOL_LOG_WARN, "rdma connect to %s: connected (%s), but no hello "
                    "from the server: %s%s%s (the server's log says why it dropped the "
                    "connection)%s", name, rpcool__r_qp_text(rc, qt, sizeof qt),
                    rpcool_strerror(r), rc->wc_fail ? ", a work request failed: " : "",
                    rc->wc_fail ? ibv_wc_status_str((enum ibv_wc_status)(rc->wc_fail - 1)) : "",
                    *again ? "; connecting again" : "");
        return r;
    }
    if (sh.magic != RPCOOL__R_HELLO_MAGIC || sh.version != RPCOOL__R_VERSION || sh.role != 1)
        return RPCOOL_E_PROTO;
    rc->peer_area = sh.area;
    rc->peer_rkey = sh.rkey;
    memset(&ch, 0, sizeof ch);
    ch.heap_base = rc->base;
    ch.heap_size = rc->size;
    ch.reply_base = rc->rbase;
    ch.reply_len = rc->rlen;
    rpcool__r_claim(&ch);
    if ((r = rpcool__r_send_hello(rc, &ch, 2, name))) return r;
    if ((r = rpcool__r_accepted(rc, deadline)))
        rpcool__log(&c->log, RPCOOL_LOG_WARN, "rdma connect to %s: the server's answer to our "
                    "hello: %s", name, rpcool_strerror(r));
    return r;
}

/* The connection is made: the client's state goes live. */
static void rpcool__r_connected(rpcool_conn *c, struct rpcool__rconn *rc, const char *name,
                                const rpcool_conn_opts *o)
{
    rc->owner = c;
    rc->check_ns = (uint64_t)c->peer_check_ms * 1000000u;
    /* a client adapts (polls or sleeps at once) when its spin_ns is the default */
    rc->adapt = !o->spin_ns;
    c->rdma = rc;
    if (c->log.fn) {
        char qt[96];
        rpcool__log(&c->log, RPCOOL_LOG_INFO, "connected to %s over RDMA (heap %s at %p, %s)",
                    name, c->heap_name, shmheap_base(c->heap),
                    rpcool__r_qp_text(rc, qt, sizeof qt));
    }
}

/* A client connection over RDMA (see the top of this file): a queue pair, the heap, the
   hellos. Attempts again while the deadline allows when the server dropped the connection
   before its hello, or refused the heap's range (RPCOOL_E_ADDRINUSE: its mirror of a client
   of our pod that died there is not reclaimed yet; the refused heap is kept open until we
   connect, so that the next heap gets another range). */
static int rpcool__r_connect(rpcool_conn *c, const char *where, const char *name,
                             const rpcool_conn_opts *o, unsigned connect_ms)
{
    krconn_ctx *kc;
    krconn_dir *dir;
    krconn *k = NULL;
    struct rpcool__rconn *rc = NULL;
    char svc[RPCOOL__NAME_MAX + 16];
    uint64_t deadline = rcp__now_ns() + (uint64_t)connect_ms * 1000000u;
    shmheap *held[RPCOOL__R_HELD];
    const char *meta = where[0] ? where : NULL;
    int r, again, nheld = 0;
    if (!o->spin_ns) c->spin_ns = RPCOOL_DEFAULT_RDMA_SPIN_NS; /* a network round trip */
    if ((r = rpcool__check_name(name))) return r;
    if ((r = rpcool__r_client_ctx(&kc))) return r;
    if ((r = rpcool__r_dir(kc, meta, connect_ms, &dir))) return r;
    snprintf(svc, sizeof svc, "rpcool.%s", name);
    do {
        again = 0;
        k = NULL;
        if ((r = rpcool__r_prep(kc, &rc))) break;
        r = rpcool__r_qp(c, kc, &dir, meta, name, svc, rc, deadline, connect_ms, &k);
#ifdef RPCOOL__R_TEST_HOOKS
        if (!r && rpcool__r_test_late_recv_us) { /* tests: a client slow to post its receives */
            usleep(rpcool__r_test_late_recv_us);
            rpcool__r_test_late_recv_us = 0;
        }
#endif
        if (!r) r = rpcool__r_attach(rc, k);
        if (!r && !(rc->frees = (uint64_t *)rpcool__calloc(RPCOOL__R_FREES, sizeof *rc->frees)))
            r = -ENOMEM;
        if (!r) r = rpcool__r_heap_make(c, rc, name);
        if (!r) r = rpcool__r_handshake(c, rc, name, deadline, &again);
        if (!r) {
            snprintf(rc->meta, sizeof rc->meta, "%s", where);
            rpcool__r_connected(c, rc, name, o);
            break;
        }
        if (c->heap && r == RPCOOL_E_ADDRINUSE && nheld < RPCOOL__R_HELD &&
            rcp__now_ns() < deadline) {
            rpcool__log(&c->log, RPCOOL_LOG_INFO, "rdma connect to %s: the server still "
                        "mirrors another client at %p (gone, not yet reclaimed there): another "
                        "range", name, shmheap_base(c->heap));
            held[nheld++] = c->heap; /* hold its range: the next heap is placed elsewhere */
            again = 1;
        } else if (c->heap) {
            shmheap_close(c->heap); /* its range in the pod goes with the last hold */
        }
        c->heap = NULL;
        rc->failed = 1;
        rpcool__r_conn_free(rc);
        rc = NULL;
    } while (again);
    while (nheld) shmheap_close(held[--nheld]);
    return r;
}

static void rpcool__r_disconnect(rpcool_conn *c)
{
    struct rpcool__rconn *rc = c->rdma;
    if (rc->calls)
        rpcool__log(&c->log, RPCOOL_LOG_INFO, "rdma connection: %llu calls; "
                    "%llu bytes kept, %llu sent as whole pages, "
                    "%llu calls compared in place; "
                    "slept %llu times, CQ armed %llu times, %llu completion events; "
                    "recent round trip polling first %.1f us, sleeping at once %.1f us%s",
                    (unsigned long long)rc->calls, (unsigned long long)rc->kept_bytes,
                    (unsigned long long)rc->whole_bytes, (unsigned long long)rc->same_calls,
                    (unsigned long long)rc->sleeps,
                    (unsigned long long)rc->arms, (unsigned long long)rc->events,
                    rc->rtt_poll / 1e3, rc->rtt_sleep / 1e3, rc->adapt ? "" : " (not adapting)");
    if (!rcp__load(&rc->dead))
        rpcool__r_bye(rc, rcp__now_ns() + (uint64_t)RPCOOL__R_BYE_MS * 1000000u);
    rpcool__r_conn_free(rc);
    c->rdma = NULL;
    shmheap_close(c->heap);
}


/* >>r-server - the RDMA transport: the server -------------------------------------------------- */

/* Note [lo, hi) of the mirror as holding something (dropped before a call that does not send
   it). */
static void rpcool__r_pop_add(struct rpcool__rconn *rc, uint64_t lo, uint64_t hi)
{
    pthread_mutex_lock(&rc->pop_lock);
    if (rc->npop && rc->pop[rc->npop - 1].hi == lo) { /* extends the last one */
        rc->pop[rc->npop - 1].hi = hi;
    } else {
        if (rc->npop == rc->cappop) {
            size_t nc = rc->cappop ? 2 * rc->cappop : 32;
            struct rpcool__rrange *np = (struct rpcool__rrange *)rpcool__calloc(nc, sizeof *np);
            if (!np) { /* cannot keep track: the next call drops the whole mirror */
                rc->pop_all = 1;
                pthread_mutex_unlock(&rc->pop_lock);
                return;
            }
            if (rc->npop) memcpy(np, rc->pop, rc->npop * sizeof *np);
            rpcool__free(rc->pop);
            rc->pop = np;
            rc->cappop = nc;
        }
        rc->pop[rc->npop++] = (struct rpcool__rrange){lo, hi};
    }
    pthread_mutex_unlock(&rc->pop_lock);
}

/* The pages of reply blocks whose DONE has not gone yet (a deferred call's, written and sent by
   another thread while this one serves the next calls), sorted and merged (blk_lock held); more
   than 64 ranges: the whole reply region. Returns how many ranges. */
static unsigned rpcool__r_unsent(const struct rpcool__rconn *rc, struct rpcool__rrange live[64])
{
    uint64_t pg = rpcool__page_size();
    unsigned nl = 0;
    for (size_t k = 0; k < rc->nblk; k++) {
        if (rc->blk[k].sent) continue;
        uint64_t lo = rc->blk[k].addr & ~(pg - 1);
        uint64_t hi = (rc->blk[k].addr + rc->blk[k].len + pg - 1) & ~(pg - 1);
        if (nl && lo <= live[nl - 1].hi) { /* blk is sorted: extends the last range */
            if (hi > live[nl - 1].hi) live[nl - 1].hi = hi;
            continue;
        }
        if (nl == 64) { /* too many: the reply region as a whole */
            live[0] = (struct rpcool__rrange){rc->rbase, rc->rbase + rc->rlen};
            return 1;
        }
        live[nl++] = (struct rpcool__rrange){lo, hi};
    }
    return nl;
}

/* Before a call: drop every page that holds something and that the call does not send again
   (ext: its n extents, sorted), so nothing older than the call is ever read; the pages it does
   send are overwritten in place (no drop, no TLB shootdown for a repeated argument). The pages
   of reply blocks not sent yet stay, and stay listed (a later call drops them): a deferred
   reply's bytes are read from them when its DONE goes. blk_lock is held throughout, so no block
   is carved meanwhile on a page being dropped. */
static void rpcool__r_pop_trim(struct rpcool__rconn *rc, const struct rpcool__rrange *ext,
                               unsigned n)
{
    struct rpcool__rrange live[64], keep[RPCOOL__R_MAXENT + 64], all;
    unsigned nl, nk = 0, a = 0, b = 0;
    pthread_mutex_lock(&rc->pop_lock);
    pthread_mutex_lock(&rc->blk_lock);
    nl = rpcool__r_unsent(rc, live);
    if (n > RPCOOL__R_MAXENT) n = RPCOOL__R_MAXENT;
    while (a < n || b < nl) /* what stays: the two sorted lists merged */
        keep[nk++] = b >= nl || (a < n && ext[a].lo <= live[b].lo) ? ext[a++] : live[b++];
    const struct rpcool__rrange *pop = rc->pop;
    size_t npop = rc->npop;
    if (rc->pop_all) { /* lost track: every page of the mirror may hold something */
        all = (struct rpcool__rrange){rc->base, rc->base + rc->size};
        pop = &all;
        npop = 1;
        rc->pop_all = 0;
    }
    for (size_t i = 0; i < npop; i++) {
        uint64_t cur = pop[i].lo, hi = pop[i].hi;
        for (unsigned k = 0; k < nk && cur < hi; k++) {
            if (keep[k].hi <= cur) continue;
            if (keep[k].lo >= hi) break;
            if (keep[k].lo > cur) madvise((void *)(uintptr_t)cur, keep[k].lo - cur, MADV_DONTNEED);
            cur = keep[k].hi;
        }
        if (cur < hi) madvise((void *)(uintptr_t)cur, hi - cur, MADV_DONTNEED);
    }
    rc->npop = 0;
    pthread_mutex_unlock(&rc->blk_lock);
    pthread_mutex_unlock(&rc->pop_lock);
    for (unsigned k = 0; k < nl; k++) rpcool__r_pop_add(rc, live[k].lo, live[k].hi);
}

/* Make [a, a+len) of a mirror present (zero pages where missing): reply blocks, so writing them
   does not ask the client for pages whose old contents do not matter. */
static void rpcool__r_zero(struct rpcool__rsrv *rs, uint64_t a, uint64_t len)
{
    uint64_t pg = rpcool__page_size(), lo = a & ~(pg - 1), hi = (a + len + pg - 1) & ~(pg - 1);
    for (uint64_t p = lo; p < hi; p += pg) {
        struct uffdio_zeropage z;
        memset(&z, 0, sizeof z);
        z.range.start = p;
        z.range.len = pg;
        ioctl(rs->uffd, UFFDIO_ZEROPAGE, &z); /* EEXIST: already there */
    }
}

/* Reply blocks: a first-fit allocator over the reply region, private to the server. */
/* A block of the client's reply region for the call of reply group g (blk_lock held). */
static uint64_t rpcool__r_carve(struct rpcool__rconn *rc, uint64_t need, uint32_t g)
{
    uint64_t at = rc->rbase;
    size_t k = 0;
    for (; k < rc->nblk; k++) {
        if (rc->blk[k].addr - at >= need) break;
        at = rc->blk[k].addr + rc->blk[k].len;
    }
    if (at + need > rc->rbase + rc->rlen) return 0;
    if (rc->nblk == rc->capblk) {
        size_t nc = rc->capblk ? rc->capblk * 2 : 64;
        struct rpcool__rblk *nb = (struct rpcool__rblk *)rpcool__calloc(nc, sizeof *nb);
        if (!nb) return 0;
        if (rc->nblk) memcpy(nb, rc->blk, rc->nblk * sizeof *nb);
        rpcool__free(rc->blk);
        rc->blk = nb;
        rc->capblk = nc;
    }
    memmove(&rc->blk[k + 1], &rc->blk[k], (rc->nblk - k) * sizeof *rc->blk);
    rc->blk[k].addr = at;
    rc->blk[k].len = need;
    rc->blk[k].group = g;
    rc->blk[k].sent = 0;
    rc->nblk++;
    return at;
}

static void *rpcool__r_block_alloc(rpcool_server *s, struct rpcool__rconn *rc, size_t size,
                                   uint32_t g)
{
    if (!size) size = 1;
    if (size > rc->rlen) return NULL;
    uint64_t need = (size + 15) & ~(uint64_t)15;
    pthread_mutex_lock(&rc->blk_lock);
    uint64_t at = rpcool__r_carve(rc, need, g);
    pthread_mutex_unlock(&rc->blk_lock);
    if (!at) return NULL;
    rpcool__r_zero(s->rdma, at, need);
    uint64_t pg = rpcool__page_size();
    rpcool__r_pop_add(rc, at & ~(pg - 1), (at + need + pg - 1) & ~(pg - 1));
    return (void *)(uintptr_t)at;
}

/* Free the reply that holds address a (every block of its call). */
static void rpcool__r_free_block(struct rpcool__rconn *rc, uint64_t a)
{
    size_t k;
    pthread_mutex_lock(&rc->blk_lock);
    for (k = 0; k < rc->nblk; k++)
        if (rc->blk[k].addr == a) break;
    if (k < rc->nblk) { /* else not a reply block's start (or freed already): ignored */
        memmove(&rc->blk[k], &rc->blk[k + 1], (rc->nblk - k - 1) * sizeof *rc->blk);
        rc->nblk--;
    }
    pthread_mutex_unlock(&rc->blk_lock);
}

static void rpcool__r_free_group_id(struct rpcool__rconn *rc, uint32_t g)
{
    size_t w = 0;
    for (size_t j = 0; j < rc->nblk; j++)
        if (rc->blk[j].group != g) rc->blk[w++] = rc->blk[j];
    rc->nblk = w;
}

static int rpcool__r_in_mirror(const struct rpcool__rconn *rc, const void *p, size_t len)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    return rc->mirror && a >= rc->base && len <= rc->size && a - rc->base <= rc->size - len;
}

/* Read a byte of every page of [p, p+len): a page of the mirror that is missing faults here,
   before rpcool__r_send takes tx_lock (the fault thread's FETCH needs tx_lock too). */
static void rpcool__r_touch(const void *p, size_t len)
{
    uintptr_t pg = (uintptr_t)rpcool__page_size(), a = (uintptr_t)p, end = a + len;
    for (; a < end; a = (a & ~(pg - 1)) + pg) (void)*(const volatile char *)a;
}

/* Answer a call. */
static void rpcool__r_done(struct rpcool__rconn *rc, unsigned slot, uint32_t gen, int status,
                           void *ret, size_t ret_len, unsigned cflags, uint32_t g)
{
    if (cflags & RPCOOL__DISCARD) ret = NULL; /* the caller discards the reply */
    struct rpcool__rf h;
    memset(&h, 0, sizeof h);
    h.type = RPCOOL__RF_DONE;
    h.slot = (uint16_t)slot;
    h.gen = gen;
    struct rpcool__rpart *parts = NULL;
    uint64_t (*hd)[2] = NULL;
    unsigned np = 0, nb = 0;
    size_t total = 0;
    pthread_mutex_lock(&rc->blk_lock); /* a deferred reply may be given by another thread */
    for (size_t k = 0; k < rc->nblk; k++) nb += rc->blk[k].group == g;
    if (nb) {
        parts = (struct rpcool__rpart *)rpcool__calloc(2 * nb, sizeof *parts);
        hd = (uint64_t(*)[2])rpcool__calloc(nb, sizeof *hd);
        if (!parts || !hd) { status = -ENOMEM; nb = 0; }
    }
    for (size_t k = 0, j = 0; j < nb && k < rc->nblk; k++) {
        if (rc->blk[k].group != g) continue;
        hd[j][0] = rc->blk[k].addr;
        hd[j][1] = rc->blk[k].len;
        parts[np++] = (struct rpcool__rpart){hd[j], 16};
        parts[np++] = (struct rpcool__rpart){(const void *)(uintptr_t)rc->blk[k].addr,
                                             (size_t)rc->blk[k].len};
        total += 16 + rc->blk[k].len;
        j++;
    }
    if (total + sizeof h + 8 > RPCOOL__R_MAXFRAME) { /* the reply does not fit a frame */
        status = RPCOOL_E_TOOBIG;
        np = nb = 0;
    }
    if (status < 0 || !ret) { /* nobody will point at what the handler allocated */
        rpcool__r_free_group_id(rc, g);
        np = nb = 0; /* and none of it travels */
        ret = NULL;
        ret_len = 0;
    }
    h.status = status;
    /* taken once: a deferred reply given meanwhile by another thread may carry it instead */
    h.flags = rcp__exchange(&rc->lost, 0u) ? RPCOOL__R_DONE_LOST : 0u;
    pthread_mutex_unlock(&rc->blk_lock);
    h.a = (uint64_t)(uintptr_t)ret;
    h.b = ret ? ret_len : 0;
    h.n1 = np / 2;
    for (unsigned k = 1; k < np; k += 2) rpcool__r_touch(parts[k].p, parts[k].len);
    rpcool__r_send(rc, &h, parts, np, 0);
    if (nb) { /* its bytes are on their way: its pages may go at the next call */
        pthread_mutex_lock(&rc->blk_lock);
        for (size_t k = 0; k < rc->nblk; k++)
            if (rc->blk[k].group == g) rc->blk[k].sent = 1;
        pthread_mutex_unlock(&rc->blk_lock);
    }
    rpcool__free(parts);
    rpcool__free(hd);
}

/* Copy a call's extents into the mirror: UFFDIO_COPY places missing pages, present ones (sent
   by the last call too) are overwritten in place. */
static int rpcool__r_install(struct rpcool__rsrv *rs, struct rpcool__rconn *rc, uint64_t a,
                             uint64_t len, const char *src)
{
    uint64_t pg = rpcool__page_size();
    if ((a & (pg - 1)) || (len & (pg - 1)) || !rpcool__r_in_mirror(rc, (void *)(uintptr_t)a, len))
        return RPCOOL_E_BADPTR;
    uint64_t done = 0;
    while (done < len) {
        struct uffdio_copy cp;
        memset(&cp, 0, sizeof cp);
        cp.dst = a + done;
        cp.src = (uint64_t)(uintptr_t)(src + done);
        cp.len = len - done;
        if (ioctl(rs->uffd, UFFDIO_COPY, &cp) == 0) break;
        if (errno == EEXIST) { /* a page there already (overlap): write it in place */
            uint64_t got = cp.copy > 0 ? (uint64_t)cp.copy : 0;
            done += got;
            memcpy((void *)(uintptr_t)(a + done), src + done, pg);
            done += pg;
        } else if (errno == EAGAIN && cp.copy > 0) {
            done += (uint64_t)cp.copy;
        } else {
            return -errno;
        }
    }
    rpcool__r_pop_add(rc, a, a + len);
    return 0;
}

/* One entry of a CALL, as the server reads it: its range, its kind (0 whole, RPCOOL__R_KEEP,
   RPCOOL__R_PATCH), where its bytes are in the frame, and whether a kept range is ours. */
struct rpcool__rent {
    uint64_t a, l, kind;
    const char *src;
    int ok;
};

/* Read and check the n entries in [q, end) into e: lengths within the frame, ranges inside the
   mirror, whole and kept ranges page-aligned and ascending, a patch inside one page. */
static int rpcool__r_entries_parse(const struct rpcool__rconn *rc, const char *q, const char *end,
                                   uint32_t n, struct rpcool__rent *e)
{
    uint64_t pg = rpcool__page_size(), prev = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t a, l;
        const char *src = NULL;
        if (end - q < 16) return RPCOOL_E_PROTO;
        memcpy(&a, q, 8);
        memcpy(&l, q + 8, 8);
        q += 16;
        uint64_t kind = l & (RPCOOL__R_KEEP | RPCOOL__R_PATCH);
        l &= ~(RPCOOL__R_KEEP | RPCOOL__R_PATCH);
        if (kind == (RPCOOL__R_KEEP | RPCOOL__R_PATCH)) return RPCOOL_E_PROTO;
        if (kind != RPCOOL__R_KEEP) { /* bytes follow */
            if (l > (uint64_t)(end - q)) return RPCOOL_E_PROTO;
            src = q;
            q += l;
        }
        if (!l || !rpcool__r_in_mirror(rc, (void *)(uintptr_t)a, l)) return RPCOOL_E_BADPTR;
        if (kind == RPCOOL__R_PATCH) {
            if (l > pg || (a & ~(pg - 1)) != ((a + l - 1) & ~(pg - 1))) /* one page */
                return RPCOOL_E_PROTO;
        } else {
            if ((a & (pg - 1)) || (l & (pg - 1))) return RPCOOL_E_BADPTR;
            if (a < prev) return RPCOOL_E_PROTO; /* ranges ascend, apart */
            prev = a + l;
        }
        e[k] = (struct rpcool__rent){a, l, kind, src, 0};
    }
    return 0;
}

/* Where address a lies in the copy of the ranges r[0..n) (laid end to end): its offset, or -1
   when no range holds [a, a + l). */
static int64_t rpcool__r_copy_off(const struct rpcool__rrange *r, unsigned n, uint64_t a,
                                  uint64_t l)
{
    uint64_t off = 0;
    unsigned j = 0;
    while (j < n && r[j].hi <= a) off += r[j].hi - r[j].lo, j++;
    if (j < n && r[j].lo <= a && a + l <= r[j].hi) return (int64_t)(off + (a - r[j].lo));
    return -1;
}

/* Kept ranges are ours only if the last call installed them and nobody wrote them since (our
   copy says): mark those ok, and note that the others were lost. */
static void rpcool__r_keep_check(struct rpcool__rconn *rc, struct rpcool__rent *e, uint32_t n)
{
    if (rc->pop_all) rc->nheld = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (e[k].kind != RPCOOL__R_KEEP) continue;
        int64_t off = rpcool__r_copy_off(rc->held, rc->nheld, e[k].a, e[k].l);
        if (off >= 0 && !memcmp((const void *)(uintptr_t)e[k].a, rc->hbuf + off, (size_t)e[k].l))
            e[k].ok = 1;
        else
            rcp__store(&rc->lost, 1u);
    }
}

/* What the mirror holds after this call: the whole ranges and the kept ones that are ours, in
   keep (their bytes in *total). Returns how many. */
static unsigned rpcool__r_keep_list(const struct rpcool__rent *e, uint32_t n,
                                    struct rpcool__rrange *keep, uint64_t *total)
{
    unsigned nk = 0;
    *total = 0;
    for (uint32_t k = 0; k < n; k++)
        if (e[k].kind == 0 || (e[k].kind == RPCOOL__R_KEEP && e[k].ok)) {
            keep[nk++] = (struct rpcool__rrange){e[k].a, e[k].a + e[k].l};
            *total += e[k].l;
        }
    return nk;
}

/* The same ranges as we hold, all kept (a call repeated on the same structure): our copy
   stays, patched in place like the mirror, instead of being copied afresh. */
static int rpcool__r_keep_same(const struct rpcool__rconn *rc, const struct rpcool__rent *e,
                               uint32_t n, const struct rpcool__rrange *keep, unsigned nk)
{
    if (nk == 0 || nk != rc->nheld || rc->pop_all) return 0;
    for (uint32_t k = 0; k < n; k++)
        if (!(e[k].kind == RPCOOL__R_PATCH || (e[k].kind == RPCOOL__R_KEEP && e[k].ok)))
            return 0;
    for (unsigned k = 0; k < nk; k++)
        if (keep[k].lo != rc->held[k].lo || keep[k].hi != rc->held[k].hi) return 0;
    return 1;
}

/* Apply the patches, each inside a kept range, to the mirror (where the kept range is ours)
   and, when our copy stays (same), to our copy. */
static int rpcool__r_patches(struct rpcool__rconn *rc, const struct rpcool__rent *e, uint32_t n,
                             const struct rpcool__rrange *keep, unsigned nk, int same)
{
    for (uint32_t k = 0; k < n; k++) {
        if (e[k].kind != RPCOOL__R_PATCH) continue;
        uint32_t j = 0;
        while (j < n && !(e[j].kind == RPCOOL__R_KEEP && e[j].a <= e[k].a &&
                          e[k].a + e[k].l <= e[j].a + e[j].l))
            j++;
        if (j == n) return RPCOOL_E_PROTO;
        if (e[j].ok) memcpy((void *)(uintptr_t)e[k].a, e[k].src, (size_t)e[k].l);
        if (!same) continue;
        int64_t off = rpcool__r_copy_off(keep, nk, e[k].a, 1); /* the held range that holds it */
        if (off < 0) return RPCOOL_E_PROTO;
        memcpy(rc->hbuf + off, e[k].src, (size_t)e[k].l);
    }
    return 0;
}

/* What the mirror holds now (keep[0..nk), total bytes), copied, for the next call's kept
   ranges; without the memory for the copy, nothing is held (and the client is told). */
static void rpcool__r_held_copy(struct rpcool__rconn *rc, struct rpcool__rrange *keep,
                                unsigned nk, uint64_t total)
{
    if (rpcool__r_hbuf2_fit(rc, total)) {
        nk = 0;
        rcp__store(&rc->lost, 1u);
    }
    for (unsigned k = 0, off = 0; k < nk; off += (unsigned)(keep[k].hi - keep[k].lo), k++)
        memcpy(rc->hbuf2 + off, (const void *)(uintptr_t)keep[k].lo,
               (size_t)(keep[k].hi - keep[k].lo));
    rpcool__r_hbuf_swap(rc);
    memcpy(rc->held, keep, nk * sizeof *keep);
    rc->nheld = nk;
}

/* A CALL's entries [q, end) (n of them), checked, then placed in the mirror (see r_serve).
   Sets rc->lost when a kept page was not ours to keep (the client sends it whole next time). */
static int rpcool__r_entries(struct rpcool__rsrv *rs, struct rpcool__rconn *rc, const char *q,
                             const char *end, uint32_t n)
{
    struct rpcool__rent *e = NULL;
    struct rpcool__rrange keep[RPCOOL__R_MAXENT];
    uint64_t total;
    unsigned nk;
    int same, st = n > RPCOOL__R_MAXENT ? RPCOOL_E_PROTO : 0;
    if (!st) e = (struct rpcool__rent *)rpcool__calloc(n ? n : 1, sizeof *e);
    if (!st && !e) st = -ENOMEM;
    if (!st) st = rpcool__r_entries_parse(rc, q, end, n, e);
    if (st) goto fail;
    rpcool__r_keep_check(rc, e, n);
    nk = rpcool__r_keep_list(e, n, keep, &total);
    same = rpcool__r_keep_same(rc, e, n, keep, nk);
    rpcool__r_pop_trim(rc, keep, nk);
    rc->nheld = 0; /* from here on the mirror changes */
    for (uint32_t k = 0; k < n && !st; k++) {
        if (e[k].kind == 0) st = rpcool__r_install(rs, rc, e[k].a, e[k].l, e[k].src);
        else if (e[k].kind == RPCOOL__R_KEEP && e[k].ok)
            rpcool__r_pop_add(rc, e[k].a, e[k].a + e[k].l);
    }
    if (!st) st = rpcool__r_patches(rc, e, n, keep, nk, same);
    if (st) goto fail;
    if (same) {
        rc->nheld = nk;
        rc->same_calls++;
    } else {
        rpcool__r_held_copy(rc, keep, nk, total);
    }
    rpcool__free(e);
    return 0;
fail:
    rc->nheld = 0;
    rcp__store(&rc->lost, 1u);
    rpcool__free(e);
    return st;
}

/* 1 if the client cancelled this call (its cancel word names the call's generation). */
static int rpcool__r_cancelled(const rpcool_ctx *ctx)
{
    return rcp__load_relaxed(rpcool__r_cancel_word(rpcool__r_conn(ctx), ctx->slot)) ==
           RPCOOL__SL(ctx->gen, RPCOOL__SL_REQ);
}

/* rpcool_cancel of slot i: its cancel word goes to the server by an RDMA WRITE, after the call's
   frame on the same queue pair (so a call still queued there is never started). A failed post
   marks the peer dead, which ends the call as every other. */
static void rpcool__r_cancel(rpcool_conn *c, unsigned i)
{
    struct rpcool__rconn *rc = c->rdma;
    uint32_t *src = rpcool__r_cancel_word(rc, i);
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    pthread_mutex_lock(&rc->tx_lock);
    rcp__store(src, RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_REQ));
    rpcool__r_wr(rc, &wr, &sge, src, sizeof *src, IBV_WR_RDMA_WRITE,
                 rc->peer_area + RPCOOL__R_CANCEL_OFF + 8 * (uint64_t)i);
    rpcool__r_post_wr(rc, &wr);
    pthread_mutex_unlock(&rc->tx_lock);
}

/* What a CALL brings before its handler runs (under rx_lock): the reply blocks its client
   freed, then its entries, checked first; kept pages are checked against our copy of what the
   last call installed (a handler may have written them); then every page of an earlier call
   that this one neither keeps nor sends again is dropped (nothing is served stale), the whole
   pages are copied in and the patches applied. */
static int rpcool__r_call_in(struct rpcool__rsrv *rs, struct rpcool__rconn *rc,
                             const struct rpcool__rf *h)
{
    const char *q = (const char *)(h + 1), *end = (const char *)h + h->len - 8;
    if (h->n1 > (uint64_t)(end - q) / 8) {
        rc->nheld = 0;
        return RPCOOL_E_PROTO;
    }
    for (uint32_t k = 0; k < h->n1; k++, q += 8) {
        uint64_t a;
        memcpy(&a, q, 8);
        rpcool__r_free_block(rc, a);
    }
    return rpcool__r_entries(rs, rc, q, end, h->n2);
}

/* Serve the CALL frame h of rc (under rx_lock, which this releases once the frame is read):
   what it brings is installed in the mirror, then the one dispatch of every transport runs it
   (sealed by construction: what crossed the network cannot change under the handler). */
static void rpcool__r_serve(struct rpcool__worker *w, struct rpcool__rconn *rc,
                            struct rpcool__rf *h, int from_ring)
{
    rpcool_server *s = w->s;
    struct rpcool__incoming in;
    memset(&in, 0, sizeof in);
    in.fn = h->fn;
    in.flags = h->flags;
    in.arg = (void *)(uintptr_t)h->a;
    in.arg_len = (size_t)h->b;
    in.slot = h->slot;
    in.gen = h->gen;
    int status = rpcool__r_call_in(s->rdma, rc, h);
    if (from_ring) rpcool__r_consume(rc, h);
    pthread_mutex_unlock(&rc->rx_lock);
    rc->group++;
    rc->calls++;
    if (status) { /* a malformed frame: no call to dispatch */
        rc->bad++;
        rcp__fetch_add(&s->st.bad_entries, 1u);
        rpcool__r_done(rc, in.slot, in.gen, status, NULL, 0, 0, rc->group);
        return;
    }
    in.conn = rc;
    in.cookie = rc->group; /* the group of its reply blocks */
    in.budget = (size_t)rc->size;
    in.pkey = -1; /* the mirror has no key: a sandboxed handler sees no heap of another */
    in.logged = &rc->logged;
    in.pid = (uint32_t)rc->peer.pid;
    in.who = rc->peer.addr;
    rpcool__dispatch(w, rpcool__r_server_tp(), &in);
}

/* The mirror goes: unregistered from userfaultfd, unmapped. */
static void rpcool__r_unmirror(struct rpcool__rsrv *rs, struct rpcool__rconn *rc)
{
    if (!rc->mirror) return;
    struct uffdio_range ur = {rc->base, rc->size};
    ioctl(rs->uffd, UFFDIO_UNREGISTER, &ur);
    munmap((void *)(uintptr_t)rc->base, rc->size);
    rc->mirror = 0;
}

/* The client's hello came: check it, map the mirror, answer with ACCEPT. */
static void rpcool__r_hello_in(rpcool_server *s, struct rpcool__rconn *rc)
{
    struct rpcool__rsrv *rs = s->rdma;
    struct rpcool__rhello ch;
    int st = 0;
    pthread_mutex_lock(&rc->cq_lock);
    int n = rc->hello_in;
    memcpy(&ch, rpcool__r_hello(rc), sizeof ch);
    pthread_mutex_unlock(&rc->cq_lock);
    uint64_t pg = rpcool__page_size();
    ch.channel[sizeof ch.channel - 1] = '\0';
    if (n != (int)sizeof ch || ch.magic != RPCOOL__R_HELLO_MAGIC || ch.role != 2)
        st = RPCOOL_E_PROTO;
    else if (ch.version != RPCOOL__R_VERSION) st = RPCOOL_E_PROTO;
    else if (strcmp(ch.channel, s->name)) st = RPCOOL_E_NOCHANNEL;
    else if (!ch.heap_size || (ch.heap_base & (pg - 1)) || (ch.heap_size & (pg - 1)) ||
             ch.heap_base + ch.heap_size < ch.heap_base ||
             ch.heap_base + ch.heap_size > 0x800000000000ull || ch.reply_base < ch.heap_base ||
             ch.reply_len > ch.heap_size ||
             ch.reply_base - ch.heap_base > ch.heap_size - ch.reply_len || !ch.reply_len)
        st = RPCOOL_E_BADPTR;
    rc->peer_area = ch.area;
    rc->peer_rkey = ch.rkey;
    if (!st) { /* who it claims to be, and the server's hook */
        rpcool__r_peer_set(rc, &ch);
        st = rpcool__peer_hook(s, &rc->peer, &rc->cuser, &rc->hooked);
    }
    if (!st) {
        void *m = mmap((void *)(uintptr_t)ch.heap_base, ch.heap_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED || m != (void *)(uintptr_t)ch.heap_base) {
            if (m != MAP_FAILED) munmap(m, ch.heap_size);
            st = RPCOOL_E_ADDRINUSE;
            rpcool__log(&s->log, RPCOOL_LOG_WARN,
                        "%s: rdma client's heap [%#llx, +%#llx) clashes with a mapping here: "
                        "give each pod its own SHMHEAP_POD_ID",
                        s->name, (unsigned long long)ch.heap_base,
                        (unsigned long long)ch.heap_size);
        } else {
            madvise(m, ch.heap_size, MADV_DONTFORK);
            struct uffdio_register ur;
            memset(&ur, 0, sizeof ur);
            ur.range.start = ch.heap_base;
            ur.range.len = ch.heap_size;
            ur.mode = UFFDIO_REGISTER_MODE_MISSING;
            if (ioctl(rs->uffd, UFFDIO_REGISTER, &ur)) {
                st = -errno;
                munmap(m, ch.heap_size);
            } else {
                rc->base = ch.heap_base;
                rc->size = ch.heap_size;
                rc->rbase = ch.reply_base;
                rc->rlen = ch.reply_len;
                rc->mirror = 1;
            }
        }
    }
    struct rpcool__rf h;
    memset(&h, 0, sizeof h);
    h.type = RPCOOL__RF_ACCEPT;
    h.status = st;
    if (rpcool__r_send(rc, &h, NULL, 0, 0) && !st) st = RPCOOL_E_PEERDEAD;
    if (st) {
        rpcool__peer_left(s, &rc->hooked, &rc->peer, rc->cuser, st);
        rpcool__r_unmirror(rs, rc);
        rc->state = RPCOOL__RS_DEAD;
        rc->hello_deadline = rcp__now_ns() + 200000000u; /* let the answer leave */
        return;
    }
    rcp__store(&rc->peer_ok, 1);
    rc->state = RPCOOL__RS_ACTIVE;
    rcp__fetch_add(&s->st.accepted, 1u);
    if (s->log.fn) {
        char qt[96];
        rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: rdma client connected (heap at %#llx, %llu "
                    "bytes, %s)", s->name, (unsigned long long)rc->base,
                    (unsigned long long)rc->size, rpcool__r_qp_text(rc, qt, sizeof qt));
    }
}

/* A new krconn connection: send our hello, wait for the client's. */
static void rpcool__r_accept(rpcool_server *s, krconn *k)
{
    struct rpcool__rsrv *rs = s->rdma;
    struct rpcool__rconn *rc;
    int r;
    if ((r = rpcool__r_prep(rs->kc, &rc))) {
        krconn_disconnect(k);
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection dropped: its area: %s",
                    s->name, rpcool_strerror(r));
        return;
    }
    if ((r = rpcool__r_attach(rc, k))) {
        rpcool__r_conn_free(rc);
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection dropped: posting receives: %s",
                    s->name, rpcool_strerror(r));
        return;
    }
    struct rpcool__rhello sh;
    memset(&sh, 0, sizeof sh);
    if ((r = rpcool__r_send_hello(rc, &sh, 1, s->name))) {
        rpcool__r_conn_free(rc);
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection dropped: sending our hello: %s",
                    s->name, rpcool_strerror(r));
        return;
    }
    rc->state = RPCOOL__RS_HELLO;
    rc->check_ns = (uint64_t)s->reap_ms * 1000000u;
    rc->hello_deadline = rcp__now_ns() + (uint64_t)RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS * 1000000u;
    pthread_mutex_lock(&rs->lock);
    rc->next = rs->conns;
    rs->conns = rc;
    pthread_mutex_unlock(&rs->lock);
}

/* A connection waiting for its client's hello: take it in (1), or drop the connection once
   its deadline passed or it failed, saying why (0). */
static int rpcool__r_step_hello(rpcool_server *s, struct rpcool__rconn *rc, uint64_t now)
{
    if (rc->hello_in) {
        rpcool__r_hello_in(s, rc);
        return 1;
    }
    if (now < rc->hello_deadline && !rcp__load(&rc->dead)) return 0;
    /* a client that never learns of this waits out its connect timeout: say why */
    char qt[96];
    if (rc->wc_fail)
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection (%s) dropped before "
                    "the client's hello: a work request failed (%s)%s", s->name,
                    rpcool__r_qp_text(rc, qt, sizeof qt),
                    ibv_wc_status_str((enum ibv_wc_status)(rc->wc_fail - 1)),
                    rc->wc_fail - 1 == IBV_WC_RNR_RETRY_EXC_ERR
                        ? ": our hello found no receive posted at the client in time"
                        : "");
    else if (rcp__load(&rc->dead))
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection dropped before the "
                    "client's hello: %s", s->name, rpcool_strerror((int)rcp__load(&rc->dead)));
    else
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: rdma connection dropped: no hello "
                    "from the client in %u ms", s->name,
                    (unsigned)RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS);
    rc->state = RPCOOL__RS_DEAD;
    rc->failed = 1; /* its QP goes to nobody else (rpcool__r_conn_free) */
    rc->hello_deadline = now;
    return 0;
}

/* A FREE or BYE frame at the server (under rx_lock): FREE frees the reply blocks it names, BYE
   marks the connection closed. Returns 1 for a frame of another type (untouched). */
static int rpcool__r_srv_control(struct rpcool__rconn *rc, const struct rpcool__rf *h)
{
    if (h->type == RPCOOL__RF_FREE) {
        const uint64_t *f = (const uint64_t *)(h + 1);
        if (h->n1 <= (h->len - sizeof *h - 8) / 8)
            for (uint32_t k = 0; k < h->n1; k++) rpcool__r_free_block(rc, f[k]);
        return 0;
    }
    if (h->type != RPCOOL__RF_BYE) return 1;
    rcp__store(&rc->dead, (int32_t)RPCOOL_E_CLOSED);
    return 0;
}

/* Serve what came on an active connection: the CALLs the fault thread set aside first, then
   the ring's frames. Returns how many frames were handled. */
static int rpcool__r_step_frames(struct rpcool__worker *w, struct rpcool__rconn *rc)
{
    int n = 0;
    while (!rcp__load(&rc->dead)) {
        pthread_mutex_lock(&rc->rx_lock);
        struct rpcool__rframe *bf = rc->backlog;
        if (bf) {
            rc->backlog = bf->next;
            if (!rc->backlog) rc->backlog_tail = &rc->backlog;
            rpcool__r_serve(w, rc, (struct rpcool__rf *)bf->data, 0); /* unlocks */
            rpcool__free(bf);
            n++;
            continue;
        }
        struct rpcool__rf *h = rpcool__r_next(rc);
        if (!h) {
            pthread_mutex_unlock(&rc->rx_lock);
            break;
        }
        n++;
        if (h->type == RPCOOL__RF_CALL) {
            rpcool__r_serve(w, rc, h, 1); /* unlocks */
            continue;
        }
        if (rpcool__r_srv_control(rc, h) && h->type != RPCOOL__RF_PAGES) {
            rc->bad++; /* (PAGES: a late answer to a fetch that gave up) */
            rcp__fetch_add(&w->s->st.bad_entries, 1u);
            rcp__store(&rc->dead, (int32_t)RPCOOL_E_PROTO);
        }
        rpcool__r_consume(rc, h);
        pthread_mutex_unlock(&rc->rx_lock);
    }
    return n;
}

/* One pass over connection rc: its completions, its hello or its frames, a keepalive when it
   has been silent for reap_ms. Returns how much was done (0: idle). */
static int rpcool__r_step(struct rpcool__worker *w, struct rpcool__rconn *rc, uint64_t now)
{
    rpcool_server *s = w->s;
    int n = rpcool__r_cq(rc);
    if (rc->state == RPCOOL__RS_HELLO) return rpcool__r_step_hello(s, rc, now) ? 1 : n;
    if (rc->state != RPCOOL__RS_ACTIVE) return n;
    n += rpcool__r_step_frames(w, rc);
    if (!rcp__load(&rc->dead) && now - rcp__load_relaxed(&rc->last_rx) >=
                                     (uint64_t)s->reap_ms * 1000000u &&
        now - rc->last_ping >= (uint64_t)s->reap_ms * 1000000u) {
        rc->last_ping = now;
        rpcool__r_ping(rc);
    }
    return n;
}

/* Drop the dead connections (their mirrors and registrations go). */
static void rpcool__r_reap(rpcool_server *s, uint64_t now, int all)
{
    struct rpcool__rsrv *rs = s->rdma;
    uint64_t bye_until = now + (uint64_t)RPCOOL__R_BYE_MS * 1000000u; /* one bound for all */
    for (struct rpcool__rconn **pp = &rs->conns; *pp;) {
        struct rpcool__rconn *rc = *pp;
        int32_t why = rcp__load(&rc->dead);
        int go = all || (rc->state == RPCOOL__RS_ACTIVE && why) ||
                 (rc->state == RPCOOL__RS_DEAD && now >= rc->hello_deadline);
        if (go && !all && rcp__load(&rc->ndeferred)) go = 0; /* its deferred calls use it */
        if (!go) {
            if (rc->state == RPCOOL__RS_DEAD && rc->hello_deadline > now + 1000000000ull)
                rc->hello_deadline = now;
            pp = &rc->next;
            continue;
        }
        pthread_mutex_lock(&rs->lock);
        *pp = rc->next;
        pthread_mutex_unlock(&rs->lock);
        if (rc->state == RPCOOL__RS_ACTIVE) {
            if (why == RPCOOL_E_PROTO) rcp__fetch_add(&s->st.bad_entries, 1u); /* malformed */
            if (why == RPCOOL_E_CLOSED) rcp__fetch_add(&s->st.closed, 1u);
            else if (!all) rcp__fetch_add(&s->st.reaped, 1u);
            rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: rdma client at %#llx %s (the thread slept "
                        "%llu times so far; this CQ armed %llu times, %llu completion events)",
                        s->name, (unsigned long long)rc->base,
                        why == RPCOOL_E_CLOSED ? "disconnected" : "gone: reclaimed",
                        (unsigned long long)rs->sleeps, (unsigned long long)rc->arms,
                        (unsigned long long)rc->events);
            if (rc->calls)
                rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: rdma connection: %llu calls served, "
                            "%llu kept the copy in place; the thread's "
                            "recent gaps polling %.1f us, sleeping at once %.1f us%s", s->name,
                            (unsigned long long)rc->calls, (unsigned long long)rc->same_calls,
                            rs->gap_poll / 1e3, rs->gap_sleep / 1e3,
                            rs->adapt ? "" : " (not adapting)");
        }
        if (all && rc->state == RPCOOL__RS_ACTIVE && !why)
            rpcool__r_bye(rc, bye_until); /* the server closes: tell the client */
        /* a fault thread fetching for it holds rx_lock: wait for it */
        pthread_mutex_lock(&rc->rx_lock);
        pthread_mutex_unlock(&rc->rx_lock);
        rpcool__peer_left(s, &rc->hooked, &rc->peer, rc->cuser,
                          all && !why                ? RPCOOL_E_CLOSED
                          : why == RPCOOL_E_CLOSED   ? 0 /* its BYE */
                          : why == RPCOOL_E_PROTO    ? RPCOOL_E_DROPPED
                                                     : RPCOOL_E_PEERDEAD);
        rpcool__r_unmirror(rs, rc);
        rpcool__r_conn_free(rc);
    }
}

/* One round of the serving thread: the connections waiting at krconn accepted, then (at *now)
   one pass over every connection (rpcool__r_step), the dead ones reaped. Returns how much was
   done. */
static int rpcool__r_round(struct rpcool__worker *w, uint64_t *now)
{
    rpcool_server *s = w->s;
    struct rpcool__rsrv *rs = s->rdma;
    int n = 0;
    krconn *k;
    while (krconn_accept(rs->kc, -1, &k) == 0) {
        rpcool__r_accept(s, k);
        n++;
    }
    *now = rcp__now_ns();
    for (struct rpcool__rconn *rc = rs->conns; rc; rc = rc->next) n += rpcool__r_step(w, rc, *now);
    rpcool__r_reap(s, *now, 0);
    return n;
}

/* The idle gap that work ended: how long to poll next time (a gap too long to poll through, a
   keepalive's, forgets the rest), and, adapting, the recent gaps of this gap's way. */
static void rpcool__r_gap_note(struct rpcool__rsrv *rs, uint64_t gap, int idle_sleep)
{
    if (4 * gap >= RPCOOL__R_SPIN_MAX_NS) rs->gap_ns = 0;
    else rs->gap_ns = rs->gap_ns ? (7 * rs->gap_ns + gap) / 8 : gap;
    if (rs->adapt && 4 * gap < RPCOOL__R_SPIN_MAX_NS)
        rpcool__r_avg(idle_sleep ? &rs->gap_sleep : &rs->gap_poll, gap);
}

/* Idle: arm every CQ, look once more, sleep on all the channels and the accept fd (accfd, or
   -1) for up to reap_ms, then take the events. */
static void rpcool__r_idle_sleep(rpcool_server *s, int accfd)
{
    struct rpcool__rsrv *rs = s->rdma;
    struct pollfd pf[258];
    unsigned np = 0;
    int timeout = (int)s->reap_ms;
    if (rs->stop_ev >= 0) pf[np++] = (struct pollfd){rs->stop_ev, POLLIN, 0};
    if (accfd >= 0) pf[np++] = (struct pollfd){accfd, POLLIN, 0};
    else timeout = 1; /* no accept fd: look for connections often */
    for (struct rpcool__rconn *rc = rs->conns; rc; rc = rc->next) {
#ifdef KRCONN_CTX_EVENTS
        if (rc->evfd >= 0 && np < 258 && !krconn_arm(rc->k)) {
            rc->arms++;
            pf[np++] = (struct pollfd){rc->evfd, POLLIN, 0};
            continue;
        }
#endif
        timeout = 1; /* no channel: poll it again soon */
    }
    for (struct rpcool__rconn *rc = rs->conns; rc; rc = rc->next)
        if (rpcool__r_cq(rc) || rc->rxq_n) timeout = 0; /* came before the arm took */
    if (timeout && !rcp__load(&rs->stop)) {
        rs->sleeps++;
        poll(pf, np, timeout);
    }
    if (accfd >= 0) {
        uint64_t v;
        if (read(accfd, &v, sizeof v) < 0) { /* nothing queued */ }
    }
#ifdef KRCONN_CTX_EVENTS
    for (struct rpcool__rconn *rc = rs->conns; rc; rc = rc->next) {
        int ev = rc->evfd >= 0 ? krconn_event_ack(rc->k) : 0;
        if (ev > 0) rc->events += (unsigned)ev;
    }
#endif
}

/* The serving thread of RDMA connections: rounds while there is work; idle, it polls while
   its spin lasts (rpcool__r_spin of the recent gaps, none when an adapting thread sleeps at
   once), then sleeps (rpcool__r_idle_sleep). */
static void *rpcool__r_thread(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    struct rpcool__rsrv *rs = s->rdma;
    struct rpcool__worker w;
    rpcool__worker_join(s, &w); /* held to time limits, counted, waited for by close */
    rpcool__pkeys(s, -1, 1);
    pthread_setname_np(pthread_self(), "rpcool-rdma");
    uint64_t idle_since = 0;
    int idle_sleep = 0; /* this idle gap's way: sleep at once */
    int accfd = krconn_accept_fd(rs->kc);
    while (!rcp__load(&rs->stop)) {
        uint64_t now;
        if (rpcool__r_round(&w, &now)) {
            if (idle_since) rpcool__r_gap_note(rs, now - idle_since, idle_sleep);
            idle_since = 0;
            continue;
        }
        if (!idle_since) {
            idle_since = now;
            if (rs->adapt)
                idle_sleep = rpcool__r_sleep_first(rs->gap_poll, rs->gap_sleep, rs->idles++);
        }
        uint64_t spin = idle_sleep ? 0 : rpcool__r_spin(rs->spin_ns, rs->gap_ns);
        if (now - idle_since < spin) rcp__cpu_relax();
        else rpcool__r_idle_sleep(s, accfd); /* idle_since stays: the next gap counts it */
    }
    rpcool__worker_leave(&w);
    return NULL;
}

/* The fault thread: a handler touched a mirror page that did not come with the call; ask the
   client for it and place it. */
/* A frame that reached the fault thread while it waited for a page: a CALL is set aside for
   the serving thread (rc->backlog), FREE and BYE are handled at once (under rx_lock). */
static void rpcool__r_aside(struct rpcool__rconn *rc, const struct rpcool__rf *f)
{
    if (f->type != RPCOOL__RF_CALL) {
        rpcool__r_srv_control(rc, f);
        return;
    }
    struct rpcool__rframe *bf = (struct rpcool__rframe *)rpcool__calloc(1, sizeof *bf + f->len);
    if (!bf) {
        rcp__store(&rc->dead, (int32_t)-ENOMEM);
        return;
    }
    bf->len = f->len;
    memcpy(bf->data, f, f->len);
    *rc->backlog_tail = bf;
    rc->backlog_tail = &bf->next;
}

/* Place a fetched page a of rc's mirror, if it is still missing. One made present meanwhile by
   the serving thread (a call's pages copied in, a reply block's zero page, its handler's bytes
   on it) is newer than what the client sent when asked: it stays, never overwritten (the
   faulting thread, woken, reads it). Returns 0, or an error. */
static int rpcool__r_fill(struct rpcool__rsrv *rs, struct rpcool__rconn *rc, uint64_t a,
                          const char *src)
{
    uint64_t pg = rpcool__page_size();
    if ((a & (pg - 1)) || !rpcool__r_in_mirror(rc, (void *)(uintptr_t)a, pg))
        return RPCOOL_E_BADPTR;
    struct uffdio_copy cp;
    memset(&cp, 0, sizeof cp);
    cp.dst = a;
    cp.src = (uint64_t)(uintptr_t)src;
    cp.len = pg;
    if (ioctl(rs->uffd, UFFDIO_COPY, &cp) && errno != EEXIST) return -errno;
    if (cp.copy < 0) { /* there already: wake the faulting thread, if that ioctl did not */
        struct uffdio_range wr = {a, pg};
        ioctl(rs->uffd, UFFDIO_WAKE, &wr);
    }
    rpcool__r_pop_add(rc, a, a + pg);
    return 0;
}

/* Fetch page a of rc's mirror from its client (under rx_lock): a FETCH frame, then the frames
   that come until its PAGES answer, up to RPCOOL__R_FETCH_MS. Returns 1 if the page is in. */
static int rpcool__r_fetch(struct rpcool__rsrv *rs, struct rpcool__rconn *rc, uint64_t a)
{
    uint64_t pg = rpcool__page_size();
    struct rpcool__rf h;
    memset(&h, 0, sizeof h);
    h.type = RPCOOL__RF_FETCH;
    h.id = ++rc->fetch_id;
    h.a = a;
    h.b = pg;
    uint64_t deadline = rcp__now_ns() + (uint64_t)RPCOOL__R_FETCH_MS * 1000000u;
    if (rpcool__r_send(rc, &h, NULL, 0, deadline)) return 0;
    while (rcp__now_ns() < deadline && !rcp__load(&rc->dead)) {
        struct rpcool__rf *f = rpcool__r_next(rc);
        if (!f) {
            rpcool__r_sleep(rc, 1000000u);
            continue;
        }
        if (f->type == RPCOOL__RF_PAGES && f->id == rc->fetch_id) {
            int ok = 0;
            if (f->status == 0 && f->a == a && f->b == pg && f->len >= sizeof *f + pg + 8)
                ok = !rpcool__r_fill(rs, rc, a, (const char *)(f + 1));
            rpcool__r_consume(rc, f);
            return ok;
        }
        if (f->type == RPCOOL__RF_CALL || f->type == RPCOOL__RF_FREE ||
            f->type == RPCOOL__RF_BYE)
            rpcool__r_aside(rc, f);
        rpcool__r_consume(rc, f);
    }
    return 0;
}

/* The mirror's page faults: the page is fetched from the connection's client; if it cannot
   be, the connection is dropped and a zero page unblocks the faulting thread (its call's
   answer goes nowhere). */
static void *rpcool__r_fault_thread(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    struct rpcool__rsrv *rs = s->rdma;
    uint64_t pg = rpcool__page_size();
    pthread_setname_np(pthread_self(), "rpcool-fault");
    while (!rcp__load(&rs->closing)) {
        struct pollfd pf = {rs->uffd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        struct uffd_msg msg;
        if (read(rs->uffd, &msg, sizeof msg) != (ssize_t)sizeof msg) continue;
        if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
        uint64_t a = msg.arg.pagefault.address & ~(pg - 1);
        int ok = 0;
        pthread_mutex_lock(&rs->lock);
        struct rpcool__rconn *rc = rs->conns;
        while (rc && !(rc->mirror && a >= rc->base && a - rc->base < rc->size)) rc = rc->next;
        if (rc) pthread_mutex_lock(&rc->rx_lock); /* the reaper waits for it */
        pthread_mutex_unlock(&rs->lock);
        if (rc && !rcp__load(&rc->dead) && !(ok = rpcool__r_fetch(rs, rc, a))) {
            rpcool__log(&s->log, RPCOOL_LOG_WARN,
                        "%s: could not fetch page %#llx from its rdma client: dropping it",
                        s->name, (unsigned long long)a);
            if (!rcp__load(&rc->dead)) rcp__store(&rc->dead, (int32_t)RPCOOL_E_PEERDEAD);
        }
        if (rc) pthread_mutex_unlock(&rc->rx_lock);
        if (!ok) { /* unblock the faulting thread: its call's answer goes nowhere */
            struct uffdio_zeropage z;
            memset(&z, 0, sizeof z);
            z.range.start = a;
            z.range.len = pg;
            ioctl(rs->uffd, UFFDIO_ZEROPAGE, &z);
        }
    }
    return NULL;
}

/* Where a server or an export publishes: "serve"[:PORT] runs krconn's meta server in this
   process (*meta: its context), or uses the one already serving that port on this host (the
   port is in use: another rpcool server's or export's "serve"; it must stay up while this one
   is); *w = "127.0.0.1:PORT" in where. Any other string is where itself (*w = how). */
static int rpcool__r_meta(const char *how, const char *device, krconn_ctx **meta, char *where,
                          size_t n, const char **w)
{
    krconn_meta_opts mo;
    krconn_ctx_opts mko;
    *w = how;
    if (strncmp(how, "serve", 5) || (how[5] != '\0' && how[5] != ':')) return 0;
    memset(&mo, 0, sizeof mo);
    memset(&mko, 0, sizeof mko);
    mko.device = device;
    if (how[5] == ':') mo.port = (uint16_t)atoi(how + 6);
    int r = rpcool__r_err(krconn_ctx_create(&mko, meta));
    if (r) return r;
    if ((r = krconn_meta_serve(*meta, &mo))) { /* served here already, or failed */
        krconn_ctx_destroy(*meta);
        *meta = NULL;
        if (r != -EADDRINUSE) return rpcool__r_err(r);
    }
    snprintf(where, n, "127.0.0.1:%u",
             mo.port ? (unsigned)mo.port : (unsigned)KRCONN_DEFAULT_META_PORT);
    *w = where;
    return 0;
}

/* rpcool_server_opts.rdma: "serve[:PORT]" runs krconn's meta server here and publishes there;
   "HOST[:PORT]" publishes at that meta server; "" at $KRCONN_META. */
static int rpcool__r_open(rpcool_server *s, const char *how, const char *device,
                          uint64_t spin_ns)
{
    struct rpcool__rsrv *rs = (struct rpcool__rsrv *)rpcool__calloc(1, sizeof *rs);
    int r;
    char svc[RPCOOL__NAME_MAX + 16], where[128];
    const char *w = how;
    if (!rs) return -ENOMEM;
    rs->uffd = -1;
    rs->stop_ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    rs->spin_ns = spin_ns ? spin_ns : RPCOOL_DEFAULT_RDMA_SPIN_NS;
    rs->adapt = !spin_ns;
    pthread_mutex_init(&rs->lock, NULL);
    snprintf(rs->name, sizeof rs->name, "%s", s->name);
    rcp__store(&s->rdma, rs); /* the acceptor may look (rpcool__r_conns) */
    rs->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (rs->uffd < 0) rs->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (rs->uffd < 0) {
        r = -errno;
        rpcool__log(&s->log, RPCOOL_LOG_ERROR,
                    "%s: userfaultfd: %s (needs Linux 5.11+, or vm.unprivileged_userfaultfd=1)",
                    s->name, strerror(errno));
        goto fail;
    }
    struct uffdio_api api;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    if (ioctl(rs->uffd, UFFDIO_API, &api)) { r = -errno; goto fail; }
    krconn_ctx_opts ko;
    rpcool__r_ctx_opts(&ko, device, 64);
    if ((r = rpcool__r_err(krconn_ctx_create(&ko, &rs->kc)))) goto fail;
    if ((r = rpcool__r_meta(how, device, &rs->meta, where, sizeof where, &w))) goto fail;
    if ((r = rpcool__r_err(krconn_dir_meta(rs->kc, *w ? w : NULL, 5000, &rs->dir)))) goto fail;
    snprintf(svc, sizeof svc, "rpcool.%s", s->name);
    if ((r = rpcool__r_err(krconn_publish(rs->kc, rs->dir, svc, 5000)))) goto fail;
    if ((r = pthread_create(&rs->fthr, NULL, rpcool__r_fault_thread, s))) { r = -r; goto fail; }
    rs->fthr_started = 1;
    return 0;
fail:
    rpcool__log(&s->log, RPCOOL_LOG_ERROR, "%s: rdma transport: %s", s->name, rpcool_strerror(r));
    return r;
}

/* Start serving RDMA connections (with the server's first serving thread). */
static int rpcool__r_start(rpcool_server *s)
{
    struct rpcool__rsrv *rs = s->rdma;
    int r = 0;
    pthread_mutex_lock(&rs->lock);
    if (rs->thr_started && rcp__load(&rs->stop)) { /* stopped earlier: start it again */
        pthread_join(rs->thr, NULL);
        rs->thr_started = 0;
    }
    if (!rs->thr_started) {
        uint64_t v;
        rcp__store(&rs->stop, 0);
        if (rs->stop_ev >= 0 && read(rs->stop_ev, &v, sizeof v) < 0) { /* none pending */ }
        r = pthread_create(&rs->thr, NULL, rpcool__r_thread, s);
        if (!r) rs->thr_started = 1;
    }
    pthread_mutex_unlock(&rs->lock);
    return -r;
}

/* The serving thread leaves at once, even from its idle sleep (rpcool_server_close waits for
   it as for every serving thread). */
static void rpcool__r_stop(rpcool_server *s)
{
    struct rpcool__rsrv *rs = s->rdma;
    uint64_t one = 1;
    if (!rs) return;
    rcp__store(&rs->stop, 1);
    if (rs->stop_ev >= 0 && write(rs->stop_ev, &one, sizeof one) < 0) { /* already signalled */ }
}

static void rpcool__r_close(rpcool_server *s)
{
    struct rpcool__rsrv *rs = s->rdma;
    if (!rs) return;
    rcp__store(&rs->stop, 1);
    rcp__store(&rs->closing, 1);
    if (rs->thr_started) pthread_join(rs->thr, NULL);
    if (rs->fthr_started) pthread_join(rs->fthr, NULL);
    rpcool__r_reap(s, rcp__now_ns(), 1);
    if (rs->dir) krconn_dir_close(rs->dir);
    if (rs->kc) krconn_ctx_destroy(rs->kc);
    if (rs->meta) krconn_ctx_destroy(rs->meta);
    if (rs->uffd >= 0) close(rs->uffd);
    if (rs->stop_ev >= 0) close(rs->stop_ev);
    pthread_mutex_destroy(&rs->lock);
    rpcool__free(rs);
    s->rdma = NULL;
}

/* >>r-tables - the RDMA transport's tables (the seam: rpcool.h's struct rpcool__client_tp) ----- */

static void *rpcool__r_alloc(rpcool_ctx *ctx, size_t size)
{
    return rpcool__r_block_alloc(ctx->s, rpcool__r_conn(ctx), size, (uint32_t)ctx->cookie);
}
static int rpcool__r_in_range(const rpcool_ctx *ctx, const void *p, size_t len)
{
    return rpcool__r_in_mirror(rpcool__r_conn(ctx), p, len);
}
static shmheap *rpcool__r_heap(rpcool_ctx *ctx) { (void)ctx; return NULL; } /* a mirror */
static const rpcool_peer *rpcool__r_peer(const rpcool_ctx *ctx)
{
    return &rpcool__r_conn(ctx)->peer;
}
static void *rpcool__r_conn_user(const rpcool_ctx *ctx) { return rpcool__r_conn(ctx)->cuser; }
/* The mirror is private memory of ours: a fault in it is no sign of a broken client, but the
   caller's memory cannot be served as it should: the connection ends as after a bad frame. */
static void rpcool__r_drop(rpcool_ctx *ctx, const char *why)
{
    struct rpcool__rconn *rc = rpcool__r_conn(ctx);
    int32_t none = 0;
    if (rcp__cas(&rc->dead, &none, (int32_t)RPCOOL_E_PROTO))
        rpcool__log(&ctx->s->log, RPCOOL_LOG_WARN, "%s: RDMA client pid %d (%s): %s: dropping "
                    "the connection", ctx->s->name, (int)rc->peer.pid, rc->peer.addr, why);
}
static int rpcool__r_hold(rpcool_ctx *ctx, int delta)
{
    rcp__fetch_add(&rpcool__r_conn(ctx)->ndeferred, (uint32_t)delta);
    return 0;
}
/* An answer: a DONE frame with the blocks of the call's group inline, from the serving thread
   or (deferred) any other; a connection gone meanwhile answers nobody. */
static int rpcool__r_reply(rpcool_ctx *ctx, int status, void *p, size_t len)
{
    struct rpcool__rconn *rc = rpcool__r_conn(ctx);
    if (!rcp__load(&rc->dead))
        rpcool__r_done(rc, ctx->slot, ctx->gen, status, p, p ? len : 0, ctx->wflags,
                       (uint32_t)ctx->cookie);
    return 0;
}

static const struct rpcool__client_tp rpcool__r_client = {
    .name = "rdma", .flags = RPCOOL__TP_COPIES, .connect = rpcool__r_connect,
    .post = rpcool__r_post, .wait = rpcool__r_wait, .poll = rpcool__r_poll,
    .gone = rpcool__r_gone, .drop_reply = rpcool__r_drop_reply, .free = rpcool__r_free,
    .disconnect = rpcool__r_disconnect, .cancel = rpcool__r_cancel};
static const struct rpcool__server_tp rpcool__r_server = {
    .name = "rdma", .flags = RPCOOL__TP_COPIES, .open = rpcool__r_open, .start = rpcool__r_start,
    .stop = rpcool__r_stop, .close = rpcool__r_close, .conns = rpcool__r_conns,
    .alloc = rpcool__r_alloc, .in_range = rpcool__r_in_range, .heap = rpcool__r_heap,
    .peer = rpcool__r_peer, .conn_user = rpcool__r_conn_user, .cancelled = rpcool__r_cancelled,
    .drop = rpcool__r_drop, .hold = rpcool__r_hold, .reply = rpcool__r_reply};
static const struct rpcool__client_tp *rpcool__r_client_tp(void) { return &rpcool__r_client; }
static const struct rpcool__server_tp *rpcool__r_server_tp(void) { return &rpcool__r_server; }

#endif /* RPCOOL_RDMA_IMPL_H */
