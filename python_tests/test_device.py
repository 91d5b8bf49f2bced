"""gobn inside TensorFlow on the device --device names (CPU:0 unless told).

make test runs this file on the CPU; `make gpu-tf-check` runs it with
--device GPU:0 on a machine with TensorFlow's GPU build and an NVIDIA GPU
(docs/gpu.md), where the suite's other tests are deselected. With soft
device placement off on a GPU (an op without a kernel there fails instead of
moving) it checks:

  registry  TensorFlow's kernel registry lists a kernel of every gobn op on
            the device for each dtype opdef binds there, and, on a GPU,
            BatchNormGradReduce's and BatchNormGradApply's count in host memory
  parity    every op x dtype x data format x mode x shape of --matrix, eager,
            in a tf.function and compiled by XLA (gobn's XLA handler for the
            device's platform), within the float64 reference's tolerance
            (docs/design.md), and gobn's kernel ran on the device
            (gobn.kernel_calls(): XLA_GPU or XLA_CPU under XLA). Training's
            reserve spaces come from stock's forward on the device (on a GPU
            the inverse standard deviation: gobn._testing.fused_inputs);
            stock's error beside gobn's is recorded, not checked
  stock_forward
            stock's training forward saves as reserve_space_2 what
            fused_inputs takes it for: the variance on the CPU, the inverse
            standard deviation on a GPU
  errors    bad input gets InvalidArgument, the process goes on, and the next
            call is right and runs on the device
  xla       gobn registered an XLA handler of every op for the device's
            platform, and bad input inside a compiled function is an XLA
            error with gobn's message, the next compiled call right
  threads   several threads calling gobn at once beside other work on the
            device: each result equals the one computed alone, bit for bit,
            and every call ran on the device
  enable    in a process of its own (enable() lasts for its process):
            stock's FusedBatchNormGradV3 on the device runs gobn's kernel
            after gobn.enable() and equals stock's own result
  tf_stream on a GPU each test's gobn calls ran on TensorFlow's stream: none
            fell back to the synchronizing rule, none synchronized the device
            (docs/gpu.md; every test checks its own calls, the last the
            process's, and is skipped on the CPU); on the CPU every test
            checks that no call looked for a GPU stream

The matrix is the device's: quick on the CPU (float, a shape of each rank;
test_parity.py, test_global_norm.py, test_sync_batch_norm.py and
test_xla.py check the CPU's every case), every dtype and shape on a GPU.
--record JSON writes each test's row by section (bench/gpu_tf.json);
bench/gpu_calls.py times a call inside TensorFlow.
"""

import os
import threading
import zlib

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels as kernel_registry

import gobn as gobn_package
from gobn._opdefs_gen import BY_KIND, OPS
from gobn._testing import modes, outputs_by_name, sample, stock_op
from support import (
    CHANNELS_FIRST,
    EPSILON,
    assert_close,
    cases,
    device_type,
    dtypes_on,
    from_channels_last,
    fused_inputs,
    op_table,
    run_child_report,
    stock_forward_reserve_spaces,
    tolerance_used,
)

NEWEST = BY_KIND["FusedBatchNormGrad"][-1]  # FusedBatchNormGradV3, what Keras runs
XLA = gobn_package._xla.available()
RUNS = ("eager", "function", "xla")

# Logical channels-last shapes: small and odd ones, C = 1, an empty batch;
# the first of each rank is --matrix quick's.
SHAPES = {"small": (2, 5, 7, 3), "r1": (1, 1, 1, 1), "c33": (4, 6, 6, 33), "n0": (0, 4, 4, 8),
          "c64": (8, 14, 14, 64), "5d": (2, 3, 4, 5, 7), "5d_n0": (0, 2, 2, 2, 4)}
RESNET = {f"resnet{hw}": (32, hw, hw, c) for hw, c in ((112, 64), (56, 256), (28, 512), (14, 1024), (7, 2048))}

def matrix(config):
    """(shapes, dtypes) of --matrix on --device (dtypes None: every one opdef binds there)."""
    choice = config.getoption("matrix") or ("quick" if device_type(config.getoption("device")) == "CPU" else "default")
    if choice == "quick":
        return {"small": SHAPES["small"], "5d": SHAPES["5d"]}, ("float",)
    return ({**SHAPES, **RESNET} if choice == "full" else SHAPES), None


def matrix_cases(op, config):
    shapes, dtypes = matrix(config)
    found = cases(op, config.getoption("device"), shapes, dtypes)
    # An empty batch has nothing to apply: its reduce counted no rows.
    return [c for c in found if op.kind != "GradApply" or np.prod(c.shape) > 0]


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_parity":
        metafunc.parametrize("case", [pytest.param(c, id=c.id) for op in OPS for c in matrix_cases(op, metafunc.config)])
        metafunc.parametrize("run", RUNS)


