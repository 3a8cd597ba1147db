# APL12 then a PSB+: the unexpected FUP after an overflow outside the traced range is followed by a PSB+
# without FUP (tracing still off) before the TIP.PGE; the flow resumes only at the TIP.PGE.
# @covers apl12
# @cpu 6/92
# @after leave disable
# @at spin erratum-apl12
# @at back erratum-psb
# @at back erratum-enable
_start:
	mov eax, 5
leave:	jmp outside
back:	add eax, 1
	hlt
outside:
	nop
spin:	nop
	nop
	jmp back
