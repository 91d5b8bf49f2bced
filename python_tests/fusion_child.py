"""One process of test_fusion.py: Keras models whose batch norms are followed
by a ReLU and a ReLU6, trained with gobn's activation fusion on and off.

    TF_ENABLE_ONEDNN_OPTS=0|1 python fusion_child.py

gobn.enable() lasts for the process, so the Keras 3 model converted with
gobn.keras.convert trains first; then, after enable(), a tf_keras model and
an unconverted Keras 3 one. Each trains STEPS batches twice from the same
weights, with the fusion on and off (gobn._fusion's switch, which
GOBN_FUSE_ACTIVATIONS and enable(fuse_activations=) set). It prints one JSON
report: whether oneDNN is on, and by route: the steps, the losses of each run, the calls of
Gobn>FusedBatchNormGradEx with the fusion on, and the op types TensorFlow
ran (the partition graphs of the run metadata). The checks are
test_fusion.py's.
"""

import json

import support  # noqa: F401  (first: the package on sys.path)

import keras
import numpy as np
import tf_keras
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port

import gobn
from gobn import _fusion

FUSED = "Gobn>FusedBatchNormGradEx"
BATCH, STEPS = 8, 3
rng = np.random.default_rng(71)
X = rng.normal(0.5, 2.0, (BATCH * STEPS, 8, 8, 3)).astype("float32")
Y = rng.integers(0, 3, BATCH * STEPS)


def model(k):
    """Conv → BN → ReLU → Conv → BN → ReLU6, in Keras k (keras or tf_keras)."""
    k.utils.set_random_seed(3)
    return k.Sequential([
        k.Input((8, 8, 3)), k.layers.Conv2D(8, 3, use_bias=False), k.layers.BatchNormalization(), k.layers.ReLU(),
        k.layers.Conv2D(8, 3, use_bias=False), k.layers.BatchNormalization(), k.layers.ReLU(6.0),
        k.layers.GlobalAveragePooling2D(), k.layers.Dense(3),
    ])


def train(k, fuse, convert=False):
    """(losses, fused calls, op types run) of STEPS batches."""
    _fusion.set_on(fuse)
    m = model(k)
    if convert:
        m = gobn.keras.convert(m)
    m.compile(k.optimizers.SGD(0.05), k.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = gobn.kernel_calls().get(FUSED, {}).get("CPU", 0)
    ctx = context.context()
    ctx.enable_run_metadata()
    ctx.export_run_metadata()  # whatever it held: it keeps functions run while it was off
    losses = [float(np.asarray(m.train_on_batch(X[i * BATCH:(i + 1) * BATCH], Y[i * BATCH:(i + 1) * BATCH])).ravel()[0])
              for i in range(STEPS)]
    metadata = ctx.export_run_metadata()
    ctx.disable_run_metadata()
    ran = {n.op for f in metadata.function_graphs for g in f.partition_graphs for n in g.node}
    return losses, gobn.kernel_calls().get(FUSED, {}).get("CPU", 0) - before, sorted(ran)


def route(k, convert=False):
    losses, fused, ran = train(k, True, convert)
    unfused, _, unfused_ran = train(k, False, convert)
    _fusion.set_on(True)
    return {"steps": STEPS, "losses": losses, "unfused_losses": unfused, "fused_calls": fused, "ran": ran,
            "unfused_ran": unfused_ran}


report = {"onednn": bool(_pywrap_util_port.IsMklEnabled()), "keras3 convert": route(keras, convert=True)}
gobn.enable()
report["tf_keras enable"] = route(tf_keras)
report["keras3 enable"] = route(keras)
print(json.dumps(report))
