"""gobn.enable(): stock TensorFlow's batch-norm gradients on gobn's kernels,
with oneDNN off and on.

enable() lasts for the process (TensorFlow cannot unregister a kernel), so
each configuration runs enable_child.py in a child Python that computes
every case with stock first, enables gobn, computes again and reports; this
process never enables. Expected values are stock TensorFlow's, computed in
the same child before enable(), or a float64 reference.

- oneDNN off: kernel priority puts gobn's kernels under stock's gradient ops,
  so direct calls of those ops run on gobn too.
- oneDNN on: TensorFlow rewrites the float32 and bfloat16 gradient ops to its
  own before it picks a kernel, so enable() gives the forward ops gradients
  made of Gobn> ops; the gradients of tapes, graphs and Keras models run on
  gobn, direct calls of stock's gradient ops stay oneDNN's.

Stock BatchNormWithGlobalNormalizationGrad is refused by TensorFlow itself
in today's graphs (deprecated at GraphDef version 9) before any kernel is
chosen, so enable()'s kernels for it serve only older GraphDefs; it is
checked here as registered, and as the gradient of its forward op in a
version-8 graph.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from support import TOLERANCES, child_env, op_table, tf
from test_cuda_build import cuda_mode

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enable_child.py")

# The dtypes of T stock TensorFlow 2.21 registers kernels for, by device
# (its CPU and GPU builds' registries): what enable() must cover, the op
# table's stock_kernels.
STOCK_KERNELS = {row["stock"]: row["stock_kernels"] for row in op_table() if row["stock"]}


def run_child(onednn):
    out = subprocess.run([sys.executable, CHILD], env=child_env(TF_ENABLE_ONEDNN_OPTS=str(onednn),
                                                                 TF_CPP_MIN_LOG_LEVEL="2"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["onednn"] == bool(onednn), "TF_ENABLE_ONEDNN_OPTS did not take"
    return report


@pytest.fixture(scope="module", params=[0, 1], ids=["onednn_off", "onednn_on"])
def child(request):
    return run_child(request.param)


def relative_error(got, want):
    """max|got − want| / max|want| over the arrays of a case's results (lists of arrays)."""
    return max(float(np.max(np.abs(np.asarray(g) - np.asarray(w))) / max(float(np.max(np.abs(w))), 1e-30))
               for g, w in zip(got, want, strict=True))


def rtol(dtype):
    return TOLERANCES[dtype][0]


def expected_report():
    """What enable() registers under each stock twin's name: the twin's own
    kernels, by device (the GPU's with the CUDA path), as the op table has
    them; each covers stock's (stock_kernels), and goes beyond where stock
    has fewer (_FusedBatchNormGradEx has no CPU kernel in stock)."""
    want = {}
    for row in op_table():
        if not row["stock"]:
            continue
        devices = {"CPU": row["cpu_kernels"], "GPU": row["gpu_kernels"]} if cuda_mode() else {"CPU": row["cpu_kernels"]}
        want[row["stock"]] = {device: sorted(tf.as_dtype(b[0]).name for b in bindings)
                              for device, bindings in devices.items()}
        for device, dtypes in want[row["stock"]].items():
            assert set(STOCK_KERNELS[row["stock"]][device]) <= set(dtypes), (row["stock"], device)
    return want


def test_enable_covers_every_stock_kernel_and_is_idempotent(child):
    assert child["before"] == {}, "loading the library alone must not run gobn for stock ops"
    assert child["report"] == expected_report()
    assert child["same_report"]
    assert child["warnings"] == []


def onednn_rewrites(op, dtype):
    """Whether TensorFlow 2.21 with oneDNN on runs an eager call of stock op
    in dtype as its own _MklNative op (mkl_eager_op_rewrite, IsMklOp): when
    it registers that op for dtype, and for bfloat16 and float16 only on a
    CPU where oneDNN takes them (bench/machine.py)."""
    from tensorflow.python.framework import kernels

    from bench.machine import onednn_takes

    want = tf.as_dtype(dtype).as_datatype_enum
    registered = any(c.name == "T" and want in c.allowed_values.list.type
                     for k in kernels.get_registered_kernels_for_op("_MklNative" + op).kernel
                     for c in k.constraint)
    return registered and onednn_takes(dtype)


