"""What a call of gobn's FusedBatchNormGradV3 costs inside TensorFlow, beside stock's.

`make gpu-tf-check` runs it on GPU:0 after the checks (python_tests/
test_device.py) and merges its record into bench/gpu_tf.json as "stream":

    python3 -m bench.gpu_calls --device GPU:0 --merge-into bench/gpu_tf.json

For each shape and dtype (--dtypes: float and half), NHWC training with the
statistics of stock's forward on the device (gobn._testing.fused_inputs),
four ways of calling are timed
interleaved (timing.time_interleaved), per call in a tf.function of CHAIN
dependent calls (each call's x_backprop is the next one's y_backprop) and
eagerly:

  stock      stock's kernel
  stock'     stock's again: stock'/stock is the noise
  gobn       gobn on TensorFlow's stream, as stock's kernel runs
  gobn_sync  gobn by the synchronizing rule (drain the device before, wait
             after: the fallback, gobn._set_tf_stream(False)), beside it

The record is gobn._stream_stats() after the run (gobn_sync's calls are its
synchronized ones) and per_call, a row per shape and dtype. --device CPU:0
runs the same on the CPU, where both gobn rows are one kernel.

--profile adds host_profile: the first shape's float chain, stock's and
gobn's each under TensorFlow's profiler, every event of the host's threads
by name in microseconds and occurrences per call, so that the host time a
call of gobn costs beside stock's shows where it goes (TensorFlow's executor,
the op's Compute, what the Compute calls that TensorFlow traces).
"""

import argparse
import json
import sys

from bench.machine import command_line
from bench.timing import host_events, op_type, time_interleaved
from tools.checkout import tensorflow_env

SHAPES = [(8, 8, 8, 32), (32, 7, 7, 512), (32, 14, 14, 256), (32, 56, 56, 64)]
DTYPES = {"float": "float32", "half": "float16"}
CHAIN = 20
# host_profile: chains run under the profiler a side, and the events kept a side
PROFILE_CHAINS = 50
PROFILE_EVENTS = 25


def shapes(text):
    return [tuple(int(d) for d in shape.split("x")) for shape in text.split(",")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="GPU:0", help="the device (default GPU:0)")
    p.add_argument("--reps", type=int, default=7, help="least timed rounds per shape (median reported)")
    p.add_argument("--shapes", type=shapes, default=SHAPES,
                   help="the NHWC shapes, as 8x8x8x32,32x7x7x512 (default: " +
                        ",".join("x".join(map(str, s)) for s in SHAPES) + ")")
    p.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma-separated, of {', '.join(DTYPES)} (default: both)")
    p.add_argument("--profile", action="store_true",
                   help="add host_profile: the first shape's float call under TensorFlow's profiler, stock and gobn")
    p.add_argument("--merge-into", metavar="JSON", help='set JSON\'s "stream" record to this run\'s')
    return p.parse_args(argv)


def chained(tf, fn, made):
    """A tf.function of CHAIN dependent calls of fn on made's inputs."""
    @tf.function
    def f(kw):
        kw = dict(kw)
        for _ in range(CHAIN):
            kw["y_backprop"] = fn(**kw, **made.attrs)[0]
        return kw["y_backprop"]
    return f


def per_call(tf, gobn, op, device, shape, dtype, reps, seed):
    """One shape's row: microseconds a call, in a chain and eagerly."""
    from gobn._testing import fused_inputs

    made = fused_inputs(op, DTYPES[dtype], "NHWC", True, shape, seed, device)
    stock, ours = getattr(tf.raw_ops, op.stock), getattr(gobn.ops, op.wrapper)
    fns = {"stock": stock, "stock'": stock, "gobn": ours, "gobn_sync": ours}

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
        graphs = {name: chained(tf, fn, made) for name, fn in fns.items()}
        in_graph = time_interleaved([timed(n, lambda g=g: g(made.inputs).numpy()) for n, g in graphs.items()], reps)
        eager = time_interleaved([timed(n, lambda fn=fn: fn(**made.inputs, **made.attrs)[0].numpy())
                                  for n, fn in fns.items()], reps)
    us = dict(zip(fns, (t / CHAIN * 1e6 for t in in_graph)))
    return dict(op=op.stock, shape=list(shape), dtype=dtype, data_format="NHWC", chain=CHAIN,
                stock_us=round(us["stock"], 1), gobn_us=round(us["gobn"], 1),
                noise=round(us["stock'"] / us["stock"], 3),
                function_us={c: round(v, 1) for c, v in us.items()},
                eager_us={c: round(t * 1e6, 1) for c, t in zip(fns, eager)})


def host_profile(tf, gobn, op, device, shape):
    """The host side of a call of shape, float: stock's chains and gobn's
    (on TensorFlow's stream), each PROFILE_CHAINS of them under TensorFlow's
    profiler apart, every host event by name (an op's by its type, "op
    OpType"), microseconds and occurrences per call, the PROFILE_EVENTS
    longest a side."""
    import collections

    from gobn._testing import fused_inputs

    made = fused_inputs(op, tf.float32, "NHWC", True, shape, 0, device)
    sides = {"stock": getattr(tf.raw_ops, op.stock), "gobn": getattr(gobn.ops, op.wrapper)}
    out = dict(shape=list(shape), dtype="float", chains=PROFILE_CHAINS, calls=PROFILE_CHAINS * CHAIN)
    for side, fn in sides.items():
        us, count = collections.defaultdict(float), collections.defaultdict(int)
        with tf.device(device):
            chain = chained(tf, fn, made)
            chain(made.inputs).numpy()  # traced and warm before the profiler starts
            for name, ps in host_events(lambda: chain(made.inputs).numpy(), PROFILE_CHAINS):
                name = "op " + op_type(name) if op_type(name) else name
                us[name] += ps / 1e6
                count[name] += 1
        calls = out["calls"]
        top = sorted(us, key=lambda n: -us[n])[:PROFILE_EVENTS]
        out[side] = {n: dict(us=round(us[n] / calls, 2), per_call=round(count[n] / calls, 2)) for n in top}
    return out


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
    for dtype in args.dtypes.split(","):
        if dtype not in DTYPES:
            print(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})", file=sys.stderr)
            return 2
        for seed, shape in enumerate(args.shapes):
            rows.append(per_call(tf, gobn, op, args.device, shape, dtype, args.reps, seed))
            print(json.dumps(rows[-1]), flush=True)
    stream = dict(gobn._stream_stats(), device=args.device, per_call=rows,
                  command=command_line(__spec__, sys.argv[1:] if argv is None else argv))
    if args.profile:  # after the counts: its calls are the profiler's, not the timed ones
        try:
            stream["host_profile"] = host_profile(tf, gobn, op, args.device, args.shapes[0])
        except Exception as e:  # the profiler's failure costs the profile, not the timings before it
            stream["host_profile"] = {"error": repr(e)[-2000:]}
        print(json.dumps(stream["host_profile"]), flush=True)
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
