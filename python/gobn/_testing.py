"""The accuracy contract of docs/design.md and the cases it is checked on,
in one place for Python.

The tolerance table (generated from Go's internal/tolerance), the float64
references of the ops' formulas and the layout helpers they need, the
comparisons (tolerance_used, accuracy_excess, the asserts), the ops' cases
and seeded inputs on a device (cases, fused_inputs, global_norm_inputs) and
the one way to run stock's deprecated BatchNormWithGlobalNormalizationGrad
(global_norm_session) live here, once: python_tests/support.py (the pytest
suite's helpers), the package's smoke tests, tools/golden.py,
examples/demo.py, bench/calls.py and bench/gpu_calls.py import them. It is a
module of the package rather than a file of python_tests/ because the tools,
the benchmarks and the smoke tests of an installed wheel are not run from
the checkout's tests; nothing else in
the package uses it.

An element passes when ``|got - want| <= atol * max|want| + rtol * |want|``,
with ``max|want|`` the largest finite magnitude of the output and (rtol, atol)
the dtype's row of TOLERANCES.
"""

import collections
import functools

import numpy as np
import tensorflow as tf

from gobn._opdefs_gen import CHANNELS_FIRST  # noqa: F401  (re-exported for the tests, tools and benchmarks)
from gobn._opdefs_gen import BY_KIND
from gobn._tolerance_gen import TOLERANCES  # (rtol, atol) per dtype name, from docs/design.md


def tolerance(dtype):
    """(rtol, atol) of dtype: a tf.DType or any name tf.as_dtype takes ("float", "half", ...);
    (0, 0), exact, for an integer dtype (a count)."""
    dtype = tf.as_dtype(dtype)
    return (0.0, 0.0) if dtype.is_integer else TOLERANCES[dtype.name]


