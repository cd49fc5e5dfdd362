/* SPDX-License-Identifier: MIT */
/* nppin.h - RDMA over memory that is not pinned up front: chunks registered on demand under a
   pinned-memory budget, leases for remote peers, stale-mapping detection.
   version 0.4.0

   TABLE OF CONTENTS
   -----------------
   1. Usage
   2. What it does
   3. Example
   4. Local work requests
   5. Remote peers and leases
   6. Stale mappings, ODP and fork
   7. Thread safety
   8. Errors
   9. Limits
   The declarations follow this text; then the implementation, whose sections are marked with
   anchors to grep for: >>implementation >>errors >>no-rdma >>types >>helpers >>regions
   >>userfaultfd >>budget >>create >>slots >>posting >>invalidate >>protocol >>peers >>chan-verbs
   >>stats. The licence (MIT) is at the end of the file.

   1. USAGE
   --------
   Copy nppin.h and the impl/ folder into your project. In exactly one C or C++ file:

       #define NPPIN_IMPLEMENTATION
       #include "nppin.h"

   Link with -libverbs -pthread (Debian: libibverbs-dev). The implementation needs GNU
   extensions of glibc: include nppin.h before any system header in that file, or compile with
   -D_GNU_SOURCE. Options, defined before the include that has NPPIN_IMPLEMENTATION:
       NPPIN_STATIC           make every function static (private to that file)
       NPPIN_NO_RDMA          build without rdma-core; automatic when <infiniband/verbs.h> is
                              missing. Every function then returns NPPIN_E_NOTSUP.
       NPPIN_ASSERT(x)        your assert (default: assert from <assert.h>)
       NPPIN_MALLOC(n), NPPIN_FREE(p)   your allocator (define both or neither)
   Set NPPIN_DEBUG=1 in the environment to log to stderr (read once per process) when no log
   callback is given in nppin_opts.
   Options structs (nppin_opts): zero means the default. Fill one with designated initialisers in C;
   in C++, value-initialise it and assign the fields you set (`T o{};` and `T o = {};` never warn;
   an initialiser list that leaves fields out warns under -Wextra in g++ before 14,
   -Wmissing-field-initializers):

       nppin_opts o = {.budget = 64 << 20};  // C
       nppin_opts o{}; o.budget = 64 << 20;  // C++

   2. WHAT IT DOES
   ---------------
   Registering memory with ibv_reg_mr pins it: the pages stay resident, cannot be swapped, and a
   big region takes long to register. nppin_reg() registers a region of any size at once and
   pins nothing. The region is cut into aligned chunks (NPPIN_DEFAULT_CHUNK, 2 MiB); a chunk is
   registered (ibv_reg_mr of the part of the chunk inside the region) when a work request or a
   peer first needs it, and stays registered while anything uses it. The sum of registered
   chunks ("pinned") never exceeds the budget (nppin_opts.budget, by default RLIMIT_MEMLOCK minus
   NPPIN_MEMLOCK_RESERVE, or NPPIN_DEFAULT_BUDGET when the limit is unlimited). To register a
   chunk when the budget is full, the least recently used chunks that no work request and no
   valid lease uses are deregistered. nppin never reads or writes your memory itself, and pinned
   memory is at most the budget; but ibv_reg_mr faults in every page it pins, so resident
   memory grows by the whole registered part of a chunk when it is first registered. Once
   deregistered, those pages are ordinary memory again, which the kernel may swap out.

   3. EXAMPLE
   ----------
       nppin_ctx *np;  nppin_region *rg;  struct ibv_wc wc;
       nppin_create(pd, &(nppin_opts){.budget = 64 << 20}, &np);
       char *big = mmap(NULL, 1ul << 30, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
       nppin_reg(np, big, 1ul << 30, &rg);                 // returns at once, pins nothing
       nppin_target t = {.addr = peer_addr, .rkey = peer_rkey};
       int rc = nppin_post_write(np, qp, 7, big + 123456789, 4096, &t, 0);
       while (rc == 0 && nppin_poll(np, cq, &wc, 1) == 0) {}   // wc.wr_id == 7
       if (rc) fprintf(stderr, "%s\n", nppin_strerror(rc));
       nppin_dereg(rg);
       nppin_destroy(np);

   4. LOCAL WORK REQUESTS
   ----------------------
   nppin_post_send, nppin_post_recv, nppin_post_write and nppin_post_read take a local buffer
   anywhere inside a region of the context: the chunks it covers are registered (or found) and
   held until the work request completes. A WRITE or READ becomes one work request per piece
   that lies in one local chunk (and one remote chunk), chained in one ibv_post_send; a SEND or
   RECV uses one scatter/gather entry per local chunk, so the QP needs that many (max_send_sge,
   max_recv_sge). Every post produces exactly one completion for your wr_id, signalled or not:
   poll with nppin_poll (ibv_poll_cq, then nppin_complete on each completion), or call
   nppin_complete yourself on every completion of that CQ; work requests of your own on the same
   CQ pass through untouched. Until its completion is handed to nppin, a post holds its chunks.
   A post never splits a range over time and never waits for completions: a range that needs
   more chunks than the budget fails with NPPIN_E_TOOBIG, and one that cannot be pinned now
   because the budget is held by work requests in flight or by leases being revoked fails with
   NPPIN_E_BUSY (poll, progress peers, retry). nppin_xfer moves any range of any size: it posts
   pieces that fit the budget one after another on a QP and waits for each on its CQ (which must
   carry nothing else meanwhile: a completion there that is not nppin's is dropped, with a
   warning in the log), handling the peers' messages while it waits; with NPPIN_NOSPLIT it fails
   with NPPIN_E_TOOBIG instead. A failed piece ends it with -EACCES (a remote access error) or
   -EIO (the device's status is in the log). When timeout_ns pass before a piece could be posted
   or before it completed, it returns -ETIMEDOUT, and a piece still posted is left to nppin: its
   completion, whenever nppin_poll polls it from that CQ (or it is handed to nppin_complete,
   which returns 2), is consumed and lets its chunks go; it is never returned as yours.

   5. REMOTE PEERS AND LEASES
   --------------------------
   A peer is one side of a two-sided message channel (nppin_chan: send and recv functions, or
   nppin_chan_verbs over a connected RC QP and its CQ used for nothing else). Both sides create a
   peer from their channel; either side may own regions and access the other's. The owner
   exports a region as a handle (nppin_region_export, NPPIN_HANDLE_SIZE bytes, sent any way you
   like); the other side opens it (nppin_remote_open) and names it in an nppin_target for
   nppin_post_write/_read/nppin_xfer on a data QP connected to the owner. The accessing side keeps
   a cache of chunk keys. On a miss it asks the owner over the channel and waits for the answer
   (processing the channel's other messages meanwhile); the owner registers the chunk and grants
   a lease: rkey, generation and duration (nppin_opts.lease_ms). The holder uses a lease only
   until its own clock says lease_ms minus lease_margin_ms have passed since it asked, and renews
   it (asks again) when less than half of lease_ms is left. The owner never deregisters a
   chunk while a lease on it is valid: not before the holder returned it, and not before
   lease_ms have passed on the owner's clock since the grant. So a remote access never meets a
   dead rkey, provided a work request reaches the owner within lease_margin_ms of being posted.
   When the owner needs the budget (or the chunk went stale, section 6) it sends the holders a
   revocation; a holder returns the lease once its own work requests on that chunk have
   completed; a holder that is dead or silent is waited out until the lease expires. Messages
   are handled when either side calls nppin_peer_progress, on a miss, in nppin_sync and
   nppin_xfer, and now and then on a hit. While chunks are being revoked, requests for them are
   answered "busy", and the asking side retries until request_timeout_ms.
   nppin_chan_verbs keeps NPPIN_CHAN_SLOTS receives posted; a burst of messages (revocations
   after invalidating a large range, or a peer flooding it) can run ahead of them, so connect
   its QP with rnr_retry 7 (retry for ever on "receiver not ready"): with fewer retries the QP
   fails, the peer is taken for dead, and the leases it held run out instead of being returned.
   A miss the owner cannot serve fails with the owner's reason (for example -EFAULT when that
   memory is not mapped there, or NPPIN_E_PINLIMIT), or NPPIN_E_HANDLE for a region it does not
   have. A peer's bytes are checked, never trusted: a bad message is counted and dropped.

   6. STALE MAPPINGS, ODP AND FORK
   -------------------------------
   A registration points at the physical pages that were mapped when it was made. If the
   application unmaps memory (munmap, mmap MAP_FIXED over it, mremap away or shrinking) or drops
   it (madvise MADV_DONTNEED or MADV_REMOVE) and later touches or maps new memory at the same
   address, the old registration still points at the old pages. nppin watches for this with
   userfaultfd: each region, and each chunk it registers, is also registered (write-protect
   mode; nothing is ever write-protected, so no page fault is ever delivered) with a userfaultfd
   opened with UFFD_FEATURE_EVENT_UNMAP, _REMOVE and _REMAP, read by a thread of the context. On
   such an event the overlapping chunks' registrations are retired: the chunk gets a new
   registration (new generation) when next needed, the holders of leases on the old one are sent
   revocations, and the old one (its pages still pinned, so a late access reaches the old pages,
   never an error) is deregistered once returned or expired. The kernel makes munmap, madvise
   and mremap wait until that thread has read the event, not until it has acted: call
   nppin_sync() after them and before telling peers to read the new contents; it returns once
   every event read so far has been acted on and every lease on a retired registration has been
   returned or has expired (it progresses the context's peers meanwhile).
   Why userfaultfd and not symbol interposition (UCX's way): interposing munmap, mremap and
   madvise misses glibc's internal calls (free() unmaps large blocks through a private alias),
   direct system calls and other libraries' own calls, and would change those functions for the
   whole program; userfaultfd events come from the kernel for every path. Its costs: it needs
   Linux 5.11 (UFFD_USER_MODE_ONLY) or vm.unprivileged_userfaultfd=1 or CAP_SYS_PTRACE, anonymous
   memory, shmem or hugetlbfs (other file mappings cannot be watched), one thread per context.
   nppin_reg watches the whole region at once when it is mapped then; memory mapped later inside
   it is watched chunk by chunk as chunks are registered, which splits that mapping at chunk
   boundaries (an mremap of a range spanning two mappings fails with EFAULT, as it always does).
   Where userfaultfd cannot be had, or a chunk's memory cannot be watched, nppin_get_stats says
   so (stale_detect, unwatched_regs; its former name nppin_stats_get still works), and the
   application must call nppin_invalidate(addr, len) for memory it unmaps or drops; it is always
   right to call it (our shmheap's frees of whole spans, for instance). nppin_opts.detect =
   NPPIN_DETECT_NONE switches detection off.
   On-demand paging: if the device reports ODP for RC send, receive, read and write
   (ibv_query_device_ex odp_caps) and nppin_opts.odp is not NPPIN_ODP_OFF, each region is one
   IBV_ACCESS_ON_DEMAND registration instead of chunks: nothing is pinned, the kernel follows
   every mapping change, leases never need revoking. nppin_stats.odp says which path is in use.
   Fork: libibverbs 44 on a kernel with copy-on-fork for pinned pages (5.13+) needs no
   ibv_fork_init (nppin_stats.fork_status reports ibv_is_fork_initialized()). A child gets a copy
   of every page and may read and write all memory, but must not call nppin (or any verbs)
   functions on the parent's context: the verbs objects, the userfaultfd and its thread belong to
   the parent. The parent's registrations and leases are unaffected by the child.

   7. THREAD SAFETY
   ----------------
   A context, its regions, peers and remotes may be used from any thread; calls on one context
   are serialised by its mutex (a miss waiting for its owner holds it, up to
   request_timeout_ms). Completions for a context's work requests may be polled by any thread.

   8. ERRORS
   ---------
   Functions return 0 or a negative code: -errno from the system or libibverbs, or NPPIN_E_*.
   nppin_strerror(code) explains it; nppin_explain(ctx, code, buf, len) adds the context's
   numbers (for NPPIN_E_PINLIMIT: RLIMIT_MEMLOCK, the budget and what is pinned now).

   One rule in every rpcool header: each owns a block of codes counting up from its number
   (shmheap -1000, rpcool -2000, alock -3000, krconn -4000, nppin -5000). X_strerror explains
   its own codes and those of every rpcool header declared before its implementation (a code
   passed through keeps its text); -1 to -4095 is -errno (strerror's text if the system knows
   it); an undeclared header's code names that header; else "unknown error code"; 0 "success".
   Static texts. A failed work request completes with its own status in the nppin_poll'ed wc.

   Handles, one rule in every rpcool header: a handle is open from the call that made it until
   its close. A second close, or any use after the close, returns the header's E_BADHANDLE code
   (a function that returns a pointer or a size returns NULL or 0 and sets errno to EBADF); in
   a child of fork(), a handle its parent made returns the header's E_FORKED code, its close
   included (the child's copy goes at exit or exec), unless the header lets children use it. A
   table of open handles in each process tells these apart without reading the handle, so none
   of them is a crash; once a later open hands out the same address again, the old pointer is
   that new handle (as a file descriptor's number is). A pointer that was never a handle is
   undefined, as free() of one is.
   Here the handles are nppin_ctx, nppin_region, nppin_peer and nppin_remote: NPPIN_E_BADHANDLE
   and NPPIN_E_FORKED (see section 6 on fork). nppin_destroy closes the regions, peers and
   remotes still open on its context, nppin_peer_destroy the peer's remotes: their handles are
   closed then too. A close that returns NPPIN_E_BUSY leaves the handle open. A channel
   (nppin_chan) is a value the caller owns, not a handle.

   9. LIMITS
   ---------
   Linux with glibc, libibverbs (rdma-core 44 or later). Chunk sizes are powers of two from a
   page to 1 GiB. 64 peers per context. A region's metadata takes 12 bytes per chunk, allocated
   lazily by the system. Regions of one context may not overlap. NPPIN_DEFAULT_MAX_INFLIGHT posts
   in flight per context (opts.max_inflight). Pieces of one post are chained in one
   ibv_post_send, so the send queue must have room for them: if it fills in the middle of a
   chain, the post fails and the pieces already posted keep their chunks registered until
   nppin_destroy. Lease correctness assumes a work request is executed by the owner within
   lease_margin_ms of its post (RC retries beyond that, on a lossy network, could reach a chunk
   deregistered after expiry). The control channel of nppin_chan_verbs pins its own
   NPPIN_CHAN_BUF_BYTES outside the budget. The ODP path is written against the verbs
   specification but has not met a device that offers ODP (Soft-RoCE on Linux 6.1 has none).
*/
#ifndef NPPIN_H
#define NPPIN_H

