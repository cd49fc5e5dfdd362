// VM
// LIBS: -libverbs -pthread
// VM-ASAN
/* tests/vm/test_rpcool_rdma.c - rpcool between pods over RDMA, on Soft-RoCE.
 * One guest ("single"): the server is a child process in pod A (the default pod); the client
 * processes are in pod B (SHMHEAP_POD=shmheap-b.pod, SHMHEAP_POD_ID=1) and connect with
 * "rdma://127.0.0.1/NAME" (the server runs krconn's meta server: rdma = "serve").
 * Two guests ("server" / "client PEER"): the same checks across the pair network.
 *   echo            a string there and back
 *   tree_arg        a tree of N nodes (1..4096) in an arena sent as an extent: the server sums it
 *   tree_reply      the server builds a tree with rpcool_ctx_alloc: the client walks it in place
 *   fetch_on_touch  a list whose nodes are NOT sent: the server's mirror fetches each page
 *   changed         the client changes the list between calls: the server sees the new values
 *   keep_patch      pages kept from the last call: unchanged ones are not sent again, a changed
 *                   byte travels as a patch, a page the HANDLER wrote is not kept (the client's
 *                   bytes are seen), a 64 B argument and an arena tree changed between calls
 *   bad_input       unknown handler, argument outside the heap, bad flags
 *   async           64 calls in flight, completed with rpcool_wait and rpcool_progress
 *   threads         4 threads x 1000 synchronous calls on one connection, every answer checked
 *                   (a wrong one said in full: its bytes, where it landed, the call's slot)
 *   interleaved     3 threads' checked echo calls on one connection while a fourth makes deferred
 *                   calls answered 0-3 ms later by a server thread, deferred calls that time out
 *                   first, calls cancelled (queued, running, answered), discarded replies and
 *                   cancelled running handlers; 3 connections in turn at one heap address; also
 *                   under ASan+UBSan (test_rpcool_rdma.asan)
 *   fuzz_ring       malformed frames (garbage types, lengths, addresses) through the real ring:
 *                   the server drops that connection and keeps serving a good one
 *   server_killed   the server is SIGKILLed mid-call: the call fails with RPCOOL_E_PEERDEAD
 *   client_killed   a client is SIGKILLed mid-call: the server reclaims it and serves others
 *   killed_client_pod  killed clients leave no heap file and no taken range in their pod; one
 *                   that starts at once connects though the server still mirrors the dead one
 *   peer            rpcool_ctx_peer of an RDMA client: its claims (pid, uid, gid, pod id),
 *                   unauthenticated, and its address; rpcool_cancel says RPCOOL_E_NOTSUP
 *   cs_*            the call-semantics suite of tests/call_semantics.h (as on shared memory:
 *                   time limits and the checked-read budget included), its server another
 *                   process of pod A publishing at the first one's meta server (one guest)
 *   server_closes   three times, a server of its own ("rdmac"): stats.conns of
 *                   rpcool_server_get_stats and rpcool_channel_stats count its RDMA connections
 *                   (2, then 3, then 2); it closes, and the next call of each of its clients
 *                   fails with RPCOOL_E_CLOSED within 3 s (not RPCOOL_E_PEERDEAD after the retry
 *                   bound). Two guests: "close-server" / "close-client PEER" do the same across
 *                   the pair network (without rpcool_channel_stats, which is local). */
#define RPCOOL_WITH_RDMA 1
#define RPCOOL__R_TEST_HOOKS 1
#define RPCOOL_IMPLEMENTATION
#include "../../rpcool.h"
#include "vmt.h"
#include "../call_semantics.h"
#include <dirent.h>
#include <poll.h>
#include <sys/wait.h>

/* RDMAT_ONLY (tests/vm/run.sh rpcool-rdma's VM_ONLY): NAME[,NAME...][@ROUNDS] runs only the
   tests whose names contain one of the NAMEs (the cs_* suite: those containing the whole string),
   the client's list ROUNDS times over in one process (a rare failure looked for). */
static int rdmat_rounds = 1;
static int rdmat_pick(const char *fn)
{
    if (!t_only) return 1;
    const char *p = t_only;
    while (*p && *p != '@') {
        size_t n = strcspn(p, ",@");
        char name[64];
        if (n && n < sizeof name) {
            memcpy(name, p, n);
            name[n] = 0;
            if (strstr(fn, name)) return 1;
        }
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}
#undef RUN
#define RUN(fn) do { if (rdmat_pick(#fn)) TEST(fn); } while (0)

#define NAME "rdmat"
enum { H_ECHO = 1, H_SUM, H_TREE, H_LIST, H_SLOW, H_QUIT, H_DOC, H_FNV, H_SCRIBBLE, H_POOLS, H_WHO,
       H_HOOKS, H_SPIN, H_DEFER, H_CONNS, H_DEFECHO };

struct node {
    struct node *l, *r;
    uint64_t v;
};

struct lnode {
    struct lnode *next;
    uint64_t v;
    char pad[4096 - 16]; /* one page each: every node is a separate fetch */
};

static uint64_t sum_tree(const struct node *n) { return n ? n->v + sum_tree(n->l) + sum_tree(n->r) : 0; }

/* A reply's blocks are freed one by one, on both transports. */
static void free_tree(rpcool_conn *c, struct node *n)
{
    if (!n) return;
    free_tree(c, n->l);
    free_tree(c, n->r);
    rpcool_free(c, n);
}

static int h_sum(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user, (void)len;
    uint64_t *r = (uint64_t *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    *r = sum_tree((const struct node *)arg);
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return 0;
}

static struct node *build(rpcool_ctx *ctx, unsigned n, uint64_t *next)
{
    if (!n) return NULL;
    struct node *x = (struct node *)rpcool_ctx_alloc(ctx, sizeof *x);
    if (!x) return NULL;
    x->v = (*next)++;
    unsigned left = (n - 1) / 2;
    x->l = build(ctx, left, next);
    x->r = build(ctx, n - 1 - left, next);
    return x;
}

static int h_tree(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (len != sizeof(uint64_t)) return RPCOOL_E_INVAL;
    uint64_t next = 1;
    struct node *t = build(ctx, (unsigned)*(uint64_t *)arg, &next);
    rpcool_ctx_reply(ctx, t, sizeof *t);
    return 0;
}

static int h_list(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user, (void)len;
    uint64_t s = 0;
    for (struct lnode *n = *(struct lnode **)arg; n; n = n->next) {
        RPCOOL_NEED(ctx, n);
        s += n->v;
    }
    return (int)(s & 0x7fffffff);
}

/* A document (a map of string keys to strings) from another pod, read with the checked
   accessors of a sandboxed handler: the value of "k<n>" as a number. */
static int h_doc(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user, (void)len;
    const rpcool_map *m = (const rpcool_map *)rpcool_ctx_need(ctx, arg, sizeof(rpcool_map));
    uint64_t v = 0;
    if (!rpcool_map_get_checked(ctx, m, "k42", &v)) return RPCOOL_E_NOHANDLER - 100;
    const char *s = rpcool_ctx_need_str(ctx, (const char *)(uintptr_t)v);
    return atoi(s + 1);
}

static int fnv(const unsigned char *p, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 16777619u;
    return (int)(h & 0x7fffffff);
}

/* The checksum of the argument's bytes. */
static int h_fnv(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)user;
    return fnv((const unsigned char *)arg, len);
}

/* The same, then the handler writes over its argument (the mirror): that must not be kept. */
static int h_scribble(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)user;
    int h = fnv((const unsigned char *)arg, len);
    memset(arg, 0xa5, len);
    return h;
}

static int h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    usleep(300000);
    return 7;
}

static void logf_(int level, const char *msg, void *user)
{
    if (level <= RPCOOL_LOG_INFO) printf("# %s: %s\n", (const char *)user, msg);
}

/* The QPs the server's krconn contexts keep in their pools (rpcool's and the meta server's):
   not a leak, and their number varies with how recently QPs were given back. */
static int h_pools(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    struct rpcool__rsrv *rs = ((rpcool_server *)user)->rdma;
    krconn_stats a, b;
    memset(&b, 0, sizeof b);
    if (krconn_ctx_get_stats(rs->kc, &a)) return -1;
    if (rs->meta && krconn_ctx_get_stats(rs->meta, &b)) return -1;
    return (int)(a.pool_ready + b.pool_ready);
}

static int h_quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    rpcool_server_stop((rpcool_server *)user);
    return 0;
}

/* The server's stats.conns. */
static int h_conns(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    rpcool_server_stats st;
    int rc = rpcool_server_get_stats((rpcool_server *)user, &st);
    return rc ? rc : (int)st.conns;
}

/* The slot and generation of the synchronous call this thread just made on c, if it keeps
   that slot (a connection's kept slot: rpcool__hot_*), else "not kept". */
static void call_slot(rpcool_conn *c, char *out, size_t n)
{
    uint64_t w = rcp__load(&c->hot);
    struct rpcool__cell *cl = rpcool__cell();
    if (cl && (w >> 8) == (uint64_t)(uintptr_t)cl) {
        unsigned i = (unsigned)(w & 0xff);
        snprintf(out, n, "slot %u gen %u", i, (unsigned)((c->pend[i].gen - 1) & 0x3fffffffu));
    } else {
        snprintf(out, n, "slot not kept by this thread");
    }
}

/* A wrong answer, said in full (one "#" line, for the log): what came back (its address, where
   in the heap and in the reply region, its length, its bytes printable and in hex: zeros, another
   thread's or an earlier call's text), what was sent and the call's slot and generation. */
