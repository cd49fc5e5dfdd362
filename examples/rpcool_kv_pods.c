// LIBS: -libverbs
/* rpcool_kv_pods.c - one key-value server for two pods: its own pod calls it over shared memory
 * and reads its table by pointer; the other pod calls it over RDMA and reads and writes the
 * table with one-sided RDMA. One export (rpcool.h, "13. Shared data") carries the table and the
 * locks that guard its buckets for both pods.
 *
 *   cc -O2 -pthread -I. examples/rpcool_kv_pods.c -o kvp -libverbs
 *   ./kvp [KEYS] [CLIENTS]        pod A alone on this host (no RDMA): the server and CLIENTS
 *                                 client processes (default 2000 keys each, 2); `make demo`
 *   ./kvp serve [SECONDS]         pod A's server on channel "kv" (default: until SIGINT/SIGTERM)
 *   ./kvp local N KEYS ROUNDS     N pod A client processes against that server
 *   SHMHEAP_POD_ID=1 ./kvp remote HOST N KEYS ROUNDS   N pod B client processes (needs RDMA)
 *   ./kvp bench [HOST] [GETS]     time gets: with HOST from pod B (by call over RDMA, by locked
 *                                 and by optimistic one-sided READ), without it from pod A (a
 *                                 server of its own; by call, by pointer under the lock)
 *
 * The idea. The server keeps a hash table of fixed-size buckets in a heap of its own (the store)
 * and exports it as "kv" with one lock per bucket (rpcool_export_create): every word of the table
 * is written only by a holder of its bucket's lock, in WRITE mode, which also bumps the lock's
 * version word.
 * - Pod A (processes that map the store): calls over shared memory (rpcool_connect("kv")); a
 *   client also opens the export (rpcool_export_open) and reads a bucket by pointer under its
 *   lock: CPU atomics, no call, no NIC.
 * - Pod B (another host): calls over RDMA (rpcool_connect("rdma://HOST/kv")) with the same
 *   requests and handlers, and the export attached through that connection (rpcool_attach_conn;
 *   rpcool_attach("rdma://HOST/kv") without calls). A pod B client reads a bucket with one READ
 *   under the bucket's lock (ALock's remote cohort), or without it (rpcool_remote_read_opt:
 *   the version word read before and after), and puts by READ + WRITE of one entry under the
 *   lock. Addresses are the table's own: a pointer read from the table is a valid remote address.
 * Trust: the export is RPCOOL_REMOTE_RW, so pod B's clients may write any entry; entries are
 * checked (kvp_entry_ok) and copied with bounds, so a bad one is skipped, never followed. A
 * server that does not trust pod B exports with RPCOOL_REMOTE_READ and takes puts by call.
 * Without rdma-core's headers everything RDMA says "not supported" (RPCOOL_E_NOTSUP): the server
 * then serves its own pod, and pod B's clients say why they cannot run. */
#define RPCOOL_WITH_RDMA /* calls and the export between pods (krconn, alock, nppin come along) */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

/* ---------------------------------------------------------------- the table (shared layout) */

#define KVP_MAGIC 0x3253444f5056564bull /* "KVVPODS2" */
#define KVP_SLOTS 8     /* entries per bucket */
#define KVP_KEY_MAX 32  /* key bytes with the NUL */
#define KVP_VAL_MAX 80  /* value bytes with the NUL */
#define KVP_BUDGET 8    /* alock: hand-offs within a cohort before the other gets a turn */
#define KVP_TMO 20000   /* ms: one remote operation (Soft-RoCE under emulation is slow) */

typedef struct kvp_entry { /* written only by a holder of its bucket's lock */
    uint32_t used;          /* 1: holds a key */
    uint32_t vlen;          /* value bytes with the NUL */
    uint64_t sum;           /* kvp_sum of key and value: a torn entry fails it */
    char key[KVP_KEY_MAX];
    char val[KVP_VAL_MAX];
} kvp_entry;
typedef struct kvp_bucket { kvp_entry e[KVP_SLOTS]; } kvp_bucket;
typedef struct kvp_table {
    uint64_t magic;
    uint32_t nbuckets, slots; /* nbuckets: a power of two, and the export's number of locks */
    uint64_t pad[6];
    kvp_bucket b[];
} kvp_table;
_Static_assert(sizeof(kvp_entry) == 128, "entry layout");
_Static_assert(sizeof(kvp_table) == 64, "header layout");

enum { KVP_PUT = 1, KVP_GET = 2 };                                    /* handler ids */
enum { KVP_OK = 0, KVP_NOTFOUND = 1, KVP_FULL = 2, KVP_TOOLONG = 3 }; /* statuses */

struct kvp_req { const char *key, *val; }; /* KVP_PUT's argument, in the caller's heap */
#define KVP_REQ_BYTES (sizeof(struct kvp_req) + KVP_KEY_MAX + KVP_VAL_MAX) /* with its strings */

static uint64_t kvp_sum(const char *key, const char *val, uint32_t vlen)
{
    uint64_t h = rpcool_hash(key) * 31u + vlen;
    for (uint32_t i = 0; i < vlen; i++) h = (h ^ (unsigned char)val[i]) * 1099511628211ull;
    return h;
}

static uint32_t kvp_bucket_of(const char *key, uint32_t nbuckets)
{
    return (uint32_t)(rpcool_hash(key) & (nbuckets - 1));
}

