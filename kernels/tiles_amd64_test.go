//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
)

// forEachLoopSet calls fn with the AVX2 loops selected, then with the
// AVX-512 ones where the CPU has them, and leaves the CPU's own selected.
func forEachLoopSet(fn func(wide bool, l *rowLoops)) {
	defer selectLoops(canAVX512())
	for _, wide := range []bool{false, true} {
		if wide && !canAVX512() {
			continue
		}
		selectLoops(wide)
		fn(wide, rowLoopsInUse)
	}
}

// The float32 tiles of the channels-last sums (sumsTiles) against the
// reference's, formed in float64 term by term: each tile's float32 partial
// sums over foldRows rows err by at most about foldRows·2⁻²⁴ of the terms'
// absolute sum, and are then added in float64.
func TestSumsTilesMatchFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	forEachLoopSet(func(wide bool, l *rowLoops) {
		// Widths of one tile, several, one vector past them and a scalar
		// tail; rows below, at and past a fold.
		for _, W := range []int{8, 16, 24, 40, 64, 72, 96, 130, 200, 1030} {
			for _, rows := range []int{1, 4, 16, 17, 40} {
				dy, x := make([]float32, W*rows), make([]float32, W*rows)
				for i := range dy {
					dy[i], x[i] = float32(rng.NormFloat64()), float32(3+rng.NormFloat64())
				}
				mean, a, b := make([]float64, W), make([]float64, W), make([]float64, W)
				absA, absB := make([]float64, W), make([]float64, W)
				for c := range W {
					mean[c] = float64(float32(3 + 0.1*rng.NormFloat64()))
					a[c], b[c] = float64(c), -float64(c) // sums already under way
				}
				want := reference.Sums{Dy: slices.Clone(a), DyXmu: slices.Clone(b)}
				for r := range rows {
					for c := range W {
						g, xv := float64(dy[r*W+c]), float64(x[r*W+c])
						want.Add(c, g, xv, mean[c])
						absA[c] += math.Abs(g)
						absB[c] += math.Abs(g * (xv - mean[c]))
					}
				}
				sumsTiles(l, W, rows, dy, x, mean, a, b)
				bound := 2 * foldRows * 0x1p-24
				for c := range W {
					require.InDelta(t, want.Dy[c], a[c], bound*absA[c]+1e-12, "wide=%v W=%d rows=%d channel %d Σdy", wide, W, rows, c)
					require.InDelta(t, want.DyXmu[c], b[c], bound*absB[c]+1e-12, "wide=%v W=%d rows=%d channel %d Σdy·(x−μ)", wide, W, rows, c)
				}
			}
		}
	})
}

// sumsRows takes the tiles where the kernels' plans give it rows enough:
// rows one tile wide in any block; wider rows, up to 4096 channels, in the
// blocks of the pass that sums alone (training, reduce, and inference's
// two passes over rows of splitRowC channels or more beyond maxTiledBytes)
// whatever the tensor's size; but not in the blocks of an inference sweep
// of narrower rows beyond maxTiledBytes.
func TestSumsRowsTileChoice(t *testing.T) {
	forEachLoopSet(func(wide bool, l *rowLoops) {
		rowsIn := func(W, limit int) int { return blockFor(Dims{C: int64(W), Layout: ChannelsLast}, limit) / W }
		require.True(t, l.tiles(l.tileStep, rowsIn(l.tileStep, blockLen)), "one tile wide, blockLen")
		for _, W := range []int{256, 1024, 2048, 4096} {
			for _, n := range []int{1 << 16, 1 << 30} {
				d := Dims{N: int64(n / W), S: 1, C: int64(W), Layout: ChannelsLast}
				for _, j := range []job{jobTraining, jobReduce, jobSweep} {
					p := planFor(call{dims: d, job: j, size: 4}, Machine{Cores: 16}, DefaultTuning())
					tiled := l.tiles(W, rowsIn(W, p.SumsBlock))
					if j == jobSweep && W < splitRowC && 4*n > maxTiledBytes {
						require.Equal(t, FormSweep, p.Form)
						require.False(t, tiled, "W=%d, %d elements, an inference sweep", W, n)
						continue
					}
					require.True(t, tiled, "W=%d, %d elements, job %d (%v)", W, n, j, p.Form)
				}
			}
		}
		require.False(t, l.tiles(l.tileStep, minTileRows-1))
	})
}

