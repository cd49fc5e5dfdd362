/* SPDX-License-Identifier: MIT */
/* impl/podlease.h - liveness across kernels: a table of leases kept inside a shared device.
 * Internal, shared by the rpcool headers (names start with rcp__ and may change). Linux only;
 * needs libc (with pthreads) and impl/platform.h, nothing else.

   TABLE OF CONTENTS
   -----------------
   1. What it is       a lease per process, judged on each observer's own clock
   2. Usage            format/attach, take, renew, check, judge, recover, release
   3. Fencing          what a process that stalled past its lease must do
   4. The device       what it assumes of the shared memory
   5. Errors and limits
   The code follows: >>lease-types >>lease-attach >>lease-hold >>lease-watch

   1. WHAT IT IS
   -------------
   Hosts that share one device (a CXL region, a DAX device, a file, an ivshmem BAR) share no
   kernel: no socket, memfd, OFD lock, futex or /dev/shm name crosses them. This table lives in
   a range of the device that the caller maps (say its first pages) and uses nothing else.
   Every process that holds pod resources takes a lease slot. A slot holds one 64-bit word,
   state (2 bits) | epoch (30 bits) | heartbeat (32 bits), and the holder's identity for
   diagnostics: the host's boot_id (/proc/sys/kernel/random/boot_id), a host name (the caller's,
   else gethostname) and the pid as its own pid namespace sees it. Pids and boot ids may collide
   between "hosts" (containers of one kernel do); liveness never reads them.
   The holder renews by bumping the heartbeat, itself (rcp__lease_renew) or with a helper
   thread every period (rcp__lease_start). An observer on any host judges a lease lapsed when
   its word has not changed for longer than the table's bound, measured on the observer's OWN
   monotonic clock from the moment it first saw that value: no shared clock is assumed, only
   clocks that run at about the same rate. The bound is written in the table when it is
   formatted (RCP__LEASE_DEFAULT_BOUND_MS, 1 s, unless the opts say otherwise) so that every
   host uses the same one; the holder renews every RCP__LEASE_DEFAULT_PERIOD_DIV-th of it.
   A holder that dies is judged lapsed by an observer that watches it within bound + one poll
   of its death, and not before bound - period: the observer must have watched for the whole
   bound, so one that starts watching late waits a full bound from then.
   Recovery of a lapsed lease is one compare-and-swap of the word from what the observer judged
   to FREE with the epoch bumped: it fails if the holder renewed meanwhile (then it is alive),
   and of several observers exactly one wins and owns the clean-up of that (slot, epoch).

   2. USAGE
   --------
       struct rcp__lease l;
       rc = rcp__lease_attach(&l, mem, len, &opts);  // formats mem if it is all zeroes
       rc = rcp__lease_take(&l, "hostA");            // a slot, or -ENOSPC when all are held
       rc = rcp__lease_start(&l);                    // optional: a thread renews every period
       ...  if (rcp__lease_check(&l)) stop;          // before every action on pod resources
       uint64_t tag = rcp__lease_tag(&l);            // store it in every ownership word
       rcp__lease_release(&l);                       // frees the slot (stops the thread)
       rcp__lease_detach(&l);
   An observer keeps a struct rcp__lease_seen per slot it watches (zeroed at first) and calls
   rcp__lease_judge(&l, slot, &seen) as often as it likes: RCP__LEASE_FREE, _LIVE, _LAPSED, or
   an error. On _LAPSED it may call rcp__lease_recover(&l, slot, &seen): 0 if it won, and then
   releases whatever the ownership words tagged rcp__lease_tag_of(slot, seen's epoch) hold.
   rcp__lease_tag_alive(&l, tag) says whether a tag's lease is still the one held (not whether
   it is lapsed: that takes watching). The memory must start zeroed (a new file, a cleared
   device range) and be 64-byte aligned; a range whose first word holds something else is
   refused, never overwritten. Without the thread, the holder renews or checks at least once a
   period. A handle belongs to the process that took the lease: a forked child does not hold
   its parent's lease and must not use the parent's handle (it attaches and takes its own).

   3. FENCING
   ----------
   A holder that stalls past its lease (SIGSTOP, a paused VM, a long page fault) may be
   recovered while it sleeps; when it wakes it must not act on what now belongs to others.
   - rcp__lease_check before acting: it returns -ESTALE (RCP__LEASE_E_FENCED) once the slot's
     epoch is no longer the holder's, and from then on always (rcp__lease_is_fenced says so too;
     the renewing thread stops). A check also renews when the holder's own clock says a period
     has passed, by compare-and-swap on the whole word: either that renewal wins (the lease was
     not recovered and is live again) or the recovery did (the holder is fenced). There is no
     third outcome.
   - A check covers only what follows it closely: a holder can stall between the check and the
     act. So ownership is held in words that carry the owner's tag (rcp__lease_tag: slot and
     epoch, the low RCP__LEASE_TAG_BITS bits; 0 is no owner), changed by compare-and-swap with
     the owner's tag as the expected value. A recoverer first recovers the lease (the epoch
     moves on), then takes each word tagged with the old tag by compare-and-swap. A woken holder's
     compare-and-swap then fails, it checks, and finds itself fenced. Data written under a lock
     word, outside such a compare-and-swap, is protected only as far as the writer checks again
     after anything that can stall it.
   - A fenced holder stops using pod resources, detaches and takes a new lease if it goes on.

   4. THE DEVICE
   -------------
   The table assumes coherent shared memory: an aligned 64-bit atomic compare-and-swap by one
   host is seen, in order, by the loads and compare-and-swaps of every other host, as CXL 3.0
   provides for shared memory, and as a file or an ivshmem BAR mapped by guests of one machine
   does. A pooled CXL 2.0 device may not be coherent between hosts (software would have to
   flush and invalidate cache lines around each access, and atomics would not cross hosts):
   not supported yet.

   5. ERRORS AND LIMITS
   --------------------
   Functions return 0 (or a value as said) or -errno: -EINVAL bad argument or a slot index out
   of range, -EBADMSG a table or slot whose fields make no sense (a corrupt or hostile device:
   every field is checked before use, the table's size and bound are copied at attach and never
   read again), -EPROTO a table of another layout version, -EBUSY a table being formatted by
   another process for longer than RCP__LEASE_FORMAT_WAIT_MS, -ENOSPC no free slot,
   -ESTALE fenced, -EALREADY the handle already holds a slot, -ENOENT it holds none, -EAGAIN a
   recovery that lost (the word changed: the holder renewed, or another observer recovered).
   At most RCP__LEASE_MAX_SLOTS slots; a bound from RCP__LEASE_MIN_BOUND_MS to
   RCP__LEASE_MAX_BOUND_MS. The epoch has 30 bits: a slot taken a billion times wraps it. */
