package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fold adds each channel's partial sums in chunk order, and within a
// chunk a period's repeats in order, whatever the ranges of channels it is
// cut into (Plan.Folds): the sums' bits do not depend on the ranges. The
// partial sums span twelve orders of magnitude, so that another order of
// the additions rounds differently, which the test also checks.
func TestFoldRangesKeepChunkOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ C, L, chunks int }{{1000, 1000, 16}, {2048, 2048, 50}, {37, 74, 9}, {3, 72, 5}, {24, 24, 3}} {
		t.Run(fmt.Sprintf("C=%d/L=%d/chunks=%d", c.C, c.L, c.chunks), func(t *testing.T) {
			parts := make([]float64, 2*c.L*c.chunks)
			for i := range parts {
				parts[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(13)-6))
			}
			// The reference: each channel's terms one by one, in order.
			want, reversed := make([]float64, 2*c.C), make([]float64, 2*c.C)
			for ch := range c.C {
				for half := range 2 {
					var terms []float64
					for r := range c.chunks {
						for k := 0; k < c.L; k += c.C {
							terms = append(terms, parts[2*c.L*r+half*c.L+k+ch])
						}
					}
					for i := range terms {
						want[half*c.C+ch] += terms[i]
						reversed[half*c.C+ch] += terms[len(terms)-1-i]
					}
				}
			}
			require.NotEqual(t, want, reversed, "the additions' order changes no sum: the test could not fail")
			for _, folds := range []int{1, 2, 3, 7, max(1, c.C/foldAlign)} {
				sums := make([]float64, 2*c.C)
				p := sumsPass[float32]{L: c.L, sumDy: sums[:c.C:c.C], sumDyXc: sums[c.C:], parts: parts, partial: true}
				pass := p.foldPass(Plan{Folds: folds}, nil)
				require.Equal(t, folds, pass.ranges)
				pass.serially()
				require.Equal(t, want, sums, "%d ranges", folds)
			}
		})
	}
}
