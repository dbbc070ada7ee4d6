"""Several processes: contention for a held session, the GIL during waits, a daemon killed under a wait."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tenferro as tf
from conftest import daemon

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helper_holder.py")


def start_holder(socket, *args):
    p = subprocess.Popen([sys.executable, HELPER, socket, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    if not args:
        assert p.stdout.readline().strip() == "held"
    return p


def stop_holder(p):
    out, _ = p.communicate("\n", timeout=30)
    assert p.returncode == 0
    return out


def test_two_processes_contend(shared_daemon, client):
    holder = start_holder(shared_daemon.socket)
    try:
        with pytest.raises(tf.ContendedError) as e:
            client.session().open()
        assert e.value.message
        x = client.tensor(np.ones(4))
        with pytest.raises(tf.ContendedError):
            x + x
    finally:
        out = stop_holder(holder)
    assert "closed 2.0" in out
    with client.session():  # free again
        pass
    # The other way round: this process holds, a second Python process is refused.
    with client.session():
        p = start_holder(shared_daemon.socket, "open")
        out, _ = p.communicate(timeout=30)
        assert "error TF_ERR_CONTENDED" in out


def test_waiting_open_releases_the_gil():
    with daemon("--reservation-policy", "wait", "--wait-deadline-ms", "20000") as d:
        holder = start_holder(d.socket)
        ticks = [0]
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(0.001)

        def release_later():
            time.sleep(0.5)
            holder.stdin.write("\n")
            holder.stdin.flush()

        th = threading.Thread(target=count)
        rel = threading.Thread(target=release_later)
        th.start()
        rel.start()
        with tf.connect(d.socket) as c:
            t0 = time.monotonic()
            with c.session():  # waits in the daemon's queue, the GIL released
                waited = time.monotonic() - t0
        stop.set()
        th.join()
        rel.join()
        holder.communicate(timeout=30)
        assert waited >= 0.4
        assert ticks[0] > 50, ticks[0]  # the other thread ran while this one waited


def test_daemon_killed_under_a_waiting_open():
    d = daemon("--reservation-policy", "wait", "--wait-deadline-ms", "20000")
    with d as dd:
        holder = start_holder(dd.socket)
        c = tf.connect(dd.socket)
        x = c.tensor(np.ones(8))
        buf = c.pinned(8)
        killer = threading.Timer(0.3, dd.kill)
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(tf.DisconnectedError):
            c.session().open()
        assert time.monotonic() - t0 < 10
        killer.join()
        holder.kill()
        holder.wait()
        # Every later call is DisconnectedError, never a crash.
        for call in (x.numpy, lambda: x + x, lambda: c.tensor(np.ones(2)), c.scoped().__enter__,
                     lambda: c.pinned(4), lambda: c.upload_pending(buf, x),
                     lambda: tf.einsum("i,i->", x, x)):
            with pytest.raises(tf.DisconnectedError):
                call()
        c.close()


def test_daemon_killed_under_synchronize_and_wait():
    with daemon() as d:
        c = tf.connect(d.socket)
        n = 1024
        a = c.tensor(np.random.default_rng(0).random((n, n)))
        buf = c.pinned((n, n))
        t = c.zeros((n, n))
        s = c.session()
        s.open()
        for _ in range(40):
            a = a @ a * 1e-3
        threading.Timer(0.2, d.kill).start()
        with pytest.raises(tf.DisconnectedError):
            s.synchronize()
            time.sleep(0.5)      # on a fast device the work may finish first: the next call hears
            s.synchronize()
        with pytest.raises(tf.DisconnectedError):
            c.upload_pending(buf, t).result()
        s.release()
        c.close()
