"""The FusedBatchNormGradEx kind: Gobn>FusedBatchNormGradEx, the batch-norm
gradient fused with its activation's.

With y the output of the activation that followed the batch norm
(activation_mode: Identity, Relu or Relu6) and dy the gradient of y,

    dz = dy·m,   m = 1 where 0 < y (Relu), 0 < y < 6 (Relu6), always (Identity); else 0

as stock's ReluGrad and Relu6Grad compute it from y; x_backprop,
scale_backprop and offset_backprop are FusedBatchNormGradV3's of dz, and
side_input_backprop (num_side_inputs = 1) is dz: the gradient of a side
input added before the activation. Its gradient is the FusedBatchNormGrad
kind's of dz, m being constant where it has a derivative (y, offset and
the statistics get none).
"""

import numpy as np
import tensorflow as tf

from gobn import _gradients, _opdef, _pfor
from gobn._kinds import fused_batch_norm_grad

MODES = ("training_relu", "training_identity_side", "inference_relu6_side")

# Each mode's attrs beside epsilon and data_format (internal/reference's
# modes of the kind are the same).
MODE_ATTRS = {
    "training_relu": {"is_training": True, "activation_mode": "Relu", "num_side_inputs": 0},
    "training_identity_side": {"is_training": True, "activation_mode": "Identity", "num_side_inputs": 1},
    "inference_relu6_side": {"is_training": False, "activation_mode": "Relu6", "num_side_inputs": 1},
}

# The stock gradient of each activation from its output, and whether the
# activation's derivative is 1 where 0 < y (Relu) or 0 < y < 6 (Relu6).
ACTIVATION_GRADS = {"Relu": tf.raw_ops.ReluGrad, "Relu6": tf.raw_ops.Relu6Grad}


def mask(y_backprop, y, activation_mode):
    """dz in TF ops: dy·m, as stock's ReluGrad and Relu6Grad (dy·0 is NaN
    where dy is NaN or infinite)."""
    if activation_mode == "Identity":
        return y_backprop
    on = y > 0
    if activation_mode == "Relu6":
        on = tf.logical_and(on, y < 6)
    return y_backprop * tf.cast(on, y_backprop.dtype)


def compute(y_backprop, x, scale, reserve_space_1, reserve_space_2, y, epsilon, data_format, is_training,
            activation_mode, num_side_inputs):
    """The outputs in TF ops, by name: the FusedBatchNormGrad kind's of dz,
    and side_input_backprop, dz, a list of one where num_side_inputs is 1."""
    dz = mask(y_backprop, y, activation_mode)
    out = fused_batch_norm_grad.compute(dz, x, scale, reserve_space_1, reserve_space_2, epsilon, data_format,
                                        is_training)
    out["side_input_backprop"] = [dz] if num_side_inputs else []
    return out


def _attrs(op):
    return dict(epsilon=op.get_attr("epsilon"), data_format=_gradients.attr_string(op, "data_format"),
                is_training=op.get_attr("is_training"), activation_mode=_gradients.attr_string(op, "activation_mode"),
                num_side_inputs=op.get_attr("num_side_inputs"))


def gradient(op, *grads):
    """The gradient of y_backprop, x and scale (none of y, offset or the
    statistics)."""
    given = _opdef.inputs_by_name(op)
    attrs = _attrs(op)

    def outputs(y_backprop, x, scale):
        return compute(y_backprop, x, scale, given["reserve_space_1"], given["reserve_space_2"], given["y"], **attrs)

    return _gradients.backprop(op, grads, {name: given[name] for name in ("y_backprop", "x", "scale")}, outputs)


