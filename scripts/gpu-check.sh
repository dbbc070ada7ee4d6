#!/usr/bin/env bash
# The one command for the GPU machine: tests and GPU benchmarks of a build made elsewhere.
#
#   scripts/gpu-check.sh [build-dir] [out-dir]      (defaults: build-gpu, ${OUT:-/tmp/gpu-out})
#
# Run from the repository root, after `make STATIC_DEPS=1 BUILD=build-gpu all` on the build
# machine and with build-gpu carried over. In order:
#   1. the device (nvidia-smi -L) and the driver version;
#   2. the unit tests in <build-dir>/tests (those with a source in tests/unit/);
#   3. the integration suites in <build-dir>/tests (the others), against
#      TENFERRO_DAEMON=<build-dir>/tenferrod with TENFERRO_TEST_DEVICE=cuda:0, and
#      test-transfers once more with busy polling off (Transfer frames, not the mailbox);
#   4. <build-dir>/tenferrod --device cuda:0 on a private socket, every
#      <build-dir>/bench/gpu/* benchmark with that socket, then SIGTERM (exit 0 expected);
#      bench-multi starts daemons of its own instead (two on cuda:0 on a one-GPU machine);
#      linalg-routines (in-process cuSOLVER/cuBLAS only, no daemon: the routine probe, ROUTINE
#      lines, under two minutes) runs right after bench-linalg; then bench/dmrg_sweep.py --gpu
#      against the same daemon (L = 32, chi 512: tenferro on the daemon against CuPy, else
#      PyTorch, in-process, and against the variant that decomposes on the host after a
#      download; BENCH dmrg_sweep and dmrg_sweep_host_svd lines), with the tenferro Python
#      package from <build-dir>/pytf (else copied from <build-dir>/pyenv);
#   5. bench/gpu/linalg_torch.py: PyTorch's timings of bench-linalg's cases on the same device
#      (BENCH <case>_torch torch=<ms> lines), when python3 has torch and the device is a GPU.
# Each suite and benchmark runs under a timeout, and the timeouts shrink so that the whole
# run stays inside GPU_CHECK_BUDGET seconds (default 420); whatever does not fit is
# reported as skipped, which counts as a failure.
#
# Writes <out-dir>/gpu-check.log (everything), <out-dir>/summary.txt (device, driver, date,
# per-suite check counts parsed from Check's "Checks: N, Failures: F, Errors: E" lines,
# per-benchmark status, all BENCH lines, the ROUTINE lines of bench-linalg and linalg-routines), one log per suite and
# benchmark under <out-dir>/suites and <out-dir>/bench, the benchmark daemon's log, and the logs
# that failed integration tests left in /tmp. The summary is written as the run goes, so a run cut short
# still leaves what it did. Exits 1 when a suite or benchmark failed or was skipped, or the
# daemon did not start or stop cleanly; 2 on bad usage.
#
# Knobs (environment): SUITE_TIMEOUT (300 s), BENCH_TIMEOUT (180 s), GPU_CHECK_BUDGET (420 s),
# BENCH_RESERVE (150 s kept for the benchmarks while the suites run), CK_TIMEOUT_MULTIPLIER
# (2: Check's per-test timeouts, since a CUDA daemon takes longer to start than a CPU one),
# GPU_CHECK_DEVICE (cuda:0; another device, or cpu to try the script on a machine without a GPU),
# ROUTINE_PROBE (1; 0 leaves linalg-routines out), DMRG_BENCH (1; 0 leaves the DMRG sweep out),
# DMRG_TIMEOUT (150 s: the DMRG sweep's limit; its sweeps stop after two rounds once a third
# would pass DMRG_TIMEOUT - 60 s).
set -u

build=${1:-build-gpu}
out=${2:-${OUT:-/tmp/gpu-out}}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
GPU_CHECK_BUDGET=${GPU_CHECK_BUDGET:-420}
BENCH_RESERVE=${BENCH_RESERVE:-150}
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-2}
DEVICE=${GPU_CHECK_DEVICE:-cuda:0}
ROUTINE_PROBE=${ROUTINE_PROBE:-1}
DMRG_BENCH=${DMRG_BENCH:-1}
DMRG_TIMEOUT=${DMRG_TIMEOUT:-150}

