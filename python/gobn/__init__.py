"""gobn: TensorFlow's batch-normalization gradients in Go, for Python users.

``import gobn`` registers gradients and gives:

- ``gobn.ops``: the op module of ``libgobn.so`` (``gobn_fused_batch_norm_grad_v3``,
  ``gobn_batch_norm_grad_reduce``, ...), loaded on first use;
- ``gobn.fused_batch_norm``: ``tf.compat.v1.nn.fused_batch_norm`` whose gradient
  runs on gobn's kernels;
- ``gobn.sync_batch_norm``: training-mode batch norm with statistics over
  every replica of a ``tf.distribute`` strategy, whose gradient runs on
  ``Gobn>BatchNormGradReduce``, an all-reduce and ``Gobn>BatchNormGradApply``;
- ``gobn.keras.BatchNormalization`` and ``gobn.keras.SyncBatchNormalization``:
  Keras layers whose backward pass runs on gobn (registered with Keras by
  ``import gobn``, so ``.keras`` files holding them load), ``gobn.keras.convert``
  and ``gobn.keras.to_stock``;
- ``gobn.enable()``: gobn's kernels for stock TensorFlow's own gradient ops,
  so that unmodified models run them; ``gobn.kernel_calls()`` counts what ran.

All of them work inside XLA-compiled functions (``jit_compile``, Keras'
default on a GPU) from TensorFlow 2.17 on, where gobn's ops become calls of
its XLA handlers (see ``gobn._xla``); ``gobn.xla_status()`` says what the
library registered with XLA.

One copy of libgobn.so serves the process: gobn uses the copy the process
has loaded already, if any, else loads it from ``$GOBN_LIBRARY`` (when set,
only there), from beside this package (where the wheel installs it), or from
``build/libgobn.so`` of the checkout this package sits in (see gobn._library).

Importing gobn also registers second-order gradients for the ``Gobn>`` ops
(see ``gobn._gradients``), so double backprop through them works.

SavedModels of gobn's layers and of ``gobn.fused_batch_norm`` hold stock ops
only: they load, serve and convert to TFLite without gobn (see gobn._saving).
"""

import collections
import importlib.util

import tensorflow as tf

from gobn import _supported

_supported.check_tensorflow(tf.__version__)

from gobn import _gradients  # noqa: E402,F401  (registers the Gobn> gradients)
from gobn import _library  # noqa: E402
from gobn import _opdefs_gen as _opdefs  # noqa: E402
from gobn import _saving  # noqa: E402
from gobn import _xla  # noqa: E402

__all__ = ["FusedBatchNormOutput", "SyncBatchNormOutput", "enable", "fused_batch_norm", "kernel_calls", "keras",
           "library_path", "load_library", "ops", "sync_batch_norm", "xla_status"]

OP_NAMES = _opdefs.OP_NAMES
ENV_VAR = _library.ENV_VAR


def library_path():
    """The file of the libgobn.so this process has loaded, else the one gobn would load.

    gobn uses a copy the process has loaded already, however it was loaded
    (``tf.load_op_library``, another package); else it looks at
    ``$GOBN_LIBRARY`` (when set, only there), beside the package (an
    installed wheel), and at the checkout's ``build/libgobn.so``.

    Raises:
      FileNotFoundError: nothing is loaded and no candidate exists; the
        message lists every path tried.
    """
    return _library.path()


def load_library(path=None):
    """Loads libgobn.so once per process and returns its op module.

    When the process has a copy loaded already (``tf.load_op_library``), the
    module is made from that copy's ops and nothing is loaded again. path
    (else ``$GOBN_LIBRARY``) names the file to load; a copy loaded from
    another file is refused with an ImportError naming both, since two
    copies of gobn cannot share a process. Its op wrappers build calls of
    gobn's XLA handlers where XLA will compile them (gobn._xla).
    """
    return _xla.ops_module(_library.load(path))


