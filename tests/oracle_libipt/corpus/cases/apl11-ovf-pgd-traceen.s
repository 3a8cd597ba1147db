# APL11: an overflow just as software clears TraceEn: OVF then TIP.PGD without IP (no FUP).  Later
# tracing is enabled again (MODE.Exec, TIP.PGE; ptxed reports the execution mode after the overflow).
# @covers apl11
# @cpu 6/95 6/134
# @at off erratum-apl11
# @at on erratum-enable
_start:
	mov ecx, 3
loop:	dec ecx
off:	jnz loop
	nop
on:	mov eax, ecx
	hlt
