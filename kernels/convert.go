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

// toFloat64 returns the per-channel values p as float64 (exactly).
func toFloat64[T Element](s *scratch, p []T) []float64 {
	out := s.float64s(len(p))
	for i, v := range p {
		switch v := any(v).(type) {
		case float32:
			out[i] = float64(v)
		case float64:
			out[i] = v
		case Half:
			out[i] = float64(v.Float32())
		case BFloat16:
			out[i] = float64(v.Float32())
		}
	}
	return out
}

// fromFloat64 rounds the per-channel values p into dst, which has p's length.
func fromFloat64[T Element](dst []T, p []float64) {
	switch dst := any(dst).(type) {
	case []float32:
		convert(dst, p, nil, func(v float64) float32 { return float32(v) })
	case []float64:
		copy(dst, p)
	case []Half:
		convert(dst, p, nil, func(v float64) Half { return HalfFromFloat32(float32(v)) })
	case []BFloat16:
		convert(dst, p, nil, func(v float64) BFloat16 { return BFloat16FromFloat32(float32(v)) })
	}
}
