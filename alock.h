/* SPDX-License-Identifier: MIT */
/* alock.h - ALock: a lock table whose local users never touch the NIC, with remote users over
   RDMA. version 0.4.0

   TABLE OF CONTENTS
   -----------------
   1. Usage
   2. Example
   3. Concepts         cohorts, the lock line, budgets, links; dead holders and waiters
   4. Options
   5. Thread safety
   6. Errors
   7. Limits
   8. Design notes
   The declarations follow this text; then the implementation, whose sections are marked with
   anchors to grep for: >>implementation >>layout >>util >>liveness >>table >>local >>remote
   >>verbs_link >>krconn_link, and in impl/podlease.h (the leases of a pod's processes)
   >>lease-types >>lease-attach >>lease-hold >>lease-watch. The licence (MIT) is at the end of
   the file.

   1. USAGE
   --------
   Copy alock.h, shmheap.h and the impl/ folder into your project. In exactly one C or C++ file:

       #define ALOCK_IMPLEMENTATION
       #include "alock.h"

   ALOCK_IMPLEMENTATION also compiles shmheap's implementation into that file unless it is there
   already (define ALOCK_NO_SHMHEAP_IMPLEMENTATION if it lives in another file of yours). The
   remote cohort needs libibverbs: link with -libverbs. Local use only (processes of one host,
   or of one CXL pod) needs libc alone: define ALOCK_NO_RDMA and build with plain `cc -pthread`
   (without <infiniband/verbs.h> on the machine that is automatic). Options, defined before the
   implementation:
       ALOCK_NO_RDMA        leave the remote cohort out (automatic when <infiniband/verbs.h> is
                            missing): alock_remote_* and alock_verbs_link_* then return
                            ALOCK_E_NOTSUP
       ALOCK_STATIC         make every alock function static
       ALOCK_ASSERT(x)      your assert (default: assert from <assert.h>)
       ALOCK_MALLOC(size)   your allocator for the library's private memory (default: malloc
       ALOCK_FREE(p)        and free); define both or neither
       ALOCK_CHECK_RMW      check the invariant ALock rests on, at run time: no word of a lock
                            line is changed by both a CPU read-modify-write and an RDMA one (every
                            such operation marks its word in the line; a mark of the other kind
                            fails ALOCK_ASSERT). Costs one RDMA READ more per remote atomic,
                            and a fetch-and-add the first time it marks a word
   Set ALOCK_DEBUG (any value) in the environment to log recoveries and failures to stderr when
   no log function is given in the options.
   Options structs (alock_table_opts, alock_remote_opts): zero means the default. Fill one with
   designated initialisers in C; in C++, value-initialise it and assign the fields you set (`T o{};`
   and `T o = {};` never warn; an initialiser list that leaves fields out warns under -Wextra in g++
   before 14, -Wmissing-field-initializers):

       alock_table_opts o = {.nlocks = 1024};  // C
       alock_table_opts o{}; o.nlocks = 1024;  // C++

   2. EXAMPLE
   ----------
       shmheap *h;  alock_table *t;  alock_hold hold;
       shmheap_create("locks", NULL, &h);                    // other processes: shmheap_open
       alock_table_opts o = {.nlocks = 1024};
       alock_table_create(h, "table", &o, &t);               // other processes: alock_table_open
       int rc = alock_lock(t, 42, &hold);                    // 0, or ALOCK_OWNERDEAD (held)
       if (rc < 0) { fprintf(stderr, "%s\n", alock_strerror(rc)); return 1; }
       counter++;                                            // the critical section
       alock_unlock(&hold);
       alock_table_close(t);                                 // alock_table_unlink removes it
   A remote process: the table's node registers what alock_table_lines names and tells remote
   processes its address and key; a remote process registers ALOCK_REMOTE_MEM(ndesc) bytes of
   its own for its descriptors, calls alock_remote_create with a link to the table's node,
   alock_remote_set_peer for every other remote process (and for its own id, a loopback link,
   if it uses alock_remote_lock_timeout), then alock_remote_lock / _unlock. When a remote process
   dies, the table's node calls alock_table_remote_dead(t, loop, id) (section 3).

   3. CONCEPTS
   -----------
   RDMA gives no atomicity between a CPU's read-modify-write and a NIC's on the same word (Soft-RoCE
   performs a remote atomic as a plain load then store). ALock splits the users of a lock into a
   local cohort (CPU atomics, zero RDMA operations) and a remote cohort (RDMA atomics), each an
   MCS queue, and lets the two cohort leaders arbitrate with Peterson's algorithm, which needs
   only loads and stores across the boundary. A lock is one 64-byte line:
       r_tail  @0   the remote queue's tail: changed only by RDMA compare-and-swap
       r_head  @8   the remote descriptor the lock was last handed to: RDMA compare-and-swap
       l_tail  @16  the local queue's tail: changed only by CPU exchange and compare-and-swap
       victim  @32  Peterson's turn: plain stores from both sides
   A non-empty tail is that cohort's Peterson flag. A waiter's descriptor (64 bytes: budget @0,
   next @32) is in its own memory: local ones in the table, remote ones in the remote process's
   registered memory, so every waiter spins on its own line. The lock passes within a cohort
   with budget - 1; a waiter handed 0 re-arbitrates (Peterson again), so neither cohort starves
   the other: once a waiting leader has written victim, the other cohort enters at most budget
   more times before it. A leader that finds the other cohort's tail empty right after raising
   its own flag enters at once, without writing victim: a local lock+unlock that meets no remote
   user is an exchange, two loads and a compare-and-swap; a remote one is a compare-and-swap,
   one READ of the line and a compare-and-swap: two round trips when the link has cas_read
   (the first two posted together on one queue pair, which executes them in order).
   The table lives in a shmheap (shmheap.h): every local process of the pod opens it and locks
   with CPU atomics. The local cohort is every process that maps the heap: those of one host, or,
   when the heap lies in a device that several hosts map at one address (rpcool's pod: a CXL
   region, a DAX device, an ivshmem BAR, a file) and carries each process's lease, the processes
   of every such host (the device must be coherent: impl/podlease.h, section 4). A remote
   process reaches the lock lines through one connection to the table's node, and the
   descriptors of other remote processes through connections to them: an alock_link is four
   function pointers (compare-and-swap, fetch-and-add, READ, WRITE) and a connection, so any
   connection library can carry it; alock_verbs_link_create makes one
   from an RC queue pair, and alock_krconn_link_create (declared when krconn.h is included
   before alock.h) one from a krconn.h connection. A remote waiter links itself behind its
   predecessor by a compare-and-swap of the predecessor's next word (0 to its own descriptor),
   never by a WRITE, and a granter reads the next word of a descriptor it passes over by a
   compare-and-swap from 0 to 0, never by a READ: an RDMA WRITE or READ need not move 8 bytes
   as one (Soft-RoCE copies with memcpy; under qemu TCG a CPU load saw a link half written, its
   top bytes still 0). So a link's cas must store and load its 8-byte word as one, as an RDMA
   atomic does, and a CPU load must see that store whole. What is still moved by WRITE or READ
   bears a torn copy: a freed descriptor's lock word (a WRITE of 0 reads as 0 only once done),
   and the lock line that a remote leader READs while local CPUs change it (only whether l_tail
   is 0 counts, two local descriptors in one heap share their top bytes, and victim's two
   values differ in one byte). An atomic retransmitted after an ACK timeout gets its first
   execution's result, never a second execution, as long as each queue pair's max_rd_atomic is
   at most its peer's max_dest_rd_atomic (the verbs rule; Soft-RoCE on Linux 6.1 kept to it over
   hundreds of retransmissions in tests/vm). Verbs has no atomic swap: the remote enqueue is a
   compare-and-swap loop, which is lock-free, not starvation-free (tests/alock.pml shows the
   starving run).
   The protocol, local and remote timeouts included, is model-checked with Spin
   (tests/alock.pml, tests/alock_model.sh), and so is the recovery from a dead remote process
   (two remote processes, one of which dies, and one local process); the take-over from dead
   local processes is not modelled.

   Dead holders and waiters. How a local process is known dead depends on the table's heap:
   - A heap with a lease (rpcool's pod device, opened by each process with its own lease from
     the device's lease table, impl/podlease.h): a table created there keeps no liveness file.
     Each handle's slot records its process's lease tag. That process is dead once its lease is
     no longer held with that tag (recovered or released), or once an observer has seen the
     lease unchanged for longer than the lease table's bound on the observer's own clock; the
     observer then recovers the lease (its epoch moves on). The bound is the one written in the
     lease table (RCP__LEASE_DEFAULT_BOUND_MS, 1 s, unless it was formatted with another).
     Nothing else crosses between the hosts: no file, byte lock, futex or /dev/shm name. A
     waiter that watches a process when it dies takes over within the bound plus check_ms of
     the death, and not before a bound has passed since the dead process last renewed its
     lease. Creating or opening such a table needs the lease held (ALOCK_E_INVAL if it is not,
     ALOCK_E_FENCED if it was recovered); a table created there opened through a heap without
     a lease is ALOCK_E_INVAL.
   - Any other heap: every local handle holds an open-file-description lock on one byte (its
     slot) of the table's liveness file; the kernel drops it when the process dies, in any pid
     namespace. Those locks need one kernel: processes of another host that share the heap's
     memory without a lease are never seen dead (their locks are waited for).
   What happens:
   - A local process dies holding a lock, or dies queued for one: the lock reaches its
     descriptor and stays there until a live process takes it over. Its local successor does so
     by itself: while it waits it looks at its predecessor's slot every check_ms, and once the
     dead predecessor has been handed the lock, it takes the lock and re-arbitrates.
     alock_lock returns ALOCK_OWNERDEAD (the lock is held) when the dead process had entered its
     critical section: the data it protects may be half-updated. With no local successor (the
     dead descriptor is the local tail), remote waiters wait until a local process locks that
     lock (it becomes the successor) or calls alock_recover(t), which releases every lock held or
     reached by a dead process. A new process never reuses the slot of a dead one before that
     slot's descriptors are out of every queue. With leases, alock_recover judges by what this
     handle has seen: a lease not yet watched for the bound counts as live, so a process dead
     for less than that is released by a later call (call it again after the bound).
   - With leases, a process that stalls past its lease (SIGSTOP, a paused VM) is dead to the
     others: they take over from it, and its lease is recovered. When it resumes it is fenced:
     every call on its table handle but close returns ALOCK_E_FENCED from then on (alock_unlock
     of a lock taken over from it included); close the handle, take a new lease and open the
     table again. The queue stays whole: each call checks the lease (rcp__lease_check, which
     renews it when due) before it acts, a waiter checks it every check_ms and leaves as at a
     deadline, and a holder's release and a take-over of it are decided by one compare-and-swap
     of the holder's descriptor (the release claims it, the take-over reclaims it), so exactly
     one of them hands the lock on. Not fenced: what the lock protects (a holder that stalls in
     its critical section and resumes writes on, unless it checks its lease after whatever can
     stall it and before each write, as impl/podlease.h section 3 says), and a stall inside an
     alock call between its check and the store that follows it (a few instructions: that
     store still lands).
   - alock_lock_timeout: a waiter whose deadline passes leaves its descriptor in the queue marked
     abandoned; whoever hands it the lock passes it on instead. So a timeout never blocks others.
     alock_remote_lock_timeout does the same in the remote queue: a remote hand-off is an RDMA
     compare-and-swap of the successor's budget word, and a remote waiter gives up with an RDMA
     compare-and-swap of that word too, through the link to its own id (a loopback connection),
     never with a CPU one, which the NIC's would not exclude; the granter passes over a waiter
     that gave up (it loads its next word by a compare-and-swap from 0 to 0) and frees its
     descriptor (WRITE of 0). A remote leader
     whose deadline passes in Peterson's loop leaves the head (its successor re-arbitrates).
   - A remote process dies. Its memory (its descriptors) is gone with it, so what it held is
     recovered from the lock line and from a dead map at the table's node (a bit per remote id,
     right after the lines, within what alock_table_lines names). The lock line says who holds
     the remote head: r_tail carries a head bit when its descriptor entered an empty queue, and
     every remote hand-off first sets r_head to the successor (an RDMA compare-and-swap), then
     hands it the lock; a head that was handed the lock clears r_head when it leaves an empty
     queue. Recovery starts when the table's node calls alock_table_remote_dead(t, loop, id):
     the caller must know that process id is dead, not merely slow or cut off (krconn's dead-peer
     detection reports both: the table's node closes its connection to it first, so a process
     still alive can no longer reach the lock lines). Then, for every lock:
     . a dead head (handed the lock, or entered an empty queue, its critical section or not) at
       the tail: alock_table_remote_dead empties the remote queue (r_tail from exactly that
       descriptor to 0, through loop), and the lock is free. Its next holder is not told
       (alock_table_remote_dead returns how many locks it released).
     . a dead head with a live remote waiter behind it: the waiter, which reads the dead map
       every ALOCK_DEFAULT_DEAD_CHECK_MS while it waits, takes over (r_head := itself) and
       re-arbitrates; alock_remote_lock (and _lock_timeout) returns ALOCK_OWNERDEAD (the lock
       is held): the dead process may have entered its critical section (alock cannot see
       whether it did), so the data may be half-updated. The waiter's link to the dead
       predecessor may fail: it waits all the same.
     . a dead waiter behind a live holder: the holder's release sets r_head to it, and the
       hand-off (an RDMA compare-and-swap in its memory) fails. If the table's node has marked it
       dead, the release empties the queue when it is the tail, else its own successor takes
       over, as above (alock_remote_unlock returns 0 either way); if not (yet), it returns
       ALOCK_E_PEER and the lock stays with the dead waiter (r_head names it) until
       alock_table_remote_dead releases it or its successor takes over.
     What stays manual (alock_remote_reset, by a process that knows every remote user of that
     lock has gone, empties the remote queue): a process that dies between its enqueue and its
     link (two RDMA operations in a row; a live predecessor's release then waits for the link
     and fails with ALOCK_E_PEER when the tail's process is gone, see below); two dead processes
     next to each other in one queue (nobody hands the second the lock, and it is not the head
     the lines name); a link between two live remote processes that fails (the hand-off cannot
     reach the successor: alock_remote_unlock returns ALOCK_E_PEER, and the successor waits,
     until its deadline with alock_remote_lock_timeout). Until a dead head is released, local
     cohort leaders wait in Peterson's loop (until their deadline with alock_lock_timeout). The
     local cohort is never corrupted by a remote death: it only waits. A dead id stays marked
     for the table's life: alock_remote_create refuses it (ALOCK_E_INVAL); give a new process a
     new id.
   - A remote release (alock_remote_unlock, or a leader leaving the head in trylock or at its
     deadline) whose compare-and-swap of r_tail finds that a successor has enqueued waits until
     the successor has linked itself (set the next word of the descriptor it follows),
     however long that takes: without the link nobody could hand it the lock (MCS's rule).
     Meanwhile, every ALOCK_DEFAULT_CHECK_MS, it READs the descriptor r_tail named through the
     link to its process, and fails when that READ fails (the process or its connection is
     gone, seen within the link's operation timeout): alock_remote_unlock returns ALOCK_E_PEER.
     A successor that dies before linking itself while a live process is queued behind it is
     not seen: the release waits, as that process does.
   - A lock never hands the protected data back in a known state: ALOCK_OWNERDEAD only says that
     the holder died inside its critical section (alock_lock), or may have (alock_remote_lock).

   4. OPTIONS
   ----------
   Zero means the default; NULL opts means all defaults (alock_table_create needs nlocks).
   alock_table_opts (create; check_ms, log and log_user also for open):
       nlocks     locks in the table, 1..2^24 (required)
       budget     hand-offs within a cohort before re-arbitration: ALOCK_DEFAULT_BUDGET
       slots      local handles open at once: ALOCK_DEFAULT_SLOTS (at most ALOCK_MAX_SLOTS)
       ndesc      locks one local handle holds or waits for at once: ALOCK_DEFAULT_NDESC (at
                  most 4096)
       A value beyond its bound is ALOCK_E_INVAL; a table too big for the heap, SHMHEAP_E_FULL.
       check_ms   how often a waiter looks at its predecessor's liveness (its byte lock, or its
                  lease) and, with leases, at its own lease: ALOCK_DEFAULT_CHECK_MS
       live_path  the liveness file: /dev/shm/alock.<heap address>.<table name> (none in a heap
                  with a lease)
       log, log_user  log callback (levels ALOCK_LOG_*); NULL = silent, or stderr when ALOCK_DEBUG
                  is set in the environment
   alock_remote_opts (all required but budget, log and log_user):
       id         this process's id among the table's remote processes, 1..65535, unique
       lines_addr, nlocks, budget  what the table's node reports (alock_table_lines; the
                  table's own nlocks, after whose lines the dead map lies; the budget it was
                  created with, 0 = ALOCK_DEFAULT_BUDGET)
       home       the link to the table's node
       descs, ndesc  ALOCK_REMOTE_MEM(ndesc) bytes, 64-byte aligned, registered by the caller for
                  remote read and write: the other remote processes' links reach it
       peer_link, peer_user  optional: peer_link(id, &link, peer_user) is called when alock
                  needs a link to remote process id that alock_remote_set_peer did not give
                  (a queue neighbour), on the thread in alock_remote_lock or _unlock; it fills
                  the link (kept for good) and returns 0, or returns a negative code: then that
                  operation fails with ALOCK_E_PEER. So links can be made lazily
   alock_verbs_link_create: timeout_ms bounds each operation (0 = ALOCK_DEFAULT_OP_TIMEOUT_MS).
   alock_krconn_link_create: the same; ctx is the context c belongs to (the link registers 128
                  bytes of scratch memory with krconn_reg there), rkey the peer memory's key.

   5. THREAD SAFETY
   ----------------
   alock_table functions may be called from any thread of any local process; one alock_hold
   per acquisition (alock_table_remote_dead uses its loop link: one thread at a time). An
   alock_remote (and the links it uses) is used by one thread at a time: give every thread of a
   remote process its own.

   6. ERRORS
   ---------
   0 or a negative code: ALOCK_E_* (ALOCK_ERRORS lists them), shmheap's codes from the heap,
   or -errno (verbs errors are converted at the boundary). alock_strerror(code) explains it.

   One rule in every rpcool header: each owns a block of codes counting up from its number
   (shmheap -1000, rpcool -2000, alock -3000, krconn -4000, nppin -5000). X_strerror explains
   its own codes and those of every rpcool header declared before its implementation (a code
   passed through keeps its text); -1 to -4095 is -errno (strerror's text if the system knows
   it); an undeclared header's code names that header; else "unknown error code"; 0 "success".
   Static texts. ALOCK_OWNERDEAD (positive) means success with news.

   Handles, one rule in every rpcool header: a handle is open from the call that made it until
   its close. A second close, or any use after the close, returns the header's E_BADHANDLE code
   (a function that returns a pointer or a size returns NULL or 0 and sets errno to EBADF); in
   a child of fork(), a handle its parent made returns the header's E_FORKED code, its close
   included (the child's copy goes at exit or exec), unless the header lets children use it. A
   table of open handles in each process tells these apart without reading the handle, so none
   of them is a crash; once a later open hands out the same address again, the old pointer is
   that new handle (as a file descriptor's number is). A pointer that was never a handle is
   undefined, as free() of one is.
   Here the handles are alock_table and alock_remote: ALOCK_E_BADHANDLE and ALOCK_E_FORKED;
   alock_unlock and alock_remote_unlock check the handle their hold names. A forked child opens
   the table again (its parent's handle shares the parent's slot). A table handle whose
   process's lease was recovered (section 3, a process stalled past its lease) is fenced: every
   call on it but alock_table_close returns ALOCK_E_FENCED. A link (alock_link) is a
   value the caller owns, not a handle: destroy clears it, so destroying it again does nothing.

   7. LIMITS
   ---------
   Linux x86-64/aarch64. Up to 2^24 locks per table; up to ALOCK_MAX_SLOTS local process
   handles and up to 65535 remote processes (16-bit ids, 48-bit addresses in descriptor
   pointers). A local handle holds or waits for at most ndesc locks at once, ALOCK_E_NODESC
   beyond; a remote descriptor whose RDMA operation failed after it was queued stays reserved.
   Remote ids marked dead (alock_table_remote_dead) stay so for the table's life.
   The liveness file must support OFD locks (/dev/shm does); without it dead local processes
   are not recognised. Its locks need one kernel: across the hosts of a pod, dead processes are
   recognised only in a table whose heap carries leases (section 3), within the lease table's
   bound. A process that forks shares its slot's byte lock with the child: open the
   table again in the child. A descriptor that gave up (a deadline passed) counts against ndesc
   until the lock passes over it: a remote one until a granter frees it, which needs the
   granter's link to it.

   8. DESIGN NOTES
   ---------------
   ALock's gain over a lock taken by RDMA for every key comes from local operations that never
   touch the NIC. It is largest where an RDMA operation on a local key (through loopback) costs
   about a network round trip, as on a NIC. Where loopback is far cheaper than the wire (Soft-RoCE
   between emulated hosts), a mostly-local mix is paced by its few remote operations, and ALock's
   remote path (a compare-and-swap with a READ behind it, then a compare-and-swap) costs about what
   the spin lock's does: the gain stays at fully local workloads.
*/
#ifndef ALOCK_H
#define ALOCK_H

