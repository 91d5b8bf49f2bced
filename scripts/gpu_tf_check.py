"""gobn inside TensorFlow on a device: TensorFlow itself calling gobn's kernels.

`make gpu-tf-check` runs it with TensorFlow's GPU build on a machine with an
NVIDIA GPU (docs/gpu.md), or `python3 scripts/gpu_tf_check.py --json
bench/gpu_tf.json`. It checks, on --device (default GPU:0; soft device
placement off, so an op without a kernel there fails instead of moving):

  registry  TensorFlow's kernel registry lists a kernel of every gobn op on
            the device for each dtype opdef binds there, and BatchNormGradReduce's
            and BatchNormGradApply's count in host memory
  parity    every Gobn> op x dtype x data format x mode x shape, eager,
            inside tf.function and inside an XLA-compiled one (run=xla:
            jit_compile, gobn's XLA handler for the device's platform), with
            its tensors on the device: within the float64 reference's
            tolerance (docs/design.md); the fused ops beside stock's kernel on
            the device where stock has one (under XLA, stock's op compiled by
            XLA); training's reserve spaces come from stock's forward on the
            device (on a GPU, the inverse standard deviation); gobn's kernel
            ran on the device (gobn.kernel_calls(): XLA_GPU for run=xla)
  errors    bad input gets InvalidArgument, the process goes on, and the next
            call is right and runs on the device
  xla       gobn registered an XLA handler of every op for the device's
            platform (gobn.xla_status()), and bad input inside an
            XLA-compiled function is an XLA error with gobn's message, the
            process goes on, and the next compiled call is right
  threads   several threads calling gobn at once, beside other work on the
            device: each result equals the one computed alone, bit for bit,
            and every call ran on the device
  enable    after gobn.enable(), stock's FusedBatchNormGradV3 on the device
            runs gobn's kernel and equals stock's own result within the
            tolerance (last: enable() lasts for the process)
  tf_stream on a GPU, every gobn call so far ran on TensorFlow's own stream:
            the stream was found, no call fell back to the synchronizing
            rule, and none synchronized the device (docs/gpu.md)

It prints a line per check and writes --json (bench/gpu_tf.json's device,
tensorflow, command and a list of rows per section; stream, the counts of
gobn._stream_stats() and the --timing rows);
the exit status is 0 only if every check passed; an unexpected error fails
its case (or its section) and the run goes on.

--timing also times gobn's FusedBatchNormGradV3 against stock's inside
TensorFlow, per call in a tf.function of dependent calls and eagerly, with
gobn on TensorFlow's stream and, beside it, by the synchronizing rule (the
stream record: bench/gpu_tf.json's "stream"). Training steps are
bench_models.py --device gpu's (make gpu-tf-check runs both).

--no-xla leaves out the XLA runs and section (they need TensorFlow 2.17 or
later: gobn._xla).

--device CPU:0 runs the same checks on the CPU, where reserve_space_2 is the
variance; python_tests/test_gpu_tf_check.py runs it so with --quick.
"""

import argparse
import json
import os
import sys
import threading
import time
import zlib

from machine import portable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EPSILON = 1e-3
# (N, spatial dims, C): small and odd shapes, C = 1, an empty batch; with
# --full also ResNet-50's.
SHAPES_4D = [(2, (5, 7), 3), (1, (1, 1), 1), (4, (6, 6), 33), (0, (4, 4), 8), (8, (14, 14), 64)]
SHAPES_5D = [(2, (3, 4, 5), 7), (0, (2, 2, 2), 4)]
RESNET = [(32, (112, 112), 64), (32, (56, 56), 256), (32, (28, 28), 512), (32, (14, 14), 1024), (32, (7, 7), 2048)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="GPU:0", help="the device to check (default GPU:0)")
    p.add_argument("--quick", action="store_true", help="float32 and one shape of each rank in parity")
    p.add_argument("--full", action="store_true", help="ResNet-50's shapes in parity too")
    p.add_argument("--timing", action="store_true",
                   help="time gobn's calls against stock's inside TensorFlow (the synchronization rule's cost)")
    p.add_argument("--no-xla", dest="xla", action="store_false",
                   help="no runs inside XLA-compiled functions (jit_compile)")
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def setup(device):
    if device.upper().startswith("CPU"):
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # stock's own CPU kernels, as python_tests
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.path.join(ROOT, "python"))


