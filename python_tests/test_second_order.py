"""Second-order gradients: the gradients gobn registers for its Gobn> ops
(python/gobn/_gradients.py) against stock TensorFlow's for its gradient ops,
through GradientTape, and double backprop (gradient penalties) through
gobn.fused_batch_norm and gobn.keras.BatchNormalization.
"""

import numpy as np
import pytest
import tensorflow as tf

import gobn
from support import CHANNELS_FIRST, assert_close

# op, stock op, formats, whether scale is float (V2, V3) or T (V1), reserve_space_3.
FUSED = [
    ("gobn_fused_batch_norm_grad", tf.raw_ops.FusedBatchNormGrad, ("NHWC", "NCHW"), False),
    ("gobn_fused_batch_norm_grad_v2", tf.raw_ops.FusedBatchNormGradV2, ("NHWC", "NCHW"), False),
    ("gobn_fused_batch_norm_grad_v3", tf.raw_ops.FusedBatchNormGradV3, ("NHWC", "NCHW", "NDHWC", "NCDHW"), True),
]
SHAPES = {"NHWC": (3, 4, 5, 2), "NCHW": (3, 2, 4, 5), "NDHWC": (2, 3, 2, 4, 2), "NCDHW": (2, 2, 3, 2, 4)}
CASES = [(name, stock, fmt, v3) for name, stock, fmts, v3 in FUSED for fmt in fmts]


def inputs(data_format, dtype, seed):
    rng = np.random.default_rng(seed)
    shape = SHAPES[data_format]
    channels = shape[1] if data_format in CHANNELS_FIRST else shape[-1]
    dy = tf.constant(rng.normal(0, 1, shape), dtype)
    x = tf.constant(rng.normal(1, 2, shape), dtype)
    scale = tf.constant(rng.uniform(0.5, 2, channels), tf.float32)
    mean = tf.constant(rng.normal(1, 1, channels), tf.float32)
    variance = tf.constant(rng.uniform(0.5, 4, channels), tf.float32)
    # Weights of the scalar function of the three outputs that is differentiated.
    weights = [tf.constant(rng.normal(0, 1, s), tf.float32) for s in (shape, (channels,), (channels,))]
    return dy, x, scale, mean, variance, weights


def second_order(op, dy, x, scale, mean, variance, weights, data_format, is_training, v3):
    """d/d(y_backprop, x, scale) of Σ w0·x_backprop + Σ w1·scale_backprop + Σ w2·offset_backprop."""
    kwargs = dict(epsilon=0.001, data_format=data_format, is_training=is_training)
    if v3:
        kwargs["reserve_space_3"] = mean
    with tf.GradientTape() as tape:
        tape.watch([dy, x, scale])
        out = op(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=variance, **kwargs)
        value = sum(tf.reduce_sum(tf.cast(o, tf.float32) * w) for o, w in zip(out[:3], weights))
    return tape.gradient(value, [dy, x, scale])


def to_channels_last(t, data_format):
    if data_format not in CHANNELS_FIRST:
        return t
    return tf.transpose(t, [0] + list(range(2, t.shape.rank)) + [1])


def to_channels_first(t):
    return tf.transpose(t, [0, t.shape.rank - 1] + list(range(1, t.shape.rank - 1)))


