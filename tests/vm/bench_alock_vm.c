// VM
// LIBS: -libverbs
/* tests/vm/bench_alock_vm.c - the ALock paper's lock table on Soft-RoCE, in one guest (guest
 * role "alockbench", run by bench/bench_alock.sh through tests/vm/run.sh alockbench).
 * Two nodes, A and B, each a shmheap holding a lock table of KEYS locks; T worker processes per
 * node (T = 1, 2). A worker picks a key: with probability p_local one of its own node's, else
 * one of the other node's; then lock, unlock. Every RDMA operation goes through rxe loopback
 * (one guest: the "nodes" are process groups; rxe still runs its whole protocol stack).
 *   alock  ALock: own node's keys through the local cohort (CPU only), the other node's through
 *          the remote cohort; budgets 1, 4, 16
 *   spin   RDMA spin lock: compare-and-swap 0 -> 1 until it succeeds, WRITE 0 to unlock; own
 *          node's keys too go through the NIC (loopback)
 *   mcs    all-RDMA MCS: ALock's remote cohort alone for every key (own node's through loopback):
 *          an MCS queue over RDMA plus, per cohort leader, one victim WRITE and one line READ
 * One process is the "NIC side" of both nodes (it registered both heaps; its queue pairs answer
 * every worker), so any two workers reach each other's descriptors through their own QPs.
 * Prints NAME MEDIAN_NS P99_NS OPS_PER_S lines (bench/hist.h) and ratio lines, all one run. */
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#include "vmt.h"
#include "../../bench/hist.h"

#define KEYS 256
#define NTAB 3
static const uint32_t budgets[NTAB] = {1, 4, 16};
#define NW 4           /* workers: node = w / 2 */
#define NDESC 4
#define MAXS 300000    /* latency samples per worker and run */
#define REPS 3

enum { M_ALOCK, M_SPIN, M_MCS };

struct cfg { uint32_t mode, p_local, tab, ms, active; };

static shmheap *heaps[2];
static const char *hname[2];
static alock_table *tabs[2][NTAB];
static uint64_t *spin[2];         /* KEYS spin words per node, each on its own line */

typedef struct tlink { struct ibv_cq *cq; struct ibv_qp *qp; uint64_t x[8]; } tlink;
#define TL_WIRE (RCP__VERBS_EP_WIRE + 64)

