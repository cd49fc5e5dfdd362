// TSAN
/* rpcool's pod transport between "hosts": process trees in their own mount, pid and IPC
 * namespaces (tests/pod_hosts.h), each with its own /dev/shm, their pids colliding, sharing only
 * one regular file as the pod device (and the network namespace, which stands for the hosts'
 * network: the doorbells are UDP datagrams). The test's own coordination (stages, results) goes
 * through an anonymous shared page that the pod path never sees.
 *   both_ways     a server on each host, each host calling the other: pointer-rich trees in
 *                 every safety mode, exact counts, the caller's identity as claimed; one host
 *                 names the channel plainly (no server in its kernel: the pod is taken), the
 *                 other with "pod:"
 *   hostile       a client writes garbage into its slot, its lines and its heap: the server
 *                 serves the next client
 *   client_killed a client killed on one host: its connection reaped on the other within the
 *                 lease bound, its extents taken back
 *   server_killed a server killed on one host: the client's call on the other fails
 *                 RPCOOL_E_PEERDEAD within the bound; a new server takes the name over
 *   frozen        a client stopped (SIGSTOP) past its lease, then resumed: reaped meanwhile, its
 *                 next call fails RPCOOL_E_FENCED, the server and another client unharmed
 *   server_frozen a server stopped past its lease: its client's call fails RPCOOL_E_PEERDEAD, a
 *                 server on the other host takes the name over; resumed, the old server says it
 *                 lost the channel and touches nothing: the new one's calls and counts exact
 *   threads       clients on threads of one process, each with its connection, and the server
 *                 (also under ThreadSanitizer)
 *   forked_child  a child forked by a process that serves the pod connects anew, with a lease
 *                 of its own (the parent's mapping and lease are not inherited)
 *   corrupt       a hostile or corrupt device header: an error, never a crash
 *   names         pod:NAME without a device, an unknown channel, a missing device
 *   idle          an idle server uses no CPU (its CPU time over a second)
 *   semantics     tests/call_semantics.h over the pod transport
 * Needs root (namespaces); the tests that need no hosts run without. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include "pod_hosts.h"
#include "call_semantics.h"
#include <sys/mman.h>
#include <sys/resource.h>

#define BOUND_MS 300u  /* the lease bound the devices are formatted with */
#define SLACK_MS 1500u /* scheduling slack on a loaded machine, past the bound */
#define DEV_SIZE ((off_t)256 << 20)
#define HEAP ((size_t)4 << 20)
#define BLOCK ((size_t)64 << 10)
#define NODES 1000
#ifdef T_TSAN
#define NCALLS 20
#else
#define NCALLS 200
#endif

enum { H_TREE = 1, H_WHO, H_SLOW, H_COUNT };

/* the test's coordination page (not the pod's: the pod path never sees it) */
struct ctl {
    uint32_t stage[2];
    uint32_t failed_line[2];
    int32_t rc[2];
    uint32_t resume;
    uint64_t calls_ok[2], served[2];
    uint64_t t_kill, t_seen;
    uint32_t ext_left, ext_busy;
};
static struct ctl *ctl;
static char t_dir[64], dev[128];
static uint32_t served; /* calls of H_TREE served by this process */

static uint64_t now_ms(void) { return rcp__now_ns() / 1000000u; }

/* in a host: note the first failed line, return 1 */
#define H_CHECK(who, c)                                                                            \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            if (!ctl->failed_line[who]) ctl->failed_line[who] = __LINE__;                          \
            printf("# host %d: %s failed at line %d\n", who, #c, __LINE__);                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* wait until *w >= v (up to ms): 0, or -1 */
static int await(const uint32_t *w, uint32_t v, unsigned ms)
{
    uint64_t t0 = now_ms();
    while (__atomic_load_n(w, __ATOMIC_SEQ_CST) < v)
        if (now_ms() - t0 > ms) return -1;
        else usleep(1000);
    return 0;
}

static void set_stage(int who, uint32_t v) { __atomic_store_n(&ctl->stage[who], v, __ATOMIC_SEQ_CST); }

static void dev_new(void)
{
    static int n;
    snprintf(dev, sizeof dev, "%s/dev%d", t_dir, n++);
    int fd = open(dev, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, DEV_SIZE)) {}
        close(fd);
    }
    memset(ctl, 0, sizeof *ctl);
    served = 0; /* hosts forked from here count from 0 */
}

/* ---- the servers' handlers ---- */

struct node {
    int64_t v;
    struct node *kid[2];
};

/* Sum a tree (pointer-rich: every node found through its parent), answer a list of the sum's
   digits, each a node of a fresh linked list in the caller's heap. */
static int h_tree(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    const struct node *root = *(struct node *const *)arg; /* the argument holds the root */
    const struct node *stack[64];
    int64_t sum = 0, cnt = 0;
    int sp = 0;
    if (len != sizeof root) return RPCOOL_E_INVAL;
    stack[sp++] = root;
    while (sp) {
        const struct node *n = (const struct node *)rpcool_ctx_need(ctx, stack[--sp], sizeof *n);
        sum += n->v;
        cnt++;
        for (int k = 0; k < 2; k++)
            if (n->kid[k] && sp < 64) stack[sp++] = n->kid[k];
    }
    struct node *head = NULL;
    for (int64_t s = sum; s > 0; s /= 10) {
        struct node *d = (struct node *)rpcool_ctx_alloc(ctx, sizeof *d);
        if (!d) return SHMHEAP_E_FULL;
        d->v = s % 10;
        d->kid[0] = head;
        d->kid[1] = NULL;
        head = d;
    }
    rpcool_ctx_reply(ctx, head, sizeof *head);
    __atomic_fetch_add(&served, 1u, __ATOMIC_SEQ_CST);
    return (int)cnt;
}

