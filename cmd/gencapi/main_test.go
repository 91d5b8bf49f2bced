package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// root is the repository, whose kernels' packages GenerateFamilies reads.
const root = "../.."

// TestGeneratedFilesAreCurrent fails when opdef or a kind's kernels changed
// without `go generate ./capi`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Files(root)
	require.NoError(t, err)
	for name, want := range files {
		require.NoError(t, genfile.Current("../../capi/"+name, want, "go generate ./capi"))
	}
}

// TestFamiliesRefuseDisagreement: one field serves every op of a family,
// so the generator refuses ops of a kind that name an arg differently at
// one position, shape an output differently, or type an input neither T
// nor one dtype everywhere.
func TestFamiliesRefuseDisagreement(t *testing.T) {
	v2, v3 := opdef.All[1], opdef.All[2]
	require.Equal(t, "Gobn>FusedBatchNormGradV3", v3.Name)
	renamed := v3
	renamed.Inputs = append([]opdef.Arg{{Name: "dy", Type: "T", Ranks: []int{4, 5}}}, v3.Inputs[1:]...)
	reshaped := v3
	reshaped.Outputs = append([]opdef.Arg{{Name: "x_backprop", Type: "T", Shape: opdef.ShapeRule{Like: 0}}}, v3.Outputs[1:]...)
	retyped := v3
	retyped.Inputs = append(append([]opdef.Arg(nil), v3.Inputs...)[:2], opdef.Arg{Name: "scale", Type: "T", Ranks: []int{1}})
	retyped.Inputs = append(retyped.Inputs, v3.Inputs[3:]...)
	for want, op := range map[string]opdef.Op{"disagree on arg 0": renamed, "disagree on the shape of x_backprop": reshaped,
		"scale has no one dtype": retyped} {
		_, err := GenerateFamilies([]opdef.Op{v2, op}, root)
		require.ErrorContains(t, err, want)
	}
	_, err := GenerateFamilies([]opdef.Op{v2, v3}, root)
	require.NoError(t, err)
}

// TestFamiliesRefuseDeviceCount: the generated method reads and writes a
// count (opdef.Arg.Count) on the host on every device, so a count must be
// an int64 scalar that the op keeps in host memory.
func TestFamiliesRefuseDeviceCount(t *testing.T) {
	for _, op := range opdef.All {
		if op.Kind != opdef.GradApply && op.Kind != opdef.GradReduce {
			continue
		}
		_, err := GenerateFamilies([]opdef.Op{op}, root)
		require.NoError(t, err, op.Name)
		op.HostMemory = nil
		_, err = GenerateFamilies([]opdef.Op{op}, root)
		require.ErrorContains(t, err, "the count count must be an int64 scalar in host memory", op.Name)
	}
}

// TestFamiliesRefuseUnknownElement: a tensor the kernels take is a view of
// T or of a dtype package kernels computes in, so an int64 tensor that is
// no count has no Go expression.
func TestFamiliesRefuseUnknownElement(t *testing.T) {
	reduce := opdef.All[4]
	require.Equal(t, opdef.GradReduce, reduce.Kind)
	reduce.Inputs = append([]opdef.Arg(nil), reduce.Inputs...)
	reduce.Inputs[2].Type = "int64"
	_, err := GenerateFamilies([]opdef.Op{reduce}, root)
	require.ErrorContains(t, err, "GradReduce: the kernels take no int64 (mean)")
}

func TestNames(t *testing.T) {
	require.Equal(t, "yBackprop", fieldName("y_backprop"))
	require.Equal(t, "reserveSpace1", fieldName("reserve_space_1"))
	for arg, field := range map[string]string{"y_backprop": "YBackprop", "reserve_space_1": "ReserveSpace1", "sum_dy_xmu": "SumDyXmu",
		"t": "T", "dx": "DX", "gamma": "Gamma"} {
		require.Equal(t, field, recipe.Field(arg))
	}
}

// throwaway is the op of a new kind the recipe's tests add.
var throwaway = recipe.Throwaway

