/* SPDX-License-Identifier: MIT */
/* impl/rpcool/pbc.h - protobuf-c services over rpcool (rpcool.h section 11). Included by
   rpcool.h when RPCOOL_WITH_PROTOBUF_C is defined: the declarations with rpcool.h's, the
   implementation with rpcool's implementation. Not a header of its own.

   How a message travels. A message of the connection heap is passed by pointer; one built
   elsewhere is first deep-copied into the heap. While it travels it is in "wire form": every
   pointer that was the sender's default of its field (proto2 defaults, proto3's empty string)
   is RPCOOL__PBC_DFL, and descriptor pointers mean nothing (the receiver never reads them).
   The receiver walks the message by its own descriptor of the method's type (found by index
   and checked by a hash of the names), sets its own descriptors and defaults, and after the
   call puts the wire form back. The request is a small frame {magic, key, method, message};
   the reply is a chain of blocks in the client's heap whose first block holds the reply's top
   message right after its header. Over RDMA the input is always copied (its blocks are the
   call's extents), the server copies it out of its mirror and answers before the handler
   returns. */

#ifndef RPCOOL_PBC_H
#define RPCOOL_PBC_H
#include <protobuf-c/protobuf-c.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RPCOOL_PBC_FAILED 1      /* rpcool_pbc_call: the service answered closure(NULL) */
#define RPCOOL_PBC_MAX_DEPTH 100 /* messages nested deeper are refused (RPCOOL_E_PROTO) */

/* Client: a ProtobufCService whose invoke calls handler id fn on connection c. Destroy it with
   protobuf_c_service_destroy (before disconnecting c). 0, RPCOOL_E_INVAL or -ENOMEM. */
RPCOOL_API int rpcool_pbc_client_new(rpcool_conn *c, const ProtobufCServiceDescriptor *desc,
                                     unsigned fn, ProtobufCService **out);
/* One call of method (its index in the service descriptor) with its status: 0 and *out (valid
   until rpcool_pbc_reply_free; it may point into in, so keep in until then), RPCOOL_PBC_FAILED,
   RPCOOL_E_NOMETHOD, RPCOOL_E_MSGTYPE, or another negative code. */
RPCOOL_API int rpcool_pbc_call(ProtobufCService *svc, unsigned method, const ProtobufCMessage *in,
                               ProtobufCMessage **out);
RPCOOL_API void rpcool_pbc_reply_free(ProtobufCService *svc, ProtobufCMessage *out);
/* A ProtobufCAllocator over c's heap: messages built or unpacked with it travel uncopied. */
RPCOOL_API void rpcool_pbc_allocator_init(ProtobufCAllocator *a, rpcool_conn *c);
/* Server: serve impl (a generated Foo_Service, or any ProtobufCService) as handler id fn. */
RPCOOL_API int rpcool_pbc_serve(rpcool_server *s, unsigned fn, ProtobufCService *impl,
                                unsigned safety);

#ifdef __cplusplus
}
#endif
#endif /* RPCOOL_PBC_H */

#if defined(RPCOOL_PBC_IMPLEMENTATION) && !defined(RPCOOL_PBC_IMPLEMENTATION_ONCE)
#define RPCOOL_PBC_IMPLEMENTATION_ONCE

/* >>pbc - protobuf-c services ------------------------------------------------------------------ */

#define RPCOOL__PBC_DFL ((void *)(uintptr_t)1) /* wire form of "the field's default" */
#define RPCOOL__PBC_REQ_MAGIC 0x3151524243504352ull /* "RCPBCRQ1" */
#define RPCOOL__PBC_REP_MAGIC 0x3150524243504352ull /* "RCPBCRP1" */
#define RPCOOL__PBC_CHUNK 976u /* a first block of 1 KiB with its header; then doubling */

struct rpcool__pbc_req { /* the argument of a call */
    uint64_t magic;
    uint64_t key;         /* hash of service, method, input and output type names */
    uint64_t method;
    ProtobufCMessage *msg;
};

struct rpcool__pbc_chunk { /* a block of copied messages; a reply's first block heads it */
    uint64_t magic;
    struct rpcool__pbc_chunk *next;
    struct rpcool__pbc_chunk *scratch; /* client: the input's copy, freed with the reply */
    size_t cap, used;
    uint64_t pad;
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__pbc_chunk) == 48, "pbc chunk layout");

static uint64_t rpcool__pbc_key(const ProtobufCServiceDescriptor *sd, unsigned m)
{
    const ProtobufCMethodDescriptor *md = &sd->methods[m];
    const char *parts[4] = {sd->name, md->name, md->input->name, md->output->name};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 4; i++) {
        for (const char *p = parts[i]; p && *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        h = (h ^ '/') * 0x100000001b3ull;
    }
    return h;
}

static size_t rpcool__pbc_elt_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    default: return 4;
    }
}

/* Is field f of m (read from its private or trusted image) present for the walk? A oneof
   member only when its case says so. */
static int rpcool__pbc_live(const ProtobufCFieldDescriptor *f, const char *m)
{
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) return 1;
    uint32_t c;
    memcpy(&c, m + f->quantifier_offset, sizeof c);
    return c == f->id;
}

static const void *rpcool__pbc_bytes_dfl(const ProtobufCFieldDescriptor *f)
{
    return f->default_value ? ((const ProtobufCBinaryData *)f->default_value)->data : NULL;
}

/* ---- walking a message in place: to wire form (own defaults become RPCOOL__PBC_DFL) or from
   it (RPCOOL__PBC_DFL becomes own defaults, descriptors set). With a heap, every pointer,
   length and count must lie in it (else RPCOOL_E_BADPTR). Either way a budget of bytes
   (shared or cyclic references count each time) and a depth bound it (RPCOOL_E_PROTO). */
