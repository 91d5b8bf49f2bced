"""test_device.py's enable check in a process of its own, since gobn.enable()
lasts for its process:

    python enable_device_child.py DEVICE

It runs stock's FusedBatchNormGradV3 on DEVICE, calls gobn.enable(), runs it
again, and prints one JSON report: the calls of gobn's kernel on the device
the second run made, how far its results are from stock's own (the share of
float32's tolerance used) and gobn's stream counts.
"""

import json
import sys

import support  # noqa: F401  (first: the package on sys.path)

import tensorflow as tf

import gobn
from gobn._opdefs_gen import BY_KIND
from support import device_type, fused_inputs, tolerance_used

device = sys.argv[1]
if device_type(device) == "GPU":
    tf.config.set_soft_device_placement(False)
op = BY_KIND["FusedBatchNormGrad"][-1]  # the stock op whose kernel enable() takes over on every device
stock = getattr(tf.raw_ops, op.stock)
made = fused_inputs(op, tf.float32, "NHWC", True, (8, 10, 10, 24), 11, device)


def calls():
    return gobn.kernel_calls().get(op.stock, {}).get(device_type(device), 0)


with tf.device(device):
    want = [t.numpy() for t in stock(**made.inputs, **made.attrs)[:3]]
    gobn.enable()
    before = calls()
    got = [t.numpy() for t in stock(**made.inputs, **made.attrs)[:3]]
    ran = calls() - before
norm = max(tolerance_used(g, w, tf.float32) for g, w in zip(got, want))
print(json.dumps(dict(calls_on_device=ran, norm_vs_stock=norm,
                      stream=gobn._stream_stats())))
