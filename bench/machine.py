"""The machine a demo or benchmark ran on, as they report it, and what
TensorFlow's oneDNN takes on its CPU (bench.calls and the tests ask)."""
import os
import platform

from tools.checkout import ROOT  # records show the checkout's paths relative to it (portable)


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, or platform's guess."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def core_count():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty where it has none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


def onednn_takes(dtype):
    """Whether TensorFlow hands ops of dtype (a name: "float32", "bfloat16",
    "float16") that it has oneDNN kernels for to oneDNN on this CPU, as
    TensorFlow's IsDataTypeSupportedByOneDNNOnThisCPU asks ("oneDNN supports
    DT_HALF only on platforms with AVX-512. Falling back to the default
    Eigen-based implementation"): float32 always; bfloat16 with AVX-512 or
    AVX-NE-CONVERT; float16 with AVX-512 BW and FP16 arithmetic (AVX512_FP16
    or AMX_FP16), or AVX-NE-CONVERT. A Xeon VM may pass on AVX-512 without
    AVX512_FP16: bfloat16 goes to oneDNN there, float16 to Eigen."""
    flags = cpu_flags()
    if dtype == "float32":
        return True
    if dtype == "bfloat16":
        return bool(flags & {"avx512f", "avx_ne_convert"})
    if dtype == "float16":
        return "avx_ne_convert" in flags or ("avx512bw" in flags and bool(flags & {"avx512_fp16", "amx_fp16"}))
    return False


def portable(arg):
    """arg as a record shows it: a path inside the checkout relative to it,
    any other absolute path by its name alone (no machine's paths in bench/);
    an option's value given as --name=path likewise."""
    if arg.startswith("--") and "=" in arg:
        name, value = arg.split("=", 1)
        return f"{name}={portable(value)}"
    if os.path.isabs(arg):
        rel = os.path.relpath(arg, ROOT)
        return rel if not rel.startswith("..") else os.path.basename(arg)
    return arg


def command_line(spec, args):
    """The run as a record names it: python -m and module spec's name (a
    module's __spec__), then args, each portable."""
    return " ".join(["python", "-m", spec.name] + [portable(a) for a in args])
