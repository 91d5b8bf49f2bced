"""The GradApply kind: Gobn>BatchNormGradApply, the second half of the
synchronized gradient:
x_backprop = scale·c·(dy − sum_dy/n − (x−μ)·c²·sum_dy_xmu/n), c = 1/sqrt(σ²+ε),
n = count. Its gradient is with respect to every input but count. count is
an int64 in host memory, which its XLA call leaves out: the call takes x's
own count, the sums scaled to it.
"""

import tensorflow as tf

from gobn import _gradients, _opdef, _pfor, _xla

# Its cases run in training: its statistics are the replicas'.
MODES = ("training",)


def compute(y_backprop, x, scale, mean, variance, sum_dy, sum_dy_xmu, count, epsilon, data_format):
    """x_backprop in TF ops, by name."""
    x_dtype = x.dtype
    y_backprop, x = _gradients.widen(y_backprop, x)
    rank, axis, _ = _gradients.layout(x, data_format)
    n = tf.cast(count, tf.float32)
    c = tf.math.rsqrt(variance + epsilon)
    x_backprop = _gradients.broadcast(scale * c, rank, axis) * (
        y_backprop - _gradients.broadcast(sum_dy / n, rank, axis)
        - (x - _gradients.broadcast(mean, rank, axis)) * _gradients.broadcast(c * c * sum_dy_xmu / n, rank, axis))
    return {"x_backprop": tf.cast(x_backprop, x_dtype)}


def gradient(op, *grads):
    """The gradient of every input but count."""
    given = _opdef.inputs_by_name(op)
    attrs = dict(count=given.pop("count"), epsilon=op.get_attr("epsilon"),
                 data_format=_gradients.attr_string(op, "data_format"))
    return _gradients.backprop(op, grads, given, lambda **inputs: compute(**inputs, **attrs))


def convert(pfor_input):
    """The activations merged, the per-channel inputs flattened (gobn._pfor),
    where count is loop invariant, the usual case; a count that differs
    between iterations (a scalar, which cannot be merged) runs the op once
    per iteration in a while loop."""
    count, count_stacked, _ = pfor_input.input(_pfor.index(pfor_input, "count"))
    if count_stacked:
        return [_pfor.wrap(_pfor.map_iterations(pfor_input, "x_backprop"), True)]
    data_format = _pfor.string_attr(pfor_input, "data_format")
    merged = [name for name in _pfor.input_names(pfor_input) if name != "count"]
    pfor_input.stack_inputs(stack_indices=[_pfor.index(pfor_input, name) for name in merged])
    stacked = {name: pfor_input.stacked_input(_pfor.index(pfor_input, name)) for name in merged}
    m = _pfor.ChannelMerge(stacked["x"], data_format, _pfor.activation_rank(pfor_input, "x", data_format))
    inputs = {name: m.merge(stacked[name]) if name in ("y_backprop", "x") else _pfor.vector(stacked[name])
              for name in merged}
    out = _pfor.run(pfor_input, dict(inputs, count=count))
    return _pfor.outputs(pfor_input, {"x_backprop": _pfor.wrap(m.split(out["x_backprop"]), True)})


def xla_inputs(given, attrs):
    """The inputs of its XLA call, whose handler takes x's own count R: the
    sums scaled by R / count, so that x_backprop's sums over R are the sums
    over count it was given."""
    ratio = (tf.cast(_xla.per_channel(given["x"], attrs["data_format"]), tf.float32)
             / tf.cast(given["count"], tf.float32))
    return dict(given, sum_dy=given["sum_dy"] * ratio, sum_dy_xmu=given["sum_dy_xmu"] * ratio)


def sample(case, seed, device):
    """A case: given the reference's sums (gobn._testing's sync_inputs), its
    x_backprop is the training gradient's, by T's tolerance."""
    from gobn import _testing

    made, x_backprop, sum_dy, sum_dy_xmu, count = _testing.sync_inputs(case, seed, device)
    with tf.device(device):
        inputs = {"y_backprop": made.inputs["y_backprop"], "x": made.inputs["x"], "scale": made.inputs["scale"],
                  "mean": made.inputs["reserve_space_1"], "variance": made.inputs["reserve_space_2"],
                  "sum_dy": tf.constant(sum_dy, tf.float32), "sum_dy_xmu": tf.constant(sum_dy_xmu, tf.float32),
                  "count": tf.constant(count, tf.int64)}
    attrs = {"epsilon": _testing.EPSILON, "data_format": case.data_format}
    return _testing.Sample(inputs, attrs, {"x_backprop": (x_backprop, case.dtype)}, None)
