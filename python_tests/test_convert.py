"""gobn.keras.convert: existing Keras 3 models onto gobn's layers.

Sequential, functional (a branch, a nested Sequential, a synchronized layer)
and subclassed models (attributes, lists and dicts of layers, nested custom
layers): the converted model has gobn's layers only, the original's config,
weights and moving statistics, the same outputs in inference and training,
the same losses and weights over a few SGD steps, and its training step runs
gobn's gradients (Gobn>FusedBatchNormGradV3; FusedBatchNormGradEx for a batch
norm followed by a ReLU).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import gobn
from support import batch_norm_grad_calls

STOCK = keras.layers.BatchNormalization
# The settings each model's BatchNormalization layers take, in turn.
SETTINGS = [dict(momentum=0.8, epsilon=1e-2), dict(center=False), dict(scale=False), dict(momentum=0.5),
            dict(center=False, scale=False, epsilon=1e-4)]


def bn(i, **kwargs):
    return STOCK(**{**SETTINGS[i % len(SETTINGS)], **kwargs})


def sequential():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(6, 3, use_bias=False),
        bn(0),
        keras.layers.ReLU(),
        keras.layers.Conv2D(6, 3, strides=2),
        bn(1),
        keras.layers.Reshape((4, 6)),
        keras.layers.Permute((2, 1)),
        bn(2, axis=1),  # channels first, [N, C, L]
        keras.layers.Flatten(),
        keras.layers.Dense(5),
        bn(3),
        keras.layers.Dense(3),
    ])


def functional():
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(6, 3, padding="same")(inputs)
    h = keras.layers.ReLU()(bn(0)(h))
    a = bn(1)(keras.layers.Conv2D(6, 3, padding="same")(h))
    b = bn(2, synchronized=True)(keras.layers.Conv2D(6, 1)(h))
    h = keras.layers.Add()([a, b])
    block = keras.Sequential([keras.layers.Conv2D(4, 3, strides=2), bn(3), keras.layers.ReLU()])
    h = keras.layers.GlobalAveragePooling2D()(block(h))
    return keras.Model(inputs, keras.layers.Dense(3)(bn(4)(h)))


class Block(keras.layers.Layer):
    def __init__(self, filters, i, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)
        self.norms = {"main": bn(i)}

    def call(self, x, training=None):
        return keras.ops.relu(self.norms["main"](self.conv(x), training=training))


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.stem = keras.layers.Conv2D(6, 3)
        self.bn = bn(0)
        self.blocks = [Block(6, 1), Block(6, 2)]
        self.head = keras.Sequential([keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4), bn(3)])
        self.out = keras.layers.Dense(3)

    def call(self, x, training=None):
        h = keras.ops.relu(self.bn(self.stem(x), training=training))
        for block in self.blocks:
            h = block(h, training=training)
        return self.out(self.head(h, training=training))


def batch_norms(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, STOCK)]


def randomized(model, seed=0):
    """model, built, with random gamma, beta and moving statistics (so that keeping them shows)."""
    model(np.zeros((2, 8, 8, 3), np.float32))
    rng = np.random.default_rng(seed)
    for layer in batch_norms(model):
        for w in layer.weights:
            low = 0.5 if "variance" in w.path or "gamma" in w.path else -1.0
            w.assign(rng.uniform(low, 1.5, w.shape).astype("float32"))
    return model


def data(n=16, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(0.5, 2.0, (n, 8, 8, 3)).astype("float32"), rng.integers(0, 3, n)


def train_steps(model, x, labels, steps=4):
    """Losses of SGD steps on batches of 8 (a tf.function step), and its concrete graph's op types."""
    opt = keras.optimizers.SGD(0.05, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step(x[i % 2 * 8:][:8], labels[i % 2 * 8:][:8])) for i in range(steps)]
    types = {op.type for op in step.get_concrete_function(x[:8], labels[:8]).graph.get_operations()}
    return losses, types


def assert_weights_close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got.weights) == len(want.weights)
    for g, w in zip(got.weights, want.weights):
        assert g.shape == w.shape, (g.path, w.path)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol, err_msg=w.path)


def without_name(config):
    return {k: v for k, v in config.items() if k != "name"}


