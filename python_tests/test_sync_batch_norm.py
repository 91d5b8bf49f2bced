"""Synchronized batch norm: the ops Gobn>BatchNormGradReduce and
Gobn>BatchNormGradApply, gobn.sync_batch_norm and
gobn.keras.SyncBatchNormalization over two replicas (two logical CPUs, set up
by conftest.py) against single-device batch norm on the concatenated batch.
"""

import numpy as np
import pytest
import tensorflow as tf

import gobn
from support import CHANNELS_FIRST, assert_close

FORMATS = {"NHWC": (8, 3, 4, 3), "NCHW": (8, 3, 4, 5), "NDHWC": (8, 2, 3, 2, 3), "NCDHW": (8, 3, 2, 3, 2)}


def channels(data_format, shape):
    return shape[1] if data_format in CHANNELS_FIRST else shape[-1]


def axes(data_format, rank):
    axis = 1 if data_format in CHANNELS_FIRST else rank - 1
    return [i for i in range(rank) if i != axis]


@pytest.fixture
def strategy(mirrored_strategy):
    return mirrored_strategy


def inputs(data_format, dtype=tf.float32, seed=0, shape=None):
    shape = shape or FORMATS[data_format]
    rng = np.random.default_rng(seed)
    C = channels(data_format, shape)
    x = tf.constant(rng.normal(2.0, 3.0, shape), dtype)
    dy = tf.constant(rng.normal(0.0, 1.0, shape), dtype)
    scale = tf.constant(rng.uniform(0.5, 2.0, C), tf.float32)
    offset = tf.constant(rng.normal(0.0, 1.0, C), tf.float32)
    return x, dy, scale, offset


# ---------------------------------------------------------------------------
# The ops


@pytest.mark.parametrize("data_format", list(FORMATS))
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_reduce_then_apply_is_the_training_gradient(data_format, dtype):
    """One replica: Reduce + Apply = FusedBatchNormGradV3 (training), stock's and gobn's."""
    x, dy, scale, offset = inputs(data_format, dtype, seed=1)
    fwd = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=tf.zeros([0]), variance=tf.zeros([0]),
                                      epsilon=0.001, data_format=data_format, is_training=True)
    mean, variance = fwd.reserve_space_1, fwd.reserve_space_2
    sum_dy, sum_dy_xmu, count = gobn.ops.gobn_batch_norm_grad_reduce(
        y_backprop=dy, x=x, mean=mean, data_format=data_format)
    assert count.dtype == tf.int64 and count.shape == []
    assert int(count) == int(np.prod(x.shape)) // scale.shape[0]
    dx = gobn.ops.gobn_batch_norm_grad_apply(
        y_backprop=dy, x=x, scale=scale, mean=mean, variance=variance, sum_dy=sum_dy, sum_dy_xmu=sum_dy_xmu,
        count=count, epsilon=0.001, data_format=data_format)
    assert dx.dtype == dtype and dx.shape == x.shape
    stock = tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=variance,
        reserve_space_3=fwd.reserve_space_3, epsilon=0.001, data_format=data_format, is_training=True)
    assert_close(dx, stock.x_backprop, dtype, "x_backprop")
    assert_close(sum_dy, stock.offset_backprop, tf.float32, "sum_dy")
    assert_close(sum_dy_xmu * tf.math.rsqrt(variance + 0.001), stock.scale_backprop, tf.float32, "sum_dy_xmu")
    want = gobn.ops.gobn_fused_batch_norm_grad_v3(
        y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=variance,
        reserve_space_3=fwd.reserve_space_3, epsilon=0.001, data_format=data_format, is_training=True)
    assert_close(dx, want.x_backprop, dtype, "x_backprop against gobn's V3")


def test_static_shapes():
    @tf.function(input_signature=[tf.TensorSpec([None, 3, 4, 5]), tf.TensorSpec([3])])
    def run(x, mean):
        sums = gobn.ops.gobn_batch_norm_grad_reduce(y_backprop=x, x=x, mean=mean, data_format="NCHW")
        dx = gobn.ops.gobn_batch_norm_grad_apply(y_backprop=x, x=x, scale=mean, mean=mean, variance=mean,
                                                 sum_dy=sums[0], sum_dy_xmu=sums[1], count=sums[2],
                                                 data_format="NCHW")
        return sums + (dx,)

    outputs = run.get_concrete_function().outputs
    assert [o.shape.as_list() for o in outputs] == [[3], [3], [], [None, 3, 4, 5]]
    assert [o.dtype for o in outputs] == [tf.float32, tf.float32, tf.int64, tf.float32]


