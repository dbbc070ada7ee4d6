"""Tensor.copy_to: a tensor from one daemon's device to another's (docs/multi-gpu.md)."""
import numpy as np
import pytest

import tenferro as tf
from conftest import DTYPES, daemon, random_array


@pytest.fixture(scope="module")
def second_daemon():
    with daemon() as d:
        yield d


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5), (1 << 20,)])
def test_copy_to_exact(client, second_daemon, rng, dtype, shape):
    a = random_array(rng, shape, dtype)
    with tf.connect(second_daemon.socket) as other:
        t = client.tensor(a)
        u = t.copy_to(other)
        assert u.shape == a.shape and u.dtype == a.dtype
        np.testing.assert_array_equal(u.numpy(), a)  # bit for bit
        np.testing.assert_array_equal(t.numpy(), a)  # the source is untouched and readable
        t.free()  # and free again once the copy returned
        v = (u * 2).numpy()  # the copy is an ordinary tensor of the other client
        np.testing.assert_allclose(v, a * 2, rtol=1e-6)


def test_copy_to_refusals(client, second_daemon, rng):
    t = client.tensor(random_array(rng, (4,), np.float64))
    with pytest.raises(tf.InvalidArgumentError):
        t.copy_to(client)  # one connection: copy with an operation instead
    with pytest.raises(TypeError):
        t.copy_to("not a client")
    with tf.connect(second_daemon.socket) as other:
        t.free()
        with pytest.raises(tf.UnknownHandleError):
            t.copy_to(other)
