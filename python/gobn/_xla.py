"""gobn's ops inside XLA-compiled functions (``jit_compile``).

XLA compiles a function whole and has no kernel for a ``Gobn>`` op. So where
a gobn op is built for XLA to compile, gobn emits, in its place, an
``XlaCallModule`` op (``tensorflow/compiler/tf2xla/python/xla.py``) whose
StableHLO module is one ``stablehlo.custom_call`` of the op's XLA FFI handler:
libgobn.so registers one per op, for XLA's host and CUDA platforms, while it
loads (``capi/xla.c``), and it runs the op's own kernel on XLA's buffers
(on the GPU, on XLA's stream, with no synchronization). The module is text,
written here at trace time: XlaCallModule parses text as well as bytecode, so
no StableHLO Python bindings are needed (TensorFlow's GPU kit has none). It
is shape-polymorphic: every dimension is ``?``, each result's shape is an
operand computed from its input's dimensions (``indices_of_shape_operands``),
and XlaCallModule refines them when XLA compiles, so an unknown batch works.

What the custom call takes is opdef's to say (``gobn._opdefs_gen``: the
``xla_*`` fields): the op's inputs and outputs but those a GPU kernel keeps
in host memory, whose values XLA would hold in device memory, and but the
placeholder outputs, made here; a list output where its attr asks for it;
the attrs but T and U, in its ``backend_config``. What stands in for an
arg in host memory is the op's kind's to say (gobn._kinds: its xla_inputs
and xla_host_outputs): BatchNormGradReduce's count is computed from x's
shape, and BatchNormGradApply's handler takes x's own per-channel count R,
the sums passed to it scaled by R / count.

When to emit it: while a function is traced for XLA
(``control_flow_util.GraphOrParentsInXlaContext``), or when the caller knows
its ops will be compiled (a custom gradient whose forward pass was traced
for XLA: the gradient of a ``jit_compile`` function taken by a tape outside
it is traced outside XLA's context, and compiled all the same). Anywhere
else the ``Gobn>`` op runs as it is.

Where TensorFlow has no XLA FFI (before 2.17), or the library has no handler
for a GPU TensorFlow sees, gobn says so once (a RuntimeWarning), counts it
(``gobn.xla_status()``), and builds the ``Gobn>`` op as before: XLA then
refuses the function ("unsupported op"), or, for ``gobn.enable()``'s
gradients, compiles stock's.
"""

import collections
import functools
import inspect
import struct
import threading
import warnings

import numpy as np
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla as tf_xla
from tensorflow.python.framework import op_def_registry
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util

from gobn import _library, _opdef
from gobn._opdefs_gen import BY_NAME, CHANNELS_FIRST

# XlaCallModule's serialization version: 9 is in every supported release
# with XLA's FFI (2.17 to 2.21 take 5 to 9 and more) and has platform
# checks and shape polymorphism.
MODULE_VERSION = 9

# The MLIR element types of TensorFlow's dtypes.
_ELEMENT_TYPES = {tf.float32: "f32", tf.float16: "f16", tf.bfloat16: "bf16", tf.float64: "f64", tf.int64: "i64"}

_lock = threading.Lock()
_status = None
_fallbacks = 0
_said = False


def status():
    """What gobn can do inside XLA-compiled functions in this process (gobn.xla_status).

    Returns:
      {"api_version": XLA FFI's version ("0.2"), or None where TensorFlow
      has no XLA FFI (before 2.17); "library": the TensorFlow library that
      has it; "handlers": {"host": n, "cuda": n}, gobn's handlers registered
      for XLA's CPU and CUDA platforms (one per op); "reason": why some or
      all are missing, or ""; "fallbacks": how many gobn ops were built for
      XLA as Gobn> ops instead since the process started (XLA cannot
      compile those; said once, with a RuntimeWarning)}.
    """
    global _status
    if _status is None:
        _status = _library.json_export("gobnXLAStatus", "its XLA handlers")
    return dict(_status, fallbacks=_fallbacks)


def in_xla_context():
    """Whether ops built now are built for XLA to compile (jit_compile)."""
    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def _gpu_visible():
    return bool(tf.config.list_physical_devices("GPU"))


def _unavailable():
    """Why gobn's handlers cannot serve this process's XLA, or None."""
    s = status()
    if s["api_version"] is None or not s["handlers"]["host"]:
        return s["reason"] or "the library registered no XLA handlers"
    if _gpu_visible() and not s["handlers"]["cuda"]:
        return (s["reason"] or "this libgobn.so was built without the CUDA path") + \
            "; TensorFlow sees a GPU, where XLA would find no handler of gobn's"
    return None


