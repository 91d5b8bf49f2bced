#!/usr/bin/env python3
"""Golden files: stock TensorFlow's outputs, saved, and gobn checked against them.

    python -m tools.golden gen DIR [--seed N]        write DIR/manifest.json and one .npz per case
    python -m tools.golden check DIR [--library P]   run gobn on every case; print a table; exit 1 on any failure

`gen` runs the stock twins of gobn's ops (opdef's stock) in the TensorFlow it
is run with, on seeded inputs, for a case matrix covering every op with a
twin, each of its dtypes and data formats, and each mode of its kind
(gobn._kinds: MODES); today

    FusedBatchNormGrad     float                   NHWC NCHW                training, inference
    FusedBatchNormGradV2   float half bfloat16     NHWC NCHW                training, inference
    FusedBatchNormGradV3   float half bfloat16     NHWC NCHW NDHWC NCDHW    training, inference
    BatchNormWithGlobalNormalizationGrad   half float double   NHWC   scaled, unscaled

A case's inputs and attrs are its kind's sample (gobn._kinds: sample), and
its expected outputs stock's on them (the kind's stock_outputs where it has
one, else its twin's op run eagerly). Where stock has no usable answer
(stock_outputs gives None) the expected outputs are the sample's exact
float64 reference instead, and the manifest says so ("reference":
"float64"): today inference with NCHW/NCDHW (stock's CPU kernel rejects it)
and BatchNormWithGlobalNormalizationGrad in half (stock sums in half). oneDNN
is switched off so that stock is the Eigen kernel. `gen --new-only` writes
only the cases the directory's manifest lacks (a new op's, say) and keeps
the others as they are.

`check` loads gobn (--library, else where the package finds it), runs each
case and compares every output with the saved one within docs/design.md's
tolerance for the case's dtype: |got - want| <= atol*max|want| + rtol*|want|.
It prints one row per case: the largest absolute error, the largest error
relative to the output's largest magnitude (|got - want| / max|want|), the
share of the tolerance used, and PASS or FAIL. A file that is missing, does
not match the SHA-256 in the manifest, or cannot be read fails its case.

File format (read by kernels/golden_test.go too):
  manifest.json  TensorFlow version, seed, and per case: file, sha256, op
                 (the stock twin's name), T, data_format, mode, attrs (by
                 name), reference ("stock" or "float64"), input and output
                 names, output dtypes, and the TensorFlow dtype of every array.
  <case>.npz     the op's inputs under their names (y_backprop, x, ..., or
                 t, m, ...) and the expected outputs as want_<output name>.
                 float is stored as float32, double as float64, and half and
                 bfloat16 as their uint16 bit patterns (numpy has no bfloat16,
                 and not every npy reader has float16). Zip entries carry a
                 fixed timestamp, so the same TensorFlow writes the same bytes.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import zipfile
import zlib

from tools import checkout

checkout.tensorflow_env()  # oneDNN off: stock is the Eigen kernel

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gobn  # noqa: E402
from gobn import _kinds  # noqa: E402
from gobn._opdefs_gen import OPS  # noqa: E402
from gobn._testing import (  # noqa: E402
    Case,
    as_float64,
    outputs_by_name,
    stock_outputs,
    tolerance,
    tolerance_bound,
    tolerance_used,
)

MANIFEST = "manifest.json"
FORMAT_VERSION = 2

TF_DTYPES = {"float": tf.float32, "double": tf.float64, "half": tf.float16, "bfloat16": tf.bfloat16}
# The manifest's tolerance table, in this order: gobn._testing.TOLERANCES under the cases' T names.
TOLERANCE_NAMES = ("float", "half", "bfloat16", "double")

# Logical channels-last shapes (N, spatial..., C): more elements than one of
# gobn's 2048-element blocks, C not a multiple of the SIMD width.
SHAPE_4D = (2, 9, 11, 13)
SHAPE_5D = (2, 3, 4, 5, 6)

# The ops with a stock twin, by the twin's name (gobn._opdefs_gen).
STOCK_OPS = {op.stock: op for op in OPS if op.stock}
NAMES = {dtype: name for name, dtype in TF_DTYPES.items()}

def dtypes_of(op):
    """The dtypes of op's T, in TOLERANCE_NAMES' order."""
    return tuple(sorted(op.dtypes, key=TOLERANCE_NAMES.index))


# ---------------------------------------------------------------------------
# Arrays: TensorFlow dtype names <-> what the .npz holds


def encode(value, dtype):
    """Returns value (a tensor or array of TF dtype `dtype`) as stored in a .npz."""
    array = value.numpy() if isinstance(value, tf.Tensor) else np.asarray(value)
    if dtype in ("half", "bfloat16"):
        return np.ascontiguousarray(array).view(np.uint16)
    return array.astype({"float": np.float32, "double": np.float64}[dtype])


def decode(array, dtype):
    """Returns a stored array as a tensor of TF dtype `dtype`."""
    if dtype in ("half", "bfloat16"):
        if array.dtype != np.uint16:
            raise ValueError(f"{dtype} array stored as {array.dtype}, want uint16 bits")
        return tf.bitcast(tf.constant(array, tf.uint16), TF_DTYPES[dtype])
    want = {"float": np.float32, "double": np.float64}[dtype]
    if array.dtype != want:
        raise ValueError(f"{dtype} array stored as {array.dtype}, want {np.dtype(want).name}")
    return tf.constant(array, TF_DTYPES[dtype])


def write_npz(path, arrays):
    """Writes arrays like np.savez_compressed, with fixed zip timestamps."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, buffer.getvalue())


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---------------------------------------------------------------------------
# gen


