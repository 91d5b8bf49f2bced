"""Child process of test_hostile.py: runs one batch of hostile calls of gobn's ops.

Usage: python hostile_child.py BATCH [SEED COUNT]

Batches: fused, global (hand-written adversarial cases), nan (NaN, Inf and
bad epsilons beside stock TensorFlow), function (tf.function with unknown and
partly known shapes), random (COUNT random calls of every op the library
registers, seeded).

Each case prints two JSON lines on stdout, {"start": id} before it runs and
its result after, so that if the process dies the parent knows which case
killed it. A result is {"id", "outcome": "ok" | "error", "class",
"message", "problems": [...]}; a case passes when problems is empty. The last
line is {"done": true, "cases": n}.
"""

import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# support sets TF_ENABLE_ONEDNN_OPTS and TF_CPP_MIN_LOG_LEVEL before TensorFlow loads.
from support import (  # noqa: E402
    fused_grad_reference,
    global_norm_grad_reference,
    run_stock_global_norm_grad,
    tolerance,
)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402

import gobn  # noqa: E402

LIB = gobn.ops

# Classes a rejection may have: gobn's InvalidArgument, and what TensorFlow
# raises before gobn's kernel runs (TypeError and ValueError from the Python
# wrapper or a graph's shape function, NotFoundError for a dtype the op
# definition allows but no kernel is registered for, as stock).
ALLOWED_ERRORS = ("InvalidArgumentError", "TypeError", "ValueError", "NotFoundError")

BIG = 2**40


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# Cases


class Case:
    """One call: op wrapper name, inputs (name -> tensor factory), attrs, expectation.

    expect is "ok" or (error class, regex the message must match). check, when
    given, is called with the outputs of an accepted call and returns a list of
    problems.
    """

    def __init__(self, id, op, inputs, attrs=None, expect="ok", check=None):
        self.id, self.op, self.inputs, self.attrs = id, op, inputs, attrs or {}
        self.expect, self.check = expect, check


def tensor(value, dtype=tf.float32):
    return lambda: tf.constant(value, dtype)


def zeros(shape, dtype=tf.float32):
    return lambda: tf.zeros(shape, dtype)


def normal(shape, dtype=tf.float32, seed=0, positive=False):
    def make():
        a = np.random.default_rng(seed).standard_normal(shape)
        if positive:
            a = np.abs(a) + 0.5
        return tf.constant(a, dtype)
    return make


def run_case(case, mode="eager"):
    """Runs case eagerly, or in a tf.function whose input shapes are unknown
    (mode "unknown") or as given by case.signature (mode "signature")."""
    fn = getattr(LIB, case.op)
    inputs = {k: make() for k, make in case.inputs.items()}
    if mode == "eager":
        return fn(**inputs, **case.attrs)
    names = list(inputs)
    if mode == "unknown":
        signature = [tf.TensorSpec(None, inputs[k].dtype) for k in names]
    else:
        signature = [tf.TensorSpec(case.signature[k], inputs[k].dtype) for k in names]

    @tf.function(input_signature=signature)
    def graph(*args):
        return fn(**dict(zip(names, args)), **case.attrs)

    return graph(*[inputs[k] for k in names])


def evaluate(case, mode="eager"):
    emit({"start": case.id})
    result = {"id": case.id, "problems": []}
    try:
        outputs = run_case(case, mode)
    except Exception as e:  # noqa: BLE001 - every class is judged below
        cls, msg = type(e).__name__, str(e)
        result.update(outcome="error", **{"class": cls}, message=msg[:600])
        if case.expect == "ok":
            result["problems"].append(f"expected success, got {cls}: {msg[:300]}")
        elif cls != case.expect[0]:
            result["problems"].append(f"expected {case.expect[0]}, got {cls}: {msg[:300]}")
        elif not re.search(case.expect[1], msg):
            result["problems"].append(f"message {msg[:300]!r} does not match {case.expect[1]!r}")
    else:
        result.update(outcome="ok", **{"class": None}, message="")
        if case.expect != "ok":
            result["problems"].append(f"expected {case.expect[0]} matching {case.expect[1]!r}, but the call succeeded")
        elif case.check is not None:
            result["problems"].extend(case.check(outputs))
    emit(result)


def empty_outputs_check(x_shape, channels, vector_outputs=(1, 2)):
    """An accepted empty input: x_backprop has x's shape, the given 1-D outputs are zeros of C.

    out are the output tensors (x_backprop may be too large a shape for numpy)."""
    def check(out):
        problems = []
        if tuple(out[0].shape) != tuple(x_shape):
            problems.append(f"output 0 has shape {tuple(out[0].shape)}, want {tuple(x_shape)}")
        for i in vector_outputs:
            value = out[i].numpy()
            if value.shape != (channels,) or np.any(value != 0):
                problems.append(f"output {i} = {value!r}, want {channels} zeros")
        return problems
    return check


