package kernels

// A float32 training gradient whose x_backprop has a buffer of its own
// writes it with non-temporal stores (Plan.Stream) from a quarter of the
// last-level cache on (streamFrom): the vector loops (simdApply, and so
// the float32 coefficients), x_backprop neither dy nor x (written in place,
// its lines are already in cache from the read), laid out so that every row
// (period) or run starts 32-byte aligned and the whole of x_backprop
// streams: a line written partly by ordinary stores and partly by
// non-temporal ones costs more than either (BenchmarkTrainingGradOutput's
// NCHW 8x1024x14x14, runs of 196, shows it).

// SetMinStreamElements sets the tuning's StreamBytes to n float32 elements
// (0: a quarter of the last-level cache) and returns the previous value in
// elements. It is for tests and benchmarks.
func SetMinStreamElements(n int) int {
	return setTuningField(func(t *Tuning) *int { return &t.StreamBytes }, min(n, 1<<60)*4) / 4
}
