package opdef

import (
	"fmt"
	"slices"
)

// CheckStaticShapes applies, at graph-construction time, the rules that can be
// checked on partially known shapes: dims[i] is input i's shape with -1 for an
// unknown dimension, or nil when its rank is unknown. Ranks are checked by the
// caller (TensorFlow's shape context). It reports only what is certainly
// wrong: the other inputs of the activation's ranks must have its shape
// (Check's rule 3), and, for an op without data_format, whose channels are
// last, the per-channel inputs must be sized as its channels (rule 5).
func (op Op) CheckStaticShapes(dims [][]int64) error {
	act := op.InputIndex(op.Activation)
	for i, in := range op.Inputs {
		if i == act || !slices.Equal(in.Ranks, op.Inputs[act].Ranks) {
			continue
		}
		if err := compatible(op.Inputs[act].Name, dims[act], in.Name, dims[i]); err != nil {
			return err
		}
	}
	if _, ok := op.Attr("data_format"); ok || dims[act] == nil {
		return nil // the fused ops' channel axis depends on data_format
	}
	channels := dims[act][len(dims[act])-1]
	for i, in := range op.Inputs {
		if !in.PerChannel() || dims[i] == nil || len(dims[i]) != 1 || dims[i][0] < 0 || channels < 0 {
			continue
		}
		if dims[i][0] != channels {
			return invalid("%s must have the same number of elements as the channels of %s, got %d and %d",
				in.Name, op.Inputs[act].Name, dims[i][0], channels)
		}
	}
	return nil
}

func compatible(nameA string, a []int64, nameB string, b []int64) error {
	if a == nil || b == nil {
		return nil
	}
	mismatch := len(a) != len(b)
	for i := 0; !mismatch && i < len(a); i++ {
		mismatch = a[i] >= 0 && b[i] >= 0 && a[i] != b[i]
	}
	if mismatch {
		return invalid("%s and %s must have same shape, but %s has shape %s and %s has shape %s",
			nameA, nameB, nameA, shapeOrUnknown(a), nameB, shapeOrUnknown(b))
	}
	return nil
}

func shapeOrUnknown(dims []int64) string {
	s := "["
	for i, d := range dims {
		if i > 0 {
			s += ","
		}
		if d < 0 {
			s += "?"
		} else {
			s += fmt.Sprint(d)
		}
	}
	return s + "]"
}