/* The version: NPPIN_VERSION_MAJOR.MINOR.PATCH, and as a string (see CHANGES.md). */
#define NPPIN_VERSION_MAJOR 0
#define NPPIN_VERSION_MINOR 4
#define NPPIN_VERSION_PATCH 0
#define NPPIN_VERSION "0.4.0"

#if defined(NPPIN_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include <stddef.h>
#include <stdint.h>

#if !defined(NPPIN_NO_RDMA) && defined(__has_include)
#if !__has_include(<infiniband/verbs.h>)
#define NPPIN_NO_RDMA 1
#endif
#endif
#ifndef NPPIN_NO_RDMA
#include <infiniband/verbs.h>
#else
struct ibv_pd;
struct ibv_qp;
struct ibv_cq;
struct ibv_wc;
#endif

#ifdef NPPIN_STATIC
#define NPPIN_API static __attribute__((unused))
#else
#define NPPIN_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define NPPIN_DEFAULT_CHUNK ((size_t)2 << 20)
#define NPPIN_DEFAULT_XFER_TIMEOUT_NS 60000000000ull /* nppin_xfer's timeout_ns 0: 60 s */
#define NPPIN_DEFAULT_BUDGET ((size_t)1 << 30)      /* when RLIMIT_MEMLOCK is unlimited */
#define NPPIN_MEMLOCK_RESERVE ((size_t)1 << 20)     /* left for the CQs, QPs and channels */
#define NPPIN_DEFAULT_LEASE_MS 2000u
#define NPPIN_DEFAULT_REQUEST_TIMEOUT_MS 10000u
#define NPPIN_DEFAULT_MAX_INFLIGHT 1024u
#define NPPIN_MAX_PEERS 64
#define NPPIN_HANDLE_SIZE 32
#define NPPIN_MSG_SIZE 48
#define NPPIN_CHAN_SLOTS 32
#define NPPIN_CHAN_BUF_BYTES (2 * NPPIN_CHAN_SLOTS * NPPIN_MSG_SIZE)

/* Error codes: nppin's block starts at -5000 (negative errno values come from the system and
   libibverbs). nppin_strerror explains each. */
#define NPPIN_ERRORS(X)                                                                            \
    X(NPPIN_E_NOTSUP, -5000, "not supported (built without rdma-core, or the device lacks it)")    \
    X(NPPIN_E_NOTREG, -4999, "the address range is not inside one region of this context")         \
    X(NPPIN_E_OVERLAP, -4998, "the region overlaps a region of this context")                      \
    X(NPPIN_E_TOOBIG, -4997,                                                                       \
      "the range needs more pinned memory than the budget (nppin_xfer moves it in pieces)")        \
    X(NPPIN_E_BUSY, -4996,                                                                         \
      "the pinned-memory budget is held by work requests in flight or leases being revoked: "      \
      "poll completions, progress peers, retry")                                                   \
    X(NPPIN_E_PINLIMIT, -4995,                                                                     \
      "could not pin memory: ibv_reg_mr failed with ENOMEM, the memlock limit (RLIMIT_MEMLOCK, "   \
      "ulimit -l) is too low for the budget (nppin_explain gives both)")                           \
    X(NPPIN_E_PROTO, -4994, "the peer sent an invalid message")                                    \
    X(NPPIN_E_HANDLE, -4993, "not a valid region handle, or the owner has no such region")         \
    X(NPPIN_E_PEERDEAD, -4992, "the peer's channel failed")                                        \
    X(NPPIN_E_INFLIGHT, -4991, "too many posts in flight (nppin_opts.max_inflight)")               \
    X(NPPIN_E_NOPEERS, -4990, "the context has NPPIN_MAX_PEERS peers already")                     \
    X(NPPIN_E_BADHANDLE, -4989, "not an open nppin handle (closed or destroyed already)")          \
    X(NPPIN_E_FORKED, -4988, "this nppin handle was made before fork(): not usable in the child")

#define NPPIN__ERROR_ENUM(name, value, text) name = value,
enum { NPPIN_ERRORS(NPPIN__ERROR_ENUM) };
#undef NPPIN__ERROR_ENUM

enum { NPPIN_DETECT_AUTO = 0, NPPIN_DETECT_NONE = 1 };
enum { NPPIN_ODP_AUTO = 0, NPPIN_ODP_OFF = 1 };
enum { NPPIN_LOG_ERROR = 0, NPPIN_LOG_WARN = 1, NPPIN_LOG_INFO = 2, NPPIN_LOG_DEBUG = 3 };
enum { NPPIN_OP_WRITE = 1, NPPIN_OP_READ = 2 };
#define NPPIN_NOSPLIT 1u /* nppin_xfer: fail with NPPIN_E_TOOBIG instead of moving pieces */

typedef struct nppin_ctx nppin_ctx;       /* one per protection domain: budget, cache, regions */
typedef struct nppin_region nppin_region; /* a range of this process's memory */
typedef struct nppin_peer nppin_peer;     /* one side of a message channel to another process */
typedef struct nppin_remote nppin_remote; /* a peer's region, opened from its handle */

/* Zero means default (section 1: filling it in C and C++). */
typedef struct nppin_opts {
    size_t chunk_size;         /* power of two, page to 1 GiB; 0 = NPPIN_DEFAULT_CHUNK */
    size_t budget;             /* most bytes registered at once; 0 = from RLIMIT_MEMLOCK */
    int access;                /* ibv access flags; 0 = local write, remote read and write */
    unsigned lease_ms;         /* lease duration; 0 = NPPIN_DEFAULT_LEASE_MS */
    unsigned lease_margin_ms;  /* holder stops this early; 0 = lease_ms / 4 */
    unsigned request_timeout_ms; /* a miss waits this long for a grant; 0 = default */
    unsigned max_inflight;     /* posts in flight; 0 = NPPIN_DEFAULT_MAX_INFLIGHT */
    int detect;                /* NPPIN_DETECT_AUTO (userfaultfd if possible) or _NONE */
    int odp;                   /* NPPIN_ODP_AUTO (use it if the device has it) or _OFF */
    void (*log)(int level, const char *msg, void *user); /* NULL: silent unless NPPIN_DEBUG */
    void *log_user;
} nppin_opts;

/* Where a WRITE or READ goes: a plain MR of the peer (remote == NULL: addr, rkey) or a peer's
   nppin region (remote from nppin_remote_open; addr is an address in the owner's memory). */
typedef struct nppin_target {
    uint64_t addr;
    uint32_t rkey;
    nppin_remote *remote;
} nppin_target;

/* A two-sided message channel: send delivers one message of len <= NPPIN_MSG_SIZE bytes, in
   order, returning 0 or a negative errno; recv returns the length of the next message copied
   into buf, 0 if none came within timeout_ns (0 = just look), or a negative errno. */
typedef struct nppin_chan {
    int (*send)(void *user, const void *msg, size_t len);
    int (*recv)(void *user, void *buf, size_t cap, uint64_t timeout_ns);
    void *user;
} nppin_chan;

typedef struct nppin_stats {
    size_t budget, pinned, pinned_peak, chunk_size;
    uint64_t regs, deregs, evictions, stale_invalidations, leases_granted, leases_busy,
        revokes_sent, revokes_received, lease_misses, lease_renewals, bad_messages;
    uint64_t memlock_limit;    /* RLIMIT_MEMLOCK at create (UINT64_MAX = unlimited) */
    int stale_detect;          /* 1 = userfaultfd events are watched */
    uint64_t unwatched_regs;   /* registrations userfaultfd could not watch */
    int odp;                   /* 1 = regions use on-demand paging instead of chunks */
    int fork_status;           /* ibv_is_fork_initialized(): 0 disabled, 1 enabled, 2 unneeded */
} nppin_stats;

NPPIN_API int nppin_create(struct ibv_pd *pd, const nppin_opts *opts, nppin_ctx **out);
NPPIN_API int nppin_destroy(nppin_ctx *ctx); /* also deregisters its regions, destroys its peers */
NPPIN_API int nppin_reg(nppin_ctx *ctx, void *addr, size_t len, nppin_region **out);
NPPIN_API int nppin_dereg(nppin_region *rg);

NPPIN_API int nppin_post_send(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                              size_t len, unsigned send_flags);
NPPIN_API int nppin_post_recv(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len);
NPPIN_API int nppin_post_write(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                               size_t len, const nppin_target *to, unsigned send_flags);
NPPIN_API int nppin_post_read(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len, const nppin_target *from, unsigned send_flags);
/* ibv_poll_cq, then nppin_complete on each completion: returns how many completions are in wc
   (0 if none is ready), or a negative code. */
NPPIN_API int nppin_poll(nppin_ctx *ctx, struct ibv_cq *cq, struct ibv_wc *wc, int max);
/* Hand one completion to nppin: 0 = not nppin's (untouched), 1 = nppin's last piece (wr_id and
   status are now the post's), 2 = nppin's own, to drop (an intermediate piece, or a piece
   nppin_xfer stopped waiting for). */
NPPIN_API int nppin_complete(nppin_ctx *ctx, struct ibv_wc *wc);
/* A WRITE or READ of any length, piece by piece, waiting on cq (used only by this call) at most
   timeout_ns (0 = NPPIN_DEFAULT_XFER_TIMEOUT_NS, then -ETIMEDOUT; section 4). */
NPPIN_API int nppin_xfer(nppin_ctx *ctx, struct ibv_qp *qp, struct ibv_cq *cq, int op, void *buf,
                         size_t len, const nppin_target *t, unsigned flags, uint64_t timeout_ns);

NPPIN_API int nppin_invalidate(nppin_ctx *ctx, const void *addr, size_t len);
NPPIN_API int nppin_sync(nppin_ctx *ctx, uint64_t timeout_ns);

NPPIN_API int nppin_peer_create(nppin_ctx *ctx, const nppin_chan *chan, nppin_peer **out);
/* NPPIN_E_BUSY while posts naming one of its remotes are in flight. */
NPPIN_API int nppin_peer_destroy(nppin_peer *p);
/* Handle the peer's messages, waiting up to timeout_ns for the first: returns how many. */
NPPIN_API int nppin_peer_progress(nppin_peer *p, uint64_t timeout_ns);
NPPIN_API int nppin_region_export(const nppin_region *rg, unsigned char out[NPPIN_HANDLE_SIZE]);
NPPIN_API int nppin_remote_open(nppin_peer *p, const unsigned char handle[NPPIN_HANDLE_SIZE],
                                nppin_remote **out);
/* Gives every lease back at once; NPPIN_E_BUSY while posts naming it are in flight. */
NPPIN_API int nppin_remote_close(nppin_remote *rm);

/* A channel over a connected RC QP whose CQ (send and receive) serves only it. It registers
   NPPIN_CHAN_BUF_BYTES of its own. Free with nppin_chan_verbs_destroy after the peer. */
NPPIN_API int nppin_chan_verbs_create(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_cq *cq,
                                      nppin_chan *out);
NPPIN_API void nppin_chan_verbs_destroy(nppin_chan *chan);

