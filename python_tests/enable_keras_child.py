"""One process of test_enable_keras.py: Keras 3 models on stock code, through convert, and after gobn.enable().

    python enable_keras_child.py

gobn.enable() lasts for the process, so everything stock runs first. For
each model kind (Sequential, functional, subclassed) the child makes three
models with the same initial weights:

- "stock": trained before enable(), on Keras' own layer;
- "convert": gobn.keras.convert(model, in_place=True), trained before enable();
- "enable": trained after enable(), unconverted. The Sequential and the
  subclassed ones are made (and called) before enable(), the functional one
  after it.

The Sequential and functional models train with fit, the subclassed one with
a custom training loop in a tf.function. Then a Sequential model trains with
fit(jit_compile=True), through convert and after enable(); and a model whose
layers fall back to the stock code (a mask from an Embedding, renorm) trains
before and after enable(). Last, the README's "One line for an existing
model" block runs as written, for Keras 3 and for tf_keras.

It prints one JSON report: each run's losses, final weights and the calls of
gobn's batch-norm gradient it made (on the CPU and inside XLA), the enabled
models' layer classes and configs beside fresh stock layers'. The checks are
test_enable_keras.py's.
"""

import contextlib
import io
import json
import os
import re
import sys

import support  # noqa: F401  (first: the package on sys.path)

import keras
import numpy as np
import tensorflow as tf

import gobn

BATCH, STEPS = 8, 4
rng = np.random.default_rng(67)
X = rng.normal(0.5, 2.0, (BATCH * STEPS, 6, 6, 3)).astype("float32")
Y = rng.integers(0, 3, BATCH * STEPS)
TOKENS = rng.integers(0, 9, (BATCH * STEPS, 7))
TOKENS[:, 5:] = 0  # padding: masked out


def grad_calls():
    """Calls of gobn's batch-norm gradients so far (support.BATCH_NORM_GRAD_OPS): {"CPU": n, "XLA_CPU": n}."""
    return {device: support.batch_norm_grad_calls(device) for device in ("CPU", "XLA_CPU")}


def sequential():
    return keras.Sequential([
        keras.Input((6, 6, 3)),
        keras.layers.Conv2D(4, 3, use_bias=False),
        keras.layers.BatchNormalization(momentum=0.8),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(5),
        keras.layers.BatchNormalization(epsilon=0.01),  # features: the [R, 1, 1, C] view
        keras.layers.Dense(3),
    ])


def functional():
    inputs = keras.Input((6, 6, 3))
    h = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    a = keras.layers.BatchNormalization(center=False)(h)
    b = keras.layers.Permute((3, 1, 2))(h)  # channels first
    b = keras.layers.Permute((2, 3, 1))(keras.layers.BatchNormalization(axis=1, momentum=0.5)(b))
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.Add()([a, b]))
    return keras.Model(inputs, keras.layers.Dense(3)(h))


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3)
        self.norm = keras.layers.BatchNormalization(scale=False)
        self.head = [keras.layers.Dense(5), keras.layers.BatchNormalization(), keras.layers.Dense(3)]

    def call(self, x, training=False):
        h = keras.ops.mean(keras.ops.relu(self.norm(self.conv(x), training=training)), axis=(1, 2))
        for layer in self.head:
            h = layer(h, training=training) if isinstance(layer, keras.layers.BatchNormalization) else layer(h)
        return h


def falling_back():
    """Every batch norm here runs the stock code, under gobn's layer too: a mask, renorm."""
    return keras.Sequential([
        keras.Input((7,)),
        keras.layers.Embedding(9, 4, mask_zero=True),
        keras.layers.BatchNormalization(),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(5),
        keras.layers.BatchNormalization(renorm=True),
        keras.layers.Dense(3),
    ])


KINDS = {"sequential": sequential, "functional": functional, "subclassed": Subclassed,
         "falling_back": falling_back}
INITIAL = {}  # kind -> the weights every model of the kind starts from