# Unit tests by name, for builds whose sources are not next to them.
KNOWN_UNIT="test-cpu-kernels test-op-table test-config-table test-executor test-frame test-id-table test-reservation test-shape-rules test-cuda-backend test-contract-rules test-contract-plan test-cpu-contract test-cuda-contract test-cuda-graph test-cuda-linalg test-fft-rules test-fft-layout test-plan-cache"
# Integration suites run first, in this order; any other integration test follows.
PREFERRED_INTEGRATION="test-peer-copy test-sessions test-bad-input test-operations"

if [ ! -x "$build/tenferrod" ] || [ ! -x "$build/tenferroctl" ] || [ ! -d "$build/tests" ]; then
    echo "gpu-check.sh: $build has no tenferrod, tenferroctl or tests/: build it first" \
         "(make STATIC_DEPS=1 BUILD=$build all)" >&2
    exit 2
fi
mkdir -p "$out/suites" "$out/bench" "$out/test-daemon-logs" || exit 2
log="$out/gpu-check.log"
summary="$out/summary.txt"

# Appends a line to the summary.
note() { printf '%s\n' "$*" >>"$summary"; }

# Seconds a step may take: at most $1, and no more than the budget leaves after keeping $2.
time_for() {
    local cap=$1 keep=$2 left
    left=$((deadline - SECONDS - keep))
    if [ "$left" -lt "$cap" ]; then echo "$left"; else echo "$cap"; fi
}

# Prints "checks failures errors runners" summed over Check's summary lines in file $1.
check_counts() {
    grep -E 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$1" |
        awk '{ for (i = 1; i < NF; i++) {
                   if ($i == "Checks:") c += $(i + 1)
                   if ($i == "Failures:") f += $(i + 1)
                   if ($i == "Errors:") e += $(i + 1)
               } }
             END { printf "%d %d %d %d\n", c, f, e, NR }'
}

# 0 when test binary $1 is a unit test (by its source, else by the known list).
is_unit() {
    local name=$1
    if [ -f "tests/unit/$name.c" ]; then return 0; fi
    if [ -f "tests/integration/$name.c" ]; then return 1; fi
    case " $KNOWN_UNIT " in *" $name "*) return 0 ;; esac
    return 1
}

# Runs test binary $2 of kind $1 (unit|integration) and records its row in the summary; an
# optional $3 names the run and $4 is one more VAR=value for its environment.
run_suite() {
    local kind=$1 path=$2 name limit started rc counts checks fails errs runners result
    name=${3:-$(basename "$path")}
    limit=$(time_for "$SUITE_TIMEOUT" "$BENCH_RESERVE")
    if [ "$limit" -lt 20 ]; then
        echo "== $kind $name: SKIPPED (time budget spent)"
        note "$(printf '%-22s %-11s %-9s' "$name" "$kind" SKIPPED)"
        failures=$((failures + 1))
        return
    fi
    echo "== $kind $name (timeout ${limit}s)"
    # Unit suites get the device too: test-cuda-backend runs only when it names a GPU.
    local envs=("TENFERRO_TEST_DEVICE=$DEVICE")
    if [ "$kind" = integration ]; then
        envs+=("TENFERRO_DAEMON=$daemon_abs")
    fi
    [ -n "${4:-}" ] && envs+=("$4")
    started=$SECONDS
    env "${envs[@]}" timeout -k 10 "$limit" "$path" 2>&1 | tee "$out/suites/$name.log"
    rc=${PIPESTATUS[0]}
    counts=$(check_counts "$out/suites/$name.log")
    read -r checks fails errs runners <<<"$counts"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        result=TIMEOUT
    elif [ "$rc" = 0 ] && [ "$fails" = 0 ] && [ "$errs" = 0 ]; then
        result=pass
        [ "$runners" = 0 ] && result="pass(?)" # exit 0 without a Check summary line
    else
        result=FAIL
    fi
    case $result in TIMEOUT | FAIL) failures=$((failures + 1)) ;; esac
    echo "== $kind $name: $result (exit $rc; checks $checks, failures $fails, errors $errs; $((SECONDS - started)) s)"
    note "$(printf '%-22s %-11s %-9s %6s %6s %6s %6s %5s %4s' "$name" "$kind" "$result" \
        "$checks" "$((checks - fails - errs))" "$fails" "$errs" "$rc" "$((SECONDS - started))s")"
}

