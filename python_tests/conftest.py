"""Shared fixtures and helpers for gobn's pytest suite.

The suite compares gobn's ops with stock TensorFlow's CPU kernels. Stock's
reference is the Eigen kernel, so oneDNN is switched off before TensorFlow is
imported. Helpers are plain functions that test modules import with
``from conftest import ...`` (pytest puts this folder on ``sys.path``).
"""

import os
import sys

# True in the pytest process; False in a child script that imports this module.
_IN_PYTEST = "_pytest" in sys.modules

# Must be set before TensorFlow is imported anywhere in the process.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The Python package (python/gobn) loads the library the fixture below loads:
# a second copy of libgobn.so from another path would register every kernel
# twice in this process and break them all.
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GOBN_LIBRARY", os.path.join(_REPO, "build", "libgobn.so"))
sys.path.insert(0, os.path.join(_REPO, "python"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# Two logical CPU devices, for the tf.distribute.MirroredStrategy tests
# (test_keras.py, test_sync_batch_norm.py). It must happen before TensorFlow
# initializes its devices, so here, before any test runs; other tests run on
# /CPU:0 as before. Only in the pytest process: a child script that imports
# this module (test_leaks.py's, which measures memory) keeps TensorFlow's
# single CPU device.
LOGICAL_CPUS = 2
if _IN_PYTEST:
    try:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * LOGICAL_CPUS)
    except RuntimeError:  # devices initialized already: the tests that need two say so
        pass

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_LIBRARY = os.path.join(REPO_ROOT, "build", "libgobn.so")

# (rtol, atol) per dtype, from docs/design.md: an output passes when
# |got - want| <= atol * max|want| + rtol * |want| element-wise.
TOLERANCES = {
    tf.float32: (1e-4, 1e-5),
    tf.float16: (2e-3, 2e-3),
    tf.bfloat16: (1.6e-2, 1.6e-2),
    tf.float64: (1e-12, 1e-12),
}

CHANNELS_FIRST = ("NCHW", "NCDHW")


def library_path():
    """Returns the plugin's path: $GOBN_LIBRARY, else the repo's build/libgobn.so."""
    return os.environ.get("GOBN_LIBRARY") or DEFAULT_LIBRARY


@pytest.fixture(scope="session")
def gobn():
    """The loaded gobn op library. A missing library fails loudly: never skip."""
    path = library_path()
    if not os.path.exists(path):
        pytest.fail(
            f"gobn library not found at {path}: run `make` in {REPO_ROOT} "
            "(or point GOBN_LIBRARY at a built libgobn.so)",
            pytrace=False,
        )
    return tf.load_op_library(path)


@pytest.fixture(scope="session")
def mirrored_strategy():
    """tf.distribute.MirroredStrategy over the two logical CPUs, one per process.

    Every test shares it: strategies made side by side in one process number
    their collective all-reduces alike, and one's all-reduce of float64 under
    a key another used for float32 aborts every collective after it.
    """
    devices = tf.config.list_logical_devices("CPU")
    if len(devices) < LOGICAL_CPUS:
        pytest.fail(f"{LOGICAL_CPUS} logical CPU devices are needed: conftest.py sets them up before "
                    f"TensorFlow initializes its devices, but found {devices}", pytrace=False)
    return tf.distribute.MirroredStrategy([d.name for d in devices[:LOGICAL_CPUS]])


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


def _as_float64(value):
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def tolerance_bound(want, dtype):
    """The per-element bound atol*max|want| + rtol*|want| for dtype."""
    rtol, atol = TOLERANCES[tf.as_dtype(dtype)]
    want = _as_float64(want)
    scale = np.max(np.abs(want[np.isfinite(want)]), initial=0.0)
    return atol * scale + rtol * np.abs(want)


def assert_close(got, want, dtype, what="output"):
    """Asserts got matches want within dtype's tolerance, element-wise.

    Shapes must be equal; NaN must sit where want has NaN.
    """
    got, want = _as_float64(got), _as_float64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if got.size == 0:
        return
    err = np.abs(got - want)
    bound = tolerance_bound(want, dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    bad = ~(err <= bound) & ~both_nan
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1.0)), got.shape)
        pytest.fail(
            f"{what} ({tf.as_dtype(dtype).name} tolerance): {bad.sum()} of {got.size} elements "
            f"out of tolerance; worst at {tuple(int(k) for k in i)}: got {got[i]!r}, want {want[i]!r}, "
            f"|err| {err[i]:.3g} > bound {bound[i]:.3g}; max |err| {np.nanmax(err):.3g}",
            pytrace=False,
        )


def max_abs_error(got, want):
    """max |got - want| (0 for empty tensors)."""
    got, want = _as_float64(got), _as_float64(want)
    return float(np.max(np.abs(got - want), initial=0.0))


