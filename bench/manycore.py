"""gobn's CPU kernels against stock TensorFlow (oneDNN on) on a many-core machine, in one short run.

One script for a machine lent for a few minutes, with TensorFlow importable
and a built libgobn.so, no Go and no network needed (plain `python3`):

    python3 -m bench.manycore --lib build/libgobn.so [--budget 240] [--quick]

In order, writing --out (bench/manycore.json) after every step, so that a run
cut short leaves what it measured:

1. The machine: the CPU, the cores the process may use, gobn's own view
   (gobnCPUPlan: cores, caches, tuning) and TensorFlow's thread pools.
2. Memory bandwidth, measured with numpy: a = b + c over float64 arrays of
   at least 256 MiB each, every core adding its slice (numpy gives up the
   GIL inside a ufunc), best of several rounds, counting 24 bytes an element
   as STREAM does. That is STREAM's add; its traffic, two reads and one
   write, is the triad's (cmd/triad, in Go, is make bench's).
3. The sweep: the CPU kernels' measured constants (kernels.Tuning:
   per_worker, then wake, stream_bytes, max_chunks, chunk_grain,
   max_folds, and by_channel, the channels-first form) set through
   gobnCPUPlan between the calls of one process,
   each setting timed on the same chains of gobn calls, interleaved round
   by round; the setting with the least geometric mean of the times (each
   case's time over its best) is kept for the rest of the run where it
   beats the library's default by 5 % (SWEEP_MARGIN) twice, in the stage
   and in a round of the two alone; all the times are recorded.
4. Per call, stock against gobn as the issue times them: chains of K
   FusedBatchNormGradV3 in one tf.function (each call's x_backprop the next
   one's y_backprop; K so that a chain takes about 10 ms, at most 100),
   stock, gobn and stock again traced apart and timed interleaved round by
   round, medians; stock against stock again is the noise. The cases: make
   bench's (those oneDNN runs), ResNet-50's twelve batch-norm shapes at batch
   32 (NHWC float32 training), and the issue's six 16-core cases. For a case
   whose tensors exceed the last-level cache, the time memory needs at the
   measured bandwidth is recorded beside it: at 12 bytes an element (6 for
   bfloat16), and at what gobn's form moves (20 for a two-pass training
   gradient, which reads dy and x twice). With each case, from
   gobnSplitStats: the share of its calls that split, the share of their
   ranges that helpers ran, and the callers' wait for the helpers' last.
5. Training steps: tf_keras MobileNetV2 and ResNet50 (64x64, batch 8) with
   gobn.enable() against stock, oneDNN on (bench/models.py: stock,
   stock again and gobn in processes of their own, in lockstep), gobn with
   the sweep's tuning and, as gobn_plan, with its workers capped at half the
   cores (what TensorFlow's own pools then have to themselves), or with
   --steps-plan's settings added instead (--steps-plan spin=0 times a step
   without the helper threads' polls in bursts of calls). Then rounds of TensorFlow's profiler
   on stock's and gobn's steps give the batch-norm gradient's share of
   stock's step, and so what the gradient alone can make of the step
   (bench/models.py's gradient_bound): the goal of a faster step is then
   read beside what a faster gradient can give it.

--budget (seconds, default 210) scales the repetitions so the whole run
takes about that long (longer where the sweep takes more than its share:
the per-call cases keep half the budget at least); --quick is a smoke test (a few cases, short steps),
as run on a 2-core machine; --report JSON prints a record's tables. Nothing
here asserts a time.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import threading
import time
import traceback

from tools.checkout import ROOT

# ResNet-50's batch-norm shapes (H, W, C), as tools/gpucheck/bench.py has them.
RESNET50 = [(112, 112, 64), (56, 56, 64), (56, 56, 128), (56, 56, 256), (28, 28, 128), (28, 28, 256),
            (28, 28, 512), (14, 14, 256), (14, 14, 512), (14, 14, 1024), (7, 7, 512), (7, 7, 2048)]
# The many-core issue's cases (dtype, format, training, shape).
ISSUE = [("float32", "NHWC", True, (16, 28, 28, 64)), ("float32", "NHWC", True, (4, 56, 56, 128)),
         ("float32", "NHWC", True, (8, 14, 14, 512)), ("float32", "NCHW", True, (8, 64, 28, 28)),
         ("float32", "NHWC", False, (32, 7, 7, 256)), ("bfloat16", "NHWC", True, (8, 28, 28, 64))]
# The sweep's cases: the issue's, one beyond a server's last-level cache for
# stream_bytes, one of many chunks of wide rows for max_folds, and two of
# 200,704 elements, which run on one worker or on three on 16 cores as
# per_worker has it (NCHW in planes of 49, by channel units).
SWEEP = ISSUE + [("float32", "NHWC", True, (32, 56, 56, 256)), ("float32", "NHWC", True, (32, 7, 7, 2048)),
                 ("float32", "NCHW", True, (8, 512, 7, 7)), ("float32", "NHWC", True, (8, 7, 7, 512))]
QUICK_SWEEP = [ISSUE[0], ISSUE[3]]
# The sweep's stages: each setting is added to the best of the stages before.
# A stage's default is the setting the library starts with (per_worker=0:
# from the cores, kernels.perWorkerFor), which another must beat by
# SWEEP_MARGIN twice.
STAGES = [("per_worker", ["per_worker=0", "per_worker=32768", "per_worker=65536", "per_worker=131072",
                          "per_worker=262144"]),
          ("wake", ["wake=0", "wake=2", "wake=4"]),
          ("stream_bytes", ["stream_bytes=0", "stream_bytes=8388608", "stream_bytes=1099511627776"]),
          ("max_chunks", ["max_chunks=0", "max_chunks=64"]),
          ("chunk_grain", ["chunk_grain=0", "chunk_grain=32768", "chunk_grain=16384"]),
          ("max_folds", ["max_folds=0", "max_folds=1"]),
          ("by_channel", ["by_channel=1", "by_channel=0"])]
# The cases a stage is scored on, where not all: by_channel changes only
# channels-first gradients.
STAGE_CASES = {"by_channel": lambda name: " NC" in name}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", default=os.path.join(ROOT, "build", "libgobn.so"), help="libgobn.so to load")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "manycore.json"))
    p.add_argument("--budget", type=float, default=210, help="seconds the whole run should take (default 210)")
    p.add_argument("--quick", action="store_true", help="a smoke test: few cases, short steps")
    p.add_argument("--tuning", help="run the comparison and the steps with this tuning (kernels.Tuning's spec) "
                                    "instead of the sweep's pick; the sweep is skipped")
    p.add_argument("--no-sweep", action="store_true", help="keep the library's tuning")
    p.add_argument("--no-steps", action="store_true", help="skip the training steps")
    p.add_argument("--steps-plan", metavar="SPEC",
                   help="the steps' gobn_plan config adds this tuning to the run's (e.g. spin=0) instead of "
                        "capping gobn's workers at half the cores")
    p.add_argument("--only", default="", help="only the per-call cases whose name contains this")
    p.add_argument("--report", metavar="JSON", help="print a record's tables (markdown) and exit")
    p.add_argument("--cases", default="suite,b32,issue",
                   help="the per-call groups, comma-separated: suite (make bench's), b32 (ResNet-50 at batch 32), "
                        "issue (the issue's six)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# The record, written after every step.


class Record:
    def __init__(self, path):
        self.path, self.data, self.t0 = path, {}, time.perf_counter()

    def write(self):
        self.data["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, self.path)

    def elapsed(self):
        return time.perf_counter() - self.t0

    def phase(self, name):
        """Records the seconds from the run's start to the end of phase name."""
        self.data.setdefault("phase_end_s", {})[name] = round(self.elapsed(), 1)
        self.write()


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The machine and its bandwidth.


