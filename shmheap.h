/* SPDX-License-Identifier: MIT */
/* shmheap.h - a shared heap over CXL memory, mapped at the same address in every process.
   version 0.4.0

   TABLE OF CONTENTS
   -----------------
   1. Usage           how to build it in, compile-time options, logging
   2. What it is      heaps, where their memory lives, the pod and its address window
   3. Example
   4. Allocator       size classes, spans, thread caches, crash safety, checked frees
   5. Thread safety
   6. Errors
   7. Limits
   The declarations follow this text; then the implementation, whose sections are marked with
   anchors to grep for: >>implementation >>layout >>support >>classes >>registry >>lock >>spans
   >>cache >>alloc >>names >>pod >>map >>mem >>roots >>check >>seal, and in impl/podlease.h (the
   leases of heaps shared between hosts) >>lease-types >>lease-attach >>lease-hold >>lease-watch.
   The licence (MIT) is at the end of the file.

   1. USAGE
   --------
   Copy shmheap.h and the impl/ folder into your project. In exactly one C or C++ file:

       #define SHMHEAP_IMPLEMENTATION
       #include "shmheap.h"

   Other files include "shmheap.h" without the define. Build with plain `cc -pthread` on Linux
   (glibc). The implementation needs GNU extensions: include shmheap.h before any system header
   in that file, or compile with -D_GNU_SOURCE. Options, defined before the implementation
   include:
       SHMHEAP_STATIC        make every function static (private to that file)
       SHMHEAP_WITH_CXL      resolve "cxl:REGION" names through libcxl (link -lcxl); without it
                             such names fail with SHMHEAP_E_NOTSUP
       SHMHEAP_ASSERT(x)     your assert (default: assert from <assert.h>)
       SHMHEAP_MALLOC(size)  your allocator for the library's private memory (default: malloc
       SHMHEAP_FREE(p)       and free); define both or neither (#error otherwise)
   Logging is silent by default. shmheap_opts.log receives a heap's messages; without it, set
   SHMHEAP_DEBUG (any value) in the environment to send them to stderr (read once per process).
   Options structs (shmheap_opts): zero means the default. Fill one with designated initialisers in
   C; in C++, value-initialise it and assign the fields you set (`T o{};` and `T o = {};` never
   warn; an initialiser list that leaves fields out warns under -Wextra in g++ before 14,
   -Wmissing-field-initializers):

       shmheap_opts o = {.size = 64 << 20};  // C
       shmheap_opts o{}; o.size = 64 << 20;  // C++

   2. WHAT IT IS
   -------------
   A heap is a region of "CXL memory" that every process of a pod maps at one virtual address,
   so a plain pointer into it means the same thing everywhere. Where the memory lives is named:
       "NAME" or "shm:NAME"   a POSIX shared-memory object (/dev/shm/NAME): emulated CXL, the
                              default, shared by the processes of one kernel
       "file:PATH" or a path  any file that can be mapped shared: a regular file, a file on
       containing '/'         hugetlbfs, a PCI BAR such as ivshmem's .../resource2
       "/dev/daxX.Y"          a device-DAX character device (2 MiB alignment)
       "cxl:regionN"          a CXL region, resolved through libcxl to its /dev/daxX.Y
   A new heap's address comes from the window [0x680000000000, 0x700000000000), handed out by a
   small pod directory that itself lives in shared memory (/dev/shm/shmheap.pod, or $SHMHEAP_POD, or
   shmheap_opts.pod): no daemon. An existing object of that name that is not a pod is never written:
   every call that needs the pod fails with SHMHEAP_E_NOTPOD. A new pod takes its window from
   $SHMHEAP_WINDOW ("LO-HI" in hex) if set, narrowed to its own sixteenth when $SHMHEAP_POD_ID is
   set (0-15: "pod ids", so heaps of different pods never share addresses, as rpcool's RDMA
   transport needs across pods; a sixteenth rounded down to 2 MiB multiples, so one under 2 MiB
   holds no heap); a malformed value of either (LO not 2 MiB aligned, HI not above LO, an id beyond
   15) is ignored with a warning in the log. Programs built with ThreadSanitizer can only map inside
   [0x550000000000, 0x568000000000), so such builds default to the pod shmheap-tsan.pod with the
   window [0x560000000000, 0x568000000000). The address is recorded in the heap's header; every
   opener maps exactly there with MAP_FIXED_NOREPLACE and fails with SHMHEAP_E_ADDRINUSE rather than
   replace a mapping. (Hosts that share a device but not /dev/shm each keep a directory; the header
   still decides.) A pod names up to 1024 heaps; beyond that, or with no free range that large left
   in its window, create fails with SHMHEAP_E_PODFULL. Entries whose objects were removed behind
   shmheap's back are dropped when they are in the way.
   Heaps shared between hosts. Hosts that share one device (a CXL region, a DAX device, a PCI
   BAR such as ivshmem's, a file) and no kernel share no byte lock, futex or /dev/shm name.
   rpcool's pod transport keeps heaps inside such a device, which it maps whole at one address in
   every host (the internal shmheap__create_mem and shmheap__open_mem, declared after the public
   functions). Such a heap has no name, pod entry or descriptor and takes no byte lock; every
   function works on it; close leaves the memory mapped, read-write; a locker waiting for its
   mutex polls (no futex crosses kernels). Each process may name its holds by a lease of the
   device's lease table (impl/podlease.h: a slot per process, renewed on its own clock, lapsed
   for every host once it stays unchanged for the table's bound, 1 s by default, as each observer
   measures on its own clock). Then a holder of the heap's mutex that dies on any host is
   recovered by a locker with a lease of that table within the bound (plus one poll,
   SHMHEAP__MEM_NAP_NS, 0.2 ms) of the later of the death and the start of its wait: the locker
   recovers the lapsed lease (rcp__lease_recover: its epoch moves on), takes the mutex over,
   repairs the unfinished step and gives the dead holder's thread caches back at once. A holder
   that stalls past the bound is dead to others alike (fenced when it resumes: section 4,
   "Fencing"). Caches named by a lease that lapses while their process holds no mutex go back at
   a shmheap_check() or full heap, of a process with a lease, that finds the lease released or
   recovered (by anyone, rpcool's reaper included), or lapsed since an earlier such look by the
   same handle (each look judges it once). Without a lease, a holder on another host is waited
   for (section 7).

   3. EXAMPLE
   ----------
       #define SHMHEAP_IMPLEMENTATION
       #include "shmheap.h"
       #include <stdio.h>

       struct node { int v; struct node *next; };

       int main(void)
       {
           shmheap *h;
           int rc = shmheap_create("demo", NULL, &h);      // or shmheap_open("demo", NULL, &h)
           if (rc) { fprintf(stderr, "%s\n", shmheap_strerror(rc)); return 1; }
           struct node *n = shmheap_malloc(h, sizeof *n);
           n->v = 42; n->next = NULL;
           shmheap_root_set(h, "list", n);                 // another process: shmheap_root_get
           shmheap_close(h);                               // the heap lives on until unlinked
           return shmheap_unlink("demo", NULL);
       }

   4. ALLOCATOR
   ------------
   Small blocks (up to 32 KiB, 40 size classes) come from 64 KiB spans, each with a bitmap of
   slots; allocating and freeing is one compare-and-swap on a bitmap word, with no lock, so any
   number of threads in any number of processes allocate at once. Threads are spread over 16
   stripes, each with its own current span per class, so they rarely touch the same cache line;
   a stripe that needs another span takes one of its own, an empty one, or a free one before it
   shares a span another stripe took (it does so at once while the mutex is busy), since a
   thread frees mostly what it allocated.
   Large blocks are runs of spans, taken under one mutex in the heap (a word naming its holder,
   not a pthread mutex: peers can write it, see >>lock). Blocks of up to 4 KiB that a thread
   frees wait in a small cache of that thread (8 per size class) for its next allocations, as
   glibc's tcache does; the cache is kept in the heap, not in private memory, so it goes back to
   everyone when the thread exits, when the process closes the heap, when the heap is full for
   that thread (an allocation of its own finds no room), on shmheap_flush() by that thread, and,
   for a process that died, at the next shmheap_check() or full heap of anyone on the same host
   (or, for heaps shared between hosts with leases, of any host: section 2).
   Another live thread's cache is never taken: a full heap can hold up to 8 free blocks per size
   class in each of them.
   Crash safety: a process killed at any moment (SIGKILL) leaves the heap consistent and usable.
   Lock-free steps are single atomic operations. Steps under the mutex write an intent record
   first; the next locker sees that the holder named in the mutex is dead (the kernel dropped
   the byte lock every open handle holds on the heap's file, as for glibc's robust mutexes, in
   any pid namespace; or a thread of this host and pid namespace that is gone or a zombie),
   takes the mutex over, undoes an unfinished allocation or completes an unfinished free, and
   carries on. What is NOT reclaimed: blocks the dead process had allocated stay allocated,
   because the heap cannot know whether another process still uses them (rpcool gives every
   connection its own heap and reclaims it whole). A process killed between taking a slot and
   returning it leaks that one slot.
   Fencing (heaps shared between hosts, used with leases). A process that stopped past its lease
   (SIGSTOP, a paused VM) and was recovered by another host must not act on the heap when it
   resumes. What is fenced: (1) every take of the mutex, and every step under it before its
   first store (when it writes its intent record), checks the lease (rcp__lease_check) and fails
   with -ESTALE once it was recovered: shmheap_alloc, shmheap_free, shmheap_check and
   shmheap_root_set return -ESTALE, the allocation functions NULL with errno ESTALE, and so does
   every small allocation and free once the process knows it (its lease's renewing thread or
   any check tells it); (2) its unlock is a compare-and-swap from the word naming its old lease,
   so it frees nothing once the mutex was taken over; (3) a recoverer takes its thread caches by
   compare-and-swap from the words naming its old lease, and it reads a cache's word before
   each use of the cache and uses it only while the word still names its lease. What is not: a
   stop that falls between such a check and the stores it guards, that is within the one step
   under the mutex the holder had begun (a few stores of the span table or a root: no system
   call, wait or log message lies between the check and them), or within one push or pop of its
   cache. Resumed, the holder completes those stores after the recoverer repaired or gave back
   what they touch, which can break the heap (shmheap_check reports it). A holder stopped
   anywhere else is fenced whole.
   Freeing checks the pointer: outside the heap, [shmheap_base, + shmheap_size)
   (SHMHEAP_E_FOREIGN), not the start of a block, the header included (SHMHEAP_E_BADPTR), already
   free (SHMHEAP_E_DOUBLEFREE; detected unless the block was
   allocated again in between).

   5. THREAD SAFETY
   ----------------
   Every function may be called from any thread of any process, except close/unlink of a heap
   that other threads of the same process still use. A log callback may be called from any
   thread that uses the heap.

   6. ERRORS
   ---------
   Functions return 0 or a negative code: -errno from the system, or one of SHMHEAP_E_*
   (SHMHEAP_ERRORS lists them). shmheap_strerror(code) explains it.

   One rule in every rpcool header: each owns a block of codes counting up from its number
   (shmheap -1000, rpcool -2000, alock -3000, krconn -4000, nppin -5000). X_strerror explains
   its own codes and those of every rpcool header declared before its implementation (a code
   passed through keeps its text); -1 to -4095 is -errno (strerror's text if the system knows
   it); an undeclared header's code names that header; else "unknown error code"; 0 "success".
   Static texts. Allocation functions return NULL (errno = ENOMEM) when the heap is full;
   shmheap_alloc() returns the reason instead.
   Handles, one rule in every rpcool header: a handle is open from the call that made it until
   its close. A second close, or any use after the close, returns the header's E_BADHANDLE code
   (a function that returns a pointer or a size returns NULL or 0 and sets errno to EBADF); in
   a child of fork(), a handle its parent made returns the header's E_FORKED code, its close
   included (the child's copy goes at exit or exec), unless the header lets children use it. A
   table of open handles in each process tells these apart without reading the handle, so none
   of them is a crash; once a later open hands out the same address again, the old pointer is
   that new handle (as a file descriptor's number is). A pointer that was never a handle is
   undefined, as free() of one is.
   Here the handle is a shmheap: SHMHEAP_E_BADHANDLE. A heap opened twice in one process is one
   handle, open until its last close. A forked child may use its parent's heaps (and close
   them), so shmheap.h has no E_FORKED code.

   7. LIMITS
   ---------
   Linux x86-64/aarch64 with glibc. Heaps from 2 MiB to 16 TiB. Metadata is 1/128 of a heap
   (bitmaps) plus 1/8192 (span table); a heap created in a new object or file touches it only
   as spans are used, so a big /dev/shm heap costs what is used of it (shmheap_check reads the
   whole span table). Formatting an existing file or device writes all of it. 64 named roots
   per heap, names up to 47 bytes. Heap names up to 100 bytes after their "shm:", "file:" or
   "cxl:" prefix; a relative path counts as the absolute path it names. 4095 processes hold a
   heap's byte locks at once; a process opened beyond that, or on a file that takes no locks, is
   recognised dead only by processes of its host and pid namespace. Kernels share no locks: a
   heap opened by name or descriptor from a device that another kernel maps too, or made in
   memory the caller maps without a lease, waits for a holder that dies in another kernel
   (lock_timeout_ms bounds that); with leases it is recovered within the lease bound (section
   2). Every process that gives a lease for a heap gives one of the same table. A forked child
   does not hold its parent's lease: it names its holds by its host and pid, as without one. A
   forked child that dies holding the mutex after its thread id was reused (it shares its
   parent's byte lock) is waited for too.
*/
#ifndef SHMHEAP_H
#define SHMHEAP_H

/* The version: SHMHEAP_VERSION_MAJOR.MINOR.PATCH, and as a string (see CHANGES.md). */
#define SHMHEAP_VERSION_MAJOR 0
#define SHMHEAP_VERSION_MINOR 4
#define SHMHEAP_VERSION_PATCH 0
#define SHMHEAP_VERSION "0.4.0"

/* The implementation needs GNU extensions of glibc (MAP_FIXED_NOREPLACE); they must be
   switched on before the first system header. Define the implementation in a file that
   includes shmheap.h first, or compile with -D_GNU_SOURCE. */
#if defined(SHMHEAP_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef SHMHEAP_STATIC
/* unused: no warning for the functions a file does not call */
#define SHMHEAP_API static __attribute__((unused))
#else
#define SHMHEAP_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shmheap shmheap; /* a process-local handle to a mapped heap */

/* Defaults: what a zero field of shmheap_opts means. */
#define SHMHEAP_DEFAULT_SIZE ((size_t)64 << 20) /* 64 MiB */
#define SHMHEAP_DEFAULT_MODE 0600
#define SHMHEAP_POD_IDS 16 /* $SHMHEAP_POD_ID: 0 .. SHMHEAP_POD_IDS - 1 */

/* Options for create and open. Zero means default (section 1: filling it in C and C++). */
typedef struct shmheap_opts {
    size_t size;         /* create: bytes, rounded up to 2 MiB; 0 = SHMHEAP_DEFAULT_SIZE for
                            shm objects and new files, the size of an existing file (overwrite;
                            rounded up), the whole device for DAX and PCI BARs */
    uintptr_t addr;      /* create: fixed base address (2 MiB aligned); 0 = from the pod */
    unsigned mode;       /* create: permissions of a new object or file, less the process's
                            umask as for open(2); 0 = SHMHEAP_DEFAULT_MODE */
    const char *pod;     /* pod directory name in /dev/shm; NULL = $SHMHEAP_POD or shmheap.pod */
    int overwrite;       /* create over an existing heap, file or object: format it anyway.
                            Without it, create fails with SHMHEAP_E_EXISTS, except on a device
                            or PCI BAR that does not hold a heap yet, which it formats */
    unsigned lock_timeout_ms; /* bound on waiting for the heap's mutex (taken for blocks over
                            32 KiB, roots, checks); 0 = wait as long as it takes. Set it when a
                            peer you do not trust shares the heap: its stop then makes those
                            calls fail with -ETIMEDOUT instead of hanging you */
    void (*log)(int level, const char *msg, void *user); /* gets the library's messages
                            (SHMHEAP_LOG_* levels, one line each); NULL = silent, or stderr when
                            SHMHEAP_DEBUG is set. A heap open twice in a process keeps the
                            first opener's */
    void *log_user;      /* passed to log */
} shmheap_opts;

/* Levels of the messages a log callback gets. */
enum { SHMHEAP_LOG_ERROR = 0, SHMHEAP_LOG_WARN = 1, SHMHEAP_LOG_INFO = 2, SHMHEAP_LOG_DEBUG = 3 };

/* Error codes: X(name, value, what shmheap_strerror says); a comment adds what the
   text leaves out. */
#define SHMHEAP_ERRORS(X)                                                                          \
    X(SHMHEAP_E_BADMAGIC, -1000, "not a shmheap heap (bad magic), or its creator never finished")  \
    X(SHMHEAP_E_VERSION, -999, "heap made by an incompatible shmheap layout version")              \
    X(SHMHEAP_E_TOOSMALL, -998,                                                                    \
      "file or device too small for a heap, or header sizes inconsistent")                         \
    X(SHMHEAP_E_FULL, -997, "heap full")                                                           \
    X(SHMHEAP_E_DOUBLEFREE, -996, "block already free (double free)")                              \
    X(SHMHEAP_E_FOREIGN, -995, "pointer is not inside this heap")                                  \
    X(SHMHEAP_E_BADPTR, -994, "pointer is inside the heap but not the start of a block")           \
    /* the heap's address range is taken in this process or pod */                                 \
    X(SHMHEAP_E_ADDRINUSE, -993, "the heap's address range is already taken")                      \
    /* feature not supported here (built without it, or no CPU/OS support) */                      \
    X(SHMHEAP_E_NOTSUP, -992, "not supported on this build or machine")                            \
    X(SHMHEAP_E_CORRUPT, -991, "heap consistency check failed")                                    \
    X(SHMHEAP_E_BADNAME, -990, "malformed heap or root name")                                      \
    X(SHMHEAP_E_NOTFOUND, -989, "no heap, device, region or root of that name")                    \
    X(SHMHEAP_E_EXISTS, -988, "a heap of that name exists already")                                \
    X(SHMHEAP_E_INVAL, -987, "invalid argument to a shmheap function")                             \
    /* create with overwrite of a heap this process has open */                                    \
    X(SHMHEAP_E_BUSY, -986, "the heap is open in this process: close it before overwriting it")    \
    X(SHMHEAP_E_PODFULL, -985,                                                                     \
      "the pod is full: no free address range that large in its window, or 1024 heaps named")      \
    X(SHMHEAP_E_BADHANDLE, -984, "not an open heap handle (closed already)")                       \
    X(SHMHEAP_E_NOTPOD, -983,                                                                      \
      "the pod's name (opts.pod, $SHMHEAP_POD) names an object that is not a pod: left alone")
#define SHMHEAP__ERROR_ENUM(name, value, text) name = value,
enum { SHMHEAP_ERRORS(SHMHEAP__ERROR_ENUM) };
#undef SHMHEAP__ERROR_ENUM

SHMHEAP_API const char *shmheap_strerror(int code);

/* Lifetime. create fails with SHMHEAP_E_EXISTS if the name exists (unless opts->overwrite;
   overwriting a heap this process still has open fails with SHMHEAP_E_BUSY, as its handles
   would point into a re-formatted heap). close unmaps (the heap lives on); unlink removes the
   name and frees its address range. */
