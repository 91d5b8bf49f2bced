"""The batch-norm gradient fused with its activation's, against the pairs it replaces.

`make bench-fusion` runs this. In networks a batch norm is followed by a
ReLU or a ReLU6, and their backward pass is the activation's gradient
(ReluGrad or Relu6Grad: read dy and the activation's output y, write dz)
then the batch norm's (read dz twice). Per call of a case it times, in one
process with oneDNN on (TF_ENABLE_ONEDNN_OPTS=1, as Keras trains on most
CPUs):

  fused       Gobn>FusedBatchNormGradEx: dz formed where the kernel reads dy
  gobn pair   ReluGrad or Relu6Grad, then Gobn>FusedBatchNormGradV3
  stock pair  ReluGrad or Relu6Grad, then stock's FusedBatchNormGradV3
              (oneDNN's where oneDNN takes the dtype on this CPU)
  stock again the stock pair, a second chain traced on its own: stock
              against it is the run's noise

each as a chain of K calls inside one tf.function (each call's x_backprop
the next one's y_backprop, as a network's layers hand on their gradients),
K chosen case by case as make bench's oneDNN table does (bench.calls:
chains of about 10 ms, at most 100 calls), the four chains interleaved
round after round, with TensorFlow's BFC allocator on the CPU (as make
bench: bench.calls says why). The ratios gobn pair / fused and stock pair /
fused are printed beside stock / stock again.

The cases are the batch norms of ResNet-50 followed by a ReLU and of
MobileNetV2 followed by a ReLU6, at 224x224 images, float32, channels
last, training, at batch 8 and 32 (the 112x112 ones at batch 8 only), and
a few more: bfloat16 and float16, channels first and 5-D in training, and
inference channels last (stock's CPU kernel rejects it channels first). y is the
activation of the batch norm's forward on the case's x; scale is sqrt(2),
so that a chain's gradient keeps its size though the mask zeroes about
half of it. Before timing, each case's one call of the fused op is checked
against one of the gobn pair and of the stock pair (x_backprop, within the
dtype's tolerance).

--quick runs two cases, a few rounds: a smoke run. --record PATH writes the
record (make bench-fusion: bench/fusion.json); without it nothing is
written. --cores N runs on the first N cores the process may use (the
goal's figures are taken on 2).
"""

import argparse
import json
import math
import os
import statistics
import sys

from bench.calls import BFC, case_reps, chain, chain_length, go_runtime, load_tf, make_inputs
from bench.machine import command_line, core_count, cpu_model, onednn_takes
from bench.timing import geomean, time_interleaved

# The goals: the fused call against each pair, per call.
GOAL_GOBN_PAIR = 1.2
GOAL_STOCK_PAIR = 2.0

# (spatial side, channels) of the batch norms followed by their activation
# at 224x224: ResNet-50's ReLUs (the stem and each bottleneck's first two;
# the third's ReLU follows the shortcut's addition), MobileNetV2's ReLU6s
# (the stem, each block's expansion and depthwise convolutions).
RESNET50 = [(112, 64), (56, 64), (28, 128), (14, 256), (7, 512)]
MOBILENETV2 = [(112, 32), (112, 96), (56, 144), (28, 192), (14, 384), (14, 576), (7, 960)]
NETS = (("resnet50", "Relu", RESNET50), ("mobilenetv2", "Relu6", MOBILENETV2))


def suite(quick=False, only=""):
    """The cases, each a dict: net, activation, dtype, data_format,
    is_training and the shape as laid out. quick: two of them; only: those
    whose name (case_name) contains it."""
    cases = []
    for batch in (8, 32):
        for net, activation, shapes in NETS:
            for hw, c in shapes:
                if batch == 32 and hw == 112:
                    continue  # 100 to 400 MB a tensor: batch 8 has them
                cases.append(dict(net=net, activation=activation, dtype="float32", data_format="NHWC",
                                  is_training=True, shape=(batch, hw, hw, c)))
    more = [("resnet50", "Relu", "bfloat16", "NHWC", True, (8, 56, 56, 64)),
            ("mobilenetv2", "Relu6", "bfloat16", "NHWC", True, (8, 28, 28, 192)),
            ("mobilenetv2", "Relu6", "float16", "NHWC", True, (8, 28, 28, 192)),
            ("resnet50", "Relu", "float32", "NCHW", True, (8, 64, 56, 56)),
            ("resnet50", "Relu", "float32", "NCHW", True, (8, 256, 14, 14)),
            ("resnet50", "Relu", "float32", "NDHWC", True, (2, 8, 28, 28, 64)),
            ("resnet50", "Relu", "float32", "NHWC", False, (8, 56, 56, 64)),
            ("mobilenetv2", "Relu6", "float32", "NHWC", False, (8, 14, 14, 576))]
    cases += [dict(zip(("net", "activation", "dtype", "data_format", "is_training", "shape"), c)) for c in more]
    if quick:
        keep = {"resnet50 Relu float32 training NHWC 8x56x56x64", "mobilenetv2 Relu6 float32 training NHWC 8x14x14x576"}
        cases = [c for c in cases if case_name(c) in keep]
    return [c for c in cases if only in case_name(c)]


