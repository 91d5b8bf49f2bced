"""Training-step time of Keras applications, stock against gobn, by both routes.

`make bench-models` runs this. Two routes to gobn, each timed against stock:

  keras3    Keras 3's keras.applications model, and gobn.keras.convert of it:
            gobn's layers, backward on Gobn>FusedBatchNormGradV3
  tf_keras  tf_keras's (Keras 2's) model unmodified, with gobn.enable(): its
            fused batch norm's gradients on gobn (kernel priority with oneDNN
            off; Gobn> gradient ops with oneDNN on)

For each model (default: ResNet50 and MobileNetV2, weights=None, small images
and batches) three configs run, each in a process of its own, built from the
same seed (the same weights):

  stock   the model as the applications module builds it
  stock'  the same again: the stock config timed against itself (the noise)
  gobn    the converted model (keras3), or the model in a process that called
          gobn.enable() first (tf_keras: enable() lasts for its process)

and a fourth runs the warm-up in float64. The launcher drives the processes
in lockstep, one at a time, so that they share the machine as configs of one
process would: each times its training step (a tf.function: forward, loss,
backward, SGD with momentum) on the same batch. The first WARMUP steps of
each (tracing included) and one more are not counted; then the configs
alternate in ROUNDS rounds of STEPS_PER_ROUND steps, the order rotating
round by round. It prints each config's median step time, stock/gobn (above
1: gobn's step is faster) and stock'/stock (the noise), and checks that
gobn's kernels ran every batch-norm gradient of gobn's steps and none of
stock's, and that the first step's losses agree (float32 tolerance).

The losses after the warm-up's updates drift apart by float32 round-off,
which these small randomly initialized nets amplify; the float64 warm-up
from the same weights gives how far stock's and gobn's float32 losses are
from the exact run, beside how far they are from each other.

Each oneDNN setting runs its processes with TF_ENABLE_ONEDNN_OPTS set before
TensorFlow is imported.

--gobn-plan SPEC adds gobn_plan, a gobn config whose process sets the CPU
kernels' tuning to SPEC (GOBN_CPU_PLAN, e.g. workers=8: at most 8 workers a
call, leaving the other cores to TensorFlow's own pools); bench/manycore.py
uses it on a many-core machine.

--fusion-off adds gobn_unfused, a gobn config whose process turns off the
fusion of a ReLU's or ReLU6's gradient into the batch norm's
(GOBN_FUSE_ACTIVATIONS=0): gobn_unfused/gobn above 1 is what the fusion
gains a step, beside stock'/stock, and the losses of the two must
agree after the warm-up's updates (float32 tolerance). With --profile-rounds it is profiled too, and
the report gives the runs of ReluGrad and Relu6Grad a step in each config
(the fused gradients run none; ResNet50's ReLUs after a residual's
addition keep theirs).

With --device gpu the steps run on TensorFlow's GPU build (make gpu-tf-check
runs it so): --data-format, --precision mixed (mixed_float16) and --batch-size
choose the configuration, --xla adds stock's and gobn's steps compiled by
XLA (jit_compile=True) as configs stock_xla and gobn_xla (gobn's batch-norm
gradients then calls of its XLA handlers; --merge-into also records them
under "xla"), and gobn's kernels must have run every batch-norm gradient on
the GPU.

--under-xla compiles every config's step with XLA instead: stock against
gobn both under XLA (gobn's batch-norm gradients are calls of its XLA
handlers, gobn._xla, counted as XLA_CPU or XLA_GPU); --merge-into records
those rows under "xla" rather than "models". There stock's own first loss differs from
process to process (the convolution algorithms autotuning picks, TF32), so
the first-loss check allows TF32's 1e-3, or four times stock' against stock
where that is more. --no-top drops the Dense classifier, for a GPU build
without cuBLAS.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.machine import command_line, portable
from tools.checkout import ROOT, module_command
CONFIGS = ("stock", "stock'", "gobn")
# The activation gradients gobn fuses into the batch norm's (gobn._fusion).
ACTIVATION_GRADS = ("ReluGrad", "Relu6Grad")
MODELS = {"resnet50": "ResNet50", "mobilenetv2": "MobileNetV2"}
ROUTES = ("keras3", "tf_keras")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenetv2", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--routes", default=",".join(ROUTES), help=f"comma-separated, of {', '.join(ROUTES)}")
    p.add_argument("--onednn", choices=("both", "on", "off"), default="both")
    p.add_argument("--image", type=int, default=64, help="image side (default 64)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="steps of each config not counted (default 2)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps-per-round", type=int, default=2)
    p.add_argument("--profile-rounds", type=int, default=0,
                   help="after the timing, rounds of TensorFlow's profiler on stock's and gobn's steps, "
                        "alternating: each op type's time per step (default 0: none)")
    p.add_argument("--thread-steps", type=int, default=0,
                   help="after the timing, steps of stock's and of gobn's whose threads' CPU time and wake-ups "
                        "are counted (Linux; default 0: none)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="where the steps run (gpu: TensorFlow's GPU build, GPU:0; --onednn is then moot)")
    p.add_argument("--data-format", choices=("channels_last", "channels_first"), default="channels_last")
    p.add_argument("--precision", choices=("float32", "mixed"), default="float32",
                   help="mixed: Keras' mixed_float16 policy on a GPU, mixed_bfloat16 on the CPU")
    p.add_argument("--xla", action="store_true",
                   help="time stock's step compiled by XLA (jit_compile=True) too, as config stock_xla")
    p.add_argument("--under-xla", action="store_true",
                   help="compile every config's step with XLA (jit_compile=True): stock against gobn, both under XLA")
    p.add_argument("--gobn-plan", metavar="SPEC",
                   help="also time gobn with GOBN_CPU_PLAN=SPEC (the CPU kernels' tuning, e.g. workers=8), "
                        "as config gobn_plan")
    p.add_argument("--fusion-off", action="store_true",
                   help="also time gobn with its activation fusion off (GOBN_FUSE_ACTIVATIONS=0), as config "
                        "gobn_unfused")
    p.add_argument("--no-float64", dest="float64", action="store_false",
                   help="skip the float64 warm-up (the loss drift's reference)")
    p.add_argument("--no-top", dest="top", action="store_false",
                   help="the models without their Dense classifier (global average pooling, a squared-error "
                        "loss on the features): for a GPU build without cuBLAS")
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--merge-into", metavar="JSON",
                   help="append the results to JSON's \"models\" list (make gpu-tf-check: bench/gpu_tf.json)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a process may take to answer")
    p.add_argument("--worker", nargs=4, metavar=("ROUTE", "MODEL", "CONFIG", "ARGS"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# A worker: one route, model and config; answers the launcher's commands.


def worker(route, name, config, options):
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    import gobn

    o = json.loads(options)
    keras = __import__("keras" if route == "keras3" else "tf_keras")
    if config.startswith("gobn") and route == "tf_keras":
        gobn.enable()
    first = o["data_format"] == "channels_first"
    shape = (3, o["image"], o["image"]) if first else (o["image"], o["image"], 3)
    (keras.config if route == "keras3" else keras.backend).set_image_data_format(o["data_format"])
    policy = "float32"
    if o["precision"] == "mixed" and config != "float64":
        policy = "mixed_float16" if o["device"] == "gpu" else "mixed_bfloat16"

    def build(dtype):
        keras.utils.set_random_seed(0)
        if route == "keras3":
            keras.config.set_dtype_policy(dtype)
        else:
            keras.mixed_precision.set_global_policy(dtype)
        if not o["top"]:
            return getattr(keras.applications, MODELS[name])(
                weights=None, input_shape=shape, include_top=False, pooling="avg")
        return getattr(keras.applications, MODELS[name])(
            weights=None, input_shape=shape, classes=o["classes"], classifier_activation=None)

    dtype = "float64" if config == "float64" else "float32"
    model = build(policy)
    if dtype == "float64":  # the float32 model's weights, exactly
        weights = model.get_weights()
        model = build("float64")
        model.set_weights([w.astype(np.float64) for w in weights])
    if config.startswith("gobn") and route == "keras3":
        model = gobn.keras.convert(model)
    layers = model._flatten_layers() if route == "keras3" else model.submodules
    batch_norm_layers = sum(type(layer).__name__ == "BatchNormalization" for layer in layers)

    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(0, 1, (o["batch_size"],) + shape), dtype)
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    if o["top"]:
        y = tf.constant(rng.integers(0, o["classes"], o["batch_size"]))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    else:
        y = tf.constant(rng.normal(0, 1, (o["batch_size"], model.output_shape[-1])), dtype)
        loss_fn = keras.losses.MeanSquaredError()

    @tf.function(jit_compile=config.endswith("_xla") or o["under_xla"])
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step.get_concrete_function()  # traced now, beside the other configs' processes, before the lockstep starts
    device = o["device"].upper()

    def calls():  # of gobn's kernels, by TensorFlow or inside XLA (its handlers)
        return sum(d.get(device, 0) + d.get("XLA_" + device, 0) for op, d in gobn.kernel_calls().items()
                   if "BatchNormGrad" in op)

    def answer(**fields):
        print(json.dumps(fields), flush=True)

    answer(ready=True, batch_norm_layers=batch_norm_layers, onednn=bool(_pywrap_util_port.IsMklEnabled()),
           tensorflow=tf.__version__, keras=keras.__version__, xla_api_version=gobn.xla_status()["api_version"])
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "warmup":
            before = calls()
            losses = [float(step()) for _ in range(max(int(arg), 1))]
            answer(first_loss=losses[0], loss_after_warmup=losses[-1], gobn_calls=calls() - before)
        elif command == "time":
            before, before_stream, times = calls(), gobn._stream_stats(), []
            for _ in range(int(arg)):
                t0 = time.perf_counter()
                step().numpy()
                times.append(time.perf_counter() - t0)
            stream = gobn._stream_stats()
            answer(times=times, gobn_calls=calls() - before,
                   stream_fallbacks=stream["fallbacks"] - before_stream["fallbacks"],
                   synchronized_calls=stream["synchronized_calls"] - before_stream["synchronized_calls"])
        elif command == "profile":
            op_ms, op_runs = profile_ops(step, int(arg))
            answer(op_ms=op_ms, op_runs=op_runs)
        elif command == "threads":
            answer(threads=thread_use(step, int(arg)))
        elif command == "quit":
            return


def profile_ops(step, steps):
    """Runs steps steps under TensorFlow's profiler; returns each op type's
    time on the host's threads, ms per step, and its runs per step."""
    import collections

    from bench.timing import host_events, op_type

    ms, runs = collections.defaultdict(float), collections.defaultdict(float)
    for name, ps in host_events(lambda: step().numpy(), steps):
        if op_type(name):
            ms[op_type(name)] += ps / 1e9 / steps
            runs[op_type(name)] += 1 / steps
    return dict(ms), dict(runs)


