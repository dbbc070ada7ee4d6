"""Connecting, uploads and downloads, tensor metadata, and bad input at the boundary."""
import os

import numpy as np
import pytest

import tenferro as tf
from conftest import DTYPES, assert_close, random_array


def test_version():
    assert tf.__version__.count(".") == 2
    assert tf._tenferro.protocol_version() >= 1


def test_connect_rules(shared_daemon, monkeypatch):
    with tf.connect(shared_daemon.socket) as c:
        assert not c.closed and c.id > 0 and isinstance(c.device, str) and c.device
        assert "Client" in repr(c)
    assert c.closed
    monkeypatch.setenv("TENFERRO_SOCKET", shared_daemon.socket)
    with tf.connect() as c:  # $TENFERRO_SOCKET, as tf_connect
        assert c.socket is None
    with pytest.raises(tf.DisconnectedError) as e:
        tf.connect("/tmp/no-such-tenferrod.sock")
    assert "cannot connect" in e.value.message and e.value.status_name == "TF_ERR_DISCONNECTED"


def test_client_name(shared_daemon):
    with tf.connect(shared_daemon.socket, name="py-named-client"):
        names = [c.get("name") for c in shared_daemon.status().get("clients", [])]
        assert "py-named-client" in names, names
    assert os.environ.get("TENFERRO_CLIENT_NAME") != "py-named-client"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (1024,), (3, 5), (2, 3, 4), (2,) * 8, (70000,)])
def test_round_trip(client, rng, dtype, shape):
    a = random_array(rng, shape, dtype)
    t = client.tensor(a)
    assert t.shape == shape and t.dtype == np.dtype(dtype)
    assert t.nbytes == a.nbytes and t.ndim == len(shape) and t.size == a.size
    got = t.numpy()
    assert got.dtype == a.dtype and np.array_equal(got, a)
    into = np.empty_like(a)
    assert t.download(into=into) is into and np.array_equal(into, a)
    assert np.array_equal(np.asarray(t), a)


def test_repr_and_metadata(client):
    t = client.tensor(np.zeros((2, 3), np.complex64))
    r = repr(t)
    assert "shape=(2, 3)" in r and "complex64" in r
    assert t.client is client and not t.symbolic and t.handle > 0
    z = client.zeros((4,), np.float32)
    assert np.array_equal(z.numpy(), np.zeros(4, np.float32))
    assert "shape=(4,)" in repr(z)


def test_not_contiguous_is_copied_once(client, rng):
    a = random_array(rng, (6, 8), np.float64)
    view = a[:, ::2]
    assert not view.flags.c_contiguous
    assert np.array_equal(client.tensor(view).numpy(), view)
    assert np.array_equal(client.tensor(a.T).numpy(), a.T)
    assert np.array_equal(client.tensor([1.0, 2.0, 3.0]).numpy(), [1.0, 2.0, 3.0])
    assert client.tensor([1, 2], dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("bad", [np.arange(4), np.array([True, False]), np.array(["a"], object),
                                 np.array([1, None], dtype=object), np.ones(3, np.float16),
                                 np.ones(3, ">f8")])
def test_unsupported_dtypes(client, bad):
    with pytest.raises(tf.DtypeError) as e:
        client.tensor(bad)
    assert isinstance(e.value, TypeError) and "float32" in e.value.message


def test_bad_shapes(client):
    with pytest.raises(tf.BadShapeError):
        client.tensor(np.ones((1,) * 9))
    with pytest.raises(tf.BadShapeError):
        client.zeros((0, 3))
    with pytest.raises(TypeError):
        client.tensor(client.tensor(np.ones(2)))


def test_download_into_checks(client):
    t = client.tensor(np.ones((2, 3)))
    with pytest.raises(tf.ShapeError):
        t.download(into=np.empty(5))
    with pytest.raises(tf.DtypeError):
        t.download(into=np.empty(12, np.float32))
    with pytest.raises(tf.InvalidArgumentError):
        t.download(into=np.empty((6, 2))[:, ::2])
    raw = bytearray(48)  # raw bytes are fine
    t.download(into=raw)
    assert np.frombuffer(raw).tolist() == [1.0] * 6


def test_another_clients_tensor(shared_daemon, client):
    with tf.connect(shared_daemon.socket) as other:
        x = other.tensor(np.ones(4))
        y = client.tensor(np.ones(4))
        with pytest.raises(tf.UnknownHandleError) as e:
            x + y
        assert "another client" in e.value.message
        with pytest.raises(tf.UnknownHandleError):
            tf.einsum("i,i->", x, y)


def test_use_after_free_and_close(shared_daemon):
    c = tf.connect(shared_daemon.socket)
    t = c.tensor(np.ones(3))
    u = c.tensor(np.ones(3))
    t.free()
    assert t.freed and "freed" in repr(t)
    with pytest.raises(tf.UnknownHandleError):
        t.numpy()
    with pytest.raises(tf.UnknownHandleError):
        t + u
    s = c.session()
    c.close()
    c.close()  # twice is fine
    for call in (u.numpy, lambda: u + u, lambda: c.tensor(np.ones(2)), s.open,
                 lambda: c.pinned(4), c.scoped):
        with pytest.raises(tf.DisconnectedError):
            call()
    assert isinstance(tf.DisconnectedError("x"), ConnectionError)
