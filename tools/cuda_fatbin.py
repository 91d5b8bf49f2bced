"""Compile gobn's CUDA kernels into one fatbin with NVRTC and nvFatbin.

Run with the Python of .venv (make does: see the Makefile's GOBN_CUDA):

    .venv/bin/python -m tools.cuda_fatbin [SOURCE]

SOURCE defaults to kernels/cuda/batchnorm.cu, one translation unit; its
directory is on the include path, so it may #include "x.cuh" beside it, and
<cuda_fp16.h> and <cuda_bf16.h> come from the pinned nvidia-cuda-runtime-cu12
wheel (with <nv/target> and friends from nvidia-cuda-cccl-cu12). There is no
nvcc and no CUDA toolkit: the compiler is libnvrtc.so.12 and the packer
libnvfatbin.so.12, both from pinned PyPI wheels in .venv (requirements.txt),
loaded by absolute path with ctypes.

The source is compiled once per architecture in CUDA_COMPUTE_CAPABILITIES to
a cubin (SASS, --gpu-architecture=sm_XX) and once more to PTX for the newest
one (compute_XX), which the driver JIT-compiles on a GPU newer than any cubin.
Outputs, each written to a temporary name and renamed into place, the fatbin
last, so a failed run leaves none half-written and make retries it:

    build/cuda/ptxas.txt      ptxas' resource lines, one JSON object a line:
                              {"arch", "kernel", "entry", "registers",
                               "spill_stores", "spill_loads", "stack", "smem",
                               "cmem0", "barriers"}
    build/cuda/manifest.json  the architectures, the NVRTC and nvFatbin
                              versions, the options, sizes, the kernels, and
                              the sha256 of the source and its headers
    build/cuda/nvrtc.log      NVRTC's whole log of each compile
    kernels/cuda/gobn.fatbin  the fatbin (Go embeds it: //go:embed)

A compile error prints NVRTC's log and exits with status 1.
"""

import argparse
import concurrent.futures
import ctypes
import glob
import hashlib
import json
import multiprocessing
import os
import re
import sys
import tempfile

from tools.checkout import ROOT

# The GPU architectures of TensorFlow 2.21.0's official GPU wheel
# (tensorflow==2.21.0 on PyPI, manylinux x86_64): build_info['cuda_compute_
# capabilities'] in tensorflow/python/platform/build_info.py of
# tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (CUDA 12.5.1).
# gobn's GPU kernels go where TensorFlow's do: each sm_XX and compute_XX gets
# a cubin for XX, and the newest also gets PTX, which the driver JIT-compiles
# on a newer GPU than any of these. This is the one place the list lives:
# manifest.json carries it to the tests (python_tests/test_cuda_build.py).
CUDA_COMPUTE_CAPABILITIES = ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")

# NVRTC options for every compile; -I for the source's directory and the
# wheels' include directories, and --gpu-architecture, are added per call.
NVRTC_OPTIONS = ("-std=c++17",)
# Only for the cubin compiles (a compute_XX compile runs no ptxas): ptxas
# prints each function's registers, spills, stack frame and shared memory into
# NVRTC's program log.
PTXAS_VERBOSE = "--ptxas-options=-v"

# nvFatbinCreate's options. Uncompressed: any CUDA 12 driver loads the fatbin
# whatever compression modes it knows, and the tests read its payloads.
FATBIN_OPTIONS = ("-64", "-host=linux", "-compress=false")

DEFAULT_SOURCE = os.path.join(ROOT, "kernels", "cuda", "batchnorm.cu")
DEFAULT_FATBIN = os.path.join(ROOT, "kernels", "cuda", "gobn.fatbin")
DEFAULT_BUILD_DIR = os.path.join(ROOT, "build", "cuda")


