#!/bin/sh
# tests/vm/run.sh [all|single|pair|cxl|krconn|nppin|MODE] - the VM tier: boots Debian's own kernel in
# qemu (TCG) with Soft-RoCE, ivshmem and an emulated CXL type-3 device, and runs tests/vm/*.c in
# the guests. Prints "ok/FAIL/skip NAME" lines and ends with "vm: N passed, N failed, N skipped".
#   single    one guest: impl/verbs.h on rxe0 (RC, UD, WRITE, READ, atomics, error paths) and
#             alock.h's remote cohort (tests/vm/test_alock_rdma.c)
#   pair      two guests, NICs joined by a qemu socket netdev on 127.0.0.1, one ivshmem file:
#             RC between the guests, and a shmheap shared through ivshmem. Every pair mode's
#             qemus talk UDP (VM_PAIR_NET=tcp: a TCP stream, which stalls back-to-back frames)
#             and share one ivshmem device of VM_POD_SIZE (default 256M: a pod's connection
#             heaps fit; a sparse file in /dev/shm, only what the guests touch takes memory)
#   pods      two guests as two CXL pods: rpcool over RDMA between them (tests/vm/test_rpcool_rdma),
#             examples/rpcool_kv_pods.c across them (tests/vm/test_kv_pods.c) and a protobuf-c
#             service served in pod A, called from pod B (tests/vm/test_pbc_rdma.c); servers
#             of pod A that close, seen by pod B's clients (VM_ONLY=server_closes: only those)
#   rpcool-rdma  one guest: rpcool's RDMA transport (tests/vm/test_rpcool_rdma.c; VM_ONLY=NAME runs
#             one of its tests, NAME,NAME,...@ROUNDS those, ROUNDS times over) and its exports
#             (tests/vm/test_rpcool_export.c;
#             VM_ONLY=test_rpcool_export[:NAME] runs only those, or one of them)
#   alock-rdma   one guest: only test_alock_rdma (it also runs in single); VM_ONLY=NAME runs
#             only its tests whose name contains NAME
#   cxl       one guest with a CXL type-3 device (libcxl region -> /dev/daxX.Y; the region as
#             a pod's device, tests/vm/test_rpcool_pod.c one) and a file-backed NVDIMM made
#             devdax (shmheap on /dev/daxX.Y with data, then a pod on it); hugetlbfs; pku
#   krconn    one guest: krconn.h on rxe0 (tests/vm/test_krconn.c: processes of one guest)
#             and alock.h / nppin.h over krconn connections (tests/vm/test_krconn_compose.c)
#             (VM_ONLY=NAME[,NAME]: only test_krconn's tests whose names contain one of them)
#   krconn-bench  one guest timing krconn's connects against rdma_cm (cmtime) and plain verbs
#   perftest  one guest running perftest's ib_*_lat on rxe0 (used by bench/bench_perftest.sh)
#   alockbench  two guests running alock's lock-table benchmark (used by bench/bench_alock.sh;
#             BENCH_QUICK=1 makes it short; ALOCK_BENCH=WORDS passes options: quick, busy)
#   nppin     one 2 GiB guest with zram swap: nppin.h (tests/vm/test_nppin.c)
#   nppin-bench  the same guest running bench/nppin_bench.c (used by bench/bench_nppin.sh)
#   rpcbench  the pair of guests (roles rpcbench-a, rpcbench-b) running rpcool between pods
#             against perftest, protobuf-c and gRPC over TCP (used by bench/bench_rdma_pair.sh);
#             only this mode packs build/vm/bench/ (make vm-bench-bins, vm-bench-grpc);
#             VM_PAIR_MTU=N sets the guests' netdev MTU (rxe's path MTU follows: 9000 -> 4096);
#             RPCBENCH_STEPS=a,b,... runs only those steps (perftest, pbtree, grpc, rpcool, pbc,
#             ab, kvpods; default all; floor and floor-after, the cache-line ping-pong through
#             the ivshmem device of bench/pod_pingpong.c, and pod and pod-poll (both sides
#             polling 20 ms), rpcool_bench over the pod transport through that device, only
#             when named: bench/bench_pod_vm.sh)
# The kernel package is downloaded once and kept in build/vm/kernel. Needs root for installing
# missing packages (tests/deps.sh vm); otherwise only qemu and the packages.
set -u
mode=${1:-all}
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
VM=$BUILD/vm
OUT=$VM/out
GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-180}
POD_SIZE=${VM_POD_SIZE:-256M} # the pair modes' ivshmem device: room for a pod's connection heaps
pass=0; fail=0; skip=0
t_start=$(date +%s)

