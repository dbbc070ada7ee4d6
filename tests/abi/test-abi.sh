#!/usr/bin/env bash
# The ABI of libtenferro-client.so (docs/abi.md):
#   1. the library exports exactly the functions include/tenferro/ declares with TF_EXTERN:
#      a new export without a declaration, or a declaration without an export, fails;
#   2. its soname is libtenferro-client.so.0, and that file is in the build folder;
#   3. a program linked against the build folder's library (no rpath tricks) starts,
#      connects to a daemon and runs an operation.
# Usage: tests/abi/test-abi.sh BUILD
set -euo pipefail
build=${1:-build}
lib="$build/libtenferro-client.so"
fail=0
if [ ! -e "$lib" ]; then
    echo "test-abi: $lib missing (a STATIC_DEPS=1 build makes none): nothing to check"
    exit 0
fi
work=$(mktemp -d /tmp/tf-abi.XXXXXX)
daemon=
# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
    if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# Exported functions and objects, without the version node.
nm -D --defined-only --format=posix "$lib" | awk '$2 != "A" {sub(/@.*/, "", $1); print $1}' |
    sort -u >"$work/exported"
# Declared: the name before the first parenthesis of every TF_EXTERN declaration.
grep -h '^TF_EXTERN' include/tenferro/*.h |
    sed -E 's/.*[^a-zA-Z0-9_](tf_[a-zA-Z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u >"$work/declared"
if ! diff -u "$work/declared" "$work/exported" >"$work/diff"; then
    echo "test-abi: FAIL: exports and declarations differ (- declared only, + exported only):"
    sed -n '3,$p' "$work/diff" | grep '^[-+]'
    fail=1
else
    echo "test-abi: $(wc -l <"$work/exported") exported functions, each declared in include/tenferro/"
fi

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "libtenferro-client.so.0" ] || [ ! -e "$build/$soname" ]; then
    echo "test-abi: FAIL: soname '$soname', or $build/$soname missing"
    fail=1
else
    echo "test-abi: soname $soname, present in $build"
fi

# A program of a user: linked against the build folder, run with LD_LIBRARY_PATH only.
cat >"$work/user.c" <<'PROG'
#include <stdio.h>
#include <tenferro/tenferro.h>
static tf_status twice(tf_view *v, void *arg) {
    tf_tensor *t = arg;
    return tf_view_add(v, t[0], t[0], &t[1]);
}
int main(int argc, char **argv) {
    tf_client *c = NULL;
    if (tf_connect(argv[1], &c) != TF_OK) { fprintf(stderr, "%s\n", tf_client_last_error(c)); return 1; }
    double x[3] = {1, 2, 3};
    int64_t n = 3;
    tf_tensor t[2];
    if (tf_upload(c, TF_F64, 1, &n, x, &t[0]) != TF_OK || tf_with_session(c, twice, t) != TF_OK)
        return 1;
    double y[3];
    void *into = y;
    size_t bytes = sizeof y;
    if (tf_download_into(c, t[1], &into, &bytes) != TF_OK || y[2] != 6.0) return 1;
    tf_disconnect(c);
    printf("user program: 2 * [1 2 3] = [%g %g %g]\n", y[0], y[1], y[2]);
    return 0;
}
PROG
${CC:-cc} -Iinclude -o "$work/user" "$work/user.c" -L"$build" -ltenferro-client
sock="$work/d.sock"
"$build/tenferrod" --device cpu --socket "$sock" 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
if ! LD_LIBRARY_PATH="$build" "$work/user" "$sock"; then
    echo "test-abi: FAIL: a program linked against $lib does not run"
    fail=1
fi
exit $fail
