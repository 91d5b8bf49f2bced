package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gobn/gobn/kernels"
)

// benchShapes are ResNet activations, from an early one (N=8, H=W=56,
// C=64: 1.6M elements, parallel) to the widest rows of batch 32 (C=2048)
// and a small late one (N=1, H=W=7, C=64: 3136 elements, on the calling
// thread).
var benchShapes = []struct {
	name    string
	N, C, S int64
}{
	{"N=8,H=W=56,C=64", 8, 64, 56 * 56},
	{"N=8,H=W=28,C=512", 8, 512, 28 * 28},
	{"N=8,H=W=112,C=64", 8, 64, 112 * 112},
	{"N=8,H=W=14,C=1024", 8, 1024, 14 * 14},
	{"N=8,H=W=56,C=256", 8, 256, 56 * 56},
	{"N=8,H=W=28,C=128", 8, 128, 28 * 28},
	{"N=32,H=W=7,C=2048", 32, 2048, 7 * 7},
	{"N=1,H=W=7,C=64", 1, 64, 7 * 7},
}

// benchFusedGrad times TrainingGrad, or InferenceGrad. b.SetBytes counts the minimum
// traffic: read x and dy, write dx, three elements of T per element (12 bytes
// for float32, 6 for Half).
func benchFusedGrad[T kernels.Element](b *testing.B, training bool, layout kernels.Layout, N, C, S int64) {
	benchFusedGradInto[T](b, training, false, layout, N, C, S)
}

// newBenchArgs returns a gradient's arguments over d: dy ~ N(0, 1),
// x ~ 1 + N(0, 1), unit scale, mean and variance, and dx a buffer of its
// own, or dy itself when inPlace is set.
func newBenchArgs[T kernels.Element](inPlace bool, d kernels.Dims) kernels.FusedGradArgs[T] {
	n, C := d.Len(), d.C
	rng := rand.New(rand.NewPCG(1, 2))
	dy, x := make([]T, n), make([]T, n)
	for i := range x {
		dy[i] = fromF64[T](rng.NormFloat64())
		x[i] = fromF64[T](1 + rng.NormFloat64())
	}
	scale, mean, variance := make([]float32, C), make([]float32, C), make([]float32, C)
	for c := range C {
		scale[c], mean[c], variance[c] = 1, 1, 1
	}
	args := kernels.FusedGradArgs[T]{
		Dims: d, YBackprop: dy, X: x,
		Scale: scale, ReserveSpace1: mean, ReserveSpace2: variance, Epsilon: 1e-3,
		XBackprop: dy, ScaleBackprop: make([]float32, C), OffsetBackprop: make([]float32, C),
	}
	if !inPlace {
		args.XBackprop = make([]T, n)
	}
	return args
}

// benchFusedGradInto is benchFusedGrad, writing dx over dy when inPlace is
// set (as capi does where TensorFlow forwards y_backprop). dy then holds dx
// after the first call, which changes the values but not the work.
func benchFusedGradInto[T kernels.Element](b *testing.B, training, inPlace bool, layout kernels.Layout, N, C, S int64) {
	args := newBenchArgs[T](inPlace, kernels.Dims{N: N, C: C, S: S, Layout: layout})
	n := args.Dims.Len()
	var z T
	b.SetBytes(3 * int64(n) * int64(unsafe.Sizeof(z)))
	b.ReportAllocs()
	grad := kernels.InferenceGrad[T]
	if training {
		grad = kernels.TrainingGrad[T]
	}
	for b.Loop() {
		grad(args)
	}
}

func BenchmarkTrainingGrad(b *testing.B) {
	for _, s := range benchShapes {
		for _, l := range layouts {
			b.Run("float32/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[float32](b, true, l.layout, s.N, s.C, s.S)
			})
			b.Run("Half/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[kernels.Half](b, true, l.layout, s.N, s.C, s.S)
			})
			b.Run("BFloat16/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[kernels.BFloat16](b, true, l.layout, s.N, s.C, s.S)
			})
		}
	}
}

// BenchmarkTrainingGradVectorWidth times float32 training gradients with
// the AVX2 loops and with their AVX-512 forms, which the kernels take where
// the CPU has AVX-512; it is skipped elsewhere.
func BenchmarkTrainingGradVectorWidth(b *testing.B) {
	if !kernels.AVX512Available() {
		b.Skip("no AVX-512 loops on this CPU or build")
	}
	defer kernels.SelectAVX512(true)
	for _, s := range benchShapes {
		for _, l := range layouts {
			for _, w := range []struct {
				name string
				wide bool
			}{{"AVX2", false}, {"AVX512", true}} {
				b.Run(l.name+"/"+s.name+"/"+w.name, func(b *testing.B) {
					kernels.SelectAVX512(w.wide)
					benchFusedGrad[float32](b, true, l.layout, s.N, s.C, s.S)
				})
			}
		}
	}
}