class Checks:
    """The results: a list of rows per section, and whether all passed."""

    def __init__(self):
        self.sections = {}
        self.measured = {}
        self.failed = 0

    def add(self, section, ok, **row):
        row = dict(row, ok=bool(ok))
        self.sections.setdefault(section, []).append(row)
        if not ok:
            self.failed += 1
        self.show("ok  " if ok else "FAIL", section, row)

    def measure(self, section, **row):
        """A measurement, not a check: kept and printed, never counted."""
        self.measured.setdefault(section, []).append(row)
        self.show("    ", section, row)

    @staticmethod
    def show(mark, section, row):
        detail = " ".join(f"{k}={v}" for k, v in row.items() if k != "ok")
        print(f"{mark} {section:8s} {detail}", flush=True)

    def guard(self, section, fn, *args, **row):
        """Runs fn(*args); an exception fails section with the row given."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 (reported as a failed check)
            self.add(section, False, **row, error=repr(e)[:500])


# ---------------------------------------------------------------------------


def device_type(device):
    return device.split(":")[0].upper()


def calls_on(kernel_calls, name, dev, mode=None):
    """The calls of gobn's kernel name on dev so far; of its XLA handler for
    dev's platform in mode xla."""
    return kernel_calls().get(name, {}).get("XLA_" + dev if mode == "xla" else dev, 0)


def modes(args):
    """How each parity case runs: eagerly, in a tf.function, and compiled by XLA."""
    return ("eager", "function") + (("xla",) if args.xla else ())


def check_registry(checks, tf, ops, dev):
    from tensorflow.python.framework import kernels as registry

    names = {1: "float", 2: "double", 14: "bfloat16", 19: "half"}
    for op in ops:
        got, host = set(), set()
        for k in registry.get_registered_kernels_for_op(op.name).kernel:
            if k.device_type == dev:
                got.add({c.name: names.get(c.allowed_values.list.type[0], "?") for c in k.constraint}["T"])
                host.update(k.host_memory_arg)
        want = set(op.gpu_dtypes if dev == "GPU" else op.dtypes)
        # count lives in host memory on a GPU (on the CPU everything does)
        want_host = {"count"} if dev == "GPU" and "count" in op.inputs + op.outputs else set()
        checks.add("registry", got == want and host == want_host, op=op.name, dtypes=sorted(got),
                   host_memory=sorted(host))


def shapes_for(rank, args):
    shapes = SHAPES_4D if rank == 4 else SHAPES_5D
    if args.quick:
        shapes = shapes[:1]
    if args.full and rank == 4:
        shapes = shapes + RESNET
    return shapes


def cases(tf, op, dev, args):
    """(dtype's name, dtype, data format, shape) of op's parity cases on dev."""
    for name in op.gpu_dtypes if dev == "GPU" else op.dtypes:
        if args.quick and name != "float":
            continue
        for data_format in op.data_formats:
            for shape in shapes_for(len(data_format), args):
                yield name, tf.as_dtype(name), data_format, shape  # TensorFlow reads the spec names


def logical(data_format, shape):
    N, spatial, C = shape
    return [N, *spatial, C] if data_format in ("NHWC", "NDHWC") else [N, C, *spatial]


