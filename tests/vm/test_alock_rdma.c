// VM
// LIBS: -libverbs
/* tests/vm/test_alock_rdma.c - alock.h's remote cohort on real verbs (Soft-RoCE).
 *   test_alock_rdma              one guest: the hazard (CPU and RDMA fetch-and-add on one word
 *                                lose updates), local and remote processes (rxe loopback) on one
 *                                lock with exact counts and bounded waiting, ALOCK_CHECK_RMW's
 *                                invariant check, remote waiters with deadlines (they give up
 *                                while queued and as leaders; the queue stays sound), remote
 *                                processes alone handing one lock on thousands of times (one of
 *                                them slow to link itself), a killed remote holder and its
 *                                manual recovery; remote processes killed holding the lock or
 *                                queued for it, recovered by alock_table_remote_dead and by
 *                                their successors
 *   test_alock_rdma a|b PEER_IP  two guests: a holds the table, with local processes and a
 *                                loopback remote process; b's remote processes lock at once
 * Built with ALOCK_CHECK_RMW: every RDMA and CPU read-modify-write of a lock line is checked
 * against the other kind. Remote processes reach each other's descriptors through their own
 * RC connections, set up over socketpairs (one guest) or TCP (two guests). */
#define ALOCK_CHECK_RMW 1
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "vmt.h"
#include <dirent.h>

#define NLOCKS 16
#define BUDGET 4
#define HAZARD_N 100000  /* RDMA fetch-and-adds in the hazard test (a million would take 80 s
                            under TCG; the CPU side adds as long as the RDMA side runs) */
#define REMOTE_ITERS 150 /* critical sections per remote process */
#define HANDOFF2_SECTIONS 4000 /* per remote process, 2 of them (2-4 ms each under TCG) */
#define HANDOFF3_SECTIONS 1500 /* per remote process, 3 of them (3-11 ms each under TCG) */

/* the protected data and the checker, in the heap (registered: remote processes reach it) */
struct shared {
    uint64_t counter;      /* +1 per critical section: CPU plain ops or RDMA READ + WRITE */
    uint64_t inside;       /* 1 while someone is inside */
    uint64_t violations;   /* entries that found inside == 1 (locals add; remotes report) */
    uint64_t local_acq;    /* critical sections of local processes */
    uint64_t hazard_word;
    uint64_t stop;
    uint64_t per_local[4];
    uint64_t streak, streak_rcs, streak_on, max_streak; /* local critical sections in a row while
                                                           the same remote waiter was queued */
    uint64_t hold_us;      /* local processes: every 16th critical section lasts this long */
    uint64_t pad[1];
};

static const char *heap_name;
static shmheap *heap;
static alock_table *tab;
static struct shared *sh;

/* ---------------------------------------------------------------- connections */

/* one RC connection: our QP and CQ, the peer's memory (addr, rkey) and four numbers it sent */
typedef struct tlink {
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint64_t addr;
    uint32_t rkey;
    uint64_t x[4];
} tlink;
#define TL_WIRE (VMT_EP_WIRE + 12 + 32)

static int tlink_setup(int fd, rcp__verbs_dev *d, uint64_t my_addr, uint32_t my_rkey,
                       const uint64_t my_x[4], tlink *l)
{
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = 16;  /* 268 ms: two TCG guests on a shared host stall for tens of ms */
    o.retry_cnt = 6;
    memset(l, 0, sizeof *l);
    int rc = rcp__verbs_cq_create(d, 64, 0, &l->cq);
    if (!rc) rc = rcp__verbs_qp_create(d, l->cq, l->cq, &o, &l->qp);
    if (rc) return rc;
    rcp__verbs_ep me, peer;
    vmt_ep_local(d, l->qp, 0, 0, &me);
    unsigned char out[TL_WIRE], in[TL_WIRE];
    vmt_ep_pack(&me, out);
    vmt_put64(out + VMT_EP_WIRE, my_addr);
    rcp__verbs_put32(out + VMT_EP_WIRE + 8, my_rkey);
    for (int i = 0; i < 4; i++) vmt_put64(out + VMT_EP_WIRE + 12 + 8 * i, my_x ? my_x[i] : 0);
    if ((rc = vmt_write_all(fd, out, sizeof out))) return rc;
    if ((rc = vmt_read_all(fd, in, sizeof in, 60000))) return rc;
    if ((rc = vmt_ep_unpack(in, &peer))) return rc;
    l->addr = vmt_get64(in + VMT_EP_WIRE);
    l->rkey = rcp__verbs_get32(in + VMT_EP_WIRE + 8);
    for (int i = 0; i < 4; i++) l->x[i] = vmt_get64(in + VMT_EP_WIRE + 12 + 8 * i);
    return vmt_rc_connect(d, l->qp, &me, &peer, &o);
}

/* ---------------------------------------------------------------- the home (table) side */

static rcp__verbs_dev hdev;
static struct ibv_mr *heap_mr;
static int home_open;

static int home_setup(void)
{
    heap_name = t_uniq("alock-vm");
    shmheap_opts o = {.size = 8 << 20};
    int rc = shmheap_create(heap_name, &o, &heap);
    CHECKF(rc == 0, "shmheap_create: %s", shmheap_strerror(rc));
    if (rc) return rc;
    alock_table_opts ao = {.nlocks = NLOCKS, .budget = BUDGET, .check_ms = 5};
    rc = alock_table_create(heap, "table", &ao, &tab);
    CHECKF(rc == 0, "alock_table_create: %s", alock_strerror(rc));
    if (rc) return rc;
    sh = (struct shared *)shmheap_calloc(heap, 1, sizeof *sh);
    shmheap_root_set(heap, "shared", sh);
    return 0;
}

/* after the children are forked: our device and the heap registered for them */
static int home_rdma(void)
{
    int rc = rcp__verbs_open(NULL, &hdev);
    CHECKF(rc == 0, "open device: %s", strerror(-rc));
    if (rc) return rc;
    rc = rcp__verbs_reg(&hdev, shmheap_base(heap), shmheap_size(heap), 0, &heap_mr);
    CHECKF(rc == 0, "register the heap: %s", strerror(-rc));
    home_open = rc == 0;
    return rc;
}

/* serve one remote process's connection: it learns where the lines and the data are */
static int home_link(int fd, tlink *l)
{
    void *lines;
    size_t len;
    alock_table_lines(tab, &lines, &len);
    uint64_t x[4] = {(uint64_t)(uintptr_t)lines, NLOCKS, BUDGET, (uint64_t)(uintptr_t)sh};
    int rc = tlink_setup(fd, &hdev, (uint64_t)(uintptr_t)shmheap_base(heap), heap_mr->rkey, x, l);
    CHECKF(rc == 0, "home link: %s", strerror(-rc));
    return rc;
}

static void home_teardown(void)
{
    char live[256];
    snprintf(live, sizeof live, "/dev/shm/alock.%llx.table", (unsigned long long)(uintptr_t)shmheap_base(heap));
    if (home_open) {
        rcp__verbs_dereg(heap_mr);
        rcp__verbs_close(&hdev);
        home_open = 0;
    }
    alock_table_close(tab);
    shmheap_close(heap);
    shmheap_unlink(heap_name, NULL);
    unlink(live);
}

/* ---------------------------------------------------------------- a remote process */

typedef struct rproc {
    uint16_t id;
    int home_fd;            /* to the home */
    int npeers;
    int peer_fd[4];         /* to other remote processes */
    uint16_t peer_id[4];
    int iters;              /* critical sections; 0 = hold lock `hold_lock` and sleep */
    uint32_t hold_lock;
    int reset_lock;         /* >= 0: only alock_remote_reset(reset_lock), then exit */
    int timeout_us;         /* > 0: alock_remote_lock_timeout with deadlines of 1..2x this */
    uint32_t lock;          /* the lock of the critical sections (iters > 0) */
    int lean;               /* critical section: only READ and WRITE of the counter */
    int stall_at;           /* > 0: from this section on, the next link of this process behind
                               its predecessor (a peer link's compare-and-swap) stalls once */
    int hold_first;         /* iters > 0: the first section sends 'H' to the home and waits for
                               its 'U' before it goes on; its unlock may fail with ALOCK_E_PEER
                               (counted: the successor it hands to is dead) */
} rproc;
#define REP_LEN 32          /* a remote process's report: ALOCK_OWNERDEAD results, overlaps
                               seen, timeouts, first unlocks that returned ALOCK_E_PEER */

