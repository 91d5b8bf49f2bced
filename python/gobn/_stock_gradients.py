"""Gradients of stock's batch-norm forward ops that run on gobn's own ops.

Two places never run the kernels ``gobn.enable()`` registers under the stock
gradient ops' names. With oneDNN on, TensorFlow rewrites the CPU gradient ops
FusedBatchNormGrad, V2 and V3 to its ``_MklNative`` ops before it picks a
kernel; and XLA (``jit_compile``) compiles stock's gradient ops itself. The
rewrite keys on op names and leaves ``Gobn>`` ops alone, and XLA runs gobn's
ops as calls of gobn's handlers (gobn._xla), so ``enable()`` also points
TensorFlow's gradient functions for the forward ops FusedBatchNorm,
FusedBatchNormV2, FusedBatchNormV3 and BatchNormWithGlobalNormalization
(each stock twin's ``gradient_of`` in opdef) at the functions below: each is stock's (tensorflow/python/ops/nn_grad.py) with
the ``Gobn>`` op in place of the stock gradient op, fed the same tensors,
under XLA and with oneDNN on; elsewhere (oneDNN off) stock's own function,
whose gradient op runs gobn's kernel. How a forward op's tensors feed its
gradient op, and how that op's outputs become the forward inputs'
gradients, is the op's kind's to say (its stock_inputs and
stock_gradients, gobn._kinds).

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

import tensorflow as tf
from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util

from gobn import _fusion, _kinds, _opdef, _saving, _xla
from gobn._opdefs_gen import OPS

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


def _gradient(spec):
    """The gradient of spec.gradient_of on gobn's op spec: its inputs its
    kind's stock_inputs (gobn._kinds), its attrs those of the forward op of
    the same names, its outputs made the forward's gradients by its kind's
    stock_gradients."""
    kind = _kinds.of(spec.kind)

    def grad(op, *grads):
        on_gobn, xla = _on_gobn(op)
        if _saving.saving() or xla and not on_gobn:  # traced for a SavedModel; an XLA gobn cannot serve
            return _stock[op.type]["type"](op, *grads)
        args = kind.stock_inputs(op, grads)
        args.update((name, op.get_attr(name)) for name, _ in spec.xla_attrs)  # all but the type attrs
        fused = _fused(op, args, xla) if "offset" in _opdef.input_names(op) else None
        if fused is not None:
            outputs = dict(zip(("x_backprop", "scale_backprop", "offset_backprop"), fused, strict=True))
        elif not on_gobn:  # stock's function, whose gradient op runs gobn's kernel (enable())
            return _stock[op.type]["type"](op, *grads)
        else:
            result = _xla.call(spec.name, xla, **args)
            outputs = result._asdict() if hasattr(result, "_asdict") else {spec.outputs[0]: result}
        gradients = kind.stock_gradients(outputs)
        return [gradients.get(name) for name in _opdef.input_names(op)]

    return grad


def _fused(op, args, xla):
    """The fused gradient (gobn._fusion) of the batch norm op, whose
    gradient op would take args, where its output's gradient is an
    activation's; None otherwise."""
    # A tape's record of op keeps only the outputs its gradient reads (the
    # reserve spaces), which tell its op in the graph.
    output = next((t for t in op.outputs if t is not None), None)
    if output is None:
        return None
    offset = _opdef.inputs_by_name(op)["offset"]  # which the record leaves out, and no kernel of gobn's reads
    fused = dict(args, offset=tf.zeros_like(args["scale"]) if offset is None else offset)
    fused.setdefault("reserve_space_3", tf.zeros([0]))  # what FusedBatchNorm and V2 do not save
    dy = fused.pop("y_backprop")
    return _fusion.gradient(dy, output, xla, **fused)


# Each forward op, and the function that gives its gradient on gobn.
GRADIENTS = {spec.gradient_of: _gradient(spec) for spec in OPS if spec.gradient_of}


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