# ---------------------------------------------------------------------------
# Adversarial cases of the fused ops

FUSED = {
    "v1": ("gobn_fused_batch_norm_grad", False, (tf.float32,)),
    "v2": ("gobn_fused_batch_norm_grad_v2", False, (tf.float32, tf.float16, tf.bfloat16)),
    "v3": ("gobn_fused_batch_norm_grad_v3", True, (tf.float32, tf.float16, tf.bfloat16)),
}


def fused_inputs(key, dtype, x_shape=(2, 3, 4, 4), channels=4, **overrides):
    """Valid inputs of op key in dtype (x [2,3,4,4] NHWC, C=4), some replaced."""
    _, has_rs3, _ = FUSED[key]
    vector = tf.float32 if key != "v1" else dtype
    inputs = {
        "y_backprop": normal(x_shape, dtype, 1),
        "x": normal(x_shape, dtype, 2),
        "scale": normal([channels], vector, 3),
        "reserve_space_1": normal([channels], vector, 4),
        "reserve_space_2": normal([channels], vector, 5, positive=True),
    }
    if has_rs3:
        inputs["reserve_space_3"] = zeros([0])
    inputs.update(overrides)
    return inputs


def invalid(pattern):
    return ("InvalidArgumentError", pattern)


def fused_cases():
    cases = []
    for key, (op, has_rs3, dtypes) in FUSED.items():
        for dtype in dtypes:
            name = f"{key}-{dtype.name}"
            vec = tf.float32 if key != "v1" else dtype

            def add(id, expect="ok", check=None, attrs=None, **inputs):
                x_shape = inputs.pop("x_shape", (2, 3, 4, 4))
                channels = inputs.pop("channels", 4)
                cases.append(Case(f"{name}-{id}", op, fused_inputs(key, dtype, x_shape, channels, **inputs),
                                  attrs, expect, check))

            def empty(id, shape, channels, data_format="NHWC", is_training=True, **extra):
                x = zeros(shape, dtype)
                vectors = {k: zeros([channels], vec) for k in ("scale", "reserve_space_1", "reserve_space_2")}
                add(id, check=empty_outputs_check(shape, channels), x_shape=shape, channels=channels,
                    attrs={"data_format": data_format, "is_training": is_training},
                    y_backprop=x, x=x, **{**vectors, **extra})

            # Dimensions whose product overflows 32 or 64 bits, in zero-size
            # tensors TensorFlow accepts: correct empty results.
            empty("empty-batch-spatial-past-2^63", [0, BIG, BIG, 4], 4)
            empty("empty-batch-spatial-past-2^63-inference", [0, BIG, BIG, 4], 4, is_training=False)
            empty("empty-nchw-zero-channels-spatial-past-2^63", [2, 0, BIG, BIG], 0, "NCHW")
            empty("empty-int32-overflowing-dims", [2**31, 2**31, 0, 4], 4)
            empty("empty-int32-overflowing-dims-nchw", [2**31, 4, 2**20, 0], 4, "NCHW", False)
            empty("empty-rank5-nhwc", [0, 2**21, 2**21, 2**21, 4], 4)
            if key == "v3":
                empty("empty-ndhwc", [0, 2**21, 2**21, 2**21, 4], 4, "NDHWC")
                empty("empty-ncdhw-zero-channels", [3, 0, BIG, BIG, 1], 0, "NCDHW", False)
                empty("reserve_space_3-ignored", [0, BIG, BIG, 4], 4, reserve_space_3=zeros([0, 2**62]))
            # Plain zero-size tensors.
            empty("zero-batch", [0, 3, 4, 4], 4)
            empty("zero-height", [2, 0, 4, 4], 4)
            empty("zero-channels-nhwc", [2, 3, 4, 0], 0)
            empty("zero-channels-nchw", [2, 0, 4, 4], 0, "NCHW")
            empty("zero-spatial-nchw-inference", [2, 4, 0, 4], 4, "NCHW", False)

            # Mismatches beside huge zero-size tensors.
            add("empty-x-y_backprop-differ", invalid(r"x and y_backprop must have same shape"),
                x=zeros([0, BIG, BIG, 4], dtype), y_backprop=zeros([0, BIG, BIG, 5], dtype))
            add("empty-x-scale-size", invalid(r"scale must have the same number of elements as the channels of x, got 5 and 4"),
                x=zeros([0, BIG, BIG, 4], dtype), y_backprop=zeros([0, BIG, BIG, 4], dtype), scale=zeros([5], vec))
            add("empty-x-reserve_space_2-size",
                invalid(r"reserve_space_2 must have the same number of elements as the channels of x, got 3 and 2"),
                x=zeros([3, 2**33, 0, 2], dtype), y_backprop=zeros([3, 2**33, 0, 2], dtype),
                scale=zeros([2], vec), reserve_space_1=zeros([2], vec), reserve_space_2=zeros([3], vec))

            # Mismatched lengths and ranks.
            add("scale-short", invalid(r"scale must have the same number of elements as the channels of x, got 3 and 4"),
                scale=normal([3], vec))
            add("scale-long", invalid(r"scale must have the same number of elements as the channels of x, got 5 and 4"),
                scale=normal([5], vec))
            add("scale-empty", invalid(r"scale must have the same number of elements as the channels of x, got 0 and 4"),
                scale=zeros([0], vec))
            add("scale-scalar", invalid(r"scale must be 1-dimensional, got shape \[\]"), scale=tensor(1.0, vec))
            add("scale-2d", invalid(r"scale must be 1-dimensional, got shape \[4,1\]"), scale=normal([4, 1], vec))
            add("reserve_space_1-short", invalid(r"reserve_space_1 must have the same number of elements"),
                reserve_space_1=normal([3], vec))
            add("reserve_space_2-long", invalid(r"reserve_space_2 must have the same number of elements"),
                reserve_space_2=normal([9], vec, positive=True))
            add("reserve_space_1-2d", invalid(r"reserve_space_1.* must be 1-dimensional"),
                reserve_space_1=normal([1, 4], vec))
            add("x-rank3", invalid(r"\bx must be 4 or 5-dimensional, got shape \[3,4,4\]"), x=normal([3, 4, 4], dtype))
            add("x-y_backprop-rank3", invalid(r"y_backprop must be 4 or 5-dimensional, got shape \[3,4,4\]"),
                x=normal([3, 4, 4], dtype), y_backprop=normal([3, 4, 4], dtype))
            add("x-rank6", invalid(r"y_backprop must be 4 or 5-dimensional"),
                x=normal([1, 2, 3, 4, 1, 4], dtype), y_backprop=normal([1, 2, 3, 4, 1, 4], dtype))
            add("x-rank1", invalid(r"y_backprop must be 4 or 5-dimensional, got shape \[4\]"),
                x=normal([4], dtype), y_backprop=normal([4], dtype))
            add("x-y_backprop-differ", invalid(r"x and y_backprop must have same shape.*\[2,3,4,4\].*\[2,3,5,4\]"),
                y_backprop=normal([2, 3, 5, 4], dtype))
            add("nchw-channels", invalid(r"scale must have the same number of elements as the channels of x, got 4 and 3"),
                attrs={"data_format": "NCHW"})

            # Wrong dtypes: refused by TensorFlow before gobn's kernel runs,
            # naming the attr or the input by position.
            other = tf.float16 if dtype != tf.float16 else tf.float32
            if key == "v1":
                add("half-T", invalid(r"attr 'T' of half is not in the list"),
                    x=normal([2, 3, 4, 4], tf.float16), y_backprop=normal([2, 3, 4, 4], tf.float16),
                    scale=normal([4], tf.float16), reserve_space_1=normal([4], tf.float16),
                    reserve_space_2=normal([4], tf.float16))
            else:
                add("x-dtype-differs", invalid(r"input #1\(zero-based\) was expected to be a \w+ tensor"),
                    x=normal([2, 3, 4, 4], other))
                add("scale-dtype", invalid(r"input #2\(zero-based\) was expected to be a float tensor but is a half"),
                    scale=normal([4], tf.float16))
                add("reserve_space_2-double", invalid(r"input #4\(zero-based\) was expected to be a float tensor but is a double"),
                    reserve_space_2=normal([4], tf.float64, positive=True))
            add("double-T", invalid(r"attr 'T' of double is not in the list"),
                x=normal([2, 3, 4, 4], tf.float64), y_backprop=normal([2, 3, 4, 4], tf.float64))
            add("int32-T", invalid(r"attr 'T' of int32 is not in the list"),
                x=zeros([2, 3, 4, 4], tf.int32), y_backprop=zeros([2, 3, 4, 4], tf.int32))
            add("string-T", invalid(r"attr 'T' of string is not in the list"),
                x=lambda: tf.fill([2, 3, 4, 4], "a"), y_backprop=lambda: tf.fill([2, 3, 4, 4], "a"))
            # Bad attrs.
            add("data_format-bad", invalid(r"attr 'data_format' of \"NCWH\" is not in the list"),
                attrs={"data_format": "NCWH"})
            add("data_format-empty", invalid(r"attr 'data_format' of \"\" is not in the list"),
                attrs={"data_format": ""})
            if key != "v3":
                add("data_format-3d-on-4d-op", invalid(r"attr 'data_format' of \"NDHWC\" is not in the list"),
                    attrs={"data_format": "NDHWC"})
            add("epsilon-string", ("TypeError", r"Expected float for argument 'epsilon'"), attrs={"epsilon": "a"})
            add("is_training-string", ("TypeError", r"Expected bool for argument 'is_training'"),
                attrs={"is_training": "yes"})
    return cases


