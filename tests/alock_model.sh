#!/bin/sh
# tests/alock_model.sh [safety|liveness|all|rliveness] - model-checks alock.h's protocol
# (tests/alock.pml) with Spin, and shows the model has teeth: each mutant must give a counter-example. Prints
# ok/FAIL/skip lines. safety: mutual exclusion and no deadlock (with and without timeouts), the
# mutants, the CAS loop's starvation; liveness: every local waiter and every enqueued remote
# waiter gets the lock under weak fairness; with -DKILL, a remote process that dies holding or
# waiting and its recovery. Up to 35 s of CPU each, about 2.5 minutes in all.
# Checked by hand, not here (a minute by itself): with -DTIMEOUTS, remote_queued_gets_lock holds
# too (spin -DTIMEOUTS -a tests/alock.pml; cc -O2 -DCOLLAPSE pan.c; ./a.out -a -f -m4000000
# -N remote_queued_gets_lock: 7.8 M states, no errors). With -DRTIMEOUTS (remote waiters give
# up), local_gets_lock holds: `tests/alock_model.sh rliveness` (9.3 M states, about 3 minutes).
# Needs spin and a C compiler (tests/deps.sh host installs spin).
set -u
what=${1:-all}
src=$(cd "$(dirname "$0")" && pwd)/alock.pml
if ! command -v spin >/dev/null 2>&1; then echo "skip alock-model: spin is not installed (apt-get install spin)"; exit 0; fi
CC=${CC:-cc}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
cp "$src" alock.pml
DEPTH=4000000 # the runs reach depth 1.4 M (3.3 M with timeouts); a cut search would prove nothing

# build NAME SPIN-DEFINES CC-DEFINES: pan for this variant of the model as ./pan-NAME
build() {
    rm -f pan.c pan.h pan.m pan.b pan.t pan.p
    # shellcheck disable=SC2086
    spin $2 -a alock.pml >"spin-$1.log" 2>&1 && $CC -O2 -DCOLLAPSE $3 -o "pan-$1" pan.c 2>>"spin-$1.log"
}

# holds NAME SPIN-DEFINES CC-DEFINES PAN-ARGS: the property must hold, over the whole state space
holds() {
    n=$1
    if ! build "$n" "$2" "$3"; then echo "FAIL $n: spin/cc: $(tail -n 3 "spin-$n.log" | tr '\n' ' ')"; return; fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    "./pan-$n" -m$DEPTH $4 >"$n.out" 2>&1
    secs=$(($(date +%s) - t0))
    st=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$n.out")
    if grep -q 'errors: 0' "$n.out" && ! grep -q 'max search depth too small' "$n.out"; then
        echo "ok $n"
        echo "# $n: $st states, $(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$n.out") deep, $secs s"
    else
        echo "FAIL $n: $(grep -E 'pan:1:|errors:|too small' "$n.out" | head -n 3 | tr '\n' ' ')"
    fi
}

# breaks NAME WANT SPIN-DEFINES CC-DEFINES PAN-ARGS: a counter-example whose text matches WANT
breaks() {
    n=$1
    if ! build "$n" "$3" "$4"; then echo "FAIL $n: spin/cc: $(tail -n 3 "spin-$n.log" | tr '\n' ' ')"; return; fi
    # shellcheck disable=SC2086
    "./pan-$n" -m$DEPTH $5 >"$n.out" 2>&1
    if grep -q "$2" "$n.out"; then
        echo "ok $n"
        echo "# $n: $(grep 'pan:1:' "$n.out" | head -n 1)"
    else
        echo "FAIL $n: expected a counter-example ($2), got: $(grep -E 'pan:1:|errors:' "$n.out" | head -n 2 | tr '\n' ' ')"
    fi
}