finish() {
    echo "vm: $pass passed, $fail failed, $skip skipped ($(($(date +%s) - t_start)) s)"
    [ $fail -eq 0 ]
    exit $?
}
failed() { echo "FAIL $1"; fail=$((fail + 1)); }

# ---- packages, kernel, test programs

if ! DEPS_EXTRA="gcc g++ make" sh tests/deps.sh vm; then failed "vm-setup: packages missing (tests/deps.sh vm)"; finish; fi
PATH=$PATH:/sbin:/usr/sbin # depmod, modprobe

# The versioned kernel package of the first meta package named that the package lists know.
# The guests boot what Debian 12's linux-image-6.12-amd64 depends on (e.g.
# linux-image-6.12.117+deb12-amd64), else linux-image-amd64's (6.1); VM_KERNEL_META names other
# meta packages to try. Not 6.1 first: its Soft-RoCE corrupts its QP reference counts under many
# connect/disconnect cycles ("refcount_t: underflow" in rxe_destroy_qp in dmesg), after which the
# device fails unrelated work requests (a UD send with "local QP operation error"). The cxl guest
# boots linux-image-amd64's (VM_CXL_KERNEL_META): 6.12 enumerates no memdev on this qemu's
# emulated type-3 device, 6.1 does.
KERNEL_METAS=${VM_KERNEL_META:-linux-image-6.12-amd64 linux-image-amd64}
CXL_KERNEL_METAS=${VM_CXL_KERNEL_META:-linux-image-amd64}
kernel_pkg() {
    for meta in "$@"; do
        p=$(apt-cache depends "$meta" 2>/dev/null |
            sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n 1)
        [ -n "$p" ] && { echo "$p"; return; }
    done
}

