#!/bin/sh
# bench/bench_krconn.sh - connection set-up on Soft-RoCE, everything in one qemu TCG guest and
# one run (`tests/vm/run.sh krconn-bench`, program bench/bench_krconn.c):
#   krconn_new/T       krconn physical connect (to a context not yet connected), T threads
#   krconn_virtual/T   krconn connect to a context already connected (shares the QP)
#   krconn_lookup_*    directory lookup: shared memory, and the meta server by RDMA READ
#   verbs_tcp/1        plain verbs: create CQ+QP, INIT, endpoints over TCP, RTR, RTS
#   probe_rtr_KIND/1   one RTR (QP reset to INIT in between), and probe_ah_KIND/1 one
#   probe_ah_KIND/1    ibv_create_ah, towards each kind of GID the port has (mapped: the
#                      IPv4-mapped RoCE v2 GID krconn uses; linklocal: the fe80:: RoCE v2 one)
#   ud_rtt_MODE/1      the floor: perftest's ib_send_lat -c UD (64 B), twice its t_typical (half
#                      the round trip), median of a run before and one after bench_krconn;
#                      MODE poll, or event (-e: completion events, as a sleeping context)
#   rdma_cm/1          rdmacm-utils' cmtime, one connection per run, a fresh server per run:
#                      create id + resolve addr + resolve route + create qp + connect
# Absolute times under TCG mean little: read the ratios, which come from this one run.
# VM_SMP=N gives the guest N virtual CPUs (default 2; tests/vm/run.sh).
# Prints "NAME MEDIAN_NS P99_NS OPS_PER_S" lines (bench/README.md), the step breakdowns, device
# packets per connect, and the ratios; kept in build/bench/krconn.txt (full guest output:
# build/bench/krconn.log; KRCONN_BENCH_LOG=FILE re-reads a kept log instead of running).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
if [ -n "${KRCONN_BENCH_LOG:-}" ]; then # re-read an earlier run's guest output
    cp "$KRCONN_BENCH_LOG" "$B/krconn.log.in" && mv "$B/krconn.log.in" "$B/krconn.log"; rc=0
else
    sh tests/deps.sh vm || exit 1
    load0=$(cut -d' ' -f1 /proc/loadavg)
    sh tests/vm/run.sh krconn-bench >"$B/krconn.log" 2>&1
    rc=$?
    echo "# host load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end; guest vCPUs ${VM_SMP:-2}; commit $(git rev-parse --short HEAD 2>/dev/null)" >>"$B/krconn.log"