SHMHEAP_API int shmheap_create(const char *name, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_open(const char *name, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_close(shmheap *h);
SHMHEAP_API int shmheap_unlink(const char *name, const shmheap_opts *opts);
/* A heap with no name, on a descriptor (a memfd, or any file that can be mapped shared), which
   can be passed to other processes (SCM_RIGHTS). create_fd sizes the file (opts->size) and
   formats it; open_fd maps a heap another process made. fd stays the caller's (the handle
   keeps a duplicate). Byte locks belong to an open file description: give each process its
   own open of the file (open("/proc/self/fd/N") makes one), never a description another
   process has the heap open through. The heap's range in the pod stays taken while a hold
   exists: the creator's handle has one, shmheap_pod_hold makes another (a descriptor holding a
   read lock on the pod entry's byte, e.g. to pass along with the heap; close it when done;
   SHMHEAP_E_INVAL for a named heap, whose range stays taken until it is unlinked);
   without holds the range is freed by the next shmheap_create_fd (or any create that needs
   room). Nothing to unlink. */
SHMHEAP_API int shmheap_create_fd(int fd, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_open_fd(int fd, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_pod_hold(const shmheap *h, const shmheap_opts *opts);
/* A reservation: one address range of the pod, one entry of its directory, for many heaps on
   descriptors (a server's connection heaps, say), so that their number does not fill the pod.
   resv_create takes size bytes (rounded up to 2 MiB; SHMHEAP_E_PODFULL if no range that large
   is free, or the directory is full; its entry's key ends in ":resv"). create_fd_in is
   create_fd at base + off of the reservation (off a multiple of 2 MiB, the heap within the
   range: else SHMHEAP_E_INVAL; SHMHEAP_E_ADDRINUSE if something of this process is mapped
   there); the caller decides which offsets are free (the pod does not); the heap's name is
   "fd:IDX:...@ADDR" (IDX the reservation's entry, ADDR its base in hex). A hold
   (shmheap_pod_hold) of a heap made in it holds the whole range; the range stays taken while
   the reservation or any hold of it lives (each heap made in it keeps one while it is open
   here). resv_hold returns a new descriptor of the
   reservation's own hold (one lock for all: its copies cost the pod nothing each), to pass to
   the processes that map heaps made in it; close it when done. resv_destroy drops the
   reservation's descriptor; heaps made in it stay valid. A reservation follows the handle rule
   as a heap does (section 6): after resv_destroy every call on it is SHMHEAP_E_BADHANDLE (NULL
   or 0 with errno EBADF where it returns a pointer or a size); a forked child may use it. */
typedef struct shmheap_resv shmheap_resv;
SHMHEAP_API int shmheap_resv_create(size_t size, const shmheap_opts *opts, shmheap_resv **out);
SHMHEAP_API int shmheap_resv_destroy(shmheap_resv *r);
SHMHEAP_API int shmheap_resv_hold(const shmheap_resv *r);
SHMHEAP_API void *shmheap_resv_base(const shmheap_resv *r);
SHMHEAP_API size_t shmheap_resv_size(const shmheap_resv *r);
SHMHEAP_API int shmheap_create_fd_in(shmheap_resv *r, size_t off, int fd, const shmheap_opts *opts,
                                     shmheap **out);

SHMHEAP_API void *shmheap_base(const shmheap *h);
SHMHEAP_API size_t shmheap_size(const shmheap *h);
SHMHEAP_API const char *shmheap_name(const shmheap *h);
/* How many times this process has h open: open (or open_fd) of a heap already open here
   returns the same handle and counts up (create of it fails: SHMHEAP_E_EXISTS, or
   SHMHEAP_E_BUSY with overwrite); close counts down and unmaps at 0. */
SHMHEAP_API int shmheap_opens(const shmheap *h);
/* The open heap of this process that contains p, or NULL. */
SHMHEAP_API shmheap *shmheap_of(const void *p);

/* Allocation. Sizes up to 32 KiB come from size classes, larger ones are multiples of 64 KiB. */
SHMHEAP_API void *shmheap_malloc(shmheap *h, size_t size);
SHMHEAP_API void *shmheap_calloc(shmheap *h, size_t count, size_t size);
SHMHEAP_API void *shmheap_realloc(shmheap *h, void *p, size_t size);
SHMHEAP_API void *shmheap_aligned_alloc(shmheap *h, size_t align, size_t size);
/* The same with a reason: 0, SHMHEAP_E_FULL or SHMHEAP_E_INVAL, or -ETIMEDOUT when the call
   waited lock_timeout_ms for the heap's mutex (blocks over 32 KiB always take it; small ones
   only to refill a size class), or -ESTALE when this process was fenced (section 4). align 0 =
   16. The pointer-returning calls set errno to ENOMEM, ETIMEDOUT or ESTALE. */
SHMHEAP_API int shmheap_alloc(shmheap *h, size_t size, size_t align, void **out);
/* 0, or SHMHEAP_E_FOREIGN / SHMHEAP_E_BADPTR / SHMHEAP_E_DOUBLEFREE, -ESTALE once fenced
   (section 4); freeing NULL is 0. */
SHMHEAP_API int shmheap_free(shmheap *h, void *p);
/* Bytes usable at p, or 0 if p is not a live block of h. */
SHMHEAP_API size_t shmheap_usable_size(shmheap *h, const void *p);
/* Blocks of up to 4 KiB that a thread frees wait in its cache (at most 8 per size class, kept
   in the heap) for its next allocations; other threads and processes get them when the cache
   overflows, the thread exits, finds the heap full or closes the heap, or now, when the thread
   calls shmheap_flush (which empties the calling thread's cache only). */
SHMHEAP_API int shmheap_flush(shmheap *h);

/* Checks every invariant of the heap (under its lock) and fills st if not NULL.
   Returns 0 or SHMHEAP_E_CORRUPT (with the first problem logged at SHMHEAP_LOG_ERROR and
   copied to st->problem). */
typedef struct shmheap_stats {
    size_t size;         /* bytes of the mapping */
    size_t data_bytes;   /* bytes available to blocks */
    size_t used_bytes;   /* bytes in live blocks (slot sizes) */
    size_t live_blocks;
    size_t cached_blocks; /* free blocks held in thread caches (not counted as live) */
    size_t free_spans, small_spans, large_spans;
    uint64_t recoveries; /* times a dead lock holder's step was repaired */
    char problem[128];
} shmheap_stats;
SHMHEAP_API int shmheap_check(shmheap *h, shmheap_stats *st);

/* Named roots: find shared structures by name. set with p == NULL removes the name. */
SHMHEAP_API int shmheap_root_set(shmheap *h, const char *name, void *p);
SHMHEAP_API void *shmheap_root_get(shmheap *h, const char *name);

/* Safety building blocks. contains: 1 if [p, p+len) lies inside h's data area, else 0. */
SHMHEAP_API int shmheap_contains(const shmheap *h, const void *p, size_t len);
/* Seal makes the pages covering [p, p+len) read-only for the calling process; unseal restores
   read-write. Batch unseal merges adjacent ranges into few mprotect calls. On tmpfs (memfd,
   /dev/shm) the first seal of a page range maps it on its own, from a second open of the same
   file through /proc/self/fd (the same pages at the same address), so that sealing and
   unsealing exactly that range again changes its permissions without splitting and merging the
   heap's mapping; a handle keeps up to 64 such ranges (a range that covers earlier ones whole
   replaces them; none after shmheap_pkey_protect), each a line of its own in /proc/self/maps
   until the heap is closed. */
typedef struct shmheap_range { const void *p; size_t len; } shmheap_range;
SHMHEAP_API int shmheap_seal(shmheap *h, const void *p, size_t len);
SHMHEAP_API int shmheap_unseal(shmheap *h, const void *p, size_t len);
SHMHEAP_API int shmheap_unseal_batch(shmheap *h, const shmheap_range *ranges, size_t n);

/* Memory protection keys (Intel/AMD pku). supported: 1 or 0 (checked once, then cached; still
   1 when every key is taken). Without pku the others return SHMHEAP_E_NOTSUP. rights: 0 = full
   access, 1 = no access (PKEY_DISABLE_ACCESS), 2 = read only (PKEY_DISABLE_WRITE). protect tags
   the pages covering [p, p+len) - any part of h's mapping, its header included, so a key can
   fence off a whole heap with shmheap_base/shmheap_size - and leaves them read-write (it ends
   a seal of those pages). set changes the calling thread's rights only (no system call). */
SHMHEAP_API int shmheap_pkey_supported(void);
SHMHEAP_API int shmheap_pkey_alloc(unsigned rights);
SHMHEAP_API int shmheap_pkey_free(int pkey);
SHMHEAP_API int shmheap_pkey_protect(shmheap *h, const void *p, size_t len, int pkey);
SHMHEAP_API int shmheap_pkey_set(int pkey, unsigned rights);

/* Internal (for rpcool.h's pod transport; names with two underscores may change): a heap in
   memory the caller has already mapped shared at addr (2 MiB aligned, size a multiple of 2 MiB,
   else SHMHEAP_E_INVAL), such as a pod device mapped whole at one address in every host.
   create formats [addr, addr + size) (SHMHEAP_E_BUSY if a heap of this process lies there);
   open finds the heap there (SHMHEAP_E_BADMAGIC if the memory holds none, SHMHEAP_E_TOOSMALL or
   SHMHEAP_E_CORRUPT if its header does not fit the range). The handle never maps or unmaps,
   keeps no descriptor and takes no byte lock; close leaves the memory mapped, read-write.
   lease (impl/podlease.h, may be NULL) names this process's holds of the heap's mutex and
   thread caches (section 2, "Heaps shared between hosts"). */
struct rcp__lease;
SHMHEAP_API int shmheap__create_mem(void *addr, size_t size, struct rcp__lease *lease,
                                    const shmheap_opts *o, shmheap **out);
SHMHEAP_API int shmheap__open_mem(void *addr, size_t size, struct rcp__lease *lease,
                                  const shmheap_opts *o, shmheap **out);

#ifdef __cplusplus
}
#endif
#endif /* SHMHEAP_H */

/* >>implementation - includes, options, constants ---------------------------------------------- */
#if defined(SHMHEAP_IMPLEMENTATION) && !defined(SHMHEAP_IMPLEMENTATION_ONCE)
#define SHMHEAP_IMPLEMENTATION_ONCE

#include "impl/platform.h"
#include "impl/handle.h"
#include "impl/podlease.h"
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#ifdef SHMHEAP_WITH_CXL
#include "impl/cxl.h"
#endif

#if defined(SHMHEAP_MALLOC) != defined(SHMHEAP_FREE)
#error "shmheap.h: define both SHMHEAP_MALLOC and SHMHEAP_FREE, or neither"
#endif
#ifndef SHMHEAP_MALLOC
#define SHMHEAP_MALLOC(size) malloc(size)
#define SHMHEAP_FREE(p) free(p)
#endif

#ifndef SHMHEAP_ASSERT
#include <assert.h>
#define SHMHEAP_ASSERT(x) assert(x)
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define SHMHEAP__MAGIC 0x3150414548534d52ull /* "RMSHEAP1" */
/* The layout version: a heap made by another version is refused (SHMHEAP_E_VERSION). */
#define SHMHEAP__VERSION 6u
#define SHMHEAP__SPAN_SHIFT 16
#define SHMHEAP__SPAN ((size_t)1 << SHMHEAP__SPAN_SHIFT)
#define SHMHEAP__NCLS 40
#define SHMHEAP__MAX_SMALL 32768u
#define SHMHEAP__WORDS 66 /* bitmap words per span: 66 * 63 >= 4096 slots of 16 B */
#define SHMHEAP__BITS 63  /* slot bits per word; bit 63 marks a closed word */
#define SHMHEAP__CLOSED (1ull << 63)
#define SHMHEAP__SLOTMASK (SHMHEAP__CLOSED - 1)
#define SHMHEAP__STRIPES 16
#define SHMHEAP__NROOTS 64
#define SHMHEAP__ROOT_NAME 48
#define SHMHEAP__ALIGN ((size_t)2 << 20)
/* The default address window. RPCool's kernel uses [0x600000000000, 0x700000000000); its lower
   part is where AddressSanitizer puts its allocator, so ours starts higher. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHMHEAP__TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(SHMHEAP__TSAN)
/* ThreadSanitizer only lets programs map inside [0x550000000000, 0x568000000000): such builds
   default to a pod of their own in the top of that range. */
#define SHMHEAP__WIN_LO 0x560000000000ull
#define SHMHEAP__WIN_HI 0x568000000000ull
#define SHMHEAP__POD_DEFAULT "shmheap-tsan.pod"
#else
#define SHMHEAP__WIN_LO 0x680000000000ull
#define SHMHEAP__WIN_HI 0x700000000000ull
#define SHMHEAP__POD_DEFAULT "shmheap.pod"
#endif
#define SHMHEAP__NAME_MAX 100
#define SHMHEAP__NTC 32     /* thread caches per heap */
#define SHMHEAP__TC_CAP 8   /* blocks per class in a thread cache */
#define SHMHEAP__TC_CLS 28  /* classes up to 4 KiB are cached */
#define SHMHEAP__NBIND 4    /* heaps a thread keeps a cache in at once */
#define SHMHEAP__SEAL_VMAS 64 /* ranges a handle keeps as mappings of their own (>>seal) */
#define SHMHEAP__TMPFS_MAGIC 0x01021994 /* statfs f_type of tmpfs, memfd and /dev/shm */
#ifndef SHMHEAP__TEST_HOOK /* tests stop or kill a process at a named point */
#define SHMHEAP__TEST_HOOK(h, point) ((void)0)
#endif
#define SHMHEAP__MEM_NAP_NS 200000ull  /* a locker of a heap in memory the caller mapped (a
                                          device other hosts share: no futex) looks again */

/* >>layout - the heap header and the handle ---------------------------------------------------- */

/* A span table entry: state (8 bits), class (8 bits), a FULL hint bit, the stripe that last
   took a small span (5 bits, stripe + 1, a hint), and an argument: the generation of a small
   span, the length of a large run, the distance back to its head. */
enum { SHMHEAP__S_FREE = 0, SHMHEAP__S_SMALL = 1, SHMHEAP__S_HEAD = 2, SHMHEAP__S_CONT = 3 };
#define SHMHEAP__E_STATE(e) ((unsigned)((e) & 0xff))
#define SHMHEAP__E_CLS(e) ((unsigned)(((e) >> 8) & 0xff))
#define SHMHEAP__E_FULL (1ull << 16)
#define SHMHEAP__E_OWN_SHIFT 17
#define SHMHEAP__E_OWN (0x1full << SHMHEAP__E_OWN_SHIFT)
/* bits that change while a span keeps its hands */
#define SHMHEAP__E_HINTS (SHMHEAP__E_FULL | SHMHEAP__E_OWN)
#define SHMHEAP__E_ARG(e) ((uint32_t)((e) >> 32))
#define SHMHEAP__E_MAKE(st, cls, arg) \
    ((uint64_t)(st) | ((uint64_t)(cls) << 8) | ((uint64_t)(uint32_t)(arg) << 32))

/* Intent records of steps taken under the heap mutex (see shmheap__recover). */
enum {
    SHMHEAP__J_NONE = 0,
    SHMHEAP__J_INIT,
    SHMHEAP__J_RETIRE,
    SHMHEAP__J_LALLOC,
    SHMHEAP__J_LFREE
};

struct shmheap__root {
    uint64_t off;  /* offset from the heap base */
    uint32_t used;
    char name[SHMHEAP__ROOT_NAME + 4];
};

/* A thread's cache of freed small blocks, kept in the heap itself so that the blocks of a
   process that dies can be given back by anyone (shmheap__sweep). Only its owner writes it. */
struct shmheap__tc {
    uint64_t owner; /* host tag << 32 | pid, 0 = unowned; bit 31 set while a sweeper empties it;
                       or SHMHEAP__LW | lease tag, SHMHEAP__LW_SWEEP while a sweeper empties it */
    uint32_t tid, pad;
    uint8_t n[SHMHEAP__NCLS];
    uint64_t off[SHMHEAP__NCLS][SHMHEAP__TC_CAP]; /* offsets from the heap base */
};

/* The heap's mutex (see shmheap__lock): a word any peer may write, so nothing trusts it. */
struct shmheap__mutex {
    uint64_t owner;   /* 0 = free, else the holder (see >>lock) */
    uint32_t waiters; /* lockers asleep on the owner word (a hint: they also wake up by time) */
    uint32_t tid;     /* a holder named by its lease: its thread id, 0 while it unlocks */
};

struct shmheap__hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t ready;      /* set last by the creator */
    uint64_t base, size; /* where every process maps it, and how much */
    uint64_t nspans, entries_off, bitmap_off, data_off;
    uint64_t gen;        /* generation counter of small spans (under the mutex) */
    uint64_t free_hint;  /* where to start looking for free spans (under the mutex) */
    uint64_t recoveries;
    uint64_t hdr_size;
    uint64_t tc_key;     /* random: marks blocks sitting in a thread cache (see shmheap_free) */
    uint64_t small_end;  /* 1 + the highest span ever made small (under the mutex): the search for
                            a partly free span stops there, so its cost follows use, not size */
    uint64_t reserved[2];
    char name[128];
    union { struct shmheap__mutex m; char pad[64]; } lock;
    struct { uint32_t op, cls; uint64_t span, n, gen; } journal;
    uint64_t pad2[4];
    struct shmheap__root roots[SHMHEAP__NROOTS];
    uint64_t cur[SHMHEAP__STRIPES][SHMHEAP__NCLS]; /* span + 1 | word hint << 32 */
    struct shmheap__tc tc[SHMHEAP__NTC];
};
RCP__STATIC_ASSERT(sizeof(struct shmheap__mutex) <= 64, "the lock must fit the fixed layout");
RCP__STATIC_ASSERT(sizeof(struct shmheap__root) == 64, "root layout");
RCP__STATIC_ASSERT(offsetof(struct shmheap__hdr, lock) == 256, "header layout");
RCP__STATIC_ASSERT(offsetof(struct shmheap__hdr, roots) == 384, "header layout");
RCP__STATIC_ASSERT(sizeof(struct shmheap__tc) == 2616, "thread cache layout");
RCP__STATIC_ASSERT(sizeof(struct shmheap__hdr) == 384 + 64 * 64 + 8 * 16 * 40 + 2616 * 32,
                   "header layout");

struct shmheap {
    struct shmheap__hdr *hdr;
    char *base;
    size_t size;
    uint64_t *ent; /* span table */
    uint64_t *bm;  /* bitmaps, SHMHEAP__WORDS per span */
    char *data;    /* first span */
    size_t nspans;
    int refs;
    uint64_t hid; /* unique in this process: tells a thread's binding to a closed handle apart */
    int fd;       /* kept to notice a backing file truncated under us (see shmheap__intact),
                     and to hold our live slot's lock (see shmheap__lock) */
    uint32_t live; /* our live slot, 1..SHMHEAP__LIVE_SLOTS; 0 = none */
    uint64_t hdr_data_off, data_len, tc_key; /* private copies: the shared header is not trusted */
    uint64_t lock_timeout_ms;
    struct rcp__logger log;
    dev_t dev;    /* the object behind the name, to tell a re-created name from the open one */
    ino_t ino;
    int pod_fd;   /* a heap on a descriptor: our own open of the pod, holding a read lock on its
                     entry's byte (the entry lives while anyone has the heap open) */
    char name[SHMHEAP__NAME_MAX + 16];
    int mem;      /* memory the caller mapped (shmheap__create_mem/_open_mem): never unmapped */
    int pkeyed;   /* shmheap_pkey_protect tagged pages of it (close gives them the default key) */
    struct rcp__lease *lease; /* the caller's lease, or NULL (see >>lock) */
    uint32_t lease_forks;     /* shmheap__forks when it was given: a forked child holds none */
    pthread_mutex_t watch_mu; /* watch: the leases that name thread caches, as last judged */
    struct { uint64_t tag; struct rcp__lease_seen seen; } watch[SHMHEAP__NTC];
    struct shmheap *next;
    /* >>seal: page ranges [a, e) mapped on their own (another open of the same file), so that
       sealing one again splits and merges nothing; seal_alias: 1 may add ranges, 0 may not
       (not tmpfs, /proc missing, protection keys in use), -1 not probed yet */
    pthread_mutex_t seal_mu;
    int seal_alias;
    unsigned nseal_vma;
    uintptr_t seal_vma[SHMHEAP__SEAL_VMAS][2];
};

static const uint32_t shmheap__size[SHMHEAP__NCLS] = {
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
    1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288,
    14336, 16384, 20480, 24576, 28672, 32768};
/* ceil(2^32 / size): (offset * recip) >> 32 == offset / size exactly for offsets below 2^16. */
static const uint32_t shmheap__recip[SHMHEAP__NCLS] = {
    268435456, 134217728, 89478486, 67108864, 53687092, 44739243, 38347923, 33554432, 26843546,
    22369622, 19173962, 16777216, 13421773, 11184811, 9586981, 8388608, 6710887, 5592406,
    4793491, 4194304, 3355444, 2796203, 2396746, 2097152, 1677722, 1398102, 1198373, 1048576,
    838861, 699051, 599187, 524288, 419431, 349526, 299594, 262144, 209716, 174763, 149797,
    131072};

/* >>support - private memory, logging, errors -------------------------------------------------- */

/* Private memory: every allocation of the library goes through SHMHEAP_MALLOC/SHMHEAP_FREE. */
static void *shmheap__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = SHMHEAP_MALLOC(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

static void shmheap__free(void *p)
{
    if (p) SHMHEAP_FREE(p);
}

static int shmheap__debug_env = -1; /* SHMHEAP_DEBUG, read once */

static struct rcp__logger shmheap__logger(const shmheap_opts *o)
{
    return rcp__logger_pick(o ? o->log : NULL, o ? o->log_user : NULL, &shmheap__debug_env,
                            "SHMHEAP_DEBUG", "shmheap");
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void shmheap__log(const struct rcp__logger *lg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rcp__logv(lg, level, fmt, ap);
    va_end(ap);
}

#include "impl/errors.h"

SHMHEAP_API const char *shmheap_strerror(int code)
{
    switch (code) {
#define RCP__ERROR_CASE(name, value, text) case name: return text;
#include "impl/errors.h" /* the codes of every rpcool header included before this point */
#undef RCP__ERROR_CASE
    default: return rcp__errtext(code, RCP__ERR_DECLARED);
    }
}

/* >>classes - size classes and bitmap words ---------------------------------------------------- */

static inline unsigned shmheap__cls_of(size_t n)
{
    if (n <= 128) return n ? (unsigned)((n + 15) >> 4) - 1 : 0;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1));
    return 8 + (e - 7) * 4 + (unsigned)((n - 1 - ((size_t)1 << e)) >> (e - 2));
}
static inline unsigned shmheap__nslots(unsigned c)
{
    return (unsigned)(SHMHEAP__SPAN / shmheap__size[c]);
}
static inline unsigned shmheap__nwords(unsigned c)
{
    return (shmheap__nslots(c) + SHMHEAP__BITS - 1) / SHMHEAP__BITS;
}
/* The value of word w of an empty span of class c: bits of slots past the end are set. */
static inline uint64_t shmheap__empty_word(unsigned c, unsigned w)
{
    unsigned ns = shmheap__nslots(c), first = w * SHMHEAP__BITS;
    if (first + SHMHEAP__BITS <= ns) return 0;
    if (first >= ns) return SHMHEAP__SLOTMASK;
    return SHMHEAP__SLOTMASK & ~((1ull << (ns - first)) - 1);
}

/* >>registry - process-local registry of open heaps, thread stripes ---------------------------- */

static pthread_mutex_t shmheap__reg_lock = PTHREAD_MUTEX_INITIALIZER;
static shmheap *shmheap__reg;
static RCP__THREAD_LOCAL int shmheap__stripe_tls = -1;
static RCP__THREAD_LOCAL uint32_t shmheap__tid; /* this thread's id, 0 = not read yet */
static unsigned shmheap__stripe_next;
static pthread_once_t shmheap__once = PTHREAD_ONCE_INIT;
static pthread_key_t shmheap__key;
static uint64_t shmheap__hid_next;
static uint32_t shmheap__host; /* boot id and pid namespace: pids are only compared on one host;
                                 31 bits, so that no word naming a holder by it has bit 63 set */
static uint32_t shmheap__forks; /* forks this process has been the child of (leases stay behind) */

/* Which heaps this thread has a cache in. */
struct shmheap__binding { shmheap *h; uint64_t hid; struct shmheap__tc *tc; };
static RCP__THREAD_LOCAL struct shmheap__binding shmheap__binds[SHMHEAP__NBIND];
static RCP__THREAD_LOCAL unsigned shmheap__misses;

static void shmheap__thread_exit(void *unused);
/* a handle not open (closed, or never one): see the manual's handle rule */
static inline int shmheap__closed(const shmheap *h)
{
    return rcp__handle_check(h) == RCP__H_CLOSED;
}
/* fork() while another thread holds the registry lock would leave the child a lock nobody
   releases: hold it across the fork. */
static void shmheap__atfork_prepare(void) { pthread_mutex_lock(&shmheap__reg_lock); }
static void shmheap__atfork_parent(void) { pthread_mutex_unlock(&shmheap__reg_lock); }
static void shmheap__atfork_child(void)
{
    pthread_mutex_unlock(&shmheap__reg_lock);
    /* the caches belong to the parent's pid; the child starts without */
    shmheap__stripe_tls = -1;
    shmheap__tid = 0;
    memset(shmheap__binds, 0, sizeof shmheap__binds);
    shmheap__forks++;
}
static void shmheap__init_once(void)
{
    uint32_t x = 2166136261u; /* FNV-1a */
    char id[64] = {0};
    struct stat st;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id, sizeof id, f)) id[0] = 0;
        fclose(f);
    }
    if (stat("/proc/self/ns/pid", &st) == 0)
        snprintf(id + strlen(id), sizeof id - strlen(id), "/%llu", (unsigned long long)st.st_ino);
    for (const char *c = id; *c; c++) x = (x ^ (unsigned char)*c) * 16777619u;
    x &= 0x7fffffffu;
    shmheap__host = x ? x : 1;
    pthread_key_create(&shmheap__key, shmheap__thread_exit);
    rcp__handle_init(); /* its fork handlers after ours: our lock first (as in close) */
    pthread_atfork(shmheap__atfork_prepare, shmheap__atfork_parent, shmheap__atfork_child);
}

