#!/usr/bin/env bash
# Runs benchmarks against two tenferrod builds in turn, on the same device, to
# measure a change: each round starts daemon A, runs every benchmark, stops it,
# then the same with daemon B, so drift of the machine falls on both alike.
#
#   scripts/gpu-compare.sh <daemon-a> <daemon-b> <rounds> <out-dir> <bench> [bench ...]
#
# Each daemon runs with --device ${COMPARE_DEVICE:-cuda:0} on a private socket; a benchmark
# is any binary taking that socket as its argument. BENCH lines are written to
# <out-dir>/compare.log prefixed with the daemon's label (A or B) and the round.
# Exits 1 when a daemon did not start or stop cleanly or a benchmark failed.
set -u
[ $# -ge 5 ] || { echo "usage: $0 <daemon-a> <daemon-b> <rounds> <out-dir> <bench>..." >&2; exit 2; }
daemon_a=$1 daemon_b=$2 rounds=$3 out=$4
shift 4
device=${COMPARE_DEVICE:-cuda:0}
ctl=$(dirname "$daemon_b")/tenferroctl
mkdir -p "$out" || exit 2
log="$out/compare.log"
: >"$log"
status=0

# Runs every benchmark against daemon $2 (label $1) for round $3.
run_side() {
    local label=$1 daemon=$2 round=$3 dir sock pid b
    shift 3
    dir=$(mktemp -d /tmp/tf-compare-XXXXXX)
    sock="$dir/tenferrod.sock"
    "$daemon" --device "$device" --socket "$sock" 2>"$out/daemon-$label-$round.log" &
    pid=$!
    for _ in $(seq 300); do
        "$ctl" --socket "$sock" status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for b in "$@"; do
        if ! timeout -k 10 300 "$b" "$sock" >"$dir/out" 2>&1; then
            echo "# $label round $round: $(basename "$b") failed" | tee -a "$log"
            status=1
        fi
        sed -n "s/^\(BENCH .*\)/$label $round \1/p; s/^\(# .*\)/$label $round \1/p" "$dir/out" >>"$log"
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" || { echo "# $label round $round: tenferrod exited non-zero" | tee -a "$log"; status=1; }
    rm -rf "$dir"
}

for r in $(seq "$rounds"); do
    run_side A "$daemon_a" "$r" "$@"
    run_side B "$daemon_b" "$r" "$@"
done
grep '^[AB] [0-9]* BENCH' "$log"
exit $status
