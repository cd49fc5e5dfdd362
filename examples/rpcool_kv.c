/* rpcool_kv.c - a key-value store over rpcool: put and get by pointer.
 *
 *   cc -O2 -pthread -I. examples/rpcool_kv.c -o kv && ./kv [keys] [clients]
 *
 * The idea: the server keeps its hash table in a shared heap of its own (the "store"); clients
 * never map it. A client builds the request {key, value} in its connection heap and passes a
 * pointer; the server follows the pointers with checked accessors (a bad pointer is an error
 * reply, not a crash), copies the strings into the store, and for a get allocates the answer
 * in the client's heap. One server thread, so the table needs no lock. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

enum { KV_PUT = 1, KV_GET = 2 };
enum { KV_FOUND = 0, KV_NOTFOUND = 1, KV_STOREFULL = 2 }; /* statuses the handlers answer */

struct kv_req { const char *key, *val; }; /* lives in the client's heap */

static rpcool_arena store; /* heap-backed arena on the store heap */
static rpcool_map *table;

static int kv_put(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (len != sizeof(struct kv_req)) return RPCOOL_E_INVAL;
    const struct kv_req *rq = (const struct kv_req *)arg;
    const char *key = rpcool_ctx_need_str(ctx, rq->key), *val = rpcool_ctx_need_str(ctx, rq->val);
    char *copy = rpcool_arena_strdup(&store, val);
    uint64_t old = 0;
    if (!copy || rpcool_map_put(&store, table, key, (uint64_t)(uintptr_t)copy, &old)) {
        if (copy) shmheap_free(store.heap, copy);
        return KV_STOREFULL; /* the server's store, not the caller's heap: say so */
    }
    if (old) shmheap_free(store.heap, (void *)(uintptr_t)old); /* the value it replaced */
    return 0;
}

static int kv_get(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    uint64_t v;
    if (!len || !rpcool_map_get(table, rpcool_ctx_need_str(ctx, (const char *)arg), &v)) return KV_NOTFOUND;
    const char *val = (const char *)(uintptr_t)v;
    size_t n = strlen(val) + 1;
    char *out = (char *)rpcool_ctx_alloc(ctx, n); /* the answer goes into the caller's heap */
    if (!out) return SHMHEAP_E_FULL;
    memcpy(out, val, n);
    rpcool_ctx_reply(ctx, out, n);
    return 0;
}

static int client(const char *chan, int id, long keys)
{
    rpcool_conn *c;
    int r = rpcool_connect(chan, NULL, &c);
    if (r) { fprintf(stderr, "connect: %s\n", rpcool_strerror(r)); return 1; }
    struct kv_req *rq = (struct kv_req *)rpcool_alloc(c, sizeof *rq);
    char *key = (char *)rpcool_alloc(c, 32), *val = (char *)rpcool_alloc(c, 64);
    rq->key = key;
    rq->val = val;
    uint64_t t0 = rcp__now_ns();
    for (long i = 0; i < keys; i++) {
        snprintf(key, 32, "c%d:key%ld", id, i);
        snprintf(val, 64, "value of key %ld from client %d", i, id);
        if ((r = rpcool_call(c, KV_PUT, rq, sizeof *rq, NULL, NULL))) {
            fprintf(stderr, "client %d: put of key %ld: %s\n", id, i,
                    r == KV_STOREFULL ? "the server's store is full" : rpcool_strerror(r));
            rpcool_disconnect(c);
            return 1;
        }
    }
    uint64_t t1 = rcp__now_ns();
    long found = 0;
    for (long i = 0; i < keys; i++) {
        void *ret;
        size_t n;
        snprintf(key, 32, "c%d:key%ld", id, (i * 7919) % keys);
        if (rpcool_call(c, KV_GET, key, strlen(key) + 1, &ret, &n) == KV_FOUND) {
            found++;
            rpcool_free(c, ret);
        }
    }
    uint64_t t2 = rcp__now_ns();
    void *ret = NULL;
    size_t n;
    snprintf(key, 32, "c%d:key%ld", id, keys / 2);
    if (rpcool_call(c, KV_GET, key, strlen(key) + 1, &ret, &n) != KV_FOUND) ret = NULL;
    printf("client %d: put %ld keys in %.1f ms (%.0f ns/put), got %ld/%ld in %.1f ms (%.0f ns/get)\n",
           id, keys, (t1 - t0) / 1e6, (double)(t1 - t0) / keys, found, keys, (t2 - t1) / 1e6,
           (double)(t2 - t1) / keys);
    printf("client %d: get(\"%s\") -> \"%s\"\n", id, key, ret ? (char *)ret : "(not found)");
    rq->key = (const char *)0x10; /* a bad pointer: the server answers with an error */
    printf("client %d: put with a wild key pointer -> %s\n", id,
           rpcool_strerror(rpcool_call(c, KV_PUT, rq, sizeof *rq, NULL, NULL)));
    if (ret) rpcool_free(c, ret);
    rpcool_disconnect(c);
    return found == keys ? 0 : 1;
}

/* argv[i] as a whole number in [lo, hi], or def if absent; exits with a usage line if bad */
static long arg_num(int argc, char **argv, int i, long def, long lo, long hi, const char *usage)
{
    if (argc <= i) return def;
    char *end;
    errno = 0;
    long v = strtol(argv[i], &end, 10);
    if (errno || end == argv[i] || *end || v < lo || v > hi) {
        fprintf(stderr, "usage: %s %s\n", argv[0], usage);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *usage = "[keys per client: 1..1000000, default 100000] [clients: 1..16, default 2]";
    long keys = arg_num(argc, argv, 1, 100000, 1, 1000000, usage);
    int nclients = (int)arg_num(argc, argv, 2, 2, 1, 16, usage);
    if (argc > 3) arg_num(argc, argv, 1, 0, 1, 0, usage); /* too many arguments */
    char chan[64], heap[80];
    snprintf(chan, sizeof chan, "kv-%d", (int)getpid());
    snprintf(heap, sizeof heap, "kvstore-%d", (int)getpid());
    shmheap *h;
    shmheap_opts ho = {.size = (size_t)256 << 20};
    int r = shmheap_create(heap, &ho, &h);
    if (r) { fprintf(stderr, "store: %s\n", shmheap_strerror(r)); return 1; }
    rpcool_arena_init(&store, h, 0);
    table = rpcool_map_new(&store, 1024);
    rpcool_server *s;
    if ((r = rpcool_server_open(chan, NULL, &s))) { fprintf(stderr, "server: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_server_add_handler(s, KV_PUT, kv_put, NULL, 0);
    rpcool_server_add_handler(s, KV_GET, kv_get, NULL, 0);
    printf("kv server on channel \"%s\", store heap \"%s\" (%zu MiB), %d client processes\n", chan, heap,
           shmheap_size(h) >> 20, nclients);
    fflush(stdout);
    pid_t kids[16];
    if (nclients > 16) nclients = 16;
    for (int i = 0; i < nclients; i++)
        if ((kids[i] = fork()) == 0) {
            int rc = client(chan, i, keys);
            fflush(stdout);
            _exit(rc);
        }
    rpcool_server_start(s, 1);
    int fails = 0;
    for (int i = 0; i < nclients; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    rpcool_server_stats ss;
    rpcool_server_get_stats(s, &ss);
    printf("server: %llu calls served, %llu connections, %llu keys stored\n",
           (unsigned long long)ss.calls, (unsigned long long)ss.accepted, (unsigned long long)table->len);
    rpcool_server_close(s);
    shmheap_close(h);
    shmheap_unlink(heap, NULL);
    return fails ? 1 : 0;
}
