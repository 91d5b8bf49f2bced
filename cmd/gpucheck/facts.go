package main

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// What the entries share: the dims they are given, and the facts they
// report.

// makeDims validates a layout code and sizes.
func makeDims(layout int, n, c, s int64) (kernels.Dims, error) {
	if layout != int(kernels.ChannelsLast) && layout != int(kernels.ChannelsFirst) {
		return kernels.Dims{}, fmt.Errorf("layout code %d, want 0 (channels last) or 1 (channels first)", layout)
	}
	if n < 0 || c < 0 || s < 0 {
		return kernels.Dims{}, fmt.Errorf("negative size N=%d C=%d S=%d", n, c, s)
	}
	if n != 0 && c != 0 && s != 0 && (n > math.MaxInt64/c || n*c > math.MaxInt64/s) {
		return kernels.Dims{}, fmt.Errorf("size N=%d C=%d S=%d overflows", n, c, s)
	}
	return kernels.Dims{N: n, C: c, S: s, Layout: kernels.Layout(layout)}, nil
}

// launchesJSON returns cuda.Launches() as a JSON object.
func launchesJSON() (string, error) {
	m := cuda.Launches()
	if m == nil {
		m = map[string]uint64{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// infoJSON returns the facts of this build as a JSON object.
func infoJSON() string {
	b, _ := json.Marshal(map[string]any{
		"go":         runtime.Version(),
		"cuda_tag":   cuda.Built,
		"simd":       kernels.SIMD(),
		"gomaxprocs": runtime.GOMAXPROCS(0),
		"goarch":     runtime.GOARCH,
	})
	return string(b)
}
