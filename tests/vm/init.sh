#!/bin/sh
# tests/vm/init.sh - /init of the VM tier's guests (busybox sh). The kernel command line says
# what to do: rcp.role=single|alock-rdma|rpcool-rdma|a|b|pods-a|pods-b|cxl|krconn|krconn-bench|perftest|
# alockbench-a|alockbench-b|nppin|nppin-bench|rpcbench-a|rpcbench-b,
# rcp.ip=ADDR, rcp.peer=ADDR,
# rcp.bench=WORDS (alockbench's options, e.g. quick,busy). Results go to the second serial port
# (/dev/ttyS1) as "ok/FAIL/skip NAME" lines; the host reads that file. The last line is
# "guest-done"; without it the host counts the guest as failed.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /tmp /run
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
exec >/dev/ttyS1 2>&1

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p"; }
role=$(arg rcp.role)
ip=$(arg rcp.ip)
peer=$(arg rcp.peer)
echo "# guest $role: $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpus"

# run NAME SECONDS CMD...: a test program under a deadline; a hang or crash becomes a FAIL line
run() {
    n=$1; s=$2; shift 2
    timeout "$s" "$@"
    rc=$?
    [ $rc -eq 143 ] || [ $rc -eq 124 ] && echo "FAIL $n: timed out after $s s"
    [ $rc -ne 0 ] && [ $rc -ne 1 ] && [ $rc -ne 143 ] && [ $rc -ne 124 ] && echo "FAIL $n: exited with status $rc"
}