// The bfloat16 loops that convert in registers (simdSumsBFloat16,
// simdApplyBFloat16) against the same gradient through float32 blocks:
// x_backprop bit for bit, the sums to float32 rounding. The shapes take
// both paths through them (the inference sweep of short rows, two passes
// of long ones) on one range and on several.
func TestBFloat16RowsMatchBlocks(t *testing.T) {
	if simdSumsBFloat16 == nil {
		t.Skip("no AVX-512 bfloat16 loops on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range []Dims{
		{N: 2, S: 9, C: 64, Layout: ChannelsLast},
		{N: 2, S: 5, C: 1024, Layout: ChannelsLast},
		{N: 4, S: 6, C: 48, Layout: ChannelsLast},    // period 96: a tile and two vectors a row
		{N: 16, S: 64, C: 128, Layout: ChannelsLast}, // several ranges
		{N: 4, S: 16, C: 2048, Layout: ChannelsLast}, // several ranges, long rows
	} {
		for _, training := range []bool{true, false} {
			t.Run(fmt.Sprintf("%dx%dx%d/training=%v", d.N, d.S, d.C, training), func(t *testing.T) {
				pd, _ := d.periodic()
				_, ok := bfloat16Rows[BFloat16](pd, 0, d.Len())
				require.True(t, ok, "the shape must take the bfloat16 loops")
				n, C := d.Len(), int(d.C)
				dy, x := make([]BFloat16, n), make([]BFloat16, n)
				for i := range dy {
					dy[i], x[i] = BFloat16FromFloat32(float32(rng.NormFloat64())), BFloat16FromFloat32(float32(1+rng.NormFloat64()))
				}
				per := func(base float64) []float32 {
					s := make([]float32, C)
					for i := range s {
						s[i] = float32(base + 0.2*rng.Float64())
					}
					return s
				}
				scale, mean, variance := per(0.5), per(1), per(1)
				run := func() ([]BFloat16, []float32, []float32) {
					g := FusedGradArgs[BFloat16]{Dims: d, YBackprop: dy, X: x, Scale: scale, ReserveSpace1: mean,
						ReserveSpace2: variance, Epsilon: 1e-3, XBackprop: make([]BFloat16, n),
						ScaleBackprop: make([]float32, C), OffsetBackprop: make([]float32, C)}
					if training {
						TrainingGrad(g)
					} else {
						InferenceGrad(g)
					}
					return g.XBackprop, g.ScaleBackprop, g.OffsetBackprop
				}
				dx, ds, do := run()
				sums, apply := simdSumsBFloat16, simdApplyBFloat16
				simdSumsBFloat16, simdApplyBFloat16 = nil, nil
				dxRef, dsRef, doRef := run()
				simdSumsBFloat16, simdApplyBFloat16 = sums, apply
				// The sums fold their float32 tiles at other rows, so they
				// differ by float32 roundings of the channels' magnitudes.
				largest := func(v []float32) float64 {
					m := 0.0
					for _, e := range v {
						m = max(m, math.Abs(float64(e)))
					}
					return m
				}
				for c := range C {
					require.InDelta(t, doRef[c], do[c], 1e-5*largest(doRef), "offset_backprop[%d]", c)
					require.InDelta(t, dsRef[c], ds[c], 1e-5*largest(dsRef), "scale_backprop[%d]", c)
				}
				if !training {
					require.Equal(t, dxRef, dx, "x_backprop")
					return
				}
				// Training's coefficients come from the sums, which the two
				// ways round differently in float32: dx to a bfloat16 ulp.
				for i := range dx {
					require.InDelta(t, dxRef[i].Float32(), dx[i].Float32(), 1e-2*(1+math.Abs(float64(dxRef[i].Float32()))), "x_backprop[%d]", i)
				}
			})
		}
	}
}

// The training apply of rows wider than applyChunk, in chunks of channels
// over chunkRows rows (applyChunks, which applyRows takes for them),
// against the same loop along each whole row: x_backprop bit for bit, the
// operations on each element being the same. Widths of two chunks, of a
// chunk and a vector, of three chunks; rows below, at and past chunkRows.
func TestApplyChunksMatchRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	forEachLoopSet(func(wide bool, l *rowLoops) {
		for _, W := range []int{2 * applyChunk, applyChunk + 16, 3 * applyChunk} {
			for _, rows := range []int{1, chunkRows - 1, chunkRows, chunkRows + 3, 2*chunkRows + 5} {
				dy, x := make([]float32, W*rows), make([]float32, W*rows)
				for i := range dy {
					dy[i], x[i] = float32(rng.NormFloat64()), float32(3+rng.NormFloat64())
				}
				per := func() []float32 {
					s := make([]float32, W)
					for i := range s {
						s[i] = float32(rng.NormFloat64())
					}
					return s
				}
				tr := &affine32{A: per(), B: per(), MeanDy: per(), Mean: per()}
				pa, pb, pd, pm := ptr32(tr.A), ptr32(tr.B), ptr32(tr.MeanDy), ptr32(tr.Mean)
				want := make([]float32, W*rows)
				for o := 0; o < W*rows; o += W {
					l.apply(W, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), unsafe.Pointer(&want[o]), W, pa, pb, pd, pm)
				}
				chunked, viaRows := make([]float32, W*rows), make([]float32, W*rows)
				applyChunks(l, W, rows, dy, x, chunked, pa, pb, pd, pm)
				applyRows(W, rows, tr, 0, dy, x, viaRows)
				require.Equal(t, want, chunked, "wide=%v W=%d rows=%d applyChunks", wide, W, rows)
				require.Equal(t, want, viaRows, "wide=%v W=%d rows=%d applyRows", wide, W, rows)
			}
		}
	})
}