prepare_kernel() { # prepare_kernel META...: sets KVER, KDIR, VMLINUZ
    pkg=$(kernel_pkg "$@")
    if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null 2>&1; pkg=$(kernel_pkg "$@"); fi
    if [ -z "$pkg" ]; then # no package lists: use what an earlier run kept
        pkg=$(ls -d "$VM"/kernel/linux-image-*/ok 2>/dev/null | sort -V | tail -n 1 | xargs -r dirname |
            xargs -r basename)
        [ -n "$pkg" ] || return 1
    fi
    KVER=${pkg#linux-image-}
    KDIR=$VM/kernel/$pkg
    if [ ! -f "$KDIR/ok" ]; then
        echo "== downloading $pkg (once; kept in $KDIR)"
        rm -rf "$KDIR" "$VM/kernel/dl"
        mkdir -p "$VM/kernel/dl"
        sandbox="" # as root, apt's _apt user could not write into our folder
        [ "$(id -u)" = 0 ] && sandbox="-o APT::Sandbox::User=root"
        # shellcheck disable=SC2086
        if ! (cd "$VM/kernel/dl" && apt-get download $sandbox "$pkg" >/dev/null); then
            # stale package lists name a version the archive no longer has: refresh once
            [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 || return 1
            pkg=$(kernel_pkg "$@"); KVER=${pkg#linux-image-}; KDIR=$VM/kernel/$pkg
            [ -n "$pkg" ] && (cd "$VM/kernel/dl" && apt-get download $sandbox "$pkg" >/dev/null) || return 1
        fi
        dpkg -x "$VM"/kernel/dl/"$pkg"_*.deb "$KDIR" || return 1
        depmod -b "$KDIR" "$KVER" || return 1
        rm -rf "$VM/kernel/dl"
        touch "$KDIR/ok"
    fi
    VMLINUZ=$KDIR/boot/vmlinuz-$KVER
    [ -f "$VMLINUZ" ]
}

if ! prepare_kernel $KERNEL_METAS; then failed "vm-setup: could not get the kernel package"; finish; fi
mkdir -p "$OUT"
if ! $MAKE -s vm-bins >"$OUT/build.log" 2>&1; then
    cat "$OUT/build.log"; failed "vm-build: test programs did not build"; finish
fi
if [ "$mode" = rpcbench ]; then
    if ! $MAKE -s vm-bench-bins >"$OUT/build-bench.log" 2>&1; then
        cat "$OUT/build-bench.log"; failed "vm-build: bench tools did not build"; finish
    fi
    $MAKE -s vm-bench-grpc >"$OUT/build-grpc.log" 2>&1 ||
        echo "# gRPC peer did not build (the guests leave it out): $OUT/build-grpc.log"
fi

# ---- initramfs: busybox, the modules we need, test programs, their libraries, rdma-core

MODULES="virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs rdma_cm rdma_ucm cxl_acpi cxl_pci cxl_mem cxl_pmem libnvdimm
nd_pmem dax_pmem device_dax nfit zram"
TOOLS="/usr/bin/rdma /usr/bin/cxl /usr/bin/ndctl /usr/bin/ib_send_lat /usr/bin/ib_write_lat
/usr/bin/ib_read_lat /usr/bin/ib_atomic_lat /usr/bin/cmtime"

copy_lib() { # copy_lib PATH: into the merged-/usr stage, keeping the name the loader asks for
    case $1 in
        /usr/*) dst=$STAGE$1 ;;
        *) dst=$STAGE/usr$1 ;;
    esac
    [ -e "$dst" ] && return
    mkdir -p "$(dirname "$dst")"
    cp -L "$1" "$dst"
}

copy_with_libs() { # copy_with_libs FILE DEST: a program or library and everything ldd names
    [ -n "$2" ] && { mkdir -p "$(dirname "$STAGE$2")"; cp -L "$1" "$STAGE$2"; }
    ldd "$1" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) .*/\1/p' |
        while read -r lib; do copy_lib "$lib"; done
}

build_initramfs() { # build_initramfs FILE: for the kernel prepare_kernel chose
    STAGE=$VM/stage
    rm -rf "$STAGE"
    mkdir -p "$STAGE/bin" "$STAGE/usr/lib" "$STAGE/usr/lib64" "$STAGE/t" "$STAGE/etc" \
        "$STAGE/proc" "$STAGE/sys" "$STAGE/dev" "$STAGE/tmp" "$STAGE/run" || return 1
    ln -s usr/lib "$STAGE/lib"
    ln -s usr/lib64 "$STAGE/lib64"
    ln -s bin "$STAGE/sbin"
    ln -s ../bin "$STAGE/usr/bin"
    ln -s ../bin "$STAGE/usr/sbin"
    cp "$(command -v busybox)" "$STAGE/bin/busybox" || return 1
    for t in $TOOLS; do copy_with_libs "$t" "/bin/$(basename "$t")"; done
    for a in $(busybox --list); do [ -e "$STAGE/bin/$a" ] || ln -s busybox "$STAGE/bin/$a"; done
    for t in "$BUILD"/vm/bin/*; do copy_with_libs "$t" "/t/$(basename "$t")"; done
    if [ "$mode" = rpcbench ]; then
        for t in "$BUILD"/vm/bench/*; do
            [ -f "$t" ] && [ -x "$t" ] && copy_with_libs "$t" "/t/$(basename "$t")"
        done
    fi
    # libibverbs finds its providers through /etc/libibverbs.d and dlopen()s them
    cp -r /etc/libibverbs.d "$STAGE/etc/"
    for p in /usr/lib/x86_64-linux-gnu/libibverbs/*.so; do copy_lib "$p"; copy_with_libs "$p" ""; done
    # modules: the ones named and what modules.dep says they need, then a fresh index
    md=$KDIR/lib/modules/$KVER
    mkdir -p "$STAGE/usr/lib/modules/$KVER"
    for m in $MODULES; do
        modprobe -C /dev/null -d "$KDIR" -S "$KVER" --show-depends "$m" 2>/dev/null | sed -n 's/^insmod //p'
    done | sort -u | while read -r ko rest; do
        rel=${ko##*/lib/modules/$KVER/}
        mkdir -p "$(dirname "$STAGE/usr/lib/modules/$KVER/$rel")"
        cp "$md/$rel" "$STAGE/usr/lib/modules/$KVER/$rel"
    done
    cp "$md"/modules.builtin* "$md"/modules.order "$STAGE/usr/lib/modules/$KVER/"
    depmod -b "$STAGE" "$KVER" || return 1
    cp tests/vm/init.sh "$STAGE/init"
    chmod +x "$STAGE/init"
    (cd "$STAGE" && find . | cpio -o -H newc --quiet | gzip -1) >"$1"
}

if ! build_initramfs "$VM/initrd.gz"; then failed "vm-setup: initramfs"; finish; fi
BOOT_KERNEL=$VMLINUZ BOOT_INITRD=$VM/initrd.gz CXL_KERNEL=$VMLINUZ CXL_INITRD=$VM/initrd.gz
echo "== vm: kernel $KVER, initramfs $(du -k "$VM/initrd.gz" | cut -f1) KiB, $(($(date +%s) - t_start)) s to prepare"
if [ "$mode" = all ] || [ "$mode" = cxl ]; then
    main_kver=$KVER
    if ! prepare_kernel $CXL_KERNEL_METAS; then
        failed "vm-setup: could not get the cxl guest's kernel package"; finish
    fi
    if [ "$KVER" != "$main_kver" ]; then
        if ! build_initramfs "$VM/initrd-cxl.gz"; then failed "vm-setup: cxl initramfs"; finish; fi
        CXL_KERNEL=$VMLINUZ CXL_INITRD=$VM/initrd-cxl.gz
        echo "== vm: the cxl guest's kernel $KVER"
    fi
fi

# ---- booting

# boot NAME ROLE APPEND-EXTRA QEMU-ARGS...: one guest (VM_SMP vCPUs, default 2) under a
# deadline; its results land in $OUT/NAME.results. tsc=nowatchdog: a TCG guest that stalls for
# seconds under load had its TSC marked unstable by the clocksource watchdog, and the kernel's
# live patch of the sched_clock static key that follows panicked 6.12 under TCG ("Oops: int3"
# in sched_clock_cpu); qemu's TCG TSC follows the host clock on every vCPU, so it is kept. In the background, run it as
# `(BOOT_EXEC=exec boot ...) &` so that $! is timeout's pid, and killing it takes qemu down too.
boot() {
    name=$1; role=$2; extra=$3; shift 3
    rm -f "$OUT/$name.results" "$OUT/$name.console"
    ${BOOT_EXEC:-} timeout -k 5 "$GUEST_TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp "${VM_SMP:-2}" -nodefaults \
        -display none -no-reboot -monitor none \
        -kernel "$BOOT_KERNEL" -initrd "$BOOT_INITRD" \
        -append "console=ttyS0 quiet panic=-1 tsc=nowatchdog rcp.role=$role $extra" \
        -serial "file:$OUT/$name.console" -serial "file:$OUT/$name.results" \
        "$@" >"$OUT/$name.qemu" 2>&1
}

# collect NAME SECONDS: print and count one guest's result lines
collect() {
    name=$1; f=$OUT/$name.results
    [ -f "$f" ] || : >"$f"
    tr -d '\r' <"$f" >"$f.txt"
    sed -n 's/^\(ok\|FAIL\|skip\) /\1 '"$name"'\//p' "$f.txt" >"$f.lines"
    cat "$f.lines"
    pass=$((pass + $(grep -c '^ok ' "$f.lines")))
    fail=$((fail + $(grep -c '^FAIL ' "$f.lines")))
    skip=$((skip + $(grep -c '^skip ' "$f.lines")))
    grep '^# ' "$f.txt" | sed "s/^# /    [$name] /"
    if ! grep -q '^guest-done' "$f.txt"; then
        failed "$name: guest did not finish in $GUEST_TIMEOUT s (killed); console: $OUT/$name.console"
        tail -n 15 "$OUT/$name.console" "$OUT/$name.qemu" 2>/dev/null | sed 's/^/      /'
    fi
    echo "== $name: $2 s"
}

run_single() { # run_single [ROLE]: one guest (single: verbs and alock; rpcool-rdma: rpcool)
    t0=$(date +%s)
    gt=$GUEST_TIMEOUT
    GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-600} # its tests' own bounds (init.sh) are below this
    boot "${1:-single}" "${1:-single}" "rcp.ip=10.0.2.15${VM_ONLY:+ rcp.only=$VM_ONLY}" -m 1G \
        -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0f
    collect "${1:-single}" $(($(date +%s) - t0))
    GUEST_TIMEOUT=$gt
}

listening() { # listening PORT: is something listening on 127.0.0.1:PORT?
    grep -q "0100007F:$(printf %04X "$1") 00000000:0000 0A" /proc/net/tcp 2>/dev/null
}

run_pair() { # run_pair [NAME ROLE_A ROLE_B [stop]]: two guests (default: pair, roles a and b);
    # stop: guest a is stopped once b is done (a serves until then)
    pn=${1:-pair}; ra=${2:-a}; rb=${3:-b}
    t0=$(date +%s)
    gt=$GUEST_TIMEOUT
    GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-600} # two guests share the host's CPUs
    pod=/dev/shm/rcp-vm-pod-${RPCOOL_TEST_TAG:-}$$ # tests/run.sh: its tag, for its /dev/shm check
    rm -f "$pod"
    # the ivshmem device the guests share (a sparse file: only what they touch takes host memory)
    truncate -s "$POD_SIZE" "$pod"
    mem="-object memory-backend-file,id=pod,share=on,mem-path=$pod,size=$POD_SIZE -device ivshmem-plain,memdev=pod"
    pa=""
    if [ "${VM_PAIR_NET:-udp}" = udp ]; then
        # UDP between the qemus (the default), ports $port and $port + 1 (a stream socket
        # between them can hold back a frame behind another: Nagle on the host side)
        port=$((20000 + ($$ * 7) % 30000))
        # shellcheck disable=SC2086
        (BOOT_EXEC=exec boot "$pn-a" "$ra" "rcp.ip=10.0.3.1 rcp.peer=10.0.3.2 ${PAIR_APPEND:-}" -m 1G $mem \
            -netdev socket,id=n0,udp=127.0.0.1:$((port + 1)),localaddr=127.0.0.1:$port \
            -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:01) &
        pa=$!
        # shellcheck disable=SC2086
        boot "$pn-b" "$rb" "rcp.ip=10.0.3.2 rcp.peer=10.0.3.1 ${PAIR_APPEND:-}" -m 1G $mem \
            -netdev socket,id=n0,udp=127.0.0.1:$port,localaddr=127.0.0.1:$((port + 1)) \
            -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:02
        if [ "${4:-}" = stop ]; then
            kill $pa 2>/dev/null
            echo guest-done >>"$OUT/$pn-a.results" # stopped on purpose
        fi
        wait $pa
    else
    # Guest a listens on a free loopback port; b connects once a's qemu is listening.
    for try in 1 2 3 4 5; do
        port=$((20000 + ($$ * 7 + try * 997) % 30000))
        listening "$port" && continue
        # shellcheck disable=SC2086
        (BOOT_EXEC=exec boot "$pn-a" "$ra" "rcp.ip=10.0.3.1 rcp.peer=10.0.3.2 ${PAIR_APPEND:-}" -m 1G $mem \
            -netdev socket,id=n0,listen=127.0.0.1:$port -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:01) &
        pa=$!
        i=0
        while [ $i -lt 100 ] && kill -0 $pa 2>/dev/null && ! listening "$port"; do sleep 0.1; i=$((i + 1)); done
        listening "$port" && break
        kill $pa 2>/dev/null; wait $pa 2>/dev/null; pa=""
    done
    if [ -n "$pa" ]; then
        # shellcheck disable=SC2086
        boot "$pn-b" "$rb" "rcp.ip=10.0.3.2 rcp.peer=10.0.3.1 ${PAIR_APPEND:-}" -m 1G $mem \
            -netdev socket,id=n0,connect=127.0.0.1:$port -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:02
        if [ "${4:-}" = stop ]; then
            kill $pa 2>/dev/null
            echo guest-done >>"$OUT/$pn-a.results" # stopped on purpose
        fi
        wait $pa
    fi
    fi
    rm -f "$pod"
    t=$(($(date +%s) - t0))
    collect "$pn-a" $t
    collect "$pn-b" $t
    GUEST_TIMEOUT=$gt
}

