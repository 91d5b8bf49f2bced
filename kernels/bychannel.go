package kernels

import "unsafe"

// A channels-first training gradient of two chunks or more runs by units
// of whole channels instead (FormByChannel): each unit's channels are
// summed over their N runs, their coefficients formed, and their x_backprop
// written while the unit's dy and x are still in cache. Memory then serves
// dy and x once (8 bytes a float32 element, and 4 for x_backprop streamed),
// where two passes over a tensor larger than the cache read them twice. An
// inference gradient of that shape runs by the same units, summing each
// block and writing its x_backprop (A·dy) at once (sweepByChannel).
//
// Each channel's sums are formed by one goroutine over whole planes (a plane
// longer than a block in pieces that start at the plane's start), sample by
// sample, and its x_backprop in the same pieces; where the AVX-512 assembly
// runs, a float32 training unit's sums run channel by channel instead, over
// the channel's whole planes one sample after the other
// (simdChannelLanes). Either way the arithmetic is the same whatever the
// units, so the plan may size them by the cores and the caches and the
// result still does not depend on them nor on how many goroutines ran. A
// unit has at most an eighth of a core's L2 in bytes of one tensor
// (unitFor: its dy, x and x_backprop stay in L2 between its two passes),
// and there are units enough for every worker (unitsPerWorker).

// SetByChannel sets the tuning's ByChannel, which switches the by-channel
// form of channels-first gradients on or off, and returns the
// previous setting (tests and benchmarks).
func SetByChannel(on bool) bool {
	return setTuningField(func(t *Tuning) *bool { return &t.ByChannel }, on)
}

// minUnitRun is the least length of a unit's contiguous runs (its channels'
// planes in one sample): shorter runs, each a jump of C·S elements from the
// last, defeat the hardware prefetcher.
const minUnitRun = 1024

// trainingByChannel is TrainingGrad by channel units as plan p has them; t
// has Mean set. m, where not nil, forms the gradient the passes read in
// dy's place (FusedBatchNormGradEx), from y in both.
func trainingByChannel[T Element](s *scratch, p Plan, g FusedGradArgs[T], t affine, m *gradMask[T]) {
	byChannel(s, p, g, t, false, m)
}

// sweepByChannel is InferenceGrad's sweep by channel units as plan p has
// them: each unit's channels summed over their planes and their x_backprop
// written by t (scale only, its A set) block by block in the same pass, as
// sweep does by chunks. It returns the sums. m is as trainingByChannel's.
func sweepByChannel[T Element](s *scratch, p Plan, g FusedGradArgs[T], t affine, m *gradMask[T]) (sumDy, sumDyXc []float64) {
	return byChannel(s, p, g, t, true, m)
}

// byChannel runs g's gradient by channel units as plan p has them, the
// training form or, with sweep, the inference one, and returns the sums.
func byChannel[T Element](s *scratch, p Plan, g FusedGradArgs[T], t affine, sweep bool, m *gradMask[T]) (sumDy, sumDyXc []float64) {
	C := int(g.Dims.C)
	sums := s.float64s(2 * C)
	job := byChannelJob[T]{g: g, t: t.withFloat32(s), sumDy: sums[:C:C], sumDyXc: sums[C:], per: p.UnitChannels, blk: p.SumsBlock,
		sweep: sweep, mask: m}
	if job.t.f32 != nil {
		job.t.f32.Stream = p.Stream
	}
	if _, wide := any(g.X).([]float64); simdPlaneLanes != nil && job.t.f32 != nil && !wide {
		job.lanes = alignedLanes(s, C)
	}
	if p.Workers == 1 {
		splits.serial(p.Units)
		for u := range p.Units {
			job.run(u)
		}
		return job.sumDy, job.sumDyXc
	}
	shared := new(byChannelJob[T]) // only a job that helpers share is copied to the heap
	*shared = job
	parallel(crewOf(p), p.Units, p.Units, 1, false, func(_, u, _ int) { shared.run(u) })
	return job.sumDy, job.sumDyXc
}

// byChannelJob is byChannel's work, in units of per channels.
type byChannelJob[T Element] struct {
	g              FusedGradArgs[T]
	t              affine
	sumDy, sumDyXc []float64
	// lanes holds each channel's unreduced sums, planeLanes a channel,
	// where the float32 planes are summed by simdPlaneLanes (nil where
	// channelSums sums them).
	lanes    []float64
	per, blk int
	// sweep: the inference form, x_backprop written by t as the sums
	// are formed (sweepByChannel).
	sweep bool
	mask  *gradMask[T]
}

