/* SPDX-License-Identifier: MIT */
/* impl/rpcool/export.h - rpcool's shared data: a range of a pod heap exported under a name with
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
    int live_fd;              /* holds the liveness file's byte locks (a forked child closes
                                 its copy at the fork: rpcool__fd_track) */
    pid_t pid;                /* the process that made the handle */
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
    if (strlen(name) > RPCOOL_EXPORT_NAME_MAX) return RPCOOL_E_NAMELONG;
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

/* Let go of the handle's liveness descriptor, unless this is a forked child's inherited copy of
   the handle (the child closed the descriptor at the fork; the number may be another's now). */
static void rpcool__x_close_fd(rpcool_export *x)
{
    if (x->pid != getpid()) return;
    rpcool__fd_track(x->live_fd, 0);
    close(x->live_fd);
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
    /* an OFD lock belongs to the open file description, which a forked child shares: the
       child closes its copy at once (pthread_atfork), so it never keeps the export alive or
       its exporter seeming alive */
    rpcool__fd_track(x->live_fd, 1);
    x->pid = getpid();
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
    if ((rc = rcp__handle_add(x))) goto fail_table;
    *out = x;
    return 0;
fail_table:
    alock_table_close(x->t);
fail_fd:
    rpcool__x_close_fd(x);
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
    rcp__handle_del(*out, 0); /* made by rpcool__x_handle: out of the table before it is freed */
    alock_table_close((*out)->t);
    rpcool__x_close_fd(*out);
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
    RPCOOL__HCHECK(x);
    int rc = rpcool__handle_take(x); /* nothing below reads x's handle through the table */
    if (rc) return rc;
    if (x->owner) {
        char root[RPCOOL__X_ROOTLEN];
        rpcool__x_stop(x);
        snprintf(root, sizeof root, "%s%s", RPCOOL__X_ROOT, x->name);
        rpcool__x_withdraw(x->h, x->rec, root);
    }
    alock_table_close(x->t);
    int withdrawn = rcp__load(&x->rec->state) != RPCOOL__X_LIVE; /* read while held */
    rpcool__x_close_fd(x);
    if (withdrawn) rpcool__x_reclaim(x->h, x->rec);
    rpcool__free(x);
    return 0;
}

RPCOOL_API void *rpcool_export_base(const rpcool_export *x, size_t *len)
{
    RPCOOL__HCHECK_PTR(x);
    if (len) *len = x ? x->len : 0;
    return x ? x->base : NULL;
}

RPCOOL_API uint32_t rpcool_export_nlocks(const rpcool_export *x)
{
    RPCOOL__HCHECK_ZERO(x);
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

/* An rpcool_xhold keeps alock's hold (local or remote: n bytes) and a tag saying which. */
static void rpcool__x_hold_set(rpcool_xhold *h, void *x, uint32_t idx, int mode, uint64_t tag,
                               const void *ah, size_t n)
{
    memcpy(h->priv, ah, n);
    h->priv[5] = tag;
    h->x = x;
    h->idx = idx;
    h->mode = (uint32_t)mode;
}

/* The hold's alock hold, if it is a live hold of that kind (then it is unlocked: no more). */
static int rpcool__x_hold_take(rpcool_xhold *h, uint64_t tag, void *ah, size_t n, void **x)
{
    if (!h || !h->x || h->priv[5] != tag) return RPCOOL_E_INVAL;
    memcpy(ah, h->priv, n);
    *x = h->x;
    h->priv[5] = 0;
    h->x = NULL;
    return 0;
}

RPCOOL_API int rpcool_export_lock(rpcool_export *x, uint32_t idx, int mode, rpcool_xhold *h)
{
    RPCOOL__HCHECK(x);
    if (!x || !h || (mode != RPCOOL_LOCK_READ && mode != RPCOOL_LOCK_WRITE) || idx >= x->nlocks)
        return RPCOOL_E_INVAL;
    memset(h, 0, sizeof *h);
    if (rcp__load(&x->rec->state) != RPCOOL__X_LIVE) return RPCOOL_E_WITHDRAWN;
    alock_hold ah;
    int rc = alock_lock(x->t, idx, &ah);
    if (rc < 0) return rpcool__x_alock_rc(rc);
    RCP__STATIC_ASSERT(sizeof ah <= 5 * sizeof(uint64_t), "an alock_hold fits an rpcool_xhold");
    rpcool__x_hold_set(h, x, idx, mode, RPCOOL__X_HOLD_LOCAL, &ah, sizeof ah);
    if (mode == RPCOOL_LOCK_WRITE) rpcool__x_ver_enter(rpcool__x_ver(x->rec, idx));
    return rc == ALOCK_OWNERDEAD ? RPCOOL_OWNERDEAD : 0;
}

RPCOOL_API int rpcool_export_unlock(rpcool_xhold *h)
{
    alock_hold ah;
    void *xv;
    if (rpcool__x_hold_take(h, RPCOOL__X_HOLD_LOCAL, &ah, sizeof ah, &xv)) return RPCOOL_E_INVAL;
    rpcool_export *x = (rpcool_export *)xv;
    /* any mode: a version left odd by a WRITE holder that died becomes even again */
    rpcool__x_ver_leave(rpcool__x_ver(x->rec, h->idx));
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
    RPCOOL__HCHECK(x);
    if (!x || (!buf && len) || idx >= x->nlocks) return RPCOOL_E_INVAL;
    if (!rpcool__x_inside(x->base, x->len, addr, len)) return RPCOOL_E_RANGE;
    if (rcp__load(&x->rec->state) != RPCOOL__X_LIVE) return RPCOOL_E_WITHDRAWN;
    struct rpcool__x_local_read a = {rpcool__x_ver(x->rec, idx), addr, buf, len};
    return rpcool__x_opt(rpcool__x_local_ver, rpcool__x_local_copy, &a,
                         (uint64_t)RPCOOL_EXPORT_DEFAULT_READ_MS * 1000000u);
}

/* >>x-remote - shared data: the exporter's service, other pods' attachments -------------------- */

#ifdef RPCOOL__RDMA
/* The exporter's service: a krconn context of its own (accepting), krconn's meta server when
   opts.rdma is "serve" (or the one already serving that port in this host), the name
   "rpcool.x.NAME" published there, a hello block that attachers READ, the lock lines and the
   record (version words) registered plainly, the data registered through nppin, and a thread
   that accepts attachers, runs their nppin peers and drops the dead ones. An attacher connects
   three times (NO_VIRTUAL): home (the hello, the version words and ALock's home link), data
   (nppin's READs and WRITEs) and chan (nppin's lease channel). */
#define RPCOOL__XH_MAGIC 0x314c4c4548584f52ull /* "ROXHELL1": an export's hello and data */
#define RPCOOL__XA_MAGIC 0x3154544158584f52ull /* "ROXXATT1": an attacher's connect data */
#define RPCOOL__XH_VERSION 1u
#define RPCOOL__X_MAX_ATT 64u          /* attachers of one export at once (nppin's peers) */
#define RPCOOL__X_NDESC 64u            /* remote locks one attachment holds or waits for */
#define RPCOOL__X_BOUNCE ((size_t)1 << 20) /* an attacher's registered bounce buffer */
#define RPCOOL__X_CHECK_MS 1000u       /* the service pings each attacher this often */
#define RPCOOL__X_READY_MS 5000u       /* an attacher waits this long for its lease channel */
#define RPCOOL__X_PING_MS 10000u       /* a ping's bound (a dead peer fails it in about 4 s) */
#define RPCOOL__X_DIR_MS 5000          /* a publish or withdrawal at the meta server */
enum { RPCOOL__XK_HOME = 1, RPCOOL__XK_DATA = 2, RPCOOL__XK_CHAN = 3, RPCOOL__XK_LOOP = 4 };

struct rpcool__xhello {   /* in the exporter's memory, READ by attachers */
    uint64_t magic;
    uint32_t version, mode;
    uint64_t base, len;
    uint64_t lines, vers; /* the lock lines, the version words (word i at vers + 64 i) */
    uint32_t lines_rkey, vers_rkey;
    uint32_t nlocks, budget;
    uint64_t gen;         /* random: names attachers' publications */
    uint64_t next_id;     /* fetch-and-add: an attacher's ALock id */
    unsigned char handle[NPPIN_HANDLE_SIZE];
};

struct rpcool__xdata {    /* a context's connect data (KRCONN_DATA_MAX bytes) */
    uint64_t magic;
    uint64_t addr;        /* exporter: the hello; attacher: its descriptors */
    uint32_t rkey;
    uint16_t id, kind;    /* attacher: its id, which connection this is */
    uint64_t spare;
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__xdata) == KRCONN_DATA_MAX, "connect data");

