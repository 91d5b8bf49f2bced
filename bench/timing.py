"""Timing stock and gobn side by side, as make demo and make bench both do,
and where the host's time goes under TensorFlow's profiler."""

import gc
import glob
import math
import os
import shutil
import statistics
import tempfile
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


def host_events(run, times):
    """(name, picoseconds) of every event on the host's threads while run()
    is called times times under TensorFlow's profiler (its default levels:
    TensorFlow 2.21 ignores ProfilerOptions' levels)."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    logdir = tempfile.mkdtemp(prefix="gobn_profile_")
    try:
        tf.profiler.experimental.start(logdir)
        for _ in range(times):
            run()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            names = {k: m.name for k, m in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    yield names.get(event.metadata_id, ""), event.duration_ps


def op_type(event):
    """The op type of a host event that is an op's ("node:OpType"), or None
    (the runtime's are "Scope::Name", "Name: detail" or without a colon)."""
    if ":" in event and "::" not in event and ": " not in event:
        return event.rsplit(":", 1)[1]
    return None