#ifndef RCP__PODLEASE_H
#define RCP__PODLEASE_H
#include "platform.h"
#include <pthread.h>

/* >>lease-types - the table's layout, the handle, the constants -------------------------------- */

#define RCP__LEASE_MAGIC 0x31534c5044504352ull /* "RCPDPLS1" */
#define RCP__LEASE_FORMATTING 0x2e2e2e2e2e2e2e2eull /* a formatter is writing the header */
#define RCP__LEASE_LAYOUT 1u
#define RCP__LEASE_DEFAULT_BOUND_MS 1000u
#define RCP__LEASE_DEFAULT_PERIOD_DIV 4u   /* renew every bound / 4 */
#define RCP__LEASE_MIN_BOUND_MS 10u
#define RCP__LEASE_MAX_BOUND_MS 600000u
#define RCP__LEASE_MAX_SLOTS 4096u
#define RCP__LEASE_DEFAULT_SLOTS 64u
#define RCP__LEASE_FORMAT_WAIT_MS 1000u     /* how long an attacher waits for a formatter */
#define RCP__LEASE_HOST_LEN 64u
#define RCP__LEASE_BOOT_LEN 40u
#define RCP__LEASE_TAG_BITS 46u             /* epoch (30) << 16 | slot + 1 (16) */
#define RCP__LEASE_E_FENCED (-ESTALE)

/* the word's fields */
#define RCP__LEASE_FREE 0u
#define RCP__LEASE_HELD 1u
#define RCP__LEASE_LIVE 2   /* judgements (rcp__lease_judge), besides FREE */
#define RCP__LEASE_LAPSED 3
#define RCP__LEASE_EPOCH_MASK 0x3fffffffu
#define rcp__lease_w_state(w) ((uint32_t)((w) >> 62))
#define rcp__lease_w_epoch(w) ((uint32_t)((w) >> 32) & RCP__LEASE_EPOCH_MASK)
#define rcp__lease_w_beat(w) ((uint32_t)(w))
#define rcp__lease_w_make(state, epoch, beat)                                                    \
    ((uint64_t)(state) << 62 | (uint64_t)((epoch) & RCP__LEASE_EPOCH_MASK) << 32 | (uint32_t)(beat))

