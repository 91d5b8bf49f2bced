package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// TestEveryKindIsComplete requires every kind of op in opdef (a family) to
// have what an op needs beyond opdef and its generated files, so that an op
// of a new kind fails here until each is written. CONTRIBUTING.md's
// "Adding an op" lists them from this test:
//
//  1. capi: the family's file, capi/<kind in snake case>.go, defining the
//     family's CPU function and its GPU function, which take the args of
//     its kernels (families_gen.go's run method calls them with the
//     tensors set);
//  2. the CPU kernel: every op of the kind, on every dtype its CPU kernels
//     bind, computes valid inputs and writes every output it binds;
//  3. the GPU kernel: every op of the kind has GPU kernels, and a call of
//     each GPU binding reaches the CUDA launch (its stream is asked for);
//  4. the Python gradient: python/gobn/_gradients.py's GRADIENTS has one;
//  5. the pfor converter: python/gobn/_pfor.py's KIND_CONVERTERS has one.
func TestEveryKindIsComplete(t *testing.T) {
	gradients := pythonTable(t, "_gradients.py", "GRADIENTS")
	converters := pythonTable(t, "_pfor.py", "KIND_CONVERTERS")
	for _, kind := range opdef.Kinds() {
		t.Run(kind.String(), func(t *testing.T) {
			file, ok := familyFiles[kind]
			require.True(t, ok, "families_gen.go has no family file for %s: run go generate ./capi", kind)
			src, err := os.ReadFile(file)
			require.NoError(t, err, "the family file of %s", kind)
			method := strings.ToLower(kind.String()[:1]) + kind.String()[1:]
			for _, def := range []string{"func " + method + "CPU[", "func " + method + "GPU("} {
				require.Contains(t, string(src), "\n"+def, "%s must define %s…", file, def)
			}
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
			require.Contains(t, gradients, kind.String(), "python/gobn/_gradients.py: GRADIENTS has no gradient for %s", kind)
			require.Contains(t, converters, kind.String(), "python/gobn/_pfor.py: KIND_CONVERTERS has no converter for %s", kind)
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

func requireCPUKernel(t *testing.T, op opdef.Op, dtype opdef.DType) {
	k := &kernel{op: op, dtype: dtype, dataFormat: opdef.NHWC, isTraining: true, epsilon: 1e-3, scaleAfterNormalization: true}
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
	k := &kernel{op: op, onGPU: true, dtype: dtype, dataFormat: opdef.NHWC, isTraining: true, epsilon: 1e-3}
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

// pythonTable returns the entries of the dict literal name in
// python/gobn/file, {"Kind": function, ...}, keeping those whose function
// the file defines.
func pythonTable(t *testing.T, file, name string) map[string]string {
	src, err := os.ReadFile(filepath.Join("..", "python", "gobn", file))
	require.NoError(t, err)
	block := regexp.MustCompile(`(?ms)^` + name + ` = \{\n(.*?)^\}`).FindSubmatch(src)
	require.NotNil(t, block, "%s has no dict %s", file, name)
	table := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+"(\w+)": (\w+),$`).FindAllSubmatch(block[1], -1) {
		if regexp.MustCompile(`(?m)^def ` + string(m[2]) + `\(`).Match(src) {
			table[string(m[1])] = string(m[2])
		}
	}
	require.NotEmpty(t, table, "%s: %s has no entries", file, name)
	return table
}
