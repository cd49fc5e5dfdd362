/* SPDX-License-Identifier: MIT */
/* impl/handle.h - the one handle rule of the rpcool headers: a table, per process, of the
 * handles that are open. Internal, not a public API.
 *
 * Every function given a handle asks rcp__handle_check before it reads the handle's memory:
 * RCP__H_CLOSED for a pointer that is not an open handle (closed already), RCP__H_FORKED for one
 * made before a fork() of the process asking (each entry keeps the fork generation it was made
 * in). A close takes its handle out with rcp__handle_del, which says whether this call took it
 * out, so two closes (following or racing each other) free the memory once. The same address
 * handed out again by a later open is that new handle, as a file descriptor's number is.
 *
 * Lookups take no lock: linear probing over pointers, read under a sequence count that a
 * removal (which shifts entries back) makes odd. The table grows by copying and keeps its old
 * copies (a reader may still be probing one; together they are smaller than the last). Adds and
 * removals hold a mutex, also held across fork() so that a child never inherits it locked. A
 * lookup costs a hash and two or three loads of lines nobody writes on the call path. */
#ifndef RCP__HANDLE_H
#define RCP__HANDLE_H
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "platform.h"

#define RCP__H_OPEN 0
#define RCP__H_CLOSED 1
#define RCP__H_FORKED 2
#define RCP__H_FIRST_CAP 64u /* entries of the first table (static); at most half are used */

struct rcp__hent {
    uintptr_t p;  /* 0 = free */
    uint64_t gen; /* the fork generation it was made in */
};
struct rcp__htab {
    size_t cap; /* a power of two */
    struct rcp__hent *e;
    struct rcp__htab *old; /* the table it replaced (kept, and reachable for leak checkers) */
};

static struct rcp__hent rcp__h_first[RCP__H_FIRST_CAP];
static struct rcp__htab rcp__h_tab0 = {RCP__H_FIRST_CAP, rcp__h_first, NULL};
static struct rcp__htab *rcp__h_tab = &rcp__h_tab0;
static size_t rcp__h_live;  /* under rcp__h_mu */
static uint64_t rcp__h_seq; /* odd while a removal moves entries */
static uint64_t rcp__h_gen; /* forks this process is from */
static pthread_mutex_t rcp__h_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rcp__h_once = PTHREAD_ONCE_INIT;

static inline void rcp__h_prepare(void) { pthread_mutex_lock(&rcp__h_mu); }
static inline void rcp__h_parent(void) { pthread_mutex_unlock(&rcp__h_mu); }
static inline void rcp__h_child(void)
{
    rcp__store(&rcp__h_gen, rcp__h_gen + 1);
    pthread_mutex_unlock(&rcp__h_mu);
}
static inline void rcp__h_init(void)
{
    pthread_atfork(rcp__h_prepare, rcp__h_parent, rcp__h_child);
}

/* Registers the fork handlers. A header whose own fork handlers hold a lock under which it
   adds or removes handles calls this before registering them, so that at fork() its lock is
   taken first, as everywhere else (prepare handlers run in the reverse order). */
static inline void rcp__handle_init(void) { pthread_once(&rcp__h_once, rcp__h_init); }