NPPIN_API int nppin_get_stats(nppin_ctx *ctx, nppin_stats *out);
/* The former name of nppin_get_stats, deprecated; it keeps working. */
static inline int nppin_stats_get(nppin_ctx *ctx, nppin_stats *out)
{
    return nppin_get_stats(ctx, out);
}
NPPIN_API const char *nppin_strerror(int code);
NPPIN_API const char *nppin_explain(nppin_ctx *ctx, int code, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* NPPIN_H */

/* >>implementation - includes, options, constants ---------------------------------------------- */
#if defined(NPPIN_IMPLEMENTATION) && !defined(NPPIN_IMPLEMENTATION_ONCE)
#define NPPIN_IMPLEMENTATION_ONCE 1

#if defined(NPPIN_MALLOC) != defined(NPPIN_FREE)
#error "define both NPPIN_MALLOC and NPPIN_FREE, or neither"
#endif
#ifndef NPPIN_MALLOC
#include <stdlib.h>
#define NPPIN_MALLOC(n) malloc(n)
#define NPPIN_FREE(p) free(p)
#define NPPIN__CALLOC(n, sz) calloc((n) ? (n) : 1, (sz) ? (sz) : 1) /* big ones: lazy zero pages */
#endif
#ifndef NPPIN_ASSERT
#include <assert.h>
#define NPPIN_ASSERT(x) assert(x)
#endif
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* >>errors - errors ---------------------------------------------------------------------------- */
#include "impl/errors.h"

NPPIN_API const char *nppin_strerror(int code)
{
    switch (code) {
#define RCP__ERROR_CASE(name, value, text) case name: return text;
#include "impl/errors.h" /* the codes of every rpcool header included before this point */
#undef RCP__ERROR_CASE
    default: return rcp__errtext(code, RCP__ERR_DECLARED);
    }
}

#ifdef NPPIN_NO_RDMA
/* >>no-rdma - without RDMA: every call says not supported -------------------------------------- */
NPPIN_API int nppin_create(struct ibv_pd *pd, const nppin_opts *opts, nppin_ctx **out)
{
    (void)pd; (void)opts; if (out) *out = NULL; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_destroy(nppin_ctx *ctx)
{
    (void)ctx; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_reg(nppin_ctx *ctx, void *addr, size_t len, nppin_region **out)
{
    (void)ctx; (void)addr; (void)len; if (out) *out = NULL; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_dereg(nppin_region *rg)
{
    (void)rg; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_post_send(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                              size_t len, unsigned send_flags)
{
    (void)ctx; (void)qp; (void)wr_id; (void)buf; (void)len; (void)send_flags; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_post_recv(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len)
{
    (void)ctx; (void)qp; (void)wr_id; (void)buf; (void)len; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_post_write(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                               size_t len, const nppin_target *to, unsigned send_flags)
{
    (void)ctx; (void)qp; (void)wr_id; (void)buf; (void)len; (void)to; (void)send_flags;
    return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_post_read(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len, const nppin_target *from, unsigned send_flags)
{
    (void)ctx; (void)qp; (void)wr_id; (void)buf; (void)len; (void)from; (void)send_flags;
    return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_poll(nppin_ctx *ctx, struct ibv_cq *cq, struct ibv_wc *wc, int max)
{
    (void)ctx; (void)cq; (void)wc; (void)max; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_complete(nppin_ctx *ctx, struct ibv_wc *wc)
{
    (void)ctx; (void)wc; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_xfer(nppin_ctx *ctx, struct ibv_qp *qp, struct ibv_cq *cq, int op, void *buf,
                         size_t len, const nppin_target *t, unsigned flags, uint64_t timeout_ns)
{
    (void)ctx; (void)qp; (void)cq; (void)op; (void)buf; (void)len; (void)t; (void)flags;
    (void)timeout_ns; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_invalidate(nppin_ctx *ctx, const void *addr, size_t len)
{
    (void)ctx; (void)addr; (void)len; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_sync(nppin_ctx *ctx, uint64_t timeout_ns)
{
    (void)ctx; (void)timeout_ns; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_peer_create(nppin_ctx *ctx, const nppin_chan *chan, nppin_peer **out)
{
    (void)ctx; (void)chan; if (out) *out = NULL; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_peer_destroy(nppin_peer *p)
{
    (void)p; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_peer_progress(nppin_peer *p, uint64_t timeout_ns)
{
    (void)p; (void)timeout_ns; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_region_export(const nppin_region *rg, unsigned char out[NPPIN_HANDLE_SIZE])
{
    (void)rg; (void)out; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_remote_open(nppin_peer *p, const unsigned char handle[NPPIN_HANDLE_SIZE],
                                nppin_remote **out)
{
    (void)p; (void)handle; if (out) *out = NULL; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_remote_close(nppin_remote *rm)
{
    (void)rm; return NPPIN_E_NOTSUP;
}
NPPIN_API int nppin_chan_verbs_create(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_cq *cq,
                                      nppin_chan *out)
{
    (void)pd; (void)qp; (void)cq; (void)out; return NPPIN_E_NOTSUP;
}
NPPIN_API void nppin_chan_verbs_destroy(nppin_chan *chan)
{
    (void)chan;
}
NPPIN_API int nppin_get_stats(nppin_ctx *ctx, nppin_stats *out)
{
    (void)ctx; (void)out; return NPPIN_E_NOTSUP;
}
NPPIN_API const char *nppin_explain(nppin_ctx *ctx, int code, char *buf, size_t len)
{
    (void)ctx; snprintf(buf, len, "%s", nppin_strerror(code)); return buf;
}

#else /* RDMA */

#include "impl/platform.h"
#include "impl/verbs.h"
#include "impl/handle.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

/* The handle rule (ERRORS, impl/handle.h): 0 for a handle open in this process (or NULL, left
   to each function), else its code. */
static inline int nppin__hk(const void *h)
{
    return rcp__handle_code(h, NPPIN_E_BADHANDLE, NPPIN_E_FORKED);
}
static inline int nppin__hk_take(const void *h)
{
    return rcp__handle_take_code(h, NPPIN_E_BADHANDLE, NPPIN_E_FORKED);
}
#define NPPIN__HCHECK(h) RCP__HRETURN(nppin__hk(h))
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* >>types - private structures ----------------------------------------------------------------- */
/* One registration of one chunk (or, with ODP, of a whole region). Work requests in flight hold
   it (holds); peers hold leases on it (lease_mask, lease_until). A retired registration (stale
   memory, or its region deregistered) is no longer found by lookups and is deregistered once
   nothing holds it. */
typedef struct nppin__reg {
    struct nppin__reg *prev, *next; /* in ctx->lru (live) or ctx->retired */
    struct ibv_mr *mr;
    nppin_region *rg;               /* NULL once retired */
    uint32_t region_id;
    size_t idx;
    uint32_t gen;
    uint32_t holds;
    uint64_t lease_mask;
    uint64_t lease_until;           /* owner clock, ns */
    size_t pinned;
    int revoking, retired, odp;
} nppin__reg;

struct nppin_region {
    nppin_ctx *ctx;
    uint32_t id;
    uintptr_t base, end, cbase;     /* cbase: base rounded down to the chunk size */
    size_t nchunks;
    nppin__reg **chunk;             /* current registration per chunk, or NULL */
    uint32_t *gen;                  /* last generation per chunk */
    nppin__reg *odp;
};

/* What the accessing side knows about one chunk of a peer's region. */
typedef struct nppin__rkey {
    uint64_t addr, until;           /* until: holder clock, ns; 0 = no lease */
    uint32_t rkey, gen, len, holds;
    uint32_t ret_gen;               /* revoked while held: return gens <= this when idle */
} nppin__rkey;

struct nppin_remote {
    nppin_peer *peer;
    uint32_t region_id;
    uint64_t base, len, cbase, cs;
    size_t nchunks;
    nppin__rkey *c;
    struct nppin_remote *next;
};

struct nppin_peer {
    nppin_ctx *ctx;
    nppin_chan chan;
    int idx, dead;
    uint64_t seq, last_progress;
    nppin_remote *remotes;
    /* the answer a waiting miss is looking for */
    uint64_t want_seq;
    int got, got_type;
    unsigned char got_msg[NPPIN_MSG_SIZE];
};

typedef struct nppin__hold { nppin__reg *reg; nppin_remote *rm; size_t ridx; } nppin__hold;

/* A slot's state: free, posted (its last piece's completion is the user's), partly posted (the
   send queue filled in the middle of its chain: kept for the context's lifetime), or given up by
   nppin_xfer (its completions are nppin's: consumed, its holds let go at the last one). */
enum { NPPIN__SLOT_FREE, NPPIN__SLOT_POSTED, NPPIN__SLOT_PARTIAL, NPPIN__SLOT_ABANDONED };

typedef struct nppin__slot {
    uint64_t user_wr_id;
    struct nppin__slot *next_free;
    nppin__hold *h;
    uint32_t nh, cap;
    int used;                       /* NPPIN__SLOT_* */
    int err_status;                 /* first failed piece's status, or -1 */
    uint32_t err_vendor;
} nppin__slot;

struct nppin_ctx {
    struct ibv_pd *pd;
    nppin_opts o;
    pthread_mutex_t mu;
    size_t cs, budget, pinned;
    int access;
    nppin_region **regions;
    size_t nregions, capregions;
    uint32_t next_id;
    nppin__reg lru, retired;        /* sentinels; lru.next is the most recently used */
    nppin__slot *slots, *free_slot;
    nppin_peer *peers[NPPIN_MAX_PEERS];
    nppin_stats st;
    struct rcp__logger lg;
    uint64_t coarse_res;            /* resolution of CLOCK_MONOTONIC_COARSE if small, else 0 */
    /* userfaultfd */
    int uffd, pipe_rd, pipe_wr;
    pthread_t mon;
    int mon_started;
    pthread_mutex_t bmu;
    pthread_cond_t bcv;
    uint64_t barrier_req, barrier_done;
};

/* >>helpers - helpers: clocks, logging, encoding ----------------------------------------------- */
static uint64_t nppin__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of a holder's fast path: CLOCK_MONOTONIC_COARSE reads no hardware (a real clock
   read can be a system call in a VM). Advanced by its resolution, it is never behind
   CLOCK_MONOTONIC, so a lease checked with it ends early, never late. */
static uint64_t nppin__now_late(const nppin_ctx *ctx)
{
    struct timespec ts;
    if (!ctx->coarse_res || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)) return nppin__now();
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + ctx->coarse_res;
}

static int nppin__debug_env = -1; /* NPPIN_DEBUG, read once per process */

static void nppin__log(nppin_ctx *ctx, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rcp__logv(&ctx->lg, level, fmt, ap);
    va_end(ap);
}

static void *nppin__calloc(size_t n, size_t sz)
{
    if (sz && n > SIZE_MAX / sz) return NULL;
#ifdef NPPIN__CALLOC
    return NPPIN__CALLOC(n, sz);
#else
    void *p = NPPIN_MALLOC(n * sz ? n * sz : 1);
    if (p) memset(p, 0, n * sz);
    return p;
#endif
}

static void nppin__put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void nppin__put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t nppin__get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t nppin__get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void nppin__list_del(nppin__reg *r)
{
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = r;
}
static void nppin__list_push(nppin__reg *head, nppin__reg *r)
{
    r->next = head->next;
    r->prev = head;
    head->next->prev = r;
    head->next = r;
}

static size_t nppin__page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* >>regions - finding regions ------------------------------------------------------------------ */
static nppin_region *nppin__find(nppin_ctx *ctx, uintptr_t a)
{
    size_t lo = 0, hi = ctx->nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        nppin_region *r = ctx->regions[mid];
        if (a < r->base) hi = mid;
        else if (a >= r->end) lo = mid + 1;
        else return r;
    }
    return NULL;
}

static nppin_region *nppin__find_id(nppin_ctx *ctx, uint32_t id)
{
    for (size_t i = 0; i < ctx->nregions; i++)
        if (ctx->regions[i]->id == id) return ctx->regions[i];
    return NULL;
}

static void nppin__chunk_span(const nppin_region *rg, size_t idx, uintptr_t *s, uintptr_t *e)
{
    size_t cs = rg->ctx->cs;
    uintptr_t cb = rg->cbase + idx * cs;
    *s = cb < rg->base ? rg->base : cb;
    *e = cb + cs > rg->end ? rg->end : cb + cs;
}

/* >>userfaultfd - stale mappings seen through userfaultfd -------------------------------------- */
static void nppin__invalidate_locked(nppin_ctx *ctx, uintptr_t s, uintptr_t e);

static int nppin__watch(nppin_ctx *ctx, uintptr_t s, uintptr_t e, int quiet)
{
    if (ctx->uffd < 0) return -1;
    size_t pg = nppin__page();
    struct uffdio_register reg;
    memset(&reg, 0, sizeof reg);
    reg.range.start = s & ~(uint64_t)(pg - 1);
    reg.range.len = ((e + pg - 1) & ~(uint64_t)(pg - 1)) - reg.range.start;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(ctx->uffd, UFFDIO_REGISTER, &reg)) {
        if (quiet) return -1;
        ctx->st.unwatched_regs++;
        nppin__log(ctx, NPPIN_LOG_WARN, "userfaultfd cannot watch [%#lx, %#lx): %s (call "
                   "nppin_invalidate for this memory)", (unsigned long)s, (unsigned long)e,
                   strerror(errno));
        return -1;
    }
    return 0;
}

static void nppin__mon_drain(nppin_ctx *ctx)
{
    struct uffd_msg m[16];
    for (;;) {
        ssize_t n = read(ctx->uffd, m, sizeof m);
        if (n <= 0) return;
        for (size_t i = 0; i < (size_t)n / sizeof m[0]; i++) {
            uintptr_t s = 0, e = 0;
            if (m[i].event == UFFD_EVENT_UNMAP) {
                s = (uintptr_t)m[i].arg.remove.start; e = (uintptr_t)m[i].arg.remove.end;
            } else if (m[i].event == UFFD_EVENT_REMOVE) {
                s = (uintptr_t)m[i].arg.remove.start; e = (uintptr_t)m[i].arg.remove.end;
            } else if (m[i].event == UFFD_EVENT_REMAP) {
                s = (uintptr_t)m[i].arg.remap.from; e = s + (uintptr_t)m[i].arg.remap.len;
            } else {
                continue;
            }
            pthread_mutex_lock(&ctx->mu);
            nppin__log(ctx, NPPIN_LOG_DEBUG, "userfaultfd event %u on [%#lx, %#lx)",
                       (unsigned)m[i].event, (unsigned long)s, (unsigned long)e);
            nppin__invalidate_locked(ctx, s, e);
            pthread_mutex_unlock(&ctx->mu);
        }
    }
}

static void *nppin__mon_main(void *arg)
{
    nppin_ctx *ctx = (nppin_ctx *)arg;
    for (;;) {
        struct pollfd pf[2] = {{ctx->uffd, POLLIN, 0}, {ctx->pipe_rd, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        nppin__mon_drain(ctx);
        if (pf[1].revents) {
            char c[64];
            ssize_t n = read(ctx->pipe_rd, c, sizeof c);
            if (n <= 0) continue;
            int stop = memchr(c, 'q', (size_t)n) != NULL;
            nppin__mon_drain(ctx); /* every event read before the barrier is acted on */
            pthread_mutex_lock(&ctx->bmu);
            ctx->barrier_done = ctx->barrier_req;
            pthread_cond_broadcast(&ctx->bcv);
            pthread_mutex_unlock(&ctx->bmu);
            if (stop) break;
        }
    }
    return NULL;
}

static void nppin__mon_start(nppin_ctx *ctx)
{
    ctx->uffd = ctx->pipe_rd = ctx->pipe_wr = -1;
    if (ctx->o.detect == NPPIN_DETECT_NONE) return;
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        nppin__log(ctx, NPPIN_LOG_WARN, "no userfaultfd (%s): stale mappings are not detected, "
                   "call nppin_invalidate", strerror(errno));
        return;
    }
    struct uffdio_api api;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    int p[2];
    if (ioctl(fd, UFFDIO_API, &api) || pipe2(p, O_CLOEXEC)) {
        nppin__log(ctx, NPPIN_LOG_WARN, "userfaultfd events unavailable (%s)", strerror(errno));
        close(fd);
        return;
    }
    ctx->uffd = fd;
    ctx->pipe_rd = p[0];
    ctx->pipe_wr = p[1];
    if (pthread_create(&ctx->mon, NULL, nppin__mon_main, ctx)) {
        close(fd); close(p[0]); close(p[1]);
        ctx->uffd = ctx->pipe_rd = ctx->pipe_wr = -1;
        return;
    }
    ctx->mon_started = 1;
    ctx->st.stale_detect = 1;
}

/* Wait until the monitor has acted on every event it has read (0 or -ETIMEDOUT). */
static int nppin__mon_barrier(nppin_ctx *ctx, uint64_t deadline)
{
    if (!ctx->mon_started) return 0;
    pthread_mutex_lock(&ctx->bmu);
    uint64_t want = ++ctx->barrier_req;
    pthread_mutex_unlock(&ctx->bmu);
    char c = 'b';
    if (write(ctx->pipe_wr, &c, 1) != 1) return -errno;
    int rc = 0;
    pthread_mutex_lock(&ctx->bmu);
    while (ctx->barrier_done < want) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&ctx->bcv, &ctx->bmu, &ts);
        if (ctx->barrier_done < want && nppin__now() >= deadline) { rc = -ETIMEDOUT; break; }
    }
    pthread_mutex_unlock(&ctx->bmu);
    return rc;
}

static void nppin__peer_free(nppin_peer *p);
static void nppin__destroy(nppin_ctx *ctx);

/* >>budget - the pinned-memory budget: chunks, leases, eviction -------------------------------- */
static int nppin__peer_send(nppin_peer *p, const unsigned char *msg);
static void nppin__msg(unsigned char *m, uint32_t type, uint32_t region, uint64_t idx, uint32_t gen,
                       uint32_t rkey, uint64_t addr, uint32_t len, uint32_t lease_ms, uint64_t seq);
enum { NPPIN__REQ = 1, NPPIN__GRANT, NPPIN__BUSY, NPPIN__DENY, NPPIN__REVOKE, NPPIN__RETURN };
#define NPPIN__MAGIC 0x4e50u /* "NP" */
#define NPPIN__CHAN_SEND_NS 5000000000ull     /* the verbs channel waits 5 s for a free slot */

static int nppin__lease_live(const nppin__reg *r, uint64_t now)
{
    return r->lease_mask && now < r->lease_until;
}

static void nppin__free_reg(nppin_ctx *ctx, nppin__reg *r)
{
    nppin__list_del(r);
    int rc = ibv_dereg_mr(r->mr);
    if (rc) nppin__log(ctx, NPPIN_LOG_ERROR, "ibv_dereg_mr: %s", strerror(rc));
    ctx->pinned -= r->pinned;
    ctx->st.deregs++;
    if (r->rg && !r->retired) r->rg->chunk[r->idx] = NULL;
    NPPIN_FREE(r);
}

static void nppin__send_revokes(nppin_ctx *ctx, nppin__reg *r)
{
    unsigned char m[NPPIN_MSG_SIZE];
    nppin__msg(m, NPPIN__REVOKE, r->region_id, r->idx, r->gen, 0, 0, 0, 0, 0);
    for (int i = 0; i < NPPIN_MAX_PEERS; i++) {
        if (!(r->lease_mask & ((uint64_t)1 << i))) continue;
        nppin_peer *p = ctx->peers[i];
        if (!p) { r->lease_mask &= ~((uint64_t)1 << i); continue; }
        if (!p->dead) nppin__peer_send(p, m);
        ctx->st.revokes_sent++;
    }
    r->revoking = 1;
}

/* Deregister what can go: retired registrations nothing holds, evicting ones whose leases are
   returned or expired. */
static void nppin__reap(nppin_ctx *ctx)
{
    uint64_t now = nppin__now();
    for (nppin__reg *r = ctx->retired.next, *n; r != &ctx->retired; r = n) {
        n = r->next;
        if (!r->holds && !nppin__lease_live(r, now)) nppin__free_reg(ctx, r);
    }
    for (nppin__reg *r = ctx->lru.prev, *n; r != &ctx->lru; r = n) {
        n = r->prev;
        if (r->revoking && !r->holds && !nppin__lease_live(r, now)) {
            nppin__free_reg(ctx, r);
            ctx->st.evictions++;
        }
    }
}

/* Make need bytes of budget free: evict unused registrations from the LRU tail, revoking leases
   where they must. 0, or NPPIN_E_BUSY while revocations or work in flight stand in the way. */
static int nppin__make_room(nppin_ctx *ctx, size_t need)
{
    if (need > ctx->budget) return NPPIN_E_TOOBIG;
    nppin__reap(ctx);
    uint64_t now = nppin__now();
    size_t coming = 0; /* bytes that revocations under way will free */
    for (nppin__reg *r = ctx->lru.prev, *n;
         r != &ctx->lru && ctx->pinned + need > ctx->budget + coming; r = n) {
        n = r->prev;
        if (r->holds || r->odp) continue;
        if (!nppin__lease_live(r, now)) {
            nppin__free_reg(ctx, r);
            ctx->st.evictions++;
        } else {
            if (!r->revoking) nppin__send_revokes(ctx, r);
            coming += r->pinned;
        }
    }
    return ctx->pinned + need <= ctx->budget ? 0 : NPPIN_E_BUSY;
}

static void nppin__retire(nppin_ctx *ctx, nppin__reg *r)
{
    if (r->rg && !r->odp) r->rg->chunk[r->idx] = NULL;
    r->rg = NULL;
    r->retired = 1;
    nppin__list_del(r);
    nppin__list_push(&ctx->retired, r);
    if (r->lease_mask && !r->revoking) nppin__send_revokes(ctx, r);
}

static void nppin__invalidate_locked(nppin_ctx *ctx, uintptr_t s, uintptr_t e)
{
    for (size_t i = 0; i < ctx->nregions; i++) {
        nppin_region *rg = ctx->regions[i];
        if (rg->odp || e <= rg->base || s >= rg->end) continue;
        uintptr_t a = s < rg->base ? rg->base : s, b = e > rg->end ? rg->end : e;
        for (size_t k = (a - rg->cbase) / ctx->cs; k <= (b - 1 - rg->cbase) / ctx->cs; k++) {
            if (!rg->chunk[k]) continue;
            nppin__retire(ctx, rg->chunk[k]);
            ctx->st.stale_invalidations++;
        }
    }
    nppin__reap(ctx);
}

/* The current registration of chunk idx, registering it if need be. */
static int nppin__get_reg(nppin_ctx *ctx, nppin_region *rg, size_t idx, nppin__reg **out)
{
    if (rg->odp) { *out = rg->odp; return 0; }
    nppin__reg *r = rg->chunk[idx];
    if (r) {
        nppin__list_del(r);
        nppin__list_push(&ctx->lru, r);
        *out = r;
        return 0;
    }
    uintptr_t s, e;
    nppin__chunk_span(rg, idx, &s, &e);
    size_t pg = nppin__page();
    size_t pinned = ((e + pg - 1) & ~(uintptr_t)(pg - 1)) - (s & ~(uintptr_t)(pg - 1));
    int rc = nppin__make_room(ctx, pinned);
    if (rc) return rc;
    r = (nppin__reg *)nppin__calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    nppin__watch(ctx, s, e, 0); /* before pinning: an unmap from now on is seen */
    errno = 0;
    r->mr = ibv_reg_mr(ctx->pd, (void *)s, e - s, ctx->access);
    if (!r->mr) {
        int err = errno ? errno : EIO;
        NPPIN_FREE(r);
        nppin__log(ctx, NPPIN_LOG_ERROR, "ibv_reg_mr of %zu bytes at %#lx: %s (pinned %zu of a "
                   "budget of %zu)", e - s, (unsigned long)s, strerror(err), ctx->pinned,
                   ctx->budget);
        return err == ENOMEM ? NPPIN_E_PINLIMIT : -err;
    }
    r->rg = rg;
    r->region_id = rg->id;
    r->idx = idx;
    r->gen = ++rg->gen[idx];
    r->pinned = pinned;
    r->prev = r->next = r;
    nppin__list_push(&ctx->lru, r);
    rg->chunk[idx] = r;
    ctx->pinned += pinned;
    if (ctx->pinned > ctx->st.pinned_peak) ctx->st.pinned_peak = ctx->pinned;
    ctx->st.regs++;
    *out = r;
    return 0;
}

/* >>create - contexts and regions: create, destroy, reg, dereg --------------------------------- */
static int nppin__odp_ok(struct ibv_context *vctx)
{
    struct ibv_device_attr_ex a;
    memset(&a, 0, sizeof a);
    if (ibv_query_device_ex(vctx, NULL, &a)) return 0;
    uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                    IBV_ODP_SUPPORT_READ;
    return (a.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
           (a.odp_caps.per_transport_caps.rc_odp_caps & need) == need;
}

NPPIN_API int nppin_create(struct ibv_pd *pd, const nppin_opts *opts, nppin_ctx **out)
{
    nppin_opts def;
    memset(&def, 0, sizeof def);
    if (!opts) opts = &def;
    if (!pd || !out) return -EINVAL;
    *out = NULL;
    size_t pg = nppin__page();
    size_t cs = opts->chunk_size ? opts->chunk_size : NPPIN_DEFAULT_CHUNK;
    if (cs < pg || cs > ((size_t)1 << 30) || (cs & (cs - 1))) return -EINVAL;
    nppin_ctx *ctx = (nppin_ctx *)nppin__calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    ctx->pd = pd;
    ctx->o = *opts;
    ctx->lg = rcp__logger_pick(opts->log, opts->log_user, &nppin__debug_env, "NPPIN_DEBUG",
                               "nppin");
    ctx->cs = cs;
    if (!ctx->o.lease_ms) ctx->o.lease_ms = NPPIN_DEFAULT_LEASE_MS;
    if (!ctx->o.lease_margin_ms || ctx->o.lease_margin_ms >= ctx->o.lease_ms)
        ctx->o.lease_margin_ms = ctx->o.lease_ms / 4;
    if (!ctx->o.request_timeout_ms) ctx->o.request_timeout_ms = NPPIN_DEFAULT_REQUEST_TIMEOUT_MS;
    if (!ctx->o.max_inflight) ctx->o.max_inflight = NPPIN_DEFAULT_MAX_INFLIGHT;
    ctx->access = opts->access ? opts->access
                               : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_WRITE;
    struct rlimit rl;
    ctx->st.memlock_limit = UINT64_MAX;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        ctx->st.memlock_limit = (uint64_t)rl.rlim_cur;
    if (opts->budget) ctx->budget = opts->budget;
    else if (ctx->st.memlock_limit == UINT64_MAX) ctx->budget = NPPIN_DEFAULT_BUDGET;
    else if (ctx->st.memlock_limit > NPPIN_MEMLOCK_RESERVE + cs)
        ctx->budget = (size_t)ctx->st.memlock_limit - NPPIN_MEMLOCK_RESERVE;
    else ctx->budget = cs;
    ctx->budget &= ~(pg - 1);
    if (ctx->budget < cs) {
        NPPIN_FREE(ctx);
        return -EINVAL;
    }
    ctx->st.budget = ctx->budget;
    ctx->st.chunk_size = cs;
    ctx->st.fork_status = (int)ibv_is_fork_initialized();
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 &&
        res.tv_nsec < 10000000 &&
        (uint64_t)res.tv_nsec * 4 < (uint64_t)ctx->o.lease_margin_ms * 1000000ull)
        ctx->coarse_res = (uint64_t)res.tv_nsec;
    ctx->lru.prev = ctx->lru.next = &ctx->lru;
    ctx->retired.prev = ctx->retired.next = &ctx->retired;
    ctx->next_id = 1;
    ctx->slots = (nppin__slot *)nppin__calloc(ctx->o.max_inflight, sizeof *ctx->slots);
    if (!ctx->slots) {
        NPPIN_FREE(ctx);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < ctx->o.max_inflight; i++)
        ctx->slots[i].next_free = i + 1 < ctx->o.max_inflight ? &ctx->slots[i + 1] : NULL;
    ctx->free_slot = ctx->slots;
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_mutex_init(&ctx->bmu, NULL);
    pthread_cond_init(&ctx->bcv, NULL);
    if (opts->odp != NPPIN_ODP_OFF && nppin__odp_ok(pd->context)) ctx->st.odp = 1;
    if (!ctx->st.odp) nppin__mon_start(ctx);
    else ctx->uffd = ctx->pipe_rd = ctx->pipe_wr = -1;
    nppin__log(ctx, NPPIN_LOG_INFO, "context: chunk %zu, budget %zu, memlock %llu, odp %d, "
               "userfaultfd %d", cs, ctx->budget, (unsigned long long)ctx->st.memlock_limit,
               ctx->st.odp, ctx->st.stale_detect);
    int rc = rcp__handle_add(ctx);
    if (rc) {
        nppin__destroy(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

NPPIN_API int nppin_destroy(nppin_ctx *ctx)
{
    if (!ctx) return 0;
    int rc = nppin__hk_take(ctx);
    if (rc) return rc;
    nppin__destroy(ctx);
    return 0;
}

/* destroy, ctx out of the handle table (or never in it) */
static void nppin__destroy(nppin_ctx *ctx)
{
    while (ctx->nregions) nppin_dereg(ctx->regions[ctx->nregions - 1]);
    pthread_mutex_lock(&ctx->mu);
    for (int i = 0; i < NPPIN_MAX_PEERS; i++)
        if (ctx->peers[i]) nppin__peer_free(ctx->peers[i]);
    pthread_mutex_unlock(&ctx->mu);
    if (ctx->mon_started) {
        char c = 'q';
        if (write(ctx->pipe_wr, &c, 1) == 1) pthread_join(ctx->mon, NULL);
    }
    if (ctx->uffd >= 0) close(ctx->uffd);
    if (ctx->pipe_rd >= 0) close(ctx->pipe_rd);
    if (ctx->pipe_wr >= 0) close(ctx->pipe_wr);
    /* whatever is left is deregistered now: leases of destroyed peers end here */
    while (ctx->retired.next != &ctx->retired) nppin__free_reg(ctx, ctx->retired.next);
    while (ctx->lru.next != &ctx->lru) nppin__free_reg(ctx, ctx->lru.next);
    for (unsigned i = 0; i < ctx->o.max_inflight; i++) NPPIN_FREE(ctx->slots[i].h);
    NPPIN_FREE(ctx->slots);
    NPPIN_FREE(ctx->regions);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->bmu);
    pthread_cond_destroy(&ctx->bcv);
    NPPIN_FREE(ctx);
}

NPPIN_API int nppin_reg(nppin_ctx *ctx, void *addr, size_t len, nppin_region **out)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !out || !addr || !len || (uintptr_t)addr + len < (uintptr_t)addr) return -EINVAL;
    *out = NULL;
    uintptr_t base = (uintptr_t)addr, end = base + len;
    int rc = 0;
    nppin_region *rg = NULL;
    pthread_mutex_lock(&ctx->mu);
    size_t pos = 0;
    while (pos < ctx->nregions && ctx->regions[pos]->base < base) pos++;
    if ((pos > 0 && ctx->regions[pos - 1]->end > base) ||
        (pos < ctx->nregions && ctx->regions[pos]->base < end)) {
        rc = NPPIN_E_OVERLAP;
        goto out;
    }
    if (ctx->nregions == ctx->capregions) {
        size_t cap = ctx->capregions ? 2 * ctx->capregions : 8;
        nppin_region **n = (nppin_region **)nppin__calloc(cap, sizeof *n);
        if (!n) { rc = -ENOMEM; goto out; }
        if (ctx->nregions) memcpy(n, ctx->regions, ctx->nregions * sizeof *n);
        NPPIN_FREE(ctx->regions);
        ctx->regions = n;
        ctx->capregions = cap;
    }
    rg = (nppin_region *)nppin__calloc(1, sizeof *rg);
    if (!rg) { rc = -ENOMEM; goto out; }
    rg->ctx = ctx;
    rg->id = ctx->next_id++;
    rg->base = base;
    rg->end = end;
    rg->cbase = base & ~(uintptr_t)(ctx->cs - 1);
    rg->nchunks = (end - rg->cbase + ctx->cs - 1) / ctx->cs;
    if (ctx->st.odp) {
        rg->odp = (nppin__reg *)nppin__calloc(1, sizeof *rg->odp);
        if (rg->odp) {
            rg->odp->mr = ibv_reg_mr(ctx->pd, addr, len, ctx->access | IBV_ACCESS_ON_DEMAND);
            if (!rg->odp->mr) { rc = -(errno ? errno : EIO); NPPIN_FREE(rg->odp); rg->odp = NULL; }
        } else {
            rc = -ENOMEM;
        }
        if (rc) { NPPIN_FREE(rg); goto out; }
        rg->odp->odp = 1;
        rg->odp->rg = rg;
        rg->odp->region_id = rg->id;
        rg->odp->gen = 1;
        rg->odp->prev = rg->odp->next = rg->odp;
    } else {
        /* big arrays come from mmap: their pages are touched only for chunks in use */
        rg->chunk = (nppin__reg **)nppin__calloc(rg->nchunks, sizeof *rg->chunk);
        rg->gen = (uint32_t *)nppin__calloc(rg->nchunks, sizeof *rg->gen);
        if (!rg->chunk || !rg->gen) {
            NPPIN_FREE(rg->chunk); NPPIN_FREE(rg->gen); NPPIN_FREE(rg);
            rc = -ENOMEM;
            goto out;
        }
    }
    /* watch the whole region at once if it is mapped, so its mapping is not split chunk by
       chunk; memory mapped later inside it is watched chunk by chunk when registered */
    if (!rg->odp) nppin__watch(ctx, base, end, 1);
    memmove(ctx->regions + pos + 1, ctx->regions + pos,
            (ctx->nregions - pos) * sizeof *ctx->regions);
    if ((rc = rcp__handle_add(rg))) {
        if (rg->odp) {
            ibv_dereg_mr(rg->odp->mr);
            NPPIN_FREE(rg->odp);
        }
        NPPIN_FREE(rg->chunk);
        NPPIN_FREE(rg->gen);
        NPPIN_FREE(rg);
        goto out;
    }
    ctx->regions[pos] = rg;
    ctx->nregions++;
    *out = rg;
out:
    pthread_mutex_unlock(&ctx->mu);
    return rc;
}

NPPIN_API int nppin_dereg(nppin_region *rg)
{
    if (!rg) return 0;
    int rc = nppin__hk_take(rg);
    if (rc) return rc;
    nppin_ctx *ctx = rg->ctx;
    pthread_mutex_lock(&ctx->mu);
    size_t pos = 0;
    while (pos < ctx->nregions && ctx->regions[pos] != rg) pos++;
    if (pos == ctx->nregions) { pthread_mutex_unlock(&ctx->mu); return -EINVAL; }
    memmove(ctx->regions + pos, ctx->regions + pos + 1,
            (ctx->nregions - pos - 1) * sizeof *ctx->regions);
    ctx->nregions--;
    if (rg->odp) {
        ibv_dereg_mr(rg->odp->mr);
        NPPIN_FREE(rg->odp);
    } else {
        for (size_t i = 0; i < rg->nchunks; i++)
            if (rg->chunk[i]) nppin__retire(ctx, rg->chunk[i]);
    }
    nppin__reap(ctx);
    NPPIN_FREE(rg->chunk);
    NPPIN_FREE(rg->gen);
    NPPIN_FREE(rg);
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

/* >>slots - work request slots ----------------------------------------------------------------- */
static nppin__slot *nppin__slot_get(nppin_ctx *ctx)
{
    nppin__slot *s = ctx->free_slot;
    if (!s) return NULL;
    ctx->free_slot = s->next_free;
    s->used = NPPIN__SLOT_POSTED;
    s->nh = 0;
    s->err_status = -1;
    return s;
}

static int nppin__slot_hold(nppin__slot *s, nppin__reg *reg, nppin_remote *rm, size_t ridx)
{
    for (uint32_t i = 0; i < s->nh; i++)
        if (s->h[i].reg == reg && s->h[i].rm == rm && s->h[i].ridx == ridx) return 0;
    if (s->nh == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 4;
        nppin__hold *n = (nppin__hold *)nppin__calloc(cap, sizeof *n);
        if (!n) return -ENOMEM;
        if (s->nh) memcpy(n, s->h, s->nh * sizeof *n);
        NPPIN_FREE(s->h);
        s->h = n;
        s->cap = cap;
    }
    s->h[s->nh].reg = reg;
    s->h[s->nh].rm = rm;
    s->h[s->nh].ridx = ridx;
    if (reg) reg->holds++;
    if (rm) rm->c[ridx].holds++;
    s->nh++;
    return 0;
}

static void nppin__remote_unheld(nppin_remote *rm, size_t idx);

static void nppin__slot_put(nppin_ctx *ctx, nppin__slot *s)
{
    for (uint32_t i = 0; i < s->nh; i++) {
        /* every hold of a slot was counted where it was taken (private memory, ctx->mu held) */
        NPPIN_ASSERT(!s->h[i].reg || s->h[i].reg->holds > 0);
        NPPIN_ASSERT(!s->h[i].rm || s->h[i].rm->c[s->h[i].ridx].holds > 0);
        if (s->h[i].reg) s->h[i].reg->holds--;
        if (s->h[i].rm) {
            s->h[i].rm->c[s->h[i].ridx].holds--;
            nppin__remote_unheld(s->h[i].rm, s->h[i].ridx);
        }
    }
    s->nh = 0;
    s->used = NPPIN__SLOT_FREE;
    s->next_free = ctx->free_slot;
    ctx->free_slot = s;
}

/* >>posting - posting work requests, polling completions --------------------------------------- */
static int nppin__progress_all(nppin_ctx *ctx);
static int nppin__progress_locked(nppin_peer *p, uint64_t timeout_ns);
#define NPPIN__STACK_WR 8
#define NPPIN__XFER_WR_ID 0x6e707866ull /* "npxf": the wr_id of nppin_xfer's posts */
#define NPPIN__XFER_SLICE_NS 1000000ull /* nppin_xfer handles peers' messages this often */
static int nppin__remote_key(nppin_remote *rm, uint64_t addr, size_t *idx, nppin__rkey **k);

/* Build and post the work requests of one post; the slot holds every chunk involved (and is
   stored in *slot_out, if given, once posted). */
static int nppin__post(nppin_ctx *ctx, struct ibv_qp *qp, int opcode, uint64_t wr_id, uintptr_t buf,
                       size_t len, const nppin_target *t, unsigned flags, int recv,
                       nppin__slot **slot_out)
{
    if (!qp || !len) return -EINVAL;
    nppin_region *rg = nppin__find(ctx, buf);
    if (!rg || buf + len > rg->end || buf + len < buf) return NPPIN_E_NOTREG;
    size_t first = (buf - rg->cbase) / ctx->cs, last = (buf + len - 1 - rg->cbase) / ctx->cs;
    if (!rg->odp && last - first + 1 > ctx->budget / ctx->cs) return NPPIN_E_TOOBIG;
    nppin__slot *s = nppin__slot_get(ctx);
    if (!s) return NPPIN_E_INFLIGHT;
    int rc = 0;
    nppin__reg *r;
    /* local chunks first: registered and held, so a later eviction cannot take them */
    for (size_t i = first; i <= last; i++) {
        if ((rc = nppin__get_reg(ctx, rg, i, &r)) || (rc = nppin__slot_hold(s, r, NULL, 0)))
            goto fail;
    }
    {
        /* up to NPPIN__STACK_WR pieces on the stack, more on the heap */
        struct ibv_sge sge_st[NPPIN__STACK_WR];
        struct ibv_send_wr wr_st[NPPIN__STACK_WR];
        size_t nwr = 0, cap = NPPIN__STACK_WR;
        struct ibv_sge *sge = sge_st;
        struct ibv_send_wr *wr = wr_st;
        int two_sided = opcode == IBV_WR_SEND || recv;
        /* pieces: split at local chunk ends, and for a peer's region at its chunk ends */
        /* a miss below may let go of the mutex while it waits (and another thread could
           deregister rg): from here on only the held registrations and copies are used */
        uintptr_t cbase = rg->cbase;
        int odp = rg->odp != NULL;
        for (uintptr_t a = buf; a < buf + len;) {
            size_t li = (a - cbase) / ctx->cs;
            uintptr_t lend = odp ? buf + len : cbase + (li + 1) * ctx->cs;
            if (lend > buf + len) lend = buf + len;
            uint64_t raddr = 0;
            uint32_t rkey = 0;
            if (!two_sided) {
                raddr = t->addr + (a - buf);
                rkey = t->rkey;
                if (t->remote) {
                    size_t ridx;
                    nppin__rkey *k;
                    if ((rc = nppin__remote_key(t->remote, raddr, &ridx, &k))) break;
                    if ((rc = nppin__slot_hold(s, NULL, t->remote, ridx))) break;
                    rkey = k->rkey;
                    if (raddr + (lend - a) > k->addr + k->len)
                        lend = a + (uintptr_t)(k->addr + k->len - raddr);
                }
            }
            if (nwr == cap) {
                cap = cap ? 2 * cap : 8;
                struct ibv_sge *ns = (struct ibv_sge *)nppin__calloc(cap, sizeof *ns);
                struct ibv_send_wr *nw = (struct ibv_send_wr *)nppin__calloc(cap, sizeof *nw);
                if (!ns || !nw) { NPPIN_FREE(ns); NPPIN_FREE(nw); rc = -ENOMEM; break; }
                memcpy(ns, sge, nwr * sizeof *ns);
                memcpy(nw, wr, nwr * sizeof *nw);
                if (sge != sge_st) { NPPIN_FREE(sge); NPPIN_FREE(wr); }
                sge = ns; wr = nw;
            }
            nppin__reg *lr = s->h[odp ? 0 : li - first].reg;
            memset(&wr[nwr], 0, sizeof wr[nwr]);
            sge[nwr].addr = a;
            sge[nwr].length = (uint32_t)(lend - a);
            sge[nwr].lkey = lr->mr->lkey;
            wr[nwr].opcode = (enum ibv_wr_opcode)opcode;
            wr[nwr].wr.rdma.remote_addr = raddr;
            wr[nwr].wr.rdma.rkey = rkey;
            nwr++;
            a = lend;
        }
        if (!rc && recv) {
            rc = rcp__verbs_post_recv_sg(qp, (uint64_t)(uintptr_t)s, sge, (int)nwr);
        } else if (!rc && two_sided) {
            struct ibv_send_wr w;
            memset(&w, 0, sizeof w);
            w.wr_id = (uint64_t)(uintptr_t)s;
            w.opcode = IBV_WR_SEND;
            w.sg_list = sge;
            w.num_sge = (int)nwr;
            w.send_flags = (flags | IBV_SEND_SIGNALED) & ~(unsigned)IBV_SEND_INLINE;
            rc = rcp__verbs_post_chain(qp, &w, NULL);
        } else if (!rc) {
            for (size_t i = 0; i < nwr; i++) {
                wr[i].sg_list = &sge[i];
                wr[i].num_sge = 1;
                int lastp = i + 1 == nwr;
                wr[i].wr_id = (uint64_t)(uintptr_t)s + (lastp ? 0 : 1);
                wr[i].send_flags =
                    lastp ? ((flags | IBV_SEND_SIGNALED) & ~(unsigned)IBV_SEND_INLINE) : 0;
                wr[i].next = lastp ? NULL : &wr[i + 1];
            }
            struct ibv_send_wr *bad = NULL;
            rc = rcp__verbs_post_chain(qp, wr, &bad);
            if (rc && bad != wr) {
                /* the send queue filled in the middle: the pieces before bad are on the wire
                   and need their chunks; no completion will say when they are done, so the
                   slot keeps its holds for the context's lifetime */
                nppin__log(ctx, NPPIN_LOG_ERROR, "ibv_post_send took %d of %zu pieces; their "
                           "chunks stay registered", (int)(bad - wr), nwr);
                if (sge != sge_st) { NPPIN_FREE(sge); NPPIN_FREE(wr); }
                s->user_wr_id = wr_id;
                s->used = NPPIN__SLOT_PARTIAL;
                return rc;
            }
        }
        if (sge != sge_st) { NPPIN_FREE(sge); NPPIN_FREE(wr); }
        if (rc) goto fail;
    }
    s->user_wr_id = wr_id;
    if (slot_out) *slot_out = s;
    return 0;
fail:
    nppin__slot_put(ctx, s);
    return rc;
}

/* One post under the context's lock (the public posts; nppin_xfer keeps its slot). */
static int nppin__post_one(nppin_ctx *ctx, struct ibv_qp *qp, int opcode, uint64_t wr_id,
                           const void *buf, size_t len, const nppin_target *t, unsigned flags,
                           int recv)
{
    pthread_mutex_lock(&ctx->mu);
    int rc = nppin__post(ctx, qp, opcode, wr_id, (uintptr_t)buf, len, t, flags, recv, NULL);
    pthread_mutex_unlock(&ctx->mu);
    return rc;
}

NPPIN_API int nppin_post_send(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                              size_t len, unsigned send_flags)
{
    NPPIN__HCHECK(ctx);
    if (!ctx) return -EINVAL;
    return nppin__post_one(ctx, qp, IBV_WR_SEND, wr_id, buf, len, NULL, send_flags, 0);
}

NPPIN_API int nppin_post_recv(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len)
{
    NPPIN__HCHECK(ctx);
    if (!ctx) return -EINVAL;
    return nppin__post_one(ctx, qp, IBV_WR_SEND, wr_id, buf, len, NULL, 0, 1);
}

NPPIN_API int nppin_post_write(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, const void *buf,
                               size_t len, const nppin_target *to, unsigned send_flags)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !to) return -EINVAL;
    return nppin__post_one(ctx, qp, IBV_WR_RDMA_WRITE, wr_id, buf, len, to, send_flags, 0);
}

NPPIN_API int nppin_post_read(nppin_ctx *ctx, struct ibv_qp *qp, uint64_t wr_id, void *buf,
                              size_t len, const nppin_target *from, unsigned send_flags)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !from) return -EINVAL;
    return nppin__post_one(ctx, qp, IBV_WR_RDMA_READ, wr_id, buf, len, from, send_flags, 0);
}

static int nppin__complete_locked(nppin_ctx *ctx, struct ibv_wc *wc)
{
    uintptr_t id = (uintptr_t)wc->wr_id, lo = (uintptr_t)ctx->slots,
              hi = (uintptr_t)(ctx->slots + ctx->o.max_inflight);
    if (id < lo || id >= hi || (id - lo) % sizeof(nppin__slot) > 1) return 0;
    nppin__slot *s = (nppin__slot *)(id & ~(uintptr_t)1);
    if (s->used == NPPIN__SLOT_FREE) return 0;
    if (id & 1) { /* an intermediate piece: only failures complete */
        if (wc->status != IBV_WC_SUCCESS && s->err_status < 0) {
            s->err_status = (int)wc->status;
            s->err_vendor = wc->vendor_err;
        }
        return 2;
    }
    if (s->used == NPPIN__SLOT_ABANDONED) { /* a piece nppin_xfer gave up waiting for */
        nppin__slot_put(ctx, s);
        nppin__reap(ctx);
        return 2;
    }
    if (s->used != NPPIN__SLOT_POSTED) return 0;
    wc->wr_id = s->user_wr_id;
    if (s->err_status >= 0 && wc->status == IBV_WC_WR_FLUSH_ERR) {
        wc->status = (enum ibv_wc_status)s->err_status;
        wc->vendor_err = s->err_vendor;
    }
    nppin__slot_put(ctx, s);
    if (ctx->retired.next != &ctx->retired) nppin__reap(ctx);
    return 1;
}

NPPIN_API int nppin_complete(nppin_ctx *ctx, struct ibv_wc *wc)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !wc) return -EINVAL;
    pthread_mutex_lock(&ctx->mu);
    int rc = nppin__complete_locked(ctx, wc);
    pthread_mutex_unlock(&ctx->mu);
    return rc;
}

NPPIN_API int nppin_poll(nppin_ctx *ctx, struct ibv_cq *cq, struct ibv_wc *wc, int max)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !cq || !wc || max <= 0) return -EINVAL;
    int n = ibv_poll_cq(cq, max, wc);
    if (n <= 0) return n < 0 ? -EIO : 0;
    pthread_mutex_lock(&ctx->mu);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (nppin__complete_locked(ctx, &wc[i]) != 2) wc[k++] = wc[i];
    pthread_mutex_unlock(&ctx->mu);
    return k;
}

/* Wait until deadline for the completion of the nppin_xfer piece in slot, dropping the pieces
   before its last and handling the peers' messages between slices of the wait. When the wait
   fails or times out, the piece stays posted and the slot is given up: its completion, whenever
   it is polled, is consumed by nppin (and lets its chunks go), never handed out as the user's. */
static int nppin__xfer_wait(nppin_ctx *ctx, struct ibv_cq *cq, nppin__slot *slot,
                            uint64_t deadline, struct ibv_wc *wc)
{
    for (;;) {
        uint64_t now = nppin__now(), left = deadline > now ? deadline - now : 0;
        if (left > NPPIN__XFER_SLICE_NS) left = NPPIN__XFER_SLICE_NS;
        int k = left ? rcp__verbs_poll(cq, wc, 1, left) : ibv_poll_cq(cq, 1, wc); /* last look */
        if (!left) k = k > 0 ? k : k < 0 ? -EIO : -ETIMEDOUT;
        if (k == -ETIMEDOUT && nppin__now() < deadline) {
            nppin__progress_all(ctx);
            continue;
        }
        pthread_mutex_lock(&ctx->mu);
        if (k < 0) {
            slot->used = NPPIN__SLOT_ABANDONED;
            pthread_mutex_unlock(&ctx->mu);
            return k;
        }
        k = nppin__complete_locked(ctx, wc);
        pthread_mutex_unlock(&ctx->mu);
        if (k == 1) return 0; /* in order on the QP: the last piece of this post */
        if (k == 0)
            nppin__log(ctx, NPPIN_LOG_WARN, "nppin_xfer: dropped a completion that is not "
                       "nppin's (wr_id %#llx) from its CQ", (unsigned long long)wc->wr_id);
    }
}

NPPIN_API int nppin_xfer(nppin_ctx *ctx, struct ibv_qp *qp, struct ibv_cq *cq, int op, void *buf,
                         size_t len, const nppin_target *t, unsigned flags, uint64_t timeout_ns)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !qp || !cq || !t || (op != NPPIN_OP_WRITE && op != NPPIN_OP_READ)) return -EINVAL;
    uintptr_t a = (uintptr_t)buf;
    size_t cs = ctx->cs;
    size_t chunks = len ? ((a + len - 1) / cs - a / cs + 1) : 0;
    if ((flags & NPPIN_NOSPLIT) && chunks > ctx->budget / cs) return NPPIN_E_TOOBIG;
    size_t piece = ctx->budget / 2 / cs * cs;
    if (piece < cs) piece = cs;
    uint64_t deadline = nppin__now() + (timeout_ns ? timeout_ns : NPPIN_DEFAULT_XFER_TIMEOUT_NS);
    int opcode = op == NPPIN_OP_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    size_t off = 0;
    while (off < len) {
        uintptr_t p = a + off, lim = (p + piece) & ~(uintptr_t)(cs - 1);
        if (lim <= p) lim = (p | (cs - 1)) + 1;
        size_t n = lim - p < len - off ? lim - p : len - off;
        nppin_target pt = *t;
        pt.addr = t->addr + off;
        nppin__slot *slot = NULL;
        pthread_mutex_lock(&ctx->mu);
        int rc = nppin__post(ctx, qp, opcode, NPPIN__XFER_WR_ID, p, n, &pt, 0, 0, &slot);
        pthread_mutex_unlock(&ctx->mu);
        if (rc == NPPIN_E_BUSY) {
            if (nppin__now() >= deadline) {
                nppin__log(ctx, NPPIN_LOG_WARN, "nppin_xfer: the piece at +%zu (%zu bytes) found "
                           "the budget busy until the timeout; nothing of it was posted", off, n);
                return -ETIMEDOUT;
            }
            nppin__progress_all(ctx);
            usleep(200);
            continue;
        }
        if (rc) {
            nppin__log(ctx, NPPIN_LOG_WARN, "nppin_xfer: the piece at +%zu (%zu bytes) was not "
                       "posted: %s", off, n, nppin_strerror(rc));
            return rc;
        }
        struct ibv_wc wc;
        rc = nppin__xfer_wait(ctx, cq, slot, deadline, &wc);
        if (rc) {
            nppin__log(ctx, NPPIN_LOG_WARN, "nppin_xfer: the piece at +%zu (%zu bytes) %s; it "
                       "stays posted, its chunks held until nppin polls its completion", off, n,
                       rc == -ETIMEDOUT ? "did not complete in time" : "could not be polled");
            return rc;
        }
        if (wc.status != IBV_WC_SUCCESS) {
            nppin__log(ctx, NPPIN_LOG_ERROR, "xfer piece at +%zu: %s", off,
                       ibv_wc_status_str(wc.status));
            return wc.status == IBV_WC_REM_ACCESS_ERR ? -EACCES : -EIO;
        }
        off += n;
    }
    return 0;
}

/* Handle what every live peer has sent; returns how many messages. */
static int nppin__progress_all(nppin_ctx *ctx)
{
    int n = 0;
    pthread_mutex_lock(&ctx->mu);
    for (int i = 0; i < NPPIN_MAX_PEERS; i++) {
        nppin_peer *p = ctx->peers[i];
        if (!p || p->dead) continue;
        int k = nppin__progress_locked(p, 0);
        if (k > 0) n += k;
    }
    nppin__reap(ctx);
    pthread_mutex_unlock(&ctx->mu);
    return n;
}

/* >>invalidate - invalidate and sync ----------------------------------------------------------- */
NPPIN_API int nppin_invalidate(nppin_ctx *ctx, const void *addr, size_t len)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !len) return -EINVAL;
    pthread_mutex_lock(&ctx->mu);
    nppin__invalidate_locked(ctx, (uintptr_t)addr, (uintptr_t)addr + len);
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

NPPIN_API int nppin_sync(nppin_ctx *ctx, uint64_t timeout_ns)
{
    NPPIN__HCHECK(ctx);
    if (!ctx) return -EINVAL;
    uint64_t deadline = nppin__now() + timeout_ns;
    int rc = nppin__mon_barrier(ctx, deadline);
    if (rc) return rc;
    for (;;) {
        pthread_mutex_lock(&ctx->mu);
        nppin__reap(ctx);
        int left = 0;
        uint64_t now = nppin__now();
        for (nppin__reg *r = ctx->retired.next; r != &ctx->retired; r = r->next)
            left |= nppin__lease_live(r, now);
        pthread_mutex_unlock(&ctx->mu);
        if (!left) return 0;
        if (nppin__now() >= deadline) return -ETIMEDOUT;
        if (!nppin__progress_all(ctx)) usleep(500);
    }
}

/* >>protocol - the lease protocol: messages ---------------------------------------------------- */
/* Messages: 48 bytes, little-endian. [0] u16 magic, u16 type; [4] u32 region; [8] u64 chunk;
   [16] u32 gen; [20] u32 rkey; [24] u64 addr; [32] u32 len; [36] u32 lease_ms; [40] u64 seq. */
static void nppin__msg(unsigned char *m, uint32_t type, uint32_t region, uint64_t idx, uint32_t gen,
                       uint32_t rkey, uint64_t addr, uint32_t len, uint32_t lease_ms, uint64_t seq)
{
    nppin__put32(m, NPPIN__MAGIC | type << 16);
    nppin__put32(m + 4, region);
    nppin__put64(m + 8, idx);
    nppin__put32(m + 16, gen);
    nppin__put32(m + 20, rkey);
    nppin__put64(m + 24, addr);
    nppin__put32(m + 32, len);
    nppin__put32(m + 36, lease_ms);
    nppin__put64(m + 40, seq);
}

static int nppin__peer_send(nppin_peer *p, const unsigned char *msg)
{
    int rc = p->chan.send(p->chan.user, msg, NPPIN_MSG_SIZE);
    if (rc) {
        p->dead = 1;
        nppin__log(p->ctx, NPPIN_LOG_WARN, "peer %d: send failed (%s); its leases run out", p->idx,
                   strerror(rc < 0 ? -rc : rc));
    }
    return rc ? NPPIN_E_PEERDEAD : 0;
}

static void nppin__remote_unheld(nppin_remote *rm, size_t idx)
{
    nppin__rkey *k = &rm->c[idx];
    if (k->holds || !k->ret_gen) return;
    unsigned char m[NPPIN_MSG_SIZE];
    nppin__msg(m, NPPIN__RETURN, rm->region_id, idx, k->ret_gen, 0, 0, 0, 0, 0);
    k->ret_gen = 0;
    if (!rm->peer->dead) nppin__peer_send(rm->peer, m);
}

/* Owner: a peer asks for chunk idx of region id. */
static void nppin__on_req(nppin_peer *p, const unsigned char *m)
{
    nppin_ctx *ctx = p->ctx;
    uint32_t id = nppin__get32(m + 4);
    uint64_t idx = nppin__get64(m + 8), seq = nppin__get64(m + 40);
    unsigned char a[NPPIN_MSG_SIZE];
    nppin_region *rg = nppin__find_id(ctx, id);
    if (!rg || idx >= rg->nchunks) {
        nppin__msg(a, NPPIN__DENY, id, idx, 0, 0, 0, 0, 0, seq);
        nppin__peer_send(p, a);
        return;
    }
    nppin__reg *r = NULL;
    int rc = nppin__get_reg(ctx, rg, (size_t)idx, &r);
    if (rc == NPPIN_E_BUSY || (!rc && r->revoking)) {
        ctx->st.leases_busy++;
        nppin__msg(a, NPPIN__BUSY, id, idx, 0, 0, 0, 0, 0, seq);
        nppin__peer_send(p, a);
        return;
    }
    if (rc) {
        nppin__log(ctx, NPPIN_LOG_ERROR, "lease for region %u chunk %llu: %s", id,
                   (unsigned long long)idx, nppin_strerror(rc));
        nppin__msg(a, NPPIN__DENY, id, idx, 0, 0, 0, 0, (uint32_t)-rc, seq);
        nppin__peer_send(p, a);
        return;
    }
    uint64_t until = nppin__now() + (uint64_t)ctx->o.lease_ms * 1000000ull;
    uint64_t addr = rg->odp ? rg->base : (uint64_t)(uintptr_t)r->mr->addr;
    uint64_t len = rg->odp ? rg->end - rg->base : r->mr->length;
    if (!r->odp) {
        r->lease_mask |= (uint64_t)1 << p->idx;
        if (until > r->lease_until) r->lease_until = until;
    }
    ctx->st.leases_granted++;
    nppin__msg(a, NPPIN__GRANT, id, idx, r->gen, r->mr->rkey, addr, (uint32_t)len,
               r->odp ? UINT32_MAX : ctx->o.lease_ms, seq);
    nppin__peer_send(p, a);
}

/* Owner: a holder gave a lease back. */
static void nppin__on_return(nppin_peer *p, const unsigned char *m)
{
    nppin_ctx *ctx = p->ctx;
    uint32_t id = nppin__get32(m + 4), gen = nppin__get32(m + 16);
    uint64_t idx = nppin__get64(m + 8);
    uint64_t bit = (uint64_t)1 << p->idx;
    for (nppin__reg *head = &ctx->lru;; head = &ctx->retired) {
        for (nppin__reg *r = head->next; r != head; r = r->next)
            if (r->region_id == id && r->idx == idx && r->gen <= gen) r->lease_mask &= ~bit;
        if (head == &ctx->retired) break;
    }
    nppin__reap(ctx);
}

/* Holder: the owner takes a lease back. */
static void nppin__on_revoke(nppin_peer *p, const unsigned char *m)
{
    uint32_t id = nppin__get32(m + 4), gen = nppin__get32(m + 16);
    uint64_t idx = nppin__get64(m + 8);
    p->ctx->st.revokes_received++;
    for (nppin_remote *rm = p->remotes; rm; rm = rm->next) {
        if (rm->region_id != id || idx >= rm->nchunks) continue;
        nppin__rkey *k = &rm->c[idx];
        if (k->until && k->gen <= gen) k->until = 0; /* no new work on it */
        if (gen > k->ret_gen) k->ret_gen = gen;      /* returned once our work on it is done */
        nppin__remote_unheld(rm, (size_t)idx);
        return;
    }
    unsigned char a[NPPIN_MSG_SIZE];
    nppin__msg(a, NPPIN__RETURN, id, idx, gen, 0, 0, 0, 0, 0);
    nppin__peer_send(p, a);
}

static int nppin__handle(nppin_peer *p, const unsigned char *m, int len)
{
    if (len != NPPIN_MSG_SIZE || (nppin__get32(m) & 0xffff) != NPPIN__MAGIC) {
        p->ctx->st.bad_messages++;
        return NPPIN_E_PROTO;
    }
    uint32_t type = nppin__get32(m) >> 16;
    switch (type) {
    case NPPIN__REQ: nppin__on_req(p, m); break;
    case NPPIN__RETURN: nppin__on_return(p, m); break;
    case NPPIN__REVOKE: nppin__on_revoke(p, m); break;
    case NPPIN__GRANT: case NPPIN__BUSY: case NPPIN__DENY:
        if (nppin__get64(m + 40) == p->want_seq && !p->got) {
            p->got = 1;
            p->got_type = (int)type;
            memcpy(p->got_msg, m, NPPIN_MSG_SIZE);
        }
        break;
    default:
        p->ctx->st.bad_messages++;
        return NPPIN_E_PROTO;
    }
    return 0;
}

/* Handle messages: the first may be waited for up to timeout_ns. Returns how many. */
static int nppin__progress_locked(nppin_peer *p, uint64_t timeout_ns)
{
    int n = 0;
    unsigned char m[NPPIN_MSG_SIZE];
    for (;;) {
        int len = p->chan.recv(p->chan.user, m, sizeof m, n ? 0 : timeout_ns);
        if (len == 0) break;
        if (len < 0) {
            p->dead = 1;
            return n ? n : NPPIN_E_PEERDEAD;
        }
        nppin__handle(p, m, len);
        n++;
    }
    return n;
}

NPPIN_API int nppin_peer_progress(nppin_peer *p, uint64_t timeout_ns)
{
    NPPIN__HCHECK(p);
    if (!p) return -EINVAL;
    if (p->dead) return NPPIN_E_PEERDEAD;
    /* a long wait is cut into slices of 1 ms, the mutex let go between them, so other threads
       and the userfaultfd thread go on */
    uint64_t deadline = nppin__now() + timeout_ns;
    int n;
    for (;;) {
        uint64_t now = nppin__now(), left = deadline > now ? deadline - now : 0;
        pthread_mutex_lock(&p->ctx->mu);
        n = nppin__progress_locked(p, left < 1000000 ? left : 1000000);
        nppin__reap(p->ctx);
        pthread_mutex_unlock(&p->ctx->mu);
        if (n != 0 || nppin__now() >= deadline) return n;
    }
}

/* Holder: the key of the chunk of rm holding raddr, asking the owner on a miss. */
static int nppin__remote_key(nppin_remote *rm, uint64_t raddr, size_t *idx_out, nppin__rkey **out)
{
    int hk = nppin__hk(rm); /* a target's remote is a handle too (ERRORS) */
    if (hk) return hk;
    nppin_peer *p = rm->peer;
    nppin_ctx *ctx = p->ctx;
    if (raddr < rm->base || raddr >= rm->base + rm->len) return NPPIN_E_NOTREG;
    size_t idx = (size_t)((raddr - rm->cbase) / rm->cs);
    nppin__rkey *k = &rm->c[idx];
    uint64_t now = nppin__now_late(ctx);
    uint64_t lease = (uint64_t)ctx->o.lease_ms * 1000000ull;
    /* take the revocations that have arrived, at most every 200 us: a lease stays valid until
       its time is up whether or not its revocation was read, so this only makes returns prompt */
    if (now - p->last_progress > 200000) {
        p->last_progress = now;
        nppin__progress_locked(p, 0);
    }
    if (k->until && now < k->until && (k->until == UINT64_MAX || k->until - now > lease / 2)) {
        *idx_out = idx;
        *out = k;
        return 0;
    }
    if (k->until) ctx->st.lease_renewals++;
    else ctx->st.lease_misses++;
    now = nppin__now();
    uint64_t deadline = now + (uint64_t)ctx->o.request_timeout_ms * 1000000ull;
    unsigned backoff_us = 50;
    for (;;) {
        if (p->dead) return NPPIN_E_PEERDEAD;
        unsigned char m[NPPIN_MSG_SIZE];
        uint64_t asked = nppin__now();
        p->want_seq = ++p->seq;
        p->got = 0;
        nppin__msg(m, NPPIN__REQ, rm->region_id, idx, 0, 0, 0, 0, 0, p->want_seq);
        int rc = nppin__peer_send(p, m);
        if (rc) return rc;
        while (!p->got) {
            if (nppin__now() >= deadline) return -ETIMEDOUT;
            if (nppin__progress_locked(p, 1000000) < 0) return NPPIN_E_PEERDEAD;
        }
        if (p->got_type == NPPIN__GRANT) {
            const unsigned char *g = p->got_msg;
            uint64_t addr = nppin__get64(g + 24), len = nppin__get32(g + 32);
            uint32_t lms = nppin__get32(g + 36);
            /* the owner's answer is checked: its chunk must lie in the region it exported */
            if (nppin__get64(g + 8) != idx || addr < rm->base || addr + len > rm->base + rm->len ||
                raddr < addr || raddr >= addr + len || lms == 0) {
                ctx->st.bad_messages++;
                return NPPIN_E_PROTO;
            }
            uint32_t margin = ctx->o.lease_margin_ms;
            k->addr = addr;
            k->len = (uint32_t)len;
            k->rkey = nppin__get32(g + 20);
            k->gen = nppin__get32(g + 16);
            k->until = lms == UINT32_MAX ? UINT64_MAX
                       : lms > margin    ? asked + (uint64_t)(lms - margin) * 1000000ull
                                         : asked + (uint64_t)lms * 750000ull;
            *idx_out = idx;
            *out = k;
            return 0;
        }
        if (p->got_type == NPPIN__DENY) {
            /* the owner's reason, if it is a code we know the range of */
            uint32_t why = nppin__get32(p->got_msg + 36);
            return why > 0 && why <= 5000 ? -(int)why : NPPIN_E_HANDLE;
        }
        if (nppin__now() + backoff_us * 1000ull >= deadline) return -ETIMEDOUT;
        /* busy: the owner is revoking; let go of the mutex while waiting */
        pthread_mutex_unlock(&ctx->mu);
        usleep(backoff_us);
        pthread_mutex_lock(&ctx->mu);
        if (backoff_us < 5000) backoff_us *= 2;
        nppin__progress_locked(p, 0);
    }
}

/* >>peers - peers and remotes ------------------------------------------------------------------ */
NPPIN_API int nppin_peer_create(nppin_ctx *ctx, const nppin_chan *chan, nppin_peer **out)
{
    NPPIN__HCHECK(ctx);
    if (!ctx || !chan || !chan->send || !chan->recv || !out) return -EINVAL;
    *out = NULL;
    nppin_peer *p = (nppin_peer *)nppin__calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->ctx = ctx;
    p->chan = *chan;
    pthread_mutex_lock(&ctx->mu);
    int i = 0;
    while (i < NPPIN_MAX_PEERS && ctx->peers[i]) i++;
    if (i == NPPIN_MAX_PEERS) {
        pthread_mutex_unlock(&ctx->mu);
        NPPIN_FREE(p);
        return NPPIN_E_NOPEERS;
    }
    int rc = rcp__handle_add(p);
    if (!rc) {
        p->idx = i;
        ctx->peers[i] = p;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (rc) {
        NPPIN_FREE(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Free a peer and its remotes; the mutex is held. Leases it held on our chunks stay counted
   until they expire: the other process may still be reading. */
static void nppin__peer_free(nppin_peer *p)
{
    while (p->remotes) {
        nppin_remote *rm = p->remotes;
        p->remotes = rm->next;
        rcp__handle_del(rm, 0); /* closed with its peer */
        NPPIN_FREE(rm->c);
        NPPIN_FREE(rm);
    }
    p->ctx->peers[p->idx] = NULL;
    rcp__handle_del(p, 0); /* taken out already, unless its context is being destroyed */
    NPPIN_FREE(p);
}

NPPIN_API int nppin_peer_destroy(nppin_peer *p)
{
    if (!p) return 0;
    NPPIN__HCHECK(p);
    nppin_ctx *ctx = p->ctx;
    pthread_mutex_lock(&ctx->mu);
    for (nppin_remote *rm = p->remotes; rm; rm = rm->next)
        for (size_t i = 0; i < rm->nchunks; i++)
            if (rm->c[i].holds) { /* a post in flight still names it */
                pthread_mutex_unlock(&ctx->mu);
                return NPPIN_E_BUSY;
            }
    int rc = nppin__hk_take(p); /* two destroys racing: one frees */
    if (!rc) nppin__peer_free(p);
    pthread_mutex_unlock(&ctx->mu);
    return rc;
}

/* Handle: [0] u32 magic "NPH1", u32 region id, u64 base, u64 len, u64 chunk size. */
NPPIN_API int nppin_region_export(const nppin_region *rg, unsigned char out[NPPIN_HANDLE_SIZE])
{
    NPPIN__HCHECK(rg);
    if (!rg || !out) return -EINVAL;
    nppin__put32(out, 0x3148504eu);
    nppin__put32(out + 4, rg->id);
    nppin__put64(out + 8, rg->base);
    nppin__put64(out + 16, rg->end - rg->base);
    nppin__put64(out + 24, rg->ctx->cs);
    return 0;
}

NPPIN_API int nppin_remote_open(nppin_peer *p, const unsigned char handle[NPPIN_HANDLE_SIZE],
                                nppin_remote **out)
{
    NPPIN__HCHECK(p);
    if (!p || !handle || !out) return -EINVAL;
    *out = NULL;
    uint64_t base = nppin__get64(handle + 8), len = nppin__get64(handle + 16),
             cs = nppin__get64(handle + 24);
    if (nppin__get32(handle) != 0x3148504eu || !len || base + len < base || cs < 4096 ||
        cs > ((uint64_t)1 << 30) || (cs & (cs - 1)))
        return NPPIN_E_HANDLE;
    nppin_remote *rm = (nppin_remote *)nppin__calloc(1, sizeof *rm);
    if (!rm) return -ENOMEM;
    rm->peer = p;
    rm->region_id = nppin__get32(handle + 4);
    rm->base = base;
    rm->len = len;
    rm->cs = cs;
    rm->cbase = base & ~(cs - 1);
    rm->nchunks = (size_t)((base + len - rm->cbase + cs - 1) / cs);
    rm->c = (nppin__rkey *)nppin__calloc(rm->nchunks, sizeof *rm->c);
    if (!rm->c) {
        NPPIN_FREE(rm);
        return -ENOMEM;
    }
    int rc = rcp__handle_add(rm);
    if (rc) {
        NPPIN_FREE(rm->c);
        NPPIN_FREE(rm);
        return rc;
    }
    pthread_mutex_lock(&p->ctx->mu);
    rm->next = p->remotes;
    p->remotes = rm;
    pthread_mutex_unlock(&p->ctx->mu);
    *out = rm;
    return 0;
}

NPPIN_API int nppin_remote_close(nppin_remote *rm)
{
    if (!rm) return 0;
    NPPIN__HCHECK(rm);
    nppin_ctx *ctx = rm->peer->ctx;
    pthread_mutex_lock(&ctx->mu);
    for (size_t i = 0; i < rm->nchunks; i++)
        if (rm->c[i].holds) { pthread_mutex_unlock(&ctx->mu); return NPPIN_E_BUSY; }
    int rc = nppin__hk_take(rm); /* two closes racing: one frees */
    if (rc) {
        pthread_mutex_unlock(&ctx->mu);
        return rc;
    }
    for (nppin_remote **pp = &rm->peer->remotes; *pp; pp = &(*pp)->next)
        if (*pp == rm) { *pp = rm->next; break; }
    /* give back every lease at once, so the owner need not wait for expiry */
    unsigned char m[NPPIN_MSG_SIZE];
    for (size_t i = 0; i < rm->nchunks && !rm->peer->dead; i++) {
        if (!rm->c[i].until) continue;
        nppin__msg(m, NPPIN__RETURN, rm->region_id, i, rm->c[i].gen, 0, 0, 0, 0, 0);
        nppin__peer_send(rm->peer, m);
    }
    pthread_mutex_unlock(&ctx->mu);
    NPPIN_FREE(rm->c);
    NPPIN_FREE(rm);
    return 0;
}

/* >>chan-verbs - the control channel over a verbs RC QP ---------------------------------------- */
typedef struct nppin__vchan {
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    unsigned char *buf;         /* NPPIN_CHAN_SLOTS receive slots, then send slots */
    unsigned sent, send_done, next_send;
    /* receives that arrived while polling for send completions */
    int ready[NPPIN_CHAN_SLOTS], ready_len[NPPIN_CHAN_SLOTS];
    unsigned rhead, rtail;
    int err;
} nppin__vchan;

static int nppin__vchan_post_recv(nppin__vchan *c, unsigned slot)
{
    return rcp__verbs_post_recv(c->qp, slot, c->buf + slot * NPPIN_MSG_SIZE, NPPIN_MSG_SIZE,
                                c->mr->lkey);
}

/* Poll the CQ once: queue receives, count send completions. */
static int nppin__vchan_poll(nppin__vchan *c)
{
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(c->cq, 8, wc);
    if (n < 0) return c->err = -EIO;
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            c->err = wc[i].status == IBV_WC_RETRY_EXC_ERR ? -ETIMEDOUT : -ECONNRESET;
            continue;
        }
        if (wc[i].opcode & IBV_WC_RECV) {
            c->ready[c->rtail % NPPIN_CHAN_SLOTS] = (int)wc[i].wr_id;
            c->ready_len[c->rtail % NPPIN_CHAN_SLOTS] = (int)wc[i].byte_len;
            c->rtail++;
        } else {
            c->send_done++;
        }
    }
    return n;
}

static int nppin__vchan_send(void *user, const void *msg, size_t len)
{
    nppin__vchan *c = (nppin__vchan *)user;
    if (len > NPPIN_MSG_SIZE) return -EMSGSIZE;
    uint64_t end = nppin__now() + NPPIN__CHAN_SEND_NS;
    while (c->sent - c->send_done >= NPPIN_CHAN_SLOTS && !c->err) {
        nppin__vchan_poll(c);
        if (nppin__now() >= end) return -ETIMEDOUT;
    }
    if (c->err) return c->err;
    unsigned slot = NPPIN_CHAN_SLOTS + c->next_send++ % NPPIN_CHAN_SLOTS;
    memcpy(c->buf + slot * NPPIN_MSG_SIZE, msg, len);
    int rc = rcp__verbs_post_send(c->qp, slot, c->buf + slot * NPPIN_MSG_SIZE, (uint32_t)len,
                                  c->mr->lkey, IBV_SEND_SIGNALED);
    if (rc) return rc;
    c->sent++;
    return 0;
}

static int nppin__vchan_recv(void *user, void *buf, size_t cap, uint64_t timeout_ns)
{
    nppin__vchan *c = (nppin__vchan *)user;
    uint64_t end = nppin__now() + timeout_ns;
    for (;;) {
        if (c->rhead != c->rtail) {
            unsigned slot = (unsigned)c->ready[c->rhead % NPPIN_CHAN_SLOTS];
            size_t n = (size_t)c->ready_len[c->rhead % NPPIN_CHAN_SLOTS];
            c->rhead++;
            if (n > cap) n = cap;
            memcpy(buf, c->buf + slot * NPPIN_MSG_SIZE, n);
            int rc = nppin__vchan_post_recv(c, slot);
            if (rc) return c->err = rc;
            return n ? (int)n : -EPROTO;
        }
        if (c->err) return c->err;
        if (nppin__vchan_poll(c) > 0) continue;
        if (nppin__now() >= end) return 0;
        sched_yield();
    }
}

NPPIN_API int nppin_chan_verbs_create(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_cq *cq,
                                      nppin_chan *out)
{
    if (!pd || !qp || !cq || !out) return -EINVAL;
    nppin__vchan *c = (nppin__vchan *)nppin__calloc(1, sizeof *c);
    int rc;
    if (!c) return -ENOMEM;
    c->qp = qp;
    c->cq = cq;
    c->buf = (unsigned char *)nppin__calloc(1, NPPIN_CHAN_BUF_BYTES);
    if (!c->buf) { rc = -ENOMEM; goto fail_c; }
    c->mr = ibv_reg_mr(pd, c->buf, NPPIN_CHAN_BUF_BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr) { rc = -(errno ? errno : EIO); goto fail_buf; }
    for (unsigned i = 0; i < NPPIN_CHAN_SLOTS; i++)
        if ((rc = nppin__vchan_post_recv(c, i))) goto fail_mr;
    out->send = nppin__vchan_send;
    out->recv = nppin__vchan_recv;
    out->user = c;
    return 0;
fail_mr:
    ibv_dereg_mr(c->mr);
fail_buf:
    NPPIN_FREE(c->buf);
fail_c:
    NPPIN_FREE(c);
    return rc;
}

NPPIN_API void nppin_chan_verbs_destroy(nppin_chan *chan)
{
    if (!chan || !chan->user) return;
    nppin__vchan *c = (nppin__vchan *)chan->user;
    /* the QP must be destroyed (or in the error state, drained) before its receive buffers go */
    ibv_dereg_mr(c->mr);
    NPPIN_FREE(c->buf);
    NPPIN_FREE(c);
    chan->user = NULL;
}

/* >>stats - stats and explanations ------------------------------------------------------------- */
NPPIN_API int nppin_get_stats(nppin_ctx *ctx, nppin_stats *out)
{
    NPPIN__HCHECK(ctx);
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!ctx) return -EINVAL;
    pthread_mutex_lock(&ctx->mu);
    *out = ctx->st;
    out->pinned = ctx->pinned;
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

NPPIN_API const char *nppin_explain(nppin_ctx *ctx, int code, char *buf, size_t len)
{
    if (!buf || !len) return "";
    if (!ctx || nppin__hk(ctx) ||
        (code != NPPIN_E_PINLIMIT && code != NPPIN_E_TOOBIG && code != NPPIN_E_BUSY)) {
        snprintf(buf, len, "%s", nppin_strerror(code));
        return buf;
    }
    char lim[40];
    if (ctx->st.memlock_limit == UINT64_MAX) snprintf(lim, sizeof lim, "unlimited");
    else snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)ctx->st.memlock_limit);
    pthread_mutex_lock(&ctx->mu);
    size_t pinned = ctx->pinned;
    pthread_mutex_unlock(&ctx->mu);
    snprintf(buf, len, "%s; RLIMIT_MEMLOCK %s, nppin budget %zu bytes, pinned now %zu bytes, "
             "chunk %zu bytes", nppin_strerror(code), lim, ctx->budget, pinned, ctx->cs);
    return buf;
}

#endif /* NPPIN_NO_RDMA */
#endif /* NPPIN_IMPLEMENTATION */

/*
   ------------------------------------------------------------------------------------------------
   MIT License

   Copyright (c) 2026 the rpcool authors

   Permission is hereby granted, free of charge, to any person obtaining a copy of this software
   and associated documentation files (the "Software"), to deal in the Software without
   restriction, including without limitation the rights to use, copy, modify, merge, publish,
   distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
   Software is furnished to do so, subject to the following conditions:

   The above copyright notice and this permission notice shall be included in all copies or
   substantial portions of the Software.

   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
   BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
   NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
   DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
   OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
