"""Gradients of stock's batch-norm forward ops that run on gobn's own ops.

Two places never run the kernels ``gobn.enable()`` registers under the stock
gradient ops' names. With oneDNN on, TensorFlow rewrites the CPU gradient ops
FusedBatchNormGrad, V2 and V3 to its ``_MklNative`` ops before it picks a
kernel; and XLA (``jit_compile``) compiles stock's gradient ops itself. The
rewrite keys on op names and leaves ``Gobn>`` ops alone, and XLA runs gobn's
ops as calls of gobn's handlers (gobn._xla), so ``enable()`` also points
TensorFlow's gradient functions for the forward ops FusedBatchNorm,
FusedBatchNormV2, FusedBatchNormV3 and BatchNormWithGlobalNormalization at
the functions below: each is stock's (tensorflow/python/ops/nn_grad.py) with
the ``Gobn>`` op in place of the stock gradient op, fed the same tensors,
under XLA and with oneDNN on; elsewhere (oneDNN off) stock's own function,
whose gradient op runs gobn's kernel.

- Training: x, scale and the forward's reserve spaces, which the CPU forward
  fills alike with oneDNN on or off: the batch mean and the biased variance
  (python_tests/test_enable.py checks it on oneDNN's forward).
- Inference: the population mean and variance. Stock transposes
  channels-first inputs to channels-last here, for its CPU kernel, which
  rejects NCHW inference; gobn's kernels take every layout as it is.
- Under XLA, where gobn's kernels cannot run inside it (gobn._xla: before
  TensorFlow 2.17), stock's function, as XLA compiles stock's gradient op.
- Traced for a SavedModel (gobn._saving) the stock function runs too, so
  that a saved training step loads where gobn is not installed.

TensorFlow has no public way to replace a gradient function for the whole
process (``tf.RegisterGradient`` refuses a name twice), so ``install`` sets
the entries of its gradient registry (``ops.gradient_registry``), keeping the
functions they replace. Graphs built after it, tapes run after it and
``tf.function``s traced after it use gobn's; what was traced before keeps
stock's until it is traced again.
"""

import threading

from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util

from gobn import _saving, _xla
from gobn._opdefs_gen import BY_STOCK_NAME

_lock = threading.Lock()
_stock = {}  # forward op type -> the registry entry it had before install()
_onednn = False  # install()'s: whether TensorFlow rewrites the stock gradient ops


def _in_xla(op):
    """Whether op's gradient is being built for XLA to compile (jit_compile)."""
    if control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
        return True
    # An op of a graph (not the eager tape's record of one) may carry it itself.
    return isinstance(op, ops.Operation) and control_flow_util.IsInXLAContext(op)


def _on_gobn(op):
    """Whether op's gradient is built on a Gobn> op here, and whether for XLA."""
    xla = _in_xla(op)
    if xla and not _xla.available():
        _xla.fall_back(op.type + "'s gradient")
        return False, xla
    return xla or _onednn, xla


def _fused_grad(gradient_op):
    """The gradient of a FusedBatchNorm* forward op on gobn's gradient_op."""

    def grad(op, *grad):
        on_gobn, xla = _on_gobn(op)
        if not on_gobn or _saving.saving():
            return _stock[op.type]["type"](op, *grad)
        is_training = op.get_attr("is_training")
        args = dict(y_backprop=grad[0], x=op.inputs[0], scale=op.inputs[1], epsilon=op.get_attr("epsilon"),
                    data_format=op.get_attr("data_format"), is_training=is_training)
        if is_training:  # the batch mean and biased variance the forward saved
            args.update(reserve_space_1=op.outputs[3], reserve_space_2=op.outputs[4])
        else:  # the population statistics the forward was given
            args.update(reserve_space_1=op.inputs[3], reserve_space_2=op.inputs[4])
        if "reserve_space_3" in gradient_op.inputs:
            args["reserve_space_3"] = op.outputs[5]
        dx, dscale, doffset, _, _ = _xla.call(gradient_op.name, xla, **args)
        return dx, dscale, doffset, None, None

    return grad


def _global_norm_grad(op, grad):
    on_gobn, xla = _on_gobn(op)
    if not on_gobn or _saving.saving():
        return _stock[op.type]["type"](op, grad)
    return tuple(_xla.call(
        BY_STOCK_NAME["BatchNormWithGlobalNormalizationGrad"].name, xla, t=op.inputs[0], m=op.inputs[1],
        v=op.inputs[2], gamma=op.inputs[4], backprop=grad, variance_epsilon=op.get_attr("variance_epsilon"),
        scale_after_normalization=op.get_attr("scale_after_normalization")))


# Each forward op, and the function that gives its gradient on gobn.
GRADIENTS = {
    "FusedBatchNorm": _fused_grad(BY_STOCK_NAME["FusedBatchNormGrad"]),
    "FusedBatchNormV2": _fused_grad(BY_STOCK_NAME["FusedBatchNormGradV2"]),
    "FusedBatchNormV3": _fused_grad(BY_STOCK_NAME["FusedBatchNormGradV3"]),
    "BatchNormWithGlobalNormalization": _global_norm_grad,
}


def install(onednn):
    """Points TensorFlow's gradient functions for the forward ops at gobn's; idempotent.

    onednn: whether TensorFlow rewrites the stock gradient ops to oneDNN's,
    so that gobn's functions build Gobn> ops outside XLA too.
    """
    global _onednn
    registry = ops.gradient_registry._registry  # noqa: SLF001 (no public way; see the module's doc)
    with _lock:
        _onednn = onednn
        for op_type, fn in GRADIENTS.items():
            if op_type not in _stock:
                _stock[op_type] = registry[op_type]
            registry[op_type] = dict(_stock[op_type], type=fn)

