/* SPDX-License-Identifier: MIT */
/* impl/poddev.h - the pod device: one shared device that holds a pod of several hosts' channels.
 * Internal, shared by the rpcool headers (names start with rcp__ and may change). Linux only;
 * needs libc (with pthreads), impl/platform.h and impl/podlease.h.

   TABLE OF CONTENTS
   -----------------
   1. What it is       one device, mapped whole at one address in every host
   2. Layout           header, leases, registry, channel areas, heap extents
   3. Usage            open, registry entries, extents, close
   4. Errors and limits
   The code follows: >>pd-types >>pd-open >>pd-owners >>pd-registry >>pd-extents

   1. WHAT IT IS
   -------------
   Hosts that share one device (a file, "/dev/daxX.Y", "cxl:regionN", a PCI BAR such as
   ivshmem's .../resource2) and no kernel keep in it everything a pod needs: who is alive (a
   lease table, impl/podlease.h), which channels exist (a registry), each channel's connection
   slots (a channel area) and the connection heaps (2 MiB extents). No descriptor, lock, futex
   or file name of one host is ever needed by another. Every process maps the device whole,
   shared, at the one address its header records (MAP_FIXED_NOREPLACE), so a pointer into it
   means the same thing on every host. The first process to open a zeroed device formats it
   and chooses that address: $RPCOOL_POD_BASE if set, else RCP__POD_DEFAULT_BASE (outside
   shmheap's window), or RCP__POD_TSAN_BASE in ThreadSanitizer builds.
   A process opens a device once (later opens share the mapping, counted) and holds one lease
   in it (renewed by a thread), whose tag it writes in every ownership word it takes. A forked
   child inherits neither (the mapping is MADV_DONTFORK): it opens the device anew.

   2. LAYOUT
   ---------
   All offsets are in the header, which is checked field by field at open and copied into the
   handle (a hostile or corrupt device gives -EBADMSG or -EPROTO, never a crash; the header is
   never read again): [header page][lease table][registry][owner words][channel areas][heap].
   The registry has nreg entries of 256 bytes; entry i owns channel area i (area_size bytes,
   opaque here: rpcool lays its channel out in it). Ownership words (a registry entry's, an
   extent's) hold a lease tag: 0 is free; a word whose tag names a lease no longer held (its
   epoch moved on: released or recovered) is free to take over by compare-and-swap.
   Each heap extent has two words: its owner (the server that carved it) and its user (the
   client whose connection heap it is part of); an extent is taken again only when both are
   free or dead, so a client whose server died keeps its heap until it lets go.

   3. USAGE
   --------
       struct rcp__pod *p;
       rc = rcp__pod_open("file:/mnt/pod", &opts, &p); // maps it, takes this process's lease
       rc = rcp__pod_reg_find(p, "kv", &i);            // a channel's entry, or -ENOENT
       rc = rcp__pod_reg_take(p, "kv", &i);            // make or take over an entry
       rc = rcp__pod_extents_take(p, n, user, &first); // n contiguous 2 MiB extents
       rcp__pod_extents_put(p, first, n);
       rcp__pod_close(p);

   4. ERRORS AND LIMITS
   --------------------
   -errno: -ENOENT no such device or entry, -EINVAL a bad name or size, -EBADMSG a header whose
   fields make no sense, -EPROTO another layout, -EADDRINUSE the recorded address is taken in
   this process, -ENOSPC no free entry or extents, -EEXIST a name held by a live lease, -ESTALE
   this process's lease was fenced. A device of at least RCP__POD_MIN_SIZE bytes; the address
   space it takes is its whole size. */
#ifndef RCP__PODDEV_H
#define RCP__PODDEV_H
#include "platform.h"
#include "podlease.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#ifndef RCP__POD_MALLOC /* the includer's allocator for the handle (define both or neither) */
#define RCP__POD_MALLOC(n) malloc(n)
#define RCP__POD_FREE(p) free(p)
#endif

/* >>pd-types - the device's layout and the handle ---------------------------------------------- */

