"""Vectorization (pfor) converters for the Gobn> ops.

``tf.vectorized_map``, ``tf.GradientTape.jacobian`` and ``batch_jacobian``
(per-example gradients, DP-SGD) vectorize a loop body op by op through
converters registered with TensorFlow's pfor
(tensorflow/python/ops/parallel_for/pfor.py). Stock registers one for
FusedBatchNormGradV3 (none for FusedBatchNormGrad, V2 or
BatchNormWithGlobalNormalizationGrad); this module registers one for every
``Gobn>`` op, so a gradient through ``gobn.fused_batch_norm`` vectorizes as
stock's does, also with ``fallback_to_while_loop=False``.

How (stock's FusedBatchNormGradV3 converter does the same): every iteration
of the loop is a batch norm of its own, so the loop dimension S cannot be
merged into the batch dimension N (the per-channel sums, and in training the
batch statistics, would mix iterations). It is merged into the channel
dimension C instead: the stacked activations [S, N, ..., C] (or
[S, N, C, ...]) are transposed to [N, ..., S, C] ([N, S, C, ...]) and reshaped
to S·C channels, the per-channel inputs [S, C] are reshaped to [S·C], one op
runs, and the outputs are laid out back: activations by the inverse
reshape and transpose, per-channel outputs reshaped to [S, C]. Loop-invariant
inputs are tiled first. The empty placeholder outputs (reserve_space_3/4/5)
and BatchNormGradReduce's count (N times the spatial size, which the merge
keeps) are the same for every iteration, so they come back loop invariant.
BatchNormGradApply with a count that differs between iterations (a scalar,
which cannot be merged) runs the op once per iteration in a while loop
(tf.map_fn); a loop-invariant count, the usual case, is merged as above.

The second-order gradients gobn registers (gobn._gradients) are written in
ordinary TensorFlow ops, as stock's are, and vectorize through their
converters.

RegisterPFor is a private TensorFlow API. The import is guarded: when it is
missing or has moved, nothing is registered (``AVAILABLE`` is False), gobn
still imports, and vectorizing a gradient through a Gobn> op falls back to
pfor's while loop (or fails with ``fallback_to_while_loop=False``), as
before.
"""

import tensorflow as tf

try:  # private TensorFlow API: see the module docstring
    from tensorflow.python.ops.parallel_for.pfor import RegisterPFor as _RegisterPFor
    from tensorflow.python.ops.parallel_for.pfor import wrap as _wrap
except (ImportError, AttributeError):  # pragma: no cover (a TensorFlow without pfor's registry)
    _RegisterPFor = _wrap = None

from gobn._opdefs_gen import BY_NAME, OPS  # noqa: E402
from gobn._opdefs_gen import CHANNELS_FIRST as _CHANNELS_FIRST  # noqa: E402

AVAILABLE = _RegisterPFor is not None


def _string_attr(pfor_input, name):
    value = pfor_input.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def _run(pfor_input, inputs):
    """Runs the converted op's type on inputs (by op-def argument name) with
    the converted op's attrs (all but the type attrs, which inputs bind).

    Through gobn's generated wrapper, so that a tape recording the converted
    graph sees the op.
    """
    import gobn

    spec = BY_NAME[pfor_input.op_type]
    fn = getattr(gobn.load_library(), spec.wrapper)
    names = [arg.name for arg in pfor_input.op.op_def.input_arg]
    out = fn(**dict(zip(names, inputs)), **{name: pfor_input.get_attr(name) for name, _ in spec.xla_attrs})
    return [out] if isinstance(out, tf.Tensor) else list(out)


class _ChannelMerge:
    """Merges the loop dimension of stacked activations into their channels.

    stacked has the loop dimension first, then the op's layout (channel axis
    at 1 for channels-first formats, last otherwise).
    """

    def __init__(self, stacked, data_format, rank):
        self.rank = rank  # of the op's (unstacked) activations
        axis = 1 if data_format in _CHANNELS_FIRST else rank - 1
        self.axis = axis
        # Stacked [S, d0, ..., d(r-1)] with the channel at axis+1 -> the loop
        # dimension just before the channel: [d0, ..., S, C, ...].
        self.perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank + 1))
        self.inverse = [self.perm.index(i) for i in range(rank + 1)]
        moved_shape = tf.shape(stacked)
        self.moved_shape = tf.gather(moved_shape, self.perm)
        self.channels = moved_shape[axis + 1]
        self.merged_shape = tf.concat(
            [self.moved_shape[:axis], [self.moved_shape[axis] * self.moved_shape[axis + 1]],
             self.moved_shape[axis + 2:]], 0)

    def merge(self, stacked):
        return tf.reshape(tf.transpose(stacked, self.perm), self.merged_shape)

    def split(self, merged):
        return tf.transpose(tf.reshape(merged, self.moved_shape), self.inverse)

    def split_vector(self, merged, n):
        """[S·C] -> [S, C]."""
        return tf.reshape(merged, tf.concat([tf.cast(n, tf.int32), [self.channels]], 0))


def _vector(stacked):
    """[S, C] -> [S·C]."""
    return tf.reshape(stacked, [-1])


