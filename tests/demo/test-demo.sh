#!/bin/sh
# The demo's test (`make test-demo`, part of `make test`):
#
#   tests/demo/test-demo.sh BUILD
#
# (a) runs scripts/demo.sh on the built tree as `make demo` does and checks
#     that it exits 0 and that its table says what docs/demo.md promises: a
#     row per client with its check OK (the DMRG clients' too, unless the demo
#     skipped them for want of the Python package), waits behind the held session (seen by
#     the daemon and counted by the clients), both plan caches listed, memory
#     back to baseline, the daemon stopped cleanly;
# (b) feeds demo-report a failed client line and a daemon whose memory did not
#     come back, and checks that each makes it exit 1 (the demo's non-zero exit).
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD" >&2
    exit 2
fi
BUILD=$1
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/tf-test-demo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP PIPE

fail() {
    echo "test-demo: FAIL: $*" >&2
    [ ! -f "$tmp/demo.out" ] || sed 's/^/  | /' "$tmp/demo.out" >&2
    exit 1
}

# True when the demo's output has a line matching the extended regular expression $1.
has() { grep -Eq -e "$1" "$tmp/demo.out"; }

# (a) the demo itself
rc=0
scripts/demo.sh "$BUILD" >"$tmp/demo.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "scripts/demo.sh exited with status $rc"
has '^client +pid +work +GFLOP +MB moved +daemon ms +in-process ms +waits +waited ms +check$' ||
    fail "no table header"
names="holder tn-sweep-1 tn-sweep-2 fft-solver-1 fft-solver-2"
# The DMRG clients (Python) run when the build has the package; the demo says when it skips them.
if has '^   \(dmrg-1 and -2 skipped'; then
    echo "test-demo: the DMRG clients were skipped (no Python package in $BUILD/pyenv)"
else
    names="$names dmrg-1 dmrg-2"
fi
for name in $names; do
    has "^DEMO name=$name .* check=OK -- " || fail "no result line of $name"
    has "^$name +[0-9]+ +[0-9]+ [a-z]+ .* OK$" || fail "no OK row for $name"
done
has '^  admission +[1-9][0-9]* session entries queued behind a held session, 0 timed out; the clients counted [1-9]' ||
    fail "no waits behind the held session"
has '^(tn-sweep|fft-solver)-[12] .* [1-9][0-9]* +[0-9.]+ +OK$' || fail "no client row shows a wait"
has '^  reservation +held in [1-9]' || fail "the samples never saw the device held"
has ' fftw_plans | fft_plans ' || fail "no FFT plan cache listed"
has ' contraction_plans ' || fail "no contraction plan cache listed"
has '^  memory .*: back to baseline$' || fail "memory not back to baseline"
has '^demo: every check OK$' || fail "no final verdict"
has '^== tenferrod stopped cleanly' || fail "tenferrod did not stop cleanly"
seconds=$(sed -n 's/.*the demo took \([0-9.]*\) s$/\1/p' "$tmp/demo.out")
echo "test-demo: the demo passed in $seconds s"

# (b) the report's verdicts
report="$BUILD/examples/demo-report"
status='{"device":"cpu","policy":"wait","clients":[{"id":1,"pid":1,"name":"tenferroctl"}],"reservations":[],"counters":{"device_bytes_live":LIVE,"device_allocations_live":0},"caches":[]}'
echo "$status" | sed 's/LIVE/0/' >"$tmp/zero.json"
echo "$status" | sed 's/LIVE/4096/' >"$tmp/leak.json"
: >"$tmp/samples.jsonl"
line='DEMO name=x pid=1 seed=1 work=1 unit=steps flops=1 bytes=1 daemon_ms=1 inproc_ms=1 waits=0 wait_ms=0'
echo "$line check=OK -- fine" >"$tmp/ok.out"
echo "$line check=FAILED -- wrong" >"$tmp/bad.out"
"$report" "$tmp/zero.json" "$tmp/zero.json" "$tmp/samples.jsonl" --client x 0 "$tmp/ok.out" \
    >"$tmp/r.out" || fail "demo-report failed a good run: $(cat "$tmp/r.out")"
for case in "zero bad.out 0" "zero ok.out 1" "leak ok.out 0" "zero missing.out 0"; do
    # shellcheck disable=SC2086 # the case is three words
    set -- $case
    rc=0
    "$report" "$tmp/zero.json" "$tmp/$1.json" "$tmp/samples.jsonl" --client x "$3" "$tmp/$2" \
        >"$tmp/r.out" || rc=$?
    [ "$rc" -eq 1 ] || fail "demo-report exited $rc for after=$1, result $2, exit status $3 (want 1)"
done
echo "test-demo: demo-report fails a failed check, a failed client, a missing line and a leak"