/* A well-formed entry: terminated strings of the recorded length, and the right sum. */
static int kvp_entry_ok(const kvp_entry *e)
{
    return e->used == 1 && memchr(e->key, 0, KVP_KEY_MAX) && e->vlen >= 1 &&
           e->vlen <= KVP_VAL_MAX && e->val[e->vlen - 1] == 0 && strlen(e->val) + 1 == e->vlen &&
           e->sum == kvp_sum(e->key, e->val, e->vlen);
}

/* The slot holding key, else -1; *free_slot = the first unused slot (-1: none). A used entry
   that is not well formed is counted in *bad (it never should be: writers hold the lock). Each
   entry is checked on a copy, so one that changes meanwhile is never read out of bounds. */
static int kvp_find(const kvp_bucket *b, const char *key, int *free_slot, int *bad)
{
    if (free_slot) *free_slot = -1;
    for (int i = 0; i < KVP_SLOTS; i++) {
        kvp_entry e;
        memcpy(&e, &b->e[i], sizeof e);
        if (!e.used) {
            if (free_slot && *free_slot < 0) *free_slot = i;
            continue;
        }
        if (!kvp_entry_ok(&e)) {
            if (bad) (*bad)++;
            continue;
        }
        if (!strcmp(e.key, key)) return i;
    }
    return -1;
}

/* A found entry's value into out (KVP_VAL_MAX bytes), bounded whatever the entry holds now. */
static void kvp_copy_val(char *out, const kvp_entry *e)
{
    memcpy(out, e->val, KVP_VAL_MAX);
    out[KVP_VAL_MAX - 1] = 0;
}

static void kvp_fill(kvp_entry *e, const char *key, const char *val)
{
    memset(e, 0, sizeof *e);
    snprintf(e->key, KVP_KEY_MAX, "%s", key);
    e->vlen = (uint32_t)strlen(val) + 1;
    memcpy(e->val, val, e->vlen);
    e->sum = kvp_sum(e->key, e->val, e->vlen);
    e->used = 1;
}

/* The value a client puts under key in round r: "KEY|rR|" and letters that depend on both, so
   any reader can tell a value that was put from one that was not. */
static void kvp_value(const char *key, unsigned r, char *out)
{
    uint64_t h = rpcool_hash(key) ^ (r * 0x9e3779b97f4a7c15ull);
    int n = snprintf(out, KVP_VAL_MAX, "%s|r%u|", key, r);
    size_t len = (size_t)n + 8 + h % 40;
    if (len > KVP_VAL_MAX - 1) len = KVP_VAL_MAX - 1;
    for (size_t i = (size_t)n; i < len; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (char)('a' + (h >> 59) % 26);
    }
    out[len] = 0;
}

/* The round of a value put under key (>= 1), or 0 if no client put that value. */
static unsigned kvp_value_round(const char *key, const char *val)
{
    size_t kl = strlen(key);
    if (strncmp(val, key, kl) || val[kl] != '|' || val[kl + 1] != 'r') return 0;
    unsigned long r = strtoul(val + kl + 2, NULL, 10);
    char want[KVP_VAL_MAX];
    if (r < 1 || r > 1000000000) return 0;
    kvp_value(key, (unsigned)r, want);
    return strcmp(want, val) ? 0 : (unsigned)r;
}

/* ---------------------------------------------------------------- the server (pod A) */

typedef struct kvp_server {
    shmheap *store;
    kvp_table *tab;
    rpcool_export *x;     /* the table and its locks, as "kv" (the channel's name) */
    rpcool_server *rpc;
    int remote;           /* 1: pod B reaches the table */
    char heap_name[80];
} kvp_server;

static kvp_server *kvp_srv; /* the handlers' server (one per process) */

static int kvp_put(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (len != sizeof(struct kvp_req)) return RPCOOL_E_INVAL;
    /* read the caller's strings before taking the lock: never hold a lock on peer data */
    const struct kvp_req *rq = (const struct kvp_req *)rpcool_ctx_need(ctx, arg, len);
    const char *key = rpcool_ctx_need_str(ctx, rq->key), *val = rpcool_ctx_need_str(ctx, rq->val);
    if (strlen(key) >= KVP_KEY_MAX || strlen(val) >= KVP_VAL_MAX) return KVP_TOOLONG;
    char k[KVP_KEY_MAX], v[KVP_VAL_MAX];
    strcpy(k, key);
    strcpy(v, val);
    uint32_t b = kvp_bucket_of(k, kvp_srv->tab->nbuckets);
    rpcool_xhold hold;
    int free_slot, rc = rpcool_export_lock(kvp_srv->x, b, RPCOOL_LOCK_WRITE, &hold);
    if (rc < 0) return rc;
    int i = kvp_find(&kvp_srv->tab->b[b], k, &free_slot, NULL);
    if (i < 0) i = free_slot;
    if (i >= 0) kvp_fill(&kvp_srv->tab->b[b].e[i], k, v);
    rpcool_export_unlock(&hold);
    return i >= 0 ? KVP_OK : KVP_FULL;
}

static int kvp_get(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (!len) return RPCOOL_E_INVAL;
    const char *key = rpcool_ctx_need_str(ctx, (const char *)arg);
    if (strlen(key) >= KVP_KEY_MAX) return KVP_NOTFOUND;
    char k[KVP_KEY_MAX], v[KVP_VAL_MAX];
    strcpy(k, key);
    uint32_t b = kvp_bucket_of(k, kvp_srv->tab->nbuckets);
    rpcool_xhold hold;
    int rc = rpcool_export_lock(kvp_srv->x, b, RPCOOL_LOCK_READ, &hold);
    if (rc < 0) return rc;
    int i = kvp_find(&kvp_srv->tab->b[b], k, NULL, NULL);
    if (i >= 0) kvp_copy_val(v, &kvp_srv->tab->b[b].e[i]);
    rpcool_export_unlock(&hold);
    if (i < 0) return KVP_NOTFOUND;
    size_t n = strlen(v) + 1;
    char *out = (char *)rpcool_ctx_alloc(ctx, n); /* the answer goes into the caller's heap */
    if (!out) return SHMHEAP_E_FULL;
    memcpy(out, v, n);
    rpcool_ctx_reply(ctx, out, n);
    return KVP_OK;
}

