"""The package's smoke tests: every documented API once, against stock.

They run in the main suite and, through ``make compat``, in a fresh
environment of each supported TensorFlow release with the wheel installed
(``pytest --noconftest``), so this file stands alone: it imports gobn as it
finds it and takes its tolerances and float64 references from
``gobn._testing``. What lasts for the process (``enable()``) runs in child
processes, with oneDNN off and on.

- the ops against stock's (or the float64 reference where stock has none);
- ``gobn.fused_batch_norm``, ``gobn.sync_batch_norm`` and the Keras layer
  against stock's or the float64 reference, gradients included (with a
  ReLU6's, fused), and ``gobn.keras.convert``;
- ``tf.vectorized_map`` over gobn's ops without the while-loop fallback;
- SavedModels of gobn.fused_batch_norm and the Keras layer: stock ops only;
- ``gobn.enable()``: stock's gradient ops on gobn's kernels;
- a ``keras`` model (Keras 3, or Keras 2 before TensorFlow 2.16) and a
  tf_keras model, where tf_keras is installed, trained after ``enable()``.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import gobn
from gobn import _testing

EPSILON = 0.001


assert_close = _testing.assert_close


def fused_inputs(shape, data_format, dtype=tf.float32, seed=0):
    rng = np.random.default_rng(seed)
    channels = shape[_testing.channel_axis(data_format, len(shape))]
    x = rng.normal(1.0, 2.0, shape)
    flat = _testing.to_channels_last(x, data_format).reshape(-1, channels)
    return dict(y_backprop=tf.constant(rng.normal(0.0, 1.0, shape), dtype), x=tf.constant(x, dtype),
                scale=tf.constant(rng.uniform(0.5, 2.0, channels), tf.float32),
                reserve_space_1=tf.constant(flat.mean(0), tf.float32),
                reserve_space_2=tf.constant(flat.var(0), tf.float32))


# ---------------------------------------------------------------------------
# The ops


@pytest.mark.parametrize("wrapper,stock,rank5", [
    ("gobn_fused_batch_norm_grad", tf.raw_ops.FusedBatchNormGrad, False),
    ("gobn_fused_batch_norm_grad_v2", tf.raw_ops.FusedBatchNormGradV2, False),
    ("gobn_fused_batch_norm_grad_v3", tf.raw_ops.FusedBatchNormGradV3, True),
])
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_fused_ops_match_stock(wrapper, stock, rank5, is_training):
    shapes = [(4, 5, 6, 3)] + ([(2, 3, 4, 5, 3)] if rank5 else [])
    for shape in shapes:
        data_format = "NHWC" if len(shape) == 4 else "NDHWC"
        args = dict(fused_inputs(shape, data_format), epsilon=EPSILON, data_format=data_format,
                    is_training=is_training)
        if wrapper.endswith("v3"):
            args["reserve_space_3"] = tf.zeros([0])
        got = getattr(gobn.ops, wrapper)(**args)
        want = stock(**args)
        for name, g, w in zip(("x_backprop", "scale_backprop", "offset_backprop"), got, want):
            assert_close(g, w, tf.float32, f"{wrapper} {data_format} {name}")


def test_global_normalization_grad_matches_the_reference():
    rng = np.random.default_rng(1)
    t, backprop = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, 3, 4, 5))
    m, v, gamma = rng.normal(size=5), rng.uniform(0.5, 2.0, 5), rng.normal(size=5)
    args = dict(t=t, m=m, v=v, gamma=gamma, backprop=backprop, variance_epsilon=EPSILON,
                scale_after_normalization=True)
    got = gobn.ops.gobn_batch_norm_with_global_normalization_grad(
        **{k: tf.constant(a, tf.float32) if isinstance(a, np.ndarray) else a for k, a in args.items()})
    for name, g, w in zip("dx dm dv db dg".split(), got, _testing.global_norm_grad_reference(**args)):
        assert_close(g, w, tf.float32, name)


def test_reduce_then_apply_is_the_training_gradient():
    args = fused_inputs((4, 3, 5, 6), "NCHW")
    sum_dy, sum_dy_xmu, count = gobn.ops.gobn_batch_norm_grad_reduce(
        y_backprop=args["y_backprop"], x=args["x"], mean=args["reserve_space_1"], data_format="NCHW")
    dx = gobn.ops.gobn_batch_norm_grad_apply(
        y_backprop=args["y_backprop"], x=args["x"], scale=args["scale"], mean=args["reserve_space_1"],
        variance=args["reserve_space_2"], sum_dy=sum_dy, sum_dy_xmu=sum_dy_xmu, count=count, epsilon=EPSILON,
        data_format="NCHW")
    want = _testing.fused_grad_reference(*args.values(), EPSILON, True, "NCHW")
    assert int(count) == 4 * 5 * 6
    assert_close(dx, want[0], tf.float32, "x_backprop")


# ---------------------------------------------------------------------------
# fused_batch_norm and the Keras layer


def test_fused_batch_norm_gradients_match_stock():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(1.0, 2.0, (4, 5, 6, 3)), tf.float32)
    w = tf.constant(rng.normal(size=(4, 5, 6, 3)), tf.float32)  # the loss's dy
    results = []
    for fn in (tf.compat.v1.nn.fused_batch_norm, gobn.fused_batch_norm):
        scale, offset = tf.constant([1.0, 2.0, 0.5]), tf.constant([0.0, 1.0, -1.0])
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, _, _ = fn(x, scale, offset, epsilon=EPSILON)
            loss = tf.reduce_sum(y * w)
        results.append([y] + tape.gradient(loss, [x, scale, offset]))
    for name, g, w in zip(("y", "x", "scale", "offset"), results[1], results[0]):
        assert_close(g, w, tf.float32, name)


def test_fused_batch_norm_and_relu6_fuse_in_a_function():
    """In a tf.function, the gradients of gobn.fused_batch_norm and of the
    ReLU6 after it are one call of Gobn>FusedBatchNormGradEx, equal to
    stock's ReLU6 and batch-norm gradients."""
    rng = np.random.default_rng(10)
    x = tf.constant(rng.normal(1.0, 2.0, (4, 5, 6, 3)), tf.float32)
    w = tf.constant(rng.normal(size=(4, 5, 6, 3)), tf.float32)
    scale, offset = tf.constant([1.0, 2.0, 0.5]), tf.constant([0.0, 1.0, -1.0])

    def gradients(fn):
        @tf.function
        def run(x, scale, offset):
            with tf.GradientTape() as tape:
                tape.watch([x, scale, offset])
                loss = tf.reduce_sum(tf.nn.relu6(fn(x, scale, offset, epsilon=EPSILON)[0]) * w)
            return tape.gradient(loss, [x, scale, offset])
        return run(x, scale, offset)

    def calls(op):
        return gobn.kernel_calls().get(op, {}).get("CPU", 0)

    stock = gradients(tf.compat.v1.nn.fused_batch_norm)
    before = calls("Gobn>FusedBatchNormGradEx"), calls("Gobn>FusedBatchNormGradV3")
    got = gradients(gobn.fused_batch_norm)
    assert (calls("Gobn>FusedBatchNormGradEx"), calls("Gobn>FusedBatchNormGradV3")) == (before[0] + 1, before[1])
    for name, g, s in zip(("x", "scale", "offset"), got, stock):
        assert_close(g, s, tf.float32, name)


