# IP compression @ip full: indirect jumps, calls and uncompressed returns between three code regions
# (near, 64 KiB+ away, above 4 GiB).  Every IP packet carries the full 8-byte IP (IPBytes 110), near or far.
# @covers ip-compression ip-full
# @perf
# @ip full
# @retcomp off
# @section mid 0x12340000
# @section far 0x7ffe12340000
# @expect-ipbytes 0 6
_start:
	mov ecx, 12
loop:	movabs rbx, offset mid1
	call rbx
	movabs rbx, offset far1
	call rbx
	lea rax, [rip + next]
	jmp rax
next:	dec ecx
	jnz loop
	hlt

	.section .mid, "ax"
mid1:	lea rdx, [rip + mid2]
	jmp rdx
mid2:	ret

	.section .far, "ax"
far1:	lea rdx, [rip + far2]
	call rdx
	ret
far2:	ret
