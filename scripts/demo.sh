#!/bin/sh
# The demo (`make demo`, docs/demo.md):
#
#   scripts/demo.sh [BUILD]          DEMO_SEED=N repeats a run's random inputs
#
# Starts tenferrod on the best device present (--device auto) under the `wait`
# admission policy, then runs several client processes at once against it:
#   holder          holds the device in two held sessions (a stage each);
#   tn-sweep-1, -2  MPS/MPO expectation-value sweeps (einsum, c128);
#   fft-solver-1,-2 a spectral heat-equation solver (rfft/irfft, f64 and f32);
#   dmrg-1, dmrg-2  two-site DMRG of the Heisenberg chain (Python, examples/dmrg/):
#                   L=12 against exact diagonalization, L=32 against numpy in-process.
# The DMRG clients need the Python package ($BUILD/pyenv, `make python-package`;
# DEMO_PYTHON=path names another interpreter that imports tenferro); without it
# they are skipped, and the script says so.
# The holder starts first; the others start once it holds the device, so their
# first session entries queue behind it. While they run, `tenferroctl status
# --json` is sampled. Each client prints one result line; the table after them
# (examples/demo-report.c) adds what the daemon saw. Then tenferrod is stopped.
#
# Exits non-zero if a client fails its check, the daemon's memory in use is not
# back where it was, or the daemon does not stop cleanly.
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${DEMO_PYTHON:-$BUILD/pyenv/bin/python}
# The DMRG clients' sizes (docs/demo.md).
DMRG_EXACT_ARGS=${DEMO_DMRG_EXACT_ARGS:---sites 12 --chi 64 --sweeps 4}
DMRG_LONG_ARGS=${DEMO_DMRG_LONG_ARGS:---sites 32 --chi 64 --sweeps 2}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/tenferro-demo.XXXXXX")
SOCK=$DIR/tenferrod.sock
LOG=$DIR/tenferrod.log
DAEMON=""
SAMPLER=""
CLIENTS=""

cleanup() {
    rc=$?
    [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null || true
    for entry in $CLIENTS; do kill "${entry##*:}" 2>/dev/null || true; done
    [ -z "$DAEMON" ] || kill "$DAEMON" 2>/dev/null || true
    if [ "$rc" -eq 0 ]; then rm -rf "$DIR"; else echo "demo: logs kept in $DIR" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "demo: $*" >&2
    echo "---- $LOG" >&2
    tail -n 30 "$LOG" >&2
    exit 1
}

ctl() { "$BUILD/tenferroctl" --socket "$SOCK" "$@"; }

# Starts client NAME (PROGRAM ARGS...) in the background; its output goes to $DIR/NAME.out.
start_client() {
    name=$1
    shift
    prog=$1
    shift
    TENFERRO_CLIENT_NAME=$name timeout 120 "$BUILD/examples/$prog" "$SOCK" "$@" \
        </dev/null >"$DIR/$name.out" 2>"$DIR/$name.err" &
    CLIENTS="$CLIENTS $name:$!"
}

# Starts Python client NAME (SCRIPT ARGS...) as start_client does; SCRIPT is under examples/.
# Its numpy runs on one thread: OpenBLAS's spinning threads in several processes on a small
# machine would take the cores from everyone else.
start_py_client() {
    name=$1
    shift
    script=$1
    shift
    OPENBLAS_NUM_THREADS=1 TENFERRO_CLIENT_NAME=$name timeout 120 \
        "$PYTHON" "$ROOT/examples/$script" "$SOCK" "$@" \
        </dev/null >"$DIR/$name.out" 2>"$DIR/$name.err" &
    CLIENTS="$CLIENTS $name:$!"
}

# True when $PYTHON runs and imports the package with its linear algebra.
have_python() { [ -x "$PYTHON" ] && "$PYTHON" -c 'import tenferro.linalg' >/dev/null 2>&1; }

# True while the status report shows a held session.
device_held() { ctl status --json 2>/dev/null | grep -q '"holder_client_id":[0-9]'; }

# True once the only client left is tenferroctl itself.
clients_gone() { [ "$(ctl status --json 2>/dev/null | grep -o '"pid":' | wc -l)" -eq 1 ]; }

start=$(date +%s.%N)
"$BUILD/tenferrod" --device auto --socket "$SOCK" --reservation-policy wait \
    --wait-deadline-ms 60000 --fftw-wisdom "" 2>"$LOG" &
DAEMON=$!
i=0
until ctl status >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 400 ] || ! kill -0 "$DAEMON" 2>/dev/null; then fail "tenferrod did not start"; fi
    sleep 0.05
