# SKZ84: tracing in a VMX guest with TSC offsetting: the TMA after a TSC has garbage CTC/FastCounter
# fields (reserved bits set) and a bogus byte after it.  The decoder must skip it and keep the flow.
# @covers skz84
# @cpu 6/85 6/106 6/143 19/1
# @at mid erratum-skz84
_start:
	mov ecx, 2
loop:	dec ecx
	jnz loop
mid:	nop
	call f
	hlt
f:	ret
