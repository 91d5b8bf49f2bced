package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// exMode is a way FusedBatchNormGradEx is called: the activation, training
// or inference, and whether side_input_backprop is asked for.
type exMode struct {
	activation string
	training   bool
	side       bool
}

func (m exMode) String() string {
	return fmt.Sprintf("%s/training=%v/side=%v", m.activation, m.training, m.side)
}

// exModes are every mode: each activation, training and inference, with
// and without side_input_backprop.
var exModes = func() []exMode {
	var out []exMode
	for _, a := range opdef.ActivationModes {
		for _, training := range []bool{true, false} {
			for _, side := range []bool{false, true} {
				out = append(out, exMode{a, training, side})
			}
		}
	}
	return out
}()

// exInputs are a FusedBatchNormGradEx problem: FusedBatchNormGrad's inputs
// and the activation's output y.
type exInputs[T kernels.Element] struct {
	fusedInputs[T]
	y []T
}

// newExInputs draws a problem: y uniform across 0 and 6, and an element in
// twenty exactly 0 or exactly 6, where the masks' comparisons turn.
func newExInputs[T kernels.Element](rng *rand.Rand, training bool, layout kernels.Layout, sc shapeCase) exInputs[T] {
	in := exInputs[T]{fusedInputs: newFusedInputs[T](rng, training, layout, sc), y: make([]T, sc.N*sc.C*sc.S)}
	for i := range in.y {
		v := -1.5 + 9*rng.Float64()
		switch rng.IntN(20) {
		case 0:
			v = 0
		case 1:
			v = 6
		}
		in.y[i] = fromF64[T](v)
	}
	return in
}

// exOutputs are FusedBatchNormGradEx's outputs.
type exOutputs[T kernels.Element] struct {
	dx, side                      []T
	scaleBackprop, offsetBackprop []float32
}

// runEx runs FusedBatchNormGradEx on in in mode m with guarded outputs,
// checks the guards and that the inputs are unchanged, and returns the
// outputs (side nil without side_input_backprop).
func runEx[T kernels.Element](t *testing.T, m exMode, in exInputs[T]) exOutputs[T] {
	t.Helper()
	n, C := len(in.x), len(in.scale)
	dx, side := newGuarded[T](n), newGuarded[T](n)
	scaleBp, offsetBp := newGuarded[float32](C), newGuarded[float32](C)
	saved := [][]T{append([]T(nil), in.dy...), append([]T(nil), in.x...), append([]T(nil), in.y...)}
	savedC := [][]float32{append([]float32(nil), in.scale...), append([]float32(nil), in.mean...),
		append([]float32(nil), in.variance...)}
	args := kernels.FusedGradExArgs[T]{
		Dims: in.dims, YBackprop: in.dy, X: in.x, Y: in.y,
		Scale: in.scale, ReserveSpace1: in.mean, ReserveSpace2: in.variance, ReserveSpace3: []float32{},
		Offset: make([]float32, C), Epsilon: in.epsilon, ActivationMode: m.activation, IsTraining: m.training,
		XBackprop: dx.inner, ScaleBackprop: scaleBp.inner, OffsetBackprop: offsetBp.inner,
	}
	if m.side {
		args.NumSideInputs, args.SideInputBackprop = 1, side.inner
	}
	kernels.FusedBatchNormGradEx(args)
	dx.check(t, "x_backprop")
	scaleBp.check(t, "scale_backprop")
	offsetBp.check(t, "offset_backprop")
	out := exOutputs[T]{dx: dx.inner, scaleBackprop: scaleBp.inner, offsetBackprop: offsetBp.inner}
	if m.side {
		side.check(t, "side_input_backprop")
		out.side = side.inner
	} else {
		for i, v := range side.full {
			require.Equal(t, bitsOf(sentinel[T]()), bitsOf(v), "side_input_backprop written at %d without a side input", i)
		}
	}
	for i, name := range []string{"y_backprop", "x", "y"} {
		requireUnchanged(t, name, [][]T{in.dy, in.x, in.y}[i], saved[i])
	}
	for i, name := range []string{"scale", "reserve_space_1", "reserve_space_2"} {
		requireUnchanged(t, name, [][]float32{in.scale, in.mean, in.variance}[i], savedC[i])
	}
	return out
}

