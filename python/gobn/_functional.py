"""gobn.fused_batch_norm and gobn.sync_batch_norm: batch norm whose gradient runs on gobn's ops.

The forward passes are stock TensorFlow ops; each gradient is a custom
gradient that calls gobn's ops, built for XLA where the forward pass was
(gobn._xla). gobn re-exports both; gobn.keras' layers call them.
"""

import collections

import tensorflow as tf

from gobn import _fusion, _saving, _xla
from gobn._opdefs_gen import CHANNELS_FIRST


def _format(data_format):
    return data_format.decode() if isinstance(data_format, bytes) else data_format


# What fused_batch_norm returns: tf.compat.v1.nn.fused_batch_norm's outputs,
# batch_variance Bessel-corrected as stock's.
FusedBatchNormOutput = collections.namedtuple("FusedBatchNormOutput", "y batch_mean batch_variance")

# What sync_batch_norm returns: the global batch's mean and its biased variance.
SyncBatchNormOutput = collections.namedtuple("SyncBatchNormOutput", "y mean biased_variance")


@tf.autograph.experimental.do_not_convert
def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0):
    """tf.compat.v1.nn.fused_batch_norm whose gradient runs on gobn.

    The forward pass is stock FusedBatchNormV3; the gradient with respect to
    x, scale and offset is Gobn>FusedBatchNormGradV3 with the forward's
    reserve spaces (training) or mean and variance (inference), exactly
    where stock's gradient uses FusedBatchNormGradV3; in a graph where y
    goes through a ReLU or ReLU6 alone, Gobn>FusedBatchNormGradEx of the
    activation's gradient instead (gobn._fusion). As in stock, mean and
    variance get no gradient, nor do the batch_mean and batch_variance
    outputs pass one back. Second-order gradients work (gobn registers them).

    Returns:
      FusedBatchNormOutput(y, batch_mean, batch_variance), the outputs of
      tf.compat.v1.nn.fused_batch_norm: batch_variance is Bessel-corrected
      (the sum of squares over R−1), as stock's is; with
      exponential_avg_factor != 1 both are the running averages. (The biased
      variance is batch_variance·(R−1)/R, R the elements per channel;
      sync_batch_norm returns that one, and says so by its field's name.)
    """
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError("Both `mean` and `variance` must be a 1D tensor when `is_training` is False or "
                         f"`exponential_avg_factor` != 1.0. Received: `mean` {mean!r} and `variance` {variance!r}")
    with tf.name_scope(name or "GobnFusedBatchNorm"):
        x = tf.convert_to_tensor(x, name="input")
        scale = tf.convert_to_tensor(scale, name="scale")
        offset = tf.convert_to_tensor(offset, name="offset")
        mean = tf.constant([], tf.float32) if mean is None else tf.convert_to_tensor(mean, tf.float32)
        variance = tf.constant([], tf.float32) if variance is None else tf.convert_to_tensor(variance, tf.float32)
        return FusedBatchNormOutput(*_fused_batch_norm(
            x, scale, offset, mean, variance, float(epsilon), _format(data_format), bool(is_training),
            float(exponential_avg_factor)))


def _fused_batch_norm(x, scale, offset, mean, variance, epsilon, data_format, is_training, factor):
    @tf.custom_gradient
    def forward(x, scale, offset, mean, variance):
        xla = _xla.in_xla_context()  # then the gradient is compiled too (gobn._xla)
        out = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
            exponential_avg_factor=factor, data_format=data_format, is_training=is_training)

        def grad(dy, _batch_mean_grad, _batch_variance_grad):
            # As stock's _FusedBatchNormV3Grad: the reserve spaces in
            # training, the population statistics in inference.
            saved_mean, saved_variance = (out.reserve_space_1, out.reserve_space_2) if is_training else (mean, variance)
            if _saving.saving():  # traced for a SavedModel: stock's op, which loads without gobn
                dx, dscale, doffset = _saving.stock_fused_grad(
                    dy, x, scale, saved_mean, saved_variance, out.reserve_space_3, epsilon, data_format, is_training)
                return dx, dscale, doffset, None, None
            fused = _fusion.gradient(dy, out.y, xla, x=x, scale=scale, offset=offset, reserve_space_1=saved_mean,
                                     reserve_space_2=saved_variance, reserve_space_3=out.reserve_space_3,
                                     epsilon=epsilon, data_format=data_format, is_training=is_training)
            if fused is not None:  # dy is a ReLU's gradient of y (gobn._fusion)
                return (*fused, None, None)
            dx, dscale, doffset, _, _ = _xla.call(
                "Gobn>FusedBatchNormGradV3", xla, y_backprop=dy, x=x, scale=scale, reserve_space_1=saved_mean,
                reserve_space_2=saved_variance, reserve_space_3=out.reserve_space_3, epsilon=epsilon,
                data_format=data_format, is_training=is_training)
            return dx, dscale, doffset, None, None

        return (out.y, out.batch_mean, out.batch_variance), grad

    return forward(x, scale, offset, mean, variance)