struct rpcool__xatt {     /* the exporter's view of one attacher */
    uint16_t id;
    krconn *home, *data, *chan;
    nppin_chan ch;
    nppin_peer *peer;
    uint64_t ready_addr;
    uint32_t rkey;
};

struct rpcool__xsvc {
    krconn_ctx *kc, *meta;
    krconn_dir *dir;
    krconn_mr mr_hello, mr_lines, mr_rec, mr_scratch;
    struct rpcool__xhello *hello;
    uint64_t *scratch;
    nppin_ctx *np;
    nppin_region *rg;
    struct rpcool__xatt att[RPCOOL__X_MAX_ATT];
    krconn *hellos[RPCOOL__X_MAX_ATT]; /* connections that only READ the hello */
    /* the loopback link to our own lock lines that alock_table_remote_dead needs: a small
       krconn context of its own connected to kc, made at the first attacher that goes */
    krconn_ctx *lkc;
    krconn *loop, *loop_acc;
    alock_link loop_link;
    int loop_failed;
    pthread_t thr;
    int thr_started, stop, published;
    uint64_t attached, dropped; /* counts (the service thread writes them) */
    size_t pin_budget;
};

static void rpcool__x_att_drop(rpcool_export *x, struct rpcool__xatt *a, const char *why)
{
    if (a->id) {
        rpcool__log(&x->lg, RPCOOL_LOG_INFO, "export %s: attacher %u %s", x->name, a->id, why);
        rcp__fetch_add(&x->svc->dropped, (uint64_t)1);
    }
    if (a->peer) nppin_peer_destroy(a->peer);
    if (a->ch.user) nppin_chan_verbs_destroy(&a->ch);
    if (a->chan) krconn_disconnect(a->chan);
    if (a->data) krconn_disconnect(a->data);
    if (a->home) krconn_disconnect(a->home);
    memset(a, 0, sizeof *a);
}

/* The loopback link (made once): 0, or why there is none (then logged once). */
static int rpcool__x_loop(rpcool_export *x)
{
    struct rpcool__xsvc *v = x->svc;
    struct rpcool__xdata d;
    krconn_ctx_opts ko;
    krconn_addr me;
    krconn_connect_opts co = {RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS, KRCONN_CONNECT_NO_VIRTUAL, NULL,
                              NULL};
    if (v->loop_link.cas) return 0;
    if (v->loop_failed) return RPCOOL_E_NOTSUP;
    memset(&d, 0, sizeof d);
    d.magic = RPCOOL__XA_MAGIC;
    d.kind = RPCOOL__XK_LOOP;
    d.addr = (uint64_t)(uintptr_t)v->hello;
    rpcool__r_ctx_opts(&ko, NULL, 1);
    int r = rpcool__r_err(krconn_ctx_create(&ko, &v->lkc));
    if (!r) r = rpcool__r_err(krconn_ctx_set_data(v->lkc, &d, sizeof d));
    if (!r) r = rpcool__r_err(krconn_ctx_addr(v->kc, &me));
    if (!r) r = rpcool__r_err(krconn_connect(v->lkc, &me, &co, &v->loop));
    if (!r)
        r = rpcool__x_alock_rc(alock_krconn_link_create(v->lkc, v->loop, v->mr_lines.rkey,
                                                        RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS,
                                                        &v->loop_link));
    if (r) {
        rpcool__log(&x->lg, RPCOOL_LOG_ERROR, "export %s: no loopback link to its lock lines "
                    "(%s): locks of dead attachers are not recovered", x->name,
                    rpcool_strerror(r));
        memset(&v->loop_link, 0, sizeof v->loop_link);
        v->loop_failed = 1;
    }
    return r;
}

/* An attacher is gone (its connections already closed: it cannot reach the lock lines any
   more): alock's recovery (alock.h, "Dead holders and waiters"): its id marked dead, so that
   remote waiters queued behind it take over, and a lock whose remote queue ends in it released.
   Its id is never given again (ids come from a fetch-and-add). */
static void rpcool__x_remote_dead(rpcool_export *x, uint16_t id)
{
    if (!id || rpcool__x_loop(x)) return;
    int n = alock_table_remote_dead(x->t, &x->svc->loop_link, id);
    if (n < 0)
        rpcool__log(&x->lg, RPCOOL_LOG_ERROR, "export %s: recovering attacher %u's locks: %s",
                    x->name, id, alock_strerror(n));
    else if (n > 0)
        rpcool__log(&x->lg, RPCOOL_LOG_INFO, "export %s: attacher %u: %d lock%s released",
                    x->name, id, n, n == 1 ? "" : "s");
}

/* A connection an attacher made: its home (kept to watch it), its data connection (nothing to
   do: the attacher posts, the NIC answers) or its lease channel (an nppin peer; then the
   attacher is told, by a WRITE of its ready word). */
