/* tests/vm/vmt.h - helpers of the VM-tier tests: exchanging endpoints over a socket (a
 * socketpair inside one guest, TCP between two guests), connecting a QP pair through
 * impl/verbs.h, and running a test's roles in child processes whose failure text comes back to
 * the parent, so each check prints exactly one line. */
#ifndef VMT_H
#define VMT_H
#include "../t.h"
#include "../../impl/verbs.h"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define VMT_SEC 1000000000ull
#define VMT_WAIT (20 * VMT_SEC) /* longest a single completion may take under TCG */

/* ---- endpoints and the one-call connect of the tests (impl/verbs.h has the steps) ---- */

#define VMT_EP_WIRE 30 /* bytes of a packed endpoint: big-endian, no padding */

/* This side's endpoint for qp: a random 24-bit starting PSN unless psn is given (non-zero). */
static inline void vmt_ep_local(const rcp__verbs_dev *d, const struct ibv_qp *qp,
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

static inline void vmt_ep_pack(const rcp__verbs_ep *ep,
                                      unsigned char out[VMT_EP_WIRE])
{
    rcp__verbs_put32(out, ep->qpn);
    rcp__verbs_put32(out + 4, ep->psn);
    rcp__verbs_put32(out + 8, ep->qkey);
    out[12] = (unsigned char)(ep->lid >> 8);
    out[13] = (unsigned char)ep->lid;
    memcpy(out + 14, ep->gid, 16);
}

/* -EPROTO if the bytes cannot be an endpoint (a peer's input is checked, never trusted). */
static inline int vmt_ep_unpack(const unsigned char in[VMT_EP_WIRE],
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

/* INIT -> RTR -> RTS for an RC QP towards the remote endpoint r; local is what we sent to r. */
static inline int vmt_rc_connect(rcp__verbs_dev *d, struct ibv_qp *qp, const rcp__verbs_ep *local,
                                 const rcp__verbs_ep *r, const rcp__verbs_qp_opts *o)
{
    int rc = rcp__verbs_rc_rtr(d, qp, r, o);
    return rc ? rc : rcp__verbs_rc_rts(d, qp, local->psn, o);
}

/* The QP's current state (IBV_QPS_*), or a negative errno. */
static inline int vmt_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
    return rc ? rcp__verbs_err(rc) : (int)a.qp_state;
}

/* ---- bytes over a socket, never blocking forever ---- */

static inline int vmt_write_all(int fd, const void *buf, size_t n)
{
    const char *p = (const char *)buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -errno;
        p += w; n -= (size_t)w;
    }
    return 0;
}

static inline int vmt_read_all(int fd, void *buf, size_t n, int timeout_ms)
{
    char *p = (char *)buf;
    uint64_t end = rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (n) {
        uint64_t now = rcp__now_ns();
        if (now >= end) return -ETIMEDOUT;
        struct pollfd pf = {.fd = fd, .events = POLLIN, .revents = 0};
        int pr = poll(&pf, 1, (int)((end - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -errno;
        if (pr == 0) continue;
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) return -ECONNRESET;
        p += r; n -= (size_t)r;
    }
    return 0;
}

static inline int vmt_send_byte(int fd, char c) { return vmt_write_all(fd, &c, 1); }
static inline int vmt_expect_byte(int fd, char want, int timeout_ms)
{
    char c = 0;
    int rc = vmt_read_all(fd, &c, 1, timeout_ms);
    return rc ? rc : (c == want ? 0 : -EPROTO);
}

static inline int vmt_tcp_listen(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return -errno;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4)) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

static inline int vmt_tcp_accept(int lfd, int timeout_ms)
{
    struct pollfd pf = {.fd = lfd, .events = POLLIN, .revents = 0};
    int pr = poll(&pf, 1, timeout_ms);
    if (pr <= 0) return pr ? -errno : -ETIMEDOUT;
    int fd = accept(lfd, NULL, NULL), one = 1;
    if (fd < 0) return -errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Connect, retrying while the peer guest is still booting. */
static inline int vmt_tcp_connect(const char *ip, uint16_t port, int timeout_ms)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) return -EINVAL;
    uint64_t end = rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (fd < 0) return -errno;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        int rc = -errno;
        close(fd);
        if (rcp__now_ns() >= end) return rc;
        usleep(200 * 1000);
    }
}

