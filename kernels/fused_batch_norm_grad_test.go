package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/kernels"
)

func TestTrainingGrad(t *testing.T) {
	eachElement(t, fusedGradTest[float32](true), fusedGradTest[float64](true),
		fusedGradTest[kernels.Half](true), fusedGradTest[kernels.BFloat16](true))
}

// TestTrainingGradArbitraryStatistics feeds TrainingGrad a mean and variance
// that are not those of x: the formula holds for any μ and σ².
func TestTrainingGradArbitraryStatistics(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			checkFused(t, true, newFusedInputs[float64](rng, false, l.layout, shapeCase{"", 3, 13, 21}), 1e-6)
		})
	}
}

func TestInferenceGrad(t *testing.T) {
	eachElement(t, fusedGradTest[float32](false), fusedGradTest[float64](false),
		fusedGradTest[kernels.Half](false), fusedGradTest[kernels.BFloat16](false))
}

// onMachine has the kernels plan for a machine of cores cores (whatever
// this one has) with GOMAXPROCS as many, until the test ends.
func onMachine(t *testing.T, cores int) {
	prev := kernels.SetMachine(kernels.Machine{Cores: cores, L2: 1 << 20, L3: 32 << 20, L3Cores: cores})
	procs := runtime.GOMAXPROCS(cores)
	t.Cleanup(func() {
		kernels.SetMachine(prev)
		runtime.GOMAXPROCS(procs)
	})
}

// requireSplit checks what SplitStats counted since ResetSplitStats: the
// call of plan p split into its chunks (or units) on all the workers the
// plan has, the machine allowing.
func requireSplit(t *testing.T, p kernels.Plan) {
	t.Helper()
	calls, ranges, workers := kernels.SplitStats()
	require.Positive(t, calls, "the case ran on one range")
	want := p.Chunks
	if p.Form == kernels.FormByChannel {
		want = p.Units
	}
	require.Equal(t, want, ranges, "ranges of a call")
	require.Equal(t, p.Workers, workers, "workers of a call")
	// SplitShares counts every range of the passes of calls with helpers
	// once, at least the plan's; a helper ran some of them or none.
	if p.Workers > 1 {
		run, helped, _ := kernels.SplitShares()
		require.GreaterOrEqual(t, run, uint64(want), "ranges SplitShares counted")
		require.LessOrEqual(t, helped, run, "ranges a helper ran")
	}
}

// TestFusedGradWorkerSplits runs the parallel path on machines of procs
// cores (helpers beyond this machine's CPUs run as goroutines), on sizes
// just over procs·65536 elements (the tests' least a worker takes,
// export_test.go) so that the plan gives every worker work, with odd S so
// that the chunks start inside channel rows and planes.
func TestFusedGradWorkerSplits(t *testing.T) {
	for _, tc := range []struct {
		procs int
		S     int
	}{{2, 10083}, {3, 15131}, {5, 25229}} {
		t.Run(fmt.Sprintf("cores=%d", tc.procs), func(t *testing.T) {
			onMachine(t, tc.procs)
			rng := rand.New(rand.NewPCG(7, uint64(tc.procs)))
			sc := shapeCase{"", 1, 13, tc.S}
			require.Greater(t, sc.N*sc.C*sc.S, tc.procs*65536)
			for _, l := range layouts {
				for _, training := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/training=%v", l.name, training), func(t *testing.T) {
						in := newFusedInputs[float32](rng, training, l.layout, sc)
						p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
						if !training {
							p = kernels.InferencePlan[float32](in.dims)
						}
						require.Equal(t, tc.procs, p.Workers, "the plan's workers")
						kernels.ResetSplitStats()
						checkFused(t, training, in, 1e-5)
						requireSplit(t, p)
						if training {
							checkFused(t, training, newFusedInputs[kernels.Half](rng, training, l.layout, sc), 1e-5)
						}
					})
				}
			}
		})
	}
}

