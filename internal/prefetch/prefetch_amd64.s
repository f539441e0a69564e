#include "textflag.h"

// func Lines2(a, b unsafe.Pointer)
TEXT ·Lines2(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ	a+0(FP), AX
	MOVQ	b+8(FP), BX
	PREFETCHT0	(AX)
	PREFETCHT0	(BX)
	RET

// func Write2(a unsafe.Pointer)
TEXT ·Write2(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ	a+0(FP), AX
	// PREFETCHW (AX) and PREFETCHW 64(AX), written as bytes (0F 0D /1):
	// the assembler has no mnemonic for it. An x86 processor that does
	// not implement it runs these bytes as a no-op.
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x08
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x48; BYTE $0x40
	RET