static void echo_saw(rpcool_conn *c, const void *want, size_t wn, const void *got, size_t n)
{
    char slot[64], txt[200], hex[200];
    call_slot(c, slot, sizeof slot);
    const unsigned char *g = (const unsigned char *)got;
    size_t zeros = 0, show = n < 64 ? n : 64, t = 0, x = 0, same = 0;
    int readable = got && shmheap_contains(rpcool_heap(c), got, n);
    for (size_t k = 0; readable && k < n; k++) zeros += g[k] == 0;
    while (readable && same < n && same < wn && g[same] == ((const unsigned char *)want)[same])
        same++;
    for (size_t k = 0; readable && k < show && t + 5 < sizeof txt; k++)
        t += (size_t)snprintf(txt + t, sizeof txt - t, g[k] >= 32 && g[k] < 127 ? "%c" : "\\%02x",
                              g[k]);
    for (size_t k = 0; readable && k < show && k < 32 && x + 3 < sizeof hex; k++)
        x += (size_t)snprintf(hex + x, sizeof hex - x, "%02x", g[k]);
    txt[t] = hex[x] = 0;
    uint64_t a = (uint64_t)(uintptr_t)got, base = (uint64_t)(uintptr_t)shmheap_base(rpcool_heap(c));
    struct rpcool__rconn *rc = c->rdma;
    printf("# WRONG ANSWER (%s): sent %zu bytes \"%.*s\"; got %zu bytes at %p (heap +%#llx, reply "
           "region %s +%#llx), %zu zero bytes, first %zu bytes right: \"%s\" hex %s\n", slot, wn,
           (int)(wn > 64 ? 64 : wn), (const char *)want, n, got,
           (unsigned long long)(a - base), rc && a - rc->rbase < rc->rlen ? "in" : "NOT in",
           (unsigned long long)(rc ? a - rc->rbase : 0), zeros, same,
           readable ? txt : "(not in the heap)", readable ? hex : "-");
}

/* One echo call of msg, its answer checked: 0, or why not (an error code, or 1: wrong answer,
   said in full by echo_saw). */
static int echo_once(rpcool_conn *c, const char *msg)
{
    char *m = rpcool_strdup(c, msg);
    void *ret = NULL;
    size_t n = 0, wn = strlen(msg) + 1;
    int rc = m ? rpcool_call(c, H_ECHO, m, wn, &ret, &n) : SHMHEAP_E_FULL;
    if (!rc && (n != wn || !ret || memcmp(ret, msg, wn))) {
        echo_saw(c, msg, wn, ret, n);
        rc = 1;
    }
    rpcool_free(c, ret);
    rpcool_free(c, m);
    return rc;
}

/* A client of the server's own pod (shared memory) calling while RDMA clients call: every
   answer checked. Returns the number of failures. */
static int local_client(void)
{
    rpcool_conn *c;
    int bad = 0, rc = rpcool_connect(NAME, NULL, &c);
    if (rc) return 1000;
    for (int i = 0; i < 300; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "local %d", i);
        bad += echo_once(c, msg) != 0;
        usleep(20000);
    }
    rpcool_disconnect(c);
    return bad;
}

/* Replies with what rpcool_ctx_peer says, and whether the call was cancelled. */
static int h_who(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_peer *p = (rpcool_peer *)rpcool_ctx_alloc(ctx, sizeof *p);
    if (!p) return SHMHEAP_E_FULL;
    *p = *rpcool_ctx_peer(ctx);
    rpcool_ctx_reply(ctx, p, sizeof *p);
    return rpcool_ctx_cancelled(ctx) + (rpcool_ctx_conn_user(ctx) != NULL) * 2;
}

/* The server's connection hooks, for RDMA clients: a client claiming pod "7" is refused; the
   others get a conn_user (a marker) and are counted; on_disconnect counts them by reason. */
static const char hook_marker[] = "rdma conn";
static uint64_t hk_in, hk_out[4]; /* hk_out: why 0, RPCOOL_E_PEERDEAD, RPCOOL_E_CLOSED, other */

