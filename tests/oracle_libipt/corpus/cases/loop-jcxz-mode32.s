# 32-bit code: LOOP and JECXZ count with ECX, and with the 16-bit address size (addr16) with CX.
# @mode 32
# @org 0x8000
# @covers loop-insn jcxz addr16-count 32-bit
_start:
	mov ecx, 2
1:	loop 1b			# ECX 2 -> 1 taken, 1 -> 0 not taken
	jecxz 2f		# taken
	nop
2:	mov ecx, 0x10002
3:	addr16 loop 3b		# CX 2 -> 1 taken, 1 -> 0 not taken
	jcxz 4f			# CX 0: taken
	nop
4:	jecxz 5f		# ECX 0x10000: not taken
	mov ecx, 0x10003
6:	test cl, 1
	addr16 loope 6b		# CX 3: ZF=0 not taken
	addr16 loopne 7f	# CX 3 -> 2, ZF=0: taken
	nop
7:	hlt
5:	hlt
