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
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
/* TEST(fn), or, when why is not NULL, a skip line for fn saying why. */
#define TEST_UNLESS(why, fn) do { if (why) t_skip(#fn, why); else TEST(fn); } while (0)
#define T_DONE() (fflush(stdout), t_failed ? 1 : 0)

/* Unique names so parallel runs and leftovers never collide. tests/run.sh sets RPCOOL_TEST_TAG
 * (R<its pid>.) so that it can tell the files of its own run that a test left in /dev/shm. */
static __attribute__((unused)) const char *t_uniq(const char *base)
{
    static char buf[8][96];
    static int i;
    const char *tag = getenv("RPCOOL_TEST_TAG");
    char *b = buf[i++ & 7];
    snprintf(b, sizeof buf[0], "t-%s-%s%d-%d", base, tag ? tag : "", (int)getpid(), i);
    return b;
}
/* xorshift64: reproducible pseudo-random numbers for the stress tests. */
static __attribute__((unused)) uint64_t t_rng(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* The test filter: `test_x NAME` runs only the tests whose name contains NAME (RUN); an
 * argument that starts with "--" (tests/run.sh passes --valgrind) is not a filter. */
static __attribute__((unused)) const char *t_only;
#define RUN(fn) do { if (!t_only || strstr(#fn, t_only)) TEST(fn); } while (0)
/* A test not run under ThreadSanitizer (T_TSAN builds): it forks a process with threads, or
 * its timing does not hold there. */
#ifdef T_TSAN
#define RUN_NO_TSAN(fn) ((void)fn)
#else
#define RUN_NO_TSAN(fn) RUN(fn)
#endif

/* What every test main does first: the filter, SIGPIPE ignored (a peer that dies mid-write is a
 * failed check, not a dead test binary), and under ThreadSanitizer the pod and address window
 * such programs can map (see shmheap.h). */
static __attribute__((unused)) void t_init(int argc, char **argv)
{
    t_only = argc > 1 && strncmp(argv[1], "--", 2) ? argv[1] : NULL;
    signal(SIGPIPE, SIG_IGN);
#ifdef T_TSAN
    setenv("SHMHEAP_POD", "shmheap-tsan.pod", 0);
    setenv("SHMHEAP_WINDOW", "560000000000-568000000000", 0);
#endif
}

/* Runs fn(arg) in a child process; returns its exit status, or 128 + signal. The child is a
   fork of this process: under ASan, an allocator lock held by another thread at that moment
   (a server's heap maker refilling after many connects) stays held in the child, whose first
   malloc then hangs. Where a server of this process may be busy, run this binary again in a
   role instead (tests/test_rpcool_scale.c, spawn_self). */
static __attribute__((unused)) int t_in_child(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* SIGKILL a child (if any) and reap it. */
static __attribute__((unused)) void t_kill_wait(pid_t p)
{
    if (p > 0) { kill(p, SIGKILL); waitpid(p, NULL, 0); }
}

/* fork with a pipe p between parent and child: in the child (0 returned) p[0] is closed, in
   the parent (the child's pid, or -1 with both ends closed) p[1]. -1 also if pipe fails. */
static __attribute__((unused)) pid_t t_fork_pipe(int p[2])
{
    if (pipe(p)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) close(p[0]);
    close(p[pid == 0 ? 0 : 1]);
    return pid;
}

/* Wait for a child's "ready" byte on fd, then close fd: 0, or -1 if the child closed its end
   (died) first. */
static __attribute__((unused)) int t_ready_wait(int fd)
{
    char x = 0;
    int ok = read(fd, &x, 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

/* 1 if process PID (a /proc name) has the pod of this process (SHMHEAP_POD) open. */
static __attribute__((unused)) int t_has_pod(const char *pid)
{
    const char *pod = getenv("SHMHEAP_POD");
    char want[200], p[300], l[256];
    snprintf(want, sizeof want, "/dev/shm/%s", pod && *pod ? pod : "shmheap.pod");
    snprintf(p, sizeof p, "/proc/%s/fd", pid);
    DIR *d = opendir(p);
    struct dirent *e;
    int yes = 0;
    while (d && !yes && (e = readdir(d))) {
        char fp[600];
        snprintf(fp, sizeof fp, "%s/%s", p, e->d_name);
        ssize_t k = readlink(fp, l, sizeof l - 1);
        if (k > 0) l[k] = 0;
        yes = k > 0 && !strcmp(l, want);
    }
    if (d) closedir(d);
    return yes;
}

/* Heaps on memfds (connection heaps) mapped at a base in [lo, hi) by a process that has this
   pod open (pods share the address window: only a user of ours can map a range of ours),
   counted once each (by inode); with exact set, the one whose base is lo (0 or 1). Reads
   /proc/PID/fd and /proc/PID/maps. */
static __attribute__((unused)) int t_memfd_maps(uint64_t lo, uint64_t hi, int exact)
{
    unsigned long inos[4096];
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || !t_has_pod(e->d_name)) continue;
        char p[300], line[512];
        snprintf(p, sizeof p, "/proc/%s/maps", e->d_name);
        FILE *f = fopen(p, "r");
        while (f && fgets(line, sizeof line, f)) {
            unsigned long long a, b;
            unsigned long ino;
            if (!strstr(line, "/memfd:") ||
                sscanf(line, "%llx-%llx %*s %*s %*s %lu", &a, &b, &ino) != 3)
                continue;
            if (exact ? a != lo : (a < lo || a >= hi)) continue;
            int seen = 0;
            for (int k = 0; k < n && !seen; k++) seen = inos[k] == ino;
            if (!seen && n < 4096) inos[n++] = ino;
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

/* 1 if the object /dev/shm/NAME exists ("shm:NAME" too); a heap on a memfd ("fd:...") while its
   pod entry is held, or for one carved from a reservation ("fd:...@ADDR") while a process maps
   it. */
static __attribute__((unused)) int t_shm_exists(const char *name)
{
    char p[200];
    struct stat st;
    int idx;
    const char *at = strchr(name, '@');
    unsigned long long base;
    if (!strncmp(name, "fd:", 3) && at && sscanf(at + 1, "%llx", &base) == 1)
        return t_memfd_maps(base, base + 1, 1) > 0;
    if (sscanf(name, "fd:%d:", &idx) == 1) { /* a heap on a memfd: is its pod entry held? */
        const char *pod = getenv("SHMHEAP_POD");
        snprintf(p, sizeof p, "/dev/shm/%s", pod && *pod ? pod : "shmheap.pod");
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct flock fl;
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = ((off_t)1 << 30) + idx;
        fl.l_len = 1;
        int held = fd >= 0 && fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
        if (fd >= 0) close(fd);
        return held;
    }
    if (!strncmp(name, "shm:", 4)) name += 4;
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return stat(p, &st) == 0;
}

#ifdef SHMHEAP__POD_LOCKS /* the implementation is in this file */
/* Heaps on descriptors (memfds) in the pod of this process (SHMHEAP_POD): how many entries are
 * recorded (*rec) and how many of those somebody still holds (*held: a process has the heap or
 * a hold on it). A recorded entry nobody holds is freed by the next shmheap_create_fd; leaked
 * is what stays held. 0, or -1 when the pod cannot be opened. */
static __attribute__((unused)) int t_pod_fd_entries(int *rec, int *held)
{
    struct shmheap__podref pr;
    *rec = *held = 0;
    if (shmheap__pod_open(NULL, &pr)) return -1;
    for (int i = 0; i < SHMHEAP__POD_N; i++) {
        struct shmheap__pod_ent *e = &pr.p->e[i];
        if (!e->base || strncmp(e->key, "fd:", 3)) continue;
        size_t kl = strnlen(e->key, sizeof e->key);
        if (kl > 5 && !strcmp(e->key + kl - 5, ":resv")) { /* a reservation: its live heaps */
            int n = t_memfd_maps(e->base, e->base + e->size, 0);
            *rec += n ? n : 1;
            *held += n;
            continue;
        }
        (*rec)++;
        *held += shmheap__pod_lock(pr.fd, i, F_WRLCK, F_OFD_GETLK) == 1;
    }
    shmheap__pod_close(&pr);
    return 0;
}

/* Held entries only. */
static __attribute__((unused)) int t_pod_held(void)
{
    int rec, held;
    return t_pod_fd_entries(&rec, &held) ? -1 : held;
}

/* A private pod for one test (SHMHEAP_POD set to "t-pod-BASE-PID"), so that only its own heaps
   count in t_pod_fd_entries; t_pod_leave removes it and gives back the pod of before. */
typedef struct t_pod { char name[64], saved[96]; int had; } t_pod;
static __attribute__((unused)) void t_pod_enter(t_pod *p, const char *base)
{
    const char *old = getenv("SHMHEAP_POD");
    p->had = old != NULL;
    snprintf(p->saved, sizeof p->saved, "%s", old ? old : "");
    snprintf(p->name, sizeof p->name, "t-pod-%s-%d", base, (int)getpid());
    setenv("SHMHEAP_POD", p->name, 1);
}
static __attribute__((unused)) void t_pod_leave(t_pod *p)
{
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", p->name);
    unlink(path);
    if (p->had) setenv("SHMHEAP_POD", p->saved, 1);
    else unsetenv("SHMHEAP_POD");
}
#endif

/* Remove what a killed server of channel NAME leaves in /dev/shm: its name file and its socket. */
static __attribute__((unused)) void t_rm_channel(const char *name)
{
    char p[200];
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", name);
    unlink(p);
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s.sock", name);
    unlink(p);
}

/* Whether p can be written: a read(2) into it from /dev/zero (writes one zero byte) succeeds,
 * without the fault a plain store would raise on a sealed page. */
static __attribute__((unused)) int t_writable(const void *p)
{
    static int devzero = -1;
    if (devzero < 0) devzero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    return read(devzero, (void *)p, 0) == 0 && read(devzero, (void *)p, 1) == 1;
}

#ifdef SHMHEAP_H
/* Close (if open) and unlink a heap, whatever state it is in. */
static __attribute__((unused)) void t_rm(shmheap *h, const char *name)
{
    if (h) shmheap_close(h);
    shmheap_unlink(name, NULL);
}

/* The end of an allocator test: the heap passes shmheap_check with no block live (else FAIL
   lines), then t_rm. */
static __attribute__((unused)) void t_rm_empty(shmheap *h, const char *name)
{
    shmheap_stats st;
    int r = shmheap_check(h, &st);
    CHECKF(r == 0, "shmheap_check: %s", st.problem);
    CHECKF(r || st.live_blocks == 0, "%zu blocks still live", st.live_blocks);
    t_rm(h, name);
}

/* A new heap of the given size, or a FAIL line and NULL. */
static __attribute__((unused)) shmheap *t_heap(const char *name, size_t size)
{
    shmheap_opts o = {.size = size};
    shmheap *h = NULL;
    int r = shmheap_create(name, &o, &h);
    CHECKF(r == 0, "create %s: %s", name, shmheap_strerror(r));
    return h;
}

/* A unique path for a file-backed heap in /tmp (kept in path, 96 bytes). */
static __attribute__((unused)) char *t_heap_path(char *path, const char *base)
{
    snprintf(path, 96, "/tmp/%s.heap", t_uniq(base));
    return path;
}
#endif
#ifdef RPCOOL_H
/* One server for many tests: a handler for each thing they ask of a server (t_serve registers
 * them all, then starts that many serving threads). */
enum { T_FN_SLOW = 1, T_FN_SAFETY = 2, T_FN_STR = 3, T_FN_FAIL = 4, T_FN_CLOSE = 5, T_FN_COPYNEED = 6,
       T_FN_SLOWREPLY = 7, T_FN_SEALREQ = 8, T_FN_SEALED = 9, T_FN_BIGREPLY = 10, T_FN_ECHO = 11,
       T_FN_FAIL_ARG = 12, T_FN_DIE = 13, T_FN_SLOW_ALLOC = 14, T_FN_TOUCH = 15, T_FN_SLOW_STR = 16 };

static __attribute__((unused)) int t_h_slow(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    usleep(len >= sizeof(int) ? (useconds_t)*(int *)arg * 1000 : 1000);
    return 1;
}

static __attribute__((unused)) int t_h_safety(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    return (int)rpcool_ctx_safety(ctx);
}

static __attribute__((unused)) int t_h_str(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    const char *s = rpcool_ctx_need_str(ctx, *(const char **)rpcool_ctx_need(ctx, arg, sizeof(char *)));
    return (int)strlen(s);
}

static __attribute__((unused)) int t_h_fail(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    rpcool_ctx_fail(ctx, -1234);
    return 0;
}

static __attribute__((unused)) int t_h_close(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len;
    return rpcool_server_close((rpcool_server *)user);
}

/* under COPY: the argument is the private copy, rpcool_ctx_need accepts it, and writing to it
   does not change the sender's memory */
static __attribute__((unused)) int t_h_copyneed(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    if (shmheap_contains(rpcool_ctx_heap(ctx), arg, len)) return 2;
    char *p = (char *)rpcool_ctx_need(ctx, arg, len);
    p[0] = 'X';
    return 1;
}

/* A reply of n bytes after us microseconds, with that status. */
static __attribute__((unused)) int t_reply(rpcool_ctx *ctx, useconds_t us, size_t n, int status)
{
    if (us) usleep(us);
    void *r = rpcool_ctx_alloc(ctx, n);
    if (!r) return SHMHEAP_E_FULL;
    rpcool_ctx_reply(ctx, r, n);
    return status;
}

static __attribute__((unused)) int t_h_slowreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    return t_reply(ctx, 200000, 1000, 3);
}

/* a reply over 32 KiB: rpcool_ctx_alloc takes the client heap's mutex */
static __attribute__((unused)) int t_h_bigreply(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg; (void)len; (void)user;
    return t_reply(ctx, 0, 100000, 4);
}

static __attribute__((unused)) int t_h_sealed(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)len; (void)user;
    return t_writable(arg) ? 0 : 1;
}

/* A handler of the table t_serve registers. */
typedef struct t_handler { unsigned fn; rpcool_handler *h; unsigned flags; } t_handler;

/* Register n handlers of a table, each with the same user pointer. */
static __attribute__((unused)) void t_add_handlers(rpcool_server *s, const t_handler *hs, size_t n,
                                                   void *user)
{
    for (size_t i = 0; i < n; i++)
        rpcool_server_add_handler(s, hs[i].fn, hs[i].h, user, hs[i].flags);
}

/* A server of channel NAME with options so (NULL: the defaults), the n handlers of hs and, if
   threads, that many serving threads; NULL and a FAIL line if the channel cannot be opened. */
static __attribute__((unused)) rpcool_server *t_server_with(const char *name,
                                                            const rpcool_server_opts *so,
                                                            const t_handler *hs, size_t n,
                                                            unsigned threads)
{
    rpcool_server *s = NULL;
    int r = rpcool_server_open(name, so, &s);
    CHECKF(r == 0, "server_open %s: %s", name, rpcool_strerror(r));
    if (r) return NULL;
    t_add_handlers(s, hs, n, NULL);
    if (threads) rpcool_server_start(s, threads);
    return s;
}

static __attribute__((unused)) rpcool_server *t_serve(const char *name, const rpcool_server_opts *so, unsigned threads)
{
    static const t_handler hs[] = {
        {T_FN_SLOW, t_h_slow, 0}, {T_FN_SAFETY, t_h_safety, RPCOOL_SANDBOX}, {T_FN_STR, t_h_str, 0},
        {T_FN_FAIL, t_h_fail, 0}, {T_FN_COPYNEED, t_h_copyneed, RPCOOL_COPY},
        {T_FN_SLOWREPLY, t_h_slowreply, 0}, {T_FN_SEALREQ, t_h_sealed, RPCOOL_SEAL},
        {T_FN_SEALED, t_h_sealed, 0}, {T_FN_BIGREPLY, t_h_bigreply, 0}};
    rpcool_server *s = t_server_with(name, so, hs, sizeof hs / sizeof hs[0], 0);
    if (!s) return NULL;
    rpcool_server_add_handler(s, T_FN_CLOSE, t_h_close, s, 0);
    if (threads) rpcool_server_start(s, threads);
    return s;
}

#ifdef RPCOOL_IMPLEMENTATION_ONCE
/* Fill call slot i's request line by hand, as a buggy or malicious client could (the caller
 * posts it with rpcool__shm_post). */
static __attribute__((unused)) void t_raw_fill(rpcool_conn *c, int i, uint32_t fn, uint32_t flags,
                                               uint64_t arg, uint64_t len, uint64_t seal,
                                               uint64_t seal_len)
{
    struct rpcool__req *sl = &c->hdr->req[i];
    sl->fn = fn, sl->flags = flags; /* not the state: rpcool__shm_post writes it */
    sl->arg = arg, sl->arg_len = len;
    sl->seal = seal, sl->seal_len = seal_len;
    c->pend[i].pstate = RPCOOL__P_SYNC;
    c->pend[i].seal_p = NULL;
}
#endif

/* Replies with the caller as rpcool_ctx_peer sees it (an rpcool_peer in the caller's heap). */
static __attribute__((unused)) int t_h_peer(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_peer *p = (rpcool_peer *)rpcool_ctx_alloc(ctx, sizeof *p);
    if (!p) return SHMHEAP_E_FULL;
    *p = *rpcool_ctx_peer(ctx);
    rpcool_ctx_reply(ctx, p, sizeof *p);
    return 0;
}

/* Replies with a copy of the argument, in the caller's heap. */
static __attribute__((unused)) int t_h_echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    char *r = (char *)rpcool_ctx_alloc(ctx, len ? len : 1);
    if (!r) return SHMHEAP_E_FULL;
    if (len) memcpy(r, arg, len); /* arg may be NULL then */
    rpcool_ctx_reply(ctx, r, len);
    return 0;
}

/* rpcool_ctx_fail with the int argument as the status. */
static __attribute__((unused)) int t_h_fail_arg(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    rpcool_ctx_fail(ctx, len >= sizeof(int) ? *(int *)arg : 0);
    return 7; /* not reached */
}

/* The server dies during the call. */
static __attribute__((unused)) int t_h_die(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len; (void)user;
    raise(SIGKILL);
    return 0;
}

/* Sleeps 300 ms (a client may truncate its heap meanwhile), then allocates in the client's
   heap: 64 bytes as the reply and 1 MiB. */
static __attribute__((unused)) int t_h_slow_alloc(rpcool_ctx *ctx, void *arg, size_t len,
                                                  void *user)
{
    (void)arg; (void)len; (void)user;
    usleep(300000);
    void *a = rpcool_ctx_alloc(ctx, 64), *b = rpcool_ctx_alloc(ctx, (size_t)1 << 20);
    rpcool_ctx_reply(ctx, a, a ? 64 : 0);
    (void)b;
    return a && b ? 0 : SHMHEAP_E_FULL;
}

/* The same with the checked accessor rpcool_ctx_need_str: the string's length. */
static __attribute__((unused)) int t_h_slow_str(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)len; (void)user;
    usleep(300000);
    return (int)strlen(rpcool_ctx_need_str(ctx, (const char *)arg));
}

/* Reads the last byte of the argument and returns it. */
static __attribute__((unused)) int t_h_touch(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    volatile const char *p = (const char *)arg;
    return len ? p[len - 1] : 0;
}

/* A server that reaps every reap_ms milliseconds (0: 20), not serving yet, with T_FN_SLOW and
   T_FN_ECHO, and with all = 1 also T_FN_FAIL_ARG, T_FN_DIE, T_FN_SLOW_ALLOC, T_FN_TOUCH and
   T_FN_SLOW_STR (relaxed); NULL and a FAIL line if the channel cannot be opened. */
static __attribute__((unused)) rpcool_server *t_open_server_ex(const char *name, unsigned max_conns,
                                                               unsigned reap_ms, int all)
{
    static const t_handler hs[] = {
        {T_FN_SLOW, t_h_slow, 0}, {T_FN_ECHO, t_h_echo, 0}, {T_FN_FAIL_ARG, t_h_fail_arg, 0},
        {T_FN_DIE, t_h_die, 0}, {T_FN_SLOW_ALLOC, t_h_slow_alloc, 0}, {T_FN_TOUCH, t_h_touch, 0},
        {T_FN_SLOW_STR, t_h_slow_str, 0}};
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.reap_ms = reap_ms ? reap_ms : 20;
    o.max_conns = max_conns;
    return t_server_with(name, &o, hs, all ? sizeof hs / sizeof hs[0] : 2, 0);
}

/* A server that reaps every 20 ms with T_FN_SLOW and T_FN_ECHO only, not serving yet; NULL and
 * a FAIL line if the channel cannot be opened. */
static __attribute__((unused)) rpcool_server *t_open_server(const char *name, unsigned max_conns)
{
    return t_open_server_ex(name, max_conns, 20, 0);
}

/* t_open_server serving with one thread. */
static __attribute__((unused)) rpcool_server *t_serving(const char *name, unsigned max_conns)
{
    rpcool_server *s = t_open_server(name, max_conns);
    if (s) rpcool_server_start(s, 1);
    return s;
}

/* t_serving(name, max_conns) and a connection to it with options o (NULL: the defaults): 0, or
   -1 with a FAIL line and nothing left open. */
static __attribute__((unused)) int t_serving_connect(const char *name, unsigned max_conns,
                                                     const rpcool_conn_opts *o, rpcool_server **s,
                                                     rpcool_conn **c)
{
    *c = NULL;
    if (!(*s = t_serving(name, max_conns))) return -1;
    int r = rpcool_connect(name, o, c);
    CHECKF(r == 0, "connect %s: %s", name, rpcool_strerror(r));
    if (r) {
        rpcool_server_close(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

/* The end of most rpcool tests: disconnect c (if any), then close s (if any). */
static __attribute__((unused)) void t_disconnect_close(rpcool_conn *c, rpcool_server *s)
{
    if (c) rpcool_disconnect(c);
    if (s) rpcool_server_close(s);
}

/* A server of every t_open_server_ex handler in a child process, serving until killed. */
static __attribute__((unused)) pid_t t_fork_server(const char *name)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        rpcool_server *s = t_open_server_ex(name, 0, 20, 1);
        if (!s) _exit(2);
        rpcool_serve(s);
        _exit(0);
    }
    return p;
}

/* rpcool_connect retried for up to 2.5 s (a server still starting); NULL if it never worked. */
static __attribute__((unused)) rpcool_conn *t_connect_retry(const char *name,
                                                            const rpcool_conn_opts *o)
{
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, o, &c); i++) usleep(5000);
    return c;
}

