// VM
// LIBS: -libverbs
/* tests/vm/bench_alock_vm.c - the ALock paper's lock table on Soft-RoCE across two guests
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
 * ops/s is their share of the throughput), and ratio lines; all one run. */
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "vmt.h"
#include "../../bench/hist.h"
#include <pthread.h>

#define KEYS 256
#define NTAB 5
static const uint32_t budgets[NTAB] = {1, 2, 4, 8, 16};
#define NLOCKS (NTAB + 2)       /* alock_b1..b16, spin, mcs */
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

struct cfg { uint32_t lock, p_local, t, ms, stop; };
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
    static unsigned char out[NPAIRS][RCP__VERBS_EP_WIRE], in[NPAIRS][RCP__VERBS_EP_WIRE];
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
            if (qps[i][side]) rcp__verbs_ep_local(&dev, qps[i][side], 0, 0, &eps[i][side]);
        if (an != pn) rcp__verbs_ep_pack(&eps[i][an == me ? 0 : 1], out[i]);
    }
    if ((rc = vmt_write_all(sock, out, sizeof out)) || (rc = vmt_read_all(sock, in, sizeof in, 60000)))
        return rc;
    for (int i = 0; i < NPAIRS; i++) {
        if (!pair_valid(i)) continue;
        int an = pair_w(i) / WPN, pn = tgt_node(pair_t(i));
        rcp__verbs_ep p;
        if (an == pn && an == me) { /* loopback: both sides are ours */
            if ((rc = rcp__verbs_rc_connect(&dev, qps[i][0], &eps[i][0], &eps[i][1], &qo)) ||
                (rc = rcp__verbs_rc_connect(&dev, qps[i][1], &eps[i][1], &eps[i][0], &qo)))
                return rc;
        } else if (an == me || pn == me) {
            int side = an == me ? 0 : 1;
            if ((rc = rcp__verbs_ep_unpack(in[i], &p))) return rc;
            if ((rc = rcp__verbs_rc_connect(&dev, qps[i][side], &eps[i][side], &p, &qo))) return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- workers */

typedef struct worker {
    int w;                      /* global index */
    alock_link home[2], peer[NW];
    alock_remote *rr[2][NTAB];
    hist hs;
    uint64_t ops, errs, seed;
    pthread_t th;
} worker;

static worker wk[WPN];
static struct cfg cur;
static pthread_barrier_t bar;

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
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < NTAB; t++) {
            alock_remote_opts o;
            memset(&o, 0, sizeof o);
            o.id = (uint16_t)(w + 1);
            o.lines_addr = info[m].lines[t];
            o.nlocks = KEYS;
            o.budget = budgets[t];
            o.home = k->home[m];
            o.descs = (char *)(uintptr_t)info[me].descs[w % WPN] + ALOCK_REMOTE_MEM(NDESC) * (size_t)(m * NTAB + t);
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
        k->ops = k->errs = 0;
        if (k->w % WPN < (int)c.t) {
            uint64_t end = rcp__now_ns() + (uint64_t)c.ms * 1000000ull;
            for (;;) {
                uint64_t s = rcp__now_ns();
                if (s >= end) break;
                uint64_t x = rng(&k->seed);
                int m = (x % 100) < c.p_local ? node : 1 - node;
                uint32_t key = (uint32_t)((x >> 8) % KEYS);
                uint64_t flag = m != node ? REMOTE_BIT : 0;
                if (c.lock < NTAB && m == node) {
                    alock_hold hd;
                    if (alock_lock(tabs[c.lock], key, &hd) < 0) k->errs++;
                    else alock_unlock(&hd);
                } else if (c.lock < NTAB || c.lock == L_MCS) {
                    alock_rhold hd;
                    alock_remote *r = k->rr[m][c.lock < NTAB ? c.lock : NTAB - 1];
                    if (alock_remote_lock(r, key, &hd)) k->errs++;
                    else if (alock_remote_unlock(&hd)) k->errs++;
                } else {
                    uint64_t addr = info[m].spin + (uint64_t)key * 64, old = 1, z = 0;
                    while (old != 0)
                        if (k->home[m].cas(k->home[m].conn, addr, 0, 1, &old)) { k->errs++; break; }
                    if (k->home[m].write(k->home[m].conn, addr, &z, 8)) k->errs++;
                }
                hist_add(&k->hs, (rcp__now_ns() - s) | flag);
                k->ops++;
            }
        }
        pthread_barrier_wait(&bar); /* results are in */
    }
}

/* ---------------------------------------------------------------- one run on this node */

static void run_local(const struct cfg *c)
{
    cur = *c;
    pthread_barrier_wait(&bar);
    if (c->stop) return;
    pthread_barrier_wait(&bar);
}

