"""What the vectorization (pfor) converters of the Gobn> ops share.

``tf.vectorized_map``, ``tf.GradientTape.jacobian`` and ``batch_jacobian``
(per-example gradients, DP-SGD) vectorize a loop body op by op through
converters registered with TensorFlow's pfor
(tensorflow/python/ops/parallel_for/pfor.py). Stock registers one for
FusedBatchNormGradV3 (none for FusedBatchNormGrad, V2 or
BatchNormWithGlobalNormalizationGrad); gobn registers one for every
``Gobn>`` op, its kind's ``convert`` (gobn._kinds), so a gradient through
``gobn.fused_batch_norm`` vectorizes as stock's does, also with
``fallback_to_while_loop=False``. This module has what the converters share.

How (stock's FusedBatchNormGradV3 converter does the same): every iteration
of the loop is a batch norm of its own, so the loop dimension S cannot be
merged into the batch dimension N (the per-channel sums, and in training the
batch statistics, would mix iterations). It is merged into the channel
dimension C instead (ChannelMerge): the stacked activations [S, N, ..., C]
(or [S, N, C, ...]) are transposed to [N, ..., S, C] ([N, S, C, ...]) and
reshaped to S·C channels, the per-channel inputs [S, C] are reshaped to
[S·C] (vector), one op runs (run), and the outputs are laid out back:
activations by the inverse reshape and transpose, per-channel outputs
reshaped to [S, C]. Loop-invariant inputs are tiled first. What a merge
cannot serve runs once per iteration in a while loop (map_iterations).

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
    from tensorflow.python.ops.parallel_for.pfor import RegisterPFor as register
    from tensorflow.python.ops.parallel_for.pfor import wrap
except (ImportError, AttributeError):  # pragma: no cover (a TensorFlow without pfor's registry)
    register = wrap = None

from gobn import _opdef  # noqa: E402
from gobn._opdefs_gen import BY_NAME  # noqa: E402
from gobn._opdefs_gen import CHANNELS_FIRST as _CHANNELS_FIRST  # noqa: E402

AVAILABLE = register is not None


def string_attr(pfor_input, name):
    value = pfor_input.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def run(pfor_input, inputs):
    """Runs the converted op's type on inputs ({input name: tensor}) with
    the converted op's attrs (all but the type attrs, which inputs bind);
    returns its outputs by name.

    Through gobn's generated wrapper, so that a tape recording the converted
    graph sees the op.
    """
    import gobn

    spec = BY_NAME[pfor_input.op_type]
    fn = getattr(gobn.load_library(), spec.wrapper)
    out = fn(**inputs, **{name: pfor_input.get_attr(name) for name, _ in spec.xla_attrs})
    return _opdef.by_output_name(pfor_input.op, [out] if isinstance(out, tf.Tensor) else list(out))


class ChannelMerge:
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


def vector(stacked):
    """[S, C] -> [S·C]."""
    return tf.reshape(stacked, [-1])


def input_names(pfor_input):
    """The names of the converted op's inputs, in order."""
    return _opdef.input_names(pfor_input.op)


def outputs(pfor_input, by_name):
    """The converter's outputs, in the converted op's order, from by_name
    ({output name: tensor, or list of tensors for a list}): a tensor pfor's
    wrap has wrapped as it is, any other wrapped loop invariant (the same
    for every iteration: a placeholder, a count)."""
    flat = []
    for name in _opdef.output_names(pfor_input.op):
        value = by_name[name]
        for t in value if isinstance(value, list) else [value]:
            flat.append(wrap(t, False) if isinstance(t, tf.Tensor) else t)
    return flat


def index(pfor_input, name):
    """The index of the converted op's input called name."""
    return _opdef.input_index(pfor_input.op, name)


def activation_rank(pfor_input, name, data_format):
    """The rank of the converted op's (unstacked) activation input name."""
    rank = pfor_input.stacked_input(index(pfor_input, name)).shape.rank
    if rank is not None:
        return rank - 1
    return 5 if data_format in ("NDHWC", "NCDHW") else 4


def map_iterations(pfor_input, output):
    """The op's output called output, one iteration at a time (a while loop)."""
    inputs = {name: (t, stacked) for name, (t, stacked, _) in zip(input_names(pfor_input), pfor_input.inputs, strict=True)}

    def one(i):
        return run(pfor_input, {name: t[i] if stacked else t for name, (t, stacked) in inputs.items()})[output]

    return tf.map_fn(one, tf.range(pfor_input.pfor.loop_len_vector[0]),
                     fn_output_signature=pfor_input.outputs[0].dtype)
