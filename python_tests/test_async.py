"""GOBN_ASYNC=1: gobn's kernels registered as asynchronous ones.

The library reads GOBN_ASYNC when it loads, so async_child.py runs in a
child Python with it set. Its kernels then start each call on a goroutine
and return; the goroutine tells TensorFlow when the call is done. TensorFlow
2.21's C API passes that callback by the address of a copy that lives only
until the kernel returns, so gobn keeps its own copy (capi/async.cc): a
traced function's calls, which outlive their kernel's return, test that.
Expected values are stock TensorFlow's or a float64 reference.
"""

import os

from support import run_child_report

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "async_child.py")


def test_async_kernels():
    report = run_child_report(CHILD, GOBN_ASYNC="1")
    # each figure is the greatest share of float32's per-element bound
    # (tolerance_bound) an output element uses: at most all of it
    bound = 1.0
    a = report["async_calls"]
    # every call ran asynchronously (as many as gobn's kernels counted), some
    # finished after their kernel had returned, and every kept copy of
    # TensorFlow's done callback ran and was freed
    assert a["calls"] == report["kernel_calls"] > 0
    assert a["done_after_return"] > 0
    assert a["callbacks_kept"] == 0
    for name, err in report["cases"].items():
        assert err <= bound, f"{name}: uses {err:.3g} of float32's tolerance"
    assert report["training"] <= bound
    assert report["enabled"]["calls"] == 1 and report["enabled"]["err"] <= bound
    assert report["error"] == "InvalidArgumentError"
    assert report["after_error"] <= bound
    t = report["threads"]
    assert t["alive"] == 0 and t["calls"] == 80 and t["max_diff"] == 0.0


def test_sync_by_default():
    report = run_child_report(CHILD, GOBN_ASYNC="0")
    assert report["async_calls"]["calls"] == 0 and report["kernel_calls"] > 0
