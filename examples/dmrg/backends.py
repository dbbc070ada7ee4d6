"""Array backends of the DMRG (dmrg.py): one small adapter per library.

The algorithm in dmrg.py speaks only to a Backend: einsum, a few elementwise
operations on equal shapes (add, sub, scale by a Python float, sqrt, divide),
rank-0 constants and unit vectors made once, a small Hermitian eigensolver,
a truncated SVD, and reads to the host. Everything else is einsum: a device
scalar times a tensor is einsum(",ab->ab", s, t), an entry of a vector is
einsum("k,k->", v, e_j), a column of a matrix is einsum("kj,j->k", m, e_j).

  NumpyBackend     numpy in this process (the reference)
  TenferroBackend  tenferrod through the tenferro package: every operation is
                   queued in one held session per sweep; the only waits are
                   the truncation reports' kept ranks and the reads asked for
  CupyBackend      CuPy in this process (cuBLAS, cuSOLVER)
  TorchBackend     PyTorch in this process (its CUDA device when there is one)

Each backend counts its host waits (`waits`): a read of a device result by
the host (a kept rank, a download, a synchronize). numpy makes none. The
einsum flops are counted from the shapes (`flops`), the same for every
backend.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, NamedTuple

import numpy as np

# Relative gap below which two singular values form a multiplet (the daemon's
# TF__DEGENERATE_TOL_F64, common/truncation.h): the numpy rule is the same.
DEGENERATE_TOL = 1.4901161193847656e-8


class Truncation(NamedTuple):
    """How a bond is cut: kept rank at most max_rank, singular values above cutoff."""

    max_rank: int
    cutoff: float = 0.0
    keep_degenerate: bool = False


def kept_rank(s: np.ndarray, t: Truncation) -> int:
    """The kept rank of descending singular values s under t.

    The rule of common/truncation.h restricted to max_rank, cutoff and
    keep_degenerate: at most max_rank values, only those above the cutoff, a
    multiplet the cut would split kept whole when it ends within max_rank,
    else dropped whole, and at least one value.
    """
    k = len(s)
    bound = min(k, t.max_rank)
    r = bound
    if t.cutoff > 0:
        c = 0
        while c < r and s[c] > t.cutoff:
            c += 1
        r = c

    def degenerate(a: float, b: float) -> bool:
        return a - b <= DEGENERATE_TOL * a

    if t.keep_degenerate and 0 < r < k and degenerate(s[r - 1], s[r]):
        up = r
        while up < k and degenerate(s[up - 1], s[up]):
            up += 1
        if up <= bound:
            r = up
        else:
            down = r
            while down > 0 and degenerate(s[down - 1], s[down]):
                down -= 1
            if down > 0:
                r = down
    return max(r, 1)


def value_dependent(t: Truncation) -> bool:
    """True when the kept rank depends on the singular values (so must be read)."""
    return t.cutoff > 0 or t.keep_degenerate


def einsum_flops(subscripts: str, shapes: list[tuple[int, ...]]) -> float:
    """Multiply-adds times two of an einsum of one or two operands, from the shapes."""
    ins, out = subscripts.split("->")
    dims: dict[str, int] = {}
    for labels, shape in zip(ins.split(","), shapes):
        for c, n in zip(labels, shape):
            dims[c] = n
    total = 1.0
    for n in dims.values():
        total *= n
    contracted = set(dims) - set(out)
    return 2.0 * total if contracted else total


class Backend:
    """What dmrg.py uses; subclasses fill in the _methods."""

    name = "?"
    # Where the tensors live, for the table ("cpu", "cuda", "daemon: ...").
    device = "?"

    def __init__(self) -> None:
        self.waits = 0
        self.flops = 0.0
        self._consts: dict[float, Any] = {}
        self._units: dict[tuple[int, int], Any] = {}

    # ---- data in and out ----
    def array(self, x: np.ndarray) -> Any:
        """A backend tensor with the values of the float64 array x (an upload)."""
        raise NotImplementedError

    def read(self, *ts: Any) -> list[float]:
        """The values of rank-0 tensors, on the host: one wait for all of them."""
        raise NotImplementedError

    def const(self, x: float) -> Any:
        """A rank-0 tensor holding x, made once per value."""
        if x not in self._consts:
            self._consts[x] = self.array(np.array(x, dtype=np.float64))
        return self._consts[x]

    def unit(self, n: int, i: int) -> Any:
        """The unit vector e_i of length n, made once."""
        key = (n, i)
        if key not in self._units:
            e = np.zeros(n)
            e[i] = 1.0
            self._units[key] = self.array(e)
        return self._units[key]

    def prepare(self, krylov: int) -> None:
        """Makes the constants and unit vectors a run will use before it starts timing."""
        for x in (1.0, 1e-300):
            self.const(x)
        for n in range(1, krylov + 1):
            for i in range(n):
                self.unit(n, i)

    # ---- operations ----
    def einsum(self, subscripts: str, *ops: Any) -> Any:
        self.flops += einsum_flops(subscripts, [tuple(o.shape) for o in ops])
        return self._einsum(subscripts, *ops)

    def _einsum(self, subscripts: str, *ops: Any) -> Any:
        raise NotImplementedError

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def sub(self, a: Any, b: Any) -> Any:
        return a - b

    def scale(self, a: Any, x: float) -> Any:
        return a * x

    def div(self, a: Any, b: Any) -> Any:
        return a / b

    def sqrt(self, a: Any) -> Any:
        raise NotImplementedError

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return a.reshape(shape)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        """Eigenvalues ascending and eigenvectors (columns) of a small symmetric matrix,
        reading its lower triangle; stays on the device."""
        raise NotImplementedError

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        """u, s, vh of the matrix a cut by t, with s absorbed into u ("left") or vh
        ("right"); and the kept rank. One wait when t is value dependent, none else."""
        raise NotImplementedError

    # ---- the run's structure ----
    @contextlib.contextmanager
    def sweep(self) -> Iterator[None]:
        """Brackets one sweep (tenferro: a held session)."""
        yield

    def session_waits(self) -> int | None:
        """The library's own count of host waits over the last sweep, where it has one."""
        return None

    def finish(self) -> None:
        """Waits for everything queued (outside the timed sweeps)."""

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- numpy
class NumpyBackend(Backend):
    name = "numpy"

    def __init__(self) -> None:
        super().__init__()
        self.device = "cpu, in process (numpy %s)" % np.__version__

    def array(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, dtype=np.float64)

    def read(self, *ts: Any) -> list[float]:
        return [float(t) for t in ts]

    def _einsum(self, subscripts: str, *ops: Any) -> np.ndarray:
        # optimize=True sends a pairwise contraction to tensordot (BLAS).
        return np.einsum(subscripts, *ops, optimize=len(ops) > 1)

    def sqrt(self, a: Any) -> Any:
        return np.sqrt(a)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        return np.linalg.eigh(a, UPLO="L")

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        r = kept_rank(s, t)
        u, s, vh = u[:, :r], s[:r], vh[:r, :]
        if absorb == "left":
            u = u * s
        elif absorb == "right":
            vh = s[:, None] * vh
        return u, s, vh, r