static int tlink_setup(int fd, rcp__verbs_dev *d, const uint64_t x[8], tlink *l)
{
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = 16;
    o.retry_cnt = 6;
    memset(l, 0, sizeof *l);
    int rc = rcp__verbs_cq_create(d, 64, 0, &l->cq);
    if (!rc) rc = rcp__verbs_qp_create(d, l->cq, l->cq, &o, &l->qp);
    if (rc) return rc;
    rcp__verbs_ep me, peer;
    rcp__verbs_ep_local(d, l->qp, 0, 0, &me);
    unsigned char out[TL_WIRE], in[TL_WIRE];
    rcp__verbs_ep_pack(&me, out);
    for (int i = 0; i < 8; i++) vmt_put64(out + RCP__VERBS_EP_WIRE + 8 * i, x ? x[i] : 0);
    if ((rc = vmt_write_all(fd, out, sizeof out))) return rc;
    if ((rc = vmt_read_all(fd, in, sizeof in, 60000))) return rc;
    if ((rc = rcp__verbs_ep_unpack(in, &peer))) return rc;
    for (int i = 0; i < 8; i++) l->x[i] = vmt_get64(in + RCP__VERBS_EP_WIRE + 8 * i);
    return rcp__verbs_rc_connect(d, l->qp, &me, &peer, &o);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* ---------------------------------------------------------------- a worker */

static void worker(int w, int home_fd, int peer_fd[NW])
{
    int node = w / 2;
    rcp__verbs_dev d;
    tlink home, pl[NW];
    if (rcp__verbs_open(NULL, &d) || tlink_setup(home_fd, &d, NULL, &home)) _exit(2);
    /* home.x: lines of the 2 x NTAB tables (x[0..5]), spin words of A and B (x[6], x[7]);
       the rkeys come in a second message */
    uint32_t rk[2];
    if (vmt_read_all(home_fd, rk, sizeof rk, 60000)) _exit(2);
    void *descs;
    struct ibv_mr *dmr;
    size_t dlen = ALOCK_REMOTE_MEM(NDESC) * 2 * NTAB;
    if (posix_memalign(&descs, 4096, dlen) || rcp__verbs_reg(&d, descs, dlen, 0, &dmr)) _exit(2);
    alock_link hl[2], peers[NW];
    for (int m = 0; m < 2; m++)
        if (alock_verbs_link_create(home.qp, home.cq, rk[m], 20000, &hl[m])) _exit(2);
    for (int p = 0; p < NW; p++) {
        if (p == w) continue;
        uint64_t x[8] = {(uint64_t)(uintptr_t)descs, dmr->rkey};
        if (tlink_setup(peer_fd[p], &d, x, &pl[p])) _exit(2);
        if (alock_verbs_link_create(pl[p].qp, pl[p].cq, (uint32_t)pl[p].x[1], 20000, &peers[p])) _exit(2);
    }
    /* local tables of our node; remote handles on every table of both nodes */
    shmheap *h;
    alock_table *lt[NTAB];
    if (shmheap_open(hname[node], NULL, &h)) _exit(3);
    for (int k = 0; k < NTAB; k++) {
        char n[16];
        snprintf(n, sizeof n, "t%u", budgets[k]);
        if (alock_table_open(h, n, NULL, &lt[k])) _exit(3);
    }
    alock_remote *rr[2][NTAB];
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < NTAB; k++) {
            alock_remote_opts o;
            memset(&o, 0, sizeof o);
            o.id = (uint16_t)(w + 1);
            o.lines_addr = home.x[m * NTAB + k];
            o.nlocks = KEYS;
            o.budget = budgets[k];
            o.home = hl[m];
            o.descs = (char *)descs + ALOCK_REMOTE_MEM(NDESC) * (size_t)(m * NTAB + k);
            o.ndesc = NDESC;
            if (alock_remote_create(&o, &rr[m][k])) _exit(4);
            for (int p = 0; p < NW; p++)
                if (p != w) alock_remote_set_peer(rr[m][k], (uint16_t)(p + 1), &peers[p]);
        }
    hist hs;
    if (hist_init(&hs, MAXS)) _exit(5);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1);
    vmt_send_byte(home_fd, 'R');
    for (;;) {
        struct cfg c;
        if (vmt_read_all(home_fd, &c, sizeof c, 600000)) _exit(0);
        if (c.ms == 0) _exit(0);
        hs.n = 0;
        uint64_t n = 0, errs = 0;
        if (c.active) {
            uint64_t t0 = rcp__now_ns(), end = t0 + (uint64_t)c.ms * 1000000ull;
            for (;;) {
                uint64_t s = rcp__now_ns();
                if (s >= end) break;
                uint64_t x = rng(&seed);
                int m = (x % 100) < c.p_local ? node : 1 - node;
                uint32_t key = (uint32_t)((x >> 8) % KEYS);
                if (c.mode == M_ALOCK && m == node) {
                    alock_hold hd;
                    if (alock_lock(lt[c.tab], key, &hd) < 0) errs++;
                    else alock_unlock(&hd);
                } else if (c.mode == M_ALOCK || c.mode == M_MCS) {
                    alock_rhold hd;
                    if (alock_remote_lock(rr[m][c.tab], key, &hd)) errs++;
                    else if (alock_remote_unlock(&hd)) errs++;
                } else {
                    uint64_t addr = home.x[6 + m] + (uint64_t)key * 64, old = 1;
                    while (old != 0)
                        if (hl[m].cas(hl[m].conn, addr, 0, 1, &old)) { errs++; break; }
                    uint64_t z = 0;
                    if (hl[m].write(hl[m].conn, addr, &z, 8)) errs++;
                }
                hist_add(&hs, rcp__now_ns() - s);
                n++;
            }
        }
        uint64_t hdr[2] = {n, errs};
        uint64_t cnt = hs.n;
        if (vmt_write_all(home_fd, hdr, sizeof hdr) || vmt_write_all(home_fd, &cnt, 8) ||
            (cnt && vmt_write_all(home_fd, hs.ns, cnt * 8)))
            _exit(6);
    }
}