run_cxl() {
    t0=$(date +%s)
    cm=$VM/cxl-mem.raw; cl=$VM/cxl-lsa.raw; nv=$VM/nvdimm.raw
    rm -f "$cm" "$cl" "$nv"
    truncate -s 256M "$cm"
    truncate -s 256M "$cl"
    truncate -s 268566528 "$nv" # 256 MiB for the region (16 MiB aligned) + 128 KiB of labels
    bk=$BOOT_KERNEL bi=$BOOT_INITRD
    BOOT_KERNEL=$CXL_KERNEL BOOT_INITRD=$CXL_INITRD
    boot cxl cxl "" -M q35,cxl=on,nvdimm=on -m 2G,maxmem=8G,slots=8 \
        -object memory-backend-file,id=nvm0,share=on,mem-path="$nv",size=268566528 \
        -device nvdimm,id=nvdimm0,memdev=nvm0,label-size=128K \
        -object memory-backend-file,id=cxl-mem1,share=on,mem-path="$cm",size=256M \
        -object memory-backend-file,id=cxl-lsa1,share=on,mem-path="$cl",size=256M \
        -device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 \
        -device cxl-rp,port=0,bus=cxl.1,id=rp13,chassis=0,slot=2 \
        -device cxl-type3,bus=rp13,memdev=cxl-mem1,lsa=cxl-lsa1,id=cxl-pmem0 \
        -M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G
    BOOT_KERNEL=$bk BOOT_INITRD=$bi
    rm -f "$cm" "$cl" "$nv"
    collect cxl $(($(date +%s) - t0))
}

