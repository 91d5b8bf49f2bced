"""Bad input: gobn raises stock's error class, names the tensor, and stays up.

Every case checks that gobn raises tf.errors.InvalidArgumentError eagerly, that
the message names the offending tensor and rule (for the checks gobn's kernel
makes; dtype and attr errors come from TensorFlow's op construction), and that
a valid call afterwards still works. Where stock raises too, a second test
checks that stock raises the same class for the same input. Every op of the
op table breaks each rule opdef states of its inputs (test_every_op_...);
the fused and global-normalization ops, stock's, the rest of stock's rules.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

from gobn._opdefs_gen import BY_KIND, BY_NAME
from gobn._testing import Case, modes, sample
from support import op_table, run_stock_global_norm_grad

FusedOp = collections.namedtuple("FusedOp", "gobn_name stock_name has_reserve_space_3")

# The fused ops, by their stock twin's name.
OPS = {op.stock: FusedOp(op.wrapper, op.stock, "reserve_space_3" in op.inputs) for op in BY_KIND["FusedBatchNormGrad"]}

_rng = np.random.default_rng(2024)


def _float(*shape, dtype=tf.float32):
    return tf.constant(_rng.standard_normal(shape), dtype)


def fused_inputs(op_key, **overrides):
    """Valid inputs (x [2,3,4,4], NHWC so C=4) with some replaced."""
    inputs = {
        "y_backprop": _float(2, 3, 4, 4),
        "x": _float(2, 3, 4, 4),
        "scale": _float(4),
        "reserve_space_1": _float(4),
        "reserve_space_2": tf.abs(_float(4)) + 0.5,
    }
    if OPS[op_key].has_reserve_space_3:
        inputs["reserve_space_3"] = tf.constant([], tf.float32)
    attrs = {}
    for name, value in overrides.items():
        if name in ("data_format", "is_training", "epsilon"):
            attrs[name] = value
        else:
            inputs[name] = value
    return inputs, attrs


# (id, overrides, message regex). The regexes follow stock's order of checks:
# rank of y_backprop then x; scale, reserve_space_1, reserve_space_2 1-D;
# x and y_backprop same shape; scale and reserve spaces sized C.
SHAPE_CASES = [
    ("y_backprop_rank3", lambda: {"y_backprop": _float(2, 3, 4)},
     r"y_backprop must be 4 or 5-dimensional, got shape \[2,3,4\]"),
    ("y_backprop_rank6", lambda: {"y_backprop": _float(1, 2, 3, 4, 4, 1)},
     r"y_backprop must be 4 or 5-dimensional, got shape \[1,2,3,4,4,1\]"),
    # rank 10: gobn reads the first 8 dims of a tensor in one batch, the rest one by one
    ("y_backprop_rank10", lambda: {"y_backprop": _float(1, 1, 1, 1, 1, 1, 1, 2, 3, 2)},
     r"y_backprop must be 4 or 5-dimensional, got shape \[1,1,1,1,1,1,1,2,3,2\]"),
    ("x_rank3", lambda: {"x": _float(2, 3, 4)},
     r"\bx must be 4 or 5-dimensional, got shape \[2,3,4\]"),
    ("x_rank2", lambda: {"x": _float(3, 4)},
     r"\bx must be 4 or 5-dimensional, got shape \[3,4\]"),
    ("both_rank3_names_y_backprop_first", lambda: {"y_backprop": _float(2, 3, 4), "x": _float(2, 3, 4)},
     r"y_backprop must be 4 or 5-dimensional"),
    ("scale_2d", lambda: {"scale": _float(4, 1)},
     r"scale must be 1-dimensional, got shape \[4,1\]"),
    ("scale_scalar", lambda: {"scale": _float()},
     r"scale must be 1-dimensional, got shape \[\]"),
    ("reserve_space_1_2d", lambda: {"reserve_space_1": _float(1, 4)},
     r"reserve_space_1.*must be 1-dimensional, got shape \[1,4\]"),
    ("reserve_space_2_2d", lambda: {"reserve_space_2": _float(1, 4)},
     r"reserve_space_2.*must be 1-dimensional, got shape \[1,4\]"),
    ("shape_mismatch", lambda: {"y_backprop": _float(2, 3, 5, 4)},
     r"x and y_backprop must have same shape.*\[2,3,4,4\].*\[2,3,5,4\]"),
    ("shape_mismatch_rank", lambda: {"y_backprop": _float(2, 3, 4, 4, 1)},
     r"x and y_backprop must have same shape"),
    ("scale_size", lambda: {"scale": _float(3)},
     r"scale must have the same number of elements as the channels of x, got 3 and 4"),
    ("reserve_space_1_size", lambda: {"reserve_space_1": _float(3)},
     r"reserve_space_1 must have the same number of elements as the channels of x, got 3 and 4"),
    ("reserve_space_2_size", lambda: {"reserve_space_2": _float(5)},
     r"reserve_space_2 must have the same number of elements as the channels of x, got 5 and 4"),
    ("nchw_channels", lambda: {"data_format": "NCHW"},  # x [2,3,4,4] in NCHW has C=3
     r"scale must have the same number of elements as the channels of x, got 4 and 3"),
    ("inference_scale_size", lambda: {"scale": _float(5), "is_training": False},
     r"scale must have the same number of elements as the channels of x, got 5 and 4"),
]

# Errors TensorFlow raises while constructing the op (dtype and attr checks):
# (id, ops it applies to, overrides).
V1, V2, V3 = "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"
CONSTRUCTION_CASES = [
    ("half_y_backprop_float_x", (V2, V3), lambda: {"y_backprop": _float(2, 3, 4, 4, dtype=tf.float16)}),
    ("half_x_float_y_backprop", (V2, V3), lambda: {"x": _float(2, 3, 4, 4, dtype=tf.float16)}),
    ("half_t_for_v1", (V1,), lambda: {
        "y_backprop": _float(2, 3, 4, 4, dtype=tf.float16), "x": _float(2, 3, 4, 4, dtype=tf.float16)}),
    ("half_scale", tuple(OPS), lambda: {"scale": _float(4, dtype=tf.float16)}),
    ("half_reserve_space_1", tuple(OPS), lambda: {"reserve_space_1": _float(4, dtype=tf.float16)}),
    ("double_t", tuple(OPS), lambda: {
        "y_backprop": _float(2, 3, 4, 4, dtype=tf.float64), "x": _float(2, 3, 4, 4, dtype=tf.float64)}),
    ("bad_data_format", tuple(OPS), lambda: {"data_format": "NCWH"}),
    ("3d_format_on_v1_v2", (V1, V2), lambda: {"data_format": "NDHWC"}),
]


def _shape_params():
    for op_key in OPS:
        for case_id, overrides, message in SHAPE_CASES:
            yield pytest.param(op_key, overrides, message, id=f"{op_key}-{case_id}")


def _construction_params():
    for case_id, op_keys, overrides in CONSTRUCTION_CASES:
        for op_key in op_keys:
            yield pytest.param(op_key, overrides, id=f"{op_key}-{case_id}")


def assert_still_works(gobn, op_key):
    """A valid call after an error still computes (the process and op are fine)."""
    inputs, attrs = fused_inputs(op_key)
    out = getattr(gobn, OPS[op_key].gobn_name)(**inputs, **attrs)
    assert out[0].shape == inputs["x"].shape
    assert np.all(np.isfinite(out[0].numpy()))


@pytest.mark.parametrize("op_key, overrides, message", list(_shape_params()))
def test_fused_bad_shape_raises_invalid_argument(gobn, op_key, overrides, message):
    inputs, attrs = fused_inputs(op_key, **overrides())
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        getattr(gobn, OPS[op_key].gobn_name)(**inputs, **attrs)
    assert_still_works(gobn, op_key)


@pytest.mark.parametrize("op_key, overrides, message", list(_shape_params()))
def test_fused_bad_shape_stock_raises_same_class(op_key, overrides, message):
    del message  # stock's messages differ; only the class must agree
    inputs, attrs = fused_inputs(op_key, **overrides())
    with pytest.raises(tf.errors.InvalidArgumentError):
        getattr(tf.raw_ops, OPS[op_key].stock_name)(**inputs, **attrs)


@pytest.mark.parametrize("op_key, overrides, message", list(_shape_params()))
def test_fused_bad_shape_in_function(gobn, op_key, overrides, message):
    """In tf.function a shape function may reject at trace time (ValueError), as stock's does."""
    del message
    inputs, attrs = fused_inputs(op_key, **overrides())
    names = list(inputs)
    signature = [tf.TensorSpec(inputs[k].shape, inputs[k].dtype) for k in names]
    accepted = (ValueError, tf.errors.InvalidArgumentError)
    for fn in (getattr(gobn, OPS[op_key].gobn_name), getattr(tf.raw_ops, OPS[op_key].stock_name)):
        traced = tf.function(lambda *args, fn=fn: fn(**dict(zip(names, args)), **attrs), input_signature=signature)
        with pytest.raises(accepted):
            traced(*[inputs[k] for k in names])
    assert_still_works(gobn, op_key)


