// LIBS: -libverbs
/* rpcool_kv_pods.c - one key-value server for two pods: its own pod calls it over shared memory
 * and reads its table by pointer; the other pod calls it over RDMA and reads the table with
 * one-sided RDMA READ. One lock table (alock.h) guards the buckets for both.
 *
 *   cc -O2 -pthread -I. examples/rpcool_kv_pods.c -o kvp -libverbs
 *   ./kvp [KEYS] [CLIENTS]        pod A alone on this host (no RDMA): the server and CLIENTS
 *                                 client processes (default 2000 keys each, 2); `make demo`
 *   ./kvp serve [SECONDS]         pod A's server on channel "kv" (default: until SIGINT/SIGTERM)
 *   ./kvp local N KEYS ROUNDS     N pod A client processes against that server
 *   SHMHEAP_POD_ID=1 ./kvp remote HOST N KEYS ROUNDS   N pod B client processes (needs RDMA)
 *   ./kvp bench [HOST] [GETS]     time gets: with HOST from pod B, alone there (pod B id 1; by
 *                                 RPC over RDMA and by one-sided READ), without it from pod A
 *                                 (a server of its own; RPC, by pointer)
 *
 * The idea. The server keeps a hash table of fixed-size buckets in a shared heap of its own (the
 * "store", named root "kv.table") and an alock.h lock table beside it ("kv.locks"): lock i
 * guards bucket i. Every word of the table is written only by a holder of its bucket's lock.
 * - Pod A (processes that can map the store): calls go over shared memory
 *   (rpcool_connect("kv")), and a client may also read a bucket by pointer under alock_lock:
 *   CPU atomics, no call, no NIC.
 * - Pod B (another host): calls go over RDMA (rpcool_connect("rdma://HOST/kv")), with the same
 *   requests and handlers (pointers stay valid across pods). A pod B client also reads a bucket
 *   with one RDMA READ under alock_remote_lock (RDMA atomics on the lock's remote half), and may
 *   put by READ + RDMA WRITE of one entry under the same lock. ALock's cohorts never apply a CPU
 *   and an RDMA read-modify-write to the same word, which Soft-RoCE would not make atomic.
 * - How pod B finds the table: the server registers the table and the lock lines with krconn.h
 *   and publishes its krconn context as "kv.table" at the meta server that rpcool runs for it
 *   (`.rdma = "serve"`: TCP 7471 of the server's host); that context's connect data (32 bytes)
 *   carries the addresses and keys. A pod B client asks the KVP_INFO call for the context's
 *   address, or looks "kv.table" up when it has no calls. Pod B clients publish themselves
 *   ("kv.b<ID>") so that each can link to the others' lock descriptors (ALock's remote queue).
 * Trust: the table's key lets pod B's clients write any entry (that is how they put without a
 * call); entries are checked (kvp_entry_ok) and copied with bounds, so a bad one is skipped,
 * never followed. A server that does not trust pod B registers the table for remote READ only
 * and takes puts by call.
 * Without rdma-core's headers everything RDMA says "not supported" (RPCOOL_E_NOTSUP and the
 * like): the server then serves its own pod, and pod B's clients say why they cannot run. */
#define RPCOOL_WITH_RDMA          /* calls between pods (krconn.h's implementation comes along) */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#define ALOCK_IMPLEMENTATION
#include "alock.h" /* after krconn.h: declares alock_krconn_link_create */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* ---------------------------------------------------------------- the table (shared layout) */

#define KVP_MAGIC 0x3153444f5056564bull /* "KVVPODS1" */
#define KVP_VERSION 1u
#define KVP_SLOTS 8     /* entries per bucket */
#define KVP_KEY_MAX 32  /* key bytes with the NUL */
#define KVP_VAL_MAX 80  /* value bytes with the NUL */
#define KVP_BUDGET 8    /* alock: hand-offs within a cohort before the other gets a turn */
#define KVP_TMO 20000   /* ms: one RDMA operation or connect (Soft-RoCE under emulation is slow) */
/* RC ACK timeout 4.096 us * 2^18 = 1.07 s, 7 tries: Soft-RoCE in emulated guests on a busy host
   answers late, and krconn's default (67 ms) would declare a live peer dead. */
static const krconn_ctx_opts kvp_kopts = {.timeout = 18};

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
    uint32_t version, nbuckets; /* nbuckets: a power of two; also the lock table's nlocks */
    uint32_t slots, entry_size;
    uint64_t pad[5];
    kvp_bucket b[];
} kvp_table;
_Static_assert(sizeof(kvp_entry) == 128, "entry layout");
_Static_assert(sizeof(kvp_table) == 64, "header layout");

/* What pod B needs for one-sided access: the krconn connect data of the server's context. */
typedef struct kvp_info {
    uint64_t table, lines;            /* kvp_table and alock_table_lines, in pod A */
    uint32_t table_rkey, lines_rkey;
    uint32_t nbuckets, budget;
} kvp_info;
_Static_assert(sizeof(kvp_info) <= KRCONN_DATA_MAX, "fits krconn's connect data");

/* KVP_INFO's reply: the above, and the server's krconn address (rdma = 0: it has none). */
typedef struct kvp_info_reply {
    kvp_info i;
    uint32_t rdma, pad;
    char addr[128];                   /* krconn_addr_format */
} kvp_info_reply;

enum { KVP_PUT = 1, KVP_GET = 2, KVP_INFO = 3 };                 /* handler ids */
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

/* A found entry's value into out (KVP_VAL_MAX bytes), bounded whatever the entry holds now:
   a pod B process that ignores the locks can change it after kvp_find looked. */
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
    alock_table *locks;
    rpcool_server *rpc;
    krconn_ctx *kc;           /* NULL: no RDMA device here, pod B cannot reach the table */
    krconn_dir *dir;
    krconn_mr tmr, lmr;
    kvp_info_reply info;
    char heap_name[80];
} kvp_server;

static kvp_server *kvp_srv; /* the handlers' server (one per process) */