static uint32_t kvp_nbuckets_for(long keys) /* about half full at most: a bucket never fills */
{
    uint32_t n = 64;
    while (n < 2 * (uint64_t)keys && n < (1u << 20)) n <<= 1;
    return n;
}

static void kvp_server_close(kvp_server *sv)
{
    if (!sv) return;
    if (sv->rpc) rpcool_server_close(sv->rpc);
    if (sv->x) rpcool_export_close(sv->x);
    if (sv->store) {
        shmheap_close(sv->store);
        shmheap_unlink(sv->heap_name, NULL);
    }
    free(sv);
    kvp_srv = NULL;
}

/* The store, the table, the export and the channel (not serving yet); with rdma, the export and
   calls for pod B too when this host can (without a device the server says so and serves its
   own pod only). */
static int kvp_server_open(const char *chan, long keys, int rdma, kvp_server **out)
{
    kvp_server *sv = (kvp_server *)calloc(1, sizeof *sv);
    int rc;
    if (!sv) return -ENOMEM;
    kvp_srv = sv;
    uint32_t nb = kvp_nbuckets_for(keys);
    size_t tlen = sizeof(kvp_table) + (size_t)nb * sizeof(kvp_bucket);
    snprintf(sv->heap_name, sizeof sv->heap_name, "%s-store", chan);
    shmheap_opts ho = {.size = tlen + (size_t)nb * 256 + ((size_t)16 << 20)};
    if ((rc = shmheap_create(sv->heap_name, &ho, &sv->store))) {
        fprintf(stderr, "store heap \"%s\": %s\n", sv->heap_name, shmheap_strerror(rc));
        goto fail;
    }
    if (!(sv->tab = (kvp_table *)shmheap_aligned_alloc(sv->store, 4096, tlen))) {
        rc = SHMHEAP_E_FULL;
        fprintf(stderr, "table of %zu bytes: %s\n", tlen, shmheap_strerror(rc));
        goto fail;
    }
    memset(sv->tab, 0, tlen);
    sv->tab->magic = KVP_MAGIC;
    sv->tab->nbuckets = nb;
    sv->tab->slots = KVP_SLOTS;
    /* the export first (a client that connects finds it), then the channel: with rdma both
       are published at the meta server this process runs (krconn.h, TCP 7471) */
    rpcool_export_opts xo = {.nlocks = nb, .budget = KVP_BUDGET,
                             .remote = rdma ? RPCOOL_REMOTE_RW : RPCOOL_REMOTE_NONE,
                             .rdma = rdma ? "serve" : NULL};
    if ((rc = rpcool_export_create(sv->store, chan, sv->tab, tlen, &xo, &sv->x)) && rdma) {
        printf("server: the table not exported to pod B (%s)\n", rpcool_strerror(rc));
        xo.remote = RPCOOL_REMOTE_NONE;
        xo.rdma = NULL;
        rc = rpcool_export_create(sv->store, chan, sv->tab, tlen, &xo, &sv->x);
    }
    if (rc) {
        fprintf(stderr, "export \"%s\": %s\n", chan, rpcool_strerror(rc));
        goto fail;
    }
    rpcool_server_opts so = {.max_conns = 64, .rdma = rdma ? "serve" : NULL};
    if ((rc = rpcool_server_open(chan, &so, &sv->rpc)) && rdma) {
        printf("server: no calls over RDMA (%s): serving pod A only\n", rpcool_strerror(rc));
        rdma = 0;
        so.rdma = NULL;
        rc = rpcool_server_open(chan, &so, &sv->rpc);
    }
    if (rc) {
        fprintf(stderr, "channel \"%s\": %s\n", chan, rpcool_strerror(rc));
        goto fail;
    }
    rpcool_server_add_handler(sv->rpc, KVP_PUT, kvp_put, NULL, 0);
    rpcool_server_add_handler(sv->rpc, KVP_GET, kvp_get, NULL, 0);
    sv->remote = xo.remote != RPCOOL_REMOTE_NONE;
    printf("server: channel \"%s\", table of %u buckets x %d entries in heap \"%s\"%s\n", chan,
           nb, KVP_SLOTS, sv->heap_name, sv->remote ? ", exported to pod B" : "");
    fflush(stdout);
    *out = sv;
    return 0;
fail:
    kvp_server_close(sv);
    return rc;
}

/* ---------------------------------------------------------------- clients (both pods) */

typedef struct kvp_counts {
    uint64_t puts_rpc, puts_write;           /* puts by call, by one-sided WRITE */
    uint64_t gets_rpc, gets_ptr, gets_read;  /* gets by call, by pointer, by one-sided READ */
    uint64_t others;       /* other clients' keys and hot keys read and found well formed */
    uint64_t bad;          /* answers that disagree with what was put: must stay 0 */
} kvp_counts;

