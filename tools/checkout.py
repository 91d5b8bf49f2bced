"""The checkout: where its root is, and the Python package of it on sys.path.

The tools, the benchmarks and the demo run from the repository root as
modules (`python -m tools.wheel`, `python -m bench.calls`,
`python -m examples.demo`; the Makefile runs every target from there), and
import this module for the checkout's paths. Importing it puts the
checkout's python/ first on sys.path, so that `import gobn` is this
checkout's package (the library lookup, the op facts, the tolerances and the
float64 references); it imports nothing else.

A script that compares gobn with stock TensorFlow calls tensorflow_env()
before it imports TensorFlow (or anything that does, gobn among them).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "python")

if PYTHON not in sys.path:
    sys.path.insert(0, PYTHON)


def tensorflow_env(onednn=None):
    """Sets TensorFlow's environment before it is imported: oneDNN off unless
    the user chose (stock's reference is then the Eigen kernel), or as onednn
    says where it is given; the start-up log quiet unless the user chose."""
    if onednn is None:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    else:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def module_command(spec, *args):
    """The command line that runs module spec (a module's __spec__) again in
    a child Python, with args; run it with cwd=ROOT, where the module's
    package is found."""
    return [sys.executable, "-m", spec.name, *args]