def __getattr__(name):
    if name == "ops":
        return load_library()
    if name == "keras":
        return importlib.import_module("gobn.keras")
    raise AttributeError(f"module 'gobn' has no attribute {name!r}")


# The stock ops gobn.enable() gives gobn's kernels: each Gobn> op's twin.
STOCK_OPS = tuple(_opdefs.BY_STOCK_NAME)


def kernel_calls():
    """Compute calls of gobn's kernels since the library was loaded.

    Returns:
      {registered op name: {"CPU": n, "GPU": n}} for every kernel that ran:
      "Gobn>FusedBatchNormGradV3" for gobn's own ops, "FusedBatchNormGradV3"
      for the kernels gobn.enable() registered under stock's names; "XLA_CPU"
      and "XLA_GPU" count the op's calls inside XLA-compiled functions (every
      route's, enable()'s included, runs gobn's own op there). It is how to
      tell that gobn's kernels, not stock's or XLA's, computed a gradient.
    """
    return _library.json_export("gobnKernelCalls", "its kernel calls")


def xla_status():
    """What gobn can do inside XLA-compiled functions in this process.

    Returns:
      {"api_version": XLA FFI's version ("0.2"), or None where TensorFlow
      has no XLA FFI (before 2.17); "library": the TensorFlow library that
      has it; "handlers": {"host": n, "cuda": n}, gobn's handlers registered
      for XLA's CPU and CUDA platforms (one per op); "reason": why some or
      all are missing, or ""; "fallbacks": how many gobn ops were built for
      XLA as Gobn> ops instead (XLA cannot compile those; said once, with
      a RuntimeWarning)}.
    """
    return _xla.status()


def _stream_stats():
    """How gobn's GPU calls have run since the library was loaded: on
    TensorFlow's (or XLA's) stream ("on_stream") or by the synchronizing
    rule ("fallbacks", with "first_fallback" saying why), and the
    device-level counts ("synchronized_calls", "enqueued_calls") (capi's
    gobnStreamStats), for the GPU check and the benchmarks."""
    return _library.json_export("gobnStreamStats", "how its GPU calls ran")


def _set_tf_stream(on):
    """Runs the GPU calls that follow on TensorFlow's stream (True, the
    default) or by the synchronizing rule (False); returns the previous
    setting. For benchmarks that time both in one process."""
    import ctypes

    fn = _library.loaded().gobnSetTFStream
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
    return bool(fn(1 if on else 0))


_enabled = None