# Stops the benchmark daemon: SIGTERM, up to 30 s, then SIGKILL. Sets daemon_rc.
stop_daemon() {
    daemon_rc=none
    [ -n "$dpid" ] || return
    kill -TERM "$dpid" 2>/dev/null
    local waited=0
    while kill -0 "$dpid" 2>/dev/null && [ "$waited" -lt 300 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$dpid" 2>/dev/null; then
        echo "gpu-check: tenferrod did not exit within 30 s of SIGTERM: killing it"
        kill -KILL "$dpid" 2>/dev/null
    fi
    wait "$dpid"
    daemon_rc=$?
    dpid=
}

# PyTorch's timings of bench-linalg's cases (bench/gpu/linalg_torch.py, no daemon involved), as a
# benchmark row of its own; not run when python3 has no torch or the device is not a GPU.
run_torch_linalg() {
    local script=bench/gpu/linalg_torch.py limit started rc result
    [ -f "$script" ] || return
    case $DEVICE in cuda:*) ;; *) return ;; esac
    if ! python3 -c 'import torch' >/dev/null 2>&1; then
        echo "== bench linalg_torch: not run (python3 has no torch)"
        note "$(printf '%-22s %-9s' linalg_torch n/a)"
        return
    fi
    limit=$(time_for "$BENCH_TIMEOUT" 5)
    if [ "$limit" -lt 20 ]; then
        echo "== bench linalg_torch: SKIPPED (time budget spent)"
        note "$(printf '%-22s %-9s' linalg_torch SKIPPED)"
        failures=$((failures + 1))
        return
    fi
    echo "== bench linalg_torch (timeout ${limit}s)"
    started=$SECONDS
    PYTHONUNBUFFERED=1 timeout -k 10 "$limit" python3 "$script" --device "$DEVICE" 2>&1 |
        tee "$out/bench/linalg_torch.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then result=ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=TIMEOUT; else result=FAIL; fi
    [ "$rc" = 0 ] || failures=$((failures + 1))
    echo "== bench linalg_torch: $result (exit $rc, $((SECONDS - started)) s)"
    note "$(printf '%-22s %-9s %5s %4s' linalg_torch "$result" "$rc" "$((SECONDS - started))s")"
}

# The tenferro Python package for the DMRG sweep: <build>/pytf (docs/dmrg.md), else a copy of
# the one in <build>/pyenv's site-packages (its extension is abi3 and links only libc); prints
# the folder to put on PYTHONPATH, nothing when there is none.
tenferro_pythonpath() {
    local d
    if [ -d "$build/pytf/tenferro" ]; then
        (cd "$build/pytf" && pwd)
        return
    fi
    for d in "$build"/pyenv/lib/python3*/site-packages/tenferro; do
        [ -d "$d" ] || continue
        mkdir -p "$workdir/pytf" && cp -r "$d" "$workdir/pytf/" && echo "$workdir/pytf"
        return
    done
}

# The DMRG sweep at chi 512 (bench/dmrg_sweep.py --gpu) against the running daemon on socket $1:
# tenferro through the daemon, CuPy (else PyTorch) in-process, and the host-SVD variant.
run_dmrg() {
    local sock=$1 script=bench/dmrg_sweep.py limit started rc result pp
    [ "$DMRG_BENCH" = 0 ] && return
    [ -f "$script" ] || return
    case $DEVICE in cuda:*) ;; *) return ;; esac
    pp=$(tenferro_pythonpath)
    if [ -z "$pp" ] || ! PYTHONPATH="$pp" python3 -c 'import tenferro, numpy' >/dev/null 2>&1; then
        echo "== bench dmrg_sweep: MISSING: no importable tenferro Python package (make" \
             "STATIC_DEPS=1 BUILD=$build all python-package, then mkdir -p $build/pytf &&" \
             "cp -r $build/pyenv/lib/python3.*/site-packages/tenferro $build/pytf/; docs/dmrg.md)"
        note "$(printf '%-22s %-9s' dmrg_sweep MISSING)"
        failures=$((failures + 1))
        return
    fi
    limit=$(time_for "$DMRG_TIMEOUT" 10)
    if [ "$limit" -lt 60 ]; then
        echo "== bench dmrg_sweep: SKIPPED (time budget spent)"
        note "$(printf '%-22s %-9s' dmrg_sweep SKIPPED)"
        failures=$((failures + 1))
        return
    fi
    echo "== bench dmrg_sweep (L=32 chi=512, timeout ${limit}s, PYTHONPATH=$pp)"
    started=$SECONDS
    PYTHONPATH="$pp" PYTHONUNBUFFERED=1 timeout -k 10 "$limit" python3 "$script" --gpu \
        --sites 32 --chi 512 --sweeps 3 --budget $((limit - 60)) "$sock" 2>&1 |
        tee "$out/bench/dmrg_sweep.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then result=ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=TIMEOUT; else result=FAIL; fi
    [ "$rc" = 0 ] || failures=$((failures + 1))
    echo "== bench dmrg_sweep: $result (exit $rc, $((SECONDS - started)) s)"
    note "$(printf '%-22s %-9s %5s %4s' dmrg_sweep "$result" "$rc" "$((SECONDS - started))s")"
}

