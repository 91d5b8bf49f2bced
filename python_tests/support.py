"""Helpers for gobn's pytest suite, imported with ``from support import ...``.

conftest.py keeps the fixtures and hooks; everything else the tests share is
here. The tolerance table and the float64 references are the package's
(python/gobn/_testing.py), which scripts/golden.py and scripts/demo.py use
too; this module re-exports them.

Importing this module first thing (conftest.py does, and so do the child
scripts the tests start) sets up the process: oneDNN off, so that stock's
reference is the Eigen kernel, before TensorFlow is imported, and the
package on sys.path, as a user of the checkout has it (``PYTHONPATH=python``).
The tests load gobn as the README tells users to, through the package
(``gobn.ops``), which finds the checkout's build/libgobn.so.
"""

import os
import sys

# Must be set before TensorFlow is imported anywhere in the process.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_DIR = os.path.join(REPO_ROOT, "python")
# The library make builds: for the tests that inspect the file itself.
BUILT_LIBRARY = os.path.join(REPO_ROOT, "build", "libgobn.so")

sys.path.insert(0, PYTHON_DIR)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from gobn._testing import (  # noqa: E402,F401  (re-exported for the tests)
    CHANNELS_FIRST,
    TOLERANCES,
    as_float64,
    assert_close,
    channel_axis,
    channels_last_format,
    fused_grad_reference,
    from_channels_last,
    global_norm_grad_reference,
    to_channels_last,
    tolerance,
    tolerance_bound,
)


def run_child_report(script, *args, timeout=300, **env):
    """Runs script (a file) in a child Python with child_env(**env); asserts it
    succeeded and returns the JSON object its last line of output holds."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=child_env(**env),
                          timeout=timeout)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# A user's first script: gobn.fused_batch_norm's gradient against stock's
# (float32's tolerance), then the library and package it used.
GRADIENT_SCRIPT = """
import numpy as np, tensorflow as tf, gobn
from gobn._testing import tolerance
x, w = tf.random.normal([2, 3, 3, 4]), tf.random.normal([2, 3, 3, 4])
grads = []
for fn in (gobn.fused_batch_norm, tf.compat.v1.nn.fused_batch_norm):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, _, _ = fn(x, tf.ones([4]), tf.zeros([4]))
        loss = tf.reduce_sum(y * w)
    grads.append(tape.gradient(loss, x).numpy())
