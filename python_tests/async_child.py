"""One process of test_async.py: gobn with GOBN_ASYNC=1 (asynchronous kernels).

    GOBN_ASYNC=1 python async_child.py

The library reads GOBN_ASYNC when it loads and then registers every kernel
through TensorFlow's asynchronous kernel builder. The child runs each of
gobn's ops eagerly and in a tf.function, stock's twin or a float64
reference beside it, training steps of gobn.fused_batch_norm, a bad input
and the call after it, calls from several threads at once, and stock's op after gobn.enable(); it
prints one JSON report whose checks are test_async.py's.
"""

import json
import threading

import support  # noqa: F401  (first: the package on sys.path)

import numpy as np
import tensorflow as tf

import gobn
from gobn._testing import as_float64, fused_grad_reference, global_norm_grad_reference, tolerance_bound

EPSILON = 1e-3
rng = np.random.default_rng(11)
X = rng.standard_normal((4, 5, 6, 8)).astype(np.float32)
DY = rng.standard_normal(X.shape).astype(np.float32)
SCALE = rng.standard_normal(8).astype(np.float32)
MEAN, VAR = X.mean((0, 1, 2)), X.var((0, 1, 2))


def used(got, want):
    """The greatest share of float32's tolerance an element of got uses,
    |got - want| over tolerance_bound(want), over outputs (1 is the bound)."""
    out = 0.0
    for g, w in zip(got, want):
        err, bound = np.abs(as_float64(g) - as_float64(w)), tolerance_bound(w, "float32")
        share = np.divide(err, bound, out=np.where(err > 0, np.inf, 0.0), where=bound > 0)
        out = max(out, float(np.max(share, initial=0.0)))
    return out


def max_diff(got, want):
    """The greatest |got - want| over outputs."""
    return max(float(np.max(np.abs(g - w), initial=0.0)) for g, w in zip(got, want))


def fused_cases():
    """(name, gobn's outputs, stock's) for V3 in training and inference, eagerly and in a tf.function,
    and for V1 and V2 in a tf.function."""
    out = []
    for op, stock_op in ((gobn.ops.gobn_fused_batch_norm_grad, tf.raw_ops.FusedBatchNormGrad),
                         (gobn.ops.gobn_fused_batch_norm_grad_v2, tf.raw_ops.FusedBatchNormGradV2)):
        args = dict(y_backprop=DY, x=X, scale=SCALE, reserve_space_1=MEAN, reserve_space_2=VAR, epsilon=EPSILON,
                    is_training=False)
        stock = [t.numpy() for t in stock_op(**args)[:3]]
        traced = [t.numpy() for t in tf.function(lambda op=op, args=args: op(**args)[:3])()]
        out.append((op.__name__ + "/function", traced, stock))
    _, _, _, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(x=X, scale=SCALE, offset=np.zeros(8, np.float32),
                                                      mean=np.zeros(0, np.float32), variance=np.zeros(0, np.float32),
                                                      epsilon=EPSILON, is_training=True)
    for training, (s1, s2) in ((True, (r1, r2)), (False, (MEAN, VAR))):
        args = dict(y_backprop=DY, x=X, scale=SCALE, reserve_space_1=s1, reserve_space_2=s2, reserve_space_3=r3,
                    epsilon=EPSILON, is_training=training)
        stock = [t.numpy() for t in tf.raw_ops.FusedBatchNormGradV3(**args)[:3]]
        eager = [t.numpy() for t in gobn.ops.gobn_fused_batch_norm_grad_v3(**args)[:3]]
        traced = [t.numpy() for t in tf.function(lambda: gobn.ops.gobn_fused_batch_norm_grad_v3(**args)[:3])()]
        out += [("fused_v3/%s/eager" % training, eager, stock), ("fused_v3/%s/function" % training, traced, stock)]
    return out


def global_case():
    m, v, g = MEAN, VAR + 0.5, SCALE
    args = dict(t=X, m=m, v=v, gamma=g, backprop=DY, variance_epsilon=EPSILON, scale_after_normalization=True)
    want = global_norm_grad_reference(**args)  # stock's op is refused in today's graphs
    mine = [t.numpy() for t in tf.function(lambda: gobn.ops.gobn_batch_norm_with_global_normalization_grad(**args))()]
    return [("global/function", mine, want)]


