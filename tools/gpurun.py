"""One prepared run on a lent GPU machine: every GPU and 16-core record in a few calls.

A lent machine (an NVIDIA H100 or H200 beside 16 CPU cores, no network, no
Go, no TensorFlow: python3 is PyTorch's) comes for minutes, counted from its
start to its return, and takes what each call carries, 64 MiB a call. This
script spends them on measurement: the calls carry this repository with
build/gpurun (`make gpu-run`: the check bundle, libgobn.so, cmd/triad) and
the TensorFlow GPU kit's parts (its build.sh makes them, 58 MiB each), one a
call, while a pipeline started by the first call already runs what needs no
TensorFlow; the last call waits for the pipeline and writes every record into
$OUT, with a summary line a record (docs/gpu.md, "One prepared run on a lent
machine").

Here, before the machine is lent:

    make gpu-run GPU_RUN_KIT=build/tf-gpu-kit   # build/gpurun, then the calls (plan)
    python -m tools.gpurun dry-run --kit build/tf-gpu-kit --python PYTHON3.12 [--torch-python PY]

There, call by call, from the repository root (plan prints each call's carry):

    python3 -m tools.gpurun start [PART]           # carrying build/gpurun, and a part where both fit
    python3 -m tools.gpurun part PART... [--budget B]   # carrying the next part, one a call
    python3 -m tools.gpurun finish                 # waits for the pipeline, writes $OUT

The pipeline (`start` copies the repository and build/gpurun out of the
working tree, which later calls rewrite, and runs from the copy under a
process session of its own, so that it outlives the call):

  bundle       the CUDA check bundle (build/gpu/run.sh: cuda.test, the
               sanitizers, bench.py beside cuDNN), at once; its bench.py waits
               for test_device, so that it has the GPU alone        -> gpu.json
  kit          the kit's parts, as calls bring them: unpack.sh, then whether
               TensorFlow sees a GPU (smoke.py's report where it does not)
  test_device  python_tests/test_device.py --device GPU:0 --matrix quick,
               beside the bundle's checks                           -> gpu_tf.json
  then each alone, in this order (--stages), each within its limit:
  stream       bench/gpu_calls.py: a call on TensorFlow's stream, float and
               half, and the host profile of a small one            -> gpu_tf.json
  manycore     bench/manycore.py on every core, CUDA_VISIBLE_DEVICES=  -> manycore.json
  torch        bench/torch.py at every core's thread count, beside the
               machine's PyTorch, CUDA_VISIBLE_DEVICES=              -> torch.json
  models       bench/models.py's training steps on GPU:0, stock against
               gobn, each configuration of MODEL_CONFIGS while time is left,
               with XLA beside                                      -> gpu_tf.json

Every stage ends by its limit and by the pipeline's --budget, whichever comes
first; a stage that cannot start (no GPU, no kit, no time) is recorded as
skipped with why, never as passed. dry-run walks the same stages here,
without a GPU: the GPU stages are skipped, saying so, their commands
rehearsed on CPU:0 with tiny sizes (a rehearsal, not a record), and the CPU
stages run with tiny sizes.
"""

import argparse
import contextlib
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARRY = os.path.join("build", "gpurun")  # make gpu-run's folder, relative to the root
WORK = os.path.join(tempfile.gettempdir(), "gobn-gpurun")
CALL_BYTES = 64 << 20  # what one call may carry, the tree included
OUT_FILES, OUT_BYTES = 8, 16 << 20  # what comes back from $OUT
LOG_BYTES = 2 << 20  # a log's head and tail kept in logs.tar.gz

# The records, each written by the stages that name it.
RECORDS = {"gpu.json": ("bundle",), "gpu_tf.json": ("test_device", "stream", "models"),
           "manycore.json": ("manycore",), "torch.json": ("torch",)}
# The stages that run alone, in their default order (most owed first), and
# each one's limit in seconds.
ALONE = ("stream", "manycore", "torch", "models")
LIMITS = {"kit": 300, "test_device": 150, "bundle": 300, "stream": 75, "manycore": 170, "torch": 100,
          "models": 300}
# bench.py's seconds of timed rounds in the bundle (its deadline would give
# 60): every shape, fewer rounds each.
BUNDLE_BENCH_S = 30
# bench/manycore.py's --budget, under its stage's limit: TensorFlow's start
# and its training steps (about 90 s on 16 cores) come on top.
MANYCORE_BUDGET = 70
# bench/torch.py's cases (its --only), as many as fit in the stage's limit
# on 16 cores: ResNet-50's 42 of the 78 (bench/torch.py writes its record
# only at its end, so a run past the limit would leave none).
TORCH_ONLY = "resnet50"
# Training steps, route:data_format:batch:precision, in the order they run
# while time is left: first the one timed before (docs/gpu.md's), then the
# other route at both of what no run has had, batch 128 and mixed precision,
# then the rest.
MODEL_CONFIGS = ("tf_keras:channels_first:32:float32", "keras3:channels_last:128:mixed",
                 "keras3:channels_last:32:float32", "tf_keras:channels_first:128:mixed",
                 "tf_keras:channels_first:128:float32", "keras3:channels_last:128:float32",
                 "tf_keras:channels_first:32:mixed", "keras3:channels_last:32:mixed")
