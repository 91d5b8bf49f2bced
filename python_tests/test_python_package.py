"""The Python package (python/gobn): finding the library, gobn.ops, and
gobn.fused_batch_norm against tf.compat.v1.nn.fused_batch_norm, first-order
gradients included (finite differences too).

support.py puts <repo>/python on sys.path, as PYTHONPATH=python does.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import gobn
from gobn._opdefs_gen import BY_KIND
from support import BUILT_LIBRARY, CHANNELS_FIRST, GRADIENT_SCRIPT, assert_close, child_env, fused_inputs

FUSED_V3 = BY_KIND["FusedBatchNormGrad"][-1]

# (data_format, shape): C = 3 in every case.
LAYOUTS = [
    ("NHWC", (4, 5, 6, 3)),
    ("NCHW", (4, 3, 5, 6)),
    ("NDHWC", (2, 3, 4, 5, 3)),
    ("NCDHW", (2, 3, 3, 4, 5)),
]


def random_inputs(shape, data_format, dtype=tf.float32, seed=0):
    """x, the loss's dy (w), scale, offset, and a population mean and variance
    for a shape laid out as data_format (fused_inputs' inference inputs)."""
    logical = shape[:1] + shape[2:] + shape[1:2] if data_format in CHANNELS_FIRST else shape
    case = fused_inputs(FUSED_V3, dtype, data_format, False, logical, seed)
    inputs = case.inputs
    return (inputs["x"], inputs["y_backprop"], inputs["scale"], case.offset, inputs["reserve_space_1"],
            inputs["reserve_space_2"])


# ---------------------------------------------------------------------------
# Finding the library (test_loading.py mixes the ways of loading it in fresh
# processes)


def test_library_is_the_checkouts_build():
    gobn.load_library()
    assert gobn.library_path() == os.path.realpath(BUILT_LIBRARY)


def test_ops_module_has_every_op():
    """Every op of opdef, under the wrapper name genpy computed for it."""
    from gobn import _opdefs_gen
    from tensorflow.python.framework import op_def_registry

    for op in _opdefs_gen.OPS:
        assert callable(getattr(gobn.ops, op.wrapper)), op
        assert op_def_registry.get(op.name) is not None, op.name
    assert gobn.load_library() is gobn.ops
    wrappers = [n for n in dir(gobn.ops) if n.startswith("gobn_") and not n.endswith("_eager_fallback")]
    assert sorted(wrappers) == sorted(op.wrapper for op in _opdefs_gen.OPS)


def test_ops_of_a_loaded_library_are_reused(monkeypatch):
    """With a copy loaded already, gobn makes its op module from TensorFlow's
    registry and loads nothing; a pinned path other than that copy's is refused."""
    from gobn import _library

    monkeypatch.setattr(_library, "_ops", None)
    monkeypatch.delenv("GOBN_LIBRARY", raising=False)
    ops = gobn.load_library()
    x = tf.ones([2, 2, 2, 3])
    out = ops.gobn_fused_batch_norm_grad_v3(x, x, tf.ones([3]), tf.zeros([3]), tf.ones([3]), tf.zeros([3]))
    assert out.x_backprop.shape == x.shape
    monkeypatch.setenv("GOBN_LIBRARY", "/elsewhere/libgobn.so")
    with pytest.raises(ImportError) as e:
        gobn.load_library()
    assert "/elsewhere/libgobn.so" in str(e.value) and os.path.realpath(BUILT_LIBRARY) in str(e.value)


def test_search_order_and_message(monkeypatch, tmp_path):
    from gobn import _library

    beside, build = tmp_path / "site" / "gobn" / "libgobn.so", tmp_path / "build" / "libgobn.so"
    monkeypatch.setattr(_library, "_BESIDE_PACKAGE", str(beside))
    monkeypatch.setattr(_library, "_CHECKOUT_BUILD", str(build))
    monkeypatch.delenv("GOBN_LIBRARY", raising=False)
    with pytest.raises(FileNotFoundError) as e:
        _library.find()
    message = str(e.value)
    assert str(beside) in message and str(build) in message, message
    assert message.index(str(beside)) < message.index(str(build)), "tried in order"
    assert "make wheel" in message and "GOBN_LIBRARY" in message

    build.parent.mkdir(parents=True)
    build.write_bytes(b"")
    assert _library.find() == str(build)
    beside.parent.mkdir(parents=True)
    beside.write_bytes(b"")
    assert _library.find() == str(beside), "beside the package (a wheel) comes before the checkout's build"

    monkeypatch.setenv("GOBN_LIBRARY", str(tmp_path / "elsewhere.so"))
    with pytest.raises(FileNotFoundError) as e:
        _library.find()
    assert "$GOBN_LIBRARY" in str(e.value) and str(tmp_path / "elsewhere.so") in str(e.value)
    assert str(beside) not in str(e.value), "GOBN_LIBRARY, when set, is the only place looked at"


def test_fresh_process_finds_the_library_without_the_environment():
    """`PYTHONPATH=python python ...` after make, with no GOBN_LIBRARY: the checkout's build."""
    done = subprocess.run([sys.executable, "-c", GRADIENT_SCRIPT], env=child_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2] == os.path.realpath(BUILT_LIBRARY)


# ---------------------------------------------------------------------------
# fused_batch_norm against tf.compat.v1.nn.fused_batch_norm


def run_both(x, w, scale, offset, **kwargs):
    """(y, batch_mean, batch_variance, dx, dscale, doffset) of stock and gobn for loss sum(y*w)."""
    results = []
    for fn in (tf.compat.v1.nn.fused_batch_norm, gobn.fused_batch_norm):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, mean, variance = fn(x, scale, offset, **kwargs)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(w, tf.float32))
        results.append([y, mean, variance] + tape.gradient(loss, [x, scale, offset]))
    return results


