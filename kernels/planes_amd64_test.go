//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The channels-first float32 loops against their arithmetic spelled out
// lane by lane in scalar code (runSumsLanes, applyRunLanes), bit for bit:
// each run's sums and each element of dx must be what they are whatever
// the run's length, its offset in its plane and the vector width, so that
// results do not depend on how a tensor is split into blocks or units.

// runSumsLanes returns a run's Σdy and Σdy·(x−mu) as the vector loops form
// them with L float64 lanes (4: AVX2, 8: AVX-512): whole steps of 2L
// elements into two vectors of accumulators, the two added, at AVX-512 the
// vector's halves added, the four lanes added in pairs, then the scalar
// tail; at AVX-512 the tail is the AVX2 form's sums of the rest, added.
func runSumsLanes(L int, dy, x []float32, mu float64) (sumDy, sumDyXc float64) {
	m, j := len(dy), 0
	if m >= 2*L {
		a, b := make([]float64, 2*L), make([]float64, 2*L)
		for ; j+2*L <= m; j += 2 * L {
			for l := range 2 * L {
				g := float64(dy[j+l])
				a[l] += g
				b[l] = math.FMA(g, float64(x[j+l])-mu, b[l])
			}
		}
		var la, lb [4]float64
		for l := range L {
			a[l] += a[L+l]
			b[l] += b[L+l]
		}
		for l := range 4 {
			la[l], lb[l] = a[l], b[l]
			if L == 8 {
				la[l], lb[l] = a[l]+a[l+4], b[l]+b[l+4]
			}
		}
		sumDy = (la[0] + la[1]) + (la[2] + la[3])
		sumDyXc = (lb[0] + lb[1]) + (lb[2] + lb[3])
	}
	if L == 8 {
		s, sx := runSumsLanes(4, dy[j:], x[j:], mu)
		return sumDy + s, sumDyXc + sx
	}
	for ; j < m; j++ {
		g := float64(dy[j])
		sumDy += g
		sumDyXc += g * (float64(x[j]) - mu)
	}
	return sumDy, sumDyXc
}

// applyRunLanes writes a run's dx as the vector loops do at either width:
// the whole vectors of eight with one FMA, (dy−mdy)·a + (x−mu)·b rounded
// once (fma32), the rest in scalar float32.
func applyRunLanes(scaleOnly bool, a, b, mdy, mu float32, dy, x, dx []float32) {
	v := len(dy) &^ 7
	for j := range dy {
		switch {
		case scaleOnly && j < v:
			dx[j] = dy[j] * a
		case scaleOnly:
			dx[j] = a * dy[j]
		case j < v:
			dx[j] = fma32(dy[j]-mdy, a, (x[j]-mu)*b)
		default:
			dx[j] = a*(dy[j]-mdy) + b*(x[j]-mu)
		}
	}
}

// fma32 returns p·q+r rounded once to float32, from the exact value (in
// float64 it would be rounded twice).
func fma32(p, q, r float32) float32 {
	var z, w big.Float
	z.SetPrec(512).SetFloat64(float64(p)).Mul(&z, w.SetFloat64(float64(q)))
	f, _ := z.Add(&z, w.SetFloat64(float64(r))).Float32()
	return f
}

// planeCases calls each(C, S, c, pos, n) for a block of n elements of C
// channels' planes of S elements starting pos into channel c's: runs of
// every length up to 81, started and ended mid-plane, wrapping from the
// last channel to the first.
func planeCases(each func(C, S, c, pos, n int)) {
	const C = 3
	for S := 1; S <= 81; S++ {
		for _, pos := range []int{0, S / 2, S - 1} {
			each(C, S, 0, pos, 0)
			each(C, S, 1, pos, S-pos)       // one run to the plane's end
			each(C, S, 2, pos, (S-pos+1)/2) // one run ending mid-plane
			for _, tail := range []int{0, S / 2} {
				each(C, S, C-1, pos, S-pos+2*S+tail) // wraps to channel 0
			}
		}
	}
}

// planeRuns calls run(c, i, m) for each run of the block planeCases
// described: m elements of channel c from the block's element i.
func planeRuns(C, S, c, pos, n int, run func(c, i, m int)) {
	for i := 0; i < n; {
		m := min(S-pos, n-i)
		run(c, i, m)
		i += m
		pos = 0
		c = (c + 1) % C
	}
}

// randomF32 returns n values from rng, of varied magnitudes.
func randomF32(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(9)-4)))
	}
	return s
}

func TestChannelsFirstLoopsMatchTheirLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		L := map[bool]int{false: f64Lanes, true: f64Lanes512}[wide]
		planeCases(func(C, S, c, pos, n int) {
			dy, x := randomF32(rng, n+8), randomF32(rng, n+8)
			mean := make([]float64, C)
			for k := range mean {
				mean[k] = float64(float32(rng.NormFloat64()))
			}
			// The sums start from earlier blocks' partial sums.
			start := make([]float64, C)
			for k := range start {
				start[k] = rng.NormFloat64()
			}
			wantA, wantB := append([]float64(nil), start...), append([]float64(nil), start...)
			planeRuns(C, S, c, pos, n, func(c, i, m int) {
				a, b := runSumsLanes(L, dy[i:i+m], x[i:i+m], mean[c])
				wantA[c] += a
				wantB[c] += b
			})
			gotA, gotB := append([]float64(nil), start...), append([]float64(nil), start...)
			sumsPlanes(C, S, c, pos, dy[:n], x[:n], mean, gotA, gotB)
			for k := range C {
				require.Equal(t, math.Float64bits(wantA[k]), math.Float64bits(gotA[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d: Σdy of channel %d", wide, C, S, c, pos, n, k)
				require.Equal(t, math.Float64bits(wantB[k]), math.Float64bits(gotB[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d: Σdy·(x−mean) of channel %d", wide, C, S, c, pos, n, k)
			}

			aff := &affine32{A: randomF32(rng, C), B: randomF32(rng, C), MeanDy: randomF32(rng, C), Mean: randomF32(rng, C)}
			for _, scaleOnly := range []bool{false, true} {
				aff.ScaleOnly = scaleOnly
				want, got := make([]float32, n+8), make([]float32, n+8)
				for k := range got {
					got[k] = -7 // past n it must stay so
					want[k] = -7
				}
				planeRuns(C, S, c, pos, n, func(c, i, m int) {
					applyRunLanes(scaleOnly, aff.A[c], aff.B[c], aff.MeanDy[c], aff.Mean[c], dy[i:i+m], x[i:i+m], want[i:i+m])
				})
				applyPlanes(C, S, c, pos, aff, dy[:n], x[:n], got[:n])
				for k := range got {
					require.Equal(t, math.Float32bits(want[k]), math.Float32bits(got[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d scaleOnly=%v: dx[%d]", wide, C, S, c, pos, n, scaleOnly, k)
				}
			}
		})
	})
}