def _activation_rank(pfor_input, index, data_format):
    rank = pfor_input.stacked_input(index).shape.rank
    if rank is not None:
        return rank - 1
    return 5 if data_format in ("NDHWC", "NCDHW") else 4


def _convert_fused_grad(pfor_input):
    """FusedBatchNormGrad, V2 and V3: inputs y_backprop, x, scale, reserve_space_1, _2 (, _3)."""
    data_format = _string_attr(pfor_input, "data_format")
    pfor_input.stack_inputs(stack_indices=[0, 1, 2, 3, 4])
    n = pfor_input.pfor.loop_len_vector
    x = pfor_input.stacked_input(1)
    m = _ChannelMerge(x, data_format, _activation_rank(pfor_input, 1, data_format))
    inputs = [m.merge(pfor_input.stacked_input(0)), m.merge(x)]
    inputs += [_vector(pfor_input.stacked_input(i)) for i in (2, 3, 4)]
    if pfor_input.num_inputs > 5:
        # reserve_space_3 (V3): per batch, not per channel; gobn's kernels do
        # not read it. Stock's converter flattens a stacked one likewise.
        rs3, stacked, _ = pfor_input.input(5)
        inputs.append(_vector(rs3) if stacked else rs3)
    out = _run(pfor_input, inputs)
    return ([_wrap(m.split(out[0]), True), _wrap(m.split_vector(out[1], n), True),
             _wrap(m.split_vector(out[2], n), True)]
            + [_wrap(t, False) for t in out[3:]])


def _convert_global_normalization_grad(pfor_input):
    """BatchNormWithGlobalNormalizationGrad: inputs t, m, v, gamma, backprop (NHWC)."""
    pfor_input.stack_inputs()
    n = pfor_input.pfor.loop_len_vector
    t = pfor_input.stacked_input(0)
    m = _ChannelMerge(t, "NHWC", 4)
    inputs = [m.merge(t)] + [_vector(pfor_input.stacked_input(i)) for i in (1, 2, 3)]
    inputs.append(m.merge(pfor_input.stacked_input(4)))
    out = _run(pfor_input, inputs)
    return [_wrap(m.split(out[0]), True)] + [_wrap(m.split_vector(o, n), True) for o in out[1:]]


def _convert_grad_reduce(pfor_input):
    """BatchNormGradReduce: inputs y_backprop, x, mean; outputs sum_dy, sum_dy_xmu, count."""
    data_format = _string_attr(pfor_input, "data_format")
    pfor_input.stack_inputs()
    n = pfor_input.pfor.loop_len_vector
    x = pfor_input.stacked_input(1)
    m = _ChannelMerge(x, data_format, _activation_rank(pfor_input, 1, data_format))
    inputs = [m.merge(pfor_input.stacked_input(0)), m.merge(x), _vector(pfor_input.stacked_input(2))]
    sum_dy, sum_dy_xmu, count = _run(pfor_input, inputs)
    # count is N times the spatial size: the merge keeps it, and it is every
    # iteration's.
    return [_wrap(m.split_vector(sum_dy, n), True), _wrap(m.split_vector(sum_dy_xmu, n), True),
            _wrap(count, False)]


def _convert_grad_apply(pfor_input):
    """BatchNormGradApply: inputs y_backprop, x, scale, mean, variance, sum_dy, sum_dy_xmu, count."""
    count, count_stacked, _ = pfor_input.input(7)
    if count_stacked:
        return [_wrap(_map_iterations(pfor_input), True)]
    data_format = _string_attr(pfor_input, "data_format")
    pfor_input.stack_inputs(stack_indices=list(range(7)))
    x = pfor_input.stacked_input(1)
    m = _ChannelMerge(x, data_format, _activation_rank(pfor_input, 1, data_format))
    inputs = [m.merge(pfor_input.stacked_input(0)), m.merge(x)]
    inputs += [_vector(pfor_input.stacked_input(i)) for i in range(2, 7)] + [count]
    (x_backprop,) = _run(pfor_input, inputs)
    return [_wrap(m.split(x_backprop), True)]


def _map_iterations(pfor_input):
    """The op's single output, one iteration at a time (a while loop)."""
    inputs = [(t, stacked) for t, stacked, _ in pfor_input.inputs]

    def one(i):
        return _run(pfor_input, [t[i] if stacked else t for t, stacked in inputs])[0]

    return tf.map_fn(one, tf.range(pfor_input.pfor.loop_len_vector[0]),
                     fn_output_signature=pfor_input.outputs[0].dtype)


# The converter of each kernel family (gobn._opdefs_gen's kinds); capi's
# TestEveryKindIsComplete requires one for every kind.
KIND_CONVERTERS = {
    "FusedBatchNormGrad": _convert_fused_grad,
    "GlobalNormalizationGrad": _convert_global_normalization_grad,
    "GradReduce": _convert_grad_reduce,
    "GradApply": _convert_grad_apply,
}

# The converter of each op.
CONVERTERS = {op.name: KIND_CONVERTERS[op.kind] for op in OPS}

if AVAILABLE:
    for _name, _fn in CONVERTERS.items():
        try:
            _RegisterPFor(_name)(_fn)
        except AssertionError:  # registered already (the module was loaded twice)
            pass
