//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "planes_amd64.h"

// The channels-first bfloat16 loops over runs of one channel on AVX-512
// vectors: planes_amd64.s's float32 loops (planes_amd64.h), each bfloat16
// widened where it is loaded (zero-extended to 32 bits and shifted up 16:
// exact) and dx rounded to bfloat16 where it is stored (to nearest even, a
// NaN quieted),
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

// The bfloat16 elements: two bytes, widened where they are loaded, dx
// rounded where it is stored.
#define ELEM_BYTES 2
#define ELEM_SHIFT 1
#define VEC_BYTES 32
#define DY_FULL WIDEN_BF16((SI), Z5)
#define DY_LOW \
	VMOVDQU16.Z (SI), K1, Y5; \
	WIDEN_BF16(Y5, Z5)
#define DY_HIGH \
	VPMOVZXWD (SI)(R14*1), Z5; \
	VPSLLD.Z  $16, Z5, K1, Z5
#define NO_STEP
#define X_VEC WIDEN_BF16((DI), Z6)
#define X_LOW \
	VMOVDQU16.Z (DI), K1, Y6; \
	WIDEN_BF16(Y6, Z6)
#define X_HIGH WIDEN_BF16((DI)(R14*1), Z6)
#define X_FULL X_VEC
#define X_TAIL X_LOW
#define DY_VEC DY_FULL
#define DY_TAIL DY_LOW
#define DX_STORE \
	ROUND_BF16; \
	VPMOVDW Z5, (R8)
#define DX_STORE_TAIL \
	ROUND_BF16; \
	VPMOVDW   Z5, Y5; \
	VMOVDQU16 Y5, K1, (R8)
#define DX_STORE_LAST \
	ROUND_BF16; \
	VPMOVDW   Z5, Y5; \
	VMOVDQU16 Y5, K1, -32(R8)(BX*2)
#define PRELOAD_DY WIDEN_BF16(-32(SI)(BX*2), Z14)
#define PRELOAD_DY_X \
	PRELOAD_DY; \
	WIDEN_BF16(-32(DI)(BX*2), Z15)
#define X_LAST VMOVAPS Z15, Z6

// func sumsPlaneLanesBF16Runs512(n, C, S, c, pos int, dy, x, mean, lanes unsafe.Pointer)
// For the n bfloat16 elements at dy and x, runs of channel c's plane of S
// from pos on, then the next channels' (wrapping at C), adds each run's
// Σdy and Σdy·(x−mean[c]), in float32 lanes over 16 vectors at most,
// widened and halves added, into channel c's float64 lanes at lanes[16c:]
// (Σdy's eight) and lanes[16c+8:]: sumsPlaneLanesRuns512 on the widened
// planes.
TEXT ·sumsPlaneLanesBF16Runs512(SB), NOSPLIT, $0-72
	SUMS_RUNS(DY_FULL, DY_LOW, DY_HIGH, NO_STEP)

// func applyPlanesBF16Runs512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu unsafe.Pointer, scaleOnly bool)
// For the n bfloat16 elements at dy and x, runs of channel c's plane of S
// from pos on, then the next channels' (wrapping at C), writes dx =
// (dy − mdy[c])·a[c] + (x − mu[c])·b[c], or with scaleOnly dx = dy·a[c]
// (x unread: only its pointer steps), rounded to bfloat16:
// applyPlanesRuns512 on the widened planes, then narrowBFloat16.
TEXT ·applyPlanesBF16Runs512(SB), NOSPLIT, $0-97
	MOVQ n+0(FP), CX
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
	JZ    sdone
	BF16_CONSTANTS
	MOVBQZX scaleOnly+96(FP), AX
	TESTQ AX, AX
	JNZ   srun
	APPLY_RUNS(AFFINE(X_FULL), AFFINE(X_TAIL), PRELOAD_DY_X, AFFINE(X_LAST), MU_R12, arun, avec, atail, alow, alast, astep, anext, awrap, adone)
	APPLY_RUNS(SCALE, SCALE, PRELOAD_DY, SCALE, MU_R12, srun, svec, stail, slow, slast, sstep, snext, swrap, sdone)
