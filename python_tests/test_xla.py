"""gobn inside XLA-compiled functions (jit_compile), on the CPU.

Every route to gobn's kernels, compiled by XLA: the ops (gobn.ops, each in
each of its modes), the gradients of gobn.fused_batch_norm (fused with a
ReLU's too), gobn.sync_batch_norm and the Keras layers, a Keras 3 model's
fit(jit_compile=True), a tf_keras model's after gobn.enable() with oneDNN on
and off (fused with its ReLU's), second-order gradients, and bad input.
Expected values come from stock TensorFlow compiled by XLA the same way, or
from the float64 references of gobn._testing; each test requires that gobn's
XLA handlers ran (gobn.kernel_calls()'s XLA_CPU). Where TensorFlow has no XLA
FFI (before 2.17), the last test checks that gobn says so once and builds what
it built before.

Like test_smoke.py, the file stands alone: make compat runs it in a fresh
environment of each supported release with the wheel installed (pytest
--noconftest). Shapes are small, and each test compiles few functions (each
compilation costs about a second here).
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorflow as tf

import gobn
from gobn import _testing
from gobn._opdefs_gen import BY_NAME

EPSILON = 0.001

needs_xla = pytest.mark.skipif(not gobn._xla.available(), reason="gobn's kernels cannot run inside XLA here: "
                               + (gobn.xla_status()["reason"] or "?"))


assert_close = _testing.assert_close


def xla_calls():
    """gobn's XLA handler calls so far, by op."""
    return {op: devices.get("XLA_CPU", 0) for op, devices in gobn.kernel_calls().items()}


def calls_since(before):
    now = xla_calls()
    return {op: n - before.get(op, 0) for op, n in now.items() if n != before.get(op, 0)}


def batch_signature(*tensors, known, unranked=()):
    """tf.function's input_signature: each tensor's shape, with the batch
    unknown unless known, and no shape at all for the indices in unranked."""
    return [tf.TensorSpec(None if i in unranked else t.shape if known or t.shape.rank < 2 else [None] + t.shape[1:],
                          t.dtype) for i, t in enumerate(tensors)]


# ---------------------------------------------------------------------------
# The ops


def op_table():
    """The rows of the op table (opdef/testdata/ops.json, support.op_table's
    file, read here as this file stands alone); asserts they name every op."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "opdef", "testdata", "ops.json")
    with open(path) as f:
        rows = json.load(f)["ops"]
    assert [row["name"] for row in rows] == list(gobn.OP_NAMES), f"{path} must list every op gobn registers"
    return rows


def every_op_samples():
    """Every op of the op table in each of its modes, float32 at one small
    shape (C = 5), the i-th mode in the op's i-th 4-D data format (fused
    ones: training NHWC, inference NCHW): {case id: (op, gobn._testing.sample)}."""
    samples = {}
    for row in op_table():
        op = BY_NAME[row["name"]]
        formats = [f for f in op.data_formats if len(f) == 4]
        for i, mode in enumerate(row["modes"]):
            case = _testing.Case(op, tf.float32, formats[i % len(formats)], mode, "small", (3, 4, 2, 5))
            samples[case.id] = op, _testing.sample(case, seed=len(samples))
    return samples


def unknown_shape(t):
    """t's TensorSpec with the batch unknown, and a 1-D tensor's rank too
    (gobn checks it when XLA compiles)."""
    return tf.TensorSpec(None if t.shape.rank == 1 else [None] + t.shape[1:] if t.shape.rank else [], t.dtype)


@needs_xla
@pytest.mark.parametrize("known", [True, False], ids=["known_batch", "unknown_batch"])
def test_every_op_in_jit_compile(known):
    """Every op in each of its modes (every_op_samples), in one compiled
    function: each expected output within its tolerance of the float64
    reference, and each op's XLA handler called once per mode."""
    samples = every_op_samples()
    inputs = {key: made.inputs for key, (_, made) in samples.items()}
    signature = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype) if known else unknown_shape(t), inputs)

    def every_op(inputs):
        return {key: _testing.outputs_by_name(op, getattr(gobn.ops, op.wrapper)(**inputs[key], **made.attrs),
                                              made.expected) for key, (op, made) in samples.items()}

    fn = tf.function(every_op, jit_compile=True, input_signature=[signature])
    before = xla_calls()
    got = fn(inputs)
    for key, (_, made) in samples.items():
        for name, (want, dtype) in made.expected.items():
            assert_close(got[key][name], want, dtype, f"{key} {name}")
    assert calls_since(before) == {row["name"]: len(row["modes"]) for row in op_table()}
    graph = fn.get_concrete_function().graph
    assert not [op.type for op in graph.get_operations() if op.type.startswith("Gobn>")], "XLA cannot compile those"