def max_error(got, want, bound):
    """The largest |got - want| over its bound (<= 1 passes), NaN-aware."""
    import numpy as np

    got, want, bound = (np.asarray(a, np.float64) for a in (got, want, bound))
    if got.shape != want.shape:
        return 1e300
    if got.size == 0:
        return 0.0
    both_nan = np.isnan(got) & np.isnan(want)
    err = np.where(both_nan, 0.0, np.abs(got - want) / np.maximum(bound, 1e-300))
    return float(np.nan_to_num(err, nan=1e300, posinf=1e300).max())


def run(fn, inputs, mode, tf):
    if mode == "eager":
        return [t.numpy() for t in fn(**inputs)]
    spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in inputs.items()}
    f = tf.function(lambda kw: fn(**kw), input_signature=[spec], jit_compile=mode == "xla")
    return [t.numpy() for t in f(inputs)]


def fused_inputs(tf, np, op, dtype, data_format, is_training, shape, seed, dev_is_gpu):
    """The op's inputs on the current device, and the (mean, variance) the
    float64 reference takes."""
    rng = np.random.default_rng(seed)
    dims = logical(data_format, shape)
    C = shape[2]
    x = tf.constant(rng.standard_normal(dims) * 1.5 + 0.25, dtype)
    dy = tf.constant(rng.standard_normal(dims), dtype)
    scale = tf.constant(rng.uniform(0.5, 1.5, C) * rng.choice([-1.0, 1.0], C), tf.float32)
    offset = tf.constant(rng.standard_normal(C), tf.float32)
    rs3 = tf.zeros([])  # what a forward without cuDNN's reserve space gives
    if is_training and shape[0] * C > 0 and all(shape[1]):
        empty = tf.constant([], tf.float32)
        out = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=empty, variance=empty,
                                          epsilon=EPSILON, data_format=data_format, is_training=True)
        mean, rs2, rs3 = out.reserve_space_1, out.reserve_space_2, out.reserve_space_3
        r = np.float64(rs2.numpy())
        # A GPU's forward saves 1/sqrt(variance + epsilon), the CPU's the variance.
        variance = 1.0 / (r * r) - np.float64(np.float32(EPSILON)) if dev_is_gpu else r
    else:
        mean = tf.constant(rng.standard_normal(C) * 0.5, tf.float32)
        rs2 = tf.constant(rng.uniform(0.5, 2.0, C), tf.float32)
        variance = np.float64(rs2.numpy())
    inputs = dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=rs2)
    if "reserve_space_3" in op.inputs:
        inputs["reserve_space_3"] = rs3
    return inputs, np.float64(mean.numpy()), variance


def check_fused(checks, tf, np, lib, kernel_calls, ops, device, args):
    dev = device_type(device)
    for op in ops:
        for dtype_name, dtype, data_format, shape in cases(tf, op, dev, args):
            for is_training in (True, False):
                row = dict(op=op.name, dtype=dtype_name, data_format=data_format,
                           mode="training" if is_training else "inference", shape=logical(data_format, shape))
                checks.guard("parity", fused_case, checks, tf, np, lib, kernel_calls, op, dtype, is_training,
                             shape, device, args, row, **row)


