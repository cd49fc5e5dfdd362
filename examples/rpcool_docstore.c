/* rpcool_docstore.c - a document store (like RPCool's CoolDB) with pointer-rich JSON-like
 * documents, built by the client in shared memory and read by a sandboxed server.
 *
 *   cc -O2 -pthread -I. examples/rpcool_docstore.c -o docstore && ./docstore [docs]
 *
 * The idea: a document is a tree of values (objects are rpcool_map, arrays rpcool_array,
 * strings char *) that the client builds in an arena in its connection heap and sends as one
 * pointer, sealed so a buggy client thread cannot change it mid-call. The server handlers run
 * SANDBOXED: they follow every pointer through checked accessors and a fault becomes an error
 * reply. INSERT deep-copies the document into the server's private memory; FIND walks every
 * stored document and answers with the ids of those where a dotted path equals a string. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

enum { DOC_INSERT = 1, DOC_FIND = 2 };
enum { V_INT = 1, V_STR, V_ARR, V_OBJ };

struct val { /* one JSON-like value; arrays hold struct val *, objects map keys to struct val * */
    int type;
    long i;
    const char *s;
    rpcool_array *arr;
    rpcool_map *obj;
};
struct find_req { const char *path, *equals; };

/* ---- client side: building documents in the heap ---- */

static struct val *mk(rpcool_arena *a, int type)
{
    struct val *v = (struct val *)rpcool_arena_alloc(a, sizeof *v, 0);
    if (v) { memset(v, 0, sizeof *v); v->type = type; }
    return v;
}
static struct val *mk_str(rpcool_arena *a, const char *s) { struct val *v = mk(a, V_STR); v->s = rpcool_arena_strdup(a, s); return v; }
static struct val *mk_int(rpcool_arena *a, long i) { struct val *v = mk(a, V_INT); v->i = i; return v; }
static struct val *mk_obj(rpcool_arena *a) { struct val *v = mk(a, V_OBJ); v->obj = rpcool_map_new(a, 4); return v; }
static struct val *mk_arr(rpcool_arena *a) { struct val *v = mk(a, V_ARR); v->arr = rpcool_array_new(a, sizeof(struct val *), 4); return v; }
static void set(rpcool_arena *a, struct val *o, const char *k, struct val *v) { rpcool_map_put(a, o->obj, k, (uint64_t)(uintptr_t)v, NULL); }
static void push(rpcool_arena *a, struct val *arr, struct val *v) { rpcool_array_push(a, arr->arr, &v); }

/* ---- server side: checked reading, a private copy, search ---- */

struct pval { /* the server's own copy of a value (private memory) */
    int type;
    long i;
    char *s;
    size_t n;              /* array length or object size */
    char **keys;           /* object keys */
    struct pval **items;   /* array items or object values */
};