rdma_up() { # eth0 with our address, and rxe0 on it
    modprobe -a virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs || echo "# modprobe failed"
    i=0
    while [ $i -lt 100 ] && [ ! -e /sys/class/net/eth0 ]; do sleep 0.1; i=$((i + 1)); done
    ip link set lo up
    # rcp.mtu (VM_PAIR_MTU): the netdev's MTU; rxe's path MTU follows it (1500 gives 1024,
    # 4200 and up give 4096, RoCE's usual with jumbo frames)
    mtu=$(arg rcp.mtu)
    if [ -n "$mtu" ]; then ip link set eth0 mtu "$mtu" || echo "# ip link set eth0 mtu $mtu failed"; fi
    ip link set eth0 up
    ip addr add "$ip/24" dev eth0
    if rdma link add rxe0 type rxe netdev eth0; then
        # the IPv4-mapped GID appears once the address is on the netdev
        i=0
        while [ $i -lt 50 ] && ! grep -qs ':ffff:' /sys/class/infiniband/rxe0/ports/1/gids/*; do
            sleep 0.1; i=$((i + 1))
        done
        echo "ok rxe-setup"
    else
        echo "FAIL rxe-setup: rdma link add rxe0 type rxe netdev eth0 failed"
    fi
}

swap_up() { # 512 MiB of zram swap, for paging tests; says why when it cannot
    if modprobe zram && echo 512M >/sys/block/zram0/disksize && mkswap /dev/zram0 >/dev/null &&
        swapon /dev/zram0; then
        echo "# swap: zram0, 512 MiB"
    else
        echo "# swap: none (zram setup failed)"
    fi
}

ivshmem_dev() { # the BAR of the ivshmem-plain device (vendor 0x1af4, device 0x1110), enabled
    for d in /sys/bus/pci/devices/*; do
        if [ "$(cat $d/vendor)" = 0x1af4 ] && [ "$(cat $d/device)" = 0x1110 ]; then
            echo 1 >"$d/enable"
            echo "$d/resource2"
            return
        fi
    done
}

case $role in
single) # impl/verbs.h and alock.h's remote cohort (rpcool's transport has a guest of its own)
    rdma_up
    export VM_IP="$ip"
    run test_verbs 240 /t/test_verbs
    run test_alock_rdma 400 /t/test_alock_rdma
    ;;
alock-rdma) # tests/vm/run.sh alock-rdma: alock's remote cohort alone (its tests are in single)
    rdma_up
    ALOCKT_ONLY=$(arg rcp.only) run test_alock_rdma 400 /t/test_alock_rdma
    ;;
rpcool-rdma) # tests/vm/run.sh rpcool-rdma: rpcool's RDMA transport (rcp.only: one test by name;
    # test_rpcool_export[:NAME]: only the exports' tests, or one of them)
    rdma_up
    only=$(arg rcp.only)
    case $only in
    test_rpcool_export*)
        XT_ONLY=${only#test_rpcool_export}; XT_ONLY=${XT_ONLY#:} \
            run test_rpcool_export 300 /t/test_rpcool_export
        ;;
    *)
    [ -z "$only" ] && run test_pbc_rdma 120 /t/test_pbc_rdma
    RDMAT_ONLY=$only run test_rpcool_rdma 540 /t/test_rpcool_rdma
    # its interleaved stress case again under ASan+UBSan (result lines renamed *-asan)
    case ${only:-interleaved} in *interleaved*)
        RDMAT_ONLY=${only:-interleaved} ASAN_OPTIONS=detect_leaks=1 run test_rpcool_rdma-asan 300 \
            sh -c 'set -o pipefail; /t/test_rpcool_rdma.asan | sed "s/^\(ok\|FAIL\|skip\) \([^:]*\)/\1 \2-asan/"' ;;
    esac
    [ -z "$only" ] && run test_rpcool_export 300 /t/test_rpcool_export
    # for the log only (make bench measures): ib_write_lat's t_typical (half a round trip) here
    gid=$(/t/test_verbs --gid)
    timeout 60 ib_write_lat -d rxe0 -x "$gid" -n 2000 >/tmp/wl.server 2>&1 &
    sleep 1
    timeout 60 ib_write_lat -d rxe0 -x "$gid" -n 2000 "$ip" 2>&1 | awk '/^ *2 +2000/ {
        print "# ib_write_lat 2 B: t_typical " $5 " us (half a round trip: " 2 * $5 " us round trip)" }'
    wait
        ;;
    esac
    ;;
pods-a|pods-b) # tests/vm/run.sh pods: rpcool between two pods over RDMA (rcp.only=server_closes:
    # only the servers that close)
    rdma_up
    if [ "$(arg rcp.only)" != server_closes ]; then
        # the server in guest a (pod 0), the clients in guest b (pod id 1)
        if [ "$role" = pods-a ]; then run rpcool-rdma-server 300 /t/test_rpcool_rdma server
        else run rpcool-rdma-client 300 /t/test_rpcool_rdma client "$peer"; fi
        # examples/rpcool_kv_pods.c: guest a is pod A (server, local clients), b is pod B
        podid=0; [ "$role" = pods-b ] && podid=1
        run "kv-pods-${role#pods-}" 200 env SHMHEAP_POD_ID=$podid /t/test_kv_pods "${role#pods-}" "$peer"
        # a protobuf-c service (tests/pbc_svc.c) served in pod A, called from pod B
        if [ "$role" = pods-a ]; then run pbc-rdma-server 150 /t/test_pbc_rdma server
        else run pbc-rdma-client 150 /t/test_pbc_rdma client "$peer"; fi
    fi
    # servers of pod A that close: pod B's clients are told (RPCOOL_E_CLOSED), three times
    if [ "$role" = pods-a ]; then run rpcool-close-server 200 /t/test_rpcool_rdma close-server
    else run rpcool-close-client 200 /t/test_rpcool_rdma close-client "$peer"; fi
    ;;
a|b)
    rdma_up
    run "twohost-rc-$role" 90 /t/test_twohost "$role" "$peer"
    run "krconn-pair-$role" 90 /t/test_krconn "$role" "$peer"
    pod=$(ivshmem_dev)
    if [ -n "$pod" ]; then
        # rpcool's pod transport through the device first (it formats the zeroed device as a
        # pod); test_podheap then makes the device a heap of its own (overwrite)
        run "rpcool-pod-$role" 180 /t/test_rpcool_pod "$role" ivshmem "$peer"
        run "podheap-$role" 60 /t/test_podheap "$role" "$pod" "$peer"
    else
        echo "FAIL podheap-$role: no ivshmem device (1af4:1110) found"
    fi
    run "alock-pair-$role" 120 /t/test_alock_rdma "$role" "$peer"
    run "nppin-twohost-$role" 90 /t/test_nppin_twohost "$role" "$peer"
    ;;
cxl)
    # reserve the 2 MiB pages of the hugetlbfs test first, before other tests fragment memory
    echo 16 >/proc/sys/vm/nr_hugepages
    modprobe -a cxl_acpi cxl_pci cxl_mem cxl_pmem libnvdimm nd_pmem dax_pmem device_dax ||
        echo "# modprobe failed"
    run test_cxl 100 /t/test_cxl
    # the region as a pod's device on one host (skipped while the device keeps no data); the
    # pod's sleepers are woken by datagrams: this guest has no NIC, its loopback carries them
    ip link set lo up
    run rpcool-pod-cxl 90 /t/test_rpcool_pod one cxl:region0
    # the NVDIMM (qemu backs it with a host file, so data sticks) as a devdax namespace
    modprobe nfit
    ns=""; i=0
    while [ $i -lt 50 ] && [ -z "$ns" ]; do
        ns=$(ndctl list -N --bus=ACPI.NFIT 2>/dev/null | sed -n 's/.*"dev":"\(namespace[0-9.]*\)".*/\1/p' | head -n 1)
        [ -z "$ns" ] && sleep 0.1; i=$((i + 1))
    done
    if [ -z "$ns" ]; then
        echo "FAIL nvdimm-setup: no NVDIMM namespace on ACPI.NFIT"
    elif ! ndctl create-namespace -f -e "$ns" -m devdax -a 2M >/tmp/ns.json 2>&1; then
        echo "FAIL nvdimm-setup: ndctl create-namespace -f -e $ns -m devdax failed"
        sed 's/^/# /' /tmp/ns.json
    else
        dax=$(sed -n 's/.*"chardev":"\(dax[0-9.]*\)".*/\1/p' /tmp/ns.json | head -n 1)
        echo "ok nvdimm-setup"
        echo "# $ns -> /dev/$dax (NVDIMM, devdax)"
        run test_dax 120 /t/test_dax "/dev/$dax"
        # the same device (it keeps data) as a pod's device on one host
        run rpcool-pod-dax 90 /t/test_rpcool_pod one "/dev/$dax"
    fi
    # hugetlbfs: 2 MiB pages reserved in the guest
    echo 16 >/proc/sys/vm/nr_hugepages
    mkdir -p /mnt/huge
    if mount -t hugetlbfs -o pagesize=2M none /mnt/huge; then
        echo "# hugetlbfs: $(cat /proc/sys/vm/nr_hugepages) pages of 2 MiB"
        run test_hugetlb 60 /t/test_hugetlb /mnt/huge
    else
        echo "FAIL hugetlb-setup: mount -t hugetlbfs failed"
    fi
    if grep -qw pku /proc/cpuinfo; then echo "# pku: yes (-cpu max)"; else echo "# pku: no"; fi
    run test_pkey 30 /t/test_pkey
    run test_rpcool_pkey 60 /t/test_rpcool_pkey
    ;;
krconn)
    rdma_up
    only=$(arg rcp.only) # VM_ONLY=NAME[,NAME]: only test_krconn's tests whose names contain one
    if [ -n "$only" ]; then
        for o in $(echo "$only" | tr , ' '); do KRCONN_TEST_ONLY=$o run "test_krconn-$o" 140 /t/test_krconn; done
    else
        run test_krconn 140 /t/test_krconn
        run test_krconn_compose 150 /t/test_krconn_compose
        run test_krconn_events 90 /t/test_krconn_events
        # again under ASan+UBSan (fewer cycles: it is slower); result lines renamed *-asan
        # examples/krconn_hello.c: server prints its address, the client reads the greeting
        /t/ex_krconn_hello >/tmp/hello.addr 2>&1 &
        hs=$!
        i=0
        while [ $i -lt 100 ] && ! grep -q / /tmp/hello.addr; do sleep 0.1; i=$((i + 1)); done
        if timeout 30 /t/ex_krconn_hello "$(head -n 1 /tmp/hello.addr)" >/tmp/hello.out 2>&1 &&
           grep -q "read: hello over RDMA READ" /tmp/hello.out && grep -q "virtual: yes" /tmp/hello.out; then
            echo "ok example-krconn_hello"
        else
            echo "FAIL example-krconn_hello: $(tr '\n' ' ' </tmp/hello.out) (server: $(tr '\n' ' ' </tmp/hello.addr))"
        fi
        kill $hs 2>/dev/null
        wait $hs 2>/dev/null
        # krconn.h's manual example (section 3, cut out by mk/vm.mk): server, then a client by name
        /t/ex_krconn_manual >/tmp/manual.srv 2>&1 &
        hs=$!
        i=0
        while [ $i -lt 20 ] && ! KRCONN_META=127.0.0.1 timeout 30 /t/ex_krconn_manual c >/tmp/manual.out 2>&1; do
            sleep 0.5; i=$((i + 1))
        done
        if grep -q "read: hello over RDMA READ" /tmp/manual.out; then
            echo "ok example-krconn-manual"
        else
            echo "FAIL example-krconn-manual: $(tr '\n' ' ' </tmp/manual.out) (server: $(tr '\n' ' ' </tmp/manual.srv))"
        fi
        kill $hs 2>/dev/null
        wait $hs 2>/dev/null
        # the concurrent tests under ThreadSanitizer
        KRCONN_TEST_ONLY=threads run test_krconn-tsan 140 sh -c 'set -o pipefail; /t/test_krconn.tsan | sed "s/^\(ok\|FAIL\|skip\) \([^:]*\)/\1 \2-tsan/"'
        ASAN_OPTIONS=detect_leaks=1 run test_krconn-asan 140 sh -c 'set -o pipefail; /t/test_krconn.asan 1000 | sed "s/^\(ok\|FAIL\|skip\) \([^:]*\)/\1 \2-asan/"'
        ASAN_OPTIONS=detect_leaks=1 run test_krconn_events-asan 90 sh -c 'set -o pipefail; /t/test_krconn_events.asan | sed "s/^\(ok\|FAIL\|skip\) \([^:]*\)/\1 \2-asan/"'
        run test_krconn_events-tsan 90 sh -c 'set -o pipefail; /t/test_krconn_events.tsan | sed "s/^\(ok\|FAIL\|skip\) \([^:]*\)/\1 \2-tsan/"'
    fi
    ;;
