package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gobn/gobn/kernels"
	"github.com/stretchr/testify/require"
)

// h100 returns an H100's facts (132 multiprocessors, cooperative launches)
// with every persistent kernel at 2 blocks of 256 threads a multiprocessor:
// its 128 registers a thread (ptxas, python_tests/test_cuda_build.py checks
// the bound) take half of the 65536.
func h100(persistent bool) gpuFacts {
	f := gpuFacts{sms: 132, cooperative: true, persistent: persistent, resident: make([]int64, len(kernelNames))}
	for i, n := range kernelNames {
		if strings.HasPrefix(n, "gobn_persist_") {
			f.resident[i] = 2
		}
	}
	return f
}

// trainingArgs returns a training call on d of type t, its tensors aligned
// (align 256) or one element off.
func trainingArgs(d kernels.Dims, t DType, align Ptr) FusedGradArgs {
	base := Ptr(1 << 32)
	if align == 1 {
		base += Ptr(t.Size())
	}
	return FusedGradArgs{Dims: d, DType: t, Training: true, YBackprop: base, X: base + 1<<30, XBackprop: base + 2<<30,
		Scale: 1 << 40, ReserveSpace1: 1<<40 + 1<<20, ReserveSpace2: 1<<40 + 2<<20, ScaleBackprop: 1 << 41, OffsetBackprop: 1<<41 + 1<<20}
}

// TestPersistentPlans checks every channels-last training case of
// planCases that the persistent kernel takes on an H100: one cooperative
// launch whose grid the device holds at once, whose blocks hold every task
// (K each), and whose tasks, walked as persist_cl walks them, cover each
// element exactly once; the workspace holds the partial sums and the
// coefficients (the barrier word is the stream's). A case it does not take
// must be too large for the grid.
func TestPersistentPlans(t *testing.T) {
	f := h100(true)
	taken := 0
	for _, tc := range planCases() {
		if !layoutOf(tc.d) || tc.d.Len() == 0 {
			continue
		}
		name := fmt.Sprintf("%+v/%s/align%d", tc.d, tc.t, tc.align)
		args := trainingArgs(tc.d, tc.t, tc.align)
		p, err := args.plan(f)
		require.NoError(t, err, name)
		g := layoutGeometry(tc.d, tc.t, targetBlocks, args.YBackprop, args.X, args.XBackprop)
		K, U := persistTasks(tc.t, g.v), 16/g.v
		R := tc.d.N * tc.d.S
		splits := ceilDiv(R, int64(g.block[1])*U)
		tasks := int64(g.grid[0]) * splits
		if len(p.launches) != 1 {
			require.Len(t, p.launches, 3, name)
			require.Greater(t, tasks, f.sms*2*K, "%s: fits the grid, yet not planned on chip", name)
			continue
		}
		taken++
		l := p.launches[0]
		require.True(t, l.cooperative, name)
		require.Equal(t, persistName(tc.t, g.v), kernelNames[l.kernel], name)
		require.Equal(t, g.block, l.block, name)
		G := int64(l.grid[0])
		require.Equal(t, [2]uint32{1, 1}, [2]uint32{l.grid[1], l.grid[2]}, name)
		require.LessOrEqual(t, G, f.sms*2, "%s: more blocks than the device holds at once", name)
		require.GreaterOrEqual(t, G*K, tasks, "%s: tasks no block holds", name)
		require.Equal(t, int32(tasks), l.params.tasks, name)
		require.Equal(t, int32(splits), l.params.splits, name)
		require.Equal(t, int32(g.grid[0]), l.params.tiles, name)
		require.False(t, p.fallback, name)

		// Walk the tasks as persist_cl does: each (row, channel vector)
		// exactly once, none out of bounds.
		tx, ty := int64(l.block[0]), int64(l.block[1])
		CV := tc.d.C / g.v
		if R*CV <= 1<<20 {
			seen := make([]uint8, R*CV)
			for b := int64(0); b < G; b++ {
				for k := int64(0); k < K; k++ {
					task := b + k*G
					if task >= tasks {
						break
					}
					for y := int64(0); y < ty; y++ {
						for xi := int64(0); xi < tx; xi++ {
							cv := (task%int64(l.params.tiles))*tx + xi
							r0 := (task/int64(l.params.tiles))*ty*U + y
							for u := int64(0); u < U; u++ {
								if r := r0 + u*ty; cv < CV && r < R {
									seen[r*CV+cv]++
								}
							}
						}
					}
				}
			}
			for i, n := range seen {
				require.Equal(t, uint8(1), n, "%s: row %d vector %d taken %d times", name, int64(i)/CV, int64(i)%CV, n)
			}
		}
		w := workspaceLayout(splits, tc.d.C)
		require.Equal(t, w.total, p.workspace, name)
		three, err := args.plan(h100(false))
		require.NoError(t, err, name)
		require.Equal(t, max(w.total, three.workspace), args.workspaceOn(f), "%s: room for the three launches too", name)
		require.Zero(t, l.params.barrier, "%s: the barrier word is the stream's, not the workspace's", name)
		require.GreaterOrEqual(t, w.coef-w.partial, splits*2*tc.d.C*8, name)
		require.GreaterOrEqual(t, w.total-w.coef, 3*tc.d.C*4, name)
	}
	require.Positive(t, taken, "no case planned on chip")
}