def test_keras_layer_matches_the_stock_layer():
    import keras

    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(1.0, 2.0, (8, 4, 4, 3)), tf.float32)
    w = tf.constant(rng.normal(size=(8, 4, 4, 3)), tf.float32)  # the loss's dy
    results = []
    for layer in (keras.layers.BatchNormalization(), gobn.keras.BatchNormalization()):
        layer.build(x.shape)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * w)
        results.append([y] + tape.gradient(loss, [x] + layer.trainable_weights) + [layer.moving_variance])
    for name, g, w in zip(("y", "x", "gamma", "beta", "moving variance"), results[1], results[0]):
        assert_close(g, w, tf.float32, name)


def test_keras_model_trains():
    import keras

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(64, 8, 8, 3)).astype("float32"), rng.integers(0, 2, 64)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                              gobn.keras.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_sync_batch_norm_with_one_replica_is_batch_norm():
    """gobn.sync_batch_norm in a strategy's replica: with one replica, the
    statistics and gradients of the batch (the Keras layers' synchronized
    path is the same function)."""
    rng = np.random.default_rng(8)
    x = tf.constant(rng.normal(1.0, 2.0, (4, 5, 6, 3)), tf.float32)
    w = tf.constant(rng.normal(size=(4, 5, 6, 3)), tf.float32)
    scale, offset = tf.constant([1.0, 2.0, 0.5]), tf.constant([0.0, 1.0, -1.0])
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")

    def replica(x):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            out = gobn.sync_batch_norm(x, scale, offset, epsilon=EPSILON)
            loss = tf.reduce_sum(out.y * w)
        return [out.y, out.mean, out.biased_variance] + tape.gradient(loss, [x, scale, offset])

    got = strategy.run(tf.function(replica), args=(x,))
    flat = x.numpy().reshape(-1, 3).astype(np.float64)
    mean, variance = flat.mean(axis=0), flat.var(axis=0)
    dx, dscale, doffset = _testing.fused_grad_reference(w, x, scale, mean, variance, EPSILON, True, "NHWC")
    y = (x.numpy() - mean) / np.sqrt(variance + EPSILON) * scale.numpy() + offset.numpy()
    for name, g, want in zip(("y", "mean", "biased_variance", "x", "scale", "offset"), got,
                             (y, mean, variance, dx, dscale, doffset)):
        assert_close(g, want, tf.float32, name)