def export_json(name, *args):
    """The JSON a library export returns (name, taking C strings args);
    None where the library has no such export (one built before it)."""
    from gobn import _library
    lib = _library.handle()
    if lib is None or not hasattr(lib, name):
        return None
    f = getattr(lib, name)
    f.restype, f.argtypes = ctypes.c_void_p, [ctypes.c_char_p] * len(args)
    out = _library._take_string(f(*args))
    return json.loads(out) if out else None


def cpu_plan(spec=None):
    """gobnCPUPlan's JSON (see capi/cpuplan.go), setting spec first."""
    return export_json("gobnCPUPlan", spec.encode() if spec is not None else None)


def split_stats():
    """gobnSplitStats' JSON (see capi/exports.go): the calls split, and the
    ranges that calls with helpers ran, a helper's among them, and their
    callers' wait for the helpers' last."""
    return export_json("gobnSplitStats")


def helper_share(before, after, calls):
    """How a case's gobn calls shared their work, from split_stats before
    and after them: the calls split over the calls, the ranges a helper ran
    over those the split calls ran, and the callers' wait per call (us)."""
    if not before or not after or "ranges" not in after or calls <= 0:
        return {}
    ranges = after["ranges"] - before["ranges"]
    return dict(split_calls=(after["calls"] - before["calls"]) / calls,
                helper_ranges=(after["helper_ranges"] - before["helper_ranges"]) / ranges if ranges else None,
                wait_us_per_call=(after["wait_us"] - before["wait_us"]) / calls)


