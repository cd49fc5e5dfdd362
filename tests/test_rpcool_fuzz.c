/* rpcool fuzz: hostile clients driven by a seeded PRNG against a server, while well-behaved
 * clients count every wrong or failed answer. The property: no crash or hang of a server because
 * a client misbehaved, nothing lost or corrupted for other clients.
 *
 * A server with two serving threads runs in a child process (so its crash is a failed check
 * here, not a dead test binary), with handlers that echo, sum an array passed by pointer, hash a
 * string, allocate a block and sleep. Good client processes call it all along, in every safety
 * mode (relaxed, copy, sealed, sandboxed and their mixes), and check every answer. Each round,
 * hostile client processes connect and do random damage to everything their connection can
 * write in shared memory: request and response lines (random fields, unknown handler ids, bogus
 * pointers: NULL, outside the heap, into a good client's heap, unaligned, at the heap header,
 * huge lengths), the request bitmap and doorbells, their channel slot, their heap's allocator
 * metadata (header, mutex, journal, roots, stripe table, thread caches, span table, bitmaps;
 * right after connecting too) followed by calls that make the server allocate there. They also
 * misuse the channel's connect socket (silence, junk, bad requests, leaving mid-answer), hold
 * their heap's mutex while calls that need it queue up, run a thread that changes all of
 * it during calls, flood, SIGKILL themselves mid-call, exit without closing, close early and
 * reconnect, and in the sandboxed phase try to truncate their heap (a sealed memfd: refused). Every hostile call has a
 * timeout, and a hostile process that wedges anyway is killed.
 * Checks: the server lives through every round; good clients get only right answers, each
 * within GOOD_BOUND_MS, and their heaps pass shmheap_check with nothing leaked; no hostile call
 * ever gets a handler to run on another client's heap; a fresh client connects and gets right
 * answers afterwards; the server closes cleanly when asked (exit status 0).
 * Two phases: a relaxed channel (handlers not sandboxed; truncation is left out there, since it
 * is documented to crash such handlers), then a channel with the RPCOOL_SANDBOX policy.
 * Environment: FUZZ_SEED=N replays a run's choices (not its timing), FUZZ_ROUNDS=N rounds per
 * phase (default 7, about 15 s in all), FUZZ_VERBOSE=1 keeps the hostile processes' stderr and
 * prints round times and the heap files hostiles left behind. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

enum { FN_ECHO = 1, FN_SUM = 2, FN_STR = 3, FN_ALLOC = 4, FN_SLEEP = 5 };
enum { NGOOD = 2, NHOSTILE = 3, NTHREADS = 2 };
#define GOOD_BOUND_MS 5000u     /* a good call must finish within this (it is also its timeout) */
#define HOSTILE_CALL_MS 300u    /* timeout of every hostile call */
#define HOSTILE_HEAP (4u << 20)
#define SUM_MAX 65536u
#define ALLOC_MAX (8u << 20)
#define MS 1000000ull

/* ============================== the server ============================== */
/* Handlers read client data only through the checked accessors and each field once: a hostile
   client changes it under them. */

static int h_echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    char *r = (char *)rpcool_ctx_alloc(ctx, len ? len : 1);
    if (!r) return SHMHEAP_E_FULL;
    if (len) memmove(r, arg, len); /* not memcpy: a hostile's scribbled bitmap can hand out the argument's own block */
    rpcool_ctx_reply(ctx, r, len);
    return 0;
}

struct sum_arg {
    uint64_t n;
    uint64_t items; /* a pointer to n int64 */
};

