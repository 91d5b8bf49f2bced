"""gobn's GPU kernels as TensorFlow's kernel registry lists them, checked
without a GPU (tensorflow-cpu registers GPU kernels all the same).

A library built with the CUDA path (GOBN_CUDA=1, the default) registers a GPU
kernel for each dtype stock TensorFlow 2.21's GPU build has one for, the
synchronized batch-norm halves (gobn's own ops) for the CPU kernels' dtypes,
with their int64 count in host memory. A library built with GOBN_CUDA=0
registers none, so TensorFlow places every gobn op on the CPU.
"""

import pytest
from tensorflow.python.framework import kernels as kernel_registry

import gobn as gobn_package

from support import op_table
from test_cuda_build import cuda_mode

# (T, U) of stock TensorFlow 2.21's GPU kernels (its GPU wheel's registry:
# fused_batch_norm_op.cc, batch_norm_op.cc), U None for ops without it, and
# the args in host memory: the op table's gpu_kernels and host_memory.
GPU_BINDINGS = {row["name"].removeprefix("Gobn>"): {(b[0], b[1] if len(b) > 1 else None) for b in row["gpu_kernels"]}
                for row in op_table()}
HOST_MEMORY = {row["name"].removeprefix("Gobn>"): row["host_memory"] for row in op_table()}
DTYPE_NAMES = {1: "float", 2: "double", 14: "bfloat16", 19: "half"}


def registered(op, device_type):
    """The (T, U) bindings and host-memory args of op's kernels on device_type."""
    out = {}
    for k in kernel_registry.get_registered_kernels_for_op("Gobn>" + op).kernel:
        if k.device_type != device_type:
            continue
        types = {c.name: DTYPE_NAMES[c.allowed_values.list.type[0]] for c in k.constraint}
        out[(types["T"], types.get("U"))] = sorted(k.host_memory_arg)
    return out


# Every op the library registers (gobn.OP_NAMES, opdef.All's order), without "Gobn>".
OPS = [name.removeprefix("Gobn>") for name in gobn_package.OP_NAMES]


def test_every_op_has_gpu_bindings():
    assert sorted(GPU_BINDINGS) == sorted(OPS)


@pytest.mark.parametrize("op", OPS)
def test_gpu_kernels_registered(gobn, op):
    got = registered(op, "GPU")
    mode = cuda_mode()
    if mode is None:
        pytest.fail("cannot tell whether the library was built with the CUDA path", pytrace=False)
    if not mode:
        assert got == {}, "a library built with GOBN_CUDA=0 registers no GPU kernel"
        return
    assert set(got) == GPU_BINDINGS[op]
    for binding, host in got.items():
        assert host == HOST_MEMORY[op], binding
    # The CPU kernels are all still there beside them.
    assert registered(op, "CPU")
