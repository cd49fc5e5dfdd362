/* SPDX-License-Identifier: MIT */
/* impl/rpcool_defer.h - rpcool's deferred replies: a handler takes its call out of the serving
   thread (rpcool_ctx_defer) and any thread finishes it later (rpcool_deferred_reply). Part of
   rpcool.h's implementation, included by it; not a header of its own.

   A token is held twice: by the serving path until the handler has returned, and by the user
   until rpcool_deferred_reply. Whoever finishes first answers the client (one atomic flag), the
   last to let go frees the token and the argument's private copy. The connection's heap stays
   mapped while tokens of its calls exist (rpcool__drain waits for ndeferred to reach 0). On
   shared memory the token also records the call's blocks (those of rpcool_ctx_alloc before the
   defer, and of rpcool_deferred_alloc): an answer that fails or has no reply frees them first,
   as rpcool__blocks_settle does for a call answered by its handler's return (over RDMA the
   reply's group does the same, in rpcool__r_done). */

/* >>defer - deferred replies ------------------------------------------------------------------- */

struct rpcool_deferred {
    rpcool_ctx ctx;   /* the call's context, kept (guard NULL: no checked accessors) */
    uint32_t done;    /* the call was answered */
    uint32_t refs;    /* serving path + user */
    char *copy;       /* the argument's private copy (RPCOOL_COPY), owned now by the token */
    struct rpcool__blocks blk; /* shared memory: the call's blocks, freed if it fails or has no
                                  reply, as a call answered by its handler's return */
    pthread_mutex_t lock; /* guards blk */
};

RPCOOL_API int rpcool_ctx_defer(rpcool_ctx *ctx, rpcool_deferred **out)
{
    if (!ctx || !out) return RPCOOL_E_INVAL;
    if (!ctx->tp->reply) return RPCOOL_E_NOTSUP; /* a transport that answers in order only */
    if (ctx->dfr) return RPCOOL_E_INVAL;
    rpcool_deferred *d = (rpcool_deferred *)RPCOOL_MALLOC(sizeof *d);
    if (!d) return -ENOMEM;
    memset(&d->blk, 0, sizeof d->blk);
    if (ctx->blk && ctx->blk->n) { /* the blocks allocated so far go with the token */
        d->blk.p = (void **)rpcool__calloc(ctx->blk->n, sizeof *d->blk.p);
        if (!d->blk.p) {
            RPCOOL_FREE(d);
            return -ENOMEM;
        }
        memcpy(d->blk.p, ctx->blk->p, ctx->blk->n * sizeof *d->blk.p);
        d->blk.n = d->blk.cap = ctx->blk->n;
        ctx->blk->n = 0;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->blk.lock = &d->lock;
    if (ctx->blk) ctx->blk = &d->blk; /* and those allocated from now on */
    d->ctx = *ctx;
    d->ctx.dfr = d;
    d->ctx.guard = NULL;
    d->ctx.w = NULL; /* the serving thread's records (blocks, time limit) stay with that thread */
    d->done = 0;
    d->refs = 2;
    d->copy = (char *)(uintptr_t)ctx->copy;
    ctx->tp->hold(ctx, 1);
    ctx->dfr = d;
    *out = d;
    return 0;
}

RPCOOL_API void *rpcool_deferred_alloc(rpcool_deferred *d, size_t size)
{
    return d && !rcp__load(&d->done) ? rpcool_ctx_alloc(&d->ctx, size) : NULL;
}

/* Answer the client once; 1 if this call answered it. */
static int rpcool__defer_finish(rpcool_deferred *d, int status, void *p, size_t len)
{
    uint32_t zero = 0;
    if (!rcp__cas(&d->done, &zero, 1u)) return 0;
    d->ctx.tp->reply(&d->ctx, status, p, len);
    return 1;
}

static void rpcool__defer_unref(rpcool_deferred *d)
{
    uint32_t held = rcp__fetch_add(&d->refs, (uint32_t)-1);
    RPCOOL_ASSERT(held == 1u || held == 2u); /* the serving path's and the user's, no more */
    if (held != 1u) return;
    rpcool_ctx ctx = d->ctx;
    rpcool__free(d->copy);
    rpcool__free(d->blk.p);
    pthread_mutex_destroy(&d->lock);
    RPCOOL_FREE(d);
    ctx.tp->hold(&ctx, -1); /* last: the heap may go after this */
}

/* Shared memory's side of a deferred call (the seam's hold and reply). The write to the
   response line is the library's access to the client's heap: faults contained, as in
   rpcool_ctx_alloc. */
static void rpcool__shm_hold(const rpcool_ctx *ctx, int delta)
{
    rcp__fetch_add(&ctx->sc->ndeferred, (uint32_t)delta);
}

struct rpcool__defer_done {
    rpcool_ctx *ctx;
    int status;
    void *p;
    size_t len;
};

static int rpcool__defer_complete_fn(void *arg)
{
    struct rpcool__defer_done *a = (struct rpcool__defer_done *)arg;
    rpcool_ctx *ctx = a->ctx;
    rpcool__complete(ctx->sc->hdr, ctx->slot, ctx->gen, a->status, a->p, a->p ? a->len : 0);
    return 0;
}

static int rpcool__shm_reply(rpcool_ctx *ctx, int status, void *p, size_t len)
{
    rpcool_deferred *d = ctx->dfr;
    pthread_mutex_lock(&d->lock); /* a failed call, or one without a reply: free its blocks */
    int keep = status >= 0 && p && !(ctx->wflags & RPCOOL__DISCARD);
    struct rpcool__free_args f = {ctx->sc->heap, d->blk.p, keep ? 0u : d->blk.n};
    d->blk.n = 0;
    int fault = f.n && rpcool__guarded(rpcool__free_fn, &f, 1);
    pthread_mutex_unlock(&d->lock);
    if (!keep) {
        p = NULL;
        len = 0;
    }
    struct rpcool__defer_done a = {ctx, status, p, len};
    if (!fault && !rpcool__guarded(rpcool__defer_complete_fn, &a, 1)) return 0;
    rcp__fetch_add(&ctx->s->st.faults, 1u);
    rpcool__condemn(ctx->s, ctx->sc, "a fault on its heap in rpcool_deferred_reply");
    return 1;
}

/* The serving path lets go once the handler returned. A handler that faulted (SANDBOX) or
   ended with rpcool_ctx_fail or a failed checked accessor after deferring ends its call now. */
static void rpcool__defer_handoff(struct rpcool__worker *w, rpcool_ctx *ctx, int status)
{
    rpcool_deferred *d = ctx->dfr;
    if (d->copy && d->copy == w->buf) { /* the token keeps the argument's copy */
        w->buf = NULL;
        w->cap = 0;
    }
    if (ctx->aborted || ctx->fault_sig) rpcool__defer_finish(d, status, NULL, 0);
    rpcool__defer_unref(d);
}

RPCOOL_API int rpcool_deferred_reply(rpcool_deferred *d, int status, void *p, size_t len)
{
    if (!d) return RPCOOL_E_INVAL;
    int rc = 0;
    if (p && !d->ctx.tp->in_range(&d->ctx, p, len)) { /* never hand out private pointers */
        status = rc = RPCOOL_E_BADPTR;
        p = NULL;
    }
    if (!rpcool__defer_finish(d, status, p, len)) rc = RPCOOL_E_INVAL;
    rpcool__defer_unref(d);
    return rc;
}

RPCOOL_API int rpcool_deferred_fail(rpcool_deferred *d, int code)
{
    return rpcool_deferred_reply(d, code, NULL, 0);
}
