package kernels

import (
	"fmt"
	"sync"
	"unsafe"
)

// FusedGradExArgs are the arguments of FusedBatchNormGradEx: FusedGradArgs'
// and the output y of the activation that followed the batch norm. Inputs
// are read only; outputs are fully overwritten. XBackprop may be YBackprop
// or X itself (see the package doc).
type FusedGradExArgs[T Element] struct {
	Dims Dims
	// YBackprop, X and Y have Dims.Len() elements in Dims.Layout: the
	// gradient of the activation's output, the batch norm's input and the
	// activation's output.
	YBackprop, X, Y []T
	// Scale, ReserveSpace1 and ReserveSpace2 have Dims.C elements, as
	// FusedGradArgs' (the mean μ and the variance σ²).
	Scale, ReserveSpace1, ReserveSpace2 []float32
	// ReserveSpace3 and Offset are what cuDNN's gradient takes; the kernel
	// reads neither.
	ReserveSpace3, Offset []float32
	Epsilon               float32
	// ActivationMode is the activation: Identity, Relu or Relu6.
	ActivationMode string
	// NumSideInputs is 1 where SideInputBackprop is asked for, else 0.
	NumSideInputs int64
	// IsTraining says which gradient of dz is computed: TrainingGrad's or
	// InferenceGrad's.
	IsTraining bool
	// XBackprop has Dims.Len() elements; ScaleBackprop and OffsetBackprop
	// Dims.C. SideInputBackprop has Dims.Len() elements where NumSideInputs
	// is 1, and is nil otherwise.
	XBackprop                     []T
	ScaleBackprop, OffsetBackprop []float32
	SideInputBackprop             []T
}

// activation is an activation mode: the bounds of y outside which its
// derivative is 0 (Identity none).
type activation struct {
	identity bool
	upper    bool // Relu6: 0 < y < 6; Relu: 0 < y
}

// on reports whether the activation's derivative is 1 at its output y
// (false for a NaN y).
func (a activation) on(y float64) bool { return a.identity || y > 0 && (!a.upper || y < 6) }

// activationOf returns the activation called mode. It panics on another
// than Identity, Relu and Relu6.
func activationOf(mode string) activation {
	switch mode {
	case "Identity":
		return activation{identity: true}
	case "Relu":
		return activation{}
	case "Relu6":
		return activation{upper: true}
	}
	panic(fmt.Sprintf("kernels: activation mode %q, want Identity, Relu or Relu6", mode))
}

// FusedBatchNormGradEx computes the gradient of batch normalization fused
// with its activation's. With y the activation's output, its gradient
//
//	dz = dy · m,  m = 1 where 0 < y (Relu), 0 < y < 6 (Relu6), always (Identity); else 0
//
// is what stock's ReluGrad and Relu6Grad compute from y (dy·0 is NaN where
// dy is NaN or infinite, as theirs), and the outputs are FusedBatchNormGrad's
// of dz (TrainingGrad's where g.IsTraining, InferenceGrad's otherwise),
// with side_input_backprop = dz, the gradient of a side input added before
// the activation. It panics if slice lengths disagree with Dims, or on
// another activation mode.
//
// dz is written to no tensor but side_input_backprop: the passes of
// FusedBatchNormGrad form it where they read dy (gradMask): in the vector
// loops' registers for float32 channels-last rows (inRegisters) and
// channels-first units (planesInRegisters) on AVX-512, in bfloat16 blocks
// for the bfloat16 row loops (bfloat16Rows), and elsewhere block by block
// in a buffer the block's loops then read as dy. Per float32 element a
// two-pass training gradient reads dy, y and x and writes m's bit in its
// first pass, reads dy, x and the bit and writes x_backprop in its second:
// about 24 bytes, where ReluGrad then FusedBatchNormGradV3 move 32. A
// by-channel unit reads y again in its second pass, from cache (no bits);
// inference is one pass over dy, y and x.
func FusedBatchNormGradEx[T Element](g FusedGradExArgs[T]) {
	act := activationOf(g.ActivationMode)
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X, g.Y, g.XBackprop},
		[][]float32{g.Scale, g.ReserveSpace1, g.ReserveSpace2, g.Offset, g.ScaleBackprop, g.OffsetBackprop})
	var side []T
	if g.NumSideInputs > 0 {
		checkLengths(g.Dims, [][]T{g.SideInputBackprop}, [][]float32{})
		side = g.SideInputBackprop
	}
	v3 := FusedGradArgs[T]{Dims: g.Dims, YBackprop: g.YBackprop, X: g.X, Scale: g.Scale,
		ReserveSpace1: g.ReserveSpace1, ReserveSpace2: g.ReserveSpace2, Epsilon: g.Epsilon, IsTraining: g.IsTraining,
		XBackprop: g.XBackprop, ScaleBackprop: g.ScaleBackprop, OffsetBackprop: g.OffsetBackprop}
	o := maskOf[T]{on: !act.identity || side != nil, act: act, y: g.Y, side: side}
	if g.IsTraining {
		trainingGrad(v3, o)
	} else {
		inferenceGrad(v3, o)
	}
}