#define RCP__POD_MAGIC 0x3156454444504352ull /* "RCPDDEV1" */
#define RCP__POD_FORMATTING 0x2d2d2d2d2d2d2d2dull
#define RCP__POD_LAYOUT 1u
#define RCP__POD_EXTENT ((uint64_t)2 << 20)
#define RCP__POD_MIN_SIZE ((uint64_t)16 << 20)
#define RCP__POD_NREG 32u
#define RCP__POD_NLEASES 256u
#define RCP__POD_DEFAULT_BASE 0x660000000000ull /* above ASan's allocator, below shmheap */
#define RCP__POD_TSAN_BASE 0x550000000000ull  /* below where PIE programs load */
#define RCP__POD_NAME_MAX 63u

struct rcp__pod_hdr {
    uint64_t magic;
    uint32_t layout, nreg;
    uint64_t size, base;
    uint64_t lease_off, lease_len;
    uint64_t reg_off, own_off;
    uint64_t area_off, area_size;
    uint64_t heap_off, nextents;
    uint8_t pad[32];
};
RCP__STATIC_ASSERT(sizeof(struct rcp__pod_hdr) == 128, "pod header layout");

/* A wake address: where a sleeper waits for a datagram (IPv4 or IPv6, port), or none. */
struct rcp__pod_addr {
    uint16_t family; /* 0 none, AF_INET, AF_INET6 */
    uint16_t port;   /* network order */
    uint8_t addr[16];
};

struct rcp__pod_reg {
    uint64_t owner;  /* the serving process's lease tag; 0 free */
    uint32_t state;  /* RCP__POD_REG_* */
    uint32_t epoch;  /* bumped by every server that (re)takes the entry */
    char name[RCP__POD_NAME_MAX + 1];
    struct rcp__pod_addr acc;  /* the server's acceptor: a connect rings it */
    struct rcp__pod_addr door; /* the server's serving threads: a call rings it */
    uint8_t pad[136];
};
RCP__STATIC_ASSERT(sizeof(struct rcp__pod_reg) == 256, "pod registry layout");
enum { RCP__POD_REG_FREE = 0, RCP__POD_REG_OPENING, RCP__POD_REG_OPEN, RCP__POD_REG_CLOSED };

struct rcp__pod_own {
    uint64_t owner, user;
};

/* A process's handle of a device (one per device per process, counted). */
struct rcp__pod {
    struct rcp__pod_hdr h; /* a checked copy: the device's header is never read again */
    char *base;
    struct rcp__pod_reg *reg;
    struct rcp__pod_own *own;
    struct rcp__lease lease;
    char path[256];
    int refs;
    pid_t pid;             /* the process that opened it (a forked child opens anew) */
    struct rcp__pod *next;
};

static pthread_mutex_t rcp__pods_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcp__pod *rcp__pods;

struct rcp__pod_opts {
    uint32_t bound_ms;  /* the lease bound, when formatting (0: $RPCOOL_POD_LEASE_MS, else the
                           lease table's default) */
    uint64_t area_size; /* bytes of each channel area, when formatting (0: 64 KiB) */
};

/* >>pd-open - opening, formatting, closing ----------------------------------------------------- */

static inline uint64_t rcp__pod_round(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* The device's path from its name: "file:PATH", a path, "cxl:regionN". */
static inline int rcp__pod_path(const char *name, char *out, size_t len)
{
    if (!name || !*name) return -EINVAL;
    if (!strncmp(name, "cxl:", 4)) {
#ifdef SHMHEAP_WITH_CXL
        return rcp__cxl_resolve(name + 4, out, len);
#else
        return -EOPNOTSUPP;
#endif
    }
    if (!strncmp(name, "file:", 5)) name += 5;
    else if (!strchr(name, '/')) return -EINVAL;
    if (!*name || strlen(name) >= len) return -EINVAL;
    snprintf(out, len, "%s", name);
    return 0;
}

static inline int rcp__pod_fd_size(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st)) return -errno;
    if (!S_ISCHR(st.st_mode)) {
        *size = (uint64_t)st.st_size;
        return 0;
    }
    char p[96];
    unsigned long long v = 0;
    snprintf(p, sizeof p, "/sys/dev/char/%u:%u/size", major(st.st_rdev), minor(st.st_rdev));
    FILE *f = fopen(p, "r");
    if (!f) return -EOPNOTSUPP;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok) return -EOPNOTSUPP;
    *size = v;
    return 0;
}

