package kernels

// Hooks for the external tests of the vector conversions.

// Widen converts src to float32 into dst, as the kernels do for a block.
func Widen[T Element](dst []float32, src []T) { widen(dst, src) }

// Narrow rounds src into dst, as the kernels do for a block.
func Narrow[T Element](dst []T, src []float32) { narrow(dst, src) }

// The tests size their parallel cases for splits from 2·2^16 elements, so
// that the race detector and the fuzzers reach the goroutine paths quickly.
func init() { SetMinElementsPerWorker(1 << 16) }