def make(kind):
    """A built model of kind, with the kind's initial weights."""
    keras.utils.set_random_seed(7)
    model = KINDS[kind]()
    model(TOKENS[:2] if kind == "falling_back" else X[:2])  # builds it (a subclassed model's layers too)
    if kind not in INITIAL:
        INITIAL[kind] = model.get_weights()
    model.set_weights(INITIAL[kind])
    return model


def loss_fn():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def fit(model, jit_compile=False):
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss_fn(), jit_compile=jit_compile)
    x = TOKENS if any(isinstance(layer, keras.layers.Embedding) for layer in model.layers) else X
    return model.fit(x, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history["loss"]


def custom_loop(model):
    """Two epochs of a tf.function training step with a tape: the losses."""
    optimizer, loss = keras.optimizers.SGD(0.1, momentum=0.9), loss_fn()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        optimizer.apply(tape.gradient(value, model.trainable_variables), model.trainable_variables)
        return value

    return [float(step(X[i:i + BATCH], Y[i:i + BATCH])) for _ in range(2) for i in range(0, len(X), BATCH)]


def train(model, kind, jit_compile=False):
    """The run's losses, final weights and gobn's gradient calls."""
    before = grad_calls()
    losses = custom_loop(model) if kind == "subclassed" else fit(model, jit_compile)
    after = grad_calls()
    return {"losses": [float(v) for v in losses], "weights": [w.tolist() for w in model.get_weights()],
            "calls": {device: after[device] - before[device] for device in after}}


def batch_norms(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]


def saved_as(model):
    """How a .keras file names each batch norm's class: (module, class_name, registered_name)."""
    return sorted({(entry["module"], entry["class_name"], entry["registered_name"])
                   for entry in map(keras.saving.serialize_keras_object, batch_norms(model))})


def readme_block():
    """The README's "One line for an existing model" example."""
    with open(os.path.join(support.REPO_ROOT, "README.md"), encoding="utf-8") as f:
        section = f.read().split("## One line for an existing model", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_readme(block, name):
    """Runs block as a script; (gobn's gradient calls it made, all its calls, what it printed)."""
    before = gobn.kernel_calls()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, f"README.md ({name})", "exec"), {"__name__": "__main__"})  # noqa: S102
    after = gobn.kernel_calls()
    calls = sum(n - before.get(op, {}).get(device, 0) for op, devices in after.items() for device, n in devices.items()
                if "BatchNormGrad" in op)
    return {"calls": calls, "printed": printed.getvalue()}


def main():
    report = {"runs": {}}
    runs = report["runs"]
    before_enable = {kind: make(kind) for kind in ("sequential", "subclassed", "falling_back")}
    for kind in KINDS:
        runs[f"{kind} stock"] = train(make(kind), kind)
        if kind != "falling_back":
            runs[f"{kind} convert"] = train(gobn.keras.convert(make(kind), in_place=True), kind)
    runs["sequential convert jit"] = train(gobn.keras.convert(make("sequential"), in_place=True), "sequential",
                                           jit_compile=True)
    report["calls_before_enable"] = grad_calls()
    report["stock_saved_as"] = saved_as(make("sequential"))

    report["enable"] = gobn.enable()
    enabled = dict(before_enable, functional=make("functional"))
    for kind, model in enabled.items():
        runs[f"{kind} enable"] = train(model, kind)
    runs["sequential enable jit"] = train(make("sequential"), "sequential", jit_compile=True)
    report["classes"] = {kind: sorted({type(layer).__module__ + "." + type(layer).__name__
                                       for layer in batch_norms(model)}) for kind, model in enabled.items()}
    report["saved_as"] = {kind: saved_as(model) for kind, model in enabled.items()}
    report["batch_norms"] = {kind: len(batch_norms(model)) for kind, model in enabled.items()}
    report["xla"] = gobn.xla_status()["api_version"] is not None

    block = readme_block()
    report["readme"] = {"keras": run_readme(block, "Keras 3"),
                        "tf_keras": run_readme(block.replace("import keras ", "import tf_keras as keras ", 1),
                                               "tf_keras")}
    report["readme_block"] = block
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
