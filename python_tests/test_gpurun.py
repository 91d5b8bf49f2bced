"""tools/gpurun.py, the prepared run on a lent GPU machine, without one: its
dry run walks the stages on this machine's TensorFlow (the GPU stages skipped,
saying so, their commands rehearsed on CPU:0; PyTorch's stage skipped where
there is no PyTorch) and writes $OUT as the last call would; the calls'
bookkeeping (the kit's parts moved out of the tree, what comes back) on
files of its own."""

import json
import os
import subprocess
import sys
import tarfile
import time

from support import REPO_ROOT, child_env
from tools import gpurun

GPU_STAGES = ("bundle", "test_device", "stream")


def test_dry_run_skips_the_gpu_stages_and_writes_what_comes_back(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpurun", "dry-run", "--work", str(tmp_path / "work"), "--out", str(out),
         "--python", sys.executable, "--torch-python", sys.executable, "--stages", "stream,torch"],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = {}
    for row in json.loads((out / "stages.json").read_text())["stages"]:
        rows.setdefault(row["stage"], []).append(row)
    # every GPU stage skipped for want of one, none passed; its command ran on CPU:0
    for stage in GPU_STAGES:
        assert [r["status"] for r in rows[stage]] == ["skipped"], rows[stage]
        assert rows[stage][0]["detail"].startswith("no GPU"), rows[stage]
    for stage in ("test_device", "stream"):
        assert [r["status"] for r in rows[stage + "_rehearsal"]] == ["passed"], rows[stage + "_rehearsal"]
    torch = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    assert rows["torch"][0]["status"] == ("passed" if torch else "skipped"), rows["torch"]
    # what comes back: at most 8 flat files; the rehearsal's record, written by the stages that claim it
    names = sorted(os.listdir(out))
    assert len(names) <= gpurun.OUT_FILES and all((out / n).is_file() for n in names)
    assert set(names) <= {"summary.txt", "stages.json", "logs.tar.gz", *gpurun.RECORDS}
    record = json.loads((out / "gpu_tf.json").read_text())
    assert record["device"] == {"name": "CPU:0"} and record["checks"]["failed"] == 0
    assert record["stream"]["device"] == "CPU:0" and record["stream"]["host_profile"]["gobn"]
    assert {r["dtype"] for r in record["stream"]["per_call"]} == {"float", "half"}
    assert "gpu.json" not in names and ("torch.json" in names) == torch
    # the summary: the dry run said first, then a line a record of the issue, then a line a stage
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0].startswith("DRY RUN") and "nothing here is a record" in summary[0]
    for prefix in ("gpu.json:", "gpu_tf.json test_device:", "gpu_tf.json stream on CPU:0:", "gpu_tf.json models:",
                   "manycore.json:", "torch.json:"):
        assert sum(line.startswith(prefix) for line in summary) == 1, (prefix, summary)
    assert any(line.startswith("stage bundle: skipped") for line in summary)
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert {"logs/test_device_rehearsal.log", "logs/stream_rehearsal.log"} <= set(tar.getnames())


def test_every_record_is_claimed_by_stages_that_exist():
    stages = set(gpurun.LIMITS) | {"bundle"}
    for record, writers in gpurun.RECORDS.items():
        assert writers and set(writers) <= stages, record
    assert set(gpurun.ALONE) <= set(gpurun.LIMITS)


def test_model_configs_are_what_bench_models_takes():
    from bench import models
    for config in gpurun.MODEL_CONFIGS:
        route, layout, batch, precision = config.split(":")
        args = models.parse_args(["--device", "gpu", "--routes", route, "--data-format", layout, "--batch-size",
                                  batch, "--precision", precision, *gpurun.MODEL_ARGS])
        assert args.routes in models.ROUTES and args.xla and args.models in models.MODELS


