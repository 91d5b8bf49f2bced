package main

// Tests of the kernel layer of capi without TensorFlow at run time (the test
// binary still links libtensorflow_framework, as the package does): inputs are
// host tensors over Go memory and outputs come from an allocator stub.
//
//   - TestComputeConcurrent runs every op of the fused and global families,
//     valid and rejected inputs, from many goroutines at once, and requires
//     each result to equal, bit for bit, the one computed alone. make test
//     runs it under -race.
//   - FuzzCompute drives kernel.compute for every op in opdef.All with
//     random dtypes, attrs, ranks and dims: it must never panic, must reject
//     with an *opdef.ArgumentError that names an input or attr, and must
//     allocate every output of an accepted input with the shape opdef says.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/fuzzbytes"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// elementSize is the size of the dtypes the tests make, including ones gobn
// has no kernel for (int32 = 3).
func elementSize(dtype opdef.DType) int {
	if dtype == 3 {
		return 4
	}
	return dtype.Size()
}

// newGoTensor returns a tensor of dtype and dims over fresh Go memory
// (8-byte aligned), filled by fill(i) converted to dtype.
func newGoTensor(dtype opdef.DType, dims []int64, fill func(i int) float64) tensor {
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	bytes := n * elementSize(dtype)
	words := make([]uint64, (bytes+7)/8+1)
	t := tensor{dtype: dtype, dims: append([]int64(nil), dims...), data: unsafe.Pointer(&words[0]), bytes: bytes}
	if fill == nil || n == 0 {
		return t
	}
	switch dtype {
	case opdef.Float:
		v := view[float32](t)
		for i := range v {
			v[i] = float32(fill(i))
		}
	case opdef.Double:
		v := view[float64](t)
		for i := range v {
			v[i] = fill(i)
		}
	case opdef.Half:
		v := view[kernels.Half](t)
		for i := range v {
			v[i] = kernels.HalfFromFloat32(float32(fill(i)))
		}
	case opdef.BFloat16:
		v := view[kernels.BFloat16](t)
		for i := range v {
			v[i] = kernels.BFloat16FromFloat32(float32(fill(i)))
		}
	case opdef.Int64:
		v := view[int64](t)
		for i := range v {
			v[i] = int64(fill(i))
		}
	}
	return t
}

// bytesOf returns a copy of t's bytes.
func bytesOf(t tensor) []byte {
	if t.bytes == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(t.data), t.bytes)...)
}

// errTooLarge is the stub allocator's refusal, as TensorFlow's
// ResourceExhausted would be.
var errTooLarge = errors.New("test allocator: output too large")

// recordingAllocator allocates outputs from Go memory and records them, and
// the input sets they were offered. With forward set, it hands an output that
// is offered that input the input itself, as TensorFlow does when nothing
// else references the input's buffer.
type recordingAllocator struct {
	outputs map[int]tensor
	offered map[int]inputSet
	forward int // an input index, or -1
	inputs  []tensor
}

func (a *recordingAllocator) allocate(i int, dtype opdef.DType, dims []int64, reuse inputSet) (tensor, error) {
	if _, dup := a.outputs[i]; dup {
		return tensor{}, fmt.Errorf("output %d allocated twice", i)
	}
	a.offered[i] = reuse
	if a.forward >= 0 && reuse&(1<<a.forward) != 0 {
		in := a.inputs[a.forward]
		if in.dtype == dtype && opdef.ShapeString(in.dims) == opdef.ShapeString(dims) {
			a.outputs[i] = in
			return in, nil
		}
	}
	n := int64(1)
	for _, d := range dims {
		if d < 0 || d != 0 && n > (1<<26)/d {
			return tensor{}, errTooLarge
		}
		n *= d
	}
	t := newGoTensor(dtype, dims, nil)
	a.outputs[i] = t
	return t, nil
}

func newRecordingAllocator() *recordingAllocator {
	return &recordingAllocator{outputs: map[int]tensor{}, offered: map[int]inputSet{}, forward: -1}
}

// inputDType is the dtype TensorFlow's type constraints give input in of a
// kernel whose attr T is dtype.
func inputDType(in opdef.Arg, dtype opdef.DType) opdef.DType {
	switch in.Type {
	case "float", "U":
		return opdef.Float
	case "int64":
		return opdef.Int64
	}
	return dtype
}