MODEL_ARGS = ("--models", "resnet50", "--image", "112", "--warmup", "2", "--rounds", "4", "--steps-per-round", "2",
              "--no-float64", "--xla")
# A configuration starts only where this many seconds are left (or as many
# as the last one took, where more).
MODEL_LEAST_S = 80


def now():
    return time.time()


# ---------------------------------------------------------------------------
# The pipeline's state: work/stages.json, one row a stage as it ends.


class State:
    def __init__(self, work):
        self.path = os.path.join(work, "stages.json")

    def load(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"stages": []}

    def save(self, data):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)

    def add(self, row):
        with self.lock():
            data = self.load()
            data["stages"].append(row)
            self.save(data)
        print(stage_line(row), flush=True)

    def update(self, **fields):
        with self.lock():
            data = self.load()
            data.update(fields)
            self.save(data)

    @contextlib.contextmanager
    def lock(self):
        """The pipeline and a call's verb (part --budget) both write the state."""
        with open(self.path + ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield


def stage_line(row):
    """A stage as the summary shows it: name, status, seconds, detail."""
    took = f", {row['seconds']:.0f} s" if row.get("seconds") is not None else ""
    at = f" (at {row['start_s']:.0f} s)" if row.get("start_s") is not None else ""
    detail = f": {row['detail']}" if row.get("detail") else ""
    return f"stage {row['stage']}: {row['status']}{took}{at}{detail}"


# ---------------------------------------------------------------------------
# Running a stage's command, within its limit.


class Command:
    """A command started in a process session of its own (its children end
    with it), output to its log."""
    running = set()  # the pipeline stops what still runs when it ends

    def __init__(self, argv, cwd, env, log):
        self.log = open(log, "ab")
        self.log.write(("$ " + " ".join(argv) + "\n").encode())
        self.log.flush()
        self.started = now()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        Command.running.add(self)

    def wait(self, limit):
        """rc, or None where it ran past limit seconds (then it is ended)."""
        try:
            rc = self.proc.wait(max(0.0, limit))
        except subprocess.TimeoutExpired:
            self.stop()
            rc = None
        self.log.close()
        Command.running.discard(self)
        return rc

    def stop(self):
        """Ends every process of its session, not only of its process group:
        timeout(1), which run.sh calls, gives its command a group of its own."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in session(self.proc.pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = now() + 10
            while session(self.proc.pid) and now() < end:
                self.proc.poll()  # reaps it once it ends
                time.sleep(0.2)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # stuck in the kernel (a GPU call): left to the machine's return
            pass


def session(sid):
    """The processes of session sid still there (/proc/PID/stat's sixth field)."""
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.split("/")[2]))
    return pids


def tail(path, lines=3):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-lines:] if line.strip())[:400]
    except OSError:
        return ""


