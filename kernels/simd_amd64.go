//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX2+FMA loops for float32 tensors. Each one must equal the portable
// loop named in its comment up to floating-point rounding: the sums are
// formed in float64 exactly as there; x_backprop is formed in float32 with
// FMA (the portable loop uses float64), which stays within a few float32 ulps.

func init() {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return // the portable loops stay in place
	}
	simdSums = func(d Dims, off int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
		if d.Layout == ChannelsLast {
			sumsChannelsLast32(int(d.C), off, dy, x, mean, sumDy, sumDyXc)
		} else {
			sumsChannelsFirst32(int(d.C), int(d.S), off, dy, x, mean, sumDy, sumDyXc)
		}
	}
	simdApply = func(d Dims, off int, t *affine32, dy, x, dx []float32) {
		if d.Layout == ChannelsLast {
			applyChannelsLast32(int(d.C), off, t, dy, x, dx)
		} else {
			applyChannelsFirst32(int(d.C), int(d.S), off, t, dy, x, dx)
		}
	}
	simdWidenBFloat16 = widenBFloat16
	simdNarrowBFloat16 = narrowBFloat16
	simdWidenHalf = widenHalf
	simdNarrowHalf = narrowHalf
}

// sumsChannelsLast32 is sumsChannelsLast for float32. A partial first and
// last row go through sumsRow32; the whole rows between go through
// sumsRows32, which keeps its accumulators in registers.
func sumsChannelsLast32(C, off int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
	n := len(x)
	i := 0
	if c0 := off % C; c0 != 0 {
		m := min(C-c0, n)
		sumsRow32(dy[:m], x[:m], mean[c0:c0+m], sumDy[c0:c0+m], sumDyXc[c0:c0+m])
		i = m
	}
	if rows := (n - i) / C; rows > 0 {
		sumsRows32(C, rows, dy[i:i+rows*C], x[i:i+rows*C], mean, sumDy, sumDyXc)
		i += rows * C
	}
	if i < n {
		m := n - i
		sumsRow32(dy[i:], x[i:], mean[:m], sumDy[:m], sumDyXc[:m])
	}
}

// sumsRow32 adds one (partial) row into the accumulators, four channels at a
// time in float64 lanes.
func sumsRow32(dy, x []float32, mean, a, b []float64) {
	m := len(dy)
	x, mean, a, b = x[:m], mean[:m], a[:m], b[:m]
	j := 0
	for ; j+4 <= m; j += 4 {
		g := archsimd.LoadFloat32x4Slice(dy[j:]).ConvertToFloat64()
		xc := archsimd.LoadFloat32x4Slice(x[j:]).ConvertToFloat64().Sub(archsimd.LoadFloat64x4Slice(mean[j:]))
		archsimd.LoadFloat64x4Slice(a[j:]).Add(g).StoreSlice(a[j:])
		g.MulAdd(xc, archsimd.LoadFloat64x4Slice(b[j:])).StoreSlice(b[j:])
	}
	for ; j < m; j++ {
		g := float64(dy[j])
		a[j] += g
		b[j] += g * (float64(x[j]) - mean[j])
	}
}

// sumsRows32 adds rows whole rows of C channels: for each group of eight
// channels it walks down the rows with four float64x4 accumulators held in
// registers, then adds them into sumDy and sumDyXc once. The rows come from
// one block, so the walk reads from L1.
func sumsRows32(C, rows int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
	dy, x = dy[:rows*C], x[:rows*C]
	c := 0
	for ; c+8 <= C; c += 8 {
		mu0, mu1 := archsimd.LoadFloat64x4Slice(mean[c:]), archsimd.LoadFloat64x4Slice(mean[c+4:])
		var a0, a1, b0, b1 archsimd.Float64x4
		for k := c; k < len(dy); k += C {
			g0 := archsimd.LoadFloat32x4Slice(dy[k:]).ConvertToFloat64()
			g1 := archsimd.LoadFloat32x4Slice(dy[k+4:]).ConvertToFloat64()
			x0 := archsimd.LoadFloat32x4Slice(x[k:]).ConvertToFloat64().Sub(mu0)
			x1 := archsimd.LoadFloat32x4Slice(x[k+4:]).ConvertToFloat64().Sub(mu1)
			a0, a1 = a0.Add(g0), a1.Add(g1)
			b0, b1 = g0.MulAdd(x0, b0), g1.MulAdd(x1, b1)
		}
		archsimd.LoadFloat64x4Slice(sumDy[c:]).Add(a0).StoreSlice(sumDy[c:])
		archsimd.LoadFloat64x4Slice(sumDy[c+4:]).Add(a1).StoreSlice(sumDy[c+4:])
		archsimd.LoadFloat64x4Slice(sumDyXc[c:]).Add(b0).StoreSlice(sumDyXc[c:])
		archsimd.LoadFloat64x4Slice(sumDyXc[c+4:]).Add(b1).StoreSlice(sumDyXc[c+4:])
	}
	for ; c < C; c++ {
		mu := mean[c]
		var a, b float64
		for k := c; k < len(dy); k += C {
			g := float64(dy[k])
			a += g
			b += g * (float64(x[k]) - mu)
		}
		sumDy[c] += a
		sumDyXc[c] += b
	}
}

