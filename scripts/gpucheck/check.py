#!/usr/bin/env python3
"""Correctness of gobn's CUDA kernels: each GPU kernel against gobn's Go CPU
kernels (through libgobncheck.so) and both against a float64 reference.

Cases: op family (fused training and inference gradient, global-normalization
gradient, GradReduce, GradApply) x dtype x layout x shape x variant (plain,
unaligned pointers, in place, gobn's own stream). Inputs are random and never
zero; every output is poisoned with NaN before each call and every tensor sits
between guard elements, so unwritten elements and writes out of bounds show.

Per output, with want the float64 reference:

    |got - want| <= atol * max|want| + rtol * |want|

(float32 outputs 1e-4/1e-5, half 2e-3/2e-3, bfloat16 1.6e-2/1.6e-2, by the
output's own dtype). 'norm' below is the largest |got - want| over that
bound: <= 1 passes. The GPU's norm must also not be meaningfully worse than
the CPU kernel's: it fails when it is over WORSE_FLOOR and over WORSE_FACTOR
times the CPU's.

GPU training takes the inverse standard deviation 1/sqrt(var+eps) (what
TensorFlow's and cuDNN's GPU forward saves) as reserve_space_2, the CPU
kernel the variance: the check draws var, gives the CPU var and the GPU
float32(1/sqrt(float64(var)+eps)).

    python3 check.py                 every case (about two minutes on an H100)
    python3 check.py --small         a few small shapes, every kernel (for compute-sanitizer)
    python3 check.py --fake-gpu      no GPU: tensors on the host, the GPU entries
                                     replaced by the CPU ones (tests this script)
"""

import json
import math
import os
import re
import sys
import time
import traceback
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gobncheck import CHANNELS_LAST, Lib, arguments, context_broken, dims, start, write_json  # noqa: E402

TORCH_DTYPE = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}
# (rtol, atol): a copy of gobn._testing.TOLERANCES (docs/design.md), on purpose.
# gpucheck runs on a GPU machine without TensorFlow or the gobn package, so it
# is self-contained and cannot import the package's table; keep the two equal.
TOL = {"float": (1e-4, 1e-5), "half": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}  # rtol, atol
EPS = 1e-3
EPS64 = float(torch.tensor(EPS, dtype=torch.float32).item())  # the float32 epsilon, exactly
WORSE_FACTOR, WORSE_FLOOR = 2.0, 0.25
SENTINEL = -7.25  # guard value: exact in float32, half and bfloat16
WS_SENTINEL, WS_POISON = 0xA5, 0xFF  # workspace guard bytes; its contents (NaN in any float)
GUARD_BYTES = 256
BLOCK = 1 << 24  # elements per block of the blockwise reference and comparisons
CLONE_LIMIT = 1 << 28  # up to this many elements, a group keeps device copies of its inputs

# Shapes as (N, spatial dims, C); a layout orders them.
SMALL_4D = [(4, (5, 7), 1), (2, (5, 9), 3), (3, (4, 4), 7), (2, (3, 5), 33), (2, (7, 7), 100),
            (1, (1, 1), 64), (16, (1, 1), 256), (0, (4, 4), 8), (5, (9, 11), 3), (8, (14, 14), 128),
            (4, (6, 6), 34), (2, (64, 64), 3), (64, (1, 1), 2)]
SMALL_5D = [(2, (3, 4, 5), 7), (1, (2, 3, 3), 64), (0, (2, 2, 2), 4), (3, (1, 1, 1), 33), (2, (4, 6, 6), 32)]
VARIANT_SHAPES = [(2, (5, 9), 3), (4, (6, 6), 64), (3, (3, 3), 100), (1, (1, 1), 8)]
VARIANTS = ["unaligned", "unaligned_dx", "inplace_x", "inplace_dy", "stream0"]
RESNET = [(32, (112, 112), 64), (32, (56, 56), 64), (32, (56, 56), 256), (32, (28, 28), 512),
          (32, (14, 14), 1024), (32, (7, 7), 2048), (64, (56, 56), 128), (128, (28, 28), 128),
          (128, (14, 14), 256), (128, (7, 7), 512)]
HUGE = (2, (4097, 4096), 64)  # 2^31 + 2^19 elements
# --small: vector widths 1 (C=7, S=15 or 9), 2 (C=34, S=6), 4 (C=12, or float
# C=64, S=16), 8 (half C=64); several partial sums (R=4096; S=4096); empty
SMALL_SANITIZE = [(2, (3, 5), 7), (2, (4, 4), 64), (2, (3, 3), 34), (2, (2, 3), 12), (0, (2, 2), 8),
                  (16, (16, 16), 64), (2, (64, 64), 3)]


def shape_str(layout, shape):
    N, spatial, C = shape
    parts = [N, *spatial, C] if layout in CHANNELS_LAST else [N, C, *spatial]
    return "x".join(str(d) for d in parts)


def logical(layout, shape):
    N, spatial, C = shape
    return [N, *spatial, C] if layout in CHANNELS_LAST else [N, C, *spatial]