// maskOf is what FusedBatchNormGradEx asks of FusedBatchNormGrad's passes:
// a gradMask where on (the zero value: none, dy itself), by value, so that
// a call's mask lives in its scratch rather than on the heap.
type maskOf[T Element] struct {
	on      bool
	act     activation
	y, side []T
}

// gradMask is how FusedBatchNormGrad's passes form FusedBatchNormGradEx's
// dz where they read dy: from y, and in the two-pass forms m's bits, which
// the first pass writes and the second reads (maskForm); and where dz goes
// besides, side_input_backprop.
type gradMask[T Element] struct {
	form    maskForm
	y, side []T
}

// maskForm says how a block's dz is formed: by the activation from y, and
// with its bits (bits not nil), which the first of two passes writes and
// the second reads (read). Bits are laid out by granule, the first pass's
// blocks (Plan.Align: its chunks are whole granules), each from a word of
// its own so that no two workers write one word: granule k's element i at
// bit i of bits[k·words:], words its bits' words and one more, which the
// vector loops read past the last.
type maskForm struct {
	act            activation
	bits           []uint64
	granule, words int
	read           bool
}

// in returns o's gradMask for plan p in scratch s, with scratch for the
// bits of p's two passes where p has them (FormPasses, not Identity); nil
// where o is off.
func (o maskOf[T]) in(s *scratch, p Plan) *gradMask[T] {
	if !o.on {
		return nil
	}
	var m *gradMask[T]
	switch any(m).(type) {
	case *gradMask[float32]:
		m = any(&s.masks.f32).(*gradMask[T])
	case *gradMask[float64]:
		m = any(&s.masks.f64).(*gradMask[T])
	case *gradMask[Half]:
		m = any(&s.masks.half).(*gradMask[T])
	case *gradMask[BFloat16]:
		m = any(&s.masks.bf16).(*gradMask[T])
	}
	*m = gradMask[T]{form: maskForm{act: o.act}, y: o.y, side: o.side}
	if o.act.identity || p.Form != FormPasses || p.Elements == 0 {
		return m
	}
	m.form.granule, m.form.words = p.Align, (p.Align+63)/64+1
	m.form.bits = s.uint64sDirty((p.Elements + p.Align - 1) / p.Align * m.form.words)
	return m
}

// masks are a call's gradMask, one a T, in its scratch.
type masks struct {
	f32  gradMask[float32]
	f64  gradMask[float64]
	half gradMask[Half]
	bf16 gradMask[BFloat16]
}

