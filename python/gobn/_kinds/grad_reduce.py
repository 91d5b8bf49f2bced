"""The GradReduce kind: Gobn>BatchNormGradReduce, the first half of the
synchronized gradient: sum_dy = Σdy, sum_dy_xmu = Σdy·(x−μ), and count,
the elements per channel. Its gradient is with respect to y_backprop, x
and mean (count is an integer: no gradient). count is an int64 in host
memory, which its XLA call leaves out: it is computed from x's shape.
"""

import tensorflow as tf

from gobn import _gradients, _opdef, _pfor, _xla

# Its cases run in training: its statistics are the replicas'.
MODES = ("training",)


def compute(y_backprop, x, mean, data_format):
    """The sums sum_dy and sum_dy_xmu in TF ops, by name."""
    y_backprop, x = _gradients.widen(y_backprop, x)
    rank, axis, axes = _gradients.layout(x, data_format)
    return {"sum_dy": tf.reduce_sum(y_backprop, axes),
            "sum_dy_xmu": tf.reduce_sum(y_backprop * (x - _gradients.broadcast(mean, rank, axis)), axes)}


def gradient(op, *grads):
    """The gradient of y_backprop, x and mean."""
    data_format = _gradients.attr_string(op, "data_format")
    return _gradients.backprop(op, grads, _opdef.inputs_by_name(op),
                               lambda **inputs: compute(**inputs, data_format=data_format))


def convert(pfor_input):
    """y_backprop and x merged, mean flattened (gobn._pfor). count is N
    times the spatial size, which the merge keeps, and every iteration's:
    it comes back loop invariant."""
    data_format = _pfor.string_attr(pfor_input, "data_format")
    pfor_input.stack_inputs()
    stacked = {name: pfor_input.stacked_input(_pfor.index(pfor_input, name)) for name in _pfor.input_names(pfor_input)}
    m = _pfor.ChannelMerge(stacked["x"], data_format, _pfor.activation_rank(pfor_input, "x", data_format))
    out = _pfor.run(pfor_input, {"y_backprop": m.merge(stacked["y_backprop"]), "x": m.merge(stacked["x"]),
                                 "mean": _pfor.vector(stacked["mean"])})
    n = pfor_input.pfor.loop_len_vector
    for name in ("sum_dy", "sum_dy_xmu"):
        out[name] = _pfor.wrap(m.split_vector(out[name], n), True)
    out["count"] = _pfor.wrap(out["count"], False)
    return _pfor.outputs(pfor_input, out)


def xla_host_outputs(given, attrs):
    """count, which its XLA call leaves out: x's elements per channel."""
    return {"count": _xla.per_channel(given["x"], attrs["data_format"])}


def sample(case, seed, device):
    """A case: its sums are the training gradient's (gobn._testing's
    sync_inputs), by float32's tolerance, and its count exact."""
    from gobn import _testing

    made, _, sum_dy, sum_dy_xmu, count = _testing.sync_inputs(case, seed, device)
    inputs = {"y_backprop": made.inputs["y_backprop"], "x": made.inputs["x"], "mean": made.inputs["reserve_space_1"]}
    expected = {"sum_dy": (sum_dy, tf.float32), "sum_dy_xmu": (sum_dy_xmu, tf.float32),
                "count": (float(count), tf.int64)}
    return _testing.Sample(inputs, {"data_format": case.data_format}, expected, None)