# ---------------------------------------------------------------------------
# Adversarial cases of BatchNormWithGlobalNormalizationGrad

GLOBAL = "gobn_batch_norm_with_global_normalization_grad"


def global_inputs(dtype, t_shape=(2, 3, 4, 3), channels=3, **overrides):
    inputs = {
        "t": normal(t_shape, dtype, 1),
        "m": normal([channels], dtype, 2),
        "v": normal([channels], dtype, 3, positive=True),
        "gamma": normal([channels], dtype, 4),
        "backprop": normal(t_shape, dtype, 5),
    }
    inputs.update(overrides)
    return inputs


def global_cases():
    cases = []
    for dtype in (tf.float32, tf.float16, tf.float64):
        for scale_after in (True, False):
            name = f"global-{dtype.name}-{'scaled' if scale_after else 'unscaled'}"
            attrs = {"variance_epsilon": 1e-3, "scale_after_normalization": scale_after}

            def add(id, expect="ok", check=None, extra_attrs=None, **inputs):
                t_shape = inputs.pop("t_shape", (2, 3, 4, 3))
                channels = inputs.pop("channels", 3)
                cases.append(Case(f"{name}-{id}", GLOBAL, global_inputs(dtype, t_shape, channels, **inputs),
                                  {**attrs, **(extra_attrs or {})}, expect, check))

            def empty(id, shape):
                channels = shape[-1]
                x = zeros(shape, dtype)
                vectors = {k: zeros([channels], dtype) for k in ("m", "v", "gamma")}
                add(id, check=empty_outputs_check(shape, channels, (1, 2, 3, 4)), t_shape=shape,
                    channels=channels, t=x, backprop=x, **vectors)

            empty("empty-batch-spatial-past-2^63", [0, BIG, BIG, 3])
            empty("empty-int32-overflowing-dims", [2**31, 0, 2**31, 3])
            empty("empty-zero-channels", [2**31, 2**31, 1, 0])
            empty("zero-batch", [0, 3, 4, 3])
            add("empty-t-backprop-differ", invalid(r"t and backprop must have same shape"),
                t=zeros([0, BIG, BIG, 3], dtype), backprop=zeros([0, BIG, BIG, 4], dtype))
            add("empty-m-size", invalid(r"m must have the same number of elements as the channels of t, got 4 and 3"),
                t=zeros([0, BIG, BIG, 3], dtype), backprop=zeros([0, BIG, BIG, 3], dtype), m=zeros([4], dtype))
            add("m-long", invalid(r"m must have the same number of elements as the channels of t, got 4 and 3"),
                m=normal([4], dtype))
            add("v-short", invalid(r"v must have the same number of elements as the channels of t, got 2 and 3"),
                v=normal([2], dtype, positive=True))
            add("gamma-empty", invalid(r"gamma must have the same number of elements as the channels of t, got 0 and 3"),
                gamma=zeros([0], dtype))
            add("gamma-2d", invalid(r"gamma must be 1-dimensional, got shape \[3,1\]"), gamma=normal([3, 1], dtype))
            add("t-rank5", invalid(r"t \(input\) must be 4-dimensional, got shape \[1,2,3,4,3\]"),
                t=normal([1, 2, 3, 4, 3], dtype), backprop=normal([1, 2, 3, 4, 3], dtype))
            add("backprop-rank3", invalid(r"backprop must be 4-dimensional, got shape \[3,4,3\]"),
                backprop=normal([3, 4, 3], dtype))
            add("t-backprop-differ", invalid(r"t and backprop must have same shape"), backprop=normal([2, 3, 5, 3], dtype))
            add("m-dtype-differs", invalid(r"input #1\(zero-based\) was expected to be a \w+ tensor"),
                m=normal([3], tf.float64 if dtype != tf.float64 else tf.float32))
            add("variance_epsilon-string", ("TypeError", r"Expected float for argument 'variance_epsilon'"),
                extra_attrs={"variance_epsilon": "a"})
    # Dtypes the op definition allows (numbertype, as stock) but no kernel
    # handles: TensorFlow's kernel lookup refuses them, as for stock.
    for dtype in (tf.int32, tf.bfloat16, tf.complex64):
        cases.append(Case(f"global-{dtype.name}-no-kernel", GLOBAL,
                          {k: zeros(s, dtype) for k, s in (("t", [1, 2, 2, 3]), ("m", [3]), ("v", [3]),
                                                           ("gamma", [3]), ("backprop", [1, 2, 2, 3]))},
                          {"variance_epsilon": 1e-3, "scale_after_normalization": True},
                          ("NotFoundError", rf"T=DT_{dtype.name.upper()}")))
    return cases