// planeLanes is the float64 lanes of a channel's sums in simdPlaneLanes:
// Σdy's eight, then Σdy·(x−mean)'s eight (an AVX-512 vector each; the
// AVX2 loop fills the first four of each);
// meanPad the float32s its means have past the last channel's, for a
// vector load of four from any channel's.
const (
	planeLanes = 16
	meanPad    = 3
)

// alignedLanes returns zeroed lanes for C channels that start on a 64-byte
// boundary, so that no channel's vector straddles two cache lines.
func alignedLanes(s *scratch, C int) []float64 {
	buf := s.float64s(planeLanes*C + 8)
	skip := int((64 - uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%64) % 64 / 8)
	return buf[skip : skip+planeLanes*C : skip+planeLanes*C]
}

// reducePlaneLanes adds channels [c0, c1)'s lanes up into sumDy and
// sumDyXc, in one order: lanes four apart, then pairs, then the two pairs.
func reducePlaneLanes(lanes []float64, c0, c1 int, sumDy, sumDyXc []float64) {
	for c := c0; c < c1; c++ {
		l := lanes[planeLanes*c : planeLanes*(c+1) : planeLanes*(c+1)]
		sumDy[c] += addLanes8(l[:8:8])
		sumDyXc[c] += addLanes8(l[8:])
	}
	splits.planeLanes.Add(1)
}

