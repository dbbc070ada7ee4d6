"""The Python package's benchmarks (make bench, scripts/bench.sh): BENCH lines, Python against C.

    python run_bench.py SOCKET BUILD_DIR

Each line is `BENCH <name> tenferrod=<the Python package> baseline=<the same work in C> unit=<u>`;
other lines start with '#'. The C programs are BUILD_DIR/pybench/* (python/bench/*.c).

  py_first_result       wall time of a fresh `python3 first_result.py --no-numpy` (import
                        tenferro, connect, upload 1024 f64 from an array.array, add, download
                        into one, exit) against the same program in C; median of 15, the two
                        alternating; seconds. A '#' line gives the same program with numpy
                        (whose own import is most of it) and the bare interpreter
  py_held_chain         10,000 dependent adds x = x + y (64 f64) in one held session, then
                        (each C run is the best of 3 in one process, after the first warms it)
                        submit and synchronize, from Python against C; best of 5; µs/op
                        (a '#' line splits off the queueing loop alone)
  py_pinned_upload_64m  a pending upload of 64 MiB from a pinned buffer into an existing tensor
                        (upload_pending + result), against the C client; 3 blocks of 15 per
                        side, alternating; the median of the block medians; GB/s
Timings never fail: the script exits non-zero only when something broke.
"""
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import tenferro as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_line(name, py, c, unit):
    print(f"BENCH {name} tenferrod={py:.4g} baseline={c:.4g} unit={unit}")
    print(f"# {name}: python/C = {py / c:.3f}" if c else f"# {name}: no baseline")
    sys.stdout.flush()


def wall(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def first_result(sock, build, reps=15):
    py_cmd = [sys.executable, os.path.join(HERE, "first_result.py"), sock]
    c_cmd = [os.path.join(build, "pybench", "first-result"), sock]
    wall(py_cmd)
    wall(c_cmd)  # warm the page cache and the daemon's first-use paths
    with_np, c, bare, np_alone, py = [], [], [], [], []
    for _ in range(reps):
        py.append(wall(py_cmd + ["--no-numpy"]))
        c.append(wall(c_cmd))
        with_np.append(wall(py_cmd))
        bare.append(wall([sys.executable, "-c", "pass"]))
        np_alone.append(wall([sys.executable, "-c", "import numpy"]))
    bench_line("py_first_result", statistics.median(py), statistics.median(c), "s")
    print(f"# py_first_result: the same program with numpy (np.arange in, .numpy() out) "
          f"{statistics.median(with_np):.4f} s; python3 -c pass {statistics.median(bare):.4f} s; "
          f"python3 -c 'import numpy' {statistics.median(np_alone):.4f} s")


def held_chain_py(client, chain=10_000):
    x = client.tensor(np.zeros(64))
    y = client.tensor(np.ones(64))
    s = client.session()
    s.open()
    t0 = time.perf_counter()
    for _ in range(chain):
        x = x + y
    queued = (time.perf_counter() - t0) * 1e6 / chain
    s.submit()
    s.synchronize()
    us = (time.perf_counter() - t0) * 1e6 / chain
    s.close()
    assert x.numpy()[63] == chain
    return us, queued


def held_chain(sock, build, reps=5):
    c_best, py_best, c_queue, py_queue = [], [], [], []
    with tf.connect(sock, name="py-held-chain") as client:
        held_chain_py(client, 2000)
        for _ in range(reps):
            out = subprocess.run([os.path.join(build, "pybench", "held-chain"), sock, "3"],
                                 check=True, capture_output=True, text=True).stdout
            total, queue = (float(v) for v in out.split())
            c_best.append(total)
            c_queue.append(queue)
            total, queue = held_chain_py(client)
            py_best.append(total)
            py_queue.append(queue)
    bench_line("py_held_chain", min(py_best), min(c_best), "us/op")
    print(f"# py_held_chain: python - C = {min(py_best) - min(c_best):.3f} us/op; queueing alone "
          f"(the loop before the submit): python {min(py_queue):.3f}, C {min(c_queue):.3f} us/op")


def pinned_upload(sock, build, reps=15, blocks=3):
    nbytes = 64 << 20
    c_prog = os.path.join(build, "pybench", "pinned-upload")
    with tf.connect(sock, name="py-pinned") as client:
        buf = client.pinned(nbytes // 8)
        t = client.zeros(nbytes // 8)
        buf.array[:] = np.arange(nbytes // 8, dtype=np.float64)
        client.upload_pending(buf, t).result()
        py_blocks, c_blocks = [], []
        for _ in range(blocks):  # the sides alternate in blocks: the machine's load hits both
            out = subprocess.run([c_prog, sock, str(reps)], check=True, capture_output=True,
                                 text=True).stdout
            c_blocks.append(float(out))
            py = []
            for _ in range(reps):
                t0 = time.perf_counter()
                client.upload_pending(buf, t).result()
                py.append(nbytes / (time.perf_counter() - t0) / 1e9)
            py_blocks.append(statistics.median(py))
        got = t.numpy()
        assert got[12345] == 12345.0 and got[-1] == nbytes // 8 - 1
    bench_line("py_pinned_upload_64m", statistics.median(py_blocks), statistics.median(c_blocks),
               "GB/s")
    print("# py_pinned_upload_64m: block medians python "
          + " ".join(f"{v:.2f}" for v in py_blocks) + ", C " + " ".join(f"{v:.2f}" for v in c_blocks))


def main():
    sock, build = sys.argv[1], sys.argv[2]
    first_result(sock, build)
    held_chain(sock, build)
    pinned_upload(sock, build)


if __name__ == "__main__":
    main()
