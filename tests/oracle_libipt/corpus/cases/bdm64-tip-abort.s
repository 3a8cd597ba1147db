# BDM64: a transaction aborts right after an indirect jump; the jump's TIP holds a wrong target (bogus).
# The abort's FUP has the real IP; the decoder must not run the flow from the bogus target.
# @covers bdm64
# @cpu 6/61 6/79
# @after ind erratum-bdm64 bogus
# @at target abort
_start:
	lea rax, [rip + target]
	xbegin fallback
	nop
ind:	jmp rax
	nop
target:	nop
	xend
fallback:
	nop
	hlt
bogus:	jmp rcx
