//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "tiles_amd64.h"
#include "planes_amd64.h"

// The channels-first loops over runs of one channel (a plane, or the part
// of one a block holds) on AVX-512 vectors, with the runs' loop inside:
// sumsPlaneLanes512's and applyPlanes512's arithmetic in their order, bit
// for bit, where archsimd's compiler kept the loop's pointers and sums on
// the stack and its masks in vectors. A run's tail of r < 16 elements is
// masked by the low r bits (BZHI of 0xffff: BMI2, which hasBMI2 checks), or,
// in the sums of a run of 16 elements or more and in x_backprop written
// over dy, by the high r bits of its last vector.

// The float32 elements: four bytes, loaded and stored as they are.
#define ELEM_BYTES 4
#define ELEM_SHIFT 2
#define VEC_BYTES 64
#define X_VEC VMOVUPS (DI), Z6
#define X_LOW VMOVUPS.Z (DI), K1, Z6
#define X_HIGH VMOVUPS.Z (DI)(R14*1), K1, Z6
#define DY_VEC VMOVUPS (SI), Z5
#define DY_TAIL VMOVUPS.Z (SI), K1, Z5
#define DX_STORE VMOVUPS Z5, (R8)
#define DX_STORE_TAIL VMOVUPS Z5, K1, (R8)
#define DX_STORE_LAST VMOVUPS Z5, K1, -64(R8)(BX*4)
#define X_FULL VMOVUPS (DI), Z6
#define X_TAIL VMOVUPS.Z (DI), K1, Z6

// A run's last sixteen elements, loaded before its stores (APPLY_RUNS):
// dy, x where the loop reads it, y where it masks dy.
#define PRELOAD_DY VMOVUPS -64(SI)(BX*4), Z14
#define PRELOAD_DY_X \
	PRELOAD_DY; \
	VMOVUPS -64(DI)(BX*4), Z15
#define X_LAST VMOVAPS Z15, Z6

// The masked x_backprop loops (applyPlanesReluRuns512, below): y at R12,
// so mu from the frame through AX; op's dy in Z5 becomes dz = dy·m (DZ)
// before op. (Macros that name the frame's arguments stand before the
// first TEXT, where go vet checks no frame against them.)
#define MU_FRAME \
	MOVQ         mu+88(FP), AX; \
	VBROADCASTSS (AX)(R13*4), Z3
#define MASKED_OP(act, op) \
	VMOVUPS (R12), Z12; \
	ADDQ    $64, R12; \
	DZ(act); \
	op
#define MASKED_OPTAIL(act, op) \
	VMOVUPS.Z (R12), K1, Z12; \
	LEAQ      (R12)(BX*4), R12; \
	DZ(act); \
	op
#define MASKED_PRELOAD \
	PRELOAD_DY_X; \
	VMOVUPS -64(R12)(BX*4), Z16
#define MASKED_OPLAST(act, op) \
	VMOVAPS Z16, Z12; \
	LEAQ    (R12)(BX*4), R12; \
	DZ(act); \
	op
#define MASKED_APPLY_ARGS \
	MOVQ n+0(FP), CX; \
	MOVQ S+16(FP), DX; \
	MOVQ c+24(FP), R13; \
	MOVQ pos+32(FP), R15; \
	MOVQ dy+40(FP), SI; \
	MOVQ x+48(FP), DI; \
	MOVQ dx+56(FP), R8; \
	MOVQ a+64(FP), R9; \
	MOVQ b+72(FP), R10; \
	MOVQ mdy+80(FP), R11; \
	MOVQ y+96(FP), R12; \
	MASK_CONSTANTS; \
	NEGQ R15; \
	ADDQ DX, R15; \
	TESTQ CX, CX; \
	JZ    done

#define DY_FULL VMOVUPS (SI), Z5
#define DY_LOW VMOVUPS.Z (SI), K1, Z5
#define DY_HIGH VMOVUPS.Z (SI)(R14*1), K1, Z5
#define NO_STEP

// func sumsPlaneLanesRuns512(n, C, S, c, pos int, dy, x, mean, lanes unsafe.Pointer)
// For the n elements at dy and x, runs of channel c's plane of S from pos
// on, then the next channels' (wrapping at C), adds each run's Σdy and
// Σdy·(x−mean[c]), in float32 lanes over 16 vectors at most, widened and
// halves added, into channel c's float64 lanes at lanes[16c:] (Σdy's
// eight) and lanes[16c+8:].
TEXT ·sumsPlaneLanesRuns512(SB), NOSPLIT, $0-72
	SUMS_RUNS(DY_FULL, DY_LOW, DY_HIGH, NO_STEP)

