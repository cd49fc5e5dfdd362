/* tests/vm/nppt.h - helpers of nppin's VM-tier tests and benchmark: one side of an nppin
 * connection (a data RC QP and a control RC QP on one device, endpoints swapped over a socket,
 * an nppin context and a peer on the control QP), resident memory, and a command channel over
 * the socket that keeps the peer progressing while it waits. */
#ifndef NPPT_H
#define NPPT_H
#define NPPIN_IMPLEMENTATION
#include "../../nppin.h"
#include "vmt.h"
#include <sys/wait.h>

typedef struct nppt_side {
    rcp__verbs_dev d;
    struct ibv_cq *dcq, *ccq;
    struct ibv_qp *dqp, *cqp;
    rcp__verbs_ep me[2], peer[2];
    nppin_ctx *np;
    nppin_chan ch;
    nppin_peer *peer_np;
} nppt_side;

static inline void nppt_side_free(nppt_side *s)
{
    if (s->peer_np) nppin_peer_destroy(s->peer_np);
    if (s->np) nppin_destroy(s->np);
    rcp__verbs_qp_destroy(s->dqp);
    rcp__verbs_qp_destroy(s->cqp);
    if (s->ch.user) nppin_chan_verbs_destroy(&s->ch);
    rcp__verbs_cq_destroy(s->dcq);
    rcp__verbs_cq_destroy(s->ccq);
    rcp__verbs_close(&s->d);
    memset(s, 0, sizeof *s);
}

/* Connect both QPs to the peer on the other end of fd and make the nppin context and peer. */
static inline int nppt_side_setup(int fd, const nppin_opts *o, nppt_side *s, const char **step)
{
    memset(s, 0, sizeof *s);
    rcp__verbs_qp_opts qo;
    memset(&qo, 0, sizeof qo);
    qo.max_send_wr = 512;
    qo.max_recv_wr = 64;
    qo.max_sge = 4;
    int rc;
    unsigned char out[2 * VMT_EP_WIRE], in[2 * VMT_EP_WIRE];
    if ((rc = rcp__verbs_open(NULL, &s->d))) { *step = "open"; goto fail; }
    if ((rc = rcp__verbs_cq_create(&s->d, 1024, 0, &s->dcq))) { *step = "data cq"; goto fail; }
    if ((rc = rcp__verbs_cq_create(&s->d, 256, 0, &s->ccq))) { *step = "control cq"; goto fail; }
    if ((rc = rcp__verbs_qp_create(&s->d, s->dcq, s->dcq, &qo, &s->dqp))) { *step = "data qp"; goto fail; }
    if ((rc = rcp__verbs_qp_create(&s->d, s->ccq, s->ccq, &qo, &s->cqp))) { *step = "control qp"; goto fail; }
    vmt_ep_local(&s->d, s->dqp, 0, 0, &s->me[0]);
    vmt_ep_local(&s->d, s->cqp, 0, 0, &s->me[1]);
    vmt_ep_pack(&s->me[0], out);
    vmt_ep_pack(&s->me[1], out + VMT_EP_WIRE);
    if ((rc = vmt_write_all(fd, out, sizeof out))) { *step = "send endpoints"; goto fail; }
    if ((rc = vmt_read_all(fd, in, sizeof in, 60000))) { *step = "receive endpoints"; goto fail; }
    if ((rc = vmt_ep_unpack(in, &s->peer[0])) ||
        (rc = vmt_ep_unpack(in + VMT_EP_WIRE, &s->peer[1]))) { *step = "unpack"; goto fail; }
    /* an ACK timeout of 0.54 s (7 tries: about 4 s): two guests on a loaded host can go half a
       second without running, which the default (67 ms, about 0.5 s in all) takes for a dead
       peer */
    rcp__verbs_qp_opts dq_opts = qo;
    dq_opts.timeout = 17;
    if ((rc = vmt_rc_connect(&s->d, s->dqp, &s->me[0], &s->peer[0], &dq_opts))) {
        *step = "connect data";
        goto fail;
    }
    /* the control QP retries RNR forever: a burst of revocations may run ahead of the peer's
       receive buffers (nppin.h, section 5) */
    rcp__verbs_qp_opts cq_opts = dq_opts;
    cq_opts.rnr_retry = 7;
    if ((rc = vmt_rc_connect(&s->d, s->cqp, &s->me[1], &s->peer[1], &cq_opts))) {
        *step = "connect control";
        goto fail;
    }
    if ((rc = nppin_create(s->d.pd, o, &s->np))) { *step = "nppin_create"; goto fail; }
    if ((rc = nppin_chan_verbs_create(s->d.pd, s->cqp, s->ccq, &s->ch))) { *step = "nppin_chan_verbs_create"; goto fail; }
    if ((rc = nppin_peer_create(s->np, &s->ch, &s->peer_np))) { *step = "nppin_peer_create"; goto fail; }
    return 0;
fail:
    nppt_side_free(s);
    return rc;
}

