"""Training-step time of synchronized batch norm across worker processes.

`make bench-multiworker` runs this. It starts WORKERS (default 2) local
worker processes of tf.distribute.MultiWorkerMirroredStrategy on 127.0.0.1
(free ports, TF_CONFIG per worker; the launcher of
examples/multiworker/train.py, in short) and times, in the same workers,
the training step of one small conv model with three batch-norm configs:

  gobn    gobn.keras.SyncBatchNormalization
  gobn'   the same again, a second model: the config timed against itself (noise)
  keras   keras.layers.BatchNormalization(synchronized=True)

Each step is a forward and backward pass, the optimizer's gradient
all-reduce and an SGD update; all three models start from the same weights
and see the same batches. The configs alternate in rounds of STEPS_PER_ROUND
steps, the order rotating round by round; the first WARMUP rounds are not
counted. Each worker reports the median step time of each config; the
launcher prints them and the ratios keras/gobn (above 1: gobn's step is
faster) and gobn'/gobn (the noise), and --json writes them.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

# The example's launcher helpers: free loopback ports, a worker's TF_CONFIG.
from examples.multiworker.train import free_ports, tf_config
from tools.checkout import ROOT, module_command

CONFIGS = ("gobn", "gobn'", "keras")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default 32)")
    p.add_argument("--image", type=int, default=32, help="image side (default 32)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps-per-round", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3, help="rounds not counted (default 3)")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow threads per worker (default max(1, cores // workers))")
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--timeout", type=float, default=600, help="seconds before the workers are stopped")
    return p.parse_args(argv)


def launch(args, argv):
    n = args.workers
    threads = args.threads or max(1, (os.cpu_count() or 1) // n)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}
    procs = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs the finally below
    try:
        for i in range(n):
            env = dict(os.environ, TF_CONFIG=tf_config(cluster, i))
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            procs.append(subprocess.Popen(module_command(__spec__, *argv, "--threads", str(threads)), cwd=ROOT,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + args.timeout
        outputs = []
        for i, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                sys.exit(f"bench-multiworker: worker {i} still running after {args.timeout} s; stopped")
            if p.returncode != 0:
                sys.exit(f"bench-multiworker: worker {i} failed ({p.returncode}):\n{err[-4000:]}")
            outputs.append(json.loads(next(line[len("RESULT "):] for line in out.splitlines()
                                           if line.startswith("RESULT "))))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # by its process id
                p.wait()
    report(args, threads, outputs)


def report(args, threads, outputs):
    from bench.machine import core_count, cpu_model

    print(f"{args.workers} workers on 127.0.0.1, {threads} TensorFlow thread(s) each; {cpu_model()}, "
          f"{core_count()} cores")
    print(f"per-worker batch {args.batch_size}x{args.image}x{args.image}x3; "
          f"{args.rounds - args.warmup} rounds of {args.steps_per_round} steps counted per config")
    print()
    print("| worker | gobn ms | gobn' ms | keras ms | keras/gobn | gobn'/gobn (noise) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in outputs:
        m = r["median_ms"]
        print(f"| {r['worker']} | {m['gobn']:.2f} | {m[CONFIGS[1]]:.2f} | {m['keras']:.2f} | "
              f"{m['keras'] / m['gobn']:.3f} | {m[CONFIGS[1]] / m['gobn']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workers": args.workers, "threads": threads, "batch_size": args.batch_size,
                       "image": args.image, "results": outputs}, f, indent=1)


def build_model(keras, batch_norm, image):
    return keras.Sequential([
        keras.Input((image, image, 3)),
        keras.layers.Conv2D(32, 3, padding="same", use_bias=False),
        batch_norm(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(64, 3, strides=2, padding="same", use_bias=False),
        batch_norm(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(64, 3, padding="same", use_bias=False),
        batch_norm(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])


def worker(args):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras

    import gobn

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=120))
    layers = {"gobn": gobn.keras.SyncBatchNormalization, CONFIGS[1]: gobn.keras.SyncBatchNormalization,
              "keras": lambda: keras.layers.BatchNormalization(synchronized=True)}
    steps = {}
    keras.utils.set_random_seed(0)
    with strategy.scope():
        models = {name: build_model(keras, layer, args.image) for name, layer in layers.items()}
        initial = models["gobn"].get_weights()
        for name, model in models.items():
            model.set_weights(initial)
            steps[name] = make_step(tf, keras, strategy, model, keras.optimizers.SGD(0.01),
                                    args.batch_size * args.workers)
    rng = np.random.default_rng(index)
    x = tf.constant(rng.normal(0, 1, (args.batch_size, args.image, args.image, 3)).astype("float32"))
    y = tf.constant(rng.integers(0, 10, args.batch_size).astype("int32"))
    times = {name: [] for name in CONFIGS}
    for r in range(args.rounds):
        order = CONFIGS[r % 3:] + CONFIGS[:r % 3]  # the same on every worker: the collectives pair up
        for name in order:
            for _ in range(args.steps_per_round):
                start = time.perf_counter()
                float(steps[name](x, y))
                elapsed = time.perf_counter() - start
                if r >= args.warmup:
                    times[name].append(elapsed * 1e3)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print("RESULT " + json.dumps({"worker": index, "median_ms": medians, "steps": len(times["gobn"])}), flush=True)


def make_step(tf, keras, strategy, model, optimizer, global_batch):
    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
                loss /= global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.experimental_local_results(strategy.run(replica, args=(x, y)))[0]

    return step


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "TF_CONFIG" in os.environ:
        worker(args)
    else:
        launch(args, argv)


if __name__ == "__main__":
    main()
