package recipe

import (
	"os"
	"path/filepath"

	"github.com/gobn/gobn/opdef"
)

// Throwaway is an op of a kind gobn does not have, for the tests of what an
// op of a new kind needs: with what no op of gobn's has yet, an int attr
// with a minimum, a string attr of any value, an output that is a list of
// as many tensors as the int attr says, and a stock twin internal to
// TensorFlow.
var Throwaway = opdef.Op{
	Name: "Gobn>Throwaway", Stock: "_Throwaway", Kind: "Throwaway", Activation: "x",
	Inputs: []opdef.Arg{
		{Name: "y_backprop", Type: "T", Ranks: []int{4, 5}},
		{Name: "x", Type: "T", Ranks: []int{4, 5}},
		{Name: "scale", Type: "float", Ranks: []int{1}},
	},
	Outputs: []opdef.Arg{
		{Name: "x_backprop", Type: "T", Shape: opdef.ShapeRule{Like: 1}},
		{Name: "side_backprop", Type: "T", Shape: opdef.ShapeRule{Like: 1}, Number: "num_sides"},
	},
	Attrs: []opdef.Attr{
		{Name: "T", Kind: opdef.TypeAttr, Types: []opdef.DType{opdef.Half, opdef.Float}},
		{Name: "num_sides", Kind: opdef.IntAttr, Min: new(int64(0)), Default: int64(0)},
		{Name: "mode", Kind: opdef.StringAttr, Default: "Plain"},
		{Name: "data_format", Kind: opdef.StringAttr, Values: []string{opdef.NHWC, opdef.NCHW}, Default: opdef.NHWC},
	},
	Kernels:    []opdef.TypeBinding{{"T": opdef.Float}, {"T": opdef.Half}},
	GPUKernels: []opdef.TypeBinding{{"T": opdef.Float}, {"T": opdef.Half}},
}

// The fields of the args of Throwaway's kernels: the dims, T's type on the
// GPU, a field for each tensor and each attr the kernels take.
const (
	ThrowawayCPUFields = "Dims Dims\nYBackprop, X []T\nScale []float32\nMode string\nNumSides int64\nXBackprop, SideBackprop []T"
	ThrowawayGPUFields = "Dims kernels.Dims\nDType DType\nYBackprop, X, Scale Ptr\nMode string\nNumSides int64\nXBackprop, SideBackprop Ptr"
)

// WriteThrowawayKernels writes, under root, the sources of Throwaway's Go
// kernel and CUDA launch as the generators read them (parsed, not built),
// their args' fields those given.
func WriteThrowawayKernels(root, cpuFields, gpuFields string) error {
	for dir, src := range map[string]string{
		CPU.Dir: "package kernels\n\ntype ThrowawayArgs[T Element] struct {\n" + cpuFields + "\n}\n\n" +
			"func Throwaway[T Element](a ThrowawayArgs[T]) {}\n",
		GPU.Dir: "package cuda\n\ntype ThrowawayArgs struct {\n" + gpuFields + "\n}\n\n" +
			"func Throwaway(a ThrowawayArgs, pl Placement) error { return nil }\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, dir, "throwaway.go"), []byte(src), 0o644); err != nil {
			return err
		}
	}
	return nil
}
