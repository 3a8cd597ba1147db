/* LOOP, LOOPE/LOOPZ, LOOPNE/LOOPNZ, JRCXZ and JECXZ in a hot loop, taken and
 * not taken, with the 32-bit address size (addr32: the count is ECX), and
 * conditional branches to the next instruction (displacement 0: only the
 * registers tell whether they were taken).  Each branch has a t_ label; the
 * test knows how often each runs and is taken per round (r12 counts down).
 * Static, without libc, for the trace generator's emulator. */
	.text
	.globl _start
_start:
	mov ptx_iterations(%rip), %r12
round:
	mov $4, %ecx
1:	add $1, %rax
t_loop:	loop 1b			/* taken 3 of 4 */
	mov $16, %ecx
2:	test $3, %cl
t_loope_flag:
	loope 2b		/* 16: ZF=1 taken; 15: ZF=0 not taken */
	mov $3, %ecx
3:	cmp %ecx, %ecx
t_loopz_count:
	loopz 3b		/* ZF=1 always: taken 2 of 3 (count) */
	mov $7, %ecx
4:	test $3, %cl
t_loopne_flag:
	loopne 4b		/* 7, 6, 5 taken; 4: ZF=1 not taken */
	mov $2, %ecx
5:	cmp $100, %ecx
t_loopnz_count:
	loopnz 5b		/* ZF=0 always: taken 1 of 2 (count) */
	mov %r12, %rcx
	and $3, %ecx
t_jrcxz:
	jrcxz 6f		/* taken when r12 % 4 == 0 */
	add $2, %rax
6:	mov $1, %ecx
	shl $32, %rcx		/* ECX = 0, RCX != 0 */
t_jrcxz_hi:
	jrcxz 19f		/* never taken */
t_jecxz_hi:
	jecxz 7f		/* always taken */
19:	jmp bad
7:	mov %r12, %rcx
	or $1, %ecx
t_jecxz_odd:
	jecxz 19b		/* never taken */
	mov $0x100000003, %rcx
8:	inc %rbx
t_loop32:
	addr32 loop 8b		/* ECX 3 -> 0: taken 2 of 3 */
	mov $0x200000010, %rcx
9:	test $3, %cl
t_loope32:
	addr32 loope 9b		/* taken 1 of 2 */
	mov $0x300000007, %rcx
10:	test $3, %cl
t_loopne32:
	addr32 loopne 10b	/* taken 3 of 4 */
	mov $5, %ecx
t_loop_self:
	loop t_loop_self	/* a block of one instruction: taken 4 of 5 */
	mov $2, %ecx
t_loop_fwd:
	loop 12f		/* forward, always taken */
	add $3, %rax
12:	mov %r12, %rcx
	and $1, %ecx
t_jrcxz_next:
	jrcxz 13f		/* taken when r12 is even */
13:
t_loop_next:
	loop 14f		/* RCX 1 -> 0 not taken, 0 -> -1 taken: r12 even */
14:	mov $0x100000001, %rcx
t_loop32_next:
	addr32 loop 15f		/* ECX 1 -> 0: never taken */
15:
t_jecxz_next:
	jecxz 16f		/* always taken */
16:	test $2, %r12b
t_jz_next:
	jz 17f			/* rel8 0: taken when r12 & 2 == 0 */
17:
t_jnz_next:
	.byte 0x0f, 0x85, 0, 0, 0, 0	/* jnz rel32 0: taken when r12 & 2 != 0 */
	cmp %ecx, %ecx
t_loope_next:
	loope 18f		/* RCX != 1, ZF=1: always taken */
18:	dec %r12
	jnz round
	xor %edi, %edi
	mov $60, %eax		/* exit */
	syscall
bad:
	mov $1, %edi
	mov $60, %eax
	syscall
	hlt

	.data
	.globl ptx_iterations
	.align 8
ptx_iterations:
	.quad 1
