package kernels

// widen converts src to float32 into dst, which has src's length.
func widen[T Element](dst []float32, src []T) {
	switch src := any(src).(type) {
	case []Half:
		if simdWidenHalf != nil {
			simdWidenHalf(dst, src)
			return
		}
		for i, h := range src {
			dst[i] = halfTable[h]
		}
	case []BFloat16:
		if simdWidenBFloat16 != nil {
			simdWidenBFloat16(dst, src)
			return
		}
		for i, b := range src {
			dst[i] = b.Float32()
		}
	case []float32:
		copy(dst, src)
	case []float64:
		for i, v := range src {
			dst[i] = float32(v)
		}
	}
}

// narrow rounds src into dst, which has src's length.
func narrow[T Element](dst []T, src []float32) {
	switch dst := any(dst).(type) {
	case []Half:
		if simdNarrowHalf != nil {
			simdNarrowHalf(dst, src)
			return
		}
		for i, v := range src {
			dst[i] = HalfFromFloat32(v)
		}
	case []BFloat16:
		if simdNarrowBFloat16 != nil {
			simdNarrowBFloat16(dst, src)
			return
		}
		for i, v := range src {
			dst[i] = BFloat16FromFloat32(v)
		}
	case []float32:
		copy(dst, src)
	case []float64:
		for i, v := range src {
			dst[i] = float64(v)
		}
	}
}

// toFloat64 returns the per-channel values p as float64.
func toFloat64[T Element](s *scratch, p []T) []float64 {
	out := s.float64s(len(p))
	switch p := any(p).(type) {
	case []float32:
		for i, v := range p {
			out[i] = float64(v)
		}
	case []float64:
		copy(out, p)
	case []Half:
		for i, v := range p {
			out[i] = float64(v.Float32())
		}
	case []BFloat16:
		for i, v := range p {
			out[i] = float64(v.Float32())
		}
	}
	return out
}

// fromFloat64 rounds the per-channel values p into dst, which has p's length.
func fromFloat64[T Element](dst []T, p []float64) {
	switch dst := any(dst).(type) {
	case []float32:
		for i, v := range p {
			dst[i] = float32(v)
		}
	case []float64:
		copy(dst, p)
	case []Half:
		for i, v := range p {
			dst[i] = HalfFromFloat32(float32(v))
		}
	case []BFloat16:
		for i, v := range p {
			dst[i] = BFloat16FromFloat32(float32(v))
		}
	}
}
