#!/bin/sh
# examples/demo.sh DIR - `make demo`: the rpcool key-value store, with the other examples.
# A server keeps a hash table in its own shared heap; two client processes put and get 100000
# keys each by passing pointers into their connection heaps; the two-pod KV store's shared-memory
# half; then the echo (no-op) round trip and the document store with sealed, sandboxed,
# pointer-rich documents; a protobuf-c service over rpcool.
ex=${1:-build/ex}
set -e
echo "== shmheap: two processes share a linked list by plain pointer (examples/shmheap_list.c)"
"$ex/shmheap_list"
echo
echo "== rpcool key-value store: 1 server thread, 2 client processes, 100000 keys each"
"$ex/rpcool_kv" 100000 2
echo
echo "== one KV server for two pods, pod A's half (examples/rpcool_kv_pods.c): 2 client processes"
echo "   call it over shared memory and read its buckets by pointer under alock.h's locks; pod B's"
echo "   half (RDMA calls, one-sided READ under the same locks) runs in the VM tier's pods guests"
"$ex/rpcool_kv_pods" 2000 2
echo
echo "== no-op round trip (examples/rpcool_echo.c)"
"$ex/rpcool_echo" 200000
echo
echo "== document store: 20000 JSON-like documents, sealed + sandboxed (examples/rpcool_docstore.c)"
"$ex/rpcool_docstore" 20000
echo
echo "== a protobuf-c service served unchanged, its server exec'd (examples/rpcool_pbc.c)"
if [ -x "$ex/rpcool_pbc" ]; then
    "$ex/rpcool_pbc" 100000
else
    echo "(not built: it needs protobuf-c; apt-get install libprotobuf-c-dev protobuf-c-compiler)"
fi
