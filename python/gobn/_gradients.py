"""Gradients of gobn's ops, for double backprop (gradient penalties).

Each op's gradient is computed the way TensorFlow computes the gradient of its
own gradient ops (tensorflow/python/ops/nn_fused_batch_norm_grad.py): the op's
math is written again with differentiable TensorFlow ops, and a GradientTape
carries the incoming gradients back through it.

- ``Gobn>FusedBatchNormGrad``, ``V2``, ``V3``: exactly stock's
  ``_FusedBatchNormGradGrad``. In training it recomputes the batch mean and
  variance from x, so the reserve spaces get no gradient; in inference the
  population mean and variance get none (as stock). With
  μ = mean(x), σ² = mean((x−μ)²), c = 1/sqrt(σ²+ε) over the non-channel axes:

      x_backprop      = scale·c·(dy − mean(dy) − (x−μ)·mean(dy·(x−μ))·c²)   (training)
                      = dy·scale·c                                         (inference, μ, σ² given)
      scale_backprop  = c·Σ dy·(x−μ)
      offset_backprop = Σ dy

  and the registered gradient returns d/d(y_backprop, x, scale) of
  ⟨g_x, x_backprop⟩ + ⟨g_scale, scale_backprop⟩ + ⟨g_offset, offset_backprop⟩.
- ``Gobn>BatchNormWithGlobalNormalizationGrad`` (stock registers no gradient
  for its twin): with s = 1/sqrt(v+ε), γ' = γ or 1,
  db = Σdy, dx = dy·s·γ', dm = −db·s·γ', dg = s·Σdy·(t−m), dv = −½·s³·γ'·Σdy·(t−m),
  differentiated with respect to all five inputs.
- ``Gobn>BatchNormGradReduce``: sum_dy = Σdy, sum_dy_xmu = Σdy·(x−μ), with
  respect to y_backprop, x and mean (count is an integer: no gradient).
- ``Gobn>BatchNormGradApply``: x_backprop = scale·c·(dy − sum_dy/n − (x−μ)·c²·sum_dy_xmu/n),
  with respect to every input but count.

half and bfloat16 are computed in float32, as stock does.

Importing this module also registers pfor converters for the Gobn> ops
(gobn._pfor), so tf.vectorized_map and GradientTape.jacobian / batch_jacobian
vectorize them.
"""

import tensorflow as tf

from gobn._opdefs_gen import CHANNELS_FIRST as _CHANNELS_FIRST
from gobn._opdefs_gen import OPS


def _attr_string(op, name):
    value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def _layout(x, data_format):
    """(rank, channel axis, reduction axes) of an activation tensor."""
    rank = x.shape.rank
    if rank is None:
        rank = 4 if data_format in ("NHWC", "NCHW") else 5
    axis = 1 if data_format in _CHANNELS_FIRST else rank - 1
    return rank, axis, [i for i in range(rank) if i != axis]


def _broadcast(v, rank, axis):
    """Reshapes a per-channel vector to broadcast along x's channel axis."""
    if axis == rank - 1:
        return v
    shape = [1] * rank
    shape[axis] = -1
    return tf.reshape(v, shape)


def _widen(*tensors):
    """Casts half and bfloat16 tensors to float32 (stock's gradients do too)."""
    return [tf.cast(t, tf.float32) if t.dtype in (tf.float16, tf.bfloat16) else t for t in tensors]


def fused_batch_norm_grad(y_backprop, x, scale, mean, variance, epsilon, data_format, is_training):
    """FusedBatchNormGrad's outputs (x_backprop, scale_backprop, offset_backprop) in TF ops.

    As stock's _BatchNormGrad: in training, mean and variance are recomputed
    from x (the arguments are ignored).
    """
    x_dtype = x.dtype
    y_backprop, x = _widen(y_backprop, x)
    rank, axis, axes = _layout(x, data_format)
    scale = _broadcast(tf.cast(scale, x.dtype), rank, axis)
    if is_training:
        mean_dy = tf.reduce_mean(y_backprop, axes, keepdims=True)
        mean_x = tf.reduce_mean(x, axes, keepdims=True)
        var_x = tf.reduce_mean(tf.math.squared_difference(x, tf.stop_gradient(mean_x)), axes, keepdims=True)
        x_offset = x - mean_x
        mean_dy_x_offset = tf.reduce_mean(y_backprop * x_offset, axes, keepdims=True)
        x_backprop = scale * tf.math.rsqrt(var_x + epsilon) * (
            y_backprop - mean_dy - tf.math.reciprocal(var_x + epsilon) * mean_dy_x_offset * x_offset)
        scale_backprop = tf.reshape(
            tf.math.rsqrt(var_x + epsilon) * tf.reduce_sum(y_backprop * x_offset, axes, keepdims=True), [-1])
    else:
        mean = _broadcast(tf.cast(mean, x.dtype), rank, axis)
        var_rsqrt = tf.math.rsqrt(_broadcast(tf.cast(variance, x.dtype), rank, axis) + epsilon)
        x_backprop = y_backprop * scale * var_rsqrt
        scale_backprop = tf.reduce_sum(y_backprop * (x - mean) * var_rsqrt, axes)
    offset_backprop = tf.reduce_sum(y_backprop, axes)
    return tf.cast(x_backprop, x_dtype), scale_backprop, offset_backprop