static int h_who(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_peer *p = (rpcool_peer *)rpcool_ctx_alloc(ctx, sizeof *p);
    if (!p) return SHMHEAP_E_FULL;
    *p = *rpcool_ctx_peer(ctx);
    rpcool_ctx_reply(ctx, p, sizeof *p);
    return 0;
}

static int h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    usleep(20 * 1000 * 1000);
    return 0;
}

static int h_count(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return (int)__atomic_load_n(&served, __ATOMIC_SEQ_CST);
}

static rpcool_server *srv_open(const char *name)
{
    rpcool_server_opts o;
    rpcool_server *s = NULL;
    memset(&o, 0, sizeof o);
    o.max_conns = 8;
    o.pod_device = dev;
    if (rpcool_server_open(name, &o, &s)) return NULL;
    rpcool_server_add_handler(s, H_TREE, h_tree, NULL, 0);
    rpcool_server_add_handler(s, H_WHO, h_who, NULL, 0);
    rpcool_server_add_handler(s, H_SLOW, h_slow, NULL, 0);
    rpcool_server_add_handler(s, H_COUNT, h_count, NULL, 0);
    if (rpcool_server_start(s, 1)) {
        rpcool_server_close(s);
        return NULL;
    }
    return s;
}

static int cli_open(const char *name, rpcool_conn **c)
{
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.pod_device = dev;
    o.heap_size = HEAP;
    o.connect_timeout_ms = 10000;
    return rpcool_connect(name, &o, c);
}

/* A tree of NODES nodes (node i's kids are 2i+1 and 2i+2) in a page-aligned block of the
   connection heap, its root in the block's first word; the sum of its values. */
static int64_t tree_build(rpcool_conn *c, void **block, unsigned salt)
{
    char *b = (char *)rpcool_alloc_pages(c, BLOCK);
    *block = b;
    if (!b) return -1;
    struct node *nodes = (struct node *)(void *)(b + 64);
    int64_t sum = 0;
    for (int i = 0; i < NODES; i++) {
        nodes[i].v = (int64_t)((i * 7 + salt) % 1000);
        sum += nodes[i].v;
        nodes[i].kid[0] = 2 * i + 1 < NODES ? &nodes[2 * i + 1] : NULL;
        nodes[i].kid[1] = 2 * i + 2 < NODES ? &nodes[2 * i + 2] : NULL;
    }
    *(struct node **)(void *)b = nodes;
    return sum;
}

/* One call of H_TREE in mode flags: 0 when its answer is right. */
static int tree_call(rpcool_conn *c, unsigned flags, unsigned salt)
{
    void *b = NULL, *ret = NULL;
    size_t n = 0;
    int64_t sum = tree_build(c, &b, salt), got = 0;
    if (sum < 0) return -1;
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.safety = flags;
    if (flags & RPCOOL_SEAL) {
        co.seal_p = b;
        co.seal_len = BLOCK;
    }
    int rc = rpcool_call_ex(c, H_TREE, b, sizeof(struct node *), &co, &ret, &n);
    for (const struct node *d = (const struct node *)ret; d; d = d->kid[0]) got = got * 10 + d->v;
    int ok = rc == NODES && got == sum && ret && shmheap_contains(rpcool_heap(c), ret, n);
    if (!ok) printf("# tree call (flags %u): rc %d (%s), sum %lld, got %lld\n", flags, rc,
                    rc < 0 ? rpcool_strerror(rc) : "nodes", (long long)sum, (long long)got);
    while (ret) {
        void *next = ((struct node *)ret)->kid[0];
        rpcool_free(c, ret);
        ret = next;
    }
    rpcool_free(c, b);
    return ok ? 0 : -1;
}

/* ---- both ways ---- */

static int host_both(void *arg)
{
    int me = (int)(intptr_t)arg, other = 1 - me;
    char mine[32], theirs[40];
    snprintf(mine, sizeof mine, "both%d", me);
    /* host 0 names the other's channel plainly: no server of that name in its kernel */
    snprintf(theirs, sizeof theirs, "%sboth%d", me ? "pod:" : "", other);
    rpcool_server *s = srv_open(mine);
    H_CHECK(me, s);
    set_stage(me, 1);
    H_CHECK(me, await(&ctl->stage[other], 1, 20000) == 0);
    rpcool_conn *c = NULL;
    H_CHECK(me, cli_open(theirs, &c) == 0);
    static const unsigned modes[] = {RPCOOL_RELAXED, RPCOOL_COPY, RPCOOL_SEAL, RPCOOL_SANDBOX};
    uint64_t ok = 0;
    for (unsigned m = 0; m < 4; m++)
        for (unsigned k = 0; k < NCALLS; k++) ok += tree_call(c, modes[m], k + 100 * m) == 0;
    ctl->calls_ok[me] = ok;
    void *ret = NULL;
    size_t n = 0;
    H_CHECK(me, rpcool_call(c, H_WHO, NULL, 0, &ret, &n) == 0 && n == sizeof(rpcool_peer));
    const rpcool_peer *p = (const rpcool_peer *)ret;
    H_CHECK(me, p->transport == RPCOOL_TRANSPORT_POD && p->authenticated == 0);
    H_CHECK(me, p->pid == getpid() && getpid() == 1); /* as claimed: pid 1 on both hosts */
    H_CHECK(me, p->uid == getuid());
    rpcool_free(c, ret);
    rpcool_disconnect(c);
    set_stage(me, 2);
    H_CHECK(me, await(&ctl->stage[other], 2, 60000) == 0);
    ctl->served[me] = __atomic_load_n(&served, __ATOMIC_SEQ_CST);
    rpcool_server_stats st;
    H_CHECK(me, rpcool_server_get_stats(s, &st) == 0);
    H_CHECK(me, st.accepted == 1 && st.closed == 1);
    H_CHECK(me, rpcool_server_close(s) == 0);
    return 0;
}

