#!/bin/sh
# tests/style_check.sh - the house style that a script can see, in every public header,
# impl/*.h and impl/rpcool/*.h: lines of at most 100 columns (characters, not bytes); a table of
# contents that names exactly the >>anchors of its file and of the impl/ files it includes; one
# divider style, `/* >>name - title ---- */` to column 100; a version macro and string that agree with the
# manual's "version" line. Prints ok/FAIL lines (CONTRIBUTING.md, "A header's layout").
cd "$(dirname "$0")/.." || exit 2
fail=0
say() { # say NAME PROBLEMS: ok when PROBLEMS is empty
    if [ -z "$2" ]; then echo "ok $1"; else echo "FAIL $1: $2"; fail=1; fi
}
defined() { # the anchors a file defines: a divider opening with /* at column 1
    sed -n 's|^/\* \(-* \)\{0,1\}>>\([a-z0-9_-]*\).*|\2|p' "$1"
}
named() { # the anchors its table of contents names: TABLE OF CONTENTS to the first blank line
    sed -n '/TABLE OF CONTENTS/,/^ *$/p' "$1" | grep -o '>>[a-z0-9_-]*' | sed 's/^>>//'
}

files=$(ls shmheap.h rpcool.h krconn.h alock.h nppin.h impl/*.h impl/rpcool/*.h 2>/dev/null)
for f in $files; do
    long=$(LC_ALL=C.UTF-8 grep -n '.\{101,\}' "$f" | cut -d: -f1 | tr '\n' ' ')
    say "columns-$f" "${long:+lines over 100 columns: $long}"

    bad=$(grep -n '^/\* *\(-\{10,\}\|=\{10,\}\|\(-* \)\{0,1\}>>[a-z]\)' "$f" |
          LC_ALL=C.UTF-8 grep -v '^[0-9]*:/\* >>[a-z0-9_-]* - .* --* \*/$' |
          cut -d: -f1 | tr '\n' ' ')
    if [ -z "$bad" ]; then
        bad=$(grep -n '^/\* >>' "$f" | LC_ALL=C.UTF-8 grep -v '^[0-9]*:.\{100\}$' |
              cut -d: -f1 | tr '\n' ' ')
    fi
    say "dividers-$f" "${bad:+not the house divider (/* >>name - title ---- */ to column 100), lines $bad}"

    own=$(defined "$f")
    if grep -q 'TABLE OF CONTENTS' "$f"; then
        have=$( { echo "$own"; for i in $(sed -n 's|^#include "\(impl/[a-z_/]*\.h\)".*|\1|p' "$f"); do
                    [ -f "$i" ] && defined "$i"; done; } | grep . | sort -u)
        toc=$(named "$f" | sort -u)
        missing=$(echo "$toc" | grep . | grep -vxF "$have" | tr '\n' ' ')
        unnamed=$(echo "$have" | grep . | grep -vxF "$toc" | tr '\n' ' ')
        [ -z "$have" ] && missing=$(echo "$toc" | tr '\n' ' ')
        [ -z "$toc" ] && unnamed=$(echo "$have" | tr '\n' ' ')
        say "toc-$f" "$(echo "${missing:+names anchors the file lacks: $missing;}" \
            "${unnamed:+misses anchors: $unnamed}" | sed 's/  */ /g; s/^ //; s/[ ;]*$//')"
    elif [ -n "$own" ]; then # an impl/ file: a header that includes it names its anchors
        by=$(grep -l "^#include \"$f\"" *.h 2>/dev/null | head -1)
        say "toc-$f" "$([ -n "$by" ] || echo "anchors but no table of contents")"
    fi

    case $f in impl/*) continue ;; esac
    P=$(basename "$f" .h | tr a-z A-Z)
    v() { sed -n "s/^#define ${P}_VERSION$1 \\(.*\\)/\\1/p" "$f"; }
    want="\"$(v _MAJOR).$(v _MINOR).$(v _PATCH)\""
    manual="\"$(sed -n '1,6s/.*version \([0-9][0-9.]*\)$/\1/p' "$f")\""
    problem=""
    [ "$(v '')" = "$want" ] || problem="${P}_VERSION $(v '') is not $want"
    [ "$manual" = "$want" ] || problem="${problem:+$problem; }the manual says version $manual"
    say "version-$f" "$problem"
done
[ $fail -eq 0 ]
