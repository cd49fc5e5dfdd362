/* SPDX-License-Identifier: MIT */
/* impl/rpcool/pod.h - rpcool's pod transport: calls between hosts that share one device.
 * Part of rpcool.h's implementation (included by it; not a header of its own). The device and
 * its leases are impl/poddev.h and impl/podlease.h; the channel, the connection header, the
 * request and response lines, the request bits, the ready summary and the serving passes are the
 * shared-memory transport's own (rpcool.h), laid out in the device instead of a memfd. What
 * differs: connecting is a slot handshake in the device (no socket), liveness is leases (no
 * byte lock, no pidfd), and a sleeper is woken by a UDP datagram to its socket (no futex).
 * Sections: >>p-dev >>p-server >>p-client >>p-tables */
#ifndef RPCOOL__POD_H
#define RPCOOL__POD_H
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#define RCP__POD_MALLOC(n) RPCOOL_MALLOC(n)
#define RCP__POD_FREE(p) RPCOOL_FREE(p)
#include "../poddev.h"

/* >>p-dev - the device, wake sockets ----------------------------------------------------------- */

/* A pod channel's area: the channel header page (with its ready summary), then its slots. */
#define RPCOOL__POD_AREA ((uint64_t)64 << 10)
#define RPCOOL__POD_WAKE_MS 100u /* a connect looks at its slot, and a sleeping serving thread
                                    at its connections, at least this often: a datagram lost
                                    on the network (or one that could not be sent) delays a
                                    call by at most this, never hangs it */

/* A connect's request and the server's answer, inside the slot's heap[] bytes. */
struct rpcool__pod_req {
    uint64_t tag;        /* the client's lease tag */
    uint64_t heap_size;  /* asked (0: the default) */
    uint64_t heap_base;  /* answer: the connection heap's first extent */
    uint64_t heap_len;   /* answer: its bytes */
    uint32_t uid, gid;   /* as the client claims */
    struct rcp__pod_addr wake; /* the client's socket */
    char host[44];       /* the client's host name, as it claims */
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__pod_req) <= RPCOOL__HEAPNAME, "pod request layout");

/* Where a datagram wakes a sleeper (its socket fd sends it). */
struct rpcool__pwake {
    int fd;
    socklen_t len;
    struct sockaddr_storage to;
};

static const char *rpcool__p_device(const rpcool_conn_opts *o)
{
    const char *d = o && o->pod_device ? o->pod_device : getenv("RPCOOL_POD_DEVICE");
    return d && *d ? d : NULL;
}

/* A device error as rpcool says it. */
static int rpcool__p_err(int r)
{
    return r == -EBADMSG || r == -EPROTO ? RPCOOL_E_PROTO : r == -ESTALE ? RPCOOL_E_FENCED : r;
}

static int rpcool__p_sa(const struct rcp__pod_addr *a, struct sockaddr_storage *ss,
                        socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
        in->sin_family = AF_INET;
        in->sin_port = a->port;
        memcpy(&in->sin_addr, a->addr, 4);
        *len = sizeof *in;
    } else if (a->family == AF_INET6) {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)(void *)ss;
        in->sin6_family = AF_INET6;
        in->sin6_port = a->port;
        memcpy(&in->sin6_addr, a->addr, 16);
        *len = sizeof *in;
    } else {
        return RPCOOL_E_PROTO;
    }
    return 0;
}

static void rpcool__p_pub(const struct sockaddr_storage *ss, uint16_t port,
                          struct rcp__pod_addr *a)
{
    memset(a, 0, sizeof *a);
    a->port = port;
    if (ss->ss_family == AF_INET6) {
        a->family = AF_INET6;
        memcpy(a->addr, &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, 16);
    } else {
        a->family = AF_INET;
        memcpy(a->addr, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, 4);
    }
}

/* The address this host publishes for its sockets: $RPCOOL_POD_ADDR, else toward peer (the
   source address the route to it takes), else the first non-loopback IPv4 address that is up,
   else 127.0.0.1. */
static void rpcool__p_local(const struct sockaddr_storage *peer, socklen_t plen,
                            struct sockaddr_storage *out)
{
    const char *e = getenv("RPCOOL_POD_ADDR");
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)out;
    memset(out, 0, sizeof *out);
    if (e && *e) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)out;
        if (inet_pton(AF_INET, e, &in->sin_addr) == 1) { in->sin_family = AF_INET; return; }
        if (inet_pton(AF_INET6, e, &in6->sin6_addr) == 1) { in6->sin6_family = AF_INET6; return; }
    }
    if (peer) {
        int fd = socket(peer->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        socklen_t l = sizeof *out;
        int ok = fd >= 0 && !connect(fd, (const struct sockaddr *)peer, plen) &&
                 !getsockname(fd, (struct sockaddr *)out, &l);
        if (fd >= 0) close(fd);
        if (ok) return;
        memset(out, 0, sizeof *out);
    }
    struct ifaddrs *ifs = NULL;
    if (!getifaddrs(&ifs)) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK)) {
                memcpy(out, i->ifa_addr, sizeof(struct sockaddr_in));
                break;
            }
        freeifaddrs(ifs);
    }
    if (out->ss_family == AF_INET) return;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* A wake socket of this process, non-blocking, bound on every address of local's family; its
   published address in pub. */