static void both_ways(void)
{
    dev_new();
    pid_t h[2] = {host_spawn(host_both, (void *)0), host_spawn(host_both, (void *)1)};
    int st[2];
    hosts_wait(h, st, 2, 120000);
    for (int k = 0; k < 2; k++) {
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
        CHECK_EQ(ctl->calls_ok[k], 4u * NCALLS);
        CHECK_EQ(ctl->served[k], 4u * NCALLS); /* exactly the other's calls, once each */
    }
}

/* ---- a hostile client ---- */

static void rnd_fill(void *p, size_t n, uint64_t *x)
{
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        b[i] = (unsigned char)*x;
    }
}

static int host_hostile_srv(void *arg)
{
    (void)arg;
    rpcool_server *s = srv_open("hx");
    H_CHECK(0, s);
    set_stage(0, 1);
    H_CHECK(0, await(&ctl->stage[1], 2, 60000) == 0);
    rpcool_server_stats st;
    H_CHECK(0, rpcool_server_get_stats(s, &st) == 0);
    ctl->served[0] = __atomic_load_n(&served, __ATOMIC_SEQ_CST);
    H_CHECK(0, rpcool_server_close(s) == 0);
    return 0;
}

static int hostile_child(void)
{
    rpcool_conn *c = NULL;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    if (cli_open("pod:hx", &c)) return 2;
    /* its lines, bits and slot, the channel's summary, and its heap's first pages */
    rnd_fill(c->hdr->req, sizeof c->hdr->req, &x);
    c->hdr->req_bits = ~0ull;
    rnd_fill(&c->cs->heap, sizeof c->cs->heap, &x);
    c->cs->hdr = x;
    rnd_fill((char *)c->ch + RPCOOL__RDY_TOP_OFF, 64, &x);
    rcp__fetch_add(&c->ch->sdoor, 1u);
    rpcool__p_ring(c);
    usleep(100000);
    rnd_fill(shmheap_base(rpcool_heap(c)), 64 << 10, &x);
    for (unsigned i = 0; i < RPCOOL__NSLOTS; i++)
        c->hdr->req[i].state = RPCOOL__SL(i + 7, RPCOOL__SL_REQ);
    rpcool__p_ring(c);
    usleep(300000);
    c->cs->state = 0xdeadu;
    rpcool__p_ring(c);
    usleep(200000);
    _exit(0); /* no disconnect: it lapses */
}

