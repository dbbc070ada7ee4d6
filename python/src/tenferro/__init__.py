"""tenferro: a numpy-style client of tenferrod, over libtenferro-client.

    import numpy as np
    import tenferro as tf

    with tf.connect() as client:                 # $TENFERRO_SOCKET or /run/tenferro/...
        a = client.tensor(np.random.rand(256, 256))
        with client.session() as s:              # a held session: queued locally
            b = a @ a + a * 2.0
            c = tf.einsum("ij,jk->ik", b, a)
        print(c.numpy())

Tensors live on the daemon's device; operators and functions queue operations
in the session of their client (see docs/python.md). Every error is a
TenferroError subclass, one per status (ContendedError, BusyError, ...).
tenferro.linalg (numpy.linalg's names) is imported at its first use, and
imports numpy; `import tenferro` alone does not.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

from . import _tenferro
from ._tenferro import (  # noqa: F401  (the public names)
    Client,
    PendingTransfer,
    PinnedBuffer,
    Prepared,
    ScopedSession,
    Session,
    SessionCounters,
    Tensor,
    TenferroError,
    absolute,
    add,
    axpby,
    conj,
    connect,
    copy,
    divide,
    exp,
    log,
    matmul,
    max,
    min,
    multiply,
    negative,
    reshape,
    sqrt,
    square,
    subtract,
    sum,
    transpose,
)

# One exception class per status (generated from the C library's status list).
from ._tenferro import (  # noqa: F401
    AxisError,
    BadShapeError,
    BatchFailedError,
    BusyError,
    ContendedError,
    DeviceError,
    DisconnectedError,
    DtypeError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NoMemoryError,
    NonFiniteError,
    NotConvergedError,
    NotPositiveDefiniteError,
    PeerError,
    PermissionError,
    ProtocolError,
    QuotaError,
    ReenteredError,
    SessionClosedError,
    ShapeError,
    SingularMatrixError,
    TimeoutError,
    TooManyClientsError,
    UnknownHandleError,
    UnsupportedError,
    VersionError,
)
from . import fft  # noqa: E402,F401

__version__: str = _tenferro.library_version()
abs = absolute  # noqa: A001  (numpy's alias)

__all__ = [
    "connect", "Client", "Tensor", "Session", "ScopedSession", "SessionCounters",
    "PinnedBuffer", "PendingTransfer", "Prepared", "Spec",
    "add", "subtract", "multiply", "divide", "matmul", "negative", "conj", "absolute", "abs",
    "exp", "log", "sqrt", "square", "copy", "axpby", "transpose", "reshape", "sum", "max", "min",
    "einsum", "einsum_path", "fft", "prepare",
    "TenferroError", "InvalidArgumentError", "ProtocolError", "VersionError",
    "DisconnectedError", "UnknownHandleError", "ShapeError", "DtypeError", "AxisError",
    "ReenteredError", "ContendedError", "BusyError", "QuotaError", "NoMemoryError",
    "UnsupportedError", "DeviceError", "SessionClosedError", "InternalError",
    "TooManyClientsError", "BadShapeError", "BatchFailedError", "PeerError",
    "NotConvergedError", "SingularMatrixError", "NotPositiveDefiniteError", "NonFiniteError",
    "linalg",
    # TimeoutError, PermissionError and IoError are tenferro.* only: they would shadow builtins.
]



def __getattr__(name: str) -> Any:
    # tenferro.linalg imports numpy: loaded at its first use, not by `import tenferro`.
    if name == "linalg":
        import importlib

        return importlib.import_module(".linalg", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_OPTIMIZE = {"greedy": 0, "optimal": 1, "left_to_right": 2}


def _optimize_code(optimize: Any) -> int:
    """numpy's optimize= (False, True, 'greedy', 'optimal') as tf_einsum_optimize."""
    if optimize is True:
        return _OPTIMIZE["greedy"]
    if optimize is False:
        return _OPTIMIZE["left_to_right"]  # numpy's unoptimized order: left to right
    if isinstance(optimize, str) and optimize in _OPTIMIZE:
        return _OPTIMIZE[optimize]
    if isinstance(optimize, (list, tuple)):
        raise UnsupportedError(
            "einsum: an explicit path is not taken; use optimize='greedy', 'optimal', "
            "'left_to_right', True or False")
    raise InvalidArgumentError(
        "einsum: optimize must be 'greedy', 'optimal', 'left_to_right', True or False, "
        f"not {optimize!r}")