// Two-pass gradients run each range of the second pass on the worker that
// summed it (pass.affine), and are right whether dx is a buffer of its own
// or written over dy: NHWC float32 training, and inference with rows of
// splitRowC channels or more in a tensor over maxTiledBytes (N=1, C=512,
// S=4200: 8.6 MB), which sweeps in two passes too.
func TestFusedGradAffinePasses(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 || runtime.NumCPU() < 2 {
		t.Skipf("one worker here (NumCPU %d, GOMAXPROCS %d): the passes do not split", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	rng := rand.New(rand.NewPCG(43, 44))
	for _, training := range []bool{true, false} {
		t.Run(fmt.Sprintf("training=%v", training), func(t *testing.T) {
			sc := shapeCase{"", 1, 512, 4200}
			in := newFusedInputs[float32](rng, training, kernels.ChannelsLast, sc)
			kernels.ResetSplitStats()
			checkFused(t, training, in, 1e-5)
			require.Equal(t, uint64(1), kernels.AffineSplits(), "the call's second pass was not affine")
			wantDx, wantScale, wantOffset := runFused(t, training, in)
			args := kernels.FusedGradArgs[float32]{
				Dims: in.dims, YBackprop: in.dy, X: in.x,
				Scale: in.scale, ReserveSpace1: in.mean, ReserveSpace2: in.variance, Epsilon: in.epsilon,
				ScaleBackprop: make([]float32, sc.C), OffsetBackprop: make([]float32, sc.C),
			}
			writeOver(&args.YBackprop, &args.XBackprop)
			kernels.ResetSplitStats()
			if training {
				kernels.TrainingGrad(args)
			} else {
				kernels.InferenceGrad(args)
			}
			require.Equal(t, uint64(1), kernels.AffineSplits(), "in place: the call's second pass was not affine")
			requireUnchanged(t, "x_backprop in place", args.XBackprop, wantDx)
			requireUnchanged(t, "scale_backprop", args.ScaleBackprop, wantScale)
			requireUnchanged(t, "offset_backprop", args.OffsetBackprop, wantOffset)
		})
	}
}

// TestFusedGradIndependentOfWorkers checks that the outputs are bit-equal
// whatever the number of workers, and for by-channel units (training and
// inference) and the fold's
// ranges whatever their size: the partial sums of the chunks are added in
// chunk order, whichever worker formed them and whichever range of channels
// added them up, and each channel's sums run over whole planes in one order
// whatever unit holds the channel. The machines have 1, 2 and 8 cores; the
// least a worker takes is 2^16 elements, then 2^14 (more workers, and more
// by-channel units), and units are the L2's or of 2^18 elements. The wide case's sums are added up in ranges
// (Plan.Folds) from 2 cores on; its 1999 channels end past the last whole
// vector.
func TestFusedGradIndependentOfWorkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, shape := range []struct {
		sc     shapeCase
		chunks int
		folds  bool
		units  int // the least number of by-channel unit counts over the runs
	}{
		{shapeCase{"", 3, 64, 2011}, 6, false, 3}, // 386,112 elements: 5 times 2^16, so 6 chunks (an even count)
		{shapeCase{"", 1, 1999, 200}, 6, true, 2}, // 6 chunks of 2·1999 sums: two ranges
	} {
		sc := shape.sc
		for _, l := range layouts {
			for _, form := range []struct {
				training, byChannel bool
			}{{true, true}, {true, false}, {false, true}, {false, false}} {
				training := form.training
				t.Run(fmt.Sprintf("C=%d/%s/training=%v/byChannel=%v", sc.C, l.name, training, form.byChannel), func(t *testing.T) {
					defer kernels.SetByChannel(kernels.SetByChannel(form.byChannel))
					in := newFusedInputs[float32](rng, training, l.layout, sc)
					var first [3][]float32
					var firstPlan kernels.Plan
					units := map[int]bool{}
					for i, run := range []struct{ cores, perWorker, unitElems int }{
						{1, 1 << 16, 0}, {2, 1 << 16, 0}, {8, 1 << 16, 0}, {8, 1 << 14, 0}, {2, 1 << 16, 1 << 18}} {
						onMachine(t, run.cores)
						prevPer := kernels.SetMinElementsPerWorker(run.perWorker)
						prevUnit := kernels.SetUnitElems(run.unitElems)
						p := kernels.TrainingPlan(in.dims, in.dy, in.x, nil)
						if !training {
							p = kernels.InferencePlan[float32](in.dims)
						}
						kernels.ResetSplitStats()
						dx, scaleBp, offsetBp := runFused(t, training, in)
						kernels.SetMinElementsPerWorker(prevPer)
						kernels.SetUnitElems(prevUnit)
						what := fmt.Sprintf("cores=%d perWorker=%d unitElems=%d: %+v", run.cores, run.perWorker, run.unitElems, p)
						parts := p.Chunks
						if p.Form == kernels.FormByChannel {
							parts = p.Units
						}
						require.Equal(t, min(run.cores, len(in.x)/run.perWorker, parts), p.Workers, what)
						if p.Workers > 1 {
							requireSplit(t, p)
						}
						require.Equal(t, form.byChannel && l.layout == kernels.ChannelsFirst, p.Form == kernels.FormByChannel, what)
						if shape.folds && p.Form != kernels.FormByChannel && run.cores > 1 {
							require.Greater(t, p.Folds, 1, what)
							require.Equal(t, uint64(1), kernels.FoldSplits(), "%s: the sums were added up in one range", what)
						} else {
							require.Zero(t, kernels.FoldSplits(), what)
						}
						units[p.Units] = true
						if i == 0 {
							first, firstPlan = [3][]float32{dx, scaleBp, offsetBp}, p
							if p.Form != kernels.FormByChannel {
								require.Equal(t, shape.chunks, p.Chunks)
							}
							continue
						}
						require.Equal(t, firstPlan.Chunks, p.Chunks, what)
						require.Equal(t, firstPlan.Align, p.Align, what)
						require.Equal(t, first, [3][]float32{dx, scaleBp, offsetBp}, what)
					}
					if form.byChannel && l.layout == kernels.ChannelsFirst {
						require.GreaterOrEqual(t, len(units), shape.units, "unit counts: %v", units)
					}
				})
			}
		}
	}
}

// ---------------------------------------------------------------------------
// NaN and Inf propagation.

func testFusedNaN[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sc := shapeCase{"", 3, 6, 10}
	const bad = 4 // the channel that gets the NaN or Inf
	for _, l := range layouts {
		for _, training := range []bool{true, false} {
			for _, poison := range []struct {
				name  string
				value float64
				inX   bool
			}{
				{"NaN in x", math.NaN(), true},
				{"Inf in x", math.Inf(1), true},
				{"NaN in y_backprop", math.NaN(), false},
			} {
				t.Run(fmt.Sprintf("%s/training=%v/%s", l.name, training, poison.name), func(t *testing.T) {
					in := newFusedInputs[T](rng, training, l.layout, sc)
					at := index(l.layout, sc.C, sc.S, 1, bad, 3)
					if poison.inX {
						in.x[at] = fromF64[T](poison.value)
					} else {
						in.dy[at] = fromF64[T](poison.value)
					}
					dx, scaleBp, offsetBp := runFused(t, training, in)

					// Other channels are untouched by the poison.
					want := in.want(training)
					for c := range sc.C {
						if c == bad {
							continue
						}
						assert.Falsef(t, math.IsNaN(float64(scaleBp[c])), "scale_backprop[%d] is NaN", c)
						assert.InDeltaf(t, want.ScaleBackprop[c], float64(scaleBp[c]), 1e-5*reference.MaxAbs(want.ScaleBackprop), "scale_backprop[%d]", c)
						assert.InDeltaf(t, want.OffsetBackprop[c], float64(offsetBp[c]), 1e-5*reference.MaxAbs(want.OffsetBackprop), "offset_backprop[%d]", c)
					}
					var dxOther []T
					var wantOther []float64
					for i := range dx {
						if channelOf(in.dims, i) != bad {
							dxOther = append(dxOther, dx[i])
							wantOther = append(wantOther, want.XBackprop[i])
						}
					}
					assertActivation(t, "x_backprop of other channels", dxOther, wantOther, want.XBackpropMagnitude)

					// The poisoned channel.
					// NaN, or ±Inf for an infinite x in inference (Σ dy·(x−μ) = ±Inf).
					assert.Falsef(t, isFinite(float64(scaleBp[bad])), "scale_backprop[%d] = %v, want NaN or Inf", bad, scaleBp[bad])
					if poison.inX {
						assert.Falsef(t, math.IsNaN(float64(offsetBp[bad])), "offset_backprop[%d] = NaN: Σdy does not involve x", bad)
					} else {
						assert.Truef(t, math.IsNaN(float64(offsetBp[bad])), "offset_backprop[%d] = %v, want NaN", bad, offsetBp[bad])
					}
					for i, v := range dx {
						if channelOf(in.dims, i) != bad {
							continue
						}
						isNaN := math.IsNaN(toF64(v))
						switch {
						case training:
							// Every x_backprop of the channel involves the channel's sums:
							// NaN for a NaN; ±Inf (or NaN) for an infinite x.
							if poison.inX && math.IsInf(poison.value, 0) {
								assert.Falsef(t, isFinite(toF64(v)), "training x_backprop[%d] = %v, want ±Inf or NaN", i, toF64(v))
							} else {
								assert.Truef(t, isNaN, "training x_backprop[%d] = %v, want NaN", i, toF64(v))
							}
						case poison.inX:
							// Inference: x_backprop = dy·scale·c does not involve x.
							assert.Falsef(t, isNaN, "inference x_backprop[%d] = NaN, but x_backprop = dy·scale·c does not involve x", i)
						default:
							assert.Equalf(t, i == at, isNaN, "inference x_backprop[%d] = %v", i, toF64(v))
						}
					}
					if !training {
						// In inference every finite x_backprop, poisoned channel included,
						// follows dy·scale·c.
						var got []T
						var wantDx []float64
						for i := range dx {
							if !math.IsNaN(want.XBackprop[i]) {
								got = append(got, dx[i])
								wantDx = append(wantDx, want.XBackprop[i])
							}
						}
						assertActivation(t, "inference x_backprop", got, wantDx, 0)
					}
				})
			}
		}
	}
}

func TestFusedGradNaN(t *testing.T) {
	t.Run("float32", testFusedNaN[float32])
	t.Run("float64", testFusedNaN[float64])
	t.Run("Half", testFusedNaN[kernels.Half])
	t.Run("BFloat16", testFusedNaN[kernels.BFloat16])
}

// ---------------------------------------------------------------------------
// Panics.

// mutation breaks one argument of a kernel call.
type mutation[A any] struct {
	name   string
	mutate func(*A)
}

// checkPanics checks that each call runs on valid() and panics on valid()
// broken by each mutation.
func checkPanics[A any](t *testing.T, valid func() A, mutations []mutation[A], calls map[string]func(A)) {
	for _, tc := range mutations {
		t.Run(tc.name, func(t *testing.T) {
			for name, call := range calls {
				ok, g := valid(), valid()
				assert.NotPanics(t, func() { call(ok) }, name)
				tc.mutate(&g)
				assert.Panics(t, func() { call(g) }, name)
			}
		})
	}
}

// sliceMutations breaks each slice field of the args A in turn, one element
// short, one long and nil: every slice a kernel takes is sized by its Dims.
func sliceMutations[A any]() []mutation[A] {
	var ms []mutation[A]
	typ := reflect.TypeFor[A]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() != reflect.Slice {
			continue
		}
		field := func(g *A) reflect.Value { return reflect.ValueOf(g).Elem().Field(i) }
		ms = append(ms,
			mutation[A]{f.Name + " short", func(g *A) { s := field(g); s.Set(s.Slice(0, s.Len()-1)) }},
			mutation[A]{f.Name + " long", func(g *A) { s := field(g); s.Set(reflect.MakeSlice(f.Type, s.Len()+1, s.Len()+1)) }},
			mutation[A]{f.Name + " nil", func(g *A) { field(g).SetZero() }})
	}
	return ms
}