krconn-bench)
    rdma_up
    modprobe -a rdma_cm rdma_ucm || echo "# modprobe rdma_cm rdma_ucm failed"
    # rdma_cm: cmtime times each step; a fresh server for every client run. Runs before and
    # after bench_krconn, so that both see the same conditions.
    cmtime_runs() {
        for i in $1; do
            timeout 20 cmtime -b "$ip" -c 1 >/tmp/cm.server 2>&1 &
            cms=$!
            sleep 0.5
            if timeout 20 cmtime -s "$ip" -c 1 >/tmp/cm.client 2>&1; then
                echo "cmtime run $i"
                sed 's/^/| /' /tmp/cm.client
            else
                echo "FAIL cmtime-run-$i: client failed"
                sed 's/^/# /' /tmp/cm.client /tmp/cm.server
            fi
            kill $cms 2>/dev/null
            wait
        done
    }
    # The floor: perftest's ib_send_lat over UD, one datagram each way (what a new-peer connect
    # exchanges), polling and with completion events (-e, as krconn's context sleeps). Half
    # the round trip in microseconds: "udfloor MODE t_min t_typical p99".
    gid=$(/t/test_verbs --gid)
    udfloor() {
        for mode in poll event; do
            e=""; [ $mode = event ] && e="-e"
            timeout 90 ib_send_lat -d rxe0 -x "$gid" -c UD -s 64 -n 500 $e >/tmp/ud.server 2>&1 &
            uds=$!
            sleep 1
            if timeout 60 ib_send_lat -d rxe0 -x "$gid" -c UD -s 64 -n 500 $e "$ip" >/tmp/ud.client 2>&1; then
                awk -v m=$mode '$1 == 64 && NF >= 8 { print "udfloor", m, $3, $5, $8 }' /tmp/ud.client
            else
                echo "# udfloor $mode: ib_send_lat -c UD failed"
                sed 's/^/# /' /tmp/ud.client /tmp/ud.server
            fi
            kill $uds 2>/dev/null
            wait
        done
    }
    cmtime_runs "1 2 3 4 5 6"
    udfloor
    run bench_krconn 120 /t/bench_krconn
    udfloor
    cmtime_runs "7 8 9 10 11 12"
    ;;
