#include "textflag.h"

// func Lines2(a, b unsafe.Pointer)
TEXT ·Lines2(SB), NOSPLIT|NOFRAME, $0-16
	MOVD	a+0(FP), R0
	MOVD	b+8(FP), R1
	PRFM	(R0), PLDL1KEEP
	PRFM	(R1), PLDL1KEEP
	RET

// func Write2(a unsafe.Pointer)
TEXT ·Write2(SB), NOSPLIT|NOFRAME, $0-8
	MOVD	a+0(FP), R0
	PRFM	(R0), PSTL1KEEP
	PRFM	64(R0), PSTL1KEEP
	RET
