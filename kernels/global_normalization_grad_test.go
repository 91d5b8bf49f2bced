package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

func testGlobalGrad[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(99, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		for _, scaleAfter := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/scale_after_normalization=%v", sc.name, scaleAfter), func(t *testing.T) {
				n, C := sc.N*sc.C*sc.S, sc.C
				in := newGlobalInputs[T](rng, sc)
				out := runGlobal(t, in, scaleAfter)
				want := in.want(scaleAfter)
				require.Len(t, out.dx, n)
				assertActivation(t, "dx", out.dx, want.DX, 0)
				assertVector(t, "dm", out.dm, want.DM)
				assertVector(t, "dv", out.dv, want.DV)
				assertVector(t, "db", out.db, want.DB)
				assertVector(t, "dg", out.dg, want.DG)
				if !scaleAfter {
					for c := range C {
						assert.Zerof(t, toF64(out.dg[c]), "dg[%d] without scale_after_normalization", c)
					}
				}
				if sc.N*sc.S == 0 {
					for c := range C {
						assert.Zerof(t, toF64(out.db[c]), "db[%d] of an empty batch", c)
						assert.Zerof(t, toF64(out.dg[c]), "dg[%d] of an empty batch", c)
					}
				}
			})
		}
	}
}

func TestGlobalNormalizationGrad(t *testing.T) {
	t.Run("float32", testGlobalGrad[float32])
	t.Run("float64", testGlobalGrad[float64])
	t.Run("Half", testGlobalGrad[kernels.Half])
}

func TestGlobalNormalizationGradNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sc := shapeCase{"", 2, 5, 8}
	const bad = 2
	for _, scaleAfter := range []bool{true, false} {
		t.Run(fmt.Sprintf("scale_after_normalization=%v", scaleAfter), func(t *testing.T) {
			in := newGlobalInputs[float32](rng, sc)
			in.t[index(kernels.ChannelsLast, sc.C, sc.S, 1, bad, 5)] = float32(math.NaN())
			out := runGlobal(t, in, scaleAfter)
			want := in.want(scaleAfter)
			assert.Truef(t, math.IsNaN(float64(out.dv[bad])), "dv[%d] = %v, want NaN", bad, out.dv[bad])
			assert.Equalf(t, scaleAfter, math.IsNaN(float64(out.dg[bad])), "dg[%d] = %v", bad, out.dg[bad])
			// dx = dy·s·γ', dm and db do not involve t.
			assertActivation(t, "dx", out.dx, want.DX, 0)
			assertVector(t, "dm", out.dm, want.DM)
			assertVector(t, "db", out.db, want.DB)
			assertVector(t, "dv", out.dv, want.DV)
			assertVector(t, "dg", out.dg, want.DG)
		})
	}
}
