"""Benchmark gobn beside stock TensorFlow, interleaved in one process.

`make bench` runs this. It sets gobn against two stock kernels, each timed
its own way.

Against stock's Eigen kernel (TF_ENABLE_ONEDNN_OPTS=0, in the main process)
every case of the suite is timed as lone calls of a tf.function from Python,
stock's and gobn's alternating call by call. The first table reports medians,
the ratio stock/gobn, and gobn's effective bandwidth counting 12 bytes per
float32 element (x and dy read once, dx written once: the least any kernel
must move; a two-pass training gradient moves 20 where its second pass finds
nothing in cache) against the machine's STREAM-style triad bandwidth
measured in the same run (cmd/triad).
A lone call carries the cost of calling the tf.function from Python,
alike on both sides, which pulls every ratio of the
first table towards 1: the more the smaller the case.

Against stock's oneDNN kernel (TF_ENABLE_ONEDNN_OPTS=1, in a child process)
every case is timed in a graph, as Keras trains: one tf.function makes a
chain of K calls, each call's x_backprop the next one's y_backprop, and a
call's time is the chain's over K. K is chosen case by case from a short
probe so that a chain takes about CHAIN_TARGET (10 ms) or more, at most
CHAIN (100) calls, and recorded. The calling from Python is paid once a
chain; only the smallest cases, whose 100 calls
take less than 10 ms, keep more of it, which pulls their ratios towards 1. Three chains are timed
interleaved, round after round: stock, gobn, and stock again, a second chain
of stock traced on its own. Stock against stock again measures nothing but
the noise of the run; it is reported beside each ratio, and summed up
(median and worst |ratio - 1|) beside the summary of the ratios, taken over
the cases of at least ONEDNN_MIN_ELEMENTS elements. In a chain nothing but
the next call reads a call's x_backprop, so TensorFlow lets gobn write the
next x_backprop over it (capi offers y_backprop's buffer); stock allocates.

Only float32 and bfloat16 have a oneDNN figure. TensorFlow registers oneDNN's
batch-norm gradient (_MklNativeFusedBatchNormGradV3) for those two alone: for
float16 its layout pass leaves FusedBatchNormGradV3 to Eigen (with
TF_CPP_VMODULE=mkl_layout_pass=1 it logs "Skipping rewriting of the node
FusedBatchNormGradV3, reason: Intel oneDNN with DT_HALF is not supported"),
so a oneDNN figure for float16 would be Eigen's again. bfloat16 goes to
oneDNN only on a CPU with AVX-512 or AVX-NE-CONVERT (TensorFlow's
IsDataTypeSupportedByOneDNNOnThisCPU); elsewhere it is left out too
(onednn_dtypes).

Both sides allocate their outputs through TensorFlow's CPU allocator, by
default glibc's malloc. glibc maps large buffers afresh and unmaps them when
freed, so a call of a large case pays thousands of page faults and the kernel
zeroing its output, which says nothing about either kernel; and how often it
does varies from call to call (glibc's per-thread heaps are unmapped when they
empty whatever its trim settings). The bench therefore runs TensorFlow with
its BFC allocator on the CPU (TF_CPU_ALLOCATOR_USE_BFC=true), which keeps the
memory it has mapped and hands it out again, as TensorFlow's GPU allocator
does; and it reports the large cases under the default allocator too, in a
child process.

A lone call of a small case is mostly the cost of calling a tf.function
from Python, alike on both sides; the float32 cases of at most SMALL elements
are also timed against Eigen as chains of CHAIN calls inside one tf.function,
per call.

A lone call of a case larger than L3 carries more of that calling: a kernel
that streams 100 MB through the caches leaves TensorFlow's and Python's own
code and data to come back from memory, so the calling before and after the
op slows several times. So the float32 training cases larger than L3 are
also timed against Eigen as chains of CHAIN_LARGE calls in one tf.function,
per call, and their bandwidth is reported both ways. A lone call's
y_backprop is held by Python, and is not reused.

Where the CPU's L3 cache holds every shape of the suite (a server's L3 of
hundreds of MiB does), the suite gains one float32 training case, beyond-L3,
sized to twice the L3 (beyond_l3_shape): the bandwidth goal is about data
that streams from memory. It counts only towards the bandwidth figures, and
is not timed against oneDNN.

Outputs: markdown tables on stdout, bench/results.json and bench/ratios.png.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

from bench.machine import core_count, cpu_model, onednn_takes
from bench.timing import geomean, time_interleaved
from tools.checkout import ROOT, module_command, tensorflow_env

RESNET = [(112, 64), (56, 64), (56, 256), (28, 128), (28, 512),
          (14, 256), (14, 1024), (7, 512), (7, 2048)]


def suite(only=""):
    """The cases: (label, op, dtype, data_format, is_training, shape); with
    only, those where "label case_name" contains it (--only, for a short
    run: "14x14x1024", "bfloat16 inference", "tiny")."""
    cases = []
    for hw, c in RESNET:
        for fmt in ("NHWC", "NCHW"):
            shape = (8, hw, hw, c) if fmt == "NHWC" else (8, c, hw, hw)
            cases.append(("resnet", "v3", "float32", fmt, True, shape))
    cases.append(("3d", "v3", "float32", "NDHWC", True, (2, 8, 28, 28, 64)))
    cases.append(("dense", "v3", "float32", "NHWC", True, (32, 1, 1, 1024)))
    cases.append(("tiny", "v3", "float32", "NHWC", True, (1, 7, 7, 64)))
    for dtype in ("float16", "bfloat16"):
        for hw, c in ((56, 64), (14, 256)):
            cases.append(("mixed", "v3", dtype, "NHWC", True, (8, hw, hw, c)))
    for dtype in ("float32", "bfloat16"):
        for hw, c in ((56, 64), (14, 1024)):
            cases.append(("inference", "v3", dtype, "NHWC", False, (8, hw, hw, c)))
    big = beyond_l3_shape()
    if big and not any(larger_than_l3(c[2], math.prod(c[5])) for c in cases if c[2] == "float32" and c[4]):
        cases.append((BEYOND, "v3", "float32", "NHWC", True, big))
    return [c for c in cases if only in f"{c[0]} {case_name(*c[2:])}"]


def case_name(dtype, data_format, is_training, shape):
    """A case as the summaries name it, e.g. "float32 training NHWC 8x56x56x64"."""
    mode = "training" if is_training else "inference"
    return f"{dtype} {mode} {data_format} {'x'.join(map(str, shape))}"


def case_key(r):
    """What identifies a row's case across processes."""
    return r["dtype"], r["data_format"], r["is_training"], tuple(r["shape"])


