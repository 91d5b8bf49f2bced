"""scripts/gpu_tf_check.py (`make gpu-tf-check`, gobn inside TensorFlow's GPU
build) run on the CPU: the same checks with the tensors on CPU:0, where the
training forward's reserve_space_2 is the variance rather than the inverse
standard deviation. On a GPU machine the Makefile target runs it on GPU:0."""

import json
import os
import subprocess
import sys

import gobn as gobn_package
from support import REPO_ROOT

SECTIONS = ("registry", "parity", "errors", "threads", "tf_stream", "enable")
XLA = gobn_package._xla.available()


def test_gpu_tf_check_passes_on_the_cpu(tmp_path):
    out = tmp_path / "gpu_tf.json"
    script = os.path.join(REPO_ROOT, "scripts", "gpu_tf_check.py")
    r = subprocess.run([sys.executable, script, "--device", "CPU:0", "--quick", "--json", str(out)]
                       + ([] if XLA else ["--no-xla"]),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-6000:]
    record = json.loads(out.read_text())
    assert record["tensorflow"] and record["command"].startswith("gpu_tf_check.py")
    for section in SECTIONS + (("xla",) if XLA else ()):
        assert record[section], f"no rows in {section}"
        assert all(row["ok"] for row in record[section]), section
    assert sorted(row["op"] for row in record["registry"]) == sorted(gobn_package.OP_NAMES)
    # Every op ran, on the CPU, eager, in a tf.function and compiled by XLA
    # (its XLA handler), in each of its data formats.
    ran = {(row["op"], row["data_format"], row["run"]) for row in record["parity"] if row["calls"] >= 1}
    for name in gobn_package.OP_NAMES:
        for run in ("eager", "function") + (("xla",) if XLA else ()):
            assert any(op == name and r == run for op, _, r in ran), (name, run)
    assert XLA or not any(row["run"] == "xla" for row in record["parity"])
    assert record["enable"][0]["calls_on_device"] == 1
    assert record["threads"][0]["calls_on_device"] == record["threads"][0]["threads"] * record["threads"][0]["calls_each"]
    # on the CPU no call looked for a GPU stream; the record has the stream's counts
    assert record["stream"]["on_stream"] == record["stream"]["fallbacks"] == 0
    assert record["stream"]["per_call"] == []  # no --timing
