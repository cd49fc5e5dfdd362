#!/bin/sh
# bench/bench_kvpods.sh - examples/rpcool_kv_pods.c's gets, one run in the pods pair of qemu
# guests (Soft-RoCE): pod A gets by call and by pointer under the bucket's lock (guest a, a
# server of its own), pod B gets by call over RDMA, by locked one-sided READ and by optimistic
# READ (guest b, against guest a's server). Each figure is the median time per get of blocks of
# 50 gets. Lines: NAME MEDIAN_NS P90_NS GETS_PER_S in build/bench/kvpods.txt, then the ratios the
# export's design aims at, computed from this run.
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
if [ -n "${BENCH_NO_VM:-}" ] || [ ! -f tests/vm/run.sh ]; then
    echo "# kvpods: skipped (BENCH_NO_VM)"; exit 0
fi
echo "# command: VM_GUEST_TIMEOUT=600 sh tests/vm/run.sh kvpods-bench"
VM_GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-600} sh tests/vm/run.sh kvpods-bench >"$B/kvpods.log" 2>&1
status=$?
grep -E '^(kvpods/|#|FAIL|ok)' "$B/kvpods.log" | grep -v '^#   '
grep -E '^kvpods/' "$B/kvpods.log" >"$B/kvpods.txt"
awk '{ med[$1] = $2 }
function r(a, b, what, goal) {
    if (!(a in med) || !(b in med) || !med[a] || !med[b]) { printf "# %s: not measured\n", what; return }
    printf "# %s: %.2fx (goal %s)\n", what, med[b] / med[a], goal
}
END {
    r("kvpods/remote-get-read-opt", "kvpods/remote-get-rpc",
      "optimistic READ vs call over RDMA (times faster)", ">= 1.5x")
    if (("kvpods/remote-get-read-opt" in med) && ("kvpods/remote-get-read-locked" in med))
        printf "# locked READ / optimistic READ: %.2fx (goal <= 2x)\n",
            med["kvpods/remote-get-read-locked"] / med["kvpods/remote-get-read-opt"]
    m = 0
    split("kvpods/remote-get-rpc kvpods/remote-get-read-locked kvpods/remote-get-read-opt", w, " ")
    for (i = 1; i <= 3; i++) if ((w[i] in med) && (!m || med[w[i]] < m)) { m = med[w[i]]; f = w[i] }
    if (m) r("kvpods/local-get-ptr-locked", f, "local get by pointer vs the fastest remote get (" f ")", ">= 100x")
}' "$B/kvpods.txt"
exit $status
