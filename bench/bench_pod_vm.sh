#!/bin/sh
# bench/bench_pod_vm.sh - calls between two hosts of a pod: two qemu TCG guests sharing one
# ivshmem device (tests/vm/run.sh's pair of guests, VM_POD_SIZE, default 256 MiB) and joined by
# a socket netdev with Soft-RoCE (rxe0) on each, booted by `tests/vm/run.sh rpcbench` with the
# steps RPCBENCH_STEPS below (guest a, 10.0.3.1: servers; guest b, 10.0.3.2: clients). One run:
#   pod_floor/line       the floor: a bare cache-line ping-pong across the guests through the
#                        ivshmem device (bench/pod_pingpong.c: one 64-byte line per direction,
#                        each guest polling the other's line; blocks of 2000 round trips timed
#                        as a whole, the median of 31 block means), first of all
#   pod_floor/line-after the same, last: the guests' speed drifts over a run, so the rows
#                        between are bracketed
#   perftest_pair/write_rtt/2, send_rtt/2   ib_write_lat, ib_send_lat between the guests,
#                        perftest's half round trips doubled (bench_rdma_pair.sh says why)
#   pbtree_tcp/N         protobuf-c trees of N = 1, 16, 256, 4096 nodes over TCP (peer_pbtree)
#   rpcool_rdma/noop/MODE, rpcool_rdma/tree/MODE/N   rpcool over RDMA between the guests
#                        (rpcool_bench -n 1000 -w 100 with rdma://10.0.3.1/bench)
#   rpcool_pod/noop/MODE, rpcool_pod/tree/MODE/N   rpcool's pod transport through the ivshmem
#                        device (rpcool_bench -n 2000 -w 200 with pod:bench, both sides given
#                        the device in $RPCOOL_POD_DEVICE): each call timed (a clock read per
#                        call, which costs the guests more than a call of the pod)
#   rpcool_pod/pingpong/relaxed, rpcool_pod/pingpong/line   the pod's relaxed no-op and a bare
#                        cache-line ping-pong in its connection heap (in the device) run by
#                        the server's handler, in alternating blocks of 2000 timed whole, on
#                        the same processes: the pod no-op against the floor
#   rpcool_pod_poll/...  the no-op and ping-pong rows again with both sides polling 20 ms before
#                        they sleep ($RPCOOL_BENCH_SPIN_NS; the default is 20 us): under TCG a
#                        guest's vCPU thread descheduled by the host for milliseconds makes an
#                        idle peer sleep, and waking it takes a datagram between the guests
# Under TCG every vCPU of both guests is a thread of the host, and this host has few CPUs (the
# "host cpus" line; 2 on the project's machines): a polling guest takes a host CPU from the
# other, so the floor here is the time two qemu processes take to see each other's store, not
# a CXL device's. Read the ratios, which come from this one run; absolute times mean little.
# Prints "NAME MEDIAN_NS P99_NS OPS_PER_S" lines (bench/README.md) and the ratios; kept in
# build/bench/pod_vm.txt (full output: build/bench/pod_vm.log; POD_VM_LOG=FILE re-reads a kept
# log instead of running; POD_VM_STEPS=... other steps of tests/vm/run.sh rpcbench).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
STEPS=${POD_VM_STEPS:-floor,perftest,pbtree,rpcool,pod,pod-poll,floor-after}
if [ -n "${POD_VM_LOG:-}" ]; then # re-read an earlier run's output
    cp "$POD_VM_LOG" "$B/pod_vm.log.in" && mv "$B/pod_vm.log.in" "$B/pod_vm.log"; rc=0
else
    sh tests/deps.sh vm && sh tests/deps.sh bench || exit 1
    load0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date -u +%H:%M)
    VM_GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-900} RPCBENCH_STEPS=$STEPS \
        sh tests/vm/run.sh rpcbench >"$B/pod_vm.log" 2>&1
    rc=$?
    echo "# host: $(nproc) cpus shared by both guests' 2 vCPUs each (qemu TCG); load average" \
        "$load0 at the start ($t0 UTC), $(cut -d' ' -f1 /proc/loadavg) at the end" \
        "($(date -u +%H:%M) UTC); ivshmem ${VM_POD_SIZE:-256M}; steps $STEPS;" \
        "commit $(git describe --always --dirty 2>/dev/null)" >>"$B/pod_vm.log"