class Fatal(Exception):
    """The CUDA context is unusable (a kernel faulted): nothing after runs."""


STICKY = ("ILLEGAL_ADDRESS", "illegal memory access", "MISALIGNED_ADDRESS", "misaligned address", "LAUNCH_FAILED",
          "unspecified launch failure", "ILLEGAL_INSTRUCTION", "illegal instruction", "HARDWARE_STACK_ERROR",
          "CUDA_ERROR_ASSERT", "device-side assert", "LAUNCH_TIMEOUT", "ECC_UNCORRECTABLE", "context is destroyed")


def is_fatal(e):
    """Whether e left the CUDA context unusable: a sticky error in its text,
    or a context that no longer runs a kernel."""
    if any(k in str(e) for k in STICKY):
        return True
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    return context_broken(torch)


# ---------------------------------------------------------------- buffers

class Buf:
    """n elements of dtype inside a larger allocation: guard elements holding
    a sentinel before and after; the tensor t starts `offset` elements past a
    GUARD_BYTES-aligned address (torch's allocations are at least 64-byte
    aligned, CUDA's 512)."""

    def __init__(self, n, dtype, device, offset=0, sentinel=SENTINEL):
        es = torch.empty((), dtype=dtype).element_size()
        g = GUARD_BYTES // es
        self.n, self.pre, self.post, self.sentinel = n, g + offset, g, sentinel
        self.base = torch.empty(self.pre + n + g, dtype=dtype, device=device)
        self.base[:self.pre].fill_(sentinel)
        self.base[self.pre + n:].fill_(sentinel)
        self.t = self.base[self.pre:self.pre + n]

    def ptr(self, null_if_empty=False):
        return 0 if (self.n == 0 and null_if_empty) else self.t.data_ptr()

    def guards_ok(self):
        return bool((self.base[:self.pre] == self.sentinel).all()) and \
            bool((self.base[self.pre + self.n:] == self.sentinel).all())


def fill_random(t, gen, kind="normal", scale=1.0, shift=0.0):
    """Fills t blockwise with random values, none zero."""
    n = t.numel()
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        if kind == "normal":
            v = torch.randn(b - a, generator=gen, device=t.device) * scale + shift
        else:  # uniform in [shift, shift + scale)
            v = torch.rand(b - a, generator=gen, device=t.device) * scale + shift
        v = v.to(t.dtype)
        v = torch.where(v == 0, torch.full_like(v, 0.5), v)
        t[a:b].copy_(v)