def _layout(x, data_format):
    """(channel axis, reduction axes) of a rank-4 or rank-5 activation tensor."""
    rank = x.shape.rank
    if rank not in (4, 5):
        raise ValueError(f"gobn: x must be 4 or 5-dimensional with a known rank, got shape {x.shape}")
    axis = 1 if data_format in CHANNELS_FIRST else rank - 1
    return axis, [i for i in range(rank) if i != axis]


@tf.autograph.experimental.do_not_convert
def sync_batch_norm(x, scale, offset, epsilon=0.001, data_format="NHWC", replica_context=None, name=None):
    """Training-mode batch norm with the statistics of every replica's batch.

    Synchronized batch norm: the mean and (biased) variance are taken over
    the concatenation of all replicas' x, by all-reducing per-channel sums
    (first Σx and the count, then Σ(x−μ)², which stays accurate where
    E[x²]−μ² would not). y = scale·(x−μ)/sqrt(σ²+ε) + offset is stock
    FusedBatchNormV3 in inference mode on those statistics.

    The gradient is gobn's: per replica, Gobn>BatchNormGradReduce gives
    Σdy and Σdy·(x−μ); they are all-reduced (one collective: the global
    element count n is the forward pass's); then Gobn>BatchNormGradApply gives

        x_backprop = scale·c·(dy − Σdy/n − (x−μ)·c²·Σdy·(x−μ)/n),  c = 1/sqrt(σ²+ε)

    with the global sums and count n: the gradient of the sum of every
    replica's loss with respect to this replica's x. scale and offset get
    this replica's c·Σdy·(x−μ) and Σdy, which the strategy sums across
    replicas as it does every other gradient.

    Call it in a replica context (inside strategy.run, or a Keras layer's
    call under a strategy); replica_context defaults to
    tf.distribute.get_replica_context(). With one replica it is plain batch
    norm.

    Returns:
      SyncBatchNormOutput(y, mean, biased_variance): the global batch's mean
      and biased variance (the sum of squares over n, as the normalization
      uses it, where fused_batch_norm's batch_variance is Bessel-corrected),
      the same on every replica (as float32).
    """
    ctx = replica_context or tf.distribute.get_replica_context()
    if ctx is None:
        raise ValueError("gobn.sync_batch_norm must run in a replica context (e.g. inside strategy.run)")
    data_format = _format(data_format)
    with tf.name_scope(name or "GobnSyncBatchNorm"):
        x = tf.convert_to_tensor(x, name="input")
        scale = tf.convert_to_tensor(scale, tf.float32, name="scale")
        offset = tf.convert_to_tensor(offset, tf.float32, name="offset")
        axis, axes = _layout(x, data_format)
        shape = [1] * x.shape.rank
        shape[axis] = -1

        def per_channel(v):
            return tf.reshape(v, shape)

        @tf.custom_gradient
        def forward(x, scale, offset):
            xla = _xla.in_xla_context()  # then the gradient is compiled too (gobn._xla)
            x32 = tf.cast(x, tf.float32)
            # One all-reduce for Σx and the element count, packed in float64
            # (exact for counts up to 2^53).
            local_count = tf.reduce_prod(tf.gather(tf.shape(x, out_type=tf.int64), axes))
            packed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat(
                [tf.cast(tf.reduce_sum(x32, axes), tf.float64), tf.cast(local_count, tf.float64)[None]], 0))
            count = tf.cast(packed[-1], tf.int64)
            mean = tf.cast(tf.math.divide_no_nan(packed[:-1], packed[-1]), tf.float32)
            squares = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                     tf.reduce_sum(tf.math.squared_difference(x32, per_channel(mean)), axes))
            variance = tf.math.divide_no_nan(squares, tf.cast(count, tf.float32))
            y = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
                data_format=data_format, is_training=False).y

            def grad(dy, _mean_grad, _variance_grad):
                # The global count is the forward's: one all-reduce (of the
                # two sums) is all the backward pass needs.
                sum_dy, sum_dy_xmu, _ = _xla.call("Gobn>BatchNormGradReduce", xla, y_backprop=dy, x=x, mean=mean,
                                                  data_format=data_format)
                global_dy, global_dy_xmu = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [sum_dy, sum_dy_xmu])
                dx = _xla.call("Gobn>BatchNormGradApply", xla, y_backprop=dy, x=x, scale=scale, mean=mean,
                               variance=variance, sum_dy=global_dy, sum_dy_xmu=global_dy_xmu, count=count,
                               epsilon=epsilon, data_format=data_format)
                return dx, sum_dy_xmu * tf.math.rsqrt(variance + epsilon), sum_dy

            return (y, mean, variance), grad

        return SyncBatchNormOutput(*forward(x, scale, offset))
