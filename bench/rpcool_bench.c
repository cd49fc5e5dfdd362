/* rpcool_bench.c - rpcool's benchmark: round trips per safety mode, payload sizes, pointer-rich
   trees and a key-value store, printed as "NAME MEDIAN_NS P99_NS OPS_PER_S" (bench/hist.h).

   perftest conventions (bench/peer.h): no address = server, an address (the channel name) =
   client, -f = both (server forked, pinned to CPU 1; client on CPU 0). Options: -n ITERS for the
   no-op round trips (other suites scale from it), -w WARMUP, -P, -1, -T, -S SUITES (comma list
   of noop, guards, pingpong, onecpu, seal, payload, tree, kv, connect; default all).
       cc -O2 -pthread -I. bench/rpcool_bench.c -o rpcool_bench && ./rpcool_bench -f
   -S onecpu (with -1 only): rpcool/onecpu/{relaxed,yield_pingpong,futex_pingpong,
   uds_socketpair/64,getppid,sched_yield_alone,yield_pingpong_threads}@cpu0 in alternating
   blocks (see the suite).
   Result names: rpcool/noop/MODE (MODE also sealed-batch64, sealed-batch64-pages, sealed-8B, relaxed-8B), rpcool/pingpong/{relaxed,line}, rpcool/seal/{relaxed,sealed,mprotect_pair}/SIZE, rpcool/payload/MODE/SIZE, rpcool/tree/MODE/NODES,
   rpcool/kv/get/VALUE_SIZE, rpcool/kv/put/VALUE_SIZE, rpcool/connect/HEAP_SIZE (rpcool_connect
   until the first call can be made: the server hands over a heap it made ahead and a channel
   slot over its socket, the client maps both) against uds/connect (a UNIX socket to an acceptor thread in the server process:
   socket, connect, and read the byte the acceptor writes once it accepted), alternating in one
   loop (uds/connect/b is the peer of the 1 GiB loop).

   Between pods (bench/bench_rdma_pair.sh, two VM guests; built with -DRPCOOL_WITH_RDMA
   -libverbs): the server takes -R (it also serves RDMA clients: rpcool_server_opts.rdma =
   "serve"; without the RDMA transport built in it exits 1 saying so) and a channel name
   -a NAME; the client is given rdma://HOST/NAME. Over RDMA the client runs -S noop,tree
   (relaxed, copy, sealed, sandboxed; no second connection; trees at least 50 calls, not 200),
   with a 64 MiB heap, and the names start rpcool_rdma/ instead of rpcool/. Pod ids come from
   the environment (SHMHEAP_POD_ID), as for any user.
   Between the hosts of a pod (bench/bench_pod_vm.sh, two VM guests sharing an ivshmem device):
   the server is given the device in $RPCOOL_POD_DEVICE (it then serves the pod too), the
   client pod:NAME (the same variable names the device); it runs -S noop,pingpong,tree with a
   64 MiB heap, names starting rpcool_pod/ (rpcool_pod/pingpong/line is the bare cache-line
   ping-pong in the connection heap, in the device: the floor, alternating with the no-op).
   $RPCOOL_BENCH_SPIN_NS sets the server's and the client's spin_ns (default: the library's). */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <sys/prctl.h>
#include <dirent.h>
#include "peer.h"
#include "workload.h"

enum { FN_NOOP = 1, FN_TOUCH, FN_TREE, FN_TREE_CHECKED, FN_PUT, FN_GET, FN_QUIT, FN_PINGPONG,
       FN_NEED1 };

static rpcool_server *srv;
static int rdma_serve;  /* -R */
static int rdma_client; /* the channel is rdma://... */
static int pod_client;  /* the channel is pod:... (the pod transport, through a shared device) */

/* Over RDMA: the transport's summary of the connection (logged at disconnect), as a row. */
static void rdma_log(int level, const char *msg, void *user)
{
    (void)level, (void)user;
    if (strstr(msg, "rdma connection:")) printf("rpcool-rdma: client %s\n", msg);
}

static int h_noop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    return 0;
}

/* one checked read of the argument (the guards suite) */
static int h_need1(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    return *(const char *)rpcool_ctx_need(ctx, arg, len) == 'x' ? 0 : 1;
}

/* reads one byte per cache line: the receiver looks at the whole payload */
static int h_touch(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    unsigned s = 0;
    for (size_t i = 0; i < len; i += 64) s += ((const unsigned char *)arg)[i];
    return (int)(s & 0x7fff);
}

static void reply_sum(rpcool_ctx *ctx, uint64_t sum, uint64_t count)
{
    uint64_t *r = (uint64_t *)rpcool_ctx_alloc(ctx, 2 * sizeof *r);
    if (!r) return;
    r[0] = sum;
    r[1] = count;
    rpcool_ctx_reply(ctx, r, 2 * sizeof *r);
}

static int h_tree(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    uint64_t count = 0, sum = bench_tree_sum((const struct bench_node *)arg, &count);
    reply_sum(ctx, sum, count);
    return 0;
}

/* the same walk with every pointer checked (for sandboxed handlers) */
static uint64_t tree_sum_checked(rpcool_ctx *ctx, const struct bench_node *n, uint64_t *count)
{
    n = RPCOOL_NEED(ctx, n);
    uint64_t s = bench_tree_node_sum(n->id, n->value, rpcool_ctx_need_str(ctx, n->name));
    ++*count;
    struct bench_node *const *ch = n->n_children
        ? (struct bench_node *const *)rpcool_ctx_need(ctx, n->children, n->n_children * sizeof *ch) : NULL;
    for (size_t c = 0; c < n->n_children; c++) s += tree_sum_checked(ctx, ch[c], count);
    return s;
}

static int h_tree_checked(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    uint64_t count = 0, sum = tree_sum_checked(ctx, (const struct bench_node *)arg, &count);
    reply_sum(ctx, sum, count);
    return 0;
}

/* key-value: the table lives in the server's store heap (as in examples/rpcool_kv.c) */
struct kv_req { const char *key; size_t klen; const char *val; size_t vlen; };
struct kv_val { size_t len; char data[]; };
static rpcool_arena store;
static rpcool_map *table;