fi
tr -d '\r' <"$B/pod_vm.log" | awk '
    /^perftest ib_/ {
        tool = $2; sub(/^ib_/, "", tool); sub(/_lat$/, "", tool); if ($3 == "after") tool = tool "_after"
        next
    }
    /^\| +#bytes/ { grab = 1; next }
    grab && /^\| +[0-9]/ {
        grab = 0
        k = sprintf("perftest_pair/%s_rtt/%d", tool, $2)
        med[k] = 2000 * $6; p99[k] = 2000 * $9; ops[k] = 1e6 / (2 * $7); order[++no] = k
        next
    }
    /^[a-z_]+\/[^ ]+ [0-9]+ [0-9]+ [0-9]+$/ {
        med[$1] = $2; p99[$1] = $3; ops[$1] = $4; order[++no] = $1; next
    }
    /^# +(pod_floor|pingpong)/ { sub(/^# +/, ""); rows[++nr] = "# " $0; next }
    /^FAIL / { fails[++nf] = $0; next }
    /^vm: / { vm = $0; next }
    /^# host: / { sub(/^# /, ""); host = $0; next }
    function ratio(label, a, b) {
        if ((a in med) && (b in med) && med[b] > 0)
            printf "%-56s %9.2fx  (median %s / median %s)\n", label, med[a] / med[b], a, b
        else
            printf "%-56s       n/a  (%s or %s missing)\n", label, a, b
    }
    END {
        if (host != "") print "== " host
        print "== two guests sharing an ivshmem device, one run (median, p99 in us; round trips)"
        for (i = 1; i <= no; i++) {
            k = order[i]
            printf "%-40s median %10.3f us  p99 %10.3f us  %10.0f /s\n", k, med[k] / 1000,
                p99[k] / 1000, ops[k]
        }
        for (i = 1; i <= nr; i++) print rows[i]
        print "== ratios (same run)"
        F = "pod_floor/line"; FA = "pod_floor/line-after"; R = "rpcool_rdma/noop/relaxed"
        P = "rpcool_pod/pingpong/relaxed"; PL = "rpcool_pod/pingpong/line"
        PN = "rpcool_pod/noop/relaxed"; W = "perftest_pair/write_rtt/2"
        ratio("floor after / floor before (drift over the run)", FA, F)
        ratio("pod no-op / floor (goal <= 1.5; blocks, both)", P, F)
        ratio("pod no-op / floor run after it", P, FA)
        ratio("pod no-op / its alternating line ping-pong (blocks)", P, PL)
        ratio("line in the connection heap / floor", PL, F)
        ratio("pod no-op timed per call / floor", PN, F)
        PP = "rpcool_pod_poll/pingpong/relaxed"; PPL = "rpcool_pod_poll/pingpong/line"
        ratio("pod no-op, polling / floor (blocks)", PP, F)
        ratio("pod no-op, polling / floor run after it", PP, FA)
        ratio("pod no-op, polling / its alternating line ping-pong", PP, PPL)
        ratio("pod no-op, polling, timed per call / floor", "rpcool_pod_poll/noop/relaxed", F)
        ratio("rpcool RDMA no-op / pod no-op (goal >= 20)", R, P)
        ratio("rpcool RDMA no-op / pod no-op, polling", R, PP)
        ratio("rpcool RDMA no-op / pod no-op timed per call", R, PN)
        ratio("rpcool RDMA no-op / floor", R, F)
        ratio("ib_write_lat round trip / floor", W, F)
        ratio("rpcool RDMA no-op / ib_write_lat round trip", R, W)
        split("1 16 256 4096", ns, " ")
        for (j = 1; j <= 4; j++) {
            T = "pbtree_tcp/" ns[j]
            ratio(sprintf("protobuf-c TCP / rpcool pod relaxed, %d nodes", ns[j]), T,
                  "rpcool_pod/tree/relaxed/" ns[j])
            ratio(sprintf("protobuf-c TCP / rpcool pod sealed, %d nodes", ns[j]), T,
                  "rpcool_pod/tree/sealed/" ns[j])
            ratio(sprintf("protobuf-c TCP / rpcool RDMA relaxed, %d nodes", ns[j]), T,
                  "rpcool_rdma/tree/relaxed/" ns[j])
            ratio(sprintf("rpcool RDMA / rpcool pod relaxed, %d nodes", ns[j]),
                  "rpcool_rdma/tree/relaxed/" ns[j], "rpcool_pod/tree/relaxed/" ns[j])
        }
        print "== machine lines"
        for (i = 1; i <= no; i++) {
            k = order[i]; printf "%s %d %d %d\n", k, med[k], p99[k], ops[k]
        }
        for (i = 1; i <= nf; i++) print fails[i]
        if (vm != "") print vm
        bad = 0
        if (!(F in med) || !(FA in med)) { print "bench_pod_vm: the floor is missing"; bad = 1 }
        if (nf > 0) bad = 1
        exit bad
    }
' >"$B/pod_vm.txt" || rc=1
cat "$B/pod_vm.txt"
exit $rc
