# SKD010: OVF without its FUP, then tracing is disabled (TIP.PGD without IP): the overflow leaves
# tracing off; it is enabled again later (TIP.PGE).
# @covers skd010
# @cpu 6/158 6/78
# @at gap erratum-skd010-ovf
# @at stop erratum-skd010-pgd
# @at start erratum-enable
_start:
	mov ecx, 2
loop:	dec ecx
	jnz loop
gap:	nop
stop:	nop
	nop
start:	mov eax, 1
	hlt
