#!/bin/sh
# tests/demo_fresh.sh [TREE] - `make demo` as a new user first runs it: in a fresh copy of the
# tracked files of TREE (default: this work tree, uncommitted changes included, nothing built), on
# a machine without the optional packages. As root, in a private mount namespace (unshare), an
# overlay on /usr removes every file of rdma-core's and protobuf-c's packages (headers, libraries,
# protoc-c); stand-ins for dpkg-query (those packages "not installed") and apt-get (records a
# call, fails) go first on PATH. Checks: the Makefile's probes say yes outside where the packages
# are and no inside; `make demo` with DEPS_NO_OPTIONAL=1 passes, ends with its verdict line, says
# what it left out, and never runs apt-get. Prints ok/FAIL/skip lines (tests/run.sh, host tier).
cd "$(dirname "$0")/.." || exit 1
tree=${1:-.}
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "skip demo-fresh: needs root and unshare (util-linux) to hide packages"; exit 0
fi
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
mkdir "$dir/src" "$dir/bin" "$dir/ov"

# the fresh copy: the tracked files only, as they are in the tree
if ! [ -f "$tree/Makefile" ] || ! [ -f "$tree/rpcool.h" ] ||
    ! git -C "$tree" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "skip demo-fresh: $tree is not a git work tree of rpcool (the copy is of its tracked files)"
    exit 0
fi
(cd "$tree" && git ls-files -z | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
    tar -xf - -C "$dir/src"
[ -f "$dir/src/Makefile" ] || { echo "FAIL demo-fresh-copy: no Makefile copied from $tree"; exit 1; }

# what a machine without the optional packages lacks: each file of these packages under /usr
pkgs="libibverbs-dev libibverbs1 ibverbs-providers ibverbs-utils rdma-core librdmacm-dev
      librdmacm1 rdmacm-utils libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler"
for p in $pkgs; do dpkg -L "$p" 2>/dev/null; done >"$dir/hide"
ls -d /usr/include/infiniband /usr/include/rdma /usr/include/protobuf-c \
    /usr/include/google/protobuf-c /usr/bin/protoc-c /usr/bin/protoc-gen-c \
    /usr/lib/*/libibverbs* /usr/lib/*/librdmacm* /usr/lib/*/libprotobuf-c* \
    /usr/lib/*/pkgconfig/libibverbs.pc /usr/lib/*/pkgconfig/librdmacm.pc \
    /usr/lib/*/pkgconfig/libprotobuf-c.pc 2>/dev/null >>"$dir/hide"
cat >"$dir/bin/dpkg-query" <<EOF
#!/bin/sh
for a; do case \$a in $(echo $pkgs | tr ' ' '|')) exit 1 ;; esac; done
exec /usr/bin/dpkg-query "\$@"
EOF
cat >"$dir/bin/apt-get" <<EOF
#!/bin/sh
echo "apt-get \$*" >>"$dir/apt-get.calls"; exit 1
EOF
chmod +x "$dir/bin/dpkg-query" "$dir/bin/apt-get"

# outside: the probes find what is installed
want_v=no; [ -f /usr/include/infiniband/verbs.h ] && want_v=yes
want_p=no; [ -f /usr/include/protobuf-c/protobuf-c.h ] && command -v protoc-c >/dev/null && want_p=yes
got=$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$dir/src" config 2>&1 | tr '\n' ' ')
case $got in
    *"libibverbs-dev): $want_v "*"protobuf-c-compiler): $want_p "*)
        echo "ok demo-fresh-probes-installed" ;;
    *) echo "FAIL demo-fresh-probes-installed: expected rdma-core $want_v, protobuf-c $want_p: $got" ;;
esac

# inside: hide, probe, run the demo (each result in a file for the checks below)
unshare --mount sh -c '
    d=$1
    mount -t tmpfs rpcool-demo-fresh "$d/ov" && mkdir "$d/ov/up" "$d/ov/work" &&
        mount -t overlay overlay -o "lowerdir=/usr,upperdir=$d/ov/up,workdir=$d/ov/work" /usr ||
        { echo "cannot mount an overlay on /usr" >"$d/nsfail"; exit 1; }
    while read -r f; do
        case $(realpath -m "$f") in /usr/*) [ -d "$f" ] || rm -f "$f" ;; esac
    done <"$d/hide"
    rm -rf /usr/include/infiniband /usr/include/rdma /usr/include/protobuf-c \
        /usr/include/google/protobuf-c
    left=$(ls -d /usr/include/infiniband/verbs.h /usr/include/protobuf-c/protobuf-c.h \
        /usr/bin/protoc-c /usr/lib/*/libibverbs.so /usr/lib/*/libprotobuf-c.so 2>/dev/null)
    [ -z "$left" ] || { echo "still there: $left" >"$d/nsfail"; exit 1; }
    cd "$d/src" || exit 1
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s config >"$d/config.out" 2>&1
    PATH=$d/bin:$PATH DEPS_NO_OPTIONAL=1 timeout 500 env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make demo >"$d/demo.out" 2>&1
    echo $? >"$d/demo.rc"
' sh "$dir" 2>"$dir/ns.err"
if [ -s "$dir/nsfail" ] || [ ! -f "$dir/demo.rc" ]; then
    echo "skip demo-fresh: could not hide the packages: $(cat "$dir/nsfail" "$dir/ns.err" 2>/dev/null | head -2 | tr '\n' ' ')"
    exit 0
fi

got=$(tr '\n' ' ' <"$dir/config.out")
case $got in
    *"libibverbs-dev): no "*"protobuf-c-compiler): no "*) echo "ok demo-fresh-probes-hidden" ;;
    *) echo "FAIL demo-fresh-probes-hidden: expected no and no with the packages hidden: $got" ;;
esac
rc=$(cat "$dir/demo.rc")
verdict=$(tail -n 1 "$dir/demo.out")
show() { echo "    make demo (exit status $rc), its last lines:"; tail -n 12 "$dir/demo.out" | sed 's/^/    | /'; }
if [ "$rc" = 0 ] && echo "$verdict" | grep -Eq '^demo: all [0-9]+ steps passed'; then
    echo "ok demo-fresh-passes"
else
    echo "FAIL demo-fresh-passes: tests/demo_fresh.sh: make demo without rdma-core and protobuf-c: $verdict"
    show
fi
if echo "$verdict" | grep -q 'left out:.*protobuf-c' && echo "$verdict" | grep -q 'left out:.*libibverbs-dev' &&
    grep -q 'Left out: protobuf-c is not installed' "$dir/demo.out" &&
    grep -q 'rdma-core is not installed' "$dir/demo.out"; then
    echo "ok demo-fresh-says-left-out"
else
    echo "FAIL demo-fresh-says-left-out: tests/demo_fresh.sh: the demo does not say it left out protobuf-c and RDMA: $verdict"
fi
if [ -s "$dir/apt-get.calls" ]; then
    echo "FAIL demo-fresh-no-apt-get: DEPS_NO_OPTIONAL=1, yet: $(head -1 "$dir/apt-get.calls")"
else
    echo "ok demo-fresh-no-apt-get"
fi