def case_name(c):
    """A case as the tables name it, e.g. "resnet50 Relu float32 training NHWC 8x56x56x64"."""
    mode = "training" if c["is_training"] else "inference"
    return f"{c['net']} {c['activation']} {c['dtype']} {mode} {c['data_format']} {'x'.join(map(str, c['shape']))}"


def case_args(tf, np, c):
    """The fused op's inputs and attrs for c: make bench's (bench.calls:
    x of unit standard deviation, the forward's statistics in both modes),
    scale sqrt(2), offset drawn, y the activation of the forward's output."""
    from gobn._testing import CHANNELS_FIRST

    args = make_inputs(tf, np, c["dtype"], c["data_format"], c["is_training"], c["shape"])
    axis = 1 if c["data_format"] in CHANNELS_FIRST else len(c["shape"]) - 1
    channels = c["shape"][axis]
    scale = np.full(channels, math.sqrt(2.0))
    offset = np.random.default_rng(1).normal(0.0, 0.5, channels)
    along = [channels if i == axis else 1 for i in range(len(c["shape"]))]
    x = args["x"].numpy().astype(np.float64)
    mean, variance = (args[k].numpy().reshape(along) for k in ("reserve_space_1", "reserve_space_2"))
    y = (x - mean) / np.sqrt(variance + args["epsilon"]) * scale.reshape(along) + offset.reshape(along)
    y = np.clip(y, 0.0, 6.0 if c["activation"] == "Relu6" else None)
    args.update(scale=tf.constant(scale, tf.float32), offset=tf.constant(offset, tf.float32),
                y=tf.constant(y, args["x"].dtype), activation_mode=c["activation"])
    return args


def pair(tf, batch_norm_grad):
    """The activation's gradient, then batch_norm_grad, as one call of the
    fused op's args."""
    grads = {"Relu": tf.raw_ops.ReluGrad, "Relu6": tf.raw_ops.Relu6Grad}

    def call(y, offset, activation_mode, **args):
        dz = grads[activation_mode](gradients=args["y_backprop"], features=y)
        return batch_norm_grad(**dict(args, y_backprop=dz))

    return call


def run(cases, reps):
    """Per-call ms of the fused op, gobn's pair, stock's pair and stock's
    again, in chains of K calls, for each case."""
    import numpy as np

    tf, lib = load_tf(True)
    import gobn
    from gobn._testing import assert_close
    from tensorflow.python.util import _pywrap_util_port

    ops = {"fused": lib.gobn_fused_batch_norm_grad_ex, "gobn_pair": pair(tf, lib.gobn_fused_batch_norm_grad_v3),
           "stock_pair": pair(tf, tf.raw_ops.FusedBatchNormGradV3)}
    rows = []
    for c in cases:
        args = case_args(tf, np, c)
        once = {side: tf.function(lambda op=op: op(**args)[0])() for side, op in ops.items()}
        for side in ("gobn_pair", "stock_pair"):
            assert_close(once["fused"], once[side], args["x"].dtype, f"{case_name(c)}: fused against {side}")
        sides = (ops["stock_pair"], ops["fused"], ops["gobn_pair"], ops["stock_pair"])
        k = chain_length(tf, sides[:3], args)
        before = gobn.kernel_calls().get("Gobn>FusedBatchNormGradEx", {}).get("CPU", 0)
        stock, fused, gobn_pair, stock_again = (
            t * 1e3 / k for t in time_interleaved([chain(tf, op, args, k) for op in sides], case_reps(c["shape"], reps)))
        if gobn.kernel_calls().get("Gobn>FusedBatchNormGradEx", {}).get("CPU", 0) == before:
            raise SystemExit(f"bench.fusion: {case_name(c)}: the fused chain did not run gobn's kernel")
        rows.append(dict(case=case_name(c), net=c["net"], activation=c["activation"], dtype=c["dtype"],
                         data_format=c["data_format"], is_training=c["is_training"], shape=list(c["shape"]),
                         elements=math.prod(c["shape"]), chain=k, onednn_takes_dtype=onednn_takes(c["dtype"]),
                         fused_ms=fused, gobn_pair_ms=gobn_pair, stock_pair_ms=stock, stock_pair_again_ms=stock_again,
                         ratio_gobn_pair=gobn_pair / fused, ratio_stock_pair=stock / fused, noise=stock / stock_again))
        print(f"bench.fusion: {case_name(c)} done", file=sys.stderr, flush=True)
    return rows, bool(_pywrap_util_port.IsMklEnabled()), tf.__version__


