#!/bin/sh
# bench/bench_rdma_pair.sh - rpcool between pods: two qemu TCG guests joined by a
# socket netdev, Soft-RoCE (rxe0) on each, booted by `tests/vm/run.sh rpcbench` (guest roles
# rpcbench-a: servers, 10.0.3.1, SHMHEAP_POD_ID=0; rpcbench-b: clients, 10.0.3.2, pod 1). One run:
#   perftest_pair/write_after_rtt/2         ib_write_lat again after the rpcool rows (the
#                        guests' speed drifts over a run: the rpcool rows are bracketed)
#   perftest_pair/write_rtt/2, send_rtt/2   ib_write_lat, ib_send_lat between the guests (2 B,
#                        -n 500, -x the GID index impl/verbs.h picks). perftest prints HALF
#                        the round trip for send and write (src/perftest_parameters.c,
#                        print_report_lat: rtt_factor 2 unless READ or ATOMIC); these rows are
#                        2 x its t_typical and 2 x its 99%: round trips, like all the others
#   pbtree_tcp/N         protobuf-c trees of N = 1, 16, 256, 4096 nodes over TCP (peer_pbtree,
#                        -n 200 -w 20 per size)
#   grpc_tcp/64          gRPC unary call, 64 B, over TCP (peer_grpc, -n 500 -w 50), when it runs
#                        in the guest
#   rpcool_rdma/noop/MODE, rpcool_rdma/tree/MODE/N   rpcool_bench -n 1000 -w 100 with
#                        rdma://10.0.3.1/bench (no-op: relaxed, copy, sealed, sandboxed, 8 B;
#                        trees: relaxed, sealed, sandboxed, sealed+sandboxed; 50+ calls each)
#   pbc_tcp/N, rpcool_pbc_rdma/MODE/N   a protobuf-c service of N = 1, 1000 items (bench/pbc_bench.c
#                        -n 1000 -c 10.0.3.1:7482): pack + TCP + unpack against rpcool over RDMA
#                        (relaxed, sandbox, copy, relaxed-copyin), alternating blocks of 100
#   rpcool_rdma_ab/V-R/MODE   with RPCBENCH_BASE=COMMIT (make builds that commit's rpcool_bench):
#                        the RDMA no-op (-S noop -n 1000) of this tree (V = new) and of that
#                        commit (V = base), alternating, rounds R = 1..3, each against its own
#                        server; the ratio base / new per round
#   kvpods/local-get-rpc, kvpods/local-get-ptr-locked   examples/rpcool_kv_pods.c bench in guest
#                        a (pod A: a server of its own; by call, by pointer under the lock)
#   kvpods/remote-get-rpc, -read-locked, -read-opt   the same from guest b (pod B) against
#                        guest a's `serve`: by call over RDMA, by one-sided READ under the
#                        bucket's lock (ALock's remote cohort), by optimistic READ (version
#                        word before and after). Each figure: median time per get of blocks of 50
# VM_PAIR_MTU=9000 runs the same with jumbo frames (rxe's path MTU 4096, RoCE's usual; the
# default netdev MTU 1500 gives 1024): every peer in the run uses the same link.
# Absolute times under TCG mean little: read the ratios, which come from this one run.
# Prints "NAME MEDIAN_NS P99_NS OPS_PER_S" lines (bench/README.md) and the ratios; kept in
# build/bench/rdma_pair.txt (full output: build/bench/rdma_pair.log; RDMA_PAIR_LOG=FILE
# re-reads a kept log instead of running).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
if [ -n "${RDMA_PAIR_LOG:-}" ]; then # re-read an earlier run's output
    cp "$RDMA_PAIR_LOG" "$B/rdma_pair.log.in" && mv "$B/rdma_pair.log.in" "$B/rdma_pair.log"; rc=0
else
    sh tests/deps.sh vm && sh tests/deps.sh bench || exit 1
    load0=$(cut -d' ' -f1 /proc/loadavg)
    # run_pair sets 300 s per guest unless VM_GUEST_TIMEOUT says otherwise: on a loaded host a
    # whole run takes longer
    VM_GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-900} sh tests/vm/run.sh rpcbench >"$B/rdma_pair.log" 2>&1
    rc=$?
    echo "# host load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end;" \
        "VM_PAIR_MTU=${VM_PAIR_MTU:-default};" \
        "commit $(git describe --always --dirty 2>/dev/null)" >>"$B/rdma_pair.log"
