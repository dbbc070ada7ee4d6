#!/usr/bin/env python3
"""demo-dmrg: the DMRG client of the demo (docs/demo.md, examples/dmrg/dmrg.py).

    demo_dmrg.py [SOCKET] [--sites 12] [--chi 64] [--sweeps 4] [--krylov 10]
                 [--against exact|numpy]

Runs the two-site DMRG of the Heisenberg chain through tenferrod (one held
session per sweep, so it queues behind other clients' held sessions under
the daemon's `wait` policy), then the same code on numpy in this process,
and prints the demo's result line:

  DEMO name=dmrg-1 pid=... seed=... work=88 unit=bonds flops=... bytes=...
       daemon_ms=... inproc_ms=... waits=1 wait_ms=612.0 check=OK -- ...

--against exact (the default for L <= 14) checks the daemon's energy against
exact diagonalization to 1e-10; --against numpy checks it against the numpy
run to 1e-9. Either way the host waits of every sweep must not exceed its
bonds (and must equal the session's own count where the package has one).
A session open that took longer than 50 ms counts as a wait. Exits 1 when a
check fails. $DEMO_SEED repeats a run's random initial state.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import backends as bk  # noqa: E402
import dmrg  # noqa: E402

WAIT_THRESHOLD_S = 0.05  # examples/demo-common.h: DEMO_WAIT_THRESHOLD_S


def main() -> int:
    p = argparse.ArgumentParser(description="the demo's DMRG client")
    p.add_argument("socket", nargs="?", default=None)
    p.add_argument("--sites", type=int, default=12)
    p.add_argument("--chi", type=int, default=64)
    p.add_argument("--sweeps", type=int, default=4)
    p.add_argument("--krylov", type=int, default=10)
    p.add_argument("--cutoff", type=float, default=1e-10)
    p.add_argument("--against", choices=("exact", "numpy"), default=None)
    args = p.parse_args()
    against = args.against or ("exact" if args.sites <= 14 and args.sites % 2 == 0 else "numpy")
    name = os.environ.get("TENFERRO_CLIENT_NAME", "dmrg")
    seed = int(os.environ.get("DEMO_SEED", "0")) or ((time.time_ns() ^ (os.getpid() << 20))
                                                     % (1 << 62))
    bonds = 2 * (args.sites - 1)

    t0 = time.perf_counter()
    b = bk.TenferroBackend(args.socket, name=name)
    try:
        res = dmrg.run(b, args.sites, args.chi, args.sweeps, args.krylov, args.cutoff, seed,
                       verbose=False)
        b.finish()
    finally:
        total = time.perf_counter() - t0
        b.close()
    opens = b.open_seconds
    waited = [s for s in opens if s > WAIT_THRESHOLD_S]
    daemon_s = total - sum(opens)

    t0 = time.perf_counter()
    ref = dmrg.run(bk.NumpyBackend(), args.sites, args.chi, args.sweeps, args.krylov,
                   args.cutoff, seed, verbose=False)
    inproc_s = time.perf_counter() - t0

    problems = []
    if against == "exact":
        target = dmrg.exact_energy(args.sites)
        tol = 1e-10
        what = "exact diagonalization"
    else:
        target = ref.energy
        tol = 1e-9
        what = "the same code on numpy here"
    err = abs(res.energy - target)
    if not err <= tol:
        problems.append("energy off by %.1e" % err)
    waits = [s.waits for s in res.sweeps]
    if max(waits) > bonds:
        problems.append("%d host waits in a sweep of %d bonds" % (max(waits), bonds))
    counted = [s.session_waits for s in res.sweeps]
    if all(c is not None for c in counted) and counted != waits:
        problems.append("the session counted %s host waits, the program %s" % (counted, waits))
    session = ("session counter %d" % counted[-1] if counted[-1] is not None
               else "no session counter")

    ok = not problems
    note = ("L=%d chi %d, %d sweeps x %d bonds, Lanczos %d: E = %.12f vs %s %.12f: err %.1e "
            "(tol %.0e); host waits per sweep %d (%s, <= %d bonds)%s" % (
                args.sites, args.chi, args.sweeps, bonds, args.krylov, res.energy, what, target,
                err, tol, waits[-1], session, bonds,
                "" if ok else "; FAILED: " + ", ".join(problems)))
    print("DEMO name=%s pid=%d seed=%d work=%d unit=bonds flops=%.4g bytes=%.4g daemon_ms=%.1f "
          "inproc_ms=%.1f waits=%d wait_ms=%.1f check=%s -- %s" % (
              name, os.getpid(), seed, args.sweeps * bonds, res.flops, b.bytes, daemon_s * 1e3,
              inproc_s * 1e3, len(waited), sum(waited) * 1e3, "OK" if ok else "FAILED", note),
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