def thread_use(step, steps):
    """Runs steps steps; returns, for each thread of the process that ran or
    woke in them, its CPU time per step (ms, the scheduler's own count), its
    wake-ups per step (voluntary context switches) and where it sleeps at the
    end (Go's monitor thread, sysmon, sleeps in nanosleep; TensorFlow's and
    gobn's helper threads on futexes)."""

    def snapshot():
        out = {}
        for tid in os.listdir("/proc/self/task"):
            base = f"/proc/self/task/{tid}"
            try:
                with open(f"{base}/schedstat") as f:
                    ns = int(f.read().split()[0])
                with open(f"{base}/status") as f:
                    woke = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
                with open(f"{base}/wchan") as f:
                    sleeps = f.read().strip() or "running"
            except (OSError, StopIteration):
                continue
            out[tid] = (ns, woke, sleeps)
        return out

    before = snapshot()
    for _ in range(steps):
        step().numpy()
    after = snapshot()
    rows = []
    for tid, (ns, woke, sleeps) in after.items():
        ns0, woke0, _ = before.get(tid, (0, 0, ""))
        if ns > ns0 or woke > woke0:
            rows.append({"tid": int(tid), "cpu_ms": (ns - ns0) / 1e6 / steps, "wakeups": (woke - woke0) / steps,
                         "sleeps_in": sleeps})
    return sorted(rows, key=lambda r: -r["cpu_ms"])


