"""tenferro.linalg: linear algebra on the daemon, with numpy.linalg's names and conventions.

    import tenferro as tf
    import tenferro.linalg as la

    with client.session() as s:
        u, s_, vh = la.svd(a, full_matrices=False)      # numpy's SVDResult order
        w, v = la.eigh(h)                               # ascending eigenvalues
        x = la.solve(m, b)
        u, s_, vh, rep = la.svd_truncated(t, 2, cutoff=1e-10, absorb="left")

Every function takes tenferro Tensors (upload host data with client.tensor()
first), queues its operation in the operands' session like any other, and
returns tensors at once: the matrix functions work on the last two axes and
batch over the leading ones (no broadcasting, no dtype promotion). Results
have numpy's shapes and dtypes (singular values, eigenvalues and norms are
real: float32 for float32 and complex64, float64 otherwise).

Gauges, where numpy's LAPACK leaves a phase free: the entry of largest
magnitude of each column of U (svd) or of V (eigh) is real and positive
(Vh's rows carry the opposite phase); R's diagonal (qr) is real and
non-negative.

Failures only the numbers can show are LinAlgError subclasses
(NotConvergedError, SingularMatrixError, NotPositiveDefiniteError,
NonFiniteError), raised by whatever reports the operation's result (the
synchronize or download after it; at once outside a session), naming the
operation and the failing matrix of the batch. LinAlgError is a
tenferro.TenferroError and a numpy.linalg.LinAlgError.

svd_truncated and eigh_truncated truncate on the daemon (docs/python.md,
"tenferro.linalg"): a rank bound alone (max_rank, min_rank) gives factors of
known width at once, without waiting; a value-dependent rule (cutoff,
rel_cutoff, discarded weights, keep_degenerate) reads the kept rank once (one
wait) and trims the factors to it (queued, no further wait).
"""
from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import _tenferro
from ._tenferro import (  # noqa: F401  (the public names)
    InvalidArgumentError,
    LinAlgError,
    NonFiniteError,
    NotConvergedError,
    NotPositiveDefiniteError,
    ShapeError,
    SingularMatrixError,
    Tensor,
    UnsupportedError,
)

# From here on LinAlgError derives from numpy.linalg.LinAlgError.
_tenferro._use_numpy()

__all__ = [
    "svd", "svdvals", "svd_truncated", "qr", "eigh", "eigvalsh", "eigh_truncated", "cholesky",
    "solve", "inv", "det", "slogdet", "norm", "vector_norm", "matrix_norm", "trace", "diagonal",
    "SVDResult", "QRResult", "EighResult", "SlogdetResult", "TruncatedSVDResult",
    "TruncatedEighResult", "TruncationReport",
    "LinAlgError", "NotConvergedError", "SingularMatrixError", "NotPositiveDefiniteError",
    "NonFiniteError",
]


class SVDResult(NamedTuple):
    """svd's result, as numpy 2's: a = U @ diag(S) @ Vh."""

    U: Tensor
    S: Tensor
    Vh: Tensor


class QRResult(NamedTuple):
    """qr's result, as numpy 2's: a = Q @ R."""

    Q: Tensor
    R: Tensor