@pytest.mark.parametrize("op_key, overrides", list(_construction_params()))
def test_fused_bad_dtype_or_attr_raises_invalid_argument(gobn, op_key, overrides):
    inputs, attrs = fused_inputs(op_key, **overrides())
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        getattr(gobn, OPS[op_key].gobn_name)(**inputs, **attrs)
    if "data_format" in attrs:
        assert "data_format" in str(raised.value)
    assert_still_works(gobn, op_key)


@pytest.mark.parametrize("op_key, overrides", list(_construction_params()))
def test_fused_bad_dtype_or_attr_stock_raises_same_class(op_key, overrides):
    inputs, attrs = fused_inputs(op_key, **overrides())
    with pytest.raises(tf.errors.InvalidArgumentError):
        getattr(tf.raw_ops, OPS[op_key].stock_name)(**inputs, **attrs)


# ---------------------------------------------------------------------------
# BatchNormWithGlobalNormalizationGrad


def global_norm_inputs(**overrides):
    """Valid inputs (t [2,3,4,5], C=5) with some replaced."""
    inputs = {
        "t": _float(2, 3, 4, 5),
        "m": _float(5),
        "v": tf.abs(_float(5)) + 0.5,
        "gamma": _float(5),
        "backprop": _float(2, 3, 4, 5),
    }
    inputs.update(overrides)
    return inputs