// wantEx returns the float64 reference of in in mode m: the outputs, and
// dz, side_input_backprop.
func wantEx[T kernels.Element](m exMode, in exInputs[T]) (reference.Fused, []float64) {
	return reference.FusedGradEx(shapeOf(in.dims), m.activation, widenAll(in.dy), widenAll(in.x), widenAll(in.scale),
		widenAll(in.mean), widenAll(in.variance), widenAll(in.y), float64(in.epsilon), m.training)
}

// checkEx runs in in mode m and compares every output with the float64
// reference: the activations by assertActivation, the 1-D outputs within
// float32's tolerance; dz, a mask of dy, exactly.
func checkEx[T kernels.Element](t *testing.T, m exMode, in exInputs[T]) exOutputs[T] {
	t.Helper()
	got := runEx(t, m, in)
	want, dz := wantEx(m, in)
	assertActivation(t, "x_backprop", got.dx, want.XBackprop, want.XBackpropMagnitude)
	reference.Close(t, "scale_backprop", widenAll(got.scaleBackprop), want.ScaleBackprop, tolerance.Bound{Atol: 1e-5}, 0)
	reference.Close(t, "offset_backprop", widenAll(got.offsetBackprop), want.OffsetBackprop, tolerance.Bound{Atol: 1e-5}, 0)
	if m.side {
		reference.Close(t, "side_input_backprop", widenAll(got.side), dz, tolerance.Bound{}, 0)
	}
	return got
}

// TestFusedBatchNormGradExByHand: the case of internal/reference's tests
// worked by hand from docs/design.md's formulas (N = 1, S = 3, C = 2,
// ε = 0.25; channel 0: x = 0 1 2, μ = 1, σ² = 3.75, so c = ½, scale = 2,
// dy = 1 2 6; channel 1: x = 4 4 4, μ = 3, σ² = 0, so c = 2, scale = −1,
// dy = 1 −1 3), with y = 0.5 −1 3 and 7 0 5.5: Relu masks dy to
// dz = 1 0 6 and 1 0 3, Relu6 to 1 0 6 and 0 0 3.
func TestFusedBatchNormGradExByHand(t *testing.T) {
	for _, tc := range []struct {
		mode              exMode
		dz, dx            [2][3]float64
		scaleBp, offsetBp [2]float64
	}{
		// Σdz = 7, 4; Σdz·(x−μ) = 5, 4; dx = scale·c·(dz − Σdz/3 − (x−μ)·c²·Σdz·(x−μ)/3).
		{mode: exMode{"Relu", true, true}, dz: [2][3]float64{{1, 0, 6}, {1, 0, 3}},
			dx: [2][3]float64{{-11. / 12, -7. / 3, 39. / 12}, {34. / 3, 40. / 3, 22. / 3}}, scaleBp: [2]float64{2.5, 8},
			offsetBp: [2]float64{7, 4}},
		// Σdz = 7, 3; Σdz·(x−μ) = 5, 3.
		{mode: exMode{"Relu6", true, true}, dz: [2][3]float64{{1, 0, 6}, {0, 0, 3}},
			dx: [2][3]float64{{-11. / 12, -7. / 3, 39. / 12}, {10, 10, 4}}, scaleBp: [2]float64{2.5, 6},
			offsetBp: [2]float64{7, 3}},
		// dx = dz·scale·c.
		{mode: exMode{"Relu", false, true}, dz: [2][3]float64{{1, 0, 6}, {1, 0, 3}},
			dx: [2][3]float64{{1, 0, 6}, {-2, 0, -6}}, scaleBp: [2]float64{2.5, 8}, offsetBp: [2]float64{7, 4}},
		// dz = dy: FusedBatchNormGrad's Σdy = 9, 3 and Σdy·(x−μ) = 5, 3.
		{mode: exMode{"Identity", false, true}, dz: [2][3]float64{{1, 2, 6}, {1, -1, 3}},
			dx: [2][3]float64{{1, 2, 6}, {-2, 2, -6}}, scaleBp: [2]float64{2.5, 6}, offsetBp: [2]float64{9, 3}},
	} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", tc.mode, l.name), func(t *testing.T) {
				flat := func(ch [2][3]float64) []float32 {
					out := make([]float32, 6)
					for c := range 2 {
						for s := range 3 {
							out[index(l.layout, 2, 3, 0, c, s)] = float32(ch[c][s])
						}
					}
					return out
				}
				in := exInputs[float32]{fusedInputs: fusedInputs[float32]{
					dims: kernels.Dims{N: 1, C: 2, S: 3, Layout: l.layout},
					dy:   flat([2][3]float64{{1, 2, 6}, {1, -1, 3}}), x: flat([2][3]float64{{0, 1, 2}, {4, 4, 4}}),
					scale: []float32{2, -1}, mean: []float32{1, 3}, variance: []float32{3.75, 0}, epsilon: 0.25,
				}, y: flat([2][3]float64{{0.5, -1, 3}, {7, 0, 5.5}})}
				got := runEx(t, tc.mode, in)
				assert.InDeltaSlice(t, widenAll(flat(tc.dx)), widenAll(got.dx), 1e-5, "x_backprop")
				assert.Equal(t, flat(tc.dz), got.side, "side_input_backprop")
				assert.InDeltaSlice(t, tc.scaleBp[:], widenAll(got.scaleBackprop), 1e-5, "scale_backprop")
				assert.InDeltaSlice(t, tc.offsetBp[:], widenAll(got.offsetBackprop), 1e-5, "offset_backprop")
			})
		}
	}
}

