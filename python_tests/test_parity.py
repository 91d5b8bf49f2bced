"""Parity of gobn's FusedBatchNormGrad, V2 and V3 with stock TensorFlow (CPU).

Parametrized over op x dtype x data_format x is_training x shape x execution
mode (eager, and tf.function with fully known input shapes). Every output is
compared with stock; where stock has no answer (is_training=False with a
channels-first format, which stock's CPU kernel rejects, and empty 5-D input,
for which stock returns a 4-D shape) it is compared with a float64 reference.
Every case is also checked against the float64 reference: gobn must be at
least as accurate as stock.
"""

import os
import zlib

import numpy as np
import pytest
import tensorflow as tf

from gobn._opdefs_gen import BY_KIND
from support import (
    CHANNELS_FIRST,
    EPSILON,
    assert_as_accurate,
    assert_close,
    cases,
    channel_axis,
    from_channels_last,
    fused_grad_reference,
    fused_inputs,
    op_table,
    record_error,
    run_in_function,
    SHAPES_4D,
    SHAPES_5D,
)

# The fused ops (gobn._opdefs_gen's records), oldest first, by their stock twin's name.
OPS = {op.stock: op for op in BY_KIND["FusedBatchNormGrad"]}
V1, V2, V3 = "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"


def _cases():
    shapes = {**SHAPES_4D, **SHAPES_5D}
    for op_key, op in OPS.items():
        for case in cases(op, "CPU:0", shapes):
            yield pytest.param(op_key, case.dtype, case.data_format, case.is_training, case.shape,
                               id=f"{op_key}-{case.dtype.name}-{case.data_format}-{case.mode}-{case.shape_name}")


def make_inputs(op, dtype, data_format, is_training, shape, seed):
    """The op's tensor inputs for a logical channels-last shape (fused_inputs):
    training reserve spaces from stock's forward pass (batch mean and biased
    variance), inference ones a plausible population mean and variance."""
    return fused_inputs(op, dtype, data_format, is_training, shape, seed).inputs


def run_eager(fn, inputs, attrs):
    return list(fn(**inputs, **attrs))


def stock_has_answer(is_training, data_format, x):
    if not is_training and data_format in CHANNELS_FIRST:
        return False  # "only support NHWC tensor format for now"
    if x.shape.rank == 5 and x.shape.num_elements() == 0:
        return False  # stock returns a 4-D x_backprop for empty 5-D input
    return True


# "over_y_backprop" and "over_x" run in a tf.function where that input is a
# fresh tensor only the op reads, so that x_backprop takes over its buffer
# (see run_in_function).
IN_PLACE = {"eager": (), "function": (), "over_y_backprop": ("y_backprop",), "over_x": ("x",)}


@pytest.mark.parametrize("mode", list(IN_PLACE))
@pytest.mark.parametrize("op_key, dtype, data_format, is_training, shape", list(_cases()))
def test_fused_batch_norm_grad_parity(gobn, op_key, dtype, data_format, is_training, shape, mode, request):
    seed = zlib.crc32(request.node.callspec.id.rsplit("-", 1)[0].encode())
    check_fused_parity(gobn, op_key, dtype, data_format, is_training, shape, mode, seed)


# A float32 training gradient whose x_backprop has an aligned buffer of its
# own of at least the plan's stream_bytes (a quarter of the last-level cache
# it counts on, unless set) is written with non-temporal stores when its
# channels-last rows or channels-first planes are whole vectors, as here:
# C = 256, H·W = 2048. In place (over_y_backprop) it is not. The test sets
# stream_bytes below the tensor's 8 MiB (gobnCPUPlan), so that it streams
# whatever the machine's cache. The Go tests check which calls stream; these
# check the outcome through TensorFlow, where the buffers are TensorFlow's.
@pytest.fixture
def streaming_plan(gobn):
    """The CPU kernels' tuning with stream_bytes=4096 for the test, the
    tuning before it after."""
    import ctypes
    import json

    from gobn import _library

    fn = _library.handle().gobnCPUPlan
    fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_char_p]

    def plan(spec):
        return json.loads(_library._take_string(fn(spec.encode() if spec is not None else None)))

    before = plan(None)["tuning"]
    assert "stream_bytes=4096" in plan("stream_bytes=4096")["tuning"]
    yield
    plan(before)


