"""gobn beside PyTorch's CPU batch-norm backward, each in its own process.

`make bench-torch` runs this. PyTorch is what a user would pick instead of
TensorFlow and gobn, so it is timed as that user would run it: PyTorch from
PyPI in an environment of its own (`make bench-torch` creates it,
TORCH_VENV, from bench/requirements-torch.txt), calling
`torch.ops.aten.native_batch_norm_backward` (what autograd runs for
`torch.nn.BatchNorm2d`/`3d`), channels-last tensors
(`torch.channels_last`, `channels_last_3d`) for NHWC and NDHWC and
contiguous ones for NCHW and NCDHW; gobn as a TensorFlow user runs it, its
`Gobn>FusedBatchNormGradV3` inside a `tf.function`.

Each side times chains: K calls in a row, each call's x_backprop the next
one's y_backprop, as a network's layers hand on their gradient (a
tf.function of K calls for gobn, a Python loop for PyTorch, whose eager
calls have no graph to build), K the same on both sides and chosen from the
case's size so that a chain takes milliseconds. Each timed chain follows
untimed runs of the same chain, back to back, for WARM_SECONDS at least,
as a network's batch norms follow other ops inside a training step: on
the 2-core VM of the record, the first milliseconds after the idle between
turns ran slower, and longer so for gobn's two workers than for PyTorch's
two threads (WARM_SECONDS says by how much), and PyTorch's OpenMP threads,
which spin on after a chain, are awake as they are between a step's ops.
A case's time is the median per call over its timed chains.

At each thread count (1, and every core the process may use) three
processes stay up, PyTorch, gobn, and PyTorch again, a second process of
the same PyTorch, and take turns chain by chain on each case, 20
milliseconds apart, in rounds over the cases: a shared machine's speed
drifts by more than the sides differ over the minutes a process takes to
run every case, and turns meet the drift on all three alike. PyTorch
against PyTorch again is the run's noise, printed beside every ratio and
summed up (median and worst |ratio - 1|). At one thread PyTorch runs `torch.set_num_threads(1)` and gobn
`GOBN_CPU_PLAN=workers=1` (its kernels on the calling thread alone), both
with one inter-op thread; at every core both run as they come: PyTorch's
OpenMP threads, gobn's plan.

The cases are the batch norms of ResNet-50, MobileNetV2 (224x224 images)
and a 3-D U-Net at batches 8 to 32, channels last and channels first:
float32 training all of them, bfloat16 training and float32 and bfloat16
inference some. Beside each case's times the record holds the bandwidth of
the memory level its tensors live in, measured in the same run at the same
footprint and thread count (cmd/triad's -sizes: a triad over x, dy and dx's
bytes, repeated while they stay where they are), and the bytes a call must
move (12 a float32 element: x and dy read, dx written), so that a case short
of its goal shows the limit it meets: a case is "bound" where PyTorch
already moves those bytes at more than 1/1.2 of the level's bandwidth, so
that 1.2x PyTorch would need more than the level gives.

Outputs: a markdown table per thread count on stdout and the record,
bench/torch.json (--record).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

# Chains take about this many elements' calls (K = CHAIN_ELEMENTS / the
# case's elements, from 2 to CHAIN_MAX): a few milliseconds at the speeds
# of either side, long enough that calling the chain from Python is a
# small part of it.
CHAIN_ELEMENTS = 1 << 23
CHAIN_MAX = 50
# A case is timed, a round, for about CASE_SECONDS, at least MIN_CHAINS
# chains of each side after WARMUP chains; the sides take turns TURN_GAP
# apart, so that one side's threads, spinning after its chain, do not take
# the next side's cores: PyTorch's OpenMP threads (libgomp) spin for about
# 9 ms of CPU time after a chain of 8x2048x7x7 on 2 threads, TensorFlow's
# and gobn's for 1-2 (time.process_time() across a sleep after a chain),
# and with a gap of 5 ms the side after PyTorch lost part of a core for
# the first milliseconds of its chain. The order of the turns also rotates
# round by round, so that each side follows each other one alike.
CASE_SECONDS = 1.0
MIN_CHAINS = 5
WARMUP = 2
TURN_GAP = 0.02
# Before each timed chain a side runs the chain untimed, back to back, for
# at least WARM_SECONDS (once at least). After the 20 ms idle of a turn
# the 2-core VM of the record ran both sides slower for a while: chains of
# NCHW 8x256x14x14 (20 calls, about 3 ms), the first to the sixth after
# 20 ms of sleep, took gobn at two workers 0.202, 0.169, 0.155, 0.146,
# 0.146 and 0.144 ms a call, PyTorch at two threads 0.169, 0.141, 0.141,
# 0.141, 0.139 and 0.141; at one thread gobn 0.301, 0.238, 0.229, 0.224,
# 0.223, 0.222, PyTorch 0.252, 0.236, 0.236, 0.235, 0.235, 0.234. (The
# same with gobn's kernels alone in Go: a 20 ms busy loop on both CPUs in
# place of the sleep, or a 1 ms sleep, left the second chain at the speed
# of the sixth.) One untimed chain, as before, timed gobn's second chain,
# still 17 % slow, against PyTorch's at full speed.
WARM_SECONDS = 0.012
EPSILON = 1e-3
GOAL = 1.2  # the least ratio PyTorch/gobn a case should reach


def nets():
    """(net, batch, logical channels-last shapes): each network's distinct
    batch-norm shapes (ResNet-50 and MobileNetV2 at 224x224, a 3-D U-Net at
    64^3 voxels)."""
    resnet = [(112, 64), (56, 64), (56, 256), (28, 128), (28, 512), (14, 256), (14, 1024), (7, 512), (7, 2048)]
    mobilenet = [(112, 32), (112, 96), (56, 144), (28, 192), (14, 384), (14, 576), (7, 960), (7, 320)]
    unet = [(32, 32), (16, 64), (8, 128), (4, 256)]
    return [
        ("resnet50", 8, [(hw, hw, c) for hw, c in resnet]),
        ("resnet50", 32, [(hw, hw, c) for hw, c in resnet if hw <= 28]),
        ("mobilenetv2", 16, [(hw, hw, c) for hw, c in mobilenet]),
        ("unet3d", 8, [(d, d, d, c) for d, c in unet]),
    ]


def suite(quick=False, only=""):
    """The cases, each a dict: net, dtype, data_format, is_training and the
    logical (channels-last) shape. quick: a few of them (make bench-torch's
    smoke run); only: those whose name (case_name) contains it."""
    cases = []
    for net, batch, shapes in nets():
        for spatial in shapes:
            logical = (batch, *spatial)
            last, first = ("NHWC", "NCHW") if len(logical) == 4 else ("NDHWC", "NCDHW")
            for fmt in (last, first):
                cases.append(dict(net=net, dtype="float32", data_format=fmt, is_training=True, shape=logical))
    # bfloat16 training and inference of each layout, on shapes of every net
    subset = [("resnet50", (8, 56, 56, 64)), ("resnet50", (8, 14, 14, 1024)), ("mobilenetv2", (16, 28, 28, 192)),
              ("unet3d", (8, 16, 16, 16, 64))]
    for net, logical in subset:
        last, first = ("NHWC", "NCHW") if len(logical) == 4 else ("NDHWC", "NCDHW")
        for fmt in (last, first):
            cases.append(dict(net=net, dtype="bfloat16", data_format=fmt, is_training=True, shape=logical))
            for dtype in ("float32", "bfloat16"):
                cases.append(dict(net=net, dtype=dtype, data_format=fmt, is_training=False, shape=logical))
    if quick:
        keep = {("resnet50", "float32", "NCHW", True, (8, 28, 28, 128)),
                ("resnet50", "float32", "NHWC", True, (8, 7, 7, 2048)),
                ("mobilenetv2", "bfloat16", "NHWC", True, (16, 28, 28, 192)),
                ("unet3d", "float32", "NDHWC", False, (8, 16, 16, 16, 64))}
        cases = [c for c in cases if (c["net"], c["dtype"], c["data_format"], c["is_training"], c["shape"]) in keep]
    return [c for c in cases if only in case_name(c)]


def case_name(c):
    """A case as the tables name it, e.g. "resnet50 float32 training NCHW 8x64x28x28" (the shape as laid out)."""
    mode = "training" if c["is_training"] else "inference"
    return f"{c['net']} {c['dtype']} {mode} {c['data_format']} {'x'.join(map(str, laid_out(c)))}"


def laid_out(c):
    """The case's shape in its data format."""
    s = c["shape"]
    return s if c["data_format"] in ("NHWC", "NDHWC") else (s[0], s[-1], *s[1:-1])


