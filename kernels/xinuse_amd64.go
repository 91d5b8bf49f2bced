//go:build goexperiment.simd && amd64

package kernels

// upperInUse reports whether the upper halves of the vector registers
// YMM0-15 or ZMM0-15 are in use, that is, not known clear (XGETBV with
// ECX = 1, the XINUSE bits of the AVX and ZMM_Hi256 states), and whether
// the CPU can tell (ok). The tests use it to check that every vector loop
// leaves them clear (see simd_amd64.go); it costs a CPUID, which may trap to
// a hypervisor, so nothing else calls it.
func upperInUse() (inUse, ok bool)

// dirtyUpper sets every bit of Y1 and returns without VZEROUPPER: the tests'
// control for upperInUse. The CPU must have AVX2.
func dirtyUpper()
