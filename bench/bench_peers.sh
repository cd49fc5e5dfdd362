#!/bin/sh
# bench/bench_peers.sh - builds rpcool's comparison peers into build/bench/ and runs them:
# cache-line ping-pong over shared memory (the physical limit), UNIX sockets, TCP loopback,
# ZeroMQ ipc, iceoryx, gRPC over a UNIX socket, protobuf-c trees, a socket key-value store;
# then hyperfine times whole commands. Every tool prints "NAME MEDIAN_NS P99_NS OPS_PER_S"
# lines (bench/hist.h); they are collected in build/bench/peers.txt, the full output in
# build/bench/peers.log, hyperfine's table in build/bench/hyperfine.md.
# Each peer runs twice: server and client on different CPUs (NAME), and both on CPU 0
# (NAME@cpu0), because on a VM a cross-CPU wakeup of a sleeping peer costs tens of us.
# BENCH_QUICK=1 divides every iteration count by 10 (a smoke test).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}/bench
G=$B/gen
CC=${CC:-cc}
CXX=${CXX:-c++}
WARN="-Wall -Wextra -Werror"
mkdir -p "$G"
RES=$B/peers.txt
LOG=$B/peers.log
: >"$RES"
: >"$LOG"
fails=0
q=1
[ "${BENCH_QUICK:-0}" = 1 ] && q=10

say() { echo "$*" | tee -a "$LOG"; }

# n COUNT: an iteration count, divided by 10 under BENCH_QUICK=1
n() { echo $(($1 / q)); }

build() { # build NAME COMMAND...: on failure the peer is skipped and the run fails
    name=$1
    shift
    if "$@" >"$B/build.$name.log" 2>&1; then
        return 0
    fi
    cat "$B/build.$name.log" | tee -a "$LOG"
    say "FAIL $name: build failed: $*"
    fails=$((fails + 1))
    return 1
}

run() { # run COMMAND...: prints its output, keeps its result lines
    say "-- $*"
    if "$@" >"$B/run.out" 2>&1; then
        cat "$B/run.out" | tee -a "$LOG"
        awk '!/^#/ && NF == 4' "$B/run.out" >>"$RES"
    else
        cat "$B/run.out" | tee -a "$LOG"
        say "FAIL: $*"
        fails=$((fails + 1))
    fi
}

# Needed here but not (yet) in tests/deps.sh's bench list: g++ for gRPC, and Debian's
# iceoryx package for the RouDi daemon (the -dev packages do not pull it in).
extra=""
command -v "$CXX" >/dev/null || extra="$extra g++"
command -v iox-roudi >/dev/null || extra="$extra iceoryx"
[ -n "$extra" ] && DEPS_EXTRA="$extra" sh tests/deps.sh bench

say "# rpcool peers, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r)"
say "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- build ----
ok_shm=0 ok_sock=0 ok_zmq=0 ok_iox=0 ok_grpc=0 ok_pbtree=0 ok_kv=0
build shm $CC -O2 $WARN -pthread bench/peer_shm.c -o $B/peer_shm && ok_shm=1
build sock $CC -O2 $WARN -pthread bench/peer_sock.c -o $B/peer_sock && ok_sock=1
build kv $CC -O2 $WARN -pthread bench/peer_kv.c -o $B/peer_kv && ok_kv=1
build zmq $CC -O2 $WARN -pthread bench/peer_zmq.c -o $B/peer_zmq -lzmq && ok_zmq=1
IOX_INC=$(ls -d /usr/include/iceoryx/v* 2>/dev/null | tail -n 1)
if [ -n "$IOX_INC" ]; then
    build iox $CC -O2 $WARN -pthread -I"$IOX_INC" bench/peer_iox.c -o $B/peer_iox \
        -liceoryx_binding_c && ok_iox=1
else
    say "FAIL iox: no iceoryx headers (libiceoryx-binding-c-dev)"
    fails=$((fails + 1))
fi
build pbtree-gen protoc-c --proto_path=bench --c_out="$G" bench/tree.proto &&
    build pbtree $CC -O2 $WARN -pthread -I"$G" bench/peer_pbtree.c "$G/tree.pb-c.c" \
        -o $B/peer_pbtree -lprotobuf-c && ok_pbtree=1
# generated gRPC code is compiled without -Werror: its warnings are not ours
GRPC_FLAGS=$(pkg-config --cflags grpc++ protobuf 2>/dev/null)
GRPC_LIBS=$(pkg-config --libs grpc++ protobuf 2>/dev/null)
build grpc-gen protoc --proto_path=bench --cpp_out="$G" --grpc_out="$G" \
        --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" bench/echo.proto &&
    build grpc-pb $CXX -std=c++17 -O2 $GRPC_FLAGS -c "$G/echo.pb.cc" -o "$G/echo.pb.o" &&
    build grpc-svc $CXX -std=c++17 -O2 $GRPC_FLAGS -I"$G" -c "$G/echo.grpc.pb.cc" \
        -o "$G/echo.grpc.pb.o" &&
    build grpc $CXX -std=c++17 -O2 $WARN -pthread $GRPC_FLAGS -I"$G" bench/peer_grpc.cc \
        "$G/echo.pb.o" "$G/echo.grpc.pb.o" -o $B/peer_grpc $GRPC_LIBS && ok_grpc=1