static int on_conn(rpcool_server *s, const rpcool_peer *p, void **conn_user, void *user)
{
    (void)s, (void)user;
    if (p->transport != RPCOOL_TRANSPORT_RDMA) return 0;
    if (!strcmp(p->pod, "7")) return RPCOOL_E_REFUSED;
    *conn_user = (void *)hook_marker;
    __atomic_fetch_add(&hk_in, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static void on_disc(rpcool_server *s, const rpcool_peer *p, void *conn_user, int why, void *user)
{
    (void)s, (void)user;
    if (p->transport != RPCOOL_TRANSPORT_RDMA) return;
    if (conn_user != hook_marker) why = 1; /* counted as "other": a wrong pointer */
    int k = why == 0 ? 0 : why == RPCOOL_E_PEERDEAD ? 1 : why == RPCOOL_E_CLOSED ? 2 : 3;
    __atomic_fetch_add(&hk_out[k], 1, __ATOMIC_SEQ_CST);
}

static uint64_t spin_started, spin_seen; /* H_SPIN: handlers started, cancels they saw */

/* Spins (up to 10 s) until its call is cancelled. */
static int h_spin(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    __atomic_fetch_add(&spin_started, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2000; i++) {
        if (rpcool_ctx_cancelled(ctx)) {
            __atomic_fetch_add(&spin_seen, 1, __ATOMIC_SEQ_CST);
            return RPCOOL_E_CANCELLED;
        }
        usleep(5000);
    }
    return 0;
}

/* H_DEFER: the call leaves the RDMA thread (rpcool_ctx_defer); a thread of ours answers it
   300 ms later with a block of the client's reply region holding "late: " + the argument. */
struct late { rpcool_deferred *d; char text[64]; };

static void *late_thread(void *p)
{
    struct late *l = (struct late *)p;
    usleep(300000);
    size_t n = strlen(l->text) + 1;
    char *r = (char *)rpcool_deferred_alloc(l->d, n);
    if (r) memcpy(r, l->text, n);
    rpcool_deferred_reply(l->d, r ? 0 : SHMHEAP_E_FULL, r, r ? n : 0);
    free(l);
    return NULL;
}

static int h_defer(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    struct late *l = (struct late *)calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    snprintf(l->text, sizeof l->text, "late: %.*s", (int)(len < 40 ? len : 40), (char *)arg);
    int rc = rpcool_ctx_defer(ctx, &l->d);
    pthread_t t;
    if (rc || pthread_create(&t, NULL, late_thread, l)) {
        free(l);
        return rc ? rc : -EAGAIN;
    }
    pthread_detach(t);
    return 0;
}

/* H_DEFECHO: an echo answered by another thread (a deferred reply) after the delay its argument
   starts with ("dN " or "rN ": N milliseconds), while the RDMA thread serves the connection's
   next calls; "d": the handler copies the argument, "r": the answering thread reads it then
   (the caller still waits: its pages come back from the client if a later call dropped them). */
struct decho { rpcool_deferred *d; size_t n; unsigned ms; const char *arg; char text[]; };

static void *decho_thread(void *p)
{
    struct decho *e = (struct decho *)p;
    if (e->ms) usleep(e->ms * 1000u);
    char *r = (char *)rpcool_deferred_alloc(e->d, e->n);
    if (r) memcpy(r, e->arg ? e->arg : e->text, e->n);
    rpcool_deferred_reply(e->d, r ? 0 : SHMHEAP_E_FULL, r, r ? e->n : 0);
    free(e);
    return NULL;
}

static int h_defecho(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    struct decho *e = (struct decho *)calloc(1, sizeof *e + (len ? len : 1));
    if (!e) return -ENOMEM;
    e->n = len;
    if (len) memcpy(e->text, arg, len);
    if (len > 2 && (e->text[0] == 'd' || e->text[0] == 'r')) e->ms = (unsigned)atoi(e->text + 1);
    if (len > 2 && e->text[0] == 'r') e->arg = (const char *)arg;
    int rc = rpcool_ctx_defer(ctx, &e->d);
    pthread_t t;
    if (rc || pthread_create(&t, NULL, decho_thread, e)) {
        free(e);
        return rc ? rc : -EAGAIN;
    }
    pthread_detach(t);
    return 0;
}

enum { HK_N = 8 };
/* Replies with the counts: {connected, left by BYE, reaped, closed, other; H_SPIN started,
   H_SPIN saw its cancel, the server's stats.cancelled}. */
static int h_hooks(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len;
    uint64_t *v = (uint64_t *)rpcool_ctx_alloc(ctx, HK_N * sizeof *v);
    if (!v) return SHMHEAP_E_FULL;
    v[0] = __atomic_load_n(&hk_in, __ATOMIC_SEQ_CST);
    for (int k = 0; k < 4; k++) v[1 + k] = __atomic_load_n(&hk_out[k], __ATOMIC_SEQ_CST);
    v[5] = __atomic_load_n(&spin_started, __ATOMIC_SEQ_CST);
    v[6] = __atomic_load_n(&spin_seen, __ATOMIC_SEQ_CST);
    rpcool_server_stats st;
    v[7] = rpcool_server_get_stats((rpcool_server *)user, &st) ? 0 : st.cancelled;
    rpcool_ctx_reply(ctx, v, HK_N * sizeof *v);
    return 0;
}

static int with_local; /* the server role also runs a local (shared-memory) client */

static int serve(const char *how)
{
    rpcool_server *s;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.rdma = how;
    so.log = logf_;
    so.log_user = (void *)"server";
    so.on_connect = on_conn;
    so.on_disconnect = on_disc;
    int rc = rpcool_server_open(NAME, &so, &s);
    if (rc) {
        printf("FAIL server_open: %s\n", rpcool_strerror(rc));
        return 1;
    }
    /* the handlers: id, function, safety; `with_s` ones get the server as their user pointer */
    static const struct { unsigned id; rpcool_handler *fn; unsigned safety; int with_s; } hs[] = {
        {H_ECHO, t_h_echo, 0, 0},   {H_SUM, h_sum, 0, 0},     {H_TREE, h_tree, 0, 0},
        {H_LIST, h_list, RPCOOL_SANDBOX, 0}, {H_SLOW, h_slow, 0, 0}, {H_QUIT, h_quit, 0, 1},
        {H_POOLS, h_pools, 0, 1},   {H_DOC, h_doc, RPCOOL_SANDBOX, 0}, {H_FNV, h_fnv, 0, 0},
        {H_SCRIBBLE, h_scribble, 0, 0}, {H_WHO, h_who, 0, 0}, {H_HOOKS, h_hooks, 0, 1}, {H_SPIN, h_spin, 0, 0}, {H_DEFER, h_defer, 0, 0},
        {H_DEFECHO, h_defecho, 0, 0},
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        rpcool_server_add_handler(s, hs[i].id, hs[i].fn, hs[i].with_s ? s : NULL, hs[i].safety);
    pid_t lp = -1;
    if (with_local && (lp = fork()) == 0) _exit(local_client() ? 1 : 0);
    if (with_local) rpcool_server_start(s, 1); /* shared-memory clients too */
    rpcool_serve(s); /* until killed, or a client calls H_QUIT */
    if (lp > 0) {
        int ws = 0;
        waitpid(lp, &ws, 0);
        CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the local client's calls failed (%#x)", ws);
    }
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    printf("# server: %llu calls, %llu accepted, %llu closed, %llu reaped, %llu bad entries\n",
           (unsigned long long)st.calls, (unsigned long long)st.accepted,
           (unsigned long long)st.closed, (unsigned long long)st.reaped,
           (unsigned long long)st.bad_entries);
    CHECK(st.calls > 100 && st.reaped >= 1 && st.bad_entries >= 1); /* the fuzz and kill reached it */
    rpcool_server_close(s);
    return 0;
}

static char where[200];

/* A connection to the test's server; its calls time out after timeout_ms (0: never). */
static rpcool_conn *conn_with(unsigned timeout_ms)
{
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = 20000;
    o.heap_size = 16 << 20;
    o.log = logf_;
    o.log_user = (void *)"client";
    int rc = rpcool_connect(where, &o, &c);
    CHECKF(rc == 0, "connect %s: %s", where, rpcool_strerror(rc));
    return c;
}

static rpcool_conn *conn(void) { return conn_with(0); }

static void echo(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    for (int i = 0; i < 50; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "hello %d over rdma", i);
        char *m = rpcool_strdup(c, msg);
        void *ret = NULL;
        size_t n = 0;
        int rc = rpcool_call(c, H_ECHO, m, strlen(m) + 1, &ret, &n);
        CHECKF(rc == 0, "call %d: %s", i, rpcool_strerror(rc));
        if (rc) break;
        CHECK(n == strlen(msg) + 1 && !strcmp((char *)ret, msg));
        CHECK(shmheap_contains(rpcool_heap(c), ret, n)); /* in our own heap, at its address */
        rpcool_free(c, ret);
        rpcool_free(c, m);
    }
    rpcool_disconnect(c);
}

static struct node *abuild(rpcool_arena *a, unsigned n, uint64_t *sum, uint64_t *next)
{
    if (!n) return NULL;
    struct node *x = (struct node *)rpcool_arena_alloc(a, sizeof *x, 8);
    x->v = (*next)++ * 3;
    *sum += x->v;
    unsigned left = (n - 1) / 2;
    x->l = abuild(a, left, sum, next);
    x->r = abuild(a, n - 1 - left, sum, next);
    return x;
}

static void tree_arg(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    unsigned sizes[] = {1, 16, 256, 4096};
    for (unsigned k = 0; k < 4; k++) {
        rpcool_arena a;
        CHECK(rpcool_arena_init(&a, rpcool_heap(c), sizes[k] * sizeof(struct node) + 4096) == 0);
        uint64_t want = 0, next = 1;
        struct node *t = abuild(&a, sizes[k], &want, &next);
        rpcool_extent ex = {a.base, rpcool_arena_used(&a)};
        rpcool_call_opts co;
        memset(&co, 0, sizeof co);
        co.extents = &ex;
        co.nextents = 1;
        void *ret = NULL;
        size_t n = 0;
        int rc = rpcool_call_ex(c, H_SUM, t, sizeof *t, &co, &ret, &n);
        CHECKF(rc == 0, "%u nodes: %s", sizes[k], rpcool_strerror(rc));
        CHECKF(rc || *(uint64_t *)ret == want, "%u nodes: sum %llu, want %llu", sizes[k],
               rc ? 0ull : (unsigned long long)*(uint64_t *)ret, (unsigned long long)want);
        if (!rc) rpcool_free(c, ret);
        rpcool_arena_destroy(&a);
    }
    rpcool_disconnect(c);
}

static void tree_reply(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    unsigned sizes[] = {1, 16, 256, 4096};
    for (unsigned k = 0; k < 4; k++) {
        uint64_t *n = (uint64_t *)rpcool_alloc(c, sizeof *n);
        *n = sizes[k];
        void *ret = NULL;
        size_t len = 0;
        int rc = rpcool_call(c, H_TREE, n, sizeof *n, &ret, &len);
        CHECKF(rc == 0, "%u nodes: %s", sizes[k], rpcool_strerror(rc));
        uint64_t want = (uint64_t)sizes[k] * (sizes[k] + 1) / 2;
        CHECKF(rc || sum_tree((struct node *)ret) == want, "%u nodes: walked sum wrong", sizes[k]);
        if (!rc) free_tree(c, (struct node *)ret);
        rpcool_free(c, n);
    }
    /* the reply region (4 MiB) is reused once every block is freed, and a discarded reply (ret
       NULL) leaves nothing in it: 600 calls of 256 nodes each way, no SHMHEAP_E_FULL */
    for (int i = 0; i < 1200; i++) {
        uint64_t *n = (uint64_t *)rpcool_alloc(c, sizeof *n);
        *n = 256;
        void *ret = NULL;
        size_t len = 0;
        int rc = i < 600 ? rpcool_call(c, H_TREE, n, sizeof *n, &ret, &len)
                         : rpcool_call(c, H_TREE, n, sizeof *n, NULL, NULL);
        if (rc) { CHECKF(0, "call %d: %s", i, rpcool_strerror(rc)); break; }
        if (i < 600) free_tree(c, (struct node *)ret);
        rpcool_free(c, n);
    }
    rpcool_disconnect(c);
}

static void fetch_and_change(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    struct lnode *head = NULL;
    uint64_t want = 0;
    for (int i = 0; i < 20; i++) {
        struct lnode *n = (struct lnode *)rpcool_alloc_pages(c, sizeof *n);
        n->v = (uint64_t)i + 1;
        n->next = head;
        head = n;
        want += n->v;
    }
    struct lnode **arg = (struct lnode **)rpcool_alloc(c, sizeof *arg);
    *arg = head;
    int rc = rpcool_call(c, H_LIST, arg, sizeof *arg, NULL, NULL);
    CHECKF(rc == (int)want, "fetch_on_touch: %d (%s), want %llu", rc, rc < 0 ? rpcool_strerror(rc) : "",
           (unsigned long long)want);
    for (int round = 0; round < 3; round++) { /* changed between calls: never served stale */
        want = 0;
        for (struct lnode *n = head; n; n = n->next) {
            n->v += 1000;
            want += n->v;
        }
        rc = rpcool_call(c, H_LIST, arg, sizeof *arg, NULL, NULL);
        CHECKF(rc == (int)want, "changed round %d: %d, want %llu", round, rc, (unsigned long long)want);
    }
    rpcool_disconnect(c);
}

static void docstore(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    for (int round = 0; round < 5; round++) {
        rpcool_arena a;
        CHECK(rpcool_arena_init(&a, rpcool_heap(c), 64 << 10) == 0);
        rpcool_map *m = rpcool_map_new(&a, 256);
        for (int k = 0; k < 100; k++) {
            char key[16], val[16];
            snprintf(key, sizeof key, "k%d", k);
            snprintf(val, sizeof val, "v%d", k * 7 + round);
            CHECK(rpcool_map_put(&a, m, key, (uint64_t)(uintptr_t)rpcool_arena_strdup(&a, val),
                                 NULL) == 0);
        }
        rpcool_extent ex = {a.base, rpcool_arena_used(&a)};
        rpcool_call_opts co;
        memset(&co, 0, sizeof co);
        co.extents = &ex;
        co.nextents = round & 1; /* odd rounds: sent along; even: fetched page by page */
        int rc = rpcool_call_ex(c, H_DOC, m, sizeof *m, &co, NULL, NULL);
        CHECKF(rc == 42 * 7 + round, "round %d: %d (%s)", round, rc, rc < 0 ? rpcool_strerror(rc) : "");
        rpcool_arena_destroy(&a);
    }
    rpcool_disconnect(c);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Not a benchmark (make bench has one): the no-op round trip's median here, for the log. */
static void noop(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    enum { N = 2000 };
    static uint64_t ns[N];
    int bad = 0;
    char *arg = (char *)rpcool_alloc(c, 64); /* the same 64-byte argument each time */
    memset(arg, 7, 64);
    for (int i = 0; i < N + 100; i++) {
        uint64_t t0 = rcp__now_ns();
        int rc = rpcool_call(c, H_SLOW + 100, arg, 64, NULL, NULL);
        if (i >= 100) ns[i - 100] = rcp__now_ns() - t0;
        bad += rc != RPCOOL_E_NOHANDLER;
    }
    qsort(ns, N, sizeof ns[0], cmp_u64);
    printf("# no-op call (unknown handler, 64 B argument) round trip: median %.1f us, p99 %.1f us (the client "
           "slept %llu times)\n", ns[N / 2] / 1e3, ns[N * 99 / 100] / 1e3,
           (unsigned long long)c->rdma->sleeps);
    CHECK_EQ(bad, 0);
    rpcool_disconnect(c);
}

static void keep_patch(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    size_t len = 3 * 4096 + 100;
    unsigned char *b = (unsigned char *)rpcool_alloc(c, len);
    for (size_t i = 0; i < len; i++) b[i] = (unsigned char)(i * 7 + 1);
    uint64_t kept0 = c->rdma->kept_bytes, whole0 = c->rdma->whole_bytes;
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len)); /* sent whole */
    uint64_t kept1 = c->rdma->kept_bytes, whole1 = c->rdma->whole_bytes;
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len)); /* kept */
    uint64_t kept2 = c->rdma->kept_bytes, whole2 = c->rdma->whole_bytes;
    CHECKF(whole1 > whole0 && kept2 - kept1 >= 3 * 4096 && whole2 == whole1,
           "kept %llu -> %llu -> %llu, whole %llu -> %llu -> %llu", (unsigned long long)kept0,
           (unsigned long long)kept1, (unsigned long long)kept2, (unsigned long long)whole0,
           (unsigned long long)whole1, (unsigned long long)whole2);
    b[5000] ^= 0x40; /* one byte: a patch */
    b[len - 1] ^= 0x11;
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len));
    CHECK_EQ(c->rdma->whole_bytes, whole2);
    /* the handler writes its argument: the server must not keep those pages */
    CHECK_EQ(rpcool_call(c, H_SCRIBBLE, b, len, NULL, NULL), fnv(b, len));
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len));
    b[77] ^= 1;
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len));
    CHECK_EQ(rpcool_call(c, H_FNV, b, len, NULL, NULL), fnv(b, len));
    /* a 64-byte argument, changed in place between calls */
    unsigned char *m = (unsigned char *)rpcool_alloc(c, 64);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 64; i++) m[i] = (unsigned char)(round * 31 + i * (round & 3));
        CHECKF(rpcool_call(c, H_FNV, m, 64, NULL, NULL) == fnv(m, 64), "64 B round %d", round);
    }
    /* a tree in an arena: one value changes between calls, the new sum is seen */
    rpcool_arena a;
    CHECK(rpcool_arena_init(&a, rpcool_heap(c), 4096 * sizeof(struct node) + 4096) == 0);
    uint64_t want = 0, next = 1;
    struct node *t = abuild(&a, 4096, &want, &next);
    rpcool_extent ex = {a.base, rpcool_arena_used(&a)};
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.extents = &ex;
    co.nextents = 1;
    for (int round = 0; round < 6; round++) {
        void *ret = NULL;
        size_t n = 0;
        int rc = rpcool_call_ex(c, H_SUM, t, sizeof *t, &co, &ret, &n);
        CHECKF(rc == 0 && *(uint64_t *)ret == want, "tree round %d: %s, sum %llu want %llu", round,
               rpcool_strerror(rc), rc ? 0ull : (unsigned long long)*(uint64_t *)ret,
               (unsigned long long)want);
        if (!rc) rpcool_free(c, ret);
        struct node *x = t;
        for (int d = 0; d < round && x->r; d++) x = x->r; /* a deeper node each round */
        x->v += 1000;
        want += 1000;
    }
    rpcool_arena_destroy(&a);
    printf("# keep_patch: %llu bytes kept, %llu sent as whole pages, %llu calls compared in "
           "place\n", (unsigned long long)c->rdma->kept_bytes, (unsigned long long)c->rdma->whole_bytes,
           (unsigned long long)c->rdma->same_calls);
    CHECK(c->rdma->same_calls >= 10); /* the repeated calls on the same ranges took the fast path */
    rpcool_disconnect(c);
}