static struct pval *copy_val(rpcool_ctx *ctx, const struct val *v, int depth)
{
    if (depth > 64) rpcool_ctx_fail(ctx, RPCOOL_E_INVAL); /* cycles and absurd nesting */
    v = RPCOOL_NEED(ctx, v);
    struct pval *p = (struct pval *)calloc(1, sizeof *p);
    p->type = v->type;
    if (v->type == V_INT) {
        p->i = v->i;
    } else if (v->type == V_STR) {
        p->s = strdup(rpcool_ctx_need_str(ctx, v->s));
    } else if (v->type == V_ARR) {
        const rpcool_array *a = RPCOOL_NEED(ctx, v->arr);
        if (a->elem != sizeof(struct val *) || a->len > 1000000) rpcool_ctx_fail(ctx, RPCOOL_E_INVAL);
        struct val *const *it = (struct val *const *)rpcool_ctx_need(ctx, a->items, (size_t)a->len * sizeof *it);
        p->n = (size_t)a->len;
        p->items = (struct pval **)calloc(p->n + 1, sizeof *p->items);
        for (size_t k = 0; k < p->n; k++) p->items[k] = copy_val(ctx, it[k], depth + 1);
    } else if (v->type == V_OBJ) {
        const rpcool_map *m = RPCOOL_NEED(ctx, v->obj);
        if (!m->cap || (m->cap & (m->cap - 1)) || m->cap > 1000000) rpcool_ctx_fail(ctx, RPCOOL_E_INVAL);
        const rpcool_map_entry *e = (const rpcool_map_entry *)rpcool_ctx_need(ctx, m->e, (size_t)m->cap * sizeof *e);
        p->keys = (char **)calloc((size_t)m->cap, sizeof *p->keys);
        p->items = (struct pval **)calloc((size_t)m->cap, sizeof *p->items);
        for (uint64_t k = 0; k < m->cap; k++)
            if (e[k].key) {
                p->keys[p->n] = strdup(rpcool_ctx_need_str(ctx, e[k].key));
                p->items[p->n++] = copy_val(ctx, (const struct val *)(uintptr_t)e[k].val, depth + 1);
            }
    } else {
        rpcool_ctx_fail(ctx, RPCOOL_E_INVAL);
    }
    return p;
    /* (a document rejected half-way leaks what was copied so far: a sandboxed handler must not
       own private resources while it reads peer data - a real store would use an arena) */
}

static const struct pval *lookup(const struct pval *p, const char *path)
{
    char part[64];
    while (p && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part || p->type != V_OBJ) return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        const struct pval *next = NULL;
        for (size_t k = 0; k < p->n && !next; k++) if (!strcmp(p->keys[k], part)) next = p->items[k];
        p = next;
        path += n + (path[n] == '.');
    }
    return p;
}

static struct pval **docs;
static size_t ndocs, capdocs;

static int doc_insert(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    struct pval *d = copy_val(ctx, (const struct val *)arg, 0);
    if (ndocs == capdocs) {
        capdocs = capdocs ? capdocs * 2 : 1024;
        docs = (struct pval **)realloc(docs, capdocs * sizeof *docs);
    }
    docs[ndocs] = d;
    return (int)ndocs++; /* the document id */
}

static int doc_find(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (len != sizeof(struct find_req)) return RPCOOL_E_INVAL;
    const struct find_req *q = (const struct find_req *)arg;
    char path[128], want[128];
    snprintf(path, sizeof path, "%s", rpcool_ctx_need_str(ctx, q->path));
    snprintf(want, sizeof want, "%s", rpcool_ctx_need_str(ctx, q->equals));
    int *ids = (int *)rpcool_ctx_alloc(ctx, (ndocs + 1) * sizeof *ids); /* in the caller's heap */
    if (!ids) return SHMHEAP_E_FULL;
    int n = 0;
    for (size_t k = 0; k < ndocs; k++) {
        const struct pval *v = lookup(docs[k], path);
        if (v && v->type == V_STR && !strcmp(v->s, want)) ids[n++] = (int)k;
    }
    rpcool_ctx_reply(ctx, ids, (size_t)n * sizeof *ids);
    return n;
}

static const char *cities[] = {"Paris", "Lagos", "Osaka", "Lima", "Oslo"};