def set_tuning(spec):
    r = cpu_plan(spec)
    if r is None or r.get("error"):
        raise RuntimeError(f"gobn: cannot set the CPU plan {spec!r}: {r and r.get('error')}")
    return r


def bandwidth(cores, seconds=4.0, min_mib=256):
    """GB/s of a = b + c over float64 arrays, every core its slice, best
    round (see the module's doc)."""
    import numpy as np
    n = (max(min_mib, 32 * cores) << 20) // 8
    a, b, c = np.empty(n), np.empty(n), np.empty(n)
    bounds = [(n * i // cores, n * (i + 1) // cores) for i in range(cores)]

    def each(fn):
        ts = [threading.Thread(target=fn, args=lo_hi) for lo_hi in bounds]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def touch(lo, hi):  # first touch by the thread that adds the slice
        a[lo:hi] = 0
        b[lo:hi] = 1
        c[lo:hi] = 2

    each(touch)
    best, start, rounds = math.inf, time.perf_counter(), 0
    while rounds < 3 or (time.perf_counter() - start < seconds and rounds < 50):
        t0 = time.perf_counter()
        each(lambda lo, hi: np.add(b[lo:hi], c[lo:hi], out=a[lo:hi]))
        best = min(best, time.perf_counter() - t0)
        rounds += 1
    return dict(gbs=24 * n / best / 1e9, array_mib=n * 8 >> 20, threads=cores, rounds=rounds,
                method="numpy: a = b + c over float64 arrays, a thread a core on its slice, best round, "
                       "24 bytes an element (STREAM's add: the triad's two reads and one write)")


# ---------------------------------------------------------------------------
# Per call.


def case_name(dtype, fmt, training, shape):
    from bench.calls import case_name as name
    return name(dtype, fmt, training, shape)


def percall_cases(quick, only, groups):
    """(label, dtype, format, training, shape) of the comparison, each once:
    the groups of --cases, the issue's first and make bench's last, so that
    a run short of time leaves out the cases the issue measured already."""
    from bench.calls import BEYOND, onednn_dtypes, suite
    cases, seen = [], set()

    def add(label, dtype, fmt, training, shape):
        key = (dtype, fmt, training, tuple(shape))
        if key not in seen and dtype in onednn_dtypes() and only in f"{label} {case_name(*key)}":
            seen.add(key)
            cases.append((label, dtype, fmt, training, tuple(shape)))

    if quick:
        for dtype, fmt, training, shape in ISSUE:
            add("issue", dtype, fmt, training, shape)
        add("resnet50-b32", "float32", "NHWC", True, (32, 7, 7, 2048))
        return cases
    for dtype, fmt, training, shape in ISSUE if "issue" in groups else ():
        add("issue", dtype, fmt, training, shape)
    for h, w, c in RESNET50 if "b32" in groups else ():
        add("resnet50-b32", "float32", "NHWC", True, (32, h, w, c))
    for label, _, dtype, fmt, training, shape in suite() if "suite" in groups else ():
        if label != BEYOND:
            add(label, dtype, fmt, training, shape)
    return cases


def gobn_calls():
    import gobn
    return sum(d.get("CPU", 0) for op, d in gobn.kernel_calls().items() if "BatchNormGrad" in op)


def bytes_moved(dtype, fmt, training, llc, elements):
    """What memory must move a call at least (12 bytes an element of
    float32, 6 of bfloat16: dy and x read, dx written), and what gobn's form
    moves: a channels-last training gradient beyond the cache reads dy and x
    twice (20 and 10); None where x, dy and dx fit the last-level cache."""
    size = 4 if dtype == "float32" else 2
    if 3 * size * elements <= llc:
        return None, None
    least = 3 * size * elements
    form = 5 * size * elements if training and fmt in ("NHWC", "NDHWC") else least
    return least, form


def time_percall(tf, np, ops, case, reps, seconds):
    from bench.calls import chain, chain_length, make_inputs
    from bench.timing import time_interleaved
    label, dtype, fmt, training, shape = case
    stock, gobn_op = ops
    args = make_inputs(tf, np, dtype, fmt, training, shape)
    k = chain_length(tf, (stock, gobn_op), args)
    fs = [chain(tf, op, args, k) for op in (stock, gobn_op, stock)]
    before, split_before = gobn_calls(), split_stats()
    ts, tg, ta = time_interleaved(fs, reps, seconds=seconds)
    calls = gobn_calls() - before
    return dict(case=case_name(dtype, fmt, training, shape), label=label, dtype=dtype, data_format=fmt,
                is_training=training, shape=list(shape), elements=math.prod(shape), k=k,
                stock_ms=ts * 1e3 / k, gobn_ms=tg * 1e3 / k, stock_again_ms=ta * 1e3 / k,
                ratio=ts / tg, noise=ts / ta, gobn_calls=calls,
                **helper_share(split_before, split_stats(), calls))


# ---------------------------------------------------------------------------
# The sweep.


# A setting replaces the library's default only where its score (the
# geometric mean of each case's time over the case's best) is this much
# lower than the default's, in the stage and again in a round of the two
# alone: below, the two differ within the noise of a short sweep (two
# settings that run the same code can score that far apart on a loaded
# machine), and the default, measured before, stays.
SWEEP_MARGIN = 0.05


def sweep(tf, np, ops, base, cases, reps, seconds, record):
    """Each stage's settings on top of the best so far, timed on gobn chains
    of cases, interleaved; returns the spec kept."""
    from bench.calls import chain, chain_length, make_inputs
    from bench.timing import geomean, time_interleaved
    _, gobn_op = ops
    defaults = set(cpu_plan()["default"].split(","))
    chains = []
    for dtype, fmt, training, shape in cases:
        try:
            set_tuning(base)
            args = make_inputs(tf, np, dtype, fmt, training, shape)
            k = chain_length(tf, (gobn_op,), args)
            chains.append((case_name(dtype, fmt, training, shape), k, chain(tf, gobn_op, args, k)))
        except Exception as e:  # a case that fails leaves the others
            record.data.setdefault("errors", []).append(f"sweep {shape}: {e!r}")
    def timed(settings, kept, stage):
        """ms a call of each chain (of those the stage changes) with each
        setting on top of kept, interleaved, and the settings' scores over
        the chains timed."""
        specs = [",".join(s for s in (kept, setting) if s) for setting in settings]
        times = {s: {} for s in settings}
        for name, k, f in chains:
            if not STAGE_CASES.get(stage, lambda _: True)(name):
                continue
            try:
                def at(spec):
                    def g():
                        set_tuning(spec)
                        return f()
                    return g
                ms = time_interleaved([at(s) for s in specs], reps, seconds=seconds)
                for setting, t in zip(settings, ms):
                    times[setting][name] = t * 1e3 / k
            except Exception as e:
                record.data.setdefault("errors", []).append(f"sweep {stage} {name}: {e!r}")
        named = [n for n, _, _ in chains if all(n in times[s] for s in settings)]
        best = {n: min(times[s][n] for s in settings) for n in named}
        score = {s: geomean(times[s][n] / best[n] for n in named) for s in settings} if named else {}
        return times, score

    kept, stages = base, []
    for stage, settings in STAGES:
        times, score = timed(settings, kept, stage)
        if not score:
            continue
        pick = min(settings, key=lambda s: score[s])
        default = next((s for s in settings if s in defaults), None)
        confirm = None
        if default and pick != default:
            # Another round of the two alone: a setting stays only where
            # both rounds find it SWEEP_MARGIN faster than the default.
            _, confirm = timed([default, pick], kept, stage)
            if score[pick] > (1 - SWEEP_MARGIN) * score[default] or not confirm or \
                    confirm[pick] > (1 - SWEEP_MARGIN) * confirm[default]:
                pick = default
        stages.append(dict(stage=stage, settings=settings, default=default, ms_per_call=times, score=score,
                           confirm=confirm, pick=pick))
        kept = ",".join(x for x in (kept, pick) if x)
        record.data["sweep"] = dict(cases=[n for n, _, _ in chains], stages=stages, kept=kept)
        record.write()
        log(f"sweep {stage}: " + ", ".join(f"{s} {score[s]:.3f}" for s in settings)
            + (f"; again {', '.join(f'{s} {v:.3f}' for s, v in confirm.items())}" if confirm else "")
            + f"; kept {pick}")
    set_tuning(kept)
    return kept


# ---------------------------------------------------------------------------
# Steps.


def steps(spec, tunable, cores, quick, record, plan_spec=None):
    from bench import models as bench_models
    argv = ["--routes", "tf_keras", "--onednn", "on", "--no-float64", "--timeout", "300"]
    argv += (["--rounds", "2", "--steps-per-round", "1", "--warmup", "1", "--profile-rounds", "1"] if quick else
             ["--rounds", "6", "--steps-per-round", "2", "--warmup", "2", "--profile-rounds", "2"])
    cap = max(1, cores // 2)
    os.environ.pop("TF_CPU_ALLOCATOR_USE_BFC", None)  # steps as make bench-models runs them
    if tunable:  # a library with GOBN_CPU_PLAN
        argv += ["--gobn-plan", ",".join(x for x in (spec, plan_spec or f"workers={cap}") if x)]
    if spec:
        os.environ["GOBN_CPU_PLAN"] = spec  # gobn's process, and gobn_plan's before its own
    margs = bench_models.parse_args(argv)
    rows = record.data.setdefault("steps", [])
    for name in ("mobilenetv2", "resnet50"):
        try:
            r = bench_models.measure(margs, "tf_keras", name, True)
        except (Exception, SystemExit) as e:
            rows.append(dict(route="tf_keras", model=bench_models.MODELS[name], error=str(e)[-2000:]))
            record.write()
            continue
        m = r["median_s"]
        rows.append(dict(route="tf_keras", model=r["model"], stock_ms=m["stock"] * 1e3, gobn_ms=m["gobn"] * 1e3,
                         noise=r["noise_stock2_over_stock"], ratio=r["ratio_stock_over_gobn"],
                         gobn_plan=r.get("gobn_plan"), gobn_plan_ms=m["gobn_plan"] * 1e3 if "gobn_plan" in m else None,
                         onednn=r["onednn"], batch_norm_layers=r["batch_norm_layers"], timed_steps=r["timed_steps"],
                         problems=bench_models.problems(r), first_loss_rel_diff=r["first_loss_rel_diff_gobn"],
                         gradient_bound=r["gradient_bound"]))
        record.write()
        b = r["gradient_bound"]
        log(f"steps {r['model']}: stock {m['stock'] * 1e3:.1f} ms, gobn {m['gobn'] * 1e3:.1f} ms "
            f"({r['ratio_stock_over_gobn']:.3f}x), noise {r['noise_stock2_over_stock']:.3f}"
            + (f"; the gradient alone: {b['expected']:.3f}x ({b['ceiling']:.3f}x were it free)" if b else ""))


# ---------------------------------------------------------------------------


def summary(rows, triad):
    from bench.timing import geomean
    ok = [r for r in rows if "ratio" in r]
    if not ok:
        return {}
    noise = sorted(abs(r["noise"] - 1) for r in ok)
    worst = min(ok, key=lambda r: r["ratio"])
    meets = [r["ratio"] >= 1.2 or (r.get("bound_form_ms") and r["gobn_ms"] <= 1.1 * r["bound_form_ms"]) for r in ok]
    return dict(cases=len(ok), geomean_ratio=geomean(r["ratio"] for r in ok),
                geomean_ratio_b32=geomean(r["ratio"] for r in ok if r["label"] == "resnet50-b32"),
                worst_ratio=worst["ratio"], worst_case=worst["case"],
                below_1_2=[r["case"] for r in ok if r["ratio"] < 1.2],
                each_1_2x_or_within_10pct_of_bound=all(meets),
                noise_median=statistics.median(noise), noise_worst=noise[-1], triad_gbs=triad)


def report(path):
    """A record's tables, as docs/performance.md shows them."""
    with open(path) as f:
        d = json.load(f)
    print(f"{d.get('cpu')}, {d.get('cores')} cores; bandwidth {d.get('triad_gbs', 0):.1f} GB/s "
          f"({d.get('bandwidth', {}).get('method', '')}); TensorFlow {d.get('tensorflow')}, oneDNN "
          f"{'on' if d.get('onednn') else 'off'}; gobn's tuning {d.get('tuning')}; {d.get('elapsed_s')} s\n")
    for st in d.get("sweep", {}).get("stages", []):
        print(f"sweep {st['stage']}: " + ", ".join(f"{s} {st['score'][s]:.3f}" for s in st["settings"])
              + f"; kept {st['pick']} (default {st.get('default')})")
    print("\n| case | K | stock ms | gobn ms | stock/gobn | noise | memory's least, ms (12 B / form) "
          "| helpers' ranges | caller's wait, us |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in d.get("per_call", []):
        if "ratio" not in r:
            print(f"| {r['case']} | | | | {r.get('error', '')} | | | | |")
            continue
        bound = (f"{r['bound_12B_ms']:.3f} / {r['bound_form_ms']:.3f}" if r.get("bound_12B_ms") else "")
        helped = f"{100 * r['helper_ranges']:.0f} %" if r.get("helper_ranges") is not None else ""
        wait = f"{r['wait_us_per_call']:.1f}" if r.get("helper_ranges") is not None else ""
        print(f"| {r['case']} | {r['k']} | {r['stock_ms']:.3f} | {r['gobn_ms']:.3f} | {r['ratio']:.2f} | "
              f"{r['noise']:.3f} | {bound} | {helped} | {wait} |")
    s = d.get("summary") or {}
    if s:
        print(f"\ngeomean {s['geomean_ratio']:.2f}x over {s['cases']} cases (ResNet-50 at batch 32: "
              f"{s['geomean_ratio_b32'] or float('nan'):.2f}x); worst {s['worst_ratio']:.2f}x ({s['worst_case']}); "
              f"below 1.2x: {', '.join(s['below_1_2']) or 'none'}; each 1.2x or within 10 % of the bound: "
              f"{s['each_1_2x_or_within_10pct_of_bound']}; noise median {100 * s['noise_median']:.1f} %, worst "
              f"{100 * s['noise_worst']:.1f} %")
    print("\n| route | model | stock ms | gobn ms | stock/gobn | noise | gobn, workers capped, ms "
          "| gradient's ms, stock / gobn | the gradient alone (free) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in d.get("steps", []):
        if "error" in r:
            print(f"| {r['route']} | {r['model']} | {r['error'][:80]} | | | | | | |")
            continue
        capped = f"{r['gobn_plan_ms']:.1f} ({r['gobn_plan']})" if r.get("gobn_plan_ms") else ""
        b = r.get("gradient_bound")
        grad = f"{b['stock_grad_ms']:.2f} / {b['gobn_grad_ms']:.2f}" if b else ""
        alone = f"{b['expected']:.3f} ({b['ceiling']:.3f})" if b else ""
        print(f"| {r['route']} | {r['model']} | {r['stock_ms']:.1f} | {r['gobn_ms']:.1f} | {r['ratio']:.3f} | "
              f"{r['noise']:.3f} | {capped} | {grad} | {alone} |")


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        return report(args.report)
    lib = os.path.abspath(args.lib)
    os.environ.update(TF_ENABLE_ONEDNN_OPTS="1", TF_CPU_ALLOCATOR_USE_BFC="true", GOBN_LIBRARY=lib)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.pop("GOBN_CPU_PLAN", None)  # the sweep and --tuning set the tuning
    record = Record(args.out)
    budget = args.budget
    from bench.machine import command_line, core_count, cpu_model
    cores = core_count()
    record.data.update(cpu=cpu_model(), cores=cores, os_cpu_count=os.cpu_count(), quick=args.quick,
                       budget_s=budget, library=os.path.basename(lib),
                       command=command_line(__spec__, argv if argv is not None else sys.argv[1:]))
    record.write()

    log(f"{record.data['cpu']}, {cores} cores: bandwidth ...")
    bw = bandwidth(cores, seconds=1.0 if args.quick else 4.0)
    record.data.update(triad_gbs=bw["gbs"], bandwidth=bw)
    record.phase("bandwidth")
    log(f"  {bw['gbs']:.1f} GB/s")

    import numpy as np
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    from bench.calls import newest_fused, gobn_package
    gobn_package().load_library()
    lib_ops = gobn_package().ops
    ops = newest_fused(tf, lib_ops)
    plan = cpu_plan()
    record.phase("tensorflow")
    record.data.update(tensorflow=tf.__version__, onednn=bool(_pywrap_util_port.IsMklEnabled()),
                       tf_intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
                       tf_inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
                       gobn_plan=plan)
    record.write()
    llc = plan["machine"]["L3"] if plan else 32 << 20
    if plan:  # the last-level cache the kernels count on (kernels.lastLevel)
        llc = min(llc, max(1, plan["machine"]["L3Cores"]) * (16 << 20))
    record.data["llc_bytes_counted"] = llc

    # Rounds from the budget: 10 and at least 0.35 s a case at 210 s, at most
    # make bench's 15 and 0.5 s.
    reps, seconds = (3, 0.05) if args.quick else (max(5, min(15, int(budget / 20))), min(0.5, budget / 600))
    spec = None
    if args.tuning is not None:
        spec = args.tuning
        set_tuning(spec)
    elif plan and not args.no_sweep:
        spec = sweep(tf, np, ops, "", QUICK_SWEEP if args.quick else SWEEP, reps, seconds, record)
    record.data["tuning"] = cpu_plan()["tuning"] if plan else None
    record.phase("sweep")

    rows = record.data.setdefault("per_call", [])
    cases = percall_cases(args.quick, args.only, args.cases.split(","))
    # Past soft, a case gets the fewest repetitions; past hard, none, and the
    # steps keep their share of the budget: fractions of what the sweep left
    # of it (half of it at least), so that a longer sweep does not cut the
    # cases short.
    soft, hard = (0.5, 0.7) if not args.no_steps else (0.8, 0.95)
    start = record.elapsed()
    left = max(budget - start, budget / 2)
    soft, hard = (start + f * left for f in (soft, hard))
    for i, case in enumerate(cases):
        late = record.elapsed() > soft
        if record.elapsed() > hard:
            rows.append(dict(case=case_name(*case[1:]), label=case[0], error="skipped: past the budget"))
            record.write()
            continue
        try:
            r = time_percall(tf, np, ops, case, 3 if late else reps, 0.05 if late else seconds)
            least, form = bytes_moved(case[1], case[2], case[3], llc, r["elements"])
            if least:
                r.update(bound_12B_ms=least / (bw["gbs"] * 1e9) * 1e3, bound_form_ms=form / (bw["gbs"] * 1e9) * 1e3)
            if r["gobn_calls"] <= 0:
                r["error"] = "gobn's kernel did not run"
            rows.append(r)
            shared = (f"; helpers ran {100 * r['helper_ranges']:.0f} % of the ranges, the caller waited "
                      f"{r['wait_us_per_call']:.1f} us" if r.get("helper_ranges") is not None else "")
            log(f"[{i + 1}/{len(cases)}] {r['case']}: stock {r['stock_ms']:.3f} ms, gobn {r['gobn_ms']:.3f} ms, "
                f"{r['ratio']:.2f}x (noise {r['noise']:.3f}, K {r['k']}{shared})")
        except Exception as e:
            rows.append(dict(case=case_name(*case[1:]), label=case[0], error=repr(e)))
            log(f"[{i + 1}/{len(cases)}] {case}: {e!r}")
        record.data["summary"] = summary(rows, bw["gbs"])
        record.write()

    record.phase("per_call")
    if not args.no_steps:
        try:
            steps(spec, plan is not None, cores, args.quick, record, args.steps_plan)
        except Exception:
            record.data.setdefault("errors", []).append(traceback.format_exc()[-2000:])
        record.phase("steps")
    s = record.data.get("summary", {})
    if s:
        log(f"per call: geomean {s['geomean_ratio']:.2f}x over {s['cases']} cases, worst {s['worst_ratio']:.2f}x "
            f"({s['worst_case']}), {len(s['below_1_2'])} below 1.2x; noise median {100 * s['noise_median']:.1f}%, "
            f"worst {100 * s['noise_worst']:.1f}%")
    log(f"wrote {args.out} ({record.elapsed():.0f} s)")


if __name__ == "__main__":
    main()