@pytest.fixture(autouse=True)
def stream_kept(gobn, device):
    """Every test: on a GPU its gobn calls neither fell back to the
    synchronizing rule nor synchronized the device; on the CPU no gobn call
    of the process has looked for a GPU stream."""
    before = gobn_package._stream_stats()
    yield
    after = gobn_package._stream_stats()
    if device_type(device) == "GPU":
        kept = ("fallbacks", "synchronized_calls")
        assert all(after[k] == before[k] for k in kept), (before, after)
    else:
        assert after["on_stream"] == after["enqueued_calls"] == 0, after


def gpu_only(device, what):
    """Skips, saying why, a check that has nothing to see but on a GPU."""
    if device_type(device) != "GPU":
        pytest.skip(f"GPU only: {what}")


def record(record_property, **row):
    for k, v in row.items():
        record_property(k, v)


def calls_on(name, device, run=None):
    """The calls so far of gobn's kernel name on device's type; of its XLA
    handler for the device's platform in run xla."""
    return gobn_package.kernel_calls().get(name, {}).get(("XLA_" if run == "xla" else "") + device_type(device), 0)


def need_xla(device):
    """Without gobn's XLA handlers (TensorFlow before 2.17: gobn._xla) the
    XLA runs are skipped on the CPU, where test_xla.py says why too, and
    fail on a GPU: make gpu-tf-check runs on a TensorFlow that has them."""
    if XLA:
        return
    reason = f"no XLA handlers: {gobn_package.xla_status()['reason']}"
    if device_type(device) == "GPU":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def run_op(fn, inputs, run, device):
    """fn(**inputs), a dict of tensors, as numpy arrays: eagerly, in a
    tf.function or compiled by XLA."""
    if run == "xla":
        need_xla(device)
    if run == "eager":
        return {k: t.numpy() for k, t in fn(**inputs).items()}
    spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in inputs.items()}
    f = tf.function(lambda kw: fn(**kw), input_signature=[spec], jit_compile=run == "xla")
    return {k: t.numpy() for k, t in f(inputs).items()}


def run_gobn(op, fn, inputs, run, device):
    """run_op of fn, which calls gobn's op, and how many calls of op's kernel
    (or XLA handler) on device's type it made."""
    before = calls_on(op.name, device, run)
    got = run_op(fn, inputs, run, device)
    return got, calls_on(op.name, device, run) - before


def seed(case):
    return zlib.crc32(case.id.encode())


def layout(case):
    """The case's shape laid out as its data format."""
    shape = case.shape
    return list(shape[:1] + shape[-1:] + shape[1:-1]) if case.data_format in CHANNELS_FIRST else list(shape)


# ---------------------------------------------------------------------------


@pytest.mark.section("registry")
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name.split(">")[-1])
def test_registry(gobn, device, op, record_property):
    got, host = set(), set()
    for kernel in kernel_registry.get_registered_kernels_for_op(op.name).kernel:
        if kernel.device_type == device_type(device):
            got.update(tf.as_dtype(c.allowed_values.list.type[0]).name for c in kernel.constraint if c.name == "T")
            host.update(kernel.host_memory_arg)
    want = {tf.as_dtype(name).name for name in dtypes_on(op, device)}
    # count lives in host memory on a GPU (on the CPU everything does)
    want_host = {"count"} if device_type(device) == "GPU" and "count" in op.inputs + op.outputs else set()
    record(record_property, op=op.name, dtypes=sorted(got), host_memory=sorted(host))
    assert got == want
    assert host == want_host


def test_matrix_covers_every_op(request):
    """Every op gobn registers has parity cases on the device in each of its
    modes (test_parity runs each in every run), and its kind a sample builder."""
    assert sorted(op.name for op in OPS) == sorted(gobn_package.OP_NAMES)
    for op, row in zip(OPS, op_table(), strict=True):
        assert list(modes(op)) == row["modes"], row["name"]
        assert sorted({c.mode for c in matrix_cases(op, request.config)}) == sorted(row["modes"]), op.name


def test_device_type_of_every_spelling():
    """--device as a user may spell it (conftest.device_name takes any case)
    picks the device's dtypes: a GPU's global-normalization cases have no
    double, which TensorFlow has no GPU kernel of."""
    spellings = {"GPU:0": "GPU", "gpu:0": "GPU", "/device:GPU:0": "GPU", "/DEVICE:GPU:0": "GPU", "/GPU:0": "GPU",
                 "/job:localhost/replica:0/task:0/DEVICE:GPU:0": "GPU", "/device:CPU:0": "CPU", "CPU:0": "CPU"}
    assert {name: device_type(name) for name in spellings} == spellings
    [op] = BY_KIND["GlobalNormalizationGrad"]
    shapes = {"small": SHAPES["small"]}
    assert {c.dtype.name for c in cases(op, "/DEVICE:GPU:0", shapes)} == {"float16", "float32"}
    assert "float64" in {c.dtype.name for c in cases(op, "/device:cpu:0", shapes)}


