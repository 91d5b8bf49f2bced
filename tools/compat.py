"""make compat: gobn's wheel in a fresh environment of each supported TensorFlow.

    python -m tools.compat [--only 2.14.1 ...] [--exports-only] [--out bench/compat.json]

For each release of gobn._supported.TENSORFLOW_RELEASES: a new virtual
environment in build/compat/, tensorflow-cpu of that release, pytest as
requirements.txt pins it, the newest tf-keras of the same minor version
(installed without its dependencies, which name the full tensorflow wheel),
and gobn's wheel from dist/; then python_tests/test_smoke.py and
python_tests/test_xla.py (gobn inside XLA-compiled functions, from 2.17 on;
before, that gobn says it cannot) run there, alone (--noconftest: the
wheel's gobn, TensorFlow's default configuration). The results, with the
versions pip installed, go to bench/compat.json.

It also reads, for each release, the framework library of TensorFlow's GPU
wheel (`tensorflow`, which has the CUDA kernels) and checks that it exports
what gobn's GPU path looks up by name at run time (GPU_EXPORTS): only that
member of the wheel is downloaded, by HTTP range requests. --exports-only
runs just that check and keeps the rest of bench/compat.json.
"""

import argparse
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
import zipfile

from tools.checkout import PYTHON, ROOT

sys.path.insert(0, os.path.join(PYTHON, "gobn"))
import _supported  # noqa: E402  (imports nothing; gobn itself needs TensorFlow)

TESTS = [os.path.join(ROOT, "python_tests", name) for name in ("test_smoke.py", "test_xla.py")]
WORK = os.path.join(ROOT, "build", "compat")


def pinned(package):
    """package's exact version in requirements.txt."""
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            m = re.match(rf"{re.escape(package)}==(\S+)", line.strip())
            if m:
                return m.group(1)
    raise SystemExit(f"compat: {package} is not pinned in requirements.txt")


def the_wheel():
    wheels = [f for f in os.listdir(os.path.join(ROOT, "dist")) if f.startswith("gobn-") and f.endswith(".whl")]
    if len(wheels) != 1:
        raise SystemExit(f"compat: expected one gobn wheel in dist/, found {wheels}: run `make wheel`")
    return os.path.join(ROOT, "dist", wheels[0])


def run(cmd, log, **kwargs):
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kwargs).returncode


# Prints the __version__ of each module named on its command line (None for
# one that does not import), as JSON.
VERSIONS = """
import importlib, json, sys
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = importlib.import_module(name).__version__
    except Exception:
        versions[name] = None
print(json.dumps(versions))
"""


