"""gobn.enable() and Keras 3: unmodified models train on gobn, with convert's results.

Keras 3's BatchNormalization runs no fused op, so enable() gives the stock
class gobn's layer's call (gobn.keras). enable() lasts for the process, so
enable_keras_child.py runs every case in one fresh child (oneDNN off):
stock first, then gobn.keras.convert, then enable(). Expected values are
stock Keras' (losses and weights within float32's training tolerance) and
convert's (the same code: equal); gobn.kernel_calls() says which kernels
ran. test_deploy.py saves a Keras 3 model trained after enable() and loads
its .keras file and its model.export SavedModel where gobn is not installed.
"""

import os

import numpy as np
import pytest

from support import run_child_report

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enable_keras_child.py")
STEPS = 8  # each training run: 2 epochs of 4 batches
TRAINED = ["sequential", "functional", "subclassed"]
STOCK_LAYER = ["keras.src.layers.normalization.batch_normalization.BatchNormalization"]


@pytest.fixture(scope="module")
def child():
    return run_child_report(CHILD, timeout=600, TF_ENABLE_ONEDNN_OPTS="0")


@pytest.mark.parametrize("kind", TRAINED)
def test_enabled_model_trains_on_gobn_as_convert_does(child, kind):
    """Each batch norm's backward pass ran on gobn's kernel at every step, and
    the losses and final weights are convert's, bit for bit."""
    runs = child["runs"]
    enabled, converted = runs[f"{kind} enable"], runs[f"{kind} convert"]
    assert enabled["calls"] == {"CPU": STEPS * child["batch_norms"][kind], "XLA_CPU": 0}, enabled["calls"]
    assert enabled["calls"] == converted["calls"]
    assert enabled["losses"] == converted["losses"]
    for got, want in zip(enabled["weights"], converted["weights"], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", TRAINED)
def test_enabled_model_trains_as_stock_keras(child, kind):
    runs = child["runs"]
    enabled, stock = runs[f"{kind} enable"], runs[f"{kind} stock"]
    assert stock["calls"] == {"CPU": 0, "XLA_CPU": 0}
    assert enabled["losses"][-1] < enabled["losses"][0], enabled["losses"]
    np.testing.assert_allclose(enabled["losses"], stock["losses"], rtol=1e-4)
    for got, want in zip(enabled["weights"], stock["weights"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_jit_compile_runs_gobns_xla_handler(child):
    """fit(jit_compile=True): the gradients are calls of gobn's XLA handler, as convert's."""
    if not child["xla"]:
        pytest.skip("this TensorFlow has no XLA FFI (before 2.17): enable() leaves XLA stock's")
    enabled, converted = child["runs"]["sequential enable jit"], child["runs"]["sequential convert jit"]
    assert enabled["calls"] == {"CPU": 0, "XLA_CPU": STEPS * child["batch_norms"]["sequential"]}
    assert enabled["losses"] == converted["losses"]
    np.testing.assert_allclose(enabled["losses"], child["runs"]["sequential stock"]["losses"], rtol=1e-4)


def test_masked_and_renorm_layers_fall_back_to_stock(child):
    """A mask and renorm keep the stock code, as under gobn's layer: no gobn call, stock's losses exactly."""
    enabled, stock = child["runs"]["falling_back enable"], child["runs"]["falling_back stock"]
    assert enabled["calls"] == {"CPU": 0, "XLA_CPU": 0}
    assert enabled["losses"] == stock["losses"]


def test_layers_stay_stock(child):
    """The layers keep their class, and a .keras file names stock's (test_deploy.py loads one without gobn)."""
    assert child["calls_before_enable"]["CPU"] > 0, "convert's runs before enable() ran gobn"
    for kind, classes in child["classes"].items():
        assert classes == STOCK_LAYER, (kind, classes)
        assert child["saved_as"][kind] == child["stock_saved_as"] == [["keras.layers", "BatchNormalization", None]]


@pytest.mark.parametrize("keras", ["keras", "tf_keras"])
def test_readme_one_line_block_runs_as_written(child, keras):
    """README's "One line for an existing model", as written and with tf_keras's import: gobn ran its gradients."""
    assert "gobn.enable()" in child["readme_block"] and "import keras " in child["readme_block"]
    run = child["readme"][keras]
    assert run["calls"] == 4, run  # 2 epochs of 2 batches, one batch norm
    assert "BatchNormGradV3" in run["printed"], run["printed"]


def test_other_keras_backends_are_left_alone():
    """Keras 3 on another backend than TensorFlow (JAX, PyTorch) runs no
    TensorFlow op, so enable() leaves its BatchNormalization alone. The
    backend is reported as JAX's in a fresh child (neither JAX nor PyTorch
    is installed here); the TensorFlow backend's class is replaced, as the
    other tests show."""
    import subprocess
    import sys

    from support import child_env

    code = ("import keras\n"
            "keras.backend.backend = lambda: 'jax'\n"
            "import gobn\n"
            "before = keras.layers.BatchNormalization.call\n"
            "gobn.enable()\n"
            "print(keras.layers.BatchNormalization.call is before)\n")
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "True", done.stdout
