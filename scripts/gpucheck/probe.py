#!/usr/bin/env python3
"""The GPU's own limits, which the persistent kernel's plan rests on,
measured with CuPy (no gobn involved):

- the device time of an empty launch, of an empty cooperative launch, and
  of a cooperative launch with one and with two grid-wide barriers (gobn's
  grid_barrier, read from batchnorm.cu: one word, zeroed once), and with a
  memset of the word ahead of one, at the grid the persistent kernel runs
  (every multiprocessor, 2 blocks of 256 threads);
- read-only and write-only bandwidth, 16-byte accesses, over a buffer far
  larger than L2;
- a forward read then a reversed re-read of a buffer of about L2's size,
  timed (the reversed pass finds the tail of the first in L2); for its L2
  hit rate run it under ncu:

    ncu --kernel-name regex:reverse --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum \\
        python3 probe.py --reps 1

Every time is a median over --reps launches, each pair of CUDA events
around one launch.

    python3 probe.py [--json out.json] [--reps 200]
"""

import argparse
import json
import os
import statistics
import sys

import cupy as cp
import numpy as np

SOURCE = r"""
extern "C" __global__ void empty() {}

%(grid_barrier)s

extern "C" __global__ void barrier(unsigned int* word) { grid_barrier(word); }

extern "C" __global__ void two_barriers(unsigned int* word) {
  grid_barrier(word);
  grid_barrier(word);
}

extern "C" __global__ void read(const uint4* p, long long n, unsigned int* sink) {
  unsigned int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

extern "C" __global__ void reverse(const uint4* p, long long n, unsigned int* sink) {
  unsigned int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 v = p[n - 1 - i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

extern "C" __global__ void write(uint4* p, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    p[i] = make_uint4(i, i, i, i);
  }
}
"""


def grid_barrier_source():
    """gobn's grid_barrier, as batchnorm.cu defines it (beside this script in
    the bundle, kernels/cuda/ in the repository)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "batchnorm.cu"), os.path.join(here, "..", "..", "kernels", "cuda", "batchnorm.cu")):
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            start = text.index("__device__ __forceinline__ void grid_barrier(")
            return text[start:text.index("\n}\n", start) + 2]
    raise SystemExit("probe.py: batchnorm.cu not found beside it or in kernels/cuda")


def device_us(launch, reps, before=None):
    """The median device time of launch() in microseconds: CUDA events around
    each call; before(), if given, runs ahead of the first event."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        if before:
            before()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms, l2 = props["multiProcessorCount"], props["l2CacheSize"]
    source = SOURCE % {"grid_barrier": grid_barrier_source()}
    mod = cp.RawModule(code=source, options=("-std=c++17",))
    # CuPy fixes a kernel's launch kind when it loads it: the cooperative
    # launches come from a module loaded for them
    coop = cp.RawModule(code=source, options=("-std=c++17",), enable_cooperative_groups=True)
    empty, coop_empty = mod.get_function("empty"), coop.get_function("empty")
    barrier, two_barriers = coop.get_function("barrier"), coop.get_function("two_barriers")
    read, reverse, write = mod.get_function("read"), mod.get_function("reverse"), mod.get_function("write")
    grid, block = (sms * 2,), (256,)
    word = cp.zeros(1, dtype=cp.uint32)  # zeroed once, as gobn's
    out = {"gpu": props["name"].decode(), "sms": sms, "l2_bytes": l2, "grid": grid[0], "block": block[0]}

    out["empty_us"] = device_us(lambda: empty(grid, block, ()), args.reps)
    out["empty_cooperative_us"] = device_us(
        lambda: coop_empty(grid, block, ()), args.reps)
    out["kept_word_barrier_us"] = device_us(lambda: barrier(grid, block, (word,)), args.reps)
    out["kept_word_two_barriers_us"] = device_us(lambda: two_barriers(grid, block, (word,)), args.reps)
    # 3·reps barriers on a word zeroed once: each flips the top bit and leaves the low bits zero
    if int(word[0]) != (0x80000000 if 3 * args.reps % 2 else 0):
        raise SystemExit(f"{3 * args.reps} barriers left the word at {int(word[0]):#x}")
    # what a memset of the word ahead of each launch would add
    out["memset_and_barrier_us"] = device_us(lambda: (word.fill(0), barrier(grid, block, (word,))), args.reps)

    sink = cp.zeros(1, dtype=cp.uint32)
    big = cp.empty((16 * l2) // 16 * 4, dtype=cp.uint32)  # 16 L2 sizes, as uint4
    n = big.size // 4
    stream_grid = (sms * 8,)
    t = device_us(lambda: write(stream_grid, block, (big, np.int64(n))), max(20, args.reps // 10))
    out["write_gbs"] = big.nbytes / (t * 1e-6) / 1e9
    t = device_us(lambda: read(stream_grid, block, (big, np.int64(n), sink)), max(20, args.reps // 10))
    out["read_gbs"] = big.nbytes / (t * 1e-6) / 1e9

    fit = cp.empty(l2 // 4, dtype=cp.uint32)  # one L2 size
    m = fit.size // 4
    write(stream_grid, block, (fit, np.int64(m)))

    def forward_then_reverse():
        read(stream_grid, block, (fit, np.int64(m), sink))
        reverse(stream_grid, block, (fit, np.int64(m), sink))

    both = device_us(forward_then_reverse, max(20, args.reps // 10),
                     before=lambda: read(stream_grid, block, (big, np.int64(n), sink)))  # evict fit from L2
    one = device_us(lambda: read(stream_grid, block, (fit, np.int64(m), sink)), max(20, args.reps // 10),
                    before=lambda: read(stream_grid, block, (big, np.int64(n), sink)))
    out["l2_sized_read_us"] = one
    out["reversed_reread_us"] = both - one
    out["reversed_reread_gbs"] = fit.nbytes / ((both - one) * 1e-6) / 1e9

    for k, v in out.items():
        print("%-24s %s" % (k, ("%.2f" % v) if isinstance(v, float) else v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
