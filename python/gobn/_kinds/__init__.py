"""The kinds of gobn's ops (opdef's Kind: a family of ops one kernel of each
device computes), one module each, named after the kind in snake case
(FusedBatchNormGrad: fused_batch_norm_grad.py). A kind's module holds what
Python writes by hand for it, and nothing else of the package names a kind:

- ``gradient(op, *grads)``: the gradient of its ops, registered for each
  (gobn._gradients), in TensorFlow ops, for double backprop;
- ``convert(pfor_input)``: its ops' pfor converter (gobn._pfor), for
  tf.vectorized_map and jacobians;
- ``stock_inputs(op, grads)`` and ``stock_gradients(outputs)``, for a kind
  whose ops are the gradient of a stock forward op (``gradient_of``): how
  the forward op's tensors feed its op, and how the op's outputs become the
  forward inputs' gradients (gobn._stock_gradients, for ``enable()``);
- ``xla_inputs(given, attrs)`` for a kind with an input in host memory, and
  ``xla_host_outputs(given, attrs)`` for one with an output there, which its
  op's XLA call leaves out (gobn._xla): the inputs the call takes, the host
  outputs' values;
- ``MODES`` and ``sample(case, seed, device)``: the ways its cases run and
  each case's call of its op with the outputs it must give (gobn._testing);
- optionally ``stock_outputs(case, sample)``: stock's outputs of a sample
  on the CPU, by name, or None where stock gives no usable answer, for the
  golden set (tools/golden.py); without it, gobn._testing.stock_outputs:
  the sample's stock twin run eagerly.

python_tests/test_kinds.py checks every kind's module against opdef.
Importing this package (``import gobn`` does) registers each op's gradient
and pfor converter, its kind's.
"""

import importlib
import re

import tensorflow as tf

from gobn import _pfor
from gobn._opdefs_gen import OPS

# What every kind's module defines, and what a kind whose ops are a stock
# forward op's gradient, or keep an input or an output in host memory,
# defines besides.
REQUIRED = ("gradient", "convert", "MODES", "sample")
FOR_STOCK_GRADIENTS = ("stock_inputs", "stock_gradients")
FOR_HOST_INPUTS = ("xla_inputs",)
FOR_HOST_OUTPUTS = ("xla_host_outputs",)


def module_name(kind):
    """The name of kind's module: kind in snake case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def of(kind):
    """kind's module; an ImportError naming its file where there is none."""
    name = module_name(kind)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise ImportError(f"python/gobn/_kinds/{name}.py: no module for the kind {kind} "
                          f"(CONTRIBUTING.md, \"Adding an op\")", name=e.name) from None


def missing(kind):
    """What kind's module lacks of what its ops need (REQUIRED, and
    FOR_STOCK_GRADIENTS, FOR_HOST_INPUTS, FOR_HOST_OUTPUTS where they apply), each as
    "python/gobn/_kinds/<module>.py: <name>"; the module's file alone where
    there is none."""
    try:
        module = of(kind)
    except ImportError as e:
        return [str(e)]
    ops = [op for op in OPS if op.kind == kind]
    needed = list(REQUIRED)
    if any(op.gradient_of for op in ops):
        needed += FOR_STOCK_GRADIENTS
    if any(name in op.inputs for op in ops for name in op.host_memory):
        needed += FOR_HOST_INPUTS
    if any(name in op.outputs for op in ops for name in op.host_memory):
        needed += FOR_HOST_OUTPUTS
    return [f"python/gobn/_kinds/{module_name(kind)}.py: {name}" for name in needed if not hasattr(module, name)]


# Every kind of OPS, by name, with its module.
KINDS = {op.kind: of(op.kind) for op in OPS}

for _op in OPS:
    try:
        tf.RegisterGradient(_op.name)(KINDS[_op.kind].gradient)
    except KeyError:  # registered already (the module was loaded twice)
        pass
    if _pfor.AVAILABLE:
        try:
            _pfor.register(_op.name)(KINDS[_op.kind].convert)
        except AssertionError:  # registered already
            pass
