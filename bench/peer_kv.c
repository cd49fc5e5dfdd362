/* SPDX-License-Identifier: MIT */
/* peer_kv - a key-value store served over a UNIX socket with a simple serializer, to
   compare with rpcool's KV example. Keys and values: bench/workload.h (4096 keys of 16-64
   bytes). For each value size (default 64, 256, 1024 bytes) the client first loads every
   key (untimed), then measures -n PUTs and -n GETs of key bench_kv_index(r).

   Wire format (host byte order):
     request  [u8 op: 1 GET, 2 PUT][u8 0][u16 key length][u32 value length][key][value]
     response [u8 status: 0 ok, 1 not found, 2 error][3 x u8 0][u32 value length][value]
   The server keeps a chained hash table (FNV-1a) of malloc'd keys and values.
   Results kv_put/VALUE_SIZE and kv_get/VALUE_SIZE.

   server:  peer_kv [-a PATH]   client: peer_kv [-V 64,256,1024] PATH   both: peer_kv -f */
#include "peer.h"   /* first: it defines _GNU_SOURCE */

#include "workload.h"

enum { OP_GET = 1, OP_PUT = 2 };
enum { ST_OK = 0, ST_NOT_FOUND = 1, ST_ERROR = 2 };

struct kv_req_hdr {
    uint8_t op, pad;
    uint16_t klen;
    uint32_t vlen;
};

struct kv_resp_hdr {
    uint8_t status, pad[3];
    uint32_t vlen;
};

_Static_assert(sizeof(struct kv_req_hdr) == 8, "request header is 8 bytes on the wire");
_Static_assert(sizeof(struct kv_resp_hdr) == 8, "response header is 8 bytes on the wire");

#define KV_BUCKETS 8192

struct kv_entry {
    struct kv_entry *next;
    uint32_t klen, vlen;
    char *key, *value;
};

struct kv_table {
    struct kv_entry *bucket[KV_BUCKETS];
};

static uint32_t fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    while (n--)
        h = (h ^ (uint8_t)*p++) * 16777619u;
    return h;
}

static struct kv_entry **kv_find(struct kv_table *t, const char *key, uint32_t klen)
{
    struct kv_entry **e = &t->bucket[fnv1a(key, klen) % KV_BUCKETS];
    while (*e && ((*e)->klen != klen || memcmp((*e)->key, key, klen)))
        e = &(*e)->next;
    return e;
}

static int kv_put(struct kv_table *t, const char *key, uint32_t klen, const char *val,
                  uint32_t vlen)
{
    struct kv_entry **slot = kv_find(t, key, klen), *e = *slot;
    if (!e) {
        e = (struct kv_entry *)calloc(1, sizeof *e);
        if (!e || !(e->key = (char *)malloc(klen)))
            return -1;
        memcpy(e->key, key, klen);
        e->klen = klen;
        *slot = e;
    }
    if (e->vlen != vlen || !e->value) {
        char *v = (char *)realloc(e->value, vlen ? vlen : 1);
        if (!v)
            return -1;
        e->value = v;
        e->vlen = vlen;
    }
    memcpy(e->value, val, vlen);
    return 0;
}

static void kv_free(struct kv_table *t)
{
    for (size_t b = 0; b < KV_BUCKETS; b++)
        for (struct kv_entry *e = t->bucket[b], *next; e; e = next) {
            next = e->next;
            free(e->key);
            free(e->value);
            free(e);
        }
}

struct kv_ctx {
    int fd;
    const char *vsizes;
    size_t vsize;
    char *buf;   /* one request or response: header + key + value */
    uint64_t round;
};

#define KV_BUF (sizeof(struct kv_req_hdr) + BENCH_KV_KEY_MAX + (1u << 20))