static inline unsigned shmheap__stripe(void)
{
    int s = shmheap__stripe_tls;
    if (RCP__UNLIKELY(s < 0)) {
        unsigned n = rcp__fetch_add(&shmheap__stripe_next, 1u);
        s = (int)((n + (unsigned)getpid() * 7u) % SHMHEAP__STRIPES);
        shmheap__stripe_tls = s;
    }
    return (unsigned)s;
}

/* >>lock - the heap mutex and crash recovery --------------------------------------------------- */

static void shmheap__open_words(shmheap *h, size_t s, unsigned c)
{
    uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
    for (unsigned w = 0; w < shmheap__nwords(c); w++)
        if (rcp__load(&bm[w]) & SHMHEAP__CLOSED) rcp__store(&bm[w], shmheap__empty_word(c, w));
}

static inline int shmheap__fenced(shmheap *h);

/* Called with the mutex just taken from a dead holder. Every step under the mutex writes its
   intent first; here an unfinished allocation is undone (nobody got its pointer) and anything
   that others may already see is completed. */
static void shmheap__recover(shmheap *h)
{
    struct shmheap__hdr *H = h->hdr;
    uint64_t s = H->journal.span, n = H->journal.n;
    shmheap__log(&h->log, SHMHEAP_LOG_WARN,
                 "recovering %s after a dead lock holder (step %u span %llu)", h->name,
                 H->journal.op, (unsigned long long)s);
    if (RCP__UNLIKELY(h->lease != NULL) && shmheap__fenced(h))
        return; /* stalled past our own lease meanwhile: the next locker repairs it */
    if (s >= h->nspans || n > h->nspans - s || H->journal.cls >= SHMHEAP__NCLS)
        H->journal.op = SHMHEAP__J_NONE;
    switch (H->journal.op) {
    case SHMHEAP__J_INIT: /* entry published first, words opened after: finish opening */
        if ((rcp__load(&h->ent[s]) & ~SHMHEAP__E_HINTS) ==
            SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, H->journal.cls, H->journal.gen))
            shmheap__open_words(h, s, H->journal.cls);
        break;
    case SHMHEAP__J_RETIRE: /* words closed while empty, then entry freed: reopen if not freed */
        if (SHMHEAP__E_STATE(rcp__load(&h->ent[s])) == SHMHEAP__S_SMALL) {
            uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
            for (unsigned w = 0; w < shmheap__nwords(H->journal.cls); w++)
                rcp__fetch_and(&bm[w], ~SHMHEAP__CLOSED);
        }
        break;
    case SHMHEAP__J_LALLOC: /* the run was never handed out: undo */
    case SHMHEAP__J_LFREE:  /* the block was being freed: complete */
        for (uint64_t i = 0; i < n; i++) rcp__store(&h->ent[s + i], (uint64_t)SHMHEAP__S_FREE);
        break;
    default: break;
    }
    H->journal.op = SHMHEAP__J_NONE;
    H->recoveries++;
}

/* The heap's mutex is one word of ours, not a pthread mutex. Every process that maps the heap can
   write its header, and glibc trusts the bytes of a mutex: a peer that sets a robust mutex's type
   bits to priority-inheriting or priority-protecting makes pthread_mutex_lock abort the locking
   process on an internal assertion, and glibc writes through the robust-list links it keeps in
   the bytes of the mutexes a thread locks, so a peer writing a few bytes of its own heap could
   kill or corrupt a server that allocates there (tests/test_rpcool_fuzz.c found both: aborts,
   and a write fault inside pthread_mutex_timedlock). Here any
   value a peer writes only makes the lock look taken: a locker waits for it (at most
   lock_timeout_ms), and takes it over when the holder it names is dead, repairing the step that
   holder left unfinished (shmheap__recover) as glibc's EOWNERDEAD path did.
   The word is live slot (12 bits) | host tag (19 bits) | thread id (32 bits). The live slot is
   the handle's: every handle holds an open-file-description lock on one byte of the heap's file
   (SHMHEAP__LIVE_OFF + slot - 1, far past its end), which the kernel drops when the process
   dies, in any pid namespace, as glibc's robust list did. A holder is known dead when its slot
   byte is no longer locked, or when it has this host's tag (boot and pid namespace) and its
   thread is gone or a zombie (a forked child shares its parent's slot). A process that claims
   a slot the word still names takes the mutex over (shmheap__live_claim): the word's holder had
   that slot and is gone. A holder without a slot (the file takes no locks) in another pid
   namespace, or on another host, is waited for. The word also names a thread of ours that left
   a step under the lock through a fault its caller contained (rpcool's sandbox): that step is
   repaired the same way.
   A handle given a lease (shmheap__create_mem/_open_mem, impl/podlease.h) names its holds by the
   lease instead, in any host: the word is SHMHEAP__LW | lease tag (slot and epoch), and the
   holding thread's id sits beside it (lock.m.tid) so that threads of one process tell their
   holds apart. A locker with a lease of the same table judges the holder's lease on its own
   clock while it waits (rcp__lease_judge); once it lapsed it recovers it (its epoch moves on:
   the holder is fenced), or finds it recovered or released already, then takes the mutex over
   by compare-and-swap from the old word, repairs the step and gives the holder's thread caches
   back (shmheap__sweep_tag). A fenced holder that wakes up finds itself fenced at its next
   check: every take of the mutex and every step under it checks the lease first
   (rcp__lease_check), and its unlock is a compare-and-swap from its old word, which fails once
   the mutex was taken over. A locker without a lease waits for a holder named by a lease. A
   forked child does not hold its parent's lease: in it the handle names holds as without one. */
#define SHMHEAP__LIVE_OFF ((off_t)1 << (sizeof(off_t) * 8 - 2)) /* far past the end of any heap */
#define SHMHEAP__LIVE_SLOTS 4095u
#define SHMHEAP__LW (1ull << 63)       /* a word naming its holder by a lease tag */
#define SHMHEAP__LW_SWEEP (1ull << 62) /* a thread cache's: a sweeper empties it */
#define SHMHEAP__LW_TAG ((1ull << RCP__LEASE_TAG_BITS) - 1)
RCP__STATIC_ASSERT(RCP__LEASE_TAG_BITS <= 62, "a lease tag leaves the flag bits free");
static inline uint32_t shmheap__host19(void)
{
    return (shmheap__host & 0x7FFFFu) ? (shmheap__host & 0x7FFFFu) : 1u;
}
/* The caller's lease if this process holds it (not in a forked child), else NULL. */
static inline struct rcp__lease *shmheap__leased(const shmheap *h)
{
    return RCP__UNLIKELY(h->lease != NULL) && h->lease_forks == rcp__load(&shmheap__forks)
               ? h->lease
               : NULL;
}
static inline uint32_t shmheap__my_tid(void)
{
    if (RCP__UNLIKELY(!shmheap__tid)) shmheap__tid = (uint32_t)syscall(SYS_gettid);
    return shmheap__tid;
}
static uint64_t shmheap__lock_id(shmheap *h)
{
    struct rcp__lease *l = shmheap__leased(h);
    if (l) return SHMHEAP__LW | rcp__lease_tag(l);
    return (uint64_t)h->live << 51 | (uint64_t)shmheap__host19() << 32 | shmheap__my_tid();
}
/* 0 while this process may act on the heap: no lease, or a lease still its own (-ESTALE once
   recovered by another, -ENOENT once released). */
static inline int shmheap__fenced(shmheap *h)
{
    struct rcp__lease *l = shmheap__leased(h);
    return l ? rcp__lease_check(l) : 0;
}
/* Fenced as far as this process knows already (no look at the device: for the fast paths). */
static inline int shmheap__known_fenced(const shmheap *h)
{
    struct rcp__lease *l = shmheap__leased(h);
    return l && rcp__lease_is_fenced(l);
}

/* Is the live slot byte of slot s (1-based) locked by some process? 1 yes, 0 no, -1 unknown. */
static int shmheap__live_held(shmheap *h, uint32_t s)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = SHMHEAP__LIVE_OFF + (off_t)s - 1;
    fl.l_len = 1;
    if (h->fd < 0 || fcntl(h->fd, F_OFD_GETLK, &fl)) return -1;
    return fl.l_type != F_UNLCK;
}

/* futex operations on the thread id half of the owner word */
static inline uint32_t *shmheap__lock_futex(uint64_t *owner)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (uint32_t *)(void *)owner + 1;
#else
    return (uint32_t *)(void *)owner;
#endif
}

/* 1 if the holder named by lock word o is gone: its live slot is no longer locked (any pid
   namespace), or it is a thread of this host that no longer runs (gone, or the zombie of a
   killed process its parent has not reaped yet). */
static int shmheap__holder_dead(shmheap *h, uint64_t o)
{
    int tid = (int)(uint32_t)o, e = errno, dead = 0;
    uint32_t slot = (uint32_t)(o >> 51 & 0xFFFu);
    if (o & SHMHEAP__LW) return 0; /* named by a lease: shmheap__lease_dead judges it */
    /* our own slot: this process or a forked child of it; only the thread id can tell */
    if (slot && slot != h->live && shmheap__live_held(h, slot) == 0) return 1;
    if ((uint32_t)(o >> 32 & 0x7FFFFu) != shmheap__host19() || tid <= 0) return 0;
    if (kill(tid, 0) && errno == ESRCH) {
        dead = 1;
    } else {
        char path[48], buf[128];
        snprintf(path, sizeof path, "/proc/%d/stat", tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) close(fd);
        if (n > 0) { /* "tid (comm) S ...": the state follows the last ')' */
            buf[n] = 0;
            const char *q = strrchr(buf, ')');
            dead = q && q[1] == ' ' && (q[2] == 'Z' || q[2] == 'X');
        }
    }
    errno = e;
    return dead;
}

/* What a locker remembers of the lease that names the holder it waits for. */
struct shmheap__watch { uint64_t tag; struct rcp__lease_seen seen; };

/* 1 if the lease whose tag is tag is dead to a process holding lease l: released, recovered
   (its epoch moved on), or lapsed on our clock while w watched it, and then recovered by us. */
static int shmheap__tag_dead(shmheap *h, struct rcp__lease *l, uint64_t tag,
                             struct shmheap__watch *w)
{
    uint32_t slot = (uint32_t)(tag & 0xFFFFu) - 1u, epoch = (uint32_t)(tag >> 16);
    if (!rcp__lease_tag_alive(l, tag)) return 1; /* released, recovered, or no such slot */
    if (w->tag != tag) {
        w->tag = tag;
        memset(&w->seen, 0, sizeof w->seen);
    }
    if (rcp__lease_judge(l, slot, &w->seen) != RCP__LEASE_LAPSED ||
        rcp__lease_w_epoch(w->seen.word) != (epoch & RCP__LEASE_EPOCH_MASK))
        return !rcp__lease_tag_alive(l, tag);
    if (rcp__lease_recover(l, slot, &w->seen) == 0) {
        shmheap__log(&h->log, SHMHEAP_LOG_WARN, "%s: recovered the lapsed lease of slot %u",
                     h->name, slot);
        return 1;
    }
    return !rcp__lease_tag_alive(l, tag); /* renewed meanwhile (alive), or recovered by another */
}

/* 1 if the holder named by lock word o is dead: by its lease (with ours), else as above. */
static int shmheap__owner_dead(shmheap *h, uint64_t o, struct shmheap__watch *w)
{
    struct rcp__lease *l;
    if (!(o & SHMHEAP__LW)) return shmheap__holder_dead(h, o);
    return (l = shmheap__leased(h)) != NULL && shmheap__tag_dead(h, l, o & SHMHEAP__LW_TAG, w);
}

/* o is our own lock word: a hold of this thread's (left by a fault its caller contained), not
   another thread's of this process? Without a lease the word names the thread itself. */
static inline int shmheap__own_hold(shmheap *h, uint64_t o)
{
    return !(o & SHMHEAP__LW) || rcp__load(&h->hdr->lock.m.tid) == shmheap__my_tid();
}

static void shmheap__sweep_tag(shmheap *h, uint64_t tag);

/* Take the mutex if it is free at this moment: 1 if taken. */
static inline int shmheap__trylock(shmheap *h)
{
    uint64_t o = 0, me = shmheap__lock_id(h);
    if (!rcp__cas(&h->hdr->lock.m.owner, &o, me)) return 0;
    if (me & SHMHEAP__LW) rcp__store(&h->hdr->lock.m.tid, shmheap__my_tid());
    return 1;
}

/* Steps under the mutex are short. A process that opened a heap shared with a peer it does not
   trust can bound its wait (opts.lock_timeout_ms): a peer that stops while holding the mutex, or
   writes a holder that lives elsewhere into it, then makes our large allocations and frees fail
   with -ETIMEDOUT instead of hanging us. */
static void shmheap__unlock(shmheap *h);

static int shmheap__lock_wait(shmheap *h);

/* The mutex, or -ETIMEDOUT, or (a handle with a lease) -ESTALE once this process is fenced:
   checked before taking it and after, since waiting for it can take any time. */
static int shmheap__lock(shmheap *h)
{
    int r = shmheap__fenced(h);
    if (RCP__UNLIKELY(r)) return r;
    if (RCP__UNLIKELY(!shmheap__trylock(h)) && (r = shmheap__lock_wait(h))) return r;
    /* fenced meanwhile: the mutex stays named by our lease, dead to everyone, so that the next
       locker takes it over and repairs what a recovery of ours may have left undone */
    if (RCP__UNLIKELY(h->lease != NULL) && (r = shmheap__fenced(h))) return r;
    return 0;
}

static int shmheap__lock_wait(shmheap *h)
{
    struct shmheap__mutex *m = &h->hdr->lock.m;
    struct shmheap__watch w;
    uint64_t me = shmheap__lock_id(h), o = 0, deadline = 0;
    memset(&w, 0, sizeof w);
    if (h->lock_timeout_ms) deadline = rcp__now_ns() + h->lock_timeout_ms * 1000000ull;
    for (unsigned k = 0;; k++) {
        o = rcp__load(&m->owner);
        if (o == 0) {
            if (rcp__cas(&m->owner, &o, me)) break;
            continue;
        }
        if (k >= 64 && (o == me ? shmheap__own_hold(h, o) : shmheap__owner_dead(h, o, &w))) {
            if (!rcp__cas(&m->owner, &o, me)) continue; /* another locker took it over first */
            if (me & SHMHEAP__LW) rcp__store(&m->tid, shmheap__my_tid());
            shmheap__recover(h);
            if ((o & SHMHEAP__LW) && o != me) shmheap__sweep_tag(h, o & SHMHEAP__LW_TAG);
            return 0;
        }
        if (k < 64) { /* holders are quick: spin a little first */
            rcp__cpu_relax();
            continue;
        }
        uint64_t now = rcp__now_ns();
        uint64_t slice = 10000000ull; /* look at the holder again after 10 ms */
        if (deadline && now >= deadline) {
            shmheap__log(&h->log, SHMHEAP_LOG_WARN, "%s: lock held for over %llu ms (holder %llx)",
                         h->name, (unsigned long long)h->lock_timeout_ms, (unsigned long long)o);
            return -ETIMEDOUT;
        }
        if (h->mem) slice = SHMHEAP__MEM_NAP_NS; /* no futex crosses kernels: look again soon */
        if (deadline && deadline - now < slice) slice = deadline - now;
        if (h->mem) {
            struct timespec ts = {0, (long)slice};
            nanosleep(&ts, NULL);
            continue;
        }
        __atomic_fetch_add(&m->waiters, 1u, __ATOMIC_SEQ_CST);
        rcp__futex_wait(shmheap__lock_futex(&m->owner), (uint32_t)o, slice);
        __atomic_fetch_sub(&m->waiters, 1u, __ATOMIC_SEQ_CST);
    }
    if (me & SHMHEAP__LW) rcp__store(&m->tid, shmheap__my_tid());
    return 0;
}

static void shmheap__unlock(shmheap *h)
{
    struct shmheap__mutex *m = &h->hdr->lock.m;
    if (RCP__UNLIKELY(h->lease != NULL)) {
        uint64_t me = shmheap__lock_id(h);
        if (me & SHMHEAP__LW) {
            /* only our own word: a holder that was fenced and taken over frees nothing */
            if (rcp__load(&m->owner) == me) rcp__store(&m->tid, 0u);
            if (!__atomic_compare_exchange_n(&m->owner, &me, (uint64_t)0, 0, __ATOMIC_SEQ_CST,
                                             __ATOMIC_SEQ_CST))
                shmheap__log(&h->log, SHMHEAP_LOG_ERROR,
                             "%s: fenced: the mutex was taken over from this process", h->name);
            if (__atomic_load_n(&m->waiters, __ATOMIC_SEQ_CST))
                rcp__futex_wake(shmheap__lock_futex(&m->owner), INT_MAX);
            return;
        }
    }
    /* free, then look for sleepers: seq_cst against a locker's count before its futex wait */
    __atomic_store_n(&m->owner, (uint64_t)0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->waiters, __ATOMIC_SEQ_CST))
        rcp__futex_wake(shmheap__lock_futex(&m->owner), INT_MAX);
}

/* Give a new handle its live slot: the first byte of SHMHEAP__LIVE_SLOTS this process can lock
   (none: h->live stays 0, and only the thread id names our holders). A mutex whose word still
   names the slot we got was held by a process that died with it: repair and free it now, as
   nobody else can tell it is dead any more. */
static void shmheap__live_claim(shmheap *h)
{
    struct flock fl;
    for (uint32_t s = 1; s <= SHMHEAP__LIVE_SLOTS && h->fd >= 0; s++) {
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = SHMHEAP__LIVE_OFF + (off_t)s - 1;
        fl.l_len = 1;
        if (fcntl(h->fd, F_OFD_SETLK, &fl) == 0) { h->live = s; break; }
        if (errno != EAGAIN && errno != EACCES) break; /* the file takes no locks */
    }
    if (!h->live) return;
    struct shmheap__mutex *m = &h->hdr->lock.m;
    uint64_t o = rcp__load(&m->owner);
    if (o && !(o & SHMHEAP__LW) && (uint32_t)(o >> 51 & 0xFFFu) == h->live &&
        rcp__cas(&m->owner, &o, shmheap__lock_id(h))) {
        shmheap__log(&h->log, SHMHEAP_LOG_WARN,
                     "%s: took over the mutex of a dead holder in live slot %u", h->name, h->live);
        shmheap__recover(h);
        shmheap__unlock(h);
    }
}

/* The intent record of a step under the mutex, written before the step. 0, or (a handle with a
   lease) -ESTALE when this process is fenced: then it must not take the step. */
static inline int shmheap__journal(shmheap *h, uint32_t op, uint64_t span, uint64_t n,
                                   uint32_t cls, uint64_t gen)
{
    struct shmheap__hdr *H = h->hdr;
    int r = RCP__UNLIKELY(h->lease != NULL) ? shmheap__fenced(h) : 0;
    if (r) return r;
    H->journal.span = span;
    H->journal.n = n;
    H->journal.cls = cls;
    H->journal.gen = gen;
    rcp__store(&H->journal.op, op);
    return 0;
}
static inline void shmheap__journal_done(shmheap *h)
{
    rcp__store(&h->hdr->journal.op, (uint32_t)SHMHEAP__J_NONE);
}

/* >>spans - spans (all under the mutex) -------------------------------------------------------- */

static unsigned shmheap__span_free_slots(shmheap *h, size_t s, unsigned c)
{
    const uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
    unsigned n = 0;
    for (unsigned w = 0; w < shmheap__nwords(c); w++) {
        uint64_t v = rcp__load_relaxed(&bm[w]);
        if (!(v & SHMHEAP__CLOSED)) n += (unsigned)__builtin_popcountll(~v & SHMHEAP__SLOTMASK);
    }
    return n;
}

/* A span of class c with at least min_free free slots, starting after `after`; with_full also
   looks at spans whose FULL hint is set (the hint can be stale). Sets the hint on full spans it
   passes. Asking for a quarter of a span keeps a thread from hopping between nearly full spans,
   one slow path per allocation. The span found is marked as stripe st's.
   mine_only: only a span stripe st took last, or an empty one no other stripe allocates from.
   A thread frees mostly what it allocated, so stripes that keep to their own spans rarely write
   the same bitmap word: with any span taken, two threads of bench/shmheap_alloc's mixed sizes
   ran slower than one. */