# ---------------------------------------------------------------------------
# The launcher.


class Worker:
    def __init__(self, args, route, name, config, onednn):
        options = json.dumps({"image": args.image, "batch_size": args.batch_size, "classes": args.classes,
                              "device": args.device, "data_format": args.data_format, "precision": args.precision,
                              "top": args.top, "under_xla": args.under_xla})
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if config == "gobn_plan":
            env["GOBN_CPU_PLAN"] = args.gobn_plan
        if config == "gobn_unfused":
            env["GOBN_FUSE_ACTIVATIONS"] = "0"
        self.what, self.timeout = f"{route} {MODELS[name]} {config} (oneDNN {'on' if onednn else 'off'})", args.timeout
        self.log = tempfile.TemporaryFile("w+")  # its stderr: a pipe nobody reads would fill and stop it
        self.proc = subprocess.Popen(module_command(__spec__, "--worker", route, name, config, options), cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(self.timeout)
            self.log.seek(0)
            raise SystemExit(f"bench.models: {self.what} exited ({self.proc.returncode}):\n{self.log.read()[-4000:]}")
        return json.loads(line)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.log.close()


def configs(args):
    """The timed configs: stock, stock' and gobn, stock_xla and gobn_xla
    with --xla, gobn_plan with --gobn-plan and gobn_unfused with
    --fusion-off."""
    return CONFIGS + (("stock_xla", "gobn_xla") if args.xla else ()) + (("gobn_plan",) if args.gobn_plan else ()) \
        + (("gobn_unfused",) if args.fusion_off else ())


def profiled(args):
    """The configs --profile-rounds profiles: stock and gobn, and gobn_unfused with --fusion-off."""
    return ("stock", "gobn") + (("gobn_unfused",) if args.fusion_off else ())


def measure(args, route, name, onednn):
    timed = configs(args)
    workers = {c: Worker(args, route, name, c, onednn) for c in timed + (("float64",) if args.float64 else ())}
    try:
        info = {c: w.read() for c, w in workers.items()}
        warm = {c: w.ask(f"warmup {args.warmup}") for c, w in workers.items()}
        if args.float64:
            workers.pop("float64").close()
        for w in workers.values():
            w.ask("time 1")  # one more step, not counted
        times, calls = {c: [] for c in timed}, {c: 0 for c in timed}
        fallbacks, synchronized = {c: 0 for c in timed}, {c: 0 for c in timed}
        n = len(timed)
        for r in range(args.rounds):
            for c in timed[r % n:] + timed[:r % n]:
                out = workers[c].ask(f"time {args.steps_per_round}")
                times[c] += out["times"]
                calls[c] += out["gobn_calls"]
                fallbacks[c] += out["stream_fallbacks"]
                synchronized[c] += out["synchronized_calls"]
        profiles = profiled(args)
        op_ms, op_runs = {c: {} for c in profiles}, {c: {} for c in profiles}
        for r in range(args.profile_rounds):
            for c in profiles[r % len(profiles):] + profiles[:r % len(profiles)]:
                out = workers[c].ask(f"profile {args.steps_per_round}")
                for totals, answered in ((op_ms[c], out["op_ms"]), (op_runs[c], out["op_runs"])):
                    for op, value in answered.items():
                        totals[op] = totals.get(op, 0) + value / args.profile_rounds
        threads = {c: workers[c].ask(f"threads {args.thread_steps}")["threads"] if args.thread_steps else None
                   for c in ("stock", "gobn")}
    finally:
        for w in workers.values():
            w.close()

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-12)

    median = {c: statistics.median(t) for c, t in times.items()}
    first = {c: warm[c]["first_loss"] for c in warm}
    last = {c: warm[c]["loss_after_warmup"] for c in warm}
    last.setdefault("float64", float("nan"))
    row = {
        "route": route, "onednn": info["stock"]["onednn"], "model": MODELS[name],
        "device": args.device, "data_format": args.data_format, "precision": args.precision,
        "batch_size": args.batch_size, "image": args.image, "under_xla": args.under_xla,
        "xla_api_version": info["gobn"]["xla_api_version"],
        "ratio_stock_xla_over_gobn": median["stock_xla"] / median["gobn"] if args.xla else None,
        "ratio_stock_xla_over_gobn_xla": median["stock_xla"] / median["gobn_xla"] if args.xla else None,
        "first_loss_rel_diff_gobn_xla": rel(first["gobn_xla"], first["stock_xla"]) if args.xla else None,
        "gobn_plan": args.gobn_plan,
        "ratio_gobn_over_gobn_plan": median["gobn"] / median["gobn_plan"] if args.gobn_plan else None,
        "ratio_gobn_unfused_over_gobn": median["gobn_unfused"] / median["gobn"] if args.fusion_off else None,
        "loss_rel_diff_gobn_unfused": rel(last["gobn"], last["gobn_unfused"]) if args.fusion_off else None,
        "tensorflow": info["stock"]["tensorflow"], "keras": info["stock"]["keras"],
        "batch_norm_layers": info["gobn"]["batch_norm_layers"], "median_s": median,
        "ratio_stock_over_gobn": median["stock"] / median["gobn"],
        "noise_stock2_over_stock": median["stock'"] / median["stock"],
        "first_loss": first, "loss_after_warmup": last,
        "first_loss_rel_diff_gobn": rel(first["gobn"], first["stock"]),
        "first_loss_rel_diff_stock2": rel(first["stock'"], first["stock"]),
        "loss_rel_diff_gobn": rel(last["gobn"], last["stock"]),
        "loss_rel_diff_stock_float64": rel(last["stock"], last["float64"]),
        "loss_rel_diff_gobn_float64": rel(last["gobn"], last["float64"]),
        "gobn_calls_in_warmup": warm["gobn"]["gobn_calls"], "gobn_calls_timed": calls,
        "stream_fallbacks_timed": fallbacks, "synchronized_calls_timed": synchronized,
        "timed_steps": len(times["gobn"]),
        "op_ms_per_step": op_ms if args.profile_rounds else None,
        "activation_grad_runs_per_step": {c: {op: runs.get(op, 0) for op in ACTIVATION_GRADS}
                                          for c, runs in op_runs.items()} if args.profile_rounds else None,
        "threads_per_step": threads if args.thread_steps else None,
    }
    row["gradient_bound"] = gradient_bound(row) if args.profile_rounds else None
    return row


