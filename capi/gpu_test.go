//go:build cuda

package main

import (
	"testing"
	"unsafe"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// gpuInputs returns valid inputs of op for T = dtype: activations
// [2, 3, 4, 5] (channels last, C = 5), per-channel tensors [5], count 120.
func gpuInputs(op opdef.Op, dtype opdef.DType) []tensor {
	in := make([]tensor, len(op.Inputs))
	for i, arg := range op.Inputs {
		dims := []int64{5}
		switch {
		case arg.Name == "count":
			dims = []int64{}
		case len(arg.Ranks) > 0 && arg.Ranks[0] >= 4:
			dims = []int64{2, 3, 4, 5}
		}
		in[i] = newGoTensor(inputDType(arg, dtype), dims, func(int) float64 { return 120 })
	}
	return in
}

// fakeGPUCall is a TensorFlow call as a GPU kernel sees it, with no device:
// its workspace a made-up address, and no stream (the synchronizing rule).
type fakeGPUCall struct{ temps []int64 }

func (f *fakeGPUCall) temp(bytes int64) (uintptr, error) {
	f.temps = append(f.temps, bytes)
	return 1 << 40, nil
}

func (f *fakeGPUCall) stream() (cuda.Stream, error) { return 0, errNoStream }

// TestGPUKernelsWithoutDriver runs every GPU kernel binding on a machine
// without a GPU driver: each call must end in a clear error naming the
// driver library, never a crash.
func TestGPUKernelsWithoutDriver(t *testing.T) {
	if cuda.Available() == nil {
		t.Skip("a GPU driver is present: this test is for machines without one")
	}
	for _, op := range opdef.All {
		require.NotEmpty(t, op.GPUKernels, op.Name)
		for _, b := range op.GPUKernels {
			k := &kernel{op: op, onGPU: true, attrs: validAttrs(b["T"])}
			dev := &fakeGPUCall{}
			err := k.compute(gpuInputs(op, b["T"]), newRecordingAllocator().allocate, dev)
			require.ErrorContains(t, err, "libcuda.so.1", "%s T=%s", op.Name, b["T"])
			require.NotEmpty(t, dev.temps, "%s T=%s: the workspace is allocated before the driver is needed", op.Name, b["T"])
		}
	}
}

// TestGPURejectsBadInputLikeCPU checks that a GPU kernel validates its
// inputs with the CPU kernel's rules and messages before it needs a GPU.
func TestGPURejectsBadInputLikeCPU(t *testing.T) {
	for _, op := range opdef.All {
		in := gpuInputs(op, opdef.Float)
		in[1].dims = []int64{2, 3, 4, 6} // x (m of the global normalization) no longer fits
		if op.Kind == opdef.GlobalNormalizationGrad {
			in[1].dims = []int64{6}
		}
		var msgs []string
		for _, onGPU := range []bool{false, true} {
			k := &kernel{op: op, onGPU: onGPU, attrs: validAttrs(opdef.Float)}
			err := k.compute(in, newRecordingAllocator().allocate, &fakeGPUCall{})
			var argErr *opdef.ArgumentError
			require.ErrorAs(t, err, &argErr, "%s on GPU=%v", op.Name, onGPU)
			msgs = append(msgs, err.Error())
		}
		require.Equal(t, msgs[0], msgs[1], op.Name)
	}
}

// TestEmptyTensorTellsNoDevice: TensorFlow gives an empty tensor on a GPU an
// address that is no device memory, so ptr must hand the CUDA path 0 for it
// (the call's device is then told by a tensor with elements, e.g.
// scale_backprop), and the address of any tensor with elements.
func TestEmptyTensorTellsNoDevice(t *testing.T) {
	empty := newGoTensor(opdef.Float, []int64{0, 4, 4, 8}, func(int) float64 { return 1 })
	empty.data = unsafe.Pointer(&[1]byte{}) // TensorFlow's placeholder: not nil
	require.Zero(t, ptr(empty))
	full := newGoTensor(opdef.Float, []int64{8}, func(int) float64 { return 1 })
	require.Equal(t, cuda.Ptr(uintptr(full.data)), ptr(full))
}
