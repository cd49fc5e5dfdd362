#!/bin/sh
# Every public header compiles alone and all together, with its implementation, as C11 and C++17
# under -Wall -Wextra -Werror, after being copied with impl/ into an empty folder.
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
hdrs=$(ls shmheap.h rpcool.h krconn.h alock.h nppin.h 2>/dev/null)
cp $hdrs "$dir/"; cp -r impl "$dir/impl"
check() { # check NAME SOURCE
    printf '%s' "$2" > "$dir/$1.c"; cp "$dir/$1.c" "$dir/$1.cpp"
    if cc -std=c11 -Wall -Wextra -Werror -pthread -c "$dir/$1.c" -o "$dir/$1.o" 2>"$dir/err" &&
       c++ -std=c++17 -Wall -Wextra -Werror -pthread -c "$dir/$1.cpp" -o "$dir/$1.o" 2>>"$dir/err"; then
        echo "ok compile-$1"
    else
        echo "FAIL compile-$1: $(head -3 "$dir/err" | tr '\n' ' ')"
    fi
}
all=""
for h in $hdrs; do
    m=$(echo "${h%.h}" | tr a-z A-Z)_IMPLEMENTATION
    check "${h%.h}" "#define $m
#include \"$h\"
int main(void) { return 0; }
"
    check "${h%.h}-decl" "#include \"$h\"
int main(void) { return 0; }
"
    all="$all#define $m
#include \"$h\"
"
done
check all "$all
int main(void) { return 0; }
"
# The manuals' C++ way to take an options struct's defaults (section 1 of each header: `T o{};`
# then assign): every options struct of the public headers, found by its typedef, value-initialised
# in C++17 under -Wall -Wextra -Werror (so -Wmissing-field-initializers is on); and each manual
# whose header has one shows the way.
cxx=""; nopts=0
for h in $hdrs; do
    cxx="$cxx
#include \"$h\""
    for t in $(sed -n 's/^typedef struct \([a-z_]*_opts\) {.*/\1/p' "$h"); do
        nopts=$((nopts + 1))
        cxx="$cxx
void cxx_defaults_$nopts() { $t o{}; $t p = {}; (void)o; (void)p; }"
    done
    if grep -q '^typedef struct [a-z_]*_opts {' "$h" && ! grep -q '_opts o{}; o\.[a-z_]* = ' "$h"; then
        echo "FAIL manual-cxx-defaults-${h%.h}: $h: section 1 does not show the C++ way (T o{}; o.x = ...)"
    else
        echo "ok manual-cxx-defaults-${h%.h}"
    fi
done
printf '%s\nint main() { return 0; }\n' "$cxx" >"$dir/cxx_defaults.cpp" # $nopts structs
if [ "$nopts" -gt 0 ] &&
    c++ -std=c++17 -Wall -Wextra -Werror -pthread -c "$dir/cxx_defaults.cpp" -o "$dir/cxx_defaults.o" \
        2>"$dir/err"; then
    echo "ok compile-cxx-defaults"
else
    echo "FAIL compile-cxx-defaults: $nopts options structs: $(head -3 "$dir/err" | tr '\n' ' ')"
fi
# impl/podlease.h alone (an internal the headers will share: libc and impl/platform.h only)
check podlease "#include \"impl/podlease.h\"
int main(void) { struct rcp__lease l; return rcp__lease_attach(&l, 0, 0, 0) == 0; }
"
check all-podlease "$all#include \"impl/podlease.h\"
int main(void) { return 0; }
"
# rpcool with its RDMA transport (krconn.h's implementation comes along); without rdma-core's
# headers it still compiles, and RDMA calls return RPCOOL_E_NOTSUP
check rpcool-rdma "#define RPCOOL_WITH_RDMA 1
#define RPCOOL_IMPLEMENTATION
#include \"rpcool.h\"
int main(void) { return 0; }
"
# rpcool with protobuf-c services (impl/rpcool/pbc.h), when protobuf-c's headers are there
if echo '#include <protobuf-c/protobuf-c.h>' | cc -E -x c - >/dev/null 2>&1; then
    check rpcool-pbc "#define RPCOOL_WITH_PROTOBUF_C 1
#define RPCOOL_IMPLEMENTATION
#include \"rpcool.h\"
int main(void) { return 0; }
"
    check rpcool-pbc-decl "#define RPCOOL_WITH_PROTOBUF_C 1
#include \"rpcool.h\"
int main(void) { return 0; }
"
else
    echo "skip compile-rpcool-pbc: protobuf-c's headers are absent (libprotobuf-c-dev)"
fi