static int rpcool__p_socket(const struct sockaddr_storage *local, struct rcp__pod_addr *pub)
{
    struct sockaddr_storage b;
    socklen_t l = local->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                               : sizeof(struct sockaddr_in);
    int fd = socket(local->ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    memset(&b, 0, sizeof b);
    b.ss_family = local->ss_family;
    if (bind(fd, (struct sockaddr *)&b, l) || getsockname(fd, (struct sockaddr *)&b, &l)) {
        int r = -errno;
        close(fd);
        return r;
    }
    rpcool__p_pub(local, b.ss_family == AF_INET6
                             ? ((struct sockaddr_in6 *)(void *)&b)->sin6_port
                             : ((struct sockaddr_in *)(void *)&b)->sin_port, pub);
    return fd;
}

/* One small datagram (its content is not read: any datagram is a wake-up). One that cannot be
   sent (no route, the interface down) is said once per process on stderr under RPCOOL_DEBUG:
   the sleeper then looks again within RPCOOL__POD_WAKE_MS (or its peer check) by itself. */
static void rpcool__p_send(int fd, const struct sockaddr_storage *to, socklen_t len)
{
    static const char w = 'w';
    static int said;
    if (sendto(fd, &w, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to, len) >= 0)
        return;
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK || __atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
    if (getenv("RPCOOL_DEBUG"))
        fprintf(stderr, "rpcool: pod: a wake-up datagram could not be sent (%s): sleepers look "
                        "again every %u ms by themselves\n", strerror(e), RPCOOL__POD_WAKE_MS);
}

static void rpcool__p_wake(const struct rpcool__pwake *pw)
{
    rpcool__p_send(pw->fd, &pw->to, pw->len);
}

/* Sleep on fd until a datagram comes or ms pass (-1: no limit); the queue is emptied. A datagram
   sent before the sleep is still queued: no wake-up is lost between a look and the sleep. */
static void rpcool__p_doze(int fd, int ms)
{
    struct pollfd pf = {fd, POLLIN, 0};
    char b[16];
    if (poll(&pf, 1, ms) <= 0) return;
    while (recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0) {}
}

/* >>p-server - the server's pod listener: registry entry, acceptor, serving thread ------------- */

struct rpcool__psrv {
    struct rcp__pod *dev;
    uint32_t reg, epoch;
    struct rpcool__chan_hdr *ch;
    struct rpcool__chan_slot *cs;
    struct rpcool__sset set;       /* the serving passes' view: the same code as shared memory */
    struct rpcool__sconn *conns;
    struct rpcool__pwake *pw;      /* per slot: its client's socket */
    struct rcp__lease_seen *seen;  /* per slot: its client's lease, as this server watched it */
    struct rcp__lease_seen *all;   /* every lease of the device (the sweep of the lapsed) */
    uint64_t *ctag, *next, *since; /* per slot: client tag, extents, a stale claim first seen */
    void **ext;
    int door, acc;                 /* the serving thread's socket, the acceptor's */
    struct sockaddr_storage door_to, acc_to;
    socklen_t door_len, acc_len;
    pthread_t thr, athr;
    int started, has_reg;
    uint64_t tag;                  /* our lease's tag, owner of the registry entry */
    uint32_t stop, fenced_said;
    pthread_mutex_t mu; /* starting and joining the threads */
};

static struct rpcool__pod_req *rpcool__p_req(struct rpcool__chan_slot *cs)
{
    return (struct rpcool__pod_req *)(void *)cs->heap;
}

/* Nothing of the pod is ours any more: this process stalled past its lease (fenced), or its
   channel's entry was taken over meanwhile (seen before the lease's own thread runs: two loads
   of lines nobody writes while we live). */
static int rpcool__p_lost(const struct rpcool__psrv *p)
{
    const struct rcp__pod_reg *e = &p->dev->reg[p->reg];
    return rcp__lease_is_fenced(&p->dev->lease) || rcp__load(&e->owner) != p->tag ||
           rcp__load(&e->epoch) != p->epoch;
}

/* The above, said once. */
static int rpcool__p_fenced(rpcool_server *s, struct rpcool__psrv *p)
{
    if (!rpcool__p_lost(p)) return 0;
    uint32_t z = 0;
    if (rcp__cas(&p->fenced_said, &z, 1u))
        rpcool__log(&s->log, RPCOOL_LOG_ERROR, "%s: the pod channel is no longer this server's "
                    "(it stalled past its pod lease and was fenced, or the name was taken "
                    "over): its pod connections are served no more; close and reopen it",
                    s->name);
    return 1;
}

/* A drained pod connection goes: its heap handle closes, its extents go back (taken again once
   its client lets go), its slot is free again (or says DROPPED). Under hk_lock. */
static void rpcool__p_release(rpcool_server *s, struct rpcool__psrv *p, uint32_t i)
{
    struct rpcool__sconn *sc = &p->conns[i];
    struct rpcool__chan_slot *cs = &p->cs[i];
    int dead = rcp__load(&sc->dead), condemned = rcp__load(&sc->condemned) != 0;
    int gone = rcp__pod_tag_dead(p->dev, p->ctag[i]); /* its client's lease is no more */
    if (dead && !condemned) rpcool__cwaiting_drop(p->ch, sc->hdr);
    shmheap_close(sc->heap);
    rcp__pod_extents_put(p->dev, p->ext[i], p->next[i]);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: pod slot %u %s (%s)", s->name, i,
                dead ? "reaped" : "closed", sc->heap_name);
    rcp__fetch_add(dead ? &s->st.reaped : &s->st.closed, 1u);
    if (condemned) rcp__fetch_add(&s->st.dropped, 1u);
    rpcool__sconn_left(s, sc, condemned ? RPCOOL_E_DROPPED : dead ? RPCOOL_E_PEERDEAD : 0);
    sc->heap = NULL;
    sc->hdr = NULL;
    p->ext[i] = NULL;
    rcp__store(&sc->state, (uint32_t)RPCOOL__SC_FREE);
    /* a dropped client that lives reads why in its slot (and frees it when it disconnects) */
    rcp__store(&cs->state, (uint32_t)(condemned && !gone ? RPCOOL__CS_DROPPED : RPCOOL__CS_FREE));
    rcp__fetch_add(&cs->seq, 1u);
    if (!gone) rpcool__p_wake(&p->pw[i]); /* a client inside rpcool_disconnect waits for it */
}

/* Refuse the connect in slot i with code r (the client frees the slot when it has read it). */
static void rpcool__p_refuse(rpcool_server *s, struct rpcool__psrv *p, uint32_t i, int r)
{
    struct rpcool__chan_slot *cs = &p->cs[i];
    rcp__fetch_add(&s->st.refused, 1u);
    cs->status = r;
    rcp__store(&cs->state, (uint32_t)RPCOOL__CS_REFUSED);
    rpcool__p_wake(&p->pw[i]);
}

/* Accept the connect pending in slot i: its request read once, its heap carved from the device
   (extents owned by this server, used by the client) and formatted, the connection active. */