/* A slow but live peer: a link to the other remote processes whose next compare-and-swap
   that links this process behind its predecessor (next from 0 to a descriptor), once armed,
   stalls longer than one RDMA operation may take (ALOCK_DEFAULT_OP_TIMEOUT_MS), as a process
   that a loaded host deschedules between its enqueue and its link. Its other operations and
   its NIC keep working. */
typedef struct slowlink {
    alock_link in;
} slowlink;
static int slow_armed; /* 1: the next link stalls; 2: it did */
#define SLOW_STALL_MS (ALOCK_DEFAULT_OP_TIMEOUT_MS + 1000)

static int slow_cas(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired, uint64_t *old)
{
    slowlink *s = (slowlink *)conn;
    if (slow_armed == 1 && expect == 0 && desired != 0) {
        slow_armed = 2;
        usleep(SLOW_STALL_MS * 1000u);
    }
    return s->in.cas(s->in.conn, raddr, expect, desired, old);
}
static int slow_read(void *conn, uint64_t raddr, void *dst, uint32_t len)
{
    slowlink *s = (slowlink *)conn;
    return s->in.read(s->in.conn, raddr, dst, len);
}
static int slow_write(void *conn, uint64_t raddr, const void *src, uint32_t len)
{
    slowlink *s = (slowlink *)conn;
    return s->in.write(s->in.conn, raddr, src, len);
}

typedef struct rctx {
    rcp__verbs_dev d;
    tlink home, peers[4];
    alock_link hl, pl[4], self;
    struct ibv_cq *scq[2];  /* the loopback pair of the self link */
    struct ibv_qp *sqp[2];
    alock_remote *r;
    slowlink slow[4];       /* stall_at: the peer links, slow */
    struct ibv_mr *mr, *dmr;
    uint64_t *buf;          /* registered scratch for data READ/WRITE */
    void *descs;            /* our descriptors, registered for the peers */
    uint64_t data;          /* the home's struct shared */
} rctx;

#define RDESC 64

/* A loopback RC connection on d (two queue pairs joined) and an alock_link over it to our own
   memory of key rkey: 0 or a negative code. */
static int loop_link(rcp__verbs_dev *d, uint32_t rkey, struct ibv_cq *cq[2], struct ibv_qp *qp[2],
                     alock_link *out)
{
    rcp__verbs_qp_opts qo;
    memset(&qo, 0, sizeof qo);
    qo.timeout = 16;
    qo.retry_cnt = 6;
    rcp__verbs_ep e[2];
    int rc;
    for (int i = 0; i < 2; i++) {
        if ((rc = rcp__verbs_cq_create(d, 16, 0, &cq[i])) ||
            (rc = rcp__verbs_qp_create(d, cq[i], cq[i], &qo, &qp[i])))
            return rc;
        vmt_ep_local(d, qp[i], 0, 0, &e[i]);
    }
    for (int i = 0; i < 2; i++)
        if ((rc = vmt_rc_connect(d, qp[i], &e[i], &e[1 - i], &qo))) return rc;
    return alock_verbs_link_create(qp[0], cq[0], rkey, 20000, out);
}


static int rctx_setup(rproc *p, rctx *c, char *why, size_t whylen)
{
    int rc;
    memset(c, 0, sizeof *c);
    if ((rc = rcp__verbs_open(NULL, &c->d))) VMT_FAILF("open: %s", strerror(-rc));
    if ((rc = tlink_setup(p->home_fd, &c->d, 0, 0, NULL, &c->home))) VMT_FAILF("home link: %s", strerror(-rc));
    c->data = c->home.x[3];
    if (posix_memalign((void **)&c->buf, 4096, 4096) || posix_memalign(&c->descs, 4096, ALOCK_REMOTE_MEM(RDESC)))
        VMT_FAILF("memalign");
    if ((rc = rcp__verbs_reg(&c->d, c->buf, 4096, 0, &c->mr))) VMT_FAILF("reg: %s", strerror(-rc));
    if ((rc = rcp__verbs_reg(&c->d, c->descs, ALOCK_REMOTE_MEM(RDESC), 0, &c->dmr))) VMT_FAILF("reg: %s", strerror(-rc));
    if ((rc = alock_verbs_link_create(c->home.qp, c->home.cq, c->home.rkey, 20000, &c->hl)))
        VMT_FAILF("alock_verbs_link_create: %s", alock_strerror(rc));
    alock_remote_opts o;
    memset(&o, 0, sizeof o);
    o.id = p->id;
    o.lines_addr = c->home.x[0];
    o.nlocks = (uint32_t)c->home.x[1];
    o.budget = (uint32_t)c->home.x[2];
    o.home = c->hl;
    o.descs = c->descs;
    o.ndesc = RDESC;
    if ((rc = alock_remote_create(&o, &c->r))) VMT_FAILF("alock_remote_create: %s", alock_strerror(rc));
    for (int i = 0; i < p->npeers; i++) {
        if ((rc = tlink_setup(p->peer_fd[i], &c->d, (uint64_t)(uintptr_t)c->descs, c->dmr->rkey, NULL, &c->peers[i])))
            VMT_FAILF("peer link %u: %s", p->peer_id[i], strerror(-rc));
        if ((rc = alock_verbs_link_create(c->peers[i].qp, c->peers[i].cq, c->peers[i].rkey, 20000, &c->pl[i])))
            VMT_FAILF("peer alock_verbs_link_create: %s", alock_strerror(rc));
        alock_link pk = c->pl[i];
        if (p->stall_at > 0) {
            c->slow[i].in = c->pl[i];
            pk.conn = &c->slow[i];
            pk.cas = slow_cas;
            pk.read = slow_read;
            pk.write = slow_write;
            pk.faa = NULL;
            pk.cas_read = NULL;
        }
        if ((rc = alock_remote_set_peer(c->r, p->peer_id[i], &pk))) VMT_FAILF("set_peer: %s", alock_strerror(rc));
    }
    if (p->timeout_us > 0) { /* a loopback connection to our own descriptors, for giving up */
        if ((rc = loop_link(&c->d, c->dmr->rkey, c->scq, c->sqp, &c->self)))
            VMT_FAILF("self link: %s", alock_strerror(rc));
        /* before the self link, a deadline is refused */
        alock_rhold h;
        if ((rc = alock_remote_lock_timeout(c->r, 0, rcp__now_ns() + VMT_SEC, &h)) != ALOCK_E_INVAL)
            VMT_FAILF("lock_timeout without a self link: %s, not ALOCK_E_INVAL", alock_strerror(rc));
        if ((rc = alock_remote_set_peer(c->r, p->id, &c->self))) VMT_FAILF("set_peer self: %s", alock_strerror(rc));
    }
    return 0;
out:
    return -1;
}

static int rread(rctx *c, uint64_t off, uint64_t *v)
{
    struct ibv_wc wc;
    int rc = rcp__verbs_post_read(c->home.qp, 9, c->buf, 8, c->mr->lkey, c->data + off, c->home.rkey, IBV_SEND_SIGNALED);
    if (!rc) rc = rcp__verbs_wait(c->home.cq, &wc, VMT_WAIT);
    *v = c->buf[0];
    return rc;
}

static int rwrite(rctx *c, uint64_t off, uint64_t v)
{
    struct ibv_wc wc;
    c->buf[1] = v;
    int rc = rcp__verbs_post_write(c->home.qp, 10, &c->buf[1], 8, c->mr->lkey, c->data + off, c->home.rkey, 0, 0, IBV_SEND_SIGNALED);
    if (!rc) rc = rcp__verbs_wait(c->home.cq, &wc, VMT_WAIT);
    return rc;
}

#define OFF(f) offsetof(struct shared, f)

/* A remote process: iters critical sections on lock 0, each a READ-modify-WRITE of the counter
   with the checker around it; reports the overlaps it saw. */