def test_errors():
    x, dy, scale, _ = inputs("NHWC", seed=2)
    mean = variance = tf.ones([3])
    apply_args = dict(y_backprop=dy, x=x, scale=scale, mean=mean, variance=variance, sum_dy=mean,
                      sum_dy_xmu=mean, count=tf.constant(96, tf.int64))
    # Every argument valid: x has R = 8·3·4 = 96 elements per channel.
    gobn.ops.gobn_batch_norm_grad_apply(**apply_args)
    for change, message in [
        (dict(count=tf.constant(95, tf.int64)), "count must be at least"),
        (dict(count=tf.constant([96], tf.int64)), "count"),
        (dict(mean=tf.ones([4])), "mean"),
        (dict(sum_dy_xmu=tf.ones([2])), "sum_dy_xmu"),
        (dict(y_backprop=dy[:4]), "x and y_backprop"),
    ]:
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
            gobn.ops.gobn_batch_norm_grad_apply(**dict(apply_args, **change))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="mean"):
        gobn.ops.gobn_batch_norm_grad_reduce(y_backprop=dy, x=x, mean=tf.ones([4]), data_format="NHWC")
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="4 or 5"):
        gobn.ops.gobn_batch_norm_grad_reduce(y_backprop=dy[0], x=x[0], mean=mean)


def test_registered_gradients_finite_differences():
    """Second order through Reduce and Apply (gobn registers their gradients)."""
    x, dy, scale, _ = inputs("NCHW", seed=3, shape=(2, 2, 2, 3))
    rng = np.random.default_rng(3)
    mean, variance = tf.constant([0.5, 1.5]), tf.constant([2.0, 3.0])
    sums = [tf.constant(rng.normal(0, 4, 2), tf.float32) for _ in range(2)]
    w = tf.constant(rng.normal(0, 1, x.shape), tf.float32)
    count = tf.constant(24, tf.int64)

    def reduce(dy, x, mean):
        a, b, _ = gobn.ops.gobn_batch_norm_grad_reduce(y_backprop=dy, x=x, mean=mean, data_format="NCHW")
        return (tf.reduce_sum(a * [1.0, -2.0]) + tf.reduce_sum(b * [0.5, 3.0]))[None]

    def apply(dy, x, scale, mean, variance, sum_dy, sum_dy_xmu):
        dx = gobn.ops.gobn_batch_norm_grad_apply(
            y_backprop=dy, x=x, scale=scale, mean=mean, variance=variance, sum_dy=sum_dy, sum_dy_xmu=sum_dy_xmu,
            count=count, epsilon=0.01, data_format="NCHW")
        return tf.reduce_sum(dx * w)[None]

    for fn, args in ((reduce, [dy, x, mean]), (apply, [dy, x, scale, mean, variance] + sums)):
        theoretical, numerical = tf.test.compute_gradient(fn, args, delta=1e-2)
        for i, (a, b) in enumerate(zip(theoretical, numerical)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(b).max()),
                                       err_msg=f"{fn.__name__} input {i}")


# ---------------------------------------------------------------------------
# gobn.sync_batch_norm over two replicas


def split(strategy, value, sizes):
    bounds = np.cumsum([0] + list(sizes))
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: value[bounds[ctx.replica_id_in_sync_group]:bounds[ctx.replica_id_in_sync_group + 1]])