static inline uint64_t rcp__pod_base_default(void)
{
    const char *e = getenv("RPCOOL_POD_BASE");
    if (e && *e) return strtoull(e, NULL, 0);
#if defined(__SANITIZE_THREAD__)
    return RCP__POD_TSAN_BASE;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return RCP__POD_TSAN_BASE;
#else
    return RCP__POD_DEFAULT_BASE;
#endif
#else
    return RCP__POD_DEFAULT_BASE;
#endif
}

/* Format a zeroed device of size bytes mapped at m (anywhere): 0, 1 if another did, or -errno. */
static inline int rcp__pod_format(char *m, uint64_t size, const struct rcp__pod_opts *o)
{
    struct rcp__pod_hdr *h = (struct rcp__pod_hdr *)(void *)m, n;
    uint64_t zero = 0, base = rcp__pod_base_default();
    if (rcp__load(&h->magic) != 0) return 1;
    memset(&n, 0, sizeof n);
    n.layout = RCP__POD_LAYOUT;
    n.nreg = RCP__POD_NREG;
    n.size = size;
    n.base = base;
    n.lease_off = 4096;
    n.lease_len = rcp__pod_round(RCP__LEASE_SIZE(RCP__POD_NLEASES), 4096);
    n.reg_off = n.lease_off + n.lease_len;
    n.area_size = rcp__pod_round(o && o->area_size ? o->area_size : 65536, 4096);
    n.own_off = n.reg_off + (uint64_t)n.nreg * sizeof(struct rcp__pod_reg);
    uint64_t max_ext = size / RCP__POD_EXTENT;
    n.area_off = rcp__pod_round(n.own_off + max_ext * sizeof(struct rcp__pod_own), 4096);
    n.heap_off = rcp__pod_round(n.area_off + (uint64_t)n.nreg * n.area_size, RCP__POD_EXTENT);
    if (size < RCP__POD_MIN_SIZE || n.heap_off + RCP__POD_EXTENT > size) return -EINVAL;
    if (base % ((uint64_t)1 << 30) || base < ((uint64_t)1 << 32) ||
        base + size > ((uint64_t)1 << 47))
        return -EINVAL;
    n.nextents = (size - n.heap_off) / RCP__POD_EXTENT;
    if (!rcp__cas(&h->magic, &zero, RCP__POD_FORMATTING)) return 1;
    memset(m + n.lease_off, 0, (size_t)(n.heap_off - n.lease_off));
    struct rcp__lease l;
    const char *e = getenv("RPCOOL_POD_LEASE_MS");
    struct rcp__lease_opts lo = {RCP__POD_NLEASES,
                                 o && o->bound_ms ? o->bound_ms
                                                  : e && *e ? (uint32_t)atoi(e) : 0};
    int rc = rcp__lease_attach(&l, m + n.lease_off, (size_t)n.lease_len, &lo);
    if (rc) {
        rcp__store(&h->magic, 0ull);
        return rc;
    }
    rcp__lease_detach(&l);
    memcpy((char *)h + 8, (char *)&n + 8, sizeof n - 8);
    rcp__store(&h->magic, RCP__POD_MAGIC);
    return 0;
}

