# An asynchronous interrupt (FUP + TIP) in the middle of a loop; the handler returns with iretq.
# @covers interrupt fup-tip async_branch
# @perf
# @at loop#2 interrupt handler
_start:
	mov ecx, 4
loop:	dec ecx
	jnz loop
	hlt
handler:
	nop
	iretq
