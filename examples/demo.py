#!/usr/bin/env python3
"""gobn demo: every op beside its stock TensorFlow twin, on ResNet-50-like inputs.

Loads libgobn.so where gobn.library_path() finds it ($GOBN_LIBRARY, else beside
the package or build/libgobn.so), runs each gobn op and the stock op
on the same inputs, and prints a markdown table: the largest difference from
stock (and from an exact float64 reference), whether it is within docs/design.md's
tolerance, and the median time of each side (both run inside tf.function, or
both through Session.run for the deprecated global-normalization op,
interleaved, after warm-up). Exits non-zero if any row is out of tolerance.

Stock is TensorFlow's Eigen kernel: the demo turns oneDNN off unless
TF_ENABLE_ONEDNN_OPTS is set (TF_ENABLE_ONEDNN_OPTS=1 make demo compares with
oneDNN's kernels, TensorFlow's default on CPUs with AVX512_VNNI or AMX).

Usage, from the repository root: .venv/bin/python -m examples.demo [--reps N]
"""

import argparse
import os
import sys
import time

from bench.machine import core_count, cpu_model
from bench.timing import geomean, time_interleaved
from tools import checkout

checkout.tensorflow_env()  # oneDNN off: stock is the Eigen kernel

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gobn  # noqa: E402
from gobn._opdefs_gen import BY_KIND  # noqa: E402
from gobn._testing import (  # noqa: E402
    CHANNELS_FIRST,
    EPSILON,
    accuracy_excess,
    as_float64,
    fused_inputs,
    global_norm_grad_reference,
    global_norm_inputs,
    global_norm_session,
    tolerance_used,
)

# The ops, as opdef describes them (gobn._opdefs_gen): the fused ones oldest
# first (the newest, FusedBatchNormGradV3, is what Keras runs), and the
# global-normalization one.
FUSED = {op.stock: op for op in BY_KIND["FusedBatchNormGrad"]}
NEWEST = BY_KIND["FusedBatchNormGrad"][-1]
GLOBAL_NORM = BY_KIND["GlobalNormalizationGrad"][0]

RESNET_SHAPES = [(8, 56, 56, 64), (8, 28, 28, 128), (8, 14, 14, 256), (8, 7, 7, 512)]
MIXED_SHAPE = (8, 28, 28, 128)
SHAPE_5D = (2, 8, 28, 28, 32)


def load_library():
    try:
        lib = gobn.ops
    except (FileNotFoundError, ImportError) as e:
        sys.exit(str(e))
    return gobn.library_path(), lib


# ---------------------------------------------------------------------------
# Comparison


def max_abs_error(outputs, wants):
    return max(float(np.max(np.abs(as_float64(g) - as_float64(w)), initial=0.0)) for g, w in zip(outputs, wants))


# ---------------------------------------------------------------------------
# Timing


def time_pair(stock_run, gobn_run, reps):
    """Median milliseconds of stock_run (None where stock has no result) and
    gobn_run, interleaved (timing.time_interleaved)."""
    if stock_run is None:
        return None, time_interleaved([gobn_run], reps)[0] * 1e3
    stock_s, gobn_s = time_interleaved([stock_run, gobn_run], reps)
    return stock_s * 1e3, gobn_s * 1e3


def traced(fn, inputs, attrs):
    """fn inside a tf.function with fully known shapes; returns a runner that waits for the result."""
    names = list(inputs)
    signature = [tf.TensorSpec(inputs[k].shape, inputs[k].dtype) for k in names]
    function = tf.function(lambda *args: fn(**dict(zip(names, args)), **attrs), input_signature=signature)
    concrete = function.get_concrete_function()
    args = [inputs[k] for k in names]

    def run():
        out = concrete(*args)
        out[2].numpy()  # a tiny output: makes sure the kernel has finished
        return out

    return run


# ---------------------------------------------------------------------------
# Rows


class Row:
    def __init__(self, op, dtype, data_format, mode, shape):
        self.op, self.dtype, self.data_format, self.mode, self.shape = op, dtype, data_format, mode, shape
        self.err_stock = None
        self.err_ref = None
        self.used = 0.0
        self.ok = False
        self.stock_ms = None
        self.gobn_ms = None


