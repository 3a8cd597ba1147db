# APL11: an overflow during a syscall that leaves user-only tracing (ContextEn cleared): OVF is followed
# by the syscall's TIP.PGD.  The decoder must take it as an overflow with tracing off, not an error;
# tracing is back at the TIP.PGE after sysret.
# @covers apl11
# @cpu 6/92 6/122 6/151
# @after sc erratum-apl11 noip
# @at back erratum-enable
_start:
	mov eax, 60
sc:	syscall
back:	nop
	hlt
syscall_entry:
	nop
	sysretq
