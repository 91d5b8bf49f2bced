"""Parity of gobn's BatchNormWithGlobalNormalizationGrad with stock TensorFlow.

Stock's op is deprecated at GraphDef version 9, so it runs in a graph whose
producer version is set to 8, in a tf.compat.v1.Session; gobn's op is not
deprecated and runs eagerly and inside tf.function. Stock computes in T: in
half it is inaccurate, so there gobn and stock are both compared with a float64
reference and gobn must be at least as accurate; in float and double gobn must
match stock.
"""

import zlib

import numpy as np
import pytest
import tensorflow as tf

from support import (
    assert_as_accurate,
    assert_close,
    global_norm_grad_reference,
    record_error,
    run_in_function,
    run_stock_global_norm_grad,
    SHAPES_4D,
)

VARIANCE_EPSILON = 1e-3
OUTPUT_NAMES = ("dx", "dm", "dv", "db", "dg")

SHAPES = {"small": (2, 3, 4, 5), **SHAPES_4D}


def make_inputs(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    channels = shape[-1]
    values = {
        "t": rng.standard_normal(shape) * 1.5 + rng.uniform(-1.0, 1.0, channels),
        "m": rng.uniform(-1.0, 1.0, channels),
        "v": rng.uniform(0.5, 2.0, channels),
        "gamma": rng.uniform(0.5, 1.5, channels) * rng.choice([-1.0, 1.0], channels),
        "backprop": rng.standard_normal(shape),
    }
    return {k: tf.constant(v, dtype) for k, v in values.items()}


# "over_t" and "over_backprop" run in a tf.function where that input is a
# fresh tensor only the op reads, so that dx takes over its buffer (see
# run_in_function).
IN_PLACE = {"eager": (), "function": (), "over_t": ("t",), "over_backprop": ("backprop",)}


def run_gobn(gobn, inputs, attrs, mode):
    op = gobn.gobn_batch_norm_with_global_normalization_grad
    if mode == "eager":
        return list(op(**inputs, **attrs)), None
    return run_in_function(op, inputs, attrs, IN_PLACE[mode])


@pytest.mark.parametrize("mode", list(IN_PLACE))
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("scale_after_normalization", [True, False], ids=["scaled", "unscaled"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
def test_global_norm_grad_parity(gobn, dtype, scale_after_normalization, shape, mode, request):
    seed = zlib.crc32(request.node.callspec.id.rsplit("-", 1)[0].encode())
    inputs = make_inputs(dtype, shape, seed)
    attrs = {"variance_epsilon": VARIANCE_EPSILON, "scale_after_normalization": scale_after_normalization}
    got, static_shapes = run_gobn(gobn, inputs, attrs, mode)

    channels = shape[-1]
    want_shapes = [list(shape)] + [[channels]] * 4
    assert len(got) == 5
    for i, name in enumerate(OUTPUT_NAMES):
        assert got[i].dtype == dtype, f"{name}: dtype {got[i].dtype.name}, want {dtype.name}"
        assert got[i].shape.as_list() == want_shapes[i], f"{name}: shape {got[i].shape}, want {want_shapes[i]}"
        if static_shapes is not None:
            assert static_shapes[i].is_fully_defined() and static_shapes[i].as_list() == want_shapes[i], (
                f"{name}: static shape {static_shapes[i]} in the traced graph, want {want_shapes[i]}")

    reference = global_norm_grad_reference(**inputs, **attrs)
    if channels == 0:
        # Stock's kernel dies with SIGFPE (integer division by zero) on C=0:
        # never run it; gobn must return the empty answer.
        for i, name in enumerate(OUTPUT_NAMES):
            assert_close(got[i], reference[i], dtype, f"{name} vs float64 reference")
        return
    stock = run_stock_global_norm_grad(**inputs, **attrs)
    for i, name in enumerate(OUTPUT_NAMES):
        assert_as_accurate(got[i], stock[i], reference[i], dtype, f"{name} vs float64 reference")
        if dtype == tf.float16:
            # Stock sums in half: compare gobn with the exact answer instead.
            record_error(dtype, "global-norm vs float64 ref", got[i], reference[i])
            assert_close(got[i], reference[i], dtype, f"{name} vs float64 reference")
            record_error(dtype, "global-norm vs stock (info: stock sums in half)", got[i], stock[i])
        else:
            record_error(dtype, "global-norm vs stock", got[i], stock[i])
            assert_close(got[i], stock[i], dtype, f"{name} vs stock")


def test_stock_is_deprecated_eagerly():
    """The fact this module works around: stock refuses to run at today's GraphDef version."""
    inputs = make_inputs(tf.float32, (1, 2, 2, 3), seed=1)
    with pytest.raises(tf.errors.UnimplementedError, match="removed in version 9"):
        tf.raw_ops.BatchNormWithGlobalNormalizationGrad(
            **inputs, variance_epsilon=VARIANCE_EPSILON, scale_after_normalization=True)


def test_gobn_runs_in_a_current_graph(gobn):
    """gobn's op is not deprecated: it runs in a graph at the current producer version."""
    graph = tf.Graph()
    inputs = make_inputs(tf.float32, (2, 3, 4, 5), seed=2)
    with graph.as_default():
        out = gobn.gobn_batch_norm_with_global_normalization_grad(
            **{k: tf.constant(v.numpy()) for k, v in inputs.items()},
            variance_epsilon=VARIANCE_EPSILON, scale_after_normalization=True)
    with tf.compat.v1.Session(graph=graph) as session:
        got = session.run(list(out))
    want = global_norm_grad_reference(**inputs, variance_epsilon=VARIANCE_EPSILON, scale_after_normalization=True)
    for name, g, w in zip(OUTPUT_NAMES, got, want):
        assert_close(g, w, tf.float32, name)
