#!/usr/bin/env python3
"""Speed of gobn's CUDA FusedBatchNormGrad beside PyTorch's native CUDA
batch-norm backward (aten::native_batch_norm_backward) and cuDNN's
(aten::cudnn_batch_norm_backward, training only: it needs the reserve of
cudnn_batch_norm's forward, run once per input set).

Everything runs in one process on one side stream of PyTorch's, interleaved:
each round calls every implementation once, in an order that rotates from
round to round, each call on another input set (several sets rotate so that
no call finds its inputs in L2 from the call before), all timed with CUDA
events. A round starts behind torch.cuda._sleep so that the host has queued
all its calls before the GPU reaches them: the events time the device, not
Python. gobn is called with Placement.Stream = that stream and a workspace
allocated beforehand. 'native#2' is native again, as a separate entry: its
ratio to native is the method's noise.

Reported per shape: median microseconds, ratios gobn/peer, and GB/s at 12
bytes per element for float32 (read dy and x, write dx) or 6 for half; the
geometric means of the ratios; and a device-to-device copy's GB/s (bytes read
plus written) for the memory's bandwidth.

    python3 bench.py [--quick] [--json out.json] [--budget-s 120]
"""

import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gobncheck import Lib, arguments, context_broken, start, write_json  # noqa: E402

EPS = 1e-3
TORCH_DTYPE = {"float": torch.float32, "half": torch.float16}
BYTES_PER_ELT = {"float": 12, "half": 6}

# ResNet-50's batch-norm shapes (H, W, C) and a few odd ones (N, H, W, C).
RESNET50 = [(112, 112, 64), (56, 56, 64), (56, 56, 128), (56, 56, 256), (28, 28, 128), (28, 28, 256),
            (28, 28, 512), (14, 14, 256), (14, 14, 512), (14, 14, 1024), (7, 7, 512), (7, 7, 2048)]
QUICK50 = [(112, 112, 64), (56, 56, 256), (28, 28, 512), (14, 14, 1024), (7, 7, 2048)]
ODD = [(32, 17, 17, 100), (128, 1, 1, 1000), (8, 35, 35, 7), (16, 31, 31, 33)]
QUICK_ODD = [(32, 17, 17, 100), (8, 35, 35, 7)]


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


class Timer:
    """CUDA events on the current stream."""

    def __init__(self, n):
        self.ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                   for _ in range(n)]
        p = torch.cuda.get_device_properties(0)
        khz = getattr(p, "clock_rate", 0) or 1980000
        self.sleep_cycles = int(khz * 1e3 * 400e-6)  # 0.4 ms: time to queue a round

    def round(self, calls):
        """Runs calls (a list of functions) once each; returns each one's ms."""
        torch.cuda._sleep(self.sleep_cycles)
        for (a, b), f in zip(self.ev, calls):
            a.record()
            f()
            b.record()
        self.ev[len(calls) - 1][1].synchronize()
        return [a.elapsed_time(b) for (a, b), _ in zip(self.ev, calls)]


