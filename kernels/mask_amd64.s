//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "tiles_amd64.h"

// FusedBatchNormGradEx's masked channels-last loops on AVX-512 vectors:
// the loops of sumsTileRows512 and applyRow512 over dz = dy·m instead of
// dy, m formed in a mask register where dy is loaded (in Go, archsimd's
// compiler kept masks in vectors and converted them on every use). m is 1
// where 0 < y (Relu) or 0 < y < 6 (Relu6), else 0, a NaN y off; dz = dy·m
// is a multiplication, as stock's ReluGrad's, so a NaN or infinite dy
// times 0 is NaN. Each element takes the operations of the AVX2 loops
// sumsTileMask32 and applyRowMask32 (simd_amd64.go) at sixteen lanes: the
// same values, but for which NaN's payload comes through an addition of
// two.
// m's bits: element e's at bit e of the bytes at bits, sixteen a vector.

// RELU sets K1 to the lanes of Z12 (y) above 0; RELU6 to those in (0, 6).
#define RELU \
	VCMPPS $0x1e, Z24, Z12, K1
#define RELU6 \
	VCMPPS $0x1e, Z24, Z12, K1; \
	VCMPPS $0x11, Z25, Z12, K1, K1

// MASKED_SUMS(off, boff, g, xc, mu, sa, sb) adds the sixteen channels at
// byte off of the row into the sums sa (Σdz) and sb (Σdz·(x−mu)), m in K1
// (its bits stored at byte boff of R11), with g and xc for temporaries.
#define MASKED_SUMS(off, boff, g, xc, mu, sa, sb) \
	KMOVW       K1, boff(R11); \
	VMOVAPS.Z   Z26, K1, g; \
	VMULPS      off(SI), g, g; \
	VMOVUPS     off(DI), xc; \
	VSUBPS      mu, xc, xc; \
	VADDPS      g, sa, sa; \
	VFMADD231PS xc, g, sb

// MASK_ROW(act) is one row of a tile of 64 channels, act RELU or RELU6.
#define MASK_ROW(act) \
	VMOVUPS 0(R13), Z12; \
	act; \
	MASKED_SUMS(0, 0, Z8, Z13, Z16, Z0, Z4); \
	VMOVUPS 64(R13), Z12; \
	act; \
	MASKED_SUMS(64, 2, Z9, Z14, Z17, Z1, Z5); \
	VMOVUPS 128(R13), Z12; \
	act; \
	MASKED_SUMS(128, 4, Z10, Z15, Z18, Z2, Z6); \
	VMOVUPS 192(R13), Z12; \
	act; \
	MASKED_SUMS(192, 6, Z11, Z13, Z19, Z3, Z7)

// MASK_ROW1(act) is one row of a tile of sixteen channels.
#define MASK_ROW1(act) \
	VMOVUPS 0(R13), Z12; \
	act; \
	MASKED_SUMS(0, 0, Z8, Z13, Z16, Z0, Z4)

// MASK_ARGS loads what both tiles take: rows (CX), the row stride W·4 in
// bytes (DX) and W/8 in bytes of bits (R12), dy (SI), x (DI), y (R13), a
// (R8), b (R9), bits (R11), upper (R10), and the constants.
#define MASK_ARGS \
	MOVQ    rows+0(FP), CX; \
	MOVQ    W+8(FP), DX; \
	MOVQ    DX, R12; \
	SHRQ    $3, R12; \
	SHLQ    $2, DX; \
	MOVQ    dy+16(FP), SI; \
	MOVQ    x+24(FP), DI; \
	MOVQ    y+32(FP), R13; \
	MOVQ    mean+40(FP), R10; \
	MOVQ    a+48(FP), R8; \
	MOVQ    b+56(FP), R9; \
	MOVQ    bits+64(FP), R11; \
	MASK_CONSTANTS

// NEXT_ROW(loop) steps dy, x, y and the bits to the next row and runs loop
// again while the fold has rows left (BX).
#define NEXT_ROW(loop) \
	ADDQ DX, SI; \
	ADDQ DX, DI; \
	ADDQ DX, R13; \
	ADDQ R12, R11; \
	DECQ BX; \
	JNZ  loop

// TILE(act, row, fold, test, next, loop) is a tile's loop with activation
// act, one row's step row, and the fold of its sums fold (test, next and
// loop its labels).
#define TILE(act, row, fold, test, next, loop) \
	JMP test; \
next: \
	FOLD_START; \
loop: \
	row(act); \
	NEXT_ROW(loop); \
	fold; \
test: \
	TESTQ CX, CX; \
	JG    next; \
	VZEROUPPER; \
	RET

