#!/bin/sh
# examples/demo.sh DIR - `make demo`: the rpcool key-value store, with the other examples.
# A server keeps a hash table in its own shared heap; two client processes put and get 100000
# keys each by passing pointers into their connection heaps; then the echo (no-op) round trip
# and the document store with sealed, sandboxed, pointer-rich documents.
ex=${1:-build/ex}
set -e
echo "== shmheap: two processes share a linked list by plain pointer (examples/shmheap_list.c)"
"$ex/shmheap_list"
echo
echo "== rpcool key-value store: 1 server thread, 2 client processes, 100000 keys each"
"$ex/rpcool_kv" 100000 2
echo
echo "== no-op round trip (examples/rpcool_echo.c)"
"$ex/rpcool_echo" 200000
echo
echo "== document store: 20000 JSON-like documents, sealed + sandboxed (examples/rpcool_docstore.c)"
"$ex/rpcool_docstore" 20000
