# Software interrupt (int 0x80) and iretq; the handler calls and returns.
# @covers int iret far_transfer
# @perf
_start:
	int 0x80
	nop
	int3
	hlt
vector_128:
	call k
	iretq
vector_3:
	iretq
k:	ret
