#!/bin/sh
# bench/bench_zz_plot.sh - runs near the end of `make bench`: draws the main comparisons of this
# run with gnuplot, as PNG files in bench/plots/ (PLOTS=DIR to write elsewhere):
#   noop.png      no-op round trip per peer: median (bar) and p99 (dot), log scale
#   noop_cdf.png  the distribution of the same round trips (percentiles 0-99.9)
#   trees.png     pointer-rich trees: rpcool against protobuf-c by node count (medians)
#   connect.png   connection set-up: rpcool_connect against a UNIX socket connect
# Reads only what the other bench_*.sh scripts wrote: build/bench/{peers,rpcool}.txt
# ("NAME MEDIAN_NS P99_NS OPS_PER_S") and the "#q NAME p0 ... p99.9" lines bench/hist.h prints
# into build/bench/{peers,rpcool}.log. Rows whose results are missing are left out.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
P=${PLOTS:-bench/plots}
D=$B/plot
mkdir -p "$P" "$D"
command -v gnuplot >/dev/null || { echo "FAIL plots: gnuplot not installed (gnuplot-nox)"; exit 1; }
cat "$B"/peers.txt "$B"/rpcool.txt 2>/dev/null >"$D/all.txt"
[ -s "$D/all.txt" ] || { echo "FAIL plots: no results in $B/peers.txt or $B/rpcool.txt"; exit 1; }
cat "$B"/peers.log "$B"/rpcool.log 2>/dev/null | grep '^#q ' >"$D/q.txt"

# bars LIST OUT: one row per "NAME|label" of LIST that has a result: index, label, median, p99 (us)
bars() {
    echo "$1" | awk -F'|' -v all="$D/all.txt" '
        BEGIN { while ((getline l < all) > 0) { split(l, f, " "); med[f[1]] = f[2]; p99[f[1]] = f[3] } }
        NF == 2 && ($1 in med) { printf "%d \"%s\" %.3f %.3f\n", n++, $2, med[$1] / 1000, p99[$1] / 1000 }
    ' >"$2"
}

bars "shm_pingpong/line|bare cache-line ping-pong
rpcool/noop/relaxed|rpcool relaxed
rpcool/noop/sandboxed|rpcool sandboxed
rpcool/noop/copy|rpcool copy
rpcool/noop/sealed-batch64|rpcool sealed, batched release
rpcool/noop/sealed|rpcool sealed per call
iox_poll/64|iceoryx busy-poll
uds_stream/64|UNIX socket (stream)
uds_seqpacket/64|UNIX socket (seqpacket)
tcp/64|TCP loopback
iox_waitset/64|iceoryx waitset
zmq_ipc/64|ZeroMQ ipc
grpc_uds/64|gRPC over a UNIX socket
rpcool/noop/relaxed@cpu0|rpcool relaxed, one CPU
uds_stream/64@cpu0|UNIX socket, one CPU" "$D/noop.dat"

bars "rpcool/connect/64MiB|rpcool_connect, 64 MiB heap
rpcool/connect/1024MiB|rpcool_connect, 1 GiB heap
uds/connect|UNIX socket connect
rpcool/connect/64MiB@cpu0|rpcool_connect 64 MiB, one CPU
uds/connect@cpu0|UNIX socket connect, one CPU" "$D/connect.dat"

# trees: nodes, then the median (us) of each series; "?" where missing
awk -v all="$D/all.txt" 'BEGIN {
    while ((getline l < all) > 0) { split(l, f, " "); med[f[1]] = f[2] }
    split("rpcool/tree/relaxed/ rpcool/tree/sealed/ rpcool/tree/sandboxed/ pbtree/", s, " ")
    split("1 16 256 4096", sz, " ")
    for (i = 1; i <= 4; i++) {
        line = sz[i]
        for (j = 1; j <= 4; j++) { k = s[j] sz[i]; line = line " " ((k in med) ? med[k] / 1000 : "?") }
        for (j = 1; j <= 4; j += 3) { k = s[j] sz[i] "@cpu0"; line = line " " ((k in med) ? med[k] / 1000 : "?") }
        print line
    }
}' >"$D/trees.dat"

# distribution: one block per result (label, then percentile and us per line)
echo "shm_pingpong/line|bare cache-line ping-pong
rpcool/noop/relaxed|rpcool relaxed
rpcool/noop/sandboxed|rpcool sandboxed
iox_poll/64|iceoryx busy-poll
uds_stream/64|UNIX socket (stream)
tcp/64|TCP loopback
zmq_ipc/64|ZeroMQ ipc
grpc_uds/64|gRPC over a UNIX socket" | awk -F'|' -v q="$D/q.txt" '
BEGIN {
    split("0 1 5 10 20 30 40 50 60 70 80 90 95 98 99 99.5 99.9", lv, " ")
    while ((getline l < q) > 0) { split(l, f, " "); v[f[2]] = l }
}
NF == 2 && ($1 in v) {
    split(v[$1], f, " ")
    printf "\"%s\"\n", $2
    for (i = 1; i <= 17; i++) printf "%s %.3f\n", lv[i], f[i + 2] / 1000
    printf "\n\n"
}' >"$D/noop_cdf.dat"

