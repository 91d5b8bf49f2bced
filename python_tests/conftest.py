"""Fixtures and hooks of gobn's pytest suite.

The suite compares gobn's ops with stock TensorFlow's CPU kernels. The helpers
the tests share are in support.py (``from support import ...``; pytest puts
this folder on ``sys.path``); importing it first sets up the process (oneDNN
off before TensorFlow is imported, the package on sys.path).
"""

import support  # first: it sets up the process before TensorFlow is imported
import pytest
import tensorflow as tf

# Two logical CPU devices, for the tf.distribute.MirroredStrategy tests
# (test_keras.py, test_sync_batch_norm.py). It must happen before TensorFlow
# initializes its devices, so here, before any test runs; other tests run on
# /CPU:0 as before. Child scripts import support.py, not this module, and keep
# TensorFlow's single CPU device (test_leaks.py's measures memory).
LOGICAL_CPUS = 2
try:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * LOGICAL_CPUS)
except RuntimeError:  # devices initialized already: the tests that need two say so
    pass


@pytest.fixture(scope="session")
def gobn():
    """gobn's op module, as the package loads it (gobn.ops). A missing
    library fails loudly: never skip."""
    import gobn as package

    try:
        return package.ops
    except (FileNotFoundError, ImportError) as e:
        pytest.fail(f"{e}\n(run `make` in {support.REPO_ROOT})", pytrace=False)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """A folder holding gobn's wheel installed (pip install --target): put it
    on PYTHONPATH, without the checkout's python/, to use gobn as installed."""
    import subprocess
    import sys

    target = tmp_path_factory.mktemp("site-packages")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), support.built_wheel()], check=True, timeout=300)
    return target


@pytest.fixture(scope="session")
def mirrored_strategy():
    """tf.distribute.MirroredStrategy over the two logical CPUs, one per process.

    Every test shares it: strategies made side by side in one process number
    their collective all-reduces alike, and one's all-reduce of float64 under
    a key another used for float32 aborts every collective after it.
    """
    devices = tf.config.list_logical_devices("CPU")
    if len(devices) < LOGICAL_CPUS:
        pytest.fail(f"{LOGICAL_CPUS} logical CPU devices are needed: conftest.py sets them up before "
                    f"TensorFlow initializes its devices, but found {devices}", pytrace=False)
    return tf.distribute.MirroredStrategy([d.name for d in devices[:LOGICAL_CPUS]])


# Error bookkeeping: support.record_error collects the largest differences seen.


def pytest_terminal_summary(terminalreporter):
    if not support.ERRORS:
        return
    terminalreporter.section("gobn: largest differences seen")
    for (dtype, kind), (err, used) in sorted(support.ERRORS.items()):
        terminalreporter.write_line(f"{dtype:9s} {kind:52s} max|err| {err:.3g}  ({used:.2f} of tolerance)")