def fused_case(checks, tf, np, lib, kernel_calls, op, dtype, is_training, shape, device, args, row):
    from gobn._testing import fused_grad_reference, tolerance_bound

    dev, data_format = device_type(device), row["data_format"]
    seed = zlib.crc32(repr(sorted(row.items())).encode())
    with tf.device(device):
        inputs, mean, variance = fused_inputs(tf, np, op, dtype, data_format, is_training, shape, seed, dev == "GPU")
        attrs = dict(epsilon=EPSILON, data_format=data_format, is_training=is_training)
        want = fused_grad_reference(inputs["y_backprop"], inputs["x"], inputs["scale"], mean, variance, EPSILON,
                                    is_training, data_format)
        stock, gobn = getattr(tf.raw_ops, op.stock), getattr(lib, op.wrapper)
        for mode in modes(args):
            before = calls_on(kernel_calls, op.name, dev, mode)
            got = run(lambda **kw: gobn(**kw, **attrs)[:3], inputs, mode, tf)
            ran = calls_on(kernel_calls, op.name, dev, mode) - before
            stock_error = None
            try:
                ref = run(lambda **kw: stock(**kw, **attrs)[:3], inputs, mode, tf)
            except tf.errors.OpError as e:  # stock has no kernel for it here, or failed
                ref, stock_error = None, f"{type(e).__name__}: {' '.join(e.message.split())[:200]}"
            errs, stock_errs = [], []
            for i, w in enumerate(want):
                bound = tolerance_bound(w, dtype if i == 0 else tf.float32)
                errs.append(max_error(got[i], w, bound))
                if ref is not None:
                    stock_errs.append(max_error(ref[i], w, bound))
            checks.add("parity", max(errs) <= 1 and ran >= 1, **row, run=mode, calls=ran,
                       gobn_norm=round(max(errs), 4), stock_norm=round(max(stock_errs), 4) if stock_errs else None,
                       stock_error=stock_error)


def check_global_norm(checks, tf, np, lib, kernel_calls, op, device, args):
    dev = device_type(device)
    for dtype_name, dtype, _, shape in cases(tf, op, dev, args):
        for scale_after in (True, False):
            row = dict(op=op.name, dtype=dtype_name, data_format="NHWC",
                       mode=f"scale_after_normalization={scale_after}", shape=logical("NHWC", shape))
            checks.guard("parity", global_norm_case, checks, tf, np, lib, kernel_calls, op, dtype, shape,
                         scale_after, device, args, row, **row)


def global_norm_case(checks, tf, np, lib, kernel_calls, op, dtype, shape, scale_after, device, args, row):
    from gobn._testing import global_norm_grad_reference, tolerance_bound

    dev = device_type(device)
    rng = np.random.default_rng(zlib.crc32(repr((row["dtype"], shape, scale_after)).encode()))
    dims, C = row["shape"], shape[2]
    with tf.device(device):
        inputs = dict(t=tf.constant(rng.standard_normal(dims), dtype),
                      m=tf.constant(rng.standard_normal(C) * 0.3, dtype),
                      v=tf.constant(rng.uniform(0.5, 2.0, C), dtype),
                      gamma=tf.constant(rng.uniform(0.5, 1.5, C), dtype),
                      backprop=tf.constant(rng.standard_normal(dims), dtype))
        attrs = dict(variance_epsilon=EPSILON, scale_after_normalization=scale_after)
        want = global_norm_grad_reference(**inputs, **attrs)
        gobn = getattr(lib, op.wrapper)
        for mode in modes(args):
            before = calls_on(kernel_calls, op.name, dev, mode)
            got = run(lambda **kw: gobn(**kw, **attrs), inputs, mode, tf)
            ran = calls_on(kernel_calls, op.name, dev, mode) - before
            norm = max(max_error(g, w, tolerance_bound(w, dtype)) for g, w in zip(got, want))
            checks.add("parity", norm <= 1 and ran >= 1, **row, run=mode, calls=ran, gobn_norm=round(norm, 4),
                       stock_norm=None)