@pytest.mark.parametrize("mode", ["eager", "function", "over_y_backprop"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_streamed_x_backprop_parity(gobn, streaming_plan, data_format, mode):
    check_fused_parity(gobn, V3, tf.float32, data_format, True, (4, 32, 64, 256), mode, seed=53)


def check_fused_parity(gobn, op_key, dtype, data_format, is_training, shape, mode, seed):
    """Runs gobn's op in mode and checks its outputs against stock and the float64 reference."""
    op = OPS[op_key]
    inputs = make_inputs(op, dtype, data_format, is_training, shape, seed)
    attrs = {"epsilon": EPSILON, "data_format": data_format, "is_training": is_training}
    gobn_op = getattr(gobn, op.wrapper)

    before = {k: v.numpy().copy() for k, v in inputs.items()}
    if mode == "eager":
        got = run_eager(gobn_op, inputs, attrs)
        static_shapes = None
    else:
        got, static_shapes = run_in_function(gobn_op, inputs, attrs, IN_PLACE[mode])

    for name, value in before.items():
        np.testing.assert_array_equal(inputs[name].numpy(), value, err_msg=f"gobn changed its input {name}")

    x = inputs["x"]
    channels = x.shape[channel_axis(data_format, x.shape.rank)]
    side_dtype = dtype if "U" not in op.attrs else tf.float32
    want_shapes = [x.shape, [channels], [channels], [0], [0]]
    want_dtypes = [dtype, side_dtype, side_dtype, side_dtype, side_dtype]
    assert len(got) == 5
    for i, (tensor, want_shape, want_dtype) in enumerate(zip(got, want_shapes, want_dtypes)):
        assert tensor.dtype == want_dtype, f"output {i}: dtype {tensor.dtype.name}, want {want_dtype.name}"
        assert tensor.shape.as_list() == list(want_shape), f"output {i}: shape {tensor.shape}, want {want_shape}"
        if static_shapes is not None:
            assert static_shapes[i].is_fully_defined() and static_shapes[i].as_list() == list(want_shape), (
                f"output {i}: static shape {static_shapes[i]} in the traced graph, want {list(want_shape)}")

    reference = fused_grad_reference(
        inputs["y_backprop"], x, inputs["scale"], inputs["reserve_space_1"], inputs["reserve_space_2"],
        EPSILON, is_training, data_format)
    # Each output is judged by its own dtype's tolerance: x_backprop by T's, the
    # float32 scale and offset backprops by float32's (both sides compute them
    # in float32 or better from the same rounded inputs).
    names = ("x_backprop", "scale_backprop", "offset_backprop")
    kinds = ("x_backprop", "scale/offset_backprop", "scale/offset_backprop")
    if stock_has_answer(is_training, data_format, x):
        stock = list(getattr(tf.raw_ops, op.stock)(**inputs, **attrs))
        for i, name in enumerate(names):
            record_error(want_dtypes[i], f"fused {kinds[i]} vs stock", got[i], stock[i], case_dtype=dtype)
            assert_close(got[i], stock[i], want_dtypes[i], f"{name} vs stock")
            assert_as_accurate(got[i], stock[i], reference[i], want_dtypes[i], f"{name} vs float64 reference")
    else:
        for i, name in enumerate(names):
            record_error(want_dtypes[i], f"fused {kinds[i]} vs f64 ref (no stock)", got[i], reference[i],
                         case_dtype=dtype)
            assert_close(got[i], reference[i], want_dtypes[i], f"{name} vs float64 reference")


# ---------------------------------------------------------------------------
# Stock's kernel accepts rank 5 with NHWC/NCHW and rank 4 with NDHWC/NCDHW
# eagerly (only the channel axis matters); gobn follows the kernel.

MIXED_RANK_CASES = [
    pytest.param(V1, "NHWC", (2, 3, 4, 5, 6), id="v1-NHWC-rank5"),
    pytest.param(V2, "NCHW", (2, 3, 4, 5, 6), id="v2-NCHW-rank5"),
    pytest.param(V3, "NHWC", (2, 3, 4, 5, 6), id="v3-NHWC-rank5"),
    pytest.param(V3, "NCHW", (2, 3, 4, 5, 6), id="v3-NCHW-rank5"),
    pytest.param(V3, "NDHWC", (2, 3, 4, 5), id="v3-NDHWC-rank4"),
    pytest.param(V3, "NCDHW", (2, 3, 4, 5), id="v3-NCDHW-rank4"),
]


@pytest.mark.parametrize("op_key, data_format, layout_shape", MIXED_RANK_CASES)
def test_mixed_rank_and_format_eager(gobn, op_key, data_format, layout_shape):
    op = OPS[op_key]
    # layout_shape is in data_format's layout; build channels-last logical shape.
    logical = layout_shape[:1] + layout_shape[2:] + layout_shape[1:2] if data_format in CHANNELS_FIRST else layout_shape
    inputs = make_inputs(op, tf.float32, data_format, True, logical, seed=7)
    assert inputs["x"].shape.as_list() == list(layout_shape)
    attrs = {"epsilon": EPSILON, "data_format": data_format, "is_training": True}
    got = list(getattr(gobn, op.wrapper)(**inputs, **attrs))
    stock = list(getattr(tf.raw_ops, op.stock)(**inputs, **attrs))
    for i, name in enumerate(("x_backprop", "scale_backprop", "offset_backprop")):
        assert_close(got[i], stock[i], tf.float32, name)
    assert got[3].shape == [0] and got[4].shape == [0]


@pytest.mark.parametrize("reserve_space_3", [[], [[1.0, 2.0], [3.0, 4.0]], 5.0], ids=["empty", "2d", "scalar"])
def test_reserve_space_3_is_ignored(gobn, reserve_space_3):
    """V3's reserve_space_3 is not read on CPU, whatever its shape (as stock)."""
    inputs = make_inputs(OPS[V3], tf.float32, "NHWC", True, (2, 3, 4, 5), seed=13)
    inputs["reserve_space_3"] = tf.constant(reserve_space_3, tf.float32)
    got = gobn.gobn_fused_batch_norm_grad_v3(**inputs, epsilon=EPSILON)
    stock = tf.raw_ops.FusedBatchNormGradV3(**inputs, epsilon=EPSILON)
    for i in range(3):
        assert_close(got[i], stock[i], tf.float32, f"output {i}")


# ---------------------------------------------------------------------------
# Attr defaults and signatures


@pytest.mark.parametrize("op_key", list(OPS))
def test_attr_defaults_match_stock(gobn, op_key):
    """Called with tensors only, gobn uses stock's defaults (epsilon 1e-4, NHWC, training)."""
    op = OPS[op_key]
    inputs = make_inputs(op, tf.float32, "NHWC", True, (2, 3, 4, 5), seed=11)
    got = list(getattr(gobn, op.wrapper)(**inputs))
    stock = list(getattr(tf.raw_ops, op.stock)(**inputs))
    for i in range(3):
        assert_close(got[i], stock[i], tf.float32, f"output {i}")


def _op_def(name):
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(name)
    assert op_def is not None, f"op {name} is not registered"
    return op_def


# The dtypes gobn's ops allow beyond their stock twins' (docs/design.md's
# differences), by op and type attr.
MORE_DTYPES = {"Gobn>FusedBatchNormGradEx": {"T": ["bfloat16"]}}


@pytest.mark.parametrize("name, stock_name", [(row["name"], row["stock"]) for row in op_table() if row["stock"]])
def test_op_signature_matches_stock(gobn, name, stock_name):
    """Inputs, outputs (a list's number attr too), attrs, attr defaults,
    minimums and allowed values equal stock's, but the dtypes MORE_DTYPES
    adds."""
    ours, stock = _op_def(name), _op_def(stock_name)
    for field in ("input_arg", "output_arg"):
        assert [(a.name, a.type, a.type_attr, a.number_attr) for a in getattr(ours, field)] == [
            (a.name, a.type, a.type_attr, a.number_attr) for a in getattr(stock, field)], field
    ours_attrs = {a.name: a for a in ours.attr}
    stock_attrs = {a.name: a for a in stock.attr}
    assert sorted(ours_attrs) == sorted(stock_attrs)
    more = MORE_DTYPES.get(ours.name, {})
    for attr_name, attr in stock_attrs.items():
        mine = ours_attrs[attr_name]
        assert mine.type == attr.type, attr_name
        assert mine.default_value == attr.default_value, f"{attr_name} default"
        assert (mine.has_minimum, mine.minimum) == (attr.has_minimum, attr.minimum), f"{attr_name} minimum"
        # gobn registers kernels for a subset of numbertype; the op's allowed set must match stock.
        allowed = list(mine.allowed_values.list.type)
        for dtype in more.get(attr_name, []):
            allowed.remove(tf.as_dtype(dtype).as_datatype_enum)
        assert allowed == list(attr.allowed_values.list.type), f"{attr_name} allowed dtypes"
        assert mine.allowed_values.list.s == attr.allowed_values.list.s, f"{attr_name} allowed values"


# ---------------------------------------------------------------------------
# The stock facts the suite relies on, checked on the running TensorFlow.


def test_stock_forward_reserve_spaces_are_mean_and_biased_variance():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    empty = tf.constant([], tf.float32)
    out = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=np.ones(5, np.float32), offset=np.zeros(5, np.float32),
        mean=empty, variance=empty, epsilon=EPSILON, is_training=True)
    flat = x.reshape(-1, 5).astype(np.float64)
    np.testing.assert_allclose(out.reserve_space_1, flat.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.reserve_space_2, flat.var(0), rtol=1e-5)  # biased
    np.testing.assert_allclose(out.batch_variance, flat.var(0, ddof=1), rtol=1e-5)  # Bessel-corrected


def test_stock_rejects_channels_first_inference():
    x = tf.ones((1, 2, 3, 3))
    c = tf.ones((2,))
    with pytest.raises(tf.errors.InvalidArgumentError, match="only support NHWC"):
        tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=x, x=x, scale=c, reserve_space_1=c, reserve_space_2=c, reserve_space_3=c,
            data_format="NCHW", is_training=False)


