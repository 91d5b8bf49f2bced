"""Writes gobn's wheel: the Python package with libgobn.so inside.

    python -m tools.wheel build/libgobn.so dist

The wheel is a platform wheel, py3-none-manylinux_2_<N>_<arch>: libgobn.so
calls no CPython API, so one wheel serves every Python, and N is the newest
glibc symbol version the library needs (readelf). Its name and description
come from python/pyproject.toml, its version from gobn.__version__ (read from
python/gobn/__init__.py, not imported: importing gobn imports TensorFlow),
its modules from python/gobn.
The archive is reproducible: fixed timestamps and file order.

libgobn.so links TensorFlow's framework library by name only (no rpath):
TensorFlow has loaded it before it loads gobn. python_tests/test_wheel.py
checks what the wheel holds and what the library links.
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import tomllib
import zipfile

from tools.checkout import PYTHON

PACKAGE = os.path.join(PYTHON, "gobn")
PYPROJECT = os.path.join(PYTHON, "pyproject.toml")
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
# ZIP's earliest date: the wheel's bytes depend on its contents only.
EPOCH = (1980, 1, 1, 0, 0, 0)


def glibc_needed(library):
    """(major, minor) of the newest GLIBC_x.y symbol version library needs."""
    out = subprocess.run(["readelf", "--version-info", "--wide", library], check=True, capture_output=True,
                         text=True).stdout
    versions = {tuple(int(p) for p in m.groups()) for m in re.finditer(r"Name: GLIBC_(\d+)\.(\d+)", out)}
    if not versions:
        raise SystemExit(f"wheel: {library} needs no GLIBC symbol version; is it a Linux shared library?")
    return max(versions)


def machine(library):
    """The wheel's architecture name for library's ELF machine."""
    out = subprocess.run(["readelf", "--file-header", library], check=True, capture_output=True, text=True).stdout
    kind = re.search(r"Machine:\s+(.*)", out).group(1)
    names = {"Advanced Micro Devices X86-64": "x86_64", "AArch64": "aarch64"}
    if kind not in names:
        raise SystemExit(f"wheel: no wheel tag for machine {kind!r}")
    return names[kind]


def platform_tag(library):
    major, minor = glibc_needed(library)
    return f"manylinux_{major}_{minor}_{machine(library)}"


def package_version():
    """gobn.__version__, as python/gobn/__init__.py states it."""
    with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as f:
        found = VERSION_LINE.findall(f.read())
    if len(found) != 1:
        raise SystemExit(f"wheel: {PACKAGE}/__init__.py must state __version__ once, as a string")
    return found[0]


def metadata(project, version):
    with open(os.path.join(PYTHON, project["readme"]), encoding="utf-8") as f:
        readme = f.read()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
        f"License: {project['license']}",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + readme


def record_row(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def modules():
    """The package's modules, as paths under it (its subpackages' too: _kinds/), in order."""
    found = []
    for folder, _, names in os.walk(PACKAGE):
        found += [os.path.relpath(os.path.join(folder, n), PACKAGE) for n in names if n.endswith(".py")]
    return sorted(found)


def build(library, out_dir):
    with open(PYPROJECT, "rb") as f:
        project = tomllib.load(f)["project"]
    name, version = project["name"], package_version()
    tag = f"py3-none-{platform_tag(library)}"
    dist_info = f"{name}-{version}.dist-info"

    files = []  # (archive name, bytes, executable)
    for module in modules():
        with open(os.path.join(PACKAGE, module), "rb") as f:
            files.append((f"gobn/{module}", f.read(), False))
    with open(library, "rb") as f:
        files.append(("gobn/libgobn.so", f.read(), True))
    files.append((f"{dist_info}/METADATA", metadata(project, version).encode(), False))
    wheel = f"Wheel-Version: 1.0\nGenerator: gobn tools/wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files.append((f"{dist_info}/WHEEL", wheel.encode(), False))
    files.append((f"{dist_info}/top_level.txt", b"gobn\n", False))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for archive_name, data, _ in files:
        writer.writerow(record_row(archive_name, data))
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    files.append((f"{dist_info}/RECORD", record.getvalue().encode(), False))

    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        if old.startswith(f"{name}-") and old.endswith(".whl"):
            os.remove(os.path.join(out_dir, old))
    path = os.path.join(out_dir, f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as whl:
        for archive_name, data, executable in files:
            info = zipfile.ZipInfo(archive_name, EPOCH)
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    os.replace(path + ".tmp", path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", help="the built libgobn.so")
    parser.add_argument("out_dir", help="where to write the wheel (older gobn wheels there are removed)")
    args = parser.parse_args()
    print(build(args.library, args.out_dir))


if __name__ == "__main__":
    sys.exit(main())