def test_direct_calls_of_stock_gradient_ops(child):
    """Each call of a stock gradient op runs gobn's kernel with oneDNN off.
    With oneDNN on, TensorFlow rewrites those it has a oneDNN kernel for on
    this CPU to its own ops first (they stay oneDNN's, as enable() documents;
    on a CPU with AVX-512 and FP16 arithmetic, all but FusedBatchNormGradV3
    in float16; without FP16, none in float16), and the
    others run on gobn. The results are stock's either way."""
    for case, calls in child["calls"].items():
        if not case.startswith("raw "):
            continue
        _, op, dtype, _ = case.split()
        assert relative_error(child["got"][case], child["stock"][case]) <= rtol(dtype), case
        on_gobn = not child["onednn"] or not onednn_rewrites(op, dtype)
        assert calls == (1 if on_gobn else 0), (case, calls)


def test_gradients_of_stock_forward_ops(child):
    """The gradient of each stock twin's forward op (the op table's gradient_of),
    taken after enable(), runs the twin's kernel once: with oneDNN off stock's
    gradient function builds the stock op, whose kernel is gobn's; with
    oneDNN on gobn's function builds the Gobn> op (gobn._stock_gradients).
    The results are stock's, taken before enable()."""
    twins = {row["gradient_of"]: row for row in op_table() if row["gradient_of"]}
    cases = [case for case in child["calls_by_op"] if case.startswith("gradient of ")]
    assert sorted({case.split()[2] for case in cases}) == sorted(twins), "a case for every forward op"
    for case in cases:
        row = twins[case.split()[2]]
        assert child["calls_by_op"][case] == {row["name"] if child["onednn"] else row["stock"]: 1}, case
        assert relative_error(child["got"][case], child["stock"][case]) <= rtol("float32"), case


def test_onednns_forward_saves_the_batch_mean_and_biased_variance(child):
    """The reserve spaces the gradient functions feed gobn, from the forward
    TensorFlow ran: oneDNN's _MklNativeFusedBatchNormV3 when it is on, whose
    third is empty; Eigen's third is a scalar. Neither gradient reads it."""
    for forward in (child["stock_forward"], child["forward"]):
        want = "_MklNativeFusedBatchNormV3" if child["onednn"] else "FusedBatchNormV3"
        assert forward["ops"] == [want], forward["ops"]
        assert relative_error([forward["reserve_space_1"]], [child["batch_mean"]]) <= 1e-6
        assert relative_error([forward["reserve_space_2"]], [child["biased_variance"]]) <= 1e-6
        assert forward["reserve_space_3_shape"] == ([0] if child["onednn"] else [])


def test_training_step_traced_after_enable_runs_on_gobn(child):
    assert child["calls"]["train_step"] == 1
    # against the float64 reference, at least as accurate as stock's step
    got = relative_error(child["got"]["train_step"], child["step_reference"])
    stock = relative_error(child["stock"]["train_step"], child["step_reference"])
    assert got <= max(stock, 1e-6), (got, stock)


def test_jit_compile_runs_gobns_xla_handler(child):
    """Under jit_compile XLA compiles the step, its batch-norm gradient a call
    of gobn's XLA handler (gobn._xla) and no other case's: as accurate against
    the float64 reference as stock's step compiled by XLA."""
    assert child["calls"]["train_step jit_compile"] == 0
    assert child["xla_calls"] == {name: int(name == "train_step jit_compile") for name in child["xla_calls"]}
    got = relative_error(child["got"]["train_step jit_compile"], child["step_reference"])
    stock = relative_error(child["stock"]["train_step jit_compile"], child["step_reference"])
    assert got <= max(stock, 1e-6), (got, stock)


def test_second_order_gradients(child):
    assert child["calls"]["second_order"] >= 1, "the first-order gradient inside ran on gobn"
    assert relative_error(child["got"]["second_order"], child["stock"]["second_order"]) <= rtol("float32")


@pytest.mark.parametrize("case", ["tf_keras float32", "tf_keras mixed_bfloat16"])
def test_unmodified_tf_keras_model_trains_on_gobn(child, case):
    """A Keras 2 model trains with gobn computing every batch-norm gradient:
    two epochs of 4 batches, 8 gradient calls, and the losses of stock's run
    (in bfloat16 where the policy is mixed_bfloat16)."""
    assert child["calls"][case] == 8
    tolerance = rtol("bfloat16" if case.endswith("bfloat16") else "float32")
    assert relative_error(child["got"][case], child["stock"][case]) <= tolerance, \
        (child["got"][case], child["stock"][case])