// testFusedGradEx runs every shape case in both layouts, each in one mode,
// the modes taken in turn so that each meets shapes of every kind.
func testFusedGradEx[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(71, uint64(len(typeName[T]()))))
	i := 0
	eachShapeLayout(t, func(t *testing.T, sc shapeCase, layout kernels.Layout) {
		m := exModes[i%len(exModes)]
		i++
		t.Logf("%s", m)
		checkEx(t, m, newExInputs[T](rng, m.training, layout, sc))
	})
}

func TestFusedBatchNormGradEx(t *testing.T) {
	eachElement(t, testFusedGradEx[float32], testFusedGradEx[float64], testFusedGradEx[kernels.Half],
		testFusedGradEx[kernels.BFloat16])
}

// TestFusedBatchNormGradExModes: every mode on a shape of each layout that
// splits (channels last in chunks, channels first by channel units).
func TestFusedBatchNormGradExModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(72, 1))
	for _, m := range exModes {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", m, l.name), func(t *testing.T) {
				checkEx(t, m, newExInputs[float32](rng, m.training, l.layout, shapeCase{"", 4, 96, 800}))
			})
		}
	}
}

// TestFusedBatchNormGradExNaN: dy·0 is NaN where dy is NaN or infinite,
// as stock's ReluGrad has it, so a NaN masked off still reaches its
// channel's sums; a NaN y masks dy off.
func TestFusedBatchNormGradExNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 2))
	sc := shapeCase{"", 2, 5, 8}
	for _, m := range []exMode{{"Relu", true, true}, {"Relu6", false, true}} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", m, l.name), func(t *testing.T) {
				in := newExInputs[float32](rng, m.training, l.layout, sc)
				at := func(c, s int) int { return index(l.layout, sc.C, sc.S, 1, c, s) }
				in.dy[at(1, 2)], in.y[at(1, 2)] = float32(math.NaN()), -1 // masked off: NaN
				in.dy[at(3, 4)], in.y[at(3, 4)] = float32(math.Inf(1)), 0 // masked off: NaN
				in.dy[at(4, 1)], in.y[at(4, 1)] = 2, float32(math.NaN())  // y NaN: masked off, 0
				got := checkEx(t, m, in)
				assert.True(t, math.IsNaN(float64(got.side[at(1, 2)])), "NaN dy masked off")
				assert.True(t, math.IsNaN(float64(got.side[at(3, 4)])), "infinite dy masked off")
				assert.Zero(t, got.side[at(4, 1)], "dy where y is NaN")
				assert.True(t, math.IsNaN(float64(got.offsetBackprop[1])), "offset_backprop of a NaN's channel")
				assert.False(t, math.IsNaN(float64(got.offsetBackprop[4])), "offset_backprop where y is NaN")
			})
		}
	}
}

