"""Training-step time of Keras applications, stock against gobn.keras.convert.

`make bench-models` runs this. For each model (default: ResNet50 and
MobileNetV2 from keras.applications, weights=None, small images and
batches), one process builds three copies with the same weights:

  stock   the model as keras.applications builds it (keras.layers.BatchNormalization)
  stock'  a clone of it: the stock config timed against itself (noise)
  gobn    gobn.keras.convert(stock): gobn's layers, backward on Gobn>FusedBatchNormGradV3

and times their training steps (a tf.function: forward, loss, backward,
SGD with momentum) on the same batch. The first WARMUP steps of each
(tracing included) are not counted; then the configs alternate in ROUNDS
rounds of STEPS_PER_ROUND steps, the order rotating round by round. It
prints each config's median step time and the ratios stock/gobn (above 1:
gobn's step is faster) and stock'/stock (the noise), and checks that the
first step's losses agree (float32 tolerance) and that gobn's kernel ran;
the losses after the warm-up's updates are printed too.

This runs once with oneDNN on and once with it off, each in its own
subprocess with TF_ENABLE_ONEDNN_OPTS set before TensorFlow is imported.
The default run (two models, both oneDNN settings) takes a few minutes;
--rounds, --steps-per-round, --image and --batch-size make it longer and
steadier.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("stock", "stock'", "gobn")
MODELS = {"resnet50": "ResNet50", "mobilenetv2": "MobileNetV2"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenetv2", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--onednn", choices=("both", "on", "off"), default="both")
    p.add_argument("--image", type=int, default=64, help="image side (default 64)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="steps of each config not counted (default 2)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps-per-round", type=int, default=2)
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a child is stopped")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# The child: one oneDNN setting, every model.


def child(args):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import keras
    import numpy as np
    import tensorflow as tf

    import gobn

    results = []
    for name in args.models.split(","):
        keras.utils.set_random_seed(0)
        stock = getattr(keras.applications, MODELS[name])(
            weights=None, input_shape=(args.image, args.image, 3), classes=args.classes,
            classifier_activation=None)
        twin = keras.models.clone_model(stock)
        twin.set_weights(stock.get_weights())
        converted = gobn.keras.convert(stock)
        models = {"stock": stock, "stock'": twin, "gobn": converted}

        rng = np.random.default_rng(1)
        x = tf.constant(rng.normal(0, 1, (args.batch_size, args.image, args.image, 3)).astype("float32"))
        y = tf.constant(rng.integers(0, args.classes, args.batch_size))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        def make_step(model):
            opt = keras.optimizers.SGD(0.01, momentum=0.9)

            @tf.function
            def step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            return step

        steps = {c: make_step(m) for c, m in models.items()}
        calls_before = gobn.kernel_calls().get("Gobn>FusedBatchNormGradV3", {}).get("CPU", 0)
        first, losses, trace_s = {}, {}, {}
        for c in CONFIGS:
            t0 = time.perf_counter()
            for i in range(max(args.warmup, 1)):
                losses[c] = float(steps[c](x, y))
                first.setdefault(c, losses[c])
            trace_s[c] = time.perf_counter() - t0
        gobn_calls = gobn.kernel_calls().get("Gobn>FusedBatchNormGradV3", {}).get("CPU", 0) - calls_before

        times = {c: [] for c in CONFIGS}
        for r in range(args.rounds):
            order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
            for c in order:
                for _ in range(args.steps_per_round):
                    t0 = time.perf_counter()
                    steps[c](x, y).numpy()
                    times[c].append(time.perf_counter() - t0)
        median = {c: statistics.median(t) for c, t in times.items()}
        n_bn = sum(type(layer).__name__ == "BatchNormalization" for layer in converted._flatten_layers())
        results.append({
            "model": MODELS[name], "batch_norm_layers": n_bn, "median_s": median,
            "ratio_stock_over_gobn": median["stock"] / median["gobn"],
            "noise_stock2_over_stock": median["stock'"] / median["stock"],
            "first_loss": first, "loss_after_warmup": losses,
            "first_loss_rel_diff_gobn": abs(first["gobn"] - first["stock"]) / max(abs(first["stock"]), 1e-12),
            "loss_rel_diff_gobn": abs(losses["gobn"] - losses["stock"]) / max(abs(losses["stock"]), 1e-12),
            "gobn_kernel_calls_in_warmup": gobn_calls, "warmup_s": trace_s, "timed_steps": len(times["gobn"]),
        })
        print(f"# {MODELS[name]} done", file=sys.stderr, flush=True)
    from tensorflow.python.util import _pywrap_util_port

    print(json.dumps({"onednn_env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                      "onednn": bool(_pywrap_util_port.IsMklEnabled()), "tensorflow": tf.__version__,
                      "keras": keras.__version__, "results": results}))


# ---------------------------------------------------------------------------
# The launcher.


def run_child(args, argv, onednn):
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + list(argv), env=env,
                          capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"bench_models: the child with TF_ENABLE_ONEDNN_OPTS={int(onednn)} failed "
                         f"(exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(runs, args):
    print(f"training step (forward, backward, SGD), batch {args.batch_size}, {args.image}x{args.image}x3, "
          f"{args.classes} classes; median of {args.rounds * args.steps_per_round} steps per config, "
          f"interleaved; warm-up of {args.warmup} steps excluded")
    twin_ms = CONFIGS[1] + " ms"
    print(f"{'oneDNN':7} {'model':12} {'BN':>3} {'stock ms':>9} {twin_ms:>9} {'gobn ms':>9} "
          f"{'stock/gobn':>10} {'noise':>6} {'loss 1':>8} {'loss W':>8}")
    ok = True
    for run in runs:
        for r in run["results"]:
            m = r["median_s"]
            print(f"{'on' if run['onednn'] else 'off':7} {r['model']:12} {r['batch_norm_layers']:3d} "
                  f"{m['stock'] * 1e3:9.1f} {m[CONFIGS[1]] * 1e3:9.1f} {m['gobn'] * 1e3:9.1f} "
                  f"{r['ratio_stock_over_gobn']:10.3f} {r['noise_stock2_over_stock']:6.3f} "
                  f"{r['first_loss_rel_diff_gobn']:8.1e} {r['loss_rel_diff_gobn']:8.1e}")
            if r["gobn_kernel_calls_in_warmup"] < r["batch_norm_layers"] * args.warmup:
                print(f"  ! {r['model']}: gobn's kernel ran {r['gobn_kernel_calls_in_warmup']} times in the warm-up")
                ok = False
            if r["first_loss_rel_diff_gobn"] > 1e-4:
                print(f"  ! {r['model']}: gobn's first loss differs from stock's")
                ok = False
    print("stock/gobn above 1: gobn's step is faster; noise: stock'/stock, the same config against itself;\n"
          "loss 1, loss W: |gobn - stock| / stock of the first step's loss and of the last warm-up step's (after\n"
          "updates, float32 round-off of these randomly initialized nets grows: stock float32 is itself ~1% off\n"
          "float64 in MobileNetV2's gradients)")
    return ok


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"bench_models: unknown model {name!r} (known: {', '.join(MODELS)})")
    if args.child:
        return child(args)
    # The child gets the options but --json and --onednn (and their values).
    cleaned, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--json", "--onednn"):
            skip = True
            continue
        if a.startswith(("--json=", "--onednn=")):
            continue
        cleaned.append(a)
    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.onednn]
    t0 = time.perf_counter()
    runs = [run_child(args, cleaned, onednn) for onednn in settings]
    ok = report(runs, args)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
