"""Concurrency: gobn's ops called at once from many threads give, bit for bit,
the results they give one at a time.

The work runs in a child Python (this file run as a script), so that
TensorFlow's inter-op thread pool can be sized before TensorFlow starts
(8 threads on any machine) and a crash fails the test instead of pytest. The
child computes every call once, alone; then

  - 8 Python threads run all the calls (valid and rejected) in shuffled
    orders, eagerly, 3 rounds each;
  - a tf.function with 24 independent branches (one per call) runs the calls
    in parallel on TensorFlow's inter-op threads, 3 times;

and every output (or error message) must equal the one computed alone. Some
calls are large enough (over 2·2^18 elements) that gobn's kernels also fan
out over goroutines. Results are deterministic for a fixed GOMAXPROCS: the
kernels split the work by size and GOMAXPROCS only.
"""

import json
import os

from support import run_child_report

THREADS = 8
ROUNDS = 3


def test_concurrent_calls_match_sequential():
    report = run_child_report(os.path.abspath(__file__))
    assert report["calls"] >= 24
    assert report["mismatches"] == [], "\n".join(report["mismatches"][:20])
    assert report["concurrent_calls"] >= THREADS * ROUNDS * report["calls"]
    assert report["rejected"] > 0 and report["accepted"] > 0


# ---------------------------------------------------------------------------
# The child.


def child():
    import random
    import threading

    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(8)
    import numpy as np

    import gobn

    lib = gobn.ops
    rng = np.random.default_rng(11)

    def normal(shape, dtype=tf.float32, positive=False):
        a = rng.standard_normal(shape)
        return tf.constant(np.abs(a) + 0.5 if positive else a, dtype)

    calls = []  # (name, fn, kwargs)
    shapes = [("NHWC", [2, 5, 6, 7], 7), ("NCHW", [2, 7, 5, 6], 7), ("NHWC", [4, 64, 64, 40], 40),
              ("NCHW", [5, 17, 121, 67], 17)]
    for op, dtypes in (("gobn_fused_batch_norm_grad", (tf.float32,)),
                       ("gobn_fused_batch_norm_grad_v2", (tf.float16,)),
                       ("gobn_fused_batch_norm_grad_v3", (tf.float32, tf.bfloat16))):
        for dtype in dtypes:
            for fmt, shape, c in shapes:
                for training in (True, False):
                    vec = dtype if op == "gobn_fused_batch_norm_grad" else tf.float32
                    kwargs = dict(y_backprop=normal(shape, dtype), x=normal(shape, dtype), scale=normal([c], vec),
                                  reserve_space_1=normal([c], vec), reserve_space_2=normal([c], vec, True),
                                  epsilon=1e-3, data_format=fmt, is_training=training)
                    if op.endswith("v3"):
                        kwargs["reserve_space_3"] = tf.zeros([0])
                    calls.append((f"{op}/{dtype.name}/{fmt}{shape}/training={training}", getattr(lib, op), kwargs))
    for dtype in (tf.float32, tf.float16, tf.float64):
        for shape in ([2, 5, 6, 7], [4, 64, 64, 40]):
            c = shape[-1]
            calls.append((f"global/{dtype.name}/{shape}", lib.gobn_batch_norm_with_global_normalization_grad,
                          dict(t=normal(shape, dtype), m=normal([c], dtype), v=normal([c], dtype, True),
                               gamma=normal([c], dtype), backprop=normal(shape, dtype),
                               variance_epsilon=1e-3, scale_after_normalization=True)))
    # Rejected calls: the same error message every time.
    for name, fn, kwargs in list(calls[:6]):
        bad = dict(kwargs, scale=normal([3], kwargs["scale"].dtype))
        calls.append((name + "/bad-scale", fn, bad))

    def run(fn, kwargs):
        try:
            return [o.numpy().tobytes() for o in fn(**kwargs)]
        except tf.errors.InvalidArgumentError as e:
            return e.message

    alone = {name: run(fn, kwargs) for name, fn, kwargs in calls}
    mismatches = []
    lock = threading.Lock()
    done = [0]

    def worker(seed):
        order = list(range(len(calls)))
        random.Random(seed).shuffle(order)
        for _ in range(ROUNDS):
            for i in order:
                name, fn, kwargs = calls[i]
                got = run(fn, kwargs)
                with lock:
                    done[0] += 1
                    if got != alone[name]:
                        mismatches.append(f"thread {seed}: {name} differs from the call alone")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # One graph with an independent branch per valid call: TensorFlow's
    # inter-op threads run the branches at once.
    valid = [(name, fn, kwargs) for name, fn, kwargs in calls if not isinstance(alone[name], str)][:24]

    @tf.function
    def branches():
        return [fn(**kwargs) for _, fn, kwargs in valid]

    for round_ in range(ROUNDS):
        for (name, _, _), outputs in zip(valid, branches()):
            if [o.numpy().tobytes() for o in outputs] != alone[name]:
                mismatches.append(f"tf.function round {round_}: {name} differs from the call alone")
    accepted = sum(not isinstance(v, str) for v in alone.values())
    print(json.dumps({"calls": len(calls), "accepted": accepted, "rejected": len(calls) - accepted,
                      "concurrent_calls": done[0], "graph_branches": len(valid) * ROUNDS,
                      "mismatches": mismatches}))


if __name__ == "__main__":
    child()
