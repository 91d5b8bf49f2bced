"""Finding and loading libgobn.so: one copy per process.

A process holds at most one copy of gobn. Two copies from different files
would register every op and kernel twice, which TensorFlow answers with an
abort or with kernels that refuse to run; so before it loads anything, gobn
asks the dynamic loader for a copy the process has already (the library's
soname, with ``RTLD_NOLOAD``), however it got there (``tf.load_op_library``,
another import, ``tf.LoadLibrary``), and uses that one.

Where there is none, the library is looked for at ``$GOBN_LIBRARY`` (when set,
only there), then beside this package (an installed wheel carries it there),
then at ``build/libgobn.so`` of the checkout this package sits in
(``PYTHONPATH=python`` after ``make``).

The library's own reports (kernel_calls, stream_stats) and switches
(set_tf_stream) are C exports read through the loaded copy's ctypes handle.

A second copy loaded through ``tf.load_op_library`` refuses to register its
ops (capi/library.c), and TensorFlow reports the refusal inside a parse
error of its own; ``import gobn`` wraps ``tf.load_op_library`` so that the
error reads as gobn's sentence alone (unwrap_second_copy_refusal).
"""

import ctypes
import functools
import os
import re
import threading

import tensorflow as tf

ENV_VAR = "GOBN_LIBRARY"
# The library's soname (the Makefile links it so): the loader finds a loaded
# copy by it, whatever the copy's file.
SONAME = "libgobn.so"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_BESIDE_PACKAGE = os.path.join(_PACKAGE_DIR, SONAME)
_CHECKOUT_BUILD = os.path.join(os.path.dirname(os.path.dirname(_PACKAGE_DIR)), "build", SONAME)

_lock = threading.Lock()
_ops = None  # the op module, once load() has it
_file = None  # the file of the copy loaded then: a process keeps its copy


def candidates(given=None):
    """The (origin, path) pairs the library is looked for at, in order: given
    alone when it is a path, else $GOBN_LIBRARY alone when set."""
    if given:
        return [("the path given", given)]
    pinned = os.environ.get(ENV_VAR)
    if pinned:
        return [(f"${ENV_VAR}", pinned)]
    return [("beside the package", _BESIDE_PACKAGE), ("the checkout's build", _CHECKOUT_BUILD)]


def find(given=None):
    """The first candidate that exists (see candidates).

    Raises:
      FileNotFoundError: none exists; the message lists every path tried.
    """
    tried = candidates(given)
    for _, path in tried:
        if os.path.isfile(path):
            return path
    lines = "\n".join(f"  {path}  ({origin}): not found" for origin, path in tried)
    hint = ("point it at a built libgobn.so" if given
            else f"unset {ENV_VAR} or point it at a built libgobn.so" if os.environ.get(ENV_VAR)
            else f"install gobn's wheel (make wheel), run `make` in the gobn checkout, or set {ENV_VAR}")
    raise FileNotFoundError(f"gobn: libgobn.so not found; tried:\n{lines}\n({hint})")