def blocks(rows, cols):
    """Blocks (r0, r1, c0, c1) of at most about BLOCK elements of a rows x cols matrix."""
    if rows == 0 or cols == 0:
        return
    if cols >= BLOCK:
        for r in range(rows):
            for c0 in range(0, cols, BLOCK):
                yield r, r + 1, c0, min(cols, c0 + BLOCK)
        return
    step = max(1, BLOCK // cols)
    for r0 in range(0, rows, step):
        yield r0, min(rows, r0 + step), 0, cols


class Geometry:
    """An activation tensor N x C x S in a layout, as a 2-D matrix: channels
    last (N*S, C), channel = column; channels first (N*C, S), channel = row % C."""

    def __init__(self, layout, N, C, S):
        self.cl = layout in CHANNELS_LAST
        self.N, self.C, self.S = N, C, S
        self.rows, self.cols = (N * S, C) if self.cl else (N * C, S)

    def mat(self, t):
        return t.view(self.rows, self.cols)

    def blocks(self):
        return blocks(self.rows, self.cols)

    def chan(self, vec, blk):
        """Per-channel vec broadcast over block blk."""
        r0, r1, c0, c1 = blk
        if self.cl:
            return vec[c0:c1].unsqueeze(0)
        idx = torch.arange(r0, r1, device=vec.device) % self.C
        return vec[idx].unsqueeze(1)

    def sums(self, dy, x, mean64):
        """Σdy and Σdy·(x−μ) per channel, float64."""
        dev = mean64.device
        sdy = torch.zeros(self.C, dtype=torch.float64, device=dev)
        sdx = torch.zeros(self.C, dtype=torch.float64, device=dev)
        dym, xm = self.mat(dy), self.mat(x)
        for blk in self.blocks():
            r0, r1, c0, c1 = blk
            d = dym[r0:r1, c0:c1].to(dev, torch.float64)
            p = d * (xm[r0:r1, c0:c1].to(dev, torch.float64) - self.chan(mean64, blk))
            if self.cl:
                sdy[c0:c1] += d.sum(0)
                sdx[c0:c1] += p.sum(0)
            else:
                idx = torch.arange(r0, r1, device=dev) % self.C
                sdy.index_add_(0, idx, d.sum(1))
                sdx.index_add_(0, idx, p.sum(1))
        return sdy, sdx


# ------------------------------------------------------------- comparison

class Stat:
    def __init__(self):
        self.maxerr, self.norm, self.bad, self.nan = 0.0, 0.0, 0, 0

    def add(self, got, want, M, rtol, atol):
        d = (got - want).abs()
        den = atol * M + rtol * want.abs()
        self.bad += int((~(d <= den)).sum())
        self.nan += int(torch.isnan(got).sum())
        inf = torch.full_like(d, math.inf)
        norm = torch.where(den > 0, d / den, torch.where(d == 0, torch.zeros_like(d), inf))
        norm = torch.nan_to_num(norm, nan=math.inf)
        if d.numel():
            self.maxerr = max(self.maxerr, float(torch.nan_to_num(d, nan=math.inf).max()))
            self.norm = max(self.norm, float(norm.max()))

    def json(self):
        return {"maxerr": self.maxerr, "norm": self.norm, "bad": self.bad, "nan": self.nan}


def compare(want_blocks, got_blocks_gpu, got_blocks_cpu, rtol, atol):
    """Stats of gpu and cpu against want, and gpu against cpu, over blocks.
    Each argument is a function blk -> float64 tensor on the compute device;
    want_blocks also gives the list of blocks."""
    blks, fn = want_blocks
    M = 0.0
    for blk in blks():
        w = fn(blk)
        if w.numel():
            M = max(M, float(w.abs().max()))
    g, c, gc = Stat(), Stat(), Stat()
    for blk in blks():
        w = fn(blk)
        gb, cb = got_blocks_gpu(blk), got_blocks_cpu(blk)
        g.add(gb, w, M, rtol, atol)
        c.add(cb, w, M, rtol, atol)
        gc.add(gb, cb, M, rtol, atol)
    return {"max_want": M, "gpu": g.json(), "cpu": c.json(), "gpu_vs_cpu": gc.json()}


def verdict(out):
    """Failure reasons of one output's comparison, [] when it passes."""
    why = []
    for side in ("gpu", "cpu", "gpu_vs_cpu"):
        s = out[side]
        if s["bad"] or s["nan"]:
            why.append("%s: %d elements out of tolerance (%d NaN), norm %.3g" % (side, s["bad"], s["nan"], s["norm"]))
    g, c = out["gpu"]["norm"], out["cpu"]["norm"]
    if g > WORSE_FLOOR and g > WORSE_FACTOR * c:
        why.append("gpu norm %.3g is worse than cpu norm %.3g" % (g, c))
    return why


# ----------------------------------------------------------------- context

class Context:
    def __init__(self, args):
        self.args = args
        self.fake = args.fake_gpu
        self.dev = torch.device("cpu" if self.fake else "cuda")
        self.lib = Lib(args.lib)
        if not self.fake:
            # gobn enqueues on the caller's stream when Placement.Stream is not
            # zero; torch's default stream has handle 0, so work on a side one
            self.stream = torch.cuda.Stream()
        self.rows = []
        self.kernels_seen = {}

    def launches(self):
        return {} if self.fake else self.lib.launches()

    def sync(self):
        if not self.fake:
            torch.cuda.synchronize()

    def to_host(self, buf):
        """A host copy of a device Buf, same offset, guards included."""
        h = Buf(buf.n, buf.t.dtype, "cpu", offset=buf.pre - buf.post, sentinel=buf.sentinel)
        for a in range(0, buf.n, BLOCK):
            b = min(buf.n, a + BLOCK)
            h.t[a:b].copy_(buf.t[a:b])
        return h


# ------------------------------------------------------------- op families

class Out:
    """An output: its device and host Bufs, the dtype its tolerance is by."""

    def __init__(self, name, dev, host, tol_dtype, activation=False):
        self.name, self.dev, self.host, self.tol_dtype, self.activation = name, dev, host, tol_dtype, activation


def per_channel(ctx, gen, C, dtype, offset, kind="normal", scale=1.0, shift=0.0):
    """A random per-channel input on the device, with its host copy."""
    b = Buf(C, dtype, ctx.dev, offset)
    fill_random(b.t, gen, kind, scale, shift)
    return b, ctx.to_host(b)


def run_op(ctx, grp, fam, mode):
    """Runs one op on both sides and compares; returns its result row."""
    dtype, layout, shape, variant = grp["dtype"], grp["layout"], grp["shape"], grp["variant"]
    N, C, S = dims(layout, logical(layout, shape))
    n, R = N * C * S, N * S
    geo = grp["geo"]
    case = "%s/%s/%s/%s/%s/%s" % (fam, mode, dtype, layout, shape_str(layout, shape), variant)
    row = {"case": case, "family": fam, "mode": mode, "dtype": dtype, "layout": layout,
           "shape": shape_str(layout, shape), "variant": variant, "N": N, "C": C, "S": S}
    gen = torch.Generator(device=ctx.dev)
    gen.manual_seed(zlib.crc32(case.encode()))
    tdt = TORCH_DTYPE[dtype]
    f32 = torch.float32
    off = 1 if variant == "unaligned" else 0
    dy, x, dyh, xh = grp["dy"], grp["x"], grp["dyh"], grp["xh"]
    null_empty = variant == "plain"

    # restore what an in-place op of this group overwrote
    for name in grp["orig"]:
        grp[name].t.copy_(grp["orig"][name])
        grp[name + "h"].t.copy_(grp["origh"][name])
    # the reference reads pristine copies where there are any
    dy_ref = grp["orig"].get("dy", grp["clone"].get("dy", dy.t))
    x_ref = grp["orig"].get("x", grp["clone"].get("x", x.t))

    def act_out():
        if variant == "inplace_x":
            return x, xh
        if variant == "inplace_dy":
            return dy, dyh
        o = 1 if variant in ("unaligned", "unaligned_dx") else 0
        d = Buf(n, tdt, ctx.dev, o)
        return d, Buf(n, tdt, "cpu", o)

    def vec_out(name, dt=f32, tol="float"):
        return Out(name, Buf(C, dt, ctx.dev, off), Buf(C, dt, "cpu", off), tol)

    pcs = []  # per-channel inputs (device, host), checked unchanged afterwards
    ref_A = ref_B = ref_MDy = ref_M = None
    want1d = {}
    if fam in ("fused", "reduce", "apply"):
        mean, meanh = per_channel(ctx, gen, C, f32, off, scale=0.5)
        mean64 = mean.t.to(torch.float64)
        pcs.append((mean, meanh))
    if fam in ("fused", "apply"):
        scale, scaleh = per_channel(ctx, gen, C, f32, off)
        var, varh = per_channel(ctx, gen, C, f32, off, kind="uniform", scale=1.75, shift=0.25)
        pcs += [(scale, scaleh), (var, varh)]
        inv64 = 1.0 / torch.sqrt(var.t.to(torch.float64) + EPS64)
        ref_A = scale.t.to(torch.float64) * inv64
        ref_M = mean64

    if fam == "fused":
        training = mode == "train"
        dx, dxh = act_out()
        outs = [Out("x_backprop", dx, dxh, dtype, True), vec_out("scale_backprop"), vec_out("offset_backprop")]
        sdy, sdx = geo.sums(dy_ref, x_ref, mean64)
        want1d = {"scale_backprop": sdx * inv64, "offset_backprop": sdy}
        if training and R > 0:
            ref_MDy = sdy / R
            ref_B = -ref_A * inv64 * inv64 * sdx / R
        rs2_gpu = var
        if training:
            inv = Buf(C, f32, ctx.dev, off)
            inv.t.copy_(inv64.to(f32))
            pcs.append((inv, ctx.to_host(inv)))
            rs2_gpu = inv
        scalars = [int(training), EPS]
        ptrs = lambda side: [
            dy, x, scale if side else scaleh, mean if side else meanh, rs2_gpu if side else varh,
            outs[0], outs[1], outs[2]]
    elif fam == "global":
        scale_after = mode == "scale"
        m, mh = per_channel(ctx, gen, C, tdt, off, scale=0.5)
        v, vh = per_channel(ctx, gen, C, tdt, off, kind="uniform", scale=1.75, shift=0.25)
        gamma, gammah = per_channel(ctx, gen, C, tdt, off)
        pcs += [(m, mh), (v, vh), (gamma, gammah)]
        dx, dxh = act_out()
        outs = [Out("dx", dx, dxh, dtype, True)] + [vec_out(k, tdt, dtype) for k in ("dm", "dv", "db", "dg")]
        s = 1.0 / torch.sqrt(v.t.to(torch.float64) + EPS64)
        k = s * gamma.t.to(torch.float64) if scale_after else s
        sdy, sdx = geo.sums(dy_ref, x_ref, m.t.to(torch.float64))
        want1d = {"dm": -sdy * k, "dv": -0.5 * s * s * k * sdx, "db": sdy,
                  "dg": s * sdx if scale_after else torch.zeros_like(s)}
        ref_A = k
        scalars = [int(scale_after), EPS]
        ptrs = lambda side: [x, m if side else mh, v if side else vh, gamma if side else gammah, dy] + outs
    elif fam == "reduce":
        outs = [vec_out("sum_dy"), vec_out("sum_dy_xmu")]
        sdy, sdx = geo.sums(dy_ref, x_ref, mean64)
        want1d = {"sum_dy": sdy, "sum_dy_xmu": sdx}
        scalars = []
        ptrs = lambda side: [dy, x, mean if side else meanh] + outs
    elif fam == "apply":
        replicas = 4 if mode == "r4" else 1
        count = R * replicas if R > 0 else (7 if replicas > 1 else 0)
        mag = math.sqrt(max(count, 1))
        sdy_in, sdy_inh = per_channel(ctx, gen, C, f32, off, scale=mag)
        sdx_in, sdx_inh = per_channel(ctx, gen, C, f32, off, scale=mag)
        pcs += [(sdy_in, sdy_inh), (sdx_in, sdx_inh)]
        dx, dxh = act_out()
        outs = [Out("x_backprop", dx, dxh, dtype, True)]
        if count > 0:
            ref_MDy = sdy_in.t.to(torch.float64) / count
            ref_B = -ref_A * inv64 * inv64 * sdx_in.t.to(torch.float64) / count
        scalars = [count, EPS]
        row["count"] = count
        ptrs = lambda side: [dy, x, scale if side else scaleh, mean if side else meanh, var if side else varh,
                             sdy_in if side else sdy_inh, sdx_in if side else sdx_inh, outs[0]]
    else:
        raise ValueError(fam)
    pc_clones = [(d.t.clone(), h.t.clone()) for d, h in pcs]

    def addr(p, side):
        if isinstance(p, Out):
            p = p.dev if side else p.host
        elif side == 0 and p is dy:
            p = dyh
        elif side == 0 and p is x:
            p = xh
        return p.ptr(null_if_empty=null_empty and p.n == n)

    # poison the outputs (an in-place one holds its input)
    for o in outs:
        for b in (o.dev, o.host):
            if not (o.activation and variant.startswith("inplace")):
                b.t.fill_(math.nan)

    # the CPU side
    t0 = time.perf_counter()
    ctx.lib.cpu(fam, dtype, layout, N, C, S, scalars, [addr(p, 0) for p in ptrs(0)])
    row["cpu_ms"] = round((time.perf_counter() - t0) * 1e3, 3)

    # the GPU side
    gptrs = [addr(p, 1) for p in ptrs(1)]
    wsn = ctx.lib.workspace(fam, dtype, layout, N, C, S, scalars, gptrs)
    row["workspace_bytes"] = wsn
    ws = Buf(wsn, torch.uint8, ctx.dev, sentinel=WS_SENTINEL)
    ws.t.fill_(WS_POISON)
    before = ctx.launches()
    t0 = time.perf_counter()
    if ctx.fake:
        gscal = list(scalars)
        if fam == "fused" and mode == "train":
            # the CPU kernel wants the variance back from the inverse std
            fake_var = (1.0 / rs2_gpu.t.to(torch.float64) ** 2 - EPS64).to(f32)
            gptrs[4] = fake_var.data_ptr() if C else 0
        ctx.lib.cpu(fam, dtype, layout, N, C, S, gscal, gptrs)
    else:
        stream = 0 if variant == "stream0" else ctx.stream.cuda_stream
        ctx.lib.gpu(fam, dtype, layout, N, C, S, scalars, gptrs, stream, ws.ptr() if wsn else 0, wsn)
        ctx.sync()
    row["gpu_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    why = row.setdefault("why", [])
    for name, clone in grp["clone"].items():
        if not torch.equal(grp[name].t, clone):
            why.append("the GPU side changed input %s" % name)
            grp[name].t.copy_(clone)
    after = ctx.launches()
    row["kernels"] = sorted(k for k in after if after[k] != before.get(k, 0))
    if not ctx.fake and n > 0 and not row["kernels"]:
        why.append("no kernel launched")
    if variant == "unaligned" or (variant == "unaligned_dx" and fam != "reduce"):
        # a tensor one element past an aligned address takes no vector loads
        wide = [k for k in row["kernels"] if re.search(r"_c[lf]_", k) and vector_width(k) != 1]
        if wide:
            why.append("unaligned pointers, yet vector kernels ran: %s" % ", ".join(wide))

    # compare
    row["outputs"] = {}
    for o in outs:
        rtol, atol = TOL[o.tol_dtype]
        if o.activation:
            dym, xm = geo.mat(dy_ref), geo.mat(x_ref)
            gm, cm = geo.mat(o.dev.t), geo.mat(o.host.t)

            def want(blk, dym=dym, xm=xm):
                r0, r1, c0, c1 = blk
                d = dym[r0:r1, c0:c1].to(torch.float64)
                w = geo.chan(ref_A, blk) * (d - (geo.chan(ref_MDy, blk) if ref_MDy is not None else 0))
                if ref_B is not None:
                    w = w + geo.chan(ref_B, blk) * (xm[r0:r1, c0:c1].to(torch.float64) - geo.chan(ref_M, blk))
                return w

            res = compare((geo.blocks, want),
                          lambda b, gm=gm: gm[b[0]:b[1], b[2]:b[3]].to(torch.float64),
                          lambda b, cm=cm: cm[b[0]:b[1], b[2]:b[3]].to(ctx.dev).to(torch.float64),
                          rtol, atol)
        else:
            w = want1d[o.name]
            one = [(0, 1, 0, C)] if C else []
            res = compare((lambda: one, lambda b: w),
                          lambda b, o=o: o.dev.t.to(torch.float64),
                          lambda b, o=o: o.host.t.to(ctx.dev).to(torch.float64), rtol, atol)
        row["outputs"][o.name] = res
        why += ["%s %s" % (o.name, r) for r in verdict(res)]

    # guards, workspace guards, per-channel inputs unchanged
    for o in outs:
        for side, b in (("gpu", o.dev), ("cpu", o.host)):
            if not b.guards_ok():
                why.append("%s %s: guard elements overwritten" % (o.name, side))
    if not ws.guards_ok():
        why.append("workspace: written past its %d bytes" % wsn)
    for (d, h), (dc, hc) in zip(pcs, pc_clones):
        if not torch.equal(d.t, dc) or not torch.equal(h.t, hc):
            why.append("a per-channel input changed")
    row["ok"] = not why
    return row


def vector_width(kernel):
    """V of a layout kernel's name (gobn_<job>_<cl|cf>_<type>_v<V>[_k<K>])."""
    return int(re.search(r"_v(\d+)(_k\d+)?$", kernel).group(1))


def make_group(ctx, dtype, layout, shape, variant, tag):
    N, C, S = dims(layout, logical(layout, shape))
    n = N * C * S
    tdt = TORCH_DTYPE[dtype]
    gid = "%s/%s/%s/%s" % (dtype, layout, shape_str(layout, shape), variant)
    gen = torch.Generator(device=ctx.dev)
    gen.manual_seed(zlib.crc32(gid.encode()))
    off = 1 if variant == "unaligned" else 0
    g = {"id": gid, "dtype": dtype, "layout": layout, "shape": shape, "variant": variant, "tag": tag,
         "geo": Geometry(layout, N, C, S), "orig": {}, "origh": {}, "clone": {}}
    g["dy"], g["x"] = Buf(n, tdt, ctx.dev, off), Buf(n, tdt, ctx.dev, off)
    fill_random(g["dy"].t, gen)
    fill_random(g["x"].t, gen, scale=1.0, shift=0.1)
    g["dyh"], g["xh"] = ctx.to_host(g["dy"]), ctx.to_host(g["x"])
    if variant in ("inplace_x", "inplace_dy"):
        name = variant[len("inplace_"):]
        g["orig"][name] = g[name].t.clone()
        g["origh"][name] = g[name + "h"].t.clone()
    if n <= CLONE_LIMIT:  # to tell a GPU side that writes its inputs at once
        for name in ("dy", "x"):
            if name not in g["orig"]:
                g["clone"][name] = g[name].t.clone()
    return g


def group_ops(dtype, layout, variant, tag):
    ops = [("fused", "train"), ("fused", "infer")]
    if not variant.startswith("inplace"):
        ops.append(("reduce", "-"))
    ops.append(("apply", "r1"))
    if tag in ("small", "sanitize"):
        ops.append(("apply", "r4"))
    if dtype in ("float", "half") and layout == "NHWC":
        ops += [("global", "scale"), ("global", "noscale")]
    return ops


def plan(args):
    """Groups (dtype, layout, shape, variant, tag) in the order they run."""
    dts = ["float", "half", "bfloat16"]
    g = []
    if args.small:
        for shape in SMALL_SANITIZE:
            for dt in dts:
                for lay in ("NHWC", "NCHW"):
                    g.append((dt, lay, shape, "plain", "sanitize"))
        for dt in dts:
            for lay in ("NHWC", "NCHW"):
                g.append((dt, lay, (2, (4, 4), 64), "unaligned", "sanitize"))
        g.append(("float", "NHWC", (2, (4, 4), 64), "inplace_x", "sanitize"))
        g.append(("half", "NCHW", (2, (4, 4), 64), "inplace_dy", "sanitize"))
        g.append(("bfloat16", "NHWC", (2, (4, 4), 64), "stream0", "sanitize"))
        g.append(("half", "NDHWC", (2, (2, 3, 4), 8), "plain", "sanitize"))
        g.append(("bfloat16", "NCDHW", (2, (2, 3, 4), 8), "plain", "sanitize"))
        return g
    for dt in dts:
        for lay in ("NHWC", "NCHW"):
            for shape in SMALL_4D:
                g.append((dt, lay, shape, "plain", "small"))
            for shape in VARIANT_SHAPES:
                for var in VARIANTS:
                    g.append((dt, lay, shape, var, "small"))
        for lay in ("NDHWC", "NCDHW"):
            for shape in SMALL_5D:
                g.append((dt, lay, shape, "plain", "small"))
            for var in ("unaligned", "inplace_x"):
                g.append((dt, lay, SMALL_5D[0], var, "small"))
    if not args.fake_gpu and not args.no_huge:
        g.append(("half", "NHWC", HUGE, "plain", "huge"))
    if not args.no_resnet:
        for shape in RESNET:
            for dt in dts:
                for lay in ("NHWC", "NCHW"):
                    g.append((dt, lay, shape, "plain", "resnet"))
        g.append(("float", "NHWC", RESNET[1], "unaligned", "resnet"))
        g.append(("half", "NCHW", RESNET[1], "unaligned_dx", "resnet"))
        g.append(("bfloat16", "NHWC", RESNET[2], "inplace_dy", "resnet"))
    return g


def main():
    ap = arguments(__doc__)
    ap.add_argument("--small", action="store_true", help="a few small shapes, every kernel (compute-sanitizer)")
    ap.add_argument("--fake-gpu", action="store_true", help="no GPU: the GPU entries replaced by the CPU ones")
    ap.add_argument("--no-huge", action="store_true", help="skip the tensor over 2^31 elements")
    ap.add_argument("--no-resnet", action="store_true", help="skip the ResNet-50 shapes")
    ap.add_argument("--filter", help="run only cases whose id matches this regular expression")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="start no ResNet group after this many seconds (0: no limit)")
    ap.add_argument("--show", type=int, default=40, help="failures to print")
    ap.add_argument("--no-guards", action="store_true",
                    help="no guard elements around tensors (--small implies it): with "
                         "PYTORCH_NO_CUDA_MEMORY_CACHING=1 each tensor is its own exact-size allocation, "
                         "so compute-sanitizer's memcheck sees every access past one")
    args = ap.parse_args()
    if args.small or args.no_guards:
        global GUARD_BYTES
        GUARD_BYTES = 0

    t_start = time.time()
    ctx = Context(args)
    facts = start(torch, ctx.lib, args.json, "fake_gpu", args.fake_gpu)
    if facts is None:
        return 2
    print("check.py: %s, lib %s (%s)" % (facts.get("gpu", "fake GPU (host)"), ctx.lib.path,
                                         json.dumps(facts["lib_info"])))
    start_launches = ctx.launches()
    rows, skipped, fatal = [], [], None
    flt = re.compile(args.filter) if args.filter else None
    groups = plan(args)
    for gi, (dt, lay, shape, var, tag) in enumerate(groups):
        if tag == "resnet" and args.max_seconds and time.time() - t_start > args.max_seconds:
            skipped.append("%s/%s/%s/%s" % (dt, lay, shape_str(lay, shape), var))
            continue
        ops = [(f, m) for f, m in group_ops(dt, lay, var, tag)
               if not flt or flt.search("%s/%s/%s/%s/%s/%s" % (f, m, dt, lay, shape_str(lay, shape), var))]
        if not ops:
            continue
        t_group = time.time()
        grp = None  # a failed group's buffers go before the next one's come
        try:
            with (torch.cuda.stream(ctx.stream) if not ctx.fake else _null()):
                grp = make_group(ctx, dt, lay, shape, var, tag)
                for fam, mode in ops:
                    try:
                        row = run_op(ctx, grp, fam, mode)
                    except Exception as e:  # noqa: BLE001
                        if is_fatal(e):
                            raise Fatal(str(e)) from e
                        row = {"case": "%s/%s/%s" % (fam, mode, grp["id"]), "family": fam, "mode": mode,
                               "dtype": dt, "layout": lay, "shape": shape_str(lay, shape), "variant": var,
                               "ok": False, "why": ["%s: %s" % (type(e).__name__, e)],
                               "trace": traceback.format_exc(limit=4)}
                    row["tag"] = tag
                    rows.append(row)
                # inputs unchanged: the device's against the host's copies
                for name in ("dy", "x"):
                    if name in grp["orig"]:
                        continue
                    d, h = grp[name], grp[name + "h"]
                    same = all(torch.equal(d.t[a:a + BLOCK], h.t[a:a + BLOCK].to(ctx.dev))
                               for a in range(0, d.n, BLOCK))
                    if not same or not d.guards_ok() or not h.guards_ok():
                        rows.append({"case": "inputs/%s/%s" % (name, grp["id"]), "family": "inputs", "mode": "-",
                                     "dtype": dt, "layout": lay, "shape": shape_str(lay, shape), "variant": var,
                                     "tag": tag, "ok": False, "why": ["input %s changed (GPU or CPU side)" % name]})
                del grp
        except Exception as e:  # noqa: BLE001
            if isinstance(e, Fatal) or is_fatal(e):
                fatal = "%s (group %s/%s/%s/%s)" % (e, dt, lay, shape_str(lay, shape), var)
                print("FATAL: the CUDA context failed, nothing after this runs: %s" % fatal)
                break
            rows.append({"case": "group/%s/%s/%s/%s" % (dt, lay, shape_str(lay, shape), var), "family": "group",
                         "mode": "-", "dtype": dt, "layout": lay, "shape": shape_str(lay, shape), "variant": var,
                         "tag": tag, "ok": False, "why": ["%s: %s" % (type(e).__name__, e)],
                         "trace": traceback.format_exc(limit=4)})
            if not ctx.fake:
                torch.cuda.empty_cache()
        if tag in ("huge", "resnet") or time.time() - t_group > 5:
            print("  %-40s %d ops, %.1f s" % ("%s/%s/%s/%s" % (dt, lay, shape_str(lay, shape), var), len(ops),
                                              time.time() - t_group))
    end_launches = ctx.launches()
    delta = {k: v - start_launches.get(k, 0) for k, v in end_launches.items() if v != start_launches.get(k, 0)}

    # the launch-counter check: scalar and vector kernels both ran
    launch_check = {"checked": not args.fake_gpu and not flt}
    if launch_check["checked"]:
        v1 = sum(v for k, v in delta.items() if re.search(r"_c[lf]_", k) and vector_width(k) == 1)
        vw = sum(v for k, v in delta.items() if re.search(r"_c[lf]_", k) and vector_width(k) >= 4)
        launch_check.update(v1=v1, v4_v8=vw, ok=v1 > 0 and vw > 0)
        # with GOBN_CUDA_PERSISTENT=1 the persistent kernel ran, and no call
        # that fits it fell back to the three launches
        info = ctx.lib.info()
        if info.get("persistent"):
            persist = sum(v for k, v in delta.items() if k.startswith("gobn_persist_"))
            launch_check.update(persistent=persist, fallbacks=info.get("fallbacks"),
                                ok=launch_check["ok"] and persist > 0 and info.get("fallbacks") == 0)
    failures = [r for r in rows if not r["ok"]]
    ok = not failures and fatal is None and launch_check.get("ok", True)
    summary = print_summary(rows, failures, delta, launch_check, skipped, fatal, args.show)
    result = {"facts": facts, "ok": ok, "cases": len(rows), "failed": len(failures), "fatal": fatal,
              "skipped_groups": skipped, "launch_check": launch_check, "launches": delta,
              "elapsed_s": round(time.time() - t_start, 1), "summary": summary,
              "tolerances": {k: {"rtol": v[0], "atol": v[1]} for k, v in TOL.items()},
              "worse_rule": {"factor": WORSE_FACTOR, "floor": WORSE_FLOOR},
              "rows": [compact(r) for r in rows]}
    write_json(args.json, result)
    print("check.py: %s: %d cases, %d failed%s, %.0f s" % ("PASS" if ok else "FAIL", len(rows), len(failures),
                                                         ", FATAL" if fatal else "", time.time() - t_start))
    return 0 if ok else 1


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def compact(r):
    """A row for the JSON: rounded numbers."""
    out = {k: v for k, v in r.items() if k != "outputs"}
    if "outputs" in r:
        out["outputs"] = {
            name: {"max_want": float("%.4g" % o["max_want"]),
                   **{side: {"maxerr": float("%.3g" % o[side]["maxerr"]), "norm": float("%.3g" % o[side]["norm"]),
                             **({"bad": o[side]["bad"], "nan": o[side]["nan"]} if o[side]["bad"] else {})}
                      for side in ("gpu", "cpu", "gpu_vs_cpu")}}
            for name, o in r["outputs"].items()}
    return out


def print_summary(rows, failures, delta, launch_check, skipped, fatal, show):
    """Prints the table (one line per family, mode and dtype, over every
    layout and shape) and returns the finer one (per layout too) as data."""
    def tally(key_of):
        table = {}
        for r in rows:
            t = table.setdefault(key_of(r), {"cases": 0, "failed": 0, "gpu_norm": 0.0, "cpu_norm": 0.0,
                                             "gpu_vs_cpu": 0.0, "gpu_ms": 0.0, "cpu_ms": 0.0, "layouts": set()})
            t["cases"] += 1
            t["failed"] += not r["ok"]
            t["layouts"].add(r["layout"])
            for o in r.get("outputs", {}).values():
                t["gpu_norm"] = max(t["gpu_norm"], o["gpu"]["norm"])
                t["cpu_norm"] = max(t["cpu_norm"], o["cpu"]["norm"])
                t["gpu_vs_cpu"] = max(t["gpu_vs_cpu"], o["gpu_vs_cpu"]["norm"])
            t["gpu_ms"] += r.get("gpu_ms", 0.0)
            t["cpu_ms"] += r.get("cpu_ms", 0.0)
        return table

    coarse = tally(lambda r: (r["family"], r["mode"], r["dtype"]))
    print()
    print("%-8s %-7s %-9s %6s %6s %9s %9s %9s  %s" % ("family", "mode", "dtype", "cases", "failed",
                                                      "gpu_norm", "cpu_norm", "gpu~cpu", "layouts"))
    for (fam, mode, dt), t in sorted(coarse.items()):
        print("%-8s %-7s %-9s %6d %6d %9.3g %9.3g %9.3g  %s" % (
            fam, mode, dt, t["cases"], t["failed"], t["gpu_norm"], t["cpu_norm"], t["gpu_vs_cpu"],
            ",".join(sorted(t["layouts"]))))
    print("(norm: the largest |error| over its tolerance, <= 1 passes; the worst of the row's cases and outputs)")
    if failures:
        print("\n%d failures%s:" % (len(failures), " (first %d)" % show if len(failures) > show else ""))
        for r in failures[:show]:
            print("  %s: %s" % (r["case"], "; ".join(r["why"])[:400]))
    if skipped:
        print("\nskipped for time: %d groups (--max-seconds)" % len(skipped))
    if fatal:
        print("\nFATAL: %s" % fatal)
    if launch_check["checked"]:
        persist = ""
        if "persistent" in launch_check:
            persist = "; persistent: %d, fallbacks: %s" % (launch_check["persistent"], launch_check["fallbacks"])
        print("\nlaunches: %d kernels, %d launches; _v1: %d, _v4/_v8: %d%s: %s" % (
            len(delta), sum(delta.values()), launch_check["v1"], launch_check["v4_v8"], persist,
            "ok" if launch_check["ok"] else "FAIL (want each above zero, and no fallback)"))
    fine = tally(lambda r: (r["family"], r["mode"], r["dtype"], r["layout"]))
    return [{"family": k[0], "mode": k[1], "dtype": k[2], "layout": k[3],
             **{f: round(v, 4) if isinstance(v, float) else v for f, v in t.items() if f != "layouts"}}
            for k, t in sorted(fine.items())]


if __name__ == "__main__":
    sys.exit(main())
