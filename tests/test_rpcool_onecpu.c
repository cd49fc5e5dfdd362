/* rpcool: client and server processes pinned to one CPU. A waiting side that
 * busy-polls there burns the time slice its peer needs to answer; rpcool must hand the CPU over
 * instead (sched_getcpu hints: the peer was seen on our CPU -> sched_yield). The spin budget is
 * set huge (RPCOOL's spin_ns = 20 ms on both sides) so that burning it, or even one scheduler
 * slice per call (the kernel preempting a spinner), shows as a median call far above the bound;
 * a hand-over costs two context switches (a few us). Bound: median < 500 us, and N calls in less
 * than N * spin_ns / 20, generous for a loaded 2-core machine. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <sched.h>

enum { FN_INC = 1, FN_STOP, N_CALLS = 400 };
#define SPIN_NS 20000000ull /* 20 ms */

static int h_inc(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)user;
    if (len != sizeof(int)) return -1;
    (*(int *)arg)++;
    return 0;
}

static int h_stop(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx; (void)arg; (void)len;
    rpcool_server_stop((rpcool_server *)user);
    return 0;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void one_cpu_calls(void)
{
    int cpu = sched_getcpu();
    if (cpu < 0 || pin(cpu)) { t_skip("one_cpu_calls", "cannot pin to one CPU"); return; }
    const char *name = t_uniq("onecpu");
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t kid = fork();
    if (kid == 0) { /* server: inherits the pin */
        close(ready[0]);
        rpcool_server_opts so = {.spin_ns = SPIN_NS};
        rpcool_server *s = NULL;
        if (rpcool_server_open(name, &so, &s)) _exit(2);
        rpcool_server_add_handler(s, FN_INC, h_inc, NULL, 0);
        rpcool_server_add_handler(s, FN_STOP, h_stop, s, 0);
        if (write(ready[1], "r", 1) != 1) _exit(3);
        rpcool_serve(s); /* until FN_STOP */
        _exit(rpcool_server_close(s) ? 4 : 0);
    }
    close(ready[1]);
    char b;
    CHECK(read(ready[0], &b, 1) == 1);
    close(ready[0]);
    rpcool_conn_opts co = {.spin_ns = SPIN_NS, .timeout_ms = 10000};
    rpcool_conn *c = NULL;
    int r = rpcool_connect(name, &co, &c);
    CHECKF(r == 0, "connect: %s", rpcool_strerror(r));
    if (!r) {
        int *v = (int *)rpcool_alloc(c, sizeof *v);
        CHECK(v != NULL);
        static uint64_t lat[N_CALLS];
        int n = 0;
        *v = 0;
        for (int i = 0; i < 20 && v; i++) rpcool_call(c, FN_INC, v, sizeof *v, NULL, NULL);
        uint64_t t0 = now_ns();
        for (; v && n < N_CALLS; n++) {
            uint64_t a = now_ns();
            r = rpcool_call(c, FN_INC, v, sizeof *v, NULL, NULL);
            lat[n] = now_ns() - a;
            if (r) break;
        }
        uint64_t total = now_ns() - t0;
        CHECKF(r == 0, "call %d: %s", n, rpcool_strerror(r));
        CHECK_EQ(n, N_CALLS);
        if (v) CHECK_EQ(*v, 20 + N_CALLS);
        qsort(lat, (size_t)n, sizeof lat[0], cmp_u64);
        uint64_t med = n ? lat[n / 2] : 0;
        printf("# one CPU (%d): %d calls in %.3f ms, median %.2f us, p90 %.2f us\n", cpu, n,
               total / 1e6, med / 1e3, n ? lat[n * 9 / 10] / 1e3 : 0.0);
        CHECKF(med < 500000u, "median call %.1f us on one CPU: spinning burns the peer's slice",
               med / 1e3);
        CHECKF(total < (uint64_t)N_CALLS * SPIN_NS / 20, "%d calls took %.1f ms", n, total / 1e6);
        CHECK_EQ(rpcool_call(c, FN_STOP, NULL, 0, NULL, NULL), 0);
        rpcool_disconnect(c);
    } else {
        kill(kid, SIGKILL);
    }
    int st = -1;
    waitpid(kid, &st, 0);
    if (!r) CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server exit status %#x", st);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(one_cpu_calls);
    return T_DONE();
}