class EighResult(NamedTuple):
    """eigh's result, as numpy 2's: a = V diag(w) V^H, eigenvalues ascending."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class SlogdetResult(NamedTuple):
    """slogdet's result, as numpy 2's: det = sign * exp(logabsdet)."""

    sign: Tensor
    logabsdet: Tensor


class TruncationReport:
    """What a truncation did: the kept rank and the weight it discarded, per matrix.

    rank: the kept rank (for a batch, the largest over the batch: the factors'
    width); ranks: the kept rank of each matrix (an int64 array of the batch's
    shape, () for one matrix); discarded_weight: the sum of the squares of the
    values dropped; truncation_error: that over the sum of all squares (0 for a
    zero matrix). The weights are floats for one matrix, arrays for a batch.
    tensor is the report on the device (float64 [batch..., 3]: rank, discarded
    weight, truncation error).

    When the rank was known at the call (a rank bound alone), the report is
    read only when a weight is first asked for (one wait, like a download);
    loaded says whether it has been.
    """

    __slots__ = ("tensor", "_batch", "_ranks", "_weights", "_errors", "_loaded")

    def __init__(self, tensor: Tensor, rank: int | None = None) -> None:
        self.tensor = tensor
        self._batch = tuple(tensor.shape[:-1])
        self._loaded = False
        self._ranks = None if rank is None else np.full(self._batch, rank, dtype=np.int64)
        self._weights: Any = None
        self._errors: Any = None

    def _load(self) -> None:
        if self._loaded:
            return
        rows = _tenferro._read_report(self.tensor)
        table = np.array(rows, dtype=np.float64).reshape(self._batch + (3,))
        self._ranks = table[..., 0].astype(np.int64)
        self._weights = table[..., 1]
        self._errors = table[..., 2]
        self._loaded = True

    def _value(self, a: Any) -> Any:
        return float(a) if not self._batch else a

    @property
    def loaded(self) -> bool:
        """True once the report has been read from the device."""
        return self._loaded

    @property
    def rank(self) -> int:
        """The kept rank; for a batch the largest over it (the trimmed factors' width)."""
        if self._ranks is None:
            self._load()
        return int(np.max(self._ranks))

    @property
    def ranks(self) -> np.ndarray:
        """The kept rank of each matrix of the batch (int64, the batch's shape)."""
        if self._ranks is None:
            self._load()
        return self._ranks

    @property
    def discarded_weight(self) -> Any:
        """The sum of the squares of the values dropped (per matrix for a batch)."""
        self._load()
        return self._value(self._weights)

    @property
    def truncation_error(self) -> Any:
        """discarded_weight over the sum of all squares: the relative discarded weight."""
        self._load()
        return self._value(self._errors)

    def __repr__(self) -> str:
        if not self._loaded:
            return f"<tenferro.linalg.TruncationReport rank={self.rank} (weights not read yet)>"
        if not self._batch:
            return (f"<tenferro.linalg.TruncationReport rank={self.rank} "
                    f"discarded_weight={self.discarded_weight:g} "
                    f"truncation_error={self.truncation_error:g}>")
        return (f"<tenferro.linalg.TruncationReport batch={self._batch} rank={self.rank} "
                f"ranks={self._ranks.tolist()}>")


class TruncatedSVDResult(NamedTuple):
    """svd_truncated's result: a ~ U @ diag(S) @ Vh, and the truncation's report."""

    U: Tensor
    S: Tensor
    Vh: Tensor
    report: TruncationReport


class TruncatedEighResult(NamedTuple):
    """eigh_truncated's result: pairs by |eigenvalue| descending, and the truncation's report."""

    eigenvalues: Tensor
    eigenvectors: Tensor
    report: TruncationReport


# ---------------------------------------------------------------- helpers

# tf_matrix_norm's values
_NORM_FRO, _NORM_NUC, _NORM_1, _NORM_NEG_1, _NORM_2, _NORM_NEG_2, _NORM_INF, _NORM_NEG_INF = range(8)
_QR_MODES = {"reduced": 0, "complete": 1, "r": 2}
_ABSORB = {None: 0, "none": 0, "left": 1, "right": 2, "both": 3, "sqrt": 3}


def _tensor(x: Any, what: str = "a") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a tenferro.Tensor, not {type(x).__name__}: upload host "
                        "data with client.tensor() first")
    return x


def _upper(UPLO: str) -> bool:
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    return UPLO == "U"


def _axes_tuple(axes: Any) -> tuple[int, ...]:
    if isinstance(axes, (tuple, list)):
        return tuple(operator.index(i) for i in axes)
    return (operator.index(axes),)


