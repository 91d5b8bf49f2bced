"""Synchronized batch norm across worker processes: tf.distribute's
MultiWorkerMirroredStrategy with two local workers on 127.0.0.1.

- Two workers give what one process gives on the global batch, for
  gobn.keras.SyncBatchNormalization and gobn.sync_batch_norm, against a
  float64 reference (forward, x's gradient, summed gamma/beta gradients,
  statistics), and the steps ran gobn's Reduce/Apply ops around a collective
  all-reduce (multiworker_child.py).
- examples/multiworker/train.py runs as its README says.
- A killed worker (its connections reset: the survivor fails in about 1 s)
  or a hung one (SIGSTOP: the coordination service's heartbeat notices it
  in about 10 s) makes the survivor fail, with an error naming the lost
  task, within FAILURE_BOUND_S instead of hanging.

Every worker is a subprocess of the test, killed by its process id when the
test ends, passes or fails (the workers fixture); every wait has a timeout.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

# The example's launcher helpers: free loopback ports, a worker's TF_CONFIG.
from examples.multiworker.train import free_ports, tf_config
from support import REPO_ROOT, assert_close, child_env

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multiworker_child as child  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(REPO_ROOT, "examples", "multiworker", "train.py")
# A worker's start (TensorFlow's import, the cluster's handshake) takes
# seconds; these bounds leave room for a loaded machine.
RUN_TIMEOUT_S = 60
# The survivor must fail within this many seconds of losing its peer: a dead
# peer's connections reset (about 1 s); the coordination service's heartbeat
# notices a hung one in about 10 s.
FAILURE_BOUND_S = 30


class Workers:
    """Starts worker processes of one loopback cluster; kills them all at teardown."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.procs = []

    def start(self, command, n=2):
        cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}
        env = child_env(TF_CPP_MIN_LOG_LEVEL="2")
        started = []
        for i in range(n):
            env["TF_CONFIG"] = tf_config(cluster, i)
            out = open(self.tmp_path / f"worker{i}.out", "w")
            err = open(self.tmp_path / f"worker{i}.err", "w")
            proc = subprocess.Popen([sys.executable] + command, env=env, stdout=out, stderr=err, cwd=REPO_ROOT)
            out.close()
            err.close()
            proc.index = i
            self.procs.append(proc)
            started.append(proc)
        return started

    def output(self, proc):
        return ((self.tmp_path / f"worker{proc.index}.out").read_text(),
                (self.tmp_path / f"worker{proc.index}.err").read_text())

    def wait_all(self, procs, timeout):
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {proc.index} still running after {timeout} s\n{self.describe(procs)}",
                            pytrace=False)
        bad = [p for p in procs if p.returncode != 0]
        if bad:
            pytest.fail(f"worker(s) {[p.index for p in bad]} failed\n{self.describe(procs)}", pytrace=False)

    def describe(self, procs):
        parts = []
        for p in procs:
            out, err = self.output(p)
            parts.append(f"--- worker {p.index} (exit {p.returncode}) stdout:\n{out[-3000:]}\n"
                         f"--- stderr:\n{err[-3000:]}")
        return "\n".join(parts)

    def kill_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def workers(tmp_path):
    w = Workers(tmp_path)
    try:
        yield w
    finally:
        w.kill_all()


# ---------------------------------------------------------------------------
# Two workers = one process on the global batch


def reference(x, dy, gamma, beta, channel_axis):
    """float64 training-mode batch norm of the whole batch and its gradient
    for the loss Σ y·dy: (y, dx, dgamma, dbeta, mean, biased variance)."""
    x, dy, gamma, beta = (np.asarray(a, np.float64) for a in (x, dy, gamma, beta))
    axes = tuple(i for i in range(x.ndim) if i != channel_axis)
    shape = [1] * x.ndim
    shape[channel_axis] = -1
    n = x.size // x.shape[channel_axis]
    mean = x.mean(axis=axes)
    variance = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    c = 1.0 / np.sqrt(variance + np.float64(np.float32(child.EPSILON)))
    xhat = (x - mean.reshape(shape)) * c.reshape(shape)
    y = gamma.reshape(shape) * xhat + beta.reshape(shape)
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    dx = (gamma * c).reshape(shape) * (dy - dbeta.reshape(shape) / n - xhat * dgamma.reshape(shape) / n)
    return y, dx, dgamma, dbeta, mean, variance


@pytest.fixture(scope="module")
def two_worker_results(tmp_path_factory):
    """Runs multiworker_child.py on two workers once; returns their outputs."""
    tmp_path = tmp_path_factory.mktemp("multiworker")
    w = Workers(tmp_path)
    try:
        procs = w.start([os.path.join(HERE, "multiworker_child.py"), str(tmp_path)])
        w.wait_all(procs, RUN_TIMEOUT_S)
    finally:
        w.kill_all()
    arrays = [dict(np.load(tmp_path / f"worker{i}.npz")) for i in range(2)]
    types = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)]
    return arrays, types