def as_float64(value):
    """value (a tensor, variable or array-like of any float dtype) as a float64 numpy array."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def tolerance_bound(want, dtype):
    """The per-element bound atol*max|want| + rtol*|want| for dtype."""
    rtol, atol = tolerance(dtype)
    want = as_float64(want)
    scale = np.max(np.abs(want[np.isfinite(want)]), initial=0.0)
    return atol * scale + rtol * np.abs(want)


def assert_close(got, want, dtype, what="output"):
    """Asserts got matches want within dtype's tolerance, element-wise.

    Shapes must be equal; NaN must sit where want has NaN.
    """
    got, want = as_float64(got), as_float64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if got.size == 0:
        return
    err = np.abs(got - want)
    bound = tolerance_bound(want, dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    bad = ~(err <= bound) & ~both_nan
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1.0)), got.shape)
        raise AssertionError(
            f"{what} ({tf.as_dtype(dtype).name} tolerance): {bad.sum()} of {got.size} elements "
            f"out of tolerance; worst at {tuple(int(k) for k in i)}: got {got[i]!r}, want {want[i]!r}, "
            f"|err| {err[i]:.3g} > bound {bound[i]:.3g}; max |err| {np.nanmax(err):.3g}")


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
    dy = to_channels_last(as_float64(y_backprop), data_format)
    x = to_channels_last(as_float64(x), data_format)
    scale, mean, variance = (as_float64(a) for a in (scale, mean, variance))
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
    x, dy = as_float64(t), as_float64(backprop)
    m, v, gamma = (as_float64(a) for a in (m, v, gamma))
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
# Comparisons


def tolerance_used(got, want, dtype):
    """The largest |got - want| / (atol*max|want| + rtol*|want|) over the
    elements: at most 1 passes. NaN where want has NaN counts as equal;
    other NaN, or a difference where the bound is 0, as infinite; a shape
    mismatch is infinite, an empty output 0."""
    got, want = as_float64(got), as_float64(want)
    if got.shape != want.shape:
        return np.inf
    if got.size == 0:
        return 0.0
    err = np.where(np.isnan(got) & np.isnan(want), 0.0, np.abs(got - want))
    bound = tolerance_bound(want, dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return float(np.max(np.nan_to_num(used, nan=np.inf)))


def accuracy_excess(got, stock, reference, dtype):
    """The largest (|got - ref| - |stock - ref|) / tolerance bound of ref:
    at most 1 when got is as accurate as stock against the reference, give
    or take one tolerance."""
    got, stock, reference = as_float64(got), as_float64(stock), as_float64(reference)
    if got.size == 0:
        return 0.0
    bound = tolerance_bound(reference, dtype)
    excess = np.abs(got - reference) - np.abs(stock - reference)
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(bound > 0, excess / bound, np.where(excess > 0, np.inf, 0.0))
    return float(np.max(np.nan_to_num(used, nan=np.inf)))


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
    bad = ~(got_err <= stock_err + tolerance_bound(reference, dtype))
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, got_err - stock_err, -np.inf)), got.shape)
        raise AssertionError(
            f"{what}: less accurate than stock against the float64 reference at "
            f"{tuple(int(k) for k in i)}: gobn {got[i]!r}, stock {stock[i]!r}, reference "
            f"{reference[i]!r}; max gobn error {got_err.max():.3g}, max stock error {stock_err.max():.3g}")


# ---------------------------------------------------------------------------
# Cases: the ops' inputs on a device

EPSILON = 1e-3  # the cases' epsilon (and variance_epsilon)

def device_type(device):
    """"CPU" or "GPU": the type of a device name in any case ("GPU:0",
    "/device:CPU:0", "/DEVICE:GPU:0", or a tensor's full name)."""
    return device.upper().rsplit("DEVICE:", 1)[-1].strip("/").split(":")[0]


def dtypes_on(op, device):
    """The dtypes op's kernels take on device's type, as TensorFlow's specs
    name them (op: a record of gobn._opdefs_gen.OPS)."""
    return op.gpu_dtypes if device_type(device) == "GPU" else op.dtypes


def modes(op):
    """The modes of op's cases: its kind's MODES (gobn._kinds)."""
    from gobn import _kinds

    return _kinds.of(op.kind).MODES


class Case(collections.namedtuple("Case", "op dtype data_format mode shape_name shape")):
    """One case of an op: dtype (a tf.DType), data format, mode (one of its
    kind's MODES) and a named logical channels-last shape (N, [D,] H, W, C)."""

    __slots__ = ()

    @property
    def is_training(self):
        return self.mode == "training"

    @property
    def id(self):
        return f"{self.op.name.split('>')[-1]}-{self.dtype.name}-{self.data_format}-{self.mode}-{self.shape_name}"


def cases(op, device, shapes, dtypes=None):
    """op's cases on device: each dtype its kernels take there (or of those,
    the ones in dtypes) x data format x mode x each shape of shapes (a dict
    name -> logical shape) of the format's rank."""
    for name in dtypes_on(op, device):
        if dtypes is not None and name not in dtypes:
            continue
        for data_format in op.data_formats:
            for mode in modes(op):
                for shape_name, shape in shapes.items():
                    if len(shape) == len(data_format):
                        yield Case(op, tf.as_dtype(name), data_format, mode, shape_name, tuple(shape))


def stock_forward_reserve_spaces(x, scale, offset, epsilon, data_format):
    """Stock FusedBatchNormV3's training forward on the current device: its
    three reserve spaces. reserve_space_1 is the batch mean; reserve_space_2
    the *biased* batch variance on the CPU (batch_variance is
    Bessel-corrected) and 1/sqrt(variance + epsilon) on a GPU."""
    empty = tf.constant([], tf.float32)
    out = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=empty, variance=empty,
                                      epsilon=epsilon, data_format=data_format, is_training=True)
    return out.reserve_space_1, out.reserve_space_2, out.reserve_space_3


