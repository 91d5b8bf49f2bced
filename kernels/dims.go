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

// minPeriod is the least length of the channel period the channels-last
// loops run over; from maxPeriodC channels on, rows run over C itself, with a
// scalar tail when C is not a multiple of 8.
const (
	minPeriod  = 64
	maxPeriodC = 512
)

// periodic returns the dims the loops run over, and its channel count L. For
// ChannelsLast with few channels, or a channel count that is not a multiple
// of 8 below maxPeriodC, that is the period L, the least multiple of C that is at
// least minPeriod and a multiple of 8: element i has channel i mod C =
// (i mod L) mod C, so the loops may treat the tensor as having L channels
// whose per-channel arrays are the C real ones repeated L/C times, and run
// whole vectors over rows of L. Otherwise, and for ChannelsFirst and tensors
// shorter than one period, it is d itself.
func (d Dims) periodic() (Dims, int) {
	C := int(d.C)
	if d.Layout != ChannelsLast || C == 0 || (C >= minPeriod && C%8 == 0) || C >= maxPeriodC {
		return d, C
	}
	L := C
	for L < minPeriod || L%8 != 0 {
		L += C
	}
	if d.Len() < L {
		return d, C
	}
	p := d
	p.C = int64(L)
	return p, L
}

// addInto adds src into dst element by element: dst[i] += src[i].
func addInto(dst, src []float64) {
	src = src[:len(dst)]
	for i := addVector(dst, src); i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// repeat returns p repeated to length L, a multiple of len(p).
func (s *scratch) repeat(p []float64, L int) []float64 {
	if len(p) == L {
		return p
	}
	out := s.float64s(L)
	for i := range out {
		out[i] = p[i%len(p)]
	}
	return out
}

// Element is a dtype an activation tensor may have.
type Element interface {
	float32 | float64 | Half | BFloat16
}

// native is an element type the loops compute on directly.
type native interface {
	float32 | float64
}