// TestPersistentOnH100 checks what the persistent kernel takes on an H100:
// ResNet-50's smaller training shapes channels last, as one launch; what
// its grid holds (132 multiprocessors × 2 blocks × K tasks × 256 threads ×
// 16 elements: 2,162,688 float32 elements of x and of dy, 4,325,376 half);
// and what it leaves to the three launches.
func TestPersistentOnH100(t *testing.T) {
	nhwc := func(n, hw, c int64) kernels.Dims {
		return kernels.Dims{N: n, C: c, S: hw * hw, Layout: kernels.ChannelsLast}
	}
	names := func(p plan) []string {
		var n []string
		for _, l := range p.launches {
			n = append(n, kernelNames[l.kernel])
		}
		return n
	}
	for _, tc := range []struct {
		d    kernels.Dims
		t    DType
		want []string
	}{
		{nhwc(32, 7, 512), Float16, []string{"gobn_persist_cl_f16_v8_k4"}},
		{nhwc(32, 7, 512), Float32, []string{"gobn_persist_cl_f32_v4_k2"}},
		{nhwc(32, 14, 256), BFloat16, []string{"gobn_persist_cl_bf16_v8_k4"}},
		{nhwc(32, 28, 128), Float16, []string{"gobn_persist_cl_f16_v8_k4"}},
		{nhwc(128, 1, 1000), Float32, []string{"gobn_persist_cl_f32_v4_k2"}},
		{nhwc(16, 31, 33), Float16, []string{"gobn_persist_cl_f16_v1_k2"}},
		{nhwc(32, 28, 128), Float32, []string{"gobn_reduce_cl_f32_v4", "gobn_finalize_train", "gobn_apply_cl_f32_v4"}},
		{nhwc(32, 56, 64), Float16, []string{"gobn_reduce_cl_f16_v8", "gobn_finalize_train", "gobn_apply_cl_f16_v8"}},
		// channels first (S > 1) stays on the three launches
		{kernels.Dims{N: 32, C: 512, S: 49, Layout: kernels.ChannelsFirst}, Float16,
			[]string{"gobn_reduce_cf_f16_v1", "gobn_finalize_train", "gobn_apply_cf_f16_v1"}},
	} {
		name := fmt.Sprintf("%+v/%s", tc.d, tc.t)
		p, err := trainingArgs(tc.d, tc.t, 256).plan(h100(true))
		require.NoError(t, err, name)
		require.Equal(t, tc.want, names(p), name)
		require.False(t, p.fallback, name)
	}

	// The grid's capacity: the largest whole multiple of a task's rows that
	// fits, and one task more.
	for _, tc := range []struct {
		t        DType
		capacity int64
	}{{Float32, 2162688}, {Float16, 4325376}, {BFloat16, 4325376}} {
		const C = 256 // a task: one tile of C (16 bytes a thread), 256/tx rows a thread row
		g := layoutGeometry(nhwc(1<<20, 1, C), tc.t, targetBlocks, 256)
		perTask := int64(g.block[0]*g.block[1]) * 16
		require.Equal(t, tc.capacity, 132*2*persistTasks(tc.t, g.v)*perTask, tc.t.String())
		rows := tc.capacity / C
		fits, err := trainingArgs(kernels.Dims{N: rows, C: C, S: 1, Layout: kernels.ChannelsLast}, tc.t, 256).plan(h100(true))
		require.NoError(t, err)
		require.Len(t, fits.launches, 1, "%s: %d elements fit", tc.t, tc.capacity)
		over, err := trainingArgs(kernels.Dims{N: rows + 1, C: C, S: 1, Layout: kernels.ChannelsLast}, tc.t, 256).plan(h100(true))
		require.NoError(t, err)
		require.Len(t, over.launches, 3, "%s: one row over the capacity", tc.t)
	}

	// Switched off, three launches and no fallback; on a device without
	// cooperative launches, three launches counted as a fallback.
	d := nhwc(32, 7, 512)
	p, err := trainingArgs(d, Float16, 256).plan(h100(false))
	require.NoError(t, err)
	require.Len(t, p.launches, 3)
	require.False(t, p.fallback)
	noCoop := h100(true)
	noCoop.cooperative = false
	p, err = trainingArgs(d, Float16, 256).plan(noCoop)
	require.NoError(t, err)
	require.Len(t, p.launches, 3)
	require.True(t, p.fallback)
	// Unknown facts (no device): three launches.
	p, err = trainingArgs(d, Float16, 256).plan(gpuFacts{persistent: true, cooperative: true})
	require.NoError(t, err)
	require.Len(t, p.launches, 3)
}