class FusedInputs:
    """A fused gradient's inputs on a device (fused_inputs), with what the
    float64 reference takes.

    inputs: the op's tensor inputs by name; attrs: epsilon, data_format,
    is_training; offset: the forward's offset (float32); mean, variance:
    the statistics as float64 arrays, the variance whatever the device's
    reserve_space_2 holds.
    """

    def __init__(self, inputs, attrs, offset, mean, variance):
        self.inputs, self.attrs, self.offset, self.mean, self.variance = inputs, attrs, offset, mean, variance

    def reference(self, is_training=None):
        """fused_grad_reference of the inputs: (x_backprop, scale_backprop,
        offset_backprop); is_training defaults to the attrs'."""
        attrs = self.attrs
        training = attrs["is_training"] if is_training is None else is_training
        return fused_grad_reference(self.inputs["y_backprop"], self.inputs["x"], self.inputs["scale"], self.mean,
                                    self.variance, attrs["epsilon"], training, attrs["data_format"])


def fused_inputs(op, dtype, data_format, is_training, shape, seed, device="CPU:0", epsilon=EPSILON,
                 forward_statistics=None, x_std=1.5):
    """Seeded inputs of a fused gradient op (a record of gobn._opdefs_gen.OPS)
    on device: x, y_backprop in dtype laid out as data_format from the
    logical channels-last shape (x of standard deviation x_std about a
    mean per channel), scale with both signs; returns FusedInputs.

    The statistics come from stock's training forward on the device where
    forward_statistics (default: is_training) and the batch is not empty:
    reserve_space_2 is then the variance on the CPU and the inverse standard
    deviation on a GPU, and FusedInputs.variance the variance either way.
    Otherwise they are drawn (a population's, or the replicas' of a
    synchronized batch norm). seed is anything np.random.default_rng takes.
    """
    rng = np.random.default_rng(seed)
    dtype = tf.as_dtype(dtype)
    channels = shape[-1]
    x = rng.standard_normal(shape) * x_std + rng.uniform(-1.0, 1.0, channels)
    y_backprop = rng.standard_normal(shape)
    scale = rng.uniform(0.5, 1.5, channels) * rng.choice([-1.0, 1.0], channels)
    offset = rng.standard_normal(channels)
    side = dtype if "U" not in op.attrs else tf.float32  # FusedBatchNormGrad has every input in T
    gpu = device_type(device) == "GPU"
    if forward_statistics is None:
        forward_statistics = is_training
    with tf.device(device):
        x = tf.constant(from_channels_last(x, data_format), dtype)
        y_backprop = tf.constant(from_channels_last(y_backprop, data_format), dtype)
        scale = tf.constant(scale, tf.float32)
        offset = tf.constant(offset, tf.float32)
        # what a forward without cuDNN's reserve space leaves (the CPU's is empty)
        reserve_space_3 = tf.zeros([]) if gpu else tf.constant([], tf.float32)
        if forward_statistics and np.prod(shape) > 0:
            # a format of x's rank: x may be 5-D under a 4-D format's name or 4-D under a 5-D one's,
            # which then says only where the channels are
            spatial = "DHW"[5 - len(shape):]
            forward_format = "NC" + spatial if data_format in CHANNELS_FIRST else "N" + spatial + "C"
            mean, reserve_space_2, reserve_space_3 = stock_forward_reserve_spaces(
                x, scale, offset, epsilon, forward_format)
            saved = as_float64(reserve_space_2)
            variance = 1.0 / (saved * saved) - np.float64(np.float32(epsilon)) if gpu else saved
            if gpu and not is_training:  # inference takes the variance itself
                reserve_space_2 = tf.constant(variance, tf.float32)
        else:
            mean = tf.constant(rng.uniform(-0.5, 0.5, channels), tf.float32)
            reserve_space_2 = tf.constant(rng.uniform(0.5, 2.0, channels), tf.float32)
            variance = as_float64(reserve_space_2)
        inputs = {"y_backprop": y_backprop, "x": x, "scale": tf.cast(scale, side),
                  "reserve_space_1": tf.cast(mean, side), "reserve_space_2": tf.cast(reserve_space_2, side)}
        if "reserve_space_3" in op.inputs:
            inputs["reserve_space_3"] = reserve_space_3
    attrs = {"epsilon": epsilon, "data_format": data_format, "is_training": is_training}
    return FusedInputs(inputs, attrs, offset, as_float64(mean), variance)


