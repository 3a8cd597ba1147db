# PSB+ in the middle of the trace (FUP with the current IP, MODE.Exec) between TNTs and returns.
# @covers psb psb-fup-psbend
# @perf
# @at loop#3 psb
# @at f#5 psb
_start:
	mov ecx, 5
loop:	call f
	dec ecx
	jnz loop
	hlt
f:	ret
