//go:build goexperiment.simd && amd64

#include "textflag.h"

// Training x_backprop with non-temporal stores, eight float32s at a time
// (AVX2 and FMA): the same operations, in the same order, as applyRow32 and
// applyRun32, so each element is bit for bit what those loops write; only
// the store differs. VMOVNTPS writes around the caches, so a pass over a
// tensor larger than the cache does not first read every line of dx it is
// about to overwrite. archsimd has no non-temporal store. dx must be 32-byte
// aligned (VMOVNTPS faults otherwise) and n a multiple of 8; the caller
// fences (streamFence) before other threads may read dx.

// func streamApplyRow(n int, dy, x, dx, a, b, mdy, mu unsafe.Pointer)
// dx[j] = (dy[j]−mdy[j])·a[j] + (x[j]−mu[j])·b[j], j < n.
TEXT ·streamApplyRow(SB), NOSPLIT, $0-64
	MOVQ n+0(FP), CX
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DI
	MOVQ dx+24(FP), DX
	MOVQ a+32(FP), R8
	MOVQ b+40(FP), R9
	MOVQ mdy+48(FP), R10
	MOVQ mu+56(FP), R11
	XORQ AX, AX
	JMP  rowtest
rowloop:
	VMOVUPS     (DI)(AX*4), Y0
	VSUBPS      (R11)(AX*4), Y0, Y0
	VMULPS      (R9)(AX*4), Y0, Y0
	VMOVUPS     (SI)(AX*4), Y1
	VSUBPS      (R10)(AX*4), Y1, Y1
	VFMADD231PS (R8)(AX*4), Y1, Y0
	VMOVNTPS    Y0, (DX)(AX*4)
	ADDQ        $8, AX
rowtest:
	CMPQ AX, CX
	JLT  rowloop
	VZEROUPPER
	RET

// func streamApplyRun(n int, dy, x, dx unsafe.Pointer, a, b, mdy, mu float32)
// dx[j] = (dy[j]−mdy)·a + (x[j]−mu)·b, j < n.
TEXT ·streamApplyRun(SB), NOSPLIT, $0-48
	MOVQ         n+0(FP), CX
	MOVQ         dy+8(FP), SI
	MOVQ         x+16(FP), DI
	MOVQ         dx+24(FP), DX
	VBROADCASTSS a+32(FP), Y2
	VBROADCASTSS b+36(FP), Y3
	VBROADCASTSS mdy+40(FP), Y4
	VBROADCASTSS mu+44(FP), Y5
	XORQ         AX, AX
	JMP          runtest
runloop:
	VMOVUPS     (DI)(AX*4), Y0
	VSUBPS      Y5, Y0, Y0
	VMULPS      Y3, Y0, Y0
	VMOVUPS     (SI)(AX*4), Y1
	VSUBPS      Y4, Y1, Y1
	VFMADD231PS Y2, Y1, Y0
	VMOVNTPS    Y0, (DX)(AX*4)
	ADDQ        $8, AX
runtest:
	CMPQ AX, CX
	JLT  runloop
	VZEROUPPER
	RET

// func streamFence()
// Orders this thread's non-temporal stores before its later stores.
TEXT ·streamFence(SB), NOSPLIT, $0-0
	SFENCE
	RET
