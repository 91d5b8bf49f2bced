package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// These tests hold the glue of the CPU entries (argument order, pointers,
// dtype codes) against a naive float64 reference; the kernels' own tests
// cover the math. The GPU entries need a GPU: scripts/gpucheck runs them.

func ptrOf[E any](s []E) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// elems is a tensor in one of the three element types, seen as float64.
type elems struct {
	dtype int
	f32   []float32
	u16   []uint16
}

func newElems(dtype, n int, rng *rand.Rand, fill func(*rand.Rand) float64) *elems {
	e := &elems{dtype: dtype}
	if dtype == dtFloat32 {
		e.f32 = make([]float32, n)
	} else {
		e.u16 = make([]uint16, n)
	}
	for i := range n {
		v := math.NaN()
		if fill != nil {
			v = fill(rng)
		}
		e.set(i, v)
	}
	return e
}

func (e *elems) set(i int, v float64) {
	switch e.dtype {
	case dtFloat32:
		e.f32[i] = float32(v)
	case dtHalf:
		e.u16[i] = uint16(kernels.HalfFromFloat32(float32(v)))
	case dtBFloat16:
		e.u16[i] = uint16(kernels.BFloat16FromFloat32(float32(v)))
	}
}

func (e *elems) at(i int) float64 {
	switch e.dtype {
	case dtFloat32:
		return float64(e.f32[i])
	case dtHalf:
		return float64(kernels.Half(e.u16[i]).Float32())
	}
	return float64(kernels.BFloat16(e.u16[i]).Float32())
}

func (e *elems) ptr() unsafe.Pointer {
	if e.dtype == dtFloat32 {
		return ptrOf(e.f32)
	}
	return ptrOf(e.u16)
}

func normal(r *rand.Rand) float64   { return r.NormFloat64() }
func positive(r *rand.Rand) float64 { return 0.5 + r.Float64() }

func channelOf(d kernels.Dims, i int) int {
	if d.Layout == kernels.ChannelsLast {
		return i % int(d.C)
	}
	return i / int(d.S) % int(d.C)
}

// tol is the dtype's tolerance on x_backprop, relative to its largest value:
// its absolute bound (internal/tolerance).
func tol(dtype int) float64 {
	return tolerance.ByDType[map[int]string{dtFloat32: "float", dtHalf: "half", dtBFloat16: "bfloat16"}[dtype]].Atol
}

func checkClose(t *testing.T, name string, got func(int) float64, want []float64, rel float64) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i, w := range want {
		g := got(i)
		if !(math.Abs(g-w) <= rel*(scale+math.Abs(w))+1e-30) {
			t.Fatalf("%s[%d] = %g, want %g (scale %g)", name, i, g, w, scale)
		}
	}
}

func f32s(n int, r *rand.Rand, f func(*rand.Rand) float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(f(r))
	}
	return s
}

