"""Reference counts and memory stay flat over 10,000 operations: no leak in the extension."""
import gc
import sys
import tracemalloc

import numpy as np

import tenferro as tf

N = 10_000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def workload(c, x, y, buf, n):
    with c.session() as s:
        for i in range(n):
            x = x + y
            if i % 1000 == 999:
                s.submit()
    for _ in range(n // 100):
        z = (y * 2.0).sum(axis=0, keepdims=True)
        w = tf.einsum("i,i->", y, y)
        f = tf.fft.rfftn(y)
        y.download(into=buf)
    with c.scoped():
        for _ in range(n // 10):
            z = y - y
    try:
        for _ in range(n // 100):
            x + c.tensor(np.ones(3))  # a refused operation: the exception path
    except tf.ShapeError:
        pass
    del z, w, f
    return x


def test_operations_do_not_leak(shared_daemon):
    with tf.connect(shared_daemon.socket) as c:
        x = c.tensor(np.zeros(64))
        y = c.tensor(np.ones(64))
        buf = np.empty(64)
        x = workload(c, x, y, buf, 2000)  # warm-up: caches, free lists, the queue's capacity
        gc.collect()
        refs = (sys.getrefcount(c), sys.getrefcount(y), sys.getrefcount(buf))
        objects = len(gc.get_objects())
        rss = rss_kib()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        x = workload(c, x, y, buf, N)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert (sys.getrefcount(c), sys.getrefcount(y), sys.getrefcount(buf)) == refs
        assert abs(len(gc.get_objects()) - objects) < 50
        assert after - before < 64 * 1024, f"{after - before} bytes of Python memory kept"
        assert rss_kib() - rss < 4096, f"RSS grew by {rss_kib() - rss} KiB"
        assert np.array_equal(x.numpy(), np.full(64, float(2000 + N)))
        live = [k for k in shared_daemon.status()["clients"] if k["id"] == c.id][0]["live_tensors"]
        assert live <= 4, live  # x, y and nothing else left on the daemon


def test_pinned_and_transfers_do_not_leak(shared_daemon):
    with tf.connect(shared_daemon.socket) as c:
        t = c.zeros(256)
        buf = c.pinned(256)

        def round_trips(n):
            for _ in range(n):
                a = buf.array
                a[0] += 1
                del a
                c.upload_pending(buf, t).result()
                np.from_dlpack(buf)
                c.download_pending(t, buf).result()

        round_trips(200)
        gc.collect()
        refs = (sys.getrefcount(buf), sys.getrefcount(t))
        rss = rss_kib()
        round_trips(2000)
        gc.collect()
        assert (sys.getrefcount(buf), sys.getrefcount(t)) == refs and buf.views == 0
        assert rss_kib() - rss < 4096
        assert buf.array[0] == 2200
