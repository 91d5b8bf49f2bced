"""Import first, in a script that compares gobn with stock's Eigen kernels.

It switches oneDNN off unless the user chose (stock's reference is then the
Eigen kernel), quiets TensorFlow's start-up log, both before TensorFlow is
imported, and puts the checkout's Python package on sys.path: the library
lookup, the op facts, the tolerances and the float64 references are the
package's.
"""

import os
import sys

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "python"))