/* Check a header copy against the device's size: every offset inside, in order. */
static inline int rcp__pod_check(const struct rcp__pod_hdr *h, uint64_t size)
{
    if (h->layout != RCP__POD_LAYOUT) return -EPROTO;
    if (h->size != size || h->size < RCP__POD_MIN_SIZE || h->nreg == 0 || h->nreg > 4096 ||
        h->base % ((uint64_t)1 << 21) || h->base < ((uint64_t)1 << 32) ||
        h->base > ((uint64_t)1 << 47) - h->size || h->lease_off < 4096 ||
        h->lease_off % 64 || h->lease_len < RCP__LEASE_SIZE(1) || h->lease_len > size ||
        h->reg_off < h->lease_off + h->lease_len || h->reg_off % 64 ||
        h->own_off < h->reg_off + (uint64_t)h->nreg * sizeof(struct rcp__pod_reg) ||
        h->own_off % 64 || h->nextents == 0 || h->nextents > size / RCP__POD_EXTENT ||
        h->area_off < h->own_off + h->nextents * sizeof(struct rcp__pod_own) ||
        h->area_off % 4096 || h->area_size % 4096 || h->area_size == 0 ||
        h->area_size > size / h->nreg || h->heap_off % RCP__POD_EXTENT ||
        h->heap_off < h->area_off + (uint64_t)h->nreg * h->area_size ||
        h->heap_off > size || h->nextents > (size - h->heap_off) / RCP__POD_EXTENT)
        return -EBADMSG;
    return 0;
}

static inline void rcp__pod_unmap(struct rcp__pod *p)
{
    munmap(p->base, (size_t)p->h.size);
    RCP__POD_FREE(p);
}

/* Open (and format if zeroed) the device name; its lease taken and renewed by a thread. host:
   the host name written in the lease (NULL: gethostname). */