# ---------------------------------------------------------------------------
# NaN, Inf and bad epsilons beside stock TensorFlow


def nan_cases():
    """(id, op, arrays, attrs, infinite_factor): infinite_factor marks the cases
    where the training x_backprop has an infinite factor (variance+epsilon = 0,
    an infinite scale): its exact value is ±Inf·(something), and gobn, which
    forms it as A·(dy−mean(dy)) + B·(x−μ), gives NaN (Inf−Inf) at some of the
    positions where stock gives ±Inf. Non-finite positions must still agree."""
    rng = np.random.default_rng(7)
    cases = []
    x = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    base = dict(y_backprop=dy, x=x, scale=np.linspace(0.5, 2, 4).astype(np.float32),
                reserve_space_1=x.mean((0, 1, 2)).astype(np.float32), reserve_space_2=x.var((0, 1, 2)).astype(np.float32))

    def edit(name, index, value):
        def apply(d):
            d = dict(d)
            d[name] = d[name].copy()
            d[name][index] = value
            return d
        return apply

    variants = [
        ("epsilon-negative", None, -1.0, False),
        ("epsilon-negative-small", None, -1e-3, False),
        ("epsilon-nan", None, float("nan"), False),
        ("epsilon-inf", None, float("inf"), False),
        ("epsilon-zero-variance-zero", edit("reserve_space_2", 1, 0.0), 0.0, True),
        ("variance-negative", edit("reserve_space_2", 1, -1.0), 1e-3, False),
        ("variance-nan", edit("reserve_space_2", 2, np.nan), 1e-3, False),
        ("variance-inf", edit("reserve_space_2", 2, np.inf), 1e-3, False),
        ("mean-nan", edit("reserve_space_1", 1, np.nan), 1e-3, False),
        ("scale-nan", edit("scale", 3, np.nan), 1e-3, False),
        ("scale-inf", edit("scale", 0, np.inf), 1e-3, True),
        ("x-nan", edit("x", (0, 0, 0, 1), np.nan), 1e-3, False),
        ("x-inf", edit("x", (1, 2, 0, 1), np.inf), 1e-3, False),
        ("y_backprop-nan", edit("y_backprop", (0, 0, 0, 1), np.nan), 1e-3, False),
        ("y_backprop-inf", edit("y_backprop", (0, 1, 0, 2), np.inf), 1e-3, False),
        ("y_backprop-inf-and-minus-inf", lambda d: edit("y_backprop", (1, 1, 1, 2), -np.inf)(
            edit("y_backprop", (0, 1, 0, 2), np.inf)(d)), 1e-3, False),
        ("all-nan-x", lambda d: {**d, "x": np.full_like(d["x"], np.nan)}, 1e-3, False),
    ]
    for training in (True, False):
        for name, change, eps, infinite_factor in variants:
            arrays = change(base) if change else dict(base)
            cases.append((f"fused-{name}-{'training' if training else 'inference'}", "fused", arrays,
                          {"epsilon": eps, "is_training": training, "data_format": "NHWC"},
                          infinite_factor and training))
    t = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    gbase = dict(t=t, m=t.mean((0, 1, 2)).astype(np.float32), v=t.var((0, 1, 2)).astype(np.float32),
                 gamma=np.linspace(0.5, 2, 4).astype(np.float32), backprop=dy)
    gvariants = [
        ("variance_epsilon-negative", None, -1.0, False),
        ("variance_epsilon-nan", None, float("nan"), False),
        ("variance_epsilon-zero-v-zero", edit("v", 1, 0.0), 0.0, True),
        ("v-negative", edit("v", 1, -1.0), 1e-3, False),
        ("m-nan", edit("m", 2, np.nan), 1e-3, False),
        ("gamma-inf", edit("gamma", 0, np.inf), 1e-3, False),
        ("t-nan", edit("t", (0, 0, 0, 1), np.nan), 1e-3, False),
        ("backprop-inf", edit("backprop", (0, 1, 0, 2), np.inf), 1e-3, False),
    ]
    for scale_after in (True, False):
        for name, change, eps, infinite_factor in gvariants:
            arrays = change(gbase) if change else dict(gbase)
            cases.append((f"global-{name}-{'scaled' if scale_after else 'unscaled'}", "global", arrays,
                          {"variance_epsilon": eps, "scale_after_normalization": scale_after}, infinite_factor))
    return cases


