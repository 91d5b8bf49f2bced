package kernels

import "sync/atomic"

// minStreamElements is the least number of elements of a float32 gradient
// whose x_backprop, when it has a buffer of its own, the training pass writes
// with non-temporal stores (applyAll). The default, 2^21 (8 MiB a tensor, 24
// for x, dy and dx), is where x_backprop no longer fits in cache for
// whatever reads it next, so skipping the cache pays.
// BenchmarkTrainingGradOutput chose it; docs/performance.md has the figures.
var minStreamElements atomic.Int64

func init() { minStreamElements.Store(1 << 21) }

// SetMinStreamElements sets minStreamElements and returns the previous
// value. It is for tests and tuning; the kernels read it on every call.
func SetMinStreamElements(n int) int {
	return int(minStreamElements.Swap(int64(max(1, n))))
}

// streams reports whether applyAll writes dx with non-temporal stores: with
// the vector loops (simdApply, and so the float32 coefficients), a float32
// tensor of at least minStreamElements whose dx is neither dy nor x
// (written in place, dx's lines are already in cache from the read), laid
// out so that every row (period pd) or run starts 32-byte aligned and the
// whole of dx streams: a line written partly by ordinary stores and partly
// by non-temporal ones costs more than either (BenchmarkTrainingGradOutput's
// NCHW 8x1024x14x14, runs of 196, shows it).
func streams[T Element](pd Dims, dy, x, dx []T) bool {
	dx32, ok := any(dx).([]float32)
	if simdApply == nil || !ok || len(dx) < int(minStreamElements.Load()) || !aligned32(dx32) {
		return false
	}
	if pd.Layout == ChannelsLast && pd.C%8 != 0 || pd.Layout != ChannelsLast && pd.S%8 != 0 {
		return false
	}
	return &dx[0] != &dy[0] && &dx[0] != &x[0]
}