def check_sync(checks, tf, np, lib, kernel_calls, reduce_op, apply_op, device, args):
    """BatchNormGradReduce and BatchNormGradApply: their sums and x_backprop
    are the training gradient's (fused_grad_reference) over the same tensors."""
    from gobn._testing import fused_grad_reference, tolerance_bound

    dev = device_type(device)
    for dtype_name, dtype, data_format, shape in cases(tf, reduce_op, dev, args):
        rng = np.random.default_rng(zlib.crc32(repr((dtype_name, data_format, shape)).encode()))
        dims, C = logical(data_format, shape), shape[2]
        with tf.device(device):
            dy = tf.constant(rng.standard_normal(dims), dtype)
            x = tf.constant(rng.standard_normal(dims) + 0.5, dtype)
            mean = tf.constant(rng.standard_normal(C) * 0.3, tf.float32)
            var = tf.constant(rng.uniform(0.5, 2.0, C), tf.float32)
            scale = tf.constant(rng.uniform(0.5, 1.5, C), tf.float32)
            want_dx, want_scale, sum_dy = fused_grad_reference(dy, x, scale, mean, var, EPSILON, True, data_format)
            sum_dy_xmu = want_scale * np.sqrt(np.float64(var.numpy()) + np.float64(np.float32(EPSILON)))
            count = int(np.prod(dims)) // C if C else 0
            for mode in modes(args):
                before = calls_on(kernel_calls, reduce_op.name, dev, mode)
                got = run(lambda **kw: getattr(lib, reduce_op.wrapper)(**kw, data_format=data_format),
                          dict(y_backprop=dy, x=x, mean=mean), mode, tf)
                ran = calls_on(kernel_calls, reduce_op.name, dev, mode) - before
                norm = max(max_error(got[0], sum_dy, tolerance_bound(sum_dy, tf.float32)),
                           max_error(got[1], sum_dy_xmu, tolerance_bound(sum_dy_xmu, tf.float32)))
                ok = norm <= 1 and int(got[2]) == count and ran >= 1
                checks.add("parity", ok, op=reduce_op.name, dtype=dtype_name, data_format=data_format,
                           mode="reduce", run=mode, shape=dims, calls=ran, gobn_norm=round(norm, 4),
                           stock_norm=None)
                if count == 0:
                    continue
                apply_in = dict(y_backprop=dy, x=x, scale=scale, mean=mean, variance=var,
                                sum_dy=tf.constant(sum_dy, tf.float32),
                                sum_dy_xmu=tf.constant(sum_dy_xmu, tf.float32),
                                count=tf.constant(count, tf.int64))
                before = calls_on(kernel_calls, apply_op.name, dev, mode)
                got = run(lambda **kw: [getattr(lib, apply_op.wrapper)(
                    **kw, epsilon=EPSILON, data_format=data_format)], apply_in, mode, tf)
                ran = calls_on(kernel_calls, apply_op.name, dev, mode) - before
                norm = max_error(got[0], want_dx, tolerance_bound(want_dx, dtype))
                checks.add("parity", norm <= 1 and ran >= 1, op=apply_op.name, dtype=dtype_name,
                           data_format=data_format, mode="apply", run=mode, shape=dims, calls=ran,
                           gobn_norm=round(norm, 4), stock_norm=None)


def fused_call_inputs(tf, rng, shape):
    """Inputs of a channels-last float32 training gradient of shape."""
    C = shape[-1]
    return dict(y_backprop=tf.constant(rng.standard_normal(shape), tf.float32),
                x=tf.constant(rng.standard_normal(shape), tf.float32),
                scale=tf.constant(rng.uniform(0.5, 1.5, C), tf.float32),
                reserve_space_1=tf.constant(rng.standard_normal(C) * 0.1, tf.float32),
                reserve_space_2=tf.constant(rng.uniform(0.5, 2.0, C), tf.float32),
                reserve_space_3=tf.zeros([]))


def check_errors(checks, tf, np, lib, kernel_calls, op, device):
    dev, gobn = device_type(device), getattr(lib, op.wrapper)
    with tf.device(device):
        good = fused_call_inputs(tf, np.random.default_rng(3), [2, 3, 3, 4])
        bad = [("scale of 3 channels", dict(good, scale=tf.ones([3]))),
               ("rank 3 x", dict(good, x=tf.ones([2, 3, 4]), y_backprop=tf.ones([2, 3, 4]))),
               ("y_backprop unlike x", dict(good, y_backprop=tf.ones([2, 3, 3, 5])))]
        first = gobn(**good, epsilon=EPSILON)[0].numpy()
        for name, inputs in bad:
            try:
                gobn(**inputs, epsilon=EPSILON)[0].numpy()
                raised = "nothing"
            except tf.errors.InvalidArgumentError:
                raised = "InvalidArgument"
            except Exception as e:  # noqa: BLE001 (the kind is the result)
                raised = type(e).__name__
            before = calls_on(kernel_calls, op.name, dev)
            again = gobn(**good, epsilon=EPSILON)[0].numpy()
            ran = calls_on(kernel_calls, op.name, dev) - before
            equal = bool(np.array_equal(again, first))
            checks.add("errors", raised == "InvalidArgument" and equal and ran == 1, case=name, raised=raised,
                       next_call_equal=equal, next_call_on_device=ran)