// FusedBatchNormGradEx's masked plane loops: dz = dy·m formed where dy is
// loaded, m from y at R8 (the sums) or R12 (x_backprop) in K2, as
// mask_amd64.s forms it (MASK_CONSTANTS, tiles_amd64.h: 0 in Z24, 6 in Z25,
// 1 in Z26): the block loops' dz (maskRows512), bit for bit. A tail's y is
// loaded as its dy, the lanes off zero, and so off the activation.
#define PLANE_RELU VCMPPS $0x1e, Z24, Z12, K2
#define PLANE_RELU6 \
	VCMPPS $0x1e, Z24, Z12, K2; \
	VCMPPS $0x11, Z25, Z12, K2, K2
#define DZ(act) \
	act; \
	VMOVAPS.Z Z26, K2, Z8; \
	VMULPS    Z8, Z5, Z5
#define DZ_FULL(act, yp) \
	VMOVUPS (SI), Z5; \
	VMOVUPS (yp), Z12; \
	DZ(act); \
	ADDQ    $64, yp
#define DZ_LOW(act, yp) \
	VMOVUPS.Z (SI), K1, Z5; \
	VMOVUPS.Z (yp), K1, Z12; \
	DZ(act)
#define DZ_HIGH(act, yp) \
	VMOVUPS.Z (SI)(R14*1), K1, Z5; \
	VMOVUPS.Z (yp)(R14*1), K1, Z12; \
	DZ(act)
#define Y_STEP(yp) LEAQ (yp)(BX*4), yp

// func sumsPlaneLanesReluRuns512(n, C, S, c, pos int, dy, x, mean, lanes, y unsafe.Pointer)
// sumsPlaneLanesRuns512 of dz = dy·m, m = 0 < y.
TEXT ·sumsPlaneLanesReluRuns512(SB), NOSPLIT, $0-80
	MOVQ y+72(FP), R8
	MASK_CONSTANTS
	SUMS_RUNS(DZ_FULL(PLANE_RELU, R8), DZ_LOW(PLANE_RELU, R8), DZ_HIGH(PLANE_RELU, R8), Y_STEP(R8))

// func sumsPlaneLanesRelu6Runs512(n, C, S, c, pos int, dy, x, mean, lanes, y unsafe.Pointer)
// sumsPlaneLanesRuns512 of dz = dy·m, m = 0 < y < 6.
TEXT ·sumsPlaneLanesRelu6Runs512(SB), NOSPLIT, $0-80
	MOVQ y+72(FP), R8
	MASK_CONSTANTS
	SUMS_RUNS(DZ_FULL(PLANE_RELU6, R8), DZ_LOW(PLANE_RELU6, R8), DZ_HIGH(PLANE_RELU6, R8), Y_STEP(R8))

// func applyPlanesRuns512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu unsafe.Pointer, scaleOnly bool)
// For the n elements at dy and x, runs of channel c's plane of S from pos
// on, then the next channels' (wrapping at C), writes dx = (dy −
// mdy[c])·a[c] + (x − mu[c])·b[c], or with scaleOnly dx = dy·a[c] (x
// unread: only its pointer steps), the tails by masked loads and stores.
TEXT ·applyPlanesRuns512(SB), NOSPLIT, $0-97
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
	MOVBQZX scaleOnly+96(FP), AX
	TESTQ AX, AX
	JNZ   srun
	APPLY_RUNS(AFFINE(X_FULL), AFFINE(X_TAIL), PRELOAD_DY_X, AFFINE(X_LAST), MU_R12, arun, avec, atail, alow, alast, astep, anext, awrap, adone)
	APPLY_RUNS(SCALE, SCALE, PRELOAD_DY, SCALE, MU_R12, srun, svec, stail, slow, slast, sstep, snext, swrap, sdone)

// func applyPlanesReluRuns512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu, y unsafe.Pointer)
// applyPlanesRuns512 (not scale-only) of dz = dy·m, m = 0 < y.
TEXT ·applyPlanesReluRuns512(SB), NOSPLIT, $0-104
	MASKED_APPLY_ARGS
	APPLY_RUNS(MASKED_OP(PLANE_RELU, AFFINE(X_FULL)), MASKED_OPTAIL(PLANE_RELU, AFFINE(X_TAIL)), MASKED_PRELOAD, MASKED_OPLAST(PLANE_RELU, AFFINE(X_LAST)), MU_FRAME, run, vec, tail, low, last, step, next, wrap, done)

