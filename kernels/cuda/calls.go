package cuda

// FusedGrad runs the FusedBatchNormGrad family's gradient (training or
// inference) on the device that holds the tensors.
func FusedGrad(a FusedGradArgs, pl Placement) error {
	p, err := a.plan()
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.XBackprop, a.ScaleBackprop))
}

// GlobalNormalizationGrad runs BatchNormWithGlobalNormalizationGrad.
func GlobalNormalizationGrad(a GlobalNormalizationArgs, pl Placement) error {
	p, err := a.plan()
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.DX, a.DB))
}

// GradReduce runs BatchNormGradReduce's sums.
func GradReduce(a GradReduceArgs, pl Placement) error {
	p, err := a.plan()
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(a.SumDy))
}

// GradApply runs BatchNormGradApply.
func GradApply(a GradApplyArgs, pl Placement) error {
	p, err := a.plan()
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