/* In the device: a 64-byte header, then nslots slots of 192 bytes (cache-line multiples). */
struct rcp__lease_hdr {
    uint64_t magic;     /* 0 blank, RCP__LEASE_FORMATTING, RCP__LEASE_MAGIC */
    uint32_t layout;    /* RCP__LEASE_LAYOUT */
    uint32_t slot_size; /* sizeof(struct rcp__lease_slot) */
    uint32_t nslots;
    uint32_t bound_ms;
    uint8_t pad[40];
};
struct rcp__lease_slot {
    uint64_t word;                    /* state | epoch | heartbeat: the only liveness field */
    uint32_t pid;                     /* identity, for diagnostics: written after the take */
    uint32_t pad0;
    char boot[RCP__LEASE_BOOT_LEN];   /* boot_id text */
    char host[RCP__LEASE_HOST_LEN];   /* host name */
    uint8_t pad[72];
};
RCP__STATIC_ASSERT(sizeof(struct rcp__lease_hdr) == 64, "lease header layout");
RCP__STATIC_ASSERT(sizeof(struct rcp__lease_slot) == 192, "lease slot layout");

/* Bytes a table of n slots needs. */
#define RCP__LEASE_SIZE(n)                                                                       \
    (sizeof(struct rcp__lease_hdr) + (size_t)(n) * sizeof(struct rcp__lease_slot))

struct rcp__lease_opts {
    uint32_t nslots;   /* used when formatting: 0 = as many as fit, at most RCP__LEASE_MAX_SLOTS */
    uint32_t bound_ms; /* used when formatting: 0 = RCP__LEASE_DEFAULT_BOUND_MS */
};

/* A process's handle, in private memory. */
struct rcp__lease {
    struct rcp__lease_hdr *hdr;
    struct rcp__lease_slot *slots;
    uint32_t nslots, bound_ms, period_ms; /* copied at attach: never read from the device again */
    /* the slot held, if held */
    int held;
    uint32_t slot, epoch;
    uint64_t word;          /* the word as last written by this holder */
    uint64_t renewed_ns;    /* its own clock at the last renewal */
    uint32_t fenced;        /* sticky, atomic */
    pthread_mutex_t mu;     /* serialises this handle's renewals (holder and thread) */
    /* the renewing thread */
    int thread_on;
    uint32_t stop;
    pthread_t thread;
    pthread_cond_t cv;
};

/* An observer's memory of one slot, in its private memory (the times are its own clock's). Zero
 * it before the first judgement. */
struct rcp__lease_seen {
    uint64_t word;
    uint64_t since_ns; /* observer's clock when it first saw word (0: never looked) */
};

/* >>lease-attach - formatting, attaching, detaching -------------------------------------------- */

static inline uint64_t rcp__lease_ms_ns(uint32_t ms) { return (uint64_t)ms * 1000000ull; }

static inline int rcp__lease_format(void *mem, size_t len, const struct rcp__lease_opts *o)
{
    struct rcp__lease_hdr *h = (struct rcp__lease_hdr *)mem;
    uint32_t bound = o && o->bound_ms ? o->bound_ms : RCP__LEASE_DEFAULT_BOUND_MS;
    size_t fit = len < sizeof *h ? 0 : (len - sizeof *h) / sizeof(struct rcp__lease_slot);
    uint32_t n = o && o->nslots ? o->nslots : (uint32_t)(fit < RCP__LEASE_MAX_SLOTS ? fit :
                                                                         RCP__LEASE_MAX_SLOTS);
    if (rcp__load(&h->magic) != 0) return 1; /* formatted (or being): the opts do not apply */
    if (bound < RCP__LEASE_MIN_BOUND_MS || bound > RCP__LEASE_MAX_BOUND_MS) return -EINVAL;
    if (n == 0 || n > RCP__LEASE_MAX_SLOTS || RCP__LEASE_SIZE(n) > len) return -EINVAL;
    uint64_t zero = 0;
    if (!rcp__cas(&h->magic, &zero, RCP__LEASE_FORMATTING)) return 1; /* someone else did */
    h->layout = RCP__LEASE_LAYOUT;
    h->slot_size = (uint32_t)sizeof(struct rcp__lease_slot);
    h->nslots = n;
    h->bound_ms = bound;
    memset((char *)mem + sizeof *h, 0, (size_t)n * sizeof(struct rcp__lease_slot));
    rcp__store(&h->magic, RCP__LEASE_MAGIC);
    return 0;
}