static int client(const char *chan, long ndoc)
{
    rpcool_conn *c;
    int r = rpcool_connect(chan, NULL, &c);
    if (r) { fprintf(stderr, "connect: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_arena a;
    rpcool_call_opts sealed;
    memset(&sealed, 0, sizeof sealed);
    sealed.safety = RPCOOL_SEAL;
    uint64_t t0 = rcp__now_ns();
    for (long i = 0; i < ndoc; i++) {
        if (rpcool_arena_init(&a, rpcool_heap(c), 4096)) return 1; /* one sealable page per doc */
        char name[32];
        snprintf(name, sizeof name, "user%ld", i);
        struct val *doc = mk_obj(&a), *addr = mk_obj(&a), *tags = mk_arr(&a);
        set(&a, doc, "name", mk_str(&a, name));
        set(&a, doc, "age", mk_int(&a, 20 + i % 50));
        set(&a, addr, "city", mk_str(&a, cities[i % 5]));
        set(&a, addr, "zip", mk_int(&a, 10000 + i));
        set(&a, doc, "address", addr);
        push(&a, tags, mk_str(&a, i % 3 ? "customer" : "admin"));
        push(&a, tags, mk_str(&a, "active"));
        set(&a, doc, "tags", tags);
        sealed.seal_p = a.base; /* seal the whole arena: the document and everything it points to */
        sealed.seal_len = rpcool_arena_used(&a);
        r = rpcool_call_ex(c, DOC_INSERT, doc, sizeof *doc, &sealed, NULL, NULL);
        rpcool_arena_destroy(&a);
        if (r != i) { fprintf(stderr, "insert: %s\n", rpcool_strerror(r)); return 1; }
    }
    uint64_t t1 = rcp__now_ns();
    struct find_req *q = (struct find_req *)rpcool_alloc(c, sizeof *q);
    q->path = rpcool_strdup(c, "address.city");
    q->equals = rpcool_strdup(c, "Osaka");
    void *ret;
    size_t n;
    int hits = rpcool_call(c, DOC_FIND, q, sizeof *q, &ret, &n);
    uint64_t t2 = rcp__now_ns();
    printf("inserted %ld sealed documents in %.1f ms (%.1f us each, built + sent + deep-copied)\n",
           ndoc, (t1 - t0) / 1e6, (double)(t1 - t0) / 1e3 / (double)ndoc);
    printf("find address.city == \"Osaka\": %d documents (first ids %d %d %d) in %.2f ms\n", hits,
           hits > 0 ? ((int *)ret)[0] : -1, hits > 1 ? ((int *)ret)[1] : -1, hits > 2 ? ((int *)ret)[2] : -1,
           (t2 - t1) / 1e6);
    rpcool_free(c, ret);
    /* a malicious document: an object whose map points outside the heap */
    rpcool_arena_init(&a, rpcool_heap(c), 0);
    struct val *evil = mk_obj(&a);
    evil->obj->e = (rpcool_map_entry *)(uintptr_t)0x7000;
    printf("insert of a document with a wild pointer -> %s\n",
           rpcool_strerror(rpcool_call(c, DOC_INSERT, evil, sizeof *evil, NULL, NULL)));
    rpcool_disconnect(c);
    return hits == (int)(ndoc / 5) ? 0 : 1;
}

int main(int argc, char **argv)
{
    char *end = "";
    long ndoc = argc > 1 ? strtol(argv[1], &end, 10) : 20000;
    if (argc > 2 || *end || ndoc < 5 || ndoc > 1000000) {
        fprintf(stderr, "usage: %s [documents: 5..1000000, default 20000]\n", argv[0]);
        return 2;
    }
    char chan[64];
    snprintf(chan, sizeof chan, "docs-%d", (int)getpid());
    rpcool_server *s;
    int r = rpcool_server_open(chan, NULL, &s);
    if (r) { fprintf(stderr, "server: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_server_add_handler(s, DOC_INSERT, doc_insert, NULL, RPCOOL_SANDBOX);
    rpcool_server_add_handler(s, DOC_FIND, doc_find, NULL, RPCOOL_SANDBOX);
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0) {
        int rc = client(chan, ndoc);
        fflush(stdout);
        _exit(rc);
    }
    rpcool_server_start(s, 1);
    int st;
    waitpid(kid, &st, 0);
    rpcool_server_stats ss;
    rpcool_server_get_stats(s, &ss);
    printf("server: %zu documents stored, %llu calls, %llu faults contained\n", ndocs,
           (unsigned long long)ss.calls, (unsigned long long)ss.faults);
    rpcool_server_close(s);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
