package kernels

import (
	"fmt"
	"math"
)

// FusedGradArgs are the arguments of the FusedBatchNormGrad family (V1, V2,
// V3). Inputs are read only; outputs are fully overwritten. XBackprop may be
// YBackprop or X itself (see the package doc).
type FusedGradArgs[T Element] struct {
	Dims Dims
	// YBackprop and X have Dims.Len() elements in Dims.Layout.
	YBackprop, X []T
	// Scale, ReserveSpace1 and ReserveSpace2 have Dims.C elements.
	// ReserveSpace1 is the mean μ: the batch mean when training, the population
	// mean in inference. ReserveSpace2 is the variance σ²: the biased batch
	// variance when training (as stock TensorFlow's CPU forward saves it), the
	// population variance in inference.
	Scale, ReserveSpace1, ReserveSpace2 []float32
	Epsilon                             float32
	// XBackprop has Dims.Len() elements; ScaleBackprop and OffsetBackprop Dims.C.
	XBackprop                     []T
	ScaleBackprop, OffsetBackprop []float32
}

func (g FusedGradArgs[T]) check() {
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X, g.XBackprop},
		[][]float32{g.Scale, g.ReserveSpace1, g.ReserveSpace2, g.ScaleBackprop, g.OffsetBackprop})
}

// checkLengths panics unless every activation slice has d.Len() elements and
// every per-channel slice d.C.
func checkLengths[A, P any](d Dims, activations [][]A, perChannel [][]P) {
	n, C := d.Len(), int(d.C)
	for _, a := range activations {
		if len(a) != n {
			panic(fmt.Sprintf("kernels: activation length %d, want %d", len(a), n))
		}
	}
	for _, p := range perChannel {
		if len(p) != C {
			panic(fmt.Sprintf("kernels: per-channel length %d, want %d", len(p), C))
		}
	}
}

// empty checks g and reports whether its tensors have no elements, having
// zeroed the 1-D outputs (as stock's, whatever the variance) if so.
func (g FusedGradArgs[T]) empty() bool {
	g.check()
	if g.Dims.PerChannel() > 0 {
		return false
	}
	clear(g.ScaleBackprop)
	clear(g.OffsetBackprop)
	return true
}

// TrainingGrad computes the gradient of training-mode batch normalization.
// With R = N·S elements per channel, c = 1/sqrt(σ²+ε) and sums over a channel:
//
//	offset_backprop = Σ dy
//	scale_backprop  = c · Σ dy·(x−μ)
//	x_backprop      = scale·c · (dy − Σdy/R − (x−μ)·c²·Σ dy·(x−μ) / R)
//
// which is applyAffine with A = scale·c, MeanDy = Σdy/R and
// B = −scale·c³·Σdy(x−μ)/R. Sums are accumulated and the coefficients formed
// in float64. With R = 0 the 1-D outputs are zero (as stock's, whatever the
// variance). It panics if slice lengths disagree with Dims.
func TrainingGrad[T Element](g FusedGradArgs[T]) {
	if g.empty() {
		return
	}
	p := plan(g.Dims, jobTraining, g.YBackprop, g.X, g.XBackprop)
	s, mean, t := g.setup()
	defer s.release()
	switch {
	case p.Form == FormByChannel:
		trainingByChannel(s, p, g, t)
	case p.Workers > 1:
		twoPasses(s, p, g.YBackprop, g.X, g.XBackprop, mean, t, g.formOf(t))
	default: // the same passes on the calling goroutine, nothing on the heap
		splits.serial(p.Chunks)
		sums := newSums(s, p, g.YBackprop, g.X, mean)
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}.serially()
		sums.fold()
		g.coefficients(t, sums.sumDy, sums.sumDyXc, 0, len(mean))
		apply := newApply(s, p, t, g.YBackprop, g.X, g.XBackprop)
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: apply.runRange, reverse: true}.serially()
	}
}

// setup returns scratch space for a call, which the caller releases, the
// saved mean in float64 and an affine transform about it.
func (g FusedGradArgs[T]) setup() (*scratch, []float64, affine) {
	s := getScratch()
	mean := toFloat64(s, g.ReserveSpace1)
	return s, mean, newAffine(s, mean)
}

