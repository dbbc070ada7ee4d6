"""Held and scoped sessions: boundaries, counters, exceptions, re-entry, and one class per status."""
import numpy as np
import pytest

import tenferro as tf
from conftest import daemon


def test_held_session_counters(client):
    x = client.tensor(np.ones(64))
    y = client.tensor(np.full(64, 2.0))
    with client.session() as s:
        assert s.is_open and client.active_session is s
        for _ in range(10):
            x = x + y
        s.submit()
        z = x * 0.5
        s.synchronize()
        k = s.counters
        assert k.held_operations == 11 and k.explicit_submits == 1
        assert k.explicit_synchronizes == 1 and k.failed_submits == 0
        w = z @ z.reshape(64, 1).reshape(64) if False else z.copy()
    assert not s.is_open and client.active_session is None
    final = s.counters
    assert final.close_submits == 1 and final.held_operations == 12
    assert final.queued_ops >= 12
    assert np.allclose(w.numpy(), 10.5)
    assert "closed" in repr(s)


def test_unsubmitted_result_is_busy(client):
    x = client.tensor(np.ones(8))
    with client.session() as s:
        y = x + x
        with pytest.raises(tf.BusyError) as e:
            y.numpy()
        assert "submit" in e.value.message
        s.submit()
        assert np.array_equal(y.numpy(), np.full(8, 2.0))


def test_exception_releases(client):
    x = client.tensor(np.ones(8))
    with pytest.raises(RuntimeError):
        with client.session() as s:
            y = x + x
            raise RuntimeError("boom")
    assert not s.is_open
    # Released, not submitted: the queued result is unknown to the daemon and the library.
    with pytest.raises(tf.UnknownHandleError):
        y.numpy()
    with client.session():  # the reservation was given back
        pass


def test_session_errors(client):
    s = client.session()
    with pytest.raises(tf.SessionClosedError):
        s.submit()
    with s:
        with pytest.raises(tf.ReenteredError):
            client.session().open()
        with pytest.raises(tf.ReenteredError):
            with client.scoped():
                pass
        with pytest.raises(tf.SessionClosedError):
            s.open()
    with pytest.raises(tf.SessionClosedError):
        s.synchronize()
    s.close()  # closing twice is harmless
    s.release()


def test_scoped(client):
    a = client.tensor(np.arange(4.0))
    with client.scoped() as sc:
        assert sc.is_active and client.active_session is sc
        b = a * 3.0
        c = b + a
        mid = c.numpy()  # a download inside the burst sends what is queued first
        d = tf.einsum("i,i->", c, c)
        with pytest.raises(tf.ReenteredError):
            with client.scoped():
                pass
        with pytest.raises(tf.ReenteredError):
            client.session().open()
    assert not sc.is_active and client.active_session is None
    assert np.array_equal(mid, np.arange(4.0) * 4)
    assert d.numpy() == pytest.approx(float(np.dot(np.arange(4.0) * 4, np.arange(4.0) * 4)))
    with pytest.raises(tf.SessionClosedError):
        sc.__enter__()


def test_scoped_exception_propagates(client):
    a = client.tensor(np.ones(3))
    with pytest.raises(KeyError):
        with client.scoped():
            b = a + a
            raise KeyError("x")
    # What the block queued before the exception still ran, as tf_with_session does.
    assert np.array_equal(b.numpy(), np.full(3, 2.0))
    with client.scoped():
        pass


def test_contended_between_clients(shared_daemon, client):
    with tf.connect(shared_daemon.socket) as other:
        t = other.tensor(np.ones(4))
        with client.session():
            with pytest.raises(tf.ContendedError) as e:
                other.session().open()
            assert e.value.status == 10 and e.value.message
            with pytest.raises(tf.ContendedError):
                t + t  # an operation outside a session is a scoped burst: refused too
            with pytest.raises(tf.ContendedError):
                with other.scoped():
                    u = t + t
        assert np.array_equal((t + t).numpy(), np.full(4, 2.0))
        del u


def test_failed_index_of_a_batch():
    # A per-client quota of live tensors makes the daemon refuse the third queued operation.
    with daemon("--client-live-tensors", "3") as d, tf.connect(d.socket) as c:
        x = c.tensor(np.ones(4))
        with pytest.raises(tf.QuotaError) as e:
            with c.session() as s:
                keep = [x + x, x * 2.0, x - x, x * 3.0]
                s.submit()
        assert e.value.failed_index is not None and e.value.failed_index >= 1
        assert "quota" in e.value.message or "live_tensors" in e.value.message
        assert s.counters.failed_submits == 1
        del keep


def test_timeout_under_wait_policy():
    with daemon("--reservation-policy", "wait", "--wait-deadline-ms", "200") as d:
        with tf.connect(d.socket) as a, tf.connect(d.socket) as b:
            with a.session():
                with pytest.raises(tf.TimeoutError) as e:
                    b.session().open()
                assert isinstance(e.value, TimeoutError)


def test_too_many_clients():
    with daemon("--max-clients", "1") as d:
        with tf.connect(d.socket):
            with pytest.raises(tf.TooManyClientsError):
                tf.connect(d.socket)


def test_every_status_has_its_class():
    import tenferro._tenferro as ext
    names = set()
    for st, cls in ext.errors_by_status.items():
        name, msg = ext.status_info(st)
        assert issubclass(cls, tf.TenferroError)
        assert cls.__doc__.startswith(name)
        names.add(cls.__name__)
        assert getattr(tf, cls.__name__) is cls
    for expected in ("ContendedError", "ReenteredError", "QuotaError", "BusyError",
                     "DisconnectedError", "BatchFailedError", "DeviceError"):
        assert expected in names
    assert issubclass(tf.ShapeError, ValueError) and issubclass(tf.DtypeError, TypeError)
