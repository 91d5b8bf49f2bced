//go:build goexperiment.simd && amd64

#include "textflag.h"

// The bfloat16 channels-last apply loop (applyRowsBF16) with AVX512_BF16,
// 32 channels at a time: dy and x widened by a zero extension and a shift,
// dx formed in float32 exactly as the Go loop forms it, and rounded to
// bfloat16 by VCVTNE2PS2BF16, which rounds to nearest even and quiets NaNs
// as narrowBFloat16 does, in one instruction for 32 elements where the
// integer rounding takes nine for sixteen. It reads subnormal inputs as
// zero, though, whatever MXCSR says: 32 elements any of which is subnormal
// (VFPCLASSPS; a normal float32 never rounds to a subnormal bfloat16, the
// exponent ranges being the same) are rounded by the integer sequence
// instead. archsimd has neither instruction, and Go's assembler does not
// know VCVTNE2PS2BF16: it is spelt out in bytes.

// func hasAVX512BF16() bool
// CPUID leaf 7, subleaf 1, EAX bit 5. Called only where the CPU has
// AVX-512, so leaf 7 exists.
TEXT ·hasAVX512BF16(SB), NOSPLIT, $0-1
	MOVB  $0, ret+0(FP)
	MOVL  $7, AX
	XORL  CX, CX
	CPUID
	CMPL  AX, $1 // the highest subleaf of leaf 7
	JB    nobf16
	MOVL  $7, AX
	MOVL  $1, CX
	CPUID
	SHRL  $5, AX
	ANDL  $1, AX
	MOVB  AX, ret+0(FP)
nobf16:
	RET

// VCVTNE2PS2BF16_Z2_Z3_Z4 writes into Z4 the 32 bfloat16 roundings of Z2
// (the low sixteen) and Z3 (the high sixteen): vcvtne2ps2bf16 zmm4, zmm3, zmm2.
#define VCVTNE2PS2BF16_Z2_Z3_Z4 \
	BYTE $0x62; BYTE $0xf2; BYTE $0x67; BYTE $0x48; BYTE $0x72; BYTE $0xe2

// BF16_CONSTANTS sets what ROUND uses: 1 in Z10, 0x7fff in Z11, the quiet
// bit 0x40 in Z12.
#define BF16_CONSTANTS \
	MOVL         $1, AX; \
	VPBROADCASTD AX, Z10; \
	MOVL         $0x7fff, AX; \
	VPBROADCASTD AX, Z11; \
	MOVL         $0x40, AX; \
	VPBROADCASTD AX, Z12

// ROUND rounds the sixteen float32s of z to bfloat16 in the low halves of
// out's lanes, as narrowBFloat16: to nearest even, a NaN quieted.
#define ROUND(z, out) \
	VPSRLD      $16, z, Z6; \
	VPANDD      Z10, Z6, Z7; \
	VPADDD      Z11, z, out; \
	VPADDD      Z7, out, out; \
	VPSRLD      $16, out, out; \
	VFPCLASSPSZ $0x81, z, K3; \
	VPORD       Z12, Z6, K3, out

// NARROW stores the 32 float32s of Z2 and Z3 at DI as bfloat16, by
// VCVTNE2PS2BF16 unless one of them is subnormal (then by ROUND at slow,
// which jumps back to stored).
#define NARROW(slow, stored) \
	VFPCLASSPSZ $0x20, Z2, K1; \
	VFPCLASSPSZ $0x20, Z3, K2; \
	KORTESTW    K1, K2; \
	JNZ         slow; \
	VCVTNE2PS2BF16_Z2_Z3_Z4; \
	VMOVDQU16   Z4, (DI); \
stored:

// SLOW_NARROW is NARROW's path for 32 elements with a subnormal.
#define SLOW_NARROW(slow, stored) \
slow: \
	ROUND(Z2, Z5); \
	VPMOVDW Z5, (DI); \
	ROUND(Z3, Z5); \
	VPMOVDW Z5, 32(DI); \
	JMP     stored

// WIDEN loads the 32 bfloat16s at p into Z(lo) and Z(hi) as float32s.
#define WIDEN(p, lo, hi) \
	VPMOVZXWD (p), lo; \
	VPMOVZXWD 32(p), hi; \
	VPSLLD    $16, lo, lo; \
	VPSLLD    $16, hi, hi

// func applyRowsBF16x32(rows, L int, dy, x, dx, a, b, mdy, mu unsafe.Pointer)
// For rows rows of L bfloat16s (L a positive multiple of 32), writes
// dx[i] = bfloat16((dy[i] − mdy[c])·a[c] + (x[i] − mu[c])·b[c]), c = i mod
// L, or where x is nil (scale only) dx[i] = bfloat16(dy[i]·a[c]), the
// coefficients L float32s each and dx formed as applyRowsBF16 forms it. dx
// may be dy or x.
TEXT ·applyRowsBF16x32(SB), NOSPLIT, $0-72
	MOVQ rows+0(FP), CX
	MOVQ L+8(FP), DX
	MOVQ dy+16(FP), SI
	MOVQ x+24(FP), R13
	MOVQ dx+32(FP), DI
	MOVQ a+40(FP), R8
	MOVQ b+48(FP), R10
	MOVQ mdy+56(FP), R11
	MOVQ mu+64(FP), R12
	BF16_CONSTANTS
	SHLQ  $2, DX // the row's coefficients in bytes
	TESTQ CX, CX
	JZ    done

row:
	XORQ R9, R9

col:
	TESTQ R13, R13
	JZ    scale
	WIDEN(R13, Z0, Z1)
	VSUBPS      (R12)(R9*1), Z0, Z0
	VSUBPS      64(R12)(R9*1), Z1, Z1
	VMULPS      (R10)(R9*1), Z0, Z0
	VMULPS      64(R10)(R9*1), Z1, Z1
	WIDEN(SI, Z2, Z3)
	VSUBPS      (R11)(R9*1), Z2, Z2
	VSUBPS      64(R11)(R9*1), Z3, Z3
	VFMADD132PS (R8)(R9*1), Z0, Z2
	VFMADD132PS 64(R8)(R9*1), Z1, Z3
	ADDQ        $64, R13
	JMP         narrow

scale:
	WIDEN(SI, Z0, Z1)
	VMULPS (R8)(R9*1), Z0, Z2
	VMULPS 64(R8)(R9*1), Z1, Z3

narrow:
	NARROW(slow, stored)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $128, R9
	CMPQ R9, DX
	JB   col
	DECQ CX
	JNZ  row

done:
	VZEROUPPER
	RET

	SLOW_NARROW(slow, stored)