@needs_xla
def test_bad_input_in_jit_compile_is_an_error_and_the_process_goes_on():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(2, 3, 3, 4)), tf.float32)

    @tf.function(jit_compile=True)
    def grad(dy, x, scale):
        return gobn.ops.gobn_fused_batch_norm_grad_v3(dy, x, scale, tf.zeros([4]), tf.ones([4]), tf.zeros([0]),
                                                      epsilon=EPSILON)[0]

    # XLA of API 0.0 (TensorFlow 2.17) reports a handler's error as Internal
    # ("CustomCall failed: " and the handler's message).
    error = tf.errors.InternalError if gobn.xla_status()["api_version"] == "0.0" else tf.errors.InvalidArgumentError
    before = xla_calls()
    with pytest.raises(error, match="scale must have the same number of elements as the channels of x, got 3 and 4"):
        grad(x, x, tf.ones([3]))
    with pytest.raises(error, match="x and y_backprop must have same shape"):
        grad(x, tf.ones([2, 3, 3, 5]), tf.ones([4]))
    good = grad(x, x, tf.ones([4]))
    want = _testing.fused_grad_reference(x, x, tf.ones([4]), np.zeros(4), np.ones(4), EPSILON, True, "NHWC")[0]
    assert_close(good, want, tf.float32, "the call after the errors")
    assert calls_since(before) == {"Gobn>FusedBatchNormGradV3": 3}


# ---------------------------------------------------------------------------
# Gradients: fused_batch_norm, sync_batch_norm, the Keras layers


def loss_gradients(fn, x, w, scale, offset):
    """The gradients of sum(fn(x, scale, offset)[0] * w) with respect to x, scale and offset."""
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        loss = tf.reduce_sum(fn(x, scale, offset)[0] * w)
    return tape.gradient(loss, [x, scale, offset])


def gradient_inputs(seed=2):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(1.0, 2.0, (4, 3, 5, 6)), tf.float32)
    w = tf.constant(rng.normal(size=(4, 3, 5, 6)), tf.float32)
    return x, w, tf.constant(rng.uniform(0.5, 1.5, 6), tf.float32), tf.constant(rng.normal(size=6), tf.float32)


@needs_xla
def test_fused_and_sync_batch_norm_gradients_in_jit_compile():
    """Stock's fused batch norm compiled by XLA against gobn's fused_batch_norm
    and sync_batch_norm (one replica: plain batch norm), known and unknown
    batch; and the gradient of a jit_compile function taken by a tape outside
    it, which traces gobn's gradient outside XLA's context for XLA to compile."""
    x, w, scale, offset = gradient_inputs()

    def gradients(fn):
        return lambda x, w, scale, offset: loss_gradients(fn, x, w, scale, offset)

    stock = tf.function(gradients(tf.compat.v1.nn.fused_batch_norm), jit_compile=True)(x, w, scale, offset)
    before = xla_calls()
    runs = {
        "fused_batch_norm": tf.function(gradients(gobn.fused_batch_norm), jit_compile=True)(x, w, scale, offset),
        "fused_batch_norm, unknown batch": tf.function(
            gradients(gobn.fused_batch_norm), jit_compile=True,
            input_signature=batch_signature(x, w, scale, offset, known=False))(x, w, scale, offset),
        "sync_batch_norm": tf.function(gradients(lambda x, s, o: gobn.sync_batch_norm(x, s, o, epsilon=EPSILON)),
                                       jit_compile=True)(x, w, scale, offset),
        "tape outside jit_compile": tf.function(gradients(tf.function(gobn.fused_batch_norm, jit_compile=True)))(
            x, w, scale, offset),
    }
    for run, got in runs.items():
        for what, g, s in zip(("x", "scale", "offset"), got, stock):
            assert_close(g, s, tf.float32, f"{run}: {what}")
    assert calls_since(before) == {"Gobn>FusedBatchNormGradV3": 3, "Gobn>BatchNormGradReduce": 1,
                                   "Gobn>BatchNormGradApply": 1}