/* Two guests' TCP connection: a listens on port and accepts, b connects to peer_ip. Failures
 * are FAIL lines; returns the socket or a negative errno. */
static inline int vmt_tcp_peer(int is_a, const char *peer_ip, uint16_t port)
{
    int sock;
    if (is_a) {
        int l = vmt_tcp_listen(port);
        CHECKF(l >= 0, "listen: %s", strerror(-l));
        if (l < 0) return l;
        sock = vmt_tcp_accept(l, 60000);
        close(l);
    } else {
        sock = vmt_tcp_connect(peer_ip, port, 60000);
    }
    CHECKF(sock >= 0, "tcp to peer %s: %s", peer_ip, strerror(-sock));
    return sock;
}

/* The start of a two-guest test's main(), "PROG a|b ARGS..." with argc arguments in all:
 * line-buffered output, SIGPIPE ignored. Returns 1 for a, 0 for b, or -1 after printing
 * "usage: PROG a|b ARGS_HELP". */
static inline int vmt_guest_role(int argc, char **argv, int want_argc, const char *args_help)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc != want_argc || (strcmp(argv[1], "a") && strcmp(argv[1], "b"))) {
        fprintf(stderr, "usage: %s a|b %s\n", argv[0], args_help);
        return -1;
    }
    return argv[1][0] == 'a';
}

/* ---- one side of a connected QP pair ---- */

typedef struct vmt_conn {
    rcp__verbs_dev d;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct ibv_ah *ah;          /* UD: towards the peer */
    struct ibv_mr *mr;
    unsigned char *buf;
    size_t len;
    rcp__verbs_ep me, peer;
    uint64_t raddr;             /* the peer's buffer */
    uint32_t rkey, rlen;
} vmt_conn;

#define VMT_INFO_WIRE (VMT_EP_WIRE + 16)

static inline void vmt_put64(unsigned char *p, uint64_t v)
{
    rcp__verbs_put32(p, (uint32_t)(v >> 32));
    rcp__verbs_put32(p + 4, (uint32_t)v);
}
static inline uint64_t vmt_get64(const unsigned char *p)
{
    return (uint64_t)rcp__verbs_get32(p) << 32 | rcp__verbs_get32(p + 4);
}

static inline void vmt_conn_free(vmt_conn *c)
{
    if (c->ah) ibv_destroy_ah(c->ah);
    rcp__verbs_qp_destroy(c->qp);
    rcp__verbs_dereg(c->mr);
    rcp__verbs_cq_destroy(c->scq);
    rcp__verbs_cq_destroy(c->rcq);
    if (c->buf) munmap(c->buf, c->len);
    rcp__verbs_close(&c->d);
    memset(c, 0, sizeof *c);
}

/* Open rxe (or $RCP_VERBS_DEV), make a QP of the given type with a registered buffer of len
 * bytes, swap endpoint and buffer descriptions with the peer over fd and connect. The receive
 * CQ sleeps on a completion channel; the send CQ is busy-polled: both paths get exercised. */