def test_keras_layer_on_two_workers_equals_one_process(two_worker_results):
    arrays, _ = two_worker_results
    x, dy, gamma, beta = child.data(child.KERAS_SHAPE, child.KERAS_SHAPE[-1], seed=1)
    y, dx, dgamma, dbeta, mean, variance = reference(x, dy, gamma, beta, channel_axis=3)
    # Each worker holds its slice of y and of x's gradient; its gamma and
    # beta gradients are of its slice, and the strategy sums them.
    assert [a["keras_y"].shape[0] for a in arrays] == list(child.KERAS_SPLIT)
    assert_close(np.concatenate([a["keras_y"] for a in arrays]), y, tf.float32, "y")
    assert_close(np.concatenate([a["keras_dx"] for a in arrays]), dx, tf.float32, "x gradient")
    assert_close(sum(a["keras_dgamma"] for a in arrays), dgamma, tf.float32, "gamma gradient")
    assert_close(sum(a["keras_dbeta"] for a in arrays), dbeta, tf.float32, "beta gradient")
    m = child.MOMENTUM
    for i, a in enumerate(arrays):  # from moving_mean = 0, moving_variance = 1
        assert_close(a["keras_moving_mean"], (1 - m) * mean, tf.float32, f"worker {i} moving mean")
        assert_close(a["keras_moving_variance"], m + (1 - m) * variance, tf.float32, f"worker {i} moving variance")


def test_sync_batch_norm_on_two_workers_equals_one_process(two_worker_results):
    arrays, _ = two_worker_results
    x, dy, gamma, beta = child.data(child.SYNC_SHAPE, child.SYNC_SHAPE[1], seed=2)
    y, dx, dgamma, dbeta, mean, variance = reference(x, dy, gamma, beta, channel_axis=1)
    assert [a["sync_y"].shape[0] for a in arrays] == list(child.SYNC_SPLIT)  # uneven: 3 and 5
    assert_close(np.concatenate([a["sync_y"] for a in arrays]), y, tf.float32, "y")
    assert_close(np.concatenate([a["sync_dx"] for a in arrays]), dx, tf.float32, "x gradient")
    assert_close(sum(a["sync_dgamma"] for a in arrays), dgamma, tf.float32, "scale gradient")
    assert_close(sum(a["sync_dbeta"] for a in arrays), dbeta, tf.float32, "offset gradient")
    for i, a in enumerate(arrays):
        assert_close(a["sync_mean"], mean, tf.float32, f"worker {i} global mean")
        assert_close(a["sync_variance"], variance, tf.float32, f"worker {i} global biased variance")


@pytest.mark.parametrize("which", ["keras", "sync"])
def test_steps_ran_gobn_ops_around_a_collective(two_worker_results, which):
    _, types = two_worker_results
    for i, t in enumerate(types):
        t = set(t[which])
        assert {"Gobn>BatchNormGradReduce", "Gobn>BatchNormGradApply"} <= t, f"worker {i}: {sorted(t)}"
        assert not t & {"FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"}, f"worker {i}"
        assert any(op.startswith("CollectiveReduce") for op in t), f"worker {i}: no all-reduce in {sorted(t)}"


# ---------------------------------------------------------------------------
# The example


def test_example_trains_on_two_workers(workers):
    procs = workers.start([EXAMPLE, "--steps", "3", "--threads", "1"])
    workers.wait_all(procs, RUN_TIMEOUT_S)
    checksums = set()
    for proc in procs:
        out, _ = workers.output(proc)
        steps = re.findall(rf"^worker {proc.index} step (\d+) loss (\S+) global (\S+)$", out, re.M)
        assert [int(s) for s, _, _ in steps] == [0, 1, 2], out
        assert all(np.isfinite(float(a)) and np.isfinite(float(b)) for _, a, b in steps), out
        checksums.update(re.findall(r"weights checksum (\S+)", out))
    assert len(checksums) == 1, f"the workers' weights differ: {checksums}"


# ---------------------------------------------------------------------------
# A lost worker


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_lost_worker_makes_the_survivor_fail(workers, how):
    """SIGKILL (the peer's connections reset) or SIGSTOP (a hung peer: only
    the collective timeout or the coordination service's heartbeat notice)."""
    survivor, victim = workers.start([EXAMPLE, "--steps", "100000", "--threads", "1",
                                      "--collective-timeout", "20"])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while "worker 1 step 2 " not in workers.output(victim)[0]:
        if time.monotonic() > deadline or survivor.poll() is not None or victim.poll() is not None:
            pytest.fail(f"the workers did not reach step 2\n{workers.describe([survivor, victim])}",
                        pytrace=False)
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    killed = time.monotonic()
    try:
        survivor.wait(timeout=FAILURE_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the survivor still runs {FAILURE_BOUND_S} s after its peer was {how}\n"
                    f"{workers.describe([survivor])}", pytrace=False)
    elapsed = time.monotonic() - killed
    out, err = workers.output(survivor)
    assert survivor.returncode != 0, f"the survivor exited 0\n{workers.describe([survivor])}"
    assert "done:" not in out
    assert re.search(r"(Unavailable|DeadlineExceeded|Aborted|Internal)Error", err), \
        f"no error named in the survivor's stderr:\n{err[-3000:]}"
    assert "task:1" in err, f"the survivor's error does not name the lost worker (task 1):\n{err[-3000:]}"
    print(f"[{how}] the survivor failed {elapsed:.1f} s after its peer was lost")
