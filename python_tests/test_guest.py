"""Behaviour as a guest: gobn writes nothing to stdout, reads only the
environment variables docs/reliability.md names, changes only the signal
handlers it names, and leaves Ctrl-C working in the Python process that
loaded it.

Each check runs in a child Python (this file run as a script with the check's
name), so that what the library does at load time is seen in a fresh process.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import BUILT_LIBRARY, REPO_ROOT, child_env

RELIABILITY = os.path.join(REPO_ROOT, "docs", "reliability.md")

# The signals Go's runtime installs handlers for when it starts inside a
# non-Go process as a c-shared library: the synchronous signals it turns into
# panics, SIGPIPE, and SIGURG for goroutine preemption (see docs/reliability.md).
GO_SIGNALS = {"SIGBUS", "SIGFPE", "SIGSEGV", "SIGPIPE", "SIGURG"}

# The environment variables Go's runtime reads at start-up.
GO_RUNTIME_ENV = {"GOGC", "GOMEMLIMIT", "GODEBUG", "GOMAXPROCS", "GOTRACEBACK"}


def child_command(check, *args):
    """The command of a child that runs check: started with SIGINT ignored,
    as `nohup make test` or a background job starts this suite, so that the
    checks hold however the suite was started (the child resets it; see
    the end of this file)."""
    return ["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, os.path.abspath(__file__), check, *args]


def run_child(check, *args, **kwargs):
    return subprocess.run(child_command(check, *args), capture_output=True, text=True, env=child_env(), timeout=120,
                          **kwargs)


def reliability_section():
    """docs/reliability.md, whose 'gobn as a guest' section names what a load changes."""
    text = open(RELIABILITY, encoding="utf-8").read()
    assert re.search(r"^## gobn as a guest in your process$", text, re.M), \
        "docs/reliability.md has no '## gobn as a guest in your process' section"
    return text


def test_writes_nothing_to_stdout(tmp_path):
    report = tmp_path / "report.json"
    proc = run_child("quiet", str(report))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == "", f"the library wrote to stdout: {proc.stdout[:2000]!r}"
    result = json.loads(report.read_text())
    assert result["accepted"] > 0 and result["rejected"] > 0, result
    # Nothing from Go's runtime on stderr either (a panic, a fatal error, a trace).
    for marker in ("goroutine ", "panic:", "fatal error:", "runtime:", "SIGSEGV"):
        assert marker not in proc.stderr, f"{marker!r} on stderr:\n{proc.stderr[-3000:]}"


def library_sources():
    """Source files of gobn's packages linked into libgobn.so (go list, else capi, kernels, opdef)."""
    dirs = None
    go = shutil.which("go")
    if go:
        proc = subprocess.run([go, "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", "./capi"],
                              cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode == 0:
            dirs = [d for d in proc.stdout.split() if d.startswith(REPO_ROOT)]
    if not dirs:
        dirs = [os.path.join(REPO_ROOT, d) for d in ("capi", "kernels", "opdef")]
    files = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if re.search(r"\.(go|c|h|cc|cu)$", name) and not name.endswith("_test.go"):
                files.append(os.path.join(d, name))
    return files


def test_reads_only_documented_environment_variables():
    pattern = re.compile(r"(?:os\.Getenv|os\.LookupEnv|syscall\.Getenv|\bgetenv|secure_getenv)\(\s*\"(\w+)\"")
    dynamic = re.compile(r"os\.Environ\(|os\.ExpandEnv|(?:os\.Getenv|os\.LookupEnv|\bgetenv)\(\s*[^\"\s]")
    read, unknown = set(), []
    for path in library_sources():
        text = open(path, errors="replace").read()
        read |= set(pattern.findall(text))
        unknown += [f"{os.path.relpath(path, REPO_ROOT)}: {m.group(0)}" for m in dynamic.finditer(text)]
    assert not unknown, f"environment read with a name that is not a literal: {unknown}"
    section = reliability_section()
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", section))
    missing = (read | GO_RUNTIME_ENV) - documented
    assert not missing, f"environment variables read but not named in docs/reliability.md: {missing}"


def test_signal_handlers():
    proc = run_child("signals")
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    added = set(report["added"])
    assert added <= GO_SIGNALS, f"loading gobn installed handlers for {added - GO_SIGNALS}"
    assert report["sigint_handler"] == "default_int_handler", report
    for name, flags in report["unchanged"].items():
        assert flags["before"] == flags["after"], f"{name}: handler changed by loading gobn: {flags}"
    documented = set(re.findall(r"`(SIG[A-Z]+)`", reliability_section()))
    assert GO_SIGNALS <= documented, f"docs/reliability.md does not name {GO_SIGNALS - documented}"


def test_sigint_raises_keyboard_interrupt():
    proc = run_child("sigint")
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[:1] == ["interrupted"], proc.stdout
    report = json.loads(lines[-1])
    assert report["interrupted_during_ops"] == report["tries"], report


def test_ctrl_c_from_outside_stops_a_loop_of_ops():
    """As a terminal's Ctrl-C: SIGINT to the process while it runs ops in a loop."""
    proc = subprocess.Popen(child_command("loop"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env())
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-3000:]
        time.sleep(0.5)  # let it run ops for a while
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the process did not stop on SIGINT", pytrace=False)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert out.strip().startswith("interrupted after"), out


def test_go_runtime_is_gos_own():
    """libgobn.so carries Go's own runtime, as `go version` reads it from the
    library: the Go version alone, e.g. "go1.26.8-X:simd" (docs/performance.md
    says why)."""
    go = shutil.which("go")
    assert go, "go is needed to build the library, and reads its version"
    out = subprocess.run([go, "version", BUILT_LIBRARY], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    reported = out.stdout.split(": ", 1)[1].strip()
    assert re.fullmatch(r"go1\.\d+\S*", reported), reported


# ---------------------------------------------------------------------------
# The children.


def load():
    import tensorflow as tf

    import gobn

    return tf, gobn.ops


def sample_calls(tf, lib):
    """(fn, kwargs, valid) for every op: a valid call, and a rejected one,
    on a 4x16x16x32 activation (support.sample_calls)."""
    import support

    return support.sample_calls(lambda op: getattr(lib, op.wrapper), (4, 16, 16, 32))


def run_calls(tf, calls):
    accepted = rejected = 0
    for fn, kwargs, valid in calls:
        try:
            fn(**kwargs)
            accepted += 1
        except tf.errors.InvalidArgumentError:
            rejected += 1
    return accepted, rejected


def child_quiet(report_path):
    tf, lib = load()
    calls = sample_calls(tf, lib)
    accepted, rejected = 0, 0
    for _ in range(3):
        a, r = run_calls(tf, calls)
        accepted, rejected = accepted + a, rejected + r
    fn, kwargs, _ = calls[0]
    tf.function(lambda: fn(**kwargs))()
    with open(report_path, "w") as f:
        json.dump({"accepted": accepted, "rejected": rejected}, f)


def caught_signals():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                mask = int(line.split()[1], 16)
    names = {s.value: s.name for s in signal.Signals}
    return {names.get(i + 1, str(i + 1)) for i in range(64) if mask >> i & 1}


def sigaction_flags(signum):
    """(handler address, sa_flags) of signum, read with sigaction(2) (glibc, x86-64/aarch64 layout)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if libc.sigaction(signum, None, buf) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
    return [int.from_bytes(buf.raw[0:8], "little"), int.from_bytes(buf.raw[136:140], "little")]


def child_signals():
    import tensorflow as tf

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1)
    before_mask = caught_signals()
    before = {s.name: sigaction_flags(s) for s in watched}
    import gobn

    lib = gobn.ops
    run_calls(tf, sample_calls(tf, lib))
    after = {s.name: sigaction_flags(s) for s in watched}
    report = {
        "added": sorted(caught_signals() - before_mask),
        "unchanged": {name: {"before": before[name], "after": after[name]} for name in before},
        "sigint_handler": getattr(signal.getsignal(signal.SIGINT), "__name__", str(signal.getsignal(signal.SIGINT))),
    }
    print(json.dumps(report))


def child_sigint():
    import threading

    tf, lib = load()
    calls = sample_calls(tf, lib)
    run_calls(tf, calls)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs at the next bytecode boundary
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    # SIGINT sent from another thread while gobn's kernels run: it may land
    # on any thread, a Go one included; KeyboardInterrupt must follow.
    big = [c for c in calls if c[2]]
    tries, interrupted = 20, 0
    for i in range(tries):
        timer = threading.Timer(0.002 * (i % 5), os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            for _ in range(200):
                run_calls(tf, big)
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            timer.join()
    run_calls(tf, calls)  # still works afterwards
    print(json.dumps({"tries": tries, "interrupted_during_ops": interrupted}))


def child_loop():
    tf, lib = load()
    calls = sample_calls(tf, lib)
    run_calls(tf, calls)
    print("ready", flush=True)
    n = 0
    try:
        while True:
            run_calls(tf, calls)
            n += 1
    except KeyboardInterrupt:
        print(f"interrupted after {n} rounds", flush=True)
    except RuntimeError as e:
        # When SIGINT lands while TensorFlow's pybind11 layer is raising the
        # error of a rejected call (the loop makes some), pybind11 reports
        # the KeyboardInterrupt wrapped in a RuntimeError (the exception being
        # raised is TensorFlow's _NotOkStatusException, in its core.py). Only
        # that wrapping counts as the interrupt.
        if "REPLACED BY KeyboardInterrupt" not in str(e):
            raise
        print(f"interrupted after {n} rounds (through pybind11)", flush=True)


if __name__ == "__main__":
    # A process started with SIGINT ignored (by nohup, or as a background job
    # of a shell without job control) hands SIG_IGN on to its children, and
    # Python then installs no handler of its own: each check is of a Python
    # process as a terminal starts it, with Python's handler in place.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    check = sys.argv[1]
    {"quiet": lambda: child_quiet(sys.argv[2]), "signals": child_signals, "sigint": child_sigint,
     "loop": child_loop}[check]()
