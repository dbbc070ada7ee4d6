"""A second Python process for the contention tests: holds a held session until told to stop.

    python helper_holder.py SOCKET    prints 'held', waits for a line on stdin, closes, prints 'closed'
    python helper_holder.py SOCKET open   opens (waiting under the daemon's wait policy), prints
                                          'held' with how long the open took, closes
"""
import sys
import time

import numpy as np

import tenferro as tf

with tf.connect(sys.argv[1], name="py-holder") as c:
    x = c.tensor(np.ones(16))
    if len(sys.argv) > 2 and sys.argv[2] == "open":
        t0 = time.monotonic()
        try:
            with c.session() as s:
                print(f"held {time.monotonic() - t0:.3f}", flush=True)
                y = x + x
        except tf.TenferroError as e:
            print(f"error {e.status_name}", flush=True)
            sys.exit(0)
    else:
        with c.session() as s:
            y = x + x
            print("held", flush=True)
            sys.stdin.readline()
    print("closed", y.numpy()[0], flush=True)
