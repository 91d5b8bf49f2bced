"""The activation's gradient fused into the batch norm's.

Almost every batch norm of a network is followed by a ReLU or a ReLU6, and
its backward pass runs the activation's gradient (``ReluGrad``: read dy
and the activation's output, write dz) before the batch norm's, which reads
dz twice. Where gobn builds a batch norm's gradient on a graph (in a
``tf.function``, as Keras trains) and the gradient it is given is exactly
``ReluGrad`` or ``Relu6Grad`` of a ``Relu`` or ``Relu6`` of the batch
norm's output, it emits ``Gobn>FusedBatchNormGradEx`` on the activation's
own incoming gradient and output instead: the mask is applied where the
kernel reads dy, and dz is never written. The activation's gradient op is
left without a consumer, and TensorFlow prunes it from the function (but
where something else asks for it: a tape's gradient with respect to the
activation's input, say, which then still gets it).

A batch norm followed by an addition (a residual's shortcut) and then the
activation is left as it was: its gradient op is also the shortcut's
gradient, which is built apart from the batch norm's and reads it, so it
runs all the same. Eager gradients, where the activation's gradient has
already run, are left as they were too.

The switch: ``GOBN_FUSE_ACTIVATIONS=0`` in the environment, or
``gobn.enable(fuse_activations=False)``, turns it off for gradients built
after (a ``tf.function`` traced before keeps what it was traced with).
"""

import os
import threading

from tensorflow.python.framework.ops import EagerTensor

from gobn import _xla

# The activation gradients that fuse: each with its forward op and the
# activation_mode of Gobn>FusedBatchNormGradEx.
ACTIVATIONS = {"ReluGrad": ("Relu", "Relu"), "Relu6Grad": ("Relu6", "Relu6")}

_lock = threading.Lock()
_switch = None  # enable(fuse_activations=...)'s, where it has said


def on():
    """Whether gobn fuses activation gradients into the batch norm's:
    enable(fuse_activations=)'s setting, else GOBN_FUSE_ACTIVATIONS (on
    unless "0")."""
    if _switch is not None:
        return _switch
    return os.environ.get("GOBN_FUSE_ACTIVATIONS", "1") != "0"


def set_on(fuse):
    """Sets the switch for the process (enable's fuse_activations)."""
    global _switch
    with _lock:
        _switch = bool(fuse)


def _source(t):
    """t, followed back through Identity and IdentityN (a custom gradient's
    outputs, gobn.fused_batch_norm's) to the tensor they pass on."""
    while t.op.type in ("Identity", "IdentityN"):
        t = t.op.inputs[t.value_index if t.op.type == "IdentityN" else 0]
    return t


def match(dy, output):
    """The activation to fuse into the gradient of the batch norm whose
    incoming gradient is dy, output one of its op's outputs (its first, y,
    is the activation's input): (the activation's incoming gradient, its
    output, its activation_mode), or None where there is none (the switch
    off, eager tensors, another gradient)."""
    if not on() or dy is None or isinstance(dy, EagerTensor):
        return None
    op = dy.op
    if op.type not in ACTIVATIONS:
        return None
    forward, mode = ACTIVATIONS[op.type]
    grad, features = op.inputs[0], op.inputs[1]
    if features.op.type != forward:
        return None
    source = _source(features.op.inputs[0])
    if source.op is not output.op or source.value_index != 0:
        return None
    return grad, features, mode


def gradient(dy, output, xla, **args):
    """(x_backprop, scale_backprop, offset_backprop) of the batch norm whose
    incoming gradient is dy and whose op has the output output, from
    Gobn>FusedBatchNormGradEx where dy is an activation's gradient to fuse
    (match), built for XLA where xla says so (gobn._xla); None otherwise.
    args: the batch norm's x, scale, offset, its statistics as the gradient
    takes them (reserve_space_1 to _3) and its epsilon, data_format and
    is_training."""
    found = match(dy, output)
    if found is None:
        return None
    grad, features, mode = found
    out = _xla.call("Gobn>FusedBatchNormGradEx", xla, y_backprop=grad, y=features, activation_mode=mode, **args)
    return out.x_backprop, out.scale_backprop, out.offset_backprop