def available():
    """Whether gobn's ops run inside XLA-compiled functions in this process."""
    return _unavailable() is None


def available_or_false():
    """available(), or False where the library cannot be found or loaded (the
    Keras layers ask when they are made; their first call says why)."""
    try:
        return available()
    except (FileNotFoundError, ImportError, RuntimeError):
        return False


def fall_back(what):
    """Counts what (an op, a gradient) built for XLA without gobn's
    handlers, and says why, once (see the module's doc)."""
    _fall_back(_unavailable() or "unknown", what)


def _fall_back(reason, what):
    """Counts an op built for XLA as a Gobn> op, and says why, once."""
    global _fallbacks, _said
    with _lock:
        _fallbacks += 1
        first, _said = not _said, True
    if first:
        warnings.warn(
            f"gobn: {what} is built for XLA (jit_compile), and gobn's kernels cannot run inside XLA here: "
            f"{reason} (TensorFlow {tf.__version__}). gobn builds its own op instead, which XLA cannot compile; "
            f"gobn.enable()'s gradients are stock's under XLA. Compile without XLA (jit_compile=False) to run "
            f"gobn's kernels. (Said once; gobn.xla_status() counts them.)", RuntimeWarning, stacklevel=4)


# ---------------------------------------------------------------------------
# The module


def _float_bits(value):
    """value as float32's bit pattern: MLIR reads a hexadecimal float exactly."""
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", np.float32(value)))[0]


def _first_t(op):
    """The first input of op of type T, which gives T."""
    return next(name for name, kind, _ in op.xla_inputs if kind == "T")


def _attr(kind, value):
    if kind == "float":
        return f"{_float_bits(value)} : f32"
    if kind == "int":
        return f"{int(value)} : i64"
    if kind == "bool":
        return "true" if value else "false"
    if not value.isalnum():  # a name (a data format, a mode): MLIR's string needs no escape
        raise ValueError(f"gobn: a string attr of an XLA call must be letters and digits, got {value!r}")
    return '"' + value + '"'


def _tensor_type(rank, element):
    return "tensor<" + "?x" * rank + element + ">"


@functools.lru_cache(maxsize=256)
def module_text(op_name, operands, results, attrs, platforms, legacy):
    """The StableHLO module of one call of op_name's handler.

    operands: (rank, element type) of each operand; results: (name, the
    operand whose shape it takes) of each result, those of op.xla_outputs
    the call has; attrs: (name, kind, value) of each backend_config attr;
    platforms: XlaCallModule's (a
    platform index comes first with more than one); legacy: API 0.0's form
    of a typed-FFI call (api_version 1 and mhlo.backend_config: TensorFlow
    2.17's StableHLO has no api_version 4).
    """
    op = BY_NAME[op_name]
    names = [name for name, _, _ in op.xla_inputs]
    t = operands[names.index(_first_t(op))][1]
    kinds = dict(zip(op.outputs, op.output_types))
    params = ["%platform: tensor<i32>"] if len(platforms) > 1 else []
    params += [f"%a{i}: {_tensor_type(rank, element)}" for i, (rank, element) in enumerate(operands)]
    body, shapes, result_types = [], [], []
    for j, (output, like) in enumerate(results):
        # Result j's shape: the dimensions of its input, as a tensor<rank x i32>.
        i = names.index(like)
        rank, element = operands[i]
        for d in range(rank):
            body.append(f"%d{j}_{d} = stablehlo.get_dimension_size %a{i}, dim = {d} : "
                        f"({_tensor_type(rank, element)}) -> tensor<i32>")
            body.append(f"%r{j}_{d} = stablehlo.reshape %d{j}_{d} : (tensor<i32>) -> tensor<1xi32>")
        body.append(f"%s{j} = stablehlo.concatenate {', '.join(f'%r{j}_{d}' for d in range(rank))}, dim = 0 : "
                    f"({', '.join(['tensor<1xi32>'] * rank)}) -> tensor<{rank}xi32>")
        shapes.append(f"tensor<{rank}xi32>")
        kind = kinds[output]
        result_types.append(_tensor_type(rank, t if kind == "T" else _ELEMENT_TYPES[tf.as_dtype(kind)]))
    config = "{" + ", ".join(f"{name} = {_attr(kind, value)}" for name, kind, value in attrs) + "}"
    config = f"api_version = 1 : i32, mhlo.backend_config = {config}" if legacy else \
        f"api_version = 4 : i32, backend_config = {config}"
    results = result_types
    n, m = len(operands), len(results)
    call_args = [f"%a{i}" for i in range(n)] + [f"%s{j}" for j in range(m)]
    operand_types = [_tensor_type(rank, element) for rank, element in operands] + shapes
    outs = ["%out"] if m == 1 else [f"%out#{j}" for j in range(m)]
    body.append(
        f'{"%out" if m == 1 else f"%out:{m}"} = stablehlo.custom_call @"{op.name}"({", ".join(call_args)}) '
        f"{{{config}, indices_of_shape_operands = dense<[{', '.join(str(n + j) for j in range(m))}]> : "
        f"tensor<{m}xi64>}} : ({', '.join(operand_types)}) -> ({', '.join(results)})")
    body.append(f"return {', '.join(outs)} : {', '.join(results)}")
    lines = "\n".join("    " + line for line in body)
    return (f"module @gobn attributes {{jax.uses_shape_polymorphism = true}} {{\n"
            f"  func.func public @main({', '.join(params)}) -> ({', '.join(results)}) {{\n{lines}\n  }}\n}}\n")