static void rpcool__p_accept(rpcool_server *s, struct rpcool__psrv *p, uint32_t i)
{
    struct rpcool__chan_slot *cs = &p->cs[i];
    struct rpcool__pod_req q;
    struct rpcool__sconn *sc = &p->conns[i];
    rpcool_peer pr;
    void *cuser = NULL;
    int hooked = 0, r;
    memcpy(&q, rpcool__p_req(cs), sizeof q);
    q.host[sizeof q.host - 1] = 0;
    p->pw[i].fd = p->door;
    if (rpcool__p_sa(&q.wake, &p->pw[i].to, &p->pw[i].len)) p->pw[i].len = 0;
    if (rcp__load(&cs->epoch) != p->epoch || !p->pw[i].len) {
        rpcool__p_refuse(s, p, i, RPCOOL_E_PROTO);
        return;
    }
    if (rcp__pod_tag_dead(p->dev, q.tag)) { /* its client is gone already */
        rcp__store(&cs->state, (uint32_t)RPCOOL__CS_FREE);
        return;
    }
    size_t size = q.heap_size ? (size_t)q.heap_size : RPCOOL_DEFAULT_HEAP_SIZE;
    if (q.heap_size > s->max_heap) {
        rpcool__p_refuse(s, p, i, RPCOOL_E_HEAPSIZE);
        return;
    }
    size = (size_t)rcp__pod_round(size, RCP__POD_EXTENT);
    memset(&pr, 0, sizeof pr);
    pr.transport = RPCOOL_TRANSPORT_POD;
    pr.authenticated = 0;
    pr.pid = (int32_t)rcp__load(&cs->client_pid);
    pr.uid = q.uid;
    pr.gid = q.gid;
    pr.slot = RPCOOL_MAX_CONNS;
    snprintf(pr.pod, sizeof pr.pod, "%s", q.host);
    {
        char ip[INET6_ADDRSTRLEN] = "";
        inet_ntop(q.wake.family == AF_INET6 ? AF_INET6 : AF_INET, q.wake.addr, ip, sizeof ip);
        snprintf(pr.addr, sizeof pr.addr, "%s:%u", ip, (unsigned)ntohs(q.wake.port));
    }
    if ((r = rpcool__peer_hook(s, &pr, &cuser, &hooked))) {
        rpcool__p_refuse(s, p, i, r);
        return;
    }
    uint64_t n = size / RCP__POD_EXTENT;
    void *ext = rcp__pod_extents_take(p->dev, n, q.tag);
    shmheap *h = NULL;
    struct rpcool__conn_hdr *hd = NULL;
    shmheap_opts ho = s->hopts;
    ho.size = size;
    if (!ext) r = errno == ESTALE ? (int)RPCOOL_E_FENCED : (int)SHMHEAP_E_FULL;
    else r = shmheap__create_mem(ext, size, &p->dev->lease, &ho, &h);
    if (!r) r = rpcool__hdr_make(h, &hd);
    if (r) {
        if (h) shmheap_close(h);
        if (ext) rcp__pod_extents_put(p->dev, ext, n);
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: pod connect of pid %d on %s refused: %s",
                    s->name, (int)pr.pid, q.host, rpcool_strerror(r));
        rpcool__peer_left(s, &hooked, &pr, cuser, r);
        rpcool__p_refuse(s, p, i, r);
        return;
    }
    hd->chan_slot = i;
    hd->epoch = p->epoch;
    rcp__store(&hd->magic, RPCOOL__CONN_MAGIC);
    sc->heap = h;
    sc->hdr = hd;
    sc->dead = 0;
    sc->rot = 0;
    sc->idle = 0;
    sc->logged = 0;
    sc->pid = (uint32_t)pr.pid;
    sc->peer = pr;
    sc->peer.slot = i;
    sc->cuser = cuser;
    sc->hooked = hooked;
    sc->size = size;
    snprintf(sc->heap_name, sizeof sc->heap_name, "pod:%s/%u@%.40s", s->name, i, q.host);
    sc->pkey = -1;
    sc->pidfd = -1;
    sc->pw = &p->pw[i];
    rcp__store(&sc->condemned, 0u);
    for (unsigned k = 0; k < RPCOOL__NSLOTS; k++) rcp__store_relaxed(&sc->claimed[k], ~0u);
    memset(&p->seen[i], 0, sizeof p->seen[i]);
    p->ctag[i] = q.tag;
    p->ext[i] = ext;
    p->next[i] = n;
    __atomic_store_n(&sc->state, (uint32_t)RPCOOL__SC_ACTIVE, __ATOMIC_SEQ_CST);
    rcp__fetch_add(&s->st.accepted, 1u);
    struct rpcool__pod_req *a = rpcool__p_req(cs);
    rcp__store(&a->heap_base, (uint64_t)(uintptr_t)ext);
    rcp__store(&a->heap_len, (uint64_t)size);
    cs->status = 0;
    cs->hdr = (uint64_t)(uintptr_t)hd;
    rcp__store(&cs->state, (uint32_t)RPCOOL__CS_ACTIVE);
    rcp__fetch_add(&cs->seq, 1u);
    rpcool__p_wake(&p->pw[i]);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: pod slot %u: pid %d on %s, heap %zu bytes",
                s->name, i, (int)pr.pid, q.host, size);
}

/* Is the client of active slot i gone? Its lease released or recovered, or lapsed (then this
   server recovers it: the client's other connections are then gone too). */
static int rpcool__p_client_gone(struct rpcool__psrv *p, uint32_t i)
{
    uint64_t tag = p->ctag[i];
    if (rcp__pod_tag_dead(p->dev, tag)) return 1;
    uint32_t slot = (uint32_t)(tag & 0xffffu) - 1;
    if (rcp__lease_judge(&p->dev->lease, slot, &p->seen[i]) != RCP__LEASE_LAPSED) return 0;
    rcp__lease_recover(&p->dev->lease, slot, &p->seen[i]); /* lost: another host did it */
    return rcp__pod_tag_dead(p->dev, tag);
}

