package cuda

import (
	"fmt"
	"testing"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
	"github.com/stretchr/testify/require"
)

// planCase is one call's shape for the plan tests.
type planCase struct {
	d     kernels.Dims
	t     DType
	align Ptr // 256: the activation tensors are aligned as allocators align; else one element off
}

func planCases() []planCase {
	var cases []planCase
	shapes := [][4]int64{ // N, C, S, layout
		{1, 1, 1, 0}, {1, 3, 1, 1}, {2, 7, 5, 0}, {2, 7, 5, 1}, {0, 64, 49, 0}, {0, 64, 49, 1},
		{3, 0, 4, 0}, {32, 64, 112 * 112, 0}, {32, 64, 112 * 112, 1}, {32, 2048, 49, 0},
		{32, 2048, 49, 1}, {1, 3, 1 << 20, 1}, {1 << 20, 2, 1, 0}, {128, 1000, 1, 1},
		{5, 33, 99, 0}, {5, 33, 99, 1}, {4, 100, 6, 0}, {1, 200, 1, 0}, {70000, 1, 70000, 1},
	}
	for _, s := range shapes {
		for _, t := range []DType{Float32, Float16, BFloat16} {
			for _, align := range []Ptr{256, 1} {
				cases = append(cases, planCase{kernels.Dims{N: s[0], C: s[1], S: s[2], Layout: kernels.Layout(s[3])}, t, align})
			}
		}
	}
	return cases
}

// TestPlansCoverEveryElement checks each plan's launches against CUDA's
// limits and the kernels' indexing: every channel and row (or n and s) has
// a thread, the partial sums fit the workspace, and the vector width
// divides the period and the addresses.
func TestPlansCoverEveryElement(t *testing.T) {
	for _, tc := range planCases() {
		name := fmt.Sprintf("%+v/%s/align%d", tc.d, tc.t, tc.align)
		base := Ptr(1 << 32)
		if tc.align == 1 {
			base += Ptr(tc.t.Size())
		}
		args := FusedGradArgs{Dims: tc.d, DType: tc.t, IsTraining: true, YBackprop: base, X: base + 1<<30, XBackprop: base + 2<<30,
			Scale: 1 << 40, ReserveSpace1: 1<<40 + 1<<20, ReserveSpace2: 1<<40 + 2<<20, ScaleBackprop: 1 << 41, OffsetBackprop: 1<<41 + 1<<20}
		p, err := args.plan()
		require.NoError(t, err, name)
		if tc.d.C == 0 {
			require.Empty(t, p.launches, name)
			continue
		}
		if tc.d.Len() == 0 {
			require.Len(t, p.launches, 1, name)
			require.Equal(t, "gobn_finalize_train", kernelNames()[p.launches[0].kernel], name)
			require.Zero(t, p.launches[0].params.Splits, name)
			continue
		}
		require.Len(t, p.launches, 3, name)
		for _, l := range p.launches {
			threadsPerBlock := int64(l.block[0]) * int64(l.block[1]) * int64(l.block[2])
			require.LessOrEqual(t, threadsPerBlock, int64(threads), name)
			require.Positive(t, l.block[0], name)
			require.Positive(t, threadsPerBlock, name)
			require.LessOrEqual(t, l.grid[1], uint32(maxGridYZ), name)
			require.LessOrEqual(t, l.grid[2], uint32(maxGridYZ), name)
			require.Positive(t, l.grid[0]*l.grid[1]*l.grid[2], name)
		}
		reduce, apply := p.launches[0], p.launches[2]
		require.Equal(t, reduce.grid, apply.grid, name)
		g := layoutGeometry(tc.d, tc.t, targetBlocks, args.YBackprop, args.X, args.XBackprop)
		require.Zero(t, periodOf(tc.d)%g.v, name)
		require.Zero(t, uint64(base)%uint64(g.v*tc.t.Size()), name)
		if tc.align == 256 && periodOf(tc.d)%(16/tc.t.Size()) == 0 {
			require.Equal(t, 16/tc.t.Size(), g.v, "%s: aligned tensors get 16-byte vectors", name)
		}
		if layoutOf(tc.d) {
			CV := tc.d.C / g.v
			covered := int64(reduce.grid[0]) * int64(reduce.block[0])
			require.GreaterOrEqual(t, covered, CV, name)
			require.Less(t, covered-int64(reduce.block[0]), CV, "%s: a block with no channel", name)
			require.Equal(t, int64(reduce.grid[1]), g.splits, name)
		} else {
			require.Equal(t, int64(reduce.grid[0]), tc.d.C, name)
			require.Equal(t, int64(reduce.grid[1])*int64(reduce.grid[2]), g.splits, name)
			require.Less(t, int64(reduce.grid[2]-1)*int64(reduce.block[0]), tc.d.S/g.v, "%s: a block with no s", name)
			require.Less(t, int64(reduce.grid[1]-1)*int64(reduce.block[1]), tc.d.N, "%s: a block with no n", name)
		}
		require.Equal(t, int32(g.splits), reduce.params.Splits, name)
		w := workspaceLayout(g.splits, tc.d.C)
		require.Equal(t, w.total, p.workspace, name)
		require.GreaterOrEqual(t, w.coef-w.partial, g.splits*2*tc.d.C*8, name)
		require.GreaterOrEqual(t, w.total-w.coef, 3*tc.d.C*4, name)
	}
}

