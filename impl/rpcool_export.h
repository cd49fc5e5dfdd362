/* SPDX-License-Identifier: MIT */
/* impl/rpcool_export.h - rpcool's shared data: a range of a pod heap exported under a name with
   an ALock table beside it (section 13 of rpcool.h's manual). Part of rpcool.h's
   implementation, included by it; not a header of its own. */

/* >>export - shared data: exports, their locks, optimistic reads ------------------------------- */

/* The export record: root "rpcool.x.NAME" of the heap, 64-byte aligned. The version words follow
   the header, one per lock, 64 bytes apart (a seqlock each: written only by the lock's holder, with
   plain stores, by a CPU or by an RDMA WRITE; odd while a WRITE-mode holder is inside). */
#define RPCOOL__X_MAGIC 0x315450584f4f4352ull /* "RCOOXPT1" */
#define RPCOOL__X_VERSION 1u
#define RPCOOL__X_LIVE 1u
#define RPCOOL__X_WITHDRAWN 2u
#define RPCOOL__X_ROOT "rpcool.x."    /* the record's root: this and the export's name */
#define RPCOOL__X_TABLE "rpcool.xl."  /* the lock table's root: this and the record's offset */
#define RPCOOL__X_VSTRIDE 64u         /* bytes between two version words */
#define RPCOOL__X_HOLD_LOCAL 0x4c43484f4c44ull  /* an rpcool_xhold's tag: a local hold */
#define RPCOOL__X_HOLD_REMOTE 0x52454d4f5445ull /* a remote hold */
#define RPCOOL__X_SPINS 64u           /* an optimistic read spins this often before yielding */
#define RPCOOL__X_ROOTLEN 64          /* room for a root name */

struct rpcool__xrec {
    uint64_t magic;
    uint32_t version, nlocks;
    uint64_t base_off, len;   /* the data: [heap base + base_off, + len) */
    uint32_t budget, remote;
    uint32_t state;           /* RPCOOL__X_LIVE, _WITHDRAWN */
    uint32_t pad;
    char table[40];           /* the lock table's root name */
    char name[40];            /* the export's name */
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__xrec) == 128, "export record");

struct rpcool__xsvc; /* the exporter's RDMA service (RPCOOL_WITH_RDMA) */

struct rpcool_export {
    shmheap *h;
    struct rpcool__xrec *rec;
    alock_table *t;
    char *base;
    size_t len;
    uint32_t nlocks;
    int owner;                /* the exporter's handle (its close withdraws) */
    int live_fd;              /* holds the liveness file's byte locks */
    char name[RPCOOL_EXPORT_NAME_MAX + 1];
    struct rcp__logger lg;
    struct rpcool__xsvc *svc;
};

static int rpcool__x_serve(rpcool_export *x, const rpcool_export_opts *opts);
static void rpcool__x_stop(rpcool_export *x);

static uint64_t *rpcool__x_ver(const struct rpcool__xrec *rec, uint32_t idx)
{
    return (uint64_t *)((char *)rec + sizeof *rec + (size_t)idx * RPCOOL__X_VSTRIDE);
}

static int rpcool__x_name(const char *name, char *root, size_t n)
{
    int rc = rpcool__check_name(name);
    if (rc) return rc;
    if (strlen(name) > RPCOOL_EXPORT_NAME_MAX) return RPCOOL_E_BADNAME;
    snprintf(root, n, "%s%s", RPCOOL__X_ROOT, name);
    return 0;
}

/* alock's codes, as rpcool says them where rpcool has the condition */
static int rpcool__x_alock_rc(int rc)
{
    switch (rc) {
    case ALOCK_E_INVAL: return RPCOOL_E_INVAL;
    case ALOCK_E_TIMEDOUT: return RPCOOL_E_TIMEOUT;
    case ALOCK_E_PEER: return RPCOOL_E_PEERDEAD;
    case ALOCK_E_NOTSUP: return RPCOOL_E_NOTSUP;
    default: return rc;
    }
}