def global_norm_inputs(dtype, shape, seed, device="CPU:0"):
    """Seeded inputs (t, m, v, gamma, backprop) of
    BatchNormWithGlobalNormalizationGrad in dtype on device, of an NHWC shape."""
    rng = np.random.default_rng(seed)
    channels = shape[-1]
    mean = rng.uniform(-0.5, 0.5, channels)
    values = {
        "t": rng.standard_normal(shape) * 1.5 + mean,
        "m": mean,
        "v": rng.uniform(0.5, 2.0, channels),
        "gamma": rng.uniform(0.5, 1.5, channels),
        "backprop": rng.standard_normal(shape),
    }
    with tf.device(device):
        return {k: tf.constant(v, dtype) for k, v in values.items()}


# ---------------------------------------------------------------------------
# Samples: one case's call of its op and the outputs it must give


class Sample(collections.namedtuple("Sample", "inputs attrs expected stock")):
    """A case's call (sample): inputs, the op's tensor inputs by arg name;
    attrs, its attrs by name; expected, {output name: (float64 reference,
    the dtype whose tolerance applies)}; stock, the name of the stock twin
    (stock_op) that takes the same inputs and attrs, to record beside gobn,
    or None."""

    __slots__ = ()


def stock_op(name):
    """Stock's op called name as a function of its inputs and attrs by name,
    tf.raw_ops': an op internal to TensorFlow (its name starts with an
    underscore), which tf.raw_ops leaves out, gets one made from its
    registered OpDef as tf.load_op_library makes an op library's, which
    names its ops without the underscore in a graph (a name scope cannot
    start with one)."""
    if hasattr(tf.raw_ops, name):
        return getattr(tf.raw_ops, name)
    if name not in _STOCK_OPS:
        import importlib.machinery
        import importlib.util

        from tensorflow.core.framework import op_def_pb2
        from tensorflow.python.framework import _pywrap_python_op_gen, op_def_registry

        op_def = op_def_registry.get(name)
        if op_def is None:
            raise ValueError(f"TensorFlow registers no op {name}")
        module = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("gobn_stock_" + name, None))
        exec(_pywrap_python_op_gen.GetPythonWrappers(op_def_pb2.OpList(op=[op_def]).SerializeToString()),  # noqa: S102
             module.__dict__)
        _STOCK_OPS[name] = functools.partial(module.__dict__[name], name=name.lstrip("_"))
    return _STOCK_OPS[name]


_STOCK_OPS = {}


def stock_outputs(case, sample):
    """Stock's outputs of a sample of case on the CPU, by name: its stock
    twin's (sample.stock) run eagerly; None without one, or where stock
    has no CPU kernel of it (an internal op of the GPU, say). A kind whose
    twin runs otherwise, or gives no usable answer in some cases, says so
    in its own stock_outputs (gobn._kinds), which tools/golden.py calls
    instead."""
    if sample.stock is None:
        return None
    try:
        with tf.device("CPU:0"):
            result = stock_op(sample.stock)(**sample.inputs, **sample.attrs)
    except tf.errors.NotFoundError:  # "Could not find device for node": no CPU kernel
        return None
    return outputs_by_name(case.op, result, case.op.outputs)