def chain_length(c):
    return max(2, min(CHAIN_MAX, CHAIN_ELEMENTS // math.prod(c["shape"])))


def arrays(c, seed=0):
    """The case's inputs as numpy float32 arrays, channels last: x of unit
    variance about a mean per channel, dy, scale of both signs, and the
    statistics a training forward saves (the batch's mean and biased
    variance; in inference they serve as the population's)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    shape, channels = c["shape"], c["shape"][-1]
    x = (rng.standard_normal(shape) + rng.uniform(-1, 1, channels)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    scale = (rng.uniform(0.5, 1.5, channels) * rng.choice([-1.0, 1.0], channels)).astype(np.float32)
    axes = tuple(range(len(shape) - 1))
    x64 = x.astype(np.float64)
    return x, dy, scale, x64.mean(axes).astype(np.float32), x64.var(axes).astype(np.float32)


def to_first(a):
    """A channels-last array in the channels-first layout."""
    import numpy as np
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


# ---------------------------------------------------------------------------
# The children: each prepares a case when the launcher names it, then times
# one chain each time the launcher asks, so that the three sides take turns
# chain by chain, and a drift of the shared machine's speed meets all three.


def torch_side(threads):
    """PyTorch's child: a function from a case to its chain and k."""
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    grad = torch.ops.aten.native_batch_norm_backward

    def prepare(c):
        x, dy, scale, mean, var = arrays(c)
        first = c["data_format"] in ("NCHW", "NCDHW")
        dtype = getattr(torch, c["dtype"])

        def tensor(a):  # PyTorch's tensors are NC... whatever their memory format
            t = torch.from_numpy(to_first(a)).to(dtype)
            if not first:
                t = t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
            return t
        x_t, dy_t = tensor(x), tensor(dy)
        w, m, v = torch.from_numpy(scale), torch.from_numpy(mean), torch.from_numpy(var)
        invstd = torch.rsqrt(v + EPSILON)
        train, k = c["is_training"], chain_length(c)
        mask = [True, True, True]

        def run():
            with torch.no_grad():
                g = dy_t
                for _ in range(k):
                    g = grad(g, x_t, w, m, v, m, invstd, train, EPSILON, mask)[0]
                return g
        return run, k
    return prepare


def gobn_side(threads):
    """gobn's child: a function from a case to its chain and k."""
    from tools.checkout import tensorflow_env
    tensorflow_env()
    # TensorFlow's BFC allocator on the CPU, which keeps the memory it maps,
    # as TensorFlow's own allocator with oneDNN on (its default on CPUs with
    # AVX-512) does for large tensors: glibc's malloc would map each large
    # output afresh, and the page faults of a chain's first call would be
    # timed as gobn's (bench/calls.py says more).
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    import tensorflow as tf
    import gobn
    if threads == 1:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    op = gobn.ops.gobn_fused_batch_norm_grad_v3

    def prepare(c):
        x, dy, scale, mean, var = arrays(c)
        fmt = c["data_format"]
        first = fmt in ("NCHW", "NCDHW")
        dtype = tf.as_dtype(c["dtype"])
        x_t, dy_t = (tf.cast(tf.constant(to_first(a) if first else a), dtype) for a in (x, dy))
        s, m, v, rs3 = tf.constant(scale), tf.constant(mean), tf.constant(var), tf.constant([], tf.float32)
        train, k = c["is_training"], chain_length(c)

        @tf.function
        def chain():
            g = dy_t
            for _ in range(k):
                g = op(y_backprop=g, x=x_t, scale=s, reserve_space_1=m, reserve_space_2=v, reserve_space_3=rs3,
                       epsilon=EPSILON, data_format=fmt, is_training=train)[0]
            return g
        return chain, k
    return prepare


def serve(prepare, cases):
    """A child's loop: a line "case I" prepares cases[I] and warms it up, a
    line "time" runs its chain for WARM_SECONDS at least and times the
    next, back to back; each is answered by a line, the seconds per call
    for "time"."""
    run, k = None, 1
    for line in sys.stdin:
        word = line.split()
        if word[0] == "case":
            run, k = prepare(cases[int(word[1])])
            for _ in range(WARMUP):
                run()
            print("ready", flush=True)
        elif word[0] == "time":
            warm = time.perf_counter() + WARM_SECONDS
            run()  # after the idle between turns, back to back with the timed chain
            while time.perf_counter() < warm:
                run()
            t0 = time.perf_counter()
            run()
            print((time.perf_counter() - t0) / k, flush=True)


# ---------------------------------------------------------------------------
# The launcher.


def root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Child:
    """A child process of one side, answering serve's requests."""

    def __init__(self, python, side, threads, quick, only, env):
        cmd = [python, "-m", "bench.torch", "--child", side, "--threads", str(threads), "--only", only] + \
            (["--quick"] if quick else [])
        self.name = f"the {side} child at {threads} thread(s)"
        self.proc = subprocess.Popen(cmd, cwd=root(), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def ask(self, request):
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            self.proc.kill()
            raise SystemExit(f"bench.torch: {self.name} failed ({self.proc.wait()}):\n{self.proc.stderr.read()[-4000:]}")
        return answer.strip()

    def close(self):
        self.proc.stdin.close()
        self.proc.kill()
        self.proc.wait()


def time_case(children, i, seconds=CASE_SECONDS):
    """{side: [seconds per call of each chain]} of case i, the sides taking
    turns chain by chain, TURN_GAP apart, for at least MIN_CHAINS turns and
    seconds."""
    for child in children.values():
        if child.ask(f"case {i}") != "ready":
            raise SystemExit(f"bench.torch: {child.name} did not prepare case {i}")
    times = {side: [] for side in children}
    order = list(children)
    start = time.perf_counter()
    while len(times["gobn"]) < MIN_CHAINS or time.perf_counter() - start < seconds:
        for side in order:
            time.sleep(TURN_GAP)
            times[side].append(float(children[side].ask("time")))
        order = order[1:] + order[:1]  # each side in turn after each other one
    return times


def level_bandwidth(cases, threads, triad):
    """{footprint bytes: GB/s} of a triad over each case's x, dy and dx
    bytes at the thread count (cmd/triad -sizes, or its binary triad where
    given), the level of memory the case's tensors live in between its calls."""
    sizes = sorted({3 * math.prod(c["shape"]) * (4 if c["dtype"] == "float32" else 2) for c in cases})
    command = [triad] if triad else ["go", "run", "./cmd/triad"]
    out = subprocess.run(command + ["-workers", str(threads), "-sizes", ",".join(map(str, sizes))],
                         cwd=root(), capture_output=True, text=True, env=dict(os.environ, GOEXPERIMENT="simd"))
    if out.returncode != 0:
        raise SystemExit(f"bench.torch: cmd/triad failed:\n{out.stderr[-2000:]}")
    return {int(k): v for k, v in json.loads(out.stdout)["gbs_by_bytes"].items()}


def bound_by_level(row):
    """Whether GOAL times PyTorch's speed would move the case's bytes
    faster than the level of memory they live in gives them."""
    return GOAL * row["torch_gbs"] >= row["level_gbs"]


def summarize(rows):
    ratios = [r["ratio"] for r in rows]
    noise = [abs(r["torch_ms"] / r["torch_again_ms"] - 1) for r in rows]
    slowest = min(rows, key=lambda r: r["ratio"])
    return dict(geomean=math.exp(statistics.mean(math.log(x) for x in ratios)), cases=len(rows),
                below_goal=sum(x < GOAL for x in ratios),
                below_goal_bound=sum(r["ratio"] < GOAL and r["bound"] for r in rows),
                slowest=slowest["case"], slowest_ratio=slowest["ratio"],
                noise_median=statistics.median(noise), noise_worst=max(noise))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-python", default=os.environ.get("TORCH_PYTHON", ""),
                        help="the Python of PyTorch's environment (make bench-torch passes .venv-torch's)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="passes over the cases at each thread count, the sides taking turns on each")
    parser.add_argument("--threads", default="", help="thread counts, e.g. 1,2 (default: 1 and every core)")
    parser.add_argument("--quick", action="store_true", help="four cases, one round: a smoke run")
    parser.add_argument("--case-seconds", type=float, default=CASE_SECONDS,
                        help=f"how long a case is timed a round (default {CASE_SECONDS})")
    parser.add_argument("--only", default="", help="the cases whose name contains this, e.g. 'NCHW 8x512x7x7'")
    parser.add_argument("--record", default="", help="write the record here (make bench-torch: bench/torch.json)")
    parser.add_argument("--triad", default="", help="cmd/triad's binary, where Go is not (default: go run ./cmd/triad)")
    parser.add_argument("--child", choices=("torch", "gobn"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    cases = suite(args.quick, args.only)
    if args.child:
        serve((torch_side if args.child == "torch" else gobn_side)(int(args.threads)), cases)
        return

    from bench.machine import command_line, core_count, cpu_model, cpu_flags
    if not args.torch_python:
        raise SystemExit("bench.torch: --torch-python (or TORCH_PYTHON) names PyTorch's Python; make bench-torch sets it")
    cores = core_count()
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, cores})
    rounds = 1 if args.quick else args.rounds
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    versions = subprocess.run([args.torch_python, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    record = dict(machine=dict(cpu=cpu_model(), cores=cores,
                               vector="AVX-512" if "avx512f" in cpu_flags() else "AVX2"),
                  torch=versions, command=command_line(__spec__, sys.argv[1:]),
                  rounds=rounds, by_threads={})
    for threads in counts:
        children = {}
        for side in ("torch", "gobn", "torch_again"):
            python = sys.executable if side == "gobn" else args.torch_python
            child_env = dict(env, GOBN_CPU_PLAN="workers=1") if side == "gobn" and threads == 1 else env
            if side != "gobn":
                child_env = dict(child_env, OMP_NUM_THREADS=str(threads))
            children[side] = Child(python, "gobn" if side == "gobn" else "torch", threads, args.quick, args.only,
                                   child_env)
        chains = [{side: [] for side in children} for _ in cases]
        try:
            for r in range(rounds):
                for i in range(len(cases)):
                    for side, times in time_case(children, i, args.case_seconds).items():
                        chains[i][side] += times
                print(f"bench.torch: {threads} thread(s), round {r + 1}/{rounds} done", file=sys.stderr)
        finally:
            for child in children.values():
                child.close()
        levels = level_bandwidth(cases, threads, args.triad)
        rows = []
        for c, times in zip(cases, chains, strict=True):
            name = case_name(c)
            med = {side: statistics.median(t) for side, t in times.items()}
            n = math.prod(c["shape"])
            size = 4 if c["dtype"] == "float32" else 2
            level = levels[3 * n * size]
            rows.append(dict(case=name, net=c["net"], dtype=c["dtype"], data_format=c["data_format"],
                             is_training=c["is_training"], shape=list(laid_out(c)), elements=n,
                             chain=chain_length(c), torch_ms=med["torch"] * 1e3, gobn_ms=med["gobn"] * 1e3,
                             torch_again_ms=med["torch_again"] * 1e3, ratio=med["torch"] / med["gobn"],
                             gobn_gbs=3 * n * size / med["gobn"] / 1e9, torch_gbs=3 * n * size / med["torch"] / 1e9,
                             level_gbs=level))
            rows[-1]["bound"] = bound_by_level(rows[-1])
        record["by_threads"][str(threads)] = dict(summary=summarize(rows), rows=rows)
        print_table(threads, rows, record["by_threads"][str(threads)]["summary"])
    if args.record:
        with open(args.record, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")


def print_table(threads, rows, s):
    print(f"\n### {threads} thread(s): PyTorch / gobn per call (above 1: gobn faster)\n")
    print("| case | PyTorch ms | gobn ms | PyTorch/gobn | noise | PyTorch GB/s | gobn GB/s | level GB/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        flag = "" if r["ratio"] >= GOAL else " * bound" if r["bound"] else " *"
        print(f"| {r['case']} | {r['torch_ms']:.3f} | {r['gobn_ms']:.3f} | {r['ratio']:.2f}{flag} | "
              f"{r['torch_ms'] / r['torch_again_ms']:.2f} | {r['torch_gbs']:.1f} | {r['gobn_gbs']:.1f} | "
              f"{r['level_gbs']:.1f} |")
    print(f"\ngeomean {s['geomean']:.2f}x over {s['cases']} cases, {s['below_goal']} below {GOAL}x, "
          f"{s['below_goal_bound']} of them bound (PyTorch within {GOAL}x of the level's bandwidth) "
          f"(slowest {s['slowest']}: {s['slowest_ratio']:.2f}x); noise median {s['noise_median']:.1%}, "
          f"worst {s['noise_worst']:.1%}")


if __name__ == "__main__":
    main()