# ---------------------------------------------------------------------------
# Gradients: gobn's V3 op, fed from stock's forward outputs, equals autodiff.


@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("api", ["raw_ops", "compat_v1"])
def test_v3_matches_autodiff(gobn, api, data_format, is_training):
    rng = np.random.default_rng(5)
    shape = (3, 5, 6, 7) if data_format == "NHWC" else (3, 7, 5, 6)
    channels = 7
    x = tf.constant(rng.standard_normal(shape) + 0.5, tf.float32)
    upstream = tf.constant(rng.standard_normal(shape), tf.float32)
    scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
    offset = tf.constant(rng.standard_normal(channels), tf.float32)
    population_mean = tf.constant(rng.standard_normal(channels) * 0.3, tf.float32)
    population_variance = tf.constant(rng.uniform(0.5, 2.0, channels), tf.float32)
    empty = tf.constant([], tf.float32)

    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        if api == "raw_ops":
            out = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset,
                mean=empty if is_training else population_mean,
                variance=empty if is_training else population_variance,
                epsilon=EPSILON, data_format=data_format, is_training=is_training)
            y = out.y
        else:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x, scale, offset,
                mean=None if is_training else population_mean,
                variance=None if is_training else population_variance,
                epsilon=EPSILON, data_format=data_format, is_training=is_training)
        loss = tf.reduce_sum(y * upstream)
    want = tape.gradient(loss, [x, scale, offset])

    # Feed the gradient as stock's own gradient function does: in training the
    # forward op's reserve spaces (batch mean, biased variance; compat.v1
    # returns the Bessel-corrected variance, so take them from the op itself),
    # in inference the population mean and variance the forward op was given.
    forward = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=scale, offset=offset,
        mean=empty if is_training else population_mean,
        variance=empty if is_training else population_variance,
        epsilon=EPSILON, data_format=data_format, is_training=is_training)
    if is_training:
        mean, variance = forward.reserve_space_1, forward.reserve_space_2
    else:
        mean, variance = population_mean, population_variance
    got = gobn.gobn_fused_batch_norm_grad_v3(
        y_backprop=upstream, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=variance,
        reserve_space_3=forward.reserve_space_3,
        epsilon=EPSILON, data_format=data_format, is_training=is_training)
    for name, g, w in zip(("x", "scale", "offset"), got[:3], want):
        assert_close(g, w, tf.float32, f"d loss / d {name}")