#define FOLD1 \
	FOLD(Z0, Y0, R8, 0); \
	FOLD(Z4, Y4, R9, 0)

// func sumsTileMaskRows512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool)
// For rows rows W float32s apart from dy, x and y, adds into the float64
// a[c] and b[c], c < 64, Σ dz and Σ dz·(x−mean[c]) (mean: 64 float32s),
// dz = dy·m, summed in float32 over 16 rows at a time, and writes m's
// bits, the rows W bits apart.
TEXT ·sumsTileMaskRows512(SB), NOSPLIT, $0-73
	MASK_ARGS
	VMOVUPS 0(R10), Z16
	VMOVUPS 64(R10), Z17
	VMOVUPS 128(R10), Z18
	VMOVUPS 192(R10), Z19
	MOVBQZX upper+72(FP), AX
	TESTQ   AX, AX
	JNZ     relu6
	TILE(RELU, MASK_ROW, FOLD_TILE, relu_test, relu_next, relu_row)
relu6:
	TILE(RELU6, MASK_ROW, FOLD_TILE, relu6_test, relu6_next, relu6_row)

// func sumsTileMask1Rows512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool)
// sumsTileMaskRows512 for sixteen channels (mean: 16 float32s).
TEXT ·sumsTileMask1Rows512(SB), NOSPLIT, $0-73
	MASK_ARGS
	VMOVUPS 0(R10), Z16
	MOVBQZX upper+72(FP), AX
	TESTQ   AX, AX
	JNZ     relu6
	TILE(RELU, MASK_ROW1, FOLD1, relu_test, relu_next, relu_row)
relu6:
	TILE(RELU6, MASK_ROW1, FOLD1, relu6_test, relu6_next, relu6_row)

// APPLY_ROWS(store, row, col, done) is applyRowsMask512's loop, dx
// written by store (VMOVUPS, or VMOVNTPS around the caches).
#define APPLY_ROWS(store, row, col, done) \
	TESTQ CX, CX; \
	JZ    done; \
row: \
	XORQ AX, AX; \
	XORQ BX, BX; \
col: \
	KMOVW       (R11)(BX*1), K1; \
	VMOVAPS.Z   Z26, K1, Z1; \
	VMULPS      (SI)(AX*4), Z1, Z1; \
	VMOVUPS     (DI)(AX*4), Z0; \
	VSUBPS      (R12)(AX*4), Z0, Z0; \
	VMULPS      (R9)(AX*4), Z0, Z0; \
	VSUBPS      (R10)(AX*4), Z1, Z1; \
	VFMADD231PS (R8)(AX*4), Z1, Z0; \
	store       Z0, (R13)(AX*4); \
	ADDQ        $16, AX; \
	ADDQ        $2, BX; \
	CMPQ        AX, DX; \
	JLT         col; \
	ADDQ        R14, SI; \
	ADDQ        R14, DI; \
	ADDQ        R14, R13; \
	ADDQ        R15, R11; \
	DECQ        CX; \
	JNZ         row; \
done: \
	VZEROUPPER; \
	RET

// func applyRowsMask512(rows, n, W int, dy, x, dx, bits, a, b, mdy, mu unsafe.Pointer, stream bool)
// For rows rows W float32s apart, their first n (a positive multiple of
// 16) channels, writes dx[j] = (dz[j]−mdy[j])·a[j] + (x[j]−mu[j])·b[j],
// dz = dy·m, m's bits read from the bytes at bits (AX the element, BX its
// bits' byte), the rows W bits apart. dx may be dy or x. With stream, dx
// is written with non-temporal stores: its rows must start 64-byte
// aligned, and the caller fences (streamFence) before other threads read
// it.
TEXT ·applyRowsMask512(SB), NOSPLIT, $0-89
	MOVQ rows+0(FP), CX
	MOVQ n+8(FP), DX
	MOVQ W+16(FP), R14
	MOVQ dy+24(FP), SI
	MOVQ x+32(FP), DI
	MOVQ dx+40(FP), R13
	MOVQ bits+48(FP), R11
	MOVQ a+56(FP), R8
	MOVQ b+64(FP), R9
	MOVQ mdy+72(FP), R10
	MOVQ mu+80(FP), R12
	MASK_CONSTANTS
	MOVQ    R14, R15
	SHRQ    $3, R15 // a row's bits in bytes
	SHLQ    $2, R14 // a row in bytes
	MOVBQZX stream+88(FP), AX
	TESTQ   AX, AX
	JNZ     streamed
	APPLY_ROWS(VMOVUPS, row, col, done)
streamed:
	APPLY_ROWS(VMOVNTPS, srow, scol, sdone)