def _split(split: Any) -> tuple[Any, int, int] | None:
    """(perm, n_batch, n_rows) of tf_split, from None, an int k or (row_axes, col_axes)."""
    if split is None:
        return None
    if isinstance(split, (tuple, list)):
        if len(split) != 2:
            raise ValueError("split is None, an int k (the first k axes are rows) or "
                             "(row_axes, col_axes)")
        rows, cols = _axes_tuple(split[0]), _axes_tuple(split[1])
        return (rows + cols, 0, len(rows))
    return (None, 0, operator.index(split))


def _rank_bound(name: str, v: Any) -> int:
    if v is None:
        return 0
    v = operator.index(v)
    if v < 1:
        raise InvalidArgumentError(f"{name} is {v}: at least 1 expected (None: no bound)")
    return v


def _threshold(v: Any) -> float:
    return 0.0 if v is None else float(v)


def _truncation(max_rank: Any, min_rank: Any, cutoff: Any, rel_cutoff: Any,
                discarded_weight: Any, rel_discarded_weight: Any, keep_degenerate: bool,
                absorb: Any = None, renormalize: bool = False) -> tuple[tuple[Any, ...], bool]:
    """The truncation tuple of the extension, and whether the kept rank depends on the values."""
    if absorb not in _ABSORB:
        raise InvalidArgumentError(
            f"absorb must be None, 'left', 'right', 'both' or 'sqrt', not {absorb!r}")
    t = (_rank_bound("max_rank", max_rank), _rank_bound("min_rank", min_rank),
         _threshold(cutoff), _threshold(rel_cutoff), _threshold(discarded_weight),
         _threshold(rel_discarded_weight), int(bool(keep_degenerate)), _ABSORB[absorb],
         int(bool(renormalize)))
    value_rank = any(v > 0 for v in t[2:6]) or bool(keep_degenerate)
    return t, value_rank


def _trim(t: Tensor, axis: int, length: int) -> Tensor:
    """t's first `length` entries along axis (a queued copy)."""
    lengths = list(t.shape)
    lengths[axis] = length
    return _tenferro._slice(t, [0] * t.ndim, [1] * t.ndim, lengths)


# ---------------------------------------------------------------- decompositions

