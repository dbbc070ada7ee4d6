#!/usr/bin/env python3
"""PyTorch's timings of the cases of bench/gpu/bench-linalg.c, for comparison.

    python3 bench/gpu/linalg_torch.py [--device cuda:0] [--iters 5] [--cases a,b]

For each case, the same shape and dtype as bench-linalg (inputs uniform in
[-0.5, 0.5), eigh's made symmetric), one torch.linalg call on a resident
CUDA tensor, then torch.cuda.synchronize(): median of --iters after one
warm-up, in ms, printed as

    BENCH <case>_torch torch=<ms>

Every other line starts with '#': the versions, the linear-algebra library
torch prefers, each result's relative residual (checked: a wrong result
exits 1), and for the SVDs the time of each CUDA driver torch.linalg.svd
offers (gesvd, gesvdj, gesvda) beside its default. No daemon is involved.
"""

import argparse
import statistics
import sys
import time

import torch

CASES = [
    # name, kind, dtype, batch (0: a single matrix), n
    ("svd_f64_1024", "svd", torch.float64, 0, 1024),
    ("svd_c128_1024", "svd", torch.complex128, 0, 1024),
    ("eigh_f64_4096", "eigh", torch.float64, 0, 4096),
    ("qr_f64_4096", "qr", torch.float64, 0, 4096),
    ("svd_batched_f64_512x64x64", "svd", torch.float64, 512, 64),
]

SVD_DRIVERS = ("gesvd", "gesvdj", "gesvda")


def make_input(kind, dtype, batch, n, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (batch, n, n) if batch else (n, n)
    real = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
    a = torch.rand(shape, generator=gen, dtype=real) - 0.5
    if dtype.is_complex:
        a = torch.complex(a, torch.rand(shape, generator=gen, dtype=real) - 0.5)
    if kind == "eigh":
        a = 0.5 * (a + a.mH)
    return a.to(device)


def run_op(kind, a, driver=None):
    if kind == "svd":
        return torch.linalg.svd(a, full_matrices=False, driver=driver)
    if kind == "eigh":
        return torch.linalg.eigh(a)
    return torch.linalg.qr(a, mode="reduced")


def time_op(kind, a, iters, driver=None):
    run_op(kind, a, driver)
    torch.cuda.synchronize(a.device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = run_op(kind, a, driver)
        torch.cuda.synchronize(a.device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), out


def residual(kind, a, out):
    """||A - reconstruction|| / ||A||, largest over the batch."""
    if kind == "svd":
        u, s, vh = out
        rec = (u * s.to(u.dtype).unsqueeze(-2)) @ vh
    elif kind == "eigh":
        w, v = out
        rec = (v * w.to(v.dtype).unsqueeze(-2)) @ v.mH
    else:
        q, r = out
        rec = q @ r
    num = torch.linalg.matrix_norm(a - rec)
    den = torch.linalg.matrix_norm(a)
    return float((num / den).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("linalg_torch.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    wanted = {c for c in args.cases.split(",") if c}
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"device {torch.cuda.get_device_name(device)}, "
          f"preferred linear-algebra library {torch.backends.cuda.preferred_linalg_library()}")
    sys.stdout.flush()
    failed = 0
    for seed, (name, kind, dtype, batch, n) in enumerate(CASES):
        if wanted and name not in wanted:
            continue
        a = make_input(kind, dtype, batch, n, device, 1000 + seed)
        med, best, out = time_op(kind, a, args.iters)
        res = residual(kind, a, out)
        eps = torch.finfo(a.real.dtype if a.is_complex() else a.dtype).eps
        ok = res <= 32 * n * eps
        print(f"# {name}: torch.linalg.{kind} median of {args.iters} after 1 warm-up "
              f"{med:.3f} ms (best {best:.3f}); relative residual {res:.2e}"
              f"{'' if ok else ' -- WRONG'}")
        if not ok:
            failed = 1
        if kind == "svd":
            for drv in SVD_DRIVERS:
                try:
                    dmed, dbest, dout = time_op(kind, a, args.iters, drv)
                    dres = residual(kind, a, dout)
                    print(f"# {name}: driver={drv} median {dmed:.3f} ms (best {dbest:.3f}); "
                          f"relative residual {dres:.2e}")
                except (RuntimeError, ValueError) as e:
                    print(f"# {name}: driver={drv} failed: {str(e).splitlines()[0]}")
        print(f"BENCH {name}_torch torch={med:.3f}")
        sys.stdout.flush()
        del a, out
        torch.cuda.empty_cache()
    return failed


if __name__ == "__main__":
    sys.exit(main())
