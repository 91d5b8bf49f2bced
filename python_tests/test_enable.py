"""gobn.enable(): gobn's kernels for stock TensorFlow's own gradient ops.

enable() lasts for the process (TensorFlow cannot unregister a kernel), so
each test runs a child Python that computes stock's results first, enables
gobn, computes again and reports; this process never enables. Expected
values are stock TensorFlow's, computed in the same child before enable().

Stock BatchNormWithGlobalNormalizationGrad is refused by TensorFlow itself
in today's graphs (deprecated at GraphDef version 9) before any kernel is
chosen, so enable()'s kernels for it serve only older GraphDefs; it is
checked here only as registered.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import TOLERANCES
from test_cuda_build import cuda_mode

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The dtypes of T stock TensorFlow 2.21 registers kernels for, by device
# (its CPU and GPU builds' registries): what enable() must cover.
STOCK_KERNELS = {
    "FusedBatchNormGrad": {"CPU": ["float32"], "GPU": ["float32"]},
    "FusedBatchNormGradV2": {"CPU": ["bfloat16", "float16", "float32"], "GPU": ["bfloat16", "float16", "float32"]},
    "FusedBatchNormGradV3": {"CPU": ["bfloat16", "float16", "float32"], "GPU": ["bfloat16", "float16", "float32"]},
    "BatchNormWithGlobalNormalizationGrad": {"CPU": ["float16", "float32", "float64"],
                                             "GPU": ["float16", "float32"]},
}

CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, sys.argv[1])
    import gobn

    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5, 6, 8)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    mean, var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    scale = rng.standard_normal(8).astype(np.float32)

    def fused(op, dtype, fmt, training):
        xs, dys = x, dy
        if fmt == "NCHW":
            xs, dys = x.transpose(0, 3, 1, 2), dy.transpose(0, 3, 1, 2)
        args = dict(y_backprop=tf.cast(dys, dtype), x=tf.cast(xs, dtype), scale=scale,
                    reserve_space_1=mean, reserve_space_2=var, epsilon=1e-3, data_format=fmt,
                    is_training=training)
        if op == "FusedBatchNormGradV3":
            args["reserve_space_3"] = var
        out = getattr(tf.raw_ops, op)(**args)
        return [np.asarray(tf.cast(t, tf.float64)) for t in out[:3]]

    def train_step_fn():
        # A tf.function training step through tf.compat.v1.nn.fused_batch_norm
        # (stock's FusedBatchNormV3 forward; its registered gradient is
        # FusedBatchNormGradV3).
        w = tf.Variable(np.ones(8, np.float32))
        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, w, tf.zeros(8), is_training=True)
                loss = tf.reduce_sum(tf.square(y) * tf.range(8, dtype=tf.float32))
            g = tape.gradient(loss, [x, w])
            return loss, g[0], g[1]
        return step

    def keras2_losses():
        # A tf_keras (Keras 2) model as users write it: its BatchNormalization
        # runs stock's FusedBatchNormV3, and its gradient FusedBatchNormGradV3.
        import tf_keras
        tf_keras.utils.set_random_seed(3)
        model = tf_keras.Sequential([
            tf_keras.layers.Conv2D(6, 3, input_shape=(6, 8, 8)),
            tf_keras.layers.BatchNormalization(),
            tf_keras.layers.ReLU(),
            tf_keras.layers.Flatten(),
            tf_keras.layers.Dense(3)])
        model.compile(tf_keras.optimizers.SGD(0.05), "mse")
        data = np.random.default_rng(5).standard_normal((32, 6, 8, 8)).astype(np.float32)
        target = np.random.default_rng(6).standard_normal((32, 3)).astype(np.float32)
        return model.fit(data, target, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]

    cases = [(op, dt, fmt, tr) for op in ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
             for dt in ((tf.float32,) if op == "FusedBatchNormGrad" else (tf.float32, tf.float16, tf.bfloat16))
             for fmt in ("NHWC",) for tr in (True, False)]
    stock = {repr(c): fused(*c) for c in cases}
    stock_step = [np.asarray(t) for t in train_step_fn()(tf.constant(x))]
    stock_keras2 = keras2_losses()
    before = gobn.kernel_calls()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = gobn.enable()
    again = gobn.enable()

    got, calls = {}, {}
    for c in cases:
        got[repr(c)] = fused(*c)
        calls[repr(c)] = gobn.kernel_calls().get(c[0], {}).get("CPU", 0)
    n = gobn.kernel_calls().get("FusedBatchNormGradV3", {}).get("CPU", 0)
    got_step = [np.asarray(t) for t in train_step_fn()(tf.constant(x))]
    step_calls = gobn.kernel_calls().get("FusedBatchNormGradV3", {}).get("CPU", 0) - n
    got_keras2 = keras2_losses()
    keras2_calls = gobn.kernel_calls().get("FusedBatchNormGradV3", {}).get("CPU", 0) - n - step_calls

    def step_reference():
        # The step in float64: y = (x−μ)·c·w, loss = Σ k·y², c = 1/sqrt(σ²+ε).
        x64, w = x.astype(np.float64), np.ones(8)
        mu, c = x64.mean((0, 1, 2)), 1 / np.sqrt(x64.var((0, 1, 2)) + 1e-3)
        k = np.arange(8.0)
        y = (x64 - mu) * c * w
        dy = 2 * k * y
        dxmu = (dy * (x64 - mu)).mean((0, 1, 2))
        dx = w * c * (dy - dy.mean((0, 1, 2)) - (x64 - mu) * c * c * dxmu)
        return [np.sum(k * y * y), dx, (dy * (x64 - mu) * c).sum((0, 1, 2))]

    def err(a, b):
        return max(float(np.max(np.abs(p - q)) / max(float(np.max(np.abs(q))), 1e-30)) for p, q in zip(a, b))

    print(json.dumps({
        "before": before, "report": report, "same_report": again is report,
        "warnings": [str(w.message) for w in caught],
        "errors": {k: err(got[k], stock[k]) for k in stock},
        "calls": calls,
        "step_error": err(got_step, step_reference()), "stock_step_error": err(stock_step, step_reference()),
        "step_calls": step_calls,
        "keras2_losses": got_keras2, "stock_keras2_losses": stock_keras2, "keras2_calls": keras2_calls,
    }))
""")