static int h_sum(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    struct sum_arg a;
    uint64_t s = 0, v;
    (void)user;
    if (len < sizeof a) return RPCOOL_E_INVAL;
    memcpy(&a, rpcool_ctx_need(ctx, arg, sizeof a), sizeof a);
    if (a.n > SUM_MAX) return RPCOOL_E_INVAL;
    const char *it = (const char *)rpcool_ctx_need(ctx, (const void *)(uintptr_t)a.items, (size_t)a.n * 8);
    for (uint64_t i = 0; i < a.n; i++) {
        memcpy(&v, it + i * 8, 8);
        s += v;
    }
    uint64_t *r = (uint64_t *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    *r = s; /* a plain store: a misaligned block from the allocator is a UBSan error */
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return 0;
}

static uint64_t fnv(uint64_t h, unsigned char ch) { return (h ^ ch) * 1099511628211ull; }
#define FNV0 1469598103934665603ull

static int h_str(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    const char *s = rpcool_ctx_need_str(ctx, (const char *)arg);
    uint64_t h = FNV0;
    size_t n = 0;
    for (;; n++) { /* the bytes may have changed since the check: each checked and read once */
        if (!rpcool_ctx_ok(ctx, s + n, 1)) rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
        unsigned char ch = (unsigned char)__atomic_load_n(s + n, __ATOMIC_RELAXED);
        if (!ch) break;
        h = fnv(h, ch);
    }
    uint64_t *r = (uint64_t *)rpcool_ctx_alloc(ctx, sizeof *r);
    if (!r) return SHMHEAP_E_FULL;
    *r = h;
    rpcool_ctx_reply(ctx, r, sizeof *r);
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* A block of max(n, 8) bytes: n in its first word, then the byte pattern of n. */
static unsigned char alloc_pattern(uint64_t n) { return (unsigned char)(n * 7 + 1); }

static int h_alloc(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    uint64_t n;
    (void)user;
    if (len < sizeof n) return RPCOOL_E_INVAL;
    memcpy(&n, rpcool_ctx_need(ctx, arg, sizeof n), sizeof n);
    if (n > ALLOC_MAX) return RPCOOL_E_INVAL;
    size_t sz = n < 8 ? 8 : (size_t)n;
    uint64_t *p = (uint64_t *)rpcool_ctx_alloc(ctx, sz);
    if (!p) return SHMHEAP_E_FULL;
    *p = n;
    memset(p + 1, alloc_pattern(n), sz - 8);
    rpcool_ctx_reply(ctx, p, sz);
    return 0;
}

static int h_sleep(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    uint32_t ms;
    (void)user;
    if (len < sizeof ms) return RPCOOL_E_INVAL;
    memcpy(&ms, rpcool_ctx_need(ctx, arg, sizeof ms), sizeof ms);
    usleep((ms % 11) * 1000);
    return 1;
}

/* The server process: serves until the parent closes ctl, then reports its stats and closes. */
static void server_main(const char *name, unsigned safety, int ready, int ctl, int rep)
{
    rpcool_server *s = NULL;
    rpcool_server_opts o = {.reap_ms = 20, .max_conns = 48, .safety = safety};
    if (rpcool_server_open(name, &o, &s)) _exit(2);
    rpcool_server_add_handler(s, FN_ECHO, h_echo, NULL, 0);
    rpcool_server_add_handler(s, FN_SUM, h_sum, NULL, 0);
    rpcool_server_add_handler(s, FN_STR, h_str, NULL, 0);
    rpcool_server_add_handler(s, FN_ALLOC, h_alloc, NULL, 0);
    rpcool_server_add_handler(s, FN_SLEEP, h_sleep, NULL, 0);
    if (rpcool_server_start(s, NTHREADS)) _exit(3);
    if (write(ready, "r", 1) != 1) _exit(4);
    char x;
    while (read(ctl, &x, 1) > 0) {}
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    int r = rpcool_server_close(s);
    if (write(rep, &st, sizeof st) != (ssize_t)sizeof st) _exit(5);
    _exit(r ? 6 : 0);
}

struct child_srv {
    pid_t pid;
    int ctl, rep;
    int dead, status; /* set once waitpid reaped it */
};

static int srv_start(struct child_srv *cs, const char *name, unsigned safety)
{
    int ready[2], ctl[2], rep[2];
    memset(cs, 0, sizeof *cs);
    if (pipe(ready) || pipe(ctl) || pipe(rep)) return -1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        close(ready[0]);
        close(ctl[1]);
        close(rep[0]);
        server_main(name, safety, ready[1], ctl[0], rep[1]);
    }
    close(ready[1]);
    close(ctl[0]);
    close(rep[1]);
    int ok = t_ready_wait(ready[0]) == 0;
    cs->pid = p;
    cs->ctl = ctl[1];
    cs->rep = rep[0];
    return ok ? 0 : -1;
}

static int srv_alive(struct child_srv *cs)
{
    if (cs->dead) return 0;
    if (waitpid(cs->pid, &cs->status, WNOHANG) == 0) return 1;
    cs->dead = 1;
    return 0;
}

static const char *describe(int st, char *buf, size_t n)
{
    if (WIFSIGNALED(st)) snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else if (WIFEXITED(st)) snprintf(buf, n, "exit status %d", WEXITSTATUS(st));
    else snprintf(buf, n, "status %#x", st);
    return buf;
}

/* ============================== shared bookkeeping ============================== */

struct good_rep {
    uint64_t calls, wrong, failed, slow, max_ns;
    uint64_t base, size, secret; /* where this client's heap lies, and a live block in it */
    char heap_name[RPCOOL__HEAPNAME];
    int ready, done, check_rc;
    uint64_t live_blocks;
    char why[240]; /* the first problem */
};

struct shared {
    int stop;
    struct good_rep good[NGOOD];
    uint64_t h_actions, h_calls, h_ok, h_connects, leaks;
    char leak_why[240];
};
static struct shared *sh;
static int verbose;

static uint64_t rnd(uint64_t *s, uint64_t n) { return n ? t_rng(s) % n : 0; }

static uint64_t mix(uint64_t a, uint64_t b) /* splitmix64 of a combination: per-process seeds */
{
    uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z ? z : 1;
}

/* ============================== good clients ============================== */

static const unsigned good_modes[] = {RPCOOL_RELAXED, RPCOOL_COPY, RPCOOL_SEAL, RPCOOL_SANDBOX,
                                      RPCOOL_COPY | RPCOOL_SANDBOX, RPCOOL_SEAL | RPCOOL_SANDBOX};
#define NMODES (sizeof good_modes / sizeof good_modes[0])
static const char *op_names[] = {"echo", "sum", "str", "alloc"};

struct gc {
    rpcool_conn *c;
    uint64_t rng;
    struct good_rep *rep;
};

static void g_note(struct gc *g, const char *fmt, ...)
{
    va_list ap;
    if (g->rep->why[0]) return;
    va_start(ap, fmt);
    vsnprintf(g->rep->why, sizeof g->rep->why, fmt, ap);
    va_end(ap);
}

/* sealed arguments must be whole pages */
static void *g_alloc(rpcool_conn *c, size_t n, unsigned mode)
{
    return mode & RPCOOL_SEAL ? rpcool_alloc_pages(c, n ? n : 1) : rpcool_alloc(c, n ? n : 1);
}

/* One call of operation op in mode, with an answer known in advance; counts what went wrong. */
static void good_call(struct gc *g, unsigned op, unsigned mode)
{
    rpcool_conn *c = g->c;
    rpcool_call_opts co = {.safety = mode};
    unsigned char *arg = NULL;
    int64_t *items = NULL;
    void *ret = NULL;
    size_t len = 0, rl = 0, n = 0;
    uint64_t want = 0;
    unsigned fn = FN_ECHO;
    switch (op) {
    case 0: { /* echo: mostly small, sometimes past the small classes (a large block for the reply) */
        uint64_t k = rnd(&g->rng, 10);
        len = k < 7 ? (size_t)rnd(&g->rng, 257) : k < 9 ? 257 + (size_t)rnd(&g->rng, 8000) : 32769 + (size_t)rnd(&g->rng, 70000);
        if (!len && (mode & RPCOOL_SEAL)) len = 1; /* a seal needs a range */
        if ((arg = (unsigned char *)g_alloc(c, len, mode)))
            for (size_t i = 0; i < len; i++) arg[i] = (unsigned char)t_rng(&g->rng);
        break;
    }
    case 1: { /* sum of an array passed by pointer */
        n = (size_t)rnd(&g->rng, 513);
        items = (int64_t *)rpcool_alloc(c, (n ? n : 1) * 8);
        struct sum_arg *sa = (struct sum_arg *)g_alloc(c, sizeof *sa, mode);
        arg = (unsigned char *)sa;
        len = sizeof *sa;
        if (items && sa) {
            for (size_t i = 0; i < n; i++) want += (uint64_t)(items[i] = (int64_t)t_rng(&g->rng));
            sa->n = n;
            sa->items = (uint64_t)(uintptr_t)items;
        }
        fn = FN_SUM;
        break;
    }
    case 2: /* a string's length and hash */
        n = (size_t)rnd(&g->rng, 300);
        len = n + 1;
        if ((arg = (unsigned char *)g_alloc(c, len, mode))) {
            want = FNV0;
            for (size_t i = 0; i < n; i++) want = fnv(want, arg[i] = (unsigned char)(' ' + rnd(&g->rng, 95)));
            arg[n] = 0;
        }
        fn = FN_STR;
        break;
    default: { /* a block the server allocates in our heap */
        uint64_t k = rnd(&g->rng, 10);
        n = k < 6 ? (size_t)rnd(&g->rng, 4097) : k < 9 ? (size_t)rnd(&g->rng, 32769) : 32769 + (size_t)rnd(&g->rng, 300000);
        if ((arg = (unsigned char *)g_alloc(c, 8, mode))) memcpy(arg, &(uint64_t){n}, 8);
        len = 8;
        fn = FN_ALLOC;
        break;
    }
    }
    __atomic_fetch_add(&g->rep->calls, 1u, __ATOMIC_RELAXED);
    if (!arg || (op == 1 && !items)) {
        __atomic_fetch_add(&g->rep->failed, 1u, __ATOMIC_RELAXED);
        g_note(g, "%s: no memory for the argument in our own heap", op_names[op]);
        rpcool_free(c, arg);
        rpcool_free(c, items);
        return;
    }
    uint64_t t0 = rcp__now_ns();
    int st = rpcool_call_ex(c, fn, arg, len, &co, &ret, &rl);
    uint64_t ns = rcp__now_ns() - t0;
    if (ns > g->rep->max_ns) __atomic_store_n(&g->rep->max_ns, ns, __ATOMIC_RELAXED);
    if (ns > GOOD_BOUND_MS * MS) {
        __atomic_fetch_add(&g->rep->slow, 1u, __ATOMIC_RELAXED);
        g_note(g, "%s in mode %u took %llu ms", op_names[op], mode, (unsigned long long)(ns / MS));
    }
    int bad = 0;
    if (st < 0) {
        __atomic_fetch_add(&g->rep->failed, 1u, __ATOMIC_RELAXED);
        g_note(g, "%s (len %zu) in mode %u failed after %llu ms: %s", op_names[op], len, mode,
               (unsigned long long)(ns / MS), rpcool_strerror(st));
    } else if (op == 0) {
        bad = st != 0 || rl != len || (len && (!ret || memcmp(ret, arg, len)));
    } else if (op == 1) {
        bad = st != 0 || rl != 8 || !ret || *(uint64_t *)ret != want;
    } else if (op == 2) {
        bad = st != (int)n || rl != 8 || !ret || *(uint64_t *)ret != want;
    } else {
        size_t sz = n < 8 ? 8 : n;
        bad = st != 0 || rl != sz || !ret || *(uint64_t *)ret != n || shmheap_usable_size(rpcool_heap(c), ret) < sz;
        for (size_t i = 8; !bad && i < sz; i++) bad = ((unsigned char *)ret)[i] != alloc_pattern(n);
    }
    if (bad) {
        __atomic_fetch_add(&g->rep->wrong, 1u, __ATOMIC_RELAXED);
        g_note(g, "%s (len %zu, n %zu) in mode %u: wrong answer (status %d, %zu bytes back)", op_names[op], len, n, mode, st, rl);
    }
    rpcool_free(c, ret);
    rpcool_free(c, arg);
    rpcool_free(c, items);
}

static const char secret_text[] = "the good client's secret: no hostile call may read it";

static rpcool_conn *connect_retry(const char *name, const rpcool_conn_opts *o)
{
    rpcool_conn *c = NULL;
    uint64_t t0 = rcp__now_ns();
    while (rpcool_connect(name, o, &c) && rcp__now_ns() - t0 < 5000 * MS) usleep(5000);
    return c;
}

static void good_main(const char *name, int k, uint64_t seed)
{
    struct good_rep *rep = &sh->good[k];
    rpcool_conn_opts o = {.heap_size = 16u << 20, .timeout_ms = GOOD_BOUND_MS};
    struct gc g = {NULL, seed, rep};
    if (!(g.c = connect_retry(name, &o))) {
        g_note(&g, "could not connect");
        _exit(2);
    }
    shmheap *h = rpcool_heap(g.c);
    char *secret = rpcool_strdup(g.c, secret_text);
    if (!secret) _exit(3);
    rep->base = (uint64_t)(uintptr_t)shmheap_base(h);
    rep->size = shmheap_size(h);
    rep->secret = (uint64_t)(uintptr_t)secret;
    snprintf(rep->heap_name, sizeof rep->heap_name, "%s", g.c->heap_name);
    __atomic_store_n(&rep->ready, 1, __ATOMIC_RELEASE);
    for (unsigned i = (unsigned)k; !__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE); i++)
        good_call(&g, (unsigned)rnd(&g.rng, 4), good_modes[i % NMODES]);
    if (strcmp(secret, secret_text)) g_note(&g, "our secret was overwritten");
    shmheap_stats st;
    rep->check_rc = shmheap_check(h, &st);
    if (rep->check_rc) g_note(&g, "shmheap_check: %s", st.problem);
    rep->live_blocks = st.live_blocks;
    rpcool_free(g.c, secret);
    rpcool_disconnect(g.c);
    __atomic_store_n(&rep->done, 1, __ATOMIC_RELEASE);
    _exit(0);
}

/* ============================== hostile clients ============================== */

struct hx {
    uint64_t rng;
    const char *name;
    int sandbox;       /* the sandboxed phase: truncation is allowed */
    rpcool_conn *c;
    int scribbled;     /* our own allocator may be broken: allocate nothing more */
    int slot_scribbled; /* our channel slot was scribbled: close could wait for a lock we hold */
    int mutating;      /* a thread changes arguments and request lines: no leak accounting */
    uint32_t dead_tid; /* a thread id nobody has */
    uint64_t end;      /* when the session ends: loops of calls stop soon after */
    /* arguments allocated before any damage */
    char *small, *page, *str, *big, *huge;
    struct sum_arg *sa;
    int64_t *items;
    uint64_t *num;
};

