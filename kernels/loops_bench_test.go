package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkLoops times the two float32 passes alone, block by block as the
// drivers call them, on data that fits in L2 (2^15 elements) and data that
// comes from DRAM (2^23): the sums read dy and x (8 bytes per element), the
// apply reads them and writes dx (12).
func BenchmarkLoops(b *testing.B) {
	const C = 64
	for _, n := range []int{1 << 15, 1 << 23} {
		for _, lay := range []struct {
			name   string
			layout Layout
		}{{"ChannelsLast", ChannelsLast}, {"ChannelsFirst", ChannelsFirst}} {
			d := Dims{N: int64(n / C / 64), C: C, S: 64, Layout: lay.layout}
			dy, x, dx := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range dy {
				dy[i], x[i] = float32(i%7), float32(i%5)
			}
			mean, a, s := make([]float64, C), make([]float64, C), make([]float64, C)
			sc := getScratch()
			t := newAffine(sc, mean)
			for c := range C {
				t.A[c], t.B[c], t.MeanDy[c] = 1, 2, 3
			}
			t = t.withFloat32(sc)
			blk := blockFor(d, blockLen)
			b.Run(fmt.Sprintf("sums/%s/n=%d", lay.name, n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				for b.Loop() {
					for o := 0; o < n; o += blk {
						channelSums(d, o, dy[o:o+blk], x[o:o+blk], mean, a, s)
					}
				}
			})
			b.Run(fmt.Sprintf("apply/%s/n=%d", lay.name, n), func(b *testing.B) {
				b.SetBytes(int64(12 * n))
				for b.Loop() {
					for o := 0; o < n; o += blk {
						applyAffine(d, o, t, dy[o:o+blk], x[o:o+blk], dx[o:o+blk])
					}
				}
			})
		}
	}
}