static void bad_input(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    char *m = rpcool_strdup(c, "x");
    CHECK_EQ(rpcool_call(c, 999, m, 2, NULL, NULL), RPCOOL_E_NOHANDLER);
    static char outside[64];
    CHECK_EQ(rpcool_call(c, H_ECHO, outside, sizeof outside, NULL, NULL), RPCOOL_E_BADPTR);
    CHECK_EQ(rpcool_call(c, RPCOOL_MAX_HANDLERS, m, 2, NULL, NULL), RPCOOL_E_INVAL);
    rpcool_call_opts co;
    memset(&co, 0, sizeof co);
    co.safety = 64;
    CHECK_EQ(rpcool_call_ex(c, H_ECHO, m, 2, &co, NULL, NULL), RPCOOL_E_INVAL);
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(c, H_ECHO, m, 2, &ret, &n), 0); /* still served */
    rpcool_free(c, ret);
    rpcool_disconnect(c);
}

static void peer(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(c, H_WHO, NULL, 0, &ret, &n), 2); /* not cancelled, its conn_user */
    CHECK_EQ(n, sizeof(rpcool_peer));
    if (ret && n == sizeof(rpcool_peer)) {
        const rpcool_peer *p = (const rpcool_peer *)ret;
        CHECK_EQ(p->transport, RPCOOL_TRANSPORT_RDMA);
        CHECK_EQ(p->authenticated, 0);
        CHECK_EQ(p->pid, getpid());
        CHECK_EQ(p->uid, getuid());
        CHECK_EQ(p->gid, getgid());
        CHECKF(!strcmp(p->pod, "1"), "pod \"%s\"", p->pod);
        CHECKF(p->addr[0] != '\0', "no address");
        printf("# peer: pid %d uid %u pod \"%s\" addr %s\n", (int)p->pid, (unsigned)p->uid,
               p->pod, p->addr);
    }
    rpcool_free(c, ret);
    rpcool_server_stats st; /* the server's list, asked at its socket (one guest only) */
    rpcool_conn_stats cs[8];
    unsigned nc = 0, mine = 0;
    if (rpcool_channel_stats(NAME, 2000, &st, cs, 8, &nc) == 0) {
        for (unsigned k = 0; k < nc && k < 8; k++)
            mine += cs[k].peer.transport == RPCOOL_TRANSPORT_RDMA && cs[k].peer.pid == getpid() &&
                    !cs[k].peer.authenticated && !strcmp(cs[k].peer.pod, "1");
        CHECKF(mine == 1, "%u of the server's %u connections are this RDMA client", mine, nc);
    }
    rpcool_disconnect(c);
}

static int hook_counts(rpcool_conn *c, uint64_t v[HK_N])
{
    void *ret = NULL;
    size_t n = 0;
    int rc = rpcool_call(c, H_HOOKS, NULL, 0, &ret, &n);
    if (!rc && n == HK_N * sizeof(uint64_t)) memcpy(v, ret, n);
    else if (!rc) rc = -1;
    rpcool_free(c, ret);
    return rc;
}

/* The server's hooks for RDMA clients: a client it refuses gets RPCOOL_E_REFUSED (and is never
   counted as connected); an accepted one is counted once in, and once out with why 0 after its
   disconnect. */
static void hooks(void)
{
    rpcool_conn *q = conn(); /* asks for the counts */
    if (!q) return;
    uint64_t a[HK_N] = {0}, b[HK_N] = {0};
    for (int i = 0; i < 25; i++) { /* earlier tests' connections reclaimed: the counts settle */
        CHECK_EQ(hook_counts(q, a), 0);
        usleep(200000);
        if (hook_counts(q, b) || !memcmp(a, b, sizeof a)) break;
    }
    pid_t p = fork();
    if (p == 0) { /* claims pod 7 (SHMHEAP_POD_ID): refused */
        setenv("SHMHEAP_POD_ID", "7", 1);
        rpcool_conn *c = NULL;
        rpcool_conn_opts o;
        memset(&o, 0, sizeof o);
        o.connect_timeout_ms = 20000;
        int rc = rpcool_connect(where, &o, &c);
        if (c) rpcool_disconnect(c);
        _exit(rc == RPCOOL_E_REFUSED ? 0 : 1);
    }
    int ws = 0;
    waitpid(p, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the refused client's connect (%#x)", ws);
    rpcool_conn *c = conn();
    if (c) rpcool_disconnect(c);
    for (int i = 0; i < 100; i++) { /* the server reclaims it on its thread */
        if (hook_counts(q, b) || b[1] > a[1]) break;
        usleep(50000);
    }
    CHECKF(b[0] == a[0] + 1 && b[1] == a[1] + 1 && b[4] == a[4],
           "in %llu -> %llu, out by BYE %llu -> %llu, other %llu -> %llu",
           (unsigned long long)a[0], (unsigned long long)b[0], (unsigned long long)a[1],
           (unsigned long long)b[1], (unsigned long long)a[4], (unsigned long long)b[4]);
    rpcool_disconnect(q);
}

/* rpcool_cancel over RDMA: a call still queued behind a running one never starts (the server
   counts it), a running handler sees rpcool_ctx_cancelled, a call already answered is not
   cancelled (1). The server's one RDMA thread runs them in order. */
static void cancel(void)
{
    rpcool_conn *q = conn(), *c = q ? conn() : NULL;
    if (!c) {
        if (q) rpcool_disconnect(q);
        return;
    }
    uint64_t a[HK_N] = {0}, b[HK_N] = {0}, ida = 0, idb = 0, idc = 0;
    CHECK_EQ(hook_counts(q, a), 0);
    CHECK_EQ(rpcool_call_async(c, H_SPIN, NULL, 0, NULL, NULL, NULL, &ida), 0);
    CHECK_EQ(rpcool_call_async(c, H_SPIN, NULL, 0, NULL, NULL, NULL, &idb), 0);
    sleep(2); /* the first one runs, the second waits behind it */
    CHECK_EQ(rpcool_cancel(c, idb), 0);
    CHECK_EQ(rpcool_cancel(c, ida), 0);
    CHECK_EQ(rpcool_poll(c, ida, NULL, NULL), RPCOOL_E_CANCELLED); /* as the manual says */
    for (int k = 0; k < 100; k++) { /* the server takes the second one's frame */
        if (hook_counts(q, b) || b[7] > a[7]) break;
        usleep(50000);
    }
    CHECKF(b[5] == a[5] + 1 && b[6] == a[6] + 1 && b[7] == a[7] + 1,
           "started %llu -> %llu, saw the cancel %llu -> %llu, never started %llu -> %llu",
           (unsigned long long)a[5], (unsigned long long)b[5], (unsigned long long)a[6],
           (unsigned long long)b[6], (unsigned long long)a[7], (unsigned long long)b[7]);
    CHECK_EQ(rpcool_call_async(c, H_WHO, NULL, 0, NULL, NULL, NULL, &idc), 0);
    unsigned i = (unsigned)(idc & 0xff);
    for (int k = 0; k < 5000 && !rpcool__done(c, i); k++) {
        c->tp->poll(c); /* take in the reply */
        usleep(1000);
    }
    CHECK_EQ(rpcool_cancel(c, idc), 1); /* answered: nothing to cancel, its reply freed */
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(c, H_ECHO, rpcool_strdup(c, "after"), 6, &ret, &n), 0); /* slots back */
    rpcool_free(c, ret);
    rpcool_disconnect(c);
    rpcool_disconnect(q);
}