static void rpcool__x_accepted(rpcool_export *x, krconn *k)
{
    struct rpcool__xsvc *v = x->svc;
    struct rpcool__xdata d;
    memcpy(&d, krconn_peer_data(k), sizeof d);
    struct rpcool__xatt *a = NULL, *free_a = NULL;
    for (unsigned i = 0; i < RPCOOL__X_MAX_ATT; i++) {
        if (v->att[i].id && v->att[i].id == d.id) a = &v->att[i];
        if (!v->att[i].id && !free_a) free_a = &v->att[i];
    }
    if (d.magic != RPCOOL__XA_MAGIC) {
        krconn_disconnect(k); /* not one of ours */
        return;
    }
    if (d.kind == RPCOOL__XK_LOOP) { /* our own loopback link's far end */
        if (d.addr == (uint64_t)(uintptr_t)v->hello && !v->loop_acc) v->loop_acc = k;
        else krconn_disconnect(k);
        return;
    }
    if (!d.id) { /* READs the hello, then goes: kept until it does */
        unsigned i = 0;
        while (i < RPCOOL__X_MAX_ATT && v->hellos[i]) i++;
        if (i == RPCOOL__X_MAX_ATT) {
            krconn_disconnect(v->hellos[0]);
            memmove(v->hellos, v->hellos + 1, sizeof v->hellos - sizeof *v->hellos);
            i--;
        }
        v->hellos[i] = k;
        return;
    }
    if (d.kind == RPCOOL__XK_DATA) { /* the NIC answers it; kept while the attacher is */
        if (a && !a->data) a->data = k;
        else krconn_disconnect(k);
        return;
    }
    if (d.kind == RPCOOL__XK_HOME) {
        if (a || !free_a) { /* a second home of one id, or no room: refuse */
            rpcool__log(&x->lg, RPCOOL_LOG_WARN, "export %s: attacher %u refused (%s)", x->name,
                        d.id, a ? "its id is in use" : "too many attachers");
            krconn_disconnect(k);
            return;
        }
        free_a->id = d.id;
        free_a->home = k;
        free_a->ready_addr = d.addr + ALOCK_REMOTE_MEM(RPCOOL__X_NDESC);
        free_a->rkey = d.rkey;
        rcp__fetch_add(&v->attached, (uint64_t)1);
        rpcool__log(&x->lg, RPCOOL_LOG_INFO, "export %s: attacher %u", x->name, d.id);
        return;
    }
    if (d.kind != RPCOOL__XK_CHAN || !a || a->chan) {
        krconn_disconnect(k);
        return;
    }
    a->chan = k;
    struct ibv_qp *qp = krconn_qp(k);
    int rc = nppin_chan_verbs_create(v->mr_hello.mr->pd, qp, qp->recv_cq, &a->ch);
    if (!rc) rc = nppin_peer_create(v->np, &a->ch, &a->peer);
    if (!rc) { /* tell it: its lease requests find receives posted now */
        krconn_wc wc;
        *v->scratch = 1;
        rc = krconn_write(a->home, 1, &v->mr_scratch, v->scratch, 8, a->ready_addr, a->rkey, 0);
        if (!rc) rc = krconn_wait(a->home, &wc, RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS);
    }
    if (rc) rpcool__x_att_drop(x, a, "failed while attaching");
}

static void *rpcool__x_thread(void *arg)
{
    rpcool_export *x = (rpcool_export *)arg;
    struct rpcool__xsvc *v = x->svc;
    uint64_t next_check = 0;
    while (!rcp__load(&v->stop)) {
        krconn *k = NULL;
        int work = 0;
        while (krconn_accept(v->kc, -1, &k) == 0) {
            rpcool__x_accepted(x, k);
            work = 1;
        }
        for (unsigned i = 0; i < RPCOOL__X_MAX_ATT; i++)
            if (v->att[i].peer && nppin_peer_progress(v->att[i].peer, 0) > 0) work = 1;
        uint64_t now = rcp__now_ns();
        if (now >= next_check) { /* the dead and the gone: a ping of their home says it */
            next_check = now + (uint64_t)RPCOOL__X_CHECK_MS * 1000000u;
            for (unsigned i = 0; i < RPCOOL__X_MAX_ATT; i++) {
                if (!v->att[i].home || rcp__load(&v->stop)) continue;
                int rc = krconn_ping(v->att[i].home, RPCOOL__X_PING_MS);
                uint16_t id = v->att[i].id;
                if (rc != KRCONN_E_PEERDEAD && rc != KRCONN_E_CLOSED) continue;
                rpcool__x_att_drop(x, &v->att[i], rc == KRCONN_E_CLOSED ? "detached"
                                                                         : "is dead");
                rpcool__x_remote_dead(x, id); /* a detached one holds nothing: harmless */
            }
            for (unsigned i = 0; i < RPCOOL__X_MAX_ATT; i++) {
                krconn_wc wc;
                int rc = v->hellos[i] ? krconn_poll(v->hellos[i], &wc, 1, 0) : 0;
                if (rc == KRCONN_E_PEERDEAD || rc == KRCONN_E_CLOSED) {
                    krconn_disconnect(v->hellos[i]);
                    v->hellos[i] = NULL;
                }
            }
        }
        if (!work) {
            struct pollfd pf = {krconn_accept_fd(v->kc), POLLIN, 0};
            poll(&pf, 1, 1);
        }
    }
    return NULL;
}

static void rpcool__x_stop(rpcool_export *x)
{
    struct rpcool__xsvc *v = x->svc;
    if (!v) return;
    if (v->published) { /* the name first: an attach from now on finds no export */
        char svc[RPCOOL__X_ROOTLEN];
        snprintf(svc, sizeof svc, "%s%s", RPCOOL__X_ROOT, x->name);
        int r = rpcool__r_err(krconn_unpublish(v->kc, v->dir, svc, RPCOOL__X_DIR_MS));
        if (r)
            rpcool__log(&x->lg, RPCOOL_LOG_WARN, "export %s: withdrawing its name: %s", x->name,
                        rpcool_strerror(r));
        v->published = 0;
    }
    if (v->thr_started) {
        rcp__store(&v->stop, 1);
        pthread_join(v->thr, NULL);
    }
    for (unsigned i = 0; i < RPCOOL__X_MAX_ATT; i++) {
        rpcool__x_att_drop(x, &v->att[i], "dropped");
        if (v->hellos[i]) krconn_disconnect(v->hellos[i]);
    }
    if (v->loop_link.cas) alock_krconn_link_destroy(&v->loop_link);
    if (v->loop) krconn_disconnect(v->loop);
    if (v->loop_acc) krconn_disconnect(v->loop_acc);
    if (v->lkc) krconn_ctx_destroy(v->lkc);
    if (v->rg) nppin_dereg(v->rg);
    if (v->np) nppin_destroy(v->np);
    if (v->dir) krconn_dir_close(v->dir);
    if (v->mr_scratch.mr) krconn_dereg(&v->mr_scratch);
    if (v->mr_rec.mr) krconn_dereg(&v->mr_rec);
    if (v->mr_lines.mr) krconn_dereg(&v->mr_lines);
    if (v->mr_hello.mr) krconn_dereg(&v->mr_hello);
    if (v->kc) krconn_ctx_destroy(v->kc);
    if (v->meta) krconn_ctx_destroy(v->meta);
    free(v->hello);
    rpcool__free(v);
    x->svc = NULL;
}

