"""The machine a demo or benchmark ran on, as both scripts report it."""
import os
import platform


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