// sweep is sweepJob.run of dz: the sums of dz and x, and where j writes
// dx (the inference sweep), dx of dz and side_input_backprop.
func (m *gradMask[T]) sweep(j *sweepJob[T], lo, hi int, a, b []float64) {
	if L, ok := m.bfloat16Rows(j.pd, lo, hi); ok && (j.dx == nil || j.apply.f32 != nil) {
		m.sweepBFloat16(j, L, lo, hi, a, b)
		return
	}
	if j.dx == nil && m.inRegisters(j.pd) {
		m.sumsInRegisters(j, lo, hi, a, b)
		return
	}
	m.blocks(lo, hi, j.blk, j.dy, j.x, j.dx, j.dx != nil,
		func(off int, dz, x, dx []float32) {
			channelSums(j.pd, off, dz, x, j.mean, a, b)
			if dx != nil {
				applyAffine(j.pd, off, j.apply, dz, x, dx)
			}
		},
		func(off int, dz, x, dx []float64) {
			channelSums(j.pd, off, dz, x, j.mean, a, b)
			if dx != nil {
				applyAffine(j.pd, off, j.apply, dz, x, dx)
			}
		})
}

// inRegisters reports whether the two passes over the period dims pd
// form dz in the vector loops (simdMaskedSums, simdMaskedApply) rather
// than in blocks of memory: float32 channels-last rows of a multiple of
// eight channels, m's bits kept (FormPasses), whole granules of a multiple
// of eight elements, and no side_input_backprop to write. A block of
// another length or offset goes through blocks.
func (m *gradMask[T]) inRegisters(pd Dims) bool {
	_, f32 := any(m.y).([]float32)
	return f32 && simdMaskedSums != nil && m.form.bits != nil && m.side == nil && pd.Layout == ChannelsLast &&
		pd.C%8 == 0 && m.form.granule%8 == 0
}

// planesInRegisters reports whether a by-channel unit's passes form dz
// in the plane loops (simdMaskedPlaneLanes, simdMaskedApplyPlanes) rather
// than in blocks of memory: float32 planes summed in lanes (lanes not
// nil), a Relu or Relu6, no side_input_backprop to write, and an
// x_backprop t writes neither streamed nor scale-only.
func (m *gradMask[T]) planesInRegisters(lanes []float64, t affine) bool {
	if m == nil {
		return false
	}
	_, f32 := any(m.y).([]float32)
	return f32 && simdMaskedPlaneLanes != nil && lanes != nil && !m.form.act.identity && m.side == nil &&
		t.f32 != nil && !t.f32.Stream && !t.f32.ScaleOnly
}

// sumsInRegisters is sweep's first pass of two where inRegisters: the
// sums of dz, m's bits written granule by granule (each block one).
func (m *gradMask[T]) sumsInRegisters(j *sweepJob[T], lo, hi int, a, b []float64) {
	f := m.form
	dy, x, y := any(j.dy).([]float32), any(j.x).([]float32), any(m.y).([]float32)
	blk := min(j.blk, maxBlockLen)
	for o := lo; o < hi; o += blk {
		e := min(o+blk, hi)
		if o%f.granule != 0 || e-o > f.granule {
			panic("kernels: mask bits written off their granule")
		}
		if (e-o)%8 != 0 {
			m.blocks(o, e, blk, j.dy, j.x, nil, false, func(off int, dz, x, _ []float32) {
				channelSums(j.pd, off, dz, x, j.mean, a, b)
			}, nil)
			continue
		}
		splits.maskBits.Add(1)
		splits.maskRegisters.Add(1)
		bits := unsafe.Pointer(&f.bits[o/f.granule*f.words])
		simdMaskedSums(int(j.pd.C), o, dy[o:e], x[o:e], y[o:e], j.mean, a, b, bits, f.act.upper)
	}
}

