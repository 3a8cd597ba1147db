# SKD010 at a transaction begin: OVF without FUP, then MODE.TSX (in transaction) and the XBEGIN's FUP;
# the decoder must resume at that FUP, in the transaction.
# @covers skd010
# @cpu 6/166
# @at xb erratum-skd010-tsx
_start:
	mov ecx, 2
loop:	dec ecx
	jnz loop
xb:	xbegin fallback
	add ecx, 1
	xend
fallback:
	nop
	hlt
