"""gobn.enable(): gobn's kernels for stock TensorFlow's own batch-norm gradient ops.

The library registers them (capi's gobnEnable) under the stock ops' names;
with oneDNN on, gobn._stock_gradients also points the forward ops' gradient
functions at Gobn> ops, which oneDNN's rewrite leaves alone. Keras 3's
BatchNormalization runs none of those ops: gobn.keras gives its class gobn's
layer's call.
"""

import ctypes
import importlib.util

import tensorflow as tf

from gobn import _fusion, _library
from gobn._opdefs_gen import BY_STOCK_NAME, OP_NAMES

# The stock ops gobn.enable() gives gobn's kernels: each Gobn> op's twin.
STOCK_OPS = tuple(BY_STOCK_NAME)

_enabled = None  # enable()'s report, once it has run: it lasts for the process


def enable(fuse_activations=None):
    """Runs stock TensorFlow's batch-norm gradients on gobn's kernels.

    Add ``gobn.enable()`` at the top of a training script, before the model
    is traced: unmodified models (Keras 3, tf_keras, ``tf.compat.v1``
    layers, ``tf.compat.v1.nn.fused_batch_norm``) then compute their
    batch-norm gradients on gobn, on every configuration.

    - It registers gobn's kernels under the names of stock's
      FusedBatchNormGrad, FusedBatchNormGradV2, FusedBatchNormGradV3,
      BatchNormWithGlobalNormalizationGrad and _FusedBatchNormGradEx (which
      grappler makes of a batch norm's and its ReLU's gradients on a GPU),
      for every dtype gobn has kernels for, on the CPU and (in a library
      built with the CUDA path) the GPU, with a kernel priority above
      stock's: TensorFlow picks gobn's kernel wherever it would have picked
      stock's, even for graphs built before.
    - It gives the forward ops (FusedBatchNorm, V2, V3) gradient functions
      of gobn's, which fuse a ReLU's or ReLU6's gradient that follows a
      batch norm into one Gobn>FusedBatchNormGradEx (gobn._fusion) with
      oneDNN on or off, and under XLA; where there is nothing to fuse, they
      are stock's with oneDNN off (whose gradient ops run gobn's kernels),
      and build Gobn> ops with oneDNN on (below).
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
    - Keras 3's ``keras.layers.BatchNormalization`` computes batch norm from
      moments and elementwise ops, which no kernel reaches, so enable()
      replaces the class's ``call`` with ``gobn.keras.BatchNormalization``'s
      for the process (gobn.keras): every layer of the stock class, made
      before or after, computes what ``gobn.keras.convert`` would make it
      compute (stock's FusedBatchNormV3 forward, ``Gobn>FusedBatchNormGradV3``
      backward), falls back to the stock code where gobn's layer does (a
      mask, renorm, float64), and keeps its class and config, so its
      ``.keras`` files and SavedModels stay stock's. Under XLA it is a call
      of gobn's handler where gobn runs inside XLA, stock's code elsewhere.
      Subclasses other than gobn's keep their own code.
    - It is opt-in (loading the library changes nothing) and idempotent.
      TensorFlow cannot unregister a kernel, so it lasts for the process,
      as does Keras' layer's call.
    - It clears the eager kernel cache, so eager ops already run pick gobn's
      kernels at their next run; a tf.function already traced keeps what it
      was traced with until it is traced again (a Keras model that has run
      ``fit`` already: until ``model.compile`` again).
    - Kernel priority also orders devices: gobn registers the same priority
      on every device type it has kernels for, so placement is stock's. A
      library built without the CUDA path (GOBN_CUDA=0) would move the ops
      to the CPU on a GPU machine, so there it refuses.

    ``gobn.kernel_calls()`` counts what ran: stock's names for the kernels
    registered under them, ``Gobn>`` names for gobn's own ops.

    Args:
      fuse_activations: whether gradients built from now on fuse a ReLU's
        gradient into the batch norm's (gobn._fusion), for the process;
        None (the default) leaves it as it was: on, unless the environment
        says GOBN_FUSE_ACTIVATIONS=0.

    Returns:
      {stock op: {device type: [dtypes of T]}}: the kernels registered under
      stock's names.

    Raises:
      RuntimeError: when the library has no GPU kernels but TensorFlow sees
        a GPU, or the registration failed.
    """
    global _enabled
    if fuse_activations is not None:
        _fusion.set_on(fuse_activations)
    if _enabled is not None:
        return _enabled
    lib = _library.loaded()
    from tensorflow.python.framework import kernels as kernel_registry

    has_gpu_kernels = any(k.device_type == "GPU" for name in OP_NAMES
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
    if importlib.util.find_spec("keras") is not None:
        from gobn import keras as gobn_keras

        gobn_keras._enable_stock_layers()
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