def first_loss_bound(r):
    """How far gobn's first loss may be from stock's, relative. On a GPU
    TensorFlow runs float32 convolutions in TF32 (about 1e-3 relative), and
    stock's own forward differs from process to process (the algorithms
    autotuning picks): stock' against stock shows by how much."""
    if r["device"] == "gpu":
        return max(1e-3 if r["precision"] == "float32" else 2e-3, 4 * r["first_loss_rel_diff_stock2"])
    return 1e-4 if r["precision"] == "float32" else 2e-3


def problems(r):
    """What is wrong with a row: gobn's kernels not running every batch-norm
    gradient of gobn's steps (or running in stock's), or the first losses
    apart."""
    out = []
    want = r["batch_norm_layers"] * r["timed_steps"]
    timed = r["gobn_calls_timed"]
    if any(timed[c] != (want if c.startswith("gobn") else 0) for c in timed):
        out.append(f"gobn's kernels ran {timed} times in the timed steps; want {want} for gobn's and none for "
                   "stock's")
    if r["device"] == "gpu":  # gobn's GPU calls run on TensorFlow's stream: none synchronizes the device
        for what in ("stream_fallbacks_timed", "synchronized_calls_timed"):
            if any(r.get(what, {}).values()):
                out.append(f"{what}: {r[what]}; want none")
    for c in ("gobn", "gobn_xla"):
        diff = r.get(f"first_loss_rel_diff_{c}")
        if diff is not None and diff > first_loss_bound(r):
            out.append(f"{c}'s first loss differs from stock's by {diff:.1e}, over {first_loss_bound(r):.1e}")
    diff = r.get("loss_rel_diff_gobn_unfused")  # after the warm-up's updates: the gradients', fused or not
    if diff is not None and diff > first_loss_bound(r):
        out.append(f"gobn's loss after the warm-up differs from gobn_unfused's by {diff:.1e}, over "
                   f"{first_loss_bound(r):.1e}")
    return out