// periodOf returns the length the vector width must divide: C for
// channels last, S for channels first.
func periodOf(d kernels.Dims) int64 {
	if layoutOf(d) {
		return d.C
	}
	return d.S
}

// TestPlansPerOp checks the launch sequence of each op.
func TestPlansPerOp(t *testing.T) {
	d := kernels.Dims{N: 8, C: 64, S: 56 * 56, Layout: kernels.ChannelsLast}
	names := launchNames
	const a = Ptr(1 << 32)
	p, err := FusedGradArgs{Dims: d, DType: Float16, IsTraining: false, YBackprop: a, X: a, XBackprop: a}.plan()
	require.NoError(t, err)
	require.Equal(t, []string{"gobn_sweep_cl_f16_v8", "gobn_finalize_infer"}, names(p))
	p, err = GlobalNormalizationArgs{Dims: d, DType: Float32, Backprop: a, T: a, DX: a}.plan()
	require.NoError(t, err)
	require.Equal(t, []string{"gobn_global_cl_f32_v4", "gobn_finalize_global_f32"}, names(p))
	p, err = GradReduceArgs{Dims: kernels.Dims{N: 8, C: 64, S: 49, Layout: kernels.ChannelsFirst}, DType: BFloat16, YBackprop: a, X: a}.plan()
	require.NoError(t, err)
	require.Equal(t, []string{"gobn_reduce_cf_bf16_v1", "gobn_finalize_reduce"}, names(p))
	p, err = GradApplyArgs{Dims: d, DType: Float32, YBackprop: a, X: a, XBackprop: a, Count: 8 * 56 * 56}.plan()
	require.NoError(t, err)
	require.Equal(t, []string{"gobn_finalize_apply", "gobn_apply_cl_f32_v4"}, names(p))
	_, err = GradApplyArgs{Dims: d, DType: Float32, YBackprop: a, X: a, XBackprop: a}.plan()
	require.ErrorContains(t, err, "positive count")
	_, err = GlobalNormalizationArgs{Dims: d, DType: BFloat16}.plan()
	require.Error(t, err)
}

// TestUnrolledLoopRuns checks that the GPU check's 5×15×17×12 (small and
// sanitizer groups) gives a thread of the 16-bit v4 channels-last kernels
// more than their U rows a step: their unrolled loop runs, not only its
// tail.
func TestUnrolledLoopRuns(t *testing.T) {
	d := kernels.Dims{N: 5, C: 12, S: 15 * 17, Layout: kernels.ChannelsLast}
	for _, dt := range []DType{Float16, BFloat16} {
		g := layoutGeometry(d, dt, targetBlocks, 1<<32)
		require.Equal(t, int64(4), g.v)
		for _, job := range []cudaspec.Job{cudaspec.Reduce, cudaspec.Sweep, cudaspec.Apply} {
			k := Kernels()[g.kernel(job, dt)]
			require.Equal(t, 8, k.U, k.Name())
			require.Greater(t, d.N*d.S/(g.splits*int64(g.block[1])), int64(k.U), k.Name())
		}
	}
}

// launchNames returns the kernels of p's launches, in order.
func launchNames(p plan) []string {
	var n []string
	for _, l := range p.launches {
		n = append(n, kernelNames()[l.kernel])
	}
	return n
}

// TestWithoutDriver checks that a call on a machine without a GPU driver
// (or in a build without the CUDA path) returns an error, not a crash.
func TestWithoutDriver(t *testing.T) {
	if Available() == nil {
		t.Skip("a GPU driver is present: this test is for machines without one")
	}
	d := kernels.Dims{N: 2, C: 3, S: 4, Layout: kernels.ChannelsLast}
	a := FusedGradArgs{Dims: d, DType: Float32, IsTraining: true, YBackprop: 1 << 20, X: 1 << 21, XBackprop: 1 << 22,
		ScaleBackprop: 1 << 23, OffsetBackprop: 1 << 24}
	err := FusedBatchNormGrad(a, Placement{Workspace: 1 << 25, WorkspaceBytes: a.WorkspaceBytes()})
	require.Error(t, err)
	if Built {
		require.ErrorContains(t, err, "libcuda.so.1")
	} else {
		require.ErrorContains(t, err, "without the CUDA path")
	}
	require.Empty(t, Launches())
}