# the run's date and commit (bench/run.sh), else now and HEAD
when=$(sed -n 's/^date \([0-9-]*\).*/\1/p' "$B/run.txt" 2>/dev/null)
commit=$(sed -n 's/^commit //p' "$B/run.txt" 2>/dev/null)
stamp="${when:-$(date -u '+%Y-%m-%d')} at ${commit:-$(git describe --always --dirty 2>/dev/null)}, $(nproc) CPUs"
term="pngcairo font 'sans,10' noenhanced"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || term="png noenhanced"

status=0
plot() { # plot OUT HEIGHT SCRIPT: the script is kept in build/bench/plot/OUT.gp
    printf 'set terminal %s size 1000,%s\nset output "%s"\n%s\n' "$term" "$2" "$P/$1" "$3" >"$D/$1.gp"
    if gnuplot "$D/$1.gp" 2>"$D/$1.err"; then
        echo "ok plot $P/$1"
    else
        echo "FAIL plot $P/$1: $(head -3 "$D/$1.err" | tr '\n' ' ')"; status=1
    fi
}

if [ -s "$D/noop.dat" ]; then
    plot noop.png 560 "
set title 'No-op round trip, median (bar) and p99 (dot), microseconds, log scale - $stamp'
set logscale x; set xrange [0.05:*]; set grid xtics mxtics
set yrange [-0.7:*] reverse; set ytics nomirror
set key top right
set style fill solid 0.6 noborder
plot '$D/noop.dat' using (0.05):1:(0.05):3:(\$1-0.35):(\$1+0.35):ytic(2) with boxxyerror title 'median', \
     '' using 4:1 with points pt 7 ps 1.2 lc rgb 'black' title 'p99', \
     '' using 3:1:(sprintf('%.2f', \$3)) with labels left offset 0.5,0.4 font ',8' notitle"
fi
if [ -s "$D/noop_cdf.dat" ]; then
    plot noop_cdf.png 560 "
set title 'No-op round trip: distribution (percentile against microseconds, log scale) - $stamp'
set logscale x; set grid; set key outside right
set xlabel 'round trip (us)'; set ylabel 'percentile'; set yrange [0:100]
plot for [i=0:*] '$D/noop_cdf.dat' index i using 2:1 with linespoints pt 7 ps 0.6 lw 2 title columnheader(1)"
fi
if [ -s "$D/trees.dat" ]; then
    plot trees.png 560 "
set title 'Pointer-rich trees: one round trip, median microseconds (log-log) - $stamp'
set logscale xy; set grid; set key top left
set xlabel 'tree nodes'; set ylabel 'round trip (us)'; set xtics (1, 16, 256, 4096)
set datafile missing '?'
plot '$D/trees.dat' using 1:2 with linespoints pt 7 lw 2 lc 1 title 'rpcool relaxed', \
     '' using 1:3 with linespoints pt 5 lw 2 lc 2 title 'rpcool sealed', \
     '' using 1:4 with linespoints pt 9 lw 2 lc 3 title 'rpcool sandboxed', \
     '' using 1:5 with linespoints pt 13 lw 2 lc 4 title 'protobuf-c over a UNIX socket', \
     '' using 1:6 with linespoints pt 7 lw 2 dt 2 lc 1 title 'rpcool relaxed, one CPU', \
     '' using 1:7 with linespoints pt 13 lw 2 dt 2 lc 4 title 'protobuf-c, one CPU'"
fi
if [ -s "$D/connect.dat" ]; then
    plot connect.png 320 "
set title 'Connection set-up, median (bar) and p99 (dot), microseconds, log scale - $stamp'
set logscale x; set xrange [1:*]; set grid xtics mxtics
set yrange [-0.7:*] reverse; set key bottom right
set style fill solid 0.6 noborder
plot '$D/connect.dat' using (1):1:(1):3:(\$1-0.35):(\$1+0.35):ytic(2) with boxxyerror title 'median', \
     '' using 4:1 with points pt 7 ps 1.2 lc rgb 'black' title 'p99', \
     '' using 3:1:(sprintf('%.1f', \$3)) with labels left offset 0.5,0.4 font ',8' notitle"
fi
exit $status