/* A deferred call over RDMA: answered 300 ms later from another thread of the server while the
   connection's next call is answered at once; the late reply's block arrives like any reply. */
static void deferred(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    uint64_t id = 0;
    char *m = rpcool_strdup(c, "abc");
    CHECK_EQ(rpcool_call_async(c, H_DEFER, m, 4, NULL, NULL, NULL, &id), 0);
    CHECK_EQ(echo_once(c, "meanwhile"), 0); /* not held up by the deferred call */
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_poll(c, id, &ret, &n), RPCOOL_E_AGAIN); /* still to come */
    CHECK_EQ(rpcool_wait(c, id, &ret, &n), 0);
    CHECKF(ret && n == 10 && !strcmp((char *)ret, "late: abc"), "reply %zu bytes: %s", n,
           ret ? (char *)ret : "(none)");
    CHECK(shmheap_contains(rpcool_heap(c), ret, n));
    rpcool_free(c, ret);
    rpcool_free(c, m);
    rpcool_disconnect(c);
}

static int cb_count;
static void cb(rpcool_conn *c, int status, void *ret, size_t n, void *user)
{
    (void)n, (void)user;
    if (status == 0 && ret && *(char *)ret == 'a') cb_count++;
    rpcool_free(c, ret);
}

static void async(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    char *m = rpcool_strdup(c, "async");
    uint64_t ids[32];
    int ok = 0;
    for (int i = 0; i < 32; i++) CHECK(rpcool_call_async(c, H_ECHO, m, 6, NULL, NULL, NULL, &ids[i]) == 0);
    for (int i = 0; i < 32; i++) {
        void *ret = NULL;
        size_t n = 0;
        if (rpcool_wait(c, ids[i], &ret, &n) == 0 && n == 6 && !strcmp((char *)ret, "async")) ok++;
        rpcool_free(c, ret);
    }
    CHECK_EQ(ok, 32);
    cb_count = 0;
    for (int i = 0; i < 32; i++) CHECK(rpcool_call_async(c, H_ECHO, m, 6, NULL, cb, NULL, NULL) == 0);
    uint64_t end = rcp__now_ns() + 20 * VMT_SEC;
    while (cb_count < 32 && rcp__now_ns() < end) rpcool_progress(c);
    CHECK_EQ(cb_count, 32);
    rpcool_disconnect(c);
}

static void fuzz_ring(void)
{
    rpcool_conn *good = conn(), *bad = conn();
    if (!good || !bad) return;
    uint64_t seed = 12345;
    int sent = 0;
    for (int i = 0; i < 200; i++) {
        struct rpcool__rf h;
        uint64_t junk[64];
        for (unsigned k = 0; k < 64; k++) junk[k] = t_rng(&seed);
        memcpy(&h, junk, sizeof h);
        h.type = (uint16_t)(t_rng(&seed) % 9);
        if (h.type == RPCOOL__RF_BYE) h.type = RPCOOL__RF_CALL;
        h.n1 = (uint32_t)(t_rng(&seed) % 4 ? t_rng(&seed) % 8 : t_rng(&seed));
        h.n2 = (uint32_t)(t_rng(&seed) % 4 ? t_rng(&seed) % 8 : t_rng(&seed));
        struct rpcool__rpart part = {junk, (size_t)(t_rng(&seed) % sizeof junk)};
        if (rpcool__r_send(bad->rdma, &h, &part, 1, rcp__now_ns() + VMT_SEC)) break;
        sent++;
    }
    CHECK(sent > 0);
    /* the good connection is still served, while the bad one was dropped */
    int rc = echo_once(good, "still");
    CHECKF(rc == 0, "good conn: %d (%s)", rc, rpcool_strerror(rc));
    rpcool_disconnect(good);
    rpcool_disconnect(bad);
}

/* Threads sharing one connection (section 7: "A connection may be used by many threads at
   once"): 4 threads x 1000 synchronous echo calls, no timeout set, every answer checked. */