def assert_as_accurate(got, stock, reference, dtype, what="output"):
    """Asserts got is no further from the float64 reference than stock is.

    Element-wise |got - ref| <= |stock - ref| + atol*max|ref| + rtol*|ref|:
    gobn may differ from the exact answer only by as much as stock does, plus
    one tolerance of slack.
    """
    got, stock, reference = _as_float64(got), _as_float64(stock), _as_float64(reference)
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
# Layouts


def channel_axis(data_format, rank):
    return 1 if data_format in CHANNELS_FIRST else rank - 1


def to_channels_last(array, data_format):
    """Moves the channel axis of a data_format-laid-out array to the end."""
    return np.moveaxis(array, 1, -1) if data_format in CHANNELS_FIRST else array


def from_channels_last(array, data_format):
    """Lays out a channels-last array as data_format."""
    return np.moveaxis(array, -1, 1) if data_format in CHANNELS_FIRST else array


def channels_last_format(rank):
    return "NHWC" if rank == 4 else "NDHWC"


# ---------------------------------------------------------------------------
# float64 references (docs/design.md formulas)


def fused_grad_reference(y_backprop, x, scale, mean, variance, epsilon, is_training, data_format):
    """Exact float64 FusedBatchNormGrad*: (x_backprop, scale_backprop, offset_backprop).

    With c = 1/sqrt(variance + epsilon) and sums over all but the channel axis:
      offset_backprop = sum(dy)
      training:  scale_backprop = sum(dy*(x-mean))*c,
                 x_backprop = scale*c*(dy - sum(dy)/R - (x-mean)*c^2*sum(dy*(x-mean))/R)
      inference: scale_backprop = c*sum(dy*(x-mean)), x_backprop = dy*scale*c
    """
    dy = to_channels_last(_as_float64(y_backprop), data_format)
    x = to_channels_last(_as_float64(x), data_format)
    scale, mean, variance = (_as_float64(a) for a in (scale, mean, variance))
    axes = tuple(range(dy.ndim - 1))
    r = int(np.prod(dy.shape[:-1]))
    c = 1.0 / np.sqrt(variance + np.float64(np.float32(epsilon)))
    centered = x - mean
    sum_dy = dy.sum(axis=axes)
    sum_dy_centered = (dy * centered).sum(axis=axes)
    offset_backprop = sum_dy
    scale_backprop = sum_dy_centered * c
    if not is_training:
        x_backprop = dy * scale * c
    elif r == 0:
        x_backprop = np.zeros_like(dy)
    else:
        x_backprop = scale * c * (dy - sum_dy / r - centered * c * c * sum_dy_centered / r)
    return from_channels_last(x_backprop, data_format), scale_backprop, offset_backprop


def global_norm_grad_reference(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization):
    """Exact float64 BatchNormWithGlobalNormalizationGrad: (dx, dm, dv, db, dg).

    With s = 1/sqrt(v+eps), g = gamma (or 1 without scale_after_normalization):
      db = sum(dy), dx = dy*s*g, dm = -db*s*g, dg = s*sum(dy*(x-m)) (0 without scaling),
      dv = -0.5*s^3*g*sum(dy*(x-m)).
    """
    x, dy = _as_float64(t), _as_float64(backprop)
    m, v, gamma = (_as_float64(a) for a in (m, v, gamma))
    axes = (0, 1, 2)
    s = 1.0 / np.sqrt(v + np.float64(np.float32(variance_epsilon)))
    g = gamma if scale_after_normalization else np.ones_like(gamma)
    db = dy.sum(axis=axes)
    sum_dy_centered = (dy * (x - m)).sum(axis=axes)
    dx = dy * s * g
    dm = -db * s * g
    dv = -0.5 * s**3 * g * sum_dy_centered
    dg = s * sum_dy_centered if scale_after_normalization else np.zeros_like(gamma)
    return dx, dm, dv, db, dg


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

_ERRORS = {}


def record_error(dtype, kind, got, want, case_dtype=None):
    """Records max|got - want| and the largest fraction of dtype's tolerance it used.

    Rows are labelled with case_dtype (the case's T) when given, else dtype.
    """
    got, want = _as_float64(got), _as_float64(want)
    if got.size == 0:
        return
    err = np.abs(got - want)
    bound = tolerance_bound(want, dtype)
    used = np.where(bound > 0, err / np.where(bound > 0, bound, 1.0), np.where(err > 0, np.inf, 0.0))
    key = (tf.as_dtype(case_dtype or dtype).name, kind)
    old = _ERRORS.get(key, (0.0, 0.0))
    _ERRORS[key] = (max(old[0], float(np.nanmax(err))), max(old[1], float(np.nanmax(used))))


def pytest_terminal_summary(terminalreporter):
    if not _ERRORS:
        return
    terminalreporter.section("gobn: largest differences seen")
    for (dtype, kind), (err, used) in sorted(_ERRORS.items()):
        terminalreporter.write_line(f"{dtype:9s} {kind:52s} max|err| {err:.3g}  ({used:.2f} of tolerance)")
