#!/bin/sh
# bench/run.sh - `make bench`: runs every bench/bench_*.sh in name order, even after one
# fails; exits non-zero if any failed.
cd "$(dirname "$0")/.." || exit 1
status=0
for script in bench/bench_*.sh; do
    [ -f "$script" ] || continue
    echo "=== $script"
    sh "$script" || { echo "=== $script FAILED"; status=1; }
done
exit $status
