package kernels

import "fmt"

// FusedGradExArgs are the arguments of FusedBatchNormGradEx: FusedGradArgs'
// and the output y of the activation that followed the batch norm. Inputs
// are read only; outputs are fully overwritten. XBackprop may be YBackprop
// or X itself (see the package doc).
type FusedGradExArgs[T Element] struct {
	Dims Dims
	// YBackprop, X and Y have Dims.Len() elements in Dims.Layout: the
	// gradient of the activation's output, the batch norm's input and the
	// activation's output.
	YBackprop, X, Y []T
	// Scale, ReserveSpace1 and ReserveSpace2 have Dims.C elements, as
	// FusedGradArgs' (the mean μ and the variance σ²).
	Scale, ReserveSpace1, ReserveSpace2 []float32
	// ReserveSpace3 and Offset are what cuDNN's gradient takes; the kernel
	// reads neither.
	ReserveSpace3, Offset []float32
	Epsilon               float32
	// ActivationMode is the activation: Identity, Relu or Relu6.
	ActivationMode string
	// NumSideInputs is 1 where SideInputBackprop is asked for, else 0.
	NumSideInputs int64
	// IsTraining says which gradient of dz is computed: TrainingGrad's or
	// InferenceGrad's.
	IsTraining bool
	// XBackprop has Dims.Len() elements; ScaleBackprop and OffsetBackprop
	// Dims.C. SideInputBackprop has Dims.Len() elements where NumSideInputs
	// is 1, and is nil otherwise.
	XBackprop                     []T
	ScaleBackprop, OffsetBackprop []float32
	SideInputBackprop             []T
}

// activation is an activation mode: the bounds of y outside which its
// derivative is 0 (Identity none).
type activation struct {
	identity bool
	upper    bool // Relu6: 0 < y < 6; Relu: 0 < y
}

// activationOf returns the activation called mode. It panics on another
// than Identity, Relu and Relu6.
func activationOf(mode string) activation {
	switch mode {
	case "Identity":
		return activation{identity: true}
	case "Relu":
		return activation{}
	case "Relu6":
		return activation{upper: true}
	}
	panic(fmt.Sprintf("kernels: activation mode %q, want Identity, Relu or Relu6", mode))
}

// FusedBatchNormGradEx computes the gradient of batch normalization fused
// with its activation's. With y the activation's output, its gradient
//
//	dz = dy · m,  m = 1 where 0 < y (Relu), 0 < y < 6 (Relu6), always (Identity); else 0
//
// is what stock's ReluGrad and Relu6Grad compute from y (dy·0 is NaN where
// dy is NaN or infinite, as theirs), and the outputs are FusedBatchNormGrad's
// of dz (TrainingGrad's where g.IsTraining, InferenceGrad's otherwise),
// with side_input_backprop = dz, the gradient of a side input added before
// the activation. It panics if slice lengths disagree with Dims, or on
// another activation mode.
func FusedBatchNormGradEx[T Element](g FusedGradExArgs[T]) {
	act := activationOf(g.ActivationMode)
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X, g.Y, g.XBackprop},
		[][]float32{g.Scale, g.ReserveSpace1, g.ReserveSpace2, g.Offset, g.ScaleBackprop, g.OffsetBackprop})
	if g.NumSideInputs > 0 {
		checkLengths(g.Dims, [][]T{g.SideInputBackprop}, [][]float32{})
	}
	dz := g.SideInputBackprop
	if dz == nil {
		dz = make([]T, g.Dims.Len())
	}
	forBlocks(0, len(dz), blockLen, g.YBackprop, g.Y, dz,
		func(_ int, dy, y, dz []float32) { maskGrad(act, dz, dy, y) },
		func(_ int, dy, y, dz []float64) { maskGrad(act, dz, dy, y) })
	FusedBatchNormGrad(FusedGradArgs[T]{Dims: g.Dims, YBackprop: dz, X: g.X, Scale: g.Scale,
		ReserveSpace1: g.ReserveSpace1, ReserveSpace2: g.ReserveSpace2, Epsilon: g.Epsilon, IsTraining: g.IsTraining,
		XBackprop: g.XBackprop, ScaleBackprop: g.ScaleBackprop, OffsetBackprop: g.OffsetBackprop})
}

// maskGrad writes dz = dy·m, the activation a's gradient from its output
// y. Multiplying by 1 or 0 is exact, so Half and BFloat16 are masked as
// the float32 they widen to.
func maskGrad[F native](a activation, dz, dy, y []F) {
	for i := range dz {
		m := F(1)
		if !a.identity && !(y[i] > 0 && (!a.upper || y[i] < 6)) {
			m = 0
		}
		dz[i] = dy[i] * m
	}
}
