#!/bin/sh
# bench/bench_pod.sh - builds bench/pod_bench.c into build/bench/ and runs it: rpcool's pod
# transport between two "hosts" (process trees in their own mount, pid and IPC namespaces that
# share only a device file) against the one-kernel shared-memory transport, on the same server,
# in alternating blocks: no-op calls and pointer-rich trees of 16 and 1024 nodes; medians, p99s
# and "# ratio pod/shm" lines. Needs root (it says "skip" otherwise). Results:
# build/bench/pod.txt ("NAME MEDIAN_NS P99_NS OPS_PER_S"), everything in build/bench/pod.log.
# BENCH_QUICK=1 divides the calls per block by 10.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
n=2000
[ "${BENCH_QUICK:-0}" = 1 ] && n=200
if ! ${CC:-cc} -O2 -pthread -I. -Ibench -Itests -Wall -Wextra -Werror bench/pod_bench.c -o "$B/pod_bench" 2>"$B/build.pod.log"; then
    cat "$B/build.pod.log"; echo "FAIL pod_bench: build failed"; exit 1
fi
status=0
"$B/pod_bench" -n $n -b 20 >"$B/pod.log" 2>&1 || { echo "FAIL pod_bench"; status=1; }
grep -E '^rpcool_(shm|pod)/' "$B/pod.log" >"$B/pod.txt"
grep -E '^(skip|FAIL)' "$B/pod.log"
echo "name median_ns p99_ns ops_per_s"
cat "$B/pod.txt"
grep '^# ratio' "$B/pod.log"
exit $status
