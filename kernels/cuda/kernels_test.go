package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/cudaspec"
)

// TestKernels checks the table: one kernel a name and a key, by name, each
// with the device function it calls and its rows a step; the shared passes
// of every element type at every width in both layouts, each U as the H200
// run measured it (cudaspec.Rows: the 16-bit channels-last kernels with
// V ≥ 4 at 64 bytes a step, every other channels-last kernel at 16
// elements), as a kind's own kernels have it unless their file says
// otherwise; and the kinds' kernels, those that write outputs naming them.
func TestKernels(t *testing.T) {
	names := map[string]bool{}
	keys := map[cudaspec.Key]bool{}
	for i, k := range Kernels() {
		require.False(t, names[k.Name()], "%s twice", k.Name())
		require.False(t, keys[k.Key], "%s: its key twice", k.Name())
		names[k.Name()], keys[k.Key] = true, true
		require.Equal(t, kernelID(i), kernelFor(k.Key), k.Name())
		require.NotEmpty(t, k.Call, k.Name())
		if i > 0 {
			require.Less(t, Kernels()[i-1].Name(), k.Name())
		}
		if k.Layout != "" {
			require.Positive(t, k.U, k.Name())
		}
		if k.Job == cudaspec.Reduce || k.Job == cudaspec.Sweep || k.Job == cudaspec.Apply {
			require.Equal(t, cudaspec.Rows(k.Layout, k.Elem, k.V), k.U, k.Name())
		}
	}
	for _, e := range cudaspec.Elems {
		for _, v := range cudaspec.Widths(e) {
			for _, job := range []cudaspec.Job{cudaspec.Reduce, cudaspec.Sweep, cudaspec.Apply} {
				for _, l := range cudaspec.Layouts {
					require.True(t, keys[cudaspec.Key{Job: job, Layout: l, Elem: e, V: v}], "%s %s %s v%d", job, l, e.Name, v)
				}
			}
		}
	}
	for name, u := range map[string]int{
		"gobn_reduce_cl_f32_v1": 16, "gobn_apply_cl_f32_v4": 4, "gobn_sweep_cl_f16_v2": 8,
		"gobn_reduce_cl_f16_v4": 8, "gobn_apply_cl_bf16_v8": 4, "gobn_global_cl_f16_v8": 4,
		"gobn_reduce_cf_f32_v1": 8, "gobn_apply_cf_f16_v8": 2,
	} {
		require.True(t, names[name], name)
		for _, k := range Kernels() {
			if k.Name() == name {
				require.Equal(t, u, k.U, name)
			}
		}
	}
	for name, outputs := range map[string][]string{
		"gobn_finalize_train": {"scale_backprop", "offset_backprop"}, "gobn_finalize_infer": {"scale_backprop", "offset_backprop"},
		"gobn_finalize_reduce": {"sum_dy", "sum_dy_xmu"}, "gobn_finalize_apply": nil,
		"gobn_finalize_global_f32": {"dm", "dv", "db", "dg"}, "gobn_finalize_global_f16": {"dm", "dv", "db", "dg"},
	} {
		require.True(t, names[name], name)
		for _, k := range Kernels() {
			if k.Name() == name {
				require.Equal(t, outputs, k.Outputs, name)
			}
		}
	}
}

// TestOutputsByName: a finalize kernel's outputs go in the slots its
// outputs name, whatever order the call gives them in; a name it does not
// write, or one left out, is a plan bug.
func TestOutputsByName(t *testing.T) {
	global := kernelFor(cudaspec.Key{Job: finalizeGlobal, Elem: cudaspec.Float16})
	require.Equal(t, [5]Ptr{1, 2, 3, 4}, outputs(global, map[string]Ptr{"dg": 4, "dm": 1, "db": 3, "dv": 2}))
	require.Panics(t, func() { outputs(global, map[string]Ptr{"dm": 1, "dv": 2, "db": 3, "dx": 4}) })
	require.Panics(t, func() { outputs(global, map[string]Ptr{"dm": 1, "dv": 2, "db": 3}) })
	// No kernel of the table has tensors of its own (Params.Tensors): the
	// call may give none, and a name the kernel lacks is a plan bug.
	require.Equal(t, [4]Ptr{}, tensors(global, nil))
	require.Panics(t, func() { tensors(global, map[string]Ptr{"y": 1}) })
}
