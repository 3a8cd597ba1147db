# A TraceStop range (addrn_cfg 2): when the flow reaches it, tracing stops for good: FUP + TIP.PGD
# at its first instruction and a TraceStop packet ([disabled], [stopped]); later code is not traced.
# @covers filtering tracestop fup-tip_pgd
# @filter stop stop_first stop_last
_start:
	mov ecx, 3
loop:	dec ecx
	jnz loop
	call stop_first
	nop
	hlt
stop_first:
	nop
	ret
stop_last = . - 1