BEYOND = "beyond-L3"


def beyond_l3_shape():
    """An NHWC float32 shape [N, 56, 56, 256], N a multiple of 8, whose x,
    y_backprop and x_backprop take at least twice the L3 cache, or None where
    that would need more than an eighth of the machine's memory. The suite
    takes it where none of its own float32 training shapes is larger than L3
    (a server CPU's L3 of hundreds of MiB holds them all), so the bandwidth
    goal is still measured on data that streams from memory."""
    per_n = 56 * 56 * 256
    n = 8 * math.ceil(2 * l3_bytes() / (3 * 4 * per_n) / 8)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (n, 56, 56, 256) if 3 * 4 * n * per_n <= ram // 8 else None


def case_reps(shape, reps):
    """Repetitions for a case: a third as many (at least 5) for one of more
    than 2^25 elements, whose calls take a tenth of a second or more."""
    return max(5, reps // 3) if math.prod(shape) > 1 << 25 else reps


def gobn_package():
    """The gobn package of this checkout (python/, tools.checkout), which
    loads libgobn.so.

    Importing gobn imports TensorFlow: call this after load_tf has set
    TensorFlow's environment.
    """
    import gobn
    return gobn


def load_tf(onednn):
    tensorflow_env(onednn)
    import tensorflow as tf
    return tf, gobn_package().ops


def newest_fused(tf, lib):
    """Stock's and gobn's newest fused gradient op (FusedBatchNormGradV3), as
    opdef's generated records name them."""
    from gobn._opdefs_gen import BY_KIND
    op = BY_KIND["FusedBatchNormGrad"][-1]
    return getattr(tf.raw_ops, op.stock), getattr(lib, op.wrapper)


def library_path():
    return gobn_package().library_path()


def go_runtime():
    """The Go version libgobn.so was built with, as `go version` reads it from
    the library, e.g. "go1.26.8-X:simd" (None without Go on PATH)."""
    go = shutil.which("go")
    if not go:
        return None
    out = subprocess.run([go, "version", library_path()], capture_output=True, text=True, timeout=60)
    return out.stdout.split(": ", 1)[-1].strip() if out.returncode == 0 else None


def make_inputs(tf, np, dtype, fmt, is_training, shape, seed=0):
    """The newest fused gradient's inputs and attrs for shape laid out as fmt
    (gobn._testing.fused_inputs): x of unit standard deviation and the
    statistics stock's forward's, in inference too, so that a chain's
    gradient stays finite (chain)."""
    from gobn._opdefs_gen import BY_KIND
    from gobn._testing import CHANNELS_FIRST, fused_inputs

    logical = tuple(shape[:1]) + tuple(shape[2:]) + tuple(shape[1:2]) if fmt in CHANNELS_FIRST else tuple(shape)
    case = fused_inputs(BY_KIND["FusedBatchNormGrad"][-1], dtype, fmt, is_training, logical, seed,
                        forward_statistics=True, x_std=1.0)
    return dict(case.inputs, **case.attrs)


# TensorFlow's BFC allocator on the CPU, which keeps what it maps (see above).
BFC = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}