/* Resident memory of this process in KiB (/proc/self/statm). */
static inline long nppt_rss_kb(void)
{
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Locked/pinned memory of this process in KiB (VmPin, or VmLck where VmPin is absent). */
static inline long nppt_pinned_kb(void)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmPin: %ld", &v) == 1) break;
    fclose(f);
    return v;
}

/* ---- commands over the socket: fixed-size request and reply ---- */

typedef struct nppt_cmd { uint64_t op, a, b, c; } nppt_cmd;
typedef struct nppt_rep { int64_t rc; uint64_t v[8]; } nppt_rep;

/* Wait for n bytes on fd, progressing peer meanwhile (so the other side's revocations and
 * requests are answered while we wait). */
static inline int nppt_read_progress(int fd, void *buf, size_t n, nppin_peer *peer, int timeout_ms)
{
    uint64_t end = rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    char *p = (char *)buf;
    while (n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN, .revents = 0};
        int pr = poll(&pf, 1, 0);
        if (pr > 0) {
            ssize_t r = recv(fd, p, n, 0);
            if (r == 0) return -ECONNRESET;
            if (r < 0 && errno != EINTR) return -errno;
            if (r > 0) { p += r; n -= (size_t)r; }
            continue;
        }
        if (rcp__now_ns() >= end) return -ETIMEDOUT;
        if (peer) nppin_peer_progress(peer, 500000);
        else usleep(500);
    }
    return 0;
}

static inline int nppt_call(int fd, nppin_peer *peer, uint64_t op, uint64_t a, uint64_t b, uint64_t c,
                            nppt_rep *rep)
{
    nppt_cmd cmd = {op, a, b, c};
    int rc = vmt_write_all(fd, &cmd, sizeof cmd);
    if (rc) return rc;
    rc = nppt_read_progress(fd, rep, sizeof *rep, peer, 60000);
    return rc ? rc : (int)rep->rc;
}

/* Wait for one completion of an nppin post; 0 or a negative code (status in *st). */
static inline int nppt_wait(nppin_ctx *np, struct ibv_cq *cq, uint64_t timeout_ns, struct ibv_wc *wc)
{
    uint64_t end = rcp__now_ns() + timeout_ns;
    for (;;) {
        int n = nppin_poll(np, cq, wc, 1);
        if (n < 0) return n;
        if (n == 1) return wc->status == IBV_WC_SUCCESS ? 0 : rcp__verbs_wc_errno(wc->status);
        if (rcp__now_ns() >= end) return -ETIMEDOUT;
    }
}

/* ---- the owner's side of the command channel ---- */

enum { C_HANDLE = 1, C_FILL, C_CHECK, C_UNMAP, C_DONTNEED, C_MREMAP, C_PAGEOUT, C_STATS, C_QUIT,
       C_BAD };

