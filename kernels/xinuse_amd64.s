//go:build goexperiment.simd && amd64

#include "textflag.h"

// The tests' probe of the AVX upper-state (xinuse_amd64.go).

// func upperInUse() (inUse, ok bool)
TEXT ·upperInUse(SB), NOSPLIT, $0-2
	MOVB $0, inUse+0(FP)
	MOVB $0, ok+1(FP)
	MOVL $1, AX
	XORL CX, CX
	CPUID
	BTL  $27, CX // OSXSAVE: XGETBV is usable
	JCC  done
	XORL AX, AX
	XORL CX, CX
	CPUID
	CMPL AX, $0xd
	JB   done
	MOVL $0xd, AX
	MOVL $1, CX
	CPUID
	BTL  $2, AX // XGETBV with ECX = 1 reports XINUSE
	JCC  done
	MOVL $1, CX
	XGETBV
	MOVB $1, ok+1(FP)
	TESTL $0x44, AX // bit 2: upper halves of YMM0-15; bit 6: upper halves of ZMM0-15
	JZ   done
	MOVB $1, inUse+0(FP)
done:
	RET

// func dirtyUpper()
TEXT ·dirtyUpper(SB), NOSPLIT, $0-0
	VPCMPEQD Y1, Y1, Y1
	RET