/* The data area of a heap: where shmheap_contains starts to say yes, and how far. */
static void rpcool__x_whole(shmheap *h, char **base, size_t *len)
{
    char *b = (char *)shmheap_base(h);
    size_t size = shmheap_size(h), pg = rpcool__page_size(), off = 0;
    while (off < size && !shmheap_contains(h, b + off, 0)) off += pg;
    size_t lo = 0, hi = size - off; /* the longest len that it contains */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (shmheap_contains(h, b + off, mid)) lo = mid;
        else hi = mid - 1;
    }
    *base = b + off;
    *len = lo;
}

/* Who uses a record: its lock table's liveness file (alock's live_path, which rpcool names after
   the record) carries two byte locks of rpcool's own (alock locks bytes from 2^40 up): every
   handle of the export holds a read lock on byte RPCOOL__X_USERS, the exporter a write lock on
   byte RPCOOL__X_OWNER. The kernel drops them when a process dies, in any pid namespace. */
#define RPCOOL__X_USERS 0
#define RPCOOL__X_OWNER 1

static void rpcool__x_live_path(shmheap *h, const struct rpcool__xrec *rec, char *out, size_t n)
{
    snprintf(out, n, "/dev/shm/rpcool.x.%llx.%llx",
             (unsigned long long)(uintptr_t)shmheap_base(h),
             (unsigned long long)((const char *)rec - (const char *)shmheap_base(h)));
}

static int rpcool__x_lk(int fd, int cmd, short type, off_t at)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    if (fcntl(fd, cmd, &fl)) return -errno;
    return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}

/* A withdrawn record: the last handle out (none holds byte RPCOOL__X_USERS) frees it, its lock
   table and the liveness file. Callers have closed their own descriptor of the file. */
