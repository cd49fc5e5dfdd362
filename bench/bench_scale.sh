#!/bin/sh
# bench/bench_scale.sh - builds bench/scale_bench.c into build/bench/ and runs it: one server,
# many clients, rpcool against a UNIX-socket + epoll server in the same run, rounds alternating:
# one busy client among 999 idle connections vs alone (timed by blocks of 1000 calls), calls
# per second and slowest/fastest client at 64 and 1000 closed-loop clients over one common
# window per round (every round printed; rounds of a bare futex-wake server, the floor of any
# server that wakes sleeping clients, alternate with them), the server's idle CPU and wake-ups
# with 1000 idle connections, 2000 connections to one server (connect medians of the first and
# last 100) and another program's heap in the host's pod meanwhile. Results: build/bench/scale.txt ("NAME MEDIAN_NS P99_NS OPS_PER_S"; the
# idle_cpu lines hold CPU in 1/1000 % and wake-ups in 2 s), everything in build/bench/scale.log.
# Rounds: 1 s windows, 2 of each server (busy: 2 of each); BENCH_QUICK=1: 1 of 300 ms.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
args="-r 4 -t 1000"
[ "${BENCH_QUICK:-0}" = 1 ] && args="-r 2 -t 300"
if ! ${CC:-cc} -O2 -pthread -I. -Ibench -Wall -Wextra -Werror bench/scale_bench.c -o "$B/scale_bench" 2>"$B/build.scale.log"; then
    cat "$B/build.scale.log"; echo "FAIL scale_bench: build failed"; exit 1
fi
status=0
"$B/scale_bench" $args >"$B/scale.log" 2>&1 || { echo "FAIL scale_bench"; status=1; }
grep -v '^#' "$B/scale.log" | grep -E '^(rpcool|uds|floor)/' >"$B/scale.txt"
grep -E '^# |^#   closed' "$B/scale.log"
echo "name median_ns p99_ns ops_per_s"
cat "$B/scale.txt"
exit $status