def svd(a: Tensor, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """The singular value decomposition a = U @ diag(S) @ Vh of [..., m, n], as numpy.linalg.svd.

    full_matrices (numpy's default True): U [..., m, m], Vh [..., n, n]; False:
    U [..., m, k], Vh [..., k, n] with k = min(m, n). S [..., k] real,
    descending. compute_uv=False returns S alone. Returns SVDResult(U, S, Vh).
    The largest entry in magnitude of each column of U is real and positive.
    """
    _tensor(a)
    if not compute_uv:
        return _tenferro._svd(a, False, False)
    return SVDResult(*_tenferro._svd(a, bool(full_matrices), True))


def svdvals(x: Tensor) -> Tensor:
    """The singular values [..., k] of [..., m, n], descending (numpy.linalg.svdvals)."""
    return svd(x, compute_uv=False)


def svd_truncated(a: Tensor, split: Any = None, *, max_rank: int | None = None,
                  min_rank: int | None = None, cutoff: float | None = None,
                  rel_cutoff: float | None = None, discarded_weight: float | None = None,
                  rel_discarded_weight: float | None = None, absorb: str | None = None,
                  renormalize: bool = False, keep_degenerate: bool = False) -> TruncatedSVDResult:
    """The truncated SVD: (U, S, Vh, report) with a ~ U @ diag(S) @ Vh of the kept rank r.

    split: None, the matrix form of [..., m, n] (U [..., m, r], S [..., r],
    Vh [..., r, n]); an int k, the tensor form with the first k axes as rows
    (U [rows..., r], Vh [r, cols...]); or (row_axes, col_axes), a permutation
    of every axis, rows then columns (no batch).

    The rule, in order (the daemon's, common/truncation.h): at most max_rank
    values; only values above cutoff (absolute) and above rel_cutoff times the
    largest; the smallest dropped while the sum of the squares dropped stays
    at most discarded_weight and at most rel_discarded_weight times the sum of
    all squares; at least min(min_rank, max_rank); keep_degenerate never cuts
    a multiplet in two (kept whole within max_rank, else dropped whole unless
    that goes below min_rank); at least one value.

    absorb: None (U and Vh isometries), 'left' (U S), 'right' (S Vh), 'both'
    or 'sqrt' (U sqrt(S), sqrt(S) Vh). renormalize rescales the kept values
    to the norm of all of them. S always holds the (renormalized) values.

    A rank bound alone (max_rank, min_rank) gives r = min(k, max_rank) at
    once, without a wait; report's weights are read at their first use. A
    value-dependent option (cutoff, rel_cutoff, discarded weights,
    keep_degenerate) reads the report at once (one wait; inside a held session
    the queued work is submitted first, which does not wait) and trims the
    factors to the kept rank with queued slices (no further wait). For a batch
    the factors are trimmed to the largest rank over it; a matrix that kept
    fewer has zeros past its rank (report.ranks). Recorded in a graph
    (tenferro.prepare), the factors keep the bound's width with zeros past
    the rank each run finds; return report.tensor to read it after a run.
    """
    _tensor(a)
    t, value_rank = _truncation(max_rank, min_rank, cutoff, rel_cutoff, discarded_weight,
                                rel_discarded_weight, keep_degenerate, absorb, renormalize)
    u, s, vh, rep = _tenferro._svd_truncated(a, _split(split), t, True)
    n_batch = s.ndim - 1
    width = s.shape[-1]
    if not value_rank:
        return TruncatedSVDResult(u, s, vh, TruncationReport(rep, width))
    if a.symbolic:
        # Recorded in a graph: the rank is known only at run time (zeros past it); no trim.
        return TruncatedSVDResult(u, s, vh, TruncationReport(rep))
    report = TruncationReport(rep)
    report._load()
    r = report.rank
    if r < width:
        u, s, vh = _trim(u, u.ndim - 1, r), _trim(s, n_batch, r), _trim(vh, n_batch, r)
    return TruncatedSVDResult(u, s, vh, report)


def qr(a: Tensor, mode: str = "reduced") -> Any:
    """The QR decomposition a = Q @ R of [..., m, n], as numpy.linalg.qr.

    mode 'reduced' (Q [..., m, k], R [..., k, n]), 'complete' (Q [..., m, m],
    R [..., m, n]) or 'r' (R [..., k, n] alone, returned as a Tensor). R's
    diagonal is real and non-negative. numpy's 'raw' is UnsupportedError.
    """
    _tensor(a)
    if mode == "raw":
        raise UnsupportedError("qr: mode 'raw' (LAPACK's Householder form) is not served")
    if mode not in _QR_MODES:
        raise ValueError(f"Unrecognized mode '{mode}'")
    if mode == "r":
        return _tenferro._qr(a, _QR_MODES[mode])
    return QRResult(*_tenferro._qr(a, _QR_MODES[mode]))


def eigh(a: Tensor, UPLO: str = "L") -> EighResult:
    """The Hermitian eigendecomposition of [..., n, n], as numpy.linalg.eigh.

    Reads one triangle (UPLO 'L', the default, or 'U'). Returns
    EighResult(eigenvalues [..., n] real ascending, eigenvectors [..., n, n])
    with column j the eigenvector of eigenvalue j, its largest entry in
    magnitude real and positive.
    """
    _tensor(a)
    return EighResult(*_tenferro._eigh(a, _upper(UPLO), True))


def eigvalsh(a: Tensor, UPLO: str = "L") -> Tensor:
    """The eigenvalues [..., n] of a Hermitian [..., n, n], ascending (numpy.linalg.eigvalsh)."""
    _tensor(a)
    return _tenferro._eigh(a, _upper(UPLO), False)


def eigh_truncated(a: Tensor, split: Any = None, *, UPLO: str = "L",
                   max_rank: int | None = None, min_rank: int | None = None,
                   cutoff: float | None = None, rel_cutoff: float | None = None,
                   discarded_weight: float | None = None,
                   rel_discarded_weight: float | None = None,
                   keep_degenerate: bool = False) -> TruncatedEighResult:
    """The truncated Hermitian eigendecomposition: (eigenvalues, eigenvectors, report).

    The pairs are ordered by |eigenvalue| descending (the larger eigenvalue
    first among equal magnitudes) and truncated by svd_truncated's rule on
    |eigenvalue|; split as for svd_truncated (the rows and columns must have
    the same size). eigenvalues [..., r], eigenvectors [..., n, r] (tensor
    form: [rows..., r]). The same one-wait rule as svd_truncated.
    """
    _tensor(a)
    t, value_rank = _truncation(max_rank, min_rank, cutoff, rel_cutoff, discarded_weight,
                                rel_discarded_weight, keep_degenerate)
    w, v, rep = _tenferro._eigh_truncated(a, _split(split), _upper(UPLO), t, True)
    width = w.shape[-1]
    if not value_rank:
        return TruncatedEighResult(w, v, TruncationReport(rep, width))
    if a.symbolic:
        # Recorded in a graph: the rank is known only at run time (zeros past it); no trim.
        return TruncatedEighResult(w, v, TruncationReport(rep))
    report = TruncationReport(rep)
    report._load()
    r = report.rank
    if r < width:
        w, v = _trim(w, w.ndim - 1, r), _trim(v, v.ndim - 1, r)
    return TruncatedEighResult(w, v, report)


def cholesky(a: Tensor, upper: bool = False) -> Tensor:
    """The Cholesky factor of a Hermitian positive-definite [..., n, n] (numpy.linalg.cholesky).

    upper False: L lower with a = L @ L^H, reading a's lower triangle; True: U
    upper with a = U^H @ U, reading the upper one. A matrix that is not
    positive definite is NotPositiveDefiniteError.
    """
    _tensor(a)
    return _tenferro._cholesky(a, bool(upper))


# ---------------------------------------------------------------- solvers, determinants

def solve(a: Tensor, b: Tensor) -> Tensor:
    """x with a @ x = b, as numpy 2's solve: a [..., n, n], b [n] (for a single matrix) or
    [..., n, k] with a's batch axes (no broadcasting).

    As in numpy 2, b is a vector only when it is 1-D; a b of rank a.ndim - 1
    would be a stack of matrices broadcast over a's batch, which is refused
    (ShapeError): for one right-hand side per matrix pass b as [..., n, 1].
    A singular matrix is SingularMatrixError.
    """
    _tensor(a)
    _tensor(b, "b")
    if b.ndim != 1 and b.ndim != a.ndim:
        raise ShapeError(
            f"solve: a has rank {a.ndim} and b rank {b.ndim}: b is [n] (one matrix) or "
            "[..., n, k] with a's batch axes; numpy 2 would broadcast this b over a's batch, "
            "which tenferrod does not do (for one vector per matrix pass b as [..., n, 1])")
    return _tenferro._solve(a, b)


def inv(a: Tensor) -> Tensor:
    """The inverse of each matrix of [..., n, n]; a singular one is SingularMatrixError."""
    _tensor(a)
    return _tenferro._inv(a)


def det(a: Tensor) -> Tensor:
    """The determinant [...] of each matrix of [..., n, n] (0 for a singular one)."""
    _tensor(a)
    return _tenferro._det(a)


def slogdet(a: Tensor) -> SlogdetResult:
    """SlogdetResult(sign, logabsdet) of [..., n, n], as numpy.linalg.slogdet.

    sign has a's dtype (+-1, or a unit complex number; 0 for a singular
    matrix), logabsdet is real (-inf for a singular matrix).
    """
    _tensor(a)
    return SlogdetResult(*_tenferro._slogdet(a))


# ---------------------------------------------------------------- norms

def _vector_p(ord: Any) -> float:
    if ord is None:
        return 2.0
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    return float(ord)


def _matrix_ord(ord: Any) -> int:
    if ord is None or ord == "fro":
        return _NORM_FRO
    if ord == "nuc":
        return _NORM_NUC
    if not isinstance(ord, str):
        for value, code in ((1, _NORM_1), (-1, _NORM_NEG_1), (2, _NORM_2), (-2, _NORM_NEG_2),
                            (math.inf, _NORM_INF), (-math.inf, _NORM_NEG_INF)):
            if ord == value:
                return code
    raise ValueError("Invalid norm order for matrices.")


def _normalized(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    out = []
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise _tenferro.AxisError(f"axis {ax} is out of bounds for a tensor of rank {ndim}")
        out.append(ax % ndim)
    if len(set(out)) != len(out):
        raise ValueError("Duplicate axes given.")
    return tuple(out)


def norm(x: Tensor, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """A vector or matrix norm, as numpy.linalg.norm (a real tensor).

    axis None: with ord None the 2-norm of every element (any rank), else x
    must be 1-D (a vector norm) or 2-D (a matrix norm); an int or a 1-tuple: a
    vector norm along it; a 2-tuple (row axis, column axis): a matrix norm.
    Vector ord: None or 2, 1, inf (max |x|), -inf (min |x|), 0 (the count of
    nonzero entries) or any other p, (sum |x|^p)^(1/p). Matrix ord: None or
    'fro', 'nuc' (the sum of singular values), 1 / -1 (max / min column sum of
    |x|), 2 / -2 (largest / smallest singular value), inf / -inf (max / min row
    sum). keepdims keeps the reduced axes as size 1.
    """
    _tensor(x, "x")
    if axis is None:
        if ord is None:
            return _tenferro._vector_norm(x, 2.0, None, bool(keepdims))
        if x.ndim == 1:
            axis = (0,)
        elif x.ndim == 2:
            axis = (0, 1)
        else:
            raise ValueError("Improper number of dimensions to norm.")
    axes = _normalized(_axes_tuple(axis), x.ndim)
    if len(axes) == 1:
        return _tenferro._vector_norm(x, _vector_p(ord), axes, bool(keepdims))
    if len(axes) == 2:
        return _tenferro._matrix_norm(x, _matrix_ord(ord), axes, bool(keepdims))
    raise ValueError("Improper number of dimensions to norm.")


def vector_norm(x: Tensor, /, *, axis: int | Sequence[int] | None = None,
                keepdims: bool = False, ord: float = 2) -> Tensor:
    """The vector p-norm over axis (None: every axis; a tuple: several at once), array API style.

    ord: any real p, inf, -inf or 0 (see norm). A real tensor.
    """
    _tensor(x, "x")
    axes = None if axis is None else _normalized(_axes_tuple(axis), x.ndim)
    return _tenferro._vector_norm(x, _vector_p(ord), axes, bool(keepdims))


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:
    """A matrix norm of each matrix of [..., m, n] (the last two axes), array API style.

    ord: 'fro' (the default), 'nuc', 1, -1, 2, -2, inf, -inf (see norm).
    """
    _tensor(x, "x")
    return _tenferro._matrix_norm(x, _matrix_ord(ord), None, bool(keepdims))


# ---------------------------------------------------------------- diagonals

def trace(x: Tensor, offset: int = 0) -> Tensor:
    """The sum of each matrix's diagonal `offset` of [..., n, m] (the last two axes): [...].

    offset > 0 is above the main diagonal, < 0 below (array API convention:
    numpy.linalg.trace, not numpy.trace's first two axes).
    """
    _tensor(x, "x")
    return _tenferro._trace(x, operator.index(offset))


def diagonal(x: Tensor, offset: int = 0) -> Tensor:
    """The diagonal `offset` of each matrix of [..., n, m] (the last two axes): [..., d]."""
    _tensor(x, "x")
    return _tenferro._diagonal(x, operator.index(offset))