def check_xla(checks, tf, np, lib, gobn_package, op, device):
    """gobn's XLA handlers for the device's platform, and bad input inside an
    XLA-compiled function: an XLA error with gobn's message (Internal, with
    "CustomCall failed: ", in TensorFlow 2.17's XLA; InvalidArgument since),
    the process goes on, and the next compiled call equals the one before."""
    dev, gobn = device_type(device), getattr(lib, op.wrapper)
    status = gobn_package.xla_status()
    platform = "cuda" if dev == "GPU" else "host"
    checks.add("xla", status["handlers"][platform] == len(gobn_package.OP_NAMES), case="handlers",
               api_version=status["api_version"], library=status["library"], handlers=status["handlers"],
               reason=status["reason"])
    with tf.device(device):
        good = fused_call_inputs(tf, np.random.default_rng(13), [2, 3, 3, 4])
        spec = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in good.items()}  # shapes refined by XLA
        compiled = tf.function(lambda kw: gobn(**kw, epsilon=EPSILON)[0], input_signature=[spec], jit_compile=True)
        first = compiled(good).numpy()
        message = "scale must have the same number of elements as the channels of x, got 3 and 4"
        try:
            compiled(dict(good, scale=tf.ones([3]))).numpy()
            raised = "nothing"
        except tf.errors.OpError as e:
            raised = type(e).__name__ + (" with gobn's message" if message in e.message else ": " + e.message[:200])
        before = calls_on(gobn_package.kernel_calls, op.name, dev, "xla")
        again = compiled(good).numpy()
        ran = calls_on(gobn_package.kernel_calls, op.name, dev, "xla") - before
    equal = bool(np.array_equal(again, first))
    want = ("InternalError" if status["api_version"] == "0.0" else "InvalidArgumentError") + " with gobn's message"
    checks.add("xla", raised == want and equal and ran == 1, case="scale of 3 channels, compiled", raised=raised,
               next_call_equal=equal, next_call_on_device=ran)


def check_threads(checks, tf, np, lib, kernel_calls, op, device, threads=4, calls=8):
    dev, gobn = device_type(device), getattr(lib, op.wrapper)
    rng = np.random.default_rng(7)
    with tf.device(device):
        cases_ = [fused_call_inputs(tf, rng, [4, 14, 14, 32 + 16 * i]) for i in range(threads)]
        alone = [[t.numpy() for t in gobn(**c, epsilon=EPSILON)[:3]] for c in cases_]
        other = tf.constant(rng.standard_normal([64, 64, 64]), tf.float32)
    mismatches, errors = [], []
    stop = threading.Event()

    def caller(i):
        try:
            with tf.device(device):
                for _ in range(calls):
                    got = [t.numpy() for t in gobn(**cases_[i], epsilon=EPSILON)[:3]]
                    if not all(np.array_equal(g, w) for g, w in zip(got, alone[i])):
                        mismatches.append(i)
        except Exception as e:  # noqa: BLE001 (reported)
            errors.append(repr(e)[:300])

    def busy():
        with tf.device(device):
            y = other
            while not stop.is_set():
                y = tf.tanh(y * 0.5 + 0.1)
            y.numpy()

    before = calls_on(kernel_calls, op.name, dev)
    start = time.perf_counter()
    workers = [threading.Thread(target=caller, args=(i,)) for i in range(threads)]
    background = threading.Thread(target=busy)
    background.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    stop.set()
    background.join(timeout=60)
    hung = any(w.is_alive() for w in workers) or background.is_alive()
    ran = calls_on(kernel_calls, op.name, dev) - before
    checks.add("threads", not (mismatches or errors or hung) and ran == threads * calls, threads=threads,
               calls_each=calls, calls_on_device=ran, mismatches=len(mismatches), errors=errors[:3], hung=hung,
               seconds=round(time.perf_counter() - start, 2))