static int server(const struct peer_opts *o, const char *addr, void *vctx)
{
    (void)o;
    struct kv_ctx *c = (struct kv_ctx *)vctx;
    struct kv_table *t = (struct kv_table *)calloc(1, sizeof *t);
    char *req = (char *)malloc(KV_BUF), *resp = (char *)malloc(KV_BUF);
    if (!t || !req || !resp)
        return 1;
    c->fd = peer_unix_accept(addr, SOCK_STREAM);
    if (c->fd < 0)
        return 1;
    int r;
    struct kv_req_hdr h;
    while ((r = peer_read_full(c->fd, &h, sizeof h)) == 0) {
        if (h.klen > BENCH_KV_KEY_MAX || h.vlen > (1u << 20) ||
            peer_read_full(c->fd, req, (size_t)h.klen + h.vlen)) {
            r = -1;
            break;
        }
        struct kv_resp_hdr rh = {ST_OK, {0, 0, 0}, 0};
        if (h.op == OP_PUT) {
            if (kv_put(t, req, h.klen, req + h.klen, h.vlen))
                rh.status = ST_ERROR;
        } else if (h.op == OP_GET) {
            struct kv_entry *e = *kv_find(t, req, h.klen);
            if (e) {
                rh.vlen = e->vlen;
                memcpy(resp + sizeof rh, e->value, e->vlen);
            } else {
                rh.status = ST_NOT_FOUND;
            }
        } else {
            rh.status = ST_ERROR;
        }
        memcpy(resp, &rh, sizeof rh);
        if (peer_write_full(c->fd, resp, sizeof rh + rh.vlen)) {
            r = -1;
            break;
        }
    }
    close(c->fd);
    kv_free(t);
    free(t);
    free(req);
    free(resp);
    return r == 1 ? 0 : 1;
}

/* One request and its response; the response value lands in c->buf + 8. */
static int kv_call(struct kv_ctx *c, uint8_t op, uint64_t key, size_t vlen, uint32_t *got_vlen)
{
    char *p = c->buf + sizeof(struct kv_req_hdr);
    size_t klen = bench_kv_key(key, p);
    if (op == OP_PUT)
        bench_kv_value(key, c->round, vlen, p + klen);
    else
        vlen = 0;
    struct kv_req_hdr h = {op, 0, (uint16_t)klen, (uint32_t)vlen};
    memcpy(c->buf, &h, sizeof h);
    if (peer_write_full(c->fd, c->buf, sizeof h + klen + vlen))
        return -1;
    struct kv_resp_hdr rh;
    if (peer_read_full(c->fd, &rh, sizeof rh) || rh.vlen > (1u << 20) ||
        peer_read_full(c->fd, c->buf + sizeof rh, rh.vlen) || rh.status != ST_OK)
        return -1;
    *got_vlen = rh.vlen;
    return 0;
}

static int op_put(void *vctx, long i)
{
    struct kv_ctx *c = (struct kv_ctx *)vctx;
    uint32_t got;
    return kv_call(c, OP_PUT, bench_kv_index((uint64_t)i), c->vsize, &got);
}

static int op_get(void *vctx, long i)
{
    struct kv_ctx *c = (struct kv_ctx *)vctx;
    uint32_t got;
    if (kv_call(c, OP_GET, bench_kv_index((uint64_t)i), 0, &got))
        return -1;
    return got == c->vsize ? 0 : -1;
}

static int client(const struct peer_opts *o, const char *addr, void *vctx)
{
    struct kv_ctx *c = (struct kv_ctx *)vctx;
    c->buf = (char *)malloc(KV_BUF);
    c->fd = peer_unix_connect(addr, SOCK_STREAM);
    if (!c->buf || c->fd < 0)
        return 1;
    int rc = 0;
    for (const char *p = c->vsizes; *p && !rc;) {
        unsigned long long v;
        if (peer_list_next(&p, &v) || v > (1u << 20)) {
            fprintf(stderr, "bad -V list: %s\n", c->vsizes);
            return 1;
        }
        c->vsize = (size_t)v;
        c->round++;
        uint32_t got;
        for (uint64_t k = 0; k < BENCH_KV_KEYS && !rc; k++)
            rc = kv_call(c, OP_PUT, k, c->vsize, &got);
        char name[64];
        snprintf(name, sizeof name, "kv_put/%zu", c->vsize);
        rc = rc ? rc : peer_measure(o, name, op_put, c);
        snprintf(name, sizeof name, "kv_get/%zu", c->vsize);
        rc = rc ? rc : peer_measure(o, name, op_get, c);
    }
    return peer_client_done(c->fd, c->buf, rc);
}

int main(int argc, char **argv)
{
    struct kv_ctx ctx = {.vsizes = "64,256,1024"};
    return peer_main_list(argc, argv, 'V', &ctx.vsizes,
                          "[-V SIZE,SIZE,...] [options] [PATH]", "kv", server, client, &ctx);
}