static int host_hostile_cli(void *arg)
{
    (void)arg;
    H_CHECK(1, await(&ctl->stage[0], 1, 20000) == 0);
    pid_t k = fork();
    if (k == 0) hostile_child();
    int ws = 0;
    waitpid(k, &ws, 0);
    H_CHECK(1, WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    rpcool_conn *c = NULL;
    H_CHECK(1, cli_open("pod:hx", &c) == 0);
    uint64_t ok = 0;
    for (unsigned i = 0; i < NCALLS; i++) ok += tree_call(c, RPCOOL_SANDBOX, i) == 0;
    ctl->calls_ok[1] = ok;
    rpcool_disconnect(c);
    set_stage(1, 2);
    return 0;
}

static void hostile(void)
{
    dev_new();
    pid_t h[2] = {host_spawn(host_hostile_srv, NULL), host_spawn(host_hostile_cli, NULL)};
    int st[2];
    hosts_wait(h, st, 2, 120000);
    for (int k = 0; k < 2; k++)
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
    CHECK_EQ(ctl->calls_ok[1], NCALLS);
    CHECK(ctl->served[0] >= NCALLS);
}

/* ---- a client killed, a server killed, a client frozen ---- */

/* extents of this process's device with an owner (a server's) or a live user */
static uint32_t ext_busy(void)
{
    struct rcp__pod *p = rcp__pods;
    uint32_t n = 0;
    if (!p) return ~0u;
    for (uint64_t i = 0; i < p->h.nextents; i++) n += !rcp__pod_ext_free(p, i);
    return n;
}

static int wait_reaped(rpcool_server *s, uint64_t want, unsigned ms)
{
    rpcool_server_stats st;
    uint64_t t0 = now_ms();
    while (!rpcool_server_get_stats(s, &st) && st.reaped < want && now_ms() - t0 < ms)
        usleep(2000);
    return st.reaped >= want ? 0 : -1;
}

static int host_kill_srv(void *arg)
{
    (void)arg;
    rpcool_server *s = srv_open("kc");
    H_CHECK(0, s);
    set_stage(0, 1);
    H_CHECK(0, await(&ctl->stage[1], 1, 20000) == 0);
    ctl->ext_busy = ext_busy();
    H_CHECK(0, wait_reaped(s, 1, 20000) == 0);
    ctl->t_seen = now_ms();
    ctl->ext_left = ext_busy();
    H_CHECK(0, rpcool_server_close(s) == 0);
    return 0;
}

static int host_kill_cli(void *arg)
{
    (void)arg;
    H_CHECK(1, await(&ctl->stage[0], 1, 20000) == 0);
    int p[2];
    pid_t k = t_fork_pipe(p);
    if (k == 0) {
        rpcool_conn *c = NULL;
        if (cli_open("pod:kc", &c) || tree_call(c, 0, 1)) _exit(2);
        if (write(p[1], "r", 1) != 1) _exit(3);
        pause();
        _exit(0);
    }
    H_CHECK(1, t_ready_wait(p[0]) == 0);
    usleep(100000);
    ctl->t_kill = now_ms();
    set_stage(1, 1);
    t_kill_wait(k);
    return 0;
}

static void client_killed(void)
{
    dev_new();
    pid_t h[2] = {host_spawn(host_kill_srv, NULL), host_spawn(host_kill_cli, NULL)};
    int st[2];
    hosts_wait(h, st, 2, 60000);
    for (int k = 0; k < 2; k++)
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
    CHECK_EQ(ctl->ext_busy, (uint32_t)(HEAP >> 21)); /* its heap's extents, while it lived */
    CHECK_EQ(ctl->ext_left, 0u);                     /* taken back with its connection */
    CHECKF(ctl->t_seen - ctl->t_kill <= BOUND_MS + SLACK_MS, "reaped %llu ms after the kill",
           (unsigned long long)(ctl->t_seen - ctl->t_kill));
    printf("# client killed on one host: reaped on the other after %llu ms (bound %u ms)\n",
           (unsigned long long)(ctl->t_seen - ctl->t_kill), BOUND_MS);
}

static int host_ks_srv(void *arg)
{
    (void)arg;
    int p[2];
    pid_t k = t_fork_pipe(p);
    if (k == 0) {
        rpcool_server *s = srv_open("ks");
        if (!s || write(p[1], "r", 1) != 1) _exit(2);
        pause();
        _exit(0);
    }
    H_CHECK(0, t_ready_wait(p[0]) == 0);
    set_stage(0, 1);
    H_CHECK(0, await(&ctl->stage[1], 1, 20000) == 0);
    usleep(200000); /* the client is inside its call */
    ctl->t_kill = now_ms();
    t_kill_wait(k);
    return 0;
}

static int host_ks_cli(void *arg)
{
    (void)arg;
    H_CHECK(1, await(&ctl->stage[0], 1, 20000) == 0);
    rpcool_conn *c = NULL;
    H_CHECK(1, cli_open("pod:ks", &c) == 0);
    set_stage(1, 1);
    ctl->rc[1] = rpcool_call(c, H_SLOW, NULL, 0, NULL, NULL);
    ctl->t_seen = now_ms();
    rpcool_disconnect(c);
    /* the name is taken over on this host: the dead server's lease is recovered */
    rpcool_server *s = srv_open("ks");
    H_CHECK(1, s);
    H_CHECK(1, cli_open("pod:ks", &c) == 0);
    H_CHECK(1, tree_call(c, RPCOOL_COPY, 3) == 0);
    rpcool_disconnect(c);
    H_CHECK(1, rpcool_server_close(s) == 0);
    return 0;
}

static void server_killed(void)
{
    dev_new();
    pid_t h[2] = {host_spawn(host_ks_srv, NULL), host_spawn(host_ks_cli, NULL)};
    int st[2];
    hosts_wait(h, st, 2, 60000);
    for (int k = 0; k < 2; k++)
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
    CHECK_EQ(ctl->rc[1], RPCOOL_E_PEERDEAD);
    CHECKF(ctl->t_seen - ctl->t_kill <= BOUND_MS + SLACK_MS, "call failed %llu ms after the kill",
           (unsigned long long)(ctl->t_seen - ctl->t_kill));
    printf("# server killed on one host: the call on the other failed after %llu ms (bound %u "
           "ms)\n", (unsigned long long)(ctl->t_seen - ctl->t_kill), BOUND_MS);
}

static int host_fz_srv(void *arg)
{
    (void)arg;
    rpcool_server *s = srv_open("fz");
    H_CHECK(0, s);
    set_stage(0, 1);
    H_CHECK(0, await(&ctl->stage[1], 1, 20000) == 0);
    H_CHECK(0, wait_reaped(s, 1, 20000) == 0); /* the frozen client's connection */
    ctl->ext_left = ext_busy();
    set_stage(0, 2);
    H_CHECK(0, await(&ctl->stage[1], 2, 20000) == 0);
    /* nothing corrupted: a client of this host calls, the counts are exact */
    rpcool_conn *c = NULL;
    H_CHECK(0, cli_open("pod:fz", &c) == 0);
    H_CHECK(0, tree_call(c, RPCOOL_SEAL, 9) == 0);
    rpcool_disconnect(c);
    ctl->served[0] = __atomic_load_n(&served, __ATOMIC_SEQ_CST);
    H_CHECK(0, rpcool_server_close(s) == 0);
    return 0;
}

static int host_fz_cli(void *arg)
{
    (void)arg;
    H_CHECK(1, await(&ctl->stage[0], 1, 20000) == 0);
    int p[2];
    pid_t k = t_fork_pipe(p);
    if (k == 0) {
        rpcool_conn *c = NULL;
        if (cli_open("pod:fz", &c) || tree_call(c, 0, 1)) _exit(2);
        if (write(p[1], "r", 1) != 1) _exit(3);
        while (!__atomic_load_n(&ctl->resume, __ATOMIC_SEQ_CST)) usleep(1000);
        ctl->rc[1] = rpcool_call(c, H_COUNT, NULL, 0, NULL, NULL);
        int again = rpcool_call(c, H_COUNT, NULL, 0, NULL, NULL);
        rpcool_disconnect(c);
        _exit(again == ctl->rc[1] ? 0 : 4);
    }
    H_CHECK(1, t_ready_wait(p[0]) == 0);
    kill(k, SIGSTOP);
    set_stage(1, 1);
    int ok = await(&ctl->stage[0], 2, 20000) == 0;
    kill(k, SIGCONT);
    __atomic_store_n(&ctl->resume, 1u, __ATOMIC_SEQ_CST);
    int ws = 0;
    waitpid(k, &ws, 0);
    set_stage(1, 2);
    H_CHECK(1, ok);
    H_CHECK(1, WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    return 0;
}

static void frozen(void)
{
    dev_new();
    pid_t h[2] = {host_spawn(host_fz_srv, NULL), host_spawn(host_fz_cli, NULL)};
    int st[2];
    hosts_wait(h, st, 2, 60000);
    for (int k = 0; k < 2; k++)
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
    CHECK_EQ(ctl->rc[1], RPCOOL_E_FENCED);
    CHECK_EQ(ctl->ext_left, 0u);
    CHECK_EQ(ctl->served[0], 2u); /* the frozen client's one call, the other client's */
}

static uint32_t *lost_said; /* the old server logged that it lost its channel */

static void log_lost(int level, const char *msg, void *user)
{
    (void)level, (void)user;
    if (strstr(msg, "no longer this server's")) __atomic_store_n(lost_said, 1u, __ATOMIC_SEQ_CST);
}

static int host_sf_old(void *arg)
{
    (void)arg;
    int p[2];
    pid_t k = t_fork_pipe(p);
    if (k == 0) {
        rpcool_server_opts o;
        rpcool_server *s = NULL;
        memset(&o, 0, sizeof o);
        o.pod_device = dev;
        o.log = log_lost;
        if (rpcool_server_open("sf", &o, &s)) _exit(2);
        rpcool_server_add_handler(s, H_TREE, h_tree, NULL, 0);
        if (rpcool_server_start(s, 1) || write(p[1], "r", 1) != 1) _exit(3);
        while (!__atomic_load_n(&ctl->resume, __ATOMIC_SEQ_CST)) usleep(1000);
        usleep(500000); /* resumed: it finds the channel lost, serves nothing */
        ctl->served[0] = __atomic_load_n(&served, __ATOMIC_SEQ_CST);
        _exit(rpcool_server_close(s) ? 4 : 0);
    }
    H_CHECK(0, t_ready_wait(p[0]) == 0);
    set_stage(0, 1);
    H_CHECK(0, await(&ctl->stage[1], 1, 20000) == 0);
    kill(k, SIGSTOP);
    set_stage(0, 2);
    H_CHECK(0, await(&ctl->stage[1], 2, 30000) == 0); /* taken over on the other host */
    kill(k, SIGCONT);
    __atomic_store_n(&ctl->resume, 1u, __ATOMIC_SEQ_CST);
    int ws = 0;
    waitpid(k, &ws, 0);
    set_stage(0, 3);
    H_CHECK(0, WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    return 0;
}

static int host_sf_new(void *arg)
{
    (void)arg;
    H_CHECK(1, await(&ctl->stage[0], 1, 20000) == 0);
    rpcool_conn *c = NULL, *d = NULL;
    H_CHECK(1, cli_open("pod:sf", &c) == 0);
    H_CHECK(1, tree_call(c, 0, 1) == 0);
    set_stage(1, 1);
    H_CHECK(1, await(&ctl->stage[0], 2, 20000) == 0);
    ctl->rc[1] = tree_call(c, 0, 2) == 0 ? 0 : rpcool_call(c, H_TREE, NULL, 0, NULL, NULL);
    rpcool_disconnect(c);
    rpcool_server *s = srv_open("sf"); /* waits for the old lease to lapse, recovers it */
    H_CHECK(1, s);
    H_CHECK(1, cli_open("pod:sf", &d) == 0);
    H_CHECK(1, tree_call(d, RPCOOL_SEAL, 3) == 0);
    set_stage(1, 2);
    H_CHECK(1, await(&ctl->stage[0], 3, 30000) == 0); /* the old one resumed and closed */
    uint64_t ok = 0;
    for (unsigned i = 0; i < NCALLS; i++) ok += tree_call(d, RPCOOL_SANDBOX, i) == 0;
    ctl->calls_ok[1] = ok;
    ctl->served[1] = __atomic_load_n(&served, __ATOMIC_SEQ_CST);
    rpcool_disconnect(d);
    H_CHECK(1, rpcool_server_close(s) == 0);
    return 0;
}

static void server_frozen(void)
{
    dev_new();
    lost_said = &ctl->ext_busy;
    pid_t h[2] = {host_spawn(host_sf_old, NULL), host_spawn(host_sf_new, NULL)};
    int st[2];
    hosts_wait(h, st, 2, 90000);
    for (int k = 0; k < 2; k++)
        CHECKF(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0, "host %d: status %#x (line %u)", k,
               st[k], ctl->failed_line[k]);
    CHECK_EQ(ctl->rc[1], RPCOOL_E_PEERDEAD);
    CHECK_EQ(ctl->served[0], 1u); /* the old server: the one call before its stop */
    CHECK_EQ(ctl->calls_ok[1], NCALLS);
    CHECK_EQ(ctl->served[1], NCALLS + 1u);
    CHECK_EQ(ctl->ext_busy, 1u); /* it said so */
}

/* ---- no hosts needed ---- */

struct thr {
    pthread_t t;
    unsigned ok;
};

static void *thr_calls(void *arg)
{
    struct thr *t = (struct thr *)arg;
    rpcool_conn *c = NULL;
    if (cli_open("pod:thr", &c)) return NULL;
    for (unsigned i = 0; i < NCALLS; i++) t->ok += tree_call(c, i % 2 ? RPCOOL_COPY : 0, i) == 0;
    rpcool_disconnect(c);
    return NULL;
}

static void forked_child(void)
{
    dev_new();
    rpcool_server *s = srv_open("fork");
    CHECK(s);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(cli_open("pod:fork", &c), 0);
    uint64_t mine = rcp__pods ? rcp__pod_tag(rcp__pods) : 0;
    fflush(stdout);
    pid_t k = fork();
    if (k == 0) {
        rpcool_conn *d = NULL;
        if (cli_open("pod:fork", &d) || tree_call(d, RPCOOL_COPY, 4)) _exit(2);
        struct rcp__pod *q = rcp__pods;
        int own = q && q->pid == getpid() && rcp__pod_tag(q) != mine;
        rpcool_disconnect(d);
        _exit(own ? 0 : 3);
    }
    int ws = 0;
    waitpid(k, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child: status %#x", ws);
    if (c) CHECK_EQ(tree_call(c, 0, 5), 0); /* the parent's connection is untouched */
    if (c) rpcool_disconnect(c);
    CHECK_EQ(rpcool_server_close(s), 0);
}

static void threads(void)
{
    dev_new();
    rpcool_server *s = srv_open("thr");
    CHECK(s);
    if (!s) return;
    struct thr t[3];
    memset(t, 0, sizeof t);
    for (int k = 0; k < 3; k++) pthread_create(&t[k].t, NULL, thr_calls, &t[k]);
    for (int k = 0; k < 3; k++) {
        pthread_join(t[k].t, NULL);
        CHECK_EQ(t[k].ok, NCALLS);
    }
    CHECK_EQ(__atomic_load_n(&served, __ATOMIC_SEQ_CST), 3u * NCALLS);
    rpcool_server_stats st;
    CHECK_EQ(rpcool_server_get_stats(s, &st), 0);
    CHECK_EQ(st.accepted, 3u);
    CHECK_EQ(rpcool_server_close(s), 0);
}

static void corrupt(void)
{
    dev_new();
    rpcool_server *s = srv_open("cx"); /* formats the device */
    CHECK(s);
    if (s) rpcool_server_close(s);
    struct rcp__pod_hdr good, h;
    int fd = open(dev, O_RDWR);
    CHECK(fd >= 0 && pread(fd, &good, sizeof good, 0) == (ssize_t)sizeof good);
    /* field by field: each bad value is refused */
    for (int k = 0; k < 12; k++) {
        h = good;
        switch (k) {
        case 0: h.magic ^= 1; break;
        case 1: h.layout = 99; break;
        case 2: h.size = 1ull << 50; break;
        case 3: h.base = 0x1234; break;
        case 4: h.lease_off = h.size - 64; break;
        case 5: h.reg_off = 1; break;
        case 6: h.nreg = 0xffffffffu; break;
        case 7: h.area_size = 1ull << 40; break;
        case 8: h.heap_off = h.size + 4096; break;
        case 9: h.nextents = ~0ull; break;
        case 10: h.own_off = h.reg_off; break;
        default: memset(&h, 0xa5, sizeof h); break;
        }
        CHECK(pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
        rpcool_conn *c = NULL;
        int rc = cli_open("pod:cx", &c);
        CHECKF(rc == RPCOOL_E_PROTO, "corruption %d: connect says %s", k, rpcool_strerror(rc));
        rpcool_server_opts o;
        memset(&o, 0, sizeof o);
        o.pod_device = dev;
        rc = rpcool_server_open("cx", &o, &s);
        CHECKF(rc == RPCOOL_E_PROTO, "corruption %d: open says %s", k, rpcool_strerror(rc));
        if (!rc) rpcool_server_close(s);
    }
    /* a lease table scribbled on */
    CHECK(pwrite(fd, &good, sizeof good, 0) == (ssize_t)sizeof good);
    CHECK(pwrite(fd, "garbage!", 8, (off_t)good.lease_off) == 8);
    rpcool_conn *c = NULL;
    CHECK_EQ(cli_open("pod:cx", &c), RPCOOL_E_PROTO);
    close(fd);
}

static void names(void)
{
    dev_new();
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    unsetenv("RPCOOL_POD_DEVICE");
    CHECK_EQ(rpcool_connect("pod:nm", &o, &c), RPCOOL_E_NOCHANNEL); /* no device */
    o.pod_device = "";
    CHECK_EQ(rpcool_connect("pod:nm", &o, &c), RPCOOL_E_NOCHANNEL);
    CHECK_EQ(rpcool_connect("pod:", &o, &c), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_connect("pod:a/b", &o, &c), RPCOOL_E_BADNAME);
    o.pod_device = dev;
    CHECK_EQ(rpcool_connect("pod:nm", &o, &c), RPCOOL_E_NOCHANNEL); /* unknown channel */
    CHECK_EQ(rpcool_connect(t_uniq("nm"), &o, &c), RPCOOL_E_NOCHANNEL); /* nowhere */
    o.pod_device = "/nonexistent/pod";
    CHECK_EQ(rpcool_connect("pod:nm", &o, &c), -ENOENT);
    o.pod_device = "nopath";
    CHECK_EQ(rpcool_connect("pod:nm", &o, &c), -EINVAL);
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.pod_device = "/nonexistent/pod";
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(t_uniq("nm"), &so, &s), -ENOENT);
    /* one name taken twice in the pod */
    rpcool_server *a = srv_open("twice");
    CHECK(a);
    so.pod_device = dev;
    CHECK_EQ(rpcool_server_open("twice", &so, &s), RPCOOL_E_NAMETAKEN);
    if (a) rpcool_server_close(a);
}

static void idle(void)
{
    dev_new();
    rpcool_server *s = srv_open("idle");
    CHECK(s);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(cli_open("pod:idle", &c), 0);
    if (c) CHECK_EQ(tree_call(c, 0, 5), 0);
    usleep(300000); /* past the spin: the serving thread sleeps on its socket */
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    usleep(1000000);
    getrusage(RUSAGE_SELF, &r1);
    long us = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1000000L +
              (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
              (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000L +
              (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
    CHECKF(us < 50000, "an idle server and client used %ld us of CPU in a second", us);
    printf("# idle: server and client used %ld us of CPU in a second\n", us);
    if (c) rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* Wake-ups that never arrive: the server publishes an address no datagram reaches (TEST-NET-1),
   so every ring of a sleeping server is lost; each call is still answered, within the 100 ms a
   sleeping serving thread takes to look by itself (and the connect within reap_ms). */
static void lost_wakeups(void)
{
    dev_new();
    const char *name = t_uniq("lost");
    char pname[128];
    snprintf(pname, sizeof pname, "pod:%s", name);
    setenv("RPCOOL_POD_ADDR", "192.0.2.1", 1);
    rpcool_server *s = srv_open(name);
    unsetenv("RPCOOL_POD_ADDR");
    CHECK(s);
    if (!s) return;
    rpcool_conn *c = NULL;
    uint64_t t0 = rcp__now_ns();
    int r = cli_open(pname, &c);
    CHECKF(r == 0, "connect: %s", rpcool_strerror(r));
    printf("# lost wake-ups: connected in %llu ms\n",
           (unsigned long long)((rcp__now_ns() - t0) / 1000000u));
    uint64_t worst = 0;
    for (int i = 0; c && i < 5; i++) {
        usleep(250000); /* past the spin: the serving thread sleeps (off its 100 ms beat) */
        t0 = rcp__now_ns();
        rpcool_call_opts co = {.timeout_ms = 3000};
        r = rpcool_call_ex(c, H_COUNT, NULL, 0, &co, NULL, NULL);
        uint64_t ms = (rcp__now_ns() - t0) / 1000000u;
        CHECKF(r >= 0, "call %d: %s after %llu ms", i, rpcool_strerror(r), (unsigned long long)ms);
        if (ms > worst) worst = ms;
    }
    CHECKF(worst < 1000, "a call whose wake-up was lost took %llu ms", (unsigned long long)worst);
    printf("# lost wake-ups: the slowest of 5 calls took %llu ms\n", (unsigned long long)worst);
    if (c) rpcool_disconnect(c);
    rpcool_server_close(s);
}

static int host_sem(void *arg)
{
    return cs_serve("sem", NULL, (int)(intptr_t)arg);
}

static void semantics(void)
{
    dev_new();
    setenv("RPCOOL_POD_DEVICE", dev, 1);
    int p[2];
    if (pipe(p)) return;
    pid_t h = host_spawn(host_sem, (void *)(intptr_t)p[1]);
    close(p[1]);
    if (t_ready_wait(p[0])) {
        CHECKF(0, "the suite's server did not start");
        t_kill_wait(h);
        return;
    }
    t_end(); /* the suite reports its own tests */
    const char *only = t_only;
    t_only = NULL;
    cs_suite("pod:sem");
    t_only = only;
    t_begin("semantics_server_closed");
    int st;
    hosts_wait(&h, &st, 1, 30000);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the suite's server ended with %#x", st);
    unsetenv("RPCOOL_POD_DEVICE");
}

/* ---- rpcoolctl --pod ---- */

static char tool[600], schema[700];

/* Run cmd through the shell: its exit status, its output in out. */
static int run_capture(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    size_t n = 0;
    if (!f) return -1;
    while (n + 1 < len) {
        size_t k = fread(out + n, 1, len - 1 - n, f);
        if (!k) break;
        n += k;
    }
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The row of channel name in rpcoolctl's table of pod device channels ("  NAME  STATE ..."),
   or NULL. */
static const char *ctl_row(const char *out, const char *name, char *row, size_t len)
{
    const char *t = strstr(out, "channels of pod device ");
    for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char first[80];
        if (sscanf(l, " %79s", first) == 1 && !strcmp(first, name)) {
            size_t n = strcspn(l, "\n");
            snprintf(row, len, "%.*s", (int)n, l);
            return row;
        }
    }
    return NULL;
}

/* rpcoolctl --pod DEVICE (or $RPCOOL_POD_DEVICE) lists the device's channels without taking a
   lease: a live server with its host, pid and connections; one killed, gone (its lease no
   longer renewed); one closed, not listed; --json as tools/rpcoolctl.md documents
   (tests/rpcoolctl_schema.py); a device that is not there, said, exit 0. */
static void ctl_pod(void)
{
    dev_new();
    static char out[65536];
    char cmd[2000], row[300];
    char live[64], dead[64]; /* a pod server serves its name on this host too: names of our own */
    snprintf(live, sizeof live, "%s", t_uniq("ctllive"));
    snprintf(dead, sizeof dead, "%s", t_uniq("ctlkill"));
    /* a server killed (forked before this process has a thread of its own) */
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        rpcool_server *k = srv_open(dead);
        if (write(p[1], k ? "y" : "n", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char b = 0;
    CHECK(read(p[0], &b, 1) == 1 && b == 'y');
    close(p[0]);
    close(p[1]);
    t_kill_wait(pid);
    rpcool_server *s = srv_open(live);
    rpcool_conn *c = NULL;
    char pl[80];
    snprintf(pl, sizeof pl, "pod:%s", live);
    CHECK(s && cli_open(pl, &c) == 0);
    snprintf(cmd, sizeof cmd, "%s --pod %s", tool, dev);
    CHECK_EQ(run_capture(cmd, out, sizeof out), 0);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *r = ctl_row(out, live, row, sizeof row);
    char name[80], state[16], h[80], conns[32];
    unsigned spid = 0;
    CHECKF(r && sscanf(r, " %79s %15s %79s %u %31s", name, state, h, &spid, conns) == 5 &&
           !strcmp(state, "live") && !strncmp(h, host, 20) && spid == (unsigned)getpid() &&
           !strcmp(conns, "1/8"), "rpcoolctl --pod:\n%s", out);
    r = ctl_row(out, dead, row, sizeof row);
    CHECKF(r && strstr(r, " gone "), "a killed server's channel:\n%s", out);
    CHECKF(strstr(out, "channels of pod device "), "no header:\n%s", out);
    snprintf(cmd, sizeof cmd, "RPCOOL_POD_DEVICE=%s %s --json | python3 %s", dev, tool, schema);
    CHECKF(system(cmd) == 0, "schema check failed: %s", cmd);
    snprintf(cmd, sizeof cmd, "RPCOOL_POD_DEVICE=%s %s --json", dev, tool);
    CHECK_EQ(run_capture(cmd, out, sizeof out), 0);
    char want[120];
    snprintf(want, sizeof want, "\"name\":\"%s\",\"state\":\"live\"", live);
    CHECKF(strstr(out, want) && strstr(out, "\"conns\":1,\"max_conns\":8"),
           "rpcoolctl --json:\n%s", out);
    if (c) rpcool_disconnect(c);
    if (s) rpcool_server_close(s);
    snprintf(cmd, sizeof cmd, "%s --pod %s", tool, dev);
    CHECK_EQ(run_capture(cmd, out, sizeof out), 0);
    CHECKF(!ctl_row(out, live, row, sizeof row), "a closed channel listed:\n%s", out);
    t_rm_channel(dead); /* what the killed server left on this host */
    snprintf(cmd, sizeof cmd, "%s --pod %s/none", tool, t_dir);
    CHECK_EQ(run_capture(cmd, out, sizeof out), 0);
    CHECKF(strstr(out, "/none: No such file or directory"), "a missing device:\n%s", out);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(t_dir, sizeof t_dir, "/tmp/t-rpcool-pod-XXXXXX");
    if (!mkdtemp(t_dir)) {
        printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    ctl = (struct ctl *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char bound[16];
    snprintf(bound, sizeof bound, "%u", BOUND_MS);
    setenv("RPCOOL_POD_LEASE_MS", bound, 1);
    unsetenv("RPCOOL_POD_DEVICE");
    char self[400];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sn > 0 ? sn : 0] = '\0';
    if (strrchr(self, '/')) *strrchr(self, '/') = '\0';
    snprintf(tool, sizeof tool, "%s/../bin/rpcoolctl", self); /* build/t -> build/bin */
    snprintf(schema, sizeof schema, "%s/../../tests/rpcoolctl_schema.py", self);
    if (access(schema, R_OK)) snprintf(schema, sizeof schema, "tests/rpcoolctl_schema.py");
    RUN(names);
    RUN(corrupt);
    RUN(idle);
    RUN(lost_wakeups);
    RUN(threads);
    RUN_NO_TSAN(forked_child);
    if (!t_only || strstr("ctl_pod", t_only))
        TEST_UNLESS(access(tool, X_OK) ? "build/bin/rpcoolctl is not built (make builds it)"
                    : RPCOOL__TSAN ? "it forks a server beside the test's threads" : NULL,
                    ctl_pod);
    const char *why = hosts_skip();
#ifdef T_TSAN
    why = "hosts fork processes with threads";
#endif
    if (!t_only || strstr("both_ways", t_only)) TEST_UNLESS(why, both_ways);
    if (!t_only || strstr("hostile", t_only)) TEST_UNLESS(why, hostile);
    if (!t_only || strstr("client_killed", t_only)) TEST_UNLESS(why, client_killed);
    if (!t_only || strstr("server_killed", t_only)) TEST_UNLESS(why, server_killed);
    if (!t_only || strstr("frozen", t_only)) TEST_UNLESS(why, frozen);
    if (!t_only || strstr("server_frozen", t_only)) TEST_UNLESS(why, server_frozen);
    if (!t_only || strstr("semantics", t_only)) TEST_UNLESS(why, semantics);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", t_dir);
    if (system(cmd)) {}
    return T_DONE();
}