// TestFusedBatchNormGradExInPlace: x_backprop over y_backprop or x equals,
// bit for bit, x_backprop written apart, with and without a side input.
func TestFusedBatchNormGradExInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(74, 3))
	for _, m := range []exMode{{"Relu", true, false}, {"Relu6", true, true}, {"Relu", false, true}} {
		for _, l := range layouts {
			for _, over := range []string{"y_backprop", "x"} {
				t.Run(fmt.Sprintf("%s/%s/over %s", m, l.name, over), func(t *testing.T) {
					in := newExInputs[float32](rng, m.training, l.layout, shapeCase{"", 3, 37, 1000})
					want := runEx(t, m, in)
					args := kernels.FusedGradExArgs[float32]{
						Dims: in.dims, YBackprop: in.dy, X: in.x, Y: in.y, Scale: in.scale, ReserveSpace1: in.mean,
						ReserveSpace2: in.variance, Offset: make([]float32, len(in.scale)), Epsilon: in.epsilon,
						ActivationMode: m.activation, IsTraining: m.training,
						ScaleBackprop: make([]float32, len(in.scale)), OffsetBackprop: make([]float32, len(in.scale)),
					}
					if m.side {
						args.NumSideInputs, args.SideInputBackprop = 1, make([]float32, len(in.x))
					}
					if over == "x" {
						writeOver(&args.X, &args.XBackprop)
					} else {
						writeOver(&args.YBackprop, &args.XBackprop)
					}
					kernels.FusedBatchNormGradEx(args)
					requireUnchanged(t, "x_backprop in place", args.XBackprop, want.dx)
					requireUnchanged(t, "scale_backprop", args.ScaleBackprop, want.scaleBackprop)
					requireUnchanged(t, "offset_backprop", args.OffsetBackprop, want.offsetBackprop)
					if m.side {
						requireUnchanged(t, "side_input_backprop", args.SideInputBackprop, want.side)
					}
				})
			}
		}
	}
}

// TestFusedBatchNormGradExActivationModes: the kernel takes every mode
// opdef accepts, and panics on another (capi refuses it first).
func TestFusedBatchNormGradExActivationModes(t *testing.T) {
	a, ok := opdef.Named("Gobn>FusedBatchNormGradEx")
	require.True(t, ok)
	attr, _ := a.Attr("activation_mode")
	require.Equal(t, opdef.ActivationModes, attr.Accepts)
	in := newExInputs[float32](rand.New(rand.NewPCG(75, 4)), true, kernels.ChannelsLast, shapeCase{"", 2, 3, 4})
	for _, mode := range opdef.ActivationModes {
		runEx(t, exMode{mode, true, false}, in)
	}
	assert.PanicsWithValue(t, `kernels: activation mode "Tanh", want Identity, Relu or Relu6`, func() {
		runEx(t, exMode{"Tanh", true, false}, in)
	})
}

// TestFusedBatchNormGradExForms runs each form of FusedBatchNormGrad's plan
// on dz, on machines of one and four cores: the outputs match the float64
// reference and are the same bits on both, the plan has the form, and the
// two-pass forms wrote the mask's bits (a granule a first-pass block). The
// channels-last granules are rows of 200 and 513 channels, which the second
// pass's blocks cross.
func TestFusedBatchNormGradExForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(76, 5))
	for _, tc := range []struct {
		name      string
		m         exMode
		layout    kernels.Layout
		sc        shapeCase
		byChannel bool
		form      kernels.Form
	}{
		{"two passes, period 200", exMode{"Relu", true, true}, kernels.ChannelsLast, shapeCase{"", 4, 100, 800}, true, kernels.FormPasses},
		{"two passes, rows of 513", exMode{"Relu6", true, false}, kernels.ChannelsLast, shapeCase{"", 2, 513, 300}, true, kernels.FormPasses},
		{"two passes, planes", exMode{"Relu", true, true}, kernels.ChannelsFirst, shapeCase{"", 1, 2, 160000}, true, kernels.FormPasses},
		{"two passes, no units", exMode{"Relu6", true, true}, kernels.ChannelsFirst, shapeCase{"", 4, 96, 800}, false, kernels.FormPasses},
		{"by channel", exMode{"Relu6", true, true}, kernels.ChannelsFirst, shapeCase{"", 4, 96, 800}, true, kernels.FormByChannel},
		{"sweep", exMode{"Relu", false, true}, kernels.ChannelsLast, shapeCase{"", 4, 100, 800}, true, kernels.FormSweep},
		{"inference in two passes", exMode{"Relu6", false, true}, kernels.ChannelsLast, shapeCase{"", 1, 1024, 2100}, true, kernels.FormPasses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer kernels.SetByChannel(kernels.SetByChannel(tc.byChannel))
			in := newExInputs[float32](rng, tc.m.training, tc.layout, tc.sc)
			var first exOutputs[float32]
			for i, cores := range []int{1, 4} {
				onMachine(t, cores)
				p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
				if !tc.m.training {
					p = kernels.InferencePlan[float32](in.dims)
				}
				require.Equal(t, tc.form, p.Form, "cores=%d: %+v", cores, p)
				kernels.ResetSplitStats()
				got := checkEx(t, tc.m, in)
				if tc.form == kernels.FormPasses {
					require.Equal(t, uint64((len(in.x)+p.Align-1)/p.Align), kernels.MaskBitGranules(), "granules of bits written")
				} else {
					require.Zero(t, kernels.MaskBitGranules(), "bits written by a form of one pass over its data")
				}
				if p.Workers > 1 {
					requireSplit(t, p)
				}
				if i == 0 {
					first = got
					continue
				}
				require.Equal(t, first, got, "cores=%d: other bits than on one core", cores)
			}
			if tc.form == kernels.FormPasses && tc.m.training { // the bits' Half and BFloat16 blocks
				checkEx(t, tc.m, newExInputs[kernels.BFloat16](rng, true, tc.layout, tc.sc))
			}
		})
	}
}

