#!/bin/sh
# The README's source map names every source file of daemon/, common/ and client/ exactly
# once, and names nothing that does not exist. A header with a .c (or .cu) of the same name is
# named with it; one without is named on its own. Names are written relative to daemon/ (so
# daemon/backend/cpu/x.c is `cpu/x.c`, daemon/backend/x.c is `backend/x.c`), to common/ and
# to client/.
#   scripts/check-source-map.sh [README]
set -eu
cd "$(dirname "$0")/.."
readme=${1:-README.md}
daemon_map=$(sed -n '/^### The daemon and the shared code/,/^### The client library/p' "$readme")
client_map=$(sed -n '/^### The client library/,/^## /p' "$readme")
fail=0

# The name a file goes by in the map.
map_name() {
    case "$1" in
    daemon/backend/cpu/*) echo "cpu/${1#daemon/backend/cpu/}" ;;
    daemon/backend/cuda/*) echo "cuda/${1#daemon/backend/cuda/}" ;;
    daemon/backend/*) echo "backend/${1#daemon/backend/}" ;;
    daemon/*) echo "${1#daemon/}" ;;
    common/*) echo "${1#common/}" ;;
    client/*) echo "${1#client/}" ;;
    esac
}

# Counts `name` in a section's text.
count_in() {
    printf '%s\n' "$2" | grep -o "\`$1\`" | wc -l
}

for f in $(find daemon common client -type f \( -name '*.c' -o -name '*.cu' -o -name '*.h' -o -name '*.map' \) | sort); do
    case "$f" in
    *.h) stem=${f%.h}; if [ -e "$stem.c" ] || [ -e "$stem.cu" ]; then continue; fi ;;
    esac
    name=$(map_name "$f")
    case "$f" in client/*) text=$client_map ;; *) text=$daemon_map ;; esac
    n=$(count_in "$name" "$text")
    if [ "$n" -ne 1 ]; then
        echo "check-source-map: $f is named $n times in $readme's source map (as \`$name\`); once is right"
        fail=1
    fi
done

# Every name in the map is a file.
check_exists() {
    # shellcheck disable=SC2016 # the backquotes are literal: they delimit a name in the map
    for name in $(printf '%s\n' "$2" | grep -o '`[A-Za-z0-9_./-]*\.\(c\|cu\|h\|map\)`' | tr -d '`' | sort -u); do
        found=0
        for dir in $1; do [ -e "$dir/$name" ] && found=1; done
        if [ "$found" -eq 0 ]; then
            echo "check-source-map: $readme names \`$name\`, which is not a file under $1"
            fail=1
        fi
    done
}
check_exists "daemon daemon/backend common" "$daemon_map"
check_exists "client" "$client_map"

[ "$fail" -eq 0 ] && echo "check-source-map: every file of daemon/, common/ and client/ is named once"
exit "$fail"