@needs_xla
def test_second_order_gradients_in_jit_compile():
    """A gradient penalty: the gradient of gobn's gradient, against stock's, both compiled by XLA."""
    x, w, scale, offset = gradient_inputs(3)

    def penalty(fn):
        @tf.function(jit_compile=True)
        def f(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                dx = loss_gradients(lambda *a: fn(*a, epsilon=EPSILON), x, w, scale, offset)[0]
                norm = tf.reduce_sum(dx * dx)
            return tape.gradient(norm, x)
        return f(x)

    before = xla_calls()
    got = penalty(gobn.fused_batch_norm)
    assert calls_since(before) == {"Gobn>FusedBatchNormGradV3": 1}
    assert_close(got, penalty(tf.compat.v1.nn.fused_batch_norm), tf.float32, "d|dx|^2/dx")


@needs_xla
def test_fused_activation_gradients_in_jit_compile():
    """A batch norm followed by a ReLU or ReLU6 (gobn._fusion): its
    gradient and the activation's are one call of FusedBatchNormGradEx's
    handler, known and unknown batch, equal to stock's compiled by XLA."""
    x, w, scale, offset = gradient_inputs(5)

    def gradients(fn, activation):
        return lambda x, w, scale, offset: loss_gradients(lambda *a: [activation(fn(*a)[0])], x, w, scale, offset)

    before = xla_calls()
    for activation in (tf.nn.relu, tf.nn.relu6):
        stock = tf.function(gradients(tf.compat.v1.nn.fused_batch_norm, activation), jit_compile=True)(
            x, w, scale, offset)
        for known in (True, False):
            got = tf.function(gradients(gobn.fused_batch_norm, activation), jit_compile=True,
                              input_signature=batch_signature(x, w, scale, offset, known=known))(x, w, scale, offset)
            for what, g, s in zip(("x", "scale", "offset"), got, stock):
                assert_close(g, s, tf.float32, f"{activation.__name__}, known batch {known}: {what}")
    assert calls_since(before) == {"Gobn>FusedBatchNormGradEx": 4}


@needs_xla
def test_keras_layer_gradients_in_jit_compile():
    """gobn's Keras 3 layer against the stock layer, each in a jit_compile
    function: training (channels last) and inference (channels first), the
    outputs, the gradients of x, gamma and beta, and the moving variance."""
    import keras

    x, w, _, _ = gradient_inputs(4)
    results = {}
    for kind, layer_type in (("stock", keras.layers.BatchNormalization), ("gobn", gobn.keras.BatchNormalization)):
        layers = [layer_type(axis=-1), layer_type(axis=1, epsilon=0.01)]
        for layer in layers:
            layer.build(x.shape)
            layer.moving_variance.assign(tf.linspace(0.5, 2.0, layer.moving_variance.shape[0]))

        @tf.function(jit_compile=True)
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y0 = layers[0](x, training=True)
                y1 = layers[1](x, training=False)
                loss = tf.reduce_sum(y0 * w) + tf.reduce_sum(y1 * w)
            weights = layers[0].trainable_weights + layers[1].trainable_weights
            return [y0, y1] + tape.gradient(loss, [x] + weights)

        before = xla_calls()
        results[kind] = step(x) + [layers[0].moving_variance]
        results[kind + " calls"] = calls_since(before)
        assert all(layer.supports_jit for layer in layers)
    assert results["stock calls"] == {}
    assert results["gobn calls"] == {"Gobn>FusedBatchNormGradV3": 2}
    names = ("y", "y inference", "x", "gamma", "beta", "gamma inference", "beta inference", "moving variance")
    for name, g, s in zip(names, results["gobn"], results["stock"]):
        assert_close(g, s, tf.float32, name)


@needs_xla
def test_keras_fit_jit_compile_matches_stock():
    """A Keras 3 model converted to gobn's layers trains with jit_compile=True
    (kept through convert) as the stock model does with it."""
    import keras

    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(32, 6, 6, 3)).astype("float32"), rng.integers(0, 2, 32)

    def trained(convert):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3, use_bias=False),
                                  keras.layers.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=True)
        if convert:
            gobn.keras.convert(model, in_place=True)
        before = xla_calls()
        losses = model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False).history["loss"]
        return model, losses, calls_since(before)

    stock, stock_losses, stock_calls = trained(False)
    model, losses, calls = trained(True)
    assert model.jit_compile is True
    assert stock_calls == {}
    assert calls == {"Gobn>FusedBatchNormGradV3": 2}, "2 steps, one batch-norm gradient each, compiled by XLA"
    assert_close(np.array(losses), np.array(stock_losses), tf.float32, "loss")
    for g, s in zip(model.weights, stock.weights):
        assert_close(g, s, tf.float32, s.path)


