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

#define VMT_INFO_WIRE (RCP__VERBS_EP_WIRE + 16)

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
    rcp__verbs_ep_local(&c->d, c->qp, 0, o.qkey, &c->me);

    unsigned char out[VMT_INFO_WIRE], in[VMT_INFO_WIRE];
    rcp__verbs_ep_pack(&c->me, out);
    vmt_put64(out + RCP__VERBS_EP_WIRE, (uintptr_t)c->buf);
    rcp__verbs_put32(out + RCP__VERBS_EP_WIRE + 8, c->mr->rkey);
    rcp__verbs_put32(out + RCP__VERBS_EP_WIRE + 12, (uint32_t)len);
    if ((rc = vmt_write_all(fd, out, sizeof out))) { *step = "send endpoint"; goto fail; }
    if ((rc = vmt_read_all(fd, in, sizeof in, 60000))) { *step = "receive endpoint"; goto fail; }
    if ((rc = rcp__verbs_ep_unpack(in, &c->peer))) { *step = "peer endpoint"; goto fail; }
    c->raddr = vmt_get64(in + RCP__VERBS_EP_WIRE);
    c->rkey = rcp__verbs_get32(in + RCP__VERBS_EP_WIRE + 8);
    c->rlen = rcp__verbs_get32(in + RCP__VERBS_EP_WIRE + 12);

    if (type == IBV_QPT_UD) {
        if ((rc = rcp__verbs_ud_ready(c->qp, c->me.psn))) { *step = "ud ready"; goto fail; }
        if ((rc = rcp__verbs_ah_create(&c->d, &c->peer, &c->ah))) { *step = "address handle"; goto fail; }
    } else if ((rc = rcp__verbs_rc_connect(&c->d, c->qp, &c->me, &c->peer, &o))) {
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
#endif