def fused_row(lib, stock_name, dtype, data_format, is_training, logical_shape, reps, seed):
    """One fused-gradient row; logical_shape is channels-last (N, [D,] H, W, C)."""
    mode = "training" if is_training else "inference"
    channels_first = data_format in CHANNELS_FIRST
    layout = (logical_shape[:1] + logical_shape[-1:] + logical_shape[1:-1]) if channels_first else logical_shape
    row = Row(stock_name, dtype.name, data_format, mode, "x".join(map(str, layout)))
    channels = logical_shape[-1]
    op = FUSED[stock_name]
    side = dtype if "U" not in op.attrs else tf.float32  # FusedBatchNormGrad has all inputs in T
    case = fused_inputs(op, dtype, data_format, is_training, logical_shape, seed)
    inputs, attrs = case.inputs, case.attrs

    gobn_run = traced(getattr(lib, op.wrapper), inputs, attrs)
    # Stock's CPU kernel rejects inference with channels-first formats.
    stock_runs = is_training or not channels_first
    stock_run = traced(getattr(tf.raw_ops, stock_name), inputs, attrs) if stock_runs else None

    got = list(gobn_run())[:3]
    reference = case.reference()
    row.err_ref = max_abs_error(got, reference)
    shapes_ok = got[0].shape == inputs["x"].shape and all(g.shape == [channels] for g in got[1:])
    # Each output by its own dtype's tolerance: x_backprop by T's, the 1-D ones by U's (float32).
    tolerance_dtypes = [dtype, side, side]
    if stock_run:
        stock = list(stock_run())[:3]
        row.err_stock = max_abs_error(got, stock)
        row.used = max(tolerance_used(g, s, t) for g, s, t in zip(got, stock, tolerance_dtypes))
        excess = max(accuracy_excess(g, s, r, t) for g, s, r, t in zip(got, stock, reference, tolerance_dtypes))
        row.ok = shapes_ok and row.used <= 1.0 and excess <= 1.0
    else:
        row.used = max(tolerance_used(g, r, t) for g, r, t in zip(got, reference, tolerance_dtypes))
        row.ok = shapes_ok and row.used <= 1.0
    row.stock_ms, row.gobn_ms = time_pair(stock_run, gobn_run, reps)
    return row


def global_norm_row(lib, dtype, shape, reps, seed, scale_after_normalization=True):
    """The deprecated op: stock runs only in a GraphDef-version-8 graph; both are timed via Session.run."""
    row = Row(GLOBAL_NORM.stock, dtype.name, "NHWC", "scaled" if scale_after_normalization else "unscaled",
              "x".join(map(str, shape)))
    channels = shape[-1]
    inputs = global_norm_inputs(dtype, shape, seed)
    attrs = {"variance_epsilon": EPSILON, "scale_after_normalization": scale_after_normalization}
    # Variables, not fed placeholders: a run copies nothing in.
    session, (stock_out, gobn_out), _ = global_norm_session(
        inputs, attrs, ops=(None, getattr(lib, GLOBAL_NORM.wrapper)), feed=False)
    with session:
        stock, got = session.run([stock_out, gobn_out])
        reference = global_norm_grad_reference(**inputs, **attrs)
        row.err_stock = max_abs_error(got, stock)
        row.err_ref = max_abs_error(got, reference)
        shapes_ok = got[0].shape == tuple(shape) and all(g.shape == (channels,) for g in got[1:])
        if dtype == tf.float16:
            # Stock sums in half: judge gobn against the exact answer.
            row.used = max(tolerance_used(g, r, dtype) for g, r in zip(got, reference))
        else:
            row.used = max(tolerance_used(g, s, dtype) for g, s in zip(got, stock))
        excess = max(accuracy_excess(g, s, r, dtype) for g, s, r in zip(got, stock, reference))
        row.ok = shapes_ok and row.used <= 1.0 and excess <= 1.0
        # Fetch one small output: a tf.group of the outputs gets pruned by grappler
        # (nothing would run), and fetching dx would time a copy.
        row.stock_ms, row.gobn_ms = time_pair(lambda: session.run(stock_out[1]), lambda: session.run(gobn_out[1]),
                                              reps)
    return row


