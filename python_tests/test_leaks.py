"""Leaks: 20,000 calls, valid and rejected, grow resident memory by less than 5 MB.

How it is measured: a child Python (this file run as a script) loads the
library and makes its inputs once (small tensors for every case of every op
of the op table, each dtype, layout and mode, valid and rejected). It then runs three phases of 20,000 calls,
each after 2,000 warm-up calls of its own mix (so that TensorFlow's kernel
cache, Python's and Go's allocators and the Go heap reach their steady size),
reading its resident set size from /proc/self/statm (resident pages × page
size) after a gc.collect() before the phase and every 5,000 calls:

  valid   20,000 valid gobn calls: must grow by less than 5 MB;
  stock   20,000 stock FusedBatchNormGradV3 calls, one in three rejected by
          stock's kernel (InvalidArgument) — the control: TensorFlow 2.21
          itself keeps about 700 bytes per failed eager call of any op (a
          rejected tf.reshape does the same);
  mixed   20,000 gobn calls, one in three rejected: must grow by less than
          5 MB more than the control.

A leak of 256 bytes per call would show as 5 MB. The readings go to
build/reliability/leaks.json.
"""

import json
import os

from support import REPO_ROOT, run_child_report

WARMUP = 2000
CALLS = 20000
LIMIT_BYTES = 5 * 1024 * 1024
REPORT = os.path.join(REPO_ROOT, "build", "reliability", "leaks.json")


def mb(n):
    return f"{n / 2**20:.2f} MB"


def test_resident_memory_stays_flat():
    report = run_child_report(os.path.abspath(__file__))
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        json.dump(report, f, indent=1)
    phases = report["phases"]
    for name, phase in phases.items():
        assert phase["calls"] == CALLS, (name, phase)
    assert phases["valid"]["rejected"] == 0
    for name in ("mixed", "stock"):
        assert phases[name]["rejected"] >= CALLS // 4, (name, phases[name])
    readings = {name: [mb(r) for r in phase["rss_bytes"]] for name, phase in phases.items()}
    assert phases["valid"]["growth_bytes"] < LIMIT_BYTES, (
        f"{CALLS} valid calls grew resident memory by {mb(phases['valid']['growth_bytes'])}: {readings}")
    excess = phases["mixed"]["growth_bytes"] - phases["stock"]["growth_bytes"]
    assert excess < LIMIT_BYTES, (
        f"{CALLS} calls, a third rejected, grew resident memory by {mb(phases['mixed']['growth_bytes'])}, "
        f"{mb(excess)} more than stock's with the same mix: {readings}")


# ---------------------------------------------------------------------------
# The child.


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child():
    import gc

    import numpy as np
    import tensorflow as tf

    import gobn as package

    import support

    rng = np.random.default_rng(3)

    def normal(shape, dtype=tf.float32, positive=False):
        a = rng.standard_normal(shape)
        return tf.constant(np.abs(a) + 0.5 if positive else a, dtype)

    # Every case of every op (support.sample_calls), valid and rejected.
    gobn = support.sample_calls(lambda op: getattr(package.ops, op.wrapper), (2, 4, 4, 8), every_case=True)
    # The control: stock's FusedBatchNormGradV3, valid and rejected by its kernel.
    kwargs = dict(y_backprop=normal([2, 4, 4, 8]), x=normal([2, 4, 4, 8]), scale=normal([8]),
                  reserve_space_1=normal([8]), reserve_space_2=normal([8], positive=True),
                  reserve_space_3=tf.zeros([0]), data_format="NHWC", is_training=True)
    stock = [(tf.raw_ops.FusedBatchNormGradV3, kwargs, True),
             (tf.raw_ops.FusedBatchNormGradV3, dict(kwargs, scale=normal([7])), False)]

    def mix(calls, rejected):
        """Two valid calls to each rejected one (or only valid ones)."""
        return [c for c in calls if c[2]] * 2 + ([c for c in calls if not c[2]] if rejected else [])

    def phase(schedule):
        counts = {True: 0, False: 0}

        def call(i):
            fn, kwargs, valid = schedule[i % len(schedule)]
            try:
                out = fn(**kwargs)
                assert valid, "a bad call succeeded"
                del out
            except tf.errors.InvalidArgumentError:
                assert not valid, "a valid call failed"
            counts[valid] += 1

        for i in range(WARMUP):
            call(i)
        counts = {True: 0, False: 0}
        gc.collect()
        readings = [rss_bytes()]
        for i in range(CALLS):
            call(i)
            if (i + 1) % 5000 == 0:
                gc.collect()
                readings.append(rss_bytes())
        return {"calls": CALLS, "warmup": WARMUP, "accepted": counts[True], "rejected": counts[False],
                "rss_bytes": readings, "growth_bytes": readings[-1] - readings[0]}

    phases = {"valid": phase(mix(gobn, False)), "stock": phase(mix(stock, True)), "mixed": phase(mix(gobn, True))}
    print(json.dumps({"phases": phases}))


if __name__ == "__main__":
    child()
