#!/bin/sh
# examples/demo.sh DIR - `make demo`: the rpcool key-value store, with the other examples.
# Each step says what it shows and what to expect. A server keeps a hash table in its own
# shared heap; two client processes put and get 100000 keys each by passing pointers into their
# connection heaps; the two-pod KV store's shared-memory half; then the echo (no-op) round trip
# and the document store with sealed, sandboxed, pointer-rich documents; a protobuf-c service
# over rpcool; rpcoolctl. The demo keeps its heaps in a pod of its own, removed at the end, so
# nothing it made stays in /dev/shm.
# It ends with one line: "demo: all N steps passed in S s" or "demo: FAILED at step N (NAME)",
# and exits non-zero on a failure. What an absent optional package left out is said before it
# (DEMO_HAVE_VERBS and DEMO_HAVE_PBC, set by the Makefile to its probes: 1 or empty).
ex=${1:-build/ex}
start=${DEMO_START:-$(date +%s)}
pod=rpcool-demo-$$.pod
export SHMHEAP_POD=$pod
trap 'rm -f "/dev/shm/$pod"' EXIT
n=0; ran=0; left=""
step() { n=$((n + 1)); echo; echo "== step $n: $1"; shift; for l in "$@"; do echo "   $l"; done; }
run() { # run PROGRAM ARGS...: the step's program; a failure ends the demo with its verdict
    "$@"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo
        echo "demo: FAILED at step $n ($(basename "$1"), exit status $rc)"
        exit 1
    fi
    ran=$((ran + 1))
}

step "shmheap: two processes share a linked list by plain pointer (examples/shmheap_list.c)" \
     "A writer builds 1000 items in a shared heap; a second program opens the heap by name and" \
     "walks the same pointers. Expect: walked 1000 items, sum 500500; the heap consistent."
run "$ex/shmheap_list"

step "rpcool key-value store: 1 server thread, 2 client processes, 100000 keys each" \
     "Clients pass the server pointers to keys and values in their connection heaps: nothing" \
     "is serialised. Expect 100000/100000 keys found per client, and one put refused on" \
     "purpose: its key points outside the client's heap, which the server checks."
run "$ex/rpcool_kv" 100000 2

step "one KV server for two pods, pod A's half (examples/rpcool_kv_pods.c)" \
     "2 client processes call it over shared memory and read its exported table by pointer" \
     "under the export's locks (ALock). Expect 0 wrong. Pod B's half (RDMA calls, one-sided READ" \
     "and WRITE under the same locks) needs an RDMA device: not run here (see the end)."
run "$ex/rpcool_kv_pods" 2000 2

step "no-op round trip (examples/rpcool_echo.c)" \
     "A call passes a pointer to the string \"hello\"; the handler returns its first byte as the" \
     "call's status (expect 104, 'h'). Then the time of a round trip: it depends on the machine."
run "$ex/rpcool_echo" 200000

step "document store: 20000 JSON-like documents, sealed + sandboxed (examples/rpcool_docstore.c)" \
     "Documents are sealed (read-only) while the server copies them, and searched by sandboxed" \
     "handlers. Expect 4000 documents found, one document refused on purpose (a pointer" \
     "outside the heap) and 0 faults."
run "$ex/rpcool_docstore" 20000

step "a protobuf-c service served unchanged, its server exec'd (examples/rpcool_pbc.c)" \
     "Generated stubs call over rpcool; the message travels as a pointer. Expect two entries."
if [ -x "$ex/rpcool_pbc" ]; then
    run "$ex/rpcool_pbc" 100000
else
    echo "   Left out: protobuf-c is not installed, so this example was not built."
    left="$left, step $n (protobuf-c: libprotobuf-c-dev protobuf-c-compiler)"
fi

step "rpcoolctl (tools/rpcoolctl.c): what rpcool has on this host now" \
     "Every program above has ended: expect each heap of the demo's pod \"dead\" (nothing" \
     "holds it; its range is free for the next heap) and no channel of the demo (channels" \
     "of other programs of this host are listed too). The demo's pod is removed next."
run "$ex/../bin/rpcoolctl"

echo
echo "== not run here: the halves that need RDMA"
echo "   examples/krconn_hello.c (two processes connect over RDMA), examples/nppin_reg.c (register"
echo "   1 GiB without pinning) and pod B of rpcool_kv_pods need an RDMA device. \`make test\` boots"
echo "   VM guests (qemu with Soft-RoCE, real rdma-core) and runs them there: tests/README.md."
if [ "${DEMO_HAVE_VERBS-1}" != 1 ]; then
    echo "   This build has no RDMA at all: rdma-core is not installed (libibverbs-dev), so those"
    echo "   examples were built with their RDMA parts compiled out (they say \"not supported\")."
    left="$left, RDMA (rdma-core: libibverbs-dev)"
fi

echo
if [ -n "$left" ]; then
    echo "demo: all $ran steps passed in $(($(date +%s) - start)) s; left out: ${left#, }"
else
    echo "demo: all $ran steps passed in $(($(date +%s) - start)) s"
fi
