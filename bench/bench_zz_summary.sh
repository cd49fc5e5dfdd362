#!/bin/sh
# bench/bench_zz_summary.sh - runs last in `make bench`: puts the figures of this run side by
# side, with the ratios the README reports, in build/bench/summary.md. Reads only what the other
# bench_*.sh scripts wrote to build/bench/*.txt ("NAME MEDIAN_NS P99_NS OPS_PER_S").
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
cat "$B"/peers.txt "$B"/rpcool.txt "$B"/perftest.txt "$B"/seal_cost.txt 2>/dev/null | awk -v out="$B/summary.md" '
function has(n) { return (n in med) }
function us(ns) { return sprintf("%.2f", ns / 1000) }
function section(title, head, ncol,   i, sep) { # a heading and the head of its table
    sep = "|"; for (i = 0; i < ncol; i++) sep = sep "---|"
    if (started++) print "" >> out
    print title >> out; print "" >> out; print head >> out; print sep >> out
}
function row(label, a, b,   r) {   # rpcool result a against peer b: medians, p99s, b/a
    if (!has(a) || !has(b)) { printf "| %s | missing | | | |\n", label >> out; return }
    printf "| %s | %s / %s | %s / %s | %.1fx |\n", label, us(med[a]), us(p99[a]), us(med[b]), us(p99[b]), med[b] / med[a] >> out
}
{ med[$1] = $2; p99[$1] = $3; ops[$1] = $4 }
END {
    printf "" > out
    section("### No-op round trip (median / p99 in us; last column: how many times faster rpcool is)", "| rpcool vs peer | rpcool | peer | ratio |", 4)
    a = "rpcool/noop/relaxed"; b = "shm_pingpong/line"
    if (has(a) && has(b))   # here the ratio is the other way round: how close rpcool gets to the limit
        printf "| relaxed vs bare cache-line ping-pong (the limit; ratio = rpcool / ping-pong) | %s / %s | %s / %s | %.2fx |\n", us(med[a]), us(p99[a]), us(med[b]), us(p99[b]), med[a] / med[b] >> out
    row("relaxed vs UNIX socket (stream)", "rpcool/noop/relaxed", "uds_stream/64")
    row("relaxed vs UNIX socket, both on one CPU", "rpcool/noop/relaxed@cpu0", "uds_stream/64@cpu0")
    row("relaxed vs TCP loopback", "rpcool/noop/relaxed", "tcp/64")
    row("relaxed vs ZeroMQ ipc", "rpcool/noop/relaxed", "zmq_ipc/64")
    row("relaxed vs iceoryx (waitset)", "rpcool/noop/relaxed", "iox_waitset/64")
    row("relaxed vs iceoryx (busy-poll)", "rpcool/noop/relaxed", "iox_poll/64")
    row("relaxed vs gRPC over a UNIX socket", "rpcool/noop/relaxed", "grpc_uds/64")
    row("sandboxed vs UNIX socket", "rpcool/noop/sandboxed", "uds_stream/64")
    row("sealed (seal+release per call) vs UNIX socket", "rpcool/noop/sealed", "uds_stream/64")
    row("sealed, batched release, same argument", "rpcool/noop/sealed-batch64", "uds_stream/64")
    row("sealed, batched release, a new page per call", "rpcool/noop/sealed-batch64-pages", "uds_stream/64")
    section("### Pointer-rich trees: rpcool passes a pointer, protobuf-c serialises over a UNIX socket", "| nodes | rpcool relaxed | rpcool sealed | rpcool sandboxed | protobuf-c | relaxed ratio | relaxed ratio, one CPU |", 7)
    split("1 16 256 4096", sz, " ")
    for (i = 1; i <= 4; i++) {
        n = sz[i]; a = "rpcool/tree/relaxed/" n; b = "pbtree/" n
        if (!has(a) || !has(b)) continue
        c1 = has(a "@cpu0") && has(b "@cpu0") ? sprintf("%.1fx", med[b "@cpu0"] / med[a "@cpu0"]) : "-"
        printf "| %s | %s | %s | %s | %s | %.1fx | %s |\n", n, us(med[a]), us(med["rpcool/tree/sealed/" n]), us(med["rpcool/tree/sandboxed/" n]), us(med[b]), med[b] / med[a], c1 >> out
    }
    section("### Payloads: relaxed vs copy vs sealed (median us)", "| bytes | relaxed | copy | sealed |", 4)
    split("64 4096 65536 1048576", ps, " ")
    for (i = 1; i <= 4; i++) {
        n = ps[i]
        if (has("rpcool/payload/relaxed/" n))
            printf "| %s | %s | %s | %s |\n", n, us(med["rpcool/payload/relaxed/" n]), us(med["rpcool/payload/copy/" n]), us(med["rpcool/payload/sealed/" n]) >> out
    }
    section("### Key-value store: rpcool (pointers) vs the same store over a UNIX socket with a serialiser", "| op / value bytes | rpcool | socket | ratio | ratio, one CPU |", 5)
    split("get put", kops, " ")
    for (j = 1; j <= 2; j++) for (i = 1; i <= 3; i++) {
        n = (i == 1 ? 64 : i == 2 ? 256 : 1024); a = "rpcool/kv/" kops[j] "/" n; b = "kv_" kops[j] "/" n
        if (!has(a) || !has(b)) continue
        c1 = has(a "@cpu0") && has(b "@cpu0") ? sprintf("%.1fx", med[b "@cpu0"] / med[a "@cpu0"]) : "-"
        printf "| %s %s | %s | %s | %.1fx | %s |\n", kops[j], n, us(med[a]), us(med[b]), med[b] / med[a], c1 >> out
    }
    if (has("uds/connect")) {
        section("### Connection set-up: rpcool_connect (makes the heap; the server accepts and maps it) vs a UNIX socket connect that waits for the accept (median / p99 us)", "| what | median | p99 | rpcool / socket |", 4)
        split("rpcool/connect/64MiB rpcool/connect/1024MiB uds/connect rpcool/connect/64MiB@cpu0 uds/connect@cpu0", cn, " ")
        for (i = 1; i <= 5; i++) {
            a = cn[i]; b = (a ~ /@cpu0$/) ? "uds/connect@cpu0" : "uds/connect"
            if (has(a)) printf "| %s | %s | %s | %.1fx |\n", a, us(med[a]), us(p99[a]), med[a] / med[b] >> out
        }
    }
    section("### RDMA reference: perftest on Soft-RoCE (rxe) in a qemu TCG guest (median / p99 us)", "| tool | median | p99 |", 3)
    split("send_lat/2 write_lat/2 read_lat/2 atomic_lat/8", pt, " ")
    for (i = 1; i <= 4; i++) { a = "perftest_" pt[i]; if (has(a)) printf "| ib_%s | %s | %s |\n", pt[i], us(med[a]), us(p99[a]) >> out }
    if (has("seal/mprotect_pair")) {
        section("### What one seal costs on this machine: seal + unseal of a written page (median / p99 us)", "| how | this process alone | another thread busy on the other CPU |", 3)
        split("shmheap_seal+unseal mprotect_pair", sc, " ")
        for (i = 1; i <= 2; i++) { a = "seal/" sc[i]; b = a ",other_cpu_busy"
            printf "| %s | %s / %s | %s |\n", sc[i], us(med[a]), us(p99[a]), has(b) ? us(med[b]) " / " us(p99[b]) : "-" >> out }
    }
}'
echo "# summary of this run: $B/summary.md"
cat "$B/summary.md"
