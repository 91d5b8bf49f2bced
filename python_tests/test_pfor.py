"""Vectorization of the Gobn> ops: the pfor converters gobn registers
(python/gobn/_pfor.py) under tf.vectorized_map, GradientTape.jacobian and
batch_jacobian, and per-example gradients through gobn.fused_batch_norm.

Every vectorization here runs with fallback_to_while_loop=False (the
jacobians through a patched pfor), so an op without a converter fails
instead of hiding in pfor's while loop.
"""

import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import gobn
from support import REPO_ROOT, CHANNELS_FIRST, assert_close, global_norm_grad_reference

SHAPES = {"NHWC": (3, 2, 3, 2), "NCHW": (3, 2, 2, 3), "NDHWC": (2, 2, 2, 3, 2), "NCDHW": (2, 2, 2, 2, 3)}
S = 3  # iterations of the vectorized loops


def assert_max_close(got, want, what="output", tol=1e-4):
    """|got - want| <= tol * max|want| everywhere (float32 tolerance relative to the largest value)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    err = np.max(np.abs(got - want), initial=0.0)
    bound = tol * max(np.max(np.abs(want), initial=0.0), 1e-30)
    assert err <= bound, f"{what}: max |err| {err:.3g} > {bound:.3g}"


@pytest.fixture
def no_fallback(monkeypatch):
    """Makes GradientTape.jacobian and batch_jacobian vectorize without pfor's while-loop fallback."""
    from tensorflow.python.ops.parallel_for import control_flow_ops

    monkeypatch.setattr(control_flow_ops, "pfor",
                        functools.partial(control_flow_ops.pfor, fallback_to_while_loop=False))


def vmap(fn, elems):
    return tf.vectorized_map(fn, elems, fallback_to_while_loop=False)


def channels(data_format, shape):
    return shape[1] if data_format in CHANNELS_FIRST else shape[-1]


# ---------------------------------------------------------------------------
# The raw ops under tf.vectorized_map

FUSED = [
    ("gobn_fused_batch_norm_grad", tf.raw_ops.FusedBatchNormGrad, ("NHWC", "NCHW"), False),
    ("gobn_fused_batch_norm_grad_v2", tf.raw_ops.FusedBatchNormGradV2, ("NHWC", "NCHW"), False),
    ("gobn_fused_batch_norm_grad_v3", tf.raw_ops.FusedBatchNormGradV3, ("NHWC", "NCHW", "NDHWC", "NCDHW"), True),
]
FUSED_CASES = [(name, stock, fmt, v3) for name, stock, fmts, v3 in FUSED for fmt in fmts]


def fused_inputs(data_format, seed, stacked):
    """(stacked tensors by name, loop-invariant tensors by name) of a fused gradient op."""
    rng = np.random.default_rng(seed)
    shape = SHAPES[data_format]
    c = channels(data_format, shape)
    values = {
        "y_backprop": rng.normal(0, 1, shape), "x": rng.normal(1, 2, shape), "scale": rng.uniform(0.5, 2, c),
        "reserve_space_1": rng.normal(1, 1, c), "reserve_space_2": rng.uniform(0.5, 4, c),
    }
    per_iteration = {k: tf.constant(np.stack([v * (1 + 0.3 * i) + 0.1 * i for i in range(S)]), tf.float32)
                     for k, v in values.items() if k in stacked}
    fixed = {k: tf.constant(v, tf.float32) for k, v in values.items() if k not in stacked}
    return per_iteration, fixed


def fused_call(op, args, v3, data_format, is_training):
    kwargs = dict(args, epsilon=0.001, data_format=data_format, is_training=is_training)
    if v3:
        kwargs["reserve_space_3"] = tf.constant([], tf.float32)
    return list(op(**kwargs)[:3])


def vectorized_and_loop(op, per_iteration, fixed, call):
    """(outputs of call under vectorized_map, the same stacked from a python loop of single calls)."""
    names = list(per_iteration)
    got = vmap(lambda elems: call(op, {**dict(zip(names, elems)), **fixed}), [per_iteration[k] for k in names])
    loop = [call(op, {**{k: per_iteration[k][i] for k in names}, **fixed}) for i in range(S)]
    return got, [tf.stack(outs) for outs in zip(*loop)]


STACKED = {"all": ("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2"),
           "y_backprop": ("y_backprop",), "x_scale": ("x", "scale")}