def arch_numbers():
    """Returns (the cubin architectures as ints, ascending; the PTX architecture)."""
    sass = []
    for cc in CUDA_COMPUTE_CAPABILITIES:
        m = re.fullmatch(r"(sm|compute)_(\d+)", cc)
        if not m:
            sys.exit(f"cuda_fatbin: bad entry {cc!r} in CUDA_COMPUTE_CAPABILITIES")
        sass.append(int(m.group(2)))
    sass = sorted(set(sass))
    return sass, sass[-1]


# ---------------------------------------------------------------- the wheels


def nvidia_dirs():
    """The directories of the `nvidia` namespace package the wheels install."""
    try:
        import nvidia  # noqa: PLC0415
    except ImportError:
        sys.exit("cuda_fatbin: no `nvidia` package: install requirements.txt into "
                 "this Python (make does), e.g. .venv/bin/python -m tools.cuda_fatbin")
    return list(nvidia.__path__)


def wheel_path(component, *parts):
    """The path of parts under nvidia/<component> in any of nvidia's directories."""
    for d in nvidia_dirs():
        p = os.path.join(d, component, *parts)
        if os.path.exists(p):
            return p
    sys.exit(f"cuda_fatbin: nvidia/{component}/{'/'.join(parts)} not found in "
             f"{nvidia_dirs()}: is its wheel (requirements.txt) installed?")