// addLanes8 adds up eight lanes as reducePlaneLanes orders them.
func addLanes8(l []float64) float64 {
	_ = l[7]
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

// run computes the gradient of unit u's channels.
func (j *byChannelJob[T]) run(u int) {
	d := j.g.Dims
	c0, c1 := u*j.per, min(int(d.C), (u+1)*j.per)
	dy, x, dx := j.g.YBackprop, j.g.X, j.g.XBackprop
	a, b, mean, lanes := j.sumDy, j.sumDyXc, j.t.Mean, j.lanes
	sums32 := func(off int, dy, x, _ []float32) { channelSums(d, off, dy, x, mean, a, b) }
	if lanes != nil {
		// The float32 means (exact: they are float32 inputs), and meanPad
		// more from their buffer's capacity (withFloat32).
		mean32 := j.t.f32.Mean[:len(j.t.f32.Mean)+meanPad]
		sums32 = func(off int, dy, x, _ []float32) { simdPlaneLanes(int(d.C), int(d.S), off, dy, x, mean32, lanes) }
	}
	bdy, fused := any(dy).([]BFloat16) // bfloat16 planes converted in the vector loops
	fused = fused && lanes != nil && simdPlaneLanesBFloat16 != nil && j.mask == nil
	var bx, bdx []BFloat16
	var mean32 []float32
	if fused {
		bx, bdx = any(x).([]BFloat16), any(dx).([]BFloat16)
		mean32 = j.t.f32.Mean[:len(j.t.f32.Mean)+meanPad]
	}
	t := j.t
	C, S := int(d.C), int(d.S)
	// FusedBatchNormGradEx's float32 planes with dz formed from y in the
	// plane loops (gradMask.planesInRegisters), y read again by the second
	// pass, from cache: in the blocks of the block path (gradMask.blocks),
	// whose bits they give.
	var maskedPlanes func(lo, hi, blk int, sums, apply bool)
	planeBlocks := 0 // counted once a unit (splits.maskPlanes), not on every block
	if j.mask.planesInRegisters(lanes, t) {
		dy32, x32, y32 := any(dy).([]float32), any(x).([]float32), any(j.mask.y).([]float32)
		dx32, _ := any(dx).([]float32)
		mean32 := t.f32.Mean[:len(t.f32.Mean)+meanPad]
		upper := j.mask.form.act.upper
		maskedPlanes = func(lo, hi, blk int, sums, apply bool) {
			blk = min(blk, maxBlockLen)
			for o := lo; o < hi; o += blk {
				e := min(o+blk, hi)
				if sums {
					simdMaskedPlaneLanes(C, S, o, dy32[o:e], x32[o:e], y32[o:e], mean32, lanes, upper)
				}
				if apply {
					simdMaskedApplyPlanes(C, S, o/S%C, o%S, t.f32, dy32[o:e], x32[o:e], y32[o:e], dx32[o:e], upper)
				}
				planeBlocks++
			}
		}
		defer func() { splits.maskPlanes.Add(uint64(planeBlocks)) }()
	}
	// A block's sums and dx, in the blocks forBlocks would convert. In
	// the sweep both run on each block; else the sums of every block of
	// the unit's channels come first, then their coefficients, then dx.
	fusedBlocks := func(lo, hi, blk int, sums, apply bool) {
		for o := lo; o < hi; o += blk {
			e := min(o+blk, hi)
			if sums {
				simdPlaneLanesBFloat16(C, S, o, bdy[o:e], bx[o:e], mean32, lanes)
			}
			if apply {
				simdApplyPlanesBFloat16(C, S, o/S%C, o%S, t.f32, bdy[o:e], bx[o:e], bdx[o:e])
			}
		}
	}
	apply32 := func(off int, dy, x, dx []float32) { applyAffine(d, off, t, dy, x, dx) }
	apply64 := func(off int, dy, x, dx []float64) { applyAffine(d, off, t, dy, x, dx) }
	sums64 := func(off int, dy, x, _ []float64) { channelSums(d, off, dy, x, mean, a, b) }
	sweep32 := func(off int, dy, x, dx []float32) { sums32(off, dy, x, nil); apply32(off, dy, x, dx) }
	sweep64 := func(off int, dy, x, dx []float64) { sums64(off, dy, x, nil); apply64(off, dy, x, dx) }
	if dy32, f32 := any(dy).([]float32); f32 && lanes != nil && simdChannelLanes != nil && j.mask == nil && !j.sweep {
		// The training form's float32 sums channel by channel, the
		// lanes widened every 16 vectors rather than at the end of every
		// plane: on 7x7 planes that widening had taken a third of the
		// sums' time.
		simdChannelLanes(int(d.N), C, S, c0, c1, dy32, any(x).([]float32), j.t.f32.Mean[:len(j.t.f32.Mean)+meanPad], lanes)
		splits.channelLanes.Add(1)
	} else {
		j.planes(c0, c1, func(lo, hi, blk int) {
			switch {
			case fused:
				fusedBlocks(lo, hi, blk, true, j.sweep)
			case maskedPlanes != nil:
				maskedPlanes(lo, hi, blk, true, j.sweep)
			case j.mask != nil && j.sweep:
				j.mask.blocks(lo, hi, blk, dy, x, dx, true, sweep32, sweep64)
			case j.mask != nil:
				j.mask.blocks(lo, hi, blk, dy, x, nil, false, sums32, sums64)
			case j.sweep:
				forBlocks(lo, hi, blk, dy, x, dx, sweep32, sweep64)
			default:
				forBlocks(lo, hi, blk, dy, x, nil, sums32, sums64)
			}
		})
	}
	if lanes != nil {
		reducePlaneLanes(lanes, c0, c1, a, b)
	}
	if j.sweep {
		return
	}
	j.g.coefficients(j.t, a, b, c0, c1)
	j.t.round32(c0, c1)
	j.planes(c0, c1, func(lo, hi, blk int) {
		switch {
		case fused:
			fusedBlocks(lo, hi, blk, false, true)
		case maskedPlanes != nil:
			maskedPlanes(lo, hi, blk, false, true)
		case j.mask != nil:
			j.mask.blocks(lo, hi, blk, dy, x, dx, true, apply32, apply64)
		default:
			forBlocks(lo, hi, blk, dy, x, dx, apply32, apply64)
		}
	})
	if t.f32 != nil && t.f32.Stream {
		simdFence() // before parallel reports the unit done (see applyJob.run)
	}
}

// planes calls each(lo, hi, blk) over the planes of channels [c0, c1),
// sample by sample, so that their blocks are whole planes, or pieces of a
// plane that start at its start: the vector loops then meet every element
// at the same place of its run (a run's scalar tail rounds differently
// from its vectors) whatever the unit.
func (j *byChannelJob[T]) planes(c0, c1 int, each func(lo, hi, blk int)) {
	C, S := int(j.g.Dims.C), int(j.g.Dims.S)
	for n := range int(j.g.Dims.N) {
		if S <= j.blk {
			each((n*C+c0)*S, (n*C+c1)*S, j.blk/S*S)
			continue
		}
		for c := c0; c < c1; c++ {
			each((n*C+c)*S, (n*C+c+1)*S, j.blk)
		}
	}
}