class Pipeline:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.repo = os.path.join(self.work, "repo")
        self.records = os.path.join(self.work, "records")
        self.logs = os.path.join(self.work, "logs")
        for d in (self.records, self.logs):
            os.makedirs(d, exist_ok=True)
        self.state = State(self.work)
        self.t0 = self.state.load().get("started", now())
        self.kit_env = None  # the kit's env.sh once unpacked
        self.tf_gpu = False  # whether TensorFlow sees a GPU
        self.gpu = has_gpu()
        self.limits = dict(LIMITS, **args.limit)

    def left(self):
        """Seconds left of the budget, which a later call may change (part --budget)."""
        return self.t0 + self.state.load().get("budget_s", self.args.budget) - now()

    def record(self, stage, status, started=None, detail="", command=None, **more):
        row = dict(stage=stage, status=status, detail=detail, start_s=None if started is None else started - self.t0,
                   seconds=None if started is None else now() - started, command=command, **more)
        self.state.add(row)
        return row

    def env(self, **extra):
        env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
        env.pop("GOBN_LIBRARY", None)
        return env

    def tf_argv(self, argv, **kit_env):
        """argv run with TensorFlow: the kit's environment sourced first
        (kit_env before it, e.g. TF_GPU_KIT_CUBLAS), or the given Python's
        own TensorFlow where there is no kit."""
        if not self.kit_env:
            return argv
        sets = "".join(f"export {k}={v}; " for k, v in dict(kit_env, PYTHON=self.args.python).items())
        return ["bash", "-c", f'{sets}source "$1" && shift && exec "$@"', "bash", self.kit_env] + argv

    def run(self, stage, argv, limit, env=None, record=None, detail="", kit_env=None):
        """Runs argv with TensorFlow (tf_argv) as stage for at most limit
        seconds (and no later than the budget); records and returns its row."""
        limit = min(limit, self.left())
        if limit < 5:
            return self.record(stage, "skipped", detail=f"no time left ({self.left():.0f} s of the budget)")
        log = os.path.join(self.logs, stage + ".log")
        cmd = Command(self.tf_argv(argv, **(kit_env or {})), self.repo, env or self.env(), log)
        rc = cmd.wait(limit)
        status = "passed" if rc == 0 else ("timeout" if rc is None else "failed")
        why = f"past its limit of {limit:.0f} s" if rc is None else (f"exit {rc}: {tail(log)}" if rc else "")
        shown = "".join(f"{k}={v} " for k, v in (kit_env or {}).items()) + portable_argv(argv)
        return self.record(stage, status, cmd.started, "; ".join(x for x in (detail, why) if x),
                           command=shown + (" (the kit's env.sh sourced)" if self.kit_env else ""), record=record)

    # -- the stages ----------------------------------------------------------

    def start_bundle(self):
        """The check bundle in the background; its bench.py waits for
        test_device's end (a file) so that it has the GPU alone."""
        if not self.gpu:
            return None
        res = os.path.join(self.work, "bundle")
        os.makedirs(res, exist_ok=True)
        done = os.path.join(self.work, "test_device.end")
        env = self.env(OUT=res, PYTHON=self.args.torch_python, BENCH_ARGS=f"--budget-s {BUNDLE_BENCH_S}",
                       GPUCHECK_DEADLINE_S=str(self.limits["bundle"]),
                       GPUCHECK_BEFORE_BENCH=f"timeout {self.limits['kit'] + self.limits['test_device']} "
                                             f"bash -c 'until [ -e {done} ]; do sleep 1; done'")
        return Command(["bash", os.path.join("build", "gpu", "run.sh")], self.repo, env,
                       os.path.join(self.logs, "bundle.log"))

    def finish_bundle(self, bundle):
        if bundle is None:
            self.record("bundle", "skipped", detail="no GPU (nvidia-smi lists none)")
            return
        # run.sh's deadline leaves out its wait for test_device; its steps' kill margins come on top
        limit = self.limits["bundle"] + self.limits["kit"] + self.limits["test_device"] + 60 - (now() - bundle.started)
        rc = bundle.wait(min(limit, self.left()))
        res = os.path.join(self.work, "bundle")
        command = (f"make gpu-bundle, then on the GPU machine: GPUCHECK_DEADLINE_S={self.limits['bundle']:.0f} "
                   f"BENCH_ARGS='--budget-s {BUNDLE_BENCH_S}' bash build/gpu/run.sh (python -m tools.gpurun)")
        made = bundle_record(res, command, os.path.join(self.records, "gpu.json"))
        status = {0: "passed", None: "timeout"}.get(rc, "failed")
        self.record("bundle", status, bundle.started, made or "no results.json (see bundle.log)",
                    command=command, record="gpu.json")

    def kit(self):
        """The kit, unpacked once its parts are all here (calls bring them,
        one a call), and whether TensorFlow then sees a GPU."""
        parts, started = self.args.parts, now()
        if not parts:
            self.record("kit", "skipped", detail=f"no kit: TensorFlow is {portable_argv([self.args.python])}'s own")
            self.tf_gpu = self.tf_sees_gpu()
            return
        end = now() + min(self.limits["kit"], self.left())
        last = None
        while True:
            state = parts_state(parts)
            if state["missing"] == [] and state["stamp"] != last:
                last = state["stamp"]
                dest = os.path.join(self.work, "tf")
                cmd = Command(["bash", os.path.join(parts, "unpack.sh"), dest], parts,
                              self.env(TF_GPU_KIT_PARTS=parts), os.path.join(self.logs, "kit.log"))
                if cmd.wait(max(10.0, end - now())) == 0 and os.path.exists(os.path.join(dest, "env.sh")):
                    self.kit_env = os.path.join(dest, "env.sh")
                    break
            if now() > end:
                self.record("kit", "failed", started, f"parts missing or damaged: {state['missing'] or 'see kit.log'}; "
                                                      f"{tail(os.path.join(self.logs, 'kit.log'), 2)}")
                return
            time.sleep(1)
        self.tf_gpu = self.tf_sees_gpu()
        self.record("kit", "passed", started, f"unpacked; TensorFlow sees {'a' if self.tf_gpu else 'no'} GPU")
        if self.gpu and not self.tf_gpu:  # the kit's own report of what it found
            self.run("kit_smoke", [self.args.python, os.path.join(self.work, "tf", "smoke.py"),
                                   os.path.join("build", "libgobn.so")], 120)

    def tf_sees_gpu(self):
        answer = os.path.join(self.work, "gpus_tf_sees")
        probe = f"import tensorflow as tf; open({answer!r}, 'w').write(str(len(tf.config.list_physical_devices('GPU'))))"
        cmd = Command(self.tf_argv([self.args.python, "-c", probe]), self.repo, self.env(),
                      os.path.join(self.logs, "kit.log"))
        if cmd.wait(min(120, self.left())) != 0:
            return False
        with open(answer) as f:
            return f.read() != "0"

    def no_tensorflow(self):
        """Why no stage can run TensorFlow, or None."""
        if self.args.parts and not self.kit_env:
            return "no TensorFlow: the kit did not unpack (stage kit)"
        return None

    def gpu_stage(self, stage, gpu_args, rehearsal_args, record):
        """A stage that needs the GPU: run on it, or, in a dry run without
        one, skipped, its command rehearsed on CPU:0."""
        if self.tf_gpu:
            return self.run(stage, gpu_args, self.limits[stage], record=record)
        why = self.no_tensorflow() or ("no GPU" if not self.gpu else "TensorFlow sees no GPU")
        if not self.args.dry or self.no_tensorflow():
            return self.record(stage, "skipped", detail=why)
        done = self.run(stage + "_rehearsal", rehearsal_args, self.limits[stage])
        return self.record(stage, "skipped", detail=f"{why} (its command rehearsed on CPU:0: {done['status']})")

    def test_device(self):
        out = os.path.join(self.records, "gpu_tf.json")
        base = [self.args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python_tests/test_device.py",
                "--matrix", "quick", "--record", out]
        try:
            return self.gpu_stage("test_device", base + ["--device", "GPU:0"],
                                  base + ["--device", "CPU:0", "-k", "test_registry or test_bad_input or every_call"],
                                  "gpu_tf.json")
        finally:
            open(os.path.join(self.work, "test_device.end"), "w").close()
            if not os.path.exists(out):  # the later stages merge into it
                with open(out, "w") as f:
                    json.dump({}, f)

    def stream(self):
        base = [self.args.python, "-m", "bench.gpu_calls", "--profile", "--merge-into",
                os.path.join(self.records, "gpu_tf.json")]
        self.gpu_stage("stream", base + ["--device", "GPU:0"], base + ["--device", "CPU:0", "--shapes", "2x3x3x8",
                                                                      "--reps", "1"], "gpu_tf.json")

    def manycore(self):
        if self.no_tensorflow():
            return self.record("manycore", "skipped", detail=self.no_tensorflow())
        argv = [self.args.python, "-m", "bench.manycore", "--lib", os.path.join("build", "libgobn.so"),
                "--out", os.path.join(self.records, "manycore.json")]
        argv += (["--quick", "--budget", "10", "--no-sweep", "--no-steps", "--only", "NHWC 16x28x28x64"]
                 if self.args.dry else ["--budget", str(MANYCORE_BUDGET), "--no-sweep"])
        self.run("manycore", argv, self.limits["manycore"], env=self.env(CUDA_VISIBLE_DEVICES=""),
                 record="manycore.json")

    def torch(self):
        if self.no_tensorflow():
            return self.record("torch", "skipped", detail=self.no_tensorflow())
        probe = subprocess.run([self.args.torch_python, "-c", "import torch"], capture_output=True, text=True)
        if probe.returncode != 0:
            return self.record("torch", "skipped", detail=f"no PyTorch in {portable_argv([self.args.torch_python])}")
        argv = [self.args.python, "-m", "bench.torch", "--torch-python", self.args.torch_python,
                "--triad", os.path.join("build", "triad"), "--record", os.path.join(self.records, "torch.json")]
        only = "resnet50 float32 training NHWC 8x7x7x2048" if self.args.dry else self.args.torch_only
        threads = 2 if self.args.dry else len(os.sched_getaffinity(0))
        # 0.6 s a case, as when the stage's limit was set, rather than bench/torch.py's 1.0
        argv += ["--threads", str(threads), "--rounds", "1", "--case-seconds", "0.6"] + (["--only", only] if only else [])
        self.run("torch", argv, self.limits["torch"], env=self.env(CUDA_VISIBLE_DEVICES=""),
                 record="torch.json", detail=f"{threads} threads, cases: {only or 'all'}")

    def models(self):
        out = os.path.join(self.records, "gpu_tf.json")
        if not self.tf_gpu:
            rehearsal = [self.args.python, "-m", "bench.models", "--device", "cpu", "--routes", "tf_keras",
                         "--models", "resnet50", "--image", "32", "--batch-size", "2", "--warmup", "1", "--rounds",
                         "1", "--steps-per-round", "1", "--no-float64", "--onednn", "on", "--merge-into", out]
            return self.gpu_stage("models", [], rehearsal, "gpu_tf.json")
        end, least = now() + min(self.limits["models"], self.left()), MODEL_LEAST_S
        for config in self.args.models:
            route, layout, batch, precision = config.split(":")
            if end - now() < least:
                self.record("models", "skipped", detail=f"{config}: {end - now():.0f} s left of the stage, "
                                                        f"a configuration takes about {least:.0f}")
                continue
            argv = [self.args.python, "-m", "bench.models", "--device", "gpu", "--routes", route, "--data-format",
                    layout, "--batch-size", batch, "--precision", precision, *MODEL_ARGS, "--merge-into", out]
            t = now()
            self.run("models", argv, end - now(), record="gpu_tf.json", detail=config,
                     kit_env={"TF_GPU_KIT_CUBLAS": "machine"})
            least = max(least, now() - t)

    def main(self):
        self.state.update(started=self.t0, budget_s=self.state.load().get("budget_s", self.args.budget),
                          dry=self.args.dry, pid=os.getpid())
        print(f"pipeline: {'dry run, ' if self.args.dry else ''}budget {self.left():.0f} s, "
              f"GPU {'seen' if self.gpu else 'none'}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("pipeline: stopped"))  # finish --stop
        bundle = self.start_bundle()
        try:
            self.kit()
            self.test_device()
            self.finish_bundle(bundle)
            for stage in self.args.stages:
                getattr(self, stage)()
        finally:
            for cmd in list(Command.running):
                cmd.stop()
            self.state.update(ended=now(), seconds=now() - self.t0)
            print(f"pipeline: ended after {now() - self.t0:.0f} s", flush=True)


def has_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def portable_argv(argv):
    from bench.machine import portable
    return " ".join(portable(a) for a in argv)


def parts_state(parts):
    """The kit's parts in folder parts: those SHA256SUMS lists that are not
    there, and a stamp that changes when any part changes."""
    try:
        with open(os.path.join(parts, "SHA256SUMS")) as f:
            names = [line.split()[-1].lstrip("*") for line in f if line.strip()]
    except OSError:
        return {"missing": ["SHA256SUMS"], "stamp": None}
    names += ["unpack.sh"]
    missing = [n for n in names if not os.path.exists(os.path.join(parts, n))]
    stamp = tuple(os.stat(os.path.join(parts, n)).st_mtime_ns for n in names if n not in missing)
    return {"missing": missing, "stamp": stamp}


# ---------------------------------------------------------------------------
# The records and their summary lines.


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def bundle_record(res, command, out):
    """gpu.json from run.sh's results (results.json, bench.json,
    summary.txt): today's keys (command, facts, check, tf_rule, copy_gbs,
    geomean, rows, summary) beside run.sh's verdict, steps and sanitizers.
    Returns its first summary line, or None where run.sh wrote no results."""
    results = load(os.path.join(res, "results.json"))
    if results is None:
        return None
    bench = load(os.path.join(res, "bench.json")) or {}
    try:
        with open(os.path.join(res, "summary.txt")) as f:
            summary = [line.rstrip() for line in f if line.strip()]
    except OSError:
        summary = []
    check = dict(results.get("check") or {}, worst_norm=results.get("check_worst_norm"),
                 failures=results.get("check_failures"))
    record = dict(command=command, verdict=results.get("verdict"), facts=results.get("facts"), check=check,
                  sanitize=results.get("sanitize"), steps=results.get("steps"), tf_rule=bench.get("tf_rule"),
                  copy_gbs=((results.get("facts") or {}).get("copy") or {}).get("gbs"),
                  geomean=bench.get("geomean"), rows=bench.get("rows"), bench_errors=bench.get("errors"),
                  summary=summary)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return summary[0] if summary else results.get("verdict")


def summary_lines(records, state):
    """One line a record: the check bundle, the device tests,
    a call on the stream, the training steps, 16 cores, PyTorch."""
    by_stage = {}
    for row in state.get("stages", []):
        by_stage.setdefault(row["stage"], []).append(row)

    def status(stage):
        rows = by_stage.get(stage) or [{"status": "not run"}]
        return ", ".join(sorted({r["status"] for r in rows}))

    lines = []
    gpu = load(os.path.join(records, "gpu.json"))
    if gpu:
        chk, g = gpu.get("check") or {}, (gpu.get("geomean") or {}).get("all") or {}
        san = ", ".join(f"{s['tool']} {s['status']}" for s in gpu.get("sanitize") or []) or "none"
        lines.append(f"gpu.json: check bundle {gpu.get('verdict')}: {chk.get('cases')} cases, {chk.get('failed')} "
                     f"failed; sanitizers {san}; gobn/cuDNN (training) {fmt(g.get('gobn/cudnn'))}, gobn/native "
                     f"{fmt(g.get('gobn/native'))} over {g.get('n')} rows (< 1: gobn faster)")
    else:
        lines.append(f"gpu.json: no record (stage bundle: {status('bundle')})")
    tf = load(os.path.join(records, "gpu_tf.json")) or {}
    checks = tf.get("checks")
    lines.append(f"gpu_tf.json test_device: {checks['passed']} passed, {checks['failed']} failed, {checks['skipped']} "
                 f"skipped on {checks['device']}" if checks else
                 f"gpu_tf.json test_device: no rows (stage test_device: {status('test_device')})")
    rows = (tf.get("stream") or {}).get("per_call") or []
    device = (tf.get("stream") or {}).get("device")
    if rows:
        over = [r["gobn_us"] - r["stock_us"] for r in rows]
        each = "; ".join(f"{'x'.join(map(str, r['shape']))} {r['dtype']} {d:+.1f}" for r, d in zip(rows, over))
        prof = tf["stream"].get("host_profile") or {}
        ops = {side: next((v["us"] for k, v in (prof.get(side) or {}).items() if k.startswith("op ")), None)
               for side in ("stock", "gobn")}
        shown = (f"profile failed: {prof['error'][:200]}" if "error" in prof else
                 f"host us of the op a call, stock {fmt(ops['stock'], '%.1f')}, gobn {fmt(ops['gobn'], '%.1f')}")
        lines.append(f"gpu_tf.json stream on {device}: gobn - stock us a call: {each}; within +5 us: "
                     f"{sum(d <= 5 for d in over)} of {len(over)}; {shown}")
    else:
        lines.append(f"gpu_tf.json stream: no rows (stage stream: {status('stream')})")
    steps = tf.get("models") or []
    if steps:
        lines.append("gpu_tf.json models: stock/gobn (noise; XLA stock/gobn) " + "; ".join(
            f"{r['route']} {r['device']} b{r['batch_size']} {r['precision']} {fmt(r['ratio_stock_over_gobn'])} "
            f"({fmt(r['noise_stock2_over_stock'])}; {fmt(r.get('ratio_stock_xla_over_gobn_xla'))})"
            f"{'' if r.get('ok') else ' !'}" for r in steps))
    else:
        lines.append(f"gpu_tf.json models: no rows (stage models: {status('models')})")
    many = load(os.path.join(records, "manycore.json")) or {}
    s = many.get("summary") or {}
    if s:
        st = "; ".join(f"{r['model']} {fmt(r.get('ratio'))} (noise {fmt(r.get('noise'))})"
                       for r in many.get("steps") or [] if "ratio" in r) or "none"
        lines.append(f"manycore.json: {many.get('cores')} cores, geomean {fmt(s['geomean_ratio'], '%.2f')}x over "
                     f"{s['cases']} cases, below 1.2x: {', '.join(s['below_1_2']) or 'none'}; tf_keras steps {st}")
    else:
        lines.append(f"manycore.json: no summary (stage manycore: {status('manycore')})")
    torch = load(os.path.join(records, "torch.json")) or {}
    by = torch.get("by_threads") or {}
    if by:
        lines.append("torch.json: " + "; ".join(
            f"{t} threads geomean {fmt(v['summary']['geomean'], '%.2f')}x over {v['summary']['cases']} cases, "
            f"{v['summary']['below_goal']} below 1.2x (noise median {fmt(v['summary']['noise_median'], '%.3f')})"
            for t, v in by.items()))
    else:
        lines.append(f"torch.json: no record (stage torch: {status('torch')})")
    return lines


def fmt(v, f="%.3f"):
    return f % v if isinstance(v, (int, float)) else "-"


def write_out(work, out):
    """$OUT: the records, stages.json, summary.txt and logs.tar.gz (every
    log, its head and tail where long, and the bundle's raw results)."""
    os.makedirs(out, exist_ok=True)
    records = os.path.join(work, "records")
    state = State(work).load()
    written = []
    for name in RECORDS:
        src = os.path.join(records, name)
        if load(src):
            shutil.copyfile(src, os.path.join(out, name))
            written.append(name)
    with open(os.path.join(out, "stages.json"), "w") as f:
        json.dump(state, f, indent=1)
    lines = summary_lines(records, state)
    if state.get("dry"):
        lines.insert(0, "DRY RUN without a GPU: tiny sizes on this machine, the GPU stages' commands rehearsed on "
                        "CPU:0; nothing here is a record")
    stages = [stage_line(row) for row in state.get("stages", [])]
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines + stages) + "\n")
    with tarfile.open(os.path.join(out, "logs.tar.gz"), "w:gz") as tar:
        for folder in ("logs", "bundle"):
            for path in sorted(glob.glob(os.path.join(work, folder, "*"))):
                if os.path.isfile(path):
                    tar.add(capped(path), arcname=os.path.join(folder, os.path.basename(path)))
    for name in os.listdir(out):
        nbytes = os.path.getsize(os.path.join(out, name))
        if nbytes > OUT_BYTES:
            lines.append(f"! {name} is {nbytes >> 20} MiB, over what comes back")
    return lines, stages, written


