# SKD010: an overflow's FUP is dropped: OVF, and the next packet is the TIP of the following indirect
# jump.  The decoder must resume the flow at that TIP's target (the instructions in between are lost).
# @covers skd010
# @cpu 6/78 6/94
# @at gap erratum-skd010-ovf
# @at target erratum-skd010-tip
_start:
	lea rax, [rip + target]
	mov ecx, 2
loop:	dec ecx
	jnz loop
gap:	nop
	add ecx, 7
	jmp rax
	hlt
target:	mov edx, ecx
	hlt