// throwawayRoot returns a repository of the throwaway kind's kernels alone,
// their args' fields those given (recipe.WriteThrowawayKernels).
func throwawayRoot(t *testing.T, cpuFields, gpuFields string) string {
	root := t.TempDir()
	require.NoError(t, recipe.WriteThrowawayKernels(root, cpuFields, gpuFields))
	return root
}

const throwawayCPU, throwawayGPU = recipe.ThrowawayCPUFields, recipe.ThrowawayGPUFields

// TestFamiliesOfANewKind: a kind's binders come from opdef and its kernels'
// entry points alone; a list output is allocated where its attr asks for
// it, the attrs are set in the fields of their names, and a kernel
// missing, or args that leave out an attr or hold a field of no arg or
// attr, are refused, naming the file.
func TestFamiliesOfANewKind(t *testing.T) {
	_, err := GenerateFamilies([]opdef.Op{throwaway}, root)
	require.ErrorContains(t, err, "kernels/throwaway.go: no func Throwaway[T Element](a <its args>)")

	src, err := GenerateFamilies([]opdef.Op{throwaway}, throwawayRoot(t, throwawayCPU, throwawayGPU))
	require.NoError(t, err)
	for _, want := range []string{
		"if k.attrs.NumSides > 0 { // a list of one\n\t\tif out.sideBackprop, err = allocate(1, k.attrs.T, in.x.dims, 0); err != nil {",
		"kernels.Throwaway(cpuArgsThrowaway[float32](k, d, in, out))",
		"return launch(gpuArgsThrowaway(k, cuda.Float32, d, in, out), cuda.Throwaway, dev)",
		"Mode:         k.attrs.Mode,", "NumSides:     k.attrs.NumSides,",
		"SideBackprop: view[T](out.sideBackprop),", "SideBackprop: ptr(out.sideBackprop),",
	} {
		require.Contains(t, string(src), want)
	}
	for fields, want := range map[[2]string]string{
		{strings.Replace(throwawayCPU, "Mode string\n", "", 1), throwawayGPU}:              "kernels/throwaway.go: kernels.ThrowawayArgs[T] has no field Mode string for the attr mode",
		{throwawayCPU, throwawayGPU + "\nEpsilon float32"}:                                 "kernels/cuda/throwaway.go: cuda.ThrowawayArgs has a field Epsilon, which is no arg or attr of every Throwaway op",
		{throwawayCPU, strings.Replace(throwawayGPU, "NumSides int64", "NumSides int", 1)}: "kernels/cuda/throwaway.go: cuda.ThrowawayArgs has no field NumSides int64",
		{strings.Replace(throwawayCPU, ", SideBackprop", "", 1), throwawayGPU}:             "kernels/throwaway.go: kernels.ThrowawayArgs[T] has no field SideBackprop for side_backprop",
	} {
		_, err := GenerateFamilies([]opdef.Op{throwaway}, throwawayRoot(t, fields[0], fields[1]))
		require.ErrorContains(t, err, want)
	}
}

// TestAttrsOfANewKind: every attr has a field of its kind's Go type, tagged
// with its name, and has says whether a list output is there.
func TestAttrsOfANewKind(t *testing.T) {
	src, err := GenerateAttrs(append(append([]opdef.Op(nil), opdef.All...), throwaway))
	require.NoError(t, err)
	for _, want := range []string{
		"NumSides                int64       `attr:\"num_sides\"`",
		"Mode                    string      `attr:\"mode\"`",
		"case \"num_sides\":\n\t\treturn a.NumSides > 0",
	} {
		require.Contains(t, string(src), want)
	}
	clash := throwaway
	clash.Attrs = append([]opdef.Attr{{Name: "epsilon", Kind: opdef.IntAttr}}, throwaway.Attrs...)
	_, err = GenerateAttrs(append(append([]opdef.Op(nil), opdef.All...), clash))
	require.ErrorContains(t, err, "Gobn>Throwaway: the attr epsilon is of another kind than another op's")
}