def run_suite(only_float32, reps, only_large=False, only=""):
    """Lone calls of stock Eigen and gobn: every case, or the float32 ones,
    or with only_large those larger than L3."""
    import numpy as np
    tf, lib = load_tf(False)
    stock_op, gobn_op = newest_fused(tf, lib)
    rows = []
    for label, _, dtype, fmt, is_training, shape in suite(only):
        if only_float32 and dtype != "float32":
            continue
        if only_large and not larger_than_l3(dtype, math.prod(shape)):
            continue
        args = make_inputs(tf, np, dtype, fmt, is_training, shape)
        stock = tf.function(lambda: stock_op(**args)[0])
        gobn = tf.function(lambda: gobn_op(**args)[0])
        ts, tg = time_interleaved([stock, gobn], case_reps(shape, reps))
        n = math.prod(shape)
        rows.append(dict(label=label, dtype=dtype, data_format=fmt, is_training=is_training,
                         shape=list(shape), elements=n, stock_ms=ts * 1e3, gobn_ms=tg * 1e3,
                         ratio=ts / tg))
    return rows


# Cases up to this many elements are also timed as a chain of CHAIN calls
# inside one tf.function (each call's x_backprop the next one's y_backprop):
# a lone call of them is mostly the cost of calling a tf.function from
# Python, the same on both sides, which hides what the op itself costs in a
# graph, where a model runs it. The float32 training cases larger than L3 are
# chained too, CHAIN_LARGE calls long (see the module's doc).
SMALL = 1 << 16
CHAIN = 100
CHAIN_LARGE = 8


def chain(tf, op, args, length):
    """A tf.function of length calls of op in a row, each call's x_backprop
    the next one's y_backprop, as a model's layers hand on their gradients.
    The gradient stays finite over CHAIN calls: a call scales it by about
    scale / sqrt(variance), between 0.5 and 1.5 per channel with
    make_inputs' unit-variance x and its batch variance, and 1.5^100 and
    0.5^100 are well inside float32's and bfloat16's range."""
    def f():
        a = dict(args)
        for _ in range(length):
            a["y_backprop"] = op(**a)[0]
        return a["y_backprop"]
    return tf.function(f)