GLOBAL_NORM_ATTRS = {"variance_epsilon": 1e-3, "scale_after_normalization": True}

# (id, overrides, message regex, stock checks it too)
GLOBAL_NORM_CASES = [
    ("t_rank3", lambda: {"t": _float(2, 3, 4)}, r"\bt\b.*must be 4-dimensional, got shape \[2,3,4\]", True),
    ("t_rank5", lambda: {"t": _float(1, 2, 3, 4, 5)}, r"\bt\b.*must be 4-dimensional", True),
    ("m_2d", lambda: {"m": _float(5, 1)}, r"\bm\b.*must be 1-dimensional, got shape \[5,1\]", True),
    ("v_2d", lambda: {"v": _float(1, 5)}, r"\bv\b.*must be 1-dimensional, got shape \[1,5\]", True),
    ("gamma_2d", lambda: {"gamma": _float(5, 1)}, r"gamma.*must be 1-dimensional, got shape \[5,1\]", True),
    ("backprop_rank3", lambda: {"backprop": _float(2, 3, 4)},
     r"backprop must be 4-dimensional, got shape \[2,3,4\]", True),
    # Stock checks only ranks, then reads out of bounds: gobn checks sizes too.
    ("shape_mismatch", lambda: {"backprop": _float(2, 3, 5, 5)},
     r"t and backprop must have same shape.*\[2,3,4,5\].*\[2,3,5,5\]", False),
    ("m_size", lambda: {"m": _float(4)}, r"\bm\b.*same number of elements as the channels of t, got 4 and 5", False),
    ("v_size", lambda: {"v": _float(6)}, r"\bv\b.*same number of elements as the channels of t, got 6 and 5", False),
    ("gamma_size", lambda: {"gamma": _float(3)},
     r"gamma.*same number of elements as the channels of t, got 3 and 5", False),
]


def assert_global_norm_still_works(gobn):
    inputs = global_norm_inputs()
    out = gobn.gobn_batch_norm_with_global_normalization_grad(**inputs, **GLOBAL_NORM_ATTRS)
    assert out[0].shape == inputs["t"].shape


@pytest.mark.parametrize(
    "overrides, message", [pytest.param(o, m, id=i) for i, o, m, _ in GLOBAL_NORM_CASES])
