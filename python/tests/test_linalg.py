"""tenferro.linalg against numpy.linalg on fresh random inputs: every function, all four dtypes,
square, tall, wide, batched and 1x1 matrices, in each session kind; gauges, svd_truncated's and
eigh_truncated's rule at its boundaries against a reference written here, typed errors naming
the failing matrix, and the held session's host_waits (one wait for a value-dependent rank)."""
import math

import numpy as np
import pytest

import tenferro as tf
import tenferro.linalg as la
from conftest import COMPLEX, DTYPES, MODES, REAL, daemon, mode_ctx, random_array, run

try:
    import hypothesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # the property tests below skip; make test-python installs hypothesis
    hypothesis = None

# (batch..., m, n): square, tall, wide, batched, 1x1
SHAPES = [(4, 4), (6, 3), (3, 5), (2, 3, 4, 3), (1, 1)]
SQUARE = [(4, 4), (1, 1), (2, 3, 3, 3), (5, 5)]


def single(dtype):
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64))


def real_of(dtype):
    return np.float32 if single(dtype) else np.float64


def tol(dtype):
    """Normwise tolerance of a decomposition's results (backward-stable, small matrices)."""
    return 1e-4 if single(dtype) else 1e-11


def close(got, want, dtype, scale=1.0, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    denom = max(float(np.max(np.abs(want))) if want.size else 0.0, 1.0)
    err = float(np.max(np.abs(got - want))) / denom if want.size else 0.0
    assert err <= tol(dtype) * scale, f"{what}: normwise error {err:g} (dtype {np.dtype(dtype)})"


def ct(x):
    return np.conj(np.swapaxes(x, -1, -2))


def eye_like(x, n):
    return np.broadcast_to(np.eye(n), x.shape[:-2] + (n, n))


def assert_gauge_columns(u, dtype, what):
    """The largest entry in magnitude of each column (the first of equals) is real positive."""
    mags = np.abs(u)
    flat = u.reshape((-1,) + u.shape[-2:])
    for b, mat in enumerate(flat):
        for j in range(mat.shape[1]):
            col = mat[:, j]
            if not np.any(col):
                continue  # a zeroed column past a truncated rank
            i = int(np.argmax(np.abs(col)))
            assert abs(col[i].imag) <= tol(dtype) * 10, (what, b, j, col[i])
            assert col[i].real > 0, (what, b, j, col[i])
    assert mags.shape == u.shape


def gauge_fix(u, vh=None):
    """numpy's factors in the daemon's gauge: column j of u times the phase that makes its
    largest entry real positive, row j of vh times the conjugate phase."""
    u = u.copy()
    vh = None if vh is None else vh.copy()
    fu = u.reshape((-1,) + u.shape[-2:])
    fv = None if vh is None else vh.reshape((-1,) + vh.shape[-2:])
    for b in range(fu.shape[0]):
        for j in range(fu.shape[2]):
            i = int(np.argmax(np.abs(fu[b, :, j])))
            z = fu[b, i, j]
            p = np.conj(z) / abs(z) if z != 0 else 1.0
            fu[b, :, j] *= p
            if fv is not None and j < fv.shape[1]:
                fv[b, j, :] *= np.conj(p)
    return fu.reshape(u.shape), (None if vh is None else fv.reshape(vh.shape))


def gauge_is_clear(u, s=None, margin=1e-3):
    """True when numpy's and the daemon's gauge must pick the same entries: every column's two
    largest magnitudes differ by more than margin, and the values (if given) are apart."""
    mags = np.sort(np.abs(u.reshape((-1,) + u.shape[-2:])), axis=1)
    if mags.shape[1] > 1 and np.any(mags[:, -1, :] - mags[:, -2, :] <= margin * mags[:, -1, :]):
        return False
    if s is not None and s.shape[-1] > 1:
        gaps = np.abs(np.diff(np.sort(s, axis=-1), axis=-1))
        if np.any(gaps <= margin * max(1.0, float(np.max(np.abs(s))))):
            return False
    return True


def hermitian(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    return ((x + ct(x)) / 2).astype(dtype)


def well_conditioned(rng, shape, dtype):
    n = shape[-1]
    return (random_array(rng, shape, dtype) + n * np.eye(n)).astype(dtype)


def positive_definite(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    n = shape[-1]
    return (x @ ct(x) + n * np.eye(n)).astype(dtype)


# ---------------------------------------------------------------- svd

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_reduced(client, rng, mode, shape, dtype):
    a = random_array(rng, shape, dtype)
    u, s, vh = run(client, mode, lambda x: tuple(la.svd(x, full_matrices=False)), a)
    m, n = shape[-2:]
    k = min(m, n)
    assert u.shape == shape[:-2] + (m, k) and s.shape == shape[:-2] + (k,)
    assert vh.shape == shape[:-2] + (k, n)
    assert u.dtype == np.dtype(dtype) and s.dtype == np.dtype(real_of(dtype))
    close((u * s[..., None, :]) @ vh, a, dtype, 10, "U S Vh")
    close(s, np.linalg.svd(a, compute_uv=False), dtype, 10, "S")
    assert np.all(np.diff(s, axis=-1) <= 0)
    close(ct(u) @ u, eye_like(u, k), dtype, 10, "U^H U")
    close(vh @ ct(vh), eye_like(vh, k), dtype, 10, "Vh Vh^H")
    assert_gauge_columns(u, dtype, "U")
    un, sn, vhn = np.linalg.svd(a, full_matrices=False)
    # |U^H U_np| is the identity whatever the gauge (distinct values)
    if gauge_is_clear(un, sn):
        close(np.abs(ct(u) @ un), eye_like(u, k), dtype, 100, "|U^H U_np|")
        uf, vf = gauge_fix(un, vhn)
        close(u, uf, dtype, 100, "U vs numpy's in the gauge")
        close(vh, vf, dtype, 100, "Vh vs numpy's in the gauge")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_full_matrices_default(client, rng, shape, dtype):
    a = random_array(rng, shape, dtype)
    t = client.tensor(a)
    r = la.svd(t)  # numpy's default: full_matrices=True
    assert isinstance(r, la.SVDResult) and r._fields == ("U", "S", "Vh")
    u, s, vh = r.U.numpy(), r.S.numpy(), r.Vh.numpy()
    m, n = shape[-2:]
    k = min(m, n)
    assert u.shape == shape[:-2] + (m, m) and vh.shape == shape[:-2] + (n, n)
    close(ct(u) @ u, eye_like(u, m), dtype, 10, "U unitary")
    close(vh @ ct(vh), eye_like(vh, n), dtype, 10, "Vh unitary")
    close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, dtype, 10, "reconstruction")
    close(s, np.linalg.svd(a, compute_uv=False), dtype, 10, "S")
    assert_gauge_columns(u, dtype, "U")


@pytest.mark.parametrize("dtype", DTYPES)
def test_svdvals_and_compute_uv(client, rng, dtype):
    for shape in SHAPES:
        a = random_array(rng, shape, dtype)
        t = client.tensor(a)
        want = np.linalg.svd(a, compute_uv=False)
        for got in (la.svdvals(t), la.svd(t, compute_uv=False),
                    la.svd(t, full_matrices=False, compute_uv=False)):
            assert isinstance(got, tf.Tensor) and got.dtype == np.dtype(real_of(dtype))
            close(got.numpy(), want, dtype, 10, "svdvals")
        close(la.svdvals(t).numpy(), np.linalg.svdvals(a), dtype, 10, "np.linalg.svdvals")


# ---------------------------------------------------------------- qr

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_qr(client, rng, mode, shape, dtype):
    a = random_array(rng, shape, dtype)
    m, n = shape[-2:]
    k = min(m, n)
    q, r = run(client, mode, lambda x: tuple(la.qr(x)), a)
    qc, rc = run(client, mode, lambda x: tuple(la.qr(x, mode="complete")), a)
    ro = run(client, mode, lambda x: la.qr(x, mode="r"), a)
    assert q.shape == shape[:-2] + (m, k) and r.shape == shape[:-2] + (k, n)
    assert qc.shape == shape[:-2] + (m, m) and rc.shape == shape[:-2] + (m, n)
    assert ro.shape == shape[:-2] + (k, n)
    for qq, rr, w in ((q, r, k), (qc, rc, m)):
        close(qq @ rr, a, dtype, 10, "Q R")
        close(ct(qq) @ qq, eye_like(qq, w), dtype, 10, "Q^H Q")
        assert np.all(np.tril(rr, -1) == 0), "R is upper triangular with exact zeros"
        d = np.diagonal(rr, axis1=-2, axis2=-1)[..., :k]
        assert np.all(d.real >= 0) and np.all(np.abs(d.imag) <= tol(dtype))
    close(ro, r, dtype, 1, "mode='r'")
    close(qc[..., :k], q, dtype, 10, "complete Q's first columns")
    # numpy's R in the daemon's gauge: each row times the phase making its diagonal real >= 0
    qn, rn = np.linalg.qr(a)
    d = np.diagonal(rn, axis1=-2, axis2=-1)
    p = np.where(d == 0, 1, np.conj(d) / np.where(d == 0, 1, np.abs(d)))
    close(r, rn * p[..., :, None], dtype, 100, "R vs numpy's")
    close(q, qn * np.conj(p)[..., None, :], dtype, 100, "Q vs numpy's")


def test_qr_modes_refused(client):
    t = client.tensor(np.ones((3, 2)))
    with pytest.raises(tf.UnsupportedError):
        la.qr(t, mode="raw")
    with pytest.raises(ValueError):
        la.qr(t, mode="economic")


# ---------------------------------------------------------------- eigh

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SQUARE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh(client, rng, mode, shape, dtype):
    h = hermitian(rng, shape, dtype)
    w, v = run(client, mode, lambda x: tuple(la.eigh(x)), h)
    wo = run(client, mode, la.eigvalsh, h)
    n = shape[-1]
    assert w.dtype == np.dtype(real_of(dtype)) and v.dtype == np.dtype(dtype)
    close(w, np.linalg.eigvalsh(h), dtype, 10, "eigenvalues")
    close(wo, w, dtype, 10, "eigvalsh")
    assert np.all(np.diff(w, axis=-1) >= 0)
    close(ct(v) @ v, eye_like(v, n), dtype, 10, "V^H V")
    close(h @ v, v * w[..., None, :], dtype, 10, "H V = V W")
    assert_gauge_columns(v, dtype, "V")
    wn, vn = np.linalg.eigh(h)
    if gauge_is_clear(vn, wn):
        close(v, gauge_fix(vn)[0], dtype, 100, "V vs numpy's in the gauge")


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_reads_one_triangle(client, rng, dtype):
    h = hermitian(rng, (2, 4, 4), dtype)
    junk = random_array(rng, (2, 4, 4), dtype) * 100
    lower = np.tril(h) + np.triu(junk, 1)     # garbage above the diagonal
    upper = np.triu(h) + np.tril(junk, -1)    # garbage below it
    tl, tu = client.tensor(lower), client.tensor(upper)
    wl, vl = (x.numpy() for x in la.eigh(tl))
    wu, vu = (x.numpy() for x in la.eigh(tu, UPLO="U"))
    close(wl, np.linalg.eigvalsh(lower, UPLO="L"), dtype, 10, "UPLO=L")
    close(wu, np.linalg.eigvalsh(upper, UPLO="U"), dtype, 10, "UPLO=U")
    close(la.eigvalsh(tu, UPLO="U").numpy(), wu, dtype, 10, "eigvalsh UPLO=U")
    close(h @ vu, vu * wu[..., None, :], dtype, 10, "H V = V W (upper)")
    with pytest.raises(ValueError):
        la.eigh(tl, UPLO="X")


# ---------------------------------------------------------------- cholesky, solve, inv, det

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SQUARE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky(client, rng, mode, shape, dtype):
    p = positive_definite(rng, shape, dtype)
    lo, up = run(client, mode, lambda x: (la.cholesky(x), la.cholesky(x, upper=True)), p)
    close(lo, np.linalg.cholesky(p), dtype, 10, "L")
    close(up, np.linalg.cholesky(p, upper=True), dtype, 10, "U")
    assert np.all(np.triu(lo, 1) == 0) and np.all(np.tril(up, -1) == 0)
    close(lo @ ct(lo), p, dtype, 10, "L L^H")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SQUARE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(client, rng, mode, shape, dtype):
    a = well_conditioned(rng, shape, dtype)
    n = shape[-1]
    bv = random_array(rng, shape[:-1] + (1,), dtype)    # one vector per matrix
    bm = random_array(rng, shape[:-1] + (3,), dtype)    # three right-hand sides
    xv, xm, ai, d, sign, logdet = run(
        client, mode,
        lambda x, y, z: (la.solve(x, y), la.solve(x, z), la.inv(x), la.det(x),
                         *la.slogdet(x)),
        a, bv, bm)
    close(xv, np.linalg.solve(a, bv), dtype, 10, "solve one column")
    close(xm, np.linalg.solve(a, bm), dtype, 10, "solve matrix")
    if len(shape) == 2:  # a 1-D b: a vector, as numpy 2
        b1 = random_array(rng, (n,), dtype)
        x1 = run(client, mode, la.solve, a, b1)
        close(x1, np.linalg.solve(a, b1), dtype, 10, "solve vector")
    close(ai, np.linalg.inv(a), dtype, 10, "inv")
    close(ai @ a, eye_like(a, n), dtype, 10, "inv(a) a")
    dn = np.linalg.det(a)
    assert d.dtype == np.dtype(dtype) and d.shape == shape[:-2]
    close(d / np.abs(dn), dn / np.abs(dn), dtype, 10, "det")
    sn, ln = np.linalg.slogdet(a)
    assert sign.dtype == np.dtype(dtype) and logdet.dtype == np.dtype(real_of(dtype))
    close(sign, sn, dtype, 10, "sign")
    close(logdet, ln, dtype, 10 * max(1.0, float(np.max(np.abs(ln)))), "logabsdet")


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_det_and_slogdet(client, dtype):
    a = np.array([[1, 2], [2, 4]], dtype=dtype)
    t = client.tensor(a)
    assert la.det(t).numpy() == 0
    sign, logdet = la.slogdet(t)
    assert sign.numpy() == 0 and logdet.numpy() == -np.inf


# ---------------------------------------------------------------- norms, trace, diagonal

VECTOR_ORDS = [None, 2, 1, np.inf, -np.inf, 0, 3, 0.5, -1.5]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_against_numpy(client, rng, mode, dtype):
    x = random_array(rng, (3, 4, 5), dtype)
    v = random_array(rng, (7,), dtype)
    m = random_array(rng, (4, 6), dtype)
    cases = []  # (tensor index, kwargs)
    for ord in VECTOR_ORDS:
        cases += [(1, dict(ord=ord)), (0, dict(ord=ord, axis=1)), (0, dict(ord=ord, axis=-1)),
                  (0, dict(ord=ord, axis=(0,), keepdims=True))]
    for ord in MATRIX_ORDS:
        cases += [(2, dict(ord=ord)), (0, dict(ord=ord, axis=(1, 2))),
                  (0, dict(ord=ord, axis=(2, 0), keepdims=True)), (2, dict(ord=ord, axis=(1, 0)))]
    cases += [(0, dict()), (0, dict(keepdims=True)), (2, dict(keepdims=True))]
    arrays = (x, v, m)
    got = run(client, mode,
              lambda *ts: tuple(la.norm(ts[i], **kw) for i, kw in cases), x, v, m)
    for (i, kw), g in zip(cases, got):
        want = np.linalg.norm(arrays[i], **kw)
        assert g.dtype == np.dtype(real_of(dtype)), kw
        close(g, np.asarray(want), dtype, 10, f"norm {kw}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_and_matrix_norm(client, rng, dtype):
    x = random_array(rng, (2, 3, 4), dtype)
    t = client.tensor(x)
    for ord in [2, 1, np.inf, -np.inf, 0, 2.5]:
        for axis in [None, 0, -1, (0, 2), (2, 0, 1)]:
            for keepdims in (False, True):
                got = la.vector_norm(t, axis=axis, keepdims=keepdims, ord=ord).numpy()
                want = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
                close(got, want, dtype, 10, f"vector_norm ord={ord} axis={axis}")
    for ord in ["fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]:
        for keepdims in (False, True):
            got = la.matrix_norm(t, keepdims=keepdims, ord=ord).numpy()
            want = np.linalg.matrix_norm(x, keepdims=keepdims, ord=ord)
            close(got, want, dtype, 10, f"matrix_norm ord={ord}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_of_a_scalar(client, rng, dtype):
    # A 0-d tensor is a vector of one element, as numpy and the array API have it.
    x = random_array(rng, (), dtype)
    t = client.tensor(x)
    for ord in [2, 1, np.inf, -np.inf, 0, 2.5]:
        for keepdims in (False, True):
            got = la.vector_norm(t, keepdims=keepdims, ord=ord).numpy()
            want = np.linalg.vector_norm(x, keepdims=keepdims, ord=ord)
            assert got.shape == want.shape
            close(got, want, dtype, 10, f"vector_norm of a scalar, ord={ord}")
    close(la.norm(t).numpy(), np.asarray(np.linalg.norm(x)), dtype, 10, "norm of a scalar")


def test_norm_refusals(client):
    x = client.tensor(np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="Improper number of dimensions"):
        la.norm(x, ord=2)                       # axis None, ord given, 3-D
    with pytest.raises(ValueError, match="Invalid norm order"):
        la.norm(x, ord=3, axis=(1, 2))          # no matrix 3-norm
    with pytest.raises(ValueError, match="Invalid norm order"):
        la.norm(x, ord="fro", axis=1)           # a string for a vector
    with pytest.raises(ValueError, match="Duplicate axes"):
        la.norm(x, axis=(1, 1))
    with pytest.raises(ValueError, match="Improper number of dimensions"):
        la.norm(x, axis=(0, 1, 2))
    with pytest.raises(tf.AxisError):
        la.norm(x, axis=3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_and_diagonal(client, rng, mode, dtype):
    x = random_array(rng, (2, 4, 5), dtype)
    offsets = [0, 1, -1, 4, -3]
    got = run(client, mode, lambda t: tuple(f(t, offset=o) for o in offsets
                                            for f in (la.trace, la.diagonal)), x)
    i = 0
    for o in offsets:
        tr, dg = got[i], got[i + 1]
        i += 2
        close(tr, np.linalg.trace(x, offset=o), dtype, 10, f"trace {o}")
        assert tr.dtype == np.dtype(dtype)
        close(dg, np.linalg.diagonal(x, offset=o), dtype, 1, f"diagonal {o}")
    close(la.trace(client.tensor(x[0])).numpy(), np.trace(x[0]), dtype, 10, "2-D trace")
    with pytest.raises(tf.InvalidArgumentError):
        la.diagonal(client.tensor(x), offset=5)   # no diagonal left (numpy: an empty one)


# ---------------------------------------------------------------- typed errors

def test_error_classes():
    for cls in (la.NotConvergedError, la.SingularMatrixError, la.NotPositiveDefiniteError,
                la.NonFiniteError):
        assert issubclass(cls, la.LinAlgError)
        assert getattr(tf, cls.__name__) is cls
        assert cls.__module__ == "tenferro.linalg"
    assert issubclass(la.LinAlgError, tf.TenferroError)
    assert issubclass(la.LinAlgError, np.linalg.LinAlgError)
    import tenferro._tenferro as ext
    statuses = {cls: st for st, cls in ext.errors_by_status.items()}
    assert statuses[la.NotConvergedError] == 25 and statuses[la.SingularMatrixError] == 26
    assert statuses[la.NotPositiveDefiniteError] == 27 and statuses[la.NonFiniteError] == 28


def test_numpy_stays_a_lazy_import():
    """`import tenferro` imports no numpy; tenferro.linalg does, and LinAlgError then derives
    from numpy's class (also for the classes taken from tenferro before)."""
    import subprocess
    import sys
    code = ("import sys, tenferro\n"
            "cls = tenferro.SingularMatrixError\n"
            "assert 'numpy' not in sys.modules\n"
            "import tenferro.linalg, numpy\n"
            "assert issubclass(cls, numpy.linalg.LinAlgError) and cls is tenferro.linalg.SingularMatrixError\n"
            "assert issubclass(cls, tenferro.TenferroError) and issubclass(cls, ValueError)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_is_typed_and_names_the_matrix(client, rng, dtype):
    a = random_array(rng, (3, 4, 4), dtype)
    a[1, 2, 0] = np.nan
    t = client.tensor(a)
    for fn in (la.svd, la.qr, la.eigh, la.inv, la.det, la.cholesky, la.svdvals,
               lambda x: la.svd_truncated(x, cutoff=1e-3)):
        with pytest.raises(np.linalg.LinAlgError) as e:
            fn(t)
        assert isinstance(e.value, la.NonFiniteError) and e.value.status == 28
        assert "matrix 1 of 3" in e.value.message, e.value.message
    b = client.tensor(random_array(rng, (3, 4, 1), dtype))
    with pytest.raises(la.NonFiniteError) as e:
        la.solve(t, b)
    assert "matrix 1 of 3" in e.value.message
    inf = np.ones((2, 2), dtype)
    inf[0, 0] = np.inf
    with pytest.raises(la.NonFiniteError):
        la.slogdet(client.tensor(inf))


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_solve_and_inv(client, rng, dtype):
    a = well_conditioned(rng, (2, 3, 3), dtype)
    a[1] = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 0]], dtype=dtype)
    t = client.tensor(a)
    b = client.tensor(random_array(rng, (2, 3, 2), dtype))
    with pytest.raises(la.SingularMatrixError) as e:
        la.solve(t, b)
    assert "matrix 1 of 2" in e.value.message and "singular" in e.value.message
    with pytest.raises(np.linalg.LinAlgError) as e:
        la.inv(t)
    assert isinstance(e.value, la.SingularMatrixError) and "matrix 1 of 2" in e.value.message


@pytest.mark.parametrize("dtype", DTYPES)
def test_not_positive_definite(client, rng, dtype):
    p = positive_definite(rng, (4, 3, 3), dtype)
    p[2] = -p[2]
    with pytest.raises(la.NotPositiveDefiniteError) as e:
        la.cholesky(client.tensor(p))
    assert "matrix 2 of 4" in e.value.message and "positive definite" in e.value.message


def test_failure_in_a_held_session_is_reported_by_its_boundary(client, rng):
    a = np.zeros((3, 3))
    t = client.tensor(a)
    ok = client.tensor(np.eye(3))
    with client.session() as s:
        y = ok + ok
        x = la.inv(t)          # queued: nothing fails at the call
        with pytest.raises(la.SingularMatrixError) as e:
            s.synchronize()
        assert e.value.failed_index == 1 and "matrix 0 of 1" in e.value.message
    assert np.array_equal(x.numpy(), np.zeros((3, 3)))  # reported once; the result holds zeros
    assert np.array_equal(y.numpy(), 2 * np.eye(3))
    with client.session():
        z = la.inv(t)
    with pytest.raises(la.SingularMatrixError):  # not reported yet: the download reports it
        z.numpy()


def test_failures_leave_no_tensor_behind(client, shared_daemon):
    t = client.tensor(np.zeros((3, 3)))
    nan = client.tensor(np.full((2, 2), np.nan))

    def live():
        t.numpy()  # a round trip: the frees sent before it have arrived
        return [k for k in shared_daemon.status()["clients"]
                if k["id"] == client.id][0]["live_tensors"]

    before = live()
    for _ in range(5):
        with pytest.raises(la.SingularMatrixError):
            la.inv(t)
        with pytest.raises(la.NonFiniteError):
            la.svd(nan)
        with pytest.raises(la.NonFiniteError):
            la.svd_truncated(nan, cutoff=0.1)
    assert live() == before


def test_no_leak_over_many_decompositions(client, shared_daemon, rng):
    import gc
    import tracemalloc

    a = client.tensor(random_array(rng, (2, 8, 6), np.float64))

    def live():
        a.numpy()
        return [k for k in shared_daemon.status()["clients"]
                if k["id"] == client.id][0]["live_tensors"]

    def work(n):
        with client.session():
            for _ in range(n):
                r = la.svd_truncated(a, cutoff=0.3, absorb="left")
                r2 = la.svd_truncated(a, max_rank=3)
                _ = r2.report.truncation_error
                _ = (la.norm(a, axis=(1, 2)), la.qr(a), la.slogdet(la.svd(a).U), r.U @ r.Vh)

    work(20)
    gc.collect()
    before = live()
    tracemalloc.start()
    work(300)
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert live() == before
    assert current < 256 * 1024, current


def test_refusals_at_the_call(client, rng):
    v = client.tensor(np.ones(4))
    m = client.tensor(np.ones((3, 4)))
    with pytest.raises(tf.ShapeError):
        la.svd(v)                                   # not a matrix
    with pytest.raises(tf.ShapeError):
        la.eigh(m)                                  # not square
    with pytest.raises(tf.ShapeError):
        la.inv(m)
    with pytest.raises(tf.DtypeError):
        la.solve(client.tensor(np.eye(3)), client.tensor(np.ones(3, np.float32)))
    with pytest.raises(tf.ShapeError):
        la.solve(client.tensor(np.eye(3)), client.tensor(np.ones(4)))
    with pytest.raises(tf.ShapeError, match="numpy 2"):   # numpy 2 would broadcast this b
        la.solve(client.tensor(np.stack([np.eye(3)] * 2)), client.tensor(np.ones((2, 3))))
    with pytest.raises(TypeError, match="client.tensor"):
        la.svd(np.ones((3, 3)))                     # host arrays are not uploaded implicitly
    with pytest.raises(TypeError):
        la.solve(client.tensor(np.eye(3)), np.ones(3))
    with pytest.raises(tf.InvalidArgumentError):
        la.svd_truncated(m, cutoff=-1.0)
    with pytest.raises(tf.InvalidArgumentError):
        la.svd_truncated(m, max_rank=1, min_rank=2)
    with pytest.raises(tf.InvalidArgumentError):
        la.svd_truncated(m, max_rank=0)
    with pytest.raises(tf.InvalidArgumentError):
        la.svd_truncated(m, absorb="middle")
    with pytest.raises(tf.AxisError):
        la.svd_truncated(m, split=2)                # no column axis left
    with pytest.raises(tf.AxisError):
        la.svd_truncated(client.tensor(np.ones((2, 3, 4))), split=((0,), (0, 2)))


# ---------------------------------------------------------------- truncation

def kept_rank(s, bound, tol, max_rank=0, min_rank=0, cutoff=0.0, rel_cutoff=0.0,
              discarded_weight=0.0, rel_discarded_weight=0.0, keep_degenerate=False):
    """The daemon's rule (common/truncation.h), in the same double arithmetic and order:
    (rank, discarded, total) of descending values s."""
    s = [float(x) for x in s]
    k = len(s)
    all_ = 0.0
    for x in s:
        all_ += x * x
    r = min(bound, k)
    if cutoff > 0:
        c = 0
        while c < r and s[c] > cutoff:
            c += 1
        r = c
    if rel_cutoff > 0:
        thr = rel_cutoff * s[0]
        c = 0
        while c < r and s[c] > thr:
            c += 1
        r = c
    if discarded_weight > 0 or rel_discarded_weight > 0:
        limit = -1.0
        if discarded_weight > 0:
            limit = discarded_weight
        if rel_discarded_weight > 0:
            rel = rel_discarded_weight * all_
            if limit < 0 or rel < limit:
                limit = rel
        tail = 0.0
        for i in range(r, k):
            tail += s[i] * s[i]
        while r > 0 and tail + s[r - 1] * s[r - 1] <= limit:
            tail += s[r - 1] * s[r - 1]
            r -= 1
    floor = min(min_rank, bound)
    r = max(r, floor)

    def degenerate(a, b):
        return a - b <= tol * a

    if keep_degenerate and 0 < r < k and degenerate(s[r - 1], s[r]):
        up = r
        while up < k and degenerate(s[up - 1], s[up]):
            up += 1
        if up <= bound:
            r = up
        else:
            down = r
            while down > 0 and degenerate(s[down - 1], s[down]):
                down -= 1
            if down >= floor and down > 0:
                r = down
    r = max(r, 1)
    gone = 0.0
    for i in range(r, k):
        gone += s[i] * s[i]
    return r, gone, all_


def degenerate_tol(dtype):
    return 3.4526698e-4 if single(dtype) else 1.4901161193847656e-8


def with_values(rng, m, n, values, dtype):
    """An m x n matrix with the given singular values (random unitary factors)."""
    k = min(m, n)
    qa, _ = np.linalg.qr(random_array(rng, (m, m), np.complex128 if np.dtype(dtype).kind == "c"
                                      else np.float64))
    qb, _ = np.linalg.qr(random_array(rng, (n, n), np.complex128 if np.dtype(dtype).kind == "c"
                                      else np.float64))
    return ((qa[:, :k] * np.asarray(values, dtype=np.float64)[:k]) @ qb[:k, :]).astype(dtype)


def rank_r_approximation(a, r):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return (u[..., :r] * s[..., None, :r]) @ vh[..., :r, :]


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_truncated_rank_bound_needs_no_wait(client, rng, dtype):
    a = random_array(rng, (6, 5), dtype)
    t = client.tensor(a)
    with client.session() as s:
        w0 = s.counters.host_waits
        u, sv, vh, rep = la.svd_truncated(t, max_rank=3)
        assert s.counters.host_waits == w0           # the rank is known at once
        assert u.shape == (6, 3) and sv.shape == (3,) and vh.shape == (3, 5)
        assert rep.rank == 3 and not rep.loaded and rep.ranks.shape == ()
        r2 = la.svd_truncated(t, max_rank=9, min_rank=2)  # the bound exceeds k = 5
        assert r2.U.shape == (6, 5) and r2.report.rank == 5
        assert s.counters.host_waits == w0
        err = rep.truncation_error                    # the first weight read waits once
        assert s.counters.host_waits == w0 + 1 and rep.loaded
        _ = rep.discarded_weight
        assert s.counters.host_waits == w0 + 1        # read once
    sn = np.linalg.svd(a, compute_uv=False)
    assert math.isclose(rep.discarded_weight, float(np.sum(sn[3:] ** 2)), rel_tol=1e-4)
    assert math.isclose(err, float(np.sum(sn[3:] ** 2) / np.sum(sn ** 2)), rel_tol=1e-4)
    close((u.numpy() * sv.numpy()) @ vh.numpy(), rank_r_approximation(a, 3), dtype, 100,
          "rank-3 approximation")


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_truncated_value_rule_waits_once_and_trims(client, rng, dtype):
    a = with_values(rng, 7, 6, [5.0, 3.0, 1.0, 0.1, 0.01, 0.001], dtype)
    t = client.tensor(a)
    with client.session() as s:
        w0 = s.counters.host_waits
        u, sv, vh, rep = la.svd_truncated(t, cutoff=0.5)
        assert s.counters.host_waits == w0 + 1       # exactly one wait: the report
        assert rep.loaded and rep.rank == 3
        assert u.shape == (7, 3) and sv.shape == (3,) and vh.shape == (3, 6)
        prod = (u * 1.0) @ vh                         # usable at once: queued, no wait
        assert s.counters.host_waits == w0 + 1
        s.submit()
        assert s.counters.host_waits == w0 + 1
    close((u.numpy() * sv.numpy()) @ vh.numpy(), rank_r_approximation(a, 3), dtype, 100,
          "trimmed reconstruction")
    assert prod.shape == (7, 6)
    assert math.isclose(rep.discarded_weight, 0.1 ** 2 + 0.01 ** 2 + 0.001 ** 2, rel_tol=1e-3)


def reference_values(t):
    """The singular values exactly as the truncation sees them: an untruncated svd_truncated."""
    r = la.svd_truncated(t)
    return r.S.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_truncated_options_at_their_boundaries(client, rng, dtype):
    a = random_array(rng, (6, 5), dtype)
    t = client.tensor(a)
    s = reference_values(t)
    k, tol_ = len(s), degenerate_tol(dtype)
    cases = [dict()]
    for j in range(k):
        v = float(s[j])
        below = float(np.nextafter(v, 0.0))
        cases += [dict(cutoff=v), dict(cutoff=below), dict(rel_cutoff=v / float(s[0])),
                  dict(rel_cutoff=below / float(s[0]))]
        tail = 0.0  # summed from the smallest, as the rule drops them
        for i in range(k - 1, j - 1, -1):
            tail += float(s[i]) * float(s[i])
        total = 0.0
        for x in s:
            total += float(x) * float(x)
        cases += [dict(discarded_weight=tail), dict(discarded_weight=float(np.nextafter(tail, 0))),
                  dict(rel_discarded_weight=tail / total)]
        cases += [dict(max_rank=j + 1, cutoff=float(s[-1]) * 0.5),
                  dict(min_rank=j + 1, cutoff=float(s[0]) * 2),
                  dict(max_rank=j + 1, min_rank=j + 1, rel_discarded_weight=0.999),
                  dict(max_rank=k, min_rank=j + 1, discarded_weight=1e9)]
    for kw in cases:
        bound = kw.get("max_rank") or k
        want_r, want_gone, want_total = kept_rank(s, bound, tol_, **kw)
        u, sv, vh, rep = la.svd_truncated(t, **kw)
        assert rep.rank == want_r, (kw, s)
        if any(kw.get(o) for o in ("cutoff", "rel_cutoff", "discarded_weight",
                                   "rel_discarded_weight")):
            assert sv.shape == (want_r,) and u.shape == (6, want_r) and vh.shape == (want_r, 5)
        else:
            assert sv.shape == (min(bound, k),)
        assert math.isclose(rep.discarded_weight, want_gone, rel_tol=1e-12, abs_tol=1e-300), kw
        assert math.isclose(rep.truncation_error, want_gone / want_total, rel_tol=1e-12,
                            abs_tol=1e-300), kw
        got_s = sv.numpy()
        assert np.array_equal(got_s[:want_r], s[:want_r]), kw
        assert np.all(got_s[want_r:] == 0), kw


@pytest.mark.parametrize("dtype", DTYPES)
def test_keep_degenerate(client, rng, dtype):
    values = [3.0, 2.0, 2.0, 2.0, 1.0, 0.5]
    a = with_values(rng, 6, 6, values, dtype)
    t = client.tensor(a)
    s = reference_values(t)
    tol_ = degenerate_tol(dtype)
    cases = [dict(max_rank=2, keep_degenerate=True),              # up goes past the bound: down
             dict(max_rank=3, min_rank=3, keep_degenerate=True),  # down below min_rank: stays
             dict(discarded_weight=5.3, keep_degenerate=True),    # cut inside: kept whole
             dict(discarded_weight=5.3),                          # the same cut, not kept whole
             dict(max_rank=5, keep_degenerate=True),
             dict(cutoff=2.5, keep_degenerate=True),
             dict(keep_degenerate=True)]
    for kw in cases:
        bound = kw.get("max_rank") or 6
        want, gone, total = kept_rank(s, bound, tol_, **kw)
        u, sv, vh, rep = la.svd_truncated(t, **kw)
        assert rep.rank == want, (kw, s, want)
        assert sv.shape == (want,) and u.shape == (6, want)
        assert math.isclose(rep.discarded_weight, gone, rel_tol=1e-12, abs_tol=1e-300)
    assert la.svd_truncated(t, max_rank=2, keep_degenerate=True).report.rank == 1
    assert la.svd_truncated(t, discarded_weight=5.3, keep_degenerate=True).report.rank == 4
    assert la.svd_truncated(t, discarded_weight=5.3).report.rank == 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_absorb_and_renormalize(client, rng, dtype):
    a = random_array(rng, (5, 4), dtype)
    t = client.tensor(a)
    u0, s0, vh0, _ = (x if i == 3 else x.numpy()
                      for i, x in enumerate(la.svd_truncated(t, max_rank=3)))
    for absorb, fu, fv in (("left", s0, 1), ("right", 1, s0), ("both", np.sqrt(s0), np.sqrt(s0)),
                           ("sqrt", np.sqrt(s0), np.sqrt(s0))):
        u, s, vh, _ = la.svd_truncated(t, max_rank=3, absorb=absorb)
        close(u.numpy(), u0 * fu, dtype, 10, f"U absorb={absorb}")
        close(vh.numpy(), vh0 * np.reshape(fv, (-1, 1)) if np.ndim(fv) else vh0, dtype, 10,
              f"Vh absorb={absorb}")
        close(s.numpy(), s0, dtype, 1, "S keeps the values")
    u, s, vh, rep = la.svd_truncated(t, max_rank=2, renormalize=True)
    sn = np.linalg.svd(a, compute_uv=False)
    close(s.numpy(), sn[:2] * np.sqrt(np.sum(sn ** 2) / np.sum(sn[:2] ** 2)), dtype, 10,
          "renormalized values")
    close(np.linalg.norm(s.numpy()), np.linalg.norm(a), dtype, 10, "norm kept")


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_truncated_batch_trims_to_the_largest_rank(client, rng, dtype):
    a = np.stack([with_values(rng, 5, 4, v, dtype) for v in
                  ([4, 3, 2, 1], [4, 0.1, 0.01, 0.001], [4, 3, 0.2, 0.1])])
    t = client.tensor(a)
    with client.session() as s:
        w0 = s.counters.host_waits
        u, sv, vh, rep = la.svd_truncated(t, cutoff=0.5)
        assert s.counters.host_waits == w0 + 1
    assert rep.ranks.tolist() == [4, 1, 2] and rep.rank == 4
    assert u.shape == (3, 5, 4) and sv.shape == (3, 4) and vh.shape == (3, 4, 4)
    u, sv, vh = u.numpy(), sv.numpy(), vh.numpy()
    for b, r in enumerate(rep.ranks):
        assert np.all(sv[b, r:] == 0) and np.all(u[b][:, r:] == 0) and np.all(vh[b][r:] == 0)
        close((u[b] * sv[b]) @ vh[b], rank_r_approximation(a[b], r), dtype, 100, f"matrix {b}")
    assert rep.discarded_weight.shape == (3,) and rep.truncation_error.shape == (3,)
    _, sv2, _, rep2 = la.svd_truncated(t, cutoff=3.5)
    assert rep2.ranks.tolist() == [1, 1, 1] and sv2.shape == (3, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_truncated_tensor_forms(client, rng, dtype):
    x = random_array(rng, (2, 3, 4, 2), dtype)
    t = client.tensor(x)
    u, s, vh, rep = la.svd_truncated(t, 2, max_rank=4)
    assert u.shape == (2, 3, 4) and s.shape == (4,) and vh.shape == (4, 4, 2)
    mat = x.reshape(6, 8)
    close(np.einsum("abr,r,rcd->abcd", u.numpy(), s.numpy(), vh.numpy()).reshape(6, 8),
          rank_r_approximation(mat, 4), dtype, 100, "split=2")
    u, s, vh, rep = la.svd_truncated(t, ((0, 2), (1, -1)), rel_cutoff=0.3)
    mat = x.transpose(0, 2, 1, 3).reshape(8, 6)
    sn = np.linalg.svd(mat, compute_uv=False)
    r = int(np.sum(sn > 0.3 * sn[0]))
    assert rep.rank == r and u.shape == (2, 4, r) and vh.shape == (r, 3, 2)
    close(np.einsum("acr,r,rbd->acbd", u.numpy(), s.numpy(), vh.numpy()).reshape(8, 6),
          rank_r_approximation(mat, r), dtype, 100, "split=((0, 2), (1, 3))")
    u, s, vh, rep = la.svd_truncated(t, (0, (1, 2, 3)))      # one axis as a bare int
    assert u.shape == (2, 2) and vh.shape == (2, 3, 4, 2)


@pytest.mark.parametrize("mode", MODES)
def test_svd_truncated_in_each_session_kind(client, rng, mode):
    a = with_values(rng, 6, 5, [4, 2, 1, 0.1, 0.01], np.float64)
    t = client.tensor(a)
    with mode_ctx(client, mode):
        u, s, vh, rep = la.svd_truncated(t, cutoff=0.5, absorb="right")
        y = u @ vh
    assert rep.rank == 3 and y.shape == (6, 5)
    close(y.numpy(), rank_r_approximation(a, 3), np.float64, 100, mode)


def eigh_order(w):
    """numpy's eigenvalues in eigh_truncated's order: |w| descending, the larger w first."""
    return sorted(w, key=lambda x: (-abs(x), -x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_truncated(client, rng, dtype):
    cplx = np.dtype(dtype).kind == "c"
    q, _ = np.linalg.qr(random_array(rng, (6, 6), np.complex128 if cplx else np.float64))
    values = np.array([3.0, -2.5, 2.0, -0.5, 0.1, -0.01])
    h = ((q * values) @ ct(q)).astype(dtype)
    h = ((h + ct(h)) / 2).astype(dtype)
    t = client.tensor(h)
    w, v, rep = la.eigh_truncated(t)
    order = eigh_order(np.linalg.eigvalsh(h))
    close(w.numpy(), np.array(order), dtype, 10, "order |w| descending")
    # equal magnitudes: the larger eigenvalue first (exact on a diagonal matrix)
    tie = la.eigh_truncated(client.tensor(np.diag([-3.0, 1.0, 3.0]).astype(dtype)))
    assert tie.eigenvalues.numpy().tolist() == [3.0, -3.0, 1.0]
    close(h @ v.numpy(), v.numpy() * w.numpy(), dtype, 10, "H V = V W")
    assert_gauge_columns(v.numpy(), dtype, "V")
    with client.session() as s:
        w0 = s.counters.host_waits
        wt, vt, rep = la.eigh_truncated(t, max_rank=4)
        assert s.counters.host_waits == w0 and wt.shape == (4,) and vt.shape == (6, 4)
        wt, vt, rep = la.eigh_truncated(t, cutoff=0.3)
        assert s.counters.host_waits == w0 + 1
    assert rep.rank == 4 and wt.shape == (4,) and vt.shape == (6, 4)
    close(wt.numpy(), np.array(order[:4]), dtype, 10, "kept pairs")
    reference = la.eigh_truncated(t).eigenvalues.numpy()
    mags = np.abs(reference)
    for kw in (dict(rel_cutoff=float(mags[2] / mags[0])), dict(discarded_weight=0.26),
               dict(max_rank=1, keep_degenerate=True), dict(max_rank=3, min_rank=2, cutoff=2.5)):
        want = kept_rank(mags, kw.get("max_rank") or 6, degenerate_tol(dtype), **kw)[0]
        assert la.eigh_truncated(t, **kw).report.rank == want, kw
    assert reference.shape == (6,)
    # upper triangle, batch, tensor form
    hb = np.stack([h, h])
    wb, vb, repb = la.eigh_truncated(client.tensor(np.triu(hb)), UPLO="U", max_rank=2)
    close(wb.numpy(), np.array([order[:2]] * 2), dtype, 10, "batched, UPLO=U")
    ht = h.reshape(2, 3, 2, 3)
    wt, vt, rept = la.eigh_truncated(client.tensor(ht), 2, cutoff=0.3)
    assert vt.shape == (2, 3, 4) and rept.rank == 4
    with pytest.raises(TypeError):
        la.eigh_truncated(t, absorb="left")


# ---------------------------------------------------------------- host waits in a loop

def test_host_waits_counter(client, rng):
    a = client.tensor(random_array(rng, (8, 8), np.float64))
    with client.session() as s:
        assert s.counters.host_waits == 0
        for _ in range(5):
            u, sv, vh, rep = la.svd_truncated(a, max_rank=4, absorb="left")
            a = u @ vh + a
        assert s.counters.host_waits == 0
        s.synchronize()
        assert s.counters.host_waits == 1
        for _ in range(3):
            u, sv, vh, rep = la.svd_truncated(a, max_rank=6, rel_cutoff=1e-3)
        assert s.counters.host_waits == 4
        a.numpy()
        assert s.counters.host_waits == 5
    assert s.counters.host_waits == 5                 # kept after the close


def test_report_read_after_the_session(client, rng):
    t = client.tensor(random_array(rng, (4, 3), np.float64))
    with client.session():
        _, sv, _, rep = la.svd_truncated(t, max_rank=2)
    assert not rep.loaded and rep.rank == 2
    sn = np.linalg.svd(t.numpy(), compute_uv=False)
    assert math.isclose(rep.discarded_weight, float(sn[2] ** 2), rel_tol=1e-10)
    assert "rank=2" in repr(rep)


# ---------------------------------------------------------------- properties (hypothesis)

needs_hypothesis = pytest.mark.skipif(hypothesis is None, reason="hypothesis is not installed")

if hypothesis is None:  # stand-ins, so the decorators below still evaluate; the tests skip
    class _Stub:
        def __getattr__(self, name):
            return lambda *a, **k: _Stub()

    st = _Stub()

    def given(*a, **k):
        return lambda f: f

    def prop_settings(f):
        return f
else:
    prop_settings = settings(max_examples=30, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])
dims = st.integers(1, 6)
batches = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2 ** 32 - 1)


@needs_hypothesis
@prop_settings
@given(batch=batches, m=dims, n=dims, dtype=dtypes, seed=seeds)
def test_property_svd_qr(client, batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = random_array(rng, batch + (m, n), dtype)
    t = client.tensor(a)
    u, s, vh = (x.numpy() for x in la.svd(t, full_matrices=False))
    k = min(m, n)
    close((u * s[..., None, :]) @ vh, a, dtype, 20, "U S Vh")
    close(s, np.linalg.svd(a, compute_uv=False), dtype, 20, "S")
    close(ct(u) @ u, eye_like(u, k), dtype, 20, "U^H U")
    assert np.all(np.diff(s, axis=-1) <= 0)
    assert_gauge_columns(u, dtype, "U")
    q, r = (x.numpy() for x in la.qr(t))
    close(q @ r, a, dtype, 20, "Q R")
    assert np.all(np.tril(r, -1) == 0)
    close(la.norm(t, axis=(-2, -1), ord="nuc").numpy(), np.sum(s, axis=-1), dtype, 20, "nuc")


@needs_hypothesis
@prop_settings
@given(batch=batches, n=dims, dtype=dtypes, seed=seeds)
def test_property_square(client, batch, n, dtype, seed):
    rng = np.random.default_rng(seed)
    h = hermitian(rng, batch + (n, n), dtype)
    w, v = (x.numpy() for x in la.eigh(client.tensor(h)))
    close(w, np.linalg.eigvalsh(h), dtype, 20, "eigenvalues")
    close(h @ v, v * w[..., None, :], dtype, 20, "H V = V W")
    a = well_conditioned(rng, batch + (n, n), dtype)
    ta = client.tensor(a)
    close(la.inv(ta).numpy() @ a, eye_like(a, n), dtype, 20, "inv")
    sign, logdet = (x.numpy() for x in la.slogdet(ta))
    sn, ln = np.linalg.slogdet(a)
    close(sign, sn, dtype, 20, "sign")
    close(logdet, ln, dtype, 20 * max(1.0, float(np.max(np.abs(ln)))), "logabsdet")
    p = positive_definite(rng, batch + (n, n), dtype)
    close(la.cholesky(client.tensor(p)).numpy(), np.linalg.cholesky(p), dtype, 20, "cholesky")


@needs_hypothesis
@prop_settings
@given(batch=batches, m=dims, n=dims, dtype=dtypes, seed=seeds,
       max_rank=st.one_of(st.none(), st.integers(1, 7)), min_rank=st.integers(0, 3),
       cutoff=st.one_of(st.none(), st.floats(0.0, 3.0)),
       rel_discarded_weight=st.one_of(st.none(), st.floats(0.0, 0.5)),
       keep_degenerate=st.booleans())
def test_property_truncation_rule(client, batch, m, n, dtype, seed, max_rank, min_rank, cutoff,
                                  rel_discarded_weight, keep_degenerate):
    if max_rank is not None and min_rank > max_rank:
        min_rank = max_rank
    rng = np.random.default_rng(seed)
    a = random_array(rng, batch + (m, n), dtype)
    t = client.tensor(a)
    s_all = reference_values(t).reshape((-1, min(m, n)))
    kw = dict(max_rank=max_rank, min_rank=min_rank or None, cutoff=cutoff,
              rel_discarded_weight=rel_discarded_weight, keep_degenerate=keep_degenerate)
    u, s, vh, rep = la.svd_truncated(t, **kw)
    k = min(m, n)
    bound = min(k, max_rank or k)
    opts = {key: (v or 0) for key, v in kw.items()}
    want = [kept_rank(row, bound, degenerate_tol(dtype), **opts) for row in s_all]
    ranks = np.asarray(rep.ranks).reshape(-1)
    assert ranks.tolist() == [w[0] for w in want], (kw, s_all)
    width = max(w[0] for w in want) if (cutoff or rel_discarded_weight or keep_degenerate) \
        else bound
    assert s.shape == batch + (width,) and u.shape == batch + (m, width)
    assert vh.shape == batch + (width, n)
    gone = np.asarray(rep.discarded_weight).reshape(-1)
    for g, w in zip(gone, want):
        assert math.isclose(g, w[1], rel_tol=1e-12, abs_tol=1e-300)


# ---------------------------------------------------------------- a daemon of its own

def test_linalg_on_a_fresh_daemon():
    """The namespace works on a connection made after `import tenferro.linalg`, and the
    report's read survives the client's other work between the call and the read."""
    with daemon() as d:
        with tf.connect(d.socket) as c:
            a = np.diag([3.0, 2.0, 1.0])
            _, s, _, rep = tf.linalg.svd_truncated(c.tensor(a), max_rank=2)
            _ = c.tensor(np.ones(3)) + c.tensor(np.ones(3))
            assert rep.rank == 2 and math.isclose(rep.discarded_weight, 1.0, rel_tol=1e-12)
            assert np.allclose(s.numpy(), [3, 2])


# ---------------------------------------------------------------- prepared graphs


def test_prepared_graph(client, rng):
    """Linear algebra recorded by tenferro.prepare: svd truncated by a cutoff (the bound's width,
    zeros past the rank each run finds), U S Vh contracted back, inv and solve; against numpy."""
    a = random_array(rng, (5, 4), np.float64)
    sq = random_array(rng, (3, 3), np.float64) + 3 * np.eye(3)
    b = random_array(rng, (3, 2), np.float64)

    def fn(x, s, y):
        u, sv, vh, rep = la.svd_truncated(x, rel_cutoff=0.3)
        back = tf.einsum("ir,r,rk->ik", u, sv, vh)
        return back, sv, rep.tensor, la.inv(s), la.solve(s, y)

    p = tf.prepare(fn, a, sq, b, client=client)
    for _ in range(3):
        a = random_array(rng, (5, 4), np.float64)
        ta, ts, tb = client.tensor(a), client.tensor(sq), client.tensor(b)
        with client.scoped():
            back, sv, rep, inv, x = p(ta, ts, tb)
        sn = np.linalg.svd(a, compute_uv=False)
        r = int(np.sum(sn > 0.3 * sn[0]))
        report = la.TruncationReport(rep)
        assert report.rank == r
        got = sv.numpy()
        assert got.shape == (4,)
        close(got[:r], sn[:r], np.float64, 10, "S")
        assert not np.any(got[r:])
        un, _, vhn = np.linalg.svd(a, full_matrices=False)
        close(back.numpy(), (un[:, :r] * sn[:r]) @ vhn[:r], np.float64, 10, "U S Vh")
        close(inv.numpy(), np.linalg.inv(sq), np.float64, 10, "inv")
        close(x.numpy(), np.linalg.solve(sq, b), np.float64, 10, "solve")
    p.free()