static void hx_count(uint64_t *what) { __atomic_fetch_add(what, 1u, __ATOMIC_RELAXED); }

/* Past the session's end: our own damage (say, to our doorbell) can make each call slow. */
static int hx_late(const struct hx *x) { return rcp__now_ns() > x->end + 100 * MS; }

static void hx_leak(const char *fmt, ...)
{
    va_list ap;
    hx_count(&sh->leaks);
    va_start(ap, fmt);
    if (!sh->leak_why[0]) vsnprintf(sh->leak_why, sizeof sh->leak_why, fmt, ap);
    va_end(ap);
}

static uint64_t hx_data(const struct hx *x) { return (uint64_t)(uintptr_t)x->c->heap->data; }
static uint64_t hx_data_end(const struct hx *x) { return hx_data(x) + x->c->heap->data_len; }

/* A pointer for an argument or inside one; *other is set when it points into a good client's heap. */
static uint64_t hx_ptr(struct hx *x, uint64_t *rng, int *other)
{
    shmheap *h = x->c->heap;
    uint64_t base = (uint64_t)(uintptr_t)h->base, data = hx_data(x), end = hx_data_end(x);
    int local;
    if (other) *other = 0;
    switch (rnd(rng, 15)) {
    case 0: return 0;
    case 1: return 1 + rnd(rng, 4096);
    case 2: return t_rng(rng);
    case 3: return base + rnd(rng, data - base);       /* our heap's header and metadata */
    case 4: return end - 1 - rnd(rng, 256);            /* the last bytes of our data area */
    case 5: return end + rnd(rng, 1 << 20);            /* just past it */
    case 6:
    case 7: {                                           /* a good client's heap */
        struct good_rep *g = &sh->good[rnd(rng, NGOOD)];
        if (other) *other = 1;
        return rnd(rng, 2) ? g->secret : g->base + rnd(rng, g->size ? g->size : 1);
    }
    case 8: return (uint64_t)(uintptr_t)&local;        /* our private stack */
    case 9: return 0xffff800000000000ull + rnd(rng, 1ull << 40); /* kernel addresses */
    case 10: return ~0ull - rnd(rng, 64);              /* wraps */
    case 11: return (uint64_t)(uintptr_t)x->c->hdr + rnd(rng, sizeof *x->c->hdr); /* the call slots */
    case 12: return (uint64_t)(uintptr_t)x->small + 1 + rnd(rng, 15); /* unaligned */
    default: return (uint64_t)(uintptr_t)(rnd(rng, 2) ? x->small : x->big);
    }
}

static uint64_t hx_len(struct hx *x, uint64_t *rng)
{
    switch (rnd(rng, 10)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 8;
    case 3: return rnd(rng, 4096);
    case 4: return 32768 + rnd(rng, 65536);
    case 5: return 1ull << (20 + rnd(rng, 44));
    case 6: return ~0ull - rnd(rng, 16);
    case 7: return x->c->heap->data_len - rnd(rng, 4096);
    case 8: return t_rng(rng);
    default: return 64;
    }
}

static uint32_t hx_fn(uint64_t *rng)
{
    static const uint32_t odd[] = {0, 6, 1023, 1024, 0x7fffffff, 0xffffffffu};
    uint64_t k = rnd(rng, 10);
    if (k < 6) return FN_ECHO + (uint32_t)rnd(rng, 5);
    if (k < 8) return odd[rnd(rng, sizeof odd / sizeof odd[0])];
    return (uint32_t)t_rng(rng);
}

static uint32_t hx_flags(uint64_t *rng)
{
    uint64_t k = rnd(rng, 10);
    if (k < 8) return (uint32_t)rnd(rng, 8); /* combinations of COPY, SEAL, SANDBOX */
    return k == 8 ? 0x80u : (uint32_t)t_rng(rng);
}

static void hx_wake_server(struct hx *x)
{
    rcp__fetch_add(&x->c->ch->sdoor, 1u);
    rcp__futex_wake(&x->c->ch->sdoor, 1);
}

/* A call through the API, bounded by its timeout. The reply stays in our heap: freeing it with a
   scribbled allocator is not worth the risk of wedging ourselves. */
static int hx_call(struct hx *x, unsigned fn, const void *arg, size_t len, unsigned flags)
{
    rpcool_call_opts co;
    void *ret = NULL;
    size_t rl = 0;
    memset(&co, 0, sizeof co);
    co.safety = flags;
    co.timeout_ms = HOSTILE_CALL_MS;
    hx_count(&sh->h_calls);
    int r = rpcool_call_ex(x->c, fn, arg, len, &co, &ret, &rl);
    if (r >= 0) hx_count(&sh->h_ok);
    return r;
}

/* A request line written by hand; wait: for the answer (bounded), else left behind. */
static int hx_raw(struct hx *x, uint32_t fn, uint32_t flags, uint64_t arg, uint64_t len, uint64_t seal,
                  uint64_t seal_len, int wait)
{
    rpcool_conn *c = x->c;
    int i = rpcool__slot_get(c);
    if (i < 0) {
        rpcool__reclaim(c);
        return i;
    }
    t_raw_fill(c, i, fn, flags, arg, len, seal, seal_len);
    hx_count(&sh->h_calls);
    rpcool__shm_post(c, (unsigned)i);
    if (!wait) {
        rpcool__abandon(c, (unsigned)i);
        return RPCOOL_E_AGAIN;
    }
    int r = rpcool__shm_wait(c, (unsigned)i, rcp__now_ns() + HOSTILE_CALL_MS * MS);
    if (r) {
        rpcool__abandon(c, (unsigned)i);
        return r;
    }
    void *rp;
    size_t rl;
    r = rpcool__harvest(c, (unsigned)i, &rp, &rl);
    if (r >= 0) hx_count(&sh->h_ok);
    return r;
}

/* ---- damage ---- */

static uint64_t hx_val64(struct hx *x, uint64_t *rng)
{
    shmheap *h = x->c->heap;
    uint64_t data_off = h->hdr_data_off;
    switch (rnd(rng, 16)) {
    case 0: return 0;
    case 1: return ~0ull;
    case 2: return 1;
    case 3: return 1ull << 63;
    case 4: return h->nspans - 1;
    case 5: return h->nspans + rnd(rng, 3);
    case 6: return data_off + rnd(rng, h->data_len);               /* an offset into the data area */
    case 7: return (data_off + rnd(rng, h->data_len)) | 1;         /* unaligned */
    case 8: return data_off + h->data_len - rnd(rng, 64);          /* at its very end */
    case 9: return h->size + rnd(rng, 1 << 20);                    /* past the heap */
    case 10: return rnd(rng, data_off);                            /* into the header */
    case 11: return SHMHEAP__E_MAKE(rnd(rng, 5), rnd(rng, 48), t_rng(rng)) | (rnd(rng, 2) ? SHMHEAP__E_FULL : 0);
    case 12: return SHMHEAP__E_MAKE(SHMHEAP__S_HEAD, 0, rnd(rng, 2) ? rnd(rng, 4) : t_rng(rng));
    case 13: return rnd(rng, 2) ? SHMHEAP__CLOSED : SHMHEAP__SLOTMASK;
    case 14: return (uint64_t)(uintptr_t)h->base + rnd(rng, h->size); /* a pointer into our heap */
    default: return t_rng(rng);
    }
}

/* 32-bit words for a lock: owner-like ids, glibc mutex type codes, priority ceilings. */
static uint32_t hx_val32(struct hx *x, uint64_t *rng)
{
    static const uint32_t v[] = {0, 1, 2, 0xffffffffu, 0x7fffffffu, 0x10, 0x30, 0x40, 0x90, 0xb0, 0xc0,
                                 0x11, 0x92, 0x100, 0x3200000, 0xfff80000u, 0x80000000u, 0x40000000u};
    switch (rnd(rng, 5)) {
    case 0: return x->dead_tid;
    case 1: return (uint32_t)getpid();
    case 2: return (uint32_t)t_rng(rng);
    default: return v[rnd(rng, sizeof v / sizeof v[0])];
    }
}

/* A span worth damaging: mostly one in use (the server's replies live there), else any. */
static size_t hx_span(struct hx *x, uint64_t *rng)
{
    shmheap *h = x->c->heap;
    size_t s = (size_t)rnd(rng, h->nspans);
    if (rnd(rng, 4) == 0) return s;
    for (size_t k = 0; k < h->nspans; k++, s = (s + 1) % h->nspans)
        if (SHMHEAP__E_STATE(h->ent[s]) != SHMHEAP__S_FREE) break;
    return s;
}

/* A size class worth damaging: mostly one the server's replies use (8, 64, 4096 bytes). */
static unsigned hx_cls(uint64_t *rng)
{
    static const unsigned used[] = {0, 3, 27};
    return rnd(rng, 4) ? used[rnd(rng, 3)] : (unsigned)rnd(rng, SHMHEAP__NCLS);
}