#define TH_N 4
#define TH_CALLS 1000
struct th_arg {
    rpcool_conn *c;
    int id, bad, err, done;
};
static void *th_caller(void *p)
{
    struct th_arg *a = (struct th_arg *)p;
    for (int i = 0; i < TH_CALLS; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "thread %d call %d", a->id, i);
        int rc = echo_once(a->c, msg);
        if (rc) {
            a->bad++;
            if (!a->err) a->err = rc;
        }
        __atomic_store_n(&a->done, i + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}
static void threads(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    pthread_t t[TH_N];
    struct th_arg a[TH_N];
    uint64_t t0 = rcp__now_ns();
    for (int k = 0; k < TH_N; k++) {
        a[k] = (struct th_arg){c, k, 0, 0, 0};
        pthread_create(&t[k], NULL, th_caller, &a[k]);
    }
    /* progress: a stall says where the connection stands (for the log) */
    int last = -1, still = 0;
    for (;;) {
        int sum = 0;
        for (int k = 0; k < TH_N; k++) sum += __atomic_load_n(&a[k].done, __ATOMIC_RELAXED);
        if (sum == TH_N * TH_CALLS) break;
        still = sum == last ? still + 1 : 0;
        last = sum;
        if (still == 20) {
            struct rpcool__rconn *rc = c->rdma;
            struct rpcool__rcredit *cr = rpcool__r_credit_in(rc);
            printf("# threads stalled at %d calls: tx_pos %llu tx_frames %llu credit %llu/%llu "
                   "hdr %llu/%llu rx_pos %llu rx_frames %llu rxq_n %u dead %d nfrees %u\n", sum,
                   (unsigned long long)rc->tx_pos, (unsigned long long)rc->tx_frames,
                   (unsigned long long)cr->bytes, (unsigned long long)cr->frames,
                   (unsigned long long)rc->hdr_cb, (unsigned long long)rc->hdr_cf,
                   (unsigned long long)rc->rx_pos, (unsigned long long)rc->rx_frames, rc->rxq_n,
                   (int)rc->dead, rc->nfrees);
            for (unsigned i = 0; i < RPCOOL__NSLOTS; i++)
                if (c->pend[i].pstate)
                    printf("#   slot %u: pstate %u gen %u resp %#x\n", i,
                           (unsigned)c->pend[i].pstate, (unsigned)c->pend[i].gen,
                           (unsigned)c->hdr->resp[i].state);
        }
        usleep(500000);
    }
    int bad = 0;
    for (int k = 0; k < TH_N; k++) {
        pthread_join(t[k], NULL);
        bad += a[k].bad;
        CHECKF(a[k].bad == 0, "thread %d: %d of %d calls failed, first: %d (%s)", k, a[k].bad,
               TH_CALLS, a[k].err, a[k].err == 1 ? "wrong answer" : rpcool_strerror(a[k].err));
    }
    printf("# %d threads x %d calls on one connection: %d failed, %.2f s\n", TH_N, TH_CALLS, bad,
           (double)(rcp__now_ns() - t0) / 1e9);
    CHECK(echo_once(c, "after the threads") == 0);
    rpcool_disconnect(c);
}

/* ---- interleaved: what the threads test does, with the calls of the tests before it mixed in
   on purpose: on one connection IL_ECHO threads make checked echo calls (every byte, 16 B to
   1.2 KiB, so replies share and straddle pages of the reply region) while another thread makes
   deferred calls answered from a server thread after 0-3 ms (their blocks carved while the RDMA
   thread serves the echo calls), deferred calls that time out first (their replies come late,
   to an abandoned slot), calls cancelled while queued, running or answered, calls whose reply is
   discarded, and handlers cancelled mid-run; IL_ROUNDS connections one after another, their heaps
   at the same address. ---- */
#define IL_ECHO 3
#define IL_CALLS 700
#if defined(__SANITIZE_ADDRESS__)
#define IL_ROUNDS 2 /* under ASan (the guest's time is bounded) */
#else
#define IL_ROUNDS 3
#endif
#define IL_TIMEOUT_MS 30000u
struct il_arg {
    rpcool_conn *c;
    int id, bad, err, done, calls;
    uint64_t seed;
    int *stop;
    int deferred, timedout, cancelled, discarded, spun;
};

/* Call i of thread t: a message of 16 B to 1.2 KiB in the connection's heap (a header, then a
   pattern of t, i and the offset), prefixed "dN " or "rN " (H_DEFECHO's delay and way, at
   random) when ms >= 0. */
static char *il_msg(struct il_arg *a, int i, int ms, size_t *len)
{
    char way = t_rng(&a->seed) & 1 ? 'r' : 'd';
    size_t n = 16 + (size_t)(t_rng(&a->seed) % 1200);
    char *m = (char *)rpcool_alloc(a->c, n);
    if (!m) return NULL;
    int h = ms >= 0 ? snprintf(m, n, "%c%d t%d c%d ", way, ms, a->id, i)
                    : snprintf(m, n, "t%d c%d ", a->id, i);
    for (size_t k = (size_t)h; k + 1 < n; k++)
        m[k] = (char)(33 + ((size_t)a->id * 131 + (size_t)i * 7 + k) % 90);
    m[n - 1] = 0;
    *len = n;
    return m;
}

/* The answer of a call of m (n bytes): 0 if every byte came back, else 1 (said by echo_saw). */
static int il_check(struct il_arg *a, const char *m, size_t n, const void *ret, size_t rn)
{
    if (rn == n && ret && !memcmp(ret, m, n)) return 0;
    echo_saw(a->c, m, n, ret, rn);
    return 1;
}

/* A failed call: counted; a timeout (the server answers nothing: stuck) ends the round at once,
   said now (the other threads' calls would each wait IL_TIMEOUT_MS). */
static void il_fail(struct il_arg *a, int rc)
{
    a->bad++;
    if (!a->err) a->err = rc;
    if (rc == RPCOOL_E_TIMEOUT && !__atomic_exchange_n(a->stop, 1, __ATOMIC_ACQ_REL))
        printf("# interleaved: thread %d: a call got no answer in %u ms: the round ends\n", a->id,
               IL_TIMEOUT_MS);
}

static void *il_echo(void *p)
{
    struct il_arg *a = (struct il_arg *)p;
    for (int i = 0; i < IL_CALLS && !__atomic_load_n(a->stop, __ATOMIC_ACQUIRE); i++) {
        size_t n = 0, rn = 0;
        char *m = il_msg(a, i, -1, &n);
        void *ret = NULL;
        int rc = m ? rpcool_call(a->c, H_ECHO, m, n, &ret, &rn) : SHMHEAP_E_FULL;
        if (!rc) rc = il_check(a, m, n, ret, rn);
        if (rc) il_fail(a, rc);
        rpcool_free(a->c, ret);
        if (rc != RPCOOL_E_TIMEOUT) rpcool_free(a->c, m); /* else the server may still read it */
        a->calls++;
        __atomic_store_n(&a->done, i + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The other thread: one of the tests' other kinds of call at a time, until the echo threads end. */
static void *il_mixer(void *p)
{
    struct il_arg *a = (struct il_arg *)p;
    for (int i = 0; !__atomic_load_n(a->stop, __ATOMIC_ACQUIRE); i++) {
        unsigned kind = (unsigned)(t_rng(&a->seed) % 100);
        size_t n = 0, rn = 0;
        void *ret = NULL;
        uint64_t id = 0;
        int rc = 0;
        char *m = NULL;
        a->calls++;
        if (kind < 40) { /* a deferred echo, answered 0-3 ms later by a server thread */
            m = il_msg(a, i, (int)(t_rng(&a->seed) % 4), &n);
            rc = m ? rpcool_call(a->c, H_DEFECHO, m, n, &ret, &rn) : SHMHEAP_E_FULL;
            if (!rc) rc = il_check(a, m, n, ret, rn);
            if (rc) il_fail(a, rc);
            a->deferred++;
        } else if (kind < 55) { /* a deferred echo that times out first: its reply comes late */
            rpcool_call_opts o;
            memset(&o, 0, sizeof o);
            o.timeout_ms = 2;
            m = il_msg(a, i, 15 + (int)(t_rng(&a->seed) % 20), &n);
            rc = m ? rpcool_call_ex(a->c, H_DEFECHO, m, n, &o, &ret, &rn) : SHMHEAP_E_FULL;
            if (rc == RPCOOL_E_TIMEOUT) a->timedout++;
            else if (rc || il_check(a, m, n, ret, rn)) il_fail(a, rc ? rc : 1);
            /* m stays: the server may still read it (freed once the reply came, below) */
            if (rc == RPCOOL_E_TIMEOUT) m = NULL;
        } else if (kind < 70) { /* an async (deferred or not) call cancelled at once or soon */
            unsigned fn = kind & 1 ? H_DEFECHO : H_ECHO;
            m = il_msg(a, i, fn == H_DEFECHO ? (int)(t_rng(&a->seed) % 3) : -1, &n);
            rc = m ? rpcool_call_async(a->c, fn, m, n, NULL, NULL, NULL, &id) : SHMHEAP_E_FULL;
            if (!rc) {
                if (kind & 2) usleep((useconds_t)(t_rng(&a->seed) % 2000));
                int cr = rpcool_cancel(a->c, id);
                if (cr == 0) { /* cancelled: polling says so, the reply (if any) is dropped */
                    int pr = rpcool_poll(a->c, id, &ret, &rn);
                    if (pr != RPCOOL_E_CANCELLED) il_fail(a, pr ? pr : 2);
                    a->cancelled++;
                    m = NULL; /* the handler may still read it */
                } else if (cr != 1) {
                    il_fail(a, cr);
                }
            } else {
                il_fail(a, rc);
            }
        } else if (kind < 85) { /* the reply discarded (ret NULL): the server frees its blocks */
            m = il_msg(a, i, kind & 1 ? (int)(t_rng(&a->seed) % 3) : -1, &n);
            rc = m ? rpcool_call(a->c, kind & 1 ? H_DEFECHO : H_ECHO, m, n, NULL, NULL)
                   : SHMHEAP_E_FULL;
            if (rc) il_fail(a, rc);
            a->discarded++;
        } else if (kind < 88) { /* a handler that runs until it sees its cancel */
            rc = rpcool_call_async(a->c, H_SPIN, NULL, 0, NULL, NULL, NULL, &id);
            if (!rc) {
                usleep(1000 + (useconds_t)(t_rng(&a->seed) % 3000));
                int cr = rpcool_cancel(a->c, id);
                if (cr) il_fail(a, cr == 1 ? 3 : cr);
                a->spun++;
            } else {
                il_fail(a, rc);
            }
        } else { /* an async echo, waited for */
            m = il_msg(a, i, -1, &n);
            rc = m ? rpcool_call_async(a->c, H_ECHO, m, n, NULL, NULL, NULL, &id) : SHMHEAP_E_FULL;
            if (!rc) rc = rpcool_wait(a->c, id, &ret, &rn);
            if (!rc) rc = il_check(a, m, n, ret, rn);
            if (rc) il_fail(a, rc);
        }
        rpcool_free(a->c, ret);
        if (m && rc != RPCOOL_E_TIMEOUT) rpcool_free(a->c, m); /* else the server may read it */
    }
    return NULL;
}

static void interleaved(void)
{
    uint64_t calls = 0, t0 = rcp__now_ns();
    int kinds[5] = {0};
    for (int r = 0; r < IL_ROUNDS; r++) {
        rpcool_conn *c = conn_with(IL_TIMEOUT_MS); /* a server stuck shows as timeouts */
        if (!c) return;
        pthread_t t[IL_ECHO + 1];
        struct il_arg a[IL_ECHO + 1];
        int stop = 0;
        for (int k = 0; k <= IL_ECHO; k++) {
            a[k] = (struct il_arg){.c = c, .id = k, .stop = &stop};
            a[k].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(r * 8 + k + 1);
            pthread_create(&t[k], NULL, k < IL_ECHO ? il_echo : il_mixer, &a[k]);
        }
        for (int k = 0; k < IL_ECHO; k++) pthread_join(t[k], NULL);
        __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[IL_ECHO], NULL);
        for (int k = 0; k <= IL_ECHO; k++) {
            calls += (uint64_t)a[k].calls;
            CHECKF(a[k].bad == 0, "round %d, %s thread %d: %d of %d calls failed, first: %d (%s)",
                   r, k < IL_ECHO ? "echo" : "mixing", k, a[k].bad, a[k].calls, a[k].err,
                   a[k].err == 1   ? "wrong answer"
                   : a[k].err == 2 ? "cancelled call answered"
                   : a[k].err == 3 ? "running handler not cancelled"
                                   : rpcool_strerror(a[k].err));
        }
        kinds[0] += a[IL_ECHO].deferred, kinds[1] += a[IL_ECHO].timedout;
        kinds[2] += a[IL_ECHO].cancelled, kinds[3] += a[IL_ECHO].discarded;
        kinds[4] += a[IL_ECHO].spun;
        CHECK(echo_once(c, "after the round") == 0);
        rpcool_disconnect(c);
    }
    printf("# interleaved: %d connections, %llu calls (%d echo threads x %d each; deferred %d, "
           "timed out %d, cancelled %d, discarded %d, spinning handlers cancelled %d), %.1f s\n",
           IL_ROUNDS, (unsigned long long)calls, IL_ECHO, IL_CALLS, kinds[0], kinds[1], kinds[2],
           kinds[3], kinds[4], (double)(rcp__now_ns() - t0) / 1e9);
}

/* ---- a server that closes: its clients are told (server_closes) ---- */
#define CNAME "rdmac"
#define CLOSE_ROUNDS 3
#define CLOSE_PORT 7482 /* round i's server runs its own meta server on CLOSE_PORT + i */

/* A server of its own: echo, its stats.conns, quit; closed when a client calls H_QUIT. */
static int serve_closing(const char *how)
{
    rpcool_server *s;
    rpcool_server_opts so;
    memset(&so, 0, sizeof so);
    so.rdma = how;
    so.log = logf_;
    so.log_user = (void *)"closing server";
    int rc = rpcool_server_open(CNAME, &so, &s);
    if (rc) {
        printf("FAIL closing server_open: %s\n", rpcool_strerror(rc));
        return 1;
    }
    rpcool_server_add_handler(s, H_ECHO, t_h_echo, NULL, 0);
    rpcool_server_add_handler(s, H_QUIT, h_quit, s, 0);
    rpcool_server_add_handler(s, H_CONNS, h_conns, s, 0);
    rpcool_serve(s);
    rpcool_server_close(s);
    return 0;
}

/* A connection to url, trying for up to tries x 20 s (the server may not be up yet). */
static rpcool_conn *conn_to(const char *url, int tries)
{
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 20000;
    o.heap_size = 16 << 20;
    o.log = logf_;
    o.log_user = (void *)"client";
    int rc = rpcool_connect(url, &o, &c);
    for (int k = 1; rc && k < tries; k++) {
        sleep(1);
        rc = rpcool_connect(url, &o, &c);
    }
    CHECKF(rc == 0, "connect %s: %s", url, rpcool_strerror(rc));
    return c;
}

/* stats.conns as the server says it (H_CONNS) and, local, as its socket does. */
static void conns_are(rpcool_conn *c, int local, unsigned want, const char *when)
{
    int n = rpcool_call(c, H_CONNS, NULL, 0, NULL, NULL);
    CHECKF(n == (int)want, "%s: rpcool_server_get_stats says %d connections, want %u", when, n,
           want);
    if (!local) return;
    rpcool_server_stats st;
    rpcool_conn_stats cs[8];
    unsigned nc = 0;
    memset(&st, 0, sizeof st);
    int rc = rpcool_channel_stats(CNAME, 2000, &st, cs, 8, &nc);
    CHECKF(rc == 0 && st.conns == want && nc == want,
           "%s: rpcool_channel_stats: %s, stats.conns %u, %u listed, want %u", when,
           rpcool_strerror(rc), st.conns, nc, want);
}

/* One round against a fresh server at url: counts, then its close seen by two clients. */
static void closing_round(const char *url, int local, int round, int tries)
{
    rpcool_conn *c0 = conn_to(url, tries), *c1 = c0 ? conn_to(url, 1) : NULL, *c2 = NULL;
    if (!c0 || !c1) goto out;
    conns_are(c0, local, 2, "two open");
    if ((c2 = conn_to(url, 1))) {
        conns_are(c0, local, 3, "three open");
        rpcool_disconnect(c2);
        int n = -1; /* the server reaps the one that left */
        for (int i = 0; i < 100 && (n = rpcool_call(c0, H_CONNS, NULL, 0, NULL, NULL)) != 2; i++)
            usleep(100000);
        conns_are(c0, local, 2, "one of three disconnected");
    }
    CHECK_EQ(rpcool_call(c0, H_QUIT, NULL, 0, NULL, NULL), 0);
    uint64_t t0 = rcp__now_ns();
    int r1 = echo_once(c1, "after the close");
    double s1 = (double)(rcp__now_ns() - t0) / 1e9;
    int r0 = echo_once(c0, "after the close");
    double s0 = (double)(rcp__now_ns() - t0) / 1e9;
    printf("# server_closes round %d: the next calls got %s after %.3f s and %s after %.3f s\n",
           round, rpcool_strerror(r1), s1, rpcool_strerror(r0), s0);
    CHECKF(r1 == RPCOOL_E_CLOSED && s1 < 3.0, "the other client's next call: %d (%s) after "
           "%.3f s", r1, rpcool_strerror(r1), s1);
    CHECKF(r0 == RPCOOL_E_CLOSED && s0 < 3.0, "the quitting client's next call: %d (%s) after "
           "%.3f s", r0, rpcool_strerror(r0), s0);
out:
    if (c1) rpcool_disconnect(c1);
    if (c0) rpcool_disconnect(c0);
}

static void server_closes(void)
{
    for (int i = 0; i < CLOSE_ROUNDS; i++) {
        char how[32], url[64];
        snprintf(how, sizeof how, "serve:%d", CLOSE_PORT + i);
        snprintf(url, sizeof url, "rdma://127.0.0.1:%d/%s", CLOSE_PORT + i, CNAME);
        fflush(stdout);
        pid_t sp = fork();
        if (sp == 0) { /* pod A, as the main server */
            unsetenv("SHMHEAP_POD");
            unsetenv("SHMHEAP_POD_ID");
            _exit(serve_closing(how));
        }
        usleep(1500000); /* the meta server listens */
        closing_round(url, 1, i, 1);
        int st = -1;
        waitpid(sp, &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the closing server: status %#x", st);
    }
}
static char cs_where[200]; /* the call-semantics suite's channel ("": not run) */

static void run_client_once(void);
static int run_client(void)
{
    setenv("SHMHEAP_POD", "shmheap-b.pod", 1);
    setenv("SHMHEAP_POD_ID", "1", 1);
    for (int r = 0; r < rdmat_rounds; r++) {
        if (rdmat_rounds > 1) printf("# round %d of %d\n", r + 1, rdmat_rounds);
        run_client_once();
    }
    if (*cs_where) cs_suite(cs_where);
    return 0;
}

static void run_client_once(void)
{
    RUN(echo);
    RUN(tree_arg);
    RUN(tree_reply);
    RUN(fetch_and_change);
    RUN(docstore);
    RUN(noop);
    RUN(keep_patch);
    RUN(bad_input);
    RUN(peer);
    RUN(hooks);
    RUN(cancel);
    RUN(deferred);
    RUN(async);
    RUN(threads);
    RUN(interleaved);
    RUN(fuzz_ring);
}

/* Kill tests need a server of their own. */
static void server_killed(void)
{
    pid_t sp = fork();
    if (sp == 0) _exit(serve("serve:7481"));
    char w[64];
    snprintf(w, sizeof w, "rdma://127.0.0.1:7481/%s", NAME);
    usleep(1500000);
    rpcool_conn *c = NULL;
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 20000;
    o.peer_check_ms = 100;
    int rc = rpcool_connect(w, &o, &c);
    CHECKF(rc == 0, "connect: %s", rpcool_strerror(rc));
    if (!rc) {
        uint64_t id;
        CHECK(rpcool_call_async(c, H_SLOW, NULL, 0, NULL, NULL, NULL, &id) == 0);
        usleep(100000);
        kill(sp, SIGKILL);
        uint64_t t0 = rcp__now_ns();
        rc = rpcool_wait(c, id, NULL, NULL);
        double s = (double)(rcp__now_ns() - t0) / 1e9;
        CHECKF(rc == RPCOOL_E_PEERDEAD, "wait after the kill: %s", rpcool_strerror(rc));
        CHECKF(s < 8.0, "took %.2f s", s); /* peer_check_ms + the ~4 s retry bound */
        printf("# server killed mid-call: RPCOOL_E_PEERDEAD after %.3f s\n", s);
        rc = rpcool_call(c, H_ECHO, NULL, 0, NULL, NULL);
        CHECK_EQ(rc, RPCOOL_E_PEERDEAD);
        rpcool_disconnect(c);
    }
    kill(sp, SIGKILL);
    waitpid(sp, NULL, 0);
}

static void client_killed(void)
{
    /* a child connects and dies mid-call; then this process connects and is served */
    pid_t cp = fork();
    if (cp == 0) {
        rpcool_conn *c = conn();
        if (!c) _exit(1);
        uint64_t id;
        rpcool_call_async(c, H_SLOW, NULL, 0, NULL, NULL, NULL, &id);
        for (;;) pause();
    }
    usleep(2500000);
    kill(cp, SIGKILL);
    waitpid(cp, NULL, 0);
    usleep(1500000); /* the server's keepalive finds it gone and reclaims its mirror */
    rpcool_conn *c = conn();
    if (!c) return;
    int rc = echo_once(c, "after");
    CHECKF(rc == 0, "after a client died: %d (%s)", rc, rpcool_strerror(rc));
    rpcool_disconnect(c);
}

static pid_t server_pid;

/* The server's mappings whose address starts with the hex digits pre: its mirrors of the heaps
   of the pod whose window starts there ("688": pod B's, "68c": pod K's); -1 if unreadable. */
static int maps_at(const char *pre)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)server_pid);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) n += !strncmp(line, pre, strlen(pre));
    fclose(f);
    return n;
}
static int mirrors(void) { return maps_at("688"); } /* the server's mirrors of pod B's heaps */