# The child reports max|got - stock| / max|stock|: it must stay within the
# dtype's rtol (the project's tolerance table, gobn._testing.TOLERANCES).
TOLERANCE = {dtype: TOLERANCES[dtype][0] for dtype in ("float32", "float16", "bfloat16")}


def run_child(onednn):
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=str(onednn), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(REPO, "python")], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def without_onednn(gobn):
    return run_child(0)


@pytest.fixture(scope="module")
def with_onednn(gobn):
    return run_child(1)


def expected_report():
    want = {}
    for op, devices in STOCK_KERNELS.items():
        want[op] = {"CPU": devices["CPU"]}
        if cuda_mode():
            want[op]["GPU"] = devices["GPU"]
    return want


def test_enable_covers_every_stock_kernel_and_is_idempotent(without_onednn):
    r = without_onednn
    assert r["before"] == {}, "loading the library alone must not run gobn for stock ops"
    assert r["report"] == expected_report()
    assert r["same_report"]
    assert r["warnings"] == []


def test_stock_ops_run_on_gobn_with_stocks_results(without_onednn):
    r = without_onednn
    for case, e in sorted(r["errors"].items()):
        dtype = "float32" if "float32" in case else "float16" if "float16" in case else "bfloat16"
        assert e <= TOLERANCE[dtype], (case, e)
    for case in r["calls"]:
        # every case after enable() ran one more call of gobn's kernel for its op
        assert r["calls"][case] >= 1, case
    for op in ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"):
        counts = [n for case, n in r["calls"].items() if f"'{op}'" in case]
        assert counts == list(range(counts[0], counts[0] + len(counts))), (op, counts)


def test_training_step_in_a_tf_function_runs_on_gobn(without_onednn):
    r = without_onednn
    assert r["step_calls"] == 1
    # against the float64 reference, at least as accurate as stock's step
    assert r["step_error"] <= max(r["stock_step_error"], 1e-6), (r["step_error"], r["stock_step_error"])


def test_onednn_keeps_its_own_rewrite_and_enable_warns(with_onednn):
    """With oneDNN on, TensorFlow rewrites the float gradients to its _Mkl
    ops before a kernel is chosen: gobn's kernels do not run for them, as
    enable() documents and warns; the results stay stock's (oneDNN's)."""
    r = with_onednn
    assert r["report"] == expected_report()
    assert any("oneDNN" in w for w in r["warnings"])
    float_cases = [case for case in r["calls"] if "float32" in case]
    assert float_cases
    for case, e in r["errors"].items():
        dtype = "float32" if "float32" in case else "float16" if "float16" in case else "bfloat16"
        assert e <= TOLERANCE[dtype], (case, e)
    fused_v3_float = [case for case in float_cases if "'FusedBatchNormGradV3'" in case]
    counts = [r["calls"][case] for case in fused_v3_float]
    assert counts == [counts[0]] * len(counts), "float ran on oneDNN's rewrite, not on gobn"


def test_unmodified_tf_keras_model_trains_on_gobn(without_onednn):
    """A Keras 2 model trains with gobn computing every batch-norm gradient:
    two epochs of 4 batches, 8 gradient calls, and the losses of stock's run."""
    r = without_onednn
    assert r["keras2_calls"] == 8
    for got, want in zip(r["keras2_losses"], r["stock_keras2_losses"], strict=True):
        assert abs(got - want) <= 1e-4 * abs(want), (r["keras2_losses"], r["stock_keras2_losses"])
