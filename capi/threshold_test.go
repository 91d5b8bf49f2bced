package main

import "github.com/gobn/gobn/kernels"

// The parallel cases here are sized for splits from 2·2^16 elements (the
// library's default is 2·2^18), so that the race detector sees the kernels'
// goroutines at a size it runs quickly; from the same size, float32 training
// gradients with a buffer of their own write it with non-temporal stores
// (the library's default is from 2^21 elements).
func init() {
	kernels.SetMinElementsPerWorker(1 << 16)
	kernels.SetMinStreamElements(1 << 16)
}