struct rpcool__pbc_walk {
    int to_wire;
    const struct rpcool__pbc_bounds *heap; /* NULL: trust the pointers */
    size_t budget;
    size_t ndfl;         /* defaults (or their markers) met: none, and nothing needs undoing */
    int restore;         /* the client taking its input back (from wire form, heap set): a
                            defaulted field pointing outside the heap holds the server's
                            default (a call that ended before the server put it back) */
};

static int rpcool__pbc_take(size_t *budget, size_t n)
{
    if (n > *budget) return RPCOOL_E_PROTO;
    *budget -= n;
    return 0;
}

/* Where a client's message must lie: its connection heap (h), or over RDMA the server's mirror
   of it (ctx). */
struct rpcool__pbc_bounds {
    const shmheap *h;
    rpcool_ctx *ctx;
};

static int rpcool__pbc_in(const struct rpcool__pbc_bounds *b, const void *p, size_t n)
{
    return b->h ? shmheap_contains(b->h, p, n) : rpcool_ctx_ok(b->ctx, p, n);
}

/* A range [p, p+n) of n bytes aligned to al, within the bounds when there are some. */
static int rpcool__pbc_range(const struct rpcool__pbc_bounds *b, const void *p, size_t n,
                             size_t al)
{
    if ((uintptr_t)p % al) return RPCOOL_E_BADPTR;
    return !b || rpcool__pbc_in(b, p, n) ? 0 : RPCOOL_E_BADPTR;
}

/* The length of a string that must end within the bounds (or anywhere, without), or -1. */
static ptrdiff_t rpcool__pbc_strlen(const struct rpcool__pbc_bounds *b, const char *s)
{
    if (!b) return (ptrdiff_t)strlen(s);
    if (b->h) {
        if (!shmheap_contains(b->h, s, 1)) return -1;
        size_t room = (size_t)((const char *)shmheap_base(b->h) + shmheap_size(b->h) - s);
        size_t n = strnlen(s, room);
        return n < room ? (ptrdiff_t)n : -1;
    }
    for (size_t n = 0;;) { /* a page at a time: the mirror's range is whole pages */
        const char *q = s + n;
        size_t step = 4096 - ((uintptr_t)q & 4095);
        if (!rpcool_ctx_ok(b->ctx, q, step)) return -1;
        const char *z = (const char *)memchr(q, 0, step);
        if (z) return (ptrdiff_t)(n + (size_t)(z - q));
        n += step;
    }
}

static int rpcool__pbc_walk_str(struct rpcool__pbc_walk *w, const ProtobufCFieldDescriptor *f,
                                char **sp, int single)
{
    char *s = *sp;
    const char *dfl = single ? (const char *)f->default_value : NULL;
    if (!s) return 0;
    if (s == (char *)RPCOOL__PBC_DFL || (dfl && s == dfl)) {
        if (s == (char *)RPCOOL__PBC_DFL && !dfl) return RPCOOL_E_BADPTR; /* no default here */
        w->ndfl++;
        *sp = w->to_wire ? (char *)RPCOOL__PBC_DFL : (char *)(uintptr_t)dfl;
        return 0;
    }
    if (w->restore && dfl && !rpcool__pbc_in(w->heap, s, 1)) {
        w->ndfl++;
        *sp = (char *)(uintptr_t)dfl;
        return 0;
    }
    ptrdiff_t n = rpcool__pbc_strlen(w->heap, s);
    if (n < 0) return RPCOOL_E_BADPTR;
    return rpcool__pbc_take(&w->budget, (size_t)n + 1);
}

static int rpcool__pbc_walk_bytes(struct rpcool__pbc_walk *w, const ProtobufCFieldDescriptor *f,
                                  ProtobufCBinaryData *b, int single)
{
    const void *dfl = single ? rpcool__pbc_bytes_dfl(f) : NULL;
    if (b->data == (uint8_t *)RPCOOL__PBC_DFL || (dfl && b->data == dfl)) {
        if (b->data == (uint8_t *)RPCOOL__PBC_DFL && !dfl) return RPCOOL_E_BADPTR;
        w->ndfl++;
        b->data = w->to_wire ? (uint8_t *)RPCOOL__PBC_DFL : (uint8_t *)(uintptr_t)dfl;
        return 0;
    }
    if (w->restore && dfl && b->data && !rpcool__pbc_in(w->heap, b->data, b->len ? b->len : 1)) {
        w->ndfl++;
        b->data = (uint8_t *)(uintptr_t)dfl;
        return 0;
    }
    if (!b->len) return 0;
    if (!b->data || rpcool__pbc_range(w->heap, b->data, b->len, 1)) return RPCOOL_E_BADPTR;
    return rpcool__pbc_take(&w->budget, b->len);
}

static int rpcool__pbc_walk_msg(struct rpcool__pbc_walk *w, const ProtobufCMessageDescriptor *d,
                                ProtobufCMessage *m, unsigned depth);

/* One value of field f at p (a member, or an element of a repeated field). */
static int rpcool__pbc_walk_val(struct rpcool__pbc_walk *w, const ProtobufCFieldDescriptor *f,
                                char *p, int single, unsigned depth)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: return rpcool__pbc_walk_str(w, f, (char **)(void *)p, single);
    case PROTOBUF_C_TYPE_BYTES:
        return rpcool__pbc_walk_bytes(w, f, (ProtobufCBinaryData *)(void *)p, single);
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage *sub = *(ProtobufCMessage **)(void *)p;
        return sub ? rpcool__pbc_walk_msg(w, (const ProtobufCMessageDescriptor *)f->descriptor,
                                          sub, depth + 1)
                   : 0;
    }
    default: return 0;
    }
}

