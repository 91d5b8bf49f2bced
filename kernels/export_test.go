package kernels

// Hooks for the external tests of the vector conversions.

// Widen converts src to float32 into dst, as the kernels do for a block.
func Widen[T Element](dst []float32, src []T) { widen(dst, src) }

// Narrow rounds src into dst, as the kernels do for a block.
func Narrow[T Element](dst []T, src []float32) { narrow(dst, src) }

// The tests size their parallel cases for splits from 2·2^16 elements, so
// that the race detector and the fuzzers reach the goroutine paths quickly.
func init() { SetMinElementsPerWorker(1 << 16) }

// AVX512Available reports whether the float32 loops can take their AVX-512
// forms (GOEXPERIMENT=simd on a CPU with AVX-512).
func AVX512Available() bool { return canAVX512() }

// SelectAVX512 selects the AVX-512 forms of the float32 loops, or the AVX2
// ones.
func SelectAVX512(on bool) { selectLoops(on) }

// AVX512Selected reports whether the AVX-512 forms are the loops in use.
func AVX512Selected() bool { return avx512InUse() }

// Streams reports whether TrainingGrad, with the current tuning
// (SetMinStreamElements), writes dx with non-temporal stores.
func Streams[T Element](d Dims, dy, x, dx []T) bool { return TrainingPlan(d, dy, x, dx).Stream }

// ByChannel reports whether TrainingGrad runs d by channel units.
func ByChannel[T Element](d Dims) bool {
	return TrainingPlan[T](d, nil, nil, nil).Form == FormByChannel
}

// SetUnitElems sets the tuning's UnitElems (0: from the L2) and returns the
// previous value.
func SetUnitElems(n int) int {
	return setTuningField(func(t *Tuning) *int { return &t.UnitElems }, n)
}

// SweepsByChannel reports whether InferenceGrad over d runs by channel
// units (sweepByChannel).
func SweepsByChannel[T Element](d Dims) bool {
	return plan[T](d, jobSweep, nil, nil, nil).Form == FormByChannel
}

// TrainingPlan returns the plan of TrainingGrad over d's dy, x and dx, on
// the current machine with the current tuning; InferencePlan InferenceGrad's.
func TrainingPlan[T Element](d Dims, dy, x, dx []T) Plan { return plan(d, jobTraining, dy, x, dx) }
func InferencePlan[T Element](d Dims) Plan               { return plan[T](d, jobSweep, nil, nil, nil) }

// SetMachine has the kernels plan for m and returns the machine they
// planned for before: a test runs plans of more cores than it has.
func SetMachine(m Machine) Machine { return setMachine(m) }

// ResetSplitStats zeroes what SplitStats reports, so that a test reads its
// own calls' splits.
func ResetSplitStats() {
	splits.calls.Store(0)
	splits.maxRanges.Store(0)
	splits.maxWorkers.Store(0)
	splits.affine.Store(0)
	splits.folds.Store(0)
	splits.planeLanes.Store(0)
	splits.channelLanes.Store(0)
	splits.maskBits.Store(0)
	splits.maskRegisters.Store(0)
	splits.maskStreamed.Store(0)
	splits.maskBF16Rows.Store(0)
	splits.maskPlanes.Store(0)
	splits.ranges.Store(0)
	splits.helperRanges.Store(0)
	splits.waitNanos.Store(0)
}

// AffineSplits reports how many calls since ResetSplitStats ran a pass
// with each range on the worker that ran it in the first (pass.affine).
func AffineSplits() uint64 { return splits.affine.Load() }

// FoldSplits reports how many calls since ResetSplitStats added up their
// chunks' partial sums in more than one range of channels (Plan.Folds).
func FoldSplits() uint64 { return splits.folds.Load() }

// PlaneLanesInUse reports whether by-channel units sum float32 planes in
// lanes (simdPlaneLanes: the AVX2 or AVX-512 loops).
func PlaneLanesInUse() bool { return simdPlaneLanes != nil }

// PlaneLaneUnits returns how many by-channel units summed their planes in
// lanes (simdPlaneLanes) since ResetSplitStats.
func PlaneLaneUnits() uint64 { return splits.planeLanes.Load() }

// ChannelLanesInUse reports whether by-channel training units sum float32
// planes channel by channel (simdChannelLanes: the AVX-512 assembly).
func ChannelLanesInUse() bool { return simdChannelLanes != nil }

// ChannelLaneUnits returns how many by-channel units summed their float32
// planes channel by channel since ResetSplitStats.
func ChannelLaneUnits() uint64 { return splits.channelLanes.Load() }

// MaskBitGranules returns how many granules' mask bits FusedBatchNormGradEx's
// two-pass forms wrote since ResetSplitStats.
func MaskBitGranules() uint64 { return splits.maskBits.Load() }

// MaskedInRegisters returns how many pieces of FusedBatchNormGradEx's two
// passes had their dz formed in the vector loops since ResetSplitStats, and
// how many spans of rows of the second pass were streamed.
func MaskedInRegisters() (pieces, streamed uint64) {
	return splits.maskRegisters.Load(), splits.maskStreamed.Load()
}

// MaskedBFloat16Rows returns how many blocks of FusedBatchNormGradEx's
// bfloat16 rows had their dz formed in bfloat16 for the bfloat16 row loops
// since ResetSplitStats.
func MaskedBFloat16Rows() uint64 { return splits.maskBF16Rows.Load() }

// WithoutBFloat16MaskRows turns off the bfloat16 mask loops, so that
// FusedBatchNormGradEx's bfloat16 rows form dz in float32 blocks, and
// returns the function that turns them back on.
func WithoutBFloat16MaskRows() (restore func()) {
	m, u := simdMaskRowsBFloat16, simdUnmaskRowsBFloat16
	simdMaskRowsBFloat16, simdUnmaskRowsBFloat16 = nil, nil
	return func() { simdMaskRowsBFloat16, simdUnmaskRowsBFloat16 = m, u }
}

// MaskedPlanes returns how many blocks of FusedBatchNormGradEx's by-channel
// units had their dz formed in the masked plane loops since
// ResetSplitStats.
func MaskedPlanes() uint64 { return splits.maskPlanes.Load() }

// WithoutMaskedPlanes turns off the masked plane loops, so that
// FusedBatchNormGradEx's by-channel units form dz in blocks, and returns
// the function that turns them back on.
func WithoutMaskedPlanes() (restore func()) {
	s, a := simdMaskedPlaneLanes, simdMaskedApplyPlanes
	simdMaskedPlaneLanes, simdMaskedApplyPlanes = nil, nil
	return func() { simdMaskedPlaneLanes, simdMaskedApplyPlanes = s, a }
}

// MaskedPlanesAvailable reports whether the masked plane loops are in use.
func MaskedPlanesAvailable() bool { return simdMaskedPlaneLanes != nil }
