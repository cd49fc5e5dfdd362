/* SPDX-License-Identifier: MIT */
/* shmheap.h - a shared heap over CXL memory, mapped at the same address in every process.
   version 0.1

   USAGE
   -----
   Copy shmheap.h and the impl/ folder into your project. In exactly one C or C++ file:

       #define SHMHEAP_IMPLEMENTATION
       #include "shmheap.h"

   Other files include "shmheap.h" without the define. Build with plain `cc -pthread` on Linux
   (glibc). Options, defined before the implementation include:
       SHMHEAP_STATIC        make every function static (private to that file)
       SHMHEAP_WITH_CXL      resolve "cxl:REGION" names through libcxl (link -lcxl); without it
                             such names fail with SHMHEAP_E_NOTSUP
       SHMHEAP_ASSERT(x)     your assert (default: assert from <assert.h>)
   Set SHMHEAP_DEBUG=1 in the environment to log what the library does to stderr.

   WHAT IT IS
   ----------
   A heap is a region of "CXL memory" that every process of a pod maps at one virtual address,
   so a plain pointer into it means the same thing everywhere. Where the memory lives is named:
       "NAME" or "shm:NAME"   a POSIX shared-memory object (/dev/shm/NAME): emulated CXL, the
                              default; all processes of one host form a pod
       "file:PATH" or a path  any file that can be mapped shared: a regular file, a file on
       containing '/'         hugetlbfs, a PCI BAR such as ivshmem's .../resource2
       "/dev/daxX.Y"          a device-DAX character device (2 MiB alignment)
       "cxl:regionN"          a CXL region, resolved through libcxl to its /dev/daxX.Y
   A new heap's address comes from the window [0x600000000000, 0x700000000000), handed out by a
   small pod directory that itself lives in shared memory (/dev/shm/shmheap.pod, or $SHMHEAP_POD):
   no daemon. The address is recorded in the heap's header; every opener maps exactly there with
   MAP_FIXED_NOREPLACE and fails with SHMHEAP_E_ADDRINUSE rather than replace a mapping. (Hosts
   that share a device but not /dev/shm each keep a directory; the header still decides.)

   EXAMPLE
   -------
       shmheap *h;
       int rc = shmheap_create("demo", NULL, &h);          // or shmheap_open("demo", NULL, &h)
       if (rc) { fprintf(stderr, "%s\n", shmheap_strerror(rc)); return 1; }
       struct node { int v; struct node *next; } *n = shmheap_malloc(h, sizeof *n);
       n->v = 42; n->next = NULL;
       shmheap_root_set(h, "list", n);                     // another process: shmheap_root_get
       shmheap_close(h);

   ALLOCATOR
   ---------
   Small blocks (up to 32 KiB, 40 size classes) come from 64 KiB spans, each with a bitmap of
   slots; allocating and freeing is one compare-and-swap on a bitmap word, with no lock, so any
   number of threads in any number of processes allocate at once. Threads are spread over 16
   stripes, each with its own current span per class, so they rarely touch the same cache line.
   Large blocks are runs of spans, taken under one robust process-shared mutex.
   Crash safety: a process killed at any moment (SIGKILL) leaves the heap consistent and usable.
   Lock-free steps are single atomic operations. Steps under the mutex write an intent record
   first; the next locker gets EOWNERDEAD, undoes an unfinished allocation or completes an
   unfinished free, and carries on. What is NOT reclaimed: blocks the dead process had allocated
   stay allocated, because the heap cannot know whether another process still uses them (rpcool
   gives every connection its own heap and reclaims it whole). A process killed between taking a
   slot and returning it leaks that one slot.
   Freeing checks the pointer: outside the heap (SHMHEAP_E_FOREIGN), not the start of a block
   (SHMHEAP_E_BADPTR), already free (SHMHEAP_E_DOUBLEFREE; detected unless the block was
   allocated again in between).

   THREAD SAFETY
   -------------
   Every function may be called from any thread of any process, except close/unlink of a heap
   that other threads of the same process still use.

   ERRORS
   ------
   Functions return 0 or a negative code: -errno from the system, or one of SHMHEAP_E_*.
   shmheap_strerror(code) explains it. Allocation functions return NULL (errno = ENOMEM) when
   the heap is full; shmheap_alloc() returns the reason instead.

   LIMITS
   ------
   Linux x86-64/aarch64 with glibc. Heaps from 2 MiB to 16 TiB. 64 named roots per heap, names
   up to 47 bytes. Heap names up to 100 bytes. The mutex inside the heap is a glibc
   pthread_mutex_t: all processes sharing a heap must use the same C library.
*/
#ifndef SHMHEAP_H
#define SHMHEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef SHMHEAP_STATIC
#define SHMHEAP_API static
#else
#define SHMHEAP_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shmheap shmheap; /* a process-local handle to a mapped heap */

/* Options for create and open. Zero means default; use designated initialisers. */
typedef struct shmheap_opts {
    size_t size;         /* create: bytes, rounded up to 2 MiB; 0 = 64 MiB for shm/files,
                            the whole device for DAX and PCI BARs */
    uintptr_t addr;      /* create: fixed base address (2 MiB aligned); 0 = from the pod */
    unsigned mode;       /* create: permissions of a new object; 0 = 0600 */
    const char *pod;     /* pod directory name in /dev/shm; NULL = $SHMHEAP_POD or shmheap.pod */
    int overwrite;       /* create on an existing file or device: format it anyway */
} shmheap_opts;

