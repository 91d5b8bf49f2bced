package main

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The CPU entries in plain Go: host pointers become slices of the lengths
// Dims gives, and gobn's kernels run on them.

// Element codes, as cuda.DType numbers them.
const (
	dtFloat32  = int(cuda.Float32)
	dtHalf     = int(cuda.Float16)
	dtBFloat16 = int(cuda.BFloat16)
)

// makeDims validates a layout code and sizes.
func makeDims(layout int, n, c, s int64) (kernels.Dims, error) {
	if layout != int(kernels.ChannelsLast) && layout != int(kernels.ChannelsFirst) {
		return kernels.Dims{}, fmt.Errorf("layout code %d, want 0 (channels last) or 1 (channels first)", layout)
	}
	if n < 0 || c < 0 || s < 0 {
		return kernels.Dims{}, fmt.Errorf("negative size N=%d C=%d S=%d", n, c, s)
	}
	if n != 0 && c != 0 && s != 0 && (n > math.MaxInt64/c || n*c > math.MaxInt64/s) {
		return kernels.Dims{}, fmt.Errorf("size N=%d C=%d S=%d overflows", n, c, s)
	}
	return kernels.Dims{N: n, C: c, S: s, Layout: kernels.Layout(layout)}, nil
}

// host returns the n elements of type E at p. A tensor of no elements may
// have a nil p.
func host[E any](p unsafe.Pointer, n int) []E {
	if n == 0 {
		return []E{}
	}
	if p == nil {
		panic(fmt.Sprintf("null pointer for a tensor of %d elements", n))
	}
	return unsafe.Slice((*E)(p), n)
}

// byDType runs the float32, half or bfloat16 form of a CPU call as dtype
// code dtype says; a nil form is a dtype the op has no GPU kernel for.
func byDType(dtype int, f32, half, bf16 func()) error {
	forms := map[int]func(){dtFloat32: f32, dtHalf: half, dtBFloat16: bf16}
	if form := forms[dtype]; form != nil {
		form()
		return nil
	}
	return fmt.Errorf("dtype code %d: no GPU kernel of this op takes it", dtype)
}

// fusedHost holds the fused family's host pointers, in argument order.
type fusedHost struct {
	YBackprop, X, Scale, Reserve1, Reserve2, XBackprop, ScaleBackprop, OffsetBackprop unsafe.Pointer
}

func fusedCPU(dtype int, d kernels.Dims, training bool, epsilon float32, h fusedHost) error {
	return byDType(dtype, func() { fusedCPUOf[float32](d, training, epsilon, h) },
		func() { fusedCPUOf[kernels.Half](d, training, epsilon, h) },
		func() { fusedCPUOf[kernels.BFloat16](d, training, epsilon, h) })
}

func fusedCPUOf[T kernels.Element](d kernels.Dims, training bool, epsilon float32, h fusedHost) {
	n, C := d.Len(), int(d.C)
	g := kernels.FusedGradArgs[T]{
		Dims:      d,
		YBackprop: host[T](h.YBackprop, n), X: host[T](h.X, n),
		Scale: host[float32](h.Scale, C), ReserveSpace1: host[float32](h.Reserve1, C),
		ReserveSpace2: host[float32](h.Reserve2, C), Epsilon: epsilon,
		XBackprop:     host[T](h.XBackprop, n),
		ScaleBackprop: host[float32](h.ScaleBackprop, C), OffsetBackprop: host[float32](h.OffsetBackprop, C),
	}
	if training {
		kernels.TrainingGrad(g)
	} else {
		kernels.InferenceGrad(g)
	}
}

// globalHost holds BatchNormWithGlobalNormalizationGrad's host pointers.
type globalHost struct {
	T, M, V, Gamma, Backprop, DX, DM, DV, DB, DG unsafe.Pointer
}

