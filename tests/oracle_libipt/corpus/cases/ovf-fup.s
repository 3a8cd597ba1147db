# Internal buffer overflow: packets of 5 instructions lost, OVF then FUP where tracing resumes.
# @covers ovf ovf-fup
# @perf
# @at loop#2 ovf 5
_start:
	mov ecx, 6
loop:	call f
	dec ecx
	jnz loop
	hlt
f:	ret
