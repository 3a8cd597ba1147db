# A counted loop around a call: conditional branches and compressed returns in short TNT packets.
# @tnt short
# @covers loop tnt-short ret_compressed
# @perf
_start:
	mov ecx, 3
1:	call f
	dec ecx
	jnz 1b
	hlt
f:	test ecx, 1
	jz 2f
	nop
2:	ret