# ---------------------------------------------------------------------------
# Non-finite inputs propagate as in stock.


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_non_finite_inputs_propagate_like_stock(gobn, data_format, is_training, dtype):
    """NaN in x, Inf in y_backprop and a negative variance poison the same outputs as in stock.

    In inference x_backprop = dy*scale*c does not read x, so a NaN in x must
    not reach it.
    """
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 3, 4, 5))
    y_backprop = rng.standard_normal((2, 3, 4, 5))
    x[0, 1, 2, 3] = np.nan
    y_backprop[1, 0, 0, 1] = np.inf
    variance = rng.uniform(0.5, 2.0, 5)
    variance[4] = -1.0
    inputs = {
        "y_backprop": tf.constant(from_channels_last(y_backprop, data_format), dtype),
        "x": tf.constant(from_channels_last(x, data_format), dtype),
        "scale": tf.constant(rng.uniform(0.5, 1.5, 5), tf.float32),
        "reserve_space_1": tf.constant(rng.standard_normal(5), tf.float32),
        "reserve_space_2": tf.constant(variance, tf.float32),
        "reserve_space_3": tf.constant([], tf.float32),
    }
    attrs = {"epsilon": EPSILON, "data_format": data_format, "is_training": is_training}
    got = gobn.gobn_fused_batch_norm_grad_v3(**inputs, **attrs)
    if stock_has_answer(is_training, data_format, inputs["x"]):
        want = tf.raw_ops.FusedBatchNormGradV3(**inputs, **attrs)
    else:
        with np.errstate(invalid="ignore"):
            want = fused_grad_reference(
                inputs["y_backprop"], inputs["x"], inputs["scale"], inputs["reserve_space_1"],
                inputs["reserve_space_2"], EPSILON, is_training, data_format)
    for i, name in enumerate(("x_backprop", "scale_backprop", "offset_backprop")):
        g, w = got[i].numpy().astype(np.float64), np.asarray(want[i]).astype(np.float64)
        for kind, test in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
            mismatch = np.argwhere(test(g) != test(w))
            assert len(mismatch) == 0, (
                f"{name}: {kind} pattern differs from stock at {len(mismatch)} positions, first "
                f"{tuple(int(k) for k in mismatch[0])}: gobn {g[tuple(mismatch[0])]}, stock {w[tuple(mismatch[0])]}")
        finite = np.isfinite(w)
        assert_close(np.where(finite, g, 0.0), np.where(finite, w, 0.0), dtype if i == 0 else tf.float32,
                     f"{name} (finite part)")


