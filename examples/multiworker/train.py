"""Train a small conv net with gobn's synchronized batch norm on N worker processes.

One command trains on N local worker processes of
tf.distribute.MultiWorkerMirroredStrategy (loopback only):

    python examples/multiworker/train.py --workers 2 --steps 20

(with the gobn package installed, or from a checkout after make:
PYTHONPATH=python .venv/bin/python examples/multiworker/train.py).

Without TF_CONFIG in its environment the script is the launcher: it picks N
free ports on 127.0.0.1, starts N copies of itself, each with its own
TF_CONFIG (the same cluster, its own task index), prints their output with a
"[worker i]" prefix, and stops every worker when one fails or on Ctrl-C.

With TF_CONFIG set it is one worker: it joins the cluster, trains, and prints
its per-step loss (its own shard's mean and the global batch's mean, the same
on every worker). On real hosts, set TF_CONFIG on each and run the script
there (README.md beside this file).

Every worker draws the same synthetic global batch for a step and trains on
its slice of it; gobn.keras.SyncBatchNormalization normalizes with the
global batch's statistics, and its gradient runs on Gobn>BatchNormGradReduce,
one all-reduce and Gobn>BatchNormGradApply.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="local worker processes (launcher only; default 2)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="global batch size, split evenly over the workers (default 32)")
    p.add_argument("--learning-rate", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--collective-timeout", type=float, default=60.0,
                   help="seconds a collective (all-reduce) may wait for the other workers before it fails; "
                        "0 waits forever (default 60)")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow intra- and inter-op threads per worker; 0 leaves TensorFlow's default "
                        "(the launcher passes max(1, cores // workers) unless given)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Launcher: N local workers on 127.0.0.1


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together, then released)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(cluster, index):
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def launch(args, argv):
    n = args.workers
    if n < 1:
        sys.exit("--workers must be at least 1")
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(n)]}
    print(f"launcher: {n} workers at {', '.join(cluster['worker'])}", flush=True)
    if "--threads" not in " ".join(argv):
        argv = list(argv) + ["--threads", str(max(1, (os.cpu_count() or 1) // n))]
    procs, relays = [], []

    def stop(signum, _frame):
        raise KeyboardInterrupt  # SIGTERM too stops the workers (the finally below)

    signal.signal(signal.SIGTERM, stop)

    def relay(i, stream):
        for line in stream:
            sys.stdout.write(f"[worker {i}] {line}")
            sys.stdout.flush()

    try:
        for i in range(n):
            env = dict(os.environ, TF_CONFIG=tf_config(cluster, i))
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + list(argv), env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            procs.append(proc)
            t = threading.Thread(target=relay, args=(i, proc.stdout), daemon=True)
            t.start()
            relays.append(t)
        # Wait for all; the first failure stops the rest.
        failed = None
        while failed is None and any(p.poll() is None for p in procs):
            failed = next((i for i, p in enumerate(procs) if p.poll() not in (None, 0)), None)
            time.sleep(0.2)
        if failed is None:
            failed = next((i for i, p in enumerate(procs) if p.returncode != 0), None)
    except KeyboardInterrupt:
        print("launcher: interrupted; stopping the workers", flush=True)
        return 130
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # by its process id
        for p in procs:
            p.wait()
        for t in relays:
            t.join(timeout=5)
    if failed is not None:
        print(f"launcher: worker {failed} failed with exit status {procs[failed].returncode}; "
              "stopped the others", flush=True)
        return 1
    print(f"launcher: all {n} workers finished", flush=True)
    return 0


# ---------------------------------------------------------------------------
# Worker: one process of the cluster TF_CONFIG names


def build_model(keras, gobn, classes):
    return keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(16, 3, padding="same", use_bias=False),
        gobn.keras.SyncBatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False),
        gobn.keras.SyncBatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes),
    ])


def global_batch(np, seed, step, size, classes):
    """The step's global batch, the same on every worker: images whose mean
    brightness per channel pattern encodes the label, plus noise."""
    rng = np.random.default_rng([seed, step])
    labels = rng.integers(0, classes, size)
    patterns = np.random.default_rng(seed).normal(0.0, 1.0, (classes, 1, 1, 3))
    images = rng.normal(0.0, 1.0, (size, 16, 16, 3)) + patterns[labels]
    return images.astype("float32"), labels.astype("int32")


def train(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras

    import gobn
    config = json.loads(os.environ["TF_CONFIG"])
    index, workers = config["task"]["index"], len(config["cluster"]["worker"])
    if args.batch_size % workers:
        sys.exit(f"--batch-size {args.batch_size} must be a multiple of the {workers} workers")
    per_worker, classes = args.batch_size // workers, 4

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=args.collective_timeout or None)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    keras.utils.set_random_seed(args.seed)  # the same initial weights on every worker
    with strategy.scope():
        model = build_model(keras, gobn, classes)
        optimizer = keras.optimizers.SGD(args.learning_rate, momentum=0.9)

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                # Scaled by the global batch: the optimizer sums the workers' gradients.
                loss = tf.reduce_sum(per_example) / args.batch_size
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            ctx = tf.distribute.get_replica_context()
            return tf.reduce_mean(per_example), ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)

        local, total = strategy.run(replica, args=(x, y))
        return strategy.experimental_local_results(local)[0], strategy.experimental_local_results(total)[0]

    print(f"worker {index} of {workers}: {per_worker} of each global batch of {args.batch_size}", flush=True)
    for s in range(args.steps):
        images, labels = global_batch(np, args.seed, s, args.batch_size, classes)
        shard = slice(index * per_worker, (index + 1) * per_worker)
        local, total = step(tf.constant(images[shard]), tf.constant(labels[shard]))
        print(f"worker {index} step {s} loss {float(local):.4f} global {float(total):.4f}", flush=True)
    checksum = sum(float(np.sum(np.abs(w))) for w in model.get_weights())
    print(f"worker {index} done: {args.steps} steps, weights checksum {checksum:.6f}", flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "TF_CONFIG" in os.environ:
        train(args)
        return 0
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