/* Attach to the table at mem (len bytes, mapped shared), formatting it if it is blank. Checks
 * every header field; the handle keeps its own copies of the size and the bound. */
static inline int rcp__lease_attach(struct rcp__lease *l, void *mem, size_t len,
                                    const struct rcp__lease_opts *o)
{
    if (!l || !mem || ((uintptr_t)mem & 63u) || len < RCP__LEASE_SIZE(1)) return -EINVAL;
    memset(l, 0, sizeof *l);
    struct rcp__lease_hdr *h = (struct rcp__lease_hdr *)mem;
    int rc = rcp__lease_format(mem, len, o);
    if (rc < 0) return rc;
    uint64_t until = rcp__now_ns() + rcp__lease_ms_ns(RCP__LEASE_FORMAT_WAIT_MS);
    uint64_t m;
    while ((m = rcp__load(&h->magic)) == RCP__LEASE_FORMATTING) {
        if (rcp__now_ns() > until) return -EBUSY;
        usleep(1000);
    }
    if (m != RCP__LEASE_MAGIC) return -EBADMSG;
    uint32_t layout = rcp__load(&h->layout), ss = rcp__load(&h->slot_size);
    uint32_t n = rcp__load(&h->nslots), bound = rcp__load(&h->bound_ms);
    if (layout != RCP__LEASE_LAYOUT) return -EPROTO;
    if (ss != sizeof(struct rcp__lease_slot) || n == 0 || n > RCP__LEASE_MAX_SLOTS ||
        RCP__LEASE_SIZE(n) > len || bound < RCP__LEASE_MIN_BOUND_MS ||
        bound > RCP__LEASE_MAX_BOUND_MS)
        return -EBADMSG;
    l->hdr = h;
    l->slots = (struct rcp__lease_slot *)(h + 1);
    l->nslots = n;
    l->bound_ms = bound;
    l->period_ms = bound / RCP__LEASE_DEFAULT_PERIOD_DIV;
    pthread_mutex_init(&l->mu, NULL);
    return 0;
}

static inline int rcp__lease_release(struct rcp__lease *l);

/* Release the slot if held, forget the table. The memory stays the caller's. */
static inline void rcp__lease_detach(struct rcp__lease *l)
{
    if (!l || !l->hdr) return;
    if (l->held) rcp__lease_release(l);
    pthread_mutex_destroy(&l->mu);
    l->hdr = NULL;
}

/* >>lease-hold - taking, renewing, checking, releasing a lease --------------------------------- */

/* This host's identity for the slot: boot_id text and a host name. */
static inline void rcp__lease_identity(struct rcp__lease_slot *s, const char *host)
{
    char boot[RCP__LEASE_BOOT_LEN] = {0}, name[RCP__LEASE_HOST_LEN] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    if (host) snprintf(name, sizeof name, "%s", host);
    else if (gethostname(name, sizeof name - 1)) name[0] = 0;
    memcpy(s->boot, boot, sizeof boot);
    memcpy(s->host, name, sizeof name);
    rcp__store(&s->pid, (uint32_t)getpid());
}

/* Take a free slot; host NULL = gethostname. Returns the slot's index. */
static inline int rcp__lease_take(struct rcp__lease *l, const char *host)
{
    if (!l || !l->hdr) return -EINVAL;
    if (l->held) return -EALREADY;
    for (uint32_t i = 0; i < l->nslots; i++) {
        struct rcp__lease_slot *s = &l->slots[i];
        uint64_t w = rcp__load(&s->word);
        if (rcp__lease_w_state(w) != RCP__LEASE_FREE) continue;
        uint32_t e = (rcp__lease_w_epoch(w) + 1) & RCP__LEASE_EPOCH_MASK;
        if (e == 0) e = 1; /* epoch 0 never held: a tag is never 0 */
        uint64_t nw = rcp__lease_w_make(RCP__LEASE_HELD, e, 0);
        if (!rcp__cas(&s->word, &w, nw)) continue;
        rcp__lease_identity(s, host);
        pthread_mutex_lock(&l->mu);
        l->slot = i;
        l->epoch = e;
        l->word = nw;
        l->renewed_ns = rcp__now_ns();
        rcp__store(&l->fenced, 0u);
        l->held = 1;
        pthread_mutex_unlock(&l->mu);
        return (int)i;
    }
    return -ENOSPC;
}