@pytest.mark.parametrize("stacked", ["all", "y_backprop"])
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("name,stock,data_format,v3", FUSED_CASES, ids=[f"{c[0]}-{c[2]}" for c in FUSED_CASES])
def test_fused_grad_vectorized_map(name, stock, data_format, v3, is_training, stacked):
    per_iteration, fixed = fused_inputs(data_format, seed=len(name) + len(data_format), stacked=STACKED[stacked])
    call = functools.partial(fused_call, v3=v3, data_format=data_format, is_training=is_training)
    got, loop = vectorized_and_loop(getattr(gobn.ops, name), per_iteration, fixed, call)
    for what, g, w in zip(("x_backprop", "scale_backprop", "offset_backprop"), got, loop):
        assert_max_close(g, w, f"{what} against a loop of single calls")
    # Stock's twin under vectorized_map: stock registers a converter for V3
    # only (4-D layouts), so the others take pfor's while loop. Stock's CPU
    # kernels have no channels-first inference.
    if (data_format in ("NDHWC", "NCDHW")) or (data_format in CHANNELS_FIRST and not is_training):
        return
    names = list(per_iteration)
    want = tf.vectorized_map(lambda elems: call(stock, {**dict(zip(names, elems)), **fixed}),
                             [per_iteration[k] for k in names], fallback_to_while_loop=not v3)
    for what, g, w in zip(("x_backprop", "scale_backprop", "offset_backprop"), got, want):
        assert_max_close(g, w, f"{what} against stock's vectorized twin")


@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_fused_grad_v3_some_inputs_stacked(is_training):
    """x and scale differ between iterations, y_backprop and the statistics do not."""
    test_fused_grad_vectorized_map("gobn_fused_batch_norm_grad_v3", tf.raw_ops.FusedBatchNormGradV3, "NHWC", True,
                                   is_training, "x_scale")


def test_fused_grad_v3_half_precision():
    per_iteration, fixed = fused_inputs("NCHW", seed=3, stacked=STACKED["all"])
    for k in ("y_backprop", "x"):
        per_iteration[k] = tf.cast(per_iteration[k], tf.float16)
    call = functools.partial(fused_call, v3=True, data_format="NCHW", is_training=True)
    got, loop = vectorized_and_loop(gobn.ops.gobn_fused_batch_norm_grad_v3, per_iteration, fixed, call)
    assert got[0].dtype == tf.float16
    for g, w in zip(got, loop):
        assert_max_close(g, w, tol=2e-3)


def test_fused_grad_placeholder_outputs():
    """reserve_space_4/5 come back like the loop's: empty per iteration."""
    per_iteration, fixed = fused_inputs("NHWC", seed=4, stacked=("x",))

    def call(op, args):
        return list(op(**args, reserve_space_3=tf.constant([], tf.float32), epsilon=0.001, data_format="NHWC",
                       is_training=True))

    got, loop = vectorized_and_loop(gobn.ops.gobn_fused_batch_norm_grad_v3, per_iteration, fixed, call)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in loop]


@pytest.mark.parametrize("scale_after", [True, False])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_global_normalization_grad_vectorized_map(scale_after, dtype):
    """Stock's twin cannot run in a current graph: against a loop and the float64 reference."""
    rng = np.random.default_rng(6)
    shape = (2, 2, 3, 3)
    t = tf.constant(rng.normal(0, 1, (S,) + shape), dtype)
    backprop = tf.constant(rng.normal(0, 1, (S,) + shape), dtype)
    m = tf.constant(rng.normal(0, 1, (S, 3)), dtype)
    v = tf.constant(rng.uniform(0.5, 2, 3), dtype)  # loop invariant
    gamma = tf.constant(rng.uniform(0.5, 2, (S, 3)), dtype)

    def call(op, args):
        return list(op(**args, v=v, variance_epsilon=0.01, scale_after_normalization=scale_after))

    got, loop = vectorized_and_loop(gobn.ops.gobn_batch_norm_with_global_normalization_grad,
                                    {"t": t, "m": m, "gamma": gamma, "backprop": backprop}, {}, call)
    names = ("dx", "dm", "dv", "db", "dg")
    for i in range(S):
        want = global_norm_grad_reference(t[i], m[i], v, gamma[i], backprop[i], 0.01, scale_after)
        for what, g, w in zip(names, got, want):
            assert_close(g[i], w, dtype, f"{what}[{i}] against the float64 reference")
    for what, g, w in zip(names, got, loop):
        assert_max_close(g, w, f"{what} against a loop of single calls", tol=1e-12 if dtype == tf.float64 else 1e-4)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW", "NCDHW"])
