"""The kinds of op in Python (gobn._kinds): every kind opdef has, its module,
found by the kind's name, with what its ops need; no module of a kind opdef
does not have; each op's gradient its kind's; and the lookup of an op's
tensors by the names of its args, lists included."""

import os

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.framework import ops

from gobn import _kinds, _opdef, _stock_gradients
from gobn._opdefs_gen import OPS
from support import PYTHON_DIR

KINDS = list(dict.fromkeys(op.kind for op in OPS))


def test_every_kind_has_its_module():
    for kind in KINDS:
        assert _kinds.missing(kind) == [], kind


def test_a_kind_without_a_module_names_its_file():
    assert _kinds.missing("ThrowawayGrad") == [
        'python/gobn/_kinds/throwaway_grad.py: no module for the kind ThrowawayGrad '
        '(CONTRIBUTING.md, "Adding an op")']


def test_a_module_missing_a_piece_names_it(monkeypatch):
    module = _kinds.of("GradApply")
    monkeypatch.delattr(module, "xla_inputs")
    monkeypatch.delattr(module, "sample")
    assert _kinds.missing("GradApply") == ["python/gobn/_kinds/grad_apply.py: sample",
                                           "python/gobn/_kinds/grad_apply.py: xla_inputs"]


def test_no_module_of_a_kind_opdef_does_not_have():
    folder = os.path.join(PYTHON_DIR, "gobn", "_kinds")
    modules = {name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py"}
    assert modules == {_kinds.module_name(kind) for kind in KINDS}


def test_every_op_has_its_kinds_gradient():
    for op in OPS:
        assert ops.gradient_registry.lookup(op.name) is _kinds.of(op.kind).gradient, op.name
    assert set(_stock_gradients.GRADIENTS) == {op.gradient_of for op in OPS if op.gradient_of}


class _Op:
    """An op of an OpDef with attrs, as the lookups read one."""

    def __init__(self, op_def, attrs, inputs, outputs):
        self.op_def, self._attrs, self.inputs, self.outputs = op_def, attrs, inputs, outputs

    def get_attr(self, name):
        return self._attrs[name]


def test_tensors_by_name_with_a_list():
    """An output that is a list of as many tensors as an int attr says (0 or
    1 for gobn's ops), before and after other outputs."""
    op_def = op_def_pb2.OpDef(
        name="Example",
        input_arg=[op_def_pb2.OpDef.ArgDef(name=n, type_attr="T") for n in ("dy", "x")],
        output_arg=[op_def_pb2.OpDef.ArgDef(name="dx", type_attr="T"),
                    op_def_pb2.OpDef.ArgDef(name="side", type_attr="T", number_attr="n")])
    for n in (0, 1):
        outputs = [tf.constant(float(i)) for i in range(1 + n)]
        op = _Op(op_def, {"n": n}, ["dy", "x"], outputs)
        assert _opdef.inputs_by_name(op) == {"dy": "dy", "x": "x"}
        assert _opdef.input_index(op, "x") == 1
        by_name = _opdef.by_output_name(op, outputs)
        assert by_name["dx"] is outputs[0] and by_name["side"] == outputs[1:]
    assert _opdef.output_names(op) == ["dx", "side"]