fi
tr -d '\r' <"$B/rdma_pair.log" | awk '
    # perftest table: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (usec),
    # every figure half a round trip: doubled here
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
    /^rpcool-rdma: |^grpc: |^# thread-cpu |^# rpcbench on / { rows[++nr] = $0; next }
    /^FAIL / { fails[++nf] = $0; next }
    /^vm: / { vm = $0; next }
    /^# host load/ { sub(/^# /, ""); hostload = $0; next }
    function ratio(label, a, b) {
        if ((a in med) && (b in med) && med[b] > 0)
            printf "%-52s %8.2fx  (median %s / median %s)\n", label, med[a] / med[b], a, b
        else
            printf "%-52s      n/a  (%s or %s missing)\n", label, a, b
    }
    END {
        if (hostload != "") print "== " hostload
        print "== two guests, one run (median, p99 in us; round trips)"
        for (i = 1; i <= no; i++) {
            k = order[i]
            printf "%-40s median %10.1f us  p99 %10.1f us  %9.0f /s\n", k, med[k] / 1000,
                p99[k] / 1000, ops[k]
        }
        for (i = 1; i <= nr; i++) print rows[i]
        print "== ratios (same run; perftest doubled to a round trip)"
        W = "perftest_pair/write_rtt/2"; S = "perftest_pair/send_rtt/2"
        R = "rpcool_rdma/noop/relaxed"
        WA = "perftest_pair/write_after_rtt/2"
        ratio("rpcool RDMA no-op / ib_write_lat round trip", R, W)
        ratio("rpcool RDMA no-op / ib_write_lat run after it", R, WA)
        ratio("ib_write_lat after / before the rpcool rows", WA, W)
        ratio("rpcool RDMA no-op / ib_send_lat round trip", R, S)
        ratio("ib_send_lat / ib_write_lat round trip", S, W)
        ratio("no-op, client no spin / default spin (round 1)", "rpcool_rdma/noop/relaxed-spin-none-1", "rpcool_rdma/noop/relaxed-spin-default-1")
        ratio("no-op, client no spin / default spin (round 2)", "rpcool_rdma/noop/relaxed-spin-none-2", "rpcool_rdma/noop/relaxed-spin-default-2")
        ratio("no-op, client always polls / default (round 1)", "rpcool_rdma/noop/relaxed-spin-poll-1", "rpcool_rdma/noop/relaxed-spin-default-1")
        ratio("no-op, client always polls / default (round 2)", "rpcool_rdma/noop/relaxed-spin-poll-2", "rpcool_rdma/noop/relaxed-spin-default-2")
        ratio("no-op, client no spin / ib_write_lat (round 1)", "rpcool_rdma/noop/relaxed-spin-none-1", W)
        ratio("no-op, client no spin / ib_write_lat (round 2)", "rpcool_rdma/noop/relaxed-spin-none-2", W)
        ratio("gRPC TCP 64 B / rpcool RDMA no-op", "grpc_tcp/64", R)
        ratio("gRPC TCP 64 B / ib_write_lat round trip", "grpc_tcp/64", W)
        split("1 16 256 4096", ns, " ")
        for (j = 1; j <= 4; j++) {
            P = "pbtree_tcp/" ns[j]
            ratio(sprintf("protobuf-c TCP / rpcool RDMA relaxed, %d nodes", ns[j]), P,
                  "rpcool_rdma/tree/relaxed/" ns[j])
            ratio(sprintf("protobuf-c TCP / rpcool RDMA sealed, %d nodes", ns[j]), P,
                  "rpcool_rdma/tree/sealed/" ns[j])
        }
        split("1 1000", pn, " ")
        for (j = 1; j <= 2; j++)
            for (m = 1; m <= 3; m++) {
                split("relaxed sandbox copy", pm, " ")
                ratio(sprintf("protobuf-c service TCP / rpcool RDMA %s, %d items", pm[m], pn[j]),
                      "pbc_tcp/" pn[j], "rpcool_pbc_rdma/" pm[m] "/" pn[j])
            }
        for (r = 1; r <= 3; r++)
            if (("rpcool_rdma_ab/new-" r "/relaxed") in med)
                ratio(sprintf("RDMA no-op, base build / this tree (round %d)", r),
                      "rpcool_rdma_ab/base-" r "/relaxed", "rpcool_rdma_ab/new-" r "/relaxed")
        ratio("kv get: call over RDMA / optimistic READ (goal >= 1.5)", "kvpods/remote-get-rpc",
              "kvpods/remote-get-read-opt")
        ratio("kv get: locked READ / optimistic READ (goal <= 2)", "kvpods/remote-get-read-locked",
              "kvpods/remote-get-read-opt")
        ratio("kv get: optimistic READ / by pointer, locked (goal >= 100)",
              "kvpods/remote-get-read-opt", "kvpods/local-get-ptr-locked")
        print "== machine lines"
        for (i = 1; i <= no; i++) {
            k = order[i]; printf "%s %d %d %d\n", k, med[k], p99[k], ops[k]
        }
        for (i = 1; i <= nf; i++) print fails[i]
        if (vm != "") print vm
        bad = 0
        if (!(W in med) || !(S in med)) {
            print "bench_rdma_pair: perftest results missing"; bad = 1
        }
        for (j = 1; j <= 4; j++)
            if (!(("pbtree_tcp/" ns[j]) in med)) {
                print "bench_rdma_pair: pbtree_tcp/" ns[j] " missing"; bad = 1
            }
        if (nf > 0) bad = 1
        exit bad
    }
' >"$B/rdma_pair.txt" || rc=1
cat "$B/rdma_pair.txt"
exit $rc
