#!/bin/sh
# bench/run.sh - `make bench`: runs every bench/bench_*.sh in name order, even after one
# fails; exits non-zero if any failed. Writes build/bench/run.txt first: date, commit, machine.
cd "$(dirname "$0")/.." || exit 1
# what this run was: build/bench/run.txt (read by bench_zz_plot.sh and for bench/RESULTS.md)
B=${BUILD:-build}/bench
mkdir -p "$B"
{
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
    echo "kernel $(uname -r)"
    echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$B/run.txt"
status=0
for script in bench/bench_*.sh; do
    [ -f "$script" ] || continue
    echo "=== $script"
    sh "$script" || { echo "=== $script FAILED"; status=1; }
done
exit $status