static inline int vmt_conn_setup(int fd, enum ibv_qp_type type, size_t len, const rcp__verbs_qp_opts *qo,
                          vmt_conn *c, const char **step)
{
    memset(c, 0, sizeof *c);
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    if (qo) o = *qo;
    o.type = type;
    int rc;
    c->len = len;
    c->buf = (unsigned char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->buf == MAP_FAILED) { c->buf = NULL; *step = "mmap"; return -errno; }
    if ((rc = rcp__verbs_open(NULL, &c->d))) { *step = "open device"; goto fail; }
    if ((rc = rcp__verbs_cq_create(&c->d, 256, 0, &c->scq))) { *step = "send cq"; goto fail; }
    if ((rc = rcp__verbs_cq_create(&c->d, 256, 1, &c->rcq))) { *step = "recv cq"; goto fail; }
    if ((rc = rcp__verbs_qp_create(&c->d, c->scq, c->rcq, &o, &c->qp))) { *step = "create qp"; goto fail; }
    if ((rc = rcp__verbs_reg(&c->d, c->buf, len, 0, &c->mr))) { *step = "register"; goto fail; }
    vmt_ep_local(&c->d, c->qp, 0, o.qkey, &c->me);

    unsigned char out[VMT_INFO_WIRE], in[VMT_INFO_WIRE];
    vmt_ep_pack(&c->me, out);
    vmt_put64(out + VMT_EP_WIRE, (uintptr_t)c->buf);
    rcp__verbs_put32(out + VMT_EP_WIRE + 8, c->mr->rkey);
    rcp__verbs_put32(out + VMT_EP_WIRE + 12, (uint32_t)len);
    if ((rc = vmt_write_all(fd, out, sizeof out))) { *step = "send endpoint"; goto fail; }
    if ((rc = vmt_read_all(fd, in, sizeof in, 60000))) { *step = "receive endpoint"; goto fail; }
    if ((rc = vmt_ep_unpack(in, &c->peer))) { *step = "peer endpoint"; goto fail; }
    c->raddr = vmt_get64(in + VMT_EP_WIRE);
    c->rkey = rcp__verbs_get32(in + VMT_EP_WIRE + 8);
    c->rlen = rcp__verbs_get32(in + VMT_EP_WIRE + 12);

    if (type == IBV_QPT_UD) {
        if ((rc = rcp__verbs_ud_ready(c->qp, c->me.psn))) { *step = "ud ready"; goto fail; }
        if ((rc = rcp__verbs_ah_create(&c->d, &c->peer, &c->ah))) { *step = "address handle"; goto fail; }
    } else if ((rc = vmt_rc_connect(&c->d, c->qp, &c->me, &c->peer, &o))) {
        *step = "rc connect";
        goto fail;
    }
    return 0;
fail:
    vmt_conn_free(c);
    return rc;
}

/* ---- roles in child processes ---- */

/* A role returns 0 or writes why it failed into why. */
typedef int (*vmt_role)(int fd, void *arg, char *why, size_t whylen);

typedef struct vmt_child { pid_t pid; int res; } vmt_child;

/* Run role(fd, arg) in a child; its failure text comes back through a pipe. */
static inline int vmt_spawn(vmt_role role, int fd, void *arg, vmt_child *ch)
{
    int p[2];
    if (pipe(p)) return -errno;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { close(p[0]); close(p[1]); return -errno; }
    if (pid == 0) {
        close(p[0]);
        char why[512] = "";
        alarm(120); /* a child that hangs dies, and the parent reports it */
        int rc = role(fd, arg, why, sizeof why);
        if (rc && !why[0]) snprintf(why, sizeof why, "failed (%d)", rc);
        if (rc && write(p[1], why, strlen(why)) < 0) _exit(3);
        _exit(rc ? 1 : 0);
    }
    close(p[1]);
    ch->pid = pid;
    ch->res = p[0];
    return 0;
}