// The bfloat16 tile (sumsTileBF16, which widens by interleaving and puts the
// channels back in order when folding) against the float32 tile
// (sumsTile512, tile_amd64.s) over the same rows widened in order: each
// channel's sums take the same operations in the same order, so they agree
// bit for bit.
func TestBFloat16TileMatchesFloat32Tile(t *testing.T) {
	if simdSumsBFloat16 == nil {
		t.Skip("no AVX-512 bfloat16 loops on this CPU")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, W := range []int{64, 128, 1024} {
		for _, rows := range []int{1, 5, foldRows, foldRows + 1, 40} {
			dy, x := make([]BFloat16, W*rows), make([]BFloat16, W*rows)
			dy32, x32 := make([]float32, W*rows), make([]float32, W*rows)
			for i := range dy {
				dy[i], x[i] = BFloat16FromFloat32(float32(rng.NormFloat64())), BFloat16FromFloat32(float32(3+rng.NormFloat64()))
				dy32[i], x32[i] = dy[i].Float32(), x[i].Float32()
			}
			mean := make([]float64, 64)
			a16, b16, a32, b32 := make([]float64, 64), make([]float64, 64), make([]float64, 64), make([]float64, 64)
			for c := range mean {
				mean[c] = 3 + 0.1*rng.NormFloat64()
				a16[c], b16[c] = float64(c), -float64(c) // sums already under way
				a32[c], b32[c] = a16[c], b16[c]
			}
			sumsTileBF16(rows, W, unsafe.Pointer(&dy[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&mean[0]), unsafe.Pointer(&a16[0]), unsafe.Pointer(&b16[0]))
			sumsTile512(rows, W, unsafe.Pointer(&dy32[0]), unsafe.Pointer(&x32[0]), unsafe.Pointer(&mean[0]), unsafe.Pointer(&a32[0]), unsafe.Pointer(&b32[0]))
			require.Equal(t, a32, a16, "W=%d rows=%d Σdy", W, rows)
			require.Equal(t, b32, b16, "W=%d rows=%d Σdy·(x−μ)", W, rows)
		}
	}
}

// loopsAtInit are the row loops the package's init selected: this file's
// init runs after simd_amd64.go's (the go tool hands a package's files to
// the compiler sorted by name, and their inits run in that order), and
// before TestMain selects the AVX2 loops for the tests' second run.
var loopsAtInit *rowLoops

func init() { loopsAtInit = rowLoopsInUse }

// TestSelectLoops checks that each width selects its own forms of every
// loop the float32 and bfloat16 paths call through a variable, and that
// the package selects the CPU's widest: what the tests run through
// forEachLoopSet is what the kernels run.
func TestSelectLoops(t *testing.T) {
	fn := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	want := map[bool]map[string]any{
		false: {"rows": avx2Rows, "sumsPlanes": sumsPlanes32, "applyPlanes": applyPlanes32,
			"planeLanes": sumsPlaneLanes32, "widenBFloat16": widenBFloat16, "narrowBFloat16": narrowBFloat16},
		true: {"rows": avx512Rows, "sumsPlanes": sumsPlanes512, "applyPlanes": applyPlanesAsm512,
			"planeLanes": sumsPlaneLanesAsm512, "widenBFloat16": widenBFloat16x16, "narrowBFloat16": narrowBFloat16x16},
	}
	if !planesInAsm { // a CPU that hides BMI2
		want[true]["applyPlanes"], want[true]["planeLanes"] = applyPlanes512, sumsPlaneLanes512
	}
	require.Equal(t, canAVX512(), loopsAtInit == avx512Rows, "the package's loops are not the CPU's widest")
	forEachLoopSet(func(wide bool, l *rowLoops) {
		w := want[wide]
		require.Same(t, w["rows"], l, "wide=%v: row loops", wide)
		got := map[string]any{"sumsPlanes": sumsPlanes, "applyPlanes": applyPlanes, "planeLanes": simdPlaneLanes,
			"widenBFloat16": simdWidenBFloat16, "narrowBFloat16": simdNarrowBFloat16}
		for name, f := range got {
			require.Equal(t, fn(w[name]), fn(f), "wide=%v: %s", wide, name)
		}
		require.Same(t, map[bool]*maskedLoops{false: avx2Masked, true: avx512Masked}[wide], maskedInUse,
			"wide=%v: the masked channels-last loops", wide)
		// The bfloat16 rows' fused loops exist at AVX-512 only.
		require.Equal(t, wide, simdSumsBFloat16 != nil && simdApplyBFloat16 != nil, "wide=%v: bfloat16 rows", wide)
	})
}
