"""Prepared graphs: recorded once, run in sessions, against numpy."""
import numpy as np
import pytest

import tenferro as tf
from conftest import DTYPES, assert_close, random_array


@pytest.mark.parametrize("dtype", DTYPES)
def test_prepare_and_run(client, rng, dtype):
    x = random_array(rng, (8, 8), dtype, positive=True)
    y = random_array(rng, (8, 8), dtype)
    tx, ty = client.tensor(x), client.tensor(y)
    p = tf.prepare(lambda a, b: tf.exp(a * b) + a @ b, tx, ty)
    assert p.n_inputs == 2 and p.outputs == [((8, 8), np.dtype(dtype))]
    with client.session() as s:
        outs = [p(tx, ty) for _ in range(3)]
        s.synchronize()
    want = np.exp(x * y) + x @ y
    for o in outs:
        assert_close(o.numpy(), want, dtype, scale=20)
    assert_close(p(tx, ty).numpy(), want, dtype, scale=20)  # outside a session: a burst of its own
    p.free()
    with pytest.raises(tf.UnknownHandleError):
        p(tx, ty)


def test_prepare_specs_and_several_outputs(client, rng):
    x = random_array(rng, (4, 6), np.float64)
    p = tf.prepare(lambda a: (a.T, tf.sum(a, axis=1), tf.fft.rfftn(a)), ((4, 6), np.float64),
                   client=client)
    t = client.tensor(x)
    with client.scoped():
        u, v, w = p(t)
    assert_close(u.numpy(), x.T, np.float64)
    assert_close(v.numpy(), x.sum(axis=1), np.float64)
    assert_close(w.numpy(), np.fft.rfftn(x), np.complex128, scale=10)
    q = tf.prepare(lambda a: a * 2.0, tf.Spec((4, 6), "float64"), client=client)
    assert_close(q(t).numpy(), x * 2, np.float64)
    r = tf.prepare(lambda a: a + a, x, client=client)  # an ndarray as a spec
    assert_close(r(t).numpy(), x + x, np.float64)


def test_prepared_refusals(client):
    p = tf.prepare(lambda a: a + a, ((4,), np.float32), client=client)
    with pytest.raises(tf.DtypeError):
        p(client.tensor(np.ones(4)))
    with pytest.raises(tf.ShapeError):
        p(client.tensor(np.ones(5, np.float32)))
    with pytest.raises(tf.InvalidArgumentError):
        p()
    with pytest.raises(tf.ShapeError):
        tf.prepare(lambda a, b: a + b, ((4,), "f4"), ((5,), "f4"), client=client)
    kept = []
    tf.prepare(lambda a: kept.append(a) or a * 2.0, ((3,), "f8"), client=client)
    assert kept[0].symbolic and "symbolic" in repr(kept[0])
    with pytest.raises(tf.InvalidArgumentError):
        kept[0].numpy()
    with pytest.raises(tf.InvalidArgumentError):
        kept[0] + kept[0]  # its graph was prepared
    with pytest.raises(tf.InvalidArgumentError):
        tf.prepare(lambda a: a + client.tensor(np.ones(3)), ((3,), "f8"), client=client)