typedef struct kvp_client {
    rpcool_conn *conn;        /* calls (NULL: none, see rpc_why) */
    char rpc_why[200];
    struct kvp_req *rq;       /* in the connection heap */
    char *key, *val;
    kvp_table *tab;           /* the table's address (in pod B: not mapped, a remote address) */
    uint32_t nbuckets;
    shmheap *store;           /* pod A: the store, mapped; the export opened in it */
    rpcool_export *x;
    rpcool_remote *r;         /* pod B: the export attached */
    kvp_bucket buf;           /* pod B: a bucket read */
} kvp_client;

static void kvp_client_close(kvp_client *c)
{
    if (!c) return;
    if (c->r) rpcool_remote_detach(c->r);
    if (c->x) rpcool_export_close(c->x);
    if (c->store) shmheap_close(c->store);
    if (c->conn) {
        if (c->rq) rpcool_free(c->conn, c->rq);
        rpcool_disconnect(c->conn);
    }
    free(c);
}

/* Connect to chan, for up to wait_s seconds (the server may not be up yet). */
static int kvp_client_rpc(kvp_client *c, const char *chan, int wait_s)
{
    int rc;
    for (uint64_t end = rcp__now_ns() + (uint64_t)wait_s * 1000000000ull;;) {
        rc = rpcool_connect(chan, NULL, &c->conn);
        if (!rc || rc == RPCOOL_E_NOTSUP || rc == RPCOOL_E_BADNAME || rcp__now_ns() > end) break;
        usleep(100 * 1000);
    }
    if (rc) {
        snprintf(c->rpc_why, sizeof c->rpc_why, "rpcool_connect(\"%s\"): %s", chan,
                 rpcool_strerror(rc));
        c->conn = NULL;
        return rc;
    }
    /* the request and its strings in one block: over RDMA, one extent carries all of it */
    char *blk = (char *)rpcool_alloc(c->conn, KVP_REQ_BYTES);
    if (!blk) return SHMHEAP_E_FULL;
    c->rq = (struct kvp_req *)blk;
    c->key = blk + sizeof *c->rq;
    c->val = c->key + KVP_KEY_MAX;
    c->rq->key = c->key;
    c->rq->val = c->val;
    return 0;
}

/* Pod A: calls over shared memory, and the table by pointer. */
static int kvp_local_open(const char *chan, kvp_client **out)
{
    kvp_client *c = (kvp_client *)calloc(1, sizeof *c);
    char heap[80];
    size_t len;
    int rc;
    if (!c) return -ENOMEM;
    if ((rc = kvp_client_rpc(c, chan, 10))) {
        fprintf(stderr, "client: %s\n", c->rpc_why);
        goto fail;
    }
    snprintf(heap, sizeof heap, "%s-store", chan);
    if ((rc = shmheap_open(heap, NULL, &c->store)) ||
        (rc = rpcool_export_open(c->store, chan, &c->x))) {
        fprintf(stderr, "client: export \"%s\" in heap \"%s\": %s\n", chan, heap,
                rpcool_strerror(rc));
        goto fail;
    }
    c->tab = (kvp_table *)rpcool_export_base(c->x, &len);
    if (len < sizeof *c->tab || c->tab->magic != KVP_MAGIC) {
        rc = RPCOOL_E_INVAL;
        fprintf(stderr, "client: no kv table in export \"%s\"\n", chan);
        goto fail;
    }
    c->nbuckets = c->tab->nbuckets;
    *out = c;
    return 0;
fail:
    kvp_client_close(c);
    return rc;
}

/* Pod B: calls over RDMA when rpcool has them, and the export attached (through the connection,
   or by name when there are no calls). */
static int kvp_remote_open(const char *host, const char *chan, int quiet, kvp_client **out)
{
    kvp_client *c = (kvp_client *)calloc(1, sizeof *c);
    char url[160];
    size_t len;
    int rc;
    if (!c) return -ENOMEM;
    snprintf(url, sizeof url, "rdma://%s/%s", host, chan);
    if (kvp_client_rpc(c, url, 60) && !quiet) printf("client: %s: one-sided part only\n", c->rpc_why);
    rpcool_attach_opts ao = {.timeout_ms = KVP_TMO};
    rc = c->conn ? rpcool_attach_conn(c->conn, chan, &ao, &c->r) : rpcool_attach(url, &ao, &c->r);
    if (rc) {
        fprintf(stderr, "pod B client: attaching export \"%s\": %s\n", url, rpcool_strerror(rc));
        goto fail;
    }
    /* the table's header, by READ: the base is the table's address in pod A */
    kvp_table th;
    c->tab = (kvp_table *)rpcool_remote_base(c->r, &len);
    if (len < sizeof th || (rc = rpcool_remote_read(c->r, c->tab, &th, sizeof th)) ||
        th.magic != KVP_MAGIC || th.slots != KVP_SLOTS || !th.nbuckets ||
        (th.nbuckets & (th.nbuckets - 1)) || th.nbuckets > rpcool_remote_nlocks(c->r) ||
        len < sizeof th + (size_t)th.nbuckets * sizeof(kvp_bucket)) {
        fprintf(stderr, "pod B client: no kv table at %s: %s\n", url,
                rc ? rpcool_strerror(rc) : "bad header");
        rc = rc ? rc : RPCOOL_E_INVAL;
        goto fail;
    }
    c->nbuckets = th.nbuckets;
    *out = c;
    return 0;
fail:
    kvp_client_close(c);
    return rc;
}

/* ---- the operations. Each returns 1 (found / stored), 0 (not found), or a negative code. */