/* A thread cache worth damaging: mostly one that is claimed (by a server thread, or ours). */
static struct shmheap__tc *hx_tc(struct hx *x, uint64_t *rng)
{
    struct shmheap__hdr *H = x->c->heap->hdr;
    unsigned i = (unsigned)rnd(rng, SHMHEAP__NTC);
    if (rnd(rng, 4) == 0) return &H->tc[i];
    for (unsigned k = 0; k < SHMHEAP__NTC; k++, i = (i + 1) % SHMHEAP__NTC)
        if (H->tc[i].owner) break;
    return &H->tc[i];
}

/* Damage one piece of our heap's allocator metadata. */
static void hx_scribble_meta(struct hx *x, uint64_t *rng)
{
    shmheap *h = x->c->heap;
    struct shmheap__hdr *H = h->hdr;
    char *p;
    size_t n;
    switch (rnd(rng, 12)) {
    case 0:
    case 1: { /* the heap's mutex: lock-like words */
        uint32_t *w = (uint32_t *)(void *)&H->lock;
        for (uint64_t k = 1 + rnd(rng, 4); k; k--) w[rnd(rng, sizeof H->lock / 4)] = hx_val32(x, rng);
        return;
    }
    case 2: /* the journal of the step under the mutex */
        H->journal.op = (uint32_t)rnd(rng, 6);
        H->journal.cls = (uint32_t)(rnd(rng, 2) ? rnd(rng, 48) : t_rng(rng));
        H->journal.span = hx_val64(x, rng);
        H->journal.n = hx_val64(x, rng);
        H->journal.gen = t_rng(rng);
        return;
    case 3: { /* a thread cache: maybe the server thread's */
        struct shmheap__tc *tc = hx_tc(x, rng);
        unsigned c = hx_cls(rng);
        switch (rnd(rng, 4)) {
        case 0: tc->n[c] = (uint8_t)(rnd(rng, 2) ? 1 + rnd(rng, SHMHEAP__TC_CAP) : t_rng(rng)); break;
        case 1: tc->owner = rnd(rng, 2) ? ((uint64_t)shmheap__host << 32 | x->dead_tid) : t_rng(rng); break;
        default:
            for (unsigned k = 0; k < SHMHEAP__TC_CAP; k++) tc->off[c][k] = hx_val64(x, rng);
            tc->n[c] = (uint8_t)(1 + rnd(rng, SHMHEAP__TC_CAP));
            break;
        }
        return;
    }
    case 4: /* the stripes' current spans */
        H->cur[rnd(rng, SHMHEAP__STRIPES)][hx_cls(rng)] = rnd(rng, 2) ? hx_val64(x, rng) : (rnd(rng, h->nspans + 2) | t_rng(rng) << 32);
        return;
    case 5: { /* a named root */
        struct shmheap__root *R = &H->roots[rnd(rng, SHMHEAP__NROOTS)];
        R->off = hx_val64(x, rng);
        R->used = (uint32_t)rnd(rng, 3);
        if (rnd(rng, 2)) memset(R->name, 'A' + (int)rnd(rng, 26), sizeof R->name);
        return;
    }
    case 6: /* span table entries */
        for (uint64_t k = 1 + rnd(rng, 8); k; k--) h->ent[hx_span(x, rng)] = hx_val64(x, rng);
        return;
    case 7: /* bitmap words */
        for (uint64_t k = 1 + rnd(rng, 16); k; k--) {
            size_t s = hx_span(x, rng);
            h->bm[s * SHMHEAP__WORDS + rnd(rng, SHMHEAP__WORDS)] = rnd(rng, 2) ? hx_val64(x, rng) : h->bm[s * SHMHEAP__WORDS] ^ (1ull << rnd(rng, 64));
        }
        return;
    case 8: /* counters and hints */
        H->gen = hx_val64(x, rng);
        H->free_hint = hx_val64(x, rng);
        H->recoveries = t_rng(rng);
        return;
    case 9: p = (char *)H; n = sizeof *H; break;                      /* anywhere in the header */
    case 10: p = (char *)h->ent; n = h->nspans * 8; break;
    default: p = (char *)h->bm; n = h->nspans * SHMHEAP__WORDS * 8; break;
    }
    switch (rnd(rng, 4)) { /* raw damage to a region */
    case 0:
        for (uint64_t k = 1 + rnd(rng, 16); k; k--) p[rnd(rng, n)] = (char)t_rng(rng);
        break;
    case 1:
        for (uint64_t k = 1 + rnd(rng, 16); k; k--) p[rnd(rng, n)] ^= (char)(1 << rnd(rng, 8));
        break;
    case 2:
        for (uint64_t k = 1 + rnd(rng, 8); k; k--) ((uint64_t *)(void *)p)[rnd(rng, n / 8)] = hx_val64(x, rng);
        break;
    default: { /* a stretch zeroed, filled or random */
        size_t at = (size_t)rnd(rng, n), len = (size_t)rnd(rng, 4096);
        if (len > n - at) len = n - at;
        int fill = rnd(rng, 3) == 0 ? 0 : rnd(rng, 2) ? 0xff : (int)rnd(rng, 256);
        memset(p + at, fill, len);
        break;
    }
    }
}

/* Damage the call slots, the request bitmap, the doorbells or the connection header. */
static void hx_scribble_lines(struct hx *x, uint64_t *rng)
{
    struct rpcool__conn_hdr *hd = x->c->hdr;
    unsigned i = (unsigned)rnd(rng, RPCOOL__NSLOTS);
    switch (rnd(rng, 8)) {
    case 0: { /* a request line: random fields, posted with some generation */
        struct rpcool__req *r = &hd->req[i];
        int other;
        r->fn = hx_fn(rng);
        r->flags = hx_flags(rng);
        r->arg = hx_ptr(x, rng, &other);
        r->arg_len = hx_len(x, rng);
        r->seal = hx_ptr(x, rng, NULL);
        r->seal_len = hx_len(x, rng);
        __atomic_store_n(&r->state, rnd(rng, 4) ? RPCOOL__SL(t_rng(rng), RPCOOL__SL_REQ) : (uint32_t)t_rng(rng), __ATOMIC_SEQ_CST);
        rcp__fetch_or(&hd->req_bits, 1ull << i);
        break;
    }
    case 1: /* random bytes over request lines */
        for (uint64_t k = 1 + rnd(rng, 32); k; k--) ((char *)hd->req)[rnd(rng, sizeof hd->req)] = (char)t_rng(rng);
        break;
    case 2: /* the response lines (the server's) */
        for (uint64_t k = 1 + rnd(rng, 32); k; k--) ((char *)hd->resp)[rnd(rng, sizeof hd->resp)] = (char)t_rng(rng);
        break;
    case 3:
        hd->req_bits = rnd(rng, 2) ? ~0ull : t_rng(rng);
        break;
    case 4:
        hd->cdoor = (uint32_t)t_rng(rng);
        hd->csleepers = (uint32_t)(rnd(rng, 2) ? 0 : t_rng(rng));
        break;
    case 5: /* the connection header the server checked at accept */
        hd->magic ^= 1ull << rnd(rng, 64);
        hd->nslots = (uint32_t)t_rng(rng);
        hd->chan_slot = (uint32_t)t_rng(rng);
        hd->epoch = (uint32_t)t_rng(rng);
        break;
    default: /* many requests at once, states half right */
        for (unsigned k = 0; k < RPCOOL__NSLOTS; k++)
            if (rnd(rng, 2)) __atomic_store_n(&hd->req[k].state, RPCOOL__SL(t_rng(rng), rnd(rng, 4)), __ATOMIC_SEQ_CST);
        hd->req_bits = ~0ull;
        break;
    }
    hx_wake_server(x);
}

/* Damage our own channel slot, or the hint fields of the channel header. Other clients' slots
   and the channel's identity are left alone: every client can write them, and the README says
   what that costs others. */
static void hx_scribble_slot(struct hx *x, uint64_t *rng)
{
    struct rpcool__chan_slot *cs = x->c->cs;
    struct rpcool__chan_hdr *ch = x->c->ch;
    x->slot_scribbled = 1;
    switch (rnd(rng, 5)) {
    case 0:
        rcp__store(&cs->state, (uint32_t)rnd(rng, 8));
        break;
    case 1: { /* another client's heap name, or a path, with a fresh connection request */
        const char *names[] = {sh->good[rnd(rng, NGOOD)].heap_name, "../../tmp/x", "rpcool-", "shmheap.pod"};
        memset(cs->heap, 0, sizeof cs->heap);
        snprintf(cs->heap, sizeof cs->heap, "%s", names[rnd(rng, 4)]);
        rcp__store(&cs->state, (uint32_t)(rnd(rng, 2) ? RPCOOL__CS_PENDING : RPCOOL__CS_CLAIMED));
        break;
    }
    case 2:
        for (uint64_t k = 1 + rnd(rng, 16); k; k--) ((char *)cs)[rnd(rng, sizeof *cs)] = (char)t_rng(rng);
        break;
    case 3:
        cs->epoch = (uint32_t)t_rng(rng);
        cs->client_pid = (uint32_t)t_rng(rng);
        cs->seq = (uint32_t)t_rng(rng);
        cs->hdr = rnd(rng, 2) ? t_rng(rng) : cs->hdr + (uint64_t)rnd(rng, 256) - 128; /* near the real header, or anywhere */
        break;
    default: /* hints the server and clients only optimise with */
        ch->server_cpus = t_rng(rng);
        ch->client_cpus = t_rng(rng);
        ch->ssleepers = (uint32_t)(rnd(rng, 2) ? 0 : t_rng(rng));
        ch->sdoor = (uint32_t)t_rng(rng);
        break;
    }
    rcp__fetch_add(&ch->pending, 1u);
    hx_wake_server(x);
}