// sumsChannelsFirst32 is sumsChannelsFirst for float32: each contiguous run
// of one channel is summed in two float64x4 accumulator pairs.
func sumsChannelsFirst32(C, S, off int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		a, b := runSums32(dy[i:i+m], x[i:i+m], mean[c])
		sumDy[c] += a
		sumDyXc[c] += b
		i += m
		pos = 0
		plane++
	}
}

// runSums32 returns Σdy and Σdy·(x−mu) over one run, in float64.
func runSums32(dy, x []float32, mu float64) (sumDy, sumDyXc float64) {
	m := len(dy)
	x = x[:m]
	j := 0
	if m >= 8 {
		mu4 := archsimd.BroadcastFloat64x4(mu)
		var a0, a1, b0, b1 archsimd.Float64x4
		for ; j+8 <= m; j += 8 {
			g0 := archsimd.LoadFloat32x4Slice(dy[j:]).ConvertToFloat64()
			g1 := archsimd.LoadFloat32x4Slice(dy[j+4:]).ConvertToFloat64()
			x0 := archsimd.LoadFloat32x4Slice(x[j:]).ConvertToFloat64().Sub(mu4)
			x1 := archsimd.LoadFloat32x4Slice(x[j+4:]).ConvertToFloat64().Sub(mu4)
			a0, a1 = a0.Add(g0), a1.Add(g1)
			b0, b1 = g0.MulAdd(x0, b0), g1.MulAdd(x1, b1)
		}
		var la, lb [4]float64
		a0.Add(a1).Store(&la)
		b0.Add(b1).Store(&lb)
		sumDy = (la[0] + la[1]) + (la[2] + la[3])
		sumDyXc = (lb[0] + lb[1]) + (lb[2] + lb[3])
	}
	for ; j < m; j++ {
		g := float64(dy[j])
		sumDy += g
		sumDyXc += g * (float64(x[j]) - mu)
	}
	return sumDy, sumDyXc
}

// applyChannelsLast32 is applyChannelsLast for float32, eight channels at a
// time: dx = A·(dy−MeanDy) + B·(x−Mean) with FMA.
func applyChannelsLast32(C, off int, t *affine32, dy, x, dx []float32) {
	c0 := off % C
	for i, n := 0, len(x); i < n; {
		m := min(C-c0, n-i)
		dyRow, xRow, dxRow := dy[i:i+m], x[i:i+m], dx[i:i+m]
		a, b, mdy, mu := t.A[c0:c0+m], t.B[c0:c0+m], t.MeanDy[c0:c0+m], t.Mean[c0:c0+m]
		if t.ScaleOnly {
			scaleRow32(a, dyRow, dxRow)
			i += m
			c0 = 0
			continue
		}
		j := 0
		for ; j+8 <= m; j += 8 {
			xc := archsimd.LoadFloat32x8Slice(xRow[j:]).Sub(archsimd.LoadFloat32x8Slice(mu[j:]))
			dyc := archsimd.LoadFloat32x8Slice(dyRow[j:]).Sub(archsimd.LoadFloat32x8Slice(mdy[j:]))
			r := xc.Mul(archsimd.LoadFloat32x8Slice(b[j:]))
			dyc.MulAdd(archsimd.LoadFloat32x8Slice(a[j:]), r).StoreSlice(dxRow[j:])
		}
		for ; j < m; j++ {
			dxRow[j] = a[j]*(dyRow[j]-mdy[j]) + b[j]*(xRow[j]-mu[j])
		}
		i += m
		c0 = 0
	}
}

