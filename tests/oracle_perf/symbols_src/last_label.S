/* The last symbol has no size and the map goes on after it: perf 6.1 ends it
 * at the page after the one it starts in (symbols__fixup_end), not where its
 * map ends.  ptx_iterations sits in a section named without "text"/"data",
 * so perf loads no symbol after "last" (tests/symbols/test_symbols_plt.py). */
	.text
	.globl _start
_start:
	mov ptx_iterations, %rcx
1:	dec %rcx
	jnz 1b
	jmp last
	.skip 0x1800, 0x90
	.globl last
last:
	mov $60, %eax
	xor %edi, %edi
	syscall
	.section .myvars, "aw"
	.globl ptx_iterations
ptx_iterations:
	.quad 3
	.section .note.GNU-stack, "", @progbits