def cases():
    """Every case: (name, Case) of each op with a stock twin, in each of its
    dtypes, data formats and its kind's modes."""
    for stock, op in STOCK_OPS.items():
        for dtype in dtypes_of(op):
            for data_format in op.data_formats:
                for mode in _kinds.of(op.kind).MODES:
                    shape = SHAPE_4D if len(data_format) == 4 else SHAPE_5D
                    case = Case(op, TF_DTYPES[dtype], data_format, mode, "golden", shape)
                    yield f"{stock}-{dtype}-{data_format}-{mode}", case


def seed_for(name, seed):
    """The seed of a case's inputs: the run's and its name's."""
    return [seed, zlib.crc32(name.encode())]


def gen_case(name, case, seed):
    """The case's record for the manifest and its arrays (stock's outputs,
    or the float64 reference where stock has none usable)."""
    kind = _kinds.of(case.op.kind)
    sample = kind.sample(case, seed_for(name, seed), "CPU:0")
    want = getattr(kind, "stock_outputs", stock_outputs)(case, sample)
    output_dtypes = {out: dtype_name(case, out) for out in case.op.outputs}
    if want is None:
        want = {out: expected for out, (expected, _) in sample.expected.items()}
        want_dtypes, reference = dict.fromkeys(want, "double"), "float64"
    else:
        want_dtypes, reference = output_dtypes, "stock"
    arrays, array_dtypes = {}, {}
    for arg, value in sample.inputs.items():
        array_dtypes[arg] = NAMES[value.dtype]
        arrays[arg] = encode(value, array_dtypes[arg])
    for out, value in want.items():
        arrays["want_" + out], array_dtypes["want_" + out] = encode(value, want_dtypes[out]), want_dtypes[out]
    record = dict(name=name, op=case.op.stock, T=NAMES[case.dtype], data_format=case.data_format, mode=case.mode,
                  attrs=sample.attrs, reference=reference, inputs=list(sample.inputs), outputs=list(want),
                  output_dtypes=[output_dtypes[out] for out in want], arrays=array_dtypes)
    return record, arrays


def dtype_name(case, output):
    """The TensorFlow dtype name of case's output called output."""
    kind = case.op.output_types[case.op.outputs.index(output)]
    return NAMES[case.dtype] if kind == "T" else kind


def gen(directory, seed, new_only=False):
    os.makedirs(directory, exist_ok=True)
    kept = {}
    if new_only and os.path.exists(os.path.join(directory, MANIFEST)):
        with open(os.path.join(directory, MANIFEST)) as f:
            kept = {case["name"]: case for case in json.load(f)["cases"]}
    records, reused = [], 0
    for name, case in cases():
        if name in kept:
            records.append(kept[name])
            reused += 1
            continue
        record, arrays = gen_case(name, case, seed)
        record["file"] = name + ".npz"
        path = os.path.join(directory, record["file"])
        write_npz(path, arrays)
        record["sha256"] = sha256(path)
        records.append(record)
        print(f"wrote {path} ({record['reference']})")
    manifest = {
        "format": FORMAT_VERSION,
        "generator": "python -m tools.golden gen",
        "tensorflow": tf.__version__,
        "seed": seed,
        "tolerances": {k: dict(zip(("rtol", "atol"), tolerance(k))) for k in TOLERANCE_NAMES},
        "cases": records,
    }
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(records)} cases ({reused} kept) from TensorFlow {tf.__version__} in {directory}")


# ---------------------------------------------------------------------------
# check


class CaseError(Exception):
    """A case that cannot be checked: missing, corrupted or unreadable."""


def load_case(directory, case):
    path = os.path.join(directory, case["file"])
    if not os.path.exists(path):
        raise CaseError(f"MISSING {case['file']}")
    if sha256(path) != case["sha256"]:
        raise CaseError(f"CORRUPT {case['file']}: SHA-256 differs from the manifest")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as e:  # noqa: BLE001 - any failure to read is a failed case
        raise CaseError(f"UNREADABLE {case['file']}: {e}") from e
    missing = [name for name in case["arrays"] if name not in arrays]
    if missing:
        raise CaseError(f"CORRUPT {case['file']}: no array {', '.join(missing)}")
    try:
        return {name: decode(arrays[name], dtype) for name, dtype in case["arrays"].items()}
    except ValueError as e:
        raise CaseError(f"CORRUPT {case['file']}: {e}") from e