static int kvp_put_rpc(kvp_client *c, const char *key, const char *val)
{
    snprintf(c->key, KVP_KEY_MAX, "%s", key);
    snprintf(c->val, KVP_VAL_MAX, "%s", val);
    rpcool_extent all = {c->rq, KVP_REQ_BYTES}; /* the strings travel with the call */
    rpcool_call_opts co = {.extents = &all, .nextents = 1};
    int rc = rpcool_call_ex(c->conn, KVP_PUT, c->rq, sizeof *c->rq, &co, NULL, NULL);
    return rc == KVP_OK ? 1 : rc < 0 ? rc : -rc; /* a put that is refused is an error here */
}

static int kvp_get_rpc(kvp_client *c, const char *key, char *val)
{
    void *ret = NULL;
    size_t n = 0;
    snprintf(c->key, KVP_KEY_MAX, "%s", key);
    int rc = rpcool_call(c->conn, KVP_GET, c->key, strlen(c->key) + 1, &ret, &n);
    if (rc == KVP_OK) snprintf(val, KVP_VAL_MAX, "%.*s", ret ? (int)n : 0, ret ? (char *)ret : "");
    if (ret) rpcool_free(c->conn, ret);
    return rc == KVP_OK ? 1 : rc == KVP_NOTFOUND ? 0 : rc < 0 ? rc : -rc;
}

/* Pod A: the bucket by pointer, under the bucket's lock (CPU atomics). */
static int kvp_get_ptr(kvp_client *c, const char *key, char *val, uint64_t *bad)
{
    uint32_t b = kvp_bucket_of(key, c->nbuckets);
    rpcool_xhold hold;
    int badn = 0, rc = rpcool_export_lock(c->x, b, RPCOOL_LOCK_READ, &hold);
    if (rc < 0) return rc;
    int i = kvp_find(&c->tab->b[b], key, NULL, &badn);
    if (i >= 0) kvp_copy_val(val, &c->tab->b[b].e[i]);
    rpcool_export_unlock(&hold);
    *bad += (uint64_t)badn;
    return i >= 0;
}

/* Pod B: the bucket by one READ, under the bucket's lock (locked) or optimistically. */
static int kvp_get_read(kvp_client *c, const char *key, char *val, uint64_t *bad, int locked)
{
    uint32_t b = kvp_bucket_of(key, c->nbuckets);
    rpcool_xhold hold;
    int badn = 0, rc;
    if (!locked) {
        rc = rpcool_remote_read_opt(c->r, b, &c->tab->b[b], &c->buf, sizeof c->buf);
    } else if ((rc = rpcool_remote_lock(c->r, b, RPCOOL_LOCK_READ, &hold)) >= 0) {
        rc = rpcool_remote_read(c->r, &c->tab->b[b], &c->buf, sizeof c->buf);
        int urc = rpcool_remote_unlock(&hold);
        rc = rc ? rc : urc;
    }
    if (rc) return rc;
    int i = kvp_find(&c->buf, key, NULL, &badn);
    if (i >= 0) kvp_copy_val(val, &c->buf.e[i]);
    if (bad) *bad += (uint64_t)badn;
    return i >= 0;
}

/* Pod B: a put without a call: READ the bucket, WRITE one entry, both under the lock. */
static int kvp_put_write(kvp_client *c, const char *key, const char *val)
{
    uint32_t b = kvp_bucket_of(key, c->nbuckets);
    rpcool_xhold hold;
    int rc = rpcool_remote_lock(c->r, b, RPCOOL_LOCK_WRITE, &hold); /* OWNERDEAD: held */
    if (rc < 0) return rc;
    rc = rpcool_remote_read(c->r, &c->tab->b[b], &c->buf, sizeof c->buf);
    int free_slot, i = rc ? -1 : kvp_find(&c->buf, key, &free_slot, NULL);
    if (!rc && i < 0) i = free_slot;
    if (!rc && i < 0) rc = -KVP_FULL;
    if (!rc) {
        kvp_fill(&c->buf.e[i], key, val);
        rc = rpcool_remote_write(c->r, &c->tab->b[b].e[i], &c->buf.e[i], sizeof(kvp_entry));
    }
    int urc = rpcool_remote_unlock(&hold);
    return rc ? rc : urc ? urc : 1;
}

/* ---------------------------------------------------------------- the workload and its check */

static void kvp_key(char *out, char pod, int id, long k)
{
    snprintf(out, KVP_KEY_MAX, "%c%d:%ld", pod, id, k);
}

static const char *kvp_err(int rc) { return rc == -KVP_FULL ? "the bucket is full" : rpcool_strerror(rc); }

/* Keys "h:0".."h:7" are put and read by every client of both pods: the same entries are then
   written by the server's CPU and by pod B's RDMA WRITEs, each under the bucket's lock. */
#define KVP_HOT 8

typedef struct kvp_peer { char pod; int id; } kvp_peer;

/* Get key every way this client can (by call, then by pointer, or by locked and optimistic
   READ); each answer goes to
   check(key, value or NULL, ...). Returns 0 or the first error. */
typedef void kvp_check_fn(const char *key, const char *got, const char *how, const char *want,
                          kvp_counts *n);
