package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// blockLen is the number of elements handled at a time: small enough that a
// block of dy, x and dx stays in L1 between the passes over it.
const blockLen = 2048

// minElementsPerWorker is the least work worth waking a goroutine for. Below
// twice this a gradient runs on the calling thread. 2^18 is measured: inside
// TensorFlow on 2 cores (make bench, "Parallel threshold"), splitting a
// float32 training gradient paid off from about 2^19 elements and cost 10 to
// 17 % at 2^17 and 2^18.
var minElementsPerWorker atomic.Int64

func init() { minElementsPerWorker.Store(1 << 18) }

// SetMinElementsPerWorker sets the least number of elements a gradient gives
// each goroutine it starts (default 2^18) and returns the previous value. It
// is for tests and tuning; the kernels read it on every call.
func SetMinElementsPerWorker(n int) int {
	return int(minElementsPerWorker.Swap(int64(max(1, n))))
}

// workersFor returns how many goroutines to split n elements over: one per
// core the process may use, at most GOMAXPROCS (which the host library may set
// above the core count, see capi).
func workersFor(n int) int {
	return max(1, min(runtime.NumCPU(), runtime.GOMAXPROCS(0), n/int(minElementsPerWorker.Load())))
}

// parallel calls fn(w, lo, hi) for workers contiguous ranges that cover
// [0, n), concurrently when workers > 1: range 0 on the calling goroutine,
// the others on new goroutines. A panic in a worker is re-raised on the
// calling goroutine, so the caller's recover sees it.
func parallel(n, workers int, fn func(w, lo, hi int)) {
	if workers <= 1 {
		fn(0, 0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	panics := make([]any, workers)
	run := func(w int) {
		defer func() { panics[w] = recover() }()
		lo, hi := min(w*chunk, n), min((w+1)*chunk, n)
		fn(w, lo, hi)
	}
	// Workers 1.. run on goroutines; worker 0 runs here, on the calling
	// thread: a thread that calls in from C holds its goroutine locked, and
	// parking it first would leave the work to wait for another thread.
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w)
		}()
	}
	run(0)
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(fmt.Sprintf("kernels: worker panicked: %v", p))
		}
	}
}

// blockBuffers are the float32 conversion buffers of one worker.
type blockBuffers struct {
	dy, x, dx [blockLen]float32
}

var bufferPool = sync.Pool{New: func() any { return new(blockBuffers) }}

// forBlocks calls fn for the elements at [lo, hi) of dy and x (and dx, when
// not nil), a block of at most blockLen elements at a time, with native
// slices: float32 and float64 tensors directly, Half and BFloat16 ones
// converted to float32, with the block's dx rounded back after fn returns.
func forBlocks[T Element](lo, hi int, dy, x, dx []T, fn32 func(off int, dy, x, dx []float32), fn64 func(off int, dy, x, dx []float64)) {
	switch dy := any(dy).(type) {
	case []float32:
		x := any(x).([]float32)
		dx, _ := any(dx).([]float32)
		for b := lo; b < hi; b += blockLen {
			e := min(b+blockLen, hi)
			var dxBlock []float32
			if dx != nil {
				dxBlock = dx[b:e]
			}
			fn32(b, dy[b:e], x[b:e], dxBlock)
		}
		return
	case []float64:
		x := any(x).([]float64)
		dx, _ := any(dx).([]float64)
		for b := lo; b < hi; b += blockLen {
			e := min(b+blockLen, hi)
			var dxBlock []float64
			if dx != nil {
				dxBlock = dx[b:e]
			}
			fn64(b, dy[b:e], x[b:e], dxBlock)
		}
		return
	}
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	for b := lo; b < hi; b += blockLen {
		e := min(b+blockLen, hi)
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
	return sweep(d, dy, x, nil, mean, nil)
}

// sweep is reduce, and when t is not nil it also writes dx by t block by
// block in the same pass, while each block is in L1. Only a t that does not
// depend on the sums (inference) can be applied so.
func sweep[T Element](d Dims, dy, x, dx []T, mean []float64, t *affine) (sumDy, sumDyXc []float64) {
	C := int(d.C)
	sumDy, sumDyXc = make([]float64, C), make([]float64, C)
	n := d.Len()
	if n == 0 {
		return sumDy, sumDyXc
	}
	// Channels-last x_backprop runs over the period L (a multiple of C) with
	// per-channel arrays repeated L/C times: long inner loops instead of one
	// short loop per row. The sums keep C: they walk whole rows of a block
	// with accumulators in registers (sumsRows32), which short rows favour.
	pd, L := d.periodic()
	var apply affine
	if t != nil {
		apply = t.repeated(L).withFloat32()
	} else {
		dx = nil
	}
	workers := workersFor(n)
	partDy, partDyXc := make([][]float64, workers), make([][]float64, workers)
	parallel(n, workers, func(w, lo, hi int) {
		a, b := sumDy, sumDyXc // one worker sums straight into the result
		if workers > 1 {
			a, b = make([]float64, C), make([]float64, C)
		}
		forBlocks(lo, hi, dy, x, dx,
			func(off int, dy, x, dx []float32) {
				channelSums(d, off, dy, x, mean, a, b)
				if dx != nil {
					applyAffine(pd, off, apply, dy, x, dx)
				}
			},
			func(off int, dy, x, dx []float64) {
				channelSums(d, off, dy, x, mean, a, b)
				if dx != nil {
					applyAffine(pd, off, apply, dy, x, dx)
				}
			})
		partDy[w], partDyXc[w] = a, b
	})
	if workers > 1 {
		for w := range workers {
			for c := range C {
				sumDy[c] += partDy[w][c]
				sumDyXc[c] += partDyXc[w][c]
			}
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
	pd, L := d.periodic()
	t = t.repeated(L).withFloat32()
	parallel(n, workersFor(n), func(_, lo, hi int) {
		forBlocks(lo, hi, dy, x, dx,
			func(off int, dy, x, dx []float32) { applyAffine(pd, off, t, dy, x, dx) },
			func(off int, dy, x, dx []float64) { applyAffine(pd, off, t, dy, x, dx) })
	})
}
