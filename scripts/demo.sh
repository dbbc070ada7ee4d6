#!/bin/sh
# The demo (`make demo`, docs/demo.md):
#
#   scripts/demo.sh [BUILD]          DEMO_SEED=N repeats a run's random inputs
#
# Starts tenferrod on the best device present (--device auto) under the `wait`
# admission policy, then runs several client processes at once against it:
#   holder          holds the device in two held sessions (a stage each);
#   tn-sweep-1, -2  MPS/MPO expectation-value sweeps (einsum, c128);
#   fft-solver-1,-2 a spectral heat-equation solver (rfft/irfft, f64 and f32).
# The holder starts first; the others start once it holds the device, so their
# first session entries queue behind it. While they run, `tenferroctl status
# --json` is sampled. Each client prints one result line; the table after them
# (examples/demo-report.c) adds what the daemon saw. Then tenferrod is stopped.
#
# Exits non-zero if a client fails its check, the daemon's memory in use is not
# back where it was, or the daemon does not stop cleanly.
set -eu
BUILD=${1:-build}
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

echo "== clients, at once: holder (two held stages), tn-sweep-1 and -2 (MPS/MPO sweeps, c128),"
echo "   fft-solver-1 and -2 (heat equation on a 64^3 grid, f64 and f32)"
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
