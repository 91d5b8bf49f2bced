package cuda_test

// The GPU check's tensors (check_test.go): elements as bytes, tensors between
// guards, and the targets that run a call, with the CPU one.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// ---------------------------------------------------------------------------
// Elements as bytes.

func size(dt cuda.DType) int { return int(dt.Size()) }

// load returns element i of b as a float64 (exact).
func load(dt cuda.DType, b []byte, i int) float64 {
	switch dt {
	case cuda.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case cuda.Float16:
		return float64(kernels.Half(binary.LittleEndian.Uint16(b[2*i:])).Float32())
	default:
		return float64(kernels.BFloat16(binary.LittleEndian.Uint16(b[2*i:])).Float32())
	}
}

// store rounds v to dt (through float32) into element i of b.
func store(dt cuda.DType, b []byte, i int, v float64) {
	switch dt {
	case cuda.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case cuda.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(kernels.HalfFromFloat32(float32(v))))
	default:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(kernels.BFloat16FromFloat32(float32(v))))
	}
}

// view returns b as a slice of E.
func view[E any](b []byte) []E {
	var e E
	n := len(b) / int(unsafe.Sizeof(e))
	if n == 0 {
		return []E{}
	}
	return unsafe.Slice((*E)(unsafe.Pointer(&b[0])), n)
}

// parallel runs f over [0, n) in blocks on every CPU and returns each
// block's result, in order (so that sums over them are deterministic).
func parallel[R any](n int, f func(lo, hi int) R) []R {
	blocks := (n + block - 1) / block
	out := make([]R, blocks)
	next := make(chan int, blocks)
	for b := range blocks {
		next <- b
	}
	close(next)
	var wg sync.WaitGroup
	for range min(blocks, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for b := range next {
				out[b] = f(b*block, min(n, (b+1)*block))
			}
		})
	}
	wg.Wait()
	return out
}

// ---------------------------------------------------------------------------
// Tensors.

// tensor is one argument of a call, as the host image each target starts
// from: pre elements (guards, and the offset of an unaligned tensor), the n
// elements, post guard elements.
type tensor struct {
	name       string
	dt         cuda.DType
	n          int
	pre, post  int
	before     []byte
	output     bool
	activation bool   // of the activation's size (x_backprop, dx)
	tol        string // an output's tolerance, by dtype name
	workspace  bool
}

// newTensor returns a tensor of n elements of dt, offset elements past a
// guard of guardBytes, its guards holding the sentinel and its elements
// zero.
func newTensor(name string, dt cuda.DType, n, offset, guardBytes int) *tensor {
	g := guardBytes / size(dt)
	t := &tensor{name: name, dt: dt, n: n, pre: g + offset, post: g}
	t.before = make([]byte, (t.pre+n+t.post)*size(dt))
	for i := range t.pre {
		store(dt, t.before, i, sentinel)
	}
	for i := t.pre + n; i < t.pre+n+t.post; i++ {
		store(dt, t.before, i, sentinel)
	}
	return t
}

// elems returns the tensor's elements within an image of it.
func (t *tensor) elems(image []byte) []byte {
	return image[t.pre*size(t.dt) : (t.pre+t.n)*size(t.dt)]
}

// guardsOK reports whether image's guards are what the tensor started with.
func (t *tensor) guardsOK(image []byte) bool {
	a, b := t.pre*size(t.dt), (t.pre+t.n)*size(t.dt)
	return bytes.Equal(image[:a], t.before[:a]) && bytes.Equal(image[b:], t.before[b:])
}

// poison fills the elements with NaN.
func (t *tensor) poison() {
	e := t.elems(t.before)
	if t.n > 0 {
		store(t.dt, e, 0, math.NaN())
		for i := size(t.dt); i < len(e); i *= 2 {
			copy(e[i:], e[:i])
		}
	}
}

// fill sets the elements to random values, none zero: normal·scale+shift,
// or uniform in [shift, shift+scale).
func (t *tensor) fill(seed uint64, uniform bool, scale, shift float64) {
	e := t.elems(t.before)
	parallel(t.n, func(lo, hi int) struct{} {
		rng := rand.New(rand.NewPCG(seed, uint64(lo)))
		for i := lo; i < hi; i++ {
			v := rng.NormFloat64()*scale + shift
			if uniform {
				v = rng.Float64()*scale + shift
			}
			store(t.dt, e, i, v)
			if load(t.dt, e, i) == 0 {
				store(t.dt, e, i, 0.5)
			}
		}
		return struct{}{}
	})
}

// vector returns the per-channel tensor's elements as float64.
func (t *tensor) vector() []float64 {
	e := t.elems(t.before)
	v := make([]float64, t.n)
	for i := range v {
		v[i] = load(t.dt, e, i)
	}
	return v
}

// ---------------------------------------------------------------------------
// Targets.

