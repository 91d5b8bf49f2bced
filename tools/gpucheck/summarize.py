#!/usr/bin/env python3
"""Combines run.sh's steps into results.json and prints the summary
(also written as summary.txt). Standard library only: it runs even when
torch or the library broke. Exit status: 0 passed, 1 failed, 2 incomplete."""

import argparse
import json
import os
import re


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sanitizer_excerpt(log_path, tool, limit=12):
    """The first error lines a tool reported, from sanitize.log."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    m = re.search(r"===== compute-sanitizer --tool %s:.*?(?======= |\Z)" % re.escape(tool), text, re.S)
    if not m:
        return []
    lines = [ln for ln in m.group(0).splitlines()
             if ln.startswith("=========") and re.search(r"(Invalid|Race|Barrier|error|hazard|Uninitialized)", ln,
                                                          re.I)]
    return lines[:limit]


def fmt(v, f="%.3f"):
    return (f % v) if isinstance(v, (int, float)) else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--sanitize-dir", default="")
    ap.add_argument("--elapsed", type=float, default=0)
    args = ap.parse_args()
    res = args.results
    steps = []
    with open(args.steps) as f:
        for line in f:
            if line.strip():
                steps.append(json.loads(line))
    check = load(os.path.join(res, "check.json")) or {}
    bench = load(os.path.join(res, "bench.json")) or {}
    facts = dict(bench.get("facts") or {})
    facts.update(check.get("facts") or {})

    sanitize = []
    for s in steps:
        if not s["step"].startswith("sanitize-"):
            continue
        tool = s["step"][len("sanitize-"):]
        small = load(os.path.join(args.sanitize_dir, "san_%s.json" % tool)) if args.sanitize_dir else None
        sanitize.append({"tool": tool, "status": s["status"], "rc": s["rc"], "seconds": s["seconds"],
                         "summary": s["detail"],
                         "errors": sanitizer_excerpt(os.path.join(res, "sanitize.log"), tool)
                         if s["status"] != "pass" else [],
                         "small_check": None if small is None else {
                             "ok": small.get("ok"), "cases": small.get("cases"), "failed": small.get("failed"),
                             "kernels": sorted((small.get("launches") or {}).keys())}})

    statuses = [s["status"] for s in steps]
    failed = any(st == "fail" for st in statuses) or check.get("ok") is False
    incomplete = any(st in ("timeout", "unavailable") for st in statuses) or bool(check.get("skipped_groups")) \
        or not check or not bench
    verdict = "FAIL" if failed else ("INCOMPLETE" if incomplete else "PASS")

    rows = check.get("rows") or []
    check_failures = [{"case": r["case"], "why": r.get("why")} for r in rows if not r.get("ok")]
    worst = {}
    for r in rows:
        for name, o in (r.get("outputs") or {}).items():
            for side in ("gpu", "cpu", "gpu_vs_cpu"):
                worst[side] = max(worst.get(side, 0.0), o[side]["norm"])
    results = {
        "verdict": verdict, "elapsed_s": args.elapsed, "facts": facts, "steps": steps,
        "check": {k: check.get(k) for k in ("ok", "cases", "failed", "fatal", "skipped_groups", "launch_check",
                                            "launches", "elapsed_s", "summary", "tolerances", "worse_rule")},
        "check_failures": check_failures[:200], "check_worst_norm": worst,
        "sanitize": sanitize,
        "bench": {k: bench.get(k) for k in ("ok", "errors", "fatal", "geomean", "worst_agreement", "elapsed_s",
                                            "bytes_per_element", "rows")},
    }
    with open(os.path.join(res, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    out = []
    gpu = facts.get("gpu", "?")
    out.append("gobn GPU check: %s on %s (driver %s, torch %s, cuDNN %s), %.0f s" % (
        verdict, gpu, facts.get("driver", "?"), facts.get("torch", "?"), facts.get("cudnn", "?"), args.elapsed))
    if check:
        lc = check.get("launch_check") or {}
        out.append("  correctness: %s, %s cases, %s failed; worst norm gpu %s, cpu %s, gpu~cpu %s%s%s" % (
            "pass" if check.get("ok") else "FAIL", check.get("cases"), check.get("failed"),
            fmt(worst.get("gpu"), "%.3g"), fmt(worst.get("cpu"), "%.3g"), fmt(worst.get("gpu_vs_cpu"), "%.3g"),
            "; launches _v1 %s, _v4/_v8 %s" % (lc.get("v1"), lc.get("v4_v8")) if lc.get("checked") else "",
            "; %d groups skipped for time" % len(check["skipped_groups"]) if check.get("skipped_groups") else ""))
        if check.get("fatal"):
            out.append("    FATAL: %s" % check["fatal"][:300])
        for fl in check_failures[:8]:
            out.append("    %s: %s" % (fl["case"], "; ".join(fl["why"] or [])[:200]))
    else:
        out.append("  correctness: no check.json (see check.log)")
    if sanitize:
        out.append("  sanitizers: " + ", ".join("%s %s (%s)" % (s["tool"], s["status"], s["summary"])
                                                for s in sanitize))
        for s in sanitize:
            for ln in s["errors"][:4]:
                out.append("    %s: %s" % (s["tool"], ln[:200]))
    else:
        out.append("  sanitizers: none run")
    if bench:
        g = (bench.get("geomean") or {})
        parts = []
        for key in ("all", "float/NHWC/train", "half/NHWC/train", "float/NCHW/train", "half/NCHW/train"):
            v = g.get(key)
            if v:
                parts.append("%s %s" % (key, fmt(v.get("gobn/native"))))
        cud = (g.get("all") or {}).get("gobn/cudnn")
        copy = (facts.get("copy") or (bench.get("facts") or {}).get("copy") or {}).get("gbs")
        noise = (g.get("all") or {}).get("noise")
        out.append("  speed (gobn/native geomean, < 1 faster): %s; gobn/cudnn (training) %s; noise %s; "
                   "copy %s GB/s; agreement %s%s" % (
                       ", ".join(parts) or "-", fmt(cud), fmt(noise), fmt(copy, "%.0f"),
                       fmt(bench.get("worst_agreement"), "%.2g"),
                       "; %d errors" % len(bench["errors"]) if bench.get("errors") else ""))
    else:
        out.append("  speed: no bench.json (see bench.log)")
    for s in steps:
        if s["status"] not in ("pass",):
            out.append("  step %s: %s (rc %s, %s s)" % (s["step"], s["status"], s["rc"], s["seconds"]))
    out.append("  results: %s" % os.path.join(res, "results.json"))
    text = "\n".join(out)
    with open(os.path.join(res, "summary.txt"), "w") as f:
        f.write(text + "\n")
    print("\n" + text)
    return {"PASS": 0, "FAIL": 1}.get(verdict, 2)


if __name__ == "__main__":
    raise SystemExit(main())
