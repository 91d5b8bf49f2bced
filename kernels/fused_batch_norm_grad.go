package kernels

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
	// IsTraining says which gradient FusedBatchNormGrad computes:
	// TrainingGrad's or InferenceGrad's.
	IsTraining bool
	// XBackprop has Dims.Len() elements; ScaleBackprop and OffsetBackprop Dims.C.
	XBackprop                     []T
	ScaleBackprop, OffsetBackprop []float32
}

func (g FusedGradArgs[T]) check() {
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X, g.XBackprop},
		[][]float32{g.Scale, g.ReserveSpace1, g.ReserveSpace2, g.ScaleBackprop, g.OffsetBackprop})
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

// FusedBatchNormGrad computes the gradient of batch normalization the
// FusedBatchNormGrad family's ops compute: TrainingGrad's where
// g.IsTraining, InferenceGrad's otherwise.
func FusedBatchNormGrad[T Element](g FusedGradArgs[T]) {
	if g.IsTraining {
		TrainingGrad(g)
	} else {
		InferenceGrad(g)
	}
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
func TrainingGrad[T Element](g FusedGradArgs[T]) { trainingGrad(g, maskOf[T]{}) }

// trainingGrad is TrainingGrad of dy, or of the gradient o's mask forms
// from dy where the passes read it (FusedBatchNormGradEx).
func trainingGrad[T Element](g FusedGradArgs[T], o maskOf[T]) {
	if g.empty() {
		return
	}
	p := plan(g.Dims, jobTraining, g.YBackprop, g.X, g.XBackprop)
	s, mean, t := g.setup()
	defer s.release()
	m := o.in(s, p)
	switch {
	case p.Form == FormByChannel:
		trainingByChannel(s, p, g, t, m)
	case p.Workers > 1:
		twoPasses(s, p, g.YBackprop, g.X, g.XBackprop, mean, t, g.formOf(t), m)
	default: // the same passes on the calling goroutine, nothing on the heap
		splits.serial(p.Chunks)
		sums := newSums(s, p, g.YBackprop, g.X, mean)
		sums.job.mask = m
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}.serially()
		sums.fold()
		g.coefficients(t, sums.sumDy, sums.sumDyXc, 0, len(mean))
		apply := newApply(s, p, t, g.YBackprop, g.X, g.XBackprop)
		apply.mask = m
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
// the sums. t has Mean set. m, where not nil, forms the gradient the
// passes read in dy's place.
func twoPasses[T Element](s *scratch, p Plan, dy, x, dx []T, mean []float64, t affine,
	form func(sumDy, sumDyXc []float64, c0, c1 int), m *gradMask[T]) (sumDy, sumDyXc []float64) {
	sums := new(sumsPass[T])
	*sums = newSums(s, p, dy, x, mean)
	sums.job.mask = m
	apply := new(applyJob[T])
	first := pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}
	// The first pass's chunks, so that an affine pass finds its data where
	// it left it; last chunk first, as applyAll, where not affine.
	last := pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: apply.runRange, reverse: true, affine: p.Affine,
		before: func() { *apply = newApply(s, p, t, dy, x, dx); apply.mask = m }}
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
func InferenceGrad[T Element](g FusedGradArgs[T]) { inferenceGrad(g, maskOf[T]{}) }

// inferenceGrad is InferenceGrad of dy, or of the gradient o's mask forms
// from dy where the passes read it (FusedBatchNormGradEx).
func inferenceGrad[T Element](g FusedGradArgs[T], o maskOf[T]) {
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
	m := o.in(s, p)
	var sumDy, sumDyXc []float64
	if p.Form == FormByChannel {
		sumDy, sumDyXc = sweepByChannel(s, p, g, t, m)
	} else {
		sumDy, sumDyXc = sweep(s, p, g.YBackprop, g.X, g.XBackprop, mean, &t, m)
	}
	for c := range mean {
		g.OffsetBackprop[c] = float32(sumDy[c])
		g.ScaleBackprop[c] = float32(sumDyXc[c] * inv[c])
	}
}