// applyChannelsFirst32 is applyChannelsFirst for float32 with the channel's
// coefficients broadcast over each run.
func applyChannelsFirst32(C, S, off int, t *affine32, dy, x, dx []float32) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		applyRun32(t.ScaleOnly, t.A[c], t.B[c], t.MeanDy[c], t.Mean[c], dy[i:i+m], x[i:i+m], dx[i:i+m])
		i += m
		pos = 0
		plane++
	}
}

func applyRun32(scaleOnly bool, a, b, mdy, mu float32, dy, x, dx []float32) {
	m := len(dy)
	x, dx = x[:m], dx[:m]
	j := 0
	if scaleOnly {
		a8 := archsimd.BroadcastFloat32x8(a)
		for ; j+8 <= m; j += 8 {
			archsimd.LoadFloat32x8Slice(dy[j:]).Mul(a8).StoreSlice(dx[j:])
		}
		for ; j < m; j++ {
			dx[j] = a * dy[j]
		}
		return
	}
	if m >= 8 {
		a8, b8 := archsimd.BroadcastFloat32x8(a), archsimd.BroadcastFloat32x8(b)
		mdy8, mu8 := archsimd.BroadcastFloat32x8(mdy), archsimd.BroadcastFloat32x8(mu)
		for ; j+8 <= m; j += 8 {
			r := archsimd.LoadFloat32x8Slice(x[j:]).Sub(mu8).Mul(b8)
			archsimd.LoadFloat32x8Slice(dy[j:]).Sub(mdy8).MulAdd(a8, r).StoreSlice(dx[j:])
		}
	}
	for ; j < m; j++ {
		dx[j] = a*(dy[j]-mdy) + b*(x[j]-mu)
	}
}

// scaleRow32 writes dx[j] = a[j]·dy[j].
func scaleRow32(a, dy, dx []float32) {
	m := len(dy)
	a, dx = a[:m], dx[:m]
	j := 0
	for ; j+8 <= m; j += 8 {
		archsimd.LoadFloat32x8Slice(dy[j:]).Mul(archsimd.LoadFloat32x8Slice(a[j:])).StoreSlice(dx[j:])
	}
	for ; j < m; j++ {
		dx[j] = a[j] * dy[j]
	}
}

// widenBFloat16 converts bfloat16 bits to float32, eight at a time.
func widenBFloat16(dst []float32, src []BFloat16) {
	n := len(src)
	dst = dst[:n]
	bits := unsafe.Slice((*uint16)(unsafe.SliceData(src)), n)
	j := 0
	for ; j+8 <= n; j += 8 {
		archsimd.LoadUint16x8Slice(bits[j:]).ExtendToUint32().ShiftAllLeft(16).AsFloat32x8().StoreSlice(dst[j:])
	}
	for ; j < n; j++ {
		dst[j] = src[j].Float32()
	}
}

// narrowBFloat16 is BFloat16FromFloat32 over a slice, eight at a time:
// round to nearest even by adding 0x7fff plus the lowest kept bit, and NaN
// kept quiet.
func narrowBFloat16(dst []BFloat16, src []float32) {
	n := len(src)
	bits := unsafe.Slice((*uint16)(unsafe.SliceData(dst)), len(dst))[:n]
	absMask, inf := archsimd.BroadcastUint32x8(0x7fffffff), archsimd.BroadcastInt32x8(0x7f800000)
	bias, one, quiet := archsimd.BroadcastUint32x8(0x7fff), archsimd.BroadcastUint32x8(1), archsimd.BroadcastUint32x8(0x40)
	j := 0
	for ; j+8 <= n; j += 8 {
		u := archsimd.LoadFloat32x8Slice(src[j:]).AsUint32x8()
		isNaN := u.And(absMask).AsInt32x8().Greater(inf)
		rounded := u.Add(bias).Add(u.ShiftAllRight(16).And(one)).ShiftAllRight(16)
		o := u.ShiftAllRight(16).Or(quiet).Merge(rounded, isNaN).AsInt32x8()
		o.GetLo().SaturateToUint16Concat(o.GetHi()).StoreSlice(bits[j:])
	}
	for ; j < n; j++ {
		dst[j] = BFloat16FromFloat32(src[j])
	}
}