func nans(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

var testShapes = []kernels.Dims{
	{N: 2, C: 3, S: 5, Layout: kernels.ChannelsLast},
	{N: 2, C: 3, S: 5, Layout: kernels.ChannelsFirst},
	{N: 3, C: 70, S: 9, Layout: kernels.ChannelsLast},
	{N: 1, C: 1, S: 1, Layout: kernels.ChannelsFirst},
	{N: 0, C: 4, S: 3, Layout: kernels.ChannelsLast},
}

// sums returns Σdy and Σdy·(x−μ) per channel in float64.
func sums(d kernels.Dims, dy, x *elems, mean func(int) float64) (sdy, sdx []float64) {
	sdy, sdx = make([]float64, d.C), make([]float64, d.C)
	for i := range d.Len() {
		c := channelOf(d, i)
		sdy[c] += dy.at(i)
		sdx[c] += dy.at(i) * (x.at(i) - mean(c))
	}
	return sdy, sdx
}

func TestFusedCPU(t *testing.T) {
	const eps = 1e-3
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range testShapes {
		for _, dtype := range []int{dtFloat32, dtHalf, dtBFloat16} {
			for _, training := range []bool{true, false} {
				n, C := d.Len(), int(d.C)
				dy, x := newElems(dtype, n, r, normal), newElems(dtype, n, r, normal)
				dx := newElems(dtype, n, r, nil)
				scale, mean, variance := f32s(C, r, normal), f32s(C, r, normal), f32s(C, r, positive)
				dscale, doffset := nans(C), nans(C)
				err := fusedCPU(dtype, d, training, eps, fusedHost{dy.ptr(), x.ptr(), ptrOf(scale), ptrOf(mean),
					ptrOf(variance), dx.ptr(), ptrOf(dscale), ptrOf(doffset)})
				if err != nil {
					t.Fatal(err)
				}
				sdy, sdx := sums(d, dy, x, func(c int) float64 { return float64(mean[c]) })
				wantScale, wantOffset, wantDx := make([]float64, C), make([]float64, C), make([]float64, n)
				R := float64(d.PerChannel())
				for c := range C {
					inv := 1 / math.Sqrt(float64(variance[c])+float64(float32(eps)))
					wantOffset[c], wantScale[c] = sdy[c], sdx[c]*inv
				}
				for i := range n {
					c := channelOf(d, i)
					inv := 1 / math.Sqrt(float64(variance[c])+float64(float32(eps)))
					k := float64(scale[c]) * inv
					wantDx[i] = k * dy.at(i)
					if training {
						wantDx[i] = k * (dy.at(i) - sdy[c]/R - (x.at(i)-float64(mean[c]))*inv*inv*sdx[c]/R)
					}
				}
				checkClose(t, "offset_backprop", func(i int) float64 { return float64(doffset[i]) }, wantOffset, 1e-5)
				checkClose(t, "scale_backprop", func(i int) float64 { return float64(dscale[i]) }, wantScale, 1e-5)
				checkClose(t, "x_backprop", dx.at, wantDx, tol(dtype))
			}
		}
	}
}

func TestGlobalCPU(t *testing.T) {
	const eps = 1e-3
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range testShapes {
		if d.Layout != kernels.ChannelsLast {
			continue
		}
		for _, dtype := range []int{dtFloat32, dtHalf} {
			for _, scaleAfter := range []bool{true, false} {
				n, C := d.Len(), int(d.C)
				tt, bp := newElems(dtype, n, r, normal), newElems(dtype, n, r, normal)
				m, v, gamma := newElems(dtype, C, r, normal), newElems(dtype, C, r, positive), newElems(dtype, C, r, normal)
				dx := newElems(dtype, n, r, nil)
				dm, dv, db, dg := newElems(dtype, C, r, nil), newElems(dtype, C, r, nil), newElems(dtype, C, r, nil), newElems(dtype, C, r, nil)
				err := globalCPU(dtype, d, scaleAfter, eps, globalHost{tt.ptr(), m.ptr(), v.ptr(), gamma.ptr(), bp.ptr(),
					dx.ptr(), dm.ptr(), dv.ptr(), db.ptr(), dg.ptr()})
				if err != nil {
					t.Fatal(err)
				}
				sdy, sdx := sums(d, bp, tt, m.at)
				wdm, wdv, wdg, wdx := make([]float64, C), make([]float64, C), make([]float64, C), make([]float64, n)
				k := make([]float64, C)
				for c := range C {
					s := 1 / math.Sqrt(v.at(c)+float64(float32(eps)))
					k[c] = s
					if scaleAfter {
						k[c] *= gamma.at(c)
						wdg[c] = s * sdx[c]
					}
					wdm[c] = -sdy[c] * k[c]
					wdv[c] = -0.5 * s * s * k[c] * sdx[c]
				}
				for i := range n {
					wdx[i] = bp.at(i) * k[channelOf(d, i)]
				}
				for _, o := range []struct {
					name string
					got  *elems
					want []float64
				}{{"dx", dx, wdx}, {"dm", dm, wdm}, {"dv", dv, wdv}, {"db", db, sdy}, {"dg", dg, wdg}} {
					checkClose(t, o.name, o.got.at, o.want, tol(dtype))
				}
			}
		}
	}
}

func TestReduceApplyCPU(t *testing.T) {
	const eps = 1e-3
	r := rand.New(rand.NewPCG(5, 6))
	for _, d := range testShapes {
		for _, dtype := range []int{dtFloat32, dtHalf, dtBFloat16} {
			n, C := d.Len(), int(d.C)
			dy, x := newElems(dtype, n, r, normal), newElems(dtype, n, r, normal)
			scale, mean, variance := f32s(C, r, normal), f32s(C, r, normal), f32s(C, r, positive)
			sumDy, sumDyXmu := nans(C), nans(C)
			if err := reduceCPU(dtype, d, reduceHost{dy.ptr(), x.ptr(), ptrOf(mean), ptrOf(sumDy), ptrOf(sumDyXmu)}); err != nil {
				t.Fatal(err)
			}
			sdy, sdx := sums(d, dy, x, func(c int) float64 { return float64(mean[c]) })
			checkClose(t, "sum_dy", func(i int) float64 { return float64(sumDy[i]) }, sdy, 1e-5)
			checkClose(t, "sum_dy_xmu", func(i int) float64 { return float64(sumDyXmu[i]) }, sdx, 1e-5)

			count := 3*d.PerChannel() + 1
			dx := newElems(dtype, n, r, nil)
			if err := applyCPU(dtype, d, count, eps, applyHost{dy.ptr(), x.ptr(), ptrOf(scale), ptrOf(mean), ptrOf(variance),
				ptrOf(sumDy), ptrOf(sumDyXmu), dx.ptr()}); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, n)
			for i := range n {
				c := channelOf(d, i)
				inv := 1 / math.Sqrt(float64(variance[c])+float64(float32(eps)))
				R := float64(count)
				want[i] = float64(scale[c]) * inv * (dy.at(i) - float64(sumDy[c])/R -
					(x.at(i)-float64(mean[c]))*inv*inv*float64(sumDyXmu[c])/R)
			}
			checkClose(t, "x_backprop", dx.at, want, tol(dtype))
		}
	}
}

func TestErrors(t *testing.T) {
	d := kernels.Dims{N: 1, C: 2, S: 3}
	if err := fusedCPU(7, d, true, 0, fusedHost{}); err == nil {
		t.Error("dtype 7: no error")
	}
	// BatchNormWithGlobalNormalizationGrad has no bfloat16 kernel.
	if err := globalCPU(dtBFloat16, d, true, 0, globalHost{}); err == nil {
		t.Error("global-norm bfloat16: no error")
	}
	if _, err := makeDims(2, 1, 1, 1); err == nil {
		t.Error("layout 2: no error")
	}
	if _, err := makeDims(0, -1, 1, 1); err == nil {
		t.Error("N=-1: no error")
	}
	// a null pointer for a tensor that is not empty panics inside; guard
	// turns that into an error
	if rc := guard("test", func() error { return reduceCPU(dtFloat32, d, reduceHost{}) }); rc == 0 {
		t.Error("null pointers: guard returned 0")
	}
	if !strings.Contains(lastErr.msg, "null pointer") {
		t.Errorf("last error %q, want a null-pointer panic", lastErr.msg)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(infoJSON()), &info); err != nil || info["cuda_tag"] != cuda.Built {
		t.Errorf("info %s: %v", infoJSON(), err)
	}
	if _, err := launchesJSON(); err != nil {
		t.Error(err)
	}
}
