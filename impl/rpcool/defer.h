/* SPDX-License-Identifier: MIT */
/* impl/rpcool/defer.h - rpcool's deferred replies: a handler takes its call out of the serving
   thread (rpcool_ctx_defer) and any thread finishes it later (rpcool_deferred_reply). Part of
   rpcool.h's implementation, included by it; not a header of its own. Transport-neutral: a
   transport's side of it is its table's hold and reply.

   A token is held twice: by the serving path until the handler has returned, and by the user
   until rpcool_deferred_reply. Whoever finishes first answers the client (one atomic flag), the
   last to let go frees the token and the argument's private copy. The connection's state stays
   while tokens of its calls exist (hold: +1 when the call is deferred, -1 when the token goes).
   What the transport keeps per call moves to the token in hold (shared memory: the blocks of
   rpcool_ctx_alloc before the defer, and of rpcool_deferred_alloc after it, freed if the answer
   fails or has no reply; RDMA: the reply's group), so a deferred answer settles as one given by
   the handler's return. */

/* >>defer - deferred replies ------------------------------------------------------------------- */

RPCOOL_API int rpcool_ctx_defer(rpcool_ctx *ctx, rpcool_deferred **out)
{
    if (!ctx || !out) return RPCOOL_E_INVAL;
    if (!ctx->tp->reply) return RPCOOL_E_NOTSUP; /* a transport that answers in order only */
    if (ctx->dfr) return RPCOOL_E_INVAL;
    rpcool_deferred *d = (rpcool_deferred *)RPCOOL_MALLOC(sizeof *d);
    if (!d) return -ENOMEM;
    memset(&d->blk, 0, sizeof d->blk);
    pthread_mutex_init(&d->lock, NULL);
    d->blk.lock = &d->lock;
    d->ctx = *ctx;
    d->ctx.dfr = d;
    d->ctx.guard = NULL;
    d->ctx.w = NULL; /* the serving thread's records (time limit) stay with that thread */
    int rc = ctx->tp->hold(&d->ctx, 1);
    if (rc) {
        pthread_mutex_destroy(&d->lock);
        RPCOOL_FREE(d);
        return rc;
    }
    ctx->cookie = d->ctx.cookie; /* what the handler allocates from now on goes with it too */
    d->done = 0;
    d->refs = 2;
    d->copy = (char *)(uintptr_t)ctx->copy;
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
