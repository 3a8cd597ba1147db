# An overflow with TNT bits pending (short TNT packets): the conditional branches before the
# overflow are flushed in a TNT before OVF and must be used up, the lost iterations are skipped
# and the loop continues from the FUP after OVF.
# @covers ovf-fup ovf-tnt ovf
# @perf
# @tnt short
# @at loop#4 ovf 5
_start:
	mov ecx, 8
loop:	nop
body:	dec ecx
	jnz loop
	hlt