static inline size_t rcp__h_hash(uintptr_t p, size_t cap)
{
    return (size_t)(((uint64_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 32) & (cap - 1);
}

/* under rcp__h_mu: p into a free slot of t (there is room) */
static inline void rcp__h_put(struct rcp__htab *t, uintptr_t p, uint64_t gen)
{
    size_t i = rcp__h_hash(p, t->cap);
    while (rcp__load_relaxed(&t->e[i].p)) i = (i + 1) & (t->cap - 1);
    rcp__store(&t->e[i].gen, gen);
    rcp__store(&t->e[i].p, p);
}

/* Record h as open, made in this process now. 0, or -ENOMEM. */
static inline int rcp__handle_add(const void *h)
{
    int r = 0;
    rcp__handle_init();
    pthread_mutex_lock(&rcp__h_mu);
    struct rcp__htab *t = rcp__h_tab;
    if ((rcp__h_live + 1) * 2 > t->cap) {
        size_t cap = t->cap * 2;
        struct rcp__htab *n = (struct rcp__htab *)calloc(1, sizeof *n + cap * sizeof *n->e);
        if (n) {
            n->cap = cap;
            n->e = (struct rcp__hent *)(n + 1);
            n->old = t;
            for (size_t i = 0; i < t->cap; i++)
                if (t->e[i].p) rcp__h_put(n, t->e[i].p, t->e[i].gen);
            rcp__store(&rcp__h_tab, n); /* the old one stays: a reader may be in it */
            t = n;
        } else {
            r = -ENOMEM;
        }
    }
    if (!r) {
        rcp__h_put(t, (uintptr_t)h, rcp__load(&rcp__h_gen));
        rcp__h_live++;
    }
    pthread_mutex_unlock(&rcp__h_mu);
    return r;
}

/* under rcp__h_mu, or under a sequence count read before: h's slot in t, or -1 */
static inline long rcp__h_find(struct rcp__htab *t, uintptr_t p)
{
    size_t i = rcp__h_hash(p, t->cap);
    for (size_t n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        uintptr_t q = rcp__load(&t->e[i].p);
        if (q == p) return (long)i;
        if (!q) break;
    }
    return -1;
}

/* RCP__H_OPEN, RCP__H_CLOSED or RCP__H_FORKED. Takes no lock; h's memory is not read. */
static inline int rcp__handle_check(const void *h)
{
    int r;
    uint64_t s1, s2;
    if (!h) return RCP__H_CLOSED;
#if defined(__SANITIZE_THREAD__)
    if (1) { /* ThreadSanitizer: under the mutex (it models no seqlock without fences) */
        pthread_mutex_lock(&rcp__h_mu);
        long i = rcp__h_find(rcp__h_tab, (uintptr_t)h);
        r = i < 0                                  ? RCP__H_CLOSED
            : rcp__h_tab->e[i].gen == rcp__h_gen ? RCP__H_OPEN
                                                 : RCP__H_FORKED;
        pthread_mutex_unlock(&rcp__h_mu);
        return r;
    }
#endif
    do {
        while ((s1 = rcp__load(&rcp__h_seq)) & 1) rcp__cpu_relax();
        struct rcp__htab *t = rcp__load(&rcp__h_tab);
        long i = rcp__h_find(t, (uintptr_t)h);
        r = i < 0 ? RCP__H_CLOSED
                  : rcp__load(&t->e[i].gen) == rcp__load(&rcp__h_gen) ? RCP__H_OPEN
                                                                       : RCP__H_FORKED;
        s2 = rcp__load(&rcp__h_seq); /* after the entries' acquire loads (no fence: TSan) */
    } while (s1 != s2);
    return r;
}

/* Take h out as its close begins: RCP__H_OPEN if this call took it out (the caller then frees
   it), else what rcp__handle_check says (nothing is taken out). forked_ok: a handle made before
   a fork is taken out too (a header whose handles children may use and close). */
static inline int rcp__handle_del(const void *h, int forked_ok)
{
    int r = RCP__H_CLOSED;
    if (!h) return r;
    pthread_mutex_lock(&rcp__h_mu);
    struct rcp__htab *t = rcp__h_tab;
    long at = rcp__h_find(t, (uintptr_t)h);
    size_t m = t->cap - 1, i = (size_t)at, j = i;
    if (at >= 0) r = forked_ok || t->e[i].gen == rcp__h_gen ? RCP__H_OPEN : RCP__H_FORKED;
    if (r == RCP__H_OPEN) { /* backward shift: no tombstones, so the table never fills up */
        rcp__store_relaxed(&rcp__h_seq, rcp__h_seq + 1); /* before the release stores below */
        for (;;) {
            j = (j + 1) & m;
            uintptr_t q = t->e[j].p;
            if (!q) break;
            size_t k = rcp__h_hash(q, t->cap);
            if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
                rcp__store(&t->e[i].gen, t->e[j].gen);
                rcp__store(&t->e[i].p, q);
                i = j;
            }
        }
        rcp__store(&t->e[i].p, (uintptr_t)0);
        rcp__store(&rcp__h_seq, rcp__h_seq + 1);
        rcp__h_live--;
    }
    pthread_mutex_unlock(&rcp__h_mu);
    return r;
}

/* A header's code for h by the handle rule: 0 if it is open in this process (a NULL h too:
   each function says what NULL means), else the header's own BADHANDLE or FORKED code. */
static inline int rcp__handle_code(const void *h, int badhandle, int forked)
{
    int k = h ? rcp__handle_check(h) : RCP__H_OPEN;
    return RCP__LIKELY(k == RCP__H_OPEN) ? 0 : k == RCP__H_FORKED ? forked : badhandle;
}
/* A close: 0 when this call took h out of the table (the caller frees it), else its code. */
static inline int rcp__handle_take_code(const void *h, int badhandle, int forked)
{
    int k = rcp__handle_del(h, 0);
    return k == RCP__H_OPEN ? 0 : k == RCP__H_FORKED ? forked : badhandle;
}
/* Return from the calling function when code (a handle's, above) is not 0: with the code, with
   NULL or 0 and errno EBADF (functions that return a pointer or a size), or with nothing. */
#define RCP__HRETURN(code)                                                                         \
    do {                                                                                           \
        int rcp__hc = (code);                                                                      \
        if (RCP__UNLIKELY(rcp__hc)) return rcp__hc;                                                \
    } while (0)
#define RCP__HRETURN_NULL(code)                                                                    \
    do {                                                                                           \
        if (RCP__UNLIKELY(code)) {                                                                 \
            errno = EBADF;                                                                         \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)
#define RCP__HRETURN_ZERO(code)                                                                    \
    do {                                                                                           \
        if (RCP__UNLIKELY(code)) {                                                                 \
            errno = EBADF;                                                                         \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
#define RCP__HRETURN_VOID(code)                                                                    \
    do {                                                                                           \
        if (RCP__UNLIKELY(code)) return;                                                           \
    } while (0)
#endif /* RCP__HANDLE_H */
