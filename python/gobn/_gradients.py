"""What the gradients of gobn's ops share, for double backprop (gradient
penalties).

Each op's gradient (its kind's ``gradient``, gobn._kinds) is computed the
way TensorFlow computes the gradient of its own gradient ops
(tensorflow/python/ops/nn_fused_batch_norm_grad.py): the op's math is
written again with differentiable TensorFlow ops (its kind's
``compute``), and a GradientTape carries the incoming gradients back
through it (backprop). half and bfloat16 are computed in float32, as stock
does (widen).
"""

import tensorflow as tf

from gobn import _opdef
from gobn._opdefs_gen import CHANNELS_FIRST as _CHANNELS_FIRST


def attr_string(op, name):
    value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def layout(x, data_format):
    """(rank, channel axis, reduction axes) of an activation tensor."""
    rank = x.shape.rank
    if rank is None:
        rank = 4 if data_format in ("NHWC", "NCHW") else 5
    axis = 1 if data_format in _CHANNELS_FIRST else rank - 1
    return rank, axis, [i for i in range(rank) if i != axis]


def broadcast(v, rank, axis):
    """Reshapes a per-channel vector to broadcast along x's channel axis."""
    if axis == rank - 1:
        return v
    shape = [1] * rank
    shape[axis] = -1
    return tf.reshape(v, shape)


def widen(*tensors):
    """Casts half and bfloat16 tensors to float32 (stock's gradients do too)."""
    return [tf.cast(t, tf.float32) if t.dtype in (tf.float16, tf.bfloat16) else t for t in tensors]


def backprop(op, grads, inputs, compute):
    """The gradients of op's inputs named in inputs ({name: tensor}) for the
    op's incoming grads, one for each of its outputs, where compute(**inputs)
    returns its outputs by name (a list for a list output); None for every
    other input. A missing incoming gradient (an output nobody used) counts
    as zero."""
    given = _opdef.by_output_name(op, grads)
    outputs = _opdef.by_output_name(op, op.outputs)
    names = list(inputs)
    with tf.GradientTape() as tape:
        tape.watch([inputs[n] for n in names])
        computed = compute(**inputs)
    targets, incoming = [], []
    for name, value in computed.items():
        if not isinstance(value, list):
            value, given[name], outputs[name] = [value], [given[name]], [outputs[name]]
        targets += value
        incoming += [tf.zeros_like(out) if g is None else g for g, out in zip(given[name], outputs[name], strict=True)]
    got = dict(zip(names, tape.gradient(targets, [inputs[n] for n in names], output_gradients=incoming)))
    return [got.get(name) for name in _opdef.input_names(op)]
