/* SPDX-License-Identifier: MIT */
/* impl/platform.h - internals shared by the rpcool headers: atomics that work in C11 and C++17,
 * futex wait/wake, clocks, thread-local storage, logging. Not a public API: names start with
 * rcp__ and may change. Linux only. */
#ifndef RCP__PLATFORM_H
#define RCP__PLATFORM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#if defined(__cplusplus)
#define RCP__THREAD_LOCAL thread_local
#define RCP__STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RCP__THREAD_LOCAL _Thread_local
#define RCP__STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define RCP__LIKELY(x) __builtin_expect(!!(x), 1)
#define RCP__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* GCC/Clang __atomic builtins on plain integers: the same code is valid C11 and C++17, and the
 * integers keep a fixed layout in shared memory. */
#define rcp__load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define rcp__load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define rcp__store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define rcp__store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define rcp__cas(p, expp, desired) \
    __atomic_compare_exchange_n((p), (expp), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define rcp__fetch_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#define rcp__fetch_or(p, v) __atomic_fetch_or((p), (v), __ATOMIC_ACQ_REL)
#define rcp__fetch_and(p, v) __atomic_fetch_and((p), (v), __ATOMIC_ACQ_REL)
#define rcp__exchange(p, v) __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
#define rcp__fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)

static inline void rcp__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static inline uint64_t rcp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Shared (not private) futexes: the words live in memory mapped by several processes. Returns 0
 * when woken or the value differed, -ETIMEDOUT after timeout_ns (0 = wait forever). */
static inline int rcp__futex_wait(uint32_t *addr, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
        ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
        tsp = &ts;
    }
    long r = syscall(SYS_futex, addr, FUTEX_WAIT, expected, tsp, NULL, 0);
    if (r == -1 && errno == ETIMEDOUT) return -ETIMEDOUT;
    return 0;
}

static inline void rcp__futex_wake(uint32_t *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* Logging: silent unless the named environment variable is set (any value), then to stderr. */
static inline void rcp__vlog(const char *envvar, const char *tag, const char *fmt, va_list ap)
{
    if (!getenv(envvar)) return;
    fprintf(stderr, "[%s %d] ", tag, (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

/* Log callbacks (the log/log_user fields of the public opts structs): level, one line of text
 * without a newline, the user pointer. */
typedef void rcp__log_fn(int level, const char *msg, void *user);
struct rcp__logger {
    rcp__log_fn *fn; /* NULL: silent */
    void *user;
};

/* The default logger that an environment variable switches on: "[TAG PID] msg" on stderr, where
 * user is the tag string. */
static inline void rcp__log_stderr(int level, const char *msg, void *user)
{
    (void)level;
    fprintf(stderr, "[%s %d] %s\n", (const char *)user, (int)getpid(), msg);
}

/* Whether the environment variable is set (any value), read once per process and cached in
 * *cache (-1 before the first read; then pid * 2 + whether it is set, so that a forked child,
 * a new process, reads it again). */
static inline int rcp__env_once(int *cache, const char *envvar)
{
    int v = __atomic_load_n(cache, __ATOMIC_ACQUIRE), pid = (int)getpid();
    if (v < 0 || v >> 1 != pid) {
        v = pid * 2 + (getenv(envvar) != NULL);
        __atomic_store_n(cache, v, __ATOMIC_RELEASE);
    }
    return v & 1;
}

/* The logger a handle keeps: the user's callback if given, else the stderr logger when the
 * environment variable is set, else none. */
static inline struct rcp__logger rcp__logger_pick(rcp__log_fn *fn, void *user, int *cache,
                                                  const char *envvar, const char *tag)
{
    struct rcp__logger lg;
    lg.fn = fn;
    lg.user = user;
    if (!fn && rcp__env_once(cache, envvar)) {
        lg.fn = rcp__log_stderr;
        lg.user = (void *)tag;
    }
    return lg;
}

/* Format one message and hand it to the logger, if there is one. */
static inline void rcp__logv(const struct rcp__logger *lg, int level, const char *fmt, va_list ap)
{
    char msg[1024];
    if (!lg || !lg->fn) return;
    vsnprintf(msg, sizeof msg, fmt, ap);
    lg->fn(level, msg, lg->user);
}

/* A full barrier for store-then-load handshakes ("I sleep" / "is anyone asleep?") that
 * ThreadSanitizer accepts: TSan rejects atomic_thread_fence, so under it a seq_cst
 * read-modify-write of a dummy word stands in (a locked instruction, a full barrier on x86). */
#if defined(__SANITIZE_THREAD__)
static inline void rcp__full_fence(void)
{
    static uint32_t dummy;
    __atomic_fetch_add(&dummy, 0, __ATOMIC_SEQ_CST);
}
#else
static inline void rcp__full_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

#endif /* RCP__PLATFORM_H */
