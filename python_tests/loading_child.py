"""One process of test_loading.py: loads gobn in the order its arguments say.

    python loading_child.py STEP [STEP ...]

Steps, run in order; each one's outcome is recorded, and a step that raises
does not stop the next:

- ``raw:PATH``: ``tf.load_op_library(PATH)``; records whether the module it
  returns has gobn's ops, and runs one if it has;
- ``package``: ``import gobn`` and ``gobn.ops`` (the package found on
  PYTHONPATH: the checkout's python/ or an installed wheel), then one op;
- ``enable``: ``gobn.enable()``, then stock's FusedBatchNormGradV3, which must
  run on gobn's kernel (``gobn.kernel_calls()``);
- ``tensorflow:VERSION``: makes ``tf.__version__`` read VERSION, as another
  release would, before the package is imported.

It prints one JSON line: the steps' outcomes (``ok``, or the exception's type
and message), every libgobn.so file mapped into the process (distinct files,
by device and inode) and, if the package loaded, ``gobn.library_path()``.
The checks are the test's; this child does not import the test support
module, so that nothing but PYTHONPATH decides which gobn it imports.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

EPSILON = 0.001
RTOL, ATOL = 1e-4, 1e-5  # float32's row of docs/design.md's tolerances


def inputs():
    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 2.0, (2, 3, 4, 5)).astype(np.float32)
    dy = rng.normal(0.0, 1.0, x.shape).astype(np.float32)
    flat = x.reshape(-1, 5).astype(np.float64)
    return dict(y_backprop=dy, x=x, scale=rng.uniform(0.5, 2.0, 5).astype(np.float32),
                reserve_space_1=flat.mean(0).astype(np.float32), reserve_space_2=flat.var(0).astype(np.float32),
                reserve_space_3=np.zeros([0], np.float32), epsilon=EPSILON, data_format="NHWC", is_training=True)


# Stock's gradients, computed before any step (after gobn.enable(), stock's op
# runs on gobn).
STOCK = [t.numpy().astype(np.float64) for t in tf.raw_ops.FusedBatchNormGradV3(**inputs())[:3]]


def matches_stock(fn):
    """Whether fn's three gradients equal stock FusedBatchNormGradV3's within float32's tolerance."""
    for g, w in zip(fn(**inputs())[:3], STOCK):
        g = g.numpy().astype(np.float64)
        if not np.all(np.abs(g - w) <= ATOL * np.abs(w).max() + RTOL * np.abs(w)):
            return False
    return True


def mapped_libraries():
    """The libgobn.so files mapped into this process, one path per distinct file."""
    files = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()) == "libgobn.so":
                path = parts[5].strip()
                st = os.stat(path)
                files.setdefault((st.st_dev, st.st_ino), path)
    return sorted(files.values())


def step(name):
    if name.startswith("raw:"):
        module = tf.load_op_library(name[len("raw:"):])
        fn = getattr(module, "gobn_fused_batch_norm_grad_v3", None)
        return {"has_ops": fn is not None, "matches_stock": fn is not None and matches_stock(fn)}
    if name.startswith("tensorflow:"):
        tf.__version__ = name[len("tensorflow:"):]
        return {}
    import gobn

    if name == "package":
        return {"matches_stock": matches_stock(gobn.ops.gobn_fused_batch_norm_grad_v3)}
    if name == "enable":
        gobn.enable()
        before = gobn.kernel_calls().get("FusedBatchNormGradV3", {}).get("CPU", 0)
        ok = matches_stock(lambda **kw: tf.raw_ops.FusedBatchNormGradV3(**kw))
        after = gobn.kernel_calls().get("FusedBatchNormGradV3", {}).get("CPU", 0)
        return {"matches_stock": ok, "gobn_calls": after - before}
    raise SystemExit(f"unknown step {name!r}")


def main(steps):
    outcomes = []
    for name in steps:
        try:
            outcomes.append(dict(step(name), step=name, ok=True))
        except Exception as e:  # the outcome to report
            outcomes.append({"step": name, "ok": False, "error": type(e).__name__, "message": str(e)})
    report = {"steps": outcomes, "mapped": mapped_libraries()}
    gobn = sys.modules.get("gobn")
    if gobn is not None and getattr(gobn, "library_path", None):
        try:
            report["library_path"] = gobn.library_path()
        except Exception as e:  # nothing loaded and nothing found
            report["library_path"] = f"{type(e).__name__}: {e}"
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