static long shmheap__find_partial(shmheap *h, unsigned c, size_t after, unsigned min_free,
                                  int with_full, unsigned st, int mine_only)
{
    uint64_t own = (uint64_t)(st + 1) << SHMHEAP__E_OWN_SHIFT;
    uint64_t end = rcp__load(&h->hdr->small_end);
    uint32_t busy[SHMHEAP__STRIPES]; /* the current spans of the other stripes, + 1 */
    unsigned nbusy = 0, nslots = shmheap__nslots(c);
    if (mine_only)
        for (unsigned i = 0; i < SHMHEAP__STRIPES; i++)
            if (i != st) busy[nbusy++] = (uint32_t)rcp__load_relaxed(&h->hdr->cur[i][c]);
    uint64_t *ent = h->ent; /* a local: the acquire loads below would reload h->ent each time */
    /* No span past small_end was ever small; with_full (a last resort) looks at every span, in
       case a peer scribbled small_end. (Reading a span table page never written allocates it,
       in /dev/shm.) */
    size_t n = with_full || end > h->nspans ? h->nspans : (size_t)end, s;
    if (!n) return -1;
    s = after % n;
    for (size_t k = 1; k <= n; k++) {
        if (++s == n) s = 0; /* not (after + k) % n: a division per span was most of the scan */
        uint64_t e = rcp__load(&ent[s]);
        if (SHMHEAP__E_STATE(e) != SHMHEAP__S_SMALL || SHMHEAP__E_CLS(e) != c) continue;
        if ((e & SHMHEAP__E_FULL) && !with_full) continue;
        int mine = (e & SHMHEAP__E_OWN) == own;
        unsigned nfree = shmheap__span_free_slots(h, s, c);
        if (!nfree && !(e & SHMHEAP__E_FULL))
            rcp__cas(&ent[s], &e, e | SHMHEAP__E_FULL); /* only on this span's entry */
        if (nfree < min_free || (mine_only && !mine && nfree < nslots)) continue;
        if (mine_only && !mine) {
            unsigned i = 0;
            while (i < nbusy && busy[i] != (uint32_t)(s + 1)) i++;
            if (i < nbusy) continue;
        }
        /* clear FULL and name this stripe; if the entry changes meanwhile, leave it */
        uint64_t want = (e & ~SHMHEAP__E_HINTS) | own;
        while (e != want && ((e ^ want) & ~SHMHEAP__E_HINTS) == 0 &&
               !rcp__cas(&ent[s], &e, want)) {}
        return (long)s;
    }
    return -1;
}

/* The first run of n free spans whose address is a multiple of align (>= span size). */
static long shmheap__find_free_run(shmheap *h, size_t n, size_t align)
{
    size_t step = align >> SHMHEAP__SPAN_SHIFT, start = 0, s;
    if (step > 1) {
        uintptr_t d = (uintptr_t)h->data;
        start = ((align - d % align) % align) >> SHMHEAP__SPAN_SHIFT;
    } else {
        step = 1;
        if (n == 1 && h->hdr->free_hint < h->nspans) start = h->hdr->free_hint;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (s = start; s + n <= h->nspans; s += step) {
            size_t i = 0;
            while (i < n && SHMHEAP__E_STATE(rcp__load(&h->ent[s + i])) == SHMHEAP__S_FREE) i++;
            if (i == n) {
                if (step == 1) h->hdr->free_hint = s + n;
                return (long)s;
            }
            if (step == 1) s += i; /* skip past the span that stopped us */
        }
        if (step != 1 || start == 0) break;
        start = 0; /* the hint may have skipped free spans: one more pass from the start */
    }
    return -1;
}

/* Give [off, off+len) of a heap's file its memory before it is first written, so that a full
   tmpfs (or disk) is SHMHEAP_E_FULL here and never SIGBUS at the first touch. 0, or
   SHMHEAP_E_FULL; a backing that reserves nothing (a device, a read-only open) answers 0. */
static int shmheap__reserve_fd(int fd, uint64_t off, uint64_t len)
{
    uint64_t a = off & ~(uint64_t)4095, e = (off + len + 4095) & ~(uint64_t)4095;
    int r;
    if (fd < 0 || e <= a) return 0;
    while ((r = fallocate(fd, 0, (off_t)a, (off_t)(e - a))) && errno == EINTR) {}
    return r && (errno == ENOSPC || errno == EDQUOT || errno == EFBIG) ? SHMHEAP_E_FULL : 0;
}

/* 1 if span s's bitmap words have memory (reserved now if not): 0 on a full file system for
   words never written, which are zero (reading them would fault). *last: the last page found
   backed (one system call per page). */
static int shmheap__words_backed(shmheap *h, size_t s, uint64_t *last)
{
    uint64_t off = (uint64_t)((char *)(h->bm + s * SHMHEAP__WORDS) - h->base);
    uint64_t end = off + (uint64_t)SHMHEAP__WORDS * 8 - 1;
    if (*last && off >> 12 == *last - 1 && end >> 12 == *last - 1) return 1;
    if (shmheap__reserve_fd(h->fd, off, end + 1 - off)) return 0;
    *last = (end >> 12) + 1;
    return 1;
}

/* Spans [s, s+n) are about to be used: their data, and their bitmap words if they become
   small. */
static int shmheap__reserve(shmheap *h, size_t s, size_t n, int small)
{
    if (shmheap__reserve_fd(h->fd, (uint64_t)((char *)(h->ent + s) - h->base), (uint64_t)n * 8))
        return SHMHEAP_E_FULL;
    if (small && shmheap__reserve_fd(h->fd, (uint64_t)((char *)(h->bm + s * SHMHEAP__WORDS) -
                                                       h->base),
                                     (uint64_t)n * SHMHEAP__WORDS * 8))
        return SHMHEAP_E_FULL;
    return shmheap__reserve_fd(h->fd, h->hdr_data_off + ((uint64_t)s << SHMHEAP__SPAN_SHIFT),
                               (uint64_t)n << SHMHEAP__SPAN_SHIFT);
}

/* A span never used since a fresh heap was made (shmheap__format) has zero words, which would
   look open and empty to an allocator that finds its entry made small before its words are
   opened: init_span closes them first. Nobody touches the words of a span that is not small. */
static void shmheap__close_fresh_words(shmheap *h, size_t s)
{
    uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
    for (unsigned w = 0; w < SHMHEAP__WORDS; w++)
        if (!rcp__load_relaxed(&bm[w])) rcp__store_relaxed(&bm[w], SHMHEAP__CLOSED);
}

static long shmheap__init_span(shmheap *h, unsigned c, unsigned st)
{
    long s = shmheap__find_free_run(h, 1, 0);
    if (s < 0 || shmheap__reserve(h, (size_t)s, 1, 1)) return -1;
    uint64_t gen = (rcp__load(&h->hdr->gen) + 1) & 0xffffffffu;
    if (shmheap__journal(h, SHMHEAP__J_INIT, (uint64_t)s, 1, c, gen)) return -1; /* fenced */
    rcp__store(&h->hdr->gen, gen);
    shmheap__close_fresh_words(h, (size_t)s);
    if ((uint64_t)s + 1 > h->hdr->small_end) rcp__store(&h->hdr->small_end, (uint64_t)s + 1);
    /* Publish the entry before opening words: an allocator whose CAS lands on an opened word
       then reads this entry (and not an older one) when it validates. */
    uint64_t own = (uint64_t)(st + 1) << SHMHEAP__E_OWN_SHIFT;
    rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_SMALL, c, gen) | own);
    shmheap__open_words(h, (size_t)s, c);
    shmheap__journal_done(h);
    return s;
}

/* Return empty small spans to the free pool: close each word while it is empty (CAS), so no
   allocator can take a slot meanwhile; reopen them if one was taken. */
static int shmheap__retire_empty(shmheap *h)
{
    int n = 0;
    for (size_t s = 0; s < h->nspans; s++) {
        uint64_t e = rcp__load(&h->ent[s]);
        if (SHMHEAP__E_STATE(e) != SHMHEAP__S_SMALL || SHMHEAP__E_CLS(e) >= SHMHEAP__NCLS) continue;
        unsigned c = SHMHEAP__E_CLS(e), nw = shmheap__nwords(c), w;
        uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
        if (shmheap__journal(h, SHMHEAP__J_RETIRE, s, 1, c, 0)) break; /* fenced */
        for (w = 0; w < nw; w++) {
            uint64_t empty = shmheap__empty_word(c, w);
            if (!rcp__cas(&bm[w], &empty, empty | SHMHEAP__CLOSED)) break;
        }
        if (w == nw) {
            rcp__store(&h->ent[s], (uint64_t)SHMHEAP__S_FREE);
            n++;
        } else {
            while (w-- > 0) rcp__fetch_and(&bm[w], ~SHMHEAP__CLOSED);
        }
        shmheap__journal_done(h);
    }
    if (n) h->hdr->free_hint = 0;
    return n;
}

static int shmheap__sweep(shmheap *h);

/* Slow path of a small allocation: give stripe st a span of class c with room. In order: a
   partly free span of this stripe's (no lock: it only reads, and sets hints atomically), a free
   span, a partly free span of another stripe's, empty spans retired and a free span, any span
   with a free slot, the caches of dead processes. Taking a free span or retiring empty ones
   needs the mutex; while another holds it, another stripe's span is taken first, without it. */
static int shmheap__refill(shmheap *h, unsigned c, unsigned st, uint64_t seen)
{
    int r;
    uint64_t *curp = &h->hdr->cur[st][c];
    size_t after = (uint32_t)seen ? ((uint32_t)seen - 1) % h->nspans : 0;
    unsigned quarter = shmheap__nslots(c) / 4;
    if (!quarter) quarter = 1;
    long s = shmheap__find_partial(h, c, after, quarter, 0, st, 1);
    if (s < 0 && !shmheap__trylock(h)) {
        /* the mutex is busy (maybe held by a stuck peer): share another stripe's span rather
           than wait */
        s = shmheap__find_partial(h, c, after, quarter, 0, st, 0);
        if (s < 0 && (r = shmheap__lock(h))) return r;
    }
    if (s >= 0) {
        rcp__cas(curp, &seen, (uint64_t)s + 1); /* lost to a thread of this stripe: fine too */
        return 0;
    }
    if (rcp__load(curp) != seen) { /* a thread of this stripe did it */
        shmheap__unlock(h);
        return 0;
    }
    s = shmheap__init_span(h, c, st);
    if (s < 0) s = shmheap__find_partial(h, c, after, quarter, 0, st, 0);
    if (s < 0 && shmheap__retire_empty(h)) s = shmheap__init_span(h, c, st);
    if (s < 0) s = shmheap__find_partial(h, c, after, 1, 1, st, 0);
    if (s < 0 && shmheap__sweep(h)) s = shmheap__find_partial(h, c, after, 1, 1, st, 0);
    if (s >= 0) rcp__store(curp, (uint64_t)s + 1);
    shmheap__unlock(h);
    if (s < 0 && RCP__UNLIKELY(h->lease != NULL) && (r = shmheap__fenced(h))) return r;
    return s < 0 ? SHMHEAP_E_FULL : 0;
}

/* >>cache - thread caches ---------------------------------------------------------------------- */

/* Give a small block back to its bitmap: one atomic AND. */
static int shmheap__slot_free(shmheap *h, size_t s, uint64_t e, unsigned idx)
{
    uint64_t bit = 1ull << (idx % SHMHEAP__BITS);
    uint64_t old = rcp__fetch_and(&h->bm[s * SHMHEAP__WORDS + idx / SHMHEAP__BITS], ~bit);
    if (!(old & bit)) return SHMHEAP_E_DOUBLEFREE;
    if (RCP__UNLIKELY(e & SHMHEAP__E_FULL)) rcp__fetch_and(&h->ent[s], ~SHMHEAP__E_FULL);
    return 0;
}

static int shmheap__locate(const shmheap *h, const void *p, size_t *span, uint64_t *entry,
                           unsigned *slot);

/* Empty a cache into the bitmaps. The count drops before each block goes back, so a flusher
   that dies in between leaks a block rather than freeing it twice. */
static void shmheap__tc_flush(shmheap *h, struct shmheap__tc *tc)
{
    for (unsigned c = 0; c < SHMHEAP__NCLS; c++) {
        unsigned n;
        while ((n = rcp__load(&tc->n[c])) > 0) {
            if (n > SHMHEAP__TC_CAP) { /* damaged: drop */
                rcp__store(&tc->n[c], (uint8_t)0);
                break;
            }
            rcp__store(&tc->n[c], (uint8_t)(n - 1));
            uint64_t off = rcp__load(&tc->off[c][n - 1]);
            size_t s;
            uint64_t e;
            unsigned idx;
            if (off < h->size && !shmheap__locate(h, h->base + off, &s, &e, &idx) &&
                SHMHEAP__E_STATE(e) == SHMHEAP__S_SMALL && SHMHEAP__E_CLS(e) == c) {
                *(uint64_t *)(h->base + off) = 0; /* no longer cached */
                shmheap__slot_free(h, s, e, idx);
            }
        }
    }
}

static void shmheap__tc_release(shmheap *h, struct shmheap__tc *tc)
{
    shmheap__tc_flush(h, tc);
    rcp__store(&tc->owner, (uint64_t)0);
}


/* The owner word of this process's thread caches: its lease's, or its host's and pid. */
static inline uint64_t shmheap__tc_me(const shmheap *h)
{
    struct rcp__lease *l = shmheap__leased(h);
    return l ? SHMHEAP__LW | rcp__lease_tag(l) : (uint64_t)shmheap__host << 32 | (uint32_t)getpid();
}

/* Give back the cache tc, whose owner word was o, if the sweeper's compare-and-swap wins. */
static int shmheap__tc_reap(shmheap *h, struct shmheap__tc *tc, uint64_t o, uint64_t mark)
{
    if (!rcp__cas(&tc->owner, &o, mark)) return 0;
    shmheap__tc_release(h, tc);
    return 1;
}

/* This process gives its own cache back. A cache named by a lease is first marked by
   compare-and-swap from our word: it fails once a sweeper took the cache (we were fenced). */
static void shmheap__tc_giveback(shmheap *h, struct shmheap__tc *tc)
{
    uint64_t o = rcp__load(&tc->owner);
    if (!(o & SHMHEAP__LW)) shmheap__tc_release(h, tc);
    else if (o == shmheap__tc_me(h) && !(o & SHMHEAP__LW_SWEEP))
        shmheap__tc_reap(h, tc, o, o | SHMHEAP__LW_SWEEP);
}

/* Give back the caches named by lease tag (its holder is dead). */
static void shmheap__sweep_tag(shmheap *h, uint64_t tag)
{
    struct rcp__lease *l = shmheap__leased(h);
    for (int i = 0; i < SHMHEAP__NTC && l; i++) {
        struct shmheap__tc *tc = &h->hdr->tc[i];
        uint64_t o = rcp__load(&tc->owner);
        if ((o & ~SHMHEAP__LW_SWEEP) == (SHMHEAP__LW | tag) &&
            shmheap__tc_reap(h, tc, o, SHMHEAP__LW | SHMHEAP__LW_SWEEP | rcp__lease_tag(l)))
            shmheap__log(&h->log, SHMHEAP_LOG_INFO,
                         "gave back a thread cache of the dead lease %llx",
                         (unsigned long long)tag);
    }
}

/* Caches named by a lease: given back when that lease is dead to ours (released, recovered, or
   lapsed while this handle watched it across sweeps: each sweep judges it once). */
static int shmheap__sweep_leases(shmheap *h)
{
    struct rcp__lease *l = shmheap__leased(h);
    int n = 0;
    if (!l || pthread_mutex_trylock(&h->watch_mu)) return 0; /* another thread sweeps */
    uint64_t mine = rcp__lease_tag(l);
    for (int i = 0; i < SHMHEAP__NTC; i++) {
        struct shmheap__tc *tc = &h->hdr->tc[i];
        uint64_t o = rcp__load(&tc->owner), tag = o & SHMHEAP__LW_TAG;
        if (!(o & SHMHEAP__LW) || tag == mine) continue; /* a dead sweeper's: swept again */
        struct shmheap__watch w = {h->watch[i].tag, h->watch[i].seen};
        if (shmheap__tag_dead(h, l, tag, &w) &&
            shmheap__tc_reap(h, tc, o, SHMHEAP__LW | SHMHEAP__LW_SWEEP | mine))
            n++;
        h->watch[i].tag = w.tag;
        h->watch[i].seen = w.seen;
    }
    pthread_mutex_unlock(&h->watch_mu);
    return n;
}

/* Give back the caches of dead processes: of this host, and by their leases. */
static int shmheap__sweep(shmheap *h)
{
    int n = shmheap__sweep_leases(h);
    uint64_t me = (uint64_t)shmheap__host << 32 | 0x80000000u | (uint32_t)getpid();
    for (int i = 0; i < SHMHEAP__NTC; i++) {
        struct shmheap__tc *tc = &h->hdr->tc[i];
        uint64_t o = rcp__load(&tc->owner);
        pid_t pid = (pid_t)(o & 0x7fffffff);
        if (!o || (o & SHMHEAP__LW) || (uint32_t)(o >> 32) != shmheap__host || pid == getpid())
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) continue;
        if (!rcp__cas(&tc->owner, &o, me)) continue;
        shmheap__log(&h->log, SHMHEAP_LOG_INFO, "giving back the thread cache of dead process %d",
                     (int)pid);
        shmheap__tc_release(h, tc);
        n++;
    }
    return n;
}

static struct shmheap__tc *shmheap__tc_claim(shmheap *h)
{
    uint64_t me = shmheap__tc_me(h);
    if (RCP__UNLIKELY(h->lease != NULL) && shmheap__fenced(h)) return NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < SHMHEAP__NTC; i++) {
            struct shmheap__tc *tc = &h->hdr->tc[i];
            uint64_t zero = 0;
            if (rcp__load_relaxed(&tc->owner) == 0 && rcp__cas(&tc->owner, &zero, me)) {
                tc->tid = (uint32_t)syscall(SYS_gettid);
                return tc;
            }
        }
        if (!shmheap__sweep(h)) break;
    }
    return NULL;
}

/* A peer can truncate the file under a heap; touching the lost pages would raise SIGBUS. The
   library's own housekeeping (cache release on close, eviction, thread exit) checks first. */
static int shmheap__intact(const shmheap *h)
{
    struct stat st;
    if (h->fd < 0 || fstat(h->fd, &st)) return 1;
    return !S_ISREG(st.st_mode) || (size_t)st.st_size >= h->size;
}

static int shmheap__is_open(const shmheap *h, uint64_t hid)
{
    for (shmheap *x = shmheap__reg; x; x = x->next)
        if (x == h && x->hid == hid) return shmheap__intact(x);
    return 0;
}