/* The version: ALOCK_VERSION_MAJOR.MINOR.PATCH, and as a string (see CHANGES.md). */
#define ALOCK_VERSION_MAJOR 0
#define ALOCK_VERSION_MINOR 4
#define ALOCK_VERSION_PATCH 0
#define ALOCK_VERSION "0.4.0"

/* The implementation needs GNU extensions of glibc (OFD locks): define the implementation in a
   file that includes alock.h first, or compile with -D_GNU_SOURCE. */
#if defined(ALOCK_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include "shmheap.h"
#include <stddef.h>
#include <stdint.h>

#ifdef ALOCK_STATIC
#define ALOCK_API static __attribute__((unused))
#else
#define ALOCK_API extern
#endif

#if !defined(ALOCK_NO_RDMA) && defined(__has_include)
#if !__has_include(<infiniband/verbs.h>)
#define ALOCK_NO_RDMA 1
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ALOCK_DEFAULT_BUDGET 8        /* hand-offs within a cohort before re-arbitration */
#define ALOCK_DEFAULT_SLOTS 64        /* local process handles at once */
#define ALOCK_DEFAULT_NDESC 64        /* locks one local process holds or waits for at once */
#define ALOCK_DEFAULT_CHECK_MS 10     /* a waiter looks at its predecessor's liveness this often */
#define ALOCK_DEFAULT_OP_TIMEOUT_MS 5000 /* one RDMA operation, before ALOCK_E_PEER */
#define ALOCK_DEFAULT_DEAD_CHECK_MS 100 /* a remote waiter READs the dead map this often */
#define ALOCK_MAX_SLOTS 4096
#define ALOCK_LOCAL 1                 /* victim values */
#define ALOCK_REMOTE 2

#define ALOCK_OWNERDEAD 1 /* held; the previous holder died holding it (see section 3) */

#define ALOCK_ERRORS(X)                                                                            \
    X(ALOCK_E_INVAL, -3000, "invalid argument to an alock function")                               \
    X(ALOCK_E_BUSY, -2999, "the lock is held (trylock)")                                           \
    X(ALOCK_E_TIMEDOUT, -2998, "the deadline passed before the lock was taken")                    \
    X(ALOCK_E_NOTSUP, -2997, "not supported: built without the remote cohort (ALOCK_NO_RDMA)")     \
    X(ALOCK_E_NODESC, -2996, "this handle holds or waits for ndesc locks already")                 \
    X(ALOCK_E_NOSLOT, -2995, "the lock table has no free process slot")                            \
    X(ALOCK_E_BADTABLE, -2994, "not an alock table (magic, version or sizes)")                     \
    X(ALOCK_E_PEER, -2993, "an RDMA operation failed: the peer or the connection is gone")         \
    X(ALOCK_E_NOTFOUND, -2992, "no lock table of that name")                                       \
    X(ALOCK_E_EXISTS, -2991, "the heap has a root of that name already (a table or another)")      \
    X(ALOCK_E_BADHANDLE, -2990, "not an open alock handle (closed or destroyed already)")          \
    X(ALOCK_E_FORKED, -2989, "this alock handle was made before fork(): not usable in the child") \
    X(ALOCK_E_FENCED, -2988, "this process's lease was recovered (it stalled past the bound): "    \
                             "the table handle is fenced; close it, take a new lease, reopen")
#define ALOCK__ERROR_ENUM(name, value, text) name = value,
enum { ALOCK_ERRORS(ALOCK__ERROR_ENUM) };
#undef ALOCK__ERROR_ENUM

enum { ALOCK_LOG_ERROR = 0, ALOCK_LOG_WARN = 1, ALOCK_LOG_INFO = 2, ALOCK_LOG_DEBUG = 3 };
typedef void (*alock_log_fn)(int level, const char *msg, void *user);

/* Zero means default (section 1: filling it in C and C++). */
typedef struct alock_table_opts {
    uint32_t nlocks;      /* create: locks in the table (required, 1..2^24) */
    uint32_t budget;      /* create: ALOCK_DEFAULT_BUDGET */
    uint32_t slots;       /* create: ALOCK_DEFAULT_SLOTS local handles at once */
    uint32_t ndesc;       /* create: ALOCK_DEFAULT_NDESC descriptors per slot */
    unsigned check_ms;    /* ALOCK_DEFAULT_CHECK_MS */
    const char *live_path; /* create: the liveness file; NULL = /dev/shm/alock.<heap>.<name> */
    alock_log_fn log;     /* NULL = silent, or stderr when ALOCK_DEBUG is set */
    void *log_user;
} alock_table_opts;

typedef struct alock_table alock_table;

/* What a holder keeps between lock and unlock (caller's storage; no need to initialise). */
typedef struct alock_hold {
    alock_table *t;
    uint32_t idx;
    void *desc;
} alock_hold;

ALOCK_API const char *alock_strerror(int code);

/* The table: create in a shmheap under a root name, open it from other local processes.
   create fails with ALOCK_E_EXISTS when h has a root of that name already (a table, or anything
   else: it is never replaced); open of a root that is no table is ALOCK_E_BADTABLE. */
ALOCK_API int alock_table_create(shmheap *h, const char *name, const alock_table_opts *opts,
                                 alock_table **out);
ALOCK_API int alock_table_open(shmheap *h, const char *name, const alock_table_opts *opts,
                               alock_table **out);
ALOCK_API int alock_table_close(alock_table *t);
/* Remove table name from h: its memory, its root and its liveness file. No process may use it. */
ALOCK_API int alock_table_unlink(shmheap *h, const char *name);
ALOCK_API uint32_t alock_table_nlocks(const alock_table *t); /* 0 for NULL */
/* The lock lines: register [*addr, *addr + *len) for remote access (read, write, atomics) and
   give remote processes the address and rkey; lock i is the line at *addr + 64 * i, and the
   dead map (section 3) follows the nlocks lines (NULL and 0 for a NULL table). */
ALOCK_API void alock_table_lines(const alock_table *t, void **addr, size_t *len);

/* Local cohort. lock: 0 or ALOCK_OWNERDEAD when held, else an error. timeout: deadline_ns on
   CLOCK_MONOTONIC (0 = none), ALOCK_E_TIMEDOUT after it. trylock: ALOCK_E_BUSY if not free. */
ALOCK_API int alock_lock(alock_table *t, uint32_t idx, alock_hold *hold);
ALOCK_API int alock_lock_timeout(alock_table *t, uint32_t idx, uint64_t deadline_ns,
                                 alock_hold *hold);
ALOCK_API int alock_trylock(alock_table *t, uint32_t idx, alock_hold *hold);
ALOCK_API int alock_unlock(alock_hold *hold);
/* Release what dead local processes hold or were handed; returns how many it released. */
ALOCK_API int alock_recover(alock_table *t);

/* Remote cohort. An alock_link is how this process reaches one peer's memory: synchronous
   operations on remote addresses (atomics on 8-byte aligned words), each returning 0 or a
   negative code; alock reports any failure as ALOCK_E_PEER. Any connection library can provide
   them (krconn_cas/_faa/_read/_write and krconn_wait, for one); alock_verbs_link_create makes
   one from an RC queue pair. conn is handed back to every call. */
