"""bench/torch.py's cases and summary, without PyTorch (make bench-torch runs it)."""

import math

from bench import torch as bench_torch


def test_the_cases_cover_every_net_layout_dtype_and_mode():
    cases = bench_torch.suite()
    assert {c["net"] for c in cases} == {"resnet50", "mobilenetv2", "unet3d"}
    assert {c["data_format"] for c in cases} == {"NHWC", "NCHW", "NDHWC", "NCDHW"}
    assert {(c["dtype"], c["is_training"]) for c in cases} == {
        ("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)}
    assert {c["shape"][0] for c in cases} == {8, 16, 32}
    assert len({bench_torch.case_name(c) for c in cases}) == len(cases)
    assert bench_torch.laid_out(dict(shape=(8, 14, 14, 256), data_format="NCHW")) == (8, 256, 14, 14)


def test_a_case_is_bound_where_the_goal_needs_more_than_its_level():
    assert bench_torch.bound_by_level(dict(torch_gbs=20.0, level_gbs=23.9))  # 24 GB/s needed
    assert not bench_torch.bound_by_level(dict(torch_gbs=20.0, level_gbs=24.1))


def test_the_summary():
    rows = [dict(case="a", ratio=1.5, bound=False, torch_ms=1.0, torch_again_ms=1.0),
            dict(case="b", ratio=1.0, bound=True, torch_ms=1.1, torch_again_ms=1.0),
            dict(case="c", ratio=0.5, bound=False, torch_ms=1.0, torch_again_ms=1.25)]
    s = bench_torch.summarize(rows)
    assert math.isclose(s["geomean"], (1.5 * 1.0 * 0.5) ** (1 / 3))
    assert (s["cases"], s["below_goal"], s["below_goal_bound"], s["slowest"]) == (3, 2, 1, "c")
    assert math.isclose(s["noise_worst"], 0.2) and math.isclose(s["noise_median"], 0.1)


def test_a_child_prepares_a_case_and_times_its_chains(monkeypatch, capsys):
    import io
    calls = []

    def prepare(case):
        calls.append(("prepare", case))
        return (lambda: calls.append("chain")), 4
    monkeypatch.setattr("sys.stdin", io.StringIO("case 1\ntime\ntime\n"))
    monkeypatch.setattr(bench_torch, "WARM_SECONDS", 0)
    bench_torch.serve(prepare, ["a", "b"])
    answers = capsys.readouterr().out.split()
    assert answers[0] == "ready" and len(answers) == 3 and all(float(a) >= 0 for a in answers[1:])
    assert calls == [("prepare", "b")] + ["chain"] * (bench_torch.WARMUP + 2 * 2)  # each timed chain after one untimed


def test_a_timed_chain_follows_warm_seconds_of_untimed_ones(monkeypatch, capsys):
    """Before each timed chain the child runs the chain back to back for
    WARM_SECONDS at least: chains of 2 ms, 10 ms of them, five or more
    untimed before each timed one."""
    import io
    import time
    chains = []

    def prepare(case):
        return (lambda: (time.sleep(0.002), chains.append(1))), 4
    monkeypatch.setattr("sys.stdin", io.StringIO("case 0\ntime\ntime\n"))
    monkeypatch.setattr(bench_torch, "WARM_SECONDS", 0.01)
    bench_torch.serve(prepare, ["a"])
    answers = capsys.readouterr().out.split()
    assert answers[0] == "ready" and len(answers) == 3 and all(float(a) >= 0.0005 for a in answers[1:])
    assert len(chains) >= bench_torch.WARMUP + 2 * (5 + 1)