def run_chained(reps, large=False, only=""):
    """Per-call ms of stock Eigen and gobn in chains of calls inside one
    tf.function: the small float32 training cases, CHAIN calls a chain, or
    with large the float32 training cases larger than L3, CHAIN_LARGE."""
    import numpy as np
    tf, lib = load_tf(False)
    length = CHAIN_LARGE if large else CHAIN
    rows = []
    for label, _, dtype, fmt, is_training, shape in suite(only):
        n = math.prod(shape)
        keep = larger_than_l3(dtype, n) if large else n <= SMALL
        if dtype != "float32" or not is_training or not keep:
            continue
        args = make_inputs(tf, np, dtype, fmt, is_training, shape)
        ts, tg = time_interleaved([chain(tf, op, args, length) for op in newest_fused(tf, lib)],
                                  case_reps(shape, reps))
        rows.append(dict(label=label, dtype=dtype, data_format=fmt, shape=list(shape), elements=n,
                         chain=length, stock_ms=ts * 1e3 / length, gobn_ms=tg * 1e3 / length, ratio=ts / tg))
    return rows


# The oneDNN comparison's chains are long enough that one takes about
# CHAIN_TARGET seconds or more, beside which the calling of a tf.function
# from Python is small, and at most CHAIN calls
# long (a graph of hundreds of ops is slow to trace and optimize, and 100
# calls of the smallest cases still take well under CHAIN_TARGET). A case's
# K comes from chains of PROBE calls. The goal counts the cases of at least ONEDNN_MIN_ELEMENTS
# elements: smaller ones are mostly TensorFlow's own cost of a call.
CHAIN_TARGET = 10e-3
PROBE = 2
ONEDNN_MIN_ELEMENTS = 10_000


def onednn_dtypes():
    """The dtypes whose FusedBatchNormGradV3 TensorFlow's CPU build hands to
    oneDNN with TF_ENABLE_ONEDNN_OPTS=1: float32 always; bfloat16 where the
    CPU has AVX-512 or AVX-NE-CONVERT, as TensorFlow's
    IsDataTypeSupportedByOneDNNOnThisCPU asks; never float16, for which
    TensorFlow registers no oneDNN batch-norm gradient (see the module's
    doc)."""
    return tuple(dtype for dtype in ("float32", "bfloat16") if onednn_takes(dtype))


def chain_length(tf, ops, args):
    """K for a case: calls enough that a chain of the faster of ops takes
    about CHAIN_TARGET seconds, at most CHAIN. A call's time is estimated
    from chains of PROBE calls less a tf.function that calls no op, so that
    the calling from Python is not taken for the op's."""
    idle = tf.function(lambda: tf.identity(args["y_backprop"]))
    *probes, t_idle = time_interleaved([chain(tf, op, args, PROBE) for op in ops] + [idle], 3, seconds=0)
    per_call = max(min(probes) - t_idle, 1e-7) / PROBE
    return max(1, min(CHAIN, math.ceil(CHAIN_TARGET / per_call)))


def run_onednn(reps, only=""):
    """Per-call ms of stock oneDNN, gobn and stock oneDNN again, in chains of
    K calls inside one tf.function, timed interleaved: every case of a dtype
    of onednn_dtypes(), the beyond-L3 case aside. The second stock chain is
    traced on its own: stock against it is the run's noise."""
    import numpy as np
    tf, lib = load_tf(True)
    stock, gobn = newest_fused(tf, lib)
    rows = []
    for label, _, dtype, fmt, is_training, shape in suite(only):
        if dtype not in onednn_dtypes() or label == BEYOND:
            continue
        args = make_inputs(tf, np, dtype, fmt, is_training, shape)
        k = chain_length(tf, (stock, gobn), args)
        ts, tg, ta = time_interleaved([chain(tf, op, args, k) for op in (stock, gobn, stock)],
                                      case_reps(shape, reps))
        rows.append(dict(label=label, dtype=dtype, data_format=fmt, is_training=is_training,
                         shape=list(shape), elements=math.prod(shape), chain=k,
                         stock_ms=ts * 1e3 / k, gobn_ms=tg * 1e3 / k, stock_again_ms=ta * 1e3 / k))
    return rows