def convert(pfor_input):
    """y_backprop, x, y and the per-channel inputs merged (gobn._pfor), as
    the FusedBatchNormGrad kind's converter; side_input_backprop split as
    x_backprop is. reserve_space_3 is per batch, and no kernel of gobn's
    reads it: a stacked one is flattened."""
    data_format = _pfor.string_attr(pfor_input, "data_format")
    activations = ("y_backprop", "x", "y")
    vectors = ("scale", "reserve_space_1", "reserve_space_2", "offset")
    merged = activations + vectors
    pfor_input.stack_inputs(stack_indices=[_pfor.index(pfor_input, name) for name in merged])
    stacked = {name: pfor_input.stacked_input(_pfor.index(pfor_input, name)) for name in merged}
    m = _pfor.ChannelMerge(stacked["x"], data_format, _pfor.activation_rank(pfor_input, "x", data_format))
    inputs = {name: m.merge(stacked[name]) for name in activations}
    inputs.update((name, _pfor.vector(stacked[name])) for name in vectors)
    rs3, is_stacked, _ = pfor_input.input(_pfor.index(pfor_input, "reserve_space_3"))
    inputs["reserve_space_3"] = _pfor.vector(rs3) if is_stacked else rs3
    out = _pfor.run(pfor_input, inputs)
    n = pfor_input.pfor.loop_len_vector
    out["x_backprop"] = _pfor.wrap(m.split(out["x_backprop"]), True)
    out["side_input_backprop"] = [_pfor.wrap(m.split(t), True) for t in out["side_input_backprop"]]
    for name in ("scale_backprop", "offset_backprop"):
        out[name] = _pfor.wrap(m.split_vector(out[name], n), True)
    return _pfor.outputs(pfor_input, out)


def sample(case, seed, device):
    """A case: FusedBatchNormGradV3's inputs (gobn._testing.fused_inputs) in
    the mode's training or inference, the forward's offset, y drawn across
    0 and 6 with some exactly 0 and 6; expected, the float64 reference of
    dz (exact: a mask of dy) and FusedBatchNormGradV3's reference on it, by
    T's tolerance for x_backprop and side_input_backprop, float32's for the
    1-D outputs; stock's twin beside it."""
    from gobn import _testing
    from gobn._opdefs_gen import BY_KIND

    attrs = MODE_ATTRS[case.mode]
    made = _testing.fused_inputs(BY_KIND["FusedBatchNormGrad"][-1], case.dtype, case.data_format,
                                 attrs["is_training"], case.shape, seed, device)
    rng = np.random.default_rng(seed)
    y = rng.uniform(-1.5, 7.5, case.shape)
    y[rng.random(case.shape) < 0.05] = 0.0
    y[rng.random(case.shape) < 0.05] = 6.0
    with tf.device(device):
        y = tf.constant(_testing.from_channels_last(y, case.data_format), case.dtype)
        inputs = dict(made.inputs, offset=made.offset, y=y)
    dz = _testing.as_float64(mask(tf.constant(_testing.as_float64(made.inputs["y_backprop"])),
                                  tf.constant(_testing.as_float64(y)), attrs["activation_mode"]))
    x_backprop, scale_backprop, offset_backprop = _testing.fused_grad_reference(
        dz, made.inputs["x"], made.inputs["scale"], made.mean, made.variance, made.attrs["epsilon"],
        attrs["is_training"], case.data_format)
    expected = {"x_backprop": (x_backprop, case.dtype), "scale_backprop": (scale_backprop, tf.float32),
                "offset_backprop": (offset_backprop, tf.float32)}
    if attrs["num_side_inputs"]:
        expected["side_input_backprop"] = (dz, case.dtype)
    return _testing.Sample(inputs, dict(made.attrs, **attrs), expected, case.op.stock)


def stock_outputs(case, sample):
    """Stock's outputs of a sample on the CPU, which has no kernel of its
    twin: stock's activation gradient (ReluGrad, Relu6Grad) then its
    FusedBatchNormGradV3, by name; none in inference with channels first,
    which stock's CPU kernel rejects."""
    from gobn import _testing

    attrs = sample.attrs
    if not attrs["is_training"] and case.data_format in _testing.CHANNELS_FIRST:
        return None
    given = sample.inputs
    with tf.device("CPU:0"):
        dz = given["y_backprop"]
        if attrs["activation_mode"] in ACTIVATION_GRADS:
            dz = ACTIVATION_GRADS[attrs["activation_mode"]](gradients=dz, features=given["y"])
        out = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dz, x=given["x"], scale=given["scale"], reserve_space_1=given["reserve_space_1"],
            reserve_space_2=given["reserve_space_2"], reserve_space_3=given["reserve_space_3"],
            epsilon=attrs["epsilon"], data_format=attrs["data_format"], is_training=attrs["is_training"])
    result = {"x_backprop": out.x_backprop, "scale_backprop": out.scale_backprop,
              "offset_backprop": out.offset_backprop, "reserve_space_4": out.reserve_space_4,
              "reserve_space_5": out.reserve_space_5}
    if attrs["num_side_inputs"]:
        result["side_input_backprop"] = dz
    return result