nppin)
    rdma_up
    swap_up
    run test_nppin 170 /t/test_nppin
    ;;
nppin-bench)
    rdma_up
    run nppin-bench 380 /t/nppin_bench
    ;;
perftest)
    rdma_up
    gid=$(/t/test_verbs --gid)
    echo "# perftest on rxe0, gid index $gid"
    for t in ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
        timeout 150 $t -d rxe0 -x "$gid" -n 2000 >/tmp/$t.server 2>&1 &
        sleep 1
        if timeout 120 $t -d rxe0 -x "$gid" -n 2000 "$ip" >/tmp/$t.client 2>&1; then
            echo "perftest $t"
            sed 's/^/| /' /tmp/$t.client
        else
            echo "FAIL perftest-$t: client failed"
            sed 's/^/# /' /tmp/$t.client /tmp/$t.server
        fi
        wait
    done
    ;;
alockbench-a|alockbench-b)
    rdma_up
    # shellcheck disable=SC2046
    run "$role" 560 /t/bench_alock_vm "${role#alockbench-}" "$peer" $(arg rcp.bench)
    ;;
rpcbench-a|rpcbench-b)
    # bench/bench_rdma_pair.sh: rpcool between pods. Guest a (10.0.3.1, pod 0) runs the servers
    # one after another, guest b (10.0.3.2, pod 1) the clients, which print the results. A step
    # NAME: a starts its server, waits until it listens, says NAME; b runs its client, says
    # done-NAME; a stops the server if it is still there. Saying = serving the word once on
    # TCP port 7000 (post); the other side asks until it hears it (await).
    rdma_up
    steps=$(arg rcp.steps)
    want() { [ -z "$steps" ] || case ",$steps," in *",$1,"*) true ;; *) false ;; esac; }
    # the pod's steps (bench/bench_pod_vm.sh) run only when named: floor, pod, floor-after
    named() { case ",$steps," in *",$1,"*) true ;; *) false ;; esac; }
    gid=$(/t/test_verbs --gid)
    echo "# rpcbench on rxe0, gid index $gid, peer $peer, eth0 mtu $(cat /sys/class/net/eth0/mtu)"
    post() { # post WORD: serve WORD to the one peer that asks, 600 s at most
        echo "$1" | timeout 600 nc -l -p 7000 >/dev/null || echo "# post $1: nobody asked"
    }
    await() { # await WORD...: ask the peer until it says one of the WORDs (in $heard), 600 s
        i=0
        while [ $i -lt 3000 ]; do
            heard=$(nc "$peer" 7000 </dev/null 2>/dev/null)
            for w in "$@"; do [ "$heard" = "$w" ] && return 0; done
            sleep 0.2; i=$((i + 1))
        done
        echo "FAIL rpcbench-await-$1: the other guest never said it"
        return 1
    }
    bench() { # bench NAME SECONDS CMD...: like run, but any non-zero exit is a FAIL line
        n=$1; s=$2; shift 2
        timeout "$s" "$@"
        rc=$?
        [ $rc -ne 0 ] && echo "FAIL $n: exited with status $rc: $*"
    }
    served() { # served NAME PORT PID: say NAME once the server listens, then stop it when done
        # (PORT 0: a server with no TCP port, e.g. the pod's: said after 2 s; its client retries)
        i=0 hex=$(printf ':%04X ' "$2")
        while [ "$2" != 0 ] && [ $i -lt 600 ] && kill -0 "$3" 2>/dev/null &&
            ! grep -q "$hex.* 0A " /proc/net/tcp; do
            sleep 0.1; i=$((i + 1))
        done
        if [ "$2" = 0 ]; then sleep 2
        else grep -q "$hex.* 0A " /proc/net/tcp || echo "# $1: no server listening on port $2"; fi
        post "$1"
        await "done-$1"
        i=0
        while [ $i -lt 100 ] && kill -0 "$3" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
        kill "$3" 2>/dev/null
        wait "$3"
        echo "# $1 server: exit status $?"
        sed 's/^/# server: /' /tmp/srv.out
    }
    # perftest prints t_typical etc. as HALF the round trip for send and write (ping-pong):
    # perftest src/perftest_parameters.c, print_report_lat: rtt_factor = 2 unless READ or
    # ATOMIC, every figure is delta / (cycles_to_units * rtt_factor). bench_rdma_pair.sh doubles.
    PT="ib_write_lat ib_send_lat"
    if [ "$role" = rpcbench-a ]; then
        export SHMHEAP_POD_ID=0
        # the floor of a pod call: a bare cache-line ping-pong through the ivshmem device
        # (bench/pod_pingpong.c; guest a echoes, b times), before and after the other rows
        if named floor; then
            /t/pod_pingpong a ivshmem "$peer" >/tmp/srv.out 2>&1 &
            served floor 7490 $!
        fi
        if want perftest; then
            for t in $PT; do
                $t -d rxe0 -x "$gid" -n 500 >/tmp/srv.out 2>&1 &
                served "$t" 18515 $!
            done
        fi
        if want pbtree; then
            /t/peer_pbtree -a "tcp:$ip:7480" >/tmp/srv.out 2>&1 &
            served pbtree 7480 $!
        fi
        if want grpc && [ -x /t/peer_grpc ]; then
            /t/peer_grpc -a "$ip:7481" >/tmp/srv.out 2>&1 &
            served grpc 7481 $!
        elif want grpc; then
            post grpc-none
        fi
        # rpcool's server; with the RDMA transport, its krconn meta server listens on TCP 7471
        if want rpcool; then
            RPCOOL_DEBUG=1 /t/rpcool_bench -T 590 -R -a bench >/tmp/srv.out 2>&1 &
            served rpcool 7471 $!
        fi
        # rpcool's pod transport through the ivshmem device: the server serves the pod too
        if named pod; then
            RPCOOL_POD_DEVICE=$(ivshmem_dev) /t/rpcool_bench -T 590 -a bench >/tmp/srv.out 2>&1 &
            served pod 0 $!
        fi
        # the same, both sides polling 20 ms before they sleep (no-op and ping-pong only)
        if named pod-poll; then
            RPCOOL_BENCH_SPIN_NS=20000000 RPCOOL_POD_DEVICE=$(ivshmem_dev) /t/rpcool_bench \
                -T 590 -a bench >/tmp/srv.out 2>&1 &
            served pod-poll 0 $!
        fi
        if named floor-after; then
            /t/pod_pingpong a ivshmem "$peer" >/tmp/srv.out 2>&1 &
            served floor-after 7490 $!
        fi
        if want pbc; then
            /t/pbc_bench -S "$ip:7482" >/tmp/srv.out 2>&1 &
            served pbc 7482 $!
        fi
        # ib_write_lat once more: the guests' speed drifts over a run, so the rpcool rows are
        # bracketed by a perftest run before and one after
        if want perftest; then
            ib_write_lat -d rxe0 -x "$gid" -n 500 >/tmp/srv.out 2>&1 &
            served ib_write_lat-after 18515 $!
        fi
        # the RDMA no-op of this tree and of RPCBENCH_BASE's build (make), alternating
        if want ab && [ -x /t/rpcool_bench_base ]; then
            for r in 1 2 3; do
                for v in new base; do
                    b=/t/rpcool_bench; [ $v = base ] && b=/t/rpcool_bench_base
                    $b -R -a bench >/tmp/srv.out 2>&1 &
                    served "ab-$v-$r" 7471 $!
                done
            done
        fi
        # examples/rpcool_kv_pods.c: pod A's gets by call and by pointer (a server of its own),
        # then the server pod B's gets reach (by call over RDMA, by locked and optimistic READ)
        if want kvpods; then
            bench kvpods-local 300 /t/ex_rpcool_kv_pods bench 20000
            /t/ex_rpcool_kv_pods serve 600 >/tmp/srv.out 2>&1 &
            served kvpods 7471 $!
        fi
        post all-done
    else
        export SHMHEAP_POD_ID=1
        # each step runs when the server guest says its word; a step it skips is never said
        while await floor $PT pbtree grpc grpc-none rpcool pod pod-poll floor-after pbc \
            ib_write_lat-after \
            ab-new-1 ab-new-2 ab-new-3 ab-base-1 ab-base-2 ab-base-3 kvpods all-done &&
            [ "$heard" != all-done ]; do
            step=$heard
            case $step in
            ib_*)
                t=${step%-after}
                if timeout 200 $t -d rxe0 -x "$gid" -n 500 "$peer" >/tmp/$t.client 2>&1; then
                    if [ "$step" = "$t" ]; then echo "perftest $t"; else echo "perftest $t after"; fi
                    sed 's/^/| /' /tmp/$t.client
                else
                    echo "FAIL perftest-$step: client failed"
                    sed 's/^/# /' /tmp/$t.client
                fi ;;
            floor) bench pod-floor 300 /t/pod_pingpong b ivshmem "$peer" ;;
            floor-after) bench pod-floor-after 300 /t/pod_pingpong b ivshmem "$peer" \
                -N pod_floor/line-after ;;
            pod) bench rpcool-pod 600 env RPCOOL_POD_DEVICE="$(ivshmem_dev)" /t/rpcool_bench \
                -T 590 -n 2000 -w 200 pod:bench ;;
            pod-poll) bench rpcool-pod-poll 600 env RPCOOL_BENCH_SPIN_NS=20000000 \
                RPCOOL_POD_DEVICE="$(ivshmem_dev)" /t/rpcool_bench -T 590 -S noop,pingpong \
                -n 2000 -w 200 pod:bench |
                sed -e 's#rpcool_pod/#rpcool_pod_poll/#' -e 's/^# pingpong:/# pingpong (pod_poll):/' ;;
            pbtree) bench pbtree-tcp 300 /t/peer_pbtree -n 200 -w 20 "tcp:$peer:7480" ;;
            grpc) bench grpc-tcp 300 /t/peer_grpc -n 500 -w 50 "ipv4:$peer:7481" ;;
            grpc-none)
                echo "grpc: not in the guests (peer_grpc did not build on the host: run.sh said why)"
                continue ;;
            # -T 590: rpcool_bench's own deadline (300 s by default) under a loaded host
            rpcool) bench rpcool-rdma 600 env RPCOOL_DEBUG=1 /t/rpcool_bench -T 590 -n 1000 \
                -w 100 "rdma://$peer/bench" ;;
            pbc) bench pbc-rdma 600 /t/pbc_bench -n 1000 -c "$peer:7482" ;;
            ab-*)
                v=${step#ab-}; v=${v%-*}
                bench "rpcool-$step" 300 env RPCOOL_DEBUG=1 /t/rpcool_bench -S noop -n 1000 \
                    -w 100 "rdma://$peer/bench" |
                    sed "s#^rpcool_rdma/noop/#rpcool_rdma_ab/$v-${step##*-}/#" ;;
            kvpods) bench kvpods-remote 300 /t/ex_rpcool_kv_pods bench "$peer" 2000 ;;
            esac
            post "done-$step"
        done
    fi
    ;;
*)
    echo "FAIL guest: unknown role '$role'"
    ;;
esac
echo guest-done
sync
poweroff -f