/* Lock the bucket of key k for a handler: the bucket, or NULL with the lock's error in *rc. */
static kvp_bucket *kvp_lock_bucket(const char *k, alock_hold *hold, int *rc)
{
    kvp_table *t = kvp_srv->tab;
    uint32_t b = kvp_bucket_of(k, t->nbuckets);
    *rc = alock_lock(kvp_srv->locks, b, hold);
    return *rc < 0 ? NULL : &t->b[b];
}

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
    alock_hold hold;
    int rc, free_slot;
    kvp_bucket *bk = kvp_lock_bucket(k, &hold, &rc);
    if (!bk) return rc;
    int i = kvp_find(bk, k, &free_slot, NULL);
    if (i < 0) i = free_slot;
    if (i >= 0) kvp_fill(&bk->e[i], k, v);
    alock_unlock(&hold);
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
    alock_hold hold;
    int rc;
    kvp_bucket *bk = kvp_lock_bucket(k, &hold, &rc);
    if (!bk) return rc;
    int i = kvp_find(bk, k, NULL, NULL);
    if (i >= 0) kvp_copy_val(v, &bk->e[i]);
    alock_unlock(&hold);
    if (i < 0) return KVP_NOTFOUND;
    size_t n = strlen(v) + 1;
    char *out = (char *)rpcool_ctx_alloc(ctx, n); /* the answer goes into the caller's heap */
    if (!out) return SHMHEAP_E_FULL;
    memcpy(out, v, n);
    rpcool_ctx_reply(ctx, out, n);
    return KVP_OK;
}

static int kvp_info_fn(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    kvp_info_reply *out = (kvp_info_reply *)rpcool_ctx_alloc(ctx, sizeof *out);
    if (!out) return SHMHEAP_E_FULL;
    *out = kvp_srv->info;
    rpcool_ctx_reply(ctx, out, sizeof *out);
    return KVP_OK;
}

static uint32_t kvp_nbuckets_for(long keys) /* about half full at most: a bucket never fills */
{
    uint32_t n = 64;
    while (n < 2 * (uint64_t)keys && n < (1u << 20)) n <<= 1;
    return n;
}

/* The RDMA side: a krconn context, the table and lock lines registered, "kv.table" published.
   Returns 0 or a krconn code; *why says which step failed. */
static int kvp_server_rdma(kvp_server *sv, char *why, size_t whylen)
{
    char d[400];
    void *lines;
    size_t llen;
    krconn_addr me;
    int rc = krconn_ctx_create(&kvp_kopts, &sv->kc);
    if (rc) { snprintf(why, whylen, "krconn_ctx_create: %s", krconn_describe(rc, d, sizeof d)); return rc; }
    size_t tlen = sizeof(kvp_table) + (size_t)sv->tab->nbuckets * sizeof(kvp_bucket);
    alock_table_lines(sv->locks, &lines, &llen);
    if ((rc = krconn_reg(sv->kc, sv->tab, tlen, 0, &sv->tmr)) ||
        (rc = krconn_reg(sv->kc, lines, llen, 0, &sv->lmr))) {
        snprintf(why, whylen, "krconn_reg: %s", krconn_describe(rc, d, sizeof d));
        return rc;
    }
    kvp_info *i = &sv->info.i;
    i->table = (uint64_t)(uintptr_t)sv->tab;
    i->lines = (uint64_t)(uintptr_t)lines;
    i->table_rkey = sv->tmr.rkey;
    i->lines_rkey = sv->lmr.rkey;
    i->nbuckets = sv->tab->nbuckets;
    i->budget = KVP_BUDGET; /* what the table was made with: pod B's cohort must agree */
    krconn_ctx_set_data(sv->kc, i, sizeof *i);
    krconn_ctx_addr(sv->kc, &me);
    krconn_addr_format(&me, sv->info.addr, sizeof sv->info.addr);
    /* rpcool's RDMA transport runs krconn's meta server (TCP 7471) in this process: publish
       there, beside the channel's own entry "rpcool.<channel>" */
    if ((rc = krconn_dir_meta(sv->kc, "127.0.0.1", KVP_TMO, &sv->dir)) ||
        (rc = krconn_publish(sv->kc, sv->dir, "kv.table", KVP_TMO))) {
        snprintf(why, whylen, "publishing \"kv.table\": %s", krconn_describe(rc, d, sizeof d));
        return rc;
    }
    sv->info.rdma = 1;
    return 0;
}

static void kvp_server_close(kvp_server *sv)
{
    if (!sv) return;
    if (sv->rpc) rpcool_server_close(sv->rpc);
    if (sv->dir) krconn_dir_close(sv->dir);
    if (sv->lmr.mr) krconn_dereg(&sv->lmr);
    if (sv->tmr.mr) krconn_dereg(&sv->tmr);
    if (sv->kc) krconn_ctx_destroy(sv->kc);
    if (sv->locks) {
        alock_table_close(sv->locks);
        alock_table_unlink(sv->store, "kv.locks");
    }
    if (sv->store) {
        shmheap_close(sv->store);
        shmheap_unlink(sv->heap_name, NULL);
    }
    free(sv);
    kvp_srv = NULL;
}

/* The store, the table, the locks and the channel (not serving yet); with rdma, then the RDMA
   side if the host has a device: without one the server says so and serves its own pod only. */