# ---------------------------------------------------------------- tenferro
class TenferroBackend(Backend):
    """tenferrod through the tenferro package.

    A sweep is one held session (client.session()): every operation is queued
    locally and travels at the session's submits. Uploads happen before the
    sweeps (the MPO, the boundaries, the constants, the unit vectors, the
    initial state). Inside a sweep the host waits only where the kept rank is
    needed (tenferro.linalg.svd_truncated with a cutoff reads the report once
    and trims the factors) and in read().
    """

    name = "tenferro"

    def __init__(self, socket: str | None = None, client: Any = None,
                 name: str | None = None) -> None:
        super().__init__()
        import tenferro
        import tenferro.linalg  # noqa: F401  (the decompositions)

        self.tf = tenferro
        self.client = client if client is not None else tenferro.connect(socket, name=name)
        self.device = "tenferrod: " + self.client.device
        self.session: Any = None
        self._last_session_waits: int | None = None
        self.bytes = 0.0          # uploaded and downloaded
        self.last_operations = 0  # operations the last sweep's session queued
        self.open_seconds: list[float] = []  # how long each sweep's session took to open

    def array(self, x: np.ndarray) -> Any:
        x = np.array(x, dtype=np.float64, order="C")  # (ascontiguousarray makes rank 0 rank 1)
        self.bytes += x.nbytes
        return self.client.tensor(x)

    def _submit(self) -> None:
        if self.session is not None:
            self.session.submit()

    def read(self, *ts: Any) -> list[float]:
        if not ts:
            return []
        if len(ts) == 1:
            packed = ts[0]
        else:
            # One download for all: sum_j t_j e_j, a vector of len(ts).
            n = len(ts)
            packed = self.einsum(",k->k", ts[0], self.unit(n, 0))
            for j in range(1, n):
                packed = self.add(packed, self.einsum(",k->k", ts[j], self.unit(n, j)))
        self._submit()
        self.waits += 1
        host = np.asarray(packed.numpy(), dtype=np.float64).reshape(-1)
        self.bytes += host.nbytes
        return [float(v) for v in host]

    def _einsum(self, subscripts: str, *ops: Any) -> Any:
        return self.tf.einsum(subscripts, *ops)

    def sqrt(self, a: Any) -> Any:
        return self.tf.sqrt(a)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        if tuple(a.shape) == tuple(shape):
            return a
        return self.tf.reshape(a, shape)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        w, v = self.tf.linalg.eigh(a)
        return w, v

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        kw: dict[str, Any] = {"max_rank": t.max_rank, "absorb": absorb}
        if t.cutoff > 0:
            kw["cutoff"] = t.cutoff
        if t.keep_degenerate:
            kw["keep_degenerate"] = True
        if value_dependent(t):
            # The kept rank is read from the report (one wait): the factors come back trimmed.
            self._submit()
            self.waits += 1
        u, s, vh, report = self.tf.linalg.svd_truncated(a, **kw)
        return u, s, vh, int(u.shape[-1])

    @contextlib.contextmanager
    def sweep(self) -> Iterator[None]:
        t0 = time.perf_counter()
        s = self.client.session()
        s.open()
        self.open_seconds.append(time.perf_counter() - t0)
        self.session = s
        try:
            yield
            self._last_session_waits = _host_waits(s)
            s.close()
            self.last_operations = int(s.counters.held_operations)
        except BaseException:
            s.release()
            raise
        finally:
            self.session = None

    def session_waits(self) -> int | None:
        return self._last_session_waits

    def finish(self) -> None:
        with self.client.session() as s:
            s.synchronize()

    def close(self) -> None:
        self._consts.clear()
        self._units.clear()
        self.client.close()


