#!/bin/sh
# bench/bench_perftest.sh - perftest's latency tools on Soft-RoCE: ib_send_lat, ib_write_lat,
# ib_read_lat and ib_atomic_lat, server and client in one qemu TCG guest on rxe0 (booted by
# `tests/vm/run.sh perftest`, -d rxe0 -x <the GID index impl/verbs.h chooses>, 2000 iterations).
# These are the RDMA reference figures for krconn, alock and rpcool's RDMA transport. Numbers
# are of an emulated NIC under an emulated CPU: compare them with each other and with our own
# tools run the same way, never with hardware.
# Prints a human line per tool and "NAME MEDIAN_NS P99_NS OPS_PER_S" lines (bench/README.md),
# also kept in build/bench/perftest.txt; the guest's full output is in build/bench/perftest.log.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
mkdir -p "$B"
sh tests/deps.sh vm || exit 1
sh tests/vm/run.sh perftest >"$B/perftest.log" 2>&1
rc=$?
# perftest's table: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (usec);
# t_typical is its median. The guest prefixes the tools' output with "| ".
awk -v res="$B/perftest.txt" '
    /^perftest ib_/ { name = $2; next }
    /^\| +#bytes/ { grab = 1; next }
    grab && /^\| +[0-9]/ {
        grab = 0; n++
        printf "%-14s %4d B %5d iterations: median %7.2f us  p99 %7.2f us  (avg %.2f, min %.2f, p99.9 %.2f)\n", \
            name, $2, $3, $6, $9, $7, $4, $10
        short = name; sub(/^ib_/, "", short)
        printf "perftest_%s/%d %d %d %d\n", short, $2, $6 * 1000, $9 * 1000, 1e6 / $7 > res
    }
    END { if (n < 4) { print "bench_perftest: only " n + 0 " of 4 tools reported"; exit 1 } }
' "$B/perftest.log" || rc=1
[ -f "$B/perftest.txt" ] && cat "$B/perftest.txt"
grep -E '^(FAIL|vm:)' "$B/perftest.log"
exit $rc
