package kernels

// widen converts src to float32 into dst, which has src's length.
func widen[T Element](dst []float32, src []T) {
	switch src := any(src).(type) {
	case []Half:
		convert(dst, src, simdWidenHalf, Half.Float32)
	case []BFloat16:
		convert(dst, src, simdWidenBFloat16, BFloat16.Float32)
	case []float32:
		copy(dst, src)
	case []float64:
		convert(dst, src, nil, func(v float64) float32 { return float32(v) })
	}
}

// narrow rounds src into dst, which has src's length.
func narrow[T Element](dst []T, src []float32) {
	switch dst := any(dst).(type) {
	case []Half:
		convert(dst, src, simdNarrowHalf, HalfFromFloat32)
	case []BFloat16:
		convert(dst, src, simdNarrowBFloat16, BFloat16FromFloat32)
	case []float32:
		copy(dst, src)
	case []float64:
		convert(dst, src, nil, func(v float32) float64 { return float64(v) })
	}
}

// convert sets each dst[i] to f(src[i]), through the CPU's vector loop vec
// where there is one (vec nil: none); dst has src's length.
func convert[S, D any](dst []D, src []S, vec func([]D, []S), f func(S) D) {
	if vec != nil {
		vec(dst, src)
		return
	}
	for i, v := range src {
		dst[i] = f(v)
	}
}

// toFloat64 returns the per-channel values p as float64 (exactly). The
// switch is on the slice, outside the loop: per element it took twice as
// long for 2048 channels.
func toFloat64[T Element](s *scratch, p []T) []float64 {
	out := s.float64s(len(p))
	switch p := any(p).(type) {
	case []float32:
		convert(out, p, nil, func(v float32) float64 { return float64(v) })
	case []float64:
		copy(out, p)
	case []Half:
		convert(out, p, nil, func(v Half) float64 { return float64(v.Float32()) })
	case []BFloat16:
		convert(out, p, nil, func(v BFloat16) float64 { return float64(v.Float32()) })
	}
	return out
}

// fromFloat64 rounds the per-channel values p into dst, which has p's
// length: to float32, and then for Half and BFloat16 as the tensors are
// rounded (narrow).
func fromFloat64[T Element](s *scratch, dst []T, p []float64) {
	if d, ok := any(dst).([]float64); ok {
		copy(d, p)
		return
	}
	f := s.float32s(len(p))
	convert(f, p, nil, func(v float64) float32 { return float32(v) })
	narrow(dst, f)
}
