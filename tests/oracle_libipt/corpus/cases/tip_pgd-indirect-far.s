# TIP.PGD with the target IP after an indirect call (ptxed assumes the flow continues at the return
# address: enabling there is [resumed]), an indirect jmp (position unknown: [enabled]) and a syscall
# (a far call: TIP.PGD with the kernel entry, re-enabled after sysret at the next instruction).
# @covers tip_pgd tip_pge tip_pgd-indirect tip_pgd-far syscall sysret resumed
# @perf
# @after ic disable
# @at r1 enable
# @after ij disable
# @at t2 enable
# @after sc disable
# @at r3 enable
_start:
	lea rax, [rip + f]
	lea rbx, [rip + t2]
ic:	call rax
r1:	nop
ij:	jmp rbx
	nop
t2:	nop
sc:	syscall
r3:	nop
	hlt
f:	ret
syscall_entry:
	nop
	sysretq