static void rpcool__x_reclaim(shmheap *h, struct rpcool__xrec *rec)
{
    char path[96], table[sizeof rec->table];
    struct stat st;
    rpcool__x_live_path(h, rec, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return; /* reclaimed already */
    if (rpcool__x_lk(fd, F_OFD_SETLK, F_WRLCK, RPCOOL__X_USERS) == 0 && !fstat(fd, &st) &&
        st.st_nlink > 0) { /* nobody else: (a second reclaimer finds the file unlinked) */
        memcpy(table, rec->table, sizeof table);
        table[sizeof table - 1] = 0;
        rcp__store(&rec->magic, (uint64_t)0);
        alock_table_unlink(h, table); /* the table and the liveness file */
        shmheap_free(h, rec);
    }
    close(fd);
}

/* Withdraw rec: no new handle, the name free for another export. */
static void rpcool__x_withdraw(shmheap *h, struct rpcool__xrec *rec, const char *root)
{
    rcp__store(&rec->state, RPCOOL__X_WITHDRAWN);
    if (shmheap_root_get(h, root) == (void *)rec) shmheap_root_set(h, root, NULL);
}

/* A handle of rec: the liveness file's byte locks, then its lock table. */
static int rpcool__x_handle(shmheap *h, struct rpcool__xrec *rec, const char *name, int owner,
                            const alock_table_opts *to, rpcool_export **out)
{
    char path[96], table[sizeof rec->table];
    int rc;
    uint64_t off, len;
    uint32_t nlocks;
    rpcool_export *x = (rpcool_export *)rpcool__calloc(1, sizeof *x);
    if (!x) return -ENOMEM;
    rpcool__x_live_path(h, rec, path, sizeof path);
    x->live_fd = open(path, O_RDWR | O_CLOEXEC);
    if (x->live_fd < 0) {
        rc = RPCOOL_E_NOEXPORT; /* reclaimed meanwhile */
        goto fail;
    }
    rc = rpcool__x_lk(x->live_fd, F_OFD_SETLK, F_RDLCK, RPCOOL__X_USERS);
    if (!rc && owner) rc = rpcool__x_lk(x->live_fd, F_OFD_SETLK, F_WRLCK, RPCOOL__X_OWNER);
    if (rc) {
        rc = rc == -EAGAIN || rc == -EACCES ? RPCOOL_E_NOEXPORT : rc; /* being reclaimed */
        goto fail_fd;
    }
    /* held: nobody frees it now. The record is in memory every process of the pod can write:
       check and bound what it says. */
    off = rcp__load_relaxed(&rec->base_off);
    len = rcp__load_relaxed(&rec->len);
    nlocks = rcp__load_relaxed(&rec->nlocks);
    if (rcp__load(&rec->magic) != RPCOOL__X_MAGIC || rec->version != RPCOOL__X_VERSION ||
        strncmp(rec->name, name, sizeof rec->name)) {
        rc = RPCOOL_E_PROTO;
        goto fail_fd;
    }
    if (rcp__load(&rec->state) != RPCOOL__X_LIVE) {
        rc = RPCOOL_E_NOEXPORT;
        goto fail_fd;
    }
    if (off > shmheap_size(h) || len > shmheap_size(h) - off || nlocks == 0 ||
        nlocks > RPCOOL_EXPORT_MAX_LOCKS ||
        !shmheap_contains(h, rec, sizeof *rec + (size_t)nlocks * RPCOOL__X_VSTRIDE)) {
        rc = RPCOOL_E_PROTO;
        goto fail_fd;
    }
    memcpy(table, rec->table, sizeof table);
    table[sizeof table - 1] = 0;
    rc = alock_table_open(h, table, to, &x->t);
    if (rc) {
        rc = rc == ALOCK_E_NOTFOUND || rc == ALOCK_E_BADTABLE ? RPCOOL_E_PROTO
                                                              : rpcool__x_alock_rc(rc);
        goto fail_fd;
    }
    if (alock_table_nlocks(x->t) != nlocks) {
        rc = RPCOOL_E_PROTO;
        goto fail_table;
    }
    x->h = h;
    x->rec = rec;
    x->base = (char *)shmheap_base(h) + off;
    x->len = (size_t)len;
    x->nlocks = nlocks;
    x->owner = owner;
    snprintf(x->name, sizeof x->name, "%s", name);
    *out = x;
    return 0;
fail_table:
    alock_table_close(x->t);
fail_fd:
    close(x->live_fd);
fail:
    rpcool__free(x);
    return rc;
}

RPCOOL_API int rpcool_export_create(shmheap *h, const char *name, void *base, size_t len,
                                    const rpcool_export_opts *opts, rpcool_export **out)
{
    rpcool_export_opts none;
    char root[RPCOOL__X_ROOTLEN], path[96];
    if (out) *out = NULL;
    if (!h || !out) return RPCOOL_E_INVAL;
    int rc = rpcool__x_name(name, root, sizeof root);
    if (rc) return rc;
    memset(&none, 0, sizeof none);
    if (!opts) opts = &none;
    uint32_t nlocks = opts->nlocks ? opts->nlocks : RPCOOL_EXPORT_DEFAULT_LOCKS;
    if (nlocks > RPCOOL_EXPORT_MAX_LOCKS) return RPCOOL_E_INVAL;
    if (opts->remote < RPCOOL_REMOTE_NONE || opts->remote > RPCOOL_REMOTE_RW)
        return RPCOOL_E_INVAL;
    char *b = (char *)base;
    if (!b && !len) rpcool__x_whole(h, &b, &len);
    else if (!b || !len || !shmheap_contains(h, b, len)) return RPCOOL_E_RANGE;
    struct rpcool__xrec *old = (struct rpcool__xrec *)shmheap_root_get(h, root);
    if (old) { /* taken, unless its exporter died: then it is withdrawn here */
        if (!shmheap_contains(h, old, sizeof *old)) return RPCOOL_E_EXPORTED;
        rpcool__x_live_path(h, old, path, sizeof path);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 && rpcool__x_lk(fd, F_OFD_GETLK, F_WRLCK, RPCOOL__X_OWNER) != 0) {
            close(fd);
            return RPCOOL_E_EXPORTED;
        }
        if (fd >= 0) close(fd);
        rpcool__x_withdraw(h, old, root);
        if (fd >= 0) rpcool__x_reclaim(h, old);
    }
    size_t bytes = sizeof(struct rpcool__xrec) + (size_t)nlocks * RPCOOL__X_VSTRIDE;
    struct rpcool__xrec *rec = (struct rpcool__xrec *)shmheap_aligned_alloc(h, 64, bytes);
    if (!rec) return SHMHEAP_E_FULL;
    memset(rec, 0, bytes);
    rec->version = RPCOOL__X_VERSION;
    rec->nlocks = nlocks;
    rec->base_off = (uint64_t)(b - (char *)shmheap_base(h));
    rec->len = len;
    rec->budget = opts->budget ? opts->budget : ALOCK_DEFAULT_BUDGET;
    rec->remote = (uint32_t)opts->remote;
    rec->state = RPCOOL__X_LIVE;
    snprintf(rec->name, sizeof rec->name, "%s", name);
    snprintf(rec->table, sizeof rec->table, "%s%llx", RPCOOL__X_TABLE,
             (unsigned long long)((char *)rec - (char *)shmheap_base(h)));
    rpcool__x_live_path(h, rec, path, sizeof path);
    alock_table_opts to;
    memset(&to, 0, sizeof to);
    to.nlocks = nlocks;
    to.budget = rec->budget;
    to.live_path = path;
    to.log = opts->log;
    to.log_user = opts->log_user;
    alock_table *t = NULL;
    rc = alock_table_create(h, rec->table, &to, &t);
    if (rc) goto fail_rec;
    alock_table_close(t);
    rcp__store(&rec->magic, RPCOOL__X_MAGIC);
    rc = rpcool__x_handle(h, rec, name, 1, &to, out);
    if (rc) goto fail_table;
    (*out)->lg = rpcool__logger(opts->log, opts->log_user);
    /* publish last: a racing create of the same name loses here */
    if (shmheap_root_get(h, root)) {
        rc = RPCOOL_E_EXPORTED;
        goto fail_handle;
    }
    rc = shmheap_root_set(h, root, rec);
    if (rc) goto fail_handle;
    if (opts->remote != RPCOOL_REMOTE_NONE) {
        rc = rpcool__x_serve(*out, opts);
        if (rc) goto fail_root;
    }
    return 0;
fail_root:
    shmheap_root_set(h, root, NULL);
fail_handle:
    alock_table_close((*out)->t);
    close((*out)->live_fd);
    rpcool__free(*out);
    *out = NULL;
fail_table:
    alock_table_unlink(h, rec->table);
fail_rec:
    shmheap_free(h, rec);
    return rc < 0 ? rpcool__x_alock_rc(rc) : RPCOOL_E_PROTO;
}