def test_convert_takes_keras3_models_and_sends_keras2_to_enable():
    import keras

    if not keras.__version__.startswith("3."):  # Keras 2 (TensorFlow 2.14, 2.15): enable() is its route
        with pytest.raises(TypeError, match="Keras 3"):
            gobn.keras.convert(keras.Sequential([keras.layers.BatchNormalization(input_shape=(4,))]))
        return
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.BatchNormalization()])
    converted = gobn.keras.convert(model)
    assert converted is not model
    assert isinstance(converted.layers[0], gobn.keras.BatchNormalization)
    assert type(model.layers[0]) is keras.layers.BatchNormalization, "the original stays stock"


# ---------------------------------------------------------------------------
# vectorized_map


def test_vectorized_map_without_fallback():
    args = fused_inputs((3, 2, 4, 5, 3), "NHWC")  # a batch of 3 NHWC examples

    def per_example(dy, x):
        return gobn.ops.gobn_fused_batch_norm_grad_v3(
            y_backprop=dy, x=x, scale=args["scale"], reserve_space_1=args["reserve_space_1"],
            reserve_space_2=args["reserve_space_2"], reserve_space_3=tf.zeros([0]), epsilon=EPSILON,
            is_training=True)[:3]

    got = tf.vectorized_map(lambda a: per_example(*a), (args["y_backprop"], args["x"]),
                            fallback_to_while_loop=False)
    for i in range(3):
        for g, w in zip(got, per_example(args["y_backprop"][i], args["x"][i])):
            assert_close(g[i], w, tf.float32, f"example {i}")


# ---------------------------------------------------------------------------
# SavedModels


def saved_op_types(folder):
    """The op types of a SavedModel: its graph's and those of every function in its library."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(folder, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    return {n.op for n in graph.node} | {n.op for fn in graph.library.function for n in fn.node_def}


class _Norm(tf.Module):
    def __init__(self, batch_norm):
        super().__init__()
        self.scale = tf.Variable([0.5, 1.0, 2.0])
        self.batch_norm = batch_norm

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def train(self, x):
        return self.batch_norm(x, self.scale, tf.zeros([3]), epsilon=EPSILON)[0]

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 5, 3], tf.float32)])
    def step(self, x):
        with tf.GradientTape() as tape:
            y = self.train(x)
        return tape.gradient(y, self.scale, output_gradients=x)


def test_saved_models_hold_stock_ops_only(tmp_path):
    """tf.saved_model.save of gobn.fused_batch_norm (its gradient traced before, and a step that
    computes one itself) and of gobn's Keras layer: no Gobn> op, so stock TensorFlow loads them;
    the module keeps stock's gradient op, which gives stock's values."""
    import keras

    rng = np.random.default_rng(9)
    x, dy = (tf.constant(rng.normal(1.0, 2.0, (2, 4, 5, 3)), tf.float32) for _ in range(2))
    module, stock = _Norm(gobn.fused_batch_norm), _Norm(tf.compat.v1.nn.fused_batch_norm)
    assert_close(module.step(x), stock.step(x), tf.float32, "step on gobn")
    tf.saved_model.save(module, str(tmp_path / "module"))
    model = keras.Sequential([keras.Input((4, 5, 3)), gobn.keras.BatchNormalization(),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    model(x, training=False)
    tf.saved_model.save(model, str(tmp_path / "keras"))
    for name in ("module", "keras"):
        types = saved_op_types(str(tmp_path / name))
        assert "FusedBatchNormV3" in types and not any(t.startswith("Gobn>") for t in types), (name, types)
    assert "FusedBatchNormGradV3" in saved_op_types(str(tmp_path / "module")), "the gradient is saved"
    loaded = tf.saved_model.load(str(tmp_path / "module"))
    assert_close(loaded.step(x), stock.step(x), tf.float32, "loaded step")
    results = []
    for m in (loaded, stock):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = m.train(x)
        results.append(tape.gradient(y, [x, m.scale], output_gradients=dy))
    for name, g, w in zip(("x", "scale"), *results):
        assert_close(g, w, tf.float32, f"loaded gradient {name}")


# ---------------------------------------------------------------------------
# enable() and a tf_keras model, in child processes

ENABLE_CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import tensorflow as tf
    import gobn

    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(1.0, 2.0, (4, 5, 6, 3)), tf.float32)
    w = tf.constant(rng.normal(size=(4, 5, 6, 3)), tf.float32)

    def grad():
        scale = tf.constant([1.0, 2.0, 0.5])
        with tf.GradientTape() as tape:
            tape.watch([x, scale])
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, tf.zeros([3]), epsilon=0.001)
            loss = tf.reduce_sum(y * w)
        return [t.numpy().tolist() for t in tape.gradient(loss, [x, scale])]

    stock = grad()
    gobn.enable()
    got = grad()
    print(json.dumps({"stock": stock, "gobn": got, "calls": gobn.kernel_calls()}))
""")