if [ "$what" = safety ] || [ "$what" = all ]; then
    # the protocol: mutual exclusion, no deadlock; with alock_lock_timeout too (waiters give up,
    # leaders leave the head of the queue)
    holds alock-model-mutex-no-deadlock "" "-DSAFETY -DNOCLAIM" ""
    holds alock-model-timeouts-mutex-no-deadlock "-DTIMEOUTS" "-DSAFETY -DNOCLAIM" ""
    # what the model finds and the manual says: the CAS loop standing in for swap can starve
    breaks alock-model-cas-loop-can-starve "acceptance cycle" "" "" "-a -f -N remote_gets_lock"
    # mutants: each must fail
    breaks alock-model-mutant-cpu-xchg-rtail "assertion violated" "-DMUT_CPU_XCHG_RTAIL" "-DSAFETY -DNOCLAIM" "-E"
    breaks alock-model-mutant-cpu-xchg-rtail-deadlock "invalid end state" "-DMUT_CPU_XCHG_RTAIL" "-DSAFETY -DNOCLAIM" ""
    breaks alock-model-mutant-no-victim "assertion violated" "-DMUT_NO_VICTIM" "-DSAFETY -DNOCLAIM" ""
    breaks alock-model-mutant-timeout-grant-no-cas "acceptance cycle" "-DTIMEOUTS -DMUT_GRANT_NO_CAS" "" "-a -f -N remote_queued_gets_lock"
    breaks alock-model-mutant-no-budget "acceptance cycle" "-DMUT_NO_BUDGET" "" "-a -f -N remote_queued_gets_lock"
    # alock_remote_lock_timeout: remote waiters give up (RDMA CAS of their own budget word),
    # remote leaders leave the head, hand-offs are RDMA CAS and pass over the ones that gave up
    holds alock-model-rtimeouts-mutex-no-deadlock "-DRTIMEOUTS" "-DSAFETY -DNOCLAIM" ""
    # a lost hand-off leaves the lock with nobody: the local processes wait forever
    breaks alock-model-mutant-rgrant-write "acceptance cycle" "-DRTIMEOUTS -DMUT_RGRANT_WRITE" "" "-a -f -N local_gets_lock"
    breaks alock-model-mutant-rgiveup-cpu "acceptance cycle" "-DRTIMEOUTS -DMUT_RGIVEUP_CPU" "" "-a -f -N local_gets_lock"
    # a release that waits for its successor's link only up to a fixed bound: a slow but live
    # successor is never handed the lock (alock.h waits for as long as the successor lives)
    breaks alock-model-mutant-rlink-bound "acceptance cycle" "-DMUT_RLINK_BOUND" "" "-a -f -N remote_queued_gets_lock"
    breaks alock-model-rtimeouts-mutant-rlink-bound "acceptance cycle" "-DRTIMEOUTS -DMUT_RLINK_BOUND" "" "-a -f -N local_gets_lock"
    # a remote process dies holding or waiting (-DKILL): the recovery keeps mutual exclusion and
    # lets the live ones go on; mutants: a reset of any dead tail, a hand-off that does not mark
    # r_head
    holds alock-model-kill-mutex-no-deadlock "-DKILL" "-DSAFETY -DNOCLAIM" ""
    breaks alock-model-mutant-kill-reset-any-tail "assertion violated" "-DKILL -DMUT_RESET_ANY_TAIL" "-DSAFETY -DNOCLAIM" ""
    breaks alock-model-mutant-kill-no-mark "acceptance cycle" "-DKILL -DMUT_NO_MARK" "" "-a -f -N local_gets_lock"
fi
if [ "$what" = rliveness ]; then
    holds alock-model-rtimeouts-local-gets-lock "-DRTIMEOUTS" "" "-a -f -N local_gets_lock"
fi
if [ "$what" = liveness ] || [ "$what" = all ]; then
    # under weak fairness: every local waiter, and every remote waiter once enqueued, gets it
    holds alock-model-local-gets-lock "" "" "-a -f -N local_gets_lock"
    holds alock-model-remote-queued-gets-lock "" "" "-a -f -N remote_queued_gets_lock"
    # with a remote process that dies (-DKILL): the live ones still get the lock
    holds alock-model-kill-local-gets-lock "-DKILL" "" "-a -f -N local_gets_lock"
    holds alock-model-kill-remote-queued-gets-lock "-DKILL" "" "-a -f -N remote_queued_gets_lock"
fi