def close_where_finite(got, want, dtype="float32"):
    rtol, atol = tolerance(dtype)
    both = np.isfinite(got) & np.isfinite(want)
    if not both.any():
        return True
    scale = np.max(np.abs(want[both]))
    return bool(np.all(np.abs(got[both] - want[both]) <= atol * scale + rtol * np.abs(want[both])))


def run_nan_batch():
    names = {"fused": ("x_backprop", "scale_backprop", "offset_backprop"),
             "global": ("dx", "dm", "dv", "db", "dg")}
    count = 0
    for id, kind, arrays, attrs, infinite_factor in nan_cases():
        emit({"start": id})
        problems, table = [], {}
        try:
            tensors = {k: tf.constant(v) for k, v in arrays.items()}
            if kind == "fused":
                got = [o.numpy() for o in LIB.gobn_fused_batch_norm_grad_v3(
                    **tensors, reserve_space_3=tf.zeros([0]), **attrs)[:3]]
                stock = [o.numpy() for o in tf.raw_ops.FusedBatchNormGradV3(
                    **tensors, reserve_space_3=tf.zeros([0]), **attrs)[:3]]
                with np.errstate(all="ignore"):
                    ref = fused_grad_reference(arrays["y_backprop"], arrays["x"], arrays["scale"],
                                               arrays["reserve_space_1"], arrays["reserve_space_2"],
                                               attrs["epsilon"], attrs["is_training"], "NHWC")
            else:
                got = [o.numpy() for o in LIB.gobn_batch_norm_with_global_normalization_grad(**tensors, **attrs)]
                stock = run_stock_global_norm_grad(**arrays, **attrs)
                with np.errstate(all="ignore"):
                    ref = global_norm_grad_reference(**arrays, **attrs)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{type(e).__name__}: {str(e)[:300]}")
        else:
            for name, g, s, r in zip(names[kind], got, stock, ref):
                g, s, r = (np.asarray(a, np.float64) for a in (g, s, r))
                table[name] = {"gobn": [int(np.isnan(g).sum()), int(np.isinf(g).sum())],
                               "stock": [int(np.isnan(s).sum()), int(np.isinf(s).sum())],
                               "reference": [int(np.isnan(r).sum()), int(np.isinf(r).sum())], "size": int(g.size)}
                if not np.array_equal(np.isfinite(g), np.isfinite(s)):
                    problems.append(f"{name}: non-finite at other positions than stock's")
                if not infinite_factor and not np.array_equal(np.isnan(g), np.isnan(s)):
                    problems.append(f"{name}: NaN at other positions than stock's")
                if not close_where_finite(g, s):
                    problems.append(f"{name}: finite values differ from stock's")
        emit({"id": id, "outcome": "ok" if not problems else "error", "class": None, "message": "",
              "problems": problems, "table": table, "infinite_factor": infinite_factor})
        count += 1
    return count