@pytest.mark.section("parity")
def test_parity(gobn, device, case, run, record_property):
    """The case's op (gobn._testing.sample: its inputs, attrs and expected
    outputs) within each output's tolerance of the float64 reference, and
    its kernel ran on the device; stock's twin, where it has one, beside it."""
    op, made = case.op, sample(case, seed(case), device)
    names = list(made.expected)
    ours = getattr(gobn, op.wrapper)
    stock_error = theirs = None
    with tf.device(device):
        got, ran = run_gobn(op, lambda **kw: outputs_by_name(op, ours(**kw, **made.attrs), names), made.inputs, run,
                            device)
        if made.stock:
            stock = stock_op(made.stock)
            try:
                theirs = run_op(lambda **kw: outputs_by_name(op, stock(**kw, **made.attrs), names), made.inputs, run,
                                device)
            except tf.errors.OpError as e:  # stock has no kernel for it here (the CPU's channels-first inference)
                stock_error = f"{type(e).__name__}: {' '.join(e.message.split())[:200]}"

    def norm(outputs):
        return round(max(tolerance_used(outputs[k], w, t) for k, (w, t) in made.expected.items()), 4)

    record(record_property, op=op.name, dtype=case.dtype.name, data_format=case.data_format, mode=case.mode,
           shape=layout(case), run=run, calls=ran, gobn_norm=norm(got),
           stock_norm=None if theirs is None else norm(theirs), stock_error=stock_error)
    assert ran >= 1, f"gobn's kernel did not run on {device}"
    for name, (want, dtype) in made.expected.items():
        assert_close(got[name], want, dtype, f"{name} vs float64 reference")


@pytest.mark.section("stock_forward")
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_stock_forward_reserve_space_2(device, data_format, record_property):
    """What fused_inputs builds training's cases on: stock's training forward
    saves as reserve_space_2 the biased batch variance on the CPU and
    1/sqrt(variance + epsilon) on a GPU, which its gradient reads so."""
    rng = np.random.default_rng(17)
    x = (rng.standard_normal((4, 5, 6, 8)) * 1.5 + rng.uniform(-1.0, 1.0, 8)).astype(np.float32)
    with tf.device(device):
        _, saved, _ = stock_forward_reserve_spaces(tf.constant(from_channels_last(x, data_format)), tf.ones([8]),
                                                   tf.zeros([8]), EPSILON, data_format)
    variance = x.astype(np.float64).var(axis=(0, 1, 2))
    gpu = device_type(device) == "GPU"
    want = 1.0 / np.sqrt(variance + np.float64(np.float32(EPSILON))) if gpu else variance
    record(record_property, case="stock's reserve_space_2", data_format=data_format,
           holds="inverse standard deviation" if gpu else "variance")
    assert_close(saved, want, tf.float32, "stock's reserve_space_2")


# ---------------------------------------------------------------------------


def good_inputs(device, shape=(2, 3, 3, 4), seed=3):
    """A float32 NHWC training gradient's inputs on device."""
    made = fused_inputs(NEWEST, tf.float32, "NHWC", True, shape, seed, device)
    return made.inputs, made.attrs


BAD = {
    "scale of 3 channels": lambda good: dict(good, scale=tf.ones([3])),
    "rank 3 x": lambda good: dict(good, x=tf.ones([2, 3, 4]), y_backprop=tf.ones([2, 3, 4])),
    "y_backprop unlike x": lambda good: dict(good, y_backprop=tf.ones([2, 3, 3, 5])),
}


@pytest.mark.section("errors")
@pytest.mark.parametrize("bad", list(BAD))
def test_bad_input(gobn, device, bad, record_property):
    ours = getattr(gobn, NEWEST.wrapper)
    good, attrs = good_inputs(device)
    with tf.device(device):
        first = ours(**good, **attrs)[0].numpy()
        with pytest.raises(tf.errors.InvalidArgumentError):
            ours(**BAD[bad](good), **attrs)[0].numpy()
        before = calls_on(NEWEST.name, device)
        again = ours(**good, **attrs)[0].numpy()
        ran = calls_on(NEWEST.name, device) - before
    record(record_property, case=bad, next_call_on_device=ran, next_call_equal=bool(np.array_equal(again, first)))
    assert ran == 1
    np.testing.assert_array_equal(again, first)


@pytest.mark.section("xla")
def test_xla_handlers(gobn, device, record_property):
    status = gobn_package.xla_status()
    record(record_property, case="handlers", api_version=status["api_version"], library=status["library"],
           handlers=status["handlers"], reason=status["reason"])
    need_xla(device)
    assert status["handlers"]["cuda" if device_type(device) == "GPU" else "host"] == len(gobn_package.OP_NAMES)


