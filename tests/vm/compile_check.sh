#!/bin/sh
# tests/vm/compile_check.sh CC CXX DIR - the VM tier's headers compile cleanly as
# C11 and C++17 (-Wall -Wextra -Werror): impl/verbs.h and impl/cxl.h with every function
# referenced, shmheap.h's implementation with SHMHEAP_WITH_CXL (libcxl), and rpcool.h's with
# RPCOOL_WITH_RDMA (libibverbs).
cc=$1; cxx=$2; dir=$3
mkdir -p "$dir"
compile() { # compile NAME LANG COMPILER STD SOURCE LIBS: one ok/FAIL line
    if $3 $4 -O2 -Wall -Wextra -Werror -pthread -I. "$5" -o "$dir/$1-$2" $6 2>"$dir/$1-$2.err"; then
        echo "ok compile-$1-$2"
    else
        echo "FAIL compile-$1-$2: $(grep -m 2 'error' "$dir/$1-$2.err" | tr '\n' ' ')"
        sed 's/^/    /' "$dir/$1-$2.err" | head -n 20
    fi
}
check() { # check NAME SOURCE LIBS: as C11 and as C++17
    cp "$2" "$dir/$1.c"
    cp "$2" "$dir/$1.cpp"
    compile "$1" c11 "$cc" -std=c11 "$dir/$1.c" "$3"
    compile "$1" c++17 "$cxx" -std=c++17 "$dir/$1.cpp" "$3"
}
check impl-verbs-cxl tests/vm/compile_impl.inc "-libverbs -lcxl"
printf '#define SHMHEAP_WITH_CXL 1\n#define SHMHEAP_IMPLEMENTATION\n#include "shmheap.h"\nint main(void) { return 0; }\n' >"$dir/sc.inc"
check shmheap-with-cxl "$dir/sc.inc" -lcxl
# rpcool.h with its RDMA transport (impl/rpcool/rdma.h and krconn.h come along)
printf '#define RPCOOL_WITH_RDMA 1\n#define RPCOOL_IMPLEMENTATION\n#include "rpcool.h"\nint main(void) { return 0; }\n' >"$dir/rr.inc"
check rpcool-with-rdma "$dir/rr.inc" -libverbs
