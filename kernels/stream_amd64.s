//go:build goexperiment.simd && amd64

#include "textflag.h"

// Training x_backprop with non-temporal stores, eight float32s at a time
// (AVX2 and FMA): the same operations, in the same order, as applyRow32 and
// applyPlanes32, so each element is bit for bit what those loops write; only
// the store differs. VMOVNTPS writes around the caches, so a pass over a
// tensor larger than the cache does not first read every line of dx it is
// about to overwrite. archsimd has no non-temporal store. dx must be 32-byte
// aligned (VMOVNTPS faults otherwise) and n a multiple of 8; the caller
// fences (streamFence) before other threads may read dx.

// STREAM_ARGS loads the arguments both loops share: n (CX), dy (SI), x
// (DI) and dx (DX).
#define STREAM_ARGS \
	MOVQ n+0(FP), CX; \
	MOVQ dy+8(FP), SI; \
	MOVQ x+16(FP), DI; \
	MOVQ dx+24(FP), DX

// STREAM_APPLY(mu, b, mdy, a) writes dx[j] = (dy[j]−mdy)·a + (x[j]−mu)·b,
// j < n, eight at a time, and returns: the coefficients are operands, a
// row's in memory at (R)(AX*4), a run's broadcast in registers.
#define STREAM_APPLY(mu, b, mdy, a) \
	XORQ AX, AX; \
	JMP  test; \
loop: \
	VMOVUPS     (DI)(AX*4), Y0; \
	VSUBPS      mu, Y0, Y0; \
	VMULPS      b, Y0, Y0; \
	VMOVUPS     (SI)(AX*4), Y1; \
	VSUBPS      mdy, Y1, Y1; \
	VFMADD231PS a, Y1, Y0; \
	VMOVNTPS    Y0, (DX)(AX*4); \
	ADDQ        $8, AX; \
test: \
	CMPQ AX, CX; \
	JLT  loop; \
	VZEROUPPER; \
	RET

// func streamApplyRow(n int, dy, x, dx, a, b, mdy, mu unsafe.Pointer)
// dx[j] = (dy[j]−mdy[j])·a[j] + (x[j]−mu[j])·b[j], j < n.
TEXT ·streamApplyRow(SB), NOSPLIT, $0-64
	STREAM_ARGS
	MOVQ a+32(FP), R8
	MOVQ b+40(FP), R9
	MOVQ mdy+48(FP), R10
	MOVQ mu+56(FP), R11
	STREAM_APPLY((R11)(AX*4), (R9)(AX*4), (R10)(AX*4), (R8)(AX*4))

// func streamApplyRun(n int, dy, x, dx unsafe.Pointer, a, b, mdy, mu float32)
// dx[j] = (dy[j]−mdy)·a + (x[j]−mu)·b, j < n.
TEXT ·streamApplyRun(SB), NOSPLIT, $0-48
	STREAM_ARGS
	VBROADCASTSS a+32(FP), Y2
	VBROADCASTSS b+36(FP), Y3
	VBROADCASTSS mdy+40(FP), Y4
	VBROADCASTSS mu+44(FP), Y5
	STREAM_APPLY(Y5, Y3, Y4, Y2)

// func streamFence()
// Orders this thread's non-temporal stores before its later stores.
TEXT ·streamFence(SB), NOSPLIT, $0-0
	SFENCE
	RET