// BenchmarkTrainingGradOutput times float32 training gradients by where
// and how dx is written: into a buffer of its own with ordinary stores
// (fresh; the streaming threshold raised past the shape), the same with
// non-temporal stores where the build has them (stream; GOEXPERIMENT=simd on
// amd64, threshold 1), and over dy (inPlace, which never streams).
func BenchmarkTrainingGradOutput(b *testing.B) {
	for _, s := range benchShapes {
		for _, l := range layouts {
			for _, way := range []string{"fresh", "stream", "inPlace"} {
				b.Run(l.name+"/"+s.name+"/"+way, func(b *testing.B) {
					min := math.MaxInt
					if way == "stream" {
						min = 1
					}
					defer kernels.SetMinStreamElements(kernels.SetMinStreamElements(min))
					benchFusedGradInto[float32](b, true, way == "inPlace", l.layout, s.N, s.C, s.S)
				})
			}
		}
	}
}

func BenchmarkInferenceGrad(b *testing.B) {
	for _, s := range benchShapes {
		for _, l := range layouts {
			b.Run("float32/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[float32](b, false, l.layout, s.N, s.C, s.S)
			})
		}
	}
}

// BenchmarkPasses times the two passes of a float32 training gradient
// larger than L3 (NCHW 8x64x112x112, 6.4M elements) one at a time, through
// GradReduce (the sums: reads dy and x, 8 bytes per element) and GradApply
// (x_backprop: reads them and writes dx, 12), beside plain Go loops with the
// same traffic over the same arrays, one goroutine per GOMAXPROCS: how close
// the passes come to what the memory gives a loop.
func BenchmarkPasses(b *testing.B) {
	d := kernels.Dims{N: 8, C: 64, S: 112 * 112, Layout: kernels.ChannelsFirst}
	n := d.Len()
	dy, x, dx := make([]float32, n), make([]float32, n), make([]float32, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		dy[i], x[i], dx[i] = float32(rng.NormFloat64()), float32(1+rng.NormFloat64()), 0
	}
	perChannel := func(v float32) []float32 {
		p := make([]float32, d.C)
		for c := range p {
			p[c] = v
		}
		return p
	}
	reduce := kernels.GradReduceArgs[float32]{Dims: d, YBackprop: dy, X: x, Mean: perChannel(1),
		SumDy: perChannel(0), SumDyXmu: perChannel(0)}
	apply := kernels.GradApplyArgs[float32]{Dims: d, YBackprop: dy, X: x, Scale: perChannel(1),
		Mean: perChannel(1), Variance: perChannel(1), SumDy: perChannel(1), SumDyXmu: perChannel(1),
		Count: d.PerChannel(), Epsilon: 1e-3, XBackprop: dx}
	split := func(fn func(lo, hi int)) {
		w := runtime.GOMAXPROCS(0)
		var wg sync.WaitGroup
		for i := range w {
			wg.Go(func() { fn(n*i/w, n*(i+1)/w) })
		}
		wg.Wait()
	}
	var sink atomic.Uint32
	b.Run("GradReduce", func(b *testing.B) {
		b.SetBytes(int64(8 * n))
		for b.Loop() {
			kernels.GradReduce(reduce)
		}
	})
	b.Run("GradApply", func(b *testing.B) {
		b.SetBytes(int64(12 * n))
		for b.Loop() {
			kernels.GradApply(apply)
		}
	})
	b.Run("PlainSum", func(b *testing.B) {
		b.SetBytes(int64(8 * n))
		for b.Loop() {
			split(func(lo, hi int) {
				var s0, s1, s2, s3 float32
				dy, x := dy[lo:hi], x[lo:hi]
				for i := 0; i+4 <= len(x); i += 4 {
					s0 += dy[i] + x[i]
					s1 += dy[i+1] + x[i+1]
					s2 += dy[i+2] + x[i+2]
					s3 += dy[i+3] + x[i+3]
				}
				sink.Add(math.Float32bits(s0 + s1 + s2 + s3))
			})
		}
	})
	b.Run("PlainTriad", func(b *testing.B) {
		b.SetBytes(int64(12 * n))
		for b.Loop() {
			split(func(lo, hi int) {
				dy, x, dx := dy[lo:hi], x[lo:hi], dx[lo:hi]
				for i := range dx {
					dx[i] = x[i] + 3*dy[i]
				}
			})
		}
	})
}