/* Accept, reap, close: the acceptor's round, under hk_lock. */
static void rpcool__p_housekeep(rpcool_server *s, struct rpcool__psrv *p, uint64_t now)
{
    uint64_t stale = rcp__lease_ms_ns(p->dev->lease.bound_ms) * 2;
    rpcool__cwaiting_check(p->ch, &p->set);
    for (uint32_t i = 0; i < p->set.max_conns; i++) {
        struct rpcool__sconn *sc = &p->conns[i];
        struct rpcool__chan_slot *cs = &p->cs[i];
        uint32_t st = rcp__load(&cs->state), ss = rcp__load(&sc->state);
        if (ss == RPCOOL__SC_ACTIVE) {
            if (!rcp__load(&sc->dead) && !rcp__load(&sc->condemned) &&
                st != RPCOOL__CS_CLOSING && !rpcool__p_client_gone(p, i))
                continue;
            if (st != RPCOOL__CS_CLOSING && !rcp__load(&sc->condemned)) rcp__store(&sc->dead, 1);
        }
        if (ss != RPCOOL__SC_FREE) {
            if (!rpcool__drain_wait(s, sc)) rpcool__p_release(s, p, i);
            continue;
        }
        if (st == RPCOOL__CS_FREE) {
            p->since[i] = 0;
        } else if (st == RPCOOL__CS_PENDING) {
            p->since[i] = 0;
            rpcool__p_accept(s, p, i);
        } else if (st == RPCOOL__CS_CLOSING ||
                   (st != RPCOOL__CS_CLAIMED && st != RPCOOL__CS_REFUSED &&
                    st != RPCOOL__CS_DROPPED)) { /* left, or a value no writer makes */
            rcp__store(&cs->state, (uint32_t)RPCOOL__CS_FREE);
        } else if (rcp__pod_tag_dead(p->dev, rcp__load(&rpcool__p_req(cs)->tag))) {
            /* claimed, refused or dropped, its client gone (or not written yet: give it time) */
            if (!p->since[i]) p->since[i] = now;
            else if (now - p->since[i] > stale) {
                rcp__store(&cs->state, (uint32_t)RPCOOL__CS_FREE);
                p->since[i] = 0;
            }
        }
    }
}

static void *rpcool__p_acceptor(void *arg)
{
    rpcool_server *s = (rpcool_server *)arg;
    struct rpcool__psrv *p = s->psrv;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (!rcp__load(&p->stop)) {
        if (!rpcool__p_fenced(s, p)) {
            pthread_mutex_lock(&s->hk_lock);
            rpcool__p_housekeep(s, p, rcp__now_ns());
            pthread_mutex_unlock(&s->hk_lock);
            rcp__pod_sweep(p->dev, p->all); /* what the pod's dead held becomes free */
        }
        rpcool__p_doze(p->acc, (int)s->reap_ms);
    }
    return NULL;
}

/* The serving loop of the pod's connections: passes over its ready summary, as a shared-memory
   serving thread's (rpcool__pass), then a sleep on the door socket once idle for spin_ns. A
   fault on a client heap condemns that connection (the device was shrunk under us, say). */
static void rpcool__p_worker_run(rpcool_server *s, struct rpcool__psrv *p,
                                 struct rpcool__worker *w)
{
    struct rpcool__guard g;
    rpcool__guard_init(&g, NULL, NULL);
    if (sigsetjmp(g.jb, 0)) {
        struct rpcool__sconn *sc = rpcool__worker_faulted(w);
        if (sc) rpcool__condemn(s, sc, "a fault on its heap in the pod device");
        return;
    }
    g.contain = 1;
    rpcool__cur = &g;
    uint64_t idle_since = 0;
    for (unsigned it = 1; !rcp__load(&p->stop); it++) {
        if (RCP__UNLIKELY(rpcool__p_lost(p))) {
            rcp__store(&w->gp, 0ull);
            rpcool__p_doze(p->door, (int)RPCOOL__POD_WAKE_MS); /* nothing is ours: wait for
                                                                   the stop */
            continue;
        }
        uint64_t now = it & 127 ? 0 : rcp__now_ns();
        int n = rpcool__pass(w, &p->set, &g, 1);
        rpcool__crowd_note(p->ch, w, n, now);
        if (n) {
            idle_since = 0;
            continue;
        }
        rcp__cpu_relax();
        if (!now) continue;
        if (!idle_since) idle_since = now;
        if (now - idle_since < s->spin_ns) continue;
        if (rcp__load_relaxed(&p->ch->crowd)) rcp__store_relaxed(&p->ch->crowd, 0u);
        __atomic_fetch_add(&p->ch->ssleepers, 1u, __ATOMIC_SEQ_CST);
        rcp__full_fence();
        int wait = !rcp__load(&p->stop) && !rpcool__pass(w, &p->set, &g, 0);
        rcp__store(&w->gp, 0ull); /* a sleeper holds up no drain */
        if (wait) rpcool__p_doze(p->door, (int)RPCOOL__POD_WAKE_MS);
        rcp__fetch_add(&p->ch->ssleepers, (uint32_t)-1);
        idle_since = 0;
    }
    rcp__store(&w->gp, 0ull);
    rpcool__cur = NULL;
}

static void *rpcool__p_serve_main(void *arg)
{
    rpcool_server *s = (rpcool_server *)arg;
    struct rpcool__psrv *p = s->psrv;
    struct rpcool__worker w;
    rpcool__worker_join(s, &w);
    while (!rcp__load(&p->stop)) rpcool__p_worker_run(s, p, &w);
    rpcool__worker_leave(&w);
    return NULL;
}

static void rpcool__p_free(struct rpcool__psrv *p)
{
    if (p->door >= 0) close(p->door);
    if (p->acc >= 0) close(p->acc);
    rpcool__free(p->conns);
    rpcool__free(p->pw);
    rpcool__free(p->seen);
    rpcool__free(p->all);
    rpcool__free(p->ctag);
    rpcool__free(p->next);
    rpcool__free(p->since);
    rpcool__free(p->ext);
    pthread_mutex_destroy(&p->mu);
    rpcool__free(p);
}

/* Register the channel in the device (a name held by a live lease: RPCOOL_E_NAMETAKEN; one whose
   holder lapsed is taken over once its lease is recovered, which takes up to the lease bound),
   lay out its area, open the sockets. */