def cross_replica_cases():
    """GradReduce and GradApply against float64 sums and the training gradient's formula."""
    x64, dy64, mean64 = X.astype(np.float64), DY.astype(np.float64), MEAN.astype(np.float64)
    sum_dy, sum_dy_xmu = dy64.sum((0, 1, 2)), (dy64 * (x64 - mean64)).sum((0, 1, 2))
    reduce = [t.numpy() for t in gobn.ops.gobn_batch_norm_grad_reduce(y_backprop=DY, x=X, mean=MEAN)]
    count = X.size // X.shape[-1]
    want_dx = fused_grad_reference(DY, X, SCALE, MEAN, VAR, EPSILON, True, "NHWC")[0]
    dx = tf.function(lambda: gobn.ops.gobn_batch_norm_grad_apply(
        y_backprop=DY, x=X, scale=SCALE, mean=MEAN, variance=VAR, sum_dy=sum_dy.astype(np.float32),
        sum_dy_xmu=sum_dy_xmu.astype(np.float32), count=count, epsilon=EPSILON))().numpy()
    return [("reduce/eager", reduce, [sum_dy, sum_dy_xmu]), ("apply/function", [dx], [want_dx])]


def training_steps(fn, steps=3):
    """The gradients of steps of a tf.function training step through fn."""
    w = tf.Variable(X)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y, _, _ = fn(w, tf.constant(SCALE), tf.zeros([8]))
            loss = tf.reduce_sum(y * DY)
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return g

    return [step().numpy() for _ in range(steps)]


def bad_then_good():
    """A mismatched y_backprop's error, then a good call's result against stock's."""
    args = dict(x=X, scale=SCALE, reserve_space_1=MEAN, reserve_space_2=VAR, epsilon=EPSILON, is_training=False)
    try:
        gobn.ops.gobn_fused_batch_norm_grad(y_backprop=DY[..., :4], **args)
        error = None
    except tf.errors.OpError as e:
        error = type(e).__name__
    good = [t.numpy() for t in gobn.ops.gobn_fused_batch_norm_grad(y_backprop=DY, **args)[:3]]
    stock = [t.numpy() for t in tf.raw_ops.FusedBatchNormGrad(y_backprop=DY, **args)[:3]]
    return error, used(good, stock)


def threads(n=4, calls=20):
    """Calls from n threads at once: their results' greatest difference from the first's."""
    args = dict(y_backprop=DY, x=X, scale=SCALE, reserve_space_1=MEAN, reserve_space_2=VAR, epsilon=EPSILON,
                is_training=False)
    first = [t.numpy() for t in gobn.ops.gobn_fused_batch_norm_grad(**args)[:3]]
    diffs, lock = [], threading.Lock()

    def work():
        for _ in range(calls):
            d = max_diff([t.numpy() for t in gobn.ops.gobn_fused_batch_norm_grad(**args)[:3]], first)
            with lock:
                diffs.append(d)

    ts = [threading.Thread(target=work) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    return {"calls": len(diffs), "max_diff": max(diffs, default=None), "alive": sum(t.is_alive() for t in ts)}


def main():
    report = {"cases": {name: used(got, want) for name, got, want in
                        fused_cases() + global_case() + cross_replica_cases()}}
    mine, stock = training_steps(gobn.fused_batch_norm), training_steps(tf.compat.v1.nn.fused_batch_norm)
    report["training"] = used(mine, stock)
    # gobn.enable(): stock's op on gobn's kernels, registered asynchronous too
    args = dict(y_backprop=DY, x=X, scale=SCALE, reserve_space_1=MEAN, reserve_space_2=VAR, epsilon=EPSILON,
                is_training=False)
    want = [t.numpy() for t in tf.raw_ops.FusedBatchNormGrad(**args)[:3]]
    gobn.enable()
    before = gobn.kernel_calls().get("FusedBatchNormGrad", {}).get("CPU", 0)
    got = [t.numpy() for t in tf.function(lambda: tf.raw_ops.FusedBatchNormGrad(**args)[:3])()]
    report["enabled"] = {"err": used(got, want),
                         "calls": gobn.kernel_calls().get("FusedBatchNormGrad", {}).get("CPU", 0) - before}
    report["error"], report["after_error"] = bad_then_good()
    report["threads"] = threads()
    report["async_calls"] = gobn._async_calls()
    report["kernel_calls"] = sum(sum(d.values()) for d in gobn.kernel_calls().values())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