/* ---- connecting ---- */

static void hx_pool(struct hx *x)
{
    rpcool_conn *c = x->c;
    x->small = (char *)rpcool_alloc(c, 64);
    x->page = (char *)rpcool_alloc_pages(c, 8192);
    x->str = (char *)rpcool_alloc(c, 512);
    x->big = (char *)rpcool_alloc(c, 40000);
    x->huge = (char *)rpcool_alloc(c, 600000);
    x->sa = (struct sum_arg *)rpcool_alloc(c, sizeof *x->sa);
    x->items = (int64_t *)rpcool_alloc(c, 1024 * 8);
    x->num = (uint64_t *)rpcool_alloc(c, 8);
    if (!x->small || !x->page || !x->str || !x->big || !x->huge || !x->sa || !x->items || !x->num) {
        x->c = NULL; /* our heap is already broken: start over (the connection is left behind) */
        return;
    }
    memset(x->small, 'a', 64);
    memset(x->page, 'p', 8192);
    memset(x->str, 's', 511);
    x->str[511] = 0;
    memset(x->big, 'b', 40000);
    memset(x->huge, 'h', 600000);
    for (int i = 0; i < 1024; i++) x->items[i] = i;
    x->sa->n = 1024;
    x->sa->items = (uint64_t)(uintptr_t)x->items;
    *x->num = 100;
}

/* The channel's front door, misused: a connect to its socket that sends nothing, a random
   message, or a request with random fields (a real request now and then), and leaves at a
   random moment, taking any descriptors it was given with it. The acceptor must answer
   everybody else meanwhile. */
static void hx_door(struct hx *x)
{
    uint64_t *rng = &x->rng;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "/dev/shm/rpcool.%s.sock", x->name);
    int sk = socket(AF_UNIX, rnd(rng, 4) ? SOCK_SEQPACKET : SOCK_STREAM, 0);
    if (sk < 0) return;
    if (connect(sk, (struct sockaddr *)&a, sizeof a)) {
        close(sk);
        return;
    }
    struct rpcool__creq rq;
    char junk[80];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)t_rng(rng);
    memset(&rq, 0, sizeof rq);
    rq.magic = RPCOOL__CREQ_MAGIC;
    rq.version = RPCOOL__VERSION;
    rq.heap_size = HOSTILE_HEAP;
    rq.pid = (uint32_t)getpid();
    switch (rnd(rng, 6)) {
    case 0: break; /* nothing at all */
    case 1: if (send(sk, junk, 1 + rnd(rng, sizeof junk), MSG_NOSIGNAL)) {} break;
    case 2: /* one field wrong */
        memcpy((char *)&rq + rnd(rng, sizeof rq - 4), junk, 4);
        if (send(sk, &rq, sizeof rq, MSG_NOSIGNAL)) {}
        break;
    case 3: /* a huge or odd heap size */
        rq.heap_size = rnd(rng, 2) ? hx_val64(x, rng) : ((uint64_t)1 << 44) + 1;
        if (send(sk, &rq, sizeof rq, MSG_NOSIGNAL)) {}
        break;
    case 4: /* cut short */
        if (send(sk, &rq, 1 + rnd(rng, sizeof rq - 1), MSG_NOSIGNAL)) {}
        break;
    default: /* a real request */
        if (send(sk, &rq, sizeof rq, MSG_NOSIGNAL)) {}
        break;
    }
    if (rnd(rng, 2)) usleep((useconds_t)rnd(rng, 3000));
    if (rnd(rng, 2)) { /* read the answer, keep what came a while, and go */
        char buf[128], cb[CMSG_SPACE(8 * sizeof(int))];
        struct iovec iov = {buf, sizeof buf};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cb;
        mh.msg_controllen = sizeof cb;
        struct pollfd pf = {sk, POLLIN, 0};
        if (poll(&pf, 1, 300) == 1 && recvmsg(sk, &mh, MSG_DONTWAIT) > 0) {
            usleep((useconds_t)rnd(rng, 2000));
            for (struct cmsghdr *ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch))
                if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS)
                    for (size_t j = 0; j < (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int); j++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(ch) + j * sizeof(int), sizeof fd);
                        close(fd);
                    }
        }
    }
    close(sk);
}

/* A hostile client's connection, counted; its own heap's mutex may be wrecked by it: it never
   waits long for it. NULL if the connect failed. */
static rpcool_conn *hx_connect_plain(struct hx *x)
{
    rpcool_conn_opts o = {.heap_size = HOSTILE_HEAP, .timeout_ms = HOSTILE_CALL_MS,
                          .peer_check_ms = 50, .connect_timeout_ms = 1000};
    hx_count(&sh->h_connects);
    rpcool_conn *c = NULL;
    if (rpcool_connect(x->name, &o, &c)) return NULL;
    c->heap->lock_timeout_ms = 200;
    return c;
}

/* rpcool_connect, then damage to the new heap's allocator or the connection header at once
   (before any call). The server made and formatted the heap; it reads nothing of it at
   connect any more, so the damage meets the server in the calls that follow. */
static rpcool_conn *hx_connect_scribbled(struct hx *x)
{
    rpcool_conn *c = hx_connect_plain(x);
    if (!c) return NULL;
    struct shmheap__hdr *H = c->heap->hdr;
    uint64_t *rng = &x->rng;
    x->c = c; /* for the damage helpers */
    switch (rnd(rng, 6)) {
    case 0:
    case 1: { /* the heap's mutex */
        uint32_t *w = (uint32_t *)(void *)&H->lock;
        for (uint64_t k = 1 + rnd(rng, 4); k; k--) w[rnd(rng, sizeof H->lock / 4)] = hx_val32(x, rng);
        break;
    }
    case 2: /* the roots */
        for (int i = 0; i < SHMHEAP__NROOTS; i++)
            if (H->roots[i].used) H->roots[i].off = rnd(rng, 2) ? H->roots[i].off ^ (1 + rnd(rng, 127)) : hx_val64(x, rng);
        break;
    case 3: /* the connection header */
        ((char *)c->hdr)[rnd(rng, 24)] ^= (char)(1 << rnd(rng, 8));
        break;
    case 4: { /* the heap header's geometry */
        static const size_t offs[] = {offsetof(struct shmheap__hdr, magic), offsetof(struct shmheap__hdr, version),
                                      offsetof(struct shmheap__hdr, base), offsetof(struct shmheap__hdr, size),
                                      offsetof(struct shmheap__hdr, nspans), offsetof(struct shmheap__hdr, data_off),
                                      offsetof(struct shmheap__hdr, entries_off), offsetof(struct shmheap__hdr, hdr_size)};
        uint32_t v = (uint32_t)t_rng(rng);
        memcpy((char *)H + offs[rnd(rng, sizeof offs / sizeof offs[0])] + 4 * rnd(rng, 2), &v, 4);
        break;
    }
    default:
        hx_scribble_meta(x, rng);
        break;
    }
    x->scribbled = 1;
    return c;
}

static void hx_connect(struct hx *x)
{
    x->scribbled = x->slot_scribbled = 0;
    if (rnd(&x->rng, 4) == 0) hx_door(x);
    if (rnd(&x->rng, 5) == 0) {
        x->c = hx_connect_scribbled(x);
    } else {
        x->c = hx_connect_plain(x);
    }
    if (x->c) hx_pool(x);
}

/* ---- actions ---- */

/* valid arguments, random handler and flags */
static void act_api(struct hx *x)
{
    uint64_t *rng = &x->rng;
    unsigned flags = (unsigned)rnd(rng, 8);
    switch (rnd(rng, 6)) {
    case 0: hx_call(x, FN_ECHO, x->small, 64, flags); break;
    case 1: hx_call(x, FN_ECHO, rnd(rng, 2) ? x->big : x->huge, rnd(rng, 2) ? 40000 : 600000, flags & ~(unsigned)RPCOOL_SEAL); break;
    case 2: hx_call(x, FN_SUM, x->sa, sizeof *x->sa, flags & ~(unsigned)RPCOOL_SEAL); break;
    case 3: hx_call(x, FN_STR, x->str, 512, flags & ~(unsigned)RPCOOL_SEAL); break;
    case 4: hx_call(x, FN_ECHO, x->page, 8192, flags); break;
    default: hx_call(x, (unsigned)rnd(rng, RPCOOL_MAX_HANDLERS), x->small, 64, flags & ~(unsigned)RPCOOL_SEAL); break;
    }
}

