package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// invStds, with or without its vector form, gives invStd's bits for every
// channel, the tail past the last group of four included.
func TestInvStdsMatchesInvStd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 4, 5, 8, 63, 64, 67} {
		variance := make([]float32, n)
		for i := range variance {
			switch i % 4 {
			case 0:
				variance[i] = float32(rng.ExpFloat64())
			case 1:
				variance[i] = float32(rng.Float64() * 1e-6)
			case 2:
				variance[i] = float32(rng.Float64() * 1e30)
			default:
				variance[i] = 0
			}
		}
		for _, eps := range []float32{1e-3, 1e-5, 0} {
			got := make([]float64, n)
			invStds(got, variance, eps)
			for i := range n {
				want := invStd(variance[i], eps)
				assert.Equal(t, math.Float64bits(want), math.Float64bits(got[i]),
					"n=%d eps=%g channel %d: variance %g: got %v, want %v", n, eps, i, variance[i], got[i], want)
			}
		}
	}
}
