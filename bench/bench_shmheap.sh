#!/bin/sh
# bench/bench_shmheap.sh - shmheap allocation throughput against glibc malloc, same run; then the
# cost of one seal (bench/seal_cost.c).
cd "$(dirname "$0")/.." || exit 1
mkdir -p build/bench
cc -O2 -g -pthread -I. bench/shmheap_alloc.c -o build/bench/shmheap_alloc || exit 1
ops=2000000
[ -n "${BENCH_QUICK:-}" ] && ops=200000
echo "# command: build/bench/shmheap_alloc $ops 5   (cc -O2; $(nproc) cores)"
build/bench/shmheap_alloc $ops 5 | tee build/bench/shmheap_alloc.txt
# What one seal costs here (mprotect and the TLB flush it triggers), bare and through shmheap:
# the floor under every sealed rpcool call. Lines: NAME MEDIAN_NS P99_NS OPS_PER_S.
cc -O2 -g -pthread -I. bench/seal_cost.c -o build/bench/seal_cost || exit 1
n=20000
[ -n "${BENCH_QUICK:-}" ] && n=2000
echo "# command: build/bench/seal_cost $n"
build/bench/seal_cost $n | tee build/bench/seal_cost.log | grep -v '^#' >build/bench/seal_cost.txt
cat build/bench/seal_cost.txt
