# SKL014: a direct jump leaves the address filter range (FilterEn cleared); the TIP.PGD lacks its target
# IP.  With the filter configured the decoder must bind the TIP.PGD to that jump.
# @covers skl014
# @cpu 6/78 6/85 6/102
# @ptxed --filter:addr0_cfg 1 --filter:addr0_a 0x100000 --filter:addr0_b 0x1000ff
# @after out disable noip
_start:
	mov eax, 1
	jmp inside
inside:	add eax, 2
out:	jmp outside
	.org 0x100
outside:
	nop
	hlt
