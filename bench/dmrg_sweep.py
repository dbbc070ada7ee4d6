#!/usr/bin/env python3
"""The DMRG sweep benchmarks (examples/dmrg/): BENCH lines, tenferrod against in-process code.

    python3 bench/dmrg_sweep.py SOCKET                       cpu_dmrg_sweep (make bench)
    python3 bench/dmrg_sweep.py --gpu SOCKET                 dmrg_sweep, against a CUDA daemon
    python3 bench/dmrg_sweep.py --gpu --daemon build-gpu/tenferrod [--device cuda:0]
                                                             the same, starting its own daemon
    python3 bench/dmrg_sweep.py --gpu --budget 90 SOCKET     at most 90 s of sweeps (after two)

Each line is `BENCH <name> tenferrod=<x> baseline=<y> unit=ms`: milliseconds per sweep
(2 (L - 1) bond optimizations, left to right and back), both sides measured in this run,
the same code (examples/dmrg/dmrg.py) from the same random state:

  cpu_dmrg_sweep        L = 32, chi 64 (the demo's longer chain), 10 Lanczos steps per
                        bond: tenferro through the daemon (one held session per sweep, one
                        host wait per bond) against numpy in this process
  dmrg_sweep            L = 32, chi 512, on a CUDA daemon, against the same code on CuPy
                        (else PyTorch) in this process: cuBLAS and cuSOLVER either way;
                        cutoff 1e-13, low enough that the middle bonds stay at 512 and high
                        enough that no Schmidt value at rounding level is kept (their
                        singular vectors are noise)
  dmrg_sweep_host_svd   the same sweep through the daemon against the variant that
                        downloads each two-site matrix and decomposes it with numpy here,
                        uploading the factors back

The MPS starts at its full bond dimension (a random state, right-canonicalized), the
sides take turns sweep by sweep (so a load phase of a shared machine falls on both), one
sweep warms up, and the figure is the median of the sweeps after it (--sweeps, 3 by
default on the GPU: 1 warm-up and 2 timed; 4 on the CPU; --budget S stops after the second
round of sweeps when another round, as long as the last, would end past S seconds of sweeping,
so scripts/gpu-check.sh stays within its time). '#' lines give each run's
energies, host waits per sweep and device. Timings never fail; the script exits non-zero
when a run breaks or the energies of the two sides of a line differ by more than 1e-8.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "dmrg"))
import backends as bk  # noqa: E402
import dmrg  # noqa: E402

ENERGY_TOL = 1e-8


def report(name: str, res: dmrg.Result, args: argparse.Namespace) -> None:
    per = ", ".join("%.1f" % (s.seconds * 1e3) for s in res.sweeps)
    waits = "/".join(str(s.waits) for s in res.sweeps)
    counted = "/".join("-" if s.session_waits is None else str(s.session_waits)
                       for s in res.sweeps)
    print("# %-18s L=%d chi=%d: E = %.12f; ms per sweep %s; host waits per sweep %s "
          "(session counter %s); largest bond %d; %s" % (
              name, args.sites, args.chi, res.energy, per, waits, counted,
              res.sweeps[-1].max_bond, res.device), flush=True)


def interleaved(names: list[str], socket: str | None,
                args: argparse.Namespace) -> list[dmrg.Result]:
    """Runs the backends side by side, one sweep each in turn, from the same random state.

    Taking turns puts a load phase of a shared machine on every side alike.
    """
    backends = [bk.make_backend(n, socket, client_name="bench-dmrg-" + n) for n in names]
    try:
        runs = [dmrg.Run(b, args.sites, args.chi, args.krylov, args.cutoff, args.seed,
                         verbose=False, init_chi=args.chi) for b in backends]
        start = time.monotonic()
        for i in range(args.sweeps):
            began = time.monotonic()
            for r in runs:
                r.sweep()
            now = time.monotonic()
            if (args.budget and i + 1 >= 2 and i + 1 < args.sweeps
                    and (now - start) + (now - began) > args.budget):
                print("# stopping after %d rounds of sweeps: another (%.0f s) would pass the "
                      "%.0f s budget" % (i + 1, now - began, args.budget), flush=True)
                break
    finally:
        for b in backends:
            b.close()
    for n, r in zip(names, runs):
        report(n, r.result, args)
    return [r.result for r in runs]


def timed(res: dmrg.Result) -> float:
    """Milliseconds per sweep: the median of the sweeps after the first."""
    return statistics.median(s.seconds for s in res.sweeps[1:] or res.sweeps) * 1e3


def line(name: str, ours: dmrg.Result, base: dmrg.Result) -> int:
    print("BENCH %s tenferrod=%.4g baseline=%.4g unit=ms" % (name, timed(ours), timed(base)))
    diff = abs(ours.energy - base.energy)
    print("# %s: tenferrod/baseline = %.3f (baseline: %s); |dE| = %.1e" % (
        name, timed(ours) / timed(base), base.backend, diff), flush=True)
    if not diff <= ENERGY_TOL:
        print("dmrg_sweep.py: %s: the energies differ by %.1e" % (name, diff), file=sys.stderr)
        return 1
    return 0


def start_daemon(path: str, device: str) -> tuple[subprocess.Popen, str, str]:
    workdir = tempfile.mkdtemp(prefix="tf-bench-dmrg-")
    sock = os.path.join(workdir, "tenferrod.sock")
    log = open(os.path.join(workdir, "tenferrod.log"), "w")
    proc = subprocess.Popen([path, "--device", device, "--socket", sock], stderr=log)
    ctl = os.path.join(os.path.dirname(path), "tenferroctl")
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("tenferrod exited at start (log %s)" % log.name)
        if os.path.exists(sock) and subprocess.run(
                [ctl, "--socket", sock, "status"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL).returncode == 0:
            return proc, sock, workdir
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("tenferrod did not answer on %s" % sock)


def main() -> int:
    p = argparse.ArgumentParser(description="DMRG sweep benchmarks")
    p.add_argument("socket", nargs="?", default=None)
    p.add_argument("--gpu", action="store_true", help="dmrg_sweep against a CUDA daemon")
    p.add_argument("--daemon", default=None, help="start this tenferrod (with --device)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--sites", type=int, default=32)
    p.add_argument("--chi", type=int, default=None, help="64 on the CPU, 512 with --gpu")
    p.add_argument("--sweeps", type=int, default=None, help="4 on the CPU, 3 with --gpu")
    p.add_argument("--krylov", type=int, default=10)
    p.add_argument("--cutoff", type=float, default=None,
                   help="1e-10 on the CPU; 1e-13 with --gpu (the middle bonds stay at chi)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of sweeping after which no further round starts (after two)")
    args = p.parse_args()
    args.chi = args.chi or (512 if args.gpu else 64)
    args.sweeps = args.sweeps or (3 if args.gpu else 4)
    if args.cutoff is None:
        args.cutoff = 1e-13 if args.gpu else 1e-10

    proc = workdir = None
    sock = args.socket
    if args.daemon:
        proc, sock, workdir = start_daemon(args.daemon, args.device if args.gpu else "cpu")
    failed = 0
    try:
        if not args.gpu:
            ours, ref = interleaved(["tenferro", "numpy"], sock, args)
            failed += line("cpu_dmrg_sweep", ours, ref)
        else:
            base_name = next((n for n in ("cupy", "torch") if bk.available(n)), None)
            if base_name is None:
                print("# dmrg_sweep: neither cupy nor torch imports here: no in-process baseline")
            names = ["tenferro", "tenferro+host-svd"] + ([base_name] if base_name else [])
            res = interleaved(names, sock, args)
            if base_name:
                failed += line("dmrg_sweep", res[0], res[2])
            failed += line("dmrg_sweep_host_svd", res[0], res[1])
    finally:
        if proc is not None:
            proc.terminate()
            rc = proc.wait(timeout=60)
            if rc != 0:
                print("dmrg_sweep.py: tenferrod exited %d at SIGTERM" % rc, file=sys.stderr)
                failed += 1
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
