#include "textflag.h"

// func Lines3(a, b unsafe.Pointer)
TEXT ·Lines3(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ	a+0(FP), AX
	MOVQ	b+8(FP), BX
	PREFETCHT0	(AX)
	PREFETCHT0	(BX)
	PREFETCHT0	64(BX)
	RET