def enable():
    """Runs stock TensorFlow's batch-norm gradients on gobn's kernels.

    Add ``gobn.enable()`` at the top of a training script, before the model
    is built or traced: unmodified models (tf_keras, ``tf.compat.v1``
    layers, ``tf.compat.v1.nn.fused_batch_norm``) then compute their
    batch-norm gradients on gobn, on every configuration.

    - It registers gobn's kernels under the names of stock's
      FusedBatchNormGrad, FusedBatchNormGradV2, FusedBatchNormGradV3 and
      BatchNormWithGlobalNormalizationGrad, for every dtype gobn has kernels
      for, on the CPU and (in a library built with the CUDA path) the GPU,
      with a kernel priority above stock's: TensorFlow picks gobn's kernel
      wherever it would have picked stock's, even for graphs built before.
    - With oneDNN on (TensorFlow's default on CPUs with AVX512_VNNI or AMX),
      TensorFlow rewrites those gradient ops to its own ``_MklNative`` ops
      before it picks a kernel, so enable() also makes the gradients of the
      forward ops (FusedBatchNorm, V2, V3) ``Gobn>`` ops, which the rewrite
      leaves alone (gobn._stock_gradients): the gradients of graphs built,
      tapes run and functions traced after enable() run on gobn, while
      convolutions and the forward pass stay on oneDNN. A stock gradient op
      called directly (``tf.raw_ops.FusedBatchNormGradV3``) stays oneDNN's
      there.
    - Under XLA (``jit_compile``), those gradients are ``Gobn>`` ops too,
      which XLA runs as calls of gobn's handlers (gobn._xla), with oneDNN on
      or off; a stock gradient op called directly is XLA's own. Before
      TensorFlow 2.17, XLA compiles stock's gradient, as it did before.
    - It is opt-in (loading the library changes nothing) and idempotent.
      TensorFlow cannot unregister a kernel, so it lasts for the process.
    - It clears the eager kernel cache, so eager ops already run pick gobn's
      kernels at their next run; a tf.function already traced keeps what it
      was traced with until it is traced again.
    - Kernel priority also orders devices: gobn registers the same priority
      on every device type it has kernels for, so placement is stock's. A
      library built without the CUDA path (GOBN_CUDA=0) would move the ops
      to the CPU on a GPU machine, so there it refuses.

    ``gobn.kernel_calls()`` counts what ran: stock's names for the kernels
    registered under them, ``Gobn>`` names for gobn's own ops.

    Returns:
      {stock op: {device type: [dtypes of T]}}: the kernels registered under
      stock's names.

    Raises:
      RuntimeError: when the library has no GPU kernels but TensorFlow sees
        a GPU, or the registration failed.
    """
    global _enabled
    import ctypes

    if _enabled is not None:
        return _enabled
    lib = _library.loaded()
    from tensorflow.python.framework import kernels as kernel_registry

    has_gpu_kernels = any(k.device_type == "GPU" for name in _opdefs.OP_NAMES
                          for k in kernel_registry.get_registered_kernels_for_op(name).kernel)
    if not has_gpu_kernels and tf.config.list_physical_devices("GPU"):
        raise RuntimeError(
            "gobn.enable: this libgobn.so was built without the CUDA path (make GOBN_CUDA=0), and TensorFlow "
            "sees a GPU: registering CPU kernels above stock's would move the batch-norm gradients off the "
            "GPU. Rebuild with `make` to enable gobn here.")
    msg = ctypes.c_void_p()
    lib.gobnEnable.restype = ctypes.c_int
    n = lib.gobnEnable(ctypes.byref(msg))
    if n < 0:
        raise RuntimeError(_library._take_string(msg.value) or "gobn.enable: registration failed")
    from tensorflow.python.eager import context
    from tensorflow.python.util import _pywrap_util_port

    context.context().clear_kernel_cache()
    from gobn import _stock_gradients

    _stock_gradients.install(onednn=_pywrap_util_port.IsMklEnabled())
    report = {}
    for op in STOCK_OPS:
        for k in kernel_registry.get_registered_kernels_for_op(op).kernel:
            if k.priority < 1:
                continue
            types = [tf.dtypes.as_dtype(c.allowed_values.list.type[0]).name for c in k.constraint if c.name == "T"]
            report.setdefault(op, {}).setdefault(k.device_type, []).extend(types)
    for devices in report.values():
        for device in devices:
            devices[device] = sorted(devices[device])
    _enabled = report
    return report


def _format(data_format):
    return data_format.decode() if isinstance(data_format, bytes) else data_format


# What fused_batch_norm returns: tf.compat.v1.nn.fused_batch_norm's outputs,
# batch_variance Bessel-corrected as stock's.
FusedBatchNormOutput = collections.namedtuple("FusedBatchNormOutput", "y batch_mean batch_variance")

# What sync_batch_norm returns: the global batch's mean and its biased variance.
SyncBatchNormOutput = collections.namedtuple("SyncBatchNormOutput", "y mean biased_variance")


