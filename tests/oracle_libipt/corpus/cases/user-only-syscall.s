# User-only tracing: a syscall disables tracing (TIP.PGD without IP), sysret re-enables (TIP.PGE).
# @covers tip_pgd_noip tip_pge syscall sysret filtering
# @perf
# @after sc#1 disable noip
# @at back#1 enable
_start:
sc:	syscall
back:	nop
	hlt
syscall_entry:
	nop
	sysretq
