#!/bin/sh
# bench/bench_rpcool.sh - builds bench/rpcool_bench.c into build/bench/ and runs it: no-op round
# trips per safety mode (relaxed, copy, sealed, sandboxed), the relaxed no-op alternating with
# a bare cache-line ping-pong on the same CPUs (blocks of 2000 of each, timed by blocks), sealed calls of 4 KiB and 64 KiB
# alternating with relaxed calls and a bare mprotect pair, payloads of 64 B to 1 MiB (relaxed,
# copy, sealed), pointer-rich trees of 1-4096 nodes (bench/workload.h; relaxed, sealed, sandboxed,
# sealed+sandboxed), the key-value store (get/put, 64-1024 B values) and connection set-up
# (rpcool_connect with 64 MiB and 1 GiB heaps vs a UNIX socket connect). Server and client in
# different processes on different CPUs (-f), then both on CPU 0 (-1: names end in @cpu0).
# Results: build/bench/rpcool.txt ("NAME MEDIAN_NS P99_NS OPS_PER_S"), everything in
# build/bench/rpcool.log. BENCH_QUICK=1 divides the iteration counts by 10.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
n=50000
[ "${BENCH_QUICK:-0}" = 1 ] && n=5000
if ! ${CC:-cc} -O2 -pthread -I. -Ibench -Wall -Wextra -Werror bench/rpcool_bench.c -o "$B/rpcool_bench" 2>"$B/build.rpcool.log"; then
    cat "$B/build.rpcool.log"; echo "FAIL rpcool_bench: build failed"; exit 1
fi
: >"$B/rpcool.log"
status=0
for layout in -f "-f -1"; do
    "$B/rpcool_bench" $layout -n $n -w $((n / 10)) >>"$B/rpcool.log" 2>&1 || { echo "FAIL rpcool_bench $layout"; status=1; }
done
grep -v '^#' "$B/rpcool.log" | grep -E '^(rpcool|uds)/' >"$B/rpcool.txt"
# Whole commands, as a user runs them: the echo example (server thread + client process, heap
# creation and connect included) against the socket peer and the bare ping-pong, 10000 calls.
if command -v hyperfine >/dev/null && [ -x "$B/peer_sock" ] && [ -x "$B/peer_shm" ] && make -s build/ex/rpcool_echo >/dev/null 2>&1; then
    hyperfine -N --runs 5 --warmup 1 --export-markdown "$B/hyperfine-rpcool.md" \
        -n "rpcool_echo" "build/ex/rpcool_echo 10000" \
        -n "shm_pingpong" "$B/peer_shm -f -n 10000 -w 0" \
        -n "uds_stream" "$B/peer_sock -f -t stream -n 10000 -w 0" >"$B/hyperfine-rpcool.out" 2>&1 &&
        cat "$B/hyperfine-rpcool.md" >>"$B/rpcool.log" && cat "$B/hyperfine-rpcool.md"
fi
echo "name median_ns p99_ns ops_per_s"
cat "$B/rpcool.txt"
exit $status
