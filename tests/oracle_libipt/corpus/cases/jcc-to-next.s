# A conditional branch whose target is the next instruction: taken or not, the flow goes on at the
# same address, yet the trace has a TNT bit saying which (the next IP cannot tell, the state before
# the branch does: flags, RCX/ECX).
# @covers jcc-to-next loop-to-next jrcxz-to-next
# @perf
_start:
	xor eax, eax		# ZF=1
	jz 1f			# taken
1:	jnz 2f			# not taken
2:	mov ecx, 2
	loop 3f			# RCX 2 -> 1: taken
3:	loop 4f			# RCX 1 -> 0: not taken
4:	jrcxz 5f		# RCX 0: taken
5:	inc ecx
	jrcxz 6f		# RCX 1: not taken
6:	mov rcx, 0x100000000
	jecxz 7f		# ECX 0: taken
7:	cmp eax, 1		# SF=1, OF=0
	jl 8f			# taken
8:	jg 9f			# not taken
9:	hlt
