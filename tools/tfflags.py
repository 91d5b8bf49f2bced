"""Print the TensorFlow paths gobn builds against, as a Makefile fragment.

Run with the Python of .venv: the include directory and the directory of
libtensorflow_framework.so.2 come from tf.sysconfig, never from a fixed path.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402


def main():
    libdir = tf.sysconfig.get_lib()
    include = tf.sysconfig.get_include()
    for name in ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2"):
        if not os.path.exists(os.path.join(libdir, name)):
            sys.exit(f"tfflags: {name} not found in {libdir}")
    print(f"TF_INCLUDE := {include}")
    print(f"TF_LIBDIR := {libdir}")
    print(f"TF_VERSION := {tf.__version__}")


if __name__ == "__main__":
    main()
