"""Train with gobn, deploy without it: SavedModels, TF Serving signatures,
TFLite and .keras files.

This process, with gobn, trains a tiny model by each route and saves it the
usual way:

- the README's Keras example (``gobn.keras.BatchNormalization``):
  ``model.export``, ``model.save`` (.keras), and ``gobn.keras.to_stock`` then
  ``model.save``;
- a stock Keras 3 model after ``gobn.keras.convert``: the same, and
  ``tf.saved_model.save``;
- ``gobn.keras.SyncBatchNormalization`` (channels first) and
  ``BatchNormalization`` used directly: the same;
- ``gobn.fused_batch_norm`` in a ``tf.Module`` (inference in NCHW, training
  in NHWC, a training step that computes gobn's gradient inside its
  function), differentiated before the save: ``tf.saved_model.save`` with
  signatures; and a function that calls a ``Gobn>`` op itself, which needs
  gobn by design.

Then two fresh processes:

- deploy_gobn_child.py, with gobn on the path and oneDNN on: ``import gobn``
  alone loads the .keras files of gobn's layers; ``convert`` of a stock
  .keras file's model gives gobn's layers back, which train on gobn; a
  training step, a tf_keras model and a Keras 3 model of stock layers run
  after ``gobn.enable()`` and are saved.
- deploy_stock_child.py, under ``python -I`` with no gobn on sys.path: every
  SavedModel is loaded and its signatures served, converted to TFLite and
  run in ``tf.lite.Interpreter``, its functions differentiated; stock
  .keras files are loaded by Keras and tf_keras; what needs gobn fails with
  an error naming it. The child reports whether libgobn.so was ever mapped
  (/proc/self/maps).

Outputs are compared with this process's inference outputs and with the
stock layers' (``to_stock``) or stock ops' (float32 tolerance); the loaded
gradients with stock ``tf.compat.v1.nn.fused_batch_norm``'s. In this process,
the gradient tf.saved_model.save traces is checked in every layout.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import gobn
from deploy_stock_child import tape_results
from support import REPO_ROOT, assert_close, batch_norm_grad_calls, child_env
from test_keras import readme_example

HERE = os.path.dirname(os.path.abspath(__file__))
EPSILON = 1e-3
GRAD_OP = "Gobn>FusedBatchNormGradV3"


def gobn_grad_calls():
    return batch_norm_grad_calls()


def bn_types(model):
    return sorted({type(layer).__module__ + "." + type(layer).__name__ for layer in model._flatten_layers()
                   if isinstance(layer, keras.layers.BatchNormalization)})


class Deploy:
    """The artifacts folder, its manifest (what the stock child checks), inputs and expected outputs."""

    def __init__(self, folder):
        self.folder = folder
        self.manifest = []
        self.inputs = {}
        self.expected = {}  # name -> this process's inference output
        self.stock_expected = {}  # name -> the stock layer's output (to_stock), for Keras 3 models

    def path(self, name):
        return os.path.join(self.folder, name)

    def keras3(self, name, model, x, saved_model=False):
        """Saves a trained Keras 3 model with gobn's layers: model.export (and, with saved_model,
        tf.saved_model.save too), a .keras file, and a .keras file of its to_stock copy."""
        self.inputs[name] = x
        self.expected[name] = model.predict(x, verbose=0)
        stock = gobn.keras.to_stock(model)
        assert bn_types(stock) == ["keras.src.layers.normalization.batch_normalization.BatchNormalization"]
        assert bn_types(model) != bn_types(stock), "to_stock must copy, not change, the model"
        self.stock_expected[name] = stock.predict(x, verbose=0)
        model.export(self.path(f"{name}_export"), verbose=False)
        model.save(self.path(f"{name}.keras"))
        stock.save(self.path(f"{name}_stock.keras"))
        self.manifest += [
            dict(name=name, kind="saved_model", path=self.path(f"{name}_export"), serve={"serving_default": name},
                 tflite=["serving_default"]),
            dict(name=name, kind="keras", path=self.path(f"{name}_stock.keras"), input=name),
            dict(name=name, kind="keras_gobn", path=self.path(f"{name}.keras"), input=name),
        ]
        if saved_model:
            # Serving only: TFLite converts a Keras 3 model saved this way to wrong values, with stock's
            # layers too; model.export is Keras' way to TFLite.
            tf.saved_model.save(model, self.path(f"{name}_saved_model"))
            self.manifest.append(dict(name=f"{name}_saved_model", kind="saved_model",
                                      path=self.path(f"{name}_saved_model"), serve={"serving_default": name},
                                      tflite=[]))


def fit_one_epoch(model, x, y):
    """Compiles and fits model for one epoch (batches of 8); asserts gobn's gradient ran."""
    before = gobn_grad_calls()
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert gobn_grad_calls() > before, "training did not run gobn's gradient"