// applyInRegisters is applyJob.run's second pass where inRegisters: dx of
// dz, m's bits read, in pieces that end at the granules' ends.
func (m *gradMask[T]) applyInRegisters(j *applyJob[T], lo, hi int) {
	f := m.form
	dy, x, dx := any(j.dy).([]float32), any(j.x).([]float32), any(j.dx).([]float32)
	fn32 := func(off int, dz, x, dx []float32) { applyAffine(j.pd, off, j.t, dz, x, dx) }
	for o := lo; o < hi; {
		k := o / f.granule
		pos := o - k*f.granule
		e := min(hi, (k+1)*f.granule)
		if pos%8 != 0 || (e-o)%8 != 0 {
			m.blocks(o, e, j.blk, j.dy, j.x, j.dx, true, fn32, nil)
		} else {
			bits := unsafe.Add(unsafe.Pointer(&f.bits[k*f.words]), pos/8)
			splits.maskRegisters.Add(1)
			simdMaskedApply(int(j.pd.C), o, j.t.f32, dy[o:e], x[o:e], dx[o:e], bits)
		}
		o = e
	}
}

// bfloat16Rows reports whether the elements at [lo, hi) are whole
// bfloat16 rows that the bfloat16 row loops take (bfloat16Rows), with
// their dz formed in bfloat16 blocks by the bfloat16 mask loops, and their
// row length: rows of at most maxBlockLen channels, so that blocks and the
// bits' granules (blockFor) are whole rows. (A wider row's granules are
// blocks of maxBlockLen elements, which end inside rows.)
func (m *gradMask[T]) bfloat16Rows(pd Dims, lo, hi int) (L int, ok bool) {
	L, ok = bfloat16Rows[T](pd, lo, hi)
	return L, ok && simdMaskRowsBFloat16 != nil && L <= maxBlockLen && (m.form.bits == nil || m.form.granule%L == 0)
}

// bf16BlockLen is the most bfloat16 elements of dz a block buffer holds.
const bf16BlockLen = 2 * maxBlockLen

// bf16Block returns buf's dy as a block of bfloat16.
func bf16Block(buf *blockBuffers) []BFloat16 {
	return unsafe.Slice((*BFloat16)(unsafe.Pointer(&buf.dy[0])), bf16BlockLen)
}

// sweepBFloat16 is sweep over whole bfloat16 rows of L channels: dz formed
// block by block in bfloat16 and handed to the bfloat16 row loops as dy,
// m's bits written in the first pass of two (blocks of the sums pass are
// its granules), side_input_backprop written where j writes dx.
func (m *gradMask[T]) sweepBFloat16(j *sweepJob[T], L, lo, hi int, a, b []float64) {
	f := m.form
	dy, x, y := any(j.dy).([]BFloat16), any(j.x).([]BFloat16), any(m.y).([]BFloat16)
	dx, _ := any(j.dx).([]BFloat16)
	var side []BFloat16
	if dx != nil {
		side, _ = any(m.side).([]BFloat16)
	}
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	dzBuf := bf16Block(buf)
	blocks := 0
	defer func() { splits.maskBF16Rows.Add(uint64(blocks)) }() // once a call, not on every block
	blk := max(L, min(j.blk, bf16BlockLen)/L*L)
	for o := lo; o < hi; o += blk {
		e := min(o+blk, hi)
		dz := dy[o:e]
		if !f.act.identity {
			dz = dzBuf[:e-o]
			var bits []uint64
			pos := 0
			if f.bits != nil {
				k := o / f.granule
				if e > (k+1)*f.granule {
					panic("kernels: mask bits written off their granule")
				}
				bits, pos = f.bits[k*f.words:(k+1)*f.words], o-k*f.granule
				splits.maskBits.Add(1)
			}
			simdMaskRowsBFloat16(dz, dy[o:e], y[o:e], f.act.upper, bits, pos)
		}
		blocks++
		if side != nil {
			copy(side[o:e], dz)
		}
		simdSumsBFloat16(L, dz, x[o:e], j.mean, a, b)
		if dx != nil {
			simdApplyBFloat16(L, j.apply.f32, dz, x[o:e], dx[o:e])
		}
	}
}

