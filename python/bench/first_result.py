"""py_first_result's program: a fresh interpreter imports tenferro, connects, uploads 1024 f64,
adds, downloads and exits (python/bench/first-result.c is the same program in C).

    python first_result.py SOCKET [--no-numpy]

--no-numpy uploads from array.array and downloads into one: the package's own start-up,
without numpy's import.
"""
import sys

if "--no-numpy" in sys.argv:
    import array

    import tenferro as tf

    with tf.connect(sys.argv[1]) as c:
        x = c.tensor(array.array("d", range(1024)))
        out = array.array("d", bytes(8 * 1024))
        (x + x).download(into=out)
        assert out[1023] == 2046.0
else:
    import numpy as np

    import tenferro as tf

    with tf.connect(sys.argv[1]) as c:
        x = c.tensor(np.arange(1024.0))
        y = (x + x).numpy()
        assert y[1023] == 2046.0
