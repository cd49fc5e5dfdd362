#!/bin/sh
# tests/readme_check.sh [README] - every ```c block of README.md builds as a new user would build
# it: the headers and impl/ copied into an empty folder, plain cc, C11, -Wall -Wextra -Werror.
# A block with a main() is linked and run (it must exit 0 within 20 s); any other block must
# compile to an object file. Called by tests/compile_check.sh; prints "ok readme-block-N" or
# "FAIL readme-block-N: README.md:LINE: why" (LINE: the block's first line).
cd "$(dirname "$0")/.." || exit 1
readme=${1:-README.md}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cp $(ls shmheap.h rpcool.h krconn.h alock.h nppin.h 2>/dev/null) "$dir/"; cp -r impl "$dir/impl"
# block-N.c per block, and block-N.line: the README line the block starts on
awk -v dir="$dir" '
    /^```c[ \t]*$/ && !inside { inside = 1; n++; f = dir "/block-" n ".c"; printf "" > f
                                print NR + 1 > (dir "/block-" n ".line"); next }
    /^```[ \t]*$/ && inside   { inside = 0; close(f); next }
    inside                    { print > f }
' "$readme"
n=0
for src in "$dir"/block-*.c; do
    [ -f "$src" ] || continue
    n=$((n + 1))
    b=$(basename "$src" .c)
    name="readme-$b"
    at="$readme:$(cat "$dir/$b.line")"
    if grep -q '^int main' "$src"; then
        if ! (cd "$dir" && cc -std=c11 -Wall -Wextra -Werror -pthread "$b.c" -o "$b" 2>"$b.err"); then
            echo "FAIL $name: $at: does not build: $(head -3 "$dir/$b.err" | tr '\n' ' ')"
        elif (cd "$dir" && timeout 20 "./$b" >"$b.out" 2>&1); then
            echo "ok $name"
        else
            echo "FAIL $name: $at: built, but running it failed: $(head -3 "$dir/$b.out" | tr '\n' ' ')"
        fi
    elif (cd "$dir" && cc -std=c11 -Wall -Wextra -Werror -pthread -c "$b.c" -o "$b.o" 2>"$b.err"); then
        echo "ok $name"
    else
        echo "FAIL $name: $at: does not compile: $(head -3 "$dir/$b.err" | tr '\n' ' ')"
    fi
done
[ $n -gt 0 ] || echo "FAIL readme-blocks: no \`\`\`c block found in $readme"
