//go:build !purego

#include "textflag.h"

// func blockMasksSSE2(d []byte, m []blockMask)
//
// For each 16 bytes: PMOVMSKB of the bytes themselves gives their high
// bits; compared with '"', with '\\', and (with bit 0x20 set, which makes
// '[' and ']' into '{' and '}' and no other byte into either) with '{' and
// '}', PMOVMSKB turns each comparison into 16 bits of the block's masks.
// A blockMask is five uint64s: quotes, opens, closes, highs, escapes.
TEXT ·blockMasksSSE2(SB), NOSPLIT, $0-48
	MOVQ d_base+0(FP), SI
	MOVQ m_base+24(FP), R8
	MOVQ m_len+32(FP), CX
	TESTQ CX, CX
	JZ done
	IMULQ $40, CX
	ADDQ R8, CX // the end of m

	MOVQ $0x2222222222222222, AX
	MOVQ AX, X8
	PUNPCKLQDQ X8, X8
	MOVQ $0x2020202020202020, AX
	MOVQ AX, X9
	PUNPCKLQDQ X9, X9
	MOVQ $0x7b7b7b7b7b7b7b7b, AX
	MOVQ AX, X10
	PUNPCKLQDQ X10, X10
	MOVQ $0x7d7d7d7d7d7d7d7d, AX
	MOVQ AX, X11
	PUNPCKLQDQ X11, X11
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	MOVQ AX, X12
	PUNPCKLQDQ X12, X12

block:
	XORQ BX, BX  // quotes
	XORQ DX, DX  // opens
	XORQ R11, R11 // closes
	XORQ R12, R12 // highs
	XORQ R13, R13 // escapes

#define CHUNK(off, shift) \
	MOVOU off(SI), X0; \
	PMOVMSKB X0, AX; \
	SHLQ $shift, AX; \
	ORQ AX, R12; \
	MOVOU X0, X1; \
	MOVOU X0, X3; \
	PCMPEQB X8, X0; \
	PMOVMSKB X0, AX; \
	SHLQ $shift, AX; \
	ORQ AX, BX; \
	PCMPEQB X12, X3; \
	PMOVMSKB X3, AX; \
	SHLQ $shift, AX; \
	ORQ AX, R13; \
	POR X9, X1; \
	MOVOU X1, X2; \
	PCMPEQB X10, X1; \
	PMOVMSKB X1, AX; \
	SHLQ $shift, AX; \
	ORQ AX, DX; \
	PCMPEQB X11, X2; \
	PMOVMSKB X2, AX; \
	SHLQ $shift, AX; \
	ORQ AX, R11

	CHUNK(0, 0)
	CHUNK(16, 16)
	CHUNK(32, 32)
	CHUNK(48, 48)

	MOVQ BX, 0(R8)
	MOVQ DX, 8(R8)
	MOVQ R11, 16(R8)
	MOVQ R12, 24(R8)
	MOVQ R13, 32(R8)
	ADDQ $64, SI
	ADDQ $40, R8
	CMPQ R8, CX
	JNE block

done:
	RET

// func blockMasksAVX2(d []byte, m []blockMask)
//
// blockMasksSSE2 32 bytes at a time: the same comparisons on two halves of
// each block, VPMOVMSKB giving 32 bits of a mask for each. Every
// instruction on a vector register is VEX-encoded (VMOVQ, not MOVQ): five
// legacy SSE MOVQs here made the whole scan 3.6 times slower on an Intel
// Xeon with AVX-512 turned off (TestVectorCodeIsVEXOnly).
TEXT ·blockMasksAVX2(SB), NOSPLIT, $0-48
	MOVQ d_base+0(FP), SI
	MOVQ m_base+24(FP), R8
	MOVQ m_len+32(FP), CX
	TESTQ CX, CX
	JZ avxdone
	IMULQ $40, CX
	ADDQ R8, CX // the end of m

	MOVQ $0x2222222222222222, AX
	VMOVQ AX, X8
	VPBROADCASTQ X8, Y8
	MOVQ $0x2020202020202020, AX
	VMOVQ AX, X9
	VPBROADCASTQ X9, Y9
	MOVQ $0x7b7b7b7b7b7b7b7b, AX
	VMOVQ AX, X10
	VPBROADCASTQ X10, Y10
	MOVQ $0x7d7d7d7d7d7d7d7d, AX
	VMOVQ AX, X11
	VPBROADCASTQ X11, Y11
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	VMOVQ AX, X12
	VPBROADCASTQ X12, Y12