// TestArgsPanics: each kernel panics on args its doc rules out (slices
// shorter or longer than the dims say, a layout it does not take, a count
// that cannot be).
func TestArgsPanics(t *testing.T) {
	dims := kernels.Dims{N: 2, C: 3, S: 4, Layout: kernels.ChannelsLast}
	t.Run("FusedGrad", func(t *testing.T) {
		type args = kernels.FusedGradArgs[float32]
		checkPanics(t, func() args { return fusedArgs[float32](dims) }, append(sliceMutations[args](),
			mutation[args]{"dims larger than slices", func(g *args) { g.Dims.N++ }},
			mutation[args]{"more channels than vectors", func(g *args) { g.Dims.C, g.Dims.S = 4, 3 }},
		), map[string]func(args){"TrainingGrad": kernels.TrainingGrad[float32], "InferenceGrad": kernels.InferenceGrad[float32]})
	})
	t.Run("GlobalNormalizationGrad", func(t *testing.T) {
		type args = kernels.GlobalNormalizationArgs[float32]
		checkPanics(t, func() args { return globalArgs[float32](dims) }, append(sliceMutations[args](),
			mutation[args]{"channels first", func(g *args) { g.Dims.Layout = kernels.ChannelsFirst }},
			mutation[args]{"dims larger than slices", func(g *args) { g.Dims.S++ }},
		), map[string]func(args){"GlobalNormalizationGrad": kernels.GlobalNormalizationGrad[float32]})
	})
	t.Run("GradReduce", func(t *testing.T) {
		type args = kernels.GradReduceArgs[float32]
		checkPanics(t, func() args { return reduceArgs(dims) }, sliceMutations[args](),
			map[string]func(args){"GradReduce": kernels.GradReduce[float32]})
	})
	t.Run("GradApply", func(t *testing.T) {
		type args = kernels.GradApplyArgs[float32]
		checkPanics(t, func() args { return applyArgs(dims) }, append(sliceMutations[args](),
			mutation[args]{"zero count", func(g *args) { g.Count = 0 }},
		), map[string]func(args){"GradApply": kernels.GradApply[float32]})
	})
}

// TestWorkerPanicReachesCaller checks that a panic inside a worker goroutine
// is re-raised on the calling goroutine (where capi's recover sees it) rather
// than crashing the process. The only way to make a worker panic through the
// public API is a nonsensical Dims whose product is positive but whose
// factors are not: the length checks pass and the indexing fails inside the
// workers.
func TestWorkerPanicReachesCaller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dims := kernels.Dims{N: -2, C: 2, S: -70000, Layout: kernels.ChannelsFirst}
	n := dims.Len()
	require.Equal(t, 280000, n)
	g := kernels.FusedGradArgs[float32]{
		Dims:      dims,
		YBackprop: make([]float32, n), X: make([]float32, n), XBackprop: make([]float32, n),
		Scale: make([]float32, 2), ReserveSpace1: make([]float32, 2), ReserveSpace2: make([]float32, 2),
		ScaleBackprop: make([]float32, 2), OffsetBackprop: make([]float32, 2),
	}
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		kernels.TrainingGrad(g)
	}()
	require.NotNil(t, recovered, "the worker's panic was lost")
	msg := fmt.Sprint(recovered)
	assert.True(t, strings.Contains(msg, "worker panicked"), "panic value %q", msg)
}
