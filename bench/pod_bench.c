/* bench/pod_bench.c - rpcool's pod transport between two "hosts" against the one-kernel
   shared-memory transport, in one run. Host A (its own mount, pid and IPC namespaces) runs the
   server, which serves its channel both in its kernel and through the pod device (a regular
   file), and a client that calls it through shared memory; host B (namespaces of its own, the
   device file its only link) calls the same server through the pod. The two clients take turns
   in blocks (-n calls each), so both see the same machine; the server's threads run on CPU 1,
   the clients on CPU 0. Workloads: no-op calls, then pointer-rich trees (bench/workload.h) of
   16 and 1024 nodes. Prints "NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h) per transport and
   workload, and "# ratio pod/shm WORKLOAD X" lines. Needs root (namespaces); says "skip" else.
   Usage: pod_bench [-n CALLS_PER_BLOCK] [-b BLOCKS] */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "hist.h"
#include "workload.h"
#include <sched.h>
#include <sys/wait.h>
#include <sys/mman.h>
static void t_kill_wait(pid_t p)
{
    if (p > 0) { kill(p, SIGKILL); waitpid(p, NULL, 0); }
}
#include "pod_hosts.h"

enum { FN_NOOP = 1, FN_TREE = 2 };
#define NW 3 /* workloads: no-op, tree of 16, tree of 1024 */
static const size_t tree_nodes[NW] = {0, 16, 1024};
static const char *const wl_name[NW] = {"noop", "tree/16", "tree/1024"};

struct ctl {
    uint32_t ready, turn, failed;
    uint64_t med[2][NW]; /* [shm, pod][workload] */
};
static struct ctl *ctl;
static char dev[96];
static unsigned n_calls = 2000, n_blocks = 20;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int h_noop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return 0;
}

static int h_tree(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len, (void)user;
    uint64_t count = 0, sum = bench_tree_sum((const struct bench_node *)arg, &count);
    uint64_t *r = (uint64_t *)rpcool_ctx_alloc(ctx, 2 * sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    r[0] = sum;
    r[1] = count;
    rpcool_ctx_reply(ctx, r, 2 * sizeof *r);
    return 0;
}

static int server(void)
{
    rpcool_server_opts o;
    rpcool_server *s;
    memset(&o, 0, sizeof o);
    o.pod_device = dev;
    pin(1);
    if (rpcool_server_open("podbench", &o, &s)) return 1;
    rpcool_server_add_handler(s, FN_NOOP, h_noop, NULL, 0);
    rpcool_server_add_handler(s, FN_TREE, h_tree, NULL, 0);
    __atomic_store_n(&ctl->ready, 1u, __ATOMIC_SEQ_CST);
    rpcool_serve(s); /* until killed with its host */
    return 0;
}

static void *heap_alloc(void *c, size_t n) { return rpcool_alloc((rpcool_conn *)c, n); }

/* side 0: shared memory ("podbench" in this kernel), 1: the pod ("pod:podbench") */
static int client(int side)
{
    rpcool_conn_opts o;
    rpcool_conn *c;
    memset(&o, 0, sizeof o);
    o.pod_device = dev;
    o.connect_timeout_ms = 20000;
    pin(0);
    while (!__atomic_load_n(&ctl->ready, __ATOMIC_SEQ_CST)) usleep(1000);
    if (rpcool_connect(side ? "pod:podbench" : "podbench", &o, &c)) return 2;
    hist h[NW];
    uint64_t busy[NW] = {0};
    for (int w = 0; w < NW; w++)
        if (hist_init(&h[w], (size_t)n_calls * n_blocks)) return 3;
    uint32_t turn = (uint32_t)side;
    for (int w = 0; w < NW; w++) {
        struct bench_node *root = w ? bench_tree_build(tree_nodes[w], heap_alloc, c) : NULL;
        if (w && !root) return 4;
        for (unsigned b = 0; b < n_blocks; b++, turn += 2) {
            while (__atomic_load_n(&ctl->turn, __ATOMIC_SEQ_CST) != turn) sched_yield();
            uint64_t t0 = hist_now();
            for (unsigned k = 0; k < n_calls; k++) {
                void *ret = NULL;
                uint64_t s0 = hist_now();
                int rc = w ? rpcool_call(c, FN_TREE, root, sizeof *root, &ret, NULL)
                           : rpcool_call(c, FN_NOOP, NULL, 0, NULL, NULL);
                hist_add(&h[w], hist_now() - s0);
                if (rc || (w && ((uint64_t *)ret)[0] != bench_tree_expected_sum(tree_nodes[w])))
                    __atomic_store_n(&ctl->failed, 1u, __ATOMIC_SEQ_CST);
                if (ret) rpcool_free(c, ret);
            }
            busy[w] += hist_now() - t0;
            __atomic_store_n(&ctl->turn, turn + 1, __ATOMIC_SEQ_CST);
        }
    }
    for (int w = 0; w < NW; w++) {
        char name[64];
        snprintf(name, sizeof name, "rpcool_%s/%s", side ? "pod" : "shm", wl_name[w]);
        hist_print(&h[w], name, hist_ops_per_s(h[w].n, busy[w]));
        ctl->med[side][w] = hist_median(&h[w]);
        hist_free(&h[w]);
    }
    fflush(stdout);
    rpcool_disconnect(c);
    return 0;
}

static int host_a(void *arg)
{
    (void)arg;
    pid_t s = fork();
    if (s == 0) _exit(server());
    int r = client(0);
    while (__atomic_load_n(&ctl->turn, __ATOMIC_SEQ_CST) < 2u * NW * n_blocks) usleep(1000);
    kill(s, SIGKILL);
    waitpid(s, NULL, 0);
    return r;
}

static int host_b(void *arg)
{
    (void)arg;
    return client(1);
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "n:b:")) != -1) {
        if (opt == 'n') n_calls = (unsigned)atoi(optarg);
        else if (opt == 'b') n_blocks = (unsigned)atoi(optarg);
        else return 2;
    }
    const char *why = hosts_skip();
    if (why) {
        printf("skip pod_bench: %s\n", why);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(dev, sizeof dev, "/tmp/pod_bench.%d.dev", (int)getpid());
    int fd = open(dev, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)256 << 20)) return 1;
    close(fd);
    ctl = (struct ctl *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ctl == MAP_FAILED) return 1;
    printf("# pod_bench: %u blocks of %u calls per transport and workload, alternating\n",
           n_blocks, n_calls);
    pid_t h[2] = {host_spawn(host_a, NULL), host_spawn(host_b, NULL)};
    int st[2];
    int ok = hosts_wait(h, st, 2, 600000);
    unlink(dev);
    if (ok != 2 || ctl->failed) {
        printf("FAIL pod_bench: hosts %#x %#x, wrong answers %u\n", st[0], st[1], ctl->failed);
        return 1;
    }
    for (int w = 0; w < NW; w++)
        printf("# ratio pod/shm %s %.2f\n", wl_name[w],
               ctl->med[0][w] ? (double)ctl->med[1][w] / (double)ctl->med[0][w] : 0.0);
    return 0;
}