// memory is where a target's tensors live: the GPU's (cudatest.Device) or
// the host's.
type memory interface {
	Alloc(bytes int) (uintptr, error)
	Free(p uintptr) error
	Write(dst uintptr, src []byte) error
	Read(dst []byte, src uintptr) error
}

// call is one op as a target runs it: its kind's kernels, its mode and
// attrs, and its tensors' addresses in the target's memory, by name (0 for
// an empty tensor of the plain variant).
type call struct {
	kind           *kindCall
	mode           string
	attrs          map[string]any
	dims           kernels.Dims
	dt             cuda.DType
	count          int64
	addr           map[string]uintptr
	stream         uintptr // 0: the stream0 variant
	workspace      uintptr
	workspaceBytes int64
}

// target runs calls: the GPU, or gobn's CPU kernels on host memory.
type target struct {
	name string
	mem  memory
	// gpu: the target reads the inputs a GPU kernel takes where they differ
	// from the CPU kernel's (opCase.gpuInputs: the training gradient's
	// inverse standard deviation, not the variance).
	gpu bool
	// stream is the stream a call enqueues on (the stream0 variant passes
	// 0); workspaceBytes what a call needs (nil: none).
	stream         uintptr
	workspaceBytes func(c *call) int64
	run            func(c *call) error
	// launches counts kernel launches by name (nil: not a GPU); broken
	// reports whether the target can no longer run anything.
	launches func() map[string]uint64
	broken   func() bool
}

// hostMemory is memory in Go slices; its addresses are the slices' own.
type hostMemory struct {
	mu     sync.Mutex
	allocs map[uintptr][]byte
}

func newHostMemory() *hostMemory { return &hostMemory{allocs: map[uintptr][]byte{}} }

func (m *hostMemory) Alloc(n int) (uintptr, error) {
	b := make([]byte, max(n, 1))
	p := uintptr(unsafe.Pointer(&b[0]))
	m.mu.Lock()
	m.allocs[p] = b
	m.mu.Unlock()
	return p, nil
}

func (m *hostMemory) Free(p uintptr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.allocs[p]; !ok {
		return fmt.Errorf("host memory: free of %#x, not allocated", p)
	}
	delete(m.allocs, p)
	return nil
}

// bytes returns the n bytes at p, which must lie inside one allocation.
func (m *hostMemory) bytes(p uintptr, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for base, b := range m.allocs {
		if p >= base && p+uintptr(n) <= base+uintptr(len(b)) {
			return b[p-base : p-base+uintptr(n)], nil
		}
	}
	return nil, fmt.Errorf("host memory: %d bytes at %#x lie outside every allocation", n, p)
}

func (m *hostMemory) Write(dst uintptr, src []byte) error {
	b, err := m.bytes(dst, len(src))
	if err == nil {
		parallelCopy(b, src)
	}
	return err
}

func (m *hostMemory) Read(dst []byte, src uintptr) error {
	b, err := m.bytes(src, len(dst))
	if err == nil {
		parallelCopy(dst, b)
	}
	return err
}

// parallelCopy copies src to dst, a block of bytes on each CPU.
func parallelCopy(dst, src []byte) {
	parallel(len(src), func(lo, hi int) struct{} { copy(dst[lo:hi], src[lo:hi]); return struct{}{} })
}

// parallelEqual reports whether a and b hold the same bytes.
func parallelEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for _, same := range parallel(len(a), func(lo, hi int) bool { return bytes.Equal(a[lo:hi], b[lo:hi]) }) {
		if !same {
			return false
		}
	}
	return true
}

// equalAt reports whether the bytes at address a of m are want, reading
// from a device a chunk at a time.
func equalAt(m memory, a uintptr, want []byte) (bool, error) {
	if h, ok := m.(*hostMemory); ok {
		b, err := h.bytes(a, len(want))
		return err == nil && parallelEqual(b, want), err
	}
	buf := make([]byte, min(len(want), 64<<20))
	for off := 0; off < len(want); off += len(buf) {
		n := min(len(buf), len(want)-off)
		if err := m.Read(buf[:n], a+uintptr(off)); err != nil {
			return false, err
		}
		if !parallelEqual(buf[:n], want[off:off+n]) {
			return false, nil
		}
	}
	return true, nil
}

// cpuTarget runs gobn's CPU kernels on host memory.
func cpuTarget() *target {
	m := newHostMemory()
	return &target{name: "cpu", mem: m, run: func(c *call) error { return runCPU(m, c) }}
}

// slice returns the n elements of E of the tensor called name in host
// memory m.
func slice[E any](m *hostMemory, c *call, name string, n int) []E {
	var e E
	if n == 0 {
		return []E{}
	}
	b, err := m.bytes(c.addr[name], n*int(unsafe.Sizeof(e)))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return view[E](b)
}

func runCPU(m *hostMemory, c *call) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	c.kind.cpu[c.dt](m, c)
	return nil
}