static int remote_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)fd;
    rproc *p = (rproc *)arg;
    rctx c;
    int rc;
    if (rctx_setup(p, &c, why, whylen)) return -1;
    if (p->reset_lock >= 0) {
        if ((rc = alock_remote_reset(c.r, (uint32_t)p->reset_lock))) VMT_FAILF("reset: %s", alock_strerror(rc));
        return 0;
    }
    VMT_TRY(vmt_send_byte(p->home_fd, 'R'));
    VMT_TRY(vmt_expect_byte(p->home_fd, 'G', 60000));
    if (p->iters == 0) {
        alock_rhold h;
        if ((rc = alock_remote_lock(c.r, p->hold_lock, &h))) VMT_FAILF("lock: %s", alock_strerror(rc));
        VMT_TRY(vmt_send_byte(p->home_fd, 'H'));
        for (;;) pause();
    }
    uint64_t odead = 0, viol = 0, timeouts = 0, upeer = 0, seed = 0x9e3779b97f4a7c15ull * p->id;
    for (int i = 0; i < p->iters; i++) {
        alock_rhold h;
        uint64_t v, in;
        if (p->timeout_us > 0) {
            seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
            uint64_t us = (uint64_t)p->timeout_us + seed % (uint64_t)p->timeout_us;
            rc = alock_remote_lock_timeout(c.r, p->lock, rcp__now_ns() + us * 1000, &h);
            if (rc == ALOCK_E_TIMEDOUT) { timeouts++; i--; continue; }
            if (rc == ALOCK_E_NODESC) { /* every descriptor gave up and waits to be passed over */
                usleep(1000);
                i--;
                continue;
            }
        } else {
            if (p->stall_at > 0 && i == p->stall_at) slow_armed = 1;
            rc = alock_remote_lock(c.r, p->lock, &h);
        }
        if (rc == ALOCK_OWNERDEAD) { odead++; rc = 0; } /* took over from a dead process */
        if (rc) VMT_FAILF("lock %d: %s", i, alock_strerror(rc));
        if (p->hold_first && i == 0) {
            VMT_TRY(vmt_send_byte(p->home_fd, 'H'));
            VMT_TRY(vmt_expect_byte(p->home_fd, 'U', 120000));
        }
        if (p->lean) { /* a plain counter: READ, WRITE + 1 */
            VMT_TRY(rread(&c, OFF(counter), &v));
            VMT_TRY(rwrite(&c, OFF(counter), v + 1));
            if ((rc = alock_remote_unlock(&h))) VMT_FAILF("unlock %d: %s", i, alock_strerror(rc));
            continue;
        }
        VMT_TRY(rread(&c, OFF(inside), &in));
        if (in) viol++;
        VMT_TRY(rwrite(&c, OFF(inside), 1));
        VMT_TRY(rread(&c, OFF(counter), &v));
        VMT_TRY(rwrite(&c, OFF(counter), v + 1));
        VMT_TRY(rwrite(&c, OFF(inside), 0));
        rc = alock_remote_unlock(&h);
        if (rc == ALOCK_E_PEER && p->hold_first && i == 0) { upeer++; rc = 0; }
        if (rc) VMT_FAILF("unlock %d: %s", i, alock_strerror(rc));
    }
    if (timeouts) { /* every descriptor that gave up came before our last lock: all passed over */
        const alock__desc *dd = (const alock__desc *)c.descs;
        for (int i = 0; i < RDESC; i++)
            if (rcp__load(&dd[i].lock))
                VMT_FAILF("descriptor %d still reserved after %llu timeouts (never passed over?)", i,
                          (unsigned long long)timeouts);
    }
    if (p->stall_at > 0 && p->stall_at < p->iters && slow_armed != 2)
        VMT_FAILF("the slow link never stalled (no contended enqueue after section %d)", p->stall_at);
    unsigned char rep[REP_LEN];
    vmt_put64(rep, odead);
    vmt_put64(rep + 8, viol);
    vmt_put64(rep + 16, timeouts);
    vmt_put64(rep + 24, upeer);
    VMT_TRY(vmt_write_all(p->home_fd, rep, sizeof rep));
    return 0;
out:
    return -1;
}

static uint32_t local_lock; /* the lock of the local processes */

/* A local process: lock local_lock until told to stop; plain counter, checker, per-process
   count. */
static void local_proc(int me)
{
    shmheap *h;
    alock_table *t;
    if (shmheap_open(heap_name, NULL, &h) || alock_table_open(h, "table", NULL, &t)) _exit(2);
    struct shared *s = (struct shared *)shmheap_root_get(h, "shared");
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        alock_hold hd;
        if (alock_lock(t, local_lock, &hd) < 0) _exit(3);
        if (s->inside) s->violations++;
        s->inside = 1;
        s->counter++;
        /* bounded waiting, seen from inside: local critical sections while a remote process is
           queued (r_tail set) and no remote critical section came between them */
        uint64_t rcs = s->counter - 1 - s->local_acq;
        if (__atomic_load_n(&t->lines[local_lock].r_tail, __ATOMIC_ACQUIRE)) {
            if (s->streak_on && s->streak_rcs == rcs) s->streak++;
            else { s->streak = 1; s->streak_rcs = rcs; s->streak_on = 1; }
            if (s->streak > s->max_streak) s->max_streak = s->streak;
        } else {
            s->streak_on = 0;
        }
        s->local_acq++;
        s->per_local[me]++;
        if (s->hold_us && (s->local_acq & 15) == 0) usleep((useconds_t)s->hold_us);
        s->inside = 0;
        alock_unlock(&hd);
    }
    alock_table_close(t);
    _exit(0);
}

/* ---------------------------------------------------------------- one guest */

/* CPU lock xadd and rxe's fetch-and-add on one word: rxe does load-then-store, so adds are lost */
static int hazard_role(int fd, void *arg, char *why, size_t whylen)
{
    (void)arg;
    rcp__verbs_dev d;
    tlink l;
    struct ibv_mr *mr = NULL;
    uint64_t *old = NULL;
    int rc;
    if ((rc = rcp__verbs_open(NULL, &d))) VMT_FAILF("open: %s", strerror(-rc));
    if ((rc = tlink_setup(fd, &d, 0, 0, NULL, &l))) VMT_FAILF("link: %s", strerror(-rc));
    if (posix_memalign((void **)&old, 4096, 4096)) VMT_FAILF("memalign");
    VMT_TRY(rcp__verbs_reg(&d, old, 4096, 0, &mr));
    VMT_TRY(vmt_expect_byte(fd, 'G', 60000));
    for (int i = 0; i < HAZARD_N; i++) {
        struct ibv_wc wc;
        VMT_TRY(rcp__verbs_post_faa(l.qp, 1, old, mr->lkey, l.x[3] + OFF(hazard_word), l.rkey, 1, IBV_SEND_SIGNALED));
        VMT_WAIT_OK(l.cq, &wc);
    }
    VMT_TRY(vmt_send_byte(fd, 'D'));
    return 0;
out:
    return -1;
}

/* One round: the RDMA side's HAZARD_N fetch-and-adds against this process's CPU ones until the
   RDMA side is done. The lost updates, or -1 if the round could not run (a CHECK says why). */
static long long hazard_round(int round)
{
    vmt_child ch;
    int sock = -1;
    long long lost = -1;
    memset(&ch, 0, sizeof ch);
    if (vmt_spawn_sock(hazard_role, NULL, &ch, &sock)) return -1;
    tlink l;
    if (home_link(sock, &l) == 0) {
        uint64_t start = __atomic_load_n(&sh->hazard_word, __ATOMIC_SEQ_CST);
        uint64_t cpu = 0, t0 = rcp__now_ns();
        vmt_send_byte(sock, 'G');
        for (;;) {
            for (int k = 0; k < 256; k++, cpu++) __atomic_fetch_add(&sh->hazard_word, 1, __ATOMIC_SEQ_CST);
            struct pollfd pf = {.fd = sock, .events = POLLIN, .revents = 0};
            if (poll(&pf, 1, 0) > 0) break;
            if (rcp__now_ns() - t0 > 100 * VMT_SEC) break;
        }
        char c = 0;
        CHECK_EQ(vmt_read_all(sock, &c, 1, 1000), 0);
        uint64_t fin = __atomic_load_n(&sh->hazard_word, __ATOMIC_SEQ_CST);
        lost = (long long)(start + cpu + HAZARD_N) - (long long)fin;
        printf("# hazard, round %d: %d RDMA and %llu CPU fetch-and-adds on one word in %.1f s: "
               "%lld lost\n", round, HAZARD_N, (unsigned long long)cpu,
               (rcp__now_ns() - t0) / 1e9, lost);
        rcp__verbs_qp_destroy(l.qp);
        rcp__verbs_cq_destroy(l.cq);
    }
    char why[512];
    int rr = vmt_reap(&ch, why, sizeof why);
    CHECKF(rr == 0, "rdma side: %s", why);
    close(sock);
    return rr ? -1 : lost;
}