def test_global_norm_bad_shape_raises_invalid_argument(gobn, overrides, message):
    inputs = global_norm_inputs(**overrides())
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        gobn.gobn_batch_norm_with_global_normalization_grad(**inputs, **GLOBAL_NORM_ATTRS)
    assert_global_norm_still_works(gobn)


@pytest.mark.parametrize(
    "overrides", [pytest.param(o, id=i) for i, o, _, stock_checks in GLOBAL_NORM_CASES if stock_checks])
def test_global_norm_bad_shape_stock_raises_same_class(gobn, overrides):
    """Stock's kernel (in a version-8 graph, shapes unknown until run) raises the same class.

    gobn's op raises it there too.
    """
    inputs = global_norm_inputs(**overrides())
    with pytest.raises(tf.errors.InvalidArgumentError):
        run_stock_global_norm_grad(**inputs, **GLOBAL_NORM_ATTRS, static_shapes=False)
    with pytest.raises(tf.errors.InvalidArgumentError):
        run_stock_global_norm_grad(
            **inputs, **GLOBAL_NORM_ATTRS, static_shapes=False,
            op=gobn.gobn_batch_norm_with_global_normalization_grad)


@pytest.mark.parametrize("dtype", [tf.int32, tf.bfloat16], ids=lambda d: d.name)
def test_global_norm_dtype_without_kernel_matches_stock(gobn, dtype):
    """numbertype allows dtypes without a CPU kernel; in a graph both ops fail alike."""
    inputs = {k: tf.cast(v, dtype) for k, v in global_norm_inputs().items()}
    with pytest.raises(tf.errors.InvalidArgumentError):
        run_stock_global_norm_grad(**inputs, **GLOBAL_NORM_ATTRS)
    with pytest.raises(tf.errors.InvalidArgumentError):
        run_stock_global_norm_grad(
            **inputs, **GLOBAL_NORM_ATTRS, op=gobn.gobn_batch_norm_with_global_normalization_grad)
    assert_global_norm_still_works(gobn)


# ---------------------------------------------------------------------------
# Every op: each rule opdef states of its inputs (opdef.Op.Check), broken on
# a valid call of its kind's sample builder


def _broken(op, inputs, rule, name):
    """inputs with the input name breaking rule: of a rank the op does not
    allow (rank), sized other than the channels (size), or shaped other than
    the activation (shape)."""
    v = inputs[name]
    if rule == "rank":
        ranks = dict((n, r) for n, _, r in op.xla_inputs)[name]
        return dict(inputs, **{name: tf.reshape(v, v.shape.as_list() + [1] * (max(ranks) + 1 - v.shape.rank))})
    if rule == "size":
        return dict(inputs, **{name: tf.concat([v, tf.zeros([1], v.dtype)], 0)})
    return dict(inputs, **{name: tf.concat([v, v[:1]], 0)})


def _every_op_rule_params():
    for row in op_table():
        op = BY_NAME[row["name"]]
        activation = row["activation"]
        activation_ranks = dict((n, r) for n, _, r in op.xla_inputs)[activation]
        for name, _, ranks in op.xla_inputs:
            if ranks:
                yield pytest.param(op.name, "rank", name, rf"\b{name}\b.* must be ", id=f"{op.name}-{name}-rank")
            if ranks == (1,):
                yield pytest.param(op.name, "size", name, rf"\b{name}\b.* same number of elements as the channels",
                                   id=f"{op.name}-{name}-size")
            if ranks == activation_ranks and name != activation:
                yield pytest.param(op.name, "shape", name, rf"\b{activation} and {name} must have same shape",
                                   id=f"{op.name}-{name}-shape")


@pytest.mark.parametrize("op_name, rule, name, message", list(_every_op_rule_params()))
def test_every_op_rejects_what_its_rules_forbid(gobn, op_name, rule, name, message):
    op = BY_NAME[op_name]
    case = Case(op, tf.float32, op.data_formats[0], modes(op)[0], "small", (2, 3, 4, 5))
    made = sample(case, seed=1)
    call = getattr(gobn, op.wrapper)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call(**_broken(op, made.inputs, rule, name), **made.attrs)
    call(**made.inputs, **made.attrs)  # and a valid call still works
