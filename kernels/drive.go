package kernels

import (
	"fmt"
	"runtime"
	"sync"
)

// blockLen is the number of Half or BFloat16 elements converted to float32 at
// a time: small enough that the converted block stays in L1.
const blockLen = 2048

// minElementsPerWorker is the least work worth waking a goroutine for. Below
// twice this a gradient runs on the calling thread.
const minElementsPerWorker = 1 << 16

// workersFor returns how many goroutines to split n elements over.
func workersFor(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/minElementsPerWorker))
}

// parallel calls fn(w, lo, hi) for workers contiguous ranges that cover
// [0, n), concurrently when workers > 1. A panic in a worker is re-raised on
// the calling goroutine, so the caller's recover sees it.
func parallel(n, workers int, fn func(w, lo, hi int)) {
	if workers <= 1 {
		fn(0, 0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	panics := make([]any, workers)
	for w := range workers {
		lo, hi := min(w*chunk, n), min((w+1)*chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panics[w] = recover() }()
			fn(w, lo, hi)
		}()
	}
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(fmt.Sprintf("kernels: worker panicked: %v", p))
		}
	}
}

// forBlocks calls fn for the elements at [lo, hi) of dy and x (and dx, when
// not nil) with native slices: float32 and float64 tensors directly, Half and
// BFloat16 ones converted to float32 a block at a time, with the block's dx
// rounded back after fn returns.
func forBlocks[T Element](lo, hi int, dy, x, dx []T, fn32 func(off int, dy, x, dx []float32), fn64 func(off int, dy, x, dx []float64)) {
	sub := func(s []T) []T {
		if s == nil {
			return nil
		}
		return s[lo:hi]
	}
	switch dy := any(sub(dy)).(type) {
	case []float32:
		dx, _ := any(sub(dx)).([]float32)
		fn32(lo, dy, any(sub(x)).([]float32), dx)
		return
	case []float64:
		dx, _ := any(sub(dx)).([]float64)
		fn64(lo, dy, any(sub(x)).([]float64), dx)
		return
	}
	var dyBuf, xBuf, dxBuf [blockLen]float32
	for b := lo; b < hi; b += blockLen {
		e := min(b+blockLen, hi)
		n := e - b
		widen(dyBuf[:n], dy[b:e])
		widen(xBuf[:n], x[b:e])
		if dx == nil {
			fn32(b, dyBuf[:n], xBuf[:n], nil)
			continue
		}
		fn32(b, dyBuf[:n], xBuf[:n], dxBuf[:n])
		narrow(dx[b:e], dxBuf[:n])
	}
}

// widen converts src to float32 into dst, which has src's length.
func widen[T Element](dst []float32, src []T) {
	switch src := any(src).(type) {
	case []Half:
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
		for i, v := range src {
			dst[i] = HalfFromFloat32(v)
		}
	case []BFloat16:
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
func toFloat64[T Element](p []T) []float64 {
	out := make([]float64, len(p))
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

// reduce returns the per-channel sums Σdy and Σdy·(x−mean) over the whole
// tensor, split over workers that each own their accumulators.
func reduce[T Element](d Dims, dy, x []T, mean []float64) (sumDy, sumDyXc []float64) {
	C := int(d.C)
	sumDy, sumDyXc = make([]float64, C), make([]float64, C)
	n := d.Len()
	if n == 0 {
		return sumDy, sumDyXc
	}
	workers := workersFor(n)
	partDy, partDyXc := make([][]float64, workers), make([][]float64, workers)
	parallel(n, workers, func(w, lo, hi int) {
		a, b := make([]float64, C), make([]float64, C)
		forBlocks(lo, hi, dy, x, nil,
			func(off int, dy, x, _ []float32) { channelSums(d, off, dy, x, mean, a, b) },
			func(off int, dy, x, _ []float64) { channelSums(d, off, dy, x, mean, a, b) })
		partDy[w], partDyXc[w] = a, b
	})
	for w := range workers {
		for c := range C {
			sumDy[c] += partDy[w][c]
			sumDyXc[c] += partDyXc[w][c]
		}
	}
	return sumDy, sumDyXc
}

// applyAll writes dx = A[c]·dy + B[c]·(x − mean[c]) + D[c] over the whole tensor.
func applyAll[T Element](d Dims, t affine, dy, x, dx []T) {
	n := d.Len()
	if n == 0 {
		return
	}
	t = t.withFloat32()
	parallel(n, workersFor(n), func(_, lo, hi int) {
		forBlocks(lo, hi, dy, x, dx,
			func(off int, dy, x, dx []float32) { applyAffine(d, off, t, dy, x, dx) },
			func(off int, dy, x, dx []float64) { applyAffine(d, off, t, dy, x, dx) })
	})
}
