// Package tolerance is the one home, for gobn's Go tests, of the bounds
// within which an output matches stock TensorFlow or the float64 reference
// (docs/design.md): an element passes when
//
//	|got − want| ≤ Atol·max|want| + Rtol·|want|
//
// with max|want| over the output. cmd/genpy writes it for Python, as
// python/gobn/_tolerance_gen.py.
package tolerance

import "math"

// Bound is one dtype's relative and absolute tolerance.
type Bound struct {
	Rtol, Atol float64
}

// At returns the largest |got − want| b allows for the element want of an
// output whose largest |want| is M: Atol·M + Rtol·|want|.
func (b Bound) At(M, want float64) float64 {
	return b.Atol*M + b.Rtol*math.Abs(want)
}

// ByDType maps TensorFlow's dtype names to their bounds.
var ByDType = map[string]Bound{
	"float":    {Rtol: 1e-4, Atol: 1e-5},
	"half":     {Rtol: 2e-3, Atol: 2e-3},
	"bfloat16": {Rtol: 1.6e-2, Atol: 1.6e-2},
	"double":   {Rtol: 1e-12, Atol: 1e-12},
}