def _backprop(op, grads, inputs, outputs_fn):
    """Gradients of outputs_fn(*inputs) for the op's incoming grads.

    A missing incoming gradient (an output nobody used) counts as zero.
    """
    grads = [tf.zeros_like(out) if g is None else g for g, out in zip(grads, op.outputs)]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = outputs_fn(*inputs)
    return tape.gradient(list(outputs), inputs, output_gradients=grads[:len(outputs)])


def _fused_grad_grad(op, *grads):
    data_format = _attr_string(op, "data_format")
    epsilon = op.get_attr("epsilon")
    is_training = op.get_attr("is_training")
    mean, variance = op.inputs[3], op.inputs[4]

    def outputs(y_backprop, x, scale):
        return fused_batch_norm_grad(y_backprop, x, scale, mean, variance, epsilon, data_format, is_training)

    dy, dx, dscale = _backprop(op, grads, list(op.inputs[:3]), outputs)
    return [dy, dx, dscale] + [None] * (len(op.inputs) - 3)


def global_normalization_grad(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization):
    """BatchNormWithGlobalNormalizationGrad's outputs (dx, dm, dv, db, dg) in TF ops (channels last)."""
    dtype = t.dtype
    t, m, v, gamma, backprop = _widen(t, m, v, gamma, backprop)
    axes = [0, 1, 2]
    s = tf.math.rsqrt(v + variance_epsilon)
    g = gamma if scale_after_normalization else tf.ones_like(gamma)
    db = tf.reduce_sum(backprop, axes)
    sum_dy_centered = tf.reduce_sum(backprop * (t - m), axes)
    dx = backprop * s * g
    dm = -db * s * g
    dv = -0.5 * s * s * s * g * sum_dy_centered
    dg = s * sum_dy_centered if scale_after_normalization else tf.zeros_like(gamma)
    return tuple(tf.cast(o, dtype) for o in (dx, dm, dv, db, dg))


def _global_normalization_grad_grad(op, *grads):
    epsilon = op.get_attr("variance_epsilon")
    scale_after = op.get_attr("scale_after_normalization")

    def outputs(*inputs):
        return global_normalization_grad(*inputs, epsilon, scale_after)

    return _backprop(op, grads, list(op.inputs), outputs)


def grad_reduce(y_backprop, x, mean, data_format):
    """BatchNormGradReduce's sums (sum_dy, sum_dy_xmu) in TF ops."""
    y_backprop, x = _widen(y_backprop, x)
    rank, axis, axes = _layout(x, data_format)
    return (tf.reduce_sum(y_backprop, axes),
            tf.reduce_sum(y_backprop * (x - _broadcast(mean, rank, axis)), axes))


def _grad_reduce_grad(op, *grads):
    data_format = _attr_string(op, "data_format")

    def outputs(y_backprop, x, mean):
        return grad_reduce(y_backprop, x, mean, data_format)

    return _backprop(op, grads, list(op.inputs[:3]), outputs)


def grad_apply(y_backprop, x, scale, mean, variance, sum_dy, sum_dy_xmu, count, epsilon, data_format):
    """BatchNormGradApply's x_backprop in TF ops."""
    x_dtype = x.dtype
    y_backprop, x = _widen(y_backprop, x)
    rank, axis, _ = _layout(x, data_format)
    n = tf.cast(count, tf.float32)
    c = tf.math.rsqrt(variance + epsilon)
    x_backprop = _broadcast(scale * c, rank, axis) * (
        y_backprop - _broadcast(sum_dy / n, rank, axis)
        - (x - _broadcast(mean, rank, axis)) * _broadcast(c * c * sum_dy_xmu / n, rank, axis))
    return tf.cast(x_backprop, x_dtype)


def _grad_apply_grad(op, *grads):
    epsilon = op.get_attr("epsilon")
    data_format = _attr_string(op, "data_format")
    count = op.inputs[7]

    def outputs(*inputs):
        return [grad_apply(*inputs, count, epsilon, data_format)]

    return _backprop(op, grads, list(op.inputs[:7]), outputs) + [None]


# The gradient of each kernel family's ops (gobn._opdefs_gen's kinds);
# capi's TestEveryKindIsComplete requires one for every kind.
GRADIENTS = {
    "FusedBatchNormGrad": _fused_grad_grad,
    "GlobalNormalizationGrad": _global_normalization_grad_grad,
    "GradReduce": _grad_reduce_grad,
    "GradApply": _grad_apply_grad,
}

for _op in OPS:
    try:
        tf.RegisterGradient(_op.name)(GRADIENTS[_op.kind])
    except KeyError:  # registered already (the module was loaded twice)
        pass

# Vectorization (tf.vectorized_map, jacobians) of the Gobn> ops: see gobn._pfor.
from gobn import _pfor  # noqa: E402,F401  (registers the Gobn> pfor converters)
