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
  and gobn's layer's call for Keras 3's ``keras.layers.BatchNormalization``,
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
(each kind's, see ``gobn._kinds``), so double backprop through them works.

SavedModels of gobn's layers and of ``gobn.fused_batch_norm`` hold stock ops
only: they load, serve and convert to TFLite without gobn (see gobn._saving).

This module is the facade: the functions live in gobn._functional
(fused_batch_norm, sync_batch_norm), gobn._enable (enable), gobn._library
(library_path, kernel_calls) and gobn._xla (load_library, xla_status).
"""

import importlib
import importlib.util

import tensorflow as tf

from gobn import _supported

# First: the modules below use TensorFlow's private APIs, which an
# unsupported release may lack; this names the release instead.
_supported.check_tensorflow(tf.__version__)

from gobn import _kinds  # noqa: E402,F401  (registers the Gobn> gradients and pfor converters)
from gobn import _library  # noqa: E402
from gobn._enable import enable  # noqa: E402
from gobn._functional import FusedBatchNormOutput, SyncBatchNormOutput, fused_batch_norm, sync_batch_norm  # noqa: E402
from gobn._library import kernel_calls, library_path  # noqa: E402
from gobn._xla import load_library  # noqa: E402
from gobn._xla import status as xla_status  # noqa: E402

# Beyond __all__: the constants tests and tools read, and the private
# helpers the GPU check and the benchmarks call.
from gobn._enable import STOCK_OPS  # noqa: E402,F401
from gobn._functional import _fused_batch_norm  # noqa: E402,F401
from gobn._library import ENV_VAR  # noqa: E402,F401
from gobn._library import set_tf_stream as _set_tf_stream  # noqa: E402,F401
from gobn._library import stream_stats as _stream_stats  # noqa: E402,F401
from gobn._opdefs_gen import OP_NAMES  # noqa: E402,F401

# A second copy of the library, loaded through tf.load_op_library, is refused
# with gobn's sentence rather than TensorFlow's parse error around it.
tf.load_op_library = tf.compat.v1.load_op_library = _library.unwrap_second_copy_refusal(tf.load_op_library)

# The one statement of gobn's version: tools/wheel.py reads it for the wheel.
__version__ = "0.1.0"

__all__ = ["FusedBatchNormOutput", "SyncBatchNormOutput", "enable", "fused_batch_norm", "kernel_calls", "keras",
           "library_path", "load_library", "ops", "sync_batch_norm", "xla_status"]


# gobn.ops loads the library on first use, not at import.
def __getattr__(name):
    if name == "ops":
        return load_library()
    if name == "keras":
        return importlib.import_module("gobn.keras")
    raise AttributeError(f"module 'gobn' has no attribute {name!r}")


# Keras finds a layer of a .keras file by the name its class registered
# (gobn>BatchNormalization): importing gobn.keras here lets `import gobn` alone
# load files that hold gobn's layers. Keras comes with TensorFlow's wheel;
# without it, gobn.keras is the one thing missing.
if importlib.util.find_spec("keras") is not None:
    from gobn import keras  # noqa: E402