/* Drop bindings of this thread (to h, or all if h is NULL), giving their caches back. */
static void shmheap__unbind(shmheap *h)
{
    pthread_mutex_lock(&shmheap__reg_lock);
    for (int i = 0; i < SHMHEAP__NBIND; i++) {
        struct shmheap__binding *b = &shmheap__binds[i];
        if (!b->h || (h && b->h != h)) continue;
        if (b->tc && shmheap__is_open(b->h, b->hid)) shmheap__tc_giveback(b->h, b->tc);
        memset(b, 0, sizeof *b);
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
}

static void shmheap__thread_exit(void *unused)
{
    (void)unused;
    shmheap__unbind(NULL);
}

/* This thread's cache in h, binding one if there is room. A thread that works with more heaps
   than it has bindings uses the atomic path for the others, and moves its least recently used
   binding only now and then, so that round-robin use of many heaps does not thrash. */
static struct shmheap__tc *shmheap__tc_bind(shmheap *h)
{
    struct shmheap__binding *b = shmheap__binds, t;
    int i;
    for (i = 1; i < SHMHEAP__NBIND; i++)
        if (b[i].h == h && b[i].hid == h->hid) break;
    if (i == SHMHEAP__NBIND) {
        if (b[SHMHEAP__NBIND - 1].h && (++shmheap__misses & 255)) return NULL;
        i = SHMHEAP__NBIND - 1;
        if (b[i].h) {
            struct shmheap__binding *keep = &b[i];
            pthread_mutex_lock(&shmheap__reg_lock);
            if (keep->tc && shmheap__is_open(keep->h, keep->hid))
                shmheap__tc_giveback(keep->h, keep->tc);
            pthread_mutex_unlock(&shmheap__reg_lock);
        }
        b[i].h = h;
        b[i].hid = h->hid;
        b[i].tc = shmheap__tc_claim(h);
        pthread_setspecific(shmheap__key, (void *)1); /* arms the thread-exit destructor */
    }
    t = b[i]; /* most recently used first */
    memmove(&b[1], &b[0], (size_t)i * sizeof *b);
    b[0] = t;
    return t.tc;
}

/* A handle with a lease uses its cache only while the cache is still named by its lease and
   the lease is not known fenced: a cache given back after this process was recovered is
   another's (the owner word is read before each use, the fence flag is this process's own). */
static inline struct shmheap__tc *shmheap__tc_leased(shmheap *h, struct shmheap__tc *tc)
{
    struct rcp__lease *l = shmheap__leased(h);
    if (!tc || !l) return tc;
    if (rcp__lease_is_fenced(l) || rcp__load(&tc->owner) != (SHMHEAP__LW | rcp__lease_tag(l)))
        return NULL;
    return tc;
}

static inline struct shmheap__tc *shmheap__tc_get(shmheap *h)
{
    struct shmheap__tc *tc;
    if (RCP__LIKELY(shmheap__binds[0].h == h && shmheap__binds[0].hid == h->hid))
        tc = shmheap__binds[0].tc;
    else
        tc = shmheap__tc_bind(h);
    return RCP__UNLIKELY(h->lease != NULL) ? shmheap__tc_leased(h, tc) : tc;
}

/* >>alloc - allocation and freeing ------------------------------------------------------------- */

/* NULL: full, or (*err, when err is given) -ETIMEDOUT: a refill waited lock_timeout_ms */
static void *shmheap__small_alloc(shmheap *h, unsigned c, int *err)
{
    if (RCP__UNLIKELY(h->lease != NULL) && shmheap__known_fenced(h)) {
        if (err) *err = RCP__LEASE_E_FENCED;
        return NULL;
    }
    struct shmheap__tc *tc = c < SHMHEAP__TC_CLS ? shmheap__tc_get(h) : NULL;
    if (tc && tc->n[c]) {
        unsigned n = tc->n[c] - 1u;
        uint64_t off = n < SHMHEAP__TC_CAP ? tc->off[c][n] : 0;
        rcp__store(&tc->n[c], (uint8_t)n); /* a crash from here on leaks this block, no worse */
        /* The cache lives in shared memory: a peer that scribbles on it must not steer us out of
           the data area, nor off the start of a slot of class c. A block at any other offset
           would be misaligned: undefined behaviour in our store below and in every caller's
           (a fault for atomics on aarch64); tests/test_rpcool_fuzz.c made a server crash so. */
        uint64_t rel = off - h->hdr_data_off;
        uint32_t so = (uint32_t)(rel & (SHMHEAP__SPAN - 1)), sz = shmheap__size[c];
        if (RCP__LIKELY(rel <= h->data_len - sz && so <= SHMHEAP__SPAN - sz &&
                        (uint32_t)(((uint64_t)so * shmheap__recip[c]) >> 32) * sz == so)) {
            *(uint64_t *)(h->base + off) = 0; /* no longer cached */
            return h->base + off;
        }
        rcp__store(&tc->n[c], (uint8_t)0);
    }
    unsigned st = shmheap__stripe();
    uint64_t *curp = &h->hdr->cur[st][c];
    for (int attempt = 0; attempt < 8; attempt++) {
        uint64_t cv = rcp__load_relaxed(curp);
        size_t s = (size_t)(uint32_t)cv - 1;
        if ((uint32_t)cv && s < h->nspans) {
            uint64_t e1 = rcp__load(&h->ent[s]);
            if (SHMHEAP__E_STATE(e1) == SHMHEAP__S_SMALL && SHMHEAP__E_CLS(e1) == c) {
                uint64_t *bm = h->bm + s * SHMHEAP__WORDS;
                unsigned nw = shmheap__nwords(c), w0 = (unsigned)(cv >> 32);
                if (w0 >= nw) w0 = 0;
                for (unsigned k = 0, w = w0; k < nw; k++, w = (w + 1 == nw) ? 0 : w + 1) {
                    uint64_t v = rcp__load_relaxed(&bm[w]);
                    while (!(v & SHMHEAP__CLOSED) && (~v & SHMHEAP__SLOTMASK)) {
                        unsigned b = (unsigned)__builtin_ctzll(~v & SHMHEAP__SLOTMASK);
                        uint64_t bit = 1ull << b;
                        if (RCP__UNLIKELY(w * SHMHEAP__BITS + b >= shmheap__nslots(c)))
                            break; /* scribbled tail */
                        if (!rcp__cas(&bm[w], &v, v | bit)) continue;
                        if ((rcp__load(&h->ent[s]) ^ e1) & ~SHMHEAP__E_HINTS) {
                            /* the span changed hands under us: give the bit back */
                            rcp__fetch_and(&bm[w], ~bit);
                            goto slow;
                        }
                        if (w != w0)
                            rcp__store_relaxed(curp, (cv & 0xffffffffu) | ((uint64_t)w << 32));
                        return h->data + (s << SHMHEAP__SPAN_SHIFT) +
                               (size_t)(w * SHMHEAP__BITS + b) * shmheap__size[c];
                    }
                }
                if (!(e1 & SHMHEAP__E_FULL))
                    rcp__cas(&h->ent[s], &e1, e1 | SHMHEAP__E_FULL); /* not on a reused entry */
            }
        }
    slow:;
        int r = shmheap__refill(h, c, st, cv);
        if (r < 0 && r != SHMHEAP_E_FULL) { /* the heap's mutex timed out: not a full heap */
            if (err) *err = r;
            return NULL;
        }
        if (r < 0) {
            /* full: what this thread keeps in its cache is all there is left to try */
            struct shmheap__tc *mine = shmheap__tc_get(h);
            if (!mine || attempt > 0) return NULL;
            shmheap__tc_flush(h, mine);
        }
    }
    return NULL;
}

/* *err: SHMHEAP_E_FULL, or the lock's error (-ETIMEDOUT after lock_timeout_ms) */
static void *shmheap__large_alloc(shmheap *h, size_t size, size_t align, int *err)
{
    size_t n = size ? (size + SHMHEAP__SPAN - 1) >> SHMHEAP__SPAN_SHIFT : 1;
    if (align < SHMHEAP__SPAN) align = SHMHEAP__SPAN;
    *err = SHMHEAP_E_FULL;
    if (n > h->nspans || (*err = shmheap__lock(h))) return NULL;
    *err = SHMHEAP_E_FULL;
    long s = shmheap__find_free_run(h, n, align);
    if (s < 0 && shmheap__retire_empty(h)) s = shmheap__find_free_run(h, n, align);
    if (s < 0) { /* full: blocks held in this thread's cache and dead processes' caches go back */
        for (int i = 0; i < SHMHEAP__NBIND; i++)
            if (shmheap__binds[i].h == h && shmheap__binds[i].hid == h->hid && shmheap__binds[i].tc)
                shmheap__tc_flush(h, shmheap__binds[i].tc);
        shmheap__sweep(h);
        if (shmheap__retire_empty(h)) s = shmheap__find_free_run(h, n, align);
    }
    if (s >= 0 && shmheap__reserve(h, (size_t)s, n, 0)) s = -1; /* the file system is full */
    SHMHEAP__TEST_HOOK(h, "lalloc-locked");
    if (s >= 0 && (*err = shmheap__journal(h, SHMHEAP__J_LALLOC, (uint64_t)s, n, 0, 0)))
        s = -1; /* fenced */
    if (s >= 0) {
        for (size_t i = 1; i < n; i++) {
            rcp__store(&h->ent[(size_t)s + i], SHMHEAP__E_MAKE(SHMHEAP__S_CONT, 0, i));
            if (i == 1) SHMHEAP__TEST_HOOK(h, "lalloc-step");
        }
        rcp__store(&h->ent[s], SHMHEAP__E_MAKE(SHMHEAP__S_HEAD, 0, n));
        shmheap__journal_done(h);
    }
    shmheap__unlock(h);
    return s < 0 ? NULL : h->data + ((size_t)s << SHMHEAP__SPAN_SHIFT);
}

SHMHEAP_API int shmheap_alloc(shmheap *h, size_t size, size_t align, void **out)
{
    void *p = NULL;
    int err = SHMHEAP_E_FULL;
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    if (!h) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    if (align == 0) align = 16;
    if (align & (align - 1)) return SHMHEAP_E_INVAL;
    if (size > h->size) return SHMHEAP_E_FULL;
    if (size <= SHMHEAP__MAX_SMALL && align <= SHMHEAP__MAX_SMALL) {
        unsigned c = shmheap__cls_of(size);
        while (shmheap__size[c] % align) c++; /* ends at a power of two >= align at the latest */
        p = shmheap__small_alloc(h, c, &err);
    } else {
        p = shmheap__large_alloc(h, size, align, &err);
    }
    if (!p) return err;
    *out = p;
    return 0;
}

SHMHEAP_API void *shmheap_malloc(shmheap *h, size_t size)
{
    if (h && RCP__UNLIKELY(shmheap__closed(h))) {
        errno = EBADF;
        return NULL;
    }
    if (RCP__LIKELY(h && size <= SHMHEAP__MAX_SMALL)) {
        int err = SHMHEAP_E_FULL;
        void *p = shmheap__small_alloc(h, shmheap__cls_of(size), &err);
        if (!p) errno = err == -ETIMEDOUT ? ETIMEDOUT : err == -ESTALE ? ESTALE : ENOMEM;
        return p;
    }
    void *p;
    int r = shmheap_alloc(h, size, 0, &p);
    if (r)
        errno = r == -ETIMEDOUT ? ETIMEDOUT : r == -ESTALE ? ESTALE
                : r == SHMHEAP_E_BADHANDLE ? EBADF : ENOMEM;
    return p;
}

SHMHEAP_API void *shmheap_aligned_alloc(shmheap *h, size_t align, size_t size)
{
    void *p;
    int r = shmheap_alloc(h, size, align, &p);
    if (r) errno = r == SHMHEAP_E_INVAL ? EINVAL : r == SHMHEAP_E_BADHANDLE ? EBADF : ENOMEM;
    return p;
}

SHMHEAP_API void *shmheap_calloc(shmheap *h, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) { errno = ENOMEM; return NULL; }
    void *p = shmheap_malloc(h, count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

/* Where p is: 0 and its span/slot, or a SHMHEAP_E_* code. */
static int shmheap__locate(const shmheap *h, const void *p, size_t *span, uint64_t *entry,
                           unsigned *slot)
{
    uintptr_t a = (uintptr_t)p, d = (uintptr_t)h->data;
    if (a < (uintptr_t)h->base || a - (uintptr_t)h->base >= h->size) return SHMHEAP_E_FOREIGN;
    if (a < d || a >= d + (h->nspans << SHMHEAP__SPAN_SHIFT)) return SHMHEAP_E_BADPTR; /* header */
    size_t off = a - d, s = off >> SHMHEAP__SPAN_SHIFT;
    uint32_t so = (uint32_t)(off & (SHMHEAP__SPAN - 1));
    uint64_t e = rcp__load(&h->ent[s]);
    *span = s;
    *entry = e;
    switch (SHMHEAP__E_STATE(e)) {
    case SHMHEAP__S_SMALL: {
        unsigned c = SHMHEAP__E_CLS(e);
        if (c >= SHMHEAP__NCLS) return SHMHEAP_E_CORRUPT;
        uint32_t idx = (uint32_t)(((uint64_t)so * shmheap__recip[c]) >> 32);
        if (idx * shmheap__size[c] != so || idx >= shmheap__nslots(c)) return SHMHEAP_E_BADPTR;
        *slot = idx;
        return 0;
    }
    case SHMHEAP__S_HEAD: return so ? SHMHEAP_E_BADPTR : 0;
    case SHMHEAP__S_FREE: return SHMHEAP_E_DOUBLEFREE;
    default: return SHMHEAP_E_BADPTR;
    }
}

SHMHEAP_API int shmheap_free(shmheap *h, void *p)
{
    size_t s;
    uint64_t e;
    unsigned idx = 0;
    if (!p) return 0;
    if (!h) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    if (RCP__UNLIKELY(h->lease != NULL) && shmheap__known_fenced(h)) return RCP__LEASE_E_FENCED;
    int r = shmheap__locate(h, p, &s, &e, &idx);
    if (r) return r;
    if (SHMHEAP__E_STATE(e) == SHMHEAP__S_SMALL) {
        unsigned c = SHMHEAP__E_CLS(e), n;
        uint64_t off = (uint64_t)((char *)p - h->base), *mark = (uint64_t *)p;
        /* A block in any thread's cache still looks allocated in the bitmap; its first word
           holds key ^ offset (as glibc's tcache keeps a key in its entries). */
        if (c < SHMHEAP__TC_CLS && *mark == (h->tc_key ^ off)) return SHMHEAP_E_DOUBLEFREE;
        struct shmheap__tc *tc = c < SHMHEAP__TC_CLS ? shmheap__tc_get(h) : NULL;
        if (tc && (n = tc->n[c]) < SHMHEAP__TC_CAP) {
            uint64_t v = rcp__load_relaxed(&h->bm[s * SHMHEAP__WORDS + idx / SHMHEAP__BITS]);
            if (!(v & (1ull << (idx % SHMHEAP__BITS)))) return SHMHEAP_E_DOUBLEFREE;
            *mark = h->tc_key ^ off;
            tc->off[c][n] = off;
            rcp__store(&tc->n[c], (uint8_t)(n + 1)); /* after the offset: a sweeper reads n first */
            return 0;
        }
        return shmheap__slot_free(h, s, e, idx);
    }
    if ((r = shmheap__lock(h))) return r;
    e = rcp__load(&h->ent[s]);
    if (SHMHEAP__E_STATE(e) != SHMHEAP__S_HEAD) {
        r = SHMHEAP__E_STATE(e) == SHMHEAP__S_FREE ? SHMHEAP_E_DOUBLEFREE : SHMHEAP_E_BADPTR;
    } else if (SHMHEAP__E_ARG(e) == 0 || SHMHEAP__E_ARG(e) > h->nspans - s) {
        r = SHMHEAP_E_CORRUPT; /* a run past the span table: written by a broken peer */
    } else {
        uint64_t n = SHMHEAP__E_ARG(e);
        if (!(r = shmheap__journal(h, SHMHEAP__J_LFREE, s, n, 0, 0))) {
            for (uint64_t i = 0; i < n; i++) rcp__store(&h->ent[s + i], (uint64_t)SHMHEAP__S_FREE);
            if (s < h->hdr->free_hint) h->hdr->free_hint = s;
            shmheap__journal_done(h);
        }
    }
    shmheap__unlock(h);
    return r;
}

SHMHEAP_API int shmheap_flush(shmheap *h)
{
    if (!h) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    for (int i = 0; i < SHMHEAP__NBIND; i++)
        if (shmheap__binds[i].h == h && shmheap__binds[i].hid == h->hid && shmheap__binds[i].tc)
            shmheap__tc_flush(h, shmheap__binds[i].tc);
    return 0;
}

SHMHEAP_API size_t shmheap_usable_size(shmheap *h, const void *p)
{
    size_t s;
    uint64_t e;
    unsigned idx = 0;
    if (h && RCP__UNLIKELY(shmheap__closed(h))) {
        errno = EBADF;
        return 0;
    }
    if (!h || !p || shmheap__locate(h, p, &s, &e, &idx)) return 0;
    if (SHMHEAP__E_STATE(e) == SHMHEAP__S_HEAD) /* the entry is shared memory: bound it */
        return SHMHEAP__E_ARG(e) <= h->nspans - s ? (size_t)SHMHEAP__E_ARG(e) << SHMHEAP__SPAN_SHIFT
                                                  : 0;
    uint64_t v = rcp__load(&h->bm[s * SHMHEAP__WORDS + idx / SHMHEAP__BITS]);
    unsigned c = SHMHEAP__E_CLS(e);
    if (c < SHMHEAP__TC_CLS &&
        *(const uint64_t *)p == (h->tc_key ^ (uint64_t)((const char *)p - h->base)))
        return 0;
    return (v & (1ull << (idx % SHMHEAP__BITS))) ? shmheap__size[c] : 0;
}

SHMHEAP_API void *shmheap_realloc(shmheap *h, void *p, size_t size)
{
    if (!p) return shmheap_malloc(h, size);
    if (h && RCP__UNLIKELY(shmheap__closed(h))) {
        errno = EBADF;
        return NULL;
    }
    if (size == 0) { shmheap_free(h, p); return NULL; }
    size_t have = shmheap_usable_size(h, p);
    if (!have) { errno = EINVAL; return NULL; }
    if (size <= have && (size > SHMHEAP__MAX_SMALL || have <= SHMHEAP__MAX_SMALL)) return p;
    void *q = shmheap_malloc(h, size);
    if (!q) return NULL;
    memcpy(q, p, size < have ? size : have);
    shmheap_free(h, p);
    return q;
}

/* >>names - names: where a heap lives ---------------------------------------------------------- */

enum { SHMHEAP__K_SHM, SHMHEAP__K_FILE, SHMHEAP__K_DEV };
struct shmheap__loc {
    int kind;
    char path[PATH_MAX];           /* shm object name ("/x") or file path */
    char key[SHMHEAP__NAME_MAX + 16]; /* canonical name: "shm:x" or the path */
};

static int shmheap__parse(const char *name, struct shmheap__loc *L)
{
    if (!name || !*name) return SHMHEAP_E_BADNAME;
    memset(L, 0, sizeof *L);
    /* up to SHMHEAP__NAME_MAX bytes after the prefix (the pod's keys hold "shm:" and 100) */
    size_t plen = !strncmp(name, "shm:", 4) || !strncmp(name, "cxl:", 4) ? 4
                  : !strncmp(name, "file:", 5)                           ? 5
                                                                         : 0;
    if (strlen(name + plen) > SHMHEAP__NAME_MAX) return SHMHEAP_E_BADNAME;
    if (!strncmp(name, "cxl:", 4)) {
#ifdef SHMHEAP_WITH_CXL
        int r = rcp__cxl_resolve(name + 4, L->path, sizeof L->path);
        if (r == -ENOENT || r == -ENODEV) return SHMHEAP_E_NOTFOUND;
        if (r) return r;
        L->kind = SHMHEAP__K_DEV;
        if (snprintf(L->key, sizeof L->key, "%s", L->path) >= (int)sizeof L->key)
            return SHMHEAP_E_BADNAME;
        return 0;
#else
        return SHMHEAP_E_NOTSUP;
#endif
    }
    if (!strncmp(name, "shm:", 4)) name += 4;
    else if (!strncmp(name, "file:", 5)) {
        name += 5;
        if (!*name) return SHMHEAP_E_BADNAME;
        goto file;
    }
    if (strchr(name, '/')) goto file;
    if (!*name || !strcmp(name, ".") || !strcmp(name, "..")) return SHMHEAP_E_BADNAME;
    L->kind = SHMHEAP__K_SHM;
    snprintf(L->path, sizeof L->path, "/%s", name);
    snprintf(L->key, sizeof L->key, "shm:%s", name);
    return 0;
file:
    L->kind = SHMHEAP__K_FILE;
    if (name[0] == '/') {
        snprintf(L->path, sizeof L->path, "%s", name);
    } else { /* one key per file in the pod, whatever the current directory */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return -errno;
        if (snprintf(L->path, sizeof L->path, "%s/%s", cwd, name) >= (int)sizeof L->path)
            return SHMHEAP_E_BADNAME;
    }
    size_t n = strlen(L->path);
    if (n > SHMHEAP__NAME_MAX) return SHMHEAP_E_BADNAME; /* the path made absolute */
    memcpy(L->key, L->path, n + 1);
    return 0;
}

/* Size of what fd maps: st_size for files (sysfs PCI resources report their BAR size there),
   the sysfs size attribute for character devices such as device DAX. */
static int shmheap__fd_size(int fd, int *is_dev, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st)) return -errno;
    *is_dev = S_ISCHR(st.st_mode);
    if (!*is_dev) { *size = (size_t)st.st_size; return 0; }
    char p[96];
    snprintf(p, sizeof p, "/sys/dev/char/%u:%u/size", major(st.st_rdev), minor(st.st_rdev));
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    if (!f) return SHMHEAP_E_NOTSUP;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok) return SHMHEAP_E_NOTSUP;
    *size = (size_t)v;
    return 0;
}

/* >>pod - the pod directory: address ranges of heaps ------------------------------------------- */

#define SHMHEAP__POD_MAGIC 0x31444f5050414548ull
#define SHMHEAP__POD_N 1024
struct shmheap__pod_ent { uint64_t base, size; char key[SHMHEAP__NAME_MAX + 12]; };
struct shmheap__pod {
    uint64_t magic;
    uint32_t version, ready;
    uint64_t lo, hi;
    uint64_t reserved[4];
    struct shmheap__pod_ent e[SHMHEAP__POD_N];
};
RCP__STATIC_ASSERT(sizeof(struct shmheap__pod_ent) == 128, "pod entry layout");

struct shmheap__podref { int fd; struct shmheap__pod *p; };

/* The pod's shm object name ("/NAME") into path (NAME_MAX + 2 bytes), and its name. */
static int shmheap__pod_path(const shmheap_opts *o, char *path, const char **pname)
{
    const char *name = (o && o->pod) ? o->pod : getenv("SHMHEAP_POD");
    if (!name || !*name) name = SHMHEAP__POD_DEFAULT;
    if (strchr(name, '/') || strlen(name) > NAME_MAX - 1) return SHMHEAP_E_BADNAME;
    snprintf(path, NAME_MAX + 2, "/%s", name);
    *pname = name;
    return 0;
}

