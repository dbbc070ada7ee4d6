"""The Python suite's harness: a real tenferrod on a private socket, started by the test session.

Environment, as the C integration harness (tests/integration/harness.h):
  TENFERRO_DAEMON       the daemon binary (default: the repository's build/tenferrod)
  TENFERRO_TEST_DEVICE  the device the suite runs on (default cpu; the GPU machine: cuda:0)
  TENFERRO_TEST_SEED    the seed of the random inputs (printed; default: fresh each run)
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tenferro as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAEMON = os.environ.get("TENFERRO_DAEMON") or os.path.join(REPO, "build", "tenferrod")
CTL = os.path.join(os.path.dirname(os.path.abspath(DAEMON)), "tenferroctl")
DEVICE = os.environ.get("TENFERRO_TEST_DEVICE") or "cpu"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
REAL = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]

_counter = [0]
_runtime_dir = [""]


def runtime_dir() -> str:
    """The directory this test session's daemons share, as the daemons of one host share
    /run/tenferro: a copy between daemons (Tensor.copy_to) reaches only a socket of the
    receiving daemon's own directory. Made at first use, removed at exit."""
    if not _runtime_dir[0]:
        path = f"/tmp/tf-pytest-{os.getpid()}"
        os.makedirs(path, mode=0o711, exist_ok=True)
        _runtime_dir[0] = path
        atexit.register(shutil.rmtree, path, True)
    return _runtime_dir[0]


class Daemon:
    """One tenferrod process on a private socket."""

    def __init__(self, *extra: str):
        _counter[0] += 1
        tag = f"{os.getpid()}-{_counter[0]}"
        self.socket = f"{runtime_dir()}/tenferrod-{_counter[0]}.sock"
        self.log_path = f"/tmp/tf-pytest-{tag}.log"
        args = [DAEMON, "--socket", self.socket, "--device", DEVICE, "--log-level", "info", *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stderr=self.log, stdout=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tenferrod exited at start ({self.proc.returncode}): "
                                   + open(self.log_path).read())
            if os.path.exists(self.socket):
                try:
                    tf.connect(self.socket).close()
                    return
                except tf.TenferroError:
                    pass
            time.sleep(0.01)
        raise RuntimeError("tenferrod did not start: " + open(self.log_path).read())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket)
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def status(self) -> dict:
        out = subprocess.run([CTL, "--socket", self.socket, "status", "--json"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)


@contextlib.contextmanager
def daemon(*extra: str):
    d = Daemon(*extra)
    try:
        yield d
    finally:
        rc = d.stop()
        if rc not in (0, -9):
            raise AssertionError(f"tenferrod exited with {rc}: " + open(d.log_path).read())
        with contextlib.suppress(OSError):
            os.unlink(d.log_path)  # kept only when the daemon failed


@pytest.fixture(scope="session")
def shared_daemon():
    with daemon() as d:
        yield d


@pytest.fixture
def client(shared_daemon):
    c = tf.connect(shared_daemon.socket, name="pytest")
    yield c
    c.close()


@pytest.fixture(scope="session")
def seed():
    s = int(os.environ.get("TENFERRO_TEST_SEED") or random.SystemRandom().randrange(1 << 31))
    print(f"\nrandom inputs from TENFERRO_TEST_SEED={s}", file=sys.stderr)
    return s


@pytest.fixture
def rng(seed, request):
    # A fresh stream per test, reproducible from the session seed and the test's name.
    h = sum(ord(ch) * (i + 1) for i, ch in enumerate(request.node.nodeid)) % (1 << 30)
    return np.random.default_rng(seed + h)


def random_array(rng, shape, dtype, positive=False):
    """Random values in [-1,-0.1] U [0.1,1] (never zero), or [0.1, 2] when positive."""
    dtype = np.dtype(dtype)

    def part():
        if positive:
            return rng.uniform(0.1, 2.0, size=shape)
        mag = rng.uniform(0.1, 1.0, size=shape)
        return np.where(rng.random(size=shape) < 0.5, -mag, mag)

    x = part()
    if dtype.kind == "c":
        x = x + 1j * part()
    return np.asarray(x, dtype=dtype)


def tolerance(dtype) -> float:
    """What results are held to, normwise: 1e-5 single precision, 1e-12 double (C suites' rule)."""
    single = np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    return 2e-5 if single else 1e-12


def assert_close(got, want, dtype=None, scale=1.0):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    denom = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    err = float(np.max(np.abs(got - want))) / denom if want.size else 0.0
    assert err <= tolerance(got.dtype) * scale, f"normwise error {err:g}"


# The session kinds an operation is tried in: none (each call its own burst), held, scoped.
MODES = ["implicit", "held", "scoped"]


@contextlib.contextmanager
def mode_ctx(client, mode):
    """The session of kind mode on client (None for implicit), open for the block."""
    if mode == "held":
        with client.session() as s:
            yield s
    elif mode == "scoped":
        with client.scoped() as s:
            yield s
    else:
        yield None


def run(client, mode, fn, *arrays):
    """Uploads arrays, runs fn on the tensors inside the session kind, downloads the results."""
    ts = [client.tensor(a) for a in arrays]
    with mode_ctx(client, mode):
        out = fn(*ts)
    if isinstance(out, tuple):
        return tuple(o.numpy() for o in out)
    return out.numpy()