# Runs on exit (trap): a daemon still running is killed, the private socket folder removed.
# shellcheck disable=SC2317
cleanup() {
    if [ -n "${dpid:-}" ]; then kill -KILL "$dpid" 2>/dev/null; fi
    if [ -n "${workdir:-}" ]; then rm -rf "$workdir"; fi
}

main() {
    deadline=$((SECONDS + GPU_CHECK_BUDGET))
    failures=0
    dpid=
    workdir=$(mktemp -d /tmp/tf-gpu-check-XXXXXX) || exit 2
    trap cleanup EXIT
    touch "$workdir/start"
    daemon_abs="$(cd "$build" && pwd)/tenferrod"

    local devices driver date_utc commit
    if command -v nvidia-smi >/dev/null 2>&1; then
        devices=$(nvidia-smi -L 2>&1)
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1)
    else
        devices="nvidia-smi not found"
        driver=unknown
    fi
    date_utc=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
    # The build folder says which commit it was made from; the checkout here may lag behind it.
    if [ -s "$build/commit" ]; then
        commit=$(cat "$build/commit")
    else
        commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    fi
    echo "# tenferrod GPU check: build $build, commit $commit, $date_utc"
    echo "# device: $devices"
    echo "# driver: $driver"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,persistence_mode,compute_mode \
            --format=csv 2>&1 | sed 's/^/# /'
    fi
    echo "# machine: $(nproc) cpus, $(uname -sr); CK_TIMEOUT_MULTIPLIER=$CK_TIMEOUT_MULTIPLIER"

    : >"$summary"
    note "tenferrod GPU check"
    note "date:    $date_utc"
    note "device:  $devices"
    note "driver:  $driver"
    note "build:   $build (commit $commit), daemon and integration suites on $DEVICE"
    note ""
    note "$(printf '%-22s %-11s %-9s %6s %6s %6s %6s %5s %4s' suite kind result checks passed failed errors exit time)"

    # ---- suites: unit tests, then integration suites ----
    local t name ordered=()
    for t in "$build"/tests/test-*; do
        if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
        is_unit "$(basename "$t")" && run_suite unit "$t"
    done
    for name in $PREFERRED_INTEGRATION; do
        [ -x "$build/tests/$name" ] && ordered+=("$build/tests/$name")
    done
    for t in "$build"/tests/test-*; do
        if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
        name=$(basename "$t")
        is_unit "$name" && continue
        case " $PREFERRED_INTEGRATION " in *" $name "*) continue ;; esac
        ordered+=("$t")
    done
    for t in "${ordered[@]}"; do run_suite integration "$t"; done
    # On a GPU the daemon polls by default, so transfers take the mailbox: run them once more
    # with polling off, through Transfer frames.
    if [ -x "$build/tests/test-transfers" ]; then
        run_suite integration "$build/tests/test-transfers" test-transfers-socket \
            TENFERRO_TEST_BUSY_POLL_US=0
    fi
    find /tmp -maxdepth 1 -name 'tf-test-*.log' -newer "$workdir/start" -print 2>/dev/null |
        while read -r f; do tail -c 1000000 "$f" >"$out/test-daemon-logs/$(basename "$f")"; done

    # ---- benchmarks against one cuda:0 daemon ----
    note ""
    note "$(printf '%-22s %-9s %5s %4s' benchmark result exit time)"
    local sock="$workdir/tenferrod.sock" dlog="$out/tenferrod-bench.log" ready=0 i
    echo "== starting $build/tenferrod --device $DEVICE --socket $sock"
    "$build/tenferrod" --device "$DEVICE" --socket "$sock" 2>"$dlog" &
    dpid=$!
    for i in $(seq 1 300); do
        if ! kill -0 "$dpid" 2>/dev/null; then break; fi
        if [ -S "$sock" ] && "$build/tenferroctl" --socket "$sock" status >/dev/null 2>&1; then
            ready=1
            break
        fi
        sleep 0.1
    done
    if [ "$ready" != 1 ]; then
        echo "gpu-check: tenferrod --device $DEVICE did not start (after ${i} polls); its log:"
        cat "$dlog"
        note "$(printf '%-22s %-9s' daemon-start FAIL)"
        failures=$((failures + 1))
        stop_daemon
    else
        echo "# daemon: $("$build/tenferroctl" --socket "$sock" status | sed -n 's/^device:[[:space:]]*//p')"
        local b limit started rc args multi_args=(--same-gpu --gpus 2) benches=() probed=0
        # bench-multi starts its own daemons, one per GPU; on one GPU, two on it.
        if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then multi_args=(); fi
        # In name order, but the routine probe (linalg-routines) right after bench-linalg.
        local probe="$build/bench/gpu/linalg-routines"
        [ "$ROUTINE_PROBE" = 0 ] && probed=1
        for b in "$build"/bench/gpu/*; do
            [ "$b" = "$probe" ] && continue
            benches+=("$b")
            if [ "$(basename "$b")" = bench-linalg ] && [ "$probed" = 0 ] && [ -x "$probe" ]; then
                benches+=("$probe")
                probed=1
            fi
        done
        if [ "$probed" = 0 ] && [ -x "$probe" ]; then benches+=("$probe"); fi
        for b in "${benches[@]}"; do
            if [ ! -f "$b" ] || [ ! -x "$b" ]; then continue; fi
            name=$(basename "$b")
            limit=$(time_for "$BENCH_TIMEOUT" 15)
            if [ "$limit" -lt 20 ]; then
                echo "== bench $name: SKIPPED (time budget spent)"
                note "$(printf '%-22s %-9s' "$name" SKIPPED)"
                failures=$((failures + 1))
                continue
            fi
            args=("$sock")
            if [ "$name" = bench-multi ]; then
                args=(--daemon "$daemon_abs" --ctl "$build/tenferroctl" "${multi_args[@]}")
            fi
            # The routine probe is cuSOLVER in-process alone: no socket.
            [ "$name" = linalg-routines ] && args=()
            echo "== bench $name (timeout ${limit}s)"
            started=$SECONDS
            timeout -k 10 "$limit" "$b" "${args[@]}" 2>&1 | tee "$out/bench/$name.log"
            rc=${PIPESTATUS[0]}
            if [ "$rc" = 0 ]; then result=ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=TIMEOUT; else result=FAIL; fi
            [ "$rc" = 0 ] || failures=$((failures + 1))
            echo "== bench $name: $result (exit $rc, $((SECONDS - started)) s)"
            note "$(printf '%-22s %-9s %5s %4s' "$name" "$result" "$rc" "$((SECONDS - started))s")"
            if ! kill -0 "$dpid" 2>/dev/null; then
                echo "gpu-check: tenferrod died during $name; its log:"
                tail -n 50 "$dlog"
                note "$(printf '%-22s %-9s' daemon DIED)"
                failures=$((failures + 1))
                break
            fi
        done
        if kill -0 "$dpid" 2>/dev/null; then run_dmrg "$sock"; fi
        echo "== stopping tenferrod (SIGTERM)"
        stop_daemon
        if [ "$daemon_rc" = 0 ]; then
            echo "== tenferrod exited 0"
            note "$(printf '%-22s %-9s %5s' daemon-stop ok 0)"
        else
            echo "gpu-check: tenferrod exited with status $daemon_rc after SIGTERM; its log ends:"
            tail -n 50 "$dlog"
            note "$(printf '%-22s %-9s %5s' daemon-stop FAIL "$daemon_rc")"
            failures=$((failures + 1))
        fi
    fi

    run_torch_linalg

    note ""
    note "BENCH lines:"
    cat "$out"/bench/*.log 2>/dev/null | grep '^BENCH ' >>"$summary"
    # The in-process cuSOLVER routines of bench-linalg (one time each) and of linalg-routines
    # (the routine probe: kind, dtype, shape, routine, ms, err), for the daemon's routine table.
    if cat "$out"/bench/*.log 2>/dev/null | grep -q '^ROUTINE '; then
        note ""
        note "ROUTINE lines:"
        cat "$out"/bench/*.log 2>/dev/null | grep '^ROUTINE ' >>"$summary"
    fi
    note ""
    if [ "$failures" = 0 ]; then
        note "overall: PASS ($SECONDS s)"
    else
        note "overall: FAIL ($failures failed or skipped steps; $SECONDS s)"
    fi
    echo
    echo "===== summary ($summary)"
    cat "$summary"
    [ "$failures" = 0 ]
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
