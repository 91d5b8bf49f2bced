package kernels

import "sync/atomic"

// A channels-first training gradient large enough to be cut into ranges
// runs by units of whole channels instead: each unit's channels are summed
// over their N runs, their coefficients formed, and their x_backprop written
// while the unit's dy and x are still in cache. Memory then serves dy and x
// once (8 bytes a float32 element, and 4 for x_backprop streamed), where two
// passes over a tensor larger than the cache read them twice. Each channel's
// sums are formed by one goroutine, in an order set by the dims and the
// range size alone, so the result does not depend on how many goroutines
// ran.
//
// A unit has about a range's elements (minElementsPerWorker, 2^18 float32):
// 2 MiB of dy and x, which stay in L2 or L3 between the unit's two passes (units
// sized for L2 make runs too short for the prefetcher to follow well).
// BenchmarkTrainingGradByChannel chose the size; docs/performance.md has
// the figures.

// byChannelOn switches the by-channel form on (SetByChannel).
var byChannelOn atomic.Bool

func init() { byChannelOn.Store(true) }

// SetByChannel switches the by-channel form of channels-first training
// gradients on or off and returns the previous setting. It is for tests and
// benchmarks; the kernels read it on every call.
func SetByChannel(on bool) bool { return byChannelOn.Swap(on) }

// minUnitRun is the least length of a unit's contiguous runs (its channels'
// planes in one sample): shorter runs, each a jump of C·S elements from the
// last, defeat the hardware prefetcher.
const minUnitRun = 1024

// channelsPerUnit returns the number of channels of d's units: as many units
// as d has ranges' worth of elements (perRange), at least one channel each,
// all of one size but the last.
func channelsPerUnit[T Element](d Dims) int {
	C := int(d.C)
	per := perRange[T]()
	units := min(C, max(1, (d.Len()+per-1)/per))
	return (C + units - 1) / units
}

// byChannel reports whether TrainingGrad runs d by channel units.
func byChannel[T Element](d Dims) bool {
	if !byChannelOn.Load() || d.Layout != ChannelsFirst || rangesFor[T](d.Len()) == 1 {
		return false
	}
	return channelsPerUnit[T](d)*int(d.S) >= minUnitRun
}

// trainingByChannel is TrainingGrad by channel units; t has Mean set.
func trainingByChannel[T Element](s *scratch, g FusedGradArgs[T], t affine) {
	C := int(g.Dims.C)
	sums := s.float64s(2 * C)
	job := &byChannelJob[T]{g: g, t: t.withFloat32(s), sumDy: sums[:C:C], sumDyXc: sums[C:], per: channelsPerUnit[T](g.Dims)}
	if streams(g.Dims, g.YBackprop, g.X, g.XBackprop) {
		job.t.f32.Stream = true
	}
	units := (C + job.per - 1) / job.per
	parallel(units, units, 1, false, func(_, u, _ int) { job.run(u) })
}

// byChannelJob is trainingByChannel's work, in units of per channels.
type byChannelJob[T Element] struct {
	g              FusedGradArgs[T]
	t              affine
	sumDy, sumDyXc []float64
	per            int
}

// run computes the gradient of unit u's channels.
func (j *byChannelJob[T]) run(u int) {
	d := j.g.Dims
	N, C, S := int(d.N), int(d.C), int(d.S)
	c0, c1 := u*j.per, min(C, (u+1)*j.per)
	dy, x, dx := j.g.YBackprop, j.g.X, j.g.XBackprop
	a, b, mean := j.sumDy, j.sumDyXc, j.t.Mean
	for n := range N {
		forBlocks((n*C+c0)*S, (n*C+c1)*S, blockLen, dy, x, nil,
			func(off int, dy, x, _ []float32) { channelSums(d, off, dy, x, mean, a, b) },
			func(off int, dy, x, _ []float64) { channelSums(d, off, dy, x, mean, a, b) })
	}
	j.g.coefficients(j.t, a, b, c0, c1)
	j.t.round32(c0, c1)
	t := j.t
	for n := range N {
		forBlocks((n*C+c0)*S, (n*C+c1)*S, blockLen, dy, x, dx,
			func(off int, dy, x, dx []float32) { applyAffine(d, off, t, dy, x, dx) },
			func(off int, dy, x, dx []float64) { applyAffine(d, off, t, dy, x, dx) })
	}
	if t.f32 != nil && t.f32.Stream {
		simdFence() // before parallel reports the unit done (see applyJob.run)
	}
}
