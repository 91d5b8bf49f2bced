package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gobn/gobn/kernels"
	"github.com/stretchr/testify/require"
)

// The block conversions (vector loops where the CPU has AVX2) must equal the
// scalar conversions bit for bit, including their tails.

// testWidenMatchesScalar: Widen converts as Float32 does, bit for bit; of
// a NaN, where F16C quiets signalling half NaNs, only NaN and sign count
// unless f.widenKeepsNaNs.
func testWidenMatchesScalar[T float16](t *testing.T, f format16[T]) {
	src := make([]T, 1<<16+5)
	for i := range src {
		src[i] = T(i)
	}
	dst := make([]float32, len(src))
	kernels.Widen(dst, src)
	for i, h := range src {
		want, got := h.Float32(), dst[i]
		if math.IsNaN(float64(want)) && !f.widenKeepsNaNs {
			require.True(t, math.IsNaN(float64(got)), "%#04x", uint16(h))
			require.Equal(t, math.Float32bits(want)>>31, math.Float32bits(got)>>31)
			continue
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "%#04x", uint16(h))
	}
}

func TestWidenMatchesScalar(t *testing.T) {
	t.Run("Half", func(t *testing.T) { testWidenMatchesScalar(t, halfFormat) })
	t.Run("BFloat16", func(t *testing.T) { testWidenMatchesScalar(t, bfloat16Format) })
}

// narrowInputs covers every half boundary region: random bit patterns,
// values around every half (exact, midpoints, neighbours), subnormals,
// overflow, Inf and NaN.
func narrowInputs() []float32 {
	rng := rand.New(rand.NewPCG(7, 11))
	var in []float32
	for range 1 << 18 {
		in = append(in, math.Float32frombits(rng.Uint32()))
	}
	for h := range 1 << 16 {
		v := kernels.Half(h).Float32()
		b := math.Float32bits(v)
		in = append(in, v, math.Float32frombits(b+1), math.Float32frombits(b-1),
			math.Float32frombits(b+1<<12), math.Float32frombits(b+1<<12+1), math.Float32frombits(b+1<<12-1))
	}
	in = append(in, 65504, 65519.99, 65520, 1e9, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 0x1p-25, 0x1p-26, -0x1p-25, 0x1.8p-25, 0)
	return in
}

// testNarrowMatchesScalar: Narrow rounds as f.fromFloat32 does.
func testNarrowMatchesScalar[T float16](t *testing.T, f format16[T]) {
	in := narrowInputs()
	got := make([]T, len(in))
	kernels.Narrow(got, in)
	for i, v := range in {
		if math.IsNaN(float64(v)) {
			require.True(t, math.IsNaN(float64(got[i].Float32())), "float32 %#08x", math.Float32bits(v))
			continue
		}
		require.Equal(t, f.fromFloat32(v), got[i], "float32 %#08x (%g)", math.Float32bits(v), v)
	}
}

func TestNarrowMatchesScalar(t *testing.T) {
	t.Run("Half", func(t *testing.T) { testNarrowMatchesScalar(t, halfFormat) })
	t.Run("BFloat16", func(t *testing.T) { testNarrowMatchesScalar(t, bfloat16Format) })
}
