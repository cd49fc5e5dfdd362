// VM
// LIBS: -libverbs
/* bench/bench_alock_vm.c - the ALock paper's lock table on Soft-RoCE across two guests
 * (guest roles "alockbench-a" and "alockbench-b", booted by `tests/vm/run.sh alockbench`, used
 * by bench/bench_alock.sh). Usage: bench_alock_vm a|b PEER_IP [quick].
 * The keys are split between the two guests: each guest (node) holds a lock table of KEYS locks
 * in a shmheap (one table per budget); T worker threads per node (T = 1, 2). A worker picks a
 * key: with probability p_local one of its own node's, else one of the other node's; then lock,
 * unlock. Locks compared in the same run, run by run alternated:
 *   alock_bB  ALock with budget B (1, 2, 4, 8, 16): own node's keys through the local cohort
 *             (CPU only), the other node's through the remote cohort (RDMA to the other guest)
 *   spin      RDMA spin lock: compare-and-swap 0 -> 1 until it succeeds, WRITE 0 to unlock; own
 *             node's keys too go through the NIC (rxe loopback)
 *   mcs       all-RDMA MCS: ALock's remote cohort alone for every key (own node's through
 *             loopback): an MCS queue over RDMA plus one line READ per cohort leader
 * Soft-RoCE is software: the responder of a remote operation is kernel work on the target
 * guest's CPUs, which a NIC would not need. Worker threads run SCHED_IDLE so that this work
 * preempts them (as a NIC would not wait for them); "busy" keeps them SCHED_OTHER.
 * Every worker has its own RC queue pairs: one to each node's heap, one to every other worker's
 * descriptors (loopback inside a guest, the virtual wire between them). Guest a leads: it sends
 * each run's configuration to b, both run for the same time, b sends its counts and latency
 * samples back. Prints NAME MEDIAN_NS P99_NS OPS_PER_S lines (bench/hist.h), also each lock's
 * operations on own-node keys and on the other node's keys apart (NAME/local, NAME/remote; their
 * ops/s is their share of the throughput), and ratio lines; all one run.
 * Operations are timed by the TSC (calibrated against CLOCK_MONOTONIC): the guests' clock source
 * is hpet, and a clock_gettime costs about a microsecond ("# harness:" line). Throughput is the
 * sum over the workers of operations / their run's wall time. Each worker keeps at most MAXS
 * latency samples per run: every operation's, or when a run has more, every 2nd, 4th, ...
 * operation's (decided as it goes: each time the buffer fills, every other sample is dropped),
 * so the samples cover the whole run.
 * Before the table, a probe: guest a's first worker alone, every operation on guest b's keys,
 * for every lock and for two older forms of alock_b16's remote path (the compare-and-swap and
 * READ by two ibv_post_send calls; no cas_read at all: three round trips). rxe's port counters
 * (hw_counters) of both guests, read around every run, give packets per operation (guest a's
 * sent packets are its work requests, guest b's the responses) and retransmissions; the
 * table's configurations print both guests' packets per operation too. */
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "tests/vm/vmt.h"
#include "hist.h"
#include <pthread.h>

#define KEYS 256
#define NTAB 5
static const uint32_t budgets[NTAB] = {1, 2, 4, 8, 16};
#define NLOCKS (NTAB + 2)       /* alock_b1..b16, spin, mcs */
#define NPROBE (NLOCKS + 2)     /* the probe also runs two older forms of alock_b16's remote path */
#define NRR (NTAB + 2)          /* a worker's alock_remotes per node: budgets, then those two */
#define L_SPIN NTAB
#define L_MCS (NTAB + 1)
#define WPN 2                   /* worker threads per node */
#define NW (2 * WPN)            /* workers in all: node = w / WPN, remote id = w + 1 */
#define NDESC 4
#define MAXS 100000             /* latency samples per worker and run */
#define PORT 18630
#define REMOTE_BIT (1ull << 63) /* a sample of an operation on the other node's key */

/* every QP pair: worker w's link to a target (home of node 0, 1; peer worker p) */
#define NTGT (2 + NW)           /* targets 0, 1 = homes; 2 + p = worker p (p != w) */
#define NPAIRS (NW * NTGT)
static int tgt_node(int t) { return t < 2 ? t : (t - 2) / WPN; }

