#!/bin/sh
# bench/bench_shmheap.sh - shmheap allocation throughput against glibc malloc, same run.
cd "$(dirname "$0")/.." || exit 1
mkdir -p build/bench
cc -O2 -g -pthread -I. bench/shmheap_alloc.c -o build/bench/shmheap_alloc || exit 1
ops=2000000
[ -n "${BENCH_QUICK:-}" ] && ops=200000
echo "# command: build/bench/shmheap_alloc $ops 5   (cc -O2; $(nproc) cores)"
build/bench/shmheap_alloc $ops 5 | tee build/bench/shmheap_alloc.txt