/* The connection heaps of channel NAME in /dev/shm: how many there are, or with rm = 1 remove
   them (what a killed server leaves) and return how many went. -1 if /dev/shm cannot be read. */
static __attribute__((unused)) int t_channel_heaps(const char *channel, int rm)
{
    char prefix[160];
    int n = 0;
    snprintf(prefix, sizeof prefix, "rpcool-%s-", channel);
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            n++;
            if (rm) shmheap_unlink(e->d_name, NULL);
        }
    closedir(d);
    return n;
}

/* SIGKILL a server process and remove what it leaves: its name file and socket, and the heaps
   of clients it had not reaped yet. */
static __attribute__((unused)) void t_kill_server(pid_t sp, const char *channel)
{
    t_kill_wait(sp);
    t_rm_channel(channel);
    t_channel_heaps(channel, 1);
}

/* t_serve(name, NULL, threads) and a connection to it: 0, or -1 with a FAIL line and nothing
 * left open. */
static __attribute__((unused)) int t_serve_connect(const char *name, unsigned threads,
                                                   rpcool_server **s, rpcool_conn **c)
{
    *c = NULL;
    if (!(*s = t_serve(name, NULL, threads))) return -1;
    CHECK_EQ(rpcool_connect(name, NULL, c), 0);
    if (!*c) {
        rpcool_server_close(*s);
        return -1;
    }
    return 0;
}