static int rpcool__pbc_walk_msg(struct rpcool__pbc_walk *w, const ProtobufCMessageDescriptor *d,
                                ProtobufCMessage *m, unsigned depth)
{
    int rc;
    if (depth > RPCOOL_PBC_MAX_DEPTH) return RPCOOL_E_PROTO;
    if ((rc = rpcool__pbc_range(w->heap, m, d->sizeof_message, sizeof(void *)))) return rc;
    if ((rc = rpcool__pbc_take(&w->budget, d->sizeof_message))) return rc;
    if (!w->to_wire) m->descriptor = d;
    unsigned nu = m->n_unknown_fields;
    ProtobufCMessageUnknownField *u = m->unknown_fields;
    if (nu) {
        if (nu > w->budget / sizeof *u) return RPCOOL_E_PROTO;
        if ((rc = rpcool__pbc_range(w->heap, u, nu * sizeof *u, sizeof(void *)))) return rc;
        if ((rc = rpcool__pbc_take(&w->budget, nu * sizeof *u))) return rc;
        for (unsigned i = 0; i < nu; i++) {
            size_t len = u[i].len;
            if (len && rpcool__pbc_range(w->heap, u[i].data, len, 1)) return RPCOOL_E_BADPTR;
            if ((rc = rpcool__pbc_take(&w->budget, len))) return rc;
        }
    }
    char *base = (char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_BYTES &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue; /* no pointers in scalars (repeated scalars: checked below) */
        if (!rpcool__pbc_live(f, base)) continue;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            if ((rc = rpcool__pbc_walk_val(w, f, base + f->offset, 1, depth))) return rc;
            continue;
        }
        size_t n, es = rpcool__pbc_elt_size(f->type);
        char *arr;
        memcpy(&n, base + f->quantifier_offset, sizeof n);
        memcpy(&arr, base + f->offset, sizeof arr);
        if (!n) continue;
        if (n > w->budget / es) return RPCOOL_E_PROTO;
        if ((rc = rpcool__pbc_range(w->heap, arr, n * es, sizeof(void *)))) return rc;
        if ((rc = rpcool__pbc_take(&w->budget, n * es))) return rc;
        for (size_t k = 0; k < n; k++)
            if ((rc = rpcool__pbc_walk_val(w, f, arr + k * es, 0, depth))) return rc;
    }
    /* repeated scalars: their arrays must lie in the heap too */
    for (unsigned i = 0; w->heap && i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type == PROTOBUF_C_TYPE_STRING ||
            f->type == PROTOBUF_C_TYPE_BYTES || f->type == PROTOBUF_C_TYPE_MESSAGE)
            continue;
        size_t n, es = rpcool__pbc_elt_size(f->type);
        const char *arr;
        memcpy(&n, base + f->quantifier_offset, sizeof n);
        memcpy(&arr, base + f->offset, sizeof arr);
        if (!n) continue;
        if (n > w->budget / es) return RPCOOL_E_PROTO;
        if ((rc = rpcool__pbc_range(w->heap, arr, n * es, es < 8 ? es : 8))) return rc;
        if ((rc = rpcool__pbc_take(&w->budget, n * es))) return rc;
    }
    return 0;
}

/* ---- copying a message: into the heap in wire form (from the sender's own memory), or out of
   a client's heap into private memory (from wire form, every pointer checked, each shared
   byte read once: what is checked is what is used). Blocks come from a chain of chunks. */
struct rpcool__pbc_copy {
    int from_wire;
    const struct rpcool__pbc_bounds *heap; /* from_wire: the source's (checked); to wire:
                             pointers into it are kept, not copied (a reply into its input) */
    int keep;             /* to wire: keep pointers into heap */
    size_t budget;
    void *(*alloc)(void *user, size_t size, size_t *got); /* *got: the block's size */
    void *user;
    struct rpcool__pbc_chunk *first, *cur;
    size_t next_cap;
    int full;             /* an allocation failed (not the budget) */
};

static void *rpcool__pbc_get(struct rpcool__pbc_copy *c, size_t n, size_t al)
{
    if (rpcool__pbc_take(&c->budget, n)) return NULL;
    struct rpcool__pbc_chunk *k = c->cur;
    size_t at = k ? (k->used + al - 1) & ~(al - 1) : 0;
    if (!k || at > k->cap || n > k->cap - at) {
        size_t cap = c->next_cap > n + 16 ? c->next_cap : n + 16, got = sizeof(*k) + cap;
        struct rpcool__pbc_chunk *nk =
            (struct rpcool__pbc_chunk *)c->alloc(c->user, sizeof *nk + cap, &got);
        if (!nk) {
            c->full = 1;
            return NULL;
        }
        memset(nk, 0, sizeof *nk);
        nk->magic = RPCOOL__PBC_REP_MAGIC;
        nk->cap = got - sizeof *nk;
        if (k) k->next = nk;
        else c->first = nk;
        c->cur = k = nk;
        if (c->next_cap < ((size_t)1 << 24)) c->next_cap *= 2;
        at = 0;
    }
    k->used = at + n;
    return (char *)(k + 1) + at;
}

static void rpcool__pbc_chain_free(struct rpcool__pbc_chunk *k, void (*fr)(void *, void *),
                                   void *user)
{
    while (k) {
        struct rpcool__pbc_chunk *n = k->next;
        fr(user, k);
        k = n;
    }
}

static ProtobufCMessage *rpcool__pbc_copy_msg(struct rpcool__pbc_copy *c,
                                              const ProtobufCMessageDescriptor *d,
                                              const ProtobufCMessage *src, unsigned depth,
                                              int *err);