typedef struct alock_link {
    int (*cas)(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired, uint64_t *old);
    int (*faa)(void *conn, uint64_t raddr, uint64_t add, uint64_t *old); /* ALOCK_CHECK_RMW only */
    int (*read)(void *conn, uint64_t raddr, void *dst, uint32_t len);
    int (*write)(void *conn, uint64_t raddr, const void *src, uint32_t len);
    void *conn;
    /* optional (NULL: a cas, then a read): a compare-and-swap at raddr, then a READ of len
       bytes at read_addr that the peer performs after it (one RC queue pair executes them in
       order), both in one round trip. The links of alock_verbs_link_create and
       alock_krconn_link_create have it. */
    int (*cas_read)(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired, uint64_t *old,
                    uint64_t read_addr, void *dst, uint32_t len);
} alock_link;

#define ALOCK_REMOTE_MEM(ndesc) ((size_t)(ndesc) * 64) /* bytes of a remote process's descriptors */

typedef struct alock_remote_opts {
    uint16_t id;           /* this process's id among the table's remote processes, 1..65535 */
    uint64_t lines_addr;   /* the table's lock lines (alock_table_lines at its node) */
    uint32_t nlocks;
    uint32_t budget;       /* the table's budget; 0 = ALOCK_DEFAULT_BUDGET */
    alock_link home;       /* reaches the table's node (lines_addr) */
    void *descs;           /* ALOCK_REMOTE_MEM(ndesc) bytes, 64-byte aligned, which the caller
                              registered for remote read and write: other remote processes'
                              links to us reach it (give them its address and key) */
    uint32_t ndesc;        /* locks held or waited for at once (required) */
    alock_log_fn log;
    void *log_user;
    /* optional: called (on the thread that locks or unlocks) when alock needs the link to
       remote process id and has none; fill *link and return 0 (alock keeps it as if given to
       alock_remote_set_peer), or return a negative code (the operation fails ALOCK_E_PEER).
       NULL: every link comes from alock_remote_set_peer. */
    int (*peer_link)(uint16_t id, alock_link *link, void *user);
    void *peer_user;
} alock_remote_opts;

typedef struct alock_remote alock_remote;
typedef struct alock_rhold {
    alock_remote *r;
    uint32_t idx;
    void *desc;
} alock_rhold;

/* create READs this id's bit of the dead map through home: ALOCK_E_INVAL for a dead id,
   ALOCK_E_PEER if the READ fails. */
ALOCK_API int alock_remote_create(const alock_remote_opts *opts, alock_remote **out);
ALOCK_API int alock_remote_destroy(alock_remote *r);
/* How to reach remote process id's descriptors (link needs cas, read and write). For our own
   id: a loopback link to our own descriptors, which alock_remote_lock_timeout needs. */
ALOCK_API int alock_remote_set_peer(alock_remote *r, uint16_t id, const alock_link *link);
/* 0, or ALOCK_OWNERDEAD when held after taking over from a dead process (section 3), else an
   error. */
ALOCK_API int alock_remote_lock(alock_remote *r, uint32_t idx, alock_rhold *hold);
/* As alock_remote_lock, with a deadline (CLOCK_MONOTONIC ns, 0 = none): ALOCK_E_TIMEDOUT after
   it. Needs a link to this process's own descriptors: alock_remote_set_peer(r, own id, link),
   a loopback connection (ALOCK_E_INVAL without one, when deadline_ns is not 0). */
ALOCK_API int alock_remote_lock_timeout(alock_remote *r, uint32_t idx, uint64_t deadline_ns,
                                        alock_rhold *hold);
ALOCK_API int alock_remote_trylock(alock_remote *r, uint32_t idx, alock_rhold *hold);
ALOCK_API int alock_remote_unlock(alock_rhold *hold);
/* Empty lock idx's remote queue (compare-and-swap of its tail from what it names to 0). Only
   when no remote process of that queue lives: see 3, "Dead holders and waiters". */
ALOCK_API int alock_remote_reset(alock_remote *r, uint32_t idx);

/* At the table's node: remote process id has died (its connection failed, and it cannot reach
   the lock lines any more: see 3, "Dead holders and waiters"). Marks id dead in the table's
   dead map (remote waiters behind it read it) and releases every lock whose remote queue ends
   in a descriptor of id that held the remote head. loop: a link to the table's own lock lines
   (a loopback connection to what alock_table_lines names; cas needed, and read and faa with
   ALOCK_CHECK_RMW): the remote tail changes only by RDMA compare-and-swap. Returns how many
   locks it released (0 or more), ALOCK_E_INVAL, or ALOCK_E_PEER when a loopback operation
   failed. Calling it again for the same id is harmless. */
ALOCK_API int alock_table_remote_dead(alock_table *t, const alock_link *loop, uint16_t id);

/* An alock_link over one RC queue pair (libibverbs): qp's send completions land in cq, which
   the link polls (nothing else may use cq meanwhile); rkey is the peer memory's key. It
   registers a little scratch memory in qp's protection domain. timeout_ms bounds each
   operation (0 = ALOCK_DEFAULT_OP_TIMEOUT_MS). */
struct ibv_qp;
struct ibv_cq;
ALOCK_API int alock_verbs_link_create(struct ibv_qp *qp, struct ibv_cq *cq, uint32_t rkey,
                                      unsigned timeout_ms, alock_link *out);
ALOCK_API int alock_verbs_link_destroy(alock_link *link);

#ifdef __cplusplus
}
#endif
#endif /* ALOCK_H */

/* With krconn.h included before alock.h: an alock_link over one krconn connection c of context
   ctx. Each operation posts one work request on c (krconn_cas, _faa, _read, _write, signalled)
   and takes its completion with krconn_wait, so nothing else may post or poll on c while the
   link is in use (use a connection of its own, or KRCONN_CONNECT_NO_VIRTUAL for a physical one;
   virtual connections to one peer are fine, their completions are kept apart). READ and WRITE
   go through the link's 128 bytes of registered scratch memory (alock moves at most a line).
   Returns 0, ALOCK_E_INVAL, -ENOMEM or krconn's code from krconn_reg (KRCONN_E_NOTSUP without
   RDMA). Free with alock_krconn_link_destroy before disconnecting c. */
#if defined(KRCONN_H) && !defined(ALOCK_KRCONN_DECLARED)
#define ALOCK_KRCONN_DECLARED
#ifdef __cplusplus
extern "C" {
#endif
ALOCK_API int alock_krconn_link_create(krconn_ctx *ctx, krconn *c, uint32_t rkey,
                                       unsigned timeout_ms, alock_link *out);
ALOCK_API int alock_krconn_link_destroy(alock_link *link);
#ifdef __cplusplus
}
#endif
#endif

/* >>implementation - includes, options, constants ---------------------------------------------- */
#if defined(ALOCK_IMPLEMENTATION) && !defined(ALOCK_IMPLEMENTATION_ONCE)
#define ALOCK_IMPLEMENTATION_ONCE

#if !defined(SHMHEAP_IMPLEMENTATION_ONCE) && !defined(ALOCK_NO_SHMHEAP_IMPLEMENTATION)
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#endif
#include "impl/platform.h"
#include "impl/handle.h"
#include "impl/podlease.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#ifndef ALOCK_NO_RDMA
#include "impl/verbs.h"
#endif

#ifndef ALOCK_ASSERT
#include <assert.h>
#define ALOCK_ASSERT(x) assert(x)
#endif
#if defined(ALOCK_MALLOC) != defined(ALOCK_FREE)
#error "alock.h: define both ALOCK_MALLOC and ALOCK_FREE, or neither"
#endif
#ifndef ALOCK_MALLOC
#define ALOCK_MALLOC(size) malloc(size)
#define ALOCK_FREE(p) free(p)
#endif

/* >>layout - the table in shared memory, handles ----------------------------------------------- */

#define ALOCK__MAGIC 0x314b434f4c41ull /* "ALOCK1" */
#define ALOCK__VERSION 3u
#define ALOCK__DEAD_MAP 8192   /* bytes of the dead map: a bit per remote id, after the lines */
#define ALOCK__RHEAD 1ull      /* r_tail's head bit: its descriptor entered an empty queue */
#define ALOCK__WAIT (-1)       /* a descriptor's budget while its owner waits */
#define ALOCK__ABANDONED (-2)  /* its owner's deadline passed: whoever grants it passes on */
#define ALOCK__RECLAIMED (-3)  /* a dead owner's grant was taken over */
#define ALOCK__RELEASED (-4)   /* (leases) its owner releases it: no take-over any more */
#define ALOCK__LIVE_OFF ((off_t)1 << 40)

/* One lock: the paper's layout. @48 and @56 hold ALOCK_CHECK_RMW's marks: each is changed by one
   kind of read-modify-write only (RDMA fetch-and-add, CPU fetch-or). */
typedef struct alock__line {
    uint64_t r_tail;      /* remote descriptor: id << 48 | address (| ALOCK__RHEAD); 0 = empty */
    uint64_t r_head;      /* the remote descriptor the lock was last handed to; RDMA CAS only */
    uint64_t l_tail;      /* local descriptor: its address (the heap maps alike everywhere) */
    uint64_t pad1;
    uint64_t victim;      /* ALOCK_LOCAL or ALOCK_REMOTE */
    uint64_t pad2;
    uint64_t rdma_marks;  /* ALOCK_CHECK_RMW: byte k > 0 once word k saw an RDMA RMW */
    uint64_t cpu_marks;   /* ALOCK_CHECK_RMW: bit k = a CPU read-modify-write of word k */
} alock__line;

/* A waiter's descriptor. Local ones live in the table (slot s owns ndesc of them). */
typedef struct alock__desc {
    /* ALOCK__WAIT, or the budget it was handed (>= 0), or _ABANDONED/_RECLAIMED */
    int64_t budget;
    uint64_t lock;        /* local: lock index + 1 while linked in a queue, 0 = free */
    uint64_t held;        /* local: 1 inside the critical section (tells ALOCK_OWNERDEAD);
                             remote (its owner's only): 1 when it entered an empty queue */
    uint64_t pad0;
    /* the successor's descriptor (local: address; remote: id << 48 | address) */
    uint64_t next;
    uint64_t pad1[3];
} alock__desc;

typedef struct alock__slot {
    uint64_t owner;       /* pid of the handle's process (a hint for logs); 0 = never used */
    uint64_t tag;         /* (leases) rcp__lease_tag of the handle's process; 0 = free */
    uint64_t pad[6];
} alock__slot;

typedef struct alock__hdr {
    uint64_t magic;
    uint32_t version, ready;
    uint32_t nlocks, budget, slots, ndesc;
    uint64_t lines_off, slots_off, descs_off, total; /* the dead map ends the lines */
    uint32_t leases, pad; /* 1: local liveness by the leases of the heap's processes, no file */
    char live_path[184];
} alock__hdr;

RCP__STATIC_ASSERT(sizeof(alock__line) == 64, "lock line");
RCP__STATIC_ASSERT(offsetof(alock__line, l_tail) == 16 && offsetof(alock__line, victim) == 32,
                   "the paper's layout");
RCP__STATIC_ASSERT(sizeof(alock__desc) == 64 && offsetof(alock__desc, next) == 32, "descriptor");
RCP__STATIC_ASSERT(sizeof(alock__slot) == 64, "slot");
RCP__STATIC_ASSERT(sizeof(alock__hdr) == 256, "header");

struct alock_table {
    alock__hdr *hdr;
    alock__line *lines;
    alock__slot *slots;
    alock__desc *descs;
    uint32_t nlocks, budget, nslots, ndesc, slot;
    uint64_t check_ns;
    int live_fd;
    alock_log_fn log;
    void *log_user;
    uint64_t tag; /* leases: our lease's tag, in our slot */
    /* a table in a heap with a lease (hdr->leases): our lease, and what alock_recover has seen
       of every slot's lease (under seen_mu) */
    struct rcp__lease *lease;
    uint32_t fenced;
    pthread_mutex_t seen_mu;
    struct alock__watch *seen;
};

/* >>util - errors, logging, clocks ------------------------------------------------------------- */

#include "impl/errors.h"

ALOCK_API const char *alock_strerror(int code)
{
    switch (code) {
    case ALOCK_OWNERDEAD: return "held; the previous holder died holding it (the data may be "
                                 "half-updated)";
#define RCP__ERROR_CASE(name, value, text) case name: return text;
#include "impl/errors.h" /* the codes of every rpcool header included before this point */
#undef RCP__ERROR_CASE
    default: return rcp__errtext(code, RCP__ERR_DECLARED);
    }
}

/* The handle rule (ERRORS, impl/handle.h): 0 for a handle open in this process, else its code
   (NULL is no handle: ALOCK_E_BADHANDLE). */