RPCOOL_API int rpcool_export_open(shmheap *h, const char *name, rpcool_export **out)
{
    char root[RPCOOL__X_ROOTLEN];
    if (out) *out = NULL;
    if (!h || !out) return RPCOOL_E_INVAL;
    int rc = rpcool__x_name(name, root, sizeof root);
    if (rc) return rc;
    struct rpcool__xrec *rec = (struct rpcool__xrec *)shmheap_root_get(h, root);
    if (!rec) return RPCOOL_E_NOEXPORT;
    if (!shmheap_contains(h, rec, sizeof *rec)) return RPCOOL_E_PROTO;
    rc = rpcool__x_handle(h, rec, name, 0, NULL, out);
    if (!rc) (*out)->lg = rpcool__logger(NULL, NULL);
    return rc;
}

RPCOOL_API int rpcool_export_close(rpcool_export *x)
{
    if (!x) return RPCOOL_E_INVAL;
    if (x->owner) {
        char root[RPCOOL__X_ROOTLEN];
        rpcool__x_stop(x);
        snprintf(root, sizeof root, "%s%s", RPCOOL__X_ROOT, x->name);
        rpcool__x_withdraw(x->h, x->rec, root);
    }
    alock_table_close(x->t);
    int withdrawn = rcp__load(&x->rec->state) != RPCOOL__X_LIVE; /* read while held */
    close(x->live_fd);
    if (withdrawn) rpcool__x_reclaim(x->h, x->rec);
    rpcool__free(x);
    return 0;
}