// TestFusedBatchNormGradExInRegisters runs the channels-last two-pass form
// whose vector loops form dz where they load dy, at both vector widths
// (TestMain), on one core and four: rows of 64 channels (whole AVX-512
// tiles), 144 (two tiles and a vector), 40 (a vector and the AVX2 loops'
// last eight), 200 (granules that end inside a row) and 37 (a period of
// 296, and a last granule of a length the loops do not take, which goes
// through the blocks), Relu and Relu6, against the float64 reference,
// with a NaN and an infinite dy masked off and a NaN y; the same bits on
// one core and four. The loops must have taken every piece of both passes
// (but the odd last granule's), and with a small StreamBytes the second
// pass's rows stream (AVX-512, rows of a multiple of sixteen) into an
// x_backprop of its own, 64-byte aligned. An inference call in two passes
// sums in the loops too.
func TestFusedBatchNormGradExInRegisters(t *testing.T) {
	if !kernels.SIMD() {
		t.Skip("no vector loops in this build")
	}
	rng := rand.New(rand.NewPCG(77, 6))
	for _, sc := range []shapeCase{{"", 4, 128, 800}, {"", 2, 144, 900}, {"", 3, 40, 700}, {"", 2, 200, 513}, {"", 3, 37, 1001}} {
		for _, act := range []string{"Relu", "Relu6"} {
			m := exMode{act, true, false}
			in := newExInputs[float32](rng, true, kernels.ChannelsLast, sc)
			in.dy[3*sc.C+5], in.y[3*sc.C+5] = float32(math.NaN()), -1
			off := float32(-2) // the Relu's off side, Relu6's other one
			if act == "Relu6" {
				off = 7
			}
			in.dy[7*sc.C+9], in.y[7*sc.C+9] = float32(math.Inf(-1)), off
			in.y[11*sc.C+2] = float32(math.NaN())
			var first exOutputs[float32]
			for _, cores := range []int{1, 4} {
				t.Run(fmt.Sprintf("C=%d/%s/cores=%d", sc.C, act, cores), func(t *testing.T) {
					onMachine(t, cores)
					p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
					require.Equal(t, kernels.FormPasses, p.Form, "%+v", p)
					kernels.ResetSplitStats()
					got := checkEx(t, m, in)
					granules := uint64((len(in.x) + p.Align - 1) / p.Align)
					pieces, _ := kernels.MaskedInRegisters()
					require.Equal(t, granules, kernels.MaskBitGranules(), "granules of bits written")
					inLoops := 2 * granules
					if len(in.x)%8 != 0 {
						inLoops -= 2 // the last granule, in both passes
					}
					require.GreaterOrEqual(t, pieces, inLoops, "pieces of both passes in the vector loops")
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[5])), "offset_backprop of a NaN dy's channel")
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[9])), "offset_backprop of an infinite dy's channel")
					assert.False(t, math.IsNaN(float64(got.offsetBackprop[2])), "offset_backprop where y is NaN")
					if cores == 1 {
						first = got
					} else { // bit for bit, NaNs among them
						requireSameBits(t, "x_backprop on four cores and one", got.dx, first.dx)
						requireSameBits(t, "scale_backprop on four cores and one", got.scaleBackprop, first.scaleBackprop)
						requireSameBits(t, "offset_backprop on four cores and one", got.offsetBackprop, first.offsetBackprop)
					}

					// Streamed: an x_backprop of its own, as capi's, 64-byte aligned.
					defer kernels.SetTuning(kernels.SetTuning(kernels.Tuning{StreamBytes: 4096}))
					dx, guards := alignedFloat32s(len(in.x))
					args := kernels.FusedGradExArgs[float32]{
						Dims: in.dims, YBackprop: in.dy, X: in.x, Y: in.y, Scale: in.scale, ReserveSpace1: in.mean,
						ReserveSpace2: in.variance, Offset: make([]float32, sc.C), Epsilon: in.epsilon, ActivationMode: act,
						IsTraining: true, XBackprop: dx, ScaleBackprop: make([]float32, sc.C), OffsetBackprop: make([]float32, sc.C),
					}
					require.True(t, kernels.TrainingPlan(in.dims, in.dy, in.x, dx).Stream, "the plan streams")
					kernels.ResetSplitStats()
					kernels.FusedBatchNormGradEx(args)
					want, _ := wantEx(m, in)
					assertActivation(t, "x_backprop streamed", dx, want.XBackprop, want.XBackpropMagnitude)
					guards(t)
					_, streamed := kernels.MaskedInRegisters()
					if kernels.AVX512Selected() && p.L%16 == 0 { // else the rows' starts are not all aligned
						require.NotZero(t, streamed, "rows streamed")
					} else if !kernels.AVX512Selected() {
						require.Zero(t, streamed, "rows streamed by the AVX2 loops, which have no streaming form")
					}
				})
			}
		}
	}
	t.Run("inference in two passes", func(t *testing.T) {
		onMachine(t, 2)
		m := exMode{"Relu6", false, false}
		in := newExInputs[float32](rng, false, kernels.ChannelsLast, shapeCase{"", 1, 1024, 2100})
		require.Equal(t, kernels.FormPasses, kernels.InferencePlan[float32](in.dims).Form)
		kernels.ResetSplitStats()
		checkEx(t, m, in)
		pieces, _ := kernels.MaskedInRegisters()
		require.Equal(t, kernels.MaskBitGranules(), pieces, "the first pass's granules summed in the vector loops")
	})
}