@tf.autograph.experimental.do_not_convert
def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0):
    """tf.compat.v1.nn.fused_batch_norm whose gradient runs on gobn.

    The forward pass is stock FusedBatchNormV3; the gradient with respect to
    x, scale and offset is Gobn>FusedBatchNormGradV3 with the forward's
    reserve spaces (training) or mean and variance (inference), exactly
    where stock's gradient uses FusedBatchNormGradV3. As in stock, mean and
    variance get no gradient, nor do the batch_mean and batch_variance
    outputs pass one back. Second-order gradients work (gobn registers them).

    Returns:
      FusedBatchNormOutput(y, batch_mean, batch_variance), the outputs of
      tf.compat.v1.nn.fused_batch_norm: batch_variance is Bessel-corrected
      (the sum of squares over R−1), as stock's is; with
      exponential_avg_factor != 1 both are the running averages. (The biased
      variance is batch_variance·(R−1)/R, R the elements per channel;
      sync_batch_norm returns that one, and says so by its field's name.)
    """
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError("Both `mean` and `variance` must be a 1D tensor when `is_training` is False or "
                         f"`exponential_avg_factor` != 1.0. Received: `mean` {mean!r} and `variance` {variance!r}")
    with tf.name_scope(name or "GobnFusedBatchNorm"):
        x = tf.convert_to_tensor(x, name="input")
        scale = tf.convert_to_tensor(scale, name="scale")
        offset = tf.convert_to_tensor(offset, name="offset")
        mean = tf.constant([], tf.float32) if mean is None else tf.convert_to_tensor(mean, tf.float32)
        variance = tf.constant([], tf.float32) if variance is None else tf.convert_to_tensor(variance, tf.float32)
        return FusedBatchNormOutput(*_fused_batch_norm(
            x, scale, offset, mean, variance, float(epsilon), _format(data_format), bool(is_training),
            float(exponential_avg_factor)))


def _fused_batch_norm(x, scale, offset, mean, variance, epsilon, data_format, is_training, factor):
    @tf.custom_gradient
    def forward(x, scale, offset, mean, variance):
        xla = _xla.in_xla_context()  # then the gradient is compiled too (gobn._xla)
        out = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
            exponential_avg_factor=factor, data_format=data_format, is_training=is_training)

        def grad(dy, _batch_mean_grad, _batch_variance_grad):
            # As stock's _FusedBatchNormV3Grad: the reserve spaces in
            # training, the population statistics in inference.
            saved_mean, saved_variance = (out.reserve_space_1, out.reserve_space_2) if is_training else (mean, variance)
            if _saving.saving():  # traced for a SavedModel: stock's op, which loads without gobn
                dx, dscale, doffset = _saving.stock_fused_grad(
                    dy, x, scale, saved_mean, saved_variance, out.reserve_space_3, epsilon, data_format, is_training)
                return dx, dscale, doffset, None, None
            dx, dscale, doffset, _, _ = _xla.call(
                "Gobn>FusedBatchNormGradV3", xla, y_backprop=dy, x=x, scale=scale, reserve_space_1=saved_mean,
                reserve_space_2=saved_variance, reserve_space_3=out.reserve_space_3, epsilon=epsilon,
                data_format=data_format, is_training=is_training)
            return dx, dscale, doffset, None, None

        return (out.y, out.batch_mean, out.batch_variance), grad

    return forward(x, scale, offset, mean, variance)


def _layout(x, data_format):
    """(channel axis, reduction axes) of a rank-4 or rank-5 activation tensor."""
    rank = x.shape.rank
    if rank not in (4, 5):
        raise ValueError(f"gobn: x must be 4 or 5-dimensional with a known rank, got shape {x.shape}")
    axis = 1 if data_format in _opdefs.CHANNELS_FIRST else rank - 1
    return axis, [i for i in range(rank) if i != axis]