static int rpcool__x_serve(rpcool_export *x, const rpcool_export_opts *opts)
{
    struct rpcool__xsvc *v = (struct rpcool__xsvc *)rpcool__calloc(1, sizeof *v);
    const char *how = opts->rdma ? opts->rdma : "serve", *w;
    char where[128], svc[RPCOOL__X_ROOTLEN];
    void *lines;
    size_t llen, pg = rpcool__page_size();
    int r;
    krconn_ctx_opts ko;
    nppin_opts no;
    struct rpcool__xhello *hl;
    struct rpcool__xdata d;
    if (!v) return -ENOMEM;
    x->svc = v;
    rpcool__r_ctx_opts(&ko, NULL, RPCOOL__X_MAX_ATT * 3);
    ko.log = opts->log;
    ko.log_user = opts->log_user;
    if ((r = rpcool__r_err(krconn_ctx_create(&ko, &v->kc)))) goto fail;
    if ((r = rpcool__r_meta(how, NULL, &v->meta, where, sizeof where, &w))) goto fail;
    if (posix_memalign((void **)&v->hello, pg, pg)) {
        v->hello = NULL;
        r = -ENOMEM;
        goto fail;
    }
    memset(v->hello, 0, pg);
    v->scratch = (uint64_t *)(void *)((char *)v->hello + pg / 2);
    if ((r = rpcool__r_err(krconn_reg(v->kc, v->hello, pg, 0, &v->mr_hello)))) goto fail;
    v->mr_scratch = v->mr_hello;
    v->mr_scratch.mr = NULL; /* the same registration: deregistered once */
    alock_table_lines(x->t, &lines, &llen);
    if ((r = rpcool__r_err(krconn_reg(v->kc, lines, llen, 0, &v->mr_lines)))) goto fail;
    /* the version words only: attachers never reach the record's header */
    if ((r = rpcool__r_err(krconn_reg(v->kc, rpcool__x_ver(x->rec, 0),
                                      (size_t)x->nlocks * RPCOOL__X_VSTRIDE, 0, &v->mr_rec))))
        goto fail;
    memset(&no, 0, sizeof no);
    no.budget = opts->pin_budget ? opts->pin_budget : RPCOOL_EXPORT_DEFAULT_PIN_BUDGET;
    v->pin_budget = no.budget;
    no.access = opts->remote == RPCOOL_REMOTE_RW
                    ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE
                    : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    no.log = opts->log;
    no.log_user = opts->log_user;
    if ((r = nppin_create(v->mr_hello.mr->pd, &no, &v->np))) goto fail;
    if ((r = nppin_reg(v->np, x->base, x->len, &v->rg))) goto fail;
    hl = v->hello;
    hl->version = RPCOOL__XH_VERSION;
    hl->mode = (uint32_t)opts->remote;
    hl->base = (uint64_t)(uintptr_t)x->base;
    hl->len = x->len;
    hl->lines = (uint64_t)(uintptr_t)lines;
    hl->vers = (uint64_t)(uintptr_t)rpcool__x_ver(x->rec, 0);
    hl->lines_rkey = v->mr_lines.rkey;
    hl->vers_rkey = v->mr_rec.rkey;
    hl->nlocks = x->nlocks;
    hl->budget = x->rec->budget;
    hl->gen = rcp__now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)x->rec;
    hl->next_id = 1;
    nppin_region_export(v->rg, hl->handle);
    rcp__store(&hl->magic, RPCOOL__XH_MAGIC);
    memset(&d, 0, sizeof d);
    d.magic = RPCOOL__XH_MAGIC;
    d.addr = (uint64_t)(uintptr_t)hl;
    d.rkey = v->mr_hello.rkey;
    if ((r = rpcool__r_err(krconn_ctx_set_data(v->kc, &d, sizeof d)))) goto fail;
    if ((r = rpcool__r_err(krconn_dir_meta(v->kc, *w ? w : NULL, RPCOOL__X_DIR_MS, &v->dir))))
        goto fail;
    snprintf(svc, sizeof svc, "%s%s", RPCOOL__X_ROOT, x->name);
    if ((r = rpcool__r_err(krconn_publish(v->kc, v->dir, svc, RPCOOL__X_DIR_MS)))) goto fail;
    v->published = 1;
    if ((r = pthread_create(&v->thr, NULL, rpcool__x_thread, x))) {
        r = -r;
        goto fail;
    }
    v->thr_started = 1;
    return 0;
fail:
    rpcool__log(&x->lg, RPCOOL_LOG_ERROR, "export %s: serving other pods: %s", x->name,
                rpcool_strerror(r));
    rpcool__x_stop(x);
    return r;
}

RPCOOL_API int rpcool_export_get_stats(rpcool_export *x, rpcool_export_stats *out)
{
    RPCOOL__HCHECK(x);
    if (!x || !out) return RPCOOL_E_INVAL;
    memset(out, 0, sizeof *out);
    struct rpcool__xsvc *v = x->svc;
    if (!v) return 0;
    out->attached = rcp__load(&v->attached);
    out->dropped = rcp__load(&v->dropped);
    out->attachers = (uint32_t)(out->attached - out->dropped);
    out->pin_budget = v->pin_budget;
    nppin_stats ns;
    if (v->np && !nppin_get_stats(v->np, &ns)) {
        out->pinned = ns.pinned;
        out->pinned_peak = ns.pinned_peak;
        out->leases_granted = ns.leases_granted;
        out->evictions = ns.evictions;
    }
    return 0;
}

/* The attacher's side. One thread at a time (ALock's remote handle is). */
struct rpcool_remote {
    krconn_ctx *kc;
    krconn_dir *dir;
    krconn *home, *data, *chan;
    krconn_mr mr_own;          /* scratch (first 64 bytes), descriptors, ready word */
    char *own;
    nppin_ctx *np;
    nppin_region *brg;
    char *bounce;
    nppin_chan ch;
    nppin_peer *peer;
    nppin_remote *rm;
    alock_link home_link;
    alock_remote *ar;
    alock_link plinks[RPCOOL__X_MAX_ATT];
    krconn *pconns[RPCOOL__X_MAX_ATT];
    unsigned nplinks;
    struct rpcool__xhello hello;
    uint16_t id;
    int timeout_ms;
    int unsettled;             /* the data QP may still have work writing the bounce buffer */
    struct rcp__logger lg;
};

#define RPCOOL__XR_SCRATCH 64u /* bytes of scratch before the descriptors */
#define RPCOOL__XR_FENCE 32u   /* where in the scratch the data QP's fence READ lands */

static int rpcool__x_rerr(int krc)
{
    /* each header's block counts up from its first code: nppin's -5000 up to -4901, alock's
       -3000 up to -2901 */
    if (krc >= -5000 && krc <= -4901) {
        if (krc == NPPIN_E_PEERDEAD) return RPCOOL_E_PEERDEAD;
        if (krc == NPPIN_E_NOTSUP) return RPCOOL_E_NOTSUP;
        return krc;
    }
    if (krc == -ETIMEDOUT) return RPCOOL_E_TIMEOUT;
    if (krc == -EACCES || krc == -EIO) return RPCOOL_E_PEERDEAD;
    if (krc >= -3000 && krc <= -2901) return rpcool__x_alock_rc(krc);
    return rpcool__r_err(krc);
}

