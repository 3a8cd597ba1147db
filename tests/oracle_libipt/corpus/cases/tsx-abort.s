# An RTM transaction that aborts by XABORT: MODE.TSX abort, FUP, TIP to the fallback.
# @covers tsx-abort mode_tsx
# @perf
_start:
	xbegin fallback
	nop
	xabort 1
	nop
fallback:
	nop
	hlt
