package cuda

import "errors"

// FusedGrad runs the FusedBatchNormGrad family's gradient (training or
// inference) on the device that holds the tensors.
func FusedGrad(a FusedGradArgs, pl Placement) error {
	f := a.facts()
	p, err := a.plan(f)
	if err != nil {
		return err
	}
	if p.fallback {
		fallbacks.Add(1)
	}
	err = execute(p, pl, a.anchor())
	if errors.Is(err, errNoCooperative) {
		// The persistent kernel could not run (nothing ran): the three
		// launches, counted as a fallback.
		fallbacks.Add(1)
		f.persistent = false
		if p, err = a.plan(f); err != nil {
			return err
		}
		err = execute(p, pl, a.anchor())
	}
	return err
}

// errNoCooperative: the persistent kernel's cooperative launch cannot be
// made: the device refused it, or the stream cannot have a grid-barrier
// word of its own (barrierKey, barrierFor).
var errNoCooperative = errors.New("gobn: the persistent kernel cannot be launched")

// anchor is the address that tells the call's device.
func (a FusedGradArgs) anchor() Ptr { return anchor(a.XBackprop, a.ScaleBackprop) }

// facts returns the facts its plan needs: the device's only where the
// persistent kernel could run (switched on, training), so the default path
// asks the driver nothing more.
func (a FusedGradArgs) facts() gpuFacts {
	if !a.Training || !Persistent() {
		return gpuFacts{}
	}
	return factsOf(a.anchor())
}

// GlobalNormalizationGrad runs BatchNormWithGlobalNormalizationGrad.
func GlobalNormalizationGrad(a GlobalNormalizationArgs, pl Placement) error {
	p, err := a.plan(gpuFacts{})
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.DX, a.DB))
}

// GradReduce runs BatchNormGradReduce's sums.
func GradReduce(a GradReduceArgs, pl Placement) error {
	p, err := a.plan(gpuFacts{})
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.SumDy))
}

// GradApply runs BatchNormGradApply.
func GradApply(a GradApplyArgs, pl Placement) error {
	p, err := a.plan(gpuFacts{})
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.XBackprop))
}

// anchor returns the first non-zero address: one the call writes, which
// tells the device.
func anchor(ptrs ...Ptr) Ptr {
	for _, p := range ptrs {
		if p != 0 {
			return p
		}
	}
	return 0
}