NAMES = ("y", "batch_mean", "batch_variance", "x gradient", "scale gradient", "offset gradient")


@pytest.mark.parametrize("data_format,shape", LAYOUTS)
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_fused_batch_norm_matches_stock(data_format, shape, is_training):
    x, w, scale, offset, mean, variance = random_inputs(shape, data_format)
    kwargs = dict(epsilon=0.01, data_format=data_format, is_training=is_training)
    if not is_training:
        kwargs.update(mean=mean, variance=variance)
    stock, got = run_both(x, w, scale, offset, **kwargs)
    for name, g, s in zip(NAMES, got, stock):
        assert g.dtype == s.dtype and g.shape == s.shape, name
        assert_close(g, s, tf.float32, name)


def test_fused_batch_norm_names_its_variance():
    """batch_variance is Bessel-corrected, as stock's output of that name (the
    float64 reference: the sum of squares over R-1)."""
    x, _, scale, offset, _, _ = random_inputs((4, 5, 6, 3), "NHWC")
    out = gobn.fused_batch_norm(x, scale, offset)
    assert out._fields == ("y", "batch_mean", "batch_variance")
    flat = x.numpy().reshape(-1, 3).astype(np.float64)
    assert_close(out.batch_variance, flat.var(axis=0, ddof=1), tf.float32, "batch_variance")


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_fused_batch_norm_half_precision(dtype):
    x, w, scale, offset, _, _ = random_inputs((4, 3, 5, 6), "NCHW", dtype)
    stock, got = run_both(x, w, scale, offset, data_format="NCHW")
    for name, g, s in zip(NAMES, got, stock):
        assert g.dtype == s.dtype, name
        assert_close(g, s, dtype if name in ("y", "x gradient") else tf.float32, name)


def test_fused_batch_norm_running_averages():
    x, w, scale, offset, mean, variance = random_inputs((4, 5, 6, 3), "NHWC")
    stock, got = run_both(x, w, scale, offset, mean=mean, variance=variance, exponential_avg_factor=0.3)
    for name, g, s in zip(NAMES, got, stock):
        assert_close(g, s, tf.float32, name)


def test_fused_batch_norm_in_tf_function():
    x, w, scale, offset, _, _ = random_inputs((4, 3, 5, 6), "NCHW")

    @tf.function
    def gradients(fn, x, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, _, _ = fn(x, scale, offset, data_format="NCHW")
            loss = tf.reduce_sum(y * w)
        return tape.gradient(loss, [x, scale, offset])

    for g, s in zip(gradients(gobn.fused_batch_norm, x, scale, offset),
                    gradients(tf.compat.v1.nn.fused_batch_norm, x, scale, offset)):
        assert_close(g, s, tf.float32)
    graph = gradients.get_concrete_function(gobn.fused_batch_norm, x, scale, offset).graph
    ops = {op.type for op in graph.get_operations()}
    assert "Gobn>FusedBatchNormGradV3" in ops
    assert "FusedBatchNormGradV3" not in ops, "the gradient must run on gobn, not on stock"


def test_fused_batch_norm_needs_statistics_in_inference():
    x, _, scale, offset, _, _ = random_inputs((2, 2, 2, 3), "NHWC")
    with pytest.raises(ValueError, match="mean"):
        gobn.fused_batch_norm(x, scale, offset, is_training=False)


@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_fused_batch_norm_finite_differences(is_training):
    """tf.test.compute_gradient: gobn's gradient against central differences."""
    x, w, scale, offset, mean, variance = random_inputs((2, 3, 2, 3), "NCHW", seed=3)
    kwargs = dict(data_format="NCHW", is_training=is_training, epsilon=0.01)
    if not is_training:
        kwargs.update(mean=mean, variance=variance)

    def loss(x, scale, offset):
        y, _, _ = gobn.fused_batch_norm(x, scale, offset, **kwargs)
        return tf.reduce_sum(y * w)[None]

    theoretical, numerical = tf.test.compute_gradient(loss, [x, scale, offset], delta=1e-2)
    for name, t, n in zip(("x", "scale", "offset"), theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(n).max()), err_msg=name)
