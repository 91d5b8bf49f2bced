"""Keras layers whose backward pass runs on gobn's kernels.

``BatchNormalization`` takes the arguments of ``keras.layers.BatchNormalization``
and computes what it computes: the batch statistics in training (updating the
moving mean and the moving biased variance with ``momentum``), the moving
statistics otherwise. The forward pass is stock ``FusedBatchNormV3``; the
gradient is ``Gobn>FusedBatchNormGradV3`` (``gobn.fused_batch_norm``), in
training and in inference (a frozen layer still passes gradients to x, gamma
and beta).

With ``synchronized=True`` (the default of ``SyncBatchNormalization``) and more
than one replica, the statistics are those of the global batch and the
gradient is ``Gobn>BatchNormGradReduce`` → all-reduce →
``Gobn>BatchNormGradApply`` (``gobn.sync_batch_norm``).

Any axis works: a 4-D or 5-D input with ``axis=-1`` or ``axis=1`` is handed to
the fused ops as NHWC/NDHWC or NCHW/NCDHW; other ranks and axes are reshaped
(without copying) to NHWC ``[R, 1, 1, C]`` or NCHW ``[pre, C, 1, post]``.
The stock layer's code runs instead, unchanged, for what the fused ops do not
cover: a ``mask``, ``renorm=True``, or float64 inputs.
"""

import keras
import tensorflow as tf

import gobn

__all__ = ["BatchNormalization", "SyncBatchNormalization"]


def _fused_view(x, axis):
    """x as a rank-4/5 tensor for the fused ops: (x', data_format, restore)."""
    rank = x.shape.rank
    axis %= rank
    if rank in (4, 5) and axis in (1, rank - 1):
        formats = {(4, 1): "NCHW", (4, 3): "NHWC", (5, 1): "NCDHW", (5, 4): "NDHWC"}
        return x, formats[(rank, axis)], lambda y: y
    shape = tf.shape(x, out_type=tf.int64)
    channels = x.shape[axis]
    if axis == rank - 1:
        view = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:-1]), 1, 1, channels]))
        data_format = "NHWC"
    else:
        view = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), channels, 1, tf.reduce_prod(shape[axis + 1:])]))
        data_format = "NCHW"
    return view, data_format, lambda y: tf.reshape(y, shape)


@keras.saving.register_keras_serializable(package="gobn")
class BatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose backward pass runs on gobn.

    Same arguments, weights, moving-average updates and results as the stock
    layer (see the module's doc for what falls back to the stock code).
    XLA cannot compile gobn's ops, so the layer tells Keras it does not
    support jit_compile (model.compile's "auto" then leaves XLA off).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.supports_jit = False

    def _runs_on_gobn(self, inputs, mask):
        return (mask is None and not self.renorm and inputs.shape.rank is not None
                and keras.backend.result_type(inputs.dtype, "float32") == "float32")

    def call(self, inputs, training=None, mask=None):
        inputs = tf.convert_to_tensor(inputs)
        if not self._runs_on_gobn(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        x, data_format, restore = _fused_view(tf.cast(inputs, tf.float32), self.axis)
        channels = self.moving_mean.shape[0]
        gamma = keras.ops.cast(self.gamma, "float32") if self.scale else tf.ones([channels])
        beta = keras.ops.cast(self.beta, "float32") if self.center else tf.zeros([channels])
        moving_mean = keras.ops.cast(self.moving_mean, "float32")
        moving_variance = keras.ops.cast(self.moving_variance, "float32")
        if training and self.trainable:
            y, mean, variance = self._batch_statistics(x, gamma, beta, data_format)
            self.moving_mean.assign(moving_mean * self.momentum + mean * (1.0 - self.momentum))
            self.moving_variance.assign(moving_variance * self.momentum + variance * (1.0 - self.momentum))
        else:
            y, _, _ = gobn.fused_batch_norm(x, gamma, beta, mean=moving_mean, variance=moving_variance,
                                            epsilon=self.epsilon, data_format=data_format, is_training=False)
        return keras.ops.cast(restore(y), self.compute_dtype)

    def _batch_statistics(self, x, gamma, beta, data_format):
        """(y, mean, biased variance) of the batch: the global batch when synchronized."""
        ctx = tf.distribute.get_replica_context()
        if self.synchronized and ctx is not None and ctx.num_replicas_in_sync > 1:
            return gobn.sync_batch_norm(x, gamma, beta, epsilon=self.epsilon, data_format=data_format,
                                        replica_context=ctx)
        y, mean, variance = gobn.fused_batch_norm(x, gamma, beta, epsilon=self.epsilon,
                                                  data_format=data_format, is_training=True)
        # The stock layer averages the biased variance; FusedBatchNormV3's
        # batch_variance is Bessel-corrected (R/(R−1)).
        channels = max(self.moving_mean.shape[0], 1)
        per_channel = tf.cast(tf.size(x, out_type=tf.int64) // channels, tf.float32)
        variance = variance * tf.maximum(per_channel - 1.0, 0.0) / tf.maximum(per_channel, 1.0)
        return y, mean, variance


@keras.saving.register_keras_serializable(package="gobn")
class SyncBatchNormalization(BatchNormalization):
    """BatchNormalization synchronized across the replicas of a tf.distribute strategy.

    In training under a strategy with more than one replica, the batch
    statistics are those of the global batch (all replicas' batches
    together), and the gradient is gobn's BatchNormGradReduce, a cross-replica
    all-reduce and BatchNormGradApply: the layer computes what
    BatchNormalization computes on the concatenated batch. With one replica it
    is BatchNormalization.
    """

    def __init__(self, *args, synchronized=True, **kwargs):
        super().__init__(*args, synchronized=synchronized, **kwargs)
