#!/bin/sh
# bench/bench_pbc.sh - builds bench/pbc_bench.c (protoc-c for bench/pbc.proto into
# build/bench/gen/) and runs it: a protobuf-c service of 1 and 1000 items over rpcool (relaxed,
# sandbox, copy, and relaxed with the input copied in per call) against protobuf-c pack + UNIX
# socket + unpack, alternating blocks of 100 on the same processes and CPUs. Results:
# build/bench/pbc.txt ("NAME MEDIAN_NS P99_NS OPS_PER_S"), everything in build/bench/pbc.log.
# BENCH_QUICK=1 divides the iteration counts by 10.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
G=$B/gen
mkdir -p "$G"
n=20000
[ "${BENCH_QUICK:-0}" = 1 ] && n=2000
if ! protoc-c --proto_path=bench --c_out="$G" bench/pbc.proto 2>"$B/build.pbc.log" ||
   ! ${CC:-cc} -O2 -pthread -I. -Ibench -I"$G" -Wall -Wextra -Werror bench/pbc_bench.c \
       "$G/pbc.pb-c.c" -o "$B/pbc_bench" -lprotobuf-c 2>>"$B/build.pbc.log"; then
    cat "$B/build.pbc.log"; echo "FAIL pbc_bench: build failed"; exit 1
fi
"$B/pbc_bench" -n $n >"$B/pbc.log" 2>&1 || { cat "$B/pbc.log"; echo "FAIL pbc_bench"; exit 1; }
grep -E '^(pbc_uds|rpcool_pbc)/' "$B/pbc.log" >"$B/pbc.txt"
grep '^# ratio' "$B/pbc.log"
echo "name median_ns p99_ns ops_per_s"
cat "$B/pbc.txt"