/* A version word at the exporter: read by READ, changed (by its lock's holder only) by
   compare-and-swap. Never read by compare-and-swap: Soft-RoCE performs one as a load and a
   store, whatever the comparison, and that store would undo a local writer's store made
   meanwhile. */
static int rpcool__x_word(rpcool_remote *r, uint64_t addr, int swap, uint64_t expect,
                          uint64_t desired, uint64_t *old)
{
    krconn_wc wc;
    uint64_t *s = (uint64_t *)(void *)r->own;
    int rc = swap ? krconn_cas(r->home, 2, &r->mr_own, s, addr, r->hello.vers_rkey, expect,
                               desired, 0)
                  : krconn_read(r->home, 2, &r->mr_own, s, 8, addr, r->hello.vers_rkey, 0);
    if (!rc) rc = krconn_wait(r->home, &wc, r->timeout_ms);
    if (rc) return rpcool__x_rerr(rc);
    *old = rcp__load(s);
    return 0;
}

static uint64_t rpcool__x_vaddr(const rpcool_remote *r, uint32_t idx)
{
    return r->hello.vers + (uint64_t)idx * RPCOOL__X_VSTRIDE;
}

/* A link to another attacher's descriptors, made when ALock first needs it. */
static int rpcool__x_peer_link(uint16_t id, alock_link *link, void *user)
{
    rpcool_remote *r = (rpcool_remote *)user;
    char name[64];
    krconn *k = NULL;
    if (r->nplinks >= RPCOOL__X_MAX_ATT) return RPCOOL_E_NOSLOT;
    snprintf(name, sizeof name, "rpcool.xr.%llx.%u", (unsigned long long)r->hello.gen, id);
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = r->timeout_ms;
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    int rc = krconn_connect_name(r->kc, r->dir, name, &co, &k);
    if (rc) return rpcool__x_rerr(rc);
    struct rpcool__xdata d;
    memcpy(&d, krconn_peer_data(k), sizeof d);
    if (d.magic != RPCOOL__XA_MAGIC || d.id != id) {
        krconn_disconnect(k);
        return RPCOOL_E_PROTO;
    }
    rc = alock_krconn_link_create(r->kc, k, d.rkey, (unsigned)r->timeout_ms, link);
    if (rc) {
        krconn_disconnect(k);
        return rpcool__x_rerr(rc);
    }
    r->plinks[r->nplinks] = *link;
    r->pconns[r->nplinks++] = k;
    return 0;
}

static int rpcool__x_connect(rpcool_remote *r, const char *svc, int kind, krconn **out)
{
    struct rpcool__xdata d;
    memset(&d, 0, sizeof d);
    d.magic = RPCOOL__XA_MAGIC;
    d.addr = (uint64_t)(uintptr_t)(r->own + RPCOOL__XR_SCRATCH);
    d.rkey = r->mr_own.rkey;
    d.id = r->id;
    d.kind = (uint16_t)kind;
    int rc = krconn_ctx_set_data(r->kc, &d, sizeof d);
    if (rc) return rpcool__x_rerr(rc);
    krconn_connect_opts co;
    memset(&co, 0, sizeof co);
    co.timeout_ms = r->timeout_ms;
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    rc = krconn_connect_name(r->kc, r->dir, svc, &co, out);
    return rc ? rpcool__x_rerr(rc) : 0;
}