@pytest.mark.section("xla")
def test_xla_bad_input(gobn, device, record_property):
    """Bad input inside an XLA-compiled function: an XLA error with gobn's
    message (Internal, with "CustomCall failed: ", in TensorFlow 2.17's XLA;
    InvalidArgument since), the process goes on, and the next compiled call
    equals the one before."""
    need_xla(device)
    ours = getattr(gobn, NEWEST.wrapper)
    good, attrs = good_inputs(device, seed=13)
    spec = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in good.items()}  # shapes refined by XLA
    compiled = tf.function(lambda kw: ours(**kw, **attrs)[0], input_signature=[spec], jit_compile=True)
    message = "scale must have the same number of elements as the channels of x, got 3 and 4"
    want = tf.errors.InternalError if gobn_package.xla_status()["api_version"] == "0.0" else \
        tf.errors.InvalidArgumentError
    with tf.device(device):
        first = compiled(good).numpy()
        with pytest.raises(want, match=message):
            compiled(dict(good, scale=tf.ones([3]))).numpy()
        before = calls_on(NEWEST.name, device, "xla")
        again = compiled(good).numpy()
        ran = calls_on(NEWEST.name, device, "xla") - before
    record(record_property, case="scale of 3 channels, compiled", next_call_on_device=ran,
           next_call_equal=bool(np.array_equal(again, first)))
    assert ran == 1
    np.testing.assert_array_equal(again, first)


@pytest.mark.section("threads")
def test_threads(gobn, device, record_property, threads=4, calls=8):
    """Threads calling gobn at once beside other work on the device: each
    result is the one computed alone, bit for bit, and every call ran there."""
    ours = getattr(gobn, NEWEST.wrapper)
    work = [good_inputs(device, (4, 14, 14, 32 + 16 * i), seed=7 + i) for i in range(threads)]
    with tf.device(device):
        alone = [[t.numpy() for t in ours(**inputs, **attrs)[:3]] for inputs, attrs in work]
        other = tf.constant(np.random.default_rng(7).standard_normal([64, 64, 64]), tf.float32)
    mismatches, errors = [], []
    stop = threading.Event()

    def caller(i):
        try:
            with tf.device(device):
                for _ in range(calls):
                    got = [t.numpy() for t in ours(**work[i][0], **work[i][1])[:3]]
                    if not all(np.array_equal(g, w) for g, w in zip(got, alone[i])):
                        mismatches.append(i)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e)[:300])

    def busy():
        with tf.device(device):
            y = other
            while not stop.is_set():
                y = tf.tanh(y * 0.5 + 0.1)
            y.numpy()

    before = calls_on(NEWEST.name, device)
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
    ran = calls_on(NEWEST.name, device) - before
    record(record_property, threads=threads, calls_each=calls, calls_on_device=ran, mismatches=len(mismatches),
           errors=errors[:3], hung=hung)
    assert not hung and not errors, errors
    assert not mismatches, f"results of threads {sorted(set(mismatches))} differ from the ones computed alone"
    assert ran == threads * calls


@pytest.mark.section("enable")
def test_enable(gobn, device, record_property):
    """After gobn.enable(), stock's FusedBatchNormGradV3 on the device runs
    gobn's kernel and equals stock's own result (enable_device_child.py)."""
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enable_device_child.py")
    report = run_child_report(child, device)
    record(record_property, op=NEWEST.stock, calls_on_device=report["calls_on_device"],
           norm_vs_stock=round(report["norm_vs_stock"], 4))
    assert report["calls_on_device"] == 1
    assert report["norm_vs_stock"] <= 1
    if device_type(device) == "GPU":
        stream = report["stream"]
        # the call ran on TensorFlow's stream: found, enqueued, neither falling back nor synchronizing
        assert stream["resolved"] and stream["enqueued_calls"] >= 1, stream
        assert stream["fallbacks"] == stream["synchronized_calls"] == 0, stream


@pytest.mark.section("tf_stream")
def test_every_call_ran_on_tensorflows_stream(gobn, device, record_property):
    """Last: every gobn call of the process so far (this test makes one more)
    ran on TensorFlow's own stream on the GPU, found, none falling back to
    the synchronizing rule and none synchronizing the device."""
    gpu_only(device, "the CPU has no stream; there stream_kept checks that no call looked for one")
    good, attrs = good_inputs(device)
    with tf.device(device):
        getattr(gobn, NEWEST.wrapper)(**good, **attrs)[0].numpy()
    seen = gobn_package._stream_stats()
    record(record_property, **seen)
    assert seen["resolved"] and seen["enqueued_calls"] > 0, seen
    assert seen["fallbacks"] == 0 and seen["synchronized_calls"] == 0, seen
