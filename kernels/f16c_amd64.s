//go:build goexperiment.simd && amd64

#include "textflag.h"

// F16C conversions between half and float32, eight at a time: the hardware
// rounds to nearest even and handles subnormals, Inf and NaN. archsimd has no
// form of these instructions. The callers convert the tails.

// EIGHTS(convert, srcBytes, dstBytes) runs convert, which converts the
// eight elements at (SI) into (DI), over the len(src)/8 groups of eight of
// src and dst, the function's two slices (srcBytes and dstBytes a group's
// size in each).
#define EIGHTS(convert, srcBytes, dstBytes) \
	MOVQ dst_base+0(FP), DI; \
	MOVQ src_base+24(FP), SI; \
	MOVQ src_len+32(FP), CX; \
	SHRQ $3, CX; \
	JZ   done; \
loop: \
	convert; \
	ADDQ $srcBytes, SI; \
	ADDQ $dstBytes, DI; \
	DECQ CX; \
	JNZ  loop; \
	VZEROUPPER; \
done: \
	RET

#define WIDEN8 \
	VCVTPH2PS (SI), Y0; \
	VMOVUPS   Y0, (DI)

#define NARROW8 \
	VMOVUPS   (SI), Y0; \
	VCVTPS2PH $0, Y0, (DI)

// func hasF16C() bool
TEXT ·hasF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	SHRL $29, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET

// func widenHalf8(dst []float32, src []Half)
// Converts len(src)/8 groups of eight; dst must be as long.
TEXT ·widenHalf8(SB), NOSPLIT, $0-48
	EIGHTS(WIDEN8, 16, 32)

// func narrowHalf8(dst []Half, src []float32)
// Converts len(src)/8 groups of eight; dst must be as long.
TEXT ·narrowHalf8(SB), NOSPLIT, $0-48
	EIGHTS(NARROW8, 32, 16)