RPCOOL_API void *rpcool_export_base(const rpcool_export *x, size_t *len)
{
    if (len) *len = x ? x->len : 0;
    return x ? x->base : NULL;
}

RPCOOL_API uint32_t rpcool_export_nlocks(const rpcool_export *x)
{
    return x ? x->nlocks : 0;
}

/* A WRITE-mode holder makes its lock's version odd at lock and even at unlock (a version left
   odd by a holder that died moves to the next odd value). */
static void rpcool__x_ver_enter(uint64_t *v)
{
    uint64_t n = rcp__load_relaxed(v);
#if RPCOOL__TSAN /* ThreadSanitizer has no fences */
    __atomic_store_n(v, n + ((n & 1) ? 2 : 1), __ATOMIC_SEQ_CST);
#else
    rcp__store_relaxed(v, n + ((n & 1) ? 2 : 1));
    __atomic_thread_fence(__ATOMIC_RELEASE); /* before the holder's data stores */
#endif
}

static void rpcool__x_ver_leave(uint64_t *v)
{
    uint64_t n = rcp__load_relaxed(v);
    if (n & 1) rcp__store(v, n + 1); /* after the holder's data stores */
}

RPCOOL_API int rpcool_export_lock(rpcool_export *x, uint32_t idx, int mode, rpcool_xhold *h)
{
    if (!x || !h || (mode != RPCOOL_LOCK_READ && mode != RPCOOL_LOCK_WRITE) || idx >= x->nlocks)
        return RPCOOL_E_INVAL;
    memset(h, 0, sizeof *h);
    if (rcp__load(&x->rec->state) != RPCOOL__X_LIVE) return RPCOOL_E_CLOSED;
    alock_hold ah;
    int rc = alock_lock(x->t, idx, &ah);
    if (rc < 0) return rpcool__x_alock_rc(rc);
    RCP__STATIC_ASSERT(sizeof ah <= 5 * sizeof(uint64_t), "an alock_hold fits an rpcool_xhold");
    memcpy(h->priv, &ah, sizeof ah);
    h->priv[5] = RPCOOL__X_HOLD_LOCAL;
    h->x = x;
    h->idx = idx;
    h->mode = (uint32_t)mode;
    if (mode == RPCOOL_LOCK_WRITE) rpcool__x_ver_enter(rpcool__x_ver(x->rec, idx));
    return rc == ALOCK_OWNERDEAD ? RPCOOL_OWNERDEAD : 0;
}

RPCOOL_API int rpcool_export_unlock(rpcool_xhold *h)
{
    if (!h || !h->x || h->priv[5] != RPCOOL__X_HOLD_LOCAL) return RPCOOL_E_INVAL;
    rpcool_export *x = (rpcool_export *)h->x;
    alock_hold ah;
    memcpy(&ah, h->priv, sizeof ah);
    /* any mode: a version left odd by a WRITE holder that died becomes even again */
    rpcool__x_ver_leave(rpcool__x_ver(x->rec, h->idx));
    h->priv[5] = 0;
    h->x = NULL;
    return rpcool__x_alock_rc(alock_unlock(&ah));
}

/* [addr, addr+len) inside [base, base+blen)? */
static int rpcool__x_inside(const char *base, size_t blen, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = (uintptr_t)base;
    return a >= b && a - b <= blen && len <= blen - (a - b);
}

/* Copy under a seqlock: version even and the same before and after. get(0) reads the version,
   get(1) copies; both 0 or a negative code. */