func globalCPU(dtype int, d kernels.Dims, scaleAfter bool, epsilon float32, h globalHost) error {
	return byDType(dtype, func() { globalCPUOf[float32](d, scaleAfter, epsilon, h) },
		func() { globalCPUOf[kernels.Half](d, scaleAfter, epsilon, h) }, nil)
}

func globalCPUOf[T kernels.Element](d kernels.Dims, scaleAfter bool, epsilon float32, h globalHost) {
	n, C := d.Len(), int(d.C)
	kernels.GlobalNormalizationGrad(kernels.GlobalNormalizationArgs[T]{
		Dims: d,
		T:    host[T](h.T, n), Backprop: host[T](h.Backprop, n),
		M: host[T](h.M, C), V: host[T](h.V, C), Gamma: host[T](h.Gamma, C),
		VarianceEpsilon: epsilon, ScaleAfterNormalization: scaleAfter,
		DX: host[T](h.DX, n),
		DM: host[T](h.DM, C), DV: host[T](h.DV, C), DB: host[T](h.DB, C), DG: host[T](h.DG, C),
	})
}

// reduceHost holds BatchNormGradReduce's host pointers.
type reduceHost struct {
	YBackprop, X, Mean, SumDy, SumDyXmu unsafe.Pointer
}

func reduceCPU(dtype int, d kernels.Dims, h reduceHost) error {
	return byDType(dtype, func() { reduceCPUOf[float32](d, h) },
		func() { reduceCPUOf[kernels.Half](d, h) }, func() { reduceCPUOf[kernels.BFloat16](d, h) })
}

func reduceCPUOf[T kernels.Element](d kernels.Dims, h reduceHost) {
	n, C := d.Len(), int(d.C)
	kernels.GradReduce(kernels.GradReduceArgs[T]{
		Dims:      d,
		YBackprop: host[T](h.YBackprop, n), X: host[T](h.X, n), Mean: host[float32](h.Mean, C),
		SumDy: host[float32](h.SumDy, C), SumDyXmu: host[float32](h.SumDyXmu, C),
	})
}

// applyHost holds BatchNormGradApply's host pointers.
type applyHost struct {
	YBackprop, X, Scale, Mean, Variance, SumDy, SumDyXmu, XBackprop unsafe.Pointer
}

func applyCPU(dtype int, d kernels.Dims, count int64, epsilon float32, h applyHost) error {
	return byDType(dtype, func() { applyCPUOf[float32](d, count, epsilon, h) },
		func() { applyCPUOf[kernels.Half](d, count, epsilon, h) },
		func() { applyCPUOf[kernels.BFloat16](d, count, epsilon, h) })
}

func applyCPUOf[T kernels.Element](d kernels.Dims, count int64, epsilon float32, h applyHost) {
	n, C := d.Len(), int(d.C)
	kernels.GradApply(kernels.GradApplyArgs[T]{
		Dims:      d,
		YBackprop: host[T](h.YBackprop, n), X: host[T](h.X, n),
		Scale: host[float32](h.Scale, C), Mean: host[float32](h.Mean, C), Variance: host[float32](h.Variance, C),
		SumDy: host[float32](h.SumDy, C), SumDyXmu: host[float32](h.SumDyXmu, C),
		Count: count, Epsilon: epsilon,
		XBackprop: host[T](h.XBackprop, n),
	})
}

// launchesJSON returns cuda.Launches() as a JSON object.
func launchesJSON() (string, error) {
	m := cuda.Launches()
	if m == nil {
		m = map[string]uint64{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// infoJSON returns the facts of this build as a JSON object.
func infoJSON() string {
	b, _ := json.Marshal(map[string]any{
		"go":         runtime.Version(),
		"cuda_tag":   cuda.Built,
		"simd":       kernels.SIMD(),
		"gomaxprocs": runtime.GOMAXPROCS(0),
		"goarch":     runtime.GOARCH,
		// the persistent kernel's switch, and its fallbacks so far
		"persistent": cuda.Persistent(),
		"fallbacks":  cuda.Fallbacks(),
	})
	return string(b)
}