# ---------------------------------------------------------------------------
# Results do not depend on how many goroutines share the work.

_WORKER_SCRIPT = r"""
import os, sys
import numpy as np
import tensorflow as tf
import gobn
lib = gobn.ops
data = dict(np.load(sys.argv[1]))
out = {}
for fmt in ("NHWC", "NCHW"):
    for training in (True, False):
        for dtype in ("float32", "float16"):
            key = f"{fmt}-{int(training)}-{dtype}"
            r = lib.gobn_fused_batch_norm_grad_v3(
                y_backprop=tf.constant(data[f"dy-{fmt}"], dtype), x=tf.constant(data[f"x-{fmt}"], dtype),
                scale=data["scale"], reserve_space_1=data[f"mean-{int(training)}"],
                reserve_space_2=data[f"variance-{int(training)}"], reserve_space_3=np.zeros([0], np.float32),
                epsilon=float(data["epsilon"]), data_format=fmt, is_training=training)
            for i in range(3):
                out[f"{key}-{i}"] = r[i].numpy().astype(np.float32)
g = lib.gobn_batch_norm_with_global_normalization_grad(
    t=data["x-NHWC"], m=data["mean-0"], v=data["variance-0"], gamma=data["scale"], backprop=data["dy-NHWC"],
    variance_epsilon=float(data["epsilon"]), scale_after_normalization=True)
for i in range(5):
    out[f"global-{i}"] = g[i].numpy()
# How the kernels split their work (capi's gobnSplitStats).
import ctypes, json
so = gobn._library.loaded()
so.gobnSplitStats.restype = ctypes.c_void_p
p = so.gobnSplitStats()
stats = json.loads(ctypes.string_at(p).decode())
ctypes.CDLL(None).free(ctypes.c_void_p(p))
for k, v in stats.items():
    out[f"split-{k}"] = np.int64(v)
np.savez(sys.argv[2], **out)
"""