/* The loss shows only while both virtual CPUs run at once; on a loaded host the qemu may run
   them one after the other for a whole round, so up to three rounds (each can fail). */
static void hazard_cpu_and_rdma_faa(void)
{
    long long lost = 0;
    for (int round = 1; round <= 3 && lost == 0; round++) lost = hazard_round(round);
    if (lost < 0) return; /* a round could not run: its CHECK failed */
    CHECKF(lost > 0, "no update was lost in three rounds: the hazard did not show");
}

/* Stop the two local processes lp: seconds since t0, each must have exited 0. */
static double locals_stop(const pid_t lp[2], uint64_t t0)
{
    double secs = (rcp__now_ns() - t0) / 1e9;
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) {
        int st = 0;
        for (int k = 0; k < 600 && waitpid(lp[i], &st, WNOHANG) == 0; k++) usleep(50000);
        if (waitpid(lp[i], &st, WNOHANG) == 0) { /* stuck on a lock nobody releases */
            kill(lp[i], SIGKILL);
            waitpid(lp[i], &st, 0);
            CHECKF(0, "local process %d did not stop in 30 s (its lock stuck)", i);
            continue;
        }
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "local process %d: status %d", i, st);
    }
    return secs;
}

/* 2 local and 2 remote processes (loopback) on lock 0 at once: exact count, no overlap, and a
   remote waiter sees a bounded number of local critical sections while it waits */
static void mixed_local_and_remote(void)
{
    int s1[2], s2[2], s12[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s1) || socketpair(AF_UNIX, SOCK_STREAM, 0, s2) ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, s12)) { CHECKF(0, "socketpair"); return; }
    rproc p1 = {1, s1[1], 1, {s12[0]}, {2}, REMOTE_ITERS, 0, -1, 0, 0, 0, 0, 0};
    rproc p2 = {2, s2[1], 1, {s12[1]}, {1}, REMOTE_ITERS, 0, -1, 0, 0, 0, 0, 0};
    vmt_child c1, c2;
    fflush(stdout);
    pid_t lp[2];
    for (int i = 0; i < 2; i++)
        if ((lp[i] = fork()) == 0) local_proc(i);
    CHECK_EQ(vmt_spawn(remote_role, -1, &p1, &c1), 0);
    CHECK_EQ(vmt_spawn(remote_role, -1, &p2, &c2), 0);
    close(s1[1]); close(s2[1]); close(s12[0]); close(s12[1]);
    tlink l1, l2;
    memset(&l1, 0, sizeof l1);
    memset(&l2, 0, sizeof l2);
    int ok = home_link(s1[0], &l1) == 0 && home_link(s2[0], &l2) == 0;
    ok = ok && vmt_expect_byte(s1[0], 'R', 60000) == 0 && vmt_expect_byte(s2[0], 'R', 60000) == 0;
    uint64_t t0 = rcp__now_ns();
    if (ok) { vmt_send_byte(s1[0], 'G'); vmt_send_byte(s2[0], 'G'); }
    unsigned char rep[2][REP_LEN];
    memset(rep, 0, sizeof rep);
    CHECK(ok && vmt_read_all(s1[0], rep[0], REP_LEN, 150000) == 0);
    CHECK(ok && vmt_read_all(s2[0], rep[1], REP_LEN, 150000) == 0);
    double secs = locals_stop(lp, t0);
    char why[512];
    CHECKF(vmt_reap(&c1, why, sizeof why) == 0, "remote 1: %s", why);
    CHECKF(vmt_reap(&c2, why, sizeof why) == 0, "remote 2: %s", why);
    uint64_t worst = sh->max_streak;
    uint64_t rviol = vmt_get64(rep[0] + 8) + vmt_get64(rep[1] + 8);
    printf("# mixed: %llu local + %d remote critical sections in %.1f s; at most %llu local ones "
           "in a row while a remote one was queued (budget %d)\n", (unsigned long long)sh->local_acq, 2 * REMOTE_ITERS, secs,
           (unsigned long long)worst, BUDGET);
    CHECK_EQ(sh->counter, sh->local_acq + 2 * REMOTE_ITERS);
    CHECK_EQ(sh->per_local[0] + sh->per_local[1], sh->local_acq);
    CHECK_EQ(sh->violations, 0);
    CHECK_EQ(rviol, 0);
    CHECKF(sh->local_acq > 0, "the local processes never got the lock");
    /* bounded waiting: Peterson lets the local cohort in at most twice per remote wait, each
       time for at most BUDGET hand-offs, plus the ones in flight */
    CHECKF(worst <= 2 * BUDGET + 4, "%llu local critical sections in a row past a queued remote one",
           (unsigned long long)worst);
    rcp__verbs_qp_destroy(l1.qp); rcp__verbs_cq_destroy(l1.cq);
    rcp__verbs_qp_destroy(l2.qp); rcp__verbs_cq_destroy(l2.cq);
    close(s1[0]); close(s2[0]);
    __atomic_store_n(&sh->stop, 0, __ATOMIC_RELEASE);
}

/* A team of n remote processes (ids first_id, first_id + 1, ...), each with a socket to the home
   and one to each other, and iters critical sections to run. */
enum { TEAM_MAX = 3 };
typedef struct team {
    int n;
    int hs[TEAM_MAX][2], ps[TEAM_MAX][TEAM_MAX][2];
    rproc p[TEAM_MAX];
    vmt_child c[TEAM_MAX];
    tlink l[TEAM_MAX];
} team;

static int team_init(team *t, int n, uint16_t first_id, int iters)
{
    memset(t, 0, sizeof *t);
    t->n = n;
    for (int i = 0; i < n; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, t->hs[i])) { CHECKF(0, "socketpair"); return -1; }
        for (int j = i + 1; j < n; j++)
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, t->ps[i][j])) {
                CHECKF(0, "socketpair");
                return -1;
            }
    }
    for (int i = 0; i < n; i++) {
        rproc *p = &t->p[i];
        p->id = (uint16_t)(first_id + i);
        p->reset_lock = -1;
        p->iters = iters;
        p->home_fd = t->hs[i][1];
        for (int j = 0; j < n; j++) { /* peers in id order on both sides */
            if (j == i) continue;
            p->peer_fd[p->npeers] = j > i ? t->ps[i][j][0] : t->ps[j][i][1];
            p->peer_id[p->npeers++] = (uint16_t)(first_id + j);
        }
    }
    return 0;
}

/* Spawn the team, link the home to each, wait until all are ready: 1 if they are. */
static int team_start(team *t)
{
    int ok = 1;
    for (int i = 0; i < t->n; i++) CHECK_EQ(vmt_spawn(remote_role, -1, &t->p[i], &t->c[i]), 0);
    for (int i = 0; i < t->n; i++) {
        close(t->hs[i][1]);
        for (int j = i + 1; j < t->n; j++) { close(t->ps[i][j][0]); close(t->ps[i][j][1]); }
    }
    for (int i = 0; i < t->n && ok; i++) ok = home_link(t->hs[i][0], &t->l[i]) == 0;
    for (int i = 0; i < t->n && ok; i++) ok = vmt_expect_byte(t->hs[i][0], 'R', 60000) == 0;
    CHECKF(ok, "the remote processes did not get ready");
    return ok;
}

static void team_end(team *t)
{
    for (int i = 0; i < t->n; i++) {
        if (t->l[i].qp) { rcp__verbs_qp_destroy(t->l[i].qp); rcp__verbs_cq_destroy(t->l[i].cq); }
        close(t->hs[i][0]);
    }
}

/* alock_remote_lock_timeout: 3 remote processes (loopback) with deadlines of 2-4 ms and 1 local
   process that holds the lock for 3 ms every 16th time, on lock 0 at once (under TCG a remote
   critical section takes about a millisecond: most waits time out). Remote waiters give up
   queued (their descriptors stay linked, marked abandoned, until a granter passes over them
   and frees them) and as cohort leaders in Peterson's loop (they leave the head); a process
   whose RDESC descriptors all gave up gets ALOCK_E_NODESC and retries. Exact count, no
   overlap, timeouts seen, no descriptor left reserved at the end (each remote process checks
   its own), and the lock works afterwards. */