static int shmheap__pod_open(const shmheap_opts *o, struct shmheap__podref *pr)
{
    const char *name;
    char path[NAME_MAX + 2];
    if (shmheap__pod_path(o, path, &name)) return SHMHEAP_E_BADNAME;
    struct stat st;
    void *m;
    uint64_t magic = 0;
    int r, fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
    if (fd >= 0) fchmod(fd, 0666); /* a pod is shared by every user of the host; umask must not
                                      narrow it (only one we made: another file keeps its mode) */
    else if (errno == EEXIST) fd = shm_open(path, O_RDWR, 0);
    if (fd < 0) return -errno;
    /* Every step under this lock is short: a holder that keeps it for seconds is stuck or
       hostile, and must not hang every create, open-by-name and unlink of the host. */
    for (int waited_ms = 0; flock(fd, LOCK_EX | LOCK_NB); waited_ms++) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || waited_ms == 5000) {
            r = errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
            struct rcp__logger lg = shmheap__logger(o);
            shmheap__log(&lg, SHMHEAP_LOG_WARN, "pod %s: lock not free after 5 s", name);
            goto fail_close;
        }
        usleep(1000);
    }
    /* an object that is no pod is never written: a pod starts with its magic (or zeros, one
       whose creator died before it wrote it) */
    if (fstat(fd, &st) == 0 && st.st_size > 0 &&
        (pread(fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
         (magic && magic != SHMHEAP__POD_MAGIC) || !S_ISREG(st.st_mode))) {
        struct rcp__logger lg = shmheap__logger(o);
        shmheap__log(&lg, SHMHEAP_LOG_ERROR, "pod %s: the object there is not a pod", name);
        r = SHMHEAP_E_NOTPOD;
        goto fail_close;
    }
    if (fstat(fd, &st) == 0 && (size_t)st.st_size < sizeof(struct shmheap__pod) &&
        ftruncate(fd, (off_t)sizeof(struct shmheap__pod))) {
        r = -errno;
        goto fail_close;
    }
    m = mmap(NULL, sizeof(struct shmheap__pod), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        r = -errno;
        goto fail_close;
    }
    pr->fd = fd;
    pr->p = (struct shmheap__pod *)m;
    if (pr->p->magic != SHMHEAP__POD_MAGIC || pr->p->version != 1) {
        memset(m, 0, sizeof(struct shmheap__pod));
        unsigned long long lo = SHMHEAP__WIN_LO, hi = SHMHEAP__WIN_HI;
        const char *w = getenv("SHMHEAP_WINDOW");
        if (w && (sscanf(w, "%llx-%llx", &lo, &hi) != 2 || lo % SHMHEAP__ALIGN || hi <= lo)) {
            struct rcp__logger lg = shmheap__logger(o);
            shmheap__log(&lg, SHMHEAP_LOG_WARN,
                         "ignoring malformed SHMHEAP_WINDOW=%s (want LO-HI in hex)", w);
            lo = SHMHEAP__WIN_LO;
            hi = SHMHEAP__WIN_HI;
        }
        const char *id = getenv("SHMHEAP_POD_ID");
        if (id) { /* the pod's own sixteenth of the window: pods of one cluster never overlap */
            unsigned k;
            char extra;
            unsigned long long part =
                ((hi - lo) / SHMHEAP_POD_IDS) & ~(unsigned long long)(SHMHEAP__ALIGN - 1);
            if (sscanf(id, "%u%c", &k, &extra) == 1 && k < SHMHEAP_POD_IDS) {
                lo += k * part; /* a sixteenth under 2 MiB is empty: every create is PODFULL */
                hi = lo + part;
                if (!part) {
                    struct rcp__logger lg = shmheap__logger(o);
                    shmheap__log(&lg, SHMHEAP_LOG_WARN,
                                 "SHMHEAP_WINDOW's sixteenth for SHMHEAP_POD_ID=%s is under 2 MiB:"
                                 " no heap fits", id);
                }
            } else {
                struct rcp__logger lg = shmheap__logger(o);
                shmheap__log(&lg, SHMHEAP_LOG_WARN,
                             "ignoring malformed SHMHEAP_POD_ID=%s (want 0-%u)", id,
                             SHMHEAP_POD_IDS - 1);
            }
        }
        pr->p->lo = lo;
        pr->p->hi = hi;
        pr->p->version = 1;
        pr->p->magic = SHMHEAP__POD_MAGIC;
    }
    return 0; /* flock held until shmheap__pod_close */
fail_close:
    close(fd);
    return r;
}

static void shmheap__pod_close(struct shmheap__podref *pr)
{
    munmap(pr->p, sizeof(struct shmheap__pod));
    flock(pr->fd, LOCK_UN);
    close(pr->fd);
}

static struct shmheap__pod_ent *shmheap__pod_find(struct shmheap__pod *p, const char *key)
{
    for (int i = 0; i < SHMHEAP__POD_N; i++)
        if (p->e[i].base && !strncmp(p->e[i].key, key, sizeof p->e[i].key)) return &p->e[i];
    return NULL;
}

/* A heap on a descriptor ("fd:INDEX:..."): every process that has it open holds a read lock
   on byte SHMHEAP__POD_LOCKS + INDEX of the pod file (through its own open of the pod). */
#define SHMHEAP__POD_LOCKS ((off_t)1 << 30)

static int shmheap__pod_lock(int fd, int i, short type, int cmd)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = SHMHEAP__POD_LOCKS + i;
    fl.l_len = 1;
    if (fcntl(fd, cmd, &fl)) return -errno;
    return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}

/* Entries for shm objects that no longer exist are stale, and those of heaps on descriptors
   that nobody has open: free their ranges. */
static void shmheap__pod_sweep(struct shmheap__pod *p, int pod_fd)
{
    for (int i = 0; i < SHMHEAP__POD_N; i++) {
        if (!p->e[i].base) continue;
        if (!strncmp(p->e[i].key, "fd:", 3)) {
            if (shmheap__pod_lock(pod_fd, i, F_WRLCK, F_OFD_GETLK) == 0) p->e[i].base = 0;
            continue;
        }
        if (strncmp(p->e[i].key, "shm:", 4)) continue;
        char path[NAME_MAX + 2];
        snprintf(path, sizeof path, "/%.*s", (int)(sizeof p->e[i].key - 5), p->e[i].key + 4);
        int fd = shm_open(path, O_RDONLY, 0);
        if (fd >= 0) close(fd);
        else if (errno == ENOENT) p->e[i].base = 0;
    }
}

static int shmheap__pod_overlaps(struct shmheap__pod *p, uint64_t b, uint64_t n, const char *except)
{
    for (int i = 0; i < SHMHEAP__POD_N; i++) {
        struct shmheap__pod_ent *e = &p->e[i];
        if (e->base && b < e->base + e->size && e->base < b + n &&
            (!except || strncmp(e->key, except, sizeof e->key)))
            return 1;
    }
    return 0;
}

/* The lowest free range of n bytes at or above min in the window, or 0. */
static uint64_t shmheap__pod_pick(struct shmheap__pod *p, uint64_t n, uint64_t min)
{
    uint64_t best = 0;
    for (int i = -1; i < SHMHEAP__POD_N; i++) {
        uint64_t c = i < 0 ? p->lo : p->e[i].base ? p->e[i].base + p->e[i].size : 0;
        if (!c) continue;
        c = (c + SHMHEAP__ALIGN - 1) & ~(uint64_t)(SHMHEAP__ALIGN - 1);
        if (c < min || c + n > p->hi || c + n < c) continue;
        if (best && c >= best) continue;
        if (!shmheap__pod_overlaps(p, c, n, NULL)) best = c;
    }
    if (!best && min > p->lo && min + n <= p->hi && !shmheap__pod_overlaps(p, min, n, NULL))
        best = min;
    return best;
}

static int shmheap__pod_record(struct shmheap__pod *p, const char *key, uint64_t base, uint64_t n)
{
    struct shmheap__pod_ent *e = shmheap__pod_find(p, key);
    for (int i = 0; !e && i < SHMHEAP__POD_N; i++)
        if (!p->e[i].base) e = &p->e[i];
    if (!e) return SHMHEAP_E_FULL;
    e->base = 0;
    snprintf(e->key, sizeof e->key, "%s", key);
    e->size = n;
    rcp__store(&e->base, base); /* written last: a torn entry is an unused one */
    return 0;
}

/* >>map - mapping and the header: create, open, close ------------------------------------------ */

static size_t shmheap__meta_bytes(size_t nspans)
{
    return sizeof(struct shmheap__hdr) + nspans * 8 + nspans * SHMHEAP__WORDS * 8;
}

static void shmheap__bind(shmheap *h, void *base)
{
    struct shmheap__hdr *H = (struct shmheap__hdr *)base;
    h->hdr = H;
    h->base = (char *)base;
    h->size = (size_t)H->size;
    h->nspans = (size_t)H->nspans;
    h->ent = (uint64_t *)(h->base + H->entries_off);
    h->bm = (uint64_t *)(h->base + H->bitmap_off);
    h->data = h->base + H->data_off;
    h->hdr_data_off = H->data_off;
    h->tc_key = H->tc_key | 1; /* odd: never equal to offset ^ key for a zeroed block */
    h->data_len = (uint64_t)h->nspans << SHMHEAP__SPAN_SHIFT;
}

/* Checks a header read from a file of file_size bytes. */
static int shmheap__validate(const struct shmheap__hdr *H, size_t file_size)
{
    if (H->magic != SHMHEAP__MAGIC) return SHMHEAP_E_BADMAGIC;
    if (H->version != SHMHEAP__VERSION) return SHMHEAP_E_VERSION;
    if (!H->ready) return SHMHEAP_E_BADMAGIC;
    if (H->hdr_size != sizeof(struct shmheap__hdr) || H->size > file_size ||
        H->size < SHMHEAP__ALIGN || H->base % SHMHEAP__ALIGN || H->base + H->size < H->base ||
        H->nspans == 0 || H->nspans > (H->size >> SHMHEAP__SPAN_SHIFT) ||
        H->data_off > H->size || /* no overflow below */
        H->entries_off != sizeof(struct shmheap__hdr) ||
        H->bitmap_off != H->entries_off + H->nspans * 8 ||
        H->data_off < shmheap__meta_bytes(H->nspans) || H->data_off % SHMHEAP__SPAN ||
        H->data_off + (H->nspans << SHMHEAP__SPAN_SHIFT) > H->size)
        return SHMHEAP_E_TOOSMALL;
    return 0;
}

/* fresh: the backing was just made (ftruncate of a new object or file), so it reads as zeros:
   span entries are already FREE (0), and bitmap words stay zero until a span is first used
   (shmheap__open_words). Creating a heap then costs the same at any size, and a big heap's
   metadata (1/128 of it) is only touched as it is used. */
static int shmheap__format(void *base, int fd, size_t size, const char *key, int fresh)
{
    struct shmheap__hdr *H = (struct shmheap__hdr *)base;
    size_t n = size >> SHMHEAP__SPAN_SHIFT, meta;
    while (n && ((meta = (shmheap__meta_bytes(n) + SHMHEAP__SPAN - 1) & ~(SHMHEAP__SPAN - 1)) +
                 (n << SHMHEAP__SPAN_SHIFT)) > size)
        n--;
    /* what is written now: the header (and, formatting over old contents, all the metadata);
       the rest as spans are first used (shmheap__reserve) */
    if (shmheap__reserve_fd(fd, 0, fresh ? sizeof *H : shmheap__meta_bytes(n)))
        return SHMHEAP_E_FULL;
    H->magic = 0; /* an interrupted format must not look like a heap */
    if (!fresh)
        memset((char *)base + 8, 0, sizeof *H - 8); /* fresh: zero, and its pages untouched */
    H->version = SHMHEAP__VERSION;
    H->base = (uint64_t)(uintptr_t)base;
    H->size = size;
    H->nspans = n;
    H->hdr_size = sizeof *H;
    H->entries_off = sizeof *H;
    H->bitmap_off = H->entries_off + n * 8;
    H->data_off = (shmheap__meta_bytes(n) + SHMHEAP__SPAN - 1) & ~(uint64_t)(SHMHEAP__SPAN - 1);
    snprintf(H->name, sizeof H->name, "%s", key);
    uint64_t *ent = (uint64_t *)((char *)base + H->entries_off),
             *bm = (uint64_t *)((char *)base + H->bitmap_off);
    if (!fresh) {
        for (size_t i = 0; i < n; i++) ent[i] = SHMHEAP__S_FREE;
        for (size_t i = 0; i < n * SHMHEAP__WORDS; i++) bm[i] = SHMHEAP__CLOSED;
    }
    H->tc_key = ((uint64_t)rcp__now_ns() * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)getpid() << 32) ^
                (uint64_t)(uintptr_t)base;
    H->magic = SHMHEAP__MAGIC;
    rcp__store(&H->ready, 1u);
    return 0;
}