// BenchmarkTrainingGradByChannel times float32 channels-first training
// gradients computed in two passes over the whole tensor (twoPass) and by
// channel units (byChannel), dx in a buffer of its own.
func BenchmarkTrainingGradByChannel(b *testing.B) {
	for _, s := range benchShapes {
		for _, way := range []string{"twoPass", "byChannel"} {
			b.Run(s.name+"/"+way, func(b *testing.B) {
				defer kernels.SetByChannel(kernels.SetByChannel(way == "byChannel"))
				benchFusedGrad[float32](b, true, kernels.ChannelsFirst, s.N, s.C, s.S)
			})
		}
	}
}

// BenchmarkTrainingGradAffine times float32 NHWC training gradients of
// more than one range, dx written over dy, with each range of the second pass on the
// worker that summed it (affine, as the kernels run) and on whichever worker
// claims it (free), alternating call by call so that both meet the same
// machine. It reports the median and the 90th percentile of each way's
// calls in ms; a long -benchtime (a minute) is what shows the stretches in
// which the free way is slow (see pass.affine in parallel.go).
func BenchmarkTrainingGradAffine(b *testing.B) {
	for _, s := range benchShapes {
		if s.N*s.C*s.S < 2*(1<<18) {
			continue
		}
		b.Run("ChannelsLast/"+s.name, func(b *testing.B) {
			defer kernels.SetAffinePasses(kernels.SetAffinePasses(true))
			args := newBenchArgs[float32](true, kernels.Dims{N: s.N, C: s.C, S: s.S, Layout: kernels.ChannelsLast})
			var times [2][]float64 // affine, free
			for b.Loop() {
				for way := range times {
					kernels.SetAffinePasses(way == 0)
					start := time.Now()
					kernels.TrainingGrad(args)
					times[way] = append(times[way], float64(time.Since(start).Nanoseconds())/1e6)
				}
			}
			for way, name := range []string{"affine", "free"} {
				slices.Sort(times[way])
				t := times[way]
				b.ReportMetric(t[len(t)/2], name+"-ms-median")
				b.ReportMetric(t[len(t)*9/10], name+"-ms-p90")
			}
		})
	}
}

// fusionShapes are float32 NHWC training shapes of ResNet-50 (Relu) and
// MobileNetV2 (Relu6), batch 8 and two of batch 32, as make bench-fusion
// times them.
var fusionShapes = []struct {
	name       string
	activation string
	N, C, S    int64
}{
	{"8x56x56x64", "Relu", 8, 64, 56 * 56},
	{"8x28x28x128", "Relu", 8, 128, 28 * 28},
	{"8x14x14x256", "Relu", 8, 256, 14 * 14},
	{"8x7x7x512", "Relu", 8, 512, 7 * 7},
	{"8x112x112x32", "Relu6", 8, 32, 112 * 112},
	{"8x56x56x144", "Relu6", 8, 144, 56 * 56},
	{"8x28x28x192", "Relu6", 8, 192, 28 * 28},
	{"8x14x14x576", "Relu6", 8, 576, 14 * 14},
	{"32x28x28x128", "Relu", 32, 128, 28 * 28},
	{"32x14x14x384", "Relu6", 32, 384, 14 * 14},
}

// BenchmarkFusedGradEx times, call after call on the same tensors, the
// float32 NHWC training gradient alone (v3), the activation's gradient as a
// plain loop writing dz then the gradient of dz (pair), and
// FusedBatchNormGradEx (fused), and reports each way's median in ms and
// pair/fused and v3/fused.
func BenchmarkFusedGradEx(b *testing.B) {
	for _, s := range fusionShapes {
		b.Run(s.activation+"/"+s.name, func(b *testing.B) {
			args := newBenchArgs[float32](false, kernels.Dims{N: s.N, C: s.C, S: s.S, Layout: kernels.ChannelsLast})
			n := args.Dims.Len()
			y, dz := make([]float32, n), make([]float32, n)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range y {
				y[i] = float32(max(0, rng.NormFloat64()))
			}
			ex := kernels.FusedGradExArgs[float32]{Dims: args.Dims, YBackprop: args.YBackprop, X: args.X, Y: y,
				Scale: args.Scale, ReserveSpace1: args.ReserveSpace1, ReserveSpace2: args.ReserveSpace2,
				ReserveSpace3: args.Scale, Offset: args.Scale, Epsilon: args.Epsilon, ActivationMode: s.activation,
				IsTraining: true, XBackprop: args.XBackprop, ScaleBackprop: args.ScaleBackprop,
				OffsetBackprop: args.OffsetBackprop}
			pairArgs := args
			pairArgs.YBackprop = dz
			relu := func(lo, hi int) {
				for i := lo; i < hi; i++ {
					if y[i] > 0 && (s.activation == "Relu" || y[i] < 6) {
						dz[i] = args.YBackprop[i]
					} else {
						dz[i] = 0
					}
				}
			}
			ways := []func(){
				func() { kernels.TrainingGrad(args) },
				func() {
					w := runtime.GOMAXPROCS(0)
					var wg sync.WaitGroup
					for i := range w {
						wg.Go(func() { relu(n*i/w, n*(i+1)/w) })
					}
					wg.Wait()
					kernels.TrainingGrad(pairArgs)
				},
				func() { kernels.FusedBatchNormGradEx(ex) },
			}
			times := make([][]float64, len(ways))
			only := os.Getenv("GOBN_BENCH_ONLY")
			for b.Loop() {
				for k, way := range ways {
					if only != "" && only != []string{"v3", "pair", "fused"}[k] {
						times[k] = append(times[k], 1)
						continue
					}
					start := time.Now()
					way()
					times[k] = append(times[k], float64(time.Since(start).Nanoseconds())/1e6)
				}
			}
			med := make([]float64, len(ways))
			for k, name := range []string{"v3", "pair", "fused"} {
				slices.Sort(times[k])
				med[k] = times[k][len(times[k])/2]
				b.ReportMetric(med[k], name+"-ms")
			}
			b.ReportMetric(med[1]/med[2], "pair/fused")
			b.ReportMetric(med[0]/med[2], "v3/fused")
		})
	}
}

