# SKD007: an overflow hits while a multi-byte CYC is written; OVF follows the CYC's first byte in place
# of its other bytes (the OVF then FUP where tracing resumes, after 3 lost instructions).
# @covers skd007
# @cpu 6/78 6/94 6/158
# @at loop#2 erratum-skd007 3
_start:
	mov ecx, 4
loop:	add eax, ecx
	dec ecx
	jnz loop
	hlt
