#!/bin/sh
# Runs one suite for the Makefile's per-suite targets (run-unit/%, run-integration/%, ...;
# docs/testing.md "Tiers"), so that suites running side by side under `make -jN` stay readable:
# the suite's output goes to its own log, and one line comes out when it ends.
#
#   scripts/run-suite.sh NAME LOG COMMAND [ARG...]
#
# Passed: "PASS  NAME  (S s)". Failed: "FAIL  NAME  (exit N, S s; LOG)", then the whole log,
# printed under a lock (LOG's folder/.print-lock) so two failing suites do not interleave.
# The exit status is the command's. With TF_RUN_VERBOSE=1 (make test-one) the output is also
# shown as it comes, and nothing is printed again on failure.
set -u

name=${1:?usage: run-suite.sh NAME LOG COMMAND [ARG...]}
log=${2:?usage: run-suite.sh NAME LOG COMMAND [ARG...]}
shift 2
[ $# -gt 0 ] || {
    echo "usage: run-suite.sh NAME LOG COMMAND [ARG...]" >&2
    exit 2
}
dir=$(dirname "$log")
mkdir -p "$dir"

now() { date +%s.%N; }
start=$(now)
if [ "${TF_RUN_VERBOSE:-0}" = 1 ]; then
    rcfile=$log.rc
    { "$@" 2>&1; echo $? >"$rcfile"; } | tee "$log"
    rc=$(cat "$rcfile" 2>/dev/null || echo 1)
    rm -f "$rcfile"
else
    "$@" >"$log" 2>&1 </dev/null
    rc=$?
fi
# A Check suite told to run a test case it lacks (CK_RUN_CASE, make test-one CASE=) runs none.
if [ "$rc" -eq 0 ] && [ -n "${CK_RUN_CASE:-}" ] && grep -q 'Checks: 0,' "$log"; then
    msg="run-suite.sh: $name ran no test: it has no test case \"$CK_RUN_CASE\" (CK_RUN_CASE)"
    echo "$msg" >>"$log"
    [ "${TF_RUN_VERBOSE:-0}" != 1 ] || echo "$msg"
    rc=1
fi
secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')

if [ "$rc" -eq 0 ]; then
    echo "PASS  $name  ($secs s)"
    exit 0
fi
report() {
    echo "FAIL  $name  (exit $rc, $secs s; $log)"
    if [ "${TF_RUN_VERBOSE:-0}" != 1 ]; then
        echo "---- $log"
        cat "$log"
        echo "---- end of $name"
    fi
}
if command -v flock >/dev/null 2>&1; then
    # The lock is held while the report is written, through a descriptor of this shell.
    {
        flock 9
        report
    } 9>"$dir/.print-lock"
else
    report
fi
exit "$rc"