def test_parts_are_moved_out_of_the_tree_and_counted(tmp_path, capsys):
    tree, work = tmp_path / "tree", tmp_path / "work"
    tree.mkdir()
    (tree / "SHA256SUMS").write_text("0" * 64 + "  part-00\n" + "1" * 64 + "  part-01\n")
    (tree / "part-00").write_bytes(b"x")
    gpurun.main(["part", str(tree / "part-00"), "--work", str(work)])
    assert not (tree / "part-00").exists() and (work / "kit" / "part-00").exists()
    assert "still to come: SHA256SUMS" in capsys.readouterr().out
    (tree / "part-01").write_bytes(b"y")
    (tree / "unpack.sh").write_text("")
    gpurun.main(["part", str(tree), "--work", str(work)])
    assert gpurun.parts_state(str(work / "kit"))["missing"] == []


def test_what_comes_back_is_capped(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    (work / "records").mkdir()
    (work / "logs" / "long.log").write_bytes(b"a" * (gpurun.LOG_BYTES * 2))
    gpurun.State(str(work)).save({"started": 0, "stages": [{"stage": "stream", "status": "timeout"}]})
    lines, _, written = gpurun.write_out(str(work), str(out))
    assert written == [] and sorted(os.listdir(out)) == ["logs.tar.gz", "stages.json", "summary.txt"]
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert tar.getmember("logs/long.log").size < gpurun.LOG_BYTES + 100
    assert "gpu_tf.json stream: no rows (stage stream: timeout)" in lines


def test_a_command_past_its_limit_is_ended_with_its_whole_session(tmp_path):
    # timeout(1) moves its command to a process group of its own, as run.sh's steps have it
    cmd = gpurun.Command(["bash", "-c", "timeout 60 sleep 60 & wait"], str(tmp_path), dict(os.environ),
                         str(tmp_path / "log"))
    deadline = time.time() + 10
    while len(gpurun.session(cmd.proc.pid)) < 3 and time.time() < deadline:  # bash, timeout, sleep
        time.sleep(0.1)
    assert len(gpurun.session(cmd.proc.pid)) == 3
    assert cmd.wait(0.5) is None
    assert gpurun.session(cmd.proc.pid) == []


def test_the_bundles_results_make_gpu_json_with_todays_keys(tmp_path):
    res, records = tmp_path / "bundle", tmp_path / "records"
    res.mkdir()
    records.mkdir()
    (res / "results.json").write_text(json.dumps({
        "verdict": "PASS", "facts": {"gpu": "NVIDIA H100", "copy": {"gbs": 3000.0}},
        "check": {"ok": True, "cases": 1700, "failed": 0}, "check_worst_norm": {"gpu": 0.1}, "check_failures": [],
        "sanitize": [{"tool": "memcheck", "status": "pass"}], "steps": []}))
    (res / "bench.json").write_text(json.dumps({"tf_rule": {"enqueue_us": 20.0}, "rows": [{"shape": "8x8x8x64"}],
                                                "geomean": {"all": {"n": 1, "gobn/cudnn": 0.9, "gobn/native": 0.5}}}))
    (res / "summary.txt").write_text("gobn GPU check: PASS on NVIDIA H100\n  correctness: pass\n")
    first = gpurun.bundle_record(str(res), "make gpu-bundle ...", str(records / "gpu.json"))
    assert first == "gobn GPU check: PASS on NVIDIA H100"
    record = json.loads((records / "gpu.json").read_text())
    assert {"command", "facts", "check", "tf_rule", "copy_gbs", "geomean", "rows", "summary"} <= set(record)
    assert record["copy_gbs"] == 3000.0 and record["check"]["worst_norm"] == {"gpu": 0.1}
    [line] = [x for x in gpurun.summary_lines(str(records), {"stages": []}) if x.startswith("gpu.json")]
    assert line.startswith("gpu.json: check bundle PASS: 1700 cases, 0 failed; sanitizers memcheck pass; "
                           "gobn/cuDNN (training) 0.900")
