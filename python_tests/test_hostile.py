"""Hostile input through TensorFlow: no crash, and every rejection a clear error.

Each batch of calls runs in a child Python (hostile_child.py) that loads the
library, so that a crash — a signal, an abort, a Go fatal error — is seen here
as a failed test instead of taking pytest down. The child prints, per case, a
start line and a result line (JSON); a child that dies is reported with the
case it was running.

Batches: adversarial cases of the fused ops and of
BatchNormWithGlobalNormalizationGrad (zero-size tensors whose dimensions
multiply past 2^32 and 2^63, mismatched lengths and ranks, wrong dtypes and
attrs), NaN/Inf/bad-epsilon cases beside stock TensorFlow, the adversarial
cases again in tf.function with unknown or partly known shapes, and seeded
random calls of every op the library registers. A summary with the figures
goes to build/reliability/hostile.json.
"""

import collections
import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

from support import REPO_ROOT, child_env

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_child.py")
SUMMARY = os.path.join(REPO_ROOT, "build", "reliability", "hostile.json")

RANDOM_SEEDS = (1, 2)
RANDOM_COUNT = 500
BATCHES = {
    "fused": ["fused"],
    "global": ["global"],
    "nan": ["nan"],
    "function": ["function"],
    **{f"random-{seed}": ["random", str(seed), str(RANDOM_COUNT)] for seed in RANDOM_SEEDS},
}


def run_child(args):
    env = child_env()
    proc = subprocess.run([sys.executable, CHILD, *args], capture_output=True, text=True, env=env, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, lines


@pytest.fixture(scope="module")
def batches():
    """Runs every batch, two children at a time; returns name -> (process, lines)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run_child, args) for name, args in BATCHES.items()}
        results = {name: f.result() for name, f in futures.items()}
    write_summary(results)
    return results


def write_summary(results):
    summary = {"batches": {}, "cases": 0, "crashes": 0, "problems": 0, "nan_table": {}}
    for name, (proc, lines) in results.items():
        outcomes = collections.Counter(
            f"{r['outcome']}" + (f" {r['class']}" if r.get("class") else "") for r in lines if "outcome" in r)
        summary["batches"][name] = {"returncode": proc.returncode, "cases": sum(outcomes.values()),
                                    "outcomes": dict(outcomes)}
        summary["cases"] += sum(outcomes.values())
        summary["crashes"] += proc.returncode != 0
        summary["problems"] += sum(bool(r.get("problems")) for r in lines)
        if name == "nan":
            summary["nan_table"] = {r["id"]: r["table"] for r in lines if "table" in r}
    os.makedirs(os.path.dirname(SUMMARY), exist_ok=True)
    with open(SUMMARY, "w") as f:
        json.dump(summary, f, indent=1)


def crash_report(name, proc, lines):
    """A message when the child for batch name did not exit cleanly, else None."""
    started = [r["start"] for r in lines if "start" in r]
    finished = {r["id"] for r in lines if "id" in r}
    unfinished = [s for s in started if s not in finished]
    if proc.returncode != 0:
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        return (f"child for batch {name} {how} while running {unfinished[-1:] or 'no case'}; "
                f"stderr tail:\n{proc.stderr[-3000:]}")
    if not lines or not lines[-1].get("done"):
        return f"batch {name} did not finish:\n{proc.stderr[-3000:]}"
    if unfinished:
        return f"cases started without a result: {unfinished}"
    return None


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_survives_and_rejects_clearly(batches, name):
    proc, lines = batches[name]
    report = crash_report(name, proc, lines)
    if report:
        pytest.fail(report, pytrace=False)
    results = [r for r in lines if "outcome" in r]
    assert len(results) == lines[-1]["cases"] > 0
    bad = [f"{r['id']}: {'; '.join(r['problems'])}" for r in results if r["problems"]]
    assert not bad, f"{len(bad)} of {len(results)} cases failed:\n" + "\n".join(bad[:40])
    if name.startswith("random"):
        outcomes = collections.Counter(r["outcome"] for r in results)
        # The generator aims at a mix; a batch of only rejections tests little.
        assert outcomes["ok"] >= len(results) // 5 and outcomes["error"] >= len(results) // 5, outcomes
        assert not any(r["class"] == "InternalError" for r in results)


def test_a_crash_is_reported_with_its_case():
    """The harness itself: a child that dies of SIGSEGV mid-case is a failure naming the case."""
    code = "import ctypes, json; print(json.dumps({'start': 'the-case'}), flush=True); ctypes.string_at(0)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    report = crash_report("selftest", proc, lines)
    assert report and "killed by signal 11" in report and "the-case" in report, report
