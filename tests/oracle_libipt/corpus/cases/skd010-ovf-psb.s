# SKD010: OVF without its FUP; the flow is recovered at the next PSB+, whose FUP gives the IP.
# @covers skd010
# @cpu 6/142
# @at gap erratum-skd010-ovf
# @at sync erratum-skd010-psb
_start:
	mov ecx, 3
loop:	dec ecx
	jnz loop
gap:	nop
	nop
sync:	add ecx, 1
	mov eax, ecx
	hlt