@tf.autograph.experimental.do_not_convert
def sync_batch_norm(x, scale, offset, epsilon=0.001, data_format="NHWC", replica_context=None, name=None):
    """Training-mode batch norm with the statistics of every replica's batch.

    Synchronized batch norm: the mean and (biased) variance are taken over
    the concatenation of all replicas' x, by all-reducing per-channel sums
    (first Σx and the count, then Σ(x−μ)², which stays accurate where
    E[x²]−μ² would not). y = scale·(x−μ)/sqrt(σ²+ε) + offset is stock
    FusedBatchNormV3 in inference mode on those statistics.

    The gradient is gobn's: per replica, Gobn>BatchNormGradReduce gives
    Σdy and Σdy·(x−μ); they are all-reduced (one collective: the global
    element count n is the forward pass's); then Gobn>BatchNormGradApply gives

        x_backprop = scale·c·(dy − Σdy/n − (x−μ)·c²·Σdy·(x−μ)/n),  c = 1/sqrt(σ²+ε)

    with the global sums and count n: the gradient of the sum of every
    replica's loss with respect to this replica's x. scale and offset get
    this replica's c·Σdy·(x−μ) and Σdy, which the strategy sums across
    replicas as it does every other gradient.

    Call it in a replica context (inside strategy.run, or a Keras layer's
    call under a strategy); replica_context defaults to
    tf.distribute.get_replica_context(). With one replica it is plain batch
    norm.

    Returns:
      SyncBatchNormOutput(y, mean, biased_variance): the global batch's mean
      and biased variance (the sum of squares over n, as the normalization
      uses it, where fused_batch_norm's batch_variance is Bessel-corrected),
      the same on every replica (as float32).
    """
    ctx = replica_context or tf.distribute.get_replica_context()
    if ctx is None:
        raise ValueError("gobn.sync_batch_norm must run in a replica context (e.g. inside strategy.run)")
    data_format = _format(data_format)
    with tf.name_scope(name or "GobnSyncBatchNorm"):
        x = tf.convert_to_tensor(x, name="input")
        scale = tf.convert_to_tensor(scale, tf.float32, name="scale")
        offset = tf.convert_to_tensor(offset, tf.float32, name="offset")
        axis, axes = _layout(x, data_format)
        shape = [1] * x.shape.rank
        shape[axis] = -1

        def per_channel(v):
            return tf.reshape(v, shape)

        @tf.custom_gradient
        def forward(x, scale, offset):
            xla = _xla.in_xla_context()  # then the gradient is compiled too (gobn._xla)
            x32 = tf.cast(x, tf.float32)
            # One all-reduce for Σx and the element count, packed in float64
            # (exact for counts up to 2^53).
            local_count = tf.reduce_prod(tf.gather(tf.shape(x, out_type=tf.int64), axes))
            packed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat(
                [tf.cast(tf.reduce_sum(x32, axes), tf.float64), tf.cast(local_count, tf.float64)[None]], 0))
            count = tf.cast(packed[-1], tf.int64)
            mean = tf.cast(tf.math.divide_no_nan(packed[:-1], packed[-1]), tf.float32)
            squares = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                     tf.reduce_sum(tf.math.squared_difference(x32, per_channel(mean)), axes))
            variance = tf.math.divide_no_nan(squares, tf.cast(count, tf.float32))
            y = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
                data_format=data_format, is_training=False).y

            def grad(dy, _mean_grad, _variance_grad):
                # The global count is the forward's: one all-reduce (of the
                # two sums) is all the backward pass needs.
                sum_dy, sum_dy_xmu, _ = _xla.call("Gobn>BatchNormGradReduce", xla, y_backprop=dy, x=x, mean=mean,
                                                  data_format=data_format)
                global_dy, global_dy_xmu = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [sum_dy, sum_dy_xmu])
                dx = _xla.call("Gobn>BatchNormGradApply", xla, y_backprop=dy, x=x, scale=scale, mean=mean,
                               variance=variance, sum_dy=global_dy, sum_dy_xmu=global_dy_xmu, count=count,
                               epsilon=epsilon, data_format=data_format)
                return dx, sum_dy_xmu * tf.math.rsqrt(variance + epsilon), sum_dy

            return (y, mean, variance), grad

        return SyncBatchNormOutput(*forward(x, scale, offset))


# Keras finds a layer of a .keras file by the name its class registered
# (gobn>BatchNormalization): importing gobn.keras here lets `import gobn` alone
# load files that hold gobn's layers. Keras comes with TensorFlow's wheel;
# without it, gobn.keras is the one thing missing.
if importlib.util.find_spec("keras") is not None:
    from gobn import keras  # noqa: E402
