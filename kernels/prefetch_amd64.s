//go:build goexperiment.simd && amd64

#include "textflag.h"

// func prefetchLines(p unsafe.Pointer, bytes int)
// Asks for the cache lines of [p, p+bytes) in memory order.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ bytes+8(FP), CX
	ADDQ SI, CX
	JMP  test
loop:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
test:
	CMPQ SI, CX
	JLT  loop
	RET