static inline int alock__handle(const void *h)
{
    return h ? rcp__handle_code(h, ALOCK_E_BADHANDLE, ALOCK_E_FORKED) : ALOCK_E_BADHANDLE;
}
static inline int alock__handle_take(const void *h)
{
    return rcp__handle_take_code(h, ALOCK_E_BADHANDLE, ALOCK_E_FORKED);
}
static int alock__env_debug = -1;
static void alock__logf(alock_log_fn fn, void *user, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void alock__logf(alock_log_fn fn, void *user, int level, const char *fmt, ...)
{
    struct rcp__logger lg = rcp__logger_pick(fn, user, &alock__env_debug, "ALOCK_DEBUG", "alock");
    va_list ap;
    va_start(ap, fmt);
    rcp__logv(&lg, level, fmt, ap);
    va_end(ap);
}
#define ALOCK__LOG(t, level, ...) alock__logf((t)->log, (t)->log_user, (level), __VA_ARGS__)

/* ALOCK_CHECK_RMW: a CPU read-modify-write of word k of a line (k = byte offset / 8) */
static inline void alock__cpu_rmw_mark(alock__line *L, unsigned k)
{
#ifdef ALOCK_CHECK_RMW
    ALOCK_ASSERT(((rcp__load(&L->rdma_marks) >> (8 * k)) & 0xff) == 0 &&
                 "a word of the lock line saw both CPU and RDMA read-modify-write");
    __atomic_fetch_or(&L->cpu_marks, 1ull << k, __ATOMIC_RELAXED);
#else
    (void)L; (void)k;
#endif
}

/* One step of a wait: spin a little, then let the CPU go (the holder or the NIC's work may be
   waiting for it: Soft-RoCE runs on the same CPUs). */
static inline void alock__pause(unsigned *k)
{
    if ((++*k & 127) == 0) sched_yield();
    else rcp__cpu_relax();
}

/* >>liveness - liveness: byte locks on the table file ------------------------------------------ */

/* fcntl(cmd) on slot s's byte of the liveness file, as lock type type; fl gets the answer */
static int alock__slot_fcntl(alock_table *t, uint32_t s, int cmd, short type, struct flock *fl)
{
    memset(fl, 0, sizeof *fl);
    fl->l_type = type;
    fl->l_whence = SEEK_SET;
    fl->l_start = ALOCK__LIVE_OFF + (off_t)s;
    fl->l_len = 1;
    return fcntl(t->live_fd, cmd, fl);
}

/* 1 if slot s's byte is locked (its process lives), 0 if not, -1 unknown */
static int alock__slot_live(alock_table *t, uint32_t s)
{
    if (t->live_fd < 0) return -1;
    if (s == t->slot) return 1;
    struct flock fl;
    if (alock__slot_fcntl(t, s, F_OFD_GETLK, F_WRLCK, &fl)) return -1;
    return fl.l_type != F_UNLCK;
}

/* Leases: what one observer has seen of one slot's lease (its own clock's times). */
struct alock__watch {
    uint64_t tag;
    struct rcp__lease_seen seen;
};

/* Leases: 1 if the process whose lease tag is tag is dead to us: no tag (its handle was closed),
   a lease no longer held with that epoch (recovered or released), or one that w has watched
   unchanged for longer than the lease table's bound, which we then recover (its epoch moves on,
   so that its holder is fenced if it was only stalled). 0 if it lives, as far as w has seen. */
static int alock__tag_dead(alock_table *t, uint64_t tag, struct alock__watch *w)
{
    if (!tag || !rcp__lease_tag_alive(t->lease, tag)) return 1;
    if (w->tag != tag) {
        w->tag = tag;
        memset(&w->seen, 0, sizeof w->seen);
    }
    uint32_t ls = (uint32_t)(tag & 0xffffu) - 1u;
    if (rcp__lease_judge(t->lease, ls, &w->seen) != RCP__LEASE_LAPSED) return 0;
    if (rcp__lease_recover(t->lease, ls, &w->seen) == 0)
        ALOCK__LOG(t, ALOCK_LOG_INFO, "recovered the lapsed lease of lease slot %u", ls);
    return !rcp__lease_tag_alive(t->lease, tag);
}

/* 1 if slot s's process is dead (w: leases only, what we have seen of its lease), else 0 */
static int alock__slot_dead(alock_table *t, uint32_t s, struct alock__watch *w)
{
    if (s == t->slot) return 0;
    if (t->lease) return alock__tag_dead(t, rcp__load(&t->slots[s].tag), w);
    return alock__slot_live(t, s) == 0;
}

/* Leases: 0 while this handle's lease and slot are ours, ALOCK_E_FENCED once the lease was
   recovered (it stalled past the bound), and from then on. Renews the lease when due. */
static int alock__fence(alock_table *t)
{
    if (!t->lease) return 0;
    if (RCP__UNLIKELY(rcp__load(&t->fenced))) return ALOCK_E_FENCED;
    if (RCP__LIKELY(rcp__lease_check(t->lease) == 0 &&
                    rcp__load(&t->slots[t->slot].tag) == t->tag))
        return 0;
    rcp__store(&t->fenced, 1u);
    ALOCK__LOG(t, ALOCK_LOG_WARN, "fenced: our lease was recovered by another process");
    return ALOCK_E_FENCED;
}

static inline uint32_t alock__desc_slot(const alock_table *t, const alock__desc *d)
{
    return (uint32_t)((size_t)(d - t->descs) / t->ndesc);
}

static inline int alock__desc_ok(const alock_table *t, uint64_t v)
{
    uintptr_t lo = (uintptr_t)t->descs,
              hi = lo + (size_t)t->nslots * t->ndesc * sizeof(alock__desc);
    return v >= lo && v < hi && (v - lo) % sizeof(alock__desc) == 0;
}

/* >>table - tables: create, open, close, unlink ------------------------------------------------ */

static int alock__live_open(alock_table *t, int create)
{
    t->live_fd = open(t->hdr->live_path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (t->live_fd < 0) {
        ALOCK__LOG(t, ALOCK_LOG_WARN, "liveness file %s: %s (dead processes will not be "
                   "recognised)",
                   t->hdr->live_path, strerror(errno));
    }
    return 0;
}

/* Does slot s still have descriptors in some queue (a dead process's, not yet released)? */
static int alock__slot_busy(alock_table *t, uint32_t s)
{
    for (uint32_t i = 0; i < t->ndesc; i++)
        if (rcp__load(&t->descs[(size_t)s * t->ndesc + i].lock)) return 1;
    return 0;
}

/* Leases: take a slot that is free, or whose lease is no longer held with its tag (recovered or
   released), once its descriptors are all free: compare-and-swap of its tag to ours. */
static int alock__claim_slot_leased(alock_table *t)
{
    for (uint32_t s = 0; s < t->nslots; s++) {
        uint64_t tag = rcp__load(&t->slots[s].tag);
        if ((tag && rcp__lease_tag_alive(t->lease, tag)) || alock__slot_busy(t, s)) continue;
        if (!rcp__cas(&t->slots[s].tag, &tag, t->tag)) continue;
        if (alock__slot_busy(t, s)) { /* a queued descriptor of its dead owner: not for us */
            uint64_t mine = t->tag;
            rcp__cas(&t->slots[s].tag, &mine, tag);
            continue;
        }
        t->slot = s;
        rcp__store(&t->slots[s].owner, (uint64_t)getpid());
        return 0;
    }
    return ALOCK_E_NOSLOT;
}

/* Take a slot: the first whose byte nobody holds and whose descriptors are all free. */
static int alock__claim_slot(alock_table *t)
{
    if (t->lease) return alock__claim_slot_leased(t);
    for (uint32_t s = 0; s < t->nslots; s++) {
        if (t->live_fd >= 0) {
            struct flock fl;
            if (alock__slot_fcntl(t, s, F_OFD_SETLK, F_WRLCK, &fl)) continue;
            if (alock__slot_busy(t, s)) { /* a dead process's descriptors are still queued */
                t->slot = s;
                int n = alock_recover(t);
                (void)n;
                if (alock__slot_busy(t, s)) {
                    alock__slot_fcntl(t, s, F_OFD_SETLK, F_UNLCK, &fl);
                    continue;
                }
            }
            t->slot = s;
            rcp__store(&t->slots[s].owner, (uint64_t)getpid());
            return 0;
        }
        /* no liveness file: slots are claimed by pid, never reclaimed from the dead */
        uint64_t o = 0;
        if (rcp__cas(&t->slots[s].owner, &o, (uint64_t)getpid())) {
            t->slot = s;
            return 0;
        }
    }
    return ALOCK_E_NOSLOT;
}

static int alock__attach(shmheap *h, alock__hdr *H, const alock_table_opts *o, int create,
                         alock_table **out)
{
    alock_table *t = (alock_table *)ALOCK_MALLOC(sizeof *t);
    if (!t) return -ENOMEM;
    memset(t, 0, sizeof *t);
    char *base = (char *)H;
    t->hdr = H;
    t->nlocks = H->nlocks;
    t->budget = H->budget;
    t->nslots = H->slots;
    t->ndesc = H->ndesc;
    t->lines = (alock__line *)(void *)(base + H->lines_off);
    t->slots = (alock__slot *)(void *)(base + H->slots_off);
    t->descs = (alock__desc *)(void *)(base + H->descs_off);
    t->check_ns = (uint64_t)(o && o->check_ms ? o->check_ms : ALOCK_DEFAULT_CHECK_MS) * 1000000ull;
    t->log = o ? o->log : NULL;
    t->log_user = o ? o->log_user : NULL;
    t->slot = UINT32_MAX;
    t->live_fd = -1;
    if (!shmheap_contains(h, base, H->total)) {
        ALOCK_FREE(t);
        return ALOCK_E_BADTABLE;
    }
    int rc = 0;
    if (H->leases) { /* liveness by leases: no file, no byte lock */
        t->lease = shmheap__lease(h);
        t->tag = rcp__lease_tag(t->lease);
        if (!t->lease || !t->tag) rc = ALOCK_E_INVAL; /* the heap has no lease, or it holds none */
        else if (rcp__lease_check(t->lease)) rc = ALOCK_E_FENCED;
        else if (!(t->seen = (struct alock__watch *)ALOCK_MALLOC(t->nslots * sizeof *t->seen)))
            rc = -ENOMEM;
        if (rc) {
            ALOCK_FREE(t);
            return rc;
        }
        memset(t->seen, 0, t->nslots * sizeof *t->seen);
        pthread_mutex_init(&t->seen_mu, NULL);
    } else {
        alock__live_open(t, create);
    }
    rc = alock__claim_slot(t);
    if (!rc && (rc = rcp__handle_add(t)) && t->live_fd < 0) {
        if (t->lease) {
            uint64_t mine = t->tag;
            rcp__cas(&t->slots[t->slot].tag, &mine, (uint64_t)0);
        } else {
            rcp__store(&t->slots[t->slot].owner, (uint64_t)0);
        }
    }
    if (rc) {
        if (t->live_fd >= 0) close(t->live_fd);
        if (t->lease) {
            pthread_mutex_destroy(&t->seen_mu);
            ALOCK_FREE(t->seen);
        }
        ALOCK_FREE(t);
        return rc;
    }
    *out = t;
    return 0;
}

ALOCK_API int alock_table_create(shmheap *h, const char *name, const alock_table_opts *opts,
                                 alock_table **out)
{
    if (!h || !name || !out || !opts || !opts->nlocks || opts->nlocks > (1u << 24))
        return ALOCK_E_INVAL;
    uint32_t slots = opts->slots ? opts->slots : ALOCK_DEFAULT_SLOTS;
    uint32_t ndesc = opts->ndesc ? opts->ndesc : ALOCK_DEFAULT_NDESC;
    if (slots > ALOCK_MAX_SLOTS || ndesc > 4096) return ALOCK_E_INVAL;
    struct rcp__lease *lease = shmheap__lease(h);
    if (lease && !rcp__lease_tag(lease)) return ALOCK_E_INVAL; /* a lease that holds no slot */
    if (lease && rcp__lease_check(lease)) return ALOCK_E_FENCED;
    if (shmheap_root_get(h, name)) return ALOCK_E_EXISTS; /* a table others may use, or not ours */
    size_t lines_off = 256, slots_off = lines_off + (size_t)opts->nlocks * 64 + ALOCK__DEAD_MAP,
           descs_off = slots_off + (size_t)slots * 64,
           total = descs_off + (size_t)slots * ndesc * 64;
    void *mem = NULL;
    int rc = shmheap_alloc(h, total, 64, &mem);
    if (rc) return rc;
    memset(mem, 0, total);
    alock__hdr *H = (alock__hdr *)mem;
    H->magic = ALOCK__MAGIC;
    H->version = ALOCK__VERSION;
    H->nlocks = opts->nlocks;
    H->budget = opts->budget ? opts->budget : ALOCK_DEFAULT_BUDGET;
    H->slots = slots;
    H->ndesc = ndesc;
    H->lines_off = lines_off, H->slots_off = slots_off, H->descs_off = descs_off; /* regions */
    H->total = total;
    if (lease) H->leases = 1; /* a heap with a lease: local liveness by leases */
    else if (opts->live_path) snprintf(H->live_path, sizeof H->live_path, "%s", opts->live_path);
    else snprintf(H->live_path, sizeof H->live_path, "/dev/shm/alock.%llx.%s",
                  (unsigned long long)(uintptr_t)shmheap_base(h), name);
    alock__line *L = (alock__line *)(void *)((char *)mem + lines_off);
    for (uint32_t i = 0; i < opts->nlocks; i++) L[i].victim = ALOCK_LOCAL;
    rcp__store(&H->ready, 1u);
    if ((rc = alock__attach(h, H, opts, 1, out))) {
        shmheap_free(h, mem);
        return rc;
    }
    if ((rc = shmheap_root_set(h, name, mem))) {
        alock_table_close(*out);
        shmheap_free(h, mem);
        return rc;
    }
    return 0;
}

ALOCK_API int alock_table_open(shmheap *h, const char *name, const alock_table_opts *opts,
                               alock_table **out)
{
    if (!h || !name || !out) return ALOCK_E_INVAL;
    alock__hdr *H = (alock__hdr *)shmheap_root_get(h, name);
    if (!H) return ALOCK_E_NOTFOUND;
    if (!shmheap_contains(h, H, sizeof *H) || H->magic != ALOCK__MAGIC ||
        H->version != ALOCK__VERSION || !rcp__load(&H->ready))
        return ALOCK_E_BADTABLE;
    if (!H->nlocks || H->nlocks > (1u << 24) || !H->slots || H->slots > ALOCK_MAX_SLOTS ||
        !H->ndesc || H->ndesc > 4096 || H->lines_off != 256 ||
        H->slots_off != 256 + (uint64_t)H->nlocks * 64 + ALOCK__DEAD_MAP ||
        H->descs_off != H->slots_off + (uint64_t)H->slots * 64 ||
        H->total != H->descs_off + (uint64_t)H->slots * H->ndesc * 64 || !H->budget ||
        H->leases > 1 || memchr(H->live_path, 0, sizeof H->live_path) == NULL)
        return ALOCK_E_BADTABLE;
    return alock__attach(h, H, opts, 0, out);
}

ALOCK_API int alock_table_close(alock_table *t)
{
    if (!t) return 0;
    int rc = alock__handle_take(t);
    if (rc) return rc;
    if (t->live_fd >= 0) {
        close(t->live_fd); /* drops our slot's byte lock */
    } else if (t->lease) { /* our slot is free again, unless it was taken from us (fenced) */
        uint64_t mine = t->tag;
        rcp__cas(&t->slots[t->slot].tag, &mine, (uint64_t)0);
        pthread_mutex_destroy(&t->seen_mu);
        ALOCK_FREE(t->seen);
    } else if (t->slot != UINT32_MAX) {
        rcp__store(&t->slots[t->slot].owner, (uint64_t)0);
    }
    ALOCK_FREE(t);
    return 0;
}

ALOCK_API int alock_table_unlink(shmheap *h, const char *name)
{
    if (!h || !name) return ALOCK_E_INVAL;
    alock__hdr *H = (alock__hdr *)shmheap_root_get(h, name);
    if (!H) return ALOCK_E_NOTFOUND;
    if (!shmheap_contains(h, H, sizeof *H) || H->magic != ALOCK__MAGIC ||
        memchr(H->live_path, 0, sizeof H->live_path) == NULL)
        return ALOCK_E_BADTABLE;
    char live[sizeof H->live_path];
    memcpy(live, H->live_path, sizeof live);
    rcp__store(&H->magic, (uint64_t)0);
    int rc = shmheap_root_set(h, name, NULL);
    if (!rc) rc = shmheap_free(h, H);
    if (live[0] && unlink(live) && !rc && errno != ENOENT) rc = -errno; /* leases: no file */
    return rc;
}

ALOCK_API uint32_t alock_table_nlocks(const alock_table *t)
{
    if (t && alock__handle(t)) {
        errno = EBADF;
        return 0;
    }
    return t ? t->nlocks : 0;
}

ALOCK_API void alock_table_lines(const alock_table *t, void **addr, size_t *len)
{
    if (addr) *addr = t ? t->lines : NULL;
    if (len) *len = t ? (size_t)t->nlocks * sizeof(alock__line) + ALOCK__DEAD_MAP : 0;
}

/* >>local - the local cohort ------------------------------------------------------------------- */

static alock__desc *alock__desc_get(alock_table *t, uint32_t idx)
{
    alock__desc *d = t->descs + (size_t)t->slot * t->ndesc;
    for (uint32_t i = 0; i < t->ndesc; i++) {
        uint64_t z = 0;
        if (rcp__load_relaxed(&d[i].lock) == 0 && rcp__cas(&d[i].lock, &z, (uint64_t)idx + 1)) {
            rcp__store_relaxed(&d[i].held, (uint64_t)0);
            rcp__store_relaxed(&d[i].next, (uint64_t)0);
            rcp__store_relaxed(&d[i].budget, (int64_t)ALOCK__WAIT);
            return &d[i];
        }
    }
    return NULL;
}

static inline void alock__desc_put(alock__desc *d) { rcp__store(&d->lock, (uint64_t)0); }

/* Hand the lock (budget b) to successor s of a releasing holder: if s abandoned its wait, pass
   on for it. Returns with the lock handed on or the local queue empty. */
static void alock__grant(alock_table *t, alock__line *L, alock__desc *s, int64_t b)
{
    for (;;) {
        int64_t w = rcp__load(&s->budget);
        if (w == ALOCK__WAIT) {
            if (__atomic_compare_exchange_n(&s->budget, &w, b, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return;
            continue;
        }
        if (w != ALOCK__ABANDONED) return; /* handed the lock already: a scribbled queue */
        /* s gave up: release for it */
        uint64_t n = rcp__load(&s->next), sv = (uint64_t)(uintptr_t)s;
        if (!n) {
            alock__cpu_rmw_mark(L, 2);
            if (rcp__cas(&L->l_tail, &sv, (uint64_t)0)) {
                alock__desc_put(s);
                return;
            }
            unsigned k = 0;
            while (!(n = rcp__load(&s->next))) alock__pause(&k);
        }
        alock__desc_put(s);
        if (!alock__desc_ok(t, n)) return; /* a scribbled queue: nothing sane to do */
        s = (alock__desc *)(uintptr_t)n;
    }
}

/* Release d's place at the head of the local queue without having entered (trylock failure,
   timeout as leader): the successor, if any, re-arbitrates. */
static void alock__leave_head(alock_table *t, alock__line *L, alock__desc *d)
{
    uint64_t dv = (uint64_t)(uintptr_t)d, n;
    if (!rcp__load(&d->next)) {
        alock__cpu_rmw_mark(L, 2);
        if (rcp__cas(&L->l_tail, &dv, (uint64_t)0)) return;
        unsigned k = 0;
        while (!(n = rcp__load(&d->next))) alock__pause(&k);
    }
    n = rcp__load(&d->next);
    if (alock__desc_ok(t, n)) alock__grant(t, L, (alock__desc *)(uintptr_t)n, 0);
}

/* Our descriptor d holds the lock, or heads its queue: we release it. With leases, first a
   compare-and-swap of its budget to ALOCK__RELEASED, so that nobody takes it over from us from
   then on, and none of our hand-offs crosses a take-over: ALOCK_E_FENCED if it was taken over
   already (we were judged dead: stalled past our lease). *b gets its budget. */
static int alock__claim_release(alock_table *t, alock__desc *d, int64_t *b)
{
    *b = rcp__load(&d->budget);
    if (!t->lease) return 0;
    if (*b < 0 || !rcp__cas(&d->budget, b, (int64_t)ALOCK__RELEASED)) {
        rcp__store(&t->fenced, 1u);
        return ALOCK_E_FENCED;
    }
    return 0;
}

/* Peterson as the local leader. 0 when entered; ALOCK_E_TIMEDOUT / _BUSY (try) otherwise. */
static int alock__peterson_local(alock__line *L, uint64_t deadline, int try_only)
{
    /* Our flag (l_tail) is up: the exchange or compare-and-swap that raised it is a full
       barrier. If the remote flag is down now, a remote leader raises it later, then sees ours
       and waits for victim: we may enter without writing victim (tests/alock.pml checks it). */
    if (__atomic_load_n(&L->r_tail, __ATOMIC_SEQ_CST) == 0) return 0;
    __atomic_store_n(&L->victim, (uint64_t)ALOCK_LOCAL, __ATOMIC_SEQ_CST); /* a full barrier */
    for (unsigned k = 0;; k++) {
        uint64_t rt = __atomic_load_n(&L->r_tail, __ATOMIC_SEQ_CST);
        uint64_t v = __atomic_load_n(&L->victim, __ATOMIC_SEQ_CST);
        if (rt == 0 || v != ALOCK_LOCAL) return 0;
        if (try_only) return ALOCK_E_BUSY;
        if ((k & 15) == 15) { /* the remote cohort takes microseconds: let the CPU go early */
            if (deadline && rcp__now_ns() >= deadline) return ALOCK_E_TIMEDOUT;
            sched_yield();
        } else {
            rcp__cpu_relax();
        }
    }
}

/* Take over from pred, which is dead and was handed the lock. 1 if we did (the lock is ours,
   to re-arbitrate), 0 if someone else took over (and will hand it to us), or if pred released
   it itself (leases: ALOCK__RELEASED; it hands it to us). *ownerdead is set if pred had entered
   its critical section. */
static int alock__take_over(alock__desc *pred, int *ownerdead)
{
    int64_t b = rcp__load(&pred->budget);
    if (b < 0) return 0;
    if (!__atomic_compare_exchange_n(&pred->budget, &b, (int64_t)ALOCK__RECLAIMED, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    *ownerdead = rcp__load(&pred->held) != 0;
    alock__desc_put(pred);
    return 1;
}

static int alock__lock(alock_table *t, uint32_t idx, uint64_t deadline, int try_only,
                       alock_hold *hold)
{
    if (!t || !hold) return ALOCK_E_INVAL;
    int hk = alock__handle(t);
    if (RCP__UNLIKELY(hk)) return hk;
    if (idx >= t->nlocks) return ALOCK_E_INVAL;
    if (t->lease && (hk = alock__fence(t))) return hk;
    alock__line *L = &t->lines[idx];
    if (try_only && rcp__load(&L->l_tail)) return ALOCK_E_BUSY;
    alock__desc *d = alock__desc_get(t, idx);
    if (!d) return ALOCK_E_NODESC;
    uint64_t dv = (uint64_t)(uintptr_t)d, pred;
    int64_t b = ALOCK__WAIT, mine = ALOCK__WAIT; /* mine: our budget word, as we left it */
    int ownerdead = 0, took = 0, rc;
    alock__cpu_rmw_mark(L, 2);
    if (try_only) {
        pred = 0;
        if (!rcp__cas(&L->l_tail, &pred, dv)) {
            alock__desc_put(d);
            return ALOCK_E_BUSY;
        }
    } else {
        pred = rcp__exchange(&L->l_tail, dv);
    }
    if (pred) {
        alock__desc *p = alock__desc_ok(t, pred) ? (alock__desc *)(uintptr_t)pred : NULL;
        if (p) rcp__store(&p->next, dv);
        uint64_t next_check = rcp__now_ns() + t->check_ns;
        struct alock__watch w;
        memset(&w, 0, sizeof w);
        for (unsigned k = 0;; k++) {
            b = rcp__load(&d->budget);
            if (b != ALOCK__WAIT) break;
            if ((k & 255) != 255) {
                rcp__cpu_relax();
                continue;
            }
            uint64_t now = rcp__now_ns();
            if (deadline && now >= deadline) {
                int64_t x = ALOCK__WAIT;
                if (__atomic_compare_exchange_n(&d->budget, &x, (int64_t)ALOCK__ABANDONED, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                    /* d stays linked: the granter passes on and frees it */
                    return ALOCK_E_TIMEDOUT;
                continue;                    /* granted meanwhile */
            }
            if (now >= next_check) {
                next_check = now + t->check_ns;
                if (t->lease && alock__fence(t)) {
                    /* we stalled past our lease: leave as a timeout does (if the lock reached
                       us meanwhile, the others take it over from us, as from the dead) */
                    int64_t x = ALOCK__WAIT;
                    __atomic_compare_exchange_n(&d->budget, &x, (int64_t)ALOCK__ABANDONED, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
                    return ALOCK_E_FENCED;
                }
                if (p && alock__slot_dead(t, alock__desc_slot(t, p), &w) &&
                    rcp__load(&d->budget) == ALOCK__WAIT && alock__take_over(p, &ownerdead)) {
                    ALOCK__LOG(t, ALOCK_LOG_INFO,
                               "lock %u: took over from a dead process (slot %u)%s", idx,
                               alock__desc_slot(t, p), ownerdead ? ", which held it" : "");
                    b = 0;
                    took = 1; /* our budget word still says ALOCK__WAIT */
                    break;
                }
            }
            sched_yield();
        }
        if (b < 0) { /* leases: the lock reached us and was taken over: we were judged dead */
            rcp__store(&t->fenced, 1u);
            return ALOCK_E_FENCED;
        }
        if (!took) mine = b;
        if (b > 0) goto held;
    }
    if (!t->lease) {
        rcp__store_relaxed(&d->budget, (int64_t)t->budget);
    } else if (!rcp__cas(&d->budget, &mine, (int64_t)t->budget) || (rc = alock__fence(t))) {
        /* taken over from us, or our lease was: the lock stays with d until the others take
           it over, as from a dead process */
        rcp__store(&t->fenced, 1u);
        return ALOCK_E_FENCED;
    }
    rc = alock__peterson_local(L, deadline, try_only);
    if (rc) {
        int64_t ob;
        if (alock__claim_release(t, d, &ob)) return ALOCK_E_FENCED;
        alock__leave_head(t, L, d);
        alock__desc_put(d);
        return rc;
    }
held:
    if (t->lease && (rc = alock__fence(t))) return rc; /* the others take it over from us */
    rcp__store(&d->held, (uint64_t)1);
    hold->t = t;
    hold->idx = idx;
    hold->desc = d;
    return ownerdead ? ALOCK_OWNERDEAD : 0;
}

ALOCK_API int alock_lock(alock_table *t, uint32_t idx, alock_hold *hold)
{
    return alock__lock(t, idx, 0, 0, hold);
}

ALOCK_API int alock_lock_timeout(alock_table *t, uint32_t idx, uint64_t deadline_ns,
                                 alock_hold *hold)
{
    return alock__lock(t, idx, deadline_ns, 0, hold);
}

ALOCK_API int alock_trylock(alock_table *t, uint32_t idx, alock_hold *hold)
{
    return alock__lock(t, idx, 0, 1, hold);
}

ALOCK_API int alock_unlock(alock_hold *hold)
{
    if (!hold || !hold->t || !hold->desc) return ALOCK_E_INVAL;
    int hk = alock__handle(hold->t);
    if (RCP__UNLIKELY(hk)) return hk;
    alock_table *t = hold->t;
    alock__line *L = &t->lines[hold->idx];
    alock__desc *d = (alock__desc *)hold->desc;
    uint64_t dv = (uint64_t)(uintptr_t)d, n;
    int64_t b;
    hold->desc = NULL;
    /* leases: the others took the lock over from us if we stalled past our lease */
    if (t->lease && (hk = alock__fence(t))) return hk;
    if ((hk = alock__claim_release(t, d, &b))) return hk;
    rcp__store(&d->held, (uint64_t)0);
    if (!(n = rcp__load(&d->next))) {
        alock__cpu_rmw_mark(L, 2);
        if (rcp__cas(&L->l_tail, &dv, (uint64_t)0)) {
            alock__desc_put(d);
            return 0;
        }
        unsigned k = 0;
        while (!(n = rcp__load(&d->next))) alock__pause(&k);
    }
    b -= 1;
    if (alock__desc_ok(t, n)) alock__grant(t, L, (alock__desc *)(uintptr_t)n, b < 0 ? 0 : b);
    alock__desc_put(d);
    return 0;
}

/* A dead process's descriptor d that was handed the lock: release it for them. */
static int alock__release_dead(alock_table *t, alock__desc *d)
{
    int od = 0;
    uint64_t lk = rcp__load(&d->lock);
    if (!lk || lk > t->nlocks || !alock__take_over(d, &od)) return 0;
    alock__line *L = &t->lines[lk - 1];
    uint64_t dv = (uint64_t)(uintptr_t)d, n = rcp__load(&d->next);
    if (!n) {
        alock__cpu_rmw_mark(L, 2);
        if (rcp__cas(&L->l_tail, &dv, (uint64_t)0)) return 1;
        uint64_t end = rcp__now_ns() + 1000000000ull; /* its successor is linking itself */
        while (!(n = rcp__load(&d->next)) && rcp__now_ns() < end) sched_yield();
        if (!n) {
            ALOCK__LOG(t, ALOCK_LOG_WARN,
                       "lock %llu: a dead holder's successor never linked itself",
                       (unsigned long long)(lk - 1));
            return 1;
        }
    }
    if (alock__desc_ok(t, n)) alock__grant(t, L, (alock__desc *)(uintptr_t)n, 0);
    ALOCK__LOG(t, ALOCK_LOG_INFO, "lock %llu: released for a dead process",
               (unsigned long long)(lk - 1));
    return 1;
}

/* Is slot s's process dead? Leases: judged with this handle's memory of its lease (seen_mu
   held); *tag gets the slot's tag, to check that the slot still names it. */
static int alock__recover_dead(alock_table *t, uint32_t s, uint64_t *tag)
{
    if (!t->lease) return alock__slot_live(t, s) == 0;
    *tag = rcp__load(&t->slots[s].tag);
    return alock__tag_dead(t, *tag, &t->seen[s]);
}

ALOCK_API int alock_recover(alock_table *t)
{
    int hk = t ? alock__handle(t) : 0;
    if (hk) return hk;
    if (!t || (!t->lease && t->live_fd < 0)) return 0;
    if (t->lease && (hk = alock__fence(t))) return hk;
    if (t->lease) pthread_mutex_lock(&t->seen_mu);
    int n = 0, more = 1;
    while (more) { /* a release can hand the lock to another dead descriptor */
        more = 0;
        for (uint32_t s = 0; s < t->nslots; s++) {
            uint64_t tag = 0;
            if (s == t->slot || !alock__recover_dead(t, s, &tag)) continue;
            for (uint32_t i = 0; i < t->ndesc; i++) {
                alock__desc *d = &t->descs[(size_t)s * t->ndesc + i];
                if (!rcp__load(&d->lock)) continue;
                int64_t b = rcp__load(&d->budget);
                if (b < 0 || (t->lease && rcp__load(&t->slots[s].tag) != tag)) continue;
                if (alock__release_dead(t, d)) { n++; more = 1; }
            }
        }
    }
    if (t->lease) pthread_mutex_unlock(&t->seen_mu);
    return n;
}

/* >>remote - the remote cohort ----------------------------------------------------------------- */

#define ALOCK__ADDR_MASK ((1ull << 48) - 1)

/* ALOCK_CHECK_RMW: an RDMA read-modify-write through link k of word w of line raddr */
static int alock__rdma_rmw_mark(const alock_link *k, uint64_t raddr, unsigned w)
{
#ifdef ALOCK_CHECK_RMW
    alock__line l;
    uint64_t old;
    if (!k->read || k->read(k->conn, raddr, &l, sizeof l)) return ALOCK_E_PEER;
    ALOCK_ASSERT(!(l.cpu_marks & (1ull << w)) &&
                 "a word of the lock line saw both CPU and RDMA read-modify-write");
    if (!k->faa || ((l.rdma_marks >> (8 * w)) & 0xff)) return 0; /* marked once: no carry */
    return k->faa(k->conn, raddr + offsetof(alock__line, rdma_marks), 1ull << (8 * w), &old)
               ? ALOCK_E_PEER : 0;
#else
    (void)k; (void)raddr; (void)w;
    return 0;
#endif
}

/* Release the lock for dead remote descriptor s (encoded), the remote head, at the tail as f
   (s, or s | ALOCK__RHEAD when it entered an empty queue), through link k to the lines: r_tail
   from exactly f to empty, then, if that worked, r_head from s to 0. 1 if released; 0 if the
   tail moved on (a successor enqueued: it takes over); or an error. */
static int alock__r_release_dead(const alock_link *k, uint64_t line, uint64_t s, uint64_t f)
{
    uint64_t old = 0;
    int rc;
    if ((rc = alock__rdma_rmw_mark(k, line, 0))) return rc;
    if (k->cas(k->conn, line, f, 0, &old)) return ALOCK_E_PEER;
    if (old != f) return 0;
    if ((rc = alock__rdma_rmw_mark(k, line, 1))) return rc;
    if (k->cas(k->conn, line + offsetof(alock__line, r_head), s, 0, &old)) return ALOCK_E_PEER;
    return 1;
}

ALOCK_API int alock_table_remote_dead(alock_table *t, const alock_link *loop, uint16_t id)
{
    if (!t || !loop || !loop->cas || !id) return ALOCK_E_INVAL;
    int hk = alock__handle(t);
    if (hk) return hk;
#ifdef ALOCK_CHECK_RMW
    if (!loop->read) return ALOCK_E_INVAL;
#endif
    uint64_t *map = (uint64_t *)(void *)(t->lines + t->nlocks);
    /* a full barrier: a granter that marks a successor of ours in r_head after the loads below
       READs the mark after its compare-and-swap (tests/alock.pml, -DKILL) */
    __atomic_fetch_or(&map[id / 64], 1ull << (id % 64), __ATOMIC_SEQ_CST);
    int n = 0;
    for (uint32_t i = 0; i < t->nlocks; i++) {
        alock__line *L = &t->lines[i];
        uint64_t rt = __atomic_load_n(&L->r_tail, __ATOMIC_SEQ_CST), s = rt & ~ALOCK__RHEAD;
        if (!rt || (uint16_t)(rt >> 48) != id) continue;
        if (!(rt & ALOCK__RHEAD) && __atomic_load_n(&L->r_head, __ATOMIC_SEQ_CST) != s)
            continue; /* a waiter behind a live holder: its granter releases it */
        int rc = alock__r_release_dead(loop, (uint64_t)(uintptr_t)L, s, rt);
        if (rc < 0) return rc;
        if (rc) {
            n++;
            ALOCK__LOG(t, ALOCK_LOG_INFO, "lock %u: released for dead remote process %u", i, id);
        }
    }
    return n;
}

#ifdef ALOCK_NO_RDMA
ALOCK_API int alock_remote_create(const alock_remote_opts *opts, alock_remote **out)
{
    (void)opts;
    if (out) *out = NULL;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_remote_destroy(alock_remote *r) { (void)r; return ALOCK_E_NOTSUP; }
ALOCK_API int alock_remote_set_peer(alock_remote *r, uint16_t id, const alock_link *link)
{
    (void)r; (void)id; (void)link;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_remote_lock(alock_remote *r, uint32_t idx, alock_rhold *hold)
{
    (void)r; (void)idx; (void)hold;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_remote_lock_timeout(alock_remote *r, uint32_t idx, uint64_t deadline_ns,
                                        alock_rhold *hold)
{
    (void)r; (void)idx; (void)deadline_ns; (void)hold;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_remote_trylock(alock_remote *r, uint32_t idx, alock_rhold *hold)
{
    (void)r; (void)idx; (void)hold;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_remote_unlock(alock_rhold *hold) { (void)hold; return ALOCK_E_NOTSUP; }
ALOCK_API int alock_remote_reset(alock_remote *r, uint32_t idx)
{
    (void)r; (void)idx;
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_verbs_link_create(struct ibv_qp *qp, struct ibv_cq *cq, uint32_t rkey,
                                      unsigned timeout_ms, alock_link *out)
{
    (void)qp; (void)cq; (void)rkey; (void)timeout_ms;
    if (out) memset(out, 0, sizeof *out);
    return ALOCK_E_NOTSUP;
}
ALOCK_API int alock_verbs_link_destroy(alock_link *link) { (void)link; return ALOCK_E_NOTSUP; }
#else
struct alock_remote {
    alock_remote_opts o;
    alock__desc *descs;
    alock_link peers[65536]; /* by id; cas NULL = unknown */
};

static int alock__r_write8(const alock_link *k, uint64_t raddr, uint64_t v)
{
    return k->write(k->conn, raddr, &v, 8) ? ALOCK_E_PEER : 0;
}

static int alock__r_cas(alock_remote *r, uint64_t raddr, uint64_t expect, uint64_t desired,
                        uint64_t *old)
{
    return r->o.home.cas(r->o.home.conn, raddr, expect, desired, old) ? ALOCK_E_PEER : 0;
}

static int alock__r_read_line(alock_remote *r, uint64_t raddr, alock__line *out)
{
    return r->o.home.read(r->o.home.conn, raddr, out, sizeof *out) ? ALOCK_E_PEER : 0;
}

/* Is remote process id marked dead in the table's dead map (after the lines)? 0 or 1, or an
   error. A torn READ is harmless: a bit only ever goes from 0 to 1. */
static int alock__r_is_dead(alock_remote *r, uint16_t id)
{
    uint64_t w = 0, at = r->o.lines_addr + (uint64_t)r->o.nlocks * 64 + (uint64_t)(id / 64) * 8;
    if (r->o.home.read(r->o.home.conn, at, &w, 8)) return ALOCK_E_PEER;
    return (int)((w >> (id % 64)) & 1);
}

/* Compare-and-swap of line's r_head (expect to desired; *old what it held). ALOCK_CHECK_RMW's
   check rides on the same round trip when the link has cas_read (the marks are sticky: a READ
   after the compare-and-swap sees a mix as well as one before). */
static int alock__r_head_cas(alock_remote *r, uint64_t line, uint64_t expect, uint64_t desired,
                             uint64_t *old)
{
    uint64_t at = line + offsetof(alock__line, r_head);
#ifdef ALOCK_CHECK_RMW
    const alock_link *k = &r->o.home;
    alock__line l;
    uint64_t o;
    if (!k->cas_read) {
        int rc = alock__rdma_rmw_mark(k, line, 1);
        return rc ? rc : alock__r_cas(r, at, expect, desired, old);
    }
    if (k->cas_read(k->conn, at, expect, desired, old, line, &l, sizeof l)) return ALOCK_E_PEER;
    ALOCK_ASSERT(!(l.cpu_marks & 2) &&
                 "a word of the lock line saw both CPU and RDMA read-modify-write");
    if (!k->faa || ((l.rdma_marks >> 8) & 0xff)) return 0;
    return k->faa(k->conn, line + offsetof(alock__line, rdma_marks), 1ull << 8, &o) ? ALOCK_E_PEER
                                                                                    : 0;
#else
    return alock__r_cas(r, at, expect, desired, old);
#endif
}

/* r_head := x by compare-and-swap from what it holds, e our guess: only the remote head changes
   it (and the release of a dead head), so a value other than ours is stale. */
static int alock__r_mark(alock_remote *r, uint64_t line, uint64_t e, uint64_t x)
{
    for (;;) {
        uint64_t old = 0;
        int rc = alock__r_head_cas(r, line, e, x, &old);
        if (rc) return rc;
        if (old == e) return 0;
        e = old;
    }
}

ALOCK_API int alock_remote_create(const alock_remote_opts *opts, alock_remote **out)
{
    if (!opts || !out || !opts->id || !opts->home.cas || !opts->home.read || !opts->home.write ||
        !opts->nlocks || !opts->lines_addr || (opts->lines_addr & 63) || !opts->descs ||
        ((uintptr_t)opts->descs & 63) || !opts->ndesc)
        return ALOCK_E_INVAL;
    alock_remote *r = (alock_remote *)ALOCK_MALLOC(sizeof *r);
    if (!r) return -ENOMEM;
    memset(r, 0, sizeof *r);
    r->o = *opts;
    if (!r->o.budget) r->o.budget = ALOCK_DEFAULT_BUDGET;
    r->descs = (alock__desc *)opts->descs;
    int rc = alock__r_is_dead(r, opts->id);
    if (rc) { /* a dead id: waiters behind it would take over from a live process */
        ALOCK_FREE(r);
        return rc > 0 ? ALOCK_E_INVAL : rc;
    }
    memset(r->descs, 0, ALOCK_REMOTE_MEM(opts->ndesc));
    if ((rc = rcp__handle_add(r))) {
        ALOCK_FREE(r);
        return rc;
    }
    *out = r;
    return 0;
}

ALOCK_API int alock_remote_destroy(alock_remote *r)
{
    if (!r) return 0;
    int rc = alock__handle_take(r);
    if (rc) return rc;
    ALOCK_FREE(r);
    return 0;
}

ALOCK_API int alock_remote_set_peer(alock_remote *r, uint16_t id, const alock_link *link)
{
    if (!r || !id || !link || !link->write || !link->cas || !link->read) return ALOCK_E_INVAL;
    int hk = alock__handle(r);
    if (hk) return hk;
    r->peers[id] = *link;
    return 0;
}

static alock__desc *alock__rdesc_get(alock_remote *r, uint32_t idx)
{
    for (uint32_t i = 0; i < r->o.ndesc; i++)
        if (!rcp__load(&r->descs[i].lock)) { /* an abandoned one: 0 once passed over */
            alock__desc *d = &r->descs[i];
            d->lock = (uint64_t)idx + 1;
            d->held = 0;
            rcp__store(&d->next, (uint64_t)0);
            rcp__store(&d->budget, (int64_t)ALOCK__WAIT);
            return d;
        }
    return NULL;
}

static inline uint64_t alock__renc(alock_remote *r, alock__desc *d)
{
    return (uint64_t)r->o.id << 48 | ((uint64_t)(uintptr_t)d & ALOCK__ADDR_MASK);
}

/* The link to remote process id's descriptors; NULL (logged) when there is none. */
static const alock_link *alock__r_peer(alock_remote *r, uint16_t id)
{
    if (r->peers[id].write) return &r->peers[id];
    alock_link k;
    memset(&k, 0, sizeof k);
    if (r->o.peer_link && id != r->o.id && r->o.peer_link(id, &k, r->o.peer_user) == 0 &&
        k.cas && k.read && k.write) {
        r->peers[id] = k;
        return &r->peers[id];
    }
    alock__logf(r->o.log, r->o.log_user, ALOCK_LOG_ERROR, "no link to remote process %u", id);
    return NULL;
}

/* Hand budget b to remote descriptor s (encoded) if its owner still waits: a compare-and-swap
   of its budget from ALOCK__WAIT to b, by RDMA (the owner gives up with an RDMA
   compare-and-swap of the same word through its loopback link, never a CPU one). 0 and *old =
   ALOCK__WAIT if handed, else *old is what the word held (ALOCK__ABANDONED). A descriptor of
   our own is not waiting (this thread is here), so a load and a store do. */
static int alock__r_grant_one(alock_remote *r, uint64_t s, int64_t b, int64_t *old)
{
    uint16_t id = (uint16_t)(s >> 48);
    uint64_t addr = (s & ALOCK__ADDR_MASK) + offsetof(alock__desc, budget), o = 0;
    if (id == r->o.id) {
        *old = rcp__load((int64_t *)(uintptr_t)addr);
        if (*old == ALOCK__WAIT) rcp__store((int64_t *)(uintptr_t)addr, b);
        return 0;
    }
    const alock_link *k = alock__r_peer(r, id);
    if (!k || !k->cas) return ALOCK_E_PEER;
    if (k->cas(k->conn, addr, (uint64_t)(int64_t)ALOCK__WAIT, (uint64_t)b, &o)) return ALOCK_E_PEER;
    *old = (int64_t)o;
    return 0;
}

/* Read word off of remote descriptor s (encoded). */
static int alock__r_desc_load(alock_remote *r, uint64_t s, size_t off, uint64_t *v)
{
    uint16_t id = (uint16_t)(s >> 48);
    uint64_t addr = (s & ALOCK__ADDR_MASK) + off;
    if (id == r->o.id) {
        *v = rcp__load((uint64_t *)(uintptr_t)addr);
        return 0;
    }
    const alock_link *k = alock__r_peer(r, id);
    if (!k || !k->read) return ALOCK_E_PEER;
    return k->read(k->conn, addr, v, 8) ? ALOCK_E_PEER : 0;
}

/* Write v into word off of remote descriptor s (encoded): ours directly, a peer's by RDMA. */
static int alock__r_desc_store(alock_remote *r, uint64_t s, size_t off, uint64_t v)
{
    uint16_t id = (uint16_t)(s >> 48);
    uint64_t addr = s & ALOCK__ADDR_MASK;
    if (id == r->o.id) {
        rcp__store((uint64_t *)(uintptr_t)(addr + off), v);
        return 0;
    }
    const alock_link *k = alock__r_peer(r, id);
    if (!k) return ALOCK_E_PEER;
    return alock__r_write8(k, addr + off, v);
}

/* A descriptor's next word is written by one remote process and read, while it changes, by
   another (its owner's CPU, or a granter passing over it by RDMA), so it is only ever changed
   and read by compare-and-swap, never by WRITE or READ: an RDMA WRITE or READ need not move
   8 bytes as one (Soft-RoCE copies with memcpy, which a CPU load under qemu TCG sees half done:
   a link read with its top bytes still 0), while a compare-and-swap stores and loads the word
   whole. The owner's only CPU store to it (0, when the descriptor is taken) comes before any
   RDMA operation can reach it. */

/* Link descriptor me behind pred (encoded): pred's next from 0 to me. Our own descriptor (one
   that gave up and is still queued) is changed through the link to our own id, as a remote
   granter reads it by compare-and-swap; without that link we have no deadlines, so no such
   descriptor. 1 when the compare-and-swap failed (pred's process is dead or unreachable: we
   wait all the same, and take over if it is marked dead), an error without a link to it. */
static int alock__r_link(alock_remote *r, uint64_t pred, uint64_t me)
{
    uint16_t id = (uint16_t)(pred >> 48);
    uint64_t addr = (pred & ALOCK__ADDR_MASK) + offsetof(alock__desc, next), o = 0;
    if (id == r->o.id && !r->peers[id].cas) {
        rcp__store((uint64_t *)(uintptr_t)addr, me);
        return 0;
    }
    const alock_link *k = alock__r_peer(r, id);
    if (!k) return ALOCK_E_PEER;
    if (k->cas(k->conn, addr, 0, me, &o)) return 1;
    if (o) {
        alock__logf(r->o.log, r->o.log_user, ALOCK_LOG_ERROR,
                    "remote descriptor %llx already has a successor (%llx)",
                    (unsigned long long)pred, (unsigned long long)o);
        return ALOCK_E_PEER;
    }
    return 0;
}

/* Load the next word of descriptor s (encoded): ours by a CPU load, a peer's by a
   compare-and-swap from 0 to 0 (which changes nothing). */
static int alock__r_next_load(alock_remote *r, uint64_t s, uint64_t *n)
{
    uint16_t id = (uint16_t)(s >> 48);
    uint64_t addr = (s & ALOCK__ADDR_MASK) + offsetof(alock__desc, next);
    if (id == r->o.id) {
        *n = rcp__load((uint64_t *)(uintptr_t)addr);
        return 0;
    }
    const alock_link *k = alock__r_peer(r, id);
    if (!k) return ALOCK_E_PEER;
    return k->cas(k->conn, addr, 0, 0, n) ? ALOCK_E_PEER : 0;
}

/* Peterson as the remote leader: victim by WRITE, then READ the line until we may enter. */
static int alock__peterson_remote(alock_remote *r, uint64_t line, const alock__line *first,
                                  uint64_t deadline, int try_only)
{
    alock__line l;
    int rc = 0;
    /* Our flag (r_tail) is up: if the local one is down now, a local leader raises it later,
       sees ours and waits for victim: enter without writing victim (tests/alock.pml). first:
       the line as read right after our flag went up, by the same round trip */
    if (first) l = *first;
    else if ((rc = alock__r_read_line(r, line, &l))) return rc;
    if (l.l_tail == 0) return 0;
    if ((rc = alock__r_write8(&r->o.home, line + offsetof(alock__line, victim), ALOCK_REMOTE)))
        return rc;
    for (;;) {
        if ((rc = alock__r_read_line(r, line, &l))) return rc;
        if (l.l_tail == 0 || l.victim != ALOCK_REMOTE) return 0;
        if (try_only) return ALOCK_E_BUSY;
        if (deadline && rcp__now_ns() >= deadline) return ALOCK_E_TIMEDOUT;
    }
}

/* MCS's rule: a release whose compare-and-swap of r_tail failed (from s to tail, s encoded) has
   a successor that enqueued and has not linked itself yet: wait until it sets s's next, for
   as long as that takes (a live successor on a loaded host may take any time between its
   compare-and-swap and its WRITE; giving up would leave it queued with nobody to hand it the
   lock). Every ALOCK_DEFAULT_CHECK_MS, look whether the process at the tail lives: a READ of
   its descriptor, which fails (ALOCK_E_PEER) once its connection is gone. */
static int alock__r_wait_link(alock_remote *r, uint64_t s, uint64_t tail, uint64_t *n)
{
    uint64_t look = 0, v = 0;
    unsigned k = 0;
    for (;;) {
        int rc = alock__r_next_load(r, s, n);
        if (rc || *n) return rc;
        alock__pause(&k);
        if (k & 127) continue;
        uint64_t now = rcp__now_ns();
        if (!look) look = now + (uint64_t)ALOCK_DEFAULT_CHECK_MS * 1000000ull;
        if (now < look) continue;
        if ((rc = alock__r_desc_load(r, tail, offsetof(alock__desc, budget), &v))) return rc;
        look = now + (uint64_t)ALOCK_DEFAULT_CHECK_MS * 1000000ull;
    }
}

/* A hand-off to remote successor s failed (its link's compare-and-swap): r_head names s already.
   If s's process is marked dead and s is the tail, release the lock for it (a successor of s
   takes over by itself); else the release follows the mark (alock_table_remote_dead). */
static int alock__r_grant_failed(alock_remote *r, uint64_t line, uint64_t s)
{
    int dead = alock__r_is_dead(r, (uint16_t)(s >> 48)), rc = 0;
    if (dead == 1) rc = alock__r_release_dead(&r->o.home, line, s, s);
    alock__logf(r->o.log, r->o.log_user, ALOCK_LOG_WARN,
                "remote descriptor %llx: the hand-off failed; its process is %s%s",
                (unsigned long long)s, dead == 1 ? "dead" : "unreachable",
                rc == 1 ? ", lock released" : "");
    return dead < 0 ? dead : rc < 0 ? rc : dead == 1 ? 0 : ALOCK_E_PEER;
}

/* Hand the lock (budget b) to remote successor s (encoded); pass over the ones that gave up
   (unlink each and free it for its owner: a WRITE of 0 to its lock word), as alock__grant
   does for the local cohort. Before each hand-off, r_head := s (from mark, what it holds): a
   dead process that was handed the lock is seen at the lines. Returns with the lock handed on
   or the remote queue empty. */
static int alock__r_grant(alock_remote *r, uint64_t line, uint64_t s, int64_t b, uint64_t mark)
{
    int rc = alock__r_mark(r, line, mark, s);
    if (rc) return rc;
    for (;;) {
        int64_t was = 0;
        uint64_t n = 0, old = 0;
        if (alock__r_grant_one(r, s, b, &was)) return alock__r_grant_failed(r, line, s);
        if (was == ALOCK__WAIT) return 0;
        if (was != ALOCK__ABANDONED) { /* not a waiter that gave up: touch nothing */
            alock__logf(r->o.log, r->o.log_user, ALOCK_LOG_ERROR,
                        "remote descriptor %llx: budget %lld, neither waiting nor abandoned",
                        (unsigned long long)s, (long long)was);
            return ALOCK_E_PEER;
        }
        /* s gave up: leave the queue for it; r_head leaves s before s is freed */
        if ((rc = alock__r_next_load(r, s, &n))) return rc;
        if (!n) {
            if ((rc = alock__rdma_rmw_mark(&r->o.home, line, 0))) return rc;
            if ((rc = alock__r_cas(r, line, s, 0, &old))) return rc;
            if (old == s) {
                if ((rc = alock__r_mark(r, line, s, 0))) return rc;
                return alock__r_desc_store(r, s, offsetof(alock__desc, lock), 0);
            }
            if ((rc = alock__r_wait_link(r, s, old, &n))) return rc; /* s's successor */
        }
        if ((rc = alock__r_mark(r, line, s, n))) return rc;
        if ((rc = alock__r_desc_store(r, s, offsetof(alock__desc, lock), 0))) return rc;
        s = n;
    }
}

/* Leave the head of the remote queue, handing budget b to the successor if there is one. Our
   tail value has ALOCK__RHEAD if d entered an empty queue; else r_head names d, and is
   cleared after an empty queue is left. */
static int alock__r_unlink_head(alock_remote *r, uint64_t line, alock__desc *d, int64_t b)
{
    uint64_t me = alock__renc(r, d), lead = rcp__load(&d->held), old = 0, n;
    uint64_t tail = lead ? me | ALOCK__RHEAD : me;
    int rc;
    if (!(n = rcp__load(&d->next))) {
        if ((rc = alock__rdma_rmw_mark(&r->o.home, line, 0))) return rc;
        if ((rc = alock__r_cas(r, line, tail, 0, &old))) return rc;
        if (old == tail) return lead ? 0 : alock__r_mark(r, line, me, 0);
        if ((rc = alock__r_wait_link(r, me, old & ~ALOCK__RHEAD, &n))) return rc;
    }
    return alock__r_grant(r, line, n, b, lead ? 0 : me);
}

/* While d waits behind pred (encoded), every ALOCK_DEFAULT_DEAD_CHECK_MS: is pred's process marked
   dead, and did it hold the head (ph: it entered an empty queue and had ALOCK__RHEAD when we
   enqueued; or r_head names it; or r_head names d, handed to us by a granter that died before
   its compare-and-swap)? Then take over: r_head := d. 1 if we did, 0 if not, or an error. */
static int alock__r_check_pred(alock_remote *r, uint64_t line, uint64_t pred, int ph, uint64_t me)
{
    int rc = alock__r_is_dead(r, (uint16_t)(pred >> 48));
    if (rc <= 0) return rc;
    uint64_t h = 0; /* r_head, loaded whole by a compare-and-swap from 0 to 0 */
    if ((rc = alock__r_head_cas(r, line, 0, 0, &h))) return rc;
    if (!ph && h != pred && h != me) return 0;
    if ((rc = alock__r_mark(r, line, h, me))) return rc;
    alock__logf(r->o.log, r->o.log_user, ALOCK_LOG_INFO,
                "took over from dead remote descriptor %llx", (unsigned long long)pred);
    return 1;
}

static int alock__rlock(alock_remote *r, uint32_t idx, uint64_t deadline, int try_only,
                        alock_rhold *hold)
{
    if (!r || !hold) return ALOCK_E_INVAL;
    int hk = alock__handle(r);
    if (RCP__UNLIKELY(hk)) return hk;
    if (idx >= r->o.nlocks) return ALOCK_E_INVAL;
    const alock_link *self = &r->peers[r->o.id];
    if (deadline && !self->cas) return ALOCK_E_INVAL; /* no way to give up safely */
    uint64_t line = r->o.lines_addr + (uint64_t)idx * 64;
    alock__desc *d = alock__rdesc_get(r, idx);
    if (!d) return ALOCK_E_NODESC;
    uint64_t me = alock__renc(r, d), pred = 0, old = 0;
    alock__line first;
    int rc, have_first = 0, ownerdead = 0, ph;
    for (;;) { /* verbs has no swap: a compare-and-swap loop; into an empty queue with the head
                  bit (we are its head: tests/alock.pml, -DKILL) */
        if ((rc = alock__rdma_rmw_mark(&r->o.home, line, 0))) goto fail;
        if (pred == 0 && r->o.home.cas_read) { /* if it joins an empty queue, the line too */
            if (r->o.home.cas_read(r->o.home.conn, line, 0, me | ALOCK__RHEAD, &old, line, &first,
                                   sizeof first)) {
                rc = ALOCK_E_PEER;
                goto fail;
            }
            have_first = old == 0;
        } else if ((rc = alock__r_cas(r, line, pred, pred ? me : me | ALOCK__RHEAD, &old))) {
            goto fail;
        }
        if (old == pred) break;
        if (try_only) { rc = ALOCK_E_BUSY; goto fail; }
        pred = old;
    }
    ph = (pred & ALOCK__RHEAD) != 0; /* pred entered an empty queue: it holds the head */
    pred &= ~ALOCK__RHEAD;
    rcp__store(&d->held, (uint64_t)(pred == 0));
    if (pred) {
        /* d is queued from here on: on failure it stays reserved (never reused). If the link
           fails, pred's process is dead or unreachable: wait all the same (below) */
        if ((rc = alock__r_link(r, pred, me)) < 0) return rc;
        int64_t b;
        unsigned k = 0;
        uint64_t look = rcp__now_ns() + (uint64_t)ALOCK_DEFAULT_DEAD_CHECK_MS * 1000000ull;
        while ((b = rcp__load(&d->budget)) == ALOCK__WAIT) {
            alock__pause(&k);
            if (k & 127) continue;
            uint64_t now = rcp__now_ns();
            if (now >= look) { /* pred dead, holding the head: take over */
                look = now + (uint64_t)ALOCK_DEFAULT_DEAD_CHECK_MS * 1000000ull;
                if ((rc = alock__r_check_pred(r, line, pred, ph, me)) < 0) return rc;
                if (rc) {
                    ownerdead = 1;
                    b = 0;
                    break;
                }
            }
            if (!deadline || now < deadline) continue;
            /* the deadline passed: give up by RDMA compare-and-swap (a granter changes this
               word with one), leaving d queued for the granter to pass over and free */
            uint64_t o = 0;
            if (self->cas(self->conn, (uint64_t)(uintptr_t)&d->budget,
                          (uint64_t)(int64_t)ALOCK__WAIT, (uint64_t)(int64_t)ALOCK__ABANDONED, &o))
                return ALOCK_E_PEER;
            if ((int64_t)o == ALOCK__WAIT) return ALOCK_E_TIMEDOUT;
        }
        if (b > 0) goto held;
    }
    rcp__store(&d->budget, (int64_t)r->o.budget);
    rc = alock__peterson_remote(r, line, have_first && !pred ? &first : NULL, deadline, try_only);
    if (rc) {
        if ((rc == ALOCK_E_BUSY || rc == ALOCK_E_TIMEDOUT) &&
            alock__r_unlink_head(r, line, d, 0) == 0)
            d->lock = 0;
        return rc;
    }
held:
    hold->r = r;
    hold->idx = idx;
    hold->desc = d;
    return ownerdead ? ALOCK_OWNERDEAD : 0;
fail:
    if (!pred || rc == ALOCK_E_BUSY) d->lock = 0; /* never queued */
    return rc;
}

ALOCK_API int alock_remote_lock(alock_remote *r, uint32_t idx, alock_rhold *hold)
{
    return alock__rlock(r, idx, 0, 0, hold);
}

ALOCK_API int alock_remote_lock_timeout(alock_remote *r, uint32_t idx, uint64_t deadline_ns,
                                        alock_rhold *hold)
{
    return alock__rlock(r, idx, deadline_ns, 0, hold);
}

ALOCK_API int alock_remote_trylock(alock_remote *r, uint32_t idx, alock_rhold *hold)
{
    return alock__rlock(r, idx, 0, 1, hold);
}

ALOCK_API int alock_remote_unlock(alock_rhold *hold)
{
    if (!hold || !hold->r || !hold->desc) return ALOCK_E_INVAL;
    int hk = alock__handle(hold->r);
    if (hk) return hk;
    alock_remote *r = hold->r;
    alock__desc *d = (alock__desc *)hold->desc;
    uint64_t line = r->o.lines_addr + (uint64_t)hold->idx * 64;
    hold->desc = NULL;
    int64_t b = rcp__load(&d->budget) - 1;
    int rc = alock__r_unlink_head(r, line, d, b < 0 ? 0 : b);
    if (!rc) d->lock = 0;
    return rc;
}

ALOCK_API int alock_remote_reset(alock_remote *r, uint32_t idx)
{
    if (!r) return ALOCK_E_INVAL;
    int hk = alock__handle(r);
    if (hk) return hk;
    if (idx >= r->o.nlocks) return ALOCK_E_INVAL;
    uint64_t line = r->o.lines_addr + (uint64_t)idx * 64, old = 0, cur = 0;
    int rc;
    for (;;) {
        if ((rc = alock__rdma_rmw_mark(&r->o.home, line, 0))) return rc;
        if ((rc = alock__r_cas(r, line, cur, 0, &old))) return rc;
        if (old == cur) return 0;
        cur = old;
    }
}

/* >>verbs_link - links over a verbs RC QP ------------------------------------------------------ */

typedef struct alock__vlink {
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint32_t rkey;
    uint64_t timeout_ns;
    unsigned char buf[128]; /* registered: atomic results, READ destination, WRITE source */
} alock__vlink;

/* Wait for the one completion on v's CQ within the link's timeout (rcp__verbs_wait: its first
   polls do not read the clock, which in a VM is slower than a poll). */
static int alock__v_wait(alock__vlink *v)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    int rc = rcp__verbs_wait(v->cq, &wc, v->timeout_ns);
    if (rc) {
        char d[200];
        rcp__verbs_log("alock link on qp %u: %s", v->qp->qp_num,
                       rcp__verbs_describe(rc, &wc, d, sizeof d));
    }
    return rc;
}

static int alock__v_cas(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired,
                        uint64_t *old)
{
    alock__vlink *v = (alock__vlink *)conn;
    uint64_t *b = (uint64_t *)(void *)v->buf;
    int rc = rcp__verbs_post_cas(v->qp, 1, b, v->mr->lkey, raddr, v->rkey, expect, desired,
                                 IBV_SEND_SIGNALED);
    if (!rc) rc = alock__v_wait(v);
    if (!rc) *old = rcp__load(b);
    return rc;
}

static int alock__v_faa(void *conn, uint64_t raddr, uint64_t add, uint64_t *old)
{
    alock__vlink *v = (alock__vlink *)conn;
    uint64_t *b = (uint64_t *)(void *)v->buf;
    int rc = rcp__verbs_post_faa(v->qp, 2, b, v->mr->lkey, raddr, v->rkey, add, IBV_SEND_SIGNALED);
    if (!rc) rc = alock__v_wait(v);
    if (!rc) *old = rcp__load(b);
    return rc;
}

/* wr: op over [buf, buf+len) of v's scratch memory, one scatter entry sg; the rest zero */
static void alock__v_wr(alock__vlink *v, struct ibv_send_wr *wr, struct ibv_sge *sg, uint64_t id,
                        enum ibv_wr_opcode op, void *buf, uint32_t len)
{
    sg->addr = (uintptr_t)buf;
    sg->length = len;
    sg->lkey = v->mr->lkey;
    memset(wr, 0, sizeof *wr);
    wr->wr_id = id;
    wr->opcode = op;
    wr->sg_list = sg;
    wr->num_sge = 1;
}

/* compare-and-swap (unsignalled) then READ (signalled) on one RC queue pair, posted as one list
   (one doorbell): the peer executes them in order, and the READ's completion comes after the
   compare-and-swap's work is done */
static int alock__v_cas_read(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired,
                             uint64_t *old, uint64_t read_addr, void *dst, uint32_t len)
{
    alock__vlink *v = (alock__vlink *)conn;
    uint64_t *b = (uint64_t *)(void *)v->buf;
    if (len > sizeof v->buf - 64 || (raddr & 7)) return -EINVAL;
    struct ibv_sge sg[2];
    struct ibv_send_wr wr[2], *bad = NULL;
    alock__v_wr(v, &wr[0], &sg[0], 5, IBV_WR_ATOMIC_CMP_AND_SWP, b, 8);
    alock__v_wr(v, &wr[1], &sg[1], 6, IBV_WR_RDMA_READ, v->buf + 64, len);
    wr[0].wr.atomic.remote_addr = raddr;
    wr[0].wr.atomic.rkey = v->rkey;
    wr[0].wr.atomic.compare_add = expect;
    wr[0].wr.atomic.swap = desired;
    wr[0].next = &wr[1];
    wr[1].send_flags = IBV_SEND_SIGNALED;
    wr[1].wr.rdma.remote_addr = read_addr;
    wr[1].wr.rdma.rkey = v->rkey;
    int rc = rcp__verbs_post_chain(v->qp, wr, &bad);
    if (!rc) rc = alock__v_wait(v);
    if (!rc) {
        *old = rcp__load(b);
        memcpy(dst, v->buf + 64, len);
    }
    return rc;
}

static int alock__v_read(void *conn, uint64_t raddr, void *dst, uint32_t len)
{
    alock__vlink *v = (alock__vlink *)conn;
    if (len > sizeof v->buf) return -EINVAL;
    int rc = rcp__verbs_post_read(v->qp, 3, v->buf, len, v->mr->lkey, raddr, v->rkey,
                                  IBV_SEND_SIGNALED);
    if (!rc) rc = alock__v_wait(v);
    if (!rc) memcpy(dst, v->buf, len);
    return rc;
}

static int alock__v_write(void *conn, uint64_t raddr, const void *src, uint32_t len)
{
    alock__vlink *v = (alock__vlink *)conn;
    if (len > sizeof v->buf) return -EINVAL;
    memcpy(v->buf, src, len);
    int rc = rcp__verbs_post_write(v->qp, 4, v->buf, len, v->mr->lkey, raddr, v->rkey, 0, 0,
                                   IBV_SEND_SIGNALED);
    return rc ? rc : alock__v_wait(v);
}

ALOCK_API int alock_verbs_link_create(struct ibv_qp *qp, struct ibv_cq *cq, uint32_t rkey,
                                      unsigned timeout_ms, alock_link *out)
{
    if (!qp || !cq || !out) return ALOCK_E_INVAL;
    alock__vlink *v = (alock__vlink *)ALOCK_MALLOC(sizeof *v);
    if (!v) return -ENOMEM;
    memset(v, 0, sizeof *v);
    v->qp = qp;
    v->cq = cq;
    v->rkey = rkey;
    v->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : ALOCK_DEFAULT_OP_TIMEOUT_MS) * 1000000ull;
    errno = 0;
    v->mr = ibv_reg_mr(qp->pd, v->buf, sizeof v->buf, IBV_ACCESS_LOCAL_WRITE);
    if (!v->mr) {
        int rc = rcp__verbs_err(0);
        ALOCK_FREE(v);
        return rc;
    }
    /* in alock_link's order: cas, faa, read, write, conn, cas_read */
    static const alock_link ops = {alock__v_cas, alock__v_faa, alock__v_read, alock__v_write, NULL,
                                   alock__v_cas_read};
    *out = ops;
    out->conn = v;
    return 0;
}

ALOCK_API int alock_verbs_link_destroy(alock_link *link)
{
    if (!link || !link->conn) return 0;
    alock__vlink *v = (alock__vlink *)link->conn;
    int rc = ibv_dereg_mr(v->mr);
    ALOCK_FREE(v);
    link->conn = NULL;
    return rc ? rcp__verbs_err(rc) : 0;
}
#endif /* ALOCK_NO_RDMA */

/* >>krconn_link - links over a krconn connection ----------------------------------------------- */

#ifdef KRCONN_H
typedef struct alock__klink {
    krconn *c;
    krconn_mr mr;
    uint32_t rkey;
    int timeout_ms;
    uint64_t buf[16]; /* registered: atomic results, READ destination, WRITE source */
} alock__klink;

static int alock__k_done(alock__klink *k, int rc)
{
    krconn_wc wc;
    return rc ? rc : krconn_wait(k->c, &wc, k->timeout_ms);
}

static int alock__k_cas(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired,
                        uint64_t *old)
{
    alock__klink *k = (alock__klink *)conn;
    int rc = alock__k_done(k, krconn_cas(k->c, 1, &k->mr, k->buf, raddr, k->rkey, expect,
                                         desired, 0));
    if (!rc) *old = rcp__load(&k->buf[0]);
    return rc;
}

static int alock__k_faa(void *conn, uint64_t raddr, uint64_t add, uint64_t *old)
{
    alock__klink *k = (alock__klink *)conn;
    int rc = alock__k_done(k, krconn_faa(k->c, 2, &k->mr, k->buf, raddr, k->rkey, add, 0));
    if (!rc) *old = rcp__load(&k->buf[0]);
    return rc;
}

/* compare-and-swap (unsignalled) then READ on c, one round trip: c executes them in order */
static int alock__k_cas_read(void *conn, uint64_t raddr, uint64_t expect, uint64_t desired,
                             uint64_t *old, uint64_t read_addr, void *dst, uint32_t len)
{
    alock__klink *k = (alock__klink *)conn;
    if (len > sizeof k->buf - 64) return ALOCK_E_INVAL;
    int rc = krconn_cas(k->c, 5, &k->mr, k->buf, raddr, k->rkey, expect, desired,
                        KRCONN_UNSIGNALED);
    if (!rc) rc = alock__k_done(k, krconn_read(k->c, 6, &k->mr, &k->buf[8], len, read_addr,
                                               k->rkey, 0));
    if (!rc) {
        *old = rcp__load(&k->buf[0]);
        memcpy(dst, &k->buf[8], len);
    }
    return rc;
}

static int alock__k_read(void *conn, uint64_t raddr, void *dst, uint32_t len)
{
    alock__klink *k = (alock__klink *)conn;
    if (len > sizeof k->buf) return ALOCK_E_INVAL;
    int rc = alock__k_done(k, krconn_read(k->c, 3, &k->mr, k->buf, len, raddr, k->rkey, 0));
    if (!rc) memcpy(dst, k->buf, len);
    return rc;
}

static int alock__k_write(void *conn, uint64_t raddr, const void *src, uint32_t len)
{
    alock__klink *k = (alock__klink *)conn;
    if (len > sizeof k->buf) return ALOCK_E_INVAL;
    memcpy(k->buf, src, len);
    return alock__k_done(k, krconn_write(k->c, 4, &k->mr, k->buf, len, raddr, k->rkey, 0));
}

ALOCK_API int alock_krconn_link_create(krconn_ctx *ctx, krconn *c, uint32_t rkey,
                                       unsigned timeout_ms, alock_link *out)
{
    if (!ctx || !c || !out) return ALOCK_E_INVAL;
    alock__klink *k = (alock__klink *)ALOCK_MALLOC(sizeof *k);
    if (!k) return -ENOMEM;
    memset(k, 0, sizeof *k);
    k->c = c;
    k->rkey = rkey;
    if (!timeout_ms) timeout_ms = ALOCK_DEFAULT_OP_TIMEOUT_MS;
    k->timeout_ms = timeout_ms > 0x7fffffffu ? 0x7fffffff : (int)timeout_ms;
    int rc = krconn_reg(ctx, k->buf, sizeof k->buf, 0, &k->mr);
    if (rc) {
        ALOCK_FREE(k);
        return rc;
    }
    static const alock_link ops = {alock__k_cas, alock__k_faa, alock__k_read, alock__k_write, NULL,
                                   alock__k_cas_read};
    *out = ops;
    out->conn = k;
    return 0;
}

ALOCK_API int alock_krconn_link_destroy(alock_link *link)
{
    if (!link || !link->conn) return 0;
    alock__klink *k = (alock__klink *)link->conn;
    int rc = krconn_dereg(&k->mr);
    ALOCK_FREE(k);
    link->conn = NULL;
    return rc;
}
#endif /* KRCONN_H */

#endif /* ALOCK_IMPLEMENTATION */

/*
   MIT License. Copyright (c) 2026 the rpcool authors.
   Permission is hereby granted, free of charge, to any person obtaining a copy of this software
   and associated documentation files (the "Software"), to deal in the Software without
   restriction, including without limitation the rights to use, copy, modify, merge, publish,
   distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
   Software is furnished to do so, subject to the following conditions: The above copyright
   notice and this permission notice shall be included in all copies or substantial portions of
   the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
   IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A
   PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE
   LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
   OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER
   DEALINGS IN THE SOFTWARE.
*/