// widenHalf is Half.Float32 over a slice, eight at a time: the exponent is
// rebiased, Inf and NaN get the float32 maximum exponent, and subnormals are
// renormalised by a float subtraction.
func widenHalf(dst []float32, src []Half) {
	n := len(src)
	dst = dst[:n]
	bits := unsafe.Slice((*uint16)(unsafe.SliceData(src)), n)
	lowBits, signBit := archsimd.BroadcastUint32x8(0x7fff), archsimd.BroadcastUint32x8(0x8000)
	expMask, rebias := archsimd.BroadcastUint32x8(0x0f800000), archsimd.BroadcastUint32x8(0x38000000)
	expOne, zero := archsimd.BroadcastUint32x8(0x00800000), archsimd.BroadcastUint32x8(0)
	magic := archsimd.BroadcastFloat32x8(0x1p-14)
	j := 0
	for ; j+8 <= n; j += 8 {
		u := archsimd.LoadUint16x8Slice(bits[j:]).ExtendToUint32()
		o := u.And(lowBits).ShiftAllLeft(13)
		exp := o.And(expMask)
		o = o.Add(rebias)
		infOrNaN := o.Add(rebias)
		subnormal := o.Add(expOne).AsFloat32x8().Sub(magic).AsUint32x8()
		o = infOrNaN.Merge(o, exp.Equal(expMask))
		o = subnormal.Merge(o, exp.Equal(zero))
		o.Or(u.And(signBit).ShiftAllLeft(16)).AsFloat32x8().StoreSlice(dst[j:])
	}
	for ; j < n; j++ {
		dst[j] = halfTable[src[j]]
	}
}

// narrowHalf is HalfFromFloat32 over a slice, eight at a time, with round to
// nearest even: overflow and Inf give Inf and NaN a quiet NaN; results that
// are subnormal in half are rounded by a float addition of 0.5, which leaves
// the half's bits in the low mantissa; normal results add the rebias and
// 0xfff plus the lowest kept bit before the shift.
func narrowHalf(dst []Half, src []float32) {
	n := len(src)
	bits := unsafe.Slice((*uint16)(unsafe.SliceData(dst)), len(dst))[:n]
	absMask := archsimd.BroadcastUint32x8(0x7fffffff)
	f16max, f32inf := archsimd.BroadcastInt32x8(0x47800000-1), archsimd.BroadcastInt32x8(0x7f800000)
	minNormal := archsimd.BroadcastInt32x8(0x38800000)
	half, halfBits := archsimd.BroadcastFloat32x8(0.5), archsimd.BroadcastUint32x8(0x3f000000)
	normBias, one := archsimd.BroadcastUint32x8(0xc8000fff), archsimd.BroadcastUint32x8(1)
	inf16, nan16 := archsimd.BroadcastUint32x8(0x7c00), archsimd.BroadcastUint32x8(0x7e00)
	j := 0
	for ; j+8 <= n; j += 8 {
		u := archsimd.LoadFloat32x8Slice(src[j:]).AsUint32x8()
		f := u.And(absMask)
		sign := u.Xor(f).ShiftAllRight(16)
		fi := f.AsInt32x8()
		big := nan16.Merge(inf16, fi.Greater(f32inf))
		small := f.AsFloat32x8().Add(half).AsUint32x8().Sub(halfBits)
		normal := f.Add(normBias).Add(f.ShiftAllRight(13).And(one)).ShiftAllRight(13)
		o := small.Merge(normal, minNormal.Greater(fi))
		packed := big.Merge(o, fi.Greater(f16max)).Or(sign).AsInt32x8()
		packed.GetLo().SaturateToUint16Concat(packed.GetHi()).StoreSlice(bits[j:])
	}
	for ; j < n; j++ {
		dst[j] = HalfFromFloat32(src[j])
	}
}