def test_grad_reduce_and_apply_vectorized_map(data_format):
    """No stock twin: against a loop of single calls and their kinds' TF-op formulas (compute), vectorized."""
    from gobn import _kinds

    rng = np.random.default_rng(7)
    shape = SHAPES[data_format]
    c = channels(data_format, shape)
    dy = tf.constant(rng.normal(0, 1, (S,) + shape), tf.float32)
    x = tf.constant(rng.normal(1, 2, (S,) + shape), tf.float32)
    mean = tf.constant(rng.normal(1, 1, (S, c)), tf.float32)
    scale = tf.constant(rng.uniform(0.5, 2, c), tf.float32)
    variance = tf.constant(rng.uniform(0.5, 4, (S, c)), tf.float32)
    count = tf.constant(int(np.prod(shape)) // c * 2, tf.int64)

    def reduce(op, args):
        return list(op(**args, data_format=data_format))

    got, loop = vectorized_and_loop(gobn.ops.gobn_batch_norm_grad_reduce, {"y_backprop": dy, "x": x, "mean": mean},
                                    {}, reduce)
    formula = vmap(lambda e: list(_kinds.of("GradReduce").compute(*e, data_format).values()), [dy, x, mean])
    for what, g, w, f in zip(("sum_dy", "sum_dy_xmu"), got, loop, formula):
        assert_max_close(g, w, f"{what} against a loop")
        assert_max_close(g, f, f"{what} against the formula")
    assert got[2].dtype == tf.int64 and list(got[2].numpy()) == [int(np.prod(shape)) // c] * S
    sum_dy, sum_dy_xmu = got[0] * 2, got[1] * 2

    def apply(op, args):
        return [op(**args, epsilon=0.001, data_format=data_format)]

    per_iteration = {"y_backprop": dy, "x": x, "mean": mean, "variance": variance, "sum_dy": sum_dy,
                     "sum_dy_xmu": sum_dy_xmu}
    got, loop = vectorized_and_loop(gobn.ops.gobn_batch_norm_grad_apply, per_iteration,
                                    {"scale": scale, "count": count}, apply)
    formula = vmap(lambda e: _kinds.of("GradApply").compute(e[0], e[1], scale, *e[2:], count, 0.001,
                                                             data_format)["x_backprop"],
                   [dy, x, mean, variance, sum_dy, sum_dy_xmu])
    assert_max_close(got[0], loop[0], "x_backprop against a loop")
    assert_max_close(got[0], formula, "x_backprop against the formula")

    # A count that differs between iterations: one op per iteration.
    counts = tf.constant([count.numpy() + k for k in range(S)], tf.int64)
    got, loop = vectorized_and_loop(gobn.ops.gobn_batch_norm_grad_apply, {**per_iteration, "count": counts},
                                    {"scale": scale}, apply)
    assert_max_close(got[0], loop[0], "x_backprop with a per-iteration count against a loop")


# ---------------------------------------------------------------------------
# jacobian / batch_jacobian / per-example gradients through gobn.fused_batch_norm

BN_SHAPES = {"NHWC": (3, 2, 3, 2), "NCHW": (3, 2, 2, 3)}


def bn_inputs(data_format, seed):
    rng = np.random.default_rng(seed)
    shape = BN_SHAPES[data_format]
    c = channels(data_format, shape)
    x = tf.constant(rng.normal(1, 2, shape), tf.float32)
    w = tf.constant(rng.normal(0, 1, shape), tf.float32)
    scale = tf.constant(rng.uniform(0.5, 2, c), tf.float32)
    offset = tf.constant(rng.normal(0, 1, c), tf.float32)
    mean = tf.constant(rng.normal(1, 1, c), tf.float32)
    variance = tf.constant(rng.uniform(0.5, 4, c), tf.float32)
    return x, w, scale, offset, mean, variance


def bn_kwargs(data_format, is_training, mean, variance):
    kwargs = dict(data_format=data_format, is_training=is_training, epsilon=0.001)
    if not is_training:
        kwargs.update(mean=mean, variance=variance)
    return kwargs


BOTH = pytest.mark.parametrize("batch_norm", [gobn.fused_batch_norm, tf.compat.v1.nn.fused_batch_norm],
                               ids=["gobn", "stock"])
CASES = pytest.mark.parametrize("data_format,is_training", [
    ("NHWC", True), ("NHWC", False), ("NCHW", True), ("NCHW", False)],
    ids=["NHWC-training", "NHWC-inference", "NCHW-training", "NCHW-inference"])


def jacobians(batch_norm, data_format, is_training, seed):
    x, w, scale, offset, mean, variance = bn_inputs(data_format, seed)
    kwargs = bn_kwargs(data_format, is_training, mean, variance)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, scale, offset])
        y, _, _ = batch_norm(x, scale, offset, **kwargs)
        per_example_loss = tf.reduce_sum(tf.reshape(y * y * w, [x.shape[0], -1]), 1)
    out = tape.jacobian(per_example_loss, [x, scale, offset])
    out.append(tape.jacobian(y, x))
    out.append(tape.batch_jacobian(y, x))
    out.append(tape.batch_jacobian(tf.reshape(y * w, [x.shape[0], -1]), x))
    return out


