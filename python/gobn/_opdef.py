"""The record of one op libgobn.so registers, as opdef (Go) describes it,
and the lookup of an op's tensors by the names of its arguments.

_opdefs_gen.py (generated from opdef by cmd/genpy) lists the ops, in
registration order, as OPS, with indices by name, stock twin and kind. An
Op holds: the registered name; its Python wrapper; its stock twin (or
None: an op internal to TensorFlow starts with an underscore); the stock
forward op whose gradient the twin is (or None); its kernel family (kind,
whose module gobn._kinds finds); its arguments (inputs, outputs) and
attrs by name; the outputs that are lists, each with the int attr that
says how many tensors it is (lists); its data formats; the dtypes of T its
CPU and GPU kernels take (dtypes, gpu_dtypes, as TensorFlow's specs name
them); the type of each output ("T", or a fixed type); the args a GPU
kernel keeps in host memory; and the op's XLA custom call (gobn._xla): its
operands (name, type, ranks allowed, () for any), its results (name, the
operand whose shape it takes) and its attrs (name, kind).
"""

import collections

from tensorflow.python.framework import op_def_registry

Op = collections.namedtuple("Op", "name wrapper stock gradient_of kind inputs outputs attrs lists data_formats "
                                  "dtypes gpu_dtypes output_types host_memory xla_inputs xla_outputs xla_attrs")


def _positions(args, get_attr):
    """{name: index, or slice of a list} of an op's flat tensors for the
    OpDef args (input_arg or output_arg) args: a list is as long as its
    number attr, or its type list, says."""
    positions, i = {}, 0
    for arg in args:
        if arg.number_attr:
            n = get_attr(arg.number_attr)
        elif arg.type_list_attr:
            n = len(get_attr(arg.type_list_attr))
        else:
            positions[arg.name], i = i, i + 1
            continue
        positions[arg.name], i = slice(i, i + n), i + n
    return positions


def _op_def(op):
    """op's OpDef: a tf.Operation's own, or that of the op type of what an
    eager gradient function gets (which has its type, inputs, outputs and
    get_attr)."""
    return getattr(op, "op_def", None) or op_def_registry.get(op.type)


def input_index(op, name):
    """The index among op's inputs (a tf.Operation, or what stands in for
    one) of the input called name."""
    return _positions(_op_def(op).input_arg, op.get_attr)[name]


def inputs_by_name(op):
    """{input name: tensor, or list of tensors for a list} of op."""
    return {name: op.inputs[i] for name, i in _positions(_op_def(op).input_arg, op.get_attr).items()}


def by_output_name(op, values):
    """{output name: value, or list of values for a list} of values, one for
    each of op's outputs in order (op.outputs, or the gradients of them)."""
    return {name: values[i] for name, i in _positions(_op_def(op).output_arg, op.get_attr).items()}


def input_names(op):
    """The names of op's inputs, in order."""
    return [arg.name for arg in _op_def(op).input_arg]


def output_names(op):
    """The names of op's outputs, in order."""
    return [arg.name for arg in _op_def(op).output_arg]