def check_enable(checks, tf, np, gobn_package, op, device):
    """Last: enable() lasts for the process. op is gobn's record of the stock
    op whose kernel enable() takes over."""
    from gobn._testing import tolerance_bound

    dev, stock = device_type(device), getattr(tf.raw_ops, op.stock)
    with tf.device(device):
        inputs = fused_call_inputs(tf, np.random.default_rng(11), [8, 10, 10, 24])
        want = [t.numpy() for t in stock(**inputs, epsilon=EPSILON)[:3]]
        gobn_package.enable()
        before = calls_on(gobn_package.kernel_calls, op.stock, dev)
        got = [t.numpy() for t in stock(**inputs, epsilon=EPSILON)[:3]]
        ran = calls_on(gobn_package.kernel_calls, op.stock, dev) - before
    norm = max(max_error(g, w, tolerance_bound(w, tf.float32)) for g, w in zip(got, want))
    checks.add("enable", ran == 1 and norm <= 1, op=op.stock, calls_on_device=ran, norm_vs_stock=round(norm, 4))


def check_stream(checks, gobn_package, device):
    """On a GPU, every gobn call so far ran on TensorFlow's stream: found,
    none fell back, none synchronized the device. (On the CPU no GPU call
    ran: nothing to check but that.)"""
    seen = gobn_package._stream_stats()
    if device_type(device) != "GPU":
        checks.add("tf_stream", seen["on_stream"] == 0 and seen["enqueued_calls"] == 0, **seen)
        return
    checks.add("tf_stream", seen["resolved"] and seen["fallbacks"] == 0 and seen["synchronized_calls"] == 0
               and seen["enqueued_calls"] > 0, **seen)


SYNC_SHAPES = [[8, 8, 8, 32], [32, 7, 7, 512], [32, 14, 14, 256], [32, 56, 56, 64]]


def time_stream(checks, tf, np, lib, gobn_package, op, device, chain=20):
    """What a call costs inside TensorFlow: gobn's kernel against stock's, per
    call, in a tf.function of chain dependent calls (each call's x_backprop is
    the next one's y_backprop) and eagerly; stock' is stock again, the noise.
    gobn runs on TensorFlow's stream, as stock's kernel does; gobn_sync is
    gobn by the synchronizing rule (drain the device before, wait after), the
    fallback, timed beside it."""
    from timing import time_interleaved

    stock, gobn = getattr(tf.raw_ops, op.stock), getattr(lib, op.wrapper)
    fns = {"stock": stock, "stock'": stock, "gobn": gobn, "gobn_sync": gobn}
    rng = np.random.default_rng(5)

    def chained(fn):
        @tf.function
        def f(kw):
            kw = dict(kw)
            for _ in range(chain):
                kw["y_backprop"] = fn(**kw, epsilon=EPSILON)[0]
            return kw["y_backprop"]
        return f

    def timed(name, run):
        if name != "gobn_sync":
            return run

        def synchronizing():
            gobn_package._set_tf_stream(False)
            try:
                run()
            finally:
                gobn_package._set_tf_stream(True)
        return synchronizing

    for shape in SYNC_SHAPES:
        with tf.device(device):
            inputs = fused_call_inputs(tf, rng, shape)
            graphs = {name: chained(fn) for name, fn in fns.items()}
            in_graph = time_interleaved([timed(n, lambda g=g: g(inputs).numpy()) for n, g in graphs.items()], reps=7)
            eager = time_interleaved([timed(n, lambda fn=fn: fn(**inputs, epsilon=EPSILON)[0].numpy())
                                      for n, fn in fns.items()], reps=7)
        us = dict(zip(fns, (t / chain * 1e6 for t in in_graph)))
        checks.measure("stream", op=op.stock, shape=shape, dtype="float", data_format="NHWC", chain=chain,
                       stock_us=round(us["stock"], 1), gobn_us=round(us["gobn"], 1),
                       noise=round(us["stock'"] / us["stock"], 3),
                       function_us={c: round(v, 1) for c, v in us.items()},
                       eager_us={c: round(t * 1e6, 1) for c, t in zip(fns, eager)})


