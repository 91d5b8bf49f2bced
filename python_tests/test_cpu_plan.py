"""The CPU kernels' tuning, set for benchmarking: GOBN_CPU_PLAN when the
library loads and the library's gobnCPUPlan export (capi/cpuplan.go), as
bench/manycore.py uses them. A setting must reach the kernels: the
split statistics (gobnSplitStats) of a fresh process show how many workers
its calls ran on."""

import json
import os
import subprocess
import sys

_CHILD = r"""
import ctypes, json, sys
import numpy as np
import tensorflow as tf
import gobn

lib = gobn._library.loaded()

def call(name, *args):
    fn = getattr(lib, name)
    fn.restype = ctypes.c_void_p
    if args:
        fn.argtypes = [ctypes.c_char_p]
    p = fn(*args)
    try:
        return json.loads(ctypes.string_at(p).decode())
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(p))

x = tf.constant(np.random.default_rng(3).standard_normal((8, 64, 64, 64)), tf.float32)  # 2^21 elements
c = tf.ones([64])

def grad():
    return gobn.ops.gobn_fused_batch_norm_grad_v3(
        y_backprop=x, x=x, scale=c, reserve_space_1=c, reserve_space_2=c, reserve_space_3=c,
        epsilon=0.001, data_format="NHWC", is_training=True)[0].numpy()

report = {"loaded": call("gobnCPUPlan", None)}
first = grad()
report["split_first"] = call("gobnSplitStats")
if len(sys.argv) > 1:
    report["set"] = call("gobnCPUPlan", sys.argv[1].encode())
    report["same_bits"] = bool(np.array_equal(grad(), first))
    report["split_then"] = call("gobnSplitStats")
    report["bad"] = call("gobnCPUPlan", b"per_worker=-1")
print(json.dumps(report))
"""


def _child(env_plan, *argv):
    from support import child_env

    out = subprocess.run([sys.executable, "-c", _CHILD, *argv], env=child_env(GOBN_CPU_PLAN=env_plan),
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_cpu_plan_reaches_the_kernels():
    """GOBN_CPU_PLAN's one worker per 2^30 elements keeps a call of 2^21 on
    its thread; gobnCPUPlan's default then splits it over the cores (up to
    8, one per 2^18 elements), with the same bits."""
    cores = len(os.sched_getaffinity(0))
    report, _ = _child("per_worker=1073741824,wake=2", "per_worker=262144")
    loaded = report["loaded"]
    assert "per_worker=1073741824" in loaded["tuning"] and "wake=2" in loaded["tuning"]
    gobn_cores = loaded["machine"]["Cores"]  # fewer where a cgroup's quota says
    assert "env_error" not in loaded and 1 <= gobn_cores <= cores
    assert report["split_first"]["calls"] == 1, "32 chunks: the call counts as cut"
    assert report["split_first"]["max_workers"] == 1
    assert "per_worker=262144" in report["set"]["tuning"] and "error" not in report["set"]
    assert report["split_then"]["calls"] == 2
    assert report["split_then"]["max_workers"] == min(gobn_cores, 8)
    assert report["same_bits"]
    assert report["bad"]["error"].startswith("gobn: CPU plan setting")
    assert report["bad"]["tuning"] == report["set"]["tuning"], "a bad setting changes nothing"


def test_cpu_plan_environment_error():
    report, stderr = _child("threads=3")
    assert report["loaded"]["tuning"] == report["loaded"]["default"]
    assert "threads=3" in report["loaded"]["env_error"] and "GOBN_CPU_PLAN" in stderr