/* A call of T_FN_SLOW that takes ms milliseconds in the handler. */
static __attribute__((unused)) int t_slow_call(rpcool_conn *c, int ms)
{
    int *a = (int *)rpcool_alloc(c, sizeof *a);
    if (!a) return SHMHEAP_E_FULL;
    *a = ms;
    int r = rpcool_call(c, T_FN_SLOW, a, sizeof *a, NULL, NULL);
    rpcool_free(c, a);
    return r;
}

/* Wait up to ms for *flag to be at least v; 1 if it is. */
static __attribute__((unused)) int t_wait_for(int *flag, int v, int ms)
{
    for (int k = 0; k < ms && __atomic_load_n(flag, __ATOMIC_SEQ_CST) < v; k++) usleep(1000);
    return __atomic_load_n(flag, __ATOMIC_SEQ_CST) >= v;
}

/* rpcool_cancel of a running call: *started set to 0, handler fn called asynchronously with no
   argument, and once the handler set *started to 1 (checked: within ms), the call cancelled
   (checked). Returns when the cancel was asked (rcp__now_ns). */
static __attribute__((unused)) uint64_t t_cancel_running(rpcool_conn *c, unsigned fn,
                                                         int *started, int ms)
{
    uint64_t id = 0;
    __atomic_store_n(started, 0, __ATOMIC_SEQ_CST);
    CHECK_EQ(rpcool_call_async(c, fn, NULL, 0, NULL, NULL, NULL, &id), 0);
    CHECKF(t_wait_for(started, 1, ms), "the handler of %u did not start in %d ms", fn, ms);
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_cancel(c, id), 0);
    return t0;
}
#endif
#endif
