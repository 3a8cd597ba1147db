# An asynchronous disable (FUP + TIP.PGD without IP) inside an RTM transaction, enabled again later
# in the same transaction; the second transaction aborts by XABORT after the re-enable.
# @covers tsx-begin tsx-commit tsx-abort tsx-tip_pgd fup-tip_pgd tip_pge mode_tsx
# @perf
# @at off disable
# @at on enable
_start:
	xbegin fallback
	nop
off:	nop
	nop
on:	nop
	xend
	xbegin fallback
	nop
	xabort 3
fallback:
	nop
	hlt
