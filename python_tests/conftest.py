"""Fixtures and hooks of gobn's pytest suite.

The suite compares gobn's ops with stock TensorFlow's CPU kernels. The helpers
the tests share are in support.py (``from support import ...``; pytest puts
this folder on ``sys.path``); importing it first sets up the process (oneDNN
off before TensorFlow is imported, the package on sys.path).

The tests that take the ``device`` fixture (test_device.py's) run on the
device ``--device`` names, CPU:0 unless told; with a GPU only they run, and
the others, which are about the CPU's kernels, the build, the wheel or child
processes of their own, are deselected. ``--record JSON`` writes their
results (bench/gpu_tf.json's check rows).
"""

import json
import os
import shlex

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


# ---------------------------------------------------------------------------
# The device: --device, the device fixture, --record


def pytest_addoption(parser):
    group = parser.getgroup("gobn")
    group.addoption("--device", default="CPU:0",
                    help="the device of the tests that take the device fixture (test_device.py), default CPU:0; "
                         "with a GPU only those run")
    group.addoption("--matrix", choices=("quick", "default", "full"),
                    help="test_device.py's parity cases: quick (float, a shape of each rank), default (every dtype "
                         "opdef binds on the device, every shape), full (and ResNet-50's shapes); default: quick "
                         "on the CPU, whose every case test_parity.py and its siblings check, default elsewhere")
    group.addoption("--record", metavar="JSON",
                    help="write the device tests' results there: the run's facts and a list of rows per section")


def pytest_configure(config):
    config.addinivalue_line("markers", "section(name): the list of --record a device test's row goes to")
    if support.device_type(config.getoption("device")) == "GPU":
        # TensorFlow takes all of a GPU's memory at its first use unless told
        # to grow; test_device.py's enable check runs in a child process
        # beside this one (it inherits the variable), which would find none.
        os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    if config.getoption("record"):
        config.pluginmanager.register(Record(config), "gobn-record")


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("section")
        if marker:
            item.user_properties.append(("section", marker.args[0]))
    if support.device_type(config.getoption("device")) == "CPU":
        return
    kept = [item for item in items if "device" in item.fixturenames]
    config.hook.pytest_deselected(items=[item for item in items if "device" not in item.fixturenames])
    items[:] = kept


def pytest_sessionstart(session):
    """A --device this process lacks (GPU:0 where TensorFlow sees no GPU, or
    has its CPU build) stops the run before any test: never a run of skips.
    CPU:0 is always there, and listing the devices would initialize them
    before a test that configures them first."""
    name = device_name(session.config)
    if name == "CPU:0":
        return
    devices = [d.name for d in tf.config.list_logical_devices()]
    if not any(d.upper().endswith("DEVICE:" + name) for d in devices):
        build = "a GPU build" if tf.test.is_built_with_cuda() else "a CPU-only build"
        raise pytest.UsageError(f"--device {name}: no such device here; TensorFlow {tf.__version__} "
                                f"({build}) sees {devices}")


@pytest.fixture(scope="session")
def device(request):
    """The device --device names, as tf.device takes it (pytest_sessionstart
    checked it is there). On a GPU soft placement is off: an op without a
    kernel there fails instead of moving."""
    name = device_name(request.config)
    if support.device_type(name) == "GPU":
        tf.config.set_soft_device_placement(False)
    return name


def device_name(config):
    """--device as tf.device takes it: "GPU:0" of "/device:gpu:0" or "gpu:0"."""
    return config.getoption("device").upper().replace("/DEVICE:", "").lstrip("/")


class Record:
    """--record: each test with a section marker as a row of that section
    (its user properties, its outcome, ok) beside the run's facts, as JSON."""

    def __init__(self, config):
        self.config, self.rows = config, {}

    def pytest_runtest_logreport(self, report):
        properties = dict(report.user_properties)
        if "section" not in properties:
            return
        row = self.rows.setdefault(report.nodeid, {"test": report.nodeid.split("::")[-1]})
        row.update(properties)
        if report.failed:
            row["outcome"] = "failed"
        elif report.skipped and "outcome" not in row:
            row["outcome"], row["reason"] = "skipped", str(report.longrepr[-1] if isinstance(report.longrepr, tuple)
                                                           else report.longrepr)
        elif report.when == "call" and "outcome" not in row:
            row["outcome"] = "passed"

    def pytest_sessionfinish(self, session):
        name = device_name(self.config)
        record = dict(device=device_facts(name), tensorflow=tf.__version__,
                      cuda=tf.sysconfig.get_build_info().get("cuda_version"),
                      cudnn=tf.sysconfig.get_build_info().get("cudnn_version"),
                      command=shlex.join(["pytest"] + [portable(a) for a in self.config.invocation_params.args]))
        for row in self.rows.values():
            row = dict(row)
            row["ok"] = row.get("outcome") == "passed"
            record.setdefault(row.pop("section"), []).append(row)
        record["checks"] = dict(device=name, passed=sum(r.get("outcome") == "passed" for r in self.rows.values()),
                                failed=sum(r.get("outcome") == "failed" for r in self.rows.values()),
                                skipped=sum(r.get("outcome") == "skipped" for r in self.rows.values()))
        with open(self.config.getoption("record"), "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.write("\n")


def device_facts(name):
    """The device's name, compute capability and driver where TensorFlow and
    nvidia-smi tell them (a GPU's), else its name as given."""
    import subprocess

    if support.device_type(name) != "GPU":
        return dict(name=name)
    gpus = tf.config.list_physical_devices("GPU")
    index = int(name.rsplit(":", 1)[1]) if ":" in name else 0
    details = tf.config.experimental.get_device_details(gpus[index]) if index < len(gpus) else {}
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[index]
    except (OSError, subprocess.SubprocessError, IndexError):
        driver = None
    return dict(name=details.get("device_name", name), compute_capability=details.get("compute_capability"),
                driver=driver)


def portable(arg):
    """A command-line argument as a record shows it: a path inside the
    checkout relative to it, any other absolute path by its name alone."""
    if os.path.isabs(arg):
        rel = os.path.relpath(arg, support.REPO_ROOT)
        return rel if not rel.startswith("..") else os.path.basename(arg)
    return arg