@CASES
def test_jacobians_match_stock(no_fallback, data_format, is_training):
    got = jacobians(gobn.fused_batch_norm, data_format, is_training, seed=8)
    want = jacobians(tf.compat.v1.nn.fused_batch_norm, data_format, is_training, seed=8)
    names = ("jacobian(loss, x)", "jacobian(loss, scale)", "jacobian(loss, offset)", "jacobian(y, x)",
             "batch_jacobian(y, x)", "batch_jacobian(y*w, x)")
    for what, g, w in zip(names, got, want):
        assert g is not None, what
        assert_max_close(g, w, what)


def test_jacobian_without_converters_fails(no_fallback, monkeypatch):
    """The no_fallback fixture does make a missing converter fail (the check above is not vacuous)."""
    from tensorflow.python.ops.parallel_for import pfor

    monkeypatch.delitem(pfor._pfor_converter_registry, "Gobn>FusedBatchNormGradV3")
    with pytest.raises(ValueError, match="vectorizing the jacobian") as failure:
        jacobians(gobn.fused_batch_norm, "NHWC", True, seed=8)
    assert "No pfor vectorization defined for Gobn>FusedBatchNormGradV3" in str(failure.value.__cause__)


def per_example_gradients(batch_norm, data_format, is_training, seed):
    """DP-SGD style: the gradient of each example's loss, one example a batch, vectorized."""
    x, w, scale, offset, mean, variance = bn_inputs(data_format, seed)
    kwargs = bn_kwargs(data_format, is_training, mean, variance)
    gain = tf.constant(np.linspace(0.5, 1.5, x.shape[1 if data_format == "NCHW" else 3]), tf.float32)
    gain_shape = [1, -1, 1, 1] if data_format == "NCHW" else [-1]

    def one(example):
        ex, ew = example
        with tf.GradientTape() as tape:
            tape.watch([gain, scale, offset])
            # tanh: batch norm in training is invariant to a per-channel gain before it.
            y, _, _ = batch_norm(tf.tanh(ex[None] * tf.reshape(gain, gain_shape) / 4), scale, offset, **kwargs)
            loss = tf.reduce_sum(y * ew[None]) + 0.1 * tf.reduce_sum(y * y)
        return tape.gradient(loss, [gain, scale, offset])

    return vmap(one, (x, w))


@CASES
def test_per_example_gradients_match_stock(data_format, is_training):
    got = per_example_gradients(gobn.fused_batch_norm, data_format, is_training, seed=9)
    want = per_example_gradients(tf.compat.v1.nn.fused_batch_norm, data_format, is_training, seed=9)
    for what, g, w in zip(("gain", "scale", "offset"), got, want):
        assert g.shape[0] == BN_SHAPES[data_format][0], what
        assert_max_close(g, w, f"per-example gradient for {what}")


# ---------------------------------------------------------------------------
# Second order under vectorization: gobn's registered gradients (gobn._gradients)


