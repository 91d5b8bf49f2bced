"""test_deploy.py's training process with gobn: .keras files after `import gobn`, tf_keras after enable().

    python deploy_gobn_child.py FOLDER

FOLDER holds test_deploy.py's manifest.json and inputs. This fresh process
imports gobn alone (never gobn.keras), then

- loads each .keras file of gobn's layers and predicts;
- loads the stock .keras file of the converted model, converts it back with
  gobn.keras.convert and trains two steps on it;
- calls gobn.enable(), runs a training step of tf.compat.v1.nn.fused_batch_norm
  (a tf.Module's function) and saves it with tf.saved_model.save, trains a
  tf_keras model and saves it with tf_keras (a SavedModel folder and a
  .keras file), trains a Keras 3 model of stock layers, made before
  enable(), and saves it with model.export and model.save (.keras), and
  adds them to the manifest for deploy_stock_child.py.

It writes FOLDER/gobn_results.npz and prints one JSON report; the checks are
test_deploy.py's.
"""

import json
import os
import sys

import support  # first: the package on sys.path

import numpy as np
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port

import gobn

report = {"gobn_keras_after_import_gobn": "gobn.keras" in sys.modules, "layer_types": {},
          "onednn": bool(_pywrap_util_port.IsMklEnabled())}

import keras  # noqa: E402
import tf_keras  # noqa: E402

folder = sys.argv[1]
with open(os.path.join(folder, "manifest.json")) as f:
    manifest = json.load(f)
results = {}


def grad_calls(*ops):
    """Calls of gobn's kernels under the names ops, so far."""
    return sum(gobn.kernel_calls().get(op, {}).get("CPU", 0) for op in ops)


def bn_types(model):
    return sorted({type(layer).__module__ + "." + type(layer).__name__ for layer in model._flatten_layers()
                   if isinstance(layer, keras.layers.BatchNormalization)})


def inputs(name):
    return np.load(os.path.join(folder, f"{name}.npy"))


class Step(tf.Module):
    """A training step of stock's fused batch norm, its gradient computed inside its function."""

    def __init__(self):
        super().__init__()
        self.scale = tf.Variable([0.5, 1.0, 2.0])

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def step(self, x):
        with tf.GradientTape() as tape:
            y = tf.compat.v1.nn.fused_batch_norm(x, self.scale, tf.zeros([3]))[0]
        return {"scale": tape.gradient(y, self.scale, output_gradients=x * x)}


report["failures"] = {}
for entry in manifest:
    if entry["kind"] == "keras_gobn":
        try:
            model = keras.models.load_model(entry["path"])
        except Exception as e:  # noqa: BLE001  (reported for test_deploy.py to name)
            report["failures"][entry["name"]] = f"{type(e).__name__}: {e}"[-3000:]
            continue
        report["layer_types"][entry["name"]] = bn_types(model)
        results[f"{entry['name']}/keras_gobn"] = model.predict(inputs(entry["input"]), verbose=0)

# A stock file's model, converted back for more training on gobn.
model = gobn.keras.convert(keras.models.load_model(os.path.join(folder, "converted_stock.keras")))
report["reconverted_types"] = bn_types(model)
x = inputs("converted")
results["reconverted"] = model.predict(x, verbose=0)
model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = grad_calls(*support.BATCH_NORM_GRAD_OPS)
model.fit(np.concatenate([x, x]), np.arange(8) % 2, batch_size=4, epochs=1, verbose=0, shuffle=False)
report["reconverted_grad_calls"] = grad_calls(*support.BATCH_NORM_GRAD_OPS) - before

# A Keras 3 model of stock layers, made before enable() and trained after it.
keras.utils.set_random_seed(3)
keras3 = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                           keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])

# enable(): a training step of stock's op saved, and tf_keras. With oneDNN on, enable() gives
# the forward op a gradient of Gobn> ops; off, gobn's kernel runs under the stock op's name.
x = inputs("module_train")
stock_step = Step()
results["enable_step/expected"] = stock_step.step(x)["scale"].numpy()  # stock's, before enable()
gobn.enable()
ops = ("FusedBatchNormGradV3", "Gobn>FusedBatchNormGradV3")
step = Step()
before = grad_calls(*ops)
results["enable_step/gobn"] = step.step(x)["scale"].numpy()
report["enable_step_grad_calls"] = grad_calls(*ops) - before
report["enable_step_ops"] = sorted({op.type for op in step.step.get_concrete_function().graph.get_operations()
                                    if "BatchNormGrad" in op.type})
tf.saved_model.save(step, os.path.join(folder, "enable_step_saved_model"), signatures={"step": step.step})

tf_keras.utils.set_random_seed(0)
rng = np.random.default_rng(6)
x, y = rng.normal(size=(16, 6, 6, 3)).astype("float32"), rng.integers(0, 2, 16)
model = tf_keras.Sequential([tf_keras.layers.Conv2D(4, 3, input_shape=(6, 6, 3)),
                             tf_keras.layers.BatchNormalization(momentum=0.5),
                             tf_keras.layers.GlobalAveragePooling2D(), tf_keras.layers.Dense(2)])
model.compile(tf_keras.optimizers.SGD(0.1), tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = grad_calls(*ops)
model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
report["tf_keras_grad_calls"] = grad_calls(*ops) - before
np.save(os.path.join(folder, "tf_keras.npy"), x[:4])
results["tf_keras/expected"] = model.predict(x[:4], verbose=0)
saved = os.path.join(folder, "tf_keras_saved_model")
model.save(saved)
model.save(os.path.join(folder, "tf_keras.keras"))
keras3.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = grad_calls(*support.BATCH_NORM_GRAD_OPS)
keras3.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
report["keras3_grad_calls"] = grad_calls(*support.BATCH_NORM_GRAD_OPS) - before
report["keras3_types"] = bn_types(keras3)
results["keras3_enable/expected"] = keras3.predict(x[:4], verbose=0)
keras3.export(os.path.join(folder, "keras3_enable_export"), verbose=False)
keras3.save(os.path.join(folder, "keras3_enable.keras"))
manifest += [
    dict(name="keras3_enable", kind="saved_model", path=os.path.join(folder, "keras3_enable_export"),
         serve={"serving_default": "tf_keras"}, tflite=["serving_default"]),
    dict(name="keras3_enable", kind="keras", path=os.path.join(folder, "keras3_enable.keras"), input="tf_keras"),
    dict(name="enable_step", kind="saved_model", path=os.path.join(folder, "enable_step_saved_model"),
         serve={"step": "module_train"}, tflite=[]),
    dict(name="tf_keras", kind="saved_model", path=saved, serve={"serving_default": "tf_keras"},
         tflite=["serving_default"]),
    dict(name="tf_keras", kind="tf_keras", path=os.path.join(folder, "tf_keras.keras"), input="tf_keras"),
]
with open(os.path.join(folder, "manifest.json"), "w") as f:
    json.dump(manifest, f)

np.savez(os.path.join(folder, "gobn_results.npz"), **results)
print(json.dumps(report))
