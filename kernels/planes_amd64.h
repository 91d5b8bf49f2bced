// The AVX-512 channels-first runs' loops (planes_amd64.s for float32,
// planes_bf16_amd64.s for bfloat16): each file defines how its elements
// are loaded and stored and how wide they are, then expands these loops.

// FOLD_LANES widens the sums' float32 lanes, Σdy's in Z0 and
// Σdy·(x−mean)'s in Z1, adds each lane to the one eight further, and adds
// those into the channel's float64 lanes in Z3 and Z4.
#define FOLD_LANES \
	VEXTRACTF32X8 $1, Z0, Y7; \
	VCVTPS2PD     Y0, Z8; \
	VCVTPS2PD     Y7, Z7; \
	VADDPD        Z7, Z8, Z8; \
	VADDPD        Z8, Z3, Z3; \
	VEXTRACTF32X8 $1, Z1, Y7; \
	VCVTPS2PD     Y1, Z8; \
	VCVTPS2PD     Y7, Z7; \
	VADDPD        Z7, Z8, Z8; \
	VADDPD        Z8, Z4, Z4

// HIGH_TAIL sets K1 to the high BX lanes of a run's last vector and R14
// to that vector's offset in bytes from SI (BX − 16 elements), R12
// holding 0xffff.
#define HIGH_TAIL \
	MOVL  $16, R14; \
	SUBL  BX, R14; \
	BZHIL R14, R12, R14; \
	XORL  R12, R14; \
	KMOVW R14, K1; \
	MOVQ  BX, R14; \
	SUBQ  $16, R14; \
	SHLQ  $ELEM_SHIFT, R14

// SUMS_RUNS(dyv, dylo, dyhi, dystep) is the body of the sums' runs loops:
// dyv loads a vector of dz into Z5 from dy at SI, dylo the tail's low
// lanes in K1, dyhi the high lanes of the run's last vector, R14 bytes
// back; dystep steps what else they read by the tail's BX elements. The
// channel's mean is broadcast from the frame's mean, through R12. x is
// loaded into Z6 by X_VEC, X_LOW and X_HIGH likewise, and the elements are
// ELEM_BYTES wide (ELEM_SHIFT its log2, VEC_BYTES a vector's sixteen):
// macros of the file that includes this one.
#define SUMS_RUNS(dyv, dylo, dyhi, dystep) \
	MOVQ n+0(FP), CX; \
	MOVQ C+8(FP), R10; \
	MOVQ S+16(FP), DX; \
	MOVQ c+24(FP), R11; \
	MOVQ pos+32(FP), R13; \
	MOVQ dy+40(FP), SI; \
	MOVQ x+48(FP), DI; \
	MOVQ lanes+64(FP), R9; \
	NEGQ R13; \
	ADDQ DX, R13; \
	TESTQ CX, CX; \
	JZ    done; \
run: \
	CMPQ    R13, CX; \
	CMOVQGT CX, R13; \
	MOVQ    R11, AX; \
	SHLQ    $7, AX; \
	ADDQ    R9, AX; \
	MOVQ    mean+56(FP), R12; \
	VBROADCASTSS (R12)(R11*4), Z2; \
	VMOVUPD (AX), Z3; \
	VMOVUPD 64(AX), Z4; \
	MOVQ    R13, BX; \
group: \
	VXORPS Z0, Z0, Z0; \
	VXORPS Z1, Z1, Z1; \
	MOVQ   $16, R15; \
vec: \
	CMPQ        BX, $16; \
	JLT         tail; \
	dyv; \
	X_VEC; \
	VSUBPS      Z2, Z6, Z6; \
	VADDPS      Z5, Z0, Z0; \
	VFMADD231PS Z6, Z5, Z1; \
	ADDQ        $VEC_BYTES, SI; \
	ADDQ        $VEC_BYTES, DI; \
	SUBQ        $16, BX; \
	DECQ        R15; \
	JNZ         vec; \
	JMP         fold; \
tail: \
	TESTQ BX, BX; \
	JZ    fold; \
	MOVL  $0xffff, R12; \
	CMPQ  R13, $16; \
	JGE   last; \
	BZHIL BX, R12, R14; \
	KMOVW R14, K1; \
	dylo; \
	X_LOW; \
	JMP   masked; \
last: \
	HIGH_TAIL; \
	dyhi; \
	X_HIGH; \
masked: \
	VSUBPS.Z    Z2, Z6, K1, Z6; \
	VADDPS      Z5, Z0, Z0; \
	VFMADD231PS Z6, Z5, Z1; \
	LEAQ        (SI)(BX*ELEM_BYTES), SI; \
	LEAQ        (DI)(BX*ELEM_BYTES), DI; \
	dystep; \
	XORQ        BX, BX; \
