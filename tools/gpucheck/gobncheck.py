"""ctypes binding of libgobncheck.so (cmd/gpucheck), for bench.py.

The library runs a call of an op family's CUDA path (device pointers, a
CUstream, a workspace; the kernels/cuda package) and answers its workspace
query, each taking the call as a gobncheck_call struct (Call here). See the
package doc of cmd/gpucheck for each family's scalars and tensors.
"""

import argparse
import ctypes
import json
import os
import pathlib
import sys

DTYPE_CODE = {"float": 0, "half": 1, "bfloat16": 2}
LAYOUT_CODE = {"NHWC": 0, "NDHWC": 0, "NCHW": 1, "NCDHW": 1}


class GobnError(RuntimeError):
    """A call into the library returned an error."""


def find_library():
    """The library: $GOBNCHECK_LIB, else beside this script (the bundle in
    build/gpu), else build/gpu of the repository holding this script."""
    here = pathlib.Path(__file__).resolve().parent
    candidates = []
    if os.environ.get("GOBNCHECK_LIB"):
        candidates.append(pathlib.Path(os.environ["GOBNCHECK_LIB"]))
    candidates += [here / "libgobncheck.so", here.parent.parent / "build" / "gpu" / "libgobncheck.so"]
    for c in candidates:
        if c.is_file():
            return str(c)
    raise FileNotFoundError("libgobncheck.so not found (tried %s); run make gpu-bundle"
                            % ", ".join(map(str, candidates)))


_i, _i64, _f = ctypes.c_int, ctypes.c_int64, ctypes.c_float
_dp = ctypes.c_size_t  # a device pointer (uintptr_t)


class Call(ctypes.Structure):
    """gobncheck_call: one call of a family's CUDA path."""
    _fields_ = [("family", _i), ("dtype", _i), ("layout", _i), ("n", _i64), ("c", _i64), ("s", _i64),
                ("flag", _i), ("count", _i64), ("epsilon", _f), ("tensors", _dp * 10)]


# family: its code, the Call fields its scalars go to (in the order gpu() and
# workspace() take them), and its number of tensors.
_FAMILIES = {
    "fused": (0, ("flag", "epsilon"), 8),    # training, epsilon; dy x scale rs1 rs2 dx dscale doffset
    "global": (1, ("flag", "epsilon"), 10),  # scale_after, eps; t m v gamma backprop dx dm dv db dg
    "reduce": (2, (), 5),                    # dy x mean sum_dy sum_dy_xmu
    "apply": (3, ("count", "epsilon"), 8),   # count, eps; dy x scale mean var sum_dy sum_dy_xmu dx
}


class Lib:
    def __init__(self, path=None):
        self.path = path or find_library()
        so = ctypes.CDLL(self.path)
        self._so = so
        for name in ("gobncheck_error", "gobncheck_available", "gobncheck_launches", "gobncheck_info"):
            fn = getattr(so, name)
            fn.argtypes = []
            fn.restype = ctypes.c_char_p
        so.gobncheck_call_bytes.argtypes = []
        so.gobncheck_call_bytes.restype = _i64
        if so.gobncheck_call_bytes() != ctypes.sizeof(Call):
            raise GobnError("%s: gobncheck_call is %d bytes, this binding's Call %d: rebuild the bundle"
                            % (self.path, so.gobncheck_call_bytes(), ctypes.sizeof(Call)))
        so.gobncheck_gpu.argtypes = [ctypes.POINTER(Call), _dp, _dp, _i64]
        so.gobncheck_gpu.restype = _i
        so.gobncheck_workspace.argtypes = [ctypes.POINTER(Call)]
        so.gobncheck_workspace.restype = _i64

    def error(self):
        b = self._so.gobncheck_error()
        return b.decode() if b else ""

    def available(self):
        """None when the CUDA path can run, else the reason."""
        b = self._so.gobncheck_available()
        return b.decode() if b else None

    def launches(self):
        b = self._so.gobncheck_launches()
        if b is None:
            raise GobnError(self.error())
        return {k: int(v) for k, v in json.loads(b.decode()).items()}

    def info(self):
        return json.loads(self._so.gobncheck_info().decode())

    @staticmethod
    def call(family, dtype, layout, N, C, S, scalars, ptrs):
        """The Call of family on tensors N x C x S at the device addresses
        ptrs, with its scalars (the package doc of cmd/gpucheck
        lists each family's), for gpu() and workspace(); built once, so
        that timing a call times no building of it."""
        code, fields, ntensors = _FAMILIES[family]
        if len(scalars) != len(fields) or len(ptrs) != ntensors:
            raise ValueError("%s takes %d scalars and %d tensors, not %d and %d"
                             % (family, len(fields), ntensors, len(scalars), len(ptrs)))
        call = Call(family=code, dtype=DTYPE_CODE[dtype], layout=LAYOUT_CODE[layout], n=int(N), c=int(C), s=int(S))
        for field, value in zip(fields, scalars):
            setattr(call, field, value)
        for i, p in enumerate(ptrs):
            call.tensors[i] = int(p)
        return call

    def gpu(self, call, stream=0, workspace=0, workspace_bytes=0):
        """Runs call (a Call) on the CUstream and workspace given."""
        if self._so.gobncheck_gpu(ctypes.byref(call), int(stream), int(workspace), int(workspace_bytes)) != 0:
            raise GobnError(self.error())

    def workspace(self, call):
        """The workspace bytes call needs (they depend on the addresses too:
        the vector width follows their alignment)."""
        n = self._so.gobncheck_workspace(ctypes.byref(call))
        if n < 0:
            raise GobnError(self.error())
        return int(n)


def device_facts(torch):
    """GPU name, driver, torch/CUDA/cuDNN versions: what a result JSON states."""
    import subprocess
    facts = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda}
    try:
        facts["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        facts["cudnn"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        facts.update(gpu=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                     capability="%d.%d" % (p.major, p.minor))
        l2 = getattr(p, "L2_cache_size", None)
        if l2:
            facts["l2_bytes"] = int(l2)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            f = [s.strip() for s in out.stdout.strip().splitlines()[0].split(",")]
            facts.update(driver=f[0], smi_name=f[1], max_sm_clock=f[2], max_mem_clock=f[3])
    except Exception:  # noqa: BLE001
        pass
    return facts


def arguments(doc):
    """The command-line parser of a script of this bundle, with the options
    the scripts share."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libgobncheck.so (default: beside this script, or build/gpu)")
    ap.add_argument("--json", help="write the results here")
    return ap


def start(torch, lib, json_path):
    """Seeds torch and returns the facts a result JSON states: the command
    line and library (file names only: the results name no machine's paths)
    and the device's. None, after writing a failed result to json_path,
    when gobn's CUDA path is not available."""
    torch.manual_seed(0)
    facts = {"argv": [os.path.basename(a) for a in sys.argv], "lib": os.path.basename(lib.path),
             "lib_info": lib.info()}
    why = lib.available()
    if why is not None:
        print("gobn's CUDA path is not available: %s" % why)
        write_json(json_path, {"facts": facts, "ok": False, "error": "not available: %s" % why})
        return None
    facts.update(device_facts(torch))
    return facts


def write_json(path, obj):
    """Writes obj to path (nothing when path is empty), replacing it at once."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def context_broken(torch):
    """Whether the CUDA context no longer runs a kernel (a sticky error)."""
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        return True
    return False
