"""What a call of gobn's FusedBatchNormGradV3 costs inside TensorFlow, beside stock's.

`make gpu-tf-check` runs it on GPU:0 after the checks (python_tests/
test_device.py) and merges its record into bench/gpu_tf.json as "stream":

    python3 -m bench.gpu_calls --device GPU:0 --merge-into bench/gpu_tf.json

For each shape, float32 NHWC training with the statistics of stock's forward
on the device (gobn._testing.fused_inputs), four ways of calling are timed
interleaved (timing.time_interleaved), per call in a tf.function of CHAIN
dependent calls (each call's x_backprop is the next one's y_backprop) and
eagerly:

  stock      stock's kernel
  stock'     stock's again: stock'/stock is the noise
  gobn       gobn on TensorFlow's stream, as stock's kernel runs
  gobn_sync  gobn by the synchronizing rule (drain the device before, wait
             after: the fallback, gobn._set_tf_stream(False)), beside it

The record is gobn._stream_stats() after the run (gobn_sync's calls are its
synchronized ones) and per_call, a row per shape. --device CPU:0 runs the
same on the CPU, where both gobn rows are one kernel.
"""

import argparse
import json
import sys

from bench.machine import command_line
from bench.timing import time_interleaved
from tools.checkout import tensorflow_env

SHAPES = [(8, 8, 8, 32), (32, 7, 7, 512), (32, 14, 14, 256), (32, 56, 56, 64)]
CHAIN = 20


def shapes(text):
    return [tuple(int(d) for d in shape.split("x")) for shape in text.split(",")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="GPU:0", help="the device (default GPU:0)")
    p.add_argument("--reps", type=int, default=7, help="least timed rounds per shape (median reported)")
    p.add_argument("--shapes", type=shapes, default=SHAPES,
                   help="the NHWC shapes, as 8x8x8x32,32x7x7x512 (default: " +
                        ",".join("x".join(map(str, s)) for s in SHAPES) + ")")
    p.add_argument("--merge-into", metavar="JSON", help='set JSON\'s "stream" record to this run\'s')
    return p.parse_args(argv)


def per_call(tf, gobn, op, device, shape, reps, seed):
    """One shape's row: microseconds a call, in a chain and eagerly."""
    from gobn._testing import fused_inputs

    made = fused_inputs(op, tf.float32, "NHWC", True, shape, seed, device)
    stock, ours = getattr(tf.raw_ops, op.stock), getattr(gobn.ops, op.wrapper)
    fns = {"stock": stock, "stock'": stock, "gobn": ours, "gobn_sync": ours}

    def chained(fn):
        @tf.function
        def f(kw):
            kw = dict(kw)
            for _ in range(CHAIN):
                kw["y_backprop"] = fn(**kw, **made.attrs)[0]
            return kw["y_backprop"]
        return f

    def timed(name, run):
        if name != "gobn_sync":
            return run

        def synchronizing():
            gobn._set_tf_stream(False)
            try:
                run()
            finally:
                gobn._set_tf_stream(True)
        return synchronizing

    with tf.device(device):
        graphs = {name: chained(fn) for name, fn in fns.items()}
        in_graph = time_interleaved([timed(n, lambda g=g: g(made.inputs).numpy()) for n, g in graphs.items()], reps)
        eager = time_interleaved([timed(n, lambda fn=fn: fn(**made.inputs, **made.attrs)[0].numpy())
                                  for n, fn in fns.items()], reps)
    us = dict(zip(fns, (t / CHAIN * 1e6 for t in in_graph)))
    return dict(op=op.stock, shape=list(shape), dtype="float", data_format="NHWC", chain=CHAIN,
                stock_us=round(us["stock"], 1), gobn_us=round(us["gobn"], 1),
                noise=round(us["stock'"] / us["stock"], 3),
                function_us={c: round(v, 1) for c, v in us.items()},
                eager_us={c: round(t * 1e6, 1) for c, t in zip(fns, eager)})


def main(argv=None):
    args = parse_args(argv)
    tensorflow_env()
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each shape traces functions of its own, on purpose
    import gobn
    from gobn._opdefs_gen import BY_KIND
    from gobn._testing import device_type

    devices = [d.name.upper() for d in tf.config.list_logical_devices()]
    if not any(d.endswith("DEVICE:" + args.device.upper()) for d in devices):
        print(f"no device {args.device} here: {devices}", file=sys.stderr)
        return 2
    if device_type(args.device) == "GPU":
        tf.config.set_soft_device_placement(False)  # an op without a GPU kernel fails, not moves
    op = BY_KIND["FusedBatchNormGrad"][-1]
    rows = []
    for seed, shape in enumerate(args.shapes):
        rows.append(per_call(tf, gobn, op, args.device, shape, args.reps, seed))
        print(json.dumps(rows[-1]), flush=True)
    stream = dict(gobn._stream_stats(), per_call=rows,
                  command=command_line(__spec__, sys.argv[1:]))
    if args.merge_into:
        with open(args.merge_into) as f:
            record = json.load(f)
        record["stream"] = stream
        with open(args.merge_into, "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