static int shmheap__map_at(int fd, uint64_t base, size_t size, void **out)
{
    void *m = mmap((void *)(uintptr_t)base, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (m == MAP_FAILED) return errno == EEXIST ? SHMHEAP_E_ADDRINUSE : -errno;
    if ((uintptr_t)m != base) { /* kernel older than 4.17 ignores MAP_FIXED_NOREPLACE */
        munmap(m, size);
        return SHMHEAP_E_ADDRINUSE;
    }
    *out = m;
    return 0;
}

static int shmheap__new_handle(void *base, int fd, const char *key, const shmheap_opts *o,
                               shmheap **out)
{
    shmheap *h = (shmheap *)shmheap__calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    struct stat st;
    h->fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1; /* -1: memory the caller mapped */
    h->mem = fd < 0;
    if (fd >= 0 && fstat(fd, &st) == 0) { h->dev = st.st_dev; h->ino = st.st_ino; }
    shmheap__bind(h, base);
    h->refs = 1;
    h->lock_timeout_ms = o ? o->lock_timeout_ms : 0;
    h->pod_fd = -1;
    pthread_mutex_init(&h->seal_mu, NULL);
    pthread_mutex_init(&h->watch_mu, NULL);
    h->seal_alias = -1;
    h->log = shmheap__logger(o);
    h->hid = rcp__fetch_add(&shmheap__hid_next, (uint64_t)1) + 1;
    snprintf(h->name, sizeof h->name, "%s", key);
    if (rcp__handle_add(h)) {
        if (h->fd >= 0) close(h->fd);
        pthread_mutex_destroy(&h->seal_mu);
        pthread_mutex_destroy(&h->watch_mu);
        shmheap__free(h);
        return -ENOMEM;
    }
    shmheap__live_claim(h);
    h->next = shmheap__reg;
    shmheap__reg = h;
    *out = h;
    return 0;
}

static int shmheap__open_fd(const struct shmheap__loc *L, int flags, unsigned mode)
{
    int fd = L->kind == SHMHEAP__K_SHM ? shm_open(L->path, flags, mode)
                                       : open(L->path, flags | O_CLOEXEC, mode);
    if (fd < 0)
        return errno == ENOENT ? SHMHEAP_E_NOTFOUND : errno == EEXIST ? SHMHEAP_E_EXISTS : -errno;
    return fd;
}

static void shmheap__flock(int fd, int op)
{
    while (flock(fd, op) && errno == EINTR) {}
}

/* The leading fields of a header, read without mapping the heap (validate reads no further). */
#define SHMHEAP__HEAD_BYTES offsetof(struct shmheap__hdr, name)

static int shmheap__read_head(int fd, struct shmheap__hdr *H)
{
    memset(H, 0, SHMHEAP__HEAD_BYTES);
    ssize_t got = pread(fd, H, SHMHEAP__HEAD_BYTES, 0);
    /* A short read is a file still being created (or too small): leave the rest zero, and
       never map it, since touching a mapping past the end of a file raises SIGBUS. */
    if (got >= 0) return 0;
    /* Device DAX refuses read(2) and any mapping that is not 2 MiB aligned in address and
       length: read the header through an aligned 2 MiB window (inside a private reservation,
       so nothing else is replaced), or a plain small mapping for other devices. */
    size_t len = SHMHEAP__ALIGN;
    char *res =
        (char *)mmap(NULL, 2 * len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return -errno;
    char *at = (char *)(((uintptr_t)res + len - 1) & ~(uintptr_t)(len - 1));
    void *m = mmap(at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (m == MAP_FAILED) {
        munmap(res, 2 * len);
        m = mmap(NULL, SHMHEAP__HEAD_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) return -errno;
        res = NULL;
        len = SHMHEAP__HEAD_BYTES;
    }
    memcpy(H, m, SHMHEAP__HEAD_BYTES);
    if (res) munmap(res, 2 * len);
    else munmap(m, len);
    return 0;
}

/* Picks the heap's address (opts->addr or the pod's next free range) and maps fd there. */
/* One try at giving [.., +size) a place in the pod and mapping it there (pod locked). */
static int shmheap__place_once(struct shmheap__pod *p, int fd, const struct shmheap__loc *L,
                               const shmheap_opts *o, size_t size, void **base)
{
    int r;
    if (o->addr) {
        r = shmheap__pod_overlaps(p, o->addr, size, L->key)
                ? SHMHEAP_E_ADDRINUSE
                : shmheap__map_at(fd, o->addr, size, base);
        if (!r && o->addr < p->hi && o->addr + size > p->lo) { /* inside or straddling the window */
            r = shmheap__pod_record(p, L->key, o->addr, size);
            if (r) munmap(*base, size);
        }
        return r;
    }
    uint64_t min = 0, b;
    struct shmheap__pod_ent *old = shmheap__pod_find(p, L->key);
    if (old) old->base = 0; /* the name is being replaced: its old range goes */
    r = SHMHEAP_E_ADDRINUSE;
    for (int tries = 0; tries < 64 && r == SHMHEAP_E_ADDRINUSE; tries++) {
        if (!(b = shmheap__pod_pick(p, size, min))) return SHMHEAP_E_FULL;
        r = shmheap__map_at(fd, b, size, base);
        min = b + SHMHEAP__ALIGN; /* taken in this process: try above it */
        if (!r && (r = shmheap__pod_record(p, L->key, b, size))) munmap(*base, size);
    }
    return r;
}

static int shmheap__place(int fd, const struct shmheap__loc *L, const shmheap_opts *o, size_t size,
                          void **base)
{
    struct shmheap__podref pr;
    int r = shmheap__pod_open(o, &pr);
    if (r) return r;
    /* Stale entries (objects removed without shmheap_unlink) are swept only when they are in the
       way: a sweep opens every object the pod names, and a pod holds up to 1024. */
    r = shmheap__place_once(pr.p, fd, L, o, size, base);
    if (r == SHMHEAP_E_FULL || r == SHMHEAP_E_ADDRINUSE) {
        shmheap__pod_sweep(pr.p, pr.fd);
        r = shmheap__place_once(pr.p, fd, L, o, size, base);
    }
    if (r == SHMHEAP_E_FULL) r = SHMHEAP_E_PODFULL; /* not the heap: it has not been made yet */
    shmheap__pod_close(&pr);
    return r;
}

SHMHEAP_API int shmheap_create(const char *name, const shmheap_opts *opts, shmheap **out)
{
    struct shmheap__loc L;
    shmheap_opts o;
    int r, fd, created = 0, is_dev = 0, device;
    size_t have = 0, size;
    void *base = NULL;
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    struct rcp__logger lg = shmheap__logger(&o);
    if ((r = shmheap__parse(name, &L))) return r;
    if (o.addr % SHMHEAP__ALIGN || o.size > ((size_t)1 << 44)) return SHMHEAP_E_INVAL;
    pthread_once(&shmheap__once, shmheap__init_once);
    /* an object or file that does not exist yet is made here, exclusively */
    fd = shmheap__open_fd(&L, O_RDWR | O_CREAT | O_EXCL, o.mode ? o.mode : SHMHEAP_DEFAULT_MODE);
    if (fd == SHMHEAP_E_EXISTS) fd = shmheap__open_fd(&L, O_RDWR, 0);
    else if (fd >= 0) created = 1;
    if (fd < 0) return fd;
    /* Held until the header is complete: openers wait on it (LOCK_SH), and two creators of one
       device cannot both format it. */
    shmheap__flock(fd, LOCK_EX);
    if ((r = shmheap__fd_size(fd, &is_dev, &have))) goto fail;
    device = is_dev || !strncmp(L.path, "/sys/", 5);
    if (!created && o.overwrite) {
        /* Formatting a heap that this process has mapped would leave its handles pointing into
           a new heap at another address. (New opens of it wait for our LOCK_EX.) */
        struct stat st;
        if (fstat(fd, &st)) { r = -errno; goto fail; }
        pthread_mutex_lock(&shmheap__reg_lock);
        for (shmheap *h = shmheap__reg; h; h = h->next)
            if (!h->mem && h->dev == st.st_dev && h->ino == st.st_ino) r = SHMHEAP_E_BUSY;
        pthread_mutex_unlock(&shmheap__reg_lock);
        if (r) goto fail;
    }
    if (!created && !o.overwrite) {
        /* an existing file or object is somebody's; a device is formatted unless it holds a heap */
        struct shmheap__hdr *H = NULL;
        r = 0;
        if (!device) r = SHMHEAP_E_EXISTS;
        else if (have >= SHMHEAP__HEAD_BYTES &&
                 (H = (struct shmheap__hdr *)SHMHEAP_MALLOC(sizeof *H)) &&
                 shmheap__read_head(fd, H) == 0 && H->magic == SHMHEAP__MAGIC)
            r = SHMHEAP_E_EXISTS;
        shmheap__free(H);
        if (r) goto fail;
    }
    size = o.size                                           ? o.size
           : (have && !created && L.kind != SHMHEAP__K_SHM) ? have
                                                            : SHMHEAP_DEFAULT_SIZE;
    size = (size + SHMHEAP__ALIGN - 1) & ~(SHMHEAP__ALIGN - 1);
    if (created || (have < size && !device)) {
        if (ftruncate(fd, (off_t)size)) { r = -errno; goto fail; }
    } else if (have < size) { r = SHMHEAP_E_TOOSMALL; goto fail; }
    if (size < SHMHEAP__ALIGN) { r = SHMHEAP_E_TOOSMALL; goto fail; }

    pthread_mutex_lock(&shmheap__reg_lock);
    if ((r = shmheap__place(fd, &L, &o, size, &base))) goto fail_reg;
    if ((r = shmheap__format(base, fd, size, L.key, created))) {
        munmap(base, size);
        goto fail_reg;
    }
    /* a device that does not keep what is written to it: e.g. qemu 7.2's emulated CXL DAX */
    if (shmheap__validate((struct shmheap__hdr *)base, size)) {
        shmheap__log(&lg, SHMHEAP_LOG_ERROR, "%s does not keep what is written to it", L.key);
        munmap(base, size);
        r = -EIO;
        goto fail_reg;
    }
    shmheap__flock(fd, LOCK_UN);
    if ((r = shmheap__new_handle(base, fd, L.key, &o, out))) munmap(base, size);
    pthread_mutex_unlock(&shmheap__reg_lock);
    close(fd);
    shmheap__log(&lg, SHMHEAP_LOG_INFO, "created %s at %p, %zu bytes", L.key, base, size);
    return r;
fail_reg:
    pthread_mutex_unlock(&shmheap__reg_lock);
fail:
    if (created) {
        if (L.kind == SHMHEAP__K_SHM) shm_unlink(L.path);
        else unlink(L.path);
    }
    close(fd);
    shmheap__log(&lg, SHMHEAP_LOG_ERROR, "create %s failed: %s", name, shmheap_strerror(r));
    return r;
}

SHMHEAP_API int shmheap_open(const char *name, const shmheap_opts *opts, shmheap **out)
{
    struct shmheap__loc L;
    struct stat st;
    int r, fd, is_dev = 0;
    size_t have = 0;
    void *base = NULL;
    shmheap *h;
    struct rcp__logger lg = shmheap__logger(opts);
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    if ((r = shmheap__parse(name, &L))) return r;
    pthread_once(&shmheap__once, shmheap__init_once);
    if ((fd = shmheap__open_fd(&L, O_RDWR, 0)) < 0) return fd;
    struct shmheap__hdr *H =
        (struct shmheap__hdr *)SHMHEAP_MALLOC(sizeof *H); /* 90 KiB: not on the stack */
    if (!H || fstat(fd, &st)) { r = H ? -errno : -ENOMEM; goto out; }
    /* A creator holds LOCK_EX until its header is complete; a file it has just made may not be
       locked yet (still empty, or being formatted from magic 0): wait a little for those. */
    for (int i = 0;; i++) {
        shmheap__flock(fd, LOCK_SH);
        if ((r = shmheap__fd_size(fd, &is_dev, &have)) || (r = shmheap__read_head(fd, H))) break;
        if ((have && H->magic) || i == 200) break;
        shmheap__flock(fd, LOCK_UN);
        usleep(5000);
    }
    if (r) goto out;
    r = have < SHMHEAP__HEAD_BYTES ? SHMHEAP_E_TOOSMALL : shmheap__validate(H, have);
    shmheap__flock(fd, LOCK_UN); /* before the handle dups fd, which would keep the lock */
    if (r) goto out;
    pthread_mutex_lock(&shmheap__reg_lock);
    for (h = shmheap__reg; h; h = h->next) /* by object: the name may mean a new heap now */
        if (!h->mem && !strcmp(h->name, L.key) && h->dev == st.st_dev && h->ino == st.st_ino)
            break;
    if (h) {
        h->refs++; /* this process has it open already */
        *out = h;
    } else if (!(r = shmheap__map_at(fd, H->base, (size_t)H->size, &base))) {
        /* the header could have changed between the read and the map: check the real one,
           after making sure the file still backs the whole mapping (a peer may truncate it) */
        struct stat now;
        if (fstat(fd, &now) || (S_ISREG(now.st_mode) && (size_t)now.st_size < (size_t)H->size)) {
            r = SHMHEAP_E_TOOSMALL;
            munmap(base, (size_t)H->size);
        } else if ((r = shmheap__validate((struct shmheap__hdr *)base, have)) ||
                   ((struct shmheap__hdr *)base)->base != (uint64_t)(uintptr_t)base ||
                   (r = shmheap__new_handle(base, fd, L.key, opts, out))) {
            if (!r) r = SHMHEAP_E_CORRUPT;
            munmap(base, (size_t)H->size);
        }
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
out:
    shmheap__free(H);
    close(fd);
    if (r) shmheap__log(&lg, SHMHEAP_LOG_ERROR, "open %s failed: %s", name, shmheap_strerror(r));
    return r;
}

/* A heap in memory the caller mapped: what seals and protection keys changed of the caller's
   mapping goes back to read-write with the default key. */
static void shmheap__mem_restore(shmheap *h)
{
#ifdef SYS_pkey_mprotect
    if (h->pkeyed && !syscall(SYS_pkey_mprotect, h->base, h->size, PROT_READ | PROT_WRITE, 0))
        return;
#endif
    mprotect(h->base, h->size, PROT_READ | PROT_WRITE);
}

SHMHEAP_API int shmheap_close(shmheap *h)
{
    if (!h) return SHMHEAP_E_INVAL;
    pthread_mutex_lock(&shmheap__reg_lock);
    shmheap **pp = &shmheap__reg;
    while (*pp && *pp != h) pp = &(*pp)->next;
    if (!*pp) { pthread_mutex_unlock(&shmheap__reg_lock); return SHMHEAP_E_BADHANDLE; }
    SHMHEAP_ASSERT(h->refs > 0); /* a registered handle is open at least once (private memory) */
    if (--h->refs == 0) {
        uint64_t me = shmheap__tc_me(h);
        /* threads must be done with h */
        for (int i = 0; i < SHMHEAP__NTC && shmheap__intact(h); i++)
            if (rcp__load(&h->hdr->tc[i].owner) == me) shmheap__tc_giveback(h, &h->hdr->tc[i]);
        for (int i = 0; i < SHMHEAP__NBIND; i++)
            if (shmheap__binds[i].h == h) memset(&shmheap__binds[i], 0, sizeof shmheap__binds[i]);
        *pp = h->next;
        rcp__handle_del(h, 1);
        if (h->mem) shmheap__mem_restore(h); /* the caller's mapping: left mapped, read-write */
        else munmap(h->base, h->size);
        if (h->fd >= 0) close(h->fd);
        if (h->pod_fd >= 0) close(h->pod_fd); /* drops our read lock on the pod entry */
        pthread_mutex_destroy(&h->seal_mu);
        pthread_mutex_destroy(&h->watch_mu);
        shmheap__free(h);
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
    return 0;
}

SHMHEAP_API int shmheap_unlink(const char *name, const shmheap_opts *opts)
{
    struct shmheap__loc L;
    struct shmheap__podref pr;
    struct stat st;
    int r = shmheap__parse(name, &L), pod;
    if (r) return r;
    /* under the pod's lock, so that a create of the same name cannot slip in between removing
       the object and dropping its range */
    pod = shmheap__pod_open(opts, &pr);
    if (L.kind == SHMHEAP__K_SHM) {
        if (shm_unlink(L.path)) r = errno == ENOENT ? SHMHEAP_E_NOTFOUND : -errno;
    } else if (stat(L.path, &st)) {
        r = errno == ENOENT ? SHMHEAP_E_NOTFOUND : -errno;
    } else if (S_ISREG(st.st_mode) && strncmp(L.path, "/sys/", 5) && unlink(L.path)) {
        r = -errno; /* devices and PCI BARs stay; only their pod entry goes */
    }
    if (pod == 0) {
        struct shmheap__pod_ent *e = shmheap__pod_find(pr.p, L.key);
        if (e && (r == 0 || r == SHMHEAP_E_NOTFOUND)) e->base = 0;
        shmheap__pod_close(&pr);
    }
    return r;
}

/* One try at a pod entry and a range for a heap on a descriptor, mapped (pod locked): the entry
   is free and nobody holds its byte; we take a read lock on the byte, then record the entry. */
static int shmheap__place_fd_once(struct shmheap__podref *pr, int fd, size_t size, char *key,
                                  size_t keyn, void **base)
{
    struct shmheap__pod *p = pr->p;
    int idx = -1, r = SHMHEAP_E_ADDRINUSE;
    uint64_t min = 0, b = 0;
    for (int i = 0; i < SHMHEAP__POD_N && idx < 0; i++)
        if (!p->e[i].base && shmheap__pod_lock(pr->fd, i, F_WRLCK, F_OFD_GETLK) == 0) idx = i;
    if (idx < 0) return SHMHEAP_E_FULL;
    for (int tries = 0; tries < 64 && r == SHMHEAP_E_ADDRINUSE; tries++) {
        if (!(b = shmheap__pod_pick(p, size, min))) return SHMHEAP_E_FULL;
        r = shmheap__map_at(fd, b, size, base);
        min = b + SHMHEAP__ALIGN; /* taken in this process: try above it */
    }
    if (r) return r;
    if ((r = shmheap__pod_lock(pr->fd, idx, F_RDLCK, F_OFD_SETLK))) {
        munmap(*base, size);
        return r;
    }
    struct shmheap__pod_ent *e = &p->e[idx];
    snprintf(key, keyn, "fd:%d:%d-%llu", idx, (int)getpid(),
             (unsigned long long)(rcp__now_ns() % 1000000000000ull));
    e->base = 0;
    snprintf(e->key, sizeof e->key, "%s", key);
    e->size = size;
    rcp__store(&e->base, b); /* written last: a torn entry is an unused one */
    return 0;
}

SHMHEAP_API int shmheap_create_fd(int fd, const shmheap_opts *opts, shmheap **out)
{
    struct shmheap__podref pr;
    struct stat st;
    shmheap_opts o;
    char key[SHMHEAP__NAME_MAX + 12];
    void *base = NULL;
    int r, keep = -1;
    size_t size;
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    struct rcp__logger lg = shmheap__logger(&o);
    if (fd < 0 || o.addr || o.size > ((size_t)1 << 44)) return SHMHEAP_E_INVAL;
    if (fstat(fd, &st)) return -errno;
    if (!S_ISREG(st.st_mode)) return SHMHEAP_E_INVAL;
    pthread_once(&shmheap__once, shmheap__init_once);
    size = o.size ? o.size : SHMHEAP_DEFAULT_SIZE;
    size = (size + SHMHEAP__ALIGN - 1) & ~(SHMHEAP__ALIGN - 1);
    int fresh = st.st_size == 0;
    if ((size_t)st.st_size < size && ftruncate(fd, (off_t)size)) return -errno;
    pthread_mutex_lock(&shmheap__reg_lock);
    if ((r = shmheap__pod_open(&o, &pr))) goto fail_reg;
    /* entries of heaps on descriptors that nobody holds any more go first (one lock query
       each): a process killed with heaps it made leaves nothing past the next create_fd */
    for (int i = 0; i < SHMHEAP__POD_N; i++)
        if (pr.p->e[i].base && !strncmp(pr.p->e[i].key, "fd:", 3) &&
            shmheap__pod_lock(pr.fd, i, F_WRLCK, F_OFD_GETLK) == 0)
            pr.p->e[i].base = 0;
    r = shmheap__place_fd_once(&pr, fd, size, key, sizeof key, &base);
    if (r == SHMHEAP_E_FULL || r == SHMHEAP_E_ADDRINUSE) {
        shmheap__pod_sweep(pr.p, pr.fd);
        r = shmheap__place_fd_once(&pr, fd, size, key, sizeof key, &base);
    }
    if (r == SHMHEAP_E_FULL) r = SHMHEAP_E_PODFULL;
    /* our open of the pod holds the entry's read lock: keep it open past pod_close */
    if (!r && (keep = fcntl(pr.fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        r = -errno;
        munmap(base, size);
    }
    shmheap__pod_close(&pr);
    if (r) goto fail_reg;
    if ((r = shmheap__format(base, fd, size, key, fresh)) ||
        (r = shmheap__validate((struct shmheap__hdr *)base, size)) ||
        (r = shmheap__new_handle(base, fd, key, &o, out))) {
        munmap(base, size);
        close(keep);
        goto fail_reg;
    }
    (*out)->pod_fd = keep;
    pthread_mutex_unlock(&shmheap__reg_lock);
    shmheap__log(&lg, SHMHEAP_LOG_INFO, "created %s at %p, %zu bytes", key, base, size);
    return 0;
fail_reg:
    pthread_mutex_unlock(&shmheap__reg_lock);
    shmheap__log(&lg, SHMHEAP_LOG_ERROR, "create on fd %d failed: %s", fd, shmheap_strerror(r));
    return r;
}

SHMHEAP_API int shmheap_open_fd(int fd, const shmheap_opts *opts, shmheap **out)
{
    struct stat st;
    char key[SHMHEAP__NAME_MAX + 12];
    int r, idx = -1;
    void *base = NULL;
    shmheap *h;
    struct rcp__logger lg = shmheap__logger(opts);
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    if (fd < 0) return SHMHEAP_E_INVAL;
    pthread_once(&shmheap__once, shmheap__init_once);
    /* the leading fields only (no 90 KiB header copy): all that validate reads */
    struct shmheap__hdr *H = (struct shmheap__hdr *)SHMHEAP_MALLOC(sizeof *H);
    if (!H || fstat(fd, &st)) { r = H ? -errno : -ENOMEM; goto out; }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size < SHMHEAP__HEAD_BYTES) {
        r = SHMHEAP_E_TOOSMALL;
        goto out;
    }
    if ((r = shmheap__read_head(fd, H)) || (r = shmheap__validate(H, (size_t)st.st_size)))
        goto out;
    pthread_mutex_lock(&shmheap__reg_lock);
    for (h = shmheap__reg; h; h = h->next)
        if (!h->mem && h->dev == st.st_dev && h->ino == st.st_ino && !strncmp(h->name, "fd:", 3))
            break;
    if (h) {
        h->refs++; /* this process has it open already */
        *out = h;
    } else if (!(r = shmheap__map_at(fd, H->base, (size_t)H->size, &base))) {
        /* what we map is what we checked, unless the file changed in between: check the real
           header again (a file cut short meanwhile is caught by shmheap__intact later) */
        struct shmheap__hdr *M = (struct shmheap__hdr *)base;
        memcpy(key, M->name, sizeof key);
        key[sizeof key - 1] = 0;
        if (!(r = shmheap__validate(M, (size_t)st.st_size)) &&
            (M->base != (uint64_t)(uintptr_t)base || sscanf(key, "fd:%d:", &idx) != 1 ||
             idx < 0 || idx >= SHMHEAP__POD_N))
            r = SHMHEAP_E_CORRUPT;
        if (!r) r = shmheap__new_handle(base, fd, key, opts, out);
        if (r) munmap(base, (size_t)H->size);
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
out:
    shmheap__free(H);
    if (r) shmheap__log(&lg, SHMHEAP_LOG_ERROR, "open fd %d failed: %s", fd, shmheap_strerror(r));
    else shmheap__log(&lg, SHMHEAP_LOG_INFO, "opened %s at %p", (*out)->name, (*out)->base);
    return r;
}

SHMHEAP_API int shmheap_pod_hold(const shmheap *h, const shmheap_opts *opts)
{
    char pp[NAME_MAX + 2];
    const char *pn;
    int idx = -1, r;
    if (h && RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    if (!h || sscanf(h->name, "fd:%d:", &idx) != 1 || idx < 0 || idx >= SHMHEAP__POD_N)
        return SHMHEAP_E_INVAL;
    if ((r = shmheap__pod_path(opts, pp, &pn))) return r;
    int pfd = shm_open(pp, O_RDWR | O_CLOEXEC, 0);
    if (pfd < 0) return -errno;
    if ((r = shmheap__pod_lock(pfd, idx, F_RDLCK, F_OFD_SETLK))) {
        close(pfd);
        return r;
    }
    return pfd;
}

struct shmheap_resv {
    int fd;         /* our own open of the pod: the read lock on the entry's byte */
    int idx;        /* the entry */
    uint64_t base;
    size_t size;
};

SHMHEAP_API int shmheap_resv_create(size_t size, const shmheap_opts *opts, shmheap_resv **out)
{
    struct shmheap__podref pr;
    int r, idx = -1, keep = -1;
    uint64_t b = 0;
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    if (!size || size > ((size_t)1 << 46)) return SHMHEAP_E_INVAL;
    size = (size + SHMHEAP__ALIGN - 1) & ~(SHMHEAP__ALIGN - 1);
    shmheap_resv *rv = (shmheap_resv *)shmheap__calloc(1, sizeof *rv);
    if (!rv) return -ENOMEM;
    pthread_once(&shmheap__once, shmheap__init_once);
    pthread_mutex_lock(&shmheap__reg_lock);
    if ((r = shmheap__pod_open(opts, &pr))) goto fail;
    /* as shmheap_create_fd: entries of heaps on descriptors nobody holds go first */
    for (int i = 0; i < SHMHEAP__POD_N; i++)
        if (pr.p->e[i].base && !strncmp(pr.p->e[i].key, "fd:", 3) &&
            shmheap__pod_lock(pr.fd, i, F_WRLCK, F_OFD_GETLK) == 0)
            pr.p->e[i].base = 0;
    for (int pass = 0; pass < 2 && (idx < 0 || !b); pass++) {
        if (pass) shmheap__pod_sweep(pr.p, pr.fd); /* stale entries go, then once more */
        idx = -1;
        for (int i = 0; i < SHMHEAP__POD_N && idx < 0; i++)
            if (!pr.p->e[i].base && shmheap__pod_lock(pr.fd, i, F_WRLCK, F_OFD_GETLK) == 0)
                idx = i;
        b = idx < 0 ? 0 : shmheap__pod_pick(pr.p, size, 0);
    }
    r = idx < 0 || !b ? SHMHEAP_E_PODFULL : 0;
    if (!r && (r = shmheap__pod_lock(pr.fd, idx, F_RDLCK, F_OFD_SETLK)) == 0 &&
        (keep = fcntl(pr.fd, F_DUPFD_CLOEXEC, 3)) < 0)
        r = -errno;
    if (!r) {
        struct shmheap__pod_ent *e = &pr.p->e[idx];
        e->base = 0;
        snprintf(e->key, sizeof e->key, "fd:%d:%d-%llu:resv", idx, (int)getpid(),
                 (unsigned long long)(rcp__now_ns() % 1000000000000ull));
        e->size = size;
        rcp__store(&e->base, b); /* written last: a torn entry is an unused one */
    }
    shmheap__pod_close(&pr);
    if (r) goto fail;
    pthread_mutex_unlock(&shmheap__reg_lock);
    rv->fd = keep;
    rv->idx = idx;
    rv->base = b;
    rv->size = size;
    if (rcp__handle_add(rv)) { /* the handle rule: registered, or not handed out */
        close(keep);
        shmheap__free(rv);
        return -ENOMEM;
    }
    *out = rv;
    return 0;
fail:
    pthread_mutex_unlock(&shmheap__reg_lock);
    shmheap__free(rv);
    return r;
}

/* a reservation not open (destroyed, or never one): the manual's handle rule. A forked child
   may use its parent's, as it may use a heap. */
static inline int shmheap__resv_closed(const shmheap_resv *r)
{
    return rcp__handle_check(r) == RCP__H_CLOSED;
}

SHMHEAP_API int shmheap_resv_destroy(shmheap_resv *r)
{
    if (!r) return SHMHEAP_E_INVAL;
    if (rcp__handle_del(r, 1) != RCP__H_OPEN) return SHMHEAP_E_BADHANDLE; /* a second destroy */
    close(r->fd); /* heaps made in it keep their own duplicates of the hold */
    shmheap__free(r);
    return 0;
}

SHMHEAP_API int shmheap_resv_hold(const shmheap_resv *r)
{
    if (!r) return SHMHEAP_E_INVAL;
    if (shmheap__resv_closed(r)) return SHMHEAP_E_BADHANDLE;
    int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 3);
    return fd < 0 ? -errno : fd;
}

SHMHEAP_API void *shmheap_resv_base(const shmheap_resv *r)
{
    if (r && shmheap__resv_closed(r)) {
        errno = EBADF;
        return NULL;
    }
    return r ? (void *)(uintptr_t)r->base : NULL;
}

SHMHEAP_API size_t shmheap_resv_size(const shmheap_resv *r)
{
    if (r && shmheap__resv_closed(r)) {
        errno = EBADF;
        return 0;
    }
    return r ? r->size : 0;
}

SHMHEAP_API int shmheap_create_fd_in(shmheap_resv *r, size_t off, int fd, const shmheap_opts *opts,
                                     shmheap **out)
{
    struct stat st;
    shmheap_opts o;
    char key[SHMHEAP__NAME_MAX + 12];
    void *base = NULL;
    int rc, keep = -1;
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    struct rcp__logger lg = shmheap__logger(&o);
    size_t size = o.size ? o.size : SHMHEAP_DEFAULT_SIZE;
    size = (size + SHMHEAP__ALIGN - 1) & ~(SHMHEAP__ALIGN - 1);
    if (r && shmheap__resv_closed(r)) return SHMHEAP_E_BADHANDLE;
    if (!r || fd < 0 || o.addr || off % SHMHEAP__ALIGN || off > r->size || size > r->size - off)
        return SHMHEAP_E_INVAL;
    if (fstat(fd, &st)) return -errno;
    if (!S_ISREG(st.st_mode)) return SHMHEAP_E_INVAL;
    pthread_once(&shmheap__once, shmheap__init_once);
    int fresh = st.st_size == 0;
    if ((size_t)st.st_size < size && ftruncate(fd, (off_t)size)) return -errno;
    if ((keep = fcntl(r->fd, F_DUPFD_CLOEXEC, 3)) < 0) return -errno;
    snprintf(key, sizeof key, "fd:%d:%d-%llu@%llx", r->idx, (int)getpid(),
             (unsigned long long)(rcp__now_ns() % 1000000000000ull),
             (unsigned long long)(r->base + off));
    pthread_mutex_lock(&shmheap__reg_lock);
    if ((rc = shmheap__map_at(fd, r->base + off, size, &base))) goto fail;
    if ((rc = shmheap__format(base, fd, size, key, fresh)) ||
        (rc = shmheap__validate((struct shmheap__hdr *)base, size)) ||
        (rc = shmheap__new_handle(base, fd, key, &o, out))) {
        munmap(base, size);
        goto fail;
    }
    (*out)->pod_fd = keep;
    pthread_mutex_unlock(&shmheap__reg_lock);
    shmheap__log(&lg, SHMHEAP_LOG_INFO, "created %s at %p, %zu bytes", key, base, size);
    return 0;
fail:
    pthread_mutex_unlock(&shmheap__reg_lock);
    close(keep);
    shmheap__log(&lg, SHMHEAP_LOG_ERROR, "create on fd %d failed: %s", fd, shmheap_strerror(rc));
    return rc;
}

/* >>mem - heaps in memory the caller mapped ---------------------------------------------------- */

static int shmheap__mem_args(void *addr, size_t size, shmheap **out)
{
    if (!out) return SHMHEAP_E_INVAL;
    *out = NULL;
    uintptr_t a = (uintptr_t)addr;
    if (!a || a % SHMHEAP__ALIGN || !size || size % SHMHEAP__ALIGN ||
        size > ((size_t)1 << 44) || a + size < a)
        return SHMHEAP_E_INVAL;
    pthread_once(&shmheap__once, shmheap__init_once);
    return 0;
}

static void shmheap__give_lease(shmheap *h, struct rcp__lease *lease)
{
    h->lease_forks = rcp__load(&shmheap__forks);
    h->lease = lease;
}

/* An open heap of this process that overlaps [a, a + n), or NULL (registry locked). */
static shmheap *shmheap__overlap(uintptr_t a, size_t n)
{
    for (shmheap *h = shmheap__reg; h; h = h->next)
        if ((uintptr_t)h->base < a + n && a < (uintptr_t)h->base + h->size) return h;
    return NULL;
}

SHMHEAP_API int shmheap__create_mem(void *addr, size_t size, struct rcp__lease *lease,
                                    const shmheap_opts *o, shmheap **out)
{
    char key[40];
    struct rcp__logger lg = shmheap__logger(o);
    int r = shmheap__mem_args(addr, size, out);
    if (r) return r;
    snprintf(key, sizeof key, "mem@%llx", (unsigned long long)(uintptr_t)addr);
    pthread_mutex_lock(&shmheap__reg_lock);
    if (shmheap__overlap((uintptr_t)addr, size)) {
        r = SHMHEAP_E_BUSY; /* its handles would point into a re-formatted heap */
    } else if (!(r = shmheap__format(addr, -1, size, key, 0))) {
        if (shmheap__validate((struct shmheap__hdr *)addr, size)) r = -EIO; /* kept nothing */
        else if (!(r = shmheap__new_handle(addr, -1, key, o, out)))
            shmheap__give_lease(*out, lease);
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
    if (r) shmheap__log(&lg, SHMHEAP_LOG_ERROR, "create %s failed: %s", key, shmheap_strerror(r));
    else shmheap__log(&lg, SHMHEAP_LOG_INFO, "created %s, %zu bytes", key, size);
    return r;
}

SHMHEAP_API int shmheap__open_mem(void *addr, size_t size, struct rcp__lease *lease,
                                  const shmheap_opts *o, shmheap **out)
{
    char key[40];
    struct rcp__logger lg = shmheap__logger(o);
    int r = shmheap__mem_args(addr, size, out);
    if (r) return r;
    snprintf(key, sizeof key, "mem@%llx", (unsigned long long)(uintptr_t)addr);
    struct shmheap__hdr *H = (struct shmheap__hdr *)addr;
    pthread_mutex_lock(&shmheap__reg_lock);
    shmheap *h = shmheap__overlap((uintptr_t)addr, size);
    if (h && h->mem && h->base == (char *)addr && h->size <= size) {
        h->refs++; /* this process has it open already */
        *out = h;
    } else if (h) {
        r = SHMHEAP_E_ADDRINUSE;
    } else if (!(r = shmheap__validate(H, size))) {
        if (H->base != (uint64_t)(uintptr_t)addr) r = SHMHEAP_E_CORRUPT;
        else if (!(r = shmheap__new_handle(addr, -1, key, o, out)))
            shmheap__give_lease(*out, lease);
    }
    pthread_mutex_unlock(&shmheap__reg_lock);
    if (r) shmheap__log(&lg, SHMHEAP_LOG_ERROR, "open %s failed: %s", key, shmheap_strerror(r));
    return r;
}

SHMHEAP_API void *shmheap_base(const shmheap *h)
{
    if (h && RCP__UNLIKELY(shmheap__closed(h))) errno = EBADF;
    return h && !shmheap__closed(h) ? h->base : NULL;
}
SHMHEAP_API size_t shmheap_size(const shmheap *h)
{
    if (h && RCP__UNLIKELY(shmheap__closed(h))) errno = EBADF;
    return h && !shmheap__closed(h) ? h->size : 0;
}
SHMHEAP_API const char *shmheap_name(const shmheap *h)
{
    if (h && RCP__UNLIKELY(shmheap__closed(h))) errno = EBADF;
    return h && !shmheap__closed(h) ? h->name : NULL;
}

SHMHEAP_API int shmheap_opens(const shmheap *h)
{
    if (!h) return 0;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    pthread_mutex_lock(&shmheap__reg_lock);
    int n = h->refs;
    pthread_mutex_unlock(&shmheap__reg_lock);
    return n;
}

SHMHEAP_API shmheap *shmheap_of(const void *p)
{
    shmheap *r = NULL;
    pthread_mutex_lock(&shmheap__reg_lock);
    for (shmheap *h = shmheap__reg; h && !r; h = h->next)
        if ((const char *)p >= h->base && (const char *)p < h->base + h->size) r = h;
    pthread_mutex_unlock(&shmheap__reg_lock);
    return r;
}

SHMHEAP_API int shmheap_contains(const shmheap *h, const void *p, size_t len)
{
    if (!h || RCP__UNLIKELY(shmheap__closed(h))) return 0;
    uintptr_t a = (uintptr_t)p, d = (uintptr_t)h->data,
              end = d + (h->nspans << SHMHEAP__SPAN_SHIFT);
    return a >= d && a <= end && len <= end - a;
}

/* >>roots - named roots ------------------------------------------------------------------------ */

SHMHEAP_API int shmheap_root_set(shmheap *h, const char *name, void *p)
{
    if (!h) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    if (!name || !*name || strlen(name) >= SHMHEAP__ROOT_NAME) return SHMHEAP_E_BADNAME;
    if (p && ((char *)p < h->base || (size_t)((char *)p - h->base) >= h->size))
        return SHMHEAP_E_FOREIGN;
    int r = shmheap__lock(h);
    if (r) return r;
    struct shmheap__root *R = h->hdr->roots, *free_slot = NULL;
    r = p ? SHMHEAP_E_FULL : SHMHEAP_E_NOTFOUND;
    for (int i = 0; i < SHMHEAP__NROOTS; i++) {
        if (!R[i].used) { if (!free_slot) free_slot = &R[i]; continue; }
        if (strncmp(R[i].name, name, sizeof R[i].name)) continue;
        if (p) rcp__store(&R[i].off, (uint64_t)((char *)p - h->base));
        else rcp__store(&R[i].used, 0u);
        free_slot = NULL;
        r = 0;
        break;
    }
    if (r && p && free_slot) { /* name and offset first, then the used flag */
        snprintf(free_slot->name, sizeof free_slot->name, "%s", name);
        free_slot->off = (uint64_t)((char *)p - h->base);
        rcp__store(&free_slot->used, 1u);
        r = 0;
    }
    shmheap__unlock(h);
    return r;
}

SHMHEAP_API void *shmheap_root_get(shmheap *h, const char *name)
{
    void *p = NULL;
    if (h && RCP__UNLIKELY(shmheap__closed(h))) {
        errno = EBADF;
        return NULL;
    }
    if (!h || !name || shmheap__lock(h)) return NULL;
    for (int i = 0; i < SHMHEAP__NROOTS && !p; i++) {
        struct shmheap__root *R = &h->hdr->roots[i];
        if (R->used && !strncmp(R->name, name, sizeof R->name) && R->off < h->size)
            p = h->base + R->off;
    }
    shmheap__unlock(h);
    return p;
}

/* >>check - consistency check ------------------------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int shmheap__bad(shmheap *h, shmheap_stats *st, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (st) snprintf(st->problem, sizeof st->problem, "%s", buf);
    shmheap__log(&h->log, SHMHEAP_LOG_ERROR, "check: %s", buf);
    return SHMHEAP_E_CORRUPT;
}

SHMHEAP_API int shmheap_check(shmheap *h, shmheap_stats *st)
{
    shmheap_stats local;
    uint64_t backed = 0;
    if (!h) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    struct shmheap__hdr *H = h->hdr;
    int r = shmheap__validate(H, h->size);
    if (r) return shmheap__bad(h, st, "header invalid: %s", shmheap_strerror(r));
    if (H->base != (uint64_t)(uintptr_t)h->base || H->nspans != h->nspans)
        return shmheap__bad(h, st, "header changed");
    shmheap__sweep(h);
    if ((r = shmheap__lock(h))) return r;
    r = 0;
    st->size = h->size;
    st->data_bytes = h->nspans << SHMHEAP__SPAN_SHIFT;
    st->recoveries = H->recoveries;
    if (H->journal.op != SHMHEAP__J_NONE)
        r = shmheap__bad(h, st, "unfinished step %u", H->journal.op);
    for (size_t s = 0; s < h->nspans && !r; s++) {
        uint64_t e = rcp__load(&h->ent[s]), *bm = h->bm + s * SHMHEAP__WORDS;
        unsigned state = SHMHEAP__E_STATE(e), w;
        if (state == SHMHEAP__S_SMALL) {
            unsigned c = SHMHEAP__E_CLS(e);
            if (c >= SHMHEAP__NCLS) { r = shmheap__bad(h, st, "span %zu: class %u", s, c); break; }
            st->small_spans++;
            for (w = 0; w < SHMHEAP__WORDS && !r; w++) {
                uint64_t v = rcp__load(&bm[w]);
                if (w >= shmheap__nwords(c)) {
                    if (!(v & SHMHEAP__CLOSED))
                        r = shmheap__bad(h, st, "span %zu word %u: unused word open", s, w);
                    continue;
                }
                uint64_t tail = shmheap__empty_word(c, w);
                if (v & SHMHEAP__CLOSED)
                    r = shmheap__bad(h, st, "span %zu word %u: closed in a live span", s, w);
                else if ((v & tail) != tail)
                    r = shmheap__bad(h, st,
                                     "span %zu word %u: slots past the end in use (word %llx, "
                                     "class %u, entry %llx)",
                                     s, w, (unsigned long long)v, c, (unsigned long long)e);
                else {
                    size_t live = (size_t)__builtin_popcountll(v & ~tail);
                    st->live_blocks += live;
                    st->used_bytes += live * shmheap__size[c];
                }
            }
        } else if (state == SHMHEAP__S_HEAD) {
            uint64_t n = SHMHEAP__E_ARG(e);
            if (n == 0 || n > h->nspans - s) {
                r = shmheap__bad(h, st, "span %zu: run of %llu", s, (unsigned long long)n);
                break;
            }
            for (uint64_t i = 1; i < n && !r; i++)
                if (rcp__load(&h->ent[s + i]) != SHMHEAP__E_MAKE(SHMHEAP__S_CONT, 0, i))
                    r = shmheap__bad(h, st, "span %zu: run broken at %llu", s,
                                     (unsigned long long)(s + i));
            st->large_spans += n;
            st->live_blocks++;
            st->used_bytes += n << SHMHEAP__SPAN_SHIFT;
            s += n - 1;
        } else if (state == SHMHEAP__S_FREE) {
            if (e != SHMHEAP__S_FREE)
                r = shmheap__bad(h, st, "span %zu: free entry with bits %llx", s,
                                 (unsigned long long)e);
            st->free_spans++;
        } else {
            r = shmheap__bad(h, st, "span %zu: state %u outside a run", s, state);
        }
        /* Words of a span that is not small are closed, or zero if it was never small. Free
           spans past small_end were never small: their words are not read (on a fresh heap
           they may not even have a page yet). */
        if (state != SHMHEAP__S_SMALL && (state != SHMHEAP__S_FREE || s < H->small_end) &&
            shmheap__words_backed(h, s, &backed))
            for (w = 0; w < SHMHEAP__WORDS && !r; w++) {
                uint64_t v = rcp__load(&bm[w]);
                if (v && !(v & SHMHEAP__CLOSED))
                    r = shmheap__bad(h, st, "span %zu: open word in a non-small span", s);
            }
    }
    for (int i = 0; i < SHMHEAP__NROOTS && !r; i++)
        if (H->roots[i].used && H->roots[i].off >= h->size)
            r = shmheap__bad(h, st, "root %d outside the heap", i);
    for (int i = 0; i < SHMHEAP__NTC && !r; i++) { /* cached blocks: small slots of their class */
        struct shmheap__tc *tc = &H->tc[i];
        if (!rcp__load(&tc->owner)) continue;
        for (unsigned c = 0; c < SHMHEAP__NCLS && !r; c++) {
            unsigned n = rcp__load(&tc->n[c]);
            if (n > SHMHEAP__TC_CAP) {
                r = shmheap__bad(h, st, "thread cache %d: count %u", i, n);
                break;
            }
            for (unsigned k = 0; k < n && !r; k++) {
                uint64_t off = rcp__load(&tc->off[c][k]), e;
                size_t s;
                unsigned idx;
                if (off >= h->size || shmheap__locate(h, h->base + off, &s, &e, &idx) ||
                    SHMHEAP__E_STATE(e) != SHMHEAP__S_SMALL || SHMHEAP__E_CLS(e) != c)
                    r = shmheap__bad(h, st, "thread cache %d: block %llx is not a slot of class %u",
                                     i, (unsigned long long)off, c);
            }
            st->cached_blocks += n;
            st->used_bytes -= (size_t)n * shmheap__size[c];
        }
    }
    if (!r) st->live_blocks -= st->cached_blocks;
    shmheap__unlock(h);
    return r;
}

/* >>seal - sealing and protection keys --------------------------------------------------------- */

static int shmheap__pages(const shmheap *h, const void *p, size_t len, uintptr_t *a, size_t *n)
{
    if (!h || !p) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    /* only the data area: sealing the header would stop this process's own allocations */
    if (!shmheap_contains(h, p, len)) return SHMHEAP_E_FOREIGN;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    *a = (uintptr_t)p & ~(pg - 1);
    *n = len ? (((uintptr_t)p + len + pg - 1) & ~(pg - 1)) - *a : 0;
    return 0;
}

static int shmheap__protect(shmheap *h, const void *p, size_t len, int prot)
{
    uintptr_t a;
    size_t n;
    int r = shmheap__pages(h, p, len, &a, &n);
    if (r) return r;
    return n && mprotect((void *)a, n, prot) ? -errno : 0;
}

/* Sealing a few pages in the middle of the heap's one big mapping makes the kernel split that
   mapping in three, and unsealing merges the pieces again: both cost as much as the permission
   change itself. So the first seal of a range maps it again, read-only, from another open of the
   same file (/proc/self/fd): a mapping of its own that the kernel never merges with its
   neighbours (they map another struct file), so later seals and unseals of that exact range are
   one mprotect each. Same pages, same address: nothing changes for any other process. Only on
   tmpfs (memfd, /dev/shm: a device or a disk file may refuse a page-sized mapping), at most
   SHMHEAP__SEAL_VMAS ranges per handle; a new range may cover kept ones whole (it replaces
   them: ranges only grow, so nested seals never map again and again) but not stick out of
   one; none once protection keys tagged the heap (a new mapping would drop the key). */
static int shmheap__seal_alias_ok(shmheap *h)
{
    if (h->seal_alias < 0) {
        struct statfs sf;
        h->seal_alias = h->fd >= 0 && fstatfs(h->fd, &sf) == 0 &&
                        (unsigned long)sf.f_type == SHMHEAP__TMPFS_MAGIC;
    }
    return h->seal_alias > 0;
}

/* Map [a, a+n) again from a new open of h's file, read-only. 1: done; 0: not done, nothing
   changed (the caller mprotects); negative: the range could not be mapped back (-errno). */
static int shmheap__seal_alias(shmheap *h, uintptr_t a, size_t n)
{
    char path[40];
    snprintf(path, sizeof path, "/proc/self/fd/%d", h->fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        h->seal_alias = 0; /* no /proc, or no right to open it again: do not try again */
        return 0;
    }
    off_t off = (off_t)(a - (uintptr_t)h->base);
    void *m = mmap((void *)a, n, PROT_READ, MAP_SHARED | MAP_FIXED, f, off);
    int e = errno;
    close(f);
    if (m == (void *)a) return 1;
    h->seal_alias = 0;
    /* a failed MAP_FIXED may have unmapped the range already (older kernels): map it back */
    m = mmap((void *)a, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, off);
    if (m != (void *)a) return -e;
    return 0;
}

SHMHEAP_API int shmheap_seal(shmheap *h, const void *p, size_t len)
{
    uintptr_t a;
    size_t n;
    int r = shmheap__pages(h, p, len, &a, &n);
    if (r || !n) return r;
    uintptr_t e = a + n;
    pthread_mutex_lock(&h->seal_mu);
    /* kept: exactly a range of ours; inside: ranges of ours within [a, e), which the new
       mapping replaces; stray: one that sticks out of it (then mprotect splits, as before) */
    unsigned kept = 0, inside = 0, stray = 0;
    for (unsigned i = 0; i < h->nseal_vma; i++) {
        uintptr_t x = h->seal_vma[i][0], y = h->seal_vma[i][1];
        kept |= x == a && y == e;
        inside += a <= x && y <= e;
        stray |= x < e && a < y && (x < a || e < y);
    }
    if (!kept && !stray && h->nseal_vma - inside < SHMHEAP__SEAL_VMAS &&
        shmheap__seal_alias_ok(h)) {
        r = shmheap__seal_alias(h, a, n);
        if (r > 0) {
            unsigned k = 0;
            for (unsigned i = 0; i < h->nseal_vma; i++)
                if (!(a <= h->seal_vma[i][0] && h->seal_vma[i][1] <= e)) {
                    h->seal_vma[k][0] = h->seal_vma[i][0];
                    h->seal_vma[k++][1] = h->seal_vma[i][1];
                }
            h->seal_vma[k][0] = a;
            h->seal_vma[k][1] = e;
            h->nseal_vma = k + 1;
        }
        pthread_mutex_unlock(&h->seal_mu);
        if (r) return r > 0 ? 0 : r;
    } else {
        pthread_mutex_unlock(&h->seal_mu);
    }
    return mprotect((void *)a, n, PROT_READ) ? -errno : 0;
}
SHMHEAP_API int shmheap_unseal(shmheap *h, const void *p, size_t len)
{
    return shmheap__protect(h, p, len, PROT_READ | PROT_WRITE);
}

static int shmheap__cmp_range(const void *x, const void *y)
{
    const uintptr_t *a = (const uintptr_t *)x, *b = (const uintptr_t *)y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

SHMHEAP_API int shmheap_unseal_batch(shmheap *h, const shmheap_range *ranges, size_t n)
{
    if (!n) return 0;
    if (!ranges || n > SIZE_MAX / (2 * sizeof(uintptr_t))) return SHMHEAP_E_INVAL;
    uintptr_t *v = (uintptr_t *)SHMHEAP_MALLOC(n * 2 * sizeof *v);
    if (!v) return -ENOMEM;
    int r = 0;
    for (size_t i = 0; i < n && !r; i++) {
        size_t len;
        r = shmheap__pages(h, ranges[i].p, ranges[i].len, &v[2 * i], &len);
        v[2 * i + 1] = v[2 * i] + len;
    }
    if (!r) {
        qsort(v, n, 2 * sizeof *v, shmheap__cmp_range);
        for (size_t i = 0; i < n && !r;) { /* merge touching or overlapping ranges */
            uintptr_t a = v[2 * i], e = v[2 * i + 1];
            for (i++; i < n && v[2 * i] <= e; i++)
                if (v[2 * i + 1] > e) e = v[2 * i + 1];
            if (e > a && mprotect((void *)a, e - a, PROT_READ | PROT_WRITE)) r = -errno;
        }
    }
    shmheap__free(v);
    return r;
}

static int shmheap__pku = -1; /* -1: not probed yet */

SHMHEAP_API int shmheap_pkey_supported(void)
{
    int v = __atomic_load_n(&shmheap__pku, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(SYS_pkey_alloc)
    unsigned a, b, c, d;
    /* PKU, and OSPKE: the OS turned it on; then the kernel must offer the system calls */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 3)) && (c & (1u << 4))) {
        int e = errno;
        long k = syscall(SYS_pkey_alloc, 0, 0);
        v = k >= 0 || errno == ENOSPC; /* ENOSPC: supported, all keys in use */
        if (k >= 0) syscall(SYS_pkey_free, k);
        errno = e;
    }
#endif
    __atomic_store_n(&shmheap__pku, v, __ATOMIC_RELAXED);
    return v;
}

SHMHEAP_API int shmheap_pkey_alloc(unsigned rights)
{
#ifdef SYS_pkey_alloc
    if (!shmheap_pkey_supported()) return SHMHEAP_E_NOTSUP;
    if (rights > 3) return SHMHEAP_E_INVAL;
    long k = syscall(SYS_pkey_alloc, 0, rights);
    return k < 0 ? -errno : (int)k;
#else
    (void)rights;
    return SHMHEAP_E_NOTSUP;
#endif
}

SHMHEAP_API int shmheap_pkey_free(int pkey)
{
#ifdef SYS_pkey_free
    if (!shmheap_pkey_supported()) return SHMHEAP_E_NOTSUP;
    return syscall(SYS_pkey_free, pkey) ? -errno : 0;
#else
    (void)pkey;
    return SHMHEAP_E_NOTSUP;
#endif
}

SHMHEAP_API int shmheap_pkey_protect(shmheap *h, const void *p, size_t len, int pkey)
{
#ifdef SYS_pkey_mprotect
    if (!shmheap_pkey_supported()) return SHMHEAP_E_NOTSUP;
    if (!h || !p) return SHMHEAP_E_INVAL;
    if (RCP__UNLIKELY(shmheap__closed(h))) return SHMHEAP_E_BADHANDLE;
    pthread_mutex_lock(&h->seal_mu); /* seals map no new ranges from now on: they would drop it */
    h->seal_alias = 0;
    h->pkeyed = 1;
    pthread_mutex_unlock(&h->seal_mu);
    uintptr_t lo = (uintptr_t)h->base, x = (uintptr_t)p;
    if (x < lo || x - lo > h->size || len > h->size - (x - lo)) return SHMHEAP_E_FOREIGN;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = x & ~(pg - 1);
    size_t n = ((x + len + pg - 1) & ~(pg - 1)) - a;
    return n && syscall(SYS_pkey_mprotect, (void *)a, n, PROT_READ | PROT_WRITE, pkey) ? -errno : 0;
#else
    (void)h; (void)p; (void)len; (void)pkey;
    return SHMHEAP_E_NOTSUP;
#endif
}

SHMHEAP_API int shmheap_pkey_set(int pkey, unsigned rights)
{
#if defined(__x86_64__)
    if (!shmheap_pkey_supported()) return SHMHEAP_E_NOTSUP;
    if (pkey < 0 || pkey > 15 || rights > 3) return SHMHEAP_E_INVAL;
    unsigned eax, edx, ecx = 0;
    __asm__ __volatile__(".byte 0x0f,0x01,0xee" : "=a"(eax), "=d"(edx) : "c"(ecx)); /* rdpkru */
    eax = (eax & ~(3u << (2 * pkey))) | (rights << (2 * pkey));
    /* wrpkru */
    __asm__ __volatile__(".byte 0x0f,0x01,0xef" ::"a"(eax), "c"(0u), "d"(0u) : "memory");
    return 0;
#else
    (void)pkey; (void)rights;
    return SHMHEAP_E_NOTSUP;
#endif
}

#endif /* SHMHEAP_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the rpcool authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