class Library:
    """A library of the pinned nvidia wheels through ctypes: each function
    named in signatures takes those argument types and returns a status,
    which error_string names."""

    def __init__(self, component, soname, signatures, error_string):
        self.path = wheel_path(component, "lib", soname)
        self.lib = ctypes.CDLL(self.path)
        for name, args in signatures:
            f = getattr(self.lib, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        self._error_string = getattr(self.lib, error_string)
        self._error_string.argtypes = [ctypes.c_int]
        self._error_string.restype = ctypes.c_char_p

    def error_string(self, res):
        return (self._error_string(res) or b"?").decode()


P = ctypes.c_void_p
SIZE = ctypes.POINTER(ctypes.c_size_t)


class Nvrtc(Library):
    def __init__(self):
        # libnvrtc dlopens libnvrtc-builtins.so.12.X, found beside it by its
        # RUNPATH $ORIGIN.
        super().__init__("cuda_nvrtc", "libnvrtc.so.12", (
            ("nvrtcVersion", [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]),
            ("nvrtcGetNumSupportedArchs", [ctypes.POINTER(ctypes.c_int)]),
            ("nvrtcGetSupportedArchs", [ctypes.POINTER(ctypes.c_int)]),
            ("nvrtcCreateProgram", [ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.c_int, P, P]),
            ("nvrtcDestroyProgram", [ctypes.POINTER(P)]),
            ("nvrtcCompileProgram", [P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
            ("nvrtcGetProgramLogSize", [P, SIZE]),
            ("nvrtcGetProgramLog", [P, ctypes.c_char_p]),
            ("nvrtcGetPTXSize", [P, SIZE]),
            ("nvrtcGetPTX", [P, ctypes.c_char_p]),
            ("nvrtcGetCUBINSize", [P, SIZE]),
            ("nvrtcGetCUBIN", [P, ctypes.c_char_p]),
        ), "nvrtcGetErrorString")

    def check(self, res, what):
        if res != 0:
            raise RuntimeError(f"{what}: {self.error_string(res)} ({res})")

    def version(self):
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return f"{major.value}.{minor.value}"

    def supported_archs(self):
        n = ctypes.c_int()
        self.check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * n.value)()
        self.check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        return list(archs)

    def compile(self, source, name, options, cubin):
        """Compiles source; returns (ok, log, code). code is the cubin when
        cubin, else the PTX (with its terminating NUL)."""
        prog = ctypes.c_void_p()
        self.check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None),
                   "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            res = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            n = ctypes.c_size_t()
            self.check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
            buf = ctypes.create_string_buffer(n.value)
            self.check(self.lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
            log = buf.value.decode(errors="replace")
            if res != 0:
                return False, f"nvrtcCompileProgram: {self.error_string(res)}\n{log}", None
            size_f, get_f = ((self.lib.nvrtcGetCUBINSize, self.lib.nvrtcGetCUBIN) if cubin
                             else (self.lib.nvrtcGetPTXSize, self.lib.nvrtcGetPTX))
            self.check(size_f(prog, ctypes.byref(n)), size_f.__name__)
            code = ctypes.create_string_buffer(n.value)
            self.check(get_f(prog, code), get_f.__name__)
            return True, log, code.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


class Fatbin(Library):
    def __init__(self):
        super().__init__("nvfatbin", "libnvfatbin.so.12", (
            ("nvFatbinVersion", [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]),
            ("nvFatbinCreate", [ctypes.POINTER(P), ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]),
            ("nvFatbinDestroy", [ctypes.POINTER(P)]),
            ("nvFatbinAddCubin", [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p]),
            ("nvFatbinAddPTX", [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_char_p]),
            ("nvFatbinSize", [P, SIZE]),
            ("nvFatbinGet", [P, ctypes.c_char_p]),
        ), "nvFatbinGetErrorString")

    def check(self, res, what):
        if res != 0:
            sys.exit(f"cuda_fatbin: {what}: {self.error_string(res)} (nvFatbinResult {res})")

    def version(self):
        major, minor = ctypes.c_uint(), ctypes.c_uint()
        self.check(self.lib.nvFatbinVersion(ctypes.byref(major), ctypes.byref(minor)), "nvFatbinVersion")
        return f"{major.value}.{minor.value}"

    def pack(self, cubins, ptx_arch, ptx, identifier):
        """cubins: [(arch int, bytes)]; ptx: bytes. Returns the fatbin."""
        h = ctypes.c_void_p()
        opts = (ctypes.c_char_p * len(FATBIN_OPTIONS))(*[o.encode() for o in FATBIN_OPTIONS])
        self.check(self.lib.nvFatbinCreate(ctypes.byref(h), opts, len(FATBIN_OPTIONS)), "nvFatbinCreate")
        try:
            for arch, cubin in cubins:
                self.check(self.lib.nvFatbinAddCubin(h, cubin, len(cubin), str(arch).encode(),
                                                     f"{identifier}.sm_{arch}".encode()),
                           f"nvFatbinAddCubin sm_{arch}")
            self.check(self.lib.nvFatbinAddPTX(h, ptx, len(ptx), str(ptx_arch).encode(),
                                               f"{identifier}.compute_{ptx_arch}".encode(), b""),
                       f"nvFatbinAddPTX compute_{ptx_arch}")
            n = ctypes.c_size_t()
            self.check(self.lib.nvFatbinSize(h, ctypes.byref(n)), "nvFatbinSize")
            buf = ctypes.create_string_buffer(n.value)
            self.check(self.lib.nvFatbinGet(h, buf), "nvFatbinGet")
            return buf.raw
        finally:
            self.lib.nvFatbinDestroy(ctypes.byref(h))


# ------------------------------------------------------------ ptxas' lines

# ptxas -v, as NVRTC 12.9 puts it in the program log, per function:
#   ptxas info    : Compiling entry function 'k' for 'sm_90'
#   ptxas info    : Function properties for k
#   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 16 registers, used 1 barriers, 1024 bytes smem, 344 bytes cmem[0]
#   ptxas info    : Compile time = 2.259 ms
# The Used line adds "N bytes cumulative stack size" when the kernel or a
# callee has a frame, and has no cmem[0] on sm_90. A non-entry (noinline)
# function gets only its "Function properties" line and the frame line; its
# mangled name is what ptxas prints. Records: "entry" tells kernels apart;
# "registers" is None for a non-entry function.
_RE_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(\w+)'")
_RE_FUNC = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")


def parse_ptxas(log, arch):
    """Returns one dict per function in ptxas -v's lines of log."""
    records = {}
    order = []
    entries = set()
    current = None

    def rec(name):
        if name not in records:
            records[name] = {"arch": f"sm_{arch}", "kernel": name, "entry": False, "registers": None,
                             "spill_stores": None, "spill_loads": None, "stack": None, "smem": 0,
                             "cmem0": None, "barriers": None, "cumulative_stack": None}
            order.append(name)
        return records[name]

    for line in log.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            if m.group(2) != f"sm_{arch}":
                raise ValueError(f"ptxas compiled {m.group(1)} for {m.group(2)}, not sm_{arch}")
            current = m.group(1)
            entries.add(current)
            rec(current)["entry"] = True
            continue
        m = _RE_FUNC.search(line)
        if m:
            current = m.group(1)
            rec(current)
            continue
        m = _RE_FRAME.search(line)
        if m and current is not None:
            r = rec(current)
            r["stack"], r["spill_stores"], r["spill_loads"] = map(int, m.groups())
            continue
        m = _RE_USED.search(line)
        if m and current is not None:
            r = rec(current)
            r["registers"] = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            r["barriers"] = int(b.group(1)) if b else None
            s = re.search(r"(\d+) bytes smem", line)
            r["smem"] = int(s.group(1)) if s else 0
            c = re.search(r"(\d+) bytes cmem\[0\]", line)
            r["cmem0"] = int(c.group(1)) if c else None
            c = re.search(r"(\d+) bytes cumulative stack size", line)
            r["cumulative_stack"] = int(c.group(1)) if c else r["stack"]
            current = None
    out = [records[n] for n in order]
    for r in out:
        # ptxas gives a non-entry function's frame, not its registers (they
        # count in its callers').
        need = ("registers", "spill_stores", "spill_loads", "stack") if r["entry"] else (
            "spill_stores", "spill_loads", "stack")
        missing = [k for k in need if r[k] is None]
        if missing:
            raise ValueError(f"ptxas lines for {r['kernel']} on sm_{arch} lack {missing}:\n{log}")
    return out


def ptxas_lines(log):
    return [line for line in log.splitlines() if line.startswith("ptxas") or _RE_FRAME.search(line)]


# NVRTC 12.9 prints this for sm_60 and sm_70 and has no option that silences
# it (-Wno-deprecated-gpu-targets is nvcc's only; -w keeps it). TensorFlow
# 2.21 still runs on both, so they stay, and the line is not repeated.
_DEPRECATED_ARCH = "nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated"


def other_lines(log):
    """The log without ptxas' info lines: NVRTC's and ptxas' warnings."""
    keep = []
    for line in log.splitlines():
        if (line.startswith("ptxas info") or _RE_FRAME.search(line) or not line.strip()
                or line.startswith(_DEPRECATED_ARCH)):
            continue
        keep.append(line)
    return keep


# ---------------------------------------------------------------- the build

_nvrtc = None


def _compile_job(job):
    """One compile, in a worker process: (ok, log, code)."""
    global _nvrtc
    if _nvrtc is None:
        _nvrtc = Nvrtc()
    text, name, opts, cubin = job
    return _nvrtc.compile(text, name, opts, cubin)



WHEELS = ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12",
          "nvidia-nvfatbin-cu12")


def wheel_versions():
    from importlib import metadata  # noqa: PLC0415
    out = {}
    for w in WHEELS:
        try:
            out[w] = metadata.version(w)
        except metadata.PackageNotFoundError:
            out[w] = None
    return out


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def rel(path):
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def write_atomic(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", nargs="?", default=DEFAULT_SOURCE,
                    help="the .cu translation unit (default: kernels/cuda/batchnorm.cu)")
    ap.add_argument("--fatbin", default=DEFAULT_FATBIN, help="output fatbin (default: kernels/cuda/gobn.fatbin)")
    ap.add_argument("--build-dir", default=DEFAULT_BUILD_DIR,
                    help="where ptxas.txt and manifest.json go (default: build/cuda)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="compiles at once, each in a process (default: the CPUs)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print no summary")
    args = ap.parse_args()

    source = os.path.abspath(args.source)
    if not os.path.isfile(source):
        sys.exit(f"cuda_fatbin: no source {args.source}")
    srcdir = os.path.dirname(source)
    with open(source, "rb") as f:
        text = f.read()

    sass, ptx_arch = arch_numbers()
    nvrtc = Nvrtc()
    fatbin = Fatbin()
    supported = nvrtc.supported_archs()
    unsupported = [a for a in sass if a not in supported]
    if unsupported:
        sys.exit(f"cuda_fatbin: NVRTC {nvrtc.version()} cannot compile for {unsupported} "
                 f"(it supports {supported})")

    includes = [srcdir, wheel_path("cuda_runtime", "include"), wheel_path("cuda_cccl", "include")]
    base = list(NVRTC_OPTIONS) + [f"-I{d}" for d in includes]
    name = rel(source)  # NVRTC's diagnostics name the file so
    jobs = [(a, True, base + [f"--gpu-architecture=sm_{a}", PTXAS_VERBOSE]) for a in sass]
    jobs.append((ptx_arch, False, base + [f"--gpu-architecture=compute_{ptx_arch}"]))

    results = {}
    failed = {}  # log without the deprecation line -> the architectures
    # Each compile in a spawned process: NVRTC mostly serializes compiles in
    # threads, and processes forked after this one loaded NVRTC gain nothing
    # either; only spawned ones run side by side.
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, min(args.jobs, len(jobs))),
                                                mp_context=multiprocessing.get_context("spawn")) as ex:
        for (arch, cubin, opts), (ok, log, code) in zip(jobs, ex.map(
                _compile_job, [(text, name, opts, cubin) for _, cubin, opts in jobs])):
            what = f"sm_{arch}" if cubin else f"compute_{arch}"
            if not ok:
                # Mostly the same error on every architecture: each distinct
                # log once, naming the architectures it came from.
                key = "\n".join(line for line in log.splitlines() if not line.startswith(_DEPRECATED_ARCH))
                if key not in failed:
                    print(f"cuda_fatbin: {name} failed to compile for {what} "
                          f"(nvrtc {' '.join(opts)}):\n{key}", file=sys.stderr)
                failed.setdefault(key, []).append(what)
                results[what] = log
                continue
            warnings = other_lines(log)
            if warnings:
                print(f"cuda_fatbin: {what}:\n" + "\n".join(warnings), file=sys.stderr)
            results[what] = (log, code)
    if failed:
        for archs in failed.values():
            print(f"cuda_fatbin: the log above: {' '.join(archs)}", file=sys.stderr)
        sys.exit(1)

    cubins = [(a, results[f"sm_{a}"][1]) for a in sass]
    ptx = results[f"compute_{ptx_arch}"][1]
    ptxas = []
    kernels_by_arch = {}
    for a in sass:
        recs = parse_ptxas(results[f"sm_{a}"][0], a)
        if not any(r["entry"] for r in recs):
            sys.exit(f"cuda_fatbin: ptxas reported no entry function for sm_{a}: "
                     f"no extern \"C\" __global__ kernel in {name}?\n{results[f'sm_{a}'][0]}")
        ptxas.extend(recs)
        kernels_by_arch[a] = sorted(r["kernel"] for r in recs if r["entry"])
    kernels = kernels_by_arch[sass[-1]]
    for a in sass:
        if kernels_by_arch[a] != kernels:
            sys.exit(f"cuda_fatbin: sm_{a} has kernels {kernels_by_arch[a]}, sm_{sass[-1]} {kernels}: "
                     f"every architecture must have the same kernels")
    ptx_entries = sorted(re.findall(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*\(", ptx))
    if [k.decode() for k in ptx_entries] != kernels:
        sys.exit(f"cuda_fatbin: the PTX has entries {ptx_entries}, the cubins {kernels}")

    blob = fatbin.pack(cubins, ptx_arch, ptx, os.path.splitext(os.path.basename(source))[0])

    # Hashes of the source and every header beside it (NVRTC does not say
    # which it read): the tests compare them with the files to catch a stale
    # fatbin.
    inputs = {}
    for p in sorted({source} | set(glob.glob(os.path.join(srcdir, "*.cuh")))
                    | set(glob.glob(os.path.join(srcdir, "*.h")))):
        with open(p, "rb") as f:
            inputs[rel(p)] = sha256(f.read())

    ptx_isa = re.search(rb"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    manifest = {
        "tool": "tools/cuda_fatbin.py",
        "wheels": wheel_versions(),
        # The driver JIT-compiles the PTX only if it knows this PTX ISA
        # version (8.8: a CUDA 12.9 driver, r575, or newer); the cubins load
        # on any CUDA 12 driver.
        "ptx_isa_version": ptx_isa.group(1).decode() if ptx_isa else None,
        "source": rel(source),
        "inputs_sha256": inputs,
        "cuda_compute_capabilities": list(CUDA_COMPUTE_CAPABILITIES),
        "sass_archs": [f"sm_{a}" for a in sass],
        "ptx_arch": f"compute_{ptx_arch}",
        "nvrtc_version": nvrtc.version(),
        "nvrtc_library": os.path.realpath(nvrtc.path),
        "nvfatbin_version": fatbin.version(),
        "nvrtc_options": list(NVRTC_OPTIONS) + ["-I<source dir>", "-I<cuda_runtime/include>",
                                                "-I<cuda_cccl/include>", "--gpu-architecture=...",
                                                PTXAS_VERBOSE + " (cubins)"],
        "nvfatbin_options": list(FATBIN_OPTIONS),
        "kernels": kernels,
        "cubin_bytes": {f"sm_{a}": len(c) for a, c in cubins},
        "ptx_bytes": len(ptx),
        "fatbin": rel(args.fatbin),
        "fatbin_bytes": len(blob),
        "fatbin_sha256": sha256(blob),
    }
    build_dir = os.path.abspath(args.build_dir)
    # NVRTC's whole log per compile, for a person reading past ptxas.txt.
    write_atomic(os.path.join(build_dir, "nvrtc.log"), "".join(
        f"==== {what}: nvrtc {' '.join(opts)}\n{results[what][0]}\n"
        for what, opts in ((f"sm_{a}" if c else f"compute_{a}", o) for a, c, o in jobs)).encode())
    write_atomic(os.path.join(build_dir, "ptxas.txt"),
                 "".join(json.dumps(r, sort_keys=True) + "\n" for r in ptxas).encode())
    write_atomic(os.path.join(build_dir, "manifest.json"),
                 (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    write_atomic(os.path.abspath(args.fatbin), blob)

    # python_tests/test_cuda_build.py fails on these; the build goes on so
    # that ptxas.txt shows them all.
    for r in ptxas:
        if r["spill_stores"] or r["spill_loads"] or r["stack"]:
            print(f"cuda_fatbin: warning: {r['arch']} {r['kernel']}: {r['stack']} bytes stack frame, "
                  f"{r['spill_stores']} bytes spill stores, {r['spill_loads']} bytes spill loads",
                  file=sys.stderr)
    if not args.quiet:
        print(f"cuda_fatbin: {rel(args.fatbin)}: {len(blob)} bytes, {len(kernels)} kernels, "
              f"SASS {' '.join(manifest['sass_archs'])} + PTX {manifest['ptx_arch']} "
              f"(NVRTC {manifest['nvrtc_version']})")
        for a in sass:
            worst = max((r for r in ptxas if r["arch"] == f"sm_{a}" and r["entry"]),
                        key=lambda r: r["registers"])
            print(f"  sm_{a}: cubin {len(dict(cubins)[a])} bytes, most registers {worst['registers']} "
                  f"({worst['kernel']})")


if __name__ == "__main__":
    main()
