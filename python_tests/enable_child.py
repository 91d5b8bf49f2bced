"""One process of test_enable.py: stock's results, gobn.enable(), the same again.

    python enable_child.py

TF_ENABLE_ONEDNN_OPTS in the environment says whether oneDNN is on. The
child computes every case with stock TensorFlow first, enables gobn, computes
them again, and prints one JSON report: what enable() returned, the gobn
kernel calls each case made after it, and each case's results beside
stock's (or the float64 reference's). The checks are test_enable.py's.
"""

import json
import warnings

import support  # noqa: F401  (first: the package on sys.path)

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port

import gobn

EPSILON = 1e-3
rng = np.random.default_rng(7)
X = rng.standard_normal((4, 5, 6, 8)).astype(np.float32)
DY = rng.standard_normal(X.shape).astype(np.float32)
MEAN, VAR = X.mean((0, 1, 2)), X.var((0, 1, 2))
SCALE = rng.standard_normal(8).astype(np.float32)


def gobn_calls(device="CPU"):
    """Calls of gobn's kernels for batch-norm gradients so far, on device
    (XLA_CPU: its XLA handlers): under stock's names and gobn's own."""
    return sum(devices.get(device, 0) for op, devices in gobn.kernel_calls().items() if "BatchNormGrad" in op)


def counted(fn):
    """(fn's result, the gobn kernel calls it made, the calls of gobn's XLA
    handlers it made, {registered op name: the CPU calls it made of that kernel})."""
    before, before_xla, before_by_op = gobn_calls(), gobn_calls("XLA_CPU"), gobn.kernel_calls()
    out = fn()
    by_op = {op: devices.get("CPU", 0) - before_by_op.get(op, {}).get("CPU", 0)
             for op, devices in gobn.kernel_calls().items()}
    return out, gobn_calls() - before, gobn_calls("XLA_CPU") - before_xla, {op: n for op, n in by_op.items() if n}


def as_lists(tensors):
    """The tensors as nested lists of float64, each at least 1-D."""
    return [np.atleast_1d(np.asarray(tf.cast(t, tf.float64))).tolist() for t in tensors]


def ops_that_ran(fn):
    """(fn's result, the op types of the graphs TensorFlow ran for it, after its rewrites)."""
    ctx = context.context()
    ctx.enable_run_metadata()
    ctx.export_run_metadata()  # drops what was collected before
    try:
        out = fn()
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    return out, sorted({node.op for graph in metadata.function_graphs for partition in graph.partition_graphs
                        for node in partition.node})


# ---------------------------------------------------------------------------
# The cases


def raw_op(op, dtype, training):
    """A stock gradient op called directly."""
    args = dict(y_backprop=tf.cast(DY, dtype), x=tf.cast(X, dtype), scale=SCALE, reserve_space_1=MEAN,
                reserve_space_2=VAR, epsilon=EPSILON, is_training=training)
    if op == "FusedBatchNormGradV3":
        args["reserve_space_3"] = tf.zeros([0])
    return as_lists(getattr(tf.raw_ops, op)(**args)[:3])


# The fused stock twins (the op table's rows of that kind), in each dtype
# stock has a CPU kernel for.
FUSED_TWINS = [row for row in support.op_table() if row["kind"] == "FusedBatchNormGrad" and row["stock"]]
RAW_CASES = [(row["stock"], dtype, training) for row in FUSED_TWINS for dtype in row["stock_kernels"]["CPU"]
             for training in (True, False)]


def forward_gradient(forward, training):
    """The gradients of Σ dy·y with respect to x, scale and offset through
    stock's forward op (FusedBatchNorm, V2, V3), taken by an eager tape: the
    forward op's gradient function is stock's before enable() and, with
    oneDNN on, gobn's after it (gobn._stock_gradients)."""
    x, scale, offset = tf.constant(X), tf.constant(SCALE), tf.zeros(8)
    statistics = dict(mean=tf.zeros([0]), variance=tf.zeros([0])) if training else dict(mean=MEAN, variance=VAR)
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        y = getattr(tf.raw_ops, forward)(x=x, scale=scale, offset=offset, epsilon=EPSILON, is_training=training,
                                         **statistics)[0]
        loss = tf.reduce_sum(y * DY)
    return as_lists(tape.gradient(loss, [x, scale, offset]))


def global_norm_gradient():
    """The gradients of Σ dy·y with respect to t, m, v, beta and gamma through
    stock's BatchNormWithGlobalNormalization, deprecated at GraphDef version 9,
    so in a version-8 graph run by a Session."""
    from tensorflow.python.framework import test_util

    graph = tf.Graph()
    test_util.set_producer_version(graph, 8)
    with graph.as_default():
        inputs = [tf.constant(a) for a in (X, MEAN, VAR, np.zeros(8, np.float32), SCALE)]
        y = tf.raw_ops.BatchNormWithGlobalNormalization(
            t=inputs[0], m=inputs[1], v=inputs[2], beta=inputs[3], gamma=inputs[4], variance_epsilon=EPSILON,
            scale_after_normalization=True)
        gradients = tf.gradients(tf.reduce_sum(y * DY), inputs)
    with tf.compat.v1.Session(graph=graph) as session:
        values = session.run(gradients)
    return as_lists(values)


# The stock forward ops whose gradients enable() puts on gobn's ops with oneDNN on
# (the fused twins' gradient_of; global_norm_gradient takes the other's).
FORWARD_OPS = [row["gradient_of"] for row in FUSED_TWINS]