fold: \
	FOLD_LANES; \
	TESTQ         BX, BX; \
	JNZ           group; \
	VMOVUPD Z3, (AX); \
	VMOVUPD Z4, 64(AX); \
	SUBQ    R13, CX; \
	MOVQ    DX, R13; \
	INCQ    R11; \
	CMPQ    R11, R10; \
	JNE     next; \
	XORQ    R11, R11; \
next: \
	TESTQ CX, CX; \
	JNZ   run; \
done: \
	VZEROUPPER; \
	RET

// APPLY_RUNS(op, optail, preload, oplast, bmu, run, vec, tail, low, last,
// step, next, wrap, done) is applyPlanesRuns512's loop: op writes a vector's dx
// into Z5 from dy in Z5 (and x from (DI)), optail the tail's, x masked by
// K1 (BX elements); bmu broadcasts the channel's mu into Z3. dy is loaded
// into Z5 by DY_VEC and DY_TAIL, dx stored from it by DX_STORE and
// DX_STORE_TAIL: macros of the file that includes this one, as ELEM_BYTES
// and VEC_BYTES are.
//
// Where dx is dy (x_backprop written over y_backprop, as TensorFlow has
// the kernels do where nothing else reads dy), a run of 16 elements or
// more whose length is not a multiple of 16 ends in its last sixteen
// elements, the lanes already written masked off by K1's high bits:
// preload loads them into Z14 (dy), Z15 (x) and Z16 (y) before the run's
// first store, oplast computes them from there into Z5, and DX_STORE_LAST
// stores them. The masked store then ends where the run ends. A masked
// store whose vector reaches past the run holds up the next run's loads of
// dy there until it is written (the processor does not forward a masked
// store's bytes): NCHW 7x7 planes in place took 1.4–1.6 times as long. With
// a dx of its own the low tail stays (its stores meet no load; the last
// sixteen's masked store, which overlaps the vector before it, cost 7x7
// planes there up to a fifth more).
#define APPLY_RUNS(op, optail, preload, oplast, bmu, run, vec, tail, low, last, step, next, wrap, done) \
run: \
	CMPQ    R15, CX; \
	CMOVQGT CX, R15; \
	VBROADCASTSS (R9)(R13*4), Z0; \
	VBROADCASTSS (R10)(R13*4), Z1; \
	VBROADCASTSS (R11)(R13*4), Z2; \
	bmu; \
	MOVQ    R15, BX; \
	CMPQ    BX, $16; \
	JLT     vec; \
	CMPQ    SI, R8; \
	JNE     vec; \
	MOVL    BX, AX; \
	ANDL    $15, AX; \
	JZ      vec; \
	MOVL    $0xffff0000, R14; \
	SHRXL   AX, R14, R14; \
	KMOVW   R14, K1; \
	preload; \
vec: \
	CMPQ    BX, $16; \
	JLT     tail; \
	DY_VEC; \
	op; \
	DX_STORE; \
	ADDQ    $VEC_BYTES, SI; \
	ADDQ    $VEC_BYTES, DI; \
	ADDQ    $VEC_BYTES, R8; \
	SUBQ    $16, BX; \
	JMP     vec; \
tail: \
	TESTQ   BX, BX; \
	JZ      next; \
	CMPQ    R15, $16; \
	JLT     low; \
	CMPQ    SI, R8; \
	JEQ     last; \
low: \
	MOVL    $0xffff, AX; \
	BZHIL   BX, AX, AX; \
	KMOVW   AX, K1; \
	DY_TAIL; \
	optail; \
	DX_STORE_TAIL; \
	JMP     step; \
last: \
	VMOVAPS Z14, Z5; \
	oplast; \
	DX_STORE_LAST; \
step: \
	LEAQ    (SI)(BX*ELEM_BYTES), SI; \
	LEAQ    (DI)(BX*ELEM_BYTES), DI; \
	LEAQ    (R8)(BX*ELEM_BYTES), R8; \
next: \
	SUBQ    R15, CX; \
	MOVQ    DX, R15; \
	INCQ    R13; \
	CMPQ    R13, C+8(FP); \
	JNE     wrap; \
	XORQ    R13, R13; \
wrap: \
	TESTQ   CX, CX; \
	JNZ     run; \
done: \
	VZEROUPPER; \
	RET

// AFFINE: dx = (dy − mdy)·a + (x − mu)·b, x loaded as load loads it;
// SCALE: dx = dy·a, x unread.
#define AFFINE(load) \
	load; \
	VSUBPS      Z3, Z6, Z6; \
	VMULPS      Z1, Z6, Z6; \
	VSUBPS      Z2, Z5, Z5; \
	VFMADD132PS Z0, Z6, Z5
#define SCALE \
	VMULPS Z0, Z5, Z5
#define MU_R12 VBROADCASTSS (R12)(R13*4), Z3
