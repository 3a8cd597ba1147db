# System call and return traced on both sides (kernel and user tracing): far transfers as TIPs.
# @covers syscall sysret far_transfer
_start:
	mov ecx, 2
1:	push rcx
	syscall
	pop rcx
	dec ecx
	jnz 1b
	hlt
syscall_entry:
	nop
	call k
	sysretq
k:	ret
