//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FusedBatchNormGradEx's mask loops (maskRows32, unmaskRows32 and their
// AVX-512 forms) against the scalar rule (maskGrad, unmaskGrad), bit for
// bit: dz's bits (a NaN or infinite dy masked off is NaN, a finite one a
// zero of its sign) and the mask's bits, on y across 0 and 6, exactly 0,
// 6, NaN and ±Inf among them, at every start of the bits within a word.
func TestMaskLoopsMatchTheRule(t *testing.T) {
	if simdMaskRows == nil {
		t.Skip("no vector loops on this CPU")
	}
	rng := rand.New(rand.NewPCG(77, 1))
	special := []float32{0, float32(math.Copysign(0, -1)), 6, 5.999999, 6.000001, float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45}
	draw := func(n int) (dy, y []float32) {
		dy, y = make([]float32, n), make([]float32, n)
		for i := range n {
			dy[i], y[i] = float32(rng.NormFloat64()), float32(-1.5+9*rng.Float64())
			if rng.IntN(8) == 0 {
				y[i] = special[rng.IntN(len(special))]
			}
			if rng.IntN(8) == 0 {
				dy[i] = special[rng.IntN(len(special))]
			}
		}
		return dy, y
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s[%d]", what, i)
		}
	}
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		for _, upper := range []bool{false, true} {
			a := activation{upper: upper}
			for _, n := range []int{0, 64, 128, 192, 320} {
				dy, y := draw(n)
				got, want := make([]float32, n), make([]float32, n)
				gotBits, wantBits := make([]uint64, n/64+1), make([]uint64, n/64+1)
				require.Equal(t, n, simdMaskRows(got, dy, y, upper, gotBits), "elements taken")
				maskGrad(a, want, dy, y, wantBits)
				same("dz", got, want)
				require.Equal(t, wantBits[:n/64], gotBits[:n/64], "wide=%v upper=%v n=%d: bits", wide, upper, n)
				// The second pass, from every start within the bits.
				bits := append(wantBits, 0) // the spare word the loops read past the last
				for pos := 0; pos < 64 && pos < n; pos += 5 {
					m := (n - pos) / 8 * 8
					got, want := make([]float32, m), make([]float32, m)
					took := simdUnmaskRows(got, dy[pos:pos+m], bits, pos)
					require.Equal(t, m/len8or16(wide)*len8or16(wide), took, "elements taken")
					unmaskGrad(want, dy[pos:pos+m], bits, pos)
					same("dz from the bits", got[:took], want[:took])
				}
			}
		}
		// In place, as the Half and BFloat16 blocks mask: dz over dy.
		dy, y := draw(128)
		want := make([]float32, 128)
		maskGrad(activation{}, want, dy, y, nil)
		simdMaskRows(dy, dy, y, false, nil)
		same("dz in place", dy, want)
	})
}

// len8or16 is the lanes of a float32 vector of the loops selected.
func len8or16(wide bool) int {
	if wide {
		return f32Lanes512
	}
	return f32Lanes
}
