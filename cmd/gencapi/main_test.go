package main

import (
	"testing"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// capiDir holds the family files that GenerateFamilies reads.
const capiDir = "../../capi"

// TestGeneratedFilesAreCurrent fails when opdef changed without `go generate ./capi`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	require.NoError(t, genfile.Current("../../capi/registry_gen.c", Generate(opdef.All), "go generate ./capi"))
	families, err := GenerateFamilies(opdef.All, capiDir)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../capi/families_gen.go", families, "go generate ./capi"))
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
		_, err := GenerateFamilies([]opdef.Op{v2, op}, capiDir)
		require.ErrorContains(t, err, want)
	}
	_, err := GenerateFamilies([]opdef.Op{v2, v3}, capiDir)
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
		_, err := GenerateFamilies([]opdef.Op{op}, capiDir)
		require.NoError(t, err, op.Name)
		op.HostMemory = nil
		_, err = GenerateFamilies([]opdef.Op{op}, capiDir)
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
	_, err := GenerateFamilies([]opdef.Op{reduce}, capiDir)
	require.ErrorContains(t, err, "GradReduce: the kernels take no int64 (mean)")
}

func TestFamilyFile(t *testing.T) {
	require.Equal(t, "fused_batch_norm_grad.go", FamilyFile(opdef.FusedBatchNormGrad))
	require.Equal(t, "grad_apply.go", FamilyFile(opdef.GradApply))
	require.Equal(t, "yBackprop", fieldName("y_backprop"))
	require.Equal(t, "reserveSpace1", fieldName("reserve_space_1"))
	for arg, field := range map[string]string{"y_backprop": "YBackprop", "reserve_space_1": "ReserveSpace1", "sum_dy_xmu": "SumDyXmu",
		"t": "T", "dx": "DX", "gamma": "Gamma"} {
		require.Equal(t, field, kernelField(arg))
	}
}
