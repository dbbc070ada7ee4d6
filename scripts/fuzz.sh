#!/bin/sh
# Runs the libFuzzer targets that `make fuzz-build` made (docs/fuzzing.md).
#
#   scripts/fuzz.sh run   BUILD SECONDS TARGET...   each target SECONDS from its corpus
#   scripts/fuzz.sh check BUILD SECONDS TARGET...   replays tests/fuzz/regressions/<target>/,
#                                                   then each target SECONDS (make check)
#
# A target starts from the committed seeds (tests/fuzz/corpus/<target>/) and
# the inputs earlier runs kept (BUILD/corpus/<target>/, where new ones go). A
# crash, leak, hang or sanitizer report stops the run with the input saved
# under BUILD/artifacts/<target>/; add it to tests/fuzz/regressions/<target>/
# once the bug is fixed. FUZZ_FLAGS adds libFuzzer flags.
set -eu

mode=$1
build=$2
seconds=$3
shift 3

# Per target: the largest input worth trying.
max_len() {
    case "$1" in
    frame) echo 72000 ;;
    mailbox) echo 8192 ;;
    einsum) echo 256 ;;
    *) echo 16384 ;;
    esac
}

status=0
for t in "$@"; do
    bin=$build/fuzz/fuzz-$t
    seeds=tests/fuzz/corpus/$t
    work=$build/corpus/$t
    artifacts=$build/artifacts/$t
    mkdir -p "$work" "$artifacts"
    if [ "$mode" = check ] && [ -d "tests/fuzz/regressions/$t" ] &&
        [ -n "$(ls -A "tests/fuzz/regressions/$t")" ]; then
        echo "== fuzz-$t: replaying tests/fuzz/regressions/$t"
        "$bin" -runs=1 -timeout=60 tests/fuzz/regressions/"$t"/* >"$build/regressions-$t.log" 2>&1 || {
            tail -n 40 "$build/regressions-$t.log"
            echo "fuzz-$t: a regression input fails again (log: $build/regressions-$t.log)" >&2
            exit 1
        }
    fi
    echo "== fuzz-$t: ${seconds} s from $seeds and $work"
    # shellcheck disable=SC2086
    if ! "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 -max_len="$(max_len "$t")" \
        -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} "$work" "$seeds" \
        >"$build/fuzz-$t.log" 2>&1; then
        tail -n 60 "$build/fuzz-$t.log"
        echo "fuzz-$t: FOUND A BUG; the input is in $artifacts/ (log: $build/fuzz-$t.log)" >&2
        status=1
        continue
    fi
    # The last status line (coverage, features, corpus) and the final statistics.
    grep -E '^#[0-9]+' "$build/fuzz-$t.log" | tail -n 1 | sed "s/^/  fuzz-$t /"
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
        "$build/fuzz-$t.log" | sed "s/^/  fuzz-$t /"
done
exit $status
