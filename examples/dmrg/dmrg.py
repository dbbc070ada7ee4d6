#!/usr/bin/env python3
"""Two-site DMRG of the spin-1/2 Heisenberg chain, one code on several backends.

    H = sum_i S_i . S_{i+1}   (open boundaries, L sites)

    python3 examples/dmrg/dmrg.py [--backends numpy,tenferro] [--sites 12] [--chi 64]
            [--sweeps 6] [--krylov 10] [--cutoff 1e-10] [--seed N] [--socket PATH]
            [--exact] [--compare] [--checks]

The algorithm is written once against backends.Backend (numpy in this
process, tenferrod through the tenferro package, CuPy, PyTorch):

  * the MPO of H, bond dimension 5;
  * a random MPS brought to right-canonical form by SVDs from the right;
  * left and right environments, each update three pairwise einsums;
  * at each bond a Lanczos eigensolver of a fixed number of Krylov steps
    with full reorthogonalization, all on the device: the basis V [k, ...]
    and H V are tensors grown by outer products with unit vectors, the
    projected matrix T = V (H V)^T is one einsum, its eigenproblem is
    solved by the backend's eigh, the Ritz vector is an einsum; the
    matrix-vector product is four pairwise einsums over the two-site tensor;
  * a truncated SVD of the optimized two-site tensor (maximum bond dimension
    chi, singular values above the cutoff, multiplets kept whole), the
    singular values absorbed toward the sweep direction;
  * sweeps left to right and back.

No scalar leaves the device inside a bond: the only host wait of a bond is
the kept rank of its truncation. The last bond of a sweep (the chain's left
edge, where the bond is at most 2 wide and nothing is cut) truncates by
chi alone, which needs no wait, and its wait is instead the sweep's energy.
So a sweep of 2 (L - 1) bonds makes 2 (L - 1) host waits.

--exact compares with exact diagonalization (numpy, the Sz = 0 sector, even
L <= 14); --compare compares the backends' energies with the first one's;
--checks runs the two checks of this example (L = 12, chi 64 against exact
diagonalization to 1e-10 on every backend given; L = 32, chi 64, every
backend against numpy to 1e-9) and exits 1 if one fails.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import backends as bk  # noqa: E402

D_PHYS = 2
MPO_BOND = 5


# ---------------------------------------------------------------- the model
def heisenberg_mpo(n_sites: int) -> list[np.ndarray]:
    """The MPO of the Heisenberg chain: W[i] of shape [wl, wr, s_out, s_in].

    The bulk tensor (rows: left bond, columns: right bond)
        [ I    0      0      0   0 ]
        [ S+   0      0      0   0 ]
        [ S-   0      0      0   0 ]
        [ Sz   0      0      0   0 ]
        [ 0   S-/2   S+/2   Sz   I ]
    with the last row at the left end and the first column at the right end.
    """
    sp = np.array([[0.0, 1.0], [0.0, 0.0]])
    sm = sp.T.copy()
    sz = np.diag([0.5, -0.5])
    eye = np.eye(2)
    w = np.zeros((MPO_BOND, MPO_BOND, 2, 2))
    w[0, 0] = eye
    w[1, 0] = sp
    w[2, 0] = sm
    w[3, 0] = sz
    w[4, 1] = 0.5 * sm
    w[4, 2] = 0.5 * sp
    w[4, 3] = sz
    w[4, 4] = eye
    if n_sites == 1:
        return [w[4:5, 0:1]]
    return [w[4:5]] + [w] * (n_sites - 2) + [w[:, 0:1]]


def exact_energy(n_sites: int) -> float:
    """The ground energy by exact diagonalization in the Sz = 0 sector (even L)."""
    if n_sites % 2:
        raise ValueError("exact diagonalization here needs an even number of sites")
    states = [sum(1 << i for i in c) for c in combinations(range(n_sites), n_sites // 2)]
    index = {s: k for k, s in enumerate(states)}
    h = np.zeros((len(states), len(states)))
    for k, s in enumerate(states):
        for i in range(n_sites - 1):
            a, b = (s >> i) & 1, (s >> (i + 1)) & 1
            if a == b:
                h[k, k] += 0.25
            else:
                h[k, k] -= 0.25
                h[index[s ^ (3 << i)], k] += 0.5
    return float(np.linalg.eigvalsh(h)[0])


def bond_dims(n_sites: int, chi: int) -> list[int]:
    """The largest useful bond dimensions: dims[i] is the bond left of site i (L + 1 of them)."""
    return [min(D_PHYS ** i, D_PHYS ** (n_sites - i), chi) for i in range(n_sites + 1)]


def random_mps(n_sites: int, chi: int, seed: int) -> list[np.ndarray]:
    """A random MPS of bond dimension chi: A[i] of shape [left, s, right]."""
    rng = np.random.default_rng(seed)
    dims = bond_dims(n_sites, chi)
    return [rng.standard_normal((dims[i], D_PHYS, dims[i + 1])) for i in range(n_sites)]


# ---------------------------------------------------------------- the algorithm
@dataclass
class SweepRecord:
    sweep: int
    energy: float
    seconds: float
    waits: int
    session_waits: int | None
    max_bond: int
    open_seconds: float = 0.0


@dataclass
class Result:
    backend: str
    device: str
    n_sites: int
    chi: int
    sweeps: list[SweepRecord] = field(default_factory=list)
    setup_seconds: float = 0.0
    flops: float = 0.0

    @property
    def energy(self) -> float:
        return self.sweeps[-1].energy


class DMRG:
    """Two-site DMRG on one backend (see the top of this file)."""

    def __init__(self, b: bk.Backend, n_sites: int, chi: int, krylov: int = 10,
                 cutoff: float = 1e-10, keep_degenerate: bool = True, seed: int = 1,
                 init_chi: int | None = None) -> None:
        if n_sites < 2:
            raise ValueError("the chain needs at least two sites")
        self.b = b
        self.L = n_sites
        self.chi = chi
        self.krylov = krylov
        self.trunc = bk.Truncation(chi, cutoff, keep_degenerate)
        b.prepare(krylov)
        self.W = [b.array(w) for w in heisenberg_mpo(n_sites)]
        self.A = [b.array(a) for a in random_mps(n_sites, init_chi or min(chi, 16), seed)]
        one = np.ones((1, 1, 1))
        self.Lenv: list[Any] = [None] * (n_sites + 1)
        self.Renv: list[Any] = [None] * (n_sites + 1)
        self.Lenv[0] = b.array(one)
        self.Renv[n_sites] = b.array(one)
        self.energy_t: Any = None
        self.bonds = 0

    # ---- environments: L[x, w, a] (bra, MPO, ket), R[y, u, b] likewise ----
    def grow_left(self, i: int) -> None:
        """Lenv[i + 1] from Lenv[i] and site i (A[i] left-canonical)."""
        b, a = self.b, self.A[i]
        t = b.einsum("xwa,asb->xwsb", self.Lenv[i], a)
        t = b.einsum("xwsb,wvSs->xSvb", t, self.W[i])
        self.Lenv[i + 1] = b.einsum("xSvb,xSy->yvb", t, a)

    def grow_right(self, i: int) -> None:
        """Renv[i] from Renv[i + 1] and site i (A[i] right-canonical)."""
        b, a = self.b, self.A[i]
        t = b.einsum("asb,yub->asyu", a, self.Renv[i + 1])
        t = b.einsum("asyu,vuSs->aSyv", t, self.W[i])
        self.Renv[i] = b.einsum("aSyv,xSy->xva", t, a)

    def right_canonicalize(self) -> None:
        """Brings A[1..L-1] to right-canonical form (SVDs cut by chi only: no waits)."""
        b = self.b
        for i in range(self.L - 1, 0, -1):
            dl, d, dr = self.A[i].shape
            m = b.reshape(self.A[i], (dl, d * dr))
            u, _, vh, r = b.svd_truncated(m, bk.Truncation(self.chi), "left")
            self.A[i] = b.reshape(vh, (r, d, dr))
            self.A[i - 1] = b.einsum("asb,bc->asc", self.A[i - 1], u)
        for i in range(self.L - 1, 0, -1):
            self.grow_right(i)

    # ---- the effective Hamiltonian of bond (i, i+1) on a two-site tensor ----
    def apply_h(self, i: int, x: Any) -> Any:
        b = self.b
        t = b.einsum("xwa,astb->xwstb", self.Lenv[i], x)
        t = b.einsum("xwstb,wvSs->xvStb", t, self.W[i])
        t = b.einsum("xvStb,vuTt->xSuTb", t, self.W[i + 1])
        return b.einsum("xSuTb,yub->xSTy", t, self.Renv[i + 2])

    def normalized(self, x: Any) -> Any:
        """x / |x|, the norm a device scalar (a tiny floor keeps an exact zero finite)."""
        b = self.b
        n2 = b.einsum("astb,astb->", x, x)
        inv = b.div(b.const(1.0), b.sqrt(b.add(n2, b.const(1e-300))))
        return b.einsum(",astb->astb", inv, x)

    def lanczos(self, i: int, theta: Any) -> tuple[Any, Any]:
        """The lowest Ritz pair of the bond's effective Hamiltonian in the Krylov space of theta.

        k = min(krylov, dim) steps, each: w = H v_j; H V += e_j w; w orthogonalized
        against V twice (V's rows past j are zeros, so V's whole width serves);
        v_{j+1} = w / |w|; V += e_{j+1} v_{j+1}. Then T = V (H V)^T, (E, y) its
        lowest eigenpair, theta' = y V. Returns (E as a rank-0 tensor, theta').
        """
        b = self.b
        dim = int(np.prod(theta.shape))
        k = min(self.krylov, dim)
        v = self.normalized(theta)
        basis = b.einsum("k,astb->kastb", b.unit(k, 0), v)
        hbasis = None
        for j in range(k):
            w = self.apply_h(i, v)
            hw = b.einsum("k,astb->kastb", b.unit(k, j), w)
            hbasis = hw if hbasis is None else b.add(hbasis, hw)
            if j == k - 1:
                break
            for _ in range(2):
                c = b.einsum("kastb,astb->k", basis, w)
                w = b.sub(w, b.einsum("k,kastb->astb", c, basis))
            v = self.normalized(w)
            basis = b.add(basis, b.einsum("k,astb->kastb", b.unit(k, j + 1), v))
        t = b.einsum("iastb,jastb->ij", basis, hbasis)
        evals, evecs = b.eigh(t)
        e0 = b.unit(k, 0)
        energy = b.einsum("k,k->", evals, e0)
        y = b.einsum("kj,j->k", evecs, e0)
        return energy, b.einsum("k,kastb->astb", y, basis)

    def optimize_bond(self, i: int, direction: str, last: bool) -> None:
        """One bond: (i, i+1) optimized, cut, its environment grown toward `direction`."""
        b = self.b
        theta = b.einsum("asb,btc->astc", self.A[i], self.A[i + 1])
        energy, theta = self.lanczos(i, theta)
        self.energy_t = energy
        dl, d1, d2, dr = theta.shape
        m = b.reshape(theta, (dl * d1, d2 * dr))
        # The sweep's last bond is the left edge (width <= 2, nothing to cut): chi alone, no wait.
        trunc = bk.Truncation(self.chi) if last else self.trunc
        u, _, vh, r = b.svd_truncated(m, trunc, "right" if direction == "right" else "left")
        self.A[i] = b.reshape(u, (dl, d1, r))
        self.A[i + 1] = b.reshape(vh, (r, d2, dr))
        if direction == "right":
            self.grow_left(i)
        else:
            self.grow_right(i + 1)
        self.bonds += 1

    def sweep(self) -> float:
        """Left to right over bonds 0..L-2, then back over L-2..0; returns the last energy."""
        n = self.L
        with self.b.sweep():
            for i in range(n - 1):
                self.optimize_bond(i, "right", last=False)
            for i in range(n - 2, -1, -1):
                self.optimize_bond(i, "left", last=(i == 0))
            (energy,) = self.b.read(self.energy_t)
        return energy

    def max_bond(self) -> int:
        return max(int(a.shape[2]) for a in self.A)


class Run:
    """One run of DMRG on a backend, sweep by sweep (run() below, or interleaved with others)."""

    def __init__(self, b: bk.Backend, n_sites: int, chi: int, krylov: int = 10,
                 cutoff: float = 1e-10, seed: int = 1, verbose: bool = True,
                 keep_degenerate: bool = True, init_chi: int | None = None) -> None:
        self.b = b
        self.verbose = verbose
        self.result = Result(b.name, b.device, n_sites, chi)
        t0 = time.perf_counter()
        self.dm = DMRG(b, n_sites, chi, krylov=krylov, cutoff=cutoff, seed=seed,
                       keep_degenerate=keep_degenerate, init_chi=init_chi)
        with b.sweep():
            self.dm.right_canonicalize()
        b.finish()
        self.result.setup_seconds = time.perf_counter() - t0

    def sweep(self) -> SweepRecord:
        """One sweep, timed without its session's open (an admission wait, not work)."""
        b = self.b
        w0, f0 = b.waits, b.flops
        opened = len(getattr(b, "open_seconds", []))
        t = time.perf_counter()
        energy = self.dm.sweep()
        dt = time.perf_counter() - t
        opens = getattr(b, "open_seconds", [])
        open_s = opens[opened] if len(opens) > opened else 0.0
        rec = SweepRecord(len(self.result.sweeps) + 1, energy, dt - open_s, b.waits - w0,
                          b.session_waits(), self.dm.max_bond(), open_s)
        self.result.sweeps.append(rec)
        self.result.flops += b.flops - f0
        if self.verbose:
            sw = "-" if rec.session_waits is None else str(rec.session_waits)
            print("  %-16s sweep %2d  E = %.15f  %9.1f ms  host waits %4d (session counter %s)"
                  "  max bond %d" % (b.name, rec.sweep, energy, rec.seconds * 1e3, rec.waits,
                                     sw, rec.max_bond), flush=True)
        return rec


