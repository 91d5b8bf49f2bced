package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

// Where x_backprop has a buffer of its own and the tensor is large, the
// training gradient writes it with non-temporal stores (see
// kernels.SetMinStreamElements). Those loops do the arithmetic of the
// ordinary ones, so with the threshold lowered to one element, every shape
// case must give x_backprop bit for bit as the ordinary stores do (which
// the tests beside these check against the float64 references).

// alignedFloat32s returns n float32s starting on a 64-byte boundary (as
// TensorFlow aligns its buffers), set to NaN so that an element the kernel
// skips shows, and a check that the guard values around them are unchanged.
func alignedFloat32s(n int) ([]float32, func(t *testing.T)) {
	buf := make([]float32, n+32)
	skip := 16 + (64-int(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%64))%64/4
	guard := math.Float32frombits(0x7fc0dead)
	for i := range buf {
		buf[i] = guard
	}
	out := buf[skip : skip+n : skip+n]
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return out, func(t *testing.T) {
		t.Helper()
		for i, v := range buf {
			if (i < skip || i >= skip+n) && math.Float32bits(v) != 0x7fc0dead {
				t.Fatalf("guard at %d overwritten: %v", i-skip, v)
			}
		}
	}
}

// streamCases add, to shapeCases, channels-first runs that are whole
// vectors (S a multiple of 8), on one goroutine and split.
var streamCases = append([]shapeCase{
	{"runs of 16", 2, 3, 16},
	{"parallel runs of 4112", 2, 16, 4112},
}, shapeCases...)

// mustStream are the cases that stream with the vector loops, whatever the
// CPU: channels-last rows and channels-first runs that are multiples of 8.
var mustStream = map[string]bool{
	"ChannelsLast/C=64": true, "ChannelsLast/parallel C=64": true, "ChannelsLast/parallel C=1024": true,
	"ChannelsLast/C=2048": true, "ChannelsFirst/runs of 16": true, "ChannelsFirst/parallel runs of 4112": true,
}

func TestTrainingGradStream(t *testing.T) {
	defer kernels.SetMinStreamElements(kernels.SetMinStreamElements(1))
	rng := rand.New(rand.NewPCG(41, 43))
	streamed := 0
	for _, sc := range streamCases {
		// A large channels-first gradient also in its other form (kernels.SetByChannel).
		for _, l := range []struct {
			name, suffix string
			layout       kernels.Layout
			byChannel    bool
		}{
			{"ChannelsLast", "", kernels.ChannelsLast, true},
			{"ChannelsFirst", "", kernels.ChannelsFirst, true},
			{"ChannelsFirst", "/twoPass", kernels.ChannelsFirst, false},
		} {
			name := l.name + "/" + sc.name
			t.Run(name+l.suffix, func(t *testing.T) {
				defer kernels.SetByChannel(kernels.SetByChannel(l.byChannel))
				in := newFusedInputs[float32](rng, true, l.layout, sc)
				prev := kernels.SetMinStreamElements(math.MaxInt)
				wantDx, wantScale, wantOffset := runFused(t, true, in)
				kernels.SetMinStreamElements(prev)

				dx, checkGuards := alignedFloat32s(len(in.x))
				args := kernels.FusedGradArgs[float32]{
					Dims: in.dims, YBackprop: in.dy, X: in.x,
					Scale: in.scale, ReserveSpace1: in.mean, ReserveSpace2: in.variance, Epsilon: in.epsilon,
					XBackprop:     dx,
					ScaleBackprop: make([]float32, sc.C), OffsetBackprop: make([]float32, sc.C),
				}
				streams := kernels.Streams(in.dims, args.YBackprop, args.X, args.XBackprop)
				if kernels.SIMD() {
					if mustStream[name] {
						require.True(t, streams, "does not stream")
					}
				} else {
					require.False(t, streams, "streams without the vector loops")
				}
				if streams {
					streamed++
				}
				kernels.TrainingGrad(args)
				checkGuards(t)
				requireUnchanged(t, "x_backprop streamed", args.XBackprop, wantDx)
				requireUnchanged(t, "scale_backprop", args.ScaleBackprop, wantScale)
				requireUnchanged(t, "offset_backprop", args.OffsetBackprop, wantOffset)
			})
		}
	}
	if kernels.SIMD() {
		require.GreaterOrEqual(t, streamed, len(mustStream))
	}
}

// TestStreamsOnlyWhere checks the cases that must not stream: x_backprop in
// place, misaligned, below the threshold, in half precision, or made of rows
// or runs that are not whole vectors.
func TestStreamsOnlyWhere(t *testing.T) {
	if !kernels.SIMD() {
		t.Skip("no vector loops in this build or on this CPU: nothing streams (TestTrainingGradStream checks)")
	}
	defer kernels.SetMinStreamElements(kernels.SetMinStreamElements(1))
	d := kernels.Dims{N: 2, C: 64, S: 9, Layout: kernels.ChannelsLast}
	n := d.Len()
	dy, _ := alignedFloat32s(n)
	x, _ := alignedFloat32s(n)
	dx, _ := alignedFloat32s(n + 1)
	require.True(t, kernels.Streams(d, dy, x, dx[:n]))
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"over y_backprop", kernels.Streams(d, dy, x, dy)},
		{"over x", kernels.Streams(d, dy, x, x)},
		{"misaligned", kernels.Streams(d, dy, x, dx[1:])},
		{"runs of 9", kernels.Streams(kernels.Dims{N: 2, C: 64, S: 9, Layout: kernels.ChannelsFirst}, dy, x, dx[:n])},
		{"rows of 3", kernels.Streams(kernels.Dims{N: 1, C: 3, S: 2, Layout: kernels.ChannelsLast}, dy[:6], x[:6], dx[:6])},
		{"half", kernels.Streams(d, make([]kernels.Half, n), make([]kernels.Half, n), make([]kernels.Half, n))},
		{"below the threshold", func() bool {
			defer kernels.SetMinStreamElements(kernels.SetMinStreamElements(n + 1))
			return kernels.Streams(d, dy, x, dx[:n])
		}()},
	} {
		require.False(t, c.ok, fmt.Sprintf("%s streams", c.name))
	}
}
