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

# A new user: the headers and impl/ in an empty folder, each example built with plain cc.
for ex in examples/*.c; do
    n=$(basename "$ex" .c)
    cp "$ex" "$dir/$n.c"
    libs=$(sed -n 's|^// LIBS: ||p' "$ex")
    if (cd "$dir" && cc -O2 -pthread "$n.c" -o "$n" $libs 2>err-$n); then
        echo "ok example-builds-alone-$n"
    else
        echo "FAIL example-builds-alone-$n: $(head -3 "$dir/err-$n" | tr '\n' ' ')"
    fi
done
"$dir/shmheap_list" >"$dir/out" 2>&1 && grep -q "walked 1000 items" "$dir/out" &&
    echo "ok example-runs-alone-shmheap_list" || echo "FAIL example-runs-alone-shmheap_list: $(cat "$dir/out")"

# The README's code blocks, built (and the complete programs run) the same way.
sh tests/readme_check.sh