def hessians(batch_norm, data_format, is_training, seed):
    """jacobian of ∂L/∂x (through the Gobn> op's registered gradient) with respect to x, scale and offset."""
    x, w, scale, offset, mean, variance = bn_inputs(data_format, seed)
    kwargs = bn_kwargs(data_format, is_training, mean, variance)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([x, scale, offset])
        with tf.GradientTape() as inner:
            inner.watch(x)
            y, _, _ = batch_norm(x, scale, offset, **kwargs)
            loss = tf.reduce_sum(y * w) + tf.reduce_sum(y * y * y) * 0.1
        dx = inner.gradient(loss, x)
    return outer.jacobian(dx, [x, scale]) + [outer.batch_jacobian(dx, x)]


@CASES
def test_second_order_jacobians_match_stock(no_fallback, data_format, is_training):
    got = hessians(gobn.fused_batch_norm, data_format, is_training, seed=10)
    want = hessians(tf.compat.v1.nn.fused_batch_norm, data_format, is_training, seed=10)
    for what, g, w in zip(("jacobian(dx, x)", "jacobian(dx, scale)", "batch_jacobian(dx, x)"), got, want):
        assert g is not None, what
        assert_max_close(g, w, what)


def test_per_example_gradient_penalty_matches_stock():
    """vectorized_map of a double-backprop gradient (per-example gradient penalty)."""
    results = []
    for batch_norm in (gobn.fused_batch_norm, tf.compat.v1.nn.fused_batch_norm):
        x, w, scale, offset, _, _ = bn_inputs("NHWC", seed=11)

        def one(example, batch_norm=batch_norm):
            ex, ew = example
            with tf.GradientTape() as outer:
                outer.watch([ex, scale])
                with tf.GradientTape() as inner:
                    inner.watch(ex)
                    y, _, _ = batch_norm(ex[None], scale, offset)
                    loss = tf.reduce_sum(y * ew[None])
                dx = inner.gradient(loss, ex)
                penalty = tf.reduce_sum(dx * dx)
            return outer.gradient(penalty, [ex, scale])

        results.append(vmap(one, (x, w)))
    for what, g, w in zip(("x", "scale"), *results):
        assert_max_close(g, w, f"per-example penalty gradient for {what}")


def test_vectorized_second_order_of_raw_op():
    """vectorized_map over the registered gradient of Gobn>FusedBatchNormGradV3 against stock's."""
    per_iteration, fixed = fused_inputs("NCHW", seed=12, stacked=("y_backprop", "x"))
    weights = tf.constant(np.random.default_rng(12).normal(0, 1, SHAPES["NCHW"]), tf.float32)

    def second(op, elems):
        dy, x = elems
        with tf.GradientTape() as tape:
            tape.watch([dy, x])
            out = fused_call(op, {"y_backprop": dy, "x": x, **fixed}, True, "NCHW", True)
            value = tf.reduce_sum(out[0] * weights) + tf.reduce_sum(out[1] * out[2])
        return tape.gradient(value, [dy, x])

    elems = (per_iteration["y_backprop"], per_iteration["x"])
    got = vmap(functools.partial(second, gobn.ops.gobn_fused_batch_norm_grad_v3), elems)
    want = vmap(functools.partial(second, tf.raw_ops.FusedBatchNormGradV3), elems)
    for what, g, w in zip(("y_backprop", "x"), got, want):
        assert_max_close(g, w, f"second-order gradient for {what}")


# ---------------------------------------------------------------------------
# Registration


def test_every_op_has_a_converter():
    """Each op's converter is its kind's (gobn._kinds)."""
    from gobn import _kinds, _pfor
    from gobn._opdefs_gen import OPS
    from tensorflow.python.ops.parallel_for import pfor

    assert _pfor.AVAILABLE
    for op in OPS:
        assert pfor._pfor_converter_registry.get(op.name) is _kinds.of(op.kind).convert, op.name


def test_package_imports_without_pfor_registry():
    """RegisterPFor is private: without it gobn still imports and works, registering no converters."""
    script = textwrap.dedent("""
        import sys
        import tensorflow as tf
        sys.modules["tensorflow.python.ops.parallel_for.pfor"] = None  # as if it moved
        import gobn
        from gobn import _pfor
        assert not _pfor.AVAILABLE
        x = tf.random.normal([2, 2, 2, 3])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, _, _ = gobn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]))
            loss = tf.reduce_sum(y * tf.reshape(tf.range(24.0) ** 2, x.shape) / 100)
        assert tape.gradient(loss, x).shape == x.shape
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