enum {
    SHMHEAP_E_BADMAGIC = -1000, /* not a shmheap (bad magic), or never finished initialising */
    SHMHEAP_E_VERSION,          /* made by an incompatible layout version */
    SHMHEAP_E_TOOSMALL,         /* file or device too small, or header sizes inconsistent */
    SHMHEAP_E_FULL,             /* heap full */
    SHMHEAP_E_DOUBLEFREE,       /* block already free */
    SHMHEAP_E_FOREIGN,          /* pointer not inside this heap */
    SHMHEAP_E_BADPTR,           /* pointer inside the heap but not the start of a block */
    SHMHEAP_E_ADDRINUSE,        /* the heap's address range is taken in this process or pod */
    SHMHEAP_E_NOTSUP,           /* feature not supported here (built without it, or no CPU/OS
                                   support) */
    SHMHEAP_E_CORRUPT,          /* the consistency check found damage */
    SHMHEAP_E_BADNAME,          /* malformed heap or root name */
    SHMHEAP_E_NOTFOUND,         /* no heap, device, region or root of that name */
    SHMHEAP_E_EXISTS,           /* a heap of that name exists already */
    SHMHEAP_E_INVAL             /* invalid argument */
};

SHMHEAP_API const char *shmheap_strerror(int code);

/* Lifetime. create fails with SHMHEAP_E_EXISTS if the name exists (unless opts->overwrite).
   close unmaps (the heap lives on); unlink removes the name and frees its address range. */
SHMHEAP_API int shmheap_create(const char *name, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_open(const char *name, const shmheap_opts *opts, shmheap **out);
SHMHEAP_API int shmheap_close(shmheap *h);
SHMHEAP_API int shmheap_unlink(const char *name, const shmheap_opts *opts);

SHMHEAP_API void *shmheap_base(const shmheap *h);
SHMHEAP_API size_t shmheap_size(const shmheap *h);
SHMHEAP_API const char *shmheap_name(const shmheap *h);
/* The open heap of this process that contains p, or NULL. */
SHMHEAP_API shmheap *shmheap_of(const void *p);

/* Allocation. Sizes up to 32 KiB come from size classes, larger ones are multiples of 64 KiB. */
SHMHEAP_API void *shmheap_malloc(shmheap *h, size_t size);
SHMHEAP_API void *shmheap_calloc(shmheap *h, size_t count, size_t size);
SHMHEAP_API void *shmheap_realloc(shmheap *h, void *p, size_t size);
SHMHEAP_API void *shmheap_aligned_alloc(shmheap *h, size_t align, size_t size);
/* The same with a reason: 0, SHMHEAP_E_FULL or SHMHEAP_E_INVAL. align 0 = 16. */
SHMHEAP_API int shmheap_alloc(shmheap *h, size_t size, size_t align, void **out);
/* 0, or SHMHEAP_E_FOREIGN / SHMHEAP_E_BADPTR / SHMHEAP_E_DOUBLEFREE; freeing NULL is 0. */
SHMHEAP_API int shmheap_free(shmheap *h, void *p);
/* Bytes usable at p, or 0 if p is not a live block of h. */
SHMHEAP_API size_t shmheap_usable_size(shmheap *h, const void *p);

/* Checks every invariant of the heap (under its lock) and fills st if not NULL.
   Returns 0 or SHMHEAP_E_CORRUPT (with the first problem logged when SHMHEAP_DEBUG is set and
   copied to st->problem). */
typedef struct shmheap_stats {
    size_t size;         /* bytes of the mapping */
    size_t data_bytes;   /* bytes available to blocks */
    size_t used_bytes;   /* bytes in live blocks (slot sizes) */
    size_t live_blocks;
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
   read-write. Batch unseal merges adjacent ranges into few mprotect calls. */
typedef struct shmheap_range { const void *p; size_t len; } shmheap_range;
SHMHEAP_API int shmheap_seal(shmheap *h, const void *p, size_t len);
SHMHEAP_API int shmheap_unseal(shmheap *h, const void *p, size_t len);
SHMHEAP_API int shmheap_unseal_batch(shmheap *h, const shmheap_range *r, size_t n);

/* Memory protection keys (Intel/AMD pku). supported: 1 or 0. Without pku the others return
   SHMHEAP_E_NOTSUP. rights: 0 = full access, 1 = no access (PKEY_DISABLE_ACCESS),
   2 = read only (PKEY_DISABLE_WRITE). */
SHMHEAP_API int shmheap_pkey_supported(void);
SHMHEAP_API int shmheap_pkey_alloc(unsigned rights);
SHMHEAP_API int shmheap_pkey_free(int pkey);
SHMHEAP_API int shmheap_pkey_protect(shmheap *h, const void *p, size_t len, int pkey);
SHMHEAP_API int shmheap_pkey_set(int pkey, unsigned rights);

#ifdef __cplusplus
}
#endif
#endif /* SHMHEAP_H */
