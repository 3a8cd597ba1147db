# BDM64: a transaction aborts right after a taken conditional branch whose TNT bit says not taken.
# The not-taken path cannot reach the abort's IP, so the decoder must trust the abort's FUP.
# @covers bdm64
# @cpu 6/71 6/86
# @after jc erratum-bdm64
# @at target abort
_start:
	xor eax, eax
	xbegin fallback
	test eax, eax
jc:	jz target
	ret
target:	nop
	xend
fallback:
	nop
	hlt