done
echo "== tenferrod: $(sed -n 's/^<[0-9]>tenferrod info: \(tenferrod .* serving .*\)/\1/p' "$LOG")"
ctl status --json >"$DIR/before.json"

DMRG=0
if have_python; then DMRG=1; fi
echo "== clients, at once: holder (two held stages), tn-sweep-1 and -2 (MPS/MPO sweeps, c128),"
if [ $DMRG -eq 1 ]; then
    echo "   fft-solver-1 and -2 (heat equation on a 64^3 grid, f64 and f32),"
    echo "   dmrg-1 and -2 (Heisenberg chain, DMRG in Python: L=12 vs exact, L=32 vs numpy)"
else
    echo "   fft-solver-1 and -2 (heat equation on a 64^3 grid, f64 and f32)"
    echo "   (dmrg-1 and -2 skipped: no $PYTHON that imports tenferro; make python-package)"
fi
start_client holder demo-holder
i=0
until device_held; do
    i=$((i + 1))
    if [ $i -gt 500 ] || ! kill -0 "${CLIENTS##*:}" 2>/dev/null; then
        cat "$DIR/holder.err" >&2
        fail "the holder never held the device"
    fi
    sleep 0.02
done
start_client tn-sweep-1 demo-tn-sweep
start_client tn-sweep-2 demo-tn-sweep
start_client fft-solver-1 demo-fft-solver
start_client fft-solver-2 demo-fft-solver --f32
if [ $DMRG -eq 1 ]; then
    # shellcheck disable=SC2086 # the arguments are words
    start_py_client dmrg-1 dmrg/demo_dmrg.py $DMRG_EXACT_ARGS --against exact
    # shellcheck disable=SC2086
    start_py_client dmrg-2 dmrg/demo_dmrg.py $DMRG_LONG_ARGS --against numpy
fi

(
    while [ ! -e "$DIR/clients-done" ]; do
        ctl status --json >>"$DIR/samples.jsonl" 2>/dev/null || true
        sleep 0.05
    done
) &
SAMPLER=$!

REPORT_ARGS=""
for entry in $CLIENTS; do
    name=${entry%%:*}
    rc=0
    wait "${entry##*:}" || rc=$?
    REPORT_ARGS="$REPORT_ARGS --client $name $rc $DIR/$name.out"
done
CLIENTS=""
touch "$DIR/clients-done"
wait "$SAMPLER" || true
SAMPLER=""

echo "== each client's result line"
for arg in $REPORT_ARGS; do
    case $arg in
    *.out)
        grep '^DEMO ' "$arg" || true
        if [ -s "${arg%.out}.err" ]; then sed 's/^/   stderr: /' "${arg%.out}.err"; fi
        ;;
    esac
done

# The daemon frees a client's tensors once its stream drains; give that a moment.
i=0
until clients_gone; do
    i=$((i + 1))
    [ $i -lt 100 ] || break
    sleep 0.05
done
ctl status --json >"$DIR/after.json"

echo "== what happened"
report=0
# shellcheck disable=SC2086
"$BUILD/examples/demo-report" "$DIR/before.json" "$DIR/after.json" "$DIR/samples.jsonl" \
    $REPORT_ARGS || report=$?

kill -TERM "$DAEMON"
rc=0
wait "$DAEMON" || rc=$?
DAEMON=""
[ $rc -eq 0 ] || fail "tenferrod exited with status $rc at SIGTERM"
end=$(date +%s.%N)
echo "== tenferrod stopped cleanly (SIGTERM, exit 0); the demo took $(echo "$start $end" | awk '{printf "%.1f", $2 - $1}') s"
[ $report -eq 0 ] || exit 1