// applyBFloat16 is applyJob.run over whole bfloat16 rows of L channels:
// dz formed in bfloat16 from dy and m's bits (from y where the call has
// no bits), in pieces that end at the granules' ends, and handed to the
// bfloat16 apply loop as dy; side_input_backprop written.
func (m *gradMask[T]) applyBFloat16(j *applyJob[T], L, lo, hi int) {
	f := m.form
	dy, x, dx := any(j.dy).([]BFloat16), any(j.x).([]BFloat16), any(j.dx).([]BFloat16)
	y, _ := any(m.y).([]BFloat16)
	side, _ := any(m.side).([]BFloat16)
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	dzBuf := bf16Block(buf)
	blocks := 0
	defer func() { splits.maskBF16Rows.Add(uint64(blocks)) }() // once a call, not on every block
	blk := max(L, min(j.blk, bf16BlockLen)/L*L)
	for o := lo; o < hi; {
		e := min(o+blk, hi)
		dz := dy[o:e]
		switch {
		case f.act.identity:
		case f.bits != nil:
			k := o / f.granule
			e = min(e, (k+1)*f.granule)
			dz = dzBuf[:e-o]
			simdUnmaskRowsBFloat16(dz, dy[o:e], f.bits[k*f.words:(k+1)*f.words], o-k*f.granule)
		default:
			dz = dzBuf[:e-o]
			simdMaskRowsBFloat16(dz, dy[o:e], y[o:e], f.act.upper, nil, 0)
		}
		blocks++
		if side != nil {
			copy(side[o:e], dz)
		}
		simdApplyBFloat16(L, j.t.f32, dz, x[o:e], dx[o:e])
		o = e
	}
}

// blocks is forBlocks of dz: it calls fn for the elements at [lo, hi) of
// dz = dy·m, x and dx (when not nil) in blocks of at most blk, dz formed
// in a float32 buffer (float64 for float64) from dy's block, and where
// last (the pass that writes dx) read from the bits the first pass wrote
// and written to side_input_backprop, before fn, which may write dx over
// dy or x.
func (m *gradMask[T]) blocks(lo, hi, blk int, dy, x, dx []T, last bool, fn32 func(off int, dz, x, dx []float32),
	fn64 func(off int, dz, x, dx []float64)) {
	f := m.form
	f.read = last && f.bits != nil
	var side []T
	if last {
		side = m.side
	}
	blk = min(blk, maxBlockLen)
	switch dy := any(dy).(type) {
	case []float32:
		buf := bufferPool.Get().(*blockBuffers)
		defer bufferPool.Put(buf)
		dx, _ := any(dx).([]float32)
		side, _ := any(side).([]float32)
		maskedBlocks(f, lo, hi, blk, dy, any(x).([]float32), dx, any(m.y).([]float32), side, buf.dy[:], fn32)
		return
	case []float64:
		buf := float64Pool.Get().(*[maxBlockLen]float64)
		defer float64Pool.Put(buf)
		dx, _ := any(dx).([]float64)
		side, _ := any(side).([]float64)
		maskedBlocks(f, lo, hi, blk, dy, any(x).([]float64), dx, any(m.y).([]float64), side, buf[:], fn64)
		return
	}
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	for b := lo; b < hi; b += blk {
		e := min(b+blk, hi)
		n := e - b
		dz := buf.dy[:n]
		widen(dz, dy[b:e])
		switch {
		case f.act.identity:
		case f.read:
			maskBlock(f, dz, dz, nil, b)
		default:
			widen(buf.dx[:n], m.y[b:e])
			maskBlock(f, dz, dz, buf.dx[:n], b)
		}
		if side != nil {
			narrow(side[b:e], dz)
		}
		widen(buf.x[:n], x[b:e])
		if dx == nil {
			fn32(b, dz, buf.x[:n], nil)
			continue
		}
		fn32(b, dz, buf.x[:n], buf.dx[:n])
		narrow(dx[b:e], buf.dx[:n])
	}
}