// twoPasses sums the chunks of plan p, adds up their sums in p.Folds ranges
// of channels, then writes dx by t over the same chunks: passes with the
// same helpers (parallelPasses), each chunk of the last on the worker that
// summed it where the plan says (Plan.Affine). A fold of one range needs no
// pass of its own: the caller adds up the sums before the last pass, while
// the helpers wait at its gate. form, where not nil, sets t's coefficients
// of a range of channels from their sums once they are whole. It returns
// the sums. t has Mean set.
func twoPasses[T Element](s *scratch, p Plan, dy, x, dx []T, mean []float64, t affine,
	form func(sumDy, sumDyXc []float64, c0, c1 int)) (sumDy, sumDyXc []float64) {
	sums := new(sumsPass[T])
	*sums = newSums(s, p, dy, x, mean)
	apply := new(applyJob[T])
	first := pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}
	// The first pass's chunks, so that an affine pass finds its data where
	// it left it; last chunk first, as applyAll, where not affine.
	last := pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: apply.runRange, reverse: true, affine: p.Affine,
		before: func() { *apply = newApply(s, p, t, dy, x, dx) }}
	if p.Folds > 1 {
		parallelPasses(crewOf(p), first, sums.foldPass(p, form), last)
		return sums.sumDy, sums.sumDyXc
	}
	applyBefore := last.before
	last.before = func() {
		sums.fold()
		if form != nil {
			form(sums.sumDy, sums.sumDyXc, 0, len(sums.sumDy))
		}
		applyBefore()
	}
	parallelPasses(crewOf(p), first, last)
	return sums.sumDy, sums.sumDyXc
}

// formOf returns twoPasses' form of g's outputs and t's coefficients. (Its
// closure holds a copy of g: one that held TrainingGrad's own would move g
// to the heap on every call, those on the calling goroutine alone too.)
func (g FusedGradArgs[T]) formOf(t affine) func(sumDy, sumDyXc []float64, c0, c1 int) {
	return func(sumDy, sumDyXc []float64, c0, c1 int) { g.coefficients(t, sumDy, sumDyXc, c0, c1) }
}

// coefficients writes the 1-D outputs of channels [c0, c1) from their sums,
// and their x_backprop coefficients into t.
func (g FusedGradArgs[T]) coefficients(t affine, sumDy, sumDyXc []float64, c0, c1 int) {
	perR := 1 / float64(g.Dims.PerChannel())
	var invs [64]float64
	for lo := c0; lo < c1; lo += len(invs) {
		hi := min(c1, lo+len(invs))
		invStds(invs[:hi-lo], g.ReserveSpace2[lo:hi], g.Epsilon)
		for c := lo; c < hi; c++ {
			inv := invs[c-lo]
			g.OffsetBackprop[c] = float32(sumDy[c])
			g.ScaleBackprop[c] = float32(sumDyXc[c] * inv)
			k := float64(g.Scale[c]) * inv
			t.A[c] = k
			t.B[c] = -k * inv * inv * sumDyXc[c] * perR
			t.MeanDy[c] = sumDy[c] * perR
		}
	}
}

// InferenceGrad computes the gradient of inference-mode batch normalization,
// where μ and σ² are constants. With c = 1/sqrt(σ²+ε):
//
//	offset_backprop = Σ dy
//	scale_backprop  = c · Σ dy·(x−μ)
//	x_backprop      = dy · scale · c
//
// It panics if slice lengths disagree with Dims.
func InferenceGrad[T Element](g FusedGradArgs[T]) {
	if g.empty() {
		return
	}
	s, mean, t := g.setup()
	defer s.release()
	t.ScaleOnly = true // x_backprop does not involve x
	inv := s.float64s(len(mean))
	invStds(inv, g.ReserveSpace2, g.Epsilon)
	for c := range mean {
		t.A[c] = float64(g.Scale[c]) * inv[c]
	}
	// x_backprop does not depend on the sums: one pass can do both (sweep).
	p := plan(g.Dims, jobSweep, g.YBackprop, g.X, g.XBackprop)
	sumDy, sumDyXc := sweep(s, p, g.YBackprop, g.X, g.XBackprop, mean, &t)
	for c := range mean {
		g.OffsetBackprop[c] = float32(sumDy[c])
		g.ScaleBackprop[c] = float32(sumDyXc[c] * inv[c])
	}
}

