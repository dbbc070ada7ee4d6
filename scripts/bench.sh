#!/usr/bin/env bash
# Runs every benchmark of a build against a private CPU tenferrod.
#
#   scripts/bench.sh <build-dir> [bench-name ...]
#
# With names, only those benchmarks run (make check runs bench-hostile this way); the name
# `python` selects the Python package's benchmarks (python/bench/run_bench.py), and `dmrg` the
# DMRG sweep (bench/dmrg_sweep.py, cpu_dmrg_sweep), which run after the C ones when
# $build/pyenv exists.
# Starts <build-dir>/tenferrod --device cpu on a socket under /tmp, waits until
# it answers `tenferroctl status`, runs each <build-dir>/bench/* binary with the
# socket path as its argument, then stops the daemon with SIGTERM and checks
# that it exited 0. BENCH lines go to stdout; every other line starts with '#'.
# Exits non-zero when a benchmark failed (functionally: timings never fail) or
# the daemon did not start or stop cleanly.
set -u

build=${1:?usage: scripts/bench.sh <build-dir> [bench-name ...]}
shift
only=" $* "
daemon="$build/tenferrod"
ctl="$build/tenferroctl"
for f in "$daemon" "$ctl"; do
    [ -x "$f" ] || { echo "bench.sh: $f is missing: build first (make BUILD=$build all)" >&2; exit 2; }
done

cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
echo "# machine: $(nproc) cpus, ${cpu_model:-unknown cpu}, $(uname -sr)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# build: $build, device cpu"

workdir=$(mktemp -d /tmp/tf-bench-XXXXXX)
socket="$workdir/tenferrod.sock"
log="$workdir/tenferrod.log"
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
    rm -rf "$workdir"
}
trap cleanup EXIT

"$daemon" --device cpu --socket "$socket" 2>"$log" &
pid=$!

ready=0
for _ in $(seq 1 500); do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "bench.sh: tenferrod exited at start:" >&2; cat "$log" >&2; exit 1
    fi
    if [ -S "$socket" ] && "$ctl" --socket "$socket" status >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.01
done
if [ "$ready" != 1 ]; then
    echo "bench.sh: tenferrod did not answer on $socket:" >&2; cat "$log" >&2; exit 1
fi
echo "# daemon: $("$ctl" --socket "$socket" status | sed -n 's/^device:[[:space:]]*//p')"

failed=0
for b in "$build"/bench/*; do
    if [ ! -f "$b" ] || [ ! -x "$b" ]; then continue; fi
    if [ "$only" != "  " ] && [[ "$only" != *" $(basename "$b") "* ]]; then continue; fi
    echo "# running $(basename "$b")"
    if ! "$b" "$socket"; then
        echo "bench.sh: $(basename "$b") FAILED" >&2
        failed=1
    fi
done

# The Python package's benchmarks (python/bench/run_bench.py, docs/benchmarks.md "Python"),
# when the package is installed in $build/pyenv (make python-package) and no names were given.
if [ "$only" = "  " ] || [[ "$only" == *" python "* ]]; then
    if [ -x "$build/pyenv/bin/python" ] && [ -x "$build/pybench/held-chain" ]; then
        echo "# running python/bench/run_bench.py"
        if ! "$build/pyenv/bin/python" python/bench/run_bench.py "$socket" "$build"; then
            echo "bench.sh: python/bench/run_bench.py FAILED" >&2
            failed=1
        fi
    else
        echo "# python benchmarks skipped: no $build/pyenv or $build/pybench (make python-package and the pybench programs; make bench builds them)"
    fi
fi

# The DMRG sweep through the daemon against the same Python code on numpy (bench/dmrg_sweep.py).
if [ "$only" = "  " ] || [[ "$only" == *" dmrg "* ]]; then
    py="$build/pyenv/bin/python"
    if [ -x "$py" ] && "$py" -c 'import tenferro.linalg' 2>/dev/null; then
        echo "# running bench/dmrg_sweep.py"
        if ! "$py" bench/dmrg_sweep.py "$socket"; then
            echo "bench.sh: bench/dmrg_sweep.py FAILED" >&2
            failed=1
        fi
    else
        echo "# dmrg benchmark skipped: no $build/pyenv with tenferro.linalg (make python-package)"
    fi
fi

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
if [ "$rc" != 0 ]; then
    echo "bench.sh: tenferrod exited with status $rc after SIGTERM:" >&2; cat "$log" >&2
    failed=1
fi
[ "$failed" = 0 ] || exit 1
echo "# all benchmarks ran; tenferrod stopped cleanly"
