# Direct and indirect calls, returns compressed to TNT bits.
# @covers call_direct ret_compressed call_indirect
# @perf
_start:
	lea rax, [rip + g]
	call f
	call rax
	mov ecx, 3
1:	call f
	dec ecx
	jnz 1b
	hlt
f:	nop
	ret
g:	call f
	ret