/* A client of pod K (its own pod file, a window that holds two 16 MiB heaps) in a child: it
   connects, writes its heap's address to fd (0 if the connect failed), then waits to be killed
   (hang) or calls, disconnects and exits (!hang). */
#define KPOD "rpcool-test-k.pod"
static pid_t kpod_client(int fd, int hang)
{
    pid_t p = fork();
    if (p) return p;
    setenv("SHMHEAP_POD", KPOD, 1);
    setenv("SHMHEAP_WINDOW", "68c000000000-68c002800000", 1); /* 40 MiB */
    unsetenv("SHMHEAP_POD_ID");
    rpcool_conn *c = conn();
    uint64_t a = c ? (uint64_t)(uintptr_t)shmheap_base(rpcool_heap(c)) : 0;
    if (write(fd, &a, sizeof a) != (ssize_t)sizeof a) _exit(1);
    if (!c) _exit(1);
    if (!hang) {
        int rc = echo_once(c, "kpod");
        rpcool_disconnect(c);
        _exit(rc ? 1 : 0);
    }
    for (;;) pause();
}
static uint64_t kpod_addr(int fd)
{
    uint64_t a = 0;
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 60000) != 1 || read(fd, &a, sizeof a) != (ssize_t)sizeof a) return 0;
    return a;
}
static int kpod_mirrors(void) { return maps_at("68c"); } /* the server's mirrors of pod K's */
static int kpod_reaped(void) /* wait (up to 20 s) until the server mirrors nothing of pod K */
{
    for (int i = 0; i < 200; i++) {
        if (kpod_mirrors() == 0) return 1;
        usleep(100000);
    }
    return 0;
}
static uint64_t kpod_killed(int rfd, int wfd) /* a client of pod K connects, is killed: its heap */
{
    pid_t p = kpod_client(wfd, 1);
    uint64_t a = kpod_addr(rfd);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    return a;
}

/* A client killed while connected leaves nothing in its pod: no heap file in /dev/shm, and its
   range is given to the next client once the server has reclaimed its mirror. A client that
   starts at once, while the server still mirrors the dead one at the range it is given, holds
   that range and connects with a heap at another. Pod K holds two heaps: with the range of a
   killed client kept, the third heap would not fit. */
static void killed_client_pod(void)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", KPOD);
    unlink(path);
    int pf[2];
    if (pipe(pf)) { CHECKF(0, "pipe: %s", strerror(errno)); return; }
    uint64_t a = kpod_killed(pf[0], pf[1]);
    CHECKF(a != 0, "%s", "the first client of pod K did not connect");
    /* at once: the server has not reclaimed the dead client's mirror yet */
    pid_t q = kpod_client(pf[1], 0);
    uint64_t b = kpod_addr(pf[0]);
    int st = -1;
    waitpid(q, &st, 0);
    printf("# a client right after a killed one (heap %#llx): heap %#llx\n",
           (unsigned long long)a, (unsigned long long)b);
    CHECKF(b != 0 && b != a && WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "a client right after a killed one: %s", !b ? "refused" : b == a ? "same range" :
           "its call failed");
    CHECKF(kpod_reaped(), "%s", "the server did not reclaim the killed client in 20 s");
    uint64_t c = kpod_killed(pf[0], pf[1]); /* the dead one's range again: nobody holds it */
    CHECKF(kpod_reaped(), "%s", "the server did not reclaim the killed client in 20 s");
    uint64_t d = kpod_killed(pf[0], pf[1]);
    int files = 0;
    DIR *dir = opendir("/dev/shm");
    struct dirent *e;
    while (dir && (e = readdir(dir))) files += !strncmp(e->d_name, "rpcool-rdma-", 12);
    if (dir) closedir(dir);
    printf("# killed clients of a two-heap pod at %#llx, %#llx, %#llx; %d heap files in /dev/shm\n",
           (unsigned long long)a, (unsigned long long)c, (unsigned long long)d, files);
    CHECKF(c == a && d == a, "%s", "a killed client's range was not given again");
    CHECK_EQ(files, 0);
    kpod_reaped();
    close(pf[0]);
    close(pf[1]);
    unlink(path);
}