static int kvp_server_open(const char *chan, long keys, int rdma, kvp_server **out)
{
    kvp_server *sv = (kvp_server *)calloc(1, sizeof *sv);
    char why[600];
    int rc;
    if (!sv) return -ENOMEM;
    kvp_srv = sv;
    uint32_t nb = kvp_nbuckets_for(keys);
    size_t tlen = sizeof(kvp_table) + (size_t)nb * sizeof(kvp_bucket);
    snprintf(sv->heap_name, sizeof sv->heap_name, "%s-store", chan);
    shmheap_opts ho = {.size = tlen + (size_t)nb * 64 + ((size_t)16 << 20)};
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
    sv->tab->version = KVP_VERSION;
    sv->tab->nbuckets = nb;
    sv->tab->slots = KVP_SLOTS;
    sv->tab->entry_size = sizeof(kvp_entry);
    alock_table_opts ao = {.nlocks = nb, .budget = KVP_BUDGET};
    if ((rc = alock_table_create(sv->store, "kv.locks", &ao, &sv->locks))) {
        fprintf(stderr, "lock table: %s\n", alock_strerror(rc));
        goto fail;
    }
    shmheap_root_set(sv->store, "kv.table", sv->tab);
    sv->info.i.table = (uint64_t)(uintptr_t)sv->tab; /* the rest once RDMA is up */
    sv->info.i.nbuckets = nb;
    /* with rdma: also serve pod B's calls over RDMA, and run krconn's meta server */
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
    rpcool_server_add_handler(sv->rpc, KVP_INFO, kvp_info_fn, NULL, 0);
    if (rdma && kvp_server_rdma(sv, why, sizeof why)) {
        printf("server: no RDMA (%s): pod B cannot reach this table\n", why);
        if (sv->dir) krconn_dir_close(sv->dir);
        if (sv->lmr.mr) krconn_dereg(&sv->lmr);
        if (sv->tmr.mr) krconn_dereg(&sv->tmr);
        if (sv->kc) krconn_ctx_destroy(sv->kc);
        sv->dir = NULL; sv->kc = NULL;
        memset(&sv->tmr, 0, sizeof sv->tmr);
        memset(&sv->lmr, 0, sizeof sv->lmr);
        sv->info.rdma = 0;
    } else if (rdma) {
        printf("server: calls over RDMA too; the table by RDMA on %s: krconn context %s,"
               " published as \"kv.table\" (meta server on TCP 7471)\n",
               krconn_ctx_device(sv->kc), sv->info.addr);
    }
    printf("server: channel \"%s\", table of %u buckets x %d entries in heap \"%s\"\n", chan, nb,
           KVP_SLOTS, sv->heap_name);
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
    /* pod A: the table by pointer */
    shmheap *store;
    kvp_table *tab;
    alock_table *locks;
    /* pod B: the table by RDMA */
    krconn_ctx *kc;
    krconn_dir *dir;
    krconn *home, *data;      /* to the server: alock's link, the table's READs and WRITEs */
    krconn_mr bmr, dmr;       /* our bucket buffer, our lock descriptors */
    kvp_bucket *buf;
    void *descs;
    alock_link hl, pl[16];    /* alock's links: to the server, to the other pod B clients */
    krconn *pk[16];
    int npl;
    alock_remote *r;
    kvp_info info;
    uint16_t id;
} kvp_client;

#define KVP_RDESC 8 /* a pod B client holds one lock at a time */

static void kvp_client_close(kvp_client *c)
{
    if (!c) return;
    if (c->conn) {
        if (c->rq) rpcool_free(c->conn, c->rq);
        rpcool_disconnect(c->conn);
    }
    if (c->locks) alock_table_close(c->locks);
    if (c->store) shmheap_close(c->store);
    if (c->r) alock_remote_destroy(c->r);
    for (int i = 0; i < c->npl; i++) {
        alock_krconn_link_destroy(&c->pl[i]);
        krconn_disconnect(c->pk[i]);
    }
    if (c->hl.conn) alock_krconn_link_destroy(&c->hl);
    if (c->bmr.mr) krconn_dereg(&c->bmr);
    if (c->dmr.mr) krconn_dereg(&c->dmr);
    if (c->data) krconn_disconnect(c->data);
    if (c->home) krconn_disconnect(c->home);
    if (c->dir) krconn_dir_close(c->dir);
    if (c->kc) krconn_ctx_destroy(c->kc);
    free(c->buf);
    free(c->descs);
    free(c);
}

