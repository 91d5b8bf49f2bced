package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// TestEveryKindIsComplete requires every kind of op in opdef (a family) to
// run on both devices through what families_gen.go generates from opdef
// and the kind's kernels (cmd/gencapi names a kernel it cannot find by its
// file; python_tests/test_kinds.py checks the kind's Python module):
//
//  1. the CPU kernel: every op of the kind, on every dtype its CPU kernels
//     bind, computes valid inputs and writes every output it binds;
//  2. the GPU kernel: every op of the kind has GPU kernels, and a call of
//     each GPU binding reaches the CUDA launch (its stream is asked for).
func TestEveryKindIsComplete(t *testing.T) {
	for _, kind := range opdef.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			for _, op := range opdef.All {
				if op.Kind != kind {
					continue
				}
				for _, b := range op.Kernels {
					requireCPUKernel(t, op, b["T"])
				}
				require.NotEmpty(t, op.GPUKernels, "%s has no GPU kernels", op.Name)
				for _, b := range op.GPUKernels {
					requireGPULaunch(t, op, b["T"])
				}
			}
		})
	}
}

// validInputs returns valid inputs of op for T = dtype, channels last:
// activations [2, 3, 4, 5] (C = 5, N·S = 24), per-channel tensors [5] of
// values in [0.5, 1.5), a scalar of 48 (a count over two replicas), inputs
// of any rank [0].
func validInputs(op opdef.Op, dtype opdef.DType) []tensor {
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]tensor, len(op.Inputs))
	for i, arg := range op.Inputs {
		var dims []int64
		fill := func(int) float64 { return 0.5 + rng.Float64() }
		switch {
		case len(arg.Ranks) == 0:
			dims = []int64{0}
		case arg.Ranks[0] >= 4:
			dims = []int64{2, 3, 4, 5}
			fill = func(int) float64 { return 4*rng.Float64() - 2 }
		case arg.Ranks[0] == 0:
			dims, fill = []int64{}, func(int) float64 { return 48 }
		default:
			dims = []int64{5}
		}
		in[i] = newGoTensor(inputDType(arg, dtype), dims, fill)
	}
	return in
}

// validAttrs are attrs of every op, with T = dtype (U float), channels last, in
// training, scaled after normalization, every other attr its default as
// opdef gives it, but a list's count 1 (so that the list is written too).
func validAttrs(dtype opdef.DType) attrs {
	values := attrValues{"T": dtype, "U": opdef.Float, "data_format": opdef.NHWC, "is_training": true, "epsilon": float32(1e-3),
		"variance_epsilon": float32(1e-3), "scale_after_normalization": true}
	every := opdef.Op{Name: "every op's attrs"}
	for _, op := range opdef.All {
		for _, a := range op.Attrs {
			if !slices.ContainsFunc(every.Attrs, func(b opdef.Attr) bool { return b.Name == a.Name }) {
				every.Attrs = append(every.Attrs, a)
			}
			if _, set := values[a.Name]; !set && a.Default != nil {
				values[a.Name] = a.Default
			}
			for _, out := range op.Outputs {
				if out.Number == a.Name {
					values[a.Name] = int64(1)
				}
			}
		}
	}
	var a attrs
	if err := a.read(every, values); err != nil {
		panic(err)
	}
	return a
}

func requireCPUKernel(t *testing.T, op opdef.Op, dtype opdef.DType) {
	k := &kernel{op: op, attrs: validAttrs(dtype)}
	a := newRecordingAllocator()
	require.NoError(t, k.compute(validInputs(op, dtype), a.allocate, nil), "%s T=%s on the CPU", op.Name, dtype)
	for i, out := range op.Outputs {
		if out.Shape.Empty {
			continue
		}
		written := slices.ContainsFunc(bytesOf(a.outputs[i]), func(b byte) bool { return b != 0 })
		require.True(t, written, "%s T=%s on the CPU: %s is all zeros", op.Name, dtype, out.Name)
	}
}

// reachedLaunch is what launchProbe panics with when a GPU call asks for
// its stream: the family's GPU function reached the CUDA launch, which
// must not run on the probe's made-up addresses.
type reachedLaunch struct{}

// launchProbe is a GPU call with no device: its workspace a made-up
// address, and no stream to give.
type launchProbe struct{}

func (launchProbe) temp(int64) (uintptr, error) { return 1 << 40, nil }

func (launchProbe) stream() (_ cuda.Stream, _ error) { panic(reachedLaunch{}) }

func requireGPULaunch(t *testing.T, op opdef.Op, dtype opdef.DType) {
	require.True(t, tfStream.on.Load(), "the stream rule asks for the call's stream")
	k := &kernel{op: op, onGPU: true, attrs: validAttrs(dtype)}
	reached, err := func() (reached bool, err error) {
		defer func() {
			if p := recover(); p != nil {
				if _, reached = p.(reachedLaunch); !reached {
					panic(p)
				}
			}
		}()
		return false, k.compute(validInputs(op, dtype), newRecordingAllocator().allocate, launchProbe{})
	}()
	require.True(t, reached, "%s T=%s on the GPU did not reach the CUDA launch (returned %v)", op.Name, dtype, err)
}
