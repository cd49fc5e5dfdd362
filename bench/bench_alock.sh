#!/bin/sh
# bench/bench_alock.sh - alock.h. Host tier: the local cohort against a pthread mutex and a ticket
# spin lock, same run (bench/alock_bench.c). VM tier: the lock table of the ALock paper on
# Soft-RoCE across two qemu guests (bench/bench_alock_vm.c in the guest roles alockbench-a
# and -b), against an RDMA CAS spin lock and an all-RDMA MCS lock, same run; ALOCK_BENCH=busy
# keeps the workers SCHED_OTHER. Lines: NAME MEDIAN_NS P99_NS OPS_PER_S.
cd "$(dirname "$0")/.." || exit 1
mkdir -p build/bench
cc -O2 -g -pthread -I. -Ibench bench/alock_bench.c -o build/bench/alock_bench || exit 1
rounds=7; ops=2000000
[ -n "${BENCH_QUICK:-}" ] && rounds=3 && ops=200000
echo "# command: build/bench/alock_bench $rounds $ops   (cc -O2; $(nproc) cores)"
build/bench/alock_bench $rounds $ops | tee build/bench/alock_host.log | grep -v '^#   ' >build/bench/alock_host.txt
grep -v '^#   ' build/bench/alock_host.log
if [ -z "${BENCH_NO_VM:-}" ] && [ -f tests/vm/run.sh ]; then
    echo "# command: VM_GUEST_TIMEOUT=600 ALOCK_BENCH=${ALOCK_BENCH:-} sh tests/vm/run.sh alockbench"
    VM_GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-600} sh tests/vm/run.sh alockbench | tee build/bench/alock_vm.log |
        grep -E '^(alock|spin|mcs|probe/|#|vm:|FAIL)' | grep -v '^#   '
fi
