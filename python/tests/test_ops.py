"""Every operation against numpy on fresh random inputs, all four dtypes, in each session kind."""
import numpy as np
import pytest

import tenferro as tf
from conftest import COMPLEX, DTYPES, MODES, REAL, assert_close, random_array, run


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise(client, rng, mode, dtype):
    a = random_array(rng, (3, 5), dtype)
    b = random_array(rng, (3, 5), dtype)
    p = random_array(rng, (3, 5), dtype, positive=True)
    got = run(client, mode, lambda x, y: (x + y, x - y, x * y, x / y, -x, tf.add(x, y),
                                          tf.subtract(x, y), tf.multiply(x, y), tf.divide(x, y),
                                          tf.negative(x), tf.conj(x), tf.copy(y), tf.square(x)),
              a, b)
    want = (a + b, a - b, a * b, a / b, -a, a + b, a - b, a * b, a / b, -a, np.conj(a), b,
            np.square(a))
    for g, w in zip(got, want):
        assert_close(g, w, dtype)
    got = run(client, mode, lambda x: (tf.exp(x), tf.log(x), tf.sqrt(x), abs(x), tf.absolute(x)), p)
    real = np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64
    assert_close(got[0], np.exp(p), dtype, scale=4)
    assert_close(got[1], np.log(p), dtype, scale=4)
    assert_close(got[2], np.sqrt(p), dtype, scale=4)
    assert_close(got[3], np.abs(p), real)
    assert_close(got[4], np.abs(p), real)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scalars_and_axpby(client, rng, mode, dtype):
    a = random_array(rng, (4, 3), dtype)
    b = random_array(rng, (4, 3), dtype)
    cplx = np.dtype(dtype).kind == "c"
    alpha = (0.5 - 2j) if cplx else -1.25
    got = run(client, mode, lambda x, y: (x * 2.0, 3 * x, x / 4.0, x * alpha, x * np.float32(1.5),
                                          tf.axpby(alpha, x, 2.0, y)), a, b)
    want = (a * 2.0, 3 * a, a / 4.0, a * alpha, a * 1.5, alpha * a + 2.0 * b)
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", REAL)
def test_complex_scalar_times_real_tensor_is_refused(client, dtype):
    x = client.tensor(np.ones(3, dtype))
    with pytest.raises(tf.DtypeError):
        x * 1j
    with pytest.raises(TypeError):  # no broadcast add of a scalar
        x + 1.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_reshape(client, rng, mode, dtype):
    a = random_array(rng, (2, 3, 4), dtype)
    got = run(client, mode, lambda x: (x.T, x.transpose(1, 0, 2), tf.transpose(x, (2, 0, 1)),
                                       x.reshape(6, 4), tf.reshape(x, (4, -1)), x.reshape((24,))), a)
    want = (a.T, a.transpose(1, 0, 2), np.transpose(a, (2, 0, 1)), a.reshape(6, 4),
            a.reshape(4, -1), a.reshape(24))
    for g, w in zip(got, want):
        assert_close(g, w, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions(client, rng, mode, dtype):
    a = random_array(rng, (3, 4, 5), dtype)
    cases = [dict(), dict(axis=0), dict(axis=-1), dict(axis=(0, 2)), dict(axis=1, keepdims=True),
             dict(axis=None, keepdims=True)]
    got = run(client, mode, lambda x: tuple(tf.sum(x, **k) for k in cases) +
              tuple(x.sum(**k) for k in cases), a)
    for g, k in zip(got, cases + cases):
        assert_close(g, np.sum(a, **k), dtype, scale=4)
    if np.dtype(dtype).kind == "f":
        got = run(client, mode, lambda x: (tf.max(x, axis=1), x.min(axis=(0, 1), keepdims=True),
                                           tf.max(x), tf.min(x, axis=-1)), a)
        want = (a.max(axis=1), a.min(axis=(0, 1), keepdims=True), a.max(), a.min(axis=-1))
        for g, w in zip(got, want):
            assert_close(g, w, dtype)
    else:
        with pytest.raises(tf.TenferroError):
            run(client, mode, lambda x: tf.max(x), a)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(client, rng, mode, dtype):
    a = random_array(rng, (7, 5), dtype)
    b = random_array(rng, (5, 3), dtype)
    x = random_array(rng, (2, 4, 6), dtype)
    y = random_array(rng, (2, 6, 3), dtype)
    got = run(client, mode, lambda p, q, r, s: (p @ q, tf.matmul(r, s)), a, b, x, y)
    assert_close(got[0], a @ b, dtype, scale=10)
    assert_close(got[1], x @ y, dtype, scale=10)


EINSUMS = [
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->", [(4, 4)]),
    ("ii->i", [(5, 5)]),
    ("ij->ji", [(3, 6)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 2)]),
    ("ij,jk,kl,lm->im", [(3, 4), (4, 5), (5, 6), (6, 2)]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_einsum(client, rng, mode, dtype):
    for subs, shapes in EINSUMS:
        arrays = [random_array(rng, s, dtype) for s in shapes]
        for optimize in ("greedy", "optimal", False, True):
            got = run(client, mode, lambda *t: tf.einsum(subs, *t, optimize=optimize), *arrays)
            assert_close(got, np.einsum(subs, *arrays), dtype, scale=10)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_einsum_conj(client, rng, dtype):
    a = random_array(rng, (4, 3), dtype)
    b = random_array(rng, (4, 3), dtype)
    got = run(client, "implicit", lambda x, y: tf.einsum("ij,ij->", x, y, conj=[0]), a, b)
    assert_close(got, np.einsum("ij,ij->", np.conj(a), b), dtype, scale=10)


def test_einsum_path(client, rng):
    shapes = [(8, 16), (16, 32), (32, 4), (4, 64)]
    arrays = [random_array(rng, s, np.float64) for s in shapes]
    ts = [client.tensor(a) for a in arrays]
    for opt in ("greedy", "optimal"):
        path, report = tf.einsum_path("ij,jk,kl,lm->im", *ts, optimize=opt)
        assert path[0] == "einsum_path" and len(path) == 4
        assert all(isinstance(p, tuple) and len(p) == 2 for p in path[1:])
        assert isinstance(report, str) and "ij" in report
        # numpy accepts the path as an explicit order and gives the same result.
        want = np.einsum("ij,jk,kl,lm->im", *arrays, optimize=path)
        assert_close(want, np.einsum("ij,jk,kl,lm->im", *arrays), np.float64, scale=10)
    npath, _ = np.einsum_path("ij,jk,kl,lm->im", *arrays, optimize="optimal")
    path, _ = tf.einsum_path("ij,jk,kl,lm->im", *ts, optimize="optimal")
    assert path == npath  # both are the cheapest order here


def test_einsum_errors(client):
    a = client.tensor(np.ones((2, 3)))
    b = client.tensor(np.ones((4, 5)))
    with pytest.raises(tf.InvalidArgumentError) as e:
        tf.einsum("ij,jk$->ik", a, b)
    assert "position" in e.value.message
    with pytest.raises(tf.ShapeError):
        tf.einsum("ij,jk->ik", a, b)
    with pytest.raises(tf.DtypeError):
        tf.einsum("ij,ij->", a, client.tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(tf.UnsupportedError):
        tf.einsum("ij,jk->ik", a, b, optimize=["einsum_path", (0, 1)])


NORMS = [None, "backward", "ortho", "forward"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_ffts(client, rng, mode, dtype):
    a = random_array(rng, (4, 6, 5), dtype)
    for norm in NORMS:
        for axes in (None, (1,), (0, 2), (-1, 0)):
            got = run(client, mode, lambda x: (tf.fft.fftn(x, axes=axes, norm=norm),
                                               tf.fft.ifftn(x, axes=axes, norm=norm)), a)
            assert_close(got[0], np.fft.fftn(a, axes=axes, norm=norm).astype(dtype), dtype, scale=10)
            assert_close(got[1], np.fft.ifftn(a, axes=axes, norm=norm).astype(dtype), dtype, scale=10)
    got = run(client, mode, lambda x: (tf.fft.fft(x), tf.fft.ifft(x, axis=0)), a)
    assert_close(got[0], np.fft.fft(a).astype(dtype), dtype, scale=10)
    assert_close(got[1], np.fft.ifft(a, axis=0).astype(dtype), dtype, scale=10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", REAL)
def test_real_ffts(client, rng, mode, dtype):
    a = random_array(rng, (4, 6, 7), dtype)
    cdtype = np.complex64 if np.dtype(dtype) == np.float32 else np.complex128
    for norm in NORMS:
        for axes in (None, (2,), (0, 1), (2, 0)):
            spec = np.fft.rfftn(a, axes=axes, norm=norm)
            got = run(client, mode, lambda x: tf.fft.rfftn(x, axes=axes, norm=norm), a)
            assert_close(got, spec.astype(cdtype), cdtype, scale=10)
            last = a.shape[(axes or (0, 1, 2))[-1]]
            s = [a.shape[ax] for ax in (axes or (0, 1, 2))]
            back = run(client, mode, lambda y: tf.fft.irfftn(y, s=s, axes=axes, norm=norm),
                       spec.astype(cdtype))
            want = np.fft.irfftn(spec, s=s, axes=axes or (0, 1, 2), norm=norm).astype(dtype)
            assert back.shape[(axes or (0, 1, 2))[-1]] == last
            assert_close(back, want, dtype, scale=10)
    got = run(client, mode, lambda x: tf.fft.rfft(x), a)
    assert_close(got, np.fft.rfft(a).astype(cdtype), cdtype, scale=10)
    spec = np.fft.rfft(a).astype(cdtype)
    back = run(client, mode, lambda y: tf.fft.irfft(y, n=7), spec)
    assert_close(back, np.fft.irfft(spec, n=7).astype(dtype), dtype, scale=10)


def test_fft_refusals(client):
    r = client.tensor(np.ones((4, 4)))
    z = client.tensor(np.ones((4, 4), np.complex128))
    with pytest.raises(tf.DtypeError):
        tf.fft.fftn(r)
    with pytest.raises(tf.DtypeError):
        tf.fft.rfftn(z)
    with pytest.raises(tf.AxisError):
        tf.fft.fftn(z, axes=(0, 5))
    with pytest.raises(tf.UnsupportedError):
        tf.fft.fftn(z, s=(8, 8))
    with pytest.raises(ValueError):
        tf.fft.fftn(z, norm="sideways")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mismatches_are_typed(client, dtype):
    a = client.tensor(np.ones((2, 3), dtype))
    with pytest.raises(tf.ShapeError):
        a + client.tensor(np.ones((3, 2), dtype))
    other = np.complex128 if np.dtype(dtype).kind == "f" else np.float64
    with pytest.raises(tf.DtypeError):
        a * client.tensor(np.ones((2, 3), other))
    with pytest.raises(tf.ShapeError):
        a @ client.tensor(np.ones((2, 3), dtype))
    with pytest.raises(tf.AxisError):
        a.sum(axis=2)
    with pytest.raises(tf.ShapeError):
        a.reshape(4, 2)