/* ---------------------------------------------------------------- the orchestrator */

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    for (int m = 0; m < 2; m++) {
        char n[64];
        snprintf(n, sizeof n, "alock-bench-%c", 'a' + m);
        hname[m] = strdup(n);
        shmheap_opts o = {.size = 8 << 20};
        if (shmheap_create(hname[m], &o, &heaps[m])) { printf("FAIL alockbench: heap\n"); return 1; }
        for (int k = 0; k < NTAB; k++) {
            char tn[16];
            snprintf(tn, sizeof tn, "t%u", budgets[k]);
            alock_table_opts ao = {.nlocks = KEYS, .budget = budgets[k]};
            if (alock_table_create(heaps[m], tn, &ao, &tabs[m][k])) { printf("FAIL alockbench: table\n"); return 1; }
        }
        spin[m] = (uint64_t *)shmheap_aligned_alloc(heaps[m], 64, (size_t)KEYS * 64);
        memset(spin[m], 0, (size_t)KEYS * 64);
    }
    int hs[NW][2], ps[NW][NW][2];
    for (int w = 0; w < NW; w++) {
        socketpair(AF_UNIX, SOCK_STREAM, 0, hs[w]);
        for (int p = w + 1; p < NW; p++) socketpair(AF_UNIX, SOCK_STREAM, 0, ps[w][p]);
    }
    fflush(stdout);
    pid_t pid[NW];
    for (int w = 0; w < NW; w++) {
        if ((pid[w] = fork()) == 0) {
            int pf[NW];
            for (int p = 0; p < NW; p++) pf[p] = p == w ? -1 : (p > w ? ps[w][p][0] : ps[p][w][1]);
            worker(w, hs[w][1], pf);
        }
    }
    rcp__verbs_dev d;
    struct ibv_mr *mr[2];
    if (rcp__verbs_open(NULL, &d)) { printf("FAIL alockbench: device\n"); return 1; }
    for (int m = 0; m < 2; m++)
        if (rcp__verbs_reg(&d, shmheap_base(heaps[m]), shmheap_size(heaps[m]), 0, &mr[m])) {
            printf("FAIL alockbench: register\n");
            return 1;
        }
    uint64_t x[8];
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < NTAB; k++) {
            void *lines;
            size_t len;
            alock_table_lines(tabs[m][k], &lines, &len);
            x[m * NTAB + k] = (uint64_t)(uintptr_t)lines;
        }
    x[6] = (uint64_t)(uintptr_t)spin[0];
    x[7] = (uint64_t)(uintptr_t)spin[1];
    tlink hl[NW];
    for (int w = 0; w < NW; w++) {
        uint32_t rk[2] = {mr[0]->rkey, mr[1]->rkey};
        if (tlink_setup(hs[w][0], &d, x, &hl[w]) || vmt_write_all(hs[w][0], rk, sizeof rk)) {
            printf("FAIL alockbench: link to worker %d\n", w);
            return 1;
        }
    }
    for (int w = 0; w < NW; w++)
        if (vmt_expect_byte(hs[w][0], 'R', 120000)) { printf("FAIL alockbench: worker %d not ready\n", w); return 1; }
    printf("# lock table: 2 nodes x %d keys, one guest (rxe loopback), lock+unlock per op\n", KEYS);
    static const uint32_t pl[] = {50, 85, 95, 100};
    int ms = 1000, failed = 0;
    uint64_t *all = (uint64_t *)malloc((size_t)NW * MAXS * 8 * REPS);
    printf("# each configuration: %d runs of %d ms, the five locks alternated run by run; "
           "throughput = median of the runs, latency over all their operations\n", REPS, ms);
    for (int t = 1; t <= 2; t++)
        for (int pi = 0; pi < 4; pi++) {
            hist h[5];
            double rates[5][REPS];
            for (int i = 0; i < 5; i++) { h[i].ns = all + (size_t)i * (NW * MAXS * REPS / 5); h[i].n = 0; h[i].cap = (size_t)NW * MAXS * REPS / 5; h[i].sorted = 0; }
            for (int rep = 0; rep < REPS; rep++)
                for (int i = 0; i < 5; i++) {
                    int mode = i < NTAB ? M_ALOCK : i == NTAB ? M_SPIN : M_MCS;
                    struct cfg c = {(uint32_t)mode, pl[pi], mode == M_MCS ? NTAB - 1u : (uint32_t)(i < NTAB ? i : 0), (uint32_t)ms, 0};
                    for (int w = 0; w < NW; w++) {
                        c.active = (w % 2) < t;
                        vmt_write_all(hs[w][0], &c, sizeof c);
                    }
                    uint64_t ops = 0, errs = 0;
                    for (int w = 0; w < NW; w++) {
                        uint64_t hdr[2], cnt;
                        if (vmt_read_all(hs[w][0], hdr, sizeof hdr, 120000) || vmt_read_all(hs[w][0], &cnt, 8, 60000)) {
                            printf("FAIL alockbench: worker %d did not report\n", w);
                            return 1;
                        }
                        size_t room = h[i].cap - h[i].n, take = cnt < room ? cnt : room;
                        uint64_t *tmp = (uint64_t *)malloc(cnt * 8 + 8);
                        if (cnt && vmt_read_all(hs[w][0], tmp, cnt * 8, 60000)) {
                            printf("FAIL alockbench: worker %d did not report\n", w);
                            return 1;
                        }
                        memcpy(h[i].ns + h[i].n, tmp, take * 8);
                        h[i].n += take;
                        free(tmp);
                        ops += hdr[0];
                        errs += hdr[1];
                    }
                    rates[i][rep] = hist_ops_per_s(ops, (uint64_t)ms * 1000000ull);
                    if (errs) { printf("FAIL alockbench: %llu failed operations\n", (unsigned long long)errs); failed = 1; }
                }
            double thr[5];
            for (int i = 0; i < 5; i++) {
                for (int a = 0; a < REPS; a++) /* sort the runs' rates: median */
                    for (int b = a + 1; b < REPS; b++)
                        if (rates[i][b] < rates[i][a]) { double x = rates[i][a]; rates[i][a] = rates[i][b]; rates[i][b] = x; }
                thr[i] = rates[i][REPS / 2];
                char name[64];
                if (i < NTAB) snprintf(name, sizeof name, "alock_b%u/p%u/t%d", budgets[i], pl[pi], t);
                else snprintf(name, sizeof name, "%s/p%u/t%d", i == NTAB ? "spin" : "mcs", pl[pi], t);
                if (h[i].n) hist_print(&h[i], name, thr[i]);
            }
            printf("# p_local %u%%, %d per node: alock/spin throughput b1 %.2fx b4 %.2fx b16 %.2fx; "
                   "alock/mcs b1 %.2fx b4 %.2fx b16 %.2fx\n", pl[pi], t,
                   thr[0] / thr[3], thr[1] / thr[3], thr[2] / thr[3], thr[0] / thr[4], thr[1] / thr[4], thr[2] / thr[4]);
        }
    for (int w = 0; w < NW; w++) {
        struct cfg c = {0, 0, 0, 0, 0};
        vmt_write_all(hs[w][0], &c, sizeof c);
        waitpid(pid[w], NULL, 0);
    }
    for (int m = 0; m < 2; m++) {
        char live[128];
        for (int k = 0; k < NTAB; k++) alock_table_close(tabs[m][k]);
        for (int k = 0; k < NTAB; k++) {
            snprintf(live, sizeof live, "/dev/shm/alock.%llx.t%u", (unsigned long long)(uintptr_t)shmheap_base(heaps[m]), budgets[k]);
            unlink(live);
        }
        shmheap_close(heaps[m]);
        shmheap_unlink(hname[m], NULL);
    }
    printf(failed ? "FAIL alockbench\n" : "ok alockbench\n");
    return failed;
}
