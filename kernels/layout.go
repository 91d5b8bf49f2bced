package kernels

// Layout says where the channel axis of an activation tensor lies.
type Layout int

const (
	// ChannelsLast is NHWC and NDHWC: element (n, s, c) at (n·S + s)·C + c.
	ChannelsLast Layout = iota
	// ChannelsFirst is NCHW and NCDHW: element (n, c, s) at (n·C + c)·S + s.
	ChannelsFirst
)

// Dims describes an activation tensor as N × C × S, S the product of its
// spatial dimensions.
type Dims struct {
	N, C, S int64
	Layout  Layout
}

// Len returns the number of elements, N·C·S.
func (d Dims) Len() int { return int(d.N * d.C * d.S) }

// PerChannel returns R = N·S, the number of elements of each channel.
func (d Dims) PerChannel() int64 { return d.N * d.S }

// Element is a dtype an activation tensor may have.
type Element interface {
	float32 | float64 | Half | BFloat16
}

// native is an element type the loops compute on directly.
type native interface {
	float32 | float64
}

// channelSums accumulates, per channel, Σdy and Σdy·(x−μ) over the elements
// at flat indices [off, off+len(x)):
//
//	for i := range x { c := channel(off+i); dy[c] += y[i]; dyXc[c] += y[i]·(x[i]−mean[c]) }
//
// The products and sums are formed in float64.
func channelSums[F native](d Dims, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	if len(dy) != len(x) {
		panic("kernels: dy and x lengths differ")
	}
	if d.Layout == ChannelsLast {
		sumsChannelsLast(int(d.C), off, dy, x, mean, sumDy, sumDyXc)
	} else {
		sumsChannelsFirst(int(d.C), int(d.S), off, dy, x, mean, sumDy, sumDyXc)
	}
}

func sumsChannelsLast[F native](C, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	c0 := off % C
	for i, n := 0, len(x); i < n; {
		m := min(C-c0, n-i)
		dyRow, xRow := dy[i:i+m], x[i:i+m]
		meanRow, a, b := mean[c0:c0+m], sumDy[c0:c0+m], sumDyXc[c0:c0+m]
		for j := range dyRow {
			g := float64(dyRow[j])
			a[j] += g
			b[j] += g * (float64(xRow[j]) - meanRow[j])
		}
		i += m
		c0 = 0
	}
}

func sumsChannelsFirst[F native](C, S, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		mu := mean[c]
		var a, b float64
		for j, g := range dy[i : i+m] {
			g := float64(g)
			a += g
			b += g * (float64(x[i+j]) - mu)
		}
		sumDy[c] += a
		sumDyXc[c] += b
		i += m
		pos = 0
		plane++
	}
}

// affine is the per-channel form every gradient's x_backprop takes:
//
//	dx = A[c]·dy + B[c]·(x − mean[c]) + D[c]
type affine struct {
	A, B, D, Mean []float64
}

// applyAffine writes dx for the elements at flat indices [off, off+len(x)),
// computed in float64 and rounded to F.
func applyAffine[F native](d Dims, off int, t affine, dy, x, dx []F) {
	if len(dy) != len(x) || len(dx) != len(x) {
		panic("kernels: dy, x and dx lengths differ")
	}
	if d.Layout == ChannelsLast {
		applyChannelsLast(int(d.C), off, t, dy, x, dx)
	} else {
		applyChannelsFirst(int(d.C), int(d.S), off, t, dy, x, dx)
	}
}

func applyChannelsLast[F native](C, off int, t affine, dy, x, dx []F) {
	c0 := off % C
	for i, n := 0, len(x); i < n; {
		m := min(C-c0, n-i)
		dyRow, xRow, dxRow := dy[i:i+m], x[i:i+m], dx[i:i+m]
		a, b, d, mu := t.A[c0:c0+m], t.B[c0:c0+m], t.D[c0:c0+m], t.Mean[c0:c0+m]
		for j := range dyRow {
			dxRow[j] = F(a[j]*float64(dyRow[j]) + b[j]*(float64(xRow[j])-mu[j]) + d[j])
		}
		i += m
		c0 = 0
	}
}

func applyChannelsFirst[F native](C, S, off int, t affine, dy, x, dx []F) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		a, b, d, mu := t.A[c], t.B[c], t.D[c], t.Mean[c]
		dxRun, xRun := dx[i:i+m], x[i:i+m]
		for j, g := range dy[i : i+m] {
			dxRun[j] = F(a*float64(g) + b*(float64(xRun[j])-mu) + d)
		}
		i += m
		pos = 0
		plane++
	}
}