def _conj_mask(conj: Sequence[int] | int) -> int:
    if isinstance(conj, int):
        return conj
    mask = 0
    for i in conj:
        mask |= 1 << int(i)
    return mask


def einsum(subscripts: str, *operands: Tensor, optimize: Any = "greedy",
           conj: Sequence[int] | int = ()) -> Tensor:
    """Contracts operands in numpy's einsum notation ("ij,jk->ik"); one dtype, no promotion.

    The library parses the subscripts at the call, chooses the pairwise order
    (optimize: 'greedy', the default, 'optimal', 'left_to_right', or numpy's
    True / False), and queues one contraction per pair in the session.
    conj lists the operands to use complex-conjugated (indices, or a bit mask).
    """
    return _tenferro._einsum(subscripts, operands, _optimize_code(optimize), _conj_mask(conj))


def einsum_path(subscripts: str, *operands: Tensor, optimize: Any = "greedy",
                conj: Sequence[int] | int = ()) -> tuple[list[Any], str]:
    """The pairwise order einsum would queue and its cost, as numpy.einsum_path.

    Returns (path, report): path is ['einsum_path', (i, j), ...] in numpy's
    convention (positions in the list of operands left, each result appended
    at its end); report is the library's text, one line per step. Reads only
    the operands' metadata: needs no session.
    """
    info = _tenferro._einsum_path(subscripts, operands, _optimize_code(optimize),
                                  _conj_mask(conj))
    n = info["n_operands"]
    alive = list(range(n))
    path: list[Any] = ["einsum_path"]
    for k, step in enumerate(info["steps"]):
        ids = [step["a"]] if step["b"] < 0 else [step["a"], step["b"]]
        positions = tuple(sorted(alive.index(i) for i in ids))
        for p in sorted(positions, reverse=True):
            alive.pop(p)
        alive.append(n + k)
        path.append(positions)
    return path, info["report"]


class Spec(NamedTuple):
    """The dtype and shape of one input of a prepared graph."""

    shape: tuple[int, ...]
    dtype: Any = "float64"


def _spec_of(s: Any) -> tuple[tuple[int, ...], Any, Client | None]:
    if isinstance(s, Tensor):
        return s.shape, s.dtype, (None if s.symbolic else s.client)
    if isinstance(s, Spec):
        return tuple(s.shape), s.dtype, None
    if hasattr(s, "shape") and hasattr(s, "dtype"):  # an ndarray or a PinnedBuffer
        return tuple(s.shape), s.dtype, getattr(s, "client", None)
    if isinstance(s, tuple) and len(s) == 2:
        shape, dtype = s
        return (tuple(shape) if not isinstance(shape, int) else (shape,)), dtype, None
    raise TypeError(f"prepare: a spec is a Tensor, an ndarray, a Spec or (shape, dtype), not {s!r}")


def prepare(fn: Callable[..., Any], *specs: Any, client: Client | None = None) -> Prepared:
    """Records fn once on symbolic inputs and has the daemon check and plan it once.

    specs give each input's shape and dtype: a Tensor, an ndarray, a
    tenferro.Spec or a (shape, dtype) pair. fn receives symbolic tensors and
    returns a tensor or a tuple of them, using any operation of this package.
    The result is called with real tensors, inside a session or not:
    p = tenferro.prepare(lambda x, y: tenferro.exp(x * y), x, y); z = p(x, y).
    The client is client=, else the one of a Tensor spec, else the only open client.
    """
    parsed = [_spec_of(s) for s in specs]
    if client is None:
        owners = {id(c): c for _, _, c in parsed if c is not None}
        if len(owners) > 1:
            raise InvalidArgumentError("prepare: the specs are tensors of several clients")
        client = next(iter(owners.values()), None)
    if client is None:
        client = _tenferro._default_client()
    graph = client._graph()
    inputs = [graph.input(shape, dtype) for shape, dtype, _ in parsed]
    outputs = fn(*inputs)
    single = isinstance(outputs, Tensor)
    for out in (outputs,) if single else tuple(outputs):
        graph.output(out)
    return graph.prepare(single)