static int kvp_client_rpc(kvp_client *c, const char *chan, int quiet)
{
    int rc = rpcool_connect(chan, NULL, &c->conn);
    if (rc) {
        snprintf(c->rpc_why, sizeof c->rpc_why, "rpcool_connect(\"%s\"): %s", chan,
                 rpcool_strerror(rc));
        if (!quiet) printf("client: %s\n", c->rpc_why);
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
    int rc;
    if (!c) return -ENOMEM;
    if ((rc = kvp_client_rpc(c, chan, 0))) goto fail;
    snprintf(heap, sizeof heap, "%s-store", chan);
    if ((rc = shmheap_open(heap, NULL, &c->store))) {
        fprintf(stderr, "client: store heap \"%s\": %s\n", heap, shmheap_strerror(rc));
        goto fail;
    }
    c->tab = (kvp_table *)shmheap_root_get(c->store, "kv.table");
    if (!c->tab || c->tab->magic != KVP_MAGIC || c->tab->version != KVP_VERSION) {
        rc = RPCOOL_E_INVAL;
        fprintf(stderr, "client: no kv table in heap \"%s\"\n", heap);
        goto fail;
    }
    if ((rc = alock_table_open(c->store, "kv.locks", NULL, &c->locks))) {
        fprintf(stderr, "client: lock table: %s\n", alock_strerror(rc));
        goto fail;
    }
    *out = c;
    return 0;
fail:
    kvp_client_close(c);
    return rc;
}

/* krconn_dir_meta and krconn_connect_name, again until `name` is there or timeout_ms passed. */
static int kvp_connect_name(kvp_client *c, const char *host, const char *name, int timeout_ms,
                            krconn **out)
{
    uint64_t end = rcp__now_ns() + (uint64_t)timeout_ms * 1000000u;
    krconn_connect_opts co = {.timeout_ms = KVP_TMO};
    int rc;
    for (;;) {
        if (!c->dir) rc = krconn_dir_meta(c->kc, host, KVP_TMO, &c->dir);
        if (c->dir) rc = krconn_connect_name(c->kc, c->dir, name, &co, out);
        if (!rc || rcp__now_ns() > end) return rc;
        usleep(100 * 1000);
    }
}

/* Pod B: calls over RDMA when rpcool has them, and the table by one-sided RDMA under ALock's
   remote cohort. id: 1..n, unique among pod B's clients. */
static int kvp_remote_open(const char *host, const char *chan, uint16_t id, kvp_client **out)
{
    kvp_client *c = (kvp_client *)calloc(1, sizeof *c);
    char url[160], d[400];
    const char *step = "";
    int rc;
    if (!c) return -ENOMEM;
    c->id = id;
    snprintf(url, sizeof url, "rdma://%s/%s", host, chan);
    /* the server may not be up yet: try for a minute, unless calls cannot work at all */
    for (uint64_t end = rcp__now_ns() + 60 * 1000000000ull;;) {
        rc = kvp_client_rpc(c, url, 1);
        if (!rc || rc == RPCOOL_E_NOTSUP || rc == RPCOOL_E_BADNAME || rcp__now_ns() > end) break;
        usleep(200 * 1000);
    }
    if (rc && id == 1) printf("client: %s: one-sided part only\n", c->rpc_why);
    step = "krconn_ctx_create";
    if ((rc = krconn_ctx_create(&kvp_kopts, &c->kc))) goto fail;
    /* the server's context: by KVP_INFO when calls work, else by name in krconn's directory */
    if (c->conn) {
        void *ret = NULL;
        size_t n = 0;
        krconn_addr a;
        krconn_connect_opts co = {.timeout_ms = KVP_TMO};
        step = "KVP_INFO";
        rc = rpcool_call(c->conn, KVP_INFO, NULL, 0, &ret, &n);
        if (rc || n != sizeof(kvp_info_reply) || !((kvp_info_reply *)ret)->rdma) {
            if (ret) rpcool_free(c->conn, ret);
            rc = rc < 0 ? rc : KRCONN_E_PROTO;
            goto fail;
        }
        step = "krconn_connect (KVP_INFO's address)";
        char text[sizeof ((kvp_info_reply *)ret)->addr];
        memcpy(text, ((kvp_info_reply *)ret)->addr, sizeof text);
        text[sizeof text - 1] = 0;
        rpcool_free(c->conn, ret);
        rc = krconn_addr_parse(text, &a);
        if (rc || (rc = krconn_connect(c->kc, &a, &co, &c->home))) goto fail;
    } else {
        step = "krconn_connect_name(\"kv.table\")";
        if ((rc = kvp_connect_name(c, host, "kv.table", 60000, &c->home))) goto fail;
    }
    memcpy(&c->info, krconn_peer_data(c->home), sizeof c->info);
    krconn_addr a;
    krconn_peer_addr(c->home, &a);
    krconn_connect_opts co = {.timeout_ms = KVP_TMO};
    step = "krconn_connect (data)";
    if ((rc = krconn_connect(c->kc, &a, &co, &c->data))) goto fail; /* virtual: no packet */
    step = "registering the buffers";
    if (posix_memalign((void **)&c->buf, 4096, 4096) ||
        posix_memalign(&c->descs, 4096, ALOCK_REMOTE_MEM(KVP_RDESC))) {
        rc = -ENOMEM;
        goto fail;
    }
    memset(c->descs, 0, ALOCK_REMOTE_MEM(KVP_RDESC));
    if ((rc = krconn_reg(c->kc, c->buf, 4096, 0, &c->bmr)) ||
        (rc = krconn_reg(c->kc, c->descs, ALOCK_REMOTE_MEM(KVP_RDESC), 0, &c->dmr)))
        goto fail;
    /* the table's header, checked against what the connect data said */
    step = "RDMA READ of the table header";
    krconn_wc wc;
    if ((rc = krconn_read(c->data, 1, &c->bmr, c->buf, sizeof(kvp_table), c->info.table,
                          c->info.table_rkey, 0)) ||
        (rc = krconn_wait(c->data, &wc, KVP_TMO)))
        goto fail;
    const kvp_table *th = (const kvp_table *)c->buf;
    if (th->magic != KVP_MAGIC || th->version != KVP_VERSION || th->nbuckets != c->info.nbuckets ||
        th->slots != KVP_SLOTS || th->entry_size != sizeof(kvp_entry) || !th->nbuckets ||
        (th->nbuckets & (th->nbuckets - 1))) {
        rc = KRCONN_E_PROTO;
        goto fail;
    }
    step = "alock_krconn_link_create";
    if ((rc = alock_krconn_link_create(c->kc, c->home, c->info.lines_rkey, KVP_TMO, &c->hl)))
        goto fail;
    alock_remote_opts ro = {.id = id, .lines_addr = c->info.lines, .nlocks = c->info.nbuckets,
                            .budget = c->info.budget, .home = c->hl, .descs = c->descs,
                            .ndesc = KVP_RDESC};
    step = "alock_remote_create";
    if ((rc = alock_remote_create(&ro, &c->r))) goto fail;
    /* the other pod B clients reach our descriptors through our connect data */
    uint64_t me[2] = {(uint64_t)(uintptr_t)c->descs, c->dmr.rkey};
    char name[32];
    snprintf(name, sizeof name, "kv.b%u", (unsigned)id);
    krconn_ctx_set_data(c->kc, me, sizeof me);
    step = "krconn_publish";
    if ((!c->dir && (rc = krconn_dir_meta(c->kc, host, KVP_TMO, &c->dir))) ||
        (rc = krconn_publish(c->kc, c->dir, name, KVP_TMO)))
        goto fail;
    *out = c;
    return 0;
fail:
    fprintf(stderr, "pod B client %u: %s: %s\n", (unsigned)id, step,
            rc >= -3000 && rc <= -2900 ? alock_strerror(rc) : krconn_describe(rc, d, sizeof d));
    kvp_client_close(c);
    return rc;
}

/* Link to pod B client `peer`'s lock descriptors (every pod B client links to every other). */
static int kvp_remote_link(kvp_client *c, uint16_t peer)
{
    char name[32], d[400];
    krconn *k;
    uint64_t pd[2];
    int rc;
    if (c->npl >= 16) return ALOCK_E_INVAL;
    snprintf(name, sizeof name, "kv.b%u", (unsigned)peer);
    if ((rc = kvp_connect_name(c, NULL, name, 60000, &k))) {
        fprintf(stderr, "pod B client %u: connect to %s: %s\n", c->id, name, krconn_describe(rc, d, sizeof d));
        return rc;
    }
    memcpy(pd, krconn_peer_data(k), sizeof pd);
    if ((rc = alock_krconn_link_create(c->kc, k, (uint32_t)pd[1], KVP_TMO, &c->pl[c->npl]))) {
        krconn_disconnect(k);
        return rc;
    }
    c->pk[c->npl++] = k; /* kvp_client_close lets go of both */
    return alock_remote_set_peer(c->r, peer, &c->pl[c->npl - 1]);
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
    uint32_t b = kvp_bucket_of(key, c->tab->nbuckets);
    alock_hold hold;
    int badn = 0, rc = alock_lock(c->locks, b, &hold);
    if (rc < 0) return rc;
    int i = kvp_find(&c->tab->b[b], key, NULL, &badn);
    if (i >= 0) kvp_copy_val(val, &c->tab->b[b].e[i]);
    alock_unlock(&hold);
    *bad += (uint64_t)badn;
    return i >= 0;
}

static int kvp_rdma(kvp_client *c, int write, void *buf, uint32_t len, uint64_t raddr)
{
    krconn_wc wc;
    int rc = write ? krconn_write(c->data, 2, &c->bmr, buf, len, raddr, c->info.table_rkey, 0)
                   : krconn_read(c->data, 3, &c->bmr, buf, len, raddr, c->info.table_rkey, 0);
    return rc ? rc : krconn_wait(c->data, &wc, KVP_TMO);
}

static uint64_t kvp_bucket_addr(const kvp_client *c, uint32_t b)
{
    return c->info.table + sizeof(kvp_table) + (uint64_t)b * sizeof(kvp_bucket);
}

/* Pod B: the bucket by one RDMA READ, under the bucket's lock (RDMA atomics); locked = 0 reads
   without the lock (the bench's reference only: a concurrent put may tear what it reads). */
static int kvp_get_read(kvp_client *c, const char *key, char *val, uint64_t *bad, int locked)
{
    uint32_t b = kvp_bucket_of(key, c->info.nbuckets);
    alock_rhold hold;
    int badn = 0, rc;
    if (locked && (rc = alock_remote_lock(c->r, b, &hold))) return rc;
    rc = kvp_rdma(c, 0, c->buf, sizeof(kvp_bucket), kvp_bucket_addr(c, b));
    if (locked) {
        int urc = alock_remote_unlock(&hold);
        if (!rc) rc = urc;
    }
    if (rc) return rc;
    int i = kvp_find(c->buf, key, NULL, &badn);
    if (i >= 0) kvp_copy_val(val, &c->buf->e[i]);
    if (bad) *bad += (uint64_t)badn;
    return i >= 0;
}

/* Pod B: a put without a call: READ the bucket, WRITE one entry, both under the lock. */
static int kvp_put_write(kvp_client *c, const char *key, const char *val)
{
    uint32_t b = kvp_bucket_of(key, c->info.nbuckets);
    alock_rhold hold;
    int rc = alock_remote_lock(c->r, b, &hold);
    if (rc) return rc;
    rc = kvp_rdma(c, 0, c->buf, sizeof(kvp_bucket), kvp_bucket_addr(c, b));
    int free_slot, i = rc ? -1 : kvp_find(c->buf, key, &free_slot, NULL);
    if (!rc && i < 0) i = free_slot;
    if (!rc && i < 0) rc = -KVP_FULL;
    if (!rc) {
        kvp_fill(&c->buf->e[i], key, val);
        rc = kvp_rdma(c, 1, &c->buf->e[i], sizeof(kvp_entry),
                      kvp_bucket_addr(c, b) + (uint64_t)i * sizeof(kvp_entry));
    }
    int urc = alock_remote_unlock(&hold);
    return rc ? rc : urc ? urc : 1;
}

/* ---------------------------------------------------------------- the workload and its check */

static void kvp_key(char *out, char pod, int id, long k) { snprintf(out, KVP_KEY_MAX, "%c%d:%ld", pod, id, k); }

static const char *kvp_err(int rc)
{
    return rc >= -4000 && rc <= -3900 ? krconn_strerror(rc)
           : rc >= -3000 && rc <= -2900 ? alock_strerror(rc)
           : rc == -KVP_FULL ? "the bucket is full" : rpcool_strerror(rc);
}

/* Keys "h:0".."h:7" are put (one per key put) and read by every client of both pods: the same entries are then
   written by the server's CPU and by pod B's RDMA WRITEs, each under the bucket's lock. */
#define KVP_HOT 8

typedef struct kvp_peer { char pod; int id; } kvp_peer;

/* Shared by one pod's client processes and their parent (MAP_SHARED, made before the fork). */
typedef struct kvp_shared {
    uint32_t stop;            /* set: pod A's clients end after the round they are in */
    uint32_t rounds_a[16];    /* the rounds each pod A client did: its keys' last values */
} kvp_shared;

/* Get key every way this client can (one call, one by pointer or READ); each answer goes to
   check(key, value or NULL, ...). Returns 0 or the first error. */
static int kvp_get_all(kvp_client *c, const char *key, int calls,
                       void (*check)(const char *key, const char *got, const char *how,
                                     const void *want, kvp_counts *n),
                       const void *want, kvp_counts *n)
{
    char got[KVP_VAL_MAX];
    int rc;
    if (calls && c->conn) {
        if ((rc = kvp_get_rpc(c, key, got)) < 0) return rc;
        n->gets_rpc++;
        check(key, rc ? got : NULL, "by call", want, n);
    }
    rc = c->tab ? kvp_get_ptr(c, key, got, &n->bad) : kvp_get_read(c, key, got, &n->bad, 1);
    if (rc < 0) return rc;
    c->tab ? n->gets_ptr++ : n->gets_read++;
    check(key, rc ? got : NULL, c->tab ? "by pointer" : "by READ", want, n);
    return 0;
}

static void kvp_want_exact(const char *key, const char *got, const char *how, const void *want,
                           kvp_counts *n)
{
    if (got && !strcmp(got, (const char *)want)) return;
    n->bad++;
    fprintf(stderr, "get %s %s: %s, want %s\n", key, how, got ? got : "(none)", (const char *)want);
}

/* absent (want == NULL only), or a value some client put under key */
static void kvp_want_put(const char *key, const char *got, const char *how, const void *want,
                         kvp_counts *n)
{
    if (got && kvp_value_round(key, got)) { n->others++; return; }
    if (!got && !want) return;
    n->bad++;
    fprintf(stderr, "get %s %s: \"%s\", which no client put\n", key, how, got ? got : "(none)");
}

static const char kvp_nonempty[] = "";

/* One client's run: round after round, put each of its keys and a hot key, read its key back
   every way it can (it is its keys' only writer: it must see its own value), and read a key of
   another client (`others`) and a hot key, which must be absent or a value a client put. Pod A
   clients go on after `rounds` until *stop (when given); *done = the rounds done. */
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
            /* pod B puts by call when there are calls (even keys) and by WRITE otherwise */
            int by_write = pod == 'b' && (!c->conn || (k & 1));
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
   (pod A client i: sh->rounds_a[i] when known, else `rounds`), and every hot key a value some
   client put; read every way this client can. */
static int kvp_check(kvp_client *c, const kvp_peer *all, int nall, long keys, unsigned rounds,
                     const kvp_shared *sh, kvp_counts *n)
{
    char key[KVP_KEY_MAX], val[KVP_VAL_MAX];
    int rc;
    for (int p = 0; p < nall; p++) {
        unsigned r = all[p].pod == 'a' && sh && sh->rounds_a[all[p].id] ? sh->rounds_a[all[p].id] : rounds;
        for (long k = 0; k < keys; k++) {
            kvp_key(key, all[p].pod, all[p].id, k);
            kvp_value(key, r, val);
            if ((rc = kvp_get_all(c, key, 1, kvp_want_exact, val, n))) goto err;
        }
    }
    for (unsigned h = 0; h < KVP_HOT; h++) {
        snprintf(key, sizeof key, "h:%u", h);
        if ((rc = kvp_get_all(c, key, 1, kvp_want_put, keys >= KVP_HOT ? kvp_nonempty : NULL, n)))
            goto err;
    }
    return 0;
err:
    fprintf(stderr, "check: get %s: %s\n", key, kvp_err(rc));
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

/* n samples (ns) of one way, as bench/hist.h prints them: "NAME MEDIAN_NS P99_NS OPS_PER_S",
   then a "#" line for people; percentiles are nearest-rank order statistics. */
static void kvp_print_lat(const char *name, uint64_t *ns, size_t n, uint64_t wall_ns)
{
    qsort(ns, n, sizeof *ns, kvp_cmp_u64);
    size_t r50 = (n + 1) / 2, r99 = (n * 99 + 99) / 100;
    double ops = wall_ns ? (double)n * 1e9 / (double)wall_ns : 0;
    printf("%s %llu %llu %.0f\n", name, (unsigned long long)ns[r50 - 1],
           (unsigned long long)ns[r99 - 1], ops);
    printf("#   %s: median %.3f us  p99 %.3f us  min %.3f us  max %.3f us  %.0f ops/s  n=%zu\n",
           name, ns[r50 - 1] / 1e3, ns[r99 - 1] / 1e3, ns[0] / 1e3, ns[n - 1] / 1e3, ops, n);
}

/* Gets of `gets` random keys among `keys` put first: from pod B (c->kc) by call (when there are
   calls) and by one-sided READ, locked and (the lock's cost) unlocked; from pod A by call and by
   pointer. One machine line per way (kvp_print_lat). */
static int kvp_bench(kvp_client *c, long keys, long gets)
{
    char key[KVP_KEY_MAX], val[KVP_VAL_MAX];
    uint64_t bad = 0, seed = 42;
    uint64_t *ns = (uint64_t *)malloc((size_t)gets * sizeof *ns);
    int rc = 0;
    if (!ns) return -ENOMEM;
    for (long k = 0; k < keys && !rc; k++) {
        kvp_key(key, 'x', 0, k);
        kvp_value(key, 1, val);
        rc = c->conn ? kvp_put_rpc(c, key, val) : kvp_put_write(c, key, val);
        if (rc != 1) fprintf(stderr, "bench: put %s: %s\n", key, kvp_err(rc));
        rc = rc == 1 ? 0 : rc < 0 ? rc : -1;
    }
    const char *names[3] = {c->kc ? "kvpods/remote-get-rpc" : "kvpods/local-get-rpc",
                            c->kc ? "kvpods/remote-get-read-locked" : "kvpods/local-get-ptr-locked",
                            "kvpods/remote-get-read-unlocked"};
    int failed = rc;
    for (int way = 0; way < 3 && !rc; way++) {
        if (way == 0 && !c->conn) {
            printf("# %s: not measured: %s\n", names[0], c->rpc_why);
            continue;
        }
        if (way == 2 && !c->kc) continue;
        uint64_t t0 = rcp__now_ns();
        long i;
        int wrc = 0;
        for (i = 0; i < gets && !wrc; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            kvp_key(key, 'x', 0, (long)((seed >> 20) % (uint64_t)keys));
            uint64_t s = rcp__now_ns();
            wrc = way == 0 ? kvp_get_rpc(c, key, val)
                  : c->kc  ? kvp_get_read(c, key, val, &bad, way == 1)
                           : kvp_get_ptr(c, key, val, &bad);
            ns[i] = rcp__now_ns() - s;
            wrc = wrc == 1 && kvp_value_round(key, val) ? 0 : wrc < 0 ? wrc : -1;
        }
        if (wrc) { /* say so, and measure the other ways */
            printf("# %s: failed at get %ld of %ld: %s\n", names[way], i, gets,
                   wrc == -1 ? "wrong answer" : kvp_err(wrc));
            failed = wrc;
        } else {
            kvp_print_lat(names[way], ns, (size_t)gets, rcp__now_ns() - t0);
        }
    }
    free(ns);
    return failed ? failed : bad ? -1 : 0;
}

/* ---------------------------------------------------------------- processes */

/* Client processes, forked before this process has any thread or krconn context. Each one
   waits for "go", runs its job, and meets its siblings at barriers: the parent reads a byte
   from every child, runs its hook (the VM test syncs with the other pod there), then answers
   every child. At the end each child writes its counts (the run's, the final check's). */
typedef struct kvp_job kvp_job;
typedef int kvp_client_fn(int i, const kvp_job *j, kvp_counts n[2]);
typedef struct kvp_kids { int n; pid_t pid[16]; int go[16], back[16]; } kvp_kids;
static int kvp_kid_go = -1, kvp_kid_back = -1; /* in a child: its two pipes */

struct kvp_job {
    const char *chan, *host;  /* host: pod B's clients reach the server there */
    int nclients;             /* of this pod */
    long keys;                /* per client */
    unsigned rounds;
    kvp_peer all[32];         /* every client of both pods: what the final check reads */
    int nall;
    kvp_shared *sh;           /* NULL: pod A clients do `rounds` rounds and stop */
};

static int kvp_kid_sync(void) /* in a child: at a barrier */
{
    char x = 's';
    if (write(kvp_kid_back, &x, 1) != 1 || read(kvp_kid_go, &x, 1) != 1) return -EPIPE;
    return x == 'g' ? 0 : -ECANCELED;
}

static int kvp_fork(kvp_kids *k, int n, kvp_client_fn *fn, const kvp_job *j)
{
    k->n = 0;
    for (int i = 0; i < n && i < 16; i++) {
        int a[2], b[2];
        if (pipe(a)) return -errno;
        if (pipe(b)) { close(a[0]); close(a[1]); return -errno; }
        fflush(stdout);
        pid_t p = fork();
        if (p < 0) return -errno;
        if (p == 0) {
            char x;
            kvp_counts cnt[2];
            memset(cnt, 0, sizeof cnt);
            for (int q = 0; q < k->n; q++) { close(k->go[q]); close(k->back[q]); }
            close(a[1]);
            close(b[0]);
            kvp_kid_go = a[0];
            kvp_kid_back = b[1];
            if (read(a[0], &x, 1) != 1 || x != 'g') _exit(3);
            int rc = fn(i, j, cnt);
            if (write(b[1], cnt, sizeof cnt) != (ssize_t)sizeof cnt) _exit(3);
            fflush(stdout);
            _exit(rc ? 1 : 0);
        }
        close(a[0]);
        close(b[1]);
        k->pid[i] = p;
        k->go[i] = a[1];
        k->back[i] = b[0];
        k->n++;
    }
    return 0;
}

/* Answer every child: 'g' goes on, anything else makes them stop. */
static void kvp_release(kvp_kids *k, char x)
{
    for (int i = 0; i < k->n; i++)
        if (write(k->go[i], &x, 1) != 1) { /* that child is gone; reaping says so */ }
}

/* Wait until every child reached the barrier; 0, or -1 if one failed on the way. */
static int kvp_barrier(kvp_kids *k)
{
    int fails = 0;
    for (int i = 0; i < k->n; i++) {
        char x = 0;
        if (read(k->back[i], &x, 1) != 1 || x != 's') fails++; /* gone, or wrote its counts */
    }
    return fails ? -1 : 0;
}

static int kvp_reap(kvp_kids *k, kvp_counts sum[2])
{
    int fails = 0;
    for (int i = 0; i < k->n; i++) {
        kvp_counts cnt[2];
        int st;
        if (read(k->back[i], cnt, sizeof cnt) == (ssize_t)sizeof cnt) {
            kvp_counts_add(&sum[0], &cnt[0]);
            kvp_counts_add(&sum[1], &cnt[1]);
        } else {
            fails++;
        }
        close(k->go[i]);
        close(k->back[i]);
        waitpid(k->pid[i], &st, 0);
        fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return fails;
}

/* A pod A client: calls over shared memory, reads by pointer. */
static int kvp_local_kid(int i, const kvp_job *j, kvp_counts n[2])
{
    kvp_peer others[32];
    kvp_client *c;
    int no = 0, rc = kvp_local_open(j->chan, &c);
    if (rc) return rc;
    for (int p = 0; p < j->nall; p++)
        if (j->all[p].pod != 'a' || j->all[p].id != i) others[no++] = j->all[p];
    /* the call and the pointer agree on where the table is (pointers are the same in the pod) */
    void *ret = NULL;
    size_t len = 0;
    rc = rpcool_call(c->conn, KVP_INFO, NULL, 0, &ret, &len);
    if (rc != KVP_OK || len != sizeof(kvp_info_reply) ||
        ((kvp_info_reply *)ret)->i.table != (uintptr_t)c->tab) {
        fprintf(stderr, "a%d: KVP_INFO disagrees with the table found by pointer\n", i);
        n[0].bad++;
    }
    if (ret) rpcool_free(c->conn, ret);
    if ((rc = kvp_kid_sync())) goto out;
    unsigned done = 0;
    rc = kvp_workload(c, 'a', i, j->keys, j->rounds, j->sh ? &j->sh->stop : NULL, others, no,
                      &n[0], &done);
    if (j->sh) __atomic_store_n(&j->sh->rounds_a[i], done, __ATOMIC_RELEASE);
    if (rc || (rc = kvp_kid_sync())) goto out;
    rc = kvp_check(c, j->all, j->nall, j->keys, j->rounds, j->sh, &n[1]);
out:
    kvp_client_close(c);
    return rc ? rc : n[0].bad || n[1].bad ? -1 : 0;
}

/* A pod B client (ids 1..nclients): calls over RDMA if rpcool has them, one-sided otherwise. */
static int kvp_remote_kid(int i, const kvp_job *j, kvp_counts n[2])
{
    kvp_peer others[32];
    kvp_client *c = NULL;
    uint16_t id = (uint16_t)(i + 1);
    int no = 0, rc = kvp_remote_open(j->host, j->chan, id, &c);
    if (rc) return rc;
    for (int p = 1; p <= j->nclients; p++)
        if (p != id && (rc = kvp_remote_link(c, (uint16_t)p))) goto out;
    for (int p = 0; p < j->nall; p++)
        if (j->all[p].pod != 'b' || j->all[p].id != id) others[no++] = j->all[p];
    /* every pod B client stays until all have linked: they connect to one another by name */
    if ((rc = kvp_kid_sync())) goto out;
    if ((rc = kvp_workload(c, 'b', id, j->keys, j->rounds, NULL, others, no, &n[0], NULL)))
        goto out;
    if ((rc = kvp_kid_sync())) goto out;
    rc = kvp_check(c, j->all, j->nall, j->keys, j->rounds, j->sh, &n[1]);
out:
    kvp_client_close(c);
    return rc ? rc : n[0].bad || n[1].bad ? -1 : 0;
}

/* One pod's clients: go, the two barriers with hook(phase) at "ready" (all there), "running"
   (released; pod A's hook sets sh->stop when pod B is done) and "done" (all done writing), reap.
   Every hook runs, in order, even after a failure (the other pod's hooks wait for them). The
   server, if any, must be serving before `go`. Returns how many clients failed. */
static int kvp_run_clients(kvp_kids *k, int (*hook)(const char *phase, void *user), void *user,
                           kvp_counts sum[2])
{
    int fails = 0;
    kvp_release(k, 'g');
    if (kvp_barrier(k)) fails++;                               /* ready (pod B: linked) */
    if (hook && hook("ready", user)) fails++;
    kvp_release(k, fails ? 'x' : 'g');
    if (hook && hook("running", user)) fails++;
    if (kvp_barrier(k)) fails++;                               /* done writing */
    if (hook && hook("done", user)) fails++;
    kvp_release(k, fails ? 'x' : 'g');
    return kvp_reap(k, sum) + fails;
}

#ifndef KVP_NO_MAIN /* tests/vm/test_kv_pods.c has a main of its own */
static void kvp_counts_print(const char *who, const kvp_counts *n)
{
    printf("%s: puts %llu by call, %llu by WRITE; gets %llu by call, %llu by pointer, %llu by "
           "READ; %llu of other clients' and hot keys well formed; %llu wrong\n",
           who, (unsigned long long)n->puts_rpc, (unsigned long long)n->puts_write,
           (unsigned long long)n->gets_rpc, (unsigned long long)n->gets_ptr,
           (unsigned long long)n->gets_read, (unsigned long long)n->others,
           (unsigned long long)n->bad);
}

static void kvp_check_print(const char *who, const kvp_counts *n)
{
    printf("%s, final check: gets %llu by call, %llu by pointer, %llu by READ; %llu wrong\n", who,
           (unsigned long long)n->gets_rpc, (unsigned long long)n->gets_ptr,
           (unsigned long long)n->gets_read, (unsigned long long)n->bad);
}

/* argv[i] as a whole number in [lo, hi], or def if absent; exits with the usage if bad */
static const char *kvp_usage =
    "usage: kvp [KEYS [CLIENTS]] | serve [SECONDS] | local N KEYS ROUNDS |\n"
    "       remote HOST N KEYS ROUNDS | bench [HOST] [GETS]\n";
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

static void kvp_job_all(kvp_job *j, int na, int nb)
{
    j->nall = 0;
    for (int i = 0; i < na; i++) j->all[j->nall++] = (kvp_peer){'a', i};
    for (int i = 1; i <= nb; i++) j->all[j->nall++] = (kvp_peer){'b', i};
}

static void kvp_print_run(const char *who, const kvp_counts sum[2])
{
    kvp_counts_print(who, &sum[0]);
    kvp_check_print(who, &sum[1]);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    kvp_job j;
    kvp_kids k;
    kvp_counts sum[2];
    memset(&j, 0, sizeof j);
    memset(sum, 0, sizeof sum);
    j.chan = "kv";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "serve")) {
        long secs = arg_num(argc, argv, 2, 0, 0, 1000000);
        kvp_server *sv;
        if (kvp_server_open(j.chan, 4096, 1, &sv)) return 1;
        signal(SIGINT, kvp_on_signal);
        signal(SIGTERM, kvp_on_signal);
        rpcool_server_start(sv->rpc, 1);
        printf("server: ready\n");
        for (long t = 0; !kvp_stop && (!secs || t < secs * 10); t++) usleep(100 * 1000);
        rpcool_server_stats ss;
        rpcool_server_get_stats(sv->rpc, &ss);
        printf("server: %llu calls served\n", (unsigned long long)ss.calls);
        kvp_server_close(sv);
        return 0;
    }
    if (!strcmp(mode, "local") || !strcmp(mode, "remote")) {
        /* one pod's clients against a running server; the final check reads this pod's keys */
        int remote = mode[0] == 'r', a = remote ? 3 : 2;
        if (remote && argc < 3) { fputs(kvp_usage, stderr); return 2; }
        j.host = remote ? argv[2] : NULL;
        j.nclients = (int)arg_num(argc, argv, a, 2, 1, 16);
        j.keys = arg_num(argc, argv, a + 1, 100, 1, 1000);
        j.rounds = (unsigned)arg_num(argc, argv, a + 2, 3, 1, 1000);
        if (remote) kvp_job_all(&j, 0, j.nclients);
        else kvp_job_all(&j, j.nclients, 0);
        if (kvp_fork(&k, j.nclients, remote ? kvp_remote_kid : kvp_local_kid, &j)) return 1;
        int fails = kvp_run_clients(&k, NULL, NULL, sum);
        kvp_print_run(remote ? "pod B clients" : "pod A clients", sum);
        return fails || sum[0].bad || sum[1].bad;
    }
    if (!strcmp(mode, "bench")) {
        int remote = argc > 2 && strspn(argv[2], "0123456789") != strlen(argv[2]);
        long gets = arg_num(argc, argv, remote ? 3 : 2, 2000, 10, 10000000);
        kvp_client *c;
        kvp_server *sv = NULL;
        char chan[64];
        int rc;
        if (remote) {
            rc = kvp_remote_open(argv[2], j.chan, 1, &c);
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
    j.keys = arg_num(argc, argv, 1, 2000, 1, 100000);
    j.nclients = (int)arg_num(argc, argv, 2, 2, 1, 16);
    if (argc > 3) arg_num(argc, argv, 1, 0, 1, 0);
    snprintf(chan, sizeof chan, "kvp-%d", (int)getpid());
    j.chan = chan;
    j.rounds = 3;
    kvp_job_all(&j, j.nclients, 0);
    if (kvp_fork(&k, j.nclients, kvp_local_kid, &j)) return 1; /* before any thread exists */
    kvp_server *sv;
    if (kvp_server_open(chan, j.keys * j.nclients, 0, &sv)) {
        kvp_release(&k, 'x');
        kvp_reap(&k, sum);
        return 1;
    }
    rpcool_server_start(sv->rpc, 1);
    printf("%d pod A client processes, %ld keys each, %u rounds: put, get by call, get by pointer"
           " under the bucket's lock, and a key of another client\n", j.nclients, j.keys, j.rounds);
    uint64_t t0 = rcp__now_ns();
    int fails = kvp_run_clients(&k, NULL, NULL, sum);
    printf("took %.1f ms\n", (rcp__now_ns() - t0) / 1e6);
    kvp_print_run("pod A clients", sum);
    rpcool_server_stats ss;
    rpcool_server_get_stats(sv->rpc, &ss);
    printf("server: %llu calls served\n", (unsigned long long)ss.calls);
    kvp_server_close(sv);
    return fails || sum[0].bad || sum[1].bad;
}
#endif