def _host_waits(session: Any) -> int | None:
    """The session's host_waits counter, however the package exposes it (None: not at all)."""
    for holder in (session, getattr(session, "counters", None)):
        v = getattr(holder, "host_waits", None)
        if v is not None:
            return int(v() if callable(v) else v)
    return None


# ---------------------------------------------------------------- cupy
class CupyBackend(Backend):
    """CuPy in this process: cuBLAS for einsum, cuSOLVER for eigh and the SVD.

    The kept rank of a value-dependent truncation is read from the singular
    values (one device-to-host copy, a wait), as a program of its own would.
    """

    name = "cupy"

    def __init__(self) -> None:
        super().__init__()
        import cupy

        self.cp = cupy
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        self.device = "cuda:%d %s, in process (cupy %s)" % (
            dev.id, props["name"].decode(), cupy.__version__)

    def array(self, x: np.ndarray) -> Any:
        return self.cp.asarray(np.asarray(x, dtype=np.float64))

    def read(self, *ts: Any) -> list[float]:
        self.waits += 1
        host = self.cp.asnumpy(self.cp.stack([t.reshape(()) for t in ts]))
        return [float(v) for v in host]

    def _einsum(self, subscripts: str, *ops: Any) -> Any:
        return self.cp.einsum(subscripts, *ops)

    def sqrt(self, a: Any) -> Any:
        return self.cp.sqrt(a)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        return self.cp.linalg.eigh(a, UPLO="L")

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        u, s, vh = self.cp.linalg.svd(a, full_matrices=False)
        if value_dependent(t):
            self.waits += 1
            r = kept_rank(self.cp.asnumpy(s), t)
        else:
            r = min(len(s), t.max_rank)
        u, s, vh = u[:, :r], s[:r], vh[:r, :]
        if absorb == "left":
            u = u * s
        elif absorb == "right":
            vh = s[:, None] * vh
        return self.cp.ascontiguousarray(u), s, self.cp.ascontiguousarray(vh), r

    def finish(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()


# ---------------------------------------------------------------- torch
class TorchBackend(Backend):
    """PyTorch in this process, on its CUDA device when there is one (else its CPU)."""

    name = "torch"

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        import torch

        self.torch = torch
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dev = torch.device(device)
        where = (torch.cuda.get_device_name(self.dev) if self.dev.type == "cuda" else "cpu")
        self.device = "%s %s, in process (torch %s)" % (device, where, torch.__version__)

    def array(self, x: np.ndarray) -> Any:
        return self.torch.tensor(np.asarray(x, dtype=np.float64), device=self.dev)

    def read(self, *ts: Any) -> list[float]:
        self.waits += 1
        host = self.torch.stack([t.reshape(()) for t in ts]).cpu().numpy()
        return [float(v) for v in host]

    def _einsum(self, subscripts: str, *ops: Any) -> Any:
        return self.torch.einsum(subscripts, *ops)

    def sqrt(self, a: Any) -> Any:
        return self.torch.sqrt(a)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return a.reshape(shape)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        w, v = self.torch.linalg.eigh(a, UPLO="L")
        return w, v

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        # On CUDA, cuSOLVER's QR-based gesvd: the default may take a Jacobi SVD, whose U columns
        # of tiny singular values (A v / s) are far from orthonormal, and a left-canonical tensor
        # that is not an isometry makes the energy fall below the ground state's.
        kw = {"driver": "gesvd"} if self.dev.type == "cuda" else {}
        u, s, vh = self.torch.linalg.svd(a, full_matrices=False, **kw)
        if value_dependent(t):
            self.waits += 1
            r = kept_rank(s.cpu().numpy(), t)
        else:
            r = min(s.shape[0], t.max_rank)
        u, s, vh = u[:, :r], s[:r], vh[:r, :]
        if absorb == "left":
            u = u * s
        elif absorb == "right":
            vh = s[:, None] * vh
        return u.contiguous(), s, vh.contiguous(), r

    def finish(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)


class HostSvdBackend(Backend):
    """Another backend's tensors, with every SVD downloaded and done by numpy on the host.

    The decomposition a GPU program without a device SVD would make: the
    matrix goes to the host, numpy decomposes and cuts it, the factors go
    back. Everything else runs on the inner backend.
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__()
        self.inner = inner
        self.name = inner.name + "+host-svd"
        self.device = inner.device + ", SVD by numpy on the host"

    def array(self, x: np.ndarray) -> Any:
        return self.inner.array(x)

    def read(self, *ts: Any) -> list[float]:
        before = self.inner.waits
        v = self.inner.read(*ts)
        self.waits += self.inner.waits - before
        return v

    def _einsum(self, subscripts: str, *ops: Any) -> Any:
        return self.inner._einsum(subscripts, *ops)

    def add(self, a: Any, b: Any) -> Any:
        return self.inner.add(a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return self.inner.sub(a, b)

    def scale(self, a: Any, x: float) -> Any:
        return self.inner.scale(a, x)

    def div(self, a: Any, b: Any) -> Any:
        return self.inner.div(a, b)

    def sqrt(self, a: Any) -> Any:
        return self.inner.sqrt(a)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return self.inner.reshape(a, shape)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        return self.inner.eigh(a)

    def svd_truncated(self, a: Any, t: Truncation, absorb: str) -> tuple[Any, Any, Any, int]:
        host = _to_host(self.inner, a)
        self.waits += 1
        u, s, vh, r = NumpyBackend().svd_truncated(host, t, absorb)
        return self.inner.array(u), self.inner.array(s), self.inner.array(vh), r

    @contextlib.contextmanager
    def sweep(self) -> Iterator[None]:
        with self.inner.sweep():
            yield

    def session_waits(self) -> int | None:
        return self.inner.session_waits()

    def finish(self) -> None:
        self.inner.finish()

    def close(self) -> None:
        self.inner.close()


def _to_host(b: Backend, a: Any) -> np.ndarray:
    """The values of a tensor of b as a numpy array (a download: the caller counts it)."""
    if isinstance(b, TenferroBackend):
        b._submit()
        b.bytes += a.nbytes
        return a.numpy()
    if isinstance(b, CupyBackend):
        return b.cp.asnumpy(a)
    if isinstance(b, TorchBackend):
        return a.cpu().numpy()
    return np.asarray(a)


def make_backend(name: str, socket: str | None = None, client_name: str | None = None) -> Backend:
    """A backend by name: numpy, tenferro, cupy, torch, or NAME+host-svd."""
    if name.endswith("+host-svd"):
        return HostSvdBackend(make_backend(name[: -len("+host-svd")], socket, client_name))
    if name == "numpy":
        return NumpyBackend()
    if name == "tenferro":
        return TenferroBackend(socket, name=client_name)
    if name == "cupy":
        return CupyBackend()
    if name == "torch":
        return TorchBackend()
    raise ValueError("unknown backend %r (numpy, tenferro, cupy, torch, NAME+host-svd)" % name)


def available(name: str) -> bool:
    """True when the library behind a backend imports (and, for cupy, finds a GPU)."""
    try:
        if name == "cupy":
            import cupy

            return cupy.cuda.runtime.getDeviceCount() > 0
        if name == "torch":
            import torch  # noqa: F401

            return True
        if name == "tenferro":
            import tenferro  # noqa: F401

            return True
    except Exception:
        return False
    return name == "numpy"