static int rpcool__pbc_copy_str(struct rpcool__pbc_copy *c, const ProtobufCFieldDescriptor *f,
                                char **sp, int single)
{
    char *s = *sp;
    const char *dfl = single ? (const char *)f->default_value : NULL;
    if (!s) return 0;
    if (c->from_wire) {
        if (s == (char *)RPCOOL__PBC_DFL) {
            if (!dfl) return RPCOOL_E_BADPTR;
            *sp = (char *)(uintptr_t)dfl;
            return 0;
        }
    } else {
        if (dfl && s == dfl) {
            *sp = (char *)RPCOOL__PBC_DFL;
            return 0;
        }
        if (c->keep && rpcool__pbc_in(c->heap, s, 1)) return 0;
    }
    ptrdiff_t n = rpcool__pbc_strlen(c->from_wire ? c->heap : NULL, s);
    if (n < 0) return RPCOOL_E_BADPTR;
    char *t = (char *)rpcool__pbc_get(c, (size_t)n + 1, 1);
    if (!t) return RPCOOL_E_PROTO;
    memcpy(t, s, (size_t)n);
    t[n] = '\0'; /* a sender that changes the string meanwhile cannot unterminate the copy */
    *sp = t;
    return 0;
}

static int rpcool__pbc_copy_bytes(struct rpcool__pbc_copy *c, const ProtobufCFieldDescriptor *f,
                                  ProtobufCBinaryData *b, int single)
{
    const void *dfl = single ? rpcool__pbc_bytes_dfl(f) : NULL;
    if (c->from_wire && b->data == (uint8_t *)RPCOOL__PBC_DFL) {
        if (!dfl) return RPCOOL_E_BADPTR;
        b->data = (uint8_t *)(uintptr_t)dfl;
        return 0;
    }
    if (!c->from_wire && dfl && b->data == dfl) {
        b->data = (uint8_t *)RPCOOL__PBC_DFL;
        return 0;
    }
    if (!b->len) {
        if (c->from_wire) b->data = NULL;
        return 0;
    }
    if (!c->from_wire && c->keep && rpcool__pbc_in(c->heap, b->data, b->len)) return 0;
    if (!b->data || rpcool__pbc_range(c->from_wire ? c->heap : NULL, b->data, b->len, 1))
        return RPCOOL_E_BADPTR;
    uint8_t *t = (uint8_t *)rpcool__pbc_get(c, b->len, 1);
    if (!t) return RPCOOL_E_PROTO;
    memcpy(t, b->data, b->len);
    b->data = t;
    return 0;
}

static int rpcool__pbc_copy_val(struct rpcool__pbc_copy *c, const ProtobufCFieldDescriptor *f,
                                char *p, int single, unsigned depth)
{
    int err = 0;
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: return rpcool__pbc_copy_str(c, f, (char **)(void *)p, single);
    case PROTOBUF_C_TYPE_BYTES:
        return rpcool__pbc_copy_bytes(c, f, (ProtobufCBinaryData *)(void *)p, single);
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage **sp = (ProtobufCMessage **)(void *)p;
        if (*sp)
            *sp = rpcool__pbc_copy_msg(c, (const ProtobufCMessageDescriptor *)f->descriptor, *sp,
                                       depth + 1, &err);
        return err;
    }
    default: return 0;
    }
}

static ProtobufCMessage *rpcool__pbc_copy_msg(struct rpcool__pbc_copy *c,
                                              const ProtobufCMessageDescriptor *d,
                                              const ProtobufCMessage *src, unsigned depth,
                                              int *err)
{
    int rc = 0;
    if (depth > RPCOOL_PBC_MAX_DEPTH) { *err = RPCOOL_E_PROTO; return NULL; }
    /* a reply's sub-message in the client's heap (its input's) is referenced, not copied; the
       top message always is, so the reply's first block finds it */
    if (!c->from_wire && c->keep && depth && rpcool__pbc_in(c->heap, src, d->sizeof_message))
        return (ProtobufCMessage *)(uintptr_t)src;
    if (rpcool__pbc_range(c->from_wire ? c->heap : NULL, src, d->sizeof_message, sizeof(void *))) {
        *err = RPCOOL_E_BADPTR;
        return NULL;
    }
    char *m = (char *)rpcool__pbc_get(c, d->sizeof_message, sizeof(void *));
    if (!m) { *err = RPCOOL_E_PROTO; return NULL; }
    memcpy(m, src, d->sizeof_message); /* the one read of the struct: the rest reads the copy */
    ProtobufCMessage *dm = (ProtobufCMessage *)(void *)m;
    dm->descriptor = c->from_wire ? d : NULL;
    if (dm->n_unknown_fields) {
        unsigned nu = dm->n_unknown_fields;
        const ProtobufCMessageUnknownField *su = dm->unknown_fields;
        ProtobufCMessageUnknownField *u;
        if (nu > c->budget / sizeof *u) { *err = RPCOOL_E_PROTO; return NULL; }
        if (rpcool__pbc_range(c->from_wire ? c->heap : NULL, su, nu * sizeof *u, sizeof(void *))) {
            *err = RPCOOL_E_BADPTR;
            return NULL;
        }
        u = (ProtobufCMessageUnknownField *)rpcool__pbc_get(c, nu * sizeof *u, sizeof(void *));
        if (!u) { *err = RPCOOL_E_PROTO; return NULL; }
        memcpy(u, su, nu * sizeof *u);
        dm->unknown_fields = u;
        for (unsigned i = 0; i < nu; i++) {
            if (!u[i].len) { u[i].data = NULL; continue; }
            if (rpcool__pbc_range(c->from_wire ? c->heap : NULL, u[i].data, u[i].len, 1)) {
                *err = RPCOOL_E_BADPTR;
                return NULL;
            }
            uint8_t *t = (uint8_t *)rpcool__pbc_get(c, u[i].len, 1);
            if (!t) { *err = RPCOOL_E_PROTO; return NULL; }
            memcpy(t, u[i].data, u[i].len);
            u[i].data = t;
        }
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!rpcool__pbc_live(f, m)) continue;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            if ((rc = rpcool__pbc_copy_val(c, f, m + f->offset, 1, depth))) break;
            continue;
        }
        size_t n, es = rpcool__pbc_elt_size(f->type);
        char *arr, *t;
        memcpy(&n, m + f->quantifier_offset, sizeof n);
        memcpy(&arr, m + f->offset, sizeof arr);
        if (!n) {
            if (c->from_wire) memset(m + f->offset, 0, sizeof(void *));
            continue;
        }
        if (n > c->budget / es) { rc = RPCOOL_E_PROTO; break; }
        if (rpcool__pbc_range(c->from_wire ? c->heap : NULL, arr, n * es,
                              es < sizeof(void *) ? es : sizeof(void *))) {
            rc = RPCOOL_E_BADPTR;
            break;
        }
        if (!(t = (char *)rpcool__pbc_get(c, n * es, sizeof(void *)))) {
            rc = RPCOOL_E_PROTO;
            break;
        }
        memcpy(t, arr, n * es);
        memcpy(m + f->offset, &t, sizeof t);
        for (size_t k = 0; k < n && !rc; k++) rc = rpcool__pbc_copy_val(c, f, t + k * es, 0, depth);
        if (rc) break;
    }
    if (rc) { *err = rc; return NULL; }
    return dm;
}