def sync_inputs(case, seed, device):
    """The synchronized halves' inputs (fused_inputs of a training gradient
    with the replicas' statistics, drawn) and the training gradient's
    reference over them: (FusedInputs, x_backprop, sum_dy, sum_dy_xmu,
    count), the sums those of fused_grad_reference and count the rows. The
    sample builders of GradReduce and GradApply (gobn._kinds) share them."""
    made = fused_inputs(BY_KIND["FusedBatchNormGrad"][-1], case.dtype, case.data_format, True, case.shape, seed, device,
                        forward_statistics=False)
    x_backprop, scale_backprop, sum_dy = made.reference()
    sum_dy_xmu = scale_backprop * np.sqrt(made.variance + np.float64(np.float32(EPSILON)))
    count = int(np.prod(case.shape)) // case.shape[-1] if case.shape[-1] else 0
    return made, x_backprop, sum_dy, sum_dy_xmu, count


def sample(case, seed, device="CPU:0"):
    """The Sample of case (a Case) with seeded inputs on device, by its
    kind's sample builder (gobn._kinds)."""
    from gobn import _kinds

    if case.mode not in modes(case.op):
        raise ValueError(f"{case.op.name} has no mode {case.mode!r}: {modes(case.op)}")
    return _kinds.of(case.op.kind).sample(case, seed, device)


def outputs_by_name(op, result, names):
    """{name: output} of result, what op's wrapper returned (its outputs
    in op.outputs' order, or the one output), for each of names; a list
    output (op.lists) as its one tensor."""
    result = result if isinstance(result, (list, tuple)) else (result,)
    found = {name: result[op.outputs.index(name)] for name in names}
    return {name: value[0] if name in dict(op.lists) else value for name, value in found.items()}


# ---------------------------------------------------------------------------
# Stock's deprecated BatchNormWithGlobalNormalizationGrad


def global_norm_session(inputs, attrs, ops=(None,), feed=True, static_shapes=True):
    """A tf.compat.v1.Session over a graph of GraphDef producer version 8, in
    which stock's BatchNormWithGlobalNormalizationGrad (removed at version
    9, so it runs nowhere else) runs; returns (session, outputs, feed_dict),
    outputs[i] the list of ops[i]'s outputs (None: stock's op; any other op
    of its signature, gobn's say, beside it) for session.run(outputs[i], feed_dict).

    inputs: t, m, v, gamma, backprop (tensors or arrays); attrs:
    variance_epsilon, scale_after_normalization. With feed the inputs are
    placeholders of their shapes (of unknown shapes without static_shapes,
    so that bad shapes reach the kernel, InvalidArgumentError, not the
    shape function, ValueError); without, resource variables, initialized,
    which a run need not feed and grappler cannot fold away: for timing.
    """
    from tensorflow.python.framework import test_util

    arrays = {k: np.asarray(v.numpy() if isinstance(v, tf.Tensor) else v) for k, v in inputs.items()}
    graph = tf.Graph()
    test_util.set_producer_version(graph, 8)
    with graph.as_default():
        if feed:
            values = {k: tf.compat.v1.placeholder(tf.as_dtype(a.dtype), a.shape if static_shapes else None)
                      for k, a in arrays.items()}
        else:
            values = {k: tf.compat.v1.get_variable(k, initializer=a, use_resource=True).read_value()
                      for k, a in arrays.items()}
            init = tf.compat.v1.global_variables_initializer()
        outputs = [list((op or tf.raw_ops.BatchNormWithGlobalNormalizationGrad)(**values, **attrs)) for op in ops]
    session = tf.compat.v1.Session(graph=graph)
    if not feed:
        session.run(init)
    return session, outputs, {values[k]: a for k, a in arrays.items()} if feed else {}


def run_stock_global_norm_grad(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization,
                               static_shapes=True, op=None):
    """Stock's BatchNormWithGlobalNormalizationGrad (or op) in a graph of
    producer version 8 (global_norm_session): its outputs as numpy arrays."""
    inputs = dict(t=t, m=m, v=v, gamma=gamma, backprop=backprop)
    attrs = dict(variance_epsilon=variance_epsilon, scale_after_normalization=scale_after_normalization)
    session, (outputs,), feed = global_norm_session(inputs, attrs, ops=(op,), static_shapes=static_shapes)
    with session:
        return session.run(outputs, feed)