# ---------------------------------------------------------------------------
# enable() and a tf_keras model compiled by XLA, in child processes

TF_KERAS_CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import tensorflow as tf
    import gobn
    import tf_keras as keras

    def train():
        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(6)
        x, y = rng.normal(size=(32, 6, 6, 3)).astype("float32"), rng.integers(0, 2, 32)
        model = keras.Sequential([keras.layers.Conv2D(4, 3, use_bias=False, input_shape=(6, 6, 3)),
                                  keras.layers.BatchNormalization(), keras.layers.ReLU(),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=True)
        losses = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history["loss"]
        return losses, [w.tolist() for w in model.get_weights()], gobn.kernel_calls()

    stock = train()
    gobn.enable()
    got = train()
    print(json.dumps({"stock": stock, "gobn": got}))
""")


def run_child(script, env):
    env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(gobn.__file__)))] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_xla
@pytest.mark.parametrize("onednn", ["0", "1"], ids=["onednn_off", "onednn_on"])
def test_tf_keras_after_enable_in_jit_compile(onednn):
    pytest.importorskip("tf_keras", reason="tf-keras is not installed")
    report = run_child(TF_KERAS_CHILD, {"TF_ENABLE_ONEDNN_OPTS": onednn})
    (stock_losses, stock_weights, stock_calls), (losses, weights, calls) = report["stock"], report["gobn"]
    assert stock_calls == {}
    # The batch norm's gradient and its ReLU's, fused (gobn._fusion).
    assert calls == {"Gobn>FusedBatchNormGradEx": {"XLA_CPU": 4}}, "2 epochs of 2 steps, compiled by XLA"
    assert_close(np.array(losses), np.array(stock_losses), tf.float32, "losses")
    for i, (g, s) in enumerate(zip(weights, stock_weights)):
        assert_close(np.array(g), np.array(s), tf.float32, f"weight {i}")


# ---------------------------------------------------------------------------
# Without XLA's FFI (TensorFlow before 2.17)


@pytest.mark.skipif(gobn._xla.available(), reason="gobn's kernels run inside XLA here")
def test_without_xla_ffi_gobn_says_so_once_and_builds_its_op():
    x = tf.ones([2, 3, 3, 4])

    @tf.function(jit_compile=True)
    def grad(x):
        return gobn.ops.gobn_fused_batch_norm_grad_v3(x, x, tf.ones([4]), tf.zeros([4]), tf.ones([4]),
                                                      tf.zeros([0]))[0]

    before = gobn.xla_status()["fallbacks"]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(2):
            with pytest.raises(tf.errors.InvalidArgumentError, match="Gobn>FusedBatchNormGradV3"):
                grad(x)
    status = gobn.xla_status()
    assert status["fallbacks"] > before
    messages = [str(w.message) for w in said if "gobn's kernels cannot run inside XLA" in str(w.message)]
    assert len(messages) <= 1 and (messages or before > 0), messages  # said once per process
    assert not gobn.keras.BatchNormalization().supports_jit
