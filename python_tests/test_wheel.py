"""gobn's wheel (make wheel): what it holds, what its library links, and
that it installs and runs.

The library must link nothing but what TensorFlow's process has already
(TensorFlow's framework library, glibc) and carry no rpath, so that the one
wheel loads into any environment of a supported TensorFlow; its platform tag
must not promise an older glibc than the library's symbol versions need.
"""

import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import zipfile

import pytest

from support import BUILT_LIBRARY, GRADIENT_SCRIPT, PYTHON_DIR, REPO_ROOT, built_wheel

# What a process running TensorFlow has mapped before it loads gobn (its
# libtensorflow_framework.so.2 needs libstdc++ and libgcc_s too).
ALLOWED_NEEDED = {"libtensorflow_framework.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                  "libstdc++.so.6", "libgcc_s.so.1"}
NAME = re.compile(r"gobn-(?P<version>[^-]+)-py3-none-manylinux_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>\w+)\.whl")


@pytest.fixture(scope="module")
def wheel():
    return built_wheel()


@pytest.fixture(scope="module")
def library(wheel, tmp_path_factory):
    """The wheel's libgobn.so, extracted."""
    path = tmp_path_factory.mktemp("wheel") / "libgobn.so"
    with zipfile.ZipFile(wheel) as z:
        path.write_bytes(z.read("gobn/libgobn.so"))
    return str(path)


def readelf(*args):
    return subprocess.run(["readelf", *args], check=True, capture_output=True, text=True).stdout


def test_name_and_tags(wheel):
    m = NAME.fullmatch(os.path.basename(wheel))
    assert m, f"{os.path.basename(wheel)} is not gobn-<version>-py3-none-manylinux_<x>_<y>_<arch>.whl"
    import gobn

    assert m["version"] == gobn.__version__, "the wheel's version is gobn.__version__"
    with open(os.path.join(PYTHON_DIR, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["dynamic"] == ["version"], "pyproject.toml must not state a version"
    with zipfile.ZipFile(wheel) as z:
        info = z.read(f"gobn-{m['version']}.dist-info/WHEEL").decode()
        assert f"\nVersion: {m['version']}\n" in z.read(f"gobn-{m['version']}.dist-info/METADATA").decode()
    assert "Root-Is-Purelib: false" in info
    assert f"Tag: py3-none-manylinux_{m['major']}_{m['minor']}_{m['arch']}" in info.splitlines()


def test_holds_the_package_and_the_built_library(wheel):
    """Every module of python/gobn (its subpackages' too) and the library make built, byte for byte: the
    wheel is not stale."""
    package = os.path.join(PYTHON_DIR, "gobn")
    modules = sorted(os.path.relpath(os.path.join(folder, name), package)
                     for folder, _, names in os.walk(package) for name in names if name.endswith(".py"))
    assert "_kinds/__init__.py" in modules
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert sorted(n[len("gobn/"):] for n in names if n.startswith("gobn/") and n.endswith(".py")) == modules
        for module in modules:
            with open(os.path.join(PYTHON_DIR, "gobn", module), "rb") as f:
                assert z.read(f"gobn/{module}") == f.read(), f"gobn/{module} differs from python/gobn: make wheel"
        with open(BUILT_LIBRARY, "rb") as f:
            assert z.read("gobn/libgobn.so") == f.read(), "the wheel's libgobn.so is not build/libgobn.so"
        assert z.getinfo("gobn/libgobn.so").external_attr >> 16 & 0o111, "libgobn.so is not executable"


def test_record_lists_every_file_with_its_hash(wheel):
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(z.read(record).decode()))}
        assert set(rows) == set(z.namelist())
        for name, (digest, size) in rows.items():
            if name == record:
                continue
            data = z.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), name


def test_library_links_only_what_tensorflow_has(library):
    dynamic = readelf("--dynamic", library)
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic))
    assert "libtensorflow_framework.so.2" in needed
    assert needed <= ALLOWED_NEEDED, f"libgobn.so links {needed - ALLOWED_NEEDED}"
    assert not re.search(r"\((RPATH|RUNPATH)\)", dynamic), f"libgobn.so carries a search path:\n{dynamic}"
    assert re.search(r"\(SONAME\)\s+Library soname: \[libgobn\.so\]", dynamic), "the soname the package looks for"


def versions(prefix, library):
    """The versions of prefix (GLIBCXX, CXXABI) library needs, as tuples."""
    out = readelf("--version-info", "--wide", library)
    return {tuple(int(p) for p in v.split(".")) for v in re.findall(r"Name: %s_([\d.]+)" % prefix, out)}


def test_cxx_runtime_no_newer_than_tensorflows(library):
    import tensorflow as tf
    framework = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2")
    for prefix in ("GLIBCXX", "CXXABI"):
        mine, theirs = versions(prefix, library), versions(prefix, framework)
        assert max(mine, default=()) <= max(theirs, default=()), f"{prefix}: gobn needs {max(mine)}"


def test_tag_covers_the_glibc_the_library_needs(wheel, library):
    m = NAME.fullmatch(os.path.basename(wheel))
    needs = max((int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)",
                                                         readelf("--version-info", "--wide", library)))
    assert (int(m["major"]), int(m["minor"])) == needs, f"tag {m['major']}.{m['minor']}, library needs {needs}"
    machine = re.search(r"Machine:\s+(.*)", readelf("--file-header", library)).group(1)
    assert {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}[m["arch"]] == machine


def test_installed_wheel_runs_from_anywhere(installed_wheel, tmp_path):
    """pip's install of the wheel, used from a folder with no checkout in sight."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOBN_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(installed_wheel)
    done = subprocess.run([sys.executable, "-c", GRADIENT_SCRIPT], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    library, module = done.stdout.split()
    assert library == os.path.realpath(os.path.join(installed_wheel, "gobn", "libgobn.so"))
    assert module.startswith(str(installed_wheel))


def readme_section(title):
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S).group(1)


def test_readme_states_the_supported_releases_and_the_wheels_tag(wheel):
    from gobn import _supported

    install = " ".join(readme_section("Install").split())
    oldest, newest = _supported.supported_range().split(" to ")
    assert f"TensorFlow {oldest} to {newest}" in install, "README's Install names another range"
    m = NAME.fullmatch(os.path.basename(wheel))
    assert os.path.basename(wheel) in install, "README's Install names another wheel"
    assert f"glibc {m['major']}.{m['minor']} or newer" in install


def test_readme_python_example_runs_from_the_installed_wheel(installed_wheel, tmp_path):
    """The README's Python section, as a user of the wheel runs it, against stock's gradient; it prints
    gobn's result beside stock's."""
    example = re.search(r"```python\n(.*?)```", readme_section("Python"), re.S).group(1)
    check = textwrap.dedent("""
        want = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
            reserve_space_3=rs3, epsilon=0.001, data_format="NHWC", is_training=True)
        for g, w in zip((dx, dscale, doffset), want[:3]):
            err = float(tf.reduce_max(tf.abs(g - w)))
            assert err <= 1e-5 * float(tf.reduce_max(tf.abs(w))) + 1e-4 * float(tf.reduce_max(tf.abs(w))), err
        print(gobn.library_path())
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("GOBN_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(installed_wheel)
    done = subprocess.run([sys.executable, "-c", example + check], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1].startswith(str(installed_wheel))
    # What the example prints: gobn's results beside stock's.
    assert "dscale[:3]  gobn:" in done.stdout and " stock:" in done.stdout, done.stdout
    assert "max |dx - stock's dx|:" in done.stdout, done.stdout
