"""gobn._fusion: a ReLU's or ReLU6's gradient fused into the batch norm's.

In a tf.function, the gradient of gobn.fused_batch_norm followed by a ReLU
or a ReLU6 is one Gobn>FusedBatchNormGradEx: the executed graph (the
partition graphs TensorFlow's run metadata gives) holds it and no
ReluGrad or Relu6Grad, gobn.kernel_calls() counts it, and the gradients
equal the unfused ones (GOBN_FUSE_ACTIVATIONS=0's, the switch) and stock's
within float32's tolerance. What does not fuse stays as it was: a residual's
addition between the batch norm and the activation, an output used twice,
eager gradients, SavedModels (stock ops only). Second-order gradients go
through the fused op's own gradient; test_xla.py runs the fusion under
jit_compile. tf_keras after enable() with oneDNN off and on, and Keras 3
after enable() and through convert, run in fusion_child.py, one process
each (enable() lasts for its process).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

import gobn as gobn_package
from gobn import _fusion
from support import TOLERANCES, assert_close, child_env, run_child_report

FUSED, PLAIN = "Gobn>FusedBatchNormGradEx", "Gobn>FusedBatchNormGradV3"
ACTIVATION_GRADS = {"ReluGrad", "Relu6Grad"}
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fusion_child.py")


def executed(fn, *args):
    """fn(*args)'s result and the op types of the graphs TensorFlow ran for
    it (its partition graphs, after grappler and pruning)."""
    ctx = context.context()
    ctx.enable_run_metadata()
    ctx.export_run_metadata()  # whatever it held: it keeps functions run while it was off
    try:
        result = fn(*args)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    ran = {node.op for f in metadata.function_graphs for g in f.partition_graphs for node in g.node}
    return result, ran


def calls(name):
    return gobn_package.kernel_calls().get(name, {}).get("CPU", 0)


@pytest.fixture
def fusion_off():
    """The switch off for one test."""
    _fusion.set_on(False)
    yield
    _fusion.set_on(True)


def inputs(data_format="NHWC", dtype=tf.float32, seed=0):
    rng = np.random.default_rng(seed)
    shape = (4, 6, 6, 8) if data_format == "NHWC" else (4, 8, 6, 6)
    x = tf.constant(rng.normal(0.3, 2.0, shape), dtype)
    w = tf.constant(rng.normal(size=shape), dtype)
    scale = tf.constant(rng.uniform(0.5, 1.5, 8), tf.float32)
    offset = tf.constant(rng.normal(size=8), tf.float32)
    return x, w, scale, offset


def gradients(activation, data_format="NHWC", is_training=True, use=None):
    """A tf.function: the gradients of Σ w·activation(bn(x)) (or use's of
    the batch norm's output) with respect to x, scale and offset, through
    gobn.fused_batch_norm."""

    @tf.function
    def run(x, w, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            mean, variance = (None, None) if is_training else (tf.zeros([8]), tf.ones([8]))
            y = gobn_package.fused_batch_norm(x, scale, offset, mean, variance, data_format=data_format,
                                              is_training=is_training).y
            out = use(y) if use else activation(y)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(w, tf.float32))
        return tape.gradient(loss, [x, scale, offset])

    return run


@pytest.mark.parametrize("activation, grad_op", [(tf.nn.relu, "ReluGrad"), (tf.nn.relu6, "Relu6Grad")],
                         ids=["relu", "relu6"])
@pytest.mark.parametrize("data_format, is_training", [("NHWC", True), ("NCHW", True), ("NHWC", False)])
def test_fused_in_a_function(gobn, activation, grad_op, data_format, is_training):
    """One fused op, no activation gradient, and the unfused gradients."""
    args = inputs(data_format)
    before, plain_before = calls(FUSED), calls(PLAIN)
    got, ran = executed(gradients(activation, data_format, is_training), *args)
    assert FUSED in ran and grad_op not in ran and PLAIN not in ran, sorted(ran)
    assert calls(FUSED) == before + 1 and calls(PLAIN) == plain_before
    _fusion.set_on(False)
    try:
        want, unfused = executed(gradients(activation, data_format, is_training), *args)
    finally:
        _fusion.set_on(True)
    assert grad_op in unfused and FUSED not in unfused, sorted(unfused)
    for name, g, w in zip(("x", "scale", "offset"), got, want, strict=True):
        assert_close(g, w, tf.float32, f"d{name} fused vs unfused")


def test_switch_off(gobn, fusion_off):
    """GOBN_FUSE_ACTIVATIONS=0 (here, the switch it sets) keeps the
    activation's gradient and gobn's FusedBatchNormGradV3."""
    _, ran = executed(gradients(tf.nn.relu), *inputs())
    assert "ReluGrad" in ran and PLAIN in ran and FUSED not in ran, sorted(ran)


def test_switch_from_the_environment_and_enable():
    """GOBN_FUSE_ACTIVATIONS=0 in a process's environment turns it off
    there, and enable(fuse_activations=) overrides it for the process."""
    script = ("import gobn; from gobn import _fusion; first = _fusion.on(); "
              "gobn.enable(fuse_activations=not first); print(first, _fusion.on())")
    for value, want in (("0", "False True"), ("1", "True False")):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=child_env(GOBN_FUSE_ACTIVATIONS=value), timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_fused_in_half_and_bfloat16(gobn, dtype):
    args = inputs(dtype=dtype)
    got, ran = executed(gradients(tf.nn.relu6), *args)
    assert FUSED in ran and "Relu6Grad" not in ran, sorted(ran)
    _fusion.set_on(False)
    try:
        want = gradients(tf.nn.relu6)(*args)
    finally:
        _fusion.set_on(True)
    assert_close(got[0], want[0], dtype, "dx")
    for g, w in zip(got[1:], want[1:], strict=True):
        assert_close(g, w, tf.float32, "dscale, doffset")


def test_matches_stock(gobn):
    """The fused gradients equal stock's (tf.compat.v1.nn.fused_batch_norm
    then ReLU6, differentiated by TensorFlow alone)."""
    x, w, scale, offset = inputs(seed=3)

    @tf.function
    def stock(x, w, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=0.001)
            loss = tf.reduce_sum(tf.nn.relu6(y) * w)
        return tape.gradient(loss, [x, scale, offset])

    got, ran = executed(gradients(tf.nn.relu6), x, w, scale, offset)
    assert FUSED in ran
    for name, g, s in zip(("x", "scale", "offset"), got, stock(x, w, scale, offset), strict=True):
        assert_close(g, s, tf.float32, f"d{name} vs stock")


@pytest.mark.parametrize("case", ["residual", "used twice", "leaky"])
def test_left_unfused_and_exact(gobn, case):
    """A residual's addition before the ReLU, an output the loss uses twice,
    another activation: the activation's gradient stays, the gradients
    are the unfused ones."""
    x, w, scale, offset = inputs(seed=4)
    shortcut = tf.constant(np.random.default_rng(5).normal(size=x.shape), tf.float32)
    use = {"residual": lambda y: tf.nn.relu(y + shortcut), "used twice": lambda y: tf.nn.relu(y) + y,
           "leaky": tf.nn.leaky_relu}[case]
    got, ran = executed(gradients(None, use=use), x, w, scale, offset)
    assert FUSED not in ran and PLAIN in ran, sorted(ran)
    _fusion.set_on(False)
    try:
        want = gradients(None, use=use)(x, w, scale, offset)
    finally:
        _fusion.set_on(True)
    for g, v in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, v)


def test_eager_gradients_stay_as_they_were(gobn):
    """Eagerly the activation's gradient has run before the batch norm's:
    nothing to fuse, the gradients right."""
    x, w, scale, offset = inputs(seed=6)
    before = calls(FUSED)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.nn.relu(gobn_package.fused_batch_norm(x, scale, offset).y) * w)
    got = tape.gradient(loss, x)
    assert calls(FUSED) == before
    assert_close(got, gradients(tf.nn.relu)(x, w, scale, offset)[0], tf.float32, "dx eager vs fused")


def test_second_order_gradients(gobn):
    """A gradient penalty through the fused gradient (the loss squares the
    activation, so the activation's incoming gradient depends on x): the
    fused op's own gradient against the unfused pair's."""
    x, w, scale, offset = inputs(seed=7)

    def penalty():
        @tf.function
        def run(x, scale, offset):
            with tf.GradientTape() as outer:
                outer.watch([x, scale])
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    y = gobn_package.fused_batch_norm(x, scale, offset).y
                    loss = tf.reduce_sum(tf.square(tf.nn.relu6(y)) * w)
                dx = inner.gradient(loss, x)
                norm = tf.reduce_sum(dx * dx)
            return outer.gradient(norm, [x, scale])
        return run

    got, ran = executed(penalty(), x, scale, offset)
    assert FUSED in ran, sorted(ran)
    _fusion.set_on(False)
    try:
        want, unfused = executed(penalty(), x, scale, offset)
    finally:
        _fusion.set_on(True)
    assert FUSED not in unfused, sorted(unfused)
    for name, g, v in zip(("x", "scale"), got, want, strict=True):
        assert_close(g, v, tf.float32, f"d|dx|^2/d{name} fused vs unfused")


def test_saved_model_holds_stock_ops(gobn, tmp_path):
    """A SavedModel of a fused gradient holds stock's ops alone."""
    x, w, scale, offset = inputs(seed=8)
    module = tf.Module()
    module.f = gradients(tf.nn.relu)
    module.f(x, w, scale, offset)
    tf.saved_model.save(module, str(tmp_path))
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((tmp_path / "saved_model.pb").read_bytes())
    types = {n.op for m in saved.meta_graphs for f in m.graph_def.library.function for n in f.node_def}
    assert "ReluGrad" in types and not any(t.startswith("Gobn>") for t in types), sorted(types)


@pytest.fixture(scope="module", params=[0, 1], ids=["onednn_off", "onednn_on"])
def child(request):
    report = run_child_report(CHILD, TF_ENABLE_ONEDNN_OPTS=str(request.param), timeout=600)
    assert report["onednn"] == bool(request.param), "TF_ENABLE_ONEDNN_OPTS did not take"
    return report


@pytest.mark.parametrize("route", ["tf_keras enable", "keras3 enable", "keras3 convert"])
def test_keras_models_fuse(child, route):
    """A Conv→BN→ReLU→BN→ReLU6 model trains with each BN's gradient fused
    (two fused calls a step, no activation gradient run), with losses equal
    to the unfused ones (the switch off, same weights) within float32's
    tolerance."""
    run = child[route]
    assert run["fused_calls"] == 2 * run["steps"], run
    assert not [op for op in run["ran"] if any(g in op for g in ACTIVATION_GRADS)], run["ran"]
    assert ACTIVATION_GRADS <= {op for op in run["unfused_ran"] if op in ACTIVATION_GRADS}, run["unfused_ran"]
    np.testing.assert_allclose(run["losses"], run["unfused_losses"], rtol=TOLERANCES["float32"][0])
