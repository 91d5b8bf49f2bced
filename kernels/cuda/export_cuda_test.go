//go:build cuda

package cuda

// BarrierWords returns the persistent kernel's grid-barrier words, one for
// each device and stream it has run on, for TestGPU to read back.
func BarrierWords() []Ptr {
	devices.Lock()
	defer devices.Unlock()
	var words []Ptr
	for _, d := range devices.byOrdinal {
		d.barriers.Lock()
		for _, w := range d.barriers.byStream {
			words = append(words, w)
		}
		d.barriers.Unlock()
	}
	return words
}
