//go:build !(goexperiment.simd && amd64)

package kernels

// Without GOEXPERIMENT=simd on amd64 the portable loops run, and there are
// no vector loop forms to choose between.

func canAVX512() bool { return false }

func selectLoops(bool) {}

func invStdsVector([]float64, []float32, float32) int { return 0 }

func addVector([]float64, []float64) int { return 0 }

func avx512InUse() bool { return false }