struct cfg { uint32_t lock, p_local, t, ms, stop, solo; };

/* rxe's port counters (/sys/class/infiniband/DEV/ports/1/hw_counters), read around every run */
static const char *const ctr_names[] = {"sent_pkts", "rcvd_pkts", "duplicate_request",
                                        "completer_retry_err", "rcvd_seq_err",
                                        "out_of_seq_request"};
#define NCTR 6
static uint64_t ctr_delta[NCTR];
struct nodeinfo { uint64_t lines[NTAB], spin, descs[WPN]; uint32_t heap_rkey, desc_rkey; };

static int me;                  /* our node: 0 = a, 1 = b */
static int quick, idle_workers;
static rcp__verbs_dev dev;
static shmheap *heap;
static alock_table *tabs[NTAB];
static uint64_t *spinw;
static void *descmem;
static struct ibv_mr *heap_mr, *desc_mr;
static struct nodeinfo info[2];
static struct ibv_qp *qps[NPAIRS][2];  /* [pair][0 active side, 1 passive side] */
static struct ibv_cq *acq[NPAIRS], *pcq;
static rcp__verbs_qp_opts qo;

/* The workers time their operations by the TSC, calibrated against CLOCK_MONOTONIC at start:
   in these TCG guests the clock source is hpet and every clock_gettime is a system call plus an
   emulated device read (about a microsecond, several times ALock's local lock+unlock). */
static inline uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return rcp__now_ns();
#endif
}
static double ns_per_tick = 1.0;