# A new user: the headers and impl/ in an empty folder, each example built with plain cc (after
# protoc-c for an example that names a .proto in a "// PROTO:" line).
for ex in examples/*.c; do
    n=$(basename "$ex" .c)
    cp "$ex" "$dir/$n.c"
    for p in $(sed -n 's|^// PROTO: ||p' "$ex"); do
        mkdir -p "$dir/$(dirname "$p")" && cp "examples/$p" "$dir/$p" &&
            (cd "$dir/$(dirname "$p")" && protoc-c --c_out=. "$(basename "$p")")
    done
    libs=$(sed -n 's|^// LIBS: ||p' "$ex")
    if (cd "$dir" && cc -O2 -pthread "$n.c" -o "$n" $libs 2>err-$n); then
        echo "ok example-builds-alone-$n"
    else
        echo "FAIL example-builds-alone-$n: $(head -3 "$dir/err-$n" | tr '\n' ' ')"
    fi
done
"$dir/shmheap_list" >"$dir/out" 2>&1 && grep -q "walked 1000 items" "$dir/out" &&
    echo "ok example-runs-alone-shmheap_list" || echo "FAIL example-runs-alone-shmheap_list: $(cat "$dir/out")"

# krconn.h's manual example (section 3), cut out of the header and built the same way, as C11
# and C++17. The VM tier runs the same cut (mk/vm.mk, tests/vm/init.sh role krconn).
if [ -f krconn.h ]; then
    sed -n '/^   3\. EXAMPLE/,/^   4\. /p' krconn.h | sed -n 's/^       //p' >"$dir/krconn_manual.c"
    cp "$dir/krconn_manual.c" "$dir/krconn_manual.cpp"
    W="-Wall -Wextra -Werror -pthread"
    if [ "$(wc -l <"$dir/krconn_manual.c")" -gt 10 ] &&
       (cd "$dir" && cc -std=c11 $W krconn_manual.c -o krconn_manual -libverbs &&
        c++ -std=c++17 $W krconn_manual.cpp -o krconn_manual_cpp -libverbs) 2>"$dir/err-m"; then
        echo "ok example-krconn-manual"
    else
        echo "FAIL example-krconn-manual: $(head -3 "$dir/err-m" | tr '\n' ' ')"
    fi
fi

# krconn.h without rdma-core (KRCONN_NO_RDMA): with the switch, and with <infiniband/verbs.h>
# really absent (an empty folder mounted over /usr/include/infiniband in a private mount
# namespace; needs root and unshare), where the switch must turn itself on. Every header and
# implementation together must still build and run, and krconn must say "not supported".
if [ -f krconn.h ]; then
    printf '%s\n' '#define _GNU_SOURCE 1' '#include <stdio.h>' '#define SHMHEAP_IMPLEMENTATION' \
        '#include "shmheap.h"' '#define RPCOOL_IMPLEMENTATION' '#include "rpcool.h"' \
        '#define KRCONN_IMPLEMENTATION' '#include "krconn.h"' \
        '#ifndef KRCONN_NO_RDMA' '#error "KRCONN_NO_RDMA is not set"' '#endif' \
        'int main(void) { krconn_ctx *c; int rc = krconn_ctx_create(NULL, &c);' \
        '  if (rc != KRCONN_E_NOTSUP) return 1;' '  puts(krconn_strerror(rc));' '  return 0;' '}' >"$dir/norm.c"
    cp "$dir/norm.c" "$dir/norm.cpp"
    norm() { # norm NAME FLAGS [unshare]: build as C11 and C++17 and run both
        printf '%s\n' "cd '$dir' && cc -std=c11 -Wall -Wextra -Werror -pthread $2 norm.c -o norm-c &&" \
            "c++ -std=c++17 -Wall -Wextra -Werror -pthread $2 norm.cpp -o norm-cpp" >"$dir/norm.sh"
        if [ -n "${3:-}" ]; then
            set -- "$1" "$2" unshare -m sh -c "mount --bind '$dir/empty' /usr/include/infiniband && sh '$dir/norm.sh'"
            shift 2
        else
            set -- "$1" "$2" sh "$dir/norm.sh"
            shift 2
        fi
        if "$@" 2>"$dir/err" && "$dir/norm-c" >/dev/null && "$dir/norm-cpp" >/dev/null; then
            echo "ok compile-$n"
        else
            echo "FAIL compile-$n: $(head -3 "$dir/err" | tr '\n' ' ')"
        fi
    }
    n=krconn-no-rdma-switch; norm "$n" "-DKRCONN_NO_RDMA"
    mkdir -p "$dir/empty"
    rm -f "$dir/norm-c" "$dir/norm-cpp"
    n=krconn-no-rdma-headers
    if [ ! -d /usr/include/infiniband ]; then
        norm "$n" ""
    elif [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
         unshare -m sh -c "mount --bind '$dir/empty' /usr/include/infiniband" 2>/dev/null; then
        norm "$n" "" unshare
    else
        echo "skip compile-$n: libibverbs-dev is installed and hiding it needs root and unshare -m"
    fi
    # `make demo` on a machine without libibverbs-dev: every example builds (the Makefile drops
    # -libverbs when <infiniband/verbs.h> is absent; the headers compile their RDMA parts out).
    n=examples-no-rdma-headers
    mk="make -s examples BUILD='$dir/nordma'"
    if [ ! -d /usr/include/infiniband ]; then
        set -- sh -c "$mk"
    elif [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
         unshare -m sh -c "mount --bind '$dir/empty' /usr/include/infiniband" 2>/dev/null; then
        set -- unshare -m sh -c "mount --bind '$dir/empty' /usr/include/infiniband && $mk"
    else
        set --
    fi
    if [ $# = 0 ]; then
        echo "skip compile-$n: libibverbs-dev is installed and hiding it needs root and unshare -m"
    elif "$@" >"$dir/err-ex" 2>&1 && [ -x "$dir/nordma/ex/rpcool_kv_pods" ] &&
         ! grep -q -- '-libverbs' "$dir/err-ex"; then
        echo "ok compile-$n"
    else
        echo "FAIL compile-$n: $(grep -v '^$' "$dir/err-ex" | head -3 | tr '\n' ' ')"
    fi
fi

# The README's code blocks, built (and the complete programs run) the same way.
sh tests/readme_check.sh