run_krconn() {
    t0=$(date +%s)
    GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-300} boot krconn krconn "rcp.ip=10.0.2.15${VM_ONLY:+ rcp.only=$VM_ONLY}" -m 1G \
        -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0f
    collect krconn $(($(date +%s) - t0))
}

run_krconn_bench() {
    t0=$(date +%s)
    boot krconn-bench krconn-bench "rcp.ip=10.0.2.15" -m 1G \
        -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0f
    tr -d '\r' <"$OUT/krconn-bench.results" | grep -E '^(cmtime |\| |step |packets |udfloor |# udfloor|[a-z_]+/[0-9]+ )' || true
    collect krconn-bench $(($(date +%s) - t0))
}

run_perftest() {
    t0=$(date +%s)
    boot perftest perftest "rcp.ip=10.0.2.15" -m 1G \
        -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0f
    tr -d '\r' <"$OUT/perftest.results" | grep -E '^(perftest |\| )' || true
    collect perftest $(($(date +%s) - t0))
}

run_alockbench() { # bench/bench_alock.sh: the lock table of bench/bench_alock_vm.c, two guests
    PAIR_APPEND="rcp.bench=${ALOCK_BENCH:-${BENCH_QUICK:+quick}}" run_pair alockbench alockbench-a alockbench-b
    tr -d '\r' <"$OUT/alockbench-a.results" | grep -E '^(alock|spin|mcs|probe/|# p_local|# lock table|# probe|# harness)' || true
}