// BenchmarkWorkers times float32 training gradients in chains of ten calls
// on the same tensors (as make bench-torch's chains run them), 200 µs apart
// so that each chain's first call finds its helpers asleep, on one worker
// (workers=1), on two whatever their size (two: per_worker and chunk_grain
// small; chunks of 2^13 elements move where partial sums start, so the bits,
// but not the work), and as the plan has them (plan), the ways' order turning
// from chain to chain. It reports each way's median per call in µs and one
// worker's time over each other way's (gain-two, gain-plan): the shapes
// either side of the plan's crossovers (C = 64, 2^15 to 2^19 elements) and
// ResNet-50's and MobileNetV2's of 2^17 to 2^20. Run it as make
// bench-workers does, with -cpu raised above the cores by two, so that the
// helpers are the pinned threads they are inside TensorFlow (the library
// sets GOMAXPROCS so); at -cpu 2 they are goroutines.
func BenchmarkWorkers(b *testing.B) {
	type shape struct {
		N, C, S int64
		layout  kernels.Layout
	}
	var shapes []shape
	for _, n := range []int64{1 << 15, 1 << 16, 1 << 17, 3 << 16, 1 << 18, 3 << 17, 1 << 19} {
		for _, l := range layouts {
			shapes = append(shapes, shape{8, 64, n / 8 / 64, l.layout})
		}
	}
	for _, s := range [][3]int64{{8, 512, 7 * 7}, {16, 320, 7 * 7}, {8, 256, 14 * 14}, {16, 960, 7 * 7}, {8, 2048, 7 * 7}, {16, 384, 14 * 14}} {
		for _, l := range layouts {
			shapes = append(shapes, shape{s[0], s[1], s[2], l.layout})
		}
	}
	for _, s := range shapes {
		name := fmt.Sprintf("%v/%dx%dx%d", map[kernels.Layout]string{kernels.ChannelsLast: "NHWC", kernels.ChannelsFirst: "NCHW"}[s.layout], s.N, s.C, s.S)
		b.Run(name, func(b *testing.B) {
			args := newBenchArgs[float32](false, kernels.Dims{N: s.N, C: s.C, S: s.S, Layout: s.layout})
			defer kernels.SetTuning(kernels.CurrentTuning())
			plan := kernels.DefaultTuning()
			one, two := plan, plan
			one.Workers = 1
			two.PerWorker, two.ChunkGrain = 1<<12, 1<<13
			ways := []kernels.Tuning{one, two, plan}
			times := make([][]float64, len(ways))
			const chain = 10
			round := 0
			for b.Loop() {
				round++
				for i := range ways {
					w := (i + round) % len(ways)
					kernels.SetTuning(ways[w])
					time.Sleep(200 * time.Microsecond)
					start := time.Now()
					for range chain {
						kernels.TrainingGrad(args)
					}
					times[w] = append(times[w], float64(time.Since(start).Nanoseconds())/1e3/chain)
				}
			}
			median := make([]float64, len(ways))
			for w, t := range times {
				slices.Sort(t)
				median[w] = t[len(t)/2]
			}
			b.ReportMetric(median[0], "one-µs")
			b.ReportMetric(median[1], "two-µs")
			b.ReportMetric(median[2], "plan-µs")
			b.ReportMetric(median[0]/median[1], "gain-two")
			b.ReportMetric(median[0]/median[2], "gain-plan")
		})
	}
}