TF_KERAS_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import gobn
    import tf_keras as keras
    if sys.argv[1] == "gobn":
        gobn.enable()
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(64, 8, 8, 3)).astype("float32"), rng.integers(0, 2, 64)
    model = keras.Sequential([keras.layers.Conv2D(4, 3, input_shape=(8, 8, 3)),
                              keras.layers.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history["loss"]
    print(json.dumps({"keras": keras.__name__, "losses": losses, "calls": gobn.kernel_calls()}))
""")


KERAS_CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import keras
    import gobn

    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(64, 8, 8, 3)).astype("float32"), rng.integers(0, 2, 64)

    def fit():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                                  keras.layers.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history["loss"]

    stock = fit()
    gobn.enable()
    print(json.dumps({"stock": stock, "gobn": fit(), "calls": gobn.kernel_calls()}))
""")


def run_child(script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(gobn.__file__)))] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update({k: v for k, v in (a.split("=", 1) for a in args if "=" in a)})
    done = subprocess.run([sys.executable, "-c", script, *[a for a in args if "=" not in a]], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def gradient_calls(calls):
    """The calls of gobn's kernels for batch-norm gradients in a kernel_calls() report."""
    return sum(devices.get("CPU", 0) for op, devices in calls.items() if "BatchNormGrad" in op)


@pytest.mark.parametrize("onednn", ["0", "1"], ids=["onednn_off", "onednn_on"])
def test_enable_runs_stock_gradients_on_gobn(onednn):
    report = run_child(ENABLE_CHILD, f"TF_ENABLE_ONEDNN_OPTS={onednn}")
    assert gradient_calls(report["calls"]) == 1, report["calls"]
    for name, g, w in zip(("x", "scale"), report["gobn"], report["stock"]):
        assert_close(np.array(g), np.array(w), tf.float32, name)


@pytest.mark.parametrize("onednn", ["0", "1"], ids=["onednn_off", "onednn_on"])
def test_tf_keras_model_after_enable(onednn):
    pytest.importorskip("tf_keras", reason="tf-keras is not installed")
    stock = run_child(TF_KERAS_CHILD, "stock", f"TF_ENABLE_ONEDNN_OPTS={onednn}")
    got = run_child(TF_KERAS_CHILD, "gobn", f"TF_ENABLE_ONEDNN_OPTS={onednn}")
    assert gradient_calls(got["calls"]) == 8, f"2 epochs of 4 steps: 8 batch-norm gradients on gobn, got {got['calls']}"
    assert_close(np.array(got["losses"]), np.array(stock["losses"]), tf.float32, "losses")


def test_keras_model_after_enable():
    """An unmodified model of the keras package trains on gobn after enable(): Keras 3's layer through
    the call enable() gives it, Keras 2's (TensorFlow 2.14, 2.15) through its fused op."""
    report = run_child(KERAS_CHILD)
    assert gradient_calls(report["calls"]) == 8, f"2 epochs of 4 steps: 8 batch-norm gradients on gobn, got {report['calls']}"
    assert_close(np.array(report["gobn"]), np.array(report["stock"]), tf.float32, "losses")
