#!/bin/sh
# tests/install_check.sh - `make install` and `make uninstall` into a temporary root (DESTDIR), as
# a packager or a user would: the layout (default PREFIX /usr/local, then PREFIX=/opt/rpcool),
# the installed rpcoolctl, examples built outside the tree through pkg-config (PKG_CONFIG_PATH and
# PKG_CONFIG_SYSROOT_DIR) and through CMake (CMAKE_PREFIX_PATH, find_package(rpcool) and its
# targets) and run, `#include <rpcool/rpcool.h>` with the include directory alone, CMake's
# version check, then `make uninstall`: nothing left. The RDMA and protobuf-c parts are checked
# where their packages are installed (else skip lines). Prints ok/FAIL/skip lines (tests/run.sh).
cd "$(dirname "$0")/.." || exit 1
[ -f rpcool.h ] || { echo "FAIL install: run from an rpcool tree"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
src=$(pwd)
MAKE=${MAKE:-make}
ok() { echo "ok install-$1"; }
fail() { n=$1; shift; echo "FAIL install-$n: tests/install_check.sh: $*"; }
tailof() { tail -n 4 "$1" | tr '\n' ' '; }
have_verbs=; pkg-config --exists libibverbs 2>/dev/null && [ -f /usr/include/infiniband/verbs.h ] &&
    have_verbs=1
have_pbc=; pkg-config --exists libprotobuf-c 2>/dev/null && command -v protoc-c >/dev/null &&
    have_pbc=1

# 1. the default PREFIX: the layout, then uninstall
r1=$dir/root1
if $MAKE -s install DESTDIR="$r1" >"$dir/i1.log" 2>&1; then
    p=$r1/usr/local; missing=""
    for f in include/rpcool/shmheap.h include/rpcool/rpcool.h include/rpcool/krconn.h \
        include/rpcool/alock.h include/rpcool/nppin.h bin/rpcoolctl lib/pkgconfig/rpcool.pc \
        lib/pkgconfig/rpcool-rdma.pc lib/pkgconfig/rpcool-pbc.pc \
        lib/cmake/rpcool/rpcoolConfig.cmake lib/cmake/rpcool/rpcoolConfigVersion.cmake \
        $(cd "$src" && ls impl/*.h impl/rpcool/*.h | sed 's|^|include/rpcool/|'); do
        [ -f "$p/$f" ] || missing="$missing $f"
    done
    [ -z "$missing" ] && ok layout || fail layout "not installed under /usr/local:$missing"
    if "$p/bin/rpcoolctl" --help >"$dir/ctl.out" 2>&1 && grep -q usage "$dir/ctl.out"; then
        ok rpcoolctl
    else
        fail rpcoolctl "the installed rpcoolctl --help: $(tailof "$dir/ctl.out")"
    fi
    grep -q '^prefix=/usr/local$' "$p/lib/pkgconfig/rpcool.pc" && ok pc-prefix ||
        fail pc-prefix "rpcool.pc does not say prefix=/usr/local"
    $MAKE -s uninstall DESTDIR="$r1" >"$dir/u1.log" 2>&1
    left=$(cd "$r1" && find . ! -type d | head -5)
    [ -z "$left" ] && [ ! -e "$p/include/rpcool" ] && [ ! -e "$p/lib/cmake/rpcool" ] &&
        ok uninstall-default || fail uninstall-default "left after make uninstall: $left"
else
    fail layout "make install DESTDIR=$r1: $(tailof "$dir/i1.log")"
fi

# 2. PREFIX=/opt/rpcool: build against it from a folder of its own
r=$dir/root; prefix=/opt/rpcool; p=$r$prefix
if ! $MAKE -s install DESTDIR="$r" PREFIX=$prefix >"$dir/i2.log" 2>&1; then
    fail prefix "make install DESTDIR=$r PREFIX=$prefix: $(tailof "$dir/i2.log")"; exit 1
fi
[ -f "$p/include/rpcool/rpcool.h" ] && [ -x "$p/bin/rpcoolctl" ] && ok prefix ||
    fail prefix "nothing under $prefix"
u=$dir/user; mkdir -p "$u/proto"
cp examples/rpcool_echo.c examples/shmheap_list.c examples/krconn_hello.c examples/rpcool_pbc.c "$u/"
cp examples/proto/rpcool_pbc.proto "$u/proto/"
[ -n "$have_pbc" ] && (cd "$u/proto" && protoc-c --c_out=. rpcool_pbc.proto)
export PKG_CONFIG_PATH="$p/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$r"
build_pc() { # build_pc NAME PKG SOURCE: cc with pkg-config's flags, in the user's folder
    (cd "$u" && cc -O2 -Wall -Wextra -Werror "$3" -o "pc-$1" $(pkg-config --cflags --libs "$2")) \
        >"$dir/pc-$1.log" 2>&1
}
if build_pc echo rpcool rpcool_echo.c && "$u/pc-echo" 1000 >"$dir/pc-echo.out" 2>&1; then
    ok pkgconfig-rpcool
else
    fail pkgconfig-rpcool "cc \$(pkg-config --cflags --libs rpcool): $(tailof "$dir/pc-echo.log") $(tailof "$dir/pc-echo.out" 2>/dev/null)"
fi
if [ -n "$have_verbs" ]; then
    if build_pc hello rpcool-rdma krconn_hello.c &&
        pkg-config --libs rpcool-rdma | grep -q -- '-libverbs'; then
        ok pkgconfig-rdma
    else
        fail pkgconfig-rdma "rpcool-rdma: $(pkg-config --libs rpcool-rdma 2>&1) $(tailof "$dir/pc-hello.log")"
    fi
else
    echo "skip install-pkgconfig-rdma: rdma-core's headers or libibverbs.pc are absent"
fi
if [ -n "$have_pbc" ]; then
    if build_pc pbc rpcool-pbc rpcool_pbc.c && "$u/pc-pbc" 100 >"$dir/pc-pbc.out" 2>&1; then
        ok pkgconfig-pbc
    else
        fail pkgconfig-pbc "rpcool-pbc: $(tailof "$dir/pc-pbc.log") $(tailof "$dir/pc-pbc.out" 2>/dev/null)"
    fi
else
    echo "skip install-pkgconfig-pbc: protobuf-c (libprotobuf-c.pc, protoc-c) is absent"
fi
# <rpcool/NAME.h> with the installed include directory alone (as /usr/local/include is by default)
sed 's|#include "shmheap.h"|#include <rpcool/shmheap.h>|' "$u/shmheap_list.c" >"$u/list_sys.c"
if (cd "$u" && cc -O2 -Wall -Wextra -Werror -pthread -I"$p/include" list_sys.c -o list_sys) \
        >"$dir/sys.log" 2>&1 && "$u/list_sys" >"$dir/sys.out" 2>&1 &&
    grep -q "walked 1000 items" "$dir/sys.out"; then
    ok include-rpcool-dir
else
    fail include-rpcool-dir "#include <rpcool/shmheap.h>: $(tailof "$dir/sys.log") $(tailof "$dir/sys.out" 2>/dev/null)"
fi
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# CMake: find_package(rpcool VERSION COMPONENTS ...) and the targets
if command -v cmake >/dev/null; then
    comps=""; [ -n "$have_verbs" ] && comps="$comps rdma"; [ -n "$have_pbc" ] && comps="$comps pbc"
    cat >"$u/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(rpcool_user C)
find_package(rpcool ${WANT} REQUIRED COMPONENTS ${COMPS})
add_executable(echo rpcool_echo.c)
target_link_libraries(echo PRIVATE rpcool::rpcool)
if("rdma" IN_LIST COMPS)
  add_executable(hello krconn_hello.c)
  target_link_libraries(hello PRIVATE rpcool::rdma)
endif()
if("pbc" IN_LIST COMPS)
  add_executable(pbc rpcool_pbc.c)
  target_link_libraries(pbc PRIVATE rpcool::pbc)
endif()
EOF
    want=$(sed -n 's/^#define RPCOOL_VERSION "\([0-9]*\.[0-9]*\).*"/\1/p' rpcool.h)
    if cmake -S "$u" -B "$u/b" -DCMAKE_PREFIX_PATH="$p" -DWANT="$want" -DCOMPS="$(echo $comps | tr ' ' ';')" \
            >"$dir/cm.log" 2>&1 && cmake --build "$u/b" >>"$dir/cm.log" 2>&1 &&
        "$u/b/echo" 1000 >"$dir/cm-echo.out" 2>&1; then
        ok cmake-rpcool
    else
        fail cmake-rpcool "find_package(rpcool $want) and rpcool::rpcool: $(tailof "$dir/cm.log")"
    fi
    for c in $comps; do
        case $c in
            rdma) [ -x "$u/b/hello" ] && ok cmake-rdma || fail cmake-rdma "rpcool::rdma did not build" ;;
            pbc) "$u/b/pbc" 100 >"$dir/cm-pbc.out" 2>&1 && ok cmake-pbc ||
                fail cmake-pbc "rpcool::pbc: $(tailof "$dir/cm-pbc.out")" ;;
        esac
    done
    [ -z "$have_verbs" ] && echo "skip install-cmake-rdma: rdma-core is absent"
    [ -z "$have_pbc" ] && echo "skip install-cmake-pbc: protobuf-c is absent"
    # a version it is not, and a component that does not exist, are refused
    mkdir -p "$u/v"
    cat >"$u/v/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(rpcool_version C)
find_package(rpcool 99.0 QUIET)
set(v99 "${rpcool_FOUND}")
find_package(rpcool 0.1 QUIET)
set(v01 "${rpcool_FOUND}")
find_package(rpcool QUIET COMPONENTS nosuch)
set(nosuch "${rpcool_FOUND}")
find_package(rpcool ${WANT} QUIET)
message(STATUS "v99=${v99} v01=${v01} nosuch=${nosuch} want=${rpcool_FOUND} ${rpcool_VERSION}")
EOF
    version=$(sed -n 's/^#define RPCOOL_VERSION "\(.*\)"/\1/p' rpcool.h)
    cmake -S "$u/v" -B "$u/v/b" -DCMAKE_PREFIX_PATH="$p" -DWANT="$want" >"$dir/cmv.log" 2>&1
    if grep -q "v99=0 v01=0 nosuch=0 want=1 $version\$" "$dir/cmv.log"; then
        ok cmake-version
    else
        fail cmake-version "expected 99.0, 0.1 and COMPONENTS nosuch refused, $want found ($version): $(grep -E 'v99=|Error' "$dir/cmv.log" | head -2 | tr '\n' ' ')"
    fi
else
    echo "skip install-cmake: cmake is absent"
fi

# uninstall: nothing of it left
$MAKE -s uninstall DESTDIR="$r" PREFIX=$prefix >"$dir/u2.log" 2>&1
left=$(cd "$r" && find . ! -type d | head -5)
if [ -z "$left" ] && [ ! -e "$p/include/rpcool" ] && [ ! -e "$p/lib/cmake/rpcool" ]; then
    ok uninstall
else
    fail uninstall "left after make uninstall PREFIX=$prefix: $left $(tailof "$dir/u2.log")"
fi