static inline int rcp__pod_open(const char *name, const char *host, const struct rcp__pod_opts *o,
                                struct rcp__pod **out)
{
    char path[256];
    uint64_t size = 0;
    int rc = rcp__pod_path(name, path, sizeof path);
    if (rc) return rc;
    pthread_mutex_lock(&rcp__pods_lock);
    for (struct rcp__pod *q = rcp__pods; q; q = q->next)
        if (!strcmp(q->path, path) && q->pid == getpid() && !rcp__lease_is_fenced(&q->lease)) {
            q->refs++;
            *out = q;
            pthread_mutex_unlock(&rcp__pods_lock);
            return 0;
        }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    if ((rc = rcp__pod_fd_size(fd, &size))) goto out_fd;
    if (size < RCP__POD_MIN_SIZE || size > ((uint64_t)1 << 44)) {
        rc = -EINVAL;
        goto out_fd;
    }
    {
        char *m = (char *)mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        struct rcp__pod_hdr h;
        if (m == MAP_FAILED) {
            rc = -errno;
            goto out_fd;
        }
        struct rcp__pod_hdr *dh = (struct rcp__pod_hdr *)(void *)m;
        rc = rcp__pod_format(m, size, o);
        uint64_t until = rcp__now_ns() + 2000000000ull, mg;
        while (rc >= 0 && (mg = rcp__load(&dh->magic)) == RCP__POD_FORMATTING) {
            if (rcp__now_ns() > until) rc = -EBUSY;
            else usleep(1000);
        }
        if (rc >= 0) {
            memcpy(&h, dh, sizeof h);
            rc = h.magic != RCP__POD_MAGIC ? -EBADMSG : rcp__pod_check(&h, size);
        }
        munmap(m, (size_t)size);
        if (rc < 0) goto out_fd;
        m = (char *)mmap((void *)(uintptr_t)h.base, (size_t)size, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (m == MAP_FAILED || m != (char *)(uintptr_t)h.base) {
            if (m != MAP_FAILED) munmap(m, (size_t)size); /* a kernel before MAP_FIXED_NOREPLACE */
            rc = -EADDRINUSE;
            goto out_fd;
        }
        madvise(m, (size_t)size, MADV_DONTFORK);
        struct rcp__pod *p = (struct rcp__pod *)RCP__POD_MALLOC(sizeof *p);
        if (!p) {
            munmap(m, (size_t)size);
            rc = -ENOMEM;
            goto out_fd;
        }
        memset(p, 0, sizeof *p);
        p->h = h;
        p->base = m;
        p->reg = (struct rcp__pod_reg *)(void *)(m + h.reg_off);
        p->own = (struct rcp__pod_own *)(void *)(m + h.own_off);
        snprintf(p->path, sizeof p->path, "%s", path);
        if ((rc = rcp__lease_attach(&p->lease, m + h.lease_off, (size_t)h.lease_len, NULL)) ||
            (rc = rcp__lease_take(&p->lease, host)) < 0 || (rc = rcp__lease_start(&p->lease))) {
            if (p->lease.hdr) rcp__lease_detach(&p->lease);
            rcp__pod_unmap(p);
            goto out_fd;
        }
        p->refs = 1;
        p->pid = getpid();
        p->next = rcp__pods;
        rcp__pods = p;
        *out = p;
    }
out_fd:
    close(fd); /* the mapping stays: no descriptor is kept */
out:
    pthread_mutex_unlock(&rcp__pods_lock);
    return rc < 0 ? rc : 0;
}

static inline void rcp__pod_close(struct rcp__pod *p)
{
    if (!p) return;
    pthread_mutex_lock(&rcp__pods_lock);
    int last = --p->refs == 0;
    if (last)
        for (struct rcp__pod **pp = &rcp__pods; *pp; pp = &(*pp)->next)
            if (*pp == p) {
                *pp = p->next;
                break;
            }
    pthread_mutex_unlock(&rcp__pods_lock);
    if (!last) return;
    rcp__lease_detach(&p->lease);
    rcp__pod_unmap(p);
}

/* 0 while this process's lease is its own, -ESTALE once fenced (it stalled past its lease). */
static inline int rcp__pod_check_lease(struct rcp__pod *p) { return rcp__lease_check(&p->lease); }
static inline uint64_t rcp__pod_tag(const struct rcp__pod *p) { return rcp__lease_tag(&p->lease); }

static inline void *rcp__pod_area(const struct rcp__pod *p, uint32_t i)
{
    return p->base + p->h.area_off + (uint64_t)i * p->h.area_size;
}

/* >>pd-owners - ownership words ---------------------------------------------------------------- */

/* Whether an ownership word's tag is free to take: 0, or a lease no longer held. */
static inline int rcp__pod_tag_dead(const struct rcp__pod *p, uint64_t tag)
{
    return tag == 0 || !rcp__lease_tag_alive(&p->lease, tag);
}

/* Watch the lease that tag names until it lapses (then recover it: 0), renews (-EEXIST) or is
   seen released or recovered by someone else (0). Takes up to the bound and a little more. */
static inline int rcp__pod_tag_wait_dead(struct rcp__pod *p, uint64_t tag)
{
    uint32_t slot = (uint32_t)(tag & 0xffffu) - 1;
    struct rcp__lease_seen seen;
    memset(&seen, 0, sizeof seen);
    uint64_t first = 0;
    for (;;) {
        if (rcp__pod_tag_dead(p, tag)) return 0;
        int j = rcp__lease_judge(&p->lease, slot, &seen);
        if (j < 0) return j;
        if (!first) first = seen.word;
        else if (seen.word != first) return -EEXIST; /* it renewed: alive */
        if (j == RCP__LEASE_LAPSED) {
            int r = rcp__lease_recover(&p->lease, slot, &seen);
            return r == 0 || r == -EAGAIN ? (rcp__pod_tag_dead(p, tag) ? 0 : -EEXIST) : r;
        }
        usleep(2000);
    }
}

/* Recover every lease that lapsed: seen[] is the caller's memory of each slot (zeroed at first,
   p->lease.nslots of them). What the dead held is then free to take (ownership words). */
static inline void rcp__pod_sweep(struct rcp__pod *p, struct rcp__lease_seen *seen)
{
    for (uint32_t i = 0; i < p->lease.nslots; i++)
        if (rcp__lease_judge(&p->lease, i, &seen[i]) == RCP__LEASE_LAPSED)
            rcp__lease_recover(&p->lease, i, &seen[i]);
}

/* >>pd-registry - the channel registry --------------------------------------------------------- */

static inline int rcp__pod_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 0 && n <= RCP__POD_NAME_MAX;
}