def report(rows, args):
    steps = args.warmup
    print(f"training step (forward, backward, SGD{', compiled by XLA' if args.under_xla else ''}) on the "
          f"{args.device.upper()}, batch {args.batch_size}, "
          f"{args.image}x{args.image}x3 {args.data_format}, {args.precision}, {args.classes} classes; median of {args.rounds * args.steps_per_round} steps per config, "
          f"interleaved; warm-up of {steps} steps excluded")
    twin_ms = CONFIGS[1] + " ms"
    print(f"{'route':9} {'oneDNN':6} {'model':12} {'BN':>3} {'stock ms':>9} {twin_ms:>9} {'gobn ms':>9} "
          f"{'stock/gobn':>10} {'noise':>6} {'loss 1':>8} {'loss W':>8} {'stock/64':>8} {'gobn/64':>8}")
    ok = True
    for r in rows:
        m = r["median_s"]
        print(f"{r['route']:9} {'on' if r['onednn'] else 'off':6} {r['model']:12} {r['batch_norm_layers']:3d} "
              f"{m['stock'] * 1e3:9.1f} {m[CONFIGS[1]] * 1e3:9.1f} {m['gobn'] * 1e3:9.1f} "
              f"{r['ratio_stock_over_gobn']:10.3f} {r['noise_stock2_over_stock']:6.3f} "
              f"{r['first_loss_rel_diff_gobn']:8.1e} {r['loss_rel_diff_gobn']:8.1e} "
              f"{r['loss_rel_diff_stock_float64']:8.1e} {r['loss_rel_diff_gobn_float64']:8.1e}")
        if r["device"] == "gpu":
            print(f"  stock' first loss against stock's: {r['first_loss_rel_diff_stock2']:.1e}")
        if r.get("ratio_gobn_unfused_over_gobn") is not None:
            print(f"  gobn with the fusion off: {m['gobn_unfused'] * 1e3:.1f} ms, gobn_unfused/gobn "
                  f"{r['ratio_gobn_unfused_over_gobn']:.3f} (noise {r['noise_stock2_over_stock']:.3f}); loss after "
                  f"the warm-up against it {r['loss_rel_diff_gobn_unfused']:.1e}")
        if r.get("ratio_gobn_over_gobn_plan") is not None:
            print(f"  gobn with GOBN_CPU_PLAN={r['gobn_plan']}: {m['gobn_plan'] * 1e3:.1f} ms, gobn/gobn_plan "
                  f"{r['ratio_gobn_over_gobn_plan']:.3f}")
        if r["ratio_stock_xla_over_gobn"] is not None:
            print(f"  stock with XLA: {m['stock_xla'] * 1e3:.1f} ms, stock_xla/gobn {r['ratio_stock_xla_over_gobn']:.3f}")
            print(f"  gobn with XLA: {m['gobn_xla'] * 1e3:.1f} ms, stock_xla/gobn_xla "
                  f"{r['ratio_stock_xla_over_gobn_xla']:.3f}")
        for problem in problems(r):
            print(f"  ! {r['model']}: {problem}")
            ok = False
    for r in rows:
        if r["op_ms_per_step"]:
            report_ops(r)
        if r["threads_per_step"]:
            report_threads(r)
    print("stock/gobn above 1: gobn's step is faster; noise: stock'/stock, the same config against itself;\n"
          f"loss 1, loss W: |gobn - stock| / stock of the first step's loss and of the loss after {steps} steps;\n"
          f"stock/64, gobn/64: |float32 - float64| / float64 of the loss after {steps} steps, from a float64 run\n"
          "of the same steps: where loss W is of their order, the losses drift apart by float32 round-off")
    return ok