static void rpcool__x_detach(rpcool_remote *r);
static int rpcool__x_attach(const char *where, const char *name, const rpcool_attach_opts *o,
                            rpcool_remote **out)
{
    char svc[RPCOOL__X_ROOTLEN], me[64], *s;
    krconn_wc wc;
    int rc;
    struct rpcool__xdata xd;
    struct rpcool__xhello *hl;
    struct ibv_qp *cqp;
    nppin_opts no;
    alock_remote_opts ao;
    volatile uint64_t *ready;
    uint64_t id, until;
    krconn_ctx_opts ko;
    size_t own_len = RPCOOL__XR_SCRATCH + ALOCK_REMOTE_MEM(RPCOOL__X_NDESC) + 64;
    if (strlen(name) > RPCOOL_EXPORT_NAME_MAX) return RPCOOL_E_NAMELONG;
    if ((rc = rpcool__check_name(name))) return rc;
    if (o && o->timeout_ms < 0) return RPCOOL_E_INVAL;
    rpcool_remote *r = (rpcool_remote *)rpcool__calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->timeout_ms = o && o->timeout_ms ? o->timeout_ms : RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS;
    r->lg = rpcool__logger(o ? o->log : NULL, o ? o->log_user : NULL);
    snprintf(svc, sizeof svc, "%s%s", RPCOOL__X_ROOT, name);
    rpcool__r_ctx_opts(&ko, NULL, 0);
    if ((rc = rpcool__r_err(krconn_ctx_create(&ko, &r->kc)))) goto fail;
    if (posix_memalign((void **)&r->own, 64, own_len) ||
        posix_memalign((void **)&r->bounce, rpcool__page_size(), RPCOOL__X_BOUNCE)) {
        rc = -ENOMEM;
        goto fail;
    }
    memset(r->own, 0, own_len);
    if ((rc = rpcool__r_err(krconn_reg(r->kc, r->own, own_len, 0, &r->mr_own)))) goto fail;
    if ((rc = rpcool__r_err(krconn_dir_meta(r->kc, where && *where ? where : NULL, r->timeout_ms,
                                            &r->dir))))
        goto fail;
    r->id = 0; /* unknown yet: the hello gives it */
    if ((rc = rpcool__x_connect(r, svc, 0, &r->home))) {
        if (rc == RPCOOL_E_NOCHANNEL) rc = RPCOOL_E_NOEXPORT;
        goto fail;
    }
    memcpy(&xd, krconn_peer_data(r->home), sizeof xd);
    if (xd.magic != RPCOOL__XH_MAGIC) {
        rc = RPCOOL_E_PROTO;
        goto fail;
    }
    /* the hello, then an id (fetch-and-add) */
    s = r->own;
    rc = krconn_read(r->home, 3, &r->mr_own, s, sizeof r->hello < RPCOOL__XR_SCRATCH
                                                     ? (uint32_t)sizeof r->hello
                                                     : RPCOOL__XR_SCRATCH,
                     xd.addr, xd.rkey, 0);
    RCP__STATIC_ASSERT(sizeof(struct rpcool__xhello) <= 2 * RPCOOL__XR_SCRATCH, "hello");
    if (!rc) rc = krconn_wait(r->home, &wc, r->timeout_ms);
    if (!rc) memcpy(&r->hello, s, RPCOOL__XR_SCRATCH);
    if (!rc)
        rc = krconn_read(r->home, 3, &r->mr_own, s, sizeof r->hello - RPCOOL__XR_SCRATCH,
                         xd.addr + RPCOOL__XR_SCRATCH, xd.rkey, 0);
    if (!rc) rc = krconn_wait(r->home, &wc, r->timeout_ms);
    if (!rc) memcpy((char *)&r->hello + RPCOOL__XR_SCRATCH, s,
                    sizeof r->hello - RPCOOL__XR_SCRATCH);
    if (!rc)
        rc = krconn_faa(r->home, 4, &r->mr_own, (uint64_t *)(void *)s,
                        xd.addr + offsetof(struct rpcool__xhello, next_id), xd.rkey, 1, 0);
    if (!rc) rc = krconn_wait(r->home, &wc, r->timeout_ms);
    if (rc) {
        rc = rpcool__x_rerr(rc);
        goto fail;
    }
    id = *(uint64_t *)(void *)s;
    hl = &r->hello;
    if (hl->magic != RPCOOL__XH_MAGIC || hl->version != RPCOOL__XH_VERSION || !hl->nlocks ||
        hl->nlocks > RPCOOL_EXPORT_MAX_LOCKS || hl->mode < RPCOOL_REMOTE_READ ||
        hl->mode > RPCOOL_REMOTE_RW || hl->base + hl->len < hl->base) {
        rc = RPCOOL_E_PROTO;
        goto fail;
    }
    if (!id || id > 65535) {
        rc = RPCOOL_E_NOSLOT; /* ids are 16 bits */
        goto fail;
    }
    r->id = (uint16_t)id;
    /* the home connection again, now with our id (the exporter watches it), then data and
       chan */
    krconn_disconnect(r->home);
    r->home = NULL;
    if ((rc = rpcool__x_connect(r, svc, RPCOOL__XK_HOME, &r->home)) ||
        (rc = rpcool__x_connect(r, svc, RPCOOL__XK_DATA, &r->data)) ||
        (rc = rpcool__x_connect(r, svc, RPCOOL__XK_CHAN, &r->chan)))
        goto fail;
    /* nppin: the bounce buffer, the lease channel once the exporter has its peer */
    cqp = krconn_qp(r->chan);
    memset(&no, 0, sizeof no);
    no.budget = RPCOOL__X_BOUNCE;
    no.chunk_size = RPCOOL__X_BOUNCE;
    no.request_timeout_ms = (unsigned)r->timeout_ms;
    if ((rc = nppin_create(r->mr_own.mr->pd, &no, &r->np)) ||
        (rc = nppin_reg(r->np, r->bounce, RPCOOL__X_BOUNCE, &r->brg))) {
        rc = rpcool__x_rerr(rc);
        goto fail;
    }
    ready = (volatile uint64_t *)(void *)(r->own + RPCOOL__XR_SCRATCH +
                                          ALOCK_REMOTE_MEM(RPCOOL__X_NDESC));
    until = rcp__now_ns() + (uint64_t)RPCOOL__X_READY_MS * 1000000u;
    while (!rcp__load(ready) && rcp__now_ns() < until) usleep(200);
    if (!rcp__load(ready)) {
        rc = RPCOOL_E_TIMEOUT;
        goto fail;
    }
    if ((rc = nppin_chan_verbs_create(r->mr_own.mr->pd, cqp, cqp->recv_cq, &r->ch)) ||
        (rc = nppin_peer_create(r->np, &r->ch, &r->peer)) ||
        (rc = nppin_remote_open(r->peer, hl->handle, &r->rm))) {
        rc = rpcool__x_rerr(rc);
        goto fail;
    }
    /* ALock's remote cohort: home link to the lock lines, others made when needed; published
       so that other attachers can link to our descriptors */
    if ((rc = alock_krconn_link_create(r->kc, r->home, hl->lines_rkey, (unsigned)r->timeout_ms,
                                       &r->home_link))) {
        rc = rpcool__x_rerr(rc);
        goto fail;
    }
    memset(&ao, 0, sizeof ao);
    ao.id = r->id;
    ao.lines_addr = hl->lines;
    ao.nlocks = hl->nlocks;
    ao.budget = hl->budget;
    ao.home = r->home_link;
    ao.descs = r->own + RPCOOL__XR_SCRATCH;
    ao.ndesc = RPCOOL__X_NDESC;
    ao.peer_link = rpcool__x_peer_link;
    ao.peer_user = r;
    if ((rc = alock_remote_create(&ao, &r->ar))) {
        rc = rpcool__x_rerr(rc);
        goto fail;
    }
    snprintf(me, sizeof me, "rpcool.xr.%llx.%u", (unsigned long long)hl->gen, r->id);
    if ((rc = rpcool__r_err(krconn_publish(r->kc, r->dir, me, r->timeout_ms)))) goto fail;
    if ((rc = rcp__handle_add(r))) goto fail;
    *out = r;
    return 0;
fail:
    rpcool__log(&r->lg, RPCOOL_LOG_ERROR, "attach to %s: %s", name, rpcool_strerror(rc));
    rpcool__x_detach(r);
    return rc;
}

RPCOOL_API int rpcool_attach(const char *url, const rpcool_attach_opts *opts,
                             rpcool_remote **out)
{
    char where[128];
    const char *name = NULL;
    if (out) *out = NULL;
    if (!url || !out) return RPCOOL_E_INVAL;
    if (!rpcool__r_parse(url, where, sizeof where, &name) || !name) return RPCOOL_E_BADNAME;
    return rpcool__x_attach(where, name, opts, out);
}

RPCOOL_API int rpcool_attach_conn(rpcool_conn *c, const char *name,
                                  const rpcool_attach_opts *opts, rpcool_remote **out)
{
    RPCOOL__HCHECK(c);
    if (out) *out = NULL;
    if (!c || !out) return RPCOOL_E_INVAL;
    if (!c->rdma) return RPCOOL_E_INVAL; /* a shared-memory connection: open the export */
    return rpcool__x_attach(c->rdma->meta, name, opts, out);
}

RPCOOL_API int rpcool_remote_detach(rpcool_remote *r)
{
    if (!r) return RPCOOL_E_INVAL;
    RPCOOL__HCHECK(r);
    int rc = rpcool__handle_take(r);
    if (rc) return rc;
    rpcool__x_detach(r);
    return 0;
}

/* detach, r out of the handle table (or never in it: a failed attach) */
static void rpcool__x_detach(rpcool_remote *r)
{
    if (r->ar) alock_remote_destroy(r->ar);
    for (unsigned i = 0; i < r->nplinks; i++) {
        alock_krconn_link_destroy(&r->plinks[i]);
        krconn_disconnect(r->pconns[i]);
    }
    if (r->home_link.conn) alock_krconn_link_destroy(&r->home_link);
    if (r->rm) nppin_remote_close(r->rm);
    if (r->peer) nppin_peer_destroy(r->peer);
    if (r->ch.user) nppin_chan_verbs_destroy(&r->ch);
    if (r->brg) nppin_dereg(r->brg);
    if (r->np) nppin_destroy(r->np);
    if (r->chan) krconn_disconnect(r->chan);
    if (r->data) krconn_disconnect(r->data);
    if (r->home) krconn_disconnect(r->home);
    if (r->dir) krconn_dir_close(r->dir);
    if (r->mr_own.mr) krconn_dereg(&r->mr_own);
    if (r->kc) krconn_ctx_destroy(r->kc);
    free(r->own);
    free(r->bounce);
    rpcool__free(r);
}