static void remote_waiters_time_out(void)
{
    enum { NR = 3, ITERS = 30 };
    static team T;
    if (team_init(&T, NR, 11, ITERS)) return;
    for (int i = 0; i < NR; i++) T.p[i].timeout_us = 2000;
    sh->counter = sh->local_acq = sh->violations = sh->per_local[0] = sh->per_local[1] = 0;
    sh->hold_us = 3000;
    fflush(stdout);
    pid_t lp = fork();
    if (lp == 0) local_proc(0);
    int ok = team_start(&T);
    uint64_t t0 = rcp__now_ns();
    for (int i = 0; i < NR && ok; i++) vmt_send_byte(T.hs[i][0], 'G');
    uint64_t viol = 0, tos = 0;
    for (int i = 0; i < NR && ok; i++) {
        unsigned char r[REP_LEN];
        int rc = vmt_read_all(T.hs[i][0], r, REP_LEN, 120000);
        CHECKF(rc == 0, "remote %d's report: %s", 11 + i, strerror(-rc));
        if (!rc) { viol += vmt_get64(r + 8); tos += vmt_get64(r + 16); }
        else { ok = 0; for (int j = 0; j < NR; j++) kill(T.c[j].pid, SIGKILL); }
    }
    double secs = (rcp__now_ns() - t0) / 1e9;
    char why[512];
    for (int i = 0; i < NR; i++) CHECKF(vmt_reap(&T.c[i], why, sizeof why) == 0, "remote %d: %s", 11 + i, why);
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    int st = 0;
    for (int k = 0; k < 200 && waitpid(lp, &st, WNOHANG) == 0; k++) usleep(50000);
    if (waitpid(lp, &st, WNOHANG) == 0) { /* stuck behind a remote queue that died */
        kill(lp, SIGKILL);
        waitpid(lp, &st, 0);
        CHECKF(0, "the local process did not stop in 10 s (lock 0 stuck)");
        ok = 0;
    } else {
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "local process: status %d", st);
    }
    printf("# remote timeouts: %llu local + %d remote critical sections, %llu remote timeouts, "
           "in %.1f s\n", (unsigned long long)sh->local_acq, NR * ITERS, (unsigned long long)tos, secs);
    if (ok) {
        CHECK_EQ(sh->counter, sh->local_acq + NR * ITERS);
        CHECK_EQ(sh->violations, 0);
        CHECK_EQ(viol, 0);
        CHECKF(tos > 0, "no remote waiter timed out: the deadlines were never tested");
        /* the queue is sound afterwards: empty, and a lock without deadline works */
        CHECK_EQ(__atomic_load_n(&tab->lines[0].r_tail, __ATOMIC_ACQUIRE), 0);
        alock_hold h;
        CHECK_EQ(alock_lock_timeout(tab, 0, rcp__now_ns() + 5 * VMT_SEC, &h), 0);
        alock_unlock(&h);
    }
    team_end(&T);
    sh->hold_us = 0;
    __atomic_store_n(&sh->stop, 0, __ATOMIC_RELEASE);
}

/* rxe's counters (/sys/class/infiniband/rxe0/ports/1/hw_counters): up to 32 of them */
#define RXE_HWC "/sys/class/infiniband/rxe0/ports/1/hw_counters"
typedef struct rxe_counts {
    int n;
    char name[32][40];
    unsigned long long v[32];
} rxe_counts;
static void rxe_counts_read(rxe_counts *c)
{
    memset(c, 0, sizeof *c);
    DIR *dir = opendir(RXE_HWC);
    if (!dir) return;
    struct dirent *e;
    while ((e = readdir(dir)) && c->n < 32) {
        if (e->d_name[0] == '.') continue;
        char path[400];
        if (strlen(e->d_name) >= sizeof c->name[0]) continue;
        snprintf(path, sizeof path, RXE_HWC "/%.40s", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%llu", &c->v[c->n]) == 1) {
            memcpy(c->name[c->n], e->d_name, strlen(e->d_name) + 1);
            c->n++;
        }
        fclose(f);
    }
    closedir(dir);
}
static void rxe_counts_print(const char *what, const rxe_counts *a, const rxe_counts *b)
{
    char line[1024];
    int len = snprintf(line, sizeof line, "# rxe0 counters during %s:", what);
    for (int i = 0; i < b->n; i++) {
        unsigned long long before = 0;
        for (int j = 0; j < a->n; j++)
            if (!strcmp(a->name[j], b->name[i])) before = a->v[j];
        if (b->v[i] != before && len < (int)sizeof line - 60)
            len += snprintf(line + len, sizeof line - (size_t)len, " %s +%llu", b->name[i], b->v[i] - before);
    }
    printf("%s\n", line);
}

/* nr remote processes (no local ones), each with its own queue pairs, take lock `lock`
   `sections` times each, a plain counter (READ, WRITE + 1) inside: every hand-off within the
   remote queue, none lost. The second process is slow once (its compare-and-swap that links it
   stalls longer than an RDMA operation's timeout while its predecessor releases): the release
   must wait for the link, not fail. Exact count, no error, the queue empty at the end. rxe's
   counters (retransmissions, duplicates) during the run are printed. */
static void remote_handoffs(int nr, int sections, uint16_t first_id, uint32_t lock)
{
    enum { MAXR = TEAM_MAX };
    static team T;
    if (team_init(&T, nr, first_id, sections)) return;
    for (int i = 0; i < nr; i++) {
        T.p[i].lock = lock;
        T.p[i].lean = 1;
        T.p[i].stall_at = i == 1 ? sections / 2 : 0;
    }
    sh->counter = 0;
    int ok = team_start(&T);
    rxe_counts rc0, rc1;
    rxe_counts_read(&rc0);
    uint64_t t0 = rcp__now_ns();
    for (int i = 0; i < nr && ok; i++) vmt_send_byte(T.hs[i][0], 'G');
    /* the reports, in any order; a process that ends without one (its failure pipe, which
       only it holds, becomes readable) ends the others: one stranded in the queue would wait
       for ever */
    int got = 0, done[MAXR] = {0};
    while (ok && got < nr) {
        struct pollfd pf[2 * MAXR];
        for (int i = 0; i < nr; i++) {
            pf[i] = (struct pollfd){.fd = done[i] ? -1 : T.hs[i][0], .events = POLLIN, .revents = 0};
            pf[nr + i] = (struct pollfd){.fd = done[i] ? -1 : T.c[i].res, .events = POLLIN, .revents = 0};
        }
        if (poll(pf, (nfds_t)(2 * nr), 110000) <= 0) { CHECKF(0, "no report in 110 s"); ok = 0; }
        for (int i = 0; i < nr && ok; i++) {
            unsigned char r[REP_LEN];
            if (pf[i].revents) {
                if (vmt_read_all(T.hs[i][0], r, REP_LEN, 10000)) ok = 0;
                else { done[i] = 1; got++; }
            } else if (pf[nr + i].revents) {
                ok = 0; /* ended without a report: vmt_reap says why */
            }
        }
    }
    double secs = (rcp__now_ns() - t0) / 1e9;
    rxe_counts_read(&rc1);
    rxe_counts_print(nr == 2 ? "remote_handoffs_two" : "remote_handoffs_three", &rc0, &rc1);
    if (!ok)
        for (int i = 0; i < nr; i++) kill(T.c[i].pid, SIGKILL);
    char why[512];
    for (int i = 0; i < nr; i++)
        CHECKF(vmt_reap(&T.c[i], why, sizeof why) == 0, "remote %d: %s", first_id + i, why);
    printf("# remote hand-offs: %d remote processes x %d critical sections in %.1f s (one stall "
           "of %d ms): %.0f us per section\n", nr, sections, secs, SLOW_STALL_MS,
           (secs - SLOW_STALL_MS / 1e3) * 1e6 / (nr * sections));
    if (ok) {
        CHECK_EQ(sh->counter, (uint64_t)nr * (uint64_t)sections);
        CHECK_EQ(__atomic_load_n(&tab->lines[lock].r_tail, __ATOMIC_ACQUIRE), 0);
    }
    team_end(&T);
}

static void remote_handoffs_two(void) { remote_handoffs(2, HANDOFF2_SECTIONS, 21, 2); }
static void remote_handoffs_three(void) { remote_handoffs(3, HANDOFF3_SECTIONS, 31, 3); }

/* ALOCK_CHECK_RMW: lock 0's remote tail has seen RDMA compare-and-swap; a CPU read-modify-write of
   it must trip the assertion, one of the local tail must not */