def forward_reserve_spaces():
    """Stock FusedBatchNormV3's training forward in a tf.function: its reserve spaces, and the ops that ran."""
    @tf.function
    def forward(x):
        out = tf.raw_ops.FusedBatchNormV3(x=x, scale=SCALE, offset=tf.zeros(8), mean=tf.zeros([0]),
                                          variance=tf.zeros([0]), epsilon=EPSILON, is_training=True)
        return out.reserve_space_1, out.reserve_space_2, out.reserve_space_3

    (mean, variance, reserve_3), ran = ops_that_ran(lambda: forward(tf.constant(X)))
    return {"reserve_space_1": mean.numpy().tolist(), "reserve_space_2": variance.numpy().tolist(),
            "reserve_space_3_shape": reserve_3.shape.as_list(), "ops": [op for op in ran if "BatchNorm" in op]}


def train_step(jit_compile=False):
    """A tf.function training step through tf.compat.v1.nn.fused_batch_norm
    (stock's FusedBatchNormV3 forward): the loss and the x and scale gradients."""
    w = tf.Variable(np.ones(8, np.float32))

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, w, tf.zeros(8), epsilon=EPSILON, is_training=True)
            loss = tf.reduce_sum(tf.square(y) * tf.range(8, dtype=tf.float32))
        return [loss] + tape.gradient(loss, [x, w])

    return as_lists(step(tf.constant(X)))


def step_reference():
    """train_step in float64: y = (x−μ)·c·w, loss = Σ k·y², c = 1/sqrt(σ²+ε)."""
    x, w, k = X.astype(np.float64), np.ones(8), np.arange(8.0)
    mu, c = x.mean((0, 1, 2)), 1 / np.sqrt(x.var((0, 1, 2)) + EPSILON)
    y = (x - mu) * c * w
    dy = 2 * k * y
    dxmu = (dy * (x - mu)).mean((0, 1, 2))
    dx = w * c * (dy - dy.mean((0, 1, 2)) - (x - mu) * c * c * dxmu)
    return [[float(np.sum(k * y * y))], dx.tolist(), (dy * (x - mu) * c).sum((0, 1, 2)).tolist()]


def second_order():
    """d/d(x, scale) of ‖∂(Σ w·y)/∂x‖², in a tf.function: double backprop through the batch-norm gradient."""
    w = tf.constant(DY)

    @tf.function
    def penalty(x, scale):
        with tf.GradientTape() as outer:
            outer.watch([x, scale])
            with tf.GradientTape() as inner:
                inner.watch(x)
                y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, tf.zeros(8), epsilon=EPSILON, is_training=True)
                loss = tf.reduce_sum(y * w)
            norm = tf.reduce_sum(tf.square(inner.gradient(loss, x)))
        return outer.gradient(norm, [x, scale])

    return as_lists(penalty(tf.constant(X), tf.constant(SCALE)))


def tf_keras_losses(policy=None):
    """An unmodified tf_keras (Keras 2) model, 2 epochs of 4 batches: [its losses]."""
    import tf_keras

    tf_keras.mixed_precision.set_global_policy(policy or "float32")
    try:
        tf_keras.utils.set_random_seed(3)
        model = tf_keras.Sequential([
            tf_keras.layers.Conv2D(6, 3, input_shape=(6, 8, 8)),
            tf_keras.layers.BatchNormalization(),
            tf_keras.layers.ReLU(),
            tf_keras.layers.Flatten(),
            tf_keras.layers.Dense(3, dtype="float32")])
        model.compile(tf_keras.optimizers.SGD(0.05), "mse")
        data = np.random.default_rng(5).standard_normal((32, 6, 8, 8)).astype(np.float32)
        target = np.random.default_rng(6).standard_normal((32, 3)).astype(np.float32)
        return [model.fit(data, target, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]]
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")


CASES = {
    **{f"raw {op} {dtype} {'training' if training else 'inference'}": (lambda c=(op, dtype, training): raw_op(*c))
       for op, dtype, training in RAW_CASES},
    **{f"gradient of {op} {'training' if training else 'inference'}":
       (lambda c=(op, training): forward_gradient(*c)) for op in FORWARD_OPS for training in (True, False)},
    "gradient of BatchNormWithGlobalNormalization": global_norm_gradient,
    "train_step": train_step,
    "train_step jit_compile": lambda: train_step(jit_compile=True),
    "second_order": second_order,
    "tf_keras float32": tf_keras_losses,
    "tf_keras mixed_bfloat16": lambda: tf_keras_losses("mixed_bfloat16"),
}


def main():
    stock = {name: fn() for name, fn in CASES.items()}
    stock_forward = forward_reserve_spaces()
    before = gobn.kernel_calls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = gobn.enable()
        again = gobn.enable()
    got, calls, xla_calls, calls_by_op = {}, {}, {}, {}
    for name, fn in CASES.items():
        got[name], calls[name], xla_calls[name], calls_by_op[name] = counted(fn)
    print(json.dumps({
        "onednn": bool(_pywrap_util_port.IsMklEnabled()),
        "before": before, "report": report, "same_report": again is report,
        "warnings": [str(w.message) for w in caught],
        "stock": stock, "got": got, "calls": calls, "xla_calls": xla_calls, "calls_by_op": calls_by_op, "step_reference": step_reference(),
        "stock_forward": stock_forward, "forward": forward_reserve_spaces(),
        "batch_mean": MEAN.tolist(), "biased_variance": VAR.tolist(),
    }))


if __name__ == "__main__":
    main()