// func applyPlanesRelu6Runs512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu, y unsafe.Pointer)
// applyPlanesRuns512 (not scale-only) of dz = dy·m, m = 0 < y < 6.
TEXT ·applyPlanesRelu6Runs512(SB), NOSPLIT, $0-104
	MASKED_APPLY_ARGS
	APPLY_RUNS(MASKED_OP(PLANE_RELU6, AFFINE(X_FULL)), MASKED_OPTAIL(PLANE_RELU6, AFFINE(X_TAIL)), MASKED_PRELOAD, MASKED_OPLAST(PLANE_RELU6, AFFINE(X_LAST)), MU_FRAME, run, vec, tail, low, last, step, next, wrap, done)

// func hasBMI2() bool
// Reports whether the CPU has BMI2 (CPUID leaf 7, EBX bit 8), which every
// AVX-512 CPU has but a hypervisor may hide.
TEXT ·hasBMI2(SB), NOSPLIT, $0-1
	MOVB  $0, ret+0(FP)
	XORL  AX, AX
	CPUID
	CMPL  AX, $7
	JB    nobmi2
	MOVL  $7, AX
	XORL  CX, CX
	CPUID
	SHRL  $8, BX
	ANDL  $1, BX
	MOVB  BX, ret+0(FP)
nobmi2:
	RET

// CFOLD is sumsChannelLanesRuns512's FOLD_LANES, which then starts the
// float32 lanes and their count afresh.
#define CFOLD \
	FOLD_LANES; \
	VXORPS        Z0, Z0, Z0; \
	VXORPS        Z1, Z1, Z1; \
	MOVQ          $16, R15

// func sumsChannelLanesRuns512(N, stride, S, c0, c1 int, dy, x, mean, lanes unsafe.Pointer)
// For channels c0 to c1 of N samples stride elements apart, planes of S
// elements at dy and x (plane n of channel c at n·stride + c·S), adds each
// channel's Σdy and Σdy·(x−mean[c]) into its float64 lanes at lanes[16c:]
// as sumsPlaneLanesRuns512 does, but over the channel's planes one after
// the other: the float32 lanes run on across its planes and are widened
// every 16 vectors (a plane's masked tail one of them) and at the
// channel's end, rather than at the end of every plane.
TEXT ·sumsChannelLanesRuns512(SB), NOSPLIT, $0-72
	MOVQ stride+8(FP), R10
	SHLQ $2, R10          // a sample's stride in bytes
	MOVQ S+16(FP), DX
	MOVQ c0+24(FP), R11
	MOVQ c1+32(FP), R13
	MOVQ lanes+64(FP), R9
	CMPQ R11, R13
	JGE  cdone
cchan:
	MOVQ         R11, AX
	SHLQ         $7, AX
	ADDQ         R9, AX
	MOVQ         mean+56(FP), R12
	VBROADCASTSS (R12)(R11*4), Z2
	VMOVUPD      (AX), Z3
	VMOVUPD      64(AX), Z4
	VXORPS       Z0, Z0, Z0
	VXORPS       Z1, Z1, Z1
	MOVQ         $16, R15
	MOVQ         R11, R8
	IMULQ        DX, R8
	SHLQ         $2, R8   // plane (0, c)'s offset in bytes
	MOVQ         N+0(FP), CX
cplane:
	MOVQ dy+40(FP), SI
	ADDQ R8, SI
	MOVQ x+48(FP), DI
	ADDQ R8, DI
	MOVQ DX, BX
cvec:
	CMPQ        BX, $16
	JLT         ctail
	VMOVUPS     (SI), Z5
	VMOVUPS     (DI), Z6
	VSUBPS      Z2, Z6, Z6
	VADDPS      Z5, Z0, Z0
	VFMADD231PS Z6, Z5, Z1
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, BX
	DECQ        R15
	JNZ         cvec
	CFOLD
	JMP         cvec
ctail:
	TESTQ BX, BX
	JZ    cnext
	MOVL  $0xffff, R12
	CMPQ  DX, $16
	JGE   clast
	BZHIL BX, R12, R14
	KMOVW R14, K1
	VMOVUPS.Z (SI), K1, Z5
	VMOVUPS.Z (DI), K1, Z6
	JMP   cmasked
clast:
	HIGH_TAIL
	VMOVUPS.Z (SI)(R14*1), K1, Z5
	VMOVUPS.Z (DI)(R14*1), K1, Z6
cmasked:
	VSUBPS.Z    Z2, Z6, K1, Z6
	VADDPS      Z5, Z0, Z0
	VFMADD231PS Z6, Z5, Z1
	DECQ        R15
	JNZ         cnext
	CFOLD
cnext:
	ADDQ R10, R8
	DECQ CX
	JNZ  cplane
	CMPQ R15, $16
	JEQ  cstore
	CFOLD
cstore:
	VMOVUPD Z3, (AX)
	VMOVUPD Z4, 64(AX)
	INCQ    R11
	CMPQ    R11, R13
	JLT     cchan
cdone:
	VZEROUPPER
	RET
