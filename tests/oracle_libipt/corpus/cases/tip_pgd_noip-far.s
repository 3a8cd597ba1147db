# User-only tracing across far transfers: a software interrupt and a syscall disable tracing with
# TIP.PGD without IP (the kernel is not traced); iretq and sysretq return to user space where
# TIP.PGE re-enables it.  A direct call just before the syscall must still be followed.
# @covers tip_pgd_noip tip_pge int iret syscall sysret tip_pgd-far
# @perf
# @after i1 disable noip
# @at u1 enable
# @after s1 disable noip
# @at u2 enable
_start:
	mov ecx, 3
i1:	int 0x80
u1:	call g
s1:	syscall
u2:	dec ecx
	hlt
g:	ret
vector_128:
	nop
	iretq
syscall_entry:
	nop
	sysretq
