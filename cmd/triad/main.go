// Command triad measures the machine's memory bandwidth with a STREAM-style
// triad, a[i] = b[i] + s·c[i] over float64 arrays far larger than the caches,
// split over every core. It prints the best of several runs in GB/s, counting
// 24 bytes per element as STREAM does (two reads, one write).
//
// bench/calls.py runs it in the same run as the timings it reports.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

func main() {
	mib := flag.Int("mib", 256, "size of each of the three arrays, MiB")
	reps := flag.Int("reps", 7, "repetitions; the best is reported")
	flag.Parse()
	n := *mib << 20 / 8
	a, b, c := make([]float64, n), make([]float64, n), make([]float64, n)
	workers := runtime.GOMAXPROCS(0)
	run := func(fn func(lo, hi int)) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { fn(n*w/workers, n*(w+1)/workers) })
		}
		wg.Wait()
	}
	run(func(lo, hi int) { // first touch, in parallel as the timed loop
		for i := lo; i < hi; i++ {
			a[i], b[i], c[i] = 0, 1, 2
		}
	})
	best := time.Duration(1 << 62)
	for range *reps {
		start := time.Now()
		run(func(lo, hi int) {
			aa, bb, cc := a[lo:hi], b[lo:hi], c[lo:hi]
			for i := range aa {
				aa[i] = bb[i] + 3*cc[i]
			}
		})
		best = min(best, time.Since(start))
	}
	gbs := float64(24*n) / best.Seconds() / 1e9
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{
		"triad_gbs": gbs, "workers": workers, "array_mib": *mib,
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