def report_ops(r, top=12):
    """The op types that took longest, stock's time per step beside gobn's
    (and gobn_unfused's), and the runs of the activation gradients."""
    ops = r["op_ms_per_step"]
    print(f"{r['route']} {r['model']} oneDNN {'on' if r['onednn'] else 'off'}: ms per step by op type "
          f"(the profiler's, on the host's threads): {', '.join(ops)}")
    every = set().union(*ops.values())
    for op in sorted(every, key=lambda o: -sum(times.get(o, 0) for times in ops.values()))[:top]:
        print(f"  {op[:48]:48}" + "".join(f" {times.get(op, 0):8.2f}" for times in ops.values()))
    print(f"  {'all ops':48}" + "".join(f" {sum(times.values()):8.2f}" for times in ops.values()))
    for op in ACTIVATION_GRADS:
        print(f"  {op + ' runs a step':48}" + "".join(
            f" {runs[op]:8.0f}" for runs in r["activation_grad_runs_per_step"].values()))
    bound = r["gradient_bound"]
    if bound:
        print(f"  batch-norm gradients {bound['stock_grad_ms']:.2f} ms of stock's {bound['stock_step_ms']:.1f} ms "
              f"step, gobn's {bound['gobn_grad_ms']:.2f} ms: the gradient alone can make the step "
              f"{bound['expected']:.3f}x stock's ({bound['ceiling']:.3f}x were it free)")