run_nppin() { # run_nppin ROLE: one 2 GiB guest (a 1 GiB region fully registered fits)
    t0=$(date +%s)
    boot "$1" "$1" "rcp.ip=10.0.2.15" -m 2G \
        -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:00:02:0f
    [ "$1" = nppin-bench ] && { tr -d '\r' <"$OUT/$1.results" | grep -E '^nppin_bench ' || true; }
    collect "$1" $(($(date +%s) - t0))
}

case $mode in
    all)
        echo "== vm: impl headers as C11 and C++17"
        $MAKE -s vm-compile-check >"$OUT/compile.log" 2>&1
        cat "$OUT/compile.log"
        pass=$((pass + $(grep -c '^ok ' "$OUT/compile.log")))
        fail=$((fail + $(grep -c '^FAIL ' "$OUT/compile.log")))
        skip=$((skip + $(grep -c '^skip ' "$OUT/compile.log")))
        run_single; run_single rpcool-rdma; run_pair; run_pair pods pods-a pods-b; run_cxl
        run_krconn; run_nppin nppin ;;
    single) run_single ;;
    rpcool-rdma) run_single rpcool-rdma ;;
    alock-rdma) run_single alock-rdma ;;
    pair) run_pair ;;
    pods) PAIR_APPEND="${VM_ONLY:+rcp.only=$VM_ONLY}" run_pair pods pods-a pods-b ;;
    rpcbench)
        GUEST_TIMEOUT=${VM_GUEST_TIMEOUT:-900}
        # UDP between the qemus: over the stream socket, a round trip that sends two frames
        # back to back in one direction stalled for tens of ms (pbtree/256: 50 ms, 3 ms on UDP)
        VM_PAIR_NET=${VM_PAIR_NET:-udp}
        PAIR_APPEND="${VM_PAIR_MTU:+rcp.mtu=$VM_PAIR_MTU}${RPCBENCH_STEPS:+ rcp.steps=$RPCBENCH_STEPS}" \
            run_pair rpcbench rpcbench-a rpcbench-b
        # the client guest's results: perftest tables ("| "), "NAME MEDIAN P99 OPS" lines, rows
        tr -d '\r' <"$OUT/rpcbench-b.results" |
            grep -E '^(perftest |\| |rpcool-rdma: |grpc: |FAIL |#q |# +(pbtree|grpc|rpcbench|pod_floor|pingpong))|^[a-z_]+/[^ ]+ [0-9]+ [0-9]+ [0-9]+$' || true
        # the server guest's: pod A's key-value gets (examples/rpcool_kv_pods.c), its failures
        tr -d '\r' <"$OUT/rpcbench-a.results" | grep -E '^(kvpods/|FAIL )' || true
        ;;
    cxl) run_cxl ;;
    krconn) run_krconn ;;
    krconn-bench) run_krconn_bench ;;
    perftest) run_perftest ;;
    alockbench) run_alockbench ;;
    nppin|nppin-bench) run_nppin "$mode" ;;
    *) echo "usage: $0 [all|single|alock-rdma|rpcool-rdma|pair|pods|cxl|krconn|krconn-bench|perftest|alockbench|nppin|nppin-bench|rpcbench]"; exit 2 ;;
esac
finish