def converted_model(rng):
    inputs = keras.Input((6, 6, 3))
    h = keras.layers.Conv2D(4, 3, use_bias=False)(inputs)
    h = keras.layers.ReLU()(keras.layers.BatchNormalization(momentum=0.5)(h))
    h = keras.layers.BatchNormalization(synchronized=True, momentum=0.5)(keras.layers.Conv2D(4, 1)(h))
    h = keras.layers.Dense(5)(keras.layers.GlobalAveragePooling2D()(h))
    h = keras.layers.BatchNormalization(momentum=0.5)(h)  # features: the [R, 1, 1, C] view
    model = gobn.keras.convert(keras.Model(inputs, keras.layers.Dense(2)(h)))
    assert bn_types(model) == ["gobn.keras.BatchNormalization", "gobn.keras.SyncBatchNormalization"]
    x = rng.normal(0.5, 2.0, (16, 6, 6, 3)).astype("float32")
    fit_one_epoch(model, x, rng.integers(0, 2, 16))
    return model, x[:4]


def direct_model(rng):
    model = keras.Sequential([
        keras.Input((3, 4, 4)),
        gobn.keras.SyncBatchNormalization(axis=1, momentum=0.5),  # channels first: NCHW
        keras.layers.Flatten(),
        keras.layers.Dense(5),
        gobn.keras.BatchNormalization(momentum=0.5),
        keras.layers.Dense(2),
    ])
    x = rng.normal(-1.0, 3.0, (16, 3, 4, 4)).astype("float32")
    fit_one_epoch(model, x, rng.integers(0, 2, 16))
    return model, x[:4]


class Norm(tf.Module):
    """gobn.fused_batch_norm in a tf.Module: inference in NCHW, training in NHWC, and a
    training step's gradient computed inside its function."""

    def __init__(self, rng):
        super().__init__()
        self.scale = tf.Variable(rng.uniform(0.5, 1.5, 3).astype("float32"))
        self.offset = tf.Variable(rng.uniform(-1.0, 1.0, 3).astype("float32"))
        self.mean = tf.Variable(rng.uniform(-1.0, 1.0, 3).astype("float32"))
        self.variance = tf.Variable(rng.uniform(0.5, 2.0, 3).astype("float32"))
        self.batch_norm = gobn.fused_batch_norm

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 4, 5], tf.float32)])
    def infer(self, x):
        return {"y": self.batch_norm(x, self.scale, self.offset, self.mean, self.variance, epsilon=EPSILON,
                                     data_format="NCHW", is_training=False)[0]}

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def train(self, x):
        return {"y": self.batch_norm(x, self.scale, self.offset, epsilon=EPSILON)[0]}

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def step(self, x):
        with tf.GradientTape() as tape:
            y = self.batch_norm(x, self.scale, self.offset, epsilon=EPSILON)[0]
        return {"scale": tape.gradient(y, self.scale, output_gradients=x)}


class Raw(tf.Module):
    """A function that calls a Gobn> op itself: its SavedModel needs gobn."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def grad(self, x):
        return gobn.ops.gobn_fused_batch_norm_grad_v3(
            y_backprop=x, x=x, scale=tf.ones([3]), reserve_space_1=tf.zeros([3]), reserve_space_2=tf.ones([3]),
            reserve_space_3=tf.zeros([0]), is_training=False)[0]


def module_results(module, inputs):
    """The module's outputs for inputs, and the gradients of <y, dy> with respect to x, scale and offset."""
    out = {"module/step": module.step(tf.constant(inputs["module_train"]))["scale"].numpy()}
    for fn_name in ("infer", "train"):
        x, dy = (tf.constant(inputs[f"module_{fn_name}{k}"]) for k in ("", "_dy"))
        for key, value in tape_results(getattr(module, fn_name), module, x, dy).items():
            out[f"module/{fn_name}/{key}"] = value
    return out