def driver_version():
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv=None):
    args = parse_args(argv)
    setup(args.device)
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each case traces a tf.function of its own, on purpose
    import gobn as gobn_package
    from gobn._opdefs_gen import BY_KIND

    checks = Checks()
    lib = gobn_package.ops
    devices = [d.name for d in tf.config.list_logical_devices()]
    want = "/device:" + args.device.upper()
    if not any(d.upper().endswith(want.upper()) for d in devices):
        print(f"no device {args.device} here: {devices}", file=sys.stderr)
        return 2
    dev = device_type(args.device)
    if dev == "GPU":
        tf.config.set_soft_device_placement(False)  # an op without a GPU kernel fails, not moves
    ops = [op for kind in BY_KIND.values() for op in kind]
    calls, device, newest = gobn_package.kernel_calls, args.device, BY_KIND["FusedBatchNormGrad"][-1]
    checks.guard("registry", check_registry, checks, tf, ops, dev)
    check_fused(checks, tf, np, lib, calls, BY_KIND["FusedBatchNormGrad"], device, args)
    check_global_norm(checks, tf, np, lib, calls, BY_KIND["GlobalNormalizationGrad"][0], device, args)
    checks.guard("parity", check_sync, checks, tf, np, lib, calls, BY_KIND["GradReduce"][0],
                 BY_KIND["GradApply"][0], device, args, op=BY_KIND["GradReduce"][0].name)
    checks.guard("errors", check_errors, checks, tf, np, lib, calls, newest, device)
    if args.xla:
        checks.guard("xla", check_xla, checks, tf, np, lib, gobn_package, newest, device)
    checks.guard("threads", check_threads, checks, tf, np, lib, calls, newest, device)
    checks.guard("tf_stream", check_stream, checks, gobn_package, device)
    if args.timing:
        checks.guard("stream", time_stream, checks, tf, np, lib, gobn_package, newest, device)
    checks.guard("enable", check_enable, checks, tf, np, gobn_package, newest, device)

    total = sum(len(rows) for rows in checks.sections.values())
    print(f"{total - checks.failed} of {total} checks passed on {args.device}")
    if args.json:
        gpus = tf.config.list_physical_devices("GPU")
        index = int(args.device.rsplit(":", 1)[1]) if ":" in args.device else 0
        details = tf.config.experimental.get_device_details(gpus[index]) if dev == "GPU" and index < len(gpus) else {}
        build = tf.sysconfig.get_build_info()
        gpu = dict(name=details.get("device_name", args.device), compute_capability=details.get("compute_capability"),
                   driver=driver_version() if dev == "GPU" else None)
        command = " ".join([os.path.basename(sys.argv[0])] + [portable(a) for a in sys.argv[1:]])
        stream = dict(gobn_package._stream_stats(), per_call=checks.measured.pop("stream", []))
        record = dict(device=gpu, tensorflow=tf.__version__, cuda=build.get("cuda_version"),
                      cudnn=build.get("cudnn_version"), command=command, **checks.sections, **checks.measured,
                      stream=stream)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.write("\n")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