/* ---- the allocator over a connection heap */

static void *rpcool__pbc_heap_alloc(void *user, size_t size)
{
    return rpcool_alloc((rpcool_conn *)user, size);
}
static void *rpcool__pbc_heap_get(void *user, size_t size, size_t *got)
{
    (void)got;
    return rpcool_alloc((rpcool_conn *)user, size);
}
static void rpcool__pbc_heap_free(void *user, void *p) { rpcool_free((rpcool_conn *)user, p); }

RPCOOL_API void rpcool_pbc_allocator_init(ProtobufCAllocator *a, rpcool_conn *c)
{
    a->alloc = rpcool__pbc_heap_alloc;
    a->free = rpcool__pbc_heap_free;
    a->allocator_data = c;
}

/* ---- client */

struct rpcool__pbc_client {
    ProtobufCService base; /* first: the generated stubs see a ProtobufCService */
    rpcool_conn *c;
    unsigned fn;
    uint64_t *keys;
};

static void rpcool__pbc_client_destroy(ProtobufCService *svc)
{
    struct rpcool__pbc_client *cl = (struct rpcool__pbc_client *)(void *)svc;
    rpcool__free(cl->keys);
    rpcool__free(cl);
}

/* A reply's blocks: over RDMA, freeing one block of a reply frees them all (rpcool.h section 5) */
static void rpcool__pbc_reply_chain_free(rpcool_conn *c, struct rpcool__pbc_chunk *rep)
{
    if (c->tp->flags & RPCOOL__TP_COPIES) rpcool_free(c, rep);
    else rpcool__pbc_chain_free(rep, rpcool__pbc_heap_free, c);
}

static void rpcool__pbc_invoke(ProtobufCService *svc, unsigned method, const ProtobufCMessage *in,
                               ProtobufCClosure closure, void *closure_data)
{
    ProtobufCMessage *out = NULL;
    int rc = rpcool_pbc_call(svc, method, in, &out);
    closure(rc == 0 ? out : NULL, closure_data);
    if (rc == 0) rpcool_pbc_reply_free(svc, out);
}

RPCOOL_API int rpcool_pbc_client_new(rpcool_conn *c, const ProtobufCServiceDescriptor *desc,
                                     unsigned fn, ProtobufCService **out)
{
    if (!c || !desc || !out || fn >= RPCOOL_MAX_HANDLERS) return RPCOOL_E_INVAL;
    struct rpcool__pbc_client *cl =
        (struct rpcool__pbc_client *)RPCOOL_MALLOC(sizeof *cl);
    uint64_t *keys = (uint64_t *)RPCOOL_MALLOC(sizeof *keys * (desc->n_methods + 1));
    if (!cl || !keys) {
        rpcool__free(cl);
        rpcool__free(keys);
        return -ENOMEM;
    }
    for (unsigned m = 0; m < desc->n_methods; m++) keys[m] = rpcool__pbc_key(desc, m);
    cl->base.descriptor = desc;
    cl->base.invoke = rpcool__pbc_invoke;
    cl->base.destroy = rpcool__pbc_client_destroy;
    cl->c = c;
    cl->fn = fn;
    cl->keys = keys;
    *out = &cl->base;
    return 0;
}

