"""test_deploy.py's deploy process: stock TensorFlow, Keras and tf_keras, never gobn.

    python -I deploy_stock_child.py FOLDER

Run isolated (-I: no PYTHONPATH, no user site, not even this script's
folder on sys.path), as a machine that has never heard of gobn. For each
entry of FOLDER/manifest.json it

- saved_model: loads the SavedModel (tf.saved_model.load), serves each
  signature, converts the TFLite ones (tf.lite.TFLiteConverter) and runs
  them in tf.lite.Interpreter, and for "gradients" differentiates the
  loaded functions with a tape;
- keras / tf_keras: loads the .keras file with Keras 3 or tf_keras and
  predicts;
- keras_gobn / fails: what needs gobn, whose loading must fail: records
  the error.

It writes FOLDER/stock_results.npz and prints one JSON report, with whether
gobn was importable or imported and the lines of /proc/self/maps naming
libgobn; the checks are test_deploy.py's.
"""

import importlib.util
import json
import os
import sys
import warnings

import numpy as np
import tensorflow as tf

def inputs(name):
    return np.load(os.path.join(folder, f"{name}.npy"))


def only_output(outputs):
    (value,) = outputs.values()
    return np.asarray(value)


def serve(entry):
    loaded = tf.saved_model.load(entry["path"])
    for signature, input_name in entry["serve"].items():
        fn = loaded.signatures[signature]
        (arg,) = fn.structured_input_signature[1]
        results[f"{entry['name']}/{signature}"] = only_output(fn(**{arg: tf.constant(inputs(input_name))}))
    for signature in entry["tflite"]:
        converter = tf.lite.TFLiteConverter.from_saved_model(entry["path"], signature_keys=[signature])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
            interpreter = tf.lite.Interpreter(model_content=converter.convert())
        runner = interpreter.get_signature_runner(signature)
        (arg,) = runner.get_input_details()
        results[f"{entry['name']}/tflite/{signature}"] = only_output(runner(**{arg: inputs(entry["serve"][signature])}))
    for fn_name in entry.get("gradients", ()):
        x, dy = tf.constant(inputs(f"{entry['name']}_{fn_name}")), tf.constant(inputs(f"{entry['name']}_{fn_name}_dy"))
        for key, value in tape_results(getattr(loaded, fn_name), loaded, x, dy).items():
            results[f"{entry['name']}/{fn_name}/{key}"] = value


def tape_results(fn, module, x, dy):
    """y = fn(x)["y"] and the gradients of <y, dy> with respect to x and the module's scale and offset, by name
    (test_deploy.py computes the saving process's with it too)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)["y"]
    grads = tape.gradient(y, [x, module.scale, module.offset], output_gradients=dy)
    return {key: value.numpy() for key, value in zip(("y", "x", "scale", "offset"), [y, *grads])}


def bn_types(model, base):
    return sorted({type(layer).__name__ for layer in model._flatten_layers() if isinstance(layer, base)})


def load_keras(entry):
    if entry["kind"] == "tf_keras":
        import tf_keras as keras
    else:
        import keras
    model = keras.models.load_model(entry["path"])
    report["layer_types"][entry["name"]] = bn_types(model, keras.layers.BatchNormalization)
    results[f"{entry['name']}/keras"] = model.predict(inputs(entry["input"]), verbose=0)


def must_fail(entry):
    try:
        if entry["kind"] == "keras_gobn":
            import keras

            keras.models.load_model(entry["path"])
        else:
            tf.saved_model.load(entry["path"])
    except Exception as e:  # noqa: BLE001  (whatever the loader raises is what a user reads)
        report["errors"][entry["name"]] = f"{type(e).__name__}: {e}"
    else:
        report["errors"][entry["name"]] = "loaded"


CHECKS = {"saved_model": serve, "keras": load_keras, "tf_keras": load_keras, "keras_gobn": must_fail,
          "fails": must_fail}

if __name__ == "__main__":
    folder = sys.argv[1]
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    report = {"gobn_importable": importlib.util.find_spec("gobn") is not None, "errors": {}, "failures": {},
              "layer_types": {},
              "entries": len(manifest), "checked": 0}
    results = {}
    for entry in manifest:
        try:
            CHECKS[entry["kind"]](entry)
        except Exception as e:  # noqa: BLE001  (reported for test_deploy.py to name)
            report["failures"][f"{entry['name']} {entry['kind']}"] = f"{type(e).__name__}: {e}"[-3000:]
        else:
            report["checked"] += 1

    np.savez(os.path.join(folder, "stock_results.npz"), **results)
    report["gobn_modules"] = sorted(name for name in sys.modules if name == "gobn" or name.startswith("gobn."))
    with open("/proc/self/maps") as f:
        report["libgobn_mapped"] = sorted({line.split()[-1] for line in f if "libgobn" in line})
    print(json.dumps(report))