avxblock:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y4

	VPMOVMSKB Y0, AX
	VPMOVMSKB Y4, BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVQ AX, 24(R8) // highs

	VPCMPEQB Y8, Y0, Y1
	VPCMPEQB Y8, Y4, Y5
	VPMOVMSKB Y1, AX
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVQ AX, 0(R8) // quotes

	VPCMPEQB Y12, Y0, Y1
	VPCMPEQB Y12, Y4, Y5
	VPMOVMSKB Y1, AX
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVQ AX, 32(R8) // escapes

	VPOR Y9, Y0, Y0
	VPOR Y9, Y4, Y4
	VPCMPEQB Y10, Y0, Y1
	VPCMPEQB Y10, Y4, Y5
	VPMOVMSKB Y1, AX
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVQ AX, 8(R8) // opens

	VPCMPEQB Y11, Y0, Y1
	VPCMPEQB Y11, Y4, Y5
	VPMOVMSKB Y1, AX
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVQ AX, 16(R8) // closes

	ADDQ $64, SI
	ADDQ $40, R8
	CMPQ R8, CX
	JNE avxblock
	VZEROUPPER

avxdone:
	RET

// func blockMasksAVX512(d []byte, m []blockMask)
//
// blockMasksSSE2 64 bytes at a time: each comparison of a whole block
// gives its mask in a mask register (VPMOVB2M the high bits), stored as
// it is.
TEXT ·blockMasksAVX512(SB), NOSPLIT, $0-48
	MOVQ d_base+0(FP), SI
	MOVQ m_base+24(FP), R8
	MOVQ m_len+32(FP), CX
	TESTQ CX, CX
	JZ zdone
	IMULQ $40, CX
	ADDQ R8, CX // the end of m

	MOVL $0x22, AX
	VPBROADCASTB AX, Z8
	MOVL $0x20, AX
	VPBROADCASTB AX, Z9
	MOVL $0x7b, AX
	VPBROADCASTB AX, Z10
	MOVL $0x7d, AX
	VPBROADCASTB AX, Z11
	MOVL $0x5c, AX
	VPBROADCASTB AX, Z12

zblock:
	VMOVDQU64 0(SI), Z0
	VPMOVB2M Z0, K1
	VPCMPEQB Z8, Z0, K2
	VPCMPEQB Z12, Z0, K3
	VPORQ Z9, Z0, Z1
	VPCMPEQB Z10, Z1, K4
	VPCMPEQB Z11, Z1, K5
	KMOVQ K2, 0(R8)  // quotes
	KMOVQ K4, 8(R8)  // opens
	KMOVQ K5, 16(R8) // closes
	KMOVQ K1, 24(R8) // highs
	KMOVQ K3, 32(R8) // escapes
	ADDQ $64, SI
	ADDQ $40, R8
	CMPQ R8, CX
	JNE zblock
	VZEROUPPER

zdone:
	RET

// func blockIndexAVX512(d []byte, m []blockMask, carry uint64) (done int, out uint64)
//
// blockMasksAVX512 for d of any length (len(m) blocks, the last one
// partial when len(d) is not a multiple of 64: a masked load reads only
// its bytes, and the bytes after them are zeros, which no mask marks),
// doing fill's work too for the blocks before the first that has a
// backslash: the bytes inside strings are the prefix XOR of the quotes (a
// carry-less multiplication by all ones) XOR carry, and the brackets among
// them are cleared. It returns the number of blocks so completed and the
// carry after them; the rest have their masks only.
TEXT ·blockIndexAVX512(SB), NOSPLIT, $0-72
	MOVQ d_base+0(FP), SI
	MOVQ d_len+8(FP), CX
	MOVQ m_base+24(FP), R8
	MOVQ carry+48(FP), DX
	XORQ R11, R11 // done
	XORQ R9, R9   // a block with a backslash was met
	TESTQ CX, CX
	JZ idone

	MOVL $0x22, AX
	VPBROADCASTB AX, Z8
	MOVL $0x20, AX
	VPBROADCASTB AX, Z9
	MOVL $0x7b, AX
	VPBROADCASTB AX, Z10
	MOVL $0x7d, AX
	VPBROADCASTB AX, Z11
	MOVL $0x5c, AX
	VPBROADCASTB AX, Z12
	MOVQ $-1, AX
	VMOVQ AX, X13
	KMOVQ AX, K7 // the bytes of a block to load: all

iblock:
	CMPQ CX, $64
	JAE iload
	MOVQ $1, AX // the last block: its len(d)%64 bytes
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K7

iload:
	VMOVDQU8.Z 0(SI), K7, Z0
	VPMOVB2M Z0, K1
	VPCMPEQB Z8, Z0, K2
	VPCMPEQB Z12, Z0, K3
	VPORQ Z9, Z0, Z1
	VPCMPEQB Z10, Z1, K4
	VPCMPEQB Z11, Z1, K5
	KMOVQ K2, 0(R8)  // quotes
	KMOVQ K1, 24(R8) // highs
	KMOVQ K3, 32(R8) // escapes
	KMOVQ K3, BX
	ORQ BX, R9
	JNZ iraw
	KMOVQ K2, AX
	VMOVQ AX, X2
	VPCLMULQDQ $0x00, X13, X2, X2
	VMOVQ X2, AX
	XORQ DX, AX // inside strings
	MOVQ AX, BX
	NOTQ BX
	KMOVQ K4, R10
	ANDQ BX, R10
	MOVQ R10, 8(R8) // opens outside strings
	KMOVQ K5, R10
	ANDQ BX, R10
	MOVQ R10, 16(R8) // closes outside strings
	SARQ $63, AX
	MOVQ AX, DX
	INCQ R11
	JMP inext