static int h_put(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (len != sizeof(struct kv_req)) return RPCOOL_E_INVAL;
    const struct kv_req *rq = (const struct kv_req *)arg;
    char key[BENCH_KV_KEY_MAX + 1];
    if (rq->klen > BENCH_KV_KEY_MAX || rq->vlen > BENCH_KV_VALUE_MAX) return RPCOOL_E_INVAL;
    memcpy(key, rpcool_ctx_need(ctx, rq->key, rq->klen), rq->klen);
    key[rq->klen] = 0;
    uint64_t old = 0;
    struct kv_val *v = NULL;
    if (rpcool_map_get(table, key, &old) && ((struct kv_val *)(uintptr_t)old)->len >= rq->vlen) {
        v = (struct kv_val *)(uintptr_t)old; /* overwrite in place */
    } else {
        v = (struct kv_val *)shmheap_malloc(store.heap, sizeof *v + rq->vlen);
        if (!v || rpcool_map_put(&store, table, key, (uint64_t)(uintptr_t)v, &old)) return SHMHEAP_E_FULL;
        if (old) shmheap_free(store.heap, (void *)(uintptr_t)old);
    }
    v->len = rq->vlen;
    memcpy(v->data, rpcool_ctx_need(ctx, rq->val, rq->vlen), rq->vlen);
    return 0;
}

static int h_get(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    char key[BENCH_KV_KEY_MAX + 1];
    uint64_t v;
    if (len > BENCH_KV_KEY_MAX) return RPCOOL_E_INVAL;
    memcpy(key, arg, len);
    key[len] = 0;
    if (!rpcool_map_get(table, key, &v)) return 1;
    const struct kv_val *kv = (const struct kv_val *)(uintptr_t)v;
    char *out = (char *)rpcool_ctx_alloc(ctx, kv->len);
    if (!out) return SHMHEAP_E_FULL;
    memcpy(out, kv->data, kv->len);
    rpcool_ctx_reply(ctx, out, kv->len);
    return 0;
}

/* The bare cache-line ping-pong (as bench/peer_shm.c) run by the serving thread itself, so
   that it alternates with rpcool calls in one run on the same CPUs: arg holds a request line
   and, 128 bytes on, a response line; the handler copies each new request value to the response
   line until it reads PP_STOP (or nothing comes for 10 s). It starts from the response line's
   value: a request that differs from it is new. */
#define PP_STOP UINT64_MAX
struct pp_lines { _Alignas(128) uint64_t req; _Alignas(128) uint64_t resp; };

static int h_pingpong(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    if (len < sizeof(struct pp_lines)) return RPCOOL_E_INVAL;
    struct pp_lines *l = (struct pp_lines *)arg;
    uint64_t seen = __atomic_load_n(&l->resp, __ATOMIC_ACQUIRE); /* the last value answered */
    for (;;) {
        uint64_t v;
        unsigned k = 0;
        uint64_t t0 = hist_now();
        while ((v = __atomic_load_n(&l->req, __ATOMIC_ACQUIRE)) == seen) {
            rcp__cpu_relax();
            if (!(++k & 0xfffff) && hist_now() - t0 > 10000000000ull) return RPCOOL_E_TIMEOUT;
        }
        if (v == PP_STOP) return 0;
        seen = v;
        __atomic_store_n(&l->resp, v, __ATOMIC_RELEASE);
    }
}

static int h_quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    rpcool_server_stop(srv);
    return 0;
}

/* The UNIX-socket peer of the connect suite: an abstract socket named after the channel. */
static socklen_t uds_addr(const char *chan, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "%s-connect", chan);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}
static void *uds_acceptor(void *arg)
{
    int l = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0) continue;
        if (write(fd, "k", 1) != 1) { /* the client went: nothing to do */ }
        close(fd);
    }
    return NULL;
}

/* $RPCOOL_BENCH_SPIN_NS: the server's and the client's spin_ns (0 or unset: the defaults), e.g.
   20000000 for a pair that polls through the guests' stalls instead of sleeping */
static uint64_t bench_spin_ns(void)
{
    const char *e = getenv("RPCOOL_BENCH_SPIN_NS");
    return e ? strtoull(e, NULL, 10) : 0;
}

static int server(const struct peer_opts *o, const char *chan, void *unused)
{
    (void)unused;
    peer_pin(o, 1);
    struct sockaddr_un ua;
    socklen_t ul = uds_addr(chan, &ua);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    pthread_t at;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&ua, ul) || listen(lfd, 128) ||
        pthread_create(&at, NULL, uds_acceptor, (void *)(intptr_t)lfd)) { perror("uds acceptor"); return 1; }
    pthread_detach(at);
    char hn[96];
    snprintf(hn, sizeof hn, "rpcool-bench-store-%d", (int)getpid());
    shmheap *h;
    shmheap_opts ho;
    memset(&ho, 0, sizeof ho);
    ho.size = (size_t)64 << 20;
    int r = shmheap_create(hn, &ho, &h);
    if (r) { fprintf(stderr, "store heap: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_arena_init(&store, h, 0);
    table = rpcool_map_new(&store, BENCH_KV_KEYS);
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    if (rdma_serve) so.rdma = "serve";
    so.spin_ns = bench_spin_ns();
    r = rpcool_server_open(chan, &so, &srv);
    if (r) {
        fprintf(stderr, "server: %s%s\n", rpcool_strerror(r),
                r == RPCOOL_E_NOTSUP ? " (build with -DRPCOOL_WITH_RDMA -libverbs)" : "");
        shmheap_close(h);
        shmheap_unlink(hn, NULL);
        return 1;
    }
    rpcool_server_add_handler(srv, FN_NOOP, h_noop, NULL, 0);
    rpcool_server_add_handler(srv, FN_TOUCH, h_touch, NULL, 0);
    rpcool_server_add_handler(srv, FN_TREE, h_tree, NULL, 0);
    rpcool_server_add_handler(srv, FN_TREE_CHECKED, h_tree_checked, NULL, 0);
    rpcool_server_add_handler(srv, FN_PUT, h_put, NULL, 0);
    rpcool_server_add_handler(srv, FN_GET, h_get, NULL, 0);
    rpcool_server_add_handler(srv, FN_QUIT, h_quit, NULL, 0);
    rpcool_server_add_handler(srv, FN_PINGPONG, h_pingpong, NULL, 0);
    rpcool_server_add_handler(srv, FN_NEED1, h_need1, NULL, 0);
    rpcool_serve(srv);
    rpcool_server_close(srv);
    shmheap_close(h);
    shmheap_unlink(hn, NULL);
    return 0;
}

/* ---- client ---- */

/* Which threads spin during a call: every thread's CPU time so far, from
   /proc/self/task/TID/stat (utime, stime in clock ticks), as "# thread-cpu WHEN" lines. */
static void thread_cpu(const char *when)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        char *l = strchr(buf, '('), *r = strrchr(buf, ')');
        if (!l || !r) continue;
        *r = 0;
        unsigned long ut = 0, st = 0;
        /* after ')': state is field 3, utime 14, stime 15 */
        if (sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            printf("# thread-cpu %s: tid %s %s utime %lu stime %lu ticks\n", when, e->d_name, l + 1,
                   ut, st);
    }
    closedir(d);
    fflush(stdout);
}

