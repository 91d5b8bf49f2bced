"""One copy of gobn per process, however a user mixes the ways of loading it.

Each case runs loading_child.py in a fresh process, with the package from
the checkout (PYTHONPATH=python, as after `make`) or from the installed wheel
(`make wheel`, pip install), GOBN_LIBRARY set or not, and a sequence of
steps: tf.load_op_library of a file, the package's gobn.ops, gobn.enable().
Where a user would otherwise get two copies, the process keeps one mapped
libgobn.so and working ops, or raises an error that names both files; it is
never aborted.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from gobn import _supported
from support import BUILT_LIBRARY, PYTHON_DIR, REPO_ROOT

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loading_child.py")
BUILD = os.path.realpath(BUILT_LIBRARY)


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """Another file with the same library: a second copy, as another checkout's build would be."""
    path = tmp_path_factory.mktemp("elsewhere") / "libgobn.so"
    shutil.copyfile(BUILT_LIBRARY, path)
    return str(path)


@pytest.fixture(scope="module")
def wheel(installed_wheel):
    """(folder to put on PYTHONPATH, the library inside it)."""
    return str(installed_wheel), os.path.realpath(os.path.join(installed_wheel, "gobn", "libgobn.so"))


def run(steps, package, cwd, **env):
    """Runs the child with package's folder on PYTHONPATH; returns its report."""
    environ = {k: v for k, v in os.environ.items() if k not in ("GOBN_LIBRARY", "PYTHONPATH")}
    environ.update(PYTHONPATH=package, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0", **env)
    proc = subprocess.run([sys.executable, CHILD, *steps], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"the process died (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["outcome"] = {s["step"]: s for s in report["steps"]}
    return report


def assert_ok(report, *steps):
    for name in steps:
        outcome = report["outcome"][name]
        assert outcome["ok"], f"{name}: {outcome}"
        assert outcome.get("has_ops", True), f"{name}: the module has no ops"
        assert outcome.get("matches_stock", True), f"{name}: gobn's op does not match stock's"
        if name == "enable":
            assert outcome["gobn_calls"] == 1, f"stock's op after enable() did not run on gobn: {outcome}"


def assert_refused(report, step, error, *paths):
    outcome = report["outcome"][step]
    assert not outcome["ok"] and outcome["error"] == error, f"{step}: {outcome}"
    for path in paths:
        assert path in outcome["message"], f"{step}: {path} not named in {outcome['message']!r}"


def refusal(first, second):
    """capi/library.c's sentence for a second copy, from second, after first."""
    return (f"[gobn] libgobn.so is loaded already, from {first}; this process cannot load a second copy, "
            f"from {second}: use the first (gobn.ops, or the module tf.load_op_library returned for it)")


def assert_refused_as_gobn(report, step, first, second):
    """A second copy loaded with the package imported: gobn's sentence alone, as the user reads it."""
    outcome = report["outcome"][step]
    assert not outcome["ok"] and outcome["error"] == "InvalidArgumentError", f"{step}: {outcome}"
    assert outcome["message"] == refusal(first, second), outcome["message"]


# ---------------------------------------------------------------------------
# The package from the checkout, and tf.load_op_library of the checkout's build


def test_load_op_library_then_the_package(tmp_path):
    """The README's first example, then its next section: one copy, shared."""
    report = run(["raw:build/libgobn.so", "package", "enable"], PYTHON_DIR, cwd=REPO_ROOT)
    assert_ok(report, "raw:build/libgobn.so", "package", "enable")
    assert report["mapped"] == [BUILD]
    assert report["library_path"] == BUILD


def test_the_package_then_load_op_library_of_the_same_file(tmp_path):
    """A second tf.load_op_library of the loaded file under another path string
    gets a module without ops (TensorFlow caches modules by the string and the
    loader runs no constructor twice), never a second copy; gobn.ops works."""
    report = run(["package", "enable", "raw:build/libgobn.so", f"raw:{BUILD}"], PYTHON_DIR, cwd=REPO_ROOT)
    assert_ok(report, "package", "enable", f"raw:{BUILD}")
    assert report["outcome"]["raw:build/libgobn.so"] == {"step": "raw:build/libgobn.so", "ok": True,
                                                         "has_ops": False, "matches_stock": False}
    assert report["mapped"] == [BUILD]


def test_load_op_library_twice(tmp_path):
    report = run([f"raw:{BUILD}", f"raw:{BUILD}"], PYTHON_DIR, cwd=tmp_path)
    assert_ok(report, f"raw:{BUILD}")
    assert report["mapped"] == [BUILD]


def test_package_alone_finds_the_checkouts_build(tmp_path):
    report = run(["package", "enable"], PYTHON_DIR, cwd=tmp_path)
    assert_ok(report, "package", "enable")
    assert report["mapped"] == [BUILD] and report["library_path"] == BUILD


# ---------------------------------------------------------------------------
# Two files: the checkout's build and another copy


def test_second_file_through_load_op_library_is_refused(tmp_path, copy):
    report = run([f"raw:{copy}", f"raw:{BUILD}", "package", "enable"], PYTHON_DIR, cwd=tmp_path)
    assert_ok(report, f"raw:{copy}", "package", "enable")
    assert_refused(report, f"raw:{BUILD}", "InvalidArgumentError", copy, BUILD)
    # Without the package in the process, TensorFlow's parse error holds the sentence.
    assert refusal(copy, BUILD) in report["outcome"][f"raw:{BUILD}"]["message"]
    assert report["library_path"] == copy, "the package uses the copy loaded first"


def test_second_file_after_the_package_is_refused(tmp_path, copy):
    report = run(["package", f"raw:{copy}", "enable"], PYTHON_DIR, cwd=tmp_path)
    assert_ok(report, "package", "enable")
    assert_refused_as_gobn(report, f"raw:{copy}", BUILD, copy)


def test_pinned_library_is_loaded(tmp_path, copy):
    report = run(["package", "enable"], PYTHON_DIR, cwd=tmp_path, GOBN_LIBRARY=copy)
    assert_ok(report, "package", "enable")
    assert report["mapped"] == [copy] and report["library_path"] == copy


def test_pinned_library_other_than_the_loaded_one_is_refused(tmp_path, copy):
    report = run([f"raw:{BUILD}", "package"], PYTHON_DIR, cwd=tmp_path, GOBN_LIBRARY=copy)
    assert_ok(report, f"raw:{BUILD}")
    assert_refused(report, "package", "ImportError", BUILD, copy, "GOBN_LIBRARY")
    assert report["mapped"] == [BUILD]


def test_pinned_library_missing(tmp_path):
    missing = str(tmp_path / "nowhere" / "libgobn.so")
    report = run(["package"], PYTHON_DIR, cwd=tmp_path, GOBN_LIBRARY=missing)
    assert_refused(report, "package", "FileNotFoundError", missing, "GOBN_LIBRARY")
    assert report["mapped"] == []


def test_pinned_file_that_is_not_a_library(tmp_path):
    bad = tmp_path / "libgobn.so"
    bad.write_bytes(b"not a shared library")
    report = run(["package"], PYTHON_DIR, cwd=tmp_path, GOBN_LIBRARY=str(bad))
    assert_refused(report, "package", "ImportError", str(bad))
    assert report["mapped"] == []


# ---------------------------------------------------------------------------
# The installed wheel, beside the checkout's build


def test_wheel_alone(tmp_path, wheel):
    site, library = wheel
    report = run(["package", "enable"], site, cwd=tmp_path)
    assert_ok(report, "package", "enable")
    assert report["mapped"] == [library] and report["library_path"] == library


def test_checkouts_build_then_the_wheel(tmp_path, wheel):
    site, _ = wheel
    report = run([f"raw:{BUILD}", "package", "enable"], site, cwd=tmp_path)
    assert_ok(report, f"raw:{BUILD}", "package", "enable")
    assert report["mapped"] == [BUILD] and report["library_path"] == BUILD


def test_wheel_then_the_checkouts_build(tmp_path, wheel):
    site, library = wheel
    report = run(["package", "enable", f"raw:{BUILD}"], site, cwd=tmp_path)
    assert_ok(report, "package", "enable")
    assert_refused_as_gobn(report, f"raw:{BUILD}", library, BUILD)


def test_wheel_pinned_to_the_checkouts_build(tmp_path, wheel):
    site, library = wheel
    report = run(["package", "enable"], site, cwd=tmp_path, GOBN_LIBRARY=BUILD)
    assert_ok(report, "package", "enable")
    assert report["mapped"] == [BUILD]
    refused = run([f"raw:{library}", "package"], site, cwd=tmp_path, GOBN_LIBRARY=BUILD)
    assert_refused(refused, "package", "ImportError", library, BUILD)


# ---------------------------------------------------------------------------
# The supported TensorFlow releases


@pytest.mark.parametrize("version", ["2.13.1", "2.22.0"])
def test_unsupported_tensorflow_is_refused_at_import(tmp_path, version):
    report = run([f"tensorflow:{version}", "package"], PYTHON_DIR, cwd=tmp_path)
    assert_refused(report, "package", "ImportError", f"TensorFlow {version}", _supported.supported_range())
    assert report["mapped"] == []
