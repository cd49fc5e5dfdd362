/* header_ab.c - the same no-op calls through two versions of rpcool.h in one process pair, in
   alternating blocks: what a change to the header costs a call, measured in the same run (as
   CONTRIBUTING asks) rather than across runs of two binaries. Each version is compiled static
   (RPCOOL_STATIC, SHMHEAP_STATIC) into its own object; the server process serves both channels
   (one serving thread each, CPU 1), the client (CPU 0) calls each in turn, 2000 calls a block,
   101 rounds, relaxed and sandboxed. Prints each mode's median block (ns per call) and the ratios.
       mkdir -p /tmp/old && git show REV:rpcool.h > /tmp/old/rpcool.h && cp shmheap.h /tmp/old/ &&
       cp -r impl /tmp/old/
       cc -O2 -pthread -I/tmp/old -DAB_PFX=old_ -c bench/header_ab.c -o /tmp/old.o
       cc -O2 -pthread -I.        -DAB_PFX=new_ -c bench/header_ab.c -o /tmp/new.o
       cc -O2 -pthread bench/header_ab.c /tmp/old.o /tmp/new.o -o /tmp/header_ab && /tmp/header_ab
*/
#ifdef AB_PFX /* one version of the header */
#define AB_CAT2(a, b) a##b
#define AB_CAT(a, b) AB_CAT2(a, b)
#define PFX(x) AB_CAT(AB_PFX, x)
#define RPCOOL_STATIC 1
#define SHMHEAP_STATIC 1
#define ALOCK_STATIC 1 /* rpcool.h brings alock.h's implementation */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <stdio.h>
static int h_noop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{ (void)ctx; (void)arg; (void)len; (void)user; return 0; }
static int h_need1(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{ (void)user; return *(const char *)rpcool_ctx_need(ctx, arg, len) == 'x' ? 0 : 1; }
void *PFX(serve)(const char *name)
{
    rpcool_server *s = NULL;
    if (rpcool_server_open(name, NULL, &s)) return NULL;
    rpcool_server_add_handler(s, 1, h_noop, NULL, 0);
    rpcool_server_add_handler(s, 2, h_need1, NULL, 0);
    rpcool_server_start(s, 1);
    return s;
}
void PFX(close)(void *s) { rpcool_server_close((rpcool_server *)s); }
void *PFX(connect)(const char *name)
{
    rpcool_conn *c = NULL;
    for (int i = 0; i < 1000 && rpcool_connect(name, NULL, &c); i++) usleep(2000);
    return c;
}
void *PFX(alloc)(void *c, size_t n) { return rpcool_alloc_pages((rpcool_conn *)c, n); }
int PFX(call)(void *c, unsigned fn, void *arg, unsigned safety)
{
    rpcool_call_opts o;
    memset(&o, 0, sizeof o);
    o.safety = safety;
    return rpcool_call_ex((rpcool_conn *)c, fn, arg, 64, &o, NULL, NULL);
}
void PFX(disconnect)(void *c) { rpcool_disconnect((rpcool_conn *)c); }
#else /* the driver */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#define DECL(p) void *p##serve(const char *); void p##close(void *); void *p##connect(const char *); \
  void *p##alloc(void *, size_t); int p##call(void *, unsigned, void *, unsigned); void p##disconnect(void *);
DECL(old_) DECL(new_)
static void pin(int cpu) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s); }
static unsigned long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(void)
{
    char on[64], nn[64];
    snprintf(on, sizeof on, "ab-old-%d", getpid());
    snprintf(nn, sizeof nn, "ab-new-%d", getpid());
    int pfd[2]; if (pipe(pfd)) return 1;
    pid_t p = fork();
    if (p == 0) {
        pin(1);
        void *a = old_serve(on), *b = new_serve(nn);
        if (!a || !b) _exit(2);
        char x; if (read(pfd[0], &x, 1) < 0) {}
        old_close(a); new_close(b);
        _exit(0);
    }
    pin(0);
    void *co = old_connect(on), *cn = new_connect(nn);
    if (!co || !cn) { fprintf(stderr, "connect\n"); kill(p, 9); return 1; }
    char *ao = old_alloc(co, 4096), *an = new_alloc(cn, 4096);
    memset(ao, 'x', 4096); memset(an, 'x', 4096);
    enum { NB = 2000, R = 101, NM = 4 };
    const char *nm[NM] = {"old/relaxed", "new/relaxed", "old/sandboxed", "new/sandboxed"};
    double blk[NM][R];
    for (int rd = -2; rd < R; rd++)
        for (int k = 0; k < NM; k++) {
            int m = (k + (rd < 0 ? 0 : rd)) % NM;
            void *c = m & 1 ? cn : co; char *arg = m & 1 ? an : ao;
            unsigned sf = m >= 2 ? 4 : 0;
            unsigned long long s = now();
            for (int i = 0; i < NB; i++) if ((m & 1 ? new_call : old_call)(c, 1, arg, sf)) return 3;
            if (rd >= 0) blk[m][rd] = (double)(now() - s) / NB;
        }
    double med[NM];
    for (int m = 0; m < NM; m++) { qsort(blk[m], R, sizeof(double), cmp); med[m] = blk[m][R / 2];
        printf("%-16s median %.1f ns/call (blocks: min %.1f, max %.1f)\n", nm[m], med[m], blk[m][0], blk[m][R - 1]); }
    printf("medians: relaxed new/old = %.3f; sandboxed new/old = %.3f; new sandboxed/relaxed = "
           "%.3f; old sandboxed/relaxed = %.3f\n",
           med[1] / med[0], med[3] / med[2], med[3] / med[1], med[2] / med[0]);
    /* the fastest tenth of the blocks: what a call costs when no other work interferes */
    double q[NM];
    for (int m = 0; m < NM; m++) q[m] = blk[m][R / 10];
    printf("p10 blocks: relaxed new/old = %.3f; sandboxed new/old = %.3f; new sandboxed/relaxed "
           "= %.3f; old sandboxed/relaxed = %.3f (%.1f %.1f %.1f %.1f ns)\n", q[1] / q[0],
           q[3] / q[2], q[3] / q[1], q[2] / q[0], q[0], q[1], q[2], q[3]);
    old_disconnect(co); new_disconnect(cn);
    if (write(pfd[1], "x", 1) < 0) {}
    waitpid(p, NULL, 0);
    return 0;
}
#endif
