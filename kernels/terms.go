package kernels

import (
	"fmt"
	"math"
)

// What the kinds' kernels share: the check of their slices' lengths, the
// inverse standard deviation c = 1/sqrt(σ²+ε), and the per-channel
// coefficients of the pass that writes the activation-shaped output.

// checkLengths panics unless every activation slice has d.Len() elements and
// every per-channel slice d.C.
func checkLengths[A, P any](d Dims, activations [][]A, perChannel [][]P) {
	n, C := d.Len(), int(d.C)
	for _, a := range activations {
		if len(a) != n {
			panic(fmt.Sprintf("kernels: activation length %d, want %d", len(a), n))
		}
	}
	for _, p := range perChannel {
		if len(p) != C {
			panic(fmt.Sprintf("kernels: per-channel length %d, want %d", len(p), C))
		}
	}
}

// invStd returns 1/sqrt(variance+epsilon) in float64.
func invStd(variance, epsilon float32) float64 {
	return 1 / math.Sqrt(float64(variance)+float64(epsilon))
}

// invStds writes invStd(variance[i], epsilon) into dst[i]: with the vector
// loops four at a time (invStdsVector), which rounds alike, square root and
// division being exact to the last bit either way. Scalar square roots and
// divisions are most of a small gradient's time (BenchmarkTrainingGrad's
// smallest cases show it).
func invStds(dst []float64, variance []float32, epsilon float32) {
	for i := invStdsVector(dst, variance, epsilon); i < len(dst); i++ {
		dst[i] = invStd(variance[i], epsilon)
	}
}

func newAffine(s *scratch, mean []float64) affine {
	C := len(mean)
	buf := s.float64s(3 * C)
	return affine{A: buf[:C:C], B: buf[C : 2*C : 2*C], MeanDy: buf[2*C:], Mean: mean}
}