/* The open entry named name: its index, -ENOENT. */
static inline int rcp__pod_reg_find(struct rcp__pod *p, const char *name, uint32_t *idx)
{
    if (!rcp__pod_name_ok(name)) return -EINVAL;
    for (uint32_t i = 0; i < p->h.nreg; i++) {
        struct rcp__pod_reg *e = &p->reg[i];
        if (rcp__load(&e->state) != RCP__POD_REG_OPEN) continue;
        char nm[RCP__POD_NAME_MAX + 1];
        memcpy(nm, e->name, sizeof nm);
        nm[RCP__POD_NAME_MAX] = 0;
        if (strcmp(nm, name)) continue;
        *idx = i;
        return 0;
    }
    return -ENOENT;
}

/* The registry's lock: a word in the header page after the header, holding its holder's tag;
   a holder whose lease is gone is taken over. Held for a scan and a take, never while waiting. */
#define RCP__POD_LOCK_OFF 128u

static inline int rcp__pod_reg_lock(struct rcp__pod *p)
{
    uint64_t *lk = (uint64_t *)(void *)(p->base + RCP__POD_LOCK_OFF), me = rcp__pod_tag(p);
    uint64_t watched = 0;
    struct rcp__lease_seen seen;
    for (;;) {
        uint64_t w = rcp__load(lk);
        if (rcp__pod_tag_dead(p, w)) {
            if (rcp__cas(lk, &w, me)) return 0;
            continue;
        }
        int rc = rcp__pod_check_lease(p);
        if (rc) return rc;
        if (w != watched) { /* a holder that died holding it is recovered once it lapsed */
            memset(&seen, 0, sizeof seen);
            watched = w;
        }
        uint32_t slot = (uint32_t)(w & 0xffffu) - 1;
        if (rcp__lease_judge(&p->lease, slot, &seen) == RCP__LEASE_LAPSED)
            rcp__lease_recover(&p->lease, slot, &seen);
        usleep(200); /* another process registers: a few loads and stores */
    }
}

static inline void rcp__pod_reg_unlock(struct rcp__pod *p)
{
    uint64_t me = rcp__pod_tag(p);
    rcp__cas((uint64_t *)(void *)(p->base + RCP__POD_LOCK_OFF), &me, 0ull);
}

/* Take an entry for name, under the registry's lock: the one of that name if its owner is dead
   (after watching its lease lapse, the lock let go meanwhile), else a free one. The entry is
   ours (owner = our tag, state OPENING); its area is the caller's to format. -EEXIST while a
   live server holds the name. */
static inline int rcp__pod_reg_take(struct rcp__pod *p, const char *name, uint32_t *idx)
{
    uint64_t me = rcp__pod_tag(p);
    int rc;
    if (!rcp__pod_name_ok(name)) return -EINVAL;
    for (;;) {
        if ((rc = rcp__pod_reg_lock(p))) return rc;
        uint64_t held = 0;
        int64_t same = -1, free_i = -1;
        for (uint32_t i = 0; i < p->h.nreg; i++) {
            struct rcp__pod_reg *e = &p->reg[i];
            char nm[RCP__POD_NAME_MAX + 1];
            memcpy(nm, e->name, sizeof nm);
            nm[RCP__POD_NAME_MAX] = 0;
            uint64_t w = rcp__load(&e->owner);
            int named = !strcmp(nm, name) && rcp__load(&e->state) != RCP__POD_REG_FREE;
            if (named && !rcp__pod_tag_dead(p, w)) held = w;
            else if (named && same < 0) same = i;
            else if (rcp__pod_tag_dead(p, w) && free_i < 0) free_i = i;
        }
        int64_t take = held ? -1 : same >= 0 ? same : free_i;
        if (take >= 0) {
            struct rcp__pod_reg *e = &p->reg[take];
            rcp__store(&e->owner, me);
            rcp__store(&e->state, (uint32_t)RCP__POD_REG_OPENING);
            memset(e->name, 0, sizeof e->name);
            memcpy(e->name, name, strlen(name));
            rcp__fetch_add(&e->epoch, 1u);
            *idx = (uint32_t)take;
        }
        rcp__pod_reg_unlock(p);
        if (take >= 0) return 0;
        if (!held) return -ENOSPC;
        if ((rc = rcp__pod_tag_wait_dead(p, held))) return rc; /* alive: -EEXIST */
    }
}