// GlobalNormalizationArgs are the arguments of
// BatchNormWithGlobalNormalizationGrad. Dims.Layout must be ChannelsLast.
type GlobalNormalizationArgs[T Element] struct {
	Dims Dims
	// T (the op's input t) and Backprop have Dims.Len() elements.
	T, Backprop []T
	// M, V and Gamma (mean, variance, γ) have Dims.C elements.
	M, V, Gamma             []T
	VarianceEpsilon         float32
	ScaleAfterNormalization bool
	// DX has Dims.Len() elements, and may be T or Backprop itself (see the
	// package doc); DM, DV, DB and DG have Dims.C.
	DX, DM, DV, DB, DG []T
}

// GlobalNormalizationGrad computes the gradient of
// BatchNormWithGlobalNormalization. With s = 1/sqrt(v+ε), γ' = γ when
// scale_after_normalization and 1 otherwise, and sums over a channel:
//
//	db = Σ dy
//	dx = dy · s · γ'
//	dm = −db · s · γ'
//	dg = s · Σ dy·(t−m)            (0 without scale_after_normalization)
//	dv = −½ · s³ · γ' · Σ dy·(t−m)
//
// Sums and per-channel terms are formed in float64, whatever T is (stock
// TensorFlow sums in T, even half). It panics if slice lengths disagree with
// Dims or the layout is not ChannelsLast.
func GlobalNormalizationGrad[T Element](g GlobalNormalizationArgs[T]) {
	C := int(g.Dims.C)
	if g.Dims.Layout != ChannelsLast {
		panic("kernels: BatchNormWithGlobalNormalizationGrad is channels-last only")
	}
	checkLengths(g.Dims, [][]T{g.T, g.Backprop, g.DX}, [][]T{g.M, g.V, g.Gamma, g.DM, g.DV, g.DB, g.DG})
	sc := getScratch()
	defer sc.release()
	mean, variance, gamma := toFloat64(sc, g.M), toFloat64(sc, g.V), toFloat64(sc, g.Gamma)
	t := newAffine(sc, mean)
	t.ScaleOnly = true // dx does not involve t
	s := sc.float64s(C)
	eps := float64(g.VarianceEpsilon)
	for c := range C {
		s[c] = 1 / math.Sqrt(variance[c]+eps)
		t.A[c] = s[c]
		if g.ScaleAfterNormalization {
			t.A[c] *= gamma[c]
		}
	}
	// dx does not depend on the sums: one pass can do both (sweep).
	p := plan(g.Dims, jobSweep, g.Backprop, g.T, g.DX)
	sumDy, sumDyXc := sweep(sc, p, g.Backprop, g.T, g.DX, mean, &t)
	dm, dv, dg := sc.float64s(C), sc.float64s(C), sc.float64s(C)
	for c := range C {
		k := t.A[c]
		if g.ScaleAfterNormalization {
			dg[c] = s[c] * sumDyXc[c]
		}
		dm[c] = -sumDy[c] * k
		dv[c] = -0.5 * s[c] * s[c] * k * sumDyXc[c]
	}
	fromFloat64(sc, g.DB, sumDy)
	fromFloat64(sc, g.DM, dm)
	fromFloat64(sc, g.DV, dv)
	fromFloat64(sc, g.DG, dg)
}

// invStd returns 1/sqrt(variance+epsilon) in float64.
func invStd(variance, epsilon float32) float64 {
	return 1 / math.Sqrt(float64(variance)+float64(epsilon))
}

// invStds writes invStd(variance[i], epsilon) into dst[i]: with the vector
// loops four at a time (invStdsVector), which rounds alike, square root and
// division being exact to the last bit either way. Scalar square roots and
// divisions are most of a small gradient's time (BenchmarkTrainingGrad's
// smallest cases show it).
func invStds(dst []float64, variance []float32, epsilon float32) {
	for i := invStdsVector(dst, variance, epsilon); i < len(dst); i++ {
		dst[i] = invStd(variance[i], epsilon)
	}
}

func newAffine(s *scratch, mean []float64) affine {
	C := len(mean)
	buf := s.float64s(3 * C)
	return affine{A: buf[:C:C], B: buf[C : 2*C : 2*C], MeanDy: buf[2*C:], Mean: mean}
}