def report_threads(r, top=8):
    """Each process's busiest threads: CPU time and wake-ups per step."""
    print(f"{r['route']} {r['model']} oneDNN {'on' if r['onednn'] else 'off'}: threads by CPU time per step "
          "(ms, wake-ups, where each sleeps)")
    for config, threads in r["threads_per_step"].items():
        total = sum(t["cpu_ms"] for t in threads)
        woke = sum(t["wakeups"] for t in threads)
        print(f"  {config}: {total:.1f} ms of CPU and {woke:.0f} wake-ups per step in {len(threads)} threads")
        for t in threads[:top]:
            print(f"    {t['cpu_ms']:8.2f} ms {t['wakeups']:7.0f}  {t['sleeps_in']}")


def gradient_bound(r):
    """What the batch-norm gradient alone can do to the step, on a route
    whose stock gradient is one fused op (tf_keras): stock's median step over
    that step less the time the profiler gave the gradient's saving
    (expected), or all of stock's gradient time (ceiling, a gradient that
    took no time). Upper bounds where the gradient overlaps other ops, whose
    saved time then shortens the step by less; None where stock's gradient
    is many ops (Keras 3's layer runs no fused op)."""
    ops = r["op_ms_per_step"]

    def grad_ms(times):
        return sum(ms for op, ms in times.items() if "BatchNormGrad" in op)

    stock_grad, gobn_grad = grad_ms(ops["stock"]), grad_ms(ops["gobn"])
    if not stock_grad or not gobn_grad:
        return None
    step = r["median_s"]["stock"] * 1e3
    return {"stock_step_ms": step, "stock_grad_ms": stock_grad, "gobn_grad_ms": gobn_grad,
            "expected": step / (step - (stock_grad - gobn_grad)), "ceiling": step / (step - stock_grad)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    if args.xla and args.under_xla:
        raise SystemExit("bench.models: --under-xla compiles every config with XLA; --xla adds stock's compiled step "
                         "to uncompiled ones: choose one")
    models, routes = args.models.split(","), args.routes.split(",")
    for name in models:
        if name not in MODELS:
            raise SystemExit(f"bench.models: unknown model {name!r} (known: {', '.join(MODELS)})")
    for route in routes:
        if route not in ROUTES:
            raise SystemExit(f"bench.models: unknown route {route!r} (known: {', '.join(ROUTES)})")
    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.onednn]
    if args.device == "gpu":
        settings = (False,)  # oneDNN changes CPU ops only
    t0 = time.perf_counter()
    rows = []
    for onednn in settings:
        for route in routes:
            for name in models:
                rows.append(measure(args, route, name, onednn))
                print(f"# {route} {MODELS[name]} oneDNN {'on' if onednn else 'off'} done", file=sys.stderr,
                      flush=True)
    ok = report(rows, args)
    print(f"({time.perf_counter() - t0:.0f} s)")
    # the records name no path of this machine
    if args.json:
        named = {k: portable(os.path.abspath(v)) if k in ("json", "merge_into") and v else v
                 for k, v in vars(args).items()}
        with open(args.json, "w") as f:
            json.dump({"args": named, "results": rows}, f, indent=1)
    if args.merge_into:
        with open(args.merge_into) as f:
            record = json.load(f)
        shown = [a for i, a in enumerate(argv) if a != "--merge-into" and not a.startswith("--merge-into=")
                 and not (i > 0 and argv[i - 1] == "--merge-into")]
        command = command_line(__spec__, shown)
        record.setdefault("xla" if args.under_xla else "models", []).extend(
            dict(r, command=command, ok=not problems(r)) for r in rows)
        if args.xla:  # both compiled by XLA, beside the uncompiled steps of the same processes
            record.setdefault("xla", []).extend(
                {"route": r["route"], "model": r["model"], "data_format": r["data_format"],
                 "precision": r["precision"], "batch_size": r["batch_size"], "image": r["image"],
                 "stock_xla_ms": r["median_s"]["stock_xla"] * 1e3, "gobn_xla_ms": r["median_s"]["gobn_xla"] * 1e3,
                 "ratio_stock_xla_over_gobn_xla": r["ratio_stock_xla_over_gobn_xla"],
                 "noise_stock2_over_stock": r["noise_stock2_over_stock"], "command": command, "ok": not problems(r)}
                for r in rows)
        with open(args.merge_into, "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
