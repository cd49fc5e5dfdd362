/* SPDX-License-Identifier: MIT */
/* hist.h - in-process latency histogram for rpcool's benchmark tools.

   Every bench tool (rpcool's and the peers') records one sample per operation in
   nanoseconds and prints, per result, one machine line and one human line:

       NAME MEDIAN_NS P99_NS OPS_PER_S
       #   NAME: median 1.234 us  p99 2.345 us  p999 3.456 us  min 0.987 us  810372 ops/s  n=100000
       #q NAME 987 1001 ... 3456

   and a third line, "#q NAME" followed by 17 percentiles in ns (min, 1, 5, 10, 20, ..., 90, 95,
   98, 99, 99.5, 99.9), from which bench/plot.sh draws latency distributions.

   The machine line has exactly four space-separated fields so scripts can collect and
   compare results with awk; the human line starts with '#' so such scripts skip it.
   Samples are kept exactly (no bucketing): percentiles are order statistics of the
   sorted samples (nearest rank), so they are exact figures, not estimates.

   Usage:
       #include "hist.h"
       hist h;
       if (hist_init(&h, iters)) exit(1);
       uint64_t t0 = hist_now();
       for (i = 0; i < iters; i++) {
           uint64_t s = hist_now();
           do_round_trip();
           hist_add(&h, hist_now() - s);
       }
       hist_print(&h, "uds_stream/64", hist_ops_per_s(h.n, hist_now() - t0));
       hist_free(&h);

   ops_per_s is whatever the tool measured; for one closed-loop client it is the
   number of operations divided by the wall time of the timed loop.
   Not thread safe: one histogram per thread. Header-only, all functions static.
   Uses clock_gettime(CLOCK_MONOTONIC): under a strict -std=c11 include this header first
   (it then asks for POSIX) or define _POSIX_C_SOURCE / _GNU_SOURCE yourself. */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct hist {
    uint64_t *ns;   /* samples, sorted in place by hist_sort() */
    size_t n, cap;
    int sorted;
} hist;

static inline uint64_t hist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int hist_init(hist *h, size_t cap)
{
    h->n = 0;
    h->cap = cap ? cap : 1;
    h->sorted = 0;
    h->ns = (uint64_t *)malloc(h->cap * sizeof *h->ns);
    return h->ns ? 0 : -1;
}

static inline void hist_free(hist *h)
{
    free(h->ns);
    h->ns = NULL;
    h->n = h->cap = 0;
}

/* Samples beyond the capacity are dropped, never reallocated inside a timed loop. */
static inline void hist_add(hist *h, uint64_t ns)
{
    if (h->n < h->cap) {
        h->ns[h->n++] = ns;
        h->sorted = 0;
    }
}

static int hist__cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static inline void hist_sort(hist *h)
{
    if (!h->sorted) {
        qsort(h->ns, h->n, sizeof *h->ns, hist__cmp);
        h->sorted = 1;
    }
}

/* Nearest-rank percentile, p in [0, 100]; 0 when there are no samples. */
static inline uint64_t hist_pct(hist *h, double p)
{
    if (h->n == 0)
        return 0;
    hist_sort(h);
    double exact = p / 100.0 * (double)h->n;
    size_t rank = (size_t)exact;
    if ((double)rank < exact - 1e-9)   /* ceil, blind to rounding noise */
        rank++;
    if (rank < 1)
        rank = 1;
    if (rank > h->n)
        rank = h->n;
    return h->ns[rank - 1];
}

static inline uint64_t hist_median(hist *h) { return hist_pct(h, 50.0); }
static inline uint64_t hist_p99(hist *h) { return hist_pct(h, 99.0); }
static inline uint64_t hist_p999(hist *h) { return hist_pct(h, 99.9); }
static inline uint64_t hist_min(hist *h) { return hist_pct(h, 0.0); }

static inline double hist_ops_per_s(size_t ops, uint64_t elapsed_ns)
{
    return elapsed_ns ? (double)ops * 1e9 / (double)elapsed_ns : 0.0;
}

static inline void hist_print(hist *h, const char *name, double ops_per_s)
{
    uint64_t med = hist_median(h), p99 = hist_p99(h), p999 = hist_p999(h), mn = hist_min(h);
    printf("%s %llu %llu %.0f\n", name, (unsigned long long)med, (unsigned long long)p99,
           ops_per_s);
    printf("#   %s: median %.3f us  p99 %.3f us  p999 %.3f us  min %.3f us  %.0f ops/s  n=%zu\n",
           name, med / 1e3, p99 / 1e3, p999 / 1e3, mn / 1e3, ops_per_s, h->n);
    /* the distribution, for bench/plot.sh: "#q NAME" and the percentiles of hist_q_levels */
    static const double hist_q_levels[] = {0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95,
                                           98, 99, 99.5, 99.9};
    printf("#q %s", name);
    for (size_t i = 0; i < sizeof hist_q_levels / sizeof hist_q_levels[0]; i++)
        printf(" %llu", (unsigned long long)hist_pct(h, hist_q_levels[i]));
    printf("\n");
    fflush(stdout);
}

#endif /* BENCH_HIST_H */