class Config:
    """One shape x layout x dtype: its input sets, and per mode its callables."""

    def __init__(self, ctx, N, H, W, C, layout, dtype, nsets):
        dev, tdt = ctx.dev, TORCH_DTYPE[dtype]
        self.N, self.H, self.W, self.C, self.layout, self.dtype = N, H, W, C, layout, dtype
        mf = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        self.sets = []
        self.cudnn = ctx.cudnn
        self.cudnn_error = None
        for _ in range(nsets):
            x = torch.randn(N, C, H, W, device=dev, dtype=tdt).contiguous(memory_format=mf)
            s = {"x": x, "dy": torch.randn_like(x), "w": torch.randn(C, device=dev),
                 "b": torch.randn(C, device=dev), "rm": torch.randn(C, device=dev) * 0.1,
                 "rv": torch.rand(C, device=dev) + 0.5,
                 "dx": torch.empty_like(x), "dscale": torch.empty(C, device=dev),
                 "doffset": torch.empty(C, device=dev)}
            _, s["save_mean"], s["save_invstd"] = torch.ops.aten.native_batch_norm(
                x, s["w"], s["b"], s["rm"].clone(), s["rv"].clone(), True, 0.1, EPS)
            if self.cudnn:
                try:
                    _, s["c_mean"], s["c_invstd"], s["reserve"] = torch.ops.aten.cudnn_batch_norm(
                        x, s["w"], s["b"], s["rm"].clone(), s["rv"].clone(), True, 0.1, EPS)
                except RuntimeError as e:  # a shape cuDNN does not take: no cuDNN column here
                    self.cudnn, self.cudnn_error = False, str(e).splitlines()[0][:200]
            self.sets.append(s)
        self.S = H * W

    def impls(self, ctx, mode):
        """name -> function(set index): the implementations of mode."""
        train = mode == "train"
        N, C, S, sets = self.N, self.C, self.S, self.sets
        args = []
        for s in sets:
            rs1, rs2 = (s["save_mean"], s["save_invstd"]) if train else (s["rm"], s["rv"])
            args.append([t.data_ptr() for t in (s["dy"], s["x"], s["w"], rs1, rs2, s["dx"], s["dscale"],
                                                s["doffset"])])
        lib, stream = ctx.lib, ctx.stream_handle
        calls = [lib.call("fused", self.dtype, self.layout, N, C, S, [int(train), EPS], a) for a in args]
        # one workspace for every set: the most any of them needs (it
        # depends on the addresses' alignment)
        ws_bytes = max(lib.workspace(c) for c in calls)
        self.ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=ctx.dev)
        ws_ptr = self.ws.data_ptr() if ws_bytes else 0

        def gobn(i):
            lib.gpu(calls[i], stream, ws_ptr, ws_bytes)

        bnb = torch.ops.aten.native_batch_norm_backward
        mask = [True, True, True]
        if train:
            def native(i):
                s = sets[i]
                return bnb(s["dy"], s["x"], s["w"], s["rm"], s["rv"], s["save_mean"], s["save_invstd"], True, EPS,
                           mask)
        else:
            def native(i):
                s = sets[i]
                # The channels-last path reads saved statistics even in eval
                # mode (and asserts on None): give it the population ones.
                if s["x"].is_contiguous(memory_format=torch.channels_last) and s["x"].dim() == 4:
                    if "rinv" not in s:  # once, in the warm-up
                        s["rinv"] = (s["rv"] + EPS).rsqrt()
                    return bnb(s["dy"], s["x"], s["w"], s["rm"], s["rv"], s["rm"], s["rinv"], False, EPS, mask)
                return bnb(s["dy"], s["x"], s["w"], s["rm"], s["rv"], None, None, False, EPS, mask)
        out = {"gobn": gobn, "native": native}
        if train and self.cudnn:
            cbb = torch.ops.aten.cudnn_batch_norm_backward

            def cudnn(i):
                s = sets[i]
                return cbb(s["x"], s["dy"], s["w"], s["rm"], s["rv"], s["c_mean"], s["c_invstd"], EPS, s["reserve"])
            out["cudnn"] = cudnn
        out["native#2"] = native
        return out

    def agreement(self, impls):
        """gobn's outputs against native's and cuDNN's on set 0: max |diff| /
        max |theirs|."""
        s = self.sets[0]

        def outputs(f):  # f's dx, dscale and doffset, copied: the next call overwrites them
            f(0)
            return [t.float().clone() for t in (s["dx"], s["dscale"], s["doffset"])]

        def rel(ours, theirs):
            return [float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))
                    for a, b in zip(ours, theirs)]

        mine = outputs(impls["gobn"])
        return {peer: rel(mine, impls[peer](0)) for peer in ("native", "cudnn") if peer in impls}


