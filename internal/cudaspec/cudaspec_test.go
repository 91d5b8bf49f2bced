package cudaspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/cudaspec"
)

// TestKernelForms: a layout job's kernels, one each element type, width
// and layout, with Rows' U; a finalize job's, one or one each element
// type; their names and the bodies their calls make.
func TestKernelForms(t *testing.T) {
	ks := cudaspec.LayoutKernels("apply", "apply_{L}<{T}, {V}, {U}>(p)", cudaspec.Layouts, cudaspec.Float32, cudaspec.Float16)
	require.Len(t, ks, 2*(len(cudaspec.Widths(cudaspec.Float32))+len(cudaspec.Widths(cudaspec.Float16))))
	for _, k := range ks {
		require.Equal(t, cudaspec.Rows(k.Layout, k.Elem, k.V), k.U, k.Name())
	}
	require.Equal(t, "gobn_apply_cf_f16_v8", ks[len(ks)-1].Name())
	require.Equal(t, "apply_cf<f16, 8, 2>(p)", ks[len(ks)-1].Body())

	one := cudaspec.FinalizeKernel("finalize_train", "finalize_train(p)", []string{"scale_backprop", "offset_backprop"})
	require.Len(t, one, 1)
	require.Equal(t, "gobn_finalize_train", one[0].Name())
	require.Equal(t, []string{"scale_backprop", "offset_backprop"}, one[0].Outputs)
	each := cudaspec.FinalizeKernel("finalize_global", "global_finalize<{T}>(p)", nil, cudaspec.Float32, cudaspec.Float16)
	require.Equal(t, []string{"gobn_finalize_global_f32", "gobn_finalize_global_f16"}, []string{each[0].Name(), each[1].Name()})
	require.Equal(t, "global_finalize<f16>(p)", each[1].Body())
	own := cudaspec.WithTensors(ks, "y")
	require.Equal(t, []string{"y"}, own[len(own)-1].Tensors)
	require.Nil(t, ks[0].Tensors, "WithTensors leaves its argument as it is")
	for _, e := range cudaspec.Elems {
		require.Equal(t, cudaspec.VectorBytes/e.Size, cudaspec.Widths(e)[len(cudaspec.Widths(e))-1], e.Name)
	}
}
