# Synchronous disables with the branch target: a direct jmp leaves the traced region (TIP.PGD with
# its target) and tracing resumes right there ([resumed]); a direct call disables, the callee runs
# untraced and tracing is enabled again at the return site ([enabled], TIP.PGE).
# @covers tip_pgd tip_pge tip_pgd-jmp tip_pgd-call resumed
# @after j1 disable
# @at t1 enable
# @after c1 disable
# @at back enable
_start:
	nop
j1:	jmp t1
	nop
t1:	mov eax, 1
c1:	call f
back:	add eax, 2
	hlt
f:	nop
	nop
	ret