rtol, atol = tolerance("float32")
np.testing.assert_allclose(grads[0], grads[1], rtol=rtol, atol=atol * np.abs(grads[1]).max())
print(gobn.library_path(), gobn.__file__)
"""


def child_env(**extra):
    """The environment of a child Python process that uses gobn as a user of
    the checkout does: the package on PYTHONPATH, no GOBN_LIBRARY."""
    env = {k: v for k, v in os.environ.items() if k != "GOBN_LIBRARY"}
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, os.path.dirname(os.path.abspath(__file__))])
    env.update(extra)
    return env


# ---------------------------------------------------------------------------
# Running an op in a graph


def run_in_function(fn, inputs, attrs, fresh=()):
    """Runs fn inside a tf.function with fully known input shapes; returns the
    outputs and their static shapes in the traced graph.

    The inputs named in fresh are multiplied by one (a function argument, so
    that no graph rewrite removes the product) inside the function: a fresh
    tensor that only the op reads, whose buffer TensorFlow lets the op's
    output take over. gobn writes x_backprop (dx) over it then.
    """
    names = list(inputs)
    signature = [tf.TensorSpec(inputs[k].shape, inputs[k].dtype) for k in names]
    signature.append(tf.TensorSpec([], tf.float64))

    @tf.function(input_signature=signature)
    def traced(*args):
        values = dict(zip(names, args[:-1]))
        for k in fresh:
            values[k] = values[k] * tf.cast(args[-1], values[k].dtype)
        return fn(**values, **attrs)

    concrete = traced.get_concrete_function()
    static_shapes = [t.shape for t in tf.nest.flatten(concrete.structured_outputs)]
    return list(concrete(*[inputs[k] for k in names], tf.constant(1.0, tf.float64))), static_shapes


# ---------------------------------------------------------------------------
# Comparisons


def max_abs_error(got, want):
    """max |got - want| (0 for empty tensors)."""
    got, want = as_float64(got), as_float64(want)
    return float(np.max(np.abs(got - want), initial=0.0))


def assert_as_accurate(got, stock, reference, dtype, what="output"):
    """Asserts got is no further from the float64 reference than stock is.

    Element-wise |got - ref| <= |stock - ref| + atol*max|ref| + rtol*|ref|:
    gobn may differ from the exact answer only by as much as stock does, plus
    one tolerance of slack.
    """
    got, stock, reference = as_float64(got), as_float64(stock), as_float64(reference)
    assert got.shape == reference.shape, f"{what}: shape {got.shape}, want {reference.shape}"
    if got.size == 0:
        return
    got_err = np.abs(got - reference)
    stock_err = np.abs(stock - reference)
    bound = stock_err + tolerance_bound(reference, dtype)
    bad = ~(got_err <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, got_err - stock_err, -np.inf)), got.shape)
        pytest.fail(
            f"{what}: less accurate than stock against the float64 reference at "
            f"{tuple(int(k) for k in i)}: gobn {got[i]!r}, stock {stock[i]!r}, reference "
            f"{reference[i]!r}; max gobn error {got_err.max():.3g}, max stock error {stock_err.max():.3g}",
            pytrace=False,
        )


# ---------------------------------------------------------------------------
# Stock helpers


def stock_forward_reserve_spaces(x, scale, offset, epsilon, data_format):
    """Runs stock FusedBatchNormV3 in training mode and returns its reserve spaces.

    reserve_space_1 is the batch mean and reserve_space_2 the *biased* batch
    variance (batch_variance is Bessel-corrected; checked in test_parity.py).
    """
    empty = tf.constant([], tf.float32)
    out = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=scale, offset=offset, mean=empty, variance=empty,
        epsilon=epsilon, data_format=data_format, is_training=True,
    )
    return out.reserve_space_1, out.reserve_space_2, out.reserve_space_3


def run_stock_global_norm_grad(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization,
                               static_shapes=True, op=None):
    """Runs the deprecated stock op in a GraphDef-version-8 graph; returns numpy outputs.

    With static_shapes=False the placeholders have unknown shapes, so bad shapes
    reach the kernel (InvalidArgumentError) instead of the shape function
    (ValueError). op replaces the stock op, e.g. to run gobn's beside it.
    """
    from tensorflow.python.framework import test_util

    op = op or tf.raw_ops.BatchNormWithGlobalNormalizationGrad
    graph = tf.Graph()
    test_util.set_producer_version(graph, 8)
    arrays = [np.asarray(a.numpy() if isinstance(a, tf.Tensor) else a) for a in (t, m, v, gamma, backprop)]
    with graph.as_default():
        placeholders = [
            tf.compat.v1.placeholder(tf.as_dtype(a.dtype), a.shape if static_shapes else None) for a in arrays]
        out = op(
            t=placeholders[0], m=placeholders[1], v=placeholders[2], gamma=placeholders[3],
            backprop=placeholders[4], variance_epsilon=variance_epsilon,
            scale_after_normalization=scale_after_normalization,
        )
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(list(out), dict(zip(placeholders, arrays)))


# ---------------------------------------------------------------------------
# Error bookkeeping: the largest differences seen, printed after the run.

ERRORS = {}


def record_error(dtype, kind, got, want, case_dtype=None):
    """Records max|got - want| and the largest fraction of dtype's tolerance it used.

    Rows are labelled with case_dtype (the case's T) when given, else dtype.
    """
    got, want = as_float64(got), as_float64(want)
    if got.size == 0:
        return
    err = np.abs(got - want)
    bound = tolerance_bound(want, dtype)
    used = np.where(bound > 0, err / np.where(bound > 0, bound, 1.0), np.where(err > 0, np.inf, 0.0))
    key = (tf.as_dtype(case_dtype or dtype).name, kind)
    old = ERRORS.get(key, (0.0, 0.0))
    ERRORS[key] = (max(old[0], float(np.nanmax(err))), max(old[1], float(np.nanmax(used))))


# ---------------------------------------------------------------------------
# The wheel


def built_wheel():
    """The wheel `make wheel` wrote (dist/gobn-*.whl); fails when there is not exactly one."""
    import glob

    wheels = glob.glob(os.path.join(REPO_ROOT, "dist", "gobn-*.whl"))
    if len(wheels) != 1:
        pytest.fail(f"expected one gobn wheel in dist/, found {wheels}: run `make wheel`", pytrace=False)
    return wheels[0]


# Logical channels-last shapes: (N, H, W, C) and (N, D, H, W, C).
SHAPES_4D = {
    "n1": (1, 5, 6, 7),
    "c1": (3, 4, 5, 1),
    "r1": (1, 1, 1, 6),
    "c3": (2, 5, 3, 3),
    "c13": (2, 3, 7, 13),
    "moderate": (4, 9, 11, 20),
    "n0": (0, 4, 5, 6),
    "c0": (2, 3, 4, 0),
    # Over 2 * 2^18 elements: large enough that gobn splits the work over goroutines;
    # odd sizes so the split does not fall on channel or row boundaries.
    "large": (5, 37, 61, 59),
}
SHAPES_5D = {
    "5d": (2, 3, 4, 5, 6),
    "5d_c13": (1, 2, 3, 4, 13),
    "5d_r1": (1, 1, 1, 1, 5),
    "5d_n0": (0, 2, 3, 4, 5),
    "5d_large": (2, 5, 17, 19, 43),
}
