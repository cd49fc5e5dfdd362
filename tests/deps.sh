#!/bin/sh
# tests/deps.sh demo|host|vm|bench - make sure the Debian packages a job needs are installed.
# As root, installs what is missing (apt-get update first); otherwise says what to install.
# DEPS_EXTRA="PKG ..." adds packages; DEPS_NO_OPTIONAL=1 leaves out the job's optional ones.
set -u
job=${1:-host}
case $job in
    demo)  pkgs="gcc make"; opt="libprotobuf-c-dev protobuf-c-compiler" ;; # opt: the protobuf-c example
    host)  pkgs="gcc g++ make valgrind spin libibverbs-dev libprotobuf-c-dev protobuf-c-compiler python3 util-linux cmake pkgconf" ;; # examples and tests link -libverbs, -lprotobuf-c; python3 parses rpcoolctl --json, setpriv (util-linux) runs it as a test user, unshare hides packages from `make demo` (tests/demo_fresh.sh); cmake and pkgconf build against `make install` (tests/install_check.sh)
    vm)    pkgs="qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev perftest libcxl-dev ndctl rdmacm-utils" ;;
    bench) pkgs="gcc g++ make iceoryx hyperfine libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libiceoryx-binding-c-dev libgrpc-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler gnuplot-nox" ;;
    *) echo "usage: $0 demo|host|vm|bench"; exit 2 ;;
esac
[ -n "${DEPS_EXTRA:-}" ] && pkgs="$pkgs $DEPS_EXTRA"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# optional packages: installed as root with the others (unless DEPS_NO_OPTIONAL=1, as on a machine
# without them: tests/demo_fresh.sh); otherwise what needs them is left out
if [ -n "${opt:-}" ] && [ -z "${DEPS_NO_OPTIONAL:-}" ] && [ "$(id -u)" = 0 ] &&
    command -v apt-get >/dev/null; then
    for p in $opt; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null || {
        echo "apt-get install failed for:$missing"; exit 1; }
else
    echo "missing Debian packages:$missing"
    echo "install them with: sudo apt-get install$missing"
    exit 1
fi
