"""Pinned buffers as arrays with no copy, DLPack, pending transfers as futures."""
import gc

import numpy as np
import pytest

import tenferro as tf
from conftest import DTYPES, random_array


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_copy_views(client, dtype):
    buf = client.pinned((4, 8), dtype)
    assert buf.shape == (4, 8) and buf.dtype == np.dtype(dtype)
    assert buf.nbytes == 32 * np.dtype(dtype).itemsize
    a = buf.array
    assert a.shape == (4, 8) and a.dtype == np.dtype(dtype) and a.flags.writeable
    assert a.ctypes.data == buf.address
    b = np.asarray(buf)
    m = memoryview(buf)
    assert np.shares_memory(a, b) and b.ctypes.data == buf.address
    assert m.nbytes == buf.nbytes and m.shape == (4, 8)
    a[1, 2] = 7
    assert b[1, 2] == 7 and np.frombuffer(m.cast("B"), dtype=dtype).reshape(4, 8)[1, 2] == 7
    assert buf.views >= 3
    del a, b, m
    assert buf.views == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_pending_upload_and_download(client, rng, dtype):
    x = random_array(rng, (64, 16), dtype)
    buf = client.pinned(x.shape, dtype)
    address = buf.address
    buf.array[...] = x                      # the view dies at the end of the statement
    t = client.zeros(x.shape, dtype)
    fut = client.upload_pending(buf, t)
    assert buf.busy and "pending" in repr(buf)
    with pytest.raises(tf.BusyError):
        buf.array                           # unreachable while the daemon may read it
    with pytest.raises(tf.BusyError):
        np.asarray(buf)
    with pytest.raises(tf.BusyError):
        buf.__dlpack__()
    with pytest.raises(tf.BusyError):
        t.numpy()
    while not fut.done():                   # never blocks
        pass
    t2, b2 = fut.result()
    assert t2 is t and b2 is buf and not buf.busy
    assert np.array_equal(t.numpy(), x)
    assert fut.result()[0] is t             # result() again hands back the same pair
    # The daemon writes the pages: y = 2x, downloaded into the same buffer.
    y = t * 2.0
    fut = client.download_pending(y, buf)
    y2, b3 = fut.result()
    arr = b3.array
    assert arr.ctypes.data == address       # the same mapping: no copy anywhere
    assert np.array_equal(arr, x * 2)


def test_transfer_refused_while_views_are_alive(client):
    buf = client.pinned(16)
    t = client.zeros(16)
    view = buf.array
    with pytest.raises(tf.BusyError) as e:
        client.upload_pending(buf, t)
    assert "view" in e.value.message
    del view
    client.upload_pending(buf, t).result()


def test_release_and_drop(client):
    buf = client.pinned(1024)
    t = client.zeros(1024)
    fut = client.upload_pending(buf, t)
    fut.release()
    assert t.freed and buf.freed
    with pytest.raises(tf.UnknownHandleError):
        buf.array
    with pytest.raises(tf.InvalidArgumentError):
        fut.result()
    # Dropping an unfinished transfer waits for it: both come back usable.
    buf = client.pinned(1024)
    t = client.zeros(1024)
    buf.array[:] = 3.0
    client.upload_pending(buf, t)
    gc.collect()
    assert not buf.busy and np.array_equal(t.numpy(), np.full(1024, 3.0))


def test_size_mismatch_and_other_client(shared_daemon, client):
    buf = client.pinned(8)
    with pytest.raises(tf.InvalidArgumentError):
        client.upload_pending(buf, client.zeros(9)).result()
    with tf.connect(shared_daemon.socket) as other:
        with pytest.raises(tf.UnknownHandleError):
            other.upload_pending(buf, other.zeros(8))


def test_dlpack(client):
    buf = client.pinned((3, 5), np.complex64)
    dev = buf.__dlpack_device__()
    assert dev == ((3 if client.is_cuda else 1), 0)
    buf.array[...] = 1 + 2j
    a = np.from_dlpack(buf)
    assert a.ctypes.data == buf.address and a.dtype == np.complex64 and a.shape == (3, 5)
    assert np.all(a == 1 + 2j) and buf.views == 1
    legacy = buf.__dlpack__()
    assert buf.views == 2
    del legacy  # an unconsumed capsule gives its view back
    del a
    gc.collect()
    assert buf.views == 0


def test_array_outlives_free_and_close(shared_daemon):
    c = tf.connect(shared_daemon.socket)
    buf = c.pinned(4096)
    a = buf.array
    a[:] = 5.0
    buf.free()
    assert buf.freed and a.sum() == 5.0 * 4096  # the array keeps its mapping
    a[:] = 1.0
    with pytest.raises(tf.UnknownHandleError):
        buf.array
    buf2 = c.pinned(4096)
    b = np.asarray(buf2)
    b[:] = 2.0
    c.close()
    assert b.sum() == 2.0 * 4096               # no fault after the client's close
    b[:] = 3.0
    with pytest.raises(tf.UnknownHandleError):
        buf2.array
    del a, b, buf, buf2
    gc.collect()


def test_close_with_a_transfer_in_flight(shared_daemon):
    c = tf.connect(shared_daemon.socket)
    buf = c.pinned(1 << 20)
    t = c.zeros(1 << 20)
    fut = c.upload_pending(buf, t)
    c.close()
    with pytest.raises(tf.DisconnectedError):
        fut.result()
    assert fut.done() and buf.freed and t.freed
