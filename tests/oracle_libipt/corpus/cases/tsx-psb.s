# A PSB+ inside an RTM transaction: it holds MODE.TSX (in transaction) besides the FUP and MODE.Exec,
# and the return after it is a TIP (its call was before the PSB); the transaction then commits.
# @covers tsx-begin tsx-commit tsx-psb mode_tsx psb
# @perf
# @at mid psb
_start:
	xbegin fallback
	call f
	xend
	nop
	hlt
fallback:
	hlt
f:	nop
mid:	nop
	ret