def plan():
    """(kind, args) for every row, in print order: ResNet-50's shapes on the
    newest op, every op's half-precision dtypes, the older ops in float32, the
    5-D formats, and the global-normalization op."""
    rows = []
    formats_4d = [f for f in NEWEST.data_formats if len(f) == 4]  # the 4-D ones: NHWC, NCHW
    for shape in RESNET_SHAPES:
        for data_format in formats_4d:
            for is_training in (True, False):
                rows.append(("fused", (NEWEST.stock, tf.float32, data_format, is_training, shape)))
    for op in FUSED.values():
        for dtype in (tf.as_dtype(name) for name in op.dtypes if name != "float"):
            for is_training in (True, False):
                rows.append(("fused", (op.stock, dtype, "NHWC", is_training, MIXED_SHAPE)))
    for op in list(FUSED.values())[:-1]:
        for data_format in op.data_formats:
            rows.append(("fused", (op.stock, tf.float32, data_format, True, MIXED_SHAPE)))
    for data_format in (f for f in NEWEST.data_formats if f not in formats_4d):
        for is_training in (True, False):
            rows.append(("fused", (NEWEST.stock, tf.float32, data_format, is_training, SHAPE_5D)))
    rows.append(("global", (tf.float32, MIXED_SHAPE)))
    return rows


def fmt_err(value):
    return "—" if value is None else f"{value:.2e}"


def fmt_ms(value):
    return "—" if value is None else f"{value:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20, help="least timed rounds per row (median reported)")
    args = parser.parse_args()

    path, lib = load_library()
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    print("# gobn demo: every op beside stock TensorFlow\n")
    print(f"- CPU: {cpu_model()}, {core_count()} cores")
    if onednn == "0":
        print(f"- stock: TensorFlow {tf.__version__}'s Eigen kernels, oneDNN off (TF_ENABLE_ONEDNN_OPTS=0, the "
              "demo's default); `TF_ENABLE_ONEDNN_OPTS=1 make demo` compares with oneDNN's kernels instead")
    else:
        print(f"- stock: TensorFlow {tf.__version__}'s oneDNN kernels where it has one for the op and dtype on this "
              f"CPU, Eigen's elsewhere (TF_ENABLE_ONEDNN_OPTS={onednn}); `make demo` alone compares with Eigen's")
    print(f"- library: {path}")
    print(f"- timing: both sides in tf.function (Session.run for {GLOBAL_NORM.stock}), interleaved, "
          f"median of at least {args.reps} rounds (more for cheap rows) after 2 warm-ups; epsilon {EPSILON}")
    print("- ok: every output within tolerance of stock (|err| <= atol*max|want| + rtol*|want|, the dtype's "
          "(rtol, atol) of docs/design.md) and no less accurate than stock against a float64 reference; where "
          "stock has no result, within tolerance of the reference")
    print("- tolerance used: the largest |err| / (atol*max|want| + rtol*|want|) over every output's elements: "
          "the share of the tolerance the row used, 1.00 at the limit\n")

    header = ["op", "dtype", "format", "mode", "shape", "max abs err vs stock", "max abs err vs f64 ref",
              "tolerance used", "ok", "stock ms", "gobn ms", "stock/gobn"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * len(header)) + "|")
    failures = 0
    ratios = []
    started = time.perf_counter()
    for seed, (kind, row_args) in enumerate(plan()):
        if kind == "fused":
            row = fused_row(lib, *row_args, reps=args.reps, seed=seed)
        else:
            row = global_norm_row(lib, *row_args, reps=args.reps, seed=seed)
        failures += not row.ok
        ratio = "—"
        if row.stock_ms is not None:
            ratios.append(row.stock_ms / row.gobn_ms)
            ratio = f"{ratios[-1]:.2f}x"
        cells = [row.op, row.dtype, row.data_format, row.mode, row.shape, fmt_err(row.err_stock),
                 fmt_err(row.err_ref), f"{row.used:.2f}", "ok" if row.ok else "FAIL",
                 fmt_ms(row.stock_ms), fmt_ms(row.gobn_ms), ratio]
        print("| " + " | ".join(cells) + " |", flush=True)

    print(f"\n{len(plan())} rows, {failures} out of tolerance; geometric-mean speed ratio stock/gobn "
          f"{geomean(ratios) or float('nan'):.2f}x; {time.perf_counter() - started:.0f} s")
    print("— : stock has no result (its CPU kernel rejects is_training=false with channels-first formats); "
          "such rows are judged against the float64 reference.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
