"""Large tensors (opt-in): more than 2^31 elements, proving gobn's int64 indexing.

Skipped unless GOBN_LARGE_TESTS=1: it needs about 14 GB of memory and a few
minutes. Run it with

    GOBN_LARGE_TESTS=1 .venv/bin/python -m pytest -q python_tests/test_large.py

x (and y_backprop, the same tensor) is a half tensor of 2^31 + 2^21 elements,
N = 2, C = 2: the first image all 1, the second all 2, so that elements past
index 2^31 hold different values than those before it. With μ = 0, σ² = 1,
ε = 0 and scale = 1, and P = H·W = 2^29 + 2^19 elements per image and
channel, the exact outputs are

    offset_backprop = Σdy = 3P,  scale_backprop = Σdy·x = 5P   (exact in float32)
    training:  x_backprop = dy − 3P/2P − x·5P/2P = −1.5·x − 1.5:  −3 and −4.5
    inference: x_backprop = dy: 1 and 2

Each case runs in a child Python; stock TensorFlow's FusedBatchNormGradV3 on
the same input runs in another child and its outcome (error, crash, wrong
answer) is recorded in build/reliability/large.json, not asserted.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from support import REPO_ROOT, child_env

ENABLED = os.environ.get("GOBN_LARGE_TESTS") == "1"
REPORT = os.path.join(REPO_ROOT, "build", "reliability", "large.json")
P = 2**29 + 2**19  # H·W
H, W = 2**15 + 2**5, 2**14
assert H * W == P

pytestmark = pytest.mark.skipif(not ENABLED, reason="set GOBN_LARGE_TESTS=1 (needs ~14 GB and a few minutes)")

CASES = [("NHWC", True), ("NCHW", False), ("NCHW", True)]


def run_child(*args, timeout=1200):
    env = child_env()
    return subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def record(key, value):
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    data = json.load(open(REPORT)) if os.path.exists(REPORT) else {}
    data[key] = value
    with open(REPORT, "w") as f:
        json.dump(data, f, indent=1)


@pytest.mark.parametrize("data_format, is_training", CASES)
def test_gobn_over_2_31_elements(data_format, is_training):
    proc = run_child("gobn", data_format, str(is_training))
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    record(f"gobn {data_format} training={is_training}", result)
    assert result["elements"] > 2**31
    assert result["x_backprop_shape"] == result["x_shape"]
    want_dx = [-3.0, -4.5] if is_training else [1.0, 2.0]
    for image, want in enumerate(want_dx):
        assert result["x_backprop_min"][image] == result["x_backprop_max"][image] == want, result
    assert result["offset_backprop"] == [3.0 * P] * 2, result
    assert result["scale_backprop"] == [5.0 * P] * 2, result


def test_stock_on_the_same_input():
    """Records what stock does with more than 2^31 elements (not asserted)."""
    proc = run_child("stock", "NHWC", "True")
    outcome = {"returncode": proc.returncode,
               "fatal": [line for line in proc.stderr.splitlines() if re.search(r"Check failed|^F\d{4}|Fatal|error", line)][:5]}
    if proc.returncode == 0:
        outcome.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        outcome["correct"] = (outcome.get("x_backprop_min") == [-3.0, -4.5] == outcome.get("x_backprop_max")
                              and outcome.get("offset_backprop") == [3.0 * P] * 2
                              and outcome.get("scale_backprop") == [5.0 * P] * 2)
    record("stock NHWC training=True", outcome)


# ---------------------------------------------------------------------------
# The child.


def child(which, data_format, is_training):
    import time

    import tensorflow as tf

    channels_first = data_format == "NCHW"
    block = [1, 2, H, W] if channels_first else [1, H, W, 2]
    x = tf.concat([tf.fill(block, tf.constant(1.0, tf.float16)), tf.fill(block, tf.constant(2.0, tf.float16))], 0)
    zeros, ones = tf.zeros([2]), tf.ones([2])
    kwargs = dict(y_backprop=x, x=x, scale=ones, reserve_space_1=zeros, reserve_space_2=ones,
                  reserve_space_3=tf.zeros([0]), epsilon=0.0, data_format=data_format, is_training=is_training)
    start = time.perf_counter()
    if which == "gobn":
        import gobn

        out = gobn.ops.gobn_fused_batch_norm_grad_v3(**kwargs)
    else:
        out = tf.raw_ops.FusedBatchNormGradV3(**kwargs)
    seconds = time.perf_counter() - start
    dx = out[0]
    result = {
        "elements": int(tf.size(x, tf.int64)), "x_shape": x.shape.as_list(), "x_backprop_shape": dx.shape.as_list(),
        "seconds": round(seconds, 2),
        "x_backprop_min": [float(tf.reduce_min(dx[i])) for i in range(2)],
        "x_backprop_max": [float(tf.reduce_max(dx[i])) for i in range(2)],
        "scale_backprop": [float(v) for v in out[1].numpy()],
        "offset_backprop": [float(v) for v in out[2].numpy()],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3] == "True")