// requireSameBits requires got to hold want's bits, element by element.
func requireSameBits[T kernels.Element](t *testing.T, name string, got, want []T) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: length", name)
	for i := range want {
		if bitsOf(got[i]) != bitsOf(want[i]) {
			t.Fatalf("%s: %v at %d, want %v", name, got[i], i, want[i])
		}
	}
}

// TestFusedBatchNormGradExBFloat16Rows runs bfloat16 channels-last rows of
// a multiple of sixteen channels, whose dz the bfloat16 mask loops form in
// bfloat16 blocks for the bfloat16 row loops (AVX-512): rows of 64, 48
// (granules that end inside a word of the bits), 144 and 16 channels, in
// two passes, Relu and Relu6, on one core and four, and the one-pass sweep
// of inference with side_input_backprop, against the float64 reference,
// with a NaN and an infinite dy masked off and a NaN y. The loops must
// have formed every block's dz, and the outputs must be the bits of
// FusedBatchNormGrad (whose bfloat16 rows take the same row loops) on dz =
// dy·m formed by the rule, NaNs among them; with the mask loops off (dz in
// float32 blocks, which sum by other loops), within the tolerance. Rows
// wider than the bits' granules take the float32 blocks.
func TestFusedBatchNormGradExBFloat16Rows(t *testing.T) {
	if !kernels.AVX512Selected() {
		t.Skip("the bfloat16 row loops are AVX-512 only")
	}
	rng := rand.New(rand.NewPCG(77, 7))
	for _, tc := range []struct {
		sc shapeCase
		m  exMode
	}{
		{shapeCase{"", 4, 64, 400}, exMode{"Relu", true, false}},
		{shapeCase{"", 4, 64, 400}, exMode{"Relu6", true, false}},
		{shapeCase{"", 3, 48, 700}, exMode{"Relu6", true, false}},
		{shapeCase{"", 2, 144, 300}, exMode{"Relu", true, false}},
		{shapeCase{"", 5, 16, 999}, exMode{"Relu", true, false}},
		{shapeCase{"", 4, 64, 400}, exMode{"Relu6", false, true}},
		{shapeCase{"", 2, 48, 300}, exMode{"Identity", true, true}},
	} {
		sc := tc.sc
		in := newExInputs[kernels.BFloat16](rng, tc.m.training, kernels.ChannelsLast, sc)
		in.dy[3*sc.C+5], in.y[3*sc.C+5] = kernels.BFloat16FromFloat32(float32(math.NaN())), kernels.BFloat16FromFloat32(-1)
		off := float32(-2) // the Relu's off side, Relu6's other one
		if tc.m.activation == "Relu6" {
			off = 7
		}
		in.dy[7*sc.C+9], in.y[7*sc.C+9] = kernels.BFloat16FromFloat32(float32(math.Inf(-1))), kernels.BFloat16FromFloat32(off)
		in.y[11*sc.C+2] = kernels.BFloat16FromFloat32(float32(math.NaN()))
		for _, cores := range []int{1, 4} {
			t.Run(fmt.Sprintf("C=%d/%v/cores=%d", sc.C, tc.m, cores), func(t *testing.T) {
				onMachine(t, cores)
				kernels.ResetSplitStats()
				got := checkEx(t, tc.m, in)
				blocks := kernels.MaskedBFloat16Rows()
				require.NotZero(t, blocks, "blocks of dz formed by the bfloat16 mask loops")
				if tc.m.training && tc.m.activation != "Identity" {
					p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
					require.Equal(t, kernels.FormPasses, p.Form, "%+v", p)
					granules := uint64((len(in.x) + p.Align - 1) / p.Align)
					require.Equal(t, granules, kernels.MaskBitGranules(), "granules of bits written")
					require.GreaterOrEqual(t, blocks, 2*granules, "blocks of both passes")
				}
				if tc.m.activation != "Identity" {
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[5])), "offset_backprop of a NaN dy's channel")
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[9])), "offset_backprop of an infinite dy's channel")
				}
				dz := make([]kernels.BFloat16, len(in.dy))
				for i, v := range in.dy {
					on := tc.m.activation == "Identity" || in.y[i].Float32() > 0 && (tc.m.activation == "Relu" || in.y[i].Float32() < 6)
					if on {
						dz[i] = kernels.BFloat16FromFloat32(v.Float32() * 1)
					} else {
						dz[i] = kernels.BFloat16FromFloat32(v.Float32() * 0)
					}
				}
				pair := in.fusedInputs
				pair.dy = dz
				dx, scaleBp, offsetBp := runFused(t, tc.m.training, pair)
				requireSameBits(t, "x_backprop, FusedBatchNormGrad's of dz", got.dx, dx)
				requireSameBits(t, "scale_backprop, FusedBatchNormGrad's of dz", got.scaleBackprop, scaleBp)
				requireSameBits(t, "offset_backprop, FusedBatchNormGrad's of dz", got.offsetBackprop, offsetBp)
				if tc.m.side {
					requireSameBits(t, "side_input_backprop, dz", got.side, dz)
				}
				restore := kernels.WithoutBFloat16MaskRows()
				kernels.ResetSplitStats()
				checkEx(t, tc.m, in)
				restore()
				require.Zero(t, kernels.MaskedBFloat16Rows(), "the bfloat16 mask loops, turned off")
			})
		}
	}
	// Rows wider than a granule of bits (16384 elements), which end inside
	// them: the float32 blocks, right.
	t.Run("rows of 16400", func(t *testing.T) {
		onMachine(t, 2)
		for _, act := range []string{"Relu", "Relu6"} {
			in := newExInputs[kernels.BFloat16](rng, true, kernels.ChannelsLast, shapeCase{"", 1, 16400, 3})
			kernels.ResetSplitStats()
			checkEx(t, exMode{act, true, true}, in)
			require.Zero(t, kernels.MaskedBFloat16Rows(), "%s: rows wider than the bits' granules in the bfloat16 mask loops", act)
			require.NotZero(t, kernels.MaskBitGranules(), "%s: the bits written", act)
		}
	})
}

