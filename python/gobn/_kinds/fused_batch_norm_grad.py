"""The FusedBatchNormGrad kind: Gobn>FusedBatchNormGrad, V2 and V3.

Its gradient is exactly stock's ``_FusedBatchNormGradGrad``. In training it
recomputes the batch mean and variance from x, so the reserve spaces get no
gradient; in inference the population mean and variance get none (as
stock). With μ = mean(x), σ² = mean((x−μ)²), c = 1/sqrt(σ²+ε) over the
non-channel axes:

    x_backprop      = scale·c·(dy − mean(dy) − (x−μ)·mean(dy·(x−μ))·c²)   (training)
                    = dy·scale·c                                         (inference, μ, σ² given)
    scale_backprop  = c·Σ dy·(x−μ)
    offset_backprop = Σ dy

and the gradient returns d/d(y_backprop, x, scale) of
⟨g_x, x_backprop⟩ + ⟨g_scale, scale_backprop⟩ + ⟨g_offset, offset_backprop⟩.
Its ops are the gradients of stock's FusedBatchNorm, V2 and V3.
"""

import tensorflow as tf

from gobn import _gradients, _opdef, _pfor

MODES = ("training", "inference")


def compute(y_backprop, x, scale, reserve_space_1, reserve_space_2, epsilon, data_format, is_training):
    """The outputs x_backprop, scale_backprop and offset_backprop in TF ops,
    by name. As stock's _BatchNormGrad: in training, the mean and variance
    (reserve_space_1 and _2) are recomputed from x."""
    x_dtype = x.dtype
    y_backprop, x = _gradients.widen(y_backprop, x)
    rank, axis, axes = _gradients.layout(x, data_format)
    scale = _gradients.broadcast(tf.cast(scale, x.dtype), rank, axis)
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
        mean = _gradients.broadcast(tf.cast(reserve_space_1, x.dtype), rank, axis)
        var_rsqrt = tf.math.rsqrt(_gradients.broadcast(tf.cast(reserve_space_2, x.dtype), rank, axis) + epsilon)
        x_backprop = y_backprop * scale * var_rsqrt
        scale_backprop = tf.reduce_sum(y_backprop * (x - mean) * var_rsqrt, axes)
    offset_backprop = tf.reduce_sum(y_backprop, axes)
    return {"x_backprop": tf.cast(x_backprop, x_dtype), "scale_backprop": scale_backprop,
            "offset_backprop": offset_backprop}


def gradient(op, *grads):
    """The gradient of y_backprop, x and scale (none of the statistics)."""
    given = _opdef.inputs_by_name(op)
    attrs = dict(epsilon=op.get_attr("epsilon"), data_format=_gradients.attr_string(op, "data_format"),
                 is_training=op.get_attr("is_training"))

    def outputs(y_backprop, x, scale):
        return compute(y_backprop, x, scale, given["reserve_space_1"], given["reserve_space_2"], **attrs)

    return _gradients.backprop(op, grads, {name: given[name] for name in ("y_backprop", "x", "scale")}, outputs)


def convert(pfor_input):
    """y_backprop, x, scale, reserve_space_1 and _2 merged (gobn._pfor).
    reserve_space_3 (V3) is per batch, not per channel, and gobn's kernels
    do not read it: a stacked one is flattened, as stock's converter does.
    The empty placeholders come back loop invariant."""
    data_format = _pfor.string_attr(pfor_input, "data_format")
    merged = ("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2")
    pfor_input.stack_inputs(stack_indices=[_pfor.index(pfor_input, name) for name in merged])
    stacked = {name: pfor_input.stacked_input(_pfor.index(pfor_input, name)) for name in merged}
    m = _pfor.ChannelMerge(stacked["x"], data_format, _pfor.activation_rank(pfor_input, "x", data_format))
    inputs = {name: m.merge(stacked[name]) for name in ("y_backprop", "x")}
    inputs.update((name, _pfor.vector(stacked[name])) for name in ("scale", "reserve_space_1", "reserve_space_2"))
    if "reserve_space_3" in _pfor.input_names(pfor_input):
        rs3, is_stacked, _ = pfor_input.input(_pfor.index(pfor_input, "reserve_space_3"))
        inputs["reserve_space_3"] = _pfor.vector(rs3) if is_stacked else rs3
    out = _pfor.run(pfor_input, inputs)
    n = pfor_input.pfor.loop_len_vector
    out["x_backprop"] = _pfor.wrap(m.split(out["x_backprop"]), True)
    for name in ("scale_backprop", "offset_backprop"):
        out[name] = _pfor.wrap(m.split_vector(out[name], n), True)
    return _pfor.outputs(pfor_input, out)


def stock_inputs(op, grads):
    """The op's inputs for stock's forward op op (FusedBatchNorm, V2, V3)
    and its incoming gradients: the gradient of y, x, scale, the statistics
    and, from V3 on, its reserve_space_3. Training: the reserve spaces, which
    the CPU forward fills alike with oneDNN on or off, the batch mean and
    the biased variance (python_tests/test_enable.py checks it on oneDNN's
    forward). Inference: the population mean and variance it was given.
    Stock transposes channels-first inputs to channels-last here, for its
    CPU kernel, which rejects NCHW inference; gobn's kernels take every
    layout as it is."""
    given, saved = _opdef.inputs_by_name(op), _opdef.by_output_name(op, op.outputs)
    training = op.get_attr("is_training")
    inputs = {"y_backprop": _opdef.by_output_name(op, grads)["y"], "x": given["x"], "scale": given["scale"],
              "reserve_space_1": saved["reserve_space_1"] if training else given["mean"],
              "reserve_space_2": saved["reserve_space_2"] if training else given["variance"]}
    if "reserve_space_3" in saved:
        inputs["reserve_space_3"] = saved["reserve_space_3"]
    return inputs


def stock_gradients(outputs):
    """The forward's input gradients by name: x, scale and offset get the
    op's first three outputs; mean and variance get none, as in stock."""
    return {"x": outputs["x_backprop"], "scale": outputs["scale_backprop"], "offset": outputs["offset_backprop"]}


def sample(case, seed, device):
    """A case: fused_inputs and fused_grad_reference (gobn._testing);
    x_backprop by T's tolerance, the 1-D outputs (computed in float32 or
    better) by float32's; stock's twin beside it."""
    from gobn import _testing

    made = _testing.fused_inputs(case.op, case.dtype, case.data_format, case.is_training, case.shape, seed, device)
    x_backprop, scale_backprop, offset_backprop = made.reference()
    expected = {"x_backprop": (x_backprop, case.dtype), "scale_backprop": (scale_backprop, tf.float32),
                "offset_backprop": (offset_backprop, tf.float32)}
    return _testing.Sample(made.inputs, made.attrs, expected, case.op.stock)


def stock_outputs(case, sample):
    """Stock's outputs of a sample on the CPU (gobn._testing.stock_outputs),
    but none in inference with channels first, which stock's CPU kernel
    rejects ("only support NHWC tensor format for now")."""
    from gobn import _testing

    if not case.is_training and case.data_format in _testing.CHANNELS_FIRST:
        return None
    return _testing.stock_outputs(case, sample)
