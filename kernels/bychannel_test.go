package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

// Channels-first training gradients that the kernels cut into ranges run by
// units of whole channels (see kernels.SetByChannel). These tests run each
// such case both ways against the float64 reference, and check where the
// by-channel form applies.

// byChannelCases are channels-first cases of two chunks or more (2^16
// float32 elements a chunk) that the tests' 2^16 elements a worker
// (export_test.go) split on two cores or more: units of one channel, of
// several with a shorter last one, runs with a scalar tail, and runs that
// are whole vectors.
var byChannelCases = []shapeCase{
	{"C=4 units of one channel", 1, 4, 40000},
	{"C=5 odd runs", 7, 5, 5003},
	{"C=37 last unit short", 4, 37, 1000},
	{"C=64 runs of 4112", 2, 64, 4112},
	{"C=1024", 1, 1024, 150},
	{"C=512 planes of 7x7", 8, 512, 49},
}

func testTrainingGradByChannel[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(53, uint64(len(typeName[T]()))))
	for _, sc := range byChannelCases {
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/byChannel=%v", sc.name, on), func(t *testing.T) {
				defer kernels.SetByChannel(kernels.SetByChannel(on))
				in := newFusedInputs[T](rng, true, kernels.ChannelsFirst, sc)
				require.Equal(t, on, kernels.ByChannel[T](in.dims))
				kernels.ResetSplitStats()
				checkFused(t, true, in, 1e-5)
				if _, wide := any(in.x).([]float64); on && !wide && kernels.PlaneLanesInUse() {
					require.NotZero(t, kernels.PlaneLaneUnits(), "the units' planes were not summed in lanes")
				}
				if _, f32 := any(in.x).([]float32); on && f32 && kernels.ChannelLanesInUse() {
					require.NotZero(t, kernels.ChannelLaneUnits(), "the units' planes were not summed channel by channel")
				}
			})
		}
	}
}

func TestTrainingGradByChannel(t *testing.T) {
	eachElement(t, testTrainingGradByChannel[float32], testTrainingGradByChannel[float64], testTrainingGradByChannel[kernels.Half], testTrainingGradByChannel[kernels.BFloat16])
}

// The inference gradient's sweep by channel units (sweepByChannel) on the
// same cases, both ways, against the float64 reference
// (TestFusedGradIndependentOfWorkers holds its bits whatever the workers).
func testInferenceGradByChannel[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(59, uint64(len(typeName[T]()))))
	for _, sc := range byChannelCases {
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/byChannel=%v", sc.name, on), func(t *testing.T) {
				defer kernels.SetByChannel(kernels.SetByChannel(on))
				in := newFusedInputs[T](rng, false, kernels.ChannelsFirst, sc)
				require.Equal(t, on, kernels.SweepsByChannel[T](in.dims))
				kernels.ResetSplitStats()
				checkFused(t, false, in, 1e-5)
				if _, wide := any(in.x).([]float64); on && !wide && kernels.PlaneLanesInUse() {
					require.NotZero(t, kernels.PlaneLaneUnits(), "the units' planes were not summed in lanes")
				}
			})
		}
	}
}

func TestInferenceGradByChannel(t *testing.T) {
	eachElement(t, testInferenceGradByChannel[float32], testInferenceGradByChannel[float64], testInferenceGradByChannel[kernels.Half], testInferenceGradByChannel[kernels.BFloat16])
}

// TestByChannelOnlyWhere checks the gradients that keep the two passes over
// the whole tensor: channels last, one chunk, samples too short for a
// unit's runs, and channels for fewer units than chunks.
func TestByChannelOnlyWhere(t *testing.T) {
	first := func(N, C, S int64) kernels.Dims {
		return kernels.Dims{N: N, C: C, S: S, Layout: kernels.ChannelsFirst}
	}
	require.True(t, kernels.ByChannel[float32](first(2, 64, 4112)))
	require.True(t, kernels.ByChannel[kernels.Half](first(1, 64, 1100)), "half: ranges of half as many elements")
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"channels last", kernels.ByChannel[float32](kernels.Dims{N: 2, C: 64, S: 4112, Layout: kernels.ChannelsLast})},
		{"one range", kernels.ByChannel[float32](first(1, 64, 2047))},
		{"float32 of a half's range count", kernels.ByChannel[float32](first(1, 64, 1100))},
		// 256000 elements whose sample holds 1000 of a unit at most.
		{"samples of 1000", kernels.ByChannel[float32](first(256, 10, 100))},
		// One unit, or fewer than the chunks: the chunks share better.
		{"one channel", kernels.ByChannel[float32](first(3, 1, 50000))},
		{"3 units for 4 chunks", kernels.ByChannel[float32](first(1, 3, 90000))},
		{"empty", kernels.ByChannel[float32](first(0, 64, 4112))},
	} {
		require.False(t, c.ok, fmt.Sprintf("%s runs by channel", c.name))
	}
}

// The by-channel sums in float32 lanes (simdPlaneLanes, or simdChannelLanes
// where the AVX-512 assembly runs) stay within sumsBound
// against the float64 reference where the terms span twenty binary orders
// of magnitude and cancel: planes of 49 and planes longer than a block,
// whose runs fold their lanes more than once.
func TestByChannelSumsWithinBound(t *testing.T) {
	if !kernels.PlaneLanesInUse() {
		t.Skip("no vector loops here: the by-channel planes sum through channelSums (float64)")
	}
	rng := rand.New(rand.NewPCG(61, 62))
	for _, sc := range []shapeCase{{"7x7 planes", 8, 512, 49}, {"long planes", 1, 4, 40000}} {
		t.Run(sc.name, func(t *testing.T) {
			in := newFusedInputs[float32](rng, true, kernels.ChannelsFirst, sc)
			for i := range in.dy {
				in.dy[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(21)-10))
			}
			require.True(t, kernels.ByChannel[float32](in.dims))
			kernels.ResetSplitStats()
			_, scaleBackprop, offsetBackprop := runFused(t, true, in)
			require.NotZero(t, kernels.PlaneLaneUnits())
			if kernels.ChannelLanesInUse() {
				require.NotZero(t, kernels.ChannelLaneUnits(), "the units' planes were not summed channel by channel")
			}
			want, d := in.want(true), in.dims
			dyAbs, dyXcAbs := make([]float64, sc.C), make([]float64, sc.C)
			for i := range in.dy {
				c := channelOf(d, i)
				g := float64(in.dy[i])
				dyAbs[c] += math.Abs(g)
				dyXcAbs[c] += math.Abs(g * (float64(in.x[i]) - float64(in.mean[c])))
			}
			for c := range sc.C {
				dyXcAbs[c] /= math.Sqrt(float64(in.variance[c]) + float64(in.epsilon))
			}
			bound := sumsBound[float32](d, true)
			require.Greater(t, bound, 1e-12, "the lanes' bound")
			assertSums(t, "offset_backprop", offsetBackprop, want.OffsetBackprop, dyAbs, bound)
			assertSums(t, "scale_backprop", scaleBackprop, want.ScaleBackprop, dyXcAbs, bound)
		})
	}
}
