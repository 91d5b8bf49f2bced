package opdef

import "fmt"

// CheckStaticShapes applies, at graph-construction time, the rules that can be
// checked on partially known shapes: dims[i] is input i's shape with -1 for an
// unknown dimension, or nil when its rank is unknown. Ranks are checked by the
// caller (TensorFlow's shape context). It reports only what is certainly wrong.
func (op Op) CheckStaticShapes(dims [][]int64) error {
	a, b := 1, 0 // x, y_backprop
	if op.Kind == GlobalNormalizationGrad {
		a, b = 0, 4 // t, backprop
	}
	if err := compatible(op.Inputs[a].Name, dims[a], op.Inputs[b].Name, dims[b]); err != nil {
		return err
	}
	if op.Kind != GlobalNormalizationGrad || dims[0] == nil {
		return nil // the channel axis of the fused ops depends on data_format
	}
	channels := dims[0][len(dims[0])-1]
	for i := 1; i <= 3; i++ {
		if dims[i] == nil || len(dims[i]) != 1 || dims[i][0] < 0 || channels < 0 {
			continue
		}
		if dims[i][0] != channels {
			return invalid("%s must have the same number of elements as the channels of t, got %d and %d",
				op.Inputs[i].Name, dims[i][0], channels)
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
