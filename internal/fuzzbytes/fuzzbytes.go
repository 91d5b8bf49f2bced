// Package fuzzbytes hands out a fuzzer's input a byte at a time, for the
// fuzz tests of opdef, kernels and capi.
package fuzzbytes

// Reader hands out the bytes it was made with, in order; once they run out
// it hands out what Rest returns, or zeros while Rest is nil.
type Reader struct {
	b    []byte
	Rest func() byte
}

// New returns a Reader of data.
func New(data []byte) *Reader { return &Reader{b: data} }

// Byte returns the next byte.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		if r.Rest == nil {
			return 0
		}
		return r.Rest()
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}
