//go:build goexperiment.simd && amd64

#include "textflag.h"

// The channels-first bfloat16 loops over runs of one channel on AVX-512
// vectors: planes_amd64.s's float32 loops, each bfloat16 widened where it
// is loaded (zero-extended to 32 bits and shifted up 16: exact) and dx
// rounded to bfloat16 where it is stored (to nearest even, a NaN quieted),
// sumsPlaneLanesBF16x16's and applyPlanesBF16x16's arithmetic in their
// order, bit for bit, where archsimd's compiler kept the loops' pointers on
// the stack and copied each run's tail through memory. A run's tail of
// r < 16 elements is loaded and stored by masked 16-bit moves (AVX512BW,
// which canAVX512's AVX-512 includes) under the low r bits, or, in the sums
// of a run of 16 elements or more, loaded whole as its last vector and
// masked to its high r lanes.

// WIDEN_BF16(src, z): z = the sixteen bfloat16 words of src (memory or a
// Y register) as float32s.
#define WIDEN_BF16(src, z) \
	VPMOVZXWD src, z; \
	VPSLLD    $16, z, z

// ROUND_BF16 rounds Z5's float32s to bfloat16 in the low halves of its
// lanes, as roundBF16x16: a NaN (|u| > +Inf's bits) becomes its high half
// with the quiet bit set, any other u (u + 0x7fff + the high half's lowest
// bit) >> 16. The constants are in Z20-Z24 (BF16_CONSTANTS); Z7-Z9, K2
// are clobbered.
#define ROUND_BF16 \
	VPANDD   Z20, Z5, Z7; \
	VPCMPGTD Z21, Z7, K2; \
	VPSRLD   $16, Z5, Z8; \
	VPANDD   Z23, Z8, Z9; \
	VPADDD   Z22, Z5, Z5; \
	VPADDD   Z9, Z5, Z5; \
	VPSRLD   $16, Z5, Z5; \
	VPORD    Z24, Z8, K2, Z5

// BF16_CONSTANTS: |u|'s mask, +Inf's bits, the rounding bias, the lowest
// bit, the quiet bit, in Z20-Z24.
#define BF16_CONSTANTS \
	MOVL         $0x7fffffff, AX; \
	VPBROADCASTD AX, Z20; \
	MOVL         $0x7f800000, AX; \
	VPBROADCASTD AX, Z21; \
	MOVL         $0x7fff, AX; \
	VPBROADCASTD AX, Z22; \
	MOVL         $1, AX; \
	VPBROADCASTD AX, Z23; \
	MOVL         $0x40, AX; \
	VPBROADCASTD AX, Z24

// func sumsPlaneLanesBF16Runs512(n, C, S, c, pos int, dy, x, mean, lanes unsafe.Pointer)
// For the n bfloat16 elements at dy and x, runs of channel c's plane of S
// from pos on, then the next channels' (wrapping at C), adds each run's
// Σdy and Σdy·(x−mean[c]), in float32 lanes over 16 vectors at most,
// widened and halves added, into channel c's float64 lanes at lanes[16c:]
// (Σdy's eight) and lanes[16c+8:]: sumsPlaneLanesRuns512 on the widened
// planes.
TEXT ·sumsPlaneLanesBF16Runs512(SB), NOSPLIT, $0-72
	MOVQ  n+0(FP), CX
	MOVQ  C+8(FP), R10
	MOVQ  S+16(FP), DX
	MOVQ  c+24(FP), R11
	MOVQ  pos+32(FP), R13
	MOVQ  dy+40(FP), SI
	MOVQ  x+48(FP), DI
	MOVQ  mean+56(FP), R8
	MOVQ  lanes+64(FP), R9
	NEGQ  R13
	ADDQ  DX, R13 // the first run's length, S − pos, before n bounds it
	TESTQ CX, CX
	JZ    sdone

srun:
	CMPQ         R13, CX
	CMOVQGT      CX, R13
	MOVQ         R11, AX
	SHLQ         $7, AX
	ADDQ         R9, AX
	VBROADCASTSS (R8)(R11*4), Z2
	VMOVUPD      (AX), Z3
	VMOVUPD      64(AX), Z4
	MOVQ         R13, BX

sgroup:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	MOVQ   $16, R15

svec:
	CMPQ        BX, $16
	JLT         stail
	WIDEN_BF16((SI), Z5)
	WIDEN_BF16((DI), Z6)
	VSUBPS      Z2, Z6, Z6
	VADDPS      Z5, Z0, Z0
	VFMADD231PS Z6, Z5, Z1
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $16, BX
	DECQ        R15
	JNZ         svec
	JMP         sfold

stail:
	TESTQ BX, BX
	JZ    sfold
	MOVL  $0xffff, R12
	CMPQ  R13, $16
	JGE   slast
	BZHIL BX, R12, R14
	KMOVW R14, K1
	VMOVDQU16.Z (SI), K1, Y5
	VMOVDQU16.Z (DI), K1, Y6
	WIDEN_BF16(Y5, Z5)
	WIDEN_BF16(Y6, Z6)
	JMP   smasked

slast:
	MOVL     $16, R14
	SUBL     BX, R14
	BZHIL    R14, R12, R14
	XORL     R12, R14
	KMOVW    R14, K1
	MOVQ     BX, R14
	SUBQ     $16, R14
	SHLQ     $1, R14
	VPMOVZXWD (SI)(R14*1), Z5
	VPSLLD.Z $16, Z5, K1, Z5
	WIDEN_BF16((DI)(R14*1), Z6)

smasked:
	VSUBPS.Z    Z2, Z6, K1, Z6
	VADDPS      Z5, Z0, Z0
	VFMADD231PS Z6, Z5, Z1
	LEAQ        (SI)(BX*2), SI
	LEAQ        (DI)(BX*2), DI
	XORQ        BX, BX