def add_bandwidth(r, bw):
    """Adds gobn's GB/s counting 12 bytes per element (x and dy read once, dx
    written once: the least a float32 gradient must move, the issue's
    measure) and its % of the triad bandwidth bw, and its GB/s at the 20
    bytes a two-pass training gradient moves when the second pass finds
    nothing in cache."""
    seconds = r["gobn_ms"] * 1e-3
    r["gobn_gbs_20B"] = 20 * r["elements"] / seconds / 1e9
    r["gobn_gbs_12B"] = 12 * r["elements"] / seconds / 1e9
    r["pct_triad_12B"] = 100 * r["gobn_gbs_12B"] / bw


THRESHOLD_ROWS = [64, 1024, 2048, 4096, 8192, 16384, 32768, 65536]


def run_threshold(reps):
    """gobn's time on NHWC float32 [rows, 1, 1, 64] training gradients."""
    import numpy as np
    tf, lib = load_tf(False)
    _, gobn_op = newest_fused(tf, lib)
    out = {}
    for rows in THRESHOLD_ROWS:
        args = make_inputs(tf, np, "float32", "NHWC", True, (rows, 1, 1, 64))
        gobn = tf.function(lambda: gobn_op(**args)[0])
        t, _ = time_interleaved([gobn, gobn], reps)
        out[rows * 64] = t * 1e3
    return out


def threshold(reps):
    """Times with one worker (GOMAXPROCS=1) and with gobn's default (one
    worker per core), by size: where the second worker starts to pay for its
    wake-up."""
    res = {}
    for procs in ("1", "default"):
        env = dict(os.environ)
        env.pop("GOMAXPROCS", None)
        if procs == "1":
            env["GOMAXPROCS"] = "1"  # one worker: the kernel stays on the calling thread
        outp = subprocess.run(module_command(__spec__, "--child-threshold", "--reps", str(reps)), cwd=ROOT,
                              env=env, check=True, capture_output=True, text=True).stdout
        res[procs] = {int(k): v for k, v in json.loads(outp).items()}
    return res


