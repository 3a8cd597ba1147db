# BDM70 inside a transaction: a syscall leaves user-only tracing (TIP.PGD, no IP); on the way back
# the PSB+ before TIP.PGE holds FUP, MODE.Exec and MODE.TSX (in transaction) though tracing is off.
# @covers bdm70
# @cpu 6/71 6/142
# @after sc disable noip
# @at back erratum-bdm70
_start:
	xbegin fallback
	nop
sc:	syscall
back:	nop
	xend
	nop
fallback:
	hlt
syscall_entry:
	nop
	sysretq