static inline int rcp__lease_renew_locked(struct rcp__lease *l)
{
    if (rcp__load(&l->fenced)) return RCP__LEASE_E_FENCED;
    uint64_t w = l->word;
    uint64_t nw = rcp__lease_w_make(RCP__LEASE_HELD, l->epoch, rcp__lease_w_beat(w) + 1);
    if (!rcp__cas(&l->slots[l->slot].word, &w, nw)) {
        rcp__store(&l->fenced, 1u); /* recovered: the word is no longer ours */
        return RCP__LEASE_E_FENCED;
    }
    l->word = nw;
    l->renewed_ns = rcp__now_ns();
    return 0;
}

/* Bump the heartbeat. 0, or -ESTALE once fenced. */
static inline int rcp__lease_renew(struct rcp__lease *l)
{
    if (!l || !l->hdr || !l->held) return l && l->hdr ? -ENOENT : -EINVAL;
    pthread_mutex_lock(&l->mu);
    int rc = rcp__lease_renew_locked(l);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* Call before acting on pod resources: 0 while the lease is this holder's, -ESTALE once it was
 * recovered (and always after). Renews when a period has passed on this process's clock. */
static inline int rcp__lease_check(struct rcp__lease *l)
{
    if (!l || !l->hdr || !l->held) return l && l->hdr ? -ENOENT : -EINVAL;
    pthread_mutex_lock(&l->mu);
    int rc = rcp__load(&l->fenced) ? RCP__LEASE_E_FENCED : 0;
    if (!rc && rcp__load(&l->slots[l->slot].word) != l->word) {
        rcp__store(&l->fenced, 1u);
        rc = RCP__LEASE_E_FENCED;
    }
    if (!rc && rcp__now_ns() - l->renewed_ns >= rcp__lease_ms_ns(l->period_ms))
        rc = rcp__lease_renew_locked(l);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static inline int rcp__lease_is_fenced(struct rcp__lease *l)
{
    return l && rcp__load(&l->fenced) != 0;
}

static inline uint64_t rcp__lease_tag_of(uint32_t slot, uint32_t epoch)
{
    return (uint64_t)(epoch & RCP__LEASE_EPOCH_MASK) << 16 | (uint64_t)(slot + 1u);
}

/* The tag this holder stores in ownership words; 0 when it holds no slot. */
static inline uint64_t rcp__lease_tag(const struct rcp__lease *l)
{
    return l && l->held ? rcp__lease_tag_of(l->slot, l->epoch) : 0;
}

static inline void *rcp__lease_thread(void *arg)
{
    struct rcp__lease *l = (struct rcp__lease *)arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop && !rcp__load(&l->fenced)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + rcp__lease_ms_ns(l->period_ms);
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT && !l->stop)
            rcp__lease_renew_locked(l);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A thread that renews every period until released or fenced. */
static inline int rcp__lease_start(struct rcp__lease *l)
{
    if (!l || !l->hdr) return -EINVAL;
    if (!l->held) return -ENOENT;
    if (l->thread_on) return -EALREADY;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    l->stop = 0;
    int rc = pthread_create(&l->thread, NULL, rcp__lease_thread, l);
    if (rc) {
        pthread_cond_destroy(&l->cv);
        return -rc;
    }
    l->thread_on = 1;
    return 0;
}

static inline void rcp__lease_stop(struct rcp__lease *l)
{
    if (!l->thread_on) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    l->thread_on = 0;
}

/* Free the slot (the epoch stays; the next taker bumps it). -ESTALE if it had been recovered:
 * then the slot is not touched. */
static inline int rcp__lease_release(struct rcp__lease *l)
{
    if (!l || !l->hdr) return -EINVAL;
    if (!l->held) return -ENOENT;
    rcp__lease_stop(l);
    pthread_mutex_lock(&l->mu);
    uint64_t w = l->word;
    int rc = 0;
    if (rcp__load(&l->fenced) ||
        !rcp__cas(&l->slots[l->slot].word, &w, rcp__lease_w_make(RCP__LEASE_FREE, l->epoch, 0)))
        rc = RCP__LEASE_E_FENCED;
    l->held = 0;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* >>lease-watch - judging and recovering others' leases ---------------------------------------- */

/* Judge slot: RCP__LEASE_FREE, RCP__LEASE_LIVE (held, its word changed within the bound, or not
 * watched long enough yet), RCP__LEASE_LAPSED (held, unchanged for longer than the bound on this
 * process's clock), -EINVAL (slot out of range), -EBADMSG (a state no writer makes). */
static inline int rcp__lease_judge(const struct rcp__lease *l, uint32_t slot,
                                   struct rcp__lease_seen *seen)
{
    if (!l || !l->hdr || !seen || slot >= l->nslots) return -EINVAL;
    uint64_t w = rcp__load(&l->slots[slot].word), now = rcp__now_ns();
    uint32_t st = rcp__lease_w_state(w);
    if (st != RCP__LEASE_FREE && st != RCP__LEASE_HELD) return -EBADMSG;
    if (!seen->since_ns || w != seen->word) {
        seen->word = w;
        seen->since_ns = now ? now : 1;
    }
    if (st == RCP__LEASE_FREE) return RCP__LEASE_FREE;
    return now - seen->since_ns > rcp__lease_ms_ns(l->bound_ms) ? RCP__LEASE_LAPSED
                                                                 : RCP__LEASE_LIVE;
}

/* Recover slot, which the last rcp__lease_judge with seen found RCP__LEASE_LAPSED: bumps its
 * epoch by compare-and-swap and frees it. 0 when this caller won (it now cleans up what
 * rcp__lease_tag_of(slot, rcp__lease_w_epoch(seen->word)) owns), -EAGAIN when the word changed
 * meanwhile, -EINVAL when seen was not a lapsed judgement. */
static inline int rcp__lease_recover(const struct rcp__lease *l, uint32_t slot,
                                     struct rcp__lease_seen *seen)
{
    if (!l || !l->hdr || !seen || slot >= l->nslots || !seen->since_ns) return -EINVAL;
    uint64_t w = seen->word;
    if (rcp__lease_w_state(w) != RCP__LEASE_HELD ||
        rcp__now_ns() - seen->since_ns <= rcp__lease_ms_ns(l->bound_ms))
        return -EINVAL;
    uint32_t e = (rcp__lease_w_epoch(w) + 1) & RCP__LEASE_EPOCH_MASK;
    if (!rcp__cas(&l->slots[slot].word, &w, rcp__lease_w_make(RCP__LEASE_FREE, e, 0)))
        return -EAGAIN;
    seen->word = rcp__lease_w_make(RCP__LEASE_FREE, e, 0);
    seen->since_ns = rcp__now_ns();
    return 0;
}

/* Whether tag names the lease its slot holds now (held, same epoch). A held lease may still be
 * lapsed: that takes rcp__lease_judge. 0 for a tag of a bad slot. */
static inline int rcp__lease_tag_alive(const struct rcp__lease *l, uint64_t tag)
{
    uint64_t s = tag & 0xffffu;
    if (!l || !l->hdr || s == 0 || s > l->nslots) return 0;
    uint64_t w = rcp__load(&l->slots[s - 1].word);
    return rcp__lease_w_state(w) == RCP__LEASE_HELD &&
           rcp__lease_w_epoch(w) == (uint32_t)(tag >> 16 & RCP__LEASE_EPOCH_MASK);
}

/* A copy of slot's identity, made safe to print whatever the device holds. */
struct rcp__lease_who {
    uint64_t word;
    uint32_t pid;
    char boot[RCP__LEASE_BOOT_LEN];
    char host[RCP__LEASE_HOST_LEN];
};

static inline int rcp__lease_read(const struct rcp__lease *l, uint32_t slot,
                                  struct rcp__lease_who *out)
{
    if (!l || !l->hdr || !out || slot >= l->nslots) return -EINVAL;
    const struct rcp__lease_slot *s = &l->slots[slot];
    out->word = rcp__load(&s->word);
    out->pid = rcp__load(&s->pid);
    memcpy(out->boot, s->boot, sizeof out->boot);
    memcpy(out->host, s->host, sizeof out->host);
    out->boot[sizeof out->boot - 1] = 0;
    out->host[sizeof out->host - 1] = 0;
    uint32_t st = rcp__lease_w_state(out->word);
    return st == RCP__LEASE_FREE || st == RCP__LEASE_HELD ? 0 : -EBADMSG;
}

#endif /* RCP__PODLEASE_H */