/* a request line written by hand: any handler id, flags, argument and seal range */
static void act_raw(struct hx *x)
{
    uint64_t *rng = &x->rng;
    int other = 0;
    uint32_t fn = hx_fn(rng), flags = hx_flags(rng);
    uint64_t arg, len;
    if (rnd(rng, 3)) {
        arg = hx_ptr(x, rng, &other);
        len = hx_len(x, rng);
    } else { /* a valid argument with a bad neighbour */
        arg = (uint64_t)(uintptr_t)x->big;
        len = rnd(rng, 2) ? 40000 : 40000 + rnd(rng, 1 << 20);
    }
    uint64_t seal = rnd(rng, 2) ? arg & ~4095ull : hx_ptr(x, rng, NULL);
    uint64_t seal_len = rnd(rng, 2) ? len + 8192 : hx_len(x, rng);
    int r = hx_raw(x, fn, flags, arg, len, seal, seal_len, rnd(rng, 8) != 0);
    if (other && r >= 0)
        hx_leak("handler %u ran (status %d) on an argument in a good client's heap: %#llx, %llu bytes, flags %#x", fn, r,
                (unsigned long long)arg, (unsigned long long)len, flags);
}

/* a valid struct whose array pointer and length are bogus */
static void act_sum(struct hx *x)
{
    uint64_t *rng = &x->rng;
    int other = 0;
    x->sa->items = rnd(rng, 4) ? hx_ptr(x, rng, &other) : (uint64_t)(uintptr_t)x->items;
    x->sa->n = rnd(rng, 2) ? rnd(rng, 1025) : hx_len(x, rng);
    int r = hx_call(x, FN_SUM, x->sa, sizeof *x->sa, (unsigned)rnd(rng, 8) & ~(unsigned)RPCOOL_SEAL);
    if (other && r >= 0 && !x->mutating)
        hx_leak("sum ran (status %d) over an array in a good client's heap: %#llx, n %llu", r,
                (unsigned long long)x->sa->items, (unsigned long long)x->sa->n);
    x->sa->items = (uint64_t)(uintptr_t)x->items;
    x->sa->n = 1024;
}

/* strings that run to the end of the heap, or bogus string pointers */
static void act_str(struct hx *x)
{
    uint64_t *rng = &x->rng;
    int other = 0;
    uint64_t end = hx_data_end(x), arg;
    switch (rnd(rng, 3)) {
    case 0: /* no terminator before the end of the data area */
        memset((void *)(uintptr_t)(end - 4096), 'z', 4096);
        arg = end - 1 - rnd(rng, 4096);
        break;
    case 1: /* the pool string without its terminator */
        x->str[511] = 'S';
        arg = (uint64_t)(uintptr_t)x->str;
        break;
    default:
        arg = hx_ptr(x, rng, &other);
        break;
    }
    int r = hx_raw(x, FN_STR, (uint32_t)rnd(rng, 8) & ~(uint32_t)RPCOOL_SEAL, arg, 1, 0, 0, 1);
    x->str[511] = 0;
    if (other && r >= 0 && !x->mutating) hx_leak("str ran (status %d) on a string in a good client's heap: %#llx", r, (unsigned long long)arg);
}

/* make the server allocate in our heap: sizes small to huge */
static void act_alloc(struct hx *x)
{
    static const uint64_t sizes[] = {0, 1, 16, 17, 4095, 4096, 4097, 32768, 32769, 65536, 65537, 1 << 20, 3 << 20, 8 << 20, 9 << 20};
    uint64_t *rng = &x->rng;
    *x->num = rnd(rng, 3) ? sizes[rnd(rng, sizeof sizes / sizeof sizes[0])] : rnd(rng, 400000);
    hx_call(x, FN_ALLOC, x->num, 8, (unsigned)rnd(rng, 8) & ~(unsigned)RPCOOL_SEAL);
}

/* calls after which the server has allocated in our heap (small, new class, large) */
static void hx_calls_that_allocate(struct hx *x, int n)
{
    for (int i = 0; i < n && !hx_late(x); i++) {
        switch (rnd(&x->rng, 4)) {
        case 0: act_alloc(x); break;
        case 1: hx_call(x, FN_ECHO, x->small, 64, (unsigned)rnd(&x->rng, 8) & ~(unsigned)RPCOOL_SEAL); break;
        case 2: hx_call(x, FN_ECHO, x->big, 40000, (unsigned)rnd(&x->rng, 8) & ~(unsigned)RPCOOL_SEAL); break;
        default: hx_call(x, FN_SUM, x->sa, sizeof *x->sa, (unsigned)rnd(&x->rng, 8) & ~(unsigned)RPCOOL_SEAL); break;
        }
    }
}

/* scribble allocator metadata, then make the server allocate */
static void act_meta(struct hx *x)
{
    for (uint64_t k = 1 + rnd(&x->rng, 4); k; k--) hx_scribble_meta(x, &x->rng);
    x->scribbled = 1;
    hx_calls_that_allocate(x, 1 + (int)rnd(&x->rng, 6));
}

/* Get a server thread to keep a cache in our heap (a thread binds a few heaps at once, and one
   more every 256 allocations elsewhere), damage the caches that are not ours, and call again. */
static void act_tc(struct hx *x)
{
    struct shmheap__hdr *H = x->c->heap->hdr;
    uint64_t *rng = &x->rng;
    unsigned flags = (unsigned)rnd(rng, 8) & ~(unsigned)RPCOOL_SEAL;
    for (int i = 0; i < 300 && !hx_late(x); i++)
        if (hx_call(x, FN_ECHO, x->small, 64, flags) == RPCOOL_E_TIMEOUT) break;
    for (unsigned i = 0; i < SHMHEAP__NTC; i++) {
        struct shmheap__tc *tc = &H->tc[i];
        if (!tc->owner || (uint32_t)tc->owner == (uint32_t)getpid()) continue;
        for (unsigned c = 0; c < SHMHEAP__TC_CLS; c++) {
            for (unsigned k = 0; k < SHMHEAP__TC_CAP; k++) tc->off[c][k] = hx_val64(x, rng);
            tc->n[c] = (uint8_t)(rnd(rng, 4) ? 1 + rnd(rng, SHMHEAP__TC_CAP) : t_rng(rng));
        }
    }
    x->scribbled = 1;
    for (int i = 0; i < 20 && !hx_late(x); i++) {
        hx_call(x, FN_ECHO, x->small, 1 + rnd(rng, 64), flags);
        hx_call(x, FN_SUM, x->sa, sizeof *x->sa, flags);
    }
}

static void act_lines(struct hx *x)
{
    hx_scribble_lines(x, &x->rng);
    if (rnd(&x->rng, 2)) usleep((useconds_t)rnd(&x->rng, 2000));
    else act_api(x);
}

/* a thread changes arguments, call slots and metadata while calls run */
struct mut {
    struct hx *x;
    uint64_t rng, until;
};

static void *mutator(void *p)
{
    struct mut *m = (struct mut *)p;
    struct hx *x = m->x;
    while (rcp__now_ns() < m->until) {
        switch (rnd(&m->rng, 6)) {
        case 0: hx_scribble_meta(x, &m->rng); break;
        case 1: hx_scribble_lines(x, &m->rng); break;
        case 2: x->sa->items = rnd(&m->rng, 2) ? (uint64_t)(uintptr_t)x->items : hx_ptr(x, &m->rng, NULL); break;
        case 3: x->sa->n = rnd(&m->rng, 2) ? 1024 : t_rng(&m->rng); break;
        case 4: x->str[rnd(&m->rng, 512)] = (char)(rnd(&m->rng, 2) ? 0 : 'q'); break;
        default: { /* the mutex, again and again, while the server may hold it */
            uint32_t *w = (uint32_t *)(void *)&x->c->heap->hdr->lock;
            for (int k = 0; k < 64; k++) w[rnd(&m->rng, sizeof x->c->heap->hdr->lock / 4)] = hx_val32(x, &m->rng);
            break;
        }
        }
    }
    return NULL;
}

static void act_mutate(struct hx *x)
{
    struct mut m = {x, mix(t_rng(&x->rng), 7), rcp__now_ns() + (10 + rnd(&x->rng, 50)) * MS};
    pthread_t th;
    x->scribbled = 1;
    if (pthread_create(&th, NULL, mutator, &m)) return;
    x->mutating = 1;
    while (rcp__now_ns() < m.until) {
        switch (rnd(&x->rng, 4)) {
        case 0: act_sum(x); break;
        case 1: act_str(x); break;
        default: hx_calls_that_allocate(x, 1); break;
        }
    }
    pthread_join(th, NULL);
    x->mutating = 0;
}

/* calls left behind in flight */
static void act_flood(struct hx *x)
{
    uint64_t *rng = &x->rng;
    for (uint64_t k = 1 + rnd(rng, 16); k; k--) {
        rpcool_call_opts co;
        uint64_t id;
        memset(&co, 0, sizeof co);
        co.safety = (unsigned)rnd(rng, 8) & ~(unsigned)RPCOOL_SEAL;
        switch (rnd(rng, 4)) {
        case 0: rpcool_call_async(x->c, FN_ECHO, x->big, 40000, &co, NULL, NULL, &id); break;
        case 1: rpcool_call_async(x->c, FN_ALLOC, x->num, 8, &co, NULL, NULL, &id); break;
        case 2: rpcool_call_async(x->c, FN_SLEEP, x->num, 4, &co, NULL, NULL, &id); break;
        default: rpcool_call_async(x->c, FN_SUM, x->sa, sizeof *x->sa, &co, NULL, NULL, &id); break;
        }
        hx_count(&sh->h_calls);
    }
}

/* Keep our heap's mutex taken (the README's client that stops holding it), then queue calls
   that need it on the server's side (blocks over 32 KiB). */