static const struct peer_opts *opt;
static const char *suites; /* -S: NULL = all */

static int want(const char *suite)
{
    if (!suites) return 1;
    size_t n = strlen(suite);
    for (const char *p = suites; (p = strstr(p, suite)); p += n)
        if ((p == suites || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* pages > 1: call i passes arg + (i % pages) pages (a different sealed page each call) */
static void run_pages(rpcool_conn *c, const char *name, long iters, unsigned fn, const void *arg, size_t len,
                      const rpcool_call_opts *co, int expect, long pages)
{
    hist h;
    if (hist_init(&h, (size_t)iters)) exit(1);
    long warm = opt->warmup < iters ? opt->warmup : iters;
    if (pages < 1) pages = 1;
    for (long i = 0; i < warm; i++) rpcool_call_ex(c, fn, (const char *)arg + (i % pages) * 4096, len, co, NULL, NULL);
    uint64_t t0 = hist_now();
    for (long i = 0; i < iters; i++) {
        uint64_t s = hist_now();
        int r = rpcool_call_ex(c, fn, (const char *)arg + (i % pages) * 4096, len, co, NULL, NULL);
        hist_add(&h, hist_now() - s);
        if (r != expect && expect >= 0) {
            fprintf(stderr, "%s: call returned %d (%s)\n", name, r, rpcool_strerror(r));
            exit(1);
        }
    }
    hist_print(&h, name, hist_ops_per_s(h.n, hist_now() - t0));
    hist_free(&h);
}

static void run(rpcool_conn *c, const char *name, long iters, unsigned fn, const void *arg, size_t len,
                const rpcool_call_opts *co, int expect)
{
    run_pages(c, name, iters, fn, arg, len, co, expect, 1);
}

static void *arena_alloc(void *ctx, size_t size) { return rpcool_arena_alloc((rpcool_arena *)ctx, size, 8); }

/* The onecpu suite's thread peer: a yield ping-pong on the line {go, mode, req, resp}. */
static void *oc_thread(void *p)
{
    uint32_t *req = (uint32_t *)p + 2, *resp = (uint32_t *)p + 3, last = 0, v;
    for (;;) {
        while ((v = __atomic_load_n(req, __ATOMIC_ACQUIRE)) == last) sched_yield();
        if (v == 0xffffffffu) return NULL;
        __atomic_store_n(resp, v, __ATOMIC_RELEASE);
        last = v;
    }
}

static int client(const struct peer_opts *o, const char *chan, void *unused)
{
    (void)unused;
    opt = o;
    peer_pin(o, 0);
    rpcool_conn *c = NULL;
    rpcool_conn_opts co;
    memset(&co, 0, sizeof co);
    co.heap_size = (size_t)256 << 20;
    rdma_client = strncmp(chan, "rdma://", 7) == 0;
    if (rdma_client) { /* two 1 GiB guests: a smaller heap, and only the suites that compare */
        co.heap_size = (size_t)64 << 20;
        co.connect_timeout_ms = 10000; /* TCG */
        co.log = rdma_log;
        if (!suites) suites = "noop,tree";
    }
    co.spin_ns = bench_spin_ns();
    pod_client = strncmp(chan, "pod:", 4) == 0;
    if (pod_client) { /* a device of 256 MiB shared by two guests: two heaps of 64 MiB fit */
        co.heap_size = (size_t)64 << 20;
        co.connect_timeout_ms = 10000; /* TCG */
        if (!suites) suites = "noop,pingpong,tree";
    }
    int r = RPCOOL_E_NOCHANNEL;
    for (int i = 0; i < 1000 && (r = rpcool_connect(chan, &co, &c)) == RPCOOL_E_NOCHANNEL; i++) usleep(2000);
    if (rdma_client || pod_client) { /* the server may still be starting: 30 s */
        for (int i = 0; i < 30 && r && r != RPCOOL_E_NOTSUP && r != RPCOOL_E_BADNAME; i++) {
            printf("# connect %s: %d %s; again in 1 s\n", chan, r, rpcool_strerror(r));
            fflush(stdout);
            sleep(1);
            r = rpcool_connect(chan, &co, &c);
        }
    }
    if (r) { fprintf(stderr, "connect: %s\n", rpcool_strerror(r)); return 1; }
    const char *sfx = o->same_cpu ? "@cpu0" : "";
    const char *pfx = rdma_client ? "rpcool_rdma" : pod_client ? "rpcool_pod" : "rpcool";
    char name[96];
    long n = o->iters;
    rpcool_call_opts relaxed, copy, sealed, sandbox;
    memset(&relaxed, 0, sizeof relaxed);
    copy = sealed = sandbox = relaxed;
    copy.safety = RPCOOL_COPY;
    sealed.safety = RPCOOL_SEAL;
    sandbox.safety = RPCOOL_SANDBOX;
    struct { const char *name; const rpcool_call_opts *o; } modes[] = {
        {"relaxed", &relaxed}, {"copy", &copy}, {"sealed", &sealed}, {"sandboxed", &sandbox}};

    /* 1. no-op round trips: a 64-byte argument on its own page */
    char *arg = (char *)rpcool_alloc_pages(c, 1 << 20);
    memset(arg, 'x', 1 << 20);
    if (rdma_client && want("noop")) thread_cpu("before-noop");
    for (int m = 0; m < 4 && want("noop"); m++) {
        snprintf(name, sizeof name, "%s/noop/%s%s", pfx, modes[m].name, sfx);
        run(c, name, n, FN_NOOP, arg, 64, modes[m].o, 0);
    }
    /* sealed with an 8-byte argument: under a page, so copied by the server, not sealed */
    if (want("noop")) {
        snprintf(name, sizeof name, "%s/noop/sealed-8B%s", pfx, sfx);
        run(c, name, n, FN_NOOP, arg, 8, &sealed, 0);
        snprintf(name, sizeof name, "%s/noop/relaxed-8B%s", pfx, sfx);
        run(c, name, n, FN_NOOP, arg, 8, &relaxed, 0);
    }
    if (rdma_client && want("noop")) {
        thread_cpu("after-noop");
        /* A/B in one run: the relaxed no-op on this connection (the default adaptive
           busy-poll, which polls or sleeps at once, whichever was faster) alternated with a
           second connection whose client sleeps on its completion channel at once
           (RPCOOL_RDMA_SPIN_MAX_NS=1); the server is the same in all */
        const char *old = getenv("RPCOOL_RDMA_SPIN_MAX_NS");
        setenv("RPCOOL_RDMA_SPIN_MAX_NS", "1", 1);
        rpcool_conn *c2 = NULL;
        int r2 = rpcool_connect(chan, &co, &c2);
        if (old) setenv("RPCOOL_RDMA_SPIN_MAX_NS", old, 1);
        else unsetenv("RPCOOL_RDMA_SPIN_MAX_NS");
        /* and a third whose client always polls (its own spin_ns, 20 ms: no adapting) */
        rpcool_conn *c3 = NULL;
        rpcool_conn_opts po = co;
        po.spin_ns = 20000000u;
        int r3 = r2 ? r2 : rpcool_connect(chan, &po, &c3);
        if (r2 || r3) {
            printf("# spin A/B: second connection failed: %d %s\n", r2 ? r2 : r3,
                   rpcool_strerror(r2 ? r2 : r3));
            if (c2) rpcool_disconnect(c2);
        } else {
            char *arg2 = (char *)rpcool_alloc_pages(c2, 4096);
            char *arg3 = (char *)rpcool_alloc_pages(c3, 4096);
            memset(arg2, 'x', 4096);
            memset(arg3, 'x', 4096);
            for (int round = 1; round <= 2; round++) {
                snprintf(name, sizeof name, "%s/noop/relaxed-spin-default-%d", pfx, round);
                run(c, name, n, FN_NOOP, arg, 64, &relaxed, 0);
                snprintf(name, sizeof name, "%s/noop/relaxed-spin-none-%d", pfx, round);
                run(c2, name, n, FN_NOOP, arg2, 64, &relaxed, 0);
                snprintf(name, sizeof name, "%s/noop/relaxed-spin-poll-%d", pfx, round);
                run(c3, name, n, FN_NOOP, arg3, 64, &relaxed, 0);
            }
            thread_cpu("after-spin-ab");
            rpcool_disconnect(c3);
            rpcool_disconnect(c2);
        }
    }
    /* guards: what the sandbox's guards cost a call. Blocks of 2000 calls on one connection, in
       turn (the order rotates every round): the relaxed no-op, the sandboxed no-op, and the
       sandboxed no-op whose handler makes one checked read (rpcool_ctx_need). Each row is the
       median of its blocks' means (its second figure: the slowest block), then the ratios of
       the medians and of the fastest tenth (less moved by other work on a shared host). */
    if (want("guards") && !rdma_client) {
        enum { NB = 2000, ROUNDS = 31, NM = 3 };
        static const char *gn[NM] = {"relaxed", "sandboxed", "sandboxed-need"};
        const rpcool_call_opts *gopt[NM] = {&relaxed, &sandbox, &sandbox};
        static const unsigned gfn[NM] = {FN_NOOP, FN_NOOP, FN_NEED1};
        double blk[NM][ROUNDS], med[NM];
        for (int m = 0; m < NM; m++)
            for (int i = 0; i < NB; i++) rpcool_call_ex(c, gfn[m], arg, 64, gopt[m], NULL, NULL);
        for (int rd = 0; rd < ROUNDS; rd++)
            for (int k = 0; k < NM; k++) {
                int m = (k + rd) % NM;
                uint64_t s = hist_now();
                for (int i = 0; i < NB; i++)
                    if (rpcool_call_ex(c, gfn[m], arg, 64, gopt[m], NULL, NULL)) exit(1);
                blk[m][rd] = (double)(hist_now() - s) / NB;
            }
        for (int m = 0; m < NM; m++) {
            double *b = blk[m];
            for (int i = 1; i < ROUNDS; i++) /* insertion sort: 31 values */
                for (int j = i; j > 0 && b[j - 1] > b[j]; j--) {
                    double t = b[j];
                    b[j] = b[j - 1];
                    b[j - 1] = t;
                }
            med[m] = b[ROUNDS / 2];
            snprintf(name, sizeof name, "%s/guards/%s%s", pfx, gn[m], sfx);
            printf("%s %.0f %.0f %.0f\n", name, med[m], b[ROUNDS - 1], 1e9 / med[m]);
        }
        printf("# guards: sandboxed / relaxed = %.3f, sandboxed-need / sandboxed = %.3f (medians "
               "of %d alternating blocks of %d calls); fastest tenth of the blocks: %.3f, %.3f "
               "(%.1f %.1f %.1f ns)\n", med[1] / med[0], med[2] / med[1], ROUNDS, NB,
               blk[1][ROUNDS / 10] / blk[0][ROUNDS / 10], blk[2][ROUNDS / 10] / blk[1][ROUNDS / 10],
               blk[0][ROUNDS / 10], blk[1][ROUNDS / 10], blk[2][ROUNDS / 10]);
    }
    /* sealed with batched release (seal_batch 64) on a second connection: the same argument
       every call (still sealed from the last call: no mprotect until the batch is released),
       and 64 different argument pages in turn (one mprotect per call, one per 64 to release) */
    if (want("noop") && !rdma_client) {
        rpcool_conn *cb = NULL;
        rpcool_conn_opts bo = co;
        bo.seal_batch = 64;
        if ((r = rpcool_connect(chan, &bo, &cb))) { fprintf(stderr, "connect: %s\n", rpcool_strerror(r)); return 1; }
        char *barg = (char *)rpcool_alloc_pages(cb, 64 * 4096);
        if (!barg) return 1;
        memset(barg, 'x', 64 * 4096);
        snprintf(name, sizeof name, "%s/noop/sealed-batch64%s", pfx, sfx);
        run(cb, name, n, FN_NOOP, barg, 64, &sealed, 0);
        snprintf(name, sizeof name, "%s/noop/sealed-batch64-pages%s", pfx, sfx);
        run_pages(cb, name, n, FN_NOOP, barg, 64, &sealed, 0, 64);
        rpcool_release(cb);
        rpcool_disconnect(cb);
    }
    /* The relaxed no-op (64-byte argument) against the bare cache-line ping-pong, timed by
       blocks: blocks of PP_BLOCK calls alternate with blocks of PP_BLOCK bare round trips on
       the same processes and CPUs, the clock read only around each block (a read per call
       would add its own cost to both). The ping-pong's server side is a handler (h_pingpong)
       of the serving thread, started with an asynchronous call. Rows: each block's mean per
       call or round trip; "# pingpong" line: the ratio of the median block means (goal <=
       1.2). */
    if (want("pingpong") && !rdma_client && !o->same_cpu) {
        enum { PP_BLOCK = 2000 };
        long blocks = n / PP_BLOCK < 20 ? 20 : n / PP_BLOCK;
        hist br, bp; /* each block's mean, in ns */
        struct pp_lines *pl = (struct pp_lines *)rpcool_alloc_pages(c, 4096);
        if (!pl || hist_init(&br, (size_t)blocks) || hist_init(&bp, (size_t)blocks)) return 1;
        memset(pl, 0, sizeof *pl);
        uint64_t seq = 0, tr = 0, tp = 0;
        for (long b = -(opt->warmup / PP_BLOCK + 1); b < blocks; b++) {
            uint64_t s = hist_now();
            for (int k = 0; k < PP_BLOCK; k++)
                if (rpcool_call_ex(c, FN_NOOP, arg, 64, &relaxed, NULL, NULL)) return 1;
            uint64_t e = hist_now();
            if (b >= 0) { hist_add(&br, (e - s) / PP_BLOCK); tr += e - s; }
            uint64_t id;
            pl->req = pl->resp = seq; /* nothing pending: the handler starts from here */
            if (rpcool_call_async(c, FN_PINGPONG, pl, sizeof *pl, &relaxed, NULL, NULL, &id)) return 1;
            /* the handler is running once it answers the first value (untimed) */
            __atomic_store_n(&pl->req, ++seq, __ATOMIC_RELEASE);
            while (__atomic_load_n(&pl->resp, __ATOMIC_ACQUIRE) != seq) rcp__cpu_relax();
            s = hist_now();
            for (int k = 0; k < PP_BLOCK; k++) {
                __atomic_store_n(&pl->req, ++seq, __ATOMIC_RELEASE);
                while (__atomic_load_n(&pl->resp, __ATOMIC_ACQUIRE) != seq) rcp__cpu_relax();
            }
            e = hist_now();
            if (b >= 0) { hist_add(&bp, (e - s) / PP_BLOCK); tp += e - s; }
            __atomic_store_n(&pl->req, PP_STOP, __ATOMIC_RELEASE);
            if ((r = rpcool_wait(c, id, NULL, NULL))) { fprintf(stderr, "pingpong: %s\n", rpcool_strerror(r)); return 1; }
        }
        char np[96];
        snprintf(name, sizeof name, "%s/pingpong/relaxed%s", pfx, sfx);
        snprintf(np, sizeof np, "%s/pingpong/line%s", pfx, sfx);
        double mr = (double)hist_median(&br), mp = (double)hist_median(&bp);
        hist_print(&br, name, hist_ops_per_s((size_t)blocks * PP_BLOCK, tr));
        hist_print(&bp, np, hist_ops_per_s((size_t)blocks * PP_BLOCK, tp));
        printf("# pingpong: relaxed / ping-pong = %.2f (goal <= 1.2; median block means %.1f / "
               "%.1f ns, %ld alternating blocks of %d each)\n",
               mp > 0 ? mr / mp : 0.0, mr, mp, blocks, (int)PP_BLOCK);
        hist_free(&br);
        hist_free(&bp);
        rpcool_free(c, pl);
    }
    /* On one CPU (-1 only), the relaxed no-op against its floors, in alternating
       blocks of 100 in one run: a bare two-process ping-pong handing over with sched_yield
       (two yields, two switches), a bare futex ping-pong (wake + wait on each side: four system
       calls, two switches), a 64-byte UNIX stream socketpair round trip, and two one-process
       costs with the peer asleep: getppid() (a bare system call) and sched_yield() with no
       other task to run, and the yield ping-pong between two threads of this process (no
       address-space switch). The floor processes are one forked child (it inherits CPU 0 and
       sleeps on a futex between blocks). "# onecpu" line: socket / each, medians (goal >= 6 for
       rpcool). */
    if (want("onecpu") && !rdma_client && o->same_cpu) {
        enum { OC_N = 7 };
        static const char *const ocname[OC_N] = {
            "relaxed", "yield_pingpong", "futex_pingpong", "uds_socketpair/64", "getppid",
            "sched_yield_alone", "yield_pingpong_threads"};
        long blocks = n / 100 < 20 ? 20 : n / 100;
        hist h[OC_N];
        uint64_t tt[OC_N] = {0};
        for (int m = 0; m < OC_N; m++)
            if (hist_init(&h[m], (size_t)blocks * 100)) return 1;
        struct oc { uint32_t go, mode, req, resp; } *oc = (struct oc *)mmap(
            NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        int sp[2];
        if (oc == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) return 1;
        memset(oc, 0, sizeof *oc);
        const uint32_t OC_STOP = 0xffffffffu;
        pid_t kid = fork();
        if (kid < 0) return 1;
        if (kid == 0) { /* the floors' peer: the parent's CPU (inherited affinity) */
            close(sp[0]);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            char buf[64];
            for (uint32_t go = 0;;) {
                while (__atomic_load_n(&oc->go, __ATOMIC_ACQUIRE) == go)
                    syscall(SYS_futex, &oc->go, FUTEX_WAIT, go, NULL, NULL, 0);
                go = __atomic_load_n(&oc->go, __ATOMIC_ACQUIRE);
                uint32_t mode = __atomic_load_n(&oc->mode, __ATOMIC_ACQUIRE), last = 0, v;
                if (mode == 0) _exit(0);
                for (;;) {
                    if (mode == 1) {
                        while ((v = __atomic_load_n(&oc->req, __ATOMIC_ACQUIRE)) == last)
                            sched_yield();
                        __atomic_store_n(&oc->resp, v, __ATOMIC_RELEASE);
                    } else if (mode == 2) {
                        while ((v = __atomic_load_n(&oc->req, __ATOMIC_ACQUIRE)) == last)
                            syscall(SYS_futex, &oc->req, FUTEX_WAIT, last, NULL, NULL, 0);
                        __atomic_store_n(&oc->resp, v, __ATOMIC_RELEASE);
                        syscall(SYS_futex, &oc->resp, FUTEX_WAKE, 1, NULL, NULL, 0);
                    } else {
                        if (peer_read_full(sp[1], buf, sizeof buf) ||
                            peer_write_full(sp[1], buf, sizeof buf))
                            _exit(1);
                        v = buf[0] ? OC_STOP : 0;
                    }
                    if (v == OC_STOP) break;
                    last = v;
                }
            }
        }
        close(sp[1]);
        /* mode 6: the same yield ping-pong with a thread of this process (no address-space
           switch); the thread is started per block and stopped with OC_STOP */
        struct oc *ot = oc + 1; /* the next 16 bytes of the page */
        pthread_t th;
        char buf[64];
        memset(buf, 0, sizeof buf);
        uint32_t seq = 0;
        for (long b = -(opt->warmup / 100 + 1); b < blocks; b++) {
            for (int m = 0; m < OC_N; m++) {
                /* the rpcool server polls with yields for a while after a call, and the
                   one-process costs need the peer asleep: 1 ms of sleep before each block but
                   rpcool's, so that only the two tasks measured run on the CPU */
                if (m >= 1) usleep(1000);
                if (m == 6) {
                    __atomic_store_n(&ot->req, 0, __ATOMIC_RELEASE);
                    __atomic_store_n(&ot->resp, 0, __ATOMIC_RELEASE);
                    seq = 0;
                    if (pthread_create(&th, NULL, oc_thread, ot)) return 1;
                }
                if (m >= 1 && m <= 3) { /* wake the peer into mode m */
                    __atomic_store_n(&oc->req, 0, __ATOMIC_RELEASE);
                    __atomic_store_n(&oc->resp, 0, __ATOMIC_RELEASE);
                    seq = 0;
                    __atomic_store_n(&oc->mode, (uint32_t)m, __ATOMIC_RELEASE);
                    __atomic_add_fetch(&oc->go, 1u, __ATOMIC_RELEASE);
                    syscall(SYS_futex, &oc->go, FUTEX_WAKE, 1, NULL, NULL, 0);
                }
                uint64_t s = 0, e;
                for (int k = -5; k < 100; k++) { /* 5 untimed: the peer wakes up */
                    if (k == 0) s = hist_now();
                    uint32_t v = ++seq;
                    switch (m) {
                    case 0:
                        if (rpcool_call_ex(c, FN_NOOP, arg, 64, &relaxed, NULL, NULL)) return 1;
                        break;
                    case 1:
                        __atomic_store_n(&oc->req, v, __ATOMIC_RELEASE);
                        while (__atomic_load_n(&oc->resp, __ATOMIC_ACQUIRE) != v) sched_yield();
                        break;
                    case 2:
                        __atomic_store_n(&oc->req, v, __ATOMIC_RELEASE);
                        syscall(SYS_futex, &oc->req, FUTEX_WAKE, 1, NULL, NULL, 0);
                        while (__atomic_load_n(&oc->resp, __ATOMIC_ACQUIRE) != v)
                            syscall(SYS_futex, &oc->resp, FUTEX_WAIT, v - 1, NULL, NULL, 0);
                        break;
                    case 3:
                        if (peer_write_full(sp[0], buf, sizeof buf) ||
                            peer_read_full(sp[0], buf, sizeof buf))
                            return 1;
                        break;
                    case 4: (void)getppid(); break;
                    case 5: sched_yield(); break;
                    default:
                        __atomic_store_n(&ot->req, v, __ATOMIC_RELEASE);
                        while (__atomic_load_n(&ot->resp, __ATOMIC_ACQUIRE) != v) sched_yield();
                        break;
                    }
                    if (k < 0) continue;
                    e = hist_now();
                    if (b >= 0) { hist_add(&h[m], e - s); tt[m] += e - s; }
                    s = e;
                }
                if (m == 1 || m == 2) { /* stop the peer: it goes back to sleep on go */
                    __atomic_store_n(&oc->req, OC_STOP, __ATOMIC_RELEASE);
                    syscall(SYS_futex, &oc->req, FUTEX_WAKE, 1, NULL, NULL, 0);
                    while (__atomic_load_n(&oc->resp, __ATOMIC_ACQUIRE) != OC_STOP) sched_yield();
                } else if (m == 6) {
                    __atomic_store_n(&ot->req, OC_STOP, __ATOMIC_RELEASE);
                    pthread_join(th, NULL);
                } else if (m == 3) {
                    buf[0] = 1;
                    if (peer_write_full(sp[0], buf, sizeof buf) ||
                        peer_read_full(sp[0], buf, sizeof buf))
                        return 1;
                    buf[0] = 0;
                }
            }
        }
        __atomic_store_n(&oc->mode, 0u, __ATOMIC_RELEASE);
        __atomic_add_fetch(&oc->go, 1u, __ATOMIC_RELEASE);
        syscall(SYS_futex, &oc->go, FUTEX_WAKE, 1, NULL, NULL, 0);
        waitpid(kid, NULL, 0);
        double med[OC_N];
        for (int m = 0; m < OC_N; m++) {
            snprintf(name, sizeof name, "%s/onecpu/%s%s", pfx, ocname[m], sfx);
            hist_print(&h[m], name, hist_ops_per_s(h[m].n, tt[m]));
            med[m] = (double)hist_median(&h[m]);
        }
        printf("# onecpu: socket / relaxed = %.2f (goal >= 6), socket / yield ping-pong = %.2f, "
               "socket / futex ping-pong = %.2f, relaxed / yield ping-pong = %.3f; medians ns: "
               "relaxed %.0f yield %.0f futex %.0f socket %.0f getppid %.0f lone yield %.0f "
               "thread yield %.0f "
               "(alternating blocks of 100, %ld each)\n",
               med[0] > 0 ? med[3] / med[0] : 0.0, med[1] > 0 ? med[3] / med[1] : 0.0,
               med[2] > 0 ? med[3] / med[2] : 0.0, med[1] > 0 ? med[0] / med[1] : 0.0, med[0],
               med[1], med[2], med[3], med[4], med[5], med[6], blocks * 100);
        for (int m = 0; m < OC_N; m++) hist_free(&h[m]);
        close(sp[0]);
        munmap(oc, 4096);
    }
    /* A sealed call of a page or more against a relaxed call of the same
       argument and a bare mprotect pair (PROT_READ, then READ|WRITE) of a separate anonymous
       shared mapping of the argument's size, alternating in one loop: one of each per
       iteration. "# seal" lines: (sealed - relaxed) / mprotect pair, medians (goal <= 1.2). */
    static const size_t ssizes[] = {4096, 65536};
    for (int si = 0; si < 2 && want("seal") && !rdma_client; si++) {
        size_t sz = ssizes[si];
        long it = n / 4 < 1000 ? 1000 : n / 4;
        hist hr, hs, hm;
        char *bare = (char *)mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (bare == MAP_FAILED || hist_init(&hr, (size_t)it) || hist_init(&hs, (size_t)it) ||
            hist_init(&hm, (size_t)it)) return 1;
        memset(bare, 'x', sz);
        uint64_t tr = 0, ts = 0, tm = 0;
        for (long i = -opt->warmup / 4; i < it; i++) {
            /* each case writes its first byte, then calls or seals: an argument is written
               before it is sent, and a page's first write after a seal may fault */
            uint64_t s0 = hist_now();
            arg[0] = (char)i;
            int r1 = rpcool_call_ex(c, FN_TOUCH, arg, sz, &relaxed, NULL, NULL);
            uint64_t s1 = hist_now();
            arg[0] = (char)i;
            int r2 = rpcool_call_ex(c, FN_TOUCH, arg, sz, &sealed, NULL, NULL);
            uint64_t s2 = hist_now();
            bare[0] = (char)i;
            int r3 = mprotect(bare, sz, PROT_READ) || mprotect(bare, sz, PROT_READ | PROT_WRITE);
            uint64_t s3 = hist_now();
            if (r1 < 0 || r2 < 0 || r3) {
                fprintf(stderr, "seal suite: %d %d %d\n", r1, r2, r3);
                return 1;
            }
            if (i < 0) continue;
            hist_add(&hr, s1 - s0);
            hist_add(&hs, s2 - s1);
            hist_add(&hm, s3 - s2);
            tr += s1 - s0;
            ts += s2 - s1;
            tm += s3 - s2;
        }
        char nr[96], nm[96];
        snprintf(nr, sizeof nr, "%s/seal/relaxed/%zu%s", pfx, sz, sfx);
        snprintf(name, sizeof name, "%s/seal/sealed/%zu%s", pfx, sz, sfx);
        snprintf(nm, sizeof nm, "%s/seal/mprotect_pair/%zu%s", pfx, sz, sfx);
        double mr = (double)hist_median(&hr), ms = (double)hist_median(&hs),
               mm = (double)hist_median(&hm);
        hist_print(&hr, nr, hist_ops_per_s(hr.n, tr));
        hist_print(&hs, name, hist_ops_per_s(hs.n, ts));
        hist_print(&hm, nm, hist_ops_per_s(hm.n, tm));
        printf("# seal %zu B: (sealed - relaxed) / mprotect pair = %.2f (goal <= 1.2; medians "
               "%.3f %.3f %.3f us, alternating, %ld each)\n", sz, mm > 0 ? (ms - mr) / mm : 0.0,
               ms / 1000, mr / 1000, mm / 1000, it);
        hist_free(&hr);
        hist_free(&hs);
        hist_free(&hm);
        munmap(bare, sz);
    }
    /* 2. payloads: the handler reads a byte of every cache line */
    static const size_t sizes[] = {64, 4096, 65536, 1 << 20};
    for (int si = 0; si < 4 && want("payload"); si++)
        for (int m = 0; m < 3; m++) {
            long it = sizes[si] >= 65536 ? n / (sizes[si] >= (1 << 20) ? 100 : 10) : n / 2;
            snprintf(name, sizeof name, "%s/payload/%s/%zu%s", pfx, modes[m].name, sizes[si], sfx);
            run(c, name, it < 100 ? 100 : it, FN_TOUCH, arg, sizes[si], modes[m].o, -1);
        }
    /* 3. trees (bench/workload.h), built in a sealable arena */
    static const size_t nodes[] = {1, 16, 256, 4096};
    for (int ti = 0; ti < 4 && want("tree"); ti++) {
        rpcool_arena a;
        if (rpcool_arena_init(&a, rpcool_heap(c), nodes[ti] * 96 + 4096)) return 1;
        struct bench_node *root = bench_tree_build(nodes[ti], arena_alloc, &a);
        if (!root) { fprintf(stderr, "tree build failed\n"); return 1; }
        rpcool_call_opts ts = sealed, tr_relaxed = relaxed, tr_sandbox = sandbox;
        ts.seal_p = a.base;
        ts.seal_len = rpcool_arena_used(&a);
        /* between pods, the tree's arena (its used part) travels with every call, whatever the
           mode (rpcool.h section 5); the sealed call's seal range is that same range */
        rpcool_extent tree_ext = {a.base, rpcool_arena_used(&a)};
        if (rdma_client) {
            tr_relaxed.extents = tr_sandbox.extents = &tree_ext;
            tr_relaxed.nextents = tr_sandbox.nextents = 1;
        }
        void *ret;
        size_t rl;
        int tr = rpcool_call(c, FN_TREE_CHECKED, root, sizeof *root, &ret, &rl);
        if (tr || ((uint64_t *)ret)[0] != bench_tree_expected_sum(nodes[ti])) {
            fprintf(stderr, "tree %zu: wrong sum\n", nodes[ti]);
            return 1;
        }
        rpcool_free(c, ret);
        long it = n / (long)(1 + nodes[ti] / 16);
        long floor_it = rdma_client ? 50 : 200; /* over RDMA in TCG a 4096-node call takes ~0.3 s */
        if (it < floor_it) it = floor_it;
        snprintf(name, sizeof name, "%s/tree/relaxed/%zu%s", pfx, nodes[ti], sfx);
        run(c, name, it, FN_TREE, root, sizeof *root, &tr_relaxed, 0);
        snprintf(name, sizeof name, "%s/tree/sealed/%zu%s", pfx, nodes[ti], sfx);
        run(c, name, it, FN_TREE, root, sizeof *root, &ts, 0);
        sandbox.safety = tr_sandbox.safety = RPCOOL_SANDBOX;
        snprintf(name, sizeof name, "%s/tree/sandboxed/%zu%s", pfx, nodes[ti], sfx);
        run(c, name, it, FN_TREE_CHECKED, root, sizeof *root, &tr_sandbox, 0);
        ts.safety = RPCOOL_SEAL | RPCOOL_SANDBOX;
        snprintf(name, sizeof name, "%s/tree/sealed+sandboxed/%zu%s", pfx, nodes[ti], sfx);
        run(c, name, it, FN_TREE_CHECKED, root, sizeof *root, &ts, 0);
        rpcool_arena_destroy(&a);
    }
    /* 4. key-value store: 4096 keys, values of 64/256/1024 bytes (bench/workload.h) */
    static const size_t vsizes[] = {64, 256, 1024};
    struct kv_req *rq = (struct kv_req *)rpcool_alloc(c, sizeof *rq);
    char *kbuf = (char *)rpcool_alloc(c, BENCH_KV_KEY_MAX), *vbuf = (char *)rpcool_alloc(c, BENCH_KV_VALUE_MAX);
    rq->key = kbuf;
    rq->val = vbuf;
    for (int vi = 0; vi < 3 && want("kv"); vi++) {
        for (uint64_t k = 0; k < BENCH_KV_KEYS; k++) {
            rq->klen = bench_kv_key(k, kbuf);
            rq->vlen = vsizes[vi];
            bench_kv_value(k, 0, vsizes[vi], vbuf);
            if (rpcool_call(c, FN_PUT, rq, sizeof *rq, NULL, NULL)) { fprintf(stderr, "kv fill failed\n"); return 1; }
        }
        for (int op = 0; op < 2; op++) {
            hist h;
            long it = n / 2;
            if (hist_init(&h, (size_t)it)) return 1;
            uint64_t t0 = hist_now();
            for (long i = 0; i < it; i++) {
                uint64_t k = bench_kv_index((uint64_t)i), s = hist_now();
                size_t kl = bench_kv_key(k, kbuf);
                if (op == 0) {
                    void *ret;
                    size_t rl;
                    if (rpcool_call(c, FN_GET, kbuf, kl, &ret, &rl) || rl != vsizes[vi]) { fprintf(stderr, "kv get failed\n"); return 1; }
                    rpcool_free(c, ret);
                } else {
                    rq->klen = kl;
                    bench_kv_value(k, (uint64_t)i, vsizes[vi], vbuf);
                    if (rpcool_call(c, FN_PUT, rq, sizeof *rq, NULL, NULL)) { fprintf(stderr, "kv put failed\n"); return 1; }
                }
                hist_add(&h, hist_now() - s);
            }
            snprintf(name, sizeof name, "%s/kv/%s/%zu%s", pfx, op ? "put" : "get", vsizes[vi], sfx);
            hist_print(&h, name, hist_ops_per_s(h.n, hist_now() - t0));
            hist_free(&h);
        }
    }
    /* connection set-up: rpcool_connect with a 64 MiB and a 1 GiB heap, each alternating in
       one loop with its peer, a UNIX socket connect that waits for the accept (uds/connect
       with the 64 MiB loop, uds/connect/b with the 1 GiB one); "# ratio" lines give the
       medians' ratio of each pair */
    long nc = n / 100 < 50 ? 50 : n / 100;
    static const size_t heaps[] = {(size_t)64 << 20, (size_t)1 << 30};
    for (int hi = 0; hi < 2 && want("connect"); hi++) {
        hist hr, hu;
        if (hist_init(&hr, (size_t)nc) || hist_init(&hu, (size_t)nc)) return 1;
        struct sockaddr_un ua;
        socklen_t ul = uds_addr(chan, &ua);
        rpcool_conn_opts ho;
        memset(&ho, 0, sizeof ho);
        ho.heap_size = heaps[hi];
        uint64_t tr = 0, tu = 0;
        for (long i = 0; i < nc; i++) {
            uint64_t s = hist_now();
            rpcool_conn *c2 = NULL;
            if ((r = rpcool_connect(chan, &ho, &c2))) { fprintf(stderr, "connect: %s\n", rpcool_strerror(r)); return 1; }
            uint64_t e = hist_now();
            hist_add(&hr, e - s);
            tr += e - s;
            rpcool_disconnect(c2);
            char b;
            s = hist_now();
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&ua, ul) || read(fd, &b, 1) != 1) { perror("uds connect"); return 1; }
            e = hist_now();
            hist_add(&hu, e - s);
            tu += e - s;
            close(fd);
        }
        char nu[96];
        snprintf(name, sizeof name, "%s/connect/%zuMiB%s", pfx, heaps[hi] >> 20, sfx);
        snprintf(nu, sizeof nu, "uds/connect%s%s", hi ? "/b" : "", sfx);
        double mr = (double)hist_median(&hr), mu = (double)hist_median(&hu);
        hist_print(&hr, name, hist_ops_per_s(hr.n, tr));
        hist_print(&hu, nu, hist_ops_per_s(hu.n, tu));
        printf("# ratio %s / %s = %.2f (medians %.1f / %.1f us, alternating, %ld each)\n", name, nu,
               mu > 0 ? mr / mu : 0.0, mr / 1000, mu / 1000, nc);
        hist_free(&hr);
        hist_free(&hu);
    }
    rpcool_call(c, FN_QUIT, NULL, 0, NULL, NULL);
    rpcool_disconnect(c);
    return 0;
}

int main(int argc, char **argv)
{
    struct peer_opts o;
    peer_opts_default(&o);
    int ch;
    while ((ch = getopt(argc, argv, PEER_COMMON_OPTS "S:R")) != -1)
        if (ch == 'S') {
            suites = optarg;
        } else if (ch == 'R') {
            rdma_serve = 1;
        } else if (!peer_opt(&o, ch, optarg)) {
            fprintf(stderr, "usage: %s [-f | [-R] [-a NAME] | CHANNEL | rdma://HOST/NAME | pod:NAME] [-S noop,guards,pingpong,onecpu,seal,payload,tree,kv,connect]\n" PEER_COMMON_HELP, argv[0]);
            return 2;
        }
    if (optind < argc) o.addr = argv[optind];
    char chan[64];
    snprintf(chan, sizeof chan, "rpcool-bench-%d", (int)getpid());
    return peer_run(&o, chan, server, client, NULL);
}