@pytest.mark.parametrize("data_format", list(FORMATS))
@pytest.mark.parametrize("sizes", [(4, 4), (3, 5)], ids=["even", "uneven"])
def test_sync_batch_norm_equals_batch_norm_of_the_whole_batch(strategy, data_format, sizes):
    x, dy, scale, offset = inputs(data_format, seed=4)

    # Single device: stock batch norm of the whole batch, loss Σ y·dy.
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        out = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=tf.zeros([0]),
                                          variance=tf.zeros([0]), epsilon=0.001, data_format=data_format,
                                          is_training=True)
        loss = tf.reduce_sum(out.y * dy)
    want = [out.y] + tape.gradient(loss, [x, scale, offset]) + [out.reserve_space_1, out.reserve_space_2]

    @tf.function
    def replica(x, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            out = gobn.sync_batch_norm(x, scale, offset, epsilon=0.001, data_format=data_format)
            loss = tf.reduce_sum(out.y * dy)
        return [out.y] + tape.gradient(loss, [x, scale, offset]) + [out.mean, out.biased_variance]

    per_replica = strategy.run(replica, args=(split(strategy, x, sizes), split(strategy, dy, sizes)))
    got = [strategy.experimental_local_results(t) for t in per_replica]
    # y and x's gradient are the replicas' slices of the whole; scale's and
    # offset's gradients sum over the replicas, as the strategy sums them.
    assert_close(np.concatenate(got[0]), want[0], tf.float32, "y")
    assert_close(np.concatenate(got[1]), want[1], tf.float32, "x gradient")
    assert_close(sum(got[2]), want[2], tf.float32, "scale gradient")
    assert_close(sum(got[3]), want[3], tf.float32, "offset gradient")
    for replica_id in range(2):
        assert_close(got[4][replica_id], want[4], tf.float32, "global mean")
        assert_close(got[5][replica_id], want[5], tf.float32, "global biased variance")


def test_sync_batch_norm_runs_on_gobn(strategy):
    x, dy, scale, offset = inputs("NHWC", seed=5)

    @tf.function
    def replica(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, _, _ = gobn.sync_batch_norm(x, scale, offset)
        return tape.gradient(y, x)

    graph = replica.get_concrete_function(x).graph
    types = {op.type for op in graph.get_operations()}
    assert {"Gobn>BatchNormGradReduce", "Gobn>BatchNormGradApply"} <= types
    assert not types & {"FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"}


def test_sync_batch_norm_needs_a_replica_context(strategy):
    x, _, scale, offset = inputs("NHWC", seed=6)
    with strategy.scope():  # cross-replica context: no replica to synchronize with
        with pytest.raises(ValueError, match="replica context"):
            gobn.sync_batch_norm(x, scale, offset)


# ---------------------------------------------------------------------------
# gobn.keras.SyncBatchNormalization


def small_cnn(batch_norm):
    import keras

    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(6, 3, use_bias=False),
        batch_norm(momentum=0.8),
        keras.layers.ReLU(),
        keras.layers.Conv2D(6, 3, strides=2),
        batch_norm(momentum=0.8),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4),
    ])


def fit(model, x, labels, epochs, batch_size):
    import keras

    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model.fit(x, labels, epochs=epochs, batch_size=batch_size, shuffle=False, verbose=0).history["loss"]


def test_sync_layer_trains_as_one_device_on_the_global_batch(strategy):
    """Two replicas of 8 with SyncBatchNormalization = one device with batches of 16."""
    import keras

    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 2.0, (64, 8, 8, 3)).astype("float32")
    labels = rng.integers(0, 4, 64)
    keras.utils.set_random_seed(7)
    reference = small_cnn(keras.layers.BatchNormalization)
    initial = reference.get_weights()
    want = fit(reference, x, labels, epochs=2, batch_size=16)
    with strategy.scope():
        model = small_cnn(gobn.keras.SyncBatchNormalization)
        model.set_weights(initial)
        got = fit(model, x, labels, epochs=2, batch_size=16)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for w_got, w_want, variable in zip(model.get_weights(), reference.get_weights(), reference.weights):
        np.testing.assert_allclose(w_got, w_want, rtol=1e-4, atol=1e-5, err_msg=variable.path)


def test_sync_layer_with_one_replica_is_batch_normalization():
    x, dy, _, _ = inputs("NCHW", seed=8)
    results = []
    for cls in (gobn.keras.BatchNormalization, gobn.keras.SyncBatchNormalization):
        layer = cls(axis=1)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * dy)
        results.append([y, tape.gradient(loss, x), layer.moving_mean, layer.moving_variance])
    assert gobn.keras.SyncBatchNormalization().get_config()["synchronized"] is True
    for a, b in zip(*results):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
