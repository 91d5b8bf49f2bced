"""Timing stock and gobn side by side, as make demo and make bench both do."""

import gc
import math
import statistics
import time

# Cheap cases get more repetitions, up to this many seconds of timing each.
CASE_SECONDS = 0.5
# A lone call of the tiny case is nearly all TensorFlow's and Python's time,
# and its median over a few hundred pairs wanders from run to run; thousands
# of interleaved calls settle it.
MAX_REPS_FACTOR = 100


def time_interleaved(funcs, reps, seconds=CASE_SECONDS):
    """Median seconds of each of funcs (stock and gobn, say), called in turn
    round after round after two rounds of warm-up, with Python's garbage
    collector off while timing (as timeit does): its pauses land on whichever
    call happens to trigger them. Cases whose round takes less than
    seconds / reps get more rounds, up to MAX_REPS_FACTOR times reps."""
    start = time.perf_counter()
    for _ in range(2):
        for f in funcs:
            f()
    one_round = (time.perf_counter() - start) / 2
    reps = max(reps, min(MAX_REPS_FACTOR * reps, int(seconds / one_round)))
    times = [[] for _ in funcs]
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            for f, out in zip(funcs, times):
                start = time.perf_counter()
                f()
                out.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return [statistics.median(t) for t in times]


def geomean(xs):
    """The geometric mean of xs, or None where there are none (--only)."""
    xs = list(xs)
    return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else None