static inline int nppt_owner_cmd(nppt_side *s, size_t region, unsigned char *mem, const nppt_cmd *c,
                                 nppt_rep *r)
{
    unsigned char *p = mem + c->a;
    size_t len = (size_t)c->b;
    unsigned seed = (unsigned)c->c;
    memset(r, 0, sizeof *r);
    if (c->op != C_HANDLE && c->op != C_STATS && c->op != C_QUIT && c->op != C_BAD &&
        (c->a > region || len > region - c->a))
        return -EINVAL;
    switch (c->op) {
    case C_HANDLE:
        return -EINVAL; /* answered by nppt_owner_serve */
    case C_FILL:
        vmt_fill(p, len, seed);
        return 0;
    case C_CHECK: {
        long bad = vmt_check(p, len, seed);
        r->v[0] = (uint64_t)bad;
        return bad < 0 ? 0 : -EILSEQ;
    }
    case C_UNMAP:
        if (munmap(p, len)) return -errno;
        if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
            return -errno;
        vmt_fill(p, len, seed);
        return nppin_sync(s->np, 10 * VMT_SEC);
    case C_DONTNEED:
        if (madvise(p, len, MADV_DONTNEED)) return -errno;
        vmt_fill(p, len, seed);
        return nppin_sync(s->np, 10 * VMT_SEC);
    case C_MREMAP: {
        /* move the pages away, then map fresh memory where they were */
        void *away = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (away == MAP_FAILED) return -errno;
        if (mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, away) != away) return -errno;
        if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
            return -errno;
        vmt_fill(p, len, seed);
        int rc = nppin_sync(s->np, 10 * VMT_SEC);
        munmap(away, len);
        return rc;
    }
    case C_PAGEOUT: {
        /* the chunk must not be registered (pinned pages are not paged out) */
        int rc = nppin_invalidate(s->np, p, len);
        if (!rc) rc = nppin_sync(s->np, 10 * VMT_SEC);
        if (rc) return rc;
        if (madvise(p, len, MADV_PAGEOUT)) return -errno;
        size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg, res = 0;
        unsigned char *vec = (unsigned char *)malloc(n);
        if (!vec) return -ENOMEM;
        if (mincore(p, len, vec) == 0)
            for (size_t i = 0; i < n; i++) res += vec[i] & 1;
        free(vec);
        r->v[0] = res;
        r->v[1] = n;
        return 0;
    }
    case C_BAD: {
        nppin_stats st;
        nppin_get_stats(s->np, &st);
        r->v[0] = st.bad_messages;
        return 0;
    }
    case C_STATS: {
        nppin_stats st;
        memset(&st, 0, sizeof st);
        nppin_get_stats(s->np, &st);
        r->v[0] = st.pinned;
        r->v[1] = st.pinned_peak;
        r->v[2] = st.budget;
        r->v[3] = st.evictions;
        r->v[4] = st.leases_granted;
        r->v[5] = (uint64_t)nppt_rss_kb();
        r->v[6] = (uint64_t)nppt_pinned_kb();
        r->v[7] = st.revokes_sent;
        return 0;
    }
    default:
        return -EINVAL;
    }
}

/* The owning side of an nppin test: a region of `region` bytes (MAP_NORESERVE, untouched) in
 * a context made with opts, served until C_QUIT; the other side drives it with nppt_call. */
static inline int nppt_owner_serve(int fd, size_t region, const nppin_opts *opts, char *why,
                                   size_t whylen)
{
    nppt_side s;
    const char *step = "";
    int rc = nppt_side_setup(fd, opts, &s, &step);
    nppin_region *rg = NULL;
    unsigned char *mem = NULL;
    if (rc) VMT_FAILF("owner setup: %s: %s", step, nppin_strerror(rc));
    mem = (unsigned char *)mmap(NULL, region, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) VMT_FAILF("mmap %zu MiB: %s", region >> 20, strerror(errno));
    if ((rc = nppin_reg(s.np, mem, region, &rg))) VMT_FAILF("nppin_reg: %s", nppin_strerror(rc));
    for (;;) {
        nppt_cmd c;
        rc = nppt_read_progress(fd, &c, sizeof c, s.peer_np, 170000);
        if (rc) VMT_FAILF("owner: command socket: %s", strerror(-rc));
        if (c.op == C_QUIT) break;
        nppt_rep r;
        r.rc = c.op == C_HANDLE ? nppin_region_export(rg, (unsigned char *)r.v)
                                : nppt_owner_cmd(&s, region, mem, &c, &r);
        if ((rc = vmt_write_all(fd, &r, sizeof r))) VMT_FAILF("owner: reply: %s", strerror(-rc));
    }
out:
    if (rg) nppin_dereg(rg);
    if (s.np) nppt_side_free(&s);
    if (mem && mem != MAP_FAILED) munmap(mem, region);
    return why[0] ? -1 : 0;
}
#endif