# ---------------------------------------------------------------------------
# Emitting an op


class _Recorded:
    """What the kinds' gradients (gobn._kinds) read of an op, for a call of
    spec built here: its OpDef, inputs, outputs and attrs."""

    def __init__(self, spec, inputs, outputs, attrs):
        self.op_def = op_def_registry.get(spec.name)
        self.inputs, self.outputs, self._attrs = list(inputs), list(outputs), attrs

    def get_attr(self, name):
        return self._attrs[name]


_OUTPUTS = {}


def _output_type(op):
    """The namedtuple of op's outputs (a Tensor for a single output), as the op's wrapper returns."""
    if op.name not in _OUTPUTS:
        _OUTPUTS[op.name] = collections.namedtuple(op.name.replace(">", "") + "Output", op.outputs)
    return _OUTPUTS[op.name]


def per_channel(x, data_format):
    """R, the elements per channel of x, as an int64 scalar."""
    shape = tf.shape(x, out_type=tf.int64)
    axis = 1 if data_format in CHANNELS_FIRST else x.shape.rank - 1
    return tf.reduce_prod(tf.concat([shape[:axis], shape[axis + 1:]], 0))


def _ranked(v, ranks, data_format):
    """v with a known rank, as the module's types need: the one ranks allows,
    or data_format's (checked when XLA compiles, where every shape is known),
    or flattened for an input of any rank, which the kernels do not read."""
    if v.shape.rank is not None:
        return v
    if not ranks:
        return tf.reshape(v, [-1])
    rank = ranks[0] if len(ranks) == 1 else 5 if data_format in ("NDHWC", "NCDHW") else 4
    return tf.ensure_shape(v, [None] * rank)


def _convert(op, args):
    """op's inputs, as tensors of the types its spec binds."""
    types = dict((name, kind) for name, kind, _ in op.xla_inputs)
    types.update({name: "int64" for name in op.host_memory})
    t = tf.convert_to_tensor(args[_first_t(op)]).dtype
    return {name: tf.convert_to_tensor(args[name], dtype=t if types[name] == "T" else tf.as_dtype(types[name]))
            for name in op.inputs}


def emit(op, args):
    """op's outputs for args (every input and attr, by name), through XlaCallModule.

    The call's gradient is op's own (its kind's, gobn._kinds), so
    second-order gradients work as they do on the op.
    """
    from gobn import _kinds

    kind = _kinds.of(op.kind)
    attrs = {name: args[name] for name, _ in op.xla_attrs}
    inputs = _convert(op, args)
    data_format = attrs.get("data_format", "NHWC")
    lists = dict(op.lists)
    # The results the call has: a list where its attr asks for it.
    results = tuple((name, like) for name, like in op.xla_outputs if name not in lists or attrs[lists[name]] > 0)

    @tf.custom_gradient
    def call(*values):
        given = dict(zip(op.inputs, values, strict=True))
        # An input in host memory (see the module's doc): its kind says what the call takes instead.
        taken = kind.xla_inputs(given, attrs) if set(op.host_memory) & set(op.inputs) else given
        operands = [_ranked(taken[name], ranks, data_format) for name, _, ranks in op.xla_inputs]
        platforms = ["CPU", "CUDA"] if status()["handlers"]["cuda"] else ["CPU"]
        legacy = status()["api_version"] == "0.0"
        text = module_text(op.name, tuple((v.shape.rank, _ELEMENT_TYPES[v.dtype]) for v in operands), results,
                           tuple((name, kind, attrs[name]) for name, kind in op.xla_attrs), tuple(platforms), legacy)
        shapes = {name: v.shape for (name, _, _), v in zip(op.xla_inputs, operands, strict=True)}
        t = given[_first_t(op)].dtype
        types = dict(zip(op.outputs, op.output_types, strict=True))
        tout = [t if types[name] == "T" else tf.as_dtype(types[name]) for name, _ in results]
        returned = tf_xla.call_module(operands, version=MODULE_VERSION, module=text.encode(), Tout=tout,
                                      Sout=[shapes[like] for _, like in results], platforms=platforms)
        by_name = dict(zip((name for name, _ in results), returned, strict=True))
        if set(op.host_memory) & set(op.outputs):  # its kind says what an output in host memory holds
            by_name.update(kind.xla_host_outputs(given, attrs))
        outputs = []
        for name in op.outputs:
            if name in by_name:
                outputs.append(by_name[name])
            elif name not in lists:  # a placeholder (a list not asked for has no tensor)
                outputs.append(tf.zeros([0], t if types[name] == "T" else tf.as_dtype(types[name])))

        def grad(*grads):
            return kind.gradient(_Recorded(op, values, outputs, attrs), *grads)

        return outputs, grad

    flat = call(*(inputs[name] for name in op.inputs))
    recorded = _Recorded(op, [], flat, attrs)
    by_name = _opdef.by_output_name(recorded, flat)
    if len(op.outputs) == 1:
        return by_name[op.outputs[0]]
    return _output_type(op)(**by_name)