def summarize(rows):
    """The goal's figures, over the float32 channels-last training cases of
    the two nets: geometric-mean and least ratios against each pair, the
    cases short of each goal, and the noise (median and worst |stock /
    stock again - 1|) over every case."""
    goal = [r for r in rows if r["dtype"] == "float32" and r["data_format"] == "NHWC" and r["is_training"]]
    noise = sorted(abs(r["noise"] - 1) for r in rows)
    out = dict(goal_cases=len(goal), noise_median=statistics.median(noise) if noise else None,
               noise_worst=noise[-1] if noise else None)
    for side, want in (("gobn_pair", GOAL_GOBN_PAIR), ("stock_pair", GOAL_STOCK_PAIR)):
        ratios = [r[f"ratio_{side}"] for r in goal]
        out[f"geomean_ratio_{side}"] = geomean(ratios)
        out[f"min_ratio_{side}"] = min(ratios, default=None)
        out[f"cases_below_goal_{side}"] = sum(x < want for x in ratios)
    return out


def per_call(ms):
    return f"{ms:.3f} ms" if ms >= 1 else f"{1e3 * ms:.1f} µs"


def print_table(rows, s):
    print("\nper call, chains of K calls in a tf.function, oneDNN on; above 1: the fused op is faster\n")
    print("| case | K | fused | gobn pair | stock pair | gobn pair/fused | stock pair/fused | noise |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['case']} | {r['chain']} | {per_call(r['fused_ms'])} | {per_call(r['gobn_pair_ms'])} | "
              f"{per_call(r['stock_pair_ms'])} | {r['ratio_gobn_pair']:.2f} | {r['ratio_stock_pair']:.2f} | "
              f"{r['noise']:.3f} |")
    if s["goal_cases"]:
        print(f"\nover the {s['goal_cases']} float32 NHWC training cases: against gobn's pair geomean "
              f"{s['geomean_ratio_gobn_pair']:.2f}x, least {s['min_ratio_gobn_pair']:.2f}x, "
              f"{s['cases_below_goal_gobn_pair']} below {GOAL_GOBN_PAIR}x; against stock's pair geomean "
              f"{s['geomean_ratio_stock_pair']:.2f}x, least {s['min_ratio_stock_pair']:.2f}x, "
              f"{s['cases_below_goal_stock_pair']} below {GOAL_STOCK_PAIR}x")
    print(f"noise, stock against stock again: median {s['noise_median']:.1%}, worst {s['noise_worst']:.1%}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="rounds of the four chains a case (at least)")
    parser.add_argument("--quick", action="store_true", help="two cases, three rounds: a smoke run")
    parser.add_argument("--only", default="", help="the cases whose name contains this, e.g. 'Relu6 float32'")
    parser.add_argument("--cores", type=int, default=0, help="run on the first N cores the process may use")
    parser.add_argument("--record", default="", help="write the record here (make bench-fusion: bench/fusion.json)")
    args = parser.parse_args(argv)
    if args.cores:  # before TensorFlow and gobn size their threads
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    os.environ.update(BFC)  # TensorFlow's BFC allocator on the CPU, as make bench's (bench.calls)
    cases = suite(args.quick, args.only)
    if not cases:
        raise SystemExit(f"bench.fusion: no case's name contains {args.only!r}")
    rows, onednn, tensorflow = run(cases, 3 if args.quick else args.reps)
    summary = summarize(rows)
    print(f"{cpu_model()}, {core_count()} cores; TensorFlow {tensorflow}, oneDNN {'on' if onednn else 'off'}")
    print_table(rows, summary)
    if args.record:
        record = dict(machine=dict(cpu=cpu_model(), cores=core_count(), tensorflow=tensorflow, onednn=onednn,
                                   go_runtime=go_runtime(), allocator_env=BFC),
                      command=command_line(__spec__, argv), quick=args.quick, summary=summary, rows=rows)
        with open(args.record, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        print(f"wrote {args.record}")


if __name__ == "__main__":
    main()