static int cycles(int n)
{
    int k;
    for (k = 0; k < n; k++) {
        rpcool_conn *c = conn();
        if (!c) break;
        int rc = echo_once(c, "cycle");
        rpcool_disconnect(c);
        if (rc) { CHECKF(0, "cycle %d: %s", k, rpcool_strerror(rc)); break; }
    }
    usleep(500000); /* the server reaps the last one */
    return k;
}

/* The device's count of KIND once it holds still (the same in 5 reads 0.2 s apart, 10 s at
   most): krconn's pools refill in the background and a server's side goes back to its pool
   asynchronously, so a count read right after a cycle can be one off either way. */
static int settled_count(const char *kind)
{
    int last = vmt_res_count(kind), same = 0;
    for (int i = 0; i < 50 && same < 4; i++) {
        usleep(200000);
        int n = vmt_res_count(kind);
        same = n == last ? same + 1 : 0;
        last = n;
    }
    return last;
}

/* The QPs in the pools of this process's and the server's krconn contexts (each has its own CQ):
   they vary with how recently QPs were given back (a QP rests before it is handed out again,
   one that failed is destroyed), so the counts below leave them out. -1: not known. */
static int pooled(void)
{
    krconn_stats st;
    if (!rpcool__r_kc || krconn_ctx_get_stats(rpcool__r_kc, &st)) return -1;
    rpcool_conn *c = conn();
    if (!c) return -1;
    int srv = rpcool_call(c, H_POOLS, NULL, 0, NULL, NULL);
    rpcool_disconnect(c);
    return srv < 0 ? -1 : (int)st.pool_ready + srv;
}

/* The device's count of KIND (qp, cq) in use, not pooled, once it holds still. */
static int used_count(const char *kind)
{
    for (int i = 0; i < 20; i++) {
        int n = settled_count(kind), p = pooled();
        if (p >= 0 && n == settled_count(kind)) return n - p;
    }
    return -1;
}

/* connect, call, disconnect cycles: after 50, 100 more leave queue pairs and CQs in use (not in
   krconn's pools), and registrations, where they were, and the server keeps no mirror. */
static void leak_cycles(void)
{
    int k = cycles(50);
    int qp0 = used_count("qp"), cq0 = used_count("cq"), mr0 = settled_count("mr");
    k += cycles(100);
    int qp1 = used_count("qp"), cq1 = used_count("cq"), mr1 = settled_count("mr");
    int mi = mirrors();
    printf("# %d connect/call/disconnect cycles: after the first 50, qp in use %d->%d cq in use "
           "%d->%d mr %d->%d; %d mirrors left\n", k, qp0, qp1, cq0, cq1, mr0, mr1, mi);
    /* one either way: the probe connection of pooled() holds a QP of the server's pool while
       it asks, and that QP goes back to the pool or (the pool full) is destroyed, depending on
       the moment; a leak of the cycles shows as a hundred */
    CHECK(k == 150 && qp0 >= 0 && abs(qp1 - qp0) <= 1 && abs(cq1 - cq0) <= 1 && mr1 == mr0 &&
          mi == 0);
}

/* A client slow after its connect (0.7 s, longer than the server's hello retries on RNR,
   about 0.25 s; a loaded host did that). late_receives: its receives were posted before the
   connect asked (krconn_connect_opts.before), so the hello waits for it. late_unposted (a test
   hook posts them after the connect, as before): the server drops the connection, and the
   client notices (its check write fails) and connects again, well within its 20 s timeout,
   instead of waiting it out and failing with "timed out". */
static void late_receives_(int prepost)
{
    rpcool__r_test_late_recv_us = 700000;
    rpcool__r_test_no_prepost = !prepost;
    uint64_t t0 = rcp__now_ns();
    rpcool_conn *c = conn();
    double s = (rcp__now_ns() - t0) / 1e9;
    printf("# a client 0.7 s late after its connect, receives posted %s: connected in %.3f s\n",
           prepost ? "before the connect" : "after it (the server drops, the client retries)", s);
    if (!c) return;
    /* with its receives posted before it asks, the server's hello finds one: no retry (0.7 s
       plus a connect); without, the server drops the QP and the client's check write notices */
    if (prepost) CHECKF(s < 3.0, "connect took %.3f s", s);
    else CHECKF(s < 15.0, "connect took %.3f s", s);
    CHECK(echo_once(c, "late") == 0);
    rpcool_disconnect(c);
}
static void late_receives(void) { late_receives_(1); }
static void late_unposted(void) { late_receives_(0); }

/* An idle server sleeps (BPEV): under 10% of a CPU over 5 s with a connection open (it wakes
   every reap_ms to send that connection a keepalive). */
static void idle_server(void)
{
    rpcool_conn *c = conn();
    if (!c) return;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)server_pid);
    unsigned long long t[2] = {0, 0};
    sleep(1); /* the connection settles */
    for (int k = 0; k < 2; k++) {
        if (k) sleep(5);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(buf, sizeof buf, f)) {
            const char *p = strrchr(buf, ')');
            unsigned long long ut = 0, st = 0;
            if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                            &st) == 2)
                t[k] = ut + st;
        }
        fclose(f);
    }
    /* per thread, to say which one did not sleep */
    char cmd[128];
    snprintf(cmd, sizeof cmd,
             "for t in /proc/%d/task/*; do echo \"# thread $(cat $t/comm): $(cut -d' ' -f14,15 $t/stat)\"; done",
             (int)server_pid);
    fflush(stdout);
    if (system(cmd)) { /* informative only */ }
    long hz = sysconf(_SC_CLK_TCK);
    double cpu = (double)(t[1] - t[0]) / (double)hz / 5.0;
    printf("# idle server: %.1f%% of a CPU over 5 s with a connection open\n", cpu * 100);
    CHECKF(t[1] > 0 && cpu < 0.10, "idle server used %.1f%% of a CPU", cpu * 100);
    rpcool_disconnect(c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (getenv("RDMAT_ONLY") && *getenv("RDMAT_ONLY")) t_only = getenv("RDMAT_ONLY");
    if (t_only && strchr(t_only, '@') && atoi(strchr(t_only, '@') + 1) > 0)
        rdmat_rounds = atoi(strchr(t_only, '@') + 1);
    const char *role = argc > 1 ? argv[1] : "single";
    if (!strcmp(role, "server")) { /* a guest of its own: until a client calls H_QUIT */
        t_begin("rpcool-rdma-server");
        with_local = 1;
        serve("serve");
        t_end();
        return T_DONE();
    }
    if (!strcmp(role, "close-server")) { /* a guest of its own: CLOSE_ROUNDS servers in turn */
        int bad = 0;
        for (int i = 0; i < CLOSE_ROUNDS; i++) { /* a meta server of its own each time */
            char how[32];
            snprintf(how, sizeof how, "serve:%d", CLOSE_PORT + i);
            bad += serve_closing(how);
        }
        return bad ? 1 : T_DONE();
    }
    if (!strcmp(role, "close-client")) {
        char url[200];
        setenv("SHMHEAP_POD_ID", "1", 1);
        for (int i = 0; i < CLOSE_ROUNDS; i++) {
            snprintf(url, sizeof url, "rdma://%s:%d/%s", argc > 2 ? argv[2] : "127.0.0.1",
                     CLOSE_PORT + i, CNAME);
            t_begin("server_closes_pods");
            closing_round(url, 0, i, 10); /* the server may still be starting */
            t_end();
        }
        return T_DONE();
    }
    if (!strcmp(role, "client")) {
        snprintf(where, sizeof where, "rdma://%s/%s", argc > 2 ? argv[2] : "127.0.0.1", NAME);
        setenv("SHMHEAP_POD_ID", "1", 1); /* the other guest is pod 0 */
        rpcool_conn *c = NULL;
        rpcool_conn_opts o;
        memset(&o, 0, sizeof o);
        o.connect_timeout_ms = 5000;
        for (int i = 0; i < 60 && rpcool_connect(where, &o, &c); i++) sleep(1); /* server up? */
        if (c) rpcool_disconnect(c);
        run_client();
        RUN(client_killed);
        c = conn();
        if (c) {
            rpcool_call(c, H_QUIT, NULL, 0, NULL, NULL);
            rpcool_disconnect(c);
        }
        return T_DONE();
    }
    /* single guest: the server in a child, clients here */
    snprintf(where, sizeof where, "rdma://127.0.0.1/%s", NAME);
    pid_t sp = fork();
    if (sp == 0) _exit(serve("serve"));
    server_pid = sp;
    usleep(1500000); /* the meta server listens */
    int cp[2];
    pid_t csp = t_fork_pipe(cp); /* the call-semantics suite's server, published there */
    if (csp == 0) _exit(cs_serve("rdmacs", "127.0.0.1", cp[1]));
    if (csp > 0 && !t_ready_wait(cp[0])) snprintf(cs_where, sizeof cs_where,
                                                   "rdma://127.0.0.1/rdmacs");
    else printf("FAIL cs_server: the call-semantics suite's server did not start\n");
    run_client();
    if (csp > 0) { /* it ends once the suite asked it to */
        int ws = 0;
        for (int k = 0; k < 100 && waitpid(csp, &ws, WNOHANG) == 0; k++) usleep(100000);
        if (kill(csp, 0) == 0) t_kill_wait(csp);
    }
    RUN(idle_server);
    RUN(late_receives);
    RUN(late_unposted);
    RUN(leak_cycles);
    RUN(client_killed);
    RUN(killed_client_pod);
    kill(sp, SIGKILL);
    waitpid(sp, NULL, 0);
    RUN(server_killed);
    RUN(server_closes);
    return T_DONE();
}