static void debug_invariant_check(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alock__cpu_rmw_mark(&tab->lines[0], 2); /* l_tail: allowed */
        alock__cpu_rmw_mark(&tab->lines[0], 0); /* r_tail: the forbidden mix */
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "expected an assertion (SIGABRT), status %d", st);
    CHECKF(((tab->lines[0].rdma_marks) & 0xff) > 0, "no RDMA mark on r_tail");
    CHECKF(((tab->lines[0].rdma_marks >> 16) & 0xff) == 0, "RDMA mark on l_tail");
}

/* A remote holder is killed: local lockers wait (deadline), a remote process resets the queue
   (documented recovery), and the lock works again */
static void killed_remote_holder(void)
{
    int s[2], s2[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) || socketpair(AF_UNIX, SOCK_STREAM, 0, s2)) { CHECKF(0, "socketpair"); return; }
    rproc p = {3, s[1], 0, {0}, {0}, 0, 5, -1, 0, 0, 0, 0, 0};
    vmt_child c;
    CHECK_EQ(vmt_spawn(remote_role, -1, &p, &c), 0);
    close(s[1]);
    tlink l;
    memset(&l, 0, sizeof l);
    int ok = home_link(s[0], &l) == 0 && vmt_expect_byte(s[0], 'R', 60000) == 0;
    if (ok) vmt_send_byte(s[0], 'G');
    ok = ok && vmt_expect_byte(s[0], 'H', 60000) == 0;
    CHECKF(ok, "the remote process did not take lock 5");
    kill(c.pid, SIGKILL);
    char why[512];
    vmt_reap(&c, why, sizeof why);
    alock_hold h;
    CHECK_EQ(alock_lock_timeout(tab, 5, rcp__now_ns() + 300000000ull, &h), ALOCK_E_TIMEDOUT);
    CHECK_EQ(alock_trylock(tab, 5, &h), ALOCK_E_BUSY);
    /* recovery: a remote process that knows id 3 is gone empties the remote queue */
    rproc q = {4, s2[1], 0, {0}, {0}, 0, 0, 5, 0, 0, 0, 0, 0};
    vmt_child c2;
    CHECK_EQ(vmt_spawn(remote_role, -1, &q, &c2), 0);
    close(s2[1]);
    tlink l2;
    memset(&l2, 0, sizeof l2);
    home_link(s2[0], &l2);
    CHECKF(vmt_reap(&c2, why, sizeof why) == 0, "reset: %s", why);
    CHECK_EQ(alock_lock_timeout(tab, 5, rcp__now_ns() + 5 * VMT_SEC, &h), 0);
    alock_unlock(&h);
    rcp__verbs_qp_destroy(l.qp); rcp__verbs_cq_destroy(l.cq);
    rcp__verbs_qp_destroy(l2.qp); rcp__verbs_cq_destroy(l2.cq);
    close(s[0]); close(s2[0]);
}

/* ---------------------------------------------------------------- remote processes that die */

/* The table's node's loopback link to its own lock lines: alock_table_remote_dead changes the
   remote tail by RDMA compare-and-swap only. */
static struct ibv_cq *dead_cq[2];
static struct ibv_qp *dead_qp[2];
static alock_link dead_loop;

static int dead_loop_setup(void)
{
    int rc = loop_link(&hdev, heap_mr->rkey, dead_cq, dead_qp, &dead_loop);
    CHECKF(rc == 0, "loopback link: %s", alock_strerror(rc));
    return rc;
}

static void dead_loop_end(void)
{
    alock_verbs_link_destroy(&dead_loop);
    for (int i = 0; i < 2; i++) {
        if (dead_qp[i]) rcp__verbs_qp_destroy(dead_qp[i]);
        if (dead_cq[i]) rcp__verbs_cq_destroy(dead_cq[i]);
        dead_qp[i] = NULL;
        dead_cq[i] = NULL;
    }
}

/* Wait until lock idx's remote tail names remote process id (its enqueue is done), then 100 ms
   more (its link behind its predecessor): 1 if it did within 60 s. */
static int rtail_is(uint32_t idx, uint16_t id)
{
    for (int k = 0; k < 60000; k++) {
        if ((uint16_t)(__atomic_load_n(&tab->lines[idx].r_tail, __ATOMIC_ACQUIRE) >> 48) == id) {
            usleep(100000);
            return 1;
        }
        usleep(1000);
    }
    CHECKF(0, "lock %u's remote tail never named remote process %u", idx, id);
    return 0;
}

static void shared_reset(uint32_t lock)
{
    sh->counter = sh->local_acq = sh->violations = sh->per_local[0] = sh->per_local[1] = 0;
    sh->streak = sh->streak_rcs = sh->streak_on = sh->max_streak = 0;
    __atomic_store_n(&sh->stop, 0, __ATOMIC_RELEASE);
    local_lock = lock;
}

/* Kill member i of team T (SIGKILL) and reap it. */
static void team_kill(team *T, int i)
{
    char why[512];
    if (T->c[i].pid <= 0) return;
    kill(T->c[i].pid, SIGKILL);
    vmt_reap(&T->c[i], why, sizeof why);
    T->c[i].pid = 0;
}

/* Read member i's report into r (120 s): 1 if it came. */
static int team_report(team *T, int i, unsigned char r[REP_LEN])
{
    int rc = vmt_read_all(T->hs[i][0], r, REP_LEN, 120000);
    CHECKF(rc == 0, "remote %u's report: %s", T->p[i].id, strerror(-rc));
    return rc == 0;
}

/* Start team T: member 0 takes lock idx ('G', then its 'H'), then each next one queues for it
   behind the one before ('G', then the remote tail names it): 1 if all did. */
static int team_queue(team *T, uint32_t idx)
{
    int ok = team_start(T);
    if (ok) vmt_send_byte(T->hs[0][0], 'G');
    ok = ok && vmt_expect_byte(T->hs[0][0], 'H', 60000) == 0;
    for (int i = 1; i < T->n && ok; i++) {
        vmt_send_byte(T->hs[i][0], 'G');
        ok = rtail_is(idx, T->p[i].id);
    }
    CHECKF(ok, "remote %u did not take lock %u, or the others did not queue behind it",
           T->p[0].id, idx);
    if (!ok)
        for (int i = 0; i < T->n; i++) team_kill(T, i);
    return ok;
}

/* team_queue on lock idx, then two local processes on it (shared_reset first): 1 if started;
   0, the team and the loopback link ended, if not */
static int team_queue_locals(team *T, uint32_t idx, pid_t lp[2])
{
    shared_reset(idx);
    if (!team_queue(T, idx)) {
        team_end(T);
        dead_loop_end();
        return 0;
    }
    fflush(stdout);
    for (int i = 0; i < 2; i++)
        if ((lp[i] = fork()) == 0) local_proc(i);
    return 1;
}

/* Reap the members still running (each must have exited 0). */
static void team_reap(team *T)
{
    char why[512];
    for (int i = 0; i < T->n; i++)
        if (T->c[i].pid > 0) CHECKF(vmt_reap(&T->c[i], why, sizeof why) == 0, "remote %u: %s", T->p[i].id, why);
}

/* A remote holder is killed in its critical section (SIGKILL).
   1. Alone (lock 8): local lockers wait; alock_table_remote_dead releases the lock (1), and the
      next local holder gets 0 (it is not told, as the manual says).
   2. With a live remote waiter behind it and two local processes on the same lock (9): the
      waiter takes over by itself once the table's node marked the holder dead
      (alock_table_remote_dead releases nothing: 0); its alock_remote_lock returns
      ALOCK_OWNERDEAD once, then all goes on: exact count, no overlap, the queue empty. */