def check_converted(original, converted, n_batch_norms):
    stock_layers, gobn_layers = batch_norms(original), batch_norms(converted)
    assert len(stock_layers) == len(gobn_layers) == n_batch_norms
    for s, g in zip(stock_layers, gobn_layers):
        want = gobn.keras.SyncBatchNormalization if s.synchronized else gobn.keras.BatchNormalization
        assert type(g) is want, (g.name, type(g))
        assert without_name(g.get_config()) == without_name(s.get_config())
    x, labels = data()
    # Outputs: inference, then training mode (which also updates the moving statistics).
    np.testing.assert_allclose(converted(x, training=False), original(x, training=False), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(converted(x, training=True), original(x, training=True), rtol=1e-4, atol=1e-4)
    assert_weights_close(converted, original)
    want, stock_types = train_steps(original, x, labels)
    got, types = train_steps(converted, x, labels)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert_weights_close(converted, original, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(converted(x, training=False), original(x, training=False), rtol=1e-3, atol=1e-4)
    assert "Gobn>FusedBatchNormGradV3" in types
    assert "Gobn>FusedBatchNormGradV3" not in stock_types


@pytest.mark.parametrize("build,n", [(sequential, 4), (functional, 5)], ids=["sequential", "functional"])
def test_convert_cloneable(build, n):
    keras.utils.set_random_seed(0)
    original = randomized(build())
    converted = gobn.keras.convert(original)
    assert converted is not original and type(converted) is type(original)
    assert all(type(layer) is STOCK for layer in batch_norms(original)), "the original must stay stock"
    assert_weights_close(converted, original, rtol=0, atol=0)
    assert [g.get_config() for g in batch_norms(converted)] == [s.get_config() for s in batch_norms(original)]
    check_converted(original, converted, n)


def test_convert_subclassed_in_place():
    keras.utils.set_random_seed(0)
    original = randomized(Subclassed())
    twin = randomized(Subclassed())
    twin.set_weights(original.get_weights())
    weights = [id(w) for w in twin.weights]
    converted = gobn.keras.convert(twin, in_place=True)
    assert converted is twin
    assert [id(w) for w in converted.weights] == weights, "in place: the same variables"
    check_converted(original, converted, 4)


def test_convert_subclassed_needs_in_place():
    """Keras cannot copy a subclassed model: the default (a copy) refuses it, naming the way."""
    with pytest.raises(TypeError, match="in_place=True"):
        gobn.keras.convert(Subclassed())
    with pytest.raises(TypeError, match="in_place=True"):
        gobn.keras.convert(Subclassed(), in_place=False)


def test_fit_runs_gobn_kernels():
    """A compiled model converted in place keeps its optimizer; fit then runs gobn's kernel."""
    keras.utils.set_random_seed(0)
    model = sequential()
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, labels = data()
    model.fit(x, labels, batch_size=8, verbose=0)
    optimizer = model.optimizer
    assert gobn.keras.convert(model, in_place=True) is model
    before = batch_norm_grad_calls()
    model.fit(x, labels, batch_size=8, verbose=0)
    after = batch_norm_grad_calls()
    assert model.optimizer is optimizer
    assert after - before == 2 * 4, (before, after)  # 2 steps, 4 layers


def test_converted_model_serializes():
    keras.utils.set_random_seed(0)
    converted = gobn.keras.convert(functional())
    again = keras.models.model_from_json(converted.to_json())
    assert [type(layer) for layer in batch_norms(again)] == [type(layer) for layer in batch_norms(converted)]


def test_convert_refuses_other_subclasses():
    class Custom(STOCK):
        pass

    model = keras.Sequential([keras.Input((4,)), Custom(), STOCK()])
    with pytest.raises(ValueError, match="Custom"):
        gobn.keras.convert(model, in_place=True)
    assert all(type(layer) is not gobn.keras.BatchNormalization for layer in model.layers)


def test_convert_keeps_gobn_layers():
    model = keras.Sequential([keras.Input((4,)), gobn.keras.BatchNormalization(), STOCK()])
    converted = gobn.keras.convert(model)
    assert [type(layer) for layer in converted.layers] == [gobn.keras.BatchNormalization] * 2


def test_convert_refuses_tf_keras():
    tf_keras = pytest.importorskip("tf_keras")
    model = tf_keras.Sequential([tf_keras.layers.BatchNormalization(input_shape=(4,))])
    with pytest.raises(TypeError, match=r"gobn\.enable\(\)"):
        gobn.keras.convert(model)
    with pytest.raises(TypeError, match="Keras 3"):
        gobn.keras.convert(object())


def test_to_stock_copies_and_convert_gives_gobn_back():
    keras.utils.set_random_seed(0)
    original = randomized(functional())
    converted = gobn.keras.convert(original)
    stock = gobn.keras.to_stock(converted)
    assert stock is not converted
    assert all(type(layer) is STOCK and layer.supports_jit for layer in batch_norms(stock))
    assert [g.get_config() for g in batch_norms(stock)] == [s.get_config() for s in batch_norms(original)]
    assert any(layer.synchronized for layer in batch_norms(stock)), "SyncBatchNormalization stays synchronized"
    assert all(isinstance(layer, gobn.keras.BatchNormalization) for layer in batch_norms(converted)), \
        "to_stock copies by default"
    assert_weights_close(stock, converted, rtol=0, atol=0)
    x, _ = data()
    np.testing.assert_allclose(stock(x, training=False), converted(x, training=False), rtol=1e-5, atol=1e-5)
    back = gobn.keras.convert(stock)
    assert [type(layer) for layer in batch_norms(back)] == [type(layer) for layer in batch_norms(converted)]


def test_to_stock_in_place():
    keras.utils.set_random_seed(0)
    model = gobn.keras.convert(randomized(Subclassed()), in_place=True)
    weights = [id(w) for w in model.weights]
    assert gobn.keras.to_stock(model, in_place=True) is model
    assert [type(layer) for layer in batch_norms(model)] == [STOCK] * 4
    assert [id(w) for w in model.weights] == weights, "in place: the same variables"
    with pytest.raises(TypeError, match="in_place=True"):
        gobn.keras.to_stock(model)
    with pytest.raises(TypeError, match="Keras 3"):
        gobn.keras.to_stock(object())