def run(op, original, args, xla=False):
    """op's outputs for args (every input and attr, by name, and name): built
    for XLA where it will compile them (xla, or in_xla_context()), else by
    original, the op's wrapper."""
    name = args.pop("name", None)
    if not (xla or in_xla_context()):
        return original(**args, name=name)
    reason = _unavailable()
    if reason is not None:
        _fall_back(reason, op.name)
        return original(**args, name=name)
    if not _bindable(op, args):
        return original(**args, name=name)  # which raises TensorFlow's error for it
    with tf.name_scope(name or op.name.replace(">", "_")):
        return emit(op, args)


def _bindable(op, args):
    """Whether args are what op's spec allows: a dtype of T it has kernels
    for, and data formats it takes."""
    try:
        dtype = tf.convert_to_tensor(args[_first_t(op)]).dtype
    except (TypeError, ValueError):
        return False
    allowed = set(op.dtypes) | (set(op.gpu_dtypes) if _gpu_visible() else set())
    if dtype.name not in {tf.as_dtype(d).name for d in allowed}:
        return False
    fmt = args.get("data_format")
    if isinstance(fmt, bytes):
        args["data_format"] = fmt = fmt.decode()
    return fmt is None or fmt in op.data_formats


# ---------------------------------------------------------------------------
# gobn.ops


class OpsModule(type(tf)):
    """gobn.ops: the op module TensorFlow made of libgobn.so, whose op wrappers
    build XLA's call of gobn's handler where XLA will compile them."""

    def __init__(self, module):
        super().__init__(module.__name__, module.__doc__)
        self.__dict__.update(module.__dict__)
        for op in BY_NAME.values():
            original = getattr(module, op.wrapper)
            setattr(self, op.wrapper, _xla_aware(op, original))


def _xla_aware(op, original):
    signature = inspect.signature(original)

    @tf.autograph.experimental.do_not_convert
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if tf.executing_eagerly():
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return run(op, original, dict(bound.arguments))

    return wrapper


def call(op_name, xla, **args):
    """The outputs of gobn's op op_name for args (inputs and attrs by name;
    attrs left out take their defaults), built for XLA where xla says so or
    in_xla_context() does: gobn's custom gradients call it with what their
    forward pass found."""
    op = BY_NAME[op_name]
    original = getattr(_library.load(), op.wrapper)
    bound = inspect.signature(original).bind(**args)
    bound.apply_defaults()
    return run(op, original, dict(bound.arguments), xla=xla)


_modules = {}


def ops_module(module):
    """The OpsModule of module (one per module)."""
    with _lock:
        if id(module) not in _modules:
            _modules[id(module)] = (module, OpsModule(module))
        return _modules[id(module)][1]


def load_library(path=None):
    """Loads libgobn.so once per process and returns its op module.

    When the process has a copy loaded already (``tf.load_op_library``), the
    module is made from that copy's ops and nothing is loaded again. path
    (else ``$GOBN_LIBRARY``) names the file to load; a copy loaded from
    another file is refused with an ImportError naming both, since two
    copies of gobn cannot share a process. Its op wrappers build calls of
    gobn's XLA handlers where XLA will compile them.
    """
    return ops_module(_library.load(path))
