"""Helpers for gobn's pytest suite, imported with ``from support import ...``.

conftest.py keeps the fixtures and hooks; everything else the tests share is
here. The tolerance table, the float64 references, the comparisons, the
ops' cases and inputs and the runner of stock's deprecated op are the
package's (python/gobn/_testing.py), which the tools, the benchmarks and the
demo use too; this module re-exports them.

Importing this module first thing (conftest.py does, and so do the child
scripts the tests start) sets up the process: oneDNN off, so that stock's
reference is the Eigen kernel, before TensorFlow is imported, and the
package on sys.path, as a user of the checkout has it (``PYTHONPATH=python``),
and the repository root after everything else on it, so that a test imports
the checkout's tools, benchmarks and examples as the Makefile runs them, as
modules (``tools.cuda_fatbin``, ``bench.machine``, ``examples.multiworker.train``).
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
sys.path.append(REPO_ROOT)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from gobn._testing import (  # noqa: E402,F401  (re-exported for the tests)
    CHANNELS_FIRST,
    EPSILON,
    TOLERANCES,
    as_float64,
    assert_as_accurate,
    assert_close,
    cases,
    channel_axis,
    channels_last_format,
    device_type,
    dtypes_on,
    fused_grad_reference,
    fused_inputs,
    from_channels_last,
    global_norm_grad_reference,
    global_norm_inputs,
    run_stock_global_norm_grad,
    sample,
    stock_forward_reserve_spaces,
    to_channels_last,
    tolerance,
    tolerance_bound,
    tolerance_used,
)


# Every op's facts as the tests expect them, one row an op: written by hand
# apart from opdef, so that the tests that list every op check opdef, the
# registry and TensorFlow against it (the Go tests read the same file).
OP_TABLE_FILE = os.path.join(REPO_ROOT, "opdef", "testdata", "ops.json")


def op_table():
    """The rows of opdef/testdata/ops.json (its "about" says what each field
    is), in order; asserts that they name the ops the library registers, so
    that an op without a row fails every test that iterates them."""
    import json

    from gobn._opdefs_gen import OP_NAMES

    with open(OP_TABLE_FILE) as f:
        rows = json.load(f)["ops"]
    assert [row["name"] for row in rows] == list(OP_NAMES), f"{OP_TABLE_FILE} must list every op gobn registers"
    return rows


def rejected(op, inputs):
    """inputs of op (a record of gobn._opdefs_gen.OPS) with its first
    per-channel input one element too long, which every op rejects with
    InvalidArgumentError."""
    name = next(name for name, _, ranks in op.xla_inputs if ranks == (1,))
    v = inputs[name]
    return dict(inputs, **{name: tf.concat([v, tf.zeros([1], v.dtype)], 0)})


def sample_calls(fn_of, shape, every_case=False):
    """(fn, kwargs, valid) for every op of the op table, from its kind's
    sample builder (gobn._testing.sample) on an activation of the logical
    channels-last shape: a valid call of each of its cases on the CPU
    (every_case) or of its first, and the same call with rejected inputs.
    fn_of(op) is the function that runs op (its wrapper in gobn.ops, say)."""
    from gobn._opdefs_gen import BY_NAME

    calls = []
    for row in op_table():
        op = BY_NAME[row["name"]]
        found = list(cases(op, "CPU:0", {"call": shape}))
        for i, case in enumerate(found if every_case else found[:1]):
            made = sample(case, seed=i)
            calls += [(fn_of(op), dict(made.inputs, **made.attrs), True),
                      (fn_of(op), dict(rejected(op, made.inputs), **made.attrs), False)]
    return calls


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


# gobn's gradient ops of a batch norm (gobn.fused_batch_norm, the Keras layers,
# enable()'s gradients): FusedBatchNormGradEx where the batch norm's output
# goes through a ReLU or ReLU6 alone (gobn._fusion), else FusedBatchNormGradV3.
BATCH_NORM_GRAD_OPS = ("Gobn>FusedBatchNormGradV3", "Gobn>FusedBatchNormGradEx")


def batch_norm_grad_calls(device="CPU"):
    """The calls of BATCH_NORM_GRAD_OPS so far on device (CPU, XLA_CPU)."""
    import gobn

    calls = gobn.kernel_calls()
    return sum(calls.get(op, {}).get(device, 0) for op in BATCH_NORM_GRAD_OPS)


def child_env(**extra):
    """The environment of a child Python process that uses gobn as a user of
    the checkout does: the package on PYTHONPATH, before what the parent had
    there (a TensorFlow that PYTHONPATH provides, as the TensorFlow GPU
    kit's env.sh sets it), no GOBN_LIBRARY."""
    env = {k: v for k, v in os.environ.items() if k != "GOBN_LIBRARY"}
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, os.path.dirname(os.path.abspath(__file__))] +
                                        [p for p in [os.environ.get("PYTHONPATH")] if p])
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
    key = (tf.as_dtype(case_dtype or dtype).name, kind)
    old = ERRORS.get(key, (0.0, 0.0))
    ERRORS[key] = (max(old[0], float(np.nanmax(np.abs(got - want)))), max(old[1], tolerance_used(got, want, dtype)))


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