/* 0 if the child succeeded; else its reason in why. */
static inline int vmt_reap(vmt_child *ch, char *why, size_t whylen)
{
    int st = 0;
    ssize_t n = read(ch->res, why, whylen - 1);
    why[n > 0 ? n : 0] = 0;
    close(ch->res);
    while (waitpid(ch->pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (!why[0]) {
        if (WIFSIGNALED(st)) snprintf(why, whylen, "child killed by signal %d", WTERMSIG(st));
        else snprintf(why, whylen, "child exited with %d", WEXITSTATUS(st));
    }
    return -1;
}

/* In a role: connect c (vmt_conn_setup without options), or say why not in why. */
static inline int vmt_role_conn(int fd, enum ibv_qp_type type, size_t len, vmt_conn *c, char *why,
                                size_t whylen)
{
    const char *step = "";
    int rc = vmt_conn_setup(fd, type, len, NULL, c, &step);
    if (rc) snprintf(why, whylen, "setup: %s: %s", step, strerror(-rc));
    return rc;
}

/* ---- the parent's side: a role in a child on a socketpair, a QP connected to it ---- */

/* Run role(arg) in a child on one end of a new socketpair; *sock is the other end. Failures
 * are FAIL lines; returns 0 when the child runs. */
static inline int vmt_spawn_sock(vmt_role role, void *arg, vmt_child *ch, int *sock)
{
    int sv[2];
    *sock = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        CHECKF(0, "socketpair: %s", strerror(errno));
        return -1;
    }
    int rc = vmt_spawn(role, sv[1], arg, ch);
    close(sv[1]);
    CHECKF(rc == 0, "vmt_spawn: %s", strerror(-rc));
    if (rc) { close(sv[0]); return rc; }
    *sock = sv[0];
    return 0;
}

typedef struct vmt_pair {
    int sock;     /* our end of the socketpair; -1 if none */
    int running;  /* ch still to be reaped */
    vmt_child ch;
    vmt_conn c;   /* c.qp is NULL when not connected */
} vmt_pair;

/* Spawn role(arg) (vmt_spawn_sock) and connect a QP to the one it makes with vmt_conn_setup
 * on its end (type, len, qo as there). Failures are FAIL lines ("setup: STEP: ERR"); returns
 * 0 when connected. End with vmt_pair_end whatever it returned. */
static inline int vmt_pair_start(vmt_pair *p, vmt_role role, void *arg, enum ibv_qp_type type,
                                 size_t len, const rcp__verbs_qp_opts *qo)
{
    const char *step = "";
    memset(p, 0, sizeof *p);
    int rc = vmt_spawn_sock(role, arg, &p->ch, &p->sock);
    if (rc) return rc;
    p->running = 1;
    rc = vmt_conn_setup(p->sock, type, len, qo, &p->c, &step);
    CHECKF(rc == 0, "setup: %s: %s", step, strerror(-rc));
    return rc;
}

/* Wait for the child; if it failed, a FAIL line "WHO: its reason". */
static inline void vmt_pair_reap(vmt_pair *p, const char *who)
{
    char why[512] = "";
    if (!p->running) return;
    p->running = 0;
    CHECKF(vmt_reap(&p->ch, why, sizeof why) == 0, "%s: %s", who, why);
}

/* vmt_pair_reap, then close the socket and free the connection. */
static inline void vmt_pair_end(vmt_pair *p, const char *who)
{
    vmt_pair_reap(p, who);
    if (p->sock >= 0) close(p->sock);
    if (p->c.qp) vmt_conn_free(&p->c);
    p->sock = -1;
}

#define VMT_FAILF(...) do { snprintf(why, whylen, __VA_ARGS__); goto out; } while (0)
/* rc-returning verbs call inside a role; on failure records step and errno text. */
#define VMT_TRY(call) do { int rc_ = (call); if (rc_) { \
        char d_[200]; VMT_FAILF("%s: %s", #call, rcp__verbs_describe(rc_, NULL, d_, sizeof d_)); } } while (0)
/* Wait for a completion and require success. */
#define VMT_WAIT_OK(cq, wcp) do { int rc_ = rcp__verbs_wait((cq), (wcp), VMT_WAIT); if (rc_) { \
        char d_[200]; VMT_FAILF("line %d: completion: %s", __LINE__, rcp__verbs_describe(rc_, (wcp), d_, sizeof d_)); } } while (0)

static inline void vmt_fill(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long vmt_check(const unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        if (p[i] != (unsigned char)(x >> 16)) return (long)i;
    }
    return -1;
}
/* A guest-wide count from `rdma resource show` ("qp", "cq", "mr", ...), or -1. */
static inline int vmt_res_count(const char *what)
{
    FILE *f = popen("rdma resource show 2>/dev/null", "r");
    char line[512];
    int v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, what);
        if (p && p > line && p[-1] == ' ' && p[strlen(what)] == ' ') v = atoi(p + strlen(what) + 1);
    }
    pclose(f);
    return v;
}

#endif