def run_gobn(ops, case, tensors):
    """gobn's outputs of the case, in the order of its outputs."""
    op = STOCK_OPS[case["op"]]
    inputs = {name: tensors[name] for name in case["inputs"]}
    result = getattr(ops, op.wrapper)(**inputs, **case["attrs"])
    got = outputs_by_name(op, result, case["outputs"])
    return [got[name] for name in case["outputs"]]


def compare(case, got, tensors):
    """Returns (max abs err, max err / max|want|, share of tolerance used, problems)."""
    max_abs = max_rel = used = 0.0
    problems = []
    for name, value, dtype in zip(case["outputs"], got, case["output_dtypes"]):
        want_tensor = tensors["want_" + name]
        if value.dtype != TF_DTYPES[dtype]:
            problems.append(f"{name} dtype {value.dtype.name}, want {TF_DTYPES[dtype].name}")
        if value.shape.as_list() != want_tensor.shape.as_list():
            problems.append(f"{name} shape {value.shape.as_list()}, want {want_tensor.shape.as_list()}")
            continue
        g, w = as_float64(value), as_float64(want_tensor)
        if g.size == 0:
            continue
        err = np.where(np.isnan(g) & np.isnan(w), 0.0, np.abs(g - w))
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        worst = float(np.nanmax(np.where(np.isnan(err), np.inf, err)))
        max_abs = max(max_abs, worst)
        max_rel = max(max_rel, worst / scale if scale > 0 else (0.0 if worst == 0 else np.inf))
        used = max(used, tolerance_used(g, w, case["T"]))
        bad = int(np.sum(~(err <= tolerance_bound(w, case["T"]))))
        if bad:
            problems.append(f"{name}: {bad} of {err.size} elements out of tolerance")
    return max_abs, max_rel, used, problems


def check(directory, library):
    manifest_path = os.path.join(directory, MANIFEST)
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        cases = manifest["cases"]
        if manifest.get("format") != FORMAT_VERSION:
            raise ValueError(f"format {manifest.get('format')!r}, want {FORMAT_VERSION}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"golden: cannot read {manifest_path}: {e}", file=sys.stderr)
        return 1
    try:
        ops = gobn.load_library(library)
    except (FileNotFoundError, ImportError) as e:
        print(f"golden: {e}", file=sys.stderr)
        return 1

    print(f"gobn {gobn.library_path()}")
    print(f"goldens {directory}: {len(cases)} cases from TensorFlow {manifest.get('tensorflow')}, "
          f"checked with TensorFlow {tf.__version__}")
    print("tolerance: |gobn - want| <= atol*max|want| + rtol*|want|; rel = max|gobn - want| / max|want|\n")
    width = max([len(c.get("name", "?")) for c in cases] + [4])
    header = f"{'case':{width}s}  {'want':7s}  {'max abs err':>11s}  {'max rel err':>11s}  {'tol used':>8s}  result"
    print(header)
    print("-" * len(header))
    failures = 0
    for case in cases:
        name = case.get("name", "?")
        try:
            tensors = load_case(directory, case)
            got = run_gobn(ops, case, tensors)
            max_abs, max_rel, used, problems = compare(case, got, tensors)
        except CaseError as e:
            failures += 1
            print(f"{name:{width}s}  {case.get('reference', '?'):7s}  {'-':>11s}  {'-':>11s}  {'-':>8s}  FAIL {e}")
            continue
        except (tf.errors.OpError, KeyError, TypeError, ValueError) as e:
            failures += 1
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"{name:{width}s}  {case.get('reference', '?'):7s}  {'-':>11s}  {'-':>11s}  {'-':>8s}  FAIL {message}")
            continue
        result = "PASS" if not problems else "FAIL " + "; ".join(problems)
        failures += bool(problems)
        print(f"{name:{width}s}  {case['reference']:7s}  {max_abs:11.3g}  {max_rel:11.3g}  {used:8.2f}  {result}")

    listed = {case.get("file") for case in cases}
    extra = sorted(f for f in os.listdir(directory) if f.endswith(".npz") and f not in listed)
    if extra:
        print(f"\nnote: {len(extra)} .npz files not in the manifest were ignored: {', '.join(extra)}")
    print(f"\n{len(cases) - failures} of {len(cases)} cases pass" + (f", {failures} FAIL" if failures else ""))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("gen", help="write golden files from stock TensorFlow")
    g.add_argument("dir")
    g.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    g.add_argument("--new-only", action="store_true",
                   help="write only the cases DIR's manifest lacks, keeping the others (a new op's, say)")
    c = commands.add_parser("check", help="run gobn on golden files and compare")
    c.add_argument("dir")
    c.add_argument("--library", help="path of libgobn.so (default: where the gobn package finds it: "
                                     "$GOBN_LIBRARY, else beside the package or the checkout's build/libgobn.so)")
    args = parser.parse_args()
    if args.command == "gen":
        gen(args.dir, args.seed, args.new_only)
        return 0
    return check(args.dir, args.library)


if __name__ == "__main__":
    sys.exit(main())
