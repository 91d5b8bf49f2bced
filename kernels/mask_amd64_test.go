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

// The bfloat16 mask loops (maskRowsBF16, unmaskRowsBF16) against the
// scalar rule on the widened values (maskGrad), bit for bit: every one of
// the 65536 bfloat16 y, dy drawn with NaN, ±Inf and signed zeros among
// them, dz narrowed as BFloat16FromFloat32 narrows; the mask's bits written
// from every multiple of sixteen within a word, the bits below it kept,
// and read back from there.
func TestBFloat16MaskLoopsMatchTheRule(t *testing.T) {
	if !canAVX512() {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewPCG(77, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-40}
	const n = 1 << 16
	y, dy := make([]BFloat16, n), make([]BFloat16, n)
	for i := range y {
		y[i] = BFloat16(i)
		f := float32(rng.NormFloat64())
		if rng.IntN(8) == 0 {
			f = special[rng.IntN(len(special))]
		}
		dy[i] = BFloat16FromFloat32(f)
	}
	y[5] = 0x7f81  // a signalling NaN y
	dy[6] = 0x7f81 // and dy
	for _, upper := range []bool{false, true} {
		a := activation{upper: upper}
		wy, wdy := make([]float32, n), make([]float32, n)
		for i := range y {
			wy[i], wdy[i] = y[i].Float32(), dy[i].Float32()
		}
		want, wantBits := make([]float32, n), make([]uint64, n/64)
		maskGrad(a, want, wdy, wy, wantBits)
		for _, pos := range []int{0, 16, 32, 48} {
			got := make([]BFloat16, n-64)
			bits := make([]uint64, n/64+1)
			for i := range bits {
				bits[i] = 0x5555_5555_5555_5555 // what lies below pos must stay
			}
			maskRowsBF16(got, dy[:n-64], y[:n-64], upper, bits, pos)
			for i := range got {
				require.Equal(t, BFloat16FromFloat32(want[i]), got[i], "upper=%v pos=%d: dz[%d] of dy %#x, y %#x", upper, pos, i, dy[i], y[i])
				p := pos + i
				require.Equal(t, wantBits[i/64]>>(i%64)&1, bits[p/64]>>(p%64)&1, "upper=%v pos=%d: bit of y %#x", upper, pos, y[i])
			}
			require.Equal(t, uint64(0x5555_5555_5555_5555)&(1<<pos-1), bits[0]&(1<<pos-1), "pos=%d: the bits below pos", pos)
			back := make([]BFloat16, n-64)
			unmaskRowsBF16(back, dy[:n-64], bits, pos)
			require.Equal(t, got, back, "upper=%v pos=%d: dz from the bits", upper, pos)
		}
	}
	// In place: dz over dy.
	d := append([]BFloat16(nil), dy[:256]...)
	want := make([]BFloat16, 256)
	maskRowsBF16(want, d, y[:256], false, nil, 0)
	maskRowsBF16(d, d, y[:256], false, nil, 0)
	require.Equal(t, want, d, "dz in place")
}