@pytest.mark.parametrize("gomaxprocs", [1, 3, 7])
def test_results_independent_of_worker_count(gobn, gomaxprocs, tmp_path):
    """Runs gobn in a fresh process with GOMAXPROCS set, on tensors big enough for 14 workers.

    The library cuts a tensor into chunks of about 2^16 float32 elements (2^15
    half) whatever GOMAXPROCS, and gives it a worker per 2^18 (2^17 half), so
    these split over as many workers as GOMAXPROCS and the cores allow, as
    the library's split statistics must show."""
    import subprocess
    import sys

    from support import child_env, global_norm_grad_reference

    rng = np.random.default_rng(23)
    shape = (4, 97, 95, 100)  # 3,685,600 elements: 14 times 2^18 float32 elements and more, an uneven split
    channels = shape[-1]
    x = (rng.standard_normal(shape) + rng.uniform(-1, 1, channels)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, channels).astype(np.float32)
    data = {"x-NHWC": x, "dy-NHWC": dy, "x-NCHW": np.moveaxis(x, -1, 1).copy(),
            "dy-NCHW": np.moveaxis(dy, -1, 1).copy(), "scale": scale, "epsilon": np.float32(EPSILON),
            "mean-0": rng.uniform(-1, 1, channels).astype(np.float32),
            "variance-0": rng.uniform(0.5, 2.0, channels).astype(np.float32)}
    flat = x.reshape(-1, channels).astype(np.float64)
    data["mean-1"], data["variance-1"] = flat.mean(0).astype(np.float32), flat.var(0).astype(np.float32)
    np.savez(tmp_path / "in.npz", **data)

    env = child_env(GOMAXPROCS=str(gomaxprocs))
    subprocess.run([sys.executable, "-c", _WORKER_SCRIPT, str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], env=env, check=True, timeout=300)
    got = np.load(tmp_path / "out.npz")

    for fmt in ("NHWC", "NCHW"):
        for training in (True, False):
            for dtype in (tf.float32, tf.float16):
                key = f"{fmt}-{int(training)}-{dtype.name}"
                inputs = {
                    "y_backprop": tf.constant(data[f"dy-{fmt}"], dtype), "x": tf.constant(data[f"x-{fmt}"], dtype),
                    "scale": scale, "reserve_space_1": data[f"mean-{int(training)}"],
                    "reserve_space_2": data[f"variance-{int(training)}"],
                }
                attrs = {"epsilon": EPSILON, "data_format": fmt, "is_training": training}
                if stock_has_answer(training, fmt, inputs["x"]):
                    want = tf.raw_ops.FusedBatchNormGradV2(**inputs, **attrs)
                else:
                    want = fused_grad_reference(
                        inputs["y_backprop"], inputs["x"], scale, inputs["reserve_space_1"],
                        inputs["reserve_space_2"], EPSILON, training, fmt)
                for i in range(3):
                    assert_close(got[f"{key}-{i}"], want[i], dtype if i == 0 else tf.float32,
                                 f"GOMAXPROCS={gomaxprocs} {key} output {i}")
    want = global_norm_grad_reference(
        data["x-NHWC"], data["mean-0"], data["variance-0"], scale, data["dy-NHWC"], EPSILON, True)
    for i in range(5):
        assert_close(got[f"global-{i}"], want[i], tf.float32, f"GOMAXPROCS={gomaxprocs} global-norm output {i}")
    # The calls did split: 14 ranges or more (chunks, or by-channel units), as
    # many workers as GOMAXPROCS and the cores allow.
    assert int(got["split-calls"]) > 0, "no call split its work"
    assert int(got["split-max_ranges"]) >= 14
    cores = len(os.sched_getaffinity(0))
    assert int(got["split-max_workers"]) == min(gomaxprocs, cores, int(got["split-max_ranges"]))