RPCOOL_API int rpcool_pbc_call(ProtobufCService *svc, unsigned method, const ProtobufCMessage *in,
                               ProtobufCMessage **out)
{
    struct rpcool__pbc_client *cl = (struct rpcool__pbc_client *)(void *)svc;
    if (!svc || svc->invoke != rpcool__pbc_invoke || !in || !out) return RPCOOL_E_INVAL;
    if (method >= svc->descriptor->n_methods) return RPCOOL_E_NOMETHOD;
    const ProtobufCMethodDescriptor *md = &svc->descriptor->methods[method];
    if (in->descriptor != md->input) return RPCOOL_E_MSGTYPE;
    rpcool_conn *c = cl->c;
    shmheap *h = c->heap;
    struct rpcool__pbc_bounds hb = {h, NULL};
    ProtobufCMessage *m = (ProtobufCMessage *)(uintptr_t)in;
    struct rpcool__pbc_copy cp;
    memset(&cp, 0, sizeof cp);
    int rc = RPCOOL_E_BADPTR, in_place = 0;
    *out = NULL;
    /* over RDMA a message is always copied: its blocks are the call's extents */
    if (!(c->tp->flags & RPCOOL__TP_COPIES) && shmheap_contains(h, m, md->input->sizeof_message)) {
        /* as it is, if it can */
        struct rpcool__pbc_walk w = {1, &hb, shmheap_size(h), 0, 0};
        rc = rpcool__pbc_walk_msg(&w, md->input, m, 0);
        in_place = rc == 0;
        if (rc) { /* back to the caller's form; then copy what lies outside the heap */
            struct rpcool__pbc_walk back = {0, NULL, shmheap_size(h), 0, 0};
            rpcool__pbc_walk_msg(&back, md->input, m, 0);
            /* over the budget or too deep (shared sub-messages counted each time): a copy
               would be as big, and fill the heap first */
            if (rc == RPCOOL_E_PROTO) return rc;
        }
    }
    if (!in_place) {
        cp.heap = &hb;
        cp.budget = shmheap_size(h);
        cp.alloc = rpcool__pbc_heap_get;
        cp.user = c;
        cp.next_cap = RPCOOL__PBC_CHUNK;
        rc = 0;
        m = rpcool__pbc_copy_msg(&cp, md->input, in, 0, &rc);
        if (!m) {
            rpcool__pbc_chain_free(cp.first, rpcool__pbc_heap_free, c);
            return cp.full ? SHMHEAP_E_FULL : rc;
        }
    }
    struct rpcool__pbc_req *rq = (struct rpcool__pbc_req *)rpcool_alloc(c, sizeof *rq);
    void *ret = NULL;
    size_t ret_len = 0;
    if (!rq) rc = SHMHEAP_E_FULL;
    else {
        rq->magic = RPCOOL__PBC_REQ_MAGIC;
        rq->key = cl->keys[method];
        rq->method = method;
        rq->msg = m;
        rpcool_extent ext[16];
        rpcool_call_opts o;
        memset(&o, 0, sizeof o);
        o.extents = ext;
        for (struct rpcool__pbc_chunk *k = cp.first; k && o.nextents < 16; k = k->next) {
            ext[o.nextents].p = k;
            ext[o.nextents++].len = sizeof *k + k->used;
        }
        rc = rpcool_call_ex(c, cl->fn, rq, sizeof *rq, &o, &ret, &ret_len);
        rpcool_free(c, rq);
    }
    /* the caller's form again, also when the server did not put it back (a timeout, a dead
       server): its defaults may then still be the server's, pointers outside the heap */
    struct rpcool__pbc_walk w = {0, &hb, shmheap_size(h), 0, 1};
    if (in_place) rpcool__pbc_walk_msg(&w, md->input, m, 0);
    w.heap = NULL;
    w.restore = 0;
    struct rpcool__pbc_chunk *rep = (struct rpcool__pbc_chunk *)ret;
    if (rc == 0 && (!rep || ret_len < sizeof *rep || rep->magic != RPCOOL__PBC_REP_MAGIC))
        rc = RPCOOL_E_PROTO;
    if (rc == 0) {
        ProtobufCMessage *r = (ProtobufCMessage *)(void *)(rep + 1);
        w.budget = shmheap_size(h);
        rc = rpcool__pbc_walk_msg(&w, md->output, r, 0);
        if (rc == 0) {
            rep->scratch = cp.first;
            *out = r;
            return 0;
        }
    }
    if (rep) rpcool__pbc_reply_chain_free(c, rep);
    if (rc != RPCOOL_E_TIMEOUT) /* a call that timed out may still run: its copy stays */
        rpcool__pbc_chain_free(cp.first, rpcool__pbc_heap_free, c);
    return rc;
}

RPCOOL_API void rpcool_pbc_reply_free(ProtobufCService *svc, ProtobufCMessage *out)
{
    struct rpcool__pbc_client *cl = (struct rpcool__pbc_client *)(void *)svc;
    if (!svc || !out) return;
    struct rpcool__pbc_chunk *rep = (struct rpcool__pbc_chunk *)(void *)out - 1;
    if (rep->magic != RPCOOL__PBC_REP_MAGIC) return;
    rpcool__pbc_chain_free(rep->scratch, rpcool__pbc_heap_free, cl->c);
    rpcool__pbc_reply_chain_free(cl->c, rep);
}

/* ---- server */

enum { RPCOOL__PBC_RUNNING = 0, RPCOOL__PBC_DONE };

struct rpcool__pbc_call { /* one call at the server, from the handler to its closure */
    rpcool_deferred *d;       /* the call, deferred */
    rpcool_ctx *ctx;          /* a call not deferred: answered before the handler returns */
    int status;               /* a call not deferred: what the closure answered */
    const ProtobufCMethodDescriptor *md;
    ProtobufCMessage *in;     /* what the service got */
    int in_place;             /* in is the client's message, in the server's form: 2 when it
                                 held defaults, which go back to their markers afterwards (not
                                 over RDMA: what the handler writes to the mirror stays there) */
    struct rpcool__pbc_bounds bounds; /* the client's heap (or its mirror) */
    const struct rpcool__pbc_bounds *check; /* SANDBOX: &bounds; else NULL (trusted) */
    size_t budget;
    struct rpcool__pbc_chunk *priv; /* COPY: the private copy's blocks */
    uint32_t state;
    uint32_t refs;            /* the handler and the closure */
    rpcool_server *s;
};

static void rpcool__pbc_call_unref(struct rpcool__pbc_call *pc)
{
    if (rcp__fetch_add(&pc->refs, (uint32_t)-1) == 1u) rpcool__free(pc);
}

/* Private copies (RPCOOL_COPY) come from blocks kept between calls: a few, up to 1 MiB each, so
   a copy does not pay for fresh pages every call. */
