# APL12: a jump leaves the traced address range (TIP.PGD); an overflow while packet generation is off
# is followed by an unexpected FUP.  The decoder must ignore that FUP (the flow stays off) and resume
# at the TIP.PGE of the jump back.
# @covers apl12
# @cpu 6/92 6/95
# @after leave disable
# @at spin erratum-apl12
# @at back erratum-enable
_start:
	mov ecx, 1
leave:	jmp outside
back:	dec ecx
	jnz leave
	hlt
outside:
	nop
spin:	nop
	jmp back
