package kernels

import "sync"

// blockLen is the number of elements handled at a time: small enough that a
// block of dy, x and dx stays in L1 between the passes over it. A pass that
// sums and writes dx block by block (inference) over a tensor larger than
// maxTiledBytes takes blocks of half that, fusedBlockLen, to leave room
// in L1 for the float64 sums of a channels-last row (see sweep for rows of
// splitRowC channels or more);
// BenchmarkInferenceGrad (-cpu 1) chose both. Channels-last blocks are
// whole rows of the period instead, as many as fit in the block length and
// at least one, unless a row exceeds maxBlockLen.
const (
	blockLen      = 2048
	fusedBlockLen = 1024
	maxBlockLen   = 16384
	// Channels-last rows of splitRowC channels or more sweep in blocks of
	// wideSweepBlockLen where the sums tile (see sweep).
	splitRowC         = 512
	wideSweepBlockLen = 65536
)

// The sums pass alone (TrainingGrad's first, reduce, and the first of
// inference's two passes) takes blocks of sumsBlockLen elements, whatever
// the tensor's size: enough rows for the float32 tiles of the vector loops
// (sumsTiles) to sum rows of up to 4096 channels a tile at a time. The
// tiles walk each row in pieces, but add into their float64 accumulators
// once every foldRows rows instead of on every row, and rows of 2048
// channels summed in order keep accumulators that L1 cannot hold beside
// the row. On the 2-core Xeon, against the rows that tensors beyond 8 MiB
// took before, NHWC gradients of 12.8 to 103 MB a tensor took 0.70 to 0.91
// of the time in tiles (float32, AVX-512 or AVX2; bfloat16 0.40 to 1.02),
// even where the three tensors outgrow the 260 MiB L3 the VM reports
// (32x56x56x256), and 32x7x7x2048 0.78 (go test -bench over those shapes,
// BenchmarkTrainingGrad's N=32,H=W=7,C=2048 among them; docs/performance.md,
// "Block and range sizes"). maxTiledBytes bounds the tensors that sweep in
// blocks of sumsBlockLen (tiledBlock); minWideTile is the least block a
// tile narrower than the row is worth.
const (
	sumsBlockLen  = maxBlockLen
	maxTiledBytes = 8 << 20
	minWideTile   = 8192
)

// applyChunk is the most channels of a row whose coefficients the training
// apply walks at a time, chunkRows the rows it walks them over. Four
// float32 coefficients a channel, a row of 2048 channels has 32 KiB of them,
// as much as L1 holds: walked along the whole row, they are read from L2 on
// every row. Chunks of 1024 channels (16 KiB) over 16 rows keep them in L1;
// narrower chunks lose as much to the rows read in pieces as they save, and
// so do the bfloat16 loops' rows of 2048 (applyRowsBF16), which move half
// the bytes of data a channel. BenchmarkTrainingGrad's NHWC 8x7x7x2048 chose
// them (docs/performance.md, "Block and range sizes").
const (
	applyChunk = 1024
	chunkRows  = 16
)

// tiledBlock returns the block limit of the pass that sums and writes dx
// block by block (sweep) over a tensor of the given size in bytes:
// sumsBlockLen up to maxTiledBytes, the block then staying in L2 for its
// dx, and beyond (the sweep's own limit) in a larger tensor.
// BenchmarkInferenceGrad's channels-last cases chose it
// (docs/performance.md, "Block and range sizes").
func tiledBlock(bytes, beyond int) int {
	if bytes <= maxTiledBytes {
		return sumsBlockLen
	}
	return beyond
}

// blockFor returns the length of the blocks of at most limit elements (or
// one row) for the period dims pd.
func blockFor(pd Dims, limit int) int {
	L := int(pd.C)
	if pd.Layout != ChannelsLast || L == 0 || L > maxBlockLen {
		return limit
	}
	return max(1, limit/L) * L
}

// blockBuffers are the float32 conversion buffers of one worker.
type blockBuffers struct {
	dy, x, dx [maxBlockLen]float32
}

var bufferPool = sync.Pool{New: func() any { return new(blockBuffers) }}

// forBlocks calls fn for the elements at [lo, hi) of dy and x (and dx, when
// not nil), blk elements at a time in memory order (the hardware prefetcher
// gives up on blocks walked backwards once data comes from DRAM), with
// native slices: float32 and float64 tensors directly, Half and BFloat16
// ones converted to float32 in blocks of at most maxBlockLen, with the
// block's dx rounded back after fn returns.
func forBlocks[T Element](lo, hi, blk int, dy, x, dx []T, fn32 func(off int, dy, x, dx []float32), fn64 func(off int, dy, x, dx []float64)) {
	switch dy := any(dy).(type) {
	case []float32:
		dx, _ := any(dx).([]float32)
		nativeBlocks(lo, hi, blk, dy, any(x).([]float32), dx, fn32)
		return
	case []float64:
		dx, _ := any(dx).([]float64)
		nativeBlocks(lo, hi, blk, dy, any(x).([]float64), dx, fn64)
		return
	}
	blk = min(blk, maxBlockLen)
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	for b := lo; b < hi; b += blk {
		e := min(b+blk, hi)
		n := e - b
		widen(buf.dy[:n], dy[b:e])
		widen(buf.x[:n], x[b:e])
		if dx == nil {
			fn32(b, buf.dy[:n], buf.x[:n], nil)
			continue
		}
		fn32(b, buf.dy[:n], buf.x[:n], buf.dx[:n])
		narrow(dx[b:e], buf.dx[:n])
	}
}

// nativeBlocks is forBlocks on native slices: fn sees the slices themselves,
// dx nil where it is.
func nativeBlocks[F native](lo, hi, blk int, dy, x, dx []F, fn func(off int, dy, x, dx []F)) {
	for b := lo; b < hi; b += blk {
		e := min(b+blk, hi)
		var dxBlock []F
		if dx != nil {
			dxBlock = dx[b:e]
		}
		fn(b, dy[b:e], x[b:e], dxBlock)
	}
}