static int kvp_get_all(kvp_client *c, const char *key, int calls, kvp_check_fn *check,
                       const char *want, kvp_counts *n)
{
    char got[KVP_VAL_MAX];
    int rc;
    if (calls && c->conn) {
        if ((rc = kvp_get_rpc(c, key, got)) < 0) return rc;
        n->gets_rpc++;
        check(key, rc ? got : NULL, "by call", want, n);
    }
    if (c->x) {
        if ((rc = kvp_get_ptr(c, key, got, &n->bad)) < 0) return rc;
        n->gets_ptr++;
        check(key, rc ? got : NULL, "by pointer", want, n);
        return 0;
    }
    for (int locked = 1; locked >= 0; locked--) { /* pod B: under the lock, and optimistically */
        if ((rc = kvp_get_read(c, key, got, &n->bad, locked)) < 0) return rc;
        n->gets_read++;
        check(key, rc ? got : NULL, locked ? "by locked READ" : "by optimistic READ", want, n);
    }
    return 0;
}

static void kvp_want_exact(const char *key, const char *got, const char *how, const char *want,
                           kvp_counts *n)
{
    if (got && !strcmp(got, want)) return;
    n->bad++;
    fprintf(stderr, "get %s %s: %s, want %s\n", key, how, got ? got : "(none)", want);
}

/* absent (want == NULL only), or a value some client put under key */
static void kvp_want_put(const char *key, const char *got, const char *how, const char *want,
                         kvp_counts *n)
{
    if (got && kvp_value_round(key, got)) { n->others++; return; }
    if (!got && !want) return;
    n->bad++;
    fprintf(stderr, "get %s %s: \"%s\", which no client put\n", key, how, got ? got : "(none)");
}

/* One client's run: round after round, put each of its keys and a hot key, read its key back
   every way it can (it is its keys' only writer: it must see its own value), and read a key of
   another client (`others`) and a hot key, which must be absent or a value a client put. Goes on
   after `rounds` until *stop (when given); *done = the rounds done. Pod B puts by call (even
   keys, when it has calls) and by WRITE. */
static int kvp_workload(kvp_client *c, char pod, int id, long keys, unsigned rounds,
                        const volatile uint32_t *stop, const kvp_peer *others, int nothers,
                        kvp_counts *n, unsigned *done)
{
    char key[KVP_KEY_MAX], val[KVP_VAL_MAX];
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1) + (uint64_t)pod;
    unsigned r;
    int rc = 0;
    for (r = 1; r <= rounds || (stop && !__atomic_load_n(stop, __ATOMIC_ACQUIRE)); r++)
        for (long k = 0; k < keys; k++) {
            int by_write = c->r && (!c->conn || (k & 1));
            for (int hot = 0; hot < 2; hot++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                if (hot) snprintf(key, sizeof key, "h:%u", (unsigned)((k + r + (unsigned)id) % KVP_HOT));
                else kvp_key(key, pod, id, k);
                kvp_value(key, hot ? (unsigned)(seed >> 44) % 100000 + 1 : r, val);
                rc = by_write ? kvp_put_write(c, key, val) : kvp_put_rpc(c, key, val);
                if (rc != 1) {
                    fprintf(stderr, "%c%d: put %s: %s\n", pod, id, key, kvp_err(rc));
                    goto out;
                }
                by_write ? n->puts_write++ : n->puts_rpc++;
                if (!hot && (rc = kvp_get_all(c, key, 1, kvp_want_exact, val, n))) goto err;
            }
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            snprintf(key, sizeof key, "h:%u", (unsigned)(seed >> 40) % KVP_HOT);
            if ((rc = kvp_get_all(c, key, 0, kvp_want_put, NULL, n))) goto err;
            if (!nothers) continue;
            const kvp_peer *o = &others[(seed >> 20) % (uint64_t)nothers];
            kvp_key(key, o->pod, o->id, (long)((seed >> 4) % (uint64_t)keys));
            if ((rc = kvp_get_all(c, key, 0, kvp_want_put, NULL, n))) goto err;
            if (r > rounds) usleep(200); /* only overlapping pod B: leave it CPU time */
        }
    rc = 0;
    goto out;
err:
    fprintf(stderr, "%c%d: get %s: %s\n", pod, id, key, kvp_err(rc));
out:
    if (done) *done = r - 1;
    return rc == 1 ? -1 : rc;
}

/* After every writer finished: each key of each client in `all` holds its last round's value
   (round[p] for all[p]), and every hot key a value some client put; read every way this client
   can. */
static int kvp_check(kvp_client *c, const kvp_peer *all, const unsigned *round, int nall,
                     long keys, kvp_counts *n)
{
    char key[KVP_KEY_MAX], val[KVP_VAL_MAX];
    int rc = 0;
    for (int p = 0; p < nall && !rc; p++)
        for (long k = 0; k < keys && !rc; k++) {
            kvp_key(key, all[p].pod, all[p].id, k);
            kvp_value(key, round[p], val);
            rc = kvp_get_all(c, key, 1, kvp_want_exact, val, n);
        }
    for (unsigned h = 0; h < KVP_HOT && !rc; h++) {
        snprintf(key, sizeof key, "h:%u", h);
        rc = kvp_get_all(c, key, 1, kvp_want_put, keys >= KVP_HOT ? "" : NULL, n);
    }
    if (rc) fprintf(stderr, "check: get %s: %s\n", key, kvp_err(rc));
    return rc;
}

static void kvp_counts_add(kvp_counts *to, const kvp_counts *n)
{
    to->puts_rpc += n->puts_rpc;
    to->puts_write += n->puts_write;
    to->gets_rpc += n->gets_rpc;
    to->gets_ptr += n->gets_ptr;
    to->gets_read += n->gets_read;
    to->others += n->others;
    to->bad += n->bad;
}


/* ---------------------------------------------------------------- bench */

static int kvp_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

#define KVP_BLOCK 50 /* gets timed together: a clock read costs as much as a local get */

