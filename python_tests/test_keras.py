"""gobn.keras.BatchNormalization against keras.layers.BatchNormalization:
the layer alone (outputs, gradients, moving statistics), a small CNN trained
from the same seed, training under tf.distribute.MirroredStrategy over two
logical CPUs (conftest.py). The README's example (readme_example) trains,
saves and reloads in test_deploy.py.
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import gobn
from support import REPO_ROOT

# (input shape, axis): the fused layouts and the reshaped ones.
LAYER_CASES = [
    ((6, 5, 4, 3), -1),   # NHWC
    ((6, 3, 5, 4), 1),    # NCHW
    ((4, 3, 4, 2, 3), -1),  # NDHWC
    ((4, 3, 2, 4, 3), 1),   # NCDHW
    ((16, 5), -1),        # Dense features: [R, 1, 1, C]
    ((6, 7, 3), -1),      # sequences, channels last
    ((6, 3, 7), 1),       # sequences, channels first: [N, C, 1, L]
    ((4, 3, 5, 6), 2),    # a middle axis: [N·3, 5, 1, 6]
]


def run_layer(layer, x, w, training):
    """y, the gradients of Σ y·w for x, gamma and beta, and the moving statistics after the call."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * w)
    sources = [x] + [v for v in (layer.gamma, layer.beta) if v is not None and v.trainable]
    return [y] + tape.gradient(loss, sources) + [layer.moving_mean.numpy(), layer.moving_variance.numpy()]


def compare_layers(shape, x_dtype=tf.float32, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(1.5, 3.0, shape), x_dtype)
    w = tf.constant(rng.normal(0.0, 1.0, shape), tf.float32)
    results = []
    for cls in (keras.layers.BatchNormalization, gobn.keras.BatchNormalization):
        layer = cls(**kwargs)
        layer.build(shape)
        if layer.gamma is not None:
            layer.gamma.assign(np.linspace(0.5, 2.0, layer.gamma.shape[0]).astype("float32"))
        results.append(run_layer(layer, x, w, True) + run_layer(layer, x, w, False))
    return results


def assert_all_close(got, want, rtol=1e-5, atol_scale=1e-5):
    for i, (g, s) in enumerate(zip(got, want)):
        g, s = np.asarray(g, np.float64), np.asarray(s, np.float64)
        assert g.shape == s.shape, i
        np.testing.assert_allclose(g, s, rtol=rtol, atol=atol_scale * max(1.0, np.abs(s).max()), err_msg=f"result {i}")


@pytest.mark.parametrize("shape,axis", LAYER_CASES, ids=[f"{len(s)}d-axis{a}" for s, a in LAYER_CASES])
def test_layer_matches_stock(shape, axis):
    stock, got = compare_layers(shape, axis=axis, momentum=0.9)
    assert_all_close(got, stock)


@pytest.mark.parametrize("kwargs", [dict(scale=False), dict(center=False), dict(scale=False, center=False),
                                    dict(epsilon=0.1, momentum=0.5), dict(trainable=False)], ids=str)
def test_layer_arguments(kwargs):
    stock, got = compare_layers((6, 4, 4, 3), seed=1, **kwargs)
    assert_all_close(got, stock)


def test_layer_mixed_precision():
    """float16 inputs: as stock, the statistics are computed in float32 and y is float16."""
    stock, got = compare_layers((6, 4, 4, 3), x_dtype=tf.float16, seed=2, dtype="mixed_float16")
    assert got[0].dtype == stock[0].dtype == tf.float16
    assert_all_close(got, stock, rtol=2e-3, atol_scale=2e-3)


def test_layer_falls_back_to_stock_for_a_mask():
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(0, 1, (4, 6, 3)), tf.float32)
    mask = tf.constant(rng.uniform(size=(4, 6)) > 0.3)
    outputs = [cls()(x, training=True, mask=mask) for cls in (keras.layers.BatchNormalization,
                                                              gobn.keras.BatchNormalization)]
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_layer_backward_runs_on_gobn():
    layer = gobn.keras.BatchNormalization()
    x = tf.random.normal([4, 3, 3, 2])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return tape.gradient(y, [x] + layer.trainable_weights)

    types = {op.type for op in step.get_concrete_function(x).graph.get_operations()}
    assert "Gobn>FusedBatchNormGradV3" in types
    assert not types & {"FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"}


def test_layer_supports_xla():
    """gobn's kernels run inside XLA (test_xla.py): the layer keeps Keras'
    jit_compile ("auto" turns it on where Keras would, on a GPU)."""
    from keras.src.trainers.trainer import model_supports_jit

    model = keras.Sequential([keras.Input((4, 4, 2)), gobn.keras.BatchNormalization()])
    assert gobn.xla_status()["handlers"]["host"] == len(gobn.OP_NAMES)
    assert model_supports_jit(model)


def test_layer_serializes():
    layer = gobn.keras.BatchNormalization(axis=1, momentum=0.7)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(again) is gobn.keras.BatchNormalization
    assert again.get_config() == layer.get_config()


# ---------------------------------------------------------------------------
# Training


def small_cnn(batch_norm):
    return keras.Sequential([
        keras.Input((10, 10, 3)),
        keras.layers.Conv2D(8, 3, use_bias=False),
        batch_norm(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(8, 3, strides=2),
        batch_norm(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4),
    ])


def synthetic_data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 1.5, (n, 10, 10, 3)).astype("float32")
    labels = (x[:, :5, :5, 0].mean(axis=(1, 2)) > 0.5).astype("int64") + 2 * (x[:, 5:, 5:, 1].mean(axis=(1, 2)) > 0.5)
    return x, labels


def train(model, x, labels, epochs=3, batch_size=16):
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model.fit(x, labels, epochs=epochs, batch_size=batch_size, shuffle=False, verbose=0).history["loss"]


def train_both(strategy=None):
    """Trains the CNN with the stock layer and with gobn's from the same seed."""
    x, labels = synthetic_data()
    models, losses = [], []
    for batch_norm in (keras.layers.BatchNormalization, gobn.keras.BatchNormalization):
        keras.utils.set_random_seed(42)
        if strategy is None:
            model = small_cnn(batch_norm)
            losses.append(train(model, x, labels))
        else:
            with strategy.scope():
                model = small_cnn(batch_norm)
                losses.append(train(model, x, labels))
        models.append(model)
    return models, losses, x


def test_cnn_trains_as_with_the_stock_layer():
    (stock, model), (want, got), x = train_both()
    assert got[-1] < got[0], f"the loss should fall: {got}"
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for w_got, w_want, variable in zip(model.get_weights(), stock.get_weights(), stock.weights):
        np.testing.assert_allclose(w_got, w_want, rtol=1e-3, atol=1e-4, err_msg=variable.path)
    np.testing.assert_allclose(model.predict(x, verbose=0), stock.predict(x, verbose=0), rtol=1e-3, atol=1e-4)


def test_cnn_trains_under_mirrored_strategy(mirrored_strategy):
    (stock, model), (want, got), _ = train_both(mirrored_strategy)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for w_got, w_want, variable in zip(model.get_weights(), stock.get_weights(), stock.weights):
        np.testing.assert_allclose(w_got, w_want, rtol=1e-3, atol=1e-4, err_msg=variable.path)


def readme_example():
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## Training with Keras", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README's 'Training with Keras' has no python example"
    return blocks[0]
