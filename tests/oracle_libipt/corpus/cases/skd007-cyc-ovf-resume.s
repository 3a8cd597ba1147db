# SKD007 with no instruction lost: CYC header byte, OVF, FUP at the current IP, then the flow goes on.
# @covers skd007
# @cpu 6/142 6/165
# @at next erratum-skd007
_start:
	mov ecx, 1
	jrcxz skip
next:	nop
skip:	nop
	hlt
