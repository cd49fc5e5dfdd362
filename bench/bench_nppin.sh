#!/bin/sh
# bench/bench_nppin.sh - nppin.h on Soft-RoCE in one qemu TCG guest (2 GiB), booted by
# `tests/vm/run.sh nppin-bench`, which runs bench/nppin_bench.c. Every figure is compared
# with its peer measured in the same run, as a ratio:
#   registration of 1 GiB (1% touched): nppin_reg against one ibv_reg_mr      goal >= 1000x
#   pinned memory after moving the touched 1% through nppin                  goal <= budget
#   resident memory after that, against what was touched                     goal <= 2x
#   remote 64 B READ on a leased chunk against raw verbs on a plain MR        goal <= 1.1x
#   first touch of a chunk (lease request + registration) against a leased READ
#   4 KiB READs at random over 1 GiB under a 64 MiB budget against one leased chunk
# Numbers are of an emulated NIC under an emulated CPU: compare them with each other only.
# Leaves build/bench/nppin.txt (machine lines: NAME MEDIAN_NS P99_NS OPS_PER_S, or NAME VALUE
# UNIT) and build/bench/nppin.log (everything the guest printed).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
sh tests/deps.sh vm || exit 1
VM_GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-420} sh tests/vm/run.sh nppin-bench >"$B/nppin.log" 2>&1
rc=$?
sed -n 's/^nppin_bench //p' "$B/nppin.log" >"$B/nppin.txt"
grep -E '^    \[nppin-bench\]' "$B/nppin.log" | sed 's/^    \[nppin-bench\] /  /'
awk '
    { v[$1] = $2 }
    function r(a, b) { return (b > 0) ? a / b : 0 }
    function goal(name, ratio, ok) {
        printf "%-58s %10.2fx  %s\n", name, ratio, ok ? "goal met" : "goal MISSED"
        if (!ok) missed++
    }
    function info(name, ratio) { printf "%-58s %10.2fx\n", name, ratio }
    END {
        if (!("reg/nppin_reg_1GiB" in v) || !("read64/raw_verbs" in v) || !("churn/one_leased_chunk" in v)) {
            print "bench_nppin: the guest did not report every figure"; exit 1
        }
        printf "registration of 1 GiB: nppin_reg %.1f us, ibv_reg_mr %.1f ms (medians)\n", \
            v["reg/nppin_reg_1GiB"] / 1e3, v["reg/ibv_reg_mr_1GiB"] / 1e6
        goal("ibv_reg_mr / nppin_reg (1 GiB)", r(v["reg/ibv_reg_mr_1GiB"], v["reg/nppin_reg_1GiB"]),
             r(v["reg/ibv_reg_mr_1GiB"], v["reg/nppin_reg_1GiB"]) >= 1000)
        printf "touched %d KiB; nppin pinned %d KiB (VmPin %d), resident +%d KiB; ibv_reg_mr VmPin %d KiB, resident +%d KiB\n", \
            v["reg/touched_kib"], v["reg/nppin_pinned_after_touch_kib"], v["reg/nppin_vmpin_kib"], \
            v["reg/nppin_rss_kib"], v["reg/ibv_reg_mr_vmpin_kib"], v["reg/ibv_reg_mr_rss_kib"]
        goal("nppin pinned / budget (64 MiB)", r(v["reg/nppin_vmpin_kib"], 65536), v["reg/nppin_vmpin_kib"] <= 65536)
        goal("nppin resident / touched", r(v["reg/nppin_rss_kib"], v["reg/touched_kib"]),
             r(v["reg/nppin_rss_kib"], v["reg/touched_kib"]) <= 2)
        info("ibv_reg_mr resident / touched", r(v["reg/ibv_reg_mr_rss_kib"], v["reg/touched_kib"]))
        printf "64 B READ: raw verbs %.1f us, nppin leased %.1f us (medians)\n", \
            v["read64/raw_verbs"] / 1e3, v["read64/nppin_leased"] / 1e3
        goal("nppin leased READ / raw verbs READ (median)", r(v["read64/nppin_leased"], v["read64/raw_verbs"]),
             r(v["read64/nppin_leased"], v["read64/raw_verbs"]) <= 1.1)
        printf "first touch of a chunk %.1f ms, then leased %.1f us (medians)\n", \
            v["firsttouch/nppin"] / 1e6, v["firsttouch/then_leased"] / 1e3
        info("first touch / leased READ", r(v["firsttouch/nppin"], v["firsttouch/then_leased"]))
        printf "4 KiB READs: random over 1 GiB, 64 MiB budget %.1f us; one leased chunk %.1f us (medians)\n", \
            v["churn/random_1GiB_budget64MiB"] / 1e3, v["churn/one_leased_chunk"] / 1e3
        info("churn / leased (median latency)", r(v["churn/random_1GiB_budget64MiB"], v["churn/one_leased_chunk"]))
        if (missed) printf "%d goal(s) missed in this run\n", missed
    }
' "$B/nppin.txt" || rc=1
grep -E '^(FAIL|vm:)' "$B/nppin.log"
exit $rc
