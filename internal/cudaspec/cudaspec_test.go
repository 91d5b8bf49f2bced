package cudaspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/cudaspec"
)

// TestKernels checks the table: one kernel a name and a key, the finalize
// kernels first, every element type's layout kernels at every width in
// both layouts, and each U as the H200 run measured it (the 16-bit
// channels-last kernels with V ≥ 4 at 64 bytes a step, every other
// channels-last kernel at 16 elements).
func TestKernels(t *testing.T) {
	names := map[string]bool{}
	keys := map[cudaspec.Key]bool{}
	for i, k := range cudaspec.Kernels {
		require.False(t, names[k.Name()], "%s twice", k.Name())
		require.False(t, keys[k.Key], "%s: its key twice", k.Name())
		names[k.Name()], keys[k.Key] = true, true
		finalize := k.Layout == ""
		require.Equal(t, i < 6, finalize, "%s at %d", k.Name(), i)
		if !finalize {
			require.Positive(t, k.U, k.Name())
			require.Equal(t, cudaspec.Rows(k.Layout, k.Elem, k.V), k.U, k.Name())
		}
	}
	require.Len(t, cudaspec.Kernels, 79)
	for _, e := range []cudaspec.Elem{cudaspec.Float32, cudaspec.Float16, cudaspec.BFloat16} {
		require.Equal(t, cudaspec.VectorBytes/e.Size, cudaspec.Widths(e)[len(cudaspec.Widths(e))-1], e.Name)
		for _, v := range cudaspec.Widths(e) {
			for _, job := range []cudaspec.Job{cudaspec.Reduce, cudaspec.Sweep, cudaspec.Apply} {
				for _, l := range []cudaspec.Layout{cudaspec.ChannelsLast, cudaspec.ChannelsFirst} {
					require.True(t, keys[cudaspec.Key{Job: job, Layout: l, Elem: e, V: v}], "%s %s %s v%d", job, l, e.Name, v)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		u    int
	}{
		{"gobn_reduce_cl_f32_v1", 16}, {"gobn_apply_cl_f32_v4", 4}, {"gobn_sweep_cl_f16_v2", 8},
		{"gobn_reduce_cl_f16_v4", 8}, {"gobn_apply_cl_bf16_v8", 4}, {"gobn_global_cl_f16_v8", 4},
		{"gobn_reduce_cf_f32_v1", 8}, {"gobn_apply_cf_f16_v8", 2},
	} {
		found := false
		for _, k := range cudaspec.Kernels {
			if k.Name() == tc.name {
				require.Equal(t, tc.u, k.U, tc.name)
				found = true
			}
		}
		require.True(t, found, tc.name)
	}
}