static void act_stall(struct hx *x)
{
    shmheap *h = x->c->heap;
    uint64_t *rng = &x->rng;
    if (rnd(rng, 2) || shmheap__lock(h)) /* or a holder that lives elsewhere */
        *(uint64_t *)(void *)&h->hdr->lock = t_rng(rng) | 1ull << 62 | 1;
    x->scribbled = 1;
    *x->num = 40000 + rnd(rng, 100000);
    for (uint64_t k = 1 + rnd(rng, 64); k; k--) {
        uint64_t id;
        rpcool_call_async(x->c, FN_ALLOC, x->num, 8, NULL, NULL, NULL, &id);
        hx_count(&sh->h_calls);
    }
    usleep((useconds_t)rnd(rng, 20000));
}

/* close early (maybe with calls in flight); the next step connects again */
static void act_close(struct hx *x)
{
    if (x->slot_scribbled) return; /* close would wait for the server to free a slot we broke */
    if (rnd(&x->rng, 2)) act_flood(x);
    rpcool_disconnect(x->c);
    x->c = NULL;
}

/* How a session ends: close, exit without closing, SIGKILL in the middle of a call, or (sandboxed
   phase) a heap file cut short under a call. */
static void hx_end(struct hx *x)
{
    uint64_t *rng = &x->rng;
    if (!x->c) _exit(0);
    switch (rnd(rng, x->sandbox ? 5 : 4)) {
    case 0:
        if (!x->slot_scribbled) rpcool_disconnect(x->c);
        _exit(0);
    case 1:
        _exit(0);
    case 2:
    case 3: {
        uint64_t id;
        *x->num = rnd(rng, 2) ? 5 : 1 << 20;
        rpcool_call_async(x->c, rnd(rng, 2) ? FN_SLEEP : FN_ALLOC, x->num, 8, NULL, NULL, NULL, &id);
        usleep((useconds_t)rnd(rng, 3000));
        kill(getpid(), SIGKILL);
        _exit(0);
    }
    default: {
        char path[RPCOOL__HEAPNAME + 16];
        uint64_t id;
        *x->num = 1 << 20;
        rpcool_call_async(x->c, rnd(rng, 2) ? FN_ALLOC : FN_ECHO, rnd(rng, 2) ? (void *)x->num : (void *)x->huge,
                          8, NULL, NULL, NULL, &id);
        /* the heap is the server's sealed memfd: both truncations fail (EPERM), and are tried */
        snprintf(path, sizeof path, "/proc/self/fd/%d", x->c->heap->fd);
        int fd = open(path, O_RDWR);
        if (fd >= 0 && ftruncate(fd, (off_t)rnd(rng, 4) * 65536)) {}
        if (rnd(rng, 2)) { /* and back: the lost pages come back as zeros */
            usleep((useconds_t)rnd(rng, 2000));
            if (fd >= 0 && ftruncate(fd, (off_t)shmheap_size(x->c->heap))) {}
        }
        usleep((useconds_t)rnd(rng, 20000));
        _exit(0); /* without touching the heap again: it may be gone under us */
    }
    }
}

static void hx_die(int sig) { _exit(100 + sig); }

static void hostile_main(const char *name, uint64_t seed, int sandbox)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hx_die;
    sigaction(SIGSEGV, &sa, NULL); /* our own scribbles may crash us: a quiet death */
    sigaction(SIGBUS, &sa, NULL);
    if (!verbose) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
    }
    alarm(15); /* a wedged hostile dies (and is counted) */
    struct hx x;
    memset(&x, 0, sizeof x);
    x.rng = seed;
    x.name = name;
    x.sandbox = sandbox;
    x.dead_tid = 4000000;
    while (x.dead_tid > 1000 && (kill((pid_t)x.dead_tid, 0) == 0 || errno != ESRCH)) x.dead_tid -= 7919;
    x.end = rcp__now_ns() + (50 + rnd(&x.rng, 350)) * MS;
    while (rcp__now_ns() < x.end) {
        if (!x.c) {
            hx_connect(&x);
            if (!x.c) {
                usleep(2000);
                continue;
            }
        }
        hx_count(&sh->h_actions);
        uint64_t k = rnd(&x.rng, 100);
        if (k < 12) act_api(&x);
        else if (k < 30) act_raw(&x);
        else if (k < 38) act_sum(&x);
        else if (k < 44) act_str(&x);
        else if (k < 52) act_alloc(&x);
        else if (k < 63) act_meta(&x);
        else if (k < 66) act_tc(&x);
        else if (k < 76) act_lines(&x);
        else if (k < 79) hx_scribble_slot(&x, &x.rng);
        else if (k < 85) act_mutate(&x);
        else if (k < 87) act_flood(&x);
        else if (k < 89) act_stall(&x);
        else if (k < 93) act_close(&x);
        else if (k < 96) hx_calls_that_allocate(&x, 2);
        else {
            *x.num = (uint64_t)rnd(&x.rng, 11);
            hx_call(&x, FN_SLEEP, x.num, 4, 0);
        }
    }
    hx_end(&x);
}

/* ============================== the test ============================== */

static uint64_t g_seed;
static int g_rounds;

static void unlink_leftovers(const char *name, int *n)
{
    char pre[128];
    snprintf(pre, sizeof pre, "rpcool-%s-", name);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    *n = 0;
    if (!d) return;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, pre, strlen(pre))) {
            (*n)++;
            if (verbose) printf("# left behind: %s\n", e->d_name);
            shmheap_unlink(e->d_name, NULL);
        }
    closedir(d);
}

/* A fresh client: every call right, in several modes. */
static void fresh_client(const char *name, uint64_t seed)
{
    struct good_rep rep;
    memset(&rep, 0, sizeof rep);
    rpcool_conn_opts o = {.timeout_ms = GOOD_BOUND_MS};
    struct gc g = {connect_retry(name, &o), seed, &rep};
    CHECKF(g.c != NULL, "a fresh client could not connect after the hostile rounds (FUZZ_SEED=%llu)", (unsigned long long)g_seed);
    if (!g.c) return;
    for (unsigned m = 0; m < NMODES; m++)
        for (unsigned op = 0; op < 4; op++) good_call(&g, op, good_modes[m]);
    CHECKF(rep.wrong == 0 && rep.failed == 0, "fresh client: %llu wrong, %llu failed: %s (FUZZ_SEED=%llu)",
           (unsigned long long)rep.wrong, (unsigned long long)rep.failed, rep.why, (unsigned long long)g_seed);
    CHECK_EQ(shmheap_check(rpcool_heap(g.c), NULL), 0);
    rpcool_disconnect(g.c);
}

/* A sealed call that times out keeps its argument sealed; freeing the argument then must not
   fault. (Good clients did, in shmheap_free, each time a fuzzed server died under their calls.) */
static void sealed_then_timeout(const char *name)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        rpcool_conn *c = connect_retry(name, NULL);
        if (!c) _exit(2);
        rpcool_call_opts co = {.safety = RPCOOL_SEAL, .timeout_ms = 1};
        for (int i = 0; i < 20; i++) { /* until a call times out (a descheduled caller may see it end) */
            uint32_t *a = (uint32_t *)rpcool_alloc_pages(c, sizeof *a);
            if (!a) _exit(3);
            *a = 10; /* ms */
            int r = rpcool_call_ex(c, FN_SLEEP, a, sizeof *a, &co, NULL, NULL);
            if (r != RPCOOL_E_TIMEOUT && r != 1) _exit(4);
            rpcool_free(c, a); /* faulted here, after a timeout */
            if (r == RPCOOL_E_TIMEOUT) break;
        }
        usleep(30000);
        rpcool_progress(c); /* the late reply is harvested */
        char *m = rpcool_strdup(c, "still fine");
        void *ret = NULL;
        size_t n = 0;
        int ok = m && rpcool_call(c, FN_ECHO, m, 11, &ret, &n) == 0 && n == 11 && !memcmp(ret, m, 11);
        rpcool_free(c, ret);
        rpcool_free(c, m);
        rpcool_disconnect(c);
        _exit(ok ? 0 : 5);
    }
    int st;
    char buf[96];
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "free of a sealed argument after its call timed out: %s", describe(st, buf, sizeof buf));
}

