//go:build goexperiment.simd && amd64

package main

import "simd/archsimd"

// triad32 sets a[i] = b[i] + 3·c[i] in the widest vectors the CPU has, so
// that a triad over arrays in the caches meets the caches' bandwidth rather
// than a scalar loop's; the scalar loop takes the tail.
func triad32(a, b, c []float32) {
	i, n := 0, len(a)
	b, c = b[:n], c[:n]
	if archsimd.X86.AVX512() {
		three := archsimd.BroadcastFloat32x16(3)
		for ; i+16 <= n; i += 16 {
			archsimd.LoadFloat32x16Slice(c[i:]).MulAdd(three, archsimd.LoadFloat32x16Slice(b[i:])).StoreSlice(a[i:])
		}
	} else if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		three := archsimd.BroadcastFloat32x8(3)
		for ; i+8 <= n; i += 8 {
			archsimd.LoadFloat32x8Slice(c[i:]).MulAdd(three, archsimd.LoadFloat32x8Slice(b[i:])).StoreSlice(a[i:])
		}
	}
	for ; i < n; i++ {
		a[i] = b[i] + 3*c[i]
	}
}