def run(b: bk.Backend, n_sites: int, chi: int, sweeps: int, krylov: int = 10,
        cutoff: float = 1e-10, seed: int = 1, verbose: bool = True,
        keep_degenerate: bool = True, init_chi: int | None = None) -> Result:
    """Runs `sweeps` sweeps of DMRG on backend b; returns what each sweep gave and took.

    The initial state is random with bond dimension init_chi (min(chi, 16) by default),
    right-canonicalized; two-site sweeps grow it to chi.
    """
    r = Run(b, n_sites, chi, krylov, cutoff, seed, verbose, keep_degenerate, init_chi)
    for _ in range(sweeps):
        r.sweep()
    return r.result


# ---------------------------------------------------------------- the command line
def print_table(results: list[Result], exact: float | None, reference: Result | None) -> None:
    print()
    head = ("backend", "L", "chi", "energy", "vs exact", "vs ref", "ms/sweep",
            "waits/sweep", "bonds/sweep", "device")
    print("%-18s %3s %4s %20s %9s %9s %9s %11s %11s  %s" % head)
    for r in results:
        best = min(s.seconds for s in r.sweeps[1:] or r.sweeps)
        waits = sorted({s.waits for s in r.sweeps})
        ex = "-" if exact is None else "%.1e" % abs(r.energy - exact)
        ref = ("-" if reference is None or reference is r
               else "%.1e" % abs(r.energy - reference.energy))
        print("%-18s %3d %4d %20.14f %9s %9s %9.1f %11s %11d  %s" % (
            r.backend, r.n_sites, r.chi, r.energy, ex, ref, best * 1e3,
            "/".join(map(str, waits)), 2 * (r.n_sites - 1), r.device))
    print("  (ms/sweep: the fastest sweep after the first; waits: host waits per sweep)")