def handle():
    """A ctypes handle on the copy of libgobn.so this process has loaded, or None.

    It never loads a library: the loader answers from what is mapped already.
    """
    try:
        lib = ctypes.CDLL(SONAME, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    if not hasattr(lib, "gobn_library_file"):
        return None  # another library of that name
    lib.gobn_library_file.restype = ctypes.c_char_p
    return lib


def loaded_path():
    """The file of the libgobn.so this process has loaded, or None."""
    lib = handle()
    return os.fsdecode(lib.gobn_library_file()) if lib is not None else None


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
    return loaded_path() or find()


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def load(given=None):
    """Loads libgobn.so unless the process has a copy; returns the op module.

    given (else $GOBN_LIBRARY) names the file to load; a copy loaded from
    another file is refused rather than joined by a second one.

    Raises:
      ImportError: the process has gobn from another file than the one
        wanted, or TensorFlow could not load the library.
      FileNotFoundError: no library was found (see find).
    """
    global _ops, _file
    wanted = given or os.environ.get(ENV_VAR) or None
    if _ops is not None and wanted is None:
        return _ops  # every op call comes here: no lookup
    with _lock:
        loaded = _file if _ops is not None else loaded_path()
        if loaded is not None and wanted is not None and not _same_file(wanted, loaded):
            raise ImportError(
                f"gobn: this process has libgobn.so loaded already, from {loaded}, and cannot load a second "
                f"copy, from {wanted}{f' (${ENV_VAR})' if wanted == os.environ.get(ENV_VAR) else ''}: "
                f"load one of them only")
        if _ops is not None:
            return _ops
        if loaded is not None:
            _ops, _file = _module_from_registry(), loaded
            return _ops
        stray = _registered_ops()
        if stray:
            raise ImportError(
                f"gobn: the ops {', '.join(stray)} are registered, but by no libgobn.so that gobn can find (a "
                f"build older than this package?); load that build's ops with tf.load_op_library, or restart "
                f"the process without it")
        file = find(given)
        try:
            module = tf.load_op_library(file)
        except Exception as e:  # tf.errors.NotFoundError for a bad file or a TensorFlow it cannot link to
            raise ImportError(f"gobn: loading {file} failed: {e}") from e
        if not hasattr(module, "gobn_fused_batch_norm_grad_v3"):
            raise ImportError(f"gobn: {file} registered no Gobn> ops (is it libgobn.so?)")
        _ops, _file = module, loaded_path()
        return _ops


def _registered_ops():
    from tensorflow.python.framework import op_def_registry

    from gobn._opdefs_gen import OP_NAMES

    return [name for name in OP_NAMES if op_def_registry.get(name) is not None]


def _module_from_registry():
    """The op module of the Gobn> ops registered in this process.

    What tf.load_op_library makes of the ops a library registered, made from
    TensorFlow's op registry: the process loaded gobn before the package did.
    """
    import hashlib
    import importlib.machinery
    import importlib.util
    import sys

    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.framework import _pywrap_python_op_gen, op_def_registry

    op_list = op_def_pb2.OpList()
    op_list.op.extend(op_def_registry.get(name) for name in _registered_ops())
    wrappers = _pywrap_python_op_gen.GetPythonWrappers(op_list.SerializeToString())
    name = hashlib.sha1(wrappers).hexdigest()
    if name in sys.modules:
        return sys.modules[name]
    module = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(name, None))
    exec(wrappers, module.__dict__)  # noqa: S102 (what tf.load_op_library does)
    module._IS_TENSORFLOW_PLUGIN = True
    sys.modules[name] = module
    return module


def loaded():
    """The ctypes handle of the loaded library, loading it first if needed."""
    load()
    lib = handle()
    if lib is None:
        raise RuntimeError(f"gobn: the Gobn> ops are registered, but the loader finds no {SONAME} by its soname")
    return lib


def _take_string(ptr):
    """The C string at ptr as str; frees it (libc free)."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


def json_export(export, what):
    """The JSON an export of the library returns (a C string it allocates)."""
    import json

    fn = getattr(loaded(), export)
    fn.restype = ctypes.c_void_p
    out = _take_string(fn())
    if out is None:
        raise RuntimeError(f"gobn: the library could not report {what}")
    return json.loads(out)


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
    return json_export("gobnKernelCalls", "its kernel calls")


def stream_stats():
    """How gobn's GPU calls have run since the library was loaded: on
    TensorFlow's (or XLA's) stream ("on_stream") or by the synchronizing
    rule ("fallbacks", with "first_fallback" saying why), and the
    device-level counts ("synchronized_calls", "enqueued_calls") (capi's
    gobnStreamStats), for the GPU check and the benchmarks."""
    return json_export("gobnStreamStats", "how its GPU calls ran")


def set_tf_stream(on):
    """Runs the GPU calls that follow on TensorFlow's stream (True, the
    default) or by the synchronizing rule (False); returns the previous
    setting. For benchmarks that time both in one process."""
    fn = loaded().gobnSetTFStream
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
    return bool(fn(1 if on else 0))


# What TensorFlow makes of a second copy's refusal: capi/library.c registers
# the op Gobn>SecondCopy with gobn's sentence as its one attr spec, which
# fails to parse (TensorFlow's C API passes no message of a library's own).
_REFUSAL = re.compile(r'Attr\("(\[gobn\] .*)"\) for Op Gobn>SecondCopy', re.S)


def unwrap_second_copy_refusal(load_op_library):
    """load_op_library (TensorFlow's) raising a second copy's refusal as gobn's sentence alone.

    Every other result and error of it is its own.
    """
    if getattr(load_op_library, "_gobn_unwraps", False):
        return load_op_library

    @functools.wraps(load_op_library)
    def wrapper(library_filename):
        try:
            return load_op_library(library_filename)
        except tf.errors.InvalidArgumentError as e:
            refusal = _REFUSAL.search(e.message)
            if refusal is None:
                raise
            raise tf.errors.InvalidArgumentError(None, None, refusal.group(1)) from None

    wrapper._gobn_unwraps = True
    return wrapper