/* Gets of random keys among `keys` put first, timed by blocks of KVP_BLOCK: from pod B by call
   (when there are calls), by locked and by optimistic READ; from pod A by call and by pointer
   under the lock. One machine line per way: "NAME MEDIAN_NS P90_NS GETS_PER_S", the median and
   90th percentile of the blocks' time per get, then a "#" line for people. */
static int kvp_bench(kvp_client *c, long keys, long gets)
{
    static const char *names[2][3] = {
        {"kvpods/local-get-rpc", "kvpods/local-get-ptr-locked", NULL},
        {"kvpods/remote-get-rpc", "kvpods/remote-get-read-locked", "kvpods/remote-get-read-opt"}};
    char key[KVP_KEY_MAX], val[KVP_VAL_MAX];
    long nb = gets / KVP_BLOCK;
    uint64_t bad = 0, seed = 42, *ns = (uint64_t *)malloc((size_t)nb * sizeof *ns);
    int rc = 0, remote = c->r != NULL;
    if (!ns) return -ENOMEM;
    for (long k = 0; k < keys && !rc; k++) {
        kvp_key(key, 'x', 0, k);
        kvp_value(key, 1, val);
        rc = c->conn ? kvp_put_rpc(c, key, val) : kvp_put_write(c, key, val);
        if (rc != 1) fprintf(stderr, "bench: put %s: %s\n", key, kvp_err(rc));
        rc = rc == 1 ? 0 : rc < 0 ? rc : -1;
    }
    int failed = rc;
    for (int way = 0; way < 3 && !rc && names[remote][way]; way++) {
        if (way == 0 && !c->conn) {
            printf("# %s: not measured: %s\n", names[remote][0], c->rpc_why);
            continue;
        }
        uint64_t t0 = rcp__now_ns();
        long b, i = 0;
        int wrc = 0;
        for (b = 0; b < nb && !wrc; b++) {
            uint64_t s = rcp__now_ns();
            for (i = 0; i < KVP_BLOCK && !wrc; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                kvp_key(key, 'x', 0, (long)((seed >> 20) % (uint64_t)keys));
                wrc = way == 0 ? kvp_get_rpc(c, key, val)
                      : remote ? kvp_get_read(c, key, val, &bad, way == 1)
                               : kvp_get_ptr(c, key, val, &bad);
                wrc = wrc == 1 && kvp_value_round(key, val) ? 0 : wrc < 0 ? wrc : -1;
            }
            ns[b] = (rcp__now_ns() - s) / KVP_BLOCK;
        }
        if (wrc) { /* say so, and measure the other ways */
            printf("# %s: failed in block %ld: %s\n", names[remote][way], b,
                   wrc == -1 ? "wrong answer" : kvp_err(wrc));
            failed = wrc;
            continue;
        }
        uint64_t wall = rcp__now_ns() - t0;
        qsort(ns, (size_t)nb, sizeof *ns, kvp_cmp_u64);
        uint64_t med = ns[(nb + 1) / 2 - 1], p90 = ns[(nb * 9 + 9) / 10 - 1];
        double ops = (double)nb * KVP_BLOCK * 1e9 / (double)wall;
        printf("%s %llu %llu %.0f\n", names[remote][way], (unsigned long long)med,
               (unsigned long long)p90, ops);
        printf("#   %s: median %.3f us per get (blocks of %d), p90 %.3f us, %.0f gets/s, %ld gets\n",
               names[remote][way], med / 1e3, KVP_BLOCK, p90 / 1e3, ops, nb * KVP_BLOCK);
    }
    free(ns);
    return failed ? failed : bad ? -1 : 0;
}

#ifndef KVP_NO_MAIN /* tests/vm/test_kv_pods.c has a main (and client processes) of its own */
/* ---------------------------------------------------------------- processes */

/* n client processes of one pod, forked before this process has a thread: each opens its
   client (waiting for the server), runs the workload (others: its siblings' keys) and checks
   every key of its pod; its counts go to cnt[i] (shared memory). Returns how many failed. */
static int kvp_run_pod(const char *host, const char *chan, int n, long keys, unsigned rounds,
                       kvp_server **sv, long server_keys, kvp_counts *sum)
{
    kvp_counts *cnt = (kvp_counts *)mmap(NULL, 16 * sizeof *cnt, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char pod = host ? 'b' : 'a';
    pid_t pid[16];
    int fails = 0;
    if (cnt == MAP_FAILED) return n;
    memset(cnt, 0, 16 * sizeof *cnt);
    fflush(stdout);
    for (int i = 0; i < n; i++)
        if ((pid[i] = fork()) == 0) {
            kvp_peer all[16], others[16];
            unsigned round[16];
            kvp_client *c = NULL;
            int no = 0, rc = host ? kvp_remote_open(host, chan, i > 0, &c) : kvp_local_open(chan, &c);
            for (int p = 0; p < n; p++) {
                all[p] = (kvp_peer){pod, p};
                round[p] = rounds;
                if (p != i) others[no++] = all[p];
            }
            if (!rc) rc = kvp_workload(c, pod, i, keys, rounds, NULL, others, no, &cnt[i], NULL);
            /* its own keys (only it writes them), every way, and the hot keys */
            if (!rc) {
                kvp_counts fin;
                memset(&fin, 0, sizeof fin);
                rc = kvp_check(c, &all[i], &round[i], 1, keys, &fin); /* its own keys */
                cnt[i].bad += fin.bad;
            }
            kvp_client_close(c);
            _exit(rc || cnt[i].bad ? 1 : 0);
        }
    if (sv && kvp_server_open(chan, server_keys, 0, sv) == 0) rpcool_server_start((*sv)->rpc, 1);
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        kvp_counts_add(sum, &cnt[i]);
    }
    munmap(cnt, 16 * sizeof *cnt);
    return fails;
}

