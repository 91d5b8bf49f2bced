//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "tiles_amd64.h"

// The float32 channels-last sums over a tile of 64 channels (AVX-512), the
// loop of sumsTile512 with its eight sums in registers: the compiler's
// register allocation uses sixteen vector registers, and kept one of the
// eight sums on the stack, stored and reloaded on every row. Every element
// takes the same operations in the same order as in Go, so the sums are bit
// for bit the same. Each vector's loads and sums come together: loading all
// eight first was slower on tensors in L3 (NHWC 8x28x28x128, 8x56x56x64).

// TILE_ARGS loads the arguments both loops share: rows (CX), the row
// stride W·size in bytes (DX), dy (SI), x (DI), a (R8), b (R9), and the 64
// float32 means into Z16-Z19.
#define TILE_ARGS(size) \
	MOVQ    rows+0(FP), CX; \
	MOVQ    W+8(FP), DX; \
	IMULQ   $size, DX; \
	MOVQ    dy+16(FP), SI; \
	MOVQ    x+24(FP), DI; \
	MOVQ    mean+32(FP), R10; \
	MOVQ    a+40(FP), R8; \
	MOVQ    b+48(FP), R9; \
	VMOVUPS 0(R10), Z16; \
	VMOVUPS 64(R10), Z17; \
	VMOVUPS 128(R10), Z18; \
	VMOVUPS 192(R10), Z19

// NEXT_ROW(loop) steps dy and x to the next row and runs loop again while
// the fold has rows left (BX).
#define NEXT_ROW(loop) \
	ADDQ DX, SI; \
	ADDQ DX, DI; \
	DECQ BX; \
	JNZ  loop

// FOLD_TEST(test, loop) is test, the outer loop's: loop again while rows are
// left (CX), else return.
#define FOLD_TEST(test, loop) \
test: \
	TESTQ CX, CX; \
	JG    loop; \
	VZEROUPPER; \
	RET

// func sumsTileRows512(rows, W int, dy, x, mean unsafe.Pointer, a, b unsafe.Pointer)
// For rows rows W float32s apart from dy and x, adds into the float64 a[c]
// and b[c], c < 64, Σ dy and Σ dy·(x−mean[c]) (mean: 64 float32s), summed
// in float32 over foldRows (16) rows at a time.
TEXT ·sumsTileRows512(SB), NOSPLIT, $0-56
	TILE_ARGS(4)
	JMP fold_test

fold_loop:
	FOLD_START

row_loop:
	VMOVUPS     0(SI), Z8
	VMOVUPS     0(DI), Z12
	VSUBPS      Z16, Z12, Z12
	VADDPS      Z8, Z0, Z0
	VFMADD231PS Z12, Z8, Z4
	VMOVUPS     64(SI), Z9
	VMOVUPS     64(DI), Z13
	VSUBPS      Z17, Z13, Z13
	VADDPS      Z9, Z1, Z1
	VFMADD231PS Z13, Z9, Z5
	VMOVUPS     128(SI), Z10
	VMOVUPS     128(DI), Z14
	VSUBPS      Z18, Z14, Z14
	VADDPS      Z10, Z2, Z2
	VFMADD231PS Z14, Z10, Z6
	VMOVUPS     192(SI), Z11
	VMOVUPS     192(DI), Z15
	VSUBPS      Z19, Z15, Z15
	VADDPS      Z11, Z3, Z3
	VFMADD231PS Z15, Z11, Z7
	NEXT_ROW(row_loop)

	// Fold: each sum's low and high eight lanes, widened, into a and b.
	FOLD_TILE

	FOLD_TEST(fold_test, fold_loop)

// UNPERMUTE folds the pair lo, hi of 32 channels widened by interleaving
// into the float64 sums at off(p): channels 0-15 from Z26's indices, 16-31
// from Z27's.
#define UNPERMUTE(lo, hi, p, off) \
	VMOVUPS   Z26, Z28; \
	VPERMI2PS hi, lo, Z28; \
	VMOVUPS   Z27, Z29; \
	VPERMI2PS hi, lo, Z29; \
	FOLD(Z28, Y28, p, off); \
	FOLD(Z29, Y29, p, off+128)

// func sumsTileRowsBF16(rows, W int, dy, x, mean, a, b, order unsafe.Pointer)
// sumsTileRows512 over bfloat16 rows (W of them apart): each load of 32
// channels widened by interleaving its 16-bit halves with zeros within
// 128-bit lanes (VPUNPCKLWD, VPUNPCKHWD), which leaves channels 0-3, 8-11,
// 16-19, 24-27 in the low vector and the others in the high one. mean holds
// the 64 float32 means laid out alike; order the two VPERMI2PS indices (32
// uint32s) that put each pair of vectors back in channel order as it is
// folded.
TEXT ·sumsTileRowsBF16(SB), NOSPLIT, $0-64
	TILE_ARGS(2)
	MOVQ    order+56(FP), R11
	VMOVUPS 0(R11), Z26
	VMOVUPS 64(R11), Z27
	VPXORD  Z24, Z24, Z24
	JMP     bf_fold_test

bf_fold_loop:
	FOLD_START

bf_row_loop:
	VMOVDQU64   0(SI), Z8
	VMOVDQU64   0(DI), Z12
	VPUNPCKLWD  Z8, Z24, Z9
	VPUNPCKHWD  Z8, Z24, Z10
	VPUNPCKLWD  Z12, Z24, Z13
	VPUNPCKHWD  Z12, Z24, Z14
	VSUBPS      Z16, Z13, Z13
	VSUBPS      Z17, Z14, Z14
	VADDPS      Z9, Z0, Z0
	VFMADD231PS Z13, Z9, Z4
	VADDPS      Z10, Z1, Z1
	VFMADD231PS Z14, Z10, Z5
	VMOVDQU64   64(SI), Z8
	VMOVDQU64   64(DI), Z12
	VPUNPCKLWD  Z8, Z24, Z9
	VPUNPCKHWD  Z8, Z24, Z10
	VPUNPCKLWD  Z12, Z24, Z13
	VPUNPCKHWD  Z12, Z24, Z14
	VSUBPS      Z18, Z13, Z13
	VSUBPS      Z19, Z14, Z14
	VADDPS      Z9, Z2, Z2
	VFMADD231PS Z13, Z9, Z6
	VADDPS      Z10, Z3, Z3
	VFMADD231PS Z14, Z10, Z7
	NEXT_ROW(bf_row_loop)

	// Each pair back in channel order, then folded as in sumsTileRows512.
	UNPERMUTE(Z0, Z1, R8, 0)
	UNPERMUTE(Z2, Z3, R8, 256)
	UNPERMUTE(Z4, Z5, R9, 0)
	UNPERMUTE(Z6, Z7, R9, 256)

	FOLD_TEST(bf_fold_test, bf_fold_loop)