static int rpcool__x_opt(uint64_t (*ver)(void *, int *), int (*copy)(void *), void *arg,
                         uint64_t limit_ns)
{
    uint64_t deadline = 0;
    for (unsigned tries = 0;; tries++) {
        int rc = 0;
        uint64_t v1 = ver(arg, &rc);
        if (rc) return rc;
        if (!(v1 & 1)) {
            if ((rc = copy(arg))) return rc;
            uint64_t v2 = ver(arg, &rc);
            if (rc) return rc;
            if (v1 == v2) return 0;
        }
        if (tries < RPCOOL__X_SPINS) {
            rcp__cpu_relax();
            continue;
        }
        uint64_t now = rcp__now_ns();
        if (!deadline) deadline = now + limit_ns;
        else if (now > deadline) return RPCOOL_E_TIMEOUT;
        sched_yield();
    }
}

struct rpcool__x_local_read {
    const uint64_t *v;
    const void *addr;
    void *buf;
    size_t len;
};

static uint64_t rpcool__x_local_ver(void *arg, int *rc)
{
    struct rpcool__x_local_read *a = (struct rpcool__x_local_read *)arg;
    *rc = 0;
    uint64_t v = rcp__load(a->v); /* acquire: the copy's loads come after it */
    return v;
}

static int rpcool__x_local_copy(void *arg)
{
    struct rpcool__x_local_read *a = (struct rpcool__x_local_read *)arg;
    memcpy(a->buf, a->addr, a->len);
#if !RPCOOL__TSAN
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copy's loads before the second version */
#endif
    return 0;
}

RPCOOL_API int rpcool_export_read(rpcool_export *x, uint32_t idx, const void *addr, void *buf,
                                  size_t len)
{
    if (!x || (!buf && len) || idx >= x->nlocks) return RPCOOL_E_INVAL;
    if (!rpcool__x_inside(x->base, x->len, addr, len)) return RPCOOL_E_RANGE;
    if (rcp__load(&x->rec->state) != RPCOOL__X_LIVE) return RPCOOL_E_CLOSED;
    struct rpcool__x_local_read a = {rpcool__x_ver(x->rec, idx), addr, buf, len};
    return rpcool__x_opt(rpcool__x_local_ver, rpcool__x_local_copy, &a,
                         (uint64_t)RPCOOL_EXPORT_DEFAULT_READ_MS * 1000000u);
}

#if 1 /* exports stay local: the remote half says "not supported" */
static int rpcool__x_serve(rpcool_export *x, const rpcool_export_opts *opts)
{
    (void)x, (void)opts;
    return RPCOOL_E_NOTSUP;
}
static void rpcool__x_stop(rpcool_export *x) { (void)x; }
#endif

/* >>x-remote - shared data: other pods' attachments -------------------------------------------- */

RPCOOL_API int rpcool_attach(const char *url, const rpcool_attach_opts *opts,
                             rpcool_remote **out)
{
    (void)url, (void)opts;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_attach_conn(rpcool_conn *c, const char *name,
                                  const rpcool_attach_opts *opts, rpcool_remote **out)
{
    (void)c, (void)name, (void)opts;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_detach(rpcool_remote *r)
{
    (void)r;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API void *rpcool_remote_base(const rpcool_remote *r, size_t *len)
{
    (void)r;
    if (len) *len = 0;
    return NULL;
}

RPCOOL_API uint32_t rpcool_remote_nlocks(const rpcool_remote *r)
{
    (void)r;
    return 0;
}

RPCOOL_API int rpcool_remote_read(rpcool_remote *r, const void *addr, void *buf, size_t len)
{
    (void)r, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_write(rpcool_remote *r, void *addr, const void *buf, size_t len)
{
    (void)r, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_lock(rpcool_remote *r, uint32_t idx, int mode, rpcool_xhold *h)
{
    (void)r, (void)idx, (void)mode, (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_unlock(rpcool_xhold *h)
{
    (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_read_opt(rpcool_remote *r, uint32_t idx, const void *addr,
                                      void *buf, size_t len)
{
    (void)r, (void)idx, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}
