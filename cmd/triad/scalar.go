//go:build !(goexperiment.simd && amd64)

package main

// triad32 sets a[i] = b[i] + 3·c[i] (built without GOEXPERIMENT=simd, or off
// amd64: a scalar loop, which in the caches measures the loop, not the
// cache).
func triad32(a, b, c []float32) {
	b, c = b[:len(a)], c[:len(a)]
	for i := range a {
		a[i] = b[i] + 3*c[i]
	}
}