RPCOOL_API void *rpcool_remote_base(const rpcool_remote *r, size_t *len)
{
    RPCOOL__HCHECK_PTR(r);
    if (len) *len = r ? (size_t)r->hello.len : 0;
    return r ? (void *)(uintptr_t)r->hello.base : NULL;
}

RPCOOL_API uint32_t rpcool_remote_nlocks(const rpcool_remote *r)
{
    RPCOOL__HCHECK_ZERO(r);
    return r ? r->hello.nlocks : 0;
}

#define RPCOOL__X_WR_FENCE 0x78763400u /* wr_id of the data QP's fence READ */

/* The bounce buffer is free again only once every work request the data QP had when an
   operation gave up (a timeout) has completed: a READ's late response would land in the next
   transfer's bytes. A READ of version word 0, signalled, posted behind them completes after
   them (a send queue completes in order); its completion (or the QP's flush, a failed one)
   settles the buffer. 0, or why the buffer is still not free (RPCOOL_E_TIMEOUT: the work
   requests are still out; the next operation waits for them again). */
static int rpcool__x_settle(rpcool_remote *r)
{
    if (!r->unsettled) return 0;
    struct ibv_qp *qp = krconn_qp(r->data);
    struct ibv_sge sg = {(uint64_t)(uintptr_t)(r->own + RPCOOL__XR_FENCE), 8, r->mr_own.mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = RPCOOL__X_WR_FENCE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = r->hello.vers;
    wr.wr.rdma.rkey = r->hello.vers_rkey;
    int rc = ibv_post_send(qp, &wr, &bad);
    if (rc) return rpcool__x_rerr(-rc);
    uint64_t end = rcp__now_ns() + (uint64_t)r->timeout_ms * 1000000u;
    for (;;) {
        struct ibv_wc wc[4];
        int n = nppin_poll(r->np, qp->send_cq, wc, 4); /* nppin takes its abandoned pieces' */
        if (n < 0) return rpcool__x_rerr(n);
        for (int i = 0; i < n; i++) {
            if (wc[i].wr_id != RPCOOL__X_WR_FENCE) continue;
            /* done, or flushed: either way nothing before it writes the buffer any more */
            r->unsettled = 0;
            return wc[i].status == IBV_WC_SUCCESS ? 0 : RPCOOL_E_PEERDEAD;
        }
        if (!n && rcp__now_ns() > end) return RPCOOL_E_TIMEOUT;
        if (!n) sched_yield();
    }
}

/* READ or WRITE [addr, addr+len) of the export through the bounce buffer, piece by piece. */
static int rpcool__x_xfer(rpcool_remote *r, int op, uint64_t addr, char *buf, size_t len)
{
    struct ibv_qp *qp = krconn_qp(r->data);
    int rc = rpcool__x_settle(r);
    if (rc) return rc;
    while (len) {
        size_t n = len < RPCOOL__X_BOUNCE ? len : RPCOOL__X_BOUNCE;
        nppin_target t = {addr, 0, r->rm};
        if (op == NPPIN_OP_WRITE) memcpy(r->bounce, buf, n);
        rc = nppin_xfer(r->np, qp, qp->send_cq, op, r->bounce, n, &t, 0,
                        (uint64_t)r->timeout_ms * 1000000u);
        if (rc) r->unsettled = 1; /* a piece may still be posted */
        if (rc) return rpcool__x_rerr(rc);
        if (op == NPPIN_OP_READ) memcpy(buf, r->bounce, n);
        addr += n, buf += n, len -= n;
    }
    return 0;
}

static int rpcool__x_rrange(const rpcool_remote *r, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    return a >= r->hello.base && a - r->hello.base <= r->hello.len &&
           len <= r->hello.len - (a - r->hello.base);
}

RPCOOL_API int rpcool_remote_read(rpcool_remote *r, const void *addr, void *buf, size_t len)
{
    RPCOOL__HCHECK(r);
    if (!r || (!buf && len)) return RPCOOL_E_INVAL;
    if (!rpcool__x_rrange(r, addr, len)) return RPCOOL_E_RANGE;
    return rpcool__x_xfer(r, NPPIN_OP_READ, (uint64_t)(uintptr_t)addr, (char *)buf, len);
}

RPCOOL_API int rpcool_remote_write(rpcool_remote *r, void *addr, const void *buf, size_t len)
{
    RPCOOL__HCHECK(r);
    if (!r || (!buf && len)) return RPCOOL_E_INVAL;
    if (!rpcool__x_rrange(r, addr, len)) return RPCOOL_E_RANGE;
    if (r->hello.mode != RPCOOL_REMOTE_RW) return RPCOOL_E_PERM;
    return rpcool__x_xfer(r, NPPIN_OP_WRITE, (uint64_t)(uintptr_t)addr, (char *)(uintptr_t)buf,
                          len);
}

RPCOOL_API int rpcool_remote_lock(rpcool_remote *r, uint32_t idx, int mode, rpcool_xhold *h)
{
    RPCOOL__HCHECK(r);
    if (!r || !h || (mode != RPCOOL_LOCK_READ && mode != RPCOOL_LOCK_WRITE) ||
        idx >= r->hello.nlocks)
        return RPCOOL_E_INVAL;
    memset(h, 0, sizeof *h);
    if (mode == RPCOOL_LOCK_WRITE && r->hello.mode != RPCOOL_REMOTE_RW) return RPCOOL_E_PERM;
    alock_rhold ah;
    int rc = alock_remote_lock(r->ar, idx, &ah);
    if (rc < 0) return rpcool__x_rerr(rc);
    if (mode == RPCOOL_LOCK_WRITE) { /* the version odd, as a local writer makes it */
        uint64_t v = 0, old = 0, va = rpcool__x_vaddr(r, idx);
        int wr = rpcool__x_word(r, va, 0, 0, 0, &v);
        if (!wr) wr = rpcool__x_word(r, va, 1, v, v + ((v & 1) ? 2 : 1), &old);
        if (wr) {
            alock_remote_unlock(&ah);
            return wr;
        }
    }
    RCP__STATIC_ASSERT(sizeof ah <= 5 * sizeof(uint64_t), "an alock_rhold fits an rpcool_xhold");
    rpcool__x_hold_set(h, r, idx, mode, RPCOOL__X_HOLD_REMOTE, &ah, sizeof ah);
    return rc == ALOCK_OWNERDEAD ? RPCOOL_OWNERDEAD : 0;
}

RPCOOL_API int rpcool_remote_unlock(rpcool_xhold *h)
{
    alock_rhold ah;
    void *rv;
    if (rpcool__x_hold_take(h, RPCOOL__X_HOLD_REMOTE, &ah, sizeof ah, &rv)) return RPCOOL_E_INVAL;
    rpcool_remote *r = (rpcool_remote *)rv;
    int vr = 0;
    if (h->mode == RPCOOL_LOCK_WRITE) {
        uint64_t v = 0, old = 0, va = rpcool__x_vaddr(r, h->idx);
        vr = rpcool__x_word(r, va, 0, 0, 0, &v);
        if (!vr && (v & 1)) vr = rpcool__x_word(r, va, 1, v, v + 1, &old);
    }
    int rc = alock_remote_unlock(&ah);
    return vr ? vr : rc < 0 ? rpcool__x_rerr(rc) : 0;
}

struct rpcool__x_remote_read {
    rpcool_remote *r;
    uint64_t vaddr;
    const void *addr;
    void *buf;
    size_t len;
};

static uint64_t rpcool__x_remote_ver(void *arg, int *rc)
{
    struct rpcool__x_remote_read *a = (struct rpcool__x_remote_read *)arg;
    uint64_t v = 0;
    *rc = rpcool__x_word(a->r, a->vaddr, 0, 0, 0, &v);
    return v;
}

static int rpcool__x_remote_copy(void *arg)
{
    struct rpcool__x_remote_read *a = (struct rpcool__x_remote_read *)arg;
    return rpcool__x_xfer(a->r, NPPIN_OP_READ, (uint64_t)(uintptr_t)a->addr, (char *)a->buf,
                          a->len);
}

#define RPCOOL__X_WR_V1 0x78763100u   /* wr_ids of one optimistic read's three READs */
#define RPCOOL__X_WR_DATA 0x78763200u
#define RPCOOL__X_WR_V2 0x78763300u

/* Wait for `want` of the three completions of rpcool__x_opt_post (any others on that CQ are
   nppin's own). 0, or the first error. */
static int rpcool__x_opt_wait(rpcool_remote *r, struct ibv_cq *cq, int want)
{
    uint64_t end = rcp__now_ns() + (uint64_t)r->timeout_ms * 1000000u;
    int got = 0, err = 0;
    while (got < want) {
        struct ibv_wc wc[4];
        int n = nppin_poll(r->np, cq, wc, 4);
        if (n < 0) return rpcool__x_rerr(n);
        for (int i = 0; i < n; i++) {
            if (wc[i].wr_id != RPCOOL__X_WR_V1 && wc[i].wr_id != RPCOOL__X_WR_DATA &&
                wc[i].wr_id != RPCOOL__X_WR_V2)
                continue;
            got++;
            if (wc[i].status != IBV_WC_SUCCESS && !err) err = RPCOOL_E_PEERDEAD;
        }
        if (!n && rcp__now_ns() > end) return RPCOOL_E_TIMEOUT;
    }
    return err;
}

/* One try of an optimistic read in one round trip: READ of the version word, READ of the range
   (through nppin, into the bounce buffer), READ of the version word, posted in that order on the
   data connection's queue pair, whose responder executes them in that order (as ALock's
   cas_read relies on). *v2 is odd when the try must be repeated; 1: the range could not be
   posted now (a lease to ask for, the budget busy): read it the slow way. */
static int rpcool__x_opt_post(rpcool_remote *r, uint64_t vaddr, uint64_t addr, size_t len,
                              uint64_t *v1, uint64_t *v2)
{
    struct ibv_qp *qp = krconn_qp(r->data);
    uint64_t *w = (uint64_t *)(void *)(r->own + 16);
    struct ibv_sge sg[2];
    struct ibv_send_wr wr[2], *bad = NULL;
    nppin_target t = {addr, 0, r->rm};
    int rc = rpcool__x_settle(r);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) {
        sg[i].addr = (uint64_t)(uintptr_t)&w[i];
        sg[i].length = 8;
        sg[i].lkey = r->mr_own.mr->lkey;
        memset(&wr[i], 0, sizeof wr[i]);
        wr[i].wr_id = i ? RPCOOL__X_WR_V2 : RPCOOL__X_WR_V1;
        wr[i].sg_list = &sg[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_READ;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].wr.rdma.remote_addr = vaddr;
        wr[i].wr.rdma.rkey = r->hello.vers_rkey;
    }
    rc = ibv_post_send(qp, &wr[0], &bad);
    if (rc) return rpcool__x_rerr(-rc);
    rc = nppin_post_read(r->np, qp, RPCOOL__X_WR_DATA, r->bounce, len, &t, 0);
    int posted = rc ? 1 : 2;
    if (!rc && (rc = ibv_post_send(qp, &wr[1], &bad))) rc = -rc;
    else if (!rc) posted = 3;
    int wrc = rpcool__x_opt_wait(r, qp->send_cq, posted);
    if (wrc) r->unsettled = 1; /* some of the three may still be posted */
    if (wrc) return wrc;
    if (rc == NPPIN_E_BUSY || rc == NPPIN_E_TOOBIG) return 1;
    if (rc) return rpcool__x_rerr(rc);
    *v1 = rcp__load(&w[0]);
    *v2 = rcp__load(&w[1]);
    return 0;
}

