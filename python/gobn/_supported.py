"""The TensorFlow releases gobn supports: one list, read by everything else.

``make compat`` installs gobn's wheel beside each release below in a fresh
environment and runs the package's smoke tests there (bench/compat.json); the
README states the range they span. At import, gobn refuses a TensorFlow whose
minor version lies outside it, since its C API is what libgobn.so links to.

This module imports nothing, so tools can read it without TensorFlow (tools/compat.py).
"""

# One release per minor version: the newest patch of each, tensorflow-cpu
# from PyPI.
TENSORFLOW_RELEASES = ("2.14.1", "2.15.1", "2.16.2", "2.17.1", "2.18.1", "2.19.1", "2.20.0", "2.21.0")


def minor(version):
    """(major, minor) of a version string such as "2.15.0.post1" or "2.22.0rc0"."""
    major, minor_part = version.split(".")[:2]
    return int(major), int("".join(c for c in minor_part if c.isdigit()) or 0)


OLDEST = minor(TENSORFLOW_RELEASES[0])
NEWEST = minor(TENSORFLOW_RELEASES[-1])


def supported_range():
    """The range as the README states it, e.g. "2.14 to 2.21"."""
    return f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


def check_tensorflow(version):
    """Raises ImportError unless TensorFlow version is in the supported range."""
    if not OLDEST <= minor(version) <= NEWEST:
        raise ImportError(
            f"gobn supports TensorFlow {supported_range()}, and this is TensorFlow {version}: install a "
            f"supported release (pip install 'tensorflow>={OLDEST[0]}.{OLDEST[1]},<{NEWEST[0]}.{NEWEST[1] + 1}'), "
            f"or a gobn built for this one")
