/* Test program for perf's per-DSO last-lookup cache (tests/symbols): blocks
 * without symbols (section "blkcode": perf drops the labels of a section
 * without "text" in its name) that jump, each the first time it runs, up to
 * "hubs" that are branches themselves (section "hubtext", labelled), down to a
 * hub below them, and up to code that is no branch.  Static, without libc, for
 * the trace generator's emulator.
 * -DFORK: fork first; the child execs "lastfind_child" (this file with
 * -DCHILD) while the parent runs on, so two DSOs' lookups interleave. */
	.text
	.globl _start
_start:
	mov ptx_iterations(%rip), %r12
#ifdef FORK
	mov $57, %eax			/* fork */
	syscall
	test %rax, %rax
	jnz round
	lea child_path(%rip), %rdi
	lea child_argv(%rip), %rsi
	lea child_envp(%rip), %rdx
	mov $59, %eax			/* execve */
	syscall
	mov $127, %edi
	mov $60, %eax
	syscall
#endif
round:
	call up
	call down
#ifndef CHILD
	call plain
#endif
	dec %r12
	jnz round
	xor %edi, %edi
	mov $60, %eax			/* exit */
	syscall
	hlt

	.type hub_lo, @function
hub_lo:				/* below every block; sized, so no symbol covers blkcode */
	ret
	.size hub_lo, .-hub_lo

	.section blkcode, "ax"
up:				/* blocks that jump up to a branch */
	call u1
	call u2
	call u3
	call u4
	call u5
	call u6
	call u7
	call u8
	call u9
	call u10
	call u11
	call u12
	call u13
	call u14
	call u15
	call u16
	call u17
	call u18
	call u19
	call u20
	call u21
	call u22
	call u23
	call u24
	ret
u1:
	nop
	jmp hub_hi
u2:
	nop
	nop
	jmp hub_hi
u3:
	nop
	nop
	nop
	jmp hub_hi
u4:
	jmp hub_hi
u5:
	nop
	xor %eax, %eax
	test %eax, %eax
	jz hub_hi
u6:
	nop
	nop
	jmp hub_hi2
u7:
	nop
	nop
	nop
	jmp hub_hi
u8:
	jmp hub_hi
u9:
	nop
	jmp hub_hi
u10:
	nop
	nop
	xor %eax, %eax
	test %eax, %eax
	jz hub_hi
u11:
	nop
	nop
	nop
	jmp hub_hi
u12:
	jmp hub_hi2
u13:
	nop
	jmp hub_hi
u14:
	nop
	nop
	jmp hub_hi
u15:
	nop
	nop
	nop
	xor %eax, %eax
	test %eax, %eax
	jz hub_hi
u16:
	jmp hub_hi
u17:
	nop
	jmp hub_hi
u18:
	nop
	nop
	jmp hub_hi2
u19:
	nop
	nop
	nop
	jmp hub_hi
u20:
	xor %eax, %eax
	test %eax, %eax
	jz hub_hi
u21:
	nop
	jmp hub_hi
u22:
	nop
	nop
	jmp hub_hi
u23:
	nop
	nop
	nop
	jmp hub_hi
u24:
	jmp hub_hi2

down:				/* blocks that jump down (the cache keeps no "unknown") */
	call d1
	call d2
	call d3
	call d4
	call d5
	call d6
	call d7
	call d8
	ret
d1:
	nop
	jmp hub_lo
d2:
	nop
	nop
	jmp hub_lo
d3:
	jmp hub_lo
d4:
	nop
	jmp hub_lo
d5:
	nop
	nop
	jmp hub_lo
d6:
	jmp hub_lo
d7:
	nop
	jmp hub_lo
d8:
	nop
	nop
	jmp hub_lo

#ifndef CHILD
plain:				/* up to code that is no branch */
	call p1
	call p2
	ret
p1:	jmp flat
p2:	nop
	jmp flat
#endif

	.section hubtext, "ax"
	.globl hub_hi, hub_hi2, flat
hub_hi:
	ret
hub_hi2:			/* a jump up from a jump up */
	jmp hub_hi
flat:
	nop
	nop
	ret

	.data
	.globl ptx_iterations
ptx_iterations:
	.quad 3
#ifdef FORK
child_path:
	.asciz "lastfind_child"
	.balign 8
child_argv:
	.quad child_path, 0
child_envp:
	.quad 0
#endif
	.section .note.GNU-stack, "", @progbits
