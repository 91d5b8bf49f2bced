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

// The sums pass alone (TrainingGrad's first, reduce) takes blocks of
// sumsBlockLen elements in a tensor of at most maxTiledBytes: enough rows
// for the float32 tiles of the vector loops (sumsTiles) to sum rows of
// hundreds of channels a tile at a time. A tile narrower than the row walks
// each row in pieces, which the hardware prefetcher follows from L3 but
// not from DRAM, so a larger tensor takes blocks of blockLen, too few
// elements to tile unless the row is one tile wide (minWideTile).
// BenchmarkTrainingGrad's channels-last cases chose both: NHWC 8x28x28x512
// float32 (12.8 MB) sums as fast in rows as in tiles, smaller tensors
// faster in tiles.
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

// tiledBlock returns the block limit of a pass that sums over a tensor of
// the given size in bytes: sumsBlockLen where the sums tile, beyond (the
// pass's own limit) in a larger tensor. A pass that also writes dx block by
// block (sweep) takes the same blocks where the sums tile, the block then
// staying in L2 for its dx: BenchmarkInferenceGrad's channels-last cases
// chose it (docs/performance.md, "Block and range sizes").
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