// allowsFormat reports whether op's data_format attr allows format.
func allowsFormat(op opdef.Op, format string) bool {
	a, ok := op.Attr("data_format")
	return ok && slices.Contains(a.Values, format)
}

// computeCase is one call of a kernel: its inputs, and the bytes of every
// output (or the error) it gave when run alone.
type computeCase struct {
	name    string
	k       *kernel
	inputs  []tensor
	outputs [][]byte
	err     string
}

func (c *computeCase) run() ([][]byte, string) {
	a := newRecordingAllocator()
	if err := c.k.compute(c.inputs, a.allocate, nil); err != nil {
		return nil, err.Error()
	}
	out := make([][]byte, len(c.k.op.Outputs))
	for i := range out {
		out[i] = bytesOf(a.outputs[i])
	}
	return out, ""
}

// concurrencyCases returns valid and invalid calls of the fused and global ops
// for every dtype binding, some large enough that the kernels fan out over
// goroutines (N·C·S > 2·65536).
func concurrencyCases(rng *rand.Rand) []*computeCase {
	var cases []*computeCase
	shapes := []struct {
		format string
		x      []int64
		c      int64
	}{
		{opdef.NHWC, []int64{2, 5, 7, 3}, 3},
		{opdef.NCHW, []int64{2, 3, 5, 7}, 3},
		{opdef.NHWC, []int64{4, 32, 33, 37}, 37}, // parallel
		{opdef.NCHW, []int64{3, 13, 65, 71}, 13}, // parallel
		{opdef.NDHWC, []int64{1, 2, 3, 4, 5}, 5},
		{opdef.NHWC, []int64{0, 4, 4, 6}, 6}, // empty
	}
	for _, op := range opdef.All {
		if op.Kind != opdef.FusedBatchNormGrad && op.Kind != opdef.GlobalNormalizationGrad {
			continue
		}
		for _, binding := range op.Kernels {
			dtype := binding["T"]
			for si, sh := range shapes {
				format := sh.format
				if op.Kind == opdef.GlobalNormalizationGrad {
					if format != opdef.NHWC {
						continue
					}
				} else if !allowsFormat(op, format) {
					continue
				}
				for _, training := range []bool{true, false} {
					for _, valid := range []bool{true, false} {
						k := &kernel{op: op, attrs: attrs{T: dtype, DataFormat: format, IsTraining: training,
							Epsilon: 1e-3, VarianceEpsilon: 1e-3, ScaleAfterNormalization: training}}
						inputs := make([]tensor, len(op.Inputs))
						for i, in := range op.Inputs {
							dims := []int64{sh.c}
							if len(in.Ranks) > 0 && in.Ranks[0] == 4 {
								dims = sh.x
							} else if len(in.Ranks) == 0 {
								dims = []int64{0}
							}
							if !valid && i == len(op.Inputs)-2 {
								dims = append(append([]int64(nil), dims...), 1) // wrong rank
							}
							lo := -2.0
							if strings.HasPrefix(in.Name, "reserve_space_2") || in.Name == "v" {
								lo = 0.1 // a variance
							}
							inputs[i] = newGoTensor(inputDType(in, dtype), dims, func(int) float64 { return lo + 4*rng.Float64() })
						}
						cases = append(cases, &computeCase{
							name:   fmt.Sprintf("%s/%s/shape%d/training=%v/valid=%v", op.Name, dtype, si, training, valid),
							k:      k,
							inputs: inputs,
						})
					}
				}
			}
		}
	}
	return cases
}

func TestComputeConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := concurrencyCases(rng)
	if len(cases) < 50 {
		t.Fatalf("only %d cases", len(cases))
	}
	accepted := 0
	for _, c := range cases {
		c.outputs, c.err = c.run()
		if c.err == "" {
			accepted++
		}
	}
	if accepted == 0 || accepted == len(cases) {
		t.Fatalf("%d of %d cases accepted: want a mix", accepted, len(cases))
	}

	// With -short (make race: the race detector slows the kernels tenfold)
	// every case still runs on 8 goroutines at once, once each.
	goroutines, rounds := max(16, 4*runtime.GOMAXPROCS(0)), 3
	if testing.Short() {
		goroutines, rounds = 8, 1
	}
	var wg sync.WaitGroup
	failures := make(chan string, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			order := rand.New(rand.NewPCG(uint64(g), 3)).Perm(len(cases))
			for range rounds {
				for _, i := range order {
					c := cases[i]
					out, msg := c.run()
					if msg != c.err {
						failures <- fmt.Sprintf("%s: error %q, alone %q", c.name, msg, c.err)
						return
					}
					for j := range out {
						if string(out[j]) != string(c.outputs[j]) {
							failures <- fmt.Sprintf("%s: output %d differs from the one computed alone", c.name, j)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	t.Logf("%d goroutines × %d rounds × %d cases (%d accepted), GOMAXPROCS %d",
		goroutines, rounds, len(cases), accepted, runtime.GOMAXPROCS(0))
}

// ---------------------------------------------------------------------------
// Fuzzing kernel.compute.

// fuzzDTypes are the dtypes FuzzCompute draws from: gobn's, and int32.
var fuzzDTypes = []opdef.DType{opdef.Float, opdef.Half, opdef.BFloat16, opdef.Double, opdef.Int64, 3}

var fuzzFormats = []string{opdef.NHWC, opdef.NCHW, opdef.NDHWC, opdef.NCDHW, "NWHC", ""}

// fuzzDims are dims FuzzCompute draws from: small ones, and edge values that
// are only possible beside a zero dimension.
var fuzzDims = []int64{0, 1, 2, 3, 4, 5, 7, 1 << 31, 1 << 32, 1 << 40, 3037000500}

// elements returns the element count of dims, or -1 when it is over limit.
func elements(dims []int64, limit int64) int64 {
	for _, d := range dims {
		if d == 0 {
			return 0
		}
	}
	n := int64(1)
	for _, d := range dims {
		if n > limit/d {
			return -1
		}
		n *= d
	}
	return n
}

// FuzzCompute: the op is named (so that a seed tests the op it was made for,
// whatever ops are added); attr T is one of the op's kernel bindings, as
// TensorFlow guarantees; the input dtypes need not agree with it. The mode
// byte steers towards valid inputs (bit 0: dtypes as TensorFlow's
// constraints give them; bit 1: activation inputs share one shape; bit 2:
// vector inputs sized as its channels under the format; bit 3: scalars are
// scalars).
func FuzzCompute(f *testing.F) {
	for _, op := range opdef.All {
		f.Add(op.Name, []byte{0x0f, 0, 0, 0, 0, 4, 2, 3, 4, 5})
		f.Add(op.Name, []byte{0x0f, 1, 1, 1, 0, 4, 2, 3, 4, 5})
		f.Add(op.Name, []byte{0x0f, 2, 2, 0, 0, 4, 0, 9, 9, 3})
		f.Add(op.Name, []byte{0x0f, 0, 3, 1, 0, 5, 1, 2, 3, 4, 5})
		f.Add(op.Name, []byte{0x07, 3, 0, 0, 0, 4, 2, 3, 4, 5})
		f.Add(op.Name, []byte{0x00, 0, 0, 0, 0, 4, 2, 3, 4, 5, 1, 3, 1, 3})
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		op, ok := opdef.Named(name)
		if !ok {
			t.Skip("no op of that name")
		}
		r := fuzzbytes.New(data)
		mode := r.Byte()
		binding := op.Kernels[int(r.Byte())%len(op.Kernels)]
		values := attrValues{"T": binding["T"], "U": opdef.Float, "data_format": fuzzFormats[int(r.Byte())%len(fuzzFormats)],
			"is_training": r.Byte()%2 == 0, "epsilon": []float32{1e-3, 0, -1, float32(math.NaN())}[r.Byte()%4]}
		values["variance_epsilon"], values["scale_after_normalization"] = values["epsilon"], mode&0x10 != 0
		for _, a := range op.Attrs { // an op's own: a value its kernels take, a list's count 0 or 1
			switch {
			case len(a.Accepts) > 0:
				values[a.Name] = a.Accepts[int(r.Byte())%len(a.Accepts)]
			case a.Kind == opdef.IntAttr:
				values[a.Name] = int64(r.Byte() % 2)
			}
		}
		k := &kernel{op: op}
		require.NoError(t, k.attrs.read(op, values))
		// The activation shape, and the channel count under the format.
		activation := make([]int64, 4+int(r.Byte()%2))
		for i := range activation {
			activation[i] = fuzzDims[int(r.Byte())%len(fuzzDims)]
		}
		channels := activation[len(activation)-1]
		if k.attrs.DataFormat == opdef.NCHW || k.attrs.DataFormat == opdef.NCDHW {
			channels = activation[1]
		}
		inputs := make([]tensor, len(op.Inputs))
		for i, in := range op.Inputs {
			var dims []int64
			switch {
			case mode&2 != 0 && len(in.Ranks) > 0 && in.Ranks[0] >= 4:
				dims = activation
			case mode&4 != 0 && len(in.Ranks) == 1 && in.Ranks[0] == 1:
				dims = []int64{channels}
			case mode&8 != 0 && len(in.Ranks) == 1 && in.Ranks[0] == 0:
				dims = []int64{}
			default:
				dims = make([]int64, int(r.Byte()%6))
				for j := range dims {
					dims[j] = fuzzDims[int(r.Byte())%len(fuzzDims)]
				}
			}
			dtype := inputDType(in, k.attrs.T)
			if mode&1 == 0 {
				dtype = fuzzDTypes[int(r.Byte())%len(fuzzDTypes)]
			}
			if elements(dims, 1<<12) < 0 {
				t.Skip("an input TensorFlow cannot hold in memory")
			}
			inputs[i] = newGoTensor(dtype, dims, func(j int) float64 { return float64(int(r.Byte())-128) / 16 })
		}
		a := newRecordingAllocator()
		err := k.compute(inputs, a.allocate, nil)
		if errors.Is(err, errTooLarge) {
			return
		}
		wrongDType := false
		for i, in := range op.Inputs {
			wrongDType = wrongDType || inputs[i].dtype != inputDType(in, k.attrs.T)
		}
		if wrongDType {
			// TensorFlow's type constraints rule these out: Internal, naming the op.
			if err == nil || !isInternal(err) || !strings.HasPrefix(err.Error(), op.Name+": ") {
				t.Fatalf("%s: a dtype TensorFlow rules out gave %v, want Internal naming the op", op.Name, err)
			}
			return
		}
		if err != nil {
			var argErr *opdef.ArgumentError
			if !errors.As(err, &argErr) {
				t.Fatalf("%s: error %q is %T, want *opdef.ArgumentError", op.Name, err, err)
			}
			names := []string{op.Name + ":"}
			for _, in := range op.Inputs {
				names = append(names, in.Name+" ", in.Name+":")
			}
			for _, attr := range op.Attrs {
				names = append(names, attr.Name+" ")
			}
			for _, name := range names {
				if strings.HasPrefix(err.Error(), name) {
					return
				}
			}
			t.Fatalf("%s: message %q does not start with the name of an input or attr", op.Name, err)
		}
		for i, out := range op.Outputs {
			got, ok := a.outputs[i]
			if ok != k.attrs.has(out) {
				t.Fatalf("%s: output %s allocated: %v, want %v", op.Name, out.Name, ok, k.attrs.has(out))
			}
			if !ok {
				continue // a list of none
			}
			var want []int64
			switch {
			case out.Shape.Scalar:
				want = []int64{}
			case out.Shape.Empty:
				want = []int64{0}
			default:
				want = inputs[out.Shape.Like].dims
			}
			if opdef.ShapeString(got.dims) != opdef.ShapeString(want) {
				t.Fatalf("%s: output %s has shape %s, want %s", op.Name, out.Name, opdef.ShapeString(got.dims), opdef.ShapeString(want))
			}
		}
	})
}

// TestComputeAllocatesNothing requires an accepted call of every fused and
// global op, on a tensor small enough to run on the calling goroutine, to
// allocate nothing on Go's heap: the allocator hands out outputs made
// beforehand, as TensorFlow's allocates them outside Go.
func TestComputeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	checked := 0
	for _, c := range concurrencyCases(rand.New(rand.NewPCG(1, 2))) {
		rec := newRecordingAllocator()
		if err := c.k.compute(c.inputs, rec.allocate, nil); err != nil || c.inputs[0].bytes > 1<<16 {
			continue // rejected, or parallel
		}
		outputs := make([]tensor, len(c.k.op.Outputs))
		for i := range outputs {
			outputs[i] = rec.outputs[i]
		}
		allocate := func(i int, _ opdef.DType, _ []int64, _ inputSet) (tensor, error) { return outputs[i], nil }
		var err error
		if n := testing.AllocsPerRun(50, func() { err = c.k.compute(c.inputs, allocate, nil) }); n != 0 || err != nil {
			t.Errorf("%s: %v allocations a call (error %v), want 0", c.name, n, err)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d cases checked", checked)
	}
}

// TestSyncComputeAllocatesNothing is TestComputeAllocatesNothing for the
// synchronized ops, BatchNormGradReduce and BatchNormGradApply, on every
// dtype their CPU kernels bind.
func TestSyncComputeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	x := []int64{2, 5, 7, 3} // NHWC: C = 3, N·S = 70
	checked := 0
	for _, op := range opdef.All {
		if op.Kind != opdef.GradReduce && op.Kind != opdef.GradApply {
			continue
		}
		for _, binding := range op.Kernels {
			k := &kernel{op: op, attrs: attrs{T: binding["T"], DataFormat: opdef.NHWC, Epsilon: 1e-3}}
			inputs := make([]tensor, len(op.Inputs))
			for i, in := range op.Inputs {
				dims := []int64{3}
				switch {
				case slices.Contains(in.Ranks, 4):
					dims = x
				case slices.Equal(in.Ranks, []int{0}):
					dims = nil // count
				}
				inputs[i] = newGoTensor(inputDType(in, k.attrs.T), dims, func(int) float64 { return 70 })
			}
			rec := newRecordingAllocator()
			if err := k.compute(inputs, rec.allocate, nil); err != nil {
				t.Fatalf("%s T=%s: %v", op.Name, k.attrs.T, err)
			}
			outputs := make([]tensor, len(op.Outputs))
			for i := range outputs {
				outputs[i] = rec.outputs[i]
			}
			allocate := func(i int, _ opdef.DType, _ []int64, _ inputSet) (tensor, error) { return outputs[i], nil }
			var err error
			if n := testing.AllocsPerRun(50, func() { err = k.compute(inputs, allocate, nil) }); n != 0 || err != nil {
				t.Errorf("%s T=%s: %v allocations a call (error %v), want 0", op.Name, k.attrs.T, n, err)
			}
			checked++
		}
	}
	if checked != 6 {
		t.Fatalf("%d cases checked, want 6 (two ops, three dtypes)", checked)
	}
}

// TestComputeInPlace runs every accepted call of TestComputeConcurrent's
// cases again with the allocator handing x_backprop (dx) each input it is
// offered in turn, over a copy of the inputs, and requires every output to
// equal, bit for bit, the one computed with fresh outputs. The fused ops must
// offer y_backprop and x, the global op t and backprop, and nothing else.
func TestComputeInPlace(t *testing.T) {
	want := map[opdef.Kind]inputSet{opdef.FusedBatchNormGrad: 1<<0 | 1<<1, opdef.GlobalNormalizationGrad: 1<<0 | 1<<4}
	checked := 0
	for _, c := range concurrencyCases(rand.New(rand.NewPCG(5, 6))) {
		fresh := newRecordingAllocator()
		if err := c.k.compute(c.inputs, fresh.allocate, nil); err != nil {
			continue
		}
		for i := range c.k.op.Outputs {
			if i == 0 && fresh.offered[i] != want[c.k.op.Kind] || i > 0 && fresh.offered[i] != 0 {
				t.Errorf("%s: output %d offered inputs %b", c.name, i, fresh.offered[i])
			}
		}
		for k := range c.inputs {
			if fresh.offered[0]&(1<<k) == 0 {
				continue
			}
			a := newRecordingAllocator()
			a.forward = k
			a.inputs = append([]tensor(nil), c.inputs...)
			a.inputs[k] = newGoTensor(c.inputs[k].dtype, c.inputs[k].dims, nil)
			copy(unsafe.Slice((*byte)(a.inputs[k].data), a.inputs[k].bytes), bytesOf(c.inputs[k]))
			if err := c.k.compute(a.inputs, a.allocate, nil); err != nil {
				t.Fatalf("%s over input %d: %v", c.name, k, err)
			}
			if a.outputs[0].data != a.inputs[k].data {
				t.Fatalf("%s: output 0 did not take input %d", c.name, k)
			}
			for i := range c.k.op.Outputs {
				if string(bytesOf(a.outputs[i])) != string(bytesOf(fresh.outputs[i])) {
					t.Errorf("%s over input %d: output %d differs from the one computed with fresh outputs", c.name, k, i)
				}
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("only %d calls checked", checked)
	}
	t.Logf("%d calls in place", checked)
}

// TestMakeOnlyWhatOpdefBinds: a kernel is made only for the dtypes opdef
// binds to the op's kernels on its device; any other is a broken promise of
// TensorFlow's registrations, reported as Internal when TensorFlow makes it.
func TestMakeOnlyWhatOpdefBinds(t *testing.T) {
	for _, op := range opdef.All {
		for _, onGPU := range []bool{false, true} {
			for _, dtype := range []opdef.DType{opdef.Float, opdef.Double, opdef.Half, opdef.BFloat16, opdef.Int64} {
				k := &kernel{op: op, onGPU: onGPU, attrs: attrs{T: dtype, DataFormat: opdef.NHWC}}
				err := k.bound()
				if op.HasKernel(dtype, onGPU) != (err == nil) || err != nil && !isInternal(err) {
					t.Errorf("%s T=%s onGPU=%v: %v", op.Name, dtype, onGPU, err)
				}
			}
		}
	}
}

// attrValues is an attrSource of values by name, as a TensorFlow
// construction or an XLA call gives them.
type attrValues map[string]any

// valueOf returns the value of the attr called name, of type V.
func valueOf[V any](v attrValues, name string) (V, error) {
	x, ok := v[name].(V)
	if !ok {
		return x, fmt.Errorf("no %T attr %s", x, name)
	}
	return x, nil
}

func (v attrValues) dtype(name string) (opdef.DType, error) { return valueOf[opdef.DType](v, name) }
func (v attrValues) float(name string) (float32, error)     { return valueOf[float32](v, name) }
func (v attrValues) bool(name string) (bool, error)         { return valueOf[bool](v, name) }
func (v attrValues) string(name string) (string, error)     { return valueOf[string](v, name) }
func (v attrValues) int(name string) (int64, error)         { return valueOf[int64](v, name) }

// TestReadAttrs: a kernel reads each attr its op declares by its kind, and
// refuses one it does not know (a stale attrs_gen.go) instead of dropping
// it.
func TestReadAttrs(t *testing.T) {
	v3, _ := opdef.Named("Gobn>FusedBatchNormGradV3")
	values := attrValues{"T": opdef.Half, "U": opdef.Float, "epsilon": float32(0.25), "data_format": opdef.NCDHW,
		"is_training": true}
	k := &kernel{op: v3}
	require.NoError(t, k.readAttrs(values))
	require.Equal(t, attrs{T: opdef.Half, U: opdef.Float, Epsilon: 0.25, DataFormat: opdef.NCDHW, IsTraining: true}, k.attrs)

	unknown := v3
	unknown.Attrs = append(append([]opdef.Attr(nil), v3.Attrs...), opdef.Attr{Name: "momentum", Kind: opdef.FloatAttr})
	values["momentum"] = float32(0.9)
	err := (&kernel{op: unknown}).readAttrs(values)
	require.True(t, isInternal(err), "%v", err)
	require.ErrorContains(t, err, "Gobn>FusedBatchNormGradV3 has the attr momentum, which attrs_gen.go has no field of")
}

// TestViewOfNoTensor: an output a call does not have (a list of none) is
// the zero tensor, which the kernels see as nil.
func TestViewOfNoTensor(t *testing.T) {
	require.Nil(t, view[float32](tensor{}))
	require.NotNil(t, view[float32](tensor{dtype: opdef.Float, dims: []int64{0}}))
	require.Equal(t, cuda.Ptr(0), ptr(tensor{}))
}
