# LOOP, LOOPE, LOOPNE, JRCXZ, JECXZ: conditional branches, a TNT bit each (taken or not), as Jcc;
# with the 32-bit address size (addr32) the count is ECX, not RCX.
# @covers loop-insn loope loopne jrcxz jecxz addr32-count
# @perf
_start:
	mov ecx, 3
1:	nop
	loop 1b			# taken, taken, not taken (RCX 0)
	mov ecx, 4
2:	test cl, 1
	loope 2b		# 4: ZF=1 taken; 3: ZF=0 not taken
	mov ecx, 3
3:	test cl, 2
	loopne 3b		# 3, 2: ZF=0 taken; 1: ZF=1 not taken
	mov ecx, 2
4:	cmp ecx, ecx
	loopz 4b		# ZF=1: taken, then not taken (RCX 0)
	jrcxz 5f		# RCX 0: taken
	nop
5:	mov rcx, 0x100000000
	jrcxz 9f		# RCX != 0: not taken
	jecxz 6f		# ECX 0: taken
	nop
6:	mov rcx, 0x100000002
7:	addr32 loop 7b		# ECX 2 -> 1 taken, 1 -> 0 not taken
	mov rcx, 0x100000002
8:	cmp ecx, 0
	addr32 loopnz 8b	# ZF=0: taken, then not taken (ECX 0)
	mov rcx, 0x200000001
	jecxz 9f		# ECX 1: not taken
	addr32 loope 9f		# ECX 1 -> 0: not taken
	hlt
9:	hlt