static void remote_holder_dies(void)
{
    enum { ITERS = 40 };
    static team T;
    alock_hold h;
    unsigned char r[REP_LEN];
    if (dead_loop_setup()) return;
    if (team_init(&T, 1, 41, 0)) return;
    T.p[0].hold_lock = 8;
    int ok = team_queue(&T, 8);
    if (ok) {
        CHECK_EQ(alock_lock_timeout(tab, 8, rcp__now_ns() + 300000000ull, &h), ALOCK_E_TIMEDOUT);
        team_kill(&T, 0);
        CHECK_EQ(alock_table_remote_dead(tab, &dead_loop, 41), 1);
        CHECK_EQ(__atomic_load_n(&tab->lines[8].r_tail, __ATOMIC_ACQUIRE), 0);
        int rc = alock_lock_timeout(tab, 8, rcp__now_ns() + 5 * VMT_SEC, &h);
        CHECK_EQ(rc, 0);
        if (rc >= 0) alock_unlock(&h);
        CHECK_EQ(alock_table_remote_dead(tab, &dead_loop, 41), 0); /* again: harmless */
    }
    team_reap(&T);
    team_end(&T);

    if (team_init(&T, 2, 42, ITERS)) return;
    T.p[0].iters = 0; /* 42 takes lock 9 and holds it */
    T.p[0].hold_lock = 9;
    T.p[1].lock = 9;
    pid_t lp[2];
    if (!team_queue_locals(&T, 9, lp)) return;
    uint64_t t0 = rcp__now_ns();
    team_kill(&T, 0);
    CHECK_EQ(alock_table_remote_dead(tab, &dead_loop, 42), 0); /* 43 is the tail */
    ok = team_report(&T, 1, r);
    double secs = locals_stop(lp, t0);
    team_reap(&T);
    printf("# a remote holder died with a remote waiter behind it: %llu local + %d remote critical "
           "sections in %.1f s after the death\n", (unsigned long long)sh->local_acq, ITERS, secs);
    if (ok) {
        CHECK_EQ(vmt_get64(r), 1); /* ALOCK_OWNERDEAD, once */
        CHECK_EQ(vmt_get64(r + 8), 0);
        CHECK_EQ(sh->counter, sh->local_acq + ITERS);
        CHECK_EQ(sh->violations, 0);
        CHECKF(sh->local_acq > 0, "the local processes never got the lock");
        CHECK_EQ(__atomic_load_n(&tab->lines[9].r_tail, __ATOMIC_ACQUIRE), 0);
    }
    team_end(&T);
    dead_loop_end();
}

/* A remote waiter is killed in the queue (SIGKILL) behind a live remote holder.
   1. With a live remote waiter behind it and two local processes on lock 10: the table's node
      marks it dead (releases nothing: 0); the holder's unlock hands the lock to it, which fails,
      and returns 0; the waiter behind takes over (ALOCK_OWNERDEAD once: alock cannot see that
      the dead one never entered); exact count, no overlap, the queue empty.
   2. Alone behind the holder (lock 11), marked dead only after the holder's unlock: that unlock
      returns ALOCK_E_PEER (the lock stays with the dead waiter), then alock_table_remote_dead
      releases it (1) and a local process takes the lock. */
static void remote_waiter_dies(void)
{
    enum { ITERS = 30 };
    static team T;
    alock_hold h;
    unsigned char r[2][REP_LEN];
    if (dead_loop_setup()) return;
    if (team_init(&T, 3, 44, ITERS)) return;
    T.p[0].lock = T.p[2].lock = 10;
    T.p[0].hold_first = 1; /* 44 holds lock 10 until 'U' */
    T.p[1].iters = 0;      /* 45 queues for lock 10 and is killed there */
    T.p[1].hold_lock = 10;
    pid_t lp[2];
    if (!team_queue_locals(&T, 10, lp)) return;
    uint64_t t0 = rcp__now_ns();
    team_kill(&T, 1);
    CHECK_EQ(alock_table_remote_dead(tab, &dead_loop, 45), 0); /* not the head */
    vmt_send_byte(T.hs[0][0], 'U');
    int ok = team_report(&T, 0, r[0]) && team_report(&T, 2, r[1]);
    double secs = locals_stop(lp, t0);
    team_reap(&T);
    printf("# a remote waiter died between a remote holder and a remote waiter: %llu local + %d "
           "remote critical sections in %.1f s after the death\n",
           (unsigned long long)sh->local_acq, 2 * ITERS, secs);
    if (ok) {
        CHECK_EQ(vmt_get64(r[0] + 24), 0); /* the holder's unlock: 0 */
        CHECK_EQ(vmt_get64(r[0]), 0);
        CHECK_EQ(vmt_get64(r[1]), 1);      /* the waiter behind took over */
        CHECK_EQ(vmt_get64(r[0] + 8) + vmt_get64(r[1] + 8), 0);
        CHECK_EQ(sh->counter, sh->local_acq + 2 * ITERS);
        CHECK_EQ(sh->violations, 0);
        CHECK_EQ(__atomic_load_n(&tab->lines[10].r_tail, __ATOMIC_ACQUIRE), 0);
    }
    team_end(&T);

    if (team_init(&T, 2, 47, 1)) return;
    T.p[0].lock = 11;
    T.p[0].hold_first = 1;
    T.p[1].iters = 0;
    T.p[1].hold_lock = 11;
    ok = team_queue(&T, 11);
    if (ok) {
        team_kill(&T, 1);
        vmt_send_byte(T.hs[0][0], 'U');
        ok = team_report(&T, 0, r[0]);
    }
    if (ok) {
        CHECK_EQ(vmt_get64(r[0] + 24), 1); /* ALOCK_E_PEER: not marked dead yet */
        CHECK_EQ(alock_trylock(tab, 11, &h), ALOCK_E_BUSY);
        CHECK_EQ(alock_table_remote_dead(tab, &dead_loop, 48), 1);
        int rc = alock_lock_timeout(tab, 11, rcp__now_ns() + 5 * VMT_SEC, &h);
        CHECK_EQ(rc, 0);
        if (rc >= 0) alock_unlock(&h);
        CHECK_EQ(__atomic_load_n(&tab->lines[11].r_tail, __ATOMIC_ACQUIRE), 0);
    } else {
        for (int i = 0; i < 2; i++) team_kill(&T, i);
    }
    team_reap(&T);
    team_end(&T);
    dead_loop_end();
}

/* ---------------------------------------------------------------- two guests */

#define PAIR_PORT 18710
#define PAIR_ITERS 100

/* a: accept the 4 TCP connections of b's remote processes 2 and 3 (to the home, to remote 1),
   told apart by the first byte each sends: 'h' or 'p', then the id */
static int pair_accept(int l, int fds[2][4])
{
    for (int i = 0; i < 4; i++) {
        int fd = vmt_tcp_accept(l, 90000);
        if (fd < 0) return fd;
        unsigned char tag[2];
        int rc = vmt_read_all(fd, tag, 2, 30000);
        if (rc) return rc;
        if ((tag[0] != 'h' && tag[0] != 'p') || tag[1] < 2 || tag[1] > 3) return -EPROTO;
        fds[tag[0] == 'p'][tag[1]] = fd;
    }
    return 0;
}

static void pair_a(void)
{
    int l = vmt_tcp_listen(PAIR_PORT);
    CHECKF(l >= 0, "listen: %s", strerror(-l));
    if (l < 0) return;
    int fds[2][4];
    memset(fds, -1, sizeof fds);
    int rc = pair_accept(l, fds);
    close(l);
    CHECKF(rc == 0, "accepting b's processes: %s", strerror(-rc));
    if (rc) return;
    /* remote 1 here (loopback), with links to 2 and 3 on b */
    int s1[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s1)) { CHECKF(0, "socketpair"); return; }
    rproc p1 = {1, s1[1], 2, {fds[1][2], fds[1][3]}, {2, 3}, PAIR_ITERS, 0, -1, 0, 0, 0, 0, 0};
    fflush(stdout);
    pid_t lp[2];
    for (int i = 0; i < 2; i++)
        if ((lp[i] = fork()) == 0) local_proc(i);
    vmt_child c1;
    CHECK_EQ(vmt_spawn(remote_role, -1, &p1, &c1), 0);
    close(s1[1]);
    close(fds[1][2]);
    close(fds[1][3]);
    int hf[3] = {s1[0], fds[0][2], fds[0][3]};
    tlink hl[3];
    memset(hl, 0, sizeof hl);
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) ok = home_link(hf[i], &hl[i]) == 0;
    for (int i = 0; i < 3 && ok; i++) ok = vmt_expect_byte(hf[i], 'R', 90000) == 0;
    CHECKF(ok, "the remote processes did not get ready");
    uint64_t t0 = rcp__now_ns();
    for (int i = 0; i < 3 && ok; i++) vmt_send_byte(hf[i], 'G');
    uint64_t rviol = 0;
    for (int i = 0; i < 3 && ok; i++) {
        unsigned char rep[REP_LEN];
        rc = vmt_read_all(hf[i], rep, REP_LEN, 150000);
        CHECKF(rc == 0, "remote %d's report: %s", i + 1, strerror(-rc));
        if (!rc) rviol += vmt_get64(rep + 8);
    }
    double secs = locals_stop(lp, t0);
    char why[512];
    CHECKF(vmt_reap(&c1, why, sizeof why) == 0, "remote 1: %s", why);
    printf("# two guests: %llu local + %d remote critical sections (1 remote here, 2 on b) in %.1f s;"
           " at most %llu local ones in a row past a queued remote one (budget %d)\n",
           (unsigned long long)sh->local_acq, 3 * PAIR_ITERS, secs,
           (unsigned long long)sh->max_streak, BUDGET);
    if (ok) {
        CHECK_EQ(sh->counter, sh->local_acq + 3 * PAIR_ITERS);
        CHECK_EQ(sh->violations, 0);
        CHECK_EQ(rviol, 0);
        CHECKF(sh->max_streak <= 2 * BUDGET + 4, "%llu local critical sections in a row",
               (unsigned long long)sh->max_streak);
    }
    for (int i = 0; i < 3; i++) {
        if (hl[i].qp) rcp__verbs_qp_destroy(hl[i].qp);
        if (hl[i].cq) rcp__verbs_cq_destroy(hl[i].cq);
        close(hf[i]);
    }
}

