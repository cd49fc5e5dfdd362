/* shmheap.h under fire: 8 processes allocate and free at random, each recording its blocks in a
   table in the heap (as an application would), while the parent SIGKILLs some of them at random
   moments, lock held or not. After every round the heap must check out, the dead processes'
   recorded blocks must free cleanly, and every surviving block must hold its owner's pattern.
   At the end, live blocks must be at most one per kill (the window between taking a slot and
   recording it). */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include "t.h"
#include <signal.h>
#include <time.h>

#define NPROC 8
#define SLOTS 64

struct rec { void *p; uint32_t size, tag; };
struct table { struct rec r[NPROC][SLOTS]; volatile int go; };


static int pattern_ok(const struct rec *r)
{
    const unsigned char *p = (const unsigned char *)r->p;
    size_t n = r->size < 64 ? r->size : 64;
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(r->tag + i)) return 0;
    return 1;
}

static void worker(shmheap *h, struct table *t, int me, uint64_t seed)
{
    struct rec *mine = t->r[me];
    while (!t->go) rcp__cpu_relax();
    for (;;) {
        int i = (int)(t_rng(&seed) % SLOTS);
        struct rec *r = &mine[i];
        if (r->p) {
            if (!pattern_ok(r)) _exit(3);
            void *p = r->p;
            r->p = NULL; /* forget first, then free: a kill in between leaks, never double-frees */
            if (shmheap_free(h, p)) _exit(4);
        } else {
            uint64_t x = t_rng(&seed);
            size_t size = (x & 15) == 0 ? 40000 + x % 200000 : 1 + (x >> 8) % 4096;
            unsigned char *p = (unsigned char *)shmheap_malloc(h, size);
            if (!p) continue; /* full for a moment: fine */
            uint32_t tag = (uint32_t)(x >> 32);
            for (size_t k = 0; k < size && k < 64; k++) p[k] = (unsigned char)(tag + k);
            r->size = (uint32_t)size;
            r->tag = tag;
            __atomic_store_n(&r->p, (void *)p, __ATOMIC_RELEASE);
        }
    }
}

static void rounds(void)
{
    const char *n = t_uniq("mp");
    shmheap_opts o = {.size = 64 << 20};
    shmheap *h;
    int rc = shmheap_create(n, &o, &h);
    CHECKF(rc == 0, "%s", shmheap_strerror(rc));
    if (rc) return;
    struct table *t = (struct table *)shmheap_calloc(h, 1, sizeof *t);
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u | 1;
    int nrounds = getenv("T_ROUNDS") ? atoi(getenv("T_ROUNDS")) : 300;
    long kills = 0, bad = 0, freed_after_kill = 0;
    shmheap_stats st;
    printf("# seed %llu, %d rounds\n", (unsigned long long)seed, nrounds);
    for (int round = 0; round < nrounds && !bad; round++) {
        pid_t pid[NPROC];
        t->go = 0;
        for (int i = 0; i < NPROC; i++) {
            uint64_t s = t_rng(&seed);
            if ((pid[i] = fork()) == 0) worker(h, t, i, s | 1);
        }
        t->go = 1;
        struct timespec d = {0, (long)(t_rng(&seed) % 3000000)};
        nanosleep(&d, NULL);
        /* kill a random subset at random moments, then stop the rest */
        for (int i = 0; i < NPROC; i++) {
            if (t_rng(&seed) & 1) {
                struct timespec e = {0, (long)(t_rng(&seed) % 300000)};
                nanosleep(&e, NULL);
                kill(pid[i], SIGKILL);
                kills++;
            }
        }
        for (int i = 0; i < NPROC; i++) kill(pid[i], SIGKILL);
        for (int i = 0; i < NPROC; i++) {
            int ws;
            waitpid(pid[i], &ws, 0);
            if (!(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL)) { t_fail(__FILE__, __LINE__, "worker %d status %d", i, ws); bad++; }
        }
        if (shmheap_check(h, &st)) { t_fail(__FILE__, __LINE__, "round %d: %s", round, st.problem); bad++; break; }
        /* every process is dead now: reclaim what they recorded, on every other round */
        if (round % 2) {
            for (int i = 0; i < NPROC; i++)
                for (int k = 0; k < SLOTS; k++) {
                    struct rec *r = &t->r[i][k];
                    if (!r->p) continue;
                    if (!pattern_ok(r)) { t_fail(__FILE__, __LINE__, "round %d: block of %d damaged", round, i); bad++; }
                    int fr = shmheap_free(h, r->p);
                    if (fr) { t_fail(__FILE__, __LINE__, "round %d: free: %s", round, shmheap_strerror(fr)); bad++; }
                    r->p = NULL;
                    freed_after_kill++;
                }
        }
        void *x = shmheap_malloc(h, 1000);
        if (!x || shmheap_free(h, x)) { t_fail(__FILE__, __LINE__, "round %d: heap unusable", round); bad++; }
    }
    long total_kills = (long)nrounds * NPROC; /* every worker ends by SIGKILL */
    for (int i = 0; i < NPROC; i++)
        for (int k = 0; k < SLOTS; k++)
            if (t->r[i][k].p) { shmheap_free(h, t->r[i][k].p); t->r[i][k].p = NULL; }
    CHECK_EQ(shmheap_free(h, t), 0);
    CHECK_EQ(shmheap_check(h, &st), 0);
    printf("# %ld random kills, %ld workers killed in all, %llu lock recoveries, %ld blocks freed after kills, %zu leaked\n",
           kills, total_kills, (unsigned long long)st.recoveries, freed_after_kill, st.live_blocks);
    CHECKF((long)st.live_blocks <= total_kills, "%zu blocks leaked by %ld killed workers", st.live_blocks, total_kills);
    CHECK(freed_after_kill > 0);
    shmheap_close(h);
    shmheap_unlink(n, NULL);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(rounds);
    return T_DONE();
}