/* Give an entry up (its server closes): CLOSED, then free, by compare-and-swap of our tag. */
static inline void rcp__pod_reg_put(struct rcp__pod *p, uint32_t i)
{
    struct rcp__pod_reg *e = &p->reg[i];
    uint64_t me = rcp__pod_tag(p);
    if (rcp__load(&e->owner) != me) return;
    rcp__store(&e->state, (uint32_t)RCP__POD_REG_CLOSED);
    rcp__cas(&e->owner, &me, 0ull);
}

/* >>pd-extents - heap extents ------------------------------------------------------------------ */

static inline int rcp__pod_ext_free(const struct rcp__pod *p, uint64_t i)
{
    const struct rcp__pod_own *o = &p->own[i];
    return rcp__pod_tag_dead(p, rcp__load(&o->owner)) && rcp__pod_tag_dead(p, rcp__load(&o->user));
}

/* n contiguous extents, owned by this process and used by user (a client's tag): the address of
   the first, or NULL (errno ENOSPC, or ESTALE when fenced). */
static inline void *rcp__pod_extents_take(struct rcp__pod *p, uint64_t n, uint64_t user)
{
    uint64_t me = rcp__pod_tag(p);
    if (rcp__pod_check_lease(p)) {
        errno = ESTALE;
        return NULL;
    }
    for (uint64_t i = 0; n && i + n <= p->h.nextents;) {
        uint64_t k = 0;
        while (k < n && rcp__pod_ext_free(p, i + k)) k++;
        if (k < n) {
            i += k + 1;
            continue;
        }
        for (k = 0; k < n; k++) { /* each by compare-and-swap: a racer makes us give back */
            struct rcp__pod_own *o = &p->own[i + k];
            uint64_t w = rcp__load(&o->owner);
            if (!rcp__pod_tag_dead(p, w) || !rcp__pod_tag_dead(p, rcp__load(&o->user)) ||
                !rcp__cas(&o->owner, &w, me))
                break;
            rcp__store(&o->user, user);
        }
        if (k == n) return p->base + p->h.heap_off + i * RCP__POD_EXTENT;
        while (k--) {
            rcp__store(&p->own[i + k].user, 0ull);
            rcp__store(&p->own[i + k].owner, 0ull);
        }
        i++;
    }
    errno = ENOSPC;
    return NULL;
}

/* The index of the extent at address a, or -1 if a is not the start of one. */
static inline int64_t rcp__pod_extent_of(const struct rcp__pod *p, const void *a)
{
    uint64_t off = (uint64_t)((const char *)a - p->base);
    if ((const char *)a < p->base || off < p->h.heap_off || (off - p->h.heap_off) % RCP__POD_EXTENT)
        return -1;
    off = (off - p->h.heap_off) / RCP__POD_EXTENT;
    return off < p->h.nextents ? (int64_t)off : -1;
}

/* Give n extents from a back: those still ours (by compare-and-swap of our tag). Their user
   word stays: they are taken again once their user lets go too (or its lease is gone). */
static inline void rcp__pod_extents_put(struct rcp__pod *p, void *a, uint64_t n)
{
    int64_t i = rcp__pod_extent_of(p, a);
    uint64_t me = rcp__pod_tag(p);
    if (i < 0 || (uint64_t)i + n > p->h.nextents) return;
    for (uint64_t k = 0; k < n; k++) {
        struct rcp__pod_own *o = &p->own[(uint64_t)i + k];
        uint64_t w = me;
        rcp__cas(&o->owner, &w, 0ull);
    }
}

/* A user lets go of its extents (a client disconnects from a server that is gone). */
static inline void rcp__pod_extents_unuse(struct rcp__pod *p, void *a, uint64_t n)
{
    int64_t i = rcp__pod_extent_of(p, a);
    uint64_t me = rcp__pod_tag(p);
    if (i < 0 || (uint64_t)i + n > p->h.nextents) return;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t w = me;
        rcp__cas(&p->own[(uint64_t)i + k].user, &w, 0ull);
    }
}

#endif /* RCP__PODDEV_H */