fi
tr -d '\r' <"$B/krconn.log" | awk '
    function median(a, n,    i, j, t) { # sorts a[1..n]
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /^[a-z_]+\/[0-9]+ [0-9]+ [0-9]+ [0-9]+$/ { med[$1] = $2; p99[$1] = $3; ops[$1] = $4; order[++no] = $1; next }
    /^# host load/ { sub(/^# /, ""); hostload = $0; next }
    /^step / { steps[$2] = steps[$2] sprintf("  %-22s %10.1f us\n", $3, $4); next }
    /^packets / { pk[$2] = $3; next }
    /^udfloor (poll|event) [0-9.]+ [0-9.]+ [0-9.]+$/ { # half round trips (us), one per run
        nu[$2]++; ut[$2, nu[$2]] = 2 * $4 * 1000; if (2 * $5 * 1000 > up[$2]) up[$2] = 2 * $5 * 1000; next
    }
    /^cmtime run/ { run++; tot = 0; next }
    /^\| (create id|resolve addr|resolve route|create qp|connect) *:/ {
        line = $0; sub(/^\| /, "", line); split(line, f, ":"); name = f[1]; gsub(/ +$/, "", name)
        n = split(f[2], v, " "); us = v[n]
        cm[name, run] = us; tot += us; total[run] = tot; names[name] = 1; next
    }
    END {
        for (r = 1; r <= run; r++) t[r] = total[r]
        if (run > 0) {
            m = median(t, run); mx = t[run]
            med["rdma_cm/1"] = m * 1000; p99["rdma_cm/1"] = mx * 1000; ops["rdma_cm/1"] = 1e6 / m
            order[++no] = "rdma_cm/1"
            split("create id,resolve addr,resolve route,create qp,connect", sn, ",")
            for (k = 1; k <= 5; k++) {
                for (r = 1; r <= run; r++) u[r] = cm[sn[k], r]
                steps["rdma_cm/1"] = steps["rdma_cm/1"] sprintf("  %-22s %10.1f us (median of %d runs)\n", sn[k], median(u, run), run)
            }
        }
        split("poll event", um, " ")
        for (j = 1; j <= 2; j++) {
            k = "ud_rtt_" um[j] "/1"; if (!(um[j] in nu)) continue
            for (r = 1; r <= nu[um[j]]; r++) u[r] = ut[um[j], r]
            med[k] = median(u, nu[um[j]]); p99[k] = up[um[j]]; ops[k] = 1e9 / med[k]; order[++no] = k
        }
        if (hostload != "") print "== " hostload
        print "== connection set-up (median, p99, per second)"
        for (i = 1; i <= no; i++) {
            k = order[i]
            printf "%-22s median %11.1f us  p99 %11.1f us  %9.0f /s%s\n", k, med[k] / 1000, p99[k] / 1000, ops[k], \
                (k in pk) ? sprintf("  %.2f device packets per connect", pk[k]) : ""
        }
        print "== where the time goes (per connect)"
        for (i = 1; i <= no; i++) { k = order[i]; if (k in steps) { print k; printf "%s", steps[k] } }
        print "== ratios (same run; median over median)"
        split("krconn_new/1 krconn_virtual/1", ks, " ")
        for (j = 1; j <= 2; j++) {
            if (!(ks[j] in med) || med[ks[j]] == 0) continue
            if ("rdma_cm/1" in med) printf "rdma_cm/1 / %-18s %9.1fx\n", ks[j], med["rdma_cm/1"] / med[ks[j]]
            if ("verbs_tcp/1" in med) printf "verbs_tcp/1 / %-16s %9.1fx\n", ks[j], med["verbs_tcp/1"] / med[ks[j]]
        }
        # the floors: a UD round trip (what a new-peer connect exchanges), and below
        split("poll event", um, " ")
        for (j = 1; j <= 2; j++) {
            fl = "ud_rtt_" um[j] "/1"; if (!(fl in med) || med[fl] == 0) continue
            if ("rdma_cm/1" in med) printf "rdma_cm/1 / %-18s %9.1fx  (a UD round trip alone)\n", fl, med["rdma_cm/1"] / med[fl]
            if ("krconn_new/1" in med) printf "krconn_new/1 / %-15s %9.2fx\n", fl, med["krconn_new/1"] / med[fl]
        }
        # the floor of any connect over standard RC verbs: one UD round trip, and an RTR on each
        # side in sequence (the answering side cannot RTR before the request names the QP, the
        # asking side before the answer does; a peer that answered before its own RTR would
        # drop the first packets sent to it)
        fl = "ud_rtt_poll/1"; rt = "probe_rtr_mapped/1"
        if ((fl in med) && (rt in med) && ("rdma_cm/1" in med)) {
            rcf = med[fl] + 2 * med[rt]
            printf "RC connect floor (ud_rtt_poll + 2 x probe_rtr_mapped) %9.1f us\n", rcf / 1000
            printf "rdma_cm/1 / RC connect floor       %9.1fx  (the best any RC connect could reach here)\n", med["rdma_cm/1"] / rcf
            if ("krconn_new/1" in med) printf "krconn_new/1 / RC connect floor    %9.2fx\n", med["krconn_new/1"] / rcf
        }
        split("rtr ah", pk2, " ")
        for (j = 1; j <= 2; j++) {
            a = "probe_" pk2[j] "_linklocal/1"; b = "probe_" pk2[j] "_mapped/1"
            if ((a in med) && (b in med) && med[b] > 0)
                printf "%s / %s %9.2fx\n", a, b, med[a] / med[b]
        }
        if (("krconn_new/2" in ops) && ops["krconn_new/1"] > 0) printf "krconn_new connects/s, 2 threads / 1: %.2f\n", ops["krconn_new/2"] / ops["krconn_new/1"]
        if (("krconn_virtual/2" in ops) && ops["krconn_virtual/1"] > 0) printf "krconn_virtual connects/s, 2 threads / 1: %.2f\n", ops["krconn_virtual/2"] / ops["krconn_virtual/1"]
        print "== machine lines"
        for (i = 1; i <= no; i++) { k = order[i]; printf "%s %d %d %d\n", k, med[k], p99[k], ops[k] }
        if (!("krconn_new/1" in med) || !("rdma_cm/1" in med) || !("verbs_tcp/1" in med)) { print "bench_krconn: results missing"; exit 1 }
    }
' >"$B/krconn.txt" || rc=1
cat "$B/krconn.txt"
grep -E '^(FAIL|vm:)' "$B/krconn.log"
exit $rc
