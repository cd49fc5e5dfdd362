/* tests/t.h - the tiny test framework of the rpcool tests.
 * A test binary prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why",
 * and exits non-zero if anything failed. tests/run.sh counts the lines. */
#ifndef T_H
#define T_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static __attribute__((unused)) int t_failed, t_passed;
static __attribute__((unused)) const char *t_name = "?";
static __attribute__((unused)) int t_cur_failed;

static __attribute__((unused)) void t_begin(const char *name) { t_name = name; t_cur_failed = 0; }
static __attribute__((unused)) void t_end(void)
{
    if (!t_cur_failed) { printf("ok %s\n", t_name); t_passed++; }
    fflush(stdout);
}
static __attribute__((unused)) void t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    printf("FAIL %s: %s:%d: ", t_name, file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!t_cur_failed) t_failed++;
    t_cur_failed = 1;
}
static __attribute__((unused)) void t_skip(const char *name, const char *why)
{
    printf("skip %s: %s\n", name, why);
    fflush(stdout);
}

#define CHECK(c) do { if (!(c)) t_fail(__FILE__, __LINE__, "%s", #c); } while (0)
#define CHECKF(c, ...) do { if (!(c)) t_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
    if (_a != _b) t_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, _a, #b, _b); } while (0)
#define TEST(fn) do { t_begin(#fn); fn(); t_end(); } while (0)
#define T_DONE() (fflush(stdout), t_failed ? 1 : 0)

/* Unique names so parallel runs and leftovers never collide. */
static __attribute__((unused)) const char *t_uniq(const char *base)
{
    static char buf[8][96];
    static int i;
    char *b = buf[i++ & 7];
    snprintf(b, sizeof buf[0], "t-%s-%d-%d", base, (int)getpid(), i);
    return b;
}
/* xorshift64: reproducible pseudo-random numbers for the stress tests. */
static __attribute__((unused)) uint64_t t_rng(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

#ifdef SHMHEAP_H
/* A new heap of the given size, or a FAIL line and NULL. */
static __attribute__((unused)) shmheap *t_heap(const char *name, size_t size)
{
    shmheap_opts o = {.size = size};
    shmheap *h = NULL;
    int r = shmheap_create(name, &o, &h);
    CHECKF(r == 0, "create %s: %s", name, shmheap_strerror(r));
    return h;
}
#endif
#endif