/* a: b's remote process 4 takes lock 7 and is killed by b; locals wait; b's process 5 resets
   the remote queue (the documented recovery); locals get the lock */
static void pair_a_killed_remote(void)
{
    int l = vmt_tcp_listen(PAIR_PORT + 1);
    CHECKF(l >= 0, "listen: %s", strerror(-l));
    if (l < 0) return;
    int ctl = vmt_tcp_accept(l, 90000), k4 = vmt_tcp_accept(l, 90000), k5 = -1;
    tlink l4, l5;
    memset(&l4, 0, sizeof l4);
    memset(&l5, 0, sizeof l5);
    alock_hold h;
    int ok = ctl >= 0 && k4 >= 0 && home_link(k4, &l4) == 0 && vmt_expect_byte(k4, 'R', 90000) == 0;
    if (ok) vmt_send_byte(k4, 'G');
    ok = ok && vmt_expect_byte(k4, 'H', 90000) == 0;
    CHECKF(ok, "b's process 4 did not take lock 7");
    if (!ok) goto out;
    vmt_send_byte(ctl, 'K');
    CHECK_EQ(vmt_expect_byte(ctl, 'D', 90000), 0); /* b killed it */
    CHECK_EQ(alock_lock_timeout(tab, 7, rcp__now_ns() + 300000000ull, &h), ALOCK_E_TIMEDOUT);
    k5 = vmt_tcp_accept(l, 90000);
    ok = k5 >= 0 && home_link(k5, &l5) == 0;
    CHECKF(ok, "b's process 5 did not connect");
    if (ok) {
        int rc = alock_lock_timeout(tab, 7, rcp__now_ns() + 60 * VMT_SEC, &h);
        CHECKF(rc == 0, "lock 7 after the reset: %s", alock_strerror(rc));
        if (rc == 0) alock_unlock(&h);
    }
out:
    if (l4.qp) { rcp__verbs_qp_destroy(l4.qp); rcp__verbs_cq_destroy(l4.cq); }
    if (l5.qp) { rcp__verbs_qp_destroy(l5.qp); rcp__verbs_cq_destroy(l5.cq); }
    if (ctl >= 0) close(ctl);
    if (k4 >= 0) close(k4);
    if (k5 >= 0) close(k5);
    close(l);
}

static void pair_b_killed_remote(const char *peer)
{
    int ctl = vmt_tcp_connect(peer, PAIR_PORT + 1, 90000);
    CHECKF(ctl >= 0, "tcp: %s", strerror(-ctl));
    if (ctl < 0) return;
    int k4 = vmt_tcp_connect(peer, PAIR_PORT + 1, 90000);
    CHECKF(k4 >= 0, "tcp: %s", strerror(-k4));
    if (k4 < 0) { close(ctl); return; }
    rproc q4 = {4, k4, 0, {0}, {0}, 0, 7, -1, 0, 0, 0, 0, 0};
    vmt_child c4;
    CHECK_EQ(vmt_spawn(remote_role, -1, &q4, &c4), 0);
    CHECK_EQ(vmt_expect_byte(ctl, 'K', 120000), 0);
    kill(c4.pid, SIGKILL);
    char why[512];
    vmt_reap(&c4, why, sizeof why);
    vmt_send_byte(ctl, 'D');
    int k5 = vmt_tcp_connect(peer, PAIR_PORT + 1, 90000);
    CHECKF(k5 >= 0, "tcp: %s", strerror(-k5));
    if (k5 >= 0) {
        rproc q5 = {5, k5, 0, {0}, {0}, 0, 0, 7, 0, 0, 0, 0, 0};
        vmt_child c5;
        CHECK_EQ(vmt_spawn(remote_role, -1, &q5, &c5), 0);
        CHECKF(vmt_reap(&c5, why, sizeof why) == 0, "reset: %s", why);
        close(k5);
    }
    close(k4);
    close(ctl);
}

static int pair_conn(const char *peer, char kind, int id)
{
    int fd = vmt_tcp_connect(peer, PAIR_PORT, 90000);
    if (fd < 0) return fd;
    unsigned char tag[2] = {(unsigned char)kind, (unsigned char)id};
    int rc = vmt_write_all(fd, tag, 2);
    if (rc) { close(fd); return rc; }
    return fd;
}

static void pair_b(const char *peer)
{
    int s23[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s23)) { CHECKF(0, "socketpair"); return; }
    int h2 = pair_conn(peer, 'h', 2), p2 = pair_conn(peer, 'p', 2);
    int h3 = pair_conn(peer, 'h', 3), p3 = pair_conn(peer, 'p', 3);
    CHECKF(h2 >= 0 && p2 >= 0 && h3 >= 0 && p3 >= 0, "tcp to %s: %s", peer, strerror(-(h2 < 0 ? h2 : p2 < 0 ? p2 : h3 < 0 ? h3 : p3)));
    if (h2 < 0 || p2 < 0 || h3 < 0 || p3 < 0) return;
    /* peers in id order on both sides, so no two processes wait for each other's setup */
    rproc q2 = {2, h2, 2, {p2, s23[0]}, {1, 3}, PAIR_ITERS, 0, -1, 0, 0, 0, 0, 0};
    rproc q3 = {3, h3, 2, {p3, s23[1]}, {1, 2}, PAIR_ITERS, 0, -1, 0, 0, 0, 0, 0};
    vmt_child c2, c3;
    CHECK_EQ(vmt_spawn(remote_role, -1, &q2, &c2), 0);
    CHECK_EQ(vmt_spawn(remote_role, -1, &q3, &c3), 0);
    char why[512];
    CHECKF(vmt_reap(&c2, why, sizeof why) == 0, "remote 2: %s", why);
    CHECKF(vmt_reap(&c3, why, sizeof why) == 0, "remote 3: %s", why);
    close(h2); close(p2); close(h3); close(p3); close(s23[0]); close(s23[1]);
}

/* The home's table and RDMA, as the check name: 0 if set up. */
static int home_setup_test(const char *name)
{
    t_begin(name);
    int rc = home_setup();
    if (!rc) rc = home_rdma();
    t_end();
    return rc;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (getenv("ALOCKT_ONLY") && *getenv("ALOCKT_ONLY")) t_only = getenv("ALOCKT_ONLY");
    if (argc == 1) {
        if (home_setup_test("alock_setup")) return T_DONE();
        RUN(hazard_cpu_and_rdma_faa);
        RUN(mixed_local_and_remote);
        RUN(remote_waiters_time_out);
        RUN(remote_handoffs_two);
        RUN(remote_handoffs_three);
        RUN(debug_invariant_check);
        RUN(killed_remote_holder);
        RUN(remote_holder_dies);
        RUN(remote_waiter_dies);
        home_teardown();
        return T_DONE();
    }
    int is_a = vmt_guest_role(argc, argv, 3, "PEER_IP");
    if (is_a < 0) return 2;
    if (is_a) {
        if (home_setup_test("alock_pair_setup")) return T_DONE();
        TEST(pair_a);
        TEST(pair_a_killed_remote);
        home_teardown();
    } else {
        t_begin("pair_b");
        pair_b(argv[2]);
        t_end();
        t_begin("pair_b_killed_remote");
        pair_b_killed_remote(argv[2]);
        t_end();
    }
    return T_DONE();
}
