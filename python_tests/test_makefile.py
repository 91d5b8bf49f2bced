"""The Makefile: its header (what `make help` prints) lists every target, and
`make gpu-tf-check`, run here on CPU:0 with a few of test_device.py's tests,
one shape timed and no models, writes its record whole: the tests' rows by
section and bench/gpu_calls.py's "stream" beside them."""

import json
import os
import re
import subprocess
import sys

from gobn._opdefs_gen import OPS
from support import REPO_ROOT, child_env


def test_help_lists_every_target():
    text = open(os.path.join(REPO_ROOT, "Makefile")).read()
    listed = re.findall(r"^#   make (\S+) ", text, re.M)
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    phony = {t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()} - {"FORCE"}
    assert set(listed) == phony, f"in .PHONY, not in the header: {phony - set(listed)}; " \
                                 f"in the header, not in .PHONY: {set(listed) - phony}"
    defined = set(re.findall(r"^([\w-]+):(?!=)", text, re.M))
    assert phony <= defined, f"no rule for {phony - defined}"
    assert text.count("\nFORCE:\n") == 1


def make_env():
    """child_env without what a make running this suite (make test) hands
    its children: the make started here is a make of its own."""
    return {k: v for k, v in child_env().items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def test_gpu_tf_check_record(tmp_path):
    out = tmp_path / "gpu_tf.json"
    done = subprocess.run(
        ["make", "--no-print-directory", "gpu-tf-check", f"GPU_TF_PYTHON={sys.executable}", "GPU_TF_DEVICE=CPU:0",
         f"GPU_TF_RECORD={out}", "GPU_TF_MODELS=",
         "GPU_TF_ARGS=-p no:cacheprovider -k 'test_registry or test_bad_input or every_call'",
         "GPU_TF_BENCH_ARGS=--shapes 2x3x3x8 --reps 1"],
        cwd=REPO_ROOT, env=make_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    record = json.loads(out.read_text())
    assert record["tensorflow"] and record["device"] == {"name": "CPU:0"}
    assert record["command"].startswith("pytest -q python_tests/test_device.py --device CPU:0 --record gpu_tf.json")
    assert [len(record[s]) for s in ("registry", "errors")] == [len(OPS), 3]
    assert all(row["ok"] and row["outcome"] == "passed" for s in ("registry", "errors") for row in record[s])
    # a GPU's check on the CPU: skipped, saying why, and not ok
    [stream_row] = record["tf_stream"]
    assert stream_row["outcome"] == "skipped" and "GPU only" in stream_row["reason"] and not stream_row["ok"]
    assert record["checks"] == {"device": "CPU:0", "passed": len(OPS) + 3, "failed": 0, "skipped": 1}
    # bench/gpu_calls.py's record: the stream's counts and a row per shape and dtype
    stream = record["stream"]
    assert stream["command"] == "python -m bench.gpu_calls --device CPU:0 --merge-into gpu_tf.json --shapes 2x3x3x8 --reps 1"
    assert stream["on_stream"] == stream["fallbacks"] == stream["enqueued_calls"] == 0  # no GPU call on the CPU
    assert stream["device"] == "CPU:0" and [row["dtype"] for row in stream["per_call"]] == ["float", "half"]
    for row in stream["per_call"]:
        assert row["shape"] == [2, 3, 3, 8] and row["op"] == "FusedBatchNormGradV3"
        assert all(row[k] > 0 for k in ("stock_us", "gobn_us", "noise"))
        assert set(row["function_us"]) == set(row["eager_us"]) == {"stock", "stock'", "gobn", "gobn_sync"}


def test_a_device_not_there_stops_the_run():
    """--device naming a device TensorFlow does not see (GPU:0 on a machine
    without one; CPU:7 everywhere) is pytest's usage error before any test,
    not a run of skips or errors that could read as a check."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "python_tests/test_device.py", "--device", "CPU:7"],
                          cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-4000:] + done.stderr[-4000:]
    assert "--device CPU:7: no such device here" in done.stderr
    assert "passed" not in done.stdout and "skipped" not in done.stdout