static void calibrate(void)
{
    uint64_t n0 = rcp__now_ns(), t0 = ticks();
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    uint64_t n1 = rcp__now_ns(), t1 = ticks();
    if (t1 > t0) ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* ---------------------------------------------------------------- connections */

static int pair_w(int i) { return i / NTGT; }
static int pair_t(int i) { return i % NTGT; }
static int pair_valid(int i) { return pair_t(i) < 2 || pair_t(i) - 2 != pair_w(i); }

/* Create the sides of every pair that live on this node, swap the cross-node endpoints with the
   other guest over sock, connect everything. */
static int connect_all(int sock)
{
    memset(&qo, 0, sizeof qo);
    qo.timeout = 16; /* 268 ms: two TCG guests on a shared host stall for tens of ms */
    qo.retry_cnt = 6;
    int rc = rcp__verbs_cq_create(&dev, 16, 0, &pcq);
    if (rc) return rc;
    static unsigned char out[NPAIRS][VMT_EP_WIRE], in[NPAIRS][VMT_EP_WIRE];
    static rcp__verbs_ep eps[NPAIRS][2]; /* ours: each with the PSN we tell the peer */
    memset(out, 0, sizeof out);
    for (int i = 0; i < NPAIRS; i++) {
        if (!pair_valid(i)) continue;
        int an = pair_w(i) / WPN, pn = tgt_node(pair_t(i));
        if (an == me) {
            if ((rc = rcp__verbs_cq_create(&dev, 16, 0, &acq[i])) ||
                (rc = rcp__verbs_qp_create(&dev, acq[i], acq[i], &qo, &qps[i][0])))
                return rc;
        }
        if (pn == me && (rc = rcp__verbs_qp_create(&dev, pcq, pcq, &qo, &qps[i][1]))) return rc;
        for (int side = 0; side < 2; side++)
            if (qps[i][side]) vmt_ep_local(&dev, qps[i][side], 0, 0, &eps[i][side]);
        if (an != pn) vmt_ep_pack(&eps[i][an == me ? 0 : 1], out[i]);
    }
    if ((rc = vmt_write_all(sock, out, sizeof out)) || (rc = vmt_read_all(sock, in, sizeof in, 60000)))
        return rc;
    for (int i = 0; i < NPAIRS; i++) {
        if (!pair_valid(i)) continue;
        int an = pair_w(i) / WPN, pn = tgt_node(pair_t(i));
        rcp__verbs_ep p;
        if (an == pn && an == me) { /* loopback: both sides are ours */
            if ((rc = vmt_rc_connect(&dev, qps[i][0], &eps[i][0], &eps[i][1], &qo)) ||
                (rc = vmt_rc_connect(&dev, qps[i][1], &eps[i][1], &eps[i][0], &qo)))
                return rc;
        } else if (an == me || pn == me) {
            int side = an == me ? 0 : 1;
            if ((rc = vmt_ep_unpack(in[i], &p))) return rc;
            if ((rc = vmt_rc_connect(&dev, qps[i][side], &eps[i][side], &p, &qo))) return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- workers */

typedef struct worker {
    int w;                      /* global index */
    alock_link home[2], peer[NW];
    alock_remote *rr[2][NRR];
    alock_link home2[2], home3[2]; /* home[m] with cas_read as two posts; without cas_read */
    hist hs;
    uint64_t ops, errs, seed, elapsed_ns; /* elapsed: the run's wall time (CLOCK_MONOTONIC) */
    pthread_t th;
} worker;

static worker wk[WPN];
static struct cfg cur;
static pthread_barrier_t bar;

/* alock.h's verbs link before it posted the two as one list: the compare-and-swap and the READ
   by two ibv_post_send calls (two doorbells), for the probe's A/B */
static int cas_read_two_posts(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired,
                              uint64_t *old, uint64_t read_addr, void *dst, uint32_t len)
{
    alock__vlink *v = (alock__vlink *)conn;
    uint64_t *b = (uint64_t *)(void *)v->buf;
    if (len > sizeof v->buf - 64) return -EINVAL;
    int rc = rcp__verbs_post_cas(v->qp, 5, b, v->mr->lkey, raddr, v->rkey, expect, desired, 0);
    if (!rc) rc = rcp__verbs_post_read(v->qp, 6, v->buf + 64, len, v->mr->lkey, read_addr, v->rkey,
                                       IBV_SEND_SIGNALED);
    if (!rc) rc = alock__v_wait(v);
    if (!rc) {
        *old = rcp__load(b);
        memcpy(dst, v->buf + 64, len);
    }
    return rc;
}

static int worker_setup(worker *k)
{
    int w = k->w, rc;
    for (int m = 0; m < 2; m++)
        if ((rc = alock_verbs_link_create(qps[w * NTGT + m][0], acq[w * NTGT + m], info[m].heap_rkey,
                                          20000, &k->home[m])))
            return rc;
    for (int p = 0; p < NW; p++) {
        if (p == w) continue;
        int i = w * NTGT + 2 + p;
        if ((rc = alock_verbs_link_create(qps[i][0], acq[i], info[p / WPN].desc_rkey, 20000, &k->peer[p])))
            return rc;
    }
    for (int m = 0; m < 2; m++) {
        k->home2[m] = k->home3[m] = k->home[m];
        k->home2[m].cas_read = cas_read_two_posts;
        k->home3[m].cas_read = NULL;
    }
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < NRR; t++) {
            alock_remote_opts o;
            memset(&o, 0, sizeof o);
            o.id = (uint16_t)(w + 1);
            o.lines_addr = info[m].lines[t < NTAB ? t : NTAB - 1];
            o.nlocks = KEYS;
            o.budget = budgets[t < NTAB ? t : NTAB - 1];
            o.home = t < NTAB ? k->home[m] : t == NTAB ? k->home2[m] : k->home3[m];
            o.descs = (char *)(uintptr_t)info[me].descs[w % WPN] +
                      ALOCK_REMOTE_MEM(NDESC) * (size_t)(m * NRR + t);
            o.ndesc = NDESC;
            if ((rc = alock_remote_create(&o, &k->rr[m][t]))) return rc;
            for (int p = 0; p < NW; p++)
                if (p != w && (rc = alock_remote_set_peer(k->rr[m][t], (uint16_t)(p + 1), &k->peer[p])))
                    return rc;
        }
    k->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1);
    return hist_init(&k->hs, MAXS) ? -ENOMEM : 0;
}

static void *worker_main(void *arg)
{
    worker *k = (worker *)arg;
    int node = me;
    if (idle_workers) { /* rxe's kernel work (the emulated NIC) preempts us at once */
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    }
    for (;;) {
        pthread_barrier_wait(&bar); /* cur is set */
        struct cfg c = cur;
        if (c.stop) return NULL;
        k->hs.n = 0;
        k->ops = k->errs = k->elapsed_ns = 0;
        if (c.solo ? k->w == 0 : k->w % WPN < (int)c.t) {
            uint64_t w0 = rcp__now_ns(), t0 = ticks(), stride = 1, skip = 0;
            uint64_t end = t0 + (uint64_t)((double)c.ms * 1e6 / ns_per_tick);
            for (;;) {
                uint64_t s = ticks();
                if (s >= end) break;
                uint64_t x = rng(&k->seed);
                int m = (x % 100) < c.p_local ? node : 1 - node;
                uint32_t key = (uint32_t)((x >> 8) % KEYS);
                uint64_t flag = m != node ? REMOTE_BIT : 0;
                if (c.lock < NTAB && m == node) {
                    alock_hold hd;
                    if (alock_lock(tabs[c.lock], key, &hd) < 0) k->errs++;
                    else alock_unlock(&hd);
                } else if (c.lock < NTAB || c.lock == L_MCS || c.lock >= NLOCKS) {
                    alock_rhold hd;
                    alock_remote *r = k->rr[m][c.lock < NTAB ? c.lock : c.lock == L_MCS ? NTAB - 1
                                                                       : NTAB + (c.lock - NLOCKS)];
                    if (alock_remote_lock(r, key, &hd)) k->errs++;
                    else if (alock_remote_unlock(&hd)) k->errs++;
                } else {
                    uint64_t addr = info[m].spin + (uint64_t)key * 64, old = 1, z = 0;
                    while (old != 0)
                        if (k->home[m].cas(k->home[m].conn, addr, 0, 1, &old)) { k->errs++; break; }
                    if (k->home[m].write(k->home[m].conn, addr, &z, 8)) k->errs++;
                }
                uint64_t lat = (uint64_t)((double)(ticks() - s) * ns_per_tick) | flag;
                if (++skip >= stride) { /* every stride-th operation: spread over the run */
                    skip = 0;
                    if (k->hs.n >= MAXS) { /* full: keep every other one, halve the rate */
                        for (size_t i = 0; i < MAXS / 2; i++) k->hs.ns[i] = k->hs.ns[2 * i];
                        k->hs.n = MAXS / 2;
                        stride *= 2;
                    }
                    hist_add(&k->hs, lat);
                }
                k->ops++;
            }
            k->elapsed_ns = rcp__now_ns() - w0;
        }
        pthread_barrier_wait(&bar); /* results are in */
    }
}

/* ---------------------------------------------------------------- one run on this node */

static uint64_t ctr_read(int i)
{
    char p[256], buf[32];
    snprintf(p, sizeof p, "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev.name,
             ctr_names[i]);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fgets(buf, sizeof buf, f)) v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

static uint64_t ctr0[NCTR];

/* One run of c on this node's workers; rxe's counters are read before it starts, and after it by
   ctr_end (guest b: once guest a's run is over, so that b counts its answers to all of a's work) */
static void run_local(const struct cfg *c)
{
    for (int i = 0; i < NCTR; i++) ctr0[i] = ctr_read(i);
    cur = *c;
    pthread_barrier_wait(&bar);
    if (c->stop) return;
    pthread_barrier_wait(&bar);
}

static void ctr_end(void)
{
    for (int i = 0; i < NCTR; i++) ctr_delta[i] = ctr_read(i) - ctr0[i];
}

static int send_results(int sock)
{
    if (vmt_write_all(sock, ctr_delta, sizeof ctr_delta)) return -EIO;
    for (int j = 0; j < WPN; j++) {
        uint64_t hdr[4] = {wk[j].ops, wk[j].errs, wk[j].hs.n, wk[j].elapsed_ns};
        int rc = vmt_write_all(sock, hdr, sizeof hdr);
        if (!rc && hdr[2]) rc = vmt_write_all(sock, wk[j].hs.ns, hdr[2] * 8);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- guest a: the leader */

typedef struct acc {
    hist all, loc, rem;
    double rate[8];
    int nrate;
    uint64_t errs, ops, ctr[2][NCTR]; /* ctr[node]: rxe counters summed over the runs */
} acc;

static void acc_add(acc *a, const uint64_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = s[i] & ~REMOTE_BIT;
        hist_add(&a->all, v);
        hist_add(s[i] & REMOTE_BIT ? &a->rem : &a->loc, v);
    }
}

static double median_rate(acc *a)
{
    double r[8];
    int n = a->nrate;
    memcpy(r, a->rate, sizeof r);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (r[j] < r[i]) { double x = r[i]; r[i] = r[j]; r[j] = x; }
    return n ? r[n / 2] : 0;
}

static void acc_reset(acc *a)
{
    a->all.n = a->loc.n = a->rem.n = 0;
    a->all.sorted = a->loc.sorted = a->rem.sorted = 0;
    a->nrate = 0;
    a->errs = 0;
    memset(a->ctr, 0, sizeof a->ctr);
    a->ops = 0;
}

/* One run of configuration c on both guests; its samples, counts and counters into a. */
static int one_run(int sock, const struct cfg *c, acc *a, uint64_t *tmp)
{
    if (vmt_write_all(sock, c, sizeof *c)) { printf("FAIL alockbench: b is gone\n"); return 1; }
    run_local(c);
    ctr_end();
    if (vmt_send_byte(sock, 'D')) { printf("FAIL alockbench: b is gone\n"); return 1; }
    uint64_t ops = 0, cb[NCTR];
    double rate = 0; /* the sum of the workers' ops / their wall time */
    for (int i = 0; i < NCTR; i++) a->ctr[0][i] += ctr_delta[i];
    for (int j = 0; j < WPN; j++) {
        ops += wk[j].ops;
        if (wk[j].elapsed_ns) rate += (double)wk[j].ops * 1e9 / (double)wk[j].elapsed_ns;
        a->errs += wk[j].errs;
        acc_add(a, wk[j].hs.ns, wk[j].hs.n);
    }
    if (vmt_read_all(sock, cb, sizeof cb, 120000)) {
        printf("FAIL alockbench: b did not report\n");
        return 1;
    }
    for (int i = 0; i < NCTR; i++) a->ctr[1][i] += cb[i];
    for (int j = 0; j < WPN; j++) {
        uint64_t hdr[4];
        if (vmt_read_all(sock, hdr, sizeof hdr, 120000) || hdr[2] > MAXS ||
            (hdr[2] && vmt_read_all(sock, tmp, hdr[2] * 8, 120000))) {
            printf("FAIL alockbench: b did not report\n");
            return 1;
        }
        ops += hdr[0];
        if (hdr[3]) rate += (double)hdr[0] * 1e9 / (double)hdr[3];
        a->errs += hdr[1];
        acc_add(a, tmp, hdr[2]);
    }
    a->ops += ops;
    a->rate[a->nrate++] = rate;
    return 0;
}

/* retransmissions seen by both guests: duplicate requests (responder), completer retries */
static unsigned long long retrans(const acc *a)
{
    return (unsigned long long)(a->ctr[0][2] + a->ctr[1][2] + a->ctr[0][3] + a->ctr[1][3]);
}

static void lock_name(int l, char *name, size_t n)
{
    if (l < NTAB) snprintf(name, n, "alock_b%u", budgets[l]);
    else if (l >= NLOCKS)
        snprintf(name, n, "alock_b%u_%s", budgets[NTAB - 1], l == NLOCKS ? "2posts" : "nocasread");
    else snprintf(name, n, "%s", l == L_SPIN ? "spin" : "mcs");
}

/* The probe: one worker of guest a alone, every operation on one of guest b's keys, nothing
   else running; rxe's counters on both guests give the packets each lock+unlock sends (a's
   sent packets = its work requests, b's = the responses), and their retransmissions. */
static int probe(int sock, acc *A, uint64_t *tmp, int reps, int ms)
{
    for (int l = 0; l < NPROBE; l++) acc_reset(&A[l]);
    for (int rep = 0; rep < reps; rep++)
        for (int l = 0; l < NPROBE; l++) {
            struct cfg c = {(uint32_t)l, 0, 1, (uint32_t)ms, 0, 1};
            if (one_run(sock, &c, &A[l], tmp)) return 1;
        }
    printf("# probe: one worker of guest a alone, lock+unlock of guest b's keys only, %d runs of "
           "%d ms per lock alternated; per operation: packets guest a sent (= work requests), "
           "packets guest b sent (= responses), retransmissions seen (b's duplicate_request + "
           "a's completer_retry_err)\n", reps, ms);
    for (int l = 0; l < NPROBE; l++) {
        char name[64];
        lock_name(l, name, sizeof name);
        char n2[80];
        snprintf(n2, sizeof n2, "probe/%s", name);
        double ops = A[l].ops ? (double)A[l].ops : 1;
        if (A[l].all.n) hist_print(&A[l].all, n2, median_rate(&A[l]));
        printf("# probe %s: %llu ops, a sent %.3f pkts/op, b sent %.3f pkts/op, retransmissions "
               "%llu, seq errors %llu\n", name, (unsigned long long)A[l].ops,
               (double)A[l].ctr[0][0] / ops, (double)A[l].ctr[1][0] / ops,
               retrans(&A[l]),
               (unsigned long long)(A[l].ctr[0][4] + A[l].ctr[1][4] + A[l].ctr[0][5] +
                                    A[l].ctr[1][5]));
        if (A[l].errs) {
            printf("FAIL alockbench: probe %s: %llu failed operations\n", name,
                   (unsigned long long)A[l].errs);
            return 1;
        }
    }
    double sm = (double)hist_median(&A[L_SPIN].all), smin = (double)hist_min(&A[L_SPIN].all);
    printf("# probe, median (min) latency over spin's:");
    for (int l = 0; l < NPROBE; l++) {
        char name[64];
        lock_name(l, name, sizeof name);
        if (l != L_SPIN && A[l].all.n && sm > 0)
            printf(" %s %.2fx (%.2fx)", name, (double)hist_median(&A[l].all) / sm,
                   (double)hist_min(&A[l].all) / smin);
    }
    printf("\n");
    return 0;
}

/* What the harness costs in this guest: the clock source, one rcp__now_ns() (the workers read
   the clock twice per operation), and an uncontended lock+unlock of the local cohort timed in
   one batch (no clock read per operation). */
static void clock_facts(void)
{
    char cs[64] = "?";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (fgets(cs, sizeof cs, f)) cs[strcspn(cs, "\n")] = 0;
        fclose(f);
    }
    enum { N = 100000 };
    uint64_t t0 = rcp__now_ns(), x = 0;
    for (int i = 0; i < N; i++) x += rcp__now_ns();
    uint64_t t1 = rcp__now_ns();
    alock_hold hd;
    int errs = 0;
    for (int i = 0; i < N; i++) {
        if (alock_lock(tabs[0], (uint32_t)i % KEYS, &hd) < 0) errs++;
        else alock_unlock(&hd);
    }
    uint64_t t2 = rcp__now_ns();
    for (int i = 0; i < N; i++) x += ticks();
    uint64_t t3 = rcp__now_ns();
    printf("# harness: clocksource %s; rcp__now_ns() %.1f ns per call; TSC read %.1f ns per call "
           "(%.4f ns per tick, calibrated over 200 ms); alock local lock+unlock %.1f ns per pair "
           "in a batch of %d (no clock reads)%s\n", cs, (double)(t1 - t0) / N,
           (double)(t3 - t2) / N, ns_per_tick, (double)(t2 - t1) / N, N, errs ? " FAILED" : "");
    (void)x;
}

static int lead(int sock)
{
    static const uint32_t pls[] = {50, 85, 95, 100};
    int reps = quick ? 1 : 3, ms = quick ? 300 : 1000, failed = 0;
    int npl = quick ? 2 : 4;
    size_t cap = (size_t)NW * MAXS * (size_t)reps;
    static acc A[NPROBE];
    for (int l = 0; l < NPROBE; l++)
        if (hist_init(&A[l].all, cap) || hist_init(&A[l].loc, cap) || hist_init(&A[l].rem, cap)) {
            printf("FAIL alockbench: out of memory\n");
            return 1;
        }
    uint64_t *tmp = (uint64_t *)malloc((size_t)MAXS * 8);
    if (!tmp) { printf("FAIL alockbench: out of memory\n"); return 1; }
    clock_facts();
    if (probe(sock, A, tmp, reps, ms)) failed = 1;
    printf("# lock table: 2 guests x %d keys, rxe between them, lock+unlock per op; each "
           "configuration %d runs of %d ms, the %d locks alternated run by run; throughput = "
           "median of the runs (ops/s of all workers), latency over all their operations; "
           "workers %s\n", KEYS, reps, ms, NLOCKS,
           idle_workers ? "SCHED_IDLE (rxe's softirq work, the emulated NIC, preempts them)"
                        : "SCHED_OTHER (they compete with rxe's softirq work for the vCPUs)");
    for (uint32_t t = 1; t <= WPN && !failed; t++)
        for (int pi = 0; pi < npl && !failed; pi++) {
            uint32_t pl = quick ? (pi ? 100 : 50) : pls[pi];
            for (int l = 0; l < NLOCKS; l++) acc_reset(&A[l]);
            for (int rep = 0; rep < reps && !failed; rep++)
                for (int l = 0; l < NLOCKS && !failed; l++) {
                    struct cfg c = {(uint32_t)l, pl, t, (uint32_t)ms, 0, 0};
                    if (one_run(sock, &c, &A[l], tmp)) return 1;
                }
            double thr[NLOCKS];
            for (int l = 0; l < NLOCKS; l++) {
                thr[l] = median_rate(&A[l]);
                char ln[32], name[64];
                lock_name(l, ln, sizeof ln);
                snprintf(name, sizeof name, "%s/p%u/t%u", ln, pl, t);
                if (A[l].all.n) hist_print(&A[l].all, name, thr[l]);
                {
                    char n2[80];
                    double share = A[l].all.n ? (double)A[l].loc.n / (double)A[l].all.n : 0;
                    snprintf(n2, sizeof n2, "%s/local", name);
                    if (A[l].loc.n) hist_print(&A[l].loc, n2, thr[l] * share);
                    snprintf(n2, sizeof n2, "%s/remote", name);
                    if (A[l].rem.n) hist_print(&A[l].rem, n2, thr[l] * (1 - share));
                }
                if (A[l].errs) {
                    printf("FAIL alockbench: %s: %llu failed operations\n", name, (unsigned long long)A[l].errs);
                    failed = 1;
                }
            }
            printf("# p_local %u%%, %u per node: alock/spin throughput", pl, t);
            for (int l = 0; l < NTAB; l++) printf(" b%u %.2fx", budgets[l], thr[l] / thr[L_SPIN]);
            printf("; alock/mcs");
            for (int l = 0; l < NTAB; l++) printf(" b%u %.2fx", budgets[l], thr[l] / thr[L_MCS]);
            printf("; mcs/spin %.2fx\n", thr[L_MCS] / thr[L_SPIN]);
            printf("# p_local %u%%, %u per node: rxe packets per op (both guests' sent_pkts), "
                   "retransmissions:", pl, t);
            for (int l = 0; l < NLOCKS; l++) {
                char ln[32];
                lock_name(l, ln, sizeof ln);
                double sent = (double)(A[l].ctr[0][0] + A[l].ctr[1][0]);
                printf(" %s %.2f %llu", ln, sent / (double)(A[l].ops ? A[l].ops : 1),
                       retrans(&A[l]));
            }
            printf("\n");
        }
    struct cfg stop = {0, 0, 0, 0, 1, 0};
    vmt_write_all(sock, &stop, sizeof stop);
    run_local(&stop);
    return failed;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    int a = vmt_guest_role(argc == 4 ? 3 : argc, argv, 3, "PEER_IP [quick][,busy]");
    if (a < 0) return 2;
    me = a ? 0 : 1;
    quick = argc > 3 && strstr(argv[3], "quick") != NULL;
    idle_workers = !(argc > 3 && strstr(argv[3], "busy") != NULL);
    const char *peer = argv[2];
    char hn[64];
    snprintf(hn, sizeof hn, "alock-bench-%c", 'a' + me);
    shmheap_unlink(hn, NULL);
    shmheap_opts ho = {.size = 8 << 20};
    int rc = shmheap_create(hn, &ho, &heap);
    if (rc) { printf("FAIL alockbench: shmheap_create: %s\n", shmheap_strerror(rc)); return 1; }
    for (int t = 0; t < NTAB; t++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%u", budgets[t]);
        alock_table_opts ao = {.nlocks = KEYS, .budget = budgets[t]};
        if ((rc = alock_table_create(heap, tn, &ao, &tabs[t]))) {
            printf("FAIL alockbench: alock_table_create: %s\n", alock_strerror(rc));
            return 1;
        }
    }
    spinw = (uint64_t *)shmheap_aligned_alloc(heap, 64, (size_t)KEYS * 64);
    size_t dlen = ALOCK_REMOTE_MEM(NDESC) * 2 * NRR * WPN;
    if (!spinw || posix_memalign(&descmem, 4096, dlen)) { printf("FAIL alockbench: memory\n"); return 1; }
    memset(spinw, 0, (size_t)KEYS * 64);
    memset(descmem, 0, dlen);
    if ((rc = rcp__verbs_open(NULL, &dev)) || (rc = rcp__verbs_reg(&dev, shmheap_base(heap), shmheap_size(heap), 0, &heap_mr)) ||
        (rc = rcp__verbs_reg(&dev, descmem, dlen, 0, &desc_mr))) {
        printf("FAIL alockbench: device: %s\n", strerror(-rc));
        return 1;
    }
    struct nodeinfo mine;
    memset(&mine, 0, sizeof mine);
    for (int t = 0; t < NTAB; t++) {
        void *lines;
        size_t len;
        alock_table_lines(tabs[t], &lines, &len);
        mine.lines[t] = (uint64_t)(uintptr_t)lines;
    }
    mine.spin = (uint64_t)(uintptr_t)spinw;
    for (int j = 0; j < WPN; j++)
        mine.descs[j] =
            (uint64_t)(uintptr_t)descmem + (uint64_t)j * ALOCK_REMOTE_MEM(NDESC) * 2 * NRR;
    mine.heap_rkey = heap_mr->rkey;
    mine.desc_rkey = desc_mr->rkey;
    int sock = vmt_tcp_peer(a, peer, PORT);
    if (sock < 0) return 1;
    info[me] = mine;
    if ((rc = vmt_write_all(sock, &mine, sizeof mine)) || (rc = vmt_read_all(sock, &info[1 - me], sizeof mine, 60000))) {
        printf("FAIL alockbench: exchange: %s\n", strerror(-rc));
        return 1;
    }
    if ((rc = connect_all(sock))) { printf("FAIL alockbench: connect: %s\n", strerror(-rc)); return 1; }
    pthread_barrier_init(&bar, NULL, WPN + 1);
    for (int j = 0; j < WPN; j++) {
        wk[j].w = me * WPN + j;
        if ((rc = worker_setup(&wk[j]))) { printf("FAIL alockbench: worker: %s\n", alock_strerror(rc)); return 1; }
    }
    for (int j = 0; j < WPN; j++) pthread_create(&wk[j].th, NULL, worker_main, &wk[j]);
    /* both sides ready before the first run */
    if (vmt_send_byte(sock, 'R') || vmt_expect_byte(sock, 'R', 120000)) { printf("FAIL alockbench: peer not ready\n"); return 1; }
    calibrate();
    int failed = 0;
    if (a) {
        failed = lead(sock);
    } else {
        for (;;) {
            struct cfg c;
            if (vmt_read_all(sock, &c, sizeof c, 600000)) { printf("FAIL alockbench-b: a is gone\n"); failed = 1; c.stop = 1; }
            run_local(&c);
            if (c.stop) break;
            if (vmt_expect_byte(sock, 'D', 600000)) c.stop = 1; /* a's run is over */
            ctr_end();
            if (c.stop || send_results(sock)) {
                printf("FAIL alockbench-b: a is gone\n");
                failed = 1;
                struct cfg stop = {0, 0, 0, 0, 1, 0};
                run_local(&stop);
                break;
            }
        }
    }
    for (int j = 0; j < WPN; j++) pthread_join(wk[j].th, NULL);
    printf(failed ? "FAIL alockbench-%c\n" : "ok alockbench-%c\n", 'a' + me);
    return failed;
}