// TestFusedBatchNormGradExMaskedPlanes runs float32 channels-first units
// (FormByChannel) whose dz the masked plane loops form from y where they
// load dy (AVX-512 assembly): planes of 800 (whole vectors), 49 (a tail of
// one) and 9 (runs shorter than a vector), Relu and Relu6, training (an
// inference's x_backprop is scale-only, which these loops have no form
// of), on one core and four, with a NaN and an infinite dy masked
// off and a NaN y, against the float64 reference; the loops must have
// formed every block's dz, and the outputs must be the bits of the same
// call with them off (dz formed in blocks of memory), and the same on four
// cores as on one.
func TestFusedBatchNormGradExMaskedPlanes(t *testing.T) {
	if !kernels.MaskedPlanesAvailable() {
		t.Skip("no masked plane loops on this CPU or build (AVX-512 and BMI2)")
	}
	defer kernels.SetByChannel(kernels.SetByChannel(true))
	rng := rand.New(rand.NewPCG(77, 8))
	for _, sc := range []shapeCase{{"", 4, 96, 800}, {"", 8, 400, 49}, {"", 8, 2048, 9}} {
		for _, m := range []exMode{{"Relu", true, false}, {"Relu6", true, false}} {
			in := newExInputs[float32](rng, m.training, kernels.ChannelsFirst, sc)
			// channels 5 and 9 of the first sample: a NaN dy and an infinite one masked off
			in.dy[5*sc.S+1], in.y[5*sc.S+1] = float32(math.NaN()), -1
			off := float32(-2)
			if m.activation == "Relu6" {
				off = 7
			}
			in.dy[9*sc.S+2], in.y[9*sc.S+2] = float32(math.Inf(-1)), off
			in.y[2*sc.S+3] = float32(math.NaN())
			var first exOutputs[float32]
			for _, cores := range []int{1, 4} {
				t.Run(fmt.Sprintf("S=%d/%v/cores=%d", sc.S, m, cores), func(t *testing.T) {
					onMachine(t, cores)
					p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
					require.Equal(t, kernels.FormByChannel, p.Form, "%+v", p)
					kernels.ResetSplitStats()
					got := checkEx(t, m, in)
					// Every block of both passes: a unit's planes sample by
					// sample, in blocks of whole planes (or a plane's pieces,
					// were it longer than a block), as byChannelJob.planes.
					blocks := 0
					for u := range p.Units {
						c0, c1 := u*p.UnitChannels, min(sc.C, (u+1)*p.UnitChannels)
						if sc.S <= p.SumsBlock {
							step := p.SumsBlock / sc.S * sc.S
							blocks += sc.N * (((c1-c0)*sc.S + step - 1) / step)
						} else {
							blocks += sc.N * (c1 - c0) * ((sc.S + p.SumsBlock - 1) / p.SumsBlock)
						}
					}
					require.Equal(t, uint64(2*blocks), kernels.MaskedPlanes(), "blocks of dz formed by the masked plane loops, both passes")
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[5])), "offset_backprop of a NaN dy's channel")
					assert.True(t, math.IsNaN(float64(got.offsetBackprop[9])), "offset_backprop of an infinite dy's channel")
					assert.False(t, math.IsNaN(float64(got.offsetBackprop[2])), "offset_backprop where y is NaN")
					restore := kernels.WithoutMaskedPlanes()
					kernels.ResetSplitStats()
					blocked := runEx(t, m, in)
					restore()
					require.Zero(t, kernels.MaskedPlanes(), "the masked plane loops, turned off")
					requireSameBits(t, "x_backprop, dz in blocks and in registers", got.dx, blocked.dx)
					requireSameBits(t, "scale_backprop, dz in blocks and in registers", got.scaleBackprop, blocked.scaleBackprop)
					requireSameBits(t, "offset_backprop, dz in blocks and in registers", got.offsetBackprop, blocked.offsetBackprop)
					if cores == 1 {
						first = got
					} else {
						requireSameBits(t, "x_backprop on four cores and one", got.dx, first.dx)
						requireSameBits(t, "scale_backprop on four cores and one", got.scaleBackprop, first.scaleBackprop)
					}
				})
			}
		}
	}
}