def run_all(names: list[str], n_sites: int, chi: int, sweeps: int, krylov: int, cutoff: float,
            seed: int, socket: str | None, verbose: bool = True) -> list[Result]:
    results = []
    for name in names:
        b = bk.make_backend(name, socket, client_name="dmrg-" + name)
        try:
            if verbose:
                print("%s: L=%d chi=%d on %s" % (name, n_sites, chi, b.device), flush=True)
            results.append(run(b, n_sites, chi, sweeps, krylov, cutoff, seed, verbose))
        finally:
            b.close()
    return results


def checks(names: list[str], args: argparse.Namespace) -> int:
    """The two checks; returns the number that failed."""
    failed = 0
    exact = exact_energy(12)
    print("== L=12, chi 64 against exact diagonalization (E0 = %.15f)" % exact)
    res = run_all(names, 12, 64, args.sweeps, args.krylov, args.cutoff, args.seed, args.socket)
    print_table(res, exact, None)
    for r in res:
        err = abs(r.energy - exact)
        ok = err <= 1e-10
        failed += not ok
        print("CHECK exact L=12 chi=64 %-10s |E - E_exact| = %.2e (tol 1e-10) %s" % (
            r.backend, err, "OK" if ok else "FAILED"))
    n_long = args.long_sites
    print("\n== L=%d, chi %d: every backend against numpy" % (n_long, args.long_chi))
    order = ["numpy"] + [n for n in names if n != "numpy"]
    res = run_all(order, n_long, args.long_chi, args.sweeps, args.krylov, args.cutoff, args.seed,
                  args.socket)
    print_table(res, None, res[0])
    for r in res[1:]:
        err = abs(r.energy - res[0].energy)
        ok = err <= 1e-9
        failed += not ok
        print("CHECK compare L=%d chi=%d %-10s |E - E_numpy| = %.2e (tol 1e-9) %s" % (
            n_long, args.long_chi, r.backend, err, "OK" if ok else "FAILED"))
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default=None,
                   help="comma-separated: numpy, tenferro, cupy, torch, NAME+host-svd "
                        "(default: numpy and every other one that imports)")
    p.add_argument("--sites", type=int, default=12)
    p.add_argument("--chi", type=int, default=64)
    p.add_argument("--sweeps", type=int, default=6)
    p.add_argument("--krylov", type=int, default=10, help="Lanczos steps per bond")
    p.add_argument("--cutoff", type=float, default=1e-10, help="singular values kept above it")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--socket", default=None, help="tenferrod's socket (else $TENFERRO_SOCKET...)")
    p.add_argument("--exact", action="store_true", help="compare with exact diagonalization")
    p.add_argument("--checks", action="store_true", help="run the example's two checks")
    p.add_argument("--long-sites", type=int, default=32, help="--checks: the longer chain")
    p.add_argument("--long-chi", type=int, default=64, help="--checks: its bond dimension")
    args = p.parse_args(argv)
    if args.backends:
        names = args.backends.split(",")
    else:
        names = [n for n in ("numpy", "tenferro", "cupy", "torch") if bk.available(n)]
    if args.checks:
        failed = checks(names, args)
        print("dmrg: %s" % ("every check OK" if not failed else "%d check(s) FAILED" % failed))
        return 1 if failed else 0
    exact = exact_energy(args.sites) if args.exact else None
    if exact is not None:
        print("exact diagonalization (Sz = 0): E0 = %.15f" % exact)
    res = run_all(names, args.sites, args.chi, args.sweeps, args.krylov, args.cutoff, args.seed,
                  args.socket)
    print_table(res, exact, res[0] if len(res) > 1 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
