# SKL014 for a direct call out of the filter range: TIP.PGD without IP right after the call.
# @covers skl014
# @cpu 6/94 6/142
# @ptxed --filter:addr0_cfg 1 --filter:addr0_a 0x100000 --filter:addr0_b 0x10007f
# @after out disable noip
_start:
	mov eax, 1
out:	call func
	hlt
	.org 0x80
func:	nop
	ret
