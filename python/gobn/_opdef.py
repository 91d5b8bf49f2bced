"""The record of one op libgobn.so registers, as opdef (Go) describes it.

_opdefs_gen.py (generated from opdef by cmd/genpy) lists them, in
registration order, as OPS, with indices by name, stock twin and kind. An
Op holds: the registered name; its Python wrapper; its stock twin (or
None); the stock forward op whose gradient the twin is (or None); its kernel
family (kind); its arguments (inputs, outputs) and attrs by name; its data
formats; the dtypes of T its CPU and GPU kernels take (dtypes, gpu_dtypes,
as TensorFlow's specs name them); the type of each output ("T", or a fixed
type); the args a GPU kernel keeps in host memory; and the op's XLA custom
call (gobn._xla): its operands (name, type, ranks allowed, () for any), its
results (name, the operand whose shape it takes) and its attrs (name, kind).
"""

import collections

Op = collections.namedtuple("Op", "name wrapper stock gradient_of kind inputs outputs attrs data_formats dtypes "
                                  "gpu_dtypes output_types host_memory xla_inputs xla_outputs xla_attrs")