@pytest.mark.parametrize("name,stock,data_format,v3", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_registered_gradient_matches_stock(name, stock, data_format, v3, is_training):
    dy, x, scale, mean, variance, weights = inputs(data_format, tf.float32, seed=len(name) + len(data_format))
    got = second_order(getattr(gobn.ops, name), dy, x, scale, mean, variance, weights, data_format, is_training, v3)
    if is_training or data_format not in CHANNELS_FIRST:
        want = second_order(stock, dy, x, scale, mean, variance, weights, data_format, is_training, v3)
    else:
        # Stock's CPU kernel has no channels-first inference: run stock
        # channels last and lay its answers out channels first.
        last = "NHWC" if x.shape.rank == 4 else "NDHWC"
        want = second_order(stock, to_channels_last(dy, data_format), to_channels_last(x, data_format), scale, mean,
                            variance, [to_channels_last(weights[0], data_format)] + weights[1:], last, False, v3)
        want = [to_channels_first(want[0]), to_channels_first(want[1]), want[2]]
    for what, g, w in zip(("y_backprop", "x", "scale"), got, want):
        assert g is not None, what
        assert_close(g, w, tf.float32, f"gradient for {what}")


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_registered_gradient_half_precision(dtype):
    dy, x, scale, mean, variance, weights = inputs("NCHW", dtype, seed=5)
    got = second_order(gobn.ops.gobn_fused_batch_norm_grad_v3, dy, x, scale, mean, variance, weights, "NCHW", True,
                       True)
    want = second_order(tf.raw_ops.FusedBatchNormGradV3, dy, x, scale, mean, variance, weights, "NCHW", True, True)
    for what, g, w in zip(("y_backprop", "x", "scale"), got, want):
        assert g.dtype == w.dtype, what
        assert_close(g, w, dtype if what != "scale" else tf.float32, f"gradient for {what}")


def penalty_gradients(batch_norm, x, scale, offset, w, **kwargs):
    """A gradient penalty: d/d(x, scale, offset) of Σ (∂L/∂x)², L = Σ w·y."""
    with tf.GradientTape() as outer:
        outer.watch([x, scale, offset])
        with tf.GradientTape() as inner:
            inner.watch(x)
            y, _, _ = batch_norm(x, scale, offset, **kwargs)
            loss = tf.reduce_sum(y * w)
        dx = inner.gradient(loss, x)
        penalty = tf.reduce_sum(dx * dx) + tf.reduce_sum(y * y * w)
    return outer.gradient(penalty, [x, scale, offset])


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW", "NCDHW"])
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_gradient_penalty_through_fused_batch_norm(data_format, is_training):
    dy, x, scale, mean, variance, _ = inputs(data_format, tf.float32, seed=11)
    offset = mean * 0.5
    kwargs = dict(data_format=data_format, is_training=is_training, epsilon=0.001)
    if not is_training:
        kwargs.update(mean=mean, variance=variance)
    got = penalty_gradients(gobn.fused_batch_norm, x, scale, offset, dy, **kwargs)
    want = penalty_gradients(tf.compat.v1.nn.fused_batch_norm, x, scale, offset, dy, **kwargs)
    for what, g, w in zip(("x", "scale", "offset"), got, want):
        assert g is not None, what
        assert_close(g, w, tf.float32, f"penalty gradient for {what}")


def test_gradient_penalty_in_tf_function():
    dy, x, scale, mean, _, _ = inputs("NHWC", tf.float32, seed=12)
    offset = mean

    @tf.function
    def run(batch_norm):
        return penalty_gradients(batch_norm, x, scale, offset, dy)

    for g, w in zip(run(gobn.fused_batch_norm), run(tf.compat.v1.nn.fused_batch_norm)):
        assert_close(g, w, tf.float32)


def test_third_order():
    """The registered gradients are themselves differentiable."""
    dy, x, scale, mean, variance, weights = inputs("NHWC", tf.float32, seed=13)
    results = []
    for op in (gobn.ops.gobn_fused_batch_norm_grad_v3, tf.raw_ops.FusedBatchNormGradV3):
        with tf.GradientTape() as third:
            third.watch(x)
            gx = second_order(op, dy, x, scale, mean, variance, weights, "NHWC", True, True)[1]
            value = tf.reduce_sum(gx * gx)
        results.append(third.gradient(value, x))
    assert_close(results[0], results[1], tf.float32, "third-order gradient for x")


def test_keras_layer_gradient_penalty():
    """Double backprop through gobn.keras.BatchNormalization equals the stock layer's."""
    import keras

    rng = np.random.default_rng(14)
    x = tf.constant(rng.normal(1, 2, (6, 4, 4, 3)), tf.float32)
    w = tf.constant(rng.normal(0, 1, (6, 4, 4, 3)), tf.float32)
    results = []
    for cls in (keras.layers.BatchNormalization, gobn.keras.BatchNormalization):
        layer = cls()
        layer.build(x.shape)
        layer.gamma.assign(np.linspace(0.5, 2, 3, dtype="float32"))
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(layer(x, training=True) * w)
            dx = inner.gradient(loss, x)
            penalty = tf.reduce_sum(dx * dx)
        results.append(outer.gradient(penalty, [x, layer.gamma, layer.beta]))
    for what, g, s in zip(("x", "gamma"), *results):
        assert g is not None, what
        assert_close(g, s, tf.float32, f"penalty gradient for {what}")
    assert results[0][2] is None and results[1][2] is None, "x's gradient does not depend on beta"


def test_global_normalization_grad_gradient_finite_differences():
    """Stock registers no gradient for BatchNormWithGlobalNormalizationGrad; gobn's, in double."""
    rng = np.random.default_rng(15)
    shape = (2, 2, 3, 3)
    t, backprop = (tf.constant(rng.normal(0, 1, shape), tf.float64) for _ in range(2))
    m = tf.constant(rng.normal(0, 1, 3), tf.float64)
    v = tf.constant(rng.uniform(0.5, 2, 3), tf.float64)
    gamma = tf.constant(rng.uniform(0.5, 2, 3), tf.float64)
    weights = [tf.constant(rng.normal(0, 1, s), tf.float64) for s in (shape, (3,), (3,), (3,), (3,))]
    for scale_after in (True, False):
        def value(t, m, v, gamma, backprop):
            out = gobn.ops.gobn_batch_norm_with_global_normalization_grad(
                t=t, m=m, v=v, gamma=gamma, backprop=backprop, variance_epsilon=0.01,
                scale_after_normalization=scale_after)
            return sum(tf.reduce_sum(o * w) for o, w in zip(out, weights))[None]

        theoretical, numerical = tf.test.compute_gradient(value, [t, m, v, gamma, backprop], delta=1e-6)
        for name, a, b in zip(("t", "m", "v", "gamma", "backprop"), theoretical, numerical):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f"{name} (scale_after={scale_after})")


def test_second_order_finite_differences():
    """The registered gradient of Gobn>FusedBatchNormGradV3 against central differences."""
    dy, x, scale, mean, variance, weights = inputs("NCHW", tf.float32, seed=16)

    def value(dy, x, scale):
        out = gobn.ops.gobn_fused_batch_norm_grad_v3(
            y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=variance,
            reserve_space_3=mean, epsilon=0.001, data_format="NCHW", is_training=False)
        return sum(tf.reduce_sum(o * w) for o, w in zip(out[:3], weights))[None]

    theoretical, numerical = tf.test.compute_gradient(value, [dy, x, scale], delta=1e-2)
    for name, a, b in zip(("y_backprop", "x", "scale"), theoretical, numerical):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(b).max()), err_msg=name)