#define RPCOOL__PBC_KEEP_N 4
#define RPCOOL__PBC_KEEP ((size_t)1 << 20)
static struct rpcool__pbc_chunk *rpcool__pbc_kept[RPCOOL__PBC_KEEP_N];

static void *rpcool__pbc_priv_alloc(void *user, size_t size, size_t *got)
{
    (void)user;
    for (int i = 0; i < RPCOOL__PBC_KEEP_N; i++) {
        struct rpcool__pbc_chunk *k = __atomic_exchange_n(&rpcool__pbc_kept[i],
                                                          (struct rpcool__pbc_chunk *)NULL,
                                                          __ATOMIC_ACQ_REL);
        if (!k) continue;
        if (sizeof *k + k->cap >= size) {
            *got = sizeof *k + k->cap;
            return k;
        }
        rpcool__free(k);
    }
    size_t want = size < RPCOOL__PBC_KEEP / 16 ? RPCOOL__PBC_KEEP / 16 : size;
    void *p = RPCOOL_MALLOC(want);
    if (p) *got = want;
    return p;
}
static void rpcool__pbc_priv_free(void *user, void *p)
{
    (void)user;
    struct rpcool__pbc_chunk *k = (struct rpcool__pbc_chunk *)p;
    if (k->cap + sizeof *k <= RPCOOL__PBC_KEEP)
        for (int i = 0; i < RPCOOL__PBC_KEEP_N; i++) {
            struct rpcool__pbc_chunk *none = NULL;
            if (__atomic_compare_exchange_n(&rpcool__pbc_kept[i], &none, k, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return;
        }
    rpcool__free(p);
}
static void *rpcool__pbc_reply_alloc(void *user, size_t size, size_t *got)
{
    struct rpcool__pbc_call *pc = (struct rpcool__pbc_call *)user;
    (void)got;
    return pc->d ? rpcool_deferred_alloc(pc->d, size) : rpcool_ctx_alloc(pc->ctx, size);
}

struct rpcool__pbc_walk_args {
    struct rpcool__pbc_walk w;
    const ProtobufCMessageDescriptor *d;
    ProtobufCMessage *m;
};
static int rpcool__pbc_walk_fn(void *p)
{
    struct rpcool__pbc_walk_args *a = (struct rpcool__pbc_walk_args *)p;
    return rpcool__pbc_walk_msg(&a->w, a->d, a->m, 0);
}

struct rpcool__pbc_copy_args {
    struct rpcool__pbc_copy *c;
    const ProtobufCMessageDescriptor *d;
    const ProtobufCMessage *src;
    ProtobufCMessage *out;
};
static int rpcool__pbc_copy_fn(void *p)
{
    struct rpcool__pbc_copy_args *a = (struct rpcool__pbc_copy_args *)p;
    int err = 0;
    a->out = rpcool__pbc_copy_msg(a->c, a->d, a->src, 0, &err);
    return err;
}

/* The client's message in place, to or from wire form; reads of its heap with faults
   contained, whatever the mode. */
static int rpcool__pbc_inplace(struct rpcool__pbc_call *pc, int to_wire)
{
    struct rpcool__pbc_walk_args a;
    a.w.to_wire = to_wire;
    a.w.heap = pc->check;
    a.w.budget = pc->budget;
    a.w.ndfl = 0;
    a.w.restore = 0;
    a.d = pc->md->input;
    a.m = pc->in;
    int rc = rpcool__guarded(rpcool__pbc_walk_fn, &a, RPCOOL_E_FAULT);
    if (!to_wire && a.w.ndfl) pc->in_place = 2;
    return rc;
}

/* Answer the call: the reply copied into the client's heap (what lies there already is
   referenced), the input given back in wire form, the private copy freed. */
static void rpcool__pbc_closure(const ProtobufCMessage *msg, void *data)
{
    struct rpcool__pbc_call *pc = (struct rpcool__pbc_call *)data;
    uint32_t running = RPCOOL__PBC_RUNNING;
    if (!rcp__cas(&pc->state, &running, (uint32_t)RPCOOL__PBC_DONE)) { /* the call ended */
        rpcool__pbc_call_unref(pc);
        return;
    }
    int status = RPCOOL_PBC_FAILED;
    struct rpcool__pbc_copy cp;
    memset(&cp, 0, sizeof cp);
    if (msg && msg->descriptor != pc->md->output) {
        status = RPCOOL_E_INVAL; /* a service bug: a reply of another type */
    } else if (msg) {
        cp.heap = &pc->bounds;
        cp.keep = 1;
        cp.budget = pc->budget;
        cp.alloc = rpcool__pbc_reply_alloc;
        cp.user = pc;
        cp.next_cap = RPCOOL__PBC_CHUNK;
        struct rpcool__pbc_copy_args a = {&cp, pc->md->output, msg, NULL};
        status = rpcool__guarded(rpcool__pbc_copy_fn, &a, RPCOOL_E_FAULT);
        if (cp.full) status = SHMHEAP_E_FULL;
    }
    if (pc->in_place == 2) { /* descriptors stay ours: the client sets its own again */
        int rc = rpcool__pbc_inplace(pc, 1);
        if (rc && status >= 0) status = rc; /* the client changed it meanwhile */
    }
    rpcool__pbc_chain_free(pc->priv, rpcool__pbc_priv_free, NULL);
    if (!pc->d) { /* RDMA: the handler returns the status; the blocks travel with it */
        if (status == 0) rpcool_ctx_reply(pc->ctx, cp.first, sizeof *cp.first + cp.first->used);
        pc->status = status;
    } else if (status == 0) {
        rpcool_deferred_reply(pc->d, 0, cp.first, sizeof *cp.first + cp.first->used);
    } else {
        rpcool_deferred_fail(pc->d, status); /* and frees the reply's blocks (section 6) */
    }
    rpcool__pbc_call_unref(pc);
}

/* The call ends before the closure came (a fault in the service; a call that was not deferred
   and whose closure did not come before the method returned): answer code; a late closure
   then only lets go. */
static void rpcool__pbc_abandon(struct rpcool__pbc_call *pc, int code)
{
    uint32_t running = RPCOOL__PBC_RUNNING;
    if (!rcp__cas(&pc->state, &running, (uint32_t)RPCOOL__PBC_DONE)) return;
    if (pc->in_place == 2) rpcool__pbc_inplace(pc, 1);
    rpcool__pbc_chain_free(pc->priv, rpcool__pbc_priv_free, NULL);
    pc->priv = NULL;
    if (pc->d) rpcool_deferred_fail(pc->d, code);
    else pc->status = code;
}

struct rpcool__pbc_invoke_args {
    ProtobufCService *impl;
    unsigned method;
    struct rpcool__pbc_call *pc;
};
static int rpcool__pbc_invoke_fn(void *p)
{
    struct rpcool__pbc_invoke_args *a = (struct rpcool__pbc_invoke_args *)p;
    a->impl->invoke(a->impl, a->method, a->pc->in, rpcool__pbc_closure, a->pc);
    return 0;
}

static int rpcool__pbc_handler(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    ProtobufCService *impl = (ProtobufCService *)user;
    const ProtobufCServiceDescriptor *sd = impl->descriptor;
    if (len != sizeof(struct rpcool__pbc_req) || (uintptr_t)arg % 8) return RPCOOL_E_PROTO;
    struct rpcool__pbc_req rq;
    memcpy(&rq, arg, sizeof rq); /* one read: the client may change its frame meanwhile */
    if (rq.magic != RPCOOL__PBC_REQ_MAGIC || rq.method >= sd->n_methods ||
        rq.key != rpcool__pbc_key(sd, (unsigned)rq.method))
        return RPCOOL_E_PROTO;
    unsigned flags = rpcool_ctx_safety(ctx);
    struct rpcool__pbc_call *pc = (struct rpcool__pbc_call *)RPCOOL_MALLOC(sizeof *pc);
    if (!pc) return -ENOMEM;
    memset(pc, 0, sizeof *pc);
    pc->md = &sd->methods[rq.method];
    pc->bounds.h = rpcool_ctx_heap(ctx); /* NULL over RDMA: the mirror, through ctx */
    pc->bounds.ctx = ctx;
    pc->budget = pc->bounds.h ? shmheap_size(pc->bounds.h) : ctx->s->max_copy;
    int rc;
    /* over RDMA every mode reads a private copy: writing the mirror in place costs more */
    if ((flags & RPCOOL_COPY) || !pc->bounds.h) { /* a private, validated copy */
        struct rpcool__pbc_copy cp;
        memset(&cp, 0, sizeof cp);
        cp.from_wire = 1;
        cp.heap = &pc->bounds;
        cp.budget = pc->budget;
        cp.alloc = rpcool__pbc_priv_alloc;
        cp.next_cap = RPCOOL__PBC_CHUNK;
        struct rpcool__pbc_copy_args a = {&cp, pc->md->input, rq.msg, NULL};
        rc = rpcool__guarded(rpcool__pbc_copy_fn, &a, RPCOOL_E_FAULT);
        pc->priv = cp.first;
        pc->in = a.out;
    } else { /* in place: checked under SANDBOX, trusted otherwise */
        pc->in = rq.msg;
        pc->in_place = 1;
        pc->check = (flags & RPCOOL_SANDBOX) ? &pc->bounds : NULL;
        rc = rpcool__pbc_inplace(pc, 0);
    }
    if (!rc) rc = rpcool_ctx_defer(ctx, &pc->d); /* the closure may come later, from anywhere */
    if (rc) {
        if (rc == RPCOOL_E_FAULT) rcp__fetch_add(&ctx->s->st.faults, 1u);
        if (pc->in_place == 2 && rc != RPCOOL_E_FAULT) rpcool__pbc_inplace(pc, 1); /* if it can */
        rpcool__pbc_chain_free(pc->priv, rpcool__pbc_priv_free, NULL);
        rpcool__free(pc);
        return rc;
    }
    pc->ctx = pc->d ? NULL : ctx;
    if (pc->d) pc->bounds.ctx = &pc->d->ctx; /* the handler's ctx ends with it: the token's */
    struct rpcool__pbc_invoke_args ia = {impl, (unsigned)rq.method, pc};
    pc->refs = 2;
    if (flags & RPCOOL_SANDBOX) { /* the service's own fault: an error reply */
        if (rpcool__guarded(rpcool__pbc_invoke_fn, &ia, RPCOOL_E_FAULT)) {
            rcp__fetch_add(&ctx->s->st.faults, 1u);
            rpcool__pbc_abandon(pc, RPCOOL_E_FAULT);
        }
    } else {
        rpcool__pbc_invoke_fn(&ia);
    }
    int status = 0;
    if (!pc->d) { /* not deferred (cannot happen with a transport that defers) */
        rpcool__pbc_abandon(pc, RPCOOL_E_NOTSUP);
        status = pc->status;
    }
    rpcool__pbc_call_unref(pc);
    return status; /* with a deferred call: ignored, the closure answers */
}

RPCOOL_API int rpcool_pbc_serve(rpcool_server *s, unsigned fn, ProtobufCService *impl,
                                unsigned safety)
{
    if (!s || !impl || !impl->descriptor || !impl->invoke) return RPCOOL_E_INVAL;
    return rpcool_server_add_handler(s, fn, rpcool__pbc_handler, impl, safety);
}

#endif /* RPCOOL_PBC_IMPLEMENTATION */