iraw:
	KMOVQ K4, 8(R8)  // opens
	KMOVQ K5, 16(R8) // closes

inext:
	ADDQ $64, SI
	ADDQ $40, R8
	SUBQ $64, CX
	JG iblock
	VZEROUPPER

idone:
	MOVQ R11, done+56(FP)
	MOVQ DX, out+64(FP)
	RET

// func blockIndexAVX2(d []byte, m []blockMask, carry uint64) (done int, out uint64)
//
// blockIndexAVX512 with AVX2: each block's masks as blockMasksAVX2 makes
// them, and fill's work (the prefix XOR of the quotes by PCLMULQDQ, the
// brackets inside strings cleared) for the blocks before the first with a
// backslash. AVX2 has no byte-masked load, so len(d) must be at least 64
// (the caller pads a shorter value): a last, partial block is read as the
// last 64 bytes of d, which are inside it, and its masks shifted down so
// that the block starts at bit 0, with zeros after its end.
TEXT ·blockIndexAVX2(SB), NOSPLIT, $0-72
	MOVQ d_base+0(FP), SI
	MOVQ d_len+8(FP), DI // bytes left
	MOVQ m_base+24(FP), R8
	MOVQ carry+48(FP), DX
	XORQ R11, R11 // done
	XORQ R9, R9   // a block with a backslash was met
	TESTQ DI, DI
	JZ adone

	MOVQ $0x2222222222222222, AX
	VMOVQ AX, X8
	VPBROADCASTQ X8, Y8
	MOVQ $0x2020202020202020, AX
	VMOVQ AX, X9
	VPBROADCASTQ X9, Y9
	MOVQ $0x7b7b7b7b7b7b7b7b, AX
	VMOVQ AX, X10
	VPBROADCASTQ X10, Y10
	MOVQ $0x7d7d7d7d7d7d7d7d, AX
	VMOVQ AX, X11
	VPBROADCASTQ X11, Y11
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	VMOVQ AX, X12
	VPBROADCASTQ X12, Y12
	MOVQ $-1, AX
	VMOVQ AX, X13

ablock:
	XORL CX, CX // how far the block's masks shift down: 0 but for a partial block
	CMPQ DI, $64
	JAE aload
	MOVQ $64, CX // the last block, of DI bytes: read the last 64 bytes of d
	SUBQ DI, CX
	SUBQ CX, SI

aload:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y4

	VPCMPEQB Y8, Y0, Y1
	VPCMPEQB Y8, Y4, Y5
	VPMOVMSKB Y1, R12
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, R12
	SHRQ CX, R12
	MOVQ R12, 0(R8) // quotes

	VPCMPEQB Y12, Y0, Y1
	VPCMPEQB Y12, Y4, Y5
	VPMOVMSKB Y1, R13
	VPMOVMSKB Y5, BX
	SHLQ $32, BX
	ORQ BX, R13
	SHRQ CX, R13
	MOVQ R13, 32(R8) // escapes

	VPMOVMSKB Y0, AX
	VPMOVMSKB Y4, BX
	SHLQ $32, BX
	ORQ BX, AX
	SHRQ CX, AX
	MOVQ AX, 24(R8) // highs

	VPOR Y9, Y0, Y0
	VPOR Y9, Y4, Y4
	VPCMPEQB Y10, Y0, Y1
	VPCMPEQB Y10, Y4, Y5
	VPMOVMSKB Y1, R10
	VPMOVMSKB Y5, AX
	SHLQ $32, AX
	ORQ AX, R10
	SHRQ CX, R10 // opens

	VPCMPEQB Y11, Y0, Y1
	VPCMPEQB Y11, Y4, Y5
	VPMOVMSKB Y1, BX
	VPMOVMSKB Y5, AX
	SHLQ $32, AX
	ORQ AX, BX
	SHRQ CX, BX // closes

	ORQ R13, R9
	JNZ araw
	VMOVQ R12, X2
	VPCLMULQDQ $0x00, X13, X2, X2
	VMOVQ X2, AX
	XORQ DX, AX // inside strings
	MOVQ AX, R13
	NOTQ R13
	ANDQ R13, R10
	ANDQ R13, BX
	SARQ $63, AX
	MOVQ AX, DX
	INCQ R11

araw:
	MOVQ R10, 8(R8)  // opens, outside strings when the block is done
	MOVQ BX, 16(R8)  // closes, likewise
	ADDQ $64, SI
	ADDQ $40, R8
	SUBQ $64, DI
	JG ablock
	VZEROUPPER

adone:
	MOVQ R11, done+56(FP)
	MOVQ DX, out+64(FP)
	RET