# ---------------------------------------------------------------------------
# tf.function with unknown and partly known shapes


def function_cases():
    """(case, mode): the adversarial cases rerun in graphs. With unknown shapes
    every check is left to the kernel (InvalidArgumentError as eagerly); with
    partly known shapes a shape function may reject at trace time (ValueError
    naming the tensor)."""
    runs = []
    for case in fused_cases() + global_cases():
        by_kernel = case.expect == "ok" or (
            case.expect[0] == "InvalidArgumentError" and not re.search(r"input #|attr '", case.expect[1]))
        if by_kernel and re.match(r"(v1|v3)-float32|global-float32-scaled", case.id):
            runs.append((case, "unknown"))
    # In a graph, TensorFlow's op construction refuses mismatched dtypes by name.
    for op, has_rs3 in (("gobn_fused_batch_norm_grad_v2", False), ("gobn_fused_batch_norm_grad_v3", True)):
        case = Case(f"{op}-graph-scale-dtype", op,
                    fused_inputs("v3" if has_rs3 else "v2", tf.float32, scale=normal([4], tf.float16)), {},
                    ("TypeError", r"Input 'scale' of 'Gobn>FusedBatchNormGradV\d' Op has type float16"))
        runs.append((case, "unknown"))
    sig = Case("global-partly-known-m-size", GLOBAL, global_inputs(tf.float32, m=normal([4], tf.float32)),
               {"variance_epsilon": 1e-3, "scale_after_normalization": True},
               ("ValueError", r"m must have the same number of elements as the channels of t, got 4 and 3"))
    sig.signature = {"t": [None, None, None, 3], "m": [4], "v": [None], "gamma": [None], "backprop": None}
    runs.append((sig, "signature"))
    sig = Case("v3-partly-known-x-y_backprop-differ", "gobn_fused_batch_norm_grad_v3",
               fused_inputs("v3", tf.float32, y_backprop=normal([2, 3, 5, 4], tf.float32)), {},
               ("ValueError", r"x and y_backprop must have same shape"))
    sig.signature = {"y_backprop": [None, None, 5, None], "x": [None, None, 4, None], "scale": None,
                     "reserve_space_1": None, "reserve_space_2": None, "reserve_space_3": None}
    runs.append((sig, "signature"))
    sig = Case("v3-partly-known-scale-size", "gobn_fused_batch_norm_grad_v3",
               fused_inputs("v3", tf.float32, scale=normal([3], tf.float32)), {},
               invalid(r"scale must have the same number of elements as the channels of x, got 3 and 4"))
    sig.signature = {"y_backprop": [None, None, None, 4], "x": [None, None, None, 4], "scale": [3],
                     "reserve_space_1": [None], "reserve_space_2": [None], "reserve_space_3": [None]}
    runs.append((sig, "signature"))
    return runs


