# Smallest IP compression (@ip auto) with code in three regions: near targets update 16 bits, a
# region 64 KiB+ away updates 32 bits, a far region (above 4 GiB) needs the sign-extended 48-bit
# form; the final async disable has no IP.  Returns are not compressed, so they are TIPs too.
# @covers ip-compression ipbytes-16 ipbytes-32 ipbytes-sext48 ipbytes-suppressed
# @perf
# @ip auto
# @retcomp off
# @section mid 0x12340000
# @section far 0x7ffe12340000
# @expect-ipbytes 0 1 2 3
_start:
	lea rax, [rip + near1]
	jmp rax
near1:	movabs rbx, offset mid1
	call rbx
	movabs rbx, offset far1
	call rbx
	lea rax, [rip + near2]
	jmp rax
near2:	nop
	hlt

	.section .mid, "ax"
mid1:	lea rcx, [rip + mid2]
	jmp rcx
mid2:	ret

	.section .far, "ax"
far1:	lea rcx, [rip + far2]
	call rcx
	ret
far2:	movabs rdx, offset mid1
	call rdx
	ret
