/* SPDX-License-Identifier: MIT */
/* peer_shm - bare cache-line ping-pong between two processes over a shared mapping:
   the physical limit of any shared-memory RPC on this machine.

   The client stores a sequence number in the request line; the server, busy-polling,
   copies it to the response line; the client busy-polls for it. Request and response
   sit 128 bytes apart so the adjacent-line prefetcher does not couple them. No payload:
   one cache line moves each way (-s is ignored).

   server:  peer_shm [-a PATH]  (default /dev/shm/rpcool-bench-shm)
   client:  peer_shm PATH        both: peer_shm -f
   With -f the mapping is anonymous and shared across fork. With -1 (both on one CPU) a
   busy-poll would only burn the slice the peer needs, so both sides poll with sched_yield
   instead (result shm_pingpong/yield@cpu0): two context switches per round trip, the floor of
   any shared-memory RPC between two processes sharing one CPU. */
#include "peer.h"   /* first: it defines _GNU_SOURCE */

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define SHM_DEFAULT "/dev/shm/rpcool-bench-shm"
#define SHM_MAGIC 0x72706f6f6c505030ull   /* "rpoolPP0" */
#define SHM_STOP UINT64_MAX

struct shm_lines {
    _Alignas(128) _Atomic uint64_t magic;
    _Alignas(128) _Atomic uint64_t req;
    _Alignas(128) _Atomic uint64_t resp;
};

struct shm_ctx {
    struct shm_lines *lines;   /* set before fork in -f mode */
};

static int yield_wait; /* -1: hand the CPU over instead of pausing */

static inline void cpu_relax(void)
{
    if (yield_wait) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static struct shm_lines *shm_map(const char *path, int create)
{
    int fd = -1;
    for (int tries = 0; tries < 10000; tries++) {
        fd = open(path, create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
        if (fd >= 0 || create || errno != ENOENT)
            break;
        usleep(1000);
    }
    if (fd < 0) {
        perror(path);
        return NULL;
    }
    if (create && ftruncate(fd, sizeof(struct shm_lines))) {
        perror("ftruncate");
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(struct shm_lines), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("mmap");
        return NULL;
    }
    return (struct shm_lines *)p;
}

static int server(const struct peer_opts *o, const char *addr, void *vctx)
{
    (void)o;
    struct shm_ctx *ctx = (struct shm_ctx *)vctx;
    struct shm_lines *l = ctx->lines ? ctx->lines : shm_map(addr, 1);
    if (!l)
        return 1;
    atomic_store_explicit(&l->magic, SHM_MAGIC, memory_order_release);
    uint64_t seen = 0;
    for (;;) {
        uint64_t v;
        while ((v = atomic_load_explicit(&l->req, memory_order_acquire)) == seen)
            cpu_relax();
        if (v == SHM_STOP)
            break;
        seen = v;
        atomic_store_explicit(&l->resp, v, memory_order_release);
    }
    if (!ctx->lines) {
        munmap(l, sizeof *l);
        unlink(addr);
    }
    return 0;
}

static int pingpong(void *vl, long i)
{
    struct shm_lines *l = (struct shm_lines *)vl;
    uint64_t seq = (uint64_t)i + 1;
    atomic_store_explicit(&l->req, seq, memory_order_release);
    while (atomic_load_explicit(&l->resp, memory_order_acquire) != seq)
        cpu_relax();
    return 0;
}

static int client(const struct peer_opts *o, const char *addr, void *vctx)
{
    struct shm_ctx *ctx = (struct shm_ctx *)vctx;
    struct shm_lines *l = ctx->lines ? ctx->lines : shm_map(addr, 0);
    if (!l)
        return 1;
    for (int tries = 0; atomic_load_explicit(&l->magic, memory_order_acquire) != SHM_MAGIC;
         tries++) {
        if (tries > 10000) {
            fprintf(stderr, "%s: no server\n", addr);
            return 1;
        }
        usleep(1000);
    }
    int rc = peer_measure(o, yield_wait ? "shm_pingpong/yield" : "shm_pingpong/line", pingpong, l);
    atomic_store_explicit(&l->req, SHM_STOP, memory_order_release);
    if (!ctx->lines)
        munmap(l, sizeof *l);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct peer_opts o;
    if (peer_parse(&o, argc, argv, NULL, "[options] [PATH]", NULL))
        return 2;
    struct shm_ctx ctx = {NULL};
    yield_wait = o.same_cpu;
    if (o.fork_mode) {
        void *p = mmap(NULL, sizeof(struct shm_lines), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        ctx.lines = (struct shm_lines *)p;
    }
    return peer_run(&o, SHM_DEFAULT, server, client, &ctx);
}