RPCOOL_API int rpcool_remote_read_opt(rpcool_remote *r, uint32_t idx, const void *addr,
                                      void *buf, size_t len)
{
    RPCOOL__HCHECK(r);
    if (!r || (!buf && len) || idx >= r->hello.nlocks) return RPCOOL_E_INVAL;
    if (!rpcool__x_rrange(r, addr, len)) return RPCOOL_E_RANGE;
    uint64_t vaddr = rpcool__x_vaddr(r, idx), end = 0;
    /* up to the bounce buffer's size: one round trip per try */
    for (unsigned tries = 0; len && len <= RPCOOL__X_BOUNCE; tries++) {
        uint64_t v1 = 1, v2 = 0;
        int rc = rpcool__x_opt_post(r, vaddr, (uint64_t)(uintptr_t)addr, len, &v1, &v2);
        if (rc < 0) return rc;
        if (rc == 1) break; /* the slow way */
        if (!(v1 & 1) && v1 == v2) {
            memcpy(buf, r->bounce, len);
            return 0;
        }
        uint64_t now = rcp__now_ns();
        if (!end) end = now + (uint64_t)RPCOOL_EXPORT_DEFAULT_READ_MS * 1000000u;
        else if (now > end) return RPCOOL_E_TIMEOUT;
        if (tries >= RPCOOL__X_SPINS) sched_yield();
    }
    struct rpcool__x_remote_read a = {r, vaddr, addr, buf, len};
    return rpcool__x_opt(rpcool__x_remote_ver, rpcool__x_remote_copy, &a,
                         (uint64_t)RPCOOL_EXPORT_DEFAULT_READ_MS * 1000000u);
}
#else /* exports stay in their pod: the remote half says "not supported" */
RPCOOL_API int rpcool_export_get_stats(rpcool_export *x, rpcool_export_stats *out)
{
    if (!x || !out) return RPCOOL_E_INVAL;
    memset(out, 0, sizeof *out);
    return 0;
}

static int rpcool__x_serve(rpcool_export *x, const rpcool_export_opts *opts)
{
    (void)x, (void)opts;
    return RPCOOL_E_NOTSUP;
}
static void rpcool__x_stop(rpcool_export *x) { (void)x; }

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
#endif