# ---- run ----
if [ $ok_shm = 1 ]; then
    run $B/peer_shm -f -n $(n 1000000) -w $(n 100000)
fi
if [ $ok_sock = 1 ]; then
    for t in stream seqpacket tcp; do
        run $B/peer_sock -f -t $t -n $(n 20000) -w $(n 2000)
        run $B/peer_sock -f -1 -t $t -n $(n 100000) -w $(n 10000)
    done
    run $B/peer_sock -f -t stream -s 4096 -n $(n 20000) -w $(n 2000)
    run $B/peer_sock -f -1 -t stream -s 4096 -n $(n 100000) -w $(n 10000)
fi
if [ $ok_zmq = 1 ]; then
    run $B/peer_zmq -f -n $(n 20000) -w $(n 2000)
    run $B/peer_zmq -f -1 -n $(n 50000) -w $(n 5000)
fi

# iceoryx needs its RouDi daemon; we start one unless one is running, and stop ours after
roudi_running() {
    for f in /proc/[0-9]*/comm; do
        [ "$(cat "$f" 2>/dev/null)" = iox-roudi ] && return 0
    done
    return 1
}
roudi_pid=""
stop_roudi() {
    if [ -n "$roudi_pid" ]; then
        kill "$roudi_pid" 2>/dev/null
        wait "$roudi_pid" 2>/dev/null
        roudi_pid=""
    fi
}
trap stop_roudi EXIT INT TERM
if [ $ok_iox = 1 ]; then
    if ! command -v iox-roudi >/dev/null; then
        say "SKIP iceoryx: iox-roudi not installed (Debian package iceoryx)"
        ok_iox=0
    elif roudi_running; then
        say "# iceoryx: using the iox-roudi already running"
    else
        iox-roudi -l warning >"$B/roudi.log" 2>&1 &
        roudi_pid=$!
        i=0
        until grep -q "RouDi is ready" "$B/roudi.log" 2>/dev/null; do
            i=$((i + 1))
            if [ $i -gt 100 ] || ! kill -0 "$roudi_pid" 2>/dev/null; then
                say "SKIP iceoryx: iox-roudi did not become ready in 10 s:"
                cat "$B/roudi.log" | tee -a "$LOG"
                stop_roudi
                ok_iox=0
                break
            fi
            sleep 0.1
        done
    fi
fi
if [ $ok_iox = 1 ]; then
    run $B/peer_iox -f -n $(n 20000) -w $(n 2000)
    run $B/peer_iox -f -1 -n $(n 50000) -w $(n 5000)
    run $B/peer_iox -f -b -n $(n 100000) -w $(n 10000)
    stop_roudi
fi

if [ $ok_grpc = 1 ]; then
    run $B/peer_grpc -f -n $(n 20000) -w $(n 2000)
    run $B/peer_grpc -f -1 -n $(n 50000) -w $(n 5000)
fi
if [ $ok_pbtree = 1 ]; then
    run $B/peer_pbtree -f -n $(n 20000) -w $(n 2000)
    run $B/peer_pbtree -f -1 -n $(n 20000) -w $(n 2000)
fi
if [ $ok_kv = 1 ]; then
    run $B/peer_kv -f -n $(n 10000) -w $(n 1000)
    run $B/peer_kv -f -1 -n $(n 50000) -w $(n 5000)
fi

# ---- whole commands: the same number of round trips each ----
if command -v hyperfine >/dev/null && [ $ok_shm = 1 ] && [ $ok_sock = 1 ]; then
    h=$(n 10000)
    say "-- hyperfine: whole commands, $h round trips each (process start and connect included)"
    if hyperfine -N --runs 5 --warmup 1 --export-markdown "$B/hyperfine.md" \
        -n "shm_pingpong" "$B/peer_shm -f -n $h -w 0" \
        -n "uds_stream" "$B/peer_sock -f -t stream -n $h -w 0" \
        -n "uds_seqpacket" "$B/peer_sock -f -t seqpacket -n $h -w 0" \
        -n "tcp" "$B/peer_sock -f -t tcp -n $h -w 0" \
        -n "uds_stream@cpu0" "$B/peer_sock -f -1 -t stream -n $h -w 0" \
        -n "tcp@cpu0" "$B/peer_sock -f -1 -t tcp -n $h -w 0" >"$B/hyperfine.out" 2>&1; then
        cat "$B/hyperfine.out" "$B/hyperfine.md" | tee -a "$LOG"
    else
        cat "$B/hyperfine.out" | tee -a "$LOG"
        say "FAIL: hyperfine"
        fails=$((fails + 1))
    fi
else
    say "SKIP hyperfine: not installed or peers not built"
fi

# ---- summary ----
say ""
say "# loadavg at the end $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews results)"
say "# peers: name, median and p99 round trip (ns), round trips per second (one client)"
awk '{ printf "%-24s %10s %10s %10s\n", $1, $2, $3, $4 }' "$RES" | tee -a "$LOG"
if [ $fails -gt 0 ]; then
    say "bench_peers: $fails failed"
    exit 1
fi
say "bench_peers: all peers ran"
