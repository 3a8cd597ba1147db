/* Assembly side of the symbol test program: NOTYPE labels (in .text, in a
 * section named without "text", hidden, at a sized function's address, last
 * in the code), a function without a size, and code in .init/.fini.
 * -DTAIL: no code after .text, so the last label is the last symbol (-DPAD: a
 * map longer than its code; -DDATA_FN: a function symbol in .data).
 * -DQUIRK: the branch after "call _init" is at _init's return address. */
	.text
	.globl _start
_start:
	xor %ebp, %ebp
	and $-16, %rsp
	call _init
#ifndef QUIRK
	nop
#endif
	call init_fn
	call main_c
#ifndef TAIL
	call _fini
#endif
	mov %eax, %edi
	jmp exit

	.globl asm_loop
	.type asm_loop, @function
asm_loop:			/* FUNC of size 0 */
	mov %rdi, %rcx
again:				/* local NOTYPE */
	dec %rcx
	jnz again
	ret

	.globl sized_asm
	.type sized_asm, @function
	.globl sized_asm_entry
sized_asm:
sized_asm_entry:		/* NOTYPE at a sized FUNC's address */
	mov $1, %eax
	ret
	.size sized_asm, .-sized_asm
	.globl high_label
high_label:
	nop
	.hidden hid_label
	.globl hid_label
hid_label:			/* hidden NOTYPE */
	nop
	ret

#ifndef TAIL
	.section alttext, "ax"	/* a name with "text" in it */
other_label:
	nop
	ret
	.globl other_label

	.section mycode, "ax"	/* a name without */
	.globl my_label
my_label:
	nop
	ret
	.globl my_func
	.type my_func, @function
my_func:
	nop
	ret
	.size my_func, .-my_func
	.globl code_tail
code_tail:
	nop
#endif

	.section .init, "ax"
	.globl _init
_init:
	push %rax
	pop %rax
	ret
	.globl init_fn
	.type init_fn, @function
init_fn:
	nop
	ret
	.size init_fn, .-init_fn

#ifndef TAIL
	.section .fini, "ax"
	.globl _fini
_fini:
	nop
	ret
#elif defined(DATA_FN)
	.data
	.globl data_fn
	.type data_fn, @function
data_fn:
	.byte 0xc3
	.size data_fn, 1
#endif

	.text
	.globl exit
exit:
	mov $60, %eax
	syscall
	hlt
#ifdef PAD
	.skip 0x2000, 0xcc
#endif
	.section .note.GNU-stack, "", @progbits