class Ctx:
    def __init__(self, args, lib):
        self.dev = torch.device("cuda")
        self.lib = lib
        self.cudnn = torch.backends.cudnn.is_available() and not args.no_cudnn
        # a side stream: torch's default stream has handle 0, which gobn
        # takes as "no caller's stream" (its own stream, synchronized)
        self.stream = torch.cuda.Stream()
        self.stream_handle = self.stream.cuda_stream
        self.l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 << 20


def copy_bandwidth(ctx, reps):
    """GB/s of a device-to-device copy_ of 1 GiB, counting bytes read and written."""
    n = (1 << 30) // 4
    src = torch.randn(n, device=ctx.dev)
    dst = torch.empty_like(src)
    timer = Timer(1)
    for _ in range(3):
        dst.copy_(src)
    ts = [timer.round([lambda: dst.copy_(src)])[0] for _ in range(reps)]
    med = statistics.median(ts)
    return {"bytes": 2 * n * 4, "median_ms": med, "gbs": 2 * n * 4 / (med * 1e-3) / 1e9,
            "best_gbs": 2 * n * 4 / (min(ts) * 1e-3) / 1e9}


def tf_rule_latency(ctx, reps=400):
    """What TensorFlow's stream rule costs one small call, in host microseconds.

    TensorFlow gives a C-API kernel no stream, so gobn's GPU kernels, called
    from TensorFlow, synchronize the device's context, launch on gobn's own
    stream and wait for it (Placement.Stream = 0). A library handed the
    caller's stream only enqueues. This times, on the host, a small training
    gradient (8x8x8x64 float, NHWC: three kernels) both ways, an empty
    synchronization, and the kernels' device time (CUDA events), medians of
    reps calls on an idle device."""
    N, H, W, C = 8, 8, 8, 64
    x = torch.randn(N, H, W, C, device=ctx.dev)
    t = {"dy": torch.randn_like(x), "x": x, "w": torch.randn(C, device=ctx.dev),
         "m": torch.randn(C, device=ctx.dev), "inv": torch.rand(C, device=ctx.dev) + 0.5,
         "dx": torch.empty_like(x), "ds": torch.empty(C, device=ctx.dev), "do": torch.empty(C, device=ctx.dev)}
    ptrs = [t[k].data_ptr() for k in ("dy", "x", "w", "m", "inv", "dx", "ds", "do")]
    fused = ctx.lib.call("fused", "float", "NHWC", N, C, H * W, [1, EPS], ptrs)
    wsb = ctx.lib.workspace(fused)
    ws = torch.empty(max(wsb, 1), dtype=torch.uint8, device=ctx.dev)

    def call(stream):
        ctx.lib.gpu(fused, stream, ws.data_ptr(), wsb)

    def host_us(fn):
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts)

    s = ctx.stream_handle
    for _ in range(20):
        call(0)
        call(s)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev = []
    for _ in range(reps):
        start.record(ctx.stream)
        call(s)
        end.record(ctx.stream)
        end.synchronize()
        dev.append(start.elapsed_time(end) * 1e3)
    out = {"shape": "8x8x8x64 float NHWC training", "reps": reps,
           "tensorflow_rule_us": host_us(lambda: call(0)),
           "enqueue_us": host_us(lambda: call(s)),
           "enqueue_and_wait_us": host_us(lambda: (call(s), ctx.stream.synchronize())),
           "empty_synchronize_us": host_us(torch.cuda.synchronize),
           "device_us": statistics.median(dev)}
    out["rule_over_enqueue_us"] = out["tensorflow_rule_us"] - out["enqueue_us"]
    return out


