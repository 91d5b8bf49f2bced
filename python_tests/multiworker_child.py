"""One worker of test_multiworker.py's cluster (TF_CONFIG names it).

    python multiworker_child.py OUTDIR

with the checkout's package on PYTHONPATH (the test's child_env puts it there).

Every worker makes the same global batch, takes its slice of it, and runs one
training step of gobn.keras.SyncBatchNormalization and of
gobn.sync_batch_norm under tf.distribute.MultiWorkerMirroredStrategy (one CPU
replica per worker). It writes OUTDIR/worker<i>.npz (its slices of y and of
x's gradient, its own gamma/beta gradients, the statistics and moving
statistics) and OUTDIR/worker<i>.json (the op types of the traced steps),
which the test compares with a float64 reference of the whole batch.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The global batches and the slices each worker takes (uneven for
# sync_batch_norm: the global count is all-reduced).
KERAS_SHAPE, KERAS_SPLIT = (8, 4, 5, 3), (4, 4)  # NHWC, axis=-1
SYNC_SHAPE, SYNC_SPLIT = (8, 3, 4, 5), (3, 5)  # NCHW
EPSILON, MOMENTUM = 0.001, 0.9
TIMEOUT_S = 60


def data(shape, channels, seed):
    """(x, dy, gamma, beta) in float32, the same in every process."""
    rng = np.random.default_rng(seed)
    x = rng.normal(1.5, 2.0, shape).astype(np.float32)
    dy = rng.normal(0.0, 1.0, shape).astype(np.float32)
    gamma = rng.normal(1.0, 0.5, channels).astype(np.float32)
    beta = rng.normal(0.0, 0.5, channels).astype(np.float32)
    return x, dy, gamma, beta


def my_slice(array, split, index):
    bounds = np.cumsum((0,) + split)
    return array[bounds[index]:bounds[index + 1]]


def op_types(concrete):
    """The op types of a concrete function's graph and of every function it calls."""
    graph = concrete.graph
    types = {op.type for op in graph.get_operations()}
    for fn in graph.as_graph_def().library.function:
        types.update(node.op for node in fn.node_def)
    return sorted(types)


def main(outdir):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gobn

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=TIMEOUT_S)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    out = {}

    # gobn.keras.SyncBatchNormalization
    x, dy, gamma, beta = data(KERAS_SHAPE, KERAS_SHAPE[-1], seed=1)
    with strategy.scope():
        layer = gobn.keras.SyncBatchNormalization(momentum=MOMENTUM, epsilon=EPSILON)
        layer.build(KERAS_SHAPE)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)

    @tf.function
    def keras_step(x, dy):
        def replica(x, dy):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
                loss = tf.reduce_sum(y * dy)
            dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
            return y, dx, dgamma, dbeta

        return strategy.run(replica, args=(x, dy))

    args = [tf.constant(my_slice(a, KERAS_SPLIT, index)) for a in (x, dy)]
    result = [strategy.experimental_local_results(t)[0] for t in keras_step(*args)]
    for name, value in zip(("y", "dx", "dgamma", "dbeta"), result):
        out[f"keras_{name}"] = np.asarray(value)
    out["keras_moving_mean"] = layer.moving_mean.numpy()
    out["keras_moving_variance"] = layer.moving_variance.numpy()
    types = {"keras": op_types(keras_step.get_concrete_function(*args))}

    # gobn.sync_batch_norm
    x, dy, gamma, beta = data(SYNC_SHAPE, SYNC_SHAPE[1], seed=2)
    scale, offset = tf.constant(gamma), tf.constant(beta)

    @tf.function
    def sync_step(x, dy):
        def replica(x, dy):
            with tf.GradientTape() as tape:
                tape.watch([x, scale, offset])
                y, mean, variance = gobn.sync_batch_norm(x, scale, offset, epsilon=EPSILON, data_format="NCHW")
                loss = tf.reduce_sum(y * dy)
            return [y, mean, variance] + tape.gradient(loss, [x, scale, offset])

        return strategy.run(replica, args=(x, dy))

    args = [tf.constant(my_slice(a, SYNC_SPLIT, index)) for a in (x, dy)]
    result = [strategy.experimental_local_results(t)[0] for t in sync_step(*args)]
    for name, value in zip(("y", "mean", "variance", "dx", "dgamma", "dbeta"), result):
        out[f"sync_{name}"] = np.asarray(value)
    types["sync"] = op_types(sync_step.get_concrete_function(*args))

    np.savez(os.path.join(outdir, f"worker{index}.npz"), **out)
    with open(os.path.join(outdir, f"worker{index}.json"), "w") as f:
        json.dump(types, f)
    print(f"worker {index}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