// float64Pool holds the dz blocks of float64 tensors.
var float64Pool = sync.Pool{New: func() any { return new([maxBlockLen]float64) }}

// maskedBlocks is gradMask.blocks over native slices: dz formed in buf
// (dy itself for Identity).
func maskedBlocks[F native](f maskForm, lo, hi, blk int, dy, x, dx, y, side, buf []F,
	fn func(off int, dz, x, dx []F)) {
	for b := lo; b < hi; b += blk {
		e := min(b+blk, hi)
		dz := dy[b:e]
		if !f.act.identity {
			dz = buf[:e-b]
			var yb []F
			if !f.read {
				yb = y[b:e]
			}
			maskBlock(f, dz, dy[b:e], yb, b)
		}
		if side != nil {
			copy(side[b:e], dz)
		}
		var dxb []F
		if dx != nil {
			dxb = dx[b:e]
		}
		fn(b, dz, x[b:e], dxb)
	}
}

// maskBlock writes dz = dy·m of the elements at [off, off+len(dz)) (dz
// may be dy itself): m from y, its bits written where f has bits, or read
// from them (f.read, y nil). The vector loops take the float32 blocks'
// leading elements (simdMaskRows, simdUnmaskRows), the portable ones the
// rest. A block whose bits are written is its granule's first elements.
func maskBlock[F native](f maskForm, dz, dy, y []F, off int) {
	if f.read {
		for i := 0; i < len(dz); {
			k := (off + i) / f.granule
			pos := off + i - k*f.granule
			n := min(len(dz)-i, f.granule-pos)
			bits := f.bits[k*f.words : (k+1)*f.words]
			j := 0
			if d32, ok := any(dz[i : i+n]).([]float32); ok && simdUnmaskRows != nil {
				j = simdUnmaskRows(d32, any(dy[i:i+n]).([]float32), bits, pos)
			}
			unmaskGrad(dz[i+j:i+n], dy[i+j:i+n], bits, pos+j)
			i += n
		}
		return
	}
	var bits []uint64
	if f.bits != nil {
		if off%f.granule != 0 || len(dz) > f.granule {
			panic("kernels: mask bits written off their granule")
		}
		bits = f.bits[off/f.granule*f.words : (off/f.granule+1)*f.words]
		splits.maskBits.Add(1)
	}
	j := 0
	if d32, ok := any(dz).([]float32); ok && simdMaskRows != nil {
		j = simdMaskRows(d32, any(dy).([]float32), any(y).([]float32), f.act.upper, bits)
	}
	if bits != nil {
		bits = bits[j/64:]
	}
	maskGrad(f.act, dz[j:], dy[j:], y[j:], bits)
}

// maskGrad writes dz = dy·m, the activation a's gradient from its output
// y, and where bits is not nil m's bits, element i's at bit i%64 of
// bits[i/64]. Multiplying by 1 or 0 is exact, so Half and BFloat16 are
// masked as the float32 they widen to.
func maskGrad[F native](a activation, dz, dy, y []F, bits []uint64) {
	for w := 0; 64*w < len(dz); w++ {
		var word uint64
		for i := 64 * w; i < min(len(dz), 64*w+64); i++ {
			m := F(0)
			if a.on(float64(y[i])) {
				m = 1
				word |= 1 << (i % 64)
			}
			dz[i] = dy[i] * m
		}
		if bits != nil {
			bits[w] = word
		}
	}
}

// unmaskGrad writes dz = dy·m, m's bits read from bit pos of bits on.
func unmaskGrad[F native](dz, dy []F, bits []uint64, pos int) {
	for i := range dz {
		p := pos + i
		m := F(bits[p/64] >> (p % 64) & 1)
		dz[i] = dy[i] * m
	}
}