static int rpcool__p_open(rpcool_server *s, const char *how, const char *device, uint64_t spin_ns)
{
    struct rpcool__psrv *p;
    struct sockaddr_storage local;
    struct rcp__pod_opts po = {0, RPCOOL__POD_AREA};
    char host[64] = "";
    int r;
    (void)how, (void)spin_ns;
    if (!(p = (struct rpcool__psrv *)rpcool__calloc(1, sizeof *p))) return -ENOMEM;
    p->door = p->acc = -1;
    pthread_mutex_init(&p->mu, NULL);
    s->psrv = p;
    (void)!gethostname(host, sizeof host - 1);
    if ((r = rcp__pod_open(device, host, &po, &p->dev))) {
        rpcool__log(&s->log, RPCOOL_LOG_ERROR, "%s: pod device %s: %s", s->name, device,
                    strerror(-r));
        p->dev = NULL;
        return rpcool__p_err(r);
    }
    uint64_t fit = (p->dev->h.area_size - RPCOOL__SLOTS_OFF) / sizeof(struct rpcool__chan_slot);
    uint32_t n = s->max_conns < fit ? s->max_conns : (uint32_t)fit;
    if (p->dev->h.area_size < RPCOOL__SLOTS_OFF + sizeof(struct rpcool__chan_slot)) n = 0;
    p->conns = (struct rpcool__sconn *)rpcool__calloc(n ? n : 1, sizeof *p->conns);
    p->pw = (struct rpcool__pwake *)rpcool__calloc(n ? n : 1, sizeof *p->pw);
    p->seen = (struct rcp__lease_seen *)rpcool__calloc(n ? n : 1, sizeof *p->seen);
    p->ctag = (uint64_t *)rpcool__calloc(n ? n : 1, sizeof *p->ctag);
    p->next = (uint64_t *)rpcool__calloc(n ? n : 1, sizeof *p->next);
    p->since = (uint64_t *)rpcool__calloc(n ? n : 1, sizeof *p->since);
    p->ext = (void **)rpcool__calloc(n ? n : 1, sizeof *p->ext);
    p->all = (struct rcp__lease_seen *)rpcool__calloc(p->dev->lease.nslots, sizeof *p->all);
    if (!p->conns || !p->pw || !p->seen || !p->ctag || !p->next || !p->since || !p->ext ||
        !p->all)
        return -ENOMEM;
    if (!n) return RPCOOL_E_PROTO;
    if ((r = rcp__pod_reg_take(p->dev, s->name, &p->reg))) {
        rpcool__log(&s->log, RPCOOL_LOG_ERROR, "%s: pod registry: %s", s->name, strerror(-r));
        return r == -EEXIST ? RPCOOL_E_NAMETAKEN : r == -ENOSPC ? RPCOOL_E_NOSLOT
                                                                : rpcool__p_err(r);
    }
    p->has_reg = 1;
    p->tag = rcp__pod_tag(p->dev);
    struct rcp__pod_reg *e = &p->dev->reg[p->reg];
    p->epoch = rcp__load(&e->epoch);
    rpcool__p_local(NULL, 0, &local);
    if ((p->door = rpcool__p_socket(&local, &e->door)) < 0 ||
        (p->acc = rpcool__p_socket(&local, &e->acc)) < 0) {
        r = p->door < 0 ? p->door : p->acc;
        return r;
    }
    rpcool__p_sa(&e->door, &p->door_to, &p->door_len);
    rpcool__p_sa(&e->acc, &p->acc_to, &p->acc_len);
    char *a = (char *)rcp__pod_area(p->dev, p->reg);
    memset(a, 0, RPCOOL__SLOTS_OFF + (size_t)n * sizeof(struct rpcool__chan_slot));
    p->ch = (struct rpcool__chan_hdr *)(void *)a;
    p->cs = (struct rpcool__chan_slot *)(void *)(a + RPCOOL__SLOTS_OFF);
    p->set.rdy = rpcool__rdy(p->ch);
    p->set.rdy_top = rpcool__rdy_top(p->ch);
    p->set.cs = p->cs;
    p->set.conns = p->conns;
    p->set.max_conns = n;
    p->ch->version = RPCOOL__VERSION;
    p->ch->max_conns = n;
    p->ch->safety = s->safety;
    p->ch->server_pid = (uint32_t)getpid();
    rcp__store(&p->ch->epoch, p->epoch);
    rcp__store(&p->ch->state, (uint32_t)RPCOOL__CH_OPEN);
    rcp__store(&p->ch->magic, RPCOOL__CH_MAGIC);
    rcp__store(&e->state, (uint32_t)RCP__POD_REG_OPEN);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: serving the pod through %s (entry %u, epoch %u, "
                "%u slots)", s->name, device, p->reg, p->epoch, n);
    return 0;
}

static int rpcool__p_start(rpcool_server *s)
{
    struct rpcool__psrv *p = s->psrv;
    int r = 0;
    pthread_mutex_lock(&p->mu);
    if (p->started && rcp__load(&p->stop)) { /* stopped: its threads leave, then start anew */
        pthread_join(p->athr, NULL);
        pthread_join(p->thr, NULL);
        p->started = 0;
    }
    if (!p->started) {
        rcp__store(&p->stop, 0u);
        if ((r = pthread_create(&p->athr, NULL, rpcool__p_acceptor, s)) == 0 &&
            (r = pthread_create(&p->thr, NULL, rpcool__p_serve_main, s)) != 0) {
            rcp__store(&p->stop, 1u);
            rpcool__p_send(p->acc, &p->acc_to, p->acc_len);
            pthread_join(p->athr, NULL);
        }
        p->started = r == 0;
    }
    pthread_mutex_unlock(&p->mu);
    return -r;
}

static void rpcool__p_stop(rpcool_server *s)
{
    struct rpcool__psrv *p = s->psrv;
    if (!p || p->door < 0) return;
    rcp__store(&p->stop, 1u);
    rpcool__p_send(p->door, &p->door_to, p->door_len);
    rpcool__p_send(p->acc, &p->acc_to, p->acc_len);
}

/* Close: the threads stop; the channel says CLOSED, its clients are woken and fail their calls
   with RPCOOL_E_CLOSED; the heaps' extents go back once their clients let go. */