sfold:
	VEXTRACTF32X8 $1, Z0, Y7
	VCVTPS2PD     Y0, Z8
	VCVTPS2PD     Y7, Z7
	VADDPD        Z7, Z8, Z8
	VADDPD        Z8, Z3, Z3
	VEXTRACTF32X8 $1, Z1, Y7
	VCVTPS2PD     Y1, Z8
	VCVTPS2PD     Y7, Z7
	VADDPD        Z7, Z8, Z8
	VADDPD        Z8, Z4, Z4
	TESTQ         BX, BX
	JNZ           sgroup
	VMOVUPD       Z3, (AX)
	VMOVUPD       Z4, 64(AX)
	SUBQ          R13, CX
	MOVQ          DX, R13
	INCQ          R11
	CMPQ          R11, R10
	JNE           snext
	XORQ          R11, R11

snext:
	TESTQ CX, CX
	JNZ   srun

sdone:
	VZEROUPPER
	RET

// APPLY_BF16_RUNS(op, xfull, xtail, run, vec, tail, next, wrap, done) is
// applyPlanesBF16Runs512's loop: op writes a vector's dx into Z5 from dy
// in Z5 and x in Z6, which xfull loads for a whole vector and xtail for a
// tail (masked by K1, BX elements) where op reads it.
#define APPLY_BF16_RUNS(op, xfull, xtail, run, vec, tail, next, wrap, done) \
run: \
	CMPQ    R15, CX; \
	CMOVQGT CX, R15; \
	VBROADCASTSS (R9)(R13*4), Z0; \
	VBROADCASTSS (R10)(R13*4), Z1; \
	VBROADCASTSS (R11)(R13*4), Z2; \
	VBROADCASTSS (R12)(R13*4), Z3; \
	MOVQ    R15, BX; \
vec: \
	CMPQ    BX, $16; \
	JLT     tail; \
	WIDEN_BF16((SI), Z5); \
	xfull; \
	op; \
	ROUND_BF16; \
	VPMOVDW Z5, (R8); \
	ADDQ    $32, SI; \
	ADDQ    $32, DI; \
	ADDQ    $32, R8; \
	SUBQ    $16, BX; \
	JMP     vec; \
tail: \
	TESTQ   BX, BX; \
	JZ      next; \
	MOVL    $0xffff, AX; \
	BZHIL   BX, AX, AX; \
	KMOVW   AX, K1; \
	VMOVDQU16.Z (SI), K1, Y5; \
	WIDEN_BF16(Y5, Z5); \
	xtail; \
	op; \
	ROUND_BF16; \
	VPMOVDW Z5, Y5; \
	VMOVDQU16 Y5, K1, (R8); \
	LEAQ    (SI)(BX*2), SI; \
	LEAQ    (DI)(BX*2), DI; \
	LEAQ    (R8)(BX*2), R8; \
next: \
	SUBQ    R15, CX; \
	MOVQ    DX, R15; \
	INCQ    R13; \
	CMPQ    R13, R14; \
	JNE     wrap; \
	XORQ    R13, R13; \
wrap: \
	TESTQ   CX, CX; \
	JNZ     run; \
done: \
	VZEROUPPER; \
	RET

// AFFINE_BF16: dx = (dy − mdy)·a + (x − mu)·b; SCALE_BF16: dx = dy·a, x
// unread.
#define X_FULL_BF16 WIDEN_BF16((DI), Z6)
#define X_TAIL_BF16 \
	VMOVDQU16.Z (DI), K1, Y6; \
	WIDEN_BF16(Y6, Z6)
#define AFFINE_BF16 \
	VSUBPS      Z3, Z6, Z6; \
	VMULPS      Z1, Z6, Z6; \
	VSUBPS      Z2, Z5, Z5; \
	VFMADD132PS Z0, Z6, Z5
#define SCALE_BF16 VMULPS Z0, Z5, Z5
#define NO_X

// func applyPlanesBF16Runs512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu unsafe.Pointer, scaleOnly bool)
// For the n bfloat16 elements at dy and x, runs of channel c's plane of S
// from pos on, then the next channels' (wrapping at C), writes dx =
// (dy − mdy[c])·a[c] + (x − mu[c])·b[c], or with scaleOnly dx = dy·a[c]
// (x unread: only its pointer steps), rounded to bfloat16:
// applyPlanesRuns512 on the widened planes, then narrowBFloat16.
TEXT ·applyPlanesBF16Runs512(SB), NOSPLIT, $0-97
	MOVQ n+0(FP), CX
	MOVQ C+8(FP), R14
	MOVQ S+16(FP), DX
	MOVQ c+24(FP), R13
	MOVQ pos+32(FP), R15
	MOVQ dy+40(FP), SI
	MOVQ x+48(FP), DI
	MOVQ dx+56(FP), R8
	MOVQ a+64(FP), R9
	MOVQ b+72(FP), R10
	MOVQ mdy+80(FP), R11
	MOVQ mu+88(FP), R12
	NEGQ R15
	ADDQ DX, R15 // the first run's length, S − pos, before n bounds it
	TESTQ CX, CX
	JZ    adone
	BF16_CONSTANTS
	MOVBQZX scaleOnly+96(FP), AX
	TESTQ AX, AX
	JNZ   xrun
	APPLY_BF16_RUNS(AFFINE_BF16, X_FULL_BF16, X_TAIL_BF16, arun, avec, atail, anext, awrap, adone)
	APPLY_BF16_RUNS(SCALE_BF16, NO_X, NO_X, xrun, xvec, xtail, xnext, xwrap, xdone)