static void kvp_counts_print(const char *who, const kvp_counts *n)
{
    printf("%s: puts %llu by call, %llu by WRITE; gets %llu by call, %llu by pointer, %llu by "
           "READ; %llu of other clients' and hot keys well formed; %llu wrong\n",
           who, (unsigned long long)n->puts_rpc, (unsigned long long)n->puts_write,
           (unsigned long long)n->gets_rpc, (unsigned long long)n->gets_ptr,
           (unsigned long long)n->gets_read, (unsigned long long)n->others,
           (unsigned long long)n->bad);
}

static const char *kvp_usage =
    "usage: kvp [KEYS [CLIENTS]] | serve [SECONDS] | local N KEYS ROUNDS |\n"
    "       remote HOST N KEYS ROUNDS | bench [HOST] [GETS]\n";

/* argv[i] as a whole number in [lo, hi], or def if absent; exits with the usage if bad */
static long arg_num(int argc, char **argv, int i, long def, long lo, long hi)
{
    if (argc <= i) return def;
    char *end;
    errno = 0;
    long v = strtol(argv[i], &end, 10);
    if (errno || end == argv[i] || *end || v < lo || v > hi) {
        fputs(kvp_usage, stderr);
        exit(2);
    }
    return v;
}

static volatile sig_atomic_t kvp_stop;
static void kvp_on_signal(int sig) { (void)sig; kvp_stop = 1; }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    kvp_counts sum;
    memset(&sum, 0, sizeof sum);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "serve")) {
        long secs = arg_num(argc, argv, 2, 0, 0, 1000000);
        kvp_server *sv = NULL;
        if (kvp_server_open("kv", 4096, 1, &sv)) return 1;
        signal(SIGINT, kvp_on_signal);
        signal(SIGTERM, kvp_on_signal);
        rpcool_server_start(sv->rpc, 1);
        printf("server: ready\n");
        if (!secs) rpcool_serve_until_signal(sv->rpc, 1); /* the files go with the close below */
        for (long t = 0; secs && !kvp_stop && t < secs * 10; t++) usleep(100 * 1000);
        rpcool_server_stats ss;
        rpcool_server_get_stats(sv->rpc, &ss);
        printf("server: %llu calls served\n", (unsigned long long)ss.calls);
        kvp_server_close(sv);
        return 0;
    }
    if (!strcmp(mode, "local") || !strcmp(mode, "remote")) {
        int remote = mode[0] == 'r', a = remote ? 3 : 2;
        if (remote && argc < 3) { fputs(kvp_usage, stderr); return 2; }
        int n = (int)arg_num(argc, argv, a, 2, 1, 16);
        long keys = arg_num(argc, argv, a + 1, 100, 1, 1000);
        unsigned rounds = (unsigned)arg_num(argc, argv, a + 2, 3, 1, 1000);
        int fails = kvp_run_pod(remote ? argv[2] : NULL, "kv", n, keys, rounds, NULL, 0, &sum);
        kvp_counts_print(remote ? "pod B clients" : "pod A clients", &sum);
        return fails || sum.bad;
    }
    if (!strcmp(mode, "bench")) {
        int remote = argc > 2 && strspn(argv[2], "0123456789") != strlen(argv[2]);
        long gets = arg_num(argc, argv, remote ? 3 : 2, 2000, 10 * KVP_BLOCK, 10000000);
        kvp_client *c = NULL;
        kvp_server *sv = NULL;
        char chan[64];
        int rc;
        if (remote) {
            rc = kvp_remote_open(argv[2], "kv", 0, &c);
        } else { /* pod A: a server of its own in this process, on a channel of its own */
            snprintf(chan, sizeof chan, "kvp-bench-%d", (int)getpid());
            if (kvp_server_open(chan, 1024, 0, &sv)) return 1;
            rpcool_server_start(sv->rpc, 1);
            rc = kvp_local_open(chan, &c);
        }
        if (!rc) {
            rc = kvp_bench(c, 256, gets);
            kvp_client_close(c);
        }
        kvp_server_close(sv);
        return rc != 0;
    }
    /* the demo: pod A on this host (a server and its local clients, one process each) */
    char chan[64];
    long keys = arg_num(argc, argv, 1, 2000, 1, 100000);
    int n = (int)arg_num(argc, argv, 2, 2, 1, 16);
    if (argc > 3) arg_num(argc, argv, 1, 0, 1, 0);
    snprintf(chan, sizeof chan, "kvp-%d", (int)getpid());
    printf("%d pod A client processes, %ld keys each, 3 rounds: put, get by call, get by pointer"
           " under the bucket's lock, and a key of another client\n", n, keys);
    kvp_server *sv = NULL;
    uint64_t t0 = rcp__now_ns();
    int fails = kvp_run_pod(NULL, chan, n, keys, 3, &sv, keys * n, &sum);
    printf("took %.1f ms\n", (rcp__now_ns() - t0) / 1e6);
    kvp_counts_print("pod A clients", &sum);
    if (!sv) return 1;
    rpcool_server_stats ss;
    rpcool_server_get_stats(sv->rpc, &ss);
    printf("server: %llu calls served\n", (unsigned long long)ss.calls);
    kvp_server_close(sv);
    return fails || sum.bad;
}
#endif