static void fuzz_phase(const char *label, unsigned safety, int sandbox, uint64_t seed)
{
    const char *name = t_uniq(label);
    char buf[96];
    memset(sh, 0, sizeof *sh);
    uint64_t t_start = rcp__now_ns();
    struct child_srv cs;
    if (srv_start(&cs, name, safety)) {
        CHECKF(0, "the server did not start");
        return;
    }
    pid_t good[NGOOD];
    for (int k = 0; k < NGOOD; k++) {
        fflush(stdout);
        if ((good[k] = fork()) == 0) good_main(name, k, mix(seed, 1000 + (uint64_t)k));
    }
    int ok = 1;
    uint64_t t0 = rcp__now_ns();
    for (int k = 0; k < NGOOD; k++)
        while (!__atomic_load_n(&sh->good[k].ready, __ATOMIC_ACQUIRE) && ok) {
            if (rcp__now_ns() - t0 > 10000 * MS || waitpid(good[k], NULL, WNOHANG) != 0) ok = 0;
            usleep(1000);
        }
    CHECKF(ok, "good clients did not connect: %s / %s", sh->good[0].why, sh->good[1].why);
    uint64_t last_calls[NGOOD] = {0}, last_change[NGOOD];
    for (int k = 0; k < NGOOD; k++) last_change[k] = rcp__now_ns();
    int ends[8] = {0}; /* exited 0, crashed on its own damage, SIGKILLed itself, wedged (killed), other */
    int good_dead = 0, rounds_done = 0;
    for (int r = 0; ok && r < g_rounds; r++) {
        pid_t hp[NHOSTILE];
        for (int k = 0; k < NHOSTILE; k++) {
            fflush(stdout);
            if ((hp[k] = fork()) == 0) hostile_main(name, mix(seed, (uint64_t)r * NHOSTILE + (uint64_t)k), sandbox);
        }
        uint64_t rt0 = rcp__now_ns();
        for (int left = NHOSTILE; left;) {
            for (int k = 0; k < NHOSTILE; k++) {
                int st;
                if (hp[k] <= 0 || waitpid(hp[k], &st, WNOHANG) != hp[k]) continue;
                hp[k] = 0;
                left--;
                if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ends[0]++;
                else if (WIFEXITED(st) && WEXITSTATUS(st) > 100) ends[1]++;
                else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) ends[2]++;
                else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) ends[3]++;
                else ends[4]++;
            }
            if (!srv_alive(&cs)) {
                CHECKF(0, "the server died in round %d: %s (FUZZ_SEED=%llu)", r, describe(cs.status, buf, sizeof buf),
                       (unsigned long long)g_seed);
                ok = 0;
                break;
            }
            for (int k = 0; k < NGOOD; k++) {
                int st;
                if (good[k] > 0 && waitpid(good[k], &st, WNOHANG) == good[k]) {
                    CHECKF(0, "good client %d died in round %d: %s; %s (FUZZ_SEED=%llu)", k, r, describe(st, buf, sizeof buf),
                           sh->good[k].why, (unsigned long long)g_seed);
                    good[k] = 0;
                    good_dead = 1;
                    ok = 0;
                }
                uint64_t calls = __atomic_load_n(&sh->good[k].calls, __ATOMIC_RELAXED), now = rcp__now_ns();
                if (calls != last_calls[k]) {
                    last_calls[k] = calls;
                    last_change[k] = now;
                } else if (good[k] > 0 && now - last_change[k] > 2 * GOOD_BOUND_MS * MS) {
                    CHECKF(0, "good client %d made no call for %llu ms in round %d (FUZZ_SEED=%llu)", k,
                           (unsigned long long)((now - last_change[k]) / MS), r, (unsigned long long)g_seed);
                    ok = 0;
                }
            }
            if (!ok) break;
            if (rcp__now_ns() - rt0 > 20000 * MS) { /* hostiles have alarm(15): this is a backstop */
                for (int k = 0; k < NHOSTILE; k++)
                    if (hp[k] > 0) kill(hp[k], SIGKILL);
            }
            usleep(2000);
        }
        for (int k = 0; k < NHOSTILE; k++)
            if (hp[k] > 0) {
                kill(hp[k], SIGKILL);
                waitpid(hp[k], NULL, 0);
            }
        rounds_done = r + 1;
        if (verbose) printf("# round %d: %.2f s\n", r, (double)(rcp__now_ns() - rt0) / 1e9);
    }
    if (ok) sealed_then_timeout(name);
    if (ok) fresh_client(name, mix(seed, 4242));
    /* stop the good clients and read their counts */
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    for (int k = 0; k < NGOOD; k++) {
        if (good[k] <= 0) continue;
        int st = 0;
        pid_t w;
        t0 = rcp__now_ns();
        while ((w = waitpid(good[k], &st, WNOHANG)) == 0 && rcp__now_ns() - t0 < 15000 * MS) usleep(2000);
        if (w == 0) {
            kill(good[k], SIGKILL);
            waitpid(good[k], &st, 0);
            CHECKF(0, "good client %d did not finish (FUZZ_SEED=%llu)", k, (unsigned long long)g_seed);
            continue;
        }
        struct good_rep *g = &sh->good[k];
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && g->done, "good client %d: %s; %s (FUZZ_SEED=%llu)", k,
               describe(st, buf, sizeof buf), g->why, (unsigned long long)g_seed);
        CHECKF(g->wrong == 0 && g->failed == 0 && g->slow == 0,
               "good client %d: %llu calls, %llu wrong, %llu failed, %llu over %u ms; first: %s (FUZZ_SEED=%llu)", k,
               (unsigned long long)g->calls, (unsigned long long)g->wrong, (unsigned long long)g->failed,
               (unsigned long long)g->slow, GOOD_BOUND_MS, g->why, (unsigned long long)g_seed);
        CHECKF(g->check_rc == 0, "good client %d: its heap does not check out: %s (FUZZ_SEED=%llu)", k, g->why,
               (unsigned long long)g_seed);
        if (g->failed == 0) /* the connection header and the secret; every reply was freed */
            CHECKF(g->live_blocks == 2, "good client %d: %llu live blocks in its heap at the end, expected 2 (FUZZ_SEED=%llu)", k,
                   (unsigned long long)g->live_blocks, (unsigned long long)g_seed);
    }
    (void)good_dead;
    CHECKF(sh->leaks == 0, "%llu hostile calls ran a handler on another client's heap; first: %s (FUZZ_SEED=%llu)",
           (unsigned long long)sh->leaks, sh->leak_why, (unsigned long long)g_seed);
    /* the server closes cleanly */
    rpcool_server_stats st;
    memset(&st, 0, sizeof st);
    int srv_ok = 0;
    if (srv_alive(&cs)) {
        close(cs.ctl);
        t0 = rcp__now_ns();
        pid_t w;
        while ((w = waitpid(cs.pid, &cs.status, WNOHANG)) == 0 && rcp__now_ns() - t0 < 10000 * MS) usleep(2000);
        if (w == 0) {
            kill(cs.pid, SIGKILL);
            waitpid(cs.pid, &cs.status, 0);
            CHECKF(0, "the server did not close within 10 s (FUZZ_SEED=%llu)", (unsigned long long)g_seed);
        } else {
            CHECKF(WIFEXITED(cs.status) && WEXITSTATUS(cs.status) == 0, "the server's close: %s (FUZZ_SEED=%llu)",
                   describe(cs.status, buf, sizeof buf), (unsigned long long)g_seed);
            srv_ok = read(cs.rep, &st, sizeof st) == (ssize_t)sizeof st;
        }
    } else {
        close(cs.ctl);
        if (ok) CHECKF(0, "the server died: %s (FUZZ_SEED=%llu)", describe(cs.status, buf, sizeof buf), (unsigned long long)g_seed);
    }
    close(cs.rep);
    t_rm_channel(name); /* a dead server's channel */
    int left = 0;
    unlink_leftovers(name, &left);
    printf("# %s: %d rounds in %.1f s; good calls %llu + %llu (slowest %.1f ms); hostile: %llu actions, %llu connects, "
           "%llu calls (%llu answered >= 0); hostile ends: %d exited, %d crashed on their own damage, %d SIGKILLed, "
           "%d wedged, %d other; server: %llu calls, %llu accepted, %llu reaped, %llu faults, %llu bad entries%s; "
           "%d heap files left by hostiles\n",
           label, rounds_done, (double)(rcp__now_ns() - t_start) / 1e9, (unsigned long long)sh->good[0].calls,
           (unsigned long long)sh->good[1].calls,
           (double)(sh->good[0].max_ns > sh->good[1].max_ns ? sh->good[0].max_ns : sh->good[1].max_ns) / 1e6,
           (unsigned long long)sh->h_actions, (unsigned long long)sh->h_connects, (unsigned long long)sh->h_calls,
           (unsigned long long)sh->h_ok, ends[0], ends[1], ends[2], ends[3], ends[4], (unsigned long long)st.calls,
           (unsigned long long)st.accepted, (unsigned long long)st.reaped, (unsigned long long)st.faults,
           (unsigned long long)st.bad_entries, srv_ok ? "" : " (no report)", left);
    fflush(stdout);
}

static void test_fuzz_relaxed(void) { fuzz_phase("fzr", RPCOOL_RELAXED, 0, mix(g_seed, 1)); }
static void test_fuzz_sandboxed(void) { fuzz_phase("fzs", RPCOOL_SANDBOX, 1, mix(g_seed, 2)); }

int main(int argc, char **argv)
{
    t_init(argc, argv);
    const char *e = getenv("FUZZ_SEED");
    g_seed = e && *e ? strtoull(e, NULL, 0) : (rcp__now_ns() ^ ((uint64_t)getpid() << 32));
    e = getenv("FUZZ_ROUNDS");
    g_rounds = e && *e ? atoi(e) : 7;
    if (g_rounds < 1) g_rounds = 1;
    e = getenv("FUZZ_VERBOSE");
    verbose = e && *e && *e != '0';
    printf("# FUZZ_SEED=%llu FUZZ_ROUNDS=%d\n", (unsigned long long)g_seed, g_rounds);
    fflush(stdout);
    sh = (struct shared *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    (void)t_skip;
    RUN(test_fuzz_relaxed);
    RUN(test_fuzz_sandboxed);
    return T_DONE();
}