def capped(path):
    """path, or a copy of its head and tail where it is longer than LOG_BYTES."""
    if os.path.getsize(path) <= LOG_BYTES:
        return path
    cut = os.path.join(tempfile.mkdtemp(prefix="gpurun-log-"), os.path.basename(path))
    with open(path, "rb") as f, open(cut, "wb") as g:
        g.write(f.read(LOG_BYTES // 2))
        g.write(b"\n... [cut] ...\n")
        f.seek(-LOG_BYTES // 2, os.SEEK_END)
        g.write(f.read())
    return cut


# ---------------------------------------------------------------------------
# The verbs.


def start(args):
    """Call 1: the repository and build/gpurun copied out of the working
    tree, the pipeline started in a session of its own, and any kit files
    carried with them moved as part moves them."""
    if not os.path.exists(os.path.join(ROOT, CARRY, "libgobn.so")):
        raise SystemExit(f"gpurun: no {CARRY}/libgobn.so here: carry {CARRY} (make gpu-run)")
    state = State(args.work).load()
    if alive(state.get("pid")):
        print(f"gpurun: the pipeline runs already (pid {state['pid']})")
    else:
        repo = copy_checkout(args.work)
        argv = [sys.executable, "-m", "tools.gpurun", "pipeline", "--work", args.work, "--budget", str(args.budget),
                "--python", args.python, "--torch-python", args.torch_python, "--parts",
                os.path.join(args.work, "kit"), "--stages", ",".join(args.stages), "--models", ",".join(args.models),
                "--torch-only", args.torch_only, "--limit", ",".join(f"{k}={v}" for k, v in args.limit.items())]
        with open(os.path.join(args.work, "pipeline.log"), "ab") as log:
            proc = subprocess.Popen(argv, cwd=repo, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        State(args.work).update(pid=proc.pid)
        print(f"gpurun: pipeline started (pid {proc.pid}, budget {args.budget:.0f} s), work in {args.work}")
    args.budget = None
    return part(args)


def alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def part(args):
    """Calls 2 and on: each file carried moved out of the working tree, into
    the folder the pipeline unpacks the kit from; --budget resets the
    pipeline's budget, once the machine's start is known."""
    if args.budget:
        State(args.work).update(budget_s=args.budget)
        print(f"gpurun: the pipeline's budget is now {args.budget:.0f} s from its start")
    dest = os.path.join(args.work, "kit")
    os.makedirs(dest, exist_ok=True)
    for path in args.paths:
        names = sorted(os.listdir(path)) if os.path.isdir(path) else [os.path.basename(path)]
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        for name in names:
            if name.startswith("part-") or name in ("SHA256SUMS", "unpack.sh", "smoke.py", "KIT_INFO"):
                shutil.move(os.path.join(folder, name), os.path.join(dest, name))
                print(f"gpurun: {name} moved to {dest}")
    state = parts_state(dest)
    print(f"gpurun: kit files still to come: {', '.join(state['missing']) or 'none'}")
    return status(args)


def status(args):
    data = State(args.work).load()
    if "started" in data:
        print(f"gpurun: pipeline at {now() - data['started']:.0f} s, "
              f"{'ended' if 'ended' in data else 'running' if alive(data.get('pid')) else 'not running'}")
    for row in data.get("stages", []):
        print(stage_line(row))
    return 0


def finish(args):
    """The last call: waits for the pipeline (at most --wait seconds), then
    writes $OUT and the summary lines."""
    out = args.out or os.environ.get("OUT")
    if not out:
        raise SystemExit("gpurun: no $OUT and no --out")
    state = State(args.work)

    def running():
        data = state.load()
        return "ended" not in data and alive(data.get("pid"))

    end = now() + args.wait
    while running() and now() < end:
        time.sleep(2)
    if running() and args.stop:
        os.killpg(state.load()["pid"], signal.SIGTERM)  # it stops its stages and records its end
        end = now() + 30
        while running() and now() < end:
            time.sleep(1)
        print("gpurun: pipeline stopped")
    lines, stages, written = write_out(args.work, out)
    print(f"gpurun: {len(os.listdir(out))} files in $OUT ({', '.join(written) or 'no record'})"
          + (" while the pipeline still runs: a later finish collects the rest" if running() else ""))
    print("\n".join(stages + lines))
    return 0


def calls(kit):
    """The carrying calls, back to back: (paths, command, bytes) each. The
    kit's parts go one a call, its small files with the last; build/gpurun
    goes first, beside the smallest part where both fit in one call."""
    parts = sorted(glob.glob(os.path.join(ROOT, kit, "part-*")), key=os.path.getsize)
    extras = [os.path.join(kit, n) for n in ("SHA256SUMS", "unpack.sh", "smoke.py")]
    if not parts or not all(os.path.exists(os.path.join(ROOT, e)) for e in extras):
        raise SystemExit(f"gpurun: no complete kit in {kit} (part-*, {', '.join(map(os.path.basename, extras))}): "
                         f"run the TensorFlow GPU kit's build.sh {kit}")
    if not os.path.exists(os.path.join(ROOT, CARRY, "libgobn.so")):
        raise SystemExit(f"gpurun: no {CARRY}: make gpu-run")
    tree, bundle = tree_bytes(), size(os.path.join(ROOT, CARRY))
    parts = [os.path.relpath(p, ROOT) for p in parts]
    first = [parts.pop(0)] if tree + bundle + os.path.getsize(os.path.join(ROOT, parts[0])) <= CALL_BYTES else []
    out = [([CARRY] + first, " ".join(["python3 -m tools.gpurun start"] + first))]
    for i, part_path in enumerate(sorted(parts)):
        paths = [part_path] + (extras if i == len(parts) - 1 else [])
        out.append((paths, "python3 -m tools.gpurun part " + " ".join(paths) + (" --budget B" if i == 0 else "")))
    return [(paths, command, tree + sum(size(os.path.join(ROOT, p)) for p in paths)) for paths, command in out]


def plan(args):
    """The calls a session with a lent machine makes, each with its carry."""
    kit = os.path.relpath(os.path.abspath(args.kit), ROOT)
    if kit.startswith(".."):
        raise SystemExit(f"gpurun: {args.kit} is outside the repository; a call carries only paths inside it: "
                         "build the kit's parts into build/ (the kit's build.sh OUTDIR)")
    planned = calls(kit)
    print("The calls, back to back, each with the working tree (B: 700 less the lease's held_s after call 1):")
    for i, (paths, command, size) in enumerate(planned, 1):
        over = " OVER THE LIMIT" if size > CALL_BYTES else ""
        print(f"  {i}. carry {json.dumps(paths)} ({size / 2**20:.1f} MiB{over}), timeout_s 120:\n     {command}")
    print(f"  {len(planned) + 1}. timeout_s 600: python3 -m tools.gpurun finish\n"
          "  then give_back. If that call ended before the pipeline: python3 -m tools.gpurun finish --wait 0 --stop")
    return 0 if all(size <= CALL_BYTES for _, _, size in planned) else 1


def tree_bytes():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return sum(os.path.getsize(os.path.join(ROOT, f)) for f in files if os.path.isfile(os.path.join(ROOT, f)))


def size(path):
    """Bytes of a file, or of a folder's files."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def copy_checkout(work, library=None):
    """A fresh work folder with a copy of the checkout, later calls' rewrites
    of the working tree out of its way: its files, build/gpurun's in its
    build/ (where there is one), and library as build/libgobn.so where given.
    Returns the copy's root; the pipeline's clock starts now."""
    shutil.rmtree(work, ignore_errors=True)
    repo = os.path.join(work, "repo")
    shutil.copytree(ROOT, repo, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "__pycache__", ".*cache"))
    carried = os.path.join(ROOT, CARRY)
    if os.path.isdir(carried):
        shutil.copytree(carried, os.path.join(repo, "build"))
    if library:
        os.makedirs(os.path.join(repo, "build"), exist_ok=True)
        shutil.copy(library, os.path.join(repo, "build", "libgobn.so"))
    State(work).save({"started": now(), "stages": []})
    return repo


def dry_run(args):
    """The pipeline here, in the foreground, without a GPU: the records'
    plumbing with tiny sizes, then $OUT as finish writes it."""
    work = args.work or tempfile.mkdtemp(prefix="gpurun-dry-")
    copy_checkout(work, os.path.join(ROOT, "build", "libgobn.so"))  # the library make built, not a stale copy
    args.work, args.dry = work, True
    args.parts = os.path.abspath(args.kit) if args.kit else None
    Pipeline(args).main()
    lines, _, _ = write_out(work, args.out)
    print("\n".join(lines))
    return 0


def limits(text):
    out = {}
    for item in filter(None, text.split(",")):
        stage, _, seconds = item.partition("=")
        if stage not in LIMITS:
            raise argparse.ArgumentTypeError(f"no stage {stage!r} (of {', '.join(LIMITS)})")
        out[stage] = float(seconds)
    return out


def stages(text):
    out = [s for s in text.split(",") if s]
    unknown = set(out) - set(ALONE)
    if unknown:
        raise argparse.ArgumentTypeError(f"no stage {', '.join(sorted(unknown))} (of {', '.join(ALONE)})")
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)

    def common(q, budget=True):
        q.add_argument("--work", default=WORK, help=f"the pipeline's folder (default {WORK})")
        if budget:
            q.add_argument("--budget", type=float, default=540,
                           help="seconds from start to the pipeline's end (default 540)")
            q.add_argument("--python", default="python3", help="the Python that runs TensorFlow (default python3)")
            q.add_argument("--torch-python", default="python3", help="the Python of PyTorch (default python3)")
            q.add_argument("--stages", type=stages, default=list(ALONE),
                           help=f"the stages that run alone, in order (default {','.join(ALONE)})")
            q.add_argument("--models", type=lambda t: t.split(","), default=list(MODEL_CONFIGS),
                           help="the training steps' configurations, route:data_format:batch:precision, in order")
            q.add_argument("--torch-only", default=TORCH_ONLY,
                           help=f"bench/torch.py's --only (default {TORCH_ONLY!r}; '' for every case)")
            q.add_argument("--limit", type=limits, default={}, help="stage=seconds,...: the stages' limits "
                           f"(default {','.join(f'{k}={v}' for k, v in LIMITS.items())})")

    q = sub.add_parser("start", help="call 1: start the pipeline (carrying build/gpurun), move kit files carried")
    q.add_argument("paths", nargs="*")
    common(q)
    q = sub.add_parser("part", help="move carried kit files to where the pipeline unpacks them")
    q.add_argument("paths", nargs="+")
    q.add_argument("--budget", type=float, help="the pipeline's budget from now on, seconds from its start "
                                                "(700 less the lease's held_s after call 1 keeps it in 12 minutes)")
    common(q, budget=False)
    q = sub.add_parser("finish", help="the last call: wait for the pipeline, write $OUT")
    q.add_argument("--wait", type=float, default=570, help="seconds to wait for the pipeline (default 570)")
    q.add_argument("--stop", action="store_true", help="stop the pipeline if it still runs then")
    q.add_argument("--out", help="instead of $OUT")
    common(q, budget=False)
    common(sub.add_parser("status", help="the stages so far"), budget=False)
    q = sub.add_parser("plan", help="here: the calls, each with its carry")
    q.add_argument("kit", help="the folder of the kit's parts, inside the repository")
    q = sub.add_parser("dry-run", help="here, without a GPU: every stage, tiny")
    common(q)
    q.set_defaults(work=None)
    q.add_argument("--kit", help="the folder of the kit's parts (default: --python's own TensorFlow)")
    q.add_argument("--out", required=True, help="where $OUT's files go")
    q = sub.add_parser("pipeline", help=argparse.SUPPRESS)
    common(q)
    q.add_argument("--parts")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.verb == "pipeline":
        args.dry = False
        return Pipeline(args).main()
    return {"start": start, "part": part, "finish": finish, "status": status, "plan": plan,
            "dry-run": dry_run}[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