def save_modules(deploy, rng):
    module = Norm(np.random.default_rng(540))
    inputs = {"module_infer": rng.normal(0.0, 2.0, (2, 3, 4, 5)), "module_train": rng.normal(1.0, 2.0, (2, 4, 5, 3))}
    inputs.update({f"{k}_dy": rng.normal(size=v.shape) for k, v in list(inputs.items())})
    inputs = {k: v.astype("float32") for k, v in inputs.items()}
    deploy.inputs.update(inputs)
    # The training process's results, on gobn: the functions traced and differentiated before the save.
    before = gobn_grad_calls()
    deploy.expected.update(module_results(module, inputs))
    assert gobn_grad_calls() == before + 3
    step_ops = {op.type for op in module.step.get_concrete_function().graph.get_operations()}
    assert GRAD_OP in step_ops, "the training process's step runs gobn's gradient"
    # Stock's: the same module on tf.compat.v1.nn.fused_batch_norm.
    stock = Norm(np.random.default_rng(540))
    stock.batch_norm = tf.compat.v1.nn.fused_batch_norm
    deploy.stock_expected.update(module_results(stock, inputs))
    saved = deploy.path("module_saved_model")
    tf.saved_model.save(module, saved, signatures={"infer": module.infer, "train": module.train, "step": module.step})
    deploy.manifest.append(dict(name="module", kind="saved_model", path=saved, tflite=["infer"],
                                serve={"infer": "module_infer", "train": "module_train", "step": "module_train"},
                                gradients=["infer", "train"]))
    raw = Raw()
    saved = deploy.path("raw_saved_model")
    tf.saved_model.save(raw, saved, signatures={"grad": raw.grad})
    deploy.manifest.append(dict(name="raw", kind="fails", path=saved))


