# The buffer overflows right after a PSB, before its PSBEND: PSB, MODE.Exec, FUP, OVF; three
# instructions are lost and the FUP after OVF gives the IP where tracing resumes.
# @covers ovf-fup psb-ovf ovf
# @at l2 psb-ovf 3
_start:
	mov eax, 1
l2:	add eax, 1
	call f
	add eax, 2
	add eax, 3
	hlt
f:	ret