static void rpcool__p_close(rpcool_server *s)
{
    struct rpcool__psrv *p = s->psrv;
    if (!p) return;
    rpcool__p_stop(s);
    pthread_mutex_lock(&p->mu);
    if (p->started) {
        pthread_join(p->athr, NULL);
        pthread_join(p->thr, NULL);
        p->started = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (p->ch && !rpcool__p_lost(p)) {
        rcp__store(&p->ch->state, (uint32_t)RPCOOL__CH_CLOSED);
        rcp__pod_reg_put(p->dev, p->reg);
        pthread_mutex_lock(&s->hk_lock);
        for (uint32_t i = 0; i < p->set.max_conns; i++) {
            struct rpcool__sconn *sc = &p->conns[i];
            if (rcp__load(&sc->state) == RPCOOL__SC_FREE) continue;
            rpcool__p_wake(&p->pw[i]);
            rpcool__sconn_left(s, sc, RPCOOL_E_CLOSED);
            shmheap_close(sc->heap);
            rcp__pod_extents_put(p->dev, p->ext[i], p->next[i]);
            rcp__store(&sc->state, (uint32_t)RPCOOL__SC_FREE);
        }
        pthread_mutex_unlock(&s->hk_lock);
    } else if (p->ch) { /* fenced: nothing in the device is ours; our handles go */
        for (uint32_t i = 0; i < p->set.max_conns; i++)
            if (rcp__load(&p->conns[i].state) != RPCOOL__SC_FREE) shmheap_close(p->conns[i].heap);
    } else if (p->has_reg) {
        rcp__pod_reg_put(p->dev, p->reg); /* opened no further than the registry */
    }
    if (p->dev) rcp__pod_close(p->dev);
    rpcool__p_free(p);
    s->psrv = NULL;
}

static int rpcool__p_conns(rpcool_server *s, rpcool_conn_stats *out, unsigned max, int n)
{
    struct rpcool__psrv *p = s->psrv;
    if (!p) return n;
    pthread_mutex_lock(&s->hk_lock);
    for (uint32_t i = 0; i < p->set.max_conns; i++) {
        struct rpcool__sconn *sc = &p->conns[i];
        uint32_t state = rcp__load(&sc->state);
        if (state == RPCOOL__SC_FREE) continue;
        if ((unsigned)n < max) {
            out[n].peer = sc->peer;
            out[n].inflight = state == RPCOOL__SC_ACTIVE ? rpcool__inflight(sc->hdr) : 0;
        }
        n++;
    }
    pthread_mutex_unlock(&s->hk_lock);
    return n;
}

/* >>p-client - the client: connect by a slot in the device, wake by datagrams, leases ---------- */

struct rpcool__pconn {
    struct rcp__pod *dev;
    uint32_t reg, epoch;
    uint64_t stag;                /* the server's lease tag when we connected */
    struct rcp__lease_seen seen;  /* the server's lease, as we watched it */
    int fd;                       /* our wake socket */
    struct sockaddr_storage door, acc;
    socklen_t door_len, acc_len;
    void *ext;                    /* our heap's extents */
    uint64_t next;
};

static void rpcool__p_ring(rpcool_conn *c)
{
    rpcool__p_send(c->pod->fd, &c->pod->door, c->pod->door_len);
}

static void rpcool__p_sleep(rpcool_conn *c, uint64_t ns)
{
    rpcool__p_doze(c->pod->fd, (int)((ns + 999999u) / 1000000u));
}

/* 0 while the server serves us; else why not: fenced (we stalled past our lease), dropped,
   closed, or dead (its entry given up or taken over, its lease lapsed). Loads only, no system
   call; the server's lease is judged at most once per peer_check_ms. */
static int rpcool__p_gone(rpcool_conn *c)
{
    struct rpcool__pconn *q = c->pod;
    struct rcp__pod_reg *e = &q->dev->reg[q->reg];
    int r = 0;
    uint32_t st = rcp__load(&c->cs->state);
    if (rcp__lease_is_fenced(&q->dev->lease)) r = RPCOOL_E_FENCED;
    else if (st == RPCOOL__CS_DROPPED) r = RPCOOL_E_DROPPED;
    else if (st != RPCOOL__CS_ACTIVE && st != RPCOOL__CS_PENDING && st != RPCOOL__CS_CLOSING &&
             st != RPCOOL__CS_CLAIMED && st != RPCOOL__CS_REFUSED) { /* our slot was taken back */
        if (rcp__lease_check(&q->dev->lease) == RCP__LEASE_E_FENCED) r = RPCOOL_E_FENCED;
        /* with the channel's area, by whoever took the entry of a dead server over */
        else if (rcp__load(&e->owner) != q->stag || rcp__load(&e->epoch) != q->epoch ||
                 rcp__pod_tag_dead(q->dev, q->stag))
            r = RPCOOL_E_PEERDEAD;
        else r = RPCOOL_E_DROPPED;
    } else if (rcp__load(&e->owner) != q->stag || rcp__load(&e->epoch) != q->epoch)
        r = rcp__load(&c->ch->state) == RPCOOL__CH_CLOSED ? RPCOOL_E_CLOSED : RPCOOL_E_PEERDEAD;
    else if (rcp__pod_tag_dead(q->dev, q->stag)) r = RPCOOL_E_PEERDEAD;
    else {
        uint64_t now = rcp__now_ns(), last = rcp__load_relaxed(&c->last_check);
        if (now - last < (uint64_t)c->peer_check_ms * 1000000u) return 0;
        rcp__store_relaxed(&c->last_check, now);
        uint32_t slot = (uint32_t)(q->stag & 0xffffu) - 1;
        if (rcp__lease_judge(&q->dev->lease, slot, &q->seen) == RCP__LEASE_LAPSED) {
            rcp__lease_recover(&q->dev->lease, slot, &q->seen); /* whoever wins, it is dead */
            r = RPCOOL_E_PEERDEAD;
        }
    }
    if (r) rcp__store(&c->dead, r);
    return r;
}

/* A call goes only while our slot is active and our lease ours (two loads); else why not. A
   stall between this look and the post is what the server's lease check catches: the slot of a
   fenced client is served no more. */
static int rpcool__p_post(rpcool_conn *c, const struct rpcool__call *call)
{
    if (RCP__UNLIKELY(rcp__lease_is_fenced(&c->pod->dev->lease) ||
                      rcp__load(&c->cs->state) != RPCOOL__CS_ACTIVE)) {
        int r = rpcool__p_gone(c);
        if (!r) r = rcp__lease_check(&c->pod->dev->lease) ? RPCOOL_E_FENCED : RPCOOL_E_PEERDEAD;
        rcp__store(&c->dead, r);
        return r;
    }
    return rpcool__shm_send(c, call);
}

/* Wait for our slot to leave PENDING (or CLOSING): the server's answer, its death, the
   deadline. Returns the state seen. */
static uint32_t rpcool__p_await(rpcool_conn *c, uint32_t from, uint64_t deadline)
{
    uint32_t st;
    while ((st = rcp__load(&c->cs->state)) == from) {
        uint64_t now = rcp__now_ns();
        if (now >= deadline || rpcool__p_gone(c)) break;
        uint64_t left = (deadline - now) / 1000000u + 1;
        rpcool__p_doze(c->pod->fd, (int)(left < RPCOOL__POD_WAKE_MS ? left : RPCOOL__POD_WAKE_MS));
    }
    return st;
}

static void rpcool__p_conn_free(rpcool_conn *c)
{
    struct rpcool__pconn *q = c->pod;
    if (!q) return;
    if (q->fd >= 0) close(q->fd);
    if (q->dev) rcp__pod_close(q->dev);
    rpcool__free(q);
    c->pod = NULL;
}

/* Claim a free slot of the channel's area, ask, wait for the answer, open the heap. */
static int rpcool__p_ask(rpcool_conn *c, const char *name, const rpcool_conn_opts *o,
                         uint64_t deadline)
{
    struct rpcool__pconn *q = c->pod;
    struct rcp__pod_reg *e = &q->dev->reg[q->reg];
    struct sockaddr_storage local;
    struct rcp__pod_addr wake;
    q->stag = rcp__load(&e->owner);
    q->epoch = rcp__load(&e->epoch);
    if (rcp__pod_tag_dead(q->dev, q->stag) || rcp__load(&e->state) != RCP__POD_REG_OPEN)
        return RPCOOL_E_NOCHANNEL;
    struct rcp__pod_addr door = e->door, acc = e->acc;
    if (rpcool__p_sa(&door, &q->door, &q->door_len) || rpcool__p_sa(&acc, &q->acc, &q->acc_len))
        return RPCOOL_E_PROTO;
    c->ch = (struct rpcool__chan_hdr *)rcp__pod_area(q->dev, q->reg);
    uint32_t n = rcp__load(&c->ch->max_conns);
    if (rcp__load(&c->ch->magic) != RPCOOL__CH_MAGIC || c->ch->version != RPCOOL__VERSION ||
        rcp__load(&c->ch->epoch) != q->epoch || rcp__load(&c->ch->state) != RPCOOL__CH_OPEN)
        return RPCOOL_E_NOCHANNEL;
    if (n == 0 || n > RPCOOL_MAX_CONNS ||
        RPCOOL__SLOTS_OFF + (uint64_t)n * sizeof(struct rpcool__chan_slot) > q->dev->h.area_size)
        return RPCOOL_E_PROTO;
    rpcool__p_local(&q->door, q->door_len, &local);
    if ((q->fd = rpcool__p_socket(&local, &wake)) < 0) return q->fd;
    struct rpcool__chan_slot *slots =
        (struct rpcool__chan_slot *)(void *)((char *)c->ch + RPCOOL__SLOTS_OFF);
    c->cs = NULL;
    for (uint32_t i = 0; i < n && !c->cs; i++) {
        uint32_t exp = RPCOOL__CS_FREE;
        if (rcp__load(&slots[i].state) == RPCOOL__CS_FREE &&
            rcp__cas(&slots[i].state, &exp, (uint32_t)RPCOOL__CS_CLAIMED)) {
            c->cs = &slots[i];
            c->index = i;
        }
    }
    if (!c->cs) return RPCOOL_E_NOSLOT;
    struct rpcool__pod_req *rq = rpcool__p_req(c->cs);
    char host[sizeof rq->host] = "";
    (void)!gethostname(host, sizeof host - 1);
    memset(rq, 0, sizeof *rq);
    rq->heap_size = o->heap_size;
    rq->uid = (uint32_t)getuid();
    rq->gid = (uint32_t)getgid();
    rq->wake = wake;
    memcpy(rq->host, host, sizeof host);
    rcp__store(&rq->tag, rcp__pod_tag(q->dev));
    c->cs->client_pid = (uint32_t)getpid();
    rcp__store(&c->cs->epoch, q->epoch);
    memset(&q->seen, 0, sizeof q->seen);
    rcp__store(&c->cs->state, (uint32_t)RPCOOL__CS_PENDING);
    rcp__fetch_add(&c->ch->pending, 1u);
    rpcool__p_send(q->fd, &q->acc, q->acc_len);
    uint32_t st = rpcool__p_await(c, RPCOOL__CS_PENDING, deadline);
    if (st == RPCOOL__CS_PENDING) { /* no answer: take the request back (or close what came) */
        uint32_t exp = RPCOOL__CS_PENDING;
        if (rcp__cas(&c->cs->state, &exp, (uint32_t)RPCOOL__CS_FREE)) {
            int g = rpcool__p_gone(c); /* a server gone before it answered: no channel */
            return g == RPCOOL_E_PEERDEAD || g == RPCOOL_E_CLOSED ? RPCOOL_E_NOCHANNEL
                   : g                                            ? g
                                                                  : RPCOOL_E_TIMEOUT;
        }
        st = exp;
    }
    if (st == RPCOOL__CS_REFUSED) {
        int r = c->cs->status;
        rcp__store(&c->cs->state, (uint32_t)RPCOOL__CS_FREE);
        return r < 0 && r > -5000 ? r : RPCOOL_E_PROTO;
    }
    int r = RPCOOL_E_PROTO;
    if (st == RPCOOL__CS_ACTIVE) {
        void *base = (void *)(uintptr_t)rcp__load(&rq->heap_base);
        uint64_t len = rcp__load(&rq->heap_len);
        int64_t x = rcp__pod_extent_of(q->dev, base);
        struct rpcool__conn_hdr *hd = (struct rpcool__conn_hdr *)(uintptr_t)c->cs->hdr;
        if (x >= 0 && len && len % RCP__POD_EXTENT == 0 &&
            len / RCP__POD_EXTENT <= q->dev->h.nextents - (uint64_t)x &&
            !(r = shmheap__open_mem(base, (size_t)len, &q->dev->lease, &c->hopts, &c->heap))) {
            q->ext = base;
            q->next = len / RCP__POD_EXTENT;
            if (!hd || ((uintptr_t)hd & 127) || !shmheap_contains(c->heap, hd, sizeof *hd) ||
                rcp__load(&hd->magic) != RPCOOL__CONN_MAGIC || hd->version != RPCOOL__VERSION ||
                hd->nslots != RPCOOL__NSLOTS || hd->chan_slot != c->index ||
                hd->epoch != q->epoch)
                r = RPCOOL_E_PROTO;
            else c->hdr = hd;
        }
        if (!r) {
            snprintf(c->heap_name, sizeof c->heap_name, "pod:%s/%u", name, c->index);
            rcp__store(&c->dead, 0); /* a look while the answer came is no verdict */
            return 0;
        }
    }
    /* a broken answer: leave, as a disconnect does (the server frees the slot) */
    if (c->heap) shmheap_close(c->heap);
    c->heap = NULL;
    if (q->ext) rcp__pod_extents_unuse(q->dev, q->ext, q->next);
    rcp__store(&c->cs->state, (uint32_t)RPCOOL__CS_CLOSING);
    rpcool__p_send(q->fd, &q->acc, q->acc_len);
    return rpcool__p_gone(c) ? rpcool__p_gone(c) : r;
}

static int rpcool__p_connect(rpcool_conn *c, const char *where, const char *name,
                             const rpcool_conn_opts *o, unsigned connect_ms)
{
    const char *dev = rpcool__p_device(o);
    uint64_t deadline = rcp__now_ns() + (uint64_t)connect_ms * 1000000u;
    struct rpcool__pconn *q;
    char host[64] = "";
    int r;
    (void)where;
    if (!dev) {
        rpcool__log(&c->log, RPCOOL_LOG_ERROR, "pod:%s: no pod device (rpcool_conn_opts."
                    "pod_device, $RPCOOL_POD_DEVICE)", name);
        return RPCOOL_E_NOCHANNEL;
    }
    if (!(q = (struct rpcool__pconn *)rpcool__calloc(1, sizeof *q))) return -ENOMEM;
    q->fd = -1;
    c->pod = q;
    c->fd = -1;
    (void)!gethostname(host, sizeof host - 1);
    if ((r = rcp__pod_open(dev, host, NULL, &q->dev))) {
        rpcool__log(&c->log, RPCOOL_LOG_ERROR, "pod device %s: %s", dev, strerror(-r));
        q->dev = NULL;
        rpcool__p_conn_free(c);
        return rpcool__p_err(r);
    }
    for (;;) {
        r = rcp__pod_reg_find(q->dev, name, &q->reg);
        if (!r) r = rpcool__p_ask(c, name, o, deadline);
        else r = r == -ENOENT ? RPCOOL_E_NOCHANNEL : rpcool__p_err(r);
        if (r != RPCOOL_E_NOCHANNEL || !o->wait_ready || rcp__now_ns() >= deadline) break;
        if (q->fd >= 0) close(q->fd);
        q->fd = -1;
        usleep(5000);
    }
    if (r) {
        rpcool__p_conn_free(c);
        return r;
    }
    rpcool__log(&c->log, RPCOOL_LOG_INFO, "connected to %s through the pod device %s (slot %u)",
                name, dev, c->index);
    return 0;
}

/* Tell the server (CLOSING, a datagram to its acceptor) and wait until it let go of our heap,
   unless it is gone; then let go of the extents ourselves. */
static void rpcool__p_disconnect(rpcool_conn *c)
{
    struct rpcool__pconn *q = c->pod;
    rpcool_release(c);
    int gone = rpcool__server_gone(c);
    if (gone != RPCOOL_E_FENCED) {
        uint32_t st = rcp__load(&c->cs->state);
        if (st == RPCOOL__CS_ACTIVE || st == RPCOOL__CS_DROPPED) {
            rcp__store(&c->cs->state, (uint32_t)RPCOOL__CS_CLOSING);
            rcp__fetch_add(&c->ch->pending, 1u);
            rpcool__p_send(q->fd, &q->acc, q->acc_len);
            if (!gone)
                rpcool__p_await(c, RPCOOL__CS_CLOSING,
                                rcp__now_ns() + (uint64_t)c->disconnect_ms * 1000000u);
        }
    }
    shmheap_close(c->heap);
    if (gone != RPCOOL_E_FENCED) rcp__pod_extents_unuse(q->dev, q->ext, q->next);
    rpcool__p_conn_free(c);
}

/* >>p-tables - the pod transport's tables ------------------------------------------------------ */

/* The client: the shared-memory transport's call path, its own connect, liveness, waking. */
static const struct rpcool__client_tp rpcool__p_client = {
    .name = "pod", .flags = 0, .connect = rpcool__p_connect, .post = rpcool__p_post,
    .wait = rpcool__shm_wait, .poll = rpcool__shm_poll, .gone = rpcool__p_gone,
    .drop_reply = rpcool__shm_drop_reply, .free = rpcool__shm_free,
    .disconnect = rpcool__p_disconnect, .cancel = rpcool__shm_cancel};
/* The server: a listener of its own; its calls are answered by the shared-memory operations
   (a pod connection is a struct rpcool__sconn whose client is woken by a datagram). */
static const struct rpcool__server_tp rpcool__p_server = {
    .name = "pod", .flags = 0, .open = rpcool__p_open, .start = rpcool__p_start,
    .stop = rpcool__p_stop, .close = rpcool__p_close, .conns = rpcool__p_conns,
    .alloc = rpcool__shm_alloc, .in_range = rpcool__shm_in_range, .heap = rpcool__shm_heap,
    .peer = rpcool__shm_peer, .conn_user = rpcool__shm_conn_user,
    .cancelled = rpcool__shm_cancelled, .drop = rpcool__shm_drop, .hold = rpcool__shm_hold,
    .reply = rpcool__shm_reply};
static const struct rpcool__client_tp *rpcool__p_client_tp(void) { return &rpcool__p_client; }
static const struct rpcool__server_tp *rpcool__p_server_tp(void) { return &rpcool__p_server; }

#endif /* RPCOOL__POD_H */