def bench_mode(ctx, cfg, mode, timer_rounds, budget_s):
    impls = cfg.impls(ctx, mode)
    names = list(impls)
    agree = cfg.agreement(impls)
    K = len(cfg.sets)
    timer = Timer(len(names))
    samples = {k: [] for k in names}
    seq = [0]

    def one_round(r):
        order = names[r % len(names):] + names[:r % len(names)]
        calls = []
        for k in order:
            i = seq[0] % K
            seq[0] += 1
            calls.append(lambda f=impls[k], i=i: f(i))
        for k, t in zip(order, timer.round(calls)):
            samples[k].append(t)

    for r in range(3):  # warm up
        one_round(r)
    for k in names:
        samples[k].clear()
    t0 = time.perf_counter()
    r = 0
    while True:
        one_round(r)
        r += 1
        if r >= timer_rounds[1] or (r >= timer_rounds[0] and time.perf_counter() - t0 > budget_s):
            break
    med = {k: statistics.median(v) for k, v in samples.items()}
    return med, {k: min(v) for k, v in samples.items()}, r, agree


def main():
    ap = arguments(__doc__)
    ap.add_argument("--quick", action="store_true", help="batch 32, five ResNet-50 shapes and two odd ones")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="seconds of timed rounds over all shapes (0: 0.25 s a shape, 0.1 with --quick)")
    ap.add_argument("--min-rounds", type=int, default=15)
    ap.add_argument("--max-rounds", type=int, default=400)
    ap.add_argument("--no-cudnn", action="store_true")
    args = ap.parse_args()
    t_start = time.time()
    lib = Lib(args.lib)
    facts = start(torch, lib, args.json)
    if facts is None:
        return 2
    ctx = Ctx(args, lib)

    shapes = []
    for batch in ((32,) if args.quick else (32, 128)):
        shapes += [(batch, h, w, c) for h, w, c in (QUICK50 if args.quick else RESNET50)]
    shapes += QUICK_ODD if args.quick else ODD
    configs = [(s, lay, dt) for s in shapes for lay in ("NHWC", "NCHW") for dt in ("float", "half")]
    n_modes = 2 * len(configs)
    per = (args.budget_s / n_modes) if args.budget_s else (0.1 if args.quick else 0.25)
    print("bench.py: %s; %d shapes x 2 layouts x 2 dtypes x 2 modes, %.2f s of rounds each" % (
        facts.get("gpu"), len(shapes), per))

    bw = copy_bandwidth(ctx, 20)
    facts["copy"] = bw
    tf_rule = tf_rule_latency(ctx)
    print("TensorFlow's stream rule, one %s call, host us (median): synchronized %.1f, enqueued %.1f, "
          "enqueued+waited %.1f; an empty synchronize %.1f; device time %.1f" % (
              tf_rule["shape"], tf_rule["tensorflow_rule_us"], tf_rule["enqueue_us"],
              tf_rule["enqueue_and_wait_us"], tf_rule["empty_synchronize_us"], tf_rule["device_us"]))
    print("device-to-device copy: %.0f GB/s (median; best %.0f), counting bytes read and written" % (
        bw["gbs"], bw["best_gbs"]))
    print("\n%-16s %-4s %-5s %-5s %9s %9s %9s %6s %6s %8s %6s" % (
        "shape", "lay", "dtype", "mode", "gobn_us", "native_us", "cudnn_us", "g/nat", "g/cud", "gobnGB/s", "noise"))
    rows, errors, fatal = [], [], None
    with torch.cuda.stream(ctx.stream):
        for (N, H, W, C), lay, dt in configs:
            shape = "%dx%dx%dx%d" % ((N, H, W, C) if lay == "NHWC" else (N, C, H, W))
            try:
                set_bytes = N * H * W * C * BYTES_PER_ELT[dt] // 3 * 5  # x, dy, dx and peers' outputs
                nsets = max(6, min(16, math.ceil(4 * ctx.l2 / max(set_bytes, 1))))
                if set_bytes * nsets > (24 << 30):
                    nsets = max(2, (24 << 30) // set_bytes)
                cfg = Config(ctx, N, H, W, C, lay, dt, nsets)
                for mode in ("train", "infer"):
                    med, best, rounds, agree = bench_mode(ctx, cfg, mode, (args.min_rounds, args.max_rounds), per)
                    elts = N * H * W * C
                    g = med["gobn"]
                    row = {"shape": shape, "layout": lay, "dtype": dt, "mode": mode, "N": N, "H": H, "W": W, "C": C,
                           "elements": elts, "sets": nsets, "rounds": rounds,
                           "median_us": {k: round(v * 1e3, 2) for k, v in med.items()},
                           "best_us": {k: round(v * 1e3, 2) for k, v in best.items()},
                           "ratio": {p: g / med[p] for p in ("native", "cudnn") if p in med},
                           "noise": med["native#2"] / med["native"],
                           "gbs": {k: elts * BYTES_PER_ELT[dt] / (v * 1e-3) / 1e9 for k, v in med.items()},
                           "agreement": agree}
                    if cfg.cudnn_error and mode == "train":
                        row["cudnn_error"] = cfg.cudnn_error
                    rows.append(row)
                    print("%-16s %-4s %-5s %-5s %9.1f %9.1f %9s %6.2f %6s %8.0f %6.3f" % (
                        shape, lay, dt, mode, g * 1e3, med["native"] * 1e3,
                        "%.1f" % (med["cudnn"] * 1e3) if "cudnn" in med else "-", row["ratio"]["native"],
                        "%.2f" % row["ratio"]["cudnn"] if "cudnn" in row["ratio"] else "-",
                        row["gbs"]["gobn"], row["noise"]))
                del cfg
            except Exception as e:  # noqa: BLE001
                msg = "%s %s %s: %s: %s" % (shape, lay, dt, type(e).__name__, e)
                errors.append(msg)
                print("  ERROR " + msg)
                if context_broken(torch):
                    fatal = msg
                    print("FATAL: the CUDA context no longer runs kernels; nothing after this runs")
                    break
    geo = {}
    for key in [("all",)] + sorted({(r["dtype"], r["layout"], r["mode"]) for r in rows}):
        sel = [r for r in rows if key == ("all",) or (r["dtype"], r["layout"], r["mode"]) == key]
        geo["/".join(key)] = {
            "gobn/native": geomean([r["ratio"].get("native") for r in sel]),
            "gobn/cudnn": geomean([r["ratio"].get("cudnn") for r in sel]),
            "noise": geomean([r["noise"] for r in sel]),
            "gobn_gbs": geomean([r["gbs"]["gobn"] for r in sel]),
            "n": len(sel)}
    noise = [abs(math.log(r["noise"])) for r in rows if r["noise"] > 0]
    print("\ngeometric means (ratio < 1: gobn faster)")
    print("%-22s %4s %11s %10s %8s %9s" % ("group", "n", "gobn/native", "gobn/cudnn", "noise", "gobnGB/s"))
    fmt = lambda v, f: (f % v) if v else "-"  # noqa: E731
    for k, v in geo.items():
        print("%-22s %4d %11s %10s %8s %9s" % (
            k, v["n"], fmt(v["gobn/native"], "%.3f"), fmt(v["gobn/cudnn"], "%.3f"), fmt(v["noise"], "%.3f"),
            fmt(v["gobn_gbs"], "%.0f")))
    if noise:
        print("noise: native#2/native within %.1f%% on half the shapes, %.1f%% at worst" % (
            100 * (math.exp(statistics.median(noise)) - 1), 100 * (math.exp(max(noise)) - 1)))
    worst_agree = max((max(v) for r in rows for v in r["agreement"].values()), default=0.0)
    print("agreement with the peers (max |diff| / max |peer| over dx, dscale, doffset): worst %.2g" % worst_agree)
    result = {"facts": facts, "tf_rule": tf_rule, "ok": not errors, "errors": errors, "fatal": fatal, "geomean": geo, "rows": rows,
              "worst_agreement": worst_agree, "elapsed_s": round(time.time() - t_start, 1),
              "bytes_per_element": BYTES_PER_ELT}
    write_json(args.json, result)
    print("bench.py: %d rows, %d errors, %.0f s" % (len(rows), len(errors), time.time() - t_start))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