# ---------------------------------------------------------------------------
# Random calls of every registered op


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def registered_ops():
    """(op def, wrapper) for every op the library registers."""
    ops = []
    for attr in sorted(dir(LIB)):
        if attr.startswith("Gobn_"):
            op_def = op_def_registry.get("Gobn>" + attr[len("Gobn_"):])
            ops.append((op_def, getattr(LIB, "gobn_" + snake(attr[len("Gobn_"):]))))
    return ops


ACTIVATIONS = ("y_backprop", "x", "t", "backprop")
DTYPES = (tf.float32, tf.float16, tf.bfloat16, tf.float64, tf.int32, tf.int64)


def random_value(rng, shape, dtype, name, count=1):
    n = int(np.prod(shape))
    if dtype.is_integer:
        choices = [count, count, count, count, count + 1, 0, 1, -1, 2**40]
        if name == "count" and shape == []:
            return tf.constant(int(rng.choice(choices)), dtype)
        return tf.constant(rng.integers(-3, 4, size=shape), dtype)
    a = rng.standard_normal(n)
    if "variance" in name or name in ("v", "reserve_space_2"):
        a = np.abs(a) + 0.1
    if n and rng.random() < 0.3:
        a[rng.integers(0, n, size=1 + n // 8)] = rng.choice([np.nan, np.inf, -np.inf, 0.0, 1e30])
    return tf.constant(a.reshape(shape), dtype)


def random_dims(rng, rank, huge_ok):
    dims = [int(rng.choice([0, 1, 1, 2, 3, 4, 5])) for _ in range(rank)]
    if huge_ok and rank and rng.random() < 0.3:
        zero = int(rng.integers(0, rank))
        dims[zero] = 0
        for i in range(zero + 1, rank):  # TensorFlow refuses a prefix product past 2^63-1
            if rng.random() < 0.5:
                dims[i] = int(rng.choice([2**31, 2**32 + 1, BIG]))
    return dims


def random_call(rng, op_def, wrapper):
    """Draws inputs and attrs for op_def, mostly near-valid, sometimes not."""
    attrs, types = {}, {}
    for a in op_def.attr:
        allowed = list(a.allowed_values.list.type) or list(a.allowed_values.list.s)
        if a.type == "type":
            allowed = [tf.as_dtype(int(t)) for t in allowed]
            with_kernel = [t for t in allowed if t in (tf.float32, tf.float16, tf.bfloat16, tf.float64)]
            r = rng.random()
            pool = with_kernel if r < 0.85 else allowed if r < 0.95 else DTYPES
            types[a.name] = pool[int(rng.integers(len(pool)))]
        elif a.type == "string":
            values = [s.decode() for s in allowed]
            attrs[a.name] = values[int(rng.integers(len(values)))] if rng.random() < 0.95 else str(rng.choice(["NCWH", "", "nhwc"]))
        elif a.type == "float":
            attrs[a.name] = float(rng.choice([1e-3, 1e-5, 0.0, -1.0, float("nan"), float("inf"), 1e30]))
        elif a.type == "bool":
            attrs[a.name] = bool(rng.random() < 0.5)
    rank = int(rng.choice([4, 4, 5]))
    activation = random_dims(rng, rank, True)
    fmt = attrs.get("data_format", "NHWC")
    channels = activation[1] if fmt in ("NCHW", "NCDHW") else activation[-1]
    per_channel = int(np.prod(activation, dtype=object)) // channels if channels else 0
    inputs = {}
    for arg in op_def.input_arg:
        dtype = tf.as_dtype(arg.type) if arg.type else types[arg.type_attr]
        if rng.random() < 0.02:
            dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        if arg.name in ACTIVATIONS:
            shape = list(activation)
            if rng.random() < 0.1:
                shape = random_dims(rng, int(rng.integers(0, 7)), False)
        elif arg.name == "count":
            shape = [] if rng.random() < 0.9 else [int(rng.integers(0, 3))]
        elif arg.name == "reserve_space_3":
            shape = random_dims(rng, int(rng.integers(0, 3)), True)
        else:
            shape = [channels]
            r = rng.random()
            if r < 0.05:
                shape = [channels + 1]
            elif r < 0.08:
                shape = random_dims(rng, int(rng.integers(0, 3)), False)
        if any(d >= 2**31 for d in shape) and 0 not in shape:
            shape = [0] + shape[1:]
        if 0 in shape:
            inputs[arg.name] = tf.zeros(shape, dtype)
        else:
            inputs[arg.name] = random_value(rng, shape, dtype, arg.name, per_channel)
    return inputs, attrs


def names_input_or_attr(op_def, msg):
    """Whether an InvalidArgument message names an input or attr of op_def:
    gobn's messages start with the tensor's (or attr's) name; TensorFlow's
    say "attr 'T'" or "input #1(zero-based)"."""
    msg = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", msg)
    inputs = [a.name for a in op_def.input_arg]
    attrs = [a.name for a in op_def.attr]
    if any(msg.startswith(name + " ") or msg.startswith(name + ":") for name in inputs + attrs):
        return True
    m = re.search(r"attr '(\w+)'", msg)
    if m and m.group(1) in attrs:
        return True
    m = re.search(r"input #(\d+)\(zero-based\)", msg)
    return bool(m) and int(m.group(1)) < len(inputs)


def check_random(op_def, inputs, outputs):
    problems = []
    names = {a.name: i for i, a in enumerate(op_def.output_arg)}
    for out_name, in_name in (("x_backprop", "x"), ("dx", "t")):
        if out_name in names:
            got = tuple(outputs[names[out_name]].shape)
            if got != tuple(inputs[in_name].shape):
                problems.append(f"{out_name} has shape {got}, want {tuple(inputs[in_name].shape)}")
    for i, o in enumerate(outputs):
        if len(o.shape) > 1 and op_def.output_arg[i].name not in ("x_backprop", "dx"):
            problems.append(f"{op_def.output_arg[i].name} has shape {tuple(o.shape)}")
    return problems


def run_random_batch(seed, count):
    rng = np.random.default_rng(seed)
    ops = registered_ops()
    for n in range(count):
        op_def, wrapper = ops[n % len(ops)]
        id = f"random-{seed}-{n}-{op_def.name}"
        emit({"start": id})
        result = {"id": id, "problems": []}
        try:
            inputs, attrs = random_call(rng, op_def, wrapper)
            result["call"] = {k: [t.dtype.name, list(t.shape)] for k, t in inputs.items()} | {
                k: v if not isinstance(v, float) or math.isfinite(v) else str(v) for k, v in attrs.items()}
        except Exception as e:  # noqa: BLE001 - TensorFlow refused to make an input
            result.update(outcome="skipped", **{"class": type(e).__name__}, message=str(e)[:300])
            emit(result)
            continue
        try:
            outputs = wrapper(**inputs, **attrs)
        except Exception as e:  # noqa: BLE001
            cls, msg = type(e).__name__, str(e)
            result.update(outcome="error", **{"class": cls}, message=msg[:600])
            if cls not in ALLOWED_ERRORS:
                result["problems"].append(f"{cls}: {msg[:300]}")
            elif cls == "InvalidArgumentError" and not names_input_or_attr(op_def, msg):
                result["problems"].append(f"message names no input or attr: {msg[:300]}")
        else:
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            result.update(outcome="ok", **{"class": None}, message="")
            result["problems"].extend(check_random(op_def, inputs, outputs))
        emit(result)
    return count


# ---------------------------------------------------------------------------


def main():
    batch = sys.argv[1]
    if batch == "fused":
        cases = [(c, "eager") for c in fused_cases()]
    elif batch == "global":
        cases = [(c, "eager") for c in global_cases()]
    elif batch == "function":
        cases = function_cases()
    elif batch == "nan":
        emit({"done": True, "cases": run_nan_batch()})
        return
    elif batch == "random":
        emit({"done": True, "cases": run_random_batch(int(sys.argv[2]), int(sys.argv[3]))})
        return
    else:
        raise SystemExit(f"unknown batch {batch!r}")
    for case, mode in cases:
        evaluate(case, mode)
    emit({"done": True, "cases": len(cases)})


if __name__ == "__main__":
    main()
