// Command triad measures the machine's memory bandwidth with a STREAM-style
// triad, a[i] = b[i] + s·c[i], split over workers goroutines (every core
// by default), counting two reads and one write per element as STREAM does.
//
// Without -sizes it runs over float64 arrays far larger than the caches and
// prints the best of several runs in GB/s: the bandwidth of memory itself
// (bench/calls.py runs it in the same run as the timings it reports). With
// -sizes it runs, for each footprint given (the three arrays' bytes
// together), over float32 arrays of that footprint again and again, so that
// they stay in whichever level of the caches holds them, and prints that
// level's bandwidth: bench/torch.py gives each case's x, dy and dx bytes,
// the bandwidth a gradient of that size meets.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	mib := flag.Int("mib", 256, "size of each of the three arrays, MiB (without -sizes)")
	reps := flag.Int("reps", 7, "repetitions; the best is reported")
	workers := flag.Int("workers", runtime.GOMAXPROCS(0), "goroutines that share each triad")
	sizes := flag.String("sizes", "", "comma-separated footprints in bytes (three float32 arrays together)")
	flag.Parse()
	*workers = max(1, *workers)
	runtime.GOMAXPROCS(*workers)
	out := map[string]any{"workers": *workers}
	if *sizes == "" {
		n := *mib << 20 / 8
		out["triad_gbs"] = float64(24*n) / best(n, 1, *reps, *workers, 0.0).Seconds() / 1e9
		out["array_mib"] = *mib
	} else {
		byBytes := map[string]float64{}
		for _, s := range strings.Split(*sizes, ",") {
			footprint, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || footprint < 12 {
				fmt.Fprintf(os.Stderr, "triad: -sizes: %q is not a footprint of 12 bytes or more\n", s)
				os.Exit(2)
			}
			n := footprint / 12
			// passes enough that a timed run takes about 5 ms
			passes := max(1, 5_000_000/max(1, n/4))
			byBytes[s] = float64(12*n*passes) / best(n, passes, *reps, *workers, float32(0)).Seconds() / 1e9
		}
		out["gbs_by_bytes"] = byBytes
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// best returns the fastest of reps runs of passes triads over three arrays
// of n elements of E, each worker on its own slice of them, after one run
// that touches them first as the timed ones do.
func best[E float32 | float64](n, passes, reps, workers int, _ E) time.Duration {
	a, b, c := make([]E, n), make([]E, n), make([]E, n)
	run := func(fn func(lo, hi int)) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { fn(n*w/workers, n*(w+1)/workers) })
		}
		wg.Wait()
	}
	triad := func(lo, hi int) {
		aa, bb, cc := a[lo:hi], b[lo:hi], c[lo:hi]
		for range passes {
			switch aa := any(aa).(type) {
			case []float32:
				triad32(aa, any(bb).([]float32), any(cc).([]float32))
			case []float64:
				bb, cc := any(bb).([]float64), any(cc).([]float64)
				for i := range aa {
					aa[i] = bb[i] + 3*cc[i]
				}
			}
		}
	}
	run(func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i], b[i], c[i] = 0, 1, 2
		}
	})
	run(triad)
	fastest := time.Duration(1 << 62)
	for range reps {
		start := time.Now()
		run(triad)
		fastest = min(fastest, time.Since(start))
	}
	return fastest
}