def installed(python, modules):
    """Each of modules' __version__ in the environment of python, in one process."""
    done = subprocess.run([python, "-c", VERSIONS, *modules], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if done.returncode == 0 and lines else dict.fromkeys(modules)


def check(release, wheel):
    env_dir = os.path.join(WORK, f"tf-{release}")
    log = env_dir + ".log"
    shutil.rmtree(env_dir, ignore_errors=True)
    if os.path.exists(log):
        os.remove(log)
    python = os.path.join(env_dir, "bin", "python")
    major_minor = "%d.%d" % _supported.minor(release)
    row = {"tensorflow_release": release}
    start = time.monotonic()
    steps = [
        [sys.executable, "-m", "venv", env_dir],
        [python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [python, "-m", "pip", "install", "--quiet", f"tensorflow-cpu=={release}", f"pytest=={pinned('pytest')}"],
        [python, "-m", "pip", "install", "--quiet", "--no-deps", f"tf-keras=={major_minor}.*"],
        [python, "-m", "pip", "install", "--quiet", "--no-deps", wheel],
    ]
    for cmd in steps:
        if run(cmd, log) != 0:
            row.update(ok=False, error=f"{' '.join(cmd[2:5])} failed (build/compat/{os.path.basename(log)})")
            return row
    row["installed"] = installed(python, ("tensorflow", "keras", "tf_keras", "numpy"))
    junit = env_dir + ".xml"
    code = run([python, "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider", "--import-mode=importlib",
                f"--junitxml={junit}", *TESTS], log, cwd=WORK, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    tests = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped: " + (child.get("message") or "")
        tests[case.get("name")] = outcome
    row.update(ok=code == 0, tests=tests, seconds=round(time.monotonic() - start))
    return row


# What gobn looks up by name in TensorFlow's GPU build (never linked, so a
# release without one still loads gobn and falls back): the symbols of
# libtensorflow_framework.so.2, by what they are for.
GPU_EXPORTS = {
    # capi/stream.c: TensorFlow's compute stream for a GPU kernel
    "stream": "_ZNK10tensorflow15OpKernelContext12eigen_deviceIN5Eigen9GpuDeviceEEERKT_v",
}
FRAMEWORK = "tensorflow/libtensorflow_framework.so.2"
SIMPLE_INDEX = "https://pypi.org/simple/{}/"


class RemoteFile(io.RawIOBase):
    """A file on an HTTP server, read by range requests in blocks: enough of
    a file for zipfile to read one member of a wheel without the rest."""

    BLOCK = 8 << 20

    def __init__(self, url):
        self.url, self.pos, self.cache = url, 0, (0, b"")
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            self.size = int(r.headers["Content-Length"])

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def read(self, n=-1):
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        out = bytearray()
        while self.pos < end:
            start, data = self.cache
            if not start <= self.pos < start + len(data):
                last = min(self.size, self.pos + max(self.BLOCK, end - self.pos)) - 1
                req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{last}"})
                with urllib.request.urlopen(req, timeout=300) as r:
                    self.cache = start, data = self.pos, r.read()
            take = data[self.pos - start:end - start]
            out += take
            self.pos += len(take)
        return bytes(out)


def gpu_wheel_url(release):
    """The address of a Linux x86-64 wheel of TensorFlow's GPU build of release."""
    with urllib.request.urlopen(SIMPLE_INDEX.format("tensorflow"), timeout=60) as r:
        page = r.read().decode()
    links = re.findall(rf'href="([^"#]*/tensorflow-{re.escape(release)}-cp3\d+-cp3\d+-manylinux[^"#]*x86_64\.whl)', page)
    if not links:
        raise RuntimeError(f"no Linux x86-64 wheel of tensorflow {release} on the index")
    return links[0]


def gpu_exports(release):
    """Which of GPU_EXPORTS the framework library of release's GPU wheel
    defines (nm -D --defined-only)."""
    url = gpu_wheel_url(release)
    row = {"tensorflow_release": release, "wheel": url.rsplit("/", 1)[1]}
    with zipfile.ZipFile(RemoteFile(url)) as wheel, tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "framework.so")
        with wheel.open(FRAMEWORK) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        nm = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True)
    defined = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    row["exports"] = {what: symbol in defined for what, symbol in GPU_EXPORTS.items()}
    row["ok"] = all(row["exports"].values())
    return row


def check_exports(releases):
    rows = []
    for release in releases:
        try:
            row = gpu_exports(release)
        except Exception as e:  # noqa: BLE001 (a release whose wheel cannot be read fails its row)
            row = {"tensorflow_release": release, "ok": False, "error": repr(e)[:300]}
        rows.append(row)
        print(f"tensorflow {release} (GPU wheel) exports: {row.get('exports', row.get('error'))}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="RELEASE", help="check these releases only")
    parser.add_argument("--exports-only", action="store_true",
                        help="only check the GPU wheels' exports (GPU_EXPORTS), keeping the rest of --out")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "compat.json"))
    args = parser.parse_args()
    releases = args.only or list(_supported.TENSORFLOW_RELEASES)
    exports = check_exports(releases)
    if args.exports_only:
        report = {}
        if os.path.exists(args.out):
            with open(args.out) as f:
                report = json.load(f)
        report["gpu_wheel_exports"] = exports
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        return 0 if all(row["ok"] for row in exports) else 1
    wheel = the_wheel()
    os.makedirs(WORK, exist_ok=True)
    rows = []
    for release in releases:
        row = check(release, wheel)
        rows.append(row)
        tests = row.get("tests", {})
        failed = [name for name, outcome in tests.items() if outcome == "failed"]
        print(f"tensorflow-cpu {release}: {'ok' if row['ok'] else 'FAILED'} "
              f"({sum(o == 'passed' for o in tests.values())} passed, {len(failed)} failed"
              f"{', ' + ', '.join(failed) if failed else ''}){' ' + row['error'] if 'error' in row else ''}",
              flush=True)
    report = {
        "command": "make compat",
        "wheel": os.path.basename(wheel),
        "python": platform.python_version(),
        "supported": _supported.supported_range(),
        "results": rows,
        "gpu_wheel_exports": exports,
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0 if all(row["ok"] for row in rows + exports) else 1


if __name__ == "__main__":
    sys.exit(main())