static int send_results(int sock)
{
    for (int j = 0; j < WPN; j++) {
        uint64_t hdr[3] = {wk[j].ops, wk[j].errs, wk[j].hs.n};
        int rc = vmt_write_all(sock, hdr, sizeof hdr);
        if (!rc && hdr[2]) rc = vmt_write_all(sock, wk[j].hs.ns, hdr[2] * 8);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- guest a: the leader */

typedef struct acc { hist all, loc, rem; double rate[8]; int nrate; uint64_t errs; } acc;

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

static int lead(int sock)
{
    static const uint32_t pls[] = {50, 85, 95, 100};
    int reps = quick ? 1 : 3, ms = quick ? 300 : 1000, failed = 0;
    int npl = quick ? 2 : 4;
    size_t cap = (size_t)NW * MAXS * (size_t)reps;
    static acc A[NLOCKS];
    for (int l = 0; l < NLOCKS; l++)
        if (hist_init(&A[l].all, cap) || hist_init(&A[l].loc, cap) || hist_init(&A[l].rem, cap)) {
            printf("FAIL alockbench: out of memory\n");
            return 1;
        }
    uint64_t *tmp = (uint64_t *)malloc((size_t)MAXS * 8);
    printf("# lock table: 2 guests x %d keys, rxe between them, lock+unlock per op; each "
           "configuration %d runs of %d ms, the %d locks alternated run by run; throughput = "
           "median of the runs (ops/s of all workers), latency over all their operations; "
           "workers %s\n", KEYS, reps, ms, NLOCKS,
           idle_workers ? "SCHED_IDLE (rxe's softirq work, the emulated NIC, preempts them)"
                        : "SCHED_OTHER (they compete with rxe's softirq work for the vCPUs)");
    for (uint32_t t = 1; t <= WPN; t++)
        for (int pi = 0; pi < npl; pi++) {
            uint32_t pl = quick ? (pi ? 100 : 50) : pls[pi];
            for (int l = 0; l < NLOCKS; l++) {
                A[l].all.n = A[l].loc.n = A[l].rem.n = 0;
                A[l].all.sorted = A[l].loc.sorted = A[l].rem.sorted = 0;
                A[l].nrate = 0;
                A[l].errs = 0;
            }
            for (int rep = 0; rep < reps; rep++)
                for (int l = 0; l < NLOCKS; l++) {
                    struct cfg c = {(uint32_t)l, pl, t, (uint32_t)ms, 0};
                    if (vmt_write_all(sock, &c, sizeof c)) { printf("FAIL alockbench: b is gone\n"); return 1; }
                    run_local(&c);
                    uint64_t ops = 0;
                    for (int j = 0; j < WPN; j++) {
                        ops += wk[j].ops;
                        A[l].errs += wk[j].errs;
                        acc_add(&A[l], wk[j].hs.ns, wk[j].hs.n);
                    }
                    for (int j = 0; j < WPN; j++) {
                        uint64_t hdr[3];
                        if (vmt_read_all(sock, hdr, sizeof hdr, 120000) || hdr[2] > MAXS ||
                            (hdr[2] && vmt_read_all(sock, tmp, hdr[2] * 8, 120000))) {
                            printf("FAIL alockbench: b did not report\n");
                            return 1;
                        }
                        ops += hdr[0];
                        A[l].errs += hdr[1];
                        acc_add(&A[l], tmp, hdr[2]);
                    }
                    A[l].rate[A[l].nrate++] = hist_ops_per_s(ops, (uint64_t)ms * 1000000ull);
                }
            double thr[NLOCKS];
            for (int l = 0; l < NLOCKS; l++) {
                thr[l] = median_rate(&A[l]);
                char name[64];
                if (l < NTAB) snprintf(name, sizeof name, "alock_b%u/p%u/t%u", budgets[l], pl, t);
                else snprintf(name, sizeof name, "%s/p%u/t%u", l == L_SPIN ? "spin" : "mcs", pl, t);
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
        }
    struct cfg stop = {0, 0, 0, 0, 1};
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
    size_t dlen = ALOCK_REMOTE_MEM(NDESC) * 2 * NTAB * WPN;
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
    for (int j = 0; j < WPN; j++) mine.descs[j] = (uint64_t)(uintptr_t)descmem + (uint64_t)j * ALOCK_REMOTE_MEM(NDESC) * 2 * NTAB;
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
    int failed = 0;
    if (a) {
        failed = lead(sock);
    } else {
        for (;;) {
            struct cfg c;
            if (vmt_read_all(sock, &c, sizeof c, 600000)) { printf("FAIL alockbench-b: a is gone\n"); failed = 1; c.stop = 1; }
            run_local(&c);
            if (c.stop) break;
            if (send_results(sock)) {
                printf("FAIL alockbench-b: a is gone\n");
                failed = 1;
                struct cfg stop = {0, 0, 0, 0, 1};
                run_local(&stop);
                break;
            }
        }
    }
    for (int j = 0; j < WPN; j++) pthread_join(wk[j].th, NULL);
    printf(failed ? "FAIL alockbench-%c\n" : "ok alockbench-%c\n", 'a' + me);
    return failed;
}
