package cuda

import (
	"fmt"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// A plan is the launches of one call, in order, and the workspace they use.
// Plans are plain Go, so that their shapes are tested without a GPU.
type plan struct {
	launches []launch
	// workspace is the bytes of device memory the launches need.
	workspace int64
}

// launch is one kernel launch.
type launch struct {
	kernel kernelID
	grid   [3]uint32
	block  [3]uint32
	params params
}

// params is a launch's gobn_params, with the partial-sum and coefficient
// arrays as byte offsets into the workspace until bind places them.
type params = cudaspec.Params

const (
	// threads is every kernel's largest block.
	threads = cudaspec.Threads
	// targetBlocks is about the blocks of 256 threads that fill a large GPU
	// (132 multiprocessors on an H100, 2 to 4 blocks each at our register
	// counts): layouts are split until a launch has this many blocks or
	// each thread has minSteps rows (or row pieces) of work left. More
	// blocks would only add partial sums and per-block reductions.
	targetBlocks = 512
	minSteps     = 8
	// segmentBytes is the least run of a row a channels-last block reads:
	// a whole 128-byte cache line. Blocks are that narrow where the channels
	// allow, so that a launch fills the GPU with few partial sums per channel.
	segmentBytes = 128
	// maxGridYZ is CUDA's limit on gridDim.y and gridDim.z.
	maxGridYZ = 65535
	// workspaceAlign aligns each workspace array (the allocators' 256).
	workspaceAlign = 256
)

// geometry is the launch shape of the layout kernels (reduce, sweep,
// apply) of one tensor, and the vector width V they run with.
type geometry struct {
	channelsLast bool
	v            int64
	grid, block  [3]uint32
	// splits is the number of partial sums per channel a reduce leaves.
	splits int64
}

// layoutOf returns whether the tensor runs as channels last: NCHW with
// S = 1 is the same memory as NHWC with R = N rows, and runs faster so.
func layoutOf(d kernels.Dims) bool {
	return d.Layout == kernels.ChannelsLast || d.S == 1
}

// vectorWidth returns the widest V in {16 bytes of T, ..., 2, 1} that
// divides period and at which every address in ptrs is aligned to V·size.
func vectorWidth(t DType, period int64, ptrs ...Ptr) int64 {
	for v := cudaspec.VectorBytes / t.Size(); v > 1; v /= 2 {
		if period%v != 0 {
			continue
		}
		aligned := true
		for _, p := range ptrs {
			if uint64(p)%uint64(v*t.Size()) != 0 {
				aligned = false
			}
		}
		if aligned {
			return v
		}
	}
	return 1
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// layoutGeometry plans the layout kernels for d (not empty) of element type
// t whose activation tensors are at ptrs, with at most about target blocks.
func layoutGeometry(d kernels.Dims, t DType, target int64, ptrs ...Ptr) geometry {
	g := geometry{channelsLast: layoutOf(d)}
	if g.channelsLast {
		// Block: tx vectors of V channels (a segmentBytes run of a row, or
		// the whole row when it is shorter, spread evenly over the blocks of
		// a row) by ty rows; grid: the row's blocks by splits.
		R := d.N * d.S
		g.v = vectorWidth(t, d.C, ptrs...)
		CV := d.C / g.v
		gx := ceilDiv(CV, max(1, segmentBytes/(g.v*t.Size())))
		tx := ceilDiv(CV, gx)
		ty := clamp(threads/tx, 1, R)
		steps := ceilDiv(R, ty)
		g.splits = clamp(min(target/gx, steps/minSteps), 1, maxGridYZ)
		g.grid = [3]uint32{uint32(gx), uint32(g.splits), 1}
		g.block = [3]uint32{uint32(tx), uint32(ty), 1}
		return g
	}
	// Block: tx vectors of V along s by ty values of n; grid: C channels by
	// splits of n by splits of s.
	g.v = vectorWidth(t, d.S, ptrs...)
	SV := d.S / g.v
	tx := min(SV, threads)
	ty := clamp(threads/tx, 1, d.N)
	stepsN, stepsS := ceilDiv(d.N, ty), ceilDiv(SV, tx)
	want := clamp(stepsN*stepsS/minSteps, 1, max(1, target/d.C))
	splitN := clamp(want, 1, min(stepsN, maxGridYZ))
	splitS := clamp(ceilDiv(want, splitN), 1, min(stepsS, maxGridYZ))
	g.splits = splitN * splitS
	g.grid = [3]uint32{uint32(d.C), uint32(splitN), uint32(splitS)}
	g.block = [3]uint32{uint32(tx), uint32(ty), 1}
	return g
}

// kernel returns the layout kernel of job for g and t.
func (g geometry) kernel(job cudaspec.Job, t DType) kernelID {
	layout := cudaspec.ChannelsFirst
	if g.channelsLast {
		layout = cudaspec.ChannelsLast
	}
	return kernelFor(cudaspec.Key{Job: job, Layout: layout, Elem: t.elem(), V: int(g.v)})
}

// workspace is where a plan's arrays lie in its workspace: byte offsets,
// and the total.
type workspace struct {
	partial, coef, total int64
}

// workspaceLayout places the partial sums (double [splits][2][C]) and the
// coefficients (float [3][C]).
func workspaceLayout(splits, C int64) workspace {
	align := func(n int64) int64 { return ceilDiv(n, workspaceAlign) * workspaceAlign }
	w := workspace{coef: align(splits * 2 * C * 8)}
	w.total = w.coef + align(3*C*4)
	return w
}

// finalizeLaunch is the finalize kernel over C channels: blocks of
// FinalizeLanes channels by FinalizeSplitLanes threads over the splits.
func finalizeLaunch(k kernelID, C int64, p params) launch {
	return launch{kernel: k, grid: [3]uint32{uint32(ceilDiv(C, cudaspec.FinalizeLanes)), 1, 1},
		block: [3]uint32{cudaspec.FinalizeLanes, cudaspec.FinalizeSplitLanes, 1}, params: p}
}

// reducePlan plans the calls built on a reduce: job's layout kernel
// (reduce, sweep or a kind's own) leaves each channel's partial sums,
// finalize forms the 1-D outputs (and the coefficients), and apply's layout
// kernel, where apply is not "", writes x_backprop from them (training's).
// A tensor with no elements runs finalize alone, its sums being zero. base
// holds the call's tensors and scalars; ptrs are the activation tensors'
// addresses, whose alignment sets the vector width.
func reducePlan(d kernels.Dims, t DType, job cudaspec.Job, finalize kernelID, apply cudaspec.Job, base params, ptrs ...Ptr) plan {
	C := d.C
	if d.Len() == 0 {
		w := workspaceLayout(0, C)
		base.Coef = Ptr(w.coef)
		return plan{launches: []launch{finalizeLaunch(finalize, C, base)}, workspace: w.total}
	}
	g := layoutGeometry(d, t, targetBlocks, ptrs...)
	w := workspaceLayout(g.splits, C)
	base.Partial, base.Coef, base.Splits = Ptr(w.partial), Ptr(w.coef), int32(g.splits)
	p := plan{workspace: w.total, launches: []launch{
		{kernel: g.kernel(job, t), grid: g.grid, block: g.block, params: base},
		finalizeLaunch(finalize, C, base),
	}}
	if apply != "" {
		p.launches = append(p.launches, launch{kernel: g.kernel(apply, t), grid: g.grid, block: g.block, params: base})
	}
	return p
}

// callParams checks the call's dims and dtype, then completes base, its
// tensors and scalars, with what every launch of a call over d carries: the
// dims and the elements per channel.
func callParams(d kernels.Dims, t DType, base params) (params, error) {
	if err := checkDims(d, t); err != nil {
		return params{}, err
	}
	base.N, base.C, base.S, base.Count = d.N, d.C, d.S, d.PerChannel()
	return base, nil
}

// checkDims rejects what the kernels do not take; capi has already checked
// the op's own rules.
func checkDims(d kernels.Dims, t DType) error {
	if d.N < 0 || d.C < 0 || d.S < 0 {
		return fmt.Errorf("gobn: negative dims %+v", d)
	}
	if t < Float32 || t > BFloat16 {
		return fmt.Errorf("gobn: no GPU kernel for dtype %d", int(t))
	}
	if d.C > 1<<31-1 {
		return fmt.Errorf("gobn: %d channels: the GPU kernels take at most 2^31-1", d.C)
	}
	return nil
}

// bind places the plan's workspace arrays at ws.
func (p *plan) bind(ws Ptr) {
	for i := range p.launches {
		l := &p.launches[i].params
		l.Partial += ws
		l.Coef += ws
	}
}

// anchor returns the first non-zero address: one the call writes, which
// tells the device.
func anchor(ptrs ...Ptr) Ptr {
	for _, p := range ptrs {
		if p != 0 {
			return p
		}
	}
	return 0
}

// planner is a kind's args: the launches of a call of them.
type planner interface{ plan() (plan, error) }

// run runs the plan of a's call on the device that holds written, the
// addresses it writes (the first not zero tells the device).
func run(a planner, pl Placement, written ...Ptr) error {
	p, err := a.plan()
	if err != nil {
		return err
	}
	return execute(p, pl, anchor(written...))
}

// workspaceOf returns the device memory a's call needs: its plan's for the
// args' dims, dtype and addresses (the vector width depends on their
// alignment).
func workspaceOf(a planner) int64 {
	p, _ := a.plan()
	return p.workspace
}