def run(script, folder, env, flags=()):
    proc = subprocess.run([sys.executable, *flags, os.path.join(HERE, script), folder], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stock_env():
    """A user's environment without gobn: no PYTHONPATH (python -I ignores it anyway), no GOBN_LIBRARY."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GOBN"))}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("deploy"))
    deploy = Deploy(folder)
    rng = np.random.default_rng(54)
    keras.utils.set_random_seed(54)
    namespace = {}
    before = gobn_grad_calls()
    exec(compile(readme_example(), "README.md (Training with Keras)", "exec"), namespace)  # noqa: S102
    assert gobn_grad_calls() > before, "the README's example did not run gobn's gradient"
    losses = namespace["history"].history["loss"]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    deploy.keras3("readme", namespace["model"], namespace["x"][:8])
    deploy.keras3("converted", *converted_model(rng), saved_model=True)
    deploy.keras3("direct", *direct_model(rng))
    save_modules(deploy, rng)
    for name, x in deploy.inputs.items():
        np.save(os.path.join(folder, f"{name}.npy"), x)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(deploy.manifest, f)

    gobn_report = run("deploy_gobn_child.py", folder, child_env(TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2"))
    stock_report = run("deploy_stock_child.py", folder, stock_env(), flags=["-I"])
    with np.load(os.path.join(folder, "gobn_results.npz")) as f:
        gobn_results = dict(f)
    with np.load(os.path.join(folder, "stock_results.npz")) as f:
        stock_results = dict(f)
    return deploy, gobn_report, gobn_results, stock_report, stock_results


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW", "NDHWC", "NCDHW"])
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_gradient_traced_for_a_saved_model_is_stocks(data_format, is_training):
    """gobn.fused_batch_norm's gradient as tf.saved_model.save traces it (in its save context):
    stock's op, with stock's values, in every layout (stock's CPU kernel rejects channels-first
    inference: the gradient goes through channels-last there)."""
    from tensorflow.python.saved_model import save_context

    rng = np.random.default_rng(5)
    shape = (2, 3, 4, 5) if len(data_format) == 4 else (2, 3, 2, 3, 4)
    x, dy = (tf.constant(rng.normal(0.5, 2.0, shape), tf.float32) for _ in range(2))
    channels = shape[1] if data_format.startswith("NC") else shape[-1]
    scale, offset, mean = (tf.constant(rng.uniform(-1.0, 1.0, channels), tf.float32) for _ in range(3))
    variance = tf.constant(rng.uniform(0.5, 2.0, channels), tf.float32)
    statistics = {} if is_training else dict(mean=mean, variance=variance)

    def gradients(batch_norm):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y = batch_norm(x, scale, offset, epsilon=EPSILON, data_format=data_format, is_training=is_training,
                           **statistics)[0]
        return tape.gradient(y, [x, scale, offset], output_gradients=dy)

    traced = tf.function(lambda: gradients(gobn.fused_batch_norm))
    with save_context.save_context(tf.saved_model.SaveOptions()):
        concrete = traced.get_concrete_function()
    types = {op.type for op in concrete.graph.get_operations()}
    assert "FusedBatchNormGradV3" in types and GRAD_OP not in types, types
    for name, got, want in zip(("x", "scale", "offset"), concrete(), gradients(tf.compat.v1.nn.fused_batch_norm)):
        assert_close(got, want, tf.float32, name)


def assert_loaded(report, *names):
    """No check of the named artifacts failed in that child (else its error is the message)."""
    failed = {k: v for k, v in report["failures"].items() if k.split()[0] in names}
    assert not failed, failed


def check_served(deployed, name):
    """name's SavedModel served and run in TFLite, and its stock .keras file loaded, without gobn."""
    deploy, _, _, report, results = deployed
    assert_loaded(report, name)
    for how in ("serving_default", "tflite/serving_default", "keras"):
        got = results[f"{name}/{how}"]
        assert_close(got, deploy.expected[name], tf.float32, f"{name} {how} against the training process")
        assert_close(got, deploy.stock_expected[name], tf.float32, f"{name} {how} against the stock layers")
    assert report["layer_types"][name] == ["BatchNormalization"], report["layer_types"][name]


def test_deploy_process_never_saw_gobn(deployed):
    report = deployed[3]
    assert report["gobn_importable"] is False, "gobn must not be importable in the deploy process"
    assert report["gobn_modules"] == [], report["gobn_modules"]
    assert report["libgobn_mapped"] == [], report["libgobn_mapped"]
    assert report["entries"] == 17, "every route's artifacts reached the deploy process"


def test_readme_example_trains_and_deploys_both_ways(deployed):
    check_served(deployed, "readme")
    deploy, report, results, _, _ = deployed
    assert_loaded(report, "readme")
    assert report["layer_types"]["readme"] == ["gobn.keras.BatchNormalization"]
    assert_close(results["readme/keras_gobn"], deploy.expected["readme"], tf.float32, "readme.keras, gobn")


def test_keras3_after_convert_deploys(deployed):
    check_served(deployed, "converted")
    deploy, _, _, report, results = deployed
    assert_loaded(report, "converted_saved_model")
    assert_close(results["converted_saved_model/serving_default"], deploy.expected["converted"], tf.float32,
                 "converted, tf.saved_model.save")


def test_gobn_layers_used_directly_deploy(deployed):
    check_served(deployed, "direct")


def test_fused_batch_norm_module_serves_and_differentiates(deployed):
    """Signatures, TFLite, and the loaded functions' gradients: stock's, equal to gobn's."""
    deploy, _, _, report, results = deployed
    assert_loaded(report, "module")
    for fn_name in ("infer", "train"):
        for key in ("y", "x", "scale", "offset"):
            name = f"module/{fn_name}/{key}"
            assert_close(results[name], deploy.stock_expected[name], tf.float32, f"{name} against stock")
            assert_close(results[name], deploy.expected[name], tf.float32, f"{name} against the training process")
        assert_close(results[f"module/{fn_name}"], deploy.stock_expected[f"module/{fn_name}/y"], tf.float32,
                     f"module {fn_name} signature")
    assert_close(results["module/tflite/infer"], deploy.stock_expected["module/infer/y"], tf.float32, "TFLite")
    # The step's function held Gobn> ops in the training process; saved, it holds stock's.
    assert_close(results["module/step"], deploy.stock_expected["module/step"], tf.float32, "step against stock")
    assert_close(results["module/step"], deploy.expected["module/step"], tf.float32, "step against gobn")


def test_keras_files_load_after_import_gobn_alone(deployed):
    deploy, report, results, _, _ = deployed
    assert report["gobn_keras_after_import_gobn"] is True, report
    assert_loaded(report, "readme", "converted", "direct")
    for name in ("readme", "converted", "direct"):
        assert_close(results[f"{name}/keras_gobn"], deploy.expected[name], tf.float32, f"{name}.keras with gobn")
    both = ["gobn.keras.BatchNormalization", "gobn.keras.SyncBatchNormalization"]
    assert report["layer_types"]["converted"] == report["layer_types"]["direct"] == both, report["layer_types"]


def test_convert_of_a_stock_file_trains_on_gobn(deployed):
    deploy, report, results, _, _ = deployed
    assert report["reconverted_types"] == ["gobn.keras.BatchNormalization", "gobn.keras.SyncBatchNormalization"]
    assert_close(results["reconverted"], deploy.expected["converted"], tf.float32, "converted back")
    assert report["reconverted_grad_calls"] == 2 * 3, "2 steps of 3 layers on gobn's gradient"


def test_tf_keras_after_enable_deploys(deployed):
    _, report, results, stock_report, stock_results = deployed
    assert_loaded(stock_report, "tf_keras", "enable_step")
    assert report["onednn"] is True, "the training process runs oneDNN, enable()'s harder case"
    assert report["tf_keras_grad_calls"] == 2, report
    for how in ("serving_default", "tflite/serving_default", "keras"):
        assert_close(stock_results[f"tf_keras/{how}"], results["tf_keras/expected"], tf.float32, f"tf_keras {how}")
    # A training step traced after enable() runs Gobn> ops; saved, it holds stock's.
    assert report["enable_step_ops"] == [GRAD_OP] and report["enable_step_grad_calls"] == 1, report
    assert_close(results["enable_step/gobn"], results["enable_step/expected"], tf.float32, "step on gobn")
    assert_close(stock_results["enable_step/step"], results["enable_step/expected"], tf.float32, "step served")


def test_keras3_after_enable_deploys(deployed):
    """A Keras 3 model of stock layers trained after enable() (oneDNN on), on gobn: its .keras file and
    model.export SavedModel load, serve and convert to TFLite where gobn is not installed."""
    _, report, results, stock_report, stock_results = deployed
    assert_loaded(stock_report, "keras3_enable")
    assert report["keras3_grad_calls"] == 2, "2 steps of one layer on gobn's gradient"
    assert report["keras3_types"] == ["keras.src.layers.normalization.batch_normalization.BatchNormalization"]
    assert stock_report["layer_types"]["keras3_enable"] == ["BatchNormalization"]
    for how in ("serving_default", "tflite/serving_default", "keras"):
        assert_close(stock_results[f"keras3_enable/{how}"], results["keras3_enable/expected"], tf.float32,
                     f"keras3_enable {how}")


def test_errors_without_gobn_name_the_fix(deployed):
    errors = deployed[3]["errors"]
    for name in ("readme", "converted", "direct"):
        # Keras: "Could not locate class 'BatchNormalization'. ... make sure they are all imported ...
        # Full object config: {'module': 'gobn.keras', ..., 'registered_name': 'gobn>BatchNormalization'}"
        assert "gobn.keras" in errors[name] and "imported" in errors[name], errors[name]
    # The README's Deploy section names that symptom as a user reads it, and its two fixes.
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        deploy = " ".join(f.read().split("\n## Deploy\n", 1)[1].split("\n## ", 1)[0].split())
    symptom = "could not be deserialized properly"
    assert all(errors[name].startswith("TypeError: ") and symptom in errors[name]
               for name in ("readme", "converted", "direct")), errors
    assert f"TypeError: <class '...Sequential'> {symptom}" in deploy
    assert "'registered_name': 'gobn>BatchNormalization'" in errors["readme"]
    assert "`import gobn`" in deploy and "`gobn.keras.to_stock(model)`" in deploy
    # A function that calls a Gobn> op itself: TensorFlow names the op.
    assert f"Op type not registered '{GRAD_OP}'" in errors["raw"], errors["raw"]
