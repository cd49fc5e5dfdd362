#!/bin/sh
# tests/run.sh host|vm|all - runs the test tiers and ends with "N passed, N failed".
# Host tier: the compile check, `make demo` on a fresh copy without the optional packages,
# `make install` into a temporary root, the style check, every tests/test_* binary (ASan+UBSan),
# their ThreadSanitizer builds, and valgrind over the binaries that say "// VALGRIND". VM tier:
# tests/vm/run.sh.
# Every run ends by checking that it left nothing in /dev/shm (shm_final), whichever tiers ran.
tier=${1:-all}
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
log=$BUILD/test-logs
mkdir -p "$log"
pass=0; fail=0; skip=0

count() { # count FILE: add the ok/FAIL/skip lines of one run's output
    p=$(grep -c '^ok ' "$1"); f=$(grep -c '^FAIL ' "$1"); s=$(grep -c '^skip ' "$1")
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    grep -E '^(FAIL|skip) ' "$1" | sed 's/^/    /'
}

# Files a test leaves in /dev/shm: names made by t_uniq carry this run's tag, so files of other
# runs at the same time are told apart. A test that leaves one fails; the file is removed.
RPCOOL_TEST_TAG="R$$."; export RPCOOL_TEST_TAG
shm_ours() { ls /dev/shm 2>/dev/null | grep -F -- "-$RPCOOL_TEST_TAG" | sort; }
shm_all() { ls /dev/shm 2>/dev/null | grep -E '^(rpcool|shmheap|t-|alock|rcp-)' | sort; }
shm_before=$(shm_all)

run_one() { # run_one LABEL CMD...: run a test binary, count its lines, a crash counts as failed
    label=$1; shift
    out="$log/$(echo "$label" | tr '/ ' '__').log"
    timeout 600 "$@" >"$out" 2>&1
    rc=$?
    left=$(shm_ours)
    if [ -n "$left" ]; then
        echo "FAIL $label-shm-leftovers: left in /dev/shm: $(echo $left)" >>"$out"
        (cd /dev/shm && rm -f -- $left)
    fi
    count "$out"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
        echo "FAIL $label: exited with status $rc" >>"$out"
        fail=$((fail + 1)); echo "    FAIL $label: exited with status $rc (log: $out)"
        tail -n 20 "$out" | sed 's/^/      /'
    fi
    echo "  $label: $(grep -c '^ok ' "$out") ok, $(grep -c '^FAIL ' "$out") failed"
}

host() {
    echo "== host tier"
    if ! $MAKE -s all >"$log/build.log" 2>&1; then
        cat "$log/build.log"; echo "FAIL build"; fail=$((fail + 1)); return
    fi
    run_one compile-check sh tests/compile_check.sh
    run_one demo-fresh sh tests/demo_fresh.sh
    run_one install-check sh tests/install_check.sh
    run_one style-check sh tests/style_check.sh
    run_one alock-model sh tests/alock_model.sh safety
    run_one alock-model-liveness sh tests/alock_model.sh liveness
    # the binaries of today's sources only (test_NAME.cc: the implementations as C++)
    for src in $(grep -L '^// VM' tests/test_*.c) $(ls tests/test_*.cc 2>/dev/null); do
        t=$BUILD/t/$(basename "${src%.cc}" .c)
        run_one "$(basename $t)" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 "$t"
        if [ -x "$t.tsan" ]; then
            run_one "$(basename $t).tsan" env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$t.tsan"
        fi
    done
    # valgrind: the same tests built without sanitizers (build/vg/, by the Makefile)
    for src in $(grep -l '^// VALGRIND' tests/test_*.c 2>/dev/null); do
        n=$(basename "$src" .c)
        run_one "$n.valgrind" valgrind -q --error-exitcode=9 --leak-check=full \
            --errors-for-leak-kinds=definite --trace-children=no "$BUILD/vg/$n" --valgrind
    done
}

vm() {
    echo "== vm tier"
    out="$log/vm.log"
    sh tests/vm/run.sh 2>&1 | tee "$out" | grep -E '^(ok|FAIL|skip) |^vm:|^==' 
    count "$out" >/dev/null
    if ! grep -q '^vm: ' "$out"; then echo "FAIL vm tier: did not finish"; fail=$((fail + 1)); fi
}

# The end of every run (host, vm or both): new rpcool/shmheap files in /dev/shm fail it if this
# run made them (they carry its tag); others are shown, as they may come from another run at the
# same time.
shm_final() {
    shm_after=$(shm_all)
    new=$(printf '%s\n' "$shm_after" | grep -vxF -- "$(printf '%s\n' "$shm_before")" | sed '/^$/d')
    mine=$(printf '%s\n' "$new" | grep -F -- "-$RPCOOL_TEST_TAG")
    if [ -n "$mine" ]; then
        echo "    FAIL shm-leftovers: left in /dev/shm by this run: $(echo $mine)"; fail=$((fail + 1))
    elif [ -n "$new" ]; then
        echo "    note: new in /dev/shm, not named by this run (another run?): $(echo $new)"
    fi
}

case $tier in
    host) host ;;
    vm) vm ;;
    all) host; vm ;;
    *) echo "usage: $0 host|vm|all"; exit 2 ;;
esac
shm_final
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