def triad():
    out = subprocess.run(["go", "run", "./cmd/triad"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["triad_gbs"]


def l3_bytes():
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            s = f.read().strip()
        return int(s[:-1]) * {"K": 1 << 10, "M": 1 << 20}[s[-1]]
    except (OSError, KeyError, ValueError):
        return 32 << 20


def larger_than_l3(dtype, elements):
    """Whether x, y_backprop and x_backprop together exceed the L3 cache."""
    itemsize = 4 if dtype == "float32" else 2
    return 3 * elements * itemsize > l3_bytes()


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    labels = [f"{short[r['dtype']]} {r['data_format']} {'x'.join(map(str, r['shape']))}"
              + ("" if r["is_training"] else " inf") for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r["ratio"] for r in rows], height=0.4, label="vs stock Eigen, lone calls")
    # float16 has no oneDNN figure (see the module's doc): no bar, not a bar of 0.
    measured = [i for i in y if "ratio_onednn" in rows[i]]
    if measured:
        ax.barh([i - 0.2 for i in measured], [rows[i]["ratio_onednn"] for i in measured], height=0.4,
                label="vs stock oneDNN, in a graph")
    ax.axvline(1, color="black", linewidth=0.8)
    ax.axvline(2, color="gray", linestyle="--", linewidth=0.8)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up of gobn (stock time / gobn time)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def per_call(ms):
    """A time per call for the tables, in µs below a millisecond."""
    return f"{ms:.3f} ms" if ms >= 1 else f"{1e3 * ms:.1f} µs"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    # A short run: only the cases whose label or case_name contain this, no
    # threshold and no default-allocator tables, and no files written unless
    # --out names a folder for them.
    ap.add_argument("--only", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--child-onednn", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-threshold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-default-malloc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    child_args = ["--reps", str(args.reps)] + (["--only", args.only] if args.only else [])
    if args.child_default_malloc:
        json.dump(run_suite(True, args.reps, only_large=True, only=args.only), sys.stdout)
        return
    os.environ.update(BFC)  # before TensorFlow loads, here and in the children below
    if args.child_onednn:
        json.dump(run_onednn(args.reps, only=args.only), sys.stdout)
        return
    if args.child_threshold:
        json.dump(run_threshold(args.reps), sys.stdout)
        return

    bw_before = triad()
    rows = run_suite(False, args.reps, only=args.only)
    bw_after = triad()
    chained = run_chained(args.reps, only=args.only)
    chained_large = run_chained(args.reps, large=True, only=args.only)
    bw = max(bw_before, bw_after)
    child = subprocess.run(module_command(__spec__, "--child-onednn", *child_args), cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout
    onednn = {case_key(r): r for r in json.loads(child)}
    sizes, default_malloc = {}, []
    if not args.only:
        sizes = threshold(args.reps)
        plain_env = {k: v for k, v in os.environ.items() if k not in BFC}
        child = subprocess.run(module_command(__spec__, "--child-default-malloc", *child_args), cwd=ROOT,
                               env=plain_env, check=True, capture_output=True, text=True).stdout
        default_malloc = json.loads(child)
    l3 = l3_bytes()
    for r in rows + chained_large:
        add_bandwidth(r, bw)
    for r in rows:
        r["larger_than_l3"] = larger_than_l3(r["dtype"], r["elements"])
        o = onednn.get(case_key(r))
        if o is not None:
            r.update(ratio_onednn=o["stock_ms"] / o["gobn_ms"], onednn_ms=o["stock_ms"],
                     onednn_again_ms=o["stock_again_ms"], gobn_graph_ms=o["gobn_ms"], chain_onednn=o["chain"],
                     noise_onednn=o["stock_ms"] / o["stock_again_ms"])

    name = lambda r: case_name(r["dtype"], r["data_format"], r["is_training"], r["shape"])

    import tensorflow as tf
    machine = dict(cpu=cpu_model(), cores=core_count(), l3_mib=l3 >> 20, allocator_env=BFC,
                   triad_gbs=bw, tensorflow=tf.__version__, go_runtime=go_runtime())
    # The ratios are summed up over the suite; the case added beyond
    # L3 counts only towards the bandwidth.
    suite_rows = [r for r in rows if r["label"] != BEYOND]
    train32 = [r for r in rows if r["dtype"] == "float32" and r["is_training"]]
    f32 = [r for r in train32 if r["label"] != BEYOND]
    geo = geomean(r["ratio"] for r in f32)
    large = [r["pct_triad_12B"] for r in train32 if r["larger_than_l3"]]
    slowest, slowest_f32 = (min(rs, key=lambda r: r["ratio"]) if rs else None for rs in (suite_rows, f32))
    # Against oneDNN: the goal, 1.2x on every case of at least
    # ONEDNN_MIN_ELEMENTS elements and 2x in geometric mean, beside the noise
    # of the same figures taken of stock against itself.
    vs_onednn = [r for r in rows if "ratio_onednn" in r and r["elements"] >= ONEDNN_MIN_ELEMENTS]
    slowest_onednn = min(vs_onednn, key=lambda r: r["ratio_onednn"]) if vs_onednn else None
    noise = sorted(abs(r["noise_onednn"] - 1) for r in vs_onednn)
    noisiest = max(vs_onednn, key=lambda r: abs(r["noise_onednn"] - 1)) if vs_onednn else None
    summary = dict(geomean_ratio_eigen_f32_training=geo,
                   min_ratio_eigen=slowest and slowest["ratio"],
                   min_ratio_eigen_f32_training=slowest_f32 and slowest_f32["ratio"],
                   min_ratio_eigen_chained=min((r["ratio"] for r in chained), default=None),
                   mean_pct_triad_12B_larger_than_l3=statistics.mean(large) if large else None,
                   mean_pct_triad_12B_larger_than_l3_in_graph=(
                       statistics.mean(r["pct_triad_12B"] for r in chained_large) if chained_large else None),
                   onednn_dtypes=list(onednn_dtypes()), onednn_min_elements=ONEDNN_MIN_ELEMENTS,
                   onednn_cases=len(vs_onednn),
                   geomean_ratio_onednn=geomean(r["ratio_onednn"] for r in vs_onednn),
                   min_ratio_onednn=slowest_onednn and slowest_onednn["ratio_onednn"],
                   min_ratio_onednn_case=slowest_onednn and name(slowest_onednn),
                   cases_below_1_2x_onednn=sum(r["ratio_onednn"] < 1.2 for r in vs_onednn),
                   noise_onednn_median=statistics.median(noise) if noise else None,
                   noise_onednn_worst=noise[-1] if noise else None,
                   noise_onednn_worst_case=noisiest and name(noisiest))

    print(f"CPU: {machine['cpu']}, {machine['cores']} cores, L3 {machine['l3_mib']} MiB; "
          f"triad bandwidth {bw:.1f} GB/s (all cores); TensorFlow {machine['tensorflow']}; "
          f"gobn's Go runtime {machine['go_runtime']}; "
          f"TensorFlow's BFC allocator on the CPU ({', '.join(f'{k}={v}' for k, v in BFC.items())})\n")
    print("gobn against stock Eigen (TF_ENABLE_ONEDNN_OPTS=0), lone calls of a tf.function from Python, "
          "each carrying the calling alike on both sides:\n")
    print("| case | dtype | format | mode | shape | stock Eigen ms | gobn ms | ratio | gobn GB/s @12B | % of triad @12B |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['label']} | {r['dtype']} | {r['data_format']} | {'train' if r['is_training'] else 'infer'} | "
              f"{'x'.join(map(str, r['shape']))} | {r['stock_ms']:.3f} | {r['gobn_ms']:.3f} | {r['ratio']:.2f} | "
              f"{r['gobn_gbs_12B']:.1f} | {r['pct_triad_12B']:.0f}% |")
    aside = f" (the {BEYOND} case aside)" if len(f32) < len(train32) else ""
    if f32:
        print(f"\nfloat32 training{aside}: geometric-mean ratio {geo:.2f}x vs Eigen; "
              f"slowest of them {summary['min_ratio_eigen_f32_training']:.2f}x ({name(slowest_f32)}); "
              + (f"mean {summary['mean_pct_triad_12B_larger_than_l3']:.0f}% of triad bandwidth (at 12 B an element) on shapes larger "
                 f"than L3 as a lone call, {summary['mean_pct_triad_12B_larger_than_l3_in_graph']:.0f}% in a graph "
                 "(below). " if large else "no shape larger than L3 within an eighth of this machine's memory, "
                 "so no bandwidth figure for them. ") +
              f"Slowest of all the cases above{aside}: {summary['min_ratio_eigen']:.2f}x ({name(slowest)})")

    print("\ngobn against stock oneDNN (TF_ENABLE_ONEDNN_OPTS=1), in a graph: chains of K calls inside one "
          "tf.function (each call's x_backprop the next one's y_backprop), per call; stock, gobn and stock again "
          "(a second chain traced on its own) interleaved, the last column stock against stock again, the noise. "
          f"Dtypes oneDNN runs here: {', '.join(onednn_dtypes())}.\n")
    print("| case | dtype | format | mode | shape | K | stock oneDNN | gobn | ratio | noise |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "ratio_onednn" in r:
            print(f"| {r['label']} | {r['dtype']} | {r['data_format']} | {'train' if r['is_training'] else 'infer'} "
                  f"| {'x'.join(map(str, r['shape']))} | {r['chain_onednn']} | {per_call(r['onednn_ms'])} | "
                  f"{per_call(r['gobn_graph_ms'])} | {r['ratio_onednn']:.2f} | {r['noise_onednn']:.3f} |")
    if vs_onednn:
        print(f"\nAgainst oneDNN in a graph, over the {len(vs_onednn)} cases of at least {ONEDNN_MIN_ELEMENTS} elements: "
              f"geometric-mean ratio {summary['geomean_ratio_onednn']:.2f}x (goal 2x); slowest "
              f"{summary['min_ratio_onednn']:.2f}x ({summary['min_ratio_onednn_case']}); "
              f"{summary['cases_below_1_2x_onednn']} below 1.2x. Noise band, stock against stock again: "
              f"median {100 * summary['noise_onednn_median']:.1f}%, worst {100 * summary['noise_onednn_worst']:.1f}% "
              f"({summary['noise_onednn_worst_case']}).")

    if chained_large:
        print(f"\nThe float32 training cases larger than L3 against Eigen, timed as chains of {CHAIN_LARGE} calls "
              "inside one tf.function (each call's x_backprop the next one's y_backprop, which gobn writes over "
              "where TensorFlow allows), per call:\n")
        print("| format | shape | stock Eigen ms | gobn ms | ratio | gobn GB/s @12B | % of triad @12B |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in chained_large:
            print(f"| {r['data_format']} | {'x'.join(map(str, r['shape']))} | {r['stock_ms']:.3f} | "
                  f"{r['gobn_ms']:.3f} | {r['ratio']:.2f} | {r['gobn_gbs_12B']:.1f} | {r['pct_triad_12B']:.0f}% |")

    if chained:
        print(f"\nThe float32 cases of at most {SMALL} elements against Eigen, timed as chains of {CHAIN} calls "
              "inside one tf.function (each call's x_backprop the next one's y_backprop), per call:\n")
        print("| case | format | shape | stock Eigen us | gobn us | ratio |")
        print("| --- | --- | --- | ---: | ---: | ---: |")
        for r in chained:
            print(f"| {r['label']} | {r['data_format']} | {'x'.join(map(str, r['shape']))} | "
                  f"{1e3 * r['stock_ms']:.2f} | {1e3 * r['gobn_ms']:.2f} | {r['ratio']:.2f} |")

    if default_malloc:
        print("\nThe same float32 cases larger than L3 under TensorFlow's default CPU allocator, glibc's malloc, "
              "which maps and zeroes every large output afresh on each call:\n")
        print("| format | shape | stock Eigen ms | gobn ms | ratio | gobn GB/s @12B | % of triad @12B |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in default_malloc:
            add_bandwidth(r, bw)
            print(f"| {r['data_format']} | {'x'.join(map(str, r['shape']))} | {r['stock_ms']:.3f} | "
                  f"{r['gobn_ms']:.3f} | {r['ratio']:.2f} | {r['gobn_gbs_12B']:.1f} | {r['pct_triad_12B']:.0f}% |")

    procs = ["1", "default"]
    if sizes:
        print("\nParallel threshold: gobn ms by element count, one worker (GOMAXPROCS=1) "
              f"vs one per core (default; gobn splits float32 from {2 * 262144} elements)\n")
        print("| elements | " + " | ".join(f"GOMAXPROCS={p} ms" for p in procs) + " | speed-up |")
        print("| ---: | " + " | ".join("---:" for _ in procs) + " | ---: |")
        for n in sorted(sizes[procs[0]]):
            print(f"| {n} | " + " | ".join(f"{sizes[p][n]:.3f}" for p in procs)
                  + f" | {sizes[procs[0]][n] / sizes[procs[-1]][n]:.2f} |")

    out = args.out or (None if args.only else os.path.join(ROOT, "bench"))
    if out is None:
        print("\na short run (--only): no files written (--out names a folder for them)")
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(dict(machine=machine, summary=summary, rows=rows, chained_rows=chained,
                       chained_large_rows=chained_large, threshold=sizes,
                       default_malloc_rows=default_malloc), f, indent=1)
    chart(rows, os.path.join(out, "ratios.png"))
    shown = os.path.relpath(out, ROOT) if os.path.abspath(out).startswith(ROOT + os.sep) else out
    print(f"wrote {os.path.join(shown, 'results.json')} and {os.path.join(shown, 'ratios.png')}")


if __name__ == "__main__":
    main()
